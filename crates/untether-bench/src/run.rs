//! Runs one untether scenario: the test scene streamed host→client by the real pipeline
//! (host and client in this process, real UDP), picture quality sampled off the frame path,
//! response delay decomposed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use untether::config::{ConfigToml, Resolution};
use untether::report::{frame_rows, FrameRow};
use untether::{
    ClientIo, ClientOptions, ClientRun, DemoOptions, Display, HostOptions, HostSetup, SentFrameTap,
    ShownFrameTap,
};
use untether_media::codec::{InputPicture, PictureFormat, Selection};
use untether_media::quality::{CompareSpace, Picture, QualityMeter};
use untether_media::{stamp, BgraFrame};

use untether_netem::netns::{Side, Testbed};

use crate::scenario::Scenario;
use crate::series::{FrameSample, QualitySample, ResponseSample, ScenarioResult};

/// What went wrong in a bench run; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("scenario {scenario}: {key} = {value:?}: {reason}")]
    Scenario {
        scenario: String,
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error("scenario {0}: {1}")]
    Run(String, String),
    #[error("{0}")]
    Other(String),
}

/// When picture quality is sampled: `batch_frames` consecutive frames every `every_s`
/// seconds, the first batch `first_s` seconds in (OpenUVR: 150 frames every 10 s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QualityPlan {
    pub batch_frames: u32,
    pub every_s: f64,
    pub first_s: f64,
}

impl Default for QualityPlan {
    fn default() -> Self {
        QualityPlan {
            batch_frames: 150,
            every_s: 10.0,
            first_s: 1.0,
        }
    }
}

impl QualityPlan {
    /// No sampling.
    pub fn off() -> QualityPlan {
        QualityPlan {
            batch_frames: 0,
            ..Default::default()
        }
    }

    /// Whether frame `n` (of a stream at `fps`) belongs to a batch.
    pub fn includes(&self, n: u32, fps: u32) -> bool {
        if self.batch_frames == 0 || fps == 0 {
            return false;
        }
        let first = (self.first_s * fps as f64).round() as i64;
        let every = ((self.every_s * fps as f64).round() as i64).max(1);
        let k = n as i64 - first;
        k >= 0 && k % every < self.batch_frames as i64
    }
}

/// How a scenario is measured beyond what the scenario streams.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub quality: QualityPlan,
    /// An input event (a small pointer turn) every this many ms for response delay; 0: none.
    pub response_interval_ms: u64,
    /// Loopback runs go through impairment relays, one per path (`--loss`, `--paths`, …).
    pub impairment: Option<untether_netem::Profile>,
    /// A scenario with `capture = "app"`: the frame ring of the application the caller
    /// started with the capture hook (`untether bench --capture app -- APP`).
    pub app_ring: Option<untether::host::PresentRing>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            quality: QualityPlan::default(),
            response_interval_ms: 500,
            impairment: None,
            app_ring: None,
        }
    }
}

fn bad(sc: &Scenario, key: &'static str, value: impl ToString, reason: String) -> BenchError {
    BenchError::Scenario {
        scenario: sc.display_name(),
        key,
        value: value.to_string(),
        reason,
    }
}

