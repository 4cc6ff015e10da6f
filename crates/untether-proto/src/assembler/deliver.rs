//! Handing frames over in decode order: what happens when a slice or a frame completes
//! (delivered, waiting for older frames, or skipped for want of a reference; a keyframe or
//! an intra-refresh sweep start ending the wait), and each slice handed over in its turn.

use super::parts::{FrameParts, SliceState};
use super::{Assembled, Assembler, AssemblerStats, CompleteFrame, LossCause, SliceId};

impl Assembler {
    /// A slice of `f` (or `f`, sent whole) became complete.
    pub(super) fn on_complete(&mut self, f: u32) {
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
    pub(super) fn deliver(&mut self, f: u32) {
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
    pub(super) fn hand_over(
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

    pub(super) fn advance_past(&mut self, f: u32) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembler::testing::{frames, insert_all, names, shards, slice_shards};
    use crate::assembler::AssemblerConfig;
    use crate::wire::{shard_flags, ShardHeader};

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
}
