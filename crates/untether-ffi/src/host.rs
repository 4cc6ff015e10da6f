//! The host context and its options: allocation, features, access and identity, the bind
//! address, the frame buffer and input callback, start, and free. What it sends and receives
//! once started is in its child modules.

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::time::Duration;

use untether::api::{
    AudioSpec, Conversion, EncoderKind, HostBuilder, HostContext, InputSpec, SourceSpec,
};

use crate::error::{
    fail, guard, host_error_code, UNTETHER_ERR_INVALID, UNTETHER_ERR_STATE, UNTETHER_ERR_STOPPED,
    UNTETHER_OK,
};
use crate::strings::{c_str, copy_out};

// In the header's order: cbindgen reads a module's own items, then its child modules in the
// order they are declared.
mod frames;

mod input;

mod audio;

pub use audio::*;
pub use frames::*;
pub use input::*;

use frames::pixel_format;
use input::convert_event;

/// Bytes a buffer needs for untether_host_fingerprint (29 characters, e.g.
/// "ABCD-EFGH-IJKL-MNOP-QRST-UVWX", and the NUL).
pub const UNTETHER_FINGERPRINT_SIZE: usize = 30;
/// Bytes a buffer needs for untether_host_pairing_pin (6 digits and the NUL).
pub const UNTETHER_PIN_SIZE: usize = 7;

/// Encoder types.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherEncoder {
    /// x264, YUV 4:2:0 (frames are converted with SIMD code).
    UNTETHER_ENCODER_X264 = 0,
    /// x264 on BGR as is (no conversion; needs much more bitrate).
    UNTETHER_ENCODER_X264_RGB = 1,
}

/// Transport types.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherTransport {
    /// untether's protocol over UDP.
    UNTETHER_TRANSPORT_UDP = 0,
}

/// Features set with [`untether_host_set_feature`] before [`untether_host_start`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherFeature {
    /// Frames per second (video.fps: 1..=240). Default 60.
    UNTETHER_FEATURE_FPS = 0,
    /// Video bitrate, kbit/s (video.bitrate_kbps: 100..=500000). Default 10000.
    UNTETHER_FEATURE_BITRATE_KBPS = 1,
    /// A keyframe every N frames; 0 (default): only when a client joins or asks.
    UNTETHER_FEATURE_GOP_FRAMES = 2,
    /// 1: periodic intra refresh instead of keyframes. Default 0.
    UNTETHER_FEATURE_INTRA_REFRESH = 3,
    /// 0: SIMD (default), 1: swscale (libx264 only).
    UNTETHER_FEATURE_CONVERSION = 4,
    /// UDP port to listen on (0: any free port; see untether_host_local_port). Default 9710.
    UNTETHER_FEATURE_PORT = 5,
    /// x264 slice threads (1..=16). Default 2.
    UNTETHER_FEATURE_ENCODER_THREADS = 6,
    /// Largest datagram, bytes (256..=9000). Default 1200.
    UNTETHER_FEATURE_MAX_DATAGRAM = 7,
    /// 1: the host has an audio stream fed by untether_host_push_audio. Default 0.
    UNTETHER_FEATURE_AUDIO = 8,
    /// Opus bitrate, kbit/s. Default 128.
    UNTETHER_FEATURE_AUDIO_BITRATE_KBPS = 9,
    /// 1: stamp frame number and time into each frame's top-left corner. Default 0.
    UNTETHER_FEATURE_STAMP = 10,
    /// x264 preset index: 0 ultrafast (default) … 9 placebo.
    UNTETHER_FEATURE_PRESET = 11,
}

enum HostState {
    Configuring(Box<HostBuilder>),
    Running(Box<HostContext>),
    Stopped,
}

/// A host context (opaque).
pub struct UntetherHost {
    state: HostState,
    format: UntetherPixelFormat,
    width: u32,
    height: u32,
    /// The frame buffer registered with untether_host_set_frame_buffer.
    buffer: Option<(*const u8, usize, u32)>,
    callback: Option<(
        unsafe extern "C" fn(*const UntetherInputEvent, *mut c_void),
        usize,
    )>,
    /// The address to listen on (untether_host_set_bind; UNTETHER_FEATURE_PORT sets its port).
    bind: SocketAddr,
    audio: bool,
}

