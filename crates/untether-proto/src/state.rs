//! The latest-wins state channel (after Verse): continuous state — pointer position, head pose,
//! IMU, controller axes, haptics, other players, application state — where only the newest
//! value of each key matters. Both sides have one: the client sends its input state to the host,
//! the host publishes state to the client, on the same control frames (`State`, `StateAck`).
//!
//! - The sender keeps one value per key (up to [`MAX_KEYS`]). Setting a key queues it; the
//!   next packet carries queued keys. Every packet has an id (`pid`, 0, 1, 2, …).
//! - The receiver applies an entry only if its packet id is above the id that last set the key
//!   (so a late or duplicated packet never rolls a key back), and acknowledges with a
//!   [`StateAck`]: the received/missing pids since the sender's "Ank id", as ACK/NAK runs
//!   compressed to their starts — `ack(31) nak(33) ack(36) … end 38`.
//! - On a NAK (or when a packet is unresolved for RTO = β·SRTT), the sender queues again **only
//!   the entries of that packet that are still the newest value of their key** and not yet
//!   known to be delivered; obsolete entries are never resent (counted in
//!   [`StateSenderStats::obsolete_skipped`]).
//! - The Ank id ("acknowledgement of acknowledgements") is the oldest pid the sender has not
//!   yet resolved (acked or given up); it rides in every packet and the receiver forgets
//!   history below it, so the ACK/NAK history stays short.
//! - SRTT ← α·RTT + (1−α)·SRTT from the time between a packet and the ACK that first covers it
//!   (α = 0.9); an empty packet every `keepalive` (2 s) when idle keeps the RTT fresh.
//!
//! **Budget.** A sender may be given a bandwidth budget ([`StateConfig::budget_bytes_per_s`], a
//! token bucket counting each packet with [`StateConfig::packet_overhead`]). Within it, what
//! leaves is always each key's newest value (read when the packet is built, never an older one
//! that waited), and the queued keys go **in the order their receiver's copy went out of date**:
//! the key that has been stale longest first. (Most-recently-changed-first would starve every
//! key that changes a little earlier in each tick; this order bounds every key's staleness by
//! how many keys share the budget.) Keys set again while queued keep their place.
//!
//! **Staleness** of a key: how long the receiver's copy has been out of date — from when the
//! sender first had a value the receiver did not (the set time of the version after the last
//! delivered one) until a newer version is delivered. The sender measures it per key from its
//! acks (delivery ≈ the ack's arrival − SRTT/2) and keeps each key's worst and mean
//! ([`StateSender::staleness`]); a key still stale counts with its staleness so far.
//!
//! Everything is bounded: keys ([`MAX_KEYS`]), packets in flight ([`MAX_IN_FLIGHT`]), receiver
//! history ([`MAX_HISTORY`]) and runs per ack ([`MAX_RUNS`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::pose::{Pose, PoseSample};
use crate::wire::{bad, Put, Reader, WireError};
use crate::Micros;

/// A state key: which piece of state (pointer, head pose, a controller's stick, …).
pub type StateKey = u16;

/// Well-known keys (applications may use any others).
pub mod keys {
    use super::StateKey;
    /// The pointer's absolute position in the client's window ([`super::StateValue::Pointer`]).
    pub const POINTER: StateKey = 0;
    /// The head pose ([`super::StateValue::PoseSample`], or the older
    /// [`super::StateValue::Pose`] / [`super::StateValue::Angles`]).
    pub const HEAD_POSE: StateKey = 1;
    /// The headset's IMU ([`super::StateValue::Imu`]).
    pub const IMU: StateKey = 2;
    /// First key of controller axes / sticks; controller `n`, axis `a` = `AXES + 16·n + a`
    /// (client → host). See [`gamepad_axis`].
    pub const AXES: StateKey = 0x100;
    /// First key of controller rumble (host → client): controller `n` = `HAPTICS + n`
    /// ([`super::StateValue::Haptic`]).
    pub const HAPTICS: StateKey = 0x200;
    /// First key an application may use for its own state in either direction (other players,
    /// scores, …): `APP..=u16::MAX`.
    pub const APP: StateKey = 0x1000;

