//! The OpenGL hook (`LD_PRELOAD`): `glXSwapBuffers` and `eglSwapBuffers` copy the back buffer
//! into a pixel-pack buffer (asynchronous `glReadPixels` + a fence), then call the real swap.
//! One copy is in flight per context: the next present maps it when its fence has signalled
//! (checked with a zero timeout, never waited for) and publishes it into the ring; a present
//! due while the copy is still in flight is dropped and counted. The copy is polled once right
//! after it is issued too, so a fast GPU (or llvmpipe) publishes it in the same present.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use untether_capture::{FrameFormat, FrameRing};

use crate::interpose::{proc_address, Hooked, Real};
use crate::{real_symbol, ring, timed};

const GL_PIXEL_PACK_BUFFER: u32 = 0x88EB;
const GL_PIXEL_PACK_BUFFER_BINDING: u32 = 0x88ED;
const GL_READ_FRAMEBUFFER: u32 = 0x8CA8;
const GL_READ_FRAMEBUFFER_BINDING: u32 = 0x8CAA;
const GL_READ_BUFFER: u32 = 0x0C02;
const GL_PACK_ALIGNMENT: u32 = 0x0D05;
const GL_PACK_ROW_LENGTH: u32 = 0x0D02;
const GL_BGRA: u32 = 0x80E1;
const GL_RGBA: u32 = 0x1908;
const GL_UNSIGNED_BYTE: u32 = 0x1401;
const GL_BACK: u32 = 0x0405;
const GL_STREAM_READ: u32 = 0x88E1;
const GL_MAP_READ_BIT: u32 = 0x0001;
const GL_SYNC_GPU_COMMANDS_COMPLETE: u32 = 0x9117;
const GL_ALREADY_SIGNALED: u32 = 0x911A;
const GL_CONDITION_SATISFIED: u32 = 0x911C;
const GLX_WIDTH: c_int = 0x801D;
const GLX_HEIGHT: c_int = 0x801E;
const EGL_WIDTH: c_int = 0x3057;
const EGL_HEIGHT: c_int = 0x3056;

type GetProc = unsafe extern "C" fn(*const c_char) -> *mut c_void;

/// The GL entry points the copy uses (resolved through the context's GetProcAddress).
struct GlFns {
    get_integerv: unsafe extern "C" fn(u32, *mut c_int),
    pixel_storei: unsafe extern "C" fn(u32, c_int),
    read_pixels: unsafe extern "C" fn(c_int, c_int, c_int, c_int, u32, u32, *mut c_void),
    gen_buffers: unsafe extern "C" fn(c_int, *mut c_uint),
    bind_buffer: unsafe extern "C" fn(u32, c_uint),
    buffer_data: unsafe extern "C" fn(u32, isize, *const c_void, u32),
    map_buffer_range: unsafe extern "C" fn(u32, isize, isize, u32) -> *mut c_void,
    unmap_buffer: unsafe extern "C" fn(u32) -> u8,
    fence_sync: unsafe extern "C" fn(u32, u32) -> *mut c_void,
    client_wait_sync: unsafe extern "C" fn(*mut c_void, u32, u64) -> u32,
    delete_sync: unsafe extern "C" fn(*mut c_void),
    flush: unsafe extern "C" fn(),
    bind_framebuffer: Option<unsafe extern "C" fn(u32, c_uint)>,
    read_buffer: Option<unsafe extern "C" fn(u32)>,
}

impl GlFns {
    /// Every function, or None when the context lacks one (GL < 3.0 / GLES < 3.0: no copy).
    unsafe fn load(get: GetProc) -> Option<GlFns> {
        unsafe fn f(get: GetProc, name: &CStr) -> Option<*mut c_void> {
            let p = get(name.as_ptr());
            (!p.is_null()).then_some(p)
        }
        macro_rules! load {
            ($name:literal) => {
                std::mem::transmute::<*mut c_void, _>(f(get, $name)?)
            };
        }
        Some(GlFns {
            get_integerv: load!(c"glGetIntegerv"),
            pixel_storei: load!(c"glPixelStorei"),
            read_pixels: load!(c"glReadPixels"),
            gen_buffers: load!(c"glGenBuffers"),
            bind_buffer: load!(c"glBindBuffer"),
            buffer_data: load!(c"glBufferData"),
            map_buffer_range: load!(c"glMapBufferRange"),
            unmap_buffer: load!(c"glUnmapBuffer"),
            fence_sync: load!(c"glFenceSync"),
            client_wait_sync: load!(c"glClientWaitSync"),
            delete_sync: load!(c"glDeleteSync"),
            flush: load!(c"glFlush"),
            bind_framebuffer: f(get, c"glBindFramebuffer")
                .map(|p| std::mem::transmute::<*mut c_void, _>(p)),
            read_buffer: f(get, c"glReadBuffer").map(|p| std::mem::transmute::<*mut c_void, _>(p)),
        })
    }
}

