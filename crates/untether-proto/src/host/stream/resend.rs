//! Retransmission: the last frames' data shards, kept once for every client, and what each
//! client may have resent.
//!
//! A ShardNack (SliceNack) names shards by index; it is a few bytes per shard and each shard
//! resent is a full datagram, so an unbounded answer is an amplifier (a viewer flooding NACKs
//! once drew 570× its bytes back, starving the controller's link). So the answer is bounded
//! three ways:
//!
//! - the indices a NACK names are **deduplicated** (one shard named 256 times is one shard);
//! - each shard is resent to one client at most [`MAX_RESENDS_PER_SHARD`] times per frame
//!   (slice): an honest client NACKs a frame at most twice, an RTT apart, the second time
//!   because a retransmission was itself lost;
//! - each client has a **resend byte budget**, a token bucket refilled at
//!   [`RESEND_SHARE_DIV`]⁻¹ of the stream's bitrate with a burst of about one frame (the largest
//!   frame kept, at least [`MIN_BURST_DATAGRAMS`] datagrams): honest recovery of a lost frame
//!   fits in the burst, a flooder gets at most the refill rate.
//!
//! What was refused is counted ([`ResendStats`]).

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use super::super::ClientId;
use crate::crypto::TAG_LEN;
use crate::wire::{self, ShardHeader, HEADER_LEN, SHARD_HEADER_LEN};
use crate::Micros;

/// Frames kept for retransmission (about 130 ms at 60 fps) …
const RESEND_FRAMES: usize = 8;
/// … and at most this many bytes of them.
const RESEND_BYTES: usize = 4 << 20;
/// A shard is resent to one client at most this often per frame (slice).
pub const MAX_RESENDS_PER_SHARD: u8 = 2;
/// A client's resend budget refills at 1/this of the stream's bitrate.
pub const RESEND_SHARE_DIV: u64 = 4;
/// The budget's burst is at least this many full datagrams.
pub const MIN_BURST_DATAGRAMS: u64 = 16;

/// Counters of what the resend store refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResendStats {
    /// Indices named twice (or more) in one NACK, or beyond the frame's data shards.
    pub duplicates: u64,
    /// Shards already resent [`MAX_RESENDS_PER_SHARD`] times to that client.
    pub over_shard_limit: u64,
    /// Shards refused because the client's resend byte budget was spent.
    pub over_budget: u64,
}

/// A frame (or one slice of a frame sent in slices) kept for retransmission.
pub(in crate::host) struct SentFrame {
    frame_number: u32,
    slice_index: u8,
    keyframe: bool,
    data: Arc<Vec<u8>>,
    /// Each data shard's header and byte range in `data`.
    shards: Vec<(ShardHeader, Range<usize>)>,
    /// Per client: how often each data shard was resent to it.
    resent: HashMap<ClientId, Vec<u8>>,
}

impl SentFrame {
    pub(in crate::host) fn new(
        frame_number: u32,
        slice_index: u8,
        keyframe: bool,
        data: Arc<Vec<u8>>,
        shards: Vec<(ShardHeader, Range<usize>)>,
    ) -> SentFrame {
        SentFrame {
            frame_number,
            slice_index,
            keyframe,
            data,
            shards,
            resent: HashMap::new(),
        }
    }
}

/// The shards to resend to one client, as the store allowed them.
pub(in crate::host) struct Resend {
    pub keyframe: bool,
    pub data: Arc<Vec<u8>>,
    pub shards: Vec<(ShardHeader, Range<usize>)>,
}

/// One client's resend budget (bytes).
#[derive(Clone, Copy, Debug)]
struct Budget {
    tokens: f64,
    last_us: Micros,
}

/// The kept frames and every client's resend budget.
pub(in crate::host) struct ResendStore {
    frames: VecDeque<SentFrame>,
    budgets: HashMap<ClientId, Budget>,
    stats: ResendStats,
}

impl ResendStore {
    pub(in crate::host) fn new() -> ResendStore {
        ResendStore {
            frames: VecDeque::new(),
            budgets: HashMap::new(),
            stats: ResendStats::default(),
        }
    }

    pub(in crate::host) fn stats(&self) -> ResendStats {
        self.stats
    }

    /// Keeps a frame (slice) just sent; the oldest go beyond [`RESEND_FRAMES`] frames (of
    /// `slice_count` slices each) or [`RESEND_BYTES`].
    pub(in crate::host) fn keep(&mut self, frame: SentFrame, slice_count: u8) {
        self.frames.push_back(frame);
        let kept_entries = RESEND_FRAMES * slice_count.max(1) as usize;
        while self.frames.len() > kept_entries
            || (self.frames.len() > 1
                && self.frames.iter().map(|f| f.data.len()).sum::<usize>() > RESEND_BYTES)
        {
            self.frames.pop_front();
        }
    }

    /// A client left: its budget and counts go.
    pub(in crate::host) fn forget(&mut self, client: ClientId) {
        self.budgets.remove(&client);
        for f in &mut self.frames {
            f.resent.remove(&client);
        }
    }

    /// The budget's refill (bytes per second) and burst (bytes) for a stream of `kbps` sent in
    /// datagrams of at most `max_datagram` bytes at `fps`.
    fn budget_shape(&self, kbps: u32, fps: u32, max_datagram: u64) -> (f64, f64) {
        let bytes_per_s = kbps as f64 * 1000.0 / 8.0;
        let rate = bytes_per_s / RESEND_SHARE_DIV as f64;
        let frame = bytes_per_s / fps.max(1) as f64;
        let largest = self.frames.iter().map(|f| f.data.len()).max().unwrap_or(0) as f64;
        let floor = (MIN_BURST_DATAGRAMS * max_datagram) as f64;
        (rate, frame.max(largest).max(floor))
    }

