//! The host's settings ([`HostConfig`]) and their defaults.

use crate::crypto::{ALL_SUITES, DEFAULT_KEY_UPDATE_LOG2};
use crate::fec::FecPolicy;
use crate::handshake::{PublicKey, SessionRng, StaticKeypair};
use crate::paths::PathConfig;
use crate::rate::RateConfig;
use crate::state::StateConfig;
use crate::wire::{NoCommonCodec, SessionParams};
use crate::Micros;

use super::HealthConfig;
#[allow(unused_imports)]
use super::{HostSession, HostStats};

/// Who may open a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPolicy {
    /// Any client that completes the handshake (still authenticated and encrypted). For demos
    /// and tests on a trusted machine.
    Open,
    /// Only clients whose key is allowed ([`HostConfig::allowed_clients`],
    /// [`HostSession::allow_client`]) or that pair with the current one-time PIN. Others leave
    /// an access request for the host's user.
    Allowlist,
}

/// A codec a host can encode, and the refresh period of its stream
/// ([`SessionParams::refresh_period`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecOffer {
    pub codec: crate::wire::Codec,
    pub refresh_period: u16,
}

/// Why a client gets no codec (its Reject says so, [`crate::wire::RejectReason::Codec`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CodecRefusal {
    /// The host encodes none of the client's codecs.
    #[error(transparent)]
    NoneInCommon(NoCommonCodec),
    /// The stream other clients watch has a codec this client does not decode.
    #[error(
        "{0} (the stream the host's other clients are watching; the host offers the others when \
         none is connected)"
    )]
    StreamInUse(NoCommonCodec),
}

/// Host settings.
#[derive(Clone)]
pub struct HostConfig {
    /// The session parameters every client is accepted with; `params.codec` (and
    /// `params.refresh_period`) are the stream's, set from [`codecs`](Self::codecs) when the
    /// first client is admitted.
    pub params: SessionParams,
    /// The codecs this host can encode, best first, each with its stream's refresh period
    /// (empty: only `params.codec`, with `params.refresh_period`). The host has one stream: a
    /// client admitted while no other is connected is given the first codec of its own list,
    /// in its order of preference, that is here ([`crate::wire::choose_codec`]), and the
    /// stream takes that codec; a client joining others is given the stream's codec. None in
    /// common is a Reject naming both lists.
    pub codecs: Vec<CodecOffer>,
    /// Which monotonic clock the application reads (see `ControlFrame::ClockId`), told to the
    /// client beside the Accept; None: not told (the client estimates the offset).
    pub clock_id: Option<[u8; 16]>,
    /// The encoder, preset and conversion that make the stream, told to the client beside the
    /// Accept (its report names them); None: not told.
    pub encoder: Option<crate::wire::HostEncoder>,
    /// After honouring a keyframe request, ignore further ones for this long.
    pub keyframe_cooldown_us: Micros,
    /// Mixed into the random generator's seed (kept for compatibility; `entropy` is the seed).
    pub connection_id_seed: u64,
    /// The host's long-term key pair (its identity).
    pub identity: StaticKeypair,
    pub access: AccessPolicy,
    /// Keys of clients allowed to connect (with [`AccessPolicy::Allowlist`]).
    pub allowed_clients: Vec<PublicKey>,
    /// Keys of clients whose access was revoked: refused without an access request.
    pub revoked_clients: Vec<PublicKey>,
    /// AEAD suites the host accepts ([`Suite::bit`] mask).
    pub suites: u8,
    /// The host → client latest-wins state channel (its bandwidth budget, per client): see
    /// [`HostSession::publish_state`].
    pub state: StateConfig,
    /// Send video shards authenticated but not encrypted (control and input stay encrypted).
    pub video_auth_only: bool,
    /// Keys change every 2^this packets.
    pub key_update_log2: u8,
    /// Most handshakes in progress; a new one evicts the oldest.
    pub max_handshakes: usize,
    /// A handshake not finished within this is dropped.
    pub handshake_timeout_us: Micros,
    /// A client heard nothing from for this long (default 5 s: its Feedback comes every
    /// 100 ms, its keep-alive every 2 s, so two keep-alives missed) is **silent**: it is sent
    /// no video, and if it controlled, control passes on. Its slot stays until the idle
    /// timeout; a datagram from it makes it live again, from the next keyframe.
    pub silence_us: Micros,
    /// New handshakes (and replies to unknown addresses) per second, sustained …
    pub handshake_rate: u32,
    /// … and in a burst.
    pub handshake_burst: u32,
    /// Most pending access requests kept (default [`DEFAULT_MAX_ACCESS_REQUESTS`], the size
    /// of the runtime's `pending_requests.json`): when full, a new one takes the place of the
    /// least recently asked of the busiest address (counted in
    /// [`HostStats::access_requests_evicted`]).
    pub max_access_requests: usize,
    /// A pending access request not repeated for this long is forgotten (default
    /// [`ACCESS_REQUEST_TTL_US`], 5 minutes): a client still waiting retries well within it.
    pub access_request_ttl_us: Micros,
    /// New access requests (a key not yet pending) accepted from one IP address per minute;
    /// more are refused and counted. A repeated request from a pending key is not new.
    pub access_requests_per_minute: u32,
    /// Seeds the session's CSPRNG (ephemeral keys, connection ids, SPAKE2).
    pub entropy: [u8; 32],
    /// Reed–Solomon parity per video frame (default: adaptive, 5–50 %), chosen per client
    /// from its own loss.
    pub fec: FecPolicy,
    /// Multipath: the scheduler and the path probes (used once a client has several paths).
    pub paths: PathConfig,
    /// Adaptive bitrate (None: the configured bitrate, fixed). With it, the host pings every
    /// client every 100 ms for the queueing delay; the controller's link sets the bitrate.
    pub rate: Option<RateConfig>,
    /// Keep the last frames' data shards and resend those a client's ShardNack names.
    pub retransmit: bool,
    /// Most clients served at once (at least 1); one more is refused as busy.
    pub max_clients: usize,
    /// When a viewer cannot keep up with the stream.
    pub health: HealthConfig,
    /// The stream refreshes itself (intra refresh): a client that joins waits for the next
    /// frame marked as an entry point ([`FrameMeta::entry_point`], the start of a refresh
    /// sweep) instead of asking the encoder for a keyframe for everyone. False (the default):
    /// a join asks for a keyframe, within the keyframe cooldown — unless the stream's
    /// `params.refresh_period` is non-zero, which means the same.
    pub stream_refreshes: bool,
}

