//! The client's settings: [`ClientConfig`], with its defaults.

use crate::crypto::{Suite, ALL_SUITES};
use crate::handshake::{fingerprint, PublicKey, SessionRng, StaticKeypair};
use crate::wire::Codec;
use crate::Micros;

/// Client settings.
#[derive(Clone)]
pub struct ClientConfig {
    /// Shown to the host.
    pub name: String,
    /// Which monotonic clock the application reads (see `ControlFrame::ClockId`): when the
    /// host reads the same, the clock offset is exactly 0.
    pub clock_id: Option<[u8; 16]>,
    /// Random per run (tells a restarted client from a retransmitted Hello).
    pub nonce: u64,
    /// Give up when the host has not answered within this.
    pub connect_timeout_us: Micros,
    /// Resend the Hello this often while connecting.
    pub hello_interval_us: Micros,
    /// A frame incomplete this long after its first shard is lost.
    pub reassembly_deadline_us: Micros,
    /// Overridden by the host's session parameters once connected.
    pub keepalive_us: Micros,
    pub idle_timeout_us: Micros,
    /// Clock-sync pings: a quick burst after connecting, then this often.
    pub ping_interval_us: Micros,
    /// Feedback to the host this often.
    pub feedback_interval_us: Micros,
    /// The largest datagram this client accepts.
    pub max_datagram: u16,
    /// The codecs this client decodes, preferred first: sent in the handshake (message 3,
    /// authenticated), the host picks one ([`wire::choose_codec`](crate::wire::choose_codec)).
    pub codecs: Vec<Codec>,
    /// SRTT ← α·RTT + (1−α)·SRTT.
    pub rtt_alpha: f64,
    /// Input retransmission timeout = β·SRTT (at least `min_rto_us`).
    pub rto_beta: f64,
    pub min_rto_us: Micros,
    /// The client's long-term key pair (its identity).
    pub identity: StaticKeypair,
    /// The host's key, if known (pinned): a host presenting another key is refused.
    pub host_key: Option<PublicKey>,
    /// Pair with this one-time PIN (shown by `untether pair --pin` on the host).
    pub pin: Option<String>,
    /// AEAD suites the client accepts, and the one it prefers.
    pub suites: u8,
    pub suite_preference: Suite,
    /// Seeds the session's CSPRNG (ephemeral keys, connection ids, SPAKE2).
    pub entropy: [u8; 32],
    /// The client → host latest-wins state channel's budget, bytes/s (0: none).
    pub state_budget_bytes_per_s: u64,
    /// Ask the host to resend the data shards of a frame that cannot complete (ShardNack),
    /// when the RTT leaves time before the frame's deadline; such a frame is then given up
    /// when the retries fail instead of as soon as a newer frame completes.
    pub retransmit: bool,
    /// The stream this client asks for (size, frame rate, bit rate; sent in message 3): the
    /// host grants it within its limits, and the Accept's parameters say what it granted.
    pub wants: Option<crate::handshake::StreamWants>,
    /// A VR client's eye views (sent in message 3): the host renders with them.
    pub view: Option<crate::handshake::ViewInfo>,
}

impl std::fmt::Debug for ClientConfig {
    /// Shows the configuration without secrets (the private key, the PIN, the entropy).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("name", &self.name)
            .field("connect_timeout_us", &self.connect_timeout_us)
            .field("hello_interval_us", &self.hello_interval_us)
            .field("reassembly_deadline_us", &self.reassembly_deadline_us)
            .field("keepalive_us", &self.keepalive_us)
            .field("idle_timeout_us", &self.idle_timeout_us)
            .field("max_datagram", &self.max_datagram)
            .field("codecs", &self.codecs)
            .field("identity", &self.identity)
            .field("host_key", &self.host_key.map(|k| fingerprint(&k)))
            .field("pin", &self.pin.as_ref().map(|_| "…"))
            .field("suites", &self.suites)
            .field("suite_preference", &self.suite_preference)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Defaults, with a fresh random identity and entropy from the OS (the runtime sets the
    /// stored identity once pairing is wired in).
    pub fn new(name: impl Into<String>) -> Self {
        let mut rng = SessionRng::from_os();
        ClientConfig {
            clock_id: None,
            name: name.into(),
            nonce: 1,
            connect_timeout_us: 3_000_000,
            hello_interval_us: 200_000,
            reassembly_deadline_us: 50_000,
            keepalive_us: 2_000_000,
            idle_timeout_us: 30_000_000,
            ping_interval_us: 500_000,
            feedback_interval_us: 100_000,
            max_datagram: 1500,
            // What FFmpeg's software decoders here handle; H.264 first (the fastest to
            // decode in software).
            codecs: vec![Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1],
            rtt_alpha: 0.9,
            rto_beta: 2.0,
            min_rto_us: 5_000,
            identity: StaticKeypair::generate(&mut rng),
            host_key: None,
            pin: None,
            suites: ALL_SUITES,
            // AES-GCM is the faster suite on CPUs with AES instructions (x86-64, ARMv8 with
            // the crypto extension); pick ChaCha20-Poly1305 on CPUs without them.
            suite_preference: Suite::Aes256Gcm,
            entropy: rng.seed(),
            retransmit: true,
            wants: None,
            view: None,
            state_budget_bytes_per_s: 0,
        }
    }
}
