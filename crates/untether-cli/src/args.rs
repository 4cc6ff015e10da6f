//! The command line: every subcommand's arguments (clap), their help, and the value parsers
//! they share.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use untether::config::ConfigToml;

use crate::{bench, discover, doctor, generate, netem, pair, run};

#[derive(Parser, Debug)]
#[command(
    name = "untether",
    version = env!("UNTETHER_VERSION"),
    propagate_version = true,
    about = "Low-latency streaming for untethered VR and interactive games",
    long_about = long_about()
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The quick start of `untether --help`: each command and where or why to run it. One line each
/// (the command, two spaces or more, the note), which the man page turns into a list
/// (`generate::description`).
pub(crate) const QUICK_START: &[(&str, &str)] = &[
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
pub(crate) fn long_about() -> String {
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
pub(crate) struct Global {
    /// TOML config file; flags override it.
    ///
    /// Every key is documented in docs/CONFIG.md. Without it: ~/.config/untether/untether.toml
    /// ($XDG_CONFIG_HOME), else /etc/untether/untether.toml, if one exists. Read by host,
    /// client, demo and pair (host.state_dir); bench and netem only check it.
    // The global options come after the command's own in its help (display_order).
    #[arg(long, value_name = "FILE", global = true, display_order = 900)]
    pub(crate) config: Option<PathBuf>,
    /// Where keys and the allowlist live.
    ///
    /// Keys, the allowlist, access requests, the PIN (host, pair) and known_hosts.json, the
    /// pinned host keys (client) [config: host.state_dir / client.state_dir, default
    /// $UNTETHER_STATE_DIR, $XDG_STATE_HOME/untether or ~/.local/state/untether].
    #[arg(long, value_name = "DIR", global = true, display_order = 901)]
    pub(crate) state_dir: Option<PathBuf>,
    /// More log output: -v debug, -vv trace.
    ///
    /// The default is info.
    #[arg(short, long, action = ArgAction::Count, global = true, display_order = 902)]
    pub(crate) verbose: u8,
    /// Less output: -q warnings, -qq errors only.
    ///
    /// bench: also no progress bar.
    #[arg(short, long, action = ArgAction::Count, global = true, display_order = 903)]
    pub(crate) quiet: u8,
}

impl Global {
    /// The log filter -v/-q ask for; None: neither given.
    pub(crate) fn log_filter(&self) -> Option<&'static str> {
        if self.verbose == 0 && self.quiet == 0 {
            return None;
        }
        const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];
        let level = (2 + self.verbose as i32 - self.quiet as i32).clamp(0, 4);
        Some(LEVELS[level as usize])
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
pub(crate) struct TrackArgs {
    /// What the head does: sweep (yaw ±40° at 40°/s), turn (yaw at 60°/s), nod (pitch ±20° at 0.5 Hz), still.
    #[arg(long, value_parser = untether::config::TRACK_KINDS, default_value = "sweep")]
    pub(crate) kind: String,
    /// Length: seconds (10, 2.5) or with a unit (500ms, 2s, 1m); 0.01 s to 1 h.
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = duration_arg)]
    pub(crate) seconds: Duration,
    /// Samples per second (1–10000).
    #[arg(long, default_value_t = 1000)]
    pub(crate) rate: u32,
    /// The file to write (- : standard output).
    #[arg(long, value_name = "FILE", default_value = "-")]
    pub(crate) out: PathBuf,
}

// `-h` is the short help, one line per option; `--help` the long one. An option's doc comment
// is split accordingly: its first paragraph is the line `-h` shows (keep it short), the rest is
// added by `--help` and the man page. Options `-h` leaves out (`hide_short_help`) are the
// rarely changed ones; every option is in `--help`.

