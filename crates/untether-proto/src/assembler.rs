//! Video frames ↔ shards: the host's packetizer and the client's frame assembler.
//!
//! The assembler hands frames to the decoder **in order and only when decodable**: a frame is
//! delivered when all its data shards arrived and every earlier frame was delivered; once a frame
//! is lost (its deadline passed, or a newer frame completed while it was still missing shards),
//! nothing but a keyframe is delivered until one arrives, so the decoder never sees a frame whose
//! reference is missing and the client never shows a corrupted picture.
//!
//! **Intra refresh** (a session with a refresh period N, [`AssemblerConfig::refresh_period`]):
//! the stream also recovers without a keyframe, by a sweep of intra blocks over N frames whose
//! first frame is flagged ([`ShardHeader::refresh_start`]). After a loss (or when joining), the
//! next sweep start is delivered like a keyframe, and it and the N − 2 frames after it are
//! delivered **held** ([`CompleteFrame::hold`]): the decoder must decode them, the client must
//! not show them, because until the sweep has covered the picture part of it is still wrong.
//! The sweep's last frame is the first clean picture.
//!
//! Forward error correction ([`crate::fec`]): a frame may carry `parity_count` Reed–Solomon
//! parity shards after its data shards. As soon as any `data_count` of its shards are present,
//! the missing data shards are rebuilt and the frame is complete; shards of it that arrive later
//! are counted (`shards_unneeded`) and ignored.

use std::collections::BTreeMap;

use crate::fec::FecDecoder;
use crate::wire::{shard_flags, ShardHeader, MAX_FRAME_BYTES};
use crate::Micros;

/// Cuts a frame into shards of at most `max_payload` bytes each: the header of every shard and
/// the byte range of the frame it carries.
pub fn shard_frame(
    frame_number: u32,
    capture_us: Micros,
    keyframe: bool,
    frame_bytes: usize,
    max_payload: usize,
) -> impl Iterator<Item = (ShardHeader, std::ops::Range<usize>)> {
    shard_frame_fec(
        frame_number,
        capture_us,
        keyframe,
        frame_bytes,
        max_payload,
        |_| 0,
    )
}

/// Like [`shard_frame`], with `parity(data_count)` parity shards announced in every header
/// (the data shards only: the host computes and sends the parity shards after them, headers
/// from [`parity_header`]).
pub fn shard_frame_fec(
    frame_number: u32,
    capture_us: Micros,
    keyframe: bool,
    frame_bytes: usize,
    max_payload: usize,
    parity: impl FnOnce(usize) -> usize,
) -> impl Iterator<Item = (ShardHeader, std::ops::Range<usize>)> {
    let shard_len = max_payload.clamp(1, u16::MAX as usize);
    let data_count = frame_bytes.div_ceil(shard_len).max(1);
    let parity_count = parity(data_count).min(u16::MAX as usize - data_count) as u16;
    (0..data_count).map(move |i| {
        let start = i * shard_len;
        let end = (start + shard_len).min(frame_bytes);
        (
            ShardHeader {
                frame_number,
                flags: if keyframe { shard_flags::KEYFRAME } else { 0 },
                slice_index: 0,
                shard_index: i as u16,
                data_count: data_count as u16,
                parity_count,
                shard_len: shard_len as u16,
                frame_bytes: frame_bytes as u32,
                capture_us,
            },
            start..end,
        )
    })
}

/// The header of parity shard `i` (in `0..parity_count`) of the frame of data shard header `h`.
pub fn parity_header(h: &ShardHeader, i: u16) -> ShardHeader {
    ShardHeader {
        flags: h.flags | shard_flags::PARITY,
        shard_index: h.data_count + i,
        ..*h
    }
}

/// The largest number of data shards a frame may have (the wire's u16).
pub fn max_frame_bytes(max_payload: usize) -> usize {
    (max_payload * u16::MAX as usize).min(MAX_FRAME_BYTES as usize)
}

/// A frame whose shards all arrived, ready for the decoder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompleteFrame {
    pub frame_number: u32,
    pub keyframe: bool,
    /// An intra-refresh sweep starts with this frame.
    pub refresh_start: bool,
    /// Decode it but do not show it: an intra-refresh sweep since a loss or a join is still
    /// under way, so the picture is not yet clean.
    pub hold: bool,
    /// Host clock.
    pub capture_us: Micros,
    /// Client clock: first and last shard received.
    pub first_shard_us: Micros,
    pub last_shard_us: Micros,
    /// Datagrams that made up the frame.
    pub shards: u16,
    pub data: Vec<u8>,
}

/// Why a frame will never reach the decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossCause {
    /// Still incomplete when its deadline passed.
    Deadline,
    /// Still incomplete when a newer frame completed.
    Overtaken,
    /// Complete, but an earlier frame was lost and this is not a keyframe: its reference is gone.
    NoReference,
    /// Dropped to bound memory (too many frames in flight).
    Overflow,
}

/// What the assembler produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assembled {
    Frame(CompleteFrame),
    /// A frame lost to the network (or to its deadline): a keyframe is needed.
    Lost {
        frame_number: u32,
        cause: LossCause,
    },
    /// A complete frame that cannot be decoded because an earlier one was lost.
    Skipped {
        frame_number: u32,
    },
}

