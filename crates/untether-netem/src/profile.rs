//! Impairment profiles: the TOML file format, layering (defaults ← `[both]` ← `[down]`/`[up]` ←
//! a `[[path]]` entry's own sections ← command-line flags), and resolution into one
//! [`Impairment`] per direction per path. The format is documented with examples in
//! docs/NETEM.md; ready profiles are in docs/netem/.
//!
//! ```toml
//! seed = 42
//! [both]
//! delay = "5ms"
//! jitter = "2ms"
//! [down]
//! loss = "2%"
//! burst_loss = true
//! rate = "20mbit"
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use untether_net::Micros;

use crate::impair::{
    derive_seed, DelayTrace, GilbertElliott, ImpairError, Impairment, Jitter, Outage, QueueLimit,
    RateLimit, TraceError, DEFAULT_MEAN_BURST, DEFAULT_REORDER_DELAY_US,
};
use crate::units::{self, ParseError, SizeSpec};

/// Most relays one profile may start.
pub const MAX_PATHS: usize = 64;
/// Seed used when neither the profile nor the command line gives one.
pub const DEFAULT_SEED: u64 = 1;
/// Default Pareto tail index for `jitter_dist = "pareto"`.
pub const DEFAULT_PARETO_SHAPE: f64 = 2.5;

/// An invalid profile or impairment setting; the message names the file, the section and key (or
/// the flag) and the accepted forms.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Settings that do not make one impairment together ([`ImpairmentSpec::resolve`]). The variants
/// that name keys carry the [`KeyStyle`] they are named in (profile keys or flags).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// `burst_loss` and `gilbert` both given.
    #[error("{} and {} both describe burst loss: give one", .0.key("burst_loss"), .0.key("gilbert"))]
    BurstAndGilbert(KeyStyle),
    /// `burst_loss` without a loss to shape.
    #[error("{} shapes the average loss into bursts: give a loss > 0 too ({})", .0.key("burst_loss"), .0.example("loss", "2%"))]
    BurstWithoutLoss(KeyStyle),
    /// `burst_loss` with a loss or mean burst length it cannot model.
    #[error("{}: {error}", .style.key("burst_loss"))]
    BurstLoss {
        /// How the key is named.
        style: KeyStyle,
        /// What is wrong.
        error: ImpairError,
    },
    /// `pareto_shape` without `jitter_dist = "pareto"`.
    #[error("{} only applies with {}", .0.key("pareto_shape"), .0.example("jitter_dist", "pareto"))]
    ShapeWithoutPareto(KeyStyle),
    /// `delay_trace` and `jitter` both given.
    #[error("{} replaces the jitter distribution: give {} or {}, not both", .0.key("delay_trace"), .0.key("jitter"), .0.key("delay_trace"))]
    TraceAndJitter(KeyStyle),
    /// `jitter_dist` with a `delay_trace`.
    #[error("{} does not apply to a {}", .0.key("jitter_dist"), .0.key("delay_trace"))]
    DistWithTrace(KeyStyle),
    /// `jitter_dist` without `jitter`.
    #[error("{} needs {} (σ for normal, the scale for pareto)", .0.key("jitter_dist"), .0.key("jitter"))]
    DistWithoutJitter(KeyStyle),
    /// `rate_burst` given as a packet count.
    #[error("{} is a size or a time, not a packet count", .0.key("rate_burst"))]
    BurstInPackets(KeyStyle),
    /// `rate_burst` or `queue` without `rate`.
    #[error("{} and {} shape the rate limit: give a rate too ({})", .0.key("rate_burst"), .0.key("queue"), .0.example("rate", "20mbit"))]
    ShapeWithoutRate(KeyStyle),
    /// `reorder_delay` without `reorder`.
    #[error("{} applies to reordered datagrams: give {} too ({})", .0.key("reorder_delay"), .0.key("reorder"), .0.example("reorder", "1%"))]
    ReorderDelayWithoutReorder(KeyStyle),
    /// The delay trace cannot be read or parsed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The resulting impairment is out of range.
    #[error(transparent)]
    Impairment(#[from] ImpairError),
}

/// A key of a profile section whose value is not valid: `[down] loss: "2x" is not …`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{section} {key}: {error}")]
pub struct KeyError {
    /// The section: `[down]`, `[[path]] #2 [both]`.
    pub section: String,
    /// The key: `loss`, `gilbert.p`.
    pub key: String,
    /// What is wrong with the value.
    pub error: ValueError,
}

