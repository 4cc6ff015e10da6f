//! The host's side of the protocol, sans-IO: serves one client at a time.
//!
//! Drive it with [`HostSession::handle_datagram`] and [`HostSession::handle_timeout`], feed it
//! encoded frames with [`HostSession::send_frame`], and drain [`HostSession::poll_transmit`],
//! [`HostSession::poll_event`] and [`HostSession::poll_pairing_event`];
//! [`HostSession::poll_timeout`] says when to call `handle_timeout` next. It never reads a
//! clock: every call takes `now`.
//!
//! Security (docs/PROTOCOL.md): a Noise `XX` handshake authenticates both sides; every datagram
//! after it is AEAD-protected; the client's static key must be on the allowlist (or paired with
//! a one-time PIN) unless the policy is [`AccessPolicy::Open`]. Datagrams with an unknown
//! connection id or a failing tag are counted and dropped before anything is allocated; the
//! established session is looked up first and never shares state with handshakes in progress,
//! which are bounded in number, rate-limited and never answered with more than 3× the bytes
//! their address sent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use crate::assembler::{parity_header, shard_slice_fec, SliceId};
use crate::crypto::{Protection, Suite, ALL_SUITES, DEFAULT_KEY_UPDATE_LOG2, TAG_LEN};
use crate::fec::{FecEncoder, FecPolicy, LossEstimator};
use crate::handshake::{
    fingerprint, HostHandshake, Mode, PublicKey, SessionRng, SessionSetup, StaticKeypair,
};
use crate::keyframe::{KeyframeDecision, KeyframeGate};
use crate::paths::{Class, PathConfig, PathSet, PathStats, MAX_PATHS};
use crate::pose::PoseSample;
use crate::rate::{RateConfig, RateController, RateStats};
use crate::reliable::{InputRecord, ReliableReceiver};
use crate::state::{
    Staleness, StateConfig, StateEntry, StateKey, StateReceiver, StateSender, StateSenderStats,
    StateValue,
};
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, encode_control, encode_handshake, ByeReason, ControlFrame, Datagram, Feedback,
    FrameTiming, Header, PacketType, Reject, RejectReason, SessionParams, VersionNegotiation,
    HEADER_LEN, SHARD_HEADER_LEN,
};
use crate::{GoneReason, Micros, Transmit};

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
    /// The session parameters every client is accepted with; `params.codec` is set per client
    /// from [`codecs`](Self::codecs).
    pub params: SessionParams,
    /// The codecs this host can encode, best first, each with its stream's refresh period
    /// (empty: only `params.codec`, with `params.refresh_period`). A client is given the first
    /// codec of its own list, in its order of preference, that is here
    /// ([`crate::wire::choose_codec`]); none in common is a Reject naming both lists.
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
    /// The host → client latest-wins state channel (its bandwidth budget): see
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
    /// Reed–Solomon parity per video frame (default: adaptive, 5–50 %).
    pub fec: FecPolicy,
    /// Multipath: the scheduler and the path probes (used once a client has several paths).
    pub paths: PathConfig,
    /// Adaptive bitrate (None: the configured bitrate, fixed). With it, the host pings the
    /// client every 100 ms for the queueing delay.
    pub rate: Option<RateConfig>,
    /// Keep the last frames' data shards and resend those a client's ShardNack names.
    pub retransmit: bool,
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
            .finish_non_exhaustive()
    }
}

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
        }
    }
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    /// A client's session started: start its stream with a keyframe.
    ClientConnected {
        addr: SocketAddr,
        name: String,
    },
    ClientGone {
        addr: SocketAddr,
        reason: GoneReason,
    },
    /// Encode the next frame as a keyframe.
    KeyframeRequested,
    /// An input event, in order, exactly once.
    Input(InputRecord),
    Feedback(Feedback),
    /// The adaptive bitrate controller set a new target: reconfigure the encoder.
    BitrateChanged {
        kbps: u32,
    },
    /// An authenticated client was refused (not paired, revoked, busy, no codec in common …):
    /// for the operator. `message` is what the client was told.
    ClientRefused {
        addr: SocketAddr,
        fingerprint: String,
        reason: RejectReason,
        message: String,
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

/// The connected client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub addr: SocketAddr,
    pub name: String,
    pub connection_id: u64,
    pub connected_us: Micros,
    /// The client's authenticated long-term key.
    pub key: PublicKey,
    pub fingerprint: String,
    pub suite: Suite,
}

/// Counters of the host session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub bytes_received: u64,
    pub datagrams_received: u64,
    pub shards_sent: u64,
    pub frames_sent: u64,
    /// Slices of frames sent in slices (docs/PROTOCOL.md §6.3).
    pub slices_sent: u64,
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
    pub inputs_received: u64,
    pub inputs_duplicate: u64,
    pub state_packets_received: u64,
    /// The host → client state channel's sender (the current client's).
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
}

/// No client to send to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no client is connected")]
pub struct NoClient;

struct Peer {
    info: ClientInfo,
    /// The connection id of the client's handshake datagrams (a repeated HelloFinish means
    /// the Accept was lost).
    handshake_cid: u64,
    /// The client's message 3: only an identical copy is a repeat that may draw the Accept
    /// again (anything else with that connection id is forged).
    handshake_msg3: Vec<u8>,
    protection: Protection,
    last_recv_us: Micros,
    last_send_us: Micros,
    next_pn: u64,
    window: PacketWindow,
    input: ReliableReceiver,
    state: StateReceiver,
    /// Host → client state (seeded with every published value when the client connects).
    state_tx: StateSender,
    /// Control frames waiting for the next control datagram.
    pending: Vec<ControlFrame>,
    feedback: Option<Feedback>,
    /// Downstream loss, from the client's Feedback (drives adaptive FEC).
    loss: LossEstimator,
    /// The client's addresses (path 0: the handshake's) and the scheduler.
    paths: PathSet,
    /// Adaptive bitrate, when on.
    rate: Option<RateController>,
    next_ping_us: Micros,
    next_ping_id: u32,
    /// Whether a protected datagram from the client has arrived since the Accept (so it has
    /// the Accept). Until then the Accept rides again ahead of each video frame, at most every
    /// [`ACCEPT_REPEAT_US`], for [`ACCEPT_REPEAT_FOR_US`]: a lost Accept otherwise costs the
    /// client's 200 ms HelloFinish repeat, a dozen frames it cannot read.
    confirmed: bool,
    accept_sent_us: Micros,
}

/// How often an unconfirmed Accept is repeated ahead of video frames.
const ACCEPT_REPEAT_US: Micros = 15_000;
/// The least time between two answers to repeated handshake messages of one handshake (an
/// Accept or a Reject again for a repeated HelloFinish): half the client's 200 ms repeat, so
/// each real repeat is answered and a flood of copies is not.
pub const HANDSHAKE_REPEAT_ANSWER_US: Micros = 100_000;
/// For how long after the session starts.
const ACCEPT_REPEAT_FOR_US: Micros = 2_000_000;

enum PendingState {
    /// Message 2 sent; waiting for message 3.
    AwaitFinish(Box<HostHandshake>),
    /// Refused after message 3: the protected Reject to repeat if message 3 is repeated.
    Refused {
        reject: Vec<u8>,
        /// The authenticated message 3: only identical copies are answered.
        msg3: Vec<u8>,
        /// When the Reject was last sent.
        sent_us: Micros,
    },
}

/// A handshake in progress (bounded by `max_handshakes`).
struct Pending {
    addr: SocketAddr,
    client_cid: u64,
    created_us: Micros,
    state: PendingState,
    msg2: Vec<u8>,
    setup: SessionSetup,
    mode: Mode,
    /// PIN mode: the PIN the handshake's SPAKE2 key came from. Message 3 is checked only if
    /// that PIN is still the live one with attempts left (each PIN handshake in progress
    /// holds one of them).
    pin: Option<String>,
    /// Anti-amplification: bytes received from (authentic ones only, after message 3) and
    /// sent to the address.
    received: u64,
    sent: u64,
}

