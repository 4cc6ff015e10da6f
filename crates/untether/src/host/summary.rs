//! [`HostSummary`]: what a host measured (`Host::summary`, `Host::stop`).

use crate::stats::Samples;

/// What the host measured.
#[derive(Clone, Debug, Default)]
pub struct HostSummary {
    pub duration_s: f64,
    pub captured: u64,
    pub encoded: u64,
    pub sent: u64,
    pub keyframes: u64,
    pub dropped: u64,
    pub inputs_applied: u64,
    /// Input events the sink could not apply (no X equivalent, a full queue).
    pub inputs_dropped: u64,
    /// Capture ticks skipped because nothing on screen changed.
    pub unchanged: u64,
    pub audio_packets: u64,
    pub bytes_sent: u64,
    /// Of the WebRTC sessions (browsers, WHIP), not in `bytes_sent` (untether's protocol).
    pub webrtc_bytes_sent: u64,
    pub packets_sent: u64,
    pub malformed_datagrams: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_ignored: u64,
    /// Frames sent in more than one paced batch (`network.pacing`; 0 when pacing is off).
    /// Their `send` stage includes the pacing (the `pace` stage: time slept between batches).
    pub paced_frames: u64,
    /// The pacing window at the configured frame rate, µs (0: pacing off).
    pub pacing_window_us: u64,
    /// Per latency stage, what the host measured: capture, host_queue, convert, encode, send
    /// always; pace, audio_encode, sync_blocked when they were measured.
    pub stages: std::collections::BTreeMap<crate::stats::Stage, Samples>,
    /// Encoded video frame sizes, kB (a size, not a stage).
    pub frame_kbytes: Samples,
    /// Frames sent in slices: capture → first / last slice handed to the network.
    pub slice_out: (Samples, Samples),
    pub fatal: Option<String>,
    pub events: Vec<String>,
    /// The client's paths as the host saw them last (several with multipath).
    pub paths: Vec<untether_proto::PathStats>,
    /// Adaptive bitrate: encoder reconfigurations, and the target at the end (kbit/s).
    pub bitrate_changes: u64,
    pub final_bitrate_kbps: Option<u32>,
    /// Retransmission: data shards resent on the clients' ShardNacks.
    pub shards_retransmitted: u64,
    /// Every client of the run (connected now or gone), in the order they came.
    pub clients: Vec<super::clients::ClientSummary>,
    /// The most clients served at once (`host.max_clients`).
    pub max_clients: usize,
    /// Frame copies sent: one per frame per client that received it (`sent` counts frames).
    pub frame_copies_sent: u64,
    /// Keyframes asked for because a client joined.
    pub keyframes_for_joins: u64,
    /// Input events of viewers without a grant, dropped.
    pub inputs_dropped_viewer: u64,
    /// Viewers paused to keyframes, and dropped, for a link slower than the stream.
    pub viewers_paused: u64,
    pub viewers_dropped: u64,
    /// The encoder in use at the end (FFmpeg's name) and its codec.
    pub encoder: Option<String>,
    pub codec: Option<String>,
    /// Keyframes the host asked the encoder for (joins, keyframe requests, the application).
    pub forced_keyframes: u64,
    /// Intra-refresh sweeps started.
    pub refresh_sweeps: u64,
    /// Adaptive-bitrate targets the encoder could not apply in place.
    pub bitrate_changes_refused: u64,
    /// The largest keyframe and the largest other frame encoded, bytes (0: none).
    pub largest_keyframe_bytes: u64,
    pub largest_frame_bytes: u64,
    /// The other consumers of the stream (RTSP) and their viewers.
    pub consumers: Vec<super::consumer::ConsumerSummary>,
    /// Staleness of the host → client state (what the host published), the controller's.
    pub state_staleness: Option<untether_proto::Staleness>,
    /// The raw layer-2 transport: what the host's data plane ran on.
    pub link: crate::link::LinkReport,
}
