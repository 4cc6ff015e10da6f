//! Latency samples and their percentiles.

use serde::Serialize;

/// Samples of one quantity, in milliseconds. Bounded: keeps the newest `MAX_SAMPLES`.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    values: Vec<f64>,
    next: usize,
    total: u64,
}

/// Ten minutes of frames at 60 fps.
pub const MAX_SAMPLES: usize = 36_000;

impl Samples {
    pub fn push(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.total += 1;
        if self.values.len() < MAX_SAMPLES {
            self.values.push(v);
        } else {
            self.values[self.next] = v;
            self.next = (self.next + 1) % MAX_SAMPLES;
        }
    }

    pub fn push_us(&mut self, us: i64) {
        self.push(us as f64 / 1000.0);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Percentiles p50/p95/p99/max (nearest-rank); None when empty.
    pub fn summary(&self) -> Option<Summary> {
        if self.values.is_empty() {
            return None;
        }
        let mut v = self.values.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| {
            let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        };
        Some(Summary {
            p50: round3(pct(50.0)),
            p95: round3(pct(95.0)),
            p99: round3(pct(99.0)),
            max: round3(v[v.len() - 1]),
            mean: round3(v.iter().sum::<f64>() / v.len() as f64),
            count: v.len() as u64,
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
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

    #[test]
    fn percentiles_nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(i as f64);
        }
        let m = s.summary().unwrap();
        assert_eq!((m.p50, m.p95, m.p99, m.max), (50.0, 95.0, 99.0, 100.0));
        assert!(Samples::default().summary().is_none());
    }

    #[test]
    fn bounded() {
        let mut s = Samples::default();
        for i in 0..(MAX_SAMPLES + 10) {
            s.push(i as f64);
        }
        assert_eq!(s.len(), MAX_SAMPLES);
        s.push(f64::NAN);
        assert_eq!(s.len(), MAX_SAMPLES);
    }
}