/// Assembler settings.
#[derive(Clone, Copy, Debug)]
pub struct AssemblerConfig {
    /// A frame still incomplete this long after its first shard is lost.
    pub deadline_us: Micros,
    /// When a newer frame completes, declare older incomplete frames lost at once (true), or
    /// keep waiting for them until their deadline (false; useful with retransmission).
    pub lost_when_overtaken: bool,
    /// Most frames held at once (memory bound).
    pub max_frames_in_flight: usize,
    /// Most bytes of frames held at once (memory bound: a peer announcing 16 MiB frames cannot
    /// make the client hold 16 of them).
    pub max_bytes_in_flight: usize,
    /// The session's refresh period (frames per intra-refresh sweep; 0: keyframes only): a
    /// sweep start then ends the wait for a keyframe, and its frames are held until the sweep
    /// is complete.
    pub refresh_period: u32,
}

impl Default for AssemblerConfig {
    fn default() -> Self {
        AssemblerConfig {
            deadline_us: 50_000,
            lost_when_overtaken: true,
            max_frames_in_flight: 16,
            max_bytes_in_flight: 64 << 20,
            refresh_period: 0,
        }
    }
}

/// Counters of the assembler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblerStats {
    pub shards_received: u64,
    pub shards_duplicate: u64,
    /// Shards for a frame already delivered or given up.
    pub shards_late: u64,
    /// Shards whose header disagrees with earlier shards of the same frame.
    pub shards_inconsistent: u64,
    pub frames_complete: u64,
    pub frames_lost: u64,
    pub frames_skipped: u64,
    /// Frames that had at least one shard arrive after they were delivered or given up.
    pub frames_late: u64,
    /// Intra-refresh sweeps that ended a wait (after a loss or a join), and the frames
    /// delivered held while they were under way.
    pub refresh_recoveries: u64,
    pub frames_held: u64,
    /// Parity shards received (included in `shards_received`).
    pub parity_received: u64,
    /// Data shards rebuilt from parity.
    pub shards_recovered: u64,
    /// Frames completed thanks to parity (some data shard was missing).
    pub frames_recovered_by_fec: u64,
    /// Shards (data or parity) that arrived after their frame was already complete: the FEC
    /// overhead that turned out not to be needed, and stragglers.
    pub shards_unneeded: u64,
    /// Reconstructions that failed although enough shards were present (inconsistent parity:
    /// never from an honest host); the frame waits for more shards or its deadline.
    pub fec_failures: u64,
}

struct Partial {
    header: ShardHeader,
    first_us: Micros,
    last_us: Micros,
    data: Vec<u8>,
    received: Vec<bool>,
    data_received: u16,
    /// Parity shards, `parity_count × shard_len` bytes, allocated with the first one.
    parity: Vec<u8>,
    parity_received: u16,
    shards: u16,
    /// The highest shard index seen (the host sends a frame's shards in index order).
    max_index: u16,
}

impl Partial {
    fn new(h: &ShardHeader, now: Micros) -> Partial {
        Partial {
            header: *h,
            first_us: now,
            last_us: now,
            data: vec![0; h.frame_bytes as usize],
            received: vec![false; h.data_count as usize + h.parity_count as usize],
            data_received: 0,
            parity: Vec::new(),
            parity_received: 0,
            shards: 0,
            max_index: 0,
        }
    }

    /// Bytes this frame may come to hold (its data and all its parity).
    fn reserved_bytes(h: &ShardHeader) -> usize {
        h.frame_bytes as usize + h.parity_count as usize * h.shard_len as usize
    }

    fn bytes(&self) -> usize {
        self.data.len() + self.parity.len()
    }

    fn complete(&self) -> bool {
        self.data_received == self.header.data_count
    }

    fn consistent(&self, h: &ShardHeader) -> bool {
        let a = &self.header;
        a.data_count == h.data_count
            && a.parity_count == h.parity_count
            && a.shard_len == h.shard_len
            && a.frame_bytes == h.frame_bytes
            && a.capture_us == h.capture_us
            && a.keyframe() == h.keyframe()
            && a.refresh_start() == h.refresh_start()
    }
}

/// Reassembles frames from shards; see the module documentation for the delivery rules.
pub struct Assembler {
    cfg: AssemblerConfig,
    partial: BTreeMap<u32, Partial>,
    /// Frames below this were delivered or given up.
    next: Option<u32>,
    /// A frame was lost: only a keyframe (or, with a refresh period, a sweep start) can be
    /// delivered next.
    need_keyframe: bool,
    /// Frames before this one are delivered held (a recovery sweep is under way).
    hold_until: Option<u32>,
    /// Recently completed frames (all data present), to count their later shards as unneeded
    /// rather than late.
    completed: BTreeMap<u32, ()>,
    fec: FecDecoder,
    /// The newest frame given up or delivered, for counting late shards once per frame.
    late_frames: BTreeMap<u32, ()>,
    out: Vec<Assembled>,
    stats: AssemblerStats,
}

