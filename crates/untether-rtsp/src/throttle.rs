//! Wrong digest credentials, counted per source address: after [`FREE_FAILURES`] wrong
//! attempts in a row an address is refused — its requests answered 401 without their
//! credentials being checked, the right password included — for [`FIRST_BLOCK_S`], twice as
//! long at each next failure after that (up to [`MAX_BLOCK_S`]). The right password resets the
//! address. Plain bookkeeping with the time as a parameter; the server logs what it returns:
//! the first wrong attempt of a streak and the start of each refusal, never each guess.

use std::collections::HashMap;

/// Wrong attempts in a row an address may make before it is refused.
pub(crate) const FREE_FAILURES: u32 = 5;
/// How long the first refusal lasts; each next one lasts twice as long.
pub(crate) const FIRST_BLOCK_S: f64 = 10.0;
/// The longest refusal.
pub(crate) const MAX_BLOCK_S: f64 = 600.0;
/// An address without a wrong attempt for this long is forgotten.
const FORGET_S: f64 = 3600.0;
/// Addresses remembered at most (the quietest are forgotten first).
const MAX_ADDRESSES: usize = 4096;

#[derive(Debug, Default)]
struct Entry {
    /// Wrong attempts since the last right one.
    failures: u32,
    /// Refusals so far (the next lasts `FIRST_BLOCK_S * 2^blocks`).
    blocks: u32,
    /// Refused until then (seconds, the caller's clock).
    until_s: f64,
    /// The latest wrong attempt.
    last_s: f64,
    /// Requests refused unchecked during the current (or latest) refusal.
    refused: u64,
}

impl Entry {
    fn blocked(&self, now_s: f64) -> bool {
        now_s < self.until_s
    }
}

/// What a wrong attempt came to, for the log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Failed {
    /// The first of a streak: worth one line.
    First,
    /// One more, below the limit: not worth a line.
    Again,
    /// The address is refused from now on for `for_s` seconds after `failures` wrong attempts;
    /// `refused_before`: requests refused unchecked during its previous refusal. One line.
    Blocked {
        failures: u32,
        for_s: f64,
        refused_before: u64,
    },
}

/// Wrong attempts per source address.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    addresses: HashMap<String, Entry>,
    /// Requests refused unchecked, in all.
    pub refused_unchecked: u64,
}

impl Throttle {
    /// Whether the credentials of a request from `ip` may be checked at `now_s` (false: it
    /// is refused unchecked, and counted).
    pub fn may_try(&mut self, ip: &str, now_s: f64) -> bool {
        match self.addresses.get_mut(ip) {
            Some(e) if e.blocked(now_s) => {
                e.refused += 1;
                self.refused_unchecked += 1;
                false
            }
            _ => true,
        }
    }

    /// Whether `ip` is refused at `now_s`.
    #[cfg(test)]
    fn blocked(&self, ip: &str, now_s: f64) -> bool {
        self.addresses.get(ip).is_some_and(|e| e.blocked(now_s))
    }

    /// A request from `ip` carried wrong credentials at `now_s`.
    pub fn failed(&mut self, ip: &str, now_s: f64) -> Failed {
        if !self.addresses.contains_key(ip) {
            self.make_room(now_s);
        }
        let e = self.addresses.entry(ip.to_string()).or_default();
        if e.failures > 0 && now_s - e.last_s > FORGET_S {
            *e = Entry::default();
        }
        e.failures = e.failures.saturating_add(1);
        e.last_s = now_s;
        if e.failures < FREE_FAILURES {
            return if e.failures == 1 {
                Failed::First
            } else {
                Failed::Again
            };
        }
        let for_s = (FIRST_BLOCK_S * 2f64.powi(e.blocks.min(16) as i32)).min(MAX_BLOCK_S);
        e.blocks = e.blocks.saturating_add(1);
        e.until_s = now_s + for_s;
        let refused_before = std::mem::take(&mut e.refused);
        Failed::Blocked {
            failures: e.failures,
            for_s,
            refused_before,
        }
    }

    /// A request from `ip` carried the right credentials: its wrong attempts are forgotten.
    pub fn succeeded(&mut self, ip: &str) {
        self.addresses.remove(ip);
    }

