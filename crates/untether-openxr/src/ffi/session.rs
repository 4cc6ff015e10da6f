//! Entry points for sessions ([`crate::session`]).

use openxr_sys as xr;

use super::raw::{find_in_chain, input, out_value};
use super::{entry, OK};
use crate::session::{self as core, Binding};
use crate::vulkan::Vk;
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn create_session(
    instance: xr::Instance,
    info: *const xr::SessionCreateInfo,
    out: *mut xr::Session,
) -> xr::Result {
    entry("xrCreateSession", || {
        // SAFETY: the application's XrSessionCreateInfo (null and type checked).
        let info = unsafe { input(info, T::SESSION_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        // SAFETY: the info's next chain, valid per the spec.
        let (gl, vk) = unsafe {
            (
                find_in_chain(info.next, T::GRAPHICS_BINDING_OPENGL_XLIB_KHR),
                find_in_chain(info.next, T::GRAPHICS_BINDING_VULKAN_KHR),
            )
        };
        let vk = vk.map(|b| {
            // SAFETY: a chained structure whose type says it is an XrGraphicsBindingVulkanKHR
            // (XR_KHR_vulkan_enable's XrGraphicsBindingVulkan2KHR has the same layout).
            unsafe { *(b as *const xr::GraphicsBindingVulkanKHR) }
        });
        let binding = match (gl, vk) {
            (Some(_), None) => Binding::OpenGl,
            (None, Some(b)) => Binding::Vulkan {
                instance: b.instance as u64,
            },
            _ => Binding::Unsupported,
        };
        let make_vk = |gipa, dma_buf| match vk {
            // SAFETY: the binding holds the application's live Vulkan handles, and
            // `create_session` passes the `vkGetInstanceProcAddr` they were made through
            // (the instance's, checked against the binding's VkInstance).
            Some(b) => unsafe { Vk::new(gipa, &b, dma_buf) },
            None => Err("no Vulkan binding".to_string()),
        };
        out.write(core::create_session(
            instance,
            info.system_id,
            binding,
            make_vk,
        )?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn destroy_session(session: xr::Session) -> xr::Result {
    entry("xrDestroySession", || {
        core::destroy_session(session)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn begin_session(
    session: xr::Session,
    info: *const xr::SessionBeginInfo,
) -> xr::Result {
    entry("xrBeginSession", || {
        // SAFETY: the application's XrSessionBeginInfo (null and type checked).
        let info = unsafe { input(info, T::SESSION_BEGIN_INFO) }?;
        core::begin_session(session, info)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn end_session(session: xr::Session) -> xr::Result {
    entry("xrEndSession", || {
        core::end_session(session)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn request_exit_session(session: xr::Session) -> xr::Result {
    entry("xrRequestExitSession", || {
        core::request_exit_session(session)?;
        Ok(OK)
    })
}
