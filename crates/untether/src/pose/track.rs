//! Head-motion tracks: a file format, a generator and a source that plays one back.
//!
//! **Format** (text, UTF-8; docs/POSE.md): a first line `# untether head-motion track v1`,
//! then one sample per line, `t_ms, qx, qy, qz, qw, px, py, pz` — time in milliseconds from the
//! track's start (strictly increasing), the orientation quaternion (x, y, z, w; normalised on
//! reading) and the position in metres, in OpenXR's convention (+y up, −z forward). Blank lines
//! and lines starting with `#` are skipped. Playback interpolates between samples (slerp and
//! linear) and loops.
//!
//! **Generated kinds** (`untether track --kind K`, `--pose synthetic:K`): `sweep` (yaw back and
//! forth ±40° at 40°/s, a little sway), `turn` (yaw at a constant 60°/s: monotonic, what the
//! pose-to-photon measurement uses), `nod` (pitch ±20° at 0.5 Hz), `still`.

use std::fmt::Write as _;
use std::path::Path;

use untether_proto::pose::{quat_normalize, quat_slerp};
use untether_proto::{Micros, Pose};

use super::{PoseError, PoseSource};

/// The first line of a track file.
pub const HEADER: &str = "# untether head-motion track v1";
/// Most samples a track file may hold (an hour at 1 kHz).
pub const MAX_SAMPLES: usize = 3_600_000;
/// Yaw rate of the `turn` track, degrees per second.
pub const TURN_DEG_PER_S: f32 = 60.0;

/// What is wrong with a track's text: the line, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TrackParseError {
    #[error("line 1: expected {HEADER:?}")]
    Header,
    #[error("line {line}: not 8 numbers: {text:?}")]
    NotNumbers { line: usize, text: String },
    #[error("line {0}: expected t_ms, qx, qy, qz, qw, px, py, pz (8 finite numbers)")]
    Fields(usize),
    #[error("line {0}: negative time")]
    NegativeTime(usize),
    #[error("line {line}: time {ms} ms is not after the previous")]
    NotAfter { line: usize, ms: f64 },
    #[error("line {line}: the quaternion's length is {norm}, not 1")]
    Quaternion { line: usize, norm: f32 },
    #[error("more than {MAX_SAMPLES} samples")]
    TooLong,
    #[error("no samples")]
    Empty,
}

/// Why a track cannot be read or generated.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    #[error("cannot read head-motion track {}: {source}", .path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("head-motion track {}: {source}", .path.display())]
    Parse {
        path: std::path::PathBuf,
        #[source]
        source: TrackParseError,
    },
    #[error("a track of {seconds} s at {rate_hz} Hz: expected 0.01–3600 s at 1–10000 Hz")]
    Length { seconds: f64, rate_hz: u32 },
    #[error(
        "unknown track kind {0:?} (expected one of {kinds})",
        kinds = crate::config::TRACK_KINDS.join(", ")
    )]
    UnknownKind(String),
}

/// A head-motion track: samples (time in µs from the start, pose), times increasing.
#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    pub samples: Vec<(Micros, Pose)>,
}

impl Track {
    /// Reads a track file; errors name the file and the line.
    pub fn load(path: &Path) -> Result<Track, TrackError> {
        let text = std::fs::read_to_string(path).map_err(|source| TrackError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Track::parse(&text).map_err(|source| TrackError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parses a track's text.
    pub fn parse(text: &str) -> Result<Track, TrackParseError> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l.trim() == HEADER => {}
            _ => return Err(TrackParseError::Header),
        }
        let mut samples: Vec<(Micros, Pose)> = Vec::new();
        for (i, line) in lines {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let v: Vec<f64> = line
                .split(',')
                .map(|f| f.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| TrackParseError::NotNumbers {
                    line: n,
                    text: line.to_string(),
                })?;
            if v.len() != 8 || v.iter().any(|x| !x.is_finite()) {
                return Err(TrackParseError::Fields(n));
            }
            if v[0] < 0.0 {
                return Err(TrackParseError::NegativeTime(n));
            }
            let t = (v[0] * 1000.0).round() as Micros;
            if samples.last().is_some_and(|(last, _)| *last >= t) {
                return Err(TrackParseError::NotAfter { line: n, ms: v[0] });
            }
            let q = [v[1] as f32, v[2] as f32, v[3] as f32, v[4] as f32];
            let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            if !(0.5..=2.0).contains(&norm) {
                return Err(TrackParseError::Quaternion { line: n, norm });
            }
            if samples.len() >= MAX_SAMPLES {
                return Err(TrackParseError::TooLong);
            }
            samples.push((
                t,
                Pose {
                    orientation: quat_normalize(q),
                    position: [v[5] as f32, v[6] as f32, v[7] as f32],
                },
            ));
        }
        if samples.is_empty() {
            return Err(TrackParseError::Empty);
        }
        Ok(Track { samples })
    }

    /// The file text of this track.
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(self.samples.len() * 64 + 64);
        out.push_str(HEADER);
        out.push('\n');
        out.push_str("# t_ms, qx, qy, qz, qw, px, py, pz\n");
        for (t, p) in &self.samples {
            let [qx, qy, qz, qw] = p.orientation;
            let [px, py, pz] = p.position;
            let _ = writeln!(
                out,
                "{:.3},{qx:.6},{qy:.6},{qz:.6},{qw:.6},{px:.4},{py:.4},{pz:.4}",
                *t as f64 / 1000.0
            );
        }
        out
    }

