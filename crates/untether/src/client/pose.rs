//! The client's head poses: the pose source's thread (it samples a [`crate::pose::PoseSource`]
//! at `vr.pose_rate_hz` and sends each sample on the latest-wins state channel), the newest
//! local pose and its recent history ([`LocalPose`]: what the presenter's late warp and the
//! pose-to-photon measurement read), and the pose each frame was rendered for, as the host told
//! it ([`FramePoses`], filled by the network driver, read by the decode thread).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use untether_media::warp::{Fov, Quat, Warp};
use untether_proto::state::keys;
use untether_proto::{Micros, PoseSample, StateValue};

use super::network::ClientCommand;
use super::{lock, ClientShared};
use crate::clock::now_us;
use crate::driver::Handle;
use crate::pose::PoseSource;

/// Frames whose pose is kept (a frame is decoded within a few frames of its pose arriving).
const FRAME_POSES: usize = 64;
/// Local pose samples kept (4 s at 1 kHz): the pose-to-photon match looks this far back.
const HISTORY: usize = 4096;

/// The pose each recent frame was rendered for: (session, frame number) → pose.
#[derive(Default)]
pub(crate) struct FramePoses {
    ring: Mutex<VecDeque<((u32, u32), PoseSample)>>,
}

impl FramePoses {
    pub fn insert(&self, session: u32, frame_number: u32, pose: PoseSample) {
        let mut r = lock(&self.ring);
        if r.len() >= FRAME_POSES {
            r.pop_front();
        }
        r.push_back(((session, frame_number), pose));
    }

    pub fn get(&self, session: u32, frame_number: u32) -> Option<PoseSample> {
        lock(&self.ring)
            .iter()
            .rev()
            .find(|(k, _)| *k == (session, frame_number))
            .map(|(_, p)| *p)
    }
}

/// The newest local head pose and the recent ones, oldest first.
#[derive(Default)]
pub struct LocalPose {
    inner: Mutex<VecDeque<PoseSample>>,
}

impl LocalPose {
    pub fn push(&self, s: PoseSample) {
        let mut h = lock(&self.inner);
        if h.len() >= HISTORY {
            h.pop_front();
        }
        h.push_back(s);
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<PoseSample> {
        lock(&self.inner).back().copied()
    }

    /// The samples taken in `[from_us, to_us]`, oldest first.
    pub fn between(&self, from_us: Micros, to_us: Micros) -> Vec<PoseSample> {
        lock(&self.inner)
            .iter()
            .filter(|s| s.sample_us >= from_us && s.sample_us <= to_us)
            .copied()
            .collect()
    }
}

/// The angle, degrees, between two poses' orientations (None: either is not a valid pose).
pub(crate) fn orientation_error_deg(a: PoseSample, b: PoseSample) -> Option<f32> {
    if !a.pose.is_valid() || !b.pose.is_valid() {
        return None;
    }
    let q = |p: PoseSample| {
        let [x, y, z, w] = p.pose.orientation;
        Quat::from_xyzw(x, y, z, w).normalize()
    };
    let dot = q(a).dot(q(b)).abs().min(1.0);
    Some((2.0 * dot.acos()).to_degrees())
}

/// The late warp of a side-by-side stereo picture `width`×`height` rendered for `rendered`
/// and shown at `latest` (the newest local pose), each eye `fov_rad` wide over its half of the
/// picture. Both orientations are the protocol's (head → world, +y up, −z forward), the
/// convention [`Warp`] uses too. None: not a picture a warp applies to.
pub(crate) fn pose_warp(
    rendered: PoseSample,
    latest: PoseSample,
    fov_rad: f32,
    width: u32,
    height: u32,
) -> Option<Warp> {
    if width < 2 || height == 0 || !rendered.pose.is_valid() || !latest.pose.is_valid() {
        return None;
    }
    let quat = |p: PoseSample| {
        let [x, y, z, w] = p.pose.orientation;
        Quat::from_xyzw(x, y, z, w)
    };
    let fov = Fov::from_horizontal(fov_rad, width / 2, height);
    fov.is_valid().then(|| Warp {
        rendered: quat(rendered),
        latest: quat(latest),
        fov,
    })
}

/// What the host published on the latest-wins channel (rumble, other players, application
/// state), as the client's network driver last saw it: read it from any thread
/// ([`crate::api::ClientBuilder::host_state`]).
#[derive(Clone, Default)]
pub struct HostStateView {
    inner: std::sync::Arc<
        Mutex<(
            u64,
            std::collections::BTreeMap<untether_proto::StateKey, StateValue>,
        )>,
    >,
}

impl std::fmt::Debug for HostStateView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostStateView({} keys)", lock(&self.inner).1.len())
    }
}

