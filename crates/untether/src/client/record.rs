//! What a client run measured: per frame ([`FrameRecord`]), for the run ([`ClientRun`]) and
//! for audio ([`AudioRun`]); bounded to ten minutes of frames at 60 fps. Each thread of the
//! run writes its own part (`client::run`); the `ClientRun` is assembled from them at the end.

use std::collections::HashMap;
use std::net::SocketAddr;

use untether_media::audio::{Played, PlayoutStats, Tap};
use untether_media::stamp::Stamp;
use untether_proto::{ClientStats, ClockEstimate, FrameTiming, Micros, PublicKey, SessionParams};

/// What the audio playback measured.
#[derive(Clone, Debug, Default)]
pub struct AudioRun {
    pub driver: String,
    pub buffer_samples: u16,
    pub stats: PlayoutStats,
    /// When each packet's first sample left the device.
    pub played: Vec<Played>,
    /// The playout targets the buffer moved to, µs.
    pub targets: Vec<u64>,
    pub final_target_us: u64,
    pub tap: Option<Tap>,
}

/// Everything the client knows about one frame it decoded.
#[derive(Clone, Debug, Default)]
pub struct FrameRecord {
    /// The session it came from (0; one more after each reconnection): frame numbers restart
    /// with each session.
    pub session: u32,
    pub frame_number: u32,
    pub keyframe: bool,
    /// Host clock.
    pub capture_us: Micros,
    pub first_shard_us: Micros,
    pub last_shard_us: Micros,
    /// The decoder's first call for the frame (a frame sent in slices: its first slice's).
    pub decode_start_us: Micros,
    /// The call that gave the picture (the same for a frame sent whole).
    pub last_decode_start_us: Micros,
    pub decode_end_us: Micros,
    /// Time spent in the decoder for this frame, µs (for a frame sent in slices, the sum of
    /// its calls: they are spread over its arrival).
    pub decode_us: u64,
    /// Slices the frame was sent in (1: whole), and how many of them were lost (their region
    /// concealed).
    pub slices: u8,
    pub slices_lost: u8,
    /// A frame sent in slices: when its first slice was decoded (0: sent whole).
    pub first_slice_decoded_us: Micros,
    /// 0 when the picture was never shown (a newer one replaced it first).
    pub shown_us: Micros,
    pub bytes: usize,
    pub stamp: Option<Stamp>,
    /// The head pose the host rendered this frame for, with the client's sample time (None:
    /// not rendered for a pose, or its FramePose was lost twice): what late warp re-projects
    /// from.
    pub pose: Option<untether_proto::PoseSample>,
    /// When shown: the angle, degrees, between the head orientation the frame was rendered
    /// for (the host's prediction for this moment) and this client's newest local head pose
    /// then — the prediction's error as the viewer saw it, before late warp (None: no pose).
    pub pose_error_deg: Option<f32>,
    /// The decoded picture's size, pixels (a side-by-side stereo picture: both eyes).
    pub width: u32,
    pub height: u32,
    /// A 16×9 grid of luma samples from below the stamp: enough to see that the picture
    /// changed (input took effect, or a freeze), far too little to store pictures.
    pub thumbnail: Vec<u8>,
}

/// How the host's clock was related to the client's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Estimated from ping/pong (assumes symmetric paths; the uncertainty is half the best
    /// round trip).
    #[default]
    Estimated,
    /// Host and client read the same monotonic clock (one machine): the offset is exactly 0.
    Shared,
    /// The user says the clocks are synchronised (PTP, chrony): the offset is taken as 0.
    Synchronized,
}

impl ClockMode {
    pub fn name(self) -> &'static str {
        match self {
            ClockMode::Estimated => "estimated",
            ClockMode::Shared => "shared",
            ClockMode::Synchronized => "synchronized",
        }
    }
}