impl Pending {
    /// Whether `out` fits in the 3× budget; charges it if so.
    fn charge(&mut self, out: usize) -> bool {
        if self.sent + out as u64 > AMPLIFICATION_FACTOR * self.received {
            return false;
        }
        self.sent += out as u64;
        true
    }

    /// A PIN handshake holding one of the PIN's attempts.
    fn holds_pin_attempt(&self) -> bool {
        self.pin.is_some() && matches!(self.state, PendingState::AwaitFinish(_))
    }
}

/// A token bucket.
struct Bucket {
    tokens: f64,
    rate_per_us: f64,
    burst: f64,
    last_us: Micros,
}

impl Bucket {
    fn take(&mut self, now: Micros) -> bool {
        let dt = now.saturating_sub(self.last_us) as f64;
        self.last_us = self.last_us.max(now);
        self.tokens = (self.tokens + dt * self.rate_per_us).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The host's protocol state machine.
pub struct HostSession {
    cfg: HostConfig,
    peer: Option<Peer>,
    pending: Vec<Pending>,
    allowed: HashSet<PublicKey>,
    revoked: HashSet<PublicKey>,
    requests: VecDeque<AccessRequest>,
    /// New access requests per source IP address in the current minute: (minute start, count).
    request_counts: HashMap<IpAddr, (Micros, u32)>,
    pin: Option<PairingPin>,
    gate: KeyframeGate,
    rng: SessionRng,
    bucket: Bucket,
    /// New handshakes from addresses that proved they receive (a valid Retry token).
    validated_bucket: Bucket,
    retry_key: ring::hmac::Key,
    /// Reused for opening protected datagrams (no per-packet allocation).
    scratch: Vec<u8>,
    fec: FecEncoder,
    /// Parity shards of the frame being sent (reused).
    parity_buf: Vec<u8>,
    transmits: VecDeque<Transmit>,
    /// Retransmission: the last frames sent (data and data-shard headers).
    resend: VecDeque<SentFrame>,
    /// Control datagrams (copies per path), sent before queued shards.
    control_out: VecDeque<Transmit>,
    /// The paths chosen for the datagram being queued (reused).
    sched: Vec<usize>,
    events: VecDeque<HostEvent>,
    pairing: VecDeque<PairingEvent>,
    stats: HostStats,
    /// Host → client state as published (a new client gets all of it).
    published: std::collections::BTreeMap<StateKey, StateValue>,
}

/// A frame (or one slice of a frame sent in slices) kept for retransmission.
struct SentFrame {
    frame_number: u32,
    slice_index: u8,
    keyframe: bool,
    data: Vec<u8>,
    /// Each data shard's header and byte range in `data`.
    shards: Vec<(wire::ShardHeader, std::ops::Range<usize>)>,
}

/// Frames kept for retransmission (about 130 ms at 60 fps) …
const RESEND_FRAMES: usize = 8;
/// … and at most this many bytes of them.
const RESEND_BYTES: usize = 4 << 20;

/// How often the host pings the client for the queueing delay (adaptive bitrate only).
const RATE_PING_INTERVAL_US: Micros = 100_000;

/// The anti-amplification factor for unvalidated addresses.
pub const AMPLIFICATION_FACTOR: u64 = 3;
/// Retry tokens are valid for their 10 s slot and the next.
const RETRY_SLOT_US: Micros = 10_000_000;
/// Pairing events kept for the application (oldest dropped).
const MAX_PAIRING_EVENTS: usize = 64;

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
            rng,
            retry_key,
            validated_bucket: Bucket {
                tokens: 4.0 * cfg.handshake_burst as f64,
                rate_per_us: 4.0 * cfg.handshake_rate as f64 / 1e6,
                burst: 4.0 * cfg.handshake_burst.max(1) as f64,
                last_us: 0,
            },
            allowed: cfg.allowed_clients.iter().copied().collect(),
            revoked: cfg.revoked_clients.iter().copied().collect(),
            bucket: Bucket {
                tokens: cfg.handshake_burst as f64,
                rate_per_us: cfg.handshake_rate as f64 / 1e6,
                burst: cfg.handshake_burst.max(1) as f64,
                last_us: 0,
            },
            scratch: Vec::with_capacity(2048),
            fec: FecEncoder::new(),
            parity_buf: Vec::new(),
            cfg,
            peer: None,
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

    /// The downstream loss rate the adaptive FEC works from (0..1; `None` without a client or
    /// before its first Feedback).
    pub fn loss_estimate(&self) -> Option<f64> {
        self.peer.as_ref().and_then(|p| p.loss.loss())
    }

    /// Changes the bitrate announced to future clients.
    pub fn set_bitrate_kbps(&mut self, kbps: u32) {
        self.cfg.params.bitrate_kbps = kbps;
    }

    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        s.keyframe_requests_honoured = self.gate.honoured;
        s.keyframe_requests_ignored_cooldown = self.gate.ignored_cooldown;
        s.keyframe_requests_ignored_already_sent = self.gate.ignored_already_sent;
        if let Some(p) = &self.peer {
            s.key_updates += p.protection.sealer.key_updates + p.protection.opener.key_updates;
            s.state_out = p.state_tx.stats();
        }
        s
    }