/// The demo options a scenario stands for (validated: every bad value is named).
pub fn demo_options(sc: &Scenario, bench: &BenchOptions) -> Result<DemoOptions, BenchError> {
    let cfg = ConfigToml::default();
    let mut host = HostOptions::default();
    host.video.resolution = Resolution {
        width: sc.width,
        height: sc.height,
    };
    host.video.fps = sc.fps;
    if sc.transport != "netns" && (sc.rate.is_some() || sc.loss.is_some()) {
        return Err(bad(
            sc,
            if sc.rate.is_some() { "rate" } else { "loss" },
            sc.rate.clone().unwrap_or_else(|| format!("{:?}", sc.loss)),
            "a tbf rate and kernel loss need transport = \"netns\" (the veth pair); over \
             loopback the impairment relays take --rate and --loss"
                .into(),
        ));
    }
    if let Some(l) = sc.loss {
        if !(0.0..1.0).contains(&l) {
            return Err(bad(
                sc,
                "loss",
                l,
                "allowed: 0 to below 1 (0.02 = 2 %)".into(),
            ));
        }
    }
    host.video.bitrate_kbps = sc.bitrate_kbps;
    host.video.preset = sc.preset.clone();
    if sc.tune != "zerolatency" {
        return Err(bad(
            sc,
            "tune",
            &sc.tune,
            "allowed: zerolatency (untether always encodes with it)".into(),
        ));
    }
    // A key left at its default follows from the others (conversion = "rgb" alone means
    // libx264rgb, an encoder its codec), as in the configuration.
    let d = Scenario::default();
    let given = |v: &str, default: &str| (v != default).then(|| v.to_string());
    let codec = given(&sc.codec, &d.codec);
    let encoder = given(&sc.encoder, &d.encoder);
    host.video.selection = Selection::parse(
        codec
            .as_deref()
            .or(if encoder.is_some() || sc.conversion == "rgb" {
                None
            } else {
                Some(sc.codec.as_str())
            }),
        encoder.as_deref(),
        given(&sc.conversion, &d.conversion).as_deref(),
    )
    .map_err(|e| {
        use untether_media::codec::SelectionError as E;
        match e {
            E::Codec(_) => bad(sc, "codec", &sc.codec, e.to_string()),
            E::Encoder(_) => bad(sc, "encoder", &sc.encoder, e.to_string()),
            E::Contradiction { keys, .. } if keys.contains("video.codec") => {
                bad(sc, "codec", &sc.codec, e.to_string())
            }
            _ => bad(sc, "conversion", &sc.conversion, e.to_string()),
        }
    })?;
    host.video.refresh =
        sc.refresh
            .parse()
            .map_err(|e: untether_media::codec::UnknownRefresh| {
                bad(sc, "refresh", &sc.refresh, e.to_string())
            })?;
    host.video.refresh_period = sc.refresh_period;
    host.video.gop_frames = sc.gop;
    if sc.slices > 0 {
        // The real sliced path (`video.slices`): x264 through its own API, each slice sent as
        // x264 finishes it and decoded as it arrives.
        host.video.slices = u8::try_from(sc.slices)
            .ok()
            .filter(|n| (1..=16).contains(n))
            .ok_or_else(|| {
                bad(
                    sc,
                    "slices",
                    sc.slices,
                    "allowed: 0 or 1 (frames sent whole) up to 16 slices a frame (libx264, codec \
                     h264, refresh idr)"
                        .into(),
                )
            })?;
    }
    if !(sc.duration_s > 0.5 && sc.duration_s <= 3600.0) {
        return Err(bad(
            sc,
            "duration_s",
            sc.duration_s,
            "allowed: more than 0.5 and at most 3600 seconds".into(),
        ));
    }
    host.scene.spin_deg_per_s = sc.spin_deg_per_s as f32;
    let mut client = cfg.client.clone();
    client.input_probe_interval_ms = bench.response_interval_ms;
    client.headless = true;
    let mut network = cfg.network.clone();
    network.pacing = sc.pacing;
    network.retransmit = sc.retransmit;
    network.adaptive_bitrate = sc.adaptive_bitrate;
    if sc.network_transport == "raw" && sc.transport != "netns" {
        return Err(bad(
            sc,
            "network_transport",
            "raw",
            "raw layer 2 needs transport = \"netns\" (--netns: two namespaces over a veth \
             pair); loopback has no MAC addresses"
                .into(),
        ));
    }
    // The configuration's parser and validator check every value and range; the error names
    // the scenario's key.
    let checked = (|| -> Result<(), untether::config::ConfigError> {
        use untether::config::parse_key;
        network.fec = parse_key(&sc.fec)?;
        network.scheduler = parse_key(&sc.scheduler)?;
        network.transport = parse_key(&sc.network_transport)?;
        untether::config::validate_host(&host.video, &host.host, &network, &host.scene)
    })();
    checked.map_err(|e| {
        let (key, value): (&'static str, String) = match e.key().unwrap_or_default() {
            "video.resolution" => ("width/height", format!("{}x{}", sc.width, sc.height)),
            "video.fps" => ("fps", sc.fps.to_string()),
            "video.bitrate_kbps" => ("bitrate_kbps", sc.bitrate_kbps.to_string()),
            "video.preset" => ("preset", sc.preset.clone()),
            "video.refresh_period" => ("refresh_period", sc.refresh_period.to_string()),
            k if k.starts_with("video.refresh") => ("refresh", sc.refresh.clone()),
            "network.pacing" => ("pacing", sc.pacing.to_string()),
            "network.scheduler" => ("scheduler", sc.scheduler.clone()),
            "network.fec" => ("fec", sc.fec.clone()),
            "network.transport" => ("network_transport", sc.network_transport.clone()),
            "scene.spin_deg_per_s" => ("spin_deg_per_s", sc.spin_deg_per_s.to_string()),
            other => ("(config)", other.to_string()),
        };
        bad(sc, key, value, e.to_string())
    })?;
    host.network = network.clone();
    let (vr, display) = if sc.vr {
        if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
            return Err(bad(
                sc,
                "vr",
                true,
                "VR shows the stream in a window (pose-to-photon is read from its pixels): \
                 needs a display (run under xvfb-run -a -s \"-screen 0 1920x1080x24\" without one)"
                    .into(),
            ));
        }
        // The scene stands still but for the head: a generated track that keeps turning (what
        // the pose-to-photon reading needs); no synthetic look-around (it turns the view too).
        host.scene.spin_deg_per_s = 0.0;
        host.scene.walk_speed = 0.0;
        host.vr.enabled = true;
        client.headless = false;
        client.input_probe_interval_ms = 0;
        let mut vr = host.vr.clone();
        vr.pose = "synthetic:turn".into();
        vr.late_warp = sc.late_warp;
        (vr, Display::Window)
    } else {
        (Default::default(), Display::Headless)
    };
    Ok(DemoOptions {
        host,
        client: ClientOptions {
            vr,
            host: ([127, 0, 0, 1], 0).into(),
            client,
            network,
            display,
            duration: Some(Duration::from_secs_f64(sc.duration_s)),
            save_frame: None,
        },
    })
}

