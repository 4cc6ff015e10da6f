//! Entry points for action sets, actions, bindings and action state ([`crate::actions`],
//! [`crate::action_state`]).

use std::ffi::c_char;

use openxr_sys as xr;

use super::raw::{array, input, out_value, output, slice};
use super::{entry, OK};
use crate::action_state as st;
use crate::actions as core;
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn create_action_set(
    instance: xr::Instance,
    info: *const xr::ActionSetCreateInfo,
    out: *mut xr::ActionSet,
) -> xr::Result {
    entry("xrCreateActionSet", || {
        // SAFETY: the application's XrActionSetCreateInfo (null and type checked).
        let info = unsafe { input(info, T::ACTION_SET_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        out.write(core::create_action_set(instance, info)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn destroy_action_set(set: xr::ActionSet) -> xr::Result {
    entry("xrDestroyActionSet", || {
        core::destroy_action_set(set)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn create_action(
    set: xr::ActionSet,
    info: *const xr::ActionCreateInfo,
    out: *mut xr::Action,
) -> xr::Result {
    entry("xrCreateAction", || {
        // SAFETY: the application's XrActionCreateInfo (null and type checked).
        let info = unsafe { input(info, T::ACTION_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        // SAFETY: the spec's `countSubactionPaths` paths (null checked when non-zero).
        let subactions = unsafe { slice(info.subaction_paths, info.count_subaction_paths) }?;
        out.write(core::create_action(set, info, subactions)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn destroy_action(action: xr::Action) -> xr::Result {
    entry("xrDestroyAction", || {
        core::destroy_action(action)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn suggest_interaction_profile_bindings(
    instance: xr::Instance,
    info: *const xr::InteractionProfileSuggestedBinding,
) -> xr::Result {
    entry("xrSuggestInteractionProfileBindings", || {
        // SAFETY: the application's XrInteractionProfileSuggestedBinding (null and type
        // checked).
        let info = unsafe { input(info, T::INTERACTION_PROFILE_SUGGESTED_BINDING) }?;
        // SAFETY: the spec's `countSuggestedBindings` bindings (null checked when non-zero).
        let list = unsafe { slice(info.suggested_bindings, info.count_suggested_bindings) }?;
        core::suggest_bindings(instance, info.interaction_profile, list)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn attach_session_action_sets(
    session: xr::Session,
    info: *const xr::SessionActionSetsAttachInfo,
) -> xr::Result {
    entry("xrAttachSessionActionSets", || {
        // SAFETY: the application's XrSessionActionSetsAttachInfo (null and type checked).
        let info = unsafe { input(info, T::SESSION_ACTION_SETS_ATTACH_INFO) }?;
        // SAFETY: the spec's `countActionSets` handles (null checked when non-zero).
        let sets = unsafe { slice(info.action_sets, info.count_action_sets) }?;
        core::attach_session_action_sets(session, sets)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn get_current_interaction_profile(
    session: xr::Session,
    top: xr::Path,
    out: *mut xr::InteractionProfileState,
) -> xr::Result {
    entry("xrGetCurrentInteractionProfile", || {
        // SAFETY: the application's XrInteractionProfileState (null and type checked).
        let out = unsafe { output(out, T::INTERACTION_PROFILE_STATE) }?;
        out.interaction_profile = core::current_interaction_profile(session, top)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn sync_actions(
    session: xr::Session,
    info: *const xr::ActionsSyncInfo,
) -> xr::Result {
    entry("xrSyncActions", || {
        // SAFETY: the application's XrActionsSyncInfo (null and type checked).
        let info = unsafe { input(info, T::ACTIONS_SYNC_INFO) }?;
        // SAFETY: the spec's `countActiveActionSets` entries (null checked when non-zero).
        let active = unsafe { slice(info.active_action_sets, info.count_active_action_sets) }?;
        core::sync_actions(session, active)
    })
}

/// The entry points reading one action's state: the application's get-info and state
/// structure (both null and type checked), then the core's reader.
macro_rules! action_state {
    ($fn:ident, $name:literal, $state:ty, $ty:expr, $core:path) => {
        pub(crate) unsafe extern "system" fn $fn(
            session: xr::Session,
            info: *const xr::ActionStateGetInfo,
            out: *mut $state,
        ) -> xr::Result {
            entry($name, || {
                // SAFETY: the application's state structure (null and type checked).
                let out = unsafe { output(out, $ty) }?;
                // SAFETY: the application's XrActionStateGetInfo (null and type checked).
                let info = unsafe { input(info, T::ACTION_STATE_GET_INFO) }?;
                $core(session, info, out)?;
                Ok(OK)
            })
        }
    };
}

action_state!(
    get_action_state_boolean,
    "xrGetActionStateBoolean",
    xr::ActionStateBoolean,
    T::ACTION_STATE_BOOLEAN,
    st::get_boolean
);
action_state!(
    get_action_state_float,
    "xrGetActionStateFloat",
    xr::ActionStateFloat,
    T::ACTION_STATE_FLOAT,
    st::get_float
);
action_state!(
    get_action_state_vector2f,
    "xrGetActionStateVector2f",
    xr::ActionStateVector2f,
    T::ACTION_STATE_VECTOR2F,
    st::get_vector2f
);
action_state!(
    get_action_state_pose,
    "xrGetActionStatePose",
    xr::ActionStatePose,
    T::ACTION_STATE_POSE,
    st::get_pose
);

pub(crate) unsafe extern "system" fn apply_haptic_feedback(
    session: xr::Session,
    info: *const xr::HapticActionInfo,
    feedback: *const xr::HapticBaseHeader,
) -> xr::Result {
    entry("xrApplyHapticFeedback", || {
        // SAFETY: the application's XrHapticActionInfo (null and type checked).
        let info = unsafe { input(info, T::HAPTIC_ACTION_INFO) }?;
        // SAFETY: the application's haptic structure, read as an XrHapticVibration only
        // when its type says it is one (null and type checked).
        let v = unsafe { input(feedback.cast::<xr::HapticVibration>(), T::HAPTIC_VIBRATION) }?;
        st::apply_haptic_feedback(session, info, v)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn stop_haptic_feedback(
    session: xr::Session,
    info: *const xr::HapticActionInfo,
) -> xr::Result {
    entry("xrStopHapticFeedback", || {
        // SAFETY: the application's XrHapticActionInfo (null and type checked).
        let info = unsafe { input(info, T::HAPTIC_ACTION_INFO) }?;
        st::stop_haptic_feedback(session, info)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn enumerate_bound_sources_for_action(
    session: xr::Session,
    info: *const xr::BoundSourcesForActionEnumerateInfo,
    capacity: u32,
    count: *mut u32,
    sources: *mut xr::Path,
) -> xr::Result {
    entry("xrEnumerateBoundSourcesForAction", || {
        // SAFETY: the application's XrBoundSourcesForActionEnumerateInfo (null and type
        // checked).
        let info = unsafe { input(info, T::BOUND_SOURCES_FOR_ACTION_ENUMERATE_INFO) }?;
        // SAFETY: the application's two-call array (null checked).
        let out = unsafe { array(capacity, count, sources) }?;
        st::bound_sources(session, info, out)
    })
}

pub(crate) unsafe extern "system" fn get_input_source_localized_name(
    session: xr::Session,
    info: *const xr::InputSourceLocalizedNameGetInfo,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    entry("xrGetInputSourceLocalizedName", || {
        // SAFETY: the application's XrInputSourceLocalizedNameGetInfo (null and type
        // checked).
        let info = unsafe { input(info, T::INPUT_SOURCE_LOCALIZED_NAME_GET_INFO) }?;
        // SAFETY: the application's two-call buffer (null checked).
        let out = unsafe { array(capacity, count, buffer) }?;
        st::input_source_localized_name(session, info, out)
    })
}