    /// The connected client, if any.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.peer.as_ref().map(|p| &p.info)
    }

    /// The client's latest feedback.
    pub fn feedback(&self) -> Option<Feedback> {
        self.peer.as_ref().and_then(|p| p.feedback)
    }

    /// The latest-wins state the client sent (pointer, head pose, …), if a client is connected.
    pub fn state(&self) -> Option<&StateReceiver> {
        self.peer.as_ref().map(|p| &p.state)
    }

    /// The newest value of one state key.
    pub fn state_value(&self, key: StateKey) -> Option<StateEntry> {
        self.peer.as_ref().and_then(|p| p.state.get(key).copied())
    }

    /// Handshakes in progress (bounded by `max_handshakes`).
    pub fn handshakes_in_progress(&self) -> usize {
        self.pending.len()
    }

    /// Fuzzing only: installs a connected client with the given secrets, skipping the
    /// handshake (so a fuzzer can reach the protected paths quickly).
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
    ) {
        self.peer = Some(Peer {
            info: ClientInfo {
                addr,
                name: "fuzz".into(),
                connection_id,
                connected_us: now,
                key: [0; 32],
                fingerprint: String::new(),
                suite,
            },
            handshake_cid: 1,
            handshake_msg3: Vec::new(),
            protection: Protection::new(suite, send, recv, key_update_log2, video_auth_only),
            last_recv_us: now,
            last_send_us: now,
            next_pn: 0,
            window: PacketWindow::new(),
            input: ReliableReceiver::new(),
            state: StateReceiver::new(),
            state_tx: self.new_state_sender(now),
            pending: Vec::new(),
            feedback: None,
            loss: LossEstimator::new(),
            paths: PathSet::new(self.cfg.paths, addr, now, connection_id),
            rate: self.cfg.rate.map(RateController::new),
            next_ping_us: now,
            next_ping_id: 0,
            confirmed: true,
            accept_sent_us: now,
        });
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
        if self.peer.as_ref().is_some_and(|p| p.info.key == key) {
            self.close_with(now, ByeReason::Closed);
            // Flush the Bye now: the session is over whatever the application does next.
            self.build_control(now);
            if let Some(p) = self.peer.take() {
                self.events.push_back(HostEvent::ClientGone {
                    addr: p.info.addr,
                    reason: GoneReason::Bye,
                });
            }
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
        // The established session first: a cheap header check, then the tag.
        if data.len() >= HEADER_LEN
            && data[0] == wire::VERSION
            && data[1] == PacketType::Control as u8
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
            Datagram::Hello(hello) => self.on_hello(now, from, &header, hello, data.len()),
            Datagram::HelloFinish(msg3) => self.on_finish(now, from, &header, msg3, data.len()),
            // Only the host sends these (Control was handled above).
            Datagram::Reject(_)
            | Datagram::Retry(_)
            | Datagram::HelloReply(_)
            | Datagram::Shard(_)
            | Datagram::Audio(_)
            | Datagram::Control(_) => {
                self.stats.unknown_connection += 1;
            }
        }
    }

    fn version_negotiation(&mut self, now: Micros, to: SocketAddr, theirs: u8, len: usize) {
        // Answer only datagrams as large as a Hello (the answer is far smaller: no
        // amplification), and within the handshake rate.
        if len < wire::HELLO_MIN_LEN || !self.bucket.take(now) {
            return;
        }
        let mut out = Vec::with_capacity(128);
        VersionNegotiation {
            versions: vec![wire::VERSION],
            message: format!(
                "this host speaks untether protocol version {}, the client version {theirs}: \
                 install matching versions of untether on both machines",
                wire::VERSION
            ),
        }
        .encode(&mut out);
        self.stats.version_negotiations_sent += 1;
        self.reply(to, out);
    }

    fn on_protected(&mut self, now: Micros, from: SocketAddr, data: &[u8]) {
        let Some(peer) = self.peer.as_mut() else {
            self.stats.unknown_connection += 1;
            return;
        };
        let cid = u64::from_be_bytes(arr(&data[2..10]));
        let pn = u64::from_be_bytes(arr(&data[10..18]));
        if cid != peer.info.connection_id {
            self.stats.unknown_connection += 1;
            return;
        }
        let path = peer.paths.find(from);
        let seen = peer.window.check(pn);
        if seen == Seen::TooOld {
            // Too far behind to be of use: dropped before any work, and credits no path.
            self.stats.duplicate_datagrams += 1;
            return;
        }
        // A copy from another path (multipath) or a replay is opened too: only an authentic
        // datagram credits a path's anti-amplification budget (and its counters).
        self.scratch.clear();
        self.scratch.extend_from_slice(data);
        let len = match peer
            .protection
            .opener
            .open(&mut self.scratch, HEADER_LEN, pn, true)
        {
            Ok(n) => n,
            Err(_) => {
                self.stats.auth_failures += 1;
                return;
            }
        };
        // An authentic datagram from a new address: a new path of this client (validated by a
        // PathChallenge before it carries anything). A copy that lost the race from another
        // path is authentic too, and still counts as a duplicate.
        let path = match path {
            Some(i) => i,
            None => match peer.paths.add(from, now) {
                Some(i) => {
                    self.stats.paths_added += 1;
                    i
                }
                None => {
                    self.stats.unknown_connection += 1;
                    return;
                }
            },
        };
        peer.paths.on_received(path, data.len());
        if seen != Seen::New {
            self.stats.duplicate_datagrams += 1;
            return;
        }
        // Record only now that the datagram is authentic.
        peer.window.record(pn);
        peer.last_recv_us = now;
        peer.confirmed = true;
        let frames = match wire::parse_control(&self.scratch[HEADER_LEN..HEADER_LEN + len]) {
            Ok(f) => f,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        for f in frames {
            self.on_control(now, from, f);
        }
    }

    /// A Retry token: `slot u32 ‖ HMAC-SHA256(key, slot ‖ address ‖ port ‖ cid)[..16]`.
    fn make_token(&self, _now: Micros, addr: SocketAddr, cid: u64, slot: u64) -> Vec<u8> {
        let slot = slot as u32;
        let mut ctx = ring::hmac::Context::with_key(&self.retry_key);
        ctx.update(&slot.to_be_bytes());
        match addr.ip() {
            std::net::IpAddr::V4(a) => ctx.update(&a.octets()),
            std::net::IpAddr::V6(a) => ctx.update(&a.octets()),
        }
        ctx.update(&addr.port().to_be_bytes());
        ctx.update(&cid.to_be_bytes());
        let tag = ctx.sign();
        let mut t = Vec::with_capacity(20);
        t.extend_from_slice(&slot.to_be_bytes());
        t.extend_from_slice(&tag.as_ref()[..16]);
        t
    }

    /// A token is valid for its address and handshake id during its 10 s slot and the next.
    fn token_valid(&self, now: Micros, addr: SocketAddr, cid: u64, token: &[u8]) -> bool {
        if token.len() != 20 {
            return false;
        }
        let slot = u32::from_be_bytes([token[0], token[1], token[2], token[3]]) as u64;
        let cur = (now / RETRY_SLOT_US) & u32::MAX as u64;
        if slot != cur && slot + 1 != cur {
            return false;
        }
        let expect = self.make_token(now, addr, cid, slot);
        // Constant time: no early exit on the first differing byte.
        expect
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// A cleartext Reject, sent only if it is at most `budget` bytes (what the address may
    /// still receive: 3× what it sent, less what it was sent).
    fn cleartext_reject(
        &mut self,
        to: SocketAddr,
        cid: u64,
        budget: u64,
        reason: RejectReason,
        message: String,
    ) {
        self.stats.hellos_rejected += 1;
        let mut out = Vec::with_capacity(64 + message.len());
        Reject { reason, message }.encode(&Header::new(PacketType::Reject, cid, 0), &mut out);
        if out.len() as u64 > budget {
            self.stats.amplification_limited += 1;
            return;
        }
        self.reply(to, out);
    }

    fn expire_handshakes(&mut self, now: Micros) {
        let timeout = self.cfg.handshake_timeout_us;
        self.pending.retain(|p| now < p.created_us + timeout);
    }

    fn on_hello(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        hello: wire::Hello<'_>,
        len: usize,
    ) {
        if len < wire::HELLO_MIN_LEN || header.connection_id == 0 {
            // Unpadded: answering could amplify a spoofed source's traffic.
            self.stats.malformed_datagrams += 1;
            return;
        }
        let cid = header.connection_id;
        // A repeated Hello: our reply was lost. Send it again within the address's budget.
        if let Some(i) = self
            .pending
            .iter()
            .position(|p| p.addr == from && p.client_cid == cid)
        {
            let p = &mut self.pending[i];
            p.received += len as u64;
            if let PendingState::AwaitFinish(_) = p.state {
                let mut out = Vec::with_capacity(HEADER_LEN + p.msg2.len());
                encode_handshake(
                    &Header::new(PacketType::HelloReply, cid, 0),
                    &p.msg2,
                    &mut out,
                );
                if !p.charge(out.len()) {
                    self.stats.amplification_limited += 1;
                    return;
                }
                self.reply(from, out);
            }
            return;
        }
        // Rate limit: a Hello carrying a valid Retry token comes from an address that receives
        // what we send (not a spoofed flood) and draws from a separate, larger budget; others
        // get a Retry (small, stateless) when the budget is used up.
        let validated = !hello.token.is_empty() && self.token_valid(now, from, cid, hello.token);
        let allowed = if validated {
            self.validated_bucket.take(now)
        } else {
            self.bucket.take(now)
        };
        if !allowed {
            self.stats.handshakes_rate_limited += 1;
            if !validated {
                let token = self.make_token(now, from, cid, now / RETRY_SLOT_US);
                let mut out = Vec::with_capacity(HEADER_LEN + token.len());
                encode_handshake(&Header::new(PacketType::Retry, cid, 0), &token, &mut out);
                if out.len() <= AMPLIFICATION_FACTOR as usize * len {
                    self.stats.retries_sent += 1;
                    self.reply(from, out);
                }
            }
            return;
        }
        let Some(mode) = Mode::from_u8(hello.mode) else {
            return self.cleartext_reject(
                from,
                cid,
                AMPLIFICATION_FACTOR * len as u64,
                RejectReason::Other,
                format!("unknown handshake mode {}", hello.mode),
            );
        };
        let pin = match mode {
            Mode::Known => None,
            Mode::Pin => match &self.pin {
                Some(p) if now < p.expires_us && p.attempts_left > 0 => Some(p.pin.clone()),
                _ => {
                    return self.cleartext_reject(
                        from,
                        cid,
                        AMPLIFICATION_FACTOR * len as u64,
                        RejectReason::Pin,
                        "no pairing PIN is active on the host: run `untether pair --pin` there"
                            .into(),
                    )
                }
            },
        };
        self.expire_handshakes(now);
        if let (Some(_), Some(live)) = (&pin, &self.pin) {
            // Each PIN handshake in progress holds one of the attempts left (its message 3 is
            // checked only while the PIN has attempts left): beyond, the oldest makes room, so
            // concurrent guesses never get more checks than the attempts.
            let attempts = live.attempts_left as usize;
            while self
                .pending
                .iter()
                .filter(|p| p.holds_pin_attempt())
                .count()
                >= attempts
            {
                let Some(oldest) = self.pending.iter().position(Pending::holds_pin_attempt) else {
                    break;
                };
                self.pending.remove(oldest);
                self.stats.handshakes_evicted += 1;
            }
        }
        if self.pending.len() >= self.cfg.max_handshakes.max(1) {
            // Evict the oldest: a flood must outpace the rate limit within one round trip to
            // displace a real client's handshake.
            self.pending.remove(0);
            self.stats.handshakes_evicted += 1;
        }
        let mut session_cid = self.rng.next_u64();
        while session_cid == 0 {
            session_cid = self.rng.next_u64();
        }
        let host_suites = self.cfg.suites;
        let (log2, auth_only) = (self.cfg.key_update_log2, self.cfg.video_auth_only);
        let result = HostHandshake::respond(
            &self.cfg.identity,
            mode,
            hello.noise,
            pin.as_deref(),
            &mut self.rng,
            |offer| {
                Some(SessionSetup {
                    connection_id: session_cid,
                    suite: offer.choose(host_suites)?,
                    key_update_log2: log2,
                    video_auth_only: auth_only,
                    spake: None,
                })
            },
        );
        let (hs, msg2, _summary, setup) = match result {
            Ok(x) => x,
            Err(crate::handshake::HandshakeError::NoSuite) => {
                return self.cleartext_reject(
                    from,
                    cid,
                    AMPLIFICATION_FACTOR * len as u64,
                    RejectReason::Other,
                    "no cipher suite in common with the host".into(),
                )
            }
            Err(_) => {
                self.stats.handshakes_failed += 1;
                return;
            }
        };
        self.stats.handshakes_started += 1;
        let mut out = Vec::with_capacity(HEADER_LEN + msg2.len());
        encode_handshake(
            &Header::new(PacketType::HelloReply, cid, 0),
            &msg2,
            &mut out,
        );
        let mut p = Pending {
            addr: from,
            client_cid: cid,
            created_us: now,
            state: PendingState::AwaitFinish(Box::new(hs)),
            msg2,
            setup,
            mode,
            pin,
            received: len as u64,
            sent: 0,
        };
        if p.charge(out.len()) {
            self.reply(from, out);
        } else {
            self.stats.amplification_limited += 1;
        }
        self.pending.push(p);
    }

    fn on_finish(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        msg3: &[u8],
        len: usize,
    ) {
        let cid = header.connection_id;
        let Some(i) = self
            .pending
            .iter()
            .position(|p| p.addr == from && p.client_cid == cid)
        else {
            return self.on_finish_repeat(now, from, cid, msg3);
        };
        let p = &mut self.pending[i];
        let hs = match &mut p.state {
            PendingState::AwaitFinish(hs) => hs,
            PendingState::Refused {
                reject,
                msg3: first,
                sent_us,
            } => {
                // Only a copy of the authenticated message 3 is a repeat (the Reject was
                // lost); it is answered at most once per interval and within the address's
                // 3× budget, which only such copies add to.
                if msg3 != first.as_slice() {
                    self.stats.auth_failures += 1;
                    return;
                }
                p.received += len as u64;
                if now < *sent_us + HANDSHAKE_REPEAT_ANSWER_US {
                    return;
                }
                let out = reject.clone();
                *sent_us = now;
                if !p.charge(out.len()) {
                    self.stats.amplification_limited += 1;
                    return;
                }
                return self.reply(from, out);
            }
        };
        if let Some(pin) = &p.pin {
            // Checked only under the live PIN with attempts left: attempts used up (by
            // concurrent guesses), the PIN expired, replaced or used by another client mean
            // this guess is refused unread.
            let live = self
                .pin
                .as_ref()
                .is_some_and(|l| &l.pin == pin && now < l.expires_us && l.attempts_left > 0);
            if !live {
                // (An unread message 3 adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.pending.remove(i);
                self.stats.handshakes_failed += 1;
                return self.cleartext_reject(
                    from,
                    cid,
                    budget,
                    RejectReason::Pin,
                    "the pairing PIN is no longer active on the host (used up, expired or \
                     replaced): run `untether pair --pin` there for a new one"
                        .into(),
                );
            }
        }
        let (key, info, keys) = match hs.finish(msg3) {
            Ok(x) => x,
            Err(_) => {
                // Forged or corrupted message 3, or (PIN mode) the wrong PIN.
                let mode = p.mode;
                // (A message 3 that failed adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.pending.remove(i);
                self.stats.handshakes_failed += 1;
                if mode == Mode::Pin {
                    self.stats.pin_failures += 1;
                    let left = match &mut self.pin {
                        Some(pin) => {
                            pin.attempts_left = pin.attempts_left.saturating_sub(1);
                            pin.attempts_left
                        }
                        None => 0,
                    };
                    if left == 0 {
                        self.pin = None;
                    }
                    self.pairing_event(PairingEvent::PinFailed {
                        addr: from,
                        attempts_left: left,
                    });
                    self.cleartext_reject(
                        from,
                        cid,
                        budget,
                        RejectReason::Pin,
                        format!("wrong PIN ({left} attempts left)"),
                    );
                }
                return;
            }
        };
        // Message 3 is authentic: it counts towards the address's budget.
        p.received += len as u64;
        // The client proved it received message 2: the address is validated.
        let p = self.pending.remove(i);
        self.stats.handshakes_completed += 1;
        let mut protection = Protection::new(
            p.setup.suite,
            keys.send,
            keys.recv,
            p.setup.key_update_log2,
            p.setup.video_auth_only,
        );
        let fp = fingerprint(&key);
        // Authorization.
        let refusal = if p.mode == Mode::Pin {
            // The PIN was right (message 3 authenticated under the SPAKE2 key): pair.
            self.pin = None;
            self.allowed.insert(key);
            self.requests.retain(|r| r.key != key);
            self.pairing_event(PairingEvent::Paired {
                key,
                fingerprint: fp.clone(),
                name: info.name.clone(),
            });
            None
        } else if self.revoked.contains(&key) {
            Some((
                RejectReason::NotAllowed,
                format!("this client's access ({fp}) was revoked on the host"),
            ))
        } else if self.cfg.access == AccessPolicy::Allowlist && !self.allowed.contains(&key) {
            let message = match self.note_access_request(now, from, key, &fp, &info.name) {
                Ok(()) => format!(
                    "this client ({fp}) is not paired with the host: approve it there with \
                     `untether pair approve {fp}`, or pair with a PIN (`untether pair --pin` on \
                     the host, then connect with --pin)"
                ),
                Err(why) => format!(
                    "this client ({fp}) is not paired with the host, and its access request was \
                     not recorded: {why}. Pair with a PIN instead (`untether pair --pin` on the \
                     host, then connect with --pin), or try again later"
                ),
            };
            Some((RejectReason::PendingApproval, message))
        } else {
            None
        };
        let refusal = refusal.or_else(|| {
            let peer = self.peer.as_ref()?;
            if peer.info.key == key {
                return None; // the same client again: it replaces its old session below
            }
            Some((
                RejectReason::Busy,
                format!(
                    "the host is serving client {:?} ({}); one client at a time",
                    peer.info.name, peer.info.fingerprint
                ),
            ))
        });
        // The codec: the client's first choice the host can encode.
        let offered: Vec<crate::wire::Codec> = if self.cfg.codecs.is_empty() {
            vec![self.cfg.params.codec]
        } else {
            self.cfg.codecs.iter().map(|o| o.codec).collect()
        };
        let codec = crate::wire::choose_codec(&offered, &info.decodes());
        let refusal = refusal.or_else(|| {
            codec
                .as_ref()
                .err()
                .map(|why| (RejectReason::Codec, why.clone()))
        });
        if let Some((reason, message)) = refusal {
            self.stats.clients_refused += 1;
            self.events.push_back(HostEvent::ClientRefused {
                addr: from,
                fingerprint: fp.clone(),
                reason,
                message: message.clone(),
            });
            let mut out = Vec::with_capacity(96 + message.len());
            encode_control(
                &Header::new(PacketType::Control, p.setup.connection_id, 0),
                &[ControlFrame::Reject(Reject { reason, message })],
                &mut out,
            );
            if protection
                .sealer
                .seal(&mut out, HEADER_LEN, 0, true)
                .is_ok()
            {
                let mut p = p;
                if p.charge(out.len()) {
                    self.reply(from, out.clone());
                } else {
                    self.stats.amplification_limited += 1;
                }
                p.state = PendingState::Refused {
                    reject: out,
                    msg3: msg3.to_vec(),
                    sent_us: now,
                };
                self.pending.push(p);
            }
            return;
        }
        if let Some(old) = self.peer.as_mut() {
            // Tell the replaced run why (sealed with its keys) before its session goes.
            let addr = old.info.addr;
            old.pending.push(ControlFrame::Bye {
                reason: ByeReason::Replaced,
            });
            while self.peer.is_some() && self.build_control(now).is_some() {}
            self.peer = None;
            self.events.push_back(HostEvent::ClientGone {
                addr,
                reason: GoneReason::Replaced,
            });
        }
        if let Ok(c) = codec {
            self.cfg.params.codec = c;
            if let Some(o) = self.cfg.codecs.iter().find(|o| o.codec == c) {
                self.cfg.params.refresh_period = o.refresh_period;
            }
        }
        let params = self.cfg.params;
        self.peer = Some(Peer {
            info: ClientInfo {
                addr: from,
                name: info.name.clone(),
                connection_id: p.setup.connection_id,
                connected_us: now,
                key,
                fingerprint: fp,
                suite: p.setup.suite,
            },
            handshake_cid: cid,
            handshake_msg3: msg3.to_vec(),
            protection,
            last_recv_us: now,
            last_send_us: now,
            next_pn: 0,
            window: PacketWindow::new(),
            input: ReliableReceiver::new(),
            state: StateReceiver::new(),
            state_tx: self.new_state_sender(now),
            pending: {
                let mut pending = Vec::new();
                Self::queue_accept(&mut pending, params, self.cfg.clock_id);
                pending
            },
            feedback: None,
            loss: LossEstimator::new(),
            paths: PathSet::new(self.cfg.paths, from, now, self.rng.next_u64()),
            rate: self.cfg.rate.map(RateController::new),
            next_ping_us: now,
            next_ping_id: 0,
            confirmed: false,
            accept_sent_us: now,
        });
        self.gate.reset();
        self.resend.clear();
        self.stats.clients_connected += 1;
        self.events.push_back(HostEvent::ClientConnected {
            addr: from,
            name: info.name,
        });
    }

    /// Puts the Accept (and the clock identity beside it) first in `pending`.
    fn queue_accept(
        pending: &mut Vec<ControlFrame>,
        params: SessionParams,
        clock: Option<[u8; 16]>,
    ) {
        pending.retain(|f| !matches!(f, ControlFrame::Accept(_) | ControlFrame::ClockId { .. }));
        if let Some(id) = clock {
            pending.insert(0, ControlFrame::ClockId { id });
        }
        pending.insert(0, ControlFrame::Accept(params));
    }

    /// A HelloFinish that matches no handshake in progress: the connected client's repeat
    /// (its Accept was lost) draws the Accept again — if it is an exact copy of its message 3,
    /// the client has not yet shown it has the Accept, and no Accept went out in the last
    /// [`HANDSHAKE_REPEAT_ANSWER_US`]. Anything else is dropped.
    fn on_finish_repeat(&mut self, now: Micros, from: SocketAddr, cid: u64, msg3: &[u8]) {
        let params = self.cfg.params;
        let clock = self.cfg.clock_id;
        let Some(peer) = self
            .peer
            .as_mut()
            .filter(|p| p.handshake_cid == cid && p.info.addr == from)
        else {
            self.stats.unknown_connection += 1;
            return;
        };
        if msg3 != peer.handshake_msg3.as_slice() {
            self.stats.auth_failures += 1;
            return;
        }
        if peer.confirmed || now < peer.accept_sent_us + HANDSHAKE_REPEAT_ANSWER_US {
            return;
        }
        Self::queue_accept(&mut peer.pending, params, clock);
        peer.accept_sent_us = now;
    }

    /// Records an access request (or refreshes a pending one). A new one is refused, and
    /// counted, when the list is full or its address made too many this minute: a flood of
    /// requests never pushes out the ones already pending. Err says why.
    fn note_access_request(
        &mut self,
        now: Micros,
        addr: SocketAddr,
        key: PublicKey,
        fp: &str,
        name: &str,
    ) -> Result<(), &'static str> {
        self.stats.access_requests += 1;
        if let Some(r) = self.requests.iter_mut().find(|r| r.key == key) {
            r.last_us = now;
            r.attempts += 1;
            r.addr = addr;
            return Ok(());
        }
        if self.requests.len() >= self.cfg.max_access_requests.max(1) {
            self.stats.access_requests_refused += 1;
            return Err("the host's list of pending access requests is full");
        }
        const MINUTE_US: Micros = 60_000_000;
        const MAX_ADDRESSES: usize = 1024;
        if self.request_counts.len() >= MAX_ADDRESSES {
            self.request_counts
                .retain(|_, (start, _)| now < *start + MINUTE_US);
        }
        let ip = addr.ip();
        let known = self.request_counts.contains_key(&ip);
        if !known && self.request_counts.len() >= MAX_ADDRESSES {
            self.stats.access_requests_refused += 1;
            return Err("the host is receiving access requests from too many addresses");
        }
        let count = self.request_counts.entry(ip).or_insert((now, 0));
        if now >= count.0 + MINUTE_US {
            *count = (now, 0);
        }
        if count.1 >= self.cfg.access_requests_per_minute {
            self.stats.access_requests_refused += 1;
            return Err("too many new access requests came from this address in the last minute");
        }
        count.1 += 1;
        let r = AccessRequest {
            key,
            fingerprint: fp.to_string(),
            name: name.to_string(),
            addr,
            first_us: now,
            last_us: now,
            attempts: 1,
        };
        self.requests.push_back(r.clone());
        self.pairing_event(PairingEvent::AccessRequested(r));
        Ok(())
    }

    fn on_control(&mut self, now: Micros, from: SocketAddr, f: ControlFrame) {
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        match f {
            ControlFrame::KeyframeRequest { lost_frame } => {
                self.stats.keyframe_requests_received += 1;
                if self.gate.on_request(now, lost_frame) == KeyframeDecision::Honour {
                    self.events.push_back(HostEvent::KeyframeRequested);
                }
            }
            ControlFrame::Feedback(fb) => {
                peer.feedback = Some(fb);
                peer.loss.on_feedback(&fb);
                if let Some(rate) = peer.rate.as_mut() {
                    let mean =
                        self.stats.bytes_sent as f64 / self.stats.datagrams_sent.max(1) as f64;
                    if let (_, Some(kbps)) = rate.on_feedback(now, &fb, mean) {
                        self.events.push_back(HostEvent::BitrateChanged { kbps });
                    }
                }
                self.events.push_back(HostEvent::Feedback(fb));
            }
            ControlFrame::Ping { id, sent_us } => {
                // The pong's send time is stamped when the datagram is built.
                peer.pending.push(ControlFrame::Pong {
                    id,
                    ping_sent_us: sent_us,
                    received_us: now,
                    sent_us: 0,
                });
            }
            ControlFrame::Pong {
                ping_sent_us,
                received_us,
                sent_us,
                ..
            } => {
                // A pong to the host's own ping (adaptive bitrate): RTT without the client's
                // turnaround.
                if let Some(rate) = peer.rate.as_mut() {
                    if ping_sent_us <= now {
                        let turnaround = sent_us.saturating_sub(received_us);
                        rate.on_rtt(now, (now - ping_sent_us).saturating_sub(turnaround));
                    }
                }
            }
            ControlFrame::ShardNack {
                frame_number,
                missing,
            } => self.retransmit(now, frame_number, 0, &missing),
            ControlFrame::SliceNack {
                frame_number,
                slice_index,
                missing,
            } => self.retransmit(now, frame_number, slice_index, &missing),
            ControlFrame::PathResponse { token } => {
                if !peer.paths.on_response(now, from, token) {
                    self.stats.path_responses_unknown += 1;
                }
                peer.paths.update(now);
            }
            ControlFrame::Input { first_seq, events } => {
                let mut out = Vec::new();
                let before = peer.input.duplicates;
                peer.input.on_events(first_seq, &events, &mut out);
                self.stats.inputs_duplicate += peer.input.duplicates - before;
                self.stats.inputs_received += out.len() as u64;
                for rec in out {
                    self.events.push_back(HostEvent::Input(rec));
                }
                if peer.input.ack_due {
                    peer.input.ack_due = false;
                    peer.pending
                        .retain(|f| !matches!(f, ControlFrame::InputAck { .. }));
                    peer.pending.push(ControlFrame::InputAck {
                        next_expected: peer.input.next_expected(),
                    });
                }
            }
            ControlFrame::State(p) => {
                self.stats.state_packets_received += 1;
                peer.state.on_packet(now, &p);
                if let Some(ack) = peer.state.poll_ack() {
                    peer.pending
                        .retain(|f| !matches!(f, ControlFrame::StateAck(_)));
                    peer.pending.push(ControlFrame::StateAck(ack));
                }
            }
            ControlFrame::StateAck(a) => peer.state_tx.on_ack(now, &a),
            ControlFrame::Bye { .. } => {
                let addr = peer.info.addr;
                self.peer = None;
                self.events.push_back(HostEvent::ClientGone {
                    addr,
                    reason: GoneReason::Bye,
                });
            }
            ControlFrame::LinkAddress { ethertype, mac } => {
                self.events.push_back(HostEvent::LinkAddress {
                    addr: peer.info.addr,
                    ethertype,
                    mac,
                });
            }
            // Only the host sends these.
            ControlFrame::LinkDeclined { .. }
            | ControlFrame::SliceTiming { .. }
            | ControlFrame::InputAck { .. }
            | ControlFrame::FrameTiming(_)
            | ControlFrame::Accept(_)
            | ControlFrame::Reject(_)
            | ControlFrame::ClockId { .. }
            | ControlFrame::FramePose { .. }
            | ControlFrame::PathChallenge { .. } => {}
        }
    }

    // ---- send ----------------------------------------------------------------------------

    /// Packetizes one encoded frame (an Annex B access unit) into protected shards for the
    /// client, then its Reed–Solomon parity shards (per [`HostConfig::fec`]); returns how many
    /// datagrams it queued.
    pub fn send_frame(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_frame_flagged(now, frame_number, capture_us, keyframe, false, data)
    }

    /// [`send_frame`](Self::send_frame), saying whether an intra-refresh sweep starts with
    /// this frame (its shards carry [`crate::wire::shard_flags::REFRESH`]).
    pub fn send_frame_flagged(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        refresh_start: bool,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_slice_flagged(
            now,
            frame_number,
            capture_us,
            keyframe,
            refresh_start,
            SliceId::WHOLE,
            data,
        )
    }

    /// Packetizes one slice of a frame sent in slices (docs/PROTOCOL.md §6.3) — its Annex B
    /// NAL units — into protected shards of its own, then its own parity shards, as soon as
    /// the encoder hands it over. Slices of a frame share its number, capture time and
    /// keyframe flag; each may be sent as soon as it is encoded, in any order.
    /// [`SliceId::WHOLE`] sends a whole frame ([`send_frame`](Self::send_frame)).
    pub fn send_slice(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        slice: SliceId,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_slice_flagged(now, frame_number, capture_us, keyframe, false, slice, data)
    }

    /// [`send_slice`](Self::send_slice), saying whether an intra-refresh sweep starts with
    /// this frame (every slice of it says so: its shards carry
    /// [`crate::wire::shard_flags::REFRESH`]).
    #[allow(clippy::too_many_arguments)]
    pub fn send_slice_flagged(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        refresh_start: bool,
        slice: SliceId,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        let extra_flags = if refresh_start {
            crate::wire::shard_flags::REFRESH
        } else {
            0
        };
        let max = self.cfg.params.max_datagram as usize;
        let policy = self.cfg.fec;
        let (params, clock) = (self.cfg.params, self.cfg.clock_id);
        let peer = self.peer.as_mut().ok_or(NoClient)?;
        if data.is_empty() {
            return Ok(0);
        }
        if !peer.confirmed
            && now >= peer.accept_sent_us + ACCEPT_REPEAT_US
            && now < peer.info.connected_us + ACCEPT_REPEAT_FOR_US
        {
            // Ahead of this frame's shards (control goes first): if the Accept was lost, the
            // client connects now instead of after its 200 ms HelloFinish repeat.
            Self::queue_accept(&mut peer.pending, params, clock);
            peer.accept_sent_us = now;
            self.stats.accepts_repeated += 1;
        }
        let mut max_payload = max
            .saturating_sub(HEADER_LEN + SHARD_HEADER_LEN + TAG_LEN)
            .clamp(1, u16::MAX as usize);
        if !policy.is_off() && max_payload >= 2 {
            // Reed–Solomon works on 16-bit symbols: parity needs an even shard length.
            max_payload &= !1;
        }
        let loss = peer.loss.loss();
        let encrypt = !peer.protection.video_auth_only;
        let mut n = 0;
        let mut template = None;
        let cid = peer.info.connection_id;
        let class = if keyframe {
            Class::KeyframeShard
        } else {
            Class::Shard
        };
        peer.paths.schedule(class, now, &mut self.sched);
        let sched = &self.sched;
        let shards = shard_slice_fec(
            slice,
            frame_number,
            capture_us,
            keyframe,
            data.len(),
            max_payload,
            |k| policy.parity_count(k, keyframe, loss),
        );
        let mut kept = Vec::new();
        for (mut sh, range) in shards {
            sh.flags |= extra_flags;
            template.get_or_insert(sh);
            if self.cfg.retransmit && !sh.is_parity() {
                kept.push((sh, range.clone()));
            }
            if !seal_shard(
                peer,
                &mut self.stats,
                &mut self.transmits,
                sched,
                cid,
                &sh,
                &data[range],
                encrypt,
            ) {
                break;
            }
            n += 1;
        }
        // Parity, after the frame's data shards.
        if let Some(t) = template.filter(|t| t.parity_count > 0 && n == t.data_count as usize) {
            let (m, l) = (t.parity_count as usize, t.shard_len as usize);
            let buf = &mut self.parity_buf;
            buf.clear();
            buf.resize(m * l, 0);
            let ok = self
                .fec
                .encode(data, l, m, |i, s| {
                    if let Some(d) = buf.get_mut(i * l..(i + 1) * l) {
                        d.copy_from_slice(s);
                    }
                })
                .is_ok();
            if ok {
                let mut sent = 0;
                for (i, shard) in self.parity_buf.chunks(l).enumerate() {
                    let ph = parity_header(&t, i as u16);
                    if !seal_shard(
                        peer,
                        &mut self.stats,
                        &mut self.transmits,
                        sched,
                        cid,
                        &ph,
                        shard,
                        encrypt,
                    ) {
                        break;
                    }
                    sent += 1;
                }
                n += sent;
                self.stats.parity_shards_sent += sent as u64;
                self.stats.frames_with_parity += (sent > 0) as u64;
            }
        }
        peer.last_send_us = now;
        self.stats.shards_sent += n as u64;
        if slice.index == 0 {
            self.stats.frames_sent += 1;
        }
        if slice.count > 1 {
            self.stats.slices_sent += 1;
        }
        if self.cfg.retransmit {
            self.resend.push_back(SentFrame {
                frame_number,
                slice_index: slice.index,
                keyframe,
                data: data.to_vec(),
                shards: kept,
            });
            // The last RESEND_FRAMES frames, whatever their slices.
            let kept_entries = RESEND_FRAMES * slice.count.max(1) as usize;
            while self.resend.len() > kept_entries
                || (self.resend.len() > 1
                    && self.resend.iter().map(|f| f.data.len()).sum::<usize>() > RESEND_BYTES)
            {
                self.resend.pop_front();
            }
        }
        if keyframe && slice.index == 0 {
            self.gate.on_keyframe_sent(frame_number);
        }
        Ok(n)
    }

    /// A client's ShardNack (slice 0 of a frame sent whole) or SliceNack: reseals the missing
    /// data shards of a kept frame (slice) and queues them like its original shards.
    fn retransmit(&mut self, now: Micros, frame_number: u32, slice_index: u8, missing: &[u16]) {
        self.stats.shard_nacks_received += 1;
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        let Some(f) = self
            .resend
            .iter()
            .find(|f| f.frame_number == frame_number && f.slice_index == slice_index)
        else {
            self.stats.shard_nacks_too_late += 1;
            return;
        };
        let class = if f.keyframe {
            Class::KeyframeShard
        } else {
            Class::Shard
        };
        peer.paths.schedule(class, now, &mut self.sched);
        let (cid, encrypt) = (peer.info.connection_id, !peer.protection.video_auth_only);
        for &i in missing.iter().take(wire::MAX_NACK_SHARDS) {
            let Some((sh, range)) = f.shards.get(i as usize) else {
                continue;
            };
            let Some(payload) = f.data.get(range.clone()) else {
                continue;
            };
            if !seal_shard(
                peer,
                &mut self.stats,
                &mut self.transmits,
                &self.sched,
                cid,
                sh,
                payload,
                encrypt,
            ) {
                break;
            }
            self.stats.shards_retransmitted += 1;
        }
    }

    /// Queues one audio packet for the client (one datagram, sent after queued shards).
    pub fn send_audio(
        &mut self,
        now: Micros,
        packet: &crate::audio::AudioPacket,
    ) -> Result<(), NoClient> {
        let peer = self.peer.as_mut().ok_or(NoClient)?;
        let mut out = Vec::with_capacity(HEADER_LEN + packet.encoded_len() + TAG_LEN);
        let pn = peer.next_pn;
        Header::new(PacketType::Audio, peer.info.connection_id, pn).write(&mut out);
        peer.next_pn += 1;
        packet.encode(&mut out);
        // Audio is always encrypted, like control and input.
        if peer
            .protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .is_err()
        {
            return Ok(());
        }
        peer.last_send_us = now;
        peer.paths.schedule(Class::Control, now, &mut self.sched);
        fan_out(
            &mut peer.paths,
            &self.sched,
            &mut self.stats,
            &mut self.transmits,
            out,
        );
        Ok(())
    }

    /// Queues a raw layer-2 answer ([`ControlFrame::LinkAddress`] with the host's MAC, or
    /// [`ControlFrame::LinkDeclined`]) for the client at `addr`; other frames are ignored.
    pub fn send_link_frame(&mut self, _now: Micros, addr: SocketAddr, frame: ControlFrame) {
        if !matches!(
            frame,
            ControlFrame::LinkAddress { .. } | ControlFrame::LinkDeclined { .. }
        ) {
            return;
        }
        if let Some(peer) = self.peer.as_mut().filter(|p| p.info.addr == addr) {
            peer.pending.push(frame);
        }
    }

    /// Queues a frame's timing report for the client. It leaves after the frame's last
    /// datagram: for a frame sent in slices it is also the client's frame-end signal.
    pub fn send_frame_timing(&mut self, _now: Micros, timing: FrameTiming) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::FrameTiming(timing));
        }
    }

    /// Queues a sliced frame's encoder timing (a SliceTiming frame, beside its FrameTiming):
    /// when its first and last slice were handed to the network, µs after capture.
    pub fn send_slice_timing(
        &mut self,
        _now: Micros,
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    ) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            });
        }
    }

    /// Queues the pose frame `frame_number` was rendered for (call it before
    /// [`send_frame`](Self::send_frame), so it leaves ahead of the shards, and again with the
    /// frame's timing: the client keeps the first copy).
    pub fn send_frame_pose(&mut self, _now: Micros, frame_number: u32, sample: PoseSample) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::FramePose {
                frame_number,
                sample,
            });
        }
    }

    /// Publishes a key of host → client state (haptics, other players, application state) on
    /// the latest-wins channel. Kept while no client is connected; a client that connects gets
    /// every key's current value. False when the key table is full.
    pub fn publish_state(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        if !self.published.contains_key(&key) && self.published.len() >= crate::state::MAX_KEYS {
            return false;
        }
        self.published.insert(key, value);
        if let Some(peer) = self.peer.as_mut() {
            return peer.state_tx.set(now, key, value);
        }
        true
    }

    /// Staleness of the host → client state (the current client's; None without one).
    pub fn state_staleness(&self, now: Micros) -> Option<Staleness> {
        self.peer.as_ref().map(|p| p.state_tx.staleness(now))
    }

    fn new_state_sender(&self, now: Micros) -> StateSender {
        let mut tx = StateSender::new(self.cfg.state);
        for (k, v) in &self.published {
            tx.set(now, *k, *v);
        }
        tx
    }

    /// Ends the session with the client (host shutting down).
    pub fn close(&mut self, now: Micros) {
        self.close_with(now, ByeReason::ShuttingDown);
    }

    /// Says goodbye to the client with `reason` (sent with the next datagrams).
    pub fn close_with(&mut self, _now: Micros, reason: ByeReason) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::Bye { reason });
        }
    }

    /// One protected control datagram from the peer's pending frames, queued (a copy per
    /// scheduled path) on `control_out`.
    fn build_control(&mut self, now: Micros) -> Option<()> {
        let max = self.cfg.params.max_datagram as usize;
        let peer = self.peer.as_mut()?;
        // Host → client state, once the application has published any (an idle channel
        // sends nothing, not even its keep-alive).
        if peer.state_tx.key_count() > 0 {
            if let Some(p) = peer
                .state_tx
                .poll_packet(now, max.saturating_sub(HEADER_LEN + TAG_LEN + 3))
            {
                peer.pending.push(ControlFrame::State(p));
            }
        }
        if peer.pending.is_empty() {
            return None;
        }
        let mut frames = Vec::new();
        let mut len = HEADER_LEN + TAG_LEN;
        let mut closing = false;
        while let Some(f) = peer.pending.first() {
            let l = f.encoded_len();
            if !frames.is_empty() && len + l > max {
                break;
            }
            let mut f = peer.pending.remove(0);
            if let ControlFrame::Pong { sent_us, .. } | ControlFrame::Ping { sent_us, .. } = &mut f
            {
                *sent_us = now;
            }
            closing |= matches!(f, ControlFrame::Bye { .. });
            len += l;
            frames.push(f);
        }
        let mut out = Vec::with_capacity(len);
        let pn = peer.next_pn;
        encode_control(
            &Header::new(PacketType::Control, peer.info.connection_id, pn),
            &frames,
            &mut out,
        );
        peer.next_pn += 1;
        peer.protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .ok()?;
        peer.last_send_us = now;
        peer.paths.schedule(Class::Control, now, &mut self.sched);
        fan_out(
            &mut peer.paths,
            &self.sched,
            &mut self.stats,
            &mut self.control_out,
            out,
        );
        if closing {
            self.peer = None;
        }
        Some(())
    }

    /// The next datagram to send. Control datagrams go before queued shards: they are small and
    /// time-critical (pongs, acks).
    pub fn poll_transmit(&mut self, now: Micros) -> Option<Transmit> {
        if self.control_out.is_empty() {
            self.build_control(now);
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
        let peer = self.peer.as_ref().map(|p| {
            let keepalive = p.last_send_us + self.cfg.params.keepalive_ms as u64 * 1000;
            let idle = p.last_recv_us + self.cfg.params.idle_timeout_ms as u64 * 1000;
            let paths = p.paths.next_timeout().unwrap_or(Micros::MAX);
            let ping = if p.rate.is_some() {
                p.next_ping_us
            } else {
                Micros::MAX
            };
            let state = match p.state_tx.key_count() {
                0 => Micros::MAX,
                _ => p.state_tx.poll_timeout().unwrap_or(Micros::MAX),
            };
            keepalive.min(idle).min(paths).min(ping).min(state)
        });
        [hs, peer].into_iter().flatten().min()
    }

    /// Runs timers: the idle timeout, keep-alives, handshake expiry.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.expire_handshakes(now);
        let keepalive_us = self.cfg.params.keepalive_ms as u64 * 1000;
        let idle_us = self.cfg.params.idle_timeout_ms as u64 * 1000;
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        if now >= peer.last_recv_us + idle_us {
            let addr = peer.info.addr;
            self.peer = None;
            self.events.push_back(HostEvent::ClientGone {
                addr,
                reason: GoneReason::Timeout,
            });
            return;
        }
        if now >= peer.last_send_us + keepalive_us && peer.pending.is_empty() {
            // An empty control datagram.
            let mut out = Vec::with_capacity(HEADER_LEN + TAG_LEN);
            let pn = peer.next_pn;
            encode_control(
                &Header::new(PacketType::Control, peer.info.connection_id, pn),
                &[],
                &mut out,
            );
            peer.next_pn += 1;
            peer.last_send_us = now;
            if peer
                .protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_ok()
            {
                peer.paths.schedule(Class::Control, now, &mut self.sched);
                fan_out(
                    &mut peer.paths,
                    &self.sched,
                    &mut self.stats,
                    &mut self.transmits,
                    out,
                );
            }
        }
        self.probe_paths(now);
    }

    /// Multipath: PathChallenges due on each path (each in its own datagram, to that path
    /// only), and path liveness. Adaptive bitrate: the periodic ping.
    fn probe_paths(&mut self, now: Micros) {
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        if peer.rate.is_some() && now >= peer.next_ping_us {
            peer.next_ping_us = now + RATE_PING_INTERVAL_US;
            peer.next_ping_id = peer.next_ping_id.wrapping_add(1);
            // Stamped when the datagram is built.
            peer.pending.push(ControlFrame::Ping {
                id: peer.next_ping_id,
                sent_us: now,
            });
        }
        peer.paths.update(now);
        let mut due = Vec::new();
        peer.paths.due_challenges(now, &mut due);
        for (addr, token) in due {
            let mut out = Vec::with_capacity(HEADER_LEN + 11 + TAG_LEN);
            let pn = peer.next_pn;
            encode_control(
                &Header::new(PacketType::Control, peer.info.connection_id, pn),
                &[ControlFrame::PathChallenge { token }],
                &mut out,
            );
            peer.next_pn += 1;
            if peer
                .protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_err()
            {
                continue;
            }
            let Some(i) = peer.paths.find(addr) else {
                continue;
            };
            self.stats.path_challenges_sent += 1;
            fan_out(
                &mut peer.paths,
                &[i],
                &mut self.stats,
                &mut self.control_out,
                out,
            );
        }
    }

    /// The adaptive bitrate controller's state (None when it is off or no client is there).
    pub fn rate_stats(&self) -> Option<RateStats> {
        self.peer.as_ref()?.rate.as_ref().map(RateController::stats)
    }

    /// Per-path counters and state of the connected client's paths (one entry without
    /// multipath).
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.peer
            .as_ref()
            .map(|p| p.paths.stats())
            .unwrap_or_default()
    }
}

