//! Vulkan in the application's process (`XR_KHR_vulkan_enable2`): the runtime creates the
//! application's `VkInstance` and `VkDevice` through the application's own
//! `vkGetInstanceProcAddr` (adding nothing to them), names the physical device, makes the
//! swapchain images on the application's device, and copies each frame's two views on the
//! application's queue ([`crate::vk_compositor`]).
//!
//! Swapchain images are handed over in `VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL` (the
//! extension's contract) and the application gives them back in it.

use std::ffi::{c_char, CStr};

use ash::vk::{self, Handle as _};
use openxr_sys as xr;

use crate::guard;
use crate::runtime;
use crate::util::ty_of;

/// `VK_FORMAT_R8G8B8A8_SRGB`, `VK_FORMAT_B8G8R8A8_SRGB`, `VK_FORMAT_R8G8B8A8_UNORM`,
/// `VK_FORMAT_B8G8R8A8_UNORM`: the colour formats Vulkan swapchains offer, preferred first.
pub const FORMATS: [i64; 4] = [43, 50, 37, 44];

/// What the instance keeps between the extension's calls: the application's
/// `vkGetInstanceProcAddr` and the `VkInstance` it asked a physical device for.
#[derive(Clone, Copy, Default)]
pub struct VkLoader {
    pub gipa: Option<vk::PFN_vkGetInstanceProcAddr>,
    pub instance: u64,
    pub requirements_asked: bool,
    /// The Vulkan version the application asked for its instance (`xrCreateVulkanInstanceKHR`;
    /// 0 when unknown).
    pub api_version: u32,
    /// Whether the device made by `xrCreateVulkanDeviceKHR` has the zero-copy export's
    /// extensions ([`DMA_BUF_EXTENSIONS`]), or why not; None: the runtime did not make it.
    pub dma_buf: Option<Result<(), &'static str>>,
    /// The physical device the runtime named (`xrGetVulkanGraphicsDevice*KHR`).
    pub physical: u64,
}

/// The device extensions the zero-copy export needs (issue 34): the stereo image's memory
/// exported as a dma-buf fd. Added to the application's device only where its physical device
/// offers all of them.
pub const DMA_BUF_EXTENSIONS: [&CStr; 3] = [
    c"VK_KHR_external_memory",
    c"VK_KHR_external_memory_fd",
    c"VK_EXT_external_memory_dma_buf",
];

/// `XR_KHR_vulkan_enable`'s lists (the application makes its instance and device itself, of
/// any version, so 1.0 included): the instance extensions the export's device extensions
/// depend on under Vulkan 1.0, and besides [`DMA_BUF_EXTENSIONS`] the dedicated allocation
/// the export uses.
pub const VULKAN1_INSTANCE_EXTENSIONS: [&CStr; 2] = [
    c"VK_KHR_get_physical_device_properties2",
    c"VK_KHR_external_memory_capabilities",
];
pub const VULKAN1_DEVICE_EXTENSIONS: [&CStr; 5] = [
    c"VK_KHR_external_memory",
    c"VK_KHR_external_memory_fd",
    c"VK_EXT_external_memory_dma_buf",
    c"VK_KHR_get_memory_requirements2",
    c"VK_KHR_dedicated_allocation",
];

/// Which of [`DMA_BUF_EXTENSIONS`] to add to a device of `physical` (those the application
/// did not enable itself), or why the export cannot be: an extension the device does not
/// offer, or a Vulkan 1.0 instance or device (external memory's instance side is 1.1's).
///
/// # Safety
/// `inst` is the application's live instance and `physical` one of its devices.
pub unsafe fn dma_buf_extensions(
    inst: &ash::Instance,
    physical: vk::PhysicalDevice,
    api_version: u32,
    enabled: &[&CStr],
) -> Result<Vec<&'static CStr>, &'static str> {
    // No application info (0) is a 1.0 instance.
    if api_version < vk::API_VERSION_1_1 {
        return Err("the application's Vulkan instance is 1.0 (exporting memory needs 1.1)");
    }
    // SAFETY: per the contract.
    let (props, offered) = unsafe {
        (
            inst.get_physical_device_properties(physical),
            inst.enumerate_device_extension_properties(physical),
        )
    };
    if props.api_version < vk::API_VERSION_1_1 {
        return Err("the Vulkan device is 1.0 (exporting memory needs 1.1)");
    }
    let offered = offered.map_err(|_| "the Vulkan device's extensions cannot be listed")?;
    let has = |name: &CStr| {
        offered
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };
    if let Some(missing) = DMA_BUF_EXTENSIONS.iter().find(|e| !has(e)) {
        return Err(match missing.to_bytes() {
            b"VK_KHR_external_memory" => "the Vulkan device has no VK_KHR_external_memory",
            b"VK_KHR_external_memory_fd" => "the Vulkan device has no VK_KHR_external_memory_fd",
            _ => "the Vulkan device has no VK_EXT_external_memory_dma_buf",
        });
    }
    Ok(DMA_BUF_EXTENSIONS
        .into_iter()
        .filter(|e| !enabled.contains(e))
        .collect())
}

