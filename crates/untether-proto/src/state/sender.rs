//! The sending side of the state channel ([`StateSender`]): one value per key, the queue in
//! stalest-first order under the budget's token bucket, packets, acks and resends of only the
//! newest values, the RTT, and each key's staleness; with its settings and counters.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{
    StateAck, StateKey, StatePacket, StateValue, MAX_ENTRIES, MAX_IN_FLIGHT, MAX_KEYS,
    PACKET_OVERHEAD,
};
use crate::Micros;

/// Versions of one key sent and not resolved that a later set made obsolete: (sent version,
/// set time of the version after it). Bounded per key; beyond, the oldest is forgotten (the
/// key's staleness is then over- rather than under-estimated).
const MAX_SUPERSEDED: usize = 32;

struct KeyState {
    value: StateValue,
    /// Incremented by every set.
    version: u64,
    /// When the current value was set.
    set_us: Micros,
    /// The newest version known to be delivered (0: none).
    delivered_version: u64,
    /// The newest version sent (0: none).
    sent_version: u64,
    /// Since when the receiver's copy is out of date (None: it has the current value).
    stale_since: Option<Micros>,
    superseded: VecDeque<(u64, Micros)>,
    /// Queued to be sent (its place in the queue is `(stale_since, key)`).
    queued: Option<Micros>,
    /// Staleness measured at each delivery: worst, sum and count, µs.
    worst_us: u64,
    sum_us: u64,
    deliveries: u64,
}

impl KeyState {
    fn delivered(&self) -> bool {
        self.delivered_version == self.version
    }
}

struct Sent {
    pid: u32,
    sent_us: Micros,
    entries: Vec<(StateKey, u64)>,
    resolved: bool,
}

/// Counters of the sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSenderStats {
    pub packets_sent: u64,
    pub empty_packets_sent: u64,
    pub entries_sent: u64,
    /// Entries sent again because the packet that carried them was lost.
    pub entries_resent: u64,
    /// Entries of lost packets not resent because a newer value of their key exists (or the
    /// value was delivered another way).
    pub obsolete_skipped: u64,
    pub packets_nacked: u64,
    pub packets_timed_out: u64,
    pub sets_refused: u64,
    /// Bytes the budget counted (packets and their overhead).
    pub bytes_sent: u64,
    /// Times a packet waited for the budget.
    pub budget_waits: u64,
}

/// Staleness over keys (see the module docs): each key's worst staleness, then their
/// percentiles over keys; µs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Staleness {
    /// Keys with a value.
    pub keys: usize,
    /// Keys whose receiver copy is out of date now.
    pub stale_now: usize,
    /// Over keys, of each key's worst staleness.
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Mean staleness at delivery over every delivery of every key.
    pub mean_us: u64,
}

/// Sender settings.
#[derive(Clone, Copy, Debug)]
pub struct StateConfig {
    /// SRTT ← α·RTT + (1−α)·SRTT.
    pub alpha: f64,
    /// RTO = β·SRTT.
    pub beta: f64,
    pub min_rto_us: Micros,
    /// RTO before the first RTT sample.
    pub initial_rto_us: Micros,
    /// An empty packet when nothing was sent for this long.
    pub keepalive_us: Micros,
    /// Bytes per second the channel may use, overhead included (0: no budget).
    pub budget_bytes_per_s: u64,
    /// Bytes counted per packet beyond its encoding ([`PACKET_OVERHEAD`]).
    pub packet_overhead: usize,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            alpha: 0.9,
            beta: 2.0,
            min_rto_us: 2_000,
            initial_rto_us: 100_000,
            keepalive_us: 2_000_000,
            budget_bytes_per_s: 0,
            packet_overhead: PACKET_OVERHEAD,
        }
    }
}

/// The budget's token bucket.
#[derive(Clone, Copy)]
struct Budget {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_us: Option<Micros>,
}

