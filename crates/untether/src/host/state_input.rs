//! The latest-wins state channel (pointer position, head pose) turned into input events for a
//! sink: the pointer as motion since the last position seen, the pose as angles.

use untether_proto::{InputEvent, StateEntry, StateValue};

/// The sequence number of input records made from the latest-wins state channel (pointer
/// position, head pose) for sinks other than the scene: they are not numbered by the reliable
/// channel.
pub const STATE_SEQ: u32 = u32::MAX;

/// The scene's reaction to the latest-wins state: the pointer position (as motion since the
/// last position seen) and the head pose.
#[derive(Default)]
pub(crate) struct StateApplied {
    pointer: Option<(u32, i32, i32)>,
    head: Option<u32>,
}

impl StateApplied {
    /// Input events for what changed since the last call (pointer first).
    pub fn changes(
        &mut self,
        pointer: Option<StateEntry>,
        head: Option<StateEntry>,
    ) -> Vec<InputEvent> {
        let mut out = Vec::new();
        if let Some(StateEntry {
            value: StateValue::Pointer { x, y },
            pid,
            ..
        }) = pointer
        {
            if self.pointer.is_none_or(|(p, _, _)| p != pid) {
                let (dx, dy) = match self.pointer {
                    Some((_, ox, oy)) => (x.wrapping_sub(ox), y.wrapping_sub(oy)),
                    None => (0, 0),
                };
                self.pointer = Some((pid, x, y));
                out.push(InputEvent::PointerMotion { x, y, dx, dy });
            }
        }
        if let Some(e) = head {
            if self.head != Some(e.pid) {
                self.head = Some(e.pid);
                if let Some((yaw, pitch, roll)) = angles(&e.value) {
                    out.push(InputEvent::HeadPose { yaw, pitch, roll });
                }
            }
        }
        out
    }
}

/// Yaw, pitch, roll in degrees of a head pose value.
fn angles(v: &StateValue) -> Option<(f32, f32, f32)> {
    match *v {
        StateValue::Angles { yaw, pitch, roll } => Some((yaw, pitch, roll)),
        StateValue::Pose { orientation, .. } => {
            // Quaternion (x, y, z, w), y up, -z forward: yaw about y, pitch about x.
            let [x, y, z, w] = orientation;
            let yaw = (2.0 * (w * y + x * z)).atan2(1.0 - 2.0 * (x * x + y * y));
            let pitch = (2.0 * (w * x - y * z)).clamp(-1.0, 1.0).asin();
            let roll = (2.0 * (w * z + x * y)).atan2(1.0 - 2.0 * (x * x + z * z));
            Some((yaw.to_degrees(), pitch.to_degrees(), roll.to_degrees()))
        }
        _ => None,
    }
}