/// A copy on its way into the pixel-pack buffer.
struct Pending {
    sync: *mut c_void,
    width: u32,
    height: u32,
    format: FrameFormat,
    present_us: u64,
    /// Its due number (what the ring numbers the frame).
    due: u64,
}

/// One context's copy state (per thread: a GL context is current on one thread).
struct Copier {
    context: *mut c_void,
    fns: Option<GlFns>,
    pbo: c_uint,
    pbo_bytes: usize,
    pending: Option<Pending>,
}

thread_local! {
    static COPIER: RefCell<Option<Copier>> = const { RefCell::new(None) };
}

/// The drawable being presented, for its size and the API's GetProcAddress.
enum Surface {
    Glx {
        dpy: *mut c_void,
        drawable: c_ulong,
    },
    Egl {
        dpy: *mut c_void,
        surface: *mut c_void,
    },
}

impl Surface {
    unsafe fn size(&self) -> Option<(u32, u32)> {
        let (mut w, mut h) = (0 as c_uint, 0 as c_uint);
        match *self {
            Surface::Glx { dpy, drawable } => {
                type Q = unsafe extern "C" fn(*mut c_void, c_ulong, c_int, *mut c_uint);
                let q: Q = std::mem::transmute(real_symbol(c"glXQueryDrawable")?);
                q(dpy, drawable, GLX_WIDTH, &mut w);
                q(dpy, drawable, GLX_HEIGHT, &mut h);
            }
            Surface::Egl { dpy, surface } => {
                type Q = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int, *mut c_int) -> u32;
                let q: Q = std::mem::transmute(real_symbol(c"eglQuerySurface")?);
                let (mut iw, mut ih) = (0, 0);
                q(dpy, surface, EGL_WIDTH, &mut iw);
                q(dpy, surface, EGL_HEIGHT, &mut ih);
                (w, h) = (iw.max(0) as c_uint, ih.max(0) as c_uint);
            }
        }
        (w > 0 && h > 0).then_some((w, h))
    }

    unsafe fn context(&self) -> *mut c_void {
        let name = match self {
            Surface::Glx { .. } => c"glXGetCurrentContext",
            Surface::Egl { .. } => c"eglGetCurrentContext",
        };
        match real_symbol(name) {
            Some(p) => {
                let f: unsafe extern "C" fn() -> *mut c_void = std::mem::transmute(p);
                f()
            }
            None => std::ptr::null_mut(),
        }
    }

    unsafe fn get_proc(&self) -> Option<GetProc> {
        let real = match self {
            Surface::Glx { .. } => &REAL_GLX_GETPROC_ARB,
            Surface::Egl { .. } => &REAL_EGL_GETPROC,
        };
        real.get()
            .map(|p| std::mem::transmute::<*mut c_void, GetProc>(p))
    }

    /// Desktop GL reads BGRA (the encoder's layout); GLES guarantees only RGBA.
    fn format(&self) -> (u32, FrameFormat) {
        match self {
            Surface::Glx { .. } => (GL_BGRA, FrameFormat::Bgra),
            Surface::Egl { .. } => (GL_RGBA, FrameFormat::Rgba),
        }
    }
}

/// Copies the frame about to be presented on `surface` (before the real swap).
unsafe fn on_present(ring: &FrameRing, surface: Surface) {
    let now = untether_capture::now_us();
    let context = surface.context();
    if context.is_null() {
        ring.note_present(now);
        return;
    }
    COPIER.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_none_or(|c| c.context != context) {
            // A new context (or the first): its own buffer; the old one's belongs to it.
            *c = Some(Copier {
                context,
                fns: surface.get_proc().and_then(|g| GlFns::load(g)),
                pbo: 0,
                pbo_bytes: 0,
                pending: None,
            });
        }
        let Some(copier) = c.as_mut() else { return };
        copier.present(ring, &surface, now);
    });
}

