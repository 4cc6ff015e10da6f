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

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use untether_proto::{
    AudioPacket, ByeReason, ClientId, ClientRole, FrameMeta, FrameTiming, HostEvent, HostSession,
    InputRecord, Micros, PathStats, PoseSample, RejectReason, SliceId, Transmit,
};

use super::clients::Roster;
use super::encode::EncoderEvent;
use super::gamepad::Gamepads;
use super::inflight::{InFlight, Step};
use super::input::InputSink;
use super::pairing::Pairing;
use super::shared::{lock, HostShared};
use super::state_input::StateApplied;
use crate::driver::{Endpoint, Outgoing, Via};
use crate::link::HostLink;
use crate::pacing::Pacing;

/// How often the clients' figures (and the controller's paths) are copied for the summary.
const ROSTER_EVERY_US: Micros = 200_000;

/// How often one client's refusals for one reason are noted.
const REFUSAL_NOTE_EVERY_US: Micros = 10_000_000;

/// What the operator reads about a refusal.
fn refusal_text(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::PendingApproval => {
            "not paired (see the access request above, or `untether pair`)"
        }
        RejectReason::Busy => "busy: the host serves its maximum of clients (host.max_clients)",
        RejectReason::NotAllowed => "not allowed (revoked, or not on the allowlist)",
        RejectReason::Pin => "wrong, expired or used-up PIN",
        _ => "refused by the access policy",
    }
}

/// A question for the driver, answered on its thread with the session at hand.
pub(crate) type Query = Arc<dyn Fn(&mut HostNet) + Send + Sync>;

/// What other threads hand the host's network driver.
pub(crate) enum HostCommand {
    /// An encoded frame for every client (dropped when none is connected).
    Frame(OutgoingFrame),
    /// One slice of a frame sent in slices, the moment x264 wrote it (docs/PROTOCOL.md §6.3).
    Slice(OutgoingSlice),
    /// x264 finished a frame sent in slices (after its last [`HostCommand::Slice`]): its
    /// timing, sent to the client once its last datagram has left.
    SlicesDone(SlicesDone),
    /// Opus packets to send now (to every client).
    Audio(Vec<AudioPacket>),
    /// The source ended: say goodbye to the clients.
    Close,
    Query(Query),
    /// Browsers and WHIP publishing (`super::webrtc`).
    WebRtc(super::webrtc::WebRtcCommand),
}

/// An encoded frame on its way from the encoder stage to the network.
pub(crate) struct OutgoingFrame {
    pub frame_number: u32,
    pub capture_us: Micros,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with this frame.
    pub refresh_start: bool,
    /// The encoder's buffer, shared by every client's copy, the retransmission ring and the
    /// other consumers (RTSP).
    pub data: Arc<Vec<u8>>,
    /// When the encoder handed it over: the start of its `send` stage.
    pub handed_us: Micros,
    /// Everything but the send times, filled in once each client's last datagram left.
    pub timing: FrameTiming,
    /// The client's head pose it was rendered for (told to the client before its shards and
    /// again after them).
    pub pose: Option<PoseSample>,
}

/// One slice of a frame on its way from x264's slice thread to the network.
pub(crate) struct OutgoingSlice {
    pub frame_number: u32,
    pub capture_us: Micros,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with its frame.
    pub refresh_start: bool,
    pub slice: SliceId,
    pub data: Vec<u8>,
    /// The client's head pose the frame was rendered for.
    pub pose: Option<PoseSample>,
    /// When x264's slice thread handed it over.
    pub handed_us: Micros,
}

