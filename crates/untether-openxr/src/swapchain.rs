//! Swapchains: GL textures or Vulkan images the application renders into, acquired, waited
//! for and released in turn. The safe core of the entry points in [`crate::ffi::swapchain`].
//!
//! A swapchain's fixed part (its session, format, size, images) is read without a lock; what
//! acquire, wait and release change is behind its own lock ([`Swapchain::state`]), so two
//! threads cycle two swapchains at once. Its images are made and freed under its session's
//! lock (the session's graphics API).

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::gl::{self, Gl};
use crate::runtime::{self, lock_session, with_session, SESSIONS, SWAPCHAINS};
use crate::session::Session;
use crate::vk_compositor;
use crate::vulkan::{self, VkImages};

/// Images per swapchain: one being rendered, one being composited, one spare.
pub const IMAGES: usize = 3;

pub struct Swapchain {
    pub session: u64,
    pub format: i64,
    pub width: u32,
    pub height: u32,
    pub array_size: u32,
    /// GL texture names or `VkImage` handles.
    pub images: Vec<u64>,
    /// Vulkan images (a Vulkan session's swapchain), else GL textures.
    pub vulkan: bool,
    state: Mutex<Cycle>,
}

/// What changes in a swapchain: the images' turn, and the Vulkan images' objects until they
/// are freed.
pub struct Cycle {
    count: u32,
    acquired: VecDeque<u32>,
    waited: bool,
    next: u32,
    /// The image the application released last: what a layer shows.
    pub released: Option<u32>,
    /// The Vulkan images' objects (taken when they are freed).
    pub vk: Option<VkImages>,
}

impl Cycle {
    /// `count` images, none acquired yet.
    pub fn new(count: u32, vk: Option<VkImages>) -> Cycle {
        Cycle {
            count,
            acquired: VecDeque::new(),
            waited: false,
            next: 0,
            released: None,
            vk,
        }
    }

