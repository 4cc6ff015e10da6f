//! Configuration: a TOML file whose every key is documented in docs/CONFIG.md, overridden by
//! command-line flags. Unknown keys and bad values are errors that name the key and the allowed
//! values.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use untether_media::codec::VideoPath;
use untether_proto::units;

/// The UDP port a host listens on by default.
pub const DEFAULT_PORT: u16 = 9710;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read. The message is the path only: the I/O error is the source, so
    /// an error chain printed in full names it once.
    #[error("cannot read config file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    /// A bad value: `key: what is wrong; what is allowed`.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    /// The key a bad value belongs to (`video.fps`), if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

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

/// A frame size such as 1280x720.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Resolution {
    pub width: u32,
    pub height: u32,
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// `WIDTHxHEIGHT` or a named size ([`units::parse_resolution`]); the range is checked by
/// [`Resolution::validate`].
impl FromStr for Resolution {
    type Err = units::UnitError;
    fn from_str(s: &str) -> Result<Self, units::UnitError> {
        let (width, height) = units::parse_resolution(s)?;
        Ok(Resolution { width, height })
    }
}

impl Resolution {
    /// Within [`WIDTH`] × [`HEIGHT`], both even.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (w, h) = (self.width, self.height);
        if WIDTH.check(w).is_err() || HEIGHT.check(h).is_err() {
            return Err(invalid(
                "video.resolution",
                format!(
                    "{self} is out of range {:?}..={:?} x {:?}..={:?}",
                    WIDTH.min, WIDTH.max, HEIGHT.min, HEIGHT.max
                ),
            ));
        }
        if w % 2 != 0 || h % 2 != 0 {
            return Err(invalid(
                "video.resolution",
                format!("{self}: width and height must be even"),
            ));
        }
        Ok(())
    }
}

/// `[video]`: what the host captures and how it encodes it. The text form of
/// [`VideoConfig`]; [`validate`](Self::validate) turns it into one.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VideoToml {
    pub resolution: String,
    pub fps: u32,
    /// kbit/s: a number, or a string with a unit (`"10M"`, [`units::parse_bitrate`]).
    #[serde(deserialize_with = "de_bitrate")]
    pub bitrate_kbps: u32,
    /// `libx264` or `libx264rgb`; not given: follows from `conversion` (see
    /// [`VideoPath::parse`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder: Option<String>,
    pub preset: String,
    /// `simd`, `swscale` or `rgb`; not given: follows from `encoder`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversion: Option<String>,
    pub encoder_threads: usize,
}

fn de_bitrate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct Kbps;
    impl serde::de::Visitor<'_> for Kbps {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", units::BITRATE_FORMS)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u32, E> {
            u32::try_from(v).map_err(|_| E::custom(format!("{v} is not {}", units::BITRATE_FORMS)))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u32, E> {
            u32::try_from(v).map_err(|_| E::custom(format!("{v} is not {}", units::BITRATE_FORMS)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u32, E> {
            units::parse_bitrate(v).map_err(E::custom)
        }
    }
    d.deserialize_any(Kbps)
}

impl Default for VideoToml {
    /// [`VideoConfig::default`], with `encoder` and `conversion` left out (they follow from
    /// each other, so a file may name just one).
    fn default() -> Self {
        VideoToml {
            encoder: None,
            conversion: None,
            ..VideoToml::from(&VideoConfig::default())
        }
    }
}

impl From<&VideoConfig> for VideoToml {
    fn from(v: &VideoConfig) -> Self {
        VideoToml {
            resolution: v.resolution.to_string(),
            fps: v.fps,
            bitrate_kbps: v.bitrate_kbps,
            encoder: Some(v.path.encoder_name().into()),
            preset: v.preset.clone(),
            conversion: Some(v.path.conversion().name().into()),
            encoder_threads: v.encoder_threads,
        }
    }
}

/// `[scene]`: the built-in test scene.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SceneToml {
    pub spin_deg_per_s: f32,
    pub walk_speed: f32,
}

