//! Adaptive bitrate: a delay- and loss-based controller on the host, in the spirit of Google
//! Congestion Control and ALVR's adaptive mode, small enough to reason about.
//!
//! Signals, every client Feedback (100 ms):
//! - **loss**: the share of the host's datagrams lost since the last Feedback;
//! - **receive rate**: datagrams the client received since then × the mean datagram size;
//! - **queueing delay**: the host pings the client every 100 ms; a ping waits behind the
//!   video queued at the bottleneck, so `queue = recent RTT − base RTT`, where the recent RTT is
//!   the smaller of the last 2 samples (robust to one late pong) and the base RTT the smallest
//!   of the last 10 s.
//!
//! Decisions:
//! - **decrease** when the queue > `queue_high_us`: to 85 % of the receive rate (what the link
//!   really carries), or when loss > 10 % without a queue: to 85 % of the target; at most once
//!   per `max(300 ms, 2 RTT)` so the queue can drain before the next look;
//! - **increase** when loss < 2 % and the queue < `queue_low_us`, no sooner than 1 s after a
//!   decrease: ×1.10 per Feedback while below the rate before the last decrease (fast
//!   recovery), ×1.01 above it (careful probing, ~10 %/s);
//! - a Feedback more than 1 s after the previous one (an outage both ways) only restarts the
//!   measurement;
//! - otherwise hold. Always within [`RateConfig::min_kbps`, `RateConfig::max_kbps`].
//!
//! The encoder applies a new target from its next frame, without a keyframe (x264 reconfigures
//! its rate control in place).

use std::collections::VecDeque;

use crate::wire::Feedback;
use crate::Micros;

/// Bounds and thresholds of the controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateConfig {
    pub min_kbps: u32,
    /// The configured bitrate: the controller never goes above it.
    pub max_kbps: u32,
    /// Queueing delay above which the rate decreases.
    pub queue_high_us: Micros,
    /// Queueing delay below which the rate may increase.
    pub queue_low_us: Micros,
    pub loss_high: f64,
    pub loss_low: f64,
}

impl RateConfig {
    /// Defaults for a stream configured at `max_kbps`.
    pub fn new(max_kbps: u32) -> RateConfig {
        RateConfig {
            min_kbps: (max_kbps / 20).clamp(250, 1000).min(max_kbps),
            max_kbps,
            queue_high_us: 8_000,
            queue_low_us: 3_000,
            loss_high: 0.10,
            loss_low: 0.02,
        }
    }
}

/// What the controller did at the last Feedback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RateAction {
    #[default]
    Hold,
    Increase,
    Decrease,
}

/// Counters of the controller, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateStats {
    pub target_kbps: u32,
    pub decreases: u64,
    pub increases: u64,
    pub last_queue_us: Option<Micros>,
    pub last_loss: f64,
    pub last_receive_kbps: Option<u32>,
}

const BASE_WINDOW_US: Micros = 10_000_000;
const RECENT_SAMPLES: usize = 2;
/// Feedback further apart than this (an outage) starts a new measurement.
const FEEDBACK_GAP_US: Micros = 1_000_000;

/// The host's bitrate controller.
#[derive(Clone, Debug)]
pub struct RateController {
    cfg: RateConfig,
    target_kbps: f64,
    /// (time, rtt) samples of the last 10 s.
    rtts: VecDeque<(Micros, Micros)>,
    last_fb: Option<(Micros, Feedback)>,
    last_decrease_us: Option<Micros>,
    /// The receive rate when the rate last decreased (the link's capacity then).
    decrease_kbps: Option<f64>,
    stats: RateStats,
}

impl RateController {
    pub fn new(cfg: RateConfig) -> RateController {
        RateController {
            cfg,
            target_kbps: cfg.max_kbps as f64,
            rtts: VecDeque::new(),
            last_fb: None,
            last_decrease_us: None,
            decrease_kbps: None,
            stats: RateStats {
                target_kbps: cfg.max_kbps,
                ..Default::default()
            },
        }
    }

    pub fn target_kbps(&self) -> u32 {
        self.target_kbps.round() as u32
    }

    pub fn stats(&self) -> RateStats {
        self.stats
    }

