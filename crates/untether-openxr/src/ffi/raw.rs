//! Reading and writing the application's memory: the only place, with the graphics interop,
//! where the runtime touches raw pointers. Each helper turns a pointer the OpenXR spec gives
//! a meaning to into a reference, a slice or a string, checking what can be checked (null,
//! the structure's `type`); what cannot be checked (that a non-null pointer is really the
//! application's structure) is the caller's contract, as the spec states it for every call.

use std::ffi::{c_char, c_void, CStr};
use std::mem::MaybeUninit;

use openxr_sys as xr;

use crate::util::Array;

/// Reads a structure's `type` field (every OpenXR structure starts with it).
///
/// # Safety
/// `p` must be null or point to a structure that starts with an `XrStructureType`.
pub unsafe fn ty_of<T>(p: *const T) -> Option<xr::StructureType> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, and per the caller's contract the pointee begins with its
    // XrStructureType (a 4-byte integer every bit pattern of which is a value).
    Some(unsafe { *(p as *const xr::StructureType) })
}

/// An input structure of type `ty`: VALIDATION_FAILURE when null or of another type.
///
/// # Safety
/// `p` must be null or point to a readable structure that starts with its `XrStructureType`,
/// and be a `T` when that type is `ty`; it must stay valid for the call.
pub unsafe fn input<'a, T>(p: *const T, ty: xr::StructureType) -> Result<&'a T, xr::Result> {
    // SAFETY: forwarded to the caller's contract.
    if unsafe { ty_of(p) } != Some(ty) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: non-null (its type was read) and a `T` since its type is `ty`.
    Ok(unsafe { &*p })
}

/// An optional input structure (the spec lets it be null): VALIDATION_FAILURE when it is
/// there and of another type than `ty`.
///
/// # Safety
/// As [`ty_of`].
pub unsafe fn optional<T>(p: *const T, ty: xr::StructureType) -> Result<(), xr::Result> {
    // SAFETY: forwarded to the caller's contract.
    match unsafe { ty_of(p) } {
        Some(t) if t != ty => Err(xr::Result::ERROR_VALIDATION_FAILURE),
        _ => Ok(()),
    }
}

/// An output structure of type `ty` (its `type` and `next` the application's, its other
/// fields the runtime's to write): VALIDATION_FAILURE when null or of another type.
///
/// # Safety
/// As [`input`], and the structure must be writable and not aliased during the call.
pub unsafe fn output<'a, T>(p: *mut T, ty: xr::StructureType) -> Result<&'a mut T, xr::Result> {
    // SAFETY: forwarded to the caller's contract.
    if unsafe { ty_of(p) } != Some(ty) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: non-null (its type was read), a `T` since its type is `ty`, writable and
    // unaliased per the caller's contract.
    Ok(unsafe { &mut *p })
}

/// A plain output value (a handle, an id): VALIDATION_FAILURE when null.
///
/// # Safety
/// `p` must be null or writable for one `T`, not aliased during the call.
pub unsafe fn out_value<'a, T>(p: *mut T) -> Result<&'a mut MaybeUninit<T>, xr::Result> {
    // SAFETY: MaybeUninit<T> has T's layout; non-null is checked by `as_mut`, writability
    // is the caller's contract; nothing is read.
    unsafe { (p as *mut MaybeUninit<T>).as_mut() }.ok_or(xr::Result::ERROR_VALIDATION_FAILURE)
}

/// An input array of `count` elements (empty when `count` is 0, whatever the pointer):
/// VALIDATION_FAILURE when `count` > 0 and the pointer is null.
///
/// # Safety
/// When `count` > 0, `p` must be null or point to `count` readable `T`s valid for the call.
pub unsafe fn slice<'a, T>(p: *const T, count: u32) -> Result<&'a [T], xr::Result> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: non-null, `count` elements per the caller's contract (a u32 count of at most
    // 2^32 small structures stays far below isize::MAX bytes).
    Ok(unsafe { std::slice::from_raw_parts(p, count as usize) })
}

/// The two-call idiom's arguments as an [`Array`] of plain values the runtime writes:
/// VALIDATION_FAILURE when the count pointer is null, or the array is when `capacity` > 0.
///
/// # Safety
/// `count` must be null or writable; when `capacity` > 0, `items` must be null or writable
/// for `capacity` elements; neither aliased during the call.
pub unsafe fn array<'a, T>(
    capacity: u32,
    count: *mut u32,
    items: *mut T,
) -> Result<Array<'a, MaybeUninit<T>>, xr::Result> {
    // SAFETY: MaybeUninit<T> has T's layout and nothing is read; forwarded.
    unsafe { array_of(capacity, count, items as *mut MaybeUninit<T>) }
}

