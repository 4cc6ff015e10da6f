//! The driver's side of WebRTC ([`WebRtc`]): the browsers' and the publication's sessions,
//! fed from the one encoder, on the driver's sockets. Admission comes first: an offer without
//! a valid link, PIN or resume secret is refused before any DTLS certificate or `Rtc` exists.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use str0m::change::SdpOffer;
use str0m::Candidate as IceCandidate;
use untether_proto::admission::{Admission, CredentialKind, Failure, Incoming};
use untether_proto::{
    AudioPacket, ClientId, ClientRole, InputRecord, KeyframeDecision, Micros, ReceiverKind,
};

use super::access::{BrowserCredentials, Credential, Refusal, SessionAccess};
use super::peer::{self, BrowserPeer, Clock, Kind, Out, PeerEvent};
use super::resource::{DeleteRefusal, Resources};
use super::roles::{role_name, InputNumbering};
use super::types::{route_source, rtc_config};
use super::types::{Answer, OfferRequest, WebRtcCommand, WebRtcSummary};
use super::{h264, input};
use crate::driver::{Outgoing, Via};
use crate::host::commands::OutgoingFrame;
use crate::host::input::InputSink;
use crate::host::shared::HostShared;

/// How long a browser may take from its answer to a connection (ICE + DTLS).
const CONNECT_TIMEOUT_US: Micros = 15_000_000;

/// What the driver lends the WebRTC side while it handles events.
pub(crate) struct DriverParts<'a> {
    pub shared: &'a HostShared,
    pub sink: &'a mut InputSink,
    /// The protocol session: the one authority on roles and keyframes, for browsers too.
    pub session: &'a mut untether_proto::HostSession,
    /// The controller epoch the driver publishes; bumped when a browser becomes the controller.
    pub epoch: &'a mut u64,
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
    peers: Vec<BrowserPeer>,
    /// Checks links, PINs and resume secrets.
    credentials: BrowserCredentials,
    /// The host's one admission (shared with the HTTP thread, which asked it before the offer
    /// came here, and with RTSP): learns what each check came to.
    admission: Admission,
    resources: Resources,
    max_browsers: usize,
    out: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    tmp: Out,
    summary: WebRtcSummary,
    /// The controlling browser's input numbering (who controls: the session says).
    numbering: InputNumbering,
    profile_noted: bool,
}

/// Where the sessions live and how many browsers they may be.
pub(crate) struct Sockets {
    pub browser: Option<(usize, SocketAddr)>,
    pub listen_ip: IpAddr,
    pub publish: Option<(usize, SocketAddr)>,
}

impl WebRtc {
    pub fn new(
        sockets: Sockets,
        open: bool,
        link_ttl_s: u64,
        max_browsers: u32,
        admission: Admission,
    ) -> WebRtc {
        WebRtc {
            clock: Clock::now(),
            browser_socket: sockets.browser,
            listen_ip: sockets.listen_ip,
            publish_socket: sockets.publish,
            peers: Vec::new(),
            credentials: BrowserCredentials::new(open, link_ttl_s),
            admission,
            resources: Resources::default(),
            max_browsers: max_browsers as usize,
            out: VecDeque::new(),
            tmp: Vec::new(),
            summary: WebRtcSummary::default(),
            numbering: InputNumbering::default(),
            profile_noted: false,
        }
    }

    /// What the sessions counted.
    pub fn summary(&self) -> &WebRtcSummary {
        &self.summary
    }

    /// Browsers (and the publication) that want frames: the encoder runs for them.
    pub fn has_viewers(&self) -> bool {
        self.peers.iter().any(|p| p.connected && p.gone.is_none())
    }

