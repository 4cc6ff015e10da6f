//! WebRTC as one more kind of session the host's network driver serves: browsers that asked
//! for the stream (WHEP-style: the page posts an offer, the host answers) and the host's own
//! WHIP publication, each a str0m [`Rtc`](str0m::Rtc) owned by the driver's [`WebRtc`] field of
//! `HostNet`, fed from the **same** encoder's access units and the same Opus packets as our own
//! clients, all on one UDP socket (the driver's socket 1) demultiplexed with `Rtc::accepts`.
//!
//! - `http`: the small HTTP(S) server (a thread beside the driver): the page, the signalling
//!   endpoint, the clock;
//! - `whip`: the publishing thread (offer, POST, answer, DELETE at the end);
//! - `peer`: one session; `access`: links, PINs and resume secrets; `input`: the data channel's
//!   messages; `h264`: the stream's profile; `cert`: HTTPS certificates.
//!
//! Roles: with one of our own clients connected, browsers are viewers (their input is dropped
//! and counted). Without one, the first browser admitted is the controller: its input goes to
//! the host's input sink like a client's, numbered from 0 in the scene's stamp (the page is
//! told its role and where its numbering starts).

mod access;
mod api;
mod cert;
mod h264;
mod http;
mod input;
mod peer;
mod whip;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::{Sender, SyncSender};
use std::sync::Arc;

use str0m::change::SdpOffer;
use str0m::{Candidate, RtcConfig};
use untether_proto::{AudioPacket, InputRecord, Micros};

pub(crate) use access::{Credential, PinCheck, Refusal};
use h264::CONSTRAINED_BASELINE_X264;
use http::start_http;
use whip::start_whip;

use super::encode::EncoderEvent;
use super::input::InputSink;
use super::network::OutgoingFrame;
use super::shared::HostShared;
use crate::driver::{Outgoing, Via};
use access::Admission;
use peer::{Clock, Kind, Out, Peer, PeerEvent};

/// The driver's first WebRTC socket (0 is our protocol's): browsers' media, then the
/// publication's (bound to the address that routes to the WHIP endpoint).
pub(crate) const SOCKET: usize = 1;

/// How long a browser may take from its answer to a connection (ICE + DTLS).
const CONNECT_TIMEOUT_US: Micros = 15_000_000;

/// An admitted browser's offer, checked and ready on the HTTP thread.
pub(crate) struct OfferRequest {
    pub offer: SdpOffer,
    /// The session's configuration (codecs, its DTLS certificate made on the HTTP thread).
    pub config: RtcConfig,
    pub credential: Credential,
    /// The browser's HTTP address.
    pub from: SocketAddr,
    pub reply: SyncSender<Result<Answer, Refusal>>,
}

/// The host's answer to a browser.
#[derive(Debug)]
pub(crate) struct Answer {
    pub id: u64,
    pub sdp: String,
    pub resume: String,
}

/// A WHIP publication whose SDP exchange is done, handed to the driver.
pub(crate) struct Publication {
    pub rtc: str0m::Rtc,
    pub mids: Vec<str0m::media::Mid>,
    pub label: String,
}

/// What other threads hand the driver about WebRTC.
pub(crate) enum WebRtcCommand {
    Offer(Box<OfferRequest>),
    /// The browser's DELETE of its session (false: no such session).
    Delete {
        id: u64,
        reply: SyncSender<bool>,
    },
    Publish(Box<Publication>),
    /// The WHIP publication ended on the thread's side (stop): close it.
    Unpublish,
}

/// What the WebRTC sessions counted (the host's summary and report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebRtcSummary {
    /// Offers admitted and answered.
    pub browsers_admitted: u64,
    /// Offers refused: not admitted (no or a bad link, PIN or resume secret).
    pub browsers_refused: u64,
    /// Offers refused because the browser cannot decode the stream or the host was full.
    pub browsers_unsupported: u64,
    /// Browsers whose connection came up.
    pub browsers_connected: u64,
    pub frames_sent: u64,
    pub audio_packets: u64,
    pub keyframe_requests: u64,
    /// Browser input events delivered to the input sink.
    pub inputs_delivered: u64,
    /// Input of viewers (dropped, as their role says).
    pub inputs_dropped_viewer: u64,
    /// Malformed data channel messages (dropped).
    pub inputs_malformed: u64,
    /// Datagrams on the WebRTC socket no session took (counted and dropped).
    pub datagrams_unmatched: u64,
    /// The WHIP publication: connected, and the frames it sent.
    pub published: bool,
    pub publish_frames: u64,
}

