//! The stream as the client receives it: shards reassembled into frames and slices, the
//! keyframe requests after a loss (repeated every frame until a keyframe arrives), the
//! ShardNacks of the frames that cannot complete, the frames' interarrival jitter and the
//! feedback to the host. [`Stream`] owns that state while the session is connected.

use std::collections::{BTreeMap, VecDeque};

use super::{ClientConfig, ClientEvent, ClientStats};
use crate::assembler::{Assembled, Assembler, AssemblerConfig, AssemblerStats};
use crate::keyframe::KeyframeRequester;
use crate::window::PacketWindow;
use crate::wire::{ControlFrame, Feedback, SessionParams, ShardHeader};
use crate::Micros;

/// ShardNacks per frame before it is given up.
const MAX_NACKS_PER_FRAME: u8 = 2;

/// Reassembly, keyframe requests, retransmission requests and feedback.
pub(super) struct Stream {
    assembler: Assembler,
    requester: KeyframeRequester,
    /// Ask for the missing shards of a frame that cannot complete (ShardNack).
    retransmit: bool,
    next_feedback_us: Micros,
    feedback_interval_us: Micros,
    /// RFC 3550 interarrival jitter over frames, microseconds.
    jitter_us: f64,
    last_arrival: Option<(Micros, Micros)>,
    /// Retransmission: ShardNacks (SliceNacks) sent per frame and slice (count, last time),
    /// bounded.
    nacks: BTreeMap<(u32, u8), (u8, Micros)>,
    /// When a NACKed frame is due for its retry or its abandonment.
    next_nack_us: Option<Micros>,
}

impl Stream {
    /// The stream of a session accepted at `now` with `params`.
    pub(super) fn new(cfg: &ClientConfig, params: &SessionParams, now: Micros) -> Stream {
        let mut acfg = AssemblerConfig {
            deadline_us: cfg.reassembly_deadline_us,
            ..Default::default()
        };
        acfg.max_frames_in_flight = acfg.max_frames_in_flight.max(4);
        // With retransmission a frame missing shards waits for them (its NACKs decide when
        // to give up), instead of being lost as soon as a newer frame completes.
        acfg.lost_when_overtaken = !cfg.retransmit;
        // A stream that refreshes itself: a sweep start ends the wait for a keyframe.
        acfg.refresh_period = params.refresh_period as u32;
        // The host's datagrams must fit what we said we can receive; shards are bounded by
        // its max_datagram (validated by the Accept's parser).
        let mut requester = KeyframeRequester::new(params.frame_interval_us());
        requester.set_refresh_period(params.refresh_period as u32);
        Stream {
            assembler: Assembler::new(acfg),
            requester,
            retransmit: cfg.retransmit,
            next_feedback_us: now + cfg.feedback_interval_us,
            feedback_interval_us: cfg.feedback_interval_us,
            jitter_us: 0.0,
            last_arrival: None,
            nacks: BTreeMap::new(),
            next_nack_us: None,
        }
    }

    /// A shard of the stream.
    pub(super) fn insert(&mut self, now: Micros, h: &ShardHeader, payload: &[u8]) {
        self.assembler.insert(now, h, payload);
    }

    /// The host's FrameTiming: it leaves the host after the frame's last datagram, the
    /// frame-end signal.
    pub(super) fn frame_sent(&mut self, now: Micros, frame_number: u32) {
        self.assembler.frame_sent(now, frame_number);
    }

    /// The decoder rejected frame `frame_number`: deliver nothing until a keyframe, and ask
    /// for one.
    pub(super) fn decode_failed(&mut self, now: Micros, frame_number: u32) {
        self.assembler.require_keyframe();
        self.requester.on_loss(now, frame_number);
    }

    /// The reassembly deadlines.
    pub(super) fn handle_timeout(&mut self, now: Micros) {
        self.assembler.handle_timeout(now);
    }

