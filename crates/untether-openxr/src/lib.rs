//! untether as an OpenXR runtime.
//!
//! The OpenXR loader finds this library through a runtime manifest (`untether_openxr.json`,
//! named by `XR_RUNTIME_JSON` or the user's `active_runtime.json`) and calls
//! [`ffi::xrNegotiateLoaderRuntimeInterface`]; every other entry point is handed out by
//! [`ffi::dispatch::get_instance_proc_addr`]. Inside the application's process the runtime runs an
//! untether host through the embedding API ([`stream::Stream`]): the client connects to it as
//! to any host, its head pose drives the views, and each frame's projection layer (two views)
//! becomes one side-by-side stereo frame, tagged with the pose it was rendered for.
//!
//! Graphics: `XR_KHR_opengl_enable` (Xlib/GLX). Swapchain images are GL textures the runtime
//! creates in the application's context; at `xrEndFrame` the two views are blitted into one
//! stereo texture and read back through a pixel buffer object, one frame in flight, handed to
//! the encoder by the next `xrWaitFrame` as soon as its fence passes ([`gl::Compositor`]). `XR_KHR_vulkan_enable2` and `XR_KHR_vulkan_enable`: swapchain images
//! on the application's device; at `xrEndFrame` a blit and a copy into host-visible memory on
//! the application's queue, its fence waited for by the next `xrWaitFrame` (within its
//! sleep), one frame in flight ([`vk_compositor::VkCompositor`]). Both encode linear swapchains
//! to sRGB.
//!
//! Every entry point catches panics ([`guard`]) and answers with an `XrResult`; nothing the
//! application passes can crash it.
//!
//! Layout: [`ffi`] is the entry layer for every OpenXR call but the Vulkan extensions' —
//! it checks and reads the application's structures and pointers and calls the safe core
//! ([`instance`], [`actions`], [`action_state`], [`space`], [`session`], [`frame`],
//! [`swapchain`], [`util`], [`runtime`], [`table`], all `#![forbid(unsafe_code)]`), then
//! writes the answers back. The graphics interop ([`gl`], [`vulkan`], [`vulkan1`],
//! [`vk_compositor`]) calls GL and Vulkan; the core reaches it through safe wrappers there
//! (`gl::app`, `vulkan::app`, `vk_compositor::app`). Objects live in tables
//! ([`table::Table`]), one lock per kind: sessions (each behind its own lock), spaces and
//! swapchains (each with its own lock for its image cycle) in [`runtime`], action sets and
//! actions in [`actions`]; the instance in one slot with its changing parts behind its own
//! lock. The lock order is in [`runtime`]'s doc.

use std::panic::{catch_unwind, AssertUnwindSafe};

use openxr_sys as xr;

pub mod action_state;
pub mod actions;
pub mod ffi;
pub mod frame;
pub mod gamepad;
pub mod gl;
pub mod instance;
pub mod math;
pub mod runtime;
pub mod session;
pub mod space;
pub mod stream;
pub mod swapchain;
pub mod table;
pub mod util;
pub mod vk_compositor;
pub mod vulkan;
pub mod vulkan1;

/// The runtime's name, as `xrGetInstanceProperties` and the system report it.
pub const RUNTIME_NAME: &str = "untether";

/// Runs an entry point's body, turning a panic into `XR_ERROR_RUNTIME_FAILURE` (logged).
pub fn guard(name: &str, f: impl FnOnce() -> xr::Result) -> xr::Result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => {
            if r.into_raw() < 0 {
                log::debug!("{name}: {r:?}");
            }
            r
        }
        Err(_) => {
            log::error!(
                "{name}: internal error (panic caught); returning XR_ERROR_RUNTIME_FAILURE"
            );
            xr::Result::ERROR_RUNTIME_FAILURE
        }
    }
}

/// The oldest and newest OpenXR API versions this runtime implements (1.0.x).
pub const API_MIN: xr::Version = xr::Version::new(1, 0, 0);
pub const API_MAX: xr::Version = xr::Version::new(1, 0, 34);

/// Checks the loader's structures and fills in the runtime's answer.
pub fn negotiate(
    info: &xr::NegotiateLoaderInfo,
    req: &mut xr::NegotiateRuntimeRequest,
) -> Result<(), String> {
    use xr::{NegotiateLoaderInfo as Info, NegotiateRuntimeRequest as Req};
    if info.struct_type != Info::TYPE
        || info.struct_version != Info::VERSION
        || info.struct_size != std::mem::size_of::<Info>()
    {
        return Err(
            "the loader's XrNegotiateLoaderInfo has an unknown type, version or size".into(),
        );
    }
    if req.struct_type != Req::TYPE
        || req.struct_version != Req::VERSION
        || req.struct_size != std::mem::size_of::<Req>()
    {
        return Err(
            "the loader's XrNegotiateRuntimeRequest has an unknown type, version or size".into(),
        );
    }
    const INTERFACE: u32 = xr::CURRENT_LOADER_RUNTIME_VERSION as u32;
    if info.min_interface_version > INTERFACE || info.max_interface_version < INTERFACE {
        return Err(format!(
            "loader interface versions {}..={} do not include this runtime's {INTERFACE}",
            info.min_interface_version, info.max_interface_version
        ));
    }
    if info.max_api_version < API_MIN || info.min_api_version > API_MAX {
        return Err(format!(
            "loader API versions {:?}..={:?} do not overlap this runtime's {API_MIN:?}..={API_MAX:?}",
            info.min_api_version, info.max_api_version
        ));
    }
    req.runtime_interface_version = INTERFACE;
    req.runtime_api_version = if info.max_api_version < API_MAX {
        info.max_api_version
    } else {
        API_MAX
    };
    req.get_instance_proc_addr = Some(ffi::dispatch::get_instance_proc_addr);
    Ok(())
}
