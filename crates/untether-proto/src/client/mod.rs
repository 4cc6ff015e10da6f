//! The client's side of the protocol, sans-IO: asks for a session, reassembles frames, requests
//! keyframes after a loss, sends input reliably, estimates the clock offset, keeps the session
//! alive and notices when the host is gone.

use std::collections::VecDeque;

use crate::assembler::{
    Assembled, Assembler, AssemblerConfig, AssemblerStats, CompleteFrame, LossCause, SliceId,
};
use crate::clock::{ClockEstimate, ClockEstimator, ClockSample};
use crate::crypto::{Protection, Suite, ALL_SUITES, TAG_LEN};
use crate::handshake::{
    fingerprint, ClientHandshake, ClientInfoPayload, PublicKey, SessionRng, StaticKeypair,
};
use crate::keyframe::KeyframeRequester;
use crate::paths::MAX_PATHS;
use crate::pose::PoseSample;
use crate::reliable::ReliableSender;
use crate::state::{
    Staleness, StateConfig, StateEntry, StateKey, StateReceiver, StateSender, StateSenderStats,
    StateValue,
};
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, encode_control, encode_handshake, role_flags, ByeReason, ClientRole, Codec, ControlFrame,
    Datagram, Feedback, FrameTiming, Header, Hello, InputEvent, PacketType, RejectReason,
    SessionParams, TextChunk, HEADER_LEN, SHARD_HEADER_LEN,
};
use crate::{GoneReason, Micros};

/// Client settings.
#[derive(Clone)]
pub struct ClientConfig {
    /// Shown to the host.
    pub name: String,
    /// Which monotonic clock the application reads (see `ControlFrame::ClockId`): when the
    /// host reads the same, the clock offset is exactly 0.
    pub clock_id: Option<[u8; 16]>,
    /// Random per run (tells a restarted client from a retransmitted Hello).
    pub nonce: u64,
    /// Give up when the host has not answered within this.
    pub connect_timeout_us: Micros,
    /// Resend the Hello this often while connecting.
    pub hello_interval_us: Micros,
    /// A frame incomplete this long after its first shard is lost.
    pub reassembly_deadline_us: Micros,
    /// Overridden by the host's session parameters once connected.
    pub keepalive_us: Micros,
    pub idle_timeout_us: Micros,
    /// Clock-sync pings: a quick burst after connecting, then this often.
    pub ping_interval_us: Micros,
    /// Feedback to the host this often.
    pub feedback_interval_us: Micros,
    /// The largest datagram this client accepts.
    pub max_datagram: u16,
    /// The codecs this client decodes, preferred first: sent in the handshake (message 3,
    /// authenticated), the host picks one ([`wire::choose_codec`]).
    pub codecs: Vec<Codec>,
    /// SRTT ← α·RTT + (1−α)·SRTT.
    pub rtt_alpha: f64,
    /// Input retransmission timeout = β·SRTT (at least `min_rto_us`).
    pub rto_beta: f64,
    pub min_rto_us: Micros,
    /// The client's long-term key pair (its identity).
    pub identity: StaticKeypair,
    /// The host's key, if known (pinned): a host presenting another key is refused.
    pub host_key: Option<PublicKey>,
    /// Pair with this one-time PIN (shown by `untether pair --pin` on the host).
    pub pin: Option<String>,
    /// AEAD suites the client accepts, and the one it prefers.
    pub suites: u8,
    pub suite_preference: Suite,
    /// Seeds the session's CSPRNG (ephemeral keys, connection ids, SPAKE2).
    pub entropy: [u8; 32],
    /// The client → host latest-wins state channel's budget, bytes/s (0: none).
    pub state_budget_bytes_per_s: u64,
    /// Ask the host to resend the data shards of a frame that cannot complete (ShardNack),
    /// when the RTT leaves time before the frame's deadline; such a frame is then given up
    /// when the retries fail instead of as soon as a newer frame completes.
    pub retransmit: bool,
    /// The stream this client asks for (size, frame rate, bit rate; sent in message 3): the
    /// host grants it within its limits, and the Accept's parameters say what it granted.
    pub wants: Option<crate::handshake::StreamWants>,
    /// A VR client's eye views (sent in message 3): the host renders with them.
    pub view: Option<crate::handshake::ViewInfo>,
}

