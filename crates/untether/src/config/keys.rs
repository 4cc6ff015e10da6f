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
    /// Why a spelling is not a value: its message (without the key) names the allowed values.
    type Err: std::error::Error;
    /// Parses a value.
    fn parse_value(s: &str) -> Result<Self, Self::Err>;
    /// The value as the file spells it (what [`parse_value`](Self::parse_value) takes back).
    fn value_name(&self) -> String;
}

/// `s` as a value of `T`'s key: `key: what is wrong; what is allowed`.
pub fn parse_key<T: KeyValue>(s: &str) -> Result<T, ConfigError> {
    T::parse_value(s).map_err(|e| invalid(T::KEY, e.to_string()))
}

/// A value that is not one of its key's names (`network.transport`, `client.clock`,
/// `client.presenter`): `"tcp": expected one of udp, raw`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: expected one of {}", .allowed.join(", "))]
pub struct UnknownName {
    pub value: String,
    /// The names the key takes.
    pub allowed: &'static [&'static str],
}

impl UnknownName {
    fn new(value: &str, allowed: &'static [&'static str]) -> UnknownName {
        UnknownName {
            value: value.to_string(),
            allowed,
        }
    }
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
    type Err = UnknownName;
    fn parse_value(s: &str) -> Result<Self, UnknownName> {
        match s {
            "udp" => Ok(Transport::Udp),
            "raw" => Ok(Transport::Raw),
            other => Err(UnknownName::new(other, &TRANSPORTS)),
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
    type Err = UnknownName;
    fn parse_value(s: &str) -> Result<Self, UnknownName> {
        match s {
            "auto" => Ok(ClientClock::Auto),
            "synchronized" => Ok(ClientClock::Synchronized),
            other => Err(UnknownName::new(other, &CLOCK_MODES)),
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
    type Err = untether_proto::fec::FecPolicyError;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        s.parse()
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
    type Err = untether_proto::UnknownScheduler;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        Scheduler::parse(s)
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for Access {
    const KEY: &'static str = "host.access";
    type Err = crate::identity::UnknownAccess;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        s.parse()
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for SlowViewer {
    const KEY: &'static str = "host.slow_viewer";
    type Err = untether_proto::UnknownSlowViewer;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        SlowViewer::parse(s)
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for PresenterKind {
    const KEY: &'static str = "client.presenter";
    type Err = UnknownName;
    fn parse_value(s: &str) -> Result<Self, UnknownName> {
        PresenterKind::parse(s).ok_or_else(|| UnknownName::new(s, &PresenterKind::NAMES))
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for HwAccel {
    const KEY: &'static str = "client.hwaccel";
    type Err = untether_media::codec::UnknownHwAccel;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        s.parse()
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

impl KeyValue for DecoderChoice {
    const KEY: &'static str = "client.decoder";
    type Err = untether_media::codec::UnknownDecoder;
    fn parse_value(s: &str) -> Result<Self, Self::Err> {
        s.parse()
    }
    fn value_name(&self) -> String {
        self.name().into()
    }
}

/// The codec names a client may list (`client.codecs`).
pub const CLIENT_CODECS: &str = "h264, h264rgb, hevc, av1";

/// What is wrong with a `client.codecs` list (without the key).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecListError {
    #[error("unknown codec {0:?}; allowed: {CLIENT_CODECS}")]
    Unknown(String),
    #[error("{0} is listed twice")]
    Twice(String),
    #[error("empty: list the codecs this client decodes ({CLIENT_CODECS})")]
    Empty,
}

/// `client.codecs`: the codecs a client decodes, preferred first — known names, each once, at
/// least one. The file writes it as an array of names, a flag (`--codecs`) as a comma-separated
/// list; both are parsed here, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecList(Vec<Codec>);

impl CodecList {
    /// The list of these names, or what is wrong with it (without the key).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<CodecList, CodecListError> {
        let mut out = Vec::new();
        for name in names {
            let name = name.as_ref().trim();
            let c: Codec = name
                .parse()
                .map_err(|_| CodecListError::Unknown(name.to_string()))?;
            if out.contains(&c) {
                return Err(CodecListError::Twice(name.to_string()));
            }
            out.push(c);
        }
        if out.is_empty() {
            return Err(CodecListError::Empty);
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
    type Err = CodecListError;
    fn parse_value(s: &str) -> Result<Self, CodecListError> {
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
    CodecList::from_names(&names)
        .map_err(|e| serde::de::Error::custom(invalid(CodecList::KEY, e.to_string())))
}

/// `client.codecs` written back as an array of names.
pub(super) fn ser_codecs<S: Serializer>(v: &CodecList, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.0.iter().map(|c| c.name()))
}