#[derive(Args, Debug, Clone, Default)]
// After a flattened group with a heading of its own: back under "Options".
#[command(next_help_heading = None::<&'static str>)]
pub(crate) struct Common {
    /// Stop after this long (default: at Ctrl-C).
    ///
    /// Seconds (10) or with a unit (500ms, 5s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub(crate) duration: Option<Duration>,
    /// Write the JSON latency report to FILE.
    ///
    /// The report's contract is docs/REPORT.md.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Video")]
pub(crate) struct VideoArgs {
    /// Frame size: WIDTHxHEIGHT or 720p, 1080p, …
    ///
    /// The names: 360p, 480p, 720p, 1080p, 1440p, 2160p, 4k [config: video.resolution, default
    /// 1280x720].
    #[arg(long, value_name = "WxH")]
    pub(crate) resolution: Option<String>,
    /// Frames per second.
    ///
    /// [config: video.fps, default 60]
    #[arg(long)]
    pub(crate) fps: Option<u32>,
    /// Encoder bitrate: 8000 (kbit/s), 8000k, 10M.
    ///
    /// kbit/s as a number (8000), or with a unit: 8000k, 8000kbps, 10M, 10mbit [config:
    /// video.bitrate_kbps, default 10000].
    #[arg(long, value_name = "RATE", value_parser = bitrate_arg)]
    pub(crate) bitrate: Option<u32>,
    /// Codec.
    ///
    /// The stream's codec: h264, hevc, av1, or auto (the first of the client's codecs, in its order of preference,
    /// whose encoder opens on this host; every codec's encoder is opened at start) [config:
    /// video.codec, default h264, or what --encoder encodes].
    #[arg(long, value_parser = ["auto", "h264", "hevc", "av1"])]
    pub(crate) codec: Option<String>,
    /// Video encoder: auto or an FFmpeg encoder.
    ///
    /// auto: the best that opens, hardware first: *_nvenc, *_qsv, *_vaapi, *_amf, *_v4l2m2m,
    /// then libx264 / libx265 / libsvtav1; an absent device is one line saying so. A name
    /// (libx264, libx264rgb, libx265, libsvtav1, h264_nvenc, hevc_vaapi, …) has no fallback
    /// [config: video.encoder, default auto].
    #[arg(long, value_name = "NAME|auto")]
    pub(crate) encoder: Option<String>,
    /// Encoder preset, x264's names.
    ///
    /// Mapped per encoder family: docs/CODECS.md [config: video.preset, default ultrafast].
    #[arg(long, value_parser = untether::config::PRESETS, hide_short_help = true)]
    pub(crate) preset: Option<String>,
    /// BGRA→YUV conversion.
    ///
    /// simd, swscale, or rgb (none; implies --encoder libx264rgb) [config: video.conversion,
    /// default simd].
    #[arg(long, value_parser = ["simd", "swscale", "rgb"], hide_short_help = true)]
    pub(crate) conversion: Option<String>,
    /// How a joining or recovering client gets a clean picture.
    ///
    /// idr (a keyframe when it joins or loses a frame) or intra (a column of intra blocks
    /// sweeps the picture every --refresh-period frames; the client waits for the next full
    /// sweep instead of asking; libx264 and NVENC) [config: video.refresh, default idr].
    #[arg(long, value_parser = ["idr", "intra"], hide_short_help = true)]
    pub(crate) refresh: Option<String>,
    /// Frames per intra-refresh sweep.
    ///
    /// Also between the keyframes of libsvtav1, which cannot make one on demand [config:
    /// video.refresh_period, default 30].
    #[arg(long, value_name = "FRAMES", hide_short_help = true)]
    pub(crate) refresh_period: Option<u32>,
    /// Slices per frame, 1–16, each sent as soon as it is encoded.
    ///
    /// With 2 or more, x264 runs through its own API and each slice is sent the moment x264
    /// has written it, and the client decodes it as it arrives (a lost slice costs only its own
    /// region until the next keyframe); 1 sends frames whole. Needs codec h264, encoder libx264
    /// (auto then means libx264) and refresh idr; anything else is refused by name [config:
    /// video.slices, default 1].
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub(crate) slices: Option<u8>,
    /// Test scene: camera spin in degrees/second, counter-clockwise.
    ///
    /// [config: scene.spin_deg_per_s, default 30]
    #[arg(
        long,
        value_name = "DEG_PER_S",
        allow_negative_numbers = true,
        hide_short_help = true
    )]
    pub(crate) spin: Option<f32>,
    /// Test scene: walking speed in m/s, 0 = stand still.
    ///
    /// [config: scene.walk_speed, default 0.6]
    #[arg(long, value_name = "M_PER_S", hide_short_help = true)]
    pub(crate) walk: Option<f32>,
}

