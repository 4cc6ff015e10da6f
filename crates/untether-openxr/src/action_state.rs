//! Reading actions: their synced states, the sources bound to them, their names; haptics.

use std::ffi::c_char;

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::guard;
use crate::runtime::lock;
use crate::util::{fill, fill_str, now, ty_of};

use crate::actions::Value;

/// Reads an action's synced state, checking the action type and the subaction path.
///
/// # Safety
/// `info` must be null or point to an XrActionStateGetInfo.
unsafe fn state_of(
    session: xr::Session,
    info: *const xr::ActionStateGetInfo,
    types: &[xr::ActionType],
) -> Result<Value, xr::Result> {
    // SAFETY: type read first.
    if unsafe { ty_of(info) } != Some(xr::StructureType::ACTION_STATE_GET_INFO) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: checked.
    let info = unsafe { &*info };
    let mut rt = lock();
    let aid = info.action.into_raw();
    let Some(a) = rt.actions.get(&aid) else {
        return Err(xr::Result::ERROR_HANDLE_INVALID);
    };
    if !types.contains(&a.ty) {
        return Err(xr::Result::ERROR_ACTION_TYPE_MISMATCH);
    }
    if info.subaction_path != xr::Path::NULL && !a.subactions.contains(&info.subaction_path) {
        return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
    }
    let set = a.set;
    let s = rt.session(session)?;
    if !s.attached.contains(&set) {
        return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
    }
    Ok(s.action_states
        .values
        .get(&(aid, info.subaction_path.into_raw()))
        .copied()
        .unwrap_or_default())
}

pub(crate) unsafe extern "system" fn get_action_state_boolean(
    session: xr::Session,
    info: *const xr::ActionStateGetInfo,
    out: *mut xr::ActionStateBoolean,
) -> xr::Result {
    guard("xrGetActionStateBoolean", || {
        // SAFETY: type read first.
        if unsafe { ty_of(out) } != Some(xr::StructureType::ACTION_STATE_BOOLEAN) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: forwarded.
        match unsafe { state_of(session, info, &[xr::ActionType::BOOLEAN_INPUT]) } {
            Err(e) => e,
            Ok(v) => {
                // SAFETY: checked type.
                let o = unsafe { &mut *out };
                o.current_state = (v.value > 0.5).into();
                o.changed_since_last_sync = v.changed.into();
                o.last_change_time = xr::Time::from_nanos(v.since);
                o.is_active = v.active.into();
                xr::Result::SUCCESS
            }
        }
    })
}

pub(crate) unsafe extern "system" fn get_action_state_float(
    session: xr::Session,
    info: *const xr::ActionStateGetInfo,
    out: *mut xr::ActionStateFloat,
) -> xr::Result {
    guard("xrGetActionStateFloat", || {
        // SAFETY: type read first.
        if unsafe { ty_of(out) } != Some(xr::StructureType::ACTION_STATE_FLOAT) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: forwarded.
        match unsafe { state_of(session, info, &[xr::ActionType::FLOAT_INPUT]) } {
            Err(e) => e,
            Ok(v) => {
                // SAFETY: checked type.
                let o = unsafe { &mut *out };
                o.current_state = v.value;
                o.changed_since_last_sync = v.changed.into();
                o.last_change_time = xr::Time::from_nanos(v.since);
                o.is_active = v.active.into();
                xr::Result::SUCCESS
            }
        }
    })
}