impl Assembler {
    pub fn new(cfg: AssemblerConfig) -> Self {
        Assembler {
            cfg,
            partial: BTreeMap::new(),
            next: None,
            // The stream starts with a keyframe (or, with a refresh period, a sweep start).
            need_keyframe: true,
            hold_until: None,
            completed: BTreeMap::new(),
            fec: FecDecoder::new(),
            late_frames: BTreeMap::new(),
            out: Vec::new(),
            stats: AssemblerStats::default(),
        }
    }

    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// True while only a keyframe can be delivered (a frame was lost, or nothing arrived yet).
    pub fn needs_keyframe(&self) -> bool {
        self.need_keyframe
    }

    /// Deliver nothing but a keyframe (or a sweep start) from now on (the decoder rejected a
    /// frame).
    pub fn require_keyframe(&mut self) {
        self.need_keyframe = true;
        self.hold_until = None;
    }

    /// Whether a recovery sweep is under way (frames are delivered held).
    pub fn holding(&self) -> bool {
        self.hold_until.is_some()
    }

    /// The first frame number that has not been delivered or given up.
    pub fn next_frame(&self) -> Option<u32> {
        self.next
    }

    /// Retransmission: incomplete frames that cannot complete from what arrived (fewer data +
    /// parity shards than data shards) although all their shards should be here (their last
    /// shard, or a shard of a newer frame, arrived): `(frame, first shard time, missing data
    /// shard indices)`, oldest first.
    pub fn unrecoverable(&self) -> Vec<(u32, Micros, Vec<u16>)> {
        let newest = self.partial.keys().next_back().copied();
        let newest_done = self.completed.keys().next_back().copied();
        self.partial
            .iter()
            .filter(|(&f, p)| {
                let total = p.header.data_count + p.header.parity_count;
                let all_sent = p.max_index + 1 >= total
                    || newest.is_some_and(|n| n > f)
                    || newest_done.is_some_and(|n| n > f);
                all_sent
                    && !p.complete()
                    && p.data_received + p.parity_received < p.header.data_count
            })
            .map(|(&f, p)| {
                let missing = (0..p.header.data_count)
                    .filter(|&i| !p.received[i as usize])
                    .collect();
                (f, p.first_us, missing)
            })
            .collect()
    }

    /// Changes the reassembly deadline (retransmission: a few RTTs, within the configured one).
    pub fn set_deadline(&mut self, deadline_us: Micros) {
        self.cfg.deadline_us = deadline_us;
    }

    pub fn deadline(&self) -> Micros {
        self.cfg.deadline_us
    }

    /// Frames currently being assembled.
    pub fn in_flight(&self) -> usize {
        self.partial.len()
    }

    /// Bytes of the frames being assembled.
    pub fn bytes_in_flight(&self) -> usize {
        self.partial.values().map(Partial::bytes).sum()
    }

    /// Adds one shard (already parsed and validated by [`ShardHeader::parse`]).
    pub fn insert(&mut self, now: Micros, h: &ShardHeader, payload: &[u8]) {
        self.stats.shards_received += 1;
        if h.is_parity() {
            self.stats.parity_received += 1;
        }
        let f = h.frame_number;
        if self.completed.contains_key(&f) {
            self.stats.shards_unneeded += 1;
            return;
        }
        if self.next.is_some_and(|n| f < n) {
            self.stats.shards_late += 1;
            if self.late_frames.insert(f, ()).is_none() {
                self.stats.frames_late += 1;
                while self.late_frames.len() > 64 {
                    self.late_frames.pop_first();
                }
            }
            return;
        }
        if !self.partial.contains_key(&f) {
            let reserve = Partial::reserved_bytes(h);
            if reserve > self.cfg.max_bytes_in_flight {
                self.stats.shards_late += 1;
                return;
            }
            // Bound memory: give up the oldest frames.
            while self.partial.len() >= self.cfg.max_frames_in_flight
                || (!self.partial.is_empty()
                    && self.bytes_in_flight() + reserve > self.cfg.max_bytes_in_flight)
            {
                let Some((&old, _)) = self.partial.iter().next() else {
                    break;
                };
                if old > f {
                    // The new shard is for an even older frame: drop it instead.
                    self.stats.shards_late += 1;
                    return;
                }
                self.partial.remove(&old);
                self.give_up(old, LossCause::Overflow);
            }
            self.partial.insert(f, Partial::new(h, now));
        }
        let Some(p) = self.partial.get_mut(&f) else {
            return;
        };
        if !p.consistent(h) {
            self.stats.shards_inconsistent += 1;
            return;
        }
        let i = h.shard_index as usize;
        if p.received[i] {
            self.stats.shards_duplicate += 1;
            return;
        }
        p.received[i] = true;
        p.shards += 1;
        p.last_us = now;
        p.max_index = p.max_index.max(i as u16);
        let l = h.shard_len as usize;
        if !h.is_parity() {
            let start = i * l;
            let Some(dst) = p.data.get_mut(start..start + payload.len()) else {
                return;
            };
            dst.copy_from_slice(payload);
            p.data_received += 1;
        } else {
            if p.parity.is_empty() {
                p.parity = vec![0; h.parity_count as usize * l];
            }
            let start = (i - h.data_count as usize) * l;
            let Some(dst) = p.parity.get_mut(start..start + payload.len()) else {
                return;
            };
            dst.copy_from_slice(payload);
            p.parity_received += 1;
        }
        if !p.complete() && p.data_received + p.parity_received >= p.header.data_count {
            Self::recover(&mut self.fec, &mut self.stats, p);
        }
        if p.complete() {
            self.completed.insert(f, ());
            while self.completed.len() > 64 {
                self.completed.pop_first();
            }
            self.on_complete(f);
        }
    }

