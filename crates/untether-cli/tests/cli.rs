//! The `untether` binary as a user runs it: help, errors, host and client as two processes,
//! and the SDL window under Xvfb checked by a screenshot.

mod common;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Proc;

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    // Keys, allowlists and known hosts of this test run, not the user's.
    c.env(
        "UNTETHER_STATE_DIR",
        std::env::temp_dir().join(format!("untether-cli-state-{}", std::process::id())),
    );
    c
}

fn run(args: &[&str]) -> Output {
    untether().args(args).output().expect("untether runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn help_explains_every_command() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let t = text(&o);
    for cmd in ["host", "client", "demo", "pair"] {
        assert!(t.contains(cmd), "--help lacks {cmd}: {t}");
    }
    for cmd in ["host", "client", "demo"] {
        let o = run(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd} --help failed");
        let t = text(&o);
        assert!(
            t.contains("--report") && t.contains("--config"),
            "{cmd} --help: {t}"
        );
    }
    let t = text(&run(&["demo", "--help"]));
    for flag in [
        "--resolution",
        "--fps",
        "--bitrate",
        "--encoder",
        "--headless",
    ] {
        assert!(t.contains(flag), "demo --help lacks {flag}");
    }
    let t = text(&run(&["host", "--help"]));
    assert!(
        t.contains("--max-clients") && t.contains("--slow-viewer"),
        "{t}"
    );
    assert!(text(&run(&["client", "--help"])).contains("--no-decode"));
    let t = text(&run(&["pair", "--help"]));
    for word in ["grant", "revoke-grant", "control"] {
        assert!(t.contains(word), "pair --help lacks {word}: {t}");
    }
}

#[test]
fn a_wrong_flag_names_the_allowed_values() {
    let o = run(&["demo", "--encoder", "x265"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("libx264") && t.contains("libx264rgb"), "{t}");
    let o = run(&["demo", "--resolution", "huge"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("video.resolution"), "{}", text(&o));
    let o = run(&["demo", "--bitrate", "fast"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--bitrate"), "{}", text(&o));
    // Typed keys set by a flag: the flag (and the key) and the allowed values.
    let o = run(&["demo", "--transport", "tcp"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("--transport") && t.contains("udp, raw"), "{t}");
    let o = run(&["demo", "--presenter", "vulkan"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("--presenter") && t.contains("auto, gl, sdl"),
        "{t}"
    );
}

#[test]
fn a_bad_config_key_is_named() {
    let path = tmp("bad.toml");
    std::fs::write(&path, "[video]\nframerate = 60\n").unwrap();
    let o = run(&["demo", "--config", path.to_str().unwrap()]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("framerate") && t.contains("fps"), "{t}");
    // A typed key's bad value is refused as the file is read, naming the key and the values.
    let path = tmp("bad-scheduler.toml");
    std::fs::write(&path, "[network]\nscheduler = \"fastest\"\n").unwrap();
    let o = run(&["demo", "--config", path.to_str().unwrap()]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("network.scheduler") && t.contains("lowest-delay"),
        "{t}"
    );
}

/// Issue 15 item 8: a value past the width it ends in (`idle_timeout_ms` is a u32 in the
/// session parameters) was truncated and surfaced as "no answer from host"; it is refused at
/// once, naming the key and its range, by the host and the client alike.
#[test]
fn an_integer_past_its_width_names_the_key_and_the_range() {
    let path = tmp("wide.toml");
    std::fs::write(&path, "[network]\nidle_timeout_ms = 4294968296\n").unwrap();
    let config = path.to_str().unwrap();
    let want = "network.idle_timeout_ms: 4294968296 is out of range 100..=3600000";
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let t = Instant::now();
    let o = run(&["client", &addr, "--headless", "--config", config]);
    assert!(!o.status.success());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    let t = text(&o);
    assert!(t.contains(want) && !t.contains("no answer"), "{t}");
    let o = run(&[
        "host",
        "--bind",
        "127.0.0.1:0",
        "--duration",
        "1",
        "--config",
        config,
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains(want), "{}", text(&o));
    // Too wide for the type itself: refused while reading the file, in the same words.
    std::fs::write(&path, "[network]\nmax_datagram = 70000\n").unwrap();
    let o = run(&["demo", "--config", config]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("network.max_datagram: 70000 is out of range 256..=9000"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_client_pointed_at_no_host_says_so_within_3_seconds() {
    // Nobody listens on this port: the kernel answers "port unreachable".
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let o = run(&["client", &format!("127.0.0.1:{port}"), "--headless"]);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("nothing is listening"), "{}", text(&o));

    // Something receives but never answers: the connect timeout (3 s) fires.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let t = Instant::now();
    let o = run(&["client", &addr.to_string(), "--headless"]);
    let took = t.elapsed();
    assert!(took < Duration::from_millis(3600), "took {took:?}");
    assert!(!o.status.success());
    assert!(text(&o).contains("no answer from host"), "{}", text(&o));
    // The client did ask.
    silent
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 2048];
    assert!(silent.recv_from(&mut buf).is_ok());
}

#[test]
fn host_and_client_as_two_processes() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host_report = tmp("host.json");
    let client_report = tmp("client.json");
    let host = untether()
        .args([
            "host",
            "--access",
            "open",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--duration",
            "6",
            "--report",
        ])
        .arg(&host_report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host never bound udp port {port}"
    );
    let o = untether()
        .args([
            "client",
            &format!("127.0.0.1:{port}"),
            "--headless",
            "--duration",
            "3",
            "--input-probe",
            "400",
            "--report",
        ])
        .arg(&client_report)
        .output()
        .unwrap();
    assert!(o.status.success(), "client failed: {}", text(&o));
    assert!(text(&o).contains("glass-to-glass"));
    let host_out = host.wait_with_output().unwrap();
    assert!(
        host_out.status.success(),
        "host failed: {}",
        String::from_utf8_lossy(&host_out.stderr)
    );
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&client_report).unwrap()).unwrap();
    assert!(c["frames"]["decoded"].as_u64().unwrap() > 100, "{c}");
    assert!(c["latency_ms"]["glass_to_glass"]["p50"].as_f64().unwrap() > 0.0);
    assert!(c["input"]["events_sent"].as_u64().unwrap() >= 3);
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&host_report).unwrap()).unwrap();
    assert!(h["frames"]["sent"].as_u64().unwrap() > 100, "{h}");
    assert!(h["input"]["events_applied"].as_u64().unwrap() >= 3, "{h}");
}

#[test]
fn several_clients_as_processes_one_encode_roles_and_a_busy_refusal() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let host_report = tmp("multi-host.json");
    let host = untether()
        .args(["host", "--access", "open", "--max-clients", "3"])
        .args([
            "--resolution",
            "640x360",
            "--bitrate",
            "2M",
            "--bind",
            &addr,
        ])
        .args(["--duration", "7", "--report"])
        .arg(&host_report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host never bound udp port {port}"
    );
    let client = |name: &str, secs: &str, extra: &[&str], report: Option<&Path>| {
        let mut c = untether();
        // Each client its own identity (a state directory each); "connected to" at info.
        c.env("RUST_LOG", "info")
            .args([
                "client",
                &addr,
                "--headless",
                "--name",
                name,
                "--duration",
                secs,
            ])
            .arg("--state-dir")
            .arg(tmp(&format!("state-{name}")))
            .args(extra);
        if let Some(r) = report {
            c.arg("--report").arg(r);
        }
        Proc::spawn(c)
    };
    // The controller (the first admitted) stays longest: when it leaves, the next client
    // takes control. Each client is in before the next starts.
    let connected = Duration::from_secs(20);
    let mut controller = client("controller", "5", &[], None);
    controller.wait_for("connected to", connected);
    let viewer_report = tmp("multi-viewer.json");
    let mut viewers = [
        client("viewer1", "3.5", &["--no-decode"], Some(&viewer_report)),
        client("viewer2", "3.5", &["--no-decode"], None),
    ];
    for v in &mut viewers {
        v.wait_for("connected to", connected);
    }
    // A fourth: the host serves at most three.
    let o = untether()
        .args([
            "client",
            &addr,
            "--headless",
            "--duration",
            "2",
            "--state-dir",
        ])
        .arg(tmp("state-fourth"))
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("maximum of 3 clients") && t.contains("--max-clients"),
        "{t}"
    );
    for c in viewers.into_iter().chain([controller]) {
        let (ok, out, err) = c.finish();
        assert!(ok, "client failed: {out}{err}");
    }
    let out = host.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "host failed: {stderr}");
    // The host's output lists each client with its role.
    assert!(stderr.contains("clients:"), "{stderr}");
    assert!(
        stderr.contains("controller") && stderr.contains("viewer"),
        "{stderr}"
    );
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&host_report).unwrap()).unwrap();
    let clients = h["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 3, "{h}");
    assert_eq!(clients[0]["role"], "controller", "{h}");
    // One encode, three copies.
    let sent = h["frames"]["sent"].as_u64().unwrap();
    assert!(sent > 100, "{h}");
    assert!(h["frame_copies_sent"].as_u64().unwrap() > 2 * sent, "{h}");
    // The no-decode viewer received frames, decoded none, and knew it was a viewer.
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&viewer_report).unwrap()).unwrap();
    assert_eq!(v["role"]["role"], "viewer", "{v}");
    assert_eq!(v["role"]["decoded"], false, "{v}");
    assert!(v["role"]["undecoded"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["frames"]["decoded"].as_u64(), Some(0), "{v}");
}