/// Allocates a host context for frames of `width`x`height` in `format`. Nothing is opened
/// until untether_host_start. On success `*out` holds the context (free it with
/// untether_host_free).
#[no_mangle]
pub unsafe extern "C" fn untether_host_new(
    out: *mut *mut UntetherHost,
    encoder: c_int,
    transport: c_int,
    format: c_int,
    width: u32,
    height: u32,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(UNTETHER_ERR_INVALID, "untether_host_new: out is NULL");
        }
        // SAFETY: checked non-null; the caller owns the pointer.
        unsafe { *out = std::ptr::null_mut() };
        let encoder = match encoder {
            0 => EncoderKind::X264,
            1 => EncoderKind::X264Rgb,
            e => return fail(UNTETHER_ERR_INVALID, format!("unknown encoder type {e}")),
        };
        if transport != UntetherTransport::UNTETHER_TRANSPORT_UDP as c_int {
            return fail(
                UNTETHER_ERR_INVALID,
                format!("unknown transport type {transport}"),
            );
        }
        let Some(format) = pixel_format(format) else {
            return fail(
                UNTETHER_ERR_INVALID,
                format!("unknown pixel format {format}"),
            );
        };
        if let Err(e) = (untether::config::Resolution { width, height }).validate() {
            return fail(UNTETHER_ERR_INVALID, e.to_string());
        }
        let builder = HostContext::builder().size(width, height).encoder(encoder);
        let h = Box::new(UntetherHost {
            state: HostState::Configuring(Box::new(builder)),
            format,
            width,
            height,
            buffer: None,
            callback: None,
            bind: SocketAddr::from(([0, 0, 0, 0], untether::config::DEFAULT_PORT)),
            audio: false,
        });
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(h) };
        UNTETHER_OK
    })
}

pub(crate) unsafe fn host_ref<'a>(h: *mut UntetherHost) -> Result<&'a mut UntetherHost, c_int> {
    if h.is_null() {
        return Err(fail(UNTETHER_ERR_INVALID, "the host context is NULL"));
    }
    // SAFETY: the caller passes a pointer from untether_host_new, not yet freed, used by one
    // thread at a time.
    Ok(unsafe { &mut *h })
}

/// Sets a feature (an UntetherFeature) before untether_host_start.
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_feature(
    host: *mut UntetherHost,
    feature: c_int,
    value: i64,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        let HostState::Configuring(b) = &mut h.state else {
            return fail(
                UNTETHER_ERR_STATE,
                "features are set before untether_host_start",
            );
        };
        // Settings of the configuration are checked by its validator (its limits, its
        // message: "video.fps: 0 is out of range 1..=240"); the rest are this API's own
        // encodings (flags, indices) or the host setup's.
        use untether::config::{self as cfg, Limit};
        fn key<T>(limit: Limit<T>, value: i64) -> Result<T, c_int>
        where
            T: PartialOrd + std::fmt::Debug + std::fmt::Display + Copy + TryFrom<i64>,
        {
            limit
                .check_wide(value)
                .map_err(|e| fail(UNTETHER_ERR_INVALID, e.to_string()))
        }
        let range = |lo: i64, hi: i64| -> Result<i64, c_int> {
            if (lo..=hi).contains(&value) {
                Ok(value)
            } else {
                Err(fail(
                    UNTETHER_ERR_INVALID,
                    format!("feature {feature}: {value} is out of range {lo}..={hi}"),
                ))
            }
        };
        let builder = std::mem::take(&mut **b);
        let r: Result<HostBuilder, c_int> = (|| {
            Ok(match feature {
                0 => builder.fps(key(cfg::FPS, value)?),
                1 => builder.bitrate_kbps(key(cfg::BITRATE_KBPS, value)?),
                2 => builder.gop(key(cfg::GOP_FRAMES, value)?),
                3 => builder.intra_refresh(range(0, 1)? == 1),
                4 => builder.conversion(match range(0, 1)? {
                    0 => Conversion::Simd,
                    _ => Conversion::Swscale,
                }),
                5 => {
                    h.bind.set_port(range(0, 65_535)? as u16);
                    builder
                }
                6 => builder.encoder_threads(key(cfg::ENCODER_THREADS, value)?),
                7 => builder.max_datagram(key(cfg::MAX_DATAGRAM, value)?),
                8 => {
                    h.audio = range(0, 1)? == 1;
                    builder
                }
                9 => builder.audio_bitrate_kbps(key(cfg::AUDIO_BITRATE_KBPS, value)?),
                10 => builder.stamp(range(0, 1)? == 1),
                11 => {
                    builder.preset(cfg::PRESETS[range(0, cfg::PRESETS.len() as i64 - 1)? as usize])
                }
                f => return Err(fail(UNTETHER_ERR_INVALID, format!("unknown feature {f}"))),
            })
        })();
        match r {
            Ok(nb) => {
                **b = nb;
                UNTETHER_OK
            }
            Err(rc) => {
                // Keep the previous settings.
                rc
            }
        }
    })
}

