//! From the command line and the config file to the options a command runs with: which flag
//! sets which key (errors name the flag when it was given, else the file's line), loading and
//! checking the config, applying each group of flags.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::CommandFactory;
use untether::client::{ClientOptions, Display};
use untether::config::{parse_key, ConfigError, ConfigFile, ConfigToml};
use untether::HostOptions;

use crate::config_file;
use crate::{Cli, ClientSide, Common, Global, NetArgs, PoseArgs, VideoArgs, VrArgs};

/// The flag that sets a config key, for error messages.
pub(crate) const FLAGS: &[(&str, &str)] = &[
    ("vr.ipd_mm", "--ipd"),
    ("vr.pose", "--pose"),
    ("vr.pose_rate_hz", "--pose-rate"),
    ("webrtc.listen", "--webrtc"),
    ("webrtc.cert", "--webrtc-cert"),
    ("webrtc.publish", "--publish"),
    ("webrtc.publish_token", "--publish-token"),
    ("network.transport", "--transport"),
    ("network.interface", "--interface"),
    ("video.resolution", "--resolution"),
    ("video.resolution", "--size"),
    ("video.fps", "--fps"),
    ("video.bitrate_kbps", "--bitrate"),
    ("video.codec", "--codec"),
    ("video.refresh", "--refresh"),
    ("video.refresh_period", "--refresh-period"),
    ("client.codecs", "--codecs"),
    ("client.decoder", "--decoder"),
    ("client.hwaccel", "--hwaccel"),
    ("video.encoder", "--encoder"),
    ("video.conversion", "--conversion"),
    ("video.preset", "--preset"),
    ("video.slices", "--slices"),
    ("host.bind", "--bind"),
    ("host.access", "--access"),
    ("network.scheduler", "--scheduler"),
    ("host.max_clients", "--max-clients"),
    ("host.name", "--host-name"),
    ("host.status_interval_s", "--status-interval"),
    ("host.slow_viewer", "--slow-viewer"),
    ("host.dashboard", "--dashboard"),
    ("client.name", "--name"),
    ("client.paths", "--path"),
    ("client.resolution", "--resolution"),
    ("client.fps", "--fps"),
    ("client.bitrate_kbps", "--bitrate"),
    ("client.input_probe_interval_ms", "--input-probe"),
    ("client.presenter", "--presenter"),
    ("vr.lens", "--lens"),
    ("scene.walk_speed", "--walk"),
    ("rtsp.listen", "--rtsp"),
];

/// The long flags given on the command line (`--fps`) of a command that applies them to the
/// config (host, run, client, demo), set once in `main`: a bad value is blamed on its flag only
/// when the flag was given, else on the config file's line.
pub(crate) static GIVEN_FLAGS: OnceLock<Vec<String>> = OnceLock::new();

/// The config file read ([`load_config`]), kept to point at the line of a value refused after
/// it was read.
pub(crate) static CONFIG_FILE: OnceLock<ConfigFile> = OnceLock::new();

/// The long flags the command line gave, from clap's matches of the innermost subcommand.
pub(crate) fn given_flags(matches: &clap::ArgMatches) -> Vec<String> {
    let mut cmd = Cli::command();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        match cmd.find_subcommand(name) {
            Some(c) => cmd = c.clone(),
            None => break,
        }
        m = sub;
    }
    cmd.get_arguments()
        .filter(|a| {
            m.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine)
        })
        .filter_map(|a| Some(format!("--{}", a.get_long()?)))
        .collect()
}

