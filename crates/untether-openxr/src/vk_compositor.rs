//! The Vulkan compositor: at `xrEndFrame` one command buffer on the application's queue
//! blits the projection layer's two views side by side into a stereo image (BGRA sRGB, so the
//! encoder takes it as it is: a linear view is encoded by the blit) and copies that into a
//! host-visible buffer. `xrWaitFrame` waits for its fence (within the time it would sleep
//! anyway) and hands the frame over at once; `xrEndFrame` polls it too. One frame in flight; a
//! frame ended while the previous copy still runs is not streamed (counted).
//!
//! Zero-copy (issue 34; **untested on real hardware**): where the device has the external
//! memory extensions (`VK_KHR_external_memory_fd`, `VK_EXT_external_memory_dma_buf`, added
//! to the application's device by `xrCreateVulkanDeviceKHR`) and the host's encoder takes
//! DMA-BUFs (`untether::Host::dma_buf_input`), [`VkCompositor::enable_export`] makes three
//! stereo images in linear memory exported as dma-bufs (fd, offset and pitch read once), and
//! a frame is blitted into one the encoder does not hold, handed to the queue family
//! `VK_QUEUE_FAMILY_EXTERNAL`, and handed over as a DMA-BUF picture after the blit's fence:
//! nothing is copied to the CPU. Otherwise — or as soon as the host turns zero-copy off — the
//! read-back below runs as before.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::stream::FrameTag;
use ash::vk::{self, Handle as _};
use untether_media::codec::dma_buf::{DRM_FORMAT_MOD_LINEAR, DRM_FORMAT_XRGB8888};
use untether_media::codec::{DmaBufPicture, DmaBufPlane, KeepAlive};

use crate::vulkan::{all_of, memory_type, Vk};

/// Exported stereo images: the encoder may hold one while the next frame is blitted into
/// another, and the one after that is free again.
const EXPORTED: usize = 3;

/// A stereo image in linear memory exported as a dma-buf.
struct Exported {
    image: vk::Image,
    memory: vk::DeviceMemory,
    fd: OwnedFd,
    offset: u32,
    pitch: u32,
    /// Held by the host while the encoder may read the image (its count is 1 when free).
    keep: Arc<()>,
    /// Handed to `VK_QUEUE_FAMILY_EXTERNAL` by the last frame (acquired back before the next).
    released: bool,
}

