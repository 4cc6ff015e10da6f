//! The host's network driver: the one thread that owns the [`HostSession`] and its socket.
//!
//! Other threads hand it [`HostCommand`]s: an encoded frame (packetized, protected and sent
//! here, in paced batches with `network.pacing`), audio packets, a goodbye, or a query. What
//! the session reports goes out as events: keyframe requests and bitrate changes to the
//! encoder stage ([`EncoderEvent`]), input to the [`InputSink`], the connection state to
//! [`Link`](super::shared::Link), notes to the summary.
//!
//! Control replies (acks, pongs, keep-alives) never wait behind a paced frame: they leave
//! between its batches, with newer packet numbers, which the client's packet window accepts
//! out of order.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use untether_proto::state::keys as state_keys;
use untether_proto::{
    AudioPacket, ByeReason, FrameTiming, HostEvent, HostSession, InputRecord, Micros, PathStats,
    PoseSample, RejectReason, SliceId, Transmit,
};

use super::encode::EncoderEvent;
use super::gamepad::Gamepads;
use super::input::InputSink;
use super::pairing::Pairing;
use super::shared::{lock, HostShared};
use super::state_input::{StateApplied, STATE_SEQ};
use crate::driver::{Endpoint, Outgoing, Via};
use crate::link::HostLink;
use crate::pacing::{self, Pacing};

/// How often the client's path statistics are copied for the summary.
const PATHS_EVERY_US: Micros = 200_000;

/// How often one client's refusals for one reason are noted.
const REFUSAL_NOTE_EVERY_US: Micros = 10_000_000;

/// What the operator reads about a refusal.
fn refusal_text(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::PendingApproval => {
            "not paired (see the access request above, or `untether pair`)"
        }
        RejectReason::Busy => "busy: another client is connected",
        RejectReason::NotAllowed => "not allowed (revoked, or not on the allowlist)",
        RejectReason::Pin => "wrong, expired or used-up PIN",
        _ => "refused by the access policy",
    }
}

/// A question for the driver, answered on its thread with the session at hand.
pub(crate) type Query = Arc<dyn Fn(&mut HostNet) + Send + Sync>;

/// What other threads hand the host's network driver.
pub(crate) enum HostCommand {
    /// An encoded frame for the client of `epoch` (dropped if that client has gone).
    Frame(OutgoingFrame),
    /// One slice of a frame sent in slices, the moment x264 wrote it (docs/PROTOCOL.md §6.3).
    Slice(OutgoingSlice),
    /// x264 finished a frame sent in slices (after its last [`HostCommand::Slice`]): its
    /// timing, sent to the client once its last datagram has left.
    SlicesDone(SlicesDone),
    /// Opus packets to send now.
    Audio(Vec<AudioPacket>),
    /// The source ended: say goodbye to the client.
    Close,
    Query(Query),
    /// Browsers and WHIP publishing (`super::webrtc`).
    WebRtc(super::webrtc::WebRtcCommand),
}

/// An encoded frame on its way from the encoder stage to the network.
pub(crate) struct OutgoingFrame {
    pub epoch: u64,
    pub frame_number: u32,
    pub capture_us: Micros,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with this frame.
    pub refresh_start: bool,
    /// The access unit, shared with the other consumers (RTSP).
    pub data: Arc<Vec<u8>>,
    /// When the encoder handed it over: the start of its `send` stage.
    pub handed_us: Micros,
    /// Everything but the send times, filled in once the last datagram left.
    pub timing: FrameTiming,
    /// The client's head pose it was rendered for (told to the client before its shards and
    /// again after them).
    pub pose: Option<PoseSample>,
}

