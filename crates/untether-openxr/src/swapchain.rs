//! Swapchains: GL textures or Vulkan images the application renders into, acquired, waited
//! for and released in turn.

use std::collections::VecDeque;

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::gl::{self, Gl};
use crate::guard;
use crate::runtime::{done, lock};
use crate::session::Session;
use crate::util::{fill, fill_with, ty_of};
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
    /// The Vulkan images' objects (a Vulkan session's swapchain).
    pub vk: Option<VkImages>,
    acquired: VecDeque<u32>,
    waited: bool,
    next: u32,
    /// The image the application released last: what a layer shows.
    pub released: Option<u32>,
}

impl Swapchain {
    fn acquire(&mut self) -> Result<u32, xr::Result> {
        if self.acquired.len() >= self.images.len() {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        let i = self.next;
        self.next = (self.next + 1) % self.images.len() as u32;
        self.acquired.push_back(i);
        Ok(i)
    }

    fn wait(&mut self) -> Result<(), xr::Result> {
        if self.waited || self.acquired.is_empty() {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.waited = true;
        Ok(())
    }

    fn release(&mut self) -> Result<(), xr::Result> {
        if !self.waited {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.waited = false;
        self.released = self.acquired.pop_front();
        Ok(())
    }
}

pub(crate) unsafe extern "system" fn enumerate_swapchain_formats(
    session: xr::Session,
    capacity: u32,
    count: *mut u32,
    formats: *mut i64,
) -> xr::Result {
    guard("xrEnumerateSwapchainFormats", || {
        let mut rt = lock();
        let s = match rt.session(session) {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: the application's two-call arrays.
        unsafe { fill(capacity, count, formats, formats_of(s)) }
    })
}

/// The colour formats a session's graphics API offers.
fn formats_of(s: &Session) -> &'static [i64] {
    if s.vk.is_some() {
        &vulkan::FORMATS
    } else {
        &gl::FORMATS
    }
}

/// Makes a swapchain's images with the session's graphics API.
fn create_images(
    s: &mut Session,
    info: &xr::SwapchainCreateInfo,
) -> Result<(Vec<u64>, Option<VkImages>), String> {
    if let Some(vk) = s.vk.as_ref() {
        // SAFETY: the application's thread, during xrCreateSwapchain.
        let made = unsafe { vk.create_images(info, IMAGES) }?;
        let raw = made
            .images
            .iter()
            .map(|i| ash::vk::Handle::as_raw(*i))
            .collect();
        return Ok((raw, Some(made)));
    }
    let gl = s.gl.get_or_insert_with(Gl::load);
    // SAFETY: the application's context is current during xrCreateSwapchain.
    let names = unsafe {
        gl.create_textures(
            info.format,
            info.width,
            info.height,
            info.array_size,
            info.mip_count,
            IMAGES,
        )
    }?;
    Ok((names.into_iter().map(u64::from).collect(), None))
}

/// Frees a swapchain's images (the session's graphics API).
pub fn destroy_images(s: &mut Session, sc: Swapchain) {
    if let (Some(vk), Some(images)) = (s.vk.as_ref(), sc.vk) {
        if let Some(c) = s.vk_compositor.as_mut() {
            // SAFETY: the application's thread; the copy in flight may read these images.
            unsafe { c.finish(vk) };
        }
        // SAFETY: no copy of the runtime's uses them any more.
        unsafe { vk.destroy_images(images) };
    } else if let Some(gl) = s.gl.as_ref() {
        let names: Vec<u32> = sc.images.iter().map(|&n| n as u32).collect();
        // SAFETY: the application's context is current during xrDestroySwapchain.
        unsafe { gl.delete_textures(&names) };
    }
}

pub(crate) unsafe extern "system" fn create_swapchain(
    session: xr::Session,
    info: *const xr::SwapchainCreateInfo,
    out: *mut xr::Swapchain,
) -> xr::Result {
    guard("xrCreateSwapchain", || {
        // SAFETY: the application's structure, type checked first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::SWAPCHAIN_CREATE_INFO) || out.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked above.
        let info = unsafe { &*info };
        let mut rt = lock();
        let max = rt
            .instance
            .as_ref()
            .map(|i| i.settings.frame_size().0.max(4096))
            .unwrap_or(4096);
        let s = match rt.session(session) {
            Ok(s) => s,
            Err(e) => return e,
        };
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
            return xr::Result::ERROR_SWAPCHAIN_FORMAT_UNSUPPORTED;
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
            return xr::Result::ERROR_FEATURE_UNSUPPORTED;
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
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        let (images, vk) = match create_images(s, info) {
            Ok(i) => i,
            Err(e) => {
                log::error!("xrCreateSwapchain: {e}");
                return xr::Result::ERROR_RUNTIME_FAILURE;
            }
        };
        let id = rt.new_id();
        rt.swapchains.insert(
            id,
            Swapchain {
                session: session.into_raw(),
                format: info.format,
                width: info.width,
                height: info.height,
                array_size: info.array_size,
                images,
                vk,
                acquired: VecDeque::new(),
                waited: false,
                next: 0,
                released: None,
            },
        );
        // SAFETY: checked non-null.
        unsafe { out.write(xr::Swapchain::from_raw(id)) };
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn destroy_swapchain(swapchain: xr::Swapchain) -> xr::Result {
    guard("xrDestroySwapchain", || {
        let mut rt = lock();
        let Some(sc) = rt.swapchains.remove(&swapchain.into_raw()) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        if let Some(s) = rt.sessions.get_mut(&sc.session) {
            destroy_images(s, sc);
        }
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn enumerate_swapchain_images(
    swapchain: xr::Swapchain,
    capacity: u32,
    count: *mut u32,
    images: *mut xr::SwapchainImageBaseHeader,
) -> xr::Result {
    guard("xrEnumerateSwapchainImages", || {
        let rt = lock();
        let Some(sc) = rt.swapchains.get(&swapchain.into_raw()) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let want = if sc.vk.is_some() {
            xr::StructureType::SWAPCHAIN_IMAGE_VULKAN_KHR
        } else {
            xr::StructureType::SWAPCHAIN_IMAGE_OPENGL_KHR
        };
        if capacity > 0 {
            // SAFETY: the application's array, its first element's type checked.
            if unsafe { ty_of(images) } != Some(want) {
                return xr::Result::ERROR_VALIDATION_FAILURE;
            }
        }
        if sc.vk.is_some() {
            let out = images as *mut xr::SwapchainImageVulkanKHR;
            // SAFETY: an array of XrSwapchainImageVulkanKHR of `capacity` (type checked).
            return unsafe {
                fill_with(capacity, count, sc.images.len(), |i| {
                    (*out.add(i)).image = sc.images[i];
                })
            };
        }
        let out = images as *mut xr::SwapchainImageOpenGLKHR;
        // SAFETY: an array of XrSwapchainImageOpenGLKHR of `capacity` (type checked).
        unsafe {
            fill_with(capacity, count, sc.images.len(), |i| {
                (*out.add(i)).image = sc.images[i] as u32;
            })
        }
    })
}

fn with_swapchain(
    swapchain: xr::Swapchain,
    f: impl FnOnce(&mut Swapchain) -> Result<xr::Result, xr::Result>,
) -> xr::Result {
    let mut rt = lock();
    let Some(sc) = rt.swapchains.get_mut(&swapchain.into_raw()) else {
        return xr::Result::ERROR_HANDLE_INVALID;
    };
    done(f(sc))
}

pub(crate) unsafe extern "system" fn acquire_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageAcquireInfo,
    index: *mut u32,
) -> xr::Result {
    guard("xrAcquireSwapchainImage", || {
        // SAFETY: type read of the application's structure (null allowed).
        let t = unsafe { ty_of(info) };
        if index.is_null()
            || (t.is_some() && t != Some(xr::StructureType::SWAPCHAIN_IMAGE_ACQUIRE_INFO))
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        with_swapchain(swapchain, |sc| {
            let i = sc.acquire()?;
            // SAFETY: checked non-null.
            unsafe { index.write(i) };
            Ok(xr::Result::SUCCESS)
        })
    })
}

pub(crate) unsafe extern "system" fn wait_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageWaitInfo,
) -> xr::Result {
    guard("xrWaitSwapchainImage", || {
        // SAFETY: type read of the application's structure.
        if unsafe { ty_of(info) } != Some(xr::StructureType::SWAPCHAIN_IMAGE_WAIT_INFO) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // Images are free as soon as acquired: the compositor copies a released image at
        // xrEndFrame, in GL's command order, before the application can render into it again.
        with_swapchain(swapchain, |sc| sc.wait().map(|_| xr::Result::SUCCESS))
    })
}

pub(crate) unsafe extern "system" fn release_swapchain_image(
    swapchain: xr::Swapchain,
    info: *const xr::SwapchainImageReleaseInfo,
) -> xr::Result {
    guard("xrReleaseSwapchainImage", || {
        // SAFETY: type read of the application's structure (null allowed).
        let t = unsafe { ty_of(info) };
        if t.is_some() && t != Some(xr::StructureType::SWAPCHAIN_IMAGE_RELEASE_INFO) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        with_swapchain(swapchain, |sc| sc.release().map(|_| xr::Result::SUCCESS))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_go_round_in_order_and_misuse_is_a_call_order_error() {
        let mut sc = Swapchain {
            session: 1,
            format: gl::FORMATS[0],
            width: 8,
            height: 8,
            array_size: 1,
            images: vec![10, 11, 12],
            vk: None,
            acquired: VecDeque::new(),
            waited: false,
            next: 0,
            released: None,
        };
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
}
