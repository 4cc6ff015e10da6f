//! The initiator, the client's side of the handshake: the Hello and its repetition, a Retry token,
//! the Noise messages (with the PIN), the pinned host key, the host's Accept or Reject and the
//! connect timeout. [`Initiator`] owns that state until the session is accepted.

use super::connection::open_into;
use super::{ClientConfig, ClientSession, State};
use crate::crypto::Protection;
use crate::handshake::{
    fingerprint, ClientHandshake, ClientInfoPayload, HandshakeError, PublicKey, SessionRng,
};
use crate::wire::{
    self, encode_handshake, ControlFrame, Datagram, Header, Hello, PacketType, RejectReason,
    SessionParams, HEADER_LEN,
};
use crate::Micros;

enum Phase {
    /// Hello sent; waiting for the host's HelloReply.
    AwaitReply,
    /// HelloFinish sent; waiting for the protected Accept (or Reject).
    AwaitAccept {
        cid: u64,
        protection: Box<Protection>,
        host_key: PublicKey,
    },
}

/// A handshake in progress.
pub(super) struct Initiator {
    started_us: Micros,
    next_hello_us: Micros,
    connect_timeout_us: Micros,
    hello_interval_us: Micros,
    /// The connection id of the handshake datagrams (random, chosen by the client).
    hs_cid: u64,
    hs: Box<ClientHandshake>,
    /// The datagram to repeat until the next step: Hello, then HelloFinish.
    repeat: Vec<u8>,
    /// Noise message 1 (to rebuild the Hello with a Retry token).
    msg1: Vec<u8>,
    /// The packet number of the next handshake datagram built after the first Hello.
    hs_pn: u64,
    phase: Phase,
    /// A Version Negotiation that excludes our version, noted while an authentic reply
    /// was still possible: it is unauthenticated (anyone can send one), so it only
    /// explains the connect timeout if no HelloReply arrives before it.
    version_negotiation: Option<String>,
    /// The host's key as its handshake reply proved it.
    seen_host_key: Option<PublicKey>,
}

/// What a datagram did to the handshake.
#[derive(Debug)]
pub(super) enum Step {
    /// Not for this handshake, or not in this phase (a repeated HelloReply, a late Reject,
    /// shards before the Accept).
    Unrelated,
    /// A reply that did not authenticate (forged or corrupted): still waiting.
    AuthFailure,
    /// Send this datagram now (it is also what is repeated from now on); `retry`: the Hello
    /// rebuilt with the host's Retry token.
    Send { datagram: Vec<u8>, retry: bool },
    /// Initiator ends: the host refused, or this client refuses the host.
    Refused {
        reason: RejectReason,
        message: String,
    },
    /// The protected datagram beside the Accept (or Reject) opened: its packet number, and
    /// its frames (None: malformed).
    Opened {
        pn: u64,
        frames: Option<Vec<ControlFrame>>,
    },
}

/// What a timer did to the handshake.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Tick {
    /// Nothing due.
    Wait,
    /// Repeat this datagram (the Hello, or the HelloFinish).
    Repeat(Vec<u8>),
    /// The host did not answer within the connect timeout; `version`: a Version Negotiation
    /// seen meanwhile, the likely reason.
    TimedOut { version: Option<String> },
}

/// What the host's first protected datagram says.
#[derive(Debug, PartialEq)]
pub(super) enum Answer {
    /// Accepted with these parameters; what rode after the Accept (the client's role, the
    /// host's state) is for the session just opened.
    Accept(SessionParams, Vec<ControlFrame>),
    Reject(RejectReason, String),
    /// Neither (the datagram carried something else).
    Neither,
}

