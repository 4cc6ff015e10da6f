//! The entry layer: the `extern "system"` functions an OpenXR application (through the
//! loader) calls, for the instance, paths and events ([`instance`]), action sets, actions,
//! bindings and action state ([`actions`]), and spaces ([`space`]), with the loader's
//! negotiation and `xrGetInstanceProcAddr` ([`dispatch`]).
//!
//! Each entry point only reads and checks what the application passed — null pointers, the
//! structures' `type`, array lengths, the two-call idiom's count and capacity — turns it into
//! references, slices, strings and [`crate::util::Array`]s, calls a safe core function
//! ([`crate::instance`], [`crate::actions`], [`crate::action_state`], [`crate::space`], all
//! `#![forbid(unsafe_code)]`), and writes what it answers back. Every `unsafe` block of the
//! runtime outside the graphics interop is here ([`raw`] holds the pointer helpers), each
//! with its `SAFETY` reason: the spec's contract on what the application passes, and what
//! was checked. The graphics side's entry points (session, frame, swapchain, Vulkan) still
//! live beside their logic.

#![deny(clippy::undocumented_unsafe_blocks)]

use openxr_sys as xr;

pub mod actions;
pub mod dispatch;
pub mod instance;
pub mod raw;
pub mod space;

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