/// Queues `payload` on each scheduled path (copies for all but the last), counting it.
fn fan_out(
    paths: &mut PathSet,
    sched: &[usize],
    stats: &mut HostStats,
    queue: &mut VecDeque<Transmit>,
    payload: Vec<u8>,
) {
    let len = payload.len();
    let mut payload = Some(payload);
    for (k, &i) in sched.iter().enumerate() {
        let Some(dst) = paths.addr(i) else {
            continue;
        };
        let p = if k + 1 == sched.len() {
            payload.take().unwrap_or_default()
        } else {
            payload.clone().unwrap_or_default()
        };
        paths.on_sent(i, len);
        stats.bytes_sent += len as u64;
        stats.datagrams_sent += 1;
        queue.push_back(Transmit { dst, payload: p });
    }
}

/// Seals one shard (data or parity) into a datagram and queues it; false if sealing failed.
#[allow(clippy::too_many_arguments)]
fn seal_shard(
    peer: &mut Peer,
    stats: &mut HostStats,
    transmits: &mut VecDeque<Transmit>,
    sched: &[usize],
    cid: u64,
    sh: &wire::ShardHeader,
    payload: &[u8],
    encrypt: bool,
) -> bool {
    let mut out = Vec::with_capacity(HEADER_LEN + SHARD_HEADER_LEN + payload.len() + TAG_LEN);
    let pn = peer.next_pn;
    Header::new(PacketType::Shard, cid, pn).write(&mut out);
    peer.next_pn += 1;
    sh.write(&mut out);
    out.extend_from_slice(payload);
    if peer
        .protection
        .sealer
        .seal(&mut out, HEADER_LEN, pn, encrypt)
        .is_err()
    {
        return false;
    }
    fan_out(&mut peer.paths, sched, stats, transmits, out);
    true
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}
