//! Unmodified-application capture on X11: MIT-SHM grabs of a whole screen or one window
//! (x11rb), the DAMAGE extension to skip grabs when nothing changed, and input replay with
//! XTEST (keys, buttons, wheel, absolute and relative pointer motion).
//!
//! A grab is one `ShmGetImage` request: the X server writes the pixels straight into a shared
//! memory segment this process reads, so the only pass over them before the encoder is the
//! encoder's own colour conversion. Frames are 32-bit Z-pixmaps, which on little-endian X
//! servers of depth 24/32 are B, G, R, X in memory — the [`BgraFrame`](crate::BgraFrame)
//! layout — so they go to the encoder as they are.

use std::collections::HashMap;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::damage::{self, ConnectionExt as _};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xfixes::ConnectionExt as _;
use x11rb::protocol::xproto::{
    self, AtomEnum, ChangeWindowAttributesAux, ConnectionExt as _, EventMask, ImageFormat, Window,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;

use crate::{MediaError, Result};

fn xerr(what: &str) -> impl Fn(String) -> MediaError + '_ {
    move |e| MediaError::Other(format!("X11 {what}: {e}"))
}

macro_rules! x {
    ($what:expr, $e:expr) => {
        $e.map_err(|e| xerr($what)(e.to_string()))
    };
}

/// Connects to `display` (None: `$DISPLAY`), with an error that says what to do.
fn connect(display: Option<&str>) -> Result<(RustConnection, usize)> {
    RustConnection::connect(display).map_err(|e| {
        MediaError::Other(format!(
            "cannot connect to X display {:?}: {e} (is an X server running there? set DISPLAY or pass --capture x11:DISPLAY)",
            display
                .map(str::to_string)
                .or_else(|| std::env::var("DISPLAY").ok())
                .unwrap_or_default()
        ))
    })
}

/// A System V shared memory segment attached to this process and to the X server.
struct ShmSegment {
    addr: *mut u8,
    size: usize,
    seg: shm::Seg,
}

impl ShmSegment {
    fn new(conn: &RustConnection, size: usize) -> Result<ShmSegment> {
        // SAFETY: plain System V calls; the returned address is checked before use, and the
        // segment is marked for removal once both sides are attached (freed when they detach).
        unsafe {
            let id = libc::shmget(libc::IPC_PRIVATE, size, libc::IPC_CREAT | 0o600);
            if id < 0 {
                return Err(MediaError::Other(format!(
                    "shmget of {size} bytes failed: {}",
                    std::io::Error::last_os_error()
                )));
            }
            let addr = libc::shmat(id, std::ptr::null(), 0);
            if addr as isize == -1 {
                let e = std::io::Error::last_os_error();
                libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                return Err(MediaError::Other(format!("shmat failed: {e}")));
            }
            let seg = match conn.generate_id() {
                Ok(s) => s,
                Err(e) => {
                    libc::shmdt(addr);
                    libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                    return Err(MediaError::Other(format!("X11 id: {e}")));
                }
            };
            let attached = conn
                .shm_attach(seg, id as u32, false)
                .map_err(|e| e.to_string())
                .and_then(|c| c.check().map_err(|e| e.to_string()));
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
            if let Err(e) = attached {
                libc::shmdt(addr);
                return Err(MediaError::Other(format!(
                    "the X server cannot attach shared memory ({e}): MIT-SHM needs the X server on this machine"
                )));
            }
            Ok(ShmSegment {
                addr: addr as *mut u8,
                size,
                seg,
            })
        }
    }

    fn release(&mut self, conn: &RustConnection) {
        if !self.addr.is_null() {
            let _ = conn.shm_detach(self.seg).map(|c| c.ignore_error());
            let _ = conn.flush();
            // SAFETY: the address came from shmat and is detached once.
            unsafe { libc::shmdt(self.addr as *const libc::c_void) };
            self.addr = std::ptr::null_mut();
        }
    }
}