/// The application's Vulkan objects (its `XrGraphicsBindingVulkan2KHR`), their functions, and
/// the command pool the runtime records its copies from.
pub struct Vk {
    pub device: ash::Device,
    pub queue: vk::Queue,
    pub queue_family: u32,
    pub memory: vk::PhysicalDeviceMemoryProperties,
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    /// Exporting the stereo image as a dma-buf (zero-copy encode): `vkGetMemoryFdKHR` on a
    /// device with [`DMA_BUF_EXTENSIONS`], or why not.
    pub export: Result<ash::khr::external_memory_fd::Device, String>,
    pool: vk::CommandPool,
}

/// One swapchain's images and their memory.
pub struct VkImages {
    pub images: Vec<vk::Image>,
    memory: Vec<vk::DeviceMemory>,
}

fn static_fn(gipa: vk::PFN_vkGetInstanceProcAddr) -> ash::StaticFn {
    ash::StaticFn {
        get_instance_proc_addr: gipa,
    }
}

/// The OpenXR spelling of the application's `vkGetInstanceProcAddr`, as ash's.
fn gipa_of(f: xr::platform::VkGetInstanceProcAddr) -> vk::PFN_vkGetInstanceProcAddr {
    // SAFETY: the same C function (VkInstance, const char*) -> PFN_vkVoidFunction; the handle
    // types are both one pointer.
    unsafe {
        std::mem::transmute::<xr::platform::VkGetInstanceProcAddr, vk::PFN_vkGetInstanceProcAddr>(f)
    }
}

/// A memory type in `bits` with `want`, or (with `fallback`) any type in `bits`.
pub fn memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    want: vk::MemoryPropertyFlags,
    fallback: bool,
) -> Option<u32> {
    let types = &props.memory_types[..props.memory_type_count.min(32) as usize];
    let ok = |i: usize| bits & (1 << i) != 0;
    (0..types.len())
        .find(|&i| ok(i) && types[i].property_flags.contains(want))
        .or_else(|| {
            fallback
                .then(|| (0..types.len()).find(|&i| ok(i)))
                .flatten()
        })
        .map(|i| i as u32)
}

impl Vk {
    /// The functions for the application's binding, and a command pool on its queue family.
    ///
    /// # Safety
    /// `b` must hold the application's live Vulkan handles, created through `gipa`.
    pub unsafe fn new(
        gipa: vk::PFN_vkGetInstanceProcAddr,
        b: &xr::GraphicsBindingVulkanKHR,
        dma_buf: Option<Result<(), &'static str>>,
    ) -> Result<Vk, String> {
        let instance = vk::Instance::from_raw(b.instance as u64);
        let physical = vk::PhysicalDevice::from_raw(b.physical_device as u64);
        let device = vk::Device::from_raw(b.device as u64);
        // SAFETY: the caller's handles; functions resolved through the application's loader.
        unsafe {
            let instance = ash::Instance::load(&static_fn(gipa), instance);
            let memory = instance.get_physical_device_memory_properties(physical);
            let device = ash::Device::load(instance.fp_v1_0(), device);
            let queue = device.get_device_queue(b.queue_family_index, b.queue_index);
            let export = match dma_buf {
                None => Err("XR_KHR_vulkan_enable: the application did not ask for the \
                     runtime's Vulkan device extensions (external memory)"
                    .to_string()),
                Some(Err(why)) => Err(why.to_string()),
                Some(Ok(())) => {
                    match instance
                        .get_device_proc_addr(device.handle(), c"vkGetMemoryFdKHR".as_ptr())
                    {
                        Some(_) => Ok(ash::khr::external_memory_fd::Device::new(
                            &instance, &device,
                        )),
                        None => Err("the Vulkan device has no vkGetMemoryFdKHR".to_string()),
                    }
                }
            };
            let pool = device
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(b.queue_family_index)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .map_err(|e| format!("vkCreateCommandPool: {e}"))?;
            Ok(Vk {
                device,
                queue,
                queue_family: b.queue_family_index,
                memory,
                instance,
                physical,
                export,
                pool,
            })
        }
    }

