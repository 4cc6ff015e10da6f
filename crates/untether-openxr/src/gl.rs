//! OpenGL in the application's context (`XR_KHR_opengl_enable`): swapchain textures, and the
//! compositor that turns a projection layer's two views into one side-by-side stereo frame
//! and reads it back without stalling the application.
//!
//! Every function here runs on the application's thread with its context current (the
//! extension's contract for `xrCreateSwapchain`, `xrDestroySwapchain`, `xrEndFrame`, …), and
//! puts back every piece of GL state it changes.

use std::ffi::{c_char, c_void, CString};
use std::num::NonZeroU32;

use crate::stream::FrameTag;
use glow::HasContext;

/// `GL_SRGB8_ALPHA8` and `GL_RGBA8`: the colour formats swapchains offer, preferred first.
pub const SRGB8_ALPHA8: i64 = 0x8C43;
pub const RGBA8: i64 = 0x8058;
pub const FORMATS: [i64; 2] = [SRGB8_ALPHA8, RGBA8];

#[link(name = "GL")]
extern "C" {
    fn glXGetProcAddressARB(name: *const c_char) -> *const c_void;
    fn glXGetCurrentContext() -> *mut c_void;
}

/// The GL functions, loaded through GLX while the application's context is current, and that
/// context (what `xrWaitFrame` checks before it touches GL).
pub struct Gl(pub glow::Context, usize);

// SAFETY: a session's objects live behind the session's lock and GL is only called from the
// thread the OpenXR calls come from, with the application's context current on it.
unsafe impl Send for Gl {}

impl Gl {
    /// Loads the functions (the application's context must be current).
    pub fn load() -> Gl {
        // SAFETY: glXGetProcAddressARB takes any NUL-terminated name; glow only calls what it
        // resolved.
        let ctx = unsafe {
            glow::Context::from_loader_function(|name| {
                let c = CString::new(name).unwrap_or_default();
                glXGetProcAddressARB(c.as_ptr())
            })
        };
        // SAFETY: glXGetCurrentContext has no preconditions.
        Gl(ctx, unsafe { glXGetCurrentContext() } as usize)
    }

    /// Whether the application's context (the one current when the functions were loaded) is
    /// current on this thread now: GL may be called here.
    pub fn is_current(&self) -> bool {
        // SAFETY: as above.
        self.1 != 0 && unsafe { glXGetCurrentContext() } as usize == self.1
    }

    /// Creates `count` textures for a swapchain; the GL names.
    ///
    /// # Safety
    /// The application's context must be current.
    pub unsafe fn create_textures(
        &self,
        format: i64,
        width: u32,
        height: u32,
        array_size: u32,
        mips: u32,
        count: usize,
    ) -> Result<Vec<u32>, String> {
        let gl = &self.0;
        let target = if array_size > 1 {
            glow::TEXTURE_2D_ARRAY
        } else {
            glow::TEXTURE_2D
        };
        let binding = if array_size > 1 {
            glow::TEXTURE_BINDING_2D_ARRAY
        } else {
            glow::TEXTURE_BINDING_2D
        };
        // SAFETY: plain GL calls on the current context; the previous binding is restored.
        unsafe {
            let previous = gl.get_parameter_i32(binding) as u32;
            let mut names = Vec::with_capacity(count);
            for _ in 0..count {
                let t = gl.create_texture()?;
                gl.bind_texture(target, Some(t));
                if array_size > 1 {
                    gl.tex_storage_3d(
                        target,
                        mips as i32,
                        format as u32,
                        width as i32,
                        height as i32,
                        array_size as i32,
                    );
                } else {
                    gl.tex_storage_2d(
                        target,
                        mips as i32,
                        format as u32,
                        width as i32,
                        height as i32,
                    );
                }
                gl.tex_parameter_i32(target, glow::TEXTURE_MIN_FILTER, glow::LINEAR as i32);
                gl.tex_parameter_i32(target, glow::TEXTURE_MAG_FILTER, glow::LINEAR as i32);
                names.push(t.0.get());
            }
            gl.bind_texture(target, NonZeroU32::new(previous).map(glow::NativeTexture));
            let err = gl.get_error();
            if err != glow::NO_ERROR {
                for &n in &names {
                    if let Some(n) = NonZeroU32::new(n) {
                        gl.delete_texture(glow::NativeTexture(n));
                    }
                }
                return Err(format!(
                    "creating the swapchain's textures failed (GL error 0x{err:x})"
                ));
            }
            Ok(names)
        }
    }

