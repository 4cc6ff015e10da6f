//! The implicit Vulkan layer `VK_LAYER_UNTETHER_capture` (as obs-vkcapture's): the loader
//! calls `untether_vkGetInstanceProcAddr` / `untether_vkGetDeviceProcAddr` (named in the
//! manifest, so the `LD_PRELOAD`ed library never shadows the loader's own entry points).
//! `vkCreateInstance` / `vkCreateDevice` walk the create info's `pNext` chain to the loader's
//! `VK_LAYER_LINK_INFO`, take the next layer's GetProcAddr from it, advance the link for the
//! layers below, and keep the next functions per dispatch key (the loader's dispatch-table
//! pointer at the start of every dispatchable handle; a queue shares its device's).
//! `vkCreateSwapchainKHR` adds `TRANSFER_SRC` to the images' usage; `vkQueuePresentKHR` hands a
//! due frame to the swapchain's [`Copier`](crate::vk_copy::Copier), which copies it on the
//! presenting queue and makes the present wait for that copy (not for the host).

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::vk::{self, Handle};

use crate::vk_copy::{Copier, SwapchainInfo};
use crate::{ring, timed};

const LOADER_INSTANCE_CREATE_INFO: i32 = 47;
const LOADER_DEVICE_CREATE_INFO: i32 = 48;
const LAYER_LINK_INFO: u32 = 0;
const LOADER_DATA_CALLBACK: u32 = 1;

#[repr(C)]
struct LayerInstanceLink {
    next: *mut LayerInstanceLink,
    next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    next_get_physical_device_proc_addr: *const c_void,
}

