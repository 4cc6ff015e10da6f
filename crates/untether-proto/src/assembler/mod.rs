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
//! [`ShardHeader::refresh_start`]: crate::wire::ShardHeader::refresh_start
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
//!
//! The parts: the host's packetizer (`shard.rs`), what the assembler hands over
//! (`output.rs`), what it holds of each frame in flight (`parts.rs`), and the [`Assembler`]
//! itself: here its state and queries, with its work in three files: taking a shard in
//! (`insert.rs`), handing frames over in decode order (`deliver.rs`), and giving frames and
//! slices up (`loss.rs`).

mod deliver;
mod insert;
mod loss;
mod output;
mod parts;
mod shard;

use std::collections::BTreeMap;

use crate::fec::FecDecoder;
use crate::Micros;
use parts::{FrameParts, SliceState};

pub use output::{Assembled, CompleteFrame, LossCause, Unrecoverable};
pub use shard::{
    max_frame_bytes, parity_header, shard_frame, shard_frame_fec, shard_slice_fec, SliceId,
};

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
mod testing;
