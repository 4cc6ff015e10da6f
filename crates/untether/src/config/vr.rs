//! `[vr]`: VR on both sides. Host: the scene's two eye views side by side, their separation
//! and field of view. Client: the head pose source, and the display path: the GPU presenter
//! pre-distorts each eye for the headset's lenses (`lens`: a profile file, the built-in generic
//! one by default) and late-warps it to the newest head pose (`late_warp`).

#[allow(unused_imports)]
use super::*;
use untether_media::lens::LensProfile;

/// `[vr]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VrToml {
    /// VR mode (`--vr`). Host: the test scene renders two eye views side by side from the
    /// client's head pose, with pose markers. Client: the stream is side-by-side stereo, shown
    /// with lens distortion and late warp, and pose-to-photon is measured.
    pub enabled: bool,
    /// Host: eye separation (interpupillary distance), millimetres.
    pub ipd_mm: f32,
    /// Each eye's horizontal field of view, degrees: the host renders with it, the client's
    /// late warp and pose-to-photon reading assume it (both sides must agree).
    pub fov_deg: f32,
    /// Client: where head poses come from: `auto` (`mouse` with a window, none headless),
    /// `mouse`, `synthetic[:sweep|turn|nod|still]`, `track:FILE`, `imu[:PATH]`, `none`.
    pub pose: String,
    /// Client: head poses per second sent to the host (the pose source's rate).
    #[serde(deserialize_with = "limits::de_pose_rate_hz")]
    pub pose_rate_hz: u32,
    /// Client: the lens profile file (TOML, docs/lens/generic.toml); empty: the built-in
    /// generic profile (`--lens FILE`).
    pub lens: String,
    /// Client: re-project each picture to the newest head orientation at present time
    /// (rotational time-warp) before the lens distortion (`--late-warp on|off`).
    pub late_warp: bool,
}

impl Default for VrToml {
    fn default() -> Self {
        VrToml {
            enabled: false,
            ipd_mm: 64.0,
            fov_deg: 90.0,
            pose: "auto".into(),
            pose_rate_hz: 500,
            lens: String::new(),
            late_warp: true,
        }
    }
}

/// Where the client's head poses come from (`vr.pose`, `--pose`).
#[derive(Clone, Debug, PartialEq)]
pub enum PoseSpec {
    /// Mouse-look in a window; nothing headless.
    Auto,
    None,
    /// Mouse motion in the client window turns the head.
    Mouse,
    /// A generated head-motion track of this kind.
    Synthetic(String),
    /// A head-motion track file (docs/POSE.md).
    Track(std::path::PathBuf),
    /// A Linux IMU (IIO or evdev) fused into an orientation; None: the first one found.
    Imu(Option<std::path::PathBuf>),
}

/// The kinds of generated head-motion tracks.
pub const TRACK_KINDS: [&str; 4] = ["sweep", "turn", "nod", "still"];

/// A `vr.pose` / `--pose` value that names no pose source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoseSpecError {
    #[error("{spec:?}: unknown track kind {kind:?} (expected one of {})", TRACK_KINDS.join(", "))]
    UnknownTrackKind { spec: String, kind: String },
    #[error(
        "{0:?}: expected auto, mouse, synthetic[:sweep|turn|nod|still], track:FILE, imu[:PATH] \
         or none"
    )]
    Unknown(String),
}

impl FromStr for PoseSpec {
    type Err = PoseSpecError;
    fn from_str(s: &str) -> Result<Self, PoseSpecError> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        Ok(match (name, arg) {
            ("auto", None) => PoseSpec::Auto,
            ("none", None) => PoseSpec::None,
            ("mouse", None) => PoseSpec::Mouse,
            ("synthetic", None) => PoseSpec::Synthetic("sweep".into()),
            ("synthetic", Some(k)) if TRACK_KINDS.contains(&k) => PoseSpec::Synthetic(k.into()),
            ("synthetic", Some(k)) => {
                return Err(PoseSpecError::UnknownTrackKind {
                    spec: s.to_string(),
                    kind: k.to_string(),
                })
            }
            ("track", Some(f)) if !f.is_empty() => PoseSpec::Track(f.into()),
            ("imu", None) => PoseSpec::Imu(None),
            ("imu", Some(p)) if !p.is_empty() => PoseSpec::Imu(Some(p.into())),
            _ => return Err(PoseSpecError::Unknown(s.to_string())),
        })
    }
}

impl VrToml {
    /// The pose source (`pose`).
    pub fn pose_spec(&self) -> Result<PoseSpec, ConfigError> {
        self.pose
            .parse()
            .map_err(|e: PoseSpecError| invalid("vr.pose", e.to_string()))
    }

    /// The lens profile: the file `lens` names (read and checked), or the built-in one. The
    /// error names `vr.lens` and the profile's own key.
    pub fn lens_profile(&self) -> Result<LensProfile, ConfigError> {
        if self.lens.trim().is_empty() {
            return Ok(LensProfile::generic());
        }
        LensProfile::load(std::path::Path::new(self.lens.trim()))
            .map_err(|e| invalid("vr.lens", e.to_string()))
    }

    /// Checks every key; the lens profile (when one is named) whether or not VR is on: a bad
    /// file is an error before anything starts, not when VR is first used.
    pub fn validate(&self) -> Result<(), ConfigError> {
        IPD_MM.check(self.ipd_mm)?;
        EYE_FOV_DEG.check(self.fov_deg)?;
        POSE_RATE_HZ.check(self.pose_rate_hz)?;
        self.pose_spec()?;
        self.lens_profile()?;
        Ok(())
    }
}

/// `on`/`off` (also `true`/`false`) for `--late-warp`.
pub fn parse_on_off(flag: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => Err(invalid(flag, format!("{other:?}: expected on or off"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pose_sources_parse_and_bad_ones_name_the_key() {
        assert_eq!("mouse".parse(), Ok(PoseSpec::Mouse));
        assert_eq!("synthetic".parse(), Ok(PoseSpec::Synthetic("sweep".into())));
        assert_eq!(
            "track:/tmp/t.csv".parse(),
            Ok(PoseSpec::Track("/tmp/t.csv".into()))
        );
        assert_eq!("imu".parse(), Ok(PoseSpec::Imu(None)));
        let v = VrToml {
            pose: "synthetic:spin".into(),
            ..Default::default()
        };
        let e = v.validate().unwrap_err().to_string();
        assert!(e.starts_with("vr.pose:") && e.contains("sweep"), "{e}");
        let v = VrToml {
            ipd_mm: 5.0,
            ..Default::default()
        };
        assert!(v
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("vr.ipd_mm"));
        let c = ConfigToml::parse("[vr]\nenabled = true\npose_rate_hz = 5000\n", "t").unwrap();
        let e = c.vr.validate().unwrap_err().to_string();
        assert!(e.contains("vr.pose_rate_hz"), "{e}");
    }
}