/// The host setup a scenario stands for (its GOP and slices are `video.gop_frames` and
/// `video.slices`, set with the options).
pub fn host_setup(sc: &Scenario) -> HostSetup {
    match sc.capture.as_deref() {
        // The application's ring is the caller's ([`BenchOptions::app_ring`]).
        Some("app") => HostSetup {
            stamp: true,
            input: untether::host::InputSpec::Discard,
            ..Default::default()
        },
        Some(c) if c == "portal" || c.starts_with("pipewire:") => HostSetup {
            source: match c.strip_prefix("pipewire:") {
                Some(target) => untether::host::SourceSpec::PipeWire {
                    target: target.to_string(),
                },
                None => untether::host::SourceSpec::Portal { token_file: None },
            },
            stamp: true,
            input: untether::host::InputSpec::Discard,
            ..Default::default()
        },
        Some(c) => HostSetup {
            source: untether::host::SourceSpec::Wlr {
                display: None,
                target: untether_media::wlr::WlrTarget {
                    output: c.strip_prefix("wlr:").map(str::to_string),
                    ..Default::default()
                },
            },
            stamp: true,
            input: untether::host::InputSpec::Discard,
            ..Default::default()
        },
        None => HostSetup::default(),
    }
}

/// Reads the stamp of a BGRA picture from its G channel (the stamp is grey).
fn bgra_stamp(width: u32, height: u32, data: &[u8], stride: usize) -> Option<stamp::Stamp> {
    let (aw, ah) = stamp::stamp_area(width, height);
    let (aw, ah) = (aw as usize, ah as usize);
    let mut g = vec![0u8; aw * ah];
    for y in 0..ah {
        let row = data.get(y * stride..y * stride + aw * 4)?;
        for (x, px) in row.chunks_exact(4).enumerate() {
            g[y * aw + x] = px[1];
        }
    }
    stamp::read_plane(&g, aw, width, height)
}

enum QualityMsg {
    Reference(u32, BgraFrame),
    Decoded {
        frame: u32,
        at_us: u64,
        format: PictureFormat,
        width: u32,
        height: u32,
        planes: [(Vec<u8>, usize); 3],
    },
}

/// Puts the calling thread in SCHED_IDLE: it runs only on CPU time the pipeline leaves, so
/// comparing pictures does not disturb the latency being measured (it may fall behind and
/// skip pictures instead; those are counted).
fn lowest_priority() {
    // SAFETY: plain syscalls on the calling thread with a valid sched_param.
    unsafe {
        let p = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) != 0 {
            // Fall back to the weakest nice level.
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
        }
    }
}

