//! The error codes, the calling thread's last error, and the guard that turns a panic into
//! UNTETHER_ERR_INTERNAL at the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const UNTETHER_OK: c_int = 0;
/// A pointer was null, a size or value out of range.
pub const UNTETHER_ERR_INVALID: c_int = -1;
/// The call does not fit the context's state (e.g. a feature set after start).
pub const UNTETHER_ERR_STATE: c_int = -2;
/// The network, a file or a device failed.
pub const UNTETHER_ERR_IO: c_int = -3;
/// The encoder, decoder or a conversion failed.
pub const UNTETHER_ERR_MEDIA: c_int = -4;
/// The host or client stopped (see the last error for why).
pub const UNTETHER_ERR_STOPPED: c_int = -5;
/// An internal error (a caught panic): the context should be freed.
pub const UNTETHER_ERR_INTERNAL: c_int = -6;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_error(msg: impl Into<String>) {
    let msg = msg.into().replace('\0', " ");
    log::debug!("untether C API: {msg}");
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(msg).unwrap_or_default());
}

pub(crate) fn fail(code: c_int, msg: impl Into<String>) -> c_int {
    set_error(msg);
    code
}

/// Runs `f`, turning a panic into UNTETHER_ERR_INTERNAL.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            fail(
                UNTETHER_ERR_INTERNAL,
                format!("internal error (panic): {what}"),
            )
        }
    }
}

pub(crate) fn host_error_code(e: &untether::HostError) -> c_int {
    use untether::HostError as E;
    match e {
        E::Net(_) | E::Thread(_) => UNTETHER_ERR_IO,
        E::Media(_) | E::Kms(_) | E::Portal(_) => UNTETHER_ERR_MEDIA,
        E::Config(_) => UNTETHER_ERR_INVALID,
        E::Identity(_) => UNTETHER_ERR_IO,
        E::Usage(_) => UNTETHER_ERR_STATE,
        E::Stopped(_) => UNTETHER_ERR_STOPPED,
    }
}

/// The last error on this thread, as a NUL-terminated string owned by untether (valid until
/// the next call on this thread). Never NULL.
#[no_mangle]
pub extern "C" fn untether_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