/// Replaces the host's builder by `f(builder)` before untether_host_start, or fails with
/// UNTETHER_ERR_STATE after it.
fn configure_host(
    h: &mut UntetherHost,
    func: &str,
    f: impl FnOnce(HostBuilder) -> HostBuilder,
) -> c_int {
    let HostState::Configuring(b) = &mut h.state else {
        return fail(
            UNTETHER_ERR_STATE,
            format!("{func}: call it before untether_host_start"),
        );
    };
    **b = f(std::mem::take(&mut **b));
    UNTETHER_OK
}

/// Who may connect, before untether_host_start: "allowlist" (the default: clients approved
/// with `untether pair approve` in the host's state directory, or paired with a PIN), "pin"
/// (the same, and the host makes a one-time PIN at start: untether_host_pairing_pin) or
/// "open" (anyone who can reach the port). Checked like the config key host.access.
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_access(
    host: *mut UntetherHost,
    access: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        // SAFETY: a string argument is NULL or NUL-terminated (the C API's contract: crate doc).
        let name = match unsafe { c_str(access, "untether_host_set_access") } {
            Ok(s) => s,
            Err(rc) => return rc,
        };
        let access = match untether::config::parse_key::<untether::api::Access>(name) {
            Ok(a) => a,
            Err(e) => return fail(UNTETHER_ERR_INVALID, e.to_string()),
        };
        configure_host(h, "untether_host_set_access", |b| b.access(access))
    })
}

/// Where the host keeps its key pair, allowlist, access requests and PIN, before
/// untether_host_start (config key host.state_dir; "" = the default:
/// $UNTETHER_STATE_DIR, else $XDG_STATE_HOME/untether, else ~/.local/state/untether).
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_state_dir(
    host: *mut UntetherHost,
    dir: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        // SAFETY: a string argument is NULL or NUL-terminated (the C API's contract: crate doc).
        let dir = match unsafe { c_str(dir, "untether_host_set_state_dir") } {
            Ok(s) => s,
            Err(rc) => return rc,
        };
        configure_host(h, "untether_host_set_state_dir", |b| {
            b.state_dir(std::path::Path::new(dir))
        })
    })
}

/// The UDP address to listen on, "IP:PORT", before untether_host_start (config key host.bind,
/// checked the same way; default "0.0.0.0:9710"; "127.0.0.1:0": this machine only, any free
/// port). UNTETHER_FEATURE_PORT set afterwards changes only the port.
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_bind(
    host: *mut UntetherHost,
    addr: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        // SAFETY: a string argument is NULL or NUL-terminated (the C API's contract: crate doc).
        let addr = match unsafe { c_str(addr, "untether_host_set_bind") } {
            Ok(s) => s,
            Err(rc) => return rc,
        };
        if !matches!(h.state, HostState::Configuring(_)) {
            return fail(
                UNTETHER_ERR_STATE,
                "untether_host_set_bind: call it before untether_host_start",
            );
        }
        match (untether::config::HostToml {
            bind: addr.to_string(),
            ..Default::default()
        })
        .bind_addr()
        {
            Ok(a) => {
                h.bind = a;
                UNTETHER_OK
            }
            Err(e) => fail(UNTETHER_ERR_INVALID, e.to_string()),
        }
    })
}