impl HostStateView {
    /// The newest value of `key`.
    pub fn get(&self, key: untether_proto::StateKey) -> Option<StateValue> {
        lock(&self.inner).1.get(&key).copied()
    }

    /// Every key and value.
    pub fn snapshot(&self) -> Vec<(untether_proto::StateKey, StateValue)> {
        lock(&self.inner).1.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Copies what changed in `rx` (called by the network driver).
    pub(crate) fn update(&self, rx: &untether_proto::StateReceiver) {
        let mut g = lock(&self.inner);
        if g.0 == rx.changes() {
            return;
        }
        g.0 = rx.changes();
        g.1 = rx.iter().map(|(k, e)| (k, e.value)).collect();
    }
}

/// Samples `source` at `rate_hz` until the client stops (or the source ends): each sample goes
/// into `s.local_pose` and, while connected, to the host as key [`keys::HEAD_POSE`].
pub(crate) fn pose_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    mut source: Box<dyn PoseSource>,
    rate_hz: u32,
) {
    let period = 1_000_000 / u64::from(rate_hz.clamp(1, 1000));
    let mut next = now_us();
    while !s.stop.load(Ordering::SeqCst) {
        let now = now_us();
        if now < next {
            untether_net::sleep_until(next);
            continue;
        }
        // Missed ticks are skipped, not burst.
        next = if now > next + period {
            now + period
        } else {
            next + period
        };
        let sample = match source.sample(now) {
            Ok(Some(pose)) => PoseSample {
                sample_us: now,
                pose,
            },
            Ok(None) => continue,
            Err(e) => {
                log::warn!("client: pose source {}: {e}", source.name());
                return;
            }
        };
        s.local_pose.push(sample);
        if s.status().connected
            && !net.send(ClientCommand::State(
                keys::HEAD_POSE,
                StateValue::PoseSample(sample),
            ))
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_proto::Pose;

    fn sample(t: Micros) -> PoseSample {
        PoseSample {
            sample_us: t,
            pose: Pose::IDENTITY,
        }
    }

    #[test]
    fn rings_are_bounded_and_find_the_newest() {
        let f = FramePoses::default();
        for i in 0..100 {
            f.insert(0, i, sample(i as u64));
        }
        assert!(f.get(0, 10).is_none());
        assert_eq!(f.get(0, 99).map(|p| p.sample_us), Some(99));
        assert!(f.get(1, 99).is_none());
        let l = LocalPose::default();
        for t in 0..5000 {
            l.push(sample(t));
        }
        assert_eq!(l.latest().map(|p| p.sample_us), Some(4999));
        assert_eq!(l.between(0, 1000).len(), 97);
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use untether_proto::Pose;

    fn yaw(deg: f32) -> PoseSample {
        let q = Quat::from_rotation_y(deg.to_radians());
        PoseSample {
            sample_us: 1,
            pose: Pose {
                orientation: [q.x, q.y, q.z, q.w],
                ..Pose::IDENTITY
            },
        }
    }

    #[test]
    fn the_prediction_error_is_the_angle_between_the_orientations() {
        let e = |a, b| orientation_error_deg(yaw(a), yaw(b)).unwrap();
        assert!(e(10.0, 10.0) < 0.01);
        assert!((e(0.0, 3.0) - 3.0).abs() < 0.01);
        assert!((e(-2.0, 2.0) - 4.0).abs() < 0.01);
        // q and -q are one orientation.
        let mut flipped = yaw(5.0);
        for c in &mut flipped.pose.orientation {
            *c = -*c;
        }
        assert!(orientation_error_deg(yaw(5.0), flipped).unwrap() < 0.01);
        let mut bad = yaw(0.0);
        bad.pose.orientation = [f32::NAN; 4];
        assert_eq!(orientation_error_deg(bad, yaw(0.0)), None);
    }
}
