//! One client's session on the host: its keys and packet numbers, paths, input channels,
//! feedback, bitrate and health, and what it is sent; the protected datagrams it sends, and
//! the control datagrams built for it.

use std::net::SocketAddr;

use super::health::{Verdict, ViewerHealth};
use super::out::fan_out;
use super::stream::keyframes::Requester;
use super::{arr, ClientInfo, ClientStatus, HostConfig, HostEvent, HostSession, HostStats};
use super::{StreamState, HANDSHAKE_REPEAT_ANSWER_US, RATE_PING_INTERVAL_US};
use crate::crypto::{Protection, TAG_LEN};
use crate::fec::LossEstimator;
use crate::handshake::PublicKey;
use crate::keyframe::KeyframeDecision;
use crate::paths::{Class, PathSet};
use crate::rate::RateController;
use crate::reliable::ReliableReceiver;
use crate::state::{StateKey, StateReceiver, StateSender, StateValue};
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, encode_control, role_flags, ByeReason, ClientRole, ControlFrame, Feedback, Header,
    PacketType, RejectReason, HEADER_LEN,
};
use crate::{GoneReason, Micros};

/// How often an unconfirmed Accept is repeated ahead of video frames.
pub(super) const ACCEPT_REPEAT_US: Micros = 15_000;
/// For how long after the session starts.
pub(super) const ACCEPT_REPEAT_FOR_US: Micros = 2_000_000;
/// An unacknowledged Role is sent again after this long.
pub(super) const ROLE_REPEAT_US: Micros = 200_000;

/// Per-client counters.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PeerCounters {
    pub frames_sent: u64,
    pub frames_skipped: u64,
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub parity_shards_sent: u64,
    pub shards_retransmitted: u64,
    pub keyframe_requests: u64,
    pub inputs_received: u64,
    pub inputs_dropped: u64,
}

pub(super) struct Peer {
    pub info: ClientInfo,
    /// The connection id of the client's handshake datagrams (a repeated HelloFinish means
    /// the Accept was lost).
    pub handshake_cid: u64,
    /// The client's message 3: only an identical copy is a repeat that may draw the Accept
    /// again (anything else with that connection id is forged).
    pub handshake_msg3: Vec<u8>,
    pub protection: Protection,
    pub last_recv_us: Micros,
    pub last_send_us: Micros,
    pub next_pn: u64,
    pub window: PacketWindow,
    pub input: ReliableReceiver,
    pub state: StateReceiver,
    /// Host → client state (seeded with every published value when the client connects).
    pub state_tx: StateSender,
    /// What its Accept said: the stream's parameters, with the codec it was given and the
    /// stream's refresh period.
    pub params: wire::SessionParams,
    /// Control frames waiting for the next control datagram.
    pub pending: Vec<ControlFrame>,
    pub feedback: Option<Feedback>,
    /// Downstream loss, from the client's Feedback (drives its adaptive FEC).
    pub loss: LossEstimator,
    /// The client's addresses (path 0: the handshake's) and the scheduler.
    pub paths: PathSet,
    /// Adaptive bitrate, when on (only the controller's sets the encoder's bitrate; a
    /// viewer's gives its queueing delay).
    pub rate: Option<RateController>,
    pub next_ping_us: Micros,
    pub next_ping_id: u32,
    /// Whether a protected datagram from the client has arrived since the Accept (so it has
    /// the Accept). Until then the Accept rides again ahead of each video frame, at most every
    /// [`ACCEPT_REPEAT_US`], for [`ACCEPT_REPEAT_FOR_US`]: a lost Accept otherwise costs the
    /// client's 200 ms HelloFinish repeat, a dozen frames it cannot read.
    pub confirmed: bool,
    pub accept_sent_us: Micros,
    pub role: ClientRole,
    pub input_granted: bool,
    /// The role (and flags) last told, its version, and whether the client acknowledged it.
    pub role_version: u16,
    pub role_told: Option<(ClientRole, u8)>,
    pub role_acked: bool,
    pub role_sent_us: Micros,
    /// Joined, and not yet sent a frame it can start decoding on.
    pub awaiting_entry: bool,
    /// Nothing heard from it for `silence_us`: sent nothing until heard again.
    pub silent: bool,
    pub health: ViewerHealth,
    /// The host's (captured, encoded, dropped) counts before its first frame.
    pub timing_base: Option<(u32, u32, u32)>,
    pub counters: PeerCounters,
}

