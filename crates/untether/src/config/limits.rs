//! The allowed range of every numeric key, written once. Every integer key has one, within the
//! width the value ends in (`network.idle_timeout_ms` is a `u32` in the session parameters, a
//! millisecond key is multiplied into microseconds), so no value is truncated or wraps: it is
//! refused with its key and range.

#[allow(unused_imports)]
use super::*;

/// The allowed range of a numeric key, the only place it is written. Checked by the
/// validators below; the C API checks the values it is handed with the same limits.
#[derive(Clone, Copy, Debug)]
pub struct Limit<T> {
    pub key: &'static str,
    pub min: T,
    pub max: T,
}

impl<T: PartialOrd + fmt::Debug + fmt::Display + Copy> Limit<T> {
    /// `v`, or `key: v is out of range min..=max`.
    pub fn check(&self, v: T) -> Result<T, ConfigError> {
        self.check_wide(v)
    }

    /// Like [`check`](Self::check) for a value of a wider type (the C API's `int64_t`).
    pub fn check_wide<W>(&self, v: W) -> Result<T, ConfigError>
    where
        W: fmt::Display + Copy,
        T: TryFrom<W>,
    {
        match T::try_from(v) {
            Ok(t) if self.min <= t && t <= self.max => Ok(t),
            _ => Err(self.out_of_range(v)),
        }
    }

    /// `v` in `T` if it fits the type at all (the range is checked later, by
    /// [`check`](Self::check)); otherwise the same out-of-range error. What the config file's
    /// deserializer uses, so that `fps = 4294967297` or `keepalive_ms = -1` names the key and
    /// its range instead of the Rust type.
    pub fn fit<W>(&self, v: W) -> Result<T, ConfigError>
    where
        W: fmt::Display + Copy,
        T: TryFrom<W>,
    {
        T::try_from(v).map_err(|_| self.out_of_range(v))
    }

    pub(super) fn out_of_range(&self, v: impl fmt::Display) -> ConfigError {
        invalid(
            self.key,
            // Debug: a float bound shows as 0.0, not 0.
            format!("{v} is out of range {:?}..={:?}", self.min, self.max),
        )
    }
}