/// The two-call idiom's arguments as an [`Array`] of structures whose `type` and `next` the
/// application set (the runtime writes their other fields). The first element's type is
/// checked to be `ty` (VALIDATION_FAILURE otherwise), the others are trusted as the spec
/// requires the application to set them.
///
/// # Safety
/// As [`array`], and when `capacity` > 0 the elements must be initialized `T`s.
pub unsafe fn struct_array<'a, T>(
    capacity: u32,
    count: *mut u32,
    items: *mut T,
    ty: xr::StructureType,
) -> Result<Array<'a, T>, xr::Result> {
    // SAFETY: forwarded; the first element is read only when `capacity` > 0.
    if capacity > 0 && unsafe { ty_of(items) } != Some(ty) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: forwarded to the caller's contract.
    unsafe { array_of(capacity, count, items) }
}

/// # Safety
/// As [`array`], and the elements must be valid `T`s when `capacity` > 0.
unsafe fn array_of<'a, T>(
    capacity: u32,
    count: *mut u32,
    items: *mut T,
) -> Result<Array<'a, T>, xr::Result> {
    // SAFETY: non-null checked by `as_mut`; writable and unaliased per the contract.
    let Some(count) = (unsafe { count.as_mut() }) else {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    };
    let items: &mut [T] = if capacity == 0 {
        &mut []
    } else if items.is_null() {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    } else {
        // SAFETY: non-null, `capacity` writable elements per the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(items, capacity as usize) }
    };
    Ok(Array { count, items })
}

