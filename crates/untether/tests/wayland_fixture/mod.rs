//! A real headless Wayland desktop for tests: sway with the headless backend and pixman
//! renderer, in a private `XDG_RUNTIME_DIR`, showing one window of our own (xdg-shell, a
//! wl_shm buffer of four coloured quadrants) floating at a known place on a solid background.

#[cfg(feature = "portal")]
pub mod portal;

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wayland_client::globals::{registry_queue_init, GlobalListContents};
use wayland_client::protocol::{
    wl_buffer, wl_compositor, wl_registry, wl_shm, wl_shm_pool, wl_surface,
};
use wayland_client::{Connection, Dispatch, QueueHandle};
use wayland_protocols::xdg::shell::client::{xdg_surface, xdg_toplevel, xdg_wm_base};

/// The output's size.
pub const OUTPUT: (u32, u32) = (640, 480);
/// The background colour (R, G, B).
pub const BACKGROUND: [u8; 3] = [0x20, 0x40, 0x80];
/// Where the window is and its size.
pub const WINDOW: (i32, i32, u32, u32) = (100, 80, 240, 160);
/// The window's quadrants (R, G, B): top left, top right, bottom left, bottom right.
pub const QUADRANTS: [[u8; 3]; 4] = [
    [0xE0, 0x20, 0x20],
    [0x20, 0xE0, 0x20],
    [0xF0, 0xF0, 0xF0],
    [0x10, 0x10, 0x10],
];

/// The colour the compositor shows at (x, y) of the output.
pub fn expected(x: i32, y: i32) -> [u8; 3] {
    let (wx, wy, ww, wh) = WINDOW;
    if x < wx || y < wy || x >= wx + ww as i32 || y >= wy + wh as i32 {
        return BACKGROUND;
    }
    let right = (x - wx) >= ww as i32 / 2;
    let bottom = (y - wy) >= wh as i32 / 2;
    QUADRANTS[bottom as usize * 2 + right as usize]
}

/// A running headless sway (killed by its pid when dropped) with our window on it.
pub struct Sway {
    child: Child,
    dir: PathBuf,
    /// The compositor's socket (absolute path).
    pub socket: PathBuf,
    window: Option<std::thread::JoinHandle<()>>,
    stop_window: std::sync::Arc<std::sync::atomic::AtomicBool>,
    painter: Option<Painter>,
}

/// What repaints the window from the test's thread (the window's own thread keeps answering
/// the compositor).
struct Painter {
    conn: Connection,
    surface: wl_surface::WlSurface,
    shm: wl_shm::WlShm,
    qh: QueueHandle<Window>,
}

