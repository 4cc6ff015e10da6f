//! The reliable, ordered input channel: every event is delivered exactly once and in order.
//!
//! The sender numbers events 0, 1, 2, …, keeps every unacknowledged one, and resends those
//! whose retransmission timer (RTO = 2 × smoothed RTT, clamped) expired; the receiver delivers
//! in sequence order, buffers events that arrive early (bounded), drops duplicates, and
//! acknowledges cumulatively ("every event below N arrived").

use std::collections::{BTreeMap, VecDeque};

use crate::wire::InputEvent;
use crate::Micros;

/// Most events the sender keeps unacknowledged; beyond this, new events are refused (counted)
/// rather than letting memory grow while the host is unreachable.
pub const MAX_UNACKED: usize = 4096;
/// Most events the receiver buffers ahead of a gap.
pub const MAX_REORDER: usize = 1024;

/// An input event with its sequence number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputRecord {
    pub seq: u32,
    pub event: InputEvent,
}

struct Pending {
    seq: u32,
    event: InputEvent,
    /// When it was last sent; None = not yet sent.
    sent_us: Option<Micros>,
    sends: u32,
}

/// The sending side.
///
/// `pending` holds the unacknowledged events with consecutive sequence numbers; the ones
/// already sent are a prefix of it (events go out in order, the first time). `sent_order`
/// lists the sent ones by the time of their last send, oldest first, so that the events whose
/// RTO expired are found at its front: `due` and `poll_timeout` cost what is due, not what is
/// unacknowledged (up to [`MAX_UNACKED`] during an outage). An entry of `sent_order` whose
/// event was acknowledged or sent again since is stale and skipped. Times are assumed not to
/// go backwards (they come from a monotonic clock); if they did, a retransmission could come
/// late, never twice or out of order.
pub struct ReliableSender {
    next_seq: u32,
    pending: VecDeque<Pending>,
    /// How many events at the front of `pending` were sent at least once.
    sent: usize,
    /// (sequence number, time of send) for every send of a still-pending event, oldest first.
    sent_order: VecDeque<(u32, Micros)>,
    pub retransmissions: u64,
    pub refused: u64,
}

impl Default for ReliableSender {
    fn default() -> Self {
        Self::new()
    }
}

impl ReliableSender {
    pub fn new() -> Self {
        ReliableSender {
            next_seq: 0,
            pending: VecDeque::new(),
            sent: 0,
            sent_order: VecDeque::new(),
            retransmissions: 0,
            refused: 0,
        }
    }

    /// Queues an event; returns its sequence number, or None when too many are unacknowledged.
    pub fn push(&mut self, event: InputEvent) -> Option<u32> {
        if self.pending.len() >= MAX_UNACKED {
            self.refused += 1;
            return None;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.pending.push_back(Pending {
            seq,
            event,
            sent_us: None,
            sends: 0,
        });
        Some(seq)
    }

    /// The next sequence number that [`push`](Self::push) will assign.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    pub fn unacked(&self) -> usize {
        self.pending.len()
    }

    /// Everything below `next_expected` arrived.
    pub fn on_ack(&mut self, next_expected: u32) {
        // Ignore acks for events never sent (a forged or corrupt ack).
        let in_range = |s: u32| next_expected.wrapping_sub(s) as i32 > 0;
        if next_expected.wrapping_sub(self.next_seq) as i32 > 0 {
            return;
        }
        while self.pending.front().is_some_and(|p| in_range(p.seq)) {
            self.pending.pop_front();
            self.sent = self.sent.saturating_sub(1);
        }
        self.drop_stale_front();
        // Stale entries behind a live one wait until they reach the front; compact if they
        // ever outnumber the live ones by far, so the queue stays bounded.
        if self.sent_order.len() > 2 * self.sent + 64 {
            let (pending, front) = (&self.pending, self.pending.front().map(|p| p.seq));
            self.sent_order
                .retain(|&(seq, t)| Self::live(pending, front, seq, t));
        }
    }

    /// Whether a `sent_order` entry is the last send of a still-pending event.
    fn live(pending: &VecDeque<Pending>, front: Option<u32>, seq: u32, t: Micros) -> bool {
        front.is_some_and(|f| {
            pending
                .get(seq.wrapping_sub(f) as usize)
                .is_some_and(|p| p.sent_us == Some(t))
        })
    }

    fn drop_stale_front(&mut self) {
        let front = self.pending.front().map(|p| p.seq);
        while let Some(&(seq, t)) = self.sent_order.front() {
            if Self::live(&self.pending, front, seq, t) {
                break;
            }
            self.sent_order.pop_front();
        }
    }

