//! The header of a video shard (docs/PROTOCOL.md §6) and its flag bits.

use super::{bad, Put, Reader, WireError, MAX_FRAME_BYTES};

/// Shard flag bits.
pub mod shard_flags {
    /// The frame is a keyframe (IDR): decodable without any earlier frame.
    pub const KEYFRAME: u8 = 1 << 0;
    /// This shard carries Reed–Solomon parity, not frame bytes.
    pub const PARITY: u8 = 1 << 1;
    /// This is a retransmission.
    pub const RETRANSMIT: u8 = 1 << 2;
    /// An intra-refresh sweep starts with this frame (sessions with a refresh period): a client
    /// waiting for a clean picture decodes from here and shows the picture `refresh_period − 1`
    /// frames later.
    pub const REFRESH: u8 = 1 << 3;
}

/// The header of one video shard.
///
/// A frame is sent as `slice_count` **slices** (1: whole), each cut into its own shards and
/// protected by its own parity: the shard counts, `shard_len` and `frame_bytes` describe the
/// shard's slice (the whole frame when `slice_count` is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// Counts encoded frames of this session from 0.
    pub frame_number: u32,
    pub flags: u8,
    /// The slice this shard belongs to, `0..slice_count`, top to bottom.
    pub slice_index: u8,
    /// How many slices the frame has (1 to [`MAX_SLICES`]; 1: the frame is sent whole). On
    /// the wire both share one byte: `(slice_count − 1) << 4 | slice_index`.
    ///
    /// [`MAX_SLICES`]: super::MAX_SLICES
    pub slice_count: u8,
    /// 0..data_count are data shards, data_count..data_count+parity_count parity shards.
    pub shard_index: u16,
    pub data_count: u16,
    pub parity_count: u16,
    /// Length of every shard but the last data shard (which may be shorter on the wire).
    pub shard_len: u16,
    /// Exact length of the slice's bytes (the frame's, sent whole).
    pub frame_bytes: u32,
    /// When the frame was captured, host clock, microseconds.
    pub capture_us: u64,
}

impl ShardHeader {
    pub fn keyframe(&self) -> bool {
        self.flags & shard_flags::KEYFRAME != 0
    }
    /// An intra-refresh sweep starts with this frame.
    pub fn refresh_start(&self) -> bool {
        self.flags & shard_flags::REFRESH != 0
    }
    pub fn is_parity(&self) -> bool {
        self.shard_index >= self.data_count
    }

    /// The payload length this shard must have.
    pub fn expected_len(&self) -> usize {
        let l = self.shard_len as usize;
        if self.shard_index + 1 == self.data_count {
            self.frame_bytes as usize - (self.data_count as usize - 1) * l
        } else {
            l
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.frame_number);
        out.put_u8(self.flags);
        out.put_u8((self.slice_count.saturating_sub(1) & 0x0F) << 4 | (self.slice_index & 0x0F));
        out.put_u16(self.shard_index);
        out.put_u16(self.data_count);
        out.put_u16(self.parity_count);
        out.put_u16(self.shard_len);
        out.put_u32(self.frame_bytes);
        out.put_u64(self.capture_us);
    }