/// The browsers and the publication, as the host's driver holds them.
pub(crate) struct WebRtc {
    clock: Clock,
    /// The browsers' socket (driver index, local address: its port is the candidates'), and
    /// the address it was asked to listen on (unspecified: the route towards each browser
    /// decides the candidate's address).
    browser_socket: Option<(usize, SocketAddr)>,
    listen_ip: IpAddr,
    /// The publication's socket.
    publish_socket: Option<(usize, SocketAddr)>,
    peers: Vec<Peer>,
    pub admission: Admission,
    max_browsers: usize,
    next_id: u64,
    out: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    tmp: Out,
    pub summary: WebRtcSummary,
    keyframe_cooldown_us: Micros,
    last_keyframe_us: Option<Micros>,
    /// The browser whose input drives the host when none of our own clients is connected.
    controller: Option<u64>,
    input_seq: u32,
    input_epoch: u64,
    profile_noted: bool,
}

/// What the driver lends the WebRTC side while it handles events.
pub(crate) struct DriverParts<'a> {
    pub shared: &'a HostShared,
    pub sink: &'a mut InputSink,
    pub encoder: &'a Sender<EncoderEvent>,
    /// The controller epoch the driver publishes; bumped when a browser becomes the controller.
    pub epoch: &'a mut u64,
    /// One of our own clients is connected (browsers are viewers then).
    pub native_client: bool,
}

impl WebRtc {
    pub fn new(
        browser_socket: Option<(usize, SocketAddr)>,
        listen_ip: IpAddr,
        publish_socket: Option<(usize, SocketAddr)>,
        open: bool,
        link_ttl_s: u64,
        max_browsers: u32,
        keyframe_cooldown_us: Micros,
    ) -> WebRtc {
        WebRtc {
            clock: Clock::now(),
            browser_socket,
            listen_ip,
            publish_socket,
            peers: Vec::new(),
            admission: Admission::new(open, link_ttl_s),
            max_browsers: max_browsers as usize,
            next_id: 1,
            out: VecDeque::new(),
            tmp: Vec::new(),
            summary: WebRtcSummary::default(),
            keyframe_cooldown_us,
            last_keyframe_us: None,
            controller: None,
            input_seq: 0,
            input_epoch: 0,
            profile_noted: false,
        }
    }

    /// Browsers (and the publication) that want frames: the encoder runs for them.
    pub fn has_viewers(&self) -> bool {
        self.peers.iter().any(|p| p.connected && p.gone.is_none())
    }