impl Copier {
    unsafe fn present(&mut self, ring: &FrameRing, surface: &Surface, now: u64) {
        if self.fns.is_none() {
            if ring.note_present(now).is_some() {
                ring.count_unsupported();
            }
            return;
        }
        self.poll(ring);
        let Some(fns) = self.fns.as_ref() else { return };
        let Some(due) = ring.note_present(now) else {
            return;
        };
        if self.pending.is_some() {
            // The previous copy is still in flight: drop this frame rather than wait.
            ring.count_busy();
            return;
        }
        let Some((w, h)) = surface.size() else {
            ring.count_unsupported();
            return;
        };
        let bytes = w as usize * h as usize * 4;
        if bytes > ring.slot_bytes() {
            // Counted by the ring as too big.
            drop(ring.begin_write(w, h, w as usize * 4, FrameFormat::Bgra, true));
            return;
        }
        let (gl_format, format) = surface.format();
        let saved = Saved::take(fns);
        if self.pbo == 0 {
            (fns.gen_buffers)(1, &mut self.pbo);
        }
        (fns.bind_buffer)(GL_PIXEL_PACK_BUFFER, self.pbo);
        if self.pbo_bytes != bytes {
            (fns.buffer_data)(
                GL_PIXEL_PACK_BUFFER,
                bytes as isize,
                std::ptr::null(),
                GL_STREAM_READ,
            );
            self.pbo_bytes = bytes;
        }
        if let Some(bind) = fns.bind_framebuffer {
            bind(GL_READ_FRAMEBUFFER, 0);
        }
        if let Some(rb) = fns.read_buffer {
            rb(GL_BACK);
        }
        (fns.pixel_storei)(GL_PACK_ALIGNMENT, 4);
        (fns.pixel_storei)(GL_PACK_ROW_LENGTH, 0);
        (fns.read_pixels)(
            0,
            0,
            w as c_int,
            h as c_int,
            gl_format,
            GL_UNSIGNED_BYTE,
            std::ptr::null_mut(),
        );
        let sync = (fns.fence_sync)(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
        (fns.flush)();
        saved.restore(fns);
        self.pending = Some(Pending {
            sync,
            width: w,
            height: h,
            format,
            present_us: now,
            due,
        });
        self.poll(ring);
    }

    /// Publishes the copy in flight if its fence has signalled (never waits).
    unsafe fn poll(&mut self, ring: &FrameRing) {
        let Some(fns) = self.fns.as_ref() else { return };
        let Some(p) = self.pending.as_ref() else {
            return;
        };
        let status = (fns.client_wait_sync)(p.sync, 0, 0);
        if status != GL_ALREADY_SIGNALED && status != GL_CONDITION_SATISFIED {
            return;
        }
        let Some(p) = self.pending.take() else { return };
        (fns.delete_sync)(p.sync);
        let saved = Saved::take(fns);
        (fns.bind_buffer)(GL_PIXEL_PACK_BUFFER, self.pbo);
        let src = (fns.map_buffer_range)(
            GL_PIXEL_PACK_BUFFER,
            0,
            self.pbo_bytes as isize,
            GL_MAP_READ_BIT,
        );
        if !src.is_null() {
            let stride = p.width as usize * 4;
            if let Some(mut slot) = ring.begin_write(p.width, p.height, stride, p.format, true) {
                let dst = slot.pixels_mut();
                let n = dst.len().min(self.pbo_bytes);
                std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.as_mut_ptr(), n);
                slot.publish(p.present_us, p.due);
            }
            (fns.unmap_buffer)(GL_PIXEL_PACK_BUFFER);
        }
        saved.restore(fns);
    }
}

/// The application's GL state the copy changes, put back afterwards.
struct Saved {
    pack_buffer: c_int,
    read_fb: c_int,
    read_buffer: c_int,
    alignment: c_int,
    row_length: c_int,
}

impl Saved {
    unsafe fn take(fns: &GlFns) -> Saved {
        let get = |e| {
            let mut v = 0;
            (fns.get_integerv)(e, &mut v);
            v
        };
        Saved {
            pack_buffer: get(GL_PIXEL_PACK_BUFFER_BINDING),
            read_fb: get(GL_READ_FRAMEBUFFER_BINDING),
            read_buffer: get(GL_READ_BUFFER),
            alignment: get(GL_PACK_ALIGNMENT),
            row_length: get(GL_PACK_ROW_LENGTH),
        }
    }

    unsafe fn restore(&self, fns: &GlFns) {
        (fns.bind_buffer)(GL_PIXEL_PACK_BUFFER, self.pack_buffer as c_uint);
        if let Some(bind) = fns.bind_framebuffer {
            bind(GL_READ_FRAMEBUFFER, self.read_fb as c_uint);
        }
        if let Some(rb) = fns.read_buffer {
            if self.read_buffer != 0 {
                rb(self.read_buffer as u32);
            }
        }
        (fns.pixel_storei)(GL_PACK_ALIGNMENT, self.alignment);
        (fns.pixel_storei)(GL_PACK_ROW_LENGTH, self.row_length);
    }
}

