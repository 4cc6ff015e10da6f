//! The `untether` command: `host`, `client`, `demo`, `pair`, `netem`, `bench`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use untether::client::{ClientAudio, ClientIo, ClientOptions, Display, InputDevice};
use untether::config::{parse_key, ConfigError, ConfigFile, ConfigToml};
use untether::host::{AudioSpec, HostSetup, InputSpec, SourceSpec};
use untether::identity::Access;
use untether::{report, DemoOptions, Host, HostOptions};
use untether_media::x11::{CaptureTarget, PointerMode};

#[macro_use]
mod out;
mod bench;
mod bench_app;
mod config_file;
mod discover;
mod doctor;
mod generate;
mod netem;
mod pair;
#[cfg(feature = "rtsp")]
mod rtsp;
#[cfg(not(feature = "rtsp"))]
#[path = "rtsp_off.rs"]
mod rtsp;
mod run;
mod status;
mod wayland_arg;

#[derive(Parser, Debug)]
#[command(
    name = "untether",
    version = env!("UNTETHER_VERSION"),
    propagate_version = true,
    about = "Low-latency streaming for untethered VR and interactive games",
    long_about = long_about()
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// The quick start of `untether --help`: each command and where or why to run it. One line each
/// (the command, two spaces or more, the note), which the man page turns into a list
/// (`generate::description`).
const QUICK_START: &[(&str, &str)] = &[
    ("untether demo", "host and client on this machine"),
    ("untether host", "on the PC"),
    (
        "untether client",
        "on the headset / Pi: finds the paired host on the LAN",
    ),
    ("untether client PC-ADDRESS", "or names the host"),
    (
        "untether pair approve FINGERPRINT",
        "on the PC, once per new client (it shows FINGERPRINT)",
    ),
    ("untether discover", "lists the hosts on the local network"),
    (
        "untether host --access pin",
        "or pair with a PIN: the host shows one",
    ),
    (
        "untether client PC-ADDRESS --pin PIN",
        "and the client gives it",
    ),
];

/// `untether --help`'s description (and the man page's).
fn long_about() -> String {
    let width = QUICK_START.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let quick: String = QUICK_START
        .iter()
        .map(|(cmd, note)| format!("\n  {cmd:width$}  {note}"))
        .collect();
    format!(
        "Low-latency streaming for untethered VR and interactive games.\n\n\
         A host renders (or captures) frames, encodes them (H.264, HEVC or AV1, in software or on \
         a GPU) and sends them over UDP with untether's own protocol; a client reassembles, \
         decodes and shows them, and sends the user's input back.\n\n\
         Quick start:{quick}\n\n\
         Only paired clients may connect (host --access allowlist, the default); keys, the \
         allowlist and known hosts live in the state directory ($UNTETHER_STATE_DIR, \
         $XDG_STATE_HOME/untether or ~/.local/state/untether, or --state-dir).\n\n\
         Settings come from defaults, then the config file (TOML, see docs/CONFIG.md: --config \
         FILE, else $XDG_CONFIG_HOME/untether/untether.toml or /etc/untether/untether.toml when \
         one exists), then flags.\n\n\
         --config, --state-dir, -v and -q go before or after any command. Logging: info by \
         default; -v debug, -vv trace, -q warnings only, -qq errors only (without -v/-q, \
         RUST_LOG applies when set)."
    )
}

/// Options every command takes, before or after its name.
#[derive(Args, Debug, Clone, Default)]
struct Global {
    /// TOML config file; flags override it.
    ///
    /// Every key is documented in docs/CONFIG.md. Without it: ~/.config/untether/untether.toml
    /// ($XDG_CONFIG_HOME), else /etc/untether/untether.toml, if one exists. Read by host,
    /// client, demo and pair (host.state_dir); bench and netem only check it.
    // The global options come after the command's own in its help (display_order).
    #[arg(long, value_name = "FILE", global = true, display_order = 900)]
    config: Option<PathBuf>,
    /// Where keys and the allowlist live.
    ///
    /// Keys, the allowlist, access requests, the PIN (host, pair) and known_hosts.json, the
    /// pinned host keys (client) [config: host.state_dir / client.state_dir, default
    /// $UNTETHER_STATE_DIR, $XDG_STATE_HOME/untether or ~/.local/state/untether].
    #[arg(long, value_name = "DIR", global = true, display_order = 901)]
    state_dir: Option<PathBuf>,
    /// More log output: -v debug, -vv trace.
    ///
    /// The default is info.
    #[arg(short, long, action = ArgAction::Count, global = true, display_order = 902)]
    verbose: u8,
    /// Less output: -q warnings, -qq errors only.
    ///
    /// bench: also no progress bar.
    #[arg(short, long, action = ArgAction::Count, global = true, display_order = 903)]
    quiet: u8,
}