    /// Events to send now: never-sent ones and those whose RTO expired, as runs of consecutive
    /// sequence numbers, lowest first, at most `max_events` in all.
    pub fn due(
        &mut self,
        now: Micros,
        rto_us: Micros,
        max_events: usize,
    ) -> Vec<(u32, Vec<InputEvent>)> {
        let front = match self.pending.front() {
            Some(p) => p.seq,
            None => return Vec::new(),
        };
        // The expired sends, in time order (their events are all below `self.sent`).
        let mut expired: Vec<(usize, Micros)> = Vec::new();
        while let Some(&(seq, t)) = self.sent_order.front() {
            let live = Self::live(&self.pending, Some(front), seq, t);
            if live && now < t.saturating_add(rto_us) {
                break;
            }
            self.sent_order.pop_front();
            if live {
                expired.push((seq.wrapping_sub(front) as usize, t));
            }
        }
        let mut chosen: Vec<usize> = expired.iter().map(|&(i, _)| i).collect();
        chosen.sort_unstable();
        chosen.dedup();
        chosen.truncate(max_events);
        // Expired ones beyond `max_events` stay due: back to the front, in time order.
        if chosen.len() < expired.len() {
            let last = chosen.last().copied();
            for &(i, t) in expired.iter().rev() {
                if last.is_none_or(|l| i > l) {
                    self.sent_order
                        .push_front((front.wrapping_add(i as u32), t));
                }
            }
        }
        let unsent = (max_events - chosen.len()).min(self.pending.len() - self.sent);
        chosen.extend(self.sent..self.sent + unsent);
        self.sent += unsent;

        let mut runs: Vec<(u32, Vec<InputEvent>)> = Vec::new();
        for i in chosen {
            let Some(p) = self.pending.get_mut(i) else {
                continue;
            };
            if p.sends > 0 {
                self.retransmissions += 1;
            }
            p.sent_us = Some(now);
            p.sends += 1;
            self.sent_order.push_back((p.seq, now));
            match runs.last_mut() {
                Some((first, evs)) if first.wrapping_add(evs.len() as u32) == p.seq => {
                    evs.push(p.event)
                }
                _ => runs.push((p.seq, vec![p.event])),
            }
        }
        runs
    }

    /// When the earliest retransmission falls due (now, if an event was never sent).
    pub fn poll_timeout(&self, rto_us: Micros) -> Option<Micros> {
        if self.sent < self.pending.len() {
            return Some(0);
        }
        let front = self.pending.front().map(|p| p.seq);
        self.sent_order
            .iter()
            .find(|&&(seq, t)| Self::live(&self.pending, front, seq, t))
            .map(|&(_, t)| t.saturating_add(rto_us))
    }
}

/// The receiving side.
pub struct ReliableReceiver {
    next_expected: u32,
    early: BTreeMap<u32, InputEvent>,
    pub duplicates: u64,
    pub dropped_beyond_window: u64,
    /// An ack should be sent.
    pub ack_due: bool,
}

impl Default for ReliableReceiver {
    fn default() -> Self {
        Self::new()
    }
}

impl ReliableReceiver {
    pub fn new() -> Self {
        ReliableReceiver {
            next_expected: 0,
            early: BTreeMap::new(),
            duplicates: 0,
            dropped_beyond_window: 0,
            ack_due: false,
        }
    }

    pub fn next_expected(&self) -> u32 {
        self.next_expected
    }