    /// A primary command buffer from the runtime's pool.
    ///
    /// # Safety
    /// On the application's thread (the pool is the session's, used under its lock).
    pub unsafe fn command_buffer(&self) -> Result<vk::CommandBuffer, vk::Result> {
        // SAFETY: the pool is this object's.
        unsafe {
            Ok(self.device.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )?[0])
        }
    }

    /// # Safety
    /// `cmd` must come from [`Vk::command_buffer`] and not be pending.
    pub unsafe fn free_command_buffer(&self, cmd: vk::CommandBuffer) {
        // SAFETY: per the contract.
        unsafe { self.device.free_command_buffers(self.pool, &[cmd]) };
    }

    /// Makes `count` images for a swapchain (device-local), already in
    /// `COLOR_ATTACHMENT_OPTIMAL`.
    ///
    /// # Safety
    /// On the application's thread, during `xrCreateSwapchain` (the queue is used).
    pub unsafe fn create_images(
        &self,
        info: &xr::SwapchainCreateInfo,
        count: usize,
    ) -> Result<VkImages, String> {
        let mut usage = vk::ImageUsageFlags::COLOR_ATTACHMENT
            | vk::ImageUsageFlags::TRANSFER_SRC
            | vk::ImageUsageFlags::SAMPLED;
        let u = info.usage_flags;
        if u.intersects(xr::SwapchainUsageFlags::TRANSFER_DST) {
            usage |= vk::ImageUsageFlags::TRANSFER_DST;
        }
        if u.intersects(xr::SwapchainUsageFlags::UNORDERED_ACCESS) {
            usage |= vk::ImageUsageFlags::STORAGE;
        }
        if u.intersects(xr::SwapchainUsageFlags::INPUT_ATTACHMENT) {
            usage |= vk::ImageUsageFlags::INPUT_ATTACHMENT;
        }
        let flags = if u.intersects(xr::SwapchainUsageFlags::MUTABLE_FORMAT) {
            vk::ImageCreateFlags::MUTABLE_FORMAT
        } else {
            vk::ImageCreateFlags::empty()
        };
        let mut made = VkImages {
            images: Vec::new(),
            memory: Vec::new(),
        };
        // SAFETY: objects on the application's device, destroyed on failure.
        let r = unsafe { self.make_images(info, usage, flags, count, &mut made) };
        if let Err(e) = r {
            // SAFETY: what was made above, not yet used.
            unsafe { self.destroy_images(made) };
            return Err(e);
        }
        Ok(made)
    }

    unsafe fn make_images(
        &self,
        info: &xr::SwapchainCreateInfo,
        usage: vk::ImageUsageFlags,
        flags: vk::ImageCreateFlags,
        count: usize,
        made: &mut VkImages,
    ) -> Result<(), String> {
        let dev = &self.device;
        let e = |what: &'static str| move |e: vk::Result| format!("{what}: {e}");
        // SAFETY: plain object creation on the application's device.
        unsafe {
            for _ in 0..count {
                let image = dev
                    .create_image(
                        &vk::ImageCreateInfo::default()
                            .flags(flags)
                            .image_type(vk::ImageType::TYPE_2D)
                            .format(vk::Format::from_raw(info.format as i32))
                            .extent(vk::Extent3D {
                                width: info.width,
                                height: info.height,
                                depth: 1,
                            })
                            .mip_levels(info.mip_count)
                            .array_layers(info.array_size)
                            .samples(vk::SampleCountFlags::TYPE_1)
                            .tiling(vk::ImageTiling::OPTIMAL)
                            .usage(usage)
                            .sharing_mode(vk::SharingMode::EXCLUSIVE)
                            .initial_layout(vk::ImageLayout::UNDEFINED),
                        None,
                    )
                    .map_err(e("vkCreateImage"))?;
                made.images.push(image);
                let req = dev.get_image_memory_requirements(image);
                let kind = memory_type(
                    &self.memory,
                    req.memory_type_bits,
                    vk::MemoryPropertyFlags::DEVICE_LOCAL,
                    true,
                )
                .ok_or("no memory type for the swapchain's images")?;
                let memory = dev
                    .allocate_memory(
                        &vk::MemoryAllocateInfo::default()
                            .allocation_size(req.size)
                            .memory_type_index(kind),
                        None,
                    )
                    .map_err(e("vkAllocateMemory"))?;
                made.memory.push(memory);
                dev.bind_image_memory(image, memory, 0)
                    .map_err(e("vkBindImageMemory"))?;
            }
            self.to_color_attachment(&made.images)
                .map_err(e("moving the new images to COLOR_ATTACHMENT_OPTIMAL"))
        }
    }

    /// One submission that moves new images from UNDEFINED to COLOR_ATTACHMENT_OPTIMAL,
    /// waited for (swapchain creation, not the frame loop).
    unsafe fn to_color_attachment(&self, images: &[vk::Image]) -> Result<(), vk::Result> {
        let dev = &self.device;
        // SAFETY: a one-time command buffer and fence, freed before returning.
        unsafe {
            let cmd = self.command_buffer()?;
            let fence = dev.create_fence(&vk::FenceCreateInfo::default(), None)?;
            let barriers: Vec<_> = images
                .iter()
                .map(|&image| {
                    vk::ImageMemoryBarrier::default()
                        .old_layout(vk::ImageLayout::UNDEFINED)
                        .new_layout(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL)
                        .src_access_mask(vk::AccessFlags::empty())
                        .dst_access_mask(
                            vk::AccessFlags::COLOR_ATTACHMENT_WRITE
                                | vk::AccessFlags::COLOR_ATTACHMENT_READ,
                        )
                        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                        .image(image)
                        .subresource_range(all_of(vk::ImageAspectFlags::COLOR))
                })
                .collect();
            let r = (|| {
                dev.begin_command_buffer(
                    cmd,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )?;
                dev.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &barriers,
                );
                dev.end_command_buffer(cmd)?;
                let cmds = [cmd];
                dev.queue_submit(
                    self.queue,
                    &[vk::SubmitInfo::default().command_buffers(&cmds)],
                    fence,
                )?;
                dev.wait_for_fences(&[fence], true, 5_000_000_000)
            })();
            dev.destroy_fence(fence, None);
            self.free_command_buffer(cmd);
            r
        }
    }

    /// # Safety
    /// No work of the runtime's may still use the images.
    pub unsafe fn destroy_images(&self, images: VkImages) {
        // SAFETY: objects this runtime created on the application's device.
        unsafe {
            for i in images.images {
                self.device.destroy_image(i, None);
            }
            for m in images.memory {
                self.device.free_memory(m, None);
            }
        }
    }

    /// Frees the runtime's pool (the device is the application's).
    ///
    /// # Safety
    /// No command buffer of the pool may be pending.
    pub unsafe fn destroy(self) {
        // SAFETY: per the contract.
        unsafe { self.device.destroy_command_pool(self.pool, None) };
    }
}