    /// The key of axis `axis` (0..16) of controller `controller` (0..16).
    pub fn gamepad_axis(controller: u8, axis: u8) -> StateKey {
        AXES + 16 * (controller as StateKey % 16) + (axis as StateKey % 16)
    }
}

/// Most keys either side tracks (sender and receiver alike).
pub const MAX_KEYS: usize = 4096;
/// Most packets the sender tracks unresolved; beyond, the oldest is treated as lost.
pub const MAX_IN_FLIGHT: usize = 512;
/// Most packet ids the receiver remembers (from the sender's Ank id).
pub const MAX_HISTORY: u32 = 1024;
/// Most runs in one [`StateAck`].
pub const MAX_RUNS: usize = 64;
/// Most entries in one state packet (its count is one byte).
pub const MAX_ENTRIES: usize = 255;
/// Bytes a state packet costs on the wire beyond its own encoding when it travels alone: the
/// datagram header (18), the control frame header (3) and the AEAD tag (16).
pub const PACKET_OVERHEAD: usize = 37;

/// A value of continuous state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StateValue {
    /// Absolute pointer position (window pixels).
    Pointer { x: i32, y: i32 },
    /// Orientation quaternion (x, y, z, w) and position in metres (no sample time: prefer
    /// [`StateValue::PoseSample`]).
    Pose {
        orientation: [f32; 4],
        position: [f32; 3],
    },
    /// Orientation as yaw, pitch, roll in degrees.
    Angles { yaw: f32, pitch: f32, roll: f32 },
    /// Accelerometer (m/s²) and gyroscope (rad/s).
    Imu { accel: [f32; 3], gyro: [f32; 3] },
    /// One axis, −1..1 (a trigger, a slider).
    Axis(f32),
    /// Two axes, −1..1 (a stick, a touchpad).
    Stick { x: f32, y: f32 },
    /// A head pose and when the client sampled it (client clock): what the host renders for
    /// and echoes with the frame ([`crate::pose`]).
    PoseSample(PoseSample),
    /// Rumble: the low- and high-frequency motors' strength, 0..1 (host → client).
    Haptic { low: f32, high: f32 },
    /// An application's integer (a score, a mode, an id).
    Int(i64),
}

mod kind {
    pub const POINTER: u8 = 1;
    pub const POSE: u8 = 2;
    pub const ANGLES: u8 = 3;
    pub const IMU: u8 = 4;
    pub const AXIS: u8 = 5;
    pub const STICK: u8 = 6;
    pub const POSE_SAMPLE: u8 = 7;
    pub const HAPTIC: u8 = 8;
    pub const INT: u8 = 9;
}

impl StateValue {
    /// Encoded length, without the key and kind.
    pub fn value_len(&self) -> usize {
        match self {
            StateValue::Pointer { .. } => 8,
            StateValue::Pose { .. } => 28,
            StateValue::Angles { .. } => 12,
            StateValue::Imu { .. } => 24,
            StateValue::Axis(_) => 4,
            StateValue::Stick { .. } => 8,
            StateValue::PoseSample(_) => PoseSample::LEN,
            StateValue::Haptic { .. } => 8,
            StateValue::Int(_) => 8,
        }
    }

    /// Encoded length of an entry: key u16, kind u8, value.
    pub fn entry_len(&self) -> usize {
        3 + self.value_len()
    }

    /// The pose this value describes (a head pose key), if it is one.
    pub fn pose(&self) -> Option<(Pose, Option<Micros>)> {
        match *self {
            StateValue::PoseSample(s) => Some((s.pose, Some(s.sample_us))),
            StateValue::Pose {
                orientation,
                position,
            } => Some((
                Pose {
                    orientation: crate::pose::quat_normalize(orientation),
                    position,
                },
                None,
            )),
            StateValue::Angles { yaw, pitch, roll } => {
                Some((Pose::from_angles(yaw, pitch, roll, [0.0; 3]), None))
            }
            _ => None,
        }
    }

