//! The one clock the runtime reads: CLOCK_MONOTONIC in microseconds.
//!
//! Host and client on one machine (also in different network namespaces) share it, so the
//! clock-offset estimate must come out ≈ 0 there. The protocol core never reads it: it gets
//! `now` as a parameter. It is defined once, in `untether-clock` (which `untether-net` and
//! `untether-media` both read); this module keeps the path `untether::clock::now_us`.

pub use untether_clock::{clock_identity, now_us, sleep_until};