impl Initiator {
    /// Starts a handshake: the first Hello goes out at `now` ([`Self::handle_timeout`]).
    pub(super) fn start(
        cfg: &ClientConfig,
        rng: &mut SessionRng,
        now: Micros,
    ) -> Result<Initiator, HandshakeError> {
        let (hs, msg1) = ClientHandshake::start(
            &cfg.identity,
            cfg.pin.as_deref(),
            cfg.suites,
            cfg.suite_preference,
            rng,
        )?;
        let mut hs_cid = rng.next_u64();
        while hs_cid == 0 {
            hs_cid = rng.next_u64();
        }
        let mut repeat = Vec::with_capacity(wire::HELLO_MIN_LEN);
        Hello {
            mode: hs.mode() as u8,
            token: &[],
            noise: &msg1,
        }
        .encode(&Header::new(PacketType::Hello, hs_cid, 0), &mut repeat);
        Ok(Initiator {
            msg1,
            started_us: now,
            next_hello_us: now,
            connect_timeout_us: cfg.connect_timeout_us,
            hello_interval_us: cfg.hello_interval_us,
            hs_cid,
            hs: Box::new(hs),
            repeat,
            hs_pn: 0,
            phase: Phase::AwaitReply,
            version_negotiation: None,
            seen_host_key: None,
        })
    }

    /// The host's authenticated key, once its reply proved it and this client sent its last
    /// message.
    pub(super) fn host_key(&self) -> Option<PublicKey> {
        match &self.phase {
            Phase::AwaitAccept { host_key, .. } => Some(*host_key),
            Phase::AwaitReply => None,
        }
    }

    /// The host's key as its handshake reply proved it (also when this client then refused
    /// it).
    pub(super) fn seen_host_key(&self) -> Option<PublicKey> {
        self.seen_host_key
    }

    /// When [`Self::handle_timeout`] should run next.
    pub(super) fn poll_timeout(&self) -> Micros {
        self.next_hello_us
            .min(self.started_us + self.connect_timeout_us)
    }

    /// The connect timeout, or the repetition of the last handshake datagram.
    pub(super) fn handle_timeout(&mut self, now: Micros) -> Tick {
        if now >= self.started_us + self.connect_timeout_us {
            // No authentic answer came: a Version Negotiation seen meanwhile is the likely
            // reason.
            let version = match self.phase {
                Phase::AwaitReply => self.version_negotiation.take(),
                Phase::AwaitAccept { .. } => None,
            };
            return Tick::TimedOut { version };
        }
        if now >= self.next_hello_us {
            // Repeat the Hello (or the HelloFinish) until the host answers.
            self.next_hello_us = now + self.hello_interval_us;
            return Tick::Repeat(self.repeat.clone());
        }
        Tick::Wait
    }

    /// A Version Negotiation: noted (true) while the HelloReply is awaited and when it
    /// excludes this client's version; else ignored (false: the host answered, so it speaks
    /// our version, or the list names it, forged or stale). The message is already escaped.
    pub(super) fn on_version_negotiation(&mut self, versions: &[u8], message: &str) -> bool {
        if !matches!(self.phase, Phase::AwaitReply) || versions.contains(&wire::VERSION) {
            return false;
        }
        self.version_negotiation.get_or_insert_with(|| {
            format!(
                "the host speaks protocol version(s) {versions:?}, this client version {}: \
                 {message}",
                wire::VERSION
            )
        });
        true
    }