impl SceneToml {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.spin_deg_per_s.is_finite() {
            return Err(invalid(
                "scene.spin_deg_per_s",
                format!(
                    "{} is not a number of degrees per second",
                    self.spin_deg_per_s
                ),
            ));
        }
        if !(self.walk_speed.is_finite() && self.walk_speed >= 0.0) {
            return Err(invalid(
                "scene.walk_speed",
                format!("{} is not a speed in m/s (0 or more)", self.walk_speed),
            ));
        }
        Ok(())
    }
}

impl Default for SceneToml {
    fn default() -> Self {
        SceneToml {
            spin_deg_per_s: 30.0,
            walk_speed: 0.6,
        }
    }
}

/// `[host]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostToml {
    pub bind: String,
    pub keyframe_cooldown_ms: u64,
    /// Who may connect: allowlist, open or pin.
    pub access: String,
    /// Keys, allowlist, access requests (empty: `$XDG_STATE_HOME/untether`).
    pub state_dir: String,
    /// How long a PIN made by `access = "pin"` is valid, seconds.
    pub pin_ttl_s: u64,
}

impl Default for HostToml {
    fn default() -> Self {
        HostToml {
            bind: format!("0.0.0.0:{DEFAULT_PORT}"),
            keyframe_cooldown_ms: 50,
            access: "allowlist".into(),
            state_dir: String::new(),
            pin_ttl_s: 300,
        }
    }
}

impl HostToml {
    /// The access policy.
    pub fn access(&self) -> Result<crate::identity::Access, ConfigError> {
        self.access
            .parse()
            .map_err(|m: String| invalid("host.access", m))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.access()?;
        PIN_TTL_S.check(self.pin_ttl_s)?;
        Ok(())
    }
}

/// `[client]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientToml {
    pub name: String,
    pub headless: bool,
    pub connect_timeout_ms: u64,
    pub reassembly_deadline_ms: u64,
    pub decoder_threads: usize,
    pub input_probe_interval_ms: u64,
    /// The client's key and known hosts (empty: `$XDG_STATE_HOME/untether`).
    pub state_dir: String,
    /// More paths to the host besides the main address (multipath, up to 3 more):
    /// `"[LOCAL_IP@]HOST[:PORT]"` each, e.g. `"192.168.2.7@192.168.2.1:9710"` to send from
    /// a second interface. Port defaults to the main address's.
    pub paths: Vec<String>,
}

impl Default for ClientToml {
    fn default() -> Self {
        ClientToml {
            name: default_client_name(),
            headless: false,
            connect_timeout_ms: 3000,
            reassembly_deadline_ms: 50,
            decoder_threads: 2,
            input_probe_interval_ms: 0,
            state_dir: String::new(),
            paths: Vec::new(),
        }
    }
}

fn default_client_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "untether-client".to_string())
}

/// `[network]`: both sides.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkToml {
    pub max_datagram: u16,
    pub keepalive_ms: u64,
    pub idle_timeout_ms: u64,
    /// Host: forward error correction of video, `"off"`, `"adaptive"` or `"<percent>%"`.
    pub fec: String,
    /// Host: which of a multipath client's paths carry each datagram: `"redundant"` (all),
    /// `"keyframes"` (keyframes, control and audio on all; other frames on the fastest), or
    /// `"lowest-delay"` (the fastest live path). Used only when the client has several paths.
    pub scheduler: String,
    /// Host: adapt the encoder's bitrate (at most `video.bitrate_kbps`) to the link's
    /// queueing delay and loss.
    pub adaptive_bitrate: bool,
    /// Both sides: resend lost video shards the client asks for when the RTT leaves time
    /// before the frame's deadline (client: ask; host: answer).
    pub retransmit: bool,
    /// Host: send pacing, the fraction (0.0–1.0) of the frame interval over which a frame's
    /// datagrams are spread in batches of `pacing_batch` instead of sent in one burst; `0` =
    /// off. Off by default: pacing delays a frame's last shard — and so glass-to-glass — by up
    /// to this fraction of the interval (0.5 at 60 fps: up to 8.3 ms, capped at 25 ms), which
    /// only pays where bursts are lost (Wi-Fi, a shallow queue, a token-bucket rate limiter).
    /// Try 0.25–0.5 there and measure (`untether bench --pacing`).
    pub pacing: f64,
    /// Host: datagrams per pacing batch, sent back to back (1–64; 64 is the kernel's UDP GSO
    /// segment limit).
    pub pacing_batch: u32,
}

