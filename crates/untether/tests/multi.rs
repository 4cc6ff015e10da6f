//! Several clients on one host, in this process over loopback UDP with the real encoder and
//! decoders: four clients from one encode, viewer input dropped unless granted and control
//! handed over through the state directory (as `untether pair` writes it), and a viewer behind
//! a slow impairment relay (what `untether netem --rate` runs) paused or dropped while the
//! controller's frames keep coming. A few seconds each.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use untether::client::{ClientIo, ClientOptions, ClientRun, Display};
use untether::config::{ConfigToml, Resolution};
use untether::host::{ClientSummary, HostSetup, SourceSpec};
use untether::identity::{ephemeral_keypair, Access, ClientTrust, HostTrust, StateDir};
use untether::{Host, HostOptions};
use untether_media::codec::InputPicture;
use untether_media::scene::{Scene, SceneConfig};
use untether_media::BgraFrame;
use untether_proto::{fingerprint, ClientRole, StaticKeypair};

fn host_options(width: u32, height: u32, bitrate_kbps: u32) -> HostOptions {
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.video.resolution = Resolution { width, height };
    o.video.bitrate_kbps = bitrate_kbps;
    o
}

fn client_options(host: SocketAddr, seconds: f64, probe_ms: u64, name: &str) -> ClientOptions {
    let mut cfg = ConfigToml::default();
    cfg.client.input_probe_interval_ms = probe_ms;
    cfg.client.name = name.into();
    ClientOptions {
        host,
        client: cfg.client,
        network: cfg.network,
        display: Display::Headless,
        duration: Some(Duration::from_secs_f64(seconds)),
        save_frame: None,
        vr: Default::default(),
    }
}

