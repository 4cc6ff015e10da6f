//! The host's side of the protocol, sans-IO: serves several clients at once from one stream.
//!
//! Drive it with [`HostSession::handle_datagram`] and [`HostSession::handle_timeout`], feed it
//! encoded frames with [`HostSession::send_frame_shared`] (or [`HostSession::send_frame`]), and
//! drain [`HostSession::poll_transmit`], [`HostSession::poll_event`] and
//! [`HostSession::poll_pairing_event`]; [`HostSession::poll_timeout`] says when to call
//! `handle_timeout` next. It never reads a clock: every call takes `now`.
//!
//! **Several clients, one stream** (docs/ARCHITECTURE.md, "Several clients"): one
//! `HostSession` holds up to [`HostConfig::max_clients`] client sessions ([`ClientId`]), each
//! admitted by the same handshake responder, pairing rules and rate limits, each with its own
//! keys, packet numbers, paths, input channels, FEC amount, retransmissions and role. They all
//! receive the host's one stream: a frame's shard layout and its Reed–Solomon parity are
//! computed once ([`frame`]), then sealed and queued per client (controller first); the last
//! frames' shards are kept once, in a shared ring, for every client's retransmissions. One
//! client is the **controller** (its input drives the application, its head pose is the
//! scene's, the adaptive bitrate follows its link); the others are **viewers** whose input is
//! dropped and counted unless granted ([`roles`]). A viewer that cannot keep up is paused to
//! keyframes, then dropped ([`health`]); it never holds the others back.
//!
//! Security (docs/PROTOCOL.md): a Noise `XX` handshake authenticates both sides; every datagram
//! after it is AEAD-protected; the client's static key must be on the allowlist (or paired with
//! a one-time PIN) unless the policy is [`AccessPolicy::Open`]. Datagrams with an unknown
//! connection id or a failing tag are counted and dropped before anything is allocated; the
//! established sessions are looked up first and never share state with handshakes in progress,
//! which are bounded in number, rate-limited and never answered with more than 3× the bytes
//! their address sent.

mod frame;
mod handshake;
pub mod health;
mod peer;
mod roles;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use crate::crypto::{Suite, ALL_SUITES, DEFAULT_KEY_UPDATE_LOG2};
use crate::fec::{FecEncoder, FecPolicy};
use crate::handshake::{PublicKey, SessionRng, StaticKeypair};
use crate::keyframe::KeyframeGate;
use crate::paths::{PathConfig, PathStats, MAX_PATHS};
use crate::pose::PoseSample;
use crate::rate::{RateConfig, RateController, RateStats};
use crate::reliable::InputRecord;
use crate::state::{
    Staleness, StateConfig, StateEntry, StateKey, StateReceiver, StateSenderStats, StateValue,
};
use crate::wire::{
    self, ByeReason, ClientRole, Feedback, FrameTiming, RejectReason, SessionParams,
};
use crate::{GoneReason, Micros, Transmit};

pub use frame::{ClientDatagrams, FrameMeta};
pub use handshake::{AMPLIFICATION_FACTOR, HANDSHAKE_REPEAT_ANSWER_US};
pub use health::{HealthConfig, SlowViewer};

use frame::SentFrame;
use handshake::{Bucket, Pending};
use peer::Peer;

/// Who may open a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPolicy {
    /// Any client that completes the handshake (still authenticated and encrypted). For demos
    /// and tests on a trusted machine.
    Open,
    /// Only clients whose key is allowed ([`HostConfig::allowed_clients`],
    /// [`HostSession::allow_client`]) or that pair with the current one-time PIN. Others leave
    /// an access request for the host's user.
    Allowlist,
}

/// A codec a host can encode, and the refresh period of its stream
/// ([`SessionParams::refresh_period`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecOffer {
    pub codec: crate::wire::Codec,
    pub refresh_period: u16,
}

