//! What the host session reports: client ids and infos, events, pairing news, per-client
//! status and the session's counters.

use std::net::SocketAddr;

use crate::crypto::Suite;
use crate::handshake::PublicKey;
use crate::reliable::InputRecord;
use crate::state::StateSenderStats;
use crate::wire::{ClientRole, Feedback, RejectReason, SessionParams};
use crate::{GoneReason, Micros};

#[allow(unused_imports)]
use super::HostSession;

/// One client's session on the host, numbered from 1 in the order they were admitted (never
/// reused within a run: a client that reconnects gets a new number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u32);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A receiver of the stream that is not a native client (those are peers of the session):
/// registered with [`HostSession::attach_receiver`] so that roles and keyframe requests have
/// one authority for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReceiverKind {
    /// A WebRTC browser: controls only while no native client is connected.
    Browser,
    /// An RTSP player: never controls, no input.
    Rtsp,
    /// A WHIP publication: never controls, no input.
    Publication,
}

impl ReceiverKind {
    /// Whether a receiver of this kind may ever control.
    pub fn may_control(self) -> bool {
        self == ReceiverKind::Browser
    }
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    /// A client's session started (its first picture follows with the next keyframe).
    ClientConnected {
        client: ClientId,
        addr: SocketAddr,
        name: String,
        role: ClientRole,
    },
    /// A client asked for a stream (size, frame rate, bit rate; [`crate::StreamWants`]):
    /// what the host granted (within its limits; `clamped`: something asked for was above
    /// them), or, when others already watch the stream (`shared`), the stream it joined.
    /// Follows its [`HostEvent::ClientConnected`].
    StreamGranted {
        client: ClientId,
        asked: crate::StreamWants,
        granted: SessionParams,
        clamped: bool,
        shared: bool,
    },
    ClientGone {
        client: ClientId,
        addr: SocketAddr,
        reason: GoneReason,
    },
    /// Encode the next frame as a keyframe (a client lost a frame, or one joined).
    KeyframeRequested,
    /// An input event of the controller or of a viewer granted input, in order, exactly once
    /// per client. A viewer's input without a grant is dropped and counted
    /// ([`ClientStatus::inputs_dropped`]).
    Input {
        client: ClientId,
        record: InputRecord,
    },
    Feedback {
        client: ClientId,
        feedback: Feedback,
    },
    /// A client's latency over its last report interval (glass-to-glass and its own stages).
    Latency {
        client: ClientId,
        report: crate::wire::LatencyReport,
    },
    /// The adaptive bitrate controller (on the controller's link) set a new target:
    /// reconfigure the encoder.
    BitrateChanged { kbps: u32 },
    /// An authenticated client was refused (not paired, revoked, busy, no codec in common …):
    /// for the operator. `message` is what the client was told.
    ClientRefused {
        addr: SocketAddr,
        fingerprint: String,
        reason: RejectReason,
        message: String,
    },
    /// A client's role changed (a new controller, a grant given or taken): the controller's
    /// input and pose drive the application from now on.
    RoleChanged {
        client: ClientId,
        role: ClientRole,
        input_granted: bool,
    },
    /// A viewer was paused to keyframes only (its link cannot carry the stream), or resumed.
    ViewerPaused { client: ClientId, paused: bool },
    /// Nothing was heard from a client for `silence_us` (it is sent nothing, and control
    /// passed on), or it was heard again (`silent: false`: live from the next keyframe).
    ClientSilent { client: ClientId, silent: bool },
    /// The role of a receiver of another kind ([`HostSession::attach_receiver`]) changed: a
    /// browser became the controller (its input applies: bump the controller epoch and tell
    /// it) or stopped being it.
    ReceiverRoleChanged {
        receiver: ClientId,
        kind: ReceiverKind,
        role: ClientRole,
    },
    /// The client at `addr` offers the raw layer-2 transport: it receives frames of
    /// `ethertype` at `mac` (answer with [`HostSession::send_link_frame`]; PROTOCOL.md §7.3).
    LinkAddress {
        addr: SocketAddr,
        ethertype: u16,
        mac: [u8; 6],
    },
}

