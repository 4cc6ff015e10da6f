//! The values a state key takes ([`StateValue`]: pointer, poses, IMU, axes, sticks, haptics,
//! integers) and their wire encoding as the entries of a state packet.

use super::StateKey;
use crate::pose::{Pose, PoseSample};
use crate::wire::{bad, Put, Reader, WireError};
use crate::Micros;

/// A value of continuous state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StateValue {
    /// Absolute pointer position (window pixels).
    Pointer { x: i32, y: i32 },
    /// Orientation quaternion (x, y, z, w) and position in metres (no sample time: prefer
    /// [`StateValue::PoseSample`]).
    Pose {
        orientation: [f32; 4],
        position: [f32; 3],
    },
    /// Orientation as yaw, pitch, roll in degrees.
    Angles { yaw: f32, pitch: f32, roll: f32 },
    /// Accelerometer (m/s²) and gyroscope (rad/s).
    Imu { accel: [f32; 3], gyro: [f32; 3] },
    /// One axis, −1..1 (a trigger, a slider).
    Axis(f32),
    /// Two axes, −1..1 (a stick, a touchpad).
    Stick { x: f32, y: f32 },
    /// A head pose and when the client sampled it (client clock): what the host renders for
    /// and echoes with the frame ([`crate::pose`]).
    PoseSample(PoseSample),
    /// Rumble: the low- and high-frequency motors' strength, 0..1 (host → client).
    Haptic { low: f32, high: f32 },
    /// An application's integer (a score, a mode, an id).
    Int(i64),
}

mod kind {
    pub const POINTER: u8 = 1;
    pub const POSE: u8 = 2;
    pub const ANGLES: u8 = 3;
    pub const IMU: u8 = 4;
    pub const AXIS: u8 = 5;
    pub const STICK: u8 = 6;
    pub const POSE_SAMPLE: u8 = 7;
    pub const HAPTIC: u8 = 8;
    pub const INT: u8 = 9;
}

impl StateValue {
    /// Encoded length, without the key and kind.
    pub fn value_len(&self) -> usize {
        match self {
            StateValue::Pointer { .. } => 8,
            StateValue::Pose { .. } => 28,
            StateValue::Angles { .. } => 12,
            StateValue::Imu { .. } => 24,
            StateValue::Axis(_) => 4,
            StateValue::Stick { .. } => 8,
            StateValue::PoseSample(_) => PoseSample::LEN,
            StateValue::Haptic { .. } => 8,
            StateValue::Int(_) => 8,
        }
    }

    /// Encoded length of an entry: key u16, kind u8, value.
    pub fn entry_len(&self) -> usize {
        3 + self.value_len()
    }

    /// The pose this value describes (a head pose key), if it is one.
    pub fn pose(&self) -> Option<(Pose, Option<Micros>)> {
        match *self {
            StateValue::PoseSample(s) => Some((s.pose, Some(s.sample_us))),
            StateValue::Pose {
                orientation,
                position,
            } => Some((
                Pose {
                    orientation: crate::pose::quat_normalize(orientation),
                    position,
                },
                None,
            )),
            StateValue::Angles { yaw, pitch, roll } => {
                Some((Pose::from_angles(yaw, pitch, roll, [0.0; 3]), None))
            }
            _ => None,
        }
    }

    fn floats(out: &mut Vec<u8>, v: &[f32]) {
        for f in v {
            out.put_f32(*f);
        }
    }

    pub fn encode_entry(&self, key: StateKey, out: &mut Vec<u8>) {
        out.put_u16(key);
        match self {
            StateValue::Pointer { x, y } => {
                out.put_u8(kind::POINTER);
                out.put_i32(*x);
                out.put_i32(*y);
            }
            StateValue::Pose {
                orientation,
                position,
            } => {
                out.put_u8(kind::POSE);
                Self::floats(out, orientation);
                Self::floats(out, position);
            }
            StateValue::Angles { yaw, pitch, roll } => {
                out.put_u8(kind::ANGLES);
                Self::floats(out, &[*yaw, *pitch, *roll]);
            }
            StateValue::Imu { accel, gyro } => {
                out.put_u8(kind::IMU);
                Self::floats(out, accel);
                Self::floats(out, gyro);
            }
            StateValue::Axis(a) => {
                out.put_u8(kind::AXIS);
                out.put_f32(*a);
            }
            StateValue::Stick { x, y } => {
                out.put_u8(kind::STICK);
                Self::floats(out, &[*x, *y]);
            }
            StateValue::PoseSample(s) => {
                out.put_u8(kind::POSE_SAMPLE);
                s.encode(out);
            }
            StateValue::Haptic { low, high } => {
                out.put_u8(kind::HAPTIC);
                Self::floats(out, &[*low, *high]);
            }
            StateValue::Int(v) => {
                out.put_u8(kind::INT);
                out.put_u64(*v as u64);
            }
        }
    }

    pub fn parse_entry(r: &mut Reader<'_>) -> Result<(StateKey, StateValue), WireError> {
        let key = r.u16()?;
        let f = |r: &mut Reader<'_>| -> Result<f32, WireError> {
            let v = r.f32()?;
            if v.is_finite() {
                Ok(v)
            } else {
                Err(bad("state.value", "not a finite number"))
            }
        };
        let v = match r.u8()? {
            kind::POINTER => StateValue::Pointer {
                x: r.i32()?,
                y: r.i32()?,
            },
            kind::POSE => StateValue::Pose {
                orientation: [f(r)?, f(r)?, f(r)?, f(r)?],
                position: [f(r)?, f(r)?, f(r)?],
            },
            kind::ANGLES => StateValue::Angles {
                yaw: f(r)?,
                pitch: f(r)?,
                roll: f(r)?,
            },
            kind::IMU => StateValue::Imu {
                accel: [f(r)?, f(r)?, f(r)?],
                gyro: [f(r)?, f(r)?, f(r)?],
            },
            kind::AXIS => StateValue::Axis(f(r)?),
            kind::STICK => StateValue::Stick { x: f(r)?, y: f(r)? },
            kind::POSE_SAMPLE => StateValue::PoseSample(PoseSample::parse(r)?),
            kind::HAPTIC => StateValue::Haptic {
                low: f(r)?,
                high: f(r)?,
            },
            kind::INT => StateValue::Int(r.u64()? as i64),
            _ => return Err(bad("state.kind", "unknown state value kind")),
        };
        Ok((key, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_kinds_round_trip() {
        let values = [
            StateValue::PoseSample(crate::pose::PoseSample {
                sample_us: 123_456,
                pose: crate::pose::Pose::from_angles(30.0, -10.0, 0.0, [0.1, 1.7, -0.2]),
            }),
            StateValue::Haptic {
                low: 0.25,
                high: 1.0,
            },
            StateValue::Int(-42),
        ];
        for v in values {
            let mut out = Vec::new();
            v.encode_entry(9, &mut out);
            assert_eq!(out.len(), v.entry_len());
            let (k, back) = StateValue::parse_entry(&mut Reader::new(&out, "t")).unwrap();
            assert_eq!(k, 9);
            match (v, back) {
                (StateValue::PoseSample(a), StateValue::PoseSample(b)) => {
                    assert_eq!(a.sample_us, b.sample_us);
                    assert!(crate::pose::quat_angle(a.pose.orientation, b.pose.orientation) < 1e-3);
                }
                (a, b) => assert_eq!(a, b),
            }
        }
    }
}
