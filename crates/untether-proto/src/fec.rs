//! Forward error correction of video frames: Reed–Solomon parity over a frame's shards.
//!
//! A frame of `k` data shards gets `m` parity shards (`reed-solomon-simd`, a systematic code over
//! GF(2^16)): the client rebuilds the frame from **any** `k` of the `k + m` shards. The code runs
//! over the data shards' payloads, each padded with zeros to `shard_len` (only the last data
//! shard is shorter; `frame_bytes` in every shard header tells the client where the frame ends,
//! so the padding never reaches the decoder). Parity shards are `shard_len` bytes, which must be
//! even (the library works on 16-bit symbols).
//!
//! How many parity shards: [`FecPolicy`]. Its adaptive mode picks the smallest `m` for which
//! `P(more than m of the k + m shards are lost) ≤ 0.25 %` under independent loss at the rate the
//! client reports ([`LossEstimator`], fed by the cumulative `datagrams_received` /
//! `packets_lost` of the client's Feedback), clamped to a percentage range.
//!
//! See docs/PROTOCOL.md, "Forward error correction".

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::wire::Feedback;

/// The most data shards of a frame that gets parity (the Reed–Solomon library takes any
/// combination of up to 32768 original and 32768 recovery shards). Larger frames are sent
/// without parity.
pub const MAX_FEC_DATA_SHARDS: usize = 32_768;

/// The residual frame loss the adaptive mode aims at (per frame, under independent loss).
///
/// A frame that cannot be rebuilt costs more than itself: every frame after it is skipped until
/// the keyframe asked for arrives (a round trip plus a frame interval or more, 2–4 frames at
/// 60 fps). To show ≥ 99 % of frames, each frame may be lost with ≈ 0.25 % at most; at 10 %
/// loss this costs ~3 points of extra parity over a 1 % target.
pub const TARGET_FRAME_LOSS: f64 = 0.0025;

/// How the host chooses the number of parity shards of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FecMode {
    /// No parity.
    Off,
    /// `ceil(percent · k / 100)` parity shards per frame of `k` data shards (at least 1),
    /// `percent` in 1..=100.
    Fixed(u8),
    /// From the loss rate the client reports: the fewest parity shards for which a frame is lost
    /// with probability ≤ [`TARGET_FRAME_LOSS`], clamped to `[min_percent, max_percent]` of `k`
    /// (at least 1 shard). Keyframes use half of `min_percent` as their floor.
    Adaptive { min_percent: u8, max_percent: u8 },
}

/// The host's FEC policy (see [`FecMode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecPolicy {
    pub mode: FecMode,
}

impl Default for FecPolicy {
    /// Adaptive, 5 % to 50 %: 5 % costs little and covers the odd loss on a clean link before
    /// the first report; 50 % still recovers a frame through ~25 % loss. Beyond that, bursts
    /// rather than parity are the problem, and keyframe requests take over.
    fn default() -> Self {
        FecPolicy {
            mode: FecMode::Adaptive {
                min_percent: 5,
                max_percent: 50,
            },
        }
    }
}

impl FecPolicy {
    pub const OFF: FecPolicy = FecPolicy { mode: FecMode::Off };

    pub fn fixed(percent: u8) -> FecPolicy {
        FecPolicy {
            mode: FecMode::Fixed(percent.clamp(1, 100)),
        }
    }

    pub fn is_off(&self) -> bool {
        self.mode == FecMode::Off
    }

    /// Parity shards for a frame of `data_count` shards, given the loss rate `loss` (0..1) the
    /// client reported (`None`: no report yet, so the adaptive mode sends its maximum: the
    /// session's first keyframe is the frame whose loss costs most). Always `≤ data_count` (the
    /// wire's limit), 0 when the frame is too large for the code.
    pub fn parity_count(&self, data_count: usize, keyframe: bool, loss: Option<f64>) -> usize {
        if data_count == 0 || data_count > MAX_FEC_DATA_SHARDS {
            return 0;
        }
        let pct = |p: u8| (data_count * p.min(100) as usize).div_ceil(100).max(1);
        let m = match self.mode {
            FecMode::Off => 0,
            FecMode::Fixed(p) => pct(p.max(1)),
            FecMode::Adaptive {
                min_percent,
                max_percent,
            } => {
                let lo = if keyframe {
                    (data_count * min_percent.min(100) as usize)
                        .div_ceil(200)
                        .max(1)
                } else {
                    pct(min_percent)
                };
                let hi = pct(max_percent).max(lo);
                match loss {
                    Some(loss) => parity_for_target(data_count, loss, TARGET_FRAME_LOSS, lo, hi),
                    None => hi,
                }
            }
        };
        m.min(data_count)
    }
}

