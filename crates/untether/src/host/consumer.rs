//! Other consumers of the host's one encoded stream: an RTSP server for ordinary players
//! (crate `untether-rtsp`), and whatever else serves viewers that are not our own clients.
//!
//! A consumer sees every encoded video frame as the encoder stage produced it (the x264 access
//! unit, shared through an `Arc`, never copied for it; a frame sent in slices is put together
//! from its slices once) and every Opus packet as the audio
//! stage produced it, on the producing thread: it must hand them over to its own threads at
//! once (bounded; when full it drops, counts and asks for a keyframe), never block. It asks the
//! encoder for a keyframe through [`KeyframeRequests`] (the encoder stage's event channel,
//! behind the host's keyframe cooldown), and tells the host whether anyone watches through it:
//! the host's sources run while a client is connected or a consumer has a viewer.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use untether_proto::{AudioPacket, ClientId, Micros};

use super::commands::{HostCommand, KeyframeCounts};
use crate::driver::Handle;

/// An encoded video frame, as every consumer sees it.
#[derive(Clone, Debug)]
pub struct EncodedVideo {
    /// The H.264 access unit in Annex B byte-stream form, as x264 produced it (SPS and PPS
    /// in front of every keyframe). Shared: keep a clone of the `Arc`, never copy it.
    pub data: Arc<Vec<u8>>,
    pub keyframe: bool,
    /// When the frame was captured (host clock, [`crate::clock::now_us`]).
    pub capture_us: Micros,
}

/// What the host's stream is, told to a consumer before its first frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    /// Opus audio at 48 kHz (channels), or no audio.
    pub audio_channels: Option<u8>,
}

/// One viewer of a consumer, as the host's summary lists it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ViewerSummary {
    /// The viewer's address (IP, as the consumer's transport saw it).
    pub address: String,
    /// How it receives the stream (e.g. `rtp/udp`, `rtp/tcp`; empty before it set up).
    pub transport: String,
    /// Seconds since the consumer started: when it connected, and when it left (None: still
    /// there).
    pub connected_s: f64,
    pub left_s: Option<f64>,
}

/// What a consumer did, for the host's summary and report (docs/REPORT.md, `consumers`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ConsumerSummary {
    /// What kind of consumer (`rtsp`).
    pub kind: String,
    /// Where viewers reach it (e.g. `rtsp://0.0.0.0:8554/untether`).
    pub url: String,
    /// The viewers now and before (the most recent ones, bounded).
    pub viewers: Vec<ViewerSummary>,
    /// Every viewer that connected.
    pub viewers_total: u64,
    /// Requests refused for want of credentials (or with wrong ones).
    pub refused: u64,
    /// Video frames handed to the consumer's server (once each, whatever the number of
    /// viewers).
    pub frames_sent: u64,
    /// Frames dropped because the consumer's queue was full.
    pub frames_dropped: u64,
    /// Frames not sent because the consumer waited for a keyframe (after a drop, or before
    /// its first one): nobody could have decoded them.
    pub frames_skipped: u64,
    pub audio_packets_sent: u64,
    pub audio_packets_dropped: u64,
    /// Keyframes the consumer asked the encoder for: honoured, and ignored (cooldown).
    pub keyframe_requests: u64,
    pub keyframe_requests_ignored: u64,
}

impl fmt::Display for ConsumerSummary {
    /// One line for the terminal: `rtsp rtsp://…: 2 viewers (3 in all) · frames sent …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.viewers.iter().filter(|v| v.left_s.is_none()).count();
        write!(
            f,
            "{} {}: {now} viewer{} now ({} in all, {} refused) · frames sent {} · dropped {} (queue full) · skipped {} (waiting for a keyframe) · audio packets {} (dropped {}) · keyframes asked {} (ignored {}, cooldown)",
            self.kind,
            self.url,
            if now == 1 { "" } else { "s" },
            self.viewers_total,
            self.refused,
            self.frames_sent,
            self.frames_dropped,
            self.frames_skipped,
            self.audio_packets_sent,
            self.audio_packets_dropped,
            self.keyframe_requests,
            self.keyframe_requests_ignored
        )
    }
}

/// Another consumer of the encoded stream. Every method may be called from any of the host's
/// threads and must return at once.
pub trait StreamConsumer: Send + Sync {
    /// Called once when the host starts, before any frame: what the stream is, and how to ask
    /// the encoder for a keyframe.
    fn attach(&self, stream: StreamInfo, keyframes: KeyframeRequests);
    /// A frame, right after the encoder produced it (on the encoder's thread).
    fn video(&self, frame: &EncodedVideo);
    /// An Opus packet (10 ms), right after the audio stage produced it.
    fn audio(&self, packet: &AudioPacket);
    /// Whether someone watches through this consumer now: the host's sources run (and
    /// encode) while a client is connected or any consumer has a viewer.
    fn watching(&self) -> bool;
    /// What it did so far.
    fn summary(&self) -> ConsumerSummary;
}

/// A consumer in a [`HostSetup`](super::HostSetup).
#[derive(Clone)]
pub struct Consumer(pub Arc<dyn StreamConsumer>);

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Consumer")
    }
}

/// How a consumer asks for a keyframe: through the host's network driver to the protocol
/// session's one keyframe gate (`HostSession::receiver_keyframe_request`), where the consumer
/// is a receiver of its own (registered with the session's roles: it never controls) and
/// meets the same cooldown and the same per-viewer limits as our clients' requests. A consumer
/// that needs a keyframe asks on every frame until one comes, as our clients do; the gate
/// spaces the keyframes out.
#[derive(Clone)]
pub struct KeyframeRequests {
    net: Handle<HostCommand>,
    receiver: ClientId,
    counts: Arc<KeyframeCounts>,
}