    /// A client's NACK of `missing` data shards of a kept frame (slice): the shards it may
    /// have resent now (deduplicated, within the per-shard limit and its byte budget), or
    /// None if the frame is no longer kept. `kbps`, `fps` and `max_datagram` are the
    /// stream's.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::host) fn on_nack(
        &mut self,
        now: Micros,
        client: ClientId,
        frame_number: u32,
        slice_index: u8,
        missing: &[u16],
        (kbps, fps, max_datagram): (u32, u32, u64),
    ) -> Option<Resend> {
        let (rate, burst) = self.budget_shape(kbps, fps, max_datagram);
        let f = self
            .frames
            .iter_mut()
            .find(|f| f.frame_number == frame_number && f.slice_index == slice_index)?;
        let budget = self.budgets.entry(client).or_insert(Budget {
            tokens: burst,
            last_us: now,
        });
        let dt = now.saturating_sub(budget.last_us) as f64 / 1e6;
        budget.last_us = budget.last_us.max(now);
        budget.tokens = (budget.tokens + dt * rate).min(burst);
        let counts = f
            .resent
            .entry(client)
            .or_insert_with(|| vec![0; f.shards.len()]);
        let mut seen = vec![false; f.shards.len()];
        let mut out = Vec::new();
        for &k in missing.iter().take(wire::MAX_NACK_SHARDS) {
            let k = k as usize;
            let (Some(s), Some(&(sh, ref range))) = (seen.get_mut(k), f.shards.get(k)) else {
                self.stats.duplicates += 1;
                continue;
            };
            if std::mem::replace(s, true) {
                self.stats.duplicates += 1;
                continue;
            }
            if counts[k] >= MAX_RESENDS_PER_SHARD {
                self.stats.over_shard_limit += 1;
                continue;
            }
            let cost = (HEADER_LEN + SHARD_HEADER_LEN + range.len() + TAG_LEN) as f64;
            if budget.tokens < cost {
                self.stats.over_budget += 1;
                continue;
            }
            budget.tokens -= cost;
            counts[k] += 1;
            out.push((sh, range.clone()));
        }
        Some(Resend {
            keyframe: f.keyframe,
            data: f.data.clone(),
            shards: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembler::{shard_slice_fec, SliceId};

    const STREAM: (u32, u32, u64) = (8_000, 60, 1200);

    fn store_with(frames: u32, len: usize) -> ResendStore {
        let mut s = ResendStore::new();
        for n in 0..frames {
            let data = Arc::new(vec![n as u8; len]);
            let shards: Vec<_> =
                shard_slice_fec(SliceId::WHOLE, n, 0, false, len, 1000, |_| 0).collect();
            s.keep(SentFrame::new(n, 0, false, data, shards), 1);
        }
        s
    }

    #[test]
    fn duplicates_are_resent_once_and_each_shard_at_most_twice() {
        let mut s = store_with(1, 5000);
        let c = ClientId(1);
        let r = s.on_nack(0, c, 0, 0, &[1; 256], STREAM).expect("kept");
        assert_eq!(r.shards.len(), 1);
        assert_eq!(s.stats().duplicates, 255);
        assert_eq!(
            s.on_nack(0, c, 0, 0, &[1, 2], STREAM)
                .map(|r| r.shards.len()),
            Some(2)
        );
        // Shard 1 was resent twice: no more to this client; another client is not affected.
        assert_eq!(
            s.on_nack(0, c, 0, 0, &[1], STREAM).map(|r| r.shards.len()),
            Some(0)
        );
        assert_eq!(s.stats().over_shard_limit, 1);
        let r = s.on_nack(0, ClientId(2), 0, 0, &[1], STREAM).expect("kept");
        assert_eq!(r.shards.len(), 1);
        // Indices past the frame's data shards are dropped; unknown frames are too late.
        assert_eq!(
            s.on_nack(0, c, 0, 0, &[999], STREAM)
                .map(|r| r.shards.len()),
            Some(0)
        );
        assert!(s.on_nack(0, c, 7, 0, &[0], STREAM).is_none());
    }

    #[test]
    fn the_byte_budget_bounds_a_flood_and_refills_at_a_share_of_the_stream() {
        // 8 frames of 40 shards each: a client asking for all of them, every frame, twice.
        let mut s = store_with(8, 40_000);
        let c = ClientId(1);
        let all: Vec<u16> = (0..40).collect();
        let mut bytes = 0u64;
        for round in 0..2 {
            for f in 0..8 {
                let r = s
                    .on_nack(round * 1000, c, f, 0, &all, STREAM)
                    .expect("kept");
                bytes += r
                    .shards
                    .iter()
                    .map(|(_, r)| (HEADER_LEN + SHARD_HEADER_LEN + r.len() + TAG_LEN) as u64)
                    .sum::<u64>();
            }
        }
        // The burst (the largest frame kept, 40 kB) and 1 ms of refill, not 640 kB.
        let (rate, burst) = s.budget_shape(STREAM.0, STREAM.1, STREAM.2);
        assert!(bytes as f64 <= burst + rate * 0.001 + 1.0, "{bytes}");
        assert!(s.stats().over_budget > 0);
        // A second later, the refill (a quarter of 8 Mbit/s) is there again.
        let r = s.on_nack(1_001_000, c, 0, 0, &[39], STREAM).expect("kept");
        assert_eq!(r.shards.len(), 1);
        s.forget(c);
        assert!(s.budgets.is_empty());
    }
}
