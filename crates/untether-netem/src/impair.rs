//! The impairment model of one direction of a link: pure, clock-free and seeded.
//!
//! An [`Impairer`] is told about every datagram that arrives (`on_packet(now, len)`, `now` in
//! microseconds of a monotonic clock) and answers with a [`Verdict`]: drop it (and why), or deliver
//! it at a given time (twice when it is duplicated). It never reads a clock, never sleeps and never
//! touches a socket, so its statistics are tested over millions of packets in milliseconds; the
//! UDP relay ([`crate::relay`]) is a thin shell that feeds it and sends at the times it returns.
//!
//! # The pipeline a datagram goes through
//! 1. **Outage** — arriving inside a scheduled window (relative to the impairer's start): dropped.
//! 2. **Rate limit** (serialization) — a token bucket of `burst_bytes` refilled at `bits_per_s`,
//!    with a bounded FIFO queue in front of it. A datagram that would have to wait while the queue
//!    is full is tail-dropped ([`DropCause::Queue`]); otherwise it leaves the bottleneck at its
//!    departure time. Datagrams larger than the bucket leave when the bucket is full and drive it
//!    negative, so the long-run rate is exact.
//! 3. **Loss** — Gilbert–Elliott bursts ([`DropCause::Burst`]) and independent Bernoulli loss
//!    ([`DropCause::Loss`]). Loss is decided *after* the bottleneck: a lost datagram used its share
//!    of the link, as on a radio link where the frame went out and was not received.
//! 4. **Delay** (propagation) — departure + `delay_us` + a jitter sample (normal, Pareto tail, or
//!    the next value of a replayed trace), never earlier than the departure.
//! 5. **Order** — with `preserve_order` (the default), a datagram is never delivered before the
//!    one delivered before it: `at = max(at, previous at)`. Jitter on a real path mostly comes from
//!    queues, which delay everything behind a slow packet rather than letting later packets
//!    overtake it; so a delay spike here holds up the datagrams behind it (head-of-line blocking,
//!    as Wi-Fi retransmissions do), and the *per-packet* delay distribution is the configured one
//!    only when datagrams are spaced further apart than the jitter. Set `preserve_order = false`
//!    for netem-like behaviour where jitter alone reorders.
//! 6. **Reorder** — with probability `reorder`, a datagram is held back `reorder_delay_us` more
//!    and does not hold up the ones behind it, which overtake it.
//! 7. **Duplicate** — with probability `duplicate`, a copy is delivered too, after its own delay
//!    sample but never before the original's in-order time.
//!
//! # Determinism
//! Each stage draws from its own ChaCha8 stream (one seed, five stream ids), and draws the same
//! amount for every arriving datagram whatever happens to it, so the stages do not disturb each
//! other: adding an outage, or changing the loss rate, leaves every other datagram's jitter,
//! reordering and duplication untouched. Uniforms are built from raw 64-bit outputs and the normal
//! and Pareto samples are computed here (Box–Muller, inverse CDF), so a seed gives the same run
//! whatever the version of `rand`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use untether_net::Micros;

use crate::units::{fmt_pct, fmt_rate, fmt_us, ParseError};

/// Default extra hold-back of a reordered datagram.
pub const DEFAULT_REORDER_DELAY_US: Micros = 1000;
/// Default mean burst length, in datagrams, of the `--burst-loss` preset.
pub const DEFAULT_MEAN_BURST: f64 = 4.0;
/// Jitter samples are capped at this (a Pareto tail is unbounded; a relay holding a datagram for
/// an hour helps nobody).
pub const MAX_JITTER_US: Micros = 10_000_000;

/// An impairment (or a Gilbert–Elliott model) whose values are out of range: each variant names
/// the setting and carries the value given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImpairError {
    /// A Gilbert–Elliott parameter (`p`, `r`, `loss_bad`, `loss_good`) outside [0, 1].
    #[error("Gilbert–Elliott {name} = {value} is not a probability in [0, 1]")]
    GilbertProbability {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A Gilbert–Elliott model with `r = 0`.
    #[error("Gilbert–Elliott r = 0 would never leave the bad state")]
    NeverLeavesBad,
    /// The average loss of burst loss outside [0, 100 %).
    #[error("burst loss needs an average loss in [0, 100%), got {}", fmt_pct(*.0))]
    BurstAverageLoss(f64),
    /// A mean burst length below 1 datagram.
    #[error("the mean burst length is in datagrams and must be at least 1, got {0}")]
    MeanBurst(f64),
    /// `loss`, `reorder` or `duplicate` outside [0, 1].
    #[error("{name} = {value} is not a probability in [0, 1]")]
    Probability {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A negative (or not finite) normal-jitter σ, in microseconds.
    #[error("normal jitter σ = {0} us must be ≥ 0")]
    NormalSigma(f64),
    /// A negative (or not finite) Pareto scale, in microseconds.
    #[error("Pareto jitter scale = {0} us must be ≥ 0")]
    ParetoScale(f64),
    /// A Pareto shape that is not > 0.
    #[error("Pareto shape = {0} must be > 0")]
    ParetoShape(f64),
    /// A rate limit of 0 bit/s.
    #[error("rate must be at least 1 bit/s")]
    ZeroRate,
    /// A token bucket of 0 bytes.
    #[error("the token-bucket burst must be at least 1 byte")]
    ZeroBurst,
    /// A queue limit of 0.
    #[error("the queue limit must be at least 1 packet or 1 byte")]
    ZeroQueue,
    /// An outage window of length 0.
    #[error("outage {0} lasts 0")]
    EmptyOutage(Outage),
}

/// A delay trace that cannot be read or parsed; `trace` names it (its path) as in
/// [`DelayTrace::source`].
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file cannot be read.
    #[error("cannot read delay trace {}: {error}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A bare number that is not a delay between 0 and [`MAX_JITTER_US`].
    #[error("delay trace {trace} line {line}: {text:?} is not a delay between 0 and {} ms", MAX_JITTER_US / 1000)]
    OutOfRange {
        /// The trace.
        trace: String,
        /// The line number, from 1.
        line: usize,
        /// The line's text.
        text: String,
    },
    /// A line that is neither a number nor a duration.
    #[error("delay trace {trace} line {line}: {error} (or a bare number of milliseconds)")]
    Line {
        /// The trace.
        trace: String,
        /// The line number, from 1.
        line: usize,
        /// Why the line is not a duration.
        error: ParseError,
    },
    /// A trace without a single delay.
    #[error("delay trace {trace}: no delays in it")]
    Empty {
        /// The trace.
        trace: String,
    },
}