/// What one client run measured.
#[derive(Clone, Debug, Default)]
pub struct ClientRun {
    pub params: Option<SessionParams>,
    /// The raw layer-2 transport: what the client's data plane ran on.
    pub link: crate::link::LinkReport,
    pub started_us: Micros,
    /// When the run's first session started (later reconnections leave it).
    pub connected_us: Option<Micros>,
    pub ended_us: Micros,
    pub records: Vec<FrameRecord>,
    pub timings: HashMap<u32, FrameTiming>,
    pub stats: ClientStats,
    pub clock: Option<ClockEstimate>,
    pub clock_mode: ClockMode,
    pub decode_errors: u64,
    pub decoded: u64,
    /// Frames decoded but not shown: an intra-refresh sweep after a join or a loss was still
    /// under way (the picture was not yet clean). Decode errors among them are expected (a
    /// reference the client never had) and counted here, not as errors.
    pub held: u64,
    pub held_decode_errors: u64,
    /// The decoder of the last session (`h264 (software)`, `hevc with vaapi on …`).
    pub decoder: Option<String>,
    /// The encoder, preset and conversion the host of the last session said make the stream
    /// (None: a host that does not say).
    pub host_encoder: Option<untether_proto::HostEncoder>,
    pub shown: u64,
    pub dropped_presenter: u64,
    pub stamp_unreadable: u64,
    /// Pictures decoded with the region of a lost slice concealed.
    pub concealed: u64,
    /// Frames sent in slices: when the host's encoder handed their first and last slice to
    /// the network, µs after capture (SliceTiming), with the slice count.
    pub slice_timings: HashMap<u32, (u8, u32, u32)>,
    pub inputs_sent: u64,
    /// Pointer positions and head poses set on the latest-wins state channel.
    pub state_updates: u64,
    /// Decoded frames whose head pose (the host's FramePose) was known.
    pub frames_with_pose: u64,
    /// Staleness of the client → host state channel at the end of the run.
    pub state_staleness: Option<untether_proto::Staleness>,
    /// Pose-to-photon samples (present time, latency), client clock, µs (`client::photon`).
    pub pose_to_photon: Vec<(Micros, Micros)>,
    /// Presents not measured: no marker read, a yaw the head had twice in the window, one it
    /// never had.
    pub pose_photon_unread: u64,
    pub pose_photon_ambiguous: u64,
    pub pose_photon_unmatched: u64,
    /// The host's key (authenticated by the handshake), once connected.
    pub host_key: Option<PublicKey>,
    /// Input events the session refused (too many unacknowledged: the host is unreachable).
    pub inputs_refused: u64,
    /// Input response samples: (seq, sent_us, reflected_in_decoded_frame_us), client clock.
    pub input_responses: Vec<(u32, Micros, Micros)>,
    pub pings: Vec<u64>,
    pub outcome: Option<String>,
    /// Audio playback, when enabled.
    pub audio: Option<AudioRun>,
    /// Frames written to the pipe sink.
    pub sink_frames: u64,
    /// Events read from registered input devices and sent.
    pub device_events: u64,
    /// The host address of each path (path 0: the main one; more with `client.paths`).
    pub paths: Vec<SocketAddr>,
    /// The current session's number (0; one more after each reconnection). `timings` and
    /// `stats` are this session's.
    pub session: u32,
    /// Each time the host went away: (lost, resumed) client clock, µs (resumed 0: never).
    pub reconnects: Vec<(Micros, Micros)>,
    /// Each session that connected, in order.
    pub sessions: Vec<crate::client::SessionSpan>,
    /// ICMP port-unreachable reports on the main path (a live session survives forged ones).
    pub refusals: u64,
    /// The role the host gave this client last (a host serving several clients).
    pub role: Option<untether_proto::ClientRole>,
    /// A viewer whose input the host applies.
    pub input_granted: bool,
    /// Times the host paused this viewer to keyframes (its link could not carry the stream).
    pub times_paused: u32,
    /// `--no-decode`: complete frames received and dropped undecoded.
    pub undecoded: u64,
    /// The run decoded (false: `--no-decode`).
    pub decoding: bool,
    /// What showed the pictures, for the report's `config.display`: `gl-window`,
    /// `gl-window-vr`, `sdl-window` (None: no picture was shown, or headless).
    pub presenter: Option<String>,
    /// The host's rumble (`HAPTICS + n`) on this client's game controllers: changes, commands
    /// applied, renewed, refused (no motors) and ignored (no controller open at that number).
    pub rumble: untether_media::gamepad::RumbleCounts,
}

/// The most frames whose records we keep (10 minutes at 60 fps).
pub(crate) const MAX_RECORDS: usize = 36_000;

/// Keeps `record` unless `records` holds [`MAX_RECORDS`] already.
pub(crate) fn keep_record(records: &mut Vec<FrameRecord>, record: FrameRecord) {
    if records.len() < MAX_RECORDS {
        records.push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_bounded() {
        let mut run = ClientRun::default();
        for i in 0..(MAX_RECORDS + 5) {
            keep_record(
                &mut run.records,
                FrameRecord {
                    frame_number: i as u32,
                    ..Default::default()
                },
            );
        }
        assert_eq!(run.records.len(), MAX_RECORDS);
        assert_eq!(run.records[0].frame_number, 0, "the first frames are kept");
    }
}
