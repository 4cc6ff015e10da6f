//! The host's packetizer: a frame (or one slice of it) cut into data shards, the headers of
//! its parity shards, and which slice of how many a shard belongs to ([`SliceId`]).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembler::testing::shards;

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
}
