//! Lens profiles: the per-eye radial pre-distortion (and chromatic-aberration correction) the
//! GPU presenter applies to a side-by-side stereo stream, read from a small TOML file
//! (`docs/lens/generic.toml` is the one built in).
//!
//! The model is the classic radial polynomial of the early PC headsets (Oculus's "HmdWarp"):
//! a point of an eye's viewport at radius `r` from the lens centre shows the undistorted eye
//! picture at radius `r·(1 + k1·r² + k2·r⁴ + …)`, normalised so that `r = fit` reaches the
//! picture's horizontal edge, with each colour channel's radius scaled by its `chromatic`
//! factor. The fragment shader (`present_gl.rs`) does the same arithmetic as
//! [`LensProfile::distort`]; the tests here and the screenshot test hold them to it.

use std::path::Path;

use serde::Deserialize;

use crate::warp::Vec2;

/// The built-in profile (`docs/lens/generic.toml`).
pub const GENERIC_PROFILE: &str = include_str!("../../../docs/lens/generic.toml");

/// The most coefficients a profile may have (the shader's `vec4`).
pub const MAX_COEFFICIENTS: usize = 4;

/// Which eye: the left half of a side-by-side picture, or the right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eye {
    Left,
    Right,
}

/// A lens profile, validated.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LensProfile {
    /// What the profile is for (shown in the log).
    pub name: String,
    /// k1, k2, …: 1 to [`MAX_COEFFICIENTS`].
    pub k: Vec<f32>,
    /// Radius scale of the red, green and blue channels.
    pub chromatic: [f32; 3],
    /// The lens centre in the left eye's viewport (0..1 from the left and top edges); the
    /// right eye's is mirrored.
    pub center: [f32; 2],
    /// The radius, in half-widths of the eye's viewport, that shows the picture's horizontal
    /// edge.
    pub fit: f32,
}

/// A profile that cannot be used: where it came from, the key, and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("lens profile {origin}: {key}: {message}")]
pub struct LensError {
    pub origin: String,
    /// The offending key (`k`, `chromatic`, …), or `file` when it cannot be read or parsed.
    pub key: String,
    pub message: String,
}

/// The farthest radius the validation checks the mapping over: the corner of an eye viewport
/// up to twice as high as wide, with the largest chromatic scale.
const CHECK_RADIUS: f32 = 2.5;

