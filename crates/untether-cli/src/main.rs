//! The `untether` command: `host`, `client`, `demo`, `pair`, `netem`, `bench`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches};
use untether::client::{ClientAudio, ClientIo, Display, InputDevice};
use untether::config::parse_key;
use untether::host::{AudioSpec, HostSetup, InputSpec, SourceSpec};
use untether::identity::Access;
use untether::{report, DemoOptions, Host};
use untether_media::x11::{CaptureTarget, PointerMode};

#[macro_use]
mod out;
mod args;
mod bench;
mod bench_app;
mod config_file;
mod discover;
mod doctor;
mod generate;
mod netem;
mod options;
mod pair;
#[cfg(feature = "rtsp")]
mod rtsp;
#[cfg(not(feature = "rtsp"))]
#[path = "rtsp_off.rs"]
mod rtsp;
mod run;
mod status;
mod wayland_arg;

pub(crate) use args::*;
pub(crate) use options::*;

fn run_track(args: TrackArgs) -> Result<()> {
    let t =
        untether::pose::track::Track::generate(&args.kind, args.seconds.as_secs_f64(), args.rate)?;
    let text = t.to_text();
    if args.out.as_os_str() == "-" {
        out!("{text}");
    } else {
        std::fs::write(&args.out, text)
            .with_context(|| format!("cannot write {}", args.out.display()))?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n")
        .with_context(|| format!("cannot write report {}", path.display()))?;
    eprintln!("untether: report written to {}", path.display());
    Ok(())
}

fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst)) {
        log::warn!("cannot install the Ctrl-C handler: {e}");
    }
    stop
}

fn host_setup(args: &HostArgs) -> Result<HostSetup> {
    let mut setup = HostSetup {
        stamp: args.stamp,
        ..Default::default()
    };
    let pointer = match args.pointer.as_str() {
        "relative" => PointerMode::Relative,
        _ => PointerMode::Absolute,
    };
    let is_kms = |c: &str| c == "kms" || c.starts_with("kms:");
    if let Some((c, dev)) = args
        .capture
        .as_deref()
        .filter(|c| is_kms(c))
        .and_then(|c| Some((c, c.strip_prefix("kms")?)))
    {
        let device = match dev.strip_prefix(':') {
            None if dev.is_empty() => None,
            Some(d) if !d.is_empty() => Some(d.to_string()),
            _ => bail!("--capture {c:?}: expected kms or kms:DEVICE (e.g. kms:/dev/dri/card0)"),
        };
        setup.source = SourceSpec::Kms { device };
        setup.input = InputSpec::Discard;
    }
    if let Some(c) = args
        .capture
        .as_deref()
        .filter(|c| wayland_arg::is_wayland(c))
    {
        setup.source = wayland_arg::source(c, args.region.as_deref(), false)?;
    } else if args.region.is_some() {
        bail!("--region goes with --capture wlr (an X11 capture takes --window)");
    }
    if let Some(c) = args
        .capture
        .as_deref()
        .filter(|c| !wayland_arg::is_wayland(c) && !is_kms(c))
    {
        let display = match c.strip_prefix("x11") {
            Some("") => None,
            Some(d) => match d.strip_prefix(':') {
                Some(d) if !d.is_empty() => Some(d.to_string()),
                _ => bail!("--capture {c:?}: expected x11 or x11:DISPLAY (e.g. x11::1)"),
            },
            None => bail!(
                "--capture {c:?}: expected x11, x11:DISPLAY, wlr, wlr:OUTPUT, portal, pipewire:NODE, kms or kms:DEVICE"
            ),
        };
        setup.source = SourceSpec::X11 {
            display: display.clone(),
            target: match &args.window {
                Some(w) => CaptureTarget::Window(w.clone()),
                None => CaptureTarget::Screen,
            },
        };
        setup.input = InputSpec::Xtest { display, pointer };
    }
    match args.source.as_deref() {
        None | Some("scene") => {}
        Some(s) => match s.strip_prefix("pipe:") {
            Some(path) if !path.is_empty() => {
                setup.source = SourceSpec::Pipe {
                    path: path.to_string(),
                    format: args
                        .pipe_format
                        .parse()
                        .map_err(|e| anyhow::anyhow!("--pipe-format: {e}"))?,
                };
            }
            _ => bail!("--source {s:?}: expected scene or pipe:FILE (pipe:- reads stdin)"),
        },
    }
    match args.input.as_str() {
        "uinput" => setup.input = InputSpec::Uinput,
        "none" => setup.input = InputSpec::Discard,
        _ => {}
    }
    setup.audio = match args.audio.as_str() {
        "none" => AudioSpec::None,
        "tone" => AudioSpec::Tone,
        "capture" => AudioSpec::Capture { device: None },
        a => match a.strip_prefix("capture:") {
            Some(d) if !d.is_empty() => AudioSpec::Capture {
                device: Some(d.to_string()),
            },
            _ => bail!("--audio {a:?}: expected none, tone, capture or capture:DEVICE"),
        },
    };
    Ok(setup)
}