impl Budget {
    fn new(bytes_per_s: u64) -> Budget {
        let rate = bytes_per_s as f64;
        // 20 ms of the budget, and at least two full datagrams.
        let burst = (rate * 0.02).max(2500.0);
        Budget {
            rate,
            burst,
            tokens: burst,
            last_us: None,
        }
    }
    fn refill(&mut self, now: Micros) {
        if let Some(last) = self.last_us {
            let dt = now.saturating_sub(last) as f64 / 1e6;
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last_us = Some(self.last_us.map_or(now, |l| l.max(now)));
    }
    /// When `bytes` tokens will be there.
    fn ready_at(&self, bytes: f64) -> Micros {
        let last = self.last_us.unwrap_or(0);
        if self.tokens >= bytes {
            return last;
        }
        last + (((bytes - self.tokens) / self.rate) * 1e6).ceil() as Micros
    }
}

/// The sending side of the state channel.
pub struct StateSender {
    cfg: StateConfig,
    values: BTreeMap<StateKey, KeyState>,
    /// Queued keys, stalest first.
    queue: BTreeSet<(Micros, StateKey)>,
    /// The encoded length of every queued entry.
    queued_bytes: usize,
    /// The `max_bytes` of the last poll (what one packet may carry).
    packet_room: usize,
    next_pid: u32,
    in_flight: VecDeque<Sent>,
    srtt_us: Option<f64>,
    last_send_us: Option<Micros>,
    budget: Option<Budget>,
    stats: StateSenderStats,
}

impl StateSender {
    pub fn new(cfg: StateConfig) -> Self {
        StateSender {
            budget: (cfg.budget_bytes_per_s > 0).then(|| Budget::new(cfg.budget_bytes_per_s)),
            cfg,
            values: BTreeMap::new(),
            queue: BTreeSet::new(),
            queued_bytes: 0,
            packet_room: 1150,
            next_pid: 0,
            in_flight: VecDeque::new(),
            srtt_us: None,
            last_send_us: None,
            stats: StateSenderStats::default(),
        }
    }

    pub fn stats(&self) -> StateSenderStats {
        self.stats
    }

    pub fn config(&self) -> &StateConfig {
        &self.cfg
    }

    /// Smoothed RTT from this channel's acks.
    pub fn srtt_us(&self) -> Option<Micros> {
        self.srtt_us.map(|s| s.round() as Micros)
    }

    /// The retransmission timeout: β·SRTT.
    pub fn rto_us(&self) -> Micros {
        match self.srtt_us {
            Some(s) => ((s * self.cfg.beta) as Micros).max(self.cfg.min_rto_us),
            None => self.cfg.initial_rto_us,
        }
    }

    /// The current value of a key and when it was set.
    pub fn get(&self, key: StateKey) -> Option<(StateValue, Micros)> {
        self.values.get(&key).map(|k| (k.value, k.set_us))
    }

    /// The version counter of a key (tests: which value is current).
    pub fn version(&self, key: StateKey) -> Option<u64> {
        self.values.get(&key).map(|k| k.version)
    }

    /// How many keys have a value.
    pub fn key_count(&self) -> usize {
        self.values.len()
    }

    /// Whether the current value of every key is known to be delivered.
    pub fn all_delivered(&self) -> bool {
        self.values.values().all(|k| k.delivered())
    }

    /// Packets sent and not yet resolved.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Keys waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The Ank id: the oldest unresolved pid (or the next pid when all are resolved).
    pub fn ank(&self) -> u32 {
        self.in_flight
            .iter()
            .find(|s| !s.resolved)
            .map_or(self.next_pid, |s| s.pid)
    }

    fn enqueue(
        queue: &mut BTreeSet<(Micros, StateKey)>,
        bytes: &mut usize,
        key: StateKey,
        k: &mut KeyState,
    ) {
        if k.queued.is_none() {
            let at = k.stale_since.unwrap_or(k.set_us);
            queue.insert((at, key));
            *bytes += k.value.entry_len();
            k.queued = Some(at);
        }
    }

    fn dequeue(
        queue: &mut BTreeSet<(Micros, StateKey)>,
        bytes: &mut usize,
        key: StateKey,
        k: &mut KeyState,
    ) {
        if let Some(at) = k.queued.take() {
            queue.remove(&(at, key));
            *bytes = bytes.saturating_sub(k.value.entry_len());
        }
    }

