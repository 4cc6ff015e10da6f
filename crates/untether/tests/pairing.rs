//! Identities and pairing through the runtime: a host and clients in this process over loopback
//! UDP, each with its own temporary state directory (keys, allowlist, requests, known hosts).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use untether::client::{run_client_with, ClientError, ClientIo, ClientOptions, ClientRun, Display};
use untether::config::{ConfigToml, Resolution};
use untether::identity::{fingerprint, key_hex, Role, StateDir};
use untether::{Host, HostOptions};
use untether_proto::RejectReason;

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "untether-pairing-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn start_host(state: &Path, access: &str) -> Host {
    start_host_at(state, access, "127.0.0.1:0")
}

fn start_host_at(state: &Path, access: &str, bind: &str) -> Host {
    let mut o = HostOptions::default();
    o.host.bind = bind.into();
    o.host.access = untether::config::parse_key(access).unwrap();
    o.host.state_dir = state.display().to_string();
    o.video.resolution = Resolution {
        width: 640,
        height: 360,
    };
    o.video.fps = 30;
    Host::start(o).expect("host starts")
}

fn client(host: &Host, state: &Path, pin: Option<&str>) -> Result<ClientRun, ClientError> {
    client_at(host.local_addr(), "the-host", state, pin)
}

/// A client of the host at `addr`, which the user called `label`.
fn client_at(
    addr: SocketAddr,
    label: &str,
    state: &Path,
    pin: Option<&str>,
) -> Result<ClientRun, ClientError> {
    let cfg = ConfigToml::default();
    let mut c = cfg.client;
    c.state_dir = state.display().to_string();
    c.name = "test-client".into();
    let opts = ClientOptions {
        vr: Default::default(),
        host: addr,
        client: c,
        network: cfg.network,
        display: Display::Headless,
        duration: Some(Duration::from_millis(700)),
        save_frame: None,
    };
    run_client_with(
        &opts,
        ClientIo {
            pin: pin.map(str::to_string),
            host_label: Some(label.into()),
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
}

fn client_key(state: &Path) -> String {
    let kp = StateDir::at(state)
        .load_or_create_identity(Role::Client)
        .unwrap();
    key_hex(&kp.public)
}

#[test]
fn unknown_client_is_refused_and_pending_until_approved() {
    let (hs, cs) = (tmp("host-a"), tmp("client-a"));
    let host = start_host(&hs, "allowlist");
    let t = Instant::now();
    let err = client(&host, &cs, None).expect_err("an unknown client is refused");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    match &err {
        ClientError::Rejected {
            reason, message, ..
        } => {
            assert_eq!(*reason, RejectReason::PendingApproval);
            assert!(message.contains("untether pair approve"), "{message}");
        }
        e => panic!("expected a pending-approval refusal, got {e}"),
    }
    assert!(err.to_string().contains("not paired"), "{err}");
    // The host wrote the request down, with the client's key and name.
    let dir = StateDir::at(&hs);
    let pending = dir.pending().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].key, client_key(&cs));
    assert_eq!(pending[0].name, "test-client");
    // Not by its place in the list, nor by the name the client chose.
    assert!(dir.approve("1").is_err() && dir.approve("test-client").is_err());
    // The user approves it by fingerprint (as `untether pair approve FINGERPRINT` does); the
    // running host re-reads the allowlist within a second and the client gets in.
    dir.approve(&pending[0].fingerprint).unwrap();
    assert!(dir.pending().unwrap().is_empty());
    std::thread::sleep(Duration::from_millis(1200));
    let run = client(&host, &cs, None).expect("the approved client connects");
    assert!(
        run.params.is_some() && run.decoded > 0,
        "decoded {}",
        run.decoded
    );
    // Revoked: refused again, without a new request.
    let me = StateDir::at(&cs)
        .load_or_create_identity(Role::Client)
        .unwrap();
    dir.revoke(&fingerprint(&me.public)).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    match client(&host, &cs, None) {
        Err(ClientError::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::NotAllowed),
        r => panic!(
            "a revoked client must be refused: {:?}",
            r.map(|r| r.decoded)
        ),
    }
    host.stop();
    let _ = std::fs::remove_dir_all(&hs);
    let _ = std::fs::remove_dir_all(&cs);
}

