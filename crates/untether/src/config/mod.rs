//! Configuration: a TOML file whose every key is documented in docs/CONFIG.md, overridden by
//! command-line flags. Unknown keys and bad values are errors that name the key and the allowed
//! values.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use untether_media::codec::{Codec, EncoderChoice, Refresh, Selection, SelectionError};
use untether_proto::units;

mod file;
mod keys;
mod limits;
mod network;
mod rtsp;
mod video;
mod vr;
mod wants;
mod webrtc;

pub use file::{ConfigFile, Place};
pub use keys::*;
pub use limits::*;
pub use network::NetworkToml;
pub use rtsp::*;
pub use video::*;
pub use vr::*;
pub use webrtc::{CertSource, WebRtcToml};

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

/// The dashboard's port when `--dashboard` is given without an address.
pub const DASHBOARD_PORT: u16 = 9711;

/// `[host]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostToml {
    pub bind: String,
    #[serde(deserialize_with = "limits::de_keyframe_cooldown_ms")]
    pub keyframe_cooldown_ms: u64,
    /// Who may connect: allowlist, open or pin.
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub access: crate::identity::Access,
    /// Keys, allowlist, access requests (empty: `$XDG_STATE_HOME/untether`).
    pub state_dir: String,
    /// How long a PIN made by `access = "pin"` is valid, seconds.
    #[serde(deserialize_with = "limits::de_pin_ttl_s")]
    pub pin_ttl_s: u64,
    /// Most clients served at once, all from the one encoded stream.
    #[serde(deserialize_with = "limits::de_max_clients")]
    pub max_clients: usize,
    /// A viewer whose link cannot carry the stream: `"pause"` (keyframes only, then dropped
    /// if it keeps falling behind) or `"drop"` (at once).
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub slow_viewer: untether_proto::SlowViewer,
    /// The Opus bit rate of the host's audio (`--audio`), kbit/s.
    #[serde(deserialize_with = "limits::de_audio_bitrate_kbps")]
    pub audio_bitrate_kbps: u32,
    /// `ADDR:PORT` of the operator's dashboard (HTTP; docs/DASHBOARD.md); empty: none.
    /// Loopback: this machine only; any other address elsewhere too. Either answers to the admin
    /// token only (printed at start, kept in `dashboard_link` in the state directory).
    pub dashboard: String,
    /// Advertise the host on the local network (mDNS/DNS-SD, `untether discover`).
    pub advertise: bool,
    /// The name the host advertises (empty: the machine's host name).
    pub name: String,
    /// Seconds between the host's one-line status log lines (clients, rate, loss); 0: none.
    #[serde(deserialize_with = "limits::de_status_interval_s")]
    pub status_interval_s: u64,
}

/// The values of `host.slow_viewer`.
pub const SLOW_VIEWER: [&str; 2] = ["pause", "drop"];

impl Default for HostToml {
    fn default() -> Self {
        HostToml {
            bind: format!("0.0.0.0:{DEFAULT_PORT}"),
            keyframe_cooldown_ms: 50,
            access: crate::identity::Access::Allowlist,
            state_dir: String::new(),
            pin_ttl_s: 300,
            max_clients: untether_proto::host::DEFAULT_MAX_CLIENTS,
            slow_viewer: untether_proto::SlowViewer::Pause,
            audio_bitrate_kbps: 128,
            dashboard: String::new(),
            advertise: true,
            name: String::new(),
            status_interval_s: 10,
        }
    }
}

impl HostToml {
    /// The address to listen on (`bind`): `IP:PORT`.
    pub fn bind_addr(&self) -> Result<std::net::SocketAddr, ConfigError> {
        self.bind.trim().parse().map_err(|_| {
            invalid(
                "host.bind",
                format!(
                    "{:?} is not IP:PORT, e.g. 0.0.0.0:{DEFAULT_PORT} (every interface), \
                     127.0.0.1:{DEFAULT_PORT} (this machine only) or [::]:{DEFAULT_PORT}; \
                     port 0 picks a free one",
                    self.bind
                ),
            )
        })
    }

