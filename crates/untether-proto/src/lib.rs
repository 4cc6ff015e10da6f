//! untether's wire formats and protocol state machines, **sans-IO**: no sockets, no threads,
//! no clocks. Every entry point takes `now` (microseconds of the caller's monotonic clock), so a
//! whole session — lossy network included — runs in tests on a virtual clock, faster than real
//! time and repeatably (see [`sim`]).
//!
//! - [`wire`]: the datagram header and every message (docs/PROTOCOL.md is the spec).
//! - [`host::HostSession`] (several clients, one stream) / [`client::ClientSession`]: the two
//!   endpoints, driven by
//!   `handle_datagram` / `handle_timeout`, queried with `poll_transmit` / `poll_event` /
//!   `poll_timeout` (the shape of quinn-proto and str0m).
//! - Security: [`handshake`] (Noise `XX` via `snow`, PIN pairing through SPAKE2), [`crypto`]
//!   (AEAD packet protection, key updates), [`window`] (replay protection).
//! - Units: [`assembler`] (shards ↔ frames, loss detection), [`keyframe`] (requests and the
//!   host's cooldown), [`reliable`] (the ordered input channel), [`state`] (the latest-wins
//!   state channel), [`pose`] (head poses and quaternions), [`clock`] (offset and RTT), [`window`] (duplicate detection and packet
//!   loss counting).
//! - [`stats`]: the one percentile definition (nearest rank) and [`stats::Samples`], a
//!   session's latency samples in bounded memory.
//! - [`vectors`]: the hex test vectors of docs/PROTOCOL.md.
//! - [`units`]: the human units of settings (bitrates, durations, frame sizes), parsed once for
//!   the configuration file, the command line and the bench.

pub mod admission;
pub mod assembler;
pub mod audio;
pub mod client;
pub mod clock;
pub mod crypto;
pub mod fec;
pub mod handshake;
pub mod host;
pub mod keyframe;
pub mod paths;
pub mod pose;
pub mod rate;
pub mod reliable;
#[cfg(test)]
mod session_abuse_tests;
#[cfg(test)]
mod session_multi_tests;
#[cfg(test)]
mod session_tests;
/// The whole-session simulation (virtual clock, simulated links): the protocol's own tests and
/// the `sim` feature (the `state_scale` example), not in what ships.
#[cfg(any(test, feature = "sim"))]
pub mod sim;
#[cfg(any(test, feature = "sim"))]
pub mod sim_state;
pub mod state;
pub mod stats;
pub mod units;
pub mod vectors;
pub mod window;
pub mod wire;

use std::net::SocketAddr;

/// Microseconds of a monotonic clock (the caller's).
pub type Micros = u64;

pub use assembler::{Assembled, Assembler, AssemblerConfig, CompleteFrame, LossCause, SliceId};
pub use audio::{AudioPacket, AUDIO_RATE};
pub use client::{ClientConfig, ClientEvent, ClientPathStats, ClientSession, ClientStats, Route};
pub use clock::{ClockEstimate, ClockEstimator, ClockSample};
pub use crypto::Suite;
pub use fec::{FecMode, FecPolicy};
pub use handshake::{fingerprint, PublicKey, StaticKeypair, StreamWants, ViewInfo};
pub use host::{
    AccessPolicy, AccessRequest, ClientDatagrams, ClientId, ClientInfo, ClientStatus, CodecOffer,
    FrameMeta, HealthConfig, HostConfig, HostEvent, HostSession, HostStats, NoClient, PairingEvent,
    PairingPin, ReceiverKind, SlowViewer, StreamState, UnknownSlowViewer,
};
pub use keyframe::{KeyframeDecision, KeyframeGate, KeyframeRequester};
pub use paths::{PathConfig, PathStats, Scheduler, UnknownScheduler, MAX_PATHS};
pub use pose::{Pose, PoseSample};
pub use rate::{RateConfig, RateController, RateStats};
pub use reliable::{InputRecord, ReliableReceiver, ReliableSender};
pub use state::{Staleness, StateEntry, StateKey, StateReceiver, StateSender, StateValue};
pub use wire::{
    sanitize_peer_text, ByeReason, ClientRole, Codec, ControlFrame, Feedback, FrameTiming,
    HostEncoder, InputEvent, LatencyReport, LinkDeclineReason, RejectReason, SessionParams, Spread,
    TextChunk, UnknownCodec, WireError,
};

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dst: SocketAddr,
    pub payload: Vec<u8>,
}

/// Why a peer's session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GoneReason {
    /// Nothing heard for the idle timeout.
    Timeout,
    /// The peer said goodbye.
    Bye,
    /// A new run of the client at the same address took the session over.
    Replaced,
    /// The host said it is shutting down (stopped by its user).
    ShuttingDown,
    /// The host said it stopped on a failure.
    Failed,
    /// Host → viewer: its link stayed slower than the stream; the host dropped it (sustained
    /// loss or queueing, after being paused to keyframes).
    TooSlow,
}
