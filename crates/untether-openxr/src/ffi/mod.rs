//! The entry layer: the `extern "system"` functions an OpenXR application (through the
//! loader) calls, for the instance, paths and events ([`instance`]), action sets, actions,
//! bindings and action state ([`actions`]), spaces ([`space`]), sessions ([`session`]), the
//! frame loop ([`frame`]) and swapchains ([`swapchain`]), with the loader's negotiation and
//! `xrGetInstanceProcAddr` ([`dispatch`]).
//!
//! Each entry point only reads and checks what the application passed — null pointers, the
//! structures' `type`, array lengths, the two-call idiom's count and capacity — turns it into
//! references, slices, strings and [`crate::util::Array`]s, calls a safe core function
//! ([`crate::instance`], [`crate::actions`], [`crate::action_state`], [`crate::space`],
//! [`crate::session`], [`crate::frame`], [`crate::swapchain`], all `#![forbid(unsafe_code)]`),
//! and writes what it answers back. Every `unsafe` block of the runtime outside the graphics
//! interop is here ([`raw`] holds the pointer helpers), each with its `SAFETY` reason: the
//! spec's contract on what the application passes, and what was checked. The Vulkan
//! extensions' entry points (`crate::vulkan`, `crate::vulkan1`) live with the Vulkan calls
//! they make; the GL and Vulkan calls the core makes go through safe wrappers there
//! (`crate::gl::app`, `crate::vk_compositor::app`, `crate::vulkan::app`).

#![deny(clippy::undocumented_unsafe_blocks)]

use openxr_sys as xr;

pub mod actions;
pub mod dispatch;
pub mod frame;
pub mod instance;
pub mod raw;
pub mod session;
pub mod space;
pub mod swapchain;

use crate::{guard, negotiate};

/// XR_SUCCESS, for entry points' `Ok`.
pub(crate) const OK: xr::Result = xr::Result::SUCCESS;

/// Runs an entry point's body: a panic becomes `XR_ERROR_RUNTIME_FAILURE` ([`guard`]), an
/// `Err` its error code, an `Ok` its success code (XR_SUCCESS or a qualified success such as
/// XR_SESSION_NOT_FOCUSED).
pub(crate) fn entry(name: &str, f: impl FnOnce() -> Result<xr::Result, xr::Result>) -> xr::Result {
    guard(name, || f().unwrap_or_else(|e| e))
}