impl Default for NetworkToml {
    fn default() -> Self {
        NetworkToml {
            max_datagram: 1200,
            keepalive_ms: 2000,
            idle_timeout_ms: 30_000,
            fec: "adaptive".to_string(),
            scheduler: "redundant".to_string(),
            adaptive_bitrate: true,
            retransmit: true,
            pacing: 0.0,
            pacing_batch: crate::pacing::DEFAULT_BATCH,
        }
    }
}

/// The whole config file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigToml {
    pub video: VideoToml,
    pub scene: SceneToml,
    pub host: HostToml,
    pub client: ClientToml,
    pub network: NetworkToml,
}

impl ConfigToml {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
    }
}

/// Validated video settings (what the host runs with). The defaults of every `[video]` key are
/// written here, once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VideoConfig {
    pub resolution: Resolution,
    pub fps: u32,
    pub bitrate_kbps: u32,
    /// Converter and encoder (`video.conversion`, `video.encoder`).
    #[serde(serialize_with = "ser_display")]
    pub path: VideoPath,
    pub preset: String,
    pub encoder_threads: usize,
}

fn ser_display<S: serde::Serializer>(v: &impl fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl Default for VideoConfig {
    fn default() -> Self {
        VideoConfig {
            resolution: Resolution {
                width: 1280,
                height: 720,
            },
            fps: 60,
            bitrate_kbps: 10_000,
            path: VideoPath::default(),
            preset: PRESETS[0].into(),
            encoder_threads: 2,
        }
    }
}

impl VideoConfig {
    /// Checks every range and name; the error names the key and what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.resolution.validate()?;
        FPS.check(self.fps)?;
        BITRATE_KBPS.check(self.bitrate_kbps)?;
        check_preset(&self.preset)?;
        ENCODER_THREADS.check(self.encoder_threads)?;
        Ok(())
    }

    /// The stream's codec, from the video path.
    pub fn codec(&self) -> untether_proto::Codec {
        codec_of(self.path)
    }
}

/// The codec a video path produces (the media crate does not know the wire's codecs).
pub fn codec_of(path: VideoPath) -> untether_proto::Codec {
    match path {
        VideoPath::Yuv420Simd | VideoPath::Yuv420Swscale => untether_proto::Codec::H264,
        VideoPath::Rgb => untether_proto::Codec::H264Rgb,
    }
}

/// x264 presets, fastest first.
pub const PRESETS: [&str; 10] = [
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
];

fn check_preset(preset: &str) -> Result<(), ConfigError> {
    if PRESETS.contains(&preset) {
        Ok(())
    } else {
        Err(invalid(
            "video.preset",
            format!("unknown preset {preset:?}; allowed: {}", PRESETS.join(", ")),
        ))
    }
}

impl VideoToml {
    pub fn validate(&self) -> Result<VideoConfig, ConfigError> {
        let resolution = self
            .resolution
            .parse::<Resolution>()
            .map_err(|m| invalid("video.resolution", m.to_string()))?;
        let path =
            VideoPath::parse(self.encoder.as_deref(), self.conversion.as_deref()).map_err(|e| {
                use untether_media::codec::VideoPathError as E;
                match e {
                    E::Encoder(e) => invalid("video.encoder", e.to_string()),
                    E::Conversion(e) => invalid("video.conversion", e.to_string()),
                    E::Contradiction { .. } => {
                        invalid("video.encoder, video.conversion", e.to_string())
                    }
                }
            })?;
        let v = VideoConfig {
            resolution,
            fps: self.fps,
            bitrate_kbps: self.bitrate_kbps,
            path,
            preset: self.preset.clone(),
            encoder_threads: self.encoder_threads,
        };
        v.validate()?;
        Ok(v)
    }
}

/// Everything a host start checks (`Host::start_with` calls it first).
pub fn validate_host(
    video: &VideoConfig,
    host: &HostToml,
    network: &NetworkToml,
    scene: &SceneToml,
) -> Result<(), ConfigError> {
    video.validate()?;
    host.validate()?;
    network.validate()?;
    scene.validate()
}