impl std::fmt::Debug for ClientConfig {
    /// Shows the configuration without secrets (the private key, the PIN, the entropy).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("name", &self.name)
            .field("connect_timeout_us", &self.connect_timeout_us)
            .field("hello_interval_us", &self.hello_interval_us)
            .field("reassembly_deadline_us", &self.reassembly_deadline_us)
            .field("keepalive_us", &self.keepalive_us)
            .field("idle_timeout_us", &self.idle_timeout_us)
            .field("max_datagram", &self.max_datagram)
            .field("codecs", &self.codecs)
            .field("identity", &self.identity)
            .field("host_key", &self.host_key.map(|k| fingerprint(&k)))
            .field("pin", &self.pin.as_ref().map(|_| "…"))
            .field("suites", &self.suites)
            .field("suite_preference", &self.suite_preference)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Defaults, with a fresh random identity and entropy from the OS (the runtime sets the
    /// stored identity once pairing is wired in).
    pub fn new(name: impl Into<String>) -> Self {
        let mut rng = SessionRng::from_os();
        ClientConfig {
            clock_id: None,
            name: name.into(),
            nonce: 1,
            connect_timeout_us: 3_000_000,
            hello_interval_us: 200_000,
            reassembly_deadline_us: 50_000,
            keepalive_us: 2_000_000,
            idle_timeout_us: 30_000_000,
            ping_interval_us: 500_000,
            feedback_interval_us: 100_000,
            max_datagram: 1500,
            // What FFmpeg's software decoders here handle; H.264 first (the fastest to
            // decode in software).
            codecs: vec![Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1],
            rtt_alpha: 0.9,
            rto_beta: 2.0,
            min_rto_us: 5_000,
            identity: StaticKeypair::generate(&mut rng),
            host_key: None,
            pin: None,
            suites: ALL_SUITES,
            // AES-GCM is the faster suite on CPUs with AES instructions (x86-64, ARMv8 with
            // the crypto extension); pick ChaCha20-Poly1305 on CPUs without them.
            suite_preference: Suite::Aes256Gcm,
            entropy: rng.seed(),
            retransmit: true,
            wants: None,
            view: None,
            state_budget_bytes_per_s: 0,
        }
    }
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientEvent {
    Connected(SessionParams),
    Rejected {
        reason: RejectReason,
        message: String,
    },
    /// The host did not answer within the connect timeout.
    ConnectTimeout,
    HostGone(GoneReason),
    /// A complete, decodable frame, in order.
    Frame(CompleteFrame),
    /// One slice of a frame sent in slices, in decode order (slice 0 first, the last slice
    /// last; docs/PROTOCOL.md §6.3).
    Slice(CompleteFrame),
    /// A slice given up, in decode order: the rest of its frame is still delivered (its
    /// region concealed by the decoder); a keyframe has been requested.
    SliceLost {
        frame_number: u32,
        slice: SliceId,
        cause: LossCause,
    },
    /// When a sliced frame's first and last slice left the host's encoder, µs after capture.
    SliceTiming {
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    },
    /// A frame lost in the network; a keyframe has been requested.
    FrameLost {
        frame_number: u32,
        cause: LossCause,
    },
    /// A complete frame that cannot be decoded (an earlier one was lost).
    FrameSkipped {
        frame_number: u32,
    },
    FrameTiming(FrameTiming),
    /// Every input event below `next_expected` reached the host.
    InputAcked {
        next_expected: u32,
    },
    /// A round-trip time sample from a ping, microseconds.
    Rtt(u64),
    /// An audio packet (unordered: the jitter buffer orders them by `seq`).
    Audio(crate::audio::AudioPacket),
    /// The host told this client its role (a host serving several clients): at the start and
    /// on every change.
    Role {
        role: ClientRole,
        /// A viewer whose input the host applies.
        input_granted: bool,
        /// A viewer paused to keyframes only (its link cannot carry the stream).
        paused: bool,
    },
    /// The pose frame `frame_number` was rendered for (once per frame, whichever copy came
    /// first; possibly after the frame itself).
    FramePose {
        frame_number: u32,
        sample: PoseSample,
    },
    /// The host takes the raw layer-2 transport: its MAC address and EtherType (answer to
    /// [`ClientSession::send_link_address`]; docs/PROTOCOL.md §7.3).
    LinkAddress {
        ethertype: u16,
        mac: [u8; 6],
    },
    /// The host does not take the raw layer-2 transport: stay on UDP.
    LinkDeclined(crate::wire::LinkDeclineReason),
}

/// Counters of the client session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub bytes_received: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    /// Gaps in the host's packet numbers.
    pub packets_lost: u64,
    pub duplicate_datagrams: u64,
    pub malformed_datagrams: u64,
    pub unknown_connection: u64,
    /// Protected datagrams whose tag did not verify.
    pub auth_failures: u64,
    /// Retry tokens received (the host was under a flood of handshakes).
    pub retries_received: u64,
    /// Version Negotiations that excluded this client's version while it waited for the
    /// host's reply (unauthenticated: reported only if the connect timeout comes first).
    pub version_negotiations_received: u64,
    pub key_updates: u64,
    pub frames_complete: u64,
    pub frames_lost: u64,
    pub frames_skipped: u64,
    /// Frames with shards that arrived after the frame was delivered or given up.
    pub frames_late: u64,
    pub keyframe_requests_sent: u64,
    pub decode_failures: u64,
    pub inputs_sent: u64,
    pub inputs_retransmitted: u64,
    pub inputs_refused: u64,
    pub assembler: AssemblerStats,
    pub state: StateSenderStats,
    /// Host → client state packets received.
    pub state_packets_received: u64,
    /// Retransmission: ShardNacks (and SliceNacks) sent, and frames (slices) given up after
    /// them.
    pub shard_nacks_sent: u64,
    pub frames_abandoned: u64,
    pub slices_abandoned: u64,
    /// Per path (multipath; index as given to [`ClientSession::handle_datagram_on`]).
    pub paths: [ClientPathStats; MAX_PATHS],
    /// PathChallenges answered.
    pub path_responses_sent: u64,
}

impl ClientStats {
    /// Adds an earlier session's counters to these (a client that reconnected reports every
    /// session's frames, as its decoder counts them). The assembler's and the state channel's
    /// counters stay this session's.
    pub fn absorb(&mut self, earlier: &ClientStats) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += earlier.$f; )* };
        }
        add!(
            bytes_received,
            datagrams_received,
            bytes_sent,
            datagrams_sent,
            packets_lost,
            duplicate_datagrams,
            malformed_datagrams,
            unknown_connection,
            auth_failures,
            retries_received,
            version_negotiations_received,
            key_updates,
            frames_complete,
            frames_lost,
            frames_skipped,
            frames_late,
            keyframe_requests_sent,
            decode_failures,
            inputs_sent,
            inputs_retransmitted,
            inputs_refused,
            state_packets_received,
            shard_nacks_sent,
            frames_abandoned,
            slices_abandoned,
            path_responses_sent
        );
        for (p, e) in self.paths.iter_mut().zip(earlier.paths.iter()) {
            p.datagrams_received += e.datagrams_received;
            p.bytes_received += e.bytes_received;
            p.first_copies += e.first_copies;
            p.duplicates += e.duplicates;
        }
    }
}

/// What arrived on one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientPathStats {
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// Datagrams whose first copy came on this path.
    pub first_copies: u64,
    /// Copies that another path (or an earlier one on this path) had already delivered.
    pub duplicates: u64,
}

/// Where the runtime sends a datagram from [`ClientSession::poll_transmit_routed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The handshake: the host's primary address (path 0).
    Primary,
    /// Every path (the client's datagrams are small: it sends them on all paths, so input and
    /// acknowledgements take the fastest path whichever it is).
    All,
    /// One path only (a PathResponse answers on the path its challenge came from).
    Path(u8),
}

enum Phase {
    /// Hello sent; waiting for the host's HelloReply.
    AwaitReply,
    /// HelloFinish sent; waiting for the protected Accept (or Reject).
    AwaitAccept {
        cid: u64,
        protection: Box<Protection>,
        host_key: PublicKey,
    },
}

enum State {
    Connecting {
        started_us: Micros,
        next_hello_us: Micros,
        /// The connection id of the handshake datagrams (random, chosen by the client).
        hs_cid: u64,
        hs: Box<ClientHandshake>,
        /// The datagram to repeat until the next step: Hello, then HelloFinish.
        repeat: Vec<u8>,
        /// Noise message 1 (to rebuild the Hello with a Retry token).
        msg1: Vec<u8>,
        phase: Phase,
        /// A Version Negotiation that excludes our version, noted while an authentic reply
        /// was still possible: it is unauthenticated (anyone can send one), so it only
        /// explains the connect timeout if no HelloReply arrives before it.
        version_negotiation: Option<String>,
    },
    Connected(Box<Connected>),
    Closed,
}

struct Connected {
    cid: u64,
    protection: Protection,
    host_key: PublicKey,
    params: SessionParams,
    last_recv_us: Micros,
    last_send_us: Micros,
    assembler: Assembler,
    requester: KeyframeRequester,
    next_ping_us: Micros,
    pings_in_burst: u32,
    next_feedback_us: Micros,
    /// RFC 3550 interarrival jitter over frames, microseconds.
    jitter_us: f64,
    last_arrival: Option<(Micros, Micros)>,
    /// Retransmission: ShardNacks (SliceNacks) sent per frame and slice (count, last time),
    /// bounded.
    nacks: std::collections::BTreeMap<(u32, u8), (u8, Micros)>,
    /// When a NACKed frame is due for its retry or its abandonment.
    next_nack_us: Option<Micros>,
}