type GlxSwap = unsafe extern "C" fn(*mut c_void, c_ulong);
type EglSwap = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_uint;

pub(crate) static REAL_GLX_SWAP: Real = Real::new(c"glXSwapBuffers");
static REAL_EGL_SWAP: Real = Real::new(c"eglSwapBuffers");
static REAL_GLX_GETPROC_ARB: Real = Real::new(c"glXGetProcAddressARB");
static REAL_GLX_GETPROC: Real = Real::new(c"glXGetProcAddress");
static REAL_EGL_GETPROC: Real = Real::new(c"eglGetProcAddress");

/// The names the hook takes over however the application looks them up (`dlsym` on a library
/// it opened, a GetProcAddress), each with the real function it stands for.
pub(crate) static HOOKED: [(&CStr, Hooked); 5] = [
    (
        c"glXSwapBuffers",
        Hooked::new(&REAL_GLX_SWAP, || glXSwapBuffers as *mut c_void),
    ),
    (
        c"eglSwapBuffers",
        Hooked::new(&REAL_EGL_SWAP, || eglSwapBuffers as *mut c_void),
    ),
    (
        c"glXGetProcAddressARB",
        Hooked::new(&REAL_GLX_GETPROC_ARB, || {
            glXGetProcAddressARB as *mut c_void
        }),
    ),
    (
        c"glXGetProcAddress",
        Hooked::new(&REAL_GLX_GETPROC, || glXGetProcAddress as *mut c_void),
    ),
    (
        c"eglGetProcAddress",
        Hooked::new(&REAL_EGL_GETPROC, || eglGetProcAddress as *mut c_void),
    ),
];

/// The application's `glXSwapBuffers`: copy, then the real swap.
///
/// # Safety
/// Called by the application exactly as libGL's `glXSwapBuffers`.
#[no_mangle]
pub unsafe extern "C" fn glXSwapBuffers(dpy: *mut c_void, drawable: c_ulong) {
    if let Some(ring) = ring() {
        timed(ring, || on_present(ring, Surface::Glx { dpy, drawable }));
    }
    if let Some(real) = REAL_GLX_SWAP.get() {
        std::mem::transmute::<*mut c_void, GlxSwap>(real)(dpy, drawable);
    }
}

/// The application's `eglSwapBuffers`: copy, then the real swap.
///
/// # Safety
/// Called by the application exactly as libEGL's `eglSwapBuffers`.
#[no_mangle]
pub unsafe extern "C" fn eglSwapBuffers(dpy: *mut c_void, surface: *mut c_void) -> c_uint {
    if let Some(ring) = ring() {
        timed(ring, || on_present(ring, Surface::Egl { dpy, surface }));
    }
    match REAL_EGL_SWAP.get() {
        Some(real) => std::mem::transmute::<*mut c_void, EglSwap>(real)(dpy, surface),
        None => 0,
    }
}

/// `glXGetProcAddressARB("glXSwapBuffers")` gives the hook too (GLX loaders such as GLEW
/// and SDL look the swap up this way).
///
/// # Safety
/// Called by the application exactly as libGL's `glXGetProcAddressARB`.
#[no_mangle]
pub unsafe extern "C" fn glXGetProcAddressARB(name: *const c_char) -> *mut c_void {
    get_proc_address(&REAL_GLX_GETPROC_ARB, name)
}

/// As [`glXGetProcAddressARB`].
///
/// # Safety
/// Called by the application exactly as libGL's `glXGetProcAddress`.
#[no_mangle]
pub unsafe extern "C" fn glXGetProcAddress(name: *const c_char) -> *mut c_void {
    get_proc_address(&REAL_GLX_GETPROC, name)
}

/// `eglGetProcAddress("eglSwapBuffers")` gives the hook (EGL loaders such as SDL's and
/// libepoxy look the swap up this way).
///
/// # Safety
/// Called by the application exactly as libEGL's `eglGetProcAddress`.
#[no_mangle]
pub unsafe extern "C" fn eglGetProcAddress(name: *const c_char) -> *mut c_void {
    get_proc_address(&REAL_EGL_GETPROC, name)
}

unsafe fn get_proc_address(real: &Real, name: *const c_char) -> *mut c_void {
    match real.get() {
        Some(p) => proc_address(name, std::mem::transmute::<*mut c_void, GetProc>(p)(name)),
        None => std::ptr::null_mut(),
    }
}