/// After untether_host_start: copies the one-time PIN the host accepts now (access "pin", or
/// `untether pair --pin` run beside it) into `buf` of `size` bytes (UNTETHER_PIN_SIZE), NUL
/// terminated, to show the user. Returns its length (6), 0 when there is no PIN now (another
/// policy, used up or expired; `buf` untouched), or a negative error (a buffer too small
/// included).
#[no_mangle]
pub unsafe extern "C" fn untether_host_pairing_pin(
    host: *mut UntetherHost,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let ctx = match unsafe { running_host(host) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.pairing_pin() {
            // SAFETY: `buf` is NULL or `size` writable bytes (the C API's contract: crate doc).
            Some(pin) => unsafe { copy_out("untether_host_pairing_pin", &pin, buf, size) },
            None => 0,
        }
    })
}

/// After untether_host_start: copies the host's fingerprint (what clients show on first
/// contact and `untether pair` lists, e.g. "ABCD-EFGH-IJKL-MNOP-QRST-UVWX") into `buf` of
/// `size` bytes (UNTETHER_FINGERPRINT_SIZE), NUL terminated. Returns its length, or a negative
/// error (a buffer too small included).
#[no_mangle]
pub unsafe extern "C" fn untether_host_fingerprint(
    host: *mut UntetherHost,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let ctx = match unsafe { running_host(host) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        // SAFETY: `buf` is NULL or `size` writable bytes (the C API's contract: crate doc).
        unsafe { copy_out("untether_host_fingerprint", &ctx.fingerprint(), buf, size) }
    })
}

/// Registers the application's frame buffer (OpenUVR style): untether_host_send_frame and
/// untether_host_publish_frame with a NULL frame read it. `len` bytes at `data` with rows of
/// `stride` bytes, in the context's format (planes follow each other for I420/NV12, rows of
/// `stride` bytes for Y and `stride/2` for chroma).
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_frame_buffer(
    host: *mut UntetherHost,
    data: *const u8,
    len: usize,
    stride: u32,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        if data.is_null() {
            h.buffer = None;
            return UNTETHER_OK;
        }
        h.buffer = Some((data, len, stride));
        UNTETHER_OK
    })
}

/// Delivers input events to `callback` on the host's network thread instead of the queue
/// read by untether_host_poll_input. Set before untether_host_start.
#[no_mangle]
pub unsafe extern "C" fn untether_host_set_input_callback(
    host: *mut UntetherHost,
    callback: UntetherInputCallback,
    user: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        if !matches!(h.state, HostState::Configuring(_)) {
            return fail(
                UNTETHER_ERR_STATE,
                "set the input callback before untether_host_start",
            );
        }
        h.callback = callback.map(|cb| (cb, user as usize));
        UNTETHER_OK
    })
}

/// Binds the socket, opens the encoder and starts the network thread, plus the sending
/// thread in UNTETHER_MODE_THREAD.
#[no_mangle]
pub unsafe extern "C" fn untether_host_start(host: *mut UntetherHost, mode: c_int) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        let sync = match mode {
            0 => false,
            1 => true,
            m => return fail(UNTETHER_ERR_INVALID, format!("unknown mode {m}")),
        };
        let HostState::Configuring(b) = &mut h.state else {
            return fail(UNTETHER_ERR_STATE, "the host was already started");
        };
        let mut builder = std::mem::take(&mut **b)
            .synchronous(sync)
            .bind(&h.bind.to_string())
            .source(SourceSpec::App);
        if h.audio {
            builder = builder.audio(AudioSpec::App);
        }
        builder = match h.callback {
            Some((cb, user)) => builder.input_callback(move |rec| {
                let ev = convert_event(rec);
                // SAFETY: the application registered this callback and its user pointer, and
                // keeps both valid until untether_host_free.
                unsafe { cb(&ev, user as *mut c_void) };
            }),
            None => builder.input(InputSpec::Queue),
        };
        match builder.build() {
            Ok(ctx) => {
                h.state = HostState::Running(Box::new(ctx));
                UNTETHER_OK
            }
            Err(e) => {
                let rc = host_error_code(&e);
                h.state = HostState::Configuring(Box::default());
                fail(rc, format!("cannot start the host: {e}"))
            }
        }
    })
}

