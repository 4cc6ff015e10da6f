//! Rigid poses (OpenXR's `XrPosef`: orientation then position, right-handed, +y up, −z
//! forward), and the head-pose predictor.

#![forbid(unsafe_code)]

use glam::{Quat, Vec3};
use openxr_sys as xr;
use untether_proto::PoseSample;

/// A rigid transform: `world = orientation · local + position`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rigid {
    pub orientation: Quat,
    pub position: Vec3,
}

impl Rigid {
    pub const IDENTITY: Rigid = Rigid {
        orientation: Quat::IDENTITY,
        position: Vec3::ZERO,
    };

    pub fn new(orientation: Quat, position: Vec3) -> Rigid {
        Rigid {
            orientation,
            position,
        }
    }

    pub fn translation(x: f32, y: f32, z: f32) -> Rigid {
        Rigid::new(Quat::IDENTITY, Vec3::new(x, y, z))
    }

    /// `self ∘ other`: other's frame expressed in self's parent.
    pub fn mul(&self, other: &Rigid) -> Rigid {
        Rigid {
            orientation: (self.orientation * other.orientation).normalize(),
            position: self.orientation * other.position + self.position,
        }
    }

    pub fn inverse(&self) -> Rigid {
        let inv = self.orientation.inverse();
        Rigid {
            orientation: inv,
            position: -(inv * self.position),
        }
    }

    /// From the application's pose; None when it is not finite or not a unit quaternion
    /// (OpenXR's `XR_ERROR_POSE_INVALID`).
    pub fn from_xr(p: &xr::Posef) -> Option<Rigid> {
        let o = p.orientation;
        let q = Quat::from_xyzw(o.x, o.y, o.z, o.w);
        let v = Vec3::new(p.position.x, p.position.y, p.position.z);
        if !q.is_finite() || !v.is_finite() || (q.length() - 1.0).abs() > 0.01 {
            return None;
        }
        Some(Rigid::new(q.normalize(), v))
    }

    pub fn to_xr(self) -> xr::Posef {
        xr::Posef {
            orientation: xr::Quaternionf {
                x: self.orientation.x,
                y: self.orientation.y,
                z: self.orientation.z,
                w: self.orientation.w,
            },
            position: xr::Vector3f {
                x: self.position.x,
                y: self.position.y,
                z: self.position.z,
            },
        }
    }

    /// The client's head pose (head → world, OpenXR's axes: docs/POSE.md).
    pub fn from_sample(s: &PoseSample) -> Rigid {
        let [x, y, z, w] = s.pose.orientation;
        let [px, py, pz] = s.pose.position;
        Rigid::new(
            Quat::from_xyzw(x, y, z, w).normalize(),
            Vec3::new(px, py, pz),
        )
    }

    pub fn to_pose(self) -> untether_proto::Pose {
        let q = self.orientation;
        untether_proto::Pose {
            orientation: [q.x, q.y, q.z, q.w],
            position: self.position.to_array(),
        }
    }
}

/// The longest the predictor extrapolates: beyond it a late sample is held, not flung.
pub const MAX_PREDICTION_US: i64 = 50_000;

/// Predicts the head pose at a display time from the client's newest samples: constant angular
/// and linear velocity, measured between the two newest distinct samples on the client's
/// clock, extrapolated from the moment the runtime first saw the newest sample (runtime
/// clock) to the display time, at most [`MAX_PREDICTION_US`]. The client's clock is never
/// mapped onto the runtime's: only its differences are used.
#[derive(Clone, Debug, Default)]
pub struct Predictor {
    newest: Option<(PoseSample, i64)>,
    previous: Option<PoseSample>,
}

impl Predictor {
    /// Feeds the host's newest sample, seen at `now_us` (runtime clock).
    pub fn observe(&mut self, sample: PoseSample, now_us: i64) {
        match &self.newest {
            Some((n, _)) if n.sample_us == sample.sample_us && n.pose == sample.pose => {}
            _ => {
                self.previous = self.newest.take().map(|(n, _)| n);
                self.newest = Some((sample, now_us));
            }
        }
    }

