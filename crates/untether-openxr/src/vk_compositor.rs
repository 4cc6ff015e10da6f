//! The Vulkan compositor: at `xrEndFrame` one command buffer on the application's queue
//! blits the projection layer's two views side by side into a stereo image (BGRA sRGB, so the
//! encoder takes it as it is: a linear view is encoded by the blit) and copies that into a
//! host-visible buffer. `xrWaitFrame` waits for its fence (within the time it would sleep
//! anyway) and hands the frame over at once; `xrEndFrame` polls it too. One frame in flight; a
//! frame ended while the previous copy still runs is not streamed (counted).

use crate::stream::FrameTag;
use ash::vk::{self, Handle as _};

use crate::vulkan::{all_of, memory_type, Vk};

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
    /// The copy in flight: the pose its frame was rendered for, when it was ended.
    in_flight: Option<FrameTag>,
    /// Frames ended while the previous copy still ran (not streamed).
    pub busy: u64,
}

// SAFETY: used under the runtime's lock, on the application's thread.
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
                    &vk::ImageCreateInfo::default()
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
                        .tiling(vk::ImageTiling::OPTIMAL)
                        .usage(
                            vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC,
                        )
                        .sharing_mode(vk::SharingMode::EXCLUSIVE)
                        .initial_layout(vk::ImageLayout::UNDEFINED),
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
                busy: 0,
            })
        }
    }

    /// The copy in flight, if its fence has signalled (polled, not waited for): its pixels
    /// (BGRA rows top to bottom) and tag.
    ///
    /// # Safety
    /// On the application's thread with its device alive.
    pub unsafe fn take_ready(&mut self, vk: &Vk) -> Option<(&[u8], FrameTag)> {
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
        let tag = self.in_flight.take()?;
        let len = (self.width * self.height * 4) as usize;
        // SAFETY: the mapping holds width×height×4 bytes the finished copy wrote (coherent,
        // host-cached where the device has it); no copy writes it while the slice borrows self.
        Some((unsafe { std::slice::from_raw_parts(self.mapped, len) }, tag))
    }

    /// The copy in flight once it has finished, waiting for it at most `within_ns`
    /// (`xrWaitFrame`, before it sleeps: the frame goes to the encoder when its copy is done,
    /// not at the next poll one frame later).
    ///
    /// # Safety
    /// As for [`VkCompositor::take_ready`].
    pub unsafe fn take_within(&mut self, vk: &Vk, within_ns: u64) -> Option<(&[u8], FrameTag)> {
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
    pub unsafe fn finish(&mut self, vk: &Vk) -> Option<(&[u8], FrameTag)> {
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
    pub unsafe fn submit(&mut self, vk: &Vk, eyes: &[VkEye; 2], tag: FrameTag) -> bool {
        if self.in_flight.is_some() {
            self.busy += 1;
            return false;
        }
        // SAFETY: per the contract.
        match unsafe { self.record(vk, eyes) } {
            Ok(()) => {
                self.in_flight = Some(tag);
                true
            }
            Err(e) => {
                log::warn!("untether OpenXR runtime: the frame's copy was not submitted: {e}");
                false
            }
        }
    }

    unsafe fn record(&mut self, vk: &Vk, eyes: &[VkEye; 2]) -> Result<(), vk::Result> {
        let dev = &vk.device;
        let cmd = self.cmd;
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
            to_src.push(barrier(
                self.target,
                vk::ImageLayout::UNDEFINED,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                vk::AccessFlags::TRANSFER_READ,
                vk::AccessFlags::TRANSFER_WRITE,
            ));
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
                    self.target,
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
            back.push(barrier(
                self.target,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                vk::AccessFlags::TRANSFER_WRITE,
                vk::AccessFlags::TRANSFER_READ,
            ));
            dev.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &back,
            );
            untether_capture::vk::record_copy_to_host(
                dev,
                cmd,
                self.target,
                self.buffer,
                (self.width, self.height),
                vk::PipelineStageFlags::empty(),
                &[],
            );
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
        }
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