/// Browsers and WHIP publishing (`[webrtc]`, docs/BROWSER.md).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Browsers")]
pub(crate) struct WebRtcArgs {
    /// Serve browsers on this TCP address.
    ///
    /// The page and its WHEP-style signalling on TCP ADDR:PORT, their media on UDP (the same
    /// port when free). The host prints a one-time link for each browser (or use the PIN)
    /// [config: webrtc.listen, default off].
    #[arg(long, value_name = "ADDR:PORT")]
    pub(crate) webrtc: Option<String>,
    /// HTTPS for the page: auto (self-signed) or a PEM FILE.
    ///
    /// auto: a self-signed certificate kept in the state directory; its fingerprint is printed.
    /// FILE: a PEM file with the certificate chain and its key [config: webrtc.cert, default
    /// plain HTTP].
    #[arg(long, value_name = "auto|FILE", hide_short_help = true)]
    pub(crate) webrtc_cert: Option<String>,
    /// Publish the stream once to a WHIP endpoint.
    ///
    /// http(s)://…, or whip:// for http://, e.g. Janus behind simple-whip-server [config:
    /// webrtc.publish].
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub(crate) publish: Option<String>,
    /// The bearer token the WHIP endpoint asks for.
    ///
    /// [config: webrtc.publish_token]
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "publish",
        hide_short_help = true
    )]
    pub(crate) publish_token: Option<String>,
}

pub(crate) fn apply_webrtc(cfg: &mut ConfigToml, w: &WebRtcArgs) {
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
pub(crate) struct VrArgs {
    /// VR: stereo views from the client's head pose.
    ///
    /// The test scene renders two eye views side by side from the client's head pose, with
    /// pose markers; it stands still unless --spin/--walk say otherwise (a demo's window also
    /// shows it as a headset would: lens distortion and late warp, see --lens, --late-warp)
    /// [config: vr.enabled].
    #[arg(long)]
    pub(crate) vr: bool,
    /// VR: eye separation (interpupillary distance) in millimetres, 40–90.
    ///
    /// [config: vr.ipd_mm, default 64]
    #[arg(long, value_name = "MM", hide_short_help = true)]
    pub(crate) ipd: Option<f32>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "VR")]
