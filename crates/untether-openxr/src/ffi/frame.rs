//! Entry points for the frame loop ([`crate::frame`]).

use openxr_sys as xr;

use super::raw::{input, optional, output, slice, ty_of};
use super::{entry, OK};
use crate::frame::{self as core, Layer, MAX_LAYERS};
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn wait_frame(
    session: xr::Session,
    info: *const xr::FrameWaitInfo,
    state: *mut xr::FrameState,
) -> xr::Result {
    entry("xrWaitFrame", || {
        // SAFETY: the application's XrFrameWaitInfo or null (type checked when there).
        unsafe { optional(info, T::FRAME_WAIT_INFO) }?;
        // SAFETY: the application's XrFrameState (null and type checked; its type and chain
        // are left alone).
        let state = unsafe { output(state, T::FRAME_STATE) }?;
        let t = core::wait_frame(session)?;
        state.predicted_display_time = t.predicted_display_time;
        state.predicted_display_period = t.predicted_display_period;
        state.should_render = t.should_render.into();
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn begin_frame(
    session: xr::Session,
    info: *const xr::FrameBeginInfo,
) -> xr::Result {
    entry("xrBeginFrame", || {
        // SAFETY: the application's XrFrameBeginInfo or null (type checked when there).
        unsafe { optional(info, T::FRAME_BEGIN_INFO) }?;
        core::begin_frame(session)
    })
}

/// The info's layers, read: None when there are more than [`MAX_LAYERS`] or the array is
/// null with layers (the core answers from the info then).
///
/// # Safety
/// `info` is the application's XrFrameEndInfo: `layers` null or `layer_count` pointers,
/// each null or a composition layer whose type says which.
unsafe fn layers_of(info: &xr::FrameEndInfo) -> Option<Vec<Layer<'_>>> {
    if info.layer_count > MAX_LAYERS {
        return None;
    }
    // SAFETY: `layer_count` layer pointers per the contract (null checked).
    let ptrs = unsafe { slice(info.layers, info.layer_count) }.ok()?;
    let layers = ptrs
        .iter()
        .map(|&l| {
            // SAFETY: a layer pointer: null or a structure starting with its type.
            match unsafe { ty_of(l) } {
                Some(T::COMPOSITION_LAYER_PROJECTION) => {
                    // SAFETY: its type says it is an XrCompositionLayerProjection.
                    let p = unsafe { &*(l as *const xr::CompositionLayerProjection) };
                    let views = if p.view_count == 2 {
                        // SAFETY: `view_count` views (null checked); their types are
                        // checked by the core.
                        unsafe { slice(p.views, 2) }.ok()
                    } else {
                        None
                    };
                    Layer::Projection(p, views)
                }
                Some(t) => Layer::Other(t),
                None => Layer::Null,
            }
        })
        .collect();
    Some(layers)
}

pub(crate) unsafe extern "system" fn end_frame(
    session: xr::Session,
    info: *const xr::FrameEndInfo,
) -> xr::Result {
    entry("xrEndFrame", || {
        // SAFETY: the application's XrFrameEndInfo (null and type checked).
        let info = unsafe { input(info, T::FRAME_END_INFO) }?;
        // SAFETY: the info's layers, as the spec has the application pass them.
        let layers = unsafe { layers_of(info) };
        core::end_frame(session, info, layers.as_deref())?;
        Ok(OK)
    })
}
