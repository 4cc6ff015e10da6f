//! The client context: allocation, its options (window, audio, sink, identity, PIN, input
//! devices by file descriptor, duration), start, stop with its counters, and free.

use std::ffi::{c_char, c_int, CStr};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use untether::api::ClientContext;
use untether::client::{ClientAudio, ClientRun};

use crate::error::{
    fail, guard, UNTETHER_ERR_INTERNAL, UNTETHER_ERR_INVALID, UNTETHER_ERR_IO, UNTETHER_ERR_STATE,
    UNTETHER_ERR_STOPPED, UNTETHER_OK,
};
use crate::strings::c_str;

/// Counters of a client run.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UntetherClientStats {
    pub frames_decoded: u64,
    pub frames_shown: u64,
    pub decode_errors: u64,
    pub inputs_sent: u64,
    /// Frame number and capture time of the last shown frame whose pixel stamp was readable
    /// (-1 / 0 when none was).
    pub last_stamp_frame: i64,
    pub last_stamp_capture_us: u64,
    /// Frames whose stamp was readable.
    pub frames_stamped: u64,
    /// Stamped frame numbers that went backwards (0 in a healthy stream).
    pub stamp_reorders: u64,
    pub glass_to_glass_p50_ms: f64,
}

enum ClientState {
    Configuring(Option<Box<untether::api::ClientBuilder>>),
    Running(Box<ClientContext>),
    Done,
}

/// A client context (opaque).
pub struct UntetherClient {
    state: ClientState,
    devices: u32,
    run: Option<ClientRun>,
}

/// Allocates a client for the host at `host_addr` ("HOST[:PORT]", default port 9710).
#[no_mangle]
pub unsafe extern "C" fn untether_client_new(
    out: *mut *mut UntetherClient,
    host_addr: *const c_char,
) -> c_int {
    guard(|| {
        if out.is_null() || host_addr.is_null() {
            return fail(UNTETHER_ERR_INVALID, "untether_client_new: NULL argument");
        }
        // SAFETY: checked non-null.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: a NUL-terminated string from the caller.
        let name = match unsafe { CStr::from_ptr(host_addr) }.to_str() {
            Ok(s) => s.to_string(),
            Err(_) => return fail(UNTETHER_ERR_INVALID, "host address is not UTF-8"),
        };
        let addr: SocketAddr = match untether::resolve_host(&name, untether::config::DEFAULT_PORT) {
            Ok(a) => a,
            Err(e) => return fail(UNTETHER_ERR_INVALID, format!("host {name:?}: {e}")),
        };
        let c = Box::new(UntetherClient {
            state: ClientState::Configuring(Some(Box::new(ClientContext::builder(addr)))),
            devices: 0,
            run: None,
        });
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(c) };
        UNTETHER_OK
    })
}

unsafe fn client_ref<'a>(c: *mut UntetherClient) -> Result<&'a mut UntetherClient, c_int> {
    if c.is_null() {
        return Err(fail(UNTETHER_ERR_INVALID, "the client context is NULL"));
    }
    // SAFETY: a pointer from untether_client_new, not yet freed.
    Ok(unsafe { &mut *c })
}

fn configure(
    c: &mut UntetherClient,
    f: impl FnOnce(untether::api::ClientBuilder) -> untether::api::ClientBuilder,
) -> c_int {
    match &mut c.state {
        ClientState::Configuring(b) => match b.take() {
            Some(builder) => {
                *b = Some(Box::new(f(*builder)));
                UNTETHER_OK
            }
            None => fail(UNTETHER_ERR_INTERNAL, "client builder missing"),
        },
        _ => fail(
            UNTETHER_ERR_STATE,
            "configure the client before untether_client_start",
        ),
    }
}

/// 1: show the stream in an SDL window; 0 (default): headless (decode and measure).
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_window(
    client: *mut UntetherClient,
    on: c_int,
) -> c_int {
    // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
    guard(|| match unsafe { client_ref(client) } {
        Ok(c) => configure(c, |b| b.window(on != 0)),
        Err(rc) => rc,
    })
}

/// 1: play the host's audio through SDL.
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_audio(
    client: *mut UntetherClient,
    on: c_int,
) -> c_int {
    // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
    guard(|| match unsafe { client_ref(client) } {
        Ok(c) => configure(c, |b| b.audio((on != 0).then(ClientAudio::default))),
        Err(rc) => rc,
    })
}

