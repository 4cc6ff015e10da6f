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
//! per-requester limits), and the peers ([`peer`]: each [`Peer`](peer::Peer) in [`Peers`],
//! looked up by [`ClientId`]). `impl HostSession` is in two files: this one (the driving, and
//! the glue between the parts: each part's methods take what they need of the session as
//! arguments and return what the session must do) and [`api`] (the application's commands
//! and queries, each delegating to a part).
//!
//! Security (docs/PROTOCOL.md): a Noise `XX` handshake authenticates both sides; every datagram
//! after it is AEAD-protected; the client's static key must be on the allowlist (or paired with
//! a one-time PIN) unless the policy is [`AccessPolicy::Open`]. Datagrams with an unknown
//! connection id or a failing tag are counted and dropped before anything is allocated; the
//! established sessions are looked up first and never share state with handshakes in progress,
//! which are bounded in number, rate-limited and never answered with more than 3× the bytes
//! their address sent.

mod admission;
mod api;
mod config;
pub mod health;
mod peer;
mod roles;
mod stream;
mod types;

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::handshake::SessionRng;
use crate::keyframe::KeyframeDecision;
use crate::paths::MAX_PATHS;
use crate::state::{StateKey, StateValue};
use crate::wire::{self, ByeReason, ClientRole, RejectReason, SessionParams, HEADER_LEN};
use crate::{GoneReason, Micros, Transmit};

pub use admission::{AMPLIFICATION_FACTOR, HANDSHAKE_REPEAT_ANSWER_US};
pub use config::{
    AccessPolicy, CodecOffer, HostConfig, ACCESS_REQUEST_TTL_US, DEFAULT_MAX_ACCESS_REQUESTS,
    DEFAULT_MAX_CLIENTS,
};
pub use health::{HealthConfig, SlowViewer, UnknownSlowViewer};
pub use stream::{ClientDatagrams, FrameMeta};
pub use types::{
    AccessRequest, ClientId, ClientInfo, ClientStatus, HostEvent, HostStats, NoClient,
    PairingEvent, PairingPin, ReceiverKind, StreamState,
};

use admission::Responder;
use health::Verdict;
use peer::{Peer, Peers};
use roles::Roles;
use stream::keyframes::Requester;
use stream::Stream;

/// How often the host pings each client for the queueing delay (adaptive bitrate only).
const RATE_PING_INTERVAL_US: Micros = 100_000;

