//! The integration figures of docs/BENCHMARKS.md (## Integration):
//!
//! 1. synchronous `send_frame` vs the threaded mode at 720p60: how long the application's loop
//!    is blocked per frame, and glass-to-glass (from pixels) in each mode;
//! 2. X11 MIT-SHM grab of a 1280x720 window, and glass-to-glass from the X server vs the
//!    built-in scene;
//! 3. audio mouth-to-ear on loopback (test tone → Opus → jitter buffer → SDL).
//!
//! `cargo run --release -p untether --example integ_bench [-- SECONDS]` (needs Xvfb, xeyes;
//! SDL_AUDIODRIVER=dummy is set for the audio part).

use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/common/xvfb.rs"]
mod xvfb;
use xvfb::Xvfb;

use untether::api::{ClientContext, Frame, HostContext};
use untether::client::{run_client_with, ClientAudio, ClientIo, ClientOptions, ClientRun, Display};
use untether::config::ConfigToml;
use untether::host::{AudioSpec, HostSetup, SourceSpec};
use untether::identity::memory_pair;
use untether::stats::{percentile, Samples, Stage};
use untether::{report, Host, HostOptions};
use untether_media::scene::{Scene, SceneConfig};
use untether_media::stamp::{self, Stamp};
use untether_media::x11::{CaptureTarget, PointerMode, X11Capture, XtestReplay};
use untether_media::BgraFrame;

/// The p-th percentile (nearest rank, as in the reports); NaN when `v` is empty.
fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(v, p).unwrap_or(f64::NAN)
}

fn g2g_pixels(run: &ClientRun) -> f64 {
    let mut s = Samples::default();
    for r in run.records.iter().filter(|r| r.shown_us != 0) {
        if let Some(st) = r.stamp {
            let cap = stamp::unwrap_capture_us(st.capture_us, r.shown_us);
            s.push_us(r.shown_us as i64 - cap as i64);
        }
    }
    s.summary().map_or(f64::NAN, |m| m.p50)
}

/// The application loop at 720p60: render the scene, stamp, hand over.
fn app_mode(sync: bool, seconds: f64) -> (f64, f64, f64, u64) {
    let (w, h) = (1280, 720);
    let (host_trust, client_trust) = memory_pair();
    let mut host = HostContext::builder()
        .size(w, h)
        .fps(60)
        .bitrate_kbps(10_000)
        .bind("127.0.0.1:0")
        .synchronous(sync)
        .trust(host_trust)
        .build()
        .expect("host");
    let mut client = ClientContext::builder(host.local_addr())
        .trust(client_trust)
        .duration(Some(Duration::from_secs_f64(seconds)))
        .build();
    client.start().expect("client");
    assert!(host.wait_for_client(Duration::from_secs(5)));
    let mut scene = Scene::new(SceneConfig::new(w, h)).expect("scene");
    let mut frame = BgraFrame::new(w, h).expect("frame");
    let mut blocked = Vec::new();
    let start = Instant::now();
    let interval = Duration::from_micros(16_667);
    let mut n = 0u32;
    while start.elapsed() < Duration::from_secs_f64(seconds - 0.3) {
        scene.render(start.elapsed().as_secs_f64(), &mut frame);
        stamp::write_bgra(
            &mut frame,
            &Stamp {
                frame_number: n,
                capture_us: untether::clock::now_us(),
                input_seq: 0,
            },
        );
        let f = Frame::bgra(&frame.data, frame.stride, w, h);
        let t0 = Instant::now();
        if sync {
            host.send_frame(&f).expect("send");
        } else {
            host.publish(&f).expect("publish");
        }
        blocked.push(t0.elapsed().as_secs_f64() * 1000.0);
        n += 1;
        let next = interval * n;
        if let Some(d) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(d);
        }
    }
    let run = client.wait().expect("client run");
    let summary = host.stop();
    let mut b2 = blocked.clone();
    (
        pct(&mut blocked, 50.0),
        pct(&mut b2, 99.0),
        g2g_pixels(&run),
        summary.dropped,
    )
}

fn xvfb() -> Xvfb {
    Xvfb::start("1920x1080x24").expect("Xvfb")
}

