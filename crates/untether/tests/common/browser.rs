//! A real headless Chromium (Debian's `chromium`) opening a page and reporting what the page
//! prints on its console (`UNTETHER KIND JSON` lines, with `--enable-logging=stderr`). Each
//! browser runs in its own process group with its own profile directory, and is killed (the
//! group, which only it is in) when dropped.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use untether_media::stamp::{self, Stamp};
use untether_media::BgraFrame;

/// The host's page, as the binary embeds it.
pub const PAGE: &str = include_str!("../../src/host/webrtc/page.html");

/// A fresh directory under the system's temporary one, unique to this process and name.
pub fn scratch_dir(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let d = std::env::temp_dir().join(format!("untether-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const FLAGS: [&str; 9] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
    "--enable-logging=stderr",
];

/// The Chromium binary if it starts here; otherwise None, after saying why in one line.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("chromium"))
            .find(|c| c.is_file())
    });
    let Some(bin) = found else {
        println!("skipped: Chromium cannot start: no `chromium` in PATH (scripts/setup.sh browser installs it)");
        return None;
    };
    let dir = scratch_dir("chromium-check");
    let out = Command::new(&bin)
        .args(&FLAGS[..7])
        .arg(format!("--user-data-dir={}", dir.display()))
        .args(["--dump-dom", "about:blank"])
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            println!("skipped: Chromium cannot start: {} {last}", o.status);
            None
        }
        Err(e) => {
            println!("skipped: Chromium cannot start: {e}");
            None
        }
    }
}

/// One Chromium showing one page.
pub struct Page {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// The lines of `seen` that [`Page::wait_console`] has looked at.
    waited: usize,
    profile: PathBuf,
}

impl Page {
    pub fn open(bin: &Path, url: &str) -> std::io::Result<Page> {
        Self::open_with(bin, url, &[])
    }

    pub fn open_with(bin: &Path, url: &str, extra: &[&str]) -> std::io::Result<Page> {
        Self::spawn(bin, url, extra, |_| {})
    }