impl std::fmt::Debug for HostConfig {
    /// Shows the configuration without secrets (the private key and the entropy).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("params", &self.params)
            .field("codecs", &self.codecs)
            .field("keyframe_cooldown_us", &self.keyframe_cooldown_us)
            .field("identity", &self.identity)
            .field("access", &self.access)
            .field("allowed_clients", &self.allowed_clients.len())
            .field("revoked_clients", &self.revoked_clients.len())
            .field("suites", &self.suites)
            .field("state", &self.state)
            .field("video_auth_only", &self.video_auth_only)
            .field("key_update_log2", &self.key_update_log2)
            .field("max_handshakes", &self.max_handshakes)
            .field("handshake_timeout_us", &self.handshake_timeout_us)
            .field("silence_us", &self.silence_us)
            .field("handshake_rate", &self.handshake_rate)
            .field("handshake_burst", &self.handshake_burst)
            .field("max_access_requests", &self.max_access_requests)
            .field("access_request_ttl_us", &self.access_request_ttl_us)
            .field(
                "access_requests_per_minute",
                &self.access_requests_per_minute,
            )
            .field("fec", &self.fec)
            .field("paths", &self.paths)
            .field("rate", &self.rate)
            .field("retransmit", &self.retransmit)
            .field("max_clients", &self.max_clients)
            .field("health", &self.health)
            .field("stream_refreshes", &self.stream_refreshes)
            .finish_non_exhaustive()
    }
}

/// The default of [`HostConfig::max_access_requests`]: as many as the runtime keeps on disk
/// (`pending_requests.json`).
pub const DEFAULT_MAX_ACCESS_REQUESTS: usize = 32;
/// The default of [`HostConfig::access_request_ttl_us`]: 5 minutes.
pub const ACCESS_REQUEST_TTL_US: Micros = 300_000_000;

/// The default of [`HostConfig::max_clients`] (`host.max_clients`).
pub const DEFAULT_MAX_CLIENTS: usize = 8;

impl HostConfig {
    /// When a client counts as silent: [`silence_us`](Self::silence_us), but never before
    /// two and a half keep-alive intervals (a session with a long keep-alive is not judged on
    /// a short silence).
    pub fn silence_after_us(&self) -> Micros {
        self.silence_us
            .max(self.params.keepalive_ms as Micros * 1000 * 5 / 2)
    }

