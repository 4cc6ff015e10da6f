//! Percentiles: the one definition every report, benchmark and simulation uses.
//!
//! **Nearest rank.** The p-th percentile (p in 0..=100) of n values is the value at rank
//! ⌈p/100 · n⌉ (1-based, clamped to 1..=n) when the values are sorted ascending: the smallest
//! value such that at least p % of the values are at or below it. p = 0 gives the minimum,
//! p = 100 the maximum; on 1..=100, p50/p95/p99/max are 50/95/99/100. A p outside 0..=100 is
//! clamped to it (NaN counts as 0). [`nearest_rank`] computes the rank, [`percentile`] applies
//! it to a small sorted slice, and [`Samples`] to a whole session in bounded memory.
//!
//! **Precision of [`Samples`].** Values are recorded in whole microseconds (a value in
//! milliseconds is rounded to the nearest µs) in an HDR histogram of 3 significant digits from
//! 1 µs to [`HIGHEST_US`] (24 h; larger values count as 24 h in the percentiles). Below 2048 µs
//! every value has its own bucket; above, a bucket is at most 1/1024 of its values wide. A
//! percentile reports the highest value of the bucket holding the nearest-rank value, capped
//! by the largest value recorded, so it is never below the exact nearest-rank value and less
//! than 1/1024 (< 0.1 %) above it; exact below 2.048 ms. Count, mean and max are exact.

use hdrhistogram::Histogram;

/// The largest value [`Samples`] tells apart, µs (24 hours).
pub const HIGHEST_US: u64 = 24 * 3600 * 1_000_000;

/// Significant digits [`Samples`] keeps.
const SIGNIFICANT_DIGITS: u8 = 3;

/// The nearest rank (1-based) of the p-th percentile of `n` values: ⌈p/100 · n⌉ clamped to
/// 1..=n (0 when `n` is 0). See the module documentation.
pub fn nearest_rank(n: u64, p: f64) -> u64 {
    if n == 0 {
        return 0;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    // p·n first, then /100: exact for whole p (95·100/100 = 95, not 95.000…01). The tiny
    // relative slack keeps a product that lands a rounding error above a whole rank on it.
    let x = p * n as f64 / 100.0;
    let rank = (x - x * 1e-12).ceil() as u64;
    rank.clamp(1, n)
}

/// The p-th percentile (nearest rank, see the module documentation) of `sorted`, which must
/// be sorted ascending; None when it is empty. For a small slice held in full; a session's
/// worth of samples goes in [`Samples`].
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let rank = nearest_rank(sorted.len() as u64, p);
    (rank > 0).then(|| sorted[rank as usize - 1])
}

/// Samples of one quantity over a whole session, in milliseconds (or any unit recorded with
/// three decimals, e.g. kB), in bounded memory: an HDR histogram whose size depends on its
/// range, never on how many values it holds. Percentiles follow the module's definition
/// within the precision stated there.
#[derive(Clone)]
pub struct Samples {
    hist: Histogram<u64>,
    min_us: u64,
    max_us: u64,
    sum_us: u128,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            hist: Histogram::new_with_bounds(1, HIGHEST_US, SIGNIFICANT_DIGITS)
                .expect("1 µs ..= 24 h at 3 significant digits is a valid HDR histogram"),
            min_us: u64::MAX,
            max_us: 0,
            sum_us: 0,
        }
    }
}

impl std::fmt::Debug for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the histogram's ~28 000 buckets.
        f.debug_struct("Samples")
            .field("count", &self.hist.len())
            .field("min_us", &(!self.is_empty()).then_some(self.min_us))
            .field("max_us", &(!self.is_empty()).then_some(self.max_us))
            .field("sum_us", &self.sum_us)
            .finish()
    }
}