    /// Sets a key's value; false when the key table is full (the value is dropped, counted).
    pub fn set(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        if let Some(k) = self.values.get_mut(&key) {
            if k.sent_version == k.version && k.delivered_version < k.version {
                // The version in flight is obsolete from now on.
                if k.superseded.len() >= MAX_SUPERSEDED {
                    k.superseded.pop_front();
                }
                k.superseded.push_back((k.version, now));
            }
            if k.queued.is_some() {
                self.queued_bytes = self.queued_bytes + value.entry_len() - k.value.entry_len();
            }
            k.value = value;
            k.version += 1;
            k.set_us = now;
            if k.stale_since.is_none() {
                k.stale_since = Some(now);
            }
            Self::enqueue(&mut self.queue, &mut self.queued_bytes, key, k);
            return true;
        }
        if self.values.len() >= MAX_KEYS {
            self.stats.sets_refused += 1;
            return false;
        }
        let mut k = KeyState {
            value,
            version: 1,
            set_us: now,
            delivered_version: 0,
            sent_version: 0,
            stale_since: Some(now),
            superseded: VecDeque::new(),
            queued: None,
            worst_us: 0,
            sum_us: 0,
            deliveries: 0,
        };
        Self::enqueue(&mut self.queue, &mut self.queued_bytes, key, &mut k);
        self.values.insert(key, k);
        true
    }

    /// What the next packet costs the budget: everything queued, or a full packet (so that a
    /// spent budget sends full packets, not a trickle of one-entry packets whose overhead
    /// would eat it).
    fn next_cost(&self) -> Option<usize> {
        if self.queue.is_empty() {
            return None;
        }
        let body = self
            .queued_bytes
            .min(self.packet_room.saturating_sub(9))
            .max(7);
        Some(9 + body + self.cfg.packet_overhead)
    }

    /// Whether a packet is ready (queued keys) or a keep-alive is due, within the budget.
    pub fn wants_to_send(&self, now: Micros) -> bool {
        let due = !self.queue.is_empty()
            || self
                .last_send_us
                .is_none_or(|t| now >= t + self.cfg.keepalive_us);
        due && self.budget_ready_at(now) <= now
    }

    /// When the budget allows the next packet (now, without a budget).
    fn budget_ready_at(&self, now: Micros) -> Micros {
        let Some(b) = &self.budget else {
            return now;
        };
        let cost = self.next_cost().unwrap_or(9 + self.cfg.packet_overhead) as f64;
        let mut b2 = *b;
        b2.refill(now);
        b2.ready_at(cost)
    }

    /// The next packet, with as many queued keys as fit in `max_bytes` (of frame body) and the
    /// budget, stalest first: None if nothing is queued and no keep-alive is due, or the budget
    /// is spent (see [`poll_timeout`](Self::poll_timeout)).
    pub fn poll_packet(&mut self, now: Micros, max_bytes: usize) -> Option<StatePacket> {
        self.handle_timeout(now);
        let due = !self.queue.is_empty()
            || self
                .last_send_us
                .is_none_or(|t| now >= t + self.cfg.keepalive_us);
        if !due || self.next_pid == u32::MAX {
            return None;
        }
        let mut room = max_bytes;
        self.packet_room = max_bytes;
        let cost = self.next_cost().unwrap_or(9 + self.cfg.packet_overhead);
        if let Some(b) = self.budget.as_mut() {
            b.refill(now);
            if b.tokens < cost as f64 {
                self.stats.budget_waits += 1;
                return None;
            }
            room = room.min((b.tokens as usize).saturating_sub(self.cfg.packet_overhead));
        }
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            // Bound memory: the oldest packet is given up as lost.
            if let Some(i) = self.in_flight.iter().position(|s| !s.resolved) {
                self.resolve_lost(i);
                self.stats.packets_timed_out += 1;
            }
            self.trim();
        }
        let ank = self.ank();
        let pid = self.next_pid;
        self.next_pid += 1;
        let mut entries = Vec::new();
        let mut recorded = Vec::new();
        let mut len = 9;
        let mut taken = Vec::new();
        for &(at, key) in self.queue.iter() {
            if entries.len() >= MAX_ENTRIES || room.saturating_sub(len) < 7 {
                break;
            }
            let Some(k) = self.values.get(&key) else {
                taken.push((at, key));
                continue;
            };
            let l = k.value.entry_len();
            if len + l > room {
                continue;
            }
            len += l;
            entries.push((key, k.value));
            recorded.push((key, k.version));
            taken.push((at, key));
        }
        for (at, key) in taken {
            self.queue.remove(&(at, key));
            if let Some(k) = self.values.get_mut(&key) {
                k.queued = None;
                self.queued_bytes = self.queued_bytes.saturating_sub(k.value.entry_len());
                k.sent_version = k.version;
            }
        }
        self.stats.packets_sent += 1;
        self.stats.entries_sent += entries.len() as u64;
        if entries.is_empty() {
            self.stats.empty_packets_sent += 1;
        }
        let cost = len + self.cfg.packet_overhead;
        self.stats.bytes_sent += cost as u64;
        if let Some(b) = self.budget.as_mut() {
            b.tokens -= cost as f64;
        }
        self.in_flight.push_back(Sent {
            pid,
            sent_us: now,
            entries: recorded,
            resolved: false,
        });
        self.last_send_us = Some(now);
        Some(StatePacket { pid, ank, entries })
    }