/// What is wrong with the value of a profile key ([`KeyError`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// Not in the key's units.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A Gilbert–Elliott model that is not valid.
    #[error(transparent)]
    Gilbert(#[from] ImpairError),
    /// A `jitter_dist` that is not one of the distributions.
    #[error("{0:?} is not one of \"normal\", \"pareto\"")]
    JitterDist(String),
    /// A `pareto_shape` that is not > 0.
    #[error("{0} must be a number > 0 (2.5 is a moderate tail, 1.5 a heavy one)")]
    ParetoShape(f64),
}

/// One direction of a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From the target back to the client (host → headset: the video).
    Down,
    /// From the client to the target (headset → host: input, feedback).
    Up,
}

impl Direction {
    /// Both, down first.
    pub const ALL: [Direction; 2] = [Direction::Down, Direction::Up];

    /// `"down"` or `"up"`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Down => "down",
            Direction::Up => "up",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the variable part of the delay is distributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum JitterDist {
    /// Normal: the jitter is its standard deviation σ.
    Normal,
    /// Pareto tail (Lomax): the jitter is its scale; the tail index is the Pareto shape.
    Pareto,
}

/// Whether burst loss is on, and the mean burst length in datagrams.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BurstLoss {
    /// Independent loss.
    Off,
    /// The average `loss` comes in Wi-Fi-like bursts of this mean length.
    MeanBurst(f64),
}

/// A partial impairment: every key optional, already parsed. Layers are combined with
/// [`ImpairmentSpec::overlay`] and the result turned into an [`Impairment`] with
/// [`ImpairmentSpec::resolve`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImpairmentSpec {
    /// Average loss (Bernoulli, or the average of the bursts with `burst_loss`).
    pub loss: Option<f64>,
    /// Turns `loss` into Gilbert–Elliott bursts with the same average.
    pub burst_loss: Option<BurstLoss>,
    /// An explicit Gilbert–Elliott model (in addition to `loss`).
    pub gilbert: Option<GilbertElliott>,
    /// Fixed delay.
    pub delay_us: Option<Micros>,
    /// Jitter: σ (normal) or scale (Pareto).
    pub jitter_us: Option<Micros>,
    /// Jitter distribution (default normal).
    pub jitter_dist: Option<JitterDist>,
    /// Pareto tail index.
    pub pareto_shape: Option<f64>,
    /// A file of delays replayed in order (instead of `jitter`).
    pub delay_trace: Option<PathBuf>,
    /// Keep datagrams in order despite jitter (default true).
    pub preserve_order: Option<bool>,
    /// Rate limit in bits per second.
    pub rate_bps: Option<u64>,
    /// Token-bucket size.
    pub rate_burst: Option<SizeSpec>,
    /// Queue bound in front of the rate limiter.
    pub queue: Option<SizeSpec>,
    /// Reordering probability.
    pub reorder: Option<f64>,
    /// Extra hold-back of a reordered datagram.
    pub reorder_delay_us: Option<Micros>,
    /// Duplication probability.
    pub duplicate: Option<f64>,
    /// Outage windows (a later layer replaces the whole list).
    pub outages: Option<Vec<Outage>>,
}

macro_rules! overlay_fields {
    ($self:ident, $other:ident, $($f:ident),*) => {
        $( if $other.$f.is_some() { $self.$f = $other.$f.clone(); } )*
    };
}

impl ImpairmentSpec {
    /// Every key `other` sets replaces this one's.
    pub fn overlay(&mut self, other: &ImpairmentSpec) {
        overlay_fields!(
            self,
            other,
            loss,
            burst_loss,
            gilbert,
            delay_us,
            jitter_us,
            jitter_dist,
            pareto_shape,
            delay_trace,
            preserve_order,
            rate_bps,
            rate_burst,
            queue,
            reorder,
            reorder_delay_us,
            duplicate,
            outages
        );
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        *self == ImpairmentSpec::default()
    }

    /// The impairment these settings describe (a delay trace is read here). Errors name the
    /// keys as profile keys (`loss`, `rate_burst`, …).
    pub fn resolve(&self) -> Result<Impairment, ProfileError> {
        self.resolve_styled(KeyStyle::Profile)
    }