impl Samples {
    /// Records one value in milliseconds, rounded to the nearest microsecond. Ignores NaN and
    /// infinities; a negative value is recorded as 0 (the histogram holds no negatives; a
    /// negative duration comes from clock error).
    pub fn push(&mut self, ms: f64) {
        if !ms.is_finite() {
            return;
        }
        // `as` saturates: huge values become u64::MAX, which the histogram caps at 24 h.
        self.record((ms * 1000.0).round().max(0.0) as u64);
    }

    /// Records one value in microseconds; a negative value is recorded as 0.
    pub fn push_us(&mut self, us: i64) {
        self.record(us.max(0) as u64);
    }

    fn record(&mut self, us: u64) {
        self.hist.saturating_record(us);
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
        self.sum_us += us as u128;
    }

    /// Values recorded over the whole session.
    pub fn len(&self) -> usize {
        self.hist.len() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Adds every value of `other`, as if each had been pushed here.
    pub fn merge(&mut self, other: &Samples) {
        if other.is_empty() {
            return;
        }
        for v in other.hist.iter_recorded() {
            // Both histograms have the same buckets: a bucket's highest value lands in it.
            self.hist
                .saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
        self.min_us = self.min_us.min(other.min_us);
        self.max_us = self.max_us.max(other.max_us);
        self.sum_us += other.sum_us;
    }

    /// The p-th percentile (0..=100, nearest rank), µs; None when empty.
    fn percentile_us(&self, p: f64) -> Option<u64> {
        let rank = nearest_rank(self.hist.len(), p);
        if rank == 0 {
            return None;
        }
        let mut seen = 0u64;
        for v in self.hist.iter_recorded() {
            seen += v.count_at_value();
            if seen >= rank {
                return Some(v.value_iterated_to().clamp(self.min_us, self.max_us));
            }
        }
        Some(self.max_us)
    }

    /// The p-th percentile (0..=100, nearest rank), ms; None when empty.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.percentile_us(p).map(|us| us as f64 / 1000.0)
    }

    /// p50/p95/p99/max/mean over the whole session, ms rounded to 3 decimals; None when empty.
    pub fn summary(&self) -> Option<Summary> {
        let count = self.hist.len();
        if count == 0 {
            return None;
        }
        let ms = |us: u64| round3(us as f64 / 1000.0);
        Some(Summary {
            p50: ms(self.percentile_us(50.0)?),
            p95: ms(self.percentile_us(95.0)?),
            p99: ms(self.percentile_us(99.0)?),
            max: ms(self.max_us),
            mean: round3(self.sum_us as f64 / count as f64 / 1000.0),
            count,
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// What [`Samples::summary`] reports, ms rounded to 3 decimals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nearest_rank_on_1_to_100() {
        let v: Vec<u64> = (1..=100).collect();
        let p = |p| percentile(&v, p).unwrap();
        assert_eq!((p(50.0), p(95.0), p(99.0), p(100.0)), (50, 95, 99, 100));
        assert_eq!(p(0.0), 1);
        assert_eq!(p(-5.0), 1);
        assert_eq!(p(250.0), 100);
        assert_eq!(p(f64::NAN), 1);
        assert_eq!(percentile::<u64>(&[], 50.0), None);
        assert_eq!(percentile(&[7.5f64], 99.0), Some(7.5));
        // p·n on a whole rank is that rank, not the next one.
        let w: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&w, 99.9), Some(999));
        assert_eq!(percentile(&w, 99.95), Some(1000));
    }

    #[test]
    fn samples_nearest_rank_on_1_to_100() {
        // Whole µs below 2048 are exact.
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push_us(i);
        }
        let m = s.summary().unwrap();
        assert_eq!(
            (m.p50, m.p95, m.p99, m.max),
            (0.05, 0.095, 0.099, 0.1),
            "{m:?}"
        );
        assert!(Samples::default().summary().is_none());
        assert_eq!(Samples::default().percentile(50.0), None);
        // In ms, the same within the HDR precision (< 1/1024 above), max and mean exact.
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(i as f64);
        }
        let m = s.summary().unwrap();
        for (got, want) in [(m.p50, 50.0), (m.p95, 95.0), (m.p99, 99.0)] {
            assert!(
                got >= want && got < want * (1.0 + 1.0 / 1024.0),
                "{got} vs {want}"
            );
        }
        assert_eq!((m.max, m.mean, m.count), (100.0, 50.5, 100));
    }

    #[test]
    fn len_counts_the_whole_session_and_skips_non_finite() {
        let mut s = Samples::default();
        for i in 0..36_010 {
            s.push(i as f64);
        }
        assert_eq!(s.len(), 36_010);
        s.push(f64::NAN);
        s.push(f64::INFINITY);
        assert_eq!(s.len(), 36_010);
        assert!(!s.is_empty());
    }

    #[test]
    fn negatives_count_as_zero() {
        let mut s = Samples::default();
        s.push(-3.0);
        s.push_us(-5);
        s.push(2.0);
        assert_eq!(s.len(), 3);
        assert_eq!(s.percentile(0.0), Some(0.0));
        assert_eq!(s.percentile(50.0), Some(0.0));
        assert_eq!(s.percentile(100.0), Some(2.0));
    }

    #[test]
    fn a_long_session_keeps_its_beginning() {
        // A bad first 100 000 frames (500 ms), then 900 000 good ones (5 ms): a buffer of the
        // newest values would report 5 ms at p95.
        let mut s = Samples::default();
        for i in 0..1_000_000 {
            s.push(if i < 100_000 { 500.0 } else { 5.0 });
        }
        let m = s.summary().unwrap();
        assert_eq!(m.count, 1_000_000);
        assert!((5.0..5.005).contains(&m.p50), "{m:?}");
        assert!((500.0..500.5).contains(&m.p95), "{m:?}");
        assert_eq!(m.max, 500.0);
        assert_eq!(m.mean, 54.5);
    }

    #[test]
    fn memory_does_not_grow_with_the_count() {
        let mut s = Samples::default();
        let buckets = s.hist.distinct_values();
        for i in 0..1_000_000u64 {
            s.push_us((i * 7919 % 100_000_000) as i64);
        }
        s.push(1e12); // beyond 24 h: counted at 24 h, no resize
        assert_eq!(s.hist.distinct_values(), buckets);
        assert_eq!(s.len(), 1_000_001);
        assert_eq!(s.summary().unwrap().max, 1e12);
    }

    #[test]
    fn merge_is_pushing_both() {
        let (mut a, mut b, mut both) = (Samples::default(), Samples::default(), Samples::default());
        for i in 0..5000i64 {
            let v = i * 37 % 90_000;
            let part = if i % 3 == 0 { &mut a } else { &mut b };
            part.push_us(v);
            both.push_us(v);
        }
        a.merge(&b);
        assert_eq!(a.summary(), both.summary());
        assert_eq!(a.len(), 5000);
        let mut empty = Samples::default();
        empty.merge(&Samples::default());
        assert!(empty.summary().is_none());
    }

    proptest! {
        #[test]
        fn samples_agree_with_the_sorted_slice_within_hdr_precision(
            mut v in proptest::collection::vec(prop_oneof![0u64..3000, 0u64..200_000_000], 1..2000),
            p in 0.0f64..=100.0,
        ) {
            let mut s = Samples::default();
            for &x in &v {
                s.push_us(x as i64);
            }
            v.sort_unstable();
            let exact = percentile(&v, p).unwrap();
            let got = s.percentile_us(p).unwrap();
            prop_assert!(got >= exact && got - exact <= exact / 1024, "p{p}: {got} vs {exact}");
            let ms = s.percentile(p).unwrap();
            prop_assert_eq!(ms, got as f64 / 1000.0);
            prop_assert_eq!(s.percentile_us(100.0), v.last().copied());
        }
    }
}