pub(crate) struct PoseArgs {
    /// Head pose source: auto, mouse, synthetic, track:FILE, imu, none.
    ///
    /// auto (mouse-look in a window, none headless), mouse, synthetic[:sweep|turn|nod|still]
    /// (a generated head-motion track), track:FILE (docs/POSE.md), imu[:PATH] (a Linux IIO or
    /// evdev IMU, fused with a Madgwick filter), none [config: vr.pose, default auto].
    #[arg(long, value_name = "SOURCE", hide_short_help = true)]
    pub(crate) pose: Option<String>,
    /// Head poses per second sent to the host, 1–1000.
    ///
    /// [config: vr.pose_rate_hz, default 500]
    #[arg(long, value_name = "HZ", hide_short_help = true)]
    pub(crate) pose_rate: Option<u32>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Network")]
pub(crate) struct NetArgs {
    /// Data plane after the handshake: udp or raw (Ethernet frames).
    ///
    /// The handshake is always UDP. raw: Ethernet frames of EtherType 0x88B5 between the two
    /// interfaces' MAC addresses; needs CAP_NET_RAW and both ends on one link, else it stays on
    /// UDP and says why [config: network.transport, default udp].
    #[arg(long, value_parser = ["udp", "raw"], hide_short_help = true)]
    pub(crate) transport: Option<String>,
    /// With --transport raw: the network interface.
    ///
    /// Default: the one towards the peer; a host bound to 0.0.0.0: the only interface up
    /// [config: network.interface].
    #[arg(long, value_name = "NAME", hide_short_help = true)]
    pub(crate) interface: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct HostArgs {
    /// Address and UDP port to listen on.
    ///
    /// [config: host.bind, default 0.0.0.0:9710]
    #[arg(long, value_name = "ADDR:PORT")]
    pub(crate) bind: Option<String>,
    /// Who may connect: allowlist, pin, open.
    ///
    /// allowlist: clients approved with `untether pair`, or paired by PIN; pin: also print a
    /// one-time PIN now and accept it; open: anyone who can reach the port, only on a trusted
    /// network! [config: host.access, default allowlist].
    // The values are in the text: clap's list would make -h's line too long.
    #[arg(long, value_parser = ["allowlist", "open", "pin"], hide_possible_values = true)]
    pub(crate) access: Option<String>,
    /// Most clients served at once (1–256).
    ///
    /// All from one encoded stream. The first to connect controls (its input drives the application), the others watch
    /// (their input is dropped unless granted: `untether pair grant FINGERPRINT input`);
    /// `untether pair control FINGERPRINT` hands control over. One more is refused as busy
    /// [config: host.max_clients, default 8].
    #[arg(long, value_name = "N")]
    pub(crate) max_clients: Option<usize>,
    /// The name advertised on the local network.
    ///
    /// [config: host.name, default the machine's host name]
    #[arg(long = "host-name", value_name = "NAME")]
    pub(crate) host_name: Option<String>,
    /// Do not advertise this host on the local network.
    ///
    /// Advertised over mDNS/DNS-SD, `untether discover` and `untether client` without an
    /// address find it otherwise [config: host.advertise = false].
    #[arg(long, hide_short_help = true)]
    pub(crate) no_advertise: bool,
    /// Serve the operator's dashboard.
    ///
    /// Approve clients, the PIN, roles, live plots, bit rate and frame rate, over HTTP on this
    /// TCP address (ADDR:PORT or off); without a value 127.0.0.1:9711 (this machine only); it answers to its
    /// admin token only (the link printed at start, also in dashboard_link in the state
    /// directory); off: none (docs/DASHBOARD.md) [config: host.dashboard, default off].
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, default_missing_value = "127.0.0.1:9711")]
    pub(crate) dashboard: Option<String>,
    /// Also serve the stream over RTSP.
    ///
    /// For ordinary players (ffplay, VLC, GStreamer), on this TCP address, e.g. 0.0.0.0:8554: rtsp://HOST:8554/untether, the same encoded
    /// stream (no second encode), with digest authentication unless --access open [config:
    /// rtsp.listen, rtsp.*].
    #[arg(long, value_name = "ADDR:PORT")]
    pub(crate) rtsp: Option<String>,
    /// Log a status line (clients, frames/s, Mbit/s, loss, RTT) this often.
    ///
    /// Seconds (10) or with a unit (30s, 1m); 0 = never [config: host.status_interval_s,
    /// default 10 s].
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, hide_short_help = true)]
    pub(crate) status_interval: Option<Duration>,
    /// A viewer whose link cannot carry the stream: pause or drop.
    ///
    /// pause: keyframes only, tried again after 2, 4, 8 s; dropped the third time within a
    /// minute. drop: at once, with a goodbye saying why [config: host.slow_viewer, default
    /// pause].
    #[arg(long, value_parser = ["pause", "drop"], hide_short_help = true)]
    pub(crate) slow_viewer: Option<String>,
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
    pub(crate) capture: Option<String>,
    /// With --capture x11: one window, by id or title.
    ///
    /// The id as xwininfo shows it (0x1e00007) or decimal; default the whole screen.
    #[arg(
        long,
        value_name = "ID|NAME",
        requires = "capture",
        help_heading = "Capture"
    )]
    pub(crate) window: Option<String>,
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
    pub(crate) region: Option<String>,
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
    pub(crate) input: String,
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
    pub(crate) pointer: String,
    /// Frame source: scene or pipe:FILE (raw frames).
    ///
    /// scene: the built-in test scene; pipe:FILE reads raw frames from FILE, a named pipe, or - for stdin; size from --size,
    /// rate from --fps.
    #[arg(long, value_name = "scene|pipe:FILE", help_heading = "Capture")]
    pub(crate) source: Option<String>,
    /// Layout of raw frames from a pipe source.
    #[arg(
        long,
        value_name = "FORMAT",
        value_parser = ["i420", "bgra"],
        default_value = "i420",
        help_heading = "Capture",
        hide_short_help = true
    )]
    pub(crate) pipe_format: String,
    /// Frame size of a pipe source (same as --resolution).
    #[arg(
        long,
        value_name = "WxH",
        conflicts_with = "resolution",
        help_heading = "Capture",
        hide_short_help = true
    )]
    pub(crate) size: Option<String>,
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
    pub(crate) audio: String,
    /// Stamp frame number and capture time into captured frames.
    ///
    /// Into the top-left corner of captured or piped frames, to measure glass-to-glass from
    /// the pixels.
    #[arg(long, help_heading = "Capture", hide_short_help = true)]
    pub(crate) stamp: bool,
    #[command(flatten)]
    pub(crate) video: VideoArgs,
    #[command(flatten)]
    pub(crate) vr: VrArgs,
    #[command(flatten)]
    pub(crate) net: NetArgs,
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
    pub(crate) scheduler: Option<String>,
    #[command(flatten)]
    pub(crate) webrtc: WebRtcArgs,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Decoding and display")]