/// Host settings.
#[derive(Clone)]
pub struct HostConfig {
    /// The session parameters every client is accepted with; `params.codec` (and
    /// `params.refresh_period`) are the stream's, set from [`codecs`](Self::codecs) when the
    /// first client is admitted.
    pub params: SessionParams,
    /// The codecs this host can encode, best first, each with its stream's refresh period
    /// (empty: only `params.codec`, with `params.refresh_period`). The host has one stream: a
    /// client admitted while no other is connected is given the first codec of its own list,
    /// in its order of preference, that is here ([`crate::wire::choose_codec`]), and the
    /// stream takes that codec; a client joining others is given the stream's codec. None in
    /// common is a Reject naming both lists.
    pub codecs: Vec<CodecOffer>,
    /// Which monotonic clock the application reads (see `ControlFrame::ClockId`), told to the
    /// client beside the Accept; None: not told (the client estimates the offset).
    pub clock_id: Option<[u8; 16]>,
    /// After honouring a keyframe request, ignore further ones for this long.
    pub keyframe_cooldown_us: Micros,
    /// Mixed into the random generator's seed (kept for compatibility; `entropy` is the seed).
    pub connection_id_seed: u64,
    /// The host's long-term key pair (its identity).
    pub identity: StaticKeypair,
    pub access: AccessPolicy,
    /// Keys of clients allowed to connect (with [`AccessPolicy::Allowlist`]).
    pub allowed_clients: Vec<PublicKey>,
    /// Keys of clients whose access was revoked: refused without an access request.
    pub revoked_clients: Vec<PublicKey>,
    /// AEAD suites the host accepts ([`Suite::bit`] mask).
    pub suites: u8,
    /// The host → client latest-wins state channel (its bandwidth budget, per client): see
    /// [`HostSession::publish_state`].
    pub state: StateConfig,
    /// Send video shards authenticated but not encrypted (control and input stay encrypted).
    pub video_auth_only: bool,
    /// Keys change every 2^this packets.
    pub key_update_log2: u8,
    /// Most handshakes in progress; a new one evicts the oldest.
    pub max_handshakes: usize,
    /// A handshake not finished within this is dropped.
    pub handshake_timeout_us: Micros,
    /// New handshakes (and replies to unknown addresses) per second, sustained …
    pub handshake_rate: u32,
    /// … and in a burst.
    pub handshake_burst: u32,
    /// Most pending access requests kept: when full, new ones are refused (and counted in
    /// [`HostStats::access_requests_refused`]); the old ones stay until approved or denied.
    pub max_access_requests: usize,
    /// New access requests (a key not yet pending) accepted from one IP address per minute;
    /// more are refused and counted. A repeated request from a pending key is not new.
    pub access_requests_per_minute: u32,
    /// Seeds the session's CSPRNG (ephemeral keys, connection ids, SPAKE2).
    pub entropy: [u8; 32],
    /// Reed–Solomon parity per video frame (default: adaptive, 5–50 %), chosen per client
    /// from its own loss.
    pub fec: FecPolicy,
    /// Multipath: the scheduler and the path probes (used once a client has several paths).
    pub paths: PathConfig,
    /// Adaptive bitrate (None: the configured bitrate, fixed). With it, the host pings every
    /// client every 100 ms for the queueing delay; the controller's link sets the bitrate.
    pub rate: Option<RateConfig>,
    /// Keep the last frames' data shards and resend those a client's ShardNack names.
    pub retransmit: bool,
    /// Most clients served at once (at least 1); one more is refused as busy.
    pub max_clients: usize,
    /// When a viewer cannot keep up with the stream.
    pub health: HealthConfig,
    /// The stream refreshes itself (intra refresh): a client that joins waits for the next
    /// frame marked as an entry point ([`FrameMeta::entry_point`], the start of a refresh
    /// sweep) instead of asking the encoder for a keyframe for everyone. False (the default):
    /// a join asks for a keyframe, within the keyframe cooldown — unless the stream's
    /// `params.refresh_period` is non-zero, which means the same.
    pub stream_refreshes: bool,
}