impl fmt::Display for FecPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            FecMode::Off => write!(f, "off"),
            FecMode::Fixed(p) => write!(f, "{p}%"),
            FecMode::Adaptive {
                min_percent,
                max_percent,
            } => write!(f, "adaptive({min_percent}%..{max_percent}%)"),
        }
    }
}

/// Why an FEC policy string did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("FEC policy {0:?}: expected \"off\", \"adaptive\" or a percentage such as \"20%\" (1–100)")]
pub struct FecPolicyError(pub String);

impl FromStr for FecPolicy {
    type Err = FecPolicyError;

    /// `"off"`, `"adaptive"` (the default range) or `"<percent>%"` (fixed, 1–100).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "none" | "0%" => Ok(FecPolicy::OFF),
            "adaptive" | "auto" => Ok(FecPolicy::default()),
            _ => {
                let n = t
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse::<u8>().ok())
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| FecPolicyError(s.to_string()))?;
                Ok(FecPolicy::fixed(n))
            }
        }
    }
}

/// `P(X > m)` for `X ~ Binomial(n, p)`.
pub fn binomial_tail(n: usize, p: f64, m: usize) -> f64 {
    if m >= n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    // ln of the pmf at i = m + 1, then the terms upward (they shrink once past the mean; stop
    // when they no longer matter).
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let i0 = m + 1;
    let mut ln_c = 0.0;
    for j in 1..=i0 {
        ln_c += ((n - i0 + j) as f64).ln() - (j as f64).ln();
    }
    let mut term = (ln_c + i0 as f64 * lp + (n - i0) as f64 * lq).exp();
    let mut sum = 0.0;
    let ratio = p / (1.0 - p);
    for i in i0..=n {
        sum += term;
        if i == n {
            break;
        }
        term *= (n - i) as f64 / (i + 1) as f64 * ratio;
        if term < sum * 1e-12 && (i as f64) > n as f64 * p {
            break;
        }
    }
    sum.min(1.0)
}

/// The fewest parity shards `m` in `[lo, hi]` with `P(Binomial(k + m, loss) > m) ≤ target`
/// (`hi` if none is enough).
pub fn parity_for_target(k: usize, loss: f64, target: f64, lo: usize, hi: usize) -> usize {
    if loss.is_nan() || loss <= 0.0 {
        return lo;
    }
    let loss = loss.min(0.9);
    let ok = |m: usize| binomial_tail(k + m, loss, m) <= target;
    if ok(lo) {
        return lo;
    }
    if !ok(hi) {
        return hi;
    }
    // The tail falls as m grows (for loss < 1/2 over this range): bisect.
    let (mut bad, mut good) = (lo, hi);
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

/// The host's estimate of the downstream loss rate, from the client's cumulative Feedback
/// counters (`datagrams_received`, `packets_lost`; a lost Feedback loses nothing).
///
/// The estimate is the larger of the loss over the last ~2 s (20 reports) and over the last
/// ~300 ms (3 reports): it rises within a report or two when the link degrades and falls back
/// slowly, so parity is not cut at the first quiet moment.
#[derive(Clone, Debug, Default)]
pub struct LossEstimator {
    /// The counters of the last report (they start at 0 with the session).
    last: (u32, u32),
    /// (received, lost) per report, newest last.
    samples: VecDeque<(u64, u64)>,
}

impl LossEstimator {
    const LONG: usize = 20;
    const SHORT: usize = 3;
    /// Fewer packets than this in the short window: it does not count (too noisy).
    const MIN_SHORT_PACKETS: u64 = 30;

    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one Feedback.
    pub fn on_feedback(&mut self, fb: &Feedback) {
        let now = (fb.datagrams_received, fb.packets_lost);
        let (r0, l0) = self.last;
        // Counters only grow within a session; a drop (reordered feedback, a gap that got
        // filled) just contributes nothing.
        let dr = now.0.saturating_sub(r0) as u64;
        let dl = now.1.saturating_sub(l0) as u64;
        if dr + dl > 0 {
            self.samples.push_back((dr, dl));
            while self.samples.len() > Self::LONG {
                self.samples.pop_front();
            }
        }
        self.last = (now.0.max(r0), now.1);
    }

    fn ratio<'a>(it: impl Iterator<Item = &'a (u64, u64)>) -> (f64, u64) {
        let (r, l) = it.fold((0u64, 0u64), |(r, l), s| (r + s.0, l + s.1));
        if r + l == 0 {
            (0.0, 0)
        } else {
            (l as f64 / (r + l) as f64, r + l)
        }
    }

    /// The estimated loss rate, 0..1; `None` before the first report that counted packets.
    pub fn loss(&self) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        let (long, _) = Self::ratio(self.samples.iter());
        let (short, n) = Self::ratio(self.samples.iter().rev().take(Self::SHORT));
        Some(if n >= Self::MIN_SHORT_PACKETS {
            long.max(short)
        } else {
            long
        })
    }
}

