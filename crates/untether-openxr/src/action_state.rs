//! Reading actions: their synced states, the sources bound to them, their names; haptics.
//! The safe core of the action-state entry points in [`crate::ffi::actions`].

#![forbid(unsafe_code)]

use std::ffi::c_char;
use std::sync::Arc;

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::actions::{Action, Value, ACTIONS};
use crate::runtime::{self, with_session};
use crate::session::Session;
use crate::util::{now, two_call, two_call_str, Array, Slot};

/// Checks that `action` may be read or driven through a session: of one of `types`, the
/// subaction path one of its own (or NULL); then, under the session's lock, its set attached
/// to the session, and runs `f` there.
fn with_checked_action<R>(
    session: xr::Session,
    action: xr::Action,
    subaction_path: xr::Path,
    types: &[xr::ActionType],
    f: impl FnOnce(&mut Session, Arc<Action>) -> Result<R, xr::Result>,
) -> Result<R, xr::Result> {
    let a = ACTIONS.get(action.into_raw())?;
    if !types.contains(&a.ty) {
        return Err(xr::Result::ERROR_ACTION_TYPE_MISMATCH);
    }
    if subaction_path != xr::Path::NULL && !a.subactions.contains(&subaction_path) {
        return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
    }
    with_session(session, |s| {
        if !s.attached.contains(&a.set) {
            return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
        }
        f(s, a)
    })
}

/// An action's synced state, checking the action type and the subaction path.
pub fn state_of(
    session: xr::Session,
    info: &xr::ActionStateGetInfo,
    types: &[xr::ActionType],
) -> Result<Value, xr::Result> {
    with_checked_action(session, info.action, info.subaction_path, types, |s, _| {
        Ok(s.action_states
            .values
            .get(&(info.action.into_raw(), info.subaction_path.into_raw()))
            .copied()
            .unwrap_or_default())
    })
}

/// The XrTime of a state's last change.
fn since(v: &Value) -> xr::Time {
    xr::Time::from_nanos(v.since)
}

/// A boolean action's state: pressed past half way.
pub fn boolean(v: &Value, o: &mut xr::ActionStateBoolean) {
    o.current_state = (v.value > 0.5).into();
    o.changed_since_last_sync = v.changed.into();
    o.last_change_time = since(v);
    o.is_active = v.active.into();
}

pub fn float(v: &Value, o: &mut xr::ActionStateFloat) {
    o.current_state = v.value;
    o.changed_since_last_sync = v.changed.into();
    o.last_change_time = since(v);
    o.is_active = v.active.into();
}

/// A 2D action's state (the gamepad's thumbsticks are the 2D sources).
pub fn vector2f(v: &Value, o: &mut xr::ActionStateVector2f) {
    o.current_state = xr::Vector2f {
        x: v.xy[0],
        y: v.xy[1],
    };
    o.changed_since_last_sync = v.changed.into();
    o.last_change_time = since(v);
    o.is_active = v.active.into();
}

pub fn pose(v: &Value, o: &mut xr::ActionStatePose) {
    o.is_active = v.active.into();
}

/// `xrGetActionStateBoolean`.
pub fn get_boolean(
    session: xr::Session,
    info: &xr::ActionStateGetInfo,
    o: &mut xr::ActionStateBoolean,
) -> Result<(), xr::Result> {
    boolean(
        &state_of(session, info, &[xr::ActionType::BOOLEAN_INPUT])?,
        o,
    );
    Ok(())
}

/// `xrGetActionStateFloat`.
pub fn get_float(
    session: xr::Session,
    info: &xr::ActionStateGetInfo,
    o: &mut xr::ActionStateFloat,
) -> Result<(), xr::Result> {
    float(&state_of(session, info, &[xr::ActionType::FLOAT_INPUT])?, o);
    Ok(())
}

/// `xrGetActionStateVector2f`.
pub fn get_vector2f(
    session: xr::Session,
    info: &xr::ActionStateGetInfo,
    o: &mut xr::ActionStateVector2f,
) -> Result<(), xr::Result> {
    vector2f(
        &state_of(session, info, &[xr::ActionType::VECTOR2F_INPUT])?,
        o,
    );
    Ok(())
}

/// `xrGetActionStatePose`.
pub fn get_pose(
    session: xr::Session,
    info: &xr::ActionStateGetInfo,
    o: &mut xr::ActionStatePose,
) -> Result<(), xr::Result> {
    pose(&state_of(session, info, &[xr::ActionType::POSE_INPUT])?, o);
    Ok(())
}