/// A two-state Markov loss model (Gilbert–Elliott). Per datagram the channel first moves (good→bad
/// with probability `p`, bad→good with `r`), then the datagram is lost with the state's loss
/// probability. The channel stays bad for `1/r` datagrams on average; with `loss_bad = 1` and
/// `loss_good = 0` that is the mean length of a loss burst.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GilbertElliott {
    /// P(good → bad) per datagram.
    pub p: f64,
    /// P(bad → good) per datagram.
    pub r: f64,
    /// Loss probability in the bad state.
    pub loss_bad: f64,
    /// Loss probability in the good state.
    pub loss_good: f64,
}

impl GilbertElliott {
    /// Wi-Fi-like bursts with the given average loss: the channel fades for `mean_burst`
    /// datagrams on average (`r = 1/mean_burst`), losing everything while it does, and loses
    /// nothing otherwise; `p` is chosen so that the long-run loss is `average_loss`.
    pub fn bursty(average_loss: f64, mean_burst: f64) -> Result<Self, ImpairError> {
        if !(0.0..1.0).contains(&average_loss) {
            return Err(ImpairError::BurstAverageLoss(average_loss));
        }
        if !(mean_burst.is_finite() && mean_burst >= 1.0) {
            return Err(ImpairError::MeanBurst(mean_burst));
        }
        let r = 1.0 / mean_burst;
        let p = r * average_loss / (1.0 - average_loss);
        let g = GilbertElliott {
            p,
            r,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        g.validate()?;
        Ok(g)
    }

    /// The stationary share of time in the bad state.
    pub fn bad_share(&self) -> f64 {
        if self.p + self.r == 0.0 {
            0.0
        } else {
            self.p / (self.p + self.r)
        }
    }

    /// The long-run loss rate.
    pub fn average_loss(&self) -> f64 {
        let b = self.bad_share();
        b * self.loss_bad + (1.0 - b) * self.loss_good
    }

    /// Mean number of consecutive datagrams spent in the bad state (`1/r`).
    pub fn mean_bad_run(&self) -> f64 {
        1.0 / self.r
    }

    /// Checks every probability is in [0, 1] and that the bad state can be left.
    pub fn validate(&self) -> Result<(), ImpairError> {
        for (name, v) in [
            ("p", self.p),
            ("r", self.r),
            ("loss_bad", self.loss_bad),
            ("loss_good", self.loss_good),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ImpairError::GilbertProbability { name, value: v });
            }
        }
        if self.r == 0.0 {
            return Err(ImpairError::NeverLeavesBad);
        }
        Ok(())
    }
}

/// A replayed sequence of per-datagram delays: the n-th arriving datagram gets
/// `delay_us + delays[n % len]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayTrace {
    source: String,
    delays_us: Vec<Micros>,
}

impl DelayTrace {
    /// A trace from its values; `source` names it in messages and reports.
    pub fn new(source: impl Into<String>, delays_us: Vec<Micros>) -> Result<Self, TraceError> {
        let source = source.into();
        if delays_us.is_empty() {
            return Err(TraceError::Empty { trace: source });
        }
        Ok(DelayTrace { source, delays_us })
    }

    /// Parses a trace: one delay per line, either with a unit (`1.9ms`, `250us`) or a bare number
    /// of milliseconds (as ping prints them); `#` starts a comment; blank lines are skipped.
    pub fn parse(source: &str, text: &str) -> Result<Self, TraceError> {
        let mut delays = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let us = match line.parse::<f64>() {
                Ok(ms) if ms.is_finite() && ms >= 0.0 && ms <= MAX_JITTER_US as f64 / 1e3 => {
                    (ms * 1e3).round() as Micros
                }
                Ok(_) => {
                    return Err(TraceError::OutOfRange {
                        trace: source.into(),
                        line: i + 1,
                        text: line.into(),
                    })
                }
                Err(_) => crate::units::duration_us(line).map_err(|error| TraceError::Line {
                    trace: source.into(),
                    line: i + 1,
                    error,
                })?,
            };
            delays.push(us.min(MAX_JITTER_US));
        }
        Self::new(source, delays)
    }

    /// Reads and parses a trace file (see [`DelayTrace::parse`]).
    pub fn load(path: &Path) -> Result<Self, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|error| TraceError::Read {
            path: path.into(),
            error,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Where the trace came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The delays, in replay order.
    pub fn delays_us(&self) -> &[Micros] {
        &self.delays_us
    }
}

impl serde::Serialize for DelayTrace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("DelayTrace", 2)?;
        st.serialize_field("source", &self.source)?;
        st.serialize_field("len", &self.delays_us.len())?;
        st.end()
    }
}

fn serialize_trace<S: serde::Serializer>(t: &Arc<DelayTrace>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&**t, s)
}

/// The variable part of the delay, added to the fixed `delay_us`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Jitter {
    /// No jitter.
    #[default]
    None,
    /// Normal with mean 0 and this standard deviation; the total delay is cut at 0 (a datagram
    /// does not leave before it arrived), which biases the mean up when σ is close to the delay.
    Normal {
        /// Standard deviation in microseconds.
        sigma_us: f64,
    },
    /// A Pareto tail (Lomax, Pareto type II): `scale·(U^(-1/shape) − 1)`, ≥ 0, with median
    /// `scale·(2^(1/shape) − 1)`, mean `scale/(shape − 1)` (shape > 1), and
    /// P(jitter > x) = (1 + x/scale)^(−shape). Capped at [`MAX_JITTER_US`].
    Pareto {
        /// Scale in microseconds.
        scale_us: f64,
        /// Tail index; smaller is heavier (≤ 2: infinite variance, ≤ 1: infinite mean).
        shape: f64,
    },
    /// A replayed trace of delays.
    Trace(#[serde(serialize_with = "serialize_trace")] Arc<DelayTrace>),
}

/// How much may wait in front of the rate limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// At most this many datagrams waiting.
    Packets(u64),
    /// At most this many bytes waiting.
    Bytes(u64),
}