    /// The newest sample, as received.
    pub fn newest(&self) -> Option<PoseSample> {
        self.newest.map(|(s, _)| s)
    }

    /// The head pose predicted for `at_us` (runtime clock); identity before any sample.
    pub fn predict(&self, at_us: i64) -> Rigid {
        let Some((newest, seen_us)) = self.newest else {
            return Rigid::IDENTITY;
        };
        let head = Rigid::from_sample(&newest);
        let Some(prev) = self.previous else {
            return head;
        };
        let span_us = newest.sample_us as i64 - prev.sample_us as i64;
        if span_us <= 0 || newest.sample_us == 0 {
            return head;
        }
        let ahead_us = (at_us - seen_us).clamp(0, MAX_PREDICTION_US);
        let k = ahead_us as f32 / span_us as f32;
        let before = Rigid::from_sample(&prev);
        // The rotation from the previous sample to the newest, in world space, scaled.
        let delta = (head.orientation * before.orientation.inverse()).normalize();
        let (axis, angle) = delta.to_axis_angle();
        let angle = if angle > std::f32::consts::PI {
            angle - 2.0 * std::f32::consts::PI
        } else {
            angle
        };
        let turn = Quat::from_axis_angle(axis, angle * k);
        Rigid::new(
            (turn * head.orientation).normalize(),
            head.position + (head.position - before.position) * k,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_proto::Pose;

    fn sample(yaw_deg: f32, t_us: u64) -> PoseSample {
        PoseSample {
            sample_us: t_us,
            pose: Pose::from_angles(yaw_deg, 0.0, 0.0, [0.0, 0.0, 0.0]),
        }
    }

    #[test]
    fn inverse_undoes_and_composition_is_ordered() {
        let a = Rigid::new(Quat::from_rotation_y(0.7), Vec3::new(1.0, 2.0, 3.0));
        let b = Rigid::new(Quat::from_rotation_x(-0.3), Vec3::new(0.0, 0.5, -1.0));
        let id = a.mul(&a.inverse());
        assert!(id.position.length() < 1e-5 && id.orientation.angle_between(Quat::IDENTITY) < 1e-4);
        let p = a.mul(&b).position;
        assert!((p - (a.orientation * b.position + a.position)).length() < 1e-5);
    }

    #[test]
    fn prediction_extrapolates_a_turn_and_caps_the_horizon() {
        let mut p = Predictor::default();
        p.observe(sample(0.0, 1_000_000), 0);
        p.observe(sample(1.0, 1_010_000), 5_000); // 100°/s
                                                  // 20 ms after the newest was seen: 2° further.
        let yaw = |r: Rigid| r.to_pose().angles_deg().0;
        assert!(
            (yaw(p.predict(25_000)) - 3.0).abs() < 0.05,
            "{}",
            yaw(p.predict(25_000))
        );
        // Capped at 50 ms: 5° further.
        assert!((yaw(p.predict(1_000_000)) - 6.0).abs() < 0.05);
        // Never backwards in time.
        assert!((yaw(p.predict(0)) - 1.0).abs() < 0.05);
        // A repeated sample does not reset the velocity.
        p.observe(sample(1.0, 1_010_000), 9_000);
        assert!((yaw(p.predict(25_000)) - 3.0).abs() < 0.05);
    }

    #[test]
    fn poses_that_are_not_unit_quaternions_are_refused() {
        let mut x = Rigid::IDENTITY.to_xr();
        assert!(Rigid::from_xr(&x).is_some());
        x.orientation.w = 2.0;
        assert!(Rigid::from_xr(&x).is_none());
        x.orientation.w = f32::NAN;
        assert!(Rigid::from_xr(&x).is_none());
    }
}
