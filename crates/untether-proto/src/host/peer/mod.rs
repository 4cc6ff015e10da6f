//! One client's session on the host: its keys and packet numbers, paths, input channels,
//! feedback, bitrate and health, and what it is sent; its role as told, its timers. The
//! protected datagrams it sends are opened and their control frames handled in [`control`];
//! what leaves for it is sealed and counted in [`out`]. The session drives a peer through
//! these methods and acts on what they return ([`Action`]).

mod control;
mod out;
mod peers;

use std::collections::VecDeque;

use super::health::ViewerHealth;
use super::{ClientInfo, ClientStatus, HostConfig, HostStats};
use super::{StreamState, HANDSHAKE_REPEAT_ANSWER_US, RATE_PING_INTERVAL_US};
use crate::crypto::{Protection, TAG_LEN};
use crate::fec::LossEstimator;

use crate::paths::{Class, PathSet};
use crate::rate::RateController;
use crate::reliable::ReliableReceiver;
use crate::state::{StateKey, StateReceiver, StateSender, StateValue};
use crate::window::PacketWindow;
use crate::wire::{self, role_flags, ClientRole, ControlFrame, Feedback, HEADER_LEN};
use crate::{Micros, Transmit};

pub(super) use control::Action;
pub(super) use peers::Peers;

/// How often an unconfirmed Accept is repeated ahead of video frames.
pub(super) const ACCEPT_REPEAT_US: Micros = 15_000;
/// For how long after the session starts.
pub(super) const ACCEPT_REPEAT_FOR_US: Micros = 2_000_000;
/// An unacknowledged Role is sent again after this long.
pub(super) const ROLE_REPEAT_US: Micros = 200_000;

/// Per-client counters.
#[derive(Clone, Copy, Debug, Default)]
struct PeerCounters {
    frames_sent: u64,
    frames_skipped: u64,
    bytes_sent: u64,
    datagrams_sent: u64,
    parity_shards_sent: u64,
    shards_retransmitted: u64,
    keyframe_requests: u64,
    inputs_received: u64,
    inputs_dropped: u64,
}

pub(super) struct Peer {
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
    /// What its Accept said: the stream's parameters, with the codec it was given and the
    /// stream's refresh period.
    params: wire::SessionParams,
    /// Control frames waiting for the next control datagram.
    pending: Vec<ControlFrame>,
    feedback: Option<Feedback>,
    /// Downstream loss, from the client's Feedback (drives its adaptive FEC).
    loss: LossEstimator,
    /// The client's addresses (path 0: the handshake's) and the scheduler.
    paths: PathSet,
    /// Adaptive bitrate, when on (only the controller's sets the encoder's bitrate; a
    /// viewer's gives its queueing delay).
    rate: Option<RateController>,
    next_ping_us: Micros,
    next_ping_id: u32,
    /// Whether a protected datagram from the client has arrived since the Accept (so it has
    /// the Accept). Until then the Accept rides again ahead of each video frame, at most every
    /// [`ACCEPT_REPEAT_US`], for [`ACCEPT_REPEAT_FOR_US`]: a lost Accept otherwise costs the
    /// client's 200 ms HelloFinish repeat, a dozen frames it cannot read.
    confirmed: bool,
    accept_sent_us: Micros,
    role: ClientRole,
    input_granted: bool,
    /// The Role frame as last told, until acknowledged.
    told: RoleTold,
    /// Joined, and not yet sent a frame it can start decoding on.
    awaiting_entry: bool,
    /// Nothing heard from it for `silence_us`: sent nothing until heard again.
    silent: bool,
    health: ViewerHealth,
    /// The host's (captured, encoded, dropped) counts before its first frame.
    timing_base: Option<(u32, u32, u32)>,
    counters: PeerCounters,
}