/// What to capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureTarget {
    /// The whole screen (the root window).
    Screen,
    /// A window by id (decimal or 0x-hex) or by title (exact `WM_NAME`, else a substring).
    Window(String),
}

/// What changed since the last grab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Pixels changed (a DAMAGE report).
    pub damaged: bool,
    /// The captured area changed size.
    pub resized: bool,
}

/// Grabs a screen or window through MIT-SHM.
pub struct X11Capture {
    conn: RustConnection,
    root: Window,
    target: Window,
    damage: Option<damage::Damage>,
    shm: ShmSegment,
    /// Captured size (cropped to even numbers for 4:2:0).
    width: u32,
    height: u32,
    /// The captured area's top-left corner in root coordinates.
    origin: (i32, i32),
    damaged: bool,
    display: String,
}

// SAFETY: the shared memory pointer is owned by this value and only used through &mut self.
unsafe impl Send for X11Capture {}

/// Finds a window by id or title under `root`.
fn find_window(conn: &RustConnection, root: Window, spec: &str) -> Result<Window> {
    let parsed = if let Some(hex) = spec.strip_prefix("0x").or_else(|| spec.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else {
        spec.parse::<u32>().ok()
    };
    if let Some(id) = parsed {
        x!("window", conn.get_geometry(id).map(|c| c.reply()))?
            .map_err(|_| MediaError::Other(format!("no X window with id {spec} (0x{id:x})")))?;
        return Ok(id);
    }
    let mut exact = None;
    let mut partial = None;
    let mut stack = vec![root];
    let mut seen = 0;
    while let Some(w) = stack.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        if let Ok(Ok(reply)) = conn
            .get_property(false, w, AtomEnum::WM_NAME, AtomEnum::ANY, 0, 1024)
            .map(|c| c.reply())
        {
            let name = String::from_utf8_lossy(&reply.value);
            if name == spec {
                exact = Some(w);
                break;
            }
            if partial.is_none() && !name.is_empty() && name.contains(spec) {
                partial = Some(w);
            }
        }
        if let Ok(Ok(tree)) = conn.query_tree(w).map(|c| c.reply()) {
            stack.extend(tree.children);
        }
    }
    exact.or(partial).ok_or_else(|| {
        MediaError::Other(format!(
            "no X window titled {spec:?} (pass its id, e.g. from `xwininfo`, or part of its title)"
        ))
    })
}

