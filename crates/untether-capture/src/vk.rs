//! The Vulkan read-back both in-application capture paths record (the capture layer at a
//! present, the OpenXR runtime at `xrEndFrame`): a whole image, already in
//! `TRANSFER_SRC_OPTIMAL`, copied into a host-visible buffer, and made visible to the host's
//! read after the command buffer's fence.

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
