//! A DRM PRIME picture backed by a memfd instead of a GPU buffer: NV12 in one object, the
//! layout VA-API exports, on an FFmpeg DRM frames context (no device opened) so that
//! `av_hwframe_transfer_data` downloads it by mmap like a real dma-buf. What the zero-copy
//! tests present on a machine without a GPU: the EGL import is tried on it (a memfd is not a
//! dma-buf, so a display that imports dma-bufs refuses it) and the software fallback shows it.

use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use ffmpeg_next::ffi;

use super::egl_image::{DRM_FORMAT_MOD_INVALID, DRM_FORMAT_NV12};
use crate::codec::dma_buf::{drm_prime_frame_keeping, DmaBufPicture, DmaBufPlane};
use crate::codec::DecodedFrame;
use crate::{MediaError, Result};

/// A `width`×`height` (even) NV12 picture of one colour (`y`, `u`, `v`) as DRM PRIME on a
/// memfd.
pub fn memfd_nv12_picture(width: u32, height: u32, yuv: [u8; 3]) -> Result<DecodedFrame> {
    let err = |what: &str| MediaError::Other(format!("memfd DRM PRIME picture: {what}"));
    if width == 0 || height == 0 || !width.is_multiple_of(2) || !height.is_multiple_of(2) {
        return Err(err("the size must be even and non-zero"));
    }
    let (w, h) = (width as usize, height as usize);
    let mut bytes = vec![yuv[0]; w * h];
    bytes.extend(std::iter::repeat_n([yuv[1], yuv[2]], w * h / 4).flatten());
    // SAFETY: memfd_create with a valid name; the fd is owned by the File until handed to the
    // descriptor, which closes it when FFmpeg frees the frame's buffer.
    let fd = unsafe { libc::memfd_create(c"untether-nv12".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(err(&format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(&bytes)
        .map_err(|e| err(&format!("write: {e}")))?;
    let fd = OwnedFd::from(file);
    // SAFETY: the descriptor `fd` stays open past this borrow: moved into `keep`, which the
    // frame's descriptor owns (closed when FFmpeg frees it), or dropped here on an error.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) };
    let keep = vec![fd];
    let plane = |offset: usize| DmaBufPlane {
        fd: borrowed,
        offset: offset as u32,
        pitch: width,
    };
    let picture = DmaBufPicture {
        width,
        height,
        fourcc: DRM_FORMAT_NV12,
        modifier: DRM_FORMAT_MOD_INVALID,
        planes: [Some(plane(0)), Some(plane(w * h)), None, None],
    };
    // SAFETY: a fresh frames context, ours until released below (the frame takes its own
    // reference of it).
    let mut frames = unsafe { drm_frames(ffi::AVPixelFormat::AV_PIX_FMT_NV12, width, height)? };
    let f = drm_prime_frame_keeping(&picture, Some(frames), keep);
    // SAFETY: our reference from drm_frames, released once.
    unsafe { ffi::av_buffer_unref(&mut frames) };
    DecodedFrame::from_drm_prime(f?)
}

/// An FFmpeg DRM frames context for pictures of `sw_format` (its device opens nothing: fd
/// −1): DRM PRIME frames on it download by mmap.
///
/// # Safety
/// Plain FFmpeg context set-up; the returned reference is the caller's.
pub(crate) unsafe fn drm_frames(
    sw_format: ffi::AVPixelFormat,
    width: u32,
    height: u32,
) -> Result<*mut ffi::AVBufferRef> {
    let err = |what: &str, rc: i32| {
        MediaError::Other(format!(
            "DRM frames context: {what}: {}",
            ffmpeg_next::Error::from(rc)
        ))
    };
    let mut dev = ffi::av_hwdevice_ctx_alloc(ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_DRM);
    if dev.is_null() {
        return Err(err("alloc", ffi::AVERROR(libc::ENOMEM)));
    }
    let dc = (*dev).data as *mut ffi::AVHWDeviceContext;
    (*((*dc).hwctx as *mut ffi::AVDRMDeviceContext)).fd = -1;
    let rc = ffi::av_hwdevice_ctx_init(dev);
    if rc < 0 {
        ffi::av_buffer_unref(&mut dev);
        return Err(err("device", rc));
    }
    let mut frames = ffi::av_hwframe_ctx_alloc(dev);
    ffi::av_buffer_unref(&mut dev);
    if frames.is_null() {
        return Err(err("alloc frames", ffi::AVERROR(libc::ENOMEM)));
    }
    let fc = (*frames).data as *mut ffi::AVHWFramesContext;
    (*fc).format = ffi::AVPixelFormat::AV_PIX_FMT_DRM_PRIME;
    (*fc).sw_format = sw_format;
    (*fc).width = width as i32;
    (*fc).height = height as i32;
    let rc = ffi::av_hwframe_ctx_init(frames);
    if rc < 0 {
        ffi::av_buffer_unref(&mut frames);
        return Err(err("frames", rc));
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{GpuPicture, PictureFormat};

    #[test]
    fn a_memfd_drm_prime_picture_downloads_like_a_dma_buf() {
        let p = memfd_nv12_picture(64, 32, [81, 90, 240]).unwrap();
        assert_eq!(p.gpu(), Some(GpuPicture::DrmPrime));
        assert!(
            p.plane(0).0.is_empty(),
            "a picture on the GPU has no planes here"
        );
        let d = p.drm_prime().expect("its descriptor");
        assert_eq!((d.nb_objects, d.layers[0].format), (1, DRM_FORMAT_NV12));
        let sw = p.download().unwrap();
        assert_eq!((sw.gpu(), sw.format()), (None, PictureFormat::I420));
        assert_eq!((sw.width(), sw.height()), (64, 32));
        assert!(sw.plane(0).0.iter().all(|&b| b == 81));
        assert!(sw.plane(1).0.iter().all(|&b| b == 90));
        assert!(sw.plane(2).0.iter().all(|&b| b == 240));
        // Pure red in BT.601 limited range.
        let bgra = p.to_bgra().unwrap();
        let px = &bgra.row(5)[40..44];
        assert!(px[2] > 240 && px[1] < 16 && px[0] < 16, "{px:?}");
        assert!(memfd_nv12_picture(63, 32, [0; 3]).is_err());
    }
}
