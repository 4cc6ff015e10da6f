//! Entry points for spaces and where things are ([`crate::space`]).

use openxr_sys as xr;

use super::raw::{array, input, out_value, output, struct_array};
use super::{entry, OK};
use crate::space as core;
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn enumerate_reference_spaces(
    session: xr::Session,
    capacity: u32,
    count: *mut u32,
    spaces: *mut xr::ReferenceSpaceType,
) -> xr::Result {
    entry("xrEnumerateReferenceSpaces", || {
        // SAFETY: the application's two-call array (null checked).
        let out = unsafe { array(capacity, count, spaces) }?;
        core::reference_spaces(session, out)
    })
}

pub(crate) unsafe extern "system" fn create_reference_space(
    session: xr::Session,
    info: *const xr::ReferenceSpaceCreateInfo,
    out: *mut xr::Space,
) -> xr::Result {
    entry("xrCreateReferenceSpace", || {
        // SAFETY: the application's XrReferenceSpaceCreateInfo (null and type checked).
        let info = unsafe { input(info, T::REFERENCE_SPACE_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        out.write(core::create_reference_space(session, info)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn create_action_space(
    session: xr::Session,
    info: *const xr::ActionSpaceCreateInfo,
    out: *mut xr::Space,
) -> xr::Result {
    entry("xrCreateActionSpace", || {
        // SAFETY: the application's XrActionSpaceCreateInfo (null and type checked).
        let info = unsafe { input(info, T::ACTION_SPACE_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        out.write(core::create_action_space(session, info)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn get_reference_space_bounds_rect(
    session: xr::Session,
    ty: xr::ReferenceSpaceType,
    bounds: *mut xr::Extent2Df,
) -> xr::Result {
    entry("xrGetReferenceSpaceBoundsRect", || {
        // SAFETY: the application's output extent (null checked).
        let out = unsafe { out_value(bounds) }?;
        let (extent, result) = core::reference_space_bounds(session, ty)?;
        out.write(extent);
        Ok(result)
    })
}

pub(crate) unsafe extern "system" fn destroy_space(space: xr::Space) -> xr::Result {
    entry("xrDestroySpace", || {
        core::destroy_space(space)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn locate_space(
    space: xr::Space,
    base: xr::Space,
    time: xr::Time,
    location: *mut xr::SpaceLocation,
) -> xr::Result {
    entry("xrLocateSpace", || {
        // SAFETY: the application's XrSpaceLocation (null and type checked; its type and
        // chain are left alone).
        let loc = unsafe { output(location, T::SPACE_LOCATION) }?;
        core::locate_space(space, base, time, loc)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn locate_views(
    session: xr::Session,
    info: *const xr::ViewLocateInfo,
    state: *mut xr::ViewState,
    capacity: u32,
    count: *mut u32,
    views: *mut xr::View,
) -> xr::Result {
    entry("xrLocateViews", || {
        // SAFETY: the application's XrViewLocateInfo (null and type checked).
        let info = unsafe { input(info, T::VIEW_LOCATE_INFO) }?;
        // SAFETY: the application's XrViewState (null and type checked).
        let state = unsafe { output(state, T::VIEW_STATE) }?;
        // SAFETY: the application's two-call array of XrView (null and the first type
        // checked; the spec has the application set every element's type).
        let out = unsafe { struct_array(capacity, count, views, T::VIEW) }?;
        core::locate_views(session, info, state, out)
    })
}