/// A token-bucket rate limit with a bounded queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RateLimit {
    /// Refill rate of the bucket: the link's rate in bits per second.
    pub bits_per_s: u64,
    /// Bucket size in bytes: how much may leave back to back after an idle period.
    pub burst_bytes: u64,
    /// Bound of the queue in front of the bucket (tail drop).
    pub queue: QueueLimit,
}

impl RateLimit {
    /// The default burst: one millisecond at the rate, but at least two 1500-byte datagrams.
    pub fn default_burst(bits_per_s: u64) -> u64 {
        (bits_per_s / 8000).max(3000)
    }

    /// The default queue: 50 ms at the rate, but at least two 1500-byte datagrams.
    pub fn default_queue(bits_per_s: u64) -> QueueLimit {
        QueueLimit::Bytes((bits_per_s / 8 / 20).max(3000))
    }

    /// A rate limit with the default burst and queue.
    pub fn new(bits_per_s: u64) -> Self {
        RateLimit {
            bits_per_s,
            burst_bytes: Self::default_burst(bits_per_s),
            queue: Self::default_queue(bits_per_s),
        }
    }
}

/// A window during which everything arriving is dropped, relative to the impairer's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Outage {
    /// Start of the window, microseconds after the start.
    pub start_us: Micros,
    /// Length of the window.
    pub duration_us: Micros,
}

impl Outage {
    /// End of the window (exclusive).
    pub fn end_us(&self) -> Micros {
        self.start_us.saturating_add(self.duration_us)
    }

    /// Whether `since_start` falls inside `[start, start + duration)`.
    pub fn contains(&self, since_start: Micros) -> bool {
        since_start >= self.start_us && since_start < self.end_us()
    }
}

impl std::fmt::Display for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", fmt_us(self.duration_us), fmt_us(self.start_us))
    }
}

/// The impairments of one direction of a link. `Impairment::default()` does nothing.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Impairment {
    /// Independent (Bernoulli) loss probability per datagram.
    pub loss: f64,
    /// Burst loss, applied in addition to `loss`.
    pub gilbert: Option<GilbertElliott>,
    /// Fixed one-way delay.
    pub delay_us: Micros,
    /// Variable delay added to `delay_us`.
    pub jitter: Jitter,
    /// Never deliver a datagram before the previous one (see the module docs); default true.
    pub preserve_order: bool,
    /// Rate limit (applied before the delay).
    pub rate: Option<RateLimit>,
    /// Probability that a datagram is held back `reorder_delay_us` and overtaken.
    pub reorder: f64,
    /// Extra delay of a reordered datagram.
    pub reorder_delay_us: Micros,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Windows in which everything is dropped.
    pub outages: Vec<Outage>,
}

impl Default for Impairment {
    fn default() -> Self {
        Impairment {
            loss: 0.0,
            gilbert: None,
            delay_us: 0,
            jitter: Jitter::None,
            preserve_order: true,
            rate: None,
            reorder: 0.0,
            reorder_delay_us: DEFAULT_REORDER_DELAY_US,
            duplicate: 0.0,
            outages: Vec::new(),
        }
    }
}

impl Impairment {
    /// True when nothing is impaired: every datagram is delivered at once.
    pub fn is_passthrough(&self) -> bool {
        self.loss == 0.0
            && self.gilbert.is_none()
            && self.delay_us == 0
            && self.jitter == Jitter::None
            && self.rate.is_none()
            && self.reorder == 0.0
            && self.duplicate == 0.0
            && self.outages.is_empty()
    }

    /// Checks that probabilities are probabilities and sizes are positive.
    pub fn validate(&self) -> Result<(), ImpairError> {
        for (name, v) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ImpairError::Probability { name, value: v });
            }
        }
        if let Some(g) = &self.gilbert {
            g.validate()?;
        }
        match &self.jitter {
            Jitter::None | Jitter::Trace(_) => {}
            Jitter::Normal { sigma_us } => {
                if !(sigma_us.is_finite() && *sigma_us >= 0.0) {
                    return Err(ImpairError::NormalSigma(*sigma_us));
                }
            }
            Jitter::Pareto { scale_us, shape } => {
                if !(scale_us.is_finite() && *scale_us >= 0.0) {
                    return Err(ImpairError::ParetoScale(*scale_us));
                }
                if !(shape.is_finite() && *shape > 0.0) {
                    return Err(ImpairError::ParetoShape(*shape));
                }
            }
        }
        if let Some(r) = &self.rate {
            if r.bits_per_s == 0 {
                return Err(ImpairError::ZeroRate);
            }
            if r.burst_bytes == 0 {
                return Err(ImpairError::ZeroBurst);
            }
            if matches!(r.queue, QueueLimit::Packets(0) | QueueLimit::Bytes(0)) {
                return Err(ImpairError::ZeroQueue);
            }
        }
        for o in &self.outages {
            if o.duration_us == 0 {
                return Err(ImpairError::EmptyOutage(*o));
            }
        }
        Ok(())
    }

    /// One line for people: `loss 2% · delay 5ms + normal σ 2ms · rate 20mbit (…)`, or `none`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.loss > 0.0 {
            parts.push(format!("loss {}", fmt_pct(self.loss)));
        }
        if let Some(g) = &self.gilbert {
            parts.push(format!(
                "burst loss {} (Gilbert–Elliott p {}, r {}, bad {}, good {}; bursts of {:.1} on average)",
                fmt_pct(g.average_loss()),
                fmt_pct(g.p),
                fmt_pct(g.r),
                fmt_pct(g.loss_bad),
                fmt_pct(g.loss_good),
                g.mean_bad_run()
            ));
        }
        let jitter = match &self.jitter {
            Jitter::None => String::new(),
            Jitter::Normal { sigma_us } => {
                format!(" + normal σ {}", fmt_us(sigma_us.round() as Micros))
            }
            Jitter::Pareto { scale_us, shape } => format!(
                " + Pareto tail (scale {}, shape {shape})",
                fmt_us(scale_us.round() as Micros)
            ),
            Jitter::Trace(t) => format!(" + trace {} ({} delays)", t.source(), t.delays_us().len()),
        };
        if self.delay_us > 0 || !jitter.is_empty() {
            let order = if self.preserve_order || self.jitter == Jitter::None {
                ""
            } else {
                " (jitter may reorder)"
            };
            parts.push(format!("delay {}{jitter}{order}", fmt_us(self.delay_us)));
        }
        if let Some(r) = &self.rate {
            let q = match r.queue {
                QueueLimit::Packets(n) => format!("{n} packets"),
                QueueLimit::Bytes(b) => format!("{b} B"),
            };
            parts.push(format!(
                "rate {} (burst {} B, queue {q})",
                fmt_rate(r.bits_per_s),
                r.burst_bytes
            ));
        }
        if self.reorder > 0.0 {
            parts.push(format!(
                "reorder {} (+{})",
                fmt_pct(self.reorder),
                fmt_us(self.reorder_delay_us)
            ));
        }
        if self.duplicate > 0.0 {
            parts.push(format!("duplicate {}", fmt_pct(self.duplicate)));
        }
        if !self.outages.is_empty() {
            let o: Vec<String> = self.outages.iter().map(|o| o.to_string()).collect();
            parts.push(format!("outage {}", o.join(", ")));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" · ")
        }
    }
}

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// Independent (Bernoulli) loss.
    Loss,
    /// Gilbert–Elliott burst loss.
    Burst,
    /// Inside a scheduled outage.
    Outage,
    /// Tail-dropped: the rate limiter's queue was full.
    Queue,
}

