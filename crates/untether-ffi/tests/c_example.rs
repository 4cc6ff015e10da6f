//! The C example (examples/c/stream_scene.c, built by `make example`) streams to a client,
//! which decodes its frames and reads their numbers from the pixels.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{run_client_with, ClientIo, ClientOptions};
use untether::identity::ClientTrust;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/build/stream_scene")
}

/// `state_by_flag`: the state directory and a loopback bind address are set with
/// untether_host_set_state_dir / untether_host_set_bind (--state-dir, --bind) instead of
/// UNTETHER_STATE_DIR and the port feature.
fn stream(mode_args: &[&str], state_by_flag: bool) {
    let exe = example();
    assert!(
        exe.exists(),
        "{} is missing: build it with `make example` (scripts/test.sh does)",
        exe.display()
    );
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The C host keeps its identity in a state directory of its own (UNTETHER_STATE_DIR);
    // this test's client is on its allowlist beforehand.
    let state =
        std::env::temp_dir().join(format!("untether-ffi-test-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let dir = untether::identity::StateDir::at(&state);
    let me = untether::identity::ephemeral_keypair();
    dir.allow(&me.public, "c-example-test").unwrap();
    let mut cmd = Command::new(&exe);
    if state_by_flag {
        cmd.env_remove("UNTETHER_STATE_DIR").args([
            "--state-dir",
            state.to_str().unwrap(),
            "--bind",
            &format!("127.0.0.1:{port}"),
        ]);
    } else {
        cmd.env("UNTETHER_STATE_DIR", &state)
            .args(["--port", &port.to_string()]);
    }
    let child = cmd
        .args(["--frames", "150", "--fps", "60", "--size", "1280x720"])
        .args(mode_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host never bound udp port {port}"
    );
    let opts = ClientOptions::headless(([127, 0, 0, 1], port).into(), Duration::from_secs(2));
    let run = run_client_with(
        &opts,
        ClientIo {
            trust: ClientTrust::Memory {
                identity: me,
                host_key: None,
            },
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stream_scene failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The fingerprint the C host printed (untether_host_fingerprint) is its state directory's
    // key's.
    let key = dir
        .load_or_create_identity(untether::identity::Role::Host)
        .unwrap();
    let fp = untether::identity::fingerprint(&key.public);
    assert!(
        stdout.contains(&format!("host fingerprint {fp}\n")),
        "{fp}: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&state);
    let numbers: Vec<u32> = run
        .records
        .iter()
        .filter_map(|r| r.stamp.map(|s| s.frame_number))
        .collect();
    // Behaviour, not speed: on a loaded 2-core box the 2 s run decodes 25–120 frames.
    assert!(run.decoded >= 15, "decoded {}", run.decoded);
    assert_eq!(run.decode_errors, 0);
    assert_eq!(run.stamp_unreadable, 0, "every frame's number is readable");
    assert!(numbers.windows(2).all(|p| p[0] < p[1]), "{numbers:?}");
    assert!(numbers.len() >= 15, "{numbers:?}");
}

#[test]
fn c_example_streams_synchronously_to_a_client_that_reads_its_frame_numbers() {
    stream(&[], false);
}

#[test]
fn c_example_streams_from_the_sending_thread() {
    stream(&["--thread"], true);
}
