//! The Vulkan read-back both in-application capture paths record (the capture layer at a
//! present, the OpenXR runtime at `xrEndFrame`): a whole image, already in
//! `TRANSFER_SRC_OPTIMAL`, copied into a host-visible buffer, and made visible to the host's
//! read after the command buffer's fence; and the layout transitions around it ([`layout_barrier`]).

use ash::vk;

/// The region that copies a whole `width` × `height` colour image (mip 0, layer 0) into a
/// tightly packed buffer from offset 0.
pub fn whole_image_region(width: u32, height: u32) -> vk::BufferImageCopy {
    vk::BufferImageCopy {
        buffer_offset: 0,
        buffer_row_length: 0,
        buffer_image_height: 0,
        image_subresource: vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        },
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D {
            width,
            height,
            depth: 1,
        },
    }
}

/// A layout transition of `range` of `image` from `from` to `to`, after the accesses `src`
/// and before the accesses `dst`, on one queue family.
pub fn layout_barrier(
    image: vk::Image,
    range: vk::ImageSubresourceRange,
    (from, to): (vk::ImageLayout, vk::ImageLayout),
    (src, dst): (vk::AccessFlags, vk::AccessFlags),
) -> vk::ImageMemoryBarrier<'static> {
    vk::ImageMemoryBarrier::default()
        .old_layout(from)
        .new_layout(to)
        .src_access_mask(src)
        .dst_access_mask(dst)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .image(image)
        .subresource_range(range)
}

/// Records into `cmd`: the copy of `image` (`TRANSFER_SRC_OPTIMAL`, `width` × `height`) into
/// `buffer`, then one barrier that makes the buffer's bytes visible to the host, with
/// `image_barriers` (e.g. the image back to its present layout) and `dst_stage` beside
/// `HOST` in the same barrier.
///
/// # Safety
/// `cmd` is recording on `dev`; `image` and `buffer` are `dev`'s, large enough, and the image
/// is in `TRANSFER_SRC_OPTIMAL` when the copy runs.
pub unsafe fn record_copy_to_host(
    dev: &ash::Device,
    cmd: vk::CommandBuffer,
    image: vk::Image,
    buffer: vk::Buffer,
    (width, height): (u32, u32),
    dst_stage: vk::PipelineStageFlags,
    image_barriers: &[vk::ImageMemoryBarrier<'_>],
) {
    dev.cmd_copy_image_to_buffer(
        cmd,
        image,
        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        buffer,
        &[whole_image_region(width, height)],
    );
    let to_host = vk::BufferMemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .buffer(buffer)
        .offset(0)
        .size(vk::WHOLE_SIZE);
    dev.cmd_pipeline_barrier(
        cmd,
        vk::PipelineStageFlags::TRANSFER,
        dst_stage | vk::PipelineStageFlags::HOST,
        vk::DependencyFlags::empty(),
        &[],
        &[to_host],
        image_barriers,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_barrier_moves_its_range_on_one_queue_family() {
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 1,
            layer_count: 1,
        };
        let b = layout_barrier(
            vk::Image::null(),
            range,
            (
                vk::ImageLayout::PRESENT_SRC_KHR,
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            ),
            (
                vk::AccessFlags::MEMORY_WRITE,
                vk::AccessFlags::TRANSFER_READ,
            ),
        );
        assert!(b.old_layout == vk::ImageLayout::PRESENT_SRC_KHR);
        assert!(b.new_layout == vk::ImageLayout::TRANSFER_SRC_OPTIMAL);
        assert!(b.src_access_mask == vk::AccessFlags::MEMORY_WRITE);
        assert!(b.dst_access_mask == vk::AccessFlags::TRANSFER_READ);
        assert!(b.src_queue_family_index == vk::QUEUE_FAMILY_IGNORED);
        assert!(b.dst_queue_family_index == vk::QUEUE_FAMILY_IGNORED);
        assert!(b.subresource_range.base_array_layer == 1);
    }

    #[test]
    fn the_region_is_the_whole_first_layer_tightly_packed() {
        let r = whole_image_region(640, 360);
        assert_eq!(
            (
                r.image_extent.width,
                r.image_extent.height,
                r.image_extent.depth
            ),
            (640, 360, 1)
        );
        assert_eq!((r.buffer_row_length, r.buffer_image_height), (0, 0));
        assert_eq!(r.image_subresource.layer_count, 1);
        assert!(r.image_subresource.aspect_mask == vk::ImageAspectFlags::COLOR);
    }
}