/// Reads a binary PPM (P6, maxval 255 or 65535) as (width, height, 8-bit rgb).
/// ImageMagick builds with 16-bit quantum write 16-bit PPMs unless told otherwise.
fn read_ppm(path: &Path) -> (usize, usize, Vec<u8>) {
    let data = std::fs::read(path).unwrap();
    let mut fields = Vec::new();
    let mut i = 0;
    while fields.len() < 4 {
        while data[i].is_ascii_whitespace() {
            i += 1;
        }
        if data[i] == b'#' {
            while data[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        while !data[i].is_ascii_whitespace() {
            i += 1;
        }
        fields.push(String::from_utf8_lossy(&data[start..i]).to_string());
    }
    assert_eq!(fields[0], "P6");
    let (w, h): (usize, usize) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
    let maxval: u32 = fields[3].parse().unwrap();
    let raw = &data[i + 1..];
    let pixels: Vec<u8> = if maxval < 256 {
        raw.to_vec()
    } else {
        // 16-bit samples, big-endian: keep the high byte.
        raw.chunks_exact(2).map(|s| s[0]).collect()
    };
    assert_eq!(pixels.len(), w * h * 3, "maxval {maxval}");
    (w, h, pixels)
}

/// Runs `untether demo` (a still scene) with `extra` flags under the display, grabs the
/// screen after 3 s; returns (last decoded frame, screenshot, the demo's stderr).
type Ppm = (usize, usize, Vec<u8>);
fn demo_screenshot(name: &str, extra: &[&str]) -> (Ppm, Ppm, String) {
    let frame = tmp(&format!("{name}-frame.ppm"));
    let shot = tmp(&format!("{name}-screen.ppm"));
    // A still scene, so the screenshot and the last decoded frame show the same picture.
    let demo = untether()
        .args([
            "demo",
            "--duration",
            "5",
            "--spin",
            "0",
            "--walk",
            "0",
            "--input-probe",
            "0",
            "--save-frame",
        ])
        .arg(&frame)
        .args(extra)
        // The presenter says what it is at info level.
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3000));
    let grab = Command::new("import")
        .args(["-window", "root", "-depth", "8"])
        .arg(&shot)
        .status();
    let out = demo.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "demo failed: {stderr}");
    assert!(grab.expect("imagemagick's import is installed").success());
    (read_ppm(&frame), read_ppm(&shot), stderr)
}