/// The calls on a session's [`Vk`] the safe core makes ([`crate::session`],
/// [`crate::swapchain`]), as safe functions: see [`crate::vk_compositor::app`] for why they are
/// sound (a session's `Vk` is made from the application's live handles and used only in its
/// OpenXR calls, under the session's lock).
pub mod app {
    use super::{Vk, VkImages};
    use openxr_sys as xr;

    /// [`Vk::create_images`], in `xrCreateSwapchain`.
    pub fn create_images(
        v: &Vk,
        info: &xr::SwapchainCreateInfo,
        count: usize,
    ) -> Result<VkImages, String> {
        // SAFETY: the application's thread during xrCreateSwapchain, its device alive.
        unsafe { v.create_images(info, count) }
    }

    /// [`Vk::destroy_images`]: the caller finished the compositor's copy in flight first
    /// ([`crate::vk_compositor::app::finish`]), so no work of the runtime's uses them.
    pub fn destroy_images(v: &Vk, images: VkImages) {
        // SAFETY: as documented: the copy that could read them is finished.
        unsafe { v.destroy_images(images) }
    }

    /// [`Vk::destroy`]: the caller destroyed the compositor (its one command buffer) first.
    pub fn destroy(v: Vk) {
        // SAFETY: no command buffer of the pool is left, so none is pending.
        unsafe { v.destroy() }
    }
}

