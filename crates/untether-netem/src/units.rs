//! Parsing of the human units the impairment relay takes on its command line and in profile
//! files: fractions (`2%`, `0.02`), durations (`5ms`, `500us`, `1s`), bit rates (`20mbit`,
//! `500kbit`, `1gbit`, `20M`), sizes (`3000B`, `64KiB`), queue limits (`64p`, `128kB`, `50ms`) and
//! outage windows (`5s@10s`).
//!
//! Every parser returns a [`ParseError`] whose message names the accepted forms; the caller adds
//! the key or flag (clap does this for flags, [`crate::profile`] for profile keys).

use untether_net::Micros;
use untether_proto::units::{self, number_and_unit};

use crate::impair::{GilbertElliott, ImpairError, Outage};

/// Accepted forms of a fraction, for error messages.
pub const FRACTION_FORMS: &str =
    "a fraction between 0 and 1 as a percentage (2%, 0.5%) or a number (0.02)";
/// Accepted forms of a duration, for error messages.
pub const DURATION_FORMS: &str = "a duration with a unit: 500us, 5ms, 1.5s, 2min (0 needs no unit)";
/// Accepted forms of a bit rate, for error messages.
pub use untether_proto::units::RATE_FORMS;
/// Accepted forms of a byte size, for error messages.
pub const SIZE_FORMS: &str = "a size with a unit: 1500B, 64kB, 64KiB, 1MB, 1MiB";
/// Accepted forms of a queue limit, for error messages.
pub const QUEUE_FORMS: &str =
    "packets (64p, 64pkt), bytes (128kB, 100000B, 1MiB) or time at the link rate (50ms)";
/// Accepted forms of an outage, for error messages.
pub const OUTAGE_FORMS: &str =
    "DURATION@START, both durations with units, START counted from the relay's start: 5s@10s, 500ms@2.5s";
/// Accepted forms of a Gilbert–Elliott specification, for error messages.
pub const GILBERT_FORMS: &str =
    "P,R[,LOSS_BAD[,LOSS_GOOD]]: the per-packet probabilities good→bad and bad→good, then the loss \
     probabilities in the bad (default 100%) and good (default 0%) states, each a fraction: 0.4%,25%";

/// A value that is not in one of the forms a unit parser accepts. Each variant carries the text
/// given (`value`) and, where there is a list, the accepted forms (one of the `*_FORMS`
/// constants); the message is the one people see after the flag or key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// Not in any of the accepted forms.
    #[error("{value:?} is not {forms}")]
    Malformed {
        /// The text given.
        value: String,
        /// The accepted forms.
        forms: &'static str,
    },
    /// A number without the unit it needs.
    #[error("{value:?} has no unit: {forms}")]
    NoUnit {
        /// The text given.
        value: String,
        /// The accepted forms.
        forms: &'static str,
    },
    /// A duration or bit rate the project's parser ([`untether_proto::units`]) refused.
    #[error(transparent)]
    Unit(#[from] units::UnitError),
    /// A percentage above 100 %.
    #[error("{0:?} is more than 100%")]
    OverHundredPercent(String),
    /// A bare fraction above 1 (probably a percentage without its sign).
    #[error("{value:?} is more than 1: write {number}% for {number} percent, or {} as a fraction", .number / 100.0)]
    OverOne {
        /// The text given.
        value: String,
        /// The number in it.
        number: f64,
    },
    /// A duration longer than the relay handles.
    #[error("{0:?} is too long")]
    TooLong(String),
    /// A size larger than the relay handles.
    #[error("{0:?} is too large")]
    TooLarge(String),
    /// A bit rate below 1 bit/s.
    #[error("{0:?}: a rate must be at least 1 bit/s")]
    RateTooLow(String),
    /// A bit rate above 1000 gbit.
    #[error("{0:?} is more than 1000 gbit")]
    RateTooHigh(String),
    /// A packet count that is not a whole number up to 10^9.
    #[error("{0:?}: a packet count must be a whole number up to 10^9")]
    PacketCount(String),
    /// Neither a size nor a time (a token-bucket burst).
    #[error("{0:?} is not a size ({SIZE_FORMS}) or a time at the link rate (1ms)")]
    NotSizeOrTime(String),
    /// One side of an outage `DURATION@START` is not a duration.
    #[error("{value:?}: {part}: {error}")]
    OutagePart {
        /// The whole outage as given.
        value: String,
        /// Which side: `the duration before '@'` or `the start after '@'`.
        part: &'static str,
        /// What is wrong with it.
        error: Box<ParseError>,
    },
    /// An outage of length 0.
    #[error("{0:?}: an outage must last longer than 0")]
    EmptyOutage(String),
    /// One of the Gilbert–Elliott fractions is not a fraction.
    #[error("{value:?}: {name}: {error}")]
    GilbertPart {
        /// The whole specification as given.
        value: String,
        /// Which one: `P (good→bad)`, `R (bad→good)`, `LOSS_BAD` or `LOSS_GOOD`.
        name: &'static str,
        /// What is wrong with it.
        error: Box<ParseError>,
    },
    /// The Gilbert–Elliott model is not a valid one (e.g. `r = 0`).
    #[error("{value:?}: {error}")]
    Gilbert {
        /// The whole specification as given.
        value: String,
        /// What is wrong with the model.
        error: ImpairError,
    },
    /// A Pareto shape that is not a number > 0.
    #[error("{0:?} is not a number > 0 (2.5 is a moderate tail, 1.5 a heavy one)")]
    ParetoShape(String),
}