    pub fn acquire(&mut self) -> Result<u32, xr::Result> {
        if self.acquired.len() >= self.count as usize || self.count == 0 {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        let i = self.next;
        self.next = (self.next + 1) % self.count;
        self.acquired.push_back(i);
        Ok(i)
    }

    pub fn wait(&mut self) -> Result<(), xr::Result> {
        if self.waited || self.acquired.is_empty() {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.waited = true;
        Ok(())
    }

    pub fn release(&mut self) -> Result<(), xr::Result> {
        if !self.waited {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.waited = false;
        self.released = self.acquired.pop_front();
        Ok(())
    }
}

impl Swapchain {
    /// A swapchain of `session` over `images` (none acquired yet).
    pub fn new(
        session: u64,
        info: &xr::SwapchainCreateInfo,
        images: Vec<u64>,
        vk: Option<VkImages>,
    ) -> Swapchain {
        Swapchain {
            session,
            format: info.format,
            width: info.width,
            height: info.height,
            array_size: info.array_size,
            vulkan: vk.is_some(),
            state: Mutex::new(Cycle::new(images.len() as u32, vk)),
            images,
        }
    }

    /// What changes, locked (lock order: see [`crate::runtime`]).
    pub fn state(&self) -> MutexGuard<'_, Cycle> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The colour formats a session's graphics API offers.
fn formats_of(s: &Session) -> &'static [i64] {
    if s.vk.is_some() {
        &vulkan::FORMATS
    } else {
        &gl::FORMATS
    }
}

/// `xrEnumerateSwapchainFormats`: the formats to write.
pub fn swapchain_formats(session: xr::Session) -> Result<&'static [i64], xr::Result> {
    with_session(session, |s| Ok(formats_of(s)))
}

/// Makes a swapchain's images with the session's graphics API.
fn create_images(
    s: &mut Session,
    info: &xr::SwapchainCreateInfo,
) -> Result<(Vec<u64>, Option<VkImages>), String> {
    if let Some(vk) = s.vk.as_ref() {
        let made = vulkan::app::create_images(vk, info, IMAGES)?;
        let raw = made
            .images
            .iter()
            .map(|i| ash::vk::Handle::as_raw(*i))
            .collect();
        return Ok((raw, Some(made)));
    }
    let gl = s.gl.get_or_insert_with(Gl::load);
    let names = gl::app::create_textures(
        gl,
        info.format,
        (info.width, info.height),
        info.array_size,
        info.mip_count,
        IMAGES,
    )?;
    Ok((names.into_iter().map(u64::from).collect(), None))
}

/// Frees a swapchain's images (the session's graphics API; under the session's lock).
pub fn destroy_images(s: &mut Session, sc: &Swapchain) {
    let images = sc.state().vk.take();
    if let (Some(vk), Some(images)) = (s.vk.as_ref(), images) {
        if let Some(c) = s.vk_compositor.as_mut() {
            // The copy in flight may read these images.
            vk_compositor::app::finish(c, vk);
        }
        vulkan::app::destroy_images(vk, images);
    } else if let Some(gl) = s.gl.as_ref() {
        let names: Vec<u32> = sc.images.iter().map(|&n| n as u32).collect();
        gl::app::delete_textures(gl, &names);
    }
}

/// `xrCreateSwapchain`.
pub fn create_swapchain(
    session: xr::Session,
    info: &xr::SwapchainCreateInfo,
) -> Result<xr::Swapchain, xr::Result> {
    let max = runtime::current()
        .map(|i| i.settings.frame_size().0.max(4096))
        .unwrap_or(4096);
    // Under the session's lock: a session destroyed meanwhile gets no swapchain.
    with_session(session, |s| {
        if !formats_of(s).contains(&info.format) {
            log::warn!(
                "xrCreateSwapchain: format {} is not supported ({})",
                info.format,
                if s.vk.is_some() {
                    "VK_FORMAT_R8G8B8A8_SRGB 43, B8G8R8A8_SRGB 50, R8G8B8A8_UNORM 37, B8G8R8A8_UNORM 44"
                } else {
                    "GL_SRGB8_ALPHA8 0x8c43, GL_RGBA8 0x8058"
                }
            );
            return Err(xr::Result::ERROR_SWAPCHAIN_FORMAT_UNSUPPORTED);
        }
        if info
            .usage_flags
            .intersects(xr::SwapchainUsageFlags::DEPTH_STENCIL_ATTACHMENT)
            || info
                .create_flags
                .intersects(xr::SwapchainCreateFlags::PROTECTED_CONTENT)
        {
            log::warn!(
                "xrCreateSwapchain: depth/stencil and protected swapchains are not supported"
            );
            return Err(xr::Result::ERROR_FEATURE_UNSUPPORTED);
        }
        if info.sample_count != 1
            || info.face_count != 1
            || info.array_size == 0
            || info.mip_count == 0
            || info.width == 0
            || info.height == 0
            || info.width > max
            || info.height > max
        {
            return Err(xr::Result::ERROR_VALIDATION_FAILURE);
        }
        let (images, vk) = create_images(s, info).map_err(|e| {
            log::error!("xrCreateSwapchain: {e}");
            xr::Result::ERROR_RUNTIME_FAILURE
        })?;
        let sc = Swapchain::new(session.into_raw(), info, images, vk);
        let id = SWAPCHAINS
            .insert_unless(sc, |_| false)
            .ok_or(xr::Result::ERROR_RUNTIME_FAILURE)?;
        Ok(xr::Swapchain::from_raw(id))
    })
}

/// `xrDestroySwapchain`: out of its table, its images freed under its session's lock.
pub fn destroy_swapchain(swapchain: xr::Swapchain) -> Result<(), xr::Result> {
    let id = swapchain.into_raw();
    let sc = SWAPCHAINS.get(id)?;
    match SESSIONS.get(sc.session) {
        Ok(obj) => {
            let mut s = lock_session(&obj);
            // Removed under the session's lock: a session destroyed meanwhile took it (and
            // freed its images) already.
            SWAPCHAINS.remove(id)?;
            if !s.destroyed {
                destroy_images(&mut s, &sc);
            }
        }
        Err(_) => {
            SWAPCHAINS.remove(id)?;
        }
    }
    Ok(())
}

/// The swapchain `swapchain` names (`xrEnumerateSwapchainImages` reads its fixed part).
pub fn swapchain(swapchain: xr::Swapchain) -> Result<Arc<Swapchain>, xr::Result> {
    SWAPCHAINS.get(swapchain.into_raw())
}

/// `xrAcquireSwapchainImage`: the image's index. Only this swapchain's lock is taken.
pub fn acquire_image(swapchain: xr::Swapchain) -> Result<u32, xr::Result> {
    SWAPCHAINS.get(swapchain.into_raw())?.state().acquire()
}

/// `xrWaitSwapchainImage`. Images are free as soon as acquired: the compositor copies a
/// released image at xrEndFrame, in GL's command order, before the application can render
/// into it again.
pub fn wait_image(swapchain: xr::Swapchain) -> Result<(), xr::Result> {
    SWAPCHAINS.get(swapchain.into_raw())?.state().wait()
}

/// `xrReleaseSwapchainImage`.
pub fn release_image(swapchain: xr::Swapchain) -> Result<(), xr::Result> {
    SWAPCHAINS.get(swapchain.into_raw())?.state().release()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn images_go_round_in_order_and_misuse_is_a_call_order_error() {
        let mut sc = Cycle::new(3, None);
        assert_eq!(sc.wait(), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
        assert_eq!(sc.release(), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
        for round in 0..4u32 {
            let i = sc.acquire().unwrap();
            assert_eq!(i, round % 3);
            sc.wait().unwrap();
            assert_eq!(sc.wait(), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
            sc.release().unwrap();
            assert_eq!(sc.released, Some(i));
        }
        for _ in 0..3 {
            sc.acquire().unwrap();
        }
        assert_eq!(sc.acquire(), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
    }

    /// A GL swapchain of `session`'s (which need not exist), 8x8, three images, put in the
    /// table as `create_swapchain` would (no GL is called: its images are never made or freed
    /// here).
    pub(crate) fn add(session: u64) -> xr::Swapchain {
        let info = xr::SwapchainCreateInfo {
            ty: xr::StructureType::SWAPCHAIN_CREATE_INFO,
            next: std::ptr::null(),
            create_flags: xr::SwapchainCreateFlags::EMPTY,
            usage_flags: xr::SwapchainUsageFlags::COLOR_ATTACHMENT,
            format: gl::FORMATS[0],
            sample_count: 1,
            width: 8,
            height: 8,
            face_count: 1,
            array_size: 1,
            mip_count: 1,
        };
        let sc = Swapchain::new(session, &info, vec![10, 11, 12], None);
        let id = SWAPCHAINS.insert_unless(sc, |_| false).unwrap();
        xr::Swapchain::from_raw(id)
    }

    #[test]
    fn a_destroyed_swapchain_is_out_of_its_table_and_its_handle_invalid() {
        let h = add(u64::MAX - 1);
        assert_eq!(acquire_image(h), Ok(0));
        assert_eq!(wait_image(h), Ok(()));
        assert_eq!(release_image(h), Ok(()));
        let sc = swapchain(h).unwrap();
        assert_eq!(sc.state().released, Some(0));
        assert_eq!(destroy_swapchain(h), Ok(()));
        assert!(!SWAPCHAINS.contains(h.into_raw()));
        let invalid = xr::Result::ERROR_HANDLE_INVALID;
        assert_eq!(acquire_image(h), Err(invalid));
        assert_eq!(wait_image(h), Err(invalid));
        assert_eq!(release_image(h), Err(invalid));
        assert_eq!(destroy_swapchain(h), Err(invalid));
        assert!(swapchain(h).is_err());
        // Who still held it keeps a valid object (its images are the session's to free).
        assert_eq!(sc.images, vec![10, 11, 12]);
        // A new swapchain never gets the old handle.
        let again = add(u64::MAX - 1);
        assert!(again.into_raw() > h.into_raw());
        assert_eq!(destroy_swapchain(again), Ok(()));
    }

    /// Each swapchain has its own lock: while one is held (as a thread in the middle of a
    /// call on it would), another thread cycles a second swapchain; the first's own call
    /// waits for it.
    #[test]
    fn two_swapchains_are_cycled_from_two_threads_without_one_lock() {
        use std::sync::mpsc;
        use std::time::Duration;
        let a = add(u64::MAX - 2);
        let b = add(u64::MAX - 2);
        let held = SWAPCHAINS.get(a.into_raw()).unwrap();
        let guard = held.state();
        let (tx, rx) = mpsc::channel();
        let other = std::thread::spawn(move || {
            let r = (acquire_image(b), wait_image(b), release_image(b));
            tx.send(r).unwrap();
            // Then the held one: it waits until the lock is let go.
            acquire_image(a)
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok((Ok(0), Ok(()), Ok(())))
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(!other.is_finished(), "a's call waits for a's lock");
        drop(guard);
        assert_eq!(other.join().unwrap(), Ok(0));
        assert_eq!(destroy_swapchain(a), Ok(()));
        assert_eq!(destroy_swapchain(b), Ok(()));
    }
}