/// The centre of the white bar (a run of near-white pixels 2 to 40 wide between dark ones)
/// nearest column `x` in a row of RGB pixels.
fn bar_nearest(row: &[[u8; 3]], x: f32) -> Option<f32> {
    let white = |p: &[u8; 3]| p.iter().all(|&v| v > 200);
    let dark = |i: usize| row.get(i).is_some_and(|p| p.iter().all(|&v| v < 90));
    let mut best: Option<f32> = None;
    let mut i = 0;
    while i < row.len() {
        if !white(&row[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < row.len() && white(&row[i]) {
            i += 1;
        }
        let edges = (start >= 3 && (1..=3).any(|k| dark(start - k))) && (0..3).any(|k| dark(i + k));
        if (2..=40).contains(&(i - start)) && edges {
            let c = (start + i - 1) as f32 / 2.0;
            if best.is_none_or(|b| (c - x).abs() < (b - x).abs()) {
                best = Some(c);
            }
        }
    }
    best
}

/// The mean absolute difference of an n×n block of two RGB pictures, at (fx, fy) in the first
/// and (sx, sy) in the second.
fn block_diff(f: &Ppm, fx: usize, fy: usize, s: &Ppm, sx: usize, sy: usize, n: usize) -> f64 {
    let mut diff = 0f64;
    for y in 0..n {
        for x in 0..n {
            for c in 0..3 {
                let a = f.2[((fy + y) * f.0 + fx + x) * 3 + c] as f64;
                let b = s.2[((sy + y) * s.0 + sx + x) * 3 + c] as f64;
                diff += (a - b).abs();
            }
        }
    }
    diff / (n * n * 3) as f64
}

#[test]
fn the_window_shows_the_decoded_frame_with_either_presenter() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    for presenter in ["gl", "sdl"] {
        let (frame, shot, stderr) =
            demo_screenshot(&format!("mono-{presenter}"), &["--presenter", presenter]);
        assert_eq!((frame.0, frame.1), (1280, 720));
        // The window is centred on the screen; compare a 256×256 block at the centre of both,
        // and a block in the top-left corner below the pixel stamp (no overlay unless asked
        // for).
        let (ox, oy) = ((shot.0 - 1280) / 2, (shot.1 - 720) / 2);
        let centre = block_diff(&frame, 512, 232, &shot, ox + 512, oy + 232, 256);
        assert!(
            centre < 6.0,
            "{presenter}: screen centre differs from the decoded frame by {centre:.1} on average"
        );
        let corner = block_diff(&frame, 8, 64, &shot, ox + 8, oy + 64, 96);
        assert!(
            corner < 8.0,
            "{presenter}: the top-left corner differs by {corner:.1}"
        );
        if presenter == "gl" {
            assert!(stderr.contains("GL presenter: OpenGL ES 3"), "{stderr}");
        }
    }
}

/// Issue 17's screenshot test of the client window, from the real client in `untether demo
/// --vr --overlay`: two lens-distorted eye views (black corners, each eye picture's centre at
/// its lens centre) and the statistics overlay over the video in the top-left corner.
#[test]
fn the_vr_window_shows_two_distorted_eye_views_and_the_overlay() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    // A head that stands still (a demo's VR head turns by default): the last decoded frame is
    // what the window shows, late-warped by the identity.
    let (frame, shot, stderr) =
        demo_screenshot("vr", &["--vr", "--overlay", "--pose", "synthetic:still"]);
    assert!(stderr.contains("VR: side-by-side stereo"), "{stderr}");
    let (ox, oy) = ((shot.0 - 1280) / 2, (shot.1 - 720) / 2);
    let px = |x: usize, y: usize| {
        let i = ((oy + y) * shot.0 + ox + x) * 3;
        [shot.2[i], shot.2[i + 1], shot.2[i + 2]]
    };
    for eye_x in [0usize, 640] {
        // The corners of each eye's viewport (away from the overlay) are black.
        for (x, y) in [(eye_x + 2, 717), (eye_x + 637, 717), (eye_x + 637, 2)] {
            assert!(
                px(x, y).iter().all(|&v| v < 10),
                "corner {x},{y} is not black: {:?}",
                px(x, y)
            );
        }
        // The generic lens's centre is its viewport's: there the eye picture's centre shows.
        // The scene's pose marker at the view's centre (world azimuth 0, the head still at
        // yaw 0) is a sharp vertical bar: on the middle row it sits at the same column in the
        // decoded eye picture and in the window (the lens magnifies around that column and
        // moves it nowhere).
        let row_of = |p: &Ppm, x0: usize, y: usize| -> Vec<[u8; 3]> {
            (x0..x0 + 640)
                .map(|x| {
                    let i = (y * p.0 + x) * 3;
                    [p.2[i], p.2[i + 1], p.2[i + 2]]
                })
                .collect()
        };
        let in_frame = bar_nearest(&row_of(&frame, eye_x, 360), 319.5);
        let in_window = bar_nearest(&row_of(&shot, ox + eye_x, oy + 360), 319.5);
        let (Some(f), Some(w)) = (in_frame, in_window) else {
            panic!("eye at {eye_x}: no centre marker (frame {in_frame:?}, window {in_window:?})");
        };
        assert!(
            (f - 319.5).abs() < 3.0 && (w - f).abs() < 1.5,
            "eye at {eye_x}: the centre marker is at {f:.1} in the picture, {w:.1} in the window"
        );
        // Away from the centre the picture is distorted: the same point differs.
        let off = block_diff(
            &frame,
            eye_x + 60,
            560,
            &shot,
            ox + eye_x + 60,
            oy + 560,
            16,
        );
        assert!(
            off > 25.0,
            "eye at {eye_x}: no distortion ({off:.1} at the same point)"
        );
    }
    // The overlay: light text in the (otherwise black) top-left corner of the left eye.
    let light = (12..100)
        .flat_map(|y| (12..300).map(move |x| (x, y)))
        .filter(|&(x, y)| px(x, y).iter().all(|&v| v > 180))
        .count();
    assert!(
        light > 150,
        "no overlay text in the top-left corner ({light} light pixels)"
    );
}