/// A fraction in [0, 1]: `2%`, `0.5 %`, `0.02`. A bare number above 1 is refused (it is almost
/// certainly a percentage without its sign).
pub fn fraction(s: &str) -> Result<f64, ParseError> {
    let t = s.trim();
    let bad = || ParseError::Malformed {
        value: s.into(),
        forms: FRACTION_FORMS,
    };
    if let Some(p) = t.strip_suffix('%') {
        let (v, rest) = number_and_unit(p).ok_or_else(bad)?;
        if !rest.is_empty() {
            return Err(bad());
        }
        if v > 100.0 {
            return Err(ParseError::OverHundredPercent(s.into()));
        }
        return Ok(v / 100.0);
    }
    let (v, rest) = number_and_unit(t).ok_or_else(bad)?;
    if !rest.is_empty() {
        return Err(bad());
    }
    if v > 1.0 {
        return Err(ParseError::OverOne {
            value: s.into(),
            number: v,
        });
    }
    Ok(v)
}

/// A duration in microseconds: `500us` (also `µs`), `5ms`, `1.5s`, `2min`; a bare `0` is allowed.
/// Rounded to the nearest microsecond ([`units::parse_duration_with_unit`], the project's one
/// duration parser).
pub fn duration_us(s: &str) -> Result<Micros, ParseError> {
    let d = units::parse_duration_with_unit(s)?;
    let us = (d.as_secs_f64() * 1e6).round();
    if us > 1e15 {
        return Err(ParseError::TooLong(s.into()));
    }
    Ok(us as Micros)
}

/// A bit rate in bits per second: `500kbit`, `20mbit`, `1gbit`, `64000bit` (also with `/s` or as
/// `…bps`), or `500k`, `20M`, `1G`. Decimal multiples (k = 1000): [`units::parse_rate_bps`], the
/// project's one bit-rate parser, plus the relay's range.
pub fn rate_bps(s: &str) -> Result<u64, ParseError> {
    let bps = units::parse_rate_bps(s)?;
    if bps < 1 {
        return Err(ParseError::RateTooLow(s.into()));
    }
    if bps > 1_000_000_000_000 {
        return Err(ParseError::RateTooHigh(s.into()));
    }
    Ok(bps)
}

/// A size in bytes: `1500B` (also `bytes`), `64kB` (1000), `64KiB` (1024), `1MB`, `1MiB`.
pub fn size_bytes(s: &str) -> Result<u64, ParseError> {
    let bad = || ParseError::Malformed {
        value: s.into(),
        forms: SIZE_FORMS,
    };
    let (v, unit) = number_and_unit(s).ok_or_else(bad)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "b" | "byte" | "bytes" => 1.0,
        "kb" => 1e3,
        "kib" => 1024.0,
        "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "" => {
            return Err(ParseError::NoUnit {
                value: s.into(),
                forms: SIZE_FORMS,
            })
        }
        _ => return Err(bad()),
    };
    let b = (v * mult).round();
    if b > 1e12 {
        return Err(ParseError::TooLarge(s.into()));
    }
    Ok(b as u64)
}

/// A size that may also be given as a time at the link's rate (token-bucket burst, queue limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeSpec {
    /// A number of packets.
    Packets(u64),
    /// A number of bytes.
    Bytes(u64),
    /// As many bytes as the link sends in this many microseconds.
    Time(Micros),
}

impl SizeSpec {
    /// The size in bytes at `rate_bps` (packets are not bytes: `None`).
    pub fn bytes_at(self, rate_bps: u64) -> Option<u64> {
        match self {
            SizeSpec::Packets(_) => None,
            SizeSpec::Bytes(b) => Some(b),
            SizeSpec::Time(us) => Some((rate_bps as u128 * us as u128 / 8_000_000) as u64),
        }
    }
}