pub const FPS: Limit<u32> = Limit {
    key: "video.fps",
    min: 1,
    max: 240,
};
pub const BITRATE_KBPS: Limit<u32> = Limit {
    key: "video.bitrate_kbps",
    min: 100,
    max: 500_000,
};
/// Encoder threads; 0: auto, sized to the machine's cores and the picture
/// (`untether_media::codec::sizing`).
pub const ENCODER_THREADS: Limit<usize> = Limit {
    key: "video.encoder_threads",
    min: 0,
    max: 16,
};
/// Frames per intra-refresh sweep (or between an encoder's own keyframes).
pub const REFRESH_PERIOD: Limit<u32> = Limit {
    key: "video.refresh_period",
    min: 2,
    max: 600,
};
/// Slices per frame (1: frames are sent whole); the wire's bound (docs/PROTOCOL.md §6.3).
pub const SLICES: Limit<u8> = Limit {
    key: "video.slices",
    min: 1,
    max: untether_proto::wire::MAX_SLICES,
};
/// Frames between keyframes (0: keyframes only when a client joins or asks).
pub const GOP_FRAMES: Limit<u32> = Limit {
    key: "video.gop_frames",
    min: 0,
    max: 100_000,
};
/// The Opus bit rate of the host's audio, kbit/s (what libopus takes for 48 kHz stereo).
pub const AUDIO_BITRATE_KBPS: Limit<u32> = Limit {
    key: "host.audio_bitrate_kbps",
    min: 16,
    max: 510,
};
/// Frame width and height (and even: 4:2:0 chroma).
pub const WIDTH: Limit<u32> = Limit {
    key: "video.resolution",
    min: 512,
    max: 4096,
};
pub const HEIGHT: Limit<u32> = Limit {
    key: "video.resolution",
    min: 288,
    max: 2304,
};
/// 0 = no cooldown.
pub const KEYFRAME_COOLDOWN_MS: Limit<u64> = Limit {
    key: "host.keyframe_cooldown_ms",
    min: 0,
    max: 10_000,
};
/// Clients served at once (several clients, one stream; docs/ARCHITECTURE.md).
pub const MAX_CLIENTS: Limit<usize> = Limit {
    key: "host.max_clients",
    min: 1,
    max: 256,
};
/// Seconds between the host's one-line status log lines (0: none).
pub const STATUS_INTERVAL_S: Limit<u64> = Limit {
    key: "host.status_interval_s",
    min: 0,
    max: 86_400,
};
pub const PIN_TTL_S: Limit<u64> = Limit {
    key: "host.pin_ttl_s",
    min: 10,
    max: 86_400,
};
/// Wrong PINs the host tolerates before it drops a PIN (`untether pair --pin
/// --pin-attempts`): a handful, so that a six-digit PIN cannot be guessed.
pub const PIN_ATTEMPTS: Limit<u32> = Limit {
    key: "--pin-attempts",
    min: 1,
    max: 10,
};
pub const CONNECT_TIMEOUT_MS: Limit<u64> = Limit {
    key: "client.connect_timeout_ms",
    min: 100,
    max: 60_000,
};
pub const REASSEMBLY_DEADLINE_MS: Limit<u64> = Limit {
    key: "client.reassembly_deadline_ms",
    min: 1,
    max: 1000,
};
/// 0 = off.
pub const INPUT_PROBE_INTERVAL_MS: Limit<u64> = Limit {
    key: "client.input_probe_interval_ms",
    min: 0,
    max: 60_000,
};
pub const DECODER_THREADS: Limit<usize> = Limit {
    key: "client.decoder_threads",
    min: 1,
    max: 16,
};
pub const MAX_DATAGRAM: Limit<u16> = Limit {
    key: "network.max_datagram",
    min: 256,
    max: 9000,
};
/// Sent in the session parameters as a `u32`; must also be below [`IDLE_TIMEOUT_MS`]'s value.
pub const KEEPALIVE_MS: Limit<u64> = Limit {
    key: "network.keepalive_ms",
    min: 10,
    max: 600_000,
};
/// Sent in the session parameters as a `u32`.
pub const IDLE_TIMEOUT_MS: Limit<u64> = Limit {
    key: "network.idle_timeout_ms",
    min: 100,
    max: 3_600_000,
};
/// Fraction of the frame interval; 0 = off.
pub const PACING: Limit<f64> = Limit {
    key: "network.pacing",
    min: 0.0,
    max: 1.0,
};
pub const PACING_BATCH: Limit<u32> = Limit {
    key: "network.pacing_batch",
    min: 1,
    max: crate::pacing::MAX_BATCH,
};

pub const RTSP_QUEUE_FRAMES: Limit<u32> = Limit {
    key: "rtsp.queue_frames",
    min: 1,
    max: 60,
};
/// 0 = only on demand; otherwise at least 100 ms (checked by `RtspToml::validate`).
pub const RTSP_KEYFRAME_INTERVAL_MS: Limit<u64> = Limit {
    key: "rtsp.keyframe_interval_ms",
    min: 0,
    max: 60_000,
};
/// An RTP packet's size: at least what a minimum IPv4 MTU leaves, at most a jumbo frame.
pub const RTSP_MTU: Limit<u32> = Limit {
    key: "rtsp.mtu",
    min: 400,
    max: 9000,
};
pub const RTSP_MAX_VIEWERS: Limit<u32> = Limit {
    key: "rtsp.max_viewers",
    min: 1,
    max: 256,
};
/// 0 = no budget.
pub const STATE_BUDGET_KBPS: Limit<u32> = Limit {
    key: "network.state_budget_kbps",
    min: 0,
    max: 1_000_000,
};
pub const IPD_MM: Limit<f32> = Limit {
    key: "vr.ipd_mm",
    min: 40.0,
    max: 90.0,
};
pub const EYE_FOV_DEG: Limit<f32> = Limit {
    key: "vr.fov_deg",
    min: 40.0,
    max: 140.0,
};
pub const POSE_RATE_HZ: Limit<u32> = Limit {
    key: "vr.pose_rate_hz",
    min: 1,
    max: 1000,
};