impl X11Capture {
    /// Opens `display` (None: `$DISPLAY`) and prepares grabs of `target`.
    pub fn open(display: Option<&str>, target: &CaptureTarget) -> Result<X11Capture> {
        let (conn, screen_num) = connect(display)?;
        let setup = conn.setup();
        let screen = setup
            .roots
            .get(screen_num)
            .ok_or_else(|| MediaError::Other("X11: no such screen".into()))?;
        let root = screen.root;
        let depth = screen.root_depth;
        let bpp = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == depth)
            .map(|f| f.bits_per_pixel);
        if bpp != Some(32) || !matches!(depth, 24 | 32) {
            return Err(MediaError::Other(format!(
                "X11 capture needs a 24- or 32-bit TrueColor screen (this one: depth {depth}, {bpp:?} bits per pixel); start Xvfb with -screen 0 WxHx24"
            )));
        }
        if setup.image_byte_order != xproto::ImageOrder::LSB_FIRST {
            return Err(MediaError::Other(
                "X11 capture needs a little-endian X server".into(),
            ));
        }
        let shm_ok = conn
            .extension_information(shm::X11_EXTENSION_NAME)
            .ok()
            .flatten()
            .is_some();
        if !shm_ok {
            return Err(MediaError::Other(
                "the X server has no MIT-SHM extension".into(),
            ));
        }
        x!("shm version", conn.shm_query_version().map(|c| c.reply()))?
            .map_err(|e| xerr("shm version")(e.to_string()))?;
        let target_win = match target {
            CaptureTarget::Screen => root,
            CaptureTarget::Window(spec) => find_window(&conn, root, spec)?,
        };
        // Damage needs XFixes initialised first; without either, every tick grabs.
        let damage = (|| -> std::result::Result<damage::Damage, String> {
            conn.xfixes_query_version(5, 0)
                .map_err(|e| e.to_string())?
                .reply()
                .map_err(|e| e.to_string())?;
            conn.damage_query_version(1, 1)
                .map_err(|e| e.to_string())?
                .reply()
                .map_err(|e| e.to_string())?;
            let id = conn.generate_id().map_err(|e| e.to_string())?;
            conn.damage_create(id, target_win, damage::ReportLevel::NON_EMPTY)
                .map_err(|e| e.to_string())?
                .check()
                .map_err(|e| e.to_string())?;
            Ok(id)
        })();
        let damage = match damage {
            Ok(d) => Some(d),
            Err(e) => {
                log::warn!("X11: no DAMAGE extension ({e}); grabbing every frame");
                None
            }
        };
        // Size changes arrive as ConfigureNotify.
        x!(
            "select input",
            conn.change_window_attributes(
                target_win,
                &ChangeWindowAttributesAux::new().event_mask(EventMask::STRUCTURE_NOTIFY),
            )
        )?;
        let max = (screen.width_in_pixels as usize).max(16)
            * (screen.height_in_pixels as usize).max(16)
            * 4;
        let shm = ShmSegment::new(&conn, max)?;
        let mut cap = X11Capture {
            conn,
            root,
            target: target_win,
            damage,
            shm,
            width: 0,
            height: 0,
            origin: (0, 0),
            damaged: true,
            display: display
                .map(str::to_string)
                .or_else(|| std::env::var("DISPLAY").ok())
                .unwrap_or_default(),
        };
        cap.update_geometry()?;
        Ok(cap)
    }

    fn update_geometry(&mut self) -> Result<()> {
        let g = x!("geometry", self.conn.get_geometry(self.target))?
            .reply()
            .map_err(|e| xerr("geometry")(e.to_string()))?;
        let t = x!(
            "coordinates",
            self.conn
                .translate_coordinates(self.target, self.root, 0, 0)
        )?
        .reply()
        .map_err(|e| xerr("coordinates")(e.to_string()))?;
        let (w, h) = (g.width as u32 & !1, g.height as u32 & !1);
        if w == 0 || h == 0 {
            return Err(MediaError::Other(format!(
                "the captured X window is {}x{}: too small",
                g.width, g.height
            )));
        }
        let need = w as usize * h as usize * 4;
        if need > self.shm.size {
            let mut fresh = ShmSegment::new(&self.conn, need)?;
            std::mem::swap(&mut fresh, &mut self.shm);
            fresh.release(&self.conn);
        }
        self.width = w;
        self.height = h;
        self.origin = (t.dst_x as i32, t.dst_y as i32);
        Ok(())
    }

    /// The display this captures.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The X window captured (the root window for a whole screen).
    pub fn window(&self) -> u32 {
        self.target
    }

    /// The captured size (even numbers: a window of odd size loses its last row/column).
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// The captured area's top-left corner on the screen (for input replay).
    pub fn origin(&self) -> (i32, i32) {
        self.origin
    }

    /// Whether the DAMAGE extension tells us about unchanged frames.
    pub fn tracks_damage(&self) -> bool {
        self.damage.is_some()
    }

    /// Reads the X events that arrived: damage and size changes. Without DAMAGE, every call
    /// reports `damaged`.
    pub fn poll_changes(&mut self) -> Result<Changes> {
        let mut c = Changes {
            damaged: self.damage.is_none() || self.damaged,
            resized: false,
        };
        loop {
            let ev = self
                .conn
                .poll_for_event()
                .map_err(|e| MediaError::Other(format!("X11 connection lost: {e}")))?;
            match ev {
                None => break,
                Some(Event::DamageNotify(_)) => c.damaged = true,
                Some(Event::ConfigureNotify(ev)) if ev.window == self.target => {
                    let (w, h) = (ev.width as u32 & !1, ev.height as u32 & !1);
                    if (w, h) != (self.width, self.height) {
                        c.resized = true;
                    }
                    c.damaged = true;
                }
                Some(_) => {}
            }
        }
        if c.resized {
            self.update_geometry()?;
        }
        if c.damaged {
            if let Some(d) = self.damage {
                // Everything reported so far is covered by the grab that follows.
                let _ = self.conn.damage_subtract(d, x11rb::NONE, x11rb::NONE);
            }
        }
        self.damaged = false;
        Ok(c)
    }

    /// Waits up to `timeout` for a change (a DAMAGE report or a resize) and returns what
    /// changed: at once when one is already queued, else as soon as the X server sends one,
    /// so a frame can be grabbed the moment the application drew it rather than at the next
    /// tick. Without DAMAGE every call reports `damaged` at once (there is nothing to wait
    /// for: pace those grabs with a tick).
    pub fn wait_for_changes(&mut self, timeout: std::time::Duration) -> Result<Changes> {
        let c = self.poll_changes()?;
        if c.damaged || c.resized {
            return Ok(c);
        }
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: self.conn.stream().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd; the connection's socket stays open (owned by self.conn).
        // An error (EINTR) is a spurious wake: the events are read below either way.
        unsafe { libc::poll(&mut fd, 1, ms) };
        self.poll_changes()
    }

    /// Grabs the captured area into shared memory and returns it as BGRA rows of
    /// `4 × width` bytes (stride = `4 × width`), valid until the next grab.
    pub fn grab(&mut self) -> Result<&mut [u8]> {
        let cookie = x!(
            "grab",
            self.conn.shm_get_image(
                self.target,
                0,
                0,
                self.width as u16,
                self.height as u16,
                !0,
                ImageFormat::Z_PIXMAP.into(),
                self.shm.seg,
                0,
            )
        )?;
        match cookie.reply() {
            Ok(_) => {}
            Err(e) => {
                // The window was resized or unmapped between events and now: re-read the
                // geometry and report; the next tick grabs the new size.
                self.damaged = true;
                let _ = self.update_geometry();
                return Err(MediaError::Other(format!("X11 grab failed: {e}")));
            }
        }
        let len = self.width as usize * self.height as usize * 4;
        // SAFETY: the segment holds at least `len` bytes (checked in update_geometry), the X
        // server finished writing when it replied, and the borrow ties the slice to &mut self.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.shm.addr, len) })
    }
}