    /// A lost packet: its entries that are still the newest value of their key (and not known
    /// delivered) are queued again; the others are obsolete and are not resent.
    fn resolve_lost(&mut self, i: usize) {
        let Some(s) = self.in_flight.get_mut(i) else {
            return;
        };
        s.resolved = true;
        for &(key, version) in &s.entries {
            match self.values.get_mut(&key) {
                Some(k) if k.version == version && !k.delivered() => {
                    if k.queued.is_none() {
                        Self::enqueue(&mut self.queue, &mut self.queued_bytes, key, k);
                        self.stats.entries_resent += 1;
                    }
                }
                _ => self.stats.obsolete_skipped += 1,
            }
        }
    }

    fn trim(&mut self) {
        while self.in_flight.front().is_some_and(|s| s.resolved) {
            self.in_flight.pop_front();
        }
    }

    /// A version of a key reached the receiver at about `arrival`.
    fn on_delivered(&mut self, key: StateKey, version: u64, arrival: Micros) {
        let Some(k) = self.values.get_mut(&key) else {
            return;
        };
        if version <= k.delivered_version {
            return;
        }
        if let Some(since) = k.stale_since {
            let st = arrival.saturating_sub(since);
            k.worst_us = k.worst_us.max(st);
            k.sum_us = k.sum_us.saturating_add(st);
            k.deliveries += 1;
        }
        k.delivered_version = version;
        if version == k.version {
            k.stale_since = None;
            k.superseded.clear();
            Self::dequeue(&mut self.queue, &mut self.queued_bytes, key, k);
        } else {
            // Newer versions exist: the receiver's copy is out of date since the next one
            // was set (unknown if forgotten: keep the older time, an over-estimate).
            if let Some(&(_, next_set)) = k.superseded.iter().find(|(v, _)| *v == version) {
                k.stale_since = Some(next_set);
                if let Some(at) = k.queued {
                    // Keep the queue ordered by the new time.
                    self.queue.remove(&(at, key));
                    self.queue.insert((next_set, key));
                    k.queued = Some(next_set);
                }
            }
            k.superseded.retain(|(v, _)| *v > version);
        }
    }

