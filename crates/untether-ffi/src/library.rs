//! The calls that need no context: untether's version, its clock, and the pixel stamp.

use std::ffi::{c_char, c_int};

use untether_media::stamp::{self, Stamp};

use crate::error::{fail, guard, UNTETHER_ERR_INVALID, UNTETHER_OK};

/// untether's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn untether_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// Microseconds of CLOCK_MONOTONIC: the clock of capture times and stamps.
#[no_mangle]
pub extern "C" fn untether_now_us() -> u64 {
    untether::clock::now_us()
}

/// Stamps `frame_number` and `capture_us` into the top-left corner (512x96 at 720p) of a
/// BGRA frame, so a client can read them back from the decoded pixels.
#[no_mangle]
pub unsafe extern "C" fn untether_stamp_bgra(
    data: *mut u8,
    stride: u32,
    width: u32,
    height: u32,
    frame_number: u32,
    capture_us: u64,
) -> c_int {
    guard(|| {
        if data.is_null() || width == 0 || height == 0 || (stride as u64) < width as u64 * 4 {
            return fail(
                UNTETHER_ERR_INVALID,
                "untether_stamp_bgra: null buffer or bad size",
            );
        }
        let len = (height as usize - 1) * stride as usize + width as usize * 4;
        // SAFETY: the caller guarantees `height` rows of `stride` bytes at `data`.
        let buf = unsafe { std::slice::from_raw_parts_mut(data, len) };
        stamp::write_bgra_raw(
            buf,
            stride as usize,
            width,
            height,
            &Stamp {
                frame_number,
                capture_us,
                input_seq: 0,
            },
        );
        UNTETHER_OK
    })
}