    /// The live browser sessions, but `except`.
    fn browsers(&self, except: Option<ClientId>) -> usize {
        self.peers
            .iter()
            .filter(|p| p.kind == Kind::Browser && p.gone.is_none() && Some(p.id) != except)
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
        session: &mut dyn SessionAccess,
    ) {
        match cmd {
            WebRtcCommand::Offer(req) => {
                let OfferRequest {
                    offer,
                    credential,
                    from,
                    reply,
                } = *req;
                let r = self.offer(now, offer, &credential, from, session, shared);
                self.summary_for(&r);
                let _ = reply.send(r);
            }
            WebRtcCommand::Delete {
                id,
                secret,
                from,
                reply,
            } => {
                let r = self.resources.authorize(&id, secret.as_deref());
                // Someone who knows a session's ID but not its secret is guessing: the one
                // admission counts it with wrong links and PINs. An unknown ID is not counted
                // (a page's DELETE after its session timed out finds none), nor a right
                // secret as a success (ending one's own session proves nothing else).
                if r == Err(DeleteRefusal::WrongSecret) {
                    let incoming = Incoming::connection(from.ip(), CredentialKind::SessionSecret);
                    let failure = self.admission.checked(now, &incoming, false);
                    note_blocked(shared, from, failure);
                }
                if let Ok(session) = r {
                    if let Some(p) = self.peers.iter_mut().find(|p| p.id == session) {
                        p.close(&mut self.tmp);
                        shared.note(format!("browser {session} ({}) left (DELETE)", p.label));
                    }
                }
                self.out.extend(self.tmp.drain(..));
                let _ = reply.send(r.map(|_| ()));
            }
            WebRtcCommand::Publish(p) => {
                let Some(socket) = self.publish_socket else {
                    return;
                };
                let mut peer = BrowserPeer::new(
                    session.new_receiver_id(),
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

    /// A browser's offer: room, then admission, and only then a certificate and a session.
    fn offer(
        &mut self,
        now: Micros,
        offer: SdpOffer,
        credential: &Credential,
        from: SocketAddr,
        session: &mut dyn SessionAccess,
        shared: &HostShared,
    ) -> Result<Answer, Refusal> {
        let Some(socket) = self.browser_socket else {
            return Err(Refusal::new(503, "this host does not serve browsers"));
        };
        // The session a resume secret holds is replaced, so it leaves room for its successor.
        let replaced = self.credentials.replaces(now, credential);
        if self.browsers(replaced) >= self.max_browsers {
            return Err(Refusal::new(
                503,
                format!(
                    "the host serves {} browsers already (webrtc.max_browsers)",
                    self.max_browsers
                ),
            ));
        }
        let checked = self.credentials.admit(now, credential, session);
        // The one admission learns what the check came to: a page that keeps guessing links,
        // PINs or resume secrets is refused unchecked (by the HTTP thread, 429) for a while,
        // and so is its address at every other door of the host.
        let incoming = Incoming::connection(from.ip(), credential.kind());
        let failure = self.admission.checked(now, &incoming, checked.is_ok());
        note_blocked(shared, from, failure);
        let admitted = checked
            .inspect_err(|e| shared.note(format!("refused browser at {from}: {}", e.reason)))?;
        // Admitted: now (and only now) the session's certificate and its Rtc.
        self.summary.sessions_built += 1;
        let provider = str0m::crypto::from_feature_flags();
        let cert = provider
            .dtls_provider
            .generate_certificate()
            .ok_or_else(|| Refusal::new(500, "cannot make a DTLS certificate"))?;
        let mut rtc = rtc_config()
            .set_dtls_cert(cert)
            .build(self.clock.instant(now));
        let cand = self.candidate_for(from.ip(), socket.1.port());
        let candidate = IceCandidate::host(cand, "udp")
            .map_err(|e| Refusal::new(500, format!("host candidate {cand}: {e}")))?;
        rtc.add_local_candidate(candidate);
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| Refusal::new(400, format!("cannot answer this offer: {e}")))?
            .to_sdp_string();
        let id = session.new_receiver_id();
        let mut peer = BrowserPeer::new(
            id,
            Kind::Browser,
            from.to_string(),
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
        if let Some(old) = admitted.replaces {
            if let Some(p) = self.peers.iter_mut().find(|p| p.id == old) {
                p.close(&mut self.tmp);
                shared.note(format!(
                    "browser {old} ({}) replaced: its page came back with its resume secret",
                    p.label
                ));
            }
        }
        self.credentials.bind(&admitted.resume, id);
        let resource = self.resources.issue(id);
        peer.drain(&mut self.tmp);
        self.out.extend(self.tmp.drain(..));
        shared.note(format!(
            "browser {id} at {from} admitted{}; connecting to udp {cand}",
            if peer.has_audio() {
                " (video, audio)"
            } else {
                " (video)"
            }
        ));
        self.peers.push(peer);
        Ok(Answer {
            resource,
            sdp: answer,
            resume: admitted.resume,
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

    /// Acts on what the sessions reported: a browser (or the publication) that connected is
    /// registered with the protocol session's roles; its keyframe requests go through the
    /// session's one keyframe gate; input to the sink (from the controller); sessions that
    /// ended leave the roles.
    pub fn handle_events(&mut self, now: Micros, mut link: DriverParts<'_>) {
        let mut keyframes = Vec::new();
        let mut msgs: Vec<(ClientId, Vec<u8>)> = Vec::new();
        for p in &mut self.peers {
            for e in std::mem::take(&mut p.events) {
                match e {
                    PeerEvent::Connected => {
                        let kind = match p.kind {
                            Kind::Browser => {
                                self.summary.browsers_connected += 1;
                                link.shared
                                    .note(format!("browser {} ({}) connected", p.id, p.label));
                                ReceiverKind::Browser
                            }
                            Kind::Publisher => {
                                self.summary.published = true;
                                link.shared.note(format!("WHIP: publishing to {}", p.label));
                                ReceiverKind::Publication
                            }
                        };
                        if !p.attached {
                            link.session.attach_receiver_as(now, p.id, kind);
                            p.attached = true;
                        }
                        keyframes.push(p.id);
                    }
                    PeerEvent::KeyframeRequest => {
                        self.summary.keyframe_requests += 1;
                        if p.attached {
                            keyframes.push(p.id);
                        }
                    }
                    PeerEvent::Input(data) => msgs.push((p.id, data)),
                    PeerEvent::Gone(why) => {
                        link.shared
                            .note(format!("{} {} gone: {why}", kind_name(p.kind), p.label));
                    }
                }
            }
        }
        for r in keyframes {
            // Honoured: the session emits KeyframeRequested, which the driver hands the
            // encoder, as for our own clients.
            if link.session.receiver_keyframe_request(now, r) != KeyframeDecision::Honour {
                self.summary.keyframe_requests_limited += 1;
            }
        }
        for p in self.peers.iter().filter(|p| p.gone.is_some() && p.attached) {
            link.session.detach_receiver(now, p.id);
        }
        self.peers.retain(|p| p.gone.is_none());
        let peers = &self.peers;
        self.resources.retain(|s| peers.iter().any(|p| p.id == s));
        for (id, data) in msgs {
            self.on_input(id, &data, &mut link);
        }
        self.out.extend(self.tmp.drain(..));
    }

    /// The session gave receiver `receiver` a new role: the browser's page is told, and a new
    /// controller starts a new controller epoch (its input numbered from 0).
    pub fn on_role(
        &mut self,
        receiver: ClientId,
        role: ClientRole,
        shared: &HostShared,
        epoch: &mut u64,
    ) {
        let Some(p) = self.peers.iter_mut().find(|p| p.id == receiver) else {
            return;
        };
        if role == ClientRole::Controller {
            self.numbering
                .start(receiver, shared.audience.new_controller());
            *epoch = self.numbering.epoch();
            shared.note(format!(
                "browser {receiver} is the controller (its input drives the host)"
            ));
        }
        let role = role_name(Some(role));
        p.send_text(
            &format!(r#"{{"k":"role","role":"{role}","seq":0}}"#),
            &mut self.tmp,
        );
        self.out.extend(self.tmp.drain(..));
    }

    fn on_input(&mut self, id: ClientId, data: &[u8], link: &mut DriverParts<'_>) {
        let shared = link.shared;
        match input::parse(data) {
            Ok(input::Message::Ping(t)) => {
                let role = role_name(link.session.role_of(id));
                if let Some(p) = self.peers.iter_mut().find(|p| p.id == id) {
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
                // The session's decision: a browser's input applies while it controls.
                if link.session.input_applies(id) {
                    let epoch = *link.epoch;
                    let seq = self.numbering.number(id, epoch);
                    self.summary.inputs_delivered += 1;
                    link.sink
                        .deliver(shared, epoch, true, InputRecord { seq, event });
                } else {
                    self.summary.inputs_dropped_viewer += 1;
                }
            }
            // Counted in the numbering too: the page numbers every event it sends.
            Ok(input::Message::Ignored) => self.numbering.skip(id),
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
        let next = self.out.pop_front();
        if let Some((_, _, payload)) = &next {
            self.summary.bytes_sent += payload.len() as u64;
        }
        next.map(|(socket, dst, payload)| Outgoing {
            via: Via::Socket(socket),
            dst: Some(dst),
            payload,
        })
    }

    /// Keeps the pages' resume secrets (their digests) in the host's state directory, so that a
    /// page gets back in after the host restarted.
    pub fn keep_resume_in(&mut self, dir: crate::identity::StateDir, now: Micros) {
        self.credentials.keep_in(dir, now);
    }

    /// The current one-time link's token (made when there is none).
    pub fn link_token(&mut self, now: Micros) -> String {
        self.credentials.link_token(now)
    }

    /// The sessions for the dashboard: kind, address, role, state and what each was sent.
    pub fn rows(
        &self,
        now: Micros,
        session: &untether_proto::HostSession,
    ) -> Vec<serde_json::Value> {
        let rows = self.peers.iter().map(|p| {
            serde_json::json!({
                "id": p.id.0, "kind": kind_name(p.kind), "label": p.label,
                "role": role_name(session.role_of(p.id)), "connected": p.connected, "gone": p.gone,
                "age_s": now.saturating_sub(p.created_us) / 1_000_000,
                "frames_sent": p.stats.frames_sent, "bytes_sent": p.stats.bytes_out,
            })
        });
        rows.collect()
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Browser => "browser",
        Kind::Publisher => "WHIP publication to",
    }
}

/// The one note of a browser's address refused for its wrong credentials (the admission said
/// so at the failure that started the refusal).
fn note_blocked(shared: &HostShared, from: SocketAddr, failure: Option<Failure>) {
    if let Some(Failure::Blocked {
        failures, for_us, ..
    }) = failure
    {
        shared.note(format!(
            "{failures} wrong credentials from the browser at {}: its address is refused for {} s",
            from.ip(),
            for_us.div_ceil(1_000_000)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use str0m::media::{Direction, MediaKind};
    use tokio::sync::oneshot;

    /// A session without a PIN; its ids are never reused (one counter for every test).
    struct NoPins;
    impl SessionAccess for NoPins {
        fn try_pin(&mut self, _now: Micros, _pin: &str) -> Result<(), Option<u32>> {
            Err(None)
        }
        fn new_receiver_id(&mut self) -> ClientId {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
            ClientId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        }
    }

    /// A browser's offer (what Chrome sends: receive video and audio, an input channel).
    fn offer() -> SdpOffer {
        let mut rtc = str0m::Rtc::new(Instant::now());
        let mut api = rtc.sdp_api();
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
        api.add_channel("input".into());
        api.apply().expect("an offer").0
    }

    fn webrtc(max_browsers: u32) -> WebRtc {
        WebRtc::new(
            Sockets {
                browser: Some((1, "127.0.0.1:40000".parse().unwrap())),
                listen_ip: "127.0.0.1".parse().unwrap(),
                publish: None,
            },
            false,
            60,
            max_browsers,
            Admission::default(),
        )
    }

    fn send_offer(
        w: &mut WebRtc,
        cred: Credential,
        shared: &HostShared,
    ) -> Result<Answer, Refusal> {
        let (tx, mut rx) = oneshot::channel();
        let req = OfferRequest {
            offer: offer(),
            credential: cred,
            from: "127.0.0.1:5555".parse().unwrap(),
            reply: tx,
        };
        w.handle_command(1, WebRtcCommand::Offer(Box::new(req)), shared, &mut NoPins);
        rx.try_recv().expect("a reply")
    }

    fn send_delete(
        w: &mut WebRtc,
        id: &str,
        secret: Option<&str>,
        shared: &HostShared,
    ) -> Result<(), u16> {
        let (tx, mut rx) = oneshot::channel();
        let cmd = WebRtcCommand::Delete {
            id: id.into(),
            secret: secret.map(String::from),
            from: "127.0.0.1:5555".parse().unwrap(),
            reply: tx,
        };
        w.handle_command(2, cmd, shared, &mut NoPins);
        rx.try_recv().expect("a reply").map_err(|r| r.status())
    }

    #[test]
    fn an_unadmitted_offer_builds_no_session() {
        let shared = HostShared::new((0, 0));
        let mut w = webrtc(4);
        for cred in [
            Credential::None,
            Credential::Token("0".repeat(32)),
            Credential::Resume("f".repeat(32)),
            Credential::Pin("123456".into()),
        ] {
            let e = send_offer(&mut w, cred, &shared).unwrap_err();
            assert!(e.status == 401 || e.status == 403, "{e:?}");
        }
        assert_eq!(w.summary().sessions_built, 0);
        assert_eq!(w.summary().browsers_refused, 4);
        let token = w.link_token(0);
        let a = send_offer(&mut w, Credential::Token(token), &shared).unwrap();
        assert!(a.sdp.starts_with("v=0"));
        assert_eq!(w.summary().sessions_built, 1);
    }

    /// Issue 35: wrong links, PINs and resume secrets are reported to the host's one
    /// admission, which then refuses the address (at this door and every other); a missing
    /// credential is not a guess, and a right one resets the streak.
    #[test]
    fn wrong_credentials_teach_the_one_admission() {
        let shared = HostShared::new((0, 0));
        let mut w = webrtc(4);
        let admission = w.admission.clone();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let free = admission.config().free_failures;
        for _ in 0..10 {
            let _ = send_offer(&mut w, Credential::None, &shared);
        }
        assert_eq!(admission.refused_until(1, ip), None);
        for i in 0..free - 1 {
            let cred = match i % 3 {
                0 => Credential::Token("0".repeat(32)),
                1 => Credential::Pin("123456".into()),
                _ => Credential::Resume("f".repeat(32)),
            };
            assert_eq!(send_offer(&mut w, cred, &shared).unwrap_err().status, 403);
        }
        assert_eq!(admission.refused_until(1, ip), None);
        // A right one resets; then the free ones again, and the next is the last checked.
        let token = w.link_token(0);
        assert!(send_offer(&mut w, Credential::Token(token), &shared).is_ok());
        for _ in 0..free {
            let _ = send_offer(&mut w, Credential::Token("0".repeat(32)), &shared);
        }
        let until = admission.refused_until(1, ip).expect("refused");
        assert_eq!(until, 1 + admission.config().first_block_us);
        // The HTTP thread asks first: the address is refused whatever its credential.
        let rtsp = Incoming::connection(ip, untether_proto::admission::CredentialKind::RtspDigest);
        assert!(!admission.decide(2, &rtsp).accepted());
    }

    #[test]
    fn a_session_ends_only_with_its_own_secret() {
        let shared = HostShared::new((0, 0));
        let mut w = webrtc(4);
        let token = w.link_token(0);
        let a = send_offer(&mut w, Credential::Token(token), &shared).unwrap();
        let token = w.link_token(0);
        let b = send_offer(&mut w, Credential::Token(token), &shared).unwrap();
        assert_eq!(a.resource.id.len(), 32);
        assert_ne!(a.resource.id, b.resource.id);
        assert_eq!(send_delete(&mut w, "1", None, &shared), Err(404));
        assert_eq!(send_delete(&mut w, &a.resource.id, None, &shared), Err(401));
        let wrong = Some(b.resource.secret.as_str());
        assert_eq!(
            send_delete(&mut w, &a.resource.id, wrong, &shared),
            Err(403)
        );
        assert_eq!(w.browsers(None), 2);
        let right = Some(a.resource.secret.as_str());
        assert_eq!(send_delete(&mut w, &a.resource.id, right, &shared), Ok(()));
        assert_eq!(w.browsers(None), 1);
    }

    /// A wrong DELETE secret is a guess: the one admission counts it (an unknown ID or a
    /// missing secret is not), and after the free ones the address is refused at every door.
    #[test]
    fn wrong_delete_secrets_teach_the_one_admission() {
        let shared = HostShared::new((0, 0));
        let mut w = webrtc(4);
        let admission = w.admission.clone();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let token = w.link_token(0);
        let a = send_offer(&mut w, Credential::Token(token), &shared).unwrap();
        for _ in 0..10 {
            assert_eq!(
                send_delete(&mut w, &"0".repeat(32), Some("x"), &shared),
                Err(404)
            );
            assert_eq!(send_delete(&mut w, &a.resource.id, None, &shared), Err(401));
        }
        assert_eq!(admission.refused_until(2, ip), None);
        let free = admission.config().free_failures;
        for _ in 0..free {
            let guess = Some("f".repeat(32));
            assert_eq!(
                send_delete(&mut w, &a.resource.id, guess.as_deref(), &shared),
                Err(403)
            );
        }
        let until = admission
            .refused_until(2, ip)
            .expect("refused after the free guesses");
        assert_eq!(until, 2 + admission.config().first_block_us);
        let pin = Incoming::connection(ip, CredentialKind::Pin);
        assert!(!admission.decide(3, &pin).accepted());
        // The session itself is untouched.
        assert_eq!(w.browsers(None), 1);
    }

    #[test]
    fn a_resume_secret_replaces_its_session_and_fills_one_seat() {
        let shared = HostShared::new((0, 0));
        let mut w = webrtc(2);
        let token = w.link_token(0);
        let first = send_offer(&mut w, Credential::Token(token), &shared).unwrap();
        for _ in 0..3 {
            let again = send_offer(&mut w, Credential::Resume(first.resume.clone()), &shared);
            assert_eq!(again.unwrap().resume, first.resume);
            assert_eq!(w.browsers(None), 1);
        }
        // The second seat is still free for another page.
        let token = w.link_token(0);
        assert!(send_offer(&mut w, Credential::Token(token), &shared).is_ok());
        assert_eq!(w.browsers(None), 2);
        let token = w.link_token(0);
        let full = send_offer(&mut w, Credential::Token(token), &shared);
        assert_eq!(full.unwrap_err().status, 503);
    }
}