/// The client's protocol state machine.
pub struct ClientSession {
    cfg: ClientConfig,
    /// The host said it reads the same monotonic clock as this client.
    shared_clock: bool,
    /// The encoder the host said makes the stream (beside its Accept).
    host_encoder: Option<wire::HostEncoder>,
    state: State,
    next_pn: u64,
    window: PacketWindow,
    clock: ClockEstimator,
    input: ReliableSender,
    state_tx: StateSender,
    /// Host → client state.
    state_rx: StateReceiver,
    /// The last frames whose pose arrived (the second copy of each is dropped).
    poses_seen: VecDeque<u32>,
    /// Reused for opening protected datagrams (no per-packet allocation).
    scratch: Vec<u8>,
    hs_pn: u64,
    next_ping_id: u32,
    pending: Vec<ControlFrame>,
    /// PathChallenges to answer: (path, token).
    path_responses: Vec<(u8, u64)>,
    /// The path of the datagram being handled.
    rx_path: u8,
    transmits: VecDeque<(Route, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    stats: ClientStats,
    decode_us: u32,
    /// The newest latency report not yet sent (goes out beside the next Feedback).
    latency: Option<crate::wire::LatencyReport>,
    /// The assembler's and requester's counters when the session left the Connected state.
    final_counters: Option<(AssemblerStats, u64)>,
    /// The last role the host told (role, flags, version).
    role: Option<(ClientRole, u8, u16)>,
    /// The host's key as its handshake reply proved it (kept after a refusal, so that a
    /// client waiting for approval can say which host it waits for).
    seen_host_key: Option<PublicKey>,
}

/// ShardNacks per frame before it is given up.
const MAX_NACKS_PER_FRAME: u8 = 2;

/// Pings sent at short intervals right after connecting, to get a clock estimate quickly.
const PING_BURST: u32 = 8;
const PING_BURST_INTERVAL_US: Micros = 20_000;

impl ClientSession {
    /// Starts connecting: the first Hello is ready in [`poll_transmit`](Self::poll_transmit).
    pub fn new(cfg: ClientConfig, now: Micros) -> Self {
        let mut seed = cfg.entropy;
        for (b, s) in seed.iter_mut().zip(cfg.nonce.to_le_bytes()) {
            *b ^= s;
        }
        let mut rng = SessionRng::from_seed(seed);
        let state = match Self::start_handshake(&cfg, &mut rng, now) {
            Ok(s) => s,
            Err(_) => State::Closed,
        };
        let failed = matches!(state, State::Closed);
        let mut s = Self::with_state(cfg, state);
        if failed {
            s.events.push_back(ClientEvent::Rejected {
                reason: RejectReason::Other,
                message: "could not start the handshake (bad PIN or key?)".into(),
            });
        }
        s.handle_timeout(now);
        s
    }

    fn with_state(cfg: ClientConfig, state: State) -> Self {
        ClientSession {
            shared_clock: false,
            host_encoder: None,
            clock: ClockEstimator::new(32, cfg.rtt_alpha),
            state_tx: StateSender::new(StateConfig {
                alpha: cfg.rtt_alpha,
                beta: cfg.rto_beta,
                min_rto_us: cfg.min_rto_us.min(2_000),
                initial_rto_us: 100_000,
                keepalive_us: cfg.keepalive_us,
                budget_bytes_per_s: cfg.state_budget_bytes_per_s,
                ..StateConfig::default()
            }),
            state_rx: StateReceiver::new(),
            poses_seen: VecDeque::new(),
            seen_host_key: None,
            cfg,
            state,
            scratch: Vec::with_capacity(2048),
            hs_pn: 0,
            next_pn: 0,
            window: PacketWindow::new(),
            input: ReliableSender::new(),
            next_ping_id: 0,
            pending: Vec::new(),
            path_responses: Vec::new(),
            rx_path: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: ClientStats::default(),
            decode_us: 0,
            latency: None,
            final_counters: None,
            role: None,
        }
    }

    fn start_handshake(
        cfg: &ClientConfig,
        rng: &mut SessionRng,
        now: Micros,
    ) -> Result<State, crate::handshake::HandshakeError> {
        let (hs, msg1) = ClientHandshake::start(
            &cfg.identity,
            cfg.pin.as_deref(),
            cfg.suites,
            cfg.suite_preference,
            rng,
        )?;
        let mut hs_cid = rng.next_u64();
        while hs_cid == 0 {
            hs_cid = rng.next_u64();
        }
        let mut repeat = Vec::with_capacity(wire::HELLO_MIN_LEN);
        Hello {
            mode: hs.mode() as u8,
            token: &[],
            noise: &msg1,
        }
        .encode(&Header::new(PacketType::Hello, hs_cid, 0), &mut repeat);
        Ok(State::Connecting {
            msg1,
            started_us: now,
            next_hello_us: now,
            hs_cid,
            hs: Box::new(hs),
            repeat,
            phase: Phase::AwaitReply,
            version_negotiation: None,
        })
    }

    /// Fuzzing only: a session already connected with the given secrets (no handshake).
    #[cfg(fuzzing)]
    #[allow(clippy::too_many_arguments)]
    pub fn fuzz_connected(
        cfg: ClientConfig,
        now: Micros,
        connection_id: u64,
        suite: Suite,
        send: [u8; 32],
        recv: [u8; 32],
        key_update_log2: u8,
        video_auth_only: bool,
        params: SessionParams,
    ) -> Self {
        let mut s = Self::with_state(cfg, State::Closed);
        let p = Protection::new(suite, send, recv, key_update_log2, video_auth_only);
        s.install(now, connection_id, p, [0; 32], params);
        s
    }

    /// The host's key as its handshake reply proved it, also after the session ended (a
    /// refusal after message 3 names the host whose key this is).
    pub fn seen_host_key(&self) -> Option<PublicKey> {
        self.seen_host_key
    }

    /// The host's authenticated key, once the handshake got that far.
    pub fn host_key(&self) -> Option<PublicKey> {
        match &self.state {
            State::Connected(c) => Some(c.host_key),
            State::Connecting {
                phase: Phase::AwaitAccept { host_key, .. },
                ..
            } => Some(*host_key),
            _ => None,
        }
    }

    /// This client's public key.
    pub fn public_key(&self) -> PublicKey {
        self.cfg.identity.public
    }

    /// The AEAD suite of the session.
    pub fn suite(&self) -> Option<Suite> {
        match &self.state {
            State::Connected(c) => Some(c.protection.sealer.suite()),
            _ => None,
        }
    }

    /// The role the host gave this client (None: not told, a host serving one client).
    pub fn role(&self) -> Option<ClientRole> {
        self.role.map(|(r, _, _)| r)
    }

    pub fn is_connected(&self) -> bool {
        matches!(self.state, State::Connected(_))
    }

    /// Queues a control frame as it is, sent with the next datagram once connected. For peers
    /// that misbehave on purpose (the NACK-flood bench, tests of the host's budgets): a client
    /// that follows the protocol never needs it.
    pub fn queue_control(&mut self, frame: ControlFrame) {
        if self.is_connected() && self.pending.len() < 1024 {
            self.pending.push(frame);
        }
    }