/// What happens to one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Dropped.
    Drop(DropCause),
    /// Delivered at `at` (≥ the arrival time), and a copy at `duplicate_at` when duplicated.
    Deliver {
        /// When to deliver it.
        at: Micros,
        /// When to deliver the duplicate, if any.
        duplicate_at: Option<Micros>,
    },
}

/// Counts kept by an [`Impairer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Datagrams seen.
    pub packets: u64,
    /// Datagrams delivered (not counting duplicates).
    pub delivered: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Datagrams held back to be overtaken.
    pub reordered: u64,
    /// Dropped by Bernoulli loss.
    pub dropped_loss: u64,
    /// Dropped by burst loss.
    pub dropped_burst: u64,
    /// Dropped in an outage.
    pub dropped_outage: u64,
    /// Tail-dropped at the rate limiter.
    pub dropped_queue: u64,
}

/// The token bucket and its FIFO queue, in exact integer arithmetic. Tokens are counted in
/// bit·µs/s ("micro-bits"): one byte is 8·10⁶ units and the bucket gains `bits_per_s` units per
/// microsecond.
#[derive(Clone, Debug)]
struct Bucket {
    rate: i128,
    cap: i128,
    tokens: i128,
    /// Time the token count refers to: the last departure (possibly in the future).
    last: Micros,
    limit: QueueLimit,
    /// Departure time and size of each datagram admitted but not yet departed.
    waiting: VecDeque<(Micros, u64)>,
    waiting_bytes: u64,
}

const UNITS_PER_BYTE: i128 = 8_000_000;

impl Bucket {
    fn new(r: &RateLimit, start: Micros) -> Self {
        let cap = r.burst_bytes as i128 * UNITS_PER_BYTE;
        Bucket {
            rate: r.bits_per_s as i128,
            cap,
            tokens: cap,
            last: start,
            limit: r.queue,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
        }
    }

    /// The departure time of a datagram of `len` bytes arriving at `now`, or `None` when it
    /// would have to wait and the queue is full.
    fn admit(&mut self, now: Micros, len: u64) -> Option<Micros> {
        while let Some(&(d, l)) = self.waiting.front() {
            if d > now {
                break;
            }
            self.waiting.pop_front();
            self.waiting_bytes -= l;
        }
        let t0 = now.max(self.last);
        let avail = (self.tokens + self.rate * (t0 - self.last) as i128).min(self.cap);
        let size = len as i128 * UNITS_PER_BYTE;
        let need = size.min(self.cap);
        let wait = if avail >= need {
            0
        } else {
            // Ceiling division: leave no earlier than the tokens are there.
            ((need - avail + self.rate - 1) / self.rate) as Micros
        };
        let depart = t0 + wait;
        if depart > now {
            let full = match self.limit {
                QueueLimit::Packets(n) => self.waiting.len() as u64 + 1 > n,
                QueueLimit::Bytes(b) => self.waiting_bytes + len > b,
            };
            if full {
                return None;
            }
            self.waiting.push_back((depart, len));
            self.waiting_bytes += len;
        }
        self.tokens = (avail + self.rate * wait as i128).min(self.cap) - size;
        self.last = depart;
        Some(depart)
    }
}

/// Stream ids of the per-stage random streams.
const STREAM_LOSS: u64 = 1;
const STREAM_BURST: u64 = 2;
const STREAM_JITTER: u64 = 3;
const STREAM_REORDER: u64 = 4;
const STREAM_DUPLICATE: u64 = 5;

fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// Uniform in [0, 1) from the top 53 bits of one output.
fn unit(r: &mut ChaCha8Rng) -> f64 {
    (r.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform in (0, 1].
fn unit_open0(r: &mut ChaCha8Rng) -> f64 {
    1.0 - unit(r)
}

/// Mixes a base seed with a path index and a direction into an independent seed (splitmix64).
pub fn derive_seed(base: u64, path: u64, direction: u64) -> u64 {
    let mut z = base
        ^ path.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ direction.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The state machine applying an [`Impairment`] to a stream of datagrams.
#[derive(Clone, Debug)]
pub struct Impairer {
    cfg: Impairment,
    start: Micros,
    rng_loss: ChaCha8Rng,
    rng_burst: ChaCha8Rng,
    rng_jitter: ChaCha8Rng,
    rng_reorder: ChaCha8Rng,
    rng_dup: ChaCha8Rng,
    bad: bool,
    trace_pos: usize,
    bucket: Option<Bucket>,
    last_deliver: Micros,
    last_now: Micros,
    stats: ImpairStats,
}

impl Impairer {
    /// An impairer for `cfg`, seeded with `seed`, whose outage windows count from `start`.
    /// `cfg` should have passed [`Impairment::validate`]; out-of-range probabilities are clamped.
    pub fn new(cfg: Impairment, seed: u64, start: Micros) -> Self {
        let bucket = cfg.rate.as_ref().map(|r| Bucket::new(r, start));
        Impairer {
            cfg,
            start,
            rng_loss: rng(seed, STREAM_LOSS),
            rng_burst: rng(seed, STREAM_BURST),
            rng_jitter: rng(seed, STREAM_JITTER),
            rng_reorder: rng(seed, STREAM_REORDER),
            rng_dup: rng(seed, STREAM_DUPLICATE),
            bad: false,
            trace_pos: 0,
            bucket,
            last_deliver: 0,
            last_now: start,
            stats: ImpairStats::default(),
        }
    }

    /// The configuration.
    pub fn impairment(&self) -> &Impairment {
        &self.cfg
    }

    /// Counts so far.
    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// True when every datagram is delivered at once, untouched.
    pub fn is_passthrough(&self) -> bool {
        self.cfg.is_passthrough()
    }

    /// One jitter sample in microseconds (signed: normal jitter may be negative).
    fn sample(jitter: &Jitter, r: &mut ChaCha8Rng) -> i64 {
        match jitter {
            Jitter::None | Jitter::Trace(_) => 0,
            Jitter::Normal { sigma_us } => {
                let u1 = unit_open0(r);
                let u2 = unit(r);
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (z * sigma_us)
                    .round()
                    .clamp(-(MAX_JITTER_US as f64), MAX_JITTER_US as f64) as i64
            }
            Jitter::Pareto { scale_us, shape } => {
                let u = unit_open0(r);
                let x = scale_us * (u.powf(-1.0 / shape) - 1.0);
                x.round().min(MAX_JITTER_US as f64) as i64
            }
        }
    }

    /// Decides the fate of a datagram of `len` bytes arriving at `now`. `now` should not go
    /// backwards; if it does, the previous `now` is used.
    pub fn on_packet(&mut self, now: Micros, len: usize) -> Verdict {
        let now = now.max(self.last_now);
        self.last_now = now;
        self.stats.packets += 1;

        // Draw everything first, the same amount whatever becomes of the datagram.
        let burst_drop = match self.cfg.gilbert {
            Some(g) => {
                let move_u = unit(&mut self.rng_burst);
                let loss_u = unit(&mut self.rng_burst);
                self.bad = if self.bad {
                    move_u >= g.r
                } else {
                    move_u < g.p
                };
                loss_u < if self.bad { g.loss_bad } else { g.loss_good }
            }
            None => false,
        };
        let lost = self.cfg.loss > 0.0 && unit(&mut self.rng_loss) < self.cfg.loss;
        let jitter = match &self.cfg.jitter {
            Jitter::Trace(t) => {
                let d = t.delays_us()[self.trace_pos % t.delays_us().len()];
                self.trace_pos = (self.trace_pos + 1) % t.delays_us().len();
                d as i64
            }
            j => Self::sample(j, &mut self.rng_jitter),
        };
        let reordered = self.cfg.reorder > 0.0 && unit(&mut self.rng_reorder) < self.cfg.reorder;
        let duplicate_jitter = if self.cfg.duplicate > 0.0 {
            let hit = unit(&mut self.rng_dup) < self.cfg.duplicate;
            let j = match &self.cfg.jitter {
                Jitter::Trace(_) => jitter,
                j => Self::sample(j, &mut self.rng_dup),
            };
            hit.then_some(j)
        } else {
            None
        };

        let since_start = now - self.start;
        if self.cfg.outages.iter().any(|o| o.contains(since_start)) {
            self.stats.dropped_outage += 1;
            return Verdict::Drop(DropCause::Outage);
        }
        let depart = match &mut self.bucket {
            Some(b) => match b.admit(now, len as u64) {
                Some(t) => t,
                None => {
                    self.stats.dropped_queue += 1;
                    return Verdict::Drop(DropCause::Queue);
                }
            },
            None => now,
        };
        if burst_drop {
            self.stats.dropped_burst += 1;
            return Verdict::Drop(DropCause::Burst);
        }
        if lost {
            self.stats.dropped_loss += 1;
            return Verdict::Drop(DropCause::Loss);
        }

        let base = depart + self.cfg.delay_us;
        let delayed = |j: i64| base.saturating_add_signed(j).max(depart);
        let raw = delayed(jitter);
        let in_order = if self.cfg.preserve_order {
            raw.max(self.last_deliver)
        } else {
            raw
        };
        let at = if reordered {
            self.stats.reordered += 1;
            in_order + self.cfg.reorder_delay_us
        } else {
            self.last_deliver = self.last_deliver.max(in_order);
            in_order
        };
        self.stats.delivered += 1;
        let duplicate_at = duplicate_jitter.map(|j| {
            self.stats.duplicated += 1;
            delayed(j).max(in_order)
        });
        Verdict::Deliver { at, duplicate_at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` datagrams of `len` bytes, one every `gap` µs, and returns the verdicts with
    /// their arrival times.
    fn run(
        cfg: &Impairment,
        seed: u64,
        n: usize,
        gap: Micros,
        len: usize,
    ) -> Vec<(Micros, Verdict)> {
        let mut imp = Impairer::new(cfg.clone(), seed, 0);
        (0..n as u64)
            .map(|i| {
                let t = i * gap;
                (t, imp.on_packet(t, len))
            })
            .collect()
    }

    fn delays(v: &[(Micros, Verdict)]) -> Vec<f64> {
        v.iter()
            .filter_map(|&(t, v)| match v {
                Verdict::Deliver { at, .. } => Some((at - t) as f64),
                Verdict::Drop(_) => None,
            })
            .collect()
    }

    /// The project's one percentile definition (nearest rank), at a quantile `q` in 0..=1.
    fn quantile(sorted: &[f64], q: f64) -> f64 {
        untether_proto::stats::percentile(sorted, q * 100.0).unwrap_or(f64::NAN)
    }

    fn mean_sd(x: &[f64]) -> (f64, f64) {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        let v = x.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (x.len() - 1) as f64;
        (m, v.sqrt())
    }

    #[test]
    fn passthrough_delivers_everything_at_once() {
        let v = run(&Impairment::default(), 1, 10_000, 7, 1200);
        assert!(v.iter().all(|&(t, v)| v
            == Verdict::Deliver {
                at: t,
                duplicate_at: None
            }));
        assert!(Impairment::default().is_passthrough());
        assert_eq!(Impairment::default().describe(), "none");
    }

    #[test]
    fn bernoulli_loss_rate_matches() {
        let cfg = Impairment {
            loss: 0.02,
            ..Default::default()
        };
        let n = 1_000_000;
        let v = run(&cfg, 7, n, 10, 1200);
        let lost = v
            .iter()
            .filter(|(_, v)| *v == Verdict::Drop(DropCause::Loss))
            .count();
        let rate = lost as f64 / n as f64;
        // σ of the estimate is 0.014 percentage points; allow 0.1.
        assert!((rate - 0.02).abs() < 0.001, "loss rate {rate}");
    }

    /// Lengths of runs of consecutive burst drops.
    fn burst_runs(v: &[(Micros, Verdict)]) -> Vec<usize> {
        let mut runs = Vec::new();
        let mut cur = 0;
        for (_, v) in v {
            if *v == Verdict::Drop(DropCause::Burst) {
                cur += 1;
            } else if cur > 0 {
                runs.push(cur);
                cur = 0;
            }
        }
        runs
    }

    #[test]
    fn burst_preset_keeps_the_average_and_makes_bursts_of_one_over_r() {
        let g = GilbertElliott::bursty(0.02, DEFAULT_MEAN_BURST).unwrap();
        assert!((g.average_loss() - 0.02).abs() < 1e-12);
        let cfg = Impairment {
            gilbert: Some(g),
            ..Default::default()
        };
        let n = 2_000_000;
        let v = run(&cfg, 11, n, 10, 1200);
        let runs = burst_runs(&v);
        let lost: usize = runs.iter().sum();
        let rate = lost as f64 / n as f64;
        assert!((rate - 0.02).abs() < 0.001, "burst loss rate {rate}");
        let mean_run = lost as f64 / runs.len() as f64;
        assert!(
            (mean_run - 1.0 / g.r).abs() < 0.05 * (1.0 / g.r),
            "mean burst {mean_run}, 1/r = {}",
            1.0 / g.r
        );
        // Bursty: far more back-to-back losses than independent 2 % loss would give.
        let pairs = v
            .windows(2)
            .filter(|w| w[0].1 == Verdict::Drop(DropCause::Burst) && w[1].1 == w[0].1)
            .count();
        assert!(
            pairs as f64 > 0.5 * lost as f64,
            "{pairs} back-to-back of {lost}"
        );
    }

    #[test]
    fn general_gilbert_elliott_average() {
        let g = GilbertElliott {
            p: 0.01,
            r: 0.1,
            loss_bad: 0.5,
            loss_good: 0.001,
        };
        let cfg = Impairment {
            gilbert: Some(g),
            ..Default::default()
        };
        let n = 2_000_000;
        let v = run(&cfg, 3, n, 10, 100);
        let lost = v
            .iter()
            .filter(|(_, v)| *v == Verdict::Drop(DropCause::Burst))
            .count();
        let rate = lost as f64 / n as f64;
        let want = g.average_loss();
        assert!((rate - want).abs() < 0.05 * want, "rate {rate} want {want}");
    }

    #[test]
    fn normal_jitter_has_its_mean_sigma_and_quantiles() {
        let cfg = Impairment {
            delay_us: 20_000,
            jitter: Jitter::Normal { sigma_us: 2000.0 },
            ..Default::default()
        };
        // One datagram a second: the order rule never binds, so the delays are the samples.
        let v = run(&cfg, 5, 200_000, 1_000_000, 1200);
        let mut d = delays(&v);
        let (m, sd) = mean_sd(&d);
        assert!((m - 20_000.0).abs() < 20.0, "mean {m}");
        assert!((sd - 2000.0).abs() < 40.0, "sd {sd}");
        d.sort_by(f64::total_cmp);
        for (q, z) in [
            (0.5, 0.0),
            (0.1587, -1.0),
            (0.8413, 1.0),
            (0.9772, 2.0),
            (0.01, -2.326),
        ] {
            let want = 20_000.0 + z * 2000.0;
            let got = quantile(&d, q);
            assert!((got - want).abs() < 60.0, "q{q}: {got} want {want}");
        }
    }

    #[test]
    fn pareto_jitter_follows_its_tail() {
        let (scale, shape) = (1000.0, 2.5);
        let cfg = Impairment {
            delay_us: 5000,
            jitter: Jitter::Pareto {
                scale_us: scale,
                shape,
            },
            ..Default::default()
        };
        let v = run(&cfg, 9, 400_000, 1_000_000, 1200);
        let mut j: Vec<f64> = delays(&v).iter().map(|d| d - 5000.0).collect();
        assert!(j.iter().all(|&x| x >= 0.0));
        let (m, _) = mean_sd(&j);
        let want_mean = scale / (shape - 1.0);
        assert!(
            (m - want_mean).abs() < 0.03 * want_mean,
            "mean {m} want {want_mean}"
        );
        j.sort_by(f64::total_cmp);
        for q in [0.25f64, 0.5, 0.75, 0.9, 0.99, 0.999] {
            let want = scale * ((1.0 - q).powf(-1.0 / shape) - 1.0);
            let got = quantile(&j, q);
            let tol = if q > 0.995 { 0.08 } else { 0.03 };
            assert!(
                (got - want).abs() <= tol * want + 2.0,
                "q{q}: {got} want {want}"
            );
        }
    }

    #[test]
    fn trace_is_replayed_in_order_and_loops() {
        let t = DelayTrace::parse("t", "# comment\n1.5\n\n250us  # in µs\n3ms\n").unwrap();
        assert_eq!(t.delays_us(), &[1500, 250, 3000]);
        let cfg = Impairment {
            delay_us: 100,
            jitter: Jitter::Trace(Arc::new(t)),
            preserve_order: false,
            ..Default::default()
        };
        let d = delays(&run(&cfg, 1, 7, 10_000, 100));
        assert_eq!(
            d,
            vec![1600.0, 350.0, 3100.0, 1600.0, 350.0, 3100.0, 1600.0]
        );
        let e = DelayTrace::parse("f.txt", "1ms\nfast\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.txt line 2") && e.contains("milliseconds"),
            "{e}"
        );
        assert!(DelayTrace::parse("empty", "# nothing\n").is_err());
        assert!(DelayTrace::parse("neg", "-3\n").is_err());
    }

    #[test]
    fn jitter_keeps_order_unless_asked_not_to() {
        let mut cfg = Impairment {
            delay_us: 5000,
            jitter: Jitter::Normal { sigma_us: 2000.0 },
            ..Default::default()
        };
        let ats = |cfg: &Impairment| -> Vec<Micros> {
            run(cfg, 2, 100_000, 100, 1200)
                .iter()
                .filter_map(|(_, v)| match v {
                    Verdict::Deliver { at, .. } => Some(*at),
                    _ => None,
                })
                .collect()
        };
        let kept = ats(&cfg);
        assert!(kept.windows(2).all(|w| w[0] <= w[1]), "in order by default");
        cfg.preserve_order = false;
        let free = ats(&cfg);
        let inversions = free.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(
            inversions > 10_000,
            "netem-like jitter reorders: {inversions}"
        );
    }

    #[test]
    fn token_bucket_gives_the_rate_and_bounds_the_queue() {
        let rate = 20_000_000;
        let limit = QueueLimit::Bytes(60_000);
        let cfg = Impairment {
            rate: Some(RateLimit {
                bits_per_s: rate,
                burst_bytes: 3000,
                queue: limit,
            }),
            ..Default::default()
        };
        // 1200-byte datagrams every 240 µs: 40 Mbit/s offered, twice the rate.
        let (n, gap, len) = (1_000_000usize, 240, 1200u64);
        let v = run(&cfg, 1, n, gap, len as usize);
        let departures: Vec<(Micros, Micros)> = v
            .iter()
            .filter_map(|&(t, v)| match v {
                Verdict::Deliver { at, .. } => Some((t, at)),
                _ => None,
            })
            .collect();
        let queued = v
            .iter()
            .filter(|(_, v)| *v == Verdict::Drop(DropCause::Queue))
            .count();
        assert!(
            (queued as f64 / n as f64 - 0.5).abs() < 0.01,
            "queue drops {queued}"
        );
        let first = departures[0].1;
        let last = departures[departures.len() - 1].1;
        // Bytes that left between the first and last departure, over that time.
        let bits = (departures.len() as u64 - 1) * len * 8;
        let measured = bits as f64 / ((last - first) as f64 / 1e6);
        assert!(
            (measured - rate as f64).abs() < 0.02 * rate as f64,
            "throughput {measured} vs {rate}"
        );
        // FIFO, and never more than the limit waiting at any arrival.
        assert!(departures.windows(2).all(|w| w[0].1 <= w[1].1));
        let mut waiting = VecDeque::new();
        let mut max_bytes = 0;
        for &(t, verdict) in &v {
            while waiting.front().is_some_and(|&dep| dep <= t) {
                waiting.pop_front();
            }
            if let Verdict::Deliver { at, .. } = verdict {
                if at > t {
                    waiting.push_back(at);
                }
            }
            max_bytes = max_bytes.max(waiting.len() as u64 * len);
        }
        assert!(max_bytes <= 60_000, "queue held {max_bytes} B");
        assert!(max_bytes > 50_000, "the queue filled up: {max_bytes} B");
    }

    #[test]
    fn token_bucket_burst_and_packet_limit() {
        let cfg = Impairment {
            rate: Some(RateLimit {
                bits_per_s: 8_000_000, // one byte per µs
                burst_bytes: 5000,
                queue: QueueLimit::Packets(3),
            }),
            ..Default::default()
        };
        let mut imp = Impairer::new(cfg, 1, 0);
        // A full bucket lets 5 × 1000 B out at once, then one per 1000 µs; 3 may wait.
        let at: Vec<Verdict> = (0..10).map(|_| imp.on_packet(100, 1000)).collect();
        let deliver = |t| Verdict::Deliver {
            at: t,
            duplicate_at: None,
        };
        assert_eq!(&at[..5], &[deliver(100); 5]);
        assert_eq!(&at[5..8], &[deliver(1100), deliver(2100), deliver(3100)]);
        assert_eq!(&at[8..], &[Verdict::Drop(DropCause::Queue); 2]);
        // A datagram larger than the bucket still goes, and the rate holds on average.
        assert_eq!(imp.on_packet(10_000, 9000), deliver(10_000));
        assert_eq!(imp.on_packet(10_000, 1000), deliver(14_000 + 1000));
    }

    #[test]
    fn rate_limit_comes_before_delay() {
        let cfg = Impairment {
            delay_us: 10_000,
            rate: Some(RateLimit {
                bits_per_s: 8_000_000,
                burst_bytes: 1000,
                queue: QueueLimit::Packets(100),
            }),
            ..Default::default()
        };
        let mut imp = Impairer::new(cfg, 1, 0);
        let ats: Vec<Verdict> = (0..3).map(|_| imp.on_packet(0, 1000)).collect();
        // Serialized 1000 µs apart, then each delayed 10 ms: 10, 11, 12 ms.
        let want: Vec<Verdict> = [10_000, 11_000, 12_000]
            .iter()
            .map(|&at| Verdict::Deliver {
                at,
                duplicate_at: None,
            })
            .collect();
        assert_eq!(ats, want);
    }

    #[test]
    fn reorder_and_duplicate_fractions() {
        let cfg = Impairment {
            delay_us: 1000,
            reorder: 0.05,
            reorder_delay_us: 2000,
            duplicate: 0.01,
            ..Default::default()
        };
        let n = 1_000_000;
        let v = run(&cfg, 4, n, 100, 1200);
        let mut reordered = 0;
        let mut dups = 0;
        for (i, &(t, verdict)) in v.iter().enumerate() {
            let Verdict::Deliver { at, duplicate_at } = verdict else {
                panic!("nothing is dropped here");
            };
            if at > t + 1000 {
                reordered += 1;
                assert_eq!(at, t + 3000);
                // The next datagram, unless held back too, overtakes it.
                if let Some(&(t_next, Verdict::Deliver { at: next, .. })) = v.get(i + 1) {
                    assert!(next < at || next == t_next + 3000);
                }
            }
            if let Some(d) = duplicate_at {
                dups += 1;
                assert_eq!(d, t + 1000);
            }
        }
        let r = reordered as f64 / n as f64;
        let d = dups as f64 / n as f64;
        assert!((r - 0.05).abs() < 0.0015, "reorder {r}");
        assert!((d - 0.01).abs() < 0.0005, "duplicate {d}");
    }

    #[test]
    fn same_seed_same_verdicts() {
        let cfg = Impairment {
            loss: 0.03,
            gilbert: Some(GilbertElliott::bursty(0.01, 4.0).unwrap()),
            delay_us: 3000,
            jitter: Jitter::Pareto {
                scale_us: 500.0,
                shape: 2.0,
            },
            rate: Some(RateLimit::new(10_000_000)),
            reorder: 0.01,
            duplicate: 0.01,
            outages: vec![Outage {
                start_us: 1_000_000,
                duration_us: 200_000,
            }],
            ..Default::default()
        };
        let a = run(&cfg, 42, 200_000, 50, 1000);
        let b = run(&cfg, 42, 200_000, 50, 1000);
        let c = run(&cfg, 43, 200_000, 50, 1000);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn an_outage_drops_exactly_its_window() {
        let outage = Outage {
            start_us: 10_000_000,
            duration_us: 5_000_000,
        };
        let base = Impairment {
            loss: 0.02,
            delay_us: 2000,
            jitter: Jitter::Normal { sigma_us: 500.0 },
            duplicate: 0.01,
            reorder: 0.01,
            ..Default::default()
        };
        let with = Impairment {
            outages: vec![outage],
            ..base.clone()
        };
        let start = 1_000_000_000; // the impairer's start, not the clock's zero
        let mut a = Impairer::new(base, 8, start);
        let mut b = Impairer::new(with, 8, start);
        let mut in_window = 0;
        for i in 0..30_000u64 {
            let since = i * 1000; // one a millisecond for 30 s
            let va = a.on_packet(start + since, 1200);
            let vb = b.on_packet(start + since, 1200);
            if (10_000_000..15_000_000).contains(&since) {
                assert_eq!(vb, Verdict::Drop(DropCause::Outage), "at {since}");
                in_window += 1;
            } else if since < 10_000_000 {
                assert_eq!(va, vb, "before the outage, at {since}");
            } else {
                // After it nothing is an outage drop and every loss is the same as without it;
                // once the jitter of the datagrams delivered just before the window end is past
                // (the order rule), every verdict is the same too.
                assert_ne!(vb, Verdict::Drop(DropCause::Outage), "at {since}");
                assert_eq!(
                    va == Verdict::Drop(DropCause::Loss),
                    vb == Verdict::Drop(DropCause::Loss),
                    "at {since}"
                );
                if since >= 15_100_000 {
                    assert_eq!(va, vb, "after the outage, at {since}");
                }
            }
        }
        assert_eq!(in_window, 5000);
        assert_eq!(b.stats().dropped_outage, 5000);
        // Exact boundaries: the first microsecond is in, the end is out.
        let cfg = Impairment {
            outages: vec![outage],
            ..Default::default()
        };
        let mut c = Impairer::new(cfg, 1, 0);
        assert!(matches!(c.on_packet(9_999_999, 1), Verdict::Deliver { .. }));
        assert_eq!(c.on_packet(10_000_000, 1), Verdict::Drop(DropCause::Outage));
        assert_eq!(c.on_packet(14_999_999, 1), Verdict::Drop(DropCause::Outage));
        assert!(matches!(
            c.on_packet(15_000_000, 1),
            Verdict::Deliver { .. }
        ));
    }

    #[test]
    fn errors_are_typed() {
        let bad = Impairment {
            duplicate: 2.0,
            ..Default::default()
        };
        assert_eq!(
            bad.validate().unwrap_err(),
            ImpairError::Probability {
                name: "duplicate",
                value: 2.0
            }
        );
        let o = Outage {
            start_us: 1000,
            duration_us: 0,
        };
        let bad = Impairment {
            outages: vec![o],
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err(), ImpairError::EmptyOutage(o));
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "outage 0@1ms lasts 0"
        );
        assert_eq!(
            GilbertElliott::bursty(1.0, 4.0).unwrap_err(),
            ImpairError::BurstAverageLoss(1.0)
        );
        assert_eq!(
            GilbertElliott::bursty(1.0, 4.0).unwrap_err().to_string(),
            "burst loss needs an average loss in [0, 100%), got 100%"
        );
        assert_eq!(
            GilbertElliott::bursty(0.02, 0.5).unwrap_err(),
            ImpairError::MeanBurst(0.5)
        );
        assert!(matches!(
            DelayTrace::parse("f.txt", "1ms\nfast\n").unwrap_err(),
            TraceError::Line { line: 2, .. }
        ));
        assert!(matches!(
            DelayTrace::parse("neg", "-3\n").unwrap_err(),
            TraceError::OutOfRange { line: 1, .. }
        ));
        assert!(matches!(
            DelayTrace::parse("empty", "# nothing\n").unwrap_err(),
            TraceError::Empty { .. }
        ));
        let e = DelayTrace::load(Path::new("/nonexistent/trace.txt")).unwrap_err();
        assert!(matches!(e, TraceError::Read { .. }), "{e}");
    }

    #[test]
    fn validation_and_description() {
        let bad = Impairment {
            loss: 1.5,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("loss"));
        let cfg = Impairment {
            loss: 0.02,
            delay_us: 5000,
            jitter: Jitter::Normal { sigma_us: 2000.0 },
            rate: Some(RateLimit::new(20_000_000)),
            outages: vec![Outage {
                start_us: 10_000_000,
                duration_us: 5_000_000,
            }],
            ..Default::default()
        };
        cfg.validate().unwrap();
        let d = cfg.describe();
        for part in [
            "loss 2%",
            "delay 5ms + normal σ 2ms",
            "rate 20mbit",
            "outage 5s@10s",
        ] {
            assert!(d.contains(part), "{d}");
        }
        assert!(GilbertElliott::bursty(1.0, 4.0).is_err());
        assert!(GilbertElliott::bursty(0.02, 0.5).is_err());
        assert_ne!(derive_seed(1, 0, 0), derive_seed(1, 0, 1));
        assert_ne!(derive_seed(1, 0, 1), derive_seed(1, 1, 0));
    }
}