/// Writes every decoded frame as raw I420 to `path` ("-": stdout), flushed per frame.
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_sink(
    client: *mut UntetherClient,
    path: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        if path.is_null() {
            return fail(UNTETHER_ERR_INVALID, "sink path is NULL");
        }
        // SAFETY: a NUL-terminated string from the caller.
        let p = match unsafe { CStr::from_ptr(path) }.to_str() {
            Ok(s) => s.to_string(),
            Err(_) => return fail(UNTETHER_ERR_INVALID, "sink path is not UTF-8"),
        };
        configure(c, |b| b.sink(&p).end_on_host_bye(true))
    })
}

/// Where the client keeps its key pair and known_hosts.json (the host keys it pinned), before
/// untether_client_start (config key client.state_dir; "" = the default, as the host's).
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_state_dir(
    client: *mut UntetherClient,
    dir: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        // SAFETY: a string argument is NULL or NUL-terminated (the C API's contract: crate doc).
        let dir = match unsafe { c_str(dir, "untether_client_set_state_dir") } {
            Ok(s) => s,
            Err(rc) => return rc,
        };
        configure(c, |b| b.state_dir(std::path::Path::new(dir)))
    })
}

/// Pairs with the host using the one-time PIN it shows (6 digits; `untether client --pin`),
/// before untether_client_start. The host then remembers this client.
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_pin(
    client: *mut UntetherClient,
    pin: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        // SAFETY: a string argument is NULL or NUL-terminated (the C API's contract: crate doc).
        let pin = match unsafe { c_str(pin, "untether_client_set_pin") } {
            Ok(s) => s,
            Err(rc) => return rc,
        };
        if let Err(e) = untether::config::check_pin(pin) {
            return fail(
                UNTETHER_ERR_INVALID,
                format!("untether_client_set_pin: {e}"),
            );
        }
        configure(c, |b| b.pin(pin))
    })
}

/// Registers an input device by file descriptor (a /dev/input/event* device, or a pipe or
/// socket carrying `struct input_event` records). untether always takes ownership of an open
/// `fd`: on success it is closed when the client is freed; on every error (a NULL or started
/// client, too many devices) it is closed before this returns. The caller must not use or
/// close it afterwards either way. Returns the device number (0, 1, …) the host sees, or a
/// negative error.
#[no_mangle]
pub unsafe extern "C" fn untether_client_register_input_fd(
    client: *mut UntetherClient,
    fd: c_int,
) -> c_int {
    guard(|| {
        // Ownership first, so that every error below closes it (by dropping `owned`).
        // SAFETY: F_GETFD only inspects the descriptor.
        if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return fail(
                UNTETHER_ERR_INVALID,
                format!("{fd} is not an open file descriptor"),
            );
        }
        // SAFETY: the caller hands over an open descriptor it no longer uses.
        let owned = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        if c.devices >= 255 {
            return fail(UNTETHER_ERR_INVALID, "at most 255 input devices");
        }
        if !matches!(c.state, ClientState::Configuring(_)) {
            return fail(
                UNTETHER_ERR_STATE,
                "register devices before untether_client_start",
            );
        }
        let name = format!("fd {fd}");
        let rc = configure(c, |b| {
            b.input_device(untether::InputDevice::from_fd(owned, name))
        });
        if rc != UNTETHER_OK {
            return rc;
        }
        c.devices += 1;
        (c.devices - 1) as c_int
    })
}

/// Stops after `seconds` (0: until untether_client_stop or the host ends).
#[no_mangle]
pub unsafe extern "C" fn untether_client_set_duration(
    client: *mut UntetherClient,
    seconds: f64,
) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
            return fail(UNTETHER_ERR_INVALID, "duration out of range 0..=86400 s");
        }
        let d = (seconds > 0.0).then(|| Duration::from_secs_f64(seconds));
        configure(c, |b| b.duration(d))
    })
}