#[test]
fn pairing_is_explained_in_help() {
    let t = text(&run(&["pair", "--help"]));
    for word in [
        "approve",
        "deny",
        "revoke",
        "--pin",
        "--wait",
        "--state-dir",
        "pending",
    ] {
        assert!(t.contains(word), "pair --help lacks {word}: {t}");
    }
    let t = text(&run(&["host", "--help"]));
    for word in ["--access", "allowlist", "open", "pin", "--state-dir"] {
        assert!(t.contains(word), "host --help lacks {word}: {t}");
    }
    let t = text(&run(&["client", "--help"]));
    for word in ["--pin", "--state-dir", "known_hosts"] {
        assert!(t.contains(word), "client --help lacks {word}: {t}");
    }
}

/// Host, clients and `untether pair` as separate processes, each side with its own state
/// directory: a PIN pairs one client; an unknown one is refused, listed, approved, let in; a
/// denied one is told so and stops asking.
#[test]
fn pin_pairing_and_approval_across_processes() {
    use std::io::BufRead;
    let base = tmp("pairing");
    let _ = std::fs::remove_dir_all(&base);
    let (hs, c1, c2) = (base.join("host"), base.join("c1"), base.join("c2"));
    let c3 = base.join("c3");
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut host = untether()
        .args([
            "host",
            "--access",
            "pin",
            "--bind",
            &addr,
            "--duration",
            "20",
        ])
        .args(["--resolution", "640x360", "--fps", "30", "--state-dir"])
        .arg(&hs)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = host.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
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
    // Its output is not a terminal (it could be a journal): it says a PIN is active and
    // where it is kept, never the PIN itself (issue 33, item 9).
    let pin = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the host says a pairing PIN is active");
        if line.contains("a pairing PIN is active") {
            assert!(line.contains("pairing_pin.json"), "{line}");
            break pin_in(&hs);
        }
    };
    let client = |state: &Path, extra: &[&str]| {
        untether()
            .args(["client", &addr, "--headless", "--duration", "1", "--name"])
            .arg(state.file_name().unwrap())
            .arg("--state-dir")
            .arg(state)
            .args(extra)
            .output()
            .unwrap()
    };
    let wrong = if pin == "000000" { "111111" } else { "000000" };
    let o = client(&c2, &["--pin", wrong]);
    assert!(!o.status.success());
    assert!(text(&o).contains("wrong PIN"), "{}", text(&o));
    let o = client(&c1, &["--pin", &pin]);
    assert!(o.status.success(), "pairing failed: {}", text(&o));
    let o = client(&c1, &[]);
    assert!(o.status.success(), "a paired client connects: {}", text(&o));
    // An unknown client: it waits for the approval; its run ending first (--duration 1)
    // ends it with the refusal, the way out in the message.
    let t = Instant::now();
    let o = client(&c2, &[]);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("not paired"), "{}", text(&o));
    let hs_arg = hs.to_str().unwrap();
    let listing = text(&run(&["pair", "--state-dir", hs_arg]));
    assert!(
        listing.contains("Pending access requests") && listing.contains("\"c2\""),
        "{listing}"
    );
    assert!(listing.contains("\"c1\""), "c1 is allowed: {listing}");
    // Not by the name the client chose, nor by its place in the list.
    for wrong in ["c2", "1"] {
        let o = run(&["pair", "--state-dir", hs_arg, "approve", wrong]);
        assert!(!o.status.success(), "approve {wrong}: {}", text(&o));
        assert!(text(&o).contains("fingerprint"), "{}", text(&o));
    }
    // The listing shows the exact command, with the fingerprint.
    let approve = listing
        .lines()
        .find_map(|l| l.split("approve: ").nth(1))
        .expect("the listing shows the approve command");
    let fingerprint = approve.split_whitespace().last().unwrap();
    assert!(
        approve.starts_with(&format!("untether pair --state-dir {hs_arg} approve ")),
        "{approve}"
    );
    let o = run(&["pair", "--state-dir", hs_arg, "approve", fingerprint]);
    assert!(
        o.status.success() && text(&o).starts_with("Allowed"),
        "{}",
        text(&o)
    );
    std::thread::sleep(Duration::from_millis(1200));
    let o = client(&c2, &[]);
    assert!(
        o.status.success(),
        "the approved client connects: {}",
        text(&o)
    );
    // Denied (issue 36, item 4): the client is told and ends at once, without waiting for an
    // approval (it used to be asked for again within 1.5 s).
    let o = client(&c3, &[]);
    assert!(text(&o).contains("not paired"), "{}", text(&o));
    let listing = text(&run(&["pair", "--state-dir", hs_arg]));
    let denied_fp = listing
        .lines()
        .find(|l| l.contains("\"c3\""))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("c3's request is not listed: {listing}"))
        .to_string();
    let o = run(&["pair", "--state-dir", hs_arg, "deny", &denied_fp]);
    assert!(text(&o).starts_with("Denied"), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(1200));
    let t = Instant::now();
    let o = untether()
        .args([
            "client",
            &addr,
            "--headless",
            "--duration",
            "10",
            "--name",
            "c3",
        ])
        .arg("--state-dir")
        .arg(&c3)
        .output()
        .unwrap();
    assert!(
        !o.status.success() && t.elapsed() < Duration::from_secs(5),
        "a denied client kept waiting ({:?}): {}",
        t.elapsed(),
        text(&o)
    );
    assert!(text(&o).contains("refused this client"), "{}", text(&o));
    let listing = text(&run(&["pair", "--state-dir", hs_arg]));
    assert!(
        listing.contains("Refused clients") && !listing.contains("Pending access requests"),
        "{listing}"
    );
    let _ = host.kill();
    let _ = host.wait();
    let log = reader.join().unwrap();
    assert!(log.contains("paired with"), "{log}");
    assert!(!log.contains(&pin), "the PIN went to the host's log: {log}");
    let _ = std::fs::remove_dir_all(&base);
}