/// A finished frame: its pixels read back, or the exported image it is in.
pub enum Ready<'a> {
    /// BGRA rows, top to bottom.
    Pixels(&'a [u8]),
    /// The exported image (XRGB8888, linear) and what to hold while the encoder reads it.
    DmaBuf(DmaBufPicture<'a>, KeepAlive),
}

/// One eye's picture: a swapchain image (a layer of it), its format and the rectangle the
/// view was rendered into (top-left origin).
#[derive(Clone, Copy, Debug)]
pub struct VkEye {
    pub image: u64,
    pub format: i64,
    pub layer: u32,
    pub rect: [i32; 4],
}

/// The stereo format for a swapchain format: BGRA sRGB, what the encoder takes. The blit
/// decodes an sRGB view and encodes it again (unchanged), and encodes a linear (UNORM) view's
/// values, which OpenXR defines as linear light, as every runtime's compositor does.
pub fn stereo_format(_eye_format: i64) -> vk::Format {
    vk::Format::B8G8R8A8_SRGB
}

pub struct VkCompositor {
    pub width: u32,
    pub height: u32,
    pub format: vk::Format,
    target: vk::Image,
    target_memory: vk::DeviceMemory,
    buffer: vk::Buffer,
    buffer_memory: vk::DeviceMemory,
    mapped: *const u8,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    /// The copy in flight: the pose its frame was rendered for, when it was ended; and the
    /// exported image it was blitted into (None: read back).
    in_flight: Option<(FrameTag, Option<usize>)>,
    /// The exported stereo images (empty: no zero-copy).
    exported: Vec<Exported>,
    /// Frames ended while the previous copy still ran (not streamed).
    pub busy: u64,
}

// SAFETY: used under its session's lock, on the application's thread.
unsafe impl Send for VkCompositor {}

impl VkCompositor {
    /// # Safety
    /// On the application's thread with its device alive.
    pub unsafe fn new(
        vk: &Vk,
        width: u32,
        height: u32,
        format: vk::Format,
    ) -> Result<VkCompositor, String> {
        let dev = &vk.device;
        let e = |what: &'static str| move |e: vk::Result| format!("{what}: {e}");
        // SAFETY: objects on the application's device; on failure the ones made so far leak
        // until the device goes (rare: out of memory).
        unsafe {
            let target = dev
                .create_image(
                    &stereo_image_info(width, height, format, vk::ImageTiling::OPTIMAL),
                    None,
                )
                .map_err(e("vkCreateImage (stereo)"))?;
            let req = dev.get_image_memory_requirements(target);
            let kind = memory_type(
                &vk.memory,
                req.memory_type_bits,
                vk::MemoryPropertyFlags::DEVICE_LOCAL,
                true,
            )
            .ok_or("no memory type for the stereo image")?;
            let target_memory = dev
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(req.size)
                        .memory_type_index(kind),
                    None,
                )
                .map_err(e("vkAllocateMemory (stereo)"))?;
            dev.bind_image_memory(target, target_memory, 0)
                .map_err(e("vkBindImageMemory"))?;
            let bytes = width as u64 * height as u64 * 4;
            let buffer = dev
                .create_buffer(
                    &vk::BufferCreateInfo::default()
                        .size(bytes)
                        .usage(vk::BufferUsageFlags::TRANSFER_DST)
                        .sharing_mode(vk::SharingMode::EXCLUSIVE),
                    None,
                )
                .map_err(e("vkCreateBuffer"))?;
            let req = dev.get_buffer_memory_requirements(buffer);
            let host =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let kind = memory_type(
                &vk.memory,
                req.memory_type_bits,
                host | vk::MemoryPropertyFlags::HOST_CACHED,
                false,
            )
            .or_else(|| memory_type(&vk.memory, req.memory_type_bits, host, false))
            .ok_or("no host-visible memory for the read-back buffer")?;
            let buffer_memory = dev
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(req.size)
                        .memory_type_index(kind),
                    None,
                )
                .map_err(e("vkAllocateMemory (read-back)"))?;
            dev.bind_buffer_memory(buffer, buffer_memory, 0)
                .map_err(e("vkBindBufferMemory"))?;
            let mapped = dev
                .map_memory(
                    buffer_memory,
                    0,
                    vk::WHOLE_SIZE,
                    vk::MemoryMapFlags::empty(),
                )
                .map_err(e("vkMapMemory"))? as *const u8;
            let cmd = vk.command_buffer().map_err(e("vkAllocateCommandBuffers"))?;
            let fence = dev
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(e("vkCreateFence"))?;
            Ok(VkCompositor {
                width,
                height,
                format,
                target,
                target_memory,
                buffer,
                buffer_memory,
                mapped,
                cmd,
                fence,
                in_flight: None,
                exported: Vec::new(),
                busy: 0,
            })
        }
    }

    /// The copy in flight, if its fence has signalled (polled, not waited for): its pixels
    /// (BGRA rows top to bottom) and tag.
    ///
    /// # Safety
    /// On the application's thread with its device alive.
    pub unsafe fn take_ready(&mut self, vk: &Vk) -> Option<(Ready<'_>, FrameTag)> {
        self.in_flight?;
        // SAFETY: this compositor's fence.
        match unsafe { vk.device.get_fence_status(self.fence) } {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                log::warn!("untether OpenXR runtime: the read-back's fence: {e}; frame skipped");
                self.in_flight = None;
                return None;
            }
        }
        let (tag, exported) = self.in_flight.take()?;
        if let Some(e) = exported.and_then(|i| self.exported.get(i)) {
            let picture = DmaBufPicture::packed(
                self.width,
                self.height,
                DRM_FORMAT_XRGB8888,
                DRM_FORMAT_MOD_LINEAR,
                DmaBufPlane {
                    fd: e.fd.as_fd(),
                    offset: e.offset,
                    pitch: e.pitch,
                },
            );
            let keep: KeepAlive = e.keep.clone();
            return Some((Ready::DmaBuf(picture, keep), tag));
        }
        let len = (self.width * self.height * 4) as usize;
        // SAFETY: the mapping holds width×height×4 bytes the finished copy wrote (coherent,
        // host-cached where the device has it); no copy writes it while the slice borrows self.
        Some((
            Ready::Pixels(unsafe { std::slice::from_raw_parts(self.mapped, len) }),
            tag,
        ))
    }

    /// The copy in flight once it has finished, waiting for it at most `within_ns`
    /// (`xrWaitFrame`, before it sleeps: the frame goes to the encoder when its copy is done,
    /// not at the next poll one frame later).
    ///
    /// # Safety
    /// As for [`VkCompositor::take_ready`].
    pub unsafe fn take_within(&mut self, vk: &Vk, within_ns: u64) -> Option<(Ready<'_>, FrameTag)> {
        self.in_flight?;
        if within_ns > 0 {
            // SAFETY: this compositor's fence; a timeout leaves it in flight.
            let _ = unsafe { vk.device.wait_for_fences(&[self.fence], true, within_ns) };
        }
        // SAFETY: as above.
        unsafe { self.take_ready(vk) }
    }

    /// Waits (bounded) for the copy in flight: at the end of a session or before freeing.
    ///
    /// # Safety
    /// As for [`VkCompositor::take_ready`].
    pub unsafe fn finish(&mut self, vk: &Vk) -> Option<(Ready<'_>, FrameTag)> {
        self.in_flight?;
        // SAFETY: this compositor's fence.
        let _ = unsafe { vk.device.wait_for_fences(&[self.fence], true, 500_000_000) };
        // SAFETY: as above.
        unsafe { self.take_ready(vk) }
    }

    /// Records and submits this frame's blit and copy, unless the previous copy still runs
    /// (then the frame is counted in `busy` and not streamed). False if nothing was submitted.
    ///
    /// # Safety
    /// On the application's thread during `xrEndFrame`; the eyes are this session's swapchain
    /// images in `COLOR_ATTACHMENT_OPTIMAL`.
    /// With `zero_copy` (the host takes DMA-BUFs now) and exported images, the frame goes
    /// into one the encoder does not hold (none free: counted in `busy`, not streamed).
    pub unsafe fn submit(
        &mut self,
        vk: &Vk,
        eyes: &[VkEye; 2],
        tag: FrameTag,
        zero_copy: bool,
    ) -> bool {
        if self.in_flight.is_some() {
            self.busy += 1;
            return false;
        }
        let exported = if zero_copy && !self.exported.is_empty() {
            match self
                .exported
                .iter()
                .position(|e| Arc::strong_count(&e.keep) == 1)
            {
                Some(i) => Some(i),
                None => {
                    self.busy += 1;
                    return false;
                }
            }
        } else {
            None
        };
        // SAFETY: per the contract.
        match unsafe { self.record(vk, eyes, exported) } {
            Ok(()) => {
                if let Some(e) = exported.and_then(|i| self.exported.get_mut(i)) {
                    e.released = true;
                }
                self.in_flight = Some((tag, exported));
                true
            }
            Err(e) => {
                log::warn!("untether OpenXR runtime: the frame's copy was not submitted: {e}");
                false
            }
        }
    }

    /// Records and submits the blit into the read-back image and its copy, or (`exported`)
    /// into that exported image, handed to `VK_QUEUE_FAMILY_EXTERNAL`.
    unsafe fn record(
        &mut self,
        vk: &Vk,
        eyes: &[VkEye; 2],
        exported: Option<usize>,
    ) -> Result<(), vk::Result> {
        let dev = &vk.device;
        let cmd = self.cmd;
        let export = exported.and_then(|i| self.exported.get(i));
        let target = export.map_or(self.target, |e| e.image);
        let (w, h) = (self.width as i32, self.height as i32);
        let mut sources: Vec<vk::Image> =
            eyes.iter().map(|e| vk::Image::from_raw(e.image)).collect();
        sources.dedup();
        let barrier = |image, from, to, src, dst| {
            untether_capture::vk::layout_barrier(
                image,
                all_of(vk::ImageAspectFlags::COLOR),
                (from, to),
                (src, dst),
            )
        };
        let colour =
            vk::AccessFlags::COLOR_ATTACHMENT_WRITE | vk::AccessFlags::COLOR_ATTACHMENT_READ;
        // SAFETY: recording into this compositor's command buffer (not pending: its fence
        // signalled or it was never submitted).
        unsafe {
            dev.reset_fences(&[self.fence])?;
            dev.begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )?;
            let mut to_src: Vec<_> = sources
                .iter()
                .map(|&i| {
                    barrier(
                        i,
                        vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                        vk::AccessFlags::COLOR_ATTACHMENT_WRITE,
                        vk::AccessFlags::TRANSFER_READ,
                    )
                })
                .collect();
            let mut to_dst = barrier(
                target,
                vk::ImageLayout::UNDEFINED,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                vk::AccessFlags::TRANSFER_READ,
                vk::AccessFlags::TRANSFER_WRITE,
            );
            if export.is_some_and(|e| e.released) {
                // Acquired back from the encoder's side (its contents are discarded).
                to_dst = to_dst
                    .src_queue_family_index(vk::QUEUE_FAMILY_EXTERNAL)
                    .dst_queue_family_index(vk.queue_family);
            }
            to_src.push(to_dst);
            dev.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT | vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &to_src,
            );
            for (i, eye) in eyes.iter().enumerate() {
                let [x, y, rw, rh] = eye.rect;
                let x0 = i as i32 * w / 2;
                let layers = |layer| vk::ImageSubresourceLayers {
                    aspect_mask: vk::ImageAspectFlags::COLOR,
                    mip_level: 0,
                    base_array_layer: layer,
                    layer_count: 1,
                };
                let region = vk::ImageBlit {
                    src_subresource: layers(eye.layer),
                    src_offsets: [
                        vk::Offset3D { x, y, z: 0 },
                        vk::Offset3D {
                            x: x + rw,
                            y: y + rh,
                            z: 1,
                        },
                    ],
                    dst_subresource: layers(0),
                    dst_offsets: [
                        vk::Offset3D { x: x0, y: 0, z: 0 },
                        vk::Offset3D {
                            x: x0 + w / 2,
                            y: h,
                            z: 1,
                        },
                    ],
                };
                let filter = if rw == w / 2 && rh == h {
                    vk::Filter::NEAREST
                } else {
                    vk::Filter::LINEAR
                };
                dev.cmd_blit_image(
                    cmd,
                    vk::Image::from_raw(eye.image),
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    target,
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    &[region],
                    filter,
                );
            }
            let mut back: Vec<_> = sources
                .iter()
                .map(|&i| {
                    barrier(
                        i,
                        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                        vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                        vk::AccessFlags::TRANSFER_READ,
                        colour,
                    )
                })
                .collect();
            if export.is_some() {
                // The blit's writes made available and the image handed to the encoder's
                // side (VA-API reads the dma-buf after the fence), in GENERAL.
                back.push(
                    barrier(
                        target,
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        vk::ImageLayout::GENERAL,
                        vk::AccessFlags::TRANSFER_WRITE,
                        vk::AccessFlags::empty(),
                    )
                    .src_queue_family_index(vk.queue_family)
                    .dst_queue_family_index(vk::QUEUE_FAMILY_EXTERNAL),
                );
            } else {
                back.push(barrier(
                    target,
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    vk::AccessFlags::TRANSFER_WRITE,
                    vk::AccessFlags::TRANSFER_READ,
                ));
            }
            dev.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER
                    | vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT
                    | vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &back,
            );
            if export.is_none() {
                untether_capture::vk::record_copy_to_host(
                    dev,
                    cmd,
                    self.target,
                    self.buffer,
                    (self.width, self.height),
                    vk::PipelineStageFlags::empty(),
                    &[],
                );
            }
            dev.end_command_buffer(cmd)?;
            let cmds = [cmd];
            dev.queue_submit(
                vk.queue,
                &[vk::SubmitInfo::default().command_buffers(&cmds)],
                self.fence,
            )
        }
    }

    /// Frees the objects (waiting, bounded, for a copy still in flight).
    ///
    /// # Safety
    /// On the application's thread with its device alive.
    pub unsafe fn destroy(self, vk: &Vk) {
        let dev = &vk.device;
        // SAFETY: this compositor's objects, no longer pending once the fence signalled.
        unsafe {
            if self.in_flight.is_some() {
                let _ = dev.wait_for_fences(&[self.fence], true, 1_000_000_000);
            }
            dev.destroy_fence(self.fence, None);
            vk.free_command_buffer(self.cmd);
            dev.unmap_memory(self.buffer_memory);
            dev.destroy_buffer(self.buffer, None);
            dev.free_memory(self.buffer_memory, None);
            dev.destroy_image(self.target, None);
            dev.free_memory(self.target_memory, None);
            // The host may still hold an exported image's dma-buf: it keeps its own fd, and
            // the memory lives on in the kernel until that is closed.
            for e in self.exported {
                dev.destroy_image(e.image, None);
                dev.free_memory(e.memory, None);
            }
        }
    }

    /// Whether the exported images are made (zero-copy can run).
    pub fn exporting(&self) -> bool {
        !self.exported.is_empty()
    }

    /// Makes the exported stereo images: linear, `TRANSFER_DST` (blit) capable, each in its
    /// own dedicated memory exported as a dma-buf. Err: why not (then nothing is kept and
    /// frames are read back).
    ///
    /// # Safety
    /// On the application's thread with its device alive.
    pub unsafe fn enable_export(&mut self, vk: &Vk) -> Result<(), String> {
        let fd_fns = vk.export.as_ref().map_err(Clone::clone)?;
        // SAFETY: the application's instance and physical device.
        let features = unsafe {
            vk.instance
                .get_physical_device_format_properties(vk.physical, self.format)
        };
        if !features
            .linear_tiling_features
            .contains(vk::FormatFeatureFlags::BLIT_DST)
        {
            return Err(format!(
                "the Vulkan device cannot blit into a linear image of format {}",
                self.format.as_raw()
            ));
        }
        let mut made = Vec::new();
        for _ in 0..EXPORTED {
            // SAFETY: per the contract.
            match unsafe { export_image(vk, fd_fns, self.width, self.height, self.format) } {
                Ok(e) => made.push(e),
                Err(why) => {
                    for e in made {
                        // SAFETY: objects just made, never used.
                        unsafe {
                            vk.device.destroy_image(e.image, None);
                            vk.device.free_memory(e.memory, None);
                        }
                    }
                    return Err(why);
                }
            }
        }
        self.exported = made;
        Ok(())
    }
}