    /// Parses and validates a shard: the header's fields agree with each other and with the
    /// payload's length.
    pub fn parse(body: &[u8]) -> Result<(ShardHeader, &[u8]), WireError> {
        let mut r = Reader::new(body, "shard header");
        let frame_number = r.u32()?;
        let flags = r.u8()?;
        let slice = r.u8()?;
        let h = ShardHeader {
            frame_number,
            flags,
            slice_index: slice & 0x0F,
            slice_count: (slice >> 4) + 1,
            shard_index: r.u16()?,
            data_count: r.u16()?,
            parity_count: r.u16()?,
            shard_len: r.u16()?,
            frame_bytes: r.u32()?,
            capture_us: r.u64()?,
        };
        let payload = r.rest();
        if h.slice_index >= h.slice_count {
            return Err(bad("shard.slice", "slice_index is not below slice_count"));
        }
        if h.data_count == 0 || h.shard_len == 0 {
            return Err(bad(
                "shard.data_count",
                "a frame has at least one data shard of non-zero length",
            ));
        }
        if h.shard_index as u32 >= h.data_count as u32 + h.parity_count as u32 {
            return Err(bad("shard.shard_index", "beyond data_count + parity_count"));
        }
        if h.frame_bytes == 0 || h.frame_bytes > MAX_FRAME_BYTES {
            return Err(bad("shard.frame_bytes", "zero or above the 16 MiB limit"));
        }
        let full = (h.data_count as u64 - 1) * h.shard_len as u64;
        if (h.frame_bytes as u64) <= full || (h.frame_bytes as u64) > full + h.shard_len as u64 {
            return Err(bad(
                "shard.frame_bytes",
                "does not match data_count × shard_len",
            ));
        }
        if h.parity_count > 0
            && (h.parity_count > h.data_count
                || h.data_count as usize > crate::fec::MAX_FEC_DATA_SHARDS
                || !h.shard_len.is_multiple_of(2))
        {
            return Err(bad(
                "shard.parity_count",
                "parity needs parity_count ≤ data_count ≤ 32768 and an even shard_len",
            ));
        }
        if (h.flags & shard_flags::PARITY != 0) != h.is_parity() {
            return Err(bad("shard.flags", "parity flag disagrees with shard_index"));
        }
        if payload.len() != h.expected_len() {
            return Err(bad("shard.payload", "length disagrees with the header"));
        }
        Ok((h, payload))
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::*;
    use proptest::prelude::*;

    /// The shard headers' test vectors of docs/PROTOCOL.md (a whole frame and a frame in slices).
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
        // A shard: frame 5, keyframe, data shard 1 of 2, no parity, 1000-byte shards,
        // 1500-byte frame, captured at 1 000 000 µs; payload 500 bytes of 0xEE.
        let sh = ShardHeader {
            frame_number: 5,
            flags: shard_flags::KEYFRAME,
            slice_index: 0,
            slice_count: 1,
            shard_index: 1,
            data_count: 2,
            parity_count: 0,
            shard_len: 1000,
            frame_bytes: 1500,
            capture_us: 1_000_000,
        };
        let mut out = Vec::new();
        Header::new(PacketType::Shard, 7, 3).write(&mut out);
        sh.write(&mut out);
        assert_eq!(h(&out), v::SHARD_HEADER);
        out.extend(std::iter::repeat_n(0xEE, 500));
        let (sh2, payload) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
        assert_eq!((sh2, payload), (sh, &[0xEE; 500][..]));
        // A frame in slices: parity shard 0 of slice 2 of 4 of P-frame 9 (3 data shards of
        // 1000 bytes, a 2500-byte slice), captured at 2 000 000 µs.
        let sh = ShardHeader {
            frame_number: 9,
            flags: shard_flags::PARITY,
            slice_index: 2,
            slice_count: 4,
            shard_index: 3,
            data_count: 3,
            parity_count: 1,
            shard_len: 1000,
            frame_bytes: 2500,
            capture_us: 2_000_000,
        };
        let mut out = Vec::new();
        Header::new(PacketType::Shard, 7, 4).write(&mut out);
        sh.write(&mut out);
        assert_eq!(h(&out), v::SLICE_SHARD_HEADER);
        out.extend(std::iter::repeat_n(0xEE, 1000));
        let (sh2, _) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
        assert_eq!(sh2, sh);
        // An index beyond the count is refused.
        let mut out = Vec::new();
        sh.write(&mut out);
        out[5] = 0x34;
        out.extend(std::iter::repeat_n(0xEE, 1000));
        assert!(ShardHeader::parse(&out).is_err(), "slice 4 of 4");
        out[5] = 0xF0;
        assert_eq!(ShardHeader::parse(&out).map(|(h, _)| h.slice_count), Ok(16));
    }

    proptest! {
        #[test]
        fn shard_round_trips(frame_number in any::<u32>(), key in any::<bool>(), data_count in 1u16..300, parity_count in 0u16..60,
                             shard_len in 1u16..1400, last_fill in 1u16..1400, idx in any::<u16>(), capture_us in any::<u64>(),
                             slice_count in 1u8..=MAX_SLICES, slice_seed in any::<u8>()) {
            // Parity: at most data_count shards, and an even shard_len.
            let parity_count = parity_count.min(data_count);
            let shard_len = if parity_count > 0 { (shard_len & !1).max(2) } else { shard_len };
            let last = last_fill.min(shard_len);
            let frame_bytes = (data_count as u32 - 1) * shard_len as u32 + last as u32;
            let shard_index = idx % (data_count + parity_count);
            let parity = shard_index >= data_count;
            let h = ShardHeader {
                frame_number,
                flags: (key as u8) | if parity { shard_flags::PARITY } else { 0 },
                slice_index: slice_seed % slice_count,
                slice_count,
                shard_index,
                data_count,
                parity_count,
                shard_len,
                frame_bytes,
                capture_us,
            };
            let payload = vec![7u8; h.expected_len()];
            let mut out = Vec::new();
            Header::new(PacketType::Shard, 1, 2).write(&mut out);
            h.write(&mut out);
            out.extend_from_slice(&payload);
            let (h2, p2) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
            prop_assert_eq!((h2, p2), (h, &payload[..]));
        }
    }
}