/// Everything a client start checks (`run_client_with` calls it first).
pub fn validate_client(client: &ClientToml, network: &NetworkToml) -> Result<(), ConfigError> {
    client.validate()?;
    network.validate()
}

impl NetworkToml {
    /// The host's FEC policy (`fec`; checked by [`validate`](Self::validate)).
    pub fn fec_policy(&self) -> Result<untether_proto::FecPolicy, ConfigError> {
        self.fec
            .parse()
            .map_err(|e: untether_proto::fec::FecPolicyError| invalid("network.fec", e.to_string()))
    }

    /// The multipath scheduler (`scheduler`).
    pub fn scheduler(&self) -> Result<untether_proto::Scheduler, ConfigError> {
        untether_proto::Scheduler::parse(&self.scheduler)
            .map_err(|e| invalid("network.scheduler", e))
    }

    /// The host's send pacing (`pacing`, `pacing_batch`; checked by
    /// [`validate`](Self::validate)).
    pub fn pacing(&self) -> Result<crate::pacing::Pacing, ConfigError> {
        PACING.check(self.pacing)?;
        PACING_BATCH.check(self.pacing_batch)?;
        Ok(crate::pacing::Pacing {
            fraction: self.pacing,
            batch: self.pacing_batch as usize,
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.fec_policy()?;
        self.scheduler()?;
        self.pacing()?;
        MAX_DATAGRAM.check(self.max_datagram)?;
        if self.keepalive_ms == 0 || self.keepalive_ms >= self.idle_timeout_ms {
            return Err(invalid(
                "network.keepalive_ms",
                format!(
                    "{} must be > 0 and below network.idle_timeout_ms ({})",
                    self.keepalive_ms, self.idle_timeout_ms
                ),
            ));
        }
        Ok(())
    }
}

impl ClientToml {
    pub fn validate(&self) -> Result<(), ConfigError> {
        CONNECT_TIMEOUT_MS.check(self.connect_timeout_ms)?;
        REASSEMBLY_DEADLINE_MS.check(self.reassembly_deadline_ms)?;
        if self.paths.len() + 1 > untether_proto::MAX_PATHS {
            return Err(invalid(
                "client.paths",
                format!(
                    "{} extra paths; at most {} besides the main address",
                    self.paths.len(),
                    untether_proto::MAX_PATHS - 1
                ),
            ));
        }
        for p in &self.paths {
            parse_path(p, DEFAULT_PORT).map_err(|e| invalid("client.paths", e))?;
        }
        DECODER_THREADS.check(self.decoder_threads)?;
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(invalid("client.name", "must be 1 to 64 bytes"));
        }
        Ok(())
    }
}

/// One extra path: `[LOCAL_IP@]HOST[:PORT]` → (local address to send from, host address).
pub fn parse_path(
    spec: &str,
    default_port: u16,
) -> Result<(Option<std::net::IpAddr>, std::net::SocketAddr), String> {
    let (local, host) = match spec.split_once('@') {
        Some((l, h)) => {
            let ip: std::net::IpAddr = l.trim().parse().map_err(|_| {
                format!("{spec:?}: {l:?} is not a local IP address (expected LOCAL_IP@HOST[:PORT])")
            })?;
            (Some(ip), h)
        }
        None => (None, spec),
    };
    let addr =
        untether_net::resolve(host.trim(), default_port).map_err(|e| format!("{spec:?}: {e}"))?;
    Ok((local, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        let c = ConfigToml::default();
        let v = c.video.validate().unwrap();
        assert_eq!(
            v.resolution,
            Resolution {
                width: 1280,
                height: 720
            }
        );
        c.network.validate().unwrap();
        c.client.validate().unwrap();
        c.host.validate().unwrap();
        assert_eq!(c.host.access().unwrap(), crate::identity::Access::Allowlist);
        let h = HostToml {
            access: "everyone".into(),
            ..Default::default()
        };
        let e = h.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("host.access") && e.contains("allowlist"),
            "{e}"
        );
    }

    #[test]
    fn multipath_keys_are_checked() {
        let n = NetworkToml {
            scheduler: "fastest".into(),
            ..Default::default()
        };
        let e = n.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("network.scheduler") && e.contains("lowest-delay"),
            "{e}"
        );
        let mut c = ClientToml {
            paths: vec!["wlan1@10.0.0.1".into()],
            ..Default::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("client.paths") && e.contains("LOCAL_IP@"),
            "{e}"
        );
        c.paths = vec!["10.0.0.2@10.0.0.1:9000".into(), "127.0.0.1".into()];
        c.validate().unwrap();
        assert_eq!(
            parse_path("10.0.0.2@10.0.0.1:9000", 9710).unwrap(),
            (Some([10, 0, 0, 2].into()), ([10, 0, 0, 1], 9000).into())
        );
        c.paths = vec!["127.0.0.1".into(); 4];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("at most 3"), "{e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = ConfigToml::parse("[video]\nfsp = 60\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fsp") && e.contains("fps"), "{e}");
        let e = ConfigToml::parse("[vidoe]\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("vidoe") && e.contains("video"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_allowed_values() {
        let mut v = VideoToml {
            encoder: Some("x265".into()),
            ..Default::default()
        };
        let e = v.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("video.encoder") && e.contains("libx264rgb"),
            "{e}"
        );
        v = VideoToml {
            conversion: Some("magic".into()),
            ..Default::default()
        };
        let e = v.validate().unwrap_err().to_string();
        assert!(
            e.contains("video.conversion") && e.contains("swscale"),
            "{e}"
        );
        v = VideoToml {
            resolution: "12x7".into(),
            ..Default::default()
        };
        assert!(v
            .validate()
            .unwrap_err()
            .to_string()
            .contains("video.resolution"));
        v = VideoToml {
            preset: "turbo".into(),
            ..Default::default()
        };
        assert!(v.validate().unwrap_err().to_string().contains("superfast"));
    }