/// A client run on its own thread, with this identity: what it measured, and the error that
/// ended it (None: its duration ran out).
fn spawn_client(
    options: ClientOptions,
    id: StaticKeypair,
) -> JoinHandle<(ClientRun, Option<String>)> {
    std::thread::spawn(move || {
        let (run, error) = untether::client::run_client_to_end(
            &options,
            ClientIo {
                trust: ClientTrust::Memory {
                    identity: id,
                    host_key: None,
                },
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
        .expect("client starts");
        (run, error.map(|e| e.to_string()))
    })
}

/// A client run that must end on its own (its duration).
fn ended_well(h: JoinHandle<(ClientRun, Option<String>)>) -> ClientRun {
    let (run, error) = h.join().expect("client thread");
    assert!(error.is_none(), "the client ended on an error: {error:?}");
    run
}

/// Waits up to `secs` for `cond`.
fn wait_for(secs: f64, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < secs {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

fn by_fingerprint<'a>(clients: &'a [ClientSummary], id: &StaticKeypair) -> &'a ClientSummary {
    let fp = fingerprint(&id.public);
    clients
        .iter()
        .rev()
        .find(|c| c.fingerprint == fp)
        .unwrap_or_else(|| panic!("client {fp} in {clients:?}"))
}

#[test]
fn four_clients_at_once_each_show_95_percent_of_the_frames_of_one_encode() {
    let host_id = ephemeral_keypair();
    let ids: Vec<StaticKeypair> = (0..4).map(|_| ephemeral_keypair()).collect();
    let host = Host::start_with(
        host_options(640, 360, 2000),
        HostSetup {
            source: SourceSpec::App,
            encoder_thread: false,
            trust: HostTrust::Memory {
                identity: host_id,
                access: Access::Allowlist,
                allowed: ids.iter().map(|k| k.public).collect(),
            },
            ..Default::default()
        },
    )
    .expect("host starts");
    let addr = host.local_addr();
    let clients: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| spawn_client(client_options(addr, 4.5, 0, &format!("c{i}")), id.clone()))
        .collect();
    assert!(
        wait_for(3.0, || host.client_count() == 4),
        "four clients connect at once: {} did",
        host.client_count()
    );
    // The application renders and sends 2.5 s of frames on its own thread (synchronous mode:
    // exactly one encode per frame, whoever watches).
    let mut sender = host.frame_sender().expect("a frame sender");
    let mut scene = Scene::new(SceneConfig::new(640, 360)).expect("scene");
    let mut pixels = BgraFrame::new(640, 360).expect("frame");
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_millis(2500) {
        scene.render(n as f64 / 60.0, &mut pixels);
        let picture = InputPicture::Bgra {
            width: pixels.width,
            height: pixels.height,
            data: &pixels.data,
            stride: pixels.stride,
        };
        let info = sender.send(&picture, None).expect("send");
        assert!(info.sent);
        n += 1;
        let next = Duration::from_micros(16_667 * n as u64);
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    // While all four watch: one controller (the first admitted), three viewers.
    let now = host.clients();
    assert_eq!(
        now.iter().filter(|c| c.role == "controller").count(),
        1,
        "{now:?}"
    );
    assert_eq!(
        now.iter().filter(|c| c.role == "viewer").count(),
        3,
        "{now:?}"
    );
    // Control is handed by fingerprint the way `untether pair` names a client (≥ 8 of its
    // characters or the hex key), never by 4 characters or a name the client chose.
    let fp = fingerprint(&ids[3].public);
    for wrong in [&fp[..4], "c3"] {
        let e = host.hand_control(wrong).expect_err("refused");
        assert!(e.to_string().contains("fingerprint"), "{e}");
        assert!(host.grant_input(wrong, true).is_err());
    }
    let c = host
        .hand_control(&fp[..9])
        .expect("hand control by 8+ characters");
    assert_eq!(c.fingerprint, fp);
    let runs: Vec<ClientRun> = clients.into_iter().map(ended_well).collect();
    drop(sender);
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    // One encode for all four: every captured frame encoded once, each sent to all.
    assert_eq!(summary.captured, n as u64);
    assert_eq!(summary.encoded, summary.captured);
    assert!(
        summary.frame_copies_sent >= 4 * summary.sent - 4,
        "{summary:?}"
    );
    // Each was told its role (as the first ones leave at the end, the next take control).
    assert!(runs.iter().all(|r| r.role.is_some()));
    for (run, id) in runs.iter().zip(&ids) {
        let c = by_fingerprint(&summary.clients, id);
        assert!(c.frames_sent as u32 + 2 >= n, "{c:?}");
        assert!(
            run.shown as f64 >= 0.95 * c.frames_sent as f64,
            "client {}: shown {} of {} sent ({} decoded, {} replaced before shown, {} lost)",
            c.id,
            run.shown,
            c.frames_sent,
            run.decoded,
            run.dropped_presenter,
            run.stats.frames_lost
        );
    }
}

#[test]
fn viewer_input_is_dropped_unless_granted_and_control_is_handed_over() {
    let dir = std::env::temp_dir().join(format!("untether-multi-roles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = host_options(640, 360, 2000);
    options.host.access = untether::api::Access::Open;
    options.host.state_dir = dir.display().to_string();
    let host = Host::start_with(options, HostSetup::default()).expect("host starts");
    let addr = host.local_addr();
    let (a, b) = (ephemeral_keypair(), ephemeral_keypair());
    // Both send a small input every 100 ms; A joins first and controls.
    let run_a = spawn_client(client_options(addr, 7.5, 100, "a"), a.clone());
    assert!(wait_for(3.0, || host.client_count() == 1));
    let run_b = spawn_client(client_options(addr, 5.0, 100, "b"), b.clone());
    assert!(wait_for(3.0, || host.client_count() == 2));
    let state = StateDir::at(&dir);
    let dropped = |h: &Host| by_fingerprint(&h.clients(), &b).inputs_dropped;
    // B's input is dropped and counted; A's applied.
    assert!(
        wait_for(3.0, || dropped(&host) >= 5),
        "{:?}",
        host.clients()
    );
    let cs = host.clients();
    assert_eq!(by_fingerprint(&cs, &a).role, "controller");
    assert_eq!(by_fingerprint(&cs, &a).inputs_dropped, 0);
    assert_eq!(by_fingerprint(&cs, &b).role, "viewer");
    // `untether pair grant FINGERPRINT input`: B is a connected client the host wrote down.
    let fp_b = fingerprint(&b.public);
    state.grant_input(&fp_b[..9]).expect("grant");
    assert!(wait_for(3.0, || by_fingerprint(&host.clients(), &b).input_granted));
    let before = by_fingerprint(&host.clients(), &b).clone();
    std::thread::sleep(Duration::from_millis(600));
    let after = by_fingerprint(&host.clients(), &b).clone();
    assert_eq!(
        after.inputs_dropped, before.inputs_dropped,
        "granted: none dropped"
    );
    assert!(after.inputs_received > before.inputs_received);
    // `untether pair control FINGERPRINT`: B controls, A watches.
    state.hand_control(&fp_b).expect("hand control");
    assert!(wait_for(3.0, || by_fingerprint(&host.clients(), &b).role
        == "controller"));
    assert_eq!(by_fingerprint(&host.clients(), &a).role, "viewer");
    // B leaves: A, the one left, takes control again.
    let run_b = ended_well(run_b);
    assert!(wait_for(3.0, || by_fingerprint(&host.clients(), &a).role
        == "controller"));
    let run_a = ended_well(run_a);
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    // Each was told: A ends as the controller, B was a granted viewer, then the controller.
    assert_eq!(run_a.role, Some(ClientRole::Controller));
    assert_eq!(run_b.role, Some(ClientRole::Controller));
    assert!(summary.inputs_dropped_viewer >= 5);
    assert!(summary
        .events
        .iter()
        .any(|e| e.contains("is now the controller")));
    // The host removed its list of connected clients when it stopped.
    assert!(state.connected_clients().expect("read").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_viewer_behind_a_slow_relay_is_paused_or_dropped_while_the_controller_keeps_its_frames() {
    use untether_netem::impair::RateLimit;
    use untether_netem::relay::{Relay, RelayConfig};
    let host_id = ephemeral_keypair();
    let (ctl, slow) = (ephemeral_keypair(), ephemeral_keypair());
    let host = Host::start_with(
        host_options(640, 360, 3000),
        HostSetup {
            trust: HostTrust::Memory {
                identity: host_id,
                access: Access::Allowlist,
                allowed: vec![ctl.public, slow.public],
            },
            ..Default::default()
        },
    )
    .expect("host starts");
    let addr = host.local_addr();
    let run_ctl = spawn_client(client_options(addr, 6.0, 0, "controller"), ctl.clone());
    assert!(wait_for(3.0, || host.client_count() == 1));
    // The viewer's video comes through a 500 kbit/s link: far below the 3 Mbit/s stream.
    let mut relay = RelayConfig::new("127.0.0.1:0".parse().unwrap(), addr);
    relay.down.rate = Some(RateLimit::new(500_000));
    let relay = Relay::start(relay).expect("relay starts");
    let run_slow = spawn_client(
        client_options(relay.listen_addr(), 4.5, 0, "slow"),
        slow.clone(),
    );
    let (run_slow, slow_error) = run_slow.join().expect("slow client");
    let run_ctl = ended_well(run_ctl);
    relay.stop();
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    let s = by_fingerprint(&summary.clients, &slow);
    assert!(
        summary.viewers_paused + summary.viewers_dropped >= 1,
        "the slow viewer was neither paused nor dropped: {s:?}; {:?}",
        summary.events
    );
    assert!(
        s.pauses >= 1 || s.state.contains("could not carry"),
        "{s:?}"
    );
    // It was told: paused (the Role says so), or dropped with the reason.
    assert!(
        run_slow.times_paused >= 1
            || slow_error
                .as_deref()
                .is_some_and(|e| e.contains("slower than the host's stream")),
        "{:?} {slow_error:?}",
        run_slow.role
    );
    // The controller never waited for it: it showed its frames.
    let c = by_fingerprint(&summary.clients, &ctl);
    assert!(
        run_ctl.shown as f64 >= 0.95 * c.frames_sent as f64,
        "controller: shown {} of {} sent ({} lost)",
        run_ctl.shown,
        c.frames_sent,
        run_ctl.stats.frames_lost
    );
    // (Liveness, not speed: it got frames all along.)
    assert!(c.frames_sent > 30, "{c:?}");
}

/// The application's keyframe requests go through the session's one gate: asked on every
/// frame for half a second, it gets one keyframe per cooldown, not one per frame.
#[test]
fn an_applications_keyframe_requests_pass_the_sessions_cooldown() {
    let host_id = ephemeral_keypair();
    let client_id = ephemeral_keypair();
    let mut options = host_options(640, 360, 1000);
    options.host.keyframe_cooldown_ms = 200;
    let host = Host::start_with(
        options,
        HostSetup {
            source: SourceSpec::App,
            encoder_thread: false,
            trust: HostTrust::Memory {
                identity: host_id,
                access: Access::Allowlist,
                allowed: vec![client_id.public],
            },
            ..Default::default()
        },
    )
    .expect("host starts");
    let client = spawn_client(
        client_options(host.local_addr(), 2.5, 0, "kf"),
        client_id.clone(),
    );
    assert!(
        wait_for(3.0, || host.client_count() == 1),
        "the client connects"
    );
    let mut sender = host.frame_sender().expect("a frame sender");
    let mut scene = Scene::new(SceneConfig::new(640, 360)).expect("scene");
    let mut pixels = BgraFrame::new(640, 360).expect("frame");
    let start = Instant::now();
    let mut asked = 0u32;
    let mut n = 0u32;
    while start.elapsed() < Duration::from_millis(1500) {
        scene.render(n as f64 / 60.0, &mut pixels);
        let picture = InputPicture::Bgra {
            width: pixels.width,
            height: pixels.height,
            data: &pixels.data,
            stride: pixels.stride,
        };
        sender.send(&picture, None).expect("send");
        // From 0.5 s to 1.0 s: a request with every frame (30 of them).
        let t = start.elapsed();
        if t > Duration::from_millis(500) && t < Duration::from_millis(1000) {
            sender.request_keyframe();
            asked += 1;
        }
        n += 1;
        let next = Duration::from_micros(16_667 * n as u64);
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    drop(sender);
    let _ = ended_well(client);
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    // The join's keyframe, then at most one per 200 ms of the 500 ms of requests (and one
    // more at either edge); before, every request made one.
    assert!(asked >= 20, "{asked} requests");
    assert!(
        summary.keyframes >= 2 && summary.keyframes <= 6,
        "{} keyframes for {asked} requests in 0.5 s with a 200 ms cooldown ({} requests ignored)",
        summary.keyframes,
        summary.keyframe_requests_ignored
    );
    assert!(
        summary.keyframe_requests_ignored >= u64::from(asked) - 5,
        "{summary:?}"
    );
}