/// An unknown client asked for access (its key is authenticated: it completed the handshake).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessRequest {
    pub key: PublicKey,
    pub fingerprint: String,
    pub name: String,
    pub addr: SocketAddr,
    /// First and latest request.
    pub first_us: Micros,
    pub last_us: Micros,
    pub attempts: u32,
}

/// Pairing news for the application (to persist, show, or log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairingEvent {
    /// An unknown client asked for access; show it to the user (`untether pair`).
    AccessRequested(AccessRequest),
    /// A client paired with the one-time PIN: add it to the stored allowlist.
    Paired {
        key: PublicKey,
        fingerprint: String,
        name: String,
    },
    /// A PIN pairing attempt failed.
    PinFailed {
        addr: SocketAddr,
        attempts_left: u32,
    },
}

/// A one-time PIN the host accepts for pairing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairingPin {
    pub pin: String,
    /// Not accepted from this time on.
    pub expires_us: Micros,
    /// Failed attempts still allowed.
    pub attempts_left: u32,
}

/// A connected client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub id: ClientId,
    pub addr: SocketAddr,
    pub name: String,
    pub connection_id: u64,
    pub connected_us: Micros,
    /// The client's authenticated long-term key.
    pub key: PublicKey,
    pub fingerprint: String,
    pub suite: Suite,
    /// A VR client's eye views (its message 3), if it sent them.
    pub view: Option<crate::ViewInfo>,
}

/// Where a client's stream stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamState {
    /// Just joined: waiting for the next keyframe (or refresh entry point) to start on.
    AwaitingPicture,
    /// Every frame.
    Live,
    /// Keyframes only: its link could not carry the stream.
    Paused,
    /// Nothing heard from it for [`HostConfig::silence_us`](super::HostConfig): no video,
    /// no control, until it is heard again (or its idle timeout ends it).
    Silent,
}

impl StreamState {
    pub fn name(self) -> &'static str {
        match self {
            StreamState::AwaitingPicture => "awaiting picture",
            StreamState::Live => "live",
            StreamState::Paused => "paused",
            StreamState::Silent => "silent",
        }
    }
}

/// One client as the host sees it now (for reports and the operator).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientStatus {
    pub info: ClientInfo,
    pub role: ClientRole,
    /// A viewer whose input the host applies.
    pub input_granted: bool,
    pub state: StreamState,
    pub frames_sent: u64,
    /// Frames not sent to it: before its first picture, or while paused.
    pub frames_skipped: u64,
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub parity_shards_sent: u64,
    pub shards_retransmitted: u64,
    pub keyframe_requests: u64,
    /// Input events received (reliable channel, each once) …
    pub inputs_received: u64,
    /// … of which dropped: a viewer without an input grant.
    pub inputs_dropped: u64,
    /// Times it was paused to keyframes (within the last minute).
    pub pauses: u32,
    /// Downstream datagram loss, from its Feedback (None before the first).
    pub loss: Option<f64>,
    /// Its smoothed RTT as it reports it, µs (None: not yet).
    pub rtt_us: Option<u64>,
    /// Queueing delay measured by the host's pings (adaptive bitrate), µs.
    pub queue_us: Option<u64>,
}

