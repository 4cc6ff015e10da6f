//! The configuration's named values: a key whose value is one of a set of names (or, for
//! `network.fec`, a policy) is parsed once into its type — when the file is read, or when a
//! flag or the C API sets it ([`parse_key`]) — and used as that type everywhere. A bad value
//! is an error naming the key and the allowed values; the file, the flags and the C API keep
//! their spellings ([`KeyValue::value_name`] writes a value back as the file spells it).

use std::fmt;

use serde::{Deserialize, Deserializer, Serializer};
use untether_media::codec::{Codec, DecoderChoice, HwAccel};
use untether_media::present::PresenterKind;
use untether_proto::fec::{FecMode, FecPolicy};
use untether_proto::{Scheduler, SlowViewer};

use super::{invalid, ConfigError};
use crate::identity::Access;

/// A value of one configuration key, parsed from its spelling in the file.
pub trait KeyValue: Sized {
    /// The key (`network.transport`).
    const KEY: &'static str;
    /// Parses a value; the message (without the key) names the allowed values.
    fn parse_value(s: &str) -> Result<Self, String>;
    /// The value as the file spells it (what [`parse_value`](Self::parse_value) takes back).
    fn value_name(&self) -> String;
}

/// `s` as a value of `T`'s key: `key: what is wrong; what is allowed`.
pub fn parse_key<T: KeyValue>(s: &str) -> Result<T, ConfigError> {
    T::parse_value(s).map_err(|m| invalid(T::KEY, m))
}

/// `#[serde(deserialize_with = "keys::de_key")]`: the value parsed as the file is read, a bad
/// one named with its key and the allowed values.
pub(super) fn de_key<'de, D: Deserializer<'de>, T: KeyValue>(d: D) -> Result<T, D::Error> {
    let s = String::deserialize(d)?;
    parse_key(&s).map_err(serde::de::Error::custom)
}

/// `#[serde(serialize_with = "keys::ser_key")]`: the value as the file spells it.
pub(super) fn ser_key<S: Serializer, T: KeyValue>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.value_name())
}

/// The data plane's transports (`network.transport`).
pub const TRANSPORTS: [&str; 2] = ["udp", "raw"];

/// The data plane's transport after the handshake (`network.transport`; in reports `"udp"` or
/// `"raw"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// UDP, as the handshake.
    #[default]
    Udp,
    /// Raw layer-2 frames on an AF_PACKET socket (docs/PROTOCOL.md §7.3).
    Raw,
}

impl Transport {
    /// `udp` or `raw`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Raw => "raw",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl KeyValue for Transport {
    const KEY: &'static str = "network.transport";
    fn parse_value(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Transport::Udp),
            "raw" => Ok(Transport::Raw),
            other => Err(format!(
                "{other:?}: expected one of {}",
                TRANSPORTS.join(", ")
            )),
        }
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

/// The values of `client.clock`.
pub const CLOCK_MODES: [&str; 2] = ["auto", "synchronized"];

/// How the host's clock relates to the client's (`client.clock`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientClock {
    /// Exact when host and client share the machine's clock, else estimated from ping/pong.
    #[default]
    Auto,
    /// The machines' clocks are synchronised (PTP, chrony): offset 0.
    Synchronized,
}

impl KeyValue for ClientClock {
    const KEY: &'static str = "client.clock";
    fn parse_value(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ClientClock::Auto),
            "synchronized" => Ok(ClientClock::Synchronized),
            other => Err(format!(
                "{other:?}: expected one of {}",
                CLOCK_MODES.join(", ")
            )),
        }
    }
    fn value_name(&self) -> String {
        match self {
            ClientClock::Auto => "auto",
            ClientClock::Synchronized => "synchronized",
        }
        .into()
    }
}

impl KeyValue for FecPolicy {
    const KEY: &'static str = "network.fec";
    fn parse_value(s: &str) -> Result<Self, String> {
        s.parse()
            .map_err(|e: untether_proto::fec::FecPolicyError| e.to_string())
    }
    fn value_name(&self) -> String {
        match self.mode {
            FecMode::Off => "off".into(),
            FecMode::Fixed(p) => format!("{p}%"),
            // The file names the default range only.
            FecMode::Adaptive { .. } => "adaptive".into(),
        }
    }
}

impl KeyValue for Scheduler {
    const KEY: &'static str = "network.scheduler";
    fn parse_value(s: &str) -> Result<Self, String> {
        Scheduler::parse(s)
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for Access {
    const KEY: &'static str = "host.access";
    fn parse_value(s: &str) -> Result<Self, String> {
        s.parse()
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for SlowViewer {
    const KEY: &'static str = "host.slow_viewer";
    fn parse_value(s: &str) -> Result<Self, String> {
        SlowViewer::parse(s)
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for PresenterKind {
    const KEY: &'static str = "client.presenter";
    fn parse_value(s: &str) -> Result<Self, String> {
        PresenterKind::parse(s)
            .ok_or_else(|| format!("{s:?}: expected one of {}", PresenterKind::NAMES.join(", ")))
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for HwAccel {
    const KEY: &'static str = "client.hwaccel";
    fn parse_value(s: &str) -> Result<Self, String> {
        s.parse()
            .map_err(|e: untether_media::codec::UnknownHwAccel| e.to_string())
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for DecoderChoice {
    const KEY: &'static str = "client.decoder";
    fn parse_value(s: &str) -> Result<Self, String> {
        s.parse()
            .map_err(|e: untether_media::codec::UnknownDecoder| e.to_string())
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

/// The codec names a client may list (`client.codecs`).
pub const CLIENT_CODECS: &str = "h264, h264rgb, hevc, av1";

/// `client.codecs`: the codecs a client decodes, preferred first — known names, each once, at
/// least one. The file writes it as an array of names, a flag (`--codecs`) as a comma-separated
/// list; both are parsed here, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecList(Vec<Codec>);

impl CodecList {
    /// The list of these names, or what is wrong with it (without the key).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<CodecList, String> {
        let mut out = Vec::new();
        for name in names {
            let name = name.as_ref().trim();
            let c: Codec = name
                .parse()
                .map_err(|_| format!("unknown codec {name:?}; allowed: {CLIENT_CODECS}"))?;
            if out.contains(&c) {
                return Err(format!("{name} is listed twice"));
            }
            out.push(c);
        }
        if out.is_empty() {
            return Err(format!(
                "empty: list the codecs this client decodes ({CLIENT_CODECS})"
            ));
        }
        Ok(CodecList(out))
    }

    /// The codecs, preferred first.
    pub fn codecs(&self) -> &[Codec] {
        &self.0
    }
}

impl Default for CodecList {
    fn default() -> Self {
        CodecList(vec![Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1])
    }
}

impl KeyValue for CodecList {
    const KEY: &'static str = "client.codecs";
    fn parse_value(s: &str) -> Result<Self, String> {
        let names: Vec<&str> = s.split(',').filter(|n| !n.trim().is_empty()).collect();
        CodecList::from_names(&names)
    }
    fn value_name(&self) -> String {
        self.0
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `client.codecs` as the file writes it: an array of names.
pub(super) fn de_codecs<'de, D: Deserializer<'de>>(d: D) -> Result<CodecList, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    CodecList::from_names(&names).map_err(|m| serde::de::Error::custom(invalid(CodecList::KEY, m)))
}

/// `client.codecs` written back as an array of names.
pub(super) fn ser_codecs<S: Serializer>(v: &CodecList, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.0.iter().map(|c| c.name()))
}
