//! The allowed range of every numeric key, written once.

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

    fn out_of_range(&self, v: impl fmt::Display) -> ConfigError {
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
pub const ENCODER_THREADS: Limit<usize> = Limit {
    key: "video.encoder_threads",
    min: 1,
    max: 16,
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
pub const PIN_TTL_S: Limit<u64> = Limit {
    key: "host.pin_ttl_s",
    min: 10,
    max: 86_400,
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