/// Runs `f` on the session once a haptic call's action is checked (a vibration output the
/// session may drive).
fn with_haptic_target(
    session: xr::Session,
    info: &xr::HapticActionInfo,
    f: impl FnOnce(&mut Session),
) -> Result<(), xr::Result> {
    with_checked_action(
        session,
        info.action,
        info.subaction_path,
        &[xr::ActionType::VIBRATION_OUTPUT],
        |s, _| {
            f(s);
            Ok(())
        },
    )
}

/// How long a vibration lasts, in ns: XR_MIN_HAPTIC_DURATION (-1, or any duration ≤ 0) is
/// the shortest the controller can do, taken as 20 ms; at most 10 s.
pub fn haptic_duration_ns(duration: xr::Duration) -> i64 {
    if duration.as_nanos() <= 0 {
        20_000_000
    } else {
        duration.as_nanos().min(10_000_000_000)
    }
}

/// `xrApplyHapticFeedback`: the client's controller rumbles while the session is focused.
pub fn apply_haptic_feedback(
    session: xr::Session,
    info: &xr::HapticActionInfo,
    v: &xr::HapticVibration,
) -> Result<(), xr::Result> {
    with_haptic_target(session, info, |s| {
        if s.state == xr::SessionState::FOCUSED {
            let until = now().as_nanos() + haptic_duration_ns(v.duration);
            s.stream.rumble(v.amplitude, Some(until));
        }
    })
}

/// `xrStopHapticFeedback`.
pub fn stop_haptic_feedback(
    session: xr::Session,
    info: &xr::HapticActionInfo,
) -> Result<(), xr::Result> {
    with_haptic_target(session, info, |s| s.stream.rumble(0.0, None))
}

/// `xrEnumerateBoundSourcesForAction`.
pub fn bound_sources(
    session: xr::Session,
    info: &xr::BoundSourcesForActionEnumerateInfo,
    out: Array<'_, impl Slot<xr::Path>>,
) -> Result<xr::Result, xr::Result> {
    let aid = info.action.into_raw();
    let set = ACTIONS.get(aid)?.set;
    if !with_session(session, |s| Ok(s.attached.contains(&set)))? {
        return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
    }
    let inst = runtime::current().ok_or(xr::Result::ERROR_HANDLE_INVALID)?;
    let mut st = inst.state();
    let names = st.bindings.sources(aid);
    let paths: Vec<xr::Path> = names.iter().map(|n| st.path(n)).collect();
    Ok(two_call(out, &paths))
}

/// An input source's name for people, of the parts `which` asks for (None: no part asked).
pub fn localized_name(path: &str, which: xr::InputSourceLocalizedNameFlags) -> Option<String> {
    use xr::InputSourceLocalizedNameFlags as F;
    let pad = path.starts_with(crate::gamepad::TOP);
    let mut words = Vec::new();
    if which.intersects(F::USER_PATH) {
        words.push(if pad {
            "Gamepad".to_string()
        } else if path.starts_with("/user/hand/left") {
            "Left Hand".to_string()
        } else {
            "Right Hand".to_string()
        });
    }
    if which.intersects(F::INTERACTION_PROFILE) {
        words.push(if pad {
            "Xbox Controller (untether)".to_string()
        } else {
            "Simple Controller (untether)".to_string()
        });
    }
    if which.intersects(F::COMPONENT) {
        words.push(match () {
            _ if pad => crate::gamepad::component_name(path),
            _ if path.contains("/select/") => "Select".to_string(),
            _ if path.contains("/menu/") => "Menu".to_string(),
            _ if path.contains("/pose") => "Pose".to_string(),
            _ => "Haptic".to_string(),
        });
    }
    (!words.is_empty()).then(|| words.join(" "))
}

