//! The host's network driver: the one thread that owns the [`HostSession`] (every client's
//! session) and its socket.
//!
//! Other threads hand it [`HostCommand`]s: an encoded frame (packetized once, sealed for every
//! client and sent here, each client's share in paced batches with `network.pacing`), audio
//! packets, a goodbye, or a query. What the session reports goes out as events: keyframe
//! requests and bitrate changes to the encoder stage ([`EncoderEvent`]), the controller's (and
//! granted viewers') input to the [`InputSink`], the client count and controller epoch to
//! [`Link`](super::shared::Link), notes and the client roster to the summary, the connected
//! clients to the state directory.
//!
//! Control replies (acks, pongs, keep-alives) never wait behind a paced frame: they leave
//! between its batches, with newer packet numbers, which the client's packet window accepts
//! out of order.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use untether_proto::state::keys as state_keys;
use untether_proto::{
    ByeReason, ClientId, ClientRole, HostEvent, HostSession, InputRecord, Micros, PathStats,
};

use super::clients::{find_connected, ClientSummary, Roster};
use super::commands::HostCommand;
use super::encode::EncoderEvent;
use super::error::HostError;
use super::gamepad::Gamepads;
use super::input::InputSink;
use super::outbox::Outbox;
use super::pairing::Pairing;
use super::refusals::RefusalNotes;
use super::shared::{lock, HostShared};
use super::state_input::{StateApplied, STATE_SEQ};
use crate::driver::{Endpoint, Outgoing, Via};
use crate::link::HostLink;
use crate::pacing::Pacing;

/// How often the clients' figures (and the controller's paths) are copied for the summary.
const ROSTER_EVERY_US: Micros = 200_000;

/// The host's network side, run by [`crate::driver::run`].
pub(crate) struct HostNet {
    pub session: HostSession,
    pub pairing: Pairing,
    pub(super) shared: Arc<HostShared>,
    sink: InputSink,
    /// Per client: the latest-wins state (pointer, head pose) already turned into input.
    pub(super) state: HashMap<ClientId, StateApplied>,
    /// The controller's game controllers (state for the API, virtual pads through uinput).
    pub gamepads: Gamepads,
    pub(super) encoder: Sender<EncoderEvent>,
    /// The session's control replies and the frames in flight, paced.
    pub(super) outbox: Outbox,
    pub(super) events: Vec<HostEvent>,
    next_roster_us: Micros,
    /// The controller's paths as last seen (kept after it leaves).
    pub last_paths: Vec<PathStats>,
    /// The adaptive bitrate controller's latest target, kbit/s.
    pub target_kbps: Option<u32>,
    /// The operator's bit rate ceiling (the dashboard), kbit/s: the encoder follows the lower
    /// of it and the controller's target.
    pub bitrate_ceiling: Option<u32>,
    /// The operator's frame rate ceiling (the dashboard): pictures are dropped to it.
    pub fps_ceiling: Option<u32>,
    /// The controller epoch ([`Link`](super::shared::Link)): input is tagged with it.
    epoch: u64,
    /// Every client of this run, for the summary and the report.
    pub roster: Roster,
    /// The connected clients changed: tell the state directory.
    clients_changed: bool,
    /// Refusals told to the operator lately.
    refusals: RefusalNotes,
    /// The raw layer-2 transport: clients' MAC addresses and which of them are on raw.
    pub link: HostLink,
    /// Browsers and the WHIP publication (None: `[webrtc]` is off); their sockets are
    /// [`webrtc::SOCKET`](super::webrtc::SOCKET) and on.
    pub webrtc: Option<Box<super::webrtc::WebRtc>>,
}

impl HostNet {
    pub fn new(
        session: HostSession,
        pairing: Pairing,
        shared: Arc<HostShared>,
        sink: InputSink,
        encoder: Sender<EncoderEvent>,
        pacing: Pacing,
        fps: u32,
    ) -> HostNet {
        let (mut session, mut pairing) = (session, pairing);
        pairing.hold_last_controller(&mut session, crate::clock::now_us());
        HostNet {
            session,
            pairing,
            shared,
            sink,
            state: HashMap::new(),
            gamepads: Gamepads::default(),
            encoder,
            outbox: Outbox::new(pacing, fps),
            events: Vec::new(),
            next_roster_us: 0,
            last_paths: Vec::new(),
            target_kbps: None,
            bitrate_ceiling: None,
            fps_ceiling: None,
            epoch: 0,
            roster: Roster::new(crate::clock::now_us()),
            clients_changed: false,
            refusals: RefusalNotes::default(),
            link: HostLink::udp(untether_proto::LinkDeclineReason::HostUsesUdp, None),
            webrtc: None,
        }
    }