    /// Takes an ACK/NAK report from the receiver.
    pub fn on_ack(&mut self, now: Micros, ack: &StateAck) {
        if ack.end >= self.next_pid {
            // Acknowledges packets never sent: forged or corrupt.
            return;
        }
        let base = match self.in_flight.front() {
            Some(s) => s.pid,
            None => return,
        };
        let mut rtt_sample = None;
        let mut delivered = Vec::new();
        for (range, acked) in ack.runs() {
            let (lo, hi) = (*range.start(), *range.end());
            if hi < base {
                continue;
            }
            let first = (lo.max(base) - base) as usize;
            let last = ((hi - base) as usize).min(self.in_flight.len().saturating_sub(1));
            for i in first..=last {
                if i >= self.in_flight.len() || self.in_flight[i].resolved {
                    continue;
                }
                if acked {
                    let s = &mut self.in_flight[i];
                    s.resolved = true;
                    if s.pid == ack.end {
                        rtt_sample = Some(now.saturating_sub(s.sent_us));
                    }
                    delivered.extend_from_slice(&s.entries);
                } else {
                    self.stats.packets_nacked += 1;
                    self.resolve_lost(i);
                }
            }
        }
        if let Some(rtt) = rtt_sample {
            let r = rtt as f64;
            self.srtt_us = Some(match self.srtt_us {
                None => r,
                Some(s) => self.cfg.alpha * r + (1.0 - self.cfg.alpha) * s,
            });
        }
        let one_way = self.srtt_us.map_or(0, |s| (s / 2.0) as Micros);
        let arrival = now.saturating_sub(one_way);
        for (key, version) in delivered {
            self.on_delivered(key, version, arrival);
        }
        self.trim();
    }

    /// Gives up packets unresolved for longer than the RTO (their entries may be resent).
    pub fn handle_timeout(&mut self, now: Micros) {
        let rto = self.rto_us();
        for i in 0..self.in_flight.len() {
            let s = &self.in_flight[i];
            if !s.resolved && now >= s.sent_us + rto {
                self.stats.packets_timed_out += 1;
                self.resolve_lost(i);
            }
        }
        self.trim();
    }

    /// When something is due: an RTO expiry, a keep-alive, or queued keys (now, or when the
    /// budget allows).
    pub fn poll_timeout(&self) -> Option<Micros> {
        let rto = self.rto_us();
        let expiry = self
            .in_flight
            .iter()
            .filter(|s| !s.resolved)
            .map(|s| s.sent_us + rto)
            .min();
        let keepalive = self.last_send_us.map(|t| t + self.cfg.keepalive_us);
        let queued = (!self.queue.is_empty()).then(|| match &self.budget {
            Some(b) => b.ready_at(self.next_cost().unwrap_or(0) as f64),
            None => self.last_send_us.unwrap_or(0),
        });
        [expiry, keepalive, queued].into_iter().flatten().min()
    }

