//! `untether run -- APP`: an unmodified Vulkan (vkcube on lavapipe) or OpenGL (glxgears on
//! llvmpipe) application under Xvfb, its presented frames copied by the capture hook into the
//! frame ring, encoded by the host and received by a headless client.
//!
//! Each test checks: the client shows the application's frames (the picture is not uniform),
//! at least half of those due (its presents up to the stream's rate, over the time it
//! watched: a floor for a loaded shared machine; the ignored bench asserts the 90 %);
//! every present is accounted for by the hook's counters (copied, dropped, skipped); and the
//! application was not held to the stream's pace (it presented more often than the stream took
//! frames: a hook that waited for the host would make presents ≈ copies). The frame-rate cost
//! of capture is measured by the ignored bench below (docs/BENCHMARKS.md).

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FPS: u32 = 30;
/// Frames shown / frames due (the application's presents up to the stream's rate) that a
/// `make test` run must reach on a loaded machine; the bench asserts the 90 %.
const MIN_SHOWN: f64 = 0.5;
const BENCH_MIN_SHOWN: f64 = 0.9;

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c.env(
        "UNTETHER_STATE_DIR",
        std::env::temp_dir().join(format!("untether-cap-state-{}", std::process::id())),
    );
    c
}

/// The display, the hook library and the application, or the one line saying what is missing.
fn ready(app: &str) -> bool {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (run under xvfb-run, as make test does)");
        return false;
    }
    let hook =
        Path::new(env!("CARGO_BIN_EXE_untether")).with_file_name("libuntether_capture_hook.so");
    assert!(
        hook.is_file(),
        "{} is missing: cargo build --release -p untether-capture-hook (scripts/test.sh does)",
        hook.display()
    );
    if Command::new("sh")
        .args(["-c", &format!("command -v {app}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        panic!("{app} is not installed (scripts/setup.sh installs vulkan-tools and mesa-utils)");
    }
    true
}

fn wait(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} did not end within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

struct Run {
    host: serde_json::Value,
    client: serde_json::Value,
    frame: PathBuf,
}

/// `untether run` of `app` for `host_s` seconds, a headless client watching for `client_s`.
fn run(app: &[&str], host_s: u32, client_s: u32, tag: &str) -> Run {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("untether-cap-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (host_json, client_json, frame) = (
        dir.join("host.json"),
        dir.join("client.json"),
        dir.join("frame.ppm"),
    );
    let host = untether()
        .args(["run", "--access", "open", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--fps", &FPS.to_string(), "--duration", &host_s.to_string()])
        .arg("--report")
        .arg(&host_json)
        .arg("--")
        .args(app)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Start the client once the host listens (its stderr says so), not after a guess.
    let mut host = host;
    let (listening_tx, listening) = std::sync::mpsc::channel();
    let stderr = host.stderr.take().unwrap();
    let host_log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if line.contains("listening on udp") {
                let _ = listening_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    if listening.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = host.kill();
        let _ = host.wait();
        panic!("untether run never listened: {}", host_log.join().unwrap());
    }
    let client = untether()
        .args(["client", &format!("127.0.0.1:{port}"), "--headless"])
        .args(["--duration", &client_s.to_string()])
        .arg("--report")
        .arg(&client_json)
        .arg("--save-frame")
        .arg(&frame)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = wait(
        client,
        Duration::from_secs(client_s as u64 + 20),
        "the client",
    );
    let h = wait(
        host,
        Duration::from_secs(host_s as u64 + 20),
        "untether run",
    );
    let stderr = host_log.join().unwrap();
    assert!(h.status.success(), "untether run failed: {stderr}");
    assert!(
        c.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&c.stderr)
    );
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    Run {
        host: read(&host_json),
        client: read(&client_json),
        frame,
    }
}

/// How many distinct grey levels the saved PPM picture has (a uniform picture has 1).
fn distinct_levels(ppm: &Path) -> usize {
    let bytes = std::fs::read(ppm).unwrap();
    // P6\nW H\n255\n then RGB bytes: skip three header lines.
    let mut lines = 0;
    let start = bytes
        .iter()
        .position(|&b| {
            lines += (b == b'\n') as u32;
            lines == 3
        })
        .unwrap()
        + 1;
    let mut seen = [false; 256];
    for px in bytes[start..].chunks_exact(3) {
        seen[((px[0] as u32 + px[1] as u32 + px[2] as u32) / 3) as usize] = true;
    }
    seen.iter().filter(|&&s| s).count()
}

fn check(r: &Run, app: &str, min_shown: f64) {
    let a = &r.host["app"];
    let n = |k: &str| a[k].as_u64().unwrap_or_else(|| panic!("app.{k} in {a}"));
    let presents = n("presents");
    let accounted =
        n("published") + n("dropped_busy") + n("skipped") + n("too_big") + n("unsupported");
    assert!(
        presents >= accounted && presents - accounted <= 1,
        "{app}: every present is copied, dropped or skipped (one may be in flight): {a}"
    );
    assert_eq!(n("unsupported") + n("too_big"), 0, "{app}: {a}");
    let rate = a["presents_per_s_watched"].as_f64().unwrap();
    let watched_s = a["watched_s"].as_f64().unwrap();
    assert!(watched_s > 1.0, "{app}: watched only {watched_s} s: {a}");
    // Not held to the stream's pace: the hook never waits for the host, so the application
    // presents more often than the stream takes frames (presents off the stream's grid are
    // skipped, not waited for). A hook that waited would make presents ≈ copies.
    assert!(
        n("skipped") > 0 && presents > n("published"),
        "{app}: presents {presents}, copied {}: {a}",
        n("published")
    );
    let f = &r.client["frames"];
    let shown = f["shown"].as_u64().unwrap();
    let expected = rate.min(FPS as f64) * watched_s;
    let ratio = shown as f64 / expected.max(1.0);
    // The 90 % is a throughput figure: on an idle box it holds (docs/BENCHMARKS.md,
    // and the bench below asserts it); under the build load of a shared 2-core machine the
    // encoder and decoder compete with the application, so this test asserts a floor only.
    eprintln!(
        "{app}: shown {shown} of {expected:.0} frames due ({:.0} %: {rate:.1} presents/s, {FPS} \
         fps stream, {watched_s:.2} s watched)",
        ratio * 100.0
    );
    assert!(
        ratio >= min_shown,
        "{app}: the client showed {shown} frames, < {:.0} % of {expected:.0}: {f}",
        min_shown * 100.0
    );
    let levels = distinct_levels(&r.frame);
    assert!(
        levels > 8,
        "{app}: the picture is nearly uniform ({levels} grey levels)"
    );
    let g = &r.client["latency_ms"]["glass_to_glass"];
    eprintln!(
        "{app}: present-to-client (present → shown) p50 {} ms, p95 {} ms over {} frames; {} \
         presents/s watched, {} unwatched; in the hook {:.3} ms mean, {:.3} ms max",
        g["p50"],
        g["p95"],
        g["count"],
        a["presents_per_s_watched"],
        a["presents_per_s_unwatched"],
        a["hook_ms_mean"].as_f64().unwrap_or(0.0),
        a["hook_ms_max"].as_f64().unwrap_or(0.0),
    );
}

#[test]
fn vkcube_through_the_vulkan_layer_reaches_a_client() {
    if !ready("vkcube") {
        return;
    }
    // --c bounds the frames; far more than 5 s of them (vkcube ends the run if it ends first).
    // A size the stream is configured at from the start (no encoder reopened at join).
    let r = run(
        &[
            "vkcube", "--c", "100000", "--width", "640", "--height", "360",
        ],
        5,
        3,
        "vk",
    );
    check(&r, "vkcube", MIN_SHOWN);
    assert!(r.host["app"]["exit_code"].is_null() || r.host["app"]["exit_code"] == 0);
}

#[test]
fn glxgears_through_the_gl_hook_reaches_a_client() {
    if !ready("glxgears") {
        return;
    }
    let r = run(&["glxgears", "-geometry", "640x360"], 5, 3, "gl");
    check(&r, "glxgears", MIN_SHOWN);
}

#[test]
fn run_without_the_hook_library_says_how_to_build_it() {
    let out = untether()
        .env(
            "UNTETHER_HOOK_LIBRARY",
            "/nonexistent/libuntether_capture_hook.so",
        )
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("cargo build --release -p untether-capture-hook"),
        "{e}"
    );
    let out = untether()
        .args(["run", "--source", "scene", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("do not apply"));
}

/// The application's frame rate with capture on (a client watching) and off (the hook only
/// counts), in one run of each application; figures in docs/BENCHMARKS.md.
#[test]
#[ignore = "bench: cargo test --release -p untether-cli --test app_capture -- --ignored --nocapture"]
fn bench_app_frame_rate_with_capture_on_and_off() {
    for (app, tag) in [
        (
            &[
                "vkcube", "--c", "1000000", "--width", "640", "--height", "360",
            ][..],
            "vk-bench",
        ),
        (&["glxgears", "-geometry", "640x360"][..], "gl-bench"),
    ] {
        if !ready(app[0]) {
            return;
        }
        // The client watches for 6 of the host's 12 s: the rest is capture off.
        let r = run(app, 12, 6, tag);
        check(&r, app[0], BENCH_MIN_SHOWN);
        let a = &r.host["app"];
        let on = a["presents_per_s_watched"].as_f64().unwrap();
        let off = a["presents_per_s_unwatched"].as_f64().unwrap();
        eprintln!(
            "BENCH {}: {on:.1} presents/s with capture on, {off:.1} off: {:+.1} %",
            app[0],
            (on / off - 1.0) * 100.0
        );
    }
}

#[test]
fn kms_capture_on_a_machine_without_dri_fails_saying_what_it_needs() {
    if Path::new("/dev/dri").exists() {
        eprintln!("skipped: this machine has /dev/dri (KMS capture is untested on real hardware)");
        return;
    }
    let out = untether()
        .args([
            "host",
            "--capture",
            "kms",
            "--access",
            "open",
            "--bind",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no DRM device (/dev/dri has no card*)"), "{e}");
    let out = untether()
        .args(["host", "--capture", "kms:", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected kms or kms:DEVICE"));
}
