//! Who may open a session: the handshakes in progress, the allowed and revoked keys, the
//! pending access requests (bounded, per-address limited, expiring), the one-time PIN and its
//! attempts, the handshake rate buckets and the Retry key. [`Responder`] owns that state; the
//! handshake responder ([`handshake`]) drives it for the session.

mod handshake;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use super::{AccessRequest, HostConfig, HostStats, PairingEvent, PairingPin};
use crate::handshake::PublicKey;
use crate::Micros;

use crate::admission::{fair_victim, Admission, AdmissionConfig};
pub(super) use handshake::{Finish, Finished, Io};
use handshake::{Pending, RETRY_SLOT_US};
pub use handshake::{AMPLIFICATION_FACTOR, HANDSHAKE_REPEAT_ANSWER_US};

/// Pairing events kept for the application (oldest dropped).
const MAX_PAIRING_EVENTS: usize = 64;

/// A token bucket.
pub(super) struct Bucket {
    tokens: f64,
    rate_per_us: f64,
    burst: f64,
    last_us: Micros,
}

impl Bucket {
    /// `rate` per second, `burst` at most (and at first).
    pub(super) fn new(rate: f64, burst: f64) -> Bucket {
        Bucket {
            tokens: burst,
            rate_per_us: rate / 1e6,
            burst: burst.max(1.0),
            last_us: 0,
        }
    }