    /// Staleness over keys at `now` (see the module docs).
    pub fn staleness(&self, now: Micros) -> Staleness {
        let mut worst: Vec<u64> = Vec::with_capacity(self.values.len());
        let (mut sum, mut n, mut stale_now) = (0u64, 0u64, 0usize);
        for k in self.values.values() {
            let ongoing = k.stale_since.map_or(0, |s| now.saturating_sub(s));
            if k.stale_since.is_some() {
                stale_now += 1;
            }
            worst.push(k.worst_us.max(ongoing));
            sum = sum.saturating_add(k.sum_us);
            n += k.deliveries;
        }
        worst.sort_unstable();
        let pick = |p: f64| crate::stats::percentile(&worst, p).unwrap_or(0);
        Staleness {
            keys: worst.len(),
            stale_now,
            p50_us: pick(50.0),
            p99_us: pick(99.0),
            max_us: worst.last().copied().unwrap_or(0),
            mean_us: sum.checked_div(n).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{p, StateReceiver, MAX_HISTORY, MAX_RUNS};

    #[test]
    fn only_the_newest_value_is_resent() {
        let mut s = StateSender::new(StateConfig::default());
        let mut r = StateReceiver::new();
        s.set(0, 0, p(1));
        let lost = s.poll_packet(0, 1000).unwrap();
        assert_eq!(lost.entries.len(), 1);
        s.set(1, 1, p(100)); // key 1 in another packet, also lost
        let lost2 = s.poll_packet(1, 1000).unwrap();
        s.set(2, 0, p(2)); // key 0 changes again: the first value is obsolete
        let got = s.poll_packet(2, 1000).unwrap();
        assert_eq!(got.entries, vec![(0, p(2))]);
        r.on_packet(3, &got);
        s.on_ack(5, &r.poll_ack().unwrap());
        // pids 0 and 1 were NAK'd: key 0's old value is obsolete, key 1's is resent.
        assert_eq!(s.stats().packets_nacked, 2);
        assert_eq!(s.stats().obsolete_skipped, 1);
        let again = s.poll_packet(5, 1000).unwrap();
        assert_eq!(again.entries, vec![(1, p(100))]);
        assert_eq!(again.ank, 3);
        r.on_packet(6, &again);
        // Late arrival of the lost packets does not roll key 0 back.
        r.on_packet(7, &lost);
        r.on_packet(7, &lost2);
        assert_eq!(r.get(0).unwrap().value, p(2));
        assert_eq!(r.get(1).unwrap().value, p(100));
        s.on_ack(8, &r.poll_ack().unwrap());
        assert!(s.all_delivered());
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.srtt_us(), Some(3));
    }

    #[test]
    fn rto_resends_a_lost_last_value() {
        let mut s = StateSender::new(StateConfig::default());
        s.set(0, 7, p(5));
        let _lost = s.poll_packet(0, 1000).unwrap();
        assert_eq!(s.poll_timeout(), Some(100_000));
        assert!(s.poll_packet(50_000, 1000).is_none());
        let again = s.poll_packet(100_000, 1000).unwrap();
        assert_eq!(again.entries, vec![(7, p(5))]);
        assert_eq!(s.stats().packets_timed_out, 1);
    }

    #[test]
    fn keepalive_and_bounds() {
        let mut s = StateSender::new(StateConfig::default());
        let k = s.poll_packet(0, 1000).unwrap();
        assert!(k.entries.is_empty());
        assert!(s.poll_packet(1_000_000, 1000).is_none() || s.in_flight() > 0);
        for key in 0..MAX_KEYS as u16 {
            assert!(s.set(1, key, StateValue::Axis(0.5)));
        }
        assert!(!s.set(1, MAX_KEYS as u16 + 7, StateValue::Axis(0.5)));
        assert_eq!(s.stats().sets_refused, 1);
        // A packet never exceeds its byte budget.
        let pk = s.poll_packet(2, 100).unwrap();
        assert!(pk.encoded_len() <= 100);
        // The receiver's history stays bounded whatever pids arrive.
        let mut r = StateReceiver::new();
        for pid in (0..100_000u32).step_by(7) {
            r.on_packet(
                0,
                &StatePacket {
                    pid,
                    ank: 0,
                    entries: vec![],
                },
            );
            assert!(r.history_len() <= MAX_HISTORY as usize);
        }
        let a = r.poll_ack().unwrap();
        assert!(a.starts.len() <= MAX_RUNS);
    }

    #[test]
    fn forged_acks_are_ignored() {
        let mut s = StateSender::new(StateConfig::default());
        s.set(0, 0, p(1));
        s.poll_packet(0, 1000);
        s.on_ack(
            1,
            &StateAck {
                end: 50,
                first_ack: true,
                starts: vec![0],
            },
        );
        assert_eq!(s.in_flight(), 1);
    }

    #[test]
    fn a_value_set_while_queued_keeps_its_place_and_only_the_newest_leaves() {
        let cfg = StateConfig {
            budget_bytes_per_s: 1_000,
            ..StateConfig::default()
        };
        let mut s = StateSender::new(cfg);
        // Spend the burst.
        for k in 0..100u16 {
            s.set(0, k, StateValue::PoseSample(Default::default()));
        }
        while s.poll_packet(0, 1150).is_some() {}
        assert!(s.queued() > 0);
        s.set(10, 7, StateValue::Int(1));
        s.set(20, 7, StateValue::Int(2));
        // Later, when tokens come back, key 7 leaves once, with its newest value.
        let mut seen = Vec::new();
        for ms in 1..2000u64 {
            while let Some(p) = s.poll_packet(ms * 1000, 1150) {
                seen.extend(p.entries.into_iter().filter(|(k, _)| *k == 7));
            }
        }
        assert_eq!(seen, vec![(7, StateValue::Int(2))]);
    }
}