impl Peer {
    /// One sealed control datagram of `frames` (none: a keep-alive), numbered with this
    /// client's next packet number; None when sealing fails (the number is spent either way).
    fn seal_control(&mut self, frames: &[ControlFrame], capacity: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(capacity);
        let pn = self.next_pn;
        encode_control(
            &Header::new(PacketType::Control, self.info.connection_id, pn),
            frames,
            &mut out,
        );
        self.next_pn += 1;
        self.protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .ok()
            .map(|_| out)
    }

    /// A new client session: the Accept (and the clock identity and the role beside it) are
    /// the first control frames it is sent.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: &HostConfig,
        params: wire::SessionParams,
        published: &std::collections::BTreeMap<StateKey, StateValue>,
        info: ClientInfo,
        handshake_cid: u64,
        handshake_msg3: Vec<u8>,
        protection: Protection,
        now: Micros,
        token_seed: u64,
    ) -> Peer {
        let mut pending = Vec::new();
        queue_accept(&mut pending, params, &BesideAccept::of(cfg));
        let addr = info.addr;
        let mut state_tx = StateSender::new(cfg.state);
        for (k, v) in published {
            state_tx.set(now, *k, *v);
        }
        Peer {
            info,
            handshake_cid,
            handshake_msg3,
            protection,
            last_recv_us: now,
            last_send_us: now,
            next_pn: 0,
            window: PacketWindow::new(),
            input: ReliableReceiver::new(),
            state: StateReceiver::new(),
            state_tx,
            params,
            pending,
            feedback: None,
            loss: LossEstimator::new(),
            paths: PathSet::new(cfg.paths, addr, now, token_seed),
            rate: cfg.rate.map(RateController::new),
            next_ping_us: now,
            next_ping_id: 0,
            confirmed: false,
            accept_sent_us: now,
            role: ClientRole::Viewer,
            input_granted: false,
            role_version: 0,
            role_told: None,
            role_acked: false,
            role_sent_us: now,
            awaiting_entry: true,
            silent: false,
            health: ViewerHealth::new(cfg.health),
            timing_base: None,
            counters: PeerCounters::default(),
        }
    }

    /// The controller's input applies, and a viewer's with a grant.
    pub fn input_applies(&self) -> bool {
        self.role == ClientRole::Controller || self.input_granted
    }

    pub fn stream_state(&self) -> StreamState {
        if self.silent {
            StreamState::Silent
        } else if self.awaiting_entry {
            StreamState::AwaitingPicture
        } else if self.health.is_paused() {
            StreamState::Paused
        } else {
            StreamState::Live
        }
    }

    /// Whether this client is sent a frame (`entry`: one it can start decoding on). A paused
    /// viewer takes keyframes only (a refresh sweep's first frame is no picture on its own:
    /// the rest of the sweep it would not get); a client waiting for its first picture, any
    /// entry point (it takes every frame after it).
    pub fn takes(&self, keyframe: bool, entry: bool) -> bool {
        if self.silent {
            false
        } else if self.health.is_paused() {
            keyframe
        } else {
            entry || !self.awaiting_entry
        }
    }

    pub fn status(&self) -> ClientStatus {
        let c = &self.counters;
        ClientStatus {
            info: self.info.clone(),
            role: self.role,
            input_granted: self.input_granted,
            state: self.stream_state(),
            frames_sent: c.frames_sent,
            frames_skipped: c.frames_skipped,
            bytes_sent: c.bytes_sent,
            datagrams_sent: c.datagrams_sent,
            parity_shards_sent: c.parity_shards_sent,
            shards_retransmitted: c.shards_retransmitted,
            keyframe_requests: c.keyframe_requests,
            inputs_received: c.inputs_received,
            inputs_dropped: c.inputs_dropped,
            pauses: self.health.pauses() as u32,
            loss: self.loss.loss(),
            rtt_us: self
                .feedback
                .and_then(|f| (f.srtt_us > 0).then_some(f.srtt_us as u64)),
            queue_us: self.rate.as_ref().and_then(RateController::queue_delay_us),
        }
    }

    /// When it falls silent if nothing is heard from it before (None: silent already).
    pub fn silence_deadline(&self, cfg: &HostConfig) -> Option<Micros> {
        (!self.silent).then(|| self.last_recv_us.saturating_add(cfg.silence_after_us()))
    }

    /// The peer's next timer.
    pub fn poll_timeout(&self, cfg: &HostConfig) -> Option<Micros> {
        let keepalive = self.last_send_us + cfg.params.keepalive_ms as u64 * 1000;
        let idle = self.last_recv_us + cfg.params.idle_timeout_ms as u64 * 1000;
        let silence = self.silence_deadline(cfg).unwrap_or(Micros::MAX);
        let paths = self.paths.next_timeout().unwrap_or(Micros::MAX);
        let ping = if self.rate.is_some() {
            self.next_ping_us
        } else {
            Micros::MAX
        };
        let role = if self.role_told.is_some() && !self.role_acked {
            self.role_sent_us + ROLE_REPEAT_US
        } else {
            Micros::MAX
        };
        let state = match self.state_tx.key_count() {
            0 => Micros::MAX,
            _ => self.state_tx.poll_timeout().unwrap_or(Micros::MAX),
        };
        Some(
            keepalive
                .min(idle)
                .min(silence)
                .min(paths)
                .min(ping)
                .min(role)
                .min(state),
        )
    }
}

