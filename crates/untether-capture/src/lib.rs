//! Frames from inside an application and from the display controller.
//!
//! - [`ring`]: the shared-memory frame ring (memfd + futex) between a capture hook in the
//!   application's process (the Vulkan layer and the GL hook of crate
//!   `untether-capture-hook`) and the host: newest wins, the application never waits.
//! - [`kms`]: KMS/DRM capture (the scan-out buffer of a CRTC, as FFmpeg's kmsgrab does).

pub mod kms;
pub mod launch;
pub mod private_dir;
pub mod ring;
#[cfg(feature = "vulkan")]
pub mod vk;

pub use ring::{FrameFormat, FrameRing, RingCounters, RingError, TakenFrame};

/// The environment variable that carries the ring's file descriptor into the application.
pub const RING_FD_ENV: &str = "UNTETHER_CAPTURE_FD";
/// The environment variable that enables the implicit Vulkan layer (its `enable_environment`).
pub const LAYER_ENABLE_ENV: &str = "UNTETHER_CAPTURE";
/// The Vulkan layer's name.
pub const LAYER_NAME: &str = "VK_LAYER_UNTETHER_capture";
/// The hook library's file name (the Vulkan layer and the GL hook in one shared object).
pub const HOOK_LIBRARY: &str = "libuntether_capture_hook.so";

/// `CLOCK_MONOTONIC` in microseconds: the host's clock (`untether_clock::now_us`), read in
/// the application's process for the present time.
pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}
