//! The client's connection to the host: its connection id and keys, its packet numbers,
//! the sealing of control datagrams (batched up to the datagram size) and of PathResponses,
//! the clock-sync pings, the keep-alive and the idle timeout. [`Connection`] owns that state.

use std::collections::VecDeque;

use super::{ClientStats, Route};
use crate::crypto::{Opener, Protection, Suite, TAG_LEN};
use crate::handshake::PublicKey;
use crate::paths::MAX_PATHS;
use crate::wire::{encode_control, ControlFrame, Header, PacketType, SessionParams, HEADER_LEN};
use crate::Micros;

/// Pings sent at short intervals right after connecting, to get a clock estimate quickly.
const PING_BURST: u32 = 8;
const PING_BURST_INTERVAL_US: Micros = 20_000;

/// The session's keys, packet numbers and timers of liveness.
pub(super) struct Connection {
    cid: u64,
    protection: Protection,
    host_key: PublicKey,
    params: SessionParams,
    last_recv_us: Micros,
    last_send_us: Micros,
    next_pn: u64,
    next_ping_us: Micros,
    pings_in_burst: u32,
    next_ping_id: u32,
    /// Pings after the first burst, this often.
    ping_interval_us: Micros,
    /// PathChallenges to answer: (path, token).
    path_responses: Vec<(u8, u64)>,
}

impl Connection {
    /// A session just accepted at `now`: the first ping is due at once.
    pub(super) fn new(
        now: Micros,
        cid: u64,
        protection: Protection,
        host_key: PublicKey,
        params: SessionParams,
        ping_interval_us: Micros,
    ) -> Connection {
        Connection {
            cid,
            protection,
            host_key,
            params,
            last_recv_us: now,
            last_send_us: now,
            next_pn: 0,
            next_ping_us: now,
            pings_in_burst: 0,
            next_ping_id: 0,
            ping_interval_us,
            path_responses: Vec::new(),
        }
    }

    /// The connection id of every protected datagram of the session.
    pub(super) fn cid(&self) -> u64 {
        self.cid
    }

    pub(super) fn host_key(&self) -> PublicKey {
        self.host_key
    }

    pub(super) fn params(&self) -> SessionParams {
        self.params
    }

    pub(super) fn suite(&self) -> Suite {
        self.protection.sealer.suite()
    }

    /// Key updates in both directions.
    pub(super) fn key_updates(&self) -> u64 {
        self.protection.sealer.key_updates + self.protection.opener.key_updates
    }

    /// When the last authenticated datagram arrived.
    pub(super) fn last_recv_us(&self) -> Micros {
        self.last_recv_us
    }

    /// Opens a protected datagram of the session in `scratch` (a shard is authenticated only
    /// when the session says so); returns the body's length, and notes the host alive.
    pub(super) fn open(
        &mut self,
        now: Micros,
        scratch: &mut Vec<u8>,
        data: &[u8],
        pn: u64,
        shard: bool,
    ) -> Option<usize> {
        let encrypted = !(shard && self.protection.video_auth_only);
        let len = open_into(scratch, &mut self.protection.opener, data, pn, encrypted)?;
        self.last_recv_us = now;
        Some(len)
    }

    /// Nothing authentic heard for the session's idle timeout.
    pub(super) fn idle(&self, now: Micros) -> bool {
        now >= self.idle_at()
    }

    fn idle_at(&self) -> Micros {
        self.last_recv_us + self.params.idle_timeout_ms as u64 * 1000
    }

    fn keepalive_at(&self) -> Micros {
        self.last_send_us + self.params.keepalive_ms as u64 * 1000
    }

    /// Nothing sent for the session's keep-alive interval.
    pub(super) fn keepalive_due(&self, now: Micros) -> bool {
        now >= self.keepalive_at()
    }

    /// The next timer: keep-alive, idle timeout or ping.
    pub(super) fn poll_timeout(&self) -> Micros {
        self.keepalive_at()
            .min(self.idle_at())
            .min(self.next_ping_us)
    }

    /// The ping due now: a quick burst after connecting, then every ping interval.
    pub(super) fn poll_ping(&mut self, now: Micros) -> Option<ControlFrame> {
        if now < self.next_ping_us {
            return None;
        }
        self.pings_in_burst += 1;
        self.next_ping_us = now
            + if self.pings_in_burst < PING_BURST {
                PING_BURST_INTERVAL_US
            } else {
                self.ping_interval_us
            };
        let id = self.next_ping_id;
        self.next_ping_id = self.next_ping_id.wrapping_add(1);
        Some(ControlFrame::Ping { id, sent_us: now })
    }