impl std::fmt::Debug for HostConfig {
    /// Shows the configuration without secrets (the private key and the entropy).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("params", &self.params)
            .field("codecs", &self.codecs)
            .field("keyframe_cooldown_us", &self.keyframe_cooldown_us)
            .field("identity", &self.identity)
            .field("access", &self.access)
            .field("allowed_clients", &self.allowed_clients.len())
            .field("revoked_clients", &self.revoked_clients.len())
            .field("suites", &self.suites)
            .field("state", &self.state)
            .field("video_auth_only", &self.video_auth_only)
            .field("key_update_log2", &self.key_update_log2)
            .field("max_handshakes", &self.max_handshakes)
            .field("handshake_timeout_us", &self.handshake_timeout_us)
            .field("handshake_rate", &self.handshake_rate)
            .field("handshake_burst", &self.handshake_burst)
            .field("max_access_requests", &self.max_access_requests)
            .field(
                "access_requests_per_minute",
                &self.access_requests_per_minute,
            )
            .field("fec", &self.fec)
            .field("paths", &self.paths)
            .field("rate", &self.rate)
            .field("retransmit", &self.retransmit)
            .field("max_clients", &self.max_clients)
            .field("health", &self.health)
            .field("stream_refreshes", &self.stream_refreshes)
            .finish_non_exhaustive()
    }
}

/// The default of [`HostConfig::max_clients`] (`host.max_clients`).
pub const DEFAULT_MAX_CLIENTS: usize = 8;

impl HostConfig {
    /// Defaults with a fresh random identity and entropy from the OS, and
    /// [`AccessPolicy::Open`] (the runtime sets [`AccessPolicy::Allowlist`] and the stored
    /// identity once pairing is wired in).
    pub fn new(params: SessionParams) -> Self {
        let mut rng = SessionRng::from_os();
        HostConfig {
            params,
            codecs: Vec::new(),
            clock_id: None,
            keyframe_cooldown_us: 50_000,
            connection_id_seed: 0x5eed,
            identity: StaticKeypair::generate(&mut rng),
            access: AccessPolicy::Open,
            allowed_clients: Vec::new(),
            revoked_clients: Vec::new(),
            suites: ALL_SUITES,
            state: StateConfig::default(),
            video_auth_only: false,
            key_update_log2: DEFAULT_KEY_UPDATE_LOG2,
            max_handshakes: 16,
            handshake_timeout_us: 5_000_000,
            handshake_rate: 200,
            handshake_burst: 32,
            max_access_requests: 16,
            access_requests_per_minute: 4,
            entropy: rng.seed(),
            fec: FecPolicy::default(),
            paths: PathConfig::default(),
            rate: None,
            retransmit: true,
            max_clients: DEFAULT_MAX_CLIENTS,
            health: HealthConfig::default(),
            stream_refreshes: false,
        }
    }
}

/// One client's session on the host, numbered from 1 in the order they were admitted (never
/// reused within a run: a client that reconnects gets a new number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u32);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
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
}

