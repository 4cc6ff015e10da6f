//! What other threads hand the host's network driver ([`super::network::HostNet`]): encoded
//! frames and slices from the encoder stage, audio, a goodbye, a question ([`super::ask::Ask`]), browsers' commands.
//! A leaf of `host/`: the encoder stage and the sources import it without importing the driver.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use untether_proto::{
    AudioPacket, ClientId, FrameTiming, KeyframeDecision, Micros, PoseSample, SliceId,
};

/// What other threads hand the host's network driver.
pub(crate) enum HostCommand {
    /// An encoded frame for every client (dropped when none is connected).
    Frame(OutgoingFrame),
    /// One slice of a frame sent in slices, the moment x264 wrote it (docs/PROTOCOL.md §6.3).
    Slice(OutgoingSlice),
    /// x264 finished a frame sent in slices (after its last [`HostCommand::Slice`]): its
    /// timing, sent to the client once its last datagram has left.
    SlicesDone(SlicesDone),
    /// Opus packets to send now (to every client).
    Audio(Vec<AudioPacket>),
    /// The source ended: say goodbye to the clients.
    Close,
    /// A question from another thread (the application's `Host`, the dashboard), answered
    /// on the driver's thread.
    Ask(super::ask::Ask),
    /// A keyframe request of another consumer of the stream (RTSP), registered with the
    /// session as this receiver: the session's one gate decides, and the decision is counted.
    ReceiverKeyframe(ClientId, Arc<KeyframeCounts>),
    /// The application asked for a keyframe ([`super::FrameSender::request_keyframe`]): through
    /// the session's one gate and its cooldown, like any other request.
    AppKeyframe,
    /// Browsers and WHIP publishing (`super::webrtc`).
    WebRtc(super::webrtc::types::WebRtcCommand),
}

/// An encoded frame on its way from the encoder stage to the network.
pub(crate) struct OutgoingFrame {
    pub frame_number: u32,
    pub capture_us: Micros,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with this frame.
    pub refresh_start: bool,
    /// The encoder's buffer, shared by every client's copy, the retransmission ring and the
    /// other consumers (RTSP).
    pub data: Arc<Vec<u8>>,
    /// When the encoder handed it over: the start of its `send` stage.
    pub handed_us: Micros,
    /// Everything but the send times, filled in once each client's last datagram left.
    pub timing: FrameTiming,
    /// The client's head pose it was rendered for (told to the client before its shards and
    /// again after them).
    pub pose: Option<PoseSample>,
}

/// One slice of a frame on its way from x264's slice thread to the network.
pub(crate) struct OutgoingSlice {
    pub frame_number: u32,
    pub capture_us: Micros,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with its frame.
    pub refresh_start: bool,
    pub slice: SliceId,
    pub data: Vec<u8>,
    /// The client's head pose the frame was rendered for.
    pub pose: Option<PoseSample>,
    /// When x264's slice thread handed it over.
    pub handed_us: Micros,
}

/// The end of a frame sent in slices.
pub(crate) struct SlicesDone {
    pub frame_number: u32,
    pub keyframe: bool,
    pub capture_us: Micros,
    /// The frame's slices put together in picture order, when browsers may be watching
    /// (they take frames whole); shared with the other consumers.
    pub whole: Option<Arc<Vec<u8>>>,
    pub slice_count: u8,
    /// Capture → first / last slice handed over, µs.
    pub first_out_us: u32,
    pub last_out_us: u32,
    /// Everything but the send times.
    pub timing: FrameTiming,
}

/// What the gate decided for one consumer's requests.
#[derive(Default, Debug)]
pub(crate) struct KeyframeCounts {
    honoured: AtomicU64,
    limited: AtomicU64,
}

impl KeyframeCounts {
    /// The driver records the gate's decision.
    pub fn record(&self, decision: KeyframeDecision) {
        let c = match decision {
            KeyframeDecision::Honour => &self.honoured,
            _ => &self.limited,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// (honoured, not honoured) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.honoured.load(Ordering::Relaxed),
            self.limited.load(Ordering::Relaxed),
        )
    }
}
