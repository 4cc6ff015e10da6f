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
//!
//! **Slices** (docs/PROTOCOL.md §6.3): a frame may be sent as `slice_count` slices, each its
//! own run of shards with its own parity, so the host sends each slice as soon as the encoder
//! has it. The assembler completes each slice on its own and hands it over at once
//! ([`Assembled::Slice`]), in **decode order**: frames in order; within a frame slice 0 first,
//! the last slice (the bottom of the picture) last, the others as they complete — the encoder's
//! slices depend on nothing outside themselves (no prediction, no deblocking across slice
//! edges), so the decoder takes them in any order as long as the first opens the picture and
//! the last closes it. A slice that cannot complete (its frame's deadline, a newer frame
//! completed with retransmission off, retransmission gave up, or no shard of it arrived by the
//! time the host said the frame was all sent: [`Assembler::frame_sent`]) is given up on its
//! own ([`Assembled::SliceLost`], in the same order), and the rest of its frame is still
//! delivered: a lost slice costs only its own region of the picture (the decoder conceals it
//! from the reference) while the client asks for a keyframe. Later frames keep flowing. A frame
//! of which no slice arrives is lost as a whole, as above.

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
    shard_slice_fec(
        SliceId::WHOLE,
        frame_number,
        capture_us,
        keyframe,
        frame_bytes,
        max_payload,
        parity,
    )
}

/// Which slice of how many (`SliceId::WHOLE`: a frame sent whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceId {
    pub index: u8,
    pub count: u8,
}

impl SliceId {
    /// A frame sent whole: slice 0 of 1.
    pub const WHOLE: SliceId = SliceId { index: 0, count: 1 };

    /// The slice that ends the picture (the decoder outputs it with this one).
    pub fn is_last(self) -> bool {
        self.index + 1 >= self.count
    }
}

/// Like [`shard_frame_fec`] for one slice of a frame sent in slices: `bytes` is the slice's.
pub fn shard_slice_fec(
    slice: SliceId,
    frame_number: u32,
    capture_us: Micros,
    keyframe: bool,
    bytes: usize,
    max_payload: usize,
    parity: impl FnOnce(usize) -> usize,
) -> impl Iterator<Item = (ShardHeader, std::ops::Range<usize>)> {
    let shard_len = max_payload.clamp(1, u16::MAX as usize);
    let data_count = bytes.div_ceil(shard_len).max(1);
    let parity_count = parity(data_count).min(u16::MAX as usize - data_count) as u16;
    (0..data_count).map(move |i| {
        let start = i * shard_len;
        let end = (start + shard_len).min(bytes);
        (
            ShardHeader {
                frame_number,
                flags: if keyframe { shard_flags::KEYFRAME } else { 0 },
                slice_index: slice.index,
                slice_count: slice.count,
                shard_index: i as u16,
                data_count: data_count as u16,
                parity_count,
                shard_len: shard_len as u16,
                frame_bytes: bytes as u32,
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

/// A frame whose shards all arrived, ready for the decoder — or, for a frame sent in slices,
/// one of its slices.
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
    /// Client clock: first and last shard received (of this slice).
    pub first_shard_us: Micros,
    pub last_shard_us: Micros,
    /// Datagrams that made up the frame (the slice).
    pub shards: u16,
    /// Which slice of the frame this is: [`SliceId::WHOLE`] for a frame sent whole.
    pub slice: SliceId,
    pub data: Vec<u8>,
}

/// Why a frame (or a slice) will never reach the decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossCause {
    /// Still incomplete when its deadline passed.
    Deadline,
    /// Still incomplete when a newer frame completed (or retransmission gave up on it).
    Overtaken,
    /// Complete, but an earlier frame was lost and this is not a keyframe: its reference is gone.
    NoReference,
    /// Dropped to bound memory (too many frames in flight).
    Overflow,
    /// A slice of which no shard had arrived when the host said the frame was all sent.
    NotReceived,
}

/// What the assembler produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assembled {
    /// A frame sent whole.
    Frame(CompleteFrame),
    /// One slice of a frame sent in slices, in decode order.
    Slice(CompleteFrame),
    /// A slice given up (in decode order, like the slices): the rest of its frame is still
    /// delivered and its region is concealed; a keyframe is needed to repair it.
    SliceLost {
        frame_number: u32,
        slice: SliceId,
        cause: LossCause,
    },
    /// A frame lost to the network (or to its deadline): a keyframe is needed.
    Lost { frame_number: u32, cause: LossCause },
    /// A complete frame that cannot be decoded because an earlier one was lost.
    Skipped { frame_number: u32 },
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

/// After the host said a frame sent in slices was all sent ([`Assembler::frame_sent`]), its
/// slices of which no shard arrived are given up this much later (datagrams reordered behind
/// the report still count).
pub const FRAME_END_GRACE_US: Micros = 2_000;

/// Counters of the assembler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblerStats {
    pub shards_received: u64,
    pub shards_duplicate: u64,
    /// Shards for a frame already delivered or given up.
    pub shards_late: u64,
    /// Shards whose header disagrees with earlier shards of the same frame.
    pub shards_inconsistent: u64,
    /// Frames delivered whole: every slice of them (the frame, sent whole) arrived.
    pub frames_complete: u64,
    pub frames_lost: u64,
    pub frames_skipped: u64,
    /// Frames that had at least one shard arrive after they were delivered or given up.
    pub frames_late: u64,
    /// Frames sent in slices that were delivered with some of their slices lost.
    pub frames_partial: u64,
    /// Slices of frames sent in slices: delivered, and given up.
    pub slices_complete: u64,
    pub slices_lost: u64,
    /// Intra-refresh sweeps that ended a wait (after a loss or a join), and the frames
    /// delivered held while they were under way.
    pub refresh_recoveries: u64,
    pub frames_held: u64,
    /// Parity shards received (included in `shards_received`).
    pub parity_received: u64,
    /// Data shards rebuilt from parity.
    pub shards_recovered: u64,
    /// Frames (or slices) completed thanks to parity (some data shard was missing).
    pub frames_recovered_by_fec: u64,
    /// Shards (data or parity) that arrived after their frame was already complete: the FEC
    /// overhead that turned out not to be needed, and stragglers.
    pub shards_unneeded: u64,
    /// Reconstructions that failed although enough shards were present (inconsistent parity:
    /// never from an honest host); the frame waits for more shards or its deadline.
    pub fec_failures: u64,
}

/// A slice (or a frame sent whole) that cannot complete from what arrived although all its
/// shards should be here: what a ShardNack or SliceNack asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrecoverable {
    pub frame_number: u32,
    pub slice: SliceId,
    /// When its frame's first shard arrived (the reassembly deadline runs from there).
    pub first_us: Micros,
    /// Its missing data shards.
    pub missing: Vec<u16>,
}

/// One slice (or a frame sent whole) being assembled: its shards and parity.
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
    /// The highest shard index seen (the host sends a slice's shards in index order).
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

    /// Bytes this slice may come to hold (its data and all its parity).
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
    }

    /// Fewer data + parity shards than it needs although all should be here.
    fn unrecoverable(&self) -> bool {
        !self.complete() && self.data_received + self.parity_received < self.header.data_count
    }

    fn all_sent(&self) -> bool {
        self.max_index + 1 >= self.header.data_count + self.header.parity_count
    }
}

