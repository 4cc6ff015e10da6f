//! The human units of untether's settings, one parser each: video bitrates (`10M`, `8000k`,
//! `8000`), durations (`5s`, `500ms`, `2m`, `10`) and frame sizes (`1280x720`, `720p`, `4k`).
//!
//! Pure string parsing (no I/O), shared by the configuration file, the command line (`host`,
//! `client`, `demo`, `bench`) and the bench's scenario files, so `10M` and `360p` mean the same
//! everywhere. Ranges are not checked here: the configuration's validator does that and names
//! the key. Every error names the accepted forms; the caller adds the key or flag.
//!
//! The impairment relay (`untether_netem::units`) parses its link rates and delays with
//! [`parse_rate_bps`] and [`parse_duration_with_unit`]; its own are the fractions, byte sizes,
//! queue limits and outage windows.

use std::fmt;
use std::time::Duration;

/// A value that does not parse; the message names the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError(pub String);

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnitError {}

/// Accepted forms of a video bitrate, for error messages.
pub const BITRATE_FORMS: &str =
    "kbit/s as a bare number (8000), or with a unit: 8000k, 8000kbit, 8000kbps, 10M, 10mbit, 10mbps, 1G";
/// Accepted forms of a duration, for error messages.
pub const DURATION_FORMS: &str =
    "seconds as a bare number (10, 2.5), or with a unit: 500us, 500ms, 5s, 2m (minutes), 1h";
/// Accepted forms of a frame size, for error messages (the names come from [`NAMED_SIZES`]).
pub const RESOLUTION_FORMS: &str =
    "WIDTHxHEIGHT (1280x720) or a name: 360p, 480p, 720p, 1080p, 1440p, 2160p, 4k";

/// The named frame sizes, the only table of them: name → (width, height).
pub const NAMED_SIZES: [(&str, u32, u32); 7] = [
    ("360p", 640, 360),
    ("480p", 854, 480),
    ("720p", 1280, 720),
    ("1080p", 1920, 1080),
    ("1440p", 2560, 1440),
    ("2160p", 3840, 2160),
    ("4k", 3840, 2160),
];

/// Splits `"12.5ms"` into `(12.5, "ms")`: a finite number ≥ 0, then the unit as written
/// (trimmed). The one tokenizer of every unit parser here and in the impairment relay's.
pub fn number_and_unit(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map_or(s.len(), |(i, _)| i);
    let (num, unit) = s.split_at(end);
    let v: f64 = num.parse().ok()?;
    v.is_finite().then(|| (v, unit.trim()))
}

/// Accepted forms of a bit rate with its unit, for error messages.
pub const RATE_FORMS: &str = "a bit rate with a unit: 64000bit, 500k, 500kbit, 500kbps, 20M, 20mbit, 20mbps, 1G, 1gbit (bits per second, decimal; '/s' may follow)";

/// A bit rate in bits per second, with its unit (a bare number is the caller's to interpret):
/// `bit`/`bps`, `k`/`kbit`/`kbps`, `m`/`mbit`/`mbps`, `g`/`gbit`/`gbps`, case-insensitive,
/// optionally followed by `/s`. Decimal multiples: `20M` = 20 000 000 bit/s. The one bit-rate
/// parser: video bitrates ([`parse_bitrate`]) and the impairment relay's link rates use it.
pub fn parse_rate_bps(s: &str) -> Result<u64, UnitError> {
    let bad = || UnitError(format!("{s:?} is not {RATE_FORMS}"));
    let (v, unit) = number_and_unit(s).ok_or_else(bad)?;
    let lower = unit.to_ascii_lowercase();
    let unit = lower.strip_suffix("/s").unwrap_or(&lower);
    let scale = match unit {
        "bit" | "bps" | "b" => 1.0,
        "k" | "kbit" | "kbps" => 1e3,
        "m" | "mbit" | "mbps" => 1e6,
        "g" | "gbit" | "gbps" => 1e9,
        "" => return Err(UnitError(format!("{s:?} has no unit: {RATE_FORMS}"))),
        _ => return Err(bad()),
    };
    let bps = (v * scale).round();
    if bps > u64::MAX as f64 / 2.0 {
        return Err(UnitError(format!("{s:?} is too large")));
    }
    Ok(bps as u64)
}

/// A video bitrate in kbit/s. A bare number is kbit/s (what `--bitrate` and
/// `video.bitrate_kbps` have always meant); `k`/`kbit`/`kbps` are kbit/s, `m`/`mbit`/`mbps`
/// Mbit/s and `g`/`gbit`/`gbps` Gbit/s (decimal: `10M` = 10000). Units are case-insensitive;
/// fractions round to the nearest kbit/s (`2.5M` = 2500).
pub fn parse_bitrate(s: &str) -> Result<u32, UnitError> {
    let bad = || UnitError(format!("{s:?} is not a bitrate; expected {BITRATE_FORMS}"));
    let (v, unit) = number_and_unit(s).ok_or_else(bad)?;
    let kbps = if unit.is_empty() {
        v.round()
    } else {
        (parse_rate_bps(s).map_err(|_| bad())? as f64 / 1e3).round()
    };
    if kbps > u32::MAX as f64 {
        return Err(UnitError(format!("{s:?} is more than {} kbit/s", u32::MAX)));
    }
    Ok(kbps as u32)
}