impl Drop for X11Capture {
    fn drop(&mut self) {
        if let Some(d) = self.damage {
            let _ = self.conn.damage_destroy(d);
        }
        self.shm.release(&self.conn);
    }
}

/// How pointer motion is replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PointerMode {
    /// Move to the client's absolute position (offset by the captured area's origin).
    #[default]
    Absolute,
    /// Move by the client's relative motion (games that grab the pointer).
    Relative,
}

/// Replays input into an X server with XTEST.
pub struct XtestReplay {
    conn: RustConnection,
    root: Window,
    keysym_to_keycode: HashMap<u32, u8>,
    min_keycode: u8,
    max_keycode: u8,
    pub origin: (i32, i32),
    pub pointer: PointerMode,
}

/// XTEST event types (core protocol event codes).
const KEY_PRESS: u8 = xproto::KEY_PRESS_EVENT;
const KEY_RELEASE: u8 = xproto::KEY_RELEASE_EVENT;
const BUTTON_PRESS: u8 = xproto::BUTTON_PRESS_EVENT;
const BUTTON_RELEASE: u8 = xproto::BUTTON_RELEASE_EVENT;
const MOTION: u8 = xproto::MOTION_NOTIFY_EVENT;

impl XtestReplay {
    /// Connects to `display` and reads its keyboard mapping.
    pub fn open(display: Option<&str>, origin: (i32, i32), pointer: PointerMode) -> Result<Self> {
        let (conn, screen_num) = connect(display)?;
        let setup = conn.setup();
        let root = setup
            .roots
            .get(screen_num)
            .ok_or_else(|| MediaError::Other("X11: no such screen".into()))?
            .root;
        let (min_keycode, max_keycode) = (setup.min_keycode, setup.max_keycode);
        x!("XTEST", conn.xtest_get_version(2, 2).map(|c| c.reply()))?.map_err(|e| {
            MediaError::Other(format!(
                "the X server has no XTEST extension ({e}): input cannot be replayed"
            ))
        })?;
        let map = x!(
            "keyboard mapping",
            conn.get_keyboard_mapping(min_keycode, max_keycode - min_keycode + 1)
        )?
        .reply()
        .map_err(|e| xerr("keyboard mapping")(e.to_string()))?;
        let per = map.keysyms_per_keycode.max(1) as usize;
        let mut keysym_to_keycode = HashMap::new();
        for (i, syms) in map.keysyms.chunks(per).enumerate() {
            let code = min_keycode as usize + i;
            for &s in syms {
                if s != 0 {
                    keysym_to_keycode.entry(s).or_insert(code as u8);
                }
            }
        }
        Ok(XtestReplay {
            conn,
            root,
            keysym_to_keycode,
            min_keycode,
            max_keycode,
            origin,
            pointer,
        })
    }

