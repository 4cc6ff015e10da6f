//! `untether bench`: runs scenarios, writes one JSON report per scenario and one HTML report.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use untether::stats::Stage;
use untether_bench::peer::{run_peer, PeerKind};
use untether_bench::run::{run_untether, BenchOptions, QualityPlan};
use untether_bench::scenario::Scenario;
use untether_bench::series::ScenarioResult;
use untether_proto::units;

/// The progress bar of the bench under way (None: none drawn): log lines are printed above it.
static BAR: std::sync::Mutex<Option<ProgressBar>> = std::sync::Mutex::new(None);

/// The CLI's logger: env_logger's, printing above the bench's progress bar while one is drawn
/// (log lines scrolled through it).
pub struct AboveBar(pub env_logger::Logger);

impl log::Log for AboveBar {
    fn enabled(&self, m: &log::Metadata) -> bool {
        self.0.enabled(m)
    }

    fn log(&self, r: &log::Record) {
        if !self.0.matches(r) {
            return;
        }
        let bar = BAR.lock().ok().and_then(|b| b.clone());
        match bar {
            Some(b) => b.suspend(|| self.0.log(r)),
            None => self.0.log(r),
        }
    }

    fn flush(&self) {
        self.0.flush()
    }
}

/// The bar log lines go above while it lives.
struct Drawn;

impl Drawn {
    fn new(bar: &ProgressBar) -> Drawn {
        if let Ok(mut b) = BAR.lock() {
            *b = Some(bar.clone());
        }
        Drawn
    }
}

impl Drop for Drawn {
    fn drop(&mut self) {
        if let Ok(mut b) = BAR.lock() {
            *b = None;
        }
    }
}

