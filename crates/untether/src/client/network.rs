//! The client's network driver: the one thread that owns the [`ClientSession`] and its sockets
//! (one per path, each connected to its host address).
//!
//! Other threads hand it [`ClientCommand`]s: input from the window, the application and the
//! registered devices, the decoder's timings and failures, the goodbye. What the session
//! reports goes out as events: complete frames to the decode thread, audio into the playout
//! buffer, the numbers of sent input events to the presenter (which times their response), the
//! connection state ([`NetStatus`], published when it changes) and the overlay's counters to
//! [`ClientShared`], each host frame timing to the presenter. What the driver measures it keeps
//! in its own [`NetRecord`], handed back when it ends ([`ClientNet::into_record`]).

use std::net::SocketAddr;
use std::sync::mpsc::{Sender, SyncSender};
use std::sync::{Arc, Mutex};

use untether_media::audio::Playout;
use untether_proto::{
    ClientConfig, ClientSession, FrameTiming, InputEvent, Micros, Route, StateKey, StateValue,
};

use super::decode::Piece;
use super::input::state_input;
use super::run::view::{Haptics, NetStatus, RoleView};
use super::run::{InputCounts, NetRecord};
use super::trust::KnownHosts;
use super::{ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::{Endpoint, Outgoing, Via};
use crate::link::{ClientAction, ClientLink};

mod events;

/// How long after an ICMP port-unreachable on a live session no authenticated datagram may
/// arrive before the host counts as gone (a forged refusal, followed by the host's next
/// datagram, is counted and ignored).
pub(crate) const REFUSED_GRACE_US: Micros = 600_000;

/// The first retry after the host went away, doubled per attempt up to [`RETRY_MAX_US`].
pub(crate) const RETRY_FIRST_US: Micros = 100_000;
/// The longest wait between reconnection attempts (short: a restarted host should see the
/// client again well within a second).
pub(crate) const RETRY_MAX_US: Micros = 400_000;

/// The wait before reconnection attempt `attempt` (0, 1, …).
pub(crate) fn retry_delay_us(attempt: u32) -> Micros {
    RETRY_FIRST_US
        .saturating_mul(1 << attempt.min(16))
        .min(RETRY_MAX_US)
}

/// How often a client waiting for the host's approval tries again (an approval on the host
/// lets it in within this and the host's re-reading of its allowlist).
pub(crate) const APPROVAL_RETRY_US: Micros = 250_000;

/// The client is between sessions: the host went away (or has not approved it yet) and it
/// tries again.
pub(super) struct Reconnect {
    /// When the host was lost (or first refused this client as not paired).
    pub lost_us: Micros,
    pub attempt: u32,
    /// When the next attempt starts (None: an attempt is under way).
    pub next_try_us: Option<Micros>,
    /// Waiting for the host's approval, not for the host.
    pub approval: bool,
}

/// How long the client waits instead of giving up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Patience {
    /// Treat the host's goodbye as the normal end of the stream (a pipeline whose input ended).
    pub end_on_host_bye: bool,
    /// Wait for the host's approval when it refuses this client as not paired.
    pub wait_for_approval: bool,
    /// Wait for a host that shut down to come back.
    pub wait_for_host: bool,
}

/// Where the driver's output goes besides the sockets.
pub(crate) struct NetOutputs {
    /// Complete frames (or slices) for the decode thread, in decode order, with the session
    /// they came from and its codec (None, `--no-decode`: frames are counted and dropped here).
    pub frames: Option<Sender<super::decode::ToDecode>>,
    /// (sequence number, send time) of each reliable window/probe event, for the presenter.
    pub sent_inputs: Sender<(u32, Micros)>,
    /// The host's timing of each frame, with its session, for the presenter's overlay (dropped
    /// when the presenter falls behind).
    pub timings: SyncSender<(u32, FrameTiming)>,
    /// The audio playout buffer, when audio plays.
    pub playout: Option<Arc<Mutex<Playout>>>,
}

/// Where an input event goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputKind {
    /// From the window or the application: continuous values (pointer position, head pose) on
    /// the latest-wins state channel, the rest reliable; reliable ones are reported back to the
    /// presenter with their sequence number.
    Window,
    /// A synthetic probe: reliable, reported back.
    Probe,
    /// From a registered input device: reliable, counted as device events.
    Device,
}

