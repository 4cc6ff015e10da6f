//! What a host is told: the validated settings ([`HostOptions`]) and how it is fed and what it
//! feeds ([`HostSetup`]: the frame source, the input sink, audio).

use std::fmt;
use std::sync::Arc;

use untether_media::codec::InputPicture;
use untether_media::pipe::PipeFormat;
use untether_media::x11::{CaptureTarget, PointerMode};
use untether_proto::{HostConfig, InputRecord, SessionParams};

use crate::clock::now_us;
use crate::config::{
    ConfigError, HostToml, NetworkToml, SceneToml, VideoConfig, VrToml, WebRtcToml,
};
use crate::identity::HostTrust;

/// Everything the host needs to run.
#[derive(Clone, Debug)]
pub struct HostOptions {
    pub video: VideoConfig,
    pub scene: SceneToml,
    pub host: HostToml,
    pub network: NetworkToml,
    /// Stereo rendering of the test scene (`vr.enabled`, `vr.ipd_mm`, `vr.fov_deg`).
    pub vr: VrToml,
    /// Browsers and WHIP publishing (`[webrtc]`; off by default).
    pub webrtc: WebRtcToml,
}

impl HostOptions {
    /// Checks every setting, naming the key and the allowed values of the first bad one.
    pub fn validate(&self) -> Result<(), crate::config::ConfigError> {
        crate::config::validate_host(&self.video, &self.host, &self.network, &self.scene)?;
        self.vr.validate()?;
        self.webrtc.validate()
    }
}

impl Default for HostOptions {
    fn default() -> Self {
        let cfg = crate::config::ConfigToml::default();
        HostOptions {
            vr: Default::default(),
            video: VideoConfig::default(),
            scene: cfg.scene,
            host: cfg.host,
            network: cfg.network,
            webrtc: cfg.webrtc,
        }
    }
}

/// Where the host's frames come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SourceSpec {
    /// The built-in test scene (stamped, reacts to input).
    #[default]
    Scene,
    /// An X11 display (None: `$DISPLAY`), the whole screen or one window, via MIT-SHM.
    X11 {
        display: Option<String>,
        target: CaptureTarget,
    },
    /// An output (or a region of one) of a wlroots Wayland compositor through wlr-screencopy
    /// (None: `$WAYLAND_DISPLAY`, else a socket name or path).
    Wlr {
        display: Option<String>,
        target: untether_media::wlr::WlrTarget,
    },
    /// Raw frames from a file, named pipe or `-` (standard input), of the configured
    /// resolution; a regular file is paced at the frame rate.
    Pipe { path: String, format: PipeFormat },
    /// The application, through [`Host::publish`](super::Host::publish) or a [`FrameSender`](super::FrameSender).
    App,
    /// An unmodified application's presented frames, from the frame ring its capture hook
    /// writes (`untether run`: the Vulkan layer or the GL hook).
    Presents(super::source_ring::PresentRing),
    /// The scan-out framebuffer of a DRM card (None: the first `/dev/dri/card*`), KMS capture
    /// as FFmpeg's kmsgrab; untested on real hardware.
    Kms { device: Option<String> },
    /// A monitor or window the user picks in the desktop portal's ScreenCast dialog
    /// (xdg-desktop-portal: GNOME, KDE, wlroots), read from PipeWire. The permission is kept
    /// as the portal's restore token in `token_file` (None: `portal-restore-token` in the
    /// host's state directory). Needs the `portal` feature.
    Portal {
        token_file: Option<std::path::PathBuf>,
    },
    /// A PipeWire video node of this session's PipeWire daemon, by `node.name` or serial,
    /// without the portal (a camera, a virtual output, a cast opened elsewhere). Needs the
    /// `portal` feature.
    PipeWire { target: String },
}

impl SourceSpec {
    /// What pictures the source produces (an encoder that takes either, NVENC, is opened for
    /// them): I420 from an I420 pipe, BGRA otherwise (the application's I420 frames go to an
    /// encoder that takes YUV, or are refused with a clear error by one that takes BGRA only).
    pub fn picture_kind(&self) -> untether_media::codec::encoder::PictureKind {
        use untether_media::codec::encoder::PictureKind;
        match self {
            SourceSpec::Pipe {
                format: PipeFormat::I420,
                ..
            } => PictureKind::I420,
            _ => PictureKind::Bgra,
        }
    }
}

/// A callback that receives every input event (on the host's network thread: return quickly).
#[derive(Clone)]
pub struct InputCallback(pub Arc<dyn Fn(&InputRecord) + Send + Sync>);

impl fmt::Debug for InputCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InputCallback")
    }
}

/// Where the client's input goes.
#[derive(Clone, Debug, Default)]
pub enum InputSpec {
    /// The scene for the scene source, XTEST for X11 capture, uinput for Wayland capture (where
    /// it cannot be opened: one line saying why, and input is dropped), the application queue
    /// otherwise.
    #[default]
    Auto,
    /// The test scene.
    Scene,
    /// A queue the application drains with [`Host::poll_input`](super::Host::poll_input) (bounded: the oldest events
    /// are dropped, and counted, when nobody polls).
    Queue,
    /// A callback on the network thread.
    Callback(InputCallback),
    /// Replay into an X server with XTEST (None: the captured display, else `$DISPLAY`).
    Xtest {
        display: Option<String>,
        pointer: PointerMode,
    },
    /// Virtual keyboard and mouse through `/dev/uinput` (Wayland desktops, a console): the
    /// compositor or kernel console sees them as real devices. The pointer is absolute over
    /// the stream's size. The host stops at start, saying why, where uinput cannot be opened.
    Uinput,
    /// Dropped.
    Discard,
}

