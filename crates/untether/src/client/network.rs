//! The client's network driver: the one thread that owns the [`ClientSession`] and its sockets
//! (one per path, each connected to its host address).
//!
//! Other threads hand it [`ClientCommand`]s: input from the window, the application and the
//! registered devices, the decoder's timings and failures, the goodbye. What the session
//! reports goes out as events: complete frames to the decode thread, audio into the playout
//! buffer, the numbers of sent input events to the presenter (which times their response), the
//! connection state and the run's outcome to [`ClientShared`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use untether_media::audio::Playout;
use untether_proto::{
    fingerprint, ClientConfig, ClientEvent, ClientRole, ClientSession, GoneReason, InputEvent,
    Micros, PublicKey, RejectReason, Route, StateKey, StateValue,
};

use super::decode::Piece;
use super::input::state_input;
use super::record::MAX_RECORDS;
use super::{ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::{Endpoint, Outgoing, Via};
use crate::identity::{StateDir, KNOWN_HOSTS_FILE};
use crate::link::{ClientAction, ClientLink};

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

/// The client is between sessions: the host went away and it tries again.
struct Reconnect {
    /// When the host was lost.
    lost_us: Micros,
    attempt: u32,
    /// When the next attempt starts (None: an attempt is under way).
    next_try_us: Option<Micros>,
}

/// Where the client pins the host's key (trust on first use), by name and by address.
pub(crate) struct KnownHosts {
    pub dir: StateDir,
    /// The name the user gave the host.
    pub label: String,
    /// The address and port it resolved to (`ip:port`).
    pub addr: String,
    /// The key pinned before this run (under the name or the address).
    pub pinned: Option<PublicKey>,
    /// The entries that pinned it, described (`"NAME" (ADDR)`).
    pub pinned_by: Vec<String>,
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
    /// A frame failed to decode: ask for a keyframe.
    DecodeFailed(u32),
    /// The client is ending: say goodbye.
    Close,
}

/// The client's network side, run by [`crate::driver::run`].
pub(crate) struct ClientNet {
    pub session: ClientSession,
    shared: Arc<ClientShared>,
    known_hosts: Option<KnownHosts>,
    playout: Option<Arc<Mutex<Playout>>>,
    /// Complete frames (or slices) for the decode thread, in decode order, with the session
    /// they came from and its codec (None, `--no-decode`: frames are counted and dropped here).
    frames: Option<Sender<super::decode::ToDecode>>,
    /// The current session's codec.
    codec: untether_media::codec::Codec,
    /// (sequence number, send time) of each reliable window/probe event, for the presenter.
    sent_inputs: Sender<(u32, Micros)>,
    end_on_host_bye: bool,
    done: bool,
    /// The session settings, to start a new session after the host went away.
    cfg: ClientConfig,
    /// The number of the current session (0: the first; +1 per reconnection).
    session_number: u32,
    connected_once: bool,
    reconnect: Option<Reconnect>,
    /// An ICMP refusal arrived on a live session at this time, with no authenticated datagram
    /// since.
    refused_since: Option<Micros>,
    /// When the counters for the overlay are next published.
    next_live_us: Micros,
    /// The raw layer-2 transport, when this client has a raw socket.
    pub link: Option<ClientLink>,
    /// CPU time of the network thread, µs (set when the driver ends).
    pub cpu_us: u64,
}

impl ClientNet {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: ClientConfig,
        session: ClientSession,
        shared: Arc<ClientShared>,
        known_hosts: Option<KnownHosts>,
        playout: Option<Arc<Mutex<Playout>>>,
        frames: Option<Sender<super::decode::ToDecode>>,
        sent_inputs: Sender<(u32, Micros)>,
        end_on_host_bye: bool,
    ) -> ClientNet {
        ClientNet {
            session,
            shared,
            known_hosts,
            playout,
            frames,
            codec: untether_media::codec::Codec::H264,
            sent_inputs,
            end_on_host_bye,
            done: false,
            cfg,
            session_number: 0,
            connected_once: false,
            reconnect: None,
            next_live_us: 0,
            refused_since: None,
            link: None,
            cpu_us: 0,
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
            });
            self.shared.reconnecting.store(true, Ordering::SeqCst);
            let mut run = super::lock(&self.shared.run);
            // Bounded like the frame records: a host that flaps for days keeps the first ones.
            if run.reconnects.len() < MAX_RECORDS {
                run.reconnects.push((now, 0));
            }
        } else if let Some(r) = self.reconnect.as_mut() {
            // This attempt failed: the next after a backoff.
            r.attempt += 1;
            r.next_try_us = Some(now + retry_delay_us(r.attempt));
        }
        self.refused_since = None;
    }

    /// Starts the next session (a new handshake with the host whose key this run pinned).
    fn try_again(&mut self, now: Micros) {
        let mut cfg = self.cfg.clone();
        cfg.nonce = cfg.nonce.wrapping_add(
            0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(self.session_number) + 1),
        );
        self.session = ClientSession::new(cfg, now);
        self.session_number += 1;
        if let Some(r) = self.reconnect.as_mut() {
            r.next_try_us = None;
            log::info!(
                "client: reconnecting to {} (attempt {})",
                self.shared.host,
                r.attempt + 1
            );
        }
    }

    /// Hands a frame or slice to the decode thread (its end of the channel gone: done).
    fn hand_to_decoder(&mut self, piece: Piece) {
        let Some(tx) = &self.frames else {
            // `--no-decode`: a frame is counted when it is complete (a sliced one at its last
            // slice).
            let whole = match &piece {
                Piece::Frame(_) => true,
                Piece::Slice(f) => f.slice.index + 1 >= f.slice.count,
                Piece::SliceLost { .. } => false,
            };
            if whole {
                super::lock(&self.shared.run).undecoded += 1;
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
        let (mut sent, mut refused, mut state) = (0, 0, 0);
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
                        state += 1;
                    }
                    continue;
                }
            }
            match self.session.send_input(now, ev) {
                Some(seq) => {
                    sent += 1;
                    if kind != InputKind::Device {
                        let _ = self.sent_inputs.send((seq, now));
                    }
                }
                None => refused += 1,
            }
        }
        let mut run = super::lock(&self.shared.run);
        run.inputs_sent += sent;
        run.inputs_refused += refused;
        run.state_updates += state;
        if kind == InputKind::Device {
            run.device_events += sent;
        }
    }

    fn on_event(&mut self, ev: ClientEvent) {
        let s = self.shared.clone();
        let port = s.host.port();
        match ev {
            ClientEvent::Connected(params) => {
                log::info!(
                    "client: connected to {}: {}x{} @ {} fps, {}, {} kbit/s{}",
                    s.host,
                    params.width,
                    params.height,
                    params.fps,
                    params.codec,
                    params.bitrate_kbps,
                    if params.refresh_period > 0 {
                        format!(", refreshing every {} frames", params.refresh_period)
                    } else {
                        String::new()
                    }
                );
                self.codec = crate::config::media_codec(params.codec);
                let host_key = self.session.host_key();
                if host_key.is_some() {
                    // Later sessions (after the host went away) must reach the same host.
                    self.cfg.host_key = host_key;
                }
                self.connected_once = true;
                if let Some(r) = self.reconnect.take() {
                    let now = now_us();
                    log::info!(
                        "client: reconnected to {} after {:.1} s",
                        s.host,
                        (now - r.lost_us) as f64 / 1e6
                    );
                    self.shared.reconnecting.store(false, Ordering::SeqCst);
                    let mut run = super::lock(&s.run);
                    run.session = self.session_number;
                    run.timings.clear();
                }
                if let (Some(kh), Some(key)) = (&self.known_hosts, host_key) {
                    // Trust on first use (or after PIN pairing, which proved the key); a key
                    // pinned under the address only is pinned under the name too, and a name's
                    // entry learns the address it now resolves to.
                    let name_pinned = kh.dir.known_hosts().is_ok_and(|hosts| {
                        hosts
                            .iter()
                            .any(|h| h.host == kh.label && h.addr == kh.addr)
                    });
                    if !name_pinned {
                        match kh.dir.trust_host(&kh.label, &kh.addr, &key) {
                            Ok(()) if kh.pinned.is_none() => log::info!(
                                "client: trusting host {} at {} ({}) from now on ({})",
                                kh.label,
                                kh.addr,
                                fingerprint(&key),
                                kh.dir.file_path(KNOWN_HOSTS_FILE).display()
                            ),
                            Ok(()) => log::info!(
                                "client: host {} at {} ({}) pinned under this name too",
                                kh.label,
                                kh.addr,
                                fingerprint(&key)
                            ),
                            Err(e) => log::warn!("client: cannot pin the host's key: {e}"),
                        }
                    }
                }
                if let Some(l) = self.link.as_mut() {
                    l.on_connected(now_us());
                }
                let mut run = super::lock(&s.run);
                run.params = Some(params);
                run.connected_us = Some(now_us());
                run.host_key = host_key;
            }
            ClientEvent::LinkAddress { ethertype, mac } => {
                if let Some(l) = self.link.as_mut() {
                    l.on_link_address(now_us(), ethertype, mac);
                    if l.report.transport == "raw" {
                        log::info!(
                            "client: the host is at {} on layer 2: raw frames from now on",
                            untether_net::MacAddr(mac)
                        );
                    }
                }
            }
            ClientEvent::LinkDeclined(reason) => {
                if let Some(line) = self.link.as_mut().and_then(|l| l.on_declined(reason)) {
                    log::warn!("client: {line}");
                }
            }
            ClientEvent::Rejected {
                reason: RejectReason::UntrustedHost,
                message,
            } => {
                let (label, file) = match &self.known_hosts {
                    Some(kh) if !kh.pinned_by.is_empty() => {
                        (kh.pinned_by.join(", "), kh.dir.file_path(KNOWN_HOSTS_FILE))
                    }
                    Some(kh) => (
                        format!("{:?}", kh.label),
                        kh.dir.file_path(KNOWN_HOSTS_FILE),
                    ),
                    None => (
                        format!("{:?}", s.host.to_string()),
                        PathBuf::from("(in memory)"),
                    ),
                };
                self.finish(Some(ClientError::HostKeyChanged {
                    host: s.host,
                    label,
                    file,
                    message: untether_proto::sanitize_peer_text(&message),
                }));
            }
            ClientEvent::Rejected { reason, message } => self.finish(Some(ClientError::Rejected {
                host: s.host,
                reason,
                // The host's text (already escaped by the parser; idempotent).
                message: untether_proto::sanitize_peer_text(&message),
            })),
            ClientEvent::ConnectTimeout if self.connected_once => {
                self.lost(now_us(), "does not answer");
            }
            ClientEvent::ConnectTimeout => {
                let secs = (now_us() - super::lock(&s.run).started_us) as f64 / 1e6;
                self.finish(Some(ClientError::NoAnswer {
                    host: s.host,
                    secs,
                    port,
                }));
            }
            ClientEvent::HostGone(GoneReason::Timeout) => {
                self.lost(now_us(), "went silent for longer than the idle timeout");
            }
            ClientEvent::HostGone(
                GoneReason::Bye | GoneReason::ShuttingDown | GoneReason::Failed,
            ) if self.end_on_host_bye => {
                log::info!("client: the host ended the stream");
                super::lock(&s.run).outcome = Some("the host ended the stream".into());
                self.finish(None);
            }
            ClientEvent::HostGone(GoneReason::ShuttingDown) => {
                log::info!("client: host {} shut down", s.host);
                super::lock(&s.run).outcome = Some("the host shut down".into());
                self.finish(None);
            }
            ClientEvent::HostGone(reason) => {
                let reason = match reason {
                    GoneReason::Bye => {
                        "it closed the session (this client was revoked, or the host ended it)"
                    }
                    GoneReason::Replaced => "another run of this client took over",
                    GoneReason::Failed => "it stopped on a failure (see the host's log)",
                    GoneReason::TooSlow => {
                        "it dropped this viewer: this link stayed slower than the host's stream                          (paused to keyframes, it kept falling behind); a faster link, or the                          host streaming at a lower bitrate (--bitrate), would keep it"
                    }
                    GoneReason::Timeout | GoneReason::ShuttingDown => "it went away",
                };
                self.finish(Some(ClientError::HostGone {
                    host: s.host,
                    reason: reason.to_string(),
                }));
            }
            ClientEvent::Frame(frame) => {
                // Decoding runs on its own thread so that audio, input acknowledgements and
                // the next frame's shards are not held behind a decode.
                self.hand_to_decoder(Piece::Frame(frame));
            }
            ClientEvent::Slice(slice) => self.hand_to_decoder(Piece::Slice(slice)),
            ClientEvent::SliceLost {
                frame_number,
                slice,
                ..
            } => self.hand_to_decoder(Piece::SliceLost {
                frame_number,
                slice,
            }),
            ClientEvent::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            } => {
                let mut run = super::lock(&s.run);
                if run.slice_timings.len() < MAX_RECORDS {
                    run.slice_timings
                        .insert(frame_number, (slice_count, first_out_us, last_out_us));
                }
            }
            ClientEvent::Role {
                role,
                input_granted,
                paused,
            } => {
                let what = match (role, input_granted, paused) {
                    (ClientRole::Controller, ..) => {
                        "the controller: its input drives the host's application".to_string()
                    }
                    (ClientRole::Viewer, granted, paused) => format!(
                        "a viewer{}{}",
                        if granted {
                            " with input granted"
                        } else {
                            " (its input is not applied)"
                        },
                        if paused {
                            "; paused to keyframes: this link cannot carry the stream"
                        } else {
                            ""
                        }
                    ),
                };
                log::info!("client: this client is {what}");
                *super::lock(&s.role) = Some((role, input_granted, paused));
                let mut run = super::lock(&s.run);
                run.role = Some(role);
                run.input_granted = input_granted;
                run.times_paused += paused as u32;
            }
            ClientEvent::FramePose {
                frame_number,
                sample,
            } => {
                s.frame_poses
                    .insert(self.session_number, frame_number, sample);
            }
            ClientEvent::FrameTiming(t) => {
                let mut run = super::lock(&s.run);
                if run.timings.len() < MAX_RECORDS {
                    run.timings.insert(t.frame_number, t);
                }
            }
            ClientEvent::Rtt(us) => {
                let mut run = super::lock(&s.run);
                if run.pings.len() < MAX_RECORDS {
                    run.pings.push(us);
                }
            }
            ClientEvent::Audio(p) => {
                if let Some(playout) = &self.playout {
                    super::lock(playout).push(now_us(), p.seq, p.pts_us, &p.opus, &p.prev_opus);
                }
            }
            ClientEvent::FrameLost { .. }
            | ClientEvent::FrameSkipped { .. }
            | ClientEvent::InputAcked { .. } => {}
        }
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
        super::lock(&s.run).refusals += 1;
        if self.reconnect.is_some() {
            // The host is not back yet: the next attempt after a backoff.
            self.lost(now, "refused");
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
                    super::lock(&self.shared.run).state_updates += 1;
                }
            }
            ClientCommand::DecodeTime(us) => self.session.note_decode_time(us),
            ClientCommand::DecodeFailed(frame_number) => {
                self.session.decode_failed(now, frame_number)
            }
            ClientCommand::Close => {
                if self.session.is_connected() {
                    self.session.close(now);
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
        self.shared
            .connected
            .store(self.session.is_connected(), Ordering::SeqCst);
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
            *super::lock(&self.shared.live) = Some(snapshot);
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