    fn fake(&self, ty: u8, detail: u8, x: i32, y: i32) -> Result<()> {
        let clamp = |v: i32| v.clamp(i16::MIN as i32, i16::MAX as i32) as i16;
        x!(
            "XTEST",
            self.conn
                .xtest_fake_input(ty, detail, 0, self.root, clamp(x), clamp(y), 0)
        )?;
        Ok(())
    }

    /// Presses or releases the key that types `keysym`. Returns false when no key of this
    /// keyboard produces it.
    pub fn key(&self, keysym: u32, down: bool) -> Result<bool> {
        let Some(&code) = self.keysym_to_keycode.get(&keysym) else {
            return Ok(false);
        };
        self.keycode(code, down)
    }

    /// Presses or releases an X keycode directly (e.g. evdev code + 8).
    pub fn keycode(&self, code: u8, down: bool) -> Result<bool> {
        if code < self.min_keycode || code > self.max_keycode {
            return Ok(false);
        }
        self.fake(if down { KEY_PRESS } else { KEY_RELEASE }, code, 0, 0)?;
        Ok(true)
    }

    /// Presses or releases pointer button `button` (1 left, 2 middle, 3 right, 8/9 extra).
    pub fn button(&self, button: u8, down: bool) -> Result<()> {
        if button == 0 {
            return Ok(());
        }
        self.fake(
            if down { BUTTON_PRESS } else { BUTTON_RELEASE },
            button,
            0,
            0,
        )
    }

    /// Wheel notches: X buttons 4/5 (vertical, up/down) and 6/7 (horizontal, left/right).
    pub fn wheel(&self, dx: i32, dy: i32) -> Result<()> {
        for (n, pos, neg) in [(dy, 4u8, 5u8), (dx, 7, 6)] {
            let b = if n > 0 { pos } else { neg };
            for _ in 0..n.unsigned_abs().min(32) {
                self.button(b, true)?;
                self.button(b, false)?;
            }
        }
        Ok(())
    }

    /// Moves the pointer to (x, y) of the captured area.
    pub fn motion_absolute(&self, x: i32, y: i32) -> Result<()> {
        self.fake(MOTION, 0, x + self.origin.0, y + self.origin.1)
    }

    /// Moves the pointer by (dx, dy).
    pub fn motion_relative(&self, dx: i32, dy: i32) -> Result<()> {
        self.fake(MOTION, 1, dx, dy)
    }

