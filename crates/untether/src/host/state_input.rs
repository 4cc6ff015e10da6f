//! The latest-wins state channel (pointer position, head pose) turned into what the host's
//! consumers take: the pointer as motion since the last position seen, and the head pose —
//! orientation **and position**, with the client's sample time — published whole for the
//! scene, the application ([`crate::host::Host::head_pose`]) and the frames rendered for it,
//! and as angles for the input sinks that want an event.

use untether_proto::{InputEvent, PoseSample, StateEntry, StateValue};

/// The sequence number of input records made from the latest-wins state channel (pointer
/// position, head pose) for sinks other than the scene: they are not numbered by the reliable
/// channel.
pub const STATE_SEQ: u32 = u32::MAX;

/// What changed on the state channel since the last look.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct StateChanges {
    /// Input events for the sinks (pointer first, then the head pose as angles).
    pub events: Vec<InputEvent>,
    /// The new head pose, whole (`sample_us` 0 when the client sent no sample time).
    pub head_pose: Option<PoseSample>,
}

/// Which state values were already turned into input.
#[derive(Default)]
pub(crate) struct StateApplied {
    pointer: Option<(u32, i32, i32)>,
    head: Option<u32>,
}

impl StateApplied {
    /// What changed since the last call.
    pub fn changes(
        &mut self,
        pointer: Option<StateEntry>,
        head: Option<StateEntry>,
    ) -> StateChanges {
        let mut out = StateChanges::default();
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
                out.events.push(InputEvent::PointerMotion { x, y, dx, dy });
            }
        }
        if let Some(e) = head {
            if self.head != Some(e.pid) {
                self.head = Some(e.pid);
                if let Some((pose, sample_us)) = e.value.pose() {
                    let (yaw, pitch, roll) = pose.angles_deg();
                    out.events.push(InputEvent::HeadPose { yaw, pitch, roll });
                    out.head_pose = Some(PoseSample {
                        sample_us: sample_us.unwrap_or(0),
                        pose,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_proto::Pose;

    fn entry(pid: u32, value: StateValue) -> Option<StateEntry> {
        Some(StateEntry {
            value,
            pid,
            received_us: 0,
        })
    }

    #[test]
    fn the_head_pose_keeps_its_position_and_sample_time() {
        let mut a = StateApplied::default();
        let pose = Pose::from_angles(30.0, -10.0, 0.0, [0.2, 1.6, -0.1]);
        let c = a.changes(
            None,
            entry(
                3,
                StateValue::PoseSample(PoseSample {
                    sample_us: 77,
                    pose,
                }),
            ),
        );
        let p = c.head_pose.unwrap();
        assert_eq!(p.sample_us, 77);
        assert_eq!(p.pose.position, [0.2, 1.6, -0.1]);
        match c.events[..] {
            [InputEvent::HeadPose { yaw, pitch, .. }] => {
                assert!((yaw - 30.0).abs() < 1e-3 && (pitch + 10.0).abs() < 1e-3)
            }
            _ => panic!("{:?}", c.events),
        }
        // The same packet again: nothing new.
        assert_eq!(
            a.changes(None, entry(3, StateValue::Int(0))),
            StateChanges::default()
        );
        // Older clients' angles still make a pose (no position, no time).
        let c = a.changes(
            entry(1, StateValue::Pointer { x: 5, y: 5 }),
            entry(
                4,
                StateValue::Angles {
                    yaw: 90.0,
                    pitch: 0.0,
                    roll: 0.0,
                },
            ),
        );
        assert_eq!(c.events.len(), 2);
        assert!(matches!(c.events[0], InputEvent::PointerMotion { .. }));
        assert_eq!(c.head_pose.unwrap().sample_us, 0);
    }
}