/// One slice of a frame on its way from x264's slice thread to the network.
pub(crate) struct OutgoingSlice {
    pub epoch: u64,
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
    pub epoch: u64,
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

/// A frame whose datagrams are going out.
struct InFlight {
    frame_number: u32,
    timing: FrameTiming,
    pose: Option<PoseSample>,
    /// When the encoder handed it over (a sliced frame: its latest slice so far).
    handed_us: Micros,
    /// A frame sent in slices whose encoder has not finished: more slices may come, and it is
    /// not finished when its datagrams so far have left.
    open: bool,
    /// A frame sent in slices: (slice count, capture → first slice out, → last slice out).
    slices: Option<(u8, u32, u32)>,
    /// Batches not started yet, with the time each is due.
    batches: VecDeque<(Micros, Vec<Transmit>)>,
    /// The batch going out now.
    current: VecDeque<Transmit>,
    batch_count: u64,
    /// Time between batches not spent sending (the pacing), µs.
    waited_us: u64,
    last_batch_end: Option<Micros>,
    /// The current batch is going out.
    sending: bool,
    /// A newer frame is waiting: send the rest at once.
    hurry: bool,
}

impl InFlight {
    fn new(
        frame_number: u32,
        timing: FrameTiming,
        handed_us: Micros,
        batches: VecDeque<(Micros, Vec<Transmit>)>,
    ) -> InFlight {
        InFlight {
            frame_number,
            timing,
            pose: None,
            handed_us,
            open: false,
            slices: None,
            batches,
            current: VecDeque::new(),
            batch_count: 0,
            waited_us: 0,
            last_batch_end: None,
            sending: false,
            hurry: false,
        }
    }
}

/// The host's network side, run by [`crate::driver::run`].
pub(crate) struct HostNet {
    pub session: HostSession,
    pub pairing: Pairing,
    shared: Arc<HostShared>,
    sink: InputSink,
    state: StateApplied,
    /// The client's game controllers (state for the API, virtual pads through uinput).
    pub gamepads: Gamepads,
    encoder: Sender<EncoderEvent>,
    control: VecDeque<Transmit>,
    frames: VecDeque<InFlight>,
    pacing: Pacing,
    fps: u32,
    events: Vec<HostEvent>,
    next_paths_us: Micros,
    /// The client's paths as last seen (kept after it leaves).
    pub last_paths: Vec<PathStats>,
    /// The adaptive bitrate controller's latest target, kbit/s.
    pub target_kbps: Option<u32>,
    epoch: u64,
    /// When each (client, reason) refusal may be noted again.
    refusal_notes: std::collections::HashMap<(String, u8), Micros>,
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
            state: StateApplied::default(),
            gamepads: Gamepads::default(),
            encoder,
            control: VecDeque::new(),
            frames: VecDeque::new(),
            pacing,
            fps,
            events: Vec::new(),
            next_paths_us: 0,
            last_paths: Vec::new(),
            target_kbps: None,
            epoch: 0,
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
        if f.epoch != self.epoch || self.session.client().is_none() {
            // The client it was encoded for has gone.
            return;
        }
        // What the session queued before the frame leaves before it; the pose it was
        // rendered for too (the first datagram of its first batch).
        if let Some(p) = f.pose {
            self.session.send_frame_pose(now, f.frame_number, p);
        }
        self.drain_session(now);
        if self
            .session
            .send_frame_flagged(
                now,
                f.frame_number,
                f.capture_us,
                f.keyframe,
                f.refresh_start,
                &f.data,
            )
            .is_err()
        {
            return;
        }
        let mut datagrams = Vec::new();
        while let Some(t) = self.session.poll_transmit(now) {
            datagrams.push(t);
        }
        let batches = self.batches(now, datagrams, self.pacing.window_us(self.fps));
        for older in self.frames.iter_mut() {
            older.open = false;
            older.hurry = true;
        }
        let mut flight = InFlight::new(f.frame_number, f.timing, f.handed_us, batches);
        flight.pose = f.pose;
        self.frames.push_back(flight);
    }