/// A config error that says where the bad value came from: the flag when one was given
/// (`video.fps (--fps): …`), else the config file's line and column
/// (`untether.toml:7:7: video.fps: 500 is out of range 1..=240`).
pub(crate) fn with_flag(e: ConfigError) -> anyhow::Error {
    let ConfigError::Invalid { key, message } = e else {
        return e.into();
    };
    let keys: Vec<&str> = key.split(", ").collect();
    let given = |flag: &str| {
        GIVEN_FLAGS
            .get()
            .is_some_and(|g| g.iter().any(|f| f == flag))
    };
    let mut flags: Vec<&str> = Vec::new();
    for (_, flag) in FLAGS.iter().filter(|(k, f)| keys.contains(k) && given(f)) {
        if !flags.contains(flag) {
            flags.push(flag);
        }
    }
    let set_by_flag = |k: &str| FLAGS.iter().any(|(fk, f)| *fk == k && given(f));
    let (path, places) = match CONFIG_FILE.get() {
        Some(file) => (
            file.path(),
            keys.iter()
                .filter(|k| !set_by_flag(k))
                .filter_map(|k| Some((*k, file.place(k)?)))
                .collect(),
        ),
        None => ("", Vec::new()),
    };
    let Some((_, first)) = places.first() else {
        return if flags.is_empty() {
            ConfigError::Invalid { key, message }.into()
        } else {
            anyhow::anyhow!("{key} ({}): {message}", flags.join(", "))
        };
    };
    // More keys from the file (a combination refused): their lines beside the flags.
    let others: Vec<String> = flags
        .iter()
        .map(|f| f.to_string())
        .chain(
            places[1..]
                .iter()
                .map(|(k, p)| format!("{k} at line {}", p.line)),
        )
        .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!(" ({})", others.join(", "))
    };
    anyhow::anyhow!(
        "{path}:{}:{}: {key}{others}: {message}",
        first.line,
        first.column
    )
}

/// A host that would not start; a configuration error names its flag or its line ([`with_flag`]).
pub(crate) fn host_error(e: untether::HostError) -> anyhow::Error {
    match e {
        untether::HostError::Config(c) => with_flag(c),
        e => e.into(),
    }
}

/// A demo that would not start; a configuration error names its flag or its line ([`with_flag`]).
pub(crate) fn demo_error(e: untether::DemoError) -> anyhow::Error {
    match e {
        untether::DemoError::Host(h) => host_error(h),
        untether::DemoError::Client(untether::ClientError::Config(c)) => with_flag(c),
        e => e.into(),
    }
}

/// `--config FILE`, else the default file ([`config_file`]) when there is one, else defaults.
pub(crate) fn load_config(global: &Global) -> Result<ConfigToml> {
    Ok(match config_file::resolve(global.config.as_deref()) {
        Some(path) => {
            if global.config.is_none() {
                log::debug!("reading the config file {}", path.display());
            }
            let file = ConfigFile::read(&path)?;
            let cfg = file.parse()?;
            // The first file read is the only one: every command reads one.
            let _ = CONFIG_FILE.set(file);
            cfg
        }
        None => ConfigToml::default(),
    })
}

/// The config, checked as a host and a client start would check it: `untether doctor` reports
/// a value out of range (with its line) as the file's failed check, like one that does not parse.
pub(crate) fn load_checked_config(global: &Global) -> Result<ConfigToml> {
    let cfg = load_config(global)?;
    host_options(&cfg)?;
    cfg.rtsp.validate().map_err(with_flag)?;
    untether::config::validate_client(&cfg.client, &cfg.network).map_err(with_flag)?;
    Ok(cfg)
}

pub(crate) fn apply_video(cfg: &mut ConfigToml, v: &VideoArgs) {
    if let Some(r) = &v.resolution {
        cfg.video.resolution = r.clone();
    }
    if let Some(f) = v.fps {
        cfg.video.fps = f;
    }
    if let Some(b) = v.bitrate {
        cfg.video.bitrate_kbps = b;
    }
    // Flags win over the file: a flag for one of codec/encoder/conversion replaces all three,
    // the others following from it (Selection::parse).
    if v.codec.is_some() || v.encoder.is_some() || v.conversion.is_some() {
        cfg.video.codec = v.codec.clone();
        cfg.video.encoder = v.encoder.clone();
        cfg.video.conversion = v.conversion.clone();
    }
    if let Some(r) = &v.refresh {
        cfg.video.refresh = r.clone();
    }
    if let Some(p) = v.refresh_period {
        cfg.video.refresh_period = p;
    }
    if let Some(p) = &v.preset {
        cfg.video.preset = p.clone();
    }
    if let Some(n) = v.slices {
        cfg.video.slices = n;
    }
    if let Some(s) = v.spin {
        cfg.scene.spin_deg_per_s = s;
    }
    if let Some(w) = v.walk {
        cfg.scene.walk_speed = w;
    }
}

/// `--vr` and `--ipd`; with `--vr` the scene stands still unless `--spin`/`--walk` are given.
pub(crate) fn apply_vr(cfg: &mut ConfigToml, vr: &VrArgs, video: Option<&VideoArgs>) {
    if vr.vr {
        cfg.vr.enabled = true;
        if let Some(v) = video {
            if v.spin.is_none() {
                cfg.scene.spin_deg_per_s = 0.0;
            }
            if v.walk.is_none() {
                cfg.scene.walk_speed = 0.0;
            }
        }
    }
    if let Some(i) = vr.ipd {
        cfg.vr.ipd_mm = i;
    }
}