/// `xrGetInputSourceLocalizedName`.
pub fn input_source_localized_name(
    session: xr::Session,
    info: &xr::InputSourceLocalizedNameGetInfo,
    out: Array<'_, impl Slot<c_char>>,
) -> Result<xr::Result, xr::Result> {
    with_session(session, |_| Ok(()))?;
    let inst = runtime::current().ok_or(xr::Result::ERROR_HANDLE_INVALID)?;
    let path = inst
        .path_str(info.source_path)
        .ok_or(xr::Result::ERROR_PATH_INVALID)?;
    let name =
        localized_name(&path, info.which_components).ok_or(xr::Result::ERROR_VALIDATION_FAILURE)?;
    Ok(two_call_str(out, &name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xr::InputSourceLocalizedNameFlags as F;

    #[test]
    fn states_are_written_from_the_synced_value() {
        let v = Value {
            value: 0.75,
            xy: [0.5, -0.25],
            active: true,
            changed: true,
            since: 42,
        };
        let mut b: xr::ActionStateBoolean = boolean_state();
        boolean(&v, &mut b);
        assert_eq!(
            (b.current_state, b.changed_since_last_sync, b.is_active),
            (xr::TRUE, xr::TRUE, xr::TRUE)
        );
        assert_eq!(b.last_change_time.as_nanos(), 42);
        boolean(
            &Value {
                value: 0.5,
                ..Value::default()
            },
            &mut b,
        );
        // Half way is not pressed; an inactive action is not active.
        assert_eq!((b.current_state, b.is_active), (xr::FALSE, xr::FALSE));
        let mut f = xr::ActionStateFloat {
            ty: xr::StructureType::ACTION_STATE_FLOAT,
            next: std::ptr::null_mut(),
            current_state: 0.0,
            changed_since_last_sync: xr::FALSE,
            last_change_time: xr::Time::from_nanos(0),
            is_active: xr::FALSE,
        };
        float(&v, &mut f);
        assert_eq!(f.current_state, 0.75);
        let mut xy = xr::ActionStateVector2f {
            ty: xr::StructureType::ACTION_STATE_VECTOR2F,
            next: std::ptr::null_mut(),
            current_state: xr::Vector2f { x: 0.0, y: 0.0 },
            changed_since_last_sync: xr::FALSE,
            last_change_time: xr::Time::from_nanos(0),
            is_active: xr::FALSE,
        };
        vector2f(&v, &mut xy);
        assert_eq!((xy.current_state.x, xy.current_state.y), (0.5, -0.25));
        // The type and chain stay the application's.
        assert_eq!(xy.ty, xr::StructureType::ACTION_STATE_VECTOR2F);
    }

    fn boolean_state() -> xr::ActionStateBoolean {
        xr::ActionStateBoolean {
            ty: xr::StructureType::ACTION_STATE_BOOLEAN,
            next: std::ptr::null_mut(),
            current_state: xr::FALSE,
            changed_since_last_sync: xr::FALSE,
            last_change_time: xr::Time::from_nanos(0),
            is_active: xr::FALSE,
        }
    }

    #[test]
    fn haptic_durations_are_clamped() {
        assert_eq!(haptic_duration_ns(xr::Duration::from_nanos(-1)), 20_000_000);
        assert_eq!(haptic_duration_ns(xr::Duration::from_nanos(0)), 20_000_000);
        assert_eq!(haptic_duration_ns(xr::Duration::from_nanos(5)), 5);
        assert_eq!(
            haptic_duration_ns(xr::Duration::from_nanos(i64::MAX)),
            10_000_000_000
        );
    }

    #[test]
    fn localized_names_have_the_asked_parts() {
        let all = F::USER_PATH | F::INTERACTION_PROFILE | F::COMPONENT;
        assert_eq!(
            localized_name("/user/hand/left/input/select/click", all).as_deref(),
            Some("Left Hand Simple Controller (untether) Select")
        );
        assert_eq!(
            localized_name("/user/hand/right/output/haptic", F::COMPONENT).as_deref(),
            Some("Haptic")
        );
        assert_eq!(
            localized_name("/user/gamepad/input/menu/click", F::USER_PATH).as_deref(),
            Some("Gamepad")
        );
        assert_eq!(localized_name("/user/hand/left", F::EMPTY), None);
    }

    #[test]
    fn stale_handles_are_invalid_not_a_crash() {
        let info = xr::ActionStateGetInfo {
            ty: xr::StructureType::ACTION_STATE_GET_INFO,
            next: std::ptr::null(),
            action: xr::Action::from_raw(u64::MAX),
            subaction_path: xr::Path::NULL,
        };
        assert_eq!(
            state_of(
                xr::Session::from_raw(u64::MAX),
                &info,
                &[xr::ActionType::BOOLEAN_INPUT]
            ),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
    }
}