    /// An empty control datagram, which keeps the session alive.
    pub(super) fn keepalive(&mut self, now: Micros) -> Option<Vec<u8>> {
        self.last_send_us = now;
        let mut out = Vec::with_capacity(HEADER_LEN + TAG_LEN);
        let pn = self.take_pn();
        encode_control(
            &Header::new(PacketType::Control, self.cid, pn),
            &[],
            &mut out,
        );
        self.protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .is_ok()
            .then_some(out)
    }

    fn take_pn(&mut self) -> u64 {
        let pn = self.next_pn;
        self.next_pn += 1;
        pn
    }

    /// Seals the pending control frames into as few datagrams as fit the session's datagram
    /// size (one frame at least each), for every path. A sealing failure drops the rest.
    pub(super) fn seal_control(
        &mut self,
        now: Micros,
        pending: &mut Vec<ControlFrame>,
        out: &mut VecDeque<(Route, Vec<u8>)>,
        stats: &mut ClientStats,
    ) {
        let max = self.params.max_datagram as usize;
        self.last_send_us = now;
        while !pending.is_empty() {
            let mut len = HEADER_LEN + TAG_LEN;
            let mut n = 0;
            for f in pending.iter() {
                let l = f.encoded_len();
                if n > 0 && len + l > max {
                    break;
                }
                len += l;
                n += 1;
            }
            let frames: Vec<ControlFrame> = pending.drain(..n).collect();
            let mut d = Vec::with_capacity(len);
            let pn = self.take_pn();
            encode_control(
                &Header::new(PacketType::Control, self.cid, pn),
                &frames,
                &mut d,
            );
            if self
                .protection
                .sealer
                .seal(&mut d, HEADER_LEN, pn, true)
                .is_err()
            {
                pending.clear();
                return;
            }
            stats.bytes_sent += d.len() as u64;
            stats.datagrams_sent += 1;
            out.push_back((Route::All, d));
        }
    }

    /// A PathChallenge that came on `path`: answered on that path with the next datagrams.
    pub(super) fn on_path_challenge(&mut self, path: u8, token: u64) {
        // Bounded: at most one per path per probe interval is expected.
        if self.path_responses.len() < 4 * MAX_PATHS {
            self.path_responses.push((path, token));
        }
    }

    /// Answers the PathChallenges, each on its own path.
    pub(super) fn seal_path_responses(
        &mut self,
        out: &mut VecDeque<(Route, Vec<u8>)>,
        stats: &mut ClientStats,
    ) {
        for (path, token) in std::mem::take(&mut self.path_responses) {
            let mut d = Vec::with_capacity(HEADER_LEN + 11 + TAG_LEN);
            let pn = self.take_pn();
            encode_control(
                &Header::new(PacketType::Control, self.cid, pn),
                &[ControlFrame::PathResponse { token }],
                &mut d,
            );
            if self
                .protection
                .sealer
                .seal(&mut d, HEADER_LEN, pn, true)
                .is_ok()
            {
                stats.bytes_sent += d.len() as u64;
                stats.datagrams_sent += 1;
                stats.path_responses_sent += 1;
                out.push_back((Route::Path(path), d));
            }
        }
    }
}

