//! Giving frames and slices up: at their deadline, at the host's report that a frame was all
//! sent ([`FRAME_END_GRACE_US`] later), when retransmission abandons them, or when something
//! newer moves the stream on; a frame sent in slices is then still delivered in part.

use super::{Assembled, Assembler, LossCause, SliceId, SliceState, FRAME_END_GRACE_US};
use crate::Micros;

impl Assembler {
    /// Frame `f` is lost as a whole.
    pub(super) fn give_up(&mut self, f: u32, cause: LossCause) {
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

    /// A frame partly handed over before `f` is finished first (its ready slices handed over,
    /// the rest reported lost): the decoder hears the end of it before anything newer.
    pub(super) fn close_open_before(&mut self, f: u32) {
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
    pub(super) fn close(&mut self, f: u32, cause: LossCause) {
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
    pub(super) fn count_ended(&mut self, lost: u8, delivered: u8) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembler::testing::{frames, insert_all, names, shards, slice_bytes, slice_shards};
    use crate::assembler::AssemblerConfig;
    use crate::wire::ShardHeader;

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
