//! The handshake responder, shared by every client: Hellos and Retry tokens under one rate
//! limit, the bounded table of handshakes in progress, PIN checks, access requests, and the
//! decision after message 3 (refuse, replace a client's old session, or admit it while
//! `max_clients` allows).

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::super::{AccessPolicy, HostConfig, HostStats, PairingEvent};
use super::Responder;
use crate::admission::{CredentialKind, Decision, Incoming, RefuseReason};
use crate::crypto::Protection;
use crate::handshake::{
    fingerprint, ClientInfoPayload, HostHandshake, Mode, PublicKey, SessionRng, SessionSetup,
};
use crate::wire::{
    self, encode_control, encode_handshake, ControlFrame, Header, PacketType, Reject, RejectReason,
    VersionNegotiation, HEADER_LEN,
};
use crate::{Micros, Transmit};

/// The least time between two answers to repeated handshake messages of one handshake (an
/// Accept or a Reject again for a repeated HelloFinish): half the client's 200 ms repeat, so
/// each real repeat is answered and a flood of copies is not.
pub const HANDSHAKE_REPEAT_ANSWER_US: Micros = 100_000;
/// The anti-amplification factor for unvalidated addresses.
pub const AMPLIFICATION_FACTOR: u64 = 3;
/// Retry tokens are valid for their 10 s slot and the next.
pub(in crate::host) const RETRY_SLOT_US: Micros = 10_000_000;

pub(in crate::host) enum PendingState {
    /// Message 2 sent; waiting for message 3.
    AwaitFinish(Box<HostHandshake>),
    /// Refused after message 3: the protected Reject to repeat if message 3 is repeated.
    Refused {
        reject: Vec<u8>,
        /// The authenticated message 3: only identical copies are answered.
        msg3: Vec<u8>,
        /// When the Reject was last sent.
        sent_us: Micros,
    },
}

/// A handshake in progress (bounded by `max_handshakes`).
pub(in crate::host) struct Pending {
    addr: SocketAddr,
    client_cid: u64,
    pub(in crate::host) created_us: Micros,
    state: PendingState,
    msg2: Vec<u8>,
    setup: SessionSetup,
    mode: Mode,
    /// PIN mode: the PIN the handshake's SPAKE2 key came from. Message 3 is checked only if
    /// that PIN is still the live one with attempts left (each failed check takes one).
    pub(in crate::host) pin: Option<String>,
    /// Anti-amplification: bytes received from (authentic ones only, after message 3) and
    /// sent to the address.
    received: u64,
    sent: u64,
}

impl Pending {
    /// Whether `out` fits in the 3× budget; charges it if so.
    fn charge(&mut self, out: usize) -> bool {
        if self.sent + out as u64 > AMPLIFICATION_FACTOR * self.received {
            return false;
        }
        self.sent += out as u64;
        true
    }
}

/// What the handshake responder needs of the session besides the admission state: the
/// configuration, the session's randomness (connection ids, Noise), its counters and the queue
/// its answers go to.
pub(in crate::host) struct Io<'a> {
    pub cfg: &'a HostConfig,
    pub rng: &'a mut SessionRng,
    pub stats: &'a mut HostStats,
    pub transmits: &'a mut VecDeque<Transmit>,
}

impl Io<'_> {
    /// Queues an answer to the handshake's address, counting it.
    fn reply(&mut self, dst: SocketAddr, payload: Vec<u8>) {
        self.stats.bytes_sent += payload.len() as u64;
        self.stats.datagrams_sent += 1;
        self.transmits.push_back(Transmit { dst, payload });
    }
}

/// What became of a HelloFinish ([`Responder::on_finish`]).
pub(in crate::host) enum Finish {
    /// Answered (a repeated Reject) or dropped here.
    Done,
    /// No handshake in progress with that id and address: perhaps a connected client's
    /// repeat (its Accept was lost); the session looks among its peers.
    NotPending,
    /// Message 3 is authentic: the session admits the client, or refuses it
    /// ([`Responder::refuse`]).
    Authenticated(Box<Finished>),
}