pub(crate) struct ClientSide {
    /// No window: decode and measure only.
    ///
    /// Also the default when there is no display [config: client.headless].
    #[arg(long)]
    pub(crate) headless: bool,
    /// Start fullscreen.
    ///
    /// In the window: F11 or Alt+Enter toggles fullscreen, F10 captures/releases the mouse
    /// (relative mode, for games), F12 shows/hides the statistics overlay; these keys are not
    /// sent to the host [config: client.fullscreen].
    #[arg(long)]
    pub(crate) fullscreen: bool,
    /// Start with the live statistics overlay shown (F12 toggles it).
    ///
    /// [config: client.overlay]
    #[arg(long, hide_short_help = true)]
    pub(crate) overlay: bool,
    /// Name shown to the host.
    ///
    /// [config: client.name, default: this machine's hostname]
    #[arg(long, hide_short_help = true)]
    pub(crate) name: Option<String>,
    /// Write the last shown frame to FILE (PPM) when the client stops.
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub(crate) save_frame: Option<PathBuf>,
    /// Measure input response with a synthetic input every MS ms.
    ///
    /// Sends a small look-around input every MS milliseconds and measures how long until a
    /// decoded frame shows it (0 = off) [config: client.input_probe_interval_ms].
    #[arg(long, value_name = "MS", hide_short_help = true)]
    pub(crate) input_probe: Option<u64>,
    /// Count frames without decoding them (a light load-test viewer).
    ///
    /// Receive and reassemble frames and count them, but do not decode or show them (implies
    /// --headless) [config: client.decode = false].
    #[arg(long, hide_short_help = true)]
    pub(crate) no_decode: bool,
    /// The codecs this client decodes, preferred first.
    ///
    /// Comma-separated: h264, h264rgb, hevc, av1 (the host picks the first it can encode)
    /// [config: client.codecs, default h264,h264rgb,hevc,av1].
    #[arg(long, value_name = "LIST", hide_short_help = true)]
    pub(crate) codecs: Option<String>,
    /// Decoder: auto, software, or an FFmpeg decoder by name.
    ///
    /// auto: software, or the --hwaccel hardware falling back to software with one line; a
    /// name (h264_v4l2m2m, hevc_cuvid, libdav1d, …) has no fallback [config: client.decoder,
    /// default auto].
    #[arg(long, value_name = "auto|software|NAME", hide_short_help = true)]
    pub(crate) decoder: Option<String>,
    /// Hardware decoding: none, auto, vaapi, cuda, vdpau, drm, v4l2m2m.
    ///
    /// auto: what this machine has. Untested on real hardware (docs/CODECS.md) [config:
    /// client.hwaccel, default none].
    #[arg(
        long,
        value_parser = ["none", "auto", "vaapi", "cuda", "vdpau", "drm", "v4l2m2m"],
        hide_possible_values = true
    )]
    pub(crate) hwaccel: Option<String>,
    /// The window's presenter: gl, sdl or auto.
    ///
    /// gl: OpenGL ES 3 (YUV→RGB, lens distortion and late warp on the GPU); sdl: SDL's
    /// renderer; auto: gl, else sdl with one line saying why [config: client.presenter, default
    /// auto].
    #[arg(long, value_parser = ["auto", "gl", "sdl"], hide_short_help = true)]
    pub(crate) presenter: Option<String>,
    /// With --vr: the lens profile (TOML).
    ///
    /// See docs/lens/generic.toml, the built-in default [config: vr.lens].
    #[arg(long, value_name = "FILE", help_heading = "VR", hide_short_help = true)]
    pub(crate) lens: Option<PathBuf>,
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
    pub(crate) late_warp: Option<String>,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Input and output")]
