//! Head poses: what a pose source on the client samples, what the host renders a frame for, and
//! what a frame carries back so the client can correct it at display time (late warp) and
//! measure pose-to-photon.
//!
//! Conventions (OpenXR's): right-handed, metres, **+y up, −z forward, +x right**. An orientation
//! is a unit quaternion `(x, y, z, w)` that turns head-space vectors into world space. Yaw turns
//! about +y (positive: to the left, counter-clockwise seen from above), pitch about +x
//! (positive: up), roll about +z; `from_yaw_pitch_roll` applies roll, then pitch, then yaw.
//!
//! A [`PoseSample`] carries the time the client sampled it, in the **client's** clock
//! (microseconds of its monotonic clock). The host never interprets that time: it echoes it
//! with the frame it rendered for the pose ([`crate::wire::ControlFrame::FramePose`]), so the
//! client compares it with its own clock and no clock mapping is involved.

use crate::wire::{bad, Put, Reader, WireError};
use crate::Micros;

/// A head pose: orientation (unit quaternion x, y, z, w) and position (metres).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    pub orientation: [f32; 4],
    pub position: [f32; 3],
}

impl Default for Pose {
    fn default() -> Self {
        Pose::IDENTITY
    }
}

impl Pose {
    /// Looking down −z from the origin.
    pub const IDENTITY: Pose = Pose {
        orientation: [0.0, 0.0, 0.0, 1.0],
        position: [0.0; 3],
    };
    /// Encoded length: 7 × f32.
    pub const LEN: usize = 28;

    /// A pose from yaw, pitch and roll in degrees and a position.
    pub fn from_angles(yaw_deg: f32, pitch_deg: f32, roll_deg: f32, position: [f32; 3]) -> Pose {
        Pose {
            orientation: quat_from_yaw_pitch_roll(
                yaw_deg.to_radians(),
                pitch_deg.to_radians(),
                roll_deg.to_radians(),
            ),
            position,
        }
    }

    /// Yaw, pitch, roll in degrees (see the module's conventions).
    pub fn angles_deg(&self) -> (f32, f32, f32) {
        let (y, p, r) = quat_to_yaw_pitch_roll(self.orientation);
        (y.to_degrees(), p.to_degrees(), r.to_degrees())
    }

    /// Every component finite and the quaternion of (close to) unit length.
    pub fn is_valid(&self) -> bool {
        let finite = self
            .orientation
            .iter()
            .chain(self.position.iter())
            .all(|v| v.is_finite());
        let n = self.orientation.iter().map(|v| v * v).sum::<f32>();
        finite && (0.5..=2.0).contains(&n)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in self.orientation.iter().chain(self.position.iter()) {
            out.put_f32(*v);
        }
    }

    /// Parses a pose: finite numbers, a quaternion of roughly unit length (normalised here).
    pub fn parse(r: &mut Reader<'_>) -> Result<Pose, WireError> {
        let mut v = [0f32; 7];
        for x in v.iter_mut() {
            *x = r.f32()?;
        }
        let p = Pose {
            orientation: [v[0], v[1], v[2], v[3]],
            position: [v[4], v[5], v[6]],
        };
        if !p.is_valid() {
            return Err(bad("pose", "not finite, or not a unit quaternion"));
        }
        let n2 = p.orientation.iter().map(|v| v * v).sum::<f32>();
        if (n2 - 1.0).abs() > 1e-5 {
            return Ok(Pose {
                orientation: quat_normalize(p.orientation),
                ..p
            });
        }
        Ok(p)
    }
}

/// A pose and when the client sampled it (client clock, µs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoseSample {
    pub sample_us: Micros,
    pub pose: Pose,
}

impl PoseSample {
    /// Encoded length: sample time u64 and the pose.
    pub const LEN: usize = 8 + Pose::LEN;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.sample_us);
        self.pose.encode(out);
    }

    pub fn parse(r: &mut Reader<'_>) -> Result<PoseSample, WireError> {
        Ok(PoseSample {
            sample_us: r.u64()?,
            pose: Pose::parse(r)?,
        })
    }
}

/// The unit quaternion of yaw (about +y), pitch (about +x) and roll (about +z), radians:
/// q = q_yaw · q_pitch · q_roll.
pub fn quat_from_yaw_pitch_roll(yaw: f32, pitch: f32, roll: f32) -> [f32; 4] {
    let (sy, cy) = (yaw / 2.0).sin_cos();
    let (sp, cp) = (pitch / 2.0).sin_cos();
    let (sr, cr) = (roll / 2.0).sin_cos();
    let q_yaw = [0.0, sy, 0.0, cy];
    let q_pitch = [sp, 0.0, 0.0, cp];
    let q_roll = [0.0, 0.0, sr, cr];
    quat_mul(quat_mul(q_yaw, q_pitch), q_roll)
}

/// Yaw, pitch, roll (radians) of a unit quaternion, the inverse of
/// [`quat_from_yaw_pitch_roll`] (pitch in −90°..90°).
pub fn quat_to_yaw_pitch_roll(q: [f32; 4]) -> (f32, f32, f32) {
    let [x, y, z, w] = quat_normalize(q);
    // The rotation's forward (−z) and up (+y) axes in world space.
    let fwd = quat_rotate([x, y, z, w], [0.0, 0.0, -1.0]);
    let pitch = fwd[1].clamp(-1.0, 1.0).asin();
    let yaw = (-fwd[0]).atan2(-fwd[2]);
    // Roll: the angle of the rotated right axis out of the horizontal plane.
    let right = quat_rotate([x, y, z, w], [1.0, 0.0, 0.0]);
    let up = quat_rotate([x, y, z, w], [0.0, 1.0, 0.0]);
    let roll = right[1].atan2(up[1]);
    (yaw, pitch, roll)
}