/// Copies a protected datagram into the reusable buffer and opens it there; returns the
/// body's length (the plaintext is `buf[HEADER_LEN..HEADER_LEN + len]`).
pub(super) fn open_into(
    buf: &mut Vec<u8>,
    opener: &mut Opener,
    data: &[u8],
    pn: u64,
    encrypted: bool,
) -> Option<usize> {
    buf.clear();
    buf.extend_from_slice(data);
    opener.open(buf, HEADER_LEN, pn, encrypted).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, Datagram};

    const SEND: [u8; 32] = [1; 32];
    const RECV: [u8; 32] = [2; 32];

    fn connection(now: Micros) -> Connection {
        let p = Protection::new(Suite::ChaCha20Poly1305, SEND, RECV, 20, false);
        Connection::new(now, 77, p, [5; 32], super::super::test_params(), 500_000)
    }

    /// The host's side of the keys.
    fn host() -> Protection {
        Protection::new(Suite::ChaCha20Poly1305, RECV, SEND, 20, false)
    }

    /// Opens a datagram of the client as the host does: its packet number and frames.
    fn open(host: &mut Protection, d: &[u8]) -> (u64, Vec<ControlFrame>) {
        let (h, Datagram::Control(_)) = wire::parse(d).unwrap() else {
            panic!("not a control datagram");
        };
        assert_eq!(h.connection_id, 77);
        let mut buf = Vec::new();
        let len = open_into(&mut buf, &mut host.opener, d, h.packet_number, true).unwrap();
        let frames = wire::parse_control(&buf[HEADER_LEN..HEADER_LEN + len]).unwrap();
        (h.packet_number, frames)
    }

    #[test]
    fn pings_come_in_a_burst_then_at_the_ping_interval() {
        let mut l = connection(0);
        let mut sent = Vec::new();
        let mut now = 0;
        while sent.len() < PING_BURST as usize + 2 {
            if let Some(ControlFrame::Ping { id, sent_us }) = l.poll_ping(now) {
                assert_eq!(sent_us, now);
                sent.push((id, now));
            }
            now += 1_000;
        }
        let ids: Vec<u32> = sent.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (0..PING_BURST + 2).collect::<Vec<_>>());
        let gaps: Vec<Micros> = sent.windows(2).map(|w| w[1].1 - w[0].1).collect();
        let burst = PING_BURST as usize - 1;
        assert!(gaps[..burst].iter().all(|g| *g == PING_BURST_INTERVAL_US));
        assert!(gaps[burst..].iter().all(|g| *g == 500_000), "{gaps:?}");
    }

    #[test]
    fn keepalive_and_idle_timeout_follow_the_sessions_parameters() {
        let mut l = connection(1_000);
        while l.poll_ping(1_000).is_some() {}
        let params = super::super::test_params();
        let keepalive = 1_000 + params.keepalive_ms as Micros * 1000;
        assert!(!l.keepalive_due(keepalive - 1));
        assert!(l.keepalive_due(keepalive));
        // Sending restarts the keep-alive; the keep-alive itself is a sealed empty datagram.
        let d = l.keepalive(keepalive).unwrap();
        assert_eq!(open(&mut host(), &d), (0, vec![]));
        assert!(!l.keepalive_due(keepalive + 1));
        // Only an authentic datagram restarts the idle timeout.
        let idle = 1_000 + params.idle_timeout_ms as Micros * 1000;
        assert!(!l.idle(idle - 1) && l.idle(idle));
        let mut forged = d.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert_eq!(l.open(idle - 1, &mut Vec::new(), &forged, 0, false), None);
        assert!(l.idle(idle));
    }

    #[test]
    fn control_frames_are_batched_up_to_the_datagram_size_with_new_packet_numbers() {
        let mut l = connection(0);
        let mut host = host();
        let mut pending: Vec<ControlFrame> = (0..400)
            .map(|id| ControlFrame::Ping { id, sent_us: 9 })
            .collect();
        let (mut out, mut stats) = (VecDeque::new(), ClientStats::default());
        l.seal_control(10, &mut pending, &mut out, &mut stats);
        assert!(pending.is_empty());
        assert!(out.len() > 1);
        assert_eq!(stats.datagrams_sent, out.len() as u64);
        let mut ids = Vec::new();
        for (i, (route, d)) in out.iter().enumerate() {
            assert_eq!(*route, Route::All);
            assert!(d.len() <= super::super::test_params().max_datagram as usize);
            let (pn, frames) = open(&mut host, d);
            assert_eq!(pn, i as u64);
            ids.extend(frames.iter().map(|f| match f {
                ControlFrame::Ping { id, .. } => *id,
                f => panic!("{f:?}"),
            }));
        }
        assert_eq!(ids, (0..400).collect::<Vec<_>>());
    }

    #[test]
    fn a_path_challenge_is_answered_on_its_own_path() {
        let mut l = connection(0);
        l.on_path_challenge(2, 0xabc);
        let (mut out, mut stats) = (VecDeque::new(), ClientStats::default());
        l.seal_path_responses(&mut out, &mut stats);
        let (route, d) = out.pop_front().unwrap();
        assert_eq!(route, Route::Path(2));
        assert_eq!(
            open(&mut host(), &d).1,
            vec![ControlFrame::PathResponse { token: 0xabc }]
        );
        assert_eq!(stats.path_responses_sent, 1);
        // Answered once.
        l.seal_path_responses(&mut out, &mut stats);
        assert!(out.is_empty());
    }
}
