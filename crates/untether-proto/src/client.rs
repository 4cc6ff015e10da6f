//! The client's side of the protocol, sans-IO: asks for a session, reassembles frames, requests
//! keyframes after a loss, sends input reliably, estimates the clock offset, keeps the session
//! alive and notices when the host is gone.

use std::collections::VecDeque;

use crate::assembler::{
    Assembled, Assembler, AssemblerConfig, AssemblerStats, CompleteFrame, LossCause,
};
use crate::clock::{ClockEstimate, ClockEstimator, ClockSample};
use crate::keyframe::KeyframeRequester;
use crate::reliable::ReliableSender;
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, caps, encode_control, ByeReason, ControlFrame, Datagram, Feedback, FrameTiming, Header,
    Hello, InputEvent, PacketType, RejectReason, SessionParams, HEADER_LEN,
};
use crate::{GoneReason, Micros};

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Shown to the host.
    pub name: String,
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
    /// Codecs this client decodes ([`caps`] bits).
    pub capabilities: u32,
    /// SRTT ← α·RTT + (1−α)·SRTT.
    pub rtt_alpha: f64,
    /// Input retransmission timeout = β·SRTT (at least `min_rto_us`).
    pub rto_beta: f64,
    pub min_rto_us: Micros,
}

impl ClientConfig {
    pub fn new(name: impl Into<String>) -> Self {
        ClientConfig {
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
            capabilities: caps::H264 | caps::H264_RGB,
            rtt_alpha: 0.9,
            rto_beta: 2.0,
            min_rto_us: 5_000,
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
}

enum State {
    Connecting {
        started_us: Micros,
        next_hello_us: Micros,
    },
    Connected(Box<Connected>),
    Closed,
}

struct Connected {
    cid: u64,
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
}

/// The client's protocol state machine.
pub struct ClientSession {
    cfg: ClientConfig,
    state: State,
    next_pn: u64,
    window: PacketWindow,
    clock: ClockEstimator,
    input: ReliableSender,
    next_ping_id: u32,
    pending: Vec<ControlFrame>,
    transmits: VecDeque<Vec<u8>>,
    events: VecDeque<ClientEvent>,
    stats: ClientStats,
    decode_us: u32,
    /// The assembler's and requester's counters when the session left the Connected state.
    final_counters: Option<(AssemblerStats, u64)>,
}

/// Pings sent at short intervals right after connecting, to get a clock estimate quickly.
const PING_BURST: u32 = 8;
const PING_BURST_INTERVAL_US: Micros = 20_000;

impl ClientSession {
    /// Starts connecting: the first Hello is ready in [`poll_transmit`](Self::poll_transmit).
    pub fn new(cfg: ClientConfig, now: Micros) -> Self {
        let mut s = ClientSession {
            clock: ClockEstimator::new(32, cfg.rtt_alpha),
            cfg,
            state: State::Connecting {
                started_us: now,
                next_hello_us: now,
            },
            next_pn: 0,
            window: PacketWindow::new(),
            input: ReliableSender::new(),
            next_ping_id: 0,
            pending: Vec::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: ClientStats::default(),
            decode_us: 0,
            final_counters: None,
        };
        s.handle_timeout(now);
        s
    }

    pub fn is_connected(&self) -> bool {
        matches!(self.state, State::Connected(_))
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
    pub fn clock(&self) -> Option<ClockEstimate> {
        self.clock.estimate()
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

    /// Queues an input event for reliable, ordered delivery; returns its sequence number, or
    /// None when too many events are unacknowledged (the host is unreachable).
    pub fn send_input(&mut self, now: Micros, event: InputEvent) -> Option<u32> {
        let seq = self.input.push(event)?;
        self.stats.inputs_sent += 1;
        self.flush_input(now);
        Some(seq)
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
        let cid = match &mut self.state {
            State::Connected(c) => {
                c.last_send_us = now;
                c.cid
            }
            _ => {
                self.pending.clear();
                return;
            }
        };
        let max = self.params().map_or(1200, |p| p.max_datagram as usize);
        while !self.pending.is_empty() {
            let mut len = HEADER_LEN;
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
            encode_control(
                &Header::new(PacketType::Control, cid, self.next_pn),
                &frames,
                &mut out,
            );
            self.next_pn += 1;
            self.push_transmit(out);
        }
    }

    fn push_transmit(&mut self, out: Vec<u8>) {
        self.stats.bytes_sent += out.len() as u64;
        self.stats.datagrams_sent += 1;
        self.transmits.push_back(out);
    }

    /// The next datagram to send to the host.
    pub fn poll_transmit(&mut self, now: Micros) -> Option<Vec<u8>> {
        if !self.pending.is_empty() {
            self.build_control(now);
        }
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Takes one datagram from the host.
    pub fn handle_datagram(&mut self, now: Micros, data: &[u8]) {
        self.stats.bytes_received += data.len() as u64;
        self.stats.datagrams_received += 1;
        let (header, datagram) = match wire::parse(data) {
            Ok(x) => x,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match (&mut self.state, datagram) {
            (State::Connecting { .. }, Datagram::Accept(params)) if header.connection_id != 0 => {
                let interval = params.frame_interval_us();
                let mut acfg = AssemblerConfig {
                    deadline_us: self.cfg.reassembly_deadline_us,
                    ..Default::default()
                };
                acfg.max_frames_in_flight = acfg.max_frames_in_flight.max(4);
                self.state = State::Connected(Box::new(Connected {
                    cid: header.connection_id,
                    params,
                    last_recv_us: now,
                    last_send_us: now,
                    assembler: Assembler::new(acfg),
                    requester: KeyframeRequester::new(interval),
                    next_ping_us: now,
                    pings_in_burst: 0,
                    next_feedback_us: now + self.cfg.feedback_interval_us,
                    jitter_us: 0.0,
                    last_arrival: None,
                }));
                // The Accept is the host's first numbered datagram of the session.
                self.window.record(header.packet_number);
                self.events.push_back(ClientEvent::Connected(params));
                self.flush_input(now);
                self.handle_timeout(now);
            }
            (State::Connecting { .. }, Datagram::Reject(r)) => {
                self.state = State::Closed;
                self.events.push_back(ClientEvent::Rejected {
                    reason: r.reason,
                    message: r.message,
                });
            }
            (
                State::Connected(c),
                d @ (Datagram::Shard(..) | Datagram::Control(_) | Datagram::Audio(_)),
            ) => {
                if header.connection_id != c.cid {
                    self.stats.unknown_connection += 1;
                    return;
                }
                if self.window.record(header.packet_number) != Seen::New {
                    self.stats.duplicate_datagrams += 1;
                    return;
                }
                c.last_recv_us = now;
                match d {
                    Datagram::Shard(sh, payload) => {
                        c.assembler.insert(now, &sh, payload);
                        self.drain_assembler(now);
                    }
                    Datagram::Control(frames) => {
                        for f in frames {
                            self.on_control(now, f);
                        }
                    }
                    Datagram::Audio(p) => self.events.push_back(ClientEvent::Audio(p)),
                    _ => {}
                }
            }
            // A retransmitted Accept, a late Reject, or anything while closed.
            _ => self.stats.unknown_connection += 1,
        }
    }

    fn on_control(&mut self, now: Micros, f: ControlFrame) {
        match f {
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
            ControlFrame::FrameTiming(t) => self.events.push_back(ClientEvent::FrameTiming(t)),
            ControlFrame::Bye { .. } => {
                self.close_state();
                self.pending.clear();
                self.events
                    .push_back(ClientEvent::HostGone(GoneReason::Bye));
            }
            // Only the client sends these.
            ControlFrame::KeyframeRequest { .. }
            | ControlFrame::Feedback(_)
            | ControlFrame::Input { .. } => {}
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
                    if f.keyframe {
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
                    c.requester.poll_timeout(),
                    self.input.poll_timeout(self.rto_us()),
                ]
                .into_iter()
                .flatten()
                .min()
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
            } => {
                if now >= *started_us + self.cfg.connect_timeout_us {
                    self.state = State::Closed;
                    self.events.push_back(ClientEvent::ConnectTimeout);
                    return;
                }
                if now >= *next_hello_us {
                    *next_hello_us = now + self.cfg.hello_interval_us;
                    let mut out = Vec::with_capacity(wire::HELLO_MIN_LEN);
                    Hello {
                        client_nonce: self.cfg.nonce,
                        max_datagram: self.cfg.max_datagram,
                        capabilities: self.cfg.capabilities,
                        name: self.cfg.name.clone(),
                    }
                    .encode(&Header::new(PacketType::Hello, 0, self.next_pn), &mut out);
                    self.next_pn += 1;
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
                }
                let keepalive_due = now >= c.last_send_us + c.params.keepalive_ms as u64 * 1000;
                self.drain_assembler(now);
                self.run_requester(now);
                self.flush_input(now);
                if keepalive_due && self.pending.is_empty() {
                    // An empty control datagram keeps the session alive.
                    if let State::Connected(c) = &mut self.state {
                        c.last_send_us = now;
                        let mut out = Vec::with_capacity(HEADER_LEN);
                        encode_control(
                            &Header::new(PacketType::Control, c.cid, self.next_pn),
                            &[],
                            &mut out,
                        );
                        self.next_pn += 1;
                        self.push_transmit(out);
                    }
                }
            }
        }
    }
}
