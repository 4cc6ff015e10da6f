//! The receiving side of the state channel ([`StateReceiver`]): the newest value of each key,
//! applied only from a packet newer than the one that last set it, and the history of packet
//! ids received that its acks ([`StateAck`]) report.

use std::collections::{BTreeMap, VecDeque};

use super::{StateAck, StateKey, StatePacket, StateValue, MAX_HISTORY, MAX_KEYS, MAX_RUNS};
use crate::Micros;

/// A key's value at the receiver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StateEntry {
    pub value: StateValue,
    /// The packet that set it.
    pub pid: u32,
    /// When it arrived (receiver's clock).
    pub received_us: Micros,
}

/// Counters of the receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateReceiverStats {
    pub packets_received: u64,
    pub entries_applied: u64,
    /// Entries older than the key's current value (late or duplicated packets).
    pub entries_stale: u64,
    pub entries_refused: u64,
    pub acks_built: u64,
}

/// The receiving side of the state channel: the newest value of every key.
pub struct StateReceiver {
    table: BTreeMap<StateKey, StateEntry>,
    /// History starts here (the sender's Ank id).
    base: u32,
    /// received[i]: pid base + i arrived.
    received: VecDeque<bool>,
    ack_due: bool,
    changes: u64,
    stats: StateReceiverStats,
}

impl Default for StateReceiver {
    fn default() -> Self {
        Self::new()
    }
}

impl StateReceiver {
    pub fn new() -> Self {
        StateReceiver {
            table: BTreeMap::new(),
            base: 0,
            received: VecDeque::new(),
            ack_due: false,
            changes: 0,
            stats: StateReceiverStats::default(),
        }
    }

    pub fn stats(&self) -> StateReceiverStats {
        self.stats
    }

    /// The newest value of a key.
    pub fn get(&self, key: StateKey) -> Option<&StateEntry> {
        self.table.get(&key)
    }

    /// Every key and its newest value.
    pub fn iter(&self) -> impl Iterator<Item = (StateKey, &StateEntry)> {
        self.table.iter().map(|(k, v)| (*k, v))
    }

    /// Counts applied changes: compare with an earlier value to see whether anything changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Length of the ACK/NAK history (bounded by [`MAX_HISTORY`]).
    pub fn history_len(&self) -> usize {
        self.received.len()
    }

    fn forget_below(&mut self, pid: u32) {
        while self.base < pid && !self.received.is_empty() {
            self.received.pop_front();
            self.base += 1;
        }
        if self.received.is_empty() && self.base < pid {
            self.base = pid;
        }
    }

    /// Takes one state packet.
    pub fn on_packet(&mut self, now: Micros, p: &StatePacket) {
        self.stats.packets_received += 1;
        self.ack_due = true;
        // The sender has resolved everything below its Ank id.
        let top = self.base.saturating_add(self.received.len() as u32);
        if p.ank > self.base && p.ank <= top.max(p.pid) {
            self.forget_below(p.ank);
        }
        if p.pid >= self.base {
            // (Differences, not sums: a forged pid near u32::MAX must not overflow.)
            if p.pid - self.base >= MAX_HISTORY {
                self.forget_below(p.pid - (MAX_HISTORY - 1));
            }
            let i = (p.pid - self.base) as usize;
            if self.received.len() <= i {
                self.received.resize(i + 1, false);
            }
            self.received[i] = true;
        }
        for &(key, value) in &p.entries {
            let room = self.table.len() < MAX_KEYS;
            match self.table.get_mut(&key) {
                Some(e) if e.pid >= p.pid => self.stats.entries_stale += 1,
                Some(e) => {
                    *e = StateEntry {
                        value,
                        pid: p.pid,
                        received_us: now,
                    };
                    self.stats.entries_applied += 1;
                    self.changes += 1;
                }
                None if room => {
                    self.table.insert(
                        key,
                        StateEntry {
                            value,
                            pid: p.pid,
                            received_us: now,
                        },
                    );
                    self.stats.entries_applied += 1;
                    self.changes += 1;
                }
                None => self.stats.entries_refused += 1,
            }
        }
    }

    /// The ack to send, if a packet arrived since the last one.
    pub fn poll_ack(&mut self) -> Option<StateAck> {
        if !std::mem::take(&mut self.ack_due) {
            return None;
        }
        // The newest received pid ends the report.
        let last = self.received.iter().rposition(|&r| r)?;
        let mut starts: Vec<(u32, bool)> = Vec::new();
        for (i, &r) in self.received.iter().enumerate().take(last + 1) {
            if starts.last().is_none_or(|&(_, k)| k != r) {
                starts.push((self.base + i as u32, r));
            }
        }
        // Keep the newest runs; the last is an ACK run.
        let skip = starts.len().saturating_sub(MAX_RUNS);
        let starts = &starts[skip..];
        self.stats.acks_built += 1;
        Some(StateAck {
            end: self.base + last as u32,
            first_ack: starts[0].1,
            starts: starts.iter().map(|s| s.0).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::p;

    #[test]
    fn forged_packet_ids_near_the_top_do_not_overflow() {
        // Found by the fuzzer with overflow checks on: an Ank that moves the base near
        // u32::MAX, then a pid past it.
        let mut r = StateReceiver::new();
        for (pid, ank) in [
            (u32::MAX - 10, u32::MAX - 10),
            (u32::MAX, u32::MAX - 5),
            (u32::MAX, u32::MAX),
            (5, u32::MAX),
        ] {
            r.on_packet(
                0,
                &StatePacket {
                    pid,
                    ank,
                    entries: vec![(1, p(pid as i32))],
                },
            );
            assert!(r.history_len() <= MAX_HISTORY as usize);
            let _ = r.poll_ack();
        }
    }
}