/// Counters of the host session (all clients).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub bytes_received: u64,
    pub datagrams_received: u64,
    pub shards_sent: u64,
    /// Frames sent to at least one client (a frame counts once however many received it).
    pub frames_sent: u64,
    /// Slices of frames sent in slices (docs/PROTOCOL.md §6.3).
    pub slices_sent: u64,
    /// Frame copies sent: one per client that received the frame.
    pub frame_copies_sent: u64,
    /// Parity shards sent (included in `shards_sent`).
    pub parity_shards_sent: u64,
    /// Frames sent with at least one parity shard.
    pub frames_with_parity: u64,
    /// Datagrams that failed to parse.
    pub malformed_datagrams: u64,
    /// Well-formed datagrams from an address or connection id that has no session.
    pub unknown_connection: u64,
    /// Protected datagrams whose tag did not verify (tampered, forged, wrong key).
    pub auth_failures: u64,
    /// Protected datagrams of a session that verified and were new (what may move a client:
    /// its raw layer-2 link follows only these).
    pub datagrams_authentic: u64,
    pub duplicate_datagrams: u64,
    pub hellos_rejected: u64,
    pub handshakes_started: u64,
    pub handshakes_completed: u64,
    pub handshakes_failed: u64,
    pub handshakes_evicted: u64,
    pub handshakes_rate_limited: u64,
    /// Retry tokens sent instead of starting a handshake (rate limit reached).
    pub retries_sent: u64,
    /// Replies withheld by the 3× anti-amplification limit.
    pub amplification_limited: u64,
    pub version_negotiations_sent: u64,
    pub access_requests: u64,
    /// New access requests refused: their address had made too many this minute (or too
    /// many addresses were asking at once).
    pub access_requests_refused: u64,
    /// Pending access requests pushed out by a new one while the list was full (the least
    /// recently asked of the busiest address).
    pub access_requests_evicted: u64,
    /// Pending access requests forgotten: not repeated within the TTL.
    pub access_requests_expired: u64,
    pub clients_refused: u64,
    /// Clients that fell silent (nothing heard for `silence_us`), and those heard again.
    pub clients_silenced: u64,
    pub clients_heard_again: u64,
    pub pin_failures: u64,
    /// PIN handshakes refused (or ignored) by the host's one admission before any work: their
    /// address used up its budget, or guessed wrong too often at any door (browsers, RTSP).
    pub pin_attempts_refused: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_honoured: u64,
    pub keyframe_requests_ignored_cooldown: u64,
    pub keyframe_requests_ignored_already_sent: u64,
    /// Keyframes asked for because a client joined.
    pub keyframes_for_joins: u64,
    /// Keyframe requests of paused viewers beyond one a second (ignored; also counted in
    /// `keyframe_requests_ignored_limit`).
    pub keyframe_requests_ignored_paused: u64,
    /// Keyframe requests of viewers beyond their own one a second, or beyond the two a second
    /// all viewers together may cause (ignored).
    pub keyframe_requests_ignored_limit: u64,
    /// Joins whose keyframe was put off because their key kept reconnecting.
    pub joins_backed_off: u64,
    pub inputs_received: u64,
    pub inputs_duplicate: u64,
    /// Input events of viewers without an input grant, dropped.
    pub inputs_dropped_viewer: u64,
    pub state_packets_received: u64,
    /// The host → client state channel's sender (the controller's).
    pub state_out: StateSenderStats,
    pub clients_connected: u64,
    pub key_updates: u64,
    /// Client addresses added as paths (multipath).
    pub paths_added: u64,
    /// PathResponses that answered no challenge (stale, or from another address).
    pub path_responses_unknown: u64,
    pub path_challenges_sent: u64,
    /// ShardNacks and SliceNacks received.
    pub shard_nacks_received: u64,
    /// ShardNacks (SliceNacks) for frames (slices) no longer kept.
    pub shard_nacks_too_late: u64,
    pub shards_retransmitted: u64,
    /// Shard indices a NACK named more than once (or past the frame's shards): not resent.
    pub shard_nacks_duplicates: u64,
    /// Shards not resent because they had been resent to that client twice already.
    pub shard_resends_over_limit: u64,
    /// Shards not resent because the client's resend byte budget was spent.
    pub shard_resends_over_budget: u64,
    /// Accepts sent again ahead of video frames because the client had not yet been heard
    /// from under the session keys.
    pub accepts_repeated: u64,
    /// Role frames sent (first ones and repeats until acknowledged).
    pub roles_sent: u64,
    /// Times a controller was chosen (first client, hand-over, the controller leaving).
    pub controller_changes: u64,
    /// Viewers paused to keyframes, and dropped, for a link slower than the stream.
    pub viewers_paused: u64,
    pub viewers_dropped: u64,
}

/// No client to send to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no client is connected")]
pub struct NoClient;
