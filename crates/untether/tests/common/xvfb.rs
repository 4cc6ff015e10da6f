//! An Xvfb of the test's own. The server chooses a free display number itself (`-displayfd`) and
//! writes it on a pipe, so tests started at the same moment (one process's threads, or several
//! test executables) never race for a number — picking one by hand and checking its lock file
//! let two tests choose the same number, and one of them failed with "Xvfb is needed".

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use untether_media::x11::{PointerMode, XtestReplay};

/// A running Xvfb; killed (and reaped) when dropped.
pub struct Xvfb {
    child: Child,
    pub display: String,
}

/// The descriptor number the server is told to write its display number on.
const DISPLAY_FD: i32 = 3;

impl Xvfb {
    /// Starts `Xvfb` with one screen of `size` ("WxHxD"); `Err` says why it could not.
    pub fn start(size: &str) -> Result<Xvfb, String> {
        let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        let writer: OwnedFd = writer.into();
        let raw = writer.as_raw_fd();
        let mut cmd = Command::new("Xvfb");
        cmd.args([
            "-displayfd",
            &DISPLAY_FD.to_string(),
            "-screen",
            "0",
            size,
            "-nolisten",
            "tcp",
            // An X server resets when its last client leaves, and a connection made during the
            // reset is refused (the readiness probe below is such a client).
            "-noreset",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: dup2 is async-signal-safe; between fork and exec it only places the pipe's
        // write end at DISPLAY_FD (dup2 clears close-on-exec on the new descriptor).
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, DISPLAY_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("Xvfb does not run ({e}); scripts/setup.sh installs it"))?;
        drop(writer);
        let mut x = Xvfb {
            child,
            display: String::new(),
        };
        // The number arrives once the server listens; EOF means it exited.
        let mut line = String::new();
        BufReader::new(reader)
            .read_line(&mut line)
            .map_err(|e| format!("reading Xvfb's display number: {e}"))?;
        let n: u32 = line.trim().parse().map_err(|_| {
            let status = x.child.try_wait().ok().flatten();
            format!("Xvfb gave no display number (it wrote {line:?}; exit {status:?})")
        })?;
        x.display = format!(":{n}");
        // Listening is not yet serving every extension: wait until XTEST answers.
        let t = Instant::now();
        loop {
            match XtestReplay::open(Some(&x.display), (0, 0), PointerMode::Absolute) {
                Ok(_) => return Ok(x),
                Err(e) if t.elapsed() > Duration::from_secs(30) => {
                    return Err(format!("Xvfb {} never answered: {e}", x.display))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
