//! The host's side of the protocol, sans-IO: serves one client at a time.
//!
//! Drive it with [`HostSession::handle_datagram`] and [`HostSession::handle_timeout`], feed it
//! encoded frames with [`HostSession::send_frame`], and drain [`HostSession::poll_transmit`] and
//! [`HostSession::poll_event`]; [`HostSession::poll_timeout`] says when to call
//! `handle_timeout` next. It never reads a clock: every call takes `now`.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::assembler::shard_frame;
use crate::keyframe::{KeyframeDecision, KeyframeGate};
use crate::reliable::{InputRecord, ReliableReceiver};
use crate::window::{PacketWindow, Seen};
use crate::wire::{
    self, encode_control, ByeReason, ControlFrame, Datagram, Feedback, FrameTiming, Header, Hello,
    PacketType, Reject, RejectReason, SessionParams, HEADER_LEN, SHARD_HEADER_LEN,
};
use crate::{GoneReason, Micros, Transmit};

/// Host settings.
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub params: SessionParams,
    /// After honouring a keyframe request, ignore further ones for this long.
    pub keyframe_cooldown_us: Micros,
    /// Seeds the connection-id generator (mix in something unpredictable: time, pid).
    pub connection_id_seed: u64,
}

impl HostConfig {
    pub fn new(params: SessionParams) -> Self {
        HostConfig {
            params,
            keyframe_cooldown_us: 50_000,
            connection_id_seed: 0x5eed,
        }
    }
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    /// A client's session started: start its stream with a keyframe.
    ClientConnected {
        addr: SocketAddr,
        name: String,
    },
    ClientGone {
        addr: SocketAddr,
        reason: GoneReason,
    },
    /// Encode the next frame as a keyframe.
    KeyframeRequested,
    /// An input event, in order, exactly once.
    Input(InputRecord),
    Feedback(Feedback),
}

/// The connected client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub addr: SocketAddr,
    pub name: String,
    pub connection_id: u64,
    pub connected_us: Micros,
}

/// Counters of the host session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub bytes_received: u64,
    pub datagrams_received: u64,
    pub shards_sent: u64,
    pub frames_sent: u64,
    /// Datagrams that failed to parse.
    pub malformed_datagrams: u64,
    /// Well-formed datagrams from an address or connection id that has no session.
    pub unknown_connection: u64,
    pub duplicate_datagrams: u64,
    pub hellos_rejected: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_honoured: u64,
    pub keyframe_requests_ignored_cooldown: u64,
    pub keyframe_requests_ignored_already_sent: u64,
    pub inputs_received: u64,
    pub inputs_duplicate: u64,
    pub clients_connected: u64,
}

/// No client to send to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no client is connected")]
pub struct NoClient;

struct Peer {
    info: ClientInfo,
    nonce: u64,
    last_recv_us: Micros,
    last_send_us: Micros,
    next_pn: u64,
    window: PacketWindow,
    input: ReliableReceiver,
    /// Control frames waiting for the next control datagram.
    pending: Vec<ControlFrame>,
    feedback: Option<Feedback>,
}

/// The host's protocol state machine.
pub struct HostSession {
    cfg: HostConfig,
    peer: Option<Peer>,
    gate: KeyframeGate,
    rng: u64,
    transmits: VecDeque<Transmit>,
    events: VecDeque<HostEvent>,
    stats: HostStats,
}