    /// A round-trip sample of a host ping.
    pub fn on_rtt(&mut self, now: Micros, rtt_us: Micros) {
        self.rtts.push_back((now, rtt_us));
        while self
            .rtts
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > BASE_WINDOW_US)
        {
            self.rtts.pop_front();
        }
    }

    /// The current queueing delay estimate.
    pub fn queue_delay_us(&self) -> Option<Micros> {
        let base = self.rtts.iter().map(|&(_, r)| r).min()?;
        let recent = self
            .rtts
            .iter()
            .rev()
            .take(RECENT_SAMPLES)
            .map(|&(_, r)| r)
            .min()?;
        Some(recent.saturating_sub(base))
    }

    fn srtt(&self) -> Micros {
        self.rtts.back().map_or(0, |&(_, r)| r)
    }

    /// The client's cumulative Feedback; `datagram_bytes` is the mean size of the host's
    /// datagrams. Returns the new target when it changed.
    pub fn on_feedback(
        &mut self,
        now: Micros,
        fb: &Feedback,
        datagram_bytes: f64,
    ) -> (RateAction, Option<u32>) {
        let Some((t0, prev)) = self.last_fb.replace((now, *fb)) else {
            return (RateAction::Hold, None);
        };
        let dt = now.saturating_sub(t0);
        // Nothing heard for over a second (an outage, both ways): what was lost then says
        // nothing about the rate the link carries. Start measuring afresh.
        if dt == 0 || dt > FEEDBACK_GAP_US {
            return (RateAction::Hold, None);
        }
        let received = fb.datagrams_received.wrapping_sub(prev.datagrams_received) as f64;
        let lost = fb.packets_lost.wrapping_sub(prev.packets_lost) as f64;
        // A counter reset (a new client session) or nonsense: skip this interval.
        if received > 1e7 || lost > 1e7 {
            return (RateAction::Hold, None);
        }
        let loss = if received + lost > 0.0 {
            lost / (received + lost)
        } else {
            0.0
        };
        let receive_kbps = received * datagram_bytes * 8.0 / (dt as f64 / 1000.0);
        let queue = self.queue_delay_us();
        self.stats.last_loss = loss;
        self.stats.last_queue_us = queue;
        self.stats.last_receive_kbps = Some(receive_kbps.round() as u32);
        let queue_building = queue.is_some_and(|q| q > self.cfg.queue_high_us);
        let congested = loss > self.cfg.loss_high || queue_building;
        let clear = loss < self.cfg.loss_low && queue.is_none_or(|q| q < self.cfg.queue_low_us);
        let since_decrease = self.last_decrease_us.map(|t| now.saturating_sub(t));
        let before = self.target_kbps();
        let action = if congested {
            let guard = (2 * self.srtt()).max(300_000);
            if since_decrease.is_none_or(|s| s >= guard) {
                // A queue: what the link carries, a little less so the queue drains. Loss alone
                // (interference, a dying path) says nothing about capacity: step down from
                // the target.
                let basis = if queue_building && receive_kbps > 0.0 {
                    receive_kbps.min(self.target_kbps)
                } else {
                    self.target_kbps
                };
                self.target_kbps = 0.85 * basis;
                self.decrease_kbps = Some(basis);
                self.last_decrease_us = Some(now);
                self.stats.decreases += 1;
                RateAction::Decrease
            } else {
                RateAction::Hold
            }
        } else if clear && since_decrease.is_none_or(|s| s >= 1_000_000) {
            let fast = self.decrease_kbps.is_none_or(|k| self.target_kbps < k);
            self.target_kbps *= if fast { 1.10 } else { 1.01 };
            self.stats.increases += 1;
            RateAction::Increase
        } else {
            RateAction::Hold
        };
        self.target_kbps = self
            .target_kbps
            .clamp(self.cfg.min_kbps as f64, self.cfg.max_kbps as f64);
        self.stats.target_kbps = self.target_kbps();
        let after = self.target_kbps();
        (action, (after != before).then_some(after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fb(received: u32, lost: u32) -> Feedback {
        Feedback {
            datagrams_received: received,
            packets_lost: lost,
            ..Default::default()
        }
    }

    /// Drives the controller over a simulated bottleneck of `link_kbps` for `secs`, starting at
    /// `t`: a fluid queue fed at the target rate, drained at the link rate.
    fn drive(
        c: &mut RateController,
        t: &mut Micros,
        queue_bits: &mut f64,
        counts: &mut (u32, u32),
        link_kbps: f64,
        secs: f64,
    ) -> Vec<(Micros, u32, Micros)> {
        let mut out = Vec::new();
        let step = 100_000;
        let end = *t + (secs * 1e6) as Micros;
        let bytes = 1200.0;
        while *t < end {
            *t += step;
            let sent_bits = c.target_kbps() as f64 * 100.0;
            let capacity = link_kbps * 100.0;
            let total = *queue_bits + sent_bits;
            let delivered = total.min(capacity);
            *queue_bits = total - delivered;
            // A bounded queue (250 ms of the link): beyond it, loss.
            let cap = link_kbps * 250.0;
            let dropped = (*queue_bits - cap).max(0.0);
            *queue_bits = queue_bits.min(cap);
            counts.0 += (delivered / (bytes * 8.0)) as u32;
            counts.1 += (dropped / (bytes * 8.0)) as u32;
            let queue_us = (*queue_bits / link_kbps * 1000.0) as Micros;
            c.on_rtt(*t, 2_000 + queue_us);
            c.on_feedback(*t, &fb(counts.0, counts.1), bytes);
            out.push((*t, c.target_kbps(), queue_us));
        }
        out
    }

    #[test]
    fn a_capacity_drop_brings_the_rate_under_it_within_two_seconds_and_the_queue_drains() {
        let mut c = RateController::new(RateConfig::new(10_000));
        let (mut t, mut q, mut n) = (0, 0.0, (0, 0));
        let before = drive(&mut c, &mut t, &mut q, &mut n, 20_000.0, 5.0);
        assert_eq!(before.last().unwrap().1, 10_000, "no reason to lower");
        let drop_at = t;
        let after = drive(&mut c, &mut t, &mut q, &mut n, 5_000.0, 10.0);
        let under = after
            .iter()
            .find(|&&(_, kbps, _)| kbps < 5_000)
            .expect("the rate goes under the link");
        assert!(
            under.0 - drop_at <= 2_000_000,
            "{} ms",
            (under.0 - drop_at) / 1000
        );
        // The queue drains and stays short; the rate settles near the link, not far below.
        let settled = &after[after.len() - 30..];
        let max_q = settled.iter().map(|s| s.2).max().unwrap();
        assert!(max_q < 40_000, "queue {max_q} µs");
        let mean = settled.iter().map(|s| s.1 as f64).sum::<f64>() / settled.len() as f64;
        assert!(
            (3_500.0..5_200.0).contains(&mean),
            "settled at {mean} kbit/s"
        );
    }

    #[test]
    fn the_rate_probes_back_up_when_the_link_recovers() {
        let mut c = RateController::new(RateConfig::new(10_000));
        let (mut t, mut q, mut n) = (0, 0.0, (0, 0));
        drive(&mut c, &mut t, &mut q, &mut n, 4_000.0, 5.0);
        assert!(c.target_kbps() < 4_000);
        let up = drive(&mut c, &mut t, &mut q, &mut n, 50_000.0, 20.0);
        assert_eq!(up.last().unwrap().1, 10_000, "back to the configured rate");
        assert!(c.stats().increases > 0 && c.stats().decreases > 0);
    }

    #[test]
    fn an_outage_both_ways_is_not_congestion() {
        let mut c = RateController::new(RateConfig::new(8_000));
        c.on_rtt(0, 2_000);
        c.on_feedback(0, &fb(1000, 0), 1200.0);
        // The next Feedback comes 5 s later and counts everything lost in between.
        let (action, change) = c.on_feedback(5_000_000, &fb(1100, 4000), 1200.0);
        assert_eq!((action, change), (RateAction::Hold, None));
        assert_eq!(c.target_kbps(), 8_000);
    }

    #[test]
    fn loss_without_delay_lowers_the_rate_and_bounds_hold() {
        let mut c = RateController::new(RateConfig::new(8_000));
        c.on_feedback(0, &fb(0, 0), 1200.0);
        let mut t = 0;
        let (mut r, mut l) = (0u32, 0u32);
        for _ in 0..100 {
            t += 100_000;
            r += 80;
            l += 20; // 20 % loss
            c.on_rtt(t, 2_000);
            c.on_feedback(t, &fb(r, l), 1200.0);
        }
        assert_eq!(c.target_kbps(), RateConfig::new(8_000).min_kbps);
    }
}