impl Sway {
    /// Starts sway and the window, or says in one line why it cannot here.
    pub fn start() -> Result<Sway, String> {
        if Command::new("sway").arg("--version").output().is_err() {
            return Err("sway is not installed (scripts/setup.sh installs it)".into());
        }
        let dir = std::env::temp_dir().join(format!("untether-sway-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (r, g, b) = (BACKGROUND[0], BACKGROUND[1], BACKGROUND[2]);
        let (wx, wy, _, _) = WINDOW;
        let config = format!(
            "xwayland disable\n\
             output HEADLESS-1 resolution {}x{} position 0 0 bg #{r:02x}{g:02x}{b:02x} solid_color\n\
             default_border none\n\
             default_floating_border none\n\
             focus_follows_mouse no\n\
             for_window [app_id=\"untether-test\"] floating enable, move position {wx} {wy}\n",
            OUTPUT.0, OUTPUT.1
        );
        let cfg = dir.join("config");
        std::fs::File::create(&cfg)
            .and_then(|mut f| f.write_all(config.as_bytes()))
            .map_err(|e| format!("{}: {e}", cfg.display()))?;
        let mut cmd;
        // sway refuses to run as root (it could not drop privileges): run it as nobody.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let status = Command::new("chown")
                .args(["-R", "nobody", dir.to_str().unwrap_or_default()])
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                return Err(format!("cannot chown {} to nobody", dir.display()));
            }
            cmd = Command::new("setpriv");
            cmd.args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "sway",
            ]);
        } else {
            cmd = Command::new("sway");
        }
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("sway.log")).map_err(|e| e.to_string())?;
        let child = cmd
            .arg("-c")
            .arg(&cfg)
            .env("XDG_RUNTIME_DIR", &dir)
            .env("WLR_BACKENDS", "headless")
            .env("WLR_LIBINPUT_NO_DEVICES", "1")
            .env("WLR_RENDERER", "pixman")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("DISPLAY")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start sway: {e}"))?;
        let mut sway = Sway {
            child,
            socket: dir.join("wayland-1"),
            dir,
            window: None,
            stop_window: Default::default(),
            painter: None,
        };
        // Wait for the compositor's socket to accept connections.
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&sway.socket).is_err() {
            if let Ok(Some(st)) = sway.child.try_wait() {
                return Err(format!("sway exited ({st}): {}", sway.log_tail()));
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("sway made no socket in 10 s: {}", sway.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        sway.show_window()?;
        Ok(sway)
    }

    /// The last line of sway's log.
    pub fn log_tail(&self) -> String {
        std::fs::read_to_string(self.dir.join("sway.log"))
            .unwrap_or_default()
            .lines()
            .rfind(|l| l.contains("[ERROR]"))
            .unwrap_or("")
            .to_string()
    }

    fn show_window(&mut self) -> Result<(), String> {
        let stream = std::os::unix::net::UnixStream::connect(&self.socket)
            .map_err(|e| format!("window: {e}"))?;
        let conn = Connection::from_socket(stream).map_err(|e| format!("window: {e}"))?;
        let (globals, mut queue) =
            registry_queue_init::<Window>(&conn).map_err(|e| format!("window: {e}"))?;
        let qh = queue.handle();
        let bind_err = |what: &str| format!("window: the compositor has no {what}");
        let compositor: wl_compositor::WlCompositor = globals
            .bind(&qh, 1..=4, ())
            .map_err(|_| bind_err("wl_compositor"))?;
        let shm: wl_shm::WlShm = globals
            .bind(&qh, 1..=1, ())
            .map_err(|_| bind_err("wl_shm"))?;
        let wm: xdg_wm_base::XdgWmBase = globals
            .bind(&qh, 1..=2, ())
            .map_err(|_| bind_err("xdg_wm_base"))?;
        let surface = compositor.create_surface(&qh, ());
        let xdg = wm.get_xdg_surface(&surface, &qh, ());
        let top = xdg.get_toplevel(&qh, ());
        top.set_app_id("untether-test".into());
        top.set_title("untether test window".into());
        surface.commit();
        let buffer = make_buffer(&shm, &qh, None).map_err(|e| format!("window buffer: {e}"))?;
        self.painter = Some(Painter {
            conn: conn.clone(),
            surface: surface.clone(),
            shm: shm.clone(),
            qh: qh.clone(),
        });
        let mut w = Window {
            surface,
            buffer,
            configured: false,
        };
        let t = Instant::now();
        while !w.configured {
            queue
                .blocking_dispatch(&mut w)
                .map_err(|e| format!("window: {e}"))?;
            if t.elapsed() > Duration::from_secs(5) {
                return Err("window: never configured".into());
            }
        }
        let stop = self.stop_window.clone();
        // Keep answering the compositor (pings) until the test ends.
        self.window = Some(std::thread::spawn(move || {
            let _keep = (xdg, top, wm);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if queue.blocking_dispatch(&mut w).is_err() {
                    break;
                }
            }
        }));
        Ok(())
    }
}