/// The loader's first call: agree on the loader–runtime interface and hand over
/// `xrGetInstanceProcAddr`.
///
/// # Safety
/// `loader_info` and `runtime_request` must be null or point to the loader's structures.
#[no_mangle]
pub(crate) unsafe extern "system" fn xrNegotiateLoaderRuntimeInterface(
    loader_info: *const xr::NegotiateLoaderInfo,
    runtime_request: *mut xr::NegotiateRuntimeRequest,
) -> xr::Result {
    guard("xrNegotiateLoaderRuntimeInterface", || {
        crate::util::init_logging();
        // SAFETY: the loader passes its XrNegotiateLoaderInfo or null (checked by `as_ref`);
        // its type, version and size are checked by `negotiate`.
        let info = unsafe { loader_info.as_ref() };
        // SAFETY: likewise its XrNegotiateRuntimeRequest, writable, or null (checked).
        let req = unsafe { runtime_request.as_mut() };
        let (Some(info), Some(req)) = (info, req) else {
            return xr::Result::ERROR_INITIALIZATION_FAILED;
        };
        match negotiate(info, req) {
            Ok(()) => xr::Result::SUCCESS,
            Err(why) => {
                log::error!("xrNegotiateLoaderRuntimeInterface: {why}");
                xr::Result::ERROR_INITIALIZATION_FAILED
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ptr::{null, null_mut};

    use openxr_sys::Handle;

    use super::*;

    /// Null or mistyped arguments and stale handles are refused, never dereferenced.
    #[test]
    fn bad_arguments_are_answered_not_crashed_on() {
        let stale = xr::Instance::from_raw(u64::MAX);
        let session = xr::Session::from_raw(u64::MAX);
        let mut n = 7u32;
        let wrong = xr::SystemGetInfo {
            ty: xr::StructureType::SESSION_CREATE_INFO,
            next: null(),
            form_factor: xr::FormFactor::HEAD_MOUNTED_DISPLAY,
        };
        let mut system = xr::SystemId::from_raw(0);
        let v = xr::Result::ERROR_VALIDATION_FAILURE;
        // SAFETY: every pointer is null or a live local.
        unsafe {
            assert_eq!(
                dispatch::get_instance_proc_addr(stale, c"xrCreateInstance".as_ptr(), null_mut()),
                v
            );
            assert_eq!(instance::get_system(stale, &wrong, &mut system), v);
            assert_eq!(instance::get_system(stale, null(), &mut system), v);
            assert_eq!(instance::string_to_path(stale, null(), null_mut()), v);
            assert_eq!(
                instance::path_to_string(stale, xr::Path::NULL, 4, &mut n, null_mut()),
                v
            );
            assert_eq!(
                instance::enumerate_instance_extension_properties(null(), 0, &mut n, null_mut()),
                xr::Result::SUCCESS
            );
            assert_eq!(n, 3);
            assert_eq!(actions::create_action_set(stale, null(), null_mut()), v);
            assert_eq!(actions::sync_actions(session, null()), v);
            assert_eq!(
                space::locate_views(session, null(), null_mut(), 0, &mut n, null_mut()),
                v
            );
            assert_eq!(
                space::enumerate_reference_spaces(session, 0, &mut n, null_mut()),
                xr::Result::ERROR_HANDLE_INVALID
            );
            assert_eq!(
                space::destroy_space(xr::Space::from_raw(u64::MAX)),
                xr::Result::ERROR_HANDLE_INVALID
            );
            assert_eq!(
                actions::destroy_action(xr::Action::from_raw(u64::MAX)),
                xr::Result::ERROR_HANDLE_INVALID
            );
        }
    }

    /// The session, frame and swapchain entry points: null or mistyped structures are
    /// VALIDATION_FAILURE before anything else, a stale handle HANDLE_INVALID; nothing is
    /// dereferenced that should not be.
    #[test]
    fn sessions_frames_and_swapchains_refuse_bad_arguments() {
        let stale_instance = xr::Instance::from_raw(u64::MAX);
        let stale = xr::Session::from_raw(u64::MAX);
        let stale_sc = xr::Swapchain::from_raw(u64::MAX);
        let v = xr::Result::ERROR_VALIDATION_FAILURE;
        let h = xr::Result::ERROR_HANDLE_INVALID;
        let mut out_session = xr::Session::NULL;
        let mut out_sc = xr::Swapchain::NULL;
        let mut n = 0u32;
        let mut index = 9u32;
        // A structure of another type where each input is expected.
        let wrong = xr::SessionBeginInfo {
            ty: xr::StructureType::SYSTEM_GET_INFO,
            next: null(),
            primary_view_configuration_type: xr::ViewConfigurationType::PRIMARY_STEREO,
        };
        let begin = xr::SessionBeginInfo {
            ty: xr::StructureType::SESSION_BEGIN_INFO,
            ..wrong
        };
        // SAFETY: a zeroed XrFrameState is a valid value (plain integers and a null chain).
        let mut state: xr::FrameState = unsafe { std::mem::zeroed() };
        state.ty = xr::StructureType::FRAME_STATE;
        let end = xr::FrameEndInfo {
            ty: xr::StructureType::FRAME_END_INFO,
            next: null(),
            display_time: xr::Time::from_nanos(1),
            environment_blend_mode: xr::EnvironmentBlendMode::OPAQUE,
            // A null array with a layer: the stale session is found first.
            layer_count: 1,
            layers: null(),
        };
        // SAFETY: every pointer is null, a live local, or a live local of another type whose
        // first field is its XrStructureType (what the entry points read first).
        unsafe {
            assert_eq!(
                session::create_session(stale_instance, null(), &mut out_session),
                v
            );
            assert_eq!(
                session::create_session(
                    stale_instance,
                    (&wrong as *const xr::SessionBeginInfo).cast(),
                    &mut out_session
                ),
                v
            );
            assert_eq!(session::begin_session(stale, &wrong), v);
            assert_eq!(session::begin_session(stale, &begin), h);
            assert_eq!(session::end_session(stale), h);
            assert_eq!(session::request_exit_session(stale), h);
            assert_eq!(session::destroy_session(stale), h);
            assert_eq!(out_session, xr::Session::NULL);

            assert_eq!(frame::wait_frame(stale, null(), null_mut()), v);
            assert_eq!(
                frame::wait_frame(
                    stale,
                    (&wrong as *const xr::SessionBeginInfo).cast(),
                    &mut state
                ),
                v
            );
            assert_eq!(frame::wait_frame(stale, null(), &mut state), h);
            assert_eq!(
                frame::begin_frame(stale, (&wrong as *const xr::SessionBeginInfo).cast()),
                v
            );
            assert_eq!(frame::begin_frame(stale, null()), h);
            assert_eq!(frame::end_frame(stale, null()), v);
            assert_eq!(frame::end_frame(stale, &end), h);

            assert_eq!(
                swapchain::enumerate_swapchain_formats(stale, 0, &mut n, null_mut()),
                h
            );
            assert_eq!(swapchain::create_swapchain(stale, null(), &mut out_sc), v);
            assert_eq!(
                swapchain::acquire_swapchain_image(stale_sc, null(), null_mut()),
                v
            );
            assert_eq!(
                swapchain::acquire_swapchain_image(stale_sc, null(), &mut index),
                h
            );
            assert_eq!(index, 9, "nothing written on failure");
            assert_eq!(swapchain::wait_swapchain_image(stale_sc, null()), v);
            assert_eq!(swapchain::release_swapchain_image(stale_sc, null()), h);
            assert_eq!(
                swapchain::release_swapchain_image(
                    stale_sc,
                    (&wrong as *const xr::SessionBeginInfo).cast()
                ),
                v
            );
            assert_eq!(
                swapchain::enumerate_swapchain_images(stale_sc, 0, &mut n, null_mut()),
                h
            );
            assert_eq!(swapchain::destroy_swapchain(stale_sc), h);
            assert_eq!(out_sc, xr::Swapchain::NULL);
        }
    }
}