impl Peer {
    /// Takes the role the authority gives it (and whether its input is granted). Some when
    /// either changed: `true` if it was a paused viewer taking control, which is judged no
    /// more and takes every frame again, from the next entry point.
    pub(super) fn take_role(&mut self, role: ClientRole, granted: bool) -> Option<bool> {
        if role == self.role && granted == self.input_granted {
            return None;
        }
        let mut resumed = false;
        if role == ClientRole::Controller && self.health.is_paused() {
            self.awaiting_entry = true;
            resumed = true;
        }
        if role == ClientRole::Controller {
            self.health.reset();
        }
        self.role = role;
        self.input_granted = granted;
        Some(resumed)
    }

    /// Queues its Role frame if what it was last told differs.
    pub(super) fn tell_role(&mut self, now: Micros, stats: &mut HostStats) {
        let mut flags = 0;
        if self.input_granted {
            flags |= role_flags::INPUT_GRANTED;
        }
        if self.health.is_paused() {
            flags |= role_flags::PAUSED;
        }
        if self.role_told == Some((self.role, flags)) {
            return;
        }
        self.role_version = self.role_version.wrapping_add(1);
        self.role_told = Some((self.role, flags));
        self.role_acked = false;
        self.tell_role_again(now, stats);
    }

    /// Queues its current Role frame (again: it was not acknowledged).
    fn tell_role_again(&mut self, now: Micros, stats: &mut HostStats) {
        let Some((role, flags)) = self.role_told else {
            return;
        };
        self.pending
            .retain(|f| !matches!(f, ControlFrame::Role { .. }));
        self.pending.push(ControlFrame::Role {
            role,
            flags,
            version: self.role_version,
        });
        self.role_sent_us = now;
        stats.roles_sent += 1;
    }