impl Global {
    /// The log filter -v/-q ask for; None: neither given.
    fn log_filter(&self) -> Option<&'static str> {
        if self.verbose == 0 && self.quiet == 0 {
            return None;
        }
        const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
        let level = (2 + self.verbose as i32 - self.quiet as i32).clamp(0, 4);
        Some(LEVELS[level as usize])
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the test scene, a captured display or window, or piped frames to clients.
    ///
    /// Several clients at once from one encoded stream: the first controls, the others watch.
    Host(HostArgs),
    /// Start an unmodified Vulkan or OpenGL application and stream it.
    ///
    /// `untether run [host flags] -- APP ARGS…`: its presented frames through an implicit
    /// Vulkan layer and an LD_PRELOAD hook of glXSwapBuffers/eglSwapBuffers, input back with
    /// XTEST; the host ends with the application (docs/CAPTURE.md).
    Run(run::RunArgs),
    /// Connect to a host, decode and show its stream, send keyboard and mouse back.
    ///
    /// In the window: F11 or Alt+Enter fullscreen, F10 capture/release the mouse, F12
    /// statistics overlay (not sent to the host).
    Client(ClientArgs),
    /// Stream the test scene host→client on this machine (loopback UDP) and print the latency report.
    Demo(DemoArgs),
    /// List the untether hosts on the local network (mDNS/DNS-SD): name, address, fingerprint, whether this client is paired with each, what each serves.
    Discover(discover::DiscoverArgs),
    /// On the host: list pending access requests and allowed clients, approve, deny or revoke them, or make a one-time pairing PIN.
    Pair(pair::PairArgs),
    /// Relay UDP between clients and a target, impairing each direction: loss, burst loss, delay, jitter, rate limit, reordering, duplication, outages.
    Netem(netem::NetemArgs),
    /// Measure: run scenarios (test scene host→client, or an ffmpeg RTP peer), write JSON reports and an HTML report with plots.
    #[command(long_about = bench::LONG_ABOUT)]
    Bench(Box<bench::BenchArgs>),
    /// Write a generated head-motion track file (docs/POSE.md) for `--pose track:FILE`.
    Track(TrackArgs),
    /// Check what this machine can do and what to fix: encoders and decoders that open (with their time per frame), GPUs and video devices, display, audio, UDP buffers, clock sync, the state directory, the CPU governor.
    #[command(long_about = doctor::LONG_ABOUT)]
    Doctor(doctor::DoctorArgs),
    /// Write the man pages or a shell's completions (what `make install` installs).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

#[derive(Args, Debug, Clone)]
struct TrackArgs {
    /// What the head does: sweep (yaw ±40° at 40°/s), turn (yaw at 60°/s), nod (pitch ±20° at 0.5 Hz), still.
    #[arg(long, value_parser = untether::config::TRACK_KINDS, default_value = "sweep")]
    kind: String,
    /// Length: seconds (10, 2.5) or with a unit (500ms, 2s, 1m); 0.01 s to 1 h.
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = duration_arg)]
    seconds: Duration,
    /// Samples per second (1–10000).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// The file to write (- : standard output).
    #[arg(long, value_name = "FILE", default_value = "-")]
    out: PathBuf,
}

fn run_track(args: TrackArgs) -> Result<()> {
    let t =
        untether::pose::track::Track::generate(&args.kind, args.seconds.as_secs_f64(), args.rate)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = t.to_text();
    if args.out.as_os_str() == "-" {
        out!("{text}");
    } else {
        std::fs::write(&args.out, text)
            .with_context(|| format!("cannot write {}", args.out.display()))?;
    }
    Ok(())
}

// `-h` is the short help, one line per option; `--help` the long one. An option's doc comment
// is split accordingly: its first paragraph is the line `-h` shows (keep it short), the rest is
// added by `--help` and the man page. Options `-h` leaves out (`hide_short_help`) are the
// rarely changed ones; every option is in `--help`.