/// Deserializes an integer key of the config file into its type `T`, refusing a value that
/// does not fit with the key's own message ([`Limit::fit`]).
pub(super) fn de_fit<'de, D, T>(d: D, limit: Limit<T>) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: PartialOrd + fmt::Debug + fmt::Display + Copy + TryFrom<i64> + TryFrom<u64>,
{
    struct Fit<T>(Limit<T>);
    impl<T> serde::de::Visitor<'_> for Fit<T>
    where
        T: PartialOrd + fmt::Debug + fmt::Display + Copy + TryFrom<i64> + TryFrom<u64>,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "an integer in {:?}..={:?}", self.0.min, self.0.max)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
            self.0.fit(v).map_err(E::custom)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
            self.0.fit(v).map_err(E::custom)
        }
    }
    d.deserialize_any(Fit(limit))
}

/// `fn de_KEY(d) -> Result<T, _>` for `#[serde(deserialize_with = "…")]`, one per limit.
macro_rules! de_fns {
    ($($name:ident: $limit:ident -> $t:ty),* $(,)?) => {$(
        pub(super) fn $name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            de_fit(d, $limit)
        }
    )*};
}

de_fns! {
    de_fps: FPS -> u32,
    de_encoder_threads: ENCODER_THREADS -> usize,
    de_refresh_period: REFRESH_PERIOD -> u32,
    de_slices: SLICES -> u8,
    de_gop_frames: GOP_FRAMES -> u32,
    de_audio_bitrate_kbps: AUDIO_BITRATE_KBPS -> u32,
    de_keyframe_cooldown_ms: KEYFRAME_COOLDOWN_MS -> u64,
    de_pin_ttl_s: PIN_TTL_S -> u64,
    de_status_interval_s: STATUS_INTERVAL_S -> u64,
    de_max_clients: MAX_CLIENTS -> usize,
    de_connect_timeout_ms: CONNECT_TIMEOUT_MS -> u64,
    de_reassembly_deadline_ms: REASSEMBLY_DEADLINE_MS -> u64,
    de_decoder_threads: DECODER_THREADS -> usize,
    de_input_probe_interval_ms: INPUT_PROBE_INTERVAL_MS -> u64,
    de_max_datagram: MAX_DATAGRAM -> u16,
    de_keepalive_ms: KEEPALIVE_MS -> u64,
    de_idle_timeout_ms: IDLE_TIMEOUT_MS -> u64,
    de_pacing_batch: PACING_BATCH -> u32,
    de_rtsp_queue_frames: RTSP_QUEUE_FRAMES -> u32,
    de_rtsp_mtu: RTSP_MTU -> u32,
    de_rtsp_keyframe_interval_ms: RTSP_KEYFRAME_INTERVAL_MS -> u64,
    de_rtsp_max_viewers: RTSP_MAX_VIEWERS -> u32,
    de_state_budget_kbps: STATE_BUDGET_KBPS -> u32,
    de_pose_rate_hz: POSE_RATE_HZ -> u32,
}

/// How long a one-time browser link is valid.
pub const WEBRTC_LINK_TTL_S: Limit<u64> = Limit {
    key: "webrtc.link_ttl_s",
    min: 10,
    max: 86_400,
};
/// Browsers served at once (each is one str0m session on the host's network thread).
pub const WEBRTC_MAX_BROWSERS: Limit<u32> = Limit {
    key: "webrtc.max_browsers",
    min: 1,
    max: 32,
};

de_fns! {
    de_webrtc_link_ttl_s: WEBRTC_LINK_TTL_S -> u64,
    de_webrtc_max_browsers: WEBRTC_MAX_BROWSERS -> u32,
}