/// The stereo image both ways the compositor makes it (its own, optimal; exported, linear):
/// one 2D colour image the views are copied into and the read-back or the encoder copies from.
fn stereo_image_info<'a>(
    width: u32,
    height: u32,
    format: vk::Format,
    tiling: vk::ImageTiling,
) -> vk::ImageCreateInfo<'a> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D {
            width,
            height,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(tiling)
        .usage(vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

/// One exported stereo image.
///
/// # Safety
/// On the application's thread with its device alive; the device has the export's
/// extensions (`fd_fns` loaded from it).
unsafe fn export_image(
    vk: &Vk,
    fd_fns: &ash::khr::external_memory_fd::Device,
    width: u32,
    height: u32,
    format: vk::Format,
) -> Result<Exported, String> {
    let dev = &vk.device;
    let e = |what: &'static str| move |e: vk::Result| format!("{what}: {e}");
    let dma_buf = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
    // SAFETY: objects on the application's device; each is destroyed on the error paths
    // below before returning.
    unsafe {
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(dma_buf);
        let image = dev
            .create_image(
                &stereo_image_info(width, height, format, vk::ImageTiling::LINEAR)
                    .push_next(&mut external),
                None,
            )
            .map_err(e("vkCreateImage (exported stereo image)"))?;
        let fail = |why: String, memory: Option<vk::DeviceMemory>| {
            dev.destroy_image(image, None);
            if let Some(m) = memory {
                dev.free_memory(m, None);
            }
            why
        };
        let req = dev.get_image_memory_requirements(image);
        let Some(kind) = memory_type(
            &vk.memory,
            req.memory_type_bits,
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
            true,
        ) else {
            return Err(fail("no memory type for the exported image".into(), None));
        };
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(dma_buf);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let memory = match dev.allocate_memory(
            &vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(kind)
                .push_next(&mut export)
                .push_next(&mut dedicated),
            None,
        ) {
            Ok(m) => m,
            Err(r) => return Err(fail(format!("vkAllocateMemory (exported): {r}"), None)),
        };
        if let Err(r) = dev.bind_image_memory(image, memory, 0) {
            return Err(fail(
                format!("vkBindImageMemory (exported): {r}"),
                Some(memory),
            ));
        }
        let fd = match fd_fns.get_memory_fd(
            &vk::MemoryGetFdInfoKHR::default()
                .memory(memory)
                .handle_type(dma_buf),
        ) {
            Ok(fd) if fd >= 0 => OwnedFd::from_raw_fd(fd),
            Ok(fd) => return Err(fail(format!("vkGetMemoryFdKHR gave fd {fd}"), Some(memory))),
            Err(r) => return Err(fail(format!("vkGetMemoryFdKHR: {r}"), Some(memory))),
        };
        let layout = dev.get_image_subresource_layout(
            image,
            vk::ImageSubresource {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                mip_level: 0,
                array_layer: 0,
            },
        );
        let (Ok(offset), Ok(pitch)) = (
            u32::try_from(layout.offset),
            u32::try_from(layout.row_pitch),
        ) else {
            return Err(fail(
                format!(
                    "the exported image's layout (offset {}, pitch {}) does not fit a dma-buf plane",
                    layout.offset, layout.row_pitch
                ),
                Some(memory),
            ));
        };
        Ok(Exported {
            image,
            memory,
            fd,
            offset,
            pitch,
            keep: Arc::new(()),
            released: false,
        })
    }
}

/// The Vulkan compositor's calls the session core makes ([`crate::session`], [`crate::frame`],
/// [`crate::swapchain`]), as safe functions. A session's [`Vk`] is made from the application's
/// live handles (`xrCreateSession`, its unsafe part in the entry layer) and it and the
/// compositor are used only inside the application's OpenXR calls on a running or ending
/// session (`xrWaitFrame`, `xrEndFrame`, `xrDestroySwapchain`, `xrEndSession`,
/// `xrDestroySession`), under the session's lock, while the spec has the application keep
/// its device alive and its queue unused by other threads.
pub mod app {
    use super::{Ready, VkCompositor, VkEye};
    use crate::stream::FrameTag;
    use crate::vulkan::Vk;
    use ash::vk;

    /// [`VkCompositor::new`], in `xrEndFrame`.
    pub fn new_compositor(
        v: &Vk,
        width: u32,
        height: u32,
        format: vk::Format,
    ) -> Result<VkCompositor, String> {
        // SAFETY: the application's thread, its device alive (see above).
        unsafe { VkCompositor::new(v, width, height, format) }
    }

    /// [`VkCompositor::enable_export`], in `xrEndFrame`.
    pub fn enable_export(c: &mut VkCompositor, v: &Vk) -> Result<(), String> {
        // SAFETY: as above.
        unsafe { c.enable_export(v) }
    }

    /// [`VkCompositor::take_ready`] (polled: never waits).
    pub fn take_ready<'a>(c: &'a mut VkCompositor, v: &Vk) -> Option<(Ready<'a>, FrameTag)> {
        // SAFETY: as above.
        unsafe { c.take_ready(v) }
    }

    /// [`VkCompositor::take_within`], in `xrWaitFrame`.
    pub fn take_within<'a>(
        c: &'a mut VkCompositor,
        v: &Vk,
        within_ns: u64,
    ) -> Option<(Ready<'a>, FrameTag)> {
        // SAFETY: as above.
        unsafe { c.take_within(v, within_ns) }
    }

    /// [`VkCompositor::finish`], in `xrEndSession`, `xrDestroySession` and before a
    /// swapchain's images are freed.
    pub fn finish<'a>(c: &'a mut VkCompositor, v: &Vk) -> Option<(Ready<'a>, FrameTag)> {
        // SAFETY: as above.
        unsafe { c.finish(v) }
    }

    /// [`VkCompositor::submit`], in `xrEndFrame`: the eyes are this session's swapchain
    /// images (checked by the caller against its swapchain table), released by the
    /// application (`COLOR_ATTACHMENT_OPTIMAL`).
    pub fn submit(
        c: &mut VkCompositor,
        v: &Vk,
        eyes: &[VkEye; 2],
        tag: FrameTag,
        zero_copy: bool,
    ) -> bool {
        // SAFETY: as above, the eyes as documented.
        unsafe { c.submit(v, eyes, tag, zero_copy) }
    }

    /// [`VkCompositor::destroy`], in `xrEndFrame` (a new format) and `xrDestroySession`.
    pub fn destroy(c: VkCompositor, v: &Vk) {
        // SAFETY: as above.
        unsafe { c.destroy(v) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sRGB views (43 R8G8B8A8_SRGB, 50 B8G8R8A8_SRGB) keep their encoding, linear ones (37
    /// R8G8B8A8_UNORM, 44 B8G8R8A8_UNORM) are encoded by the blit: the stereo image is sRGB for
    /// both (issue 34; hello_xr's background test checks the decoded colour).
    #[test]
    fn the_stereo_image_is_srgb_whatever_the_views() {
        for eye in [43, 50, 37, 44] {
            assert_eq!(
                stereo_format(eye).as_raw(),
                vk::Format::B8G8R8A8_SRGB.as_raw(),
                "{eye}"
            );
        }
    }
}
