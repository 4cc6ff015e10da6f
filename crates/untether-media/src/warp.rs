//! Late warp (rotational time-warp): re-projecting a decoded eye picture, rendered for one head
//! orientation, to the newest head orientation at the moment it is shown.
//!
//! Conventions (OpenGL's): head space has x to the right, y up and looks along −z; an
//! orientation is the rotation from head space to world space, as a unit quaternion. A picture
//! coordinate `uv` runs 0..1 across the eye's picture, `v` downwards. The rendered eye picture
//! is a pinhole projection with the symmetric field of view [`Fov`].
//!
//! For a point of the shown picture, the presenter takes the direction it shows in the *latest*
//! head space, turns it into the head space the frame was *rendered* for
//! (`rendered⁻¹ · latest`) and projects that onto the rendered picture: a homography per eye.
//! Only rotation is corrected (the picture is treated as infinitely far away): translation
//! would need depth. Directions that land outside the rendered picture (or behind it) show
//! black. The GPU presenter's fragment shader does the same arithmetic as
//! [`Warp::sample_uv`] (`present_gl.rs`, `video.frag`); the unit tests here pin it down.

pub use glam::{Mat3, Quat, Vec2, Vec3};

/// A symmetric field of view, full angles in radians.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fov {
    pub horizontal: f32,
    pub vertical: f32,
}

impl Fov {
    /// A field of view `horizontal` radians wide over a picture `width`×`height` pixels
    /// (square pixels: the vertical angle follows from the aspect).
    pub fn from_horizontal(horizontal: f32, width: u32, height: u32) -> Fov {
        let t = (horizontal * 0.5).tan() * height.max(1) as f32 / width.max(1) as f32;
        Fov {
            horizontal,
            vertical: 2.0 * t.atan(),
        }
    }

    /// tan(horizontal/2), tan(vertical/2).
    pub fn tan_half(&self) -> Vec2 {
        Vec2::new((self.horizontal * 0.5).tan(), (self.vertical * 0.5).tan())
    }

    /// Usable: both angles finite, in (0°, 179°].
    pub fn is_valid(&self) -> bool {
        let ok = |a: f32| a.is_finite() && a > 0.0 && a <= 179f32.to_radians();
        ok(self.horizontal) && ok(self.vertical)
    }
}

/// What the presenter needs to late-warp one picture: the head orientation the frame was
/// rendered for, the newest local head orientation, and the eye's field of view the frame was
/// rendered with. Orientations are head → world unit quaternions (see the module's
/// conventions); they need not be normalised exactly (they are normalised here).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Warp {
    pub rendered: Quat,
    pub latest: Quat,
    pub fov: Fov,
}

impl Warp {
    /// No head motion since the frame was rendered.
    pub fn identity(fov: Fov) -> Warp {
        Warp {
            rendered: Quat::IDENTITY,
            latest: Quat::IDENTITY,
            fov,
        }
    }

    /// The rotation taking a direction in the latest head space into the head space the frame
    /// was rendered for: `rendered⁻¹ · latest`. Identity when either quaternion is unusable
    /// (zero or not finite): a bad pose shows the picture unwarped rather than garbage.
    pub fn rotation(&self) -> Mat3 {
        let (r, l) = (self.rendered, self.latest);
        let usable = |q: Quat| q.is_finite() && q.length_squared() > 1e-12;
        if !usable(r) || !usable(l) {
            return Mat3::IDENTITY;
        }
        Mat3::from_quat(r.normalize().inverse() * l.normalize())
    }

    /// The point of the rendered eye picture that the point `uv` of the shown eye picture
    /// samples; None where it falls outside the rendered picture or behind the eye (shown
    /// black).
    pub fn sample_uv(&self, uv: Vec2) -> Option<Vec2> {
        sample_uv(self.rotation(), self.fov.tan_half(), uv)
    }
}