fn run_host(args: HostArgs, global: &Global) -> Result<()> {
    run_host_app(args, global, None)
}

/// The host, optionally with the application `untether run` started as its source.
fn run_host_app(args: HostArgs, global: &Global, mut app: Option<&mut run::AppRun>) -> Result<()> {
    let mut cfg = load_config(global)?;
    apply_video(&mut cfg, &args.video);
    apply_vr(&mut cfg, &args.vr, Some(&args.video));
    apply_net(&mut cfg, &args.net)?;
    if let Some(sz) = &args.size {
        cfg.video.resolution = sz.clone();
    }
    if let Some(b) = &args.bind {
        cfg.host.bind = b.clone();
    }
    if let Some(a) = &args.access {
        cfg.host.access = parse_key(a).map_err(with_flag)?;
    }
    if let Some(sch) = &args.scheduler {
        cfg.network.scheduler = parse_key(sch).map_err(with_flag)?;
    }
    if let Some(n) = args.max_clients {
        cfg.host.max_clients = n;
    }
    if args.no_advertise {
        cfg.host.advertise = false;
    }
    if let Some(n) = &args.host_name {
        cfg.host.name = n.clone();
    }
    if let Some(d) = args.status_interval {
        cfg.host.status_interval_s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    }
    if let Some(v) = &args.slow_viewer {
        cfg.host.slow_viewer = parse_key(v).map_err(with_flag)?;
    }
    if let Some(d) = &args.dashboard {
        cfg.host.dashboard = d.clone();
    }
    apply_webrtc(&mut cfg, &args.webrtc);
    if let Some(d) = &global.state_dir {
        cfg.host.state_dir = d.display().to_string();
    }
    if let Some(r) = &args.rtsp {
        cfg.rtsp.listen = r.clone();
    }
    let options = host_options(&cfg)?;
    cfg.rtsp.validate().map_err(with_flag)?;
    let mut setup = host_setup(&args)?;
    if let Some(a) = app.as_deref() {
        a.configure(&mut setup);
    }
    let duration = duration_of(&args.common)?;
    let stop = stop_on_ctrl_c();
    let rtsp = rtsp::start(&cfg, options.host.access, &mut setup)?;
    let host = Host::start_with(options.clone(), setup.clone()).map_err(host_error)?;
    let advert = discover::advertise(&host, &cfg, rtsp.as_deref().map(rtsp::port));
    let options = host.options().clone();
    let v = &options.video;
    let source = match &setup.source {
        SourceSpec::Scene => "the test scene".to_string(),
        SourceSpec::X11 { display, target } => format!(
            "X11 {} of {}",
            match target {
                CaptureTarget::Screen => "screen".to_string(),
                CaptureTarget::Window(w) => format!("window {w:?}"),
            },
            display
                .clone()
                .unwrap_or_else(|| std::env::var("DISPLAY").unwrap_or_default())
        ),
        SourceSpec::Pipe { path, format } => format!("{format} frames from {path}"),
        SourceSpec::Wlr { target, .. } => format!(
            "Wayland output {}{} (wlr-screencopy)",
            target.output.as_deref().unwrap_or("0"),
            target
                .region
                .map(|(x, y, w, h)| format!(" region {x},{y},{w}x{h}"))
                .unwrap_or_default()
        ),
        SourceSpec::Portal { .. } => "the desktop portal's screen cast (PipeWire)".to_string(),
        SourceSpec::PipeWire { target } => format!("PipeWire node {target:?}"),
        SourceSpec::App => "the application".to_string(),
        SourceSpec::Presents(_) => "the application's presented frames".to_string(),
        SourceSpec::Kms { device } => format!(
            "the KMS scan-out of {}",
            device.as_deref().unwrap_or("the first DRM card")
        ),
    };
    let encoder = host.encoder_info();
    eprintln!(
        "untether host: listening on udp {} — {source}, {} @ {} fps, {} with {} {} ({} conversion, refresh {}), {} kbit/s. Ctrl-C to stop.",
        host.local_addr(),
        v.resolution,
        v.fps,
        if v.selection.codec.is_none() {
            "codec auto".to_string()
        } else {
            encoder.as_ref().map_or("?".into(), |e| e.codec.to_string())
        },
        encoder.as_ref().map_or("?".into(), |e| e.name.clone()),
        v.preset,
        v.selection.conversion,
        match v.refresh {
            untether_media::codec::Refresh::Idr => "idr".to_string(),
            untether_media::codec::Refresh::Intra => format!("intra every {} frames", v.refresh_period),
        },
        v.bitrate_kbps
    );
    let access = options.host.access;
    eprintln!(
        "untether host: identity {} · access {} · up to {} clients{}",
        host.fingerprint(),
        access.name(),
        options.host.max_clients,
        host.state_dir()
            .map(|d| format!(" · state in {}", d.display()))
            .unwrap_or_default()
    );
    if access == Access::Open {
        eprintln!(
            "untether host: WARNING: access is OPEN — anyone who can reach udp {} may connect and send input. Use --access allowlist (the default) or pin on untrusted networks.",
            host.local_addr()
        );
    }
    if let Some(server) = &rtsp {
        rtsp::announce("host", server, &cfg, access);
    }
    let secrets = untether::identity::Secrets::for_stderr(host.state_dir().as_deref());
    print_browser_access(&host, &secrets);
    print_dashboard(&host);
    let mut shown_link = host.browser_link();
    let mut shown_pin = None;
    let mut paired = 0;
    let started = std::time::Instant::now();
    let mut status = status::StatusLog::new(Duration::from_secs(cfg.host.status_interval_s));
    while !stop.load(Ordering::SeqCst)
        && !host.is_stopped()
        && !host.source_ended()
        && duration.is_none_or(|d| started.elapsed() < d)
        && app
            .as_deref_mut()
            .is_none_or(|a| a.running(host.client_count() > 0))
    {
        let pin = host.pairing_pin();
        if let Some(p) = pin.as_deref().filter(|_| pin != shown_pin) {
            eprintln!("{}", secrets.pairing_pin(p, options.host.pin_ttl_s));
        }
        shown_pin = pin;
        if shown_link.is_some() {
            let link = host.browser_link();
            if link != shown_link {
                if let Some(line) = link
                    .as_deref()
                    .and_then(|l| secrets.browser_link_renewed(l))
                {
                    eprintln!("{line}");
                }
                shown_link = link;
            }
        }
        let p = host.paired_clients();
        for fp in p.iter().skip(paired) {
            eprintln!("untether host: paired with {fp}; it is on the allowlist now");
        }
        paired = p.len();
        let now = std::time::Instant::now();
        if status.due(now) {
            log::info!("{}", status.line(&host.summary(), now));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(advert);
    let mut summary = host.stop();
    let app_report = app.map(|a| a.finish());
    if let Some(server) = &rtsp {
        // After the server closed its viewers' connections: they are listed as gone.
        server.stop();
        summary.consumers = vec![rtsp::summary(server)];
    }
    if let Some(f) = &summary.fatal {
        bail!("host stopped: {f}");
    }
    eprintln!(
        "untether host: captured {} · encoded {} · sent {} frames ({} keyframes, {} copies to {} client{}) · dropped {} · {:.1} MB sent{}",
        summary.captured,
        summary.encoded,
        summary.sent,
        summary.keyframes,
        summary.frame_copies_sent,
        summary.clients.len(),
        if summary.clients.len() == 1 { "" } else { "s" },
        summary.dropped,
        (summary.bytes_sent + summary.webrtc_bytes_sent) as f64 / 1e6,
        if summary.webrtc_bytes_sent > 0 {
            format!(" ({:.1} MB to browsers)", summary.webrtc_bytes_sent as f64 / 1e6)
        } else {
            String::new()
        }
    );
    for line in untether::report::client_lines(&summary.clients) {
        eprintln!("untether host: {line}");
    }
    for c in &summary.consumers {
        eprintln!("untether host: {c}");
    }
    if let Some(path) = &args.common.report {
        let mut config =
            untether::report_config(&options, Display::Headless, summary.link.transport.name());
        // What ran, rather than what was asked for (`auto`), as the demo's report and the
        // clients' (told beside their Accept) say.
        if let Some(e) = &summary.encoder {
            config.encoder = e.clone();
        }
        let mut value = serde_json::to_value(report::build_host(config, &summary))?;
        if let (Some(a), Some(obj)) = (app_report, value.as_object_mut()) {
            obj.insert("app".into(), a);
        }
        write_json(path, &value)?;
    }
    Ok(())
}

/// Tells where the dashboard is: its link with the admin token on a terminal (printed once,
/// logged nowhere); elsewhere (a service's journal, a log file) only where the link is kept,
/// `dashboard_link` in the state directory, readable by this user only.
fn print_dashboard(host: &Host) {
    use std::io::IsTerminal;
    let (Some(url), Some(link)) = (host.dashboard_url(), host.dashboard_link()) else {
        return;
    };
    let file = host
        .state_dir()
        .map(|d| d.join(untether::identity::DASHBOARD_LINK_FILE));
    let scope = if host.dashboard_local_only() {
        " (this machine only)"
    } else {
        ""
    };
    match file {
        Some(f) if !std::io::stderr().is_terminal() => eprintln!(
            "untether host: dashboard at {url}{scope}: open it with its admin token, in {} \
             (readable by this user only)",
            f.display()
        ),
        Some(f) => eprintln!(
            "untether host: dashboard at {link}{scope} — keep this link secret: whoever has it \
             runs the host (it is also in {})",
            f.display()
        ),
        None => eprintln!(
            "untether host: dashboard at {link}{scope} — keep this link secret: whoever has it \
             runs the host"
        ),
    }
}

/// Tells where browsers watch: the one-time link (or where it is kept), the PIN page, the
/// certificate's fingerprint.
fn print_browser_access(host: &Host, secrets: &untether::identity::Secrets) {
    let Some(url) = host.browser_url() else {
        return;
    };
    let ttl = host.options().webrtc.link_ttl_s;
    if let Some(link) = host.browser_link() {
        eprintln!("{}", secrets.browser_access(&link, &url, ttl));
    }
    if let Some(fp) = host.browser_cert_fingerprint() {
        eprintln!(
            "untether host: the page's self-signed certificate: SHA-256 {fp} (check it against what the browser shows before you accept it)"
        );
    }
}

fn run_client_cmd(args: ClientArgs, global: &Global) -> Result<()> {
    let mut cfg = load_config(global)?;
    apply_client(&mut cfg, &args.side)?;
    apply_vr(
        &mut cfg,
        &VrArgs {
            vr: args.vr,
            ipd: None,
        },
        None,
    );
    apply_pose(&mut cfg, &args.pose);
    apply_net(&mut cfg, &args.net)?;
    let sink = match args.io.sink.as_deref() {
        None => None,
        Some(s) => match s.strip_prefix("pipe:") {
            Some(p) if !p.is_empty() => Some(p.to_string()),
            _ => bail!("--sink {s:?}: expected pipe:FILE (pipe:- writes stdout)"),
        },
    };
    if sink.is_some() {
        cfg.client.headless = true;
    }
    let to_stdout = sink.as_deref() == Some("-");
    if let Some(d) = &global.state_dir {
        cfg.client.state_dir = d.display().to_string();
    }
    cfg.client.paths.extend(args.paths.iter().cloned());
    if let Some(r) = &args.resolution {
        cfg.client.resolution = r.clone();
    }
    if let Some(f) = args.fps {
        cfg.client.fps = f;
    }
    if let Some(b) = args.bitrate {
        cfg.client.bitrate_kbps = b;
    }
    if let Some(pin) = &args.pin {
        untether::config::check_pin(pin).map_err(|e| anyhow::anyhow!("--pin {e}"))?;
    }
    let state_dir =
        (!cfg.client.state_dir.is_empty()).then(|| PathBuf::from(&cfg.client.state_dir));
    let target = discover::client_target(args.host.as_deref(), state_dir.as_deref())?;
    let host = target.addr;
    let options = client_options(&cfg, host, &args.side, &args.common)?;
    let mut io = ClientIo {
        pin: args.pin.clone(),
        host_label: Some(target.label),
        host_key: target.key,
        end_on_host_bye: sink.is_some(),
        wait_for_approval: cfg.client.wait_for_approval,
        wait_for_host: cfg.client.wait_for_host && !args.exit_on_bye,
        sink,
        audio: args.io.audio.then(|| ClientAudio {
            device: args.io.audio_device.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    for path in &args.io.input_devices {
        io.input_devices.push(InputDevice::open(path)?);
    }
    let stop = stop_on_ctrl_c();
    eprintln!("untether client: connecting to {host} …");
    // The report is shown on every exit, also when the host went away or refused.
    let (run, ended_by) = untether::run_client_to_end(&options, io, stop).map_err(|e| match e {
        untether::ClientError::Config(c) => with_flag(c),
        e => e.into(),
    })?;
    let params = run.params;
    let mut host_opts = host_options(&cfg)?;
    if let Some(p) = &params {
        host_opts.video.resolution.width = p.width as u32;
        host_opts.video.resolution.height = p.height as u32;
        host_opts.video.fps = p.fps as u32;
        host_opts.video.bitrate_kbps = p.bitrate_kbps;
    }
    let mut config =
        untether::report_config(&host_opts, options.display, run.link.transport.name());
    // The host names its encoder, preset and conversion beside its Accept; an older host
    // does not (RGB is never converted).
    let named = run.host_encoder.clone();
    config.preset = named
        .as_ref()
        .map_or("unknown".into(), |e| e.preset.clone());
    config.encoder = named
        .as_ref()
        .map_or("unknown".into(), |e| e.encoder.clone());
    config.decoder = run.decoder.clone().unwrap_or_default();
    if let Some(p) = &params {
        config.codec = p.codec.name().into();
        config.refresh = if p.refresh_period > 0 {
            format!("refreshing/{}", p.refresh_period)
        } else {
            "idr".into()
        };
        config.conversion = match &named {
            Some(e) => e.conversion.clone(),
            None if p.codec == untether::api::Codec::H264Rgb => "rgb".into(),
            None => "unknown".into(),
        };
    }
    let report = report::build(config, &run, None);
    if params.is_none() && ended_by.is_some() {
        // It never connected: no latency report to show, only why (below).
    } else if to_stdout {
        eprint!("{}", report.to_text());
    } else {
        out!("{}", report.to_text());
    }
    if let Some(path) = &args.common.report {
        write_json(path, &report)?;
    }
    match ended_by {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

fn run_demo(args: DemoArgs, global: &Global) -> Result<()> {
    let mut cfg = load_config(global)?;
    apply_video(&mut cfg, &args.video);
    apply_client(&mut cfg, &args.side)?;
    apply_webrtc(&mut cfg, &args.webrtc);
    apply_net(&mut cfg, &args.net)?;
    apply_vr(&mut cfg, &args.vr, Some(&args.video));
    apply_pose(&mut cfg, &args.pose);
    if cfg.vr.enabled && cfg.vr.pose == "auto" {
        // Nobody turns a head in a demo: a generated track that keeps turning (what the
        // pose-to-photon measurement reads best).
        cfg.vr.pose = "synthetic:turn".into();
    }
    if cfg.client.input_probe_interval_ms == 0 && args.side.input_probe.is_none() && !cfg.vr.enabled
    {
        // The demo measures input response by default (not in VR: there the head pose is the
        // input, measured as pose-to-photon, and a probe's look-around would turn the view).
        cfg.client.input_probe_interval_ms = 500;
    }
    if let Some(r) = &args.rtsp {
        cfg.rtsp.listen = r.clone();
    }
    let host = host_options(&cfg)?;
    cfg.rtsp.validate().map_err(with_flag)?;
    let mut common = args.common.clone();
    common.duration = Some(common.duration.unwrap_or(Duration::from_secs(10)));
    let client = client_options(&cfg, ([127, 0, 0, 1], 0).into(), &args.side, &common)?;
    let stop = stop_on_ctrl_c();
    let v = &host.video;
    eprintln!(
        "untether demo: streaming the test scene {} @ {} fps, codec {}, encoder {} ({}, {} conversion, refresh {}) at {} kbit/s over loopback UDP for {:.0} s ({})…",
        v.resolution,
        v.fps,
        v.selection.codec_name(),
        v.selection.encoder,
        v.preset,
        v.selection.conversion,
        v.refresh,
        v.bitrate_kbps,
        client.duration.map_or(10.0, |d| d.as_secs_f64()),
        if client.display == Display::Window { "window" } else { "headless" }
    );
    let mut setup = HostSetup::default();
    let mut io = ClientIo::default();
    if args.audio {
        setup.audio = AudioSpec::Tone;
        io.audio = Some(ClientAudio::default());
    }
    // The demo's host admits only its own client: RTSP viewers authenticate.
    let rtsp = rtsp::start(&cfg, Access::Allowlist, &mut setup)?;
    if let Some(server) = &rtsp {
        rtsp::announce("demo", server, &cfg, Access::Allowlist);
    }
    let report = untether::run_demo_with(DemoOptions { host, client }, setup, io, stop);
    if let Some(server) = &rtsp {
        server.stop();
    }
    let report = report.map_err(demo_error)?;
    out!("{}", report.to_text());
    if let Some(path) = &args.common.report {
        write_json(path, &report)?;
    }
    Ok(())
}

/// An error and its causes, each cause once: `a: b: c`, leaving out a cause whose text the
/// message already includes (an error that prints its source in its own message).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

fn main() -> ExitCode {
    if std::env::var_os("SVT_LOG").is_none() {
        // SVT-AV1 prints its banner and settings on stderr at every encoder start; errors only
        // (set here, before any thread starts).
        std::env::set_var("SVT_LOG", "1");
    }
    // Cli::parse, keeping the matches: which flags were given ([`given_flags`]).
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut Cli::command()).exit(),
    };
    if matches!(
        cli.command,
        Command::Host(_) | Command::Run(_) | Command::Client(_) | Command::Demo(_)
    ) {
        let _ = GIVEN_FLAGS.set(given_flags(&matches));
    }
    let global = cli.global;
    let mut log =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(level) = global.log_filter() {
        log.parse_filters(level);
    }
    let logger = log.build();
    let max = logger.filter();
    if log::set_boxed_logger(Box::new(bench::AboveBar(logger))).is_ok() {
        log::set_max_level(max);
    }
    let result = match cli.command {
        Command::Host(a) => run_host(a, &global),
        Command::Run(a) => run::run(a, &global),
        Command::Client(a) => run_client_cmd(a, &global),
        Command::Demo(a) => run_demo(a, &global),
        Command::Track(a) => run_track(a),
        Command::Generate(a) => generate::run(a),
        Command::Netem(a) => load_config(&global).and_then(|_| netem::run(a)),
        Command::Bench(a) => load_config(&global).and_then(|_| bench::run(*a, global.quiet > 0)),
        Command::Doctor(a) => doctor::run(a, load_checked_config(&global), &global),
        Command::Discover(a) => load_config(&global).and_then(|cfg| {
            let dir = global.state_dir.clone().or_else(|| {
                (!cfg.client.state_dir.is_empty()).then(|| PathBuf::from(&cfg.client.state_dir))
            });
            discover::run(a, dir)
        }),
        Command::Pair(mut a) => load_config(&global).and_then(|cfg| {
            a.state_dir = global.state_dir.clone().or_else(|| {
                (!cfg.host.state_dir.is_empty()).then(|| PathBuf::from(&cfg.host.state_dir))
            });
            a.client_state_dir = global.state_dir.clone().or_else(|| {
                (!cfg.client.state_dir.is_empty()).then(|| PathBuf::from(&cfg.client.state_dir))
            });
            pair::run(a)
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `untether … | head`: the reader has what it wanted.
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("untether: error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}