#[derive(Args, Debug, Clone, Default)]
// After a flattened group with a heading of its own: back under "Options".
#[command(next_help_heading = None::<&'static str>)]
struct Common {
    /// Stop after this long (default: at Ctrl-C).
    ///
    /// Seconds (10) or with a unit (500ms, 5s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    duration: Option<Duration>,
    /// Write the JSON latency report to FILE.
    ///
    /// The report's contract is docs/REPORT.md.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Video")]
struct VideoArgs {
    /// Frame size: WIDTHxHEIGHT or 720p, 1080p, …
    ///
    /// The names: 360p, 480p, 720p, 1080p, 1440p, 2160p, 4k [config: video.resolution, default
    /// 1280x720].
    #[arg(long, value_name = "WxH")]
    resolution: Option<String>,
    /// Frames per second.
    ///
    /// [config: video.fps, default 60]
    #[arg(long)]
    fps: Option<u32>,
    /// Encoder bitrate: 8000 (kbit/s), 8000k, 10M.
    ///
    /// kbit/s as a number (8000), or with a unit: 8000k, 8000kbps, 10M, 10mbit [config:
    /// video.bitrate_kbps, default 10000].
    #[arg(long, value_name = "RATE", value_parser = bitrate_arg)]
    bitrate: Option<u32>,
    /// Codec.
    ///
    /// The stream's codec: h264, hevc, av1, or auto (the first of the client's codecs, in its order of preference,
    /// whose encoder opens on this host; every codec's encoder is opened at start) [config:
    /// video.codec, default h264, or what --encoder encodes].
    #[arg(long, value_parser = ["auto", "h264", "hevc", "av1"])]
    codec: Option<String>,
    /// Video encoder: auto or an FFmpeg encoder.
    ///
    /// auto: the best that opens, hardware first: *_nvenc, *_qsv, *_vaapi, *_amf, *_v4l2m2m,
    /// then libx264 / libx265 / libsvtav1; an absent device is one line saying so. A name
    /// (libx264, libx264rgb, libx265, libsvtav1, h264_nvenc, hevc_vaapi, …) has no fallback
    /// [config: video.encoder, default auto].
    #[arg(long, value_name = "NAME|auto")]
    encoder: Option<String>,
    /// Encoder preset, x264's names.
    ///
    /// Mapped per encoder family: docs/CODECS.md [config: video.preset, default ultrafast].
    #[arg(long, value_parser = untether::config::PRESETS, hide_short_help = true)]
    preset: Option<String>,
    /// BGRA→YUV conversion.
    ///
    /// simd, swscale, or rgb (none; implies --encoder libx264rgb) [config: video.conversion,
    /// default simd].
    #[arg(long, value_parser = ["simd", "swscale", "rgb"], hide_short_help = true)]
    conversion: Option<String>,
    /// How a joining or recovering client gets a clean picture.
    ///
    /// idr (a keyframe when it joins or loses a frame) or intra (a column of intra blocks
    /// sweeps the picture every --refresh-period frames; the client waits for the next full
    /// sweep instead of asking; libx264 and NVENC) [config: video.refresh, default idr].
    #[arg(long, value_parser = ["idr", "intra"], hide_short_help = true)]
    refresh: Option<String>,
    /// Frames per intra-refresh sweep.
    ///
    /// Also between the keyframes of libsvtav1, which cannot make one on demand [config:
    /// video.refresh_period, default 30].
    #[arg(long, value_name = "FRAMES", hide_short_help = true)]
    refresh_period: Option<u32>,
    /// Slices per frame, 1–16, each sent as soon as it is encoded.
    ///
    /// With 2 or more, x264 runs through its own API and each slice is sent the moment x264
    /// has written it, and the client decodes it as it arrives (a lost slice costs only its own
    /// region until the next keyframe); 1 sends frames whole. Needs codec h264, encoder libx264
    /// (auto then means libx264) and refresh idr; anything else is refused by name [config:
    /// video.slices, default 1].
    #[arg(long, value_name = "N", hide_short_help = true)]
    slices: Option<u8>,
    /// Test scene: camera spin in degrees/second, counter-clockwise.
    ///
    /// [config: scene.spin_deg_per_s, default 30]
    #[arg(
        long,
        value_name = "DEG_PER_S",
        allow_negative_numbers = true,
        hide_short_help = true
    )]
    spin: Option<f32>,
    /// Test scene: walking speed in m/s, 0 = stand still.
    ///
    /// [config: scene.walk_speed, default 0.6]
    #[arg(long, value_name = "M_PER_S", hide_short_help = true)]
    walk: Option<f32>,
}

/// Browsers and WHIP publishing (`[webrtc]`, docs/BROWSER.md).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Browsers")]
struct WebRtcArgs {
    /// Serve browsers on this TCP address.
    ///
    /// The page and its WHEP-style signalling on TCP ADDR:PORT, their media on UDP (the same
    /// port when free). The host prints a one-time link for each browser (or use the PIN)
    /// [config: webrtc.listen, default off].
    #[arg(long, value_name = "ADDR:PORT")]
    webrtc: Option<String>,
    /// HTTPS for the page: auto (self-signed) or a PEM FILE.
    ///
    /// auto: a self-signed certificate kept in the state directory; its fingerprint is printed.
    /// FILE: a PEM file with the certificate chain and its key [config: webrtc.cert, default
    /// plain HTTP].
    #[arg(long, value_name = "auto|FILE", hide_short_help = true)]
    webrtc_cert: Option<String>,
    /// Publish the stream once to a WHIP endpoint.
    ///
    /// http(s)://…, or whip:// for http://, e.g. Janus behind simple-whip-server [config:
    /// webrtc.publish].
    #[arg(long, value_name = "URL", hide_short_help = true)]
    publish: Option<String>,
    /// The bearer token the WHIP endpoint asks for.
    ///
    /// [config: webrtc.publish_token]
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "publish",
        hide_short_help = true
    )]
    publish_token: Option<String>,
}

