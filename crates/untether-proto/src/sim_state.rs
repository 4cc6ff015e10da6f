//! The latest-wins state channel at scale, simulated: many keys changing at a fixed rate under a
//! bandwidth budget over a lossy link ([`crate::sim::SimLink`]), on a virtual clock. Packets and
//! acks travel encoded (their real sizes), and the simulation knows when every version of every
//! key was set, so it measures the **true** staleness at the receiver and compares it with the
//! sender's own estimate from its acks ([`crate::state::StateSender::staleness`]).
//!
//! `cargo run --release -p untether-proto --features sim --example state_scale` prints the standard run (4096
//! keys at 60 Hz, 1 Mbit/s, 2 % loss each way, 5 ms each way).

use std::collections::HashMap;

use crate::sim::{LinkConfig, SimLink};
use crate::state::{
    StateAck, StateConfig, StatePacket, StateReceiver, StateSender, StateValue, PACKET_OVERHEAD,
};
use crate::stats::percentile;
use crate::wire::Reader;
use crate::Micros;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct StateScaleConfig {
    pub keys: u16,
    /// How often each key changes (the changes are spread evenly over the period).
    pub change_hz: u32,
    /// The sender's budget, bytes per second (0: none).
    pub budget_bytes_per_s: u64,
    pub loss: f64,
    pub one_way_us: Micros,
    pub duration_us: Micros,
    /// Staleness is measured after this (the first round of every key is a cold start).
    pub warmup_us: Micros,
    /// The largest State frame body (a 1200-byte datagram less its header, frame header, tag).
    pub max_body: usize,
    pub seed: u64,
}

impl Default for StateScaleConfig {
    fn default() -> Self {
        StateScaleConfig {
            keys: 4096,
            change_hz: 60,
            budget_bytes_per_s: 125_000,
            loss: 0.02,
            one_way_us: 5_000,
            duration_us: 10_000_000,
            warmup_us: 2_000_000,
            max_body: 1200 - PACKET_OVERHEAD,
            seed: 1,
        }
    }
}

/// What a run measured (µs unless said).
#[derive(Clone, Debug, Default)]
pub struct StateScaleResult {
    /// True staleness (from the simulation's knowledge), per key its worst after the warm-up;
    /// then p50/p99/max over keys.
    pub true_p50_us: Micros,
    pub true_p99_us: Micros,
    pub true_max_us: Micros,
    /// The time-averaged true staleness, averaged over keys.
    pub true_mean_us: Micros,
    /// The sender's estimate (whole run, warm-up included).
    pub estimate: crate::state::Staleness,
    /// Keys the receiver never got.
    pub keys_never_delivered: usize,
    /// Bytes per second the channel used, overhead included (both directions).
    pub bytes_per_s_up: f64,
    pub bytes_per_s_down: f64,
    pub sets: u64,
    pub entries_sent: u64,
    pub entries_resent: u64,
    pub obsolete_skipped: u64,
    pub packets_sent: u64,
}