/// The UDP port the host listens on (after start), or a negative error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_local_port(host: *mut UntetherHost) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        match &h.state {
            HostState::Running(c) => c.local_addr().port() as c_int,
            _ => fail(UNTETHER_ERR_STATE, "the host is not running"),
        }
    })
}

/// Waits up to `timeout_ms` for a client: 1 connected, 0 not (yet), negative on error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_wait_client(
    host: *mut UntetherHost,
    timeout_ms: u32,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        match &h.state {
            HostState::Running(c) => {
                c.wait_for_client(Duration::from_millis(timeout_ms as u64)) as c_int
            }
            _ => fail(UNTETHER_ERR_STATE, "the host is not running"),
        }
    })
}

/// The running host context behind `host` (a NULL or not-started host is an error).
///
/// # Safety
/// As [`host_ref`].
pub(crate) unsafe fn running_host<'a>(
    host: *mut UntetherHost,
) -> Result<&'a mut HostContext, c_int> {
    // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
    running(unsafe { host_ref(host) }?)
}

pub(crate) fn running(h: &mut UntetherHost) -> Result<&mut HostContext, c_int> {
    match &mut h.state {
        HostState::Running(c) => {
            if c.host().is_stopped() {
                let why = c.host().failure().unwrap_or_else(|| "stopped".into());
                return Err(fail(
                    UNTETHER_ERR_STOPPED,
                    format!("the host stopped: {why}"),
                ));
            }
            Ok(c)
        }
        _ => Err(fail(
            UNTETHER_ERR_STATE,
            "the host is not running (untether_host_start)",
        )),
    }
}

/// Stops the host's threads and frees the context. NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn untether_host_free(host: *mut UntetherHost) {
    let _ = guard(|| {
        if !host.is_null() {
            // SAFETY: a pointer from untether_host_new, freed once.
            let mut h = unsafe { Box::from_raw(host) };
            if let HostState::Running(c) = std::mem::replace(&mut h.state, HostState::Stopped) {
                c.stop();
            }
        }
        UNTETHER_OK
    });
}

// SAFETY: the host context is used from one thread at a time (the C API's contract); the
// only non-Send field is the application's frame buffer pointer, read only in the calls that
// send a frame, on the thread making them.
unsafe impl Send for UntetherHost {}

#[cfg(test)]
mod tests {
    //! Issue 15 item 10: what the CLI can set and read about access and identity.
    use std::ffi::{c_char, c_int, CStr, CString};

    use super::*;
    use crate::tests_support::*;

