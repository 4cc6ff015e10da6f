//! Audio from the application: PCM pushed to the host's Opus stream.

use std::ffi::c_int;

use super::{host_ref, running, UntetherHost};
use crate::error::{fail, guard, host_error_code, UNTETHER_ERR_INVALID, UNTETHER_OK};

/// Pushes `frames` frames of 48 kHz interleaved PCM with `channels` (1 or 2), produced at
/// `pts_us` (untether_now_us; 0: now). Needs UNTETHER_FEATURE_AUDIO.
#[no_mangle]
pub unsafe extern "C" fn untether_host_push_audio(
    host: *mut UntetherHost,
    pcm: *const i16,
    frames: usize,
    channels: u32,
    pts_us: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        if pcm.is_null() || !(1..=2).contains(&channels) || frames > 48_000 {
            return fail(
                UNTETHER_ERR_INVALID,
                "push_audio: NULL pcm, channels not 1 or 2, or more than 1 s",
            );
        }
        let ctx = match running(h) {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        // SAFETY: the caller passes `frames × channels` samples.
        let samples = unsafe { std::slice::from_raw_parts(pcm, frames * channels as usize) };
        let pts = if pts_us == 0 {
            untether::clock::now_us()
        } else {
            pts_us
        };
        match ctx.push_audio(samples, channels as usize, pts) {
            Ok(()) => UNTETHER_OK,
            Err(e) => fail(host_error_code(&e), e.to_string()),
        }
    })
}
