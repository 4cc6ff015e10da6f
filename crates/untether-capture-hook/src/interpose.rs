//! Finding the real GL and EGL functions, and handing the application the hook's swap calls
//! however it looks them up.
//!
//! An `LD_PRELOAD` definition of `glXSwapBuffers` is seen only by programs linked against
//! libGL. SDL2, glmark2 and most GL games open libGL with `dlopen` (often `RTLD_LOCAL`) and look
//! the swap up with `dlsym(handle, …)` or through `glXGetProcAddress(ARB)` /
//! `eglGetProcAddress`, which never reach a preloaded symbol. So, as MangoHud and obs-vkcapture
//! do, the hook defines `dlsym` itself: the real one (glibc's, found with `dlvsym`) answers, and
//! for the handful of names the hook takes over ([`HOOKED`]) the hook's function is returned
//! instead, the real function it stands for kept ([`Real::offer`]). The library handle such a
//! lookup used is remembered, so that the hook finds the real GL functions it calls itself
//! ([`real_symbol`]) even in a library opened `RTLD_LOCAL`, where `RTLD_NEXT` does not look.
//!
//! Limit: a `dlsym(RTLD_NEXT, …)` made by the application passes through here and so looks
//! after this library, not after the caller (the established tools share it); programs that
//! interpose functions themselves this way may not work under `untether run`.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// The handles GLX and EGL names were looked up in (libGL / libEGL opened by the application).
static GLX_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static EGL_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// glibc's `dlsym` (not this library's): `dlvsym` of its versions (x86-64: GLIBC_2.34 since the
/// libdl merge, GLIBC_2.2.5 before; aarch64: GLIBC_2.17).
fn real_dlsym() -> Option<Dlsym> {
    let p = REAL_DLSYM.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: only ever stored from dlvsym("dlsym"), whose type this is.
        return Some(unsafe { std::mem::transmute::<*mut c_void, Dlsym>(p) });
    }
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
        // SAFETY: valid C strings; dlvsym is not interposed by this library.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            REAL_DLSYM.store(p, Ordering::Release);
            // SAFETY: glibc's dlsym has this type.
            return Some(unsafe { std::mem::transmute::<*mut c_void, Dlsym>(p) });
        }
    }
    None
}

/// The next definition of `name` after this library (the real libGL/libEGL function); for a
/// library the application opened privately, the definition in the handle it looked GLX or
/// EGL names up in.
pub(crate) fn real_symbol(name: &CStr) -> Option<*mut c_void> {
    let real = real_dlsym()?;
    // SAFETY: glibc's dlsym with RTLD_NEXT (after this library, its caller) and a C string.
    let p = unsafe { real(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() {
        return Some(p);
    }
    let handle = if name.to_bytes().starts_with(b"egl") {
        &EGL_HANDLE
    } else {
        &GLX_HANDLE
    };
    let h = handle.load(Ordering::Acquire);
    if h.is_null() {
        return None;
    }
    // SAFETY: a handle the application passed to dlsym (so one dlopen gave it).
    let p = unsafe { real(h, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// A real function the hook stands in for: found once (by the application's own lookup, or
/// by [`real_symbol`]) and kept.
pub(crate) struct Real {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl Real {
    pub(crate) const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The real function's address (None: no library defines it).
    pub(crate) fn get(&self) -> Option<*mut c_void> {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        let p = real_symbol(self.name)?;
        self.offer(p);
        Some(p)
    }

    /// The application looked the function up itself: this is the real one (the first kept).
    fn offer(&self, p: *mut c_void) {
        let _ =
            self.ptr
                .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A name the hook takes over: the real function it stands for, and the hook's own.
pub(crate) struct Hooked {
    real: &'static Real,
    hook: fn() -> *mut c_void,
}

impl Hooked {
    pub(crate) const fn new(real: &'static Real, hook: fn() -> *mut c_void) -> Hooked {
        Hooked { real, hook }
    }
}

/// The hook's function for `name` (None: not one it takes over).
fn hooked(name: &CStr) -> Option<&'static Hooked> {
    crate::gl::HOOKED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| h)
}

/// What `name`, found at `found` (non-null) in `handle`, is to the application.
fn lookup(handle: *mut c_void, name: &CStr, found: *mut c_void) -> *mut c_void {
    let bytes = name.to_bytes();
    if bytes.starts_with(b"glX") {
        let _ = GLX_HANDLE.compare_exchange(
            std::ptr::null_mut(),
            handle,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    } else if bytes.starts_with(b"egl") {
        let _ = EGL_HANDLE.compare_exchange(
            std::ptr::null_mut(),
            handle,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    match hooked(name) {
        Some(h) => {
            h.real.offer(found);
            (h.hook)()
        }
        None => found,
    }
}

/// What a `GetProcAddress` (GLX or EGL) returns for `name`: the hook's function where it takes
/// the name over (the real one kept), else `found` as it is.
pub(crate) fn proc_address(name: *const c_char, found: *mut c_void) -> *mut c_void {
    if name.is_null() || found.is_null() {
        return found;
    }
    // SAFETY: a non-null C string from the application's GetProcAddress call.
    let name = unsafe { CStr::from_ptr(name) };
    match hooked(name) {
        Some(h) => {
            h.real.offer(found);
            (h.hook)()
        }
        None => found,
    }
}

/// The application's `dlsym`: glibc's answer, with the hook's swap and GetProcAddress
/// functions in place of libGL's and libEGL's.
///
/// # Safety
/// Called exactly as glibc's `dlsym`.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    let found = real(handle, name);
    // RTLD_NEXT / RTLD_DEFAULT lookups are the hook's own or the process-wide ones, where the
    // preloaded symbols already come first.
    if found.is_null() || name.is_null() || handle == libc::RTLD_NEXT || handle.is_null() {
        return found;
    }
    lookup(handle, CStr::from_ptr(name), found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_dlsym_is_glibcs_and_finds_libc_functions() {
        let real = real_dlsym().expect("glibc's dlsym by version");
        // SAFETY: RTLD_DEFAULT lookup of a libc function with a C string.
        let p = unsafe { real(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!p.is_null());
        assert_ne!(real as *mut c_void, dlsym as *mut c_void);
    }

    #[test]
    fn a_lookup_of_a_hooked_name_gives_the_hook_and_keeps_the_real_function() {
        let fake = 0x1234usize as *mut c_void;
        // A real handle (the program's own), since real_symbol may look in it later.
        // SAFETY: dlopen(NULL) gives the main program's handle.
        let handle = unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_NOW) };
        let got = lookup(handle, c"glXSwapBuffers", fake);
        assert_eq!(got, crate::gl::glXSwapBuffers as *mut c_void);
        assert_eq!(crate::gl::REAL_GLX_SWAP.get(), Some(fake));
        // Any other name is passed through untouched.
        assert_eq!(lookup(handle, c"glXQueryDrawable", fake), fake);
        assert_eq!(proc_address(c"glClear".as_ptr(), fake), fake);
        assert_eq!(
            proc_address(c"eglSwapBuffers".as_ptr(), fake),
            crate::gl::eglSwapBuffers as *mut c_void
        );
    }
}