/// Every mip level and layer of an image.
pub fn all_of(aspect: vk::ImageAspectFlags) -> vk::ImageSubresourceRange {
    vk::ImageSubresourceRange {
        aspect_mask: aspect,
        base_mip_level: 0,
        level_count: vk::REMAINING_MIP_LEVELS,
        base_array_layer: 0,
        layer_count: vk::REMAINING_ARRAY_LAYERS,
    }
}

/// Checks the instance and system, and runs `f` with the instance's Vulkan state (under the
/// instance's state lock).
pub(crate) fn with_loader(
    instance: xr::Instance,
    system: xr::SystemId,
    f: impl FnOnce(&mut VkLoader) -> xr::Result,
) -> xr::Result {
    match runtime::system(instance, system) {
        Ok(i) if i.vulkan => f(&mut i.state().vk),
        Ok(_) => {
            log::warn!(
                "the application enabled neither XR_KHR_vulkan_enable2 nor XR_KHR_vulkan_enable"
            );
            xr::Result::ERROR_FUNCTION_UNSUPPORTED
        }
        Err(e) => e,
    }
}

/// `xrGetVulkanGraphicsRequirements2KHR` and `xrGetVulkanGraphicsRequirementsKHR` (the same).
pub(crate) unsafe extern "system" fn get_vulkan_graphics_requirements2(
    instance: xr::Instance,
    system: xr::SystemId,
    req: *mut xr::GraphicsRequirementsVulkanKHR,
) -> xr::Result {
    guard("xrGetVulkanGraphicsRequirements2KHR", || {
        // SAFETY: type read first.
        if unsafe { ty_of(req) } != Some(xr::StructureType::GRAPHICS_REQUIREMENTS_VULKAN_KHR) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        with_loader(instance, system, |vk| {
            vk.requirements_asked = true;
            // SAFETY: checked.
            let r = unsafe { &mut *req };
            // Image copies, blits and fences: Vulkan 1.0 has them all.
            r.min_api_version_supported = xr::Version::new(1, 0, 0);
            r.max_api_version_supported = xr::Version::new(1, 3, 0);
            xr::Result::SUCCESS
        })
    })
}

pub(crate) unsafe extern "system" fn create_vulkan_instance(
    instance: xr::Instance,
    info: *const xr::VulkanInstanceCreateInfoKHR,
    out: *mut xr::platform::VkInstance,
    vk_result: *mut xr::platform::VkResult,
) -> xr::Result {
    guard("xrCreateVulkanInstanceKHR", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::VULKAN_INSTANCE_CREATE_INFO_KHR)
            || out.is_null()
            || vk_result.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let (Some(gipa), false) = (
            info.pfn_get_instance_proc_addr,
            info.vulkan_create_info.is_null(),
        ) else {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        };
        with_loader(instance, info.system_id, |l| {
            if !l.requirements_asked {
                return xr::Result::ERROR_GRAPHICS_REQUIREMENTS_CALL_MISSING;
            }
            let gipa = gipa_of(gipa);
            // SAFETY: the application's create info (checked non-null) and its application
            // info, when it gives one.
            l.api_version = unsafe {
                let ci = &*(info.vulkan_create_info as *const vk::InstanceCreateInfo);
                ci.p_application_info.as_ref().map_or(0, |a| a.api_version)
            };
            // SAFETY: the application's loader and create info, passed through unchanged.
            let r = unsafe {
                let entry = ash::Entry::from_static_fn(static_fn(gipa));
                let mut made = vk::Instance::null();
                let r = (entry.fp_v1_0().create_instance)(
                    info.vulkan_create_info as *const vk::InstanceCreateInfo,
                    info.vulkan_allocator as *const vk::AllocationCallbacks,
                    &mut made,
                );
                out.write(made.as_raw() as xr::platform::VkInstance);
                vk_result.write(r.as_raw());
                r
            };
            if r == vk::Result::SUCCESS {
                l.gipa = Some(gipa);
                xr::Result::SUCCESS
            } else {
                log::warn!("xrCreateVulkanInstanceKHR: vkCreateInstance: {r}");
                xr::Result::ERROR_RUNTIME_FAILURE
            }
        })
    })
}

