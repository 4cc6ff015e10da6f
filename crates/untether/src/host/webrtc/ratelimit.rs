//! Offers per source address: a small token bucket each, so that one address cannot make the
//! host answer (or refuse) offers as fast as it can send them. A page sends one offer per
//! load (and one per PIN try); the bucket holds [`BURST`] and refills one every
//! [`REFILL_EVERY`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Offers one address may send at once.
pub(super) const BURST: u32 = 5;
/// One more offer per this long.
pub(super) const REFILL_EVERY: Duration = Duration::from_secs(2);
/// Addresses remembered; past this the full buckets are forgotten, then the oldest.
const MAX_ADDRESSES: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: u32,
    /// When the bucket last gained a token (or was made).
    since: Instant,
}

/// The buckets of the addresses that sent offers.
#[derive(Debug, Default)]
pub(super) struct OfferLimiter {
    buckets: HashMap<IpAddr, Bucket>,
}

impl OfferLimiter {
    /// Takes one offer's token for `ip` at `now`: Err(how long until the next one) when none
    /// is left.
    pub fn allow(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        if !self.buckets.contains_key(&ip) && self.buckets.len() >= MAX_ADDRESSES {
            self.forget(now);
        }
        let b = self.buckets.entry(ip).or_insert(Bucket {
            tokens: BURST,
            since: now,
        });
        refill(b, now);
        if b.tokens == 0 {
            let next = b.since + REFILL_EVERY;
            return Err(next.saturating_duration_since(now));
        }
        b.tokens -= 1;
        Ok(())
    }

    /// Makes room: drops the buckets that are full again, else the oldest.
    fn forget(&mut self, now: Instant) {
        self.buckets.retain(|_, b| {
            refill(b, now);
            b.tokens < BURST
        });
        if self.buckets.len() >= MAX_ADDRESSES {
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.since)
                .map(|(ip, _)| *ip)
            {
                self.buckets.remove(&oldest);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.len()
    }
}

fn refill(b: &mut Bucket, now: Instant) {
    let elapsed = now.saturating_duration_since(b.since);
    let gained = (elapsed.as_nanos() / REFILL_EVERY.as_nanos()) as u32;
    if gained == 0 {
        return;
    }
    b.tokens = b.tokens.saturating_add(gained).min(BURST);
    b.since = if b.tokens == BURST {
        now
    } else {
        b.since + REFILL_EVERY * gained
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_refill() {
        let mut l = OfferLimiter::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert!(l.allow(ip, t0).is_ok());
        }
        let wait = l.allow(ip, t0).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= REFILL_EVERY);
        // Another address has its own bucket.
        assert!(l.allow(other, t0).is_ok());
        // One refill gives one offer, not more.
        let t1 = t0 + REFILL_EVERY;
        assert!(l.allow(ip, t1).is_ok());
        assert!(l.allow(ip, t1).is_err());
        // A long pause fills the bucket up to the burst, no further.
        let t2 = t1 + REFILL_EVERY * 100;
        for _ in 0..BURST {
            assert!(l.allow(ip, t2).is_ok());
        }
        assert!(l.allow(ip, t2).is_err());
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let mut l = OfferLimiter::default();
        let t0 = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            let ip = IpAddr::from(i.to_be_bytes());
            assert!(l.allow(ip, t0).is_ok());
        }
        assert!(l.len() <= MAX_ADDRESSES);
    }
}