    fn floats(out: &mut Vec<u8>, v: &[f32]) {
        for f in v {
            out.put_f32(*f);
        }
    }

    pub fn encode_entry(&self, key: StateKey, out: &mut Vec<u8>) {
        out.put_u16(key);
        match self {
            StateValue::Pointer { x, y } => {
                out.put_u8(kind::POINTER);
                out.put_i32(*x);
                out.put_i32(*y);
            }
            StateValue::Pose {
                orientation,
                position,
            } => {
                out.put_u8(kind::POSE);
                Self::floats(out, orientation);
                Self::floats(out, position);
            }
            StateValue::Angles { yaw, pitch, roll } => {
                out.put_u8(kind::ANGLES);
                Self::floats(out, &[*yaw, *pitch, *roll]);
            }
            StateValue::Imu { accel, gyro } => {
                out.put_u8(kind::IMU);
                Self::floats(out, accel);
                Self::floats(out, gyro);
            }
            StateValue::Axis(a) => {
                out.put_u8(kind::AXIS);
                out.put_f32(*a);
            }
            StateValue::Stick { x, y } => {
                out.put_u8(kind::STICK);
                Self::floats(out, &[*x, *y]);
            }
            StateValue::PoseSample(s) => {
                out.put_u8(kind::POSE_SAMPLE);
                s.encode(out);
            }
            StateValue::Haptic { low, high } => {
                out.put_u8(kind::HAPTIC);
                Self::floats(out, &[*low, *high]);
            }
            StateValue::Int(v) => {
                out.put_u8(kind::INT);
                out.put_u64(*v as u64);
            }
        }
    }

    pub fn parse_entry(r: &mut Reader<'_>) -> Result<(StateKey, StateValue), WireError> {
        let key = r.u16()?;
        let f = |r: &mut Reader<'_>| -> Result<f32, WireError> {
            let v = r.f32()?;
            if v.is_finite() {
                Ok(v)
            } else {
                Err(bad("state.value", "not a finite number"))
            }
        };
        let v = match r.u8()? {
            kind::POINTER => StateValue::Pointer {
                x: r.i32()?,
                y: r.i32()?,
            },
            kind::POSE => StateValue::Pose {
                orientation: [f(r)?, f(r)?, f(r)?, f(r)?],
                position: [f(r)?, f(r)?, f(r)?],
            },
            kind::ANGLES => StateValue::Angles {
                yaw: f(r)?,
                pitch: f(r)?,
                roll: f(r)?,
            },
            kind::IMU => StateValue::Imu {
                accel: [f(r)?, f(r)?, f(r)?],
                gyro: [f(r)?, f(r)?, f(r)?],
            },
            kind::AXIS => StateValue::Axis(f(r)?),
            kind::STICK => StateValue::Stick { x: f(r)?, y: f(r)? },
            kind::POSE_SAMPLE => StateValue::PoseSample(PoseSample::parse(r)?),
            kind::HAPTIC => StateValue::Haptic {
                low: f(r)?,
                high: f(r)?,
            },
            kind::INT => StateValue::Int(r.u64()? as i64),
            _ => return Err(bad("state.kind", "unknown state value kind")),
        };
        Ok((key, v))
    }
}

/// One state packet: `pid u32 ‖ ank u32 ‖ count u8 ‖ entries`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePacket {
    pub pid: u32,
    /// Every pid below this is resolved at the sender: the receiver may forget them.
    pub ank: u32,
    pub entries: Vec<(StateKey, StateValue)>,
}