/// A queue limit: `64p` / `64pkt` / `64packets`, a size (`128kB`), or a time at the link rate
/// (`50ms`).
pub fn queue_limit(s: &str) -> Result<SizeSpec, ParseError> {
    let bad = || ParseError::Malformed {
        value: s.into(),
        forms: QUEUE_FORMS,
    };
    let (v, unit) = number_and_unit(s).ok_or_else(bad)?;
    match unit.to_ascii_lowercase().as_str() {
        "p" | "pkt" | "pkts" | "packet" | "packets" => {
            if v.fract() != 0.0 || v > 1e9 {
                return Err(ParseError::PacketCount(s.into()));
            }
            return Ok(SizeSpec::Packets(v as u64));
        }
        "" => {
            return Err(ParseError::NoUnit {
                value: s.into(),
                forms: QUEUE_FORMS,
            })
        }
        _ => {}
    }
    if let Ok(b) = size_bytes(s) {
        return Ok(SizeSpec::Bytes(b));
    }
    if let Ok(us) = duration_us(s) {
        return Ok(SizeSpec::Time(us));
    }
    Err(bad())
}

/// A token-bucket burst: a size (`3000B`, `16KiB`) or a time at the link rate (`1ms`).
pub fn burst_size(s: &str) -> Result<SizeSpec, ParseError> {
    if let Ok(b) = size_bytes(s) {
        return Ok(SizeSpec::Bytes(b));
    }
    if let Ok(us) = duration_us(s) {
        return Ok(SizeSpec::Time(us));
    }
    Err(ParseError::NotSizeOrTime(s.into()))
}

/// An outage window `DURATION@START`, e.g. `5s@10s`: everything arriving from 10 s to 15 s after
/// the relay started is dropped.
pub fn outage(s: &str) -> Result<Outage, ParseError> {
    let (dur, start) = s.split_once('@').ok_or_else(|| ParseError::Malformed {
        value: s.into(),
        forms: OUTAGE_FORMS,
    })?;
    let part = |part: &'static str| {
        move |e| ParseError::OutagePart {
            value: s.into(),
            part,
            error: Box::new(e),
        }
    };
    let length = duration_us(dur).map_err(part("the duration before '@'"))?;
    let start_us = duration_us(start).map_err(part("the start after '@'"))?;
    if length == 0 {
        return Err(ParseError::EmptyOutage(s.into()));
    }
    Ok(Outage {
        start_us,
        duration_us: length,
    })
}

/// A Gilbert–Elliott model `P,R[,LOSS_BAD[,LOSS_GOOD]]`, each a fraction.
pub fn gilbert(s: &str) -> Result<GilbertElliott, ParseError> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.len() < 2 || parts.len() > 4 {
        return Err(ParseError::Malformed {
            value: s.into(),
            forms: GILBERT_FORMS,
        });
    }
    let names = ["P (good→bad)", "R (bad→good)", "LOSS_BAD", "LOSS_GOOD"];
    let mut v = [0.0, 0.0, 1.0, 0.0];
    for (i, p) in parts.iter().enumerate() {
        v[i] = fraction(p).map_err(|e| ParseError::GilbertPart {
            value: s.into(),
            name: names[i],
            error: Box::new(e),
        })?;
    }
    let g = GilbertElliott {
        p: v[0],
        r: v[1],
        loss_bad: v[2],
        loss_good: v[3],
    };
    g.validate().map_err(|error| ParseError::Gilbert {
        value: s.into(),
        error,
    })?;
    Ok(g)
}

/// A Pareto tail index: a number > 0 (`--pareto-shape`).
pub fn pareto_shape(s: &str) -> Result<f64, ParseError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ParseError::ParetoShape(s.into())),
    }
}