    /// When the last authenticated datagram arrived (None before the session is connected).
    pub fn last_authentic_us(&self) -> Option<Micros> {
        match &self.state {
            State::Connected(c) => Some(c.last_recv_us),
            _ => None,
        }
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    pub fn params(&self) -> Option<SessionParams> {
        match &self.state {
            State::Connected(c) => Some(c.params),
            _ => None,
        }
    }

    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats;
        s.packets_lost = self.window.lost();
        s.inputs_retransmitted = self.input.retransmissions;
        s.inputs_refused = self.input.refused;
        s.state = self.state_tx.stats();
        if let State::Connected(c) = &self.state {
            s.key_updates = c.protection.sealer.key_updates + c.protection.opener.key_updates;
        }
        let counters = match &self.state {
            State::Connected(c) => Some((c.assembler.stats(), c.requester.requests_sent)),
            _ => self.final_counters,
        };
        if let Some((a, requests)) = counters {
            s.assembler = a;
            s.frames_complete = a.frames_complete;
            s.frames_lost = a.frames_lost;
            s.frames_skipped = a.frames_skipped;
            s.frames_late = a.frames_late;
            s.keyframe_requests_sent = requests;
        }
        s
    }

    /// Leaves the Connected state (keeping its counters for [`stats`](Self::stats)).
    fn close_state(&mut self) {
        if let State::Connected(c) = &self.state {
            self.final_counters = Some((c.assembler.stats(), c.requester.requests_sent));
        }
        self.state = State::Closed;
    }

    /// The clock-offset estimate (host − client), once a ping has been answered.
    /// The host's clock relative to this one: exactly 0 when the host said it reads the same
    /// monotonic clock (same machine; `ControlFrame::ClockId`), else estimated from ping/pong
    /// (which assumes symmetric paths: half of any asymmetry ends up in the offset, within
    /// the uncertainty it reports).
    pub fn clock(&self) -> Option<ClockEstimate> {
        if self.shared_clock {
            return Some(ClockEstimate {
                offset_us: 0,
                rtt_us: self.clock.srtt_us().unwrap_or(0),
                uncertainty_us: 0,
                samples: 0,
            });
        }
        self.clock.estimate()
    }

    /// Whether host and client read the same monotonic clock (told by the host).
    pub fn shares_clock(&self) -> bool {
        self.shared_clock
    }

    /// The encoder, preset and conversion the host said make the stream (None: a host that
    /// does not say).
    pub fn host_encoder(&self) -> Option<&wire::HostEncoder> {
        self.host_encoder.as_ref()
    }

    /// Smoothed RTT, microseconds.
    pub fn srtt_us(&self) -> Option<u64> {
        self.clock.srtt_us()
    }

    fn rto_us(&self) -> Micros {
        match self.clock.srtt_us() {
            Some(srtt) => ((srtt as f64 * self.cfg.rto_beta) as Micros).max(self.cfg.min_rto_us),
            None => 100_000,
        }
    }

    /// The decoder's latest decode time, reported to the host in feedback.
    pub fn note_decode_time(&mut self, us: u64) {
        self.decode_us = us.min(u32::MAX as u64) as u32;
    }

    /// The shown frames' latency over the last interval, sent to the host beside the next
    /// Feedback (a newer report replaces one not yet sent).
    pub fn note_latency(&mut self, report: crate::wire::LatencyReport) {
        self.latency = Some(report);
    }

    /// Queues an input event for reliable, ordered delivery; returns its sequence number, or
    /// None when too many events are unacknowledged (the host is unreachable).
    pub fn send_input(&mut self, now: Micros, event: InputEvent) -> Option<u32> {
        let seq = self.input.push(event)?;
        self.stats.inputs_sent += 1;
        self.flush_input(now);
        Some(seq)
    }

    /// Queues text (an input method's commit) on the reliable channel, split into events of at
    /// most 32 bytes; returns the last event's sequence number (None if refused or empty).
    pub fn send_text(&mut self, now: Micros, text: &str) -> Option<u32> {
        let mut last = None;
        for chunk in TextChunk::split(text) {
            last = Some(self.send_input(now, InputEvent::Text(chunk))?);
        }
        last
    }

    /// Sets a key of continuous state (pointer, head pose, IMU, axes) on the latest-wins
    /// channel; it goes out with the next datagram. False when the key table is full.
    pub fn send_state(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        let ok = self.state_tx.set(now, key, value);
        self.flush_state(now);
        ok
    }

    /// The latest-wins sender (values, delivery, statistics).
    pub fn state_sender(&self) -> &StateSender {
        &self.state_tx
    }

    /// Staleness of the client → host state (see [`crate::state`]).
    pub fn state_staleness(&self, now: Micros) -> Staleness {
        self.state_tx.staleness(now)
    }

    /// The newest value of a key the host published (haptics, other players, …).
    pub fn state_value(&self, key: StateKey) -> Option<StateEntry> {
        self.state_rx.get(key).copied()
    }

    /// Everything the host published (changes: [`StateReceiver::changes`]).
    pub fn state_received(&self) -> &StateReceiver {
        &self.state_rx
    }

    fn flush_state(&mut self, now: Micros) {
        if !self.is_connected() || !self.state_tx.wants_to_send(now) {
            return;
        }
        let max = self.params().map_or(1200, |p| p.max_datagram as usize);
        if let Some(p) = self
            .state_tx
            .poll_packet(now, max - HEADER_LEN - TAG_LEN - 3)
        {
            self.pending.push(ControlFrame::State(p));
        }
    }

    fn flush_input(&mut self, now: Micros) {
        if !self.is_connected() {
            return;
        }
        let rto = self.rto_us();
        for (first_seq, events) in self.input.due(now, rto, 512) {
            self.pending.push(ControlFrame::Input { first_seq, events });
        }
    }

    /// The decoder rejected a delivered frame: ask for a keyframe and deliver nothing else
    /// until one arrives.
    pub fn decode_failed(&mut self, now: Micros, frame_number: u32) {
        self.stats.decode_failures += 1;
        if let State::Connected(c) = &mut self.state {
            c.assembler.require_keyframe();
            c.requester.on_loss(now, frame_number);
        }
        self.run_requester(now);
    }

    /// Offers the host the raw layer-2 transport: "send me frames of `ethertype` at `mac`"
    /// (a LinkAddress control frame, sealed like every other; it goes out with the next
    /// datagram). The host answers with its own LinkAddress ([`ClientEvent::LinkAddress`]) or a
    /// LinkDeclined ([`ClientEvent::LinkDeclined`]). Ignored until connected.
    pub fn send_link_address(&mut self, now: Micros, ethertype: u16, mac: [u8; 6]) {
        if self.is_connected() {
            self.pending
                .retain(|f| !matches!(f, ControlFrame::LinkAddress { .. }));
            self.pending
                .push(ControlFrame::LinkAddress { ethertype, mac });
            self.build_control(now);
        }
    }

    /// Ends the session politely.
    pub fn close(&mut self, now: Micros) {
        if self.is_connected() {
            self.pending.push(ControlFrame::Bye {
                reason: ByeReason::Closed,
            });
            self.build_control(now);
        }
        self.close_state();
    }

