//! Small helpers every entry point uses: the two-call idiom, fixed-size strings, the clock.
//! Safe: the entry layer ([`crate::ffi`]) turns the application's pointers into the
//! references and [`Array`]s these take. The raw-pointer forms the graphics entry points
//! still use are re-exported from [`crate::ffi::raw`].

#![forbid(unsafe_code)]

use std::ffi::{c_char, CStr};
use std::mem::MaybeUninit;
use std::sync::Once;

use openxr_sys as xr;

pub use crate::ffi::raw::{c_str, fill, fill_str, fill_with, find_in_chain, ty_of};

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
    xr::Time::from_nanos(crate::ffi::raw::monotonic_ns())
}

/// An output array of the two-call idiom, as the entry layer hands it over: where the count
/// goes, and the application's `capacity` slots (none when it only asks for the count).
pub struct Array<'a, T> {
    pub count: &'a mut u32,
    pub items: &'a mut [T],
}

/// The two-call idiom: writes the count (`len`), and when the application gave slots, fills
/// the first `len` of them with `write(slot, i)`, or refuses with SIZE_INSUFFICIENT when
/// they are too few.
pub fn two_call_with<T>(
    out: Array<'_, T>,
    len: usize,
    mut write: impl FnMut(&mut T, usize),
) -> xr::Result {
    let Ok(n) = u32::try_from(len) else {
        return xr::Result::ERROR_RUNTIME_FAILURE;
    };
    *out.count = n;
    if out.items.is_empty() {
        return xr::Result::SUCCESS;
    }
    if out.items.len() < len {
        return xr::Result::ERROR_SIZE_INSUFFICIENT;
    }
    for (i, slot) in out.items.iter_mut().take(len).enumerate() {
        write(slot, i);
    }
    xr::Result::SUCCESS
}

/// A place a value is written to: the application's (possibly uninitialized) memory, or a
/// value of the type (tests).
pub trait Slot<T> {
    fn put(&mut self, v: T);
}

impl<T> Slot<T> for MaybeUninit<T> {
    fn put(&mut self, v: T) {
        self.write(v);
    }
}

impl<T> Slot<T> for T {
    fn put(&mut self, v: T) {
        *self = v;
    }
}

/// The two-call idiom for plain values.
pub fn two_call<T: Copy, S: Slot<T>>(out: Array<'_, S>, items: &[T]) -> xr::Result {
    two_call_with(out, items.len(), |slot, i| slot.put(items[i]))
}

/// The two-call idiom for strings: the count includes the NUL.
pub fn two_call_str<S: Slot<c_char>>(out: Array<'_, S>, s: &str) -> xr::Result {
    let mut bytes: Vec<c_char> = s.bytes().map(|b| b as c_char).collect();
    bytes.push(0);
    two_call(out, &bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_call_idiom_counts_then_fills_and_refuses_short_buffers() {
        let items = [1u32, 2, 3];
        let mut n = 0u32;
        let r = two_call::<u32, u32>(
            Array {
                count: &mut n,
                items: &mut [],
            },
            &items,
        );
        assert_eq!((r, n), (xr::Result::SUCCESS, 3));
        let mut short = [0u32; 2];
        n = 0;
        let r = two_call(
            Array {
                count: &mut n,
                items: &mut short,
            },
            &items,
        );
        assert_eq!(
            (r, n, short),
            (xr::Result::ERROR_SIZE_INSUFFICIENT, 3, [0, 0])
        );
        let mut room = [0u32; 5];
        let r = two_call(
            Array {
                count: &mut n,
                items: &mut room,
            },
            &items,
        );
        assert_eq!((r, n, room), (xr::Result::SUCCESS, 3, [1, 2, 3, 0, 0]));
    }

    #[test]
    fn two_call_with_writes_only_the_fields_it_owns() {
        let mut views = [[7u8, 0], [7, 0], [7, 0]];
        let mut n = 0;
        let r = two_call_with(
            Array {
                count: &mut n,
                items: &mut views,
            },
            2,
            |v, i| v[1] = i as u8 + 1,
        );
        assert_eq!((r, n), (xr::Result::SUCCESS, 2));
        assert_eq!(views, [[7, 1], [7, 2], [7, 0]]);
    }

    #[test]
    fn strings_count_their_nul() {
        let mut n = 0;
        let mut buf = [1 as c_char; 3];
        let r = two_call_str(
            Array {
                count: &mut n,
                items: &mut buf,
            },
            "abc",
        );
        assert_eq!((r, n), (xr::Result::ERROR_SIZE_INSUFFICIENT, 4));
        let mut buf = [1 as c_char; 4];
        let r = two_call_str(
            Array {
                count: &mut n,
                items: &mut buf,
            },
            "abc",
        );
        assert_eq!(r, xr::Result::SUCCESS);
        assert_eq!(get_str(&buf).as_deref(), Some("abc"));
    }

    #[test]
    fn fixed_strings_truncate_and_terminate() {
        let mut buf = [1 as c_char; 4];
        put_str(&mut buf, "untether");
        assert_eq!(get_str(&buf).as_deref(), Some("unt"));
        assert_eq!(get_str(&[b'a' as c_char; 3]), None);
    }
}
