//! Wayland desktop capture on wlroots compositors (sway, Hyprland, river, labwc): the
//! `zwlr_screencopy_manager_v1` protocol, as grim and wf-recorder use it, into `wl_shm`
//! buffers this process maps.
//!
//! Each grab asks the compositor for one frame of an output (or a region of it), waits for
//! the buffer description (`buffer`, and `buffer_done` from version 3 on), hands it a shared
//! memory buffer of that layout (kept and reused while the layout holds) and waits for `ready`
//! (or `failed`). The compositor writes the pixels straight into the shared memory after its
//! next composition, so a grab waits up to one output refresh. From version 2 on,
//! [`WlrCapture::wait_for_change`] asks with `copy_with_damage`: the compositor answers when
//! the output has changed, so a frame is taken as it arrives; that copy goes into a second
//! buffer, so the last frame stays whole while the next one is in flight. `ARGB8888`/`XRGB8888` are
//! B, G, R, A in memory — the [`BgraFrame`](crate::BgraFrame) layout — so they go to the
//! encoder as they are; `ABGR8888`/`XBGR8888` are swizzled in place. Outputs the compositor
//! flips (`y_invert`) are flipped back.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wayland_client::globals::{registry_queue_init, GlobalListContents};
use wayland_client::protocol::{wl_buffer, wl_output, wl_registry, wl_shm, wl_shm_pool};
use wayland_client::{Connection, Dispatch, EventQueue, QueueHandle, WEnum};
use wayland_protocols_wlr::screencopy::v1::client::{
    zwlr_screencopy_frame_v1::{self, ZwlrScreencopyFrameV1},
    zwlr_screencopy_manager_v1::ZwlrScreencopyManagerV1,
};

use crate::{MediaError, Result};

/// The screencopy protocol's interface name (what `untether doctor` looks for).
pub const SCREENCOPY_GLOBAL: &str = "zwlr_screencopy_manager_v1";
/// How long one grab may wait for the compositor before it is an error.
const GRAB_TIMEOUT: Duration = Duration::from_secs(2);

/// What to capture on a wlroots compositor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WlrTarget {
    /// The output by name (`HEADLESS-1`, `DP-1`; needs `wl_output` version 4) or by index
    /// (`0`, `1`, … in the order the compositor announced them); None: the first.
    pub output: Option<String>,
    /// A region of that output in its logical coordinates (x, y, width, height); None: all.
    pub region: Option<(i32, i32, i32, i32)>,
    /// Draw the pointer into the frames.
    pub cursor: bool,
}

/// The compositor's announced outputs and the state of the frame in flight.
#[derive(Default)]
struct State {
    outputs: Vec<OutputInfo>,
    frame: FrameState,
}

struct OutputInfo {
    proxy: wl_output::WlOutput,
    name: Option<String>,
    mode: (i32, i32),
}

#[derive(Default)]
struct FrameState {
    /// (format, width, height, stride) of the shm buffer the compositor wants.
    shm: Option<(WEnum<wl_shm::Format>, u32, u32, u32)>,
    described: bool,
    y_invert: bool,
    /// The `ready` event's time (CLOCK_MONOTONIC, µs).
    ready_us: Option<u64>,
    failed: bool,
}

/// A wl_shm buffer over a memfd, mapped here.
struct ShmBuffer {
    buffer: wl_buffer::WlBuffer,
    pool: wl_shm_pool::WlShmPool,
    map: *mut u8,
    len: usize,
    layout: (u32, u32, u32, u32),
    _fd: OwnedFd,
}

