//! `XR_KHR_vulkan_enable`, the older Vulkan extension: the application creates its instance
//! and device itself (with the extensions the runtime names: none) and asks for the physical
//! device with `xrGetVulkanGraphicsDeviceKHR`. The runtime reaches the application's Vulkan
//! through the loader library the application already has loaded (`libvulkan.so.1`); from the
//! session on, everything is as for `XR_KHR_vulkan_enable2` ([`crate::vulkan`]).

use std::ffi::c_char;

use ash::vk::{self, Handle as _};
use openxr_sys as xr;

use crate::guard;
use crate::util::fill_str;
use crate::vulkan::{pick_device, with_loader};

/// The Vulkan loader's `vkGetInstanceProcAddr` (the library is loaded, or loaded now, and
/// never unloaded).
pub(crate) fn loader_gipa() -> Option<vk::PFN_vkGetInstanceProcAddr> {
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol, when found, is the loader's
    // vkGetInstanceProcAddr, whose type is PFN_vkGetInstanceProcAddr.
    unsafe {
        let lib = libc::dlopen(
            c"libvulkan.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        );
        if lib.is_null() {
            return None;
        }
        let f = libc::dlsym(lib, c"vkGetInstanceProcAddr".as_ptr());
        (!f.is_null())
            .then(|| std::mem::transmute::<*mut libc::c_void, vk::PFN_vkGetInstanceProcAddr>(f))
    }
}

/// `xrGetVulkanInstanceExtensionsKHR` and `xrGetVulkanDeviceExtensionsKHR`: the runtime needs
/// no extension (an empty list).
pub(crate) unsafe extern "system" fn get_vulkan_extensions(
    instance: xr::Instance,
    system: xr::SystemId,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrGetVulkan*ExtensionsKHR", || {
        with_loader(instance, system, |_| {
            // SAFETY: the application's two-call buffer.
            unsafe { fill_str(capacity, count, buffer, "") }
        })
    })
}

pub(crate) unsafe extern "system" fn get_vulkan_graphics_device(
    instance: xr::Instance,
    system: xr::SystemId,
    vk_instance: xr::platform::VkInstance,
    out: *mut xr::platform::VkPhysicalDevice,
) -> xr::Result {
    guard("xrGetVulkanGraphicsDeviceKHR", || {
        if out.is_null() || vk_instance.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        with_loader(instance, system, |l| {
            let Some(gipa) = l.gipa.or_else(loader_gipa) else {
                log::warn!(
                    "xrGetVulkanGraphicsDeviceKHR: the Vulkan loader (libvulkan.so.1) is not there"
                );
                return xr::Result::ERROR_RUNTIME_FAILURE;
            };
            l.gipa = Some(gipa);
            let handle = vk::Instance::from_raw(vk_instance as u64);
            // SAFETY: the application's live instance, made through the loader.
            match unsafe { pick_device(l, gipa, handle) } {
                Ok(device) => {
                    // SAFETY: checked non-null.
                    unsafe { out.write(device.as_raw() as xr::platform::VkPhysicalDevice) };
                    xr::Result::SUCCESS
                }
                Err(e) => e,
            }
        })
    })
}
