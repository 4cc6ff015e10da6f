//! `untether netem` as a user runs it: help, errors that name the flag and the forms, and a short
//! real relay run between two loopback sockets.

use std::net::UdpSocket;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
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

const ADDRS: [&str; 4] = ["--listen", "127.0.0.1:0", "--target", "127.0.0.1:9"];

#[test]
fn netem_help_lists_the_impairments() {
    let o = run(&["netem", "--help"]);
    assert!(o.status.success());
    let t = text(&o);
    for flag in [
        "--listen",
        "--target",
        "--loss",
        "--burst-loss",
        "--delay",
        "--jitter",
        "--jitter-dist",
        "--delay-trace",
        "--rate",
        "--queue",
        "--reorder",
        "--duplicate",
        "--outage",
        "--direction",
        "--profile",
        "--paths",
        "--seed",
        "--duration",
        "--stats-interval",
    ] {
        assert!(t.contains(flag), "netem --help lacks {flag}");
    }
    assert!(t.contains("client → target") && t.contains("5s@10s"), "{t}");
}

#[test]
fn netem_bad_values_name_the_flag_and_the_forms() {
    for (args, want) in [
        (&["--loss", "2"][..], &["--loss", "2%"][..]),
        (&["--delay", "5"], &["--delay", "5ms"]),
        (&["--rate", "20"], &["--rate", "has no unit", "20mbit"]),
        (&["--outage", "10s"], &["--outage", "DURATION@START"]),
        (&["--burst-loss"], &["--burst-loss", "--loss"]),
        (&["--queue", "64p"], &["--queue", "--rate"]),
    ] {
        let mut all = vec!["netem"];
        all.extend_from_slice(&ADDRS);
        all.extend_from_slice(args);
        let o = run(&all);
        assert!(!o.status.success(), "{args:?} was accepted");
        let t = text(&o);
        for w in want {
            assert!(t.contains(w), "{args:?}: the error lacks {w:?}: {t}");
        }
    }
    let o = run(&["netem", "--listen", "127.0.0.1:0", "--target", "127.0.0.1"]);
    assert!(text(&o).contains("needs a port"), "{}", text(&o));
    let o = run(&[
        "netem",
        "--listen",
        "127.0.0.1:0",
        "--target",
        "127.0.0.1:9",
        "--profile",
        "/nonexistent.toml",
    ]);
    assert!(text(&o).contains("/nonexistent.toml"), "{}", text(&o));
}

#[test]
fn netem_relays_and_prints_its_counters() {
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    target
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // A free port for the relay to listen on.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let target_addr = target.local_addr().unwrap().to_string();
    let child = untether()
        .args([
            "netem",
            "--listen",
            &listen,
            "--target",
            &target_addr,
            "--delay",
            "1ms",
            "--duration",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut echoed = 0;
    let start = Instant::now();
    let mut buf = [0u8; 64];
    while echoed < 20 && start.elapsed() < Duration::from_millis(1500) {
        client.send_to(b"ping", &listen).unwrap();
        if let Ok((n, from)) = target.recv_from(&mut buf) {
            target.send_to(&buf[..n], from).unwrap();
            if client.recv_from(&mut buf).is_ok() {
                echoed += 1;
            }
        }
    }
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(echoed >= 10, "{echoed} round trips through the relay: {t}");
    assert!(
        t.contains("delay 1ms") && t.contains("final counters"),
        "{t}"
    );
    assert!(t.contains("up   in ") && t.contains("down in "), "{t}");
}

#[test]
fn netem_bare_port_listens_on_loopback_and_every_interface_warns() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let o = run(&[
        "netem",
        "--listen",
        &port,
        "--target",
        "127.0.0.1:9",
        "--duration",
        "100ms",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains(&format!("udp 127.0.0.1:{port} ")), "{t}");
    assert!(t.contains("the first client only"), "{t}");
    assert!(!t.contains("every interface"), "{t}");

    let o = run(&[
        "netem",
        "--listen",
        "0.0.0.0:0",
        "--target",
        "127.0.0.1:9",
        "--follow-source",
        "--duration",
        "100ms",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("warning: listening on every interface (0.0.0.0:0)")
            && t.contains("take the stream over")
            && t.contains("the newest source (--follow-source)"),
        "{t}"
    );
}