fn apply_webrtc(cfg: &mut ConfigToml, w: &WebRtcArgs) {
    if let Some(v) = &w.webrtc {
        cfg.webrtc.listen = v.clone();
    }
    if let Some(v) = &w.webrtc_cert {
        cfg.webrtc.cert = v.clone();
    }
    if let Some(v) = &w.publish {
        cfg.webrtc.publish = v.clone();
    }
    if let Some(v) = &w.publish_token {
        cfg.webrtc.publish_token = v.clone();
    }
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "VR")]
struct VrArgs {
    /// VR: stereo views from the client's head pose.
    ///
    /// The test scene renders two eye views side by side from the client's head pose, with
    /// pose markers; it stands still unless --spin/--walk say otherwise (a demo's window also
    /// shows it as a headset would: lens distortion and late warp, see --lens, --late-warp)
    /// [config: vr.enabled].
    #[arg(long)]
    vr: bool,
    /// VR: eye separation (interpupillary distance) in millimetres, 40–90.
    ///
    /// [config: vr.ipd_mm, default 64]
    #[arg(long, value_name = "MM", hide_short_help = true)]
    ipd: Option<f32>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "VR")]
struct PoseArgs {
    /// Head pose source: auto, mouse, synthetic, track:FILE, imu, none.
    ///
    /// auto (mouse-look in a window, none headless), mouse, synthetic[:sweep|turn|nod|still]
    /// (a generated head-motion track), track:FILE (docs/POSE.md), imu[:PATH] (a Linux IIO or
    /// evdev IMU, fused with a Madgwick filter), none [config: vr.pose, default auto].
    #[arg(long, value_name = "SOURCE", hide_short_help = true)]
    pose: Option<String>,
    /// Head poses per second sent to the host, 1–1000.
    ///
    /// [config: vr.pose_rate_hz, default 500]
    #[arg(long, value_name = "HZ", hide_short_help = true)]
    pose_rate: Option<u32>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Network")]
struct NetArgs {
    /// Data plane after the handshake: udp or raw (Ethernet frames).
    ///
    /// The handshake is always UDP. raw: Ethernet frames of EtherType 0x88B5 between the two
    /// interfaces' MAC addresses; needs CAP_NET_RAW and both ends on one link, else it stays on
    /// UDP and says why [config: network.transport, default udp].
    #[arg(long, value_parser = ["udp", "raw"], hide_short_help = true)]
    transport: Option<String>,
    /// With --transport raw: the network interface.
    ///
    /// Default: the one towards the peer; a host bound to 0.0.0.0: the only interface up
    /// [config: network.interface].
    #[arg(long, value_name = "NAME", hide_short_help = true)]
    interface: Option<String>,
}

#[derive(Args, Debug, Clone)]
struct HostArgs {
    /// Address and UDP port to listen on.
    ///
    /// [config: host.bind, default 0.0.0.0:9710]
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<String>,
    /// Who may connect: allowlist, pin, open.
    ///
    /// allowlist: clients approved with `untether pair`, or paired by PIN; pin: also print a
    /// one-time PIN now and accept it; open: anyone who can reach the port, only on a trusted
    /// network! [config: host.access, default allowlist].
    // The values are in the text: clap's list would make -h's line too long.
    #[arg(long, value_parser = ["allowlist", "open", "pin"], hide_possible_values = true)]
    access: Option<String>,
    /// Most clients served at once (1–256).
    ///
    /// All from one encoded stream. The first to connect controls (its input drives the application), the others watch
    /// (their input is dropped unless granted: `untether pair grant FINGERPRINT input`);
    /// `untether pair control FINGERPRINT` hands control over. One more is refused as busy
    /// [config: host.max_clients, default 8].
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// The name advertised on the local network.
    ///
    /// [config: host.name, default the machine's host name]
    #[arg(long = "host-name", value_name = "NAME")]
    host_name: Option<String>,
    /// Do not advertise this host on the local network.
    ///
    /// Advertised over mDNS/DNS-SD, `untether discover` and `untether client` without an
    /// address find it otherwise [config: host.advertise = false].
    #[arg(long, hide_short_help = true)]
    no_advertise: bool,
    /// Serve the operator's dashboard.
    ///
    /// Approve clients, the PIN, roles, live plots, bit rate and frame rate, over HTTP on this
    /// TCP address (ADDR:PORT or off); without a value 127.0.0.1:9711 (this machine only); it answers to its
    /// admin token only (the link printed at start, also in dashboard_link in the state
    /// directory); off: none (docs/DASHBOARD.md) [config: host.dashboard, default off].
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, default_missing_value = "127.0.0.1:9711")]
    dashboard: Option<String>,
    /// Also serve the stream over RTSP.
    ///
    /// For ordinary players (ffplay, VLC, GStreamer), on this TCP address, e.g. 0.0.0.0:8554: rtsp://HOST:8554/untether, the same encoded
    /// stream (no second encode), with digest authentication unless --access open [config:
    /// rtsp.listen, rtsp.*].
    #[arg(long, value_name = "ADDR:PORT")]
    rtsp: Option<String>,
    /// Log a status line (clients, frames/s, Mbit/s, loss, RTT) this often.
    ///
    /// Seconds (10) or with a unit (30s, 1m); 0 = never [config: host.status_interval_s,
    /// default 10 s].
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, hide_short_help = true)]
    status_interval: Option<Duration>,
    /// A viewer whose link cannot carry the stream: pause or drop.
    ///
    /// pause: keyframes only, tried again after 2, 4, 8 s; dropped the third time within a
    /// minute. drop: at once, with a goodbye saying why [config: host.slow_viewer, default
    /// pause].
    #[arg(long, value_parser = ["pause", "drop"], hide_short_help = true)]
    slow_viewer: Option<String>,
    /// Capture x11, wlr, portal, pipewire:NODE or kms.
    ///
    /// x11 (the display in $DISPLAY) or x11:DISPLAY (e.g. x11::1), input replayed there with
    /// XTEST; wlr / wlr:OUTPUT (a wlroots Wayland compositor in $WAYLAND_DISPLAY through
    /// wlr-screencopy: sway, Hyprland, river), input through uinput; portal (a monitor or window
    /// picked in the desktop portal's ScreenCast dialog, GNOME, KDE, wlroots, read from
    /// PipeWire; the permission is kept in the state directory so the user approves once),
    /// input through uinput; pipewire:NODE (a PipeWire video node by name or serial, without
    /// the portal); or kms[:DEVICE] (the scan-out framebuffer of /dev/dri/card*, a console
    /// without a compositor; needs root; no input; untested on real hardware). To capture one
    /// Vulkan or OpenGL application from inside it: untether run.
    #[arg(
        long,
        value_name = "KIND[:WHICH]",
        conflicts_with = "source",
        help_heading = "Capture"
    )]
    capture: Option<String>,
    /// With --capture x11: one window, by id or title.
    ///
    /// The id as xwininfo shows it (0x1e00007) or decimal; default the whole screen.
    #[arg(
        long,
        value_name = "ID|NAME",
        requires = "capture",
        help_heading = "Capture"
    )]
    window: Option<String>,
    /// With --capture wlr: a region of the output, X,Y,WxH.
    ///
    /// In the output's logical coordinates (slurp's "X,Y WxH" too).
    #[arg(
        long,
        value_name = "X,Y,WxH",
        requires = "capture",
        help_heading = "Capture",
        hide_short_help = true
    )]
    region: Option<String>,
    /// Where the client's input goes: auto, uinput, none.
    ///
    /// auto: the scene, XTEST for x11 capture, uinput for wlr capture where /dev/uinput opens;
    /// uinput: a virtual keyboard and mouse (the host stops if /dev/uinput cannot be opened);
    /// none.
    #[arg(
        long,
        value_parser = ["auto", "uinput", "none"],
        default_value = "auto",
        help_heading = "Capture",
        hide_short_help = true
    )]
    input: String,
    /// How XTEST replays pointer motion: absolute or relative.
    ///
    /// absolute: the client's position; relative: its motion (for games that grab the
    /// pointer).
    #[arg(
        long,
        value_parser = ["absolute", "relative"],
        default_value = "absolute",
        help_heading = "Capture",
        hide_short_help = true
    )]
    pointer: String,
    /// Frame source: scene or pipe:FILE (raw frames).
    ///
    /// scene: the built-in test scene; pipe:FILE reads raw frames from FILE, a named pipe, or - for stdin; size from --size,
    /// rate from --fps.
    #[arg(long, value_name = "scene|pipe:FILE", help_heading = "Capture")]
    source: Option<String>,
    /// Layout of raw frames from a pipe source.
    #[arg(
        long,
        value_name = "FORMAT",
        value_parser = ["i420", "bgra"],
        default_value = "i420",
        help_heading = "Capture",
        hide_short_help = true
    )]
    pipe_format: String,
    /// Frame size of a pipe source (same as --resolution).
    #[arg(
        long,
        value_name = "WxH",
        conflicts_with = "resolution",
        help_heading = "Capture",
        hide_short_help = true
    )]
    size: Option<String>,
    /// Audio: none (default), tone, capture[:DEVICE].
    ///
    /// none: no audio; tone: 1 kHz beeps at each second; capture[:DEVICE]: an SDL recording device, e.g. a
    /// PulseAudio monitor (SDL_AUDIODRIVER picks the backend).
    #[arg(
        long,
        value_name = "SOURCE",
        default_value = "none",
        hide_default_value = true,
        help_heading = "Capture"
    )]
    audio: String,
    /// Stamp frame number and capture time into captured frames.
    ///
    /// Into the top-left corner of captured or piped frames, to measure glass-to-glass from
    /// the pixels.
    #[arg(long, help_heading = "Capture", hide_short_help = true)]
    stamp: bool,
    #[command(flatten)]
    video: VideoArgs,
    #[command(flatten)]
    vr: VrArgs,
    #[command(flatten)]
    net: NetArgs,
    /// Multipath clients: how video is spread over their paths.
    ///
    /// redundant (every datagram on every live path), keyframes (keyframes, control and audio
    /// on all paths, other frames on the fastest), lowest-delay (each datagram on the live path
    /// with the lowest RTT) [config: network.scheduler, default redundant].
    #[arg(
        long,
        value_parser = ["redundant", "keyframes", "lowest-delay"],
        help_heading = "Network",
        hide_short_help = true
    )]
    scheduler: Option<String>,
    #[command(flatten)]
    webrtc: WebRtcArgs,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Decoding and display")]