    /// Takes a run of events starting at `first_seq`; appends what can now be delivered, in
    /// order, to `out`.
    pub fn on_events(&mut self, first_seq: u32, events: &[InputEvent], out: &mut Vec<InputRecord>) {
        self.ack_due = true;
        for (i, e) in events.iter().enumerate() {
            let seq = first_seq.wrapping_add(i as u32);
            let ahead = seq.wrapping_sub(self.next_expected);
            if ahead as i32 >= 0 && ahead as usize <= MAX_REORDER {
                if ahead == 0 {
                    out.push(InputRecord { seq, event: *e });
                    self.next_expected = self.next_expected.wrapping_add(1);
                    while let Some(ev) = self.early.remove(&self.next_expected) {
                        out.push(InputRecord {
                            seq: self.next_expected,
                            event: ev,
                        });
                        self.next_expected = self.next_expected.wrapping_add(1);
                    }
                } else if self.early.insert(seq, *e).is_some() {
                    self.duplicates += 1;
                }
            } else if (ahead as i32) < 0 {
                self.duplicates += 1;
            } else {
                self.dropped_beyond_window += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: u32) -> InputEvent {
        InputEvent::Key { code, down: true }
    }

    #[test]
    fn exactly_once_in_order_through_loss_and_reorder() {
        let mut s = ReliableSender::new();
        let mut r = ReliableReceiver::new();
        let mut got = Vec::new();
        for i in 0..10 {
            s.push(key(i));
        }
        // First transmission: events 3 and 7 are lost, the rest arrive in reverse.
        let runs = s.due(0, 100, 100);
        assert_eq!(runs.len(), 1);
        let (first, evs) = &runs[0];
        for i in (0..evs.len()).rev() {
            if i != 3 && i != 7 {
                r.on_events(first + i as u32, &evs[i..i + 1], &mut got);
            }
        }
        assert_eq!(got.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        s.on_ack(r.next_expected());
        assert_eq!(s.unacked(), 7);
        // Nothing due before the RTO.
        assert!(s.due(50, 100, 100).is_empty());
        // After it: 3..9 resent (all unacked), duplicates dropped.
        let runs = s.due(100, 100, 100);
        for (first, evs) in &runs {
            r.on_events(*first, evs, &mut got);
        }
        assert_eq!(
            got.iter().map(|g| g.seq).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert!(r.duplicates >= 5);
        s.on_ack(r.next_expected());
        assert_eq!(s.unacked(), 0);
        assert_eq!(s.retransmissions, 7);
    }

    #[test]
    fn forged_acks_and_far_future_events_are_ignored() {
        let mut s = ReliableSender::new();
        s.push(key(1));
        s.on_ack(1_000_000);
        assert_eq!(s.unacked(), 1);
        let mut r = ReliableReceiver::new();
        let mut got = Vec::new();
        r.on_events(5_000_000, &[key(1)], &mut got);
        assert!(got.is_empty());
        assert_eq!(r.dropped_beyond_window, 1);
    }

    /// The sender as first written: a scan over every unacknowledged event.
    #[derive(Default)]
    struct ScanSender {
        next_seq: u32,
        pending: VecDeque<(u32, InputEvent, Option<Micros>, u32)>,
        retransmissions: u64,
    }

    impl ScanSender {
        fn push(&mut self, e: InputEvent) {
            self.pending.push_back((self.next_seq, e, None, 0));
            self.next_seq += 1;
        }
        fn on_ack(&mut self, next_expected: u32) {
            if next_expected > self.next_seq {
                return;
            }
            while self.pending.front().is_some_and(|p| p.0 < next_expected) {
                self.pending.pop_front();
            }
        }
        fn due(&mut self, now: Micros, rto: Micros, max: usize) -> Vec<(u32, Vec<InputEvent>)> {
            let mut runs: Vec<(u32, Vec<InputEvent>)> = Vec::new();
            let mut n = 0;
            for p in self.pending.iter_mut() {
                if n >= max {
                    break;
                }
                if p.2.is_some_and(|t| now < t + rto) {
                    continue;
                }
                if p.3 > 0 {
                    self.retransmissions += 1;
                }
                p.2 = Some(now);
                p.3 += 1;
                n += 1;
                match runs.last_mut() {
                    Some((f, evs)) if *f + evs.len() as u32 == p.0 => evs.push(p.1),
                    _ => runs.push((p.0, vec![p.1])),
                }
            }
            runs
        }
        fn poll_timeout(&self, rto: Micros) -> Option<Micros> {
            self.pending
                .iter()
                .map(|p| p.2.map_or(0, |t| t + rto))
                .min()
        }
    }

    /// The time-ordered sender sends exactly what the scan over every pending event sends,
    /// through random pushes, acks (also forged ones), RTO changes and `max_events` limits.
    #[test]
    fn time_ordered_sender_matches_the_scan() {
        for seed in 1..200u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let (mut fast, mut scan) = (ReliableSender::new(), ScanSender::default());
            let (mut now, mut acked) = (0u64, 0u32);
            for _ in 0..600 {
                let rto = 1_000 + rnd(4) * 500;
                match rnd(6) {
                    0 | 1 => {
                        for _ in 0..=rnd(5) {
                            let e = key(rnd(100) as u32);
                            fast.push(e);
                            scan.push(e);
                        }
                    }
                    2 => now += rnd(2_000),
                    3 => {
                        // Acks move forward by what could have arrived; some are forged.
                        let to = if rnd(8) == 0 {
                            fast.next_seq() + 1 + rnd(10) as u32
                        } else {
                            acked + rnd(u64::from(fast.next_seq() - acked) + 1) as u32
                        };
                        fast.on_ack(to);
                        scan.on_ack(to);
                        if to <= fast.next_seq() {
                            acked = acked.max(to);
                        }
                    }
                    _ => {
                        let max = 1 + rnd(6) as usize;
                        assert_eq!(
                            fast.due(now, rto, max),
                            scan.due(now, rto, max),
                            "seed {seed}"
                        );
                    }
                }
                assert_eq!(
                    fast.poll_timeout(rto),
                    scan.poll_timeout(rto),
                    "seed {seed}"
                );
                assert_eq!(fast.unacked(), scan.pending.len());
                assert_eq!(fast.retransmissions, scan.retransmissions);
                assert!(fast.sent_order.len() <= 2 * fast.sent + 64 + 6);
            }
        }
    }

    #[test]
    fn sender_is_bounded() {
        let mut s = ReliableSender::new();
        for i in 0..MAX_UNACKED as u32 {
            assert!(s.push(key(i)).is_some());
        }
        assert!(s.push(key(0)).is_none());
        assert_eq!(s.refused, 1);
    }
}
