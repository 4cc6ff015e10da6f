//! Chromium driven as a user would drive it, through the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands on the browser's fd 3, answers on its fd 4, each a JSON
//! message ended by a NUL byte): what the page cannot do to itself, such as the reload a user
//! asks for (F5).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;

use super::{scratch_dir, Page, FLAGS};

/// The DevTools connection of one browser, attached to its page.
pub struct Devtools {
    to: File,
    from: BufReader<File>,
    next_id: u64,
    session: Option<String>,
}

fn pipe() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is two ints, as pipe2 expects.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// Opens `url` in a headless Chromium with a DevTools pipe, like [`Page::open`].
pub fn open(bin: &Path, url: &str) -> std::io::Result<(Page, Devtools)> {
    let (cmd_read, cmd_write) = pipe()?;
    let (answer_read, answer_write) = pipe()?;
    let profile = scratch_dir("chromium-profile");
    let mut command = Command::new(bin);
    command
        .args(FLAGS)
        .arg("--remote-debugging-pipe")
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: dup2 is async-signal-safe; the new descriptors 3 and 4 do not close on exec.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(cmd_read, 3) < 0 || libc::dup2(answer_write, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    // SAFETY: each descriptor came from pipe2 above and is owned once, here.
    let (to, from) = unsafe {
        libc::close(cmd_read);
        libc::close(answer_write);
        (File::from_raw_fd(cmd_write), File::from_raw_fd(answer_read))
    };
    let mut child = spawned?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let page = Page {
        child,
        lines: rx,
        seen: Vec::new(),
        profile,
    };
    let mut devtools = Devtools {
        to,
        from: BufReader::new(from),
        next_id: 0,
        session: None,
    };
    devtools.attach()?;
    Ok((page, devtools))
}

impl Devtools {
    /// Sends `method` with `params` (to the attached page, once attached) and returns its
    /// result; events that come first are skipped.
    pub fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> std::io::Result<serde_json::Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = s.clone().into();
        }
        let mut bytes = serde_json::to_vec(&msg)?;
        bytes.push(0);
        self.to.write_all(&bytes)?;
        loop {
            let mut buf = Vec::new();
            if self.from.read_until(0, &mut buf)? == 0 {
                return Err(std::io::Error::other(
                    "the browser closed its DevTools pipe",
                ));
            }
            buf.pop();
            let v: serde_json::Value = serde_json::from_slice(&buf)?;
            if v["id"].as_u64() == Some(id) {
                if !v["error"].is_null() {
                    return Err(std::io::Error::other(format!("{method}: {}", v["error"])));
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Attaches to the browser's one page.
    fn attach(&mut self) -> std::io::Result<()> {
        let targets = self.call("Target.getTargets", serde_json::json!({}))?;
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["targetId"].as_str())
            .ok_or_else(|| std::io::Error::other(format!("no page among {targets}")))?
            .to_string();
        let attached = self.call(
            "Target.attachToTarget",
            serde_json::json!({ "targetId": page, "flatten": true }),
        )?;
        self.session = attached["sessionId"].as_str().map(str::to_string);
        Ok(())
    }

    /// Reloads the page, as the user's F5 does.
    pub fn reload(&mut self) -> std::io::Result<()> {
        self.call("Page.reload", serde_json::json!({})).map(|_| ())
    }

    /// The address bar's URL now.
    pub fn url(&mut self) -> std::io::Result<String> {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({ "expression": "window.location.href", "returnByValue": true }),
        )?;
        Ok(r["result"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }
}