    pub(super) fn take(&mut self, now: Micros) -> bool {
        let dt = now.saturating_sub(self.last_us) as f64;
        self.last_us = self.last_us.max(now);
        self.tokens = (self.tokens + dt * self.rate_per_us).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Responder state of the host (private: the handshake responder and the pairing API below
/// are its only users).
pub(super) struct Responder {
    pending: Vec<Pending>,
    allowed: HashSet<PublicKey>,
    revoked: HashSet<PublicKey>,
    requests: VecDeque<AccessRequest>,
    /// New access requests per source IP address in the current minute: (minute start, count).
    request_counts: HashMap<IpAddr, (Micros, u32)>,
    pin: Option<PairingPin>,
    bucket: Bucket,
    /// New handshakes from addresses that proved they receive (a valid Retry token).
    validated_bucket: Bucket,
    retry_key: ring::hmac::Key,
    pairing: VecDeque<PairingEvent>,
    /// The host's one admission (its per-address budget and wrong-credential throttle), shared
    /// with the browsers' and RTSP's doors when the host hands it over
    /// ([`super::HostSession::share_admission`]); PIN handshakes go through it.
    gate: Admission,
}

impl Responder {
    pub(super) fn new(cfg: &HostConfig, retry_secret: &[u8]) -> Responder {
        Responder {
            pending: Vec::new(),
            allowed: cfg.allowed_clients.iter().copied().collect(),
            revoked: cfg.revoked_clients.iter().copied().collect(),
            requests: VecDeque::new(),
            request_counts: HashMap::new(),
            pin: None,
            bucket: Bucket::new(cfg.handshake_rate as f64, cfg.handshake_burst as f64),
            validated_bucket: Bucket::new(
                4.0 * cfg.handshake_rate as f64,
                4.0 * cfg.handshake_burst as f64,
            ),
            retry_key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, retry_secret),
            pairing: VecDeque::new(),
            gate: Admission::new(AdmissionConfig::default()),
        }
    }

    /// Uses `gate` (the host's one admission) from now on.
    pub(super) fn share_admission(&mut self, gate: Admission) {
        self.gate = gate;
    }

    pub(super) fn admission(&self) -> &Admission {
        &self.gate
    }

    /// The next handshake or access request to expire.
    pub(super) fn poll_timeout(&self, cfg: &HostConfig) -> Option<Micros> {
        let hs = self
            .pending
            .iter()
            .map(|p| p.created_us + cfg.handshake_timeout_us)
            .min();
        let requests = self
            .requests
            .iter()
            .map(|r| r.last_us.saturating_add(cfg.access_request_ttl_us))
            .min();
        hs.into_iter().chain(requests).min()
    }

    /// Forgets the access requests not repeated within `ttl`; returns how many.
    pub(super) fn expire_access_requests(&mut self, now: Micros, ttl: Micros) -> u64 {
        let before = self.requests.len();
        self.requests
            .retain(|r| now < r.last_us.saturating_add(ttl));
        (before - self.requests.len()) as u64
    }

    pub(super) fn expire_handshakes(&mut self, now: Micros, timeout: Micros) {
        self.pending.retain(|p| now < p.created_us + timeout);
    }

    fn pairing_event(&mut self, e: PairingEvent) {
        if self.pairing.len() >= MAX_PAIRING_EVENTS {
            self.pairing.pop_front();
        }
        self.pairing.push_back(e);
    }

    pub(super) fn allow(&mut self, key: PublicKey) {
        self.revoked.remove(&key);
        self.allowed.insert(key);
        self.requests.retain(|r| r.key != key);
    }

    pub(super) fn revoke(&mut self, key: PublicKey) {
        self.allowed.remove(&key);
        self.revoked.insert(key);
        self.requests.retain(|r| r.key != key);
    }

    /// A Retry token: `slot u32 ‖ HMAC-SHA256(key, slot ‖ address ‖ port ‖ cid)[..16]`.
    pub(super) fn make_token(
        &self,
        _now: Micros,
        addr: SocketAddr,
        cid: u64,
        slot: u64,
    ) -> Vec<u8> {
        let slot = slot as u32;
        let mut ctx = ring::hmac::Context::with_key(&self.retry_key);
        ctx.update(&slot.to_be_bytes());
        match addr.ip() {
            std::net::IpAddr::V4(a) => ctx.update(&a.octets()),
            std::net::IpAddr::V6(a) => ctx.update(&a.octets()),
        }
        ctx.update(&addr.port().to_be_bytes());
        ctx.update(&cid.to_be_bytes());
        let tag = ctx.sign();
        let mut t = Vec::with_capacity(20);
        t.extend_from_slice(&slot.to_be_bytes());
        t.extend_from_slice(&tag.as_ref()[..16]);
        t
    }

    /// A token is valid for its address and handshake id during its 10 s slot and the next.
    pub(super) fn token_valid(
        &self,
        now: Micros,
        addr: SocketAddr,
        cid: u64,
        token: &[u8],
    ) -> bool {
        if token.len() != 20 {
            return false;
        }
        let slot = u32::from_be_bytes([token[0], token[1], token[2], token[3]]) as u64;
        let cur = (now / RETRY_SLOT_US) & u32::MAX as u64;
        if slot != cur && slot + 1 != cur {
            return false;
        }
        let expect = self.make_token(now, addr, cid, slot);
        // Constant time: no early exit on the first differing byte.
        expect
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Records an access request (or refreshes a pending one). A new one is refused, and
    /// counted, when its address made too many this minute; when the list is full it takes
    /// the place of the request [`fair_victim`] names (the least recently asked of the
    /// address, within the network, holding the most: a flood from many addresses cannot keep
    /// a real client out, and one that keeps asking stays). Err says why.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn note_access_request(
        &mut self,
        now: Micros,
        addr: SocketAddr,
        key: PublicKey,
        fp: &str,
        name: &str,
        cfg: &HostConfig,
        stats: &mut HostStats,
    ) -> Result<(), &'static str> {
        stats.access_requests += 1;
        stats.access_requests_expired +=
            self.expire_access_requests(now, cfg.access_request_ttl_us);
        if let Some(r) = self.requests.iter_mut().find(|r| r.key == key) {
            r.last_us = now;
            r.attempts += 1;
            r.addr = addr;
            return Ok(());
        }
        const MINUTE_US: Micros = 60_000_000;
        const MAX_ADDRESSES: usize = 1024;
        if self.request_counts.len() >= MAX_ADDRESSES {
            self.request_counts
                .retain(|_, (start, _)| now < *start + MINUTE_US);
        }
        let ip = addr.ip();
        let known = self.request_counts.contains_key(&ip);
        if !known && self.request_counts.len() >= MAX_ADDRESSES {
            stats.access_requests_refused += 1;
            return Err("the host is receiving access requests from too many addresses");
        }
        let count = self.request_counts.entry(ip).or_insert((now, 0));
        if now >= count.0 + MINUTE_US {
            *count = (now, 0);
        }
        if count.1 >= cfg.access_requests_per_minute {
            stats.access_requests_refused += 1;
            return Err("too many new access requests came from this address in the last minute");
        }
        count.1 += 1;
        while self.requests.len() >= cfg.max_access_requests.max(1) {
            let entries: Vec<(IpAddr, Micros)> = self
                .requests
                .iter()
                .map(|r| (r.addr.ip(), r.last_us))
                .collect();
            let Some(victim) = fair_victim(&entries) else {
                break;
            };
            self.requests.remove(victim);
            stats.access_requests_evicted += 1;
        }
        let r = AccessRequest {
            key,
            fingerprint: fp.to_string(),
            name: name.to_string(),
            addr,
            first_us: now,
            last_us: now,
            attempts: 1,
        };
        self.requests.push_back(r.clone());
        self.pairing_event(PairingEvent::AccessRequested(r));
        Ok(())
    }
}

impl Responder {
    /// Whether a key is allowed.
    pub(super) fn is_allowed(&self, key: &PublicKey) -> bool {
        self.allowed.contains(key)
    }