/// What other threads hand the client's network driver.
pub(crate) enum ClientCommand {
    Input(InputKind, Vec<InputEvent>),
    /// A key of continuous state (the pose source's head pose).
    State(StateKey, StateValue),
    /// How long a frame took to decode, µs (for the host's quality feedback).
    DecodeTime(u64),
    /// The shown frames' latency over the last interval (for the host's dashboard).
    Latency(untether_proto::LatencyReport),
    /// A frame failed to decode: ask for a keyframe.
    DecodeFailed(u32),
    /// The client is ending: say goodbye.
    Close,
}

/// The client's network side, run by [`crate::driver::run`].
pub(crate) struct ClientNet {
    session: ClientSession,
    shared: Arc<ClientShared>,
    known_hosts: Option<KnownHosts>,
    out: NetOutputs,
    /// What the driver measured.
    record: NetRecord,
    /// The role the host gave this client last.
    role: Option<RoleView>,
    /// The connection state last published.
    published: NetStatus,
    /// The host's rumble last published.
    haptics: Haptics,
    /// The current session's codec.
    codec: untether_media::codec::Codec,
    patience: Patience,
    done: bool,
    /// The session settings, to start a new session after the host went away.
    cfg: ClientConfig,
    /// The number of the current session (0: the first; +1 per reconnection).
    session_number: u32,
    connected_once: bool,
    reconnect: Option<Reconnect>,
    /// The host's last "not paired" refusal while this client waits for its approval (the
    /// run's error if it ends still waiting).
    approval_refusal: Option<String>,
    /// An ICMP refusal arrived on a live session at this time, with no authenticated datagram
    /// since.
    refused_since: Option<Micros>,
    /// When the counters for the overlay are next published.
    next_live_us: Micros,
    /// The raw layer-2 transport, when this client has a raw socket.
    pub link: Option<ClientLink>,
}

impl ClientNet {
    pub fn new(
        cfg: ClientConfig,
        shared: Arc<ClientShared>,
        record: NetRecord,
        known_hosts: Option<KnownHosts>,
        out: NetOutputs,
        patience: Patience,
    ) -> ClientNet {
        ClientNet {
            session: ClientSession::new(cfg.clone(), record.started_us()),
            shared,
            known_hosts,
            out,
            record,
            role: None,
            published: NetStatus::default(),
            haptics: Haptics::default(),
            codec: untether_media::codec::Codec::H264,
            patience,
            done: false,
            cfg,
            session_number: 0,
            connected_once: false,
            reconnect: None,
            approval_refusal: None,
            next_live_us: 0,
            refused_since: None,
            link: None,
        }
    }

    /// What the driver measured, with the last session's figures, the link it ran on (else
    /// `note`'s, else UDP) and the CPU time of the calling thread (the driver's, at its end).
    pub fn into_record(
        mut self,
        synchronized: bool,
        note: Option<crate::link::LinkReport>,
    ) -> NetRecord {
        self.record.close(&self.session, now_us(), synchronized);
        let mut link = self
            .link
            .map(|l| l.report)
            .or(note)
            .unwrap_or_else(crate::link::LinkReport::udp);
        link.net_thread_cpu_ms = crate::link::thread_cpu_us() as f64 / 1000.0;
        self.record.set_link(link);
        self.record
    }

    /// Publishes the connection state when it changed.
    fn publish_status(&mut self) {
        let now = NetStatus {
            connected: self.session.is_connected(),
            reconnecting: self.reconnect.as_ref().is_some_and(|r| !r.approval),
            awaiting_approval: self.reconnect.as_ref().is_some_and(|r| r.approval),
            role: self.role,
        };
        if now != self.published {
            self.published = now;
            self.shared.status.publish(now);
        }
    }

    /// The host went away (silent, or its port closed): keep the picture, and try again.
    fn lost(&mut self, now: Micros, why: &str) {
        if let Some(l) = self.link.as_mut() {
            l.on_session_end();
        }
        if self.reconnect.is_none() {
            log::warn!(
                "client: host {} {why}; holding the last picture and reconnecting (Ctrl-C ends)",
                self.shared.host
            );
            self.reconnect = Some(Reconnect {
                lost_us: now,
                attempt: 0,
                next_try_us: Some(now + retry_delay_us(0)),
                approval: false,
            });
            self.record.lost(now);
        } else if let Some(r) = self.reconnect.as_mut() {
            // This attempt failed: the next after a backoff.
            r.attempt += 1;
            r.next_try_us = Some(
                now + if r.approval {
                    APPROVAL_RETRY_US
                } else {
                    retry_delay_us(r.attempt)
                },
            );
        }
        self.refused_since = None;
    }