    fn browsers(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| p.kind == Kind::Browser && p.gone.is_none())
            .count()
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        let first = self.peers.iter().map(|p| p.next_timeout()).min()?;
        Some(self.clock.micros(first))
    }

    pub fn handle_datagram(&mut self, now: Micros, socket: usize, from: SocketAddr, data: &[u8]) {
        let t = self.clock.instant(now);
        let found = self
            .peers
            .iter_mut()
            .find(|p| p.socket == socket && p.accepts(t, from, data));
        match found {
            Some(p) => p.handle_datagram(t, from, data, &mut self.tmp),
            None => self.summary.datagrams_unmatched += 1,
        }
        self.out.extend(self.tmp.drain(..));
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        let t = self.clock.instant(now);
        for p in &mut self.peers {
            p.handle_timeout(t, &mut self.tmp);
            if !p.connected && p.gone.is_none() && now > p.created_us + CONNECT_TIMEOUT_US {
                p.gone = Some("no connection within 15 s (ICE/DTLS)".into());
                p.events
                    .push(PeerEvent::Gone("no connection within 15 s".into()));
            }
        }
        self.out.extend(self.tmp.drain(..));
    }

    /// The candidate address a browser at `from` reaches us at.
    fn candidate_for(&self, remote: IpAddr, port: u16) -> SocketAddr {
        let ip = if self.listen_ip.is_unspecified() {
            route_source(remote).unwrap_or(self.listen_ip)
        } else {
            self.listen_ip
        };
        SocketAddr::new(ip, port)
    }

    /// Handles a command from the HTTP or WHIP thread.
    pub fn handle_command(
        &mut self,
        now: Micros,
        cmd: WebRtcCommand,
        shared: &HostShared,
        pins: &mut dyn PinCheck,
    ) {
        match cmd {
            WebRtcCommand::Offer(req) => {
                let OfferRequest {
                    offer,
                    config,
                    credential,
                    from,
                    reply,
                } = *req;
                let parts = OfferParts {
                    offer,
                    config,
                    credential,
                    from,
                };
                let r = self.offer(now, parts, pins, shared);
                self.summary_for(&r);
                let _ = reply.send(r);
            }
            WebRtcCommand::Delete { id, reply } => {
                let found = match self.peers.iter_mut().find(|p| p.id == id) {
                    Some(p) => {
                        p.close(&mut self.tmp);
                        shared.note(format!("browser {id} ({}) left (DELETE)", p.label));
                        true
                    }
                    None => false,
                };
                self.out.extend(self.tmp.drain(..));
                let _ = reply.send(found);
            }
            WebRtcCommand::Publish(p) => {
                let Some(socket) = self.publish_socket else {
                    return;
                };
                let id = self.next_id;
                self.next_id += 1;
                let mut peer = Peer::new(
                    id,
                    Kind::Publisher,
                    p.label.clone(),
                    p.rtc,
                    &p.mids,
                    socket,
                    now,
                    &self.clock,
                );
                peer.drain(&mut self.tmp);
                self.out.extend(self.tmp.drain(..));
                shared.note(format!("publishing to {} (WHIP)", p.label));
                self.peers.push(peer);
            }
            WebRtcCommand::Unpublish => {
                for p in self.peers.iter_mut().filter(|p| p.kind == Kind::Publisher) {
                    p.close(&mut self.tmp);
                }
                self.out.extend(self.tmp.drain(..));
            }
        }
    }

    fn summary_for(&mut self, r: &Result<Answer, Refusal>) {
        match r {
            Ok(_) => self.summary.browsers_admitted += 1,
            Err(e) if e.status == 401 || e.status == 403 => self.summary.browsers_refused += 1,
            Err(_) => self.summary.browsers_unsupported += 1,
        }
    }

    fn offer(
        &mut self,
        now: Micros,
        req: OfferParts,
        pins: &mut dyn PinCheck,
        shared: &HostShared,
    ) -> Result<Answer, Refusal> {
        if self.browsers() >= self.max_browsers {
            return Err(Refusal::new(
                503,
                format!(
                    "the host serves {} browsers already (webrtc.max_browsers)",
                    self.max_browsers
                ),
            ));
        }
        let Some(socket) = self.browser_socket else {
            return Err(Refusal::new(503, "this host does not serve browsers"));
        };
        let mut rtc = req.config.build(self.clock.instant(now));
        let cand = self.candidate_for(req.from.ip(), socket.1.port());
        let candidate = Candidate::host(cand, "udp")
            .map_err(|e| Refusal::new(500, format!("host candidate {cand}: {e}")))?;
        rtc.add_local_candidate(candidate);
        let answer = rtc
            .sdp_api()
            .accept_offer(req.offer)
            .map_err(|e| Refusal::new(400, format!("cannot answer this offer: {e}")))?
            .to_sdp_string();
        let id = self.next_id;
        let mut peer = Peer::new(
            id,
            Kind::Browser,
            req.from.to_string(),
            rtc,
            &peer::answer_mids(&answer),
            socket,
            now,
            &self.clock,
        );
        if !peer.has_video() {
            return Err(Refusal::new(
                406,
                "this browser offers no H.264 constrained baseline with packetization-mode 1 \
                 (the one stream the host encodes); Chrome, Edge and Safari do, Firefox with \
                 its OpenH264 plugin",
            ));
        }
        // Admission last, so that a refused offer uses up no link or PIN attempt for nothing
        // but a bad credential; until admitted, the session has sent nothing and is dropped.
        let resume = self
            .admission
            .admit(now, &req.credential, pins)
            .inspect_err(|e| {
                shared.note(format!("refused browser at {}: {}", req.from, e.reason));
            })?;
        self.next_id += 1;
        peer.drain(&mut self.tmp);
        self.out.extend(self.tmp.drain(..));
        shared.note(format!(
            "browser {id} at {} admitted{}; connecting to udp {cand}",
            req.from,
            if peer.has_audio() {
                " (video, audio)"
            } else {
                " (video)"
            }
        ));
        self.peers.push(peer);
        Ok(Answer {
            id,
            sdp: answer,
            resume,
        })
    }

    /// Hands an encoded frame to every connected session (the same access unit our clients
    /// get: no second encode).
    pub fn send_frame(&mut self, f: &OutgoingFrame, shared: &HostShared) {
        self.send_access_unit(&f.data, f.keyframe, f.capture_us, shared);
    }

    /// Hands an access unit (a frame sent whole, or a sliced frame's slices put together) to
    /// every connected session.
    pub fn send_access_unit(
        &mut self,
        au: &[u8],
        keyframe: bool,
        capture_us: Micros,
        shared: &HostShared,
    ) {
        if !self.peers.iter().any(|p| p.connected && p.gone.is_none()) {
            return;
        }
        if keyframe && !self.profile_noted {
            if let Some(p) = h264::sps_profile(au) {
                self.profile_noted = true;
                if !p.constrained_baseline() {
                    shared.note(format!(
                        "the stream is H.264 {}; browsers are offered constrained baseline and \
                         may not decode it",
                        p.name()
                    ));
                }
            }
        }
        let data: Arc<[u8]> = Arc::from(au);
        let capture = self.clock.instant(capture_us);
        for p in &mut self.peers {
            if p.send_frame(capture, capture_us, keyframe, &data, &mut self.tmp) {
                self.summary.frames_sent += 1;
                if p.kind == Kind::Publisher {
                    self.summary.publish_frames += 1;
                }
            }
        }
        self.out.extend(self.tmp.drain(..));
    }

    /// Hands Opus packets to every connected session with audio.
    pub fn send_audio(&mut self, packets: &[AudioPacket]) {
        for a in packets {
            let t = self.clock.instant(a.pts_us);
            for p in &mut self.peers {
                p.send_audio(t, a.pts_us, &a.opus, &mut self.tmp);
            }
            self.summary.audio_packets += 1;
        }
        self.out.extend(self.tmp.drain(..));
    }

    /// Acts on what the sessions reported: keyframe requests to the encoder, input to the
    /// sink (from the controller), roles, sessions that ended.
    pub fn handle_events(&mut self, now: Micros, link: DriverParts<'_>) {
        let mut keyframe = false;
        let mut msgs: Vec<(u64, Vec<u8>)> = Vec::new();
        for p in &mut self.peers {
            for e in std::mem::take(&mut p.events) {
                match e {
                    PeerEvent::Connected => {
                        keyframe = true;
                        match p.kind {
                            Kind::Browser => {
                                self.summary.browsers_connected += 1;
                                link.shared
                                    .note(format!("browser {} ({}) connected", p.id, p.label));
                            }
                            Kind::Publisher => {
                                self.summary.published = true;
                                link.shared.note(format!("WHIP: publishing to {}", p.label));
                            }
                        }
                    }
                    PeerEvent::KeyframeRequest => {
                        self.summary.keyframe_requests += 1;
                        keyframe = true;
                    }
                    PeerEvent::Input(data) => msgs.push((p.id, data)),
                    PeerEvent::Gone(why) => {
                        link.shared
                            .note(format!("{} {} gone: {why}", kind_name(p.kind), p.label));
                    }
                }
            }
        }
        if keyframe {
            let due = self
                .last_keyframe_us
                .is_none_or(|t| now >= t + self.keyframe_cooldown_us);
            if due {
                self.last_keyframe_us = Some(now);
                let _ = link.encoder.send(EncoderEvent::Keyframe);
            }
        }
        self.peers.retain(|p| p.gone.is_none());
        self.update_roles(link.native_client, link.shared, link.epoch);
        for (id, data) in msgs {
            self.on_input(
                id,
                &data,
                link.shared,
                link.sink,
                *link.epoch,
                link.native_client,
            );
        }
        self.out.extend(self.tmp.drain(..));
    }

    /// Picks the controller: none while one of our clients is connected, else the oldest
    /// connected browser. A new controller starts a new epoch (the scene counts its input
    /// from 0) and is told so.
    fn update_roles(&mut self, native: bool, shared: &HostShared, epoch: &mut u64) {
        let current = self
            .controller
            .filter(|id| self.peers.iter().any(|p| p.id == *id && p.connected));
        let wanted = if native {
            None
        } else {
            current.or_else(|| {
                self.peers
                    .iter()
                    .find(|p| p.kind == Kind::Browser && p.connected && p.has_input())
                    .map(|p| p.id)
            })
        };
        if wanted == self.controller {
            return;
        }
        self.controller = wanted;
        if let Some(id) = wanted {
            *epoch = shared.link.new_controller();
            self.input_epoch = *epoch;
            self.input_seq = 0;
            shared.note(format!(
                "browser {id} is the controller (its input drives the host)"
            ));
        }
        for p in self.peers.iter_mut().filter(|p| p.kind == Kind::Browser) {
            let role = if Some(p.id) == wanted {
                "controller"
            } else {
                "viewer"
            };
            p.send_text(
                &format!(r#"{{"k":"role","role":"{role}","seq":0}}"#),
                &mut self.tmp,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_input(
        &mut self,
        id: u64,
        data: &[u8],
        shared: &HostShared,
        sink: &mut InputSink,
        epoch: u64,
        native: bool,
    ) {
        match input::parse(data) {
            Ok(input::Message::Ping(t)) => {
                if let Some(p) = self.peers.iter_mut().find(|p| p.id == id) {
                    let role = if Some(id) == self.controller {
                        "controller"
                    } else {
                        "viewer"
                    };
                    p.send_text(
                        &format!(
                            r#"{{"k":"pong","t":{t},"host_us":{},"role":"{role}"}}"#,
                            crate::clock::now_us()
                        ),
                        &mut self.tmp,
                    );
                }
            }
            Ok(input::Message::Input(event)) => {
                if native || Some(id) != self.controller {
                    self.summary.inputs_dropped_viewer += 1;
                    return;
                }
                if self.input_epoch != epoch {
                    // A new epoch (one of our clients came and went): count from 0 again.
                    self.input_epoch = epoch;
                    self.input_seq = 0;
                }
                let seq = self.input_seq;
                self.input_seq = self.input_seq.wrapping_add(1);
                self.summary.inputs_delivered += 1;
                sink.deliver(shared, epoch, true, InputRecord { seq, event });
            }
            Ok(input::Message::Ignored) => {
                // Counted in the numbering too: the page numbers every event it sends.
                if Some(id) == self.controller && !native {
                    self.input_seq = self.input_seq.wrapping_add(1);
                }
            }
            Err(why) => {
                if self.summary.inputs_malformed == 0 {
                    shared.note(format!(
                        "browser {id}: malformed input message dropped ({why})"
                    ));
                }
                self.summary.inputs_malformed += 1;
            }
        }
    }

    /// The driver's last turn: close every session (DTLS close_notify, RTCP BYE).
    pub fn close_all(&mut self) {
        for p in &mut self.peers {
            p.close(&mut self.tmp);
        }
        self.out.extend(self.tmp.drain(..));
    }

    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front().map(|(socket, dst, payload)| Outgoing {
            via: Via::Socket(socket),
            dst: Some(dst),
            payload,
        })
    }

    /// The current one-time link's token (made when there is none).
    pub fn link_token(&mut self, now: Micros) -> String {
        self.admission.link_token(now)
    }
}

/// The fields of an offer request (its reply channel stays with the request).
struct OfferParts {
    offer: SdpOffer,
    config: RtcConfig,
    credential: Credential,
    from: SocketAddr,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Browser => "browser",
        Kind::Publisher => "WHIP publication to",
    }
}

/// The local address the kernel would send from to reach `remote` (no packet is sent).
pub(crate) fn route_source(remote: IpAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if remote.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect(SocketAddr::new(remote, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The codecs and extensions every session of the host uses: H.264 constrained baseline
/// (packetization mode 1) and Opus, the playout-delay extension, no bandwidth estimation
/// (the encoder's rate is the host's).
pub(crate) fn rtc_config() -> RtcConfig {
    let mut cfg = RtcConfig::new()
        .clear_codecs()
        .enable_opus(true, false)
        .set_extension(5, str0m::rtp::Extension::PlayoutDelay);
    cfg.codec_config().add_h264(
        str0m::media::Pt::new_with_value(102),
        Some(str0m::media::Pt::new_with_value(103)),
        true,
        h264::PROFILE_LEVEL_ID,
    );
    cfg
}

/// Where browsers find the host, for the link it prints.
#[derive(Clone, Debug)]
pub(crate) struct BrowserInfo {
    /// `http(s)://ADDR:PORT/` (ADDR: the listen address, or this machine's address on the
    /// default route when listening on every interface).
    pub base_url: String,
    /// The page's certificate fingerprint (HTTPS only).
    pub fingerprint: Option<String>,
}

/// What [`start`] made: the driver's WebRTC side, its socket, the threads, the page's address.
pub(crate) struct Started {
    pub webrtc: Box<WebRtc>,
    /// The driver's sockets from [`SOCKET`] on.
    pub sockets: Vec<untether_net::UdpEndpoint>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
    pub browsers: Option<BrowserInfo>,
}

impl Started {
    /// The driver's sockets (ours, then the WebRTC one), its WebRTC side and the page's
    /// address; the threads join the host's.
    pub fn split(
        started: Option<Started>,
        socket: untether_net::UdpEndpoint,
        threads: &mut Vec<std::thread::JoinHandle<()>>,
    ) -> (
        Vec<untether_net::UdpEndpoint>,
        Option<Box<WebRtc>>,
        Option<BrowserInfo>,
    ) {
        match started {
            None => (vec![socket], None, None),
            Some(w) => {
                threads.extend(w.threads);
                let mut all = vec![socket];
                all.extend(w.sockets);
                (all, Some(w.webrtc), w.browsers)
            }
        }
    }
}

/// A host that serves browsers or publishes encodes constrained baseline, the H.264 profile
/// every WebRTC browser decodes: the one stream is encoded so (no second encode for them).
pub(crate) fn prepare(options: &crate::host::HostOptions, setup: &mut crate::host::HostSetup) {
    if options.webrtc.enabled() {
        if !setup.x264_params.is_empty() {
            setup.x264_params.push(':');
        }
        setup.x264_params.push_str(CONSTRAINED_BASELINE_X264);
    }
}

/// Starts what `[webrtc]` asks for: the HTTP(S) server for browsers (`listen`) and the WHIP
/// publisher (`publish`), and binds the media socket (UDP, the HTTP port when free).
pub(crate) fn start(
    options: &crate::host::HostOptions,
    pairing: &super::pairing::Pairing,
    audio: bool,
    net: &crate::driver::Handle<super::network::HostCommand>,
    shared: &Arc<HostShared>,
) -> Result<Option<Started>, crate::host::HostError> {
    use crate::host::HostError;
    let w = &options.webrtc;
    if !w.enabled() {
        return Ok(None);
    }
    let (dir, open) = (
        pairing.dir.as_ref(),
        pairing.access == crate::identity::Access::Open,
    );
    let bad = |m: String| HostError::Usage(m);
    let listen = w.listen_addr()?;
    let publish = w.publish_url()?;
    let listen_ip = listen.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
    let shown_ip = if listen_ip.is_unspecified() {
        route_source(IpAddr::from([192, 0, 2, 1])).unwrap_or(IpAddr::from([127, 0, 0, 1]))
    } else {
        listen_ip
    };
    let mut threads = Vec::new();
    let mut browsers = None;
    let mut sockets = Vec::new();
    let mut browser_socket = None;
    if let Some(addr) = listen {
        let cert = cert::page_cert(&w.cert_source()?, dir, &[shown_ip]).map_err(bad)?;
        let http = start_http(addr, cert.as_ref(), net.clone(), shared.clone()).map_err(bad)?;
        let scheme = if http.https { "https" } else { "http" };
        browsers = Some(BrowserInfo {
            base_url: format!(
                "{scheme}://{}/",
                SocketAddr::new(shown_ip, http.addr.port())
            ),
            fingerprint: cert.map(|c| c.fingerprint),
        });
        threads.push(http.thread);
        // The media on the HTTP port's number when it is free.
        let udp = untether_net::UdpEndpoint::bind(SocketAddr::new(listen_ip, http.addr.port()))
            .or_else(|_| untether_net::UdpEndpoint::bind(SocketAddr::new(listen_ip, 0)))?;
        browser_socket = Some((SOCKET + sockets.len(), udp.local_addr()?));
        sockets.push(udp);
    }
    let mut publish_socket = None;
    if let Some(url) = &publish {
        // On the address that routes to the endpoint (every interface if that is unknown).
        let ip = whip::endpoint_ip(url)
            .and_then(route_source)
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let udp = untether_net::UdpEndpoint::bind(SocketAddr::new(ip, 0))?;
        publish_socket = Some((SOCKET + sockets.len(), udp.local_addr()?));
        sockets.push(udp);
    }
    let webrtc = Box::new(WebRtc::new(
        browser_socket,
        listen_ip,
        publish_socket,
        open,
        w.link_ttl_s,
        w.max_browsers,
        options.host.keyframe_cooldown_ms * 1000,
    ));
    if let (Some(url), Some((_, local))) = (publish, publish_socket) {
        let p = start_whip(
            url,
            w.publish_token.clone(),
            local,
            audio,
            net.clone(),
            shared.clone(),
        )
        .map_err(bad)?;
        threads.push(p.thread);
    }
    Ok(Some(Started {
        webrtc,
        sockets,
        threads,
        browsers,
    }))
}

/// The host's pairing PIN as a browser's credential: the PIN lives in the session (as for our
/// own clients); a right one is used up, a wrong one counts against its attempts.
pub(crate) struct SessionPins<'a> {
    pub session: &'a mut untether_proto::HostSession,
    pub pairing: &'a mut super::pairing::Pairing,
    pub shared: &'a HostShared,
}

impl PinCheck for SessionPins<'_> {
    fn try_pin(&mut self, now: Micros, pin: &str) -> Result<(), Option<u32>> {
        let Some(live) = self.session.pin().cloned() else {
            return Err(None);
        };
        if now >= live.expires_us || live.attempts_left == 0 {
            return Err(None);
        }
        let dir = self.pairing.dir.clone();
        if access::ct_eq(&live.pin, pin) {
            self.session.set_pin(None);
            self.pairing.pin = None;
            if let Some(dir) = &dir {
                if let Err(e) = dir.clear_pin() {
                    log::warn!("host: cannot remove the used PIN: {e}");
                }
            }
            self.shared
                .note("a browser was admitted with the pairing PIN (now used up)".into());
            return Ok(());
        }
        let left = live.attempts_left - 1;
        self.shared
            .note(format!("wrong PIN from a browser ({left} attempts left)"));
        if left == 0 {
            self.session.set_pin(None);
            self.pairing.pin = None;
        } else {
            self.session.set_pin(Some(untether_proto::PairingPin {
                attempts_left: left,
                ..live
            }));
        }
        if let Some(dir) = &dir {
            let r = if left == 0 {
                dir.clear_pin()
            } else {
                dir.update_pin_attempts(left)
            };
            if let Err(e) = r {
                log::warn!("host: cannot update the PIN file: {e}");
            }
        }
        Err(Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_source_towards_loopback_is_loopback() {
        assert_eq!(
            route_source("127.0.0.1".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
    }
}
