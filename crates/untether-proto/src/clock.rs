//! Clock-offset and round-trip estimation from ping/pong exchanges (NTP's on-wire method with a
//! minimum-RTT filter).
//!
//! One exchange: the client sends a ping at t1 (its clock); the host receives it at t2 and
//! answers at t3 (host clock); the client receives the pong at t4. Then
//! `rtt = (t4 − t1) − (t3 − t2)` and `offset = ((t2 − t1) + (t3 − t4)) / 2` (host − client).
//! The offset's error is at most half the asymmetry of the two one-way delays, which is at most
//! rtt / 2; the sample with the smallest RTT among recent ones has the tightest bound, so that
//! is the estimate, and `rtt / 2` of that sample is its uncertainty.

use std::collections::VecDeque;

use crate::Micros;

/// The estimate: host clock − client clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockEstimate {
    pub offset_us: i64,
    /// RTT of the sample the offset comes from.
    pub rtt_us: u64,
    /// The offset is within ± this of the truth (half that sample's RTT).
    pub uncertainty_us: u64,
    /// How many samples were considered.
    pub samples: u32,
}

/// One exchange's measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSample {
    pub rtt_us: u64,
    pub offset_us: i64,
}

impl ClockSample {
    /// From the four timestamps; None if they are inconsistent (the host claims to have held the
    /// ping longer than the round trip took).
    pub fn from_times(t1: Micros, t2: Micros, t3: Micros, t4: Micros) -> Option<ClockSample> {
        if t4 < t1 || t3 < t2 {
            return None;
        }
        let total = t4 - t1;
        let held = t3 - t2;
        if held > total {
            return None;
        }
        let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) / 2;
        Some(ClockSample {
            rtt_us: total - held,
            offset_us: offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        })
    }
}

/// Keeps recent samples and answers with the minimum-RTT one; also a smoothed RTT for timers.
pub struct ClockEstimator {
    window: VecDeque<ClockSample>,
    capacity: usize,
    srtt_us: Option<f64>,
    rttvar_us: f64,
    alpha: f64,
    latest_rtt_us: Option<u64>,
}

impl ClockEstimator {
    /// `capacity` recent samples are kept (e.g. 32); `alpha` weighs a new RTT in the smoothed
    /// RTT (SRTT ← α·RTT + (1−α)·SRTT).
    pub fn new(capacity: usize, alpha: f64) -> Self {
        ClockEstimator {
            window: VecDeque::with_capacity(capacity),
            capacity: capacity.max(1),
            srtt_us: None,
            rttvar_us: 0.0,
            alpha: alpha.clamp(0.0, 1.0),
            latest_rtt_us: None,
        }
    }

    pub fn add(&mut self, s: ClockSample) {
        if self.window.len() == self.capacity {
            self.window.pop_front();
        }
        self.window.push_back(s);
        let r = s.rtt_us as f64;
        self.latest_rtt_us = Some(s.rtt_us);
        self.srtt_us = Some(match self.srtt_us {
            None => {
                self.rttvar_us = r / 2.0;
                r
            }
            Some(srtt) => {
                self.rttvar_us = 0.75 * self.rttvar_us + 0.25 * (srtt - r).abs();
                self.alpha * r + (1.0 - self.alpha) * srtt
            }
        });
    }

    pub fn estimate(&self) -> Option<ClockEstimate> {
        let best = self.window.iter().min_by_key(|s| s.rtt_us)?;
        Some(ClockEstimate {
            offset_us: best.offset_us,
            rtt_us: best.rtt_us,
            uncertainty_us: best.rtt_us.div_ceil(2),
            samples: self.window.len() as u32,
        })
    }

    /// Smoothed RTT in microseconds.
    pub fn srtt_us(&self) -> Option<u64> {
        self.srtt_us.map(|v| v.round() as u64)
    }

    pub fn rttvar_us(&self) -> u64 {
        self.rttvar_us.round() as u64
    }

    pub fn latest_rtt_us(&self) -> Option<u64> {
        self.latest_rtt_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_paths_give_the_true_offset() {
        // Host clock = client clock + 5000; 300 µs each way; host holds 20 µs.
        let s = ClockSample::from_times(1000, 1000 + 300 + 5000, 1000 + 320 + 5000, 1000 + 620)
            .unwrap();
        assert_eq!(s.rtt_us, 600);
        assert_eq!(s.offset_us, 5000);
    }

    #[test]
    fn min_rtt_sample_wins_and_bounds_the_error() {
        let mut e = ClockEstimator::new(8, 0.9);
        // Asymmetric slow sample (forward 5 ms, back 100 µs) then a fast symmetric one.
        e.add(ClockSample::from_times(0, 5000, 5000, 5100).unwrap());
        e.add(ClockSample::from_times(10_000, 10_100, 10_100, 10_200).unwrap());
        let est = e.estimate().unwrap();
        assert_eq!(est.offset_us, 0);
        assert_eq!(est.rtt_us, 200);
        assert_eq!(est.uncertainty_us, 100);
        assert!(ClockSample::from_times(0, 0, 100, 50).is_none());
    }

    #[test]
    fn srtt_follows_alpha() {
        let mut e = ClockEstimator::new(4, 0.9);
        e.add(ClockSample {
            rtt_us: 1000,
            offset_us: 0,
        });
        e.add(ClockSample {
            rtt_us: 2000,
            offset_us: 0,
        });
        assert_eq!(e.srtt_us(), Some(1900));
    }
}