    /// Takes a parsed datagram from the host (`data`: the whole datagram, opened in
    /// `scratch` when protected).
    pub(super) fn on_datagram(
        &mut self,
        now: Micros,
        cfg: &ClientConfig,
        header: &Header,
        datagram: Datagram<'_>,
        data: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Step {
        let ours = header.connection_id == self.hs_cid;
        match (&mut self.phase, datagram) {
            (Phase::AwaitReply, Datagram::Reject(r)) if ours => Step::Refused {
                reason: r.reason,
                message: r.message,
            },
            // The host is under a flood of handshakes: repeat the Hello with its token.
            (Phase::AwaitReply, Datagram::Retry(token)) if ours => {
                let mut out = Vec::with_capacity(wire::HELLO_MIN_LEN);
                Hello {
                    mode: self.hs.mode() as u8,
                    token,
                    noise: &self.msg1,
                }
                .encode(
                    &Header::new(PacketType::Hello, self.hs_cid, self.hs_pn),
                    &mut out,
                );
                self.hs_pn += 1;
                self.repeat = out.clone();
                Step::Send {
                    datagram: out,
                    retry: true,
                }
            }
            // A wrong PIN shows only when the host reads message 3: it answers in cleartext
            // (it has no keys with this client). Honoured for that reason only.
            (Phase::AwaitAccept { .. }, Datagram::Reject(r))
                if ours && r.reason == RejectReason::Pin =>
            {
                Step::Refused {
                    reason: r.reason,
                    message: r.message,
                }
            }
            (Phase::AwaitReply, Datagram::HelloReply(msg2)) if ours => {
                self.on_reply(now, cfg, msg2)
            }
            (
                Phase::AwaitAccept {
                    cid, protection, ..
                },
                Datagram::Control(_),
            ) if header.connection_id == *cid => {
                let pn = header.packet_number;
                let Some(len) = open_into(scratch, &mut protection.opener, data, pn, true) else {
                    return Step::AuthFailure;
                };
                Step::Opened {
                    pn,
                    frames: wire::parse_control(&scratch[HEADER_LEN..HEADER_LEN + len]).ok(),
                }
            }
            _ => Step::Unrelated,
        }
    }

    /// Noise message 2: the host's key (checked against the pinned one) and the session's
    /// setup; answers with message 3 (this client's info) and awaits the Accept.
    fn on_reply(&mut self, now: Micros, cfg: &ClientConfig, msg2: &[u8]) -> Step {
        let refused = |reason, message: String| Step::Refused { reason, message };
        let (host_key, setup) = match self.hs.read_reply(msg2) {
            Ok(x) => x,
            Err(HandshakeError::Pin) => {
                return refused(RejectReason::Pin, "PIN pairing failed".into())
            }
            // Forged or corrupted: keep waiting for the real reply.
            Err(_) => return Step::AuthFailure,
        };
        self.seen_host_key = Some(host_key);
        if let Some(pinned) = cfg.host_key {
            if pinned != host_key {
                return refused(
                    RejectReason::UntrustedHost,
                    format!(
                        "the host's key ({}) is not the one this client trusts ({}): \
                         another machine is answering, or the host's identity was reset",
                        fingerprint(&host_key),
                        fingerprint(&pinned)
                    ),
                );
            }
        }
        let info = ClientInfoPayload {
            max_datagram: cfg.max_datagram,
            capabilities: cfg.codecs.iter().fold(0, |m, c| m | c.cap()),
            name: cfg.name.clone(),
            codecs: cfg.codecs.clone(),
            wants: cfg.wants,
            view: cfg.view,
        };
        let Ok((msg3, keys)) = self.hs.finish(&info) else {
            return refused(RejectReason::Other, "handshake failed".into());
        };
        let mut out = Vec::with_capacity(HEADER_LEN + msg3.len());
        encode_handshake(
            &Header::new(PacketType::HelloFinish, self.hs_cid, self.hs_pn),
            &msg3,
            &mut out,
        );
        self.hs_pn += 1;
        self.repeat = out.clone();
        self.next_hello_us = now + self.hello_interval_us;
        self.phase = Phase::AwaitAccept {
            cid: setup.connection_id,
            protection: Box::new(Protection::new(
                setup.suite,
                keys.send,
                keys.recv,
                setup.key_update_log2,
                setup.video_auth_only,
            )),
            host_key,
        };
        Step::Send {
            datagram: out,
            retry: false,
        }
    }

    /// The session's connection id, keys and the host's key, once the handshake got that far
    /// (the Accept arrived); else the handshake as it was.
    pub(super) fn into_keys(
        self: Box<Self>,
    ) -> Result<(u64, Protection, PublicKey), Box<Initiator>> {
        match self.phase {
            Phase::AwaitAccept {
                cid,
                protection,
                host_key,
            } => Ok((cid, *protection, host_key)),
            Phase::AwaitReply => Err(self),
        }
    }
}

/// Finds the Accept (or Reject) among the frames of the host's first protected datagram: the
/// first of either counts.
pub(super) fn answer(frames: Vec<ControlFrame>) -> Answer {
    let mut frames = frames.into_iter();
    while let Some(f) = frames.next() {
        match f {
            ControlFrame::Accept(params) => {
                let rest = frames
                    .filter(|f| matches!(f, ControlFrame::Role { .. } | ControlFrame::State(_)))
                    .collect();
                return Answer::Accept(params, rest);
            }
            ControlFrame::Reject(r) => return Answer::Reject(r.reason, r.message),
            _ => {}
        }
    }
    Answer::Neither
}

impl ClientSession {
    /// The host's first protected datagram: its Accept (or Reject), and what rides beside it.
    pub(super) fn on_answer(&mut self, now: Micros, frames: Vec<ControlFrame>) {
        // The clock identity and the encoder travel beside the Accept (either order).
        for f in &frames {
            match f {
                ControlFrame::ClockId { id } => {
                    self.shared_clock = self.cfg.clock_id.is_some_and(|own| own == *id);
                }
                ControlFrame::HostEncoder(e) => self.host_encoder = Some(e.clone()),
                _ => {}
            }
        }
        match answer(frames) {
            Answer::Accept(params, rest) => {
                self.on_accept(now, params);
                // What rides beside the Accept (the client's role, the host's state) is for
                // the session just opened.
                for f in rest {
                    self.on_control(now, f);
                }
            }
            Answer::Reject(reason, message) => self.fail(reason, message),
            Answer::Neither => {}
        }
    }

