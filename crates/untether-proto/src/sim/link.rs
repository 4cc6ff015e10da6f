//! The simulated network: a seedable generator and a link with loss, burst loss, delay,
//! jitter, reordering, duplication and outages on the virtual clock.

use std::collections::BinaryHeap;

use crate::Micros;

/// A small, fast, seedable generator (splitmix64): the simulation needs no crate for this.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(seed ^ 0xD1B5_4A32_D192_ED03)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo + 1)
        }
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Impairments of one direction of a link.
#[derive(Clone, Debug, Default)]
pub struct LinkConfig {
    /// Independent loss probability per datagram.
    pub loss: f64,
    /// Gilbert–Elliott bursts: (P(good→bad), P(bad→good)); in the bad state every datagram is
    /// lost.
    pub burst: Option<(f64, f64)>,
    /// Base one-way delay.
    pub delay_us: Micros,
    /// Normal jitter (standard deviation) added to the delay, truncated at 0.
    pub jitter_us: Micros,
    /// Probability that a datagram is held back an extra 1–5 ms (reordering).
    pub reorder: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Windows [start, end) of simulated time in which everything is dropped.
    pub outages: Vec<(Micros, Micros)>,
    /// Heavy-tailed (Pareto) extra delay: `(scale_us, shape)`; the extra delay is
    /// `scale·(U^(−1/shape) − 1)`, so most datagrams get little and a few get a lot.
    pub pareto: Option<(Micros, f64)>,
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: Micros,
    seq: u64,
    payload: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on (at, seq).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One direction of a simulated link.
pub struct SimLink {
    cfg: LinkConfig,
    rng: SimRng,
    bad: bool,
    seq: u64,
    queue: BinaryHeap<InFlight>,
    pub sent: u64,
    pub dropped: u64,
}

impl SimLink {
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        SimLink {
            cfg,
            rng: SimRng::new(seed),
            bad: false,
            seq: 0,
            queue: BinaryHeap::new(),
            sent: 0,
            dropped: 0,
        }
    }

    pub fn send(&mut self, now: Micros, payload: Vec<u8>) {
        self.sent += 1;
        if let Some((g2b, b2g)) = self.cfg.burst {
            self.bad = if self.bad {
                !self.rng.chance(b2g)
            } else {
                self.rng.chance(g2b)
            };
        }
        let out = self.cfg.outages.iter().any(|&(s, e)| now >= s && now < e);
        if out || self.bad || self.rng.chance(self.cfg.loss) {
            self.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut jitter = (self.rng.normal() * self.cfg.jitter_us as f64).max(0.0) as Micros;
            if let Some((scale, shape)) = self.cfg.pareto {
                let u = self.unit_open();
                jitter += (scale as f64 * (u.powf(-1.0 / shape.max(0.1)) - 1.0)).min(5e6) as Micros;
            }
            let extra = if self.rng.chance(self.cfg.reorder) {
                self.rng.range(1000, 5000)
            } else {
                0
            };
            self.seq += 1;
            self.queue.push(InFlight {
                at: now + self.cfg.delay_us + jitter + extra,
                seq: self.seq,
                payload: payload.clone(),
            });
        }
    }

    fn unit_open(&mut self) -> f64 {
        self.rng.unit().max(1e-9)
    }

    pub fn next_delivery(&self) -> Option<Micros> {
        self.queue.peek().map(|f| f.at)
    }

    pub fn poll(&mut self, now: Micros) -> Option<Vec<u8>> {
        if self.queue.peek().is_some_and(|f| f.at <= now) {
            self.queue.pop().map(|f| f.payload)
        } else {
            None
        }
    }
}
