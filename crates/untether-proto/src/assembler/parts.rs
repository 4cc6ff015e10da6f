//! What the assembler holds of each frame in flight: its slices' states ([`SliceState`],
//! [`FrameParts`]) and each slice's shards and parity as they arrive ([`Partial`]).

use super::LossCause;
use crate::wire::ShardHeader;
use crate::Micros;

/// One slice (or a frame sent whole) being assembled: its shards and parity.
pub(super) struct Partial {
    pub(super) header: ShardHeader,
    pub(super) first_us: Micros,
    pub(super) last_us: Micros,
    pub(super) data: Vec<u8>,
    pub(super) received: Vec<bool>,
    pub(super) data_received: u16,
    /// Parity shards, `parity_count × shard_len` bytes, allocated with the first one.
    pub(super) parity: Vec<u8>,
    pub(super) parity_received: u16,
    pub(super) shards: u16,
    /// The highest shard index seen (the host sends a slice's shards in index order).
    pub(super) max_index: u16,
}

impl Partial {
    pub(super) fn new(h: &ShardHeader, now: Micros) -> Partial {
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
    pub(super) fn reserved_bytes(h: &ShardHeader) -> usize {
        h.frame_bytes as usize + h.parity_count as usize * h.shard_len as usize
    }

    pub(super) fn bytes(&self) -> usize {
        self.data.len() + self.parity.len()
    }

    pub(super) fn complete(&self) -> bool {
        self.data_received == self.header.data_count
    }

    pub(super) fn consistent(&self, h: &ShardHeader) -> bool {
        let a = &self.header;
        a.data_count == h.data_count
            && a.parity_count == h.parity_count
            && a.shard_len == h.shard_len
            && a.frame_bytes == h.frame_bytes
    }

    /// Fewer data + parity shards than it needs although all should be here.
    pub(super) fn unrecoverable(&self) -> bool {
        !self.complete() && self.data_received + self.parity_received < self.header.data_count
    }

    pub(super) fn all_sent(&self) -> bool {
        self.max_index + 1 >= self.header.data_count + self.header.parity_count
    }
}

/// Where a slice stands.
pub(super) enum SliceState {
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
    pub(super) fn done(&self) -> bool {
        matches!(self, SliceState::Delivered | SliceState::Reported)
    }
}

/// A frame being assembled: its slices (one for a frame sent whole).
pub(super) struct FrameParts {
    pub(super) count: u8,
    pub(super) keyframe: bool,
    /// An intra-refresh sweep starts with it.
    pub(super) refresh_start: bool,
    pub(super) capture_us: Micros,
    /// The first shard of any of its slices.
    pub(super) first_us: Micros,
    pub(super) slices: Vec<SliceState>,
    /// Slices handed over so far.
    pub(super) delivered: u8,
    /// Slices given up so far (reported or not).
    pub(super) lost: u8,
    /// When the host's report that the frame was all sent arrived (frames sent in slices).
    pub(super) sent_us: Option<Micros>,
}

impl FrameParts {
    pub(super) fn new(h: &ShardHeader, now: Micros) -> FrameParts {
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

    pub(super) fn consistent(&self, h: &ShardHeader) -> bool {
        self.count == h.slice_count
            && self.capture_us == h.capture_us
            && self.keyframe == h.keyframe()
            && self.refresh_start == h.refresh_start()
    }

    pub(super) fn sliced(&self) -> bool {
        self.count > 1
    }

    pub(super) fn bytes(&self) -> usize {
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
    pub(super) fn started(&self) -> bool {
        self.delivered > 0
            || self
                .slices
                .iter()
                .any(|s| matches!(s, SliceState::Reported))
    }

    pub(super) fn any_complete(&self) -> bool {
        self.slices
            .iter()
            .any(|s| matches!(s, SliceState::Complete(_)))
    }

    /// Every slice complete (nothing delivered or lost yet): a whole frame's only way.
    pub(super) fn all_complete(&self) -> bool {
        self.slices
            .iter()
            .all(|s| matches!(s, SliceState::Complete(_)))
    }

    /// Gives up every slice still open; returns how many.
    pub(super) fn lose_open(&mut self, cause: LossCause) -> u8 {
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