pub(crate) struct ClientIoArgs {
    /// Play the host's audio (SDL).
    ///
    /// SDL_AUDIODRIVER picks the backend; dummy plays nowhere.
    #[arg(long)]
    pub(crate) audio: bool,
    /// SDL audio output device (default: the system default).
    #[arg(long, value_name = "NAME", requires = "audio", hide_short_help = true)]
    pub(crate) audio_device: Option<String>,
    /// Write every decoded frame as raw I420 to FILE (- : stdout).
    ///
    /// FILE, a named pipe, or - for stdout, flushed per frame; implies --headless; the report
    /// goes to stderr.
    #[arg(long, value_name = "pipe:FILE", hide_short_help = true)]
    pub(crate) sink: Option<String>,
    /// A Linux input device whose events go to the host; repeatable.
    ///
    /// E.g. /dev/input/event3, or a FIFO carrying evdev records; repeat for more.
    #[arg(long = "input-device", value_name = "PATH", hide_short_help = true)]
    pub(crate) input_devices: Vec<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// HOST[:PORT], name or fingerprint; default: find it.
    ///
    /// HOST[:PORT] (default port 9710); IPv6 as [ADDR]:PORT; or a name or fingerprint
    /// `untether discover` lists (the host must prove the advertised key). Left out: the
    /// paired host on the local network (mDNS); a host not paired yet is named, never chosen
    /// on its own.
    pub(crate) host: Option<String>,
    /// Pair using the one-time PIN the host shows.
    ///
    /// The PIN of `untether host --access pin` or `untether pair --pin` there; the host then
    /// remembers this client.
    #[arg(long, value_name = "PIN")]
    pub(crate) pin: Option<String>,
    /// Exit when the host says goodbye.
    ///
    /// The host stopped (Ctrl-C, a service restart): without this the client waits for it to
    /// come back [config: client.wait_for_host = false].
    #[arg(long)]
    pub(crate) exit_on_bye: bool,
    /// Ask the host for this frame size (WxH, 720p).
    ///
    /// WIDTHxHEIGHT or 360p … 4k. The host grants it within its own (--resolution there, its limit) and says so [config:
    /// client.resolution, default the host's].
    #[arg(long, value_name = "WxH")]
    pub(crate) resolution: Option<String>,
    /// Ask the host for this frame rate.
    ///
    /// Within its own (its limit) [config: client.fps, default the host's].
    #[arg(long)]
    pub(crate) fps: Option<u32>,
    /// Ask the host for this bit rate (10M, 8000k).
    ///
    /// Within its own (its limit) [config: client.bitrate_kbps, default the host's].
    #[arg(long, value_name = "RATE", value_parser = bitrate_arg)]
    pub(crate) bitrate: Option<u32>,
    #[command(flatten)]
    pub(crate) side: ClientSide,
    #[command(flatten)]
    pub(crate) io: ClientIoArgs,
    /// VR: the host's --vr stream, for a headset.
    ///
    /// The host runs with --vr: the stream is side-by-side stereo; the GPU presenter
    /// pre-distorts each eye for the headset's lenses and late-warps it to the newest head pose,
    /// and pose-to-photon is measured from the presented pose markers [config: vr.enabled].
    #[arg(long, help_heading = "VR")]
    pub(crate) vr: bool,
    #[command(flatten)]
    pub(crate) pose: PoseArgs,
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
    pub(crate) paths: Vec<String>,
    #[command(flatten)]
    pub(crate) net: NetArgs,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct DemoArgs {
    /// Stream the test tone too and play it, measuring mouth-to-ear.
    ///
    /// SDL audio (SDL_AUDIODRIVER=dummy plays nowhere); the report has the mouth-to-ear latency
    /// and the A/V offset.
    #[arg(long)]
    pub(crate) audio: bool,
    /// Also serve the demo's stream over RTSP on this TCP address.
    ///
    /// E.g. 127.0.0.1:8554, to watch it in ffplay, VLC or GStreamer; digest authentication, the
    /// password is printed [config: rtsp.listen, rtsp.*].
    #[arg(long, value_name = "ADDR:PORT", hide_short_help = true)]
    pub(crate) rtsp: Option<String>,
    #[command(flatten)]
    pub(crate) video: VideoArgs,
    #[command(flatten)]
    pub(crate) side: ClientSide,
    #[command(flatten)]
    pub(crate) vr: VrArgs,
    #[command(flatten)]
    pub(crate) pose: PoseArgs,
    #[command(flatten)]
    pub(crate) net: NetArgs,
    #[command(flatten)]
    pub(crate) webrtc: WebRtcArgs,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// `--bitrate`: [`untether_proto::units::parse_bitrate`].
pub(crate) fn bitrate_arg(s: &str) -> std::result::Result<u32, untether_proto::units::UnitError> {
    untether_proto::units::parse_bitrate(s)
}

/// `--duration` and the like: [`untether_proto::units::parse_duration`].
pub(crate) fn duration_arg(
    s: &str,
) -> std::result::Result<Duration, untether_proto::units::UnitError> {
    untether_proto::units::parse_duration(s)
}
