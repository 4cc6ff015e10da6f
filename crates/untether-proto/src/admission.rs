//! The host's one admission: every door (the Noise handshake, the browsers' offers with their
//! link token, PIN or resume secret, RTSP's digest) hands it an [`Incoming`] — a source
//! address and the kind of credential presented — and gets a [`Decision`], in the manner of
//! quinn's `Incoming` (`accept` / `refuse` / `retry` / `ignore`). The door checks the
//! credential itself (it knows the secret) and reports what the check came to
//! ([`Admission::checked`]), so that an address that keeps guessing is refused at every door.
//!
//! Two things per source address, in one bounded table:
//!
//! - **The budget**: a token bucket ([`AdmissionConfig::burst`], one more every
//!   [`AdmissionConfig::refill_every_us`]); each [`Incoming`] takes one. One per address for
//!   all doors: an address flooding the browsers' signalling has no fresh budget left for RTSP.
//! - **The throttle**: [`AdmissionConfig::free_failures`] wrong credentials in a row are free;
//!   then the address is refused (its credentials unchecked, the right ones included) for
//!   [`AdmissionConfig::first_block_us`], twice as long at each next failure, up to
//!   [`AdmissionConfig::max_block_us`]. A right credential resets it; an address without a
//!   wrong one for [`AdmissionConfig::forget_us`] starts again from nothing.
//!
//! The table holds at most [`AdmissionConfig::max_addresses`]. An entry whose bucket is full
//! and that has no failures to remember says nothing and goes first; beyond that, room is made
//! by [`fair_victims`]: the busiest network's least recently seen addresses, so a flood from
//! one network pushes out its own entries, not a quiet client's. An address being refused for
//! wrong credentials is kept while any other can go.
//!
//! Pure logic: `now` is a parameter (the caller's monotonic clock, the same for every door).
//! [`Admission`] is a cheap cloneable handle (one table behind a mutex) for the several
//! threads that use it; [`AdmissionState`] is the table itself for a single owner.

use std::collections::{BinaryHeap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::Micros;

/// Which credential an [`Incoming`] presents (what its door will check if it is accepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CredentialKind {
    /// Nothing yet (a player's first request before the digest challenge, a page without a
    /// link): it still takes from the budget.
    None,
    /// A Noise static key (our own clients' handshake).
    NoiseKey,
    /// The host's pairing PIN (a client's handshake or a browser's page).
    Pin,
    /// A browser's one-time link token.
    LinkToken,
    /// An admitted page's resume secret.
    Resume,
    /// RTSP digest credentials.
    RtspDigest,
    /// A browser session's own secret, which ends it (`DELETE /whep/ID`).
    SessionSecret,
}

impl CredentialKind {
    /// What it is called in a log line.
    pub fn name(self) -> &'static str {
        match self {
            CredentialKind::None => "no credential",
            CredentialKind::NoiseKey => "key",
            CredentialKind::Pin => "PIN",
            CredentialKind::LinkToken => "link",
            CredentialKind::Resume => "resume secret",
            CredentialKind::RtspDigest => "user/password",
            CredentialKind::SessionSecret => "session secret",
        }
    }
}

/// A peer knocking at one of the host's doors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// Its source address (the port says nothing: a peer picks a new one at will).
    pub from: IpAddr,
    pub credential: CredentialKind,
    /// Whether the address is known to receive what is sent to it: a TCP connection (HTTP,
    /// RTSP) or a datagram with a valid Retry token. An unvalidated datagram's source may be
    /// spoofed: it is never answered with more than a [`Decision::Retry`].
    pub validated: bool,
}

impl Incoming {
    /// From a connection (its address validated by the TCP handshake).
    pub fn connection(from: IpAddr, credential: CredentialKind) -> Incoming {
        Incoming {
            from,
            credential,
            validated: true,
        }
    }

    /// From a datagram; `validated` when it carried a valid Retry token.
    pub fn datagram(from: IpAddr, credential: CredentialKind, validated: bool) -> Incoming {
        Incoming {
            from,
            credential,
            validated,
        }
    }
}