/// A fixed-size output string buffer of `len` characters (`XR_MAX_RESULT_STRING_SIZE`…):
/// VALIDATION_FAILURE when null.
///
/// # Safety
/// `p` must be null or writable for `len` characters, not aliased during the call.
pub unsafe fn fixed_str<'a>(p: *mut c_char, len: usize) -> Result<&'a mut [c_char], xr::Result> {
    if p.is_null() {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // SAFETY: non-null; `len` writable characters per the caller's contract; a c_char has
    // no invalid bit patterns.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A NUL-terminated string from the application (None: null or not UTF-8).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string valid for `'a`.
pub unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// An array of `count` NUL-terminated strings (the instance's extension names): None when
/// the array is null with `count` > 0 or a string is null or not UTF-8.
///
/// # Safety
/// When `count` > 0, `p` must be null or point to `count` pointers, each null or a
/// NUL-terminated string valid for `'a`.
pub unsafe fn c_strs<'a>(p: *const *const c_char, count: u32) -> Option<Vec<&'a str>> {
    // SAFETY: forwarded to the caller's contract.
    let ptrs = unsafe { slice(p, count) }.ok()?;
    // SAFETY: each is null or a NUL-terminated string per the caller's contract.
    ptrs.iter().map(|&s| unsafe { c_str(s) }).collect()
}

/// Walks a `next` chain for a structure of type `ty`.
///
/// # Safety
/// `next` must be null or a valid chain of OpenXR structures.
pub unsafe fn find_in_chain(
    mut next: *const c_void,
    ty: xr::StructureType,
) -> Option<*const c_void> {
    let mut guard = 0;
    while !next.is_null() && guard < 64 {
        // SAFETY: non-null; each chained structure starts with type and next
        // (XrBaseInStructure's layout) per the caller's contract.
        let base = unsafe { &*(next as *const xr::BaseInStructure) };
        if base.ty == ty {
            return Some(next);
        }
        next = base.next as *const c_void;
        guard += 1;
    }
    None
}

/// The two-call idiom on raw pointers (the graphics entry points' form): writes the count,
/// and the items when the capacity allows.
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
    match unsafe { array(capacity, count_out, out) } {
        Ok(a) => crate::util::two_call(a, items),
        Err(e) => e,
    }
}

/// The two-call idiom with a writer per item (for structures whose `type`/`next` the
/// application owns), on raw pointers.
///
/// # Safety
/// `count_out` must be null or writable; `write(i)` must be valid for `i < capacity`.
pub unsafe fn fill_with(
    capacity: u32,
    count_out: *mut u32,
    len: usize,
    mut write: impl FnMut(usize),
) -> xr::Result {
    // SAFETY: non-null checked by `as_mut`; writable per the caller's contract.
    let Some(count) = (unsafe { count_out.as_mut() }) else {
        return xr::Result::ERROR_VALIDATION_FAILURE;
    };
    // A zero-sized stand-in for each slot: the caller's `write(i)` writes the real one.
    let mut slots = vec![(); capacity as usize];
    crate::util::two_call_with(
        Array {
            count,
            items: &mut slots,
        },
        len,
        |_, i| write(i),
    )
}

/// Writes `s` with the two-call idiom for strings (count includes the NUL), on raw pointers.
///
/// # Safety
/// As [`fill`].
pub unsafe fn fill_str(
    capacity: u32,
    count_out: *mut u32,
    out: *mut c_char,
    s: &str,
) -> xr::Result {
    // SAFETY: forwarded to the caller's contract.
    match unsafe { array(capacity, count_out, out) } {
        Ok(a) => crate::util::two_call_str(a, s),
        Err(e) => e,
    }
}

/// The runtime's clock: CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structures_are_checked_for_null_and_type() {
        let info = xr::SystemGetInfo {
            ty: xr::StructureType::SYSTEM_GET_INFO,
            next: std::ptr::null(),
            form_factor: xr::FormFactor::HEAD_MOUNTED_DISPLAY,
        };
        // SAFETY: a live structure and null.
        unsafe {
            assert!(input(&info, xr::StructureType::SYSTEM_GET_INFO).is_ok());
            assert_eq!(
                input(&info, xr::StructureType::SESSION_CREATE_INFO).err(),
                Some(xr::Result::ERROR_VALIDATION_FAILURE)
            );
            assert_eq!(
                input::<xr::SystemGetInfo>(std::ptr::null(), xr::StructureType::SYSTEM_GET_INFO)
                    .err(),
                Some(xr::Result::ERROR_VALIDATION_FAILURE)
            );
            assert!(out_value::<u64>(std::ptr::null_mut()).is_err());
        }
    }

    #[test]
    fn arrays_need_their_pointer_only_when_they_have_elements() {
        // SAFETY: null pointers with zero counts, and a live array.
        unsafe {
            assert_eq!(slice::<u64>(std::ptr::null(), 0), Ok(&[][..]));
            assert!(slice::<u64>(std::ptr::null(), 2).is_err());
            let three = [1u64, 2, 3];
            assert_eq!(slice(three.as_ptr(), 2), Ok(&three[..2]));
            let mut n = 0;
            assert!(array::<u64>(0, &mut n, std::ptr::null_mut()).is_ok());
            assert!(array::<u64>(1, &mut n, std::ptr::null_mut()).is_err());
            assert!(array::<u64>(0, std::ptr::null_mut(), std::ptr::null_mut()).is_err());
        }
    }

    #[test]
    fn the_raw_two_call_idiom_counts_then_fills_and_refuses_short_buffers() {
        let items = [1u32, 2, 3];
        let mut n = 0u32;
        let mut out = [0u32; 3];
        // SAFETY: live count and array of the capacity given.
        unsafe {
            assert_eq!(
                fill(0, &mut n, std::ptr::null_mut(), &items),
                xr::Result::SUCCESS
            );
            assert_eq!(n, 3);
            assert_eq!(
                fill(2, &mut n, out.as_mut_ptr(), &items),
                xr::Result::ERROR_SIZE_INSUFFICIENT
            );
            assert_eq!(
                fill(3, &mut n, out.as_mut_ptr(), &items),
                xr::Result::SUCCESS
            );
            assert_eq!(out, items);
            assert_eq!(
                fill(3, std::ptr::null_mut(), out.as_mut_ptr(), &items),
                xr::Result::ERROR_VALIDATION_FAILURE
            );
            let mut seen = Vec::new();
            assert_eq!(
                fill_with(4, &mut n, 2, |i| seen.push(i)),
                xr::Result::SUCCESS
            );
            assert_eq!((n, seen), (2, vec![0, 1]));
        }
    }

    #[test]
    fn strings_and_string_arrays() {
        let a = c"XR_KHR_opengl_enable";
        let names = [a.as_ptr(), c"XR_KHR_vulkan_enable2".as_ptr()];
        // SAFETY: live NUL-terminated strings, and null.
        unsafe {
            assert_eq!(c_str(a.as_ptr()), Some("XR_KHR_opengl_enable"));
            assert_eq!(c_str(std::ptr::null()), None);
            assert_eq!(
                c_strs(names.as_ptr(), 2),
                Some(vec!["XR_KHR_opengl_enable", "XR_KHR_vulkan_enable2"])
            );
            assert_eq!(c_strs(std::ptr::null(), 0), Some(vec![]));
            let with_null = [a.as_ptr(), std::ptr::null()];
            assert_eq!(c_strs(with_null.as_ptr(), 2), None);
        }
    }
}