#[test]
fn pin_pairing_adds_the_client_and_a_wrong_pin_is_refused() {
    let (hs, cs, other) = (tmp("host-b"), tmp("client-b"), tmp("client-b2"));
    let host = start_host(&hs, "pin");
    let pin = host.pairing_pin().expect("pin mode shows a PIN");
    assert_eq!(pin.len(), 6);
    // The file is picked up by the network thread at its first poll.
    std::thread::sleep(Duration::from_millis(200));
    let wrong = if pin == "000000" { "111111" } else { "000000" };
    let t = Instant::now();
    match client(&host, &other, Some(wrong)) {
        Err(ClientError::Rejected {
            reason, message, ..
        }) => {
            assert_eq!(reason, RejectReason::Pin);
            assert!(message.contains("wrong PIN"), "{message}");
        }
        r => panic!("a wrong PIN must be refused: {:?}", r.map(|r| r.decoded)),
    }
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert!(StateDir::at(&hs).allowed().unwrap().is_empty());
    // The right PIN: connected, and on the allowlist from now on.
    let run = client(&host, &cs, Some(&pin)).expect("the right PIN pairs");
    assert!(run.params.is_some());
    let allowed = StateDir::at(&hs).allowed().unwrap();
    assert_eq!(allowed.len(), 1);
    assert_eq!(allowed[0].key, client_key(&cs));
    assert_eq!(host.paired_clients().len(), 1);
    assert_eq!(host.pairing_pin(), None, "the PIN is single-use");
    // The client pinned the host's key.
    let known = StateDir::at(&cs).known_host("the-host").unwrap();
    assert_eq!(known, Some(host.public_key()));
    // Next time it connects without a PIN.
    let run = client(&host, &cs, None).expect("a paired client connects");
    assert!(run.params.is_some());
    host.stop();
    for d in [&hs, &cs, &other] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_changed_host_key_is_refused_naming_known_hosts() {
    let (hs1, hs2, cs) = (tmp("host-c1"), tmp("host-c2"), tmp("client-c"));
    let first = start_host(&hs1, "open");
    let run = client(&first, &cs, None).expect("trust on first use");
    assert_eq!(run.host_key, Some(first.public_key()));
    first.stop();
    // Another machine (another key) answers under the same name.
    let second = start_host(&hs2, "open");
    let t = Instant::now();
    let err = client(&second, &cs, None).expect_err("a changed host key is refused");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    let text = err.to_string();
    assert!(
        matches!(err, ClientError::HostKeyChanged { .. }),
        "expected HostKeyChanged: {text}"
    );
    assert!(text.contains("known_hosts.json"), "{text}");
    assert!(text.contains(&fingerprint(&second.public_key())), "{text}");
    second.stop();
    for d in [&hs1, &hs2, &cs] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Issue 15, item 4: `127.0.0.1:P` and `localhost:P` are one host. A key pinned under one name
/// is found by address under the other, so an impostor on that address is refused whatever
/// the user typed; a name and an address pinning different keys are refused before connecting.
#[test]
fn a_host_is_pinned_by_its_address_too() {
    let (hs1, hs2, cs) = (tmp("host-d1"), tmp("host-d2"), tmp("client-d"));
    let first = start_host(&hs1, "open");
    let addr = first.local_addr();
    let first_key = first.public_key();
    let by_ip = addr.to_string();
    let by_name = format!("localhost:{}", addr.port());
    let run = client_at(addr, &by_ip, &cs, None).expect("trust on first use");
    assert_eq!(run.host_key, Some(first.public_key()));
    let known = StateDir::at(&cs).known_hosts().unwrap();
    assert_eq!(known.len(), 1);
    assert_eq!(
        (known[0].host.as_str(), known[0].addr.as_str()),
        (by_ip.as_str(), by_ip.as_str())
    );
    // The same host under another name: connects, and the name is pinned too.
    client_at(addr, &by_name, &cs, None).expect("the same host under another name");
    assert_eq!(
        StateDir::at(&cs).known_host(&by_name).unwrap(),
        Some(first.public_key())
    );
    first.stop();
    // An impostor takes the address; the user types a name never used before.
    let impostor = start_host_at(&hs2, "open", &by_ip);
    let t = Instant::now();
    let err = client_at(addr, "fresh-name", &cs, None).expect_err("the impostor is refused");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    let text = err.to_string();
    assert!(matches!(err, ClientError::HostKeyChanged { .. }), "{text}");
    assert!(
        text.contains(&by_ip) && text.contains("known_hosts.json"),
        "{text}"
    );
    assert!(
        text.contains(&fingerprint(&impostor.public_key())),
        "{text}"
    );
    assert_eq!(StateDir::at(&cs).known_host("fresh-name").unwrap(), None);
    impostor.stop();
    // A name pinning one key and the address another: refused, naming both and the file.
    StateDir::at(&cs)
        .trust_host("the-box", "192.0.2.1:9710", &[9; 32])
        .unwrap();
    let err = client_at(addr, "the-box", &cs, None).expect_err("disagreeing pins are refused");
    let text = err.to_string();
    assert!(matches!(err, ClientError::HostPinConflict { .. }), "{text}");
    assert!(
        text.contains("\"the-box\"") && text.contains(&fingerprint(&[9; 32])),
        "{text}"
    );
    assert!(
        text.contains(&by_ip) && text.contains(&fingerprint(&first_key)),
        "{text}"
    );
    assert!(text.contains("known_hosts.json"), "{text}");
    for d in [&hs1, &hs2, &cs] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn pointer_and_head_pose_travel_on_the_latest_wins_channel_and_reach_the_scene() {
    use untether_proto::state::keys;
    use untether_proto::{InputEvent, StateValue};
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.video.resolution = Resolution {
        width: 640,
        height: 360,
    };
    let host = Host::start_with(
        o,
        untether::HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host");
    let opts = ClientOptions::headless(host.local_addr(), Duration::from_millis(1500));
    let (tx, rx) = std::sync::mpsc::channel();
    let c = std::thread::spawn(move || {
        run_client_with(
            &opts,
            ClientIo {
                trust: client_trust,
                inject: Some(rx),
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
    });
    assert!(host.wait_for_client(Duration::from_secs(3)));
    std::thread::sleep(Duration::from_millis(200));
    for x in [10, 20, 30, 40] {
        tx.send(InputEvent::PointerMotion {
            x,
            y: 5,
            dx: 10,
            dy: 0,
        })
        .unwrap();
    }
    tx.send(InputEvent::HeadPose {
        yaw: 12.0,
        pitch: -3.0,
        roll: 0.0,
    })
    .unwrap();
    // While the client is connected, the host holds the newest values.
    std::thread::sleep(Duration::from_millis(400));
    let p = host.state_value(keys::POINTER).expect("pointer state");
    assert_eq!(p.value, StateValue::Pointer { x: 40, y: 5 });
    let h = host.state_value(keys::HEAD_POSE).expect("head pose state");
    assert_eq!(
        h.value,
        StateValue::Angles {
            yaw: 12.0,
            pitch: -3.0,
            roll: 0.0
        }
    );
    let run = c.join().unwrap().expect("client runs");
    assert!(run.state_updates >= 5, "{}", run.state_updates);
    assert_eq!(run.inputs_sent, 0, "nothing went on the reliable channel");
    let s = host.stop();
    // The scene applied the pointer (as motion) and the head pose.
    assert!(s.inputs_applied >= 1, "{s:?}");
}