/// Why an [`Incoming`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefuseReason {
    /// The address used up its budget (too many attempts, whatever their credentials).
    Budget,
    /// The address presented wrong credentials too often: refused unchecked for a while.
    WrongCredentials,
}

/// What the door does with an [`Incoming`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Check its credential (then report the outcome with [`Admission::checked`]).
    Accept,
    /// Refuse it without checking anything; it may try again after `retry_after_us`.
    Refuse {
        reason: RefuseReason,
        retry_after_us: Micros,
    },
    /// Out of budget, from an address not validated: ask it to prove its address (a Retry,
    /// small and stateless) rather than answer or refuse a source that may be spoofed.
    Retry,
    /// Drop it without an answer (an unvalidated source refused for wrong credentials: an
    /// answer could go to a spoofed victim).
    Ignore,
}

impl Decision {
    /// Whether the credential is to be checked.
    pub fn accepted(self) -> bool {
        self == Decision::Accept
    }
}

/// What a wrong credential came to (for the door's log: one line per streak and per refusal,
/// never one per guess).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The first of a streak: worth one line.
    First,
    /// One more, below the limit: not worth a line.
    Again,
    /// The address is refused from now on for `for_us` after `failures` wrong credentials
    /// in a row; `refused_before`: attempts refused unchecked during its previous refusal.
    Blocked {
        failures: u32,
        for_us: Micros,
        refused_before: u64,
    },
}

/// The budget's and the throttle's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Attempts one address may make at once (any door, any credential).
    pub burst: u32,
    /// One more attempt per this long.
    pub refill_every_us: Micros,
    /// Wrong credentials in a row an address may present before it is refused.
    pub free_failures: u32,
    /// How long the first refusal lasts; each next one lasts twice as long.
    pub first_block_us: Micros,
    /// The longest refusal.
    pub max_block_us: Micros,
    /// An address without a wrong credential for this long starts its streak again.
    pub forget_us: Micros,
    /// Addresses remembered at most.
    pub max_addresses: usize,
}

impl Default for AdmissionConfig {
    /// A page makes one offer per load or PIN try, a player one RTSP connection, a client
    /// one handshake: 8 at once and one every 2 s is far beyond what a person does, far
    /// below a flood. The throttle's numbers are RTSP's of before (5 free, 10 s doubling to
    /// 10 min, forgotten after an hour).
    fn default() -> Self {
        AdmissionConfig {
            burst: 8,
            refill_every_us: 2_000_000,
            free_failures: 5,
            first_block_us: 10_000_000,
            max_block_us: 600_000_000,
            forget_us: 3_600_000_000,
            max_addresses: 4096,
        }
    }
}

/// What the admission counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    pub accepted: u64,
    /// Refused (or asked to Retry) for want of budget.
    pub over_budget: u64,
    /// Refused (or ignored) unchecked for wrong credentials before.
    pub throttled: u64,
    /// Wrong credentials reported.
    pub failures: u64,
    /// Refusals started.
    pub blocks: u64,
    /// Entries pushed out to make room.
    pub evicted: u64,
}

/// One source address.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Attempts left in the bucket.
    tokens: u32,
    /// When the bucket last gained a token (or was made).
    since_us: Micros,
    /// Wrong credentials since the last right one.
    failures: u32,
    /// Refusals so far (the next lasts `first_block_us * 2^blocks`).
    blocks: u32,
    /// Refused until then.
    until_us: Micros,
    /// The latest wrong credential.
    failed_us: Micros,
    /// Attempts refused unchecked during the current (or latest) refusal.
    refused: u64,
    /// The latest attempt or report: its age when room is made.
    seen_us: Micros,
}

impl Entry {
    fn new(now: Micros, burst: u32) -> Entry {
        Entry {
            tokens: burst,
            since_us: now,
            failures: 0,
            blocks: 0,
            until_us: 0,
            failed_us: 0,
            refused: 0,
            seen_us: now,
        }
    }

    fn blocked(&self, now: Micros) -> bool {
        now < self.until_us
    }