/// Formats microseconds for people: `750us`, `5ms`, `1.5ms`, `10s`.
pub fn fmt_us(us: Micros) -> String {
    if us == 0 {
        "0".into()
    } else if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us >= 1_000_000 {
        format!("{}s", trim_float(us as f64 / 1e6))
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else if us >= 1000 {
        format!("{}ms", trim_float(us as f64 / 1e3))
    } else {
        format!("{us}us")
    }
}

/// Formats a bit rate for people: `20mbit`, `1.5gbit`, `500kbit`, `300bit`.
pub fn fmt_rate(bps: u64) -> String {
    for (div, unit) in [(1e9, "gbit"), (1e6, "mbit"), (1e3, "kbit")] {
        if bps as f64 >= div {
            return format!("{}{unit}", trim_float(bps as f64 / div));
        }
    }
    format!("{bps}bit")
}

/// Formats a fraction as a percentage: `2%`, `0.25%`.
pub fn fmt_pct(f: f64) -> String {
    format!("{}%", trim_float(f * 100.0))
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert_eq!(fraction("2%").unwrap(), 0.02);
        assert_eq!(fraction(" 0.5 %").unwrap(), 0.005);
        assert_eq!(fraction("0.02").unwrap(), 0.02);
        assert_eq!(fraction("0").unwrap(), 0.0);
        assert_eq!(fraction("100%").unwrap(), 1.0);
        let e = fraction("2").unwrap_err().to_string();
        assert!(e.contains("2%") && e.contains("0.02"), "{e}");
        assert!(fraction("101%").is_err());
        assert!(fraction("-1%").is_err());
        assert!(fraction("two").unwrap_err().to_string().contains("2%"));
        assert!(fraction("2%%").is_err());
        assert!(fraction("").is_err());
        assert!(fraction("nan").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration_us("5ms").unwrap(), 5000);
        assert_eq!(duration_us("500us").unwrap(), 500);
        assert_eq!(duration_us("500µs").unwrap(), 500);
        assert_eq!(duration_us("1s").unwrap(), 1_000_000);
        assert_eq!(duration_us("1.5ms").unwrap(), 1500);
        assert_eq!(duration_us("2min").unwrap(), 120_000_000);
        assert_eq!(duration_us("0").unwrap(), 0);
        assert_eq!(duration_us(" 10 ms ").unwrap(), 10_000);
        let e = duration_us("5").unwrap_err().to_string();
        assert!(e.contains("no unit") && e.contains("5ms"), "{e}");
        assert_eq!(duration_us("1h").unwrap(), 3_600_000_000);
        assert!(duration_us("5d").unwrap_err().to_string().contains("500us"));
        assert!(duration_us("-5ms").is_err());
        assert!(duration_us("ms").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(rate_bps("20mbit").unwrap(), 20_000_000);
        assert_eq!(rate_bps("20M").unwrap(), 20_000_000);
        assert_eq!(rate_bps("500kbit").unwrap(), 500_000);
        assert_eq!(rate_bps("500k").unwrap(), 500_000);
        assert_eq!(rate_bps("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(rate_bps("1.5Gbit/s").unwrap(), 1_500_000_000);
        assert_eq!(rate_bps("64000bit").unwrap(), 64_000);
        // One meaning everywhere (the video bitrate parser's too): bits per second.
        assert_eq!(rate_bps("20mbps").unwrap(), 20_000_000);
        let e = rate_bps("20").unwrap_err().to_string();
        assert!(e.contains("has no unit"), "{e}");
        assert!(rate_bps("20").unwrap_err().to_string().contains("no unit"));
        assert!(rate_bps("0mbit").is_err());
        assert!(rate_bps("fast").unwrap_err().to_string().contains("20mbit"));
    }

    #[test]
    fn sizes_and_queues() {
        assert_eq!(size_bytes("1500B").unwrap(), 1500);
        assert_eq!(size_bytes("64kB").unwrap(), 64_000);
        assert_eq!(size_bytes("64KiB").unwrap(), 65_536);
        assert_eq!(size_bytes("1MiB").unwrap(), 1 << 20);
        assert!(size_bytes("64")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
        assert_eq!(queue_limit("64p").unwrap(), SizeSpec::Packets(64));
        assert_eq!(queue_limit("64 packets").unwrap(), SizeSpec::Packets(64));
        assert_eq!(queue_limit("128kB").unwrap(), SizeSpec::Bytes(128_000));
        assert_eq!(queue_limit("50ms").unwrap(), SizeSpec::Time(50_000));
        assert!(queue_limit("1.5p").is_err());
        let e = queue_limit("64").unwrap_err().to_string();
        assert!(e.contains("64p") && e.contains("50ms"), "{e}");
        assert_eq!(burst_size("1ms").unwrap(), SizeSpec::Time(1000));
        assert_eq!(burst_size("3000B").unwrap(), SizeSpec::Bytes(3000));
        assert_eq!(SizeSpec::Time(50_000).bytes_at(20_000_000), Some(125_000));
        assert!(burst_size("3").is_err());
    }

    #[test]
    fn outages() {
        let o = outage("5s@10s").unwrap();
        assert_eq!((o.duration_us, o.start_us), (5_000_000, 10_000_000));
        let o = outage("500ms@0").unwrap();
        assert_eq!((o.duration_us, o.start_us), (500_000, 0));
        assert!(outage("5s")
            .unwrap_err()
            .to_string()
            .contains("DURATION@START"));
        assert!(outage("5@10s")
            .unwrap_err()
            .to_string()
            .contains("before '@'"));
        assert!(outage("5s@x")
            .unwrap_err()
            .to_string()
            .contains("after '@'"));
        assert!(outage("0@1s").is_err());
    }

    #[test]
    fn gilbert_forms() {
        let g = gilbert("1%,25%").unwrap();
        assert_eq!((g.p, g.r, g.loss_bad, g.loss_good), (0.01, 0.25, 1.0, 0.0));
        let g = gilbert("0.01,0.3,80%,0.1%").unwrap();
        assert_eq!((g.loss_bad, g.loss_good), (0.8, 0.001));
        assert!(gilbert("0.01").unwrap_err().to_string().contains("P,R"));
        assert!(gilbert("0.01,2")
            .unwrap_err()
            .to_string()
            .contains("R (bad→good)"));
        assert!(
            gilbert("0.01,0").is_err(),
            "r = 0 never leaves the bad state"
        );
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            fraction("2").unwrap_err(),
            ParseError::OverOne { number, .. } if number == 2.0
        ));
        assert_eq!(
            fraction("101%").unwrap_err(),
            ParseError::OverHundredPercent("101%".into())
        );
        assert!(matches!(
            fraction("two").unwrap_err(),
            ParseError::Malformed {
                forms: FRACTION_FORMS,
                ..
            }
        ));
        assert!(matches!(duration_us("5").unwrap_err(), ParseError::Unit(_)));
        assert_eq!(
            rate_bps("0mbit").unwrap_err(),
            ParseError::RateTooLow("0mbit".into())
        );
        assert!(matches!(
            size_bytes("64").unwrap_err(),
            ParseError::NoUnit {
                forms: SIZE_FORMS,
                ..
            }
        ));
        assert_eq!(
            queue_limit("1.5p").unwrap_err(),
            ParseError::PacketCount("1.5p".into())
        );
        assert_eq!(
            burst_size("3").unwrap_err(),
            ParseError::NotSizeOrTime("3".into())
        );
        assert!(matches!(
            outage("5@10s").unwrap_err(),
            ParseError::OutagePart {
                part: "the duration before '@'",
                ..
            }
        ));
        assert_eq!(
            outage("0@1s").unwrap_err(),
            ParseError::EmptyOutage("0@1s".into())
        );
        assert!(matches!(
            gilbert("0.01,2").unwrap_err(),
            ParseError::GilbertPart { name: "R (bad→good)", ref error, .. }
                if matches!(**error, ParseError::OverOne { .. })
        ));
        assert!(matches!(
            gilbert("0.01,0").unwrap_err(),
            ParseError::Gilbert {
                error: ImpairError::NeverLeavesBad,
                ..
            }
        ));
        assert_eq!(pareto_shape("2.5").unwrap(), 2.5);
        assert_eq!(
            pareto_shape("0").unwrap_err(),
            ParseError::ParetoShape("0".into())
        );
    }

    /// The messages are the ones the `String` errors had, word for word.
    #[test]
    fn messages_are_unchanged() {
        assert_eq!(
            fraction("2").unwrap_err().to_string(),
            "\"2\" is more than 1: write 2% for 2 percent, or 0.02 as a fraction"
        );
        assert_eq!(
            outage("5s@x").unwrap_err().to_string(),
            format!(
                "\"5s@x\": the start after '@': {}",
                duration_us("x").unwrap_err()
            )
        );
        assert_eq!(
            queue_limit("64").unwrap_err().to_string(),
            format!("\"64\" has no unit: {QUEUE_FORMS}")
        );
        assert_eq!(
            gilbert("0.01,0").unwrap_err().to_string(),
            "\"0.01,0\": Gilbert–Elliott r = 0 would never leave the bad state"
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_us(5000), "5ms");
        assert_eq!(fmt_us(1500), "1.5ms");
        assert_eq!(fmt_us(250), "250us");
        assert_eq!(fmt_us(10_000_000), "10s");
        assert_eq!(fmt_us(2_500_000), "2.5s");
        assert_eq!(fmt_rate(20_000_000), "20mbit");
        assert_eq!(fmt_rate(1_500_000_000), "1.5gbit");
        assert_eq!(fmt_pct(0.02), "2%");
        assert_eq!(fmt_pct(0.0025), "0.25%");
    }
}