    /// A repeated HelloFinish of this client (its Accept was lost): only an exact copy of its
    /// message 3 is one (false: forged); it draws the Accept again unless the client has shown
    /// it has it or one went out in the last [`HANDSHAKE_REPEAT_ANSWER_US`].
    pub(super) fn repeat_accept(
        &mut self,
        now: Micros,
        msg3: &[u8],
        beside: &BesideAccept,
    ) -> bool {
        if msg3 != self.handshake_msg3.as_slice() {
            return false;
        }
        if self.confirmed || now < self.accept_sent_us + HANDSHAKE_REPEAT_ANSWER_US {
            return true;
        }
        queue_accept(&mut self.pending, self.params, beside);
        self.accept_sent_us = now;
        true
    }
}

/// Why an authenticated client is refused for want of room: the host serves its maximum
/// (a client whose key is connected replaces its old run, and is never refused for it).
pub(super) fn busy_refusal(
    peers: &[Peer],
    key: &PublicKey,
    max: usize,
) -> Option<(RejectReason, String)> {
    let replaces = peers.iter().any(|p| &p.info.key == key);
    if replaces || peers.len() < max {
        return None;
    }
    let names: Vec<String> = peers
        .iter()
        .take(4)
        .map(|p| format!("{:?}", p.info.name))
        .collect();
    Some((
        RejectReason::Busy,
        format!(
            "the host serves its maximum of {max} client{} ({}{}); try again when one \
             leaves, or raise host.max_clients (--max-clients) on the host",
            if max == 1 { "" } else { "s" },
            names.join(", "),
            if peers.len() > 4 { ", …" } else { "" }
        ),
    ))
}

/// What travels in the same datagram as every Accept: the host's clock identity and its
/// encoder's names.
pub(super) struct BesideAccept {
    clock: Option<[u8; 16]>,
    encoder: Option<wire::HostEncoder>,
}

impl BesideAccept {
    pub(super) fn of(cfg: &HostConfig) -> BesideAccept {
        BesideAccept {
            clock: cfg.clock_id,
            encoder: cfg.encoder.clone(),
        }
    }
}

/// Puts the Accept (and what goes beside it) first in `pending`.
pub(super) fn queue_accept(
    pending: &mut Vec<ControlFrame>,
    params: wire::SessionParams,
    beside: &BesideAccept,
) {
    pending.retain(|f| {
        !matches!(
            f,
            ControlFrame::Accept(_) | ControlFrame::ClockId { .. } | ControlFrame::HostEncoder(_)
        )
    });
    if let Some(e) = &beside.encoder {
        pending.insert(0, ControlFrame::HostEncoder(e.clone()));
    }
    if let Some(id) = beside.clock {
        pending.insert(0, ControlFrame::ClockId { id });
    }
    pending.insert(0, ControlFrame::Accept(params));
}