impl ShmBuffer {
    fn new(
        shm: &wl_shm::WlShm,
        qh: &QueueHandle<State>,
        (format, w, h, stride): (u32, u32, u32, u32),
    ) -> Result<ShmBuffer> {
        let len = stride as usize * h as usize;
        let err = |what: &str| {
            MediaError::Other(format!(
                "wlr-screencopy: {what} for a {w}x{h} buffer: {}",
                std::io::Error::last_os_error()
            ))
        };
        // SAFETY: plain libc calls whose results are checked; the mapping lives as long as
        // this struct (unmapped in Drop) and the fd is owned.
        unsafe {
            let raw = libc::memfd_create(c"untether-wlr".as_ptr(), libc::MFD_CLOEXEC);
            if raw < 0 {
                return Err(err("memfd_create"));
            }
            let fd = OwnedFd::from_raw_fd(raw);
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
                return Err(err("ftruncate"));
            }
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if map == libc::MAP_FAILED {
                return Err(err("mmap"));
            }
            let fmt = wl_shm::Format::try_from(format).map_err(|_| {
                MediaError::Other(format!("wlr-screencopy: unknown shm format {format:#x}"))
            })?;
            let pool = shm.create_pool(fd.as_fd(), len as i32, qh, ());
            let buffer = pool.create_buffer(0, w as i32, h as i32, stride as i32, fmt, qh, ());
            Ok(ShmBuffer {
                buffer,
                pool,
                map: map as *mut u8,
                len,
                layout: (format, w, h, stride),
                _fd: fd,
            })
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `map` is a live mapping of `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.map, self.len) }
    }
}

impl Drop for ShmBuffer {
    fn drop(&mut self) {
        self.buffer.destroy();
        self.pool.destroy();
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}

/// Frames of one output of a wlroots compositor, through wlr-screencopy.
pub struct WlrCapture {
    conn: Connection,
    queue: EventQueue<State>,
    state: State,
    shm: wl_shm::WlShm,
    manager: ZwlrScreencopyManagerV1,
    output: usize,
    target: WlrTarget,
    buffer: Option<ShmBuffer>,
    /// The buffer a `copy_with_damage` in flight writes into (swapped with `buffer` when
    /// the frame is ready).
    spare: Option<ShmBuffer>,
    /// The `copy_with_damage` request in flight.
    pending: Option<ZwlrScreencopyFrameV1>,
    display: String,
    size: (u32, u32),
    stride: u32,
    last_ready_us: Option<u64>,
}

// SAFETY: the raw mapping pointer is owned by the capture and only touched through &mut self;
// the Wayland proxies are Send.
unsafe impl Send for WlrCapture {}

/// The Wayland socket of `display` (None: `$WAYLAND_DISPLAY`, else `wayland-0`), as libwayland
/// resolves it: an absolute path, or a name under `$XDG_RUNTIME_DIR`.
pub fn socket_path(display: Option<&str>) -> Result<PathBuf> {
    let name = display
        .map(str::to_string)
        .or_else(|| std::env::var("WAYLAND_DISPLAY").ok())
        .unwrap_or_else(|| "wayland-0".to_string());
    let path = PathBuf::from(&name);
    if path.is_absolute() {
        return Ok(path);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) => Ok(PathBuf::from(dir).join(name)),
        None => Err(MediaError::Unavailable(format!(
            "Wayland display {name:?}: XDG_RUNTIME_DIR is not set (it holds the compositor's socket)"
        ))),
    }
}

/// The globals a Wayland compositor announces (interface names), for `untether doctor`.
pub fn globals(display: Option<&str>) -> Result<Vec<String>> {
    let (_conn, globals, _queue) = connect(display)?;
    Ok(globals
        .contents()
        .clone_list()
        .into_iter()
        .map(|g| g.interface)
        .collect())
}

type Connected = (
    Connection,
    wayland_client::globals::GlobalList,
    EventQueue<State>,
);

fn connect(display: Option<&str>) -> Result<Connected> {
    let path = socket_path(display)?;
    let stream = UnixStream::connect(&path).map_err(|e| {
        MediaError::Unavailable(format!(
            "cannot connect to the Wayland compositor at {}: {e} (is one running? set WAYLAND_DISPLAY or pass --capture wlr:OUTPUT@DISPLAY)",
            path.display()
        ))
    })?;
    let conn = Connection::from_socket(stream)
        .map_err(|e| MediaError::Other(format!("Wayland {}: {e}", path.display())))?;
    let (globals, queue) = registry_queue_init::<State>(&conn)
        .map_err(|e| MediaError::Other(format!("Wayland registry: {e}")))?;
    Ok((conn, globals, queue))
}

impl WlrCapture {
    /// Connects to `display` (None: `$WAYLAND_DISPLAY`), finds the output and grabs one frame
    /// (which tells the size).
    pub fn open(display: Option<&str>, target: &WlrTarget) -> Result<WlrCapture> {
        let (conn, globals, mut queue) = connect(display)?;
        let qh = queue.handle();
        let manager: ZwlrScreencopyManagerV1 = globals.bind(&qh, 1..=3, ()).map_err(|_| {
            MediaError::Unavailable(format!(
                "this Wayland compositor has no {SCREENCOPY_GLOBAL} (wlr-screencopy is wlroots' protocol: sway, Hyprland, river; on GNOME or KDE use --capture portal)"
            ))
        })?;
        let shm: wl_shm::WlShm = globals
            .bind(&qh, 1..=1, ())
            .map_err(|_| MediaError::Unavailable("this Wayland compositor has no wl_shm".into()))?;
        let mut state = State::default();
        for g in globals.contents().clone_list() {
            if g.interface == "wl_output" {
                let proxy: wl_output::WlOutput =
                    globals
                        .registry()
                        .bind(g.name, g.version.min(4), &qh, state.outputs.len());
                state.outputs.push(OutputInfo {
                    proxy,
                    name: None,
                    mode: (0, 0),
                });
            }
        }
        queue
            .roundtrip(&mut state)
            .map_err(|e| MediaError::Other(format!("Wayland roundtrip: {e}")))?;
        let output = pick_output(&state.outputs, target.output.as_deref())?;
        let mut cap = WlrCapture {
            conn,
            queue,
            state,
            shm,
            manager,
            output,
            target: target.clone(),
            buffer: None,
            spare: None,
            pending: None,
            display: socket_path(display)?.display().to_string(),
            size: (0, 0),
            stride: 0,
            last_ready_us: None,
        };
        cap.grab()?;
        Ok(cap)
    }

    /// The compositor's socket.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The captured output's name, or its index where the compositor does not name outputs.
    pub fn output_name(&self) -> String {
        let o = &self.state.outputs[self.output];
        o.name
            .clone()
            .unwrap_or_else(|| format!("#{}", self.output))
    }

    /// The output's current mode (pixels), as the compositor announced it.
    pub fn output_mode(&self) -> (i32, i32) {
        self.state.outputs[self.output].mode
    }

    /// Frame size in pixels (of the last grab).
    pub fn size(&self) -> (u32, u32) {
        self.size
    }

    /// Bytes per row of the frames [`grab`](Self::grab) returns.
    pub fn stride(&self) -> usize {
        self.stride as usize
    }

    /// When the compositor finished the last frame, on CLOCK_MONOTONIC (µs), which is the
    /// clock of `untether_clock::now_us`.
    pub fn ready_us(&self) -> Option<u64> {
        self.last_ready_us
    }

    /// Grabs one frame, then [`frame`](Self::frame) has it. The size may change between
    /// grabs (a mode change): check [`size`](Self::size) after each.
    pub fn grab(&mut self) -> Result<()> {
        self.cancel();
        let frame = self.request()?;
        let result = self.copy_frame(&frame);
        frame.destroy();
        result?;
        self.finish_frame()
    }

    /// Whether the compositor can answer only when the output changed (screencopy version 2
    /// and later), which [`wait_for_change`](Self::wait_for_change) needs.
    pub fn tracks_damage(&self) -> bool {
        self.manager.version() >= 2
    }

    /// Waits up to `timeout` for the output to change and takes the changed frame as it
    /// arrives: true when [`frame`](Self::frame) has a new frame, false when nothing changed
    /// in time (the last frame stays whole; the request stays in flight for the next call).
    /// Without damage tracking every call is a [`grab`](Self::grab).
    pub fn wait_for_change(&mut self, timeout: Duration) -> Result<bool> {
        if !self.tracks_damage() {
            return self.grab().map(|()| true);
        }
        if self.pending.is_none() {
            let frame = self.request()?;
            let layout = match self.describe(Instant::now() + GRAB_TIMEOUT) {
                Ok(l) => l,
                Err(e) => {
                    frame.destroy();
                    return Err(e);
                }
            };
            if self.spare.as_ref().map(|b| b.layout) != Some(layout) {
                self.spare = None;
                match ShmBuffer::new(&self.shm, &self.queue.handle(), layout) {
                    Ok(b) => self.spare = Some(b),
                    Err(e) => {
                        frame.destroy();
                        return Err(e);
                    }
                }
            }
            if let Some(b) = &self.spare {
                frame.copy_with_damage(&b.buffer);
            }
            self.pending = Some(frame);
        }
        let deadline = Instant::now() + timeout;
        match self.dispatch_until(deadline, |f| f.ready_us.is_some() || f.failed) {
            Ok(()) => {}
            Err(Waited::TimedOut) => return Ok(false),
            Err(Waited::Failed(e)) => {
                self.cancel();
                return Err(e);
            }
        }
        let frame = self.pending.take();
        if let Some(f) = frame {
            f.destroy();
        }
        if self.state.frame.failed {
            return Err(MediaError::Other(
                "wlr-screencopy: the compositor failed to copy the frame".into(),
            ));
        }
        std::mem::swap(&mut self.buffer, &mut self.spare);
        let layout = self.buffer.as_ref().map(|b| b.layout);
        if let Some((_, w, h, stride)) = layout {
            self.size = (w, h);
            self.stride = stride;
        }
        self.last_ready_us = self.state.frame.ready_us;
        self.finish_frame().map(|()| true)
    }

    /// Gives up the `copy_with_damage` in flight, if any (its buffer is not read).
    pub fn cancel(&mut self) {
        if let Some(f) = self.pending.take() {
            f.destroy();
        }
    }

    /// Asks for the next frame of the output (or region).
    fn request(&mut self) -> Result<ZwlrScreencopyFrameV1> {
        let qh = self.queue.handle();
        self.state.frame = FrameState::default();
        let cursor = self.target.cursor as i32;
        let output = &self.state.outputs[self.output].proxy;
        Ok(match self.target.region {
            Some((x, y, w, h)) => {
                self.manager
                    .capture_output_region(cursor, output, x, y, w, h, &qh, ())
            }
            None => self.manager.capture_output(cursor, output, &qh, ()),
        })
    }

    /// Turns the new frame in `buffer` into upright BGRA rows.
    fn finish_frame(&mut self) -> Result<()> {
        let (w, stride, y_invert) = (self.size.0, self.stride as usize, self.state.frame.y_invert);
        let format = self.buffer.as_ref().map_or(0, |b| b.layout.0);
        to_bgra(self.frame(), format, w as usize, stride, y_invert)
    }

    /// The last grabbed frame: BGRA rows of [`stride`](Self::stride) bytes, [`size`](Self::size)
    /// pixels (empty before the first grab).
    pub fn frame(&mut self) -> &mut [u8] {
        let len = self.stride as usize * self.size.1 as usize;
        match self.buffer.as_mut() {
            Some(b) => &mut b.bytes()[..len],
            None => &mut [],
        }
    }

    /// Waits for the compositor's buffer description of the requested frame: its
    /// (format, width, height, stride).
    fn describe(&mut self, deadline: Instant) -> Result<(u32, u32, u32, u32)> {
        self.dispatch_until(deadline, |f| f.described || f.failed)
            .map_err(Waited::into_error)?;
        let f = &self.state.frame;
        match (&f.shm, f.failed) {
            (Some((format, w, h, stride)), false) => Ok(((*format).into(), *w, *h, *stride)),
            (None, false) => Err(MediaError::Unavailable(
                "wlr-screencopy: the compositor offers no shared-memory buffer for this output"
                    .into(),
            )),
            (_, true) => Err(MediaError::Other("wlr-screencopy: the compositor refused the frame (output gone or region outside it)".into())),
        }
    }

    fn copy_frame(&mut self, frame: &ZwlrScreencopyFrameV1) -> Result<()> {
        let deadline = Instant::now() + GRAB_TIMEOUT;
        let layout = self.describe(deadline)?;
        let (_, w, h, stride) = layout;
        if self.buffer.as_ref().map(|b| b.layout) != Some(layout) {
            self.buffer = None;
            self.buffer = Some(ShmBuffer::new(&self.shm, &self.queue.handle(), layout)?);
        }
        if let Some(b) = &self.buffer {
            frame.copy(&b.buffer);
        }
        self.dispatch_until(deadline, |f| f.ready_us.is_some() || f.failed)
            .map_err(Waited::into_error)?;
        if self.state.frame.failed {
            return Err(MediaError::Other(
                "wlr-screencopy: the compositor failed to copy the frame".into(),
            ));
        }
        self.size = (w, h);
        self.stride = stride;
        self.last_ready_us = self.state.frame.ready_us;
        Ok(())
    }

    /// Reads and dispatches events until `done` holds for the frame, or the deadline.
    fn dispatch_until(
        &mut self,
        deadline: Instant,
        done: impl Fn(&FrameState) -> bool,
    ) -> std::result::Result<(), Waited> {
        let werr = |e: &dyn std::fmt::Display| {
            Waited::Failed(MediaError::Other(format!(
                "Wayland connection to {}: {e}",
                self.display
            )))
        };
        loop {
            self.queue
                .dispatch_pending(&mut self.state)
                .map_err(|e| werr(&e))?;
            if done(&self.state.frame) {
                return Ok(());
            }
            self.conn.flush().map_err(|e| werr(&e))?;
            let Some(guard) = self.queue.prepare_read() else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Waited::TimedOut);
            }
            let mut pfd = libc::pollfd {
                fd: guard.connection_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
            if n > 0 {
                match guard.read() {
                    Ok(_) => {}
                    Err(wayland_client::backend::WaylandError::Io(e))
                        if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(werr(&e)),
                }
            }
        }
    }
}

/// Why [`WlrCapture::dispatch_until`] returned without its condition.
enum Waited {
    TimedOut,
    Failed(MediaError),
}

impl Waited {
    /// For a wait that had to end in time (a grab).
    fn into_error(self) -> MediaError {
        match self {
            Waited::TimedOut => MediaError::Other(format!(
                "wlr-screencopy: no frame from the compositor within {} ms",
                GRAB_TIMEOUT.as_millis()
            )),
            Waited::Failed(e) => e,
        }
    }
}

/// Chooses the output `want` names (a name, or an index), or the first.
fn pick_output(outputs: &[OutputInfo], want: Option<&str>) -> Result<usize> {
    let names = || {
        outputs
            .iter()
            .enumerate()
            .map(|(i, o)| o.name.clone().unwrap_or_else(|| i.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if outputs.is_empty() {
        return Err(MediaError::Unavailable(
            "this Wayland compositor has no outputs".into(),
        ));
    }
    match want {
        None => Ok(0),
        Some(w) => outputs
            .iter()
            .position(|o| o.name.as_deref() == Some(w))
            .or_else(|| w.parse::<usize>().ok().filter(|&i| i < outputs.len()))
            .ok_or_else(|| {
                MediaError::Other(format!(
                    "no Wayland output {w:?}; the outputs are: {} (by name, or by index from 0)",
                    names()
                ))
            }),
    }
}

/// Makes a mapped frame B, G, R, X rows, top row first.
fn to_bgra(
    bytes: &mut [u8],
    format: u32,
    width: usize,
    stride: usize,
    y_invert: bool,
) -> Result<()> {
    use wl_shm::Format as F;
    match F::try_from(format) {
        Ok(F::Argb8888 | F::Xrgb8888) => {}
        Ok(F::Abgr8888 | F::Xbgr8888) => {
            for row in bytes.chunks_exact_mut(stride) {
                for px in row[..width * 4].chunks_exact_mut(4) {
                    px.swap(0, 2);
                }
            }
        }
        _ => {
            return Err(MediaError::Unavailable(format!(
                "wlr-screencopy: the compositor offers shm format {format:#x}; untether takes ARGB8888, XRGB8888, ABGR8888 or XBGR8888"
            )))
        }
    }
    if y_invert {
        let rows = bytes.len() / stride;
        for y in 0..rows / 2 {
            let (top, bottom) = bytes.split_at_mut((rows - 1 - y) * stride);
            top[y * stride..(y + 1) * stride].swap_with_slice(&mut bottom[..stride]);
        }
    }
    Ok(())
}

impl Dispatch<wl_registry::WlRegistry, GlobalListContents> for State {
    fn event(
        _: &mut Self,
        _: &wl_registry::WlRegistry,
        _: wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<wl_output::WlOutput, usize> for State {
    fn event(
        state: &mut Self,
        _: &wl_output::WlOutput,
        event: wl_output::Event,
        index: &usize,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(o) = state.outputs.get_mut(*index) else {
            return;
        };
        match event {
            wl_output::Event::Name { name } => o.name = Some(name),
            wl_output::Event::Mode {
                flags: WEnum::Value(flags),
                width,
                height,
                ..
            } if flags.contains(wl_output::Mode::Current) => o.mode = (width, height),
            _ => {}
        }
    }
}

impl Dispatch<ZwlrScreencopyFrameV1, ()> for State {
    fn event(
        state: &mut Self,
        frame: &ZwlrScreencopyFrameV1,
        event: zwlr_screencopy_frame_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        use zwlr_screencopy_frame_v1::Event as E;
        let f = &mut state.frame;
        match event {
            E::Buffer {
                format,
                width,
                height,
                stride,
            } => {
                f.shm = Some((format, width, height, stride));
                // Before version 3 there is no buffer_done: the shm description is all.
                if frame.version() < 3 {
                    f.described = true;
                }
            }
            E::BufferDone => f.described = true,
            E::Flags { flags } => {
                f.y_invert = matches!(flags, WEnum::Value(fl) if fl.contains(zwlr_screencopy_frame_v1::Flags::YInvert));
            }
            E::Ready {
                tv_sec_hi,
                tv_sec_lo,
                tv_nsec,
            } => {
                let secs = ((tv_sec_hi as u64) << 32) | tv_sec_lo as u64;
                f.ready_us = Some(secs * 1_000_000 + tv_nsec as u64 / 1000);
            }
            E::Failed => f.failed = true,
            _ => {}
        }
    }
}

wayland_client::delegate_noop!(State: ignore wl_shm::WlShm);
wayland_client::delegate_noop!(State: wl_shm_pool::WlShmPool);
wayland_client::delegate_noop!(State: ignore wl_buffer::WlBuffer);
wayland_client::delegate_noop!(State: ZwlrScreencopyManagerV1);

use wayland_client::Proxy as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xbgr_is_swizzled_and_a_flipped_frame_is_turned_upright() {
        // 1x2 pixels, stride 8 (one padding pixel): top R=1,G=2,B=3; bottom R=4,G=5,B=6.
        let mut b = vec![1, 2, 3, 0, 9, 9, 9, 9, 4, 5, 6, 0, 9, 9, 9, 9];
        to_bgra(&mut b, wl_shm::Format::Xbgr8888.into(), 1, 8, true).unwrap();
        assert_eq!(
            &b[..4],
            &[6, 5, 4, 0],
            "the bottom row comes first, as B, G, R"
        );
        assert_eq!(&b[8..12], &[3, 2, 1, 0]);
        assert_eq!(&b[4..8], &[9; 4], "padding is not touched");
    }

    #[test]
    fn an_unknown_format_is_refused_with_the_allowed_ones() {
        let mut b = vec![0u8; 8];
        let e = to_bgra(&mut b, wl_shm::Format::Rgb565.into(), 1, 4, false).unwrap_err();
        assert!(e.to_string().contains("XRGB8888"), "{e}");
    }

    #[test]
    fn no_compositor_is_a_clear_error() {
        let e = WlrCapture::open(Some("/nonexistent/wayland-9"), &WlrTarget::default())
            .err()
            .expect("no compositor there");
        assert!(e.to_string().contains("WAYLAND_DISPLAY"), "{e}");
    }
}