/// The long help of `untether bench` (shown by `untether bench --help`).
pub const LONG_ABOUT: &str = "Run benchmark scenarios and write one JSON report per scenario (the \
    contract in docs/REPORT.md) plus one self-contained HTML report with plots (glass-to-glass \
    CDF, stage breakdown, latency/bitrate/SSIM over time, response delay).\n\n\
    A scenario streams the built-in test scene with the real pipeline (host and client in this \
    process over UDP on 127.0.0.1, or in two network namespaces with --netns). Comma-separated \
    values of --resolution, --preset, --conversion, --bitrate, --fec, --retransmit, --scheduler \
    and --pacing run every combination; a flag not given takes the configuration's default \
    (docs/CONFIG.md; preset: superfast).\n\n\
    --scenarios FILE reads [[scenario]] tables instead. Scenario keys: name, width, height, fps, \
    codec, encoder, refresh, refresh_period, preset, tune, bitrate_kbps, slices, gop, conversion, \
    duration_s, transport (loopback, netns), rate, loss, spin_deg_per_s, fec, retransmit, \
    adaptive_bitrate, scheduler, pacing, network_transport (udp, raw: what --transport sets), \
    vr, late_warp (--vr, --late-warp), capture (--capture).\n\n\
    Units: sizes WIDTHxHEIGHT or 360p, 480p, 720p, 1080p, 1440p, 2160p, 4k; bitrates kbit/s \
    (8000) or 8000k, 10M, 10mbit; durations seconds (10) or 500ms, 5s, 2m.\n\n\
    Examples:\n\
    \x20 untether bench --duration 10\n\
    \x20 untether bench --resolution 720p,1080p --preset ultrafast,superfast\n\
    \x20 untether bench --resolution 360p --bitrate 2M,5M\n\
    \x20 untether bench --codec h264,hevc,av1 --preset ultrafast     (the codecs side by side)\n\
    \x20 untether bench --refresh idr,intra --loss 2%      (intra refresh against keyframes)\n\
    \x20 untether bench --compare ffmpeg-rtp          (untether and the ffmpeg peer, alternating)\n\
    \x20 untether bench --peer rtsp-udp,rtsp-tcp     (ffmpeg playing the host's RTSP stream, UDP and TCP)\n\
    \x20 untether bench --netns --rate 20mbit         (two namespaces, tbf rate limit; root)\n\
    \x20 untether bench --netns --rate 20mbit --pacing 0,0.5   (one burst vs. paced sends)\n\
    \x20 untether bench --netns --loss 2% --compare ffmpeg-rtp-tcp   (real TCP through the same loss)\n\
    \x20 untether bench --netns --transport udp,raw   (UDP against raw layer-2 frames over the veth pair; root)\n\
    \x20 untether bench --capture wlr --resolution 1280x720   (a sway/wlroots desktop through wlr-screencopy)\n\
    \x20 untether bench --capture app --resolution 640x360 -- vkcube --width 640 --height 360   (an application's presents)\n\
    \x20 untether bench --capture portal             (the desktop portal's screen cast, PipeWire)\n\
    \x20 xvfb-run -a untether bench --vr --late-warp on,off   (pose-to-photon with and without late warp; a window)";

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// TOML file with [[scenario]] tables (keys in --help); flags below then only set defaults for keys the file omits.
    #[arg(long, value_name = "FILE")]
    #[arg(help_heading = "Scenarios")]
    scenarios: Option<PathBuf>,
    /// Frame size(s), comma-separated: WIDTHxHEIGHT or 360p, 720p, 1080p, … (default: video.resolution's).
    #[arg(long, value_name = "SIZES")]
    #[arg(help_heading = "Scenarios")]
    resolution: Option<String>,
    /// Frames per second (default: video.fps's).
    #[arg(long)]
    #[arg(help_heading = "Scenarios")]
    fps: Option<u32>,
    /// x264 preset(s), comma-separated: ultrafast, superfast, veryfast, … (mapped per encoder family, docs/CODECS.md) (default: superfast).
    #[arg(long, value_name = "PRESETS")]
    #[arg(help_heading = "Scenarios")]
    preset: Option<String>,
    /// Codec(s), comma-separated: h264, hevc, av1 (each with its best encoder: --encoder auto) (default: video.codec's).
    #[arg(long, value_name = "CODECS")]
    #[arg(help_heading = "Scenarios")]
    codec: Option<String>,
    /// Encoder by name, or auto (default: video.encoder's).
    #[arg(long, value_name = "NAME")]
    #[arg(help_heading = "Scenarios")]
    encoder: Option<String>,
    /// Refresh mode(s), comma-separated: idr (keyframes on demand), intra (intra-refresh sweeps) (default: video.refresh's).
    #[arg(long, value_name = "MODES")]
    #[arg(help_heading = "Scenarios")]
    refresh: Option<String>,
    /// Frames per intra-refresh sweep (default: video.refresh_period's).
    #[arg(long, value_name = "FRAMES")]
    #[arg(help_heading = "Scenarios")]
    refresh_period: Option<u32>,
    /// Target bitrate(s), comma-separated: kbit/s (10000) or with a unit (10M, 8000k) (default: video.bitrate_kbps's).
    #[arg(long, visible_alias = "bitrate-kbps", value_name = "RATES")]
    #[arg(help_heading = "Scenarios")]
    bitrate: Option<String>,
    /// Conversion path(s), comma-separated: simd (yuvutils SIMD BGRA→I420), swscale, rgb (libx264rgb, no conversion).
    #[arg(long, value_name = "PATHS")]
    #[arg(help_heading = "Scenarios")]
    conversion: Option<String>,
    /// Slices per frame, comma-separated to compare, e.g. 1,2,4,8 (video.slices: 0 or 1 send frames whole; 2–16 send each slice as x264 finishes it and decode it as it arrives; libx264, codec h264, refresh idr).
    #[arg(long, value_name = "COUNTS")]
    #[arg(help_heading = "Scenarios")]
    slices: Option<String>,
    /// Keyframe interval in frames (0: keyframes only when the client asks).
    #[arg(long, default_value_t = 0)]
    #[arg(help_heading = "Scenarios")]
    gop: u32,
    /// Time per scenario: seconds (10) or with a unit (500ms, 30s, 2m).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = crate::duration_arg)]
    #[arg(help_heading = "Scenarios")]
    duration: Duration,
    /// Camera spin of the test scene, degrees per second (default: scene.spin_deg_per_s's).
    #[arg(long, allow_negative_numbers = true)]
    #[arg(help_heading = "Scenarios")]
    spin: Option<f64>,
    /// Measure these peers instead of untether, comma-separated: ffmpeg-rtp (the ffmpeg command encodes and sends RTP over UDP to a second ffmpeg), ffmpeg-rtp-tcp (the same, RTP interleaved over RTSP/TCP), rtsp-udp / rtsp-tcp (untether's host with its RTSP server, `host --rtsp`, played by `ffmpeg -rtsp_transport udp|tcp -i rtsp://…`; loopback only).
    #[arg(long, value_name = "PEERS", conflicts_with = "compare")]
    #[arg(help_heading = "Peers")]
    peer: Option<String>,
    /// Measure untether and this peer in one run, alternating, and compare them (ratio of glass-to-glass medians).
    #[arg(long, value_name = "PEER")]
    #[arg(help_heading = "Peers")]
    compare: Option<String>,
    /// Put host and client (or the peer's two ffmpeg processes) in two network namespaces joined by a veth pair (needs root); always torn down. Takes --rate (tbf) and --loss (the kernel drops packets, both ways).
    #[arg(long)]
    #[arg(help_heading = "Network")]
    netns: bool,
    /// Data plane(s) after the handshake, comma-separated to compare: udp, raw (raw layer-2 frames between the veth ends' MAC addresses; needs --netns) (default: network.transport's).
    #[arg(long, value_name = "udp,raw")]
    #[arg(help_heading = "Network")]
    transport: Option<String>,
    /// Host send pacing(s), comma-separated: the fraction (0.0–1.0) of the frame interval a frame's datagrams are spread over, in batches (network.pacing; untether only, not the peers); 0 = off, one burst.
    #[arg(long, value_name = "FRACTIONS")]
    #[arg(help_heading = "Network")]
    pacing: Option<String>,
    /// VR: the host renders side-by-side stereo for a generated turning head (synthetic:turn); the client shows it in a window with the GPU presenter (lens distortion; needs a display: run under xvfb-run without one) and measures pose-to-photon from the presented pixels (latency_ms.pose_to_photon).
    #[arg(long)]
    #[arg(help_heading = "VR and capture")]
    vr: bool,
    /// With --vr: the presenter's late warp, comma-separated to compare in one run: on, off (default: vr.late_warp's).
    #[arg(long, value_name = "on|off", requires = "vr")]
    #[arg(help_heading = "VR and capture")]
    late_warp: Option<String>,
    /// Capture instead of the test scene: wlr or wlr:OUTPUT (a Wayland desktop: the wlroots compositor in $WAYLAND_DISPLAY through wlr-screencopy), or app (the presents of the application after --, through the capture hook, as `untether run`); frames stamped by the host. --resolution must be the output's / application's size.
    #[arg(long, value_name = "wlr[:OUTPUT]|app")]
    #[arg(help_heading = "VR and capture")]
    capture: Option<String>,
    /// With --capture app: the application and its arguments, after --.
    #[arg(last = true, value_name = "APP [ARGS]")]
    #[arg(help_heading = "VR and capture")]
    app: Vec<std::ffi::OsString>,
    /// Remove namespaces left by bench runs that were killed (SIGKILL), then exit.
    #[arg(long)]
    #[arg(help_heading = "Network")]
    cleanup: bool,
    /// Consecutive frames per picture-quality batch (0: no SSIM/PSNR).
    #[arg(long, default_value_t = 150, value_name = "FRAMES")]
    #[arg(help_heading = "Measurement")]
    quality_batch: u32,
    /// Time between the starts of quality batches: seconds (10) or with a unit (500ms, 30s).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = crate::duration_arg)]
    #[arg(help_heading = "Measurement")]
    quality_every: Duration,
    /// An input event every this many ms, for response delay (0: none).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    #[arg(help_heading = "Measurement")]
    response_interval: u64,
    /// Output directory (default: target/bench/<UTC date-time>).
    #[arg(long, value_name = "DIR")]
    #[arg(help_heading = "Output")]
    out: Option<PathBuf>,
    /// Also write a Markdown table of the results to FILE (what `make bench` puts in docs/BENCHMARKS.md).
    #[arg(long, value_name = "FILE")]
    #[arg(help_heading = "Output")]
    markdown: Option<PathBuf>,
    /// Also write the (first) scenario's JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    #[arg(help_heading = "Output")]
    report: Option<PathBuf>,
    /// Forward error correction, comma-separated to compare: off, adaptive, or a fixed share like 20% (default: network.fec's).
    #[arg(long, value_name = "MODES")]
    #[arg(help_heading = "Protocol")]
    fec: Option<String>,
    /// Retransmission of lost shards, comma-separated to compare: on, off (default: network.retransmit's).
    #[arg(long, value_name = "on|off")]
    #[arg(help_heading = "Protocol")]
    retransmit: Option<String>,
    /// The host's adaptive bitrate controller: on or off (default: network.adaptive_bitrate's).
    #[arg(long, value_parser = ["on", "off"])]
    #[arg(help_heading = "Protocol")]
    adaptive_bitrate: Option<String>,
    /// Multipath scheduler (with --paths 2..4): redundant, keyframes, lowest-delay; comma-separated to compare (default: network.scheduler's).
    #[arg(long, value_name = "SCHEDULERS")]
    #[arg(help_heading = "Protocol")]
    scheduler: Option<String>,
    /// The link, through impairment relays (loopback) or, with --netns, a tbf (--rate) and kernel
    /// loss (--loss) on the veth pair: --loss 2% --burst-loss --delay 5ms --jitter 2ms --rate 20mbit
    /// --outage 5s@10s --paths 2 … (docs/NETEM.md).
    #[command(flatten)]
    link: untether_netem::ImpairmentArgs,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default)]
    scenario: Vec<Scenario>,
}

fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The relays' profile, when any impairment flag (other than --rate with --netns) is given.
fn impairment(a: &BenchArgs) -> Result<Option<untether_netem::Profile>> {
    let mut link = a.link.clone();
    if a.netns {
        // --rate is the veth's tbf there and --loss the kernel's random drop (nftables);
        // anything else needs the relays.
        link.rate = None;
        link.loss = None;
        if link.is_set() {
            bail!(
                "--netns takes --rate (a tbf on the veth pair) and --loss (the kernel drops \
                 packets on it, both ways) but no other impairment flag: the kernel here has no \
                 netem; run delay, jitter, bursts and outages over loopback (without --netns), \
                 where relays impair the link"
            );
        }
        return Ok(None);
    }
    if !link.is_set() {
        return Ok(None);
    }
    Ok(Some(link.profile().map_err(|e| anyhow::anyhow!("{e}"))?))
}

/// `flag`'s comma-separated values, or `default` when not given.
fn list(flag: &Option<String>, default: impl ToString) -> Vec<String> {
    match flag {
        Some(l) => split(l),
        None => vec![default.to_string()],
    }
}

/// The scenarios the flags (or the file) describe.
fn scenarios(a: &BenchArgs) -> Result<Vec<Scenario>> {
    let d = Scenario::default();
    let base = Scenario {
        fps: a.fps.unwrap_or(d.fps),
        encoder: a.encoder.clone().unwrap_or(d.encoder.clone()),
        refresh_period: a.refresh_period.unwrap_or(d.refresh_period),
        gop: a.gop,
        duration_s: a.duration.as_secs_f64(),
        spin_deg_per_s: a.spin.unwrap_or(d.spin_deg_per_s),
        transport: if a.netns { "netns" } else { "loopback" }.into(),
        rate: if a.netns {
            a.link.rate.map(|bps| format!("{bps}bit"))
        } else {
            None
        },
        loss: if a.netns { a.link.loss } else { None },
        adaptive_bitrate: a
            .adaptive_bitrate
            .as_deref()
            .map_or(d.adaptive_bitrate, |v| v == "on"),
        capture: match a.capture.as_deref() {
            Some("app") if a.app.is_empty() => {
                bail!("--capture app: name the application after --, e.g. -- vkcube")
            }
            Some(_) | None if !a.app.is_empty() && a.capture.as_deref() != Some("app") => {
                bail!("an application after -- needs --capture app")
            }
            Some("app") => Some("app".to_string()),
            Some(c) if crate::wayland_arg::is_wayland(c) && c != "wlr:" => Some(c.to_string()),
            Some(c) => {
                bail!("--capture {c:?}: expected wlr, wlr:OUTPUT, portal, pipewire:NODE or app")
            }
            None => None,
        },
        ..d.clone()
    };
    if let Some(path) = &a.scenarios {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file: ScenarioFile =
            toml::from_str(&text).with_context(|| format!("{}: invalid", path.display()))?;
        if file.scenario.is_empty() {
            bail!("{}: no [[scenario]] tables", path.display());
        }
        return Ok(file.scenario);
    }
    // VR and its late warp: an axis over every other combination.
    let warps: Vec<(bool, bool)> = if a.vr {
        list(&a.late_warp, if d.late_warp { "on" } else { "off" })
            .iter()
            .map(|w| {
                untether::config::parse_on_off("--late-warp", w)
                    .map(|on| (true, on))
                    .map_err(|e| anyhow::anyhow!("{e}"))
            })
            .collect::<Result<_>>()?
    } else {
        vec![(false, d.late_warp)]
    };
    let mut out = Vec::new();
    for size in list(&a.resolution, format!("{}x{}", d.width, d.height)) {
        let (width, height) =
            units::parse_resolution(&size).map_err(|e| anyhow::anyhow!("--resolution: {e}"))?;
        for (codec, refresh) in list(&a.codec, &d.codec).into_iter().flat_map(|c| {
            list(&a.refresh, &d.refresh)
                .into_iter()
                .map(move |r| (c.clone(), r))
        }) {
            for preset in list(&a.preset, &d.preset) {
                for conversion in list(&a.conversion, &d.conversion) {
                    for rate in list(&a.bitrate, d.bitrate_kbps) {
                        let bitrate_kbps = units::parse_bitrate(&rate)
                            .map_err(|e| anyhow::anyhow!("--bitrate: {e}"))?;
                        for fec in list(&a.fec, &d.fec) {
                            for retransmit in
                                list(&a.retransmit, if d.retransmit { "on" } else { "off" })
                            {
                                let retransmit = match retransmit.as_str() {
                                    "on" => true,
                                    "off" => false,
                                    other => {
                                        bail!("--retransmit: unknown value {other:?}; allowed: on, off")
                                    }
                                };
                                for scheduler in list(&a.scheduler, &d.scheduler) {
                                    for slices in list(&a.slices, d.slices) {
                                        let slices = match slices.parse::<u32>() {
                                    Ok(n) if n <= 16 => n,
                                    _ => bail!("--slices: {slices:?} is not a slice count; allowed: 0 (one per encoder thread) to 16"),
                                };
                                        for pacing in list(&a.pacing, d.pacing) {
                                            for network_transport in
                                                list(&a.transport, &d.network_transport)
                                            {
                                                if !untether::config::TRANSPORTS
                                                    .contains(&network_transport.as_str())
                                                {
                                                    bail!("--transport: unknown value {network_transport:?}; allowed: udp, raw");
                                                }
                                                let pacing = pacing.parse::<f64>().map_err(|_| {
                                        anyhow::anyhow!("--pacing: {pacing:?} is not a number; allowed: a fraction 0.0 to 1.0 (0 = off), e.g. 0.5")
                                    })?;
                                                untether::config::PACING.check(pacing).map_err(
                                                    |e| anyhow::anyhow!("--pacing: {e}"),
                                                )?;
                                                out.push(Scenario {
                                                    width,
                                                    height,
                                                    codec: codec.clone(),
                                                    refresh: refresh.clone(),
                                                    preset: preset.clone(),
                                                    conversion: conversion.clone(),
                                                    bitrate_kbps,
                                                    fec: fec.clone(),
                                                    retransmit,
                                                    scheduler: scheduler.clone(),
                                                    pacing,
                                                    network_transport: network_transport.clone(),
                                                    slices,
                                                    ..base.clone()
                                                });
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out
        .into_iter()
        .flat_map(|sc| {
            warps.iter().map(move |&(vr, late_warp)| Scenario {
                vr,
                late_warp,
                ..sc.clone()
            })
        })
        .collect())
}

/// The median pose-to-photon of a VR run, ms.
fn pose_p50(r: &ScenarioResult) -> Option<f64> {
    r.report["latency_ms"]["pose_to_photon"]["p50"].as_f64()
}

fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn p50(r: &ScenarioResult) -> Option<f64> {
    let l = &r.report["latency_ms"];
    l["glass_to_glass_pixels"]["p50"]
        .as_f64()
        .or_else(|| l["glass_to_glass"]["p50"].as_f64())
}

pub fn run(a: BenchArgs, quiet: bool) -> Result<()> {
    if a.cleanup {
        let removed = untether_netem::netns::cleanup_stale()
            .context("removing namespaces of killed bench runs")?;
        if removed.is_empty() {
            outln!("nothing to clean up");
        }
        for n in removed {
            outln!("removed {n}");
        }
        return Ok(());
    }
    let peers = match a.peer.as_deref().or(a.compare.as_deref()) {
        Some(list) => list
            .split(',')
            .map(|p| p.trim().parse::<PeerKind>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("--peer/--compare: {e}"))?,
        None => Vec::new(),
    };
    if a.compare.is_some() && peers.len() != 1 {
        bail!("--compare takes one peer (--peer takes several)");
    }
    let peer = peers.first().copied();
    let list = scenarios(&a)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    if list.iter().any(|sc| sc.transport == "netns") {
        // Ctrl-C, SIGTERM, SIGHUP: tear the namespaces down and exit at once.
        untether_netem::netns::install_signal_cleanup(move || s.store(true, Ordering::SeqCst))
            .map_err(|e| anyhow::anyhow!(e))?;
    } else if let Err(e) = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst)) {
        log::warn!("cannot install the Ctrl-C handler: {e}");
    }
    let options = BenchOptions {
        quality: if a.quality_batch == 0 {
            QualityPlan::off()
        } else {
            QualityPlan {
                batch_frames: a.quality_batch,
                every_s: a.quality_every.as_secs_f64(),
                ..Default::default()
            }
        },
        response_interval_ms: a.response_interval,
        impairment: impairment(&a)?,
        app_ring: None,
    };
    // Validate every scenario before running any.
    for sc in &list {
        untether_bench::run::demo_options(sc, &options)?;
    }
    let out_dir = match &a.out {
        Some(d) => d.clone(),
        None => PathBuf::from("target/bench").join(
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string()
                .replace(':', "-"),
        ),
    };
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    // Which systems run, in order: alternating for a comparison so neither always goes first.
    let mut runs: Vec<(Scenario, Option<PeerKind>)> = Vec::new();
    for (i, sc) in list.iter().enumerate() {
        match (&a.compare, peer) {
            (Some(_), Some(p)) if i % 2 == 0 => {
                runs.push((sc.clone(), None));
                runs.push((sc.clone(), Some(p)));
            }
            (Some(_), Some(p)) => {
                runs.push((sc.clone(), Some(p)));
                runs.push((sc.clone(), None));
            }
            (None, None) => runs.push((sc.clone(), None)),
            (None, Some(_)) => runs.extend(peers.iter().map(|&p| (sc.clone(), Some(p)))),
            (Some(_), None) => unreachable!("--compare always names a peer"),
        }
    }
    let total: f64 = runs.iter().map(|(s, _)| s.duration_s).sum();
    let bar = if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        ProgressBar::new((total * 10.0) as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {percent:>3}% {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let _drawn = Drawn::new(&bar);
    let mut results = Vec::new();
    let mut done = 0.0;
    for (sc, peer) in &runs {
        if stop.load(Ordering::SeqCst) {
            bail!(
                "stopped (Ctrl-C) after {} of {} runs",
                results.len(),
                runs.len()
            );
        }
        let system = peer.map_or("untether", |p| p.name());
        bar.set_message(format!("{} ({system})", sc.display_name()));
        let base = done;
        let mut progress = |f: f64| bar.set_position(((base + f * sc.duration_s) * 10.0) as u64);
        let app = match sc.capture.as_deref() {
            Some("app") if peer.is_none() => Some(crate::bench_app::BenchApp::start(&a.app, sc)?),
            _ => None,
        };
        let options = BenchOptions {
            app_ring: app.as_ref().map(|app| app.ring()),
            ..options.clone()
        };
        let mut r = match peer {
            None => run_untether(sc, &options, &mut progress, stop.clone())
                .with_context(|| format!("{} (untether)", sc.display_name()))?,
            Some(p) => run_peer(*p, sc, &mut progress)
                .with_context(|| format!("{} ({})", sc.display_name(), p.name()))?,
        };
        done += sc.duration_s;
        let app_line = app.map(|app| app.finish(&mut r.report));
        let json = out_dir.join(format!("{}-{system}.json", file_stem(&sc.display_name())));
        write_json(&json, &r.report)?;
        if results.is_empty() {
            if let Some(path) = &a.report {
                write_json(path, &r.report)?;
            }
        }
        let vr = if sc.vr {
            let st = &r.report["state"];
            let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
            format!(
                "  pose-to-photon p50 {} ms (rendered pose: {} ms; {} read, {} unread, {} unmatched, {} ambiguous)",
                pose_p50(&r).map_or("-".into(), |v| format!("{v:.2}")),
                r.report["latency_ms"]["rendered_pose_to_photon"]["p50"]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.2}")),
                n(&r.report["latency_ms"]["pose_to_photon"]["count"]),
                n(&st["pose_photon_unread"]),
                n(&st["pose_photon_unmatched"]),
                n(&st["pose_photon_ambiguous"]),
            )
        } else {
            String::new()
        };
        let line = format!(
            "{:<44} {:<15} glass-to-glass p50 {:>6} ms  ssim {}{vr}  → {}",
            sc.display_name(),
            system,
            p50(&r).map_or("-".into(), |v| format!("{v:.2}")),
            r.report["quality"]["ssim"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.4}")),
            json.display()
        );
        let line = match app_line {
            Some(app) => format!("{line}\n{app}"),
            None => line,
        };
        if bar.is_hidden() {
            outln!("{line}");
        } else {
            bar.println(line);
        }
        results.push(r);
    }
    bar.finish_and_clear();
    let notes = vec![
        format!("machine: {}", untether::report::machine_description()),
        format!(
            "date: {}",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        ),
        format!(
            "command: untether {}",
            std::env::args().skip(1).collect::<Vec<_>>().join(" ")
        ),
    ];
    let html = untether_bench::html::render("untether bench", &results, &notes)
        .map_err(|e| anyhow::anyhow!("HTML report: {e}"))?;
    let html_path = out_dir.join("report.html");
    std::fs::write(&html_path, html)
        .with_context(|| format!("cannot write {}", html_path.display()))?;
    if a.compare.is_some() {
        outln!(
            "\n{:<44} {:>10} {:>10} {:>7}",
            "scenario",
            "untether",
            "peer",
            "ratio"
        );
        for sc in &list {
            let find = |sys: &str| {
                results
                    .iter()
                    .find(|r| {
                        r.name == sc.display_name()
                            && (r.system == "untether") == (sys == "untether")
                    })
                    .and_then(p50)
            };
            let (u, p) = (find("untether"), find("peer"));
            outln!(
                "{:<44} {:>10} {:>10} {:>7}",
                sc.display_name(),
                u.map_or("-".into(), |v| format!("{v:.2} ms")),
                p.map_or("-".into(), |v| format!("{v:.2} ms")),
                match (u, p) {
                    (Some(u), Some(p)) if p > 0.0 => format!("{:.2}", u / p),
                    _ => "-".into(),
                }
            );
        }
    }
    let warp = |on: bool| {
        results
            .iter()
            .filter(|r| r.report["scenario"]["vr"].as_bool() == Some(true))
            .filter(|r| r.report["scenario"]["late_warp"].as_bool() == Some(on))
            .filter_map(pose_p50)
            .next()
    };
    if let (Some(on), Some(off)) = (warp(true), warp(false)) {
        outln!(
            "\npose-to-photon p50: late warp on {on:.2} ms, off {off:.2} ms (on/off {:.2})",
            if off > 0.0 { on / off } else { f64::NAN }
        );
    }
    if let Some(path) = &a.markdown {
        std::fs::write(path, markdown(&results, &notes))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    outln!("HTML report: {}", html_path.display());
    Ok(())
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

fn ms(v: &serde_json::Value) -> String {
    v.as_f64().map_or("–".into(), |x| format!("{x:.2}"))
}

/// A Markdown table of the results (one row per scenario and system) and, for comparisons,
/// the untether/peer ratio of glass-to-glass medians.
fn markdown(results: &[ScenarioResult], notes: &[String]) -> String {
    let mut t = String::new();
    for n in notes {
        t.push_str(&format!("- {n}\n"));
    }
    t.push_str("\n| scenario | system | g2g p50 | g2g p95 | g2g p99 | convert | encode | network | decode | SSIM | PSNR Y dB | response p50 | pose-to-photon p50 | frames shown |\n");
    t.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        let l = &r.report["latency_ms"];
        let g = if l["glass_to_glass_pixels"]["p50"].is_number() {
            &l["glass_to_glass_pixels"]
        } else {
            &l["glass_to_glass"]
        };
        let st = |s: Stage| ms(&l["stages"][s.name()]["p50"]);
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            r.system,
            ms(&g["p50"]),
            ms(&g["p95"]),
            ms(&g["p99"]),
            st(Stage::Convert),
            st(Stage::Encode),
            st(Stage::Network),
            st(Stage::Decode),
            r.report["quality"]["ssim"]
                .as_f64()
                .map_or("–".into(), |v| format!("{v:.4}")),
            r.report["quality"]["psnr_db"]
                .as_f64()
                .map_or("–".into(), |v| format!("{v:.1}")),
            ms(&r.report["input"]["response_delay_ms"]["rd"]["p50"]),
            ms(&l["pose_to_photon"]["p50"]),
            r.report["frames"]["shown"]
                .as_u64()
                .map_or("–".into(), |v| v.to_string()),
        ));
    }
    let mut pairs = Vec::new();
    for u in results.iter().filter(|r| r.system == "untether") {
        for p in results
            .iter()
            .filter(|r| r.system != "untether" && r.name == u.name)
        {
            if let (Some(a), Some(b)) = (p50(u), p50(p)) {
                pairs.push(format!(
                    "| {} | {} | {a:.2} | {b:.2} | {:.2} |",
                    u.name,
                    p.system,
                    a / b
                ));
            }
        }
    }
    if !pairs.is_empty() {
        t.push_str("\n| scenario | peer | untether g2g p50 (ms) | peer g2g p50 (ms) | ratio (target ≤ 0.5) |\n|---|---|---|---|---|\n");
        for p in pairs {
            t.push_str(&p);
            t.push('\n');
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// While a bar is drawn, a log line is printed with the bar suspended (above it); the bar is
    /// forgotten when the bench ends.
    #[test]
    fn log_lines_are_printed_above_the_bar_while_it_is_drawn() {
        let logger = env_logger::Builder::new()
            .filter_level(log::LevelFilter::Info)
            .is_test(true)
            .build();
        let l = AboveBar(logger);
        let line = |text: &str| {
            log::Log::log(
                &l,
                &log::Record::builder()
                    .args(format_args!("{text}"))
                    .level(log::Level::Info)
                    .build(),
            )
        };
        let bar = ProgressBar::hidden();
        {
            let _drawn = Drawn::new(&bar);
            assert!(BAR.lock().unwrap().is_some());
            line("above the bar");
        }
        assert!(BAR.lock().unwrap().is_none());
        line("no bar");
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap()
            .bench
    }

    #[test]
    fn late_warp_on_and_off_are_an_axis_of_one_vr_run() {
        let a = parse(&["--vr", "--late-warp", "on,off", "--resolution", "360p,720p"]);
        let list = scenarios(&a).unwrap();
        let got: Vec<(u32, bool, bool)> =
            list.iter().map(|s| (s.height, s.vr, s.late_warp)).collect();
        assert_eq!(
            got,
            [
                (360, true, true),
                (360, true, false),
                (720, true, true),
                (720, true, false)
            ]
        );
        let names: std::collections::BTreeSet<String> =
            list.iter().map(Scenario::display_name).collect();
        assert_eq!(names.len(), 4, "every scenario has its own report file");
        assert!(list[0].display_name().ends_with("-vr-warp"));
        assert!(list[1].display_name().ends_with("-vr-nowarp"));
        // --vr alone: the configuration's late warp (on).
        let list = scenarios(&parse(&["--vr"])).unwrap();
        assert_eq!(list.len(), 1);
        assert!(list[0].vr && list[0].late_warp);
        let e = scenarios(&parse(&["--vr", "--late-warp", "maybe"]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--late-warp"), "{e}");
        // --late-warp means nothing without --vr.
        assert!(Cli::try_parse_from(["bench", "--late-warp", "on"]).is_err());
    }

    #[test]
    fn app_capture_takes_the_application_after_dashes_and_only_with_capture_app() {
        let list = scenarios(&parse(&["--capture", "app", "--", "vkcube", "--c", "9"])).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].capture.as_deref(), Some("app"));
        assert!(list[0].display_name().ends_with("-app"));
        for (bad, says) in [
            (&["--capture", "app"][..], "name the application after --"),
            (&["--", "vkcube"][..], "needs --capture app"),
            (
                &["--capture", "wlr", "--", "vkcube"][..],
                "needs --capture app",
            ),
            (
                &["--capture", "vulkan"][..],
                "expected wlr, wlr:OUTPUT, portal, pipewire:NODE or app",
            ),
        ] {
            let e = scenarios(&parse(bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn slices_and_transports_are_axes_of_one_run() {
        let a = parse(&["--netns", "--slices", "1,2,4,8", "--transport", "udp,raw"]);
        let list = scenarios(&a).unwrap();
        let got: Vec<(u32, &str)> = list
            .iter()
            .map(|s| (s.slices, s.network_transport.as_str()))
            .collect();
        let mut want = Vec::new();
        for n in [1, 2, 4, 8] {
            for t in ["udp", "raw"] {
                want.push((n, t));
            }
        }
        assert_eq!(got, want);
        assert!(list.iter().all(|s| s.transport == "netns" && !s.vr));
        let names: std::collections::BTreeSet<String> =
            list.iter().map(Scenario::display_name).collect();
        assert_eq!(names.len(), 8, "every scenario has its own report file");
        for (bad, flag) in [
            (&["--slices", "17"][..], "--slices"),
            (&["--transport", "tcp"][..], "--transport"),
        ] {
            let e = scenarios(&parse(bad)).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
    }
}
