//! Publishing frames: the frame and its pixel formats, the sending modes, and the calls that
//! send a frame on the caller's thread or hand it to the sending thread.

use std::ffi::c_int;

use untether::api::{Frame, PixelFormat};

use super::UntetherPose;
use super::{host_ref, running, UntetherHost};
use crate::error::{fail, guard, host_error_code, UNTETHER_ERR_INVALID, UNTETHER_OK};

/// Layouts of the application's frames.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherPixelFormat {
    UNTETHER_FORMAT_BGRA = 0,
    UNTETHER_FORMAT_RGBA = 1,
    UNTETHER_FORMAT_I420 = 2,
    UNTETHER_FORMAT_NV12 = 3,
}

/// How frames are sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherMode {
    /// A sending thread encodes the newest frame given to untether_host_publish_frame.
    UNTETHER_MODE_THREAD = 0,
    /// untether_host_send_frame encodes and sends on the caller's thread (no extra thread).
    UNTETHER_MODE_SYNC = 1,
}

/// A frame borrowed from the application: up to three planes with strides in bytes.
/// BGRA/RGBA use plane 0; I420 planes 0..2 (Y, U, V); NV12 planes 0..1 (Y, UV).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UntetherFrame {
    /// An UntetherPixelFormat.
    pub format: c_int,
    pub width: u32,
    pub height: u32,
    pub planes: [*const u8; 3],
    pub strides: [u32; 3],
    /// When the frame was rendered (untether_now_us); 0: now.
    pub capture_us: u64,
}

pub(super) fn pixel_format(v: c_int) -> Option<UntetherPixelFormat> {
    Some(match v {
        0 => UntetherPixelFormat::UNTETHER_FORMAT_BGRA,
        1 => UntetherPixelFormat::UNTETHER_FORMAT_RGBA,
        2 => UntetherPixelFormat::UNTETHER_FORMAT_I420,
        3 => UntetherPixelFormat::UNTETHER_FORMAT_NV12,
        _ => return None,
    })
}

/// The frame to send: `frame`, or the registered frame buffer when `frame` is NULL.
unsafe fn frame_of<'a>(
    h: &UntetherHost,
    frame: *const UntetherFrame,
) -> Result<(Frame<'a>, u64), c_int> {
    let (format, width, height, planes, strides, capture_us) = if frame.is_null() {
        let Some((data, len, stride)) = h.buffer else {
            return Err(fail(
                UNTETHER_ERR_INVALID,
                "no frame given and no frame buffer registered (untether_host_set_frame_buffer)",
            ));
        };
        let (hh, s) = (h.height as usize, stride as usize);
        let (planes, strides): ([usize; 3], [usize; 3]) = match h.format {
            UntetherPixelFormat::UNTETHER_FORMAT_BGRA
            | UntetherPixelFormat::UNTETHER_FORMAT_RGBA => ([0, 0, 0], [s, 0, 0]),
            UntetherPixelFormat::UNTETHER_FORMAT_I420 => {
                let c = s / 2 * hh.div_ceil(2);
                ([0, s * hh, s * hh + c], [s, s / 2, s / 2])
            }
            UntetherPixelFormat::UNTETHER_FORMAT_NV12 => ([0, s * hh, 0], [s, s, 0]),
        };
        // SAFETY: the application registered `len` readable bytes at `data`.
        let all = unsafe { std::slice::from_raw_parts(data, len) };
        let slices = [
            all.get(planes[0]..).unwrap_or(&[]),
            all.get(planes[1]..).unwrap_or(&[]),
            all.get(planes[2]..).unwrap_or(&[]),
        ];
        (h.format, h.width, h.height, slices, strides, 0)
    } else {
        // SAFETY: non-null, points to an UntetherFrame the caller filled.
        let f = unsafe { &*frame };
        let format = match pixel_format(f.format) {
            Some(p) => p,
            None => {
                return Err(fail(
                    UNTETHER_ERR_INVALID,
                    format!("unknown pixel format {}", f.format),
                ))
            }
        };
        let nplanes = match format {
            UntetherPixelFormat::UNTETHER_FORMAT_BGRA
            | UntetherPixelFormat::UNTETHER_FORMAT_RGBA => 1,
            UntetherPixelFormat::UNTETHER_FORMAT_I420 => 3,
            UntetherPixelFormat::UNTETHER_FORMAT_NV12 => 2,
        };
        if f.width == 0 || f.height == 0 {
            return Err(fail(UNTETHER_ERR_INVALID, "frame of size 0"));
        }
        let mut slices: [&'a [u8]; 3] = [&[], &[], &[]];
        let mut strides = [0usize; 3];
        for i in 0..nplanes {
            if f.planes[i].is_null() {
                return Err(fail(
                    UNTETHER_ERR_INVALID,
                    format!("frame plane {i} is NULL"),
                ));
            }
            let rows = if i == 0 {
                f.height
            } else {
                f.height.div_ceil(2)
            } as usize;
            let len = rows * f.strides[i] as usize;
            // SAFETY: the caller guarantees each plane holds its rows of `stride` bytes.
            slices[i] = unsafe { std::slice::from_raw_parts(f.planes[i], len) };
            strides[i] = f.strides[i] as usize;
        }
        (format, f.width, f.height, slices, strides, f.capture_us)
    };
    let format = match format {
        UntetherPixelFormat::UNTETHER_FORMAT_BGRA => PixelFormat::Bgra,
        UntetherPixelFormat::UNTETHER_FORMAT_RGBA => PixelFormat::Rgba,
        UntetherPixelFormat::UNTETHER_FORMAT_I420 => PixelFormat::I420,
        UntetherPixelFormat::UNTETHER_FORMAT_NV12 => PixelFormat::Nv12,
    };
    Ok((
        Frame {
            width,
            height,
            format,
            planes,
            strides,
        },
        capture_us,
    ))
}

/// UNTETHER_MODE_SYNC: encodes and sends `frame` (NULL: the registered frame buffer) on this
/// thread; returns 1 when sent, 0 when no client is connected (nothing encoded), or a
/// negative error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_send_frame(
    host: *mut UntetherHost,
    frame: *const UntetherFrame,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        // SAFETY: `frame` is NULL or a frame whose planes hold what its strides and height say (the C API's contract).
        let (f, capture_us) = match unsafe { frame_of(h, frame) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        let ctx = match running(h) {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.send_frame_at(&f, (capture_us != 0).then_some(capture_us)) {
            Ok(info) => info.sent as c_int,
            Err(e) => fail(host_error_code(&e), e.to_string()),
        }
    })
}