impl StatePacket {
    pub fn encoded_len(&self) -> usize {
        9 + self
            .entries
            .iter()
            .map(|(_, v)| v.entry_len())
            .sum::<usize>()
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.pid);
        out.put_u32(self.ank);
        out.put_u8(self.entries.len().min(MAX_ENTRIES) as u8);
        for (k, v) in self.entries.iter().take(MAX_ENTRIES) {
            v.encode_entry(*k, out);
        }
    }
    pub fn parse(r: &mut Reader<'_>) -> Result<StatePacket, WireError> {
        let pid = r.u32()?;
        let ank = r.u32()?;
        let n = r.u8()? as usize;
        if n > MAX_ENTRIES || n * 7 > r.remaining() {
            return Err(bad("state.count", "more entries than allowed or present"));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(StateValue::parse_entry(r)?);
        }
        Ok(StatePacket { pid, ank, entries })
    }
}

/// ACK/NAK runs compressed to their starts: run `i` covers `[starts[i], starts[i+1])`, the last
/// run `[starts[last], end]`; runs alternate between ACK and NAK starting with `first_ack`, and
/// the last run is an ACK (`end` is the highest pid received).
///
/// Wire: `end u32 ‖ first_ack u8 ‖ n u8 ‖ starts u32 × n` with `starts` strictly increasing and
/// `≤ end`, `1 ≤ n ≤ 64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateAck {
    pub end: u32,
    pub first_ack: bool,
    pub starts: Vec<u32>,
}