impl LensProfile {
    /// The built-in generic profile.
    pub fn generic() -> LensProfile {
        match LensProfile::parse(GENERIC_PROFILE, "(built in)") {
            Ok(p) => p,
            // The built-in file is checked by a unit test; never reached.
            Err(e) => panic!("{e}"),
        }
    }

    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<LensProfile, LensError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| LensError {
            origin: origin.clone(),
            key: "file".into(),
            message: format!("cannot read it: {e}"),
        })?;
        LensProfile::parse(&text, &origin)
    }

    /// Parses and validates a profile; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<LensProfile, LensError> {
        let p: LensProfile = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim_end().to_string();
            // serde names an unknown or missing key in its message; say which keys exist.
            LensError {
                origin: origin.to_string(),
                key: "file".into(),
                message: format!(
                    "{msg} (a profile has exactly the keys name, k, chromatic, center, fit: \
                     see docs/lens/generic.toml)"
                ),
            }
        })?;
        p.validate(origin)?;
        Ok(p)
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self, origin: &str) -> Result<(), LensError> {
        let err = |key: &str, message: String| LensError {
            origin: origin.to_string(),
            key: key.to_string(),
            message,
        };
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(err("name", "must be 1 to 64 bytes".into()));
        }
        if self.k.is_empty() || self.k.len() > MAX_COEFFICIENTS {
            return Err(err(
                "k",
                format!(
                    "{} coefficients; a profile has 1 to {MAX_COEFFICIENTS} (k1, k2, …)",
                    self.k.len()
                ),
            ));
        }
        for (i, k) in self.k.iter().enumerate() {
            if !(k.is_finite() && (-1.0..=1.0).contains(k)) {
                return Err(err(
                    "k",
                    format!("k{} = {k} is out of range -1.0..=1.0", i + 1),
                ));
            }
        }
        for (c, s) in ["red", "green", "blue"].iter().zip(self.chromatic) {
            if !(s.is_finite() && (0.9..=1.1).contains(&s)) {
                return Err(err(
                    "chromatic",
                    format!("the {c} scale {s} is out of range 0.9..=1.1"),
                ));
            }
        }
        for (axis, v) in ["x", "y"].iter().zip(self.center) {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(err(
                    "center",
                    format!("{axis} = {v} is out of range 0.0..=1.0 (a point of the left eye's viewport)"),
                ));
            }
        }
        if !(self.fit.is_finite() && (0.25..=3.0).contains(&self.fit)) {
            return Err(err(
                "fit",
                format!("{} is out of range 0.25..=3.0", self.fit),
            ));
        }
        // r·f(r²) must grow with r, or the picture folds back on itself.
        let mut last = 0.0f32;
        for i in 1..=250 {
            let r = CHECK_RADIUS * i as f32 / 250.0;
            let g = r * self.radial(r * r);
            if g <= last {
                return Err(err(
                    "k",
                    format!(
                        "the distortion folds back at radius {r:.2} (r·(1 + k1·r² + …) stops \
                         growing): use smaller negative coefficients"
                    ),
                ));
            }
            last = g;
        }
        Ok(())
    }

    /// 1 + k1·r² + k2·r⁴ + … for `r2` = r².
    pub fn radial(&self, r2: f32) -> f32 {
        let mut f = 1.0;
        let mut p = 1.0;
        for k in &self.k {
            p *= r2;
            f += k * p;
        }
        f
    }

    /// The coefficients as the shader's `vec4` (zeros after the last).
    pub fn k4(&self) -> [f32; 4] {
        let mut k = [0.0; 4];
        for (d, s) in k.iter_mut().zip(&self.k) {
            *d = *s;
        }
        k
    }

    /// 1 / (fit · f(fit²)): the scale that puts radius `fit` on the picture's edge.
    pub fn fit_scale(&self) -> f32 {
        1.0 / (self.fit * self.radial(self.fit * self.fit))
    }

    /// The lens centre in `eye`'s viewport.
    pub fn center_of(&self, eye: Eye) -> Vec2 {
        match eye {
            Eye::Left => Vec2::new(self.center[0], self.center[1]),
            Eye::Right => Vec2::new(1.0 - self.center[0], self.center[1]),
        }
    }

    /// The point of the undistorted eye picture (uv, 0..1 inside it; may be outside) that the
    /// point `uv` of `eye`'s viewport shows in colour channel `channel` (0 red, 1 green,
    /// 2 blue). `viewport_aspect` and `picture_aspect` are the eye viewport's and the eye
    /// picture's height / width: the distortion is round on screen, and the picture keeps its
    /// proportions.
    pub fn distort(
        &self,
        eye: Eye,
        uv: Vec2,
        viewport_aspect: f32,
        picture_aspect: f32,
        channel: usize,
    ) -> Vec2 {
        let c = self.center_of(eye);
        let q = Vec2::new((uv.x - c.x) * 2.0, (uv.y - c.y) * 2.0 * viewport_aspect)
            * self.chromatic[channel.min(2)];
        let p = q * self.radial(q.length_squared()) * self.fit_scale();
        Vec2::new(0.5 + 0.5 * p.x, 0.5 + 0.5 * p.y / picture_aspect)
    }

    /// Where the centre of the eye picture appears in `eye`'s viewport (uv): the lens centre.
    pub fn picture_centre_on_screen(&self, eye: Eye) -> Vec2 {
        self.center_of(eye)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_profile_is_valid() {
        let p = LensProfile::generic();
        assert_eq!(p.name, "generic");
        assert_eq!(p.k4(), [0.22, 0.24, 0.0, 0.0]);
    }

    #[test]
    fn the_lens_centre_shows_the_picture_centre_and_the_fit_radius_its_edge() {
        let p = LensProfile::generic();
        let aspect = 720.0 / 640.0;
        for eye in [Eye::Left, Eye::Right] {
            let c = p.center_of(eye);
            let at = p.distort(eye, c, aspect, aspect, 1);
            assert!((at - Vec2::new(0.5, 0.5)).length() < 1e-6);
            // r = fit = 1 half-width to the right of the centre: the picture's right edge.
            let edge = p.distort(eye, c + Vec2::new(0.5, 0.0), aspect, aspect, 1);
            assert!((edge.x - 1.0).abs() < 1e-5, "{edge}");
        }
    }

    #[test]
    fn barrel_distortion_bends_straight_lines_and_blackens_the_corners() {
        let p = LensProfile::generic();
        let aspect = 1.0;
        // A point halfway out on the screen's horizontal axis samples closer to the centre
        // than halfway out in the picture (barrel): the picture is compressed at the edges.
        let half = p.distort(Eye::Left, Vec2::new(0.75, 0.5), aspect, aspect, 1);
        assert!(half.x < 0.75, "{half}");
        // A screen row at the top samples rows further from the centre at its ends than at
        // its middle: a straight picture row shows as a curve.
        let mid = p.distort(Eye::Left, Vec2::new(0.5, 0.2), aspect, aspect, 1);
        let end = p.distort(Eye::Left, Vec2::new(0.9, 0.2), aspect, aspect, 1);
        assert!(end.y < mid.y - 0.02, "{mid} {end}");
        // The viewport's corner samples outside the picture: black.
        let corner = p.distort(Eye::Left, Vec2::new(0.0, 0.0), aspect, aspect, 1);
        assert!(corner.x < 0.0 && corner.y < 0.0, "{corner}");
        // Blue is sampled further out than red.
        let red = p.distort(Eye::Left, Vec2::new(0.9, 0.5), aspect, aspect, 0);
        let blue = p.distort(Eye::Left, Vec2::new(0.9, 0.5), aspect, aspect, 2);
        assert!(blue.x > red.x);
    }

    #[test]
    fn the_right_lens_is_mirrored() {
        let mut p = LensProfile::generic();
        p.center = [0.45, 0.5];
        assert_eq!(p.center_of(Eye::Right), Vec2::new(0.55, 0.5));
        let l = p.distort(Eye::Left, Vec2::new(0.3, 0.4), 1.0, 1.0, 1);
        let r = p.distort(Eye::Right, Vec2::new(0.7, 0.4), 1.0, 1.0, 1);
        assert!((l.x - (1.0 - r.x)).abs() < 1e-6 && (l.y - r.y).abs() < 1e-6);
    }

    #[test]
    fn bad_profiles_name_the_key() {
        let base = "name = \"x\"\nk = [0.2]\nchromatic = [1.0, 1.0, 1.0]\ncenter = [0.5, 0.5]\nfit = 1.0\n";
        assert!(LensProfile::parse(base, "t.toml").is_ok());
        let bad = |from: &str, to: &str| {
            LensProfile::parse(&base.replace(from, to), "t.toml").unwrap_err()
        };
        let e = bad("k = [0.2]", "k = [0.2, 0.1, 0.1, 0.1, 0.1]");
        assert_eq!(e.key, "k");
        assert!(
            e.to_string()
                .starts_with("lens profile t.toml: k: 5 coefficients"),
            "{e}"
        );
        assert_eq!(bad("k = [0.2]", "k = []").key, "k");
        assert_eq!(bad("k = [0.2]", "k = [2.0]").key, "k");
        let fold = bad("k = [0.2]", "k = [-0.5]");
        assert!(fold.message.contains("folds back"), "{fold}");
        assert_eq!(bad("[1.0, 1.0, 1.0]", "[1.0, 1.5, 1.0]").key, "chromatic");
        assert_eq!(
            bad("center = [0.5, 0.5]", "center = [0.5, 1.5]").key,
            "center"
        );
        assert_eq!(bad("fit = 1.0", "fit = 0.0").key, "fit");
        assert_eq!(bad("name = \"x\"", "name = \"\"").key, "name");
        let unknown = bad("fit = 1.0", "fit = 1.0\nk3 = 0.1");
        assert_eq!(unknown.key, "file");
        assert!(unknown.message.contains("k3"), "{unknown}");
        let missing = bad("fit = 1.0\n", "");
        assert!(missing.message.contains("fit"), "{missing}");
        let e = LensProfile::load(Path::new("/nonexistent/lens.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/lens.toml: file: cannot read it"),
            "{e}"
        );
    }
}