    /// The dashboard's address (`dashboard`), None when it is off.
    pub fn dashboard_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let d = self.dashboard.trim();
        if d.is_empty() || d == "off" {
            return Ok(None);
        }
        d.parse().map(Some).map_err(|_| {
            invalid(
                "host.dashboard",
                format!(
                    "{d:?} is not IP:PORT or \"off\", e.g. 127.0.0.1:{DASHBOARD_PORT} (this \
                     machine only) or 0.0.0.0:{DASHBOARD_PORT} (any address, with the admin \
                     token the host prints at start)"
                ),
            )
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.bind_addr()?;
        self.dashboard_addr()?;
        KEYFRAME_COOLDOWN_MS.check(self.keyframe_cooldown_ms)?;
        PIN_TTL_S.check(self.pin_ttl_s)?;
        MAX_CLIENTS.check(self.max_clients)?;
        if self.name.len() > 63 || self.name.chars().any(char::is_control) {
            return Err(invalid(
                "host.name",
                format!(
                    "{:?} is not a name to advertise: at most 63 bytes, no control characters",
                    self.name
                ),
            ));
        }
        AUDIO_BITRATE_KBPS.check(self.audio_bitrate_kbps)?;
        STATUS_INTERVAL_S.check(self.status_interval_s)?;
        Ok(())
    }
}

/// `[client]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientToml {
    pub name: String,
    pub headless: bool,
    #[serde(deserialize_with = "limits::de_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(deserialize_with = "limits::de_reassembly_deadline_ms")]
    pub reassembly_deadline_ms: u64,
    #[serde(deserialize_with = "limits::de_decoder_threads")]
    pub decoder_threads: usize,
    #[serde(deserialize_with = "limits::de_input_probe_interval_ms")]
    pub input_probe_interval_ms: u64,
    /// The client's key and known hosts (empty: `$XDG_STATE_HOME/untether`).
    pub state_dir: String,
    /// More paths to the host besides the main address (multipath, up to 3 more):
    /// `"[LOCAL_IP@]HOST[:PORT]"` each, e.g. `"192.168.2.7@192.168.2.1:9710"` to send from
    /// a second interface. Port defaults to the main address's.
    pub paths: Vec<String>,
    /// How the host's clock relates to this one: `auto` (exact when host and client share
    /// the machine's clock, else estimated from ping/pong, which assumes symmetric paths) or
    /// `synchronized` (the machines' clocks are synchronised, e.g. by PTP or chrony: offset 0).
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub clock: ClientClock,
    /// Decode and present the stream (false, `--no-decode`: receive and reassemble frames and
    /// count them only — a load-test viewer).
    pub decode: bool,
    /// Read SDL game controllers and send them to the host (buttons reliable, sticks and
    /// triggers latest-wins).
    pub gamepads: bool,
    /// The codecs this client decodes, preferred first (`h264`, `h264rgb`, `hevc`, `av1`): sent
    /// to the host, which picks the first it can encode. Those no decoder here opens are left
    /// out at start (with a line saying so). Parsed when the file is read or `--codecs` set.
    #[serde(
        deserialize_with = "keys::de_codecs",
        serialize_with = "keys::ser_codecs"
    )]
    pub codecs: keys::CodecList,
    /// `auto` (software, or the hardware `hwaccel` names, falling back to software), `software`,
    /// or an FFmpeg decoder name (`h264_v4l2m2m`, `hevc_cuvid`, `libdav1d`, …; no fallback).
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub decoder: untether_media::codec::DecoderChoice,
    /// Hardware decoding: `none`, `auto` (what this machine has), `vaapi`, `cuda`, `vdpau`,
    /// `drm` or `v4l2m2m`.
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub hwaccel: untether_media::codec::HwAccel,
    /// The window's presenter: `auto` (the GPU presenter, or SDL's renderer when OpenGL ES 3
    /// cannot start), `gl` or `sdl`.
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub presenter: untether_media::present::PresenterKind,
    /// Start the window fullscreen (F11 or Alt+Enter toggles it).
    pub fullscreen: bool,
    /// Start with the statistics overlay shown (F12 toggles it).
    pub overlay: bool,
    /// An unpaired client waits for the host's approval (trying again every
    /// quarter second) instead of exiting with "not paired".
    pub wait_for_approval: bool,
    /// After the host said goodbye (it stopped: Ctrl-C, a service restart), wait for it to
    /// come back instead of exiting (`--exit-on-bye`: exit).
    pub wait_for_host: bool,
    /// The stream this client asks the host for (empty / 0: the host's own): a frame size
    /// (`WxH` or a name such as `720p`), frames per second and kbit/s. The host grants them
    /// within its limits ([`ClientToml::wants`]).
    pub resolution: String,
    pub fps: u32,
    pub bitrate_kbps: u32,
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
            clock: ClientClock::Auto,
            decode: true,
            gamepads: true,
            codecs: keys::CodecList::default(),
            decoder: untether_media::codec::DecoderChoice::Auto,
            hwaccel: untether_media::codec::HwAccel::None,
            presenter: untether_media::present::PresenterKind::Auto,
            fullscreen: false,
            overlay: false,
            wait_for_approval: true,
            wait_for_host: true,
            resolution: String::new(),
            fps: 0,
            bitrate_kbps: 0,
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

