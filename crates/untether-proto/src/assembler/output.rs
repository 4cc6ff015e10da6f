//! What the assembler hands over: complete frames and slices ([`CompleteFrame`]), the
//! frames and slices it gives up with their cause ([`Assembled`], [`LossCause`]), and the
//! slices that a retransmission request should name ([`Unrecoverable`]).

use super::SliceId;
use crate::Micros;

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
