//! Chaos: a host killed and restarted while a client streams, a host stopped behind a relay, a
//! display that cannot be opened, and honest figures over a one-way delay (the client's
//! glass-to-glass against an outside observer reading the frames it writes). Separate
//! processes, real sockets, the `untether` binary.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use untether_media::stamp;

fn untether(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c.arg("--state-dir").arg(state);
    c
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("untether-chaos-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a host on `port` (the scene, 360p, open access) and returns it once it listens,
/// with the instant it said so.
fn start_host(state: &Path, port: u16) -> (Child, Instant) {
    let mut host = untether(state)
        .args([
            "host",
            "--access",
            "open",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--resolution",
            "640x360",
            "--duration",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("host starts");
    let stderr = host.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains("listening on") {
                let _ = tx.send(Instant::now());
                sent = true;
            }
        }
    });
    let up = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the host says it listens");
    (host, up)
}

/// Starts `untether netem ARGS` and returns it once it relays (its "relaying with seed" line),
/// so a client started next never meets a port nobody listens on yet.
fn start_relay(state: &Path, args: &[&str]) -> Child {
    let mut relay = untether(state)
        .arg("netem")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("relay starts");
    let stderr = relay.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains("relaying with seed") {
                let _ = tx.send(());
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the relay says it relays");
    relay
}

fn report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the client wrote its report");
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn a_host_killed_and_restarted_on_its_port_is_streaming_again_within_a_second() {
    let (hs, cs) = (temp_dir("host"), temp_dir("client"));
    let port = free_port();
    let (mut host, _) = start_host(&hs, port);
    let out = temp_dir("report").with_extension("json");
    let client_started = Instant::now();
    let mut client = untether(&cs)
        .args([
            "client",
            &format!("127.0.0.1:{port}"),
            "--headless",
            "--duration",
            "9",
            "--report",
        ])
        .arg(&out)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client starts");
    let client_log = {
        let stderr = client.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
            }
            all
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    // No goodbye: the process is gone at once.
    host.kill().expect("SIGKILL");
    let _ = host.wait();
    std::thread::sleep(Duration::from_millis(1500));
    let (mut host, up) = start_host(&hs, port);
    let status = client.wait().expect("client ends");
    let _ = host.kill();
    let _ = host.wait();
    assert!(status.success(), "the client ended with {status}");
    // One line when the host was lost, one when it was back (issue 36: one per attempt, 29 in
    // 11 s), the attempts counted there.
    let log = client_log.join().expect("the client's log");
    let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(lines("reconnecting"), 1, "{log}");
    assert_eq!(lines("reconnected to"), 1, "{log}");
    assert!(log.contains(" attempt"), "{log}");
    let r = report(&out);
    let reconnects = r["network"]["reconnects"].as_array().expect("reconnects");
    assert_eq!(reconnects.len(), 1, "{reconnects:?}");
    let resumed = reconnects[0]["resumed_s"]
        .as_f64()
        .expect("the stream came back");
    // The client's clock starts a little after its process did, so this leans late, not early.
    let host_up = (up - client_started).as_secs_f64();
    eprintln!(
        "host SIGKILLed, back on its port at {host_up:.3} s: the client's stream resumed at {resumed:.3} s ({:.0} ms after the host was up)",
        (resumed - host_up) * 1e3
    );
    assert!(
        resumed - host_up < 1.0,
        "frames again {:.3} s after the host was up",
        resumed - host_up
    );
    assert!(r["frames"]["shown"].as_u64().unwrap_or(0) > 300);
    // A section per session: before the kill and after the restart.
    let sessions = r["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert!(
        sessions
            .iter()
            .all(|s| s["frames_shown"].as_u64().unwrap_or(0) > 0),
        "{sessions:?}"
    );
    let _ = std::fs::remove_dir_all(&hs);
    let _ = std::fs::remove_dir_all(&cs);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn a_host_stopped_behind_a_relay_ends_its_client_within_a_second_with_the_report() {
    let (hs, cs) = (temp_dir("host2"), temp_dir("client2"));
    let port = free_port();
    let relay_port = free_port();
    let (mut host, _) = start_host(&hs, port);
    let mut relay = start_relay(
        &cs,
        &[
            "--listen",
            &format!("127.0.0.1:{relay_port}"),
            "--target",
            &format!("127.0.0.1:{port}"),
        ],
    );
    let client = untether(&cs)
        .args([
            "client",
            &format!("127.0.0.1:{relay_port}"),
            "--headless",
            "--duration",
            "30",
            // (Without it the client waits for the host to come back: getting_connected.rs.)
            "--exit-on-bye",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client starts");
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(host.id() as i32, libc::SIGINT) }, 0);
    let stopped = Instant::now();
    let out = client.wait_with_output().expect("client ends");
    let took = stopped.elapsed();
    let _ = relay.kill();
    let _ = relay.wait();
    let _ = host.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("host SIGINTed behind a relay: the client ended {took:?} later");
    assert!(
        took < Duration::from_secs(1),
        "the client took {took:?} to end: {stderr}"
    );
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(stdout.contains("glass-to-glass"), "no report: {stdout}");
    let _ = std::fs::remove_dir_all(&hs);
    let _ = std::fs::remove_dir_all(&cs);
}

#[test]
fn a_display_that_cannot_be_opened_is_an_error_not_an_invisible_window() {
    let (hs, cs) = (temp_dir("host3"), temp_dir("client3"));
    let port = free_port();
    let (mut host, _) = start_host(&hs, port);
    let out = untether(&cs)
        .args(["client", &format!("127.0.0.1:{port}"), "--duration", "5"])
        // An X display nobody serves (and no Wayland): SDL would fall back to its off-screen
        // driver and "show" frames to no one.
        .env("DISPLAY", ":4711")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("SDL_VIDEODRIVER")
        .output()
        .expect("client runs");
    let _ = host.kill();
    let _ = host.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit 0 without a display: {stderr}");
    assert!(
        stderr.contains("no display") || stderr.contains("SDL video"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--headless") || stderr.contains("run headless"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&hs);
    let _ = std::fs::remove_dir_all(&cs);
}

/// 20 ms of delay on the downlink only, host and client on one machine.
#[test]
fn glass_to_glass_over_a_one_way_delay_matches_an_outside_observer() {
    let state = std::env::temp_dir().join(format!("untether-clock-{}", std::process::id()));
    let (w, h) = (640usize, 360usize);
    let (port, relay_port) = (free_port(), free_port());
    let (mut host, _) = start_host(&state.join("host"), port);
    let mut relay = start_relay(
        &state.join("relay"),
        &[
            "--listen",
            &format!("127.0.0.1:{relay_port}"),
            "--target",
            &format!("127.0.0.1:{port}"),
            "--direction",
            "down",
            "--delay",
            "20ms",
        ],
    );
    let report = state.join("report.json");
    let mut client = untether(&state.join("client"))
        .args([
            "client",
            &format!("127.0.0.1:{relay_port}"),
            "--sink",
            "pipe:-",
            "--duration",
            "5",
            "--report",
        ])
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client");
    // Its messages, for the failure below.
    let mut client_err = client.stderr.take().expect("stderr");
    let client_log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = client_err.read_to_string(&mut s);
        s
    });
    // The outside observer: every frame's age when it comes out of the client's pipe.
    let mut out = client.stdout.take().expect("stdout");
    let mut frame = vec![0u8; w * h * 3 / 2];
    let mut ages = Vec::new();
    while out.read_exact(&mut frame).is_ok() {
        let now = untether::clock::now_us();
        if let Some(s) = stamp::read_plane(&frame[..w * h], w, w as u32, h as u32) {
            let captured = stamp::unwrap_capture_us(s.capture_us, now);
            ages.push((now as i64 - captured as i64) as f64 / 1000.0);
        }
    }
    let status = client.wait().expect("client ends");
    let _ = relay.kill();
    let _ = host.kill();
    let _ = relay.wait();
    let _ = host.wait();
    let client_log = client_log.join().unwrap_or_default();
    assert!(status.success(), "client: {status}: {client_log}");
    assert!(ages.len() > 100, "{} frames read", ages.len());
    ages.sort_by(f64::total_cmp);
    let observed = untether_proto::stats::percentile(&ages, 50.0).expect("frames");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("JSON");
    let reported = r["latency_ms"]["glass_to_glass"]["p50"]
        .as_f64()
        .expect("glass-to-glass");
    let _ = std::fs::remove_dir_all(&state);
    eprintln!(
        "downlink +20 ms: client reports {reported:.2} ms, the observer reads {observed:.2} ms, clock {}",
        r["network"]["clock"]
    );
    assert_eq!(r["network"]["clock"], "shared");
    assert!(observed > 20.0, "the delay is not there: {observed:.2} ms");
    assert!(
        (reported - observed).abs() < 1.0,
        "the client reports {reported:.2} ms, the observer reads {observed:.2} ms"
    );
}