/// The whole config file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigToml {
    pub video: VideoToml,
    pub scene: SceneToml,
    pub host: HostToml,
    pub client: ClientToml,
    pub network: NetworkToml,
    pub rtsp: RtspToml,
    pub vr: VrToml,
    pub webrtc: WebRtcToml,
}

impl ConfigToml {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        ConfigFile::read(path)?.parse()
    }

    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
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

impl ClientToml {
    /// `client.codecs`, parsed when it was set: known names, each once, at least one.
    pub fn codec_list(&self) -> Result<Vec<Codec>, ConfigError> {
        Ok(self.codecs.codecs().to_vec())
    }

    /// `client.decoder` and `client.hwaccel` (parsed when they were set), checked together.
    pub fn decoder_choice(
        &self,
    ) -> Result<
        (
            untether_media::codec::DecoderChoice,
            untether_media::codec::HwAccel,
        ),
        ConfigError,
    > {
        use untether_media::codec::{DecoderChoice, HwAccel};
        let (d, h) = (self.decoder.clone(), self.hwaccel);
        if d == DecoderChoice::Software && !matches!(h, HwAccel::None | HwAccel::Auto) {
            return Err(invalid(
                "client.decoder, client.hwaccel",
                format!(
                    "decoder software and hwaccel {h} contradict each other: software decodes \
                     on the CPU; use decoder auto with hwaccel {h}"
                ),
            ));
        }
        Ok((d, h))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.wants()?;
        CONNECT_TIMEOUT_MS.check(self.connect_timeout_ms)?;
        REASSEMBLY_DEADLINE_MS.check(self.reassembly_deadline_ms)?;
        INPUT_PROBE_INTERVAL_MS.check(self.input_probe_interval_ms)?;
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
            parse_path(p, DEFAULT_PORT).map_err(|e| invalid("client.paths", e.to_string()))?;
        }
        DECODER_THREADS.check(self.decoder_threads)?;
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(invalid("client.name", "must be 1 to 64 bytes"));
        }
        self.codec_list()?;
        self.decoder_choice()?;
        Ok(())
    }
}

/// The client's one-time pairing PIN (`untether client --pin`, the C API's
/// `untether_client_set_pin`; never a config key): the 6 digits the host shows. The error
/// names the value; the caller names the flag or function.
pub fn check_pin(pin: &str) -> Result<(), BadPin> {
    if pin.len() == 6 && pin.bytes().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(BadPin(pin.to_string()))
    }
}

/// A pairing PIN that is not 6 digits ([`check_pin`]): the value, without the flag or function.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: a pairing PIN is the 6 digits the host shows")]
pub struct BadPin(pub String);

/// What is wrong with an extra path (`client.paths`): the spec as given, and why.
#[derive(Debug, thiserror::Error)]
pub enum PathSpecError {
    #[error("{spec:?}: {local:?} is not a local IP address (expected LOCAL_IP@HOST[:PORT])")]
    Local { spec: String, local: String },
    #[error("{spec:?}: {source}")]
    Host {
        spec: String,
        #[source]
        source: untether_net::NetError,
    },
}

/// One extra path: `[LOCAL_IP@]HOST[:PORT]` → (local address to send from, host address).
pub fn parse_path(
    spec: &str,
    default_port: u16,
) -> Result<(Option<std::net::IpAddr>, std::net::SocketAddr), PathSpecError> {
    let (local, host) = match spec.split_once('@') {
        Some((l, h)) => {
            let ip: std::net::IpAddr = l.trim().parse().map_err(|_| PathSpecError::Local {
                spec: spec.to_string(),
                local: l.to_string(),
            })?;
            (Some(ip), h)
        }
        None => (None, spec),
    };
    let addr =
        untether_net::resolve(host.trim(), default_port).map_err(|source| PathSpecError::Host {
            spec: spec.to_string(),
            source,
        })?;
    Ok((local, addr))
}

#[cfg(test)]
mod tests;