    /// Starts the next session (a new handshake with the host whose key this run pinned).
    fn try_again(&mut self, now: Micros) {
        let mut cfg = self.cfg.clone();
        cfg.nonce = cfg.nonce.wrapping_add(
            0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(self.session_number) + 1),
        );
        self.record.session_ended(&self.session);
        self.session = ClientSession::new(cfg, now);
        self.session_number += 1;
        if let Some(r) = self.reconnect.as_mut().filter(|r| !r.approval) {
            r.next_try_us = None;
            // Said once when the host was lost and once when it is back (with the count):
            // each attempt in between only at debug level (they come every 0.4 s).
            log::debug!(
                "client: reconnecting to {} (attempt {})",
                self.shared.host,
                r.attempt + 1
            );
        } else if let Some(r) = self.reconnect.as_mut() {
            r.next_try_us = None;
        }
    }

    /// Hands a frame or slice to the decode thread (its end of the channel gone: done).
    fn hand_to_decoder(&mut self, piece: Piece) {
        let Some(tx) = &self.out.frames else {
            // `--no-decode`: a frame is counted when it is complete (a sliced one at its last
            // slice).
            let whole = match &piece {
                Piece::Frame(_) => true,
                Piece::Slice(f) => f.slice.index + 1 >= f.slice.count,
                Piece::SliceLost { .. } | Piece::Open { .. } => false,
            };
            if whole {
                self.record.undecoded();
            }
            return;
        };
        let f = super::decode::ToDecode {
            session: self.session_number,
            codec: self.codec,
            piece,
        };
        if tx.send(f).is_err() {
            self.done = true;
        }
    }

    fn finish(&mut self, error: Option<ClientError>) {
        self.shared.finish(error);
        self.done = true;
    }

    fn send_inputs(&mut self, now: Micros, kind: InputKind, events: Vec<InputEvent>) {
        if !self.session.is_connected() {
            // Nothing to send to yet; state (axes, pointer) will be current again at the next
            // report.
            return;
        }
        let mut n = InputCounts::default();
        for ev in events {
            if kind == InputKind::Window {
                if let (Some(m), InputEvent::PointerMotion { dx, dy, .. }) =
                    (&self.shared.mouse_look, &ev)
                {
                    // Mouse-look is the head pose source: the motion turns the head (sent by
                    // the pose thread), not the pointer.
                    m.feed(*dx, *dy);
                    continue;
                }
                // Continuous state goes on the latest-wins channel: only the newest value
                // matters, and a lost one is never resent once a newer one exists.
                if let Some((key, value)) = state_input(&ev) {
                    if self.session.send_state(now, key, value) {
                        n.state += 1;
                    }
                    continue;
                }
            }
            match self.session.send_input(now, ev) {
                Some(seq) => {
                    n.sent += 1;
                    if kind != InputKind::Device {
                        let _ = self.out.sent_inputs.send((seq, now));
                    }
                }
                None => n.refused += 1,
            }
        }
        self.record.inputs(n, kind == InputKind::Device);
    }
}

impl Endpoint for ClientNet {
    type Command = ClientCommand;

