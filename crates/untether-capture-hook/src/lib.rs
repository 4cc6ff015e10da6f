//! Loaded into an application by `untether run`: copies each presented frame into untether's
//! frame ring (crate `untether-capture`), whose fd the application inherits
//! (`UNTETHER_CAPTURE_FD`), without ever blocking the present.
//!
//! - [`vk`]: an implicit Vulkan layer (`VK_LAYER_UNTETHER_capture`, enabled by
//!   `UNTETHER_CAPTURE=1`): swapchain images get `TRANSFER_SRC`, each due present copies its
//!   image into a host-visible buffer on the presenting queue (one copy in flight), and a
//!   worker thread publishes it when its fence signals.
//! - [`gl`]: `LD_PRELOAD` hooks of `glXSwapBuffers` / `eglSwapBuffers`: an asynchronous
//!   `glReadPixels` into a pixel-pack buffer, published when its fence has signalled. The hook
//!   also defines `dlsym`, `glXGetProcAddress(ARB)` and `eglGetProcAddress` (module
//!   `interpose`), so programs that open libGL themselves (SDL2, glmark2) get the hook's swap.
//!
//! Without the environment variable the library does nothing but forward.

// The hook resolves C entry points by name: each `transmute` turns a `void *` into the
// function type of the field or binding it is assigned to, which states the type.
#![allow(clippy::missing_safety_doc, clippy::missing_transmute_annotations)]

use std::sync::OnceLock;

use untether_capture::FrameRing;

pub mod gl;
mod interpose;
pub mod vk;
mod vk_copy;

static RING: OnceLock<Option<FrameRing>> = OnceLock::new();

/// The ring this process writes into (None: not started by `untether run`, or the ring is
/// unusable — said once on stderr).
pub(crate) use interpose::real_symbol;

pub(crate) fn ring() -> Option<&'static FrameRing> {
    RING.get_or_init(|| match FrameRing::from_env()? {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("untether capture hook: no capture in this process: {e}");
            None
        }
    })
    .as_ref()
}

/// Runs the hook's work for one present, never letting a panic cross into the application,
/// and adds the time it took to the ring's counters.
pub(crate) fn timed(ring: &FrameRing, f: impl FnOnce()) {
    let t0 = std::time::Instant::now();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    ring.add_hook_time(t0.elapsed().as_nanos() as u64);
}
