//! The client's side of the protocol, sans-IO: asks for a session, reassembles frames, requests
//! keyframes after a loss, sends input reliably, estimates the clock offset, keeps the session
//! alive and notices when the host is gone.
//!
//! [`ClientSession`] drives owned parts, each with private state and its own tests:
//! [`admission`] (the handshake, until the Accept), [`connection`] (the connected session's keys,
//! packet numbers, pings, keep-alive and idle timeout), [`stream`] (shards → frames, keyframe
//! requests, NACKs, feedback) and [`channels`] (input, and the latest-wins state both ways);
//! [`control`] hands the host's control frames to them. Its settings are in [`config`], what
//! it reports in [`types`].

mod admission;
mod channels;
mod config;
mod connection;
mod control;
mod stream;
mod types;

use std::collections::VecDeque;

use crate::clock::{ClockEstimate, ClockEstimator};
use crate::crypto::{Protection, Suite};
use crate::handshake::{PublicKey, SessionRng};
use crate::paths::MAX_PATHS;
use crate::state::{Staleness, StateEntry, StateKey, StateReceiver, StateSender, StateValue};
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, ByeReason, ClientRole, ControlFrame, InputEvent, RejectReason, SessionParams, TextChunk,
    HEADER_LEN,
};
use crate::{GoneReason, Micros};

pub use config::ClientConfig;
pub use types::{ClientEvent, ClientPathStats, ClientStats, Route};

use admission::{Initiator, Step, Tick};
use channels::Channels;
use connection::Connection;
use stream::Stream;

enum State {
    /// The handshake, until the host's Accept.
    Connecting(Box<Initiator>),
    Connected(Box<Connected>),
    Closed,
}

/// The parts that live while the session is connected.
struct Connected {
    conn: Connection,
    stream: Stream,
}

/// The client's protocol state machine.
pub struct ClientSession {
    cfg: ClientConfig,
    /// The host said it reads the same monotonic clock as this client.
    shared_clock: bool,
    /// The encoder the host said makes the stream (beside its Accept).
    host_encoder: Option<wire::HostEncoder>,
    state: State,
    window: PacketWindow,
    clock: ClockEstimator,
    /// Input, and the state channels both ways.
    channels: Channels,
    /// The last frames whose pose arrived (the second copy of each is dropped).
    poses_seen: VecDeque<u32>,
    /// Reused for opening protected datagrams (no per-packet allocation).
    scratch: Vec<u8>,
    pending: Vec<ControlFrame>,
    /// The path of the datagram being handled.
    rx_path: u8,
    transmits: VecDeque<(Route, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    stats: ClientStats,
    decode_us: u32,
    /// The newest latency report not yet sent (goes out beside the next Feedback).
    latency: Option<crate::wire::LatencyReport>,
    /// The assembler's and requester's counters when the session left the Connected state.
    final_counters: Option<(crate::assembler::AssemblerStats, u64)>,
    /// The last role the host told (role, flags, version).
    role: Option<(ClientRole, u8, u16)>,
    /// The host's key as its handshake reply proved it (kept after a refusal, so that a
    /// client waiting for approval can say which host it waits for).
    seen_host_key: Option<PublicKey>,
}

impl ClientSession {
    /// Starts connecting: the first Hello is ready in [`poll_transmit`](Self::poll_transmit).
    pub fn new(cfg: ClientConfig, now: Micros) -> Self {
        let mut seed = cfg.entropy;
        for (b, s) in seed.iter_mut().zip(cfg.nonce.to_le_bytes()) {
            *b ^= s;
        }
        let mut rng = SessionRng::from_seed(seed);
        let state = match Initiator::start(&cfg, &mut rng, now) {
            Ok(a) => State::Connecting(Box::new(a)),
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
            channels: Channels::new(&cfg),
            poses_seen: VecDeque::new(),
            seen_host_key: None,
            cfg,
            state,
            scratch: Vec::with_capacity(2048),
            window: PacketWindow::new(),
            pending: Vec::new(),
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
            State::Connected(c) => Some(c.conn.host_key()),
            State::Connecting(a) => a.host_key(),
            State::Closed => None,
        }
    }

    /// This client's public key.
    pub fn public_key(&self) -> PublicKey {
        self.cfg.identity.public
    }