    #[test]
    fn pacing_is_validated_with_key_and_range() {
        let n = NetworkToml::default();
        assert!(n.pacing().unwrap().is_off());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let e = NetworkToml {
                pacing: bad,
                ..Default::default()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("network.pacing:") && e.contains("0.0..=1.0"),
                "{e}"
            );
        }
        for bad in [0, 65] {
            let e = NetworkToml {
                pacing_batch: bad,
                ..Default::default()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("network.pacing_batch") && e.contains("1..=64"),
                "{e}"
            );
        }
        let c = ConfigToml::parse("[network]\npacing = 0.5\npacing_batch = 4\n", "t.toml").unwrap();
        let p = c.network.pacing().unwrap();
        assert_eq!((p.fraction, p.batch), (0.5, 4));
        // `pacing = 0` (an integer) is accepted too.
        let c = ConfigToml::parse("[network]\npacing = 0\n", "t.toml").unwrap();
        assert!(c.network.pacing().unwrap().is_off());
    }

    #[test]
    fn rgb_encoder_implies_rgb_path() {
        let v = VideoToml {
            encoder: Some("libx264rgb".into()),
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(v.path, VideoPath::Rgb);
        assert_eq!(
            v.path.conversion(),
            untether_media::convert::Conversion::Rgb
        );
        assert_eq!(v.codec(), untether_proto::Codec::H264Rgb);
        let v = ConfigToml::parse("[video]\nconversion = \"rgb\"\n", "t.toml")
            .unwrap()
            .video
            .validate()
            .unwrap();
        assert_eq!(v.path, VideoPath::Rgb);
        let e = VideoToml {
            encoder: Some("libx264".into()),
            conversion: Some("rgb".into()),
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("video.encoder, video.conversion:") && e.contains("libx264rgb"),
            "{e}"
        );
        let e = ConfigToml::parse(
            "[video]\nencoder = \"libx264rgb\"\nconversion = \"simd\"\n",
            "t.toml",
        )
        .unwrap()
        .video
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("video.encoder, video.conversion:") && e.contains("\"simd\""),
            "{e}"
        );
    }

    #[test]
    fn defaults_are_written_once() {
        assert_eq!(
            VideoToml::default().validate().unwrap(),
            VideoConfig::default()
        );
        let t = VideoToml::from(&VideoConfig::default());
        assert_eq!(t.encoder.as_deref(), Some("libx264"));
        assert_eq!(t.conversion.as_deref(), Some("simd"));
        assert_eq!(t.validate().unwrap(), VideoConfig::default());
    }

    #[test]
    fn ranges_are_named_in_one_style() {
        let e = VideoToml {
            bitrate_kbps: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert_eq!(e, "video.bitrate_kbps: 0 is out of range 100..=500000");
        let e = VideoConfig {
            fps: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert_eq!(e, "video.fps: 0 is out of range 1..=240");
        assert_eq!(
            FPS.check_wide(-5i64).unwrap_err().to_string(),
            "video.fps: -5 is out of range 1..=240"
        );
        assert_eq!(
            FPS.check_wide(1i64 << 40).unwrap_err().to_string(),
            "video.fps: 1099511627776 is out of range 1..=240"
        );
        assert_eq!(FPS.check_wide(30i64).unwrap(), 30u32);
        let e = ClientToml {
            decoder_threads: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.key(), Some("client.decoder_threads"));
        let e = SceneToml {
            walk_speed: f32::NAN,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.key(), Some("scene.walk_speed"));
    }

    #[test]
    fn validate_host_and_client_check_every_section() {
        let c = ConfigToml::default();
        let v = VideoConfig::default();
        validate_host(&v, &c.host, &c.network, &c.scene).unwrap();
        validate_client(&c.client, &c.network).unwrap();
        let bad_net = NetworkToml {
            fec: "lots".into(),
            ..Default::default()
        };
        let e = validate_host(&v, &c.host, &bad_net, &c.scene).unwrap_err();
        assert_eq!(e.key(), Some("network.fec"));
        let e = validate_client(&c.client, &bad_net).unwrap_err();
        assert_eq!(e.key(), Some("network.fec"));
        let small = VideoConfig {
            resolution: Resolution {
                width: 64,
                height: 64,
            },
            ..Default::default()
        };
        let e = validate_host(&small, &c.host, &c.network, &c.scene)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "video.resolution: 64x64 is out of range 512..=4096 x 288..=2304"
        );
    }

    #[test]
    fn bitrate_key_takes_units() {
        let c = ConfigToml::parse("[video]\nbitrate_kbps = \"10M\"\n", "t.toml").unwrap();
        assert_eq!(c.video.bitrate_kbps, 10_000);
        let c = ConfigToml::parse("[video]\nbitrate_kbps = 8000\n", "t.toml").unwrap();
        assert_eq!(c.video.bitrate_kbps, 8000);
        let e = ConfigToml::parse("[video]\nbitrate_kbps = \"fast\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bitrate_kbps") && e.contains("10M"), "{e}");
    }

    #[test]
    fn a_missing_file_names_the_path_and_the_io_error_once() {
        let e = ConfigToml::load(Path::new("/nonexistent/untether.toml")).unwrap_err();
        let mut chain = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            chain.push_str(&format!(": {s}"));
            src = s.source();
        }
        assert_eq!(chain.matches("No such file").count(), 1, "{chain}");
        assert!(chain.contains("/nonexistent/untether.toml"), "{chain}");
    }

    #[test]
    fn resolutions() {
        assert_eq!(
            "1080p".parse::<Resolution>().unwrap(),
            Resolution {
                width: 1920,
                height: 1080
            }
        );
        assert_eq!("1920X1080".parse::<Resolution>().unwrap().height, 1080);
        assert_eq!("360p".parse::<Resolution>().unwrap().width, 640);
        assert!("1281x720"
            .parse::<Resolution>()
            .unwrap()
            .validate()
            .is_err());
        assert!("big".parse::<Resolution>().is_err());
        for (name, ..) in units::NAMED_SIZES {
            name.parse::<Resolution>().unwrap().validate().unwrap();
        }
    }

    #[test]
    fn example_config_parses() {
        let text = include_str!("../../../docs/untether.example.toml");
        let c = ConfigToml::parse(text, "example").unwrap();
        let v = c.video.validate().unwrap();
        assert_eq!(v, VideoConfig::default(), "the example shows the defaults");
        validate_host(&v, &c.host, &c.network, &c.scene).unwrap();
        validate_client(&c.client, &c.network).unwrap();
    }
}