/// The end of a frame sent in slices.
pub(crate) struct SlicesDone {
    pub frame_number: u32,
    pub keyframe: bool,
    pub capture_us: Micros,
    /// The frame's slices put together in picture order, when browsers may be watching
    /// (they take frames whole); shared with the other consumers.
    pub whole: Option<Arc<Vec<u8>>>,
    pub slice_count: u8,
    /// Capture → first / last slice handed over, µs.
    pub first_out_us: u32,
    pub last_out_us: u32,
    /// Everything but the send times.
    pub timing: FrameTiming,
}

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
    encoder: Sender<EncoderEvent>,
    control: VecDeque<Transmit>,
    frames: VecDeque<InFlight>,
    pacing: Pacing,
    fps: u32,
    pub(super) events: Vec<HostEvent>,
    next_roster_us: Micros,
    /// The controller's paths as last seen (kept after it leaves).
    pub last_paths: Vec<PathStats>,
    /// The adaptive bitrate controller's latest target, kbit/s.
    pub target_kbps: Option<u32>,
    /// The controller epoch ([`Link`](super::shared::Link)): input is tagged with it.
    epoch: u64,
    /// Every client of this run, for the summary and the report.
    pub roster: Roster,
    /// The connected clients changed: tell the state directory.
    clients_changed: bool,
    /// When each (client, reason) refusal may be noted again.
    refusal_notes: HashMap<(String, u8), Micros>,
    /// The raw layer-2 transport: clients' MAC addresses and which of them are on raw.
    pub link: HostLink,
    /// Slices never sent (`HostSetup::lose_slices`).
    pub lose_slices: Vec<(u32, u8)>,
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
        HostNet {
            session,
            pairing,
            shared,
            sink,
            state: HashMap::new(),
            gamepads: Gamepads::default(),
            encoder,
            control: VecDeque::new(),
            frames: VecDeque::new(),
            pacing,
            fps,
            events: Vec::new(),
            next_roster_us: 0,
            last_paths: Vec::new(),
            target_kbps: None,
            epoch: 0,
            roster: Roster::new(crate::clock::now_us()),
            clients_changed: false,
            refusal_notes: Default::default(),
            link: HostLink::udp(untether_proto::LinkDeclineReason::HostUsesUdp, None),
            lose_slices: Vec::new(),
            webrtc: None,
        }
    }

    fn drain_session(&mut self, now: Micros) {
        while let Some(t) = self.session.poll_transmit(now) {
            self.control.push_back(t);
        }
    }

    fn send_frame(&mut self, now: Micros, f: OutgoingFrame) {
        if self.session.client_count() == 0 {
            // Nobody to send it to (the last client left after it was encoded).
            return;
        }
        // What the session queued before the frame leaves before it; the pose it was
        // rendered for too (the first datagram of its first batch).
        if let Some(p) = f.pose {
            self.session.send_frame_pose(now, f.frame_number, p);
        }
        self.drain_session(now);
        // A client waiting for a picture may start on a keyframe or a refresh sweep's start.
        let meta = FrameMeta {
            entry_point: f.keyframe || f.refresh_start,
            ..FrameMeta::new(f.frame_number, f.capture_us, f.keyframe)
        };
        let mut out = Vec::with_capacity(self.session.client_count());
        if self
            .session
            .send_frame_shared(now, &meta, &f.data, &mut out)
            .is_err()
        {
            return;
        }
        // A repeated Accept goes ahead of the shards.
        self.drain_session(now);
        if out.iter().all(|c| c.datagrams.is_empty()) {
            // Every client is waiting for a keyframe (just joined) or paused.
            return;
        }
        for older in self.frames.iter_mut() {
            older.close();
            older.hurry = true;
        }
        let mut flight = InFlight::new(
            f.frame_number,
            f.timing,
            f.handed_us,
            now,
            out,
            self.pacing,
            self.fps,
        );
        flight.pose = f.pose;
        self.frames.push_back(flight);
    }

    /// One slice of a frame sent in slices: packetized once, sealed for every client that
    /// takes it and queued at once behind what is in flight, each client's datagrams paced
    /// over its share of the pacing window.
    fn send_slice(&mut self, now: Micros, s: OutgoingSlice) {
        if self.session.client_count() == 0 {
            return;
        }
        if self.lose_slices.contains(&(s.frame_number, s.slice.index)) {
            return;
        }
        let first = !self
            .frames
            .back()
            .is_some_and(|f| f.open && f.frame_number == s.frame_number);
        if first {
            // The pose the frame was rendered for leaves ahead of its first slice.
            if let Some(p) = s.pose {
                self.session.send_frame_pose(now, s.frame_number, p);
            }
        }
        self.drain_session(now);
        let meta = FrameMeta {
            entry_point: s.keyframe || s.refresh_start,
            slice: s.slice,
            ..FrameMeta::new(s.frame_number, s.capture_us, s.keyframe)
        };
        let mut out = Vec::with_capacity(self.session.client_count());
        if self
            .session
            .send_frame_shared(now, &meta, &Arc::new(s.data), &mut out)
            .is_err()
        {
            return;
        }
        // A repeated Accept goes ahead of the shards.
        self.drain_session(now);
        let window_us = self.pacing.window_us(self.fps) / s.slice.count.max(1) as u64;
        match self.frames.back_mut() {
            Some(f) if f.open && f.frame_number == s.frame_number => {
                f.add(now, out, self.pacing, window_us);
                f.handed_us = s.handed_us;
            }
            _ => {
                for older in self.frames.iter_mut() {
                    // A frame whose encoder never finished (it failed) ends here.
                    older.close();
                    older.hurry = true;
                }
                let mut f = InFlight::new(
                    s.frame_number,
                    FrameTiming {
                        frame_number: s.frame_number,
                        ..Default::default()
                    },
                    s.handed_us,
                    now,
                    Vec::new(),
                    self.pacing,
                    self.fps,
                );
                f.add(now, out, self.pacing, window_us);
                f.open = true;
                f.pose = s.pose;
                self.frames.push_back(f);
            }
        }
    }

    /// The encoder finished a frame sent in slices: each client's copy is timed (the client's
    /// frame-end signal) once its datagrams have left; the frame ends when all have.
    fn slices_done(&mut self, d: SlicesDone) {
        if let Some(f) = self
            .frames
            .iter_mut()
            .rev()
            .find(|f| f.open && f.frame_number == d.frame_number)
        {
            f.timing = d.timing;
            f.slices = Some((d.slice_count, d.first_out_us, d.last_out_us));
            f.close();
        }
    }

    /// The next datagram of the oldest frame in flight, if one is due; times each client's
    /// copy when its last datagram has left, and finishes frames whose datagrams have all left.
    fn next_frame_datagram(&mut self, now: Micros) -> Option<Transmit> {
        loop {
            let f = self.frames.front_mut()?;
            match f.step(now) {
                Step::Send(t) => return Some(t),
                Step::Left(clients) => {
                    let send_done = crate::clock::now_us();
                    let timing = FrameTiming {
                        frame_number: f.frame_number,
                        send_us: send_done.saturating_sub(f.handed_us).min(u32::MAX as u64) as u32,
                        send_done_us: send_done,
                        ..f.timing
                    };
                    let pose = f.pose;
                    let controller = self.session.controller();
                    let slices = f.slices;
                    for c in clients {
                        self.session.send_frame_timing_to(send_done, c, timing);
                        if let Some((count, first, last)) = slices {
                            self.session.send_slice_timing_to(
                                send_done,
                                c,
                                f.frame_number,
                                count,
                                first,
                                last,
                            );
                        }
                        if let (Some(p), true) = (pose, Some(c) == controller) {
                            // The second copy, beside the timing: one lost control datagram
                            // loses no pose.
                            self.session.send_frame_pose(send_done, f.frame_number, p);
                        }
                    }
                    self.drain_session(send_done);
                }
                Step::Wait => return None,
                Step::Done => {
                    let done = self.frames.pop_front()?;
                    self.finish_frame(done);
                    if let Some(t) = self.control.pop_front() {
                        return Some(t);
                    }
                }
            }
        }
    }

    /// The frame's last datagram has left, to every client: record its send time.
    fn finish_frame(&mut self, f: InFlight) {
        let send_done = crate::clock::now_us();
        let c = &self.shared.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        if f.batch_count > 1 {
            c.paced_frames.fetch_add(1, Ordering::Relaxed);
        }
        let send_us = send_done.saturating_sub(f.handed_us);
        let mut sm = lock(&self.shared.samples);
        sm.send.push_us(send_us as i64);
        if self.pacing.window_us(self.fps) > 0 {
            sm.pace.push_us(f.waited_us as i64);
        }
    }

    /// Hook for another kind of consumer of the one stream (an RTSP or WebRTC session the
    /// driver serves beside the protocol's clients): a keyframe for everyone, through the
    /// same cooldown as the clients' requests; true if one was asked for.
    #[allow(dead_code)]
    pub(crate) fn request_keyframe(&mut self, now: Micros) -> bool {
        self.session.request_keyframe(now)
    }

    /// Hook for another kind of consumer: its input into the same sink as the clients'
    /// (`controller`: it is the one in control, so the scene counts its reliable events).
    #[allow(dead_code)]
    pub(crate) fn deliver_input(&mut self, controller: bool, record: InputRecord) {
        self.sink
            .deliver(&self.shared, self.epoch, controller, record);
    }

    fn dispatch(&mut self, now: Micros) {
        while let Some(e) = self.session.poll_pairing_event() {
            self.pairing.on_event(&self.shared, &mut self.session, e);
        }
        while let Some(ev) = self.session.poll_event() {
            self.events.push(ev);
        }
        if self.session.client_count() > 0 {
            self.state_inputs();
        }
        let controller = self.session.controller();
        for ev in std::mem::take(&mut self.events) {
            match ev {
                HostEvent::ClientConnected {
                    client,
                    addr,
                    name,
                    role,
                } => {
                    self.roster.update(&self.session.client_status());
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
                    let _ = self
                        .encoder
                        .send(EncoderEvent::Codec(crate::config::media_codec(codec)));
                    if role == ClientRole::Controller {
                        self.epoch = self.shared.link.new_controller();
                        *lock(&self.shared.head_pose) = None;
                    }
                }
                HostEvent::ClientGone {
                    client,
                    addr,
                    reason,
                } => {
                    self.roster.gone(now, client, reason);
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
                    self.roster.update(&self.session.client_status());
                    self.clients_changed = true;
                    let what = match (role, input_granted) {
                        (ClientRole::Controller, _) => "is now the controller".to_string(),
                        (ClientRole::Viewer, true) => "is a viewer with input granted".into(),
                        (ClientRole::Viewer, false) => "is a viewer (its input is dropped)".into(),
                    };
                    self.shared
                        .note(format!("client {} {what}", self.who(client)));
                    if role == ClientRole::Controller {
                        self.epoch = self.shared.link.new_controller();
                        // The scene renders for the new controller's head from its next pose.
                        *lock(&self.shared.head_pose) = None;
                    }
                }
                HostEvent::ViewerPaused { client, paused } => {
                    self.roster.update(&self.session.client_status());
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
                HostEvent::ClientRefused {
                    addr,
                    fingerprint,
                    reason,
                    message,
                } => {
                    // One line per client and reason every REFUSAL_NOTE_EVERY_US: a client
                    // retrying its handshake does not flood the log.
                    let key = (fingerprint.clone(), reason as u8);
                    let due = self.refusal_notes.get(&key).is_none_or(|&t| now >= t);
                    if due {
                        if self.refusal_notes.len() > 256 {
                            self.refusal_notes.clear();
                        }
                        self.refusal_notes.insert(key, now + REFUSAL_NOTE_EVERY_US);
                        self.shared.note(match reason {
                            // The message names both codec lists.
                            RejectReason::Codec => {
                                format!("refused client {fingerprint} at {addr}: {message}")
                            }
                            _ => format!(
                                "refused client {fingerprint} at {addr}: {}",
                                refusal_text(reason)
                            ),
                        });
                    }
                }
                HostEvent::BitrateChanged { kbps } => {
                    self.target_kbps = Some(kbps);
                    let _ = self.encoder.send(EncoderEvent::Bitrate(kbps));
                }
            }
        }
        for note in self.gamepads.notes.drain(..) {
            self.shared.note(note);
        }
        if let Some(w) = &mut self.webrtc {
            w.handle_events(
                now,
                super::webrtc::DriverParts {
                    shared: &self.shared,
                    sink: &mut self.sink,
                    encoder: &self.encoder,
                    epoch: &mut self.epoch,
                    native_client: self.session.client_count() > 0,
                },
            );
        }
        let browsers = self.webrtc.as_ref().is_some_and(|w| w.has_viewers());
        self.shared.link.set_browsers(browsers);
        self.shared.link.set_clients(self.session.client_count());
        if std::mem::take(&mut self.clients_changed) {
            self.pairing.write_clients(&self.session);
        }
        if now >= self.next_roster_us {
            self.next_roster_us = now + ROSTER_EVERY_US;
            self.roster.update(&self.session.client_status());
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
        let frame_due = self.frames.front().and_then(InFlight::due);
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
                self.send_frame(now, f)
            }
            HostCommand::Slice(s) => self.send_slice(now, s),
            HostCommand::SlicesDone(d) => {
                if let (Some(w), Some(data)) = (&mut self.webrtc, &d.whole) {
                    // Browsers take frames whole: the slices put together.
                    w.send_access_unit(data, d.keyframe, d.capture_us, &self.shared);
                }
                self.slices_done(d)
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
            HostCommand::Query(q) => q(self),
            HostCommand::WebRtc(c) => {
                if let Some(w) = &mut self.webrtc {
                    let mut pins = super::webrtc::SessionPins {
                        session: &mut self.session,
                        pairing: &mut self.pairing,
                        shared: &self.shared,
                    };
                    w.handle_command(now, c, &self.shared, &mut pins);
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
            self.roster.update(&self.session.client_status());
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
            for f in self.frames.iter_mut() {
                f.hurry = true;
            }
        }
        self.pairing.clear_clients();
    }

    fn poll_transmit(&mut self, now: Micros) -> Option<Outgoing> {
        let t = match self.control.pop_front() {
            Some(t) => t,
            None => match self.session.poll_transmit(now) {
                Some(t) => t,
                None => match self.next_frame_datagram(now) {
                    Some(t) => t,
                    None => return self.webrtc.as_mut().and_then(|w| w.poll_transmit()),
                },
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::pairing::tests::memory;
    use crate::identity::Access;
    use std::sync::mpsc;

    fn host_net(pacing: Pacing) -> HostNet {
        let (pairing, cfg) = memory(Access::Open);
        let (encoder, _) = mpsc::channel();
        HostNet::new(
            HostSession::new(cfg),
            pairing,
            Arc::new(HostShared::new((0, 0))),
            InputSink::Discard,
            encoder,
            pacing,
            60,
        )
    }

    fn in_flight(frame_number: u32, client: u32, bytes: &[u8], pacing: Pacing) -> InFlight {
        InFlight::new(
            frame_number,
            FrameTiming::default(),
            0,
            100,
            vec![untether_proto::ClientDatagrams {
                client: ClientId(client),
                datagrams: bytes
                    .iter()
                    .map(|&n| Transmit {
                        dst: "127.0.0.1:9".parse().unwrap(),
                        payload: vec![n],
                    })
                    .collect(),
            }],
            pacing,
            60,
        )
    }

    fn sent(net: &mut HostNet, now: Micros) -> Vec<u8> {
        std::iter::from_fn(|| net.poll_transmit(now))
            .map(|o| o.payload[0])
            .collect()
    }

    #[test]
    fn paced_batches_leave_at_their_time_and_control_never_waits() {
        let pacing = Pacing {
            fraction: 0.5,
            batch: 2,
        };
        let mut net = host_net(pacing);
        let window = pacing.window_us(60);
        net.frames.push_back(in_flight(7, 1, &[1, 2, 3], pacing));
        assert_eq!(sent(&mut net, 100), vec![1, 2]);
        // The next batch is due half a window later: the driver sleeps until then.
        assert!(net.poll_timeout().is_some_and(|t| t <= 100 + window / 2));
        // A control reply queued meanwhile leaves at once, ahead of the frame's rest.
        net.control.push_back(Transmit {
            dst: "127.0.0.1:9".parse().unwrap(),
            payload: vec![99],
        });
        assert_eq!(sent(&mut net, 500), vec![99]);
        assert_eq!(sent(&mut net, 100 + window / 2), vec![3]);
        // The frame is finished: counted once, as paced (two batches), its wait recorded.
        assert!(net.frames.is_empty());
        let c = &net.shared.counters;
        assert_eq!(c.sent.load(Ordering::Relaxed), 1);
        assert_eq!(c.paced_frames.load(Ordering::Relaxed), 1);
        assert!(lock(&net.shared.samples).pace.summary().is_some());
    }

    #[test]
    fn a_newer_frame_hurries_the_older_one_out_in_order() {
        let pacing = Pacing {
            fraction: 0.5,
            batch: 1,
        };
        let mut net = host_net(pacing);
        net.frames.push_back(in_flight(1, 1, &[1, 2, 3], pacing));
        assert_eq!(sent(&mut net, 100), vec![1]);
        for f in net.frames.iter_mut() {
            f.hurry = true;
        }
        net.frames.push_back(in_flight(2, 1, &[4], pacing));
        assert_eq!(sent(&mut net, 110), vec![2, 3, 4]);
        assert_eq!(net.shared.counters.sent.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn refusals_are_told_to_the_operator_once_per_client_and_reason_a_while() {
        let mut net = host_net(Pacing::default());
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
        net.dispatch(1_000 + REFUSAL_NOTE_EVERY_US);
        assert_eq!(net.shared.events().len(), 4);
    }

    #[test]
    fn frames_without_a_client_are_dropped() {
        let mut net = host_net(Pacing::default());
        net.send_frame(
            0,
            OutgoingFrame {
                frame_number: 0,
                capture_us: 0,
                keyframe: true,
                refresh_start: false,
                data: Arc::new(vec![0; 100]),
                handed_us: 0,
                timing: FrameTiming::default(),
                pose: None,
            },
        );
        assert!(net.frames.is_empty());
        assert!(sent(&mut net, 0).is_empty());
    }
}