    /// # Safety
    /// The application's context must be current.
    pub unsafe fn delete_textures(&self, names: &[u32]) {
        for &n in names {
            if let Some(n) = NonZeroU32::new(n) {
                // SAFETY: a texture this runtime created.
                unsafe { self.0.delete_texture(glow::NativeTexture(n)) };
            }
        }
    }
}

/// One eye's picture: a swapchain texture (a layer of it for array textures) and the
/// rectangle the view was rendered into (GL's bottom-left origin).
#[derive(Clone, Copy, Debug)]
pub struct EyeSource {
    pub texture: u32,
    pub array: bool,
    pub layer: u32,
    pub rect: [i32; 4],
}

/// A frame read back: BGRA rows top to bottom where they lie (the mapped pixel-pack buffer,
/// no copy of our own), the pose it was rendered for and when it was ended. Dropping it unmaps
/// the buffer and puts the application's GL state back.
pub struct ReadBack<'a> {
    pub bgra: &'a [u8],
    pub tag: FrameTag,
    gl: &'a glow::Context,
    saved: Saved,
}

impl Drop for ReadBack<'_> {
    fn drop(&mut self) {
        // SAFETY: the buffer `map` bound and mapped is still bound on this (the application's,
        // current) context; the slice into it ends with this value.
        unsafe {
            self.gl.unmap_buffer(glow::PIXEL_PACK_BUFFER);
            self.saved.restore(self.gl);
        }
    }
}

/// The stereo target, two pixel-pack buffers (one frame read back while the next renders)
/// and their fences.
pub struct Compositor {
    pub width: u32,
    pub height: u32,
    target: glow::NativeTexture,
    draw_fbo: glow::NativeFramebuffer,
    read_fbo: glow::NativeFramebuffer,
    pbos: [glow::NativeBuffer; 2],
    in_flight: [Option<(glow::NativeFence, FrameTag)>; 2],
    cur: usize,
}

// SAFETY: as for [`Gl`]: used under its session's lock on the application's GL thread.
unsafe impl Send for Compositor {}

/// The GL state the compositor touches, saved and put back.
struct Saved {
    draw_fbo: u32,
    read_fbo: u32,
    pack_buffer: u32,
    pack_alignment: i32,
    pack_row_length: i32,
    scissor: bool,
    srgb: bool,
}

impl Saved {
    unsafe fn save(gl: &glow::Context) -> Saved {
        // SAFETY: queries on the current context.
        unsafe {
            Saved {
                draw_fbo: gl.get_parameter_i32(glow::DRAW_FRAMEBUFFER_BINDING) as u32,
                read_fbo: gl.get_parameter_i32(glow::READ_FRAMEBUFFER_BINDING) as u32,
                pack_buffer: gl.get_parameter_i32(glow::PIXEL_PACK_BUFFER_BINDING) as u32,
                pack_alignment: gl.get_parameter_i32(glow::PACK_ALIGNMENT),
                pack_row_length: gl.get_parameter_i32(glow::PACK_ROW_LENGTH),
                scissor: gl.is_enabled(glow::SCISSOR_TEST),
                srgb: gl.is_enabled(glow::FRAMEBUFFER_SRGB),
            }
        }
    }

    unsafe fn restore(&self, gl: &glow::Context) {
        // SAFETY: puts back what `save` read.
        unsafe {
            gl.bind_framebuffer(
                glow::DRAW_FRAMEBUFFER,
                NonZeroU32::new(self.draw_fbo).map(glow::NativeFramebuffer),
            );
            gl.bind_framebuffer(
                glow::READ_FRAMEBUFFER,
                NonZeroU32::new(self.read_fbo).map(glow::NativeFramebuffer),
            );
            gl.bind_buffer(
                glow::PIXEL_PACK_BUFFER,
                NonZeroU32::new(self.pack_buffer).map(glow::NativeBuffer),
            );
            gl.pixel_store_i32(glow::PACK_ALIGNMENT, self.pack_alignment);
            gl.pixel_store_i32(glow::PACK_ROW_LENGTH, self.pack_row_length);
            if self.scissor {
                gl.enable(glow::SCISSOR_TEST);
            }
            if self.srgb {
                gl.enable(glow::FRAMEBUFFER_SRGB);
            }
        }
    }
}

