//! Configuration: a TOML file whose every key is documented in docs/CONFIG.md, overridden by
//! command-line flags. Unknown keys and bad values are errors that name the key and the allowed
//! values.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use untether_media::codec::EncoderKind;
use untether_media::convert::Conversion;

/// The UDP port a host listens on by default.
pub const DEFAULT_PORT: u16 = 9710;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

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

impl FromStr for Resolution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let named = match s {
            "720p" => Some((1280, 720)),
            "1080p" => Some((1920, 1080)),
            _ => None,
        };
        let (width, height) = match named {
            Some(wh) => wh,
            None => {
                let (w, h) = s.split_once(['x', 'X']).ok_or_else(|| {
                    format!("{s:?} is not WIDTHxHEIGHT (e.g. 1280x720, 1920x1080, 720p, 1080p)")
                })?;
                let w = w
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| format!("width {w:?} is not a number"))?;
                let h = h
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| format!("height {h:?} is not a number"))?;
                (w, h)
            }
        };
        if !(512..=4096).contains(&width) || !(288..=2304).contains(&height) {
            return Err(format!(
                "{width}x{height} is out of range: width 512..=4096, height 288..=2304"
            ));
        }
        if width % 2 != 0 || height % 2 != 0 {
            return Err(format!("{width}x{height}: width and height must be even"));
        }
        Ok(Resolution { width, height })
    }
}

/// `[video]`: what the host captures and how it encodes it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VideoToml {
    pub resolution: String,
    pub fps: u32,
    pub bitrate_kbps: u32,
    pub encoder: String,
    pub preset: String,
    pub conversion: String,
    pub encoder_threads: usize,
}