/// A handshake whose message 3 was authentic, with admission's verdict on the key.
pub(in crate::host) struct Finished {
    pending: Pending,
    pub key: PublicKey,
    pub info: ClientInfoPayload,
    pub protection: Protection,
    pub fingerprint: String,
    /// Why admission refuses the key (revoked, not paired), if it does.
    pub refusal: Option<(RejectReason, String)>,
}

impl Finished {
    /// The session's connection id and cipher suite.
    pub(in crate::host) fn setup(&self) -> &SessionSetup {
        &self.pending.setup
    }
}

impl Responder {
    /// Answers a datagram of another protocol version with the versions this host speaks.
    pub(in crate::host) fn version_negotiation(
        &mut self,
        now: Micros,
        to: SocketAddr,
        theirs: u8,
        len: usize,
        io: &mut Io<'_>,
    ) {
        // Answer only datagrams as large as a Hello (the answer is far smaller: no
        // amplification), and within the handshake rate.
        if len < wire::HELLO_MIN_LEN || !self.bucket.take(now) {
            return;
        }
        let mut out = Vec::with_capacity(128);
        VersionNegotiation {
            versions: vec![wire::VERSION],
            message: format!(
                "this host speaks untether protocol version {}, the client version {theirs}: \
                 install matching versions of untether on both machines",
                wire::VERSION
            ),
        }
        .encode(&mut out);
        io.stats.version_negotiations_sent += 1;
        io.reply(to, out);
    }

