//! Strings across the boundary: the caller's NUL-terminated arguments in, copies into the
//! caller's buffers out.

use std::ffi::{c_char, c_int, CStr};

use crate::error::{fail, UNTETHER_ERR_INVALID};

/// A NUL-terminated UTF-8 argument, or UNTETHER_ERR_INVALID naming the function.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, func: &str) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(fail(UNTETHER_ERR_INVALID, format!("{func}: NULL string")));
    }
    // SAFETY: a NUL-terminated string from the caller, valid for this call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail(UNTETHER_ERR_INVALID, format!("{func}: not UTF-8")))
}

/// Copies `text` and a NUL into the caller's `buf` of `size` bytes; returns the length of
/// `text` (without the NUL), or UNTETHER_ERR_INVALID (buffer NULL or too small; nothing
/// written).
pub(crate) unsafe fn copy_out(func: &str, text: &str, buf: *mut c_char, size: usize) -> c_int {
    if buf.is_null() {
        return fail(UNTETHER_ERR_INVALID, format!("{func}: buffer is NULL"));
    }
    if size < text.len() + 1 {
        return fail(
            UNTETHER_ERR_INVALID,
            format!(
                "{func}: a buffer of {size} bytes is too small; {} are needed",
                text.len() + 1
            ),
        );
    }
    // SAFETY: the caller guarantees `size` writable bytes at `buf`; text.len() + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, text.len());
        *buf.add(text.len()) = 0;
    }
    text.len() as c_int
}