    /// Defaults with a fresh random identity and entropy from the OS, and
    /// [`AccessPolicy::Open`] (the runtime sets [`AccessPolicy::Allowlist`] and the stored
    /// identity once pairing is wired in).
    pub fn new(params: SessionParams) -> Self {
        let mut rng = SessionRng::from_os();
        HostConfig {
            params,
            codecs: Vec::new(),
            clock_id: None,
            encoder: None,
            keyframe_cooldown_us: 50_000,
            connection_id_seed: 0x5eed,
            identity: StaticKeypair::generate(&mut rng),
            access: AccessPolicy::Open,
            allowed_clients: Vec::new(),
            revoked_clients: Vec::new(),
            suites: ALL_SUITES,
            state: StateConfig::default(),
            video_auth_only: false,
            key_update_log2: DEFAULT_KEY_UPDATE_LOG2,
            max_handshakes: 16,
            handshake_timeout_us: 5_000_000,
            silence_us: 5_000_000,
            handshake_rate: 200,
            handshake_burst: 32,
            max_access_requests: DEFAULT_MAX_ACCESS_REQUESTS,
            access_request_ttl_us: ACCESS_REQUEST_TTL_US,
            access_requests_per_minute: 4,
            entropy: rng.seed(),
            fec: FecPolicy::default(),
            paths: PathConfig::default(),
            rate: None,
            retransmit: true,
            max_clients: DEFAULT_MAX_CLIENTS,
            health: HealthConfig::default(),
            stream_refreshes: false,
        }
    }

    /// The codec for a client admitted now: its first choice the host can encode. The host has
    /// one stream (one encoder): while `others` watch it, a newcomer is given its codec. Err
    /// says why none fits.
    pub(super) fn choose_codec(
        &self,
        others: bool,
        decodes: &[crate::wire::Codec],
    ) -> Result<crate::wire::Codec, CodecRefusal> {
        let offered: Vec<crate::wire::Codec> = if others || self.codecs.is_empty() {
            vec![self.params.codec]
        } else {
            self.codecs.iter().map(|o| o.codec).collect()
        };
        crate::wire::choose_codec(&offered, decodes).map_err(|why| {
            if others && self.codecs.len() > 1 {
                CodecRefusal::StreamInUse(why)
            } else {
                CodecRefusal::NoneInCommon(why)
            }
        })
    }

    /// The first client (or a lone client's new run) sets the stream's codec, and the refresh
    /// period offered with it.
    pub(super) fn set_codec(&mut self, c: crate::wire::Codec) {
        self.params.codec = c;
        if let Some(o) = self.codecs.iter().find(|o| o.codec == c) {
            self.params.refresh_period = o.refresh_period;
        }
    }

    /// The stream's size, frame rate and bit rate for a client admitted now: the first client
    /// (none `others`) sets them from its wants within the configured `limits` (none: the
    /// limits), as it sets the codec; a client joining others gets the stream as it is. What
    /// it asked for, what it got and whether the limits lowered it (None: it asked nothing).
    pub(super) fn grant_stream(
        &mut self,
        limits: &(SessionParams, Option<RateConfig>),
        wants: Option<crate::StreamWants>,
        others: bool,
    ) -> Option<(crate::StreamWants, SessionParams, bool)> {
        if others {
            let w = wants?;
            let clamped = w.grant(&limits.0).1;
            return Some((w, self.params, clamped));
        }
        let (granted, clamped) = wants.unwrap_or_default().grant(&limits.0);
        let p = &mut self.params;
        (p.width, p.height, p.fps, p.bitrate_kbps) = (
            granted.width,
            granted.height,
            granted.fps,
            granted.bitrate_kbps,
        );
        // The adaptive bitrate stays at or below what was granted.
        self.rate = limits.1.map(|r| RateConfig {
            max_kbps: granted.bitrate_kbps,
            min_kbps: r.min_kbps.min(granted.bitrate_kbps),
            ..r
        });
        wants.map(|w| (w, self.params, clamped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Codec;

    #[test]
    fn a_codec_refusal_says_whether_the_stream_is_shared() {
        let none = NoCommonCodec {
            host: vec![Codec::Hevc],
            client: vec![Codec::H264],
        };
        let plain = "no video codec in common: the host encodes hevc, this client decodes h264";
        assert_eq!(CodecRefusal::NoneInCommon(none.clone()).to_string(), plain);
        assert_eq!(
            CodecRefusal::StreamInUse(none).to_string(),
            format!(
                "{plain} (the stream the host's other clients are watching; the host offers the \
                 others when none is connected)"
            )
        );
    }
}
