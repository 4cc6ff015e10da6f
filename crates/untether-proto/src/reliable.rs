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
pub struct ReliableSender {
    next_seq: u32,
    pending: VecDeque<Pending>,
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
        }
    }

    /// Events to send now: never-sent ones and those whose RTO expired, as runs of consecutive
    /// sequence numbers, at most `max_events` in all.
    pub fn due(
        &mut self,
        now: Micros,
        rto_us: Micros,
        max_events: usize,
    ) -> Vec<(u32, Vec<InputEvent>)> {
        let mut runs: Vec<(u32, Vec<InputEvent>)> = Vec::new();
        let mut n = 0;
        for p in self.pending.iter_mut() {
            if n >= max_events {
                break;
            }
            let due = match p.sent_us {
                None => true,
                Some(t) => now >= t + rto_us,
            };
            if !due {
                continue;
            }
            if p.sends > 0 {
                self.retransmissions += 1;
            }
            p.sent_us = Some(now);
            p.sends += 1;
            n += 1;
            match runs.last_mut() {
                Some((first, evs)) if first.wrapping_add(evs.len() as u32) == p.seq => {
                    evs.push(p.event)
                }
                _ => runs.push((p.seq, vec![p.event])),
            }
        }
        runs
    }

    /// When the earliest retransmission falls due.
    pub fn poll_timeout(&self, rto_us: Micros) -> Option<Micros> {
        self.pending
            .iter()
            .map(|p| p.sent_us.map_or(0, |t| t + rto_us))
            .min()
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
