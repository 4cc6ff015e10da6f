//! Head pose sources on the client (`vr.pose`, `--pose`): a head-motion track (a file, or one
//! generated for tests and demos: [`track`]), a Linux IMU fused into an orientation with the
//! Madgwick filter of the `ahrs` crate ([`imu`]), and mouse-look ([`MouseLook`]), the fallback.
//! The client samples its source at `vr.pose_rate_hz` (up to 1 kHz) on its own thread and sends
//! each sample on the latest-wins state channel (`client::pose`).

pub mod imu;
pub mod track;

use std::sync::{Arc, Mutex};

use untether_proto::{Micros, Pose};

use crate::config::PoseSpec;

/// Why a pose source failed.
#[derive(Debug, thiserror::Error)]
pub enum PoseError {
    #[error(transparent)]
    Track(#[from] track::TrackError),
    #[error(transparent)]
    Imu(#[from] imu::ImuError),
}

/// Something that says where the head is.
pub trait PoseSource: Send {
    /// What it is, for the log.
    fn name(&self) -> String;
    /// The pose at `now_us` (the client's clock); Ok(None): nothing new yet.
    fn sample(&mut self, now_us: Micros) -> Result<Option<Pose>, PoseError>;
}

/// Mouse-look: the window's relative mouse motion turns the head (yaw, pitch), the position
/// stays at the origin. The presenter's window events feed it (through the network driver).
#[derive(Clone, Default)]
pub struct MouseLook {
    angles: Arc<Mutex<(f32, f32)>>,
}

/// Degrees of head turn per pixel of mouse motion.
pub const MOUSE_DEG_PER_PX: f32 = 0.15;

impl MouseLook {
    /// Adds a relative motion in pixels: right turns right, down looks down.
    pub fn feed(&self, dx: i32, dy: i32) {
        let mut a = self.angles.lock().unwrap_or_else(|p| p.into_inner());
        a.0 = (a.0 - dx as f32 * MOUSE_DEG_PER_PX).rem_euclid(360.0);
        a.1 = (a.1 - dy as f32 * MOUSE_DEG_PER_PX).clamp(-89.0, 89.0);
    }

    /// Yaw and pitch, degrees.
    pub fn angles(&self) -> (f32, f32) {
        *self.angles.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PoseSource for MouseLook {
    fn name(&self) -> String {
        "mouse-look".into()
    }
    fn sample(&mut self, _now_us: Micros) -> Result<Option<Pose>, PoseError> {
        let (yaw, pitch) = self.angles();
        Ok(Some(Pose::from_angles(yaw, pitch, 0.0, [0.0; 3])))
    }
}

/// Opens the source `spec` names. `window`: the client shows a window (`auto` is mouse-look
/// there, nothing headless). Ok(None): no pose source.
pub fn open(
    spec: &PoseSpec,
    window: bool,
    mouse: &MouseLook,
    start_us: Micros,
) -> Result<Option<Box<dyn PoseSource>>, PoseError> {
    Ok(match spec {
        PoseSpec::None => None,
        PoseSpec::Auto if !window => None,
        PoseSpec::Auto | PoseSpec::Mouse => Some(Box::new(mouse.clone())),
        PoseSpec::Synthetic(kind) => Some(Box::new(track::TrackSource::new(
            track::Track::generate(kind, 10.0, 1000)?,
            start_us,
        ))),
        PoseSpec::Track(path) => Some(Box::new(track::TrackSource::new(
            track::Track::load(path)?,
            start_us,
        ))),
        PoseSpec::Imu(path) => Some(Box::new(imu::ImuSource::open(path.as_deref())?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mouse_look_turns_and_clamps() {
        let m = MouseLook::default();
        m.feed(-100, 0);
        assert!((m.angles().0 - 15.0).abs() < 1e-3, "left turns left");
        m.feed(0, -10_000);
        assert_eq!(m.angles().1, 89.0);
        let mut src: Box<dyn PoseSource> = Box::new(m.clone());
        let p = src.sample(0).unwrap().unwrap();
        let (y, pi, _) = p.angles_deg();
        assert!(
            (y - 15.0).abs() < 1e-2 && (pi - 89.0).abs() < 1e-2,
            "{y} {pi}"
        );
    }

    #[test]
    fn auto_is_mouse_in_a_window_and_nothing_headless() {
        let m = MouseLook::default();
        assert!(open(&PoseSpec::Auto, false, &m, 0).unwrap().is_none());
        assert_eq!(
            open(&PoseSpec::Auto, true, &m, 0).unwrap().unwrap().name(),
            "mouse-look"
        );
        let e = open(&PoseSpec::Track("/nonexistent/t.csv".into()), true, &m, 0)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("/nonexistent/t.csv"), "{e}");
    }
}