/// A duration. A bare number is seconds (what `--duration` has always meant); units `us`,
/// `ms`, `s`, `m`/`min` (minutes) and `h`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    duration(s, true)
}

/// A duration whose unit is required (a bare `0` aside): where a bare number would be read in
/// different units by different people (the impairment relay's delays and windows).
pub fn parse_duration_with_unit(s: &str) -> Result<Duration, UnitError> {
    duration(s, false)
}

fn duration(s: &str, bare_is_seconds: bool) -> Result<Duration, UnitError> {
    let bad = || {
        UnitError(format!(
            "{s:?} is not a duration; expected {DURATION_FORMS}"
        ))
    };
    let (v, unit) = number_and_unit(s).ok_or_else(bad)?;
    let seconds = match unit.to_ascii_lowercase().as_str() {
        "us" | "µs" | "usec" => v / 1e6,
        "ms" | "msec" => v / 1e3,
        "s" | "sec" => v,
        "" if bare_is_seconds || v == 0.0 => v,
        "" => {
            return Err(UnitError(format!(
            "{s:?} has no unit: a duration with a unit: 500us, 5ms, 1.5s, 2min (0 needs no unit)"
        )))
        }
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| UnitError(format!("{s:?} is too long")))
}

/// A frame size: `WIDTHxHEIGHT` (`x` or `X`) or a name from [`NAMED_SIZES`]
/// (case-insensitive). Only the form is checked; the configuration checks the range.
pub fn parse_resolution(s: &str) -> Result<(u32, u32), UnitError> {
    let t = s.trim();
    if let Some(&(_, w, h)) = NAMED_SIZES
        .iter()
        .find(|(name, _, _)| name.eq_ignore_ascii_case(t))
    {
        return Ok((w, h));
    }
    let bad = || {
        UnitError(format!(
            "{s:?} is not a frame size; expected {RESOLUTION_FORMS}"
        ))
    };
    let (w, h) = t.split_once(['x', 'X']).ok_or_else(bad)?;
    let w = w.trim().parse::<u32>().map_err(|_| bad())?;
    let h = h.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((w, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitrates_in_every_form() {
        for (s, kbps) in [
            ("8000", 8000),
            ("10M", 10_000),
            ("10m", 10_000),
            ("10mbit", 10_000),
            ("10Mbps", 10_000),
            ("10000k", 10_000),
            ("10000kbit", 10_000),
            ("10000kbps", 10_000),
            ("2.5M", 2500),
            (" 1G ", 1_000_000),
            ("0", 0),
        ] {
            assert_eq!(parse_bitrate(s), Ok(kbps), "{s}");
        }
    }

    #[test]
    fn bad_bitrates_name_the_forms() {
        for s in ["fast", "", "10 furlongs", "-5", "10Mb/s", "NaN"] {
            let e = parse_bitrate(s).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{s:?} is not a bitrate; expected kbit/s"))
                    && e.contains("10M"),
                "{e}"
            );
        }
        let e = parse_bitrate("99999999G").unwrap_err().to_string();
        assert!(e.contains("is more than 4294967295 kbit/s"), "{e}");
    }

    #[test]
    fn durations_in_every_form() {
        for (s, d) in [
            ("5s", Duration::from_secs(5)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("2min", Duration::from_secs(120)),
            ("10", Duration::from_secs(10)),
            ("2.5", Duration::from_millis(2500)),
            ("250us", Duration::from_micros(250)),
            ("1h", Duration::from_secs(3600)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
    }

    #[test]
    fn bad_durations_name_the_forms() {
        for s in ["soon", "5 parsecs", "-1s", ""] {
            let e = parse_duration(s).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{s:?} is not a duration; expected seconds"))
                    && e.contains("500ms"),
                "{e}"
            );
        }
        let e = parse_duration("1e300").unwrap_err().to_string();
        assert!(e.contains("not a duration"), "{e}");
    }

    #[test]
    fn resolutions_by_size_and_name() {
        assert_eq!(parse_resolution("1280x720"), Ok((1280, 720)));
        assert_eq!(parse_resolution("1920X1080"), Ok((1920, 1080)));
        assert_eq!(parse_resolution(" 640 x 360 "), Ok((640, 360)));
        assert_eq!(parse_resolution("360p"), Ok((640, 360)));
        assert_eq!(parse_resolution("720p"), Ok((1280, 720)));
        assert_eq!(parse_resolution("1080P"), Ok((1920, 1080)));
        assert_eq!(parse_resolution("4k"), Ok((3840, 2160)));
        assert_eq!(parse_resolution("4K"), parse_resolution("2160p"));
        // The range is the configuration's business.
        assert_eq!(parse_resolution("12x7"), Ok((12, 7)));
        for (name, w, h) in NAMED_SIZES {
            assert!(
                RESOLUTION_FORMS.contains(name),
                "{name} missing from the forms"
            );
            assert!(w % 2 == 0 && h % 2 == 0, "{name} is odd");
        }
    }

    #[test]
    fn bad_resolutions_name_the_forms() {
        for s in ["big", "1280", "1280x", "x720", "axb", "720i"] {
            let e = parse_resolution(s).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{s:?} is not a frame size; expected WIDTHxHEIGHT"))
                    && e.contains("360p")
                    && e.contains("4k"),
                "{e}"
            );
        }
    }
}