/// Why parity could not be computed or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FecError {
    #[error("unsupported FEC shape: {data} data, {parity} parity shards of {shard_len} bytes")]
    Shape {
        data: usize,
        parity: usize,
        shard_len: usize,
    },
    #[error("Reed-Solomon: {0}")]
    Codec(String),
}

fn shape_ok(k: usize, m: usize, shard_len: usize) -> bool {
    k >= 1
        && m >= 1
        && shard_len >= 2
        && shard_len.is_multiple_of(2)
        && ReedSolomonEncoder::supports(k, m)
}

/// Computes parity shards (reusing its working space from frame to frame).
#[derive(Default)]
pub struct FecEncoder {
    rs: Option<ReedSolomonEncoder>,
    pad: Vec<u8>,
}

impl FecEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The `m` parity shards of `frame`, cut into data shards of `shard_len` bytes (the last one
    /// zero-padded); calls `out(i, shard)` for parity shard `i` in `0..m`.
    pub fn encode(
        &mut self,
        frame: &[u8],
        shard_len: usize,
        m: usize,
        mut out: impl FnMut(usize, &[u8]),
    ) -> Result<(), FecError> {
        let k = frame.len().div_ceil(shard_len.max(1));
        if !shape_ok(k, m, shard_len) {
            return Err(FecError::Shape {
                data: k,
                parity: m,
                shard_len,
            });
        }
        let codec = |e: reed_solomon_simd::Error| FecError::Codec(e.to_string());
        let rs = match &mut self.rs {
            Some(rs) => {
                rs.reset(k, m, shard_len).map_err(codec)?;
                rs
            }
            None => self
                .rs
                .insert(ReedSolomonEncoder::new(k, m, shard_len).map_err(codec)?),
        };
        for chunk in frame.chunks(shard_len) {
            if chunk.len() == shard_len {
                rs.add_original_shard(chunk).map_err(codec)?;
            } else {
                self.pad.clear();
                self.pad.extend_from_slice(chunk);
                self.pad.resize(shard_len, 0);
                rs.add_original_shard(&self.pad).map_err(codec)?;
            }
        }
        let result = rs.encode().map_err(codec)?;
        for (i, shard) in result.recovery_iter().enumerate() {
            out(i, shard);
        }
        Ok(())
    }
}

/// Rebuilds missing data shards (reusing its working space from frame to frame).
#[derive(Default)]
pub struct FecDecoder {
    rs: Option<ReedSolomonDecoder>,
    pad: Vec<u8>,
}

