//! untether's impairment lab: the relay behind `untether netem` (docs/NETEM.md).
//!
//! It makes a good link bad on purpose, reproducibly, so the protocol's recovery can be measured:
//! [`impair`] is the pure, seeded model of one direction of a link (loss, bursts, delay and
//! jitter, rate limit, reordering, duplication, outages), [`relay`] the UDP forwarder that applies
//! it per direction, [`profile`] its file format (docs/netem/*.toml), [`units`] the parsing of
//! `2%`, `5ms`, `20mbit`, `5s@10s`, [`args`] the same knobs as command-line flags (shared by
//! `untether netem` and `untether bench`), [`netns`] the network-namespace testbeds (veth
//! pairs with kernel shaping) that `untether bench` and the tests run sessions across, and
//! [`ports`] whether a host process listens yet (what they wait on before a client starts).
//!
//! The sockets and the clock come from `untether-net`; nothing in the host or client pipelines
//! (nor `libuntether`) depends on this crate.

#![warn(missing_docs)]

pub mod args;
pub mod impair;
pub mod netns;
pub mod ports;
pub mod profile;
pub mod relay;
pub mod units;

pub use args::{DirectionScope, ImpairmentArgs};
pub use impair::{DropCause, Impairer, Impairment, Verdict};
pub use profile::{ConfigError, Direction, Profile, ProfileSpec};
pub use relay::{DirectionStats, Relay, RelayConfig, RelaySet, RelayStats};
