//! Entry points for swapchains ([`crate::swapchain`]).

use openxr_sys as xr;

use super::raw::{array, input, optional, out_value, struct_array};
use super::{entry, OK};
use crate::swapchain as core;
use crate::util::{two_call, two_call_with};
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn enumerate_swapchain_formats(
    session: xr::Session,
    capacity: u32,
    count: *mut u32,
    formats: *mut i64,
) -> xr::Result {
    entry("xrEnumerateSwapchainFormats", || {
        let list = core::swapchain_formats(session)?;
        // SAFETY: the application's two-call array (null checked).
        let out = unsafe { array(capacity, count, formats) }?;
        Ok(two_call(out, list))
    })
}

pub(crate) unsafe extern "system" fn create_swapchain(
    session: xr::Session,
    info: *const xr::SwapchainCreateInfo,
    out: *mut xr::Swapchain,
) -> xr::Result {
    entry("xrCreateSwapchain", || {
        // SAFETY: the application's XrSwapchainCreateInfo (null and type checked).
        let info = unsafe { input(info, T::SWAPCHAIN_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        out.write(core::create_swapchain(session, info)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn destroy_swapchain(swapchain: xr::Swapchain) -> xr::Result {
    entry("xrDestroySwapchain", || {
        core::destroy_swapchain(swapchain)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn enumerate_swapchain_images(
    swapchain: xr::Swapchain,
    capacity: u32,
    count: *mut u32,
    images: *mut xr::SwapchainImageBaseHeader,
) -> xr::Result {
    entry("xrEnumerateSwapchainImages", || {
        let sc = core::swapchain(swapchain)?;
        let len = sc.images.len();
        if sc.vulkan {
            // SAFETY: the application's two-call array of XrSwapchainImageVulkanKHR for a
            // Vulkan swapchain (null and the first type checked; the spec has the
            // application set every element's type).
            let out = unsafe {
                struct_array(
                    capacity,
                    count,
                    images as *mut xr::SwapchainImageVulkanKHR,
                    T::SWAPCHAIN_IMAGE_VULKAN_KHR,
                )
            }?;
            return Ok(two_call_with(out, len, |o, i| o.image = sc.images[i]));
        }
        // SAFETY: likewise, XrSwapchainImageOpenGLKHR for a GL swapchain.
        let out = unsafe {
            struct_array(
                capacity,
                count,
                images as *mut xr::SwapchainImageOpenGLKHR,
                T::SWAPCHAIN_IMAGE_OPENGL_KHR,
            )
        }?;
        Ok(two_call_with(out, len, |o, i| {
            o.image = sc.images[i] as u32
        }))
    })
}

pub(crate) unsafe extern "system" fn acquire_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageAcquireInfo,
    index: *mut u32,
) -> xr::Result {
    entry("xrAcquireSwapchainImage", || {
        // SAFETY: the application's output index (null checked).
        let index = unsafe { out_value(index) }?;
        // SAFETY: the application's XrSwapchainImageAcquireInfo or null (type checked).
        unsafe { optional(info, T::SWAPCHAIN_IMAGE_ACQUIRE_INFO) }?;
        index.write(core::acquire_image(swapchain)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn wait_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageWaitInfo,
) -> xr::Result {
    entry("xrWaitSwapchainImage", || {
        // SAFETY: the application's XrSwapchainImageWaitInfo (null and type checked).
        unsafe { input(info, T::SWAPCHAIN_IMAGE_WAIT_INFO) }?;
        core::wait_image(swapchain)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn release_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageReleaseInfo,
) -> xr::Result {
    entry("xrReleaseSwapchainImage", || {
        // SAFETY: the application's XrSwapchainImageReleaseInfo or null (type checked).
        unsafe { optional(info, T::SWAPCHAIN_IMAGE_RELEASE_INFO) }?;
        core::release_image(swapchain)?;
        Ok(OK)
    })
}