impl HostSession {
    pub(super) fn on_protected(&mut self, now: Micros, from: SocketAddr, data: &[u8]) {
        let cid = u64::from_be_bytes(arr(&data[2..10]));
        let pn = u64::from_be_bytes(arr(&data[10..18]));
        let Some(i) = self.peers.iter().position(|p| p.info.connection_id == cid) else {
            self.stats.unknown_connection += 1;
            return;
        };
        let peer = &mut self.peers[i];
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
        self.stats.datagrams_authentic += 1;
        let id = peer.info.id;
        if std::mem::take(&mut peer.silent) {
            // Heard again: live from the next keyframe; roles are decided again (control it
            // lost while silent stays where it went, unless its key is the preferred one).
            peer.awaiting_entry = true;
            self.stats.clients_heard_again += 1;
            self.events.push_back(HostEvent::ClientSilent {
                client: id,
                silent: false,
            });
            self.assign_roles(now);
            self.request_entry_point(now);
        }
        let frames = match wire::parse_control(&self.scratch[HEADER_LEN..HEADER_LEN + len]) {
            Ok(f) => f,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        for f in frames {
            // A frame may end the session (Bye, a dropped viewer): the rest is not for anyone.
            let Some(i) = self.peer_index(id) else {
                return;
            };
            self.on_control(now, i, from, f);
        }
    }

    fn on_control(&mut self, now: Micros, i: usize, from: SocketAddr, f: ControlFrame) {
        let peer = &mut self.peers[i];
        match f {
            ControlFrame::KeyframeRequest { lost_frame } => {
                self.stats.keyframe_requests_received += 1;
                peer.counters.keyframe_requests += 1;
                if peer.awaiting_entry {
                    // Its first picture is on its way (the join asked for it).
                    return;
                }
                // A viewer (paused or not) gets the keyframes others cause, and at most one of
                // its own a second: it must not make everyone's stream a string of keyframes.
                let who = if self.roles.controller() == Some(peer.info.id) {
                    Requester::Controller
                } else {
                    Requester::Viewer(peer.info.id)
                };
                let paused = peer.health.is_paused();
                if self.keyframe_request(now, who, lost_frame) == KeyframeDecision::Limited
                    && paused
                {
                    self.stats.keyframe_requests_ignored_paused += 1;
                }
            }
            ControlFrame::Feedback(fb) => {
                peer.feedback = Some(fb);
                peer.loss.on_feedback(&fb);
                let is_controller = self.roles.controller() == Some(peer.info.id);
                let mut bitrate = None;
                if let Some(rate) = peer.rate.as_mut() {
                    let mean =
                        self.stats.bytes_sent as f64 / self.stats.datagrams_sent.max(1) as f64;
                    if let (_, Some(kbps)) = rate.on_feedback(now, &fb, mean) {
                        bitrate = Some(kbps);
                    }
                }
                let verdict = if is_controller {
                    Verdict::Keep
                } else {
                    let queue = peer.rate.as_ref().and_then(RateController::queue_delay_us);
                    peer.health.on_feedback(now, &fb, queue)
                };
                let id = peer.info.id;
                self.events.push_back(HostEvent::Feedback {
                    client: id,
                    feedback: fb,
                });
                if let Some(kbps) = bitrate.filter(|_| is_controller) {
                    // The bitrate follows the controller's link only.
                    self.target_kbps = Some(kbps);
                    self.events.push_back(HostEvent::BitrateChanged { kbps });
                }
                self.on_verdict(now, i, verdict);
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
            } => self.retransmit(now, i, frame_number, 0, &missing),
            ControlFrame::SliceNack {
                frame_number,
                slice_index,
                missing,
            } => self.retransmit(now, i, frame_number, slice_index, &missing),
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
                peer.counters.inputs_received += out.len() as u64;
                // Acknowledged whatever the role (the client's channel must not stall);
                // delivered only from the controller and viewers with a grant.
                if peer.input_applies() {
                    let client = peer.info.id;
                    for record in out {
                        self.events.push_back(HostEvent::Input { client, record });
                    }
                } else {
                    peer.counters.inputs_dropped += out.len() as u64;
                    self.stats.inputs_dropped_viewer += out.len() as u64;
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
            ControlFrame::RoleAck { version } => {
                if version == peer.role_version {
                    peer.role_acked = true;
                }
            }
            ControlFrame::Bye { .. } => {
                let p = self.remove_peer(i);
                self.events.push_back(HostEvent::ClientGone {
                    client: p.info.id,
                    addr: p.info.addr,
                    reason: GoneReason::Bye,
                });
                self.assign_roles(now);
            }
            ControlFrame::Latency(report) => {
                self.events.push_back(HostEvent::Latency {
                    client: peer.info.id,
                    report,
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
            | ControlFrame::HostEncoder(_)
            | ControlFrame::FramePose { .. }
            | ControlFrame::Role { .. }
            | ControlFrame::PathChallenge { .. } => {}
        }
    }

    /// Acts on a viewer's health verdict.
    fn on_verdict(&mut self, now: Micros, i: usize, verdict: Verdict) {
        let id = self.peers[i].info.id;
        match verdict {
            Verdict::Keep => {}
            Verdict::Pause => {
                self.stats.viewers_paused += 1;
                self.events.push_back(HostEvent::ViewerPaused {
                    client: id,
                    paused: true,
                });
                self.peers[i].tell_role(now, &mut self.stats);
            }
            Verdict::Resume => {
                self.events.push_back(HostEvent::ViewerPaused {
                    client: id,
                    paused: false,
                });
                self.peers[i].tell_role(now, &mut self.stats);
                // Its decoder needs a fresh start: the next keyframe (within the cooldown).
                self.peers[i].awaiting_entry = true;
                self.request_entry_point(now);
            }
            Verdict::Drop => {
                self.stats.viewers_dropped += 1;
                self.end_peer(now, i, ByeReason::TooSlow, GoneReason::TooSlow);
            }
        }
    }

    /// One peer's timers: keep-alive, the unacknowledged Role, pings, path probes.
    pub(super) fn peer_timers(&mut self, now: Micros, i: usize) {
        let keepalive_us = self.cfg.params.keepalive_ms as u64 * 1000;
        let peer = &mut self.peers[i];
        if peer.role_told.is_some() && !peer.role_acked && now >= peer.role_sent_us + ROLE_REPEAT_US
        {
            self.peers[i].tell_role_again(now, &mut self.stats);
        }
        let peer = &mut self.peers[i];
        if now >= peer.last_send_us + keepalive_us && peer.pending.is_empty() {
            // An empty control datagram.
            peer.last_send_us = now;
            if let Some(out) = peer.seal_control(&[], HEADER_LEN + TAG_LEN) {
                peer.paths.schedule(Class::Control, now, &mut self.sched);
                fan_out(peer, &self.sched, &mut self.stats, &mut self.transmits, out);
            }
        }
        self.probe_paths(now, i);
    }

    /// Multipath: PathChallenges due on each path (each in its own datagram, to that path
    /// only), and path liveness. Adaptive bitrate: the periodic ping.
    fn probe_paths(&mut self, now: Micros, i: usize) {
        let peer = &mut self.peers[i];
        if peer.rate.is_some() && !peer.silent && now >= peer.next_ping_us {
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
            let Some(out) = peer.seal_control(
                &[ControlFrame::PathChallenge { token }],
                HEADER_LEN + 11 + TAG_LEN,
            ) else {
                continue;
            };
            let Some(p) = peer.paths.find(addr) else {
                continue;
            };
            self.stats.path_challenges_sent += 1;
            fan_out(peer, &[p], &mut self.stats, &mut self.control_out, out);
        }
    }

    /// Builds the control datagrams of every client with frames pending; clients told Bye
    /// (the host closing) leave.
    pub(super) fn build_controls(&mut self, now: Micros) {
        let mut i = 0;
        let mut closed = false;
        while i < self.peers.len() {
            if self.build_controls_of(now, i) {
                self.remove_peer(i);
                closed = true;
            } else {
                i += 1;
            }
        }
        if closed {
            self.assign_roles(now);
        }
    }

    /// Builds every pending control frame of peer `i` into protected datagrams (a copy per
    /// scheduled path) on `control_out`; true if a Bye went out.
    pub(super) fn build_controls_of(&mut self, now: Micros, i: usize) -> bool {
        let max = self.cfg.params.max_datagram as usize;
        let peer = &mut self.peers[i];
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
        let mut closing = false;
        while !peer.pending.is_empty() {
            let mut frames = Vec::new();
            let mut len = HEADER_LEN + TAG_LEN;
            while let Some(f) = peer.pending.first() {
                let l = f.encoded_len();
                if !frames.is_empty() && len + l > max {
                    break;
                }
                let mut f = peer.pending.remove(0);
                if let ControlFrame::Pong { sent_us, .. } | ControlFrame::Ping { sent_us, .. } =
                    &mut f
                {
                    *sent_us = now;
                }
                closing |= matches!(f, ControlFrame::Bye { .. });
                len += l;
                frames.push(f);
            }
            let Some(out) = peer.seal_control(&frames, len) else {
                continue;
            };
            peer.last_send_us = now;
            peer.paths.schedule(Class::Control, now, &mut self.sched);
            fan_out(
                peer,
                &self.sched,
                &mut self.stats,
                &mut self.control_out,
                out,
            );
        }
        closing
    }
}