    fn build_control(&mut self, now: Micros) {
        let max = self.params().map_or(1200, |p| p.max_datagram as usize);
        let State::Connected(c) = &mut self.state else {
            self.pending.clear();
            return;
        };
        c.last_send_us = now;
        while !self.pending.is_empty() {
            let mut len = HEADER_LEN + TAG_LEN;
            let mut n = 0;
            for f in &self.pending {
                let l = f.encoded_len();
                if n > 0 && len + l > max {
                    break;
                }
                len += l;
                n += 1;
            }
            let frames: Vec<ControlFrame> = self.pending.drain(..n).collect();
            let mut out = Vec::with_capacity(len);
            let pn = self.next_pn;
            encode_control(
                &Header::new(PacketType::Control, c.cid, pn),
                &frames,
                &mut out,
            );
            self.next_pn += 1;
            if c.protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_err()
            {
                self.pending.clear();
                return;
            }
            self.stats.bytes_sent += out.len() as u64;
            self.stats.datagrams_sent += 1;
            self.transmits.push_back((Route::All, out));
        }
    }

    /// Answers PathChallenges, each on its own path.
    fn build_path_responses(&mut self) {
        let State::Connected(c) = &mut self.state else {
            self.path_responses.clear();
            return;
        };
        for (path, token) in self.path_responses.drain(..) {
            let mut out = Vec::with_capacity(HEADER_LEN + 11 + TAG_LEN);
            let pn = self.next_pn;
            encode_control(
                &Header::new(PacketType::Control, c.cid, pn),
                &[ControlFrame::PathResponse { token }],
                &mut out,
            );
            self.next_pn += 1;
            if c.protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_ok()
            {
                self.stats.bytes_sent += out.len() as u64;
                self.stats.datagrams_sent += 1;
                self.stats.path_responses_sent += 1;
                self.transmits.push_back((Route::Path(path), out));
            }
        }
    }

    fn push_transmit(&mut self, out: Vec<u8>) {
        self.stats.bytes_sent += out.len() as u64;
        self.stats.datagrams_sent += 1;
        self.transmits.push_back((Route::Primary, out));
    }

    /// The next datagram to send to the host (single path: whatever its route).
    pub fn poll_transmit(&mut self, now: Micros) -> Option<Vec<u8>> {
        self.poll_transmit_routed(now).map(|(_, d)| d)
    }

    /// The next datagram to send and which path(s) it goes on (multipath).
    pub fn poll_transmit_routed(&mut self, now: Micros) -> Option<(Route, Vec<u8>)> {
        self.flush_state(now);
        if !self.path_responses.is_empty() {
            self.build_path_responses();
        }
        if !self.pending.is_empty() {
            self.build_control(now);
        }
        self.transmits.pop_front()
    }

    /// Tests only: queues any control frame (a misbehaving client's) for the next control
    /// datagram.
    #[cfg(test)]
    pub(crate) fn queue_control_for_test(&mut self, f: ControlFrame) {
        self.pending.push(f);
    }

    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn fail(&mut self, reason: RejectReason, message: String) {
        self.close_state();
        self.pending.clear();
        self.events
            .push_back(ClientEvent::Rejected { reason, message });
    }

    /// Takes one datagram from the host.
    pub fn handle_datagram(&mut self, now: Micros, data: &[u8]) {
        self.handle_datagram_on(now, 0, data)
    }

