//! untether's one clock: `CLOCK_MONOTONIC` in microseconds ([`now_us`]), sleeping until a
//! deadline on it ([`sleep_until`]) and which clock it is ([`clock_identity`]).
//!
//! Host and client on one machine (also in different network namespaces) share it, so the
//! clock-offset estimate must come out ≈ 0 there. Its values are `untether_proto::Micros`
//! (a `u64`); the protocol core never reads a clock, it is given `now`. This crate depends on
//! nothing but libc, so the sockets (`untether-net`, which re-exports it) and the media
//! (`untether-media`) read the same clock without depending on each other.

#![warn(missing_docs)]

use std::time::Duration;

/// Microseconds of `CLOCK_MONOTONIC` (the project's clock; the same across network namespaces of
/// one machine, so host and client there share it).
pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Sleeps until the monotonic clock ([`now_us`]) reaches `deadline_us` (returns at once if it
/// has passed).
pub fn sleep_until(deadline_us: u64) {
    let now = now_us();
    if deadline_us > now {
        std::thread::sleep(Duration::from_micros(deadline_us - now));
    }
}

/// Which monotonic clock [`now_us`] reads: a hash of the kernel's boot id and this process's
/// time namespace. Two processes with the same identity read the same `CLOCK_MONOTONIC` (one
/// machine, network namespaces included), so a host and a client that find each other's equal
/// need no offset estimate. None where the kernel does not say (not Linux, no /proc).
pub fn clock_identity() -> Option<[u8; 16]> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    // Time namespaces can offset CLOCK_MONOTONIC; an absent link is the initial namespace.
    let time_ns = std::fs::read_link("/proc/self/ns/time")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let text = format!("{}|{time_ns}", boot.trim());
    // Two FNV-1a 64-bit hashes with different offsets: an identity, not a secret.
    let fnv = |basis: u64| {
        text.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn sleep_until_reaches_the_deadline_and_returns_at_once_after_it() {
        let deadline = now_us() + 5_000;
        sleep_until(deadline);
        assert!(now_us() >= deadline);
        let t = Instant::now();
        sleep_until(now_us().saturating_sub(1_000_000));
        assert!(t.elapsed() < Duration::from_millis(5));
    }

    #[test]
    fn this_machine_has_one_clock_identity() {
        let a = clock_identity().expect("Linux says its boot id");
        assert_eq!(Some(a), clock_identity());
        assert_ne!(a, [0; 16]);
    }
}
