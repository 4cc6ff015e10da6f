//! Send pacing: a frame's datagrams spread over a fraction of the frame interval, in batches,
//! instead of one burst (`network.pacing`, `network.pacing_batch`).
//!
//! A batch is up to `batch` datagrams handed to the socket back to back (the unit a GSO send
//! would carry). Batch `i` of `b` goes out at `start + i × window / b`: the first at once, the
//! last at `(b − 1)/b` of the window, so pacing delays a frame's last shard by less than the
//! window. A frame of at most one batch is not delayed at all. The pure scheduling is here;
//! the host's network driver (`host/network.rs`) sends each batch when it is due, with control
//! replies and audio in between, and never sleeps for it.

use std::ops::Range;

/// The longest a frame's datagrams are spread over, whatever the fraction and frame rate:
/// half the client's default reassembly deadline (`client.reassembly_deadline_ms` = 50), so
/// a low frame rate with a large fraction cannot make paced frames miss it.
pub const MAX_WINDOW_US: u64 = 25_000;

/// Datagrams per batch by default: 8 × 1200 B ≈ 9.6 KB, well under one 10 ms tbf burst at
/// 10 Mbit/s and a handful of Wi-Fi aggregates, and within what UDP GSO sends in one call
/// (the kernel's limit is 64 segments).
pub const DEFAULT_BATCH: u32 = 8;

/// The largest batch allowed (the kernel's UDP GSO segment limit, `UDP_MAX_SEGMENTS`).
pub const MAX_BATCH: u32 = 64;

/// Validated pacing settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacing {
    /// Fraction of the frame interval a frame's datagrams are spread over (0: one burst).
    pub fraction: f64,
    /// Datagrams per batch (≥ 1).
    pub batch: usize,
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing {
            fraction: 0.0,
            batch: DEFAULT_BATCH as usize,
        }
    }
}

impl Pacing {
    pub fn is_off(&self) -> bool {
        self.fraction <= 0.0
    }

    /// The window a frame's datagrams are spread over at `fps`, µs (0: off), at most
    /// [`MAX_WINDOW_US`].
    pub fn window_us(&self, fps: u32) -> u64 {
        if self.is_off() || !self.fraction.is_finite() {
            return 0;
        }
        let interval = 1_000_000.0 / fps.max(1) as f64;
        ((self.fraction.min(1.0) * interval) as u64).min(MAX_WINDOW_US)
    }
}

/// The batches `n` datagrams are sent in, as (datagram index range, offset from the frame's
/// first send in µs): batches of `batch` datagrams in order (the last may be shorter), batch
/// `i` of `b` at `i × window_us / b`. Offsets never decrease and stay below `window_us` (or are
/// 0 when it is 0); the ranges cover `0..n` in order, so pacing never reorders datagrams.
pub fn schedule(
    n: usize,
    batch: usize,
    window_us: u64,
) -> impl Iterator<Item = (Range<usize>, u64)> {
    let batch = batch.max(1);
    let batches = n.div_ceil(batch);
    (0..batches).map(move |i| {
        let offset = window_us * i as u64 / batches as u64;
        (i * batch..((i + 1) * batch).min(n), offset)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(n: usize, batch: usize, window: u64) -> Vec<(Range<usize>, u64)> {
        schedule(n, batch, window).collect()
    }

    #[test]
    fn batches_are_spread_evenly_over_the_window() {
        assert_eq!(
            plan(20, 8, 8000),
            vec![(0..8, 0), (8..16, 2666), (16..20, 5333)]
        );
        assert_eq!(plan(16, 8, 8000), vec![(0..8, 0), (8..16, 4000)]);
    }

    #[test]
    fn a_frame_of_one_batch_is_not_delayed() {
        assert_eq!(plan(8, 8, 8000), vec![(0..8, 0)]);
        assert_eq!(plan(1, 8, 8000), vec![(0..1, 0)]);
        assert!(plan(0, 8, 8000).is_empty());
    }

    #[test]
    fn no_window_means_one_burst_in_order() {
        let p = plan(20, 8, 0);
        assert!(p.iter().all(|(_, t)| *t == 0));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn batch_of_one_paces_every_datagram() {
        assert_eq!(
            plan(4, 1, 1000),
            vec![(0..1, 0), (1..2, 250), (2..3, 500), (3..4, 750)]
        );
        // A batch size of 0 is treated as 1.
        assert_eq!(plan(2, 0, 1000), vec![(0..1, 0), (1..2, 500)]);
    }

    #[test]
    fn ranges_cover_every_datagram_in_order_and_offsets_stay_in_the_window() {
        for n in 0..300 {
            for batch in [1, 3, 8, 64] {
                let window = 8333;
                let p = plan(n, batch, window);
                let mut next = 0;
                let mut last = 0;
                for (r, t) in &p {
                    assert_eq!(r.start, next, "n {n} batch {batch}");
                    assert!(r.end > r.start && r.end - r.start <= batch);
                    assert!(*t >= last && *t < window);
                    next = r.end;
                    last = *t;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn window_is_a_fraction_of_the_frame_interval_capped() {
        let p = |fraction| Pacing { fraction, batch: 8 };
        assert_eq!(p(0.0).window_us(60), 0);
        assert_eq!(p(0.5).window_us(60), 8333);
        assert_eq!(p(1.0).window_us(120), 8333);
        // 1 fps × 1.0 would be a second: capped.
        assert_eq!(p(1.0).window_us(1), MAX_WINDOW_US);
        assert_eq!(p(f64::NAN).window_us(60), 0);
    }
}
