//! Intra refresh end to end: a real host (x264 with a sweep every 15 frames) and two clients
//! one after the other over loopback UDP. The second joins mid-stream: it gets no keyframe,
//! decodes from the next sweep start, shows nothing until the sweep is complete, then only
//! clean pictures (every shown frame's stamp reads back).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{ClientOptions, Display};
use untether::config::ConfigToml;
use untether::HostOptions;

#[test]
fn a_client_joining_an_intra_refresh_stream_waits_for_a_sweep_and_never_forces_a_keyframe() {
    let period = 15;
    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "640x360".into();
    cfg.video.encoder = Some("libx264".into());
    cfg.video.refresh = "intra".into();
    cfg.video.refresh_period = period;
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut host_opts = HostOptions {
        video: cfg.video.validate().unwrap(),
        scene: cfg.scene.clone(),
        host: cfg.host.clone(),
        network: cfg.network.clone(),
        vr: Default::default(),
        webrtc: Default::default(),
    };
    host_opts.host.bind = "127.0.0.1:0".into();
    let host = untether::Host::start_with(
        host_opts,
        untether::HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host starts");
    assert_eq!(host.encoder_info().unwrap().refresh_frames(), period);
    let client = |seconds: f64| {
        untether::client::run_client_with(
            &ClientOptions {
                host: host.local_addr(),
                client: cfg.client.clone(),
                network: cfg.network.clone(),
                display: Display::Headless,
                duration: Some(Duration::from_secs_f64(seconds)),
                save_frame: None,
                vr: Default::default(),
            },
            untether::ClientIo {
                trust: client_trust.clone(),
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
        .expect("client runs")
    };
    let first = client(1.5);
    let second = client(2.5);
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "{:?}", summary.fatal);
    assert!(first.shown > 20, "first client showed {}", first.shown);
    // The second client joined mid-stream: held frames, no keyframe asked for or forced.
    assert!(
        second.held >= period as u64 - 1,
        "held {} (a sweep is {period} frames)",
        second.held
    );
    assert!(second.shown > 30, "second client showed {}", second.shown);
    assert_eq!(second.stats.keyframe_requests_sent, 0);
    assert_eq!(second.decode_errors, 0);
    assert_eq!(
        summary.forced_keyframes, 1,
        "only the stream's first frame is an IDR"
    );
    assert!(
        summary.refresh_sweeps >= 3,
        "{} sweeps",
        summary.refresh_sweeps
    );
    // Every frame it showed is a clean picture: its stamp reads back.
    let shown: Vec<_> = second.records.iter().filter(|r| r.shown_us != 0).collect();
    assert!(!shown.is_empty());
    let unreadable = shown.iter().filter(|r| r.stamp.is_none()).count();
    assert_eq!(
        unreadable,
        0,
        "{unreadable} of {} shown frames",
        shown.len()
    );
    assert_eq!(second.stamp_unreadable, 0);
}