/// Where the host's audio comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AudioSpec {
    #[default]
    None,
    /// The test tone: 1 kHz beeps of 100 ms at every whole second of the host's clock.
    Tone,
    /// An SDL recording device (None: the default source); a PulseAudio/PipeWire monitor
    /// source captures what the machine plays.
    Capture { device: Option<String> },
    /// PCM the application pushes with [`Host::push_audio`](super::Host::push_audio).
    App,
}

/// Sees each captured picture after its frame was encoded and sent (so off that frame's
/// path), before the buffer is reused: for picture-quality measurement. Keep it short — it
/// runs on the encoder thread before the next frame.
#[derive(Clone)]
pub struct SentFrameTap(pub Arc<dyn Fn(&InputPicture<'_>) + Send + Sync>);

impl std::fmt::Debug for SentFrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SentFrameTap")
    }
}

/// How the host is fed and what it feeds: everything beyond [`HostOptions`].
#[derive(Clone, Debug)]
pub struct HostSetup {
    pub source: SourceSpec,
    pub input: InputSpec,
    pub audio: AudioSpec,
    /// Stamp frame number and capture time into the top-left corner of frames from X11, pipe
    /// and application sources (the scene always stamps), for glass-to-glass from pixels.
    pub stamp: bool,
    /// For the app source: an encoder thread takes published frames (true), or the
    /// application encodes on its own thread with a [`FrameSender`](super::FrameSender) (false).
    pub encoder_thread: bool,
    /// Sees every sent picture (scene, X11, Wayland, KMS and application sources; not pipes),
    /// see [`SentFrameTap`].
    pub sent_frame_tap: Option<SentFrameTap>,
    /// An impairment for tests and demonstrations (frames sent in slices): these slices
    /// (frame number, slice index) of each client's stream are never sent, as if every one of
    /// their shards had been lost on the network.
    pub lose_slices: Vec<(u32, u8)>,
    /// The host's identity and who may connect: the state directory and `host.access`
    /// (default), or in memory.
    pub trust: HostTrust,
    /// Other consumers of the encoded stream besides the host's clients (an RTSP server, crate
    /// `untether-rtsp`): each sees every encoded frame and audio packet, shared, and may ask
    /// for keyframes.
    pub consumers: Vec<super::consumer::Consumer>,
    /// The host's one admission: every door (the browsers' signalling, and an RTSP server
    /// given a clone of it) decides with its one budget and throttle per source address, so
    /// that an address refused at one door is refused at all. A new one by default; clones
    /// share it.
    pub admission: untether_proto::admission::Admission,
}

impl Default for HostSetup {
    fn default() -> Self {
        HostSetup {
            source: SourceSpec::Scene,
            input: InputSpec::Auto,
            audio: AudioSpec::None,
            stamp: false,
            encoder_thread: true,
            sent_frame_tap: None,
            lose_slices: Vec::new(),
            trust: HostTrust::Stored,
            consumers: Vec::new(),
            admission: Default::default(),
        }
    }
}

/// The session parameters a host announces for its video settings (the stream's codec and
/// refresh period are set from the codecs the host offers, by the first client's choice).
pub(crate) fn session_params(options: &HostOptions) -> SessionParams {
    let v = &options.video;
    SessionParams {
        width: v.resolution.width.min(u16::MAX as u32) as u16,
        height: v.resolution.height.min(u16::MAX as u32) as u16,
        fps: v.fps as u16,
        codec: v.codecs()[0],
        bitrate_kbps: v.bitrate_kbps,
        max_datagram: options.network.max_datagram,
        keepalive_ms: options.network.keepalive_ms as u32,
        idle_timeout_ms: options.network.idle_timeout_ms as u32,
        refresh_period: 0,
    }
}

/// The protocol configuration of a host's options (the identity and allowlist come after).
pub(crate) fn session_config(options: &HostOptions) -> Result<HostConfig, ConfigError> {
    let mut cfg = HostConfig::new(session_params(options));
    // A client on this machine then knows the offset is exactly 0.
    cfg.clock_id = untether_net::clock_identity();
    // Named to every client beside its Accept, as this host's report names them.
    let v = &options.video;
    cfg.encoder = Some(untether_proto::HostEncoder {
        encoder: v.selection.encoder.name().into(),
        preset: v.preset.clone(),
        conversion: v.selection.conversion.name().into(),
    });
    cfg.keyframe_cooldown_us = options.host.keyframe_cooldown_ms * 1000;
    cfg.fec = options.network.fec;
    cfg.paths.scheduler = options.network.scheduler;
    cfg.retransmit = options.network.retransmit;
    cfg.state.budget_bytes_per_s = options.network.state_budget_bytes_per_s();
    cfg.max_clients = options.host.max_clients;
    // Room for every client to be mid-handshake at once (a room of headsets switched on
    // together) besides the handshakes of strangers: the table is bounded either way.
    cfg.max_handshakes = cfg.max_handshakes.max(2 * cfg.max_clients);
    cfg.health.action = options.host.slow_viewer;
    if options.network.adaptive_bitrate {
        cfg.rate = Some(untether_proto::RateConfig::new(options.video.bitrate_kbps));
    }
    cfg.connection_id_seed = now_us() ^ (std::process::id() as u64) << 32;
    Ok(cfg)
}