impl StreamState {
    pub fn name(self) -> &'static str {
        match self {
            StreamState::AwaitingPicture => "awaiting picture",
            StreamState::Live => "live",
            StreamState::Paused => "paused",
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
    /// New access requests refused: the pending list was full, or their address had made
    /// too many this minute.
    pub access_requests_refused: u64,
    pub clients_refused: u64,
    pub pin_failures: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_honoured: u64,
    pub keyframe_requests_ignored_cooldown: u64,
    pub keyframe_requests_ignored_already_sent: u64,
    /// Keyframes asked for because a client joined.
    pub keyframes_for_joins: u64,
    /// Keyframe requests of paused viewers beyond one a second (ignored).
    pub keyframe_requests_ignored_paused: u64,
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

/// How often the host pings each client for the queueing delay (adaptive bitrate only).
const RATE_PING_INTERVAL_US: Micros = 100_000;
/// Pairing events kept for the application (oldest dropped).
const MAX_PAIRING_EVENTS: usize = 64;

/// The host's protocol state machine.
pub struct HostSession {
    cfg: HostConfig,
    /// The connected clients, in the order they were admitted.
    peers: Vec<Peer>,
    next_client: u32,
    /// The controller (None: no client).
    controller: Option<ClientId>,
    /// The key the host's user handed control to (`untether pair control`): the controller
    /// whenever it is connected.
    preferred_controller: Option<PublicKey>,
    /// Keys of viewers whose input is applied.
    granted: HashSet<PublicKey>,
    /// The bitrate target last announced ([`HostEvent::BitrateChanged`]).
    target_kbps: Option<u32>,
    pending: Vec<Pending>,
    allowed: HashSet<PublicKey>,
    revoked: HashSet<PublicKey>,
    requests: VecDeque<AccessRequest>,
    /// New access requests per source IP address in the current minute: (minute start, count).
    request_counts: HashMap<IpAddr, (Micros, u32)>,
    pin: Option<PairingPin>,
    gate: KeyframeGate,
    /// When the gate last honoured a request (its cooldown runs from there).
    last_honoured_us: Option<Micros>,
    /// A client joined while the cooldown ran: ask for its keyframe when it ends.
    join_keyframe_due: Option<Micros>,
    /// The next frame number to be sent (frames are numbered per stream, not per client).
    next_frame: Option<u32>,
    rng: SessionRng,
    bucket: Bucket,
    /// New handshakes from addresses that proved they receive (a valid Retry token).
    validated_bucket: Bucket,
    retry_key: ring::hmac::Key,
    /// Reused for opening protected datagrams (no per-packet allocation).
    scratch: Vec<u8>,
    fec: FecEncoder,
    /// Parity shards of the frame being sent (computed once, reused).
    parity_buf: Vec<u8>,
    transmits: VecDeque<Transmit>,
    /// Retransmission: the last frames sent (shared by every client).
    resend: VecDeque<SentFrame>,
    /// Control datagrams (copies per path), sent before queued shards.
    control_out: VecDeque<Transmit>,
    /// The paths chosen for the datagram being queued (reused).
    sched: Vec<usize>,
    events: VecDeque<HostEvent>,
    pairing: VecDeque<PairingEvent>,
    stats: HostStats,
    /// Host → client state as published (a client that connects gets all of it).
    published: std::collections::BTreeMap<StateKey, StateValue>,
}

impl HostSession {
    pub fn new(cfg: HostConfig) -> Self {
        let mut seed = cfg.entropy;
        for (b, s) in seed.iter_mut().zip(cfg.connection_id_seed.to_le_bytes()) {
            *b ^= s;
        }
        let mut rng = SessionRng::from_seed(seed);
        let retry_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &rng.seed());
        HostSession {
            gate: KeyframeGate::new(cfg.keyframe_cooldown_us),
            last_honoured_us: None,
            join_keyframe_due: None,
            next_frame: None,
            rng,
            retry_key,
            validated_bucket: Bucket::new(
                4.0 * cfg.handshake_rate as f64,
                4.0 * cfg.handshake_burst as f64,
            ),
            allowed: cfg.allowed_clients.iter().copied().collect(),
            revoked: cfg.revoked_clients.iter().copied().collect(),
            bucket: Bucket::new(cfg.handshake_rate as f64, cfg.handshake_burst as f64),
            scratch: Vec::with_capacity(2048),
            fec: FecEncoder::new(),
            parity_buf: Vec::new(),
            cfg,
            peers: Vec::new(),
            next_client: 1,
            controller: None,
            preferred_controller: None,
            granted: HashSet::new(),
            target_kbps: None,
            pending: Vec::new(),
            requests: VecDeque::new(),
            request_counts: HashMap::new(),
            pin: None,
            transmits: VecDeque::new(),
            resend: VecDeque::new(),
            control_out: VecDeque::new(),
            sched: Vec::with_capacity(MAX_PATHS),
            events: VecDeque::new(),
            pairing: VecDeque::new(),
            stats: HostStats::default(),
            published: Default::default(),
        }
    }

    pub fn params(&self) -> &SessionParams {
        &self.cfg.params
    }

    /// The host's public key (clients pin it; users compare its fingerprint).
    pub fn host_key(&self) -> PublicKey {
        self.cfg.identity.public
    }

    /// The FEC policy.
    pub fn fec_policy(&self) -> FecPolicy {
        self.cfg.fec
    }

    /// Changes the FEC policy (from the next frame on).
    pub fn set_fec_policy(&mut self, fec: FecPolicy) {
        self.cfg.fec = fec;
    }

    /// The most clients served at once.
    pub fn max_clients(&self) -> usize {
        self.cfg.max_clients.max(1)
    }

    /// The downstream loss rate the controller's adaptive FEC works from (0..1; `None` without
    /// a client or before its first Feedback).
    pub fn loss_estimate(&self) -> Option<f64> {
        self.controller_peer().and_then(|p| p.loss.loss())
    }

    /// Changes the bitrate announced to future clients.
    pub fn set_bitrate_kbps(&mut self, kbps: u32) {
        self.cfg.params.bitrate_kbps = kbps;
    }

    /// [`HostStats::datagrams_authentic`], without copying the counters: a driver compares it
    /// around [`handle_datagram`](Self::handle_datagram) to learn whether that datagram was
    /// authentic.
    pub fn datagrams_authentic(&self) -> u64 {
        self.stats.datagrams_authentic
    }

    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        s.keyframe_requests_honoured = self.gate.honoured;
        s.keyframe_requests_ignored_cooldown = self.gate.ignored_cooldown;
        s.keyframe_requests_ignored_already_sent = self.gate.ignored_already_sent;
        for p in &self.peers {
            s.key_updates += p.protection.sealer.key_updates + p.protection.opener.key_updates;
        }
        if let Some(p) = self.controller_peer() {
            s.state_out = p.state_tx.stats();
        }
        s
    }