struct ClientSide {
    /// No window: decode and measure only.
    ///
    /// Also the default when there is no display [config: client.headless].
    #[arg(long)]
    headless: bool,
    /// Start fullscreen.
    ///
    /// In the window: F11 or Alt+Enter toggles fullscreen, F10 captures/releases the mouse
    /// (relative mode, for games), F12 shows/hides the statistics overlay; these keys are not
    /// sent to the host [config: client.fullscreen].
    #[arg(long)]
    fullscreen: bool,
    /// Start with the live statistics overlay shown (F12 toggles it).
    ///
    /// [config: client.overlay]
    #[arg(long, hide_short_help = true)]
    overlay: bool,
    /// Name shown to the host.
    ///
    /// [config: client.name, default: this machine's hostname]
    #[arg(long, hide_short_help = true)]
    name: Option<String>,
    /// Write the last shown frame to FILE (PPM) when the client stops.
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    save_frame: Option<PathBuf>,
    /// Measure input response with a synthetic input every MS ms.
    ///
    /// Sends a small look-around input every MS milliseconds and measures how long until a
    /// decoded frame shows it (0 = off) [config: client.input_probe_interval_ms].
    #[arg(long, value_name = "MS", hide_short_help = true)]
    input_probe: Option<u64>,
    /// Count frames without decoding them (a light load-test viewer).
    ///
    /// Receive and reassemble frames and count them, but do not decode or show them (implies
    /// --headless) [config: client.decode = false].
    #[arg(long, hide_short_help = true)]
    no_decode: bool,
    /// The codecs this client decodes, preferred first.
    ///
    /// Comma-separated: h264, h264rgb, hevc, av1 (the host picks the first it can encode)
    /// [config: client.codecs, default h264,h264rgb,hevc,av1].
    #[arg(long, value_name = "LIST", hide_short_help = true)]
    codecs: Option<String>,
    /// Decoder: auto, software, or an FFmpeg decoder by name.
    ///
    /// auto: software, or the --hwaccel hardware falling back to software with one line; a
    /// name (h264_v4l2m2m, hevc_cuvid, libdav1d, …) has no fallback [config: client.decoder,
    /// default auto].
    #[arg(long, value_name = "auto|software|NAME", hide_short_help = true)]
    decoder: Option<String>,
    /// Hardware decoding: none, auto, vaapi, cuda, vdpau, drm, v4l2m2m.
    ///
    /// auto: what this machine has. Untested on real hardware (docs/CODECS.md) [config:
    /// client.hwaccel, default none].
    #[arg(
        long,
        value_parser = ["none", "auto", "vaapi", "cuda", "vdpau", "drm", "v4l2m2m"],
        hide_possible_values = true
    )]
    hwaccel: Option<String>,
    /// The window's presenter: gl, sdl or auto.
    ///
    /// gl: OpenGL ES 3 (YUV→RGB, lens distortion and late warp on the GPU); sdl: SDL's
    /// renderer; auto: gl, else sdl with one line saying why [config: client.presenter, default
    /// auto].
    #[arg(long, value_parser = ["auto", "gl", "sdl"], hide_short_help = true)]
    presenter: Option<String>,
    /// With --vr: the lens profile (TOML).
    ///
    /// See docs/lens/generic.toml, the built-in default [config: vr.lens].
    #[arg(long, value_name = "FILE", help_heading = "VR", hide_short_help = true)]
    lens: Option<PathBuf>,
    /// With --vr: late-warp each picture to the newest head pose.
    ///
    /// Re-project each picture to the newest head orientation when it is shown (rotational
    /// time-warp), or not, for comparison [config: vr.late_warp, default on].
    #[arg(
        long,
        value_name = "on|off",
        value_parser = ["on", "off"],
        help_heading = "VR",
        hide_short_help = true
    )]
    late_warp: Option<String>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Input and output")]