    fn poll_timeout(&self) -> Option<Micros> {
        let retry = self.reconnect.as_ref().and_then(|r| r.next_try_us);
        let refused = self.refused_since.map(|t| t + REFUSED_GRACE_US);
        let link = self.link.as_ref().and_then(ClientLink::poll_timeout);
        [self.session.poll_timeout(), retry, refused, link]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_datagram(&mut self, now: Micros, socket: usize, _from: SocketAddr, data: &[u8]) {
        self.session.handle_datagram_on(now, socket, data);
    }

    fn handle_raw(&mut self, now: Micros, src: untether_net::MacAddr, data: &[u8]) {
        // Frames from the host's MAC only (learned from its sealed LinkAddress); they carry
        // the main path's datagrams, and only one the session opens confirms the raw link.
        if self.link.as_mut().and_then(|l| l.on_raw(src)).is_some() {
            let authentic = self.session.last_authentic_us();
            self.session.handle_datagram_on(now, 0, data);
            let opened = self.session.last_authentic_us() != authentic;
            if let (true, Some(l)) = (opened, self.link.as_mut()) {
                l.on_authentic_raw();
            }
        }
    }

    fn handle_refused(&mut self, now: Micros, socket: usize) {
        if socket > 0 {
            // Another path's host address refusing is that path's problem only.
            return;
        }
        let s = self.shared.clone();
        self.record.refused();
        if let Some(r) = &self.reconnect {
            // The host is not back yet: this attempt failed, the next after a backoff. The
            // refusals of its repeated Hellos (and any left over from before) end no more
            // attempts than the one under way.
            if r.next_try_us.is_none() {
                self.lost(now, "refused");
            }
            return;
        }
        if self.session.is_connected() {
            // Anyone on the path can forge an ICMP port-unreachable: the session ends only if
            // no authenticated datagram follows within the grace period.
            self.refused_since.get_or_insert(now);
            return;
        }
        // Before the session starts, a refusal means nobody listens there.
        self.finish(Some(ClientError::Refused {
            host: s.host,
            port: s.host.port(),
        }));
    }

    fn handle_timeout(&mut self, now: Micros) {
        if let Some(since) = self.refused_since {
            if self
                .session
                .last_authentic_us()
                .is_some_and(|last| last > since)
            {
                // The host spoke after the refusal: it was forged (or stale); counted only.
                self.refused_since = None;
            } else if now >= since + REFUSED_GRACE_US {
                self.lost(now, "closed its port (the host process stopped)");
            }
        }
        if self
            .reconnect
            .as_ref()
            .and_then(|r| r.next_try_us)
            .is_some_and(|t| t <= now)
        {
            self.try_again(now);
        }
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
        }
        let action = self
            .link
            .as_mut()
            .filter(|l| l.poll_timeout().is_some_and(|t| t <= now))
            .and_then(|l| l.handle_timeout(now));
        match action {
            Some(ClientAction::Offer { ethertype, mac }) => {
                self.session.send_link_address(now, ethertype, mac)
            }
            Some(ClientAction::StayOnUdp(line)) => log::warn!("client: {line}"),
            None => {}
        }
    }

    fn handle_command(&mut self, now: Micros, command: ClientCommand) {
        match command {
            ClientCommand::Input(kind, events) => self.send_inputs(now, kind, events),
            ClientCommand::State(key, value) => {
                if self.session.is_connected() && self.session.send_state(now, key, value) {
                    self.record.state_update();
                }
            }
            ClientCommand::DecodeTime(us) => self.session.note_decode_time(us),
            ClientCommand::Latency(r) => self.session.note_latency(r),
            ClientCommand::DecodeFailed(frame_number) => {
                self.session.decode_failed(now, frame_number)
            }
            ClientCommand::Close => {
                if self.session.is_connected() {
                    self.session.close(now);
                }
                let waiting = self.reconnect.as_ref().is_some_and(|r| r.approval);
                if let (true, Some(message)) = (waiting, self.approval_refusal.take()) {
                    // Ended (Ctrl-C, --duration) still waiting: not paired is why.
                    self.shared.finish(Some(ClientError::Rejected {
                        host: self.shared.host,
                        reason: untether_proto::RejectReason::PendingApproval,
                        message: format!("{message} (stopped waiting for the approval)"),
                    }));
                }
                self.done = true;
            }
        }
    }

    fn handle_events(&mut self, _now: Micros) {
        while let Some(ev) = self.session.poll_event() {
            self.on_event(ev);
            if self.done {
                break;
            }
        }
        if let Some(v) = &self.shared.host_state {
            v.update(self.session.state_received());
        }
        let haptics = Haptics::of(&self.session);
        if haptics != self.haptics {
            self.haptics = haptics;
            self.shared.haptics.publish(haptics);
        }
        self.publish_status();
        let now = now_us();
        if now >= self.next_live_us {
            self.next_live_us = now + super::live::PUBLISH_EVERY_US;
            let snapshot = super::live::NetSnapshot {
                at_us: now,
                stats: self.session.stats(),
                srtt_us: self.session.srtt_us(),
                clock_offset_us: self.session.clock().map_or(0, |c| c.offset_us),
                paths: self.shared.paths,
            };
            self.shared.live.publish(Some(snapshot));
        }
    }

    fn poll_transmit(&mut self, now: Micros) -> Option<Outgoing> {
        let (route, payload) = self.session.poll_transmit_routed(now)?;
        let via = match route {
            Route::Primary => Via::Socket(0),
            Route::Path(i) => Via::Socket(i as usize),
            Route::All => Via::All,
        };
        // ECONNREFUSED from an earlier datagram can surface on send too; the receive path
        // reports it.
        let out = Outgoing {
            via,
            dst: None,
            payload,
        };
        Some(match self.link.as_mut() {
            Some(l) => l.route(out),
            None => out,
        })
    }

    fn send_failed(&mut self, _dst: Option<SocketAddr>, _error: std::io::Error) {}

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests;