/// The pairing PIN a host keeps in its state directory `dir` (`pairing_pin.json`).
fn pin_in(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("pairing_pin.json")).expect("the PIN file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["pin"].as_str().expect("a pin").to_string()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Issue 15, item 7: `untether pair` (listing) creates nothing, neither folder nor key; a
/// folder another user could write (mode 1777, like /tmp) is refused and left as it was; a
/// folder of the user's own is used without being chmodded.
#[test]
fn the_state_directory_is_checked_never_chmodded_and_listing_creates_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let base = tmp("state-dirs");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    // Listing a folder that does not exist: nothing is created.
    let missing = base.join("missing");
    let o = run(&["pair", "--state-dir", missing.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no key yet"), "{}", text(&o));
    assert!(!missing.exists(), "listing created the folder");
    // Listing an empty folder: still empty.
    let empty = base.join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(&["pair", "--state-dir", empty.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "listing created a file"
    );
    // Making a PIN writes there, without changing the folder's mode.
    let o = run(&["pair", "--state-dir", empty.to_str().unwrap(), "--pin"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(empty.join("host.key").exists());
    assert_eq!(mode(&empty), 0o755, "an existing folder was chmodded");
    // A shared folder (1777): refused with the reason and the way out, never chmodded.
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    for args in [
        vec!["pair", "--pin"],
        vec!["pair"],
        vec!["host", "--duration", "1", "--bind", "127.0.0.1:0"],
        vec!["client", "127.0.0.1:9", "--headless", "--duration", "1"],
    ] {
        let o = untether()
            .args(&args)
            .arg("--state-dir")
            .arg(&shared)
            .output()
            .unwrap();
        let t = text(&o);
        assert!(!o.status.success(), "{args:?} accepted a 1777 folder: {t}");
        assert!(
            t.contains("every user") && t.contains("--state-dir"),
            "{args:?}: {t}"
        );
        assert_eq!(mode(&shared), 0o1777, "{args:?} chmodded the shared folder");
        assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0);
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The subcommands `untether --help` lists (without `help`).
fn subcommands() -> Vec<String> {
    let t = text(&run(&["--help"]));
    let list = t
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("--help has a Commands section")
        .to_string();
    let cmds: Vec<String> = list
        .lines()
        // "  name  description"; wrapped descriptions are indented further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    assert!(cmds.len() >= 6, "{cmds:?}");
    cmds
}

#[test]
fn every_subcommand_takes_the_global_options_before_or_after_it() {
    let dir = tmp("global-state");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_string();
    let config = tmp("global.toml");
    std::fs::write(&config, "[video]\nfps = 30\n").unwrap();
    let config = config.to_str().unwrap().to_string();
    let options: [&[&str]; 6] = [
        &["--state-dir", &dir],
        &["--config", &config],
        &["-v"],
        &["-vv"],
        &["-q"],
        &["-qq"],
    ];
    for cmd in subcommands() {
        for opt in options {
            // Before and after the subcommand; --help last so nothing runs, but everything
            // before it must parse.
            let before: Vec<&str> = opt
                .iter()
                .copied()
                .chain([cmd.as_str(), "--help"])
                .collect();
            let after: Vec<&str> = [cmd.as_str()]
                .into_iter()
                .chain(opt.iter().copied())
                .chain(["--help"])
                .collect();
            for args in [before, after] {
                let o = run(&args);
                assert!(o.status.success(), "untether {args:?}: {}", text(&o));
            }
        }
        let all: Vec<&str> = [
            "-v",
            "--config",
            &config,
            cmd.as_str(),
            "-q",
            "--state-dir",
            &dir,
            "--help",
        ]
        .to_vec();
        let o = run(&all);
        assert!(o.status.success(), "untether {all:?}: {}", text(&o));
        for args in [
            vec!["--version", cmd.as_str()],
            vec![cmd.as_str(), "--version"],
        ] {
            let o = run(&args);
            assert!(
                o.status.success() && text(&o).contains(env!("CARGO_PKG_VERSION")),
                "untether {args:?}: {}",
                text(&o)
            );
        }
    }
    // They take effect: pair reads --state-dir wherever it stands.
    for args in [
        vec!["--state-dir", dir.as_str(), "-q", "pair"],
        vec!["pair", "list", "-v", "--state-dir", dir.as_str()],
    ] {
        let o = run(&args);
        assert!(o.status.success(), "untether {args:?}: {}", text(&o));
    }
    // And --config is read by pair too (host.state_dir).
    let cfg = tmp("pair-state.toml");
    std::fs::write(&cfg, format!("[host]\nstate_dir = {dir:?}\n")).unwrap();
    let o = run(&["pair", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_missing_config_file_is_named_with_its_io_error_once() {
    for cmd in ["demo", "host", "pair", "bench", "netem"] {
        let o = run(&[cmd, "--config", "/nonexistent/untether.toml"]);
        assert!(!o.status.success());
        let t = text(&o);
        if cmd == "netem" && t.contains("required") {
            // netem's own required flags are checked first.
            continue;
        }
        assert_eq!(
            t.matches("No such file or directory").count(),
            1,
            "{cmd}: {t}"
        );
        assert!(t.contains("/nonexistent/untether.toml"), "{cmd}: {t}");
    }
}

#[test]
fn bench_help_shows_the_scenario_keys_and_examples() {
    let o = run(&["bench", "--help"]);
    assert!(o.status.success());
    let t = text(&o);
    for word in [
        "[[scenario]]",
        "duration_s",
        "spin_deg_per_s",
        "bitrate_kbps",
        "pacing",
        "Examples:",
        "untether bench --resolution 720p,1080p",
        "360p",
    ] {
        assert!(t.contains(word), "bench --help lacks {word}: {t}");
    }
}

#[test]
fn ranges_and_units_are_named_in_one_style() {
    let o = run(&["demo", "--fps", "0"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("video.fps (--fps): 0 is out of range 1..=240"),
        "{}",
        text(&o)
    );
    let o = run(&["demo", "--bitrate", "10"]);
    assert!(
        text(&o).contains("video.bitrate_kbps (--bitrate): 10 is out of range 100..=500000"),
        "{}",
        text(&o)
    );
    let o = run(&["demo", "--duration", "soon"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--duration") && text(&o).contains("500ms"),
        "{}",
        text(&o)
    );
    let o = run(&["demo", "--encoder", "libx264", "--conversion", "rgb"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("video.encoder, video.conversion (--encoder, --conversion)"),
        "{}",
        text(&o)
    );
    // Slices need libx264's sliced mode: another codec, encoder or refresh is refused by name.
    for (args, keys) in [
        (
            &["demo", "--slices", "4", "--codec", "hevc"][..],
            "video.slices, video.codec (--codec, --slices)",
        ),
        (
            &["demo", "--slices", "4", "--encoder", "libx264rgb"][..],
            "video.slices, video.encoder (--encoder, --slices)",
        ),
        (
            &["demo", "--slices", "4", "--refresh", "intra"][..],
            "video.slices, video.refresh (--refresh, --slices)",
        ),
        (&["demo", "--slices", "17"][..], "video.slices (--slices)"),
    ] {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(text(&o).contains(keys), "{args:?}: {}", text(&o));
    }
    // The bench takes the same units: 10M is 10000 kbit/s, 360p is 640x360 (the scenario's
    // name shows both; fps 0 stops it before anything runs).
    let o = run(&[
        "bench",
        "--bitrate",
        "10M",
        "--resolution",
        "360p",
        "--fps",
        "0",
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("360p0-superfast-10000kbps-simd") && t.contains("video.fps: 0 is out of range"),
        "{t}"
    );
    let o = run(&["bench", "--bitrate", "fast"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--bitrate") && text(&o).contains("10M"),
        "{}",
        text(&o)
    );
}

/// Without OpenGL ES 3 (Mesa told to offer ES 2 only), `--presenter auto` falls back to SDL's
/// renderer saying so in one line, and `--presenter gl` is an error that says why.
#[test]
fn the_sdl_renderer_takes_over_when_opengl_es_3_cannot_start() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    let report = tmp("fallback-report.json");
    let out = untether()
        .args(["demo", "--duration", "2", "--presenter", "auto", "--report"])
        .arg(&report)
        .env("MESA_GLES_VERSION_OVERRIDE", "2.0")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let said: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("falling back to the SDL renderer"))
        .collect();
    assert_eq!(said.len(), 1, "{t}");
    assert!(said[0].contains("GL presenter unavailable"), "{t}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["config"]["display"], "sdl-window", "{r}");
    assert!(r["frames"]["shown"].as_u64().unwrap() > 0, "{r}");
    let out = untether()
        .args(["demo", "--duration", "2", "--presenter", "gl"])
        .env("MESA_GLES_VERSION_OVERRIDE", "2.0")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("the GL presenter (--presenter gl) cannot start"),
        "{t}"
    );
}

/// Issue 33: a browser page on a network address over plain HTTP says that its links, PINs and
/// session secrets cross the network unencrypted; on loopback it says nothing.
#[test]
fn a_browser_page_on_the_network_without_tls_is_warned_about() {
    let host = |listen: &str| {
        text(&run(&[
            "host",
            "--bind",
            "127.0.0.1:0",
            "--duration",
            "1",
            "--no-advertise",
            "--webrtc",
            listen,
        ]))
    };
    let t = host("0.0.0.0:0");
    assert!(t.contains("over plain HTTP"), "{t}");
    let t = host("127.0.0.1:0");
    assert!(!t.contains("over plain HTTP"), "{t}");
}

/// Issue 36, item 1: a client waiting for the host's approval opens its window at once and
/// says so in its title (before, no window existed until the host approved it: 42 s in one
/// run, and a headset or a Pi with no terminal in view looked dead).
#[test]
fn a_client_waiting_for_approval_shows_a_window_that_says_so() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    let base = tmp("waiting-window");
    let _ = std::fs::remove_dir_all(&base);
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut host = untether()
        .args([
            "host",
            "--bind",
            &addr,
            "--duration",
            "15",
            "--no-advertise",
        ])
        .args(["--resolution", "640x360", "--fps", "30", "--state-dir"])
        .arg(base.join("host"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host did not bind"
    );
    let mut client = untether()
        .args([
            "client",
            &addr,
            "--duration",
            "8",
            "--name",
            "waiting",
            "--state-dir",
        ])
        .arg(base.join("client"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let (found, titles) = loop {
        let o = Command::new("xwininfo")
            .args(["-root", "-tree"])
            .output()
            .expect("xwininfo (x11-utils) runs");
        let titles = String::from_utf8_lossy(&o.stdout).into_owned();
        if titles.contains("waiting for the host's approval") {
            break (true, titles);
        }
        if t.elapsed() > Duration::from_secs(6) {
            break (false, titles);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = client.kill();
    let _ = client.wait();
    let _ = host.kill();
    let _ = host.wait();
    let _ = std::fs::remove_dir_all(&base);
    assert!(
        found,
        "no window titled with the waiting state within 6 s: {}",
        titles
            .lines()
            .filter(|l| l.contains("untether"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "the waiting client's window was there after {:?}",
        t.elapsed()
    );
}

/// Issue 36 item 6: `-h` fits a screen (one line per common option, and it says `--help` shows
/// more); `--help` still lists every option (every one the man page, generated from the same
/// definitions, lists).
#[test]
fn short_help_fits_a_screen_and_long_help_lists_every_option() {
    let dir = tmp("help-man");
    let o = run(&["generate", "man", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for cmd in ["host", "client", "demo", "run"] {
        let o = run(&[cmd, "-h"]);
        assert!(o.status.success(), "{cmd} -h: {}", text(&o));
        let short = text(&o);
        let lines = short.lines().count();
        assert!(lines <= 50, "{cmd} -h is {lines} lines:\n{short}");
        assert!(short.contains("--help"), "{cmd} -h: {short}");
        let long = text(&run(&[cmd, "--help"]));
        let page = std::fs::read_to_string(dir.join(format!("untether-{cmd}.1"))).unwrap();
        // The page's options: `\fB\-\-name\fR`.
        let flags: Vec<String> = page
            .split(r"\fB\-\-")
            .skip(1)
            .filter_map(|rest| rest.split(r"\fR").next())
            .map(|f| format!("--{}", f.replace(r"\-", "-")))
            .collect();
        assert!(flags.len() > 20, "{cmd}: {flags:?}");
        // `--flag` as a whole word (not the start of `--flag-more`).
        let has = |t: &str, flag: &str| {
            t.match_indices(flag).any(|(i, _)| {
                !t[i + flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
            })
        };
        for flag in &flags {
            assert!(has(&long, flag), "{cmd} --help lacks {flag}");
        }
        assert!(
            flags.iter().any(|f| !has(&short, f)),
            "{cmd} -h shows every option"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 36 item 6: the man page's quick start shows each command on its own line (roff ran the
/// lines of the description together), and untether.1 has EXAMPLES, FILES and ENVIRONMENT.
#[test]
fn the_man_page_has_a_readable_quick_start_examples_files_and_environment() {
    let dir = tmp("man");
    let o = run(&["generate", "man", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let page = dir.join("untether.1");
    let roff = std::fs::read_to_string(&page).unwrap();
    // Plain text, as `man` shows it: no bold or underline, ASCII hyphens.
    let rendered = Command::new("groff")
        .args(["-man", "-Tascii", "-P-cbou"])
        .arg(&page)
        .output();
    let t = match rendered {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            eprintln!("no groff: checking the roff itself");
            roff.replace(r"\fB", "")
                .replace(r"\fR", "")
                .replace(r"\-", "-")
        }
    };
    let lines: Vec<&str> = t.lines().map(str::trim).collect();
    for cmd in [
        "untether demo",
        "untether host",
        "untether client",
        "untether client PC-ADDRESS",
        "untether pair approve FINGERPRINT",
        "untether discover",
        "untether host --access pin",
        "untether client PC-ADDRESS --pin PIN",
    ] {
        assert!(
            lines.contains(&cmd),
            "the quick start has no line \"{cmd}\":\n{t}"
        );
    }
    for section in ["EXAMPLES", "FILES", "ENVIRONMENT", "DESCRIPTION", "OPTIONS"] {
        assert!(lines.contains(&section), "no {section} section:\n{t}");
    }
    for word in [
        "/etc/untether/untether.toml",
        "~/.config/untether/untether.toml",
        "~/.local/state/untether/",
        "known_hosts.json",
        "untether-host.service",
        "RUST_LOG",
        "XDG_CONFIG_HOME",
        "UNTETHER_STATE_DIR",
        "UNTETHER_CONFIG",
        "untether run -- vkcube",
    ] {
        assert!(t.contains(word), "untether.1 lacks {word}:\n{t}");
    }
    let host = std::fs::read_to_string(dir.join("untether-host.1")).unwrap();
    assert!(host.contains("SEE ALSO"), "{host}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 36 item 6: a value out of range in the config file is named by the file, its line and
/// column, the key and the allowed range, at once; from a flag, by the flag. `untether doctor`
/// reports the file as its failed check and checks the rest.
#[test]
fn a_bad_value_in_the_config_file_names_its_line() {
    let path = tmp("range.toml");
    std::fs::write(
        &path,
        "# a config with one bad value\n[host]\nmax_clients = 4\n\n[video]\nresolution = \
         \"720p\"\nfps = 500\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let want = format!("{config}:7:7: video.fps: 500 is out of range 1..=240");
    let t0 = Instant::now();
    let o = run(&[
        "host",
        "--config",
        config,
        "--bind",
        "127.0.0.1:0",
        "--duration",
        "1",
    ]);
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(text(&o).contains(&want), "{}", text(&o));
    // The flag wins over the file: a bad flag is named, the file is not.
    let o = run(&["demo", "--config", config, "--fps", "0"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("video.fps (--fps): 0 is out of range 1..=240") && !t.contains(":7:"),
        "{t}"
    );
    // A key without a flag, and a client: the same place.
    std::fs::write(&path, "[client]\n\nreassembly_deadline_ms = 0\n").unwrap();
    let o = run(&["client", "127.0.0.1:9", "--headless", "--config", config]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains(&format!(
            "{config}:3:26: client.reassembly_deadline_ms: 0 is out of range 1..=1000"
        )),
        "{}",
        text(&o)
    );
    std::fs::write(&path, "[video]\nfps = 500\n").unwrap();
    let o = run(&["doctor", "--json", "--frames", "2", "--config", config]);
    assert!(!o.status.success(), "a bad config file is a failure");
    let d: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {}", text(&o)));
    let checks = d["checks"].as_array().unwrap();
    let c = checks
        .iter()
        .find(|c| c["kind"] == "config")
        .expect("a config check");
    assert_eq!(c["status"], "fail", "{c}");
    let detail = c["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!(
            "{config}:2:7: video.fps: 500 is out of range 1..=240"
        )),
        "{c}"
    );
    assert!(checks.iter().any(|c| c["kind"] == "encoder"), "{d}");
    assert!(checks.iter().any(|c| c["kind"] == "network"), "{d}");
    let _ = std::fs::remove_file(&path);
}