/// [`Warp::sample_uv`] with the rotation and tan(fov/2) precomputed (what the shader gets as
/// uniforms).
pub fn sample_uv(rotation: Mat3, tan_half: Vec2, uv: Vec2) -> Option<Vec2> {
    let d = Vec3::new(
        (2.0 * uv.x - 1.0) * tan_half.x,
        (1.0 - 2.0 * uv.y) * tan_half.y,
        -1.0,
    );
    let r = rotation * d;
    if r.z > -1e-6 {
        return None;
    }
    let px = r.x / -r.z / tan_half.x;
    let py = r.y / -r.z / tan_half.y;
    let out = Vec2::new(0.5 + 0.5 * px, 0.5 - 0.5 * py);
    (out.x >= 0.0 && out.x <= 1.0 && out.y >= 0.0 && out.y <= 1.0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fov() -> Fov {
        Fov::from_horizontal(90f32.to_radians(), 640, 720)
    }

    fn close(a: Vec2, b: Vec2) -> bool {
        (a - b).length() < 1e-4
    }

    #[test]
    fn identity_is_identity() {
        let w = Warp::identity(fov());
        for &(u, v) in &[(0.5, 0.5), (0.1, 0.9), (0.0, 0.0), (1.0, 1.0), (0.73, 0.21)] {
            let uv = Vec2::new(u, v);
            assert!(close(w.sample_uv(uv).unwrap(), uv), "{uv}");
        }
        // The same head orientation twice, whatever it is, is no warp either.
        let q = Quat::from_euler(glam::EulerRot::YXZ, 0.7, -0.2, 0.1);
        let w = Warp {
            rendered: q,
            latest: q,
            fov: fov(),
        };
        assert!(close(
            w.sample_uv(Vec2::new(0.3, 0.6)).unwrap(),
            Vec2::new(0.3, 0.6)
        ));
    }

    #[test]
    fn a_yaw_of_half_the_fov_moves_the_centre_to_the_edge() {
        let f = fov();
        // The head turned left (counter-clockwise seen from above, +y) by half the horizontal
        // field of view since the frame was rendered: what was straight ahead is now at the
        // right edge of the view.
        let w = Warp {
            rendered: Quat::IDENTITY,
            latest: Quat::from_rotation_y(f.horizontal / 2.0),
            fov: f,
        };
        let at_right_edge = w.sample_uv(Vec2::new(1.0, 0.5)).unwrap();
        assert!(close(at_right_edge, Vec2::new(0.5, 0.5)), "{at_right_edge}");
        // The left half of the view now looks at what the frame never rendered: black.
        assert!(w.sample_uv(Vec2::new(0.2, 0.5)).is_none());
        // Turning right instead moves it to the left edge.
        let w = Warp {
            latest: Quat::from_rotation_y(-f.horizontal / 2.0),
            ..w
        };
        assert!(close(
            w.sample_uv(Vec2::new(0.0, 0.5)).unwrap(),
            Vec2::new(0.5, 0.5)
        ));
    }

    #[test]
    fn a_pitch_of_half_the_vertical_fov_moves_the_centre_to_the_top_or_bottom() {
        let f = fov();
        // Head pitched up (+x): straight ahead is now at the bottom edge.
        let w = Warp {
            rendered: Quat::IDENTITY,
            latest: Quat::from_rotation_x(f.vertical / 2.0),
            fov: f,
        };
        assert!(close(
            w.sample_uv(Vec2::new(0.5, 1.0)).unwrap(),
            Vec2::new(0.5, 0.5)
        ));
    }

    #[test]
    fn only_the_relative_rotation_matters() {
        let f = fov();
        let base = Quat::from_euler(glam::EulerRot::YXZ, 1.1, 0.3, -0.4);
        let delta = Quat::from_rotation_y(0.2);
        let a = Warp {
            rendered: Quat::IDENTITY,
            latest: delta,
            fov: f,
        };
        let b = Warp {
            rendered: base,
            latest: base * delta,
            fov: f,
        };
        for &(u, v) in &[(0.5, 0.5), (0.8, 0.3), (0.65, 0.9)] {
            let uv = Vec2::new(u, v);
            match (a.sample_uv(uv), b.sample_uv(uv)) {
                (Some(x), Some(y)) => assert!(close(x, y), "{x} vs {y}"),
                (x, y) => assert_eq!(x.is_some(), y.is_some()),
            }
        }
    }

    #[test]
    fn a_bad_quaternion_warps_nothing_and_behind_the_eye_is_black() {
        let f = fov();
        let w = Warp {
            rendered: Quat::from_xyzw(0.0, 0.0, 0.0, 0.0),
            latest: Quat::from_rotation_y(0.3),
            fov: f,
        };
        assert_eq!(w.rotation(), Mat3::IDENTITY);
        let w = Warp {
            rendered: Quat::from_xyzw(f32::NAN, 0.0, 0.0, 1.0),
            ..w
        };
        assert_eq!(w.rotation(), Mat3::IDENTITY);
        // Turned around: everything is behind the rendered view.
        let w = Warp {
            rendered: Quat::IDENTITY,
            latest: Quat::from_rotation_y(std::f32::consts::PI),
            fov: f,
        };
        assert!(w.sample_uv(Vec2::new(0.5, 0.5)).is_none());
    }

    #[test]
    fn fov_from_horizontal_keeps_square_pixels() {
        let f = Fov::from_horizontal(90f32.to_radians(), 640, 720);
        let t = f.tan_half();
        assert!((t.y / t.x - 720.0 / 640.0).abs() < 1e-5);
        assert!(f.is_valid());
        assert!(!Fov {
            horizontal: 0.0,
            vertical: 1.0
        }
        .is_valid());
    }
}