/// Where a slice stands.
enum SliceState {
    /// Shards arriving (None: none yet).
    Open(Option<Partial>),
    /// All its data is here; not handed over yet (it waits for its turn in decode order).
    Complete(Partial),
    /// Handed over.
    Delivered,
    /// Given up, not reported yet (it waits for its turn in decode order).
    Lost(LossCause),
    /// Given up and reported.
    Reported,
}

impl SliceState {
    /// Delivered or reported: nothing more comes of it.
    fn done(&self) -> bool {
        matches!(self, SliceState::Delivered | SliceState::Reported)
    }
}

/// A frame being assembled: its slices (one for a frame sent whole).
struct FrameParts {
    count: u8,
    keyframe: bool,
    /// An intra-refresh sweep starts with it.
    refresh_start: bool,
    capture_us: Micros,
    /// The first shard of any of its slices.
    first_us: Micros,
    slices: Vec<SliceState>,
    /// Slices handed over so far.
    delivered: u8,
    /// Slices given up so far (reported or not).
    lost: u8,
    /// When the host's report that the frame was all sent arrived (frames sent in slices).
    sent_us: Option<Micros>,
}

impl FrameParts {
    fn new(h: &ShardHeader, now: Micros) -> FrameParts {
        FrameParts {
            count: h.slice_count,
            keyframe: h.keyframe(),
            refresh_start: h.refresh_start(),
            capture_us: h.capture_us,
            first_us: now,
            slices: (0..h.slice_count.max(1))
                .map(|_| SliceState::Open(None))
                .collect(),
            delivered: 0,
            lost: 0,
            sent_us: None,
        }
    }

    fn consistent(&self, h: &ShardHeader) -> bool {
        self.count == h.slice_count
            && self.capture_us == h.capture_us
            && self.keyframe == h.keyframe()
            && self.refresh_start == h.refresh_start()
    }

    fn sliced(&self) -> bool {
        self.count > 1
    }

    fn bytes(&self) -> usize {
        self.slices
            .iter()
            .map(|s| match s {
                SliceState::Open(Some(p)) | SliceState::Complete(p) => p.bytes(),
                _ => 0,
            })
            .sum()
    }

    /// Something of it reached the decoder: a slice, or the report of a lost one. Such a
    /// frame ends slice by slice (the decoder is waiting for its end), never as a whole.
    fn started(&self) -> bool {
        self.delivered > 0
            || self
                .slices
                .iter()
                .any(|s| matches!(s, SliceState::Reported))
    }

    fn any_complete(&self) -> bool {
        self.slices
            .iter()
            .any(|s| matches!(s, SliceState::Complete(_)))
    }

    /// Every slice complete (nothing delivered or lost yet): a whole frame's only way.
    fn all_complete(&self) -> bool {
        self.slices
            .iter()
            .all(|s| matches!(s, SliceState::Complete(_)))
    }

    /// Gives up every slice still open; returns how many.
    fn lose_open(&mut self, cause: LossCause) -> u8 {
        let mut n = 0;
        for s in self.slices.iter_mut() {
            if matches!(s, SliceState::Open(_)) {
                *s = SliceState::Lost(cause);
                n += 1;
            }
        }
        self.lost += n;
        n
    }
}

/// Reassembles frames from shards; see the module documentation for the delivery rules.
pub struct Assembler {
    cfg: AssemblerConfig,
    partial: BTreeMap<u32, FrameParts>,
    /// Frames below this were delivered or given up.
    next: Option<u32>,
    /// A frame was lost: only a keyframe (or, with a refresh period, a sweep start) can be
    /// delivered next.
    need_keyframe: bool,
    /// Frames before this one are delivered held (a recovery sweep is under way).
    hold_until: Option<u32>,
    /// Recently completed frames and slices (all data present), to count their later shards as
    /// unneeded rather than late.
    completed: BTreeMap<(u32, u8), ()>,
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

    /// Retransmission: incomplete frames (and slices) that cannot complete from what arrived
    /// (fewer data + parity shards than data shards) although all their shards should be here
    /// (their last shard, or a shard of a newer frame, arrived; for a frame sent in slices, also
    /// the host's report that it was all sent), oldest first.
    pub fn unrecoverable(&self) -> Vec<Unrecoverable> {
        let newest = self.partial.keys().next_back().copied();
        let newest_done = self.completed.keys().next_back().map(|k| k.0);
        let mut out = Vec::new();
        for (&f, parts) in &self.partial {
            let newer = newest.is_some_and(|n| n > f) || newest_done.is_some_and(|n| n > f);
            for (i, s) in parts.slices.iter().enumerate() {
                let SliceState::Open(Some(p)) = s else {
                    continue;
                };
                if (p.all_sent() || newer || parts.sent_us.is_some()) && p.unrecoverable() {
                    out.push(Unrecoverable {
                        frame_number: f,
                        slice: SliceId {
                            index: i as u8,
                            count: parts.count,
                        },
                        first_us: parts.first_us,
                        missing: (0..p.header.data_count)
                            .filter(|&k| !p.received[k as usize])
                            .collect(),
                    });
                }
            }
        }
        out
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
        self.partial.values().map(FrameParts::bytes).sum()
    }