/// splitmix64: a tiny, good-enough generator for connection ids (not a secret; the secure
/// handshake replaces it).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl HostSession {
    pub fn new(cfg: HostConfig) -> Self {
        HostSession {
            gate: KeyframeGate::new(cfg.keyframe_cooldown_us),
            rng: cfg.connection_id_seed,
            cfg,
            peer: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: HostStats::default(),
        }
    }

    pub fn params(&self) -> &SessionParams {
        &self.cfg.params
    }

    /// Changes the bitrate announced to future clients.
    pub fn set_bitrate_kbps(&mut self, kbps: u32) {
        self.cfg.params.bitrate_kbps = kbps;
    }

    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        s.keyframe_requests_honoured = self.gate.honoured;
        s.keyframe_requests_ignored_cooldown = self.gate.ignored_cooldown;
        s.keyframe_requests_ignored_already_sent = self.gate.ignored_already_sent;
        s
    }

    /// The connected client, if any.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.peer.as_ref().map(|p| &p.info)
    }

    /// The client's latest feedback.
    pub fn feedback(&self) -> Option<Feedback> {
        self.peer.as_ref().and_then(|p| p.feedback)
    }

    fn reply(&mut self, dst: SocketAddr, payload: Vec<u8>) {
        self.stats.bytes_sent += payload.len() as u64;
        self.stats.datagrams_sent += 1;
        self.transmits.push_back(Transmit { dst, payload });
    }

    /// Takes one datagram from the network.
    pub fn handle_datagram(&mut self, now: Micros, from: SocketAddr, data: &[u8]) {
        self.stats.bytes_received += data.len() as u64;
        self.stats.datagrams_received += 1;
        let (header, datagram) = match wire::parse(data) {
            Ok(x) => x,
            Err(wire::WireError::Version(v)) => {
                self.stats.malformed_datagrams += 1;
                // A Hello from a client of another version gets an answer it can show; anything
                // else is dropped. (Answer only datagrams at least as large as a Hello.)
                if data.len() >= wire::HELLO_MIN_LEN
                    && data.get(1) == Some(&(PacketType::Hello as u8))
                {
                    self.reject(
                        from,
                        RejectReason::Version,
                        format!(
                            "this host speaks untether protocol version {}, the client {v}",
                            wire::VERSION
                        ),
                    );
                }
                return;
            }
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        match datagram {
            Datagram::Hello(hello) => self.on_hello(now, from, &header, hello, data.len()),
            Datagram::Control(frames) => {
                let Some(peer) = self.peer.as_mut() else {
                    self.stats.unknown_connection += 1;
                    return;
                };
                if peer.info.addr != from || header.connection_id != peer.info.connection_id {
                    self.stats.unknown_connection += 1;
                    return;
                }
                if peer.window.record(header.packet_number) != Seen::New {
                    self.stats.duplicate_datagrams += 1;
                    return;
                }
                peer.last_recv_us = now;
                for f in frames {
                    self.on_control(now, f);
                }
            }
            // Only the host sends these.
            Datagram::Accept(_)
            | Datagram::Reject(_)
            | Datagram::Shard(..)
            | Datagram::Audio(_) => {
                self.stats.unknown_connection += 1;
            }
        }
    }

    fn reject(&mut self, to: SocketAddr, reason: RejectReason, message: String) {
        self.stats.hellos_rejected += 1;
        let mut out = Vec::with_capacity(64 + message.len());
        Reject { reason, message }.encode(&Header::new(PacketType::Reject, 0, 0), &mut out);
        self.reply(to, out);
    }

    fn on_hello(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        hello: Hello,
        len: usize,
    ) {
        if len < wire::HELLO_MIN_LEN {
            // Unpadded: answering could amplify a spoofed source's traffic.
            self.stats.malformed_datagrams += 1;
            return;
        }
        let _ = header;
        let codec_cap = match self.cfg.params.codec {
            wire::Codec::H264 => wire::caps::H264,
            wire::Codec::H264Rgb => wire::caps::H264_RGB,
        };
        if hello.capabilities & codec_cap == 0 {
            return self.reject(
                from,
                RejectReason::Codec,
                format!(
                    "the host streams {:?}, which this client cannot decode",
                    self.cfg.params.codec
                ),
            );
        }
        if let Some(peer) = &self.peer {
            if peer.info.addr == from && peer.nonce == hello.client_nonce {
                // Our Accept was lost: send it again.
                let cid = peer.info.connection_id;
                self.send_accept(from, cid);
                return;
            }
            if peer.info.addr != from {
                let msg = format!(
                    "the host is serving client {:?} at {}; one client at a time",
                    peer.info.name, peer.info.addr
                );
                return self.reject(from, RejectReason::Busy, msg);
            }
            // Same address, new client run: the old one is gone.
            let old = peer.info.addr;
            self.peer = None;
            self.events.push_back(HostEvent::ClientGone {
                addr: old,
                reason: GoneReason::Replaced,
            });
        }
        let mut cid = splitmix(&mut self.rng);
        while cid == 0 {
            cid = splitmix(&mut self.rng);
        }
        self.peer = Some(Peer {
            info: ClientInfo {
                addr: from,
                name: hello.name.clone(),
                connection_id: cid,
                connected_us: now,
            },
            nonce: hello.client_nonce,
            last_recv_us: now,
            last_send_us: now,
            next_pn: 1,
            window: PacketWindow::new(),
            input: ReliableReceiver::new(),
            pending: Vec::new(),
            feedback: None,
        });
        self.gate.reset();
        self.stats.clients_connected += 1;
        self.send_accept(from, cid);
        self.events.push_back(HostEvent::ClientConnected {
            addr: from,
            name: hello.name,
        });
    }

    fn send_accept(&mut self, to: SocketAddr, cid: u64) {
        let mut out = Vec::with_capacity(HEADER_LEN + SessionParams::LEN);
        self.cfg
            .params
            .encode(&Header::new(PacketType::Accept, cid, 0), &mut out);
        self.reply(to, out);
    }

    fn on_control(&mut self, now: Micros, f: ControlFrame) {
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        match f {
            ControlFrame::KeyframeRequest { lost_frame } => {
                self.stats.keyframe_requests_received += 1;
                if self.gate.on_request(now, lost_frame) == KeyframeDecision::Honour {
                    self.events.push_back(HostEvent::KeyframeRequested);
                }
            }
            ControlFrame::Feedback(fb) => {
                peer.feedback = Some(fb);
                self.events.push_back(HostEvent::Feedback(fb));
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
            ControlFrame::Pong { .. } => {}
            ControlFrame::Input { first_seq, events } => {
                let mut out = Vec::new();
                let before = peer.input.duplicates;
                peer.input.on_events(first_seq, &events, &mut out);
                self.stats.inputs_duplicate += peer.input.duplicates - before;
                self.stats.inputs_received += out.len() as u64;
                for rec in out {
                    self.events.push_back(HostEvent::Input(rec));
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
            ControlFrame::Bye { .. } => {
                let addr = peer.info.addr;
                self.peer = None;
                self.events.push_back(HostEvent::ClientGone {
                    addr,
                    reason: GoneReason::Bye,
                });
            }
            // Only the host sends these.
            ControlFrame::InputAck { .. } | ControlFrame::FrameTiming(_) => {}
        }
    }

    /// Packetizes one encoded frame (an Annex B access unit) into shards for the client;
    /// returns how many datagrams it queued.
    pub fn send_frame(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        let max = self.cfg.params.max_datagram as usize;
        let peer = self.peer.as_mut().ok_or(NoClient)?;
        if data.is_empty() {
            return Ok(0);
        }
        let max_payload = max - HEADER_LEN - SHARD_HEADER_LEN;
        let mut n = 0;
        let (cid, dst) = (peer.info.connection_id, peer.info.addr);
        for (sh, range) in shard_frame(frame_number, capture_us, keyframe, data.len(), max_payload)
        {
            let mut out = Vec::with_capacity(HEADER_LEN + SHARD_HEADER_LEN + range.len());
            Header::new(PacketType::Shard, cid, peer.next_pn).write(&mut out);
            peer.next_pn += 1;
            sh.write(&mut out);
            out.extend_from_slice(&data[range]);
            self.stats.bytes_sent += out.len() as u64;
            self.stats.datagrams_sent += 1;
            self.transmits.push_back(Transmit { dst, payload: out });
            n += 1;
        }
        peer.last_send_us = now;
        self.stats.shards_sent += n as u64;
        self.stats.frames_sent += 1;
        if keyframe {
            self.gate.on_keyframe_sent(frame_number);
        }
        Ok(n)
    }

    /// Queues one audio packet for the client (one datagram, sent after queued shards).
    pub fn send_audio(
        &mut self,
        now: Micros,
        packet: &crate::audio::AudioPacket,
    ) -> Result<(), NoClient> {
        let peer = self.peer.as_mut().ok_or(NoClient)?;
        let mut out = Vec::with_capacity(HEADER_LEN + packet.encoded_len());
        Header::new(PacketType::Audio, peer.info.connection_id, peer.next_pn).write(&mut out);
        peer.next_pn += 1;
        packet.encode(&mut out);
        peer.last_send_us = now;
        self.stats.bytes_sent += out.len() as u64;
        self.stats.datagrams_sent += 1;
        let dst = peer.info.addr;
        self.transmits.push_back(Transmit { dst, payload: out });
        Ok(())
    }

    /// Queues a frame's timing report for the client.
    pub fn send_frame_timing(&mut self, _now: Micros, timing: FrameTiming) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::FrameTiming(timing));
        }
    }

    /// Ends the session with the client (host shutting down).
    pub fn close(&mut self, _now: Micros) {
        if let Some(peer) = self.peer.as_mut() {
            peer.pending.push(ControlFrame::Bye {
                reason: ByeReason::ShuttingDown,
            });
        }
    }

    /// The next datagram to send. Control datagrams go before queued shards: they are small and
    /// time-critical (pongs, acks).
    pub fn poll_transmit(&mut self, now: Micros) -> Option<Transmit> {
        if let Some(peer) = self.peer.as_mut() {
            if !peer.pending.is_empty() {
                let max = self.cfg.params.max_datagram as usize;
                let mut frames = Vec::new();
                let mut len = HEADER_LEN;
                let mut closing = false;
                while let Some(f) = peer.pending.first() {
                    let l = f.encoded_len();
                    if !frames.is_empty() && len + l > max {
                        break;
                    }
                    let mut f = peer.pending.remove(0);
                    if let ControlFrame::Pong { sent_us, .. } = &mut f {
                        *sent_us = now;
                    }
                    closing |= matches!(f, ControlFrame::Bye { .. });
                    len += l;
                    frames.push(f);
                }
                let mut out = Vec::with_capacity(len);
                encode_control(
                    &Header::new(PacketType::Control, peer.info.connection_id, peer.next_pn),
                    &frames,
                    &mut out,
                );
                peer.next_pn += 1;
                peer.last_send_us = now;
                let dst = peer.info.addr;
                if closing {
                    self.peer = None;
                }
                self.stats.bytes_sent += out.len() as u64;
                self.stats.datagrams_sent += 1;
                return Some(Transmit { dst, payload: out });
            }
        }
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let p = self.peer.as_ref()?;
        let keepalive = p.last_send_us + self.cfg.params.keepalive_ms as u64 * 1000;
        let idle = p.last_recv_us + self.cfg.params.idle_timeout_ms as u64 * 1000;
        Some(keepalive.min(idle))
    }

    /// Runs timers: the idle timeout and keep-alives.
    pub fn handle_timeout(&mut self, now: Micros) {
        let keepalive_us = self.cfg.params.keepalive_ms as u64 * 1000;
        let idle_us = self.cfg.params.idle_timeout_ms as u64 * 1000;
        let Some(peer) = self.peer.as_mut() else {
            return;
        };
        if now >= peer.last_recv_us + idle_us {
            let addr = peer.info.addr;
            self.peer = None;
            self.events.push_back(HostEvent::ClientGone {
                addr,
                reason: GoneReason::Timeout,
            });
            return;
        }
        if now >= peer.last_send_us + keepalive_us && peer.pending.is_empty() {
            // An empty control datagram.
            let mut out = Vec::with_capacity(HEADER_LEN);
            encode_control(
                &Header::new(PacketType::Control, peer.info.connection_id, peer.next_pn),
                &[],
                &mut out,
            );
            peer.next_pn += 1;
            peer.last_send_us = now;
            let dst = peer.info.addr;
            self.reply(dst, out);
        }
    }
}