    /// Acts on one event of the session: notes for the operator, the roster, the encoder's
    /// events, input to the sink, roles to the browsers.
    fn on_event(&mut self, now: Micros, controller: Option<ClientId>, ev: HostEvent) {
        match ev {
            HostEvent::ClientConnected {
                client,
                addr,
                name,
                role,
            } => {
                self.roster_refresh();
                self.clients_changed = true;
                let codec = self.session.params().codec;
                self.shared.note(format!(
                    "client {} ({codec}) connected from {addr} as {} ({} of at most {} \
                     connected)",
                    self.who(client),
                    role.name(),
                    self.session.client_count(),
                    self.session.max_clients(),
                ));
                let _ = name;
                // The stream's codec (the first client's choice; the same for the others):
                // a different one opens its encoder, starting with a keyframe.
                let _ = self.encoder.send(EncoderEvent::Codec(codec));
                // The stream's size, frame rate and bit rate (the first client's wants within
                // the host's limits; the limits when it asked nothing).
                let (p, lim) = (*self.session.params(), *self.session.stream_limits());
                let _ = self.encoder.send(EncoderEvent::Shape {
                    size: ((p.width, p.height) != (lim.width, lim.height))
                        .then_some((u32::from(p.width), u32::from(p.height))),
                    fps: (p.fps != lim.fps).then_some(u32::from(p.fps)),
                });
                let _ = self.encoder.send(EncoderEvent::Bitrate(p.bitrate_kbps));
                if role == ClientRole::Controller {
                    self.epoch = self.shared.audience.new_controller();
                    *lock(&self.shared.head_pose) = None;
                }
            }
            HostEvent::StreamGranted {
                client,
                asked,
                granted: g,
                clamped,
                shared,
            } => self.shared.note(super::stream_note::granted_line(
                &self.who(client),
                asked,
                &g,
                self.session.stream_limits(),
                clamped,
                shared,
            )),
            HostEvent::ClientGone {
                client,
                addr,
                reason,
            } => {
                // Its counters as it left (the last refresh may be 200 ms old).
                self.roster.update(&self.session.take_departed());
                self.roster.gone(now, client, reason);
                self.pairing
                    .on_client_gone(client, reason == untether_proto::GoneReason::Bye);
                self.state.remove(&client);
                self.clients_changed = true;
                self.link.forget(addr);
                let why = match reason {
                    untether_proto::GoneReason::TooSlow => {
                        "dropped: its link stayed slower than the stream (told so)".to_string()
                    }
                    r => format!("gone ({r:?})"),
                };
                self.shared.note(format!(
                    "client {} at {addr} {why} ({} connected)",
                    self.who(client),
                    self.session.client_count()
                ));
            }
            HostEvent::RoleChanged {
                client,
                role,
                input_granted,
            } => {
                self.roster_refresh();
                self.clients_changed = true;
                let what = match (role, input_granted) {
                    (ClientRole::Controller, _) => "is now the controller".to_string(),
                    (ClientRole::Viewer, true) => "is a viewer with input granted".into(),
                    (ClientRole::Viewer, false) => "is a viewer (its input is dropped)".into(),
                };
                self.shared
                    .note(format!("client {} {what}", self.who(client)));
                if role == ClientRole::Controller {
                    self.epoch = self.shared.audience.new_controller();
                    // The scene renders for the new controller's head from its next pose.
                    *lock(&self.shared.head_pose) = None;
                }
            }
            HostEvent::ViewerPaused { client, paused } => self.on_viewer_paused(client, paused),
            HostEvent::ClientSilent { client, silent } => {
                self.roster_refresh();
                self.clients_changed = true;
                self.shared.note(if silent {
                    format!(
                        "client {} is silent: nothing heard from it for {} s (killed, or out \
                         of range); it is sent nothing and does not control until heard again",
                        self.who(client),
                        self.session.silence_us() / 1_000_000
                    )
                } else {
                    format!(
                        "client {} is heard again: live from the next keyframe",
                        self.who(client)
                    )
                });
            }
            HostEvent::LinkAddress {
                addr,
                ethertype,
                mac,
            } => {
                let answer = self.link.on_link_address(now, addr, ethertype, mac);
                if matches!(answer, untether_proto::ControlFrame::LinkAddress { .. }) {
                    self.shared.note(format!(
                        "client at {addr} is at {} on layer 2: raw frames from now on",
                        untether_net::MacAddr(mac)
                    ));
                }
                self.session.send_link_frame(now, addr, answer);
            }
            HostEvent::KeyframeRequested => {
                let _ = self.encoder.send(EncoderEvent::Keyframe);
            }
            HostEvent::Input { client, record } => {
                let is_controller = Some(client) == controller;
                self.gamepads.on_event(&record.event);
                self.sink
                    .deliver(&self.shared, self.epoch, is_controller, record)
            }
            HostEvent::Feedback { .. } => {}
            HostEvent::Latency { client, report } => self.roster.latency(now, client, &report),
            HostEvent::ClientRefused {
                addr,
                fingerprint,
                reason,
                message,
            } => {
                if let Some(line) = self
                    .refusals
                    .note(now, addr, &fingerprint, reason, &message)
                {
                    self.shared.note(line);
                }
            }
            HostEvent::BitrateChanged { kbps } => {
                self.target_kbps = Some(kbps);
                let k = self.bitrate_ceiling.map_or(kbps, |c| kbps.min(c));
                let _ = self.encoder.send(EncoderEvent::Bitrate(k));
            }
            // A browser's or the publication's role (RTSP players are always viewers).
            HostEvent::ReceiverRoleChanged { receiver, role, .. } => {
                if let Some(w) = &mut self.webrtc {
                    w.on_role(receiver, role, &self.shared, &mut self.epoch);
                }
            }
        }
    }