impl Compositor {
    /// # Safety
    /// The application's context must be current.
    pub unsafe fn new(gl: &Gl, width: u32, height: u32) -> Result<Compositor, String> {
        let gl = &gl.0;
        // SAFETY: GL calls on the current context; bindings restored before returning.
        unsafe {
            let saved = Saved::save(gl);
            let saved_tex = gl.get_parameter_i32(glow::TEXTURE_BINDING_2D) as u32;
            let target = gl.create_texture()?;
            gl.bind_texture(glow::TEXTURE_2D, Some(target));
            // sRGB: what the encoder takes. A linear (GL_RGBA8) swapchain is encoded to it by
            // the blit (GL_FRAMEBUFFER_SRGB on), an sRGB one goes through unchanged.
            gl.tex_storage_2d(
                glow::TEXTURE_2D,
                1,
                glow::SRGB8_ALPHA8,
                width as i32,
                height as i32,
            );
            gl.bind_texture(
                glow::TEXTURE_2D,
                NonZeroU32::new(saved_tex).map(glow::NativeTexture),
            );
            let draw_fbo = gl.create_framebuffer()?;
            gl.bind_framebuffer(glow::DRAW_FRAMEBUFFER, Some(draw_fbo));
            gl.framebuffer_texture_2d(
                glow::DRAW_FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::TEXTURE_2D,
                Some(target),
                0,
            );
            let status = gl.check_framebuffer_status(glow::DRAW_FRAMEBUFFER);
            let read_fbo = gl.create_framebuffer()?;
            let size = (width * height * 4) as i32;
            let mut pbos = [gl.create_buffer()?, gl.create_buffer()?];
            for p in &mut pbos {
                gl.bind_buffer(glow::PIXEL_PACK_BUFFER, Some(*p));
                gl.buffer_data_size(glow::PIXEL_PACK_BUFFER, size, glow::STREAM_READ);
            }
            saved.restore(gl);
            if status != glow::FRAMEBUFFER_COMPLETE {
                return Err(format!("the stereo target is incomplete (0x{status:x})"));
            }
            Ok(Compositor {
                width,
                height,
                target,
                draw_fbo,
                read_fbo,
                pbos,
                in_flight: [None, None],
                cur: 0,
            })
        }
    }

