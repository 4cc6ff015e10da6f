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
//! computed once ([`stream`]), then sealed and queued per client (controller first); the last
//! frames' shards are kept once, in a shared ring, for every client's retransmissions. One
//! client is the **controller** (its input drives the application, its head pose is the
//! scene's, the adaptive bitrate follows its link); the others are **viewers** whose input is
//! dropped and counted unless granted ([`roles`]). A viewer that cannot keep up is paused to
//! keyframes, then dropped ([`health`]); it never holds the others back.
//!
//! `HostSession` composes owned sub-machines, each with private state and its own tests:
//! [`admission`] (who may open a session), [`roles`] (the one authority on who controls, over
//! native clients and receivers of other kinds: [`HostSession::attach_receiver`]), [`stream`]
//! (frame numbering, FEC, the resend store with per-client budgets, the one keyframe gate with
//! per-requester limits), and the peers ([`peer`]).
//!
//! Security (docs/PROTOCOL.md): a Noise `XX` handshake authenticates both sides; every datagram
//! after it is AEAD-protected; the client's static key must be on the allowlist (or paired with
//! a one-time PIN) unless the policy is [`AccessPolicy::Open`]. Datagrams with an unknown
//! connection id or a failing tag are counted and dropped before anything is allocated; the
//! established sessions are looked up first and never share state with handshakes in progress,
//! which are bounded in number, rate-limited and never answered with more than 3× the bytes
//! their address sent.

mod admission;
mod config;
pub mod health;
mod out;
mod peer;
mod roles;
mod stream;
mod types;

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::fec::FecPolicy;
use crate::handshake::{PublicKey, SessionRng};
use crate::paths::{PathStats, MAX_PATHS};
use crate::pose::PoseSample;
use crate::state::{Staleness, StateEntry, StateKey, StateReceiver, StateValue};
use crate::wire::{self, ByeReason, FrameTiming, SessionParams};
use crate::{GoneReason, Micros, Transmit};

pub use admission::{AMPLIFICATION_FACTOR, HANDSHAKE_REPEAT_ANSWER_US};
pub use config::{
    AccessPolicy, CodecOffer, HostConfig, ACCESS_REQUEST_TTL_US, DEFAULT_MAX_ACCESS_REQUESTS,
    DEFAULT_MAX_CLIENTS,
};
pub use health::{HealthConfig, SlowViewer};
pub use stream::{ClientDatagrams, FrameMeta};
pub use types::{
    AccessRequest, ClientId, ClientInfo, ClientStatus, HostEvent, HostStats, NoClient,
    PairingEvent, PairingPin, ReceiverKind, StreamState,
};

use admission::Admission;
use peer::Peer;
use roles::Roles;
use stream::Stream;

/// How often the host pings each client for the queueing delay (adaptive bitrate only).
const RATE_PING_INTERVAL_US: Micros = 100_000;

/// The host's protocol state machine.
pub struct HostSession {
    cfg: HostConfig,
    /// The connected clients, in the order they were admitted.
    peers: Vec<Peer>,
    /// Each removed client's status as it left (its final counters), until taken.
    departed: Vec<ClientStatus>,
    /// The next id, for native clients and receivers of other kinds alike.
    next_client: u32,
    /// Who controls: the one authority, over native clients and other receivers.
    roles: Roles,
    /// The bitrate target last announced ([`HostEvent::BitrateChanged`]).
    target_kbps: Option<u32>,
    /// Handshakes in progress, allowed and revoked keys, access requests, the PIN, the rate
    /// limits.
    admission: Admission,
    /// Frame numbering, FEC, the resend store, the one keyframe gate.
    stream: Stream,
    rng: SessionRng,
    /// Reused for opening protected datagrams (no per-packet allocation).
    scratch: Vec<u8>,
    transmits: VecDeque<Transmit>,
    /// Control datagrams (copies per path), sent before queued shards.
    control_out: VecDeque<Transmit>,
    /// The paths chosen for the datagram being queued (reused).
    sched: Vec<usize>,
    events: VecDeque<HostEvent>,
    stats: HostStats,
    /// Host → client state as published (a client that connects gets all of it).
    published: std::collections::BTreeMap<StateKey, StateValue>,
    /// The stream as configured: the limits within which a client's wants are granted, and
    /// the adaptive bitrate's bounds for it.
    limits: (SessionParams, Option<crate::rate::RateConfig>),
}

/// How many departed clients' last status [`HostSession::take_departed`] keeps.
pub const MAX_DEPARTED: usize = 64;

impl HostSession {
    pub fn new(cfg: HostConfig) -> Self {
        let mut seed = cfg.entropy;
        for (b, s) in seed.iter_mut().zip(cfg.connection_id_seed.to_le_bytes()) {
            *b ^= s;
        }
        let mut rng = SessionRng::from_seed(seed);
        let admission = Admission::new(&cfg, &rng.seed());
        HostSession {
            limits: (cfg.params, cfg.rate),
            stream: Stream::new(cfg.keyframe_cooldown_us),
            admission,
            rng,
            scratch: Vec::with_capacity(2048),
            cfg,
            peers: Vec::new(),
            departed: Vec::new(),
            next_client: 1,
            roles: Roles::new(),
            target_kbps: None,
            transmits: VecDeque::new(),
            control_out: VecDeque::new(),
            sched: Vec::with_capacity(MAX_PATHS),
            events: VecDeque::new(),
            stats: HostStats::default(),
            published: Default::default(),
        }
    }

    pub fn params(&self) -> &SessionParams {
        &self.cfg.params
    }