    /// Like [`ImpairmentSpec::resolve`], naming keys in the given style.
    pub fn resolve_styled(&self, s: KeyStyle) -> Result<Impairment, ProfileError> {
        let mut imp = Impairment {
            loss: self.loss.unwrap_or(0.0),
            gilbert: self.gilbert,
            delay_us: self.delay_us.unwrap_or(0),
            preserve_order: self.preserve_order.unwrap_or(true),
            reorder: self.reorder.unwrap_or(0.0),
            reorder_delay_us: self.reorder_delay_us.unwrap_or(DEFAULT_REORDER_DELAY_US),
            duplicate: self.duplicate.unwrap_or(0.0),
            outages: self.outages.clone().unwrap_or_default(),
            ..Impairment::default()
        };
        if let Some(BurstLoss::MeanBurst(len)) = self.burst_loss {
            if self.gilbert.is_some() {
                return Err(ProfileError::BurstAndGilbert(s));
            }
            if imp.loss == 0.0 {
                return Err(ProfileError::BurstWithoutLoss(s));
            }
            imp.gilbert = Some(
                GilbertElliott::bursty(imp.loss, len)
                    .map_err(|error| ProfileError::BurstLoss { style: s, error })?,
            );
            imp.loss = 0.0;
        }
        if self.pareto_shape.is_some() && self.jitter_dist != Some(JitterDist::Pareto) {
            return Err(ProfileError::ShapeWithoutPareto(s));
        }
        imp.jitter = match (&self.delay_trace, self.jitter_us) {
            (Some(_), Some(_)) => return Err(ProfileError::TraceAndJitter(s)),
            (Some(path), None) => {
                if self.jitter_dist.is_some() {
                    return Err(ProfileError::DistWithTrace(s));
                }
                Jitter::Trace(Arc::new(DelayTrace::load(path)?))
            }
            (None, None) if self.jitter_dist.is_some() => {
                return Err(ProfileError::DistWithoutJitter(s))
            }
            (None, None) | (None, Some(0)) => Jitter::None,
            (None, Some(j)) => match self.jitter_dist.unwrap_or(JitterDist::Normal) {
                JitterDist::Normal => Jitter::Normal { sigma_us: j as f64 },
                JitterDist::Pareto => Jitter::Pareto {
                    scale_us: j as f64,
                    shape: self.pareto_shape.unwrap_or(DEFAULT_PARETO_SHAPE),
                },
            },
        };
        match self.rate_bps {
            Some(bps) => {
                let burst_bytes = match self.rate_burst {
                    None => RateLimit::default_burst(bps),
                    Some(b) => b.bytes_at(bps).ok_or(ProfileError::BurstInPackets(s))?,
                };
                let queue = match self.queue {
                    None => RateLimit::default_queue(bps),
                    Some(SizeSpec::Packets(n)) => QueueLimit::Packets(n),
                    Some(q) => QueueLimit::Bytes(q.bytes_at(bps).unwrap_or(0)),
                };
                imp.rate = Some(RateLimit {
                    bits_per_s: bps,
                    burst_bytes,
                    queue,
                });
            }
            None => {
                if self.rate_burst.is_some() || self.queue.is_some() {
                    return Err(ProfileError::ShapeWithoutRate(s));
                }
            }
        }
        if self.reorder_delay_us.is_some() && self.reorder.is_none() {
            return Err(ProfileError::ReorderDelayWithoutReorder(s));
        }
        imp.validate()?;
        Ok(imp)
    }
}

/// How error messages name the keys: as profile keys (`rate_burst = "3000B"`) or as
/// command-line flags (`--rate-burst 3000B`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyStyle {
    /// Profile keys.
    #[default]
    Profile,
    /// Command-line flags.
    Flag,
}

impl KeyStyle {
    /// The key `k` (in profile spelling) in this style.
    pub fn key(self, k: &str) -> String {
        match self {
            KeyStyle::Profile => k.to_string(),
            KeyStyle::Flag => format!("--{}", k.replace('_', "-")),
        }
    }

    /// An example setting of `k` to `v`.
    pub fn example(self, k: &str, v: &str) -> String {
        match self {
            KeyStyle::Profile => format!("e.g. {k} = \"{v}\""),
            KeyStyle::Flag => format!("e.g. {} {v}", self.key(k)),
        }
    }
}