/// Starts the client: connect, receive, decode, present (on its own thread), send input.
#[no_mangle]
pub unsafe extern "C" fn untether_client_start(client: *mut UntetherClient) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        let ClientState::Configuring(b) = &mut c.state else {
            return fail(UNTETHER_ERR_STATE, "the client was already started");
        };
        let Some(builder) = b.take() else {
            return fail(UNTETHER_ERR_INTERNAL, "client builder missing");
        };
        let mut ctx = builder.build();
        if let Err(e) = ctx.start() {
            c.state = ClientState::Done;
            return fail(UNTETHER_ERR_IO, e.to_string());
        }
        c.state = ClientState::Running(Box::new(ctx));
        UNTETHER_OK
    })
}

/// 1 while the client runs, 0 once it ended, negative on error.
#[no_mangle]
pub unsafe extern "C" fn untether_client_is_running(client: *mut UntetherClient) -> c_int {
    // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
    guard(|| match unsafe { client_ref(client) } {
        Ok(c) => matches!(&c.state, ClientState::Running(ctx) if ctx.is_running()) as c_int,
        Err(rc) => rc,
    })
}

/// Stops the client (or, with `wait` = 1, waits until it ends by itself) and fills `stats`
/// (may be NULL). Returns UNTETHER_OK, or the error the client ended with.
#[no_mangle]
pub unsafe extern "C" fn untether_client_stop(
    client: *mut UntetherClient,
    wait: c_int,
    stats: *mut UntetherClientStats,
) -> c_int {
    guard(|| {
        // SAFETY: `client` is NULL or a live context (the C API's contract: crate doc).
        let c = match unsafe { client_ref(client) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        let ClientState::Running(ctx) = std::mem::replace(&mut c.state, ClientState::Done) else {
            return fail(UNTETHER_ERR_STATE, "the client is not running");
        };
        let result = if wait != 0 { ctx.wait() } else { ctx.stop() };
        let rc = match result {
            Ok(run) => {
                c.run = Some(run);
                UNTETHER_OK
            }
            Err(e) => fail(UNTETHER_ERR_STOPPED, e.to_string()),
        };
        if !stats.is_null() {
            let s = c.run.as_ref().map(client_stats).unwrap_or_default();
            // SAFETY: checked non-null.
            unsafe { *stats = s };
        }
        rc
    })
}

fn client_stats(run: &ClientRun) -> UntetherClientStats {
    let mut s = UntetherClientStats {
        frames_decoded: run.decoded,
        frames_shown: run.shown,
        decode_errors: run.decode_errors,
        inputs_sent: run.inputs_sent,
        last_stamp_frame: -1,
        ..Default::default()
    };
    let mut last: Option<u32> = None;
    let mut g2g = untether::stats::Samples::default();
    let mut records: Vec<_> = run.records.iter().filter(|r| r.shown_us != 0).collect();
    records.sort_by_key(|r| r.shown_us);
    for r in records {
        if let Some(st) = r.stamp {
            s.frames_stamped += 1;
            if last.is_some_and(|l| st.frame_number < l) {
                s.stamp_reorders += 1;
            }
            last = Some(st.frame_number);
            s.last_stamp_frame = st.frame_number as i64;
            s.last_stamp_capture_us = st.capture_us;
            g2g.push_us(r.shown_us as i64 - r.capture_us as i64);
        }
    }
    s.glass_to_glass_p50_ms = g2g.summary().map_or(0.0, |m| m.p50);
    s
}

/// Frees the client (stopping it first). NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn untether_client_free(client: *mut UntetherClient) {
    let _ = guard(|| {
        if !client.is_null() {
            // SAFETY: a pointer from untether_client_new, freed once.
            let c = unsafe { Box::from_raw(client) };
            drop(c);
        }
        UNTETHER_OK
    });
}

#[cfg(test)]
mod tests {
    //! Issue 15 item 10: what the CLI can set about the client's identity, and the input fd's
    //! ownership.
    use std::ffi::{c_int, c_void, CString};

    use super::*;
    use crate::tests_support::*;