    fn refill(&mut self, now: Micros, cfg: &AdmissionConfig) {
        let every = cfg.refill_every_us.max(1);
        let gained = now.saturating_sub(self.since_us) / every;
        if gained == 0 {
            return;
        }
        let gained = u32::try_from(gained).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(gained).min(cfg.burst);
        self.since_us = if self.tokens >= cfg.burst {
            now
        } else {
            self.since_us + every * u64::from(gained)
        };
    }

    /// Whether the streak is old enough to be forgotten (a refusal in force never is).
    fn streak_forgotten(&self, now: Micros, cfg: &AdmissionConfig) -> bool {
        !self.blocked(now) && now.saturating_sub(self.failed_us) > cfg.forget_us
    }

    /// Says nothing the table needs: a full bucket and no streak to remember.
    fn idle(&mut self, now: Micros, cfg: &AdmissionConfig) -> bool {
        self.refill(now, cfg);
        self.tokens >= cfg.burst && (self.failures == 0 || self.streak_forgotten(now, cfg))
    }
}

/// The table of one host's admission, for a single owner; [`Admission`] shares it.
#[derive(Debug)]
pub struct AdmissionState {
    cfg: AdmissionConfig,
    entries: HashMap<IpAddr, Entry>,
    stats: AdmissionStats,
}

impl Default for AdmissionState {
    fn default() -> Self {
        AdmissionState::new(AdmissionConfig::default())
    }
}