impl Peer {
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
            told: RoleTold::new(now),
            awaiting_entry: true,
            silent: false,
            health: ViewerHealth::new(cfg.health),
            timing_base: None,
            counters: PeerCounters::default(),
        }
    }

    /// The controller's input applies, and a viewer's with a grant.
    fn input_applies(&self) -> bool {
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
        let role = self.told.repeat_at().unwrap_or(Micros::MAX);
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
    pub(in crate::host) fn info(&self) -> &ClientInfo {
        &self.info
    }

    pub(in crate::host) fn role(&self) -> ClientRole {
        self.role
    }

    /// Joined (or resumed), and not yet sent a frame it can start decoding on.
    pub(in crate::host) fn awaiting_entry(&self) -> bool {
        self.awaiting_entry
    }

    /// Its adaptive bitrate's target (None: adaptive bitrate off).
    pub(in crate::host) fn target_kbps(&self) -> Option<u32> {
        self.rate.as_ref().map(RateController::target_kbps)
    }

    /// Queues a control frame for its next control datagram.
    pub(in crate::host) fn queue(&mut self, frame: ControlFrame) {
        self.pending.push(frame);
    }

    /// Names the host's encoder to it (once: information, not state; a newer name replaces
    /// one not yet sent).
    pub(in crate::host) fn tell_host_encoder(&mut self, e: &wire::HostEncoder) {
        self.pending
            .retain(|f| !matches!(f, ControlFrame::HostEncoder(_)));
        self.pending.push(ControlFrame::HostEncoder(e.clone()));
    }

    /// Queues a frame's timing report, its counts made relative to the first frame it was
    /// sent.
    pub(in crate::host) fn queue_frame_timing(&mut self, timing: wire::FrameTiming) {
        let base = *self.timing_base.get_or_insert((
            timing.captured.saturating_sub(1),
            timing.encoded.saturating_sub(1),
            timing.dropped,
        ));
        self.pending
            .push(ControlFrame::FrameTiming(wire::FrameTiming {
                captured: timing.captured.saturating_sub(base.0),
                encoded: timing.encoded.saturating_sub(base.1),
                dropped: timing.dropped.saturating_sub(base.2),
                ..timing
            }));
    }

    /// Key updates of both directions so far.
    pub(in crate::host) fn key_updates(&self) -> u64 {
        self.protection.sealer.key_updates + self.protection.opener.key_updates
    }

    /// Its latest-wins state (pointer, head pose, …).
    pub(in crate::host) fn state(&self) -> &StateReceiver {
        &self.state
    }

    /// Publishes a key of host → client state on its channel; false when its table is full.
    pub(in crate::host) fn publish(
        &mut self,
        now: Micros,
        key: StateKey,
        value: StateValue,
    ) -> bool {
        self.state_tx.set(now, key, value)
    }

    /// The counters of its host → client state channel.
    pub(in crate::host) fn state_out_stats(&self) -> crate::state::StateSenderStats {
        self.state_tx.stats()
    }

    /// How stale its host → client state is.
    pub(in crate::host) fn state_staleness(&self, now: Micros) -> crate::state::Staleness {
        self.state_tx.staleness(now)
    }

    /// Per-path counters and state of its paths.
    pub(in crate::host) fn path_stats(&self) -> Vec<crate::paths::PathStats> {
        self.paths.stats()
    }

    /// Fuzzing only: as if the client had the Accept and its first picture.
    #[cfg(fuzzing)]
    pub(in crate::host) fn fuzz_confirm(&mut self) {
        self.confirmed = true;
        self.awaiting_entry = false;
        self.pending.clear();
    }

    /// Whether it is sent a frame ([`takes`](Self::takes)); a whole frame (its first slice)
    /// it is not sent is counted as skipped.
    pub(in crate::host) fn offered(
        &mut self,
        keyframe: bool,
        entry: bool,
        first_slice: bool,
    ) -> bool {
        if self.takes(keyframe, entry) {
            return true;
        }
        if first_slice {
            self.counters.frames_skipped += 1;
        }
        false
    }

    /// Its downstream loss, from its Feedback (drives its parity).
    pub(in crate::host) fn loss(&self) -> Option<f64> {
        self.loss.loss()
    }

    /// Ahead of a frame: an Accept the client has not confirmed is queued again, at most every
    /// [`ACCEPT_REPEAT_US`] for [`ACCEPT_REPEAT_FOR_US`]; true if it was.
    pub(in crate::host) fn accept_again(&mut self, now: Micros, beside: &BesideAccept) -> bool {
        if self.confirmed
            || now < self.accept_sent_us + ACCEPT_REPEAT_US
            || now >= self.info.connected_us + ACCEPT_REPEAT_FOR_US
        {
            return false;
        }
        queue_accept(&mut self.pending, self.params, beside);
        self.accept_sent_us = now;
        true
    }

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
        if self.told.tell(self.role, flags) {
            self.tell_role_again(now, stats);
        }
    }

    /// The client acknowledged Role frame `version` (an older one's acknowledgement is not
    /// this one's).
    fn roles_acked(&mut self, version: u16) {
        self.told.ack(version);
    }

    /// A viewer resumed (its health allows every frame again): its decoder needs a fresh
    /// start, from the next entry point.
    pub(in crate::host) fn resume(&mut self) {
        self.awaiting_entry = true;
    }

    /// Whether it falls silent now (nothing heard for `silence_after_us`): then it is sent
    /// nothing until heard again.
    pub(in crate::host) fn fall_silent(&mut self, now: Micros, cfg: &HostConfig) -> bool {
        if self.silence_deadline(cfg).is_some_and(|d| now >= d) {
            self.silent = true;
            return true;
        }
        false
    }

    /// Whether nothing was heard from it for the idle timeout (its session is over).
    pub(in crate::host) fn idle(&self, now: Micros, idle_us: Micros) -> bool {
        now >= self.last_recv_us + idle_us
    }

    /// Its timers: the unacknowledged Role again, the keep-alive (an empty control datagram,
    /// with the shards), the periodic ping (adaptive bitrate), path challenges (each in its
    /// own datagram, to that path only, on `control_out`) and path liveness.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::host) fn handle_timeout(
        &mut self,
        now: Micros,
        keepalive_us: Micros,
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
        transmits: &mut VecDeque<Transmit>,
        control_out: &mut VecDeque<Transmit>,
    ) {
        if self.told.repeat_at().is_some_and(|t| now >= t) {
            self.tell_role_again(now, stats);
        }
        if now >= self.last_send_us + keepalive_us && self.pending.is_empty() {
            // An empty control datagram.
            self.last_send_us = now;
            if let Some(out) = self.seal_control(&[], HEADER_LEN + TAG_LEN) {
                self.paths.schedule(Class::Control, now, sched);
                self.fan_out(sched, stats, transmits, out);
            }
        }
        if self.rate.is_some() && !self.silent && now >= self.next_ping_us {
            self.next_ping_us = now + RATE_PING_INTERVAL_US;
            self.next_ping_id = self.next_ping_id.wrapping_add(1);
            // Stamped when the datagram is built.
            self.pending.push(ControlFrame::Ping {
                id: self.next_ping_id,
                sent_us: now,
            });
        }
        self.paths.update(now);
        let mut due = Vec::new();
        self.paths.due_challenges(now, &mut due);
        for (addr, token) in due {
            let Some(out) = self.seal_control(
                &[ControlFrame::PathChallenge { token }],
                HEADER_LEN + 11 + TAG_LEN,
            ) else {
                continue;
            };
            let Some(p) = self.paths.find(addr) else {
                continue;
            };
            stats.path_challenges_sent += 1;
            self.fan_out(&[p], stats, control_out, out);
        }
    }

    /// Queues its current Role frame (again: it was not acknowledged).
    fn tell_role_again(&mut self, now: Micros, stats: &mut HostStats) {
        let Some(frame) = self.told.frame(now) else {
            return;
        };
        self.pending
            .retain(|f| !matches!(f, ControlFrame::Role { .. }));
        self.pending.push(frame);
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

/// The role (and flags) last told a client, its version, and whether the client
/// acknowledged it: a Role frame is repeated every [`ROLE_REPEAT_US`] until it is.
struct RoleTold {
    version: u16,
    told: Option<(ClientRole, u8)>,
    acked: bool,
    sent_us: Micros,
}

impl RoleTold {
    fn new(now: Micros) -> RoleTold {
        RoleTold {
            version: 0,
            told: None,
            acked: false,
            sent_us: now,
        }
    }

    /// Records `role` and `flags` as to be told, under a new version; false if that is what
    /// was last told (nothing to send).
    fn tell(&mut self, role: ClientRole, flags: u8) -> bool {
        if self.told == Some((role, flags)) {
            return false;
        }
        self.version = self.version.wrapping_add(1);
        self.told = Some((role, flags));
        self.acked = false;
        true
    }

    /// The Role frame to send now (None: nothing told yet).
    fn frame(&mut self, now: Micros) -> Option<ControlFrame> {
        let (role, flags) = self.told?;
        self.sent_us = now;
        Some(ControlFrame::Role {
            role,
            flags,
            version: self.version,
        })
    }

    /// The client acknowledged `version` (an older one's acknowledgement is not this one's).
    fn ack(&mut self, version: u16) {
        if version == self.version {
            self.acked = true;
        }
    }

    /// When the frame is due again, while it is not acknowledged.
    fn repeat_at(&self) -> Option<Micros> {
        (self.told.is_some() && !self.acked).then_some(self.sent_us + ROLE_REPEAT_US)
    }
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
