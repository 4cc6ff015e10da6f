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
}
