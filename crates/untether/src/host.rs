//! The host: a **core** (encoder stage + network thread + a latest-wins frame slot) fed by a
//! **frame source**, with the client's input going to an **input sink**, and audio beside it.
//!
//! Frame sources ([`SourceSpec`]):
//! - **scene** — the built-in test scene renders on its own thread at the frame rate and puts
//!   each frame in the slot; the **encoder** thread takes the newest, converts, encodes and
//!   sends it (at most one frame between them, latest wins, drops counted);
//! - **x11** — a capture thread grabs the display or a window through MIT-SHM at the frame
//!   rate and encodes the grab on the same thread, straight from shared memory (no slot, no
//!   copy); ticks without DAMAGE are skipped, but a joining client always gets a keyframe;
//! - **pipe** — a reader thread reads exactly one raw frame, encodes and sends it, and only
//!   then reads the next (no read-ahead: the writer is held back instead of frames dropped);
//! - **app** — the application publishes frames through [`Host::publish`] (copied into a
//!   pooled buffer, encoded by the encoder thread), or encodes on its own thread with a
//!   [`FrameSender`] (OpenUVR's synchronous mode: no encoder thread at all).
//!
//! Input sinks ([`InputSpec`]): the scene, an application queue ([`Host::poll_input`]) or
//! callback, XTEST replay into an X server, or nothing. Audio ([`AudioSpec`]): the test tone,
//! an SDL capture device (PulseAudio/PipeWire monitor, ALSA), or PCM the application pushes.
//!
//! The **network** thread receives control datagrams (session start, keyframe requests,
//! input, pings), dispatches input to the sink and drives the session's timers.
//!
//! The thread that encodes a frame also sends it: in one burst, or with `network.pacing` in
//! batches spread over that fraction of the frame interval ([`crate::pacing`]), sleeping
//! between batches — so it is held up at most the pacing window, and the `send` stage
//! includes the pacing. Other threads' datagrams (control replies, audio) do not wait for it.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use untether_media::audio::{self, AudioEncoder, EncodedAudio, SdlAudioCapture, Tone};
use untether_media::codec::{Encoder, EncoderConfig, InputPicture};
use untether_media::convert::I420Frame;
use untether_media::pipe::{PipeFormat, PipeReader};
use untether_media::scene::{Scene, SceneConfig, SceneInput, SceneKey};
use untether_media::stamp::{self, Stamp};
use untether_media::x11::{self, CaptureTarget, PointerMode, X11Capture, XtestReplay};
use untether_media::BgraFrame;
use untether_net::{Received, UdpEndpoint};
use untether_proto::state::keys as state_keys;
pub use untether_proto::Codec;
use untether_proto::{
    fingerprint, AccessPolicy, AudioPacket, FrameTiming, HostConfig, HostEvent, HostSession,
    InputEvent, InputRecord, Micros, PairingEvent, PairingPin, PublicKey, SessionParams,
    StateEntry, StateValue, Transmit,
};

