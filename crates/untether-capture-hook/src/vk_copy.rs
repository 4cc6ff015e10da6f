//! One swapchain's copier: at a due present, a command buffer on the presenting queue moves
//! the image to `TRANSFER_SRC`, copies it into a host-visible buffer and moves it back; the
//! submit waits for the application's semaphores and signals one the present then waits for.
//! A worker thread waits for the copy's fence and publishes the buffer into the ring. One copy
//! is in flight: a present due while it is still running is dropped and counted.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use ash::vk::{self, Handle};
use untether_capture::{FrameFormat, FrameRing};

use crate::vk::DeviceData;

/// What the layer knows about a swapchain.
pub(crate) struct SwapchainInfo {
    pub images: Vec<vk::Image>,
    pub format: vk::Format,
    pub extent: vk::Extent2D,
    /// Its images have TRANSFER_SRC usage (the surface allowed it).
    pub copyable: bool,
}

/// The Vulkan objects of a copier (made at its first copy, on the presenting queue's family).
struct Resources {
    family: u32,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    semaphore: vk::Semaphore,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: usize,
}

/// A copy the worker publishes once its fence signals.
struct Job {
    fence: vk::Fence,
    mapped: usize,
    width: u32,
    height: u32,
    format: FrameFormat,
    present_us: u64,
    due: u64,
}

pub(crate) struct Copier {
    info: SwapchainInfo,
    res: Option<Resources>,
    busy: Arc<AtomicBool>,
    failed: bool,
    worker: Option<(mpsc::Sender<Job>, Option<JoinHandle<()>>)>,
}

fn frame_format(f: vk::Format) -> Option<FrameFormat> {
    match f {
        vk::Format::B8G8R8A8_UNORM | vk::Format::B8G8R8A8_SRGB => Some(FrameFormat::Bgra),
        vk::Format::R8G8B8A8_UNORM | vk::Format::R8G8B8A8_SRGB => Some(FrameFormat::Rgba),
        _ => None,
    }
}

/// A host-visible, coherent memory type in `bits`, cached if there is one.
fn memory_type(props: &vk::PhysicalDeviceMemoryProperties, bits: u32) -> Option<u32> {
    let want = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let types = &props.memory_types[..props.memory_type_count.min(32) as usize];
    let ok = |i: usize, f: vk::MemoryPropertyFlags| {
        bits & (1 << i) != 0 && types[i].property_flags.contains(f)
    };
    (0..types.len())
        .find(|&i| ok(i, want | vk::MemoryPropertyFlags::HOST_CACHED))
        .or_else(|| (0..types.len()).find(|&i| ok(i, want)))
        .map(|i| i as u32)
}

impl Copier {
    pub fn new(info: SwapchainInfo) -> Copier {
        Copier {
            info,
            res: None,
            busy: Arc::new(AtomicBool::new(false)),
            failed: false,
            worker: None,
        }
    }

