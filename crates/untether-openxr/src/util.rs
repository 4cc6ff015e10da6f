//! Small helpers every entry point uses: the two-call idiom, fixed-size strings, the clock.

use std::ffi::{c_char, CStr};
use std::sync::Once;

use openxr_sys as xr;

/// Logging to stderr, once, at `UNTETHER_LOG` (or `RUST_LOG`), default warnings only (the
/// application's own output stays readable).
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("UNTETHER_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .unwrap_or_else(|_| "warn".into());
        let _ = env_logger::Builder::new()
            .parse_filters(&filter)
            .format_target(false)
            .try_init();
    });
}

/// The runtime's clock: `XrTime` is CLOCK_MONOTONIC in nanoseconds, the same clock untether's
/// host stamps frames with (µs), so no conversion is ever estimated.
pub fn now() -> xr::Time {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    xr::Time::from_nanos(ts.tv_sec * 1_000_000_000 + ts.tv_nsec)
}

/// The two-call idiom: writes the count, and the items when the capacity allows.
///
/// # Safety
/// `count_out` must be null or writable; `out` must have room for `capacity` items.
pub unsafe fn fill<T: Copy>(
    capacity: u32,
    count_out: *mut u32,
    out: *mut T,
    items: &[T],
) -> xr::Result {
    // SAFETY: forwarded to the caller's contract.
    unsafe {
        fill_with(capacity, count_out, items.len(), |i| {
            out.add(i).write(items[i]);
        })
    }
}

/// The two-call idiom with a writer per item (for structures whose `type`/`next` the
/// application owns).
///
/// # Safety
/// `count_out` must be null or writable; `write(i)` must be valid for `i < capacity`.
pub unsafe fn fill_with(
    capacity: u32,
    count_out: *mut u32,
    len: usize,
    mut write: impl FnMut(usize),
) -> xr::Result {
    if count_out.is_null() {
        return xr::Result::ERROR_VALIDATION_FAILURE;
    }
    // SAFETY: checked non-null; the caller gives a writable u32.
    unsafe { count_out.write(len as u32) };
    if capacity == 0 {
        return xr::Result::SUCCESS;
    }
    if (capacity as usize) < len {
        return xr::Result::ERROR_SIZE_INSUFFICIENT;
    }
    for i in 0..len {
        write(i);
    }
    xr::Result::SUCCESS
}

/// Copies `s` into a fixed-size C string field (truncated, NUL-terminated).
pub fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// A fixed-size C string field as text (up to its first NUL; None if it has none or is not
/// UTF-8).
pub fn get_str(src: &[c_char]) -> Option<String> {
    let bytes: Vec<u8> = src.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .ok()
        .and_then(|c| c.to_str().ok())
        .map(str::to_string)
}

/// A NUL-terminated string from the application.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string.
pub unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Writes `s` with the two-call idiom for strings (count includes the NUL).
///
/// # Safety
/// As [`fill`].
pub unsafe fn fill_str(
    capacity: u32,
    count_out: *mut u32,
    out: *mut c_char,
    s: &str,
) -> xr::Result {
    let mut bytes: Vec<c_char> = s.bytes().map(|b| b as c_char).collect();
    bytes.push(0);
    // SAFETY: forwarded.
    unsafe { fill(capacity, count_out, out, &bytes) }
}

/// Reads a structure's `type` field (every OpenXR input structure starts with it).
///
/// # Safety
/// `p` must be null or point to a structure that starts with an `XrStructureType`.
pub unsafe fn ty_of<T>(p: *const T) -> Option<xr::StructureType> {
    if p.is_null() {
        return None;
    }
    // SAFETY: every OpenXR structure begins with its XrStructureType.
    Some(unsafe { *(p as *const xr::StructureType) })
}

/// Walks a `next` chain for a structure of type `ty`.
///
/// # Safety
/// `next` must be null or a valid chain of OpenXR structures.
pub unsafe fn find_in_chain(
    mut next: *const std::ffi::c_void,
    ty: xr::StructureType,
) -> Option<*const std::ffi::c_void> {
    let mut guard = 0;
    while !next.is_null() && guard < 64 {
        // SAFETY: each chained structure starts with type and next.
        let base = unsafe { &*(next as *const xr::BaseInStructure) };
        if base.ty == ty {
            return Some(next);
        }
        next = base.next as *const std::ffi::c_void;
        guard += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_call_idiom_counts_then_fills_and_refuses_short_buffers() {
        let items = [1u32, 2, 3];
        let mut n = 0u32;
        let mut out = [0u32; 3];
        assert_eq!(
            unsafe { fill(0, &mut n, std::ptr::null_mut(), &items) },
            xr::Result::SUCCESS
        );
        assert_eq!(n, 3);
        assert_eq!(
            unsafe { fill(2, &mut n, out.as_mut_ptr(), &items) },
            xr::Result::ERROR_SIZE_INSUFFICIENT
        );
        assert_eq!(
            unsafe { fill(3, &mut n, out.as_mut_ptr(), &items) },
            xr::Result::SUCCESS
        );
        assert_eq!(out, items);
        assert_eq!(
            unsafe { fill(3, std::ptr::null_mut(), out.as_mut_ptr(), &items) },
            xr::Result::ERROR_VALIDATION_FAILURE
        );
    }

    #[test]
    fn fixed_strings_truncate_and_terminate() {
        let mut buf = [1 as c_char; 4];
        put_str(&mut buf, "untether");
        assert_eq!(get_str(&buf).as_deref(), Some("unt"));
        assert_eq!(get_str(&[b'a' as c_char; 3]), None);
    }
}