impl FecDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Restores the missing data shards of `frame` (`frame.len()` is the frame's exact length,
    /// cut into `shard_len`-byte data shards; `have[i]` says whether data shard `i` is already
    /// in place) from the parity shards `parity` (`(index in 0..m, shard_len bytes)`). Needs
    /// at least `k` shards in all. Returns how many data shards it restored.
    pub fn reconstruct<'a>(
        &mut self,
        frame: &mut [u8],
        shard_len: usize,
        have: &[bool],
        m: usize,
        parity: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<usize, FecError> {
        let k = have.len();
        if !shape_ok(k, m, shard_len) || frame.len().div_ceil(shard_len) != k {
            return Err(FecError::Shape {
                data: k,
                parity: m,
                shard_len,
            });
        }
        let codec = |e: reed_solomon_simd::Error| FecError::Codec(e.to_string());
        let rs = match &mut self.rs {
            Some(rs) => {
                rs.reset(k, m, shard_len).map_err(codec)?;
                rs
            }
            None => self
                .rs
                .insert(ReedSolomonDecoder::new(k, m, shard_len).map_err(codec)?),
        };
        for (i, chunk) in frame.chunks(shard_len).enumerate() {
            if !have[i] {
                continue;
            }
            if chunk.len() == shard_len {
                rs.add_original_shard(i, chunk).map_err(codec)?;
            } else {
                self.pad.clear();
                self.pad.extend_from_slice(chunk);
                self.pad.resize(shard_len, 0);
                rs.add_original_shard(i, &self.pad).map_err(codec)?;
            }
        }
        for (i, shard) in parity {
            rs.add_recovery_shard(i, shard).map_err(codec)?;
        }
        let result = rs.decode().map_err(codec)?;
        let mut restored = 0;
        for (i, shard) in result.restored_original_iter() {
            let start = i * shard_len;
            let Some(dst) = frame.get_mut(start..(start + shard_len).min(frame.len())) else {
                continue;
            };
            let n = dst.len();
            dst.copy_from_slice(&shard[..n]);
            restored += 1;
        }
        Ok(restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_tail_matches_direct_sums() {
        // n = 10, p = 0.1: P(X > 2) = 1 − Σ_{i≤2} C(10,i) 0.1^i 0.9^(10−i) = 0.0701908…
        assert!((binomial_tail(10, 0.1, 2) - 0.070_190_8).abs() < 1e-6);
        assert_eq!(binomial_tail(10, 0.1, 10), 0.0);
        assert_eq!(binomial_tail(10, 0.0, 0), 0.0);
        // Large n stays finite and sane: mean 1000, sd ≈ 30.
        let t = binomial_tail(10_000, 0.1, 1100);
        assert!(t > 0.0 && t < 1e-3, "{t}");
        assert!(binomial_tail(10_000, 0.1, 900) > 0.99);
    }

    #[test]
    fn adaptive_parity_follows_the_loss_rate() {
        let p = FecPolicy::default();
        // No report yet: the maximum.
        assert_eq!(p.parity_count(34, false, None), 17);
        // No loss: the floor (5 % of 34 → 2; keyframes half of that, 1 shard minimum).
        assert_eq!(p.parity_count(34, false, Some(0.0)), 2);
        assert_eq!(p.parity_count(220, true, Some(0.0)), 6);
        assert_eq!(p.parity_count(1, false, Some(0.0)), 1);
        // 10 % loss: P(frame lost) ≤ the target.
        let m = p.parity_count(34, false, Some(0.10));
        assert!(binomial_tail(34 + m, 0.10, m) <= TARGET_FRAME_LOSS);
        assert!(binomial_tail(34 + m - 1, 0.10, m - 1) > TARGET_FRAME_LOSS);
        assert!((8..=12).contains(&m), "{m}");
        // A keyframe needs a smaller share.
        let mk = p.parity_count(220, true, Some(0.10));
        assert!((mk as f64 / 220.0) < (m as f64 / 34.0), "{mk}");
        // Clamped at 50 %.
        assert_eq!(p.parity_count(34, false, Some(0.6)), 17);
        assert_eq!(FecPolicy::fixed(20).parity_count(34, false, Some(0.5)), 7);
        assert_eq!(FecPolicy::OFF.parity_count(34, false, Some(0.5)), 0);
        // Never above k, never for frames too large for the code.
        assert_eq!(FecPolicy::fixed(100).parity_count(3, false, Some(0.0)), 3);
        assert_eq!(
            FecPolicy::fixed(20).parity_count(40_000, false, Some(0.0)),
            0
        );
    }

    #[test]
    fn policy_strings() {
        assert_eq!("off".parse::<FecPolicy>(), Ok(FecPolicy::OFF));
        assert_eq!("adaptive".parse::<FecPolicy>(), Ok(FecPolicy::default()));
        assert_eq!("20%".parse::<FecPolicy>(), Ok(FecPolicy::fixed(20)));
        assert_eq!(" 7 % ".parse::<FecPolicy>(), Ok(FecPolicy::fixed(7)));
        for bad in ["", "0.5", "101%", "-1%", "x%", "20"] {
            assert!(bad.parse::<FecPolicy>().is_err(), "{bad}");
        }
        assert_eq!(FecPolicy::fixed(20).to_string(), "20%");
    }

    #[test]
    fn loss_estimator_from_cumulative_feedback() {
        let mut e = LossEstimator::new();
        let fb = |r: u32, l: u32| Feedback {
            datagrams_received: r,
            packets_lost: l,
            ..Default::default()
        };
        assert_eq!(e.loss(), None);
        e.on_feedback(&fb(0, 0));
        assert_eq!(e.loss(), None);
        let (mut r, mut l) = (0, 0);
        for _ in 0..20 {
            r += 90;
            l += 10;
            e.on_feedback(&fb(r, l));
        }
        assert!((e.loss().unwrap() - 0.10).abs() < 1e-9);
        // A sudden rise shows at once (short window) …
        r += 50;
        l += 50;
        e.on_feedback(&fb(r, l));
        assert!(e.loss().unwrap() > 0.2);
        // … and decays only as the long window forgets it.
        for _ in 0..3 {
            r += 100;
            e.on_feedback(&fb(r, l));
        }
        let l = e.loss().unwrap();
        assert!(l > 0.05 && l < 0.2, "{l}");
        // Counters going backwards (a reordered report) do not panic or go negative.
        e.on_feedback(&fb(0, 0));
        assert!(e.loss().unwrap() >= 0.0);
    }

    #[test]
    fn any_k_of_k_plus_m_rebuild_the_frame_bit_exactly() {
        let shard_len = 100;
        let frame: Vec<u8> = (0..950u32).map(|i| (i * 7 + 3) as u8).collect();
        let k = 10;
        let m = 4;
        let mut parity = vec![Vec::new(); m];
        let mut enc = FecEncoder::new();
        enc.encode(&frame, shard_len, m, |i, s| parity[i] = s.to_vec())
            .unwrap();
        assert!(parity.iter().all(|p| p.len() == shard_len));
        let mut dec = FecDecoder::new();
        // Every way of losing up to m shards among the first data and parity ones.
        for lost_mask in 0u32..(1 << (k + m)) {
            if lost_mask.count_ones() as usize > m {
                continue;
            }
            let have: Vec<bool> = (0..k).map(|i| lost_mask & (1 << i) == 0).collect();
            if have.iter().all(|&h| h) {
                continue;
            }
            let mut got = frame.clone();
            for (i, h) in have.iter().enumerate() {
                if !h {
                    let s = i * shard_len;
                    let e = (s + shard_len).min(got.len());
                    got[s..e].fill(0xEE);
                }
            }
            let par = (0..m)
                .filter(|j| lost_mask & (1 << (k + j)) == 0)
                .map(|j| (j, &parity[j][..]));
            let n = dec.reconstruct(&mut got, shard_len, &have, m, par).unwrap();
            assert_eq!(n, have.iter().filter(|h| !**h).count());
            assert_eq!(got, frame, "mask {lost_mask:b}");
        }
        // Too few shards, odd sizes: errors, not panics.
        let mut got = frame.clone();
        let have = vec![false; k];
        assert!(dec
            .reconstruct(&mut got, shard_len, &have, m, std::iter::empty())
            .is_err());
        assert!(enc.encode(&frame, 101, m, |_, _| {}).is_err());
        let short = [0u8; 10];
        assert!(dec
            .reconstruct(
                &mut got,
                shard_len,
                &[true; 9].iter().copied().chain([false]).collect::<Vec<_>>(),
                m,
                [(0usize, &short[..])].into_iter()
            )
            .is_err());
    }
}