impl AdmissionState {
    pub fn new(cfg: AdmissionConfig) -> AdmissionState {
        AdmissionState {
            cfg,
            entries: HashMap::new(),
            stats: AdmissionStats::default(),
        }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    pub fn stats(&self) -> AdmissionStats {
        self.stats
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides what becomes of `incoming` at `now`: refused unchecked while its address is
    /// refused for wrong credentials (taking nothing from its budget), else one attempt of
    /// its budget, or a refusal (a Retry for an unvalidated source) when none is left.
    pub fn decide(&mut self, now: Micros, incoming: &Incoming) -> Decision {
        let cfg = self.cfg;
        let e = self.entry(now, incoming.from);
        e.seen_us = e.seen_us.max(now);
        if e.blocked(now) {
            e.refused = e.refused.saturating_add(1);
            let retry_after_us = e.until_us - now;
            self.stats.throttled += 1;
            return if incoming.validated {
                Decision::Refuse {
                    reason: RefuseReason::WrongCredentials,
                    retry_after_us,
                }
            } else {
                Decision::Ignore
            };
        }
        e.refill(now, &cfg);
        if e.tokens == 0 {
            let next = e.since_us.saturating_add(cfg.refill_every_us.max(1));
            let retry_after_us = next.saturating_sub(now).max(1);
            self.stats.over_budget += 1;
            return if incoming.validated {
                Decision::Refuse {
                    reason: RefuseReason::Budget,
                    retry_after_us,
                }
            } else {
                Decision::Retry
            };
        }
        e.tokens -= 1;
        self.stats.accepted += 1;
        Decision::Accept
    }

    /// Whether `from` is refused for wrong credentials at `now`, and until when; takes
    /// nothing from its budget (a door asking again within one accepted attempt: the next
    /// request on the same connection).
    pub fn refused_until(&self, now: Micros, from: IpAddr) -> Option<Micros> {
        self.entries
            .get(&from)
            .filter(|e| e.blocked(now))
            .map(|e| e.until_us)
    }

    /// Counts one more attempt of `from` refused unchecked while it is refused (see
    /// [`AdmissionState::refused_until`]).
    pub fn note_refused(&mut self, now: Micros, from: IpAddr) {
        if let Some(e) = self.entries.get_mut(&from).filter(|e| e.blocked(now)) {
            e.refused = e.refused.saturating_add(1);
            self.stats.throttled += 1;
        }
    }

    /// What the door's check of an accepted credential came to. A right one resets the
    /// address's streak; a wrong one counts (`Some`: what it came to). A missing credential
    /// ([`CredentialKind::None`]) is not a guess: not counted, `None`.
    pub fn checked(&mut self, now: Micros, incoming: &Incoming, ok: bool) -> Option<Failure> {
        if incoming.credential == CredentialKind::None {
            return None;
        }
        if ok {
            if let Some(e) = self.entries.get_mut(&incoming.from) {
                e.failures = 0;
                e.blocks = 0;
                e.until_us = 0;
                e.refused = 0;
            }
            return None;
        }
        let cfg = self.cfg;
        self.stats.failures += 1;
        let e = self.entry(now, incoming.from);
        e.seen_us = e.seen_us.max(now);
        if e.failures > 0 && e.streak_forgotten(now, &cfg) {
            e.failures = 0;
            e.blocks = 0;
            e.refused = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.failed_us = now;
        if e.failures < cfg.free_failures {
            return Some(if e.failures == 1 {
                Failure::First
            } else {
                Failure::Again
            });
        }
        let for_us = cfg
            .first_block_us
            .saturating_mul(1u64 << e.blocks.min(32))
            .min(cfg.max_block_us);
        e.blocks = e.blocks.saturating_add(1);
        e.until_us = now.saturating_add(for_us);
        let refused_before = std::mem::take(&mut e.refused);
        let failures = e.failures;
        self.stats.blocks += 1;
        Some(Failure::Blocked {
            failures,
            for_us,
            refused_before,
        })
    }

    /// The entry of `ip`, made (room first) when there is none.
    fn entry(&mut self, now: Micros, ip: IpAddr) -> &mut Entry {
        if !self.entries.contains_key(&ip) {
            self.make_room(now);
        }
        let burst = self.cfg.burst;
        self.entries
            .entry(ip)
            .or_insert_with(|| Entry::new(now, burst))
    }

    /// Room for one more address: the entries that say nothing go; if the table is still
    /// full, an eighth of it (so the work is paid once per many new addresses) chosen by
    /// [`fair_victims`] among those not refused now, then among those refused.
    fn make_room(&mut self, now: Micros) {
        let max = self.cfg.max_addresses.max(1);
        if self.entries.len() < max {
            return;
        }
        let cfg = self.cfg;
        self.entries.retain(|_, e| !e.idle(now, &cfg));
        if self.entries.len() < max {
            return;
        }
        // Down to seven eighths of the bound: the work is paid once per many new addresses.
        let keep = max - (max / 8).max(1);
        for refused in [false, true] {
            let need = self.entries.len().saturating_sub(keep);
            let candidates: Vec<(IpAddr, Micros)> = self
                .entries
                .iter()
                .filter(|(_, e)| e.blocked(now) == refused)
                .map(|(ip, e)| (*ip, e.seen_us))
                .collect();
            for i in fair_victims(&candidates, need) {
                if let Some((ip, _)) = candidates.get(i) {
                    self.entries.remove(ip);
                    self.stats.evicted += 1;
                }
            }
            if self.entries.len() <= keep {
                return;
            }
        }
    }
}

/// The host's one admission, shared: a cheap cloneable handle on one [`AdmissionState`] for
/// the threads of every door (the HTTP thread and the driver for browsers, gst-rtsp-server's
/// threads for RTSP). A panic while it was held leaves the table as it was (every change is a
/// few assignments), so a poisoned lock is taken over rather than passed on.
#[derive(Clone, Default)]
pub struct Admission {
    state: Arc<Mutex<AdmissionState>>,
}

/// Its numbers, not its table (up to thousands of addresses in a `HostSetup`'s debug line).
impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Admission")
            .field("addresses", &state.len())
            .field("stats", &state.stats())
            .finish()
    }
}

impl Admission {
    pub fn new(cfg: AdmissionConfig) -> Admission {
        Admission {
            state: Arc::new(Mutex::new(AdmissionState::new(cfg))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, AdmissionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`AdmissionState::decide`].
    pub fn decide(&self, now: Micros, incoming: &Incoming) -> Decision {
        self.lock().decide(now, incoming)
    }

    /// See [`AdmissionState::checked`].
    pub fn checked(&self, now: Micros, incoming: &Incoming, ok: bool) -> Option<Failure> {
        self.lock().checked(now, incoming, ok)
    }

    /// See [`AdmissionState::refused_until`].
    pub fn refused_until(&self, now: Micros, from: IpAddr) -> Option<Micros> {
        self.lock().refused_until(now, from)
    }

    /// See [`AdmissionState::note_refused`].
    pub fn note_refused(&self, now: Micros, from: IpAddr) {
        self.lock().note_refused(now, from)
    }

    pub fn stats(&self) -> AdmissionStats {
        self.lock().stats()
    }

    pub fn config(&self) -> AdmissionConfig {
        *self.lock().config()
    }

    /// Whether two handles share one table.
    pub fn same(&self, other: &Admission) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

/// The network an address is judged with for fair shares: its /24 (IPv4, and IPv4 mapped in
/// IPv6) or its /64 (IPv6).
pub fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            IpAddr::from([o[0], o[1], o[2], 0])
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => network(IpAddr::V4(v4)),
            None => {
                let mut o = a.octets();
                o[8..].fill(0);
                IpAddr::from(o)
            }
        },
    }
}

/// Which entry of a full table makes room for a new one, given each entry's source address
/// and age (the smaller, the older): the oldest entry of the address holding the most
/// entries, within the network (/24, /64) holding the most. A flood from one address or one
/// network pushes out its own entries first; a client with one entry loses it only when
/// every address holds as many and its entry is the oldest. `None` for an empty table.
pub fn fair_victim(entries: &[(IpAddr, Micros)]) -> Option<usize> {
    fair_victims(entries, 1).first().copied()
}

/// A network's rank for [`fair_victims`]: its entries left, then its next victim's age (the
/// older, the greater), then its index (for a total order).
type QueueKey = (usize, std::cmp::Reverse<Micros>, std::cmp::Reverse<usize>);

/// [`fair_victim`] `count` times over (at most every entry), in the order they go: each
/// time from the network holding the most entries still there, within it from the address
/// holding the most (counted before any goes), oldest first. Ties between networks go to
/// the one whose next victim is older.
pub fn fair_victims(entries: &[(IpAddr, Micros)], count: usize) -> Vec<usize> {
    let mut per_addr: HashMap<IpAddr, usize> = HashMap::new();
    for (ip, _) in entries {
        *per_addr.entry(*ip).or_default() += 1;
    }
    // Each network's entries in the order they go: busiest address first, oldest first.
    let mut nets: HashMap<IpAddr, Vec<usize>> = HashMap::new();
    for (i, (ip, _)) in entries.iter().enumerate() {
        nets.entry(network(*ip)).or_default().push(i);
    }
    let mut queues: Vec<Vec<usize>> = nets.into_values().collect();
    for q in &mut queues {
        // Reversed, so that the next victim is popped from the end.
        q.sort_by_key(|&i| {
            let (ip, age) = entries[i];
            (
                std::cmp::Reverse(per_addr.get(&ip).copied().unwrap_or(0)),
                age,
            )
        });
        q.reverse();
    }
    // The busiest network first; among equals, the one whose next victim is oldest.
    let key = |q: &Vec<usize>| {
        q.last().map(|&i| {
            (
                q.len(),
                std::cmp::Reverse(entries[i].1),
                std::cmp::Reverse(i),
            )
        })
    };
    let mut heap: BinaryHeap<(QueueKey, usize)> = queues
        .iter()
        .enumerate()
        .filter_map(|(n, q)| key(q).map(|k| (k, n)))
        .collect();
    let mut out = Vec::with_capacity(count.min(entries.len()));
    while out.len() < count {
        let Some((_, n)) = heap.pop() else {
            break;
        };
        let Some(q) = queues.get_mut(n) else {
            break;
        };
        if let Some(i) = q.pop() {
            out.push(i);
        }
        if let Some(k) = key(q) {
            heap.push((k, n));
        }
    }
    out
}

#[cfg(test)]
mod tests;
