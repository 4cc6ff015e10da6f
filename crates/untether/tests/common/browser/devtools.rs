//! Chromium driven as a user would drive it, through the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands on the browser's fd 3, answers on its fd 4, each a JSON
//! message ended by a NUL byte): what the page cannot do to itself, such as the reload a user
//! asks for (F5), a real mouse click, or a screenshot of what it shows.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Page;

/// How long a command may wait for its answer.
const ANSWER: Duration = Duration::from_secs(10);

/// The DevTools connection of one browser, attached to its page.
pub struct Devtools {
    to: File,
    /// Every message of the browser (answers and events), read by a thread of its own.
    from: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is two ints, as pipe2 expects.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors came from pipe2 above and are owned once, here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Opens `url` in a headless Chromium with a DevTools pipe, like [`Page::open`].
pub fn open(bin: &Path, url: &str) -> std::io::Result<(Page, Devtools)> {
    open_with(bin, url, &[])
}

/// [`open`] with more Chromium flags (`--window-size=W,H` …).
pub fn open_with(bin: &Path, url: &str, extra: &[&str]) -> std::io::Result<(Page, Devtools)> {
    let (cmd_read, cmd_write) = pipe()?;
    let (answer_read, answer_write) = pipe()?;
    let (a, b) = (cmd_read.as_raw_fd(), answer_write.as_raw_fd());
    let mut flags = vec!["--remote-debugging-pipe"];
    flags.extend_from_slice(extra);
    let page = Page::spawn(bin, url, &flags, |command| {
        // SAFETY: dup and dup2 are async-signal-safe. The ends are first moved out of the
        // way (one may already be 3 or 4); the new 3 and 4 do not close on exec.
        unsafe {
            command.pre_exec(move || {
                let (a2, b2) = (libc::dup(a), libc::dup(b));
                if a2 < 0 || b2 < 0 || libc::dup2(a2, 3) < 0 || libc::dup2(b2, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    // The browser's ends, closed here whether it started or not.
    drop((cmd_read, answer_write));
    let page = page?;
    let (tx, from) = channel();
    let mut reader = BufReader::new(File::from(answer_read));
    std::thread::spawn(move || loop {
        let mut msg = Vec::new();
        match reader.read_until(0, &mut msg) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                msg.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&msg) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut devtools = Devtools {
        to: File::from(cmd_write),
        from,
        next_id: 0,
        session: None,
    };
    devtools.attach()?;
    Ok((page, devtools))
}

impl Devtools {
    /// Sends `method` with `params` (to the attached page, once attached) and returns its
    /// result; events that come first are skipped.
    pub fn call(&mut self, method: &str, params: Value) -> std::io::Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = s.clone().into();
        }
        let mut bytes = serde_json::to_vec(&msg)?;
        bytes.push(0);
        self.to.write_all(&bytes)?;
        let end = Instant::now() + ANSWER;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = match self.from.recv_timeout(left) {
                Ok(v) => v,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::other(format!(
                        "{method}: no answer within {ANSWER:?}"
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other(
                        "the browser closed its DevTools pipe",
                    ))
                }
            };
            if v["id"].as_u64() == Some(id) {
                if !v["error"].is_null() {
                    return Err(std::io::Error::other(format!("{method}: {}", v["error"])));
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Waits up to `timeout` for the browser's next message (an event of the loading page):
    /// what a poll of the page waits on between two looks.
    pub fn next_message(&mut self, timeout: Duration) {
        let _ = self.from.recv_timeout(timeout);
    }

    /// Attaches to the browser's one page, once the browser has made it (10 s at most).
    fn attach(&mut self) -> std::io::Result<()> {
        let end = Instant::now() + ANSWER;
        let page = loop {
            let targets = self.call("Target.getTargets", json!({}))?;
            let page = targets["targetInfos"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["type"] == "page"))
                .and_then(|t| t["targetId"].as_str())
                .map(str::to_string);
            match page {
                Some(p) => break p,
                None if Instant::now() < end => self.next_message(Duration::from_millis(50)),
                None => return Err(std::io::Error::other(format!("no page among {targets}"))),
            }
        };
        let attached = self.call(
            "Target.attachToTarget",
            json!({ "targetId": page, "flatten": true }),
        )?;
        self.session = attached["sessionId"].as_str().map(str::to_string);
        Ok(())
    }

    /// Reloads the page, as the user's F5 does.
    pub fn reload(&mut self) -> std::io::Result<()> {
        self.call("Page.reload", json!({})).map(|_| ())
    }

    /// Loads `url` in the page, as typing it in the address bar does.
    pub fn navigate(&mut self, url: &str) -> std::io::Result<()> {
        self.call("Page.navigate", json!({ "url": url }))
            .map(|_| ())
    }

    /// The value of a script expression in the page.
    pub fn eval(&mut self, expression: &str) -> std::io::Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        )?;
        Ok(r["result"]["value"].clone())
    }

    /// The address bar's URL now.
    pub fn url(&mut self) -> std::io::Result<String> {
        let v = self.eval("window.location.href")?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// Waits until the page's text satisfies `want` (it is read as the page loads) and returns
    /// it; an error with the last text read after `timeout`.
    pub fn wait_text(
        &mut self,
        timeout: Duration,
        want: impl Fn(&str) -> bool,
    ) -> std::io::Result<String> {
        let end = Instant::now() + timeout;
        loop {
            let t = self.eval("document.body ? document.body.innerText : ''")?;
            let t = t.as_str().unwrap_or("").to_string();
            if want(&t) {
                return Ok(t);
            }
            if Instant::now() >= end {
                return Err(std::io::Error::other(format!(
                    "the page never showed what was wanted: {t:?}"
                )));
            }
            self.next_message(Duration::from_millis(50));
        }
    }

    /// A PNG of what the page shows now (`Page.captureScreenshot`, the renderer's own
    /// screenshot, as `chromium --screenshot` takes it).
    pub fn screenshot(&mut self) -> std::io::Result<Vec<u8>> {
        use base64::Engine;
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }))?;
        let data = r["data"].as_str().unwrap_or_default();
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| std::io::Error::other(format!("the screenshot's data: {e}")))
    }

    /// A left click at (x, y) of the page, as a mouse makes it; returns when the button was
    /// let go (the click).
    pub fn click(&mut self, x: f64, y: f64) -> std::io::Result<Instant> {
        let mut released = Instant::now();
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            released = Instant::now();
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )?;
        }
        Ok(released)
    }
}