    /// The next timer: reassembly, a NACK's retry, a keyframe request or the feedback.
    pub(super) fn poll_timeout(&self) -> Option<Micros> {
        [
            Some(self.next_feedback_us),
            self.assembler.poll_timeout(),
            self.next_nack_us,
            self.requester.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The assembler's counters and the keyframe requests sent.
    pub(super) fn counters(&self) -> (AssemblerStats, u64) {
        (self.assembler.stats(), self.requester.requests_sent)
    }

    /// The feedback due now (every feedback interval): the assembler's counts, the packet
    /// window's, the jitter, the RTT and the decode time.
    pub(super) fn poll_feedback(
        &mut self,
        now: Micros,
        window: &PacketWindow,
        srtt_us: Option<u64>,
        decode_us: u32,
    ) -> Option<Feedback> {
        if now < self.next_feedback_us {
            return None;
        }
        self.next_feedback_us = now + self.feedback_interval_us;
        let a = self.assembler.stats();
        let sat = |v: u64| v.min(u32::MAX as u64) as u32;
        Some(Feedback {
            frames_complete: sat(a.frames_complete),
            frames_lost: sat(a.frames_lost),
            frames_late: sat(a.frames_late),
            datagrams_received: sat(window.received()),
            packets_lost: sat(window.lost()),
            jitter_us: self.jitter_us as u32,
            srtt_us: sat(srtt_us.unwrap_or(0)),
            decode_us,
        })
    }

    /// Retransmission: a ShardNack for each frame that cannot complete, while its deadline
    /// leaves an RTT; at most 2 per frame, an RTT apart. A frame whose NACKs went unanswered
    /// (or that has no time left) is given up at once, so its keyframe request is not late.
    pub(super) fn nack_lost_shards(
        &mut self,
        now: Micros,
        srtt_us: Option<u64>,
        pending: &mut Vec<ControlFrame>,
        stats: &mut ClientStats,
    ) {
        if !self.retransmit {
            return;
        }
        let srtt = srtt_us.unwrap_or(5_000).max(500);
        let deadline = self.assembler.deadline();
        let gap = srtt * 3 / 2 + 1_000;
        self.next_nack_us = None;
        for u in self.assembler.unrecoverable() {
            let (f, slice) = (u.frame_number, u.slice);
            let key = (f, slice.index);
            let (count, last) = self.nacks.get(&key).copied().unwrap_or((0, 0));
            let time_left = now + srtt < u.first_us + deadline;
            let retry_due = count == 0 || now >= last + gap;
            if !retry_due {
                self.next_nack_us =
                    Some(self.next_nack_us.map_or(last + gap, |t| t.min(last + gap)));
                continue;
            }
            if count >= MAX_NACKS_PER_FRAME || !time_left {
                if slice.count > 1 {
                    self.assembler.abandon_slice(f, slice);
                    stats.slices_abandoned += 1;
                } else {
                    self.assembler.abandon(f);
                    stats.frames_abandoned += 1;
                }
                continue;
            }
            self.nacks.insert(key, (count + 1, now));
            self.next_nack_us = Some(self.next_nack_us.map_or(now + gap, |t| t.min(now + gap)));
            while self.nacks.len() > 256 {
                self.nacks.pop_first();
            }
            stats.shard_nacks_sent += 1;
            let mut missing = u.missing;
            missing.truncate(crate::wire::MAX_NACK_SHARDS);
            pending.push(if slice.count > 1 {
                ControlFrame::SliceNack {
                    frame_number: f,
                    slice_index: slice.index,
                    missing,
                }
            } else {
                ControlFrame::ShardNack {
                    frame_number: f,
                    missing,
                }
            });
        }
    }

    /// Hands what the assembler finished to the application as events, in order; a loss
    /// starts the keyframe requests (the first may go out at once).
    pub(super) fn drain(
        &mut self,
        now: Micros,
        events: &mut VecDeque<ClientEvent>,
        pending: &mut Vec<ControlFrame>,
    ) {
        let mut loss = false;
        for a in self.assembler.drain() {
            match a {
                Assembled::Frame(f) => {
                    if !f.hold {
                        // A picture that can be shown (a keyframe, a frame in an intact chain,
                        // the end of a recovery sweep): nothing to ask for. A held frame is a
                        // sweep under way: the request waits on (a sweep can fail too).
                        self.requester.on_keyframe();
                    }
                    note_arrival(
                        &mut self.jitter_us,
                        &mut self.last_arrival,
                        f.first_shard_us,
                        f.capture_us,
                    );
                    events.push_back(ClientEvent::Frame(f));
                }
                Assembled::Slice(f) => {
                    // A keyframe's first slice ends the wait; a loss in it (reported after)
                    // asks again.
                    if f.keyframe && f.slice.index == 0 {
                        self.requester.on_keyframe();
                    }
                    if f.slice.index == 0 {
                        note_arrival(
                            &mut self.jitter_us,
                            &mut self.last_arrival,
                            f.first_shard_us,
                            f.capture_us,
                        );
                    }
                    events.push_back(ClientEvent::Slice(f));
                }
                Assembled::SliceLost {
                    frame_number,
                    slice,
                    cause,
                } => {
                    // The region stays concealed until a keyframe repairs it.
                    self.requester.on_loss(now, frame_number);
                    loss = true;
                    events.push_back(ClientEvent::SliceLost {
                        frame_number,
                        slice,
                        cause,
                    });
                }
                Assembled::Lost {
                    frame_number,
                    cause,
                } => {
                    self.requester.on_loss(now, frame_number);
                    loss = true;
                    events.push_back(ClientEvent::FrameLost {
                        frame_number,
                        cause,
                    });
                }
                Assembled::Skipped { frame_number } => {
                    self.requester.on_loss(now, frame_number);
                    loss = true;
                    events.push_back(ClientEvent::FrameSkipped { frame_number });
                }
            }
        }
        if loss {
            self.request_keyframe(now, pending);
        }
    }

    /// The keyframe request due now, if a keyframe is awaited (repeated every frame interval
    /// until one arrives).
    pub(super) fn request_keyframe(&mut self, now: Micros, pending: &mut Vec<ControlFrame>) {
        if let Some(lost_frame) = self.requester.poll(now) {
            pending.push(ControlFrame::KeyframeRequest { lost_frame });
        }
    }
}

/// RFC 3550 jitter: the variation of (arrival − capture) between frames.
fn note_arrival(
    jitter_us: &mut f64,
    last: &mut Option<(Micros, Micros)>,
    arrival_us: Micros,
    capture_us: Micros,
) {
    if let Some((pa, pc)) = *last {
        // In i128: the capture times come from the wire (any u64); found by fuzzing
        // (client_datagrams: `attempt to subtract with overflow` in i64).
        let d = (arrival_us as i128 - pa as i128) - (capture_us as i128 - pc as i128);
        *jitter_us += (d.unsigned_abs() as f64 - *jitter_us) / 16.0;
    }
    *last = Some((arrival_us, capture_us));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_of_any_capture_times_from_the_wire_does_not_overflow() {
        let (mut j, mut last) = (0.0, None);
        note_arrival(&mut j, &mut last, 1_000, u64::MAX);
        note_arrival(&mut j, &mut last, 2_000, 0);
        note_arrival(&mut j, &mut last, 3_000, u64::MAX);
        assert!(j.is_finite() && j > 0.0, "{j}");
    }
    use crate::assembler::shard_frame;

    /// Frame `f`'s shards (3 data shards, no parity), captured at `f` ms.
    fn shards(f: u32, keyframe: bool) -> Vec<(ShardHeader, Vec<u8>)> {
        let data: Vec<u8> = (0..2500).map(|i| (i as u32 ^ f) as u8).collect();
        shard_frame(f, f as u64 * 1000, keyframe, data.len(), 1000)
            .map(|(h, r)| (h, data[r].to_vec()))
            .collect()
    }

    fn stream(retransmit: bool) -> Stream {
        let mut cfg = ClientConfig::new("unit");
        cfg.retransmit = retransmit;
        Stream::new(&cfg, &super::super::test_params(), 0)
    }

    /// Drains the stream: its events and the frames it asks to send.
    fn drain(s: &mut Stream, now: Micros) -> (Vec<ClientEvent>, Vec<ControlFrame>) {
        let (mut events, mut pending) = (VecDeque::new(), Vec::new());
        s.drain(now, &mut events, &mut pending);
        (events.into(), pending)
    }

    fn delivered(events: &[ClientEvent]) -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                ClientEvent::Frame(f) => Some(f.frame_number),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_out_of_order_shard_completes_a_frame() {
        let mut s = stream(false);
        let mut sh = shards(0, true);
        sh.swap(0, 2);
        let (last, rest) = sh.split_last().unwrap();
        for (h, p) in rest {
            s.insert(1_000, h, p);
        }
        assert!(drain(&mut s, 1_000).0.is_empty());
        s.insert(2_000, &last.0, &last.1);
        let (events, pending) = drain(&mut s, 2_000);
        let [ClientEvent::Frame(f)] = &events[..] else {
            panic!("{events:?}");
        };
        let whole: Vec<u8> = (0..2500).map(|i| i as u8).collect();
        assert_eq!((f.frame_number, &f.data[..]), (0, &whole[..]));
        assert!(pending.is_empty());
        assert_eq!(s.counters().0.frames_complete, 1);
    }

    #[test]
    fn a_keyframe_request_is_repeated_every_frame_until_a_keyframe_arrives() {
        let mut s = stream(false);
        let interval = super::super::test_params().frame_interval_us();
        for (h, p) in shards(0, true) {
            s.insert(0, &h, &p);
        }
        assert_eq!(delivered(&drain(&mut s, 0).0), vec![0]);
        // Frame 1 never arrives; frame 2 completes, and 1 is lost once 2 is overtaken.
        for (h, p) in shards(2, false) {
            s.insert(30_000, &h, &p);
        }
        s.handle_timeout(30_000 + 60_000);
        let (events, pending) = drain(&mut s, 90_000);
        assert!(
            events.iter().any(|e| matches!(
                e,
                ClientEvent::FrameLost {
                    frame_number: 1,
                    ..
                }
            )),
            "{events:?}"
        );
        let first = match pending[..] {
            [ControlFrame::KeyframeRequest { lost_frame }] => lost_frame,
            _ => panic!("{pending:?}"),
        };
        assert!(first >= 1);
        // Repeated every frame interval, not sooner.
        let mut pending = Vec::new();
        s.request_keyframe(90_000 + interval - 1, &mut pending);
        assert!(pending.is_empty());
        assert_eq!(s.requester.poll_timeout(), Some(90_000 + interval));
        for k in 1..=3 {
            s.request_keyframe(90_000 + k * interval, &mut pending);
        }
        assert_eq!(
            pending,
            vec![ControlFrame::KeyframeRequest { lost_frame: first }; 3]
        );
        // A keyframe ends the requests.
        for (h, p) in shards(3, true) {
            s.insert(200_000, &h, &p);
        }
        assert_eq!(delivered(&drain(&mut s, 200_000).0), vec![3]);
        let mut pending = Vec::new();
        s.request_keyframe(1_000_000, &mut pending);
        assert!(pending.is_empty());
        assert_eq!(s.counters().1, 4);
    }

    #[test]
    fn a_frame_that_cannot_complete_is_nacked_twice_then_given_up() {
        let mut s = stream(true);
        let mut stats = ClientStats::default();
        for (h, p) in shards(0, true) {
            s.insert(0, &h, &p);
        }
        drain(&mut s, 0);
        // Frame 1 misses its middle shard (its last shard came: nothing more will).
        let sh = shards(1, false);
        s.insert(1_000, &sh[0].0, &sh[0].1);
        s.insert(1_000, &sh[2].0, &sh[2].1);
        let srtt = Some(2_000);
        let gap = 2_000 * 3 / 2 + 1_000;
        let mut pending = Vec::new();
        s.nack_lost_shards(2_000, srtt, &mut pending, &mut stats);
        assert_eq!(
            pending,
            vec![ControlFrame::ShardNack {
                frame_number: 1,
                missing: vec![1]
            }]
        );
        // Not again before the gap; then a second time; then given up.
        pending.clear();
        s.nack_lost_shards(2_000 + gap - 1, srtt, &mut pending, &mut stats);
        assert!(pending.is_empty());
        assert_eq!(s.poll_timeout(), Some(2_000 + gap));
        s.nack_lost_shards(2_000 + gap, srtt, &mut pending, &mut stats);
        assert_eq!(pending.len(), 1);
        pending.clear();
        s.nack_lost_shards(2_000 + 2 * gap, srtt, &mut pending, &mut stats);
        assert!(pending.is_empty());
        assert_eq!((stats.shard_nacks_sent, stats.frames_abandoned), (2, 1));
        let (events, pending) = drain(&mut s, 2_000 + 2 * gap);
        assert!(
            events.iter().any(|e| matches!(
                e,
                ClientEvent::FrameLost {
                    frame_number: 1,
                    ..
                }
            )),
            "{events:?}"
        );
        assert_eq!(
            pending,
            vec![ControlFrame::KeyframeRequest { lost_frame: 1 }]
        );
    }

    #[test]
    fn without_retransmission_nothing_is_nacked() {
        let mut s = stream(false);
        let mut stats = ClientStats::default();
        // A frame that cannot complete.
        let sh = shards(0, true);
        s.insert(0, &sh[0].0, &sh[0].1);
        s.insert(0, &sh[2].0, &sh[2].1);
        assert_eq!(s.assembler.unrecoverable().len(), 1);
        let mut pending = Vec::new();
        s.nack_lost_shards(200, None, &mut pending, &mut stats);
        assert!(pending.is_empty());
        assert_eq!(stats.shard_nacks_sent, 0);
    }

    #[test]
    fn feedback_is_due_every_interval_with_the_streams_counts_and_jitter() {
        let cfg = ClientConfig::new("unit");
        let mut s = stream(false);
        // Frame 0 arrives 1 ms after capture, frame 1 5 ms after: 4 ms of variation.
        for f in 0..2u32 {
            for (h, p) in shards(f, f == 0) {
                s.insert(f as u64 * 1000 + 1_000 + f as u64 * 4_000, &h, &p);
            }
        }
        drain(&mut s, 10_000);
        let window = PacketWindow::new();
        assert_eq!(
            s.poll_feedback(cfg.feedback_interval_us - 1, &window, None, 0),
            None
        );
        let fb = s
            .poll_feedback(cfg.feedback_interval_us, &window, Some(3_000), 700)
            .unwrap();
        assert_eq!(
            (fb.frames_complete, fb.srtt_us, fb.decode_us, fb.jitter_us),
            (2, 3_000, 700, 4_000 / 16)
        );
        assert_eq!(
            s.poll_feedback(2 * cfg.feedback_interval_us - 1, &window, None, 0),
            None
        );
        assert!(s
            .poll_feedback(2 * cfg.feedback_interval_us, &window, None, 0)
            .is_some());
    }
}