#[repr(C)]
struct LayerDeviceLink {
    next: *mut LayerDeviceLink,
    next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    next_get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

/// `VkLayerInstanceCreateInfo` / `VkLayerDeviceCreateInfo`: `u` is the union's first pointer.
#[repr(C)]
struct LayerCreateInfo {
    s_type: i32,
    p_next: *mut c_void,
    function: u32,
    u: *mut c_void,
}

type SetDeviceLoaderData = unsafe extern "system" fn(vk::Device, *mut c_void) -> vk::Result;

struct InstanceData {
    next_gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: ash::Instance,
}

pub(crate) struct DeviceData {
    pub next_gdpa: vk::PFN_vkGetDeviceProcAddr,
    pub device: ash::Device,
    pub swapchain_fn: ash::khr::swapchain::DeviceFn,
    pub memory: vk::PhysicalDeviceMemoryProperties,
    pub set_loader_data: Option<SetDeviceLoaderData>,
    /// The queue family of each queue the application got.
    queues: Mutex<HashMap<u64, u32>>,
    swapchains: Mutex<HashMap<u64, Arc<Mutex<Copier>>>>,
}

static INSTANCES: Mutex<Vec<(usize, Arc<InstanceData>)>> = Mutex::new(Vec::new());
static DEVICES: Mutex<Vec<(usize, Arc<DeviceData>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The loader's dispatch-table pointer of a dispatchable handle.
unsafe fn key<H: Handle>(h: H) -> usize {
    *(h.as_raw() as usize as *const usize)
}

fn find<T>(list: &Mutex<Vec<(usize, Arc<T>)>>, k: usize) -> Option<Arc<T>> {
    lock(list)
        .iter()
        .find(|(key, _)| *key == k)
        .map(|(_, d)| d.clone())
}

/// Finds the loader's link info (`function`) in a create info's chain.
unsafe fn chain_info(mut p: *mut c_void, s_type: i32, function: u32) -> *mut LayerCreateInfo {
    while !p.is_null() {
        let info = p as *mut LayerCreateInfo;
        if (*info).s_type == s_type && (*info).function == function {
            return info;
        }
        p = (*info).p_next;
    }
    std::ptr::null_mut()
}

unsafe extern "system" fn create_instance(
    info: *const vk::InstanceCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Instance,
) -> vk::Result {
    let link = chain_info(
        (*info).p_next as *mut c_void,
        LOADER_INSTANCE_CREATE_INFO,
        LAYER_LINK_INFO,
    );
    if link.is_null() || (*link).u.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let l = (*link).u as *mut LayerInstanceLink;
    let next_gipa = (*l).next_get_instance_proc_addr;
    (*link).u = (*l).next.cast();
    let Some(create) = next_gipa(vk::Instance::null(), c"vkCreateInstance".as_ptr()) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let create: vk::PFN_vkCreateInstance = std::mem::transmute(create);
    let r = create(info, alloc, out);
    if r != vk::Result::SUCCESS {
        return r;
    }
    let inst = *out;
    let instance =
        ash::Instance::load_with(|n| std::mem::transmute(next_gipa(inst, n.as_ptr())), inst);
    lock(&INSTANCES).push((
        key(inst),
        Arc::new(InstanceData {
            next_gipa,
            instance,
        }),
    ));
    vk::Result::SUCCESS
}

unsafe extern "system" fn destroy_instance(
    instance: vk::Instance,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let k = key(instance);
    let data = {
        let mut list = lock(&INSTANCES);
        let i = list.iter().position(|(key, _)| *key == k);
        i.map(|i| list.swap_remove(i).1)
    };
    if let Some(d) = data {
        (d.instance.fp_v1_0().destroy_instance)(instance, alloc);
    }
}

unsafe extern "system" fn create_device(
    physical: vk::PhysicalDevice,
    info: *const vk::DeviceCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Device,
) -> vk::Result {
    let p_next = (*info).p_next as *mut c_void;
    let link = chain_info(p_next, LOADER_DEVICE_CREATE_INFO, LAYER_LINK_INFO);
    if link.is_null() || (*link).u.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let callback = chain_info(p_next, LOADER_DEVICE_CREATE_INFO, LOADER_DATA_CALLBACK);
    let set_loader_data: Option<SetDeviceLoaderData> = (!callback.is_null()
        && !(*callback).u.is_null())
    .then(|| std::mem::transmute((*callback).u));
    let l = (*link).u as *mut LayerDeviceLink;
    let next_gipa = (*l).next_get_instance_proc_addr;
    let next_gdpa = (*l).next_get_device_proc_addr;
    (*link).u = (*l).next.cast();
    let Some(create) = next_gipa(vk::Instance::null(), c"vkCreateDevice".as_ptr()) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let create: vk::PFN_vkCreateDevice = std::mem::transmute(create);
    let r = create(physical, info, alloc, out);
    if r != vk::Result::SUCCESS {
        return r;
    }
    let dev = *out;
    // A physical device shares its instance's dispatch key.
    // (Unknown instance: no memory types, so no copies; everything still forwards.)
    let memory = find(&INSTANCES, key(physical))
        .map(|inst| {
            inst.instance
                .get_physical_device_memory_properties(physical)
        })
        .unwrap_or_default();
    let load = |n: &CStr| std::mem::transmute(next_gdpa(dev, n.as_ptr()));
    let data = DeviceData {
        next_gdpa,
        device: ash::Device::load_with(load, dev),
        swapchain_fn: ash::khr::swapchain::DeviceFn::load(load),
        memory,
        set_loader_data,
        queues: Mutex::new(HashMap::new()),
        swapchains: Mutex::new(HashMap::new()),
    };
    lock(&DEVICES).push((key(dev), Arc::new(data)));
    vk::Result::SUCCESS
}

unsafe extern "system" fn destroy_device(
    device: vk::Device,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let k = key(device);
    let data = {
        let mut list = lock(&DEVICES);
        let i = list.iter().position(|(key, _)| *key == k);
        i.map(|i| list.swap_remove(i).1)
    };
    if let Some(d) = data {
        let copiers: Vec<_> = lock(&d.swapchains).drain().map(|(_, c)| c).collect();
        for c in copiers {
            lock(&c).destroy(&d.device);
        }
        (d.device.fp_v1_0().destroy_device)(device, alloc);
    }
}

unsafe extern "system" fn get_device_queue(
    device: vk::Device,
    family: u32,
    index: u32,
    out: *mut vk::Queue,
) {
    let Some(d) = find(&DEVICES, key(device)) else {
        return;
    };
    (d.device.fp_v1_0().get_device_queue)(device, family, index, out);
    if !out.is_null() && *out != vk::Queue::null() {
        lock(&d.queues).insert((*out).as_raw(), family);
    }
}

unsafe extern "system" fn get_device_queue2(
    device: vk::Device,
    info: *const vk::DeviceQueueInfo2<'_>,
    out: *mut vk::Queue,
) {
    let Some(d) = find(&DEVICES, key(device)) else {
        return;
    };
    (d.device.fp_v1_1().get_device_queue2)(device, info, out);
    if !out.is_null() && *out != vk::Queue::null() {
        lock(&d.queues).insert((*out).as_raw(), (*info).queue_family_index);
    }
}

unsafe extern "system" fn create_swapchain(
    device: vk::Device,
    info: *const vk::SwapchainCreateInfoKHR<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::SwapchainKHR,
) -> vk::Result {
    let Some(d) = find(&DEVICES, key(device)) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let create = d.swapchain_fn.create_swapchain_khr;
    // The images must be copyable: add TRANSFER_SRC (if the surface refuses, as asked).
    let mut ours = *info;
    ours.image_usage |= vk::ImageUsageFlags::TRANSFER_SRC;
    let mut copyable = true;
    let mut r = create(device, &ours, alloc, out);
    if r != vk::Result::SUCCESS {
        copyable = false;
        r = create(device, info, alloc, out);
    }
    if r != vk::Result::SUCCESS {
        return r;
    }
    let sc = *out;
    let get = d.swapchain_fn.get_swapchain_images_khr;
    let mut n = 0u32;
    let mut images = Vec::new();
    if get(device, sc, &mut n, std::ptr::null_mut()) == vk::Result::SUCCESS {
        images = vec![vk::Image::null(); n as usize];
        if get(device, sc, &mut n, images.as_mut_ptr()) != vk::Result::SUCCESS {
            images.clear();
        }
        images.truncate(n as usize);
    }
    let info = SwapchainInfo {
        images,
        format: (*info).image_format,
        extent: (*info).image_extent,
        copyable,
    };
    lock(&d.swapchains).insert(sc.as_raw(), Arc::new(Mutex::new(Copier::new(info))));
    vk::Result::SUCCESS
}

unsafe extern "system" fn destroy_swapchain(
    device: vk::Device,
    sc: vk::SwapchainKHR,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = find(&DEVICES, key(device)) else {
        return;
    };
    let copier = lock(&d.swapchains).remove(&sc.as_raw());
    if let Some(c) = copier {
        lock(&c).destroy(&d.device);
    }
    (d.swapchain_fn.destroy_swapchain_khr)(device, sc, alloc);
}

unsafe extern "system" fn queue_present(
    queue: vk::Queue,
    info: *const vk::PresentInfoKHR<'_>,
) -> vk::Result {
    let Some(d) = find(&DEVICES, key(queue)) else {
        return vk::Result::ERROR_DEVICE_LOST;
    };
    let present = d.swapchain_fn.queue_present_khr;
    let Some(ring) = ring() else {
        return present(queue, info);
    };
    let mut ours = *info;
    let mut wait = vk::Semaphore::null();
    timed(ring, || {
        let now = untether_capture::now_us();
        let i = &*info;
        if i.swapchain_count == 0 {
            return;
        }
        let Some(due) = ring.note_present(now) else {
            return;
        };
        let sc = *i.p_swapchains;
        let image = *i.p_image_indices;
        let copier = lock(&d.swapchains).get(&sc.as_raw()).cloned();
        let Some(copier) = copier else { return };
        let family = lock(&d.queues).get(&queue.as_raw()).copied().unwrap_or(0);
        let waits =
            std::slice::from_raw_parts(i.p_wait_semaphores, i.wait_semaphore_count as usize);
        let mut c = lock(&copier);
        if let Some(sem) = c.copy(&d, ring, queue, family, image, waits, (now, due)) {
            wait = sem;
        }
    });
    if wait != vk::Semaphore::null() {
        // The present waits for the copy, which waited for the application's semaphores.
        ours.wait_semaphore_count = 1;
        ours.p_wait_semaphores = &wait;
    }
    present(queue, &ours)
}

/// Our version of `name`, if the layer intercepts it.
fn intercept(name: &CStr) -> vk::PFN_vkVoidFunction {
    // SAFETY: each pointer is transmuted to the generic void-function type the loader expects;
    // the loader casts it back to the function's real type by name.
    unsafe {
        let f: *const c_void = match name.to_bytes() {
            b"vkGetInstanceProcAddr" => untether_vkGetInstanceProcAddr as *const c_void,
            b"vkGetDeviceProcAddr" => untether_vkGetDeviceProcAddr as *const c_void,
            b"vkCreateInstance" => create_instance as *const c_void,
            b"vkDestroyInstance" => destroy_instance as *const c_void,
            b"vkCreateDevice" => create_device as *const c_void,
            b"vkDestroyDevice" => destroy_device as *const c_void,
            b"vkGetDeviceQueue" => get_device_queue as *const c_void,
            b"vkGetDeviceQueue2" => get_device_queue2 as *const c_void,
            b"vkCreateSwapchainKHR" => create_swapchain as *const c_void,
            b"vkDestroySwapchainKHR" => destroy_swapchain as *const c_void,
            b"vkQueuePresentKHR" => queue_present as *const c_void,
            _ => return None,
        };
        std::mem::transmute::<*const c_void, vk::PFN_vkVoidFunction>(f)
    }
}

/// The layer's `vkGetInstanceProcAddr` (named in the manifest).
#[no_mangle]
pub unsafe extern "system" fn untether_vkGetInstanceProcAddr(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() {
        return None;
    }
    let n = CStr::from_ptr(name);
    if let Some(f) = intercept(n) {
        return Some(f);
    }
    if instance == vk::Instance::null() {
        return None;
    }
    find(&INSTANCES, key(instance)).and_then(|d| (d.next_gipa)(instance, name))
}

/// The layer's `vkGetDeviceProcAddr` (named in the manifest).
#[no_mangle]
pub unsafe extern "system" fn untether_vkGetDeviceProcAddr(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() || device == vk::Device::null() {
        return None;
    }
    let n = CStr::from_ptr(name);
    let d = find(&DEVICES, key(device))?;
    match n.to_bytes() {
        // Instance-level names are not device functions.
        b"vkCreateInstance" | b"vkDestroyInstance" | b"vkCreateDevice" => {
            (d.next_gdpa)(device, name)
        }
        _ => intercept(n).or_else(|| (d.next_gdpa)(device, name)),
    }
}
