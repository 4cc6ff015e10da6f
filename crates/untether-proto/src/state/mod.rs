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
//!
//! The parts: the values and their entries (`value.rs`), the packets and acks on the wire
//! (`packet.rs`), the sender (`sender.rs`) and the receiver (`receiver.rs`); here the keys,
//! the bounds, and the tests of the two sides together over a link.

mod packet;
mod receiver;
mod sender;
mod value;

pub use packet::{StateAck, StatePacket};
pub use receiver::{StateEntry, StateReceiver, StateReceiverStats};
pub use sender::{Staleness, StateConfig, StateSender, StateSenderStats};
pub use value::StateValue;

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

/// A pointer at (x, −x): the value of the unit tests of the sender and the receiver.
#[cfg(test)]
fn p(x: i32) -> StateValue {
    StateValue::Pointer { x, y: -x }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Micros;
    use std::collections::VecDeque;

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
}