pub(crate) fn apply_pose(cfg: &mut ConfigToml, p: &PoseArgs) {
    if let Some(s) = &p.pose {
        cfg.vr.pose = s.clone();
    }
    if let Some(r) = p.pose_rate {
        cfg.vr.pose_rate_hz = r;
    }
}

pub(crate) fn apply_net(cfg: &mut ConfigToml, n: &NetArgs) -> Result<()> {
    if let Some(t) = &n.transport {
        cfg.network.transport = parse_key(t).map_err(with_flag)?;
    }
    if let Some(i) = &n.interface {
        cfg.network.interface = i.clone();
    }
    Ok(())
}

pub(crate) fn apply_client(cfg: &mut ConfigToml, c: &ClientSide) -> Result<()> {
    if c.headless {
        cfg.client.headless = true;
    }
    if let Some(n) = &c.name {
        cfg.client.name = n.clone();
    }
    if let Some(p) = c.input_probe {
        cfg.client.input_probe_interval_ms = p;
    }
    if c.no_decode {
        cfg.client.decode = false;
    }
    if !cfg.client.decode {
        // Nothing to show without decoding.
        cfg.client.headless = true;
    }
    if let Some(list) = &c.codecs {
        cfg.client.codecs = untether::config::parse_key(list)?;
    }
    if let Some(d) = &c.decoder {
        cfg.client.decoder = parse_key(d).map_err(with_flag)?;
    }
    if let Some(h) = &c.hwaccel {
        cfg.client.hwaccel = parse_key(h).map_err(with_flag)?;
    }
    if let Some(p) = &c.presenter {
        cfg.client.presenter = parse_key(p).map_err(with_flag)?;
    }
    if c.fullscreen {
        cfg.client.fullscreen = true;
    }
    if c.overlay {
        cfg.client.overlay = true;
    }
    if let Some(l) = &c.lens {
        cfg.vr.lens = l.display().to_string();
    }
    if let Some(w) = &c.late_warp {
        cfg.vr.late_warp = w == "on";
    }
    Ok(())
}

pub(crate) fn host_options(cfg: &ConfigToml) -> Result<HostOptions> {
    let video = cfg.video.validate().map_err(with_flag)?;
    untether::config::validate_host(&video, &cfg.host, &cfg.network, &cfg.scene)
        .map_err(with_flag)?;
    cfg.vr.validate().map_err(with_flag)?;
    cfg.webrtc.validate().map_err(with_flag)?;
    Ok(HostOptions {
        vr: cfg.vr.clone(),
        video,
        scene: cfg.scene.clone(),
        host: cfg.host.clone(),
        network: cfg.network.clone(),
        webrtc: cfg.webrtc.clone(),
    })
}

pub(crate) fn display_for(cfg: &ConfigToml) -> Display {
    let has_display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if cfg.client.headless {
        Display::Headless
    } else if !has_display {
        log::warn!("no DISPLAY or WAYLAND_DISPLAY: running headless (no window)");
        eprintln!("untether: no display found; running headless (decode and measure, no window)");
        Display::Headless
    } else {
        Display::Window
    }
}

/// `--duration`, checked: more than 0, at most a day.
pub(crate) fn duration_of(common: &Common) -> Result<Option<Duration>> {
    const MAX: Duration = Duration::from_secs(86_400);
    match common.duration {
        Some(d) if d.is_zero() || d > MAX => {
            bail!("--duration: {d:?} is out of range 1ms..={}s", MAX.as_secs())
        }
        d => Ok(d),
    }
}

pub(crate) fn client_options(
    cfg: &ConfigToml,
    host: std::net::SocketAddr,
    side: &ClientSide,
    common: &Common,
) -> Result<ClientOptions> {
    untether::config::validate_client(&cfg.client, &cfg.network).map_err(with_flag)?;
    cfg.vr.validate().map_err(with_flag)?;
    Ok(ClientOptions {
        vr: cfg.vr.clone(),
        host,
        client: cfg.client.clone(),
        network: cfg.network.clone(),
        display: display_for(cfg),
        duration: duration_of(common)?,
        save_frame: side.save_frame.clone(),
    })
}