    /// Takes one datagram from the host that arrived on path `path` (0..[`MAX_PATHS`]; the
    /// runtime numbers its host addresses or sockets).
    pub fn handle_datagram_on(&mut self, now: Micros, path: usize, data: &[u8]) {
        let path = path.min(MAX_PATHS - 1);
        self.rx_path = path as u8;
        self.stats.bytes_received += data.len() as u64;
        self.stats.datagrams_received += 1;
        self.stats.paths[path].datagrams_received += 1;
        self.stats.paths[path].bytes_received += data.len() as u64;
        let (header, datagram) = match wire::parse(data) {
            Ok(x) => x,
            Err(wire::WireError::VersionNegotiation(versions, message)) => {
                // Unauthenticated (it carries not even our handshake id), so it never ends an
                // attempt that may still get an authentic answer: while we wait for the
                // HelloReply it is noted, and reported only if the connect timeout comes
                // first. Ignored once the host answered (it speaks our version), and when it
                // lists our version (forged or stale). The message is already escaped.
                match &mut self.state {
                    State::Connecting {
                        phase: Phase::AwaitReply,
                        version_negotiation,
                        ..
                    } if !versions.contains(&wire::VERSION) => {
                        version_negotiation.get_or_insert_with(|| {
                            format!(
                                "the host speaks protocol version(s) {versions:?}, this client \
                                 version {}: {message}",
                                wire::VERSION
                            )
                        });
                        self.stats.version_negotiations_received += 1;
                    }
                    _ => self.stats.malformed_datagrams += 1,
                }
                return;
            }
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match (&mut self.state, datagram) {
            (
                State::Connecting {
                    hs_cid,
                    phase: Phase::AwaitReply,
                    ..
                },
                Datagram::Reject(r),
            ) if header.connection_id == *hs_cid => self.fail(r.reason, r.message),
            // The host is under a flood of handshakes: repeat the Hello with its token.
            (
                State::Connecting {
                    hs_cid,
                    hs,
                    repeat,
                    msg1,
                    phase: Phase::AwaitReply,
                    ..
                },
                Datagram::Retry(token),
            ) if header.connection_id == *hs_cid => {
                let mut out = Vec::with_capacity(wire::HELLO_MIN_LEN);
                Hello {
                    mode: hs.mode() as u8,
                    token,
                    noise: msg1,
                }
                .encode(
                    &Header::new(PacketType::Hello, *hs_cid, self.hs_pn),
                    &mut out,
                );
                self.hs_pn += 1;
                *repeat = out.clone();
                self.stats.retries_received += 1;
                self.push_transmit(out);
            }
            // A wrong PIN shows only when the host reads message 3: it answers in cleartext
            // (it has no keys with this client). Honoured for that reason only.
            (
                State::Connecting {
                    hs_cid,
                    phase: Phase::AwaitAccept { .. },
                    ..
                },
                Datagram::Reject(r),
            ) if header.connection_id == *hs_cid && r.reason == RejectReason::Pin => {
                self.fail(r.reason, r.message)
            }
            (
                State::Connecting {
                    hs_cid,
                    hs,
                    repeat,
                    phase: phase @ Phase::AwaitReply,
                    next_hello_us,
                    ..
                },
                Datagram::HelloReply(msg2),
            ) if header.connection_id == *hs_cid => {
                let (host_key, setup) = match hs.read_reply(msg2) {
                    Ok(x) => x,
                    Err(crate::handshake::HandshakeError::Pin) => {
                        return self.fail(RejectReason::Pin, "PIN pairing failed".into())
                    }
                    Err(_) => {
                        // Forged or corrupted: keep waiting for the real reply.
                        self.stats.auth_failures += 1;
                        return;
                    }
                };
                self.seen_host_key = Some(host_key);
                if let Some(pinned) = self.cfg.host_key {
                    if pinned != host_key {
                        return self.fail(
                            RejectReason::UntrustedHost,
                            format!(
                                "the host's key ({}) is not the one this client trusts ({}): \
                                 another machine is answering, or the host's identity was reset",
                                fingerprint(&host_key),
                                fingerprint(&pinned)
                            ),
                        );
                    }
                }
                let info = ClientInfoPayload {
                    max_datagram: self.cfg.max_datagram,
                    capabilities: self.cfg.codecs.iter().fold(0, |m, c| m | c.cap()),
                    name: self.cfg.name.clone(),
                    codecs: self.cfg.codecs.clone(),
                    wants: self.cfg.wants,
                    view: self.cfg.view,
                };
                let (msg3, keys) = match hs.finish(&info) {
                    Ok(x) => x,
                    Err(_) => {
                        return self.fail(RejectReason::Other, "handshake failed".into());
                    }
                };
                let mut out = Vec::with_capacity(HEADER_LEN + msg3.len());
                encode_handshake(
                    &Header::new(PacketType::HelloFinish, *hs_cid, self.hs_pn),
                    &msg3,
                    &mut out,
                );
                self.hs_pn += 1;
                *repeat = out.clone();
                *next_hello_us = now + self.cfg.hello_interval_us;
                *phase = Phase::AwaitAccept {
                    cid: setup.connection_id,
                    protection: Box::new(Protection::new(
                        setup.suite,
                        keys.send,
                        keys.recv,
                        setup.key_update_log2,
                        setup.video_auth_only,
                    )),
                    host_key,
                };
                self.push_transmit(out);
            }
            (
                State::Connecting {
                    phase:
                        Phase::AwaitAccept {
                            cid, protection, ..
                        },
                    ..
                },
                Datagram::Control(_),
            ) if header.connection_id == *cid => {
                let Some(len) = open_into(
                    &mut self.scratch,
                    &mut protection.opener,
                    data,
                    header.packet_number,
                    true,
                ) else {
                    self.stats.auth_failures += 1;
                    return;
                };
                self.window.record(header.packet_number);
                let frames = match wire::parse_control(&self.scratch[HEADER_LEN..HEADER_LEN + len])
                {
                    Ok(f) => f,
                    Err(_) => {
                        self.stats.malformed_datagrams += 1;
                        return;
                    }
                };
                // The clock identity and the encoder travel beside the Accept (either order).
                for f in &frames {
                    match f {
                        ControlFrame::ClockId { id } => {
                            self.shared_clock = self.cfg.clock_id.is_some_and(|own| own == *id);
                        }
                        ControlFrame::HostEncoder(e) => self.host_encoder = Some(e.clone()),
                        _ => {}
                    }
                }
                let mut frames = frames.into_iter();
                while let Some(f) = frames.next() {
                    match f {
                        ControlFrame::Accept(params) => {
                            self.on_accept(now, params);
                            // What rides beside the Accept (the client's role, the host's
                            // state) is for the session just opened.
                            for f in frames {
                                if matches!(f, ControlFrame::Role { .. } | ControlFrame::State(_)) {
                                    self.on_control(now, f);
                                }
                            }
                            return;
                        }
                        ControlFrame::Reject(r) => return self.fail(r.reason, r.message),
                        _ => {}
                    }
                }
            }
            (
                State::Connected(c),
                d @ (Datagram::Shard(_) | Datagram::Control(_) | Datagram::Audio(_)),
            ) => {
                if header.connection_id != c.cid {
                    self.stats.unknown_connection += 1;
                    return;
                }
                let pn = header.packet_number;
                if self.window.check(pn) != Seen::New {
                    self.stats.duplicate_datagrams += 1;
                    self.stats.paths[path].duplicates += 1;
                    return;
                }
                let is_shard = matches!(d, Datagram::Shard(_));
                let is_audio = matches!(d, Datagram::Audio(_));
                let encrypted = !(is_shard && c.protection.video_auth_only);
                let Some(len) = open_into(
                    &mut self.scratch,
                    &mut c.protection.opener,
                    data,
                    pn,
                    encrypted,
                ) else {
                    self.stats.auth_failures += 1;
                    return;
                };
                // Record only now that the datagram is authentic.
                self.window.record(pn);
                self.stats.paths[path].first_copies += 1;
                c.last_recv_us = now;
                let body = &self.scratch[HEADER_LEN..HEADER_LEN + len];
                if is_audio {
                    match crate::audio::AudioPacket::parse(body) {
                        Ok(p) => self.events.push_back(ClientEvent::Audio(p)),
                        Err(_) => self.stats.malformed_datagrams += 1,
                    }
                } else if is_shard {
                    match wire::ShardHeader::parse(body) {
                        Ok((sh, payload)) => {
                            c.assembler.insert(now, &sh, payload);
                            self.nack_lost_shards(now);
                            self.drain_assembler(now);
                        }
                        Err(_) => self.stats.malformed_datagrams += 1,
                    }
                } else {
                    match wire::parse_control(body) {
                        Ok(frames) => {
                            for f in frames {
                                self.on_control(now, f);
                            }
                        }
                        Err(_) => self.stats.malformed_datagrams += 1,
                    }
                }
            }
            // A repeated HelloReply, a late Reject, shards before the Accept, anything while
            // closed.
            _ => self.stats.unknown_connection += 1,
        }
    }

    fn on_accept(&mut self, now: Micros, params: SessionParams) {
        let old = std::mem::replace(&mut self.state, State::Closed);
        let State::Connecting {
            phase:
                Phase::AwaitAccept {
                    cid,
                    protection,
                    host_key,
                },
            ..
        } = old
        else {
            self.state = old;
            return;
        };
        self.install(now, cid, *protection, host_key, params);
    }

    fn install(
        &mut self,
        now: Micros,
        cid: u64,
        protection: Protection,
        host_key: PublicKey,
        params: SessionParams,
    ) {
        let interval = params.frame_interval_us();
        let mut acfg = AssemblerConfig {
            deadline_us: self.cfg.reassembly_deadline_us,
            ..Default::default()
        };
        acfg.max_frames_in_flight = acfg.max_frames_in_flight.max(4);
        // With retransmission a frame missing shards waits for them (its NACKs decide when
        // to give up), instead of being lost as soon as a newer frame completes.
        acfg.lost_when_overtaken = !self.cfg.retransmit;
        // A stream that refreshes itself: a sweep start ends the wait for a keyframe.
        acfg.refresh_period = params.refresh_period as u32;
        // The host's datagrams must fit what we said we can receive; shards are bounded by
        // its max_datagram (validated by the Accept's parser).
        let _ = SHARD_HEADER_LEN;
        self.state = State::Connected(Box::new(Connected {
            cid,
            protection,
            host_key,
            params,
            last_recv_us: now,
            last_send_us: now,
            assembler: Assembler::new(acfg),
            requester: {
                let mut r = KeyframeRequester::new(interval);
                r.set_refresh_period(params.refresh_period as u32);
                r
            },
            next_ping_us: now,
            pings_in_burst: 0,
            next_feedback_us: now + self.cfg.feedback_interval_us,
            jitter_us: 0.0,
            last_arrival: None,
            nacks: std::collections::BTreeMap::new(),
            next_nack_us: None,
        }));
        self.events.push_back(ClientEvent::Connected(params));
        self.flush_input(now);
        self.handle_timeout(now);
    }

    fn on_control(&mut self, now: Micros, f: ControlFrame) {
        match f {
            ControlFrame::ClockId { id } => {
                self.shared_clock = self.cfg.clock_id.is_some_and(|own| own == id);
            }
            ControlFrame::HostEncoder(e) => self.host_encoder = Some(e),
            ControlFrame::Pong {
                ping_sent_us,
                received_us,
                sent_us,
                ..
            } => {
                if let Some(s) = ClockSample::from_times(ping_sent_us, received_us, sent_us, now) {
                    // A pong must answer one of our pings: its echo cannot be in the future.
                    if ping_sent_us <= now {
                        self.clock.add(s);
                        self.events.push_back(ClientEvent::Rtt(s.rtt_us));
                    }
                }
            }
            ControlFrame::Ping { id, sent_us } => self.pending.push(ControlFrame::Pong {
                id,
                ping_sent_us: sent_us,
                received_us: now,
                sent_us: now,
            }),
            ControlFrame::InputAck { next_expected } => {
                self.input.on_ack(next_expected);
                self.events
                    .push_back(ClientEvent::InputAcked { next_expected });
            }
            ControlFrame::FrameTiming(t) => {
                // It leaves the host after the frame's last datagram: the frame-end signal.
                if let State::Connected(c) = &mut self.state {
                    c.assembler.frame_sent(now, t.frame_number);
                }
                self.events.push_back(ClientEvent::FrameTiming(t))
            }
            ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            } => self.events.push_back(ClientEvent::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            }),
            ControlFrame::LinkAddress { ethertype, mac } => self
                .events
                .push_back(ClientEvent::LinkAddress { ethertype, mac }),
            ControlFrame::LinkDeclined { reason } => {
                self.events.push_back(ClientEvent::LinkDeclined(reason))
            }
            ControlFrame::ShardNack { .. } | ControlFrame::SliceNack { .. } => {}
            ControlFrame::PathChallenge { token } => {
                // Bounded: at most one per path per probe interval is expected.
                if self.path_responses.len() < 4 * MAX_PATHS {
                    self.path_responses.push((self.rx_path, token));
                }
            }
            ControlFrame::StateAck(a) => self.state_tx.on_ack(now, &a),
            ControlFrame::Role {
                role,
                flags,
                version,
            } => {
                // Acknowledged every time (the host repeats it until it hears this); acted on
                // when newer than the last one seen (a late copy of an older one is not).
                self.pending
                    .retain(|f| !matches!(f, ControlFrame::RoleAck { .. }));
                self.pending.push(ControlFrame::RoleAck { version });
                let newer = self
                    .role
                    .is_none_or(|(_, _, v)| (version.wrapping_sub(v) as i16) > 0);
                if newer {
                    self.role = Some((role, flags, version));
                    self.events.push_back(ClientEvent::Role {
                        role,
                        input_granted: flags & role_flags::INPUT_GRANTED != 0,
                        paused: flags & role_flags::PAUSED != 0,
                    });
                }
            }
            ControlFrame::State(p) => {
                self.stats.state_packets_received += 1;
                self.state_rx.on_packet(now, &p);
                if let Some(ack) = self.state_rx.poll_ack() {
                    self.pending
                        .retain(|f| !matches!(f, ControlFrame::StateAck(_)));
                    self.pending.push(ControlFrame::StateAck(ack));
                }
            }
            ControlFrame::FramePose {
                frame_number,
                sample,
            } => {
                if !self.poses_seen.contains(&frame_number) {
                    if self.poses_seen.len() >= 16 {
                        self.poses_seen.pop_front();
                    }
                    self.poses_seen.push_back(frame_number);
                    self.events.push_back(ClientEvent::FramePose {
                        frame_number,
                        sample,
                    });
                }
            }
            ControlFrame::Bye { reason } => {
                self.close_state();
                self.pending.clear();
                let gone = match reason {
                    ByeReason::ShuttingDown => GoneReason::ShuttingDown,
                    ByeReason::Replaced => GoneReason::Replaced,
                    ByeReason::Failed => GoneReason::Failed,
                    ByeReason::TooSlow => GoneReason::TooSlow,
                    ByeReason::Closed | ByeReason::Other => GoneReason::Bye,
                };
                self.events.push_back(ClientEvent::HostGone(gone));
            }
            // Only the client sends these.
            ControlFrame::KeyframeRequest { .. }
            | ControlFrame::Feedback(_)
            | ControlFrame::Latency(_)
            | ControlFrame::Input { .. }
            | ControlFrame::RoleAck { .. }
            | ControlFrame::PathResponse { .. } => {}
            // Only meaningful while connecting (a repeated Accept after a lost one is ignored).
            ControlFrame::Accept(_) | ControlFrame::Reject(_) => {}
        }
    }