    #[test]
    fn host_access_state_dir_bind_pin_and_fingerprint() {
        let _fds = fds();
        let dir = temp_dir("host-trust");
        let cdir = CString::new(dir.to_str().unwrap()).unwrap();
        let dir2 = temp_dir("host-trust-2");
        let cdir2 = CString::new(dir2.to_str().unwrap()).unwrap();
        let s = |t: &str| CString::new(t).unwrap();
        // SAFETY: the test keeps the C API's contract (crate doc): contexts from their `_new`,
        // NUL-terminated strings, buffers of the sizes given; NULLs only where it tests the refusal.
        unsafe {
            let mut h: *mut UntetherHost = std::ptr::null_mut();
            assert_eq!(untether_host_new(&mut h, 0, 0, 0, 640, 360), UNTETHER_OK);
            // The config's validator and words.
            assert_eq!(
                untether_host_set_access(h, s("everyone").as_ptr()),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(
                last_error(),
                "host.access: unknown access policy \"everyone\"; allowed: allowlist, open, pin"
            );
            assert_eq!(
                untether_host_set_access(h, std::ptr::null()),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(untether_host_set_access(h, s("pin").as_ptr()), UNTETHER_OK);
            assert_eq!(untether_host_set_state_dir(h, cdir.as_ptr()), UNTETHER_OK);
            assert_eq!(
                untether_host_set_bind(h, s("localhost").as_ptr()),
                UNTETHER_ERR_INVALID
            );
            assert!(
                last_error().starts_with("host.bind: \"localhost\" is not IP:PORT"),
                "{}",
                last_error()
            );
            assert_eq!(
                untether_host_set_bind(h, s("127.0.0.1:9").as_ptr()),
                UNTETHER_OK
            );
            // The port feature changes the port, keeping the address.
            assert_eq!(untether_host_set_feature(h, 5, 0), UNTETHER_OK);
            let mut buf = [0 as c_char; 64];
            assert_eq!(
                untether_host_fingerprint(h, buf.as_mut_ptr(), buf.len()),
                UNTETHER_ERR_STATE
            );
            assert_eq!(
                untether_host_pairing_pin(h, buf.as_mut_ptr(), buf.len()),
                UNTETHER_ERR_STATE
            );
            assert_eq!(untether_host_start(h, 1), UNTETHER_OK, "{}", last_error());
            let hc = match &(*h).state {
                HostState::Running(c) => c,
                _ => panic!("not running"),
            };
            assert!(hc.local_addr().ip().is_loopback(), "{}", hc.local_addr());
            assert_eq!(
                untether_host_set_bind(h, s("127.0.0.1:0").as_ptr()),
                UNTETHER_ERR_STATE
            );
            assert_eq!(
                untether_host_set_access(h, s("open").as_ptr()),
                UNTETHER_ERR_STATE
            );
            assert_eq!(
                untether_host_set_state_dir(h, cdir.as_ptr()),
                UNTETHER_ERR_STATE
            );

            // The fingerprint is the state directory's host key's.
            let mut small = [0 as c_char; 8];
            assert_eq!(
                untether_host_fingerprint(h, small.as_mut_ptr(), small.len()),
                UNTETHER_ERR_INVALID
            );
            assert!(last_error().contains("30 are needed"), "{}", last_error());
            let mut fp = [0 as c_char; UNTETHER_FINGERPRINT_SIZE];
            assert_eq!(
                untether_host_fingerprint(h, fp.as_mut_ptr(), fp.len()),
                UNTETHER_FINGERPRINT_SIZE as c_int - 1
            );
            let fp = CStr::from_ptr(fp.as_ptr()).to_str().unwrap().to_string();
            let key = untether::identity::StateDir::at(&dir)
                .load_or_create_identity(untether::identity::Role::Host)
                .unwrap();
            assert_eq!(fp, untether::identity::fingerprint(&key.public));

            // access "pin": the host made a PIN at start.
            let mut pin = [0 as c_char; UNTETHER_PIN_SIZE];
            assert_eq!(
                untether_host_pairing_pin(h, pin.as_mut_ptr(), 3),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(untether_host_pairing_pin(h, pin.as_mut_ptr(), pin.len()), 6);
            let pin = CStr::from_ptr(pin.as_ptr()).to_str().unwrap();
            assert!(untether::config::check_pin(pin).is_ok(), "{pin:?}");
            untether_host_free(h);

            // Without a PIN policy (and another directory: the first one's PIN file stands,
            // as one from `untether pair --pin` would) there is no PIN: 0, the buffer
            // untouched.
            let mut h: *mut UntetherHost = std::ptr::null_mut();
            assert_eq!(untether_host_new(&mut h, 0, 0, 0, 640, 360), UNTETHER_OK);
            assert_eq!(untether_host_set_state_dir(h, cdir2.as_ptr()), UNTETHER_OK);
            assert_eq!(
                untether_host_set_bind(h, s("127.0.0.1:0").as_ptr()),
                UNTETHER_OK
            );
            assert_eq!(untether_host_start(h, 1), UNTETHER_OK, "{}", last_error());
            let mut none = [b'x' as c_char; UNTETHER_PIN_SIZE];
            assert_eq!(
                untether_host_pairing_pin(h, none.as_mut_ptr(), none.len()),
                0
            );
            assert_eq!(none[0], b'x' as c_char);
            // Another directory, another key.
            let mut fp2 = [0 as c_char; UNTETHER_FINGERPRINT_SIZE];
            assert!(untether_host_fingerprint(h, fp2.as_mut_ptr(), fp2.len()) > 0);
            assert_ne!(CStr::from_ptr(fp2.as_ptr()).to_str().unwrap(), fp);
            untether_host_free(h);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&dir2);
    }
}