    /// Blits the two eyes side by side (flipped to top-down rows) into the stereo target,
    /// starts its read-back into a pixel-pack buffer, and returns the previous frame's pixels
    /// (read back while this one rendered), if there was one.
    ///
    /// # Safety
    /// The application's context must be current; the textures must be the application's
    /// swapchain images.
    pub unsafe fn submit<'a>(
        &'a mut self,
        gl: &'a Gl,
        eyes: &[EyeSource; 2],
        tag: FrameTag,
    ) -> Option<ReadBack<'a>> {
        let gl = &gl.0;
        let (w, h) = (self.width as i32, self.height as i32);
        // SAFETY: GL calls on the current context with objects this compositor owns and the
        // application's textures; the state is restored.
        unsafe {
            let saved = Saved::save(gl);
            gl.disable(glow::SCISSOR_TEST);
            // The blits decode an sRGB view and encode into the sRGB target; a linear view's
            // values are taken as linear light (OpenXR's meaning of a UNORM swapchain) and
            // encoded, as every runtime's compositor does.
            gl.enable(glow::FRAMEBUFFER_SRGB);
            gl.bind_framebuffer(glow::DRAW_FRAMEBUFFER, Some(self.draw_fbo));
            gl.bind_framebuffer(glow::READ_FRAMEBUFFER, Some(self.read_fbo));
            for (i, eye) in eyes.iter().enumerate() {
                let tex = NonZeroU32::new(eye.texture).map(glow::NativeTexture);
                if eye.array {
                    gl.framebuffer_texture_layer(
                        glow::READ_FRAMEBUFFER,
                        glow::COLOR_ATTACHMENT0,
                        tex,
                        0,
                        eye.layer as i32,
                    );
                } else {
                    gl.framebuffer_texture_2d(
                        glow::READ_FRAMEBUFFER,
                        glow::COLOR_ATTACHMENT0,
                        glow::TEXTURE_2D,
                        tex,
                        0,
                    );
                }
                gl.read_buffer(glow::COLOR_ATTACHMENT0);
                let [x, y, rw, rh] = eye.rect;
                let x0 = i as i32 * w / 2;
                let filter = if rw == w / 2 && rh == h {
                    glow::NEAREST
                } else {
                    glow::LINEAR
                };
                // Destination rows flipped: GL's rows go bottom-up, the encoder's top-down.
                gl.blit_framebuffer(
                    x,
                    y,
                    x + rw,
                    y + rh,
                    x0,
                    h,
                    x0 + w / 2,
                    0,
                    glow::COLOR_BUFFER_BIT,
                    filter,
                );
            }
            gl.framebuffer_texture_2d(
                glow::READ_FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::TEXTURE_2D,
                None,
                0,
            );
            // The read-back takes the stored (encoded) bytes as they are.
            gl.disable(glow::FRAMEBUFFER_SRGB);
            gl.bind_framebuffer(glow::READ_FRAMEBUFFER, Some(self.draw_fbo));
            gl.read_buffer(glow::COLOR_ATTACHMENT0);
            gl.bind_buffer(glow::PIXEL_PACK_BUFFER, Some(self.pbos[self.cur]));
            gl.pixel_store_i32(glow::PACK_ALIGNMENT, 4);
            gl.pixel_store_i32(glow::PACK_ROW_LENGTH, 0);
            gl.read_pixels(
                0,
                0,
                w,
                h,
                glow::BGRA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::BufferOffset(0),
            );
            if let Ok(f) = gl.fence_sync(glow::SYNC_GPU_COMMANDS_COMPLETE, 0) {
                self.in_flight[self.cur] = Some((f, tag));
            }
            let prev = 1 - self.cur;
            self.cur = prev;
            saved.restore(gl);
            self.map(gl, prev)
        }
    }

    /// The newest frame's read-back once it has finished, waiting for it at most
    /// `within_ns` (`xrWaitFrame`, before it sleeps: the frame goes to the encoder as soon as
    /// its copy is done, not one frame later at the next `xrEndFrame`). None: nothing in
    /// flight, or not finished in time (the next `xrEndFrame` takes it then).
    ///
    /// # Safety
    /// The application's context must be current.
    pub unsafe fn collect<'a>(&'a mut self, gl: &'a Gl, within_ns: u64) -> Option<ReadBack<'a>> {
        let gl = &gl.0;
        let newest = 1 - self.cur;
        let (fence, _) = self.in_flight[newest].as_ref()?;
        // SAFETY: this compositor's fence, on the current context.
        let status = unsafe {
            gl.client_wait_sync(
                *fence,
                glow::SYNC_FLUSH_COMMANDS_BIT,
                within_ns.min(i32::MAX as u64) as i32,
            )
        };
        if status != glow::ALREADY_SIGNALED && status != glow::CONDITION_SATISFIED {
            return None;
        }
        // SAFETY: as in submit.
        unsafe { self.map(gl, newest) }
    }

    /// The frame still in flight (at the end of a session), read back now.
    ///
    /// # Safety
    /// The application's context must be current.
    pub unsafe fn finish<'a>(&'a mut self, gl: &'a Gl) -> Option<ReadBack<'a>> {
        let prev = 1 - self.cur;
        // SAFETY: as in submit.
        unsafe { self.map(&gl.0, prev) }
    }

    /// Pixel-pack buffer `i` mapped once its fence passed, with its tag (unmapped when the
    /// read-back is dropped).
    unsafe fn map<'a>(&'a mut self, gl: &'a glow::Context, i: usize) -> Option<ReadBack<'a>> {
        let (fence, tag) = self.in_flight[i].take()?;
        let len = (self.width * self.height * 4) as usize;
        // SAFETY: the buffer and fence are this compositor's; the mapping is read within its
        // size, and unmapped (the state put back) when the ReadBack is dropped.
        unsafe {
            // Waited for already in xrWaitFrame, or a frame has passed: this rarely waits.
            gl.client_wait_sync(fence, glow::SYNC_FLUSH_COMMANDS_BIT, 100_000_000);
            gl.delete_sync(fence);
            let saved = Saved::save(gl);
            gl.bind_buffer(glow::PIXEL_PACK_BUFFER, Some(self.pbos[i]));
            let p = gl.map_buffer_range(glow::PIXEL_PACK_BUFFER, 0, len as i32, glow::MAP_READ_BIT);
            if p.is_null() {
                saved.restore(gl);
                log::warn!(
                    "untether OpenXR runtime: mapping the read-back buffer failed; frame skipped"
                );
                return None;
            }
            Some(ReadBack {
                bgra: std::slice::from_raw_parts(p, len),
                tag,
                gl,
                saved,
            })
        }
    }

    /// # Safety
    /// The application's context must be current.
    pub unsafe fn destroy(self, gl: &Gl) {
        let gl = &gl.0;
        // SAFETY: objects this compositor created.
        unsafe {
            for (f, _) in self.in_flight.iter().flatten() {
                gl.delete_sync(*f);
            }
            gl.delete_framebuffer(self.draw_fbo);
            gl.delete_framebuffer(self.read_fbo);
            gl.delete_texture(self.target);
            for p in self.pbos {
                gl.delete_buffer(p);
            }
        }
    }
}