    /// Retransmission: a ShardNack for each frame that cannot complete, while its deadline
    /// leaves an RTT; at most 2 per frame, an RTT apart. A frame whose NACKs went unanswered
    /// (or that has no time left) is given up at once, so its keyframe request is not late.
    fn nack_lost_shards(&mut self, now: Micros) {
        if !self.cfg.retransmit {
            return;
        }
        let srtt = self.clock.srtt_us().unwrap_or(5_000).max(500);
        let State::Connected(c) = &mut self.state else {
            return;
        };
        let deadline = c.assembler.deadline();
        let gap = srtt * 3 / 2 + 1_000;
        c.next_nack_us = None;
        for u in c.assembler.unrecoverable() {
            let (f, slice) = (u.frame_number, u.slice);
            let key = (f, slice.index);
            let (count, last) = c.nacks.get(&key).copied().unwrap_or((0, 0));
            let time_left = now + srtt < u.first_us + deadline;
            let retry_due = count == 0 || now >= last + gap;
            if !retry_due {
                c.next_nack_us = Some(c.next_nack_us.map_or(last + gap, |t| t.min(last + gap)));
                continue;
            }
            if count >= MAX_NACKS_PER_FRAME || !time_left {
                if slice.count > 1 {
                    c.assembler.abandon_slice(f, slice);
                    self.stats.slices_abandoned += 1;
                } else {
                    c.assembler.abandon(f);
                    self.stats.frames_abandoned += 1;
                }
                continue;
            }
            c.nacks.insert(key, (count + 1, now));
            c.next_nack_us = Some(c.next_nack_us.map_or(now + gap, |t| t.min(now + gap)));
            while c.nacks.len() > 256 {
                c.nacks.pop_first();
            }
            self.stats.shard_nacks_sent += 1;
            let mut missing = u.missing;
            missing.truncate(crate::wire::MAX_NACK_SHARDS);
            self.pending.push(if slice.count > 1 {
                ControlFrame::SliceNack {
                    frame_number: f,
                    slice_index: slice.index,
                    missing,
                }
            } else {
                ControlFrame::ShardNack {
                    frame_number: f,
                    missing,
                }
            });
        }
    }