    /// The stream as configured: the limits of what a client may ask for (the size, frame
    /// rate and bit rate of [`params`](Self::params) are at most these).
    pub fn stream_limits(&self) -> &SessionParams {
        &self.limits.0
    }

    /// The host's public key (clients pin it; users compare its fingerprint).
    pub fn host_key(&self) -> PublicKey {
        self.cfg.identity.public
    }

    /// The FEC policy.
    pub fn fec_policy(&self) -> FecPolicy {
        self.cfg.fec
    }

    /// The most clients served at once.
    pub fn max_clients(&self) -> usize {
        self.cfg.max_clients.max(1)
    }

    /// [`HostStats::datagrams_authentic`], without copying the counters: a driver compares it
    /// around [`handle_datagram`](Self::handle_datagram) to learn whether that datagram was
    /// authentic.
    pub fn datagrams_authentic(&self) -> u64 {
        self.stats.datagrams_authentic
    }

    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        self.stream.fill_stats(&mut s);
        for p in &self.peers {
            s.key_updates += p.protection.sealer.key_updates + p.protection.opener.key_updates;
        }
        if let Some(p) = self.controller_peer() {
            s.state_out = p.state_tx.stats();
        }
        s
    }

    /// Removes peer `i` and what the stream kept for it.
    fn remove_peer(&mut self, i: usize) -> Peer {
        let p = self.peers.remove(i);
        self.stream.forget(p.info.id);
        // Bounded for an application that never asks.
        if self.departed.len() >= MAX_DEPARTED {
            self.departed.remove(0);
        }
        self.departed.push(p.status());
        p
    }

    /// The status of each client removed since the last call, as it left: its final counters
    /// (frames and bytes sent up to its last datagram), which [`client_status`] no longer
    /// shows. The last [`MAX_DEPARTED`] are kept.
    ///
    /// [`client_status`]: Self::client_status
    pub fn take_departed(&mut self) -> Vec<ClientStatus> {
        std::mem::take(&mut self.departed)
    }

    fn peer_index(&self, id: ClientId) -> Option<usize> {
        self.peers.iter().position(|p| p.info.id == id)
    }

    fn controller_peer(&self) -> Option<&Peer> {
        let id = self.roles.controller()?;
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

    /// The controller's id (a native client's, or a browser's while no native client is
    /// connected).
    pub fn controller(&self) -> Option<ClientId> {
        self.roles.controller()
    }

    /// Every connected client's role, stream state and counters, in admission order.
    /// The encoder, preset and conversion clients are told beside their Accept.
    pub fn host_encoder(&self) -> Option<&crate::wire::HostEncoder> {
        self.cfg.encoder.as_ref()
    }

    /// Names the encoder to clients (the one that opened, once known): the connected ones now
    /// (once: it is information, not state), the others beside their Accept.
    pub fn set_host_encoder(&mut self, e: Option<crate::wire::HostEncoder>) {
        if let Some(e) = &e {
            for p in &mut self.peers {
                p.pending
                    .retain(|f| !matches!(f, wire::ControlFrame::HostEncoder(_)));
                p.pending.push(wire::ControlFrame::HostEncoder(e.clone()));
            }
        }
        self.cfg.encoder = e;
    }

    pub fn client_status(&self) -> Vec<ClientStatus> {
        self.peers.iter().map(Peer::status).collect()
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
        suite: crate::crypto::Suite,
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
            view: None,
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
        let Some(id) = self.roles.controller() else {
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
        let p = self.remove_peer(i);
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

    /// How long a client may be unheard before it is silent ([`HostConfig::silence_us`]).
    pub fn silence_us(&self) -> Micros {
        self.cfg.silence_after_us()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let peers = self
            .peers
            .iter()
            .filter_map(|p| p.poll_timeout(&self.cfg))
            .min();
        let admission = self.admission.poll_timeout(&self.cfg);
        let hold = self.roles.hold_deadline();
        [admission, peers, self.stream.poll_timeout(), hold]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs timers: silence and idle timeouts, keep-alives, role repeats, pings and path
    /// probes, handshake expiry, a join's deferred keyframe, the end of a hold on control.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.expire_handshakes(now);
        self.expire_access_requests(now);
        let idle_us = self.cfg.params.idle_timeout_ms as u64 * 1000;
        let mut i = 0;
        // A client fell silent or left, or control was held for a key that did not come back:
        // control may pass on.
        let mut roles_due = self.roles.hold_deadline().is_some_and(|d| now >= d);
        while i < self.peers.len() {
            let p = &mut self.peers[i];
            if p.silence_deadline(&self.cfg).is_some_and(|d| now >= d) {
                // Gone quiet (killed, out of range): no more video to its address, and if it
                // controlled, control passes on now rather than at the idle timeout.
                p.silent = true;
                self.stats.clients_silenced += 1;
                self.events.push_back(HostEvent::ClientSilent {
                    client: p.info.id,
                    silent: true,
                });
                roles_due = true;
            }
            if now >= self.peers[i].last_recv_us + idle_us {
                let p = self.remove_peer(i);
                self.events.push_back(HostEvent::ClientGone {
                    client: p.info.id,
                    addr: p.info.addr,
                    reason: GoneReason::Timeout,
                });
                roles_due = true;
                continue;
            }
            self.peer_timers(now, i);
            i += 1;
        }
        if roles_due {
            self.assign_roles(now);
        }
        if self.stream.keyframes().take_join_due(now) {
            self.request_join_keyframe(now);
        }
    }

    /// Per-path counters and state of the controller's paths (one entry without multipath).
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.controller_peer()
            .map(|p| p.paths.stats())
            .unwrap_or_default()
    }
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}