    #[test]
    fn client_state_dir_and_pin_are_checked() {
        let s = |t: &str| CString::new(t).unwrap();
        // SAFETY: the test keeps the C API's contract (crate doc): contexts from their `_new`,
        // NUL-terminated strings, buffers of the sizes given; NULLs only where it tests the refusal.
        unsafe {
            let mut c: *mut UntetherClient = std::ptr::null_mut();
            assert_eq!(
                untether_client_new(&mut c, s("127.0.0.1:9").as_ptr()),
                UNTETHER_OK
            );
            assert_eq!(
                untether_client_set_pin(c, s("12ab").as_ptr()),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(
                last_error(),
                "untether_client_set_pin: \"12ab\": a pairing PIN is the 6 digits the host shows"
            );
            assert_eq!(
                untether_client_set_pin(c, s("123456").as_ptr()),
                UNTETHER_OK
            );
            assert_eq!(
                untether_client_set_state_dir(c, std::ptr::null()),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(
                untether_client_set_state_dir(c, s("/tmp/untether-ffi-client").as_ptr()),
                UNTETHER_OK
            );
            match &mut (*c).state {
                ClientState::Configuring(Some(b)) => {
                    assert_eq!(b.options_mut().client.state_dir, "/tmp/untether-ffi-client");
                }
                _ => panic!("not configuring"),
            }
            untether_client_free(c);
        }
    }

    fn pipe() -> (c_int, c_int) {
        let mut p = [0 as c_int; 2];
        // SAFETY: a two-element array for pipe(2).
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        (p[0], p[1])
    }

    /// `fd` is closed: F_GETFD fails with EBADF, and the pipe's write end `w` sees no reader
    /// (EPIPE; a reused number cannot fake that).
    fn assert_closed(fd: c_int, w: c_int) {
        // SAFETY: F_GETFD and write only use the numbers.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_GETFD), -1, "fd {fd} is still open");
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EBADF)
            );
            assert_eq!(libc::write(w, b"x".as_ptr() as *const c_void, 1), -1);
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EPIPE)
            );
            libc::close(w);
        }
    }

    fn assert_open(fd: c_int) {
        // SAFETY: F_GETFD only inspects the number.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(flags >= 0, "fd {fd} was closed");
    }

    #[test]
    fn register_input_fd_always_takes_the_fd() {
        let _fds = fds();
        let dir = temp_dir("client-fd");
        let cdir = CString::new(dir.to_str().unwrap()).unwrap();
        let addr = CString::new("127.0.0.1:9").unwrap();
        // SAFETY: the test keeps the C API's contract (crate doc): contexts from their `_new`,
        // NUL-terminated strings, buffers of the sizes given; NULLs only where it tests the refusal.
        unsafe {
            // An error before any client: NULL.
            let (r, w) = pipe();
            assert_eq!(
                untether_client_register_input_fd(std::ptr::null_mut(), r),
                UNTETHER_ERR_INVALID
            );
            assert_closed(r, w);

            let mut c: *mut UntetherClient = std::ptr::null_mut();
            assert_eq!(untether_client_new(&mut c, addr.as_ptr()), UNTETHER_OK);
            assert_eq!(untether_client_set_state_dir(c, cdir.as_ptr()), UNTETHER_OK);
            // Not a descriptor: an error, nothing to close.
            assert_eq!(
                untether_client_register_input_fd(c, -1),
                UNTETHER_ERR_INVALID
            );
            // Success: kept open until the client is freed.
            let (r0, w0) = pipe();
            assert_eq!(untether_client_register_input_fd(c, r0), 0);
            assert_open(r0);
            // Too many devices.
            (*c).devices = 255;
            let (r, w) = pipe();
            assert_eq!(
                untether_client_register_input_fd(c, r),
                UNTETHER_ERR_INVALID
            );
            assert!(last_error().contains("255"), "{}", last_error());
            assert_closed(r, w);
            (*c).devices = 1;
            untether_client_free(c);
            assert_closed(r0, w0);

            // After start (and stop, so no client thread opens files meanwhile): a state
            // error, and the fd closed all the same.
            let mut c: *mut UntetherClient = std::ptr::null_mut();
            assert_eq!(untether_client_new(&mut c, addr.as_ptr()), UNTETHER_OK);
            assert_eq!(untether_client_set_state_dir(c, cdir.as_ptr()), UNTETHER_OK);
            assert_eq!(untether_client_start(c), UNTETHER_OK, "{}", last_error());
            let _ = untether_client_stop(c, 0, std::ptr::null_mut());
            let (r, w) = pipe();
            assert_eq!(untether_client_register_input_fd(c, r), UNTETHER_ERR_STATE);
            assert_closed(r, w);
            untether_client_free(c);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