struct ClientIoArgs {
    /// Play the host's audio (SDL).
    ///
    /// SDL_AUDIODRIVER picks the backend; dummy plays nowhere.
    #[arg(long)]
    audio: bool,
    /// SDL audio output device (default: the system default).
    #[arg(long, value_name = "NAME", requires = "audio", hide_short_help = true)]
    audio_device: Option<String>,
    /// Write every decoded frame as raw I420 to FILE (- : stdout).
    ///
    /// FILE, a named pipe, or - for stdout, flushed per frame; implies --headless; the report
    /// goes to stderr.
    #[arg(long, value_name = "pipe:FILE", hide_short_help = true)]
    sink: Option<String>,
    /// A Linux input device whose events go to the host; repeatable.
    ///
    /// E.g. /dev/input/event3, or a FIFO carrying evdev records; repeat for more.
    #[arg(long = "input-device", value_name = "PATH", hide_short_help = true)]
    input_devices: Vec<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct ClientArgs {
    /// HOST[:PORT], name or fingerprint; default: find it.
    ///
    /// HOST[:PORT] (default port 9710); IPv6 as [ADDR]:PORT; or a name or fingerprint
    /// `untether discover` lists (the host must prove the advertised key). Left out: the
    /// paired host on the local network (mDNS); a host not paired yet is named, never chosen
    /// on its own.
    host: Option<String>,
    /// Pair using the one-time PIN the host shows.
    ///
    /// The PIN of `untether host --access pin` or `untether pair --pin` there; the host then
    /// remembers this client.
    #[arg(long, value_name = "PIN")]
    pin: Option<String>,
    /// Exit when the host says goodbye.
    ///
    /// The host stopped (Ctrl-C, a service restart): without this the client waits for it to
    /// come back [config: client.wait_for_host = false].
    #[arg(long)]
    exit_on_bye: bool,
    /// Ask the host for this frame size (WxH, 720p).
    ///
    /// WIDTHxHEIGHT or 360p … 4k. The host grants it within its own (--resolution there, its limit) and says so [config:
    /// client.resolution, default the host's].
    #[arg(long, value_name = "WxH")]
    resolution: Option<String>,
    /// Ask the host for this frame rate.
    ///
    /// Within its own (its limit) [config: client.fps, default the host's].
    #[arg(long)]
    fps: Option<u32>,
    /// Ask the host for this bit rate (10M, 8000k).
    ///
    /// Within its own (its limit) [config: client.bitrate_kbps, default the host's].
    #[arg(long, value_name = "RATE", value_parser = bitrate_arg)]
    bitrate: Option<u32>,
    #[command(flatten)]
    side: ClientSide,
    #[command(flatten)]
    io: ClientIoArgs,
    /// VR: the host's --vr stream, for a headset.
    ///
    /// The host runs with --vr: the stream is side-by-side stereo; the GPU presenter
    /// pre-distorts each eye for the headset's lenses and late-warps it to the newest head pose,
    /// and pose-to-photon is measured from the presented pose markers [config: vr.enabled].
    #[arg(long, help_heading = "VR")]
    vr: bool,
    #[command(flatten)]
    pose: PoseArgs,
    /// Another path to the host (multipath, up to 3).
    ///
    /// [LOCAL_IP@]HOST[:PORT], e.g. 192.168.2.7@192.168.2.1 to send from a second interface;
    /// repeat for more. The client sends its input on every path, the host schedules video per
    /// --scheduler there [config: client.paths].
    #[arg(
        long = "path",
        value_name = "[LOCAL_IP@]HOST[:PORT]",
        help_heading = "Network",
        hide_short_help = true
    )]
    paths: Vec<String>,
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug, Clone)]
struct DemoArgs {
    /// Stream the test tone too and play it, measuring mouth-to-ear.
    ///
    /// SDL audio (SDL_AUDIODRIVER=dummy plays nowhere); the report has the mouth-to-ear latency
    /// and the A/V offset.
    #[arg(long)]
    audio: bool,
    /// Also serve the demo's stream over RTSP on this TCP address.
    ///
    /// E.g. 127.0.0.1:8554, to watch it in ffplay, VLC or GStreamer; digest authentication, the
    /// password is printed [config: rtsp.listen, rtsp.*].
    #[arg(long, value_name = "ADDR:PORT", hide_short_help = true)]
    rtsp: Option<String>,
    #[command(flatten)]
    video: VideoArgs,
    #[command(flatten)]
    side: ClientSide,
    #[command(flatten)]
    vr: VrArgs,
    #[command(flatten)]
    pose: PoseArgs,
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    webrtc: WebRtcArgs,
    #[command(flatten)]
    common: Common,
}