    pub(in crate::host) fn on_hello(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        hello: wire::Hello<'_>,
        len: usize,
        io: &mut Io<'_>,
    ) {
        if len < wire::HELLO_MIN_LEN || header.connection_id == 0 {
            // Unpadded: answering could amplify a spoofed source's traffic.
            io.stats.malformed_datagrams += 1;
            return;
        }
        let cid = header.connection_id;
        // A repeated Hello: our reply was lost. Send it again within the address's budget.
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.addr == from && p.client_cid == cid)
        {
            p.received += len as u64;
            if let PendingState::AwaitFinish(_) = p.state {
                let mut out = Vec::with_capacity(HEADER_LEN + p.msg2.len());
                encode_handshake(
                    &Header::new(PacketType::HelloReply, cid, 0),
                    &p.msg2,
                    &mut out,
                );
                if !p.charge(out.len()) {
                    io.stats.amplification_limited += 1;
                    return;
                }
                io.reply(from, out);
            }
            return;
        }
        // Rate limit: a Hello carrying a valid Retry token comes from an address that receives
        // what we send (not a spoofed flood) and draws from a separate, larger budget; others
        // get a Retry (small, stateless) when the budget is used up.
        let validated = !hello.token.is_empty() && self.token_valid(now, from, cid, hello.token);
        let allowed = if validated {
            self.validated_bucket.take(now)
        } else {
            self.bucket.take(now)
        };
        if !allowed {
            io.stats.handshakes_rate_limited += 1;
            if !validated {
                self.send_retry(now, from, cid, len, io);
            }
            return;
        }
        let Some(mode) = Mode::from_u8(hello.mode) else {
            return cleartext_reject(
                io,
                from,
                cid,
                AMPLIFICATION_FACTOR * len as u64,
                RejectReason::Other,
                format!("unknown handshake mode {}", hello.mode),
            );
        };
        if mode == Mode::Pin {
            // A PIN is a guessable credential: the host's one admission decides first (the
            // address's budget, and its wrong guesses at every door: browsers, RTSP, here).
            let incoming = Incoming::datagram(from.ip(), CredentialKind::Pin, validated);
            match self.gate.decide(now, &incoming) {
                Decision::Accept => {}
                // An address not proved yet (it may be spoofed) gets a Retry, small and
                // stateless, rather than silence: a real client proves its address and its
                // next Hello hears why it is refused.
                Decision::Retry | Decision::Ignore => {
                    io.stats.pin_attempts_refused += 1;
                    return self.send_retry(now, from, cid, len, io);
                }
                Decision::Refuse {
                    reason,
                    retry_after_us,
                } => {
                    io.stats.pin_attempts_refused += 1;
                    let why = match reason {
                        RefuseReason::Budget => "too many pairing attempts",
                        RefuseReason::WrongCredentials => "too many wrong PINs, links or passwords",
                    };
                    return cleartext_reject(
                        io,
                        from,
                        cid,
                        AMPLIFICATION_FACTOR * len as u64,
                        RejectReason::Pin,
                        format!(
                            "{why} came from this address: try again in {} s",
                            retry_after_us.div_ceil(1_000_000)
                        ),
                    );
                }
            }
        }
        let pin = match mode {
            Mode::Known => None,
            Mode::Pin => match &self.pin {
                Some(p) if now < p.expires_us && p.attempts_left > 0 => Some(p.pin.clone()),
                _ => {
                    return cleartext_reject(
                        io,
                        from,
                        cid,
                        AMPLIFICATION_FACTOR * len as u64,
                        RejectReason::Pin,
                        "no pairing PIN is active on the host: run `untether pair --pin` there"
                            .into(),
                    )
                }
            },
        };
        self.expire_handshakes(now, io.cfg.handshake_timeout_us);
        // No cap on PIN handshakes in progress: a guess is only learnt at message 3 (the
        // SPAKE2 key enters Noise as `psk3`), and message 3 is checked only while the live PIN
        // has attempts left, each failure taking one; a flood of PIN Hellos cannot take the
        // real client's handshake away (issue 33, item 8: capping them at the attempts left
        // let 150 Hellos a second evict it).
        if self.pending.len() >= io.cfg.max_handshakes.max(1) {
            // Full: the oldest handshake of the busiest address (within the busiest network)
            // makes room, so a flood pushes out its own handshakes before a real client's.
            let entries: Vec<(std::net::IpAddr, Micros)> = self
                .pending
                .iter()
                .map(|p| (p.addr.ip(), p.created_us))
                .collect();
            if let Some(victim) = crate::admission::fair_victim(&entries) {
                self.pending.remove(victim);
                io.stats.handshakes_evicted += 1;
            }
        }
        let mut session_cid = io.rng.next_u64();
        while session_cid == 0 {
            session_cid = io.rng.next_u64();
        }
        let host_suites = io.cfg.suites;
        let (log2, auth_only) = (io.cfg.key_update_log2, io.cfg.video_auth_only);
        let result = HostHandshake::respond(
            &io.cfg.identity,
            mode,
            hello.noise,
            pin.as_deref(),
            &mut *io.rng,
            |offer| {
                Some(SessionSetup {
                    connection_id: session_cid,
                    suite: offer.choose(host_suites)?,
                    key_update_log2: log2,
                    video_auth_only: auth_only,
                    spake: None,
                })
            },
        );
        let (hs, msg2, _summary, setup) = match result {
            Ok(x) => x,
            Err(crate::handshake::HandshakeError::NoSuite) => {
                return cleartext_reject(
                    io,
                    from,
                    cid,
                    AMPLIFICATION_FACTOR * len as u64,
                    RejectReason::Other,
                    "no cipher suite in common with the host".into(),
                )
            }
            Err(_) => {
                io.stats.handshakes_failed += 1;
                return;
            }
        };
        io.stats.handshakes_started += 1;
        let mut out = Vec::with_capacity(HEADER_LEN + msg2.len());
        encode_handshake(
            &Header::new(PacketType::HelloReply, cid, 0),
            &msg2,
            &mut out,
        );
        let mut p = Pending {
            addr: from,
            client_cid: cid,
            created_us: now,
            state: PendingState::AwaitFinish(Box::new(hs)),
            msg2,
            setup,
            mode,
            pin,
            received: len as u64,
            sent: 0,
        };
        if p.charge(out.len()) {
            io.reply(from, out);
        } else {
            io.stats.amplification_limited += 1;
        }
        self.pending.push(p);
    }

    /// A HelloFinish (message 3): a repeat of a refused one draws its Reject again; a forged
    /// or wrong-PIN one is dropped (a PIN failure answered and counted against the PIN); an
    /// authentic one is taken out of the table, paired (PIN mode) or judged against the
    /// allowlist, and handed to the session.
    /// A Retry (small, stateless) to an address that has not proved it receives: its next
    /// Hello carries the token.
    fn send_retry(&self, now: Micros, from: SocketAddr, cid: u64, len: usize, io: &mut Io<'_>) {
        let token = self.make_token(now, from, cid, now / RETRY_SLOT_US);
        let mut out = Vec::with_capacity(HEADER_LEN + token.len());
        encode_handshake(&Header::new(PacketType::Retry, cid, 0), &token, &mut out);
        if out.len() <= AMPLIFICATION_FACTOR as usize * len {
            io.stats.retries_sent += 1;
            io.reply(from, out);
        }
    }

    pub(in crate::host) fn on_finish(
        &mut self,
        now: Micros,
        from: SocketAddr,
        cid: u64,
        msg3: &[u8],
        len: usize,
        io: &mut Io<'_>,
    ) -> Finish {
        let Some(i) = self
            .pending
            .iter()
            .position(|p| p.addr == from && p.client_cid == cid)
        else {
            return Finish::NotPending;
        };
        let p = &mut self.pending[i];
        let hs = match &mut p.state {
            PendingState::AwaitFinish(hs) => hs,
            PendingState::Refused {
                reject,
                msg3: first,
                sent_us,
            } => {
                // Only a copy of the authenticated message 3 is a repeat (the Reject was
                // lost); it is answered at most once per interval and within the address's
                // 3× budget, which only such copies add to.
                if msg3 != first.as_slice() {
                    io.stats.auth_failures += 1;
                    return Finish::Done;
                }
                p.received += len as u64;
                if now < *sent_us + HANDSHAKE_REPEAT_ANSWER_US {
                    return Finish::Done;
                }
                let out = reject.clone();
                *sent_us = now;
                if !p.charge(out.len()) {
                    io.stats.amplification_limited += 1;
                    return Finish::Done;
                }
                io.reply(from, out);
                return Finish::Done;
            }
        };
        if let Some(pin) = &p.pin {
            // Checked only under the live PIN with attempts left: attempts used up (by
            // concurrent guesses), the PIN expired, replaced or used by another client mean
            // this guess is refused unread.
            let live = self
                .pin
                .as_ref()
                .is_some_and(|l| &l.pin == pin && now < l.expires_us && l.attempts_left > 0);
            if !live {
                // (An unread message 3 adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.pending.remove(i);
                io.stats.handshakes_failed += 1;
                cleartext_reject(
                    io,
                    from,
                    cid,
                    budget,
                    RejectReason::Pin,
                    "the pairing PIN is no longer active on the host (used up, expired or \
                     replaced): run `untether pair --pin` there for a new one"
                        .into(),
                );
                return Finish::Done;
            }
        }
        let (key, info, keys) = match hs.finish(msg3) {
            Ok(x) => x,
            Err(_) => {
                // Forged or corrupted message 3, or (PIN mode) the wrong PIN.
                let mode = p.mode;
                // (A message 3 that failed adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.pending.remove(i);
                io.stats.handshakes_failed += 1;
                if mode == Mode::Pin {
                    io.stats.pin_failures += 1;
                    let guess = Incoming::datagram(from.ip(), CredentialKind::Pin, true);
                    self.gate.checked(now, &guess, false);
                    let left = match &mut self.pin {
                        Some(pin) => {
                            pin.attempts_left = pin.attempts_left.saturating_sub(1);
                            pin.attempts_left
                        }
                        None => 0,
                    };
                    if left == 0 {
                        self.pin = None;
                    }
                    self.pairing_event(PairingEvent::PinFailed {
                        addr: from,
                        attempts_left: left,
                    });
                    cleartext_reject(
                        io,
                        from,
                        cid,
                        budget,
                        RejectReason::Pin,
                        format!("wrong PIN ({left} attempts left)"),
                    );
                }
                return Finish::Done;
            }
        };
        // Message 3 is authentic: it counts towards the address's budget.
        p.received += len as u64;
        if p.mode == Mode::Pin {
            // The right PIN: the address's streak of wrong ones ends.
            let right = Incoming::datagram(from.ip(), CredentialKind::Pin, true);
            self.gate.checked(now, &right, true);
        }
        // The client proved it received message 2: the address is validated.
        let p = self.pending.remove(i);
        io.stats.handshakes_completed += 1;
        let protection = Protection::new(
            p.setup.suite,
            keys.send,
            keys.recv,
            p.setup.key_update_log2,
            p.setup.video_auth_only,
        );
        let fp = fingerprint(&key);
        let refusal = self.authorize(now, from, &p, key, &fp, &info, io);
        Finish::Authenticated(Box::new(Finished {
            pending: p,
            key,
            info,
            protection,
            fingerprint: fp,
            refusal,
        }))
    }

    /// Authorization of an authenticated key: a right PIN pairs it; a revoked key is refused;
    /// under the allowlist an unknown key is refused and its access request recorded.
    #[allow(clippy::too_many_arguments)]
    fn authorize(
        &mut self,
        now: Micros,
        from: SocketAddr,
        p: &Pending,
        key: PublicKey,
        fp: &str,
        info: &ClientInfoPayload,
        io: &mut Io<'_>,
    ) -> Option<(RejectReason, String)> {
        if p.mode == Mode::Pin {
            // The PIN was right (message 3 authenticated under the SPAKE2 key): pair.
            self.pin = None;
            self.allowed.insert(key);
            self.requests.retain(|r| r.key != key);
            self.pairing_event(PairingEvent::Paired {
                key,
                fingerprint: fp.to_string(),
                name: info.name.clone(),
            });
            None
        } else if self.revoked.contains(&key) {
            Some((
                RejectReason::NotAllowed,
                format!(
                    "the host's owner refused this client ({fp}): its access request was \
                     denied or its access revoked; they can let it in again with `untether \
                     pair approve {fp}`"
                ),
            ))
        } else if io.cfg.access == AccessPolicy::Allowlist && !self.allowed.contains(&key) {
            let message =
                match self.note_access_request(now, from, key, fp, &info.name, io.cfg, io.stats) {
                    Ok(()) => format!(
                        "this client ({fp}) is not paired with the host: approve it there with \
                     `untether pair approve {fp}`, or pair with a PIN (`untether pair --pin` on \
                     the host, then connect with --pin)"
                    ),
                    Err(why) => format!(
                    "this client ({fp}) is not paired with the host, and its access request was \
                     not recorded: {why}. Pair with a PIN instead (`untether pair --pin` on the \
                     host, then connect with --pin), or try again later"
                ),
                };
            Some((RejectReason::PendingApproval, message))
        } else {
            None
        }
    }

    /// Refuses an authenticated client: a Reject sealed with its session's keys, sent within
    /// the address's budget and kept (with its message 3) to answer repeats.
    pub(in crate::host) fn refuse(
        &mut self,
        now: Micros,
        from: SocketAddr,
        finished: Finished,
        msg3: &[u8],
        (reason, message): (RejectReason, String),
        io: &mut Io<'_>,
    ) {
        let Finished {
            pending: mut p,
            mut protection,
            ..
        } = finished;
        let mut out = Vec::with_capacity(96 + message.len());
        encode_control(
            &Header::new(PacketType::Control, p.setup.connection_id, 0),
            &[ControlFrame::Reject(Reject { reason, message })],
            &mut out,
        );
        if protection
            .sealer
            .seal(&mut out, HEADER_LEN, 0, true)
            .is_ok()
        {
            if p.charge(out.len()) {
                io.reply(from, out.clone());
            } else {
                io.stats.amplification_limited += 1;
            }
            p.state = PendingState::Refused {
                reject: out,
                msg3: msg3.to_vec(),
                sent_us: now,
            };
            self.pending.push(p);
        }
    }
}

/// A cleartext Reject, sent only if it is at most `budget` bytes (what the address may still
/// receive: 3× what it sent, less what it was sent).
fn cleartext_reject(
    io: &mut Io<'_>,
    to: SocketAddr,
    cid: u64,
    budget: u64,
    reason: RejectReason,
    message: String,
) {
    io.stats.hellos_rejected += 1;
    let mut out = Vec::with_capacity(64 + message.len());
    Reject { reason, message }.encode(&Header::new(PacketType::Reject, cid, 0), &mut out);
    if out.len() as u64 > budget {
        io.stats.amplification_limited += 1;
        return;
    }
    io.reply(to, out);
}
