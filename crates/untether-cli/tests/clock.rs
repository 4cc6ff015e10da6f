//! Honest figures on an asymmetric link: 20 ms of delay on the downlink only, host and client on
//! one machine. The client's reported glass-to-glass must match what an outside observer reads
//! off the frames it writes (the pixel stamp's capture time against the same clock).

use std::io::Read;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use untether_media::stamp;

fn untether(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c.arg("--state-dir").arg(state);
    c
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn glass_to_glass_over_a_one_way_delay_matches_an_outside_observer() {
    let state = std::env::temp_dir().join(format!("untether-clock-{}", std::process::id()));
    let (w, h) = (640usize, 360usize);
    let (port, relay_port) = (free_port(), free_port());
    let mut host = untether(&state.join("host"))
        .args([
            "host",
            "--access",
            "open",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--resolution",
            "640x360",
            "--duration",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("host");
    let mut relay = untether(&state.join("relay"))
        .args([
            "netem",
            "--listen",
            &format!("127.0.0.1:{relay_port}"),
            "--target",
            &format!("127.0.0.1:{port}"),
            "--direction",
            "down",
            "--delay",
            "20ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("relay");
    std::thread::sleep(Duration::from_millis(500));
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
        .stderr(Stdio::null())
        .spawn()
        .expect("client");
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
    assert!(status.success(), "client: {status}");
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
