//! `[vr]`: the VR display path. On the client: the stream is side-by-side stereo, each eye
//! pre-distorted for the headset's lenses by the GPU presenter (`lens`: a profile file, the
//! built-in generic one by default) and late-warped to the newest head pose (`late_warp`).

use std::path::Path;

use serde::{Deserialize, Serialize};
use untether_media::lens::LensProfile;

use super::{invalid, ConfigError};

/// `[vr]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VrToml {
    /// VR mode (`--vr`).
    pub enabled: bool,
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
            lens: String::new(),
            late_warp: true,
        }
    }
}

impl VrToml {
    /// The lens profile: the file `lens` names (read and checked), or the built-in one. The
    /// error names `vr.lens` and the profile's own key.
    pub fn lens_profile(&self) -> Result<LensProfile, ConfigError> {
        if self.lens.trim().is_empty() {
            return Ok(LensProfile::generic());
        }
        LensProfile::load(Path::new(self.lens.trim()))
            .map_err(|e| invalid("vr.lens", e.to_string()))
    }

    /// Checks the lens profile (when one is named) whether or not VR is on: a bad file is an
    /// error before anything starts, not when VR is first used.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.lens_profile().map(|_| ())
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