/// `--bitrate`: [`untether_proto::units::parse_bitrate`].
fn bitrate_arg(s: &str) -> std::result::Result<u32, String> {
    untether_proto::units::parse_bitrate(s).map_err(|e| e.to_string())
}

/// `--duration` and the like: [`untether_proto::units::parse_duration`].
pub(crate) fn duration_arg(s: &str) -> std::result::Result<Duration, String> {
    untether_proto::units::parse_duration(s).map_err(|e| e.to_string())
}

/// The flag that sets a config key, for error messages.
const FLAGS: &[(&str, &str)] = &[
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
static GIVEN_FLAGS: OnceLock<Vec<String>> = OnceLock::new();

/// The config file read ([`load_config`]), kept to point at the line of a value refused after
/// it was read.
static CONFIG_FILE: OnceLock<ConfigFile> = OnceLock::new();

/// The long flags the command line gave, from clap's matches of the innermost subcommand.
fn given_flags(matches: &clap::ArgMatches) -> Vec<String> {
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
fn with_flag(e: ConfigError) -> anyhow::Error {
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
fn host_error(e: untether::HostError) -> anyhow::Error {
    match e {
        untether::HostError::Config(c) => with_flag(c),
        e => e.into(),
    }
}

/// A demo that would not start; a configuration error names its flag or its line ([`with_flag`]).
fn demo_error(e: untether::DemoError) -> anyhow::Error {
    match e {
        untether::DemoError::Host(h) => host_error(h),
        untether::DemoError::Client(untether::ClientError::Config(c)) => with_flag(c),
        e => e.into(),
    }
}

/// `--config FILE`, else the default file ([`config_file`]) when there is one, else defaults.
fn load_config(global: &Global) -> Result<ConfigToml> {
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
fn load_checked_config(global: &Global) -> Result<ConfigToml> {
    let cfg = load_config(global)?;
    host_options(&cfg)?;
    cfg.rtsp.validate().map_err(with_flag)?;
    untether::config::validate_client(&cfg.client, &cfg.network).map_err(with_flag)?;
    Ok(cfg)
}

fn apply_video(cfg: &mut ConfigToml, v: &VideoArgs) {
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
fn apply_vr(cfg: &mut ConfigToml, vr: &VrArgs, video: Option<&VideoArgs>) {
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

fn apply_pose(cfg: &mut ConfigToml, p: &PoseArgs) {
    if let Some(s) = &p.pose {
        cfg.vr.pose = s.clone();
    }
    if let Some(r) = p.pose_rate {
        cfg.vr.pose_rate_hz = r;
    }
}

fn apply_net(cfg: &mut ConfigToml, n: &NetArgs) -> Result<()> {
    if let Some(t) = &n.transport {
        cfg.network.transport = parse_key(t).map_err(with_flag)?;
    }
    if let Some(i) = &n.interface {
        cfg.network.interface = i.clone();
    }
    Ok(())
}

fn apply_client(cfg: &mut ConfigToml, c: &ClientSide) -> Result<()> {
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

fn host_options(cfg: &ConfigToml) -> Result<HostOptions> {
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

fn display_for(cfg: &ConfigToml) -> Display {
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
fn duration_of(common: &Common) -> Result<Option<Duration>> {
    const MAX: Duration = Duration::from_secs(86_400);
    match common.duration {
        Some(d) if d.is_zero() || d > MAX => {
            bail!("--duration: {d:?} is out of range 1ms..={}s", MAX.as_secs())
        }
        d => Ok(d),
    }
}

fn client_options(
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