/// The GL calls the session core makes ([`crate::session`], [`crate::frame`],
/// [`crate::swapchain`]), as safe functions. A session's [`Gl`] is loaded, and its textures
/// and [`Compositor`] are used, only inside the application's OpenXR calls that the extension
/// has it make with its GL context current on the calling thread (`xrCreateSwapchain`,
/// `xrDestroySwapchain`, `xrEndFrame`, `xrEndSession`, `xrDestroySession`), under the
/// session's lock; `xrWaitFrame`, where it need not be current, goes through [`collect`],
/// which checks first.
pub mod app {
    use super::{Compositor, EyeSource, Gl, ReadBack};
    use crate::stream::FrameTag;

    /// [`Gl::create_textures`], in `xrCreateSwapchain`.
    pub fn create_textures(
        gl: &Gl,
        format: i64,
        size: (u32, u32),
        array_size: u32,
        mips: u32,
        count: usize,
    ) -> Result<Vec<u32>, String> {
        // SAFETY: the application's context is current during xrCreateSwapchain (see above).
        unsafe { gl.create_textures(format, size.0, size.1, array_size, mips, count) }
    }

    /// [`Gl::delete_textures`], in `xrDestroySwapchain` / `xrDestroySession`.
    pub fn delete_textures(gl: &Gl, names: &[u32]) {
        // SAFETY: the application's context is current there (see above).
        unsafe { gl.delete_textures(names) }
    }

    /// [`Compositor::new`], in `xrEndFrame`.
    pub fn new_compositor(gl: &Gl, width: u32, height: u32) -> Result<Compositor, String> {
        // SAFETY: the application's context is current during xrEndFrame.
        unsafe { Compositor::new(gl, width, height) }
    }

    /// [`Compositor::submit`], in `xrEndFrame`; the eyes are the session's swapchain textures.
    pub fn submit<'a>(
        c: &'a mut Compositor,
        gl: &'a Gl,
        eyes: &[EyeSource; 2],
        tag: FrameTag,
    ) -> Option<ReadBack<'a>> {
        // SAFETY: as above; the eyes name textures of this session's swapchains (checked
        // by the caller against its swapchain table).
        unsafe { c.submit(gl, eyes, tag) }
    }

    /// [`Compositor::collect`] when the application's context is current on this thread
    /// (`xrWaitFrame`); None otherwise (the next `xrEndFrame` takes the frame then).
    pub fn collect<'a>(c: &'a mut Compositor, gl: &'a Gl, within_ns: u64) -> Option<ReadBack<'a>> {
        if !gl.is_current() {
            return None;
        }
        // SAFETY: the application's context is current on this thread (checked just now).
        unsafe { c.collect(gl, within_ns) }
    }

    /// [`Compositor::finish`], in `xrEndSession` / `xrDestroySession`.
    pub fn finish<'a>(c: &'a mut Compositor, gl: &'a Gl) -> Option<ReadBack<'a>> {
        // SAFETY: the application's context is current there (see above).
        unsafe { c.finish(gl) }
    }

    /// [`Compositor::destroy`], in `xrDestroySession`.
    pub fn destroy(c: Compositor, gl: &Gl) {
        // SAFETY: as in finish.
        unsafe { c.destroy(gl) }
    }
}