pub(crate) unsafe extern "system" fn get_vulkan_graphics_device2(
    instance: xr::Instance,
    info: *const xr::VulkanGraphicsDeviceGetInfoKHR,
    out: *mut xr::platform::VkPhysicalDevice,
) -> xr::Result {
    guard("xrGetVulkanGraphicsDevice2KHR", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::VULKAN_GRAPHICS_DEVICE_GET_INFO_KHR)
            || out.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        with_loader(instance, info.system_id, |l| {
            let Some(gipa) = l.gipa else {
                log::warn!("xrGetVulkanGraphicsDevice2KHR: the VkInstance was not made by xrCreateVulkanInstanceKHR");
                return xr::Result::ERROR_CALL_ORDER_INVALID;
            };
            let handle = vk::Instance::from_raw(info.vulkan_instance as u64);
            // SAFETY: the application's instance, made through `gipa`.
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

/// The physical device the application is to use: a GPU if the instance has one, else the
/// first (lavapipe, a CPU device); remembered with its instance.
///
/// # Safety
/// `handle` must be the application's live instance, made through `gipa`.
pub unsafe fn pick_device(
    l: &mut VkLoader,
    gipa: vk::PFN_vkGetInstanceProcAddr,
    handle: vk::Instance,
) -> Result<vk::PhysicalDevice, xr::Result> {
    {
        {
            // SAFETY: per the contract.
            let devices = unsafe {
                ash::Instance::load(&static_fn(gipa), handle)
                    .enumerate_physical_devices()
                    .map(|d| {
                        let inst = ash::Instance::load(&static_fn(gipa), handle);
                        d.into_iter()
                            .map(|p| (p, inst.get_physical_device_properties(p).device_type))
                            .collect::<Vec<_>>()
                    })
            };
            let devices = match devices {
                Ok(d) => d,
                Err(e) => {
                    log::warn!("vkEnumeratePhysicalDevices: {e}");
                    return Err(xr::Result::ERROR_RUNTIME_FAILURE);
                }
            };
            let Some((device, _)) = devices
                .iter()
                .find(|(_, t)| *t != vk::PhysicalDeviceType::CPU)
                .or(devices.first())
            else {
                log::warn!("the Vulkan instance has no physical device");
                return Err(xr::Result::ERROR_RUNTIME_FAILURE);
            };
            l.instance = handle.as_raw();
            l.physical = device.as_raw();
            Ok(*device)
        }
    }
}

pub(crate) unsafe extern "system" fn create_vulkan_device(
    instance: xr::Instance,
    info: *const xr::VulkanDeviceCreateInfoKHR,
    out: *mut xr::platform::VkDevice,
    vk_result: *mut xr::platform::VkResult,
) -> xr::Result {
    guard("xrCreateVulkanDeviceKHR", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::VULKAN_DEVICE_CREATE_INFO_KHR)
            || out.is_null()
            || vk_result.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        if info.vulkan_create_info.is_null() || info.pfn_get_instance_proc_addr.is_none() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        with_loader(instance, info.system_id, |l| {
            let (Some(gipa), false) = (l.gipa, l.instance == 0) else {
                log::warn!("xrCreateVulkanDeviceKHR: call xrGetVulkanGraphicsDevice2KHR first");
                return xr::Result::ERROR_CALL_ORDER_INVALID;
            };
            // SAFETY: the application's instance, physical device and create info, passed
            // through with the zero-copy export's extensions added where the device offers
            // them (the application's own list and chain are kept).
            let r = unsafe {
                let inst =
                    ash::Instance::load(&static_fn(gipa), vk::Instance::from_raw(l.instance));
                let physical = vk::PhysicalDevice::from_raw(info.vulkan_physical_device as u64);
                let mut ci = *(info.vulkan_create_info as *const vk::DeviceCreateInfo);
                let app_names: Vec<*const c_char> = if ci.pp_enabled_extension_names.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(
                        ci.pp_enabled_extension_names,
                        ci.enabled_extension_count as usize,
                    )
                    .to_vec()
                };
                let enabled: Vec<&CStr> = app_names
                    .iter()
                    .filter(|p| !p.is_null())
                    .map(|&p| CStr::from_ptr(p))
                    .collect();
                let mut names = app_names.clone();
                match dma_buf_extensions(&inst, physical, l.api_version, &enabled) {
                    Ok(add) => {
                        names.extend(add.iter().map(|e| e.as_ptr()));
                        l.dma_buf = Some(Ok(()));
                    }
                    Err(why) => l.dma_buf = Some(Err(why)),
                }
                ci.enabled_extension_count = names.len() as u32;
                ci.pp_enabled_extension_names = names.as_ptr();
                let mut made = vk::Device::null();
                let r = (inst.fp_v1_0().create_device)(
                    physical,
                    &ci,
                    info.vulkan_allocator as *const vk::AllocationCallbacks,
                    &mut made,
                );
                out.write(made.as_raw() as xr::platform::VkDevice);
                vk_result.write(r.as_raw());
                r
            };
            if r == vk::Result::SUCCESS {
                xr::Result::SUCCESS
            } else {
                log::warn!("xrCreateVulkanDeviceKHR: vkCreateDevice: {r}");
                xr::Result::ERROR_RUNTIME_FAILURE
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On every device this machine's Vulkan loader has (lavapipe here: it offers
    /// `VK_KHR_external_memory_fd` but not `VK_EXT_external_memory_dma_buf`), the export's
    /// extensions are added only when all three are offered, never to a 1.0 instance, and
    /// not twice when the application enabled them itself.
    #[test]
    fn the_export_extensions_are_added_only_where_the_device_offers_them() {
        let Some(gipa) = crate::vulkan1::loader_gipa() else {
            println!("skipped: no libvulkan.so.1");
            return;
        };
        // SAFETY: the loader's vkGetInstanceProcAddr, valid while the library stays loaded
        // (it is never unloaded).
        let entry = unsafe { ash::Entry::from_static_fn(static_fn(gipa)) };
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
        // SAFETY: a plain instance on the system's loader, destroyed below.
        let instance = match unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
        } {
            Ok(i) => i,
            Err(e) => {
                println!("skipped: vkCreateInstance: {e}");
                return;
            }
        };
        // SAFETY: this instance's devices.
        let devices = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default();
        for physical in devices {
            // SAFETY: as above.
            let (props, offered) = unsafe {
                (
                    instance.get_physical_device_properties(physical),
                    instance
                        .enumerate_device_extension_properties(physical)
                        .unwrap_or_default(),
                )
            };
            let has = |n: &CStr| offered.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
            let all = DMA_BUF_EXTENSIONS.iter().all(|e| has(e));
            let device_1_1 = props.api_version >= vk::API_VERSION_1_1;
            // SAFETY: as above.
            let got = unsafe { dma_buf_extensions(&instance, physical, vk::API_VERSION_1_1, &[]) };
            println!(
                "{}: {got:?}",
                props
                    .device_name_as_c_str()
                    .unwrap_or_default()
                    .to_string_lossy()
            );
            match got {
                Ok(add) => {
                    assert!(all && device_1_1);
                    assert_eq!(add, DMA_BUF_EXTENSIONS.to_vec());
                    // SAFETY: as above.
                    let again = unsafe {
                        dma_buf_extensions(
                            &instance,
                            physical,
                            vk::API_VERSION_1_1,
                            &DMA_BUF_EXTENSIONS,
                        )
                    };
                    assert_eq!(again, Ok(vec![]), "nothing twice");
                }
                Err(why) if !device_1_1 => assert!(why.contains("1.0"), "{why}"),
                Err(why) => {
                    assert!(!all, "{why}");
                    let missing = DMA_BUF_EXTENSIONS
                        .iter()
                        .find(|e| !has(e))
                        .map(|e| e.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    assert!(why.ends_with(&format!("has no {missing}")), "{why}");
                }
            }
            // SAFETY: as above.
            let old = unsafe { dma_buf_extensions(&instance, physical, vk::API_VERSION_1_0, &[]) };
            assert!(old.is_err_and(|w| w.contains("instance is 1.0")));
            // SAFETY: as above.
            let unknown = unsafe { dma_buf_extensions(&instance, physical, 0, &[]) };
            assert!(unknown.is_err(), "no application info is a 1.0 instance");
        }
        // SAFETY: ours, no child objects.
        unsafe { instance.destroy_instance(None) };
    }

    #[test]
    fn memory_types_prefer_the_wanted_flags_and_fall_back_only_when_asked() {
        let mut props = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: 2,
            ..Default::default()
        };
        props.memory_types[0].property_flags = vk::MemoryPropertyFlags::HOST_VISIBLE;
        props.memory_types[1].property_flags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        assert_eq!(memory_type(&props, 0b11, local, false), Some(1));
        assert_eq!(memory_type(&props, 0b01, local, false), None);
        assert_eq!(memory_type(&props, 0b01, local, true), Some(0));
        assert_eq!(memory_type(&props, 0, local, true), None);
    }
}