    /// Sets (or clears) the one-time PIN. PIN handshakes in progress under another PIN are
    /// dropped (they could never be checked).
    pub(super) fn set_pin(&mut self, pin: Option<PairingPin>) {
        let live = pin.as_ref().map(|p| p.pin.as_str());
        self.pending
            .retain(|p| p.pin.is_none() || p.pin.as_deref() == live);
        self.pin = pin;
    }

    pub(super) fn pin(&self) -> Option<&PairingPin> {
        self.pin.as_ref()
    }

    /// Pending access requests, oldest first.
    pub(super) fn requests(&self) -> impl Iterator<Item = &AccessRequest> {
        self.requests.iter()
    }

    /// Forgets an access request.
    pub(super) fn deny(&mut self, key: &PublicKey) {
        self.requests.retain(|r| &r.key != key);
    }

    pub(super) fn poll_pairing_event(&mut self) -> Option<PairingEvent> {
        self.pairing.pop_front()
    }

    pub(super) fn handshakes_in_progress(&self) -> usize {
        self.pending.len()
    }

    /// Runs the timers: handshakes past the timeout and access requests not repeated within
    /// the TTL (counted) are forgotten.
    pub(super) fn handle_timeout(&mut self, now: Micros, cfg: &HostConfig, stats: &mut HostStats) {
        self.expire_handshakes(now, cfg.handshake_timeout_us);
        stats.access_requests_expired +=
            self.expire_access_requests(now, cfg.access_request_ttl_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HostConfig {
        let mut c = HostConfig::new(crate::session_multi_tests::params());
        c.access_requests_per_minute = 2;
        c.max_access_requests = 3;
        c
    }

    fn addr(n: u8) -> SocketAddr {
        ([10, 0, 0, n], 4000).into()
    }

    #[test]
    fn access_requests_are_bounded_limited_per_address_and_expire() {
        let c = cfg();
        let mut a = Responder::new(&c, &[1; 32]);
        let mut st = HostStats::default();
        let mut note = |a: &mut Responder, now, n: u8, k: u8| {
            a.note_access_request(now, addr(n), [k; 32], "fp", "name", &c, &mut st)
        };
        assert!(note(&mut a, 0, 1, 1).is_ok());
        assert!(note(&mut a, 0, 1, 2).is_ok());
        // A third new key from that address this minute is refused; a repeat is not new.
        assert!(note(&mut a, 0, 1, 3).is_err());
        assert!(note(&mut a, 1_000, 1, 1).is_ok());
        assert!(note(&mut a, 0, 2, 3).is_ok());
        // Full: the least recently asked of the busiest address (key 2: address 1 holds two,
        // and key 1 asked again at 1 ms) makes room.
        assert!(note(&mut a, 2_000, 3, 4).is_ok());
        assert_eq!(
            a.requests.iter().map(|r| r.key[0]).collect::<Vec<_>>(),
            [1, 3, 4]
        );
        assert_eq!(st.access_requests_evicted, 1);
        // Past the TTL from their last request, gone.
        let ttl = c.access_request_ttl_us;
        assert_eq!(a.expire_access_requests(1_500 + ttl, ttl), 2);
        assert_eq!(a.requests.iter().map(|r| r.key[0]).collect::<Vec<_>>(), [4]);
        assert_eq!(a.poll_timeout(&c), Some(2_000 + ttl));
        assert_eq!(st.access_requests_refused, 1);
    }

    #[test]
    fn allowing_or_revoking_a_key_takes_its_request_away() {
        let c = cfg();
        let mut a = Responder::new(&c, &[1; 32]);
        let mut st = HostStats::default();
        for k in 1..=2 {
            let _ = a.note_access_request(0, addr(k), [k; 32], "fp", "n", &c, &mut st);
        }
        a.allow([1; 32]);
        a.revoke([2; 32]);
        assert!(a.requests.is_empty());
        assert!(a.allowed.contains(&[1; 32]) && a.revoked.contains(&[2; 32]));
        a.allow([2; 32]);
        assert!(!a.revoked.contains(&[2; 32]));
    }

    #[test]
    fn a_retry_token_is_bound_to_its_address_id_and_slot() {
        let a = Responder::new(&cfg(), &[1; 32]);
        let t = a.make_token(0, addr(1), 7, 0);
        assert!(a.token_valid(0, addr(1), 7, &t));
        assert!(a.token_valid(RETRY_SLOT_US, addr(1), 7, &t));
        assert!(!a.token_valid(2 * RETRY_SLOT_US, addr(1), 7, &t));
        assert!(!a.token_valid(0, addr(2), 7, &t));
        assert!(!a.token_valid(0, addr(1), 8, &t));
    }
}