    fn on_accept(&mut self, now: Micros, params: SessionParams) {
        let old = std::mem::replace(&mut self.state, State::Closed);
        let State::Connecting(a) = old else {
            self.state = old;
            return;
        };
        match a.into_keys() {
            Ok((cid, protection, host_key)) => self.install(now, cid, protection, host_key, params),
            Err(a) => self.state = State::Connecting(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::{HostHandshake, SessionSetup, StaticKeypair};
    use crate::wire::{encode_control, ClientRole, Reject};

    fn config() -> ClientConfig {
        let mut cfg = ClientConfig::new("unit");
        cfg.entropy = [7; 32];
        cfg.identity = StaticKeypair::generate(&mut SessionRng::from_seed([1; 32]));
        cfg
    }

    fn start(cfg: &ClientConfig, now: Micros) -> Initiator {
        Initiator::start(cfg, &mut SessionRng::from_seed([2; 32]), now).unwrap()
    }

    /// The Hello's connection id and Noise message 1, as the host reads them.
    fn hello(a: &mut Initiator, now: Micros) -> (u64, Vec<u8>, Vec<u8>) {
        let Tick::Repeat(d) = a.handle_timeout(now) else {
            panic!("no Hello due at {now}");
        };
        let (h, Datagram::Hello(hello)) = wire::parse(&d).unwrap() else {
            panic!("not a Hello");
        };
        (h.connection_id, hello.noise.to_vec(), hello.token.to_vec())
    }

    /// The host's side: its key, its answer (message 2) and the keys it will use.
    struct Host {
        identity: StaticKeypair,
        hs: HostHandshake,
        msg2: Vec<u8>,
    }

    const SESSION_CID: u64 = 0x5e55;

    fn host_reply(msg1: &[u8]) -> Host {
        let mut rng = SessionRng::from_seed([3; 32]);
        let identity = StaticKeypair::generate(&mut rng);
        let (hs, msg2, _, _) = HostHandshake::respond(
            &identity,
            crate::handshake::Mode::Known,
            msg1,
            None,
            &mut rng,
            |offer| {
                Some(SessionSetup {
                    connection_id: SESSION_CID,
                    suite: offer.choose(crate::crypto::ALL_SUITES)?,
                    key_update_log2: 20,
                    video_auth_only: false,
                    spake: None,
                })
            },
        )
        .unwrap();
        Host { identity, hs, msg2 }
    }

    fn reply_datagram(cid: u64, msg2: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        encode_handshake(&Header::new(PacketType::HelloReply, cid, 0), msg2, &mut d);
        d
    }

    fn feed(a: &mut Initiator, now: Micros, cfg: &ClientConfig, d: &[u8]) -> Step {
        let (h, datagram) = wire::parse(d).unwrap();
        a.on_datagram(now, cfg, &h, datagram, d, &mut Vec::new())
    }

    #[test]
    fn the_hello_is_repeated_every_interval_until_the_connect_timeout() {
        let cfg = config();
        let mut a = start(&cfg, 1_000);
        let (cid, _, token) = hello(&mut a, 1_000);
        assert!(token.is_empty());
        assert_eq!(a.poll_timeout(), 1_000 + cfg.hello_interval_us);
        // Not yet due: nothing.
        assert_eq!(
            a.handle_timeout(1_000 + cfg.hello_interval_us - 1),
            Tick::Wait
        );
        // Due: the same Hello again, and the next one an interval later.
        let (again, _, _) = hello(&mut a, 1_000 + cfg.hello_interval_us);
        assert_eq!(again, cid);
        assert_eq!(a.poll_timeout(), 1_000 + 2 * cfg.hello_interval_us);
        // The connect timeout ends it, with no version to blame.
        let end = 1_000 + cfg.connect_timeout_us;
        assert_eq!(a.handle_timeout(end), Tick::TimedOut { version: None });
    }

    #[test]
    fn a_reject_ends_admission_with_its_reason_and_another_connections_is_ignored() {
        let cfg = config();
        let mut a = start(&cfg, 0);
        let (cid, _, _) = hello(&mut a, 0);
        let reject = |cid| {
            let mut d = Vec::new();
            Reject {
                reason: RejectReason::NotAllowed,
                message: "ask the host's user".into(),
            }
            .encode(&Header::new(PacketType::Reject, cid, 0), &mut d);
            d
        };
        assert!(matches!(
            feed(&mut a, 10, &cfg, &reject(cid ^ 1)),
            Step::Unrelated
        ));
        match feed(&mut a, 20, &cfg, &reject(cid)) {
            Step::Refused { reason, message } => {
                assert_eq!(reason, RejectReason::NotAllowed);
                assert_eq!(message, "ask the host's user");
            }
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn a_retry_token_rebuilds_the_hello_that_is_then_repeated() {
        let cfg = config();
        let mut a = start(&cfg, 0);
        let (cid, msg1, _) = hello(&mut a, 0);
        let mut d = Vec::new();
        encode_handshake(&Header::new(PacketType::Retry, cid, 0), b"token!", &mut d);
        let Step::Send { datagram, retry } = feed(&mut a, 50, &cfg, &d) else {
            panic!("no Hello with the token");
        };
        assert!(retry);
        let (_, Datagram::Hello(h)) = wire::parse(&datagram).unwrap() else {
            panic!("not a Hello");
        };
        assert_eq!((h.token, h.noise), (&b"token!"[..], &msg1[..]));
        // The Hello repeated from now on carries the token.
        let (_, _, token) = hello(&mut a, cfg.hello_interval_us);
        assert_eq!(token, b"token!");
    }

    #[test]
    fn a_version_negotiation_explains_the_timeout_only_while_the_reply_is_awaited() {
        let cfg = config();
        let mut a = start(&cfg, 0);
        hello(&mut a, 0);
        // One that lists our version is forged or stale.
        assert!(!a.on_version_negotiation(&[wire::VERSION], "same"));
        assert!(a.on_version_negotiation(&[wire::VERSION + 1], "upgrade the client"));
        let Tick::TimedOut {
            version: Some(message),
        } = a.handle_timeout(cfg.connect_timeout_us)
        else {
            panic!("no version reason");
        };
        assert!(message.contains("upgrade the client"), "{message}");
    }

    #[test]
    fn the_reply_is_answered_with_message_3_and_the_accept_opens_with_the_session_keys() {
        let cfg = config();
        let mut a = start(&cfg, 0);
        let (cid, msg1, _) = hello(&mut a, 0);
        let mut host = host_reply(&msg1);
        // A corrupted reply is an authentication failure, and the handshake waits on.
        let mut bad = host.msg2.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(
            feed(&mut a, 5, &cfg, &reply_datagram(cid, &bad)),
            Step::AuthFailure
        ));
        assert_eq!(a.host_key(), None);
        let Step::Send { datagram, retry } =
            feed(&mut a, 10, &cfg, &reply_datagram(cid, &host.msg2))
        else {
            panic!("no HelloFinish");
        };
        assert!(!retry);
        assert_eq!(a.host_key(), Some(host.identity.public));
        assert_eq!(a.seen_host_key(), Some(host.identity.public));
        // HelloFinish is what is repeated now, an interval after the reply.
        assert_eq!(a.poll_timeout(), 10 + cfg.hello_interval_us);
        let (h, Datagram::HelloFinish(msg3)) = wire::parse(&datagram).unwrap() else {
            panic!("not a HelloFinish");
        };
        assert_eq!((h.connection_id, h.packet_number), (cid, 0));
        let (client_key, info, keys) = host.hs.finish(msg3).unwrap();
        assert_eq!(client_key, cfg.identity.public);
        assert_eq!(info.name, "unit");
        // The host's Accept, sealed with its keys, opens here.
        let mut sealer =
            Protection::new(cfg.suite_preference, keys.send, keys.recv, 20, false).sealer;
        let params = super::super::test_params();
        let frames = vec![
            ControlFrame::Accept(params),
            ControlFrame::Role {
                role: ClientRole::Controller,
                flags: 0,
                version: 1,
            },
        ];
        let mut d = Vec::new();
        encode_control(
            &Header::new(PacketType::Control, SESSION_CID, 3),
            &frames,
            &mut d,
        );
        sealer.seal(&mut d, HEADER_LEN, 3, true).unwrap();
        let mut scratch = Vec::new();
        let (h, datagram) = wire::parse(&d).unwrap();
        let Step::Opened {
            pn,
            frames: Some(opened),
        } = a.on_datagram(20, &cfg, &h, datagram, &d, &mut scratch)
        else {
            panic!("the Accept did not open");
        };
        assert_eq!(pn, 3);
        assert_eq!(opened, frames);
        assert_eq!(answer(opened), Answer::Accept(params, frames[1..].to_vec()));
        let Ok((session_cid, _, host_key)) = Box::new(a).into_keys() else {
            panic!("no keys");
        };
        assert_eq!((session_cid, host_key), (SESSION_CID, host.identity.public));
    }

    #[test]
    fn a_host_with_another_key_than_the_pinned_one_is_refused() {
        let mut cfg = config();
        cfg.host_key = Some([9; 32]);
        let mut a = start(&cfg, 0);
        let (cid, msg1, _) = hello(&mut a, 0);
        let host = host_reply(&msg1);
        match feed(&mut a, 10, &cfg, &reply_datagram(cid, &host.msg2)) {
            Step::Refused { reason, .. } => assert_eq!(reason, RejectReason::UntrustedHost),
            s => panic!("{s:?}"),
        }
        // The key it showed is known, for the application to name the host.
        assert_eq!(a.seen_host_key(), Some(host.identity.public));
        assert_eq!(a.host_key(), None);
    }

    #[test]
    fn the_first_accept_or_reject_is_the_answer() {
        let reject = ControlFrame::Reject(Reject {
            reason: RejectReason::Busy,
            message: "full".into(),
        });
        assert_eq!(
            answer(vec![
                ControlFrame::Ping { id: 1, sent_us: 2 },
                reject.clone()
            ]),
            Answer::Reject(RejectReason::Busy, "full".into())
        );
        assert_eq!(
            answer(vec![ControlFrame::Ping { id: 1, sent_us: 2 }]),
            Answer::Neither
        );
        // After an Accept, only the role and the host's state are kept.
        let params = super::super::test_params();
        assert_eq!(
            answer(vec![
                ControlFrame::Accept(params),
                ControlFrame::Ping { id: 1, sent_us: 2 },
                reject,
            ]),
            Answer::Accept(params, vec![])
        );
    }
}
