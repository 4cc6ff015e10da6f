//! The aarch64 client (`make arm64`: target/aarch64-unknown-linux-gnu/release/untether) run
//! under qemu-user as a headless client of this machine's x86_64 host, the way a Raspberry Pi
//! joins a PC: paired with a one-time PIN, 360p for a few seconds; its frames must decode into
//! the pictures the host sent (the pixel stamps read back). 30 fps rather than 60: this checks
//! that the frames decode, not how fast an emulated CPU decodes them on a box shared with the
//! rest of the suite (the 60 fps figure is in docs/BENCHMARKS.md, from scripts/run-arm64-qemu.sh).
//!
//! `make test` builds the aarch64 binary first and sets `UNTETHER_REQUIRE_ARM64`, so there a
//! missing binary or qemu fails the test; a plain `cargo test` without them skips it, saying so.

use std::io::{BufRead, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const TARGET: &str = "aarch64-unknown-linux-gnu";
/// How long the aarch64 client streams, in seconds.
const CLIENT_SECONDS: u64 = 4;
const FPS: &str = "30";

/// The aarch64 binary: `UNTETHER_ARM64_BIN`, or `make arm64`'s output beside this build's
/// target directory (`<target>/release/untether` → `<target>/aarch64-…/release/untether`).
fn arm64_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("UNTETHER_ARM64_BIN") {
        return PathBuf::from(path);
    }
    let native = Path::new(env!("CARGO_BIN_EXE_untether"));
    let target_dir = native
        .parent()
        .and_then(Path::parent)
        .expect("the binary sits in <target>/<profile>/");
    target_dir.join(TARGET).join("release").join("untether")
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// One line on stderr, past the test harness's capture, so `make test`'s log shows it.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-arm64-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The host, killed if the test ends early.
struct HostProcess(Child);

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn count(report: &serde_json::Value, key: &str) -> u64 {
    report["frames"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("frames.{key} in {report}"))
}

/// Runs the aarch64 binary under qemu-aarch64 with the arm64 loader and libraries of Debian's
/// multiarch (`-L /`), and returns its exit status and output.
fn run_arm64_client(
    qemu: &Path,
    binary: &Path,
    env: &[(&str, &str)],
    args: impl FnOnce(&mut Command),
) -> (ExitStatus, String) {
    let mut command = Command::new(qemu);
    command
        .args(["-L", "/"])
        .arg(binary)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    args(&mut command);
    let started = Instant::now();
    let mut child = command.spawn().expect("qemu-aarch64 starts");
    // A backstop against a hung emulator; the client ends itself after its --duration.
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(CLIENT_SECONDS + 90) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[test]
fn the_aarch64_client_decodes_the_x86_hosts_stream_under_qemu() {
    let client_bin = arm64_binary();
    let qemu = on_path("qemu-aarch64");
    let missing = if !client_bin.is_file() {
        Some(format!("no aarch64 binary at {}", client_bin.display()))
    } else if qemu.is_none() {
        Some("no qemu-aarch64 on PATH (package qemu-user)".to_string())
    } else {
        None
    };
    if let Some(why) = missing {
        if std::env::var_os("UNTETHER_REQUIRE_ARM64").is_some() {
            panic!("{why}; UNTETHER_REQUIRE_ARM64 is set (scripts/test.sh runs make arm64 first)");
        }
        say(&format!(
            "skipped: {why} (`make arm64` builds it; make test does)"
        ));
        return;
    }
    let qemu = qemu.unwrap();

    let dir = tmp("run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let client_report = dir.join("client.json");
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");

    // The x86_64 host of this build. --duration is only a backstop: it is stopped with Ctrl-C
    // (SIGINT) once the client is done.
    let mut host = HostProcess(
        Command::new(env!("CARGO_BIN_EXE_untether"))
            .env("RUST_LOG", "warn")
            .args(["host", "--access", "pin", "--bind", &addr])
            .args(["--resolution", "360p", "--fps", FPS, "--duration", "120"])
            .arg("--state-dir")
            .arg(dir.join("host-state"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the host starts"),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = host.0.stderr.take().unwrap();
    let host_log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Not a terminal: the host says where the PIN is kept, not the PIN.
    let pin = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the host says a pairing PIN is active");
        if line.contains("a pairing PIN is active") {
            let text = std::fs::read_to_string(dir.join("host-state").join("pairing_pin.json"))
                .expect("the PIN file");
            let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            break v["pin"].as_str().expect("a pin").to_string();
        }
    };

    // The aarch64 client, emulated, paired with the PIN: headless, it decodes and measures.
    let client_state = dir.join("client-state");
    let (status, client_text) = run_arm64_client(&qemu, &client_bin, &[], |c| {
        c.args([
            "client",
            &addr,
            "--pin",
            &pin,
            "--headless",
            "--name",
            "arm64",
        ])
        .args(["--duration", &CLIENT_SECONDS.to_string()])
        .arg("--state-dir")
        .arg(&client_state)
        .arg("--report")
        .arg(&client_report);
    });
    // The Raspberry Pi's console command (docs/RASPBERRY-PI.md: a window through KMS/DRM, no
    // desktop) where there is no DRM device: one clear line, not a hang or a panic. Skipped
    // where a DRM device exists: SDL would take over that machine's screen.
    let has_drm = std::fs::read_dir("/dev/dri")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("card"))
        })
        .unwrap_or(false);
    let kmsdrm = (!has_drm).then(|| {
        let env = [("SDL_VIDEODRIVER", "kmsdrm"), ("DISPLAY", "kms")];
        run_arm64_client(&qemu, &client_bin, &env, |c| {
            c.args(["client", &addr, "--duration", "2", "--state-dir"])
                .arg(&client_state);
        })
    });
    // SAFETY: kill takes no pointers; the process is the host this test started.
    assert_eq!(unsafe { libc::kill(host.0.id() as i32, libc::SIGINT) }, 0);
    let host_status = host.0.wait().unwrap();
    let host_text = host_log.join().unwrap();
    assert!(
        status.success(),
        "the aarch64 client failed: {client_text}\nhost: {host_text}"
    );
    match kmsdrm {
        Some((status, text)) => {
            assert!(!status.success(), "kmsdrm without a DRM device: {text}");
            let last = text.lines().last().unwrap_or("");
            assert!(
                last.contains("SDL video") && last.contains("kmsdrm not available"),
                "the last line names the display driver: {text}"
            );
        }
        None => say("skipped the kmsdrm failure check: this machine has a DRM device"),
    }
    assert!(host_status.success(), "the host failed: {host_text}");
    assert!(host_text.contains("paired with"), "{host_text}");

    let c = json(&client_report);
    assert_eq!(c["config"]["width"], 640, "{c}");
    assert_eq!(c["config"]["height"], 360, "{c}");
    // `sent`: the host's count for this client's session, from its frame timings.
    let (sent, complete) = (count(&c, "sent"), count(&c, "complete"));
    let (decoded, shown) = (count(&c, "decoded"), count(&c, "shown"));
    let (corrupted, unreadable) = (count(&c, "corrupted"), count(&c, "stamp_unreadable"));
    let decode_p50 = c["latency_ms"]["stages"]["decode"]["p50"].as_f64();
    say(&format!(
        "arm64 client under qemu-aarch64, 360p{FPS}, {CLIENT_SECONDS} s: {decoded} frames decoded / \
         {sent} sent (complete {complete}, shown {shown}, corrupted {corrupted}, decode p50 {} ms)",
        decode_p50.map_or("-".to_string(), |v| format!("{v:.2}"))
    ));
    assert!(decoded > 0, "no frame decoded: {c}");
    // Loopback loses nothing and every complete frame has its references: the aarch64 decoder
    // (FFmpeg's h264 with its NEON code, emulated) rejects none of them ...
    assert_eq!(corrupted, 0, "the decoder rejected frames: {c}");
    // ... and what it decodes is the picture the host sent: the stamp in the pixels reads back
    // (its CRC fails on a wrongly decoded picture).
    assert!(
        unreadable * 100 <= decoded,
        "{unreadable} of {decoded} decoded pictures have no readable stamp: {c}"
    );
    assert!(
        c["latency_ms"]["glass_to_glass_pixels"]["count"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{c}"
    );
    // Frames received are frames shown: at most one in ten replaced in the decoder→presenter slot
    // before the presenter took it (an emulated CPU on a loaded box can fall behind for a few
    // frames; the demo's bar, native, is 95 %).
    assert!(
        shown * 10 >= complete * 9,
        "{shown} shown of {complete} received: {c}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