    /// Starts `bin` with [`FLAGS`], `extra`, a profile of its own and `url`; `prepare` adds
    /// what else the command needs (the DevTools pipe) before it starts.
    pub fn spawn(
        bin: &Path,
        url: &str,
        extra: &[&str],
        prepare: impl FnOnce(&mut Command),
    ) -> std::io::Result<Page> {
        let profile = scratch_dir("chromium-profile");
        let mut command = Command::new(bin);
        command
            .args(FLAGS)
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        prepare(&mut command);
        let mut child = command.spawn()?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Page {
            child,
            lines: rx,
            seen: Vec::new(),
            waited: 0,
            profile,
        })
    }

    fn pump(&mut self, until: Instant) -> bool {
        let wait = until.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok(l) => {
                self.seen.push(l);
                true
            }
            Err(_) => false,
        }
    }

    /// The JSON of the page's `UNTETHER KIND …` console lines so far.
    pub fn lines(&mut self, kind: &str) -> Vec<String> {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
        self.seen.iter().filter_map(|l| console(l, kind)).collect()
    }

    /// Waits for the first `UNTETHER KIND` line and returns its JSON.
    pub fn wait_for(&mut self, kind: &str, timeout: Duration) -> Option<String> {
        let end = Instant::now() + timeout;
        let mut checked = 0;
        loop {
            for l in &self.seen[checked..] {
                if let Some(j) = console(l, kind) {
                    return Some(j);
                }
            }
            checked = self.seen.len();
            if Instant::now() >= end {
                return None;
            }
            self.pump(end);
        }
    }

    /// Waits for the next `UNTETHER KIND` line whose JSON satisfies `want` and returns that
    /// JSON; lines looked at by an earlier call are not looked at again.
    pub fn wait_console(
        &mut self,
        kind: &str,
        timeout: Duration,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let end = Instant::now() + timeout;
        loop {
            while self.waited < self.seen.len() {
                let line = &self.seen[self.waited];
                self.waited += 1;
                let json = console(line, kind)
                    .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok());
                if let Some(v) = json.filter(|v| want(v)) {
                    return Some(v);
                }
            }
            if Instant::now() >= end {
                return None;
            }
            self.pump(end);
        }
    }

    /// Keeps reading the page's output for `d`.
    pub fn settle(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.pump(end);
        }
    }

    /// The page's last console lines and errors (for a failure's message).
    pub fn tail(&mut self) -> String {
        let _ = self.lines("");
        let useful: Vec<&String> = self
            .seen
            .iter()
            .filter(|l| !l.contains("dbus") && !l.contains("DBus"))
            .collect();
        useful[useful.len().saturating_sub(25)..]
            .iter()
            .map(|l| l.chars().take(400).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // The browser and its helpers are alone in their process group.
        let pgid = self.child.id() as i32;
        // SAFETY: kill takes no pointers; the group is the browser's own.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `"UNTETHER KIND JSON"` out of a console line of Chromium's log.
fn console(line: &str, kind: &str) -> Option<String> {
    if !line.contains(":CONSOLE") {
        return None;
    }
    let start = line.find("\"UNTETHER ")? + "\"UNTETHER ".len();
    let rest = &line[start..];
    let end = rest.rfind("\", source:").unwrap_or(rest.len());
    let msg = &rest[..end];
    let (k, json) = msg.split_once(' ')?;
    (kind.is_empty() || k == kind).then(|| json.to_string())
}

/// A 24-bit BMP of a BGRA frame (exact pixels, no compression: what the page's canvas reads).
fn write_bmp(path: &Path, f: &BgraFrame) {
    let row = (f.width as usize * 3).div_ceil(4) * 4;
    let size = 54 + row * f.height as usize;
    let mut b = Vec::with_capacity(size);
    b.extend_from_slice(b"BM");
    b.extend_from_slice(&(size as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&54u32.to_le_bytes());
    b.extend_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(&(f.width as i32).to_le_bytes());
    b.extend_from_slice(&(f.height as i32).to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&((row * f.height as usize) as u32).to_le_bytes());
    b.extend_from_slice(&2835u32.to_le_bytes());
    b.extend_from_slice(&2835u32.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    for y in (0..f.height).rev() {
        let r = f.row(y);
        let start = b.len();
        for px in r[..f.width as usize * 4].chunks_exact(4) {
            b.extend_from_slice(&px[..3]);
        }
        b.resize(start + row, 0);
    }
    std::fs::write(path, b).unwrap();
}

/// Luma as the converter makes it (BT.601, limited range).
fn luma(f: &BgraFrame) -> Vec<u8> {
    let mut y = Vec::with_capacity((f.width * f.height) as usize);
    for yy in 0..f.height {
        for px in f.row(yy)[..f.width as usize * 4].chunks_exact(4) {
            let v = 16.0
                + (65.481 * px[2] as f64 + 128.553 * px[1] as f64 + 24.966 * px[0] as f64) / 255.0;
            y.push(v.round() as u8);
        }
    }
    y
}

/// A stamp's frame number, capture time and input count.
pub type StampFields = (u32, u64, u32);

/// Stamped pictures (clean, noisy, one with a flipped block) as BMP files in `dir`, each with
/// what our reader (`untether_media::stamp::read_plane`) reads from it.
pub fn stamp_pictures(dir: &Path) -> Vec<(String, Option<StampFields>)> {
    let mut out = Vec::new();
    let cases: [(u32, u32, u32, &str); 5] = [
        (1280, 720, 0xDEAD_BEEF, "clean"),
        (640, 360, 7, "clean"),
        (1920, 1080, 123_456, "clean"),
        (1280, 720, 99, "noisy"),
        (1280, 720, 5, "flipped"),
    ];
    for (i, (w, h, n, kind)) in cases.into_iter().enumerate() {
        let mut f = BgraFrame::new(w, h).unwrap();
        for y in 0..h {
            for (x, px) in f.row_mut(y).chunks_exact_mut(4).enumerate() {
                let v = ((x as u32 * 7 + y * 3) % 200) as u8 + 20;
                px.copy_from_slice(&[v, v / 2, 255 - v, 255]);
            }
        }
        let s = Stamp {
            frame_number: n,
            capture_us: 0x12_3456_789A + i as u64,
            input_seq: 40 + i as u32,
        };
        stamp::write_bgra(&mut f, &s);
        if kind == "noisy" {
            // Coding noise: ±40 on every pixel.
            for y in 0..h {
                for (x, px) in f.row_mut(y).chunks_exact_mut(4).enumerate() {
                    let d = ((x * 31 + y as usize * 17) % 81) as i32 - 40;
                    for c in px.iter_mut().take(3) {
                        *c = (*c as i32 + d).clamp(0, 255) as u8;
                    }
                }
            }
        }
        if kind == "flipped" {
            let b = 16;
            for y in b..2 * b {
                let row = f.row_mut(y);
                for x in 4 * b..5 * b {
                    for c in 0..3 {
                        row[x as usize * 4 + c] = 255 - row[x as usize * 4 + c];
                    }
                }
            }
        }
        let ours = stamp::read_plane(&luma(&f), w as usize, w, h)
            .map(|s| (s.frame_number, s.capture_us, s.input_seq));
        if kind == "flipped" {
            assert_eq!(ours, None, "a flipped block reads as nothing");
        } else {
            assert_eq!(ours, Some((s.frame_number, s.capture_us, s.input_seq)));
        }
        let file = format!("stamp{i}.bmp");
        write_bmp(&dir.join(&file), &f);
        out.push((file, ours));
    }
    out
}

/// A page driven through the DevTools protocol (a reload, as a user asks for one).
pub mod devtools;