impl KeyframeRequests {
    pub(crate) fn new(net: Handle<HostCommand>, receiver: ClientId) -> KeyframeRequests {
        KeyframeRequests {
            net,
            receiver,
            counts: Arc::default(),
        }
    }

    /// Asks for a keyframe now; true if the request reached the host's driver (false: the
    /// host has stopped). The session's keyframe gate decides: see [`Self::counts`].
    pub fn request(&self) -> bool {
        self.net.send(HostCommand::ReceiverKeyframe(
            self.receiver,
            self.counts.clone(),
        ))
    }

    /// (honoured, not honoured: within the cooldown or past this receiver's limits) so far.
    pub fn counts(&self) -> (u64, u64) {
        self.counts.get()
    }
}

/// The host's consumers, set once when it starts.
#[derive(Default)]
pub(crate) struct Consumers(OnceLock<Vec<Arc<dyn StreamConsumer>>>);

impl Consumers {
    /// Attaches `list` and keeps it (once; a second call is ignored); `keyframes` makes each
    /// consumer's way to ask for keyframes (a receiver of the session's each).
    pub fn set(
        &self,
        list: &[Consumer],
        stream: StreamInfo,
        mut keyframes: impl FnMut() -> KeyframeRequests,
    ) {
        for c in list {
            c.0.attach(stream, keyframes());
        }
        let _ = self.0.set(list.iter().map(|c| c.0.clone()).collect());
    }

    fn all(&self) -> &[Arc<dyn StreamConsumer>] {
        self.0.get().map_or(&[], |v| v.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.all().is_empty()
    }

    pub fn video(&self, frame: &EncodedVideo) {
        for c in self.all() {
            c.video(frame);
        }
    }

    pub fn audio(&self, packet: &AudioPacket) {
        for c in self.all() {
            c.audio(packet);
        }
    }

    pub fn watching(&self) -> bool {
        self.all().iter().any(|c| c.watching())
    }

    pub fn summaries(&self) -> Vec<ConsumerSummary> {
        self.all().iter().map(|c| c.summary()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;
    use untether_proto::KeyframeDecision;

    #[test]
    fn keyframe_requests_go_to_the_driver_as_this_consumers_receiver() {
        let (net, mailbox) = crate::driver::channel().expect("channel");
        let k = KeyframeRequests::new(net, ClientId(7));
        assert!(k.request());
        let got = mailbox.drain();
        let [HostCommand::ReceiverKeyframe(id, counts)] = got.as_slice() else {
            panic!("one keyframe request for the driver");
        };
        assert_eq!(*id, ClientId(7));
        // The driver records what the session's gate decided; the consumer reads it.
        counts.record(KeyframeDecision::Honour);
        counts.record(KeyframeDecision::Cooldown);
        assert_eq!(k.counts(), (1, 1));
        // The host stopped (the driver's end is gone): not sent.
        drop(got);
        drop(mailbox);
        assert!(!k.request());
    }

    #[derive(Default)]
    struct Counting {
        frames: AtomicU64,
        audio: AtomicU64,
        watching: AtomicBool,
        attached: Mutex<Option<StreamInfo>>,
    }

    impl StreamConsumer for Counting {
        fn attach(&self, stream: StreamInfo, _keyframes: KeyframeRequests) {
            *crate::host::shared::lock(&self.attached) = Some(stream);
        }
        fn video(&self, _frame: &EncodedVideo) {
            self.frames.fetch_add(1, Ordering::Relaxed);
        }
        fn audio(&self, _packet: &AudioPacket) {
            self.audio.fetch_add(1, Ordering::Relaxed);
        }
        fn watching(&self) -> bool {
            self.watching.load(Ordering::Relaxed)
        }
        fn summary(&self) -> ConsumerSummary {
            ConsumerSummary {
                kind: "counting".into(),
                frames_sent: self.frames.load(Ordering::Relaxed),
                ..Default::default()
            }
        }
    }

    #[test]
    fn every_consumer_sees_every_frame_and_any_one_watching_counts() {
        let consumers = Consumers::default();
        assert!(consumers.is_empty() && !consumers.watching());
        let (a, b) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
        let stream = StreamInfo {
            width: 1280,
            height: 720,
            fps: 60,
            audio_channels: Some(2),
        };
        let (net, _mailbox) = crate::driver::channel().expect("channel");
        let mut ids = 0;
        consumers.set(&[Consumer(a.clone()), Consumer(b.clone())], stream, || {
            ids += 1;
            KeyframeRequests::new(net.clone(), ClientId(ids))
        });
        assert_eq!(ids, 2, "a receiver for each consumer");
        assert_eq!(*crate::host::shared::lock(&a.attached), Some(stream));
        let frame = EncodedVideo {
            data: Arc::new(vec![0, 0, 0, 1, 0x65]),
            keyframe: true,
            capture_us: 5,
        };
        consumers.video(&frame);
        consumers.video(&frame);
        consumers.audio(&AudioPacket {
            seq: 0,
            pts_us: 0,
            samples: 480,
            opus: vec![1],
            prev_opus: Vec::new(),
        });
        assert_eq!(a.frames.load(Ordering::Relaxed), 2);
        assert_eq!(b.audio.load(Ordering::Relaxed), 1);
        assert!(!consumers.watching());
        b.watching.store(true, Ordering::Relaxed);
        assert!(consumers.watching());
        let s = consumers.summaries();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].frames_sent, 2);
    }
}