/// Runs one simulation.
pub fn run(cfg: &StateScaleConfig) -> StateScaleResult {
    let mut tx = StateSender::new(StateConfig {
        budget_bytes_per_s: cfg.budget_bytes_per_s,
        ..StateConfig::default()
    });
    let mut rx = StateReceiver::new();
    let link = |seed| {
        LinkConfig {
            loss: cfg.loss,
            delay_us: cfg.one_way_us,
            ..Default::default()
        }
        .clone_with_seed(seed)
    };
    let (mut up, mut down) = (link(cfg.seed), link(cfg.seed ^ 0xABCD));
    let n = cfg.keys as usize;
    let period = 1_000_000 / cfg.change_hz.max(1) as u64;
    // Per key: version → set time, the version the receiver holds, since when it is stale
    // (None: it holds the current version), worst staleness and the staleness integral.
    let mut set_times: Vec<HashMap<u64, Micros>> = vec![HashMap::new(); n];
    let mut version = vec![0u64; n];
    let mut held = vec![0u64; n];
    let mut stale_since: Vec<Option<Micros>> = vec![None; n];
    let mut worst = vec![0u64; n];
    let mut integral = vec![0u128; n];
    let (mut bytes_up, mut bytes_down, mut sets) = (0u64, 0u64, 0u64);
    let step = 250; // µs
    let mut now: Micros = 0;
    let mut next_key_change: Vec<Micros> = (0..n).map(|k| k as u64 * period / n as u64).collect();
    let mut last_t = 0;
    let warm = cfg.warmup_us;
    while now < cfg.duration_us {
        // Integrate the true staleness over the step.
        if now > warm {
            let dt = (now - last_t.max(warm)) as u128;
            for k in 0..n {
                if let Some(s) = stale_since[k] {
                    integral[k] += dt * now.saturating_sub(s) as u128;
                }
            }
        }
        last_t = now;
        for k in 0..n {
            while next_key_change[k] <= now {
                version[k] += 1;
                let v = version[k];
                set_times[k].insert(v, next_key_change[k]);
                if stale_since[k].is_none() {
                    stale_since[k] = Some(next_key_change[k]);
                }
                tx.set(next_key_change[k], k as u16, StateValue::Int(v as i64));
                sets += 1;
                next_key_change[k] += period;
            }
        }
        while let Some(p) = tx.poll_packet(now, cfg.max_body) {
            let mut body = Vec::with_capacity(p.encoded_len());
            p.encode(&mut body);
            bytes_up += (body.len() + PACKET_OVERHEAD) as u64;
            up.send(now, body);
        }
        while let Some(b) = up.poll(now) {
            let Ok(p) = StatePacket::parse(&mut Reader::new(&b, "sim")) else {
                continue;
            };
            rx.on_packet(now, &p);
            // What the receiver holds now, key by key.
            for (key, _) in &p.entries {
                let k = *key as usize;
                let Some(StateValue::Int(v)) = rx.get(*key).map(|e| e.value) else {
                    continue;
                };
                let v = v as u64;
                if v <= held[k] {
                    continue;
                }
                if let Some(s) = stale_since[k] {
                    if now > warm && s >= warm.saturating_sub(period) {
                        worst[k] = worst[k].max(now - s);
                    }
                }
                held[k] = v;
                stale_since[k] = set_times[k].get(&(v + 1)).copied();
                set_times[k].retain(|ver, _| *ver > v);
            }
            if let Some(a) = rx.poll_ack() {
                let mut body = Vec::with_capacity(a.encoded_len());
                a.encode(&mut body);
                bytes_down += (body.len() + PACKET_OVERHEAD) as u64;
                down.send(now, body);
            }
        }
        while let Some(b) = down.poll(now) {
            if let Ok(a) = StateAck::parse(&mut Reader::new(&b, "sim")) {
                tx.on_ack(now, &a);
            }
        }
        tx.handle_timeout(now);
        now += step;
    }
    // Keys still stale at the end count with their staleness so far.
    for k in 0..n {
        if let Some(s) = stale_since[k] {
            worst[k] = worst[k].max(now.saturating_sub(s.max(warm)));
        }
    }
    let measured = (now - warm).max(1) as u128;
    let mut sorted = worst.clone();
    sorted.sort_unstable();
    let st = tx.stats();
    StateScaleResult {
        true_p50_us: percentile(&sorted, 50.0).unwrap_or(0),
        true_p99_us: percentile(&sorted, 99.0).unwrap_or(0),
        true_max_us: sorted.last().copied().unwrap_or(0),
        true_mean_us: integral
            .iter()
            .map(|i| (*i / measured) as u64)
            .sum::<u64>()
            .checked_div(n as u64)
            .unwrap_or(0),
        estimate: tx.staleness(now),
        keys_never_delivered: held.iter().filter(|h| **h == 0).count(),
        bytes_per_s_up: bytes_up as f64 / (now as f64 / 1e6),
        bytes_per_s_down: bytes_down as f64 / (now as f64 / 1e6),
        sets,
        entries_sent: st.entries_sent,
        entries_resent: st.entries_resent,
        obsolete_skipped: st.obsolete_skipped,
        packets_sent: st.packets_sent,
    }
}

impl LinkConfig {
    /// A [`SimLink`] with this configuration.
    fn clone_with_seed(&self, seed: u64) -> SimLink {
        SimLink::new(self.clone(), seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_keys_under_a_budget_with_loss_stay_fresh_and_within_budget() {
        // A smaller version of the standard run (1024 keys, 2 s): the budget is kept, every key
        // arrives, no key starves, and the sender's estimate agrees with the truth.
        let cfg = StateScaleConfig {
            keys: 1024,
            budget_bytes_per_s: 40_000,
            duration_us: 3_000_000,
            warmup_us: 1_000_000,
            ..Default::default()
        };
        let r = run(&cfg);
        assert_eq!(r.keys_never_delivered, 0, "{r:?}");
        // The budget's burst allows a little more at the start.
        assert!(r.bytes_per_s_up <= 40_000.0 * 1.05, "{r:?}");
        // 1024 keys × 11 B per entry at ~40 kB/s: a round every ~0.3 s; losses add an RTO.
        assert!(r.true_p99_us < 1_000_000, "{r:?}");
        assert!(r.true_p50_us > 100_000, "the budget must show: {r:?}");
        // The sender's estimate (ack − SRTT/2) is within 20 % of the truth at the tail.
        let (t, e) = (r.true_p99_us as f64, r.estimate.p99_us as f64);
        assert!((e - t).abs() < 0.2 * t + 20_000.0, "{r:?}");
        assert!(r.obsolete_skipped > 0 || r.entries_resent > 0);
    }
}