impl Sway {
    /// Repaints the whole window in one colour (R, G, B) and commits it; returns when the
    /// commit has left for the compositor (the time to measure from).
    pub fn paint(&self, rgb: [u8; 3]) -> Result<(), String> {
        let p = self.painter.as_ref().ok_or("no window")?;
        let buffer =
            make_buffer(&p.shm, &p.qh, Some(rgb)).map_err(|e| format!("window buffer: {e}"))?;
        p.surface.attach(Some(&buffer), 0, 0);
        p.surface
            .damage_buffer(0, 0, WINDOW.2 as i32, WINDOW.3 as i32);
        p.surface.commit();
        p.conn.flush().map_err(|e| format!("window: {e}"))?;
        // The compositor keeps the attached buffer's contents once committed (shm).
        buffer.destroy();
        Ok(())
    }
}

impl Drop for Sway {
    fn drop(&mut self) {
        self.stop_window
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(w) = self.window.take() {
            let _ = w.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A wl_shm buffer of the window's size with its four quadrants, or all in one colour
/// (XRGB8888: B, G, R, X).
fn make_buffer(
    shm: &wl_shm::WlShm,
    qh: &QueueHandle<Window>,
    solid: Option<[u8; 3]>,
) -> std::io::Result<wl_buffer::WlBuffer> {
    let (_, _, w, h) = WINDOW;
    let stride = w as usize * 4;
    let mut pixels = vec![0u8; stride * h as usize];
    for y in 0..h as usize {
        for x in 0..w as usize {
            let [r, g, b] =
                solid.unwrap_or_else(|| expected(WINDOW.0 + x as i32, WINDOW.1 + y as i32));
            pixels[y * stride + x * 4..y * stride + x * 4 + 4].copy_from_slice(&[b, g, r, 0xFF]);
        }
    }
    let mut file = tempfile_in_memory()?;
    file.write_all(&pixels)?;
    let pool = shm.create_pool(file.as_fd(), pixels.len() as i32, qh, ());
    let buffer = pool.create_buffer(
        0,
        w as i32,
        h as i32,
        stride as i32,
        wl_shm::Format::Xrgb8888,
        qh,
        (),
    );
    pool.destroy();
    Ok(buffer)
}

fn tempfile_in_memory() -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create returns a new fd we own (checked).
    let fd = unsafe { libc::memfd_create(c"untether-test-window".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, owned descriptor.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

struct Window {
    surface: wl_surface::WlSurface,
    buffer: wl_buffer::WlBuffer,
    configured: bool,
}

impl Dispatch<xdg_surface::XdgSurface, ()> for Window {
    fn event(
        w: &mut Self,
        xdg: &xdg_surface::XdgSurface,
        event: xdg_surface::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let xdg_surface::Event::Configure { serial } = event {
            xdg.ack_configure(serial);
            w.surface.attach(Some(&w.buffer), 0, 0);
            w.surface
                .damage_buffer(0, 0, WINDOW.2 as i32, WINDOW.3 as i32);
            w.surface.commit();
            w.configured = true;
        }
    }
}

impl Dispatch<xdg_wm_base::XdgWmBase, ()> for Window {
    fn event(
        _: &mut Self,
        wm: &xdg_wm_base::XdgWmBase,
        event: xdg_wm_base::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let xdg_wm_base::Event::Ping { serial } = event {
            wm.pong(serial);
        }
    }
}

impl Dispatch<wl_registry::WlRegistry, GlobalListContents> for Window {
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

wayland_client::delegate_noop!(Window: wl_compositor::WlCompositor);
wayland_client::delegate_noop!(Window: ignore wl_surface::WlSurface);
wayland_client::delegate_noop!(Window: ignore wl_shm::WlShm);
wayland_client::delegate_noop!(Window: wl_shm_pool::WlShmPool);
wayland_client::delegate_noop!(Window: ignore wl_buffer::WlBuffer);
wayland_client::delegate_noop!(Window: ignore xdg_toplevel::XdgToplevel);
