//! The handshake responder, shared by every client: Hellos and Retry tokens under one rate
//! limit, the bounded table of handshakes in progress, PIN checks, access requests, and the
//! decision after message 3 (refuse, replace a client's old session, or admit it while
//! `max_clients` allows).

use std::net::SocketAddr;

use super::super::peer::Peer;
use super::super::{AccessPolicy, ClientId, ClientInfo, HostEvent, HostSession, PairingEvent};
use crate::crypto::Protection;
use crate::handshake::{fingerprint, HostHandshake, Mode, SessionSetup};
use crate::wire::{
    self, encode_control, encode_handshake, ByeReason, ControlFrame, Header, PacketType, Reject,
    RejectReason, VersionNegotiation, HEADER_LEN,
};
use crate::{GoneReason, Micros};

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

impl HostSession {
    pub(in crate::host) fn version_negotiation(
        &mut self,
        now: Micros,
        to: SocketAddr,
        theirs: u8,
        len: usize,
    ) {
        // Answer only datagrams as large as a Hello (the answer is far smaller: no
        // amplification), and within the handshake rate.
        if len < wire::HELLO_MIN_LEN || !self.admission.bucket.take(now) {
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
        self.stats.version_negotiations_sent += 1;
        self.reply(to, out);
    }

    /// A cleartext Reject, sent only if it is at most `budget` bytes (what the address may
    /// still receive: 3× what it sent, less what it was sent).
    fn cleartext_reject(
        &mut self,
        to: SocketAddr,
        cid: u64,
        budget: u64,
        reason: RejectReason,
        message: String,
    ) {
        self.stats.hellos_rejected += 1;
        let mut out = Vec::with_capacity(64 + message.len());
        Reject { reason, message }.encode(&Header::new(PacketType::Reject, cid, 0), &mut out);
        if out.len() as u64 > budget {
            self.stats.amplification_limited += 1;
            return;
        }
        self.reply(to, out);
    }

    pub(in crate::host) fn on_hello(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        hello: wire::Hello<'_>,
        len: usize,
    ) {
        if len < wire::HELLO_MIN_LEN || header.connection_id == 0 {
            // Unpadded: answering could amplify a spoofed source's traffic.
            self.stats.malformed_datagrams += 1;
            return;
        }
        let cid = header.connection_id;
        // A repeated Hello: our reply was lost. Send it again within the address's budget.
        if let Some(i) = self
            .admission
            .pending
            .iter()
            .position(|p| p.addr == from && p.client_cid == cid)
        {
            let p = &mut self.admission.pending[i];
            p.received += len as u64;
            if let PendingState::AwaitFinish(_) = p.state {
                let mut out = Vec::with_capacity(HEADER_LEN + p.msg2.len());
                encode_handshake(
                    &Header::new(PacketType::HelloReply, cid, 0),
                    &p.msg2,
                    &mut out,
                );
                if !p.charge(out.len()) {
                    self.stats.amplification_limited += 1;
                    return;
                }
                self.reply(from, out);
            }
            return;
        }
        // Rate limit: a Hello carrying a valid Retry token comes from an address that receives
        // what we send (not a spoofed flood) and draws from a separate, larger budget; others
        // get a Retry (small, stateless) when the budget is used up.
        let validated =
            !hello.token.is_empty() && self.admission.token_valid(now, from, cid, hello.token);
        let allowed = if validated {
            self.admission.validated_bucket.take(now)
        } else {
            self.admission.bucket.take(now)
        };
        if !allowed {
            self.stats.handshakes_rate_limited += 1;
            if !validated {
                let token = self
                    .admission
                    .make_token(now, from, cid, now / RETRY_SLOT_US);
                let mut out = Vec::with_capacity(HEADER_LEN + token.len());
                encode_handshake(&Header::new(PacketType::Retry, cid, 0), &token, &mut out);
                if out.len() <= AMPLIFICATION_FACTOR as usize * len {
                    self.stats.retries_sent += 1;
                    self.reply(from, out);
                }
            }
            return;
        }
        let Some(mode) = Mode::from_u8(hello.mode) else {
            return self.cleartext_reject(
                from,
                cid,
                AMPLIFICATION_FACTOR * len as u64,
                RejectReason::Other,
                format!("unknown handshake mode {}", hello.mode),
            );
        };
        let pin = match mode {
            Mode::Known => None,
            Mode::Pin => match &self.admission.pin {
                Some(p) if now < p.expires_us && p.attempts_left > 0 => Some(p.pin.clone()),
                _ => {
                    return self.cleartext_reject(
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
        self.admission
            .expire_handshakes(now, self.cfg.handshake_timeout_us);
        // No cap on PIN handshakes in progress: a guess is only learnt at message 3 (the
        // SPAKE2 key enters Noise as `psk3`), and message 3 is checked only while the live PIN
        // has attempts left, each failure taking one; a flood of PIN Hellos cannot take the
        // real client's handshake away (issue 33, item 8: capping them at the attempts left
        // let 150 Hellos a second evict it).
        if self.admission.pending.len() >= self.cfg.max_handshakes.max(1) {
            // Full: the oldest handshake of the busiest address (within the busiest network)
            // makes room, so a flood pushes out its own handshakes before a real client's.
            let entries: Vec<(std::net::IpAddr, Micros)> = self
                .admission
                .pending
                .iter()
                .map(|p| (p.addr.ip(), p.created_us))
                .collect();
            if let Some(victim) = super::fair_victim(&entries) {
                self.admission.pending.remove(victim);
                self.stats.handshakes_evicted += 1;
            }
        }
        let mut session_cid = self.rng.next_u64();
        while session_cid == 0 {
            session_cid = self.rng.next_u64();
        }
        let host_suites = self.cfg.suites;
        let (log2, auth_only) = (self.cfg.key_update_log2, self.cfg.video_auth_only);
        let result = HostHandshake::respond(
            &self.cfg.identity,
            mode,
            hello.noise,
            pin.as_deref(),
            &mut self.rng,
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
                return self.cleartext_reject(
                    from,
                    cid,
                    AMPLIFICATION_FACTOR * len as u64,
                    RejectReason::Other,
                    "no cipher suite in common with the host".into(),
                )
            }
            Err(_) => {
                self.stats.handshakes_failed += 1;
                return;
            }
        };
        self.stats.handshakes_started += 1;
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
            self.reply(from, out);
        } else {
            self.stats.amplification_limited += 1;
        }
        self.admission.pending.push(p);
    }

    pub(in crate::host) fn on_finish(
        &mut self,
        now: Micros,
        from: SocketAddr,
        header: &Header,
        msg3: &[u8],
        len: usize,
    ) {
        let cid = header.connection_id;
        let Some(i) = self
            .admission
            .pending
            .iter()
            .position(|p| p.addr == from && p.client_cid == cid)
        else {
            return self.on_finish_repeat(now, from, cid, msg3);
        };
        let p = &mut self.admission.pending[i];
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
                    self.stats.auth_failures += 1;
                    return;
                }
                p.received += len as u64;
                if now < *sent_us + HANDSHAKE_REPEAT_ANSWER_US {
                    return;
                }
                let out = reject.clone();
                *sent_us = now;
                if !p.charge(out.len()) {
                    self.stats.amplification_limited += 1;
                    return;
                }
                return self.reply(from, out);
            }
        };
        if let Some(pin) = &p.pin {
            // Checked only under the live PIN with attempts left: attempts used up (by
            // concurrent guesses), the PIN expired, replaced or used by another client mean
            // this guess is refused unread.
            let live = self
                .admission
                .pin
                .as_ref()
                .is_some_and(|l| &l.pin == pin && now < l.expires_us && l.attempts_left > 0);
            if !live {
                // (An unread message 3 adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.admission.pending.remove(i);
                self.stats.handshakes_failed += 1;
                return self.cleartext_reject(
                    from,
                    cid,
                    budget,
                    RejectReason::Pin,
                    "the pairing PIN is no longer active on the host (used up, expired or \
                     replaced): run `untether pair --pin` there for a new one"
                        .into(),
                );
            }
        }
        let (key, info, keys) = match hs.finish(msg3) {
            Ok(x) => x,
            Err(_) => {
                // Forged or corrupted message 3, or (PIN mode) the wrong PIN.
                let mode = p.mode;
                // (A message 3 that failed adds nothing to the address's budget.)
                let budget = (AMPLIFICATION_FACTOR * p.received).saturating_sub(p.sent);
                self.admission.pending.remove(i);
                self.stats.handshakes_failed += 1;
                if mode == Mode::Pin {
                    self.stats.pin_failures += 1;
                    let left = match &mut self.admission.pin {
                        Some(pin) => {
                            pin.attempts_left = pin.attempts_left.saturating_sub(1);
                            pin.attempts_left
                        }
                        None => 0,
                    };
                    if left == 0 {
                        self.admission.pin = None;
                    }
                    self.admission.pairing_event(PairingEvent::PinFailed {
                        addr: from,
                        attempts_left: left,
                    });
                    self.cleartext_reject(
                        from,
                        cid,
                        budget,
                        RejectReason::Pin,
                        format!("wrong PIN ({left} attempts left)"),
                    );
                }
                return;
            }
        };
        // Message 3 is authentic: it counts towards the address's budget.
        p.received += len as u64;
        // The client proved it received message 2: the address is validated.
        let p = self.admission.pending.remove(i);
        self.stats.handshakes_completed += 1;
        let mut protection = Protection::new(
            p.setup.suite,
            keys.send,
            keys.recv,
            p.setup.key_update_log2,
            p.setup.video_auth_only,
        );
        let fp = fingerprint(&key);
        // Authorization.
        let refusal = if p.mode == Mode::Pin {
            // The PIN was right (message 3 authenticated under the SPAKE2 key): pair.
            self.admission.pin = None;
            self.admission.allowed.insert(key);
            self.admission.requests.retain(|r| r.key != key);
            self.admission.pairing_event(PairingEvent::Paired {
                key,
                fingerprint: fp.clone(),
                name: info.name.clone(),
            });
            None
        } else if self.admission.revoked.contains(&key) {
            Some((
                RejectReason::NotAllowed,
                format!(
                    "the host's owner refused this client ({fp}): its access request was \
                     denied or its access revoked; they can let it in again with `untether \
                     pair approve {fp}`"
                ),
            ))
        } else if self.cfg.access == AccessPolicy::Allowlist
            && !self.admission.allowed.contains(&key)
        {
            let message = match self.admission.note_access_request(
                now,
                from,
                key,
                &fp,
                &info.name,
                &self.cfg,
                &mut self.stats,
            ) {
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
        };
        let refusal = refusal.or_else(|| {
            // The same client again (a restarted run) replaces its old session below.
            let replaces = self.peers.iter().any(|p| p.info.key == key);
            let max = self.max_clients();
            if replaces || self.peers.len() < max {
                return None;
            }
            let names: Vec<String> = self
                .peers
                .iter()
                .take(4)
                .map(|p| format!("{:?}", p.info.name))
                .collect();
            Some((
                RejectReason::Busy,
                format!(
                    "the host serves its maximum of {max} client{} ({}{}); try again when one \
                     leaves, or raise host.max_clients (--max-clients) on the host",
                    if max == 1 { "" } else { "s" },
                    names.join(", "),
                    if self.peers.len() > 4 { ", …" } else { "" }
                ),
            ))
        });
        // The codec: the client's first choice the host can encode. The host has one stream
        // (one encoder): while other clients watch it, a newcomer is given its codec.
        let others = self.peers.iter().any(|p| p.info.key != key);
        let offered: Vec<wire::Codec> = if others || self.cfg.codecs.is_empty() {
            vec![self.cfg.params.codec]
        } else {
            self.cfg.codecs.iter().map(|o| o.codec).collect()
        };
        let codec = wire::choose_codec(&offered, &info.decodes());
        let refusal = refusal.or_else(|| {
            codec.as_ref().err().map(|why| {
                let why = if others && self.cfg.codecs.len() > 1 {
                    format!(
                        "{why} (the stream the host's other clients are watching; the host \
                         offers the others when none is connected)"
                    )
                } else {
                    why.clone()
                };
                (RejectReason::Codec, why)
            })
        });
        if let Some((reason, message)) = refusal {
            self.stats.clients_refused += 1;
            self.events.push_back(HostEvent::ClientRefused {
                addr: from,
                fingerprint: fp.clone(),
                reason,
                message: message.clone(),
            });
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
                let mut p = p;
                if p.charge(out.len()) {
                    self.reply(from, out.clone());
                } else {
                    self.stats.amplification_limited += 1;
                }
                p.state = PendingState::Refused {
                    reject: out,
                    msg3: msg3.to_vec(),
                    sent_us: now,
                };
                self.admission.pending.push(p);
            }
            return;
        }
        // A restarted run of a connected client: tell the old run why (sealed with its keys)
        // and take its place (and its role: a controller that restarts stays in control).
        let mut place = self.peers.len();
        let mut was_controller = false;
        if let Some(i) = self.peers.iter().position(|p| p.info.key == key) {
            self.peers[i].pending.push(ControlFrame::Bye {
                reason: ByeReason::Replaced,
            });
            self.build_controls_of(now, i);
            let old = self.remove_peer(i);
            was_controller = self.roles.controller() == Some(old.info.id);
            place = i;
            self.events.push_back(HostEvent::ClientGone {
                client: old.info.id,
                addr: old.info.addr,
                reason: GoneReason::Replaced,
            });
        }
        let id = ClientId(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        let wants = info.wants;
        let view = info.view;
        let info = ClientInfo {
            id,
            addr: from,
            name: info.name.clone(),
            connection_id: p.setup.connection_id,
            connected_us: now,
            key,
            fingerprint: fp,
            suite: p.setup.suite,
            view,
        };
        if let (Ok(c), false) = (codec, others) {
            // The first client (or a lone client's new run) sets the stream's codec.
            self.cfg.params.codec = c;
            if let Some(o) = self.cfg.codecs.iter().find(|o| o.codec == c) {
                self.cfg.params.refresh_period = o.refresh_period;
            }
        }
        let granted = self.grant_stream(wants, others);
        let token_seed = self.rng.next_u64();
        let peer = Peer::new(
            &self.cfg,
            self.cfg.params,
            &self.published,
            info.clone(),
            cid,
            msg3.to_vec(),
            protection,
            now,
            token_seed,
        );
        self.peers.insert(place, peer);
        if was_controller {
            self.roles.inherit_control(id);
        }
        self.stats.clients_connected += 1;
        // Roles first (the new client's Role rides beside its Accept), then its keyframe.
        let mark = self.events.len();
        self.assign_roles(now);
        let role = self.peers[place].role;
        // (Its role is in ClientConnected: no RoleChanged for it.)
        let mut k = mark;
        while k < self.events.len() {
            if matches!(self.events[k], HostEvent::RoleChanged { client, .. } if client == id) {
                self.events.remove(k);
            } else {
                k += 1;
            }
        }
        self.events.insert(
            mark,
            HostEvent::ClientConnected {
                client: id,
                addr: from,
                name: info.name,
                role,
            },
        );
        if let Some((asked, granted, clamped)) = granted {
            self.events.push_back(HostEvent::StreamGranted {
                client: id,
                asked,
                granted,
                clamped,
                shared: others,
            });
        }
        // A key that keeps reconnecting waits longer and longer for its join keyframe.
        self.stream.keyframes().on_join(now, id, Some(key));
        self.request_entry_point(now);
    }

    /// The stream's size, frame rate and bit rate for a client admitted now: the first client
    /// (none `others`) sets them from its wants within the configured limits (none: the
    /// limits), as it sets the codec; a client joining others gets the stream as it is. What
    /// it asked for, what it got and whether the limits lowered it (None: it asked nothing).
    fn grant_stream(
        &mut self,
        wants: Option<crate::StreamWants>,
        others: bool,
    ) -> Option<(crate::StreamWants, wire::SessionParams, bool)> {
        if others {
            let w = wants?;
            let p = self.cfg.params;
            let clamped = w.grant(&self.limits.0).1;
            return Some((w, p, clamped));
        }
        let (granted, clamped) = wants.unwrap_or_default().grant(&self.limits.0);
        let p = &mut self.cfg.params;
        (p.width, p.height, p.fps, p.bitrate_kbps) = (
            granted.width,
            granted.height,
            granted.fps,
            granted.bitrate_kbps,
        );
        // The adaptive bitrate stays at or below what was granted.
        self.cfg.rate = self.limits.1.map(|r| crate::rate::RateConfig {
            max_kbps: granted.bitrate_kbps,
            min_kbps: r.min_kbps.min(granted.bitrate_kbps),
            ..r
        });
        wants.map(|w| (w, self.cfg.params, clamped))
    }

    /// A HelloFinish that matches no handshake in progress: a connected client's repeat (its
    /// Accept was lost) draws the Accept again — if it is an exact copy of its message 3, the
    /// client has not yet shown it has the Accept, and no Accept went out in the last
    /// [`HANDSHAKE_REPEAT_ANSWER_US`]. Anything else is dropped.
    fn on_finish_repeat(&mut self, now: Micros, from: SocketAddr, cid: u64, msg3: &[u8]) {
        let beside = super::super::peer::BesideAccept::of(&self.cfg);
        let Some(peer) = self
            .peers
            .iter_mut()
            .find(|p| p.handshake_cid == cid && p.info.addr == from)
        else {
            self.stats.unknown_connection += 1;
            return;
        };
        if msg3 != peer.handshake_msg3.as_slice() {
            self.stats.auth_failures += 1;
            return;
        }
        if peer.confirmed || now < peer.accept_sent_us + HANDSHAKE_REPEAT_ANSWER_US {
            return;
        }
        super::super::peer::queue_accept(&mut peer.pending, peer.params, &beside);
        peer.accept_sent_us = now;
    }
}