    /// A viewer was paused to keyframes (its link cannot carry the stream), or resumed.
    fn on_viewer_paused(&mut self, client: ClientId, paused: bool) {
        self.roster_refresh();
        let figures = self
            .roster
            .get(client)
            .map(|c| {
                format!(
                    "loss {:.0} %, RTT {}",
                    c.loss.unwrap_or(0.0) * 100.0,
                    c.rtt_ms.map_or("?".into(), |r| format!("{r:.0} ms"))
                )
            })
            .unwrap_or_default();
        self.shared.note(if paused {
            format!(
                "viewer {} paused to keyframes: its link cannot carry the stream \
                 ({figures})",
                self.who(client)
            )
        } else {
            format!(
                "viewer {} resumed (from the next keyframe)",
                self.who(client)
            )
        });
    }

    fn dispatch(&mut self, now: Micros) {
        while let Some(e) = self.session.poll_pairing_event() {
            self.pairing.on_event(&self.shared, &mut self.session, e);
        }
        if let Some(w) = &mut self.webrtc {
            // Browsers register with the session's roles and ask its keyframe gate here: what
            // the session decides comes out with its events below.
            w.handle_events(
                now,
                super::webrtc::DriverParts {
                    shared: &self.shared,
                    sink: &mut self.sink,
                    session: &mut self.session,
                    epoch: &mut self.epoch,
                },
            );
        }
        while let Some(ev) = self.session.poll_event() {
            self.events.push(ev);
        }
        if self.session.client_count() > 0 {
            self.state_inputs();
        }
        let controller = self.session.controller();
        for ev in std::mem::take(&mut self.events) {
            self.on_event(now, controller, ev);
        }
        for note in self.gamepads.notes.drain(..) {
            self.shared.note(note);
        }
        let browsers = self.webrtc.as_ref().is_some_and(|w| w.has_viewers());
        self.shared.audience.set_browsers(browsers);
        self.shared
            .audience
            .set_clients(self.session.client_count());
        if std::mem::take(&mut self.clients_changed) {
            self.pairing.write_clients(&self.session);
        }
        if now >= self.next_roster_us {
            self.next_roster_us = now + ROSTER_EVERY_US;
            self.roster_refresh();
            self.name_opened_encoder();
            let paths = self.session.path_stats();
            if !paths.is_empty() {
                for (i, p) in paths.iter().enumerate() {
                    let before = self.last_paths.get(i).map(|o| (o.addr, o.alive));
                    if before.is_some_and(|b| b != (p.addr, p.alive)) || (before.is_none() && i > 0)
                    {
                        self.shared.note(format!(
                            "controller path {i}: {} ({})",
                            p.addr,
                            if p.alive { "alive" } else { "dead" }
                        ));
                    }
                }
                self.last_paths = paths;
            }
        }
    }
}