    fn peer_index(&self, id: ClientId) -> Option<usize> {
        self.peers.iter().position(|p| p.info.id == id)
    }

    fn controller_peer(&self) -> Option<&Peer> {
        let id = self.controller?;
        self.peers.iter().find(|p| p.info.id == id)
    }

    /// The controller (on a host serving one client: that client), if any client is
    /// connected.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.controller_peer().map(|p| &p.info)
    }

    /// Every connected client, in the order they were admitted.
    pub fn clients(&self) -> impl Iterator<Item = &ClientInfo> {
        self.peers.iter().map(|p| &p.info)
    }

    /// How many clients are connected.
    pub fn client_count(&self) -> usize {
        self.peers.len()
    }

    /// The controller's id.
    pub fn controller(&self) -> Option<ClientId> {
        self.controller
    }

    /// Every connected client's role, stream state and counters, in admission order.
    pub fn client_status(&self) -> Vec<ClientStatus> {
        self.peers.iter().map(Peer::status).collect()
    }

    /// The controller's latest feedback.
    pub fn feedback(&self) -> Option<Feedback> {
        self.controller_peer().and_then(|p| p.feedback)
    }

    /// The controller's latest-wins state (pointer, head pose, …): the scene's.
    pub fn state(&self) -> Option<&StateReceiver> {
        self.controller_peer().map(|p| &p.state)
    }

    /// The newest value of one state key of the controller (the scene's pose).
    pub fn state_value(&self, key: StateKey) -> Option<StateEntry> {
        self.controller_peer()
            .and_then(|p| p.state.get(key).copied())
    }

    /// The newest value of one state key of one client.
    pub fn state_value_of(&self, client: ClientId, key: StateKey) -> Option<StateEntry> {
        let i = self.peer_index(client)?;
        self.peers[i].state.get(key).copied()
    }

    /// Whether a client's input reaches the application (the controller's, or a viewer's with
    /// a grant).
    pub fn input_applies(&self, client: ClientId) -> bool {
        self.peer_index(client)
            .is_some_and(|i| self.peers[i].input_applies())
    }

    /// Handshakes in progress (bounded by `max_handshakes`).
    pub fn handshakes_in_progress(&self) -> usize {
        self.pending.len()
    }

    /// Fuzzing only: installs a connected client with the given secrets, skipping the
    /// handshake (so a fuzzer can reach the protected paths quickly). Several calls install
    /// several clients (up to `max_clients`; beyond, None).
    #[cfg(fuzzing)]
    #[allow(clippy::too_many_arguments)]
    pub fn fuzz_connect(
        &mut self,
        now: Micros,
        addr: SocketAddr,
        connection_id: u64,
        suite: Suite,
        send: [u8; 32],
        recv: [u8; 32],
        key_update_log2: u8,
        video_auth_only: bool,
    ) -> Option<ClientId> {
        if self.peers.len() >= self.max_clients() {
            return None;
        }
        let id = ClientId(self.next_client);
        self.next_client += 1;
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(&id.0.to_le_bytes());
        let protection =
            crate::crypto::Protection::new(suite, send, recv, key_update_log2, video_auth_only);
        let info = ClientInfo {
            id,
            addr,
            name: "fuzz".into(),
            connection_id,
            connected_us: now,
            key,
            fingerprint: String::new(),
            suite,
        };
        let mut p = Peer::new(
            &self.cfg,
            self.cfg.params,
            &self.published,
            info,
            1,
            Vec::new(),
            protection,
            now,
            connection_id,
        );
        p.confirmed = true;
        p.awaiting_entry = false;
        p.pending.clear();
        self.peers.push(p);
        self.assign_roles(now);
        Some(id)
    }

    // ---- pairing -------------------------------------------------------------------------

    /// Allows a client key (approved by the user); removes its access request.
    pub fn allow_client(&mut self, key: PublicKey) {
        self.revoked.remove(&key);
        self.allowed.insert(key);
        self.requests.retain(|r| r.key != key);
    }

    /// Revokes a client key; ends its session if it is connected.
    pub fn revoke_client(&mut self, now: Micros, key: PublicKey) {
        self.allowed.remove(&key);
        self.revoked.insert(key);
        self.requests.retain(|r| r.key != key);
        if let Some(i) = self.peers.iter().position(|p| p.info.key == key) {
            self.end_peer(now, i, ByeReason::Closed, GoneReason::Bye);
        }
    }

    /// Whether a key is allowed.
    pub fn is_allowed(&self, key: &PublicKey) -> bool {
        self.allowed.contains(key)
    }

    /// Sets (or clears) the one-time PIN the host accepts for pairing. PIN handshakes in
    /// progress under another PIN are dropped (they could never be checked).
    pub fn set_pin(&mut self, pin: Option<PairingPin>) {
        let live = pin.as_ref().map(|p| p.pin.as_str());
        self.pending
            .retain(|p| p.pin.is_none() || p.pin.as_deref() == live);
        self.pin = pin;
    }

    /// The active PIN, if any.
    pub fn pin(&self) -> Option<&PairingPin> {
        self.pin.as_ref()
    }

    /// Pending access requests, oldest first (at most `max_access_requests`: new ones are
    /// refused beyond).
    pub fn access_requests(&self) -> impl Iterator<Item = &AccessRequest> {
        self.requests.iter()
    }

    /// Denies (forgets) an access request.
    pub fn deny_request(&mut self, key: &PublicKey) {
        self.requests.retain(|r| &r.key != key);
    }

    /// The next pairing event.
    pub fn poll_pairing_event(&mut self) -> Option<PairingEvent> {
        self.pairing.pop_front()
    }

    fn pairing_event(&mut self, e: PairingEvent) {
        if self.pairing.len() >= MAX_PAIRING_EVENTS {
            self.pairing.pop_front();
        }
        self.pairing.push_back(e);
    }

    // ---- receive -------------------------------------------------------------------------

    fn reply(&mut self, dst: SocketAddr, payload: Vec<u8>) {
        self.stats.bytes_sent += payload.len() as u64;
        self.stats.datagrams_sent += 1;
        self.transmits.push_back(Transmit { dst, payload });
    }

    /// Takes one datagram from the network.
    pub fn handle_datagram(&mut self, now: Micros, from: SocketAddr, data: &[u8]) {
        self.stats.bytes_received += data.len() as u64;
        self.stats.datagrams_received += 1;
        // The established sessions first: a cheap header check, then the tag.
        if data.len() >= wire::HEADER_LEN
            && data[0] == wire::VERSION
            && data[1] == wire::PacketType::Control as u8
        {
            self.on_protected(now, from, data);
            return;
        }
        let (header, datagram) = match wire::parse(data) {
            Ok(x) => x,
            Err(wire::WireError::Version(v)) => {
                self.stats.malformed_datagrams += 1;
                self.version_negotiation(now, from, v, data.len());
                return;
            }
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match datagram {
            wire::Datagram::Hello(hello) => self.on_hello(now, from, &header, hello, data.len()),
            wire::Datagram::HelloFinish(msg3) => {
                self.on_finish(now, from, &header, msg3, data.len())
            }
            // Only the host sends these (Control was handled above).
            wire::Datagram::Reject(_)
            | wire::Datagram::Retry(_)
            | wire::Datagram::HelloReply(_)
            | wire::Datagram::Shard(_)
            | wire::Datagram::Audio(_)
            | wire::Datagram::Control(_) => {
                self.stats.unknown_connection += 1;
            }
        }
    }

    // ---- send ----------------------------------------------------------------------------

    /// Queues a raw layer-2 answer ([`wire::ControlFrame::LinkAddress`] with the host's MAC,
    /// or [`wire::ControlFrame::LinkDeclined`]) for the client at `addr`; other frames are
    /// ignored.
    pub fn send_link_frame(&mut self, _now: Micros, addr: SocketAddr, frame: wire::ControlFrame) {
        if !matches!(
            frame,
            wire::ControlFrame::LinkAddress { .. } | wire::ControlFrame::LinkDeclined { .. }
        ) {
            return;
        }
        if let Some(peer) = self.peers.iter_mut().find(|p| p.info.addr == addr) {
            peer.pending.push(frame);
        }
    }

    /// Queues a frame's timing report for one client (its counts made relative to the first
    /// frame it was sent).
    pub fn send_frame_timing_to(&mut self, _now: Micros, client: ClientId, timing: FrameTiming) {
        if let Some(i) = self.peer_index(client) {
            let p = &mut self.peers[i];
            let base = *p.timing_base.get_or_insert((
                timing.captured.saturating_sub(1),
                timing.encoded.saturating_sub(1),
                timing.dropped,
            ));
            p.pending.push(wire::ControlFrame::FrameTiming(FrameTiming {
                captured: timing.captured.saturating_sub(base.0),
                encoded: timing.encoded.saturating_sub(base.1),
                dropped: timing.dropped.saturating_sub(base.2),
                ..timing
            }));
        }
    }

    /// Queues a sliced frame's encoder timing for one client (a SliceTiming frame, beside its
    /// FrameTiming): when its first and last slice were handed to the network, µs after
    /// capture.
    pub fn send_slice_timing_to(
        &mut self,
        _now: Micros,
        client: ClientId,
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    ) {
        if let Some(i) = self.peer_index(client) {
            self.peers[i].pending.push(wire::ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            });
        }
    }

    /// [`send_slice_timing_to`](Self::send_slice_timing_to) every client.
    pub fn send_slice_timing(
        &mut self,
        now: Micros,
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    ) {
        let ids: Vec<ClientId> = self.peers.iter().map(|p| p.info.id).collect();
        for id in ids {
            self.send_slice_timing_to(
                now,
                id,
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            );
        }
    }

    /// Queues a frame's timing report for every client (counts made relative per client).
    pub fn send_frame_timing(&mut self, now: Micros, timing: FrameTiming) {
        let ids: Vec<ClientId> = self.peers.iter().map(|p| p.info.id).collect();
        for id in ids {
            self.send_frame_timing_to(now, id, timing);
        }
    }

    /// Queues the pose frame `frame_number` was rendered for, for the controller (the pose is
    /// its head's, its sample time on its clock; viewers are sent the picture without it and
    /// show it as it is). Call it before sending the frame, so it leaves ahead of the shards,
    /// and again with the frame's timing: the client keeps the first copy.
    pub fn send_frame_pose(&mut self, _now: Micros, frame_number: u32, sample: PoseSample) {
        let Some(id) = self.controller else {
            return;
        };
        if let Some(i) = self.peer_index(id) {
            self.peers[i].pending.push(wire::ControlFrame::FramePose {
                frame_number,
                sample,
            });
        }
    }

    /// Publishes a key of host → client state (haptics, other players, application state) on
    /// the latest-wins channel, to every client (each has its own channel, acknowledgements
    /// and budget). Kept while no client is connected; a client that connects gets every
    /// key's current value. False when the key table is full.
    pub fn publish_state(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        if !self.published.contains_key(&key) && self.published.len() >= crate::state::MAX_KEYS {
            return false;
        }
        self.published.insert(key, value);
        let mut ok = true;
        for p in &mut self.peers {
            ok &= p.state_tx.set(now, key, value);
        }
        ok
    }

    /// Staleness of the host → client state (the controller's; None without a client).
    pub fn state_staleness(&self, now: Micros) -> Option<Staleness> {
        self.controller_peer().map(|p| p.state_tx.staleness(now))
    }

    /// Staleness of one client's host → client state.
    pub fn state_staleness_of(&self, client: ClientId, now: Micros) -> Option<Staleness> {
        let i = self.peer_index(client)?;
        Some(self.peers[i].state_tx.staleness(now))
    }

    /// Ends every session (host shutting down).
    pub fn close(&mut self, now: Micros) {
        self.close_with(now, ByeReason::ShuttingDown);
    }

    /// Says goodbye to every client with `reason` (sent with the next datagrams; the sessions
    /// end once it is built).
    pub fn close_with(&mut self, _now: Micros, reason: ByeReason) {
        for p in &mut self.peers {
            p.pending.push(wire::ControlFrame::Bye { reason });
        }
    }

    /// Says goodbye to one client and ends its session now.
    pub fn close_client(&mut self, now: Micros, client: ClientId, reason: ByeReason) {
        if let Some(i) = self.peer_index(client) {
            let gone = match reason {
                ByeReason::TooSlow => GoneReason::TooSlow,
                ByeReason::Replaced => GoneReason::Replaced,
                ByeReason::ShuttingDown => GoneReason::ShuttingDown,
                ByeReason::Failed => GoneReason::Failed,
                ByeReason::Closed | ByeReason::Other => GoneReason::Bye,
            };
            self.end_peer(now, i, reason, gone);
        }
    }

    /// Says `reason` to peer `i` (its Bye built now, sealed with its keys), removes it and
    /// reports it gone.
    fn end_peer(&mut self, now: Micros, i: usize, bye: ByeReason, gone: GoneReason) {
        self.peers[i]
            .pending
            .push(wire::ControlFrame::Bye { reason: bye });
        // Flush the Bye now: the session is over whatever the application does next.
        self.build_controls_of(now, i);
        let p = self.peers.remove(i);
        self.events.push_back(HostEvent::ClientGone {
            client: p.info.id,
            addr: p.info.addr,
            reason: gone,
        });
        self.assign_roles(now);
    }

    /// The next datagram to send. Control datagrams go before queued shards: they are small and
    /// time-critical (pongs, acks).
    pub fn poll_transmit(&mut self, now: Micros) -> Option<Transmit> {
        if self.control_out.is_empty() {
            self.build_controls(now);
        }
        if let Some(t) = self.control_out.pop_front() {
            return Some(t);
        }
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let hs = self
            .pending
            .iter()
            .map(|p| p.created_us + self.cfg.handshake_timeout_us)
            .min();
        let peers = self
            .peers
            .iter()
            .filter_map(|p| p.poll_timeout(&self.cfg))
            .min();
        [hs, peers, self.join_keyframe_due]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs timers: idle timeouts, keep-alives, role repeats, pings and path probes, handshake
    /// expiry, a join's deferred keyframe.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.expire_handshakes(now);
        let idle_us = self.cfg.params.idle_timeout_ms as u64 * 1000;
        let mut i = 0;
        let mut gone = false;
        while i < self.peers.len() {
            if now >= self.peers[i].last_recv_us + idle_us {
                let p = self.peers.remove(i);
                self.events.push_back(HostEvent::ClientGone {
                    client: p.info.id,
                    addr: p.info.addr,
                    reason: GoneReason::Timeout,
                });
                gone = true;
                continue;
            }
            self.peer_timers(now, i);
            i += 1;
        }
        if gone {
            self.assign_roles(now);
        }
        if self.join_keyframe_due.is_some_and(|t| t <= now) {
            self.join_keyframe_due = None;
            self.request_join_keyframe(now);
        }
    }

    /// The controller's adaptive bitrate controller state (None when it is off or no client
    /// is there).
    pub fn rate_stats(&self) -> Option<RateStats> {
        self.controller_peer()?
            .rate
            .as_ref()
            .map(RateController::stats)
    }

    /// Per-path counters and state of the controller's paths (one entry without multipath).
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.controller_peer()
            .map(|p| p.paths.stats())
            .unwrap_or_default()
    }

    /// Per-path counters of one client's paths.
    pub fn path_stats_of(&self, client: ClientId) -> Vec<PathStats> {
        self.peer_index(client)
            .map(|i| self.peers[i].paths.stats())
            .unwrap_or_default()
    }
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}
