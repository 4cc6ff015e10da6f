//! Shards and readers of the assembler's output that its unit tests share.

use super::{parity_header, shard_frame, shard_slice_fec, Assembled, Assembler, SliceId};
use crate::wire::ShardHeader;
use crate::Micros;

pub(super) fn shards(f: u32, key: bool, len: usize, max: usize) -> Vec<(ShardHeader, Vec<u8>)> {
    let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ f) as u8).collect();
    shard_frame(f, 1000 + f as u64, key, len, max)
        .map(|(h, r)| (h, data[r].to_vec()))
        .collect()
}

pub(super) fn frames(out: &mut Assembler) -> Vec<Assembled> {
    out.drain().collect()
}

pub(super) fn parse_and_insert(a: &mut Assembler, now: Micros, h: &ShardHeader, p: &[u8]) -> bool {
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

/// The shards of slice `i` of `n` of frame `f` (`len` bytes, 1000-byte shards, `m` parity).
pub(super) fn slice_shards(
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

pub(super) fn slice_bytes(f: u32, i: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32 ^ f ^ ((i as u32) << 5)) as u8)
        .collect()
}

/// What came out, as short strings: `S f.i` a slice, `L f.i` a slice lost, `F f` a frame,
/// `X f` a frame lost, `K f` a frame skipped.
pub(super) fn names(a: &mut Assembler) -> Vec<String> {
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

pub(super) fn insert_all(a: &mut Assembler, now: Micros, shards: &[(ShardHeader, Vec<u8>)]) {
    for (h, p) in shards {
        assert!(parse_and_insert(a, now, h, p));
    }
}