/// One compared picture: frame number, when it was shown (client clock), the result.
type Compared = (u32, u64, untether_media::quality::Quality);

/// Compares captured and decoded pictures of the sampled frames on its own thread.
struct QualityWorker {
    tx: mpsc::SyncSender<QualityMsg>,
    thread: std::thread::JoinHandle<Result<Vec<Compared>, String>>,
    /// Pictures the frame path could not hand over (the worker was behind).
    skipped: Arc<std::sync::atomic::AtomicU64>,
}

impl QualityWorker {
    fn start(width: u32, height: u32, space: CompareSpace) -> QualityWorker {
        // Room for a whole batch of both sides: the frame path never waits.
        let (tx, rx) = mpsc::sync_channel::<QualityMsg>(400);
        let thread = std::thread::Builder::new()
            .name("bench-quality".into())
            .spawn(move || {
                lowest_priority();
                let mut meter =
                    QualityMeter::new(width, height, space).map_err(|e| e.to_string())?;
                let mut refs: HashMap<u32, BgraFrame> = HashMap::new();
                let mut out = Vec::new();
                for msg in rx {
                    match msg {
                        QualityMsg::Reference(n, f) => {
                            if refs.len() > 600 {
                                // Never decoded (lost, replaced): forget the oldest.
                                if let Some(&old) = refs.keys().min() {
                                    refs.remove(&old);
                                }
                            }
                            refs.insert(n, f);
                        }
                        QualityMsg::Decoded {
                            frame,
                            at_us,
                            format,
                            width,
                            height,
                            planes,
                        } => {
                            let Some(reference) = refs.remove(&frame) else {
                                continue;
                            };
                            let p = [
                                (planes[0].0.as_slice(), planes[0].1),
                                (planes[1].0.as_slice(), planes[1].1),
                                (planes[2].0.as_slice(), planes[2].1),
                            ];
                            let distorted = match format {
                                PictureFormat::I420 => Picture::I420 {
                                    width,
                                    height,
                                    planes: p,
                                },
                                PictureFormat::Gbrp => Picture::Gbrp {
                                    width,
                                    height,
                                    planes: p,
                                },
                            };
                            let q = meter
                                .compare(&Picture::Bgra(&reference), &distorted)
                                .map_err(|e| e.to_string())?;
                            out.push((frame, at_us, q));
                        }
                    }
                }
                Ok(out)
            })
            .expect("spawning the quality thread");
        QualityWorker {
            tx,
            thread,
            skipped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }
}

/// Runs `sc` with untether over loopback UDP; `progress` gets 0..1 while it runs.
pub fn run_untether(
    sc: &Scenario,
    bench: &BenchOptions,
    progress: &mut dyn FnMut(f64),
    stop: Arc<AtomicBool>,
) -> Result<ScenarioResult, BenchError> {
    let options = demo_options(sc, bench)?;
    let mut setup = host_setup(sc);
    if sc.capture.as_deref() == Some("app") {
        let Some(ring) = &bench.app_ring else {
            return Err(bad(
                sc,
                "capture",
                "app",
                "needs the application: untether bench --capture app -- APP ARGS".into(),
            ));
        };
        setup.source = untether::host::SourceSpec::Presents(ring.clone());
    }
    let fps = sc.fps;
    let plan = bench.quality;
    let (w, h) = (sc.width, sc.height);
    let space =
        if options.host.video.selection.conversion == untether_media::convert::Conversion::Rgb {
            CompareSpace::Gbr
        } else {
            CompareSpace::Yuv420
        };
    let worker = (plan.batch_frames > 0).then(|| QualityWorker::start(w, h, space));
    let mut io = ClientIo::default();
    if let Some(worker) = &worker {
        let tx = Mutex::new(worker.tx.clone());
        let skipped = worker.skipped.clone();
        setup.sent_frame_tap = Some(SentFrameTap(Arc::new(move |pic: &InputPicture<'_>| {
            let InputPicture::Bgra {
                width,
                height,
                data,
                stride,
            } = *pic
            else {
                return;
            };
            let Some(st) = bgra_stamp(width, height, data, stride) else {
                return;
            };
            if !plan.includes(st.frame_number, fps) {
                return;
            }
            let copy = BgraFrame {
                width,
                height,
                stride,
                data: data.to_vec(),
            };
            let sent = tx
                .lock()
                .map(|t| {
                    t.try_send(QualityMsg::Reference(st.frame_number, copy))
                        .is_ok()
                })
                .unwrap_or(false);
            if !sent {
                skipped.fetch_add(1, Ordering::Relaxed);
            }
        })));
        let tx = worker.tx.clone();
        let skipped = worker.skipped.clone();
        io.shown_frame_tap = Some(ShownFrameTap(Box::new(move |rec, pic| {
            let Some(st) = rec.stamp else {
                return;
            };
            if !plan.includes(st.frame_number, fps) {
                return;
            }
            let copy = |i: usize| {
                let (d, s) = pic.plane(i);
                (d.to_vec(), s)
            };
            let msg = QualityMsg::Decoded {
                frame: st.frame_number,
                at_us: rec.shown_us,
                format: pic.format(),
                width: pic.width(),
                height: pic.height(),
                planes: [copy(0), copy(1), copy(2)],
            };
            if tx.try_send(msg).is_err() {
                skipped.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }
    let started = Instant::now();
    let name = sc.display_name();
    let run_stop = stop.clone();
    let testbed = match sc.transport.as_str() {
        "loopback" => None,
        "netns" => {
            Some(Arc::new(testbed(sc).map_err(|e| {
                BenchError::Run(name.clone(), format!("netns: {e}"))
            })?))
        }
        other => {
            return Err(bad(
                sc,
                "transport",
                other,
                "allowed: loopback, netns".into(),
            ))
        }
    };
    let tb = testbed.clone();
    if tb.is_some() && bench.impairment.is_some() {
        return Err(bad(
            sc,
            "transport",
            "netns",
            "impairment flags other than --rate need the loopback transport (the relays run \
             on 127.0.0.1); with --netns use --rate for a tbf limit"
                .into(),
        ));
    }
    let impairment = bench.impairment.clone();
    let scenario = sc.clone();
    let handle = std::thread::Builder::new()
        .name("bench-run".into())
        .spawn(move || match (tb, impairment) {
            (None, None) => untether::run_demo_detailed(options, setup, io, run_stop)
                .map(|d| (d, Vec::new()))
                .map_err(|e| e.to_string()),
            (None, Some(profile)) => run_through_relays(&profile, options, setup, io, run_stop),
            (Some(tb), _) => run_in_namespaces(&tb, &scenario, options, setup, io, run_stop)
                .map(|d| (d, Vec::new())),
        })
        .map_err(|e| BenchError::Run(name.clone(), format!("cannot start: {e}")))?;
    while !handle.is_finished() {
        progress((started.elapsed().as_secs_f64() / sc.duration_s).min(1.0));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (demo, relays) = handle
        .join()
        .map_err(|_| BenchError::Run(name.clone(), "the run panicked".into()))?
        .map_err(|e| BenchError::Run(name.clone(), e))?;
    progress(1.0);
    // Tear the namespaces down now (also done on drop, on every error path above).
    if let Some(tb) = testbed.and_then(|t| Arc::try_unwrap(t).ok()) {
        tb.teardown();
    }
    let quality = match worker {
        Some(w) => {
            let skipped = w.skipped.load(Ordering::Relaxed);
            drop(w.tx);
            let pairs = w
                .thread
                .join()
                .map_err(|_| BenchError::Run(name.clone(), "the quality thread panicked".into()))?
                .map_err(|e| BenchError::Run(name.clone(), format!("quality: {e}")))?;
            if skipped > 0 {
                log::warn!(
                    "{name}: {skipped} pictures not compared (the quality thread was behind)"
                );
            }
            pairs
        }
        None => Vec::new(),
    };
    let rows = frame_rows(&demo.client);
    let t0 = rows.first().map_or(0, |r| r.captured_us);
    let quality: Vec<QualitySample> = quality
        .into_iter()
        .map(|(frame, at_us, q)| QualitySample {
            frame,
            at_ms: (at_us as i64 - t0) as f64 / 1000.0,
            ssim_y: q.ssim_y,
            ssim_all: q.ssim_all,
            psnr_y_db: q.psnr_y_db,
            psnr_all_db: q.psnr_avg_db,
        })
        .collect();
    let response = response_samples(&demo.client, t0);
    let mut report = serde_json::to_value(&demo.report)
        .map_err(|e| BenchError::Run(name.clone(), format!("report: {e}")))?;
    annotate_report(&mut report, sc, &quality, &response, plan);
    if !relays.is_empty() {
        if let Some(obj) = report.as_object_mut() {
            obj.insert(
                "relays".into(),
                serde_json::to_value(&relays).unwrap_or(serde_json::Value::Null),
            );
        }
    }
    Ok(ScenarioResult {
        name: sc.display_name(),
        system: "untether".into(),
        report,
        frames: frame_samples(&rows),
        quality,
        response,
        duration_s: started.elapsed().as_secs_f64(),
    })
}

/// Host and client over loopback with an impairment relay on each path of `profile` (the
/// client's main address is the first relay, the others are its extra paths).
fn run_through_relays(
    profile: &untether_netem::Profile,
    mut options: DemoOptions,
    mut setup: HostSetup,
    mut io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<(untether::DemoRun, Vec<untether_netem::RelayStats>), String> {
    let (host_trust, client_trust) = untether::identity::memory_pair();
    setup.trust = host_trust;
    io.trust = client_trust;
    options.host.host.bind = "127.0.0.1:0".into();
    let host = untether::Host::start_with(options.host.clone(), setup)
        .map_err(|e| format!("host: {e}"))?;
    let relays = match untether_netem::RelaySet::from_profile(
        profile,
        ([127, 0, 0, 1], 0).into(),
        host.local_addr(),
    ) {
        Ok(r) => r,
        Err(e) => {
            host.stop();
            return Err(format!("relay: {e}"));
        }
    };
    let addrs = relays.listen_addrs();
    options.client.host = addrs[0];
    options.client.client.paths = addrs[1..].iter().map(|a| a.to_string()).collect();
    let run = untether::run_client_with(&options.client, io, stop);
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    let relay_stats = relays.stop();
    if let Some(f) = &summary.fatal {
        return Err(format!("host failed: {f}"));
    }
    let run = run.map_err(|e| format!("client: {e}"))?;
    let mut config =
        untether::report_config(&options.host, options.client.display, "udp-loopback-relay");
    config.paths = addrs.len() as u32;
    config.impairment = Some(describe_profile(profile));
    let report = untether::report::build(config, &run, Some(&summary));
    Ok((
        untether::DemoRun {
            report,
            client: run,
            host: summary,
        },
        relay_stats,
    ))
}

/// The impairment of each path in words (`down: … / up: …`, paths joined by ` | `).
pub fn describe_profile(profile: &untether_netem::Profile) -> String {
    profile
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (d, u) = (p.down.describe(), p.up.describe());
            let both = if d == u {
                d
            } else {
                format!("down: {d} / up: {u}")
            };
            if profile.paths.len() > 1 {
                format!("path {i}: {both}")
            } else {
                both
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The two namespaces of a netns scenario, with its rate limit and loss.
pub fn testbed(sc: &Scenario) -> Result<Testbed, untether_netem::netns::NetnsError> {
    let tb = Testbed::create(sc.rate.as_deref())?;
    if let Some(loss) = sc.loss {
        tb.set_loss(loss)?;
    }
    Ok(tb)
}

/// What the testbed does to the link, for the report's `config.impairment`.
pub fn testbed_impairment(tb: &Testbed, sc: &Scenario) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(r) = tb.rate() {
        parts.push(format!("tbf rate {r}"));
    }
    if let Some(l) = sc.loss {
        let (h, c) = tb.loss_counts();
        parts.push(format!(
            "kernel loss {}% each way (nftables; dropped {c} to the client, {h} to the host)",
            l * 100.0
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Host and client as on two machines: the host's threads in the testbed's host namespace,
/// the client's in the client namespace, talking over the veth pair (and its tbf).
fn run_in_namespaces(
    tb: &Testbed,
    sc: &Scenario,
    mut options: DemoOptions,
    mut setup: HostSetup,
    mut io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<untether::DemoRun, String> {
    // Host and client are this process: a throwaway identity each, the host allowing only
    // this client (as `untether demo` does).
    let (host_trust, client_trust) = untether::identity::memory_pair();
    setup.trust = host_trust;
    io.trust = client_trust;
    options.host.host.bind = format!("{}:0", tb.host_addr());
    let host_opts = options.host.clone();
    let host = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tb.enter(Side::Host).map_err(|e| format!("netns: {e}"))?;
                // Threads the host spawns inherit the namespace.
                untether::Host::start_with(host_opts, setup).map_err(|e| format!("host: {e}"))
            })
            .join()
            .map_err(|_| "the host start panicked".to_string())?
    })?;
    options.client.host =
        std::net::SocketAddr::new(tb.host_addr().into(), host.local_addr().port());
    let client_opts = options.client.clone();
    let run = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tb.enter(Side::Client).map_err(|e| format!("netns: {e}"))?;
                untether::run_client_with(&client_opts, io, stop)
                    .map_err(|e| format!("client: {e}"))
            })
            .join()
            .map_err(|_| "the client panicked".to_string())?
    });
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    if let Some(f) = &summary.fatal {
        return Err(format!("host failed: {f}"));
    }
    let run = run?;
    let mut config = untether::report_config(
        &options.host,
        options.client.display,
        &format!("{}-netns-veth", run.link.transport),
    );
    config.impairment = testbed_impairment(tb, sc);
    let report = untether::report::build(config, &run, Some(&summary));
    Ok(untether::DemoRun {
        report,
        client: run,
        host: summary,
    })
}

/// The per-frame series of a client run's rows (time relative to the first frame).
pub fn frame_samples(rows: &[FrameRow]) -> Vec<FrameSample> {
    let t0 = rows.first().map_or(0, |r| r.captured_us);
    rows.iter()
        .map(|r| FrameSample {
            frame: r.frame_number,
            captured_ms: (r.captured_us - t0) as f64 / 1000.0,
            glass_to_glass_ms: r.glass_to_glass_pixels_us.unwrap_or(r.glass_to_glass_us) as f64
                / 1000.0,
            stages_ms: r
                .stages_us
                .iter()
                .map(|&(stage, us)| (stage, us as f64 / 1000.0))
                .collect(),
            bytes: r.bytes as u64,
            keyframe: r.keyframe,
        })
        .collect()
}

/// GamingAnywhere's response delay RD = ND + PD + OD for every input event the client saw
/// reflected in a frame's pixel stamp. The uplink (input → host) is half the minimum RTT;
/// ND adds the frame's transit (last shard sent → last shard received), PD is the host's
/// share (input arrived → the frame showing it sent), OD the client's (last shard received →
/// shown). They sum to RD exactly.
pub fn response_samples(run: &ClientRun, t0_us: i64) -> Vec<ResponseSample> {
    let offset = run.clock.map_or(0, |c| c.offset_us);
    let uplink = run.pings.iter().copied().min().unwrap_or(0) as i64 / 2;
    let mut out = Vec::new();
    for &(_, sent, seen) in &run.input_responses {
        let Some(rec) = run.records.iter().find(|r| r.decode_end_us == seen) else {
            continue;
        };
        let shown = if rec.shown_us != 0 {
            rec.shown_us as i64
        } else {
            seen as i64
        };
        let sent = sent as i64;
        let last_shard = rec.last_shard_us as i64;
        let timing = run
            .timings
            .get(&rec.frame_number)
            .filter(|_| rec.session == run.session);
        let (network, processing) = match timing {
            Some(t) => {
                let send_done = t.send_done_us as i64 - offset;
                (
                    uplink + (last_shard - send_done).max(0),
                    (send_done - sent - uplink).max(0),
                )
            }
            None => (uplink, (last_shard - sent - uplink).max(0)),
        };
        let rd = shown - sent;
        out.push(ResponseSample {
            at_ms: (sent - t0_us) as f64 / 1000.0,
            response_ms: rd as f64 / 1000.0,
            network_ms: network as f64 / 1000.0,
            processing_ms: processing as f64 / 1000.0,
            playout_ms: (rd - network - processing) as f64 / 1000.0,
        });
    }
    out
}

/// The p-th percentile (0..=100, nearest rank, as in the reports).
fn pct(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    untether::stats::percentile(v, p)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Adds the scenario, the quality summary (`quality.ssim`, `quality.psnr_db` as the contract
/// says, plus detail) and the response-delay decomposition to a JSON report.
pub fn annotate_report(
    report: &mut serde_json::Value,
    sc: &Scenario,
    quality: &[QualitySample],
    response: &[ResponseSample],
    plan: QualityPlan,
) {
    let Some(obj) = report.as_object_mut() else {
        return;
    };
    obj.insert(
        "scenario".into(),
        serde_json::to_value(sc).unwrap_or(serde_json::Value::Null),
    );
    if !quality.is_empty() {
        let mut ssim: Vec<f64> = quality.iter().map(|q| q.ssim_y).collect();
        let psnr: Vec<f64> = quality.iter().map(|q| q.psnr_y_db).collect();
        let ssim_all: Vec<f64> = quality.iter().map(|q| q.ssim_all).collect();
        let psnr_all: Vec<f64> = quality.iter().map(|q| q.psnr_all_db).collect();
        obj.insert(
            "quality".into(),
            serde_json::json!({
                "ssim": mean(&ssim),
                "psnr_db": mean(&psnr),
                "ssim_min": pct(&mut ssim, 0.0),
                "ssim_p5": pct(&mut ssim, 5.0),
                "ssim_all": mean(&ssim_all),
                "psnr_all_db": mean(&psnr_all),
                "frames_compared": quality.len(),
                "method": "FFmpeg ssim and psnr filters (libavfilter), luma of BT.601 4:2:0 unless the stream is RGB",
                "sampling": format!("{} consecutive frames every {} s from {} s", plan.batch_frames, plan.every_s, plan.first_s),
            }),
        );
    }
    if !response.is_empty() {
        let col = |f: fn(&ResponseSample) -> f64| {
            let mut v: Vec<f64> = response.iter().map(f).collect();
            serde_json::json!({"p50": pct(&mut v, 50.0), "p99": pct(&mut v, 99.0), "mean": mean(&v)})
        };
        if let Some(input) = obj.get_mut("input").and_then(|i| i.as_object_mut()) {
            input.insert(
                "response_delay_ms".into(),
                serde_json::json!({
                    "samples": response.len(),
                    "rd": col(|r| r.response_ms),
                    "nd": col(|r| r.network_ms),
                    "pd": col(|r| r.processing_ms),
                    "od": col(|r| r.playout_ms),
                    "method": "input sent -> first shown frame whose pixel stamp says the scene applied it; ND = min RTT/2 + frame transit, PD = host (input arrived -> frame sent), OD = client (received -> shown)",
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_the_planned_frames() {
        let p = QualityPlan {
            batch_frames: 150,
            every_s: 10.0,
            first_s: 1.0,
        };
        assert!(!p.includes(59, 60));
        assert!(p.includes(60, 60));
        assert!(p.includes(209, 60));
        assert!(!p.includes(210, 60));
        assert!(p.includes(660, 60));
        assert!(!QualityPlan::off().includes(60, 60));
        let n = (0..60 * 30).filter(|&n| p.includes(n, 60)).count();
        assert_eq!(n, 450);
    }

    #[test]
    fn a_bad_scenario_value_is_named() {
        let sc = Scenario {
            preset: "warp".into(),
            ..Default::default()
        };
        let e = demo_options(&sc, &BenchOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("preset") && e.contains("ultrafast"), "{e}");
        let sc = Scenario {
            conversion: "magic".into(),
            ..Default::default()
        };
        let e = demo_options(&sc, &BenchOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("conversion") && e.contains("simd"), "{e}");
        let sc = Scenario {
            pacing: 1.5,
            ..Default::default()
        };
        let e = demo_options(&sc, &BenchOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("pacing") && e.contains("0.0..=1.0"), "{e}");
    }

    #[test]
    fn pacing_reaches_the_host_network_config() {
        let sc = Scenario {
            pacing: 0.5,
            ..Default::default()
        };
        let o = demo_options(&sc, &BenchOptions::default()).unwrap();
        assert_eq!(o.host.network.pacing, 0.5);
        assert!(sc.display_name().ends_with("-pacing0.5"));
        let off = demo_options(&Scenario::default(), &BenchOptions::default()).unwrap();
        assert_eq!(off.host.network.pacing, 0.0);
    }

    #[test]
    fn the_bgra_stamp_reads_back() {
        let mut f = BgraFrame::new(640, 360).unwrap();
        let st = stamp::Stamp {
            frame_number: 1234,
            capture_us: 987_654_321,
            input_seq: 7,
        };
        stamp::write_bgra(&mut f, &st);
        let back = bgra_stamp(f.width, f.height, &f.data, f.stride).unwrap();
        assert_eq!(back.frame_number, 1234);
        assert_eq!(back.input_seq, 7);
    }
}