    /// A generated track of `kind` ([`crate::config::TRACK_KINDS`]), `seconds` long, sampled
    /// at `rate_hz`.
    pub fn generate(kind: &str, seconds: f64, rate_hz: u32) -> Result<Track, TrackError> {
        if !(0.01..=3600.0).contains(&seconds) || !(1..=10_000).contains(&rate_hz) {
            return Err(TrackError::Length { seconds, rate_hz });
        }
        let n = (seconds * rate_hz as f64).round().max(2.0) as usize;
        let f: fn(f64) -> (f32, f32, [f32; 3]) = match kind {
            "sweep" => |t| {
                // A triangle wave: ±40° at 40°/s (4 s period), a little sway.
                let phase = (t / 4.0).fract();
                let tri = if phase < 0.5 {
                    4.0 * phase - 1.0
                } else {
                    3.0 - 4.0 * phase
                };
                let sway = (t * std::f64::consts::TAU * 0.3).sin() as f32 * 0.02;
                ((40.0 * tri) as f32, 0.0, [sway, 0.0, 0.0])
            },
            "turn" => |t| (((TURN_DEG_PER_S as f64 * t) % 360.0) as f32, 0.0, [0.0; 3]),
            "nod" => |t| {
                let p = (t * std::f64::consts::TAU * 0.5).sin() as f32 * 20.0;
                (0.0, p, [0.0; 3])
            },
            "still" => |_| (0.0, 0.0, [0.0; 3]),
            _ => return Err(TrackError::UnknownKind(kind.to_string())),
        };
        let samples = (0..n)
            .map(|i| {
                let t = i as f64 / rate_hz as f64;
                let (yaw, pitch, pos) = f(t);
                (
                    (t * 1e6).round() as Micros,
                    Pose::from_angles(yaw, pitch, 0.0, pos),
                )
            })
            .collect();
        Ok(Track { samples })
    }

    /// The track's length, µs (its last sample's time).
    pub fn duration_us(&self) -> Micros {
        self.samples.last().map_or(0, |s| s.0)
    }

    /// The pose at `t` µs from the start (interpolated; looped past the end).
    pub fn at(&self, t: Micros) -> Pose {
        let len = self.duration_us();
        let t = if len == 0 { 0 } else { t % (len + 1) };
        let i = self.samples.partition_point(|s| s.0 <= t);
        if i == 0 {
            return self.samples[0].1;
        }
        if i >= self.samples.len() {
            return self.samples[self.samples.len() - 1].1;
        }
        let ((t0, a), (t1, b)) = (self.samples[i - 1], self.samples[i]);
        let f = (t - t0) as f32 / (t1 - t0).max(1) as f32;
        let lerp = |x: f32, y: f32| x + (y - x) * f;
        Pose {
            orientation: quat_slerp(a.orientation, b.orientation, f),
            position: [
                lerp(a.position[0], b.position[0]),
                lerp(a.position[1], b.position[1]),
                lerp(a.position[2], b.position[2]),
            ],
        }
    }
}

/// Plays a track back from `start_us` (the client's clock), looping.
pub struct TrackSource {
    track: Track,
    start_us: Micros,
}

impl TrackSource {
    pub fn new(track: Track, start_us: Micros) -> TrackSource {
        TrackSource { track, start_us }
    }
}

