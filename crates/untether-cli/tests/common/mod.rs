//! Helpers of the CLI tests: an `untether` process whose stderr is read as it comes, so a test
//! waits for what the process says (connected, listening, approved) rather than for a while.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// A running process whose stderr lines arrive, with when they arrived, on a channel.
pub struct Proc {
    child: Child,
    lines: Receiver<(Instant, String)>,
    seen: Vec<String>,
}

impl Proc {
    pub fn spawn(mut c: Command) -> Proc {
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("untether starts");
        let err = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `pat`; its arrival time and text.
    pub fn wait_for(&mut self, pat: &str, within: Duration) -> (Instant, String) {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((t, line)) => {
                    self.seen.push(line.clone());
                    if line.contains(pat) {
                        return (t, line);
                    }
                }
                Err(_) => panic!(
                    "no line with {pat:?} within {within:?}; it said:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Ctrl-C, then its output (stdout) and the rest of its stderr.
    pub fn interrupt(self) -> (bool, String, String) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.finish()
    }

    /// Waits for it to end by itself: whether it succeeded, its output (stdout) and all of its
    /// stderr.
    pub fn finish(mut self) -> (bool, String, String) {
        let mut stdout = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut stdout);
        }
        let ok = self.child.wait().is_ok_and(|s| s.success());
        // The rest of stderr (its reader ends at the pipe's end).
        while let Ok((_, l)) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(l);
        }
        (ok, stdout, std::mem::take(&mut self.seen).join("\n"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