    /// One slice of a frame sent in slices: packetized, protected and queued at once behind
    /// what is in flight, its datagrams paced over its share of the pacing window.
    fn send_slice(&mut self, now: Micros, s: OutgoingSlice) {
        if s.epoch != self.epoch || self.session.client().is_none() {
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
        if self
            .session
            .send_slice_flagged(
                now,
                s.frame_number,
                s.capture_us,
                s.keyframe,
                s.refresh_start,
                s.slice,
                &s.data,
            )
            .is_err()
        {
            return;
        }
        let mut datagrams = Vec::new();
        while let Some(t) = self.session.poll_transmit(now) {
            datagrams.push(t);
        }
        let window_us = self.pacing.window_us(self.fps) / s.slice.count.max(1) as u64;
        let batches = self.batches(now, datagrams, window_us);
        match self.frames.back_mut() {
            Some(f) if f.open && f.frame_number == s.frame_number => {
                f.batches.extend(batches);
                f.handed_us = s.handed_us;
            }
            _ => {
                for older in self.frames.iter_mut() {
                    // A frame whose encoder never finished (it failed) ends here.
                    older.open = false;
                    older.hurry = true;
                }
                let mut f = InFlight::new(
                    s.frame_number,
                    FrameTiming {
                        frame_number: s.frame_number,
                        ..Default::default()
                    },
                    s.handed_us,
                    batches,
                );
                f.open = true;
                f.pose = s.pose;
                self.frames.push_back(f);
            }
        }
    }

    /// The encoder finished a frame sent in slices: it ends once its datagrams have left.
    fn slices_done(&mut self, d: SlicesDone) {
        if let Some(f) = self
            .frames
            .iter_mut()
            .rev()
            .find(|f| f.open && f.frame_number == d.frame_number)
        {
            if d.epoch == self.epoch {
                f.timing = d.timing;
                f.slices = Some((d.slice_count, d.first_out_us, d.last_out_us));
            }
            f.open = false;
        }
    }

    /// `datagrams` in paced batches over `window_us` (one batch, due now, without pacing).
    fn batches(
        &self,
        now: Micros,
        datagrams: Vec<Transmit>,
        window_us: u64,
    ) -> VecDeque<(Micros, Vec<Transmit>)> {
        let mut batches = VecDeque::new();
        if window_us == 0 || datagrams.len() <= self.pacing.batch {
            batches.push_back((now, datagrams));
        } else {
            let mut rest = datagrams.into_iter();
            let n = rest.len();
            for (range, offset) in pacing::schedule(n, self.pacing.batch, window_us) {
                batches.push_back((now + offset, rest.by_ref().take(range.len()).collect()));
            }
        }
        batches
    }

    /// The next datagram of the oldest frame in flight, if one is due; finishes frames whose
    /// datagrams have all left (their timing goes to the client). The loop sends each datagram
    /// before it asks for the next, so an empty current batch has left.
    fn next_frame_datagram(&mut self, now: Micros) -> Option<Transmit> {
        loop {
            let f = self.frames.front_mut()?;
            if let Some(t) = f.current.pop_front() {
                return Some(t);
            }
            if f.sending {
                f.sending = false;
                f.last_batch_end = Some(now);
            }
            match f.batches.front() {
                Some(&(due, _)) if due <= now || f.hurry => {
                    let (_, batch) = f.batches.pop_front()?;
                    if let Some(end) = f.last_batch_end {
                        f.waited_us += now.saturating_sub(end);
                    }
                    f.batch_count += 1;
                    f.current = batch.into();
                    f.sending = true;
                }
                Some(_) => return None,
                // More slices of it are coming.
                None if f.open => return None,
                None => {
                    let done = self.frames.pop_front()?;
                    self.finish_frame(done);
                    if let Some(t) = self.control.pop_front() {
                        return Some(t);
                    }
                }
            }
        }
    }

    /// The frame's last datagram has left: record its send time and tell the client.
    fn finish_frame(&mut self, f: InFlight) {
        let send_done = crate::clock::now_us();
        let c = &self.shared.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        if f.batch_count > 1 {
            c.paced_frames.fetch_add(1, Ordering::Relaxed);
        }
        let send_us = send_done.saturating_sub(f.handed_us);
        let timing = FrameTiming {
            frame_number: f.frame_number,
            send_us: send_us.min(u64::from(u32::MAX)) as u32,
            send_done_us: send_done,
            ..f.timing
        };
        self.session.send_frame_timing(send_done, timing);
        if let Some((count, first, last)) = f.slices {
            self.session
                .send_slice_timing(send_done, f.frame_number, count, first, last);
        }
        if let Some(p) = f.pose {
            // The second copy, beside the timing: one lost control datagram loses no pose.
            self.session.send_frame_pose(send_done, f.frame_number, p);
        }
        self.drain_session(send_done);
        let mut sm = lock(&self.shared.samples);
        sm.send.push_us(send_us as i64);
        if self.pacing.window_us(self.fps) > 0 {
            sm.pace.push_us(f.waited_us as i64);
        }
    }

    fn dispatch(&mut self, now: Micros) {
        while let Some(e) = self.session.poll_pairing_event() {
            self.pairing.on_event(&self.shared, &mut self.session, e);
        }
        while let Some(ev) = self.session.poll_event() {
            self.events.push(ev);
        }
        if self.session.client().is_some() {
            // The latest-wins state (pointer, head pose) goes to the sink before the reliable
            // events of the same datagrams (a click lands where the pointer is).
            let changed = self.state.changes(
                self.session.state_value(state_keys::POINTER),
                self.session.state_value(state_keys::HEAD_POSE),
            );
            if let Some(p) = changed.head_pose {
                *lock(&self.shared.head_pose) = Some(p);
            }
            let session = &self.session;
            self.gamepads.on_state(|k| session.state_value(k));
            for (i, event) in changed.events.into_iter().enumerate() {
                self.events.insert(
                    i,
                    HostEvent::Input(InputRecord {
                        seq: STATE_SEQ,
                        event,
                    }),
                );
            }
        }
        for ev in std::mem::take(&mut self.events) {
            match ev {
                HostEvent::ClientConnected { addr, name } => {
                    let codec = self.session.params().codec;
                    self.shared
                        .note(format!("client {name:?} ({codec}) connected from {addr}"));
                    // Before the epoch changes: the encoder stage reads it with the epoch.
                    let _ = self
                        .encoder
                        .send(EncoderEvent::Codec(crate::config::media_codec(codec)));
                    self.epoch = self.shared.link.new_client();
                    self.state = StateApplied::default();
                    *lock(&self.shared.head_pose) = None;
                }
                HostEvent::ClientGone { addr, reason } => {
                    self.shared
                        .note(format!("client at {addr} gone ({reason:?})"));
                    self.link.forget(addr);
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
                HostEvent::Input(rec) => {
                    self.gamepads.on_event(&rec.event);
                    self.sink.deliver(&self.shared, self.epoch, rec)
                }
                HostEvent::Feedback(_) => {}
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
                    native_client: self.session.client().is_some(),
                },
            );
        }
        let browsers = self.webrtc.as_ref().is_some_and(|w| w.has_viewers());
        self.shared
            .link
            .set_connected(self.session.client().is_some() || browsers);
        if now >= self.next_paths_us {
            self.next_paths_us = now + PATHS_EVERY_US;
            let paths = self.session.path_stats();
            if !paths.is_empty() {
                for (i, p) in paths.iter().enumerate() {
                    let before = self.last_paths.get(i).map(|o| (o.addr, o.alive));
                    if before.is_some_and(|b| b != (p.addr, p.alive)) || (before.is_none() && i > 0)
                    {
                        self.shared.note(format!(
                            "client path {i}: {} ({})",
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
        let frame_due = self.frames.front().and_then(|f| {
            if f.current.is_empty() {
                f.batches.front().map(|&(due, _)| due)
            } else {
                Some(0)
            }
        });
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
        self.link.on_udp(from);
        self.session.handle_datagram(now, from, data);
    }

    fn handle_raw(&mut self, now: Micros, src: untether_net::MacAddr, data: &[u8]) {
        if let Some(from) = self.link.on_raw(now, src) {
            self.session.handle_datagram(now, from, data);
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
        // Every stop says goodbye, with why: the client ends at once instead of waiting out
        // its idle timeout (behind a relay, on another machine, it hears no ICMP).
        if let Some(c) = self.session.client() {
            let failed = self.shared.fatal().is_some();
            self.shared.note(format!(
                "saying goodbye to the client at {} ({})",
                c.addr,
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
            self.session.close_with(now, reason);
            // The goodbye leaves before the rest of a paced frame.
            for f in self.frames.iter_mut() {
                f.hurry = true;
            }
        }
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

    fn datagram(n: u8) -> Transmit {
        Transmit {
            dst: "127.0.0.1:9".parse().unwrap(),
            payload: vec![n],
        }
    }

    /// A frame of `batches` (due time, datagram bytes).
    fn in_flight(frame_number: u32, batches: &[(Micros, &[u8])]) -> InFlight {
        let batches = batches
            .iter()
            .map(|&(due, b)| (due, b.iter().map(|&n| datagram(n)).collect()))
            .collect();
        InFlight::new(frame_number, FrameTiming::default(), 0, batches)
    }

    fn sent(net: &mut HostNet, now: Micros) -> Vec<u8> {
        std::iter::from_fn(|| net.poll_transmit(now))
            .map(|o| o.payload[0])
            .collect()
    }

    #[test]
    fn paced_batches_leave_at_their_time_and_control_never_waits() {
        let mut net = host_net(Pacing {
            fraction: 0.5,
            batch: 2,
        });
        net.frames
            .push_back(in_flight(7, &[(100, &[1, 2]), (2_000, &[3])]));
        assert_eq!(sent(&mut net, 100), vec![1, 2]);
        // The next batch is due at 2 000: the driver sleeps until then.
        assert!(net.poll_timeout().is_some_and(|t| t <= 2_000));
        // A control reply queued meanwhile leaves at once, ahead of the frame's rest.
        net.control.push_back(datagram(99));
        assert_eq!(sent(&mut net, 500), vec![99]);
        assert_eq!(sent(&mut net, 2_000), vec![3]);
        // The frame is finished: counted once, as paced (two batches), its wait recorded.
        assert!(net.frames.is_empty());
        let c = &net.shared.counters;
        assert_eq!(c.sent.load(Ordering::Relaxed), 1);
        assert_eq!(c.paced_frames.load(Ordering::Relaxed), 1);
        let pace = lock(&net.shared.samples).pace.summary().map(|s| s.max);
        assert_eq!(pace, Some(1.9), "waited from 100 to 2 000 µs");
    }

    #[test]
    fn a_newer_frame_hurries_the_older_one_out_in_order() {
        let mut net = host_net(Pacing {
            fraction: 0.5,
            batch: 1,
        });
        net.frames
            .push_back(in_flight(1, &[(0, &[1]), (5_000, &[2]), (6_000, &[3])]));
        assert_eq!(sent(&mut net, 0), vec![1]);
        for f in net.frames.iter_mut() {
            f.hurry = true;
        }
        net.frames.push_back(in_flight(2, &[(0, &[4])]));
        assert_eq!(sent(&mut net, 10), vec![2, 3, 4]);
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
    fn frames_for_a_client_that_left_are_dropped() {
        let mut net = host_net(Pacing::default());
        net.send_frame(
            0,
            OutgoingFrame {
                epoch: 3,
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