impl Default for VideoToml {
    fn default() -> Self {
        VideoToml {
            resolution: "1280x720".into(),
            fps: 60,
            bitrate_kbps: 10_000,
            encoder: "libx264".into(),
            preset: "ultrafast".into(),
            conversion: "simd".into(),
            encoder_threads: 2,
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
        if !(10..=86_400).contains(&self.pin_ttl_s) {
            return Err(invalid(
                "host.pin_ttl_s",
                format!("{} is out of range 10..=86400", self.pin_ttl_s),
            ));
        }
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

/// Validated video settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VideoConfig {
    pub resolution: Resolution,
    pub fps: u32,
    pub bitrate_kbps: u32,
    #[serde(serialize_with = "ser_display_encoder")]
    pub encoder: EncoderKind,
    pub preset: String,
    #[serde(serialize_with = "ser_display_conversion")]
    pub conversion: Conversion,
    pub encoder_threads: usize,
}

fn ser_display_encoder<S: serde::Serializer>(e: &EncoderKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(e.name())
}
fn ser_display_conversion<S: serde::Serializer>(c: &Conversion, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
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

impl VideoToml {
    pub fn validate(&self) -> Result<VideoConfig, ConfigError> {
        let resolution = self
            .resolution
            .parse::<Resolution>()
            .map_err(|m| invalid("video.resolution", m))?;
        if !(1..=240).contains(&self.fps) {
            return Err(invalid(
                "video.fps",
                format!("{} is out of range 1..=240", self.fps),
            ));
        }
        if !(100..=500_000).contains(&self.bitrate_kbps) {
            return Err(invalid(
                "video.bitrate_kbps",
                format!("{} is out of range 100..=500000 kbit/s", self.bitrate_kbps),
            ));
        }
        let encoder = self
            .encoder
            .parse::<EncoderKind>()
            .map_err(|m| invalid("video.encoder", m.to_string()))?;
        if !PRESETS.contains(&self.preset.as_str()) {
            return Err(invalid(
                "video.preset",
                format!(
                    "unknown preset {:?}; allowed: {}",
                    self.preset,
                    PRESETS.join(", ")
                ),
            ));
        }
        let mut conversion = self
            .conversion
            .parse::<Conversion>()
            .map_err(|m| invalid("video.conversion", m.to_string()))?;
        // The RGB encoder needs no conversion; choosing it implies conversion = rgb, and
        // conversion = rgb implies the RGB encoder.
        match (encoder, conversion) {
            (EncoderKind::X264Rgb, Conversion::Simd | Conversion::Swscale) => {
                if self.conversion != VideoToml::default().conversion {
                    return Err(invalid(
                        "video.conversion",
                        format!("{:?} cannot feed libx264rgb, which takes BGRA as is; use conversion = \"rgb\"", self.conversion),
                    ));
                }
                conversion = Conversion::Rgb;
            }
            (EncoderKind::X264, Conversion::Rgb) => {
                return Err(invalid(
                    "video.conversion",
                    "\"rgb\" (no conversion) needs encoder = \"libx264rgb\"; libx264 takes simd or swscale",
                ));
            }
            _ => {}
        }
        if !(1..=16).contains(&self.encoder_threads) {
            return Err(invalid(
                "video.encoder_threads",
                format!("{} is out of range 1..=16", self.encoder_threads),
            ));
        }
        Ok(VideoConfig {
            resolution,
            fps: self.fps,
            bitrate_kbps: self.bitrate_kbps,
            encoder,
            preset: self.preset.clone(),
            conversion,
            encoder_threads: self.encoder_threads,
        })
    }
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
        if !(self.pacing.is_finite() && (0.0..=1.0).contains(&self.pacing)) {
            return Err(invalid(
                "network.pacing",
                format!(
                    "{} is out of range 0.0..=1.0 (fraction of the frame interval; 0 = off)",
                    self.pacing
                ),
            ));
        }
        if !(1..=crate::pacing::MAX_BATCH).contains(&self.pacing_batch) {
            return Err(invalid(
                "network.pacing_batch",
                format!(
                    "{} is out of range 1..={} datagrams",
                    self.pacing_batch,
                    crate::pacing::MAX_BATCH
                ),
            ));
        }
        Ok(crate::pacing::Pacing {
            fraction: self.pacing,
            batch: self.pacing_batch as usize,
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.fec_policy()?;
        self.scheduler()?;
        self.pacing()?;
        if !(256..=9000).contains(&self.max_datagram) {
            return Err(invalid(
                "network.max_datagram",
                format!("{} is out of range 256..=9000 bytes", self.max_datagram),
            ));
        }
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
        if !(100..=60_000).contains(&self.connect_timeout_ms) {
            return Err(invalid(
                "client.connect_timeout_ms",
                format!("{} is out of range 100..=60000", self.connect_timeout_ms),
            ));
        }
        if !(1..=1000).contains(&self.reassembly_deadline_ms) {
            return Err(invalid(
                "client.reassembly_deadline_ms",
                format!("{} is out of range 1..=1000", self.reassembly_deadline_ms),
            ));
        }
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
            parse_path(p, 9710).map_err(|e| invalid("client.paths", e))?;
        }
        if !(1..=16).contains(&self.decoder_threads) {
            return Err(invalid(
                "client.decoder_threads",
                format!("{} is out of range 1..=16", self.decoder_threads),
            ));
        }
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
            encoder: "x265".into(),
            ..Default::default()
        };
        let e = v.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("video.encoder") && e.contains("libx264rgb"),
            "{e}"
        );
        v = VideoToml {
            conversion: "magic".into(),
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
            encoder: "libx264rgb".into(),
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(v.conversion, Conversion::Rgb);
        let e = VideoToml {
            conversion: "rgb".into(),
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("libx264rgb"));
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
        assert!("1281x720".parse::<Resolution>().is_err());
        assert!("big".parse::<Resolution>().is_err());
    }

    #[test]
    fn example_config_parses() {
        let text = include_str!("../../../docs/untether.example.toml");
        let c = ConfigToml::parse(text, "example").unwrap();
        c.video.validate().unwrap();
        c.client.validate().unwrap();
        c.network.validate().unwrap();
    }
}