    /// The AEAD suite of the session.
    pub fn suite(&self) -> Option<Suite> {
        match &self.state {
            State::Connected(c) => Some(c.conn.suite()),
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
            State::Connected(c) => Some(c.conn.last_recv_us()),
            _ => None,
        }
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    pub fn params(&self) -> Option<SessionParams> {
        match &self.state {
            State::Connected(c) => Some(c.conn.params()),
            _ => None,
        }
    }

    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats;
        s.packets_lost = self.window.lost();
        self.channels.fill_stats(&mut s);
        if let State::Connected(c) = &self.state {
            s.key_updates = c.conn.key_updates();
        }
        let counters = match &self.state {
            State::Connected(c) => Some(c.stream.counters()),
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
            self.final_counters = Some(c.stream.counters());
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
        let seq = self.channels.push_input(event)?;
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
        let ok = self.channels.set_state(now, key, value);
        self.flush_state(now);
        ok
    }

    /// The latest-wins sender (values, delivery, statistics).
    pub fn state_sender(&self) -> &StateSender {
        self.channels.state_sender()
    }

    /// Staleness of the client → host state (see [`crate::state`]).
    pub fn state_staleness(&self, now: Micros) -> Staleness {
        self.channels.state_sender().staleness(now)
    }

    /// The newest value of a key the host published (haptics, other players, …).
    pub fn state_value(&self, key: StateKey) -> Option<StateEntry> {
        self.channels.state_received().get(key).copied()
    }

    /// Everything the host published (changes: [`StateReceiver::changes`]).
    pub fn state_received(&self) -> &StateReceiver {
        self.channels.state_received()
    }

    fn flush_state(&mut self, now: Micros) {
        if let State::Connected(c) = &self.state {
            let max = c.conn.params().max_datagram as usize;
            self.channels.flush_state(now, max, &mut self.pending);
        }
    }

    fn flush_input(&mut self, now: Micros) {
        if !self.is_connected() {
            return;
        }
        let rto = self.rto_us();
        self.channels.flush_input(now, rto, &mut self.pending);
    }

    /// The decoder rejected a delivered frame: ask for a keyframe and deliver nothing else
    /// until one arrives.
    pub fn decode_failed(&mut self, now: Micros, frame_number: u32) {
        self.stats.decode_failures += 1;
        if let State::Connected(c) = &mut self.state {
            c.stream.decode_failed(now, frame_number);
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
        match &mut self.state {
            State::Connected(c) => {
                c.conn
                    .seal_control(now, &mut self.pending, &mut self.transmits, &mut self.stats)
            }
            _ => self.pending.clear(),
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
        if let State::Connected(c) = &mut self.state {
            c.conn
                .seal_path_responses(&mut self.transmits, &mut self.stats);
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
                // lists our version (forged or stale).
                let noted = match &mut self.state {
                    State::Connecting(a) => a.on_version_negotiation(&versions, &message),
                    _ => false,
                };
                if noted {
                    self.stats.version_negotiations_received += 1;
                } else {
                    self.stats.malformed_datagrams += 1;
                }
                return;
            }
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match &mut self.state {
            State::Connecting(a) => {
                let step =
                    a.on_datagram(now, &self.cfg, &header, datagram, data, &mut self.scratch);
                if let Some(k) = a.seen_host_key() {
                    self.seen_host_key = Some(k);
                }
                match step {
                    Step::Unrelated => self.stats.unknown_connection += 1,
                    Step::AuthFailure => self.stats.auth_failures += 1,
                    Step::Send { datagram, retry } => {
                        if retry {
                            self.stats.retries_received += 1;
                        }
                        self.push_transmit(datagram);
                    }
                    Step::Refused { reason, message } => self.fail(reason, message),
                    Step::Opened { pn, frames } => {
                        self.window.record(pn);
                        match frames {
                            Some(frames) => self.on_answer(now, frames),
                            None => self.stats.malformed_datagrams += 1,
                        }
                    }
                }
            }
            State::Connected(c)
                if matches!(
                    datagram,
                    wire::Datagram::Shard(_)
                        | wire::Datagram::Control(_)
                        | wire::Datagram::Audio(_)
                ) =>
            {
                if header.connection_id != c.conn.cid() {
                    self.stats.unknown_connection += 1;
                    return;
                }
                let pn = header.packet_number;
                if self.window.check(pn) != Seen::New {
                    self.stats.duplicate_datagrams += 1;
                    self.stats.paths[path].duplicates += 1;
                    return;
                }
                let is_shard = matches!(datagram, wire::Datagram::Shard(_));
                let is_audio = matches!(datagram, wire::Datagram::Audio(_));
                let Some(len) = c.conn.open(now, &mut self.scratch, data, pn, is_shard) else {
                    self.stats.auth_failures += 1;
                    return;
                };
                // Record only now that the datagram is authentic.
                self.window.record(pn);
                self.stats.paths[path].first_copies += 1;
                let body = &self.scratch[HEADER_LEN..HEADER_LEN + len];
                if is_audio {
                    match crate::audio::AudioPacket::parse(body) {
                        Ok(p) => self.events.push_back(ClientEvent::Audio(p)),
                        Err(_) => self.stats.malformed_datagrams += 1,
                    }
                } else if is_shard {
                    match wire::ShardHeader::parse(body) {
                        Ok((sh, payload)) => {
                            c.stream.insert(now, &sh, payload);
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

    fn install(
        &mut self,
        now: Micros,
        cid: u64,
        protection: Protection,
        host_key: PublicKey,
        params: SessionParams,
    ) {
        let conn = Connection::new(
            now,
            cid,
            protection,
            host_key,
            params,
            self.cfg.ping_interval_us,
        );
        let stream = Stream::new(&self.cfg, &params, now);
        self.state = State::Connected(Box::new(Connected { conn, stream }));
        self.events.push_back(ClientEvent::Connected(params));
        self.flush_input(now);
        self.handle_timeout(now);
    }

    /// Retransmission: a ShardNack for each frame that cannot complete (see
    /// [`Stream::nack_lost_shards`]).
    fn nack_lost_shards(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            let srtt = self.clock.srtt_us();
            c.stream
                .nack_lost_shards(now, srtt, &mut self.pending, &mut self.stats);
        }
    }

    fn drain_assembler(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            c.stream.drain(now, &mut self.events, &mut self.pending);
        }
    }

    fn run_requester(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            c.stream.request_keyframe(now, &mut self.pending);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next.
    pub fn poll_timeout(&self) -> Option<Micros> {
        match &self.state {
            State::Closed => None,
            State::Connecting(a) => Some(a.poll_timeout()),
            State::Connected(c) => [
                Some(c.conn.poll_timeout()),
                c.stream.poll_timeout(),
                self.channels.poll_timeout(self.rto_us()),
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    fn build_keepalive(&mut self, now: Micros) {
        if let State::Connected(c) = &mut self.state {
            if let Some(out) = c.conn.keepalive(now) {
                self.push_transmit(out);
            }
        }
    }

    /// Runs every timer that is due.
    pub fn handle_timeout(&mut self, now: Micros) {
        match &mut self.state {
            State::Closed => {}
            State::Connecting(a) => match a.handle_timeout(now) {
                Tick::Wait => {}
                Tick::Repeat(out) => self.push_transmit(out),
                Tick::TimedOut {
                    version: Some(message),
                } => self.fail(RejectReason::Version, message),
                Tick::TimedOut { version: None } => {
                    self.state = State::Closed;
                    self.events.push_back(ClientEvent::ConnectTimeout);
                }
            },
            State::Connected(c) => {
                if c.conn.idle(now) {
                    self.close_state();
                    self.pending.clear();
                    self.events
                        .push_back(ClientEvent::HostGone(GoneReason::Timeout));
                    return;
                }
                c.stream.handle_timeout(now);
                if let Some(ping) = c.conn.poll_ping(now) {
                    self.pending.push(ping);
                }
                let srtt = self.clock.srtt_us();
                if let Some(f) = c
                    .stream
                    .poll_feedback(now, &self.window, srtt, self.decode_us)
                {
                    self.pending.push(ControlFrame::Feedback(f));
                    if let Some(l) = self.latency.take() {
                        self.pending.push(ControlFrame::Latency(l));
                    }
                }
                let keepalive_due = c.conn.keepalive_due(now);
                self.nack_lost_shards(now);
                self.drain_assembler(now);
                self.run_requester(now);
                self.flush_input(now);
                // The state channel's RTO and its 2 s empty packet (which also keeps the
                // session alive and the RTT fresh).
                self.channels.handle_timeout(now);
                self.flush_state(now);
                if keepalive_due && self.pending.is_empty() {
                    // An empty control datagram keeps the session alive.
                    self.build_keepalive(now);
                }
            }
        }
    }
}

/// The session parameters of the parts' unit tests.
#[cfg(test)]
fn test_params() -> SessionParams {
    SessionParams {
        width: 1280,
        height: 720,
        fps: 60,
        codec: wire::Codec::H264,
        bitrate_kbps: 10_000,
        max_datagram: 1200,
        keepalive_ms: 2000,
        idle_timeout_ms: 30_000,
        refresh_period: 0,
    }
}