    /// Adds one shard (already parsed and validated by [`ShardHeader::parse`]).
    pub fn insert(&mut self, now: Micros, h: &ShardHeader, payload: &[u8]) {
        self.stats.shards_received += 1;
        if h.is_parity() {
            self.stats.parity_received += 1;
        }
        let f = h.frame_number;
        if self.completed.contains_key(&(f, h.slice_index)) {
            self.stats.shards_unneeded += 1;
            return;
        }
        if self.next.is_some_and(|n| f < n) {
            self.count_late(f);
            return;
        }
        let reserve = Partial::reserved_bytes(h);
        let opens_slice = self.partial.get(&f).is_none_or(|p| {
            p.slices
                .get(h.slice_index as usize)
                .is_some_and(|s| matches!(s, SliceState::Open(None)))
        });
        if opens_slice {
            if reserve > self.cfg.max_bytes_in_flight {
                self.stats.shards_late += 1;
                return;
            }
            // Bound memory: give up the oldest frames.
            let new_frame = !self.partial.contains_key(&f);
            while (new_frame && self.partial.len() >= self.cfg.max_frames_in_flight)
                || (!self.partial.is_empty()
                    && self.bytes_in_flight() + reserve > self.cfg.max_bytes_in_flight)
            {
                let Some((&old, _)) = self.partial.iter().next() else {
                    break;
                };
                if old >= f {
                    // The new shard is for an even older frame (or its own frame already
                    // holds everything we allow): drop it instead.
                    self.stats.shards_late += 1;
                    return;
                }
                if self.partial.get(&old).is_some_and(|p| p.started()) {
                    self.close(old, LossCause::Overflow);
                } else {
                    self.partial.remove(&old);
                    self.give_up(old, LossCause::Overflow);
                }
            }
            if self.next.is_some_and(|n| f < n) {
                // Giving up older frames moved past this one.
                self.count_late(f);
                return;
            }
        }
        let parts = self
            .partial
            .entry(f)
            .or_insert_with(|| FrameParts::new(h, now));
        if !parts.consistent(h) {
            self.stats.shards_inconsistent += 1;
            return;
        }
        let Some(slot) = parts.slices.get_mut(h.slice_index as usize) else {
            self.stats.shards_inconsistent += 1;
            return;
        };
        let p = match slot {
            SliceState::Open(p) => p.get_or_insert_with(|| Partial::new(h, now)),
            SliceState::Complete(_) | SliceState::Delivered => {
                self.stats.shards_unneeded += 1;
                return;
            }
            SliceState::Lost(_) | SliceState::Reported => {
                self.count_late(f);
                return;
            }
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
            if let SliceState::Open(Some(p)) = std::mem::replace(slot, SliceState::Delivered) {
                *slot = SliceState::Complete(p);
            }
            self.completed.insert((f, h.slice_index), ());
            while self.completed.len() > 256 {
                self.completed.pop_first();
            }
            self.on_complete(f);
        }
    }

