//! The browser figures of docs/BENCHMARKS.md (ignored in `make test`; run them with
//! `cargo test --release -p untether --test browser_bench -- --ignored --nocapture
//! --test-threads=1`): glass-to-glass at 720p60 in headless Chromium beside our own client in
//! the same run, the same through WHIP → Janus, and page input → host scene. Seconds of
//! streaming: `UNTETHER_BENCH_SECONDS` (default 10).

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use common::browser::{chromium, Page};
use untether::client::{ClientOptions, Display};
use untether::config::ConfigToml;
use untether::identity::{memory_pair, HostTrust};
use untether::{Host, HostOptions, HostSetup};

fn seconds() -> u64 {
    std::env::var("UNTETHER_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

/// The standard 720p60 scene host (x264 ultrafast, 10 Mbit/s), serving browsers on loopback.
fn options(publish: Option<String>) -> (ConfigToml, HostOptions) {
    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "1280x720".into();
    cfg.video.fps = 60;
    let mut o = HostOptions {
        video: cfg.video.validate().unwrap(),
        scene: cfg.scene.clone(),
        host: cfg.host.clone(),
        network: cfg.network.clone(),
        webrtc: cfg.webrtc.clone(),
        vr: Default::default(),
    };
    o.host.bind = "127.0.0.1:0".into();
    o.webrtc.listen = "127.0.0.1:0".into();
    if let Some(p) = publish {
        o.webrtc.publish = p;
    }
    (cfg, o)
}

fn page_result(page: &mut Page, secs: u64) -> serde_json::Value {
    let done = page
        .wait_for("done", Duration::from_secs(secs + 60))
        .unwrap_or_else(|| panic!("no result from the page:\n{}", page.tail()));
    serde_json::from_str(&done).unwrap()
}

fn ms(v: &serde_json::Value, k: &str) -> String {
    v[k].as_f64().map_or("–".into(), |x| format!("{x:.1}"))
}

#[test]
#[ignore]
fn bench_browser_beside_our_client_720p60() {
    let Some(chrome) = chromium() else { return };
    let secs = seconds();
    let (cfg, opts) = options(None);
    let (host_trust, client_trust) = memory_pair();
    let host = Host::start_with(
        opts,
        HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .unwrap();
    let client = ClientOptions {
        host: host.local_addr(),
        client: cfg.client.clone(),
        network: cfg.network.clone(),
        display: Display::Headless,
        duration: Some(Duration::from_secs(secs + 8)),
        save_frame: None,
        vr: Default::default(),
    };
    let ours = std::thread::spawn(move || {
        untether::client::run_client_with(
            &client,
            untether::ClientIo {
                trust: client_trust,
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap()
    });
    std::thread::sleep(Duration::from_secs(1));
    let link = host.browser_link().unwrap();
    let mut page = Page::open(&chrome, &format!("{link}&seconds={secs}")).unwrap();
    let v = page_result(&mut page, secs);
    drop(page);
    let run = ours.join().unwrap();
    let summary = host.stop();
    let config = untether::report_config(&HostOptions::default(), Display::Headless, "udp");
    let report = untether::report::build(config, &run, Some(&summary));
    let g = &report.latency_ms.glass_to_glass_pixels;
    println!(
        "720p60, same run: untether client g2g (pixels) p50 {:.1} p99 {:.1} ms over {} frames; \
         headless Chromium g2g p50 {} p99 {} ms over {} frames (jitter buffer {} ms, decode {} ms, \
         clock ±{} ms)",
        g.p50.unwrap_or(f64::NAN),
        g.p99.unwrap_or(f64::NAN),
        g.count,
        ms(&v, "g2g_p50"),
        ms(&v, "g2g_p99"),
        v["g2g_n"],
        ms(&v, "jitter_buffer_ms"),
        ms(&v, "decode_ms"),
        ms(&v, "clock_uncertainty_ms"),
    );
}

#[test]
#[ignore]
fn bench_browser_input_720p60() {
    let Some(chrome) = chromium() else { return };
    let secs = seconds();
    let (_, opts) = options(None);
    let host = Host::start_with(
        opts,
        HostSetup {
            trust: HostTrust::Memory {
                identity: untether::identity::ephemeral_keypair(),
                access: untether::identity::Access::Allowlist,
                allowed: vec![],
            },
            ..Default::default()
        },
    )
    .unwrap();
    let link = host.browser_link().unwrap();
    let mut page = Page::open(&chrome, &format!("{link}&seconds={secs}&autoinput=100")).unwrap();
    let v = page_result(&mut page, secs);
    drop(page);
    host.stop();
    println!(
        "720p60, browser as controller: page event → host scene applied p50 {} p99 {} ms; \
         → shown in the page p50 {} p99 {} ms ({} events); g2g p50 {} p99 {} ms",
        ms(&v, "input_applied_p50"),
        ms(&v, "input_applied_p99"),
        ms(&v, "input_response_p50"),
        ms(&v, "input_response_p99"),
        v["inputs_seen"],
        ms(&v, "g2g_p50"),
        ms(&v, "g2g_p99"),
    );
}

#[test]
#[ignore]
fn bench_janus_720p60() {
    let Some(chrome) = chromium() else { return };
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root (Janus runs in a network namespace)");
        return;
    }
    let secs = seconds();
    let tb = untether_netem::netns::Testbed::create(None).unwrap();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tb.enter(untether_netem::netns::Side::Host).unwrap();
                let Some(janus) = common::janus::Janus::start(&tb) else {
                    return;
                };
                let (_, opts) = options(Some(janus.whip_endpoint()));
                let host = Host::start_with(
                    opts,
                    HostSetup {
                        trust: memory_pair().0,
                        ..Default::default()
                    },
                )
                .unwrap();
                let url = format!(
                    "{}?janus={}&room={}&seconds={secs}",
                    host.browser_url().unwrap(),
                    janus.http_api(),
                    common::janus::ROOM
                );
                let mut page = Page::open(&chrome, &url).unwrap();
                let v = page_result(&mut page, secs);
                drop(page);
                host.stop();
                println!(
                    "720p60, host → WHIP → Janus 1.1.2 → headless Chromium: g2g p50 {} p99 {} ms \
                     over {} frames (jitter buffer {} ms, decode {} ms, clock ±{} ms)",
                    ms(&v, "g2g_p50"),
                    ms(&v, "g2g_p99"),
                    v["g2g_n"],
                    ms(&v, "jitter_buffer_ms"),
                    ms(&v, "decode_ms"),
                    ms(&v, "clock_uncertainty_ms"),
                );
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
    });
}
