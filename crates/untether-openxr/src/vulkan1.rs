//! `XR_KHR_vulkan_enable`, the older Vulkan extension: the application creates its instance
//! and device itself (with the extensions the runtime names: those of the zero-copy export
//! where the loader and device offer them all, else none) and asks for the physical
//! device with `xrGetVulkanGraphicsDeviceKHR`. The runtime reaches the application's Vulkan
//! through the loader library the application already has loaded (`libvulkan.so.1`); from the
//! session on, everything is as for `XR_KHR_vulkan_enable2` ([`crate::vulkan`]).

use std::ffi::{c_char, CStr};

use ash::vk::{self, Handle as _};
use openxr_sys as xr;

use crate::guard;
use crate::util::fill_str;
use crate::vulkan::{
    pick_device, with_loader, VkLoader, VULKAN1_DEVICE_EXTENSIONS, VULKAN1_INSTANCE_EXTENSIONS,
};

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

/// `xrGetVulkanInstanceExtensionsKHR`: the runtime's copies need none; the zero-copy export
/// (issue 34) needs, on a Vulkan 1.0 instance, [`VULKAN1_INSTANCE_EXTENSIONS`]: named when the
/// Vulkan loader offers both (else none, and no device extension either).
pub(crate) unsafe extern "system" fn get_vulkan_instance_extensions(
    instance: xr::Instance,
    system: xr::SystemId,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrGetVulkanInstanceExtensionsKHR", || {
        with_loader(instance, system, |_| {
            let list = if instance_offers_all() {
                names(&VULKAN1_INSTANCE_EXTENSIONS)
            } else {
                String::new()
            };
            // SAFETY: the application's two-call buffer.
            unsafe { fill_str(capacity, count, buffer, &list) }
        })
    })
}

/// `xrGetVulkanDeviceExtensionsKHR`: [`VULKAN1_DEVICE_EXTENSIONS`] when the physical device the
/// runtime named offers them all (and the instance ones were named), else none: the frames
/// are then read back, the reason kept for the host's one line.
pub(crate) unsafe extern "system" fn get_vulkan_device_extensions(
    instance: xr::Instance,
    system: xr::SystemId,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrGetVulkanDeviceExtensionsKHR", || {
        with_loader(instance, system, |l| {
            // SAFETY: the application's instance and the device the runtime named on it.
            let offered = unsafe { device_offers_all(l) };
            l.dma_buf = Some(offered);
            let list = match offered {
                Ok(()) => names(&VULKAN1_DEVICE_EXTENSIONS),
                Err(_) => String::new(),
            };
            // SAFETY: the application's two-call buffer.
            unsafe { fill_str(capacity, count, buffer, &list) }
        })
    })
}

/// Extension names as OpenXR lists them: separated by spaces.
fn names(list: &[&CStr]) -> String {
    list.iter()
        .map(|n| n.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the Vulkan loader offers [`VULKAN1_INSTANCE_EXTENSIONS`].
fn instance_offers_all() -> bool {
    let Some(gipa) = loader_gipa() else {
        return false;
    };
    // SAFETY: the loader's vkGetInstanceProcAddr; a global query, no instance.
    let offered = unsafe {
        ash::Entry::from_static_fn(ash::StaticFn {
            get_instance_proc_addr: gipa,
        })
        .enumerate_instance_extension_properties(None)
    };
    offered.is_ok_and(|o| {
        VULKAN1_INSTANCE_EXTENSIONS
            .iter()
            .all(|n| o.iter().any(|e| e.extension_name_as_c_str() == Ok(n)))
    })
}

/// Whether the physical device the runtime named offers [`VULKAN1_DEVICE_EXTENSIONS`] (and
/// the loader the instance ones), or why not.
///
/// # Safety
/// `l` holds the application's live instance and one of its physical devices when set.
unsafe fn device_offers_all(l: &VkLoader) -> Result<(), &'static str> {
    let (Some(gipa), false, false) = (l.gipa, l.instance == 0, l.physical == 0) else {
        return Err(
            "XR_KHR_vulkan_enable: the device extensions were asked for before \
                    xrGetVulkanGraphicsDeviceKHR named the device",
        );
    };
    if !instance_offers_all() {
        return Err("the Vulkan loader has no VK_KHR_external_memory_capabilities");
    }
    // SAFETY: per the contract.
    let offered = unsafe {
        ash::Instance::load(
            &ash::StaticFn {
                get_instance_proc_addr: gipa,
            },
            vk::Instance::from_raw(l.instance),
        )
        .enumerate_device_extension_properties(vk::PhysicalDevice::from_raw(l.physical))
    }
    .map_err(|_| "the Vulkan device's extensions cannot be listed")?;
    let has = |n: &CStr| offered.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
    match VULKAN1_DEVICE_EXTENSIONS.iter().find(|n| !has(n)) {
        None => Ok(()),
        Some(n) if *n == c"VK_EXT_external_memory_dma_buf" => {
            Err("the Vulkan device has no VK_EXT_external_memory_dma_buf")
        }
        Some(n) if *n == c"VK_KHR_external_memory_fd" => {
            Err("the Vulkan device has no VK_KHR_external_memory_fd")
        }
        Some(_) => Err("the Vulkan device lacks external memory or dedicated allocation"),
    }
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