    fn count_late(&mut self, f: u32) {
        self.stats.shards_late += 1;
        if self.late_frames.insert(f, ()).is_none() {
            self.stats.frames_late += 1;
            while self.late_frames.len() > 64 {
                self.late_frames.pop_first();
            }
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

    /// Frame `f` is lost as a whole.
    fn give_up(&mut self, f: u32, cause: LossCause) {
        self.close_open_before(f);
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
            self.close_open_before(f);
            self.next = Some(n);
        }
        self.late_frames.insert(f, ());
        while self.late_frames.len() > 64 {
            self.late_frames.pop_first();
        }
    }

    /// A frame partly handed over before `f` is finished first (its ready slices handed over,
    /// the rest reported lost): the decoder hears the end of it before anything newer.
    fn close_open_before(&mut self, f: u32) {
        let open: Vec<u32> = self
            .partial
            .range(..f)
            .filter(|(_, p)| p.started())
            .map(|(k, _)| *k)
            .collect();
        for k in open {
            self.close(k, LossCause::Overtaken);
        }
    }

    /// A slice of `f` (or `f`, sent whole) became complete.
    fn on_complete(&mut self, f: u32) {
        let Some(parts) = self.partial.get(&f) else {
            return;
        };
        let keyframe = parts.keyframe;
        let sweep = self.cfg.refresh_period > 0 && self.need_keyframe && parts.refresh_start;
        if (keyframe || sweep) && (self.need_keyframe || self.next != Some(f)) {
            // A keyframe resets the decoder, a sweep start begins to: anything older no longer
            // matters.
            let older: Vec<u32> = self.partial.range(..f).map(|(k, _)| *k).collect();
            for k in older {
                if self.partial.get(&k).is_some_and(|p| p.started()) {
                    self.close(k, LossCause::Overtaken);
                } else {
                    self.partial.remove(&k);
                    self.give_up(k, LossCause::Overtaken);
                }
            }
            self.need_keyframe = false;
            self.next = Some(f);
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
            if self.partial.get(&f).is_some_and(|p| p.started()) {
                // Half handed over when the decoder failed: the rest of it is lost.
                self.close(f, LossCause::NoReference);
            } else {
                self.skip(f);
            }
        } else if self.cfg.lost_when_overtaken {
            // Frames between `next` and `f` are missing shards, or were never seen at all
            // (every shard lost): they are lost. Report each (a bounded number of them). A
            // frame sent in slices of which some arrived is delivered in part instead.
            let first_missing = self.next.unwrap_or(f);
            let older: Vec<u32> = self.partial.range(..f).map(|(k, _)| *k).collect();
            let report: Vec<u32> = if f - first_missing <= 64 {
                (first_missing..f).collect()
            } else {
                let mut r: Vec<u32> = older
                    .iter()
                    .copied()
                    .chain(std::iter::once(first_missing))
                    .collect();
                r.sort_unstable();
                r.dedup();
                r
            };
            for k in older.iter().filter(|k| report.binary_search(k).is_err()) {
                self.partial.remove(k);
            }
            let mut any_lost = false;
            for k in report {
                let usable = self.partial.get(&k).is_some_and(|p| {
                    p.sliced() && (p.started() || (p.any_complete() && !self.need_keyframe))
                });
                if usable {
                    self.close(k, LossCause::Overtaken);
                    self.advance_past(k);
                } else {
                    self.partial.remove(&k);
                    self.give_up(k, LossCause::Overtaken);
                    any_lost = true;
                }
            }
            if any_lost || self.need_keyframe {
                if self.partial.get(&f).is_some_and(|p| p.started()) {
                    self.close(f, LossCause::NoReference);
                    self.advance_past(f);
                } else {
                    self.skip(f);
                }
            } else {
                self.next = Some(f);
                self.deliver(f);
            }
        }
        // else: wait for the older frames (or their deadline).
    }

    /// A complete frame that cannot be decoded (an earlier one was lost).
    fn skip(&mut self, f: u32) {
        self.close_open_before(f);
        self.partial.remove(&f);
        self.stats.frames_skipped += 1;
        self.out.push(Assembled::Skipped { frame_number: f });
        self.advance_past(f);
    }

    /// Hands over what of `f` (the next frame) is ready, in decode order: a frame sent whole
    /// when complete; a sliced frame's slice 0, then its other slices as they complete, its
    /// last slice last. A frame whose every slice is done is finished, and the frames waiting
    /// behind it follow.
    fn deliver(&mut self, f: u32) {
        // Frames of a recovery sweep are delivered held (every slice of them); the first one
        // past the sweep ends the hold.
        let hold = self.hold_until.is_some_and(|until| f < until);
        let Some(parts) = self.partial.get_mut(&f) else {
            return;
        };
        if !hold {
            self.hold_until = None;
        }
        if !parts.sliced() {
            if !parts.all_complete() {
                return;
            }
            let Some(SliceState::Complete(p)) = parts.slices.pop() else {
                return;
            };
            self.partial.remove(&f);
            self.stats.frames_complete += 1;
            if hold {
                self.stats.frames_held += 1;
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
                slice: SliceId::WHOLE,
                data: p.data,
            }));
            self.advance_past(f);
        } else {
            let count = parts.count as usize;
            let open = parts
                .slices
                .iter()
                .any(|s| matches!(s, SliceState::Open(_)));
            if !open && !parts.started() && !parts.any_complete() {
                // Every slice given up: the frame is lost as a whole.
                self.partial.remove(&f);
                self.give_up(f, LossCause::Overtaken);
                return;
            }
            let mut order: Vec<usize> = Vec::with_capacity(count);
            order.push(0);
            if parts.slices[0].done() || Self::ready(&parts.slices[0]) {
                order.extend(1..count - 1);
            }
            for i in order {
                Self::hand_over(&mut self.out, &mut self.stats, f, parts, i, hold);
            }
            if parts.slices[..count - 1].iter().all(SliceState::done) {
                Self::hand_over(&mut self.out, &mut self.stats, f, parts, count - 1, hold);
            }
            if !parts.slices.iter().all(SliceState::done) {
                return;
            }
            let (lost, delivered) = (parts.lost, parts.delivered);
            self.partial.remove(&f);
            if hold && delivered > 0 {
                self.stats.frames_held += 1;
            }
            self.count_ended(lost, delivered);
            self.advance_past(f);
        }
        // Frames that completed while waiting for this one.
        if let Some(n) = self.next {
            if self
                .partial
                .get(&n)
                .is_some_and(|p| p.any_complete() || p.lost > 0)
            {
                if self.need_keyframe {
                    self.on_complete(n);
                } else {
                    self.deliver(n);
                }
            }
        }
    }

    /// Complete or given up: can be handed over (or reported) now.
    fn ready(s: &SliceState) -> bool {
        matches!(s, SliceState::Complete(_) | SliceState::Lost(_))
    }

    /// Hands over slice `i` of `f` if it is complete, or reports it if it was given up.
    fn hand_over(
        out: &mut Vec<Assembled>,
        stats: &mut AssemblerStats,
        f: u32,
        parts: &mut FrameParts,
        i: usize,
        hold: bool,
    ) {
        let slice = SliceId {
            index: i as u8,
            count: parts.count,
        };
        let Some(s) = parts.slices.get_mut(i) else {
            return;
        };
        match std::mem::replace(s, SliceState::Delivered) {
            SliceState::Complete(p) => {
                parts.delivered += 1;
                stats.slices_complete += 1;
                out.push(Assembled::Slice(CompleteFrame {
                    frame_number: f,
                    keyframe: parts.keyframe,
                    refresh_start: parts.refresh_start,
                    hold,
                    capture_us: parts.capture_us,
                    first_shard_us: p.first_us,
                    last_shard_us: p.last_us,
                    shards: p.shards,
                    slice,
                    data: p.data,
                }));
            }
            SliceState::Lost(cause) => {
                *s = SliceState::Reported;
                stats.slices_lost += 1;
                out.push(Assembled::SliceLost {
                    frame_number: f,
                    slice,
                    cause,
                });
            }
            other => *s = other,
        }
    }

    /// Gives up what of `f` is still open. A frame sent whole, or one of which nothing can be
    /// delivered, is lost as a whole; a frame sent in slices is otherwise given up slice by
    /// slice and delivered in part (now if it is the next frame, else when its turn comes).
    fn finish(&mut self, f: u32, cause: LossCause) {
        let Some(parts) = self.partial.get_mut(&f) else {
            return;
        };
        if !parts.sliced() || (!parts.started() && !parts.any_complete()) {
            self.partial.remove(&f);
            self.give_up(f, cause);
            return;
        }
        parts.lose_open(cause);
        let (keyframe, started) = (parts.keyframe, parts.started());
        if self.next.is_some_and(|n| n > f) {
            // Behind `next` already: nothing more of it matters.
            self.partial.remove(&f);
        } else if self.next == Some(f) || started {
            if self.need_keyframe && !keyframe {
                self.on_complete(f);
            } else {
                self.deliver(f);
            }
        } else if let Some(first) = self.next {
            // Given up while waiting behind older frames: those are overdue too (a frame never
            // seen at all is lost).
            let older: Vec<u32> = if f - first <= 64 {
                (first..f).collect()
            } else {
                self.partial.range(..f).map(|(k, _)| *k).collect()
            };
            for k in older {
                if self.partial.contains_key(&k) {
                    self.finish(k, cause);
                } else if self.next.is_some_and(|n| n <= k) {
                    self.give_up(k, cause);
                }
            }
            if self.next.is_some_and(|n| n < f) {
                self.give_up(f - 1, cause);
            }
            if self.partial.contains_key(&f) && self.next.is_some_and(|n| n <= f) {
                self.next = Some(f);
                self.finish(f, cause);
            }
        }
    }

    /// Finishes `f` now, whatever the frames before it: its ready slices are handed over and
    /// the rest reported lost, in decode order. Used for a frame partly handed over when
    /// something newer moves the stream on.
    fn close(&mut self, f: u32, cause: LossCause) {
        let Some(mut parts) = self.partial.remove(&f) else {
            return;
        };
        if !parts.sliced() || (!parts.started() && !parts.any_complete()) {
            self.stats.frames_lost += 1;
            self.need_keyframe = true;
            self.hold_until = None;
            self.out.push(Assembled::Lost {
                frame_number: f,
                cause,
            });
            return;
        }
        parts.lose_open(cause);
        let count = parts.count as usize;
        let hold = self.hold_until.is_some_and(|until| f < until);
        for i in (0..count - 1).chain(std::iter::once(count - 1)) {
            Self::hand_over(&mut self.out, &mut self.stats, f, &mut parts, i, hold);
        }
        if hold && parts.delivered > 0 {
            self.stats.frames_held += 1;
        }
        self.count_ended(parts.lost, parts.delivered);
        self.late_frames.insert(f, ());
    }

    /// A frame sent in slices ended: whole, in part, or (every slice reported lost) not at
    /// all — then its successors have no reference: only a keyframe goes on.
    fn count_ended(&mut self, lost: u8, delivered: u8) {
        if lost == 0 {
            self.stats.frames_complete += 1;
        } else if delivered > 0 {
            self.stats.frames_partial += 1;
        } else {
            self.stats.frames_lost += 1;
            self.need_keyframe = true;
            self.hold_until = None;
        }
    }

    /// Gives up frames whose deadline passed, and the slices of frames sent in slices that
    /// never arrived although the host reported the frame all sent.
    pub fn handle_timeout(&mut self, now: Micros) {
        let expired: Vec<u32> = self
            .partial
            .iter()
            .filter(|(_, p)| p.first_us + self.cfg.deadline_us <= now)
            .map(|(k, _)| *k)
            .collect();
        self.give_up_frames(&expired, LossCause::Deadline);
        let ended: Vec<u32> = self
            .partial
            .iter()
            .filter(|(_, p)| p.sent_us.is_some_and(|t| t + FRAME_END_GRACE_US <= now))
            .map(|(k, _)| *k)
            .collect();
        for f in ended {
            self.end_of_frame(f);
        }
    }

    /// The host reported frame `f` all sent (its FrameTiming, which leaves after the frame's
    /// last datagram). For a frame sent in slices: its slices still missing shards become
    /// retransmission candidates at once ([`unrecoverable`](Self::unrecoverable)), and
    /// [`FRAME_END_GRACE_US`] later the slices of which nothing arrived are given up (with
    /// retransmission off, also those that cannot complete), so a lost slice costs its region
    /// only for a moment instead of holding the picture until the deadline. Frames sent whole
    /// keep their deadline.
    pub fn frame_sent(&mut self, now: Micros, f: u32) {
        if let Some(p) = self.partial.get_mut(&f).filter(|p| p.sliced()) {
            p.sent_us.get_or_insert(now);
        }
    }

    fn end_of_frame(&mut self, f: u32) {
        let lost_when_overtaken = self.cfg.lost_when_overtaken;
        let Some(parts) = self.partial.get_mut(&f) else {
            return;
        };
        parts.sent_us = None;
        let mut any = false;
        for s in parts.slices.iter_mut() {
            let give_up = match s {
                SliceState::Open(None) => Some(LossCause::NotReceived),
                SliceState::Open(Some(p)) if lost_when_overtaken && p.unrecoverable() => {
                    Some(LossCause::Overtaken)
                }
                _ => None,
            };
            if let Some(cause) = give_up {
                *s = SliceState::Lost(cause);
                parts.lost += 1;
                any = true;
            }
        }
        let open = parts
            .slices
            .iter()
            .any(|s| matches!(s, SliceState::Open(_)));
        if any && !open {
            // Nothing more will come: hand over what can be.
            let cause = LossCause::NotReceived;
            if !parts.started() && !parts.any_complete() {
                self.partial.remove(&f);
                self.give_up(f, cause);
            } else {
                self.finish(f, cause);
            }
        } else if any {
            self.finish_if_next(f);
        }
    }

    /// Hands over what became ready in `f` if it is the next frame.
    fn finish_if_next(&mut self, f: u32) {
        if self.next == Some(f) && !self.need_keyframe {
            self.deliver(f);
        }
    }

    /// Retransmission failed (or has no time left): gives frame `f` up now, before its
    /// deadline, so the keyframe request goes out at once.
    pub fn abandon(&mut self, f: u32) {
        self.give_up_frames(&[f], LossCause::Overtaken);
    }

    /// Like [`abandon`](Self::abandon) for one slice of a frame sent in slices: the rest of
    /// the frame is still delivered.
    pub fn abandon_slice(&mut self, f: u32, slice: SliceId) {
        let Some(parts) = self.partial.get_mut(&f) else {
            return;
        };
        if !parts.sliced() {
            self.abandon(f);
            return;
        }
        let Some(s) = parts.slices.get_mut(slice.index as usize) else {
            return;
        };
        if !matches!(s, SliceState::Open(_)) {
            return;
        }
        *s = SliceState::Lost(LossCause::Overtaken);
        parts.lost += 1;
        if parts
            .slices
            .iter()
            .all(|s| matches!(s, SliceState::Lost(_) | SliceState::Reported))
            && !parts.started()
        {
            self.partial.remove(&f);
            self.give_up(f, LossCause::Overtaken);
        } else {
            self.finish_if_next(f);
        }
        self.release_waiting();
    }

    fn give_up_frames(&mut self, frames: &[u32], cause: LossCause) {
        for &k in frames {
            self.finish(k, cause);
        }
        self.release_waiting();
    }

    /// Complete frames that were waiting behind frames given up.
    fn release_waiting(&mut self) {
        let waiting: Vec<u32> = self
            .partial
            .iter()
            .filter(|(_, p)| p.any_complete())
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
            .flat_map(|p| {
                [
                    Some(p.first_us + self.cfg.deadline_us),
                    p.sent_us.map(|t| t + FRAME_END_GRACE_US),
                ]
            })
            .flatten()
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
                Assembled::Slice(_) | Assembled::SliceLost { .. } => {
                    unreachable!("these frames are sent whole")
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

    /// The shards of slice `i` of `n` of frame `f` (`len` bytes, 1000-byte shards, `m` parity).
    fn slice_shards(
        f: u32,
        key: bool,
        i: u8,
        n: u8,
        len: usize,
        m: usize,
    ) -> Vec<(ShardHeader, Vec<u8>)> {
        let data = slice_bytes(f, i, len);
        let slice = SliceId { index: i, count: n };
        let mut out: Vec<(ShardHeader, Vec<u8>)> =
            shard_slice_fec(slice, f, 1000 + f as u64, key, len, 1000, |_| m)
                .map(|(h, r)| (h, data[r].to_vec()))
                .collect();
        if m > 0 {
            let t = out[0].0;
            let mut parity = vec![Vec::new(); m];
            crate::fec::FecEncoder::new()
                .encode(&data, 1000, m, |j, s| parity[j] = s.to_vec())
                .unwrap();
            for (j, p) in parity.into_iter().enumerate() {
                out.push((parity_header(&t, j as u16), p));
            }
        }
        out
    }

    fn slice_bytes(f: u32, i: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|k| (k as u32 ^ f ^ ((i as u32) << 5)) as u8)
            .collect()
    }

    /// What came out, as short strings: `S f.i` a slice, `L f.i` a slice lost, `F f` a frame,
    /// `X f` a frame lost, `K f` a frame skipped.
    fn names(a: &mut Assembler) -> Vec<String> {
        a.drain()
            .map(|o| match o {
                Assembled::Slice(c) => {
                    assert_eq!(
                        c.data,
                        slice_bytes(c.frame_number, c.slice.index, c.data.len())
                    );
                    format!("S {}.{}", c.frame_number, c.slice.index)
                }
                Assembled::SliceLost {
                    frame_number,
                    slice,
                    ..
                } => {
                    format!("L {frame_number}.{}", slice.index)
                }
                Assembled::Frame(c) => format!("F {}", c.frame_number),
                Assembled::Lost { frame_number, .. } => format!("X {frame_number}"),
                Assembled::Skipped { frame_number } => format!("K {frame_number}"),
            })
            .collect()
    }

    fn insert_all(a: &mut Assembler, now: Micros, shards: &[(ShardHeader, Vec<u8>)]) {
        for (h, p) in shards {
            assert!(parse_and_insert(a, now, h, p));
        }
    }

    #[test]
    fn slices_go_out_as_they_complete_the_first_first_and_the_last_last() {
        let mut a = Assembler::new(AssemblerConfig::default());
        let s: Vec<_> = (0..4)
            .map(|i| slice_shards(0, true, i, 4, 2500, 0))
            .collect();
        // Slice 2 completes first: it waits for slice 0, which opens the picture.
        insert_all(&mut a, 1, &s[2]);
        assert!(names(&mut a).is_empty());
        insert_all(&mut a, 2, &s[0]);
        assert_eq!(names(&mut a), ["S 0.0", "S 0.2"]);
        // The last slice waits for slice 1 (it closes the picture).
        insert_all(&mut a, 3, &s[3]);
        assert!(names(&mut a).is_empty());
        insert_all(&mut a, 4, &s[1]);
        assert_eq!(names(&mut a), ["S 0.1", "S 0.3"]);
        let st = a.stats();
        assert_eq!(
            (st.frames_complete, st.slices_complete, st.slices_lost),
            (1, 4, 0)
        );
        assert_eq!(a.next_frame(), Some(1));
        // Shards of a slice already complete are unneeded, not late.
        insert_all(&mut a, 5, &s[1][..1]);
        assert_eq!(a.stats().shards_unneeded, 1);
    }

    #[test]
    fn a_sweep_start_sent_in_slices_ends_the_wait_and_every_slice_of_the_sweep_is_held() {
        let period = 4;
        let mut a = Assembler::new(AssemblerConfig {
            refresh_period: period,
            ..Default::default()
        });
        // Joining mid-stream: 5–7 cannot be decoded, 8 starts a sweep; 2 slices per frame.
        for f in 5..13u32 {
            for i in 0..2 {
                let mut s = slice_shards(f, false, i, 2, 1500, 0);
                if f % period == 0 {
                    for (h, _) in s.iter_mut() {
                        h.flags |= shard_flags::REFRESH;
                    }
                }
                insert_all(&mut a, f as u64 * 16_000, &s);
            }
        }
        let mut held = Vec::new();
        let mut not = Vec::new();
        for x in a.drain() {
            match x {
                Assembled::Slice(c) => {
                    assert_eq!(c.refresh_start, c.frame_number % period == 0);
                    held.push((c.frame_number, c.slice.index, c.hold));
                }
                Assembled::Skipped { frame_number } => not.push(frame_number),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(not, vec![5, 6, 7]);
        let expect: Vec<(u32, u8, bool)> = (8..13u32)
            .flat_map(|f| [(f, 0, f < 11), (f, 1, f < 11)])
            .collect();
        assert_eq!(held, expect);
        let st = a.stats();
        assert_eq!((st.refresh_recoveries, st.frames_held), (1, 3));
    }

    #[test]
    fn a_lost_slice_costs_its_region_and_the_stream_goes_on() {
        let mut a = Assembler::new(AssemblerConfig {
            deadline_us: 1000,
            lost_when_overtaken: false,
            ..Default::default()
        });
        for i in 0..4 {
            insert_all(&mut a, 0, &slice_shards(0, true, i, 4, 1500, 0));
        }
        names(&mut a);
        // Frame 1: slice 2 loses a shard; slices 0, 1, 3 arrive.
        let two = slice_shards(1, false, 2, 4, 1500, 0);
        insert_all(&mut a, 10, &two[..1]);
        for i in [0, 1, 3] {
            insert_all(&mut a, 10, &slice_shards(1, false, i, 4, 1500, 0));
        }
        assert_eq!(names(&mut a), ["S 1.0", "S 1.1"]);
        assert_eq!(a.poll_timeout(), Some(1010));
        a.handle_timeout(1010);
        // Slice 2 is given up in its turn, then the last slice closes the picture.
        assert_eq!(names(&mut a), ["L 1.2", "S 1.3"]);
        assert!(!a.needs_keyframe(), "later frames are still delivered");
        for i in 0..4 {
            insert_all(&mut a, 1100, &slice_shards(2, false, i, 4, 1500, 0));
        }
        assert_eq!(names(&mut a), ["S 2.0", "S 2.1", "S 2.2", "S 2.3"]);
        let st = a.stats();
        assert_eq!(
            (st.frames_complete, st.frames_partial, st.frames_lost),
            (2, 1, 0)
        );
        assert_eq!(st.slices_lost, 1);
        // Its late shard is counted as late.
        insert_all(&mut a, 1200, &two[1..]);
        assert_eq!(a.stats().shards_late, 1);
    }

    #[test]
    fn the_hosts_frame_end_gives_up_a_slice_that_never_came() {
        let mut a = Assembler::new(AssemblerConfig::default());
        for i in 0..2 {
            insert_all(&mut a, 0, &slice_shards(0, true, i, 3, 900, 0));
        }
        assert_eq!(names(&mut a), ["S 0.0", "S 0.1"]);
        // The bottom slice never arrives; the host's FrameTiming says the frame was all sent.
        a.frame_sent(100, 0);
        assert_eq!(a.poll_timeout(), Some(100 + FRAME_END_GRACE_US));
        a.handle_timeout(100 + FRAME_END_GRACE_US - 1);
        assert!(names(&mut a).is_empty());
        a.handle_timeout(100 + FRAME_END_GRACE_US);
        assert_eq!(names(&mut a), ["L 0.2"]);
        assert_eq!(a.stats().frames_partial, 1);
        // Frames sent whole keep their deadline.
        let mut b = Assembler::new(AssemblerConfig::default());
        let w = shards(0, true, 2500, 1000);
        insert_all(&mut b, 0, &w[..2]);
        b.frame_sent(10, 0);
        assert_eq!(b.poll_timeout(), Some(50_000));
        // A slice missing shards is a retransmission candidate as soon as the frame ended.
        let mut c = Assembler::new(AssemblerConfig {
            lost_when_overtaken: false,
            ..Default::default()
        });
        let one = slice_shards(0, true, 1, 2, 2500, 0);
        insert_all(&mut c, 0, &one[..1]);
        assert!(c.unrecoverable().is_empty());
        c.frame_sent(5, 0);
        let u = c.unrecoverable();
        assert_eq!(u.len(), 1);
        assert_eq!(
            (u[0].frame_number, u[0].slice, &u[0].missing[..]),
            (0, SliceId { index: 1, count: 2 }, &[1u16, 2][..])
        );
        // Retransmission gives up on it: the rest of the frame goes out.
        insert_all(&mut c, 6, &slice_shards(0, true, 0, 2, 800, 0));
        assert_eq!(names(&mut c), ["S 0.0"]);
        c.abandon_slice(0, SliceId { index: 1, count: 2 });
        assert_eq!(names(&mut c), ["L 0.1"]);
    }

    #[test]
    fn a_frame_without_any_slice_is_lost_whole_and_a_sliced_keyframe_recovers() {
        let mut a = Assembler::new(AssemblerConfig {
            deadline_us: 1000,
            ..Default::default()
        });
        for i in 0..2 {
            insert_all(&mut a, 0, &slice_shards(0, true, i, 2, 1500, 0));
        }
        names(&mut a);
        // Frame 1: one shard of each slice, nothing completes.
        for i in 0..2 {
            insert_all(&mut a, 10, &slice_shards(1, false, i, 2, 1500, 0)[..1]);
        }
        a.handle_timeout(1010);
        assert_eq!(names(&mut a), ["X 1"]);
        assert!(a.needs_keyframe());
        // Frame 2 (not key) is skipped; keyframe 3 is delivered slice by slice.
        insert_all(&mut a, 1020, &slice_shards(2, false, 0, 2, 500, 0));
        assert_eq!(names(&mut a), ["K 2"]);
        insert_all(&mut a, 1030, &slice_shards(3, true, 1, 2, 500, 0));
        insert_all(&mut a, 1031, &slice_shards(3, true, 0, 2, 500, 0));
        assert_eq!(names(&mut a), ["S 3.0", "S 3.1"]);
        assert!(!a.needs_keyframe());
        // A keyframe completing while a frame is half handed over closes that frame first.
        insert_all(&mut a, 1040, &slice_shards(4, false, 0, 2, 500, 0));
        assert_eq!(names(&mut a), ["S 4.0"]);
        insert_all(&mut a, 1041, &slice_shards(6, true, 0, 2, 500, 0));
        assert_eq!(names(&mut a), ["L 4.1", "S 6.0"]);
    }

    #[test]
    fn overtaken_slices_without_retransmission_and_fec_per_slice() {
        let mut a = Assembler::new(AssemblerConfig::default());
        // Each slice carries its own parity: one lost data shard per slice is rebuilt.
        for i in 0..3 {
            let mut s = slice_shards(0, true, i, 3, 2500, 1);
            s.remove(1);
            insert_all(&mut a, 0, &s);
        }
        assert_eq!(names(&mut a), ["S 0.0", "S 0.1", "S 0.2"]);
        assert_eq!(a.stats().frames_recovered_by_fec, 3);
        // Frame 1's slice 1 is incomplete when frame 2's first slice completes: it is lost,
        // and frame 1 is closed in decode order before frame 2 starts.
        insert_all(&mut a, 10, &slice_shards(1, false, 0, 3, 900, 0));
        insert_all(&mut a, 10, &slice_shards(1, false, 1, 3, 2500, 0)[..1]);
        insert_all(&mut a, 10, &slice_shards(1, false, 2, 3, 900, 0));
        assert_eq!(names(&mut a), ["S 1.0"]);
        insert_all(&mut a, 20, &slice_shards(2, false, 0, 3, 900, 0));
        assert_eq!(names(&mut a), ["L 1.1", "S 1.2", "S 2.0"]);
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

        /// Frames in 1–6 slices through loss, reordering and the host's frame-end reports:
        /// every frame ends exactly once — each of its slices handed over or reported lost
        /// once, slice 0 first and the last slice last, or the whole frame lost or skipped —
        /// frames in order, slices bit-exact, nothing handed over while a keyframe is awaited.
        #[test]
        fn slices_come_out_in_decode_order_whatever_the_network_does(
            seed in proptest::prelude::any::<u64>(),
            count in 1u8..=6,
            loss_pct in 0u64..30,
            retransmit in proptest::prelude::any::<bool>(),
        ) {
            let mut rng = crate::sim::SimRng::new(seed);
            let mut a = Assembler::new(AssemblerConfig {
                deadline_us: 20_000,
                lost_when_overtaken: !retransmit,
                ..Default::default()
            });
            let mut pending: Vec<(Micros, ShardHeader, Vec<u8>)> = Vec::new();
            let mut ends: Vec<(Micros, u32)> = Vec::new();
            let frames = 40u32;
            for f in 0..frames {
                let t0 = f as u64 * 16_667;
                for i in 0..count {
                    let len = rng.range(200, 4000) as usize;
                    for (h, p) in slice_shards(f, f % 15 == 0, i, count, len, (rng.range(0, 3) == 0) as usize) {
                        if rng.range(0, 99) >= loss_pct {
                            pending.push((t0 + rng.range(0, 3000) + i as u64 * 500, h, p));
                        }
                    }
                }
                ends.push((t0 + 4000 + rng.range(0, 1000), f));
            }
            pending.sort_by_key(|p| p.0);
            let mut out = Vec::new();
            let mut e = 0;
            for (t, h, p) in &pending {
                while e < ends.len() && ends[e].0 <= *t {
                    a.frame_sent(ends[e].0, ends[e].1);
                    e += 1;
                }
                a.handle_timeout(*t);
                a.insert(*t, h, p);
                out.extend(a.drain());
            }
            a.handle_timeout(frames as u64 * 16_667 + 100_000);
            out.extend(a.drain());
            let mut state: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
            let mut ended: Vec<u32> = Vec::new();
            let mut delivered: Vec<u32> = Vec::new();
            let mut open: Option<u32> = None;
            let mut need_key = false;
            let mut lost_slices: std::collections::BTreeMap<u32, usize> = Default::default();
            for o in &out {
                let (f, idx) = match o {
                    Assembled::Slice(c) => {
                        proptest::prop_assert_eq!(&c.data, &slice_bytes(c.frame_number, c.slice.index, c.data.len()));
                        proptest::prop_assert_eq!(c.slice.count, count);
                        (c.frame_number, Some(c.slice.index))
                    }
                    Assembled::SliceLost { frame_number, slice, .. } => (*frame_number, Some(slice.index)),
                    Assembled::Frame(c) => {
                        proptest::prop_assert_eq!(count, 1);
                        proptest::prop_assert_eq!(&c.data, &slice_bytes(c.frame_number, 0, c.data.len()));
                        (c.frame_number, None)
                    }
                    Assembled::Lost { frame_number, .. } | Assembled::Skipped { frame_number } => (*frame_number, None),
                };
                proptest::prop_assert!(!ended.contains(&f), "frame {} again after it ended: {:?}", f, o);
                if let Some(o) = open {
                    proptest::prop_assert_eq!(f, o, "another frame while frame {} is half handed over: {:?}", o, out.iter().map(|o| match o { Assembled::Slice(c) | Assembled::Frame(c) => format!("S{}.{}", c.frame_number, c.slice.index), Assembled::SliceLost { frame_number, slice, cause } => format!("L{}.{}{:?}", frame_number, slice.index, cause), Assembled::Lost { frame_number, cause } => format!("X{frame_number}{cause:?}"), Assembled::Skipped { frame_number } => format!("K{frame_number}") }).collect::<Vec<_>>());
                }
                // After a frame lost as a whole only a keyframe reaches the decoder.
                match o {
                    Assembled::Lost { .. } => need_key = true,
                    Assembled::Slice(c) | Assembled::Frame(c) => {
                        if need_key {
                            proptest::prop_assert!(c.keyframe, "frame {} without its reference", f);
                        }
                        if c.keyframe {
                            need_key = false;
                        }
                    }
                    _ => {}
                }
                // What reaches the decoder is in frame order (a frame given up without
                // reaching it may be reported after a newer one was skipped).
                if idx.is_some() || matches!(o, Assembled::Frame(_)) {
                    if let Some(&last) = delivered.last() {
                        proptest::prop_assert!(f >= last, "frame {} after frame {}", f, last);
                    }
                    delivered.push(f);
                }
                if let Some(i) = idx {
                    let seen = state.entry(f).or_default();
                    proptest::prop_assert!(!seen.contains(&i), "slice {}.{} twice", f, i);
                    if seen.is_empty() {
                        proptest::prop_assert_eq!(i, 0, "frame {}: slice {} first", f, i);
                    }
                    if i == count - 1 {
                        proptest::prop_assert_eq!(seen.len(), count as usize - 1, "frame {}: the last slice before the others", f);
                    }
                    seen.push(i);
                    if matches!(o, Assembled::SliceLost { .. }) {
                        *lost_slices.entry(f).or_default() += 1;
                    }
                    if seen.len() == count as usize {
                        ended.push(f);
                        open = None;
                        if lost_slices.get(&f) == Some(&(count as usize)) {
                            need_key = true;
                        }
                    } else {
                        open = Some(f);
                    }
                } else {
                    ended.push(f);
                }
            }
            proptest::prop_assert!(open.is_none(), "frame {:?} never ended", open);
            proptest::prop_assert!(a.in_flight() == 0, "{} frames still held: {:?} next {:?} need {}", a.in_flight(),
                a.partial.iter().map(|(k, p)| (*k, p.keyframe, p.slices.iter().map(|s| match s { SliceState::Open(None) => "open-", SliceState::Open(Some(_)) => "open", SliceState::Complete(_) => "complete", SliceState::Delivered => "delivered", SliceState::Lost(_) => "lost", SliceState::Reported => "reported" }).collect::<Vec<_>>())).collect::<Vec<_>>(), a.next, a.need_keyframe);
        }
    }
}