    /// Addresses remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Room for one more address: forget those quiet for long, then the quietest one that is
    /// not refused now (or the quietest of all, when every one is).
    fn make_room(&mut self, now_s: f64) {
        if self.addresses.len() < MAX_ADDRESSES {
            return;
        }
        self.addresses
            .retain(|_, e| e.blocked(now_s) || now_s - e.last_s <= FORGET_S);
        if self.addresses.len() < MAX_ADDRESSES {
            return;
        }
        let quietest = |only_free: bool| {
            self.addresses
                .iter()
                .filter(|(_, e)| !only_free || !e.blocked(now_s))
                .min_by(|a, b| a.1.last_s.total_cmp(&b.1.last_s))
                .map(|(ip, _)| ip.clone())
        };
        if let Some(ip) = quietest(true).or_else(|| quietest(false)) {
            self.addresses.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_wrong_attempts_is_refused_for_a_growing_while_and_said_once() {
        let mut t = Throttle::default();
        let ip = "10.0.0.9";
        let mut lines = 0;
        let mut checked = 0;
        // 1000 guesses within a second: FREE_FAILURES are checked, the rest refused unchecked.
        for i in 0..1000 {
            let now = i as f64 / 1000.0;
            if !t.may_try(ip, now) {
                continue;
            }
            checked += 1;
            match t.failed(ip, now) {
                Failed::Again => {}
                Failed::First | Failed::Blocked { .. } => lines += 1,
            }
        }
        assert_eq!(checked, FREE_FAILURES);
        assert_eq!(lines, 2, "the first wrong attempt and the refusal");
        assert_eq!(t.refused_unchecked, 1000 - FREE_FAILURES as u64);
        assert!(t.blocked(ip, 1.0));
        // Another address is not affected.
        assert!(t.may_try("10.0.0.10", 1.0));
        // After the refusal, one more wrong attempt: refused again, twice as long, and the
        // line says how many were refused during the first one.
        assert!(t.may_try(ip, FIRST_BLOCK_S + 1.0));
        assert_eq!(
            t.failed(ip, FIRST_BLOCK_S + 1.0),
            Failed::Blocked {
                failures: FREE_FAILURES + 1,
                for_s: 2.0 * FIRST_BLOCK_S,
                refused_before: 1000 - FREE_FAILURES as u64,
            }
        );
        assert!(t.blocked(ip, 3.0 * FIRST_BLOCK_S));
        assert!(!t.blocked(ip, 3.0 * FIRST_BLOCK_S + 1.5));
    }

    #[test]
    fn refusals_are_bounded_and_the_right_password_resets() {
        let mut t = Throttle::default();
        let ip = "10.0.0.9";
        let mut now = 0.0;
        for _ in 0..100 {
            now += MAX_BLOCK_S + 1.0;
            assert!(t.may_try(ip, now));
            if let Failed::Blocked { for_s, .. } = t.failed(ip, now) {
                assert!(for_s <= MAX_BLOCK_S);
            }
        }
        assert!(t.blocked(ip, now + MAX_BLOCK_S - 1.0));
        t.succeeded(ip);
        assert!(!t.blocked(ip, now));
        assert_eq!(t.failed(ip, now), Failed::First);
        // A mistyped password now and then never adds up to a refusal.
        let mut t = Throttle::default();
        for i in 0..10 {
            let now = i as f64 * (FORGET_S + 1.0);
            assert!(t.may_try(ip, now));
            assert_eq!(t.failed(ip, now), Failed::First);
        }
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let mut t = Throttle::default();
        for i in 0..(MAX_ADDRESSES + 100) {
            t.failed(
                &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                1.0,
            );
        }
        assert_eq!(t.len(), MAX_ADDRESSES);
        // A refused address is kept while others come and go.
        let mut t = Throttle::default();
        for _ in 0..FREE_FAILURES {
            t.failed("10.0.0.1", 0.0);
        }
        for i in 0..(MAX_ADDRESSES + 100) {
            t.failed(
                &format!("10.{}.{}.{}", 1 + (i >> 16), (i >> 8) & 255, i & 255),
                1.0,
            );
        }
        assert!(t.blocked("10.0.0.1", 2.0));
    }
}