fn client_opts(host: std::net::SocketAddr, seconds: f64) -> ClientOptions {
    let cfg = ConfigToml::default();
    ClientOptions {
        vr: Default::default(),
        host,
        client: cfg.client,
        network: cfg.network,
        display: Display::Headless,
        duration: Some(Duration::from_secs_f64(seconds)),
        save_frame: None,
    }
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());

    // 1. Synchronous vs threaded.
    for sync in [true, false] {
        let (p50, p99, g2g, dropped) = app_mode(sync, seconds);
        println!(
            "{:>8} 720p60: app blocked p50 {p50:.3} ms p99 {p99:.3} ms · glass-to-glass (pixels) p50 {g2g:.2} ms · dropped {dropped}",
            if sync { "sync" } else { "threaded" }
        );
    }

    // 2. X11: a 1280x720 xeyes window on a 1920x1080 screen, its eyes kept moving.
    let x = xvfb();
    let mut xeyes = Command::new("xeyes")
        .args(["-display", &x.display, "-geometry", "1280x720+100+100"])
        .spawn()
        .expect("xeyes (x11-apps)");
    std::thread::sleep(Duration::from_millis(800));
    let mut cap = X11Capture::open(Some(&x.display), &CaptureTarget::Window("xeyes".into()))
        .expect("capture xeyes");
    let mut grabs = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        cap.grab().expect("grab");
        grabs.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let size = cap.size();
    drop(cap);
    let mut g2 = grabs.clone();
    println!(
        "X11 SHM grab of a {}x{} window: p50 {:.3} ms p99 {:.3} ms",
        size.0,
        size.1,
        pct(&mut grabs, 50.0),
        pct(&mut g2, 99.0)
    );
    let mover = {
        let d = x.display.clone();
        std::thread::spawn(move || {
            let xt = XtestReplay::open(Some(&d), (0, 0), PointerMode::Absolute).expect("xtest");
            let t = Instant::now();
            let mut i = 0.0f64;
            while t.elapsed() < Duration::from_secs_f64(seconds + 1.5) {
                i += 0.05;
                let _ = xt.motion_absolute(
                    760 + (500.0 * i.cos()) as i32,
                    460 + (300.0 * i.sin()) as i32,
                );
                let _ = xt.flush();
                std::thread::sleep(Duration::from_micros(16_667));
            }
        })
    };
    let mut opts = HostOptions::default();
    opts.host.bind = "127.0.0.1:0".into();
    let (host_trust, client_trust) = memory_pair();
    let host = Host::start_with(
        opts.clone(),
        HostSetup {
            source: SourceSpec::X11 {
                display: Some(x.display.clone()),
                target: CaptureTarget::Window("xeyes".into()),
            },
            stamp: true,
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("x11 host");
    let run = run_client_with(
        &client_opts(host.local_addr(), seconds),
        ClientIo {
            trust: client_trust,
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client");
    let s = host.stop();
    let x_g2g = g2g_pixels(&run);
    let capture = s
        .stages
        .get(&Stage::Capture)
        .and_then(|c| c.summary())
        .map_or(f64::NAN, |m| m.p50);
    let _ = mover.join();
    let _ = xeyes.kill();
    let _ = xeyes.wait();
    drop(x);
    let (host_trust, client_trust) = memory_pair();
    let host = Host::start_with(
        opts.clone(),
        HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("scene host");
    let run = run_client_with(
        &client_opts(host.local_addr(), seconds),
        ClientIo {
            trust: client_trust,
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client");
    host.stop();
    let scene_g2g = g2g_pixels(&run);
    println!(
        "glass-to-glass (pixels) p50: X11 window {x_g2g:.2} ms (grab in the host {capture:.3} ms, {} frames, {} unchanged ticks) vs built-in scene {scene_g2g:.2} ms",
        s.sent, s.unchanged
    );

    // 3. Audio.
    std::env::set_var("SDL_AUDIODRIVER", "dummy");
    let (host_trust, client_trust) = memory_pair();
    let host = Host::start_with(
        opts.clone(),
        HostSetup {
            audio: AudioSpec::Tone,
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("audio host");
    let run = run_client_with(
        &client_opts(host.local_addr(), seconds),
        ClientIo {
            trust: client_trust,
            audio: Some(ClientAudio::default()),
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client");
    let s = host.stop();
    let rep = report::build(
        untether::report_config(&opts, Display::Headless, "udp-loopback"),
        &run,
        Some(&s),
    );
    if let Some(a) = rep.audio {
        println!(
            "audio mouth-to-ear p50 {:.2} ms p99 {:.2} ms · A/V offset {:?} ms · jitter buffer {} ms (range {:?}..{:?}) · underruns {}",
            a.mouth_to_ear_ms.p50.unwrap_or(f64::NAN),
            a.mouth_to_ear_ms.p99.unwrap_or(f64::NAN),
            a.av_offset_ms,
            a.target_ms,
            a.target_min_ms,
            a.target_max_ms,
            a.underruns
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.trim());
}