/// The host's protocol state machine.
pub struct HostSession {
    cfg: HostConfig,
    /// The connected clients, in the order they were admitted.
    peers: Peers,
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
    responder: Responder,
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
        let responder = Responder::new(&cfg, &rng.seed());
        HostSession {
            limits: (cfg.params, cfg.rate),
            stream: Stream::new(cfg.keyframe_cooldown_us),
            responder,
            rng,
            scratch: Vec::with_capacity(2048),
            cfg,
            peers: Peers::default(),
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

    /// Removes a client and what the stream kept for it; its place in the admission order
    /// with it. Its last status is kept for [`take_departed`](Self::take_departed).
    fn remove_peer(&mut self, id: ClientId) -> Option<(usize, Peer)> {
        let (i, p) = self.peers.remove(id)?;
        self.stream.forget(id);
        // Bounded for an application that never asks.
        if self.departed.len() >= MAX_DEPARTED {
            self.departed.remove(0);
        }
        self.departed.push(p.status());
        Some((i, p))
    }

    fn controller_peer(&self) -> Option<&Peer> {
        self.peers.get(self.roles.controller()?)
    }

    // ---- receive -------------------------------------------------------------------------

    /// The handshake responder, with what it borrows of the session.
    fn responder_io(&mut self) -> (&mut Responder, admission::Io<'_>) {
        let io = admission::Io {
            cfg: &self.cfg,
            rng: &mut self.rng,
            stats: &mut self.stats,
            transmits: &mut self.transmits,
        };
        (&mut self.responder, io)
    }

    /// A HelloFinish: [`Responder`] checks it; an authentic one is admitted here (or refused
    /// for the session's reasons: no room, no codec in common).
    fn on_finish(&mut self, now: Micros, from: SocketAddr, cid: u64, msg3: &[u8], len: usize) {
        let (admission, mut io) = self.responder_io();
        match admission.on_finish(now, from, cid, msg3, len, &mut io) {
            admission::Finish::Done => {}
            admission::Finish::NotPending => self.on_finish_repeat(now, from, cid, msg3),
            admission::Finish::Authenticated(f) => self.admit(now, from, cid, msg3, *f),
        }
    }

    /// An authenticated client: refused (admission's reason, no room, no codec in common), or
    /// admitted — taking the place (and the role) of its own earlier run if connected.
    fn admit(
        &mut self,
        now: Micros,
        from: SocketAddr,
        cid: u64,
        msg3: &[u8],
        f: admission::Finished,
    ) {
        let key = f.key;
        // The same client again (a restarted run) replaces its old session below.
        let refusal = f
            .refusal
            .clone()
            .or_else(|| self.peers.busy_refusal(&key, self.max_clients()));
        let others = self.peers.iter().any(|p| p.info().key != key);
        let codec = self.cfg.choose_codec(others, &f.info.decodes());
        let refusal = refusal.or_else(|| {
            codec
                .as_ref()
                .err()
                .map(|why| (RejectReason::Codec, why.to_string()))
        });
        if let Some((reason, message)) = refusal {
            self.stats.clients_refused += 1;
            self.events.push_back(HostEvent::ClientRefused {
                addr: from,
                fingerprint: f.fingerprint.clone(),
                reason,
                message: message.clone(),
            });
            let (admission, mut io) = self.responder_io();
            admission.refuse(now, from, f, msg3, (reason, message), &mut io);
            return;
        }
        // A restarted run of a connected client: tell the old run why (sealed with its keys)
        // and take its place (and its role: a controller that restarts stays in control).
        let mut place = self.peers.len();
        let mut was_controller = false;
        if let Some((i, old)) = self
            .peers
            .by_key(&key)
            .and_then(|old| self.say_bye(now, old, ByeReason::Replaced))
        {
            was_controller = self.roles.controller() == Some(old.info().id);
            place = i;
            self.events.push_back(HostEvent::ClientGone {
                client: old.info().id,
                addr: old.info().addr,
                reason: GoneReason::Replaced,
            });
        }
        let id = ClientId(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        let (connection_id, suite) = (f.setup().connection_id, f.setup().suite);
        let info = ClientInfo {
            id,
            addr: from,
            name: f.info.name.clone(),
            connection_id,
            connected_us: now,
            key,
            fingerprint: f.fingerprint,
            suite,
            view: f.info.view,
        };
        if let (Ok(c), false) = (codec, others) {
            // The first client (or a lone client's new run) sets the stream's codec.
            self.cfg.set_codec(c);
        }
        let granted = self.cfg.grant_stream(&self.limits, f.info.wants, others);
        let token_seed = self.rng.next_u64();
        let peer = Peer::new(
            &self.cfg,
            self.cfg.params,
            &self.published,
            info.clone(),
            cid,
            msg3.to_vec(),
            f.protection,
            now,
            token_seed,
        );
        self.peers.insert(place, peer);
        if was_controller {
            self.roles.inherit_control(id);
        }
        self.stats.clients_connected += 1;
        // Roles first (the new client's Role rides beside its Accept), then its keyframe.
        let mark = self.events.len();
        self.assign_roles(now);
        let role = self.peers.get(id).map_or(ClientRole::Viewer, Peer::role);
        // (Its role is in ClientConnected: no RoleChanged for it.)
        let mut k = mark;
        while k < self.events.len() {
            if matches!(self.events[k], HostEvent::RoleChanged { client, .. } if client == id) {
                self.events.remove(k);
            } else {
                k += 1;
            }
        }
        self.events.insert(
            mark,
            HostEvent::ClientConnected {
                client: id,
                addr: from,
                name: info.name,
                role,
            },
        );
        if let Some((asked, granted, clamped)) = granted {
            self.events.push_back(HostEvent::StreamGranted {
                client: id,
                asked,
                granted,
                clamped,
                shared: others,
            });
        }
        // A key that keeps reconnecting waits longer and longer for its join keyframe.
        self.stream.keyframes().on_join(now, id, Some(key));
        self.request_entry_point(now);
    }

    /// A HelloFinish that matches no handshake in progress: a connected client's repeat (its
    /// Accept was lost) draws the Accept again ([`Peer::repeat_accept`]); anything else is
    /// dropped.
    fn on_finish_repeat(&mut self, now: Micros, from: SocketAddr, cid: u64, msg3: &[u8]) {
        let beside = peer::BesideAccept::of(&self.cfg);
        let Some(peer) = self.peers.by_handshake_mut(cid, from) else {
            self.stats.unknown_connection += 1;
            return;
        };
        if !peer.repeat_accept(now, msg3, &beside) {
            self.stats.auth_failures += 1;
        }
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
                let (admission, mut io) = self.responder_io();
                admission.version_negotiation(now, from, v, data.len(), &mut io);
                return;
            }
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match datagram {
            wire::Datagram::Hello(hello) => {
                let (admission, mut io) = self.responder_io();
                admission.on_hello(now, from, &header, hello, data.len(), &mut io)
            }
            wire::Datagram::HelloFinish(msg3) => {
                self.on_finish(now, from, header.connection_id, msg3, data.len())
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

    /// Says `bye` to a client (its Bye built now, sealed with its keys) and removes it; its
    /// place in the admission order and its session as it was.
    fn say_bye(&mut self, now: Micros, id: ClientId, bye: ByeReason) -> Option<(usize, Peer)> {
        self.peers
            .get_mut(id)?
            .queue(wire::ControlFrame::Bye { reason: bye });
        // Flush the Bye now: the session is over whatever the application does next.
        self.build_controls_of(now, id);
        self.remove_peer(id)
    }

    /// Says `bye` to a client, removes it and reports it gone.
    fn end_peer(&mut self, now: Micros, id: ClientId, bye: ByeReason, gone: GoneReason) {
        let Some((_, p)) = self.say_bye(now, id, bye) else {
            return;
        };
        self.events.push_back(HostEvent::ClientGone {
            client: id,
            addr: p.info().addr,
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
        let peers = self
            .peers
            .iter()
            .filter_map(|p| p.poll_timeout(&self.cfg))
            .min();
        let admission = self.responder.poll_timeout(&self.cfg);
        let hold = self.roles.hold_deadline();
        [admission, peers, self.stream.poll_timeout(), hold]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs timers: silence and idle timeouts, keep-alives, role repeats, pings and path
    /// probes, handshake expiry, a join's deferred keyframe, the end of a hold on control.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.responder
            .handle_timeout(now, &self.cfg, &mut self.stats);
        let idle_us = self.cfg.params.idle_timeout_ms as u64 * 1000;
        let keepalive_us = self.cfg.params.keepalive_ms as u64 * 1000;
        // A client fell silent or left, or control was held for a key that did not come back:
        // control may pass on.
        let mut roles_due = self.roles.hold_deadline().is_some_and(|d| now >= d);
        for id in self.peers.ids() {
            let Some(p) = self.peers.get_mut(id) else {
                continue;
            };
            if p.fall_silent(now, &self.cfg) {
                // Gone quiet (killed, out of range): no more video to its address, and if it
                // controlled, control passes on now rather than at the idle timeout.
                self.stats.clients_silenced += 1;
                self.events.push_back(HostEvent::ClientSilent {
                    client: id,
                    silent: true,
                });
                roles_due = true;
            }
            if p.idle(now, idle_us) {
                if let Some((_, p)) = self.remove_peer(id) {
                    self.events.push_back(HostEvent::ClientGone {
                        client: id,
                        addr: p.info().addr,
                        reason: GoneReason::Timeout,
                    });
                }
                roles_due = true;
                continue;
            }
            p.handle_timeout(
                now,
                keepalive_us,
                &mut self.stats,
                &mut self.sched,
                &mut self.transmits,
                &mut self.control_out,
            );
        }
        if roles_due {
            self.assign_roles(now);
        }
        if self.stream.keyframes().take_join_due(now) {
            self.request_join_keyframe(now);
        }
    }

    /// Picks the controller ([`Roles::decide`]) and tells every client whose role changed.
    fn assign_roles(&mut self, now: Micros) {
        // A silent client cannot control: nothing it sends arrives.
        let natives = self.peers.natives();
        if let Some(want) = self.roles.decide(&natives, now) {
            if want.is_some() {
                self.stats.controller_changes += 1;
            }
            // The bitrate follows the new controller's link.
            let target = self.controller_peer().and_then(Peer::target_kbps);
            if let Some(kbps) = target.filter(|&t| self.target_kbps.is_some_and(|o| o != t)) {
                self.target_kbps = Some(kbps);
                self.events.push_back(HostEvent::BitrateChanged { kbps });
            }
        }
        let mut resumed = false;
        for p in self.peers.iter_mut() {
            let (role, granted) = self.roles.native_role(p.info().id, &p.info().key);
            if let Some(r) = p.take_role(role, granted) {
                resumed |= r;
                self.events.push_back(HostEvent::RoleChanged {
                    client: p.info().id,
                    role,
                    input_granted: granted,
                });
            }
            p.tell_role(now, &mut self.stats);
        }
        for (receiver, kind, role) in self.roles.receiver_changes() {
            self.events.push_back(HostEvent::ReceiverRoleChanged {
                receiver,
                kind,
                role,
            });
        }
        if resumed {
            self.request_entry_point(now);
        }
    }

    /// A protected datagram: its peer (by connection id) opens it ([`Peer::open`]) and handles
    /// its control frames ([`Peer::on_control`]); the session acts on what they return.
    fn on_protected(&mut self, now: Micros, from: SocketAddr, data: &[u8]) {
        let cid = u64::from_be_bytes(arr(&data[2..10]));
        let pn = u64::from_be_bytes(arr(&data[10..18]));
        let Some(peer) = self
            .peers
            .by_connection_id(cid)
            .and_then(|id| self.peers.get_mut(id))
        else {
            self.stats.unknown_connection += 1;
            return;
        };
        let id = peer.info().id;
        let Some(opened) = peer.open(now, from, pn, data, &mut self.scratch, &mut self.stats)
        else {
            return;
        };
        if opened.heard_again {
            // Roles are decided again (control it lost while silent stays where it went,
            // unless its key is the preferred one); it is live from the next entry point.
            self.events.push_back(HostEvent::ClientSilent {
                client: id,
                silent: false,
            });
            self.assign_roles(now);
            self.request_entry_point(now);
        }
        let frames = match wire::parse_control(&self.scratch[HEADER_LEN..HEADER_LEN + opened.len]) {
            Ok(f) => f,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        for f in frames {
            // A frame may end the session (Bye, a dropped viewer): the rest is not for anyone.
            let is_controller = self.roles.controller() == Some(id);
            let Some(peer) = self.peers.get_mut(id) else {
                return;
            };
            let action = peer.on_control(
                now,
                from,
                f,
                is_controller,
                &mut self.stats,
                &mut self.events,
            );
            if let Some(action) = action {
                self.on_peer_action(now, id, action);
            }
        }
    }

    /// What a peer's control frame asks of the session.
    fn on_peer_action(&mut self, now: Micros, id: ClientId, action: peer::Action) {
        match action {
            peer::Action::Keyframe { lost_frame, paused } => {
                let who = self.roles.requester(id);
                if self.keyframe_request(now, who, lost_frame) == KeyframeDecision::Limited
                    && paused
                {
                    self.stats.keyframe_requests_ignored_paused += 1;
                }
            }
            peer::Action::Feedback { bitrate, verdict } => {
                if let Some(kbps) = bitrate {
                    self.target_kbps = Some(kbps);
                    self.events.push_back(HostEvent::BitrateChanged { kbps });
                }
                self.on_verdict(now, id, verdict);
            }
            peer::Action::Nack {
                frame_number,
                slice_index,
                missing,
            } => self.retransmit(now, id, frame_number, slice_index, &missing),
            peer::Action::Bye => {
                if let Some((_, p)) = self.remove_peer(id) {
                    self.events.push_back(HostEvent::ClientGone {
                        client: id,
                        addr: p.info().addr,
                        reason: GoneReason::Bye,
                    });
                }
                self.assign_roles(now);
            }
        }
    }

    /// Acts on a viewer's health verdict.
    fn on_verdict(&mut self, now: Micros, id: ClientId, verdict: Verdict) {
        match verdict {
            Verdict::Keep => {}
            Verdict::Pause => {
                self.stats.viewers_paused += 1;
                self.events.push_back(HostEvent::ViewerPaused {
                    client: id,
                    paused: true,
                });
                if let Some(p) = self.peers.get_mut(id) {
                    p.tell_role(now, &mut self.stats);
                }
            }
            Verdict::Resume => {
                self.events.push_back(HostEvent::ViewerPaused {
                    client: id,
                    paused: false,
                });
                if let Some(p) = self.peers.get_mut(id) {
                    p.tell_role(now, &mut self.stats);
                    // Its decoder needs a fresh start: the next keyframe (within the cooldown).
                    p.resume();
                }
                self.request_entry_point(now);
            }
            Verdict::Drop => {
                self.stats.viewers_dropped += 1;
                self.end_peer(now, id, ByeReason::TooSlow, GoneReason::TooSlow);
            }
        }
    }

    /// Builds the control datagrams of every client with frames pending; clients told Bye
    /// (the host closing) leave.
    fn build_controls(&mut self, now: Micros) {
        let mut closed = false;
        for id in self.peers.ids() {
            if self.build_controls_of(now, id) {
                self.remove_peer(id);
                closed = true;
            }
        }
        if closed {
            self.assign_roles(now);
        }
    }

    /// Builds a client's pending control frames ([`Peer::build_controls`]) on
    /// `control_out`; true if a Bye went out.
    fn build_controls_of(&mut self, now: Micros, id: ClientId) -> bool {
        let max = self.cfg.params.max_datagram as usize;
        let Some(peer) = self.peers.get_mut(id) else {
            return false;
        };
        peer.build_controls(
            now,
            max,
            &mut self.stats,
            &mut self.sched,
            &mut self.control_out,
        )
    }

    /// A client's ShardNack or SliceNack ([`Stream::retransmit`]), within a budget shaped by
    /// the stream's current bitrate.
    fn retransmit(
        &mut self,
        now: Micros,
        id: ClientId,
        frame_number: u32,
        slice_index: u8,
        missing: &[u16],
    ) {
        let shape = (
            self.target_kbps.unwrap_or(self.cfg.params.bitrate_kbps),
            self.cfg.params.fps as u32,
            self.cfg.params.max_datagram as u64,
        );
        let Some(peer) = self.peers.get_mut(id) else {
            return;
        };
        self.stream.retransmit(
            now,
            peer,
            frame_number,
            slice_index,
            missing,
            shape,
            &mut self.stats,
            &mut self.sched,
            &mut self.transmits,
        );
    }

    /// A keyframe request through the one gate, with the requester's limits.
    fn keyframe_request(
        &mut self,
        now: Micros,
        who: Requester,
        lost_frame: u32,
    ) -> KeyframeDecision {
        let d = self.stream.keyframes().request(now, who, lost_frame);
        if d == KeyframeDecision::Honour {
            self.events.push_back(HostEvent::KeyframeRequested);
        }
        d
    }

    /// A client waits for a picture it can start on: with a self-refreshing stream, the next
    /// sweep; otherwise a keyframe for everyone, within the cooldown.
    fn request_entry_point(&mut self, now: Micros) {
        if self.cfg.stream_refreshes || self.cfg.params.refresh_period > 0 {
            return;
        }
        self.request_join_keyframe(now);
    }

    /// Asks for a keyframe for the clients waiting for their first picture, now or (during
    /// the keyframe cooldown) when it ends.
    fn request_join_keyframe(&mut self, now: Micros) {
        let waiting: Vec<(ClientId, bool)> = self
            .peers
            .iter()
            .filter(|p| p.awaiting_entry())
            .map(|p| (p.info().id, self.roles.controller() != Some(p.info().id)))
            .collect();
        if waiting.is_empty() {
            return;
        }
        // Within the cooldown, a backoff or the viewers' budget: the gate sets a timer.
        if self.stream.keyframes().join(now, &waiting) {
            self.events.push_back(HostEvent::KeyframeRequested);
            self.stats.keyframes_for_joins += 1;
        }
    }
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}