/// A string or number from TOML, kept as text for the unit parsers (so `loss = 0.02` and
/// `loss = "2%"` both work and a bare `delay = 5` gets the "needs a unit" message).
#[derive(Clone, Debug, PartialEq)]
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string with a unit (\"2%\", \"5ms\", \"20mbit\") or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `burst_loss = true | false | MEAN_BURST`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BurstToml(BurstLoss);

impl<'de> Deserialize<'de> for BurstToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = BurstToml;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false, or the mean burst length in datagrams (a number ≥ 1)")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<BurstToml, E> {
                Ok(BurstToml(if v {
                    BurstLoss::MeanBurst(DEFAULT_MEAN_BURST)
                } else {
                    BurstLoss::Off
                }))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<BurstToml, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<BurstToml, E> {
                self.visit_f64(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<BurstToml, E> {
                if v.is_finite() && v >= 1.0 {
                    Ok(BurstToml(BurstLoss::MeanBurst(v)))
                } else {
                    Err(E::custom(format!(
                        "burst_loss = {v}: the mean burst length is in datagrams and must be ≥ 1"
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
struct GilbertToml {
    p: Scalar,
    r: Scalar,
    loss_bad: Option<Scalar>,
    loss_good: Option<Scalar>,
}

/// One `[both]`, `[down]` or `[up]` section as written.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
struct DirectionToml {
    loss: Option<Scalar>,
    burst_loss: Option<BurstToml>,
    gilbert: Option<GilbertToml>,
    delay: Option<Scalar>,
    jitter: Option<Scalar>,
    jitter_dist: Option<String>,
    pareto_shape: Option<f64>,
    delay_trace: Option<PathBuf>,
    preserve_order: Option<bool>,
    rate: Option<Scalar>,
    rate_burst: Option<Scalar>,
    queue: Option<Scalar>,
    reorder: Option<Scalar>,
    reorder_delay: Option<Scalar>,
    duplicate: Option<Scalar>,
    outages: Option<Vec<Scalar>>,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
struct PathToml {
    seed: Option<u64>,
    listen: Option<String>,
    target: Option<String>,
    both: Option<DirectionToml>,
    down: Option<DirectionToml>,
    up: Option<DirectionToml>,
}

#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
struct ProfileToml {
    description: Option<String>,
    seed: Option<u64>,
    both: Option<DirectionToml>,
    down: Option<DirectionToml>,
    up: Option<DirectionToml>,
    #[serde(default)]
    path: Vec<PathToml>,
}

fn key_err(section: &str, key: &str, e: impl Into<ValueError>) -> KeyError {
    KeyError {
        section: section.into(),
        key: key.into(),
        error: e.into(),
    }
}

impl DirectionToml {
    fn to_spec(&self, section: &str, base_dir: &Path) -> Result<ImpairmentSpec, KeyError> {
        fn p<T>(
            section: &str,
            key: &str,
            v: &Option<Scalar>,
            f: fn(&str) -> Result<T, ParseError>,
        ) -> Result<Option<T>, KeyError> {
            v.as_ref()
                .map(|s| f(&s.0).map_err(|e| key_err(section, key, e)))
                .transpose()
        }
        let gilbert = match &self.gilbert {
            None => None,
            Some(g) => {
                let f = |k: &str, v: &Scalar| {
                    units::fraction(&v.0).map_err(|e| key_err(section, &format!("gilbert.{k}"), e))
                };
                let g = GilbertElliott {
                    p: f("p", &g.p)?,
                    r: f("r", &g.r)?,
                    loss_bad: g
                        .loss_bad
                        .as_ref()
                        .map(|v| f("loss_bad", v))
                        .transpose()?
                        .unwrap_or(1.0),
                    loss_good: g
                        .loss_good
                        .as_ref()
                        .map(|v| f("loss_good", v))
                        .transpose()?
                        .unwrap_or(0.0),
                };
                g.validate().map_err(|e| key_err(section, "gilbert", e))?;
                Some(g)
            }
        };
        let jitter_dist = match self.jitter_dist.as_deref() {
            None => None,
            Some("normal") => Some(JitterDist::Normal),
            Some("pareto") => Some(JitterDist::Pareto),
            Some(other) => {
                return Err(key_err(
                    section,
                    "jitter_dist",
                    ValueError::JitterDist(other.into()),
                ))
            }
        };
        if let Some(s) = self.pareto_shape {
            if !(s.is_finite() && s > 0.0) {
                return Err(key_err(section, "pareto_shape", ValueError::ParetoShape(s)));
            }
        }
        let outages = match &self.outages {
            None => None,
            Some(list) => Some(
                list.iter()
                    .map(|s| units::outage(&s.0).map_err(|e| key_err(section, "outages", e)))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(ImpairmentSpec {
            loss: p(section, "loss", &self.loss, units::fraction)?,
            burst_loss: self.burst_loss.map(|b| b.0),
            gilbert,
            delay_us: p(section, "delay", &self.delay, units::duration_us)?,
            jitter_us: p(section, "jitter", &self.jitter, units::duration_us)?,
            jitter_dist,
            pareto_shape: self.pareto_shape,
            delay_trace: self.delay_trace.as_ref().map(|t| base_dir.join(t)),
            preserve_order: self.preserve_order,
            rate_bps: p(section, "rate", &self.rate, units::rate_bps)?,
            rate_burst: p(section, "rate_burst", &self.rate_burst, units::burst_size)?,
            queue: p(section, "queue", &self.queue, units::queue_limit)?,
            reorder: p(section, "reorder", &self.reorder, units::fraction)?,
            reorder_delay_us: p(
                section,
                "reorder_delay",
                &self.reorder_delay,
                units::duration_us,
            )?,
            duplicate: p(section, "duplicate", &self.duplicate, units::fraction)?,
            outages,
        })
    }
}

/// The three sections of one layer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sections {
    /// `[both]`: applies to both directions, before the direction's own section.
    pub both: ImpairmentSpec,
    /// `[down]`.
    pub down: ImpairmentSpec,
    /// `[up]`.
    pub up: ImpairmentSpec,
}

impl Sections {
    fn from_toml(
        both: &Option<DirectionToml>,
        down: &Option<DirectionToml>,
        up: &Option<DirectionToml>,
        prefix: &str,
        base_dir: &Path,
    ) -> Result<Self, KeyError> {
        let conv = |t: &Option<DirectionToml>, name: &str| {
            t.as_ref()
                .map(|t| t.to_spec(&format!("{prefix}[{name}]"), base_dir))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        Ok(Sections {
            both: conv(both, "both")?,
            down: conv(down, "down")?,
            up: conv(up, "up")?,
        })
    }

    /// `both` overlaid with the direction's own section.
    pub fn for_direction(&self, d: Direction) -> ImpairmentSpec {
        let mut s = self.both.clone();
        s.overlay(match d {
            Direction::Down => &self.down,
            Direction::Up => &self.up,
        });
        s
    }
}

/// One `[[path]]` entry as parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathSpec {
    /// The path's own seed (default: derived from the profile's seed and the path's index).
    pub seed: Option<u64>,
    /// The path's listen address (default: the base listen address's port + index).
    pub listen: Option<String>,
    /// The path's target (default: the common target).
    pub target: Option<String>,
    /// The path's sections, laid over the profile's.
    pub sections: Sections,
}

/// A parsed profile file, before flags are applied and it is resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileSpec {
    /// Free text describing the profile.
    pub description: Option<String>,
    /// The base seed.
    pub seed: Option<u64>,
    /// The top-level sections (every path).
    pub sections: Sections,
    /// `[[path]]` entries; none means one path (or `--paths N` identical ones).
    pub paths: Vec<PathSpec>,
}

impl ProfileSpec {
    /// Parses profile text; `source` names it in errors, and a relative `delay_trace` is taken
    /// relative to `base_dir`.
    pub fn parse(text: &str, source: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let err = |e: &dyn fmt::Display| ConfigError(format!("profile {source}: {e}"));
        let t: ProfileToml = toml::from_str(text).map_err(|e| err(&e.to_string().trim_end()))?;
        let sections =
            Sections::from_toml(&t.both, &t.down, &t.up, "", base_dir).map_err(|e| err(&e))?;
        let paths = t
            .path
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Ok(PathSpec {
                    seed: p.seed,
                    listen: p.listen.clone(),
                    target: p.target.clone(),
                    sections: Sections::from_toml(
                        &p.both,
                        &p.down,
                        &p.up,
                        &format!("[[path]] #{} ", i + 1),
                        base_dir,
                    )?,
                })
            })
            .collect::<Result<Vec<_>, KeyError>>()
            .map_err(|e| err(&e))?;
        if paths.len() > MAX_PATHS {
            return Err(err(&format_args!(
                "{} [[path]] entries; at most {MAX_PATHS}",
                paths.len()
            )));
        }
        Ok(ProfileSpec {
            description: t.description,
            seed: t.seed,
            sections,
            paths,
        })
    }

    /// Reads and parses a profile file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read profile {}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, &path.display().to_string(), dir)
    }

    /// Applies `overrides` (the command line) and resolves every path.
    pub fn resolve(&self, overrides: &Overrides) -> Result<Profile, ConfigError> {
        let count = match (self.paths.len(), overrides.paths) {
            (0, n) => n.unwrap_or(1),
            (m, None) => m,
            (m, Some(n)) if n == m => m,
            (m, Some(n)) => {
                return Err(ConfigError(format!(
                    "--paths {n}, but the profile has {m} [[path]] entries: give --paths {m} or leave it out"
                )))
            }
        };
        if count == 0 || count > MAX_PATHS {
            return Err(ConfigError(format!(
                "--paths {count}: must be 1 to {MAX_PATHS}"
            )));
        }
        let seed = overrides.seed.or(self.seed).unwrap_or(DEFAULT_SEED);
        let default_path = PathSpec::default();
        let paths = (0..count)
            .map(|i| {
                let p = self.paths.get(i).unwrap_or(&default_path);
                let mut out = [Impairment::default(), Impairment::default()];
                for (k, d) in Direction::ALL.into_iter().enumerate() {
                    let mut spec = self.sections.for_direction(d);
                    spec.overlay(&p.sections.for_direction(d));
                    spec.overlay(match d {
                        Direction::Down => &overrides.down,
                        Direction::Up => &overrides.up,
                    });
                    out[k] = spec.resolve_styled(overrides.key_style).map_err(|e| {
                        let where_ = if count > 1 {
                            format!("path {}, {d} direction", i + 1)
                        } else {
                            format!("{d} direction")
                        };
                        ConfigError(format!("{where_}: {e}"))
                    })?;
                }
                let [down, up] = out;
                Ok(PathProfile {
                    down,
                    up,
                    seed: p.seed.unwrap_or_else(|| derive_seed(seed, i as u64 + 1, 0)),
                    listen: p.listen.clone(),
                    target: p.target.clone(),
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Profile {
            description: self.description.clone(),
            seed,
            paths,
        })
    }
}

/// What the command line lays over a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--paths`.
    pub paths: Option<usize>,
    /// Flags that apply to the down direction.
    pub down: ImpairmentSpec,
    /// Flags that apply to the up direction.
    pub up: ImpairmentSpec,
    /// How errors name the keys (flags when there is no profile file).
    pub key_style: KeyStyle,
}

/// One path's resolved impairments.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PathProfile {
    /// Target → client.
    pub down: Impairment,
    /// Client → target.
    pub up: Impairment,
    /// The path's seed; each direction's impairer gets its own seed derived from it.
    pub seed: u64,
    /// The path's own listen address, if the profile gives one.
    pub listen: Option<String>,
    /// The path's own target, if the profile gives one.
    pub target: Option<String>,
}

impl PathProfile {
    /// The impairment of direction `d`.
    pub fn impairment(&self, d: Direction) -> &Impairment {
        match d {
            Direction::Down => &self.down,
            Direction::Up => &self.up,
        }
    }

    /// The seed of direction `d`'s impairer.
    pub fn direction_seed(&self, d: Direction) -> u64 {
        direction_seed(self.seed, d)
    }
}

/// The seed of direction `d`'s impairer on a path seeded with `path_seed`.
pub fn direction_seed(path_seed: u64, d: Direction) -> u64 {
    derive_seed(
        path_seed,
        0,
        match d {
            Direction::Down => 1,
            Direction::Up => 2,
        },
    )
}

/// A resolved profile: one entry per relay.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Profile {
    /// The profile's description.
    pub description: Option<String>,
    /// The base seed.
    pub seed: u64,
    /// One per relay.
    pub paths: Vec<PathProfile>,
}

impl Profile {
    /// One path with the same impairment both ways.
    pub fn symmetric(imp: Impairment, seed: u64) -> Self {
        Profile {
            description: None,
            seed,
            paths: vec![PathProfile {
                down: imp.clone(),
                up: imp,
                seed: derive_seed(seed, 1, 0),
                listen: None,
                target: None,
            }],
        }
    }

    /// True when no path impairs anything.
    pub fn is_passthrough(&self) -> bool {
        self.paths
            .iter()
            .all(|p| p.down.is_passthrough() && p.up.is_passthrough())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProfileSpec, ConfigError> {
        ProfileSpec::parse(text, "test.toml", Path::new("."))
    }

    fn docs_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/netem")
    }

    #[test]
    fn layering_both_then_direction_then_path_then_flags() {
        let spec = parse(
            r#"
            seed = 7
            [both]
            delay = "5ms"
            loss = "1%"
            [down]
            loss = 0.02
            rate = "20mbit"
            [[path]]
            [[path]]
            seed = 99
            [path.up]
            delay = "30ms"
            "#,
        )
        .unwrap();
        let flags = ImpairmentSpec {
            duplicate: Some(0.001),
            ..Default::default()
        };
        let p = spec
            .resolve(&Overrides {
                up: flags,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(p.seed, 7);
        assert_eq!(p.paths.len(), 2);
        let [a, b] = [&p.paths[0], &p.paths[1]];
        assert_eq!((a.down.loss, a.down.delay_us), (0.02, 5000));
        assert_eq!(a.down.rate.unwrap().bits_per_s, 20_000_000);
        assert_eq!((a.up.loss, a.up.delay_us, a.up.rate), (0.01, 5000, None));
        assert_eq!((a.up.duplicate, a.down.duplicate), (0.001, 0.0));
        assert_eq!((b.up.delay_us, b.down.delay_us), (30_000, 5000));
        assert_eq!(b.seed, 99);
        assert_ne!(a.seed, b.seed);
        assert_ne!(
            a.direction_seed(Direction::Down),
            a.direction_seed(Direction::Up)
        );
    }

    #[test]
    fn paths_flag_replicates_or_must_agree() {
        let spec = parse("[both]\nloss = \"1%\"\n").unwrap();
        let p = spec
            .resolve(&Overrides {
                paths: Some(3),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(p.paths.len(), 3);
        assert!(p.paths.iter().all(|x| x.down.loss == 0.01));
        let seeds: std::collections::HashSet<u64> = p.paths.iter().map(|x| x.seed).collect();
        assert_eq!(seeds.len(), 3);
        let two = parse("[[path]]\n[[path]]\n").unwrap();
        let e = two
            .resolve(&Overrides {
                paths: Some(3),
                ..Default::default()
            })
            .unwrap_err();
        assert!(e.0.contains("2 [[path]]"), "{e}");
        assert!(spec
            .resolve(&Overrides {
                paths: Some(0),
                ..Default::default()
            })
            .is_err());
    }

    #[test]
    fn errors_name_the_section_key_and_forms() {
        let e = parse("[down]\nloss = \"2x\"\n").unwrap_err().0;
        assert!(
            e.contains("test.toml") && e.contains("[down] loss") && e.contains("2%"),
            "{e}"
        );
        let e = parse("[up]\ndelay = 5\n").unwrap_err().0;
        assert!(e.contains("[up] delay") && e.contains("no unit"), "{e}");
        let e = parse("[both]\nlos = \"2%\"\n").unwrap_err().0;
        assert!(e.contains("unknown field") && e.contains("los"), "{e}");
        let e = parse("[sideways]\n").unwrap_err().0;
        assert!(e.contains("unknown field") && e.contains("sideways"), "{e}");
        let e = parse("[[path]]\n[path.down]\nrate = \"20furlongs\"\n")
            .unwrap_err()
            .0;
        assert!(
            e.contains("[[path]] #1 [down] rate") && e.contains("20mbit"),
            "{e}"
        );
        let e = parse("[down]\njitter_dist = \"cauchy\"\n").unwrap_err().0;
        assert!(e.contains("pareto"), "{e}");
        let e = parse("[down]\nburst_loss = 0.5\n").unwrap_err().0;
        assert!(e.contains("≥ 1"), "{e}");
        let e = parse("[down]\noutages = \"5s@10s\"\n").unwrap_err().0;
        assert!(e.contains("outages"), "{e}");
    }

    #[test]
    fn resolve_rules() {
        let r = |s: ImpairmentSpec| s.resolve();
        let e = r(ImpairmentSpec {
            burst_loss: Some(BurstLoss::MeanBurst(4.0)),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("loss > 0"), "{e}");
        let ok = r(ImpairmentSpec {
            loss: Some(0.02),
            burst_loss: Some(BurstLoss::MeanBurst(4.0)),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ok.loss, 0.0);
        assert!((ok.gilbert.unwrap().average_loss() - 0.02).abs() < 1e-12);
        let e = r(ImpairmentSpec {
            queue: Some(SizeSpec::Packets(10)),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("rate"), "{e}");
        let rate = r(ImpairmentSpec {
            rate_bps: Some(20_000_000),
            queue: Some(SizeSpec::Time(50_000)),
            rate_burst: Some(SizeSpec::Time(1000)),
            ..Default::default()
        })
        .unwrap()
        .rate
        .unwrap();
        assert_eq!(
            (rate.burst_bytes, rate.queue),
            (2500, QueueLimit::Bytes(125_000))
        );
        let e = r(ImpairmentSpec {
            jitter_us: Some(1000),
            delay_trace: Some("x".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        let p = r(ImpairmentSpec {
            jitter_us: Some(1000),
            jitter_dist: Some(JitterDist::Pareto),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            p.jitter,
            Jitter::Pareto {
                scale_us: 1000.0,
                shape: DEFAULT_PARETO_SHAPE
            }
        );
        let e = r(ImpairmentSpec {
            delay_trace: Some("/nonexistent/trace.txt".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/trace.txt"), "{e}");
    }

    #[test]
    fn errors_are_typed() {
        let r = |s: ImpairmentSpec, style| s.resolve_styled(style).unwrap_err();
        let e = r(
            ImpairmentSpec {
                burst_loss: Some(BurstLoss::MeanBurst(4.0)),
                ..Default::default()
            },
            KeyStyle::Flag,
        );
        assert!(
            matches!(e, ProfileError::BurstWithoutLoss(KeyStyle::Flag)),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "--burst-loss shapes the average loss into bursts: give a loss > 0 too (e.g. --loss 2%)"
        );
        let e = r(
            ImpairmentSpec {
                rate_bps: Some(1000),
                rate_burst: Some(SizeSpec::Packets(3)),
                ..Default::default()
            },
            KeyStyle::Profile,
        );
        assert!(matches!(e, ProfileError::BurstInPackets(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "rate_burst is a size or a time, not a packet count"
        );
        let e = r(
            ImpairmentSpec {
                loss: Some(2.0),
                ..Default::default()
            },
            KeyStyle::Profile,
        );
        assert!(
            matches!(
                e,
                ProfileError::Impairment(ImpairError::Probability { name: "loss", .. })
            ),
            "{e}"
        );
        let e = r(
            ImpairmentSpec {
                delay_trace: Some("/nonexistent/trace.txt".into()),
                ..Default::default()
            },
            KeyStyle::Profile,
        );
        assert!(
            matches!(e, ProfileError::Trace(TraceError::Read { .. })),
            "{e}"
        );

        let section = |text: &str| {
            let t: DirectionToml = toml::from_str(text).unwrap();
            t.to_spec("[down]", Path::new(".")).unwrap_err()
        };
        let e = section("loss = \"2x\"");
        assert_eq!((e.section.as_str(), e.key.as_str()), ("[down]", "loss"));
        assert!(
            matches!(
                e.error,
                ValueError::Parse(ParseError::Malformed {
                    forms: units::FRACTION_FORMS,
                    ..
                })
            ),
            "{e}"
        );
        let e = section("jitter_dist = \"cauchy\"");
        assert_eq!(e.error, ValueError::JitterDist("cauchy".into()));
        assert_eq!(
            e.to_string(),
            "[down] jitter_dist: \"cauchy\" is not one of \"normal\", \"pareto\""
        );
        let e = section("pareto_shape = -1.0");
        assert_eq!(e.error, ValueError::ParetoShape(-1.0));
        let e = section("gilbert = { p = \"1%\", r = 0 }");
        assert_eq!(e.key, "gilbert");
        assert_eq!(e.error, ValueError::Gilbert(ImpairError::NeverLeavesBad));
    }

    #[test]
    fn the_shipped_profiles_parse_and_resolve() {
        let mut n = 0;
        for entry in std::fs::read_dir(docs_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let spec = ProfileSpec::load(&path).unwrap();
                let p = spec.resolve(&Overrides::default()).unwrap();
                assert!(!p.is_passthrough(), "{}", path.display());
                assert!(
                    spec.description.is_some(),
                    "{} has a description",
                    path.display()
                );
                n += 1;
            }
        }
        assert!(n >= 3, "{n} profiles in docs/netem");
    }

    /// docs/netem/wifi.toml claims a median RTT of 1.9 ms, a quarter of the round trips more
    /// than 1 ms above the minimum, and tails to ~236 ms: check it, one ping a second over a
    /// long seeded run.
    #[test]
    fn the_wifi_profile_matches_its_description() {
        use crate::impair::{Impairer, Verdict};
        let spec = ProfileSpec::load(&docs_dir().join("wifi.toml")).unwrap();
        let mut p = spec.resolve(&Overrides::default()).unwrap();
        let path = &mut p.paths[0];
        // Delays only: the loss is checked elsewhere.
        path.down.gilbert = None;
        path.up.gilbert = None;
        let mut down = Impairer::new(path.down.clone(), 1, 0);
        let mut up = Impairer::new(path.up.clone(), 2, 0);
        let n = 1_000_000u64;
        let mut rtt: Vec<f64> = (0..n)
            .map(|i| {
                let t = i * 1_000_000;
                let (Verdict::Deliver { at: a, .. }, Verdict::Deliver { at: b, .. }) =
                    (up.on_packet(t, 64), down.on_packet(t, 64))
                else {
                    panic!("no loss configured");
                };
                (a - t + b - t) as f64 / 1000.0
            })
            .collect();
        rtt.sort_by(f64::total_cmp);
        let q = |x: f64| rtt[((rtt.len() - 1) as f64 * x) as usize];
        let min = rtt[0];
        let over_1ms = rtt.iter().filter(|&&r| r - min > 1.0).count() as f64 / n as f64;
        assert!((q(0.5) - 1.9).abs() < 0.1, "median RTT {} ms", q(0.5));
        assert!(
            (over_1ms - 0.25).abs() < 0.03,
            "{over_1ms} above min + 1 ms"
        );
        assert!((55.0..95.0).contains(&q(0.9999)), "p99.99 {} ms", q(0.9999));
        assert!(
            (150.0..400.0).contains(&q(0.99999)),
            "p99.999 {} ms",
            q(0.99999)
        );
    }
}
