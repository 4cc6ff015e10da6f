//! The VR data path end to end, in this process over loopback UDP: a head-motion track on the
//! client → poses on the latest-wins channel → the host's stereo scene renders for the newest
//! pose (orientation and position) → each frame's FramePose → the client's decoded pictures
//! carry it → pose-to-photon read from the presented window's pixels (under Xvfb in `make
//! test`), agreeing with the FramePose metadata.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{run_client_with, ClientOptions, Display};
use untether::config::ConfigToml;
use untether::pose::track::Track;
use untether::{ClientIo, HostOptions, HostSetup};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn frames_carry_the_pose_they_were_rendered_for_and_pose_to_photon_is_read_from_pixels() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    // A turning head, standing 0.3 m right of and 0.2 m behind the rest position.
    let mut track = Track::generate("turn", 10.0, 500).unwrap();
    for (_, p) in track.samples.iter_mut() {
        p.position = [0.3, 0.0, 0.2];
    }
    let file = std::env::temp_dir().join(format!("untether-vr-test-{}.csv", std::process::id()));
    std::fs::write(&file, track.to_text()).unwrap();

    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "640x360".into();
    cfg.scene.spin_deg_per_s = 0.0;
    cfg.scene.walk_speed = 0.0;
    cfg.host.bind = "127.0.0.1:0".into();
    cfg.vr.enabled = true;
    cfg.vr.pose = format!("track:{}", file.display());
    cfg.vr.pose_rate_hz = 500;
    // The picture shows the pose it was rendered for (lens distortion, no late warp): the
    // pixels and the metadata must agree.
    cfg.vr.late_warp = false;
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let host = untether::Host::start_with(
        HostOptions {
            vr: cfg.vr.clone(),
            video: cfg.video.validate().unwrap(),
            scene: cfg.scene.clone(),
            host: cfg.host.clone(),
            network: cfg.network.clone(),
            webrtc: Default::default(),
        },
        HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host starts");
    let opts = ClientOptions {
        vr: cfg.vr.clone(),
        host: host.local_addr(),
        client: cfg.client.clone(),
        network: cfg.network.clone(),
        display: Display::Window,
        duration: Some(Duration::from_secs(3)),
        save_frame: None,
    };
    let run = run_client_with(
        &opts,
        ClientIo {
            trust: client_trust,
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client runs");
    let head = host.head_pose();
    let summary = host.stop();
    std::fs::remove_file(&file).ok();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);

    // The host kept the whole pose, position included, with the client's sample time.
    let head = head.expect("the host has the client's head pose");
    assert!(head.sample_us > 0);
    assert_eq!(head.pose.position, [0.3, 0.0, 0.2]);
    // Nearly every decoded frame knows the pose it was rendered for (each FramePose is sent
    // twice; the first frames may precede the first pose).
    assert!(run.decoded > 60, "{} frames decoded", run.decoded);
    assert!(
        run.frames_with_pose * 10 >= run.decoded * 9,
        "{} of {} frames with a pose",
        run.frames_with_pose,
        run.decoded
    );
    let posed: Vec<_> = run.records.iter().filter_map(|r| r.pose).collect();
    assert!(posed.iter().all(|p| p.pose.position == [0.3, 0.0, 0.2]));
    // Pose-to-photon from the window's pixels, and from the FramePose metadata: the picture
    // shows the pose it was rendered for (late warp off), so both agree within the
    // track's sampling (2 ms) and the marker's reading.
    assert!(
        run.pose_to_photon.len() >= 30,
        "{} measured; unread {}, ambiguous {}, unmatched {}",
        run.pose_to_photon.len(),
        run.pose_photon_unread,
        run.pose_photon_ambiguous,
        run.pose_photon_unmatched
    );
    let pixels = median(
        run.pose_to_photon
            .iter()
            .map(|&(_, l)| l as f64 / 1000.0)
            .collect(),
    );
    let metadata = median(
        run.records
            .iter()
            .filter(|r| r.shown_us > 0)
            .filter_map(|r| r.pose.map(|p| (r.shown_us - p.sample_us) as f64 / 1000.0))
            .collect(),
    );
    assert!(
        (pixels - metadata).abs() < 8.0,
        "pose-to-photon from pixels {pixels:.1} ms, from the frames' poses {metadata:.1} ms"
    );
}

/// Late warp on, in a real window: what the presented pixels show is the rendered frame turned
/// to the newest local pose, so they show a newer pose than the one the frame was rendered for
/// (pose-to-photon from pixels below the FramePose metadata's), and every present is read.
#[test]
fn late_warp_shows_a_newer_pose_than_the_frame_was_rendered_for() {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return;
    }
    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "640x360".into();
    cfg.scene.spin_deg_per_s = 0.0;
    cfg.scene.walk_speed = 0.0;
    cfg.host.bind = "127.0.0.1:0".into();
    cfg.vr.enabled = true;
    cfg.vr.pose = "synthetic:turn".into();
    cfg.vr.late_warp = true;
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let host = untether::Host::start_with(
        HostOptions {
            vr: cfg.vr.clone(),
            video: cfg.video.validate().unwrap(),
            scene: cfg.scene.clone(),
            host: cfg.host.clone(),
            network: cfg.network.clone(),
            webrtc: Default::default(),
        },
        HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host starts");
    let opts = ClientOptions {
        vr: cfg.vr.clone(),
        host: host.local_addr(),
        client: cfg.client.clone(),
        network: cfg.network.clone(),
        display: Display::Window,
        duration: Some(Duration::from_secs(3)),
        save_frame: None,
    };
    let io = ClientIo {
        trust: client_trust,
        ..Default::default()
    };
    let run = run_client_with(&opts, io, Arc::new(AtomicBool::new(false))).expect("client runs");
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    assert_eq!(run.presenter.as_deref(), Some("gl-window-vr"));
    assert!(
        run.pose_to_photon.len() >= 30,
        "{} measured; unread {}, ambiguous {}, unmatched {}",
        run.pose_to_photon.len(),
        run.pose_photon_unread,
        run.pose_photon_ambiguous,
        run.pose_photon_unmatched
    );
    let pixels = median(
        run.pose_to_photon
            .iter()
            .map(|&(_, l)| l as f64 / 1000.0)
            .collect(),
    );
    let metadata = median(
        run.records
            .iter()
            .filter(|r| r.shown_us > 0)
            .filter_map(|r| r.pose.map(|p| (r.shown_us - p.sample_us) as f64 / 1000.0))
            .collect(),
    );
    assert!(
        pixels < metadata,
        "with late warp the pixels show a pose {pixels:.1} ms old, the frames were rendered \
         for poses {metadata:.1} ms old"
    );
}

/// The application API: the host renders for the client's pose and sends the frame with it
/// (`send_frame_with_pose`), publishes state the client reads (the latest-wins channel the other
/// way), and the client's decoded frames carry the pose. Headless, no display needed.
#[test]
fn the_api_sends_frames_with_their_pose_and_state_goes_both_ways() {
    use untether::api::{ClientContext, Frame, HostContext, StateValue};
    let (w, h) = (640u32, 360u32);
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut host = HostContext::builder()
        .size(w, h)
        .fps(30)
        .bind("127.0.0.1:0")
        .synchronous(true)
        .trust(host_trust)
        .build()
        .expect("host");
    let mut b = ClientContext::builder(host.local_addr())
        .trust(client_trust)
        .duration(Some(Duration::from_secs(3)));
    b.options_mut().vr.pose = "synthetic:sweep".into();
    b.options_mut().vr.pose_rate_hz = 250;
    let view = b.host_state();
    let mut client = b.build();
    client.start().unwrap();
    assert!(host.wait_for_client(Duration::from_secs(5)));
    let app_key = untether_proto::state::keys::APP + 7;
    assert!(host.publish_state(app_key, StateValue::Int(-42)));
    let pixels = vec![90u8; (w * h * 4) as usize];
    let mut with_pose = 0;
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(2500) {
        let pose = host.head_pose();
        with_pose += pose.is_some() as u32;
        host.send_frame_with_pose(&Frame::bgra(&pixels, w as usize * 4, w, h), pose)
            .unwrap();
        std::thread::sleep(Duration::from_millis(33));
    }
    let run = client.wait().expect("client run");
    host.stop();
    assert!(
        with_pose > 20,
        "the host had the client's pose for {with_pose} frames"
    );
    assert_eq!(view.get(app_key), Some(StateValue::Int(-42)));
    let posed = run.records.iter().filter(|r| r.pose.is_some()).count();
    assert!(posed > 20, "{posed} decoded frames carry their pose");
    // The sweep track sways sideways: positions arrive as the client sent them, not zero.
    assert!(run
        .records
        .iter()
        .filter_map(|r| r.pose)
        .any(|p| p.pose.position[0] != 0.0));
}

/// A frame handed over after its read-back (`Host::publish_with_pose_at`, what the OpenXR
/// runtime does one frame after `xrEndFrame`) is timed from when it was rendered: every frame
/// the client shows was rendered 40 ms before it was published, so its glass-to-glass is at
/// least that; a render time ahead of the clock is taken as the publish time.
#[test]
fn a_frame_published_after_its_read_back_is_timed_from_its_render() {
    use untether::host::{InputSpec, SourceSpec};
    use untether_media::codec::InputPicture;
    let (w, h) = (640u32, 360u32);
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.video.resolution = untether::config::Resolution {
        width: w,
        height: h,
    };
    o.video.fps = 30;
    let host = untether::Host::start_with(
        o,
        HostSetup {
            source: SourceSpec::App,
            input: InputSpec::Queue,
            encoder_thread: true,
            trust: host_trust,
            ..HostSetup::default()
        },
    )
    .expect("host");
    let opts = ClientOptions::headless(host.local_addr(), Duration::from_secs(2));
    let client = std::thread::spawn(move || {
        let io = ClientIo {
            trust: client_trust,
            ..Default::default()
        };
        run_client_with(&opts, io, Arc::new(AtomicBool::new(false)))
    });
    assert!(host.wait_for_client(Duration::from_secs(10)));
    let pixels = vec![60u8; (w * h * 4) as usize];
    let picture = InputPicture::Bgra {
        width: w,
        height: h,
        data: &pixels,
        stride: w as usize * 4,
    };
    let mut n = 0;
    while !client.is_finished() {
        let now = untether::clock::now_us();
        // Every fifth frame claims a render time ahead of the clock.
        let rendered = if n % 5 == 4 {
            now + 1_000_000
        } else {
            now - 40_000
        };
        host.publish_with_pose_at(&picture, None, rendered)
            .expect("published");
        n += 1;
        std::thread::sleep(Duration::from_millis(33));
    }
    let run = client.join().unwrap().expect("client run");
    host.stop();
    let g2g: Vec<i64> = run
        .records
        .iter()
        .filter(|r| r.shown_us > 0)
        .map(|r| r.shown_us as i64 - r.capture_us as i64)
        .collect();
    assert!(g2g.len() > 10, "{} frames shown", g2g.len());
    // Each shown frame is one rendered 40 ms early or one clamped to its publish time.
    assert!(g2g.iter().all(|&d| d >= 0), "{g2g:?}");
    let early = g2g.iter().filter(|&&d| d >= 40_000).count();
    assert!(early * 2 > g2g.len(), "{early} of {}: {g2g:?}", g2g.len());
}

/// Issue 36 item 7: the host's rumble (`StateValue::Haptic` on `HAPTICS + n`, what
/// `xrApplyHapticFeedback` publishes) reaches the client's game controllers: the network driver
/// hands it to the presenter, whose rumble counts each change and what became of it. No
/// controller is plugged in here, so controller 0's rumble is ignored (a controller, where one
/// is, takes it or refuses it); the motors themselves are tested on SDL's virtual controllers
/// (untether-media's `gamepad` tests). Headless, no display needed.
#[test]
fn the_hosts_rumble_reaches_the_clients_game_controllers() {
    use untether::api::{ClientContext, Frame, HostContext, StateValue};
    use untether_proto::state::keys::HAPTICS;
    let (w, h) = (640u32, 360u32);
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut host = HostContext::builder()
        .size(w, h)
        .fps(30)
        .bind("127.0.0.1:0")
        .synchronous(true)
        .trust(host_trust)
        .build()
        .expect("host");
    let mut client = ClientContext::builder(host.local_addr())
        .trust(client_trust)
        .duration(Some(Duration::from_secs(3)))
        .build();
    client.start().unwrap();
    assert!(host.wait_for_client(Duration::from_secs(5)));
    let pixels = vec![60u8; (w * h * 4) as usize];
    let t = std::time::Instant::now();
    let mut stage = 0;
    while t.elapsed() < Duration::from_millis(2500) {
        let rumble = match (stage, t.elapsed() > Duration::from_millis(1200)) {
            (0, _) => Some((0.5, 0.25)),
            (1, true) => Some((0.0, 0.0)),
            _ => None,
        };
        if let Some((low, high)) = rumble {
            assert!(host.publish_state(HAPTICS, StateValue::Haptic { low, high }));
            stage += 1;
        }
        host.send_frame(&Frame::bgra(&pixels, w as usize * 4, w, h))
            .unwrap();
        std::thread::sleep(Duration::from_millis(33));
    }
    let run = client.wait().expect("client run");
    host.stop();
    let r = run.rumble;
    assert_eq!(r.changes, 2, "a rumble and its stop: {r:?}");
    assert_eq!(
        r.applied + r.unsupported + r.ignored,
        2,
        "each change applied, refused or ignored: {r:?}"
    );
}