/// UNTETHER_MODE_THREAD: copies `frame` (NULL: the registered frame buffer) for the sending
/// thread and returns at once; the newest published frame wins.
#[no_mangle]
pub unsafe extern "C" fn untether_host_publish_frame(
    host: *mut UntetherHost,
    frame: *const UntetherFrame,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        // SAFETY: `frame` is NULL or a frame whose planes hold what its strides and height say (the C API's contract).
        let (f, _) = match unsafe { frame_of(h, frame) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        let ctx = match running(h) {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.publish(&f) {
            Ok(()) => UNTETHER_OK,
            Err(e) => fail(host_error_code(&e), e.to_string()),
        }
    })
}

/// UNTETHER_MODE_SYNC: like untether_host_send_frame, for a frame rendered for the client's
/// head pose `pose` (from untether_host_head_pose; NULL: none): the client gets the pose with
/// the frame (late warp, pose-to-photon).
#[no_mangle]
pub unsafe extern "C" fn untether_host_send_frame_pose(
    host: *mut UntetherHost,
    frame: *const UntetherFrame,
    pose: *const UntetherPose,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        let pose = if pose.is_null() {
            None
        } else {
            // SAFETY: checked non-null; the caller passes a valid UntetherPose.
            let p = unsafe { *pose };
            let pose = untether::api::Pose {
                orientation: p.orientation,
                position: p.position,
            };
            if !pose.is_valid() {
                return fail(
                    UNTETHER_ERR_INVALID,
                    "pose: not finite, or the orientation is not a unit quaternion",
                );
            }
            Some(untether::api::PoseSample {
                sample_us: p.sample_us,
                pose,
            })
        };
        // SAFETY: `frame` is NULL or a frame whose planes hold what its strides and height say (the C API's contract).
        let (f, _) = match unsafe { frame_of(h, frame) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        let ctx = match running(h) {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.send_frame_with_pose(&f, pose) {
            Ok(info) => info.sent as c_int,
            Err(e) => fail(host_error_code(&e), e.to_string()),
        }
    })
}