impl PoseSource for TrackSource {
    fn name(&self) -> String {
        format!(
            "head-motion track ({} samples, {:.1} s)",
            self.track.samples.len(),
            self.track.duration_us() as f64 / 1e6
        )
    }
    fn sample(&mut self, now_us: Micros) -> Result<Option<Pose>, PoseError> {
        Ok(Some(self.track.at(now_us.saturating_sub(self.start_us))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tracks_round_trip_through_the_file_format() {
        for kind in crate::config::TRACK_KINDS {
            let t = Track::generate(kind, 2.0, 100).unwrap();
            let back = Track::parse(&t.to_text()).unwrap();
            assert_eq!(back.samples.len(), t.samples.len());
            for ((ta, a), (tb, b)) in t.samples.iter().zip(&back.samples) {
                assert_eq!(ta, tb);
                let d: f32 = a
                    .orientation
                    .iter()
                    .zip(b.orientation)
                    .map(|(x, y)| (x - y).abs())
                    .sum();
                assert!(d < 1e-5, "{a:?} {b:?}");
            }
        }
        assert!(Track::generate("spin", 1.0, 10).is_err());
    }

    #[test]
    fn turn_is_monotonic_and_sweep_turns_back() {
        let t = Track::generate("turn", 2.0, 1000).unwrap();
        let yaw = |us| t.at(us).angles_deg().0;
        assert!((yaw(500_000) - 30.0).abs() < 0.01);
        assert!((yaw(1_000_000) - 60.0).abs() < 0.01);
        // Interpolation between samples.
        assert!((yaw(500_500) - 30.03).abs() < 0.01);
        let s = Track::generate("sweep", 4.0, 1000).unwrap();
        let y = |us| s.at(us).angles_deg().0;
        assert!((y(0) + 40.0).abs() < 0.1 && (y(2_000_000) - 40.0).abs() < 0.1);
        assert!((y(3_000_000) - 0.0).abs() < 0.2);
    }

    #[test]
    fn bad_files_name_the_line() {
        let e = Track::parse("hello\n").unwrap_err();
        assert_eq!(e, TrackParseError::Header);
        assert_eq!(e.to_string(), format!("line 1: expected {HEADER:?}"));
        let e = Track::parse(&format!("{HEADER}\n0,0,0,0,1,0,0,0\n0,0,0,0,1,0,0,0\n")).unwrap_err();
        assert_eq!(e, TrackParseError::NotAfter { line: 3, ms: 0.0 });
        assert_eq!(e.to_string(), "line 3: time 0 ms is not after the previous");
        let e = Track::parse(&format!("{HEADER}\n0,0,0,0,0,0,0,0\n")).unwrap_err();
        assert_eq!(e.to_string(), "line 2: the quaternion's length is 0, not 1");
        let e = Track::parse(&format!("{HEADER}\n0,1,2\n")).unwrap_err();
        assert_eq!(e, TrackParseError::Fields(2));
        let e = Track::parse(&format!("{HEADER}\n0,x\n")).unwrap_err();
        assert_eq!(e.to_string(), r#"line 2: not 8 numbers: "0,x""#);
        let e = Track::parse(&format!("{HEADER}\n-1,0,0,0,1,0,0,0\n")).unwrap_err();
        assert_eq!(e.to_string(), "line 2: negative time");
        let e = Track::parse(&format!("{HEADER}\n# only comments\n")).unwrap_err();
        assert_eq!(e, TrackParseError::Empty);
        assert_eq!(e.to_string(), "no samples");
    }

    #[test]
    fn load_and_generate_errors_name_the_file_or_the_kind() {
        let dir = std::env::temp_dir().join(format!("untether-track-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.csv");
        std::fs::write(&bad, format!("{HEADER}\n")).unwrap();
        let e = Track::load(&bad).unwrap_err();
        assert!(
            matches!(
                e,
                TrackError::Parse {
                    source: TrackParseError::Empty,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("head-motion track {}: no samples", bad.display())
        );
        let missing = dir.join("missing.csv");
        let e = Track::load(&missing).unwrap_err();
        assert!(matches!(e, TrackError::Read { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "cannot read head-motion track {}: ",
                missing.display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let e = Track::generate("spin", 1.0, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unknown track kind "spin" (expected one of sweep, turn, nod, still)"#
        );
        let e = Track::generate("turn", 0.0, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a track of 0 s at 10 Hz: expected 0.01–3600 s at 1–10000 Hz"
        );
    }
}