use crate::clock::{now_us, sleep_until};
use crate::config::{ConfigError, HostToml, NetworkToml, Resolution, SceneToml, VideoConfig};
use crate::identity::{unix_now, Access, HostTrust, IdentityError, Role, StateDir};
use crate::pacing::{self, Pacing};
use crate::slot::Slot;
use crate::stats::Samples;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Net(#[from] untether_net::NetError),
    #[error(transparent)]
    Media(#[from] untether_media::MediaError),
    #[error("invalid bind address {0:?}: expected IP:PORT, e.g. 0.0.0.0:9710")]
    BadBind(String),
    #[error("cannot start thread: {0}")]
    Thread(std::io::Error),
    /// The call does not fit how the host was set up (e.g. publishing to a scene host).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("identity: {0}")]
    Identity(#[from] IdentityError),
    /// The host stopped (a fatal error, or it was asked to).
    #[error("the host has stopped{}", .0.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Stopped(Option<String>),
}

/// Everything the host needs to run.
#[derive(Clone, Debug)]
pub struct HostOptions {
    pub video: VideoConfig,
    pub scene: SceneToml,
    pub host: HostToml,
    pub network: NetworkToml,
}

impl Default for HostOptions {
    fn default() -> Self {
        let cfg = crate::config::ConfigToml::default();
        HostOptions {
            video: VideoConfig::default(),
            scene: cfg.scene,
            host: cfg.host,
            network: cfg.network,
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
    /// Raw frames from a file, named pipe or `-` (standard input), of the configured
    /// resolution; a regular file is paced at the frame rate.
    Pipe { path: String, format: PipeFormat },
    /// The application, through [`Host::publish`] or a [`FrameSender`].
    App,
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
    /// The scene for the scene source, XTEST for X11 capture, the application queue otherwise.
    #[default]
    Auto,
    /// The test scene.
    Scene,
    /// A queue the application drains with [`Host::poll_input`] (bounded: the oldest events
    /// are dropped, and counted, when nobody polls).
    Queue,
    /// A callback on the network thread.
    Callback(InputCallback),
    /// Replay into an X server with XTEST (None: the captured display, else `$DISPLAY`).
    Xtest {
        display: Option<String>,
        pointer: PointerMode,
    },
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
    /// PCM the application pushes with [`Host::push_audio`].
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
    /// Opus bitrate, kbit/s.
    pub audio_bitrate_kbps: u32,
    /// Periodic intra refresh instead of keyframes (requested keyframes are still IDRs).
    pub intra_refresh: bool,
    /// A keyframe every this many frames (0: only when a client joins or asks).
    pub gop_frames: u32,
    /// Extra x264 options, `key=value:key=value`.
    pub x264_params: String,
    /// Stamp frame number and capture time into the top-left corner of frames from X11, pipe
    /// and application sources (the scene always stamps), for glass-to-glass from pixels.
    pub stamp: bool,
    /// For the app source: an encoder thread takes published frames (true), or the
    /// application encodes on its own thread with a [`FrameSender`] (false).
    pub encoder_thread: bool,
    /// Sees every sent picture (scene, X11 and pipe sources), see [`SentFrameTap`].
    pub sent_frame_tap: Option<SentFrameTap>,
    /// The host's identity and who may connect: the state directory and `host.access`
    /// (default), or in memory.
    pub trust: HostTrust,
}

impl Default for HostSetup {
    fn default() -> Self {
        HostSetup {
            source: SourceSpec::Scene,
            input: InputSpec::Auto,
            audio: AudioSpec::None,
            audio_bitrate_kbps: 128,
            intra_refresh: false,
            gop_frames: 0,
            x264_params: String::new(),
            stamp: false,
            encoder_thread: true,
            sent_frame_tap: None,
            trust: HostTrust::Stored,
        }
    }
}

/// Owned pixels on their way from a source to the encoder thread.
enum Pixels {
    Bgra(BgraFrame),
    I420(I420Frame),
}

impl Pixels {
    fn picture(&self) -> InputPicture<'_> {
        match self {
            Pixels::Bgra(f) => InputPicture::Bgra {
                width: f.width,
                height: f.height,
                data: &f.data,
                stride: f.stride,
            },
            Pixels::I420(f) => {
                let (w, w2) = (f.width as usize, f.width.div_ceil(2) as usize);
                InputPicture::I420 {
                    width: f.width,
                    height: f.height,
                    planes: [(&f.y, w), (&f.u, w2), (&f.v, w2)],
                }
            }
        }
    }
}

/// A frame as the source produced it.
struct CapturedFrame {
    pixels: Pixels,
    capture_us: Micros,
    capture_dur_us: u32,
}

#[derive(Default)]
struct HostSamples {
    capture: Samples,
    queue: Samples,
    convert: Samples,
    encode: Samples,
    send: Samples,
    /// With pacing on: per frame, the time the sending thread slept between batches (part of
    /// `send`).
    pace: Samples,
    frame_bytes: Samples,
    audio_encode: Samples,
    /// Time the caller of a synchronous send was blocked.
    sync_blocked: Samples,
}

#[derive(Default)]
struct Counters {
    captured: AtomicU64,
    encoded: AtomicU64,
    sent: AtomicU64,
    keyframes: AtomicU64,
    inputs_applied: AtomicU64,
    inputs_dropped: AtomicU64,
    send_errors: AtomicU64,
    unchanged: AtomicU64,
    grab_errors: AtomicU64,
    audio_packets: AtomicU64,
    bitrate_changes: AtomicU64,
    /// The adaptive bitrate controller's target (0: none; the configured bitrate).
    target_kbps: std::sync::atomic::AtomicU32,
    /// Frames whose datagrams went out in more than one paced batch.
    paced_frames: AtomicU64,
}

/// Where the network thread delivers input.
enum InputSink {
    Scene,
    Queue,
    Callback(InputCallback),
    Xtest(Box<XtestReplay>),
    Discard,
}

struct AudioStage {
    encoder: AudioEncoder,
    out: Vec<EncodedAudio>,
    pending: Vec<Transmit>,
}

struct Shared {
    session: Mutex<HostSession>,
    socket: UdpEndpoint,
    stop: AtomicBool,
    frames: Slot<CapturedFrame>,
    spare: Mutex<Vec<Pixels>>,
    keyframe_wanted: AtomicBool,
    /// Bumped when a new client connects: the encoder restarts frame numbering with a keyframe.
    client_epoch: AtomicU64,
    inputs: Mutex<Vec<InputRecord>>,
    app_inputs: Mutex<VecDeque<InputRecord>>,
    input_sink: Mutex<InputSink>,
    /// The captured area's origin on the X screen (for absolute pointer replay).
    capture_origin: Mutex<(i32, i32)>,
    audio: Mutex<Option<AudioStage>>,
    source_ended: AtomicBool,
    counters: Counters,
    samples: Mutex<HostSamples>,
    fatal: Mutex<Option<String>>,
    events: Mutex<Vec<String>>,
    /// The client's paths, refreshed by the network thread (kept after the client leaves).
    last_paths: Mutex<Vec<untether_proto::PathStats>>,
    sent_frame_tap: Option<SentFrameTap>,
    pairing: Mutex<Pairing>,
    /// Whether the network thread turns the state channel into input records (sinks other
    /// than the scene, which reads the state itself every frame).
    state_to_sink: bool,
    /// How a frame's datagrams are spread out (`network.pacing`).
    pacing: Pacing,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn fail(&self, message: String) {
        log::error!("host: {message}");
        lock(&self.fatal).get_or_insert(message);
        self.stop.store(true, Ordering::SeqCst);
        self.frames.close();
    }

    fn note(&self, message: String) {
        log::info!("host: {message}");
        let mut ev = lock(&self.events);
        if ev.len() < 1000 {
            ev.push(message);
        }
    }

    /// Sends what the session has queued. Errors are counted, never fatal: a send can fail
    /// transiently (a full queue, an unreachable client) and the session's timers handle the rest.
    fn flush(&self, pending: &mut Vec<Transmit>) {
        for t in pending.drain(..) {
            self.send_one(&t);
        }
    }

    fn send_one(&self, t: &Transmit) {
        if let Err(e) = self.socket.send_to(&t.payload, t.dst) {
            if self.counters.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                log::warn!("host: send to {} failed: {e}", t.dst);
            }
        }
    }

    /// Sends a frame's datagrams in batches of `batch` spread over `window_us` from now (see
    /// [`crate::pacing::schedule`]), sleeping on the calling thread until each batch's time;
    /// returns (batches, µs slept). The datagrams keep their order. The session lock is not
    /// held meanwhile, so the network thread's control replies (acks, pongs, keep-alives) and
    /// the audio thread's packets go out at once, between batches, instead of waiting behind
    /// the frame; their packet numbers are newer than the frame's, which the client's packet
    /// window (1024 packets) accepts out of order. When the host stops, the rest is sent at
    /// once.
    fn flush_paced(&self, pending: &mut Vec<Transmit>, batch: usize, window_us: u64) -> (u64, u64) {
        if window_us == 0 || pending.len() <= batch {
            let batches = u64::from(!pending.is_empty());
            self.flush(pending);
            return (batches, 0);
        }
        let start = now_us();
        let (mut batches, mut slept) = (0, 0);
        for (range, offset) in pacing::schedule(pending.len(), batch, window_us) {
            let before = now_us();
            if start + offset > before && !self.stopped() {
                sleep_until(start + offset);
                slept += now_us() - before;
            }
            for t in &pending[range] {
                self.send_one(t);
            }
            batches += 1;
        }
        pending.clear();
        (batches, slept)
    }

    fn drain_transmits(session: &mut HostSession, now: Micros, out: &mut Vec<Transmit>) {
        while let Some(t) = session.poll_transmit(now) {
            out.push(t);
        }
    }

    fn has_client(&self) -> bool {
        lock(&self.session).client().is_some()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Encodes PCM into Opus packets and sends them.
    fn push_audio(&self, pcm: &[i16], channels: usize, pts_us: Micros) -> Result<(), HostError> {
        let mut guard = lock(&self.audio);
        let Some(stage) = guard.as_mut() else {
            return Err(HostError::Usage(
                "this host has no audio stream (set an audio source)".into(),
            ));
        };
        stage.out.clear();
        stage.encoder.push(pcm, channels, pts_us, &mut stage.out)?;
        if stage.out.is_empty() {
            return Ok(());
        }
        let now = now_us();
        {
            let mut session = lock(&self.session);
            for a in &stage.out {
                let packet = AudioPacket {
                    seq: a.seq,
                    pts_us: a.pts_us,
                    samples: audio::FRAME_SAMPLES as u16,
                    opus: a.opus.clone(),
                    prev_opus: a.prev_opus.clone(),
                };
                if session.send_audio(now, &packet).is_ok() {
                    self.counters.audio_packets.fetch_add(1, Ordering::Relaxed);
                }
            }
            Shared::drain_transmits(&mut session, now, &mut stage.pending);
        }
        let mut pending = std::mem::take(&mut stage.pending);
        self.flush(&mut pending);
        stage.pending = pending;
        let mut sm = lock(&self.samples);
        for a in &stage.out {
            sm.audio_encode.push_us(a.encode_us as i64);
        }
        Ok(())
    }

    /// Delivers one input event to the sink.
    fn deliver_input(&self, rec: InputRecord) {
        let mut sink = lock(&self.input_sink);
        match &mut *sink {
            InputSink::Scene => {
                let mut q = lock(&self.inputs);
                // The source applies these every frame; bound it in case it stalls.
                if q.len() < 4096 {
                    q.push(rec);
                }
            }
            InputSink::Queue => {
                let mut q = lock(&self.app_inputs);
                if q.len() >= 4096 {
                    q.pop_front();
                    self.counters.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                }
                q.push_back(rec);
            }
            InputSink::Callback(cb) => {
                let cb = cb.0.clone();
                drop(sink);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (cb)(&rec))).is_err() {
                    log::error!(
                        "host: the input callback panicked; event {} dropped",
                        rec.seq
                    );
                    return;
                }
                self.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
            }
            InputSink::Xtest(x) => {
                x.origin = *lock(&self.capture_origin);
                match replay_xtest(x, &rec.event) {
                    Ok(true) => {
                        self.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {
                        self.counters.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.counters.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                        if self.counters.inputs_dropped.load(Ordering::Relaxed) == 1 {
                            log::warn!("host: XTEST replay failed: {e}");
                        }
                    }
                }
            }
            InputSink::Discard => {}
        }
    }
}

/// Replays one event with XTEST. Ok(false): the event has no X equivalent (dropped).
fn replay_xtest(x: &XtestReplay, event: &InputEvent) -> Result<bool, untether_media::MediaError> {
    let done = match *event {
        InputEvent::Key { code, down } => match x11::sdl_keycode_to_keysym(code) {
            Some(sym) => x.key(sym, down)?,
            None => false,
        },
        InputEvent::PointerMotion {
            x: px,
            y: py,
            dx,
            dy,
        } => {
            match x.pointer {
                PointerMode::Absolute => x.motion_absolute(px, py)?,
                PointerMode::Relative => x.motion_relative(dx, dy)?,
            }
            true
        }
        InputEvent::MouseButton { button, down } => {
            // SDL numbers X1/X2 as 4/5; X uses 8/9 for them (4–7 are the wheel).
            let b = match button {
                4 => 8,
                5 => 9,
                b => b,
            };
            x.button(b, down)?;
            true
        }
        InputEvent::Wheel { dx, dy } => {
            x.wheel(dx, dy)?;
            true
        }
        InputEvent::Button { code, down, .. } => match x11::evdev_button_to_x(code) {
            Some(b) => {
                x.button(b, down)?;
                true
            }
            // Evdev key codes are X keycodes minus 8 on every evdev/XKB keyboard.
            None if code < 248 => x.keycode(code as u8 + 8, down)?,
            None => false,
        },
        InputEvent::Axis {
            relative: true,
            code,
            value,
            ..
        } => {
            match code {
                0 => x.motion_relative(value, 0)?, // REL_X
                1 => x.motion_relative(0, value)?, // REL_Y
                6 => x.wheel(value, 0)?,           // REL_HWHEEL
                8 => x.wheel(0, value)?,           // REL_WHEEL
                _ => return Ok(false),
            }
            true
        }
        InputEvent::Text(t) => {
            // Type each character whose keysym the keyboard map has (Latin-1 keysyms equal
            // the code point; others are 0x0100_0000 + code point).
            let mut any = false;
            for c in t.as_str().chars() {
                let cp = c as u32;
                let sym = if cp <= 0xFF { cp } else { 0x0100_0000 + cp };
                if x.key(sym, true)? {
                    x.key(sym, false)?;
                    any = true;
                }
            }
            any
        }
        InputEvent::Axis { .. } | InputEvent::HeadPose { .. } => false,
    };
    x.flush()?;
    Ok(done)
}

/// The sequence number of input records made from the latest-wins state channel (pointer
/// position, head pose) for sinks other than the scene: they are not numbered by the reliable
/// channel.
pub const STATE_SEQ: u32 = u32::MAX;

/// The host's side of identities and pairing: the state directory it polls, and what it last
/// read from there.
struct Pairing {
    dir: Option<StateDir>,
    access: Access,
    stamp: [Option<std::time::SystemTime>; 3],
    next_poll_us: Micros,
    allowed: std::collections::HashSet<PublicKey>,
    revoked: std::collections::HashSet<PublicKey>,
    /// The PIN the session accepts (to show the user).
    pin: Option<String>,
    /// Fingerprints of clients that paired with a PIN during this run.
    paired: Vec<String>,
}

/// How often the state directory is polled for changes.
const PAIRING_POLL_US: Micros = 1_000_000;

/// Loads the host's identity and allowlist, and prepares the pairing state.
fn host_security(
    host: &HostToml,
    trust: &HostTrust,
    cfg: &mut HostConfig,
) -> Result<Pairing, HostError> {
    let mut pairing = Pairing {
        dir: None,
        access: Access::Allowlist,
        stamp: [None; 3],
        next_poll_us: 0,
        allowed: Default::default(),
        revoked: Default::default(),
        pin: None,
        paired: Vec::new(),
    };
    match trust {
        HostTrust::Stored => {
            let access = host.access()?;
            let explicit =
                (!host.state_dir.is_empty()).then(|| std::path::Path::new(&host.state_dir));
            let dir = StateDir::resolve(explicit)?;
            cfg.identity = dir.load_or_create_identity(Role::Host)?;
            pairing.access = access;
            for e in dir.allowed()? {
                if let Some(k) = e.public_key() {
                    pairing.allowed.insert(k);
                }
            }
            for e in dir.revoked()? {
                if let Some(k) = e.public_key() {
                    pairing.revoked.insert(k);
                }
            }
            cfg.allowed_clients = pairing.allowed.iter().copied().collect();
            cfg.revoked_clients = pairing.revoked.iter().copied().collect();
            if access == Access::Pin {
                // The session picks it up from the file at the first poll.
                let pin = dir.create_pin(host.pin_ttl_s, 3)?;
                pairing.pin = Some(pin.pin);
            }
            pairing.dir = Some(dir);
        }
        HostTrust::Memory {
            identity,
            access,
            allowed,
        } => {
            cfg.identity = identity.clone();
            cfg.allowed_clients = allowed.clone();
            pairing.access = *access;
            pairing.allowed = allowed.iter().copied().collect();
            if *access == Access::Pin {
                pairing.pin = Some(crate::identity::random_pin());
            }
        }
    }
    cfg.access = match pairing.access {
        Access::Open => AccessPolicy::Open,
        Access::Allowlist | Access::Pin => AccessPolicy::Allowlist,
    };
    Ok(pairing)
}

impl Pairing {
    /// Re-reads the allowlist, the revoked list and the PIN file if they changed.
    fn poll(&mut self, session: &mut HostSession, now: Micros) {
        if now < self.next_poll_us {
            return;
        }
        self.next_poll_us = now + PAIRING_POLL_US;
        let Some(dir) = self.dir.clone() else {
            return;
        };
        let stamp = dir.stamp();
        if stamp == self.stamp {
            return;
        }
        let old = std::mem::replace(&mut self.stamp, stamp);
        if stamp[0] != old[0] || stamp[1] != old[1] {
            let keys = |r: Result<Vec<crate::identity::KeyEntry>, IdentityError>| {
                r.map(|v| {
                    v.iter()
                        .filter_map(|e| e.public_key())
                        .collect::<std::collections::HashSet<_>>()
                })
            };
            match (keys(dir.allowed()), keys(dir.revoked())) {
                (Ok(allowed), Ok(revoked)) => {
                    for k in allowed.difference(&self.allowed) {
                        log::info!("host: {} is now allowed", fingerprint(k));
                        session.allow_client(*k);
                    }
                    for k in self.allowed.difference(&allowed) {
                        // Taken off the allowlist: refused from now on (a connected client
                        // is disconnected).
                        log::info!("host: {} is no longer allowed", fingerprint(k));
                        session.revoke_client(now, *k);
                    }
                    for k in revoked.difference(&self.revoked) {
                        if !allowed.contains(k) {
                            session.revoke_client(now, *k);
                        }
                    }
                    self.allowed = allowed;
                    self.revoked = revoked;
                }
                (Err(e), _) | (_, Err(e)) => {
                    log::warn!("host: cannot re-read the allowlist: {e}; keeping the old one")
                }
            }
        }
        if stamp[2] != old[2] {
            match dir.current_pin() {
                Ok(Some(pf)) => {
                    let same = session
                        .pin()
                        .is_some_and(|p| p.pin == pf.pin && p.attempts_left == pf.attempts_left);
                    if !same {
                        let ttl = pf.expires.saturating_sub(unix_now());
                        session.set_pin(Some(PairingPin {
                            pin: pf.pin.clone(),
                            expires_us: now + ttl * 1_000_000,
                            attempts_left: pf.attempts_left,
                        }));
                        log::info!("host: a pairing PIN is active for {ttl} s");
                    }
                    self.pin = Some(pf.pin);
                }
                Ok(None) => {
                    if session.pin().is_some() {
                        session.set_pin(None);
                    }
                    self.pin = None;
                }
                Err(e) => log::warn!("host: cannot read the pairing PIN: {e}"),
            }
        }
    }

    /// Persists what the session reports (access requests, PIN pairings).
    fn on_event(&mut self, s: &Shared, session: &mut HostSession, e: PairingEvent) {
        match e {
            PairingEvent::AccessRequested(r) => {
                s.note(format!(
                    "access request from {:?} ({}) at {}: approve with `untether pair approve {}`",
                    r.name, r.fingerprint, r.addr, r.fingerprint
                ));
                if let Some(dir) = &self.dir {
                    if let Err(e) = dir.record_request(&r.key, &r.name, &r.addr.to_string()) {
                        log::warn!("host: cannot record the access request: {e}");
                    }
                }
            }
            PairingEvent::Paired {
                key,
                fingerprint,
                name,
            } => {
                s.note(format!("paired with {name:?} ({fingerprint}) by PIN"));
                self.paired.push(fingerprint);
                self.pin = None;
                self.allowed.insert(key);
                session.set_pin(None);
                if let Some(dir) = &self.dir {
                    if let Err(e) = dir.allow(&key, &name) {
                        log::warn!("host: cannot add the paired client to the allowlist: {e}");
                    }
                    if let Err(e) = dir.clear_pin() {
                        log::warn!("host: cannot remove the used PIN: {e}");
                    }
                }
            }
            PairingEvent::PinFailed {
                addr,
                attempts_left,
            } => {
                s.note(format!(
                    "wrong PIN from {addr} ({attempts_left} attempts left)"
                ));
                if let Some(dir) = &self.dir {
                    let r = if attempts_left == 0 {
                        dir.clear_pin()
                    } else {
                        dir.update_pin_attempts(attempts_left)
                    };
                    if let Err(e) = r {
                        log::warn!("host: cannot update the PIN file: {e}");
                    }
                }
                if attempts_left == 0 {
                    self.pin = None;
                }
            }
        }
    }
}

/// The scene's reaction to the latest-wins state: the pointer position (as motion since the
/// last position seen) and the head pose.
#[derive(Default)]
struct StateApplied {
    pointer: Option<(u32, i32, i32)>,
    head: Option<u32>,
}

impl StateApplied {
    /// Input events for what changed since the last call (pointer first).
    fn changes(
        &mut self,
        pointer: Option<StateEntry>,
        head: Option<StateEntry>,
    ) -> Vec<InputEvent> {
        let mut out = Vec::new();
        if let Some(StateEntry {
            value: StateValue::Pointer { x, y },
            pid,
            ..
        }) = pointer
        {
            if self.pointer.is_none_or(|(p, _, _)| p != pid) {
                let (dx, dy) = match self.pointer {
                    Some((_, ox, oy)) => (x.wrapping_sub(ox), y.wrapping_sub(oy)),
                    None => (0, 0),
                };
                self.pointer = Some((pid, x, y));
                out.push(InputEvent::PointerMotion { x, y, dx, dy });
            }
        }
        if let Some(e) = head {
            if self.head != Some(e.pid) {
                self.head = Some(e.pid);
                if let Some((yaw, pitch, roll)) = angles(&e.value) {
                    out.push(InputEvent::HeadPose { yaw, pitch, roll });
                }
            }
        }
        out
    }
}

/// Yaw, pitch, roll in degrees of a head pose value.
fn angles(v: &StateValue) -> Option<(f32, f32, f32)> {
    match *v {
        StateValue::Angles { yaw, pitch, roll } => Some((yaw, pitch, roll)),
        StateValue::Pose { orientation, .. } => {
            // Quaternion (x, y, z, w), y up, -z forward: yaw about y, pitch about x.
            let [x, y, z, w] = orientation;
            let yaw = (2.0 * (w * y + x * z)).atan2(1.0 - 2.0 * (x * x + y * y));
            let pitch = (2.0 * (w * x - y * z)).clamp(-1.0, 1.0).asin();
            let roll = (2.0 * (w * z + x * y)).atan2(1.0 - 2.0 * (x * x + z * z));
            Some((yaw.to_degrees(), pitch.to_degrees(), roll.to_degrees()))
        }
        _ => None,
    }
}

/// A running host. Dropping it without [`Host::stop`] stops it too.
pub struct Host {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
    started_us: Micros,
    options: HostOptions,
    setup: HostSetup,
    /// The encoder configuration (for frame senders).
    encoder_cfg: EncoderConfig,
    sender_taken: AtomicBool,
    capture: Option<SdlAudioCapture>,
}

/// What the host measured.
#[derive(Clone, Debug, Default)]
pub struct HostSummary {
    pub duration_s: f64,
    pub captured: u64,
    pub encoded: u64,
    pub sent: u64,
    pub keyframes: u64,
    pub dropped: u64,
    pub inputs_applied: u64,
    /// Input events the sink could not apply (no X equivalent, a full queue).
    pub inputs_dropped: u64,
    /// Capture ticks skipped because nothing on screen changed.
    pub unchanged: u64,
    pub audio_packets: u64,
    pub bytes_sent: u64,
    pub packets_sent: u64,
    pub malformed_datagrams: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_ignored: u64,
    /// Frames sent in more than one paced batch (`network.pacing`; 0 when pacing is off).
    /// Their `send` stage includes the pacing (the `pace` stage: time slept between batches).
    pub paced_frames: u64,
    /// The pacing window at the configured frame rate, µs (0: pacing off).
    pub pacing_window_us: u64,
    pub stages: std::collections::BTreeMap<&'static str, Samples>,
    pub fatal: Option<String>,
    pub events: Vec<String>,
    /// The client's paths as the host saw them last (several with multipath).
    pub paths: Vec<untether_proto::PathStats>,
    /// Adaptive bitrate: encoder reconfigurations, and the target at the end (kbit/s).
    pub bitrate_changes: u64,
    pub final_bitrate_kbps: Option<u32>,
    /// Retransmission: data shards resent on the client's ShardNacks.
    pub shards_retransmitted: u64,
}

fn encoder_config(v: &VideoConfig, setup: &HostSetup, width: u32, height: u32) -> EncoderConfig {
    let mut params = setup.x264_params.clone();
    if setup.gop_frames > 0 {
        if !params.is_empty() {
            params.push(':');
        }
        params.push_str(&format!("keyint={0}:min-keyint={0}", setup.gop_frames));
    }
    EncoderConfig {
        width,
        height,
        fps: v.fps,
        bitrate_kbps: v.bitrate_kbps,
        preset: v.preset.clone(),
        threads: v.encoder_threads,
        conversion: v.path.conversion(),
        intra_refresh: setup.intra_refresh,
        x264_params: params,
    }
}

impl Host {
    /// Binds the socket, builds the scene and the encoder (so configuration errors surface
    /// here), and starts the threads: the built-in scene, no audio.
    pub fn start(options: HostOptions) -> Result<Host, HostError> {
        Self::start_with(options, HostSetup::default())
    }

    /// Like [`Host::start`], with a frame source, an input sink and audio chosen by `setup`.
    pub fn start_with(mut options: HostOptions, setup: HostSetup) -> Result<Host, HostError> {
        crate::config::validate_host(
            &options.video,
            &options.host,
            &options.network,
            &options.scene,
        )?;
        let bind: SocketAddr = options
            .host
            .bind
            .parse()
            .map_err(|_| HostError::BadBind(options.host.bind.clone()))?;
        // Open the capture first: its size is the stream's size.
        let capture = match &setup.source {
            SourceSpec::X11 { display, target } => {
                let cap = X11Capture::open(display.as_deref(), target)?;
                let (w, h) = cap.size();
                options.video.resolution = Resolution {
                    width: w,
                    height: h,
                };
                Some(cap)
            }
            _ => None,
        };
        let socket = UdpEndpoint::bind(bind)?;
        let local_addr = socket.local_addr()?;
        let v = options.video.clone();
        let encoder_cfg = encoder_config(&v, &setup, v.resolution.width, v.resolution.height);
        // Build the encoder now so a bad configuration fails here, not on a thread.
        let encoder = Encoder::new(encoder_cfg.clone())?;
        let params = SessionParams {
            width: v.resolution.width.min(u16::MAX as u32) as u16,
            height: v.resolution.height.min(u16::MAX as u32) as u16,
            fps: v.fps as u16,
            codec: v.codec(),
            bitrate_kbps: v.bitrate_kbps,
            max_datagram: options.network.max_datagram,
            keepalive_ms: options.network.keepalive_ms as u32,
            idle_timeout_ms: options.network.idle_timeout_ms as u32,
        };
        let pacing = options.network.pacing()?;
        let mut host_cfg = HostConfig::new(params);
        host_cfg.keyframe_cooldown_us = options.host.keyframe_cooldown_ms * 1000;
        host_cfg.fec = options.network.fec_policy()?;
        host_cfg.paths.scheduler = options.network.scheduler()?;
        host_cfg.retransmit = options.network.retransmit;
        if options.network.adaptive_bitrate {
            host_cfg.rate = Some(untether_proto::RateConfig::new(v.bitrate_kbps));
        }
        host_cfg.connection_id_seed = now_us() ^ (std::process::id() as u64) << 32;
        let pairing = host_security(&options.host, &setup.trust, &mut host_cfg)?;
        if pairing.access == Access::Open {
            log::warn!(
                "host: ACCESS IS OPEN: any client that can reach {bind} may connect and send input \
                 (use --access allowlist, the default, or --access pin)"
            );
        }
        log::info!(
            "host: identity {}, access {}{}",
            fingerprint(&host_cfg.identity.public),
            pairing.access.name(),
            pairing
                .dir
                .as_ref()
                .map(|d| format!(", state in {}", d.path().display()))
                .unwrap_or_default()
        );
        let input = match (&setup.input, &setup.source) {
            (InputSpec::Auto, SourceSpec::Scene) | (InputSpec::Scene, _) => InputSink::Scene,
            (InputSpec::Auto, SourceSpec::X11 { display, .. }) => InputSink::Xtest(Box::new(
                XtestReplay::open(display.as_deref(), (0, 0), PointerMode::Absolute)?,
            )),
            (InputSpec::Xtest { display, pointer }, src) => {
                let display = display.clone().or(match src {
                    SourceSpec::X11 { display, .. } => display.clone(),
                    _ => None,
                });
                InputSink::Xtest(Box::new(XtestReplay::open(
                    display.as_deref(),
                    (0, 0),
                    *pointer,
                )?))
            }
            (InputSpec::Auto, _) | (InputSpec::Queue, _) => InputSink::Queue,
            (InputSpec::Callback(cb), _) => InputSink::Callback(cb.clone()),
            (InputSpec::Discard, _) => InputSink::Discard,
        };
        let audio = match setup.audio {
            AudioSpec::None => None,
            _ => Some(AudioStage {
                encoder: AudioEncoder::new(setup.audio_bitrate_kbps)?,
                out: Vec::new(),
                pending: Vec::new(),
            }),
        };
        let state_to_sink = !matches!(input, InputSink::Scene);
        let mut session = HostSession::new(host_cfg);
        if let (None, Some(pin)) = (&pairing.dir, &pairing.pin) {
            session.set_pin(Some(PairingPin {
                pin: pin.clone(),
                expires_us: now_us() + options.host.pin_ttl_s * 1_000_000,
                attempts_left: 3,
            }));
        }
        let shared = Arc::new(Shared {
            session: Mutex::new(session),
            socket,
            stop: AtomicBool::new(false),
            frames: Slot::new(),
            spare: Mutex::new(Vec::new()),
            keyframe_wanted: AtomicBool::new(true),
            client_epoch: AtomicU64::new(0),
            inputs: Mutex::new(Vec::new()),
            app_inputs: Mutex::new(VecDeque::new()),
            input_sink: Mutex::new(input),
            capture_origin: Mutex::new(capture.as_ref().map_or((0, 0), |c| c.origin())),
            audio: Mutex::new(audio),
            source_ended: AtomicBool::new(false),
            counters: Counters::default(),
            samples: Mutex::new(HostSamples::default()),
            fatal: Mutex::new(None),
            events: Mutex::new(Vec::new()),
            last_paths: Mutex::new(Vec::new()),
            sent_frame_tap: setup.sent_frame_tap.clone(),
            pairing: Mutex::new(pairing),
            state_to_sink,
            pacing,
        });
        let fps = v.fps;
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(f)
                .map_err(HostError::Thread)
        };
        let s = shared.clone();
        threads.push(spawn("host-net", Box::new(move || network_loop(&s)))?);
        let stage = EncoderStage::new(encoder, encoder_cfg.clone());
        match &setup.source {
            SourceSpec::Scene => {
                let mut scene_cfg = SceneConfig::new(v.resolution.width, v.resolution.height);
                scene_cfg.spin_deg_per_s = options.scene.spin_deg_per_s;
                scene_cfg.walk_speed = options.scene.walk_speed;
                let scene = Scene::new(scene_cfg)?;
                let s = shared.clone();
                threads.push(spawn(
                    "host-source",
                    Box::new(move || source_loop(&s, scene, fps)),
                )?);
                let s = shared.clone();
                threads.push(spawn(
                    "host-encode",
                    Box::new(move || encode_loop(&s, stage)),
                )?);
            }
            SourceSpec::X11 { .. } => {
                let s = shared.clone();
                let cap = capture.ok_or_else(|| HostError::Usage("no X11 capture".into()))?;
                let stamp = setup.stamp;
                threads.push(spawn(
                    "host-x11",
                    Box::new(move || x11_loop(&s, cap, stage, fps, stamp)),
                )?);
            }
            SourceSpec::Pipe { path, format } => {
                let s = shared.clone();
                let (path, format, stamp) = (path.clone(), *format, setup.stamp);
                let (w, h) = (v.resolution.width, v.resolution.height);
                threads.push(spawn(
                    "host-pipe",
                    Box::new(move || pipe_loop(&s, &path, format, w, h, fps, stage, stamp)),
                )?);
            }
            SourceSpec::App => {
                if setup.encoder_thread {
                    let s = shared.clone();
                    threads.push(spawn(
                        "host-encode",
                        Box::new(move || encode_loop(&s, stage)),
                    )?);
                }
            }
        }
        let mut capture_dev = None;
        match &setup.audio {
            AudioSpec::Tone => {
                let s = shared.clone();
                threads.push(spawn("host-audio", Box::new(move || tone_loop(&s)))?);
            }
            AudioSpec::Capture { device } => {
                let s = shared.clone();
                let sink: audio::CaptureSink = Box::new(move |pcm: &[i16], pts: u64| {
                    if s.has_client() {
                        if let Err(e) = s.push_audio(pcm, audio::CHANNELS, pts) {
                            log::warn!("host: audio: {e}");
                        }
                    }
                });
                let dev = SdlAudioCapture::open(device.as_deref(), sink)?;
                shared.note(format!(
                    "capturing audio from {} ({})",
                    device.as_deref().unwrap_or("the default source"),
                    dev.driver
                ));
                capture_dev = Some(dev);
            }
            AudioSpec::None | AudioSpec::App => {}
        }
        Ok(Host {
            shared,
            threads,
            local_addr,
            started_us: now_us(),
            options,
            setup,
            encoder_cfg,
            sender_taken: AtomicBool::new(false),
            capture: capture_dev,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The host's long-term public key (its identity; clients pin it).
    pub fn public_key(&self) -> PublicKey {
        lock(&self.shared.session).host_key()
    }

    /// The host's fingerprint, as `untether pair` and clients show it.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.public_key())
    }

    /// The one-time PIN the host accepts now, if any (`access = "pin"`, or `untether pair
    /// --pin` while the host runs).
    pub fn pairing_pin(&self) -> Option<String> {
        lock(&self.shared.pairing).pin.clone()
    }

    /// The state directory (None with an in-memory identity).
    pub fn state_dir(&self) -> Option<std::path::PathBuf> {
        lock(&self.shared.pairing)
            .dir
            .as_ref()
            .map(|d| d.path().to_path_buf())
    }

    /// Fingerprints of the clients that paired with a PIN during this run.
    pub fn paired_clients(&self) -> Vec<String> {
        lock(&self.shared.pairing).paired.clone()
    }

    /// The newest value of a key of the latest-wins state channel
    /// ([`untether_proto::state::keys`]), e.g. the pointer position or the head pose.
    pub fn state_value(&self, key: untether_proto::StateKey) -> Option<StateEntry> {
        lock(&self.shared.session).state_value(key)
    }

    /// The options the host runs with (the resolution is the captured size for X11).
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    pub fn setup(&self) -> &HostSetup {
        &self.setup
    }

    /// The fatal error that stopped the host, if any.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.fatal).clone()
    }

    pub fn is_stopped(&self) -> bool {
        self.shared.stopped()
    }

    /// Whether a client is connected.
    pub fn has_client(&self) -> bool {
        self.shared.has_client()
    }

    /// Waits up to `timeout` for a client; true once one is connected.
    pub fn wait_for_client(&self, timeout: Duration) -> bool {
        let end = now_us() + timeout.as_micros() as u64;
        loop {
            if self.has_client() {
                return true;
            }
            if self.is_stopped() || now_us() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// True once a pipe source reached the end of its input (the host then says goodbye to
    /// the client and has nothing more to send).
    pub fn source_ended(&self) -> bool {
        self.shared.source_ended.load(Ordering::SeqCst)
    }

    /// A request to stop, e.g. from a signal handler thread.
    pub fn stop_flag(&self) -> impl Fn() + Send + Sync + 'static {
        let s = self.shared.clone();
        move || {
            s.stop.store(true, Ordering::SeqCst);
            s.frames.close();
        }
    }

    /// Publishes a frame of the application (app source with an encoder thread): it is copied
    /// into a pooled buffer and the encoder thread encodes the newest one (latest wins; a
    /// frame replaced before the encoder took it counts as dropped). Returns at once.
    pub fn publish(&self, picture: &InputPicture<'_>) -> Result<(), HostError> {
        if self.setup.source != SourceSpec::App || !self.setup.encoder_thread {
            return Err(HostError::Usage(
                "publish needs the app source with the encoder thread (synchronous mode uses a FrameSender)".into(),
            ));
        }
        if self.is_stopped() {
            return Err(HostError::Stopped(self.failure()));
        }
        picture.check()?;
        let t0 = now_us();
        let pixels = copy_picture(&self.shared, picture)?;
        let capture_us = now_us();
        self.shared
            .counters
            .captured
            .fetch_add(1, Ordering::Relaxed);
        let dur = (capture_us - t0) as u32;
        lock(&self.shared.samples).capture.push_us(dur as i64);
        if let Some(old) = self.shared.frames.put(CapturedFrame {
            pixels,
            capture_us,
            capture_dur_us: dur,
        }) {
            lock(&self.shared.spare).push(old.pixels);
        }
        Ok(())
    }

    /// The synchronous sender of an app host without an encoder thread: encodes and sends on
    /// the caller's thread. There is one per host.
    pub fn frame_sender(&self) -> Result<FrameSender, HostError> {
        if self.setup.source != SourceSpec::App || self.setup.encoder_thread {
            return Err(HostError::Usage(
                "a frame sender needs the app source without the encoder thread".into(),
            ));
        }
        if self.sender_taken.swap(true, Ordering::SeqCst) {
            return Err(HostError::Usage(
                "this host's frame sender was already taken".into(),
            ));
        }
        let encoder = Encoder::new(self.encoder_cfg.clone())?;
        Ok(FrameSender {
            shared: self.shared.clone(),
            stage: EncoderStage::new(encoder, self.encoder_cfg.clone()),
        })
    }

    /// The next input event for the application (input sink: queue).
    pub fn poll_input(&self) -> Option<InputRecord> {
        let rec = lock(&self.shared.app_inputs).pop_front();
        if rec.is_some() {
            self.shared
                .counters
                .inputs_applied
                .fetch_add(1, Ordering::Relaxed);
        }
        rec
    }

    /// Pushes interleaved 48 kHz PCM (`channels` 1 or 2) whose first sample was produced at
    /// `pts_us` (host clock, [`crate::clock::now_us`]); every complete 10 ms is encoded and
    /// sent at once. Without a client the audio is dropped.
    pub fn push_audio(
        &self,
        pcm: &[i16],
        channels: usize,
        pts_us: Micros,
    ) -> Result<(), HostError> {
        if self.is_stopped() {
            return Err(HostError::Stopped(self.failure()));
        }
        if !self.has_client() {
            return Ok(());
        }
        self.shared.push_audio(pcm, channels, pts_us)
    }

    /// What the host has measured so far.
    pub fn summary(&self) -> HostSummary {
        let s = &self.shared;
        let st = lock(&s.session).stats();
        let c = &s.counters;
        let samples = lock(&s.samples);
        let mut stages = std::collections::BTreeMap::new();
        stages.insert("capture", samples.capture.clone());
        stages.insert("queue", samples.queue.clone());
        stages.insert("convert", samples.convert.clone());
        stages.insert("encode", samples.encode.clone());
        stages.insert("send", samples.send.clone());
        stages.insert("frame_kbytes", samples.frame_bytes.clone());
        if !samples.audio_encode.is_empty() {
            stages.insert("audio_encode", samples.audio_encode.clone());
        }
        if !samples.sync_blocked.is_empty() {
            stages.insert("sync_blocked", samples.sync_blocked.clone());
        }
        if !samples.pace.is_empty() {
            stages.insert("pace", samples.pace.clone());
        }
        HostSummary {
            duration_s: (now_us() - self.started_us) as f64 / 1e6,
            captured: c.captured.load(Ordering::Relaxed),
            encoded: c.encoded.load(Ordering::Relaxed),
            sent: c.sent.load(Ordering::Relaxed),
            keyframes: c.keyframes.load(Ordering::Relaxed),
            dropped: s.frames.replaced(),
            inputs_applied: c.inputs_applied.load(Ordering::Relaxed),
            inputs_dropped: c.inputs_dropped.load(Ordering::Relaxed),
            unchanged: c.unchanged.load(Ordering::Relaxed),
            audio_packets: c.audio_packets.load(Ordering::Relaxed),
            bytes_sent: st.bytes_sent,
            packets_sent: st.datagrams_sent,
            malformed_datagrams: st.malformed_datagrams + st.unknown_connection,
            keyframe_requests_received: st.keyframe_requests_received,
            keyframe_requests_ignored: st.keyframe_requests_ignored_cooldown,
            paced_frames: c.paced_frames.load(Ordering::Relaxed),
            pacing_window_us: s.pacing.window_us(self.options.video.fps),
            stages,
            fatal: lock(&s.fatal).clone(),
            events: lock(&s.events).clone(),
            paths: lock(&s.last_paths).clone(),
            bitrate_changes: c.bitrate_changes.load(Ordering::Relaxed),
            final_bitrate_kbps: Some(c.target_kbps.load(Ordering::Relaxed)).filter(|&k| k != 0),
            shards_retransmitted: st.shards_retransmitted,
        }
    }

    /// Stops the threads and returns the final summary.
    pub fn stop(mut self) -> HostSummary {
        self.shutdown();
        self.summary()
    }

    fn shutdown(&mut self) {
        // Stop the capture device first: its callback sends through the session.
        self.capture = None;
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.frames.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Copies a borrowed picture into a pooled buffer of the same layout.
fn copy_picture(s: &Shared, picture: &InputPicture<'_>) -> Result<Pixels, HostError> {
    let (w, h) = picture.size();
    let mut spare = lock(&s.spare);
    let pos = spare.iter().position(|p| match (p, picture) {
        (Pixels::Bgra(f), InputPicture::Bgra { .. }) => (f.width, f.height) == (w, h),
        (Pixels::I420(f), InputPicture::I420 { .. }) => (f.width, f.height) == (w, h),
        _ => false,
    });
    let recycled = pos.map(|i| spare.swap_remove(i));
    drop(spare);
    match *picture {
        InputPicture::Bgra { data, stride, .. } => {
            let mut f = match recycled {
                Some(Pixels::Bgra(f)) => f,
                _ => BgraFrame::new(w, h)?,
            };
            let row = w as usize * 4;
            for y in 0..h as usize {
                f.data[y * f.stride..y * f.stride + row]
                    .copy_from_slice(&data[y * stride..y * stride + row]);
            }
            Ok(Pixels::Bgra(f))
        }
        InputPicture::I420 { planes, .. } => {
            let mut f = match recycled {
                Some(Pixels::I420(f)) => f,
                _ => I420Frame::new(w, h),
            };
            let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
            let dims = [(w as usize, h as usize), (w2, h2), (w2, h2)];
            let dsts = [&mut f.y, &mut f.u, &mut f.v];
            for ((dst, (src, stride)), (cw, ch)) in dsts.into_iter().zip(planes).zip(dims) {
                for y in 0..ch {
                    dst[y * cw..(y + 1) * cw].copy_from_slice(&src[y * stride..y * stride + cw]);
                }
            }
            Ok(Pixels::I420(f))
        }
    }
}

/// What a synchronous send did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendInfo {
    /// False when no client is connected (nothing was encoded).
    pub sent: bool,
    /// The protocol frame number (per client, from 0).
    pub frame_number: u32,
    pub keyframe: bool,
    pub bytes: usize,
    /// Time spent in the call: conversion, encoding, packetizing and sending (including the
    /// send pacing of `network.pacing`, if on), µs.
    pub blocked_us: u64,
}

/// Encodes and sends frames on the caller's thread (OpenUVR's synchronous mode): no encoder
/// thread, no hand-over; the network thread still receives control and input.
pub struct FrameSender {
    shared: Arc<Shared>,
    stage: EncoderStage,
}

impl FrameSender {
    /// Encodes `picture` and sends it to the client. `capture_us` is when the application
    /// finished rendering it (host clock, [`crate::clock::now_us`]; None: now).
    pub fn send(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Option<Micros>,
    ) -> Result<SendInfo, HostError> {
        let t0 = now_us();
        let s = &*self.shared;
        if s.stopped() {
            return Err(HostError::Stopped(lock(&s.fatal).clone()));
        }
        if !s.has_client() {
            return Ok(SendInfo::default());
        }
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let capture_us = capture_us.unwrap_or(t0);
        let mut info = self.stage.send(s, picture, capture_us, 0)?;
        info.blocked_us = now_us() - t0;
        lock(&s.samples)
            .sync_blocked
            .push_us(info.blocked_us as i64);
        Ok(info)
    }

    /// Asks for a keyframe at the next frame.
    pub fn request_keyframe(&self) {
        self.shared.keyframe_wanted.store(true, Ordering::SeqCst);
    }
}

/// The encoder, its frame numbering and send buffers: used by the encoder thread, the capture
/// threads and frame senders alike.
struct EncoderStage {
    encoder: Encoder,
    cfg: EncoderConfig,
    frame_number: u32,
    epoch: u64,
    pending: Vec<Transmit>,
}

impl EncoderStage {
    fn new(encoder: Encoder, cfg: EncoderConfig) -> Self {
        EncoderStage {
            encoder,
            cfg,
            frame_number: 0,
            epoch: u64::MAX,
            pending: Vec::new(),
        }
    }

    /// Whether the next frame must be sent even if nothing changed (a new client, or a
    /// keyframe was asked for).
    fn must_send(&self, s: &Shared) -> bool {
        self.epoch != s.client_epoch.load(Ordering::SeqCst)
            || s.keyframe_wanted.load(Ordering::SeqCst)
    }

    fn send(
        &mut self,
        s: &Shared,
        picture: &InputPicture<'_>,
        capture_us: Micros,
        capture_dur_us: u32,
    ) -> Result<SendInfo, HostError> {
        let e = s.client_epoch.load(Ordering::SeqCst);
        if e != self.epoch {
            // A new client: its stream starts at frame 0 with a keyframe.
            self.epoch = e;
            self.frame_number = 0;
            s.keyframe_wanted.store(true, Ordering::SeqCst);
        }
        let (w, h) = picture.size();
        if (w, h) != (self.cfg.width, self.cfg.height) {
            // The source changed size: a new encoder, starting with a keyframe (the client's
            // decoder follows the new SPS).
            let mut cfg = self.cfg.clone();
            cfg.width = w;
            cfg.height = h;
            self.encoder = Encoder::new(cfg.clone())?;
            self.cfg = cfg;
            s.keyframe_wanted.store(true, Ordering::SeqCst);
            s.note(format!("the source is now {w}x{h}: new encoder, keyframe"));
        }
        let target = s.counters.target_kbps.load(Ordering::Relaxed);
        if target != 0 && target != self.encoder.config().bitrate_kbps {
            // Adaptive bitrate: x264 reconfigures its rate control, no keyframe.
            self.encoder.set_bitrate(target)?;
            s.counters.bitrate_changes.fetch_add(1, Ordering::Relaxed);
        }
        let start = now_us();
        let force = s.keyframe_wanted.swap(false, Ordering::SeqCst);
        let encoded = self.encoder.encode_picture(picture, force)?;
        s.counters.encoded.fetch_add(1, Ordering::Relaxed);
        if encoded.keyframe {
            s.counters.keyframes.fetch_add(1, Ordering::Relaxed);
        }
        let frame_number = self.frame_number;
        let send_start = now_us();
        let shards = {
            let mut session = lock(&s.session);
            let r = session.send_frame(
                send_start,
                frame_number,
                capture_us,
                encoded.keyframe,
                &encoded.data,
            );
            Shared::drain_transmits(&mut session, send_start, &mut self.pending);
            r
        };
        if shards.is_err() {
            // The client left between capture and send.
            self.pending.clear();
            return Ok(SendInfo::default());
        }
        // Paced (network.pacing): this thread sleeps between batches, at most the pacing
        // window, so `send` below includes the pacing.
        let window_us = s.pacing.window_us(self.cfg.fps);
        let (batches, slept_us) = s.flush_paced(&mut self.pending, s.pacing.batch, window_us);
        let send_done = now_us();
        s.counters.sent.fetch_add(1, Ordering::Relaxed);
        if batches > 1 {
            s.counters.paced_frames.fetch_add(1, Ordering::Relaxed);
        }
        let c = &s.counters;
        let timing = FrameTiming {
            frame_number,
            capture_dur_us,
            convert_us: encoded.convert_us as u32,
            encode_us: encoded.encode_us as u32,
            send_us: (send_done - send_start) as u32,
            send_done_us: send_done,
            frame_bytes: encoded.data.len() as u32,
            captured: c.captured.load(Ordering::Relaxed) as u32,
            encoded: c.encoded.load(Ordering::Relaxed) as u32,
            dropped: s.frames.replaced() as u32,
        };
        {
            let mut session = lock(&s.session);
            session.send_frame_timing(send_done, timing);
            Shared::drain_transmits(&mut session, send_done, &mut self.pending);
        }
        s.flush(&mut self.pending);
        {
            let mut sm = lock(&s.samples);
            sm.queue.push_us(start as i64 - capture_us as i64);
            sm.convert.push_us(encoded.convert_us as i64);
            sm.encode.push_us(encoded.encode_us as i64);
            sm.send.push_us((send_done - send_start) as i64);
            if window_us > 0 {
                sm.pace.push_us(slept_us as i64);
            }
            sm.frame_bytes.push(encoded.data.len() as f64 / 1000.0);
        }
        self.frame_number = self.frame_number.wrapping_add(1);
        Ok(SendInfo {
            sent: true,
            frame_number,
            keyframe: encoded.keyframe,
            bytes: encoded.data.len(),
            blocked_us: 0,
        })
    }
}

/// SDL keycodes of the keys the test scene walks with.
pub mod keys {
    pub const W: u32 = b'w' as u32;
    pub const A: u32 = b'a' as u32;
    pub const S: u32 = b's' as u32;
    pub const D: u32 = b'd' as u32;
    pub const RIGHT: u32 = 0x4000_004F;
    pub const LEFT: u32 = 0x4000_0050;
    pub const DOWN: u32 = 0x4000_0051;
    pub const UP: u32 = 0x4000_0052;
}

/// How the test scene reacts to an input event (None: the scene ignores it).
pub fn scene_input(event: &InputEvent) -> Option<SceneInput> {
    match *event {
        InputEvent::PointerMotion { dx, dy, .. } => Some(SceneInput::PointerDelta {
            dx: dx as f32,
            dy: dy as f32,
        }),
        InputEvent::Key { code, down } => {
            let key = match code {
                keys::W | keys::UP => SceneKey::Forward,
                keys::S | keys::DOWN => SceneKey::Back,
                keys::A | keys::LEFT => SceneKey::Left,
                keys::D | keys::RIGHT => SceneKey::Right,
                _ => return None,
            };
            Some(SceneInput::Key { key, down })
        }
        InputEvent::HeadPose { yaw, pitch, .. } => Some(SceneInput::HeadPose {
            yaw_deg: yaw,
            pitch_deg: pitch,
        }),
        // A relative device (mouse) looks around like the window's pointer.
        InputEvent::Axis {
            relative: true,
            code: c @ (0 | 1),
            value,
            ..
        } => Some(SceneInput::PointerDelta {
            dx: if c == 0 { value as f32 } else { 0.0 },
            dy: if c == 1 { value as f32 } else { 0.0 },
        }),
        InputEvent::MouseButton { .. }
        | InputEvent::Wheel { .. }
        | InputEvent::Button { .. }
        | InputEvent::Axis { .. }
        | InputEvent::Text(_) => None,
    }
}

fn source_loop(s: &Shared, mut scene: Scene, fps: u32) {
    let interval = 1_000_000 / fps.max(1) as u64;
    let (w, h) = (scene.config().width, scene.config().height);
    let start = now_us();
    let mut tick: u64 = 0;
    let mut frame_number: u32 = 0;
    // Stamped into each frame: how many input events the scene has applied (the client's
    // reliable channel numbers events 0, 1, 2, … so "applied > seq" means "seq is reflected").
    let mut inputs_applied: u32 = 0;
    let mut state = StateApplied::default();
    let mut epoch = s.client_epoch.load(Ordering::SeqCst);
    while !s.stop.load(Ordering::SeqCst) {
        if lock(&s.session).client().is_none() {
            std::thread::sleep(Duration::from_millis(10));
            tick = (now_us() - start) / interval + 1;
            continue;
        }
        let e = s.client_epoch.load(Ordering::SeqCst);
        if e != epoch {
            epoch = e;
            inputs_applied = 0;
            state = StateApplied::default();
        }
        let deadline = start + tick * interval;
        sleep_until(deadline);
        let now = now_us();
        // Fell behind by more than a frame (a stall): skip the missed ticks, don't burst.
        tick = if now > deadline + interval {
            (now - start) / interval + 1
        } else {
            tick + 1
        };
        // The latest-wins state first (pointer position, head pose), then the reliable
        // channel's events in order.
        let changed = {
            let session = lock(&s.session);
            state.changes(
                session.state_value(state_keys::POINTER),
                session.state_value(state_keys::HEAD_POSE),
            )
        };
        for event in changed {
            if let Some(input) = scene_input(&event) {
                scene.apply_input(input);
                s.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
            }
        }
        for rec in lock(&s.inputs).drain(..) {
            if let Some(input) = scene_input(&rec.event) {
                scene.apply_input(input);
            }
            inputs_applied = rec.seq.wrapping_add(1);
            s.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
        }
        let mut pixels = match lock(&s.spare).pop() {
            Some(Pixels::Bgra(p)) => p,
            _ => match BgraFrame::new(w, h) {
                Ok(p) => p,
                Err(e) => return s.fail(format!("frame buffer: {e}")),
            },
        };
        let t0 = now_us();
        scene.render((t0 - start) as f64 / 1e6, &mut pixels);
        let capture_us = now_us();
        stamp::write_bgra(
            &mut pixels,
            &Stamp {
                frame_number,
                capture_us,
                input_seq: inputs_applied,
            },
        );
        frame_number = frame_number.wrapping_add(1);
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let capture_dur_us = (capture_us - t0) as u32;
        lock(&s.samples).capture.push_us(capture_dur_us as i64);
        if let Some(old) = s.frames.put(CapturedFrame {
            pixels: Pixels::Bgra(pixels),
            capture_us,
            capture_dur_us,
        }) {
            lock(&s.spare).push(old.pixels);
        }
    }
}

fn encode_loop(s: &Shared, mut stage: EncoderStage) {
    while !s.stop.load(Ordering::SeqCst) {
        let Some(frame) = s.frames.take(Duration::from_millis(50)) else {
            continue;
        };
        let r = stage.send(
            s,
            &frame.pixels.picture(),
            frame.capture_us,
            frame.capture_dur_us,
        );
        if let (Ok(_), Some(tap)) = (&r, &s.sent_frame_tap) {
            (tap.0)(&frame.pixels.picture());
        }
        lock(&s.spare).push(frame.pixels);
        if let Err(e) = r {
            return s.fail(format!("encoder: {e}"));
        }
    }
}

/// Waits for a client; false when the host stops first.
fn wait_client(s: &Shared) -> bool {
    while !s.stopped() {
        if s.has_client() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn x11_loop(
    s: &Shared,
    mut cap: X11Capture,
    mut stage: EncoderStage,
    fps: u32,
    stamp_frames: bool,
) {
    let interval = 1_000_000 / fps.max(1) as u64;
    let start = now_us();
    let mut tick: u64 = 0;
    let mut frame_number: u32 = 0;
    let mut failures = 0u32;
    s.note(format!(
        "capturing X display {:?} window 0x{:x} ({}x{}), {}",
        cap.display(),
        cap.window(),
        cap.size().0,
        cap.size().1,
        if cap.tracks_damage() {
            "grabbing only when DAMAGE reports a change"
        } else {
            "no DAMAGE: grabbing every tick"
        }
    ));
    while !s.stopped() {
        if !s.has_client() {
            std::thread::sleep(Duration::from_millis(10));
            tick = (now_us() - start) / interval + 1;
            continue;
        }
        let deadline = start + tick * interval;
        sleep_until(deadline);
        let now = now_us();
        tick = if now > deadline + interval {
            (now - start) / interval + 1
        } else {
            tick + 1
        };
        let changes = match cap.poll_changes() {
            Ok(c) => c,
            Err(e) => return s.fail(format!("X11 capture: {e}")),
        };
        if changes.resized {
            *lock(&s.capture_origin) = cap.origin();
        }
        if !changes.damaged && !stage.must_send(s) {
            s.counters.unchanged.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let t0 = now_us();
        let (w, h) = cap.size();
        let pixels = match cap.grab() {
            Ok(p) => p,
            Err(e) => {
                s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                if failures > 100 {
                    return s.fail(format!("X11 capture keeps failing: {e}"));
                }
                log::debug!("host: {e}");
                continue;
            }
        };
        failures = 0;
        let capture_us = now_us();
        if stamp_frames {
            stamp::write_bgra_raw(
                pixels,
                w as usize * 4,
                w,
                h,
                &Stamp {
                    frame_number,
                    capture_us,
                    input_seq: s.counters.inputs_applied.load(Ordering::Relaxed) as u32,
                },
            );
        }
        frame_number = frame_number.wrapping_add(1);
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let dur = (capture_us - t0) as u32;
        lock(&s.samples).capture.push_us(dur as i64);
        let picture = InputPicture::Bgra {
            width: w,
            height: h,
            data: pixels,
            stride: w as usize * 4,
        };
        if let Err(e) = stage.send(s, &picture, capture_us, dur) {
            return s.fail(format!("encoder: {e}"));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn pipe_loop(
    s: &Shared,
    path: &str,
    format: PipeFormat,
    width: u32,
    height: u32,
    fps: u32,
    mut stage: EncoderStage,
    stamp_frames: bool,
) {
    // Wait for a client before opening: a producer writing into a pipe is held back until
    // someone watches, so no frame is lost before the first client.
    if !wait_client(s) {
        return;
    }
    let mut reader = match PipeReader::open(path, format, width, height) {
        Ok(r) => r,
        Err(e) => return s.fail(format!("pipe source: {e}")),
    };
    s.note(format!(
        "reading {width}x{height} {format} frames from {path}"
    ));
    let interval = 1_000_000 / fps.max(1) as u64;
    let paced = reader.is_regular_file();
    let start = now_us();
    let mut buf = Vec::new();
    let mut n: u64 = 0;
    while !s.stopped() {
        if !wait_client(s) {
            return;
        }
        if paced {
            sleep_until(start + n * interval);
        }
        match reader.read_frame(&mut buf) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return s.fail(format!("pipe source: {e}")),
        }
        let capture_us = now_us();
        let (w, h) = (width as usize, height as usize);
        if stamp_frames {
            let st = Stamp {
                frame_number: n as u32,
                capture_us,
                input_seq: 0,
            };
            match format {
                PipeFormat::Bgra => stamp::write_bgra_raw(&mut buf, w * 4, width, height, &st),
                PipeFormat::I420 => stamp::write_luma(&mut buf[..w * h], w, width, height, &st),
            }
        }
        n += 1;
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        // Reading includes waiting for the writer: a pipe frame costs nothing to "capture".
        lock(&s.samples).capture.push_us(0);
        let picture = match format {
            PipeFormat::Bgra => InputPicture::Bgra {
                width,
                height,
                data: &buf,
                stride: w * 4,
            },
            PipeFormat::I420 => {
                let (w2, h2) = (w.div_ceil(2), h.div_ceil(2));
                let (y, rest) = buf.split_at(w * h);
                let (u, v) = rest.split_at(w2 * h2);
                InputPicture::I420 {
                    width,
                    height,
                    planes: [(y, w), (u, w2), (v, w2)],
                }
            }
        };
        if let Err(e) = stage.send(s, &picture, capture_us, 0) {
            return s.fail(format!("encoder: {e}"));
        }
    }
    // End of input: say goodbye so the client ends too.
    s.note(format!("{path}: end of input after {n} frames"));
    s.source_ended.store(true, Ordering::SeqCst);
    let now = now_us();
    let mut pending = Vec::new();
    {
        let mut session = lock(&s.session);
        session.close(now);
        Shared::drain_transmits(&mut session, now, &mut pending);
    }
    s.flush(&mut pending);
}

/// The test tone, produced in real time like a capture device would: every 10 ms, the 10 ms
/// that just ended.
fn tone_loop(s: &Shared) {
    audio::raise_thread_priority();
    let tone = Tone::default();
    let mut pcm = vec![0i16; audio::FRAME_SAMPLES * audio::CHANNELS];
    let frame = audio::FRAME_US;
    let mut pts = now_us() / frame * frame;
    while !s.stopped() {
        if !s.has_client() {
            std::thread::sleep(Duration::from_millis(10));
            pts = now_us() / frame * frame;
            continue;
        }
        sleep_until(pts + frame);
        if now_us() > pts + 10 * frame {
            // A stall: skip ahead instead of bursting.
            pts = now_us() / frame * frame - frame;
        }
        tone.fill(pts, &mut pcm);
        if let Err(e) = s.push_audio(&pcm, audio::CHANNELS, pts) {
            return s.fail(format!("audio: {e}"));
        }
        pts += frame;
    }
}

fn network_loop(s: &Shared) {
    let mut buf = vec![0u8; untether_net::MAX_DATAGRAM];
    let mut pending = Vec::new();
    let mut events = Vec::new();
    let mut state = StateApplied::default();
    let mut next_paths_us = 0;
    while !s.stop.load(Ordering::SeqCst) {
        let wake = lock(&s.session).poll_timeout();
        let now = now_us();
        let wait = wake.map_or(100_000, |t| t.saturating_sub(now)).min(100_000);
        let received = match s.socket.recv(&mut buf, Duration::from_micros(wait)) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("host: receive failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let now = now_us();
        {
            let mut session = lock(&s.session);
            let mut pairing = lock(&s.pairing);
            pairing.poll(&mut session, now);
            if let Received::Datagram(n, from) = received {
                session.handle_datagram(now, from, &buf[..n]);
            }
            if session.poll_timeout().is_some_and(|t| t <= now) {
                session.handle_timeout(now);
            }
            while let Some(e) = session.poll_pairing_event() {
                pairing.on_event(s, &mut session, e);
            }
            drop(pairing);
            while let Some(ev) = session.poll_event() {
                events.push(ev);
            }
            if s.state_to_sink && session.client().is_some() {
                // The latest-wins state (pointer, head pose) goes to the sink before the
                // reliable events of the same datagrams (a click lands where the pointer is).
                let changed = state.changes(
                    session.state_value(state_keys::POINTER),
                    session.state_value(state_keys::HEAD_POSE),
                );
                for (i, event) in changed.into_iter().enumerate() {
                    events.insert(
                        i,
                        HostEvent::Input(InputRecord {
                            seq: STATE_SEQ,
                            event,
                        }),
                    );
                }
            }
            Shared::drain_transmits(&mut session, now, &mut pending);
            if now >= next_paths_us {
                next_paths_us = now + 200_000;
                let paths = session.path_stats();
                if !paths.is_empty() {
                    *lock(&s.last_paths) = paths;
                }
            }
        }
        s.flush(&mut pending);
        for ev in events.drain(..) {
            match ev {
                HostEvent::ClientConnected { addr, name } => {
                    s.note(format!("client {name:?} connected from {addr}"));
                    lock(&s.inputs).clear();
                    s.client_epoch.fetch_add(1, Ordering::SeqCst);
                    state = StateApplied::default();
                }
                HostEvent::ClientGone { addr, reason } => {
                    s.note(format!("client at {addr} gone ({reason:?})"));
                }
                HostEvent::KeyframeRequested => {
                    s.keyframe_wanted.store(true, Ordering::SeqCst);
                }
                HostEvent::Input(rec) => s.deliver_input(rec),
                HostEvent::Feedback(_) => {}
                HostEvent::BitrateChanged { kbps } => {
                    s.counters.target_kbps.store(kbps, Ordering::Relaxed);
                }
            }
        }
    }
}