/// Hamilton product a·b (apply b, then a).
pub fn quat_mul(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
    let [ax, ay, az, aw] = a;
    let [bx, by, bz, bw] = b;
    [
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ]
}

/// The conjugate (the inverse of a unit quaternion).
pub fn quat_conj(q: [f32; 4]) -> [f32; 4] {
    [-q[0], -q[1], -q[2], q[3]]
}

/// q scaled to unit length (the identity for a zero or non-finite quaternion).
pub fn quat_normalize(q: [f32; 4]) -> [f32; 4] {
    let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    if !n.is_finite() || n < 1e-12 {
        return [0.0, 0.0, 0.0, 1.0];
    }
    [q[0] / n, q[1] / n, q[2] / n, q[3] / n]
}

/// v rotated by the unit quaternion q.
pub fn quat_rotate(q: [f32; 4], v: [f32; 3]) -> [f32; 3] {
    let p = quat_mul(quat_mul(q, [v[0], v[1], v[2], 0.0]), quat_conj(q));
    [p[0], p[1], p[2]]
}

/// Spherical interpolation from a (t = 0) to b (t = 1), the short way round.
pub fn quat_slerp(a: [f32; 4], b: [f32; 4], t: f32) -> [f32; 4] {
    let mut b = b;
    let mut dot: f32 = a.iter().zip(b.iter()).map(|(x, y)| x * y).sum();
    if dot < 0.0 {
        b = [-b[0], -b[1], -b[2], -b[3]];
        dot = -dot;
    }
    if dot > 0.9995 {
        let l = [
            a[0] + (b[0] - a[0]) * t,
            a[1] + (b[1] - a[1]) * t,
            a[2] + (b[2] - a[2]) * t,
            a[3] + (b[3] - a[3]) * t,
        ];
        return quat_normalize(l);
    }
    let theta = dot.clamp(-1.0, 1.0).acos();
    let s = theta.sin();
    let (wa, wb) = (((1.0 - t) * theta).sin() / s, (t * theta).sin() / s);
    quat_normalize([
        a[0] * wa + b[0] * wb,
        a[1] * wa + b[1] * wb,
        a[2] * wa + b[2] * wb,
        a[3] * wa + b[3] * wb,
    ])
}

/// The angle between two orientations, radians (0..π).
pub fn quat_angle(a: [f32; 4], b: [f32; 4]) -> f32 {
    let dot: f32 = a.iter().zip(b.iter()).map(|(x, y)| x * y).sum();
    2.0 * dot.abs().clamp(0.0, 1.0).acos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn angles_round_trip_and_follow_the_conventions() {
        for &(y, p, r) in &[
            (0.0, 0.0, 0.0),
            (30.0, 0.0, 0.0),
            (-120.0, 20.0, 0.0),
            (170.0, -45.0, 10.0),
            (5.0, 80.0, -30.0),
        ] {
            let pose = Pose::from_angles(y, p, r, [0.0; 3]);
            let (y2, p2, r2) = pose.angles_deg();
            assert!(
                close(y, y2) && close(p, p2) && close(r, r2),
                "{y} {p} {r} → {y2} {p2} {r2}"
            );
        }
        // Yaw +90° turns forward (−z) to −x: to the left.
        let q = Pose::from_angles(90.0, 0.0, 0.0, [0.0; 3]).orientation;
        let f = quat_rotate(q, [0.0, 0.0, -1.0]);
        assert!(close(f[0], -1.0) && close(f[2], 0.0), "{f:?}");
        // Pitch +30° looks up.
        let q = Pose::from_angles(0.0, 30.0, 0.0, [0.0; 3]).orientation;
        assert!(quat_rotate(q, [0.0, 0.0, -1.0])[1] > 0.49);
    }

    #[test]
    fn slerp_and_angle() {
        let a = Pose::from_angles(0.0, 0.0, 0.0, [0.0; 3]).orientation;
        let b = Pose::from_angles(60.0, 0.0, 0.0, [0.0; 3]).orientation;
        let m = quat_slerp(a, b, 0.5);
        let (y, _, _) = quat_to_yaw_pitch_roll(m);
        assert!(close(y.to_degrees(), 30.0));
        assert!(close(quat_angle(a, b).to_degrees(), 60.0));
        assert!(close(quat_angle(b, [-b[0], -b[1], -b[2], -b[3]]), 0.0));
    }

    #[test]
    fn wire_refuses_nonsense_and_normalises() {
        let mut out = Vec::new();
        let s = PoseSample {
            sample_us: 7,
            pose: Pose {
                orientation: [0.0, 0.0, 0.0, 1.02],
                position: [1.0, 1.6, -2.0],
            },
        };
        s.encode(&mut out);
        assert_eq!(out.len(), PoseSample::LEN);
        let back = PoseSample::parse(&mut Reader::new(&out, "t")).unwrap();
        assert_eq!(back.pose.orientation, [0.0, 0.0, 0.0, 1.0]);
        assert_eq!(back.pose.position, s.pose.position);
        let bad_q = Pose {
            orientation: [0.0; 4],
            position: [0.0; 3],
        };
        let mut out = Vec::new();
        bad_q.encode(&mut out);
        assert!(Pose::parse(&mut Reader::new(&out, "t")).is_err());
        let nan = Pose {
            orientation: [0.0, 0.0, 0.0, 1.0],
            position: [f32::NAN, 0.0, 0.0],
        };
        let mut out = Vec::new();
        nan.encode(&mut out);
        assert!(Pose::parse(&mut Reader::new(&out, "t")).is_err());
    }
}