    fn drain_assembler(&mut self, now: Micros) {
        let State::Connected(c) = &mut self.state else {
            return;
        };
        let mut loss = false;
        for a in c.assembler.drain() {
            match a {
                Assembled::Frame(f) => {
                    if !f.hold {
                        // A picture that can be shown (a keyframe, a frame in an intact chain,
                        // the end of a recovery sweep): nothing to ask for. A held frame is a
                        // sweep under way: the request waits on (a sweep can fail too).
                        c.requester.on_keyframe();
                    }
                    // RFC 3550 jitter: variation of (arrival − capture) between frames.
                    let transit = (f.first_shard_us, f.capture_us);
                    if let Some((pa, pc)) = c.last_arrival {
                        let d = (f.first_shard_us as i64 - pa as i64)
                            - (f.capture_us as i64 - pc as i64);
                        c.jitter_us += (d.unsigned_abs() as f64 - c.jitter_us) / 16.0;
                    }
                    c.last_arrival = Some(transit);
                    self.events.push_back(ClientEvent::Frame(f));
                }
                Assembled::Slice(f) => {
                    // A keyframe's first slice ends the wait; a loss in it (reported after)
                    // asks again.
                    if f.keyframe && f.slice.index == 0 {
                        c.requester.on_keyframe();
                    }
                    if f.slice.index == 0 {
                        let transit = (f.first_shard_us, f.capture_us);
                        if let Some((pa, pc)) = c.last_arrival {
                            let d = (f.first_shard_us as i64 - pa as i64)
                                - (f.capture_us as i64 - pc as i64);
                            c.jitter_us += (d.unsigned_abs() as f64 - c.jitter_us) / 16.0;
                        }
                        c.last_arrival = Some(transit);
                    }
                    self.events.push_back(ClientEvent::Slice(f));
                }
                Assembled::SliceLost {
                    frame_number,
                    slice,
                    cause,
                } => {
                    // The region stays concealed until a keyframe repairs it.
                    c.requester.on_loss(now, frame_number);
                    loss = true;
                    self.events.push_back(ClientEvent::SliceLost {
                        frame_number,
                        slice,
                        cause,
                    });
                }
                Assembled::Lost {
                    frame_number,
                    cause,
                } => {
                    c.requester.on_loss(now, frame_number);
                    loss = true;
                    self.events.push_back(ClientEvent::FrameLost {
                        frame_number,
                        cause,
                    });
                }
                Assembled::Skipped { frame_number } => {
                    c.requester.on_loss(now, frame_number);
                    loss = true;
                    self.events
                        .push_back(ClientEvent::FrameSkipped { frame_number });
                }
            }
        }
        if loss {
            self.run_requester(now);
        }
    }

    fn run_requester(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            if let Some(lost_frame) = c.requester.poll(now) {
                self.pending
                    .push(ControlFrame::KeyframeRequest { lost_frame });
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next.
    pub fn poll_timeout(&self) -> Option<Micros> {
        match &self.state {
            State::Closed => None,
            State::Connecting {
                started_us,
                next_hello_us,
                ..
            } => Some((*next_hello_us).min(started_us + self.cfg.connect_timeout_us)),
            State::Connected(c) => {
                let keepalive = c.last_send_us + c.params.keepalive_ms as u64 * 1000;
                let idle = c.last_recv_us + c.params.idle_timeout_ms as u64 * 1000;
                [
                    Some(keepalive),
                    Some(idle),
                    Some(c.next_ping_us),
                    Some(c.next_feedback_us),
                    c.assembler.poll_timeout(),
                    c.next_nack_us,
                    c.requester.poll_timeout(),
                    self.input.poll_timeout(self.rto_us()),
                    self.state_tx.poll_timeout(),
                ]
                .into_iter()
                .flatten()
                .min()
            }
        }
    }

    fn build_keepalive(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            c.last_send_us = now;
            let mut out = Vec::with_capacity(HEADER_LEN + TAG_LEN);
            let pn = self.next_pn;
            encode_control(&Header::new(PacketType::Control, c.cid, pn), &[], &mut out);
            self.next_pn += 1;
            if c.protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_ok()
            {
                self.push_transmit(out);
            }
        }
    }

    /// Runs every timer that is due.
    pub fn handle_timeout(&mut self, now: Micros) {
        match &mut self.state {
            State::Closed => {}
            State::Connecting {
                started_us,
                next_hello_us,
                repeat,
                phase,
                version_negotiation,
                ..
            } => {
                if now >= *started_us + self.cfg.connect_timeout_us {
                    // No authentic answer came: a Version Negotiation seen meanwhile is the
                    // likely reason.
                    let vn = match phase {
                        Phase::AwaitReply => version_negotiation.take(),
                        Phase::AwaitAccept { .. } => None,
                    };
                    match vn {
                        Some(message) => self.fail(RejectReason::Version, message),
                        None => {
                            self.state = State::Closed;
                            self.events.push_back(ClientEvent::ConnectTimeout);
                        }
                    }
                    return;
                }
                if now >= *next_hello_us {
                    // Repeat the Hello (or the HelloFinish) until the host answers.
                    *next_hello_us = now + self.cfg.hello_interval_us;
                    let out = repeat.clone();
                    self.push_transmit(out);
                }
            }
            State::Connected(c) => {
                if now >= c.last_recv_us + c.params.idle_timeout_ms as u64 * 1000 {
                    self.close_state();
                    self.pending.clear();
                    self.events
                        .push_back(ClientEvent::HostGone(GoneReason::Timeout));
                    return;
                }
                c.assembler.handle_timeout(now);
                if now >= c.next_ping_us {
                    c.pings_in_burst += 1;
                    c.next_ping_us = now
                        + if c.pings_in_burst < PING_BURST {
                            PING_BURST_INTERVAL_US
                        } else {
                            self.cfg.ping_interval_us
                        };
                    self.pending.push(ControlFrame::Ping {
                        id: self.next_ping_id,
                        sent_us: now,
                    });
                    self.next_ping_id = self.next_ping_id.wrapping_add(1);
                }
                if now >= c.next_feedback_us {
                    c.next_feedback_us = now + self.cfg.feedback_interval_us;
                    let a = c.assembler.stats();
                    let sat = |v: u64| v.min(u32::MAX as u64) as u32;
                    self.pending.push(ControlFrame::Feedback(Feedback {
                        frames_complete: sat(a.frames_complete),
                        frames_lost: sat(a.frames_lost),
                        frames_late: sat(a.frames_late),
                        datagrams_received: sat(self.window.received()),
                        packets_lost: sat(self.window.lost()),
                        jitter_us: c.jitter_us as u32,
                        srtt_us: sat(self.clock.srtt_us().unwrap_or(0)),
                        decode_us: self.decode_us,
                    }));
                    if let Some(l) = self.latency.take() {
                        self.pending.push(ControlFrame::Latency(l));
                    }
                }
                let keepalive_due = now >= c.last_send_us + c.params.keepalive_ms as u64 * 1000;
                self.nack_lost_shards(now);
                self.drain_assembler(now);
                self.run_requester(now);
                self.flush_input(now);
                // The state channel's RTO and its 2 s empty packet (which also keeps the
                // session alive and the RTT fresh).
                self.state_tx.handle_timeout(now);
                self.flush_state(now);
                if keepalive_due && self.pending.is_empty() {
                    // An empty control datagram keeps the session alive.
                    self.build_keepalive(now);
                }
            }
        }
    }
}

/// Copies a protected datagram into the reusable buffer and opens it there; returns the
/// body's length (the plaintext is `buf[HEADER_LEN..HEADER_LEN + len]`).
fn open_into(
    buf: &mut Vec<u8>,
    opener: &mut crate::crypto::Opener,
    data: &[u8],
    pn: u64,
    encrypted: bool,
) -> Option<usize> {
    buf.clear();
    buf.extend_from_slice(data);
    opener.open(buf, HEADER_LEN, pn, encrypted).ok()
}