    /// Rebuilds the missing data shards of `p` from its parity (it has ≥ `data_count` shards).
    fn recover(fec: &mut FecDecoder, stats: &mut AssemblerStats, p: &mut Partial) {
        let h = p.header;
        let (k, m, l) = (
            h.data_count as usize,
            h.parity_count as usize,
            h.shard_len as usize,
        );
        let (have, got_parity) = p.received.split_at(k.min(p.received.len()));
        let parity = got_parity
            .iter()
            .enumerate()
            .filter(|(_, r)| **r)
            .filter_map(|(j, _)| p.parity.get(j * l..(j + 1) * l).map(|s| (j, s)));
        match fec.reconstruct(&mut p.data, l, have, m, parity) {
            Ok(n) => {
                stats.shards_recovered += n as u64;
                stats.frames_recovered_by_fec += 1;
                p.data_received = h.data_count;
                p.parity = Vec::new();
            }
            Err(_) => stats.fec_failures += 1,
        }
    }

    fn give_up(&mut self, f: u32, cause: LossCause) {
        self.stats.frames_lost += 1;
        self.need_keyframe = true;
        self.hold_until = None;
        self.out.push(Assembled::Lost {
            frame_number: f,
            cause,
        });
        self.advance_past(f);
    }

    fn advance_past(&mut self, f: u32) {
        let n = f.saturating_add(1);
        if self.next.is_none_or(|x| x < n) {
            self.next = Some(n);
        }
        self.late_frames.insert(f, ());
        while self.late_frames.len() > 64 {
            self.late_frames.pop_first();
        }
    }

    fn on_complete(&mut self, f: u32) {
        let keyframe = self.partial.get(&f).is_some_and(|p| p.header.keyframe());
        let sweep = self.cfg.refresh_period > 0
            && self.need_keyframe
            && self
                .partial
                .get(&f)
                .is_some_and(|p| p.header.refresh_start());
        if keyframe || sweep {
            // A keyframe resets the decoder, a sweep start begins to: anything older no longer
            // matters.
            let older: Vec<u32> = self.partial.range(..f).map(|(k, _)| *k).collect();
            for k in older {
                self.partial.remove(&k);
                self.give_up(k, LossCause::Overtaken);
            }
            self.need_keyframe = false;
            self.hold_until = if keyframe {
                None
            } else {
                self.stats.refresh_recoveries += 1;
                Some(f.saturating_add(self.cfg.refresh_period - 1))
            };
            self.deliver(f);
        } else if self.next == Some(f) && !self.need_keyframe {
            self.deliver(f);
        } else if self.need_keyframe {
            self.partial.remove(&f);
            self.stats.frames_skipped += 1;
            self.out.push(Assembled::Skipped { frame_number: f });
            self.advance_past(f);
        } else if self.cfg.lost_when_overtaken {
            // Frames between `next` and `f` are missing shards, or were never seen at all
            // (every shard lost): they are lost. Report each (a bounded number of them).
            let first_missing = self.next.unwrap_or(f);
            let older: Vec<u32> = self.partial.range(..f).map(|(k, _)| *k).collect();
            for k in &older {
                self.partial.remove(k);
            }
            if f - first_missing <= 64 {
                for k in first_missing..f {
                    self.give_up(k, LossCause::Overtaken);
                }
            } else {
                for k in older.into_iter().chain(std::iter::once(first_missing)) {
                    self.give_up(k, LossCause::Overtaken);
                }
            }
            self.partial.remove(&f);
            self.stats.frames_skipped += 1;
            self.out.push(Assembled::Skipped { frame_number: f });
            self.advance_past(f);
        }
        // else: wait for the older frames (or their deadline).
    }

    fn deliver(&mut self, f: u32) {
        let Some(p) = self.partial.remove(&f) else {
            return;
        };
        self.stats.frames_complete += 1;
        let hold = self.hold_until.is_some_and(|until| f < until);
        if hold {
            self.stats.frames_held += 1;
        } else {
            self.hold_until = None;
        }
        self.out.push(Assembled::Frame(CompleteFrame {
            frame_number: f,
            keyframe: p.header.keyframe(),
            refresh_start: p.header.refresh_start(),
            hold,
            capture_us: p.header.capture_us,
            first_shard_us: p.first_us,
            last_shard_us: p.last_us,
            shards: p.shards,
            data: p.data,
        }));
        self.advance_past(f);
        // Frames that completed while waiting for this one.
        if let Some(n) = self.next {
            if self.partial.get(&n).is_some_and(|p| p.complete()) {
                self.deliver(n);
            }
        }
    }