pub(crate) unsafe extern "system" fn get_action_state_vector2f(
    session: xr::Session,
    info: *const xr::ActionStateGetInfo,
    out: *mut xr::ActionStateVector2f,
) -> xr::Result {
    guard("xrGetActionStateVector2f", || {
        // SAFETY: type read first.
        if unsafe { ty_of(out) } != Some(xr::StructureType::ACTION_STATE_VECTOR2F) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: forwarded (the gamepad's thumbsticks are the 2D sources).
        match unsafe { state_of(session, info, &[xr::ActionType::VECTOR2F_INPUT]) } {
            Err(e) => e,
            Ok(v) => {
                // SAFETY: checked type.
                let o = unsafe { &mut *out };
                o.current_state = xr::Vector2f {
                    x: v.xy[0],
                    y: v.xy[1],
                };
                o.changed_since_last_sync = v.changed.into();
                o.last_change_time = xr::Time::from_nanos(v.since);
                o.is_active = v.active.into();
                xr::Result::SUCCESS
            }
        }
    })
}

pub(crate) unsafe extern "system" fn get_action_state_pose(
    session: xr::Session,
    info: *const xr::ActionStateGetInfo,
    out: *mut xr::ActionStatePose,
) -> xr::Result {
    guard("xrGetActionStatePose", || {
        // SAFETY: type read first.
        if unsafe { ty_of(out) } != Some(xr::StructureType::ACTION_STATE_POSE) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: forwarded.
        match unsafe { state_of(session, info, &[xr::ActionType::POSE_INPUT]) } {
            Err(e) => e,
            Ok(v) => {
                // SAFETY: checked type.
                unsafe { (*out).is_active = v.active.into() };
                xr::Result::SUCCESS
            }
        }
    })
}

/// Checks a haptic call and returns the controller it drives.
unsafe fn haptic_target(
    session: xr::Session,
    info: *const xr::HapticActionInfo,
) -> Result<(), xr::Result> {
    // SAFETY: type read first.
    if unsafe { ty_of(info) } != Some(xr::StructureType::HAPTIC_ACTION_INFO) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: checked.
    let info = unsafe { &*info };
    let mut rt = lock();
    let Some(a) = rt.actions.get(&info.action.into_raw()) else {
        return Err(xr::Result::ERROR_HANDLE_INVALID);
    };
    if a.ty != xr::ActionType::VIBRATION_OUTPUT {
        return Err(xr::Result::ERROR_ACTION_TYPE_MISMATCH);
    }
    if info.subaction_path != xr::Path::NULL && !a.subactions.contains(&info.subaction_path) {
        return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
    }
    let set = a.set;
    if !rt.session(session)?.attached.contains(&set) {
        return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
    }
    Ok(())
}

pub(crate) unsafe extern "system" fn apply_haptic_feedback(
    session: xr::Session,
    info: *const xr::HapticActionInfo,
    feedback: *const xr::HapticBaseHeader,
) -> xr::Result {
    guard("xrApplyHapticFeedback", || {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { haptic_target(session, info) } {
            return e;
        }
        // SAFETY: type read first.
        if unsafe { ty_of(feedback) } != Some(xr::StructureType::HAPTIC_VIBRATION) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let v = unsafe { &*(feedback as *const xr::HapticVibration) };
        let mut rt = lock();
        if let Ok(s) = rt.session(session) {
            if s.state == xr::SessionState::FOCUSED {
                // XR_MIN_HAPTIC_DURATION (-1): the shortest the controller can do; take 20 ms.
                let d = if v.duration.as_nanos() <= 0 {
                    20_000_000
                } else {
                    v.duration.as_nanos().min(10_000_000_000)
                };
                s.stream.rumble(v.amplitude, Some(now().as_nanos() + d));
            }
        }
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn stop_haptic_feedback(
    session: xr::Session,
    info: *const xr::HapticActionInfo,
) -> xr::Result {
    guard("xrStopHapticFeedback", || {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { haptic_target(session, info) } {
            return e;
        }
        if let Ok(s) = lock().session(session) {
            s.stream.rumble(0.0, None);
        }
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn enumerate_bound_sources_for_action(
    session: xr::Session,
    info: *const xr::BoundSourcesForActionEnumerateInfo,
    capacity: u32,
    count: *mut u32,
    sources: *mut xr::Path,
) -> xr::Result {
    guard("xrEnumerateBoundSourcesForAction", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) }
            != Some(xr::StructureType::BOUND_SOURCES_FOR_ACTION_ENUMERATE_INFO)
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let mut rt = lock();
        let aid = info.action.into_raw();
        let Some(set) = rt.actions.get(&aid).map(|a| a.set) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        match rt.session(session) {
            Err(e) => return e,
            Ok(s) if !s.attached.contains(&set) => return xr::Result::ERROR_ACTIONSET_NOT_ATTACHED,
            Ok(_) => {}
        }
        let Some(inst) = rt.instance.as_mut() else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let names = inst.bindings.sources(aid);
        let paths: Vec<xr::Path> = names.iter().map(|n| inst.path(n)).collect();
        // SAFETY: the application's two-call array.
        unsafe { fill(capacity, count, sources, &paths) }
    })
}

pub(crate) unsafe extern "system" fn get_input_source_localized_name(
    session: xr::Session,
    info: *const xr::InputSourceLocalizedNameGetInfo,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrGetInputSourceLocalizedName", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::INPUT_SOURCE_LOCALIZED_NAME_GET_INFO) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let mut rt = lock();
        if let Err(e) = rt.session(session) {
            return e;
        }
        let Some(inst) = rt.instance.as_ref() else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let Some(path) = inst.path_str(info.source_path) else {
            return xr::Result::ERROR_PATH_INVALID;
        };
        let pad = path.starts_with(crate::gamepad::TOP);
        let mut words = Vec::new();
        let c = info.which_components;
        if c.intersects(xr::InputSourceLocalizedNameFlags::USER_PATH) {
            words.push(if pad {
                "Gamepad".to_string()
            } else if path.starts_with("/user/hand/left") {
                "Left Hand".to_string()
            } else {
                "Right Hand".to_string()
            });
        }
        if c.intersects(xr::InputSourceLocalizedNameFlags::INTERACTION_PROFILE) {
            words.push(if pad {
                "Xbox Controller (untether)".to_string()
            } else {
                "Simple Controller (untether)".to_string()
            });
        }
        if c.intersects(xr::InputSourceLocalizedNameFlags::COMPONENT) {
            words.push(match () {
                _ if pad => crate::gamepad::component_name(path),
                _ if path.contains("/select/") => "Select".to_string(),
                _ if path.contains("/menu/") => "Menu".to_string(),
                _ if path.contains("/pose") => "Pose".to_string(),
                _ => "Haptic".to_string(),
            });
        }
        if words.is_empty() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: the application's two-call buffer.
        unsafe { fill_str(capacity, count, buffer, &words.join(" ")) }
    })
}