impl StateAck {
    pub fn encoded_len(&self) -> usize {
        6 + 4 * self.starts.len()
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.end);
        out.put_u8(self.first_ack as u8);
        out.put_u8(self.starts.len() as u8);
        for s in &self.starts {
            out.put_u32(*s);
        }
    }
    pub fn parse(r: &mut Reader<'_>) -> Result<StateAck, WireError> {
        let end = r.u32()?;
        let first_ack = r.bool("state_ack.first_ack")?;
        let n = r.u8()? as usize;
        if n == 0 || n > MAX_RUNS {
            return Err(bad("state_ack.count", "must be 1..=64"));
        }
        let mut starts = Vec::with_capacity(n);
        for _ in 0..n {
            starts.push(r.u32()?);
        }
        if starts.windows(2).any(|w| w[0] >= w[1]) || starts[n - 1] > end {
            return Err(bad("state_ack.starts", "not increasing, or beyond end"));
        }
        // The last run contains `end`, which was received: it must be an ACK run.
        if (n % 2 == 1) != first_ack {
            return Err(bad("state_ack", "the last run must be an ACK run"));
        }
        Ok(StateAck {
            end,
            first_ack,
            starts,
        })
    }

    /// Every (pid range, acked) of this ack, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = (std::ops::RangeInclusive<u32>, bool)> + '_ {
        self.starts.iter().enumerate().map(move |(i, &s)| {
            let last = match self.starts.get(i + 1) {
                Some(&next) => next - 1,
                None => self.end,
            };
            (s..=last, (i % 2 == 0) == self.first_ack)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Sender

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

// ---------------------------------------------------------------------------------------------
// Receiver

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

    fn p(x: i32) -> StateValue {
        StateValue::Pointer { x, y: -x }
    }

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

    #[test]
    fn ack_runs_compress_to_starts() {
        // The example: ack(31), nak(33), ack(36) up to 38.
        let mut r = StateReceiver::new();
        for pid in [31u32, 32, 36, 37, 38] {
            r.on_packet(
                0,
                &StatePacket {
                    pid,
                    ank: 31,
                    entries: vec![],
                },
            );
        }
        let a = r.poll_ack().unwrap();
        assert_eq!(
            a,
            StateAck {
                end: 38,
                first_ack: true,
                starts: vec![31, 33, 36]
            }
        );
        let runs: Vec<_> = a.runs().collect();
        assert_eq!(
            runs,
            vec![(31..=32, true), (33..=35, false), (36..=38, true)]
        );
        let mut out = Vec::new();
        a.encode(&mut out);
        assert_eq!(
            crate::wire::Hex(&out).to_string(),
            crate::vectors::STATE_ACK_EXAMPLE
        );
        assert_eq!(StateAck::parse(&mut Reader::new(&out, "t")).unwrap(), a);
        assert!(r.poll_ack().is_none());
    }

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

    /// The channel alone through a lossy, reordering, duplicating link, thousands of seeds:
    /// every packet sent carries only current values (no obsolete value is ever resent), the
    /// receiver never goes backwards, converges to the sender's final state, and memory stays
    /// bounded.
    #[test]
    fn channel_sim_thousands_of_seeds() {
        use crate::sim::SimRng;
        for seed in 0..3000u64 {
            let mut rng = SimRng::new(seed);
            let loss = 0.01 + rng.unit() * 0.2;
            let mut s = StateSender::new(StateConfig::default());
            let mut r = StateReceiver::new();
            // In flight: (arrival time, packet or ack).
            let mut up: Vec<(Micros, StatePacket)> = Vec::new();
            let mut down: Vec<(Micros, StateAck)> = Vec::new();
            let mut last_seen = [0i32; 4];
            let mut now = 0;
            for step in 0..1000u64 {
                now += 1000;
                if step < 300 && rng.chance(0.5) {
                    let key = (rng.next_u64() % 4) as u16;
                    let v = s.version(key).unwrap_or(0) as i32 + 1;
                    s.set(
                        now,
                        key,
                        StateValue::Pointer {
                            x: v,
                            y: key as i32,
                        },
                    );
                }
                while let Some(p) = s.poll_packet(now, 200) {
                    for (k, v) in &p.entries {
                        let StateValue::Pointer { x, .. } = v else {
                            unreachable!()
                        };
                        assert_eq!(
                            Some(*x as u64),
                            s.version(*k),
                            "seed {seed}: an obsolete value was sent"
                        );
                    }
                    let copies = if rng.chance(0.03) { 2 } else { 1 };
                    for _ in 0..copies {
                        if !rng.chance(loss) {
                            up.push((now + rng.range(2000, 9000), p.clone()));
                        }
                    }
                }
                let (due, later): (Vec<_>, Vec<_>) = up.drain(..).partition(|(t, _)| *t <= now);
                up = later;
                for (_, p) in due {
                    r.on_packet(now, &p);
                    if let Some(a) = r.poll_ack() {
                        if !rng.chance(loss) {
                            down.push((now + rng.range(2000, 9000), a));
                        }
                    }
                }
                let (due, later): (Vec<_>, Vec<_>) = down.drain(..).partition(|(t, _)| *t <= now);
                down = later;
                for (_, a) in due {
                    s.on_ack(now, &a);
                }
                for (k, seen) in last_seen.iter_mut().enumerate() {
                    if let Some(e) = r.get(k as u16) {
                        let StateValue::Pointer { x, .. } = e.value else {
                            unreachable!()
                        };
                        assert!(x >= *seen, "seed {seed}: key {k} went backwards");
                        *seen = x;
                    }
                }
                assert!(s.in_flight() <= MAX_IN_FLIGHT);
                assert!(r.history_len() <= MAX_HISTORY as usize);
            }
            for k in 0..4u16 {
                assert_eq!(
                    s.get(k).map(|v| v.0),
                    r.get(k).map(|e| e.value),
                    "seed {seed}: key {k} did not converge"
                );
            }
            assert!(
                s.all_delivered(),
                "seed {seed}: {:?} in flight {} next {:?}",
                s.stats(),
                s.in_flight(),
                s.poll_timeout()
            );
        }
    }

    /// Drives a sender and receiver over a lossless link with `delay` each way for `steps`
    /// ms; every key of `keys` changes every `every` ms.
    fn run_link(
        s: &mut StateSender,
        r: &mut StateReceiver,
        keys: u16,
        every: u64,
        steps: u64,
        delay: Micros,
    ) -> u64 {
        let mut up: VecDeque<(Micros, StatePacket)> = VecDeque::new();
        let mut down: VecDeque<(Micros, StateAck)> = VecDeque::new();
        let mut bytes = 0u64;
        for ms in 0..steps {
            let now = ms * 1000;
            if ms % every == 0 {
                for k in 0..keys {
                    s.set(now, k, StateValue::Axis((ms % 1000) as f32 / 1000.0));
                }
            }
            while let Some(p) = s.poll_packet(now, 1150) {
                bytes += (p.encoded_len() + PACKET_OVERHEAD) as u64;
                up.push_back((now + delay, p));
            }
            while up.front().is_some_and(|(t, _)| *t <= now) {
                let (_, p) = up.pop_front().unwrap();
                r.on_packet(now, &p);
                if let Some(a) = r.poll_ack() {
                    down.push_back((now + delay, a));
                }
            }
            while down.front().is_some_and(|(t, _)| *t <= now) {
                let (_, a) = down.pop_front().unwrap();
                s.on_ack(now, &a);
            }
        }
        bytes
    }

    #[test]
    fn four_thousand_keys_fit_and_converge() {
        let mut s = StateSender::new(StateConfig::default());
        let mut r = StateReceiver::new();
        for k in 0..MAX_KEYS as u16 {
            assert!(s.set(0, k, StateValue::Int(k as i64)));
        }
        assert!(!s.set(0, MAX_KEYS as u16, StateValue::Int(0)));
        run_link(&mut s, &mut r, 0, 1, 200, 2_000);
        assert!(s.all_delivered());
        assert_eq!(r.iter().count(), MAX_KEYS);
        assert_eq!(r.get(4095).unwrap().value, StateValue::Int(4095));
    }

    #[test]
    fn the_budget_is_kept_and_the_stalest_key_goes_first() {
        // 64 keys changing every 10 ms (about 16 kB/s of entries) under a 4 kB/s budget.
        let cfg = StateConfig {
            budget_bytes_per_s: 4_000,
            ..StateConfig::default()
        };
        let mut s = StateSender::new(cfg);
        let mut r = StateReceiver::new();
        let bytes = run_link(&mut s, &mut r, 64, 10, 5_000, 1_000);
        // 5 s at 4 kB/s plus the initial burst.
        assert!(bytes <= 5 * 4_000 + 2_500, "{bytes} bytes");
        assert!(s.stats().budget_waits > 0);
        // No key starves: every key reached the receiver, and its worst staleness stays
        // within what sharing the budget implies (64 keys × 10 B at 4 kB/s: ~0.2 s per round).
        assert_eq!(r.iter().count(), 64);
        let st = s.staleness(5_000_000);
        assert_eq!(st.keys, 64);
        assert!(st.max_us < 600_000, "{st:?}");
        assert!(st.p50_us > 50_000, "the budget must show: {st:?}");
    }

    #[test]
    fn staleness_without_a_budget_is_about_the_one_way_delay() {
        let mut s = StateSender::new(StateConfig::default());
        let mut r = StateReceiver::new();
        run_link(&mut s, &mut r, 16, 10, 2_000, 3_000);
        let st = s.staleness(2_000_000);
        // Stale from a set until its delivery 3 ms later (±1 ms of stepping).
        assert!(st.mean_us >= 2_000 && st.mean_us <= 5_000, "{st:?}");
        assert!(st.max_us <= 8_000, "{st:?}");
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

    #[test]
    fn new_kinds_round_trip() {
        let values = [
            StateValue::PoseSample(crate::pose::PoseSample {
                sample_us: 123_456,
                pose: crate::pose::Pose::from_angles(30.0, -10.0, 0.0, [0.1, 1.7, -0.2]),
            }),
            StateValue::Haptic {
                low: 0.25,
                high: 1.0,
            },
            StateValue::Int(-42),
        ];
        for v in values {
            let mut out = Vec::new();
            v.encode_entry(9, &mut out);
            assert_eq!(out.len(), v.entry_len());
            let (k, back) = StateValue::parse_entry(&mut Reader::new(&out, "t")).unwrap();
            assert_eq!(k, 9);
            match (v, back) {
                (StateValue::PoseSample(a), StateValue::PoseSample(b)) => {
                    assert_eq!(a.sample_us, b.sample_us);
                    assert!(crate::pose::quat_angle(a.pose.orientation, b.pose.orientation) < 1e-3);
                }
                (a, b) => assert_eq!(a, b),
            }
        }
    }
}