    /// Gives up frames whose deadline passed.
    pub fn handle_timeout(&mut self, now: Micros) {
        let expired: Vec<u32> = self
            .partial
            .iter()
            .filter(|(_, p)| p.first_us + self.cfg.deadline_us <= now)
            .map(|(k, _)| *k)
            .collect();
        self.give_up_frames(&expired, LossCause::Deadline);
    }

    /// Retransmission failed (or has no time left): gives frame `f` up now, before its
    /// deadline, so the keyframe request goes out at once.
    pub fn abandon(&mut self, f: u32) {
        self.give_up_frames(&[f], LossCause::Overtaken);
    }

    fn give_up_frames(&mut self, frames: &[u32], cause: LossCause) {
        for &k in frames {
            if self.partial.remove(&k).is_some() {
                self.give_up(k, cause);
            }
        }
        // Complete frames that were waiting behind the expired ones.
        let waiting: Vec<u32> = self
            .partial
            .iter()
            .filter(|(_, p)| p.complete())
            .map(|(k, _)| *k)
            .collect();
        for k in waiting {
            if self.partial.contains_key(&k) {
                self.on_complete(k);
            }
        }
    }

    /// When the next deadline passes.
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.partial
            .values()
            .map(|p| p.first_us + self.cfg.deadline_us)
            .min()
    }

    /// What the assembler produced since the last call, in order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Assembled> {
        self.out.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(f: u32, key: bool, len: usize, max: usize) -> Vec<(ShardHeader, Vec<u8>)> {
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ f) as u8).collect();
        shard_frame(f, 1000 + f as u64, key, len, max)
            .map(|(h, r)| (h, data[r].to_vec()))
            .collect()
    }

    fn frames(out: &mut Assembler) -> Vec<Assembled> {
        out.drain().collect()
    }

    /// Frame `f`'s shards, flagged as the start of an intra-refresh sweep when `refresh`.
    fn frame(f: u32, key: bool, refresh: bool) -> Vec<(ShardHeader, Vec<u8>)> {
        shards(f, key, 2500, 1000)
            .into_iter()
            .map(|(mut h, p)| {
                if refresh {
                    h.flags |= shard_flags::REFRESH;
                }
                (h, p)
            })
            .collect()
    }

    /// (frame, hold) of the frames delivered, and the numbers of the others.
    fn outcome(a: &mut Assembler) -> (Vec<(u32, bool)>, Vec<u32>) {
        let mut shown = Vec::new();
        let mut not = Vec::new();
        for x in a.drain() {
            match x {
                Assembled::Frame(f) => shown.push((f.frame_number, f.hold)),
                Assembled::Lost { frame_number, .. } | Assembled::Skipped { frame_number } => {
                    not.push(frame_number)
                }
            }
        }
        (shown, not)
    }

    #[test]
    fn a_sweep_start_ends_the_wait_and_its_frames_are_held_until_it_has_covered_the_picture() {
        let period = 4;
        let mut a = Assembler::new(AssemblerConfig {
            refresh_period: period,
            ..Default::default()
        });
        // Joining mid-stream: frames 5–7 cannot be decoded, 8 starts a sweep (8 % 4 == 0).
        for f in 5..14u32 {
            for (h, p) in &frame(f, false, f % period == 0) {
                a.insert(f as u64 * 16_000, h, p);
            }
        }
        let (shown, not) = outcome(&mut a);
        assert_eq!(not, vec![5, 6, 7]);
        assert_eq!(
            shown,
            vec![
                (8, true),
                (9, true),
                (10, true),
                (11, false),
                (12, false),
                (13, false)
            ]
        );
        assert_eq!(a.stats().refresh_recoveries, 1);
        assert_eq!(a.stats().frames_held, 3);
        // A loss during the next recovery: wait for the sweep after it.
        for f in [14u32, 15] {
            for (h, p) in &frame(f, false, false) {
                a.insert(300_000, h, p);
            }
        }
        let _ = outcome(&mut a);
        a.require_keyframe(); // the decoder rejected 15
        for f in 16..22u32 {
            for (h, p) in &frame(f, false, f % period == 0) {
                a.insert(400_000, h, p);
            }
        }
        let (shown, _) = outcome(&mut a);
        assert_eq!(
            shown[..4],
            [(16, true), (17, true), (18, true), (19, false)]
        );
        // A keyframe ends a hold at once.
        for (h, p) in &frame(24, false, true) {
            a.insert(500_000, h, p);
        }
        let _ = outcome(&mut a);
        a.require_keyframe();
        for (f, key) in [(25u32, true), (26, false)] {
            for (h, p) in &frame(f, key, false) {
                a.insert(600_000, h, p);
            }
        }
        assert_eq!(outcome(&mut a).0, vec![(25, false), (26, false)]);
    }

    #[test]
    fn without_a_refresh_period_a_sweep_flag_does_not_end_the_wait() {
        let mut a = Assembler::new(AssemblerConfig::default());
        for f in 4..6u32 {
            for (h, p) in &frame(f, false, f == 4) {
                a.insert(0, h, p);
            }
        }
        let (shown, not) = outcome(&mut a);
        assert!(shown.is_empty());
        assert_eq!(not, vec![4, 5]);
    }

    #[test]
    fn shards_cover_the_frame_and_parse() {
        for len in [1, 999, 1000, 1001, 5000, 123_457] {
            let s = shards(1, false, len, 1000);
            assert_eq!(s.len(), len.div_ceil(1000));
            assert_eq!(s.iter().map(|(_, p)| p.len()).sum::<usize>(), len);
            for (h, p) in &s {
                let mut b = Vec::new();
                h.write(&mut b);
                b.extend_from_slice(p);
                let (h2, p2) = ShardHeader::parse(&b).unwrap();
                assert_eq!((&h2, p2), (h, &p[..]));
            }
        }
    }

    #[test]
    fn in_order_delivery_and_reorder_within_frame() {
        let mut a = Assembler::new(AssemblerConfig::default());
        let mut s0 = shards(0, true, 3500, 1000);
        s0.reverse();
        for (h, p) in &s0 {
            a.insert(10, h, p);
        }
        let out = frames(&mut a);
        assert_eq!(out.len(), 1);
        let Assembled::Frame(f) = &out[0] else {
            panic!()
        };
        assert_eq!(f.data, (0..3500).map(|i| i as u8).collect::<Vec<_>>());
        assert!(f.keyframe);
        // Frame 2 completes before frame 1 (frame 1's last shard is late but within the
        // deadline): with lost_when_overtaken = false both are delivered in order.
        let mut a2 = Assembler::new(AssemblerConfig {
            lost_when_overtaken: false,
            ..Default::default()
        });
        for (h, p) in &shards(0, true, 100, 1000) {
            a2.insert(0, h, p);
        }
        let s1 = shards(1, false, 2500, 1000);
        a2.insert(1, &s1[0].0, &s1[0].1);
        for (h, p) in &shards(2, false, 800, 1000) {
            a2.insert(2, h, p);
        }
        a2.insert(3, &s1[1].0, &s1[1].1);
        a2.insert(3, &s1[2].0, &s1[2].1);
        let nums: Vec<u32> = frames(&mut a2)
            .iter()
            .map(|o| match o {
                Assembled::Frame(f) => f.frame_number,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(nums, vec![0, 1, 2]);
    }

    #[test]
    fn loss_means_no_delivery_until_keyframe() {
        let mut a = Assembler::new(AssemblerConfig::default());
        for (h, p) in &shards(0, true, 100, 1000) {
            a.insert(0, h, p);
        }
        // Frame 1 loses a shard; frame 2 arrives whole: 1 is lost, 2 is skipped.
        let s1 = shards(1, false, 2500, 1000);
        a.insert(1, &s1[0].0, &s1[0].1);
        for (h, p) in &shards(2, false, 500, 1000) {
            a.insert(2, h, p);
        }
        let out = frames(&mut a);
        assert!(matches!(out[0], Assembled::Frame(ref f) if f.frame_number == 0));
        assert!(out.contains(&Assembled::Lost {
            frame_number: 1,
            cause: LossCause::Overtaken
        }));
        assert!(out.contains(&Assembled::Skipped { frame_number: 2 }));
        assert!(a.needs_keyframe());
        // The late shard of frame 1 is counted, not delivered.
        a.insert(3, &s1[1].0, &s1[1].1);
        assert_eq!(a.stats().shards_late, 1);
        // Frame 3 (not key) skipped; frame 4 (key) delivered.
        for (h, p) in &shards(3, false, 500, 1000) {
            a.insert(4, h, p);
        }
        for (h, p) in &shards(4, true, 500, 1000) {
            a.insert(5, h, p);
        }
        let out = frames(&mut a);
        assert_eq!(out[0], Assembled::Skipped { frame_number: 3 });
        assert!(matches!(out[1], Assembled::Frame(ref f) if f.frame_number == 4 && f.keyframe));
        assert!(!a.needs_keyframe());
    }

    #[test]
    fn a_wholly_lost_frame_is_detected_when_the_next_completes() {
        let mut a = Assembler::new(AssemblerConfig::default());
        for (h, p) in &shards(0, true, 100, 1000) {
            a.insert(0, h, p);
        }
        // Frame 1 never arrives at all.
        for (h, p) in &shards(2, false, 100, 1000) {
            a.insert(2, h, p);
        }
        let out = frames(&mut a);
        assert!(out.contains(&Assembled::Lost {
            frame_number: 1,
            cause: LossCause::Overtaken
        }));
        assert!(out.contains(&Assembled::Skipped { frame_number: 2 }));
    }

    #[test]
    fn deadline_gives_up_and_releases_waiting_frames() {
        let mut a = Assembler::new(AssemblerConfig {
            deadline_us: 1000,
            lost_when_overtaken: false,
            ..Default::default()
        });
        for (h, p) in &shards(0, true, 100, 1000) {
            a.insert(0, h, p);
        }
        let s1 = shards(1, false, 2000, 1000);
        a.insert(100, &s1[0].0, &s1[0].1);
        assert_eq!(a.poll_timeout(), Some(1100));
        a.handle_timeout(1099);
        assert_eq!(frames(&mut a).len(), 1);
        a.handle_timeout(1100);
        assert_eq!(
            frames(&mut a),
            vec![Assembled::Lost {
                frame_number: 1,
                cause: LossCause::Deadline
            }]
        );
    }

    #[test]
    fn duplicates_and_inconsistent_shards_are_counted() {
        let mut a = Assembler::new(AssemblerConfig::default());
        let s = shards(0, true, 2500, 1000);
        a.insert(0, &s[0].0, &s[0].1);
        a.insert(0, &s[0].0, &s[0].1);
        let mut bad = s[1].0;
        bad.capture_us += 1;
        a.insert(0, &bad, &s[1].1);
        assert_eq!(a.stats().shards_duplicate, 1);
        assert_eq!(a.stats().shards_inconsistent, 1);
    }

    #[test]
    fn memory_is_bounded() {
        let mut a = Assembler::new(AssemblerConfig {
            max_frames_in_flight: 4,
            ..Default::default()
        });
        for f in 0..100 {
            let s = shards(f, f == 0, 3000, 1000);
            a.insert(f as u64, &s[0].0, &s[0].1);
            assert!(a.in_flight() <= 4);
        }
        let mut a = Assembler::new(AssemblerConfig {
            max_bytes_in_flight: 10_000,
            ..Default::default()
        });
        for f in 0..100 {
            let s = shards(f, f == 0, 4000, 1000);
            a.insert(f as u64, &s[0].0, &s[0].1);
            assert!(a.bytes_in_flight() <= 10_000);
        }
        let big = shards(200, true, 20_000, 1000);
        a.insert(200, &big[0].0, &big[0].1);
        assert!(a.bytes_in_flight() <= 10_000);
    }

    /// The shards of a frame with `m` parity shards, as the host makes them: data, then parity.
    fn fec_shards(
        f: u32,
        key: bool,
        len: usize,
        shard_len: usize,
        m: usize,
    ) -> (Vec<u8>, Vec<(ShardHeader, Vec<u8>)>) {
        let data: Vec<u8> = (0..len).map(|i| ((i * 31) as u32 ^ f) as u8).collect();
        let mut out: Vec<(ShardHeader, Vec<u8>)> =
            shard_frame_fec(f, 7, key, len, shard_len, |_| m)
                .map(|(h, r)| (h, data[r].to_vec()))
                .collect();
        let t = out[0].0;
        let mut parity = vec![Vec::new(); m];
        crate::fec::FecEncoder::new()
            .encode(&data, shard_len, m, |i, s| parity[i] = s.to_vec())
            .unwrap();
        for (i, p) in parity.into_iter().enumerate() {
            out.push((parity_header(&t, i as u16), p));
        }
        (data, out)
    }

    fn parse_and_insert(a: &mut Assembler, now: Micros, h: &ShardHeader, p: &[u8]) -> bool {
        let mut b = Vec::new();
        h.write(&mut b);
        b.extend_from_slice(p);
        match ShardHeader::parse(&b) {
            Ok((h, p)) => {
                a.insert(now, &h, p);
                true
            }
            Err(_) => false,
        }
    }

    #[test]
    fn any_loss_of_at_most_m_shards_is_recovered_bit_exactly() {
        let mut rng = crate::sim::SimRng::new(5);
        let mut a = Assembler::new(AssemblerConfig::default());
        let (mut recovered, mut total_k) = (0, 0);
        for f in 0..400u32 {
            let len = rng.range(1, 40_000) as usize;
            let k = len.div_ceil(1140);
            let m = rng.range(1, k as u64) as usize;
            total_k += k as u64;
            let (data, mut shards) = fec_shards(f, f == 0, len, 1140, m);
            // Lose up to m shards anywhere, deliver the rest in random order.
            let lose = rng.range(0, m as u64) as usize;
            for _ in 0..lose {
                let i = rng.range(0, shards.len() as u64 - 1) as usize;
                shards.remove(i);
            }
            for i in (1..shards.len()).rev() {
                shards.swap(i, rng.range(0, i as u64) as usize);
            }
            let data_lost = shards.iter().filter(|(h, _)| !h.is_parity()).count() < k;
            recovered += data_lost as u64;
            for (h, p) in &shards {
                assert!(parse_and_insert(&mut a, f as u64, h, p));
            }
            let out = frames(&mut a);
            assert_eq!(out.len(), 1, "frame {f}: {out:?}");
            let Assembled::Frame(got) = &out[0] else {
                panic!("frame {f}: {out:?}")
            };
            assert_eq!(got.data, data, "frame {f}: not bit-exact");
        }
        let st = a.stats();
        assert_eq!(st.frames_complete, 400);
        assert_eq!(st.frames_lost, 0);
        // Frames that lost a data shard, and those whose parity came before their last data
        // shard (complete at the k-th shard, whichever it is).
        assert!(st.frames_recovered_by_fec >= recovered);
        assert!(recovered > 100);
        // Each frame used exactly k shards; every later one was counted as unneeded.
        assert_eq!(st.shards_received, total_k + st.shards_unneeded);
        assert_eq!(st.shards_late, 0);
        assert_eq!(st.frames_late, 0);
    }

    #[test]
    fn the_frame_completes_at_the_kth_shard_and_later_ones_are_unneeded() {
        let mut a = Assembler::new(AssemblerConfig::default());
        let (data, shards) = fec_shards(0, true, 5000, 1000, 3);
        // Data shard 1 lost; parity arrives: complete at the 5th shard received.
        let order = [0usize, 2, 3, 4, 5, 1, 6, 7];
        for (n, &i) in order.iter().enumerate() {
            a.insert(n as u64, &shards[i].0, &shards[i].1);
            if n == 4 {
                let out = frames(&mut a);
                assert!(
                    matches!(&out[..], [Assembled::Frame(f)] if f.data == data && f.shards == 5)
                );
            }
        }
        let st = a.stats();
        assert_eq!(st.shards_recovered, 1);
        assert_eq!(st.frames_recovered_by_fec, 1);
        assert_eq!(st.shards_unneeded, 3);
        assert_eq!((st.shards_late, st.frames_late), (0, 0));
        assert_eq!(st.parity_received, 3);
        // Too many losses: no recovery, the frame is lost at its deadline.
        let (_, shards) = fec_shards(1, false, 5000, 1000, 2);
        for i in [0usize, 1, 5] {
            a.insert(10, &shards[i].0, &shards[i].1);
        }
        a.handle_timeout(10 + 50_000);
        assert!(frames(&mut a).contains(&Assembled::Lost {
            frame_number: 1,
            cause: LossCause::Deadline
        }));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Parity shards with wrong sizes, counts out of range or fields that disagree with
        /// the frame's other shards are refused by the parser (the client counts them as
        /// malformed) or by the assembler (inconsistent); the frame is still rebuilt bit-exactly
        /// from the good shards, and nothing panics.
        #[test]
        fn malformed_parity_is_counted_and_dropped(
            len_seed in 1usize..20_000, half_len in 1usize..700, m_seed in 0usize..1000,
            lost_seed in proptest::collection::vec(0usize..1000, 0..8),
            bad in proptest::collection::vec((0u8..12, 0usize..1000, proptest::prelude::any::<u16>()), 1..12),
        ) {
            // At least 2 data shards: the frame is incomplete while the bad shards arrive.
            let shard_len = half_len * 2;
            let len = shard_len + len_seed;
            let k = len.div_ceil(shard_len);
            let m = 1 + m_seed % k;
            let (data, shards) = fec_shards(3, true, len, shard_len, m);
            let mut a = Assembler::new(AssemblerConfig::default());
            // The first data shard always arrives first (it opens the frame).
            a.insert(0, &shards[0].0, &shards[0].1);
            let mut refused = 0u64;
            let mut malformed = 0u64;
            for &(kind, which, v) in &bad {
                let (mut h, mut p) = shards[k + which % m].clone();
                match kind {
                    0 => h.parity_count = h.data_count + 1 + v % 100,
                    1 => h.shard_len |= 1,
                    2 => { p.pop(); }
                    3 => p.push(v as u8),
                    4 => h.shard_index = h.data_count + h.parity_count + v % 10,
                    5 => h.flags &= !shard_flags::PARITY,
                    6 => h.data_count = h.data_count.wrapping_add(1 + v % 5),
                    7 => h.frame_bytes = h.frame_bytes.wrapping_add(1 + v as u32 % 4000),
                    8 => h.parity_count = (h.parity_count + 1 + v % 4).min(h.data_count.max(h.parity_count + 1)),
                    9 => h.capture_us ^= 1 + v as u64,
                    10 => h.flags ^= shard_flags::KEYFRAME,
                    _ => { h.shard_len = h.shard_len.wrapping_add(2); }
                }
                let before = a.stats().shards_inconsistent;
                if parse_and_insert(&mut a, 1, &h, &p) {
                    proptest::prop_assert_eq!(a.stats().shards_inconsistent, before + 1, "kind {} accepted", kind);
                    refused += 1;
                } else {
                    malformed += 1;
                }
            }
            proptest::prop_assert_eq!(a.stats().shards_inconsistent, refused);
            proptest::prop_assert_eq!(malformed + refused, bad.len() as u64);
            // The good shards, minus up to m lost (never shard 0, already in).
            let mut rest: Vec<usize> = (1..k + m).collect();
            for s in lost_seed.iter().take(m) {
                if !rest.is_empty() {
                    rest.remove(s % rest.len());
                }
            }
            for i in rest {
                a.insert(2, &shards[i].0, &shards[i].1);
            }
            let out = frames(&mut a);
            proptest::prop_assert_eq!(out.len(), 1);
            let ok = matches!(&out[0], Assembled::Frame(f) if f.data == data);
            proptest::prop_assert!(ok, "frame not rebuilt bit-exactly");
            proptest::prop_assert_eq!(a.stats().fec_failures, 0);
        }
    }
}
