//! The one clock the runtime reads: CLOCK_MONOTONIC in microseconds.
//!
//! Host and client on one machine (also in different network namespaces) share it, so the
//! clock-offset estimate must come out ≈ 0 there. The protocol core never reads it: it gets
//! `now` as a parameter.

use untether_proto::Micros;

/// Microseconds of CLOCK_MONOTONIC.
pub fn now_us() -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Sleeps until the monotonic clock reaches `deadline_us` (returns at once if it has passed).
pub fn sleep_until(deadline_us: Micros) {
    let now = now_us();
    if deadline_us > now {
        std::thread::sleep(std::time::Duration::from_micros(deadline_us - now));
    }
}
