//! Multipath end to end: a real host and client, real x264 and FFmpeg, real UDP, and two paths
//! through two impairment relays (untether-net's, on loopback). One path goes dark for 1.5 s
//! mid-stream; the session must survive it, keep showing frames over the other path, and take
//! the path back when it returns.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{ClientOptions, Display};
use untether::config::ConfigToml;
use untether::{DemoOptions, HostOptions};
use untether_net::impair::{Impairment, Outage};
use untether_net::relay::{Relay, RelayConfig};

fn localhost() -> std::net::SocketAddr {
    ([127, 0, 0, 1], 0).into()
}

fn run(
    scheduler: &str,
    outage_on_main_path: bool,
) -> (untether::client::ClientRun, untether::HostSummary) {
    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "640x360".into();
    cfg.video.bitrate_kbps = 3000;
    cfg.network.scheduler = scheduler.into();
    cfg.host.bind = "127.0.0.1:0".into();
    let opts = DemoOptions {
        host: HostOptions {
            video: cfg.video.validate().unwrap(),
            scene: cfg.scene.clone(),
            host: cfg.host.clone(),
            network: cfg.network.clone(),
        },
        client: ClientOptions {
            host: localhost(),
            client: cfg.client.clone(),
            network: cfg.network.clone(),
            display: Display::Headless,
            duration: Some(Duration::from_secs(5)),
            save_frame: None,
        },
    };
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let host = untether::Host::start_with(
        opts.host.clone(),
        untether::HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host starts");
    // Path 0 or path 1 is dark both ways from 1.5 s to 3 s after the relays start.
    let outage = Impairment {
        outages: vec![Outage {
            start_us: 1_500_000,
            duration_us: 1_500_000,
        }],
        ..Default::default()
    };
    let relay = |dark: bool| {
        let mut c = RelayConfig::new(localhost(), host.local_addr());
        if dark {
            c.down = outage.clone();
            c.up = outage.clone();
        }
        Relay::start(c).expect("relay starts")
    };
    let main = relay(outage_on_main_path);
    let second = relay(!outage_on_main_path);
    let mut client = opts.client.clone();
    client.host = main.listen_addr();
    client.client.paths = vec![second.listen_addr().to_string()];
    let run = untether::client::run_client_with(
        &client,
        untether::ClientIo {
            trust: client_trust,
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the session survives a dead path");
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    main.stop();
    second.stop();
    assert!(summary.fatal.is_none(), "host failed: {:?}", summary.fatal);
    (run, summary)
}

/// The longest time between two shown frames after the first one.
fn longest_freeze_ms(run: &untether::client::ClientRun) -> f64 {
    let shown: Vec<u64> = run
        .records
        .iter()
        .filter(|r| r.shown_us != 0)
        .map(|r| r.shown_us)
        .collect();
    shown
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(u64::MAX) as f64
        / 1000.0
}

#[test]
fn redundant_scheduler_keeps_streaming_when_the_main_path_dies() {
    let (run, host) = run("redundant", true);
    assert_eq!(host.paths.len(), 2, "both paths in use: {:?}", host.paths);
    assert!(host.paths.iter().all(|p| p.validated));
    let dead = &host.paths[0];
    assert!(
        dead.deaths >= 1,
        "the main path was declared dead: {dead:?}"
    );
    assert!(dead.alive, "and came back: {dead:?}");
    assert!(
        run.decoded as f64 >= 0.9 * host.sent as f64,
        "decoded {} of {} frames sent",
        run.decoded,
        host.sent
    );
    let freeze = longest_freeze_ms(&run);
    eprintln!(
        "freeze {freeze:.0} ms, decoded {} of {} sent, host paths {:?}, client paths {:?}",
        run.decoded, host.sent, host.paths, run.stats.paths
    );
    assert!(
        freeze < 250.0,
        "froze {freeze:.0} ms although the second path was up"
    );
    // Both paths delivered first copies; the redundant copies were dropped as duplicates.
    let p = &run.stats.paths;
    assert!(p[0].first_copies > 0 && p[1].first_copies > 0, "{p:?}");
    assert!(p[0].duplicates + p[1].duplicates > 0, "{p:?}");
    assert_eq!(run.decode_errors, 0);
}

#[test]
fn lowest_delay_scheduler_fails_over_to_the_live_path() {
    let (run, host) = run("lowest-delay", false);
    assert_eq!(host.paths.len(), 2, "{:?}", host.paths);
    assert!(host.paths[1].deaths >= 1, "{:?}", host.paths[1]);
    assert!(
        run.decoded as f64 >= 0.8 * host.sent as f64,
        "decoded {} of {} frames sent",
        run.decoded,
        host.sent
    );
    // Failing over takes the path timeout (500 ms) and a keyframe at most.
    let freeze = longest_freeze_ms(&run);
    eprintln!(
        "freeze {freeze:.0} ms, decoded {} of {} sent, host paths {:?}, client paths {:?}",
        run.decoded, host.sent, host.paths, run.stats.paths
    );
    assert!(freeze < 1000.0, "froze {freeze:.0} ms");
    // Lowest-delay sends video once: few duplicates.
    let dup: u64 = run.stats.paths.iter().map(|p| p.duplicates).sum();
    assert!(
        dup * 10 < run.stats.datagrams_received,
        "{dup} duplicates of {}",
        run.stats.datagrams_received
    );
}