    /// Sends what was queued to the X server.
    pub fn flush(&self) -> Result<()> {
        x!("flush", self.conn.flush())
    }

    /// Waits until the X server processed everything sent so far (a round trip).
    pub fn sync(&self) -> Result<()> {
        x!("sync", self.conn.get_input_focus())?
            .reply()
            .map_err(|e| xerr("sync")(e.to_string()))?;
        Ok(())
    }

    /// Where the pointer is, in root coordinates.
    pub fn pointer_position(&self) -> Result<(i32, i32)> {
        let r = x!("query pointer", self.conn.query_pointer(self.root))?
            .reply()
            .map_err(|e| xerr("query pointer")(e.to_string()))?;
        Ok((r.root_x as i32, r.root_y as i32))
    }
}

/// The X keysym of an SDL keycode (SDL2's `SDLK_*`), for keys a keyboard has. Printable
/// ASCII keycodes are their characters, which are also their Latin-1 keysyms.
pub fn sdl_keycode_to_keysym(code: u32) -> Option<u32> {
    const SCAN: u32 = 0x4000_0000;
    Some(match code {
        8 => 0xff08,         // Backspace
        9 => 0xff09,         // Tab
        13 => 0xff0d,        // Return
        27 => 0xff1b,        // Escape
        127 => 0xffff,       // Delete
        0x20..=0x7e => code, // printable ASCII
        c if c >= SCAN => {
            let s = c - SCAN;
            match s {
                0x3a..=0x45 => 0xffbe + (s - 0x3a), // F1..F12
                0x46 => 0xff61,                     // PrintScreen
                0x47 => 0xff14,                     // ScrollLock
                0x48 => 0xff13,                     // Pause
                0x49 => 0xff63,                     // Insert
                0x4a => 0xff50,                     // Home
                0x4b => 0xff55,                     // PageUp
                0x4d => 0xff57,                     // End
                0x4e => 0xff56,                     // PageDown
                0x4f => 0xff53,                     // Right
                0x50 => 0xff51,                     // Left
                0x51 => 0xff54,                     // Down
                0x52 => 0xff52,                     // Up
                0x39 => 0xffe5,                     // CapsLock
                0xe0 => 0xffe3,                     // LCtrl
                0xe1 => 0xffe1,                     // LShift
                0xe2 => 0xffe9,                     // LAlt
                0xe3 => 0xffeb,                     // LGui (Super_L)
                0xe4 => 0xffe4,                     // RCtrl
                0xe5 => 0xffe2,                     // RShift
                0xe6 => 0xffea,                     // RAlt
                0xe7 => 0xffec,                     // RGui
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The X pointer button of an evdev `BTN_*` code (BTN_LEFT 0x110 …), if it is one.
pub fn evdev_button_to_x(code: u16) -> Option<u8> {
    Some(match code {
        0x110 => 1, // BTN_LEFT
        0x111 => 3, // BTN_RIGHT
        0x112 => 2, // BTN_MIDDLE
        0x113 => 8, // BTN_SIDE
        0x114 => 9, // BTN_EXTRA
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keysyms_of_sdl_keycodes() {
        assert_eq!(sdl_keycode_to_keysym(b'a' as u32), Some(0x61));
        assert_eq!(sdl_keycode_to_keysym(13), Some(0xff0d));
        assert_eq!(sdl_keycode_to_keysym(0x4000_004F), Some(0xff53));
        assert_eq!(sdl_keycode_to_keysym(0x4000_003A), Some(0xffbe));
        assert_eq!(sdl_keycode_to_keysym(0x4000_00E1), Some(0xffe1));
        assert_eq!(sdl_keycode_to_keysym(0x4000_0100), None);
        assert_eq!(evdev_button_to_x(0x110), Some(1));
        assert_eq!(evdev_button_to_x(30), None);
    }
}