    /// Copies image `index` (presented at `now`, due number `due`) if nothing is in flight;
    /// returns the semaphore the present must wait for instead of `waits`, or None (the
    /// present goes on as it was).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn copy(
        &mut self,
        d: &DeviceData,
        ring: &'static FrameRing,
        queue: vk::Queue,
        family: u32,
        index: u32,
        waits: &[vk::Semaphore],
        (now, due): (u64, u64),
    ) -> Option<vk::Semaphore> {
        let format = frame_format(self.info.format).filter(|_| self.info.copyable && !self.failed);
        let Some(format) = format else {
            ring.count_unsupported();
            return None;
        };
        if self.busy.load(Ordering::Acquire) {
            ring.count_busy();
            return None;
        }
        let (w, h) = (self.info.extent.width, self.info.extent.height);
        let bytes = w as usize * h as usize * 4;
        if bytes > ring.slot_bytes() {
            drop(ring.begin_write(w, h, w as usize * 4, format, false)); // counted: too big
            return None;
        }
        let image = *self.info.images.get(index as usize)?;
        if self.res.as_ref().is_some_and(|r| r.family != family) {
            // Presented on another queue family: the objects are remade there, after the copy
            // in flight (if any) ends: the one place the present could wait, counted.
            if self.busy.load(Ordering::Acquire) {
                ring.count_wait();
            }
            self.release(&d.device);
        }
        if self.res.is_none() {
            match self.make(d, family, bytes as u64) {
                Ok(r) => self.res = Some(r),
                Err(e) => {
                    eprintln!("untether capture layer: no copy for this swapchain: {e}");
                    self.failed = true;
                    ring.count_unsupported();
                    return None;
                }
            }
        }
        let res = self.res.as_ref()?;
        if let Err(e) = self.record_and_submit(d, res, queue, image, waits) {
            eprintln!("untether capture layer: copy not submitted: {e}");
            ring.count_busy();
            return None;
        }
        self.busy.store(true, Ordering::Release);
        let job = Job {
            fence: res.fence,
            mapped: res.mapped,
            width: w,
            height: h,
            format,
            present_us: now,
            due,
        };
        let sender = &self
            .worker
            .get_or_insert_with(|| spawn_worker(d, ring, self.busy.clone()))
            .0;
        if sender.send(job).is_err() {
            self.busy.store(false, Ordering::Release);
        }
        Some(res.semaphore)
    }

    unsafe fn make(
        &self,
        d: &DeviceData,
        family: u32,
        bytes: u64,
    ) -> Result<Resources, vk::Result> {
        let dev = &d.device;
        let pool = dev.create_command_pool(
            &vk::CommandPoolCreateInfo::default()
                .queue_family_index(family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
            None,
        )?;
        let cmd = dev.allocate_command_buffers(
            &vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1),
        )?[0];
        // A dispatchable handle made below the loader's trampoline: give it the device's
        // dispatch table, through the loader's callback when it offers one.
        match d.set_loader_data {
            Some(set) => set(dev.handle(), cmd.as_raw() as *mut c_void).result()?,
            None => *(cmd.as_raw() as *mut usize) = *(dev.handle().as_raw() as *const usize),
        }
        let fence = dev.create_fence(&vk::FenceCreateInfo::default(), None)?;
        let semaphore = dev.create_semaphore(&vk::SemaphoreCreateInfo::default(), None)?;
        let buffer = dev.create_buffer(
            &vk::BufferCreateInfo::default()
                .size(bytes)
                .usage(vk::BufferUsageFlags::TRANSFER_DST)
                .sharing_mode(vk::SharingMode::EXCLUSIVE),
            None,
        )?;
        let req = dev.get_buffer_memory_requirements(buffer);
        let kind = memory_type(&d.memory, req.memory_type_bits)
            .ok_or(vk::Result::ERROR_FEATURE_NOT_PRESENT)?;
        let memory = dev.allocate_memory(
            &vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(kind),
            None,
        )?;
        dev.bind_buffer_memory(buffer, memory, 0)?;
        let mapped = dev.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())?;
        Ok(Resources {
            family,
            pool,
            cmd,
            fence,
            semaphore,
            buffer,
            memory,
            mapped: mapped as usize,
        })
    }

    unsafe fn record_and_submit(
        &self,
        d: &DeviceData,
        res: &Resources,
        queue: vk::Queue,
        image: vk::Image,
        waits: &[vk::Semaphore],
    ) -> Result<(), vk::Result> {
        let dev = &d.device;
        let (w, h) = (self.info.extent.width, self.info.extent.height);
        dev.reset_fences(&[res.fence])?;
        dev.begin_command_buffer(
            res.cmd,
            &vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
        )?;
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        };
        let layout = |from, to, src, dst| {
            untether_capture::vk::layout_barrier(image, range, (from, to), (src, dst))
        };
        dev.cmd_pipeline_barrier(
            res.cmd,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::TRANSFER,
            vk::DependencyFlags::empty(),
            &[],
            &[],
            &[layout(
                vk::ImageLayout::PRESENT_SRC_KHR,
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                vk::AccessFlags::MEMORY_WRITE,
                vk::AccessFlags::TRANSFER_READ,
            )],
        );
        untether_capture::vk::record_copy_to_host(
            dev,
            res.cmd,
            image,
            res.buffer,
            (w, h),
            vk::PipelineStageFlags::BOTTOM_OF_PIPE,
            &[layout(
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                vk::ImageLayout::PRESENT_SRC_KHR,
                vk::AccessFlags::TRANSFER_READ,
                vk::AccessFlags::empty(),
            )],
        );
        dev.end_command_buffer(res.cmd)?;
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; waits.len()];
        let cmds = [res.cmd];
        let signal = [res.semaphore];
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(waits)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal);
        dev.queue_submit(queue, &[submit], res.fence)
    }

    /// Waits for the copy in flight, stops the worker and frees the objects.
    pub unsafe fn destroy(&mut self, dev: &ash::Device) {
        self.release(dev);
        if let Some((tx, worker)) = self.worker.take() {
            drop(tx);
            if let Some(w) = worker {
                let _ = w.join();
            }
        }
    }

    unsafe fn release(&mut self, dev: &ash::Device) {
        let Some(r) = self.res.take() else { return };
        if self.busy.load(Ordering::Acquire) {
            let _ = dev.wait_for_fences(&[r.fence], true, 1_000_000_000);
            while self.busy.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
        dev.unmap_memory(r.memory);
        dev.destroy_buffer(r.buffer, None);
        dev.free_memory(r.memory, None);
        dev.destroy_semaphore(r.semaphore, None);
        dev.destroy_fence(r.fence, None);
        dev.destroy_command_pool(r.pool, None);
    }
}

/// The thread that waits for each copy's fence and publishes the frame.
fn spawn_worker(
    d: &DeviceData,
    ring: &'static FrameRing,
    busy: Arc<AtomicBool>,
) -> (mpsc::Sender<Job>, Option<JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<Job>();
    let dev = d.device.clone();
    let worker = std::thread::Builder::new()
        .name("untether-vkcopy".into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                // SAFETY: the fence belongs to this device and lives until the copier is
                // released, which waits for `busy` to clear first.
                let done = unsafe { dev.wait_for_fences(&[job.fence], true, 2_000_000_000) };
                if done.is_ok() {
                    let stride = job.width as usize * 4;
                    if let Some(mut slot) =
                        ring.begin_write(job.width, job.height, stride, job.format, false)
                    {
                        let dst = slot.pixels_mut();
                        // SAFETY: the mapping holds width×height×4 bytes the copy just wrote.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                job.mapped as *const u8,
                                dst.as_mut_ptr(),
                                dst.len(),
                            )
                        };
                        slot.publish(job.present_us, job.due);
                    }
                } else {
                    ring.count_busy();
                }
                busy.store(false, Ordering::Release);
            }
        });
    // No thread: the receiver is gone, every send fails and the copy is not waited for.
    (tx, worker.ok())
}