impl Endpoint for HostNet {
    type Command = HostCommand;

    fn poll_timeout(&self) -> Option<Micros> {
        let frame_due = self.outbox.due();
        [
            self.session.poll_timeout(),
            self.pairing.next_poll(),
            frame_due,
            self.webrtc.as_ref().and_then(|w| w.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_datagram(&mut self, now: Micros, socket: usize, from: SocketAddr, data: &[u8]) {
        if socket >= super::webrtc::SOCKET {
            if let Some(w) = &mut self.webrtc {
                w.handle_datagram(now, socket, from, data);
            }
            return;
        }
        // Only a datagram the session authenticated moves the client's raw link (link.rs).
        let authentic = self.session.datagrams_authentic();
        self.session.handle_datagram(now, from, data);
        if self.session.datagrams_authentic() != authentic {
            self.link.on_authentic(now, from, false);
        }
    }

    fn handle_raw(&mut self, now: Micros, src: untether_net::MacAddr, data: &[u8]) {
        if let Some(from) = self.link.on_raw(src) {
            let authentic = self.session.datagrams_authentic();
            self.session.handle_datagram(now, from, data);
            if self.session.datagrams_authentic() != authentic {
                self.link.on_authentic(now, from, true);
            }
        }
    }

    fn handle_timeout(&mut self, now: Micros) {
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
        }
        if let Some(w) = &mut self.webrtc {
            w.handle_timeout(now);
        }
    }

    fn handle_command(&mut self, now: Micros, command: HostCommand) {
        match command {
            HostCommand::Frame(f) => {
                if let Some(w) = &mut self.webrtc {
                    w.send_frame(&f, &self.shared);
                }
                self.outbox.send_frame(&mut self.session, now, f)
            }
            HostCommand::Slice(s) => self.outbox.send_slice(&mut self.session, now, s),
            HostCommand::SlicesDone(d) => {
                if let (Some(w), Some(data)) = (&mut self.webrtc, &d.whole) {
                    // Browsers take frames whole: the slices put together.
                    w.send_access_unit(data, d.keyframe, d.capture_us, &self.shared);
                }
                self.outbox.slices_done(d)
            }
            HostCommand::Audio(packets) => {
                if let Some(w) = &mut self.webrtc {
                    w.send_audio(&packets);
                }
                for p in &packets {
                    if self.session.send_audio(now, p).is_ok() {
                        self.shared
                            .counters
                            .audio_packets
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            HostCommand::Close => self.session.close(now),
            HostCommand::ReceiverKeyframe(receiver, counts) => {
                counts.record(self.session.receiver_keyframe_request(now, receiver));
            }
            HostCommand::AppKeyframe => {
                // Honoured: the session's KeyframeRequested event asks the encoder.
                self.session.request_keyframe(now);
            }
            HostCommand::Ask(a) => a.answer(self),
            HostCommand::WebRtc(c) => {
                if let Some(w) = &mut self.webrtc {
                    let mut session = super::webrtc::SessionLink {
                        session: &mut self.session,
                        pairing: &mut self.pairing,
                        shared: &self.shared,
                    };
                    w.handle_command(now, c, &self.shared, &mut session);
                }
            }
        }
    }

    fn handle_events(&mut self, now: Micros) {
        self.pairing.poll(&mut self.session, now);
        self.dispatch(now);
    }

    fn handle_stop(&mut self, now: Micros) {
        if let Some(w) = &mut self.webrtc {
            w.close_all();
        }
        // Every stop says goodbye, with why: the clients end at once instead of waiting out
        // their idle timeout (behind a relay, on another machine, they hear no ICMP).
        let n = self.session.client_count();
        if n > 0 {
            let failed = self.shared.fatal().is_some();
            self.shared.note(format!(
                "saying goodbye to {n} client{} ({})",
                if n == 1 { "" } else { "s" },
                if failed {
                    "host failed"
                } else {
                    "host stopping"
                }
            ));
            let reason = if failed {
                ByeReason::Failed
            } else {
                ByeReason::ShuttingDown
            };
            self.roster_refresh();
            for c in self.session.clients() {
                self.roster.gone(
                    now,
                    c.id,
                    if failed {
                        untether_proto::GoneReason::Failed
                    } else {
                        untether_proto::GoneReason::ShuttingDown
                    },
                );
            }
            self.session.close_with(now, reason);
            // The goodbye leaves before the rest of a paced frame.
            self.outbox.hurry();
        }
        self.pairing.clear_clients();
    }

    fn poll_transmit(&mut self, now: Micros) -> Option<Outgoing> {
        let t = match self.outbox.poll(&mut self.session, &self.shared, now) {
            Some(t) => t,
            None => return self.webrtc.as_mut().and_then(|w| w.poll_transmit()),
        };
        Some(self.link.route(Outgoing {
            via: Via::Socket(0),
            dst: Some(t.dst),
            payload: t.payload,
        }))
    }

    fn send_failed(&mut self, dst: Option<SocketAddr>, error: std::io::Error) {
        if self
            .shared
            .counters
            .send_errors
            .fetch_add(1, Ordering::Relaxed)
            == 0
        {
            log::warn!(
                "host: send to {} failed: {error}",
                dst.map_or("?".to_string(), |d| d.to_string())
            );
        }
    }

    fn is_done(&self) -> bool {
        // Runs until the host stops (after a goodbye too: late datagrams are still answered).
        false
    }
}

impl HostNet {
    /// `#3 "name"` for notes.
    pub(super) fn who(&self, client: ClientId) -> String {
        match self.roster.get(client) {
            Some(c) => format!("#{} {:?} ({})", c.id, c.name, c.fingerprint),
            None => format!("{client}"),
        }
    }

    /// The latest-wins state of the controller (pointer and head pose) and of viewers granted
    /// input (pointer only: the scene's pose is the controller's) as input records, ahead of
    /// the reliable events of the same datagrams (a click lands where the pointer is).
    pub(super) fn state_inputs(&mut self) {
        let controller = self.session.controller();
        let mut records = Vec::new();
        for c in self.session.client_status() {
            let id = c.info.id;
            let is_controller = Some(id) == controller;
            if !is_controller && !c.input_granted {
                continue;
            }
            let pointer = self.session.state_value_of(id, state_keys::POINTER);
            let head = is_controller
                .then(|| self.session.state_value_of(id, state_keys::HEAD_POSE))
                .flatten();
            let changed = self.state.entry(id).or_default().changes(pointer, head);
            if is_controller {
                if let Some(p) = changed.head_pose {
                    *lock(&self.shared.head_pose) = Some(p);
                }
                let session = &self.session;
                self.gamepads.on_state(|k| session.state_value_of(id, k));
            }
            for event in changed.events {
                records.push(HostEvent::Input {
                    client: id,
                    record: InputRecord {
                        seq: STATE_SEQ,
                        event,
                    },
                });
            }
        }
        for (i, r) in records.into_iter().enumerate() {
            self.events.insert(i, r);
        }
    }

    /// Copies the connected clients' figures into the roster.
    /// Sets the operator's bit rate ceiling; the encoder takes the lower of it and the
    /// controller's target (or `configured` before the controller set one) now. Returns it.
    pub(crate) fn set_bitrate_ceiling(&mut self, kbps: u32, configured: u32) -> u32 {
        self.bitrate_ceiling = Some(kbps);
        let k = self.target_kbps.unwrap_or(configured).min(kbps);
        let _ = self.encoder.send(EncoderEvent::Bitrate(k));
        k
    }

    /// Clients are told the encoder that opened (`--encoder auto` names one only then), beside
    /// their Accept, from the next one on.
    fn name_opened_encoder(&mut self) {
        let Some(info) = self.shared.encoder() else {
            return;
        };
        let Some(told) = self.session.host_encoder() else {
            return;
        };
        if told.encoder != info.name {
            let e = untether_proto::HostEncoder {
                encoder: info.name,
                ..told.clone()
            };
            self.session.set_host_encoder(Some(e));
        }
    }

    pub(crate) fn roster_refresh(&mut self) {
        self.roster.update(&self.session.take_departed());
        self.roster.update(&self.session.client_status());
    }

    /// After a hand-over or a grant: the roster and the state directory's connected clients
    /// updated, and the client's summary as it is now.
    fn roles_told(&mut self, id: ClientId) -> Result<ClientSummary, HostError> {
        self.roster_refresh();
        self.pairing.write_clients(&self.session);
        self.roster
            .get(id)
            .cloned()
            .ok_or_else(|| HostError::Usage("the client left".into()))
    }

    /// Hands control to a connected client (by fingerprint) for this run.
    pub(crate) fn hand_control(&mut self, query: &str) -> Result<ClientSummary, HostError> {
        let id =
            find_connected(&self.session, query).map_err(|e| HostError::Usage(e.to_string()))?;
        self.session.hand_control(crate::clock::now_us(), id);
        self.roles_told(id)
    }

    /// Grants (or takes back) a connected viewer's input for this run.
    pub(crate) fn grant_input(
        &mut self,
        query: &str,
        granted: bool,
    ) -> Result<ClientSummary, HostError> {
        let id =
            find_connected(&self.session, query).map_err(|e| HostError::Usage(e.to_string()))?;
        let key = self
            .session
            .clients()
            .find(|c| c.id == id)
            .map(|c| c.key)
            .ok_or_else(|| HostError::Usage("the client left".into()))?;
        let now = crate::clock::now_us();
        if granted {
            self.session.grant_input(now, key);
        } else {
            self.session.revoke_input_grant(now, &key);
        }
        self.roles_told(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::commands::OutgoingFrame;
    use crate::host::pairing::tests::memory;
    use crate::identity::Access;
    use std::sync::mpsc;
    use untether_proto::RejectReason;

    fn host_net() -> HostNet {
        let (pairing, cfg) = memory(Access::Open);
        let (encoder, _) = mpsc::channel();
        HostNet::new(
            HostSession::new(cfg),
            pairing,
            Arc::new(HostShared::new((0, 0))),
            InputSink::Discard,
            encoder,
            Pacing::default(),
            60,
        )
    }

    #[test]
    fn refusals_are_told_to_the_operator_once_per_client_and_reason_a_while() {
        let mut net = host_net();
        let refused = |fp: &str, reason| HostEvent::ClientRefused {
            addr: "127.0.0.1:5".parse().unwrap(),
            fingerprint: fp.into(),
            reason,
            message: String::new(),
        };
        for _ in 0..3 {
            net.events.push(refused("aaaa", RejectReason::Busy));
        }
        net.events.push(refused("aaaa", RejectReason::NotAllowed));
        net.events.push(refused("bbbb", RejectReason::Busy));
        net.dispatch(1_000);
        let notes = net.shared.events();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("aaaa") && notes[0].contains("busy"));
        // Ten seconds later the same refusal is told again.
        net.events.push(refused("aaaa", RejectReason::Busy));
        net.dispatch(1_000 + super::super::refusals::EVERY_US);
        assert_eq!(net.shared.events().len(), 4);
    }

    #[test]
    fn with_no_client_nothing_is_sent_and_nothing_waits() {
        let mut net = host_net();
        net.handle_command(
            0,
            HostCommand::Frame(OutgoingFrame {
                frame_number: 0,
                capture_us: 0,
                keyframe: true,
                refresh_start: false,
                data: Arc::new(vec![0; 100]),
                handed_us: 0,
                timing: untether_proto::FrameTiming::default(),
                pose: None,
            }),
        );
        assert!(net.poll_transmit(0).is_none());
        assert!(net.outbox.due().is_none());
    }
}
