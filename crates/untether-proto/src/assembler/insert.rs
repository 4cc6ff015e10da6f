//! [`Assembler::insert`]: a shard into its frame and slice, with the bounds on frames and
//! bytes in flight, the counting of duplicate, late, inconsistent and unneeded shards, and
//! FEC recovery of a slice's missing data shards from its parity.

use super::parts::{FrameParts, Partial, SliceState};
use super::{Assembler, AssemblerStats, LossCause};
use crate::fec::FecDecoder;
use crate::wire::ShardHeader;
use crate::Micros;

impl Assembler {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembler::testing::{frames, parse_and_insert, shards};
    use crate::assembler::{parity_header, shard_frame_fec, Assembled, AssemblerConfig};
    use crate::wire::shard_flags;

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
