//! The host: a frame **source** feeding the **encoder stage**, whose frames the **network
//! driver** packetizes and sends; the client's input goes to an **input sink**, audio beside it.
//!
//! The files follow the pipeline:
//! - sources: `source_scene` (the built-in test scene, rendered on its own thread into a
//!   latest-wins slot that the encoder thread takes from), `source_x11` (MIT-SHM capture,
//!   encoded on the capture thread straight from shared memory), `source_pipe` (raw frames,
//!   one read, one encode, no read-ahead), `source_app` ([`Host::publish`], or the
//!   application's own thread with a [`FrameSender`]);
//! - `encode`: conversion and encoding, frame numbering (one stream for every client), the
//!   hand-over;
//! - `network`: the driver thread that owns the protocol session (every client's) and the
//!   socket (the loop in [`crate::driver`]), and the session's events; `inflight`: a frame's
//!   datagrams on their way to every client, paced; `clients`: the roster of clients for the
//!   summary;
//! - `input` and `state_input`: where input goes (scene, queue, callback, XTEST);
//! - `pairing`: identities, the allowlist and the PIN, persisted in the state directory;
//! - `audio`: Opus from the tone, a capture device or the application;
//! - `options`: what the host is told; `shared`: the flags and counters the threads share.
//!
//! No thread but the driver touches the session: the others hand it commands and read what it
//! publishes, so a frame being sent never blocks a control reply, and nothing waits on a lock
//! held across a send.

mod audio;
mod clients;
mod consumer;
mod encode;
mod encode_slices;
mod gamepad;
mod inflight;
mod input;
mod network;
mod options;
mod pairing;
mod shared;
mod source_app;
mod source_pipe;
mod source_scene;
mod source_x11;
mod state_input;
mod summary;
mod webrtc;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use untether_media::audio::{self as media_audio, SdlAudioCapture};
use untether_media::scene::{Scene, SceneConfig};
use untether_media::x11::{PointerMode, X11Capture, XtestReplay};
use untether_net::UdpEndpoint;

use crate::link::HostLink;
pub use untether_proto::Codec;
use untether_proto::{
    fingerprint, HostSession, InputRecord, Micros, PairingPin, PublicKey, StateEntry,
};

use crate::clock::now_us;
use crate::config::{ConfigError, Resolution};
use crate::driver::{self, Handle};
use crate::identity::{Access, IdentityError};
use crate::stats::Stage;

pub use clients::ClientSummary;
pub use consumer::{
    Consumer, ConsumerSummary, EncodedVideo, KeyframeRequests, StreamConsumer, StreamInfo,
    ViewerSummary,
};
pub use encode::{FrameSender, SendInfo};
pub use gamepad::{GamepadState, GAMEPAD_DEVICE, MAX_GAMEPADS};
pub use input::{keys, scene_input};
pub use options::{
    AudioSpec, HostOptions, HostSetup, InputCallback, InputSpec, SentFrameTap, SourceSpec,
};
pub use state_input::STATE_SEQ;
pub use summary::HostSummary;
pub use webrtc::WebRtcSummary;

use audio::AudioStage;
use encode::{open_encoders, EncoderPlan, EncoderStage};
use input::{InputSink, INPUT_QUEUE};
use network::{HostCommand, HostNet};
use options::{session_config, session_params};
use pairing::host_security;
use shared::{lock, HostShared};
use source_pipe::PipeSource;

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

/// A running host. Dropping it without [`Host::stop`] stops it too.
pub struct Host {
    shared: Arc<HostShared>,
    net: Handle<HostCommand>,
    /// The driver, parked here when its thread ends (for the final summary and late queries).
    parked: Arc<Mutex<Option<Box<HostNet>>>>,
    threads: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
    public_key: PublicKey,
    state_dir: Option<std::path::PathBuf>,
    started_us: Micros,
    options: HostOptions,
    setup: HostSetup,
    /// The encoder stage for a frame sender (app source without an encoder thread).
    sender_stage: Mutex<Option<EncoderStage>>,
    audio: Option<Arc<AudioStage>>,
    capture: Option<SdlAudioCapture>,
    /// Where browsers find the page (`webrtc.listen`).
    browsers: Option<webrtc::BrowserInfo>,
}

/// Opens the input sink `setup` asks for.
fn open_input_sink(
    setup: &HostSetup,
    scene: Option<mpsc::SyncSender<input::SceneRecord>>,
) -> Result<InputSink, HostError> {
    Ok(match (&setup.input, &setup.source, scene) {
        (InputSpec::Auto | InputSpec::Scene, SourceSpec::Scene, Some(tx)) => InputSink::Scene(tx),
        (InputSpec::Scene, _, _) => {
            return Err(HostError::Usage(
                "the scene input sink needs the scene source".into(),
            ))
        }
        (InputSpec::Auto, SourceSpec::X11 { display, .. }, _) => InputSink::Xtest(Box::new(
            XtestReplay::open(display.as_deref(), (0, 0), PointerMode::Absolute)?,
        )),
        (InputSpec::Xtest { display, pointer }, src, _) => {
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
        (InputSpec::Auto | InputSpec::Queue, _, _) => InputSink::Queue,
        (InputSpec::Callback(cb), _, _) => InputSink::Callback(cb.clone()),
        (InputSpec::Discard, _, _) => InputSink::Discard,
    })
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, HostError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(HostError::Thread)
}

impl Host {
    /// Binds the socket, builds the scene and the encoder (so configuration errors surface
    /// here), and starts the threads: the built-in scene, no audio.
    pub fn start(options: HostOptions) -> Result<Host, HostError> {
        Self::start_with(options, HostSetup::default())
    }

    /// Like [`Host::start`], with a frame source, an input sink and audio chosen by `setup`.
    /// Invalid settings are refused with the message the CLI gives, never replaced by defaults.
    pub fn start_with(mut options: HostOptions, mut setup: HostSetup) -> Result<Host, HostError> {
        options.validate()?;
        webrtc::prepare(&options, &mut setup);
        let bind: SocketAddr = options
            .host
            .bind
            .parse()
            .map_err(|_| HostError::BadBind(options.host.bind.clone()))?;
        // No session without the OS random generator (keys, nonces, PINs): stop, saying so.
        crate::identity::check_random()?;
        let mut host_cfg = session_config(&options)?;
        // Open the capture first: its size is the stream's size.
        let capture = match &setup.source {
            SourceSpec::X11 { display, target } => {
                let cap = X11Capture::open(display.as_deref(), target)?;
                let (w, h) = cap.size();
                options.video.resolution = Resolution {
                    width: w,
                    height: h,
                };
                host_cfg.params = session_params(&options);
                Some(cap)
            }
            _ => None,
        };
        let socket = UdpEndpoint::bind(bind)?;
        let local_addr = socket.local_addr()?;
        let (raw, link) = match crate::link::open(&options.network, || {
            crate::link::host_interface(local_addr)
        })? {
            crate::link::Opened::Udp => (None, None),
            crate::link::Opened::Raw(r) => {
                log::info!(
                    "host: raw layer 2 on {} ({}, EtherType 0x{:04X}) for clients that offer it",
                    r.interface(),
                    r.mac(),
                    r.ethertype()
                );
                let link = HostLink::raw(r.mac(), r.ethertype(), r.interface());
                (Some(r), Some(link))
            }
            crate::link::Opened::Fallback(reason, line) => {
                log::warn!("host: {line}");
                (None, Some(HostLink::udp(reason, Some(line))))
            }
        };
        let v = options.video.clone();
        let shared = Arc::new(HostShared::new(
            capture.as_ref().map_or((0, 0), |c| c.origin()),
        ));
        // Open the encoders now so a bad configuration (or an absent device asked for by
        // name) fails here, not on a thread.
        let mut plan = EncoderPlan::new(&v, &setup, v.resolution.width, v.resolution.height);
        plan.whole_frames = options.webrtc.enabled();
        let (encoder, offers) = open_encoders(&plan, &v, &shared)?;
        host_cfg.params.codec = offers[0].codec;
        host_cfg.params.refresh_period = offers[0].refresh_period;
        host_cfg.codecs = offers;
        let pacing = options.network.pacing()?;
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
        let (scene_tx, scene_rx) = mpsc::sync_channel(INPUT_QUEUE);
        let sink = open_input_sink(&setup, Some(scene_tx))?;
        let mut session = HostSession::new(host_cfg);
        if let (None, Some(pin)) = (&pairing.dir, &pairing.pin) {
            session.set_pin(Some(PairingPin {
                pin: pin.clone(),
                expires_us: now_us() + options.host.pin_ttl_s * 1_000_000,
                attempts_left: 3,
            }));
        }
        let public_key = session.host_key();
        let state_dir = pairing.dir.as_ref().map(|d| d.path().to_path_buf());
        let (net, mailbox) = driver::channel().map_err(|e| HostError::Net(e.into()))?;
        let (encoder_events, encoder_rx) = mpsc::channel();
        shared.consumers.set(
            &setup.consumers,
            StreamInfo {
                width: v.resolution.width,
                height: v.resolution.height,
                fps: v.fps,
                audio_channels: (setup.audio != AudioSpec::None)
                    .then_some(media_audio::CHANNELS as u8),
            },
            &KeyframeRequests::new(
                encoder_events.clone(),
                options.host.keyframe_cooldown_ms * 1000,
            ),
        );
        let stage = EncoderStage::new(encoder, plan, encoder_rx, net.clone(), shared.clone());
        let audio = match setup.audio {
            AudioSpec::None => None,
            _ => Some(Arc::new(AudioStage::new(
                setup.audio_bitrate_kbps,
                net.clone(),
            )?)),
        };
        let parked = Arc::new(Mutex::new(None));
        let mut threads = Vec::new();
        let web = webrtc::start(&options, &pairing, audio.is_some(), &net, &shared)?;
        let (sockets, webrtc_side, browsers) = webrtc::Started::split(web, socket, &mut threads);
        {
            let (s, parked) = (shared.clone(), parked.clone());
            let mut host_net = HostNet::new(
                session,
                pairing,
                shared.clone(),
                sink,
                encoder_events,
                pacing,
                v.fps,
            );
            host_net.webrtc = webrtc_side;
            if let Some(link) = link {
                host_net.link = link;
            }
            host_net.lose_slices = setup.lose_slices.clone();
            threads.push(spawn("host-net", move || {
                if let driver::Ended::Failed(e) =
                    driver::run_with_raw(&mut host_net, &sockets, raw.as_ref(), &mailbox, &s.stop)
                {
                    s.fail(format!("network: {e}"));
                }
                host_net.link.report.net_thread_cpu_ms =
                    crate::link::thread_cpu_us() as f64 / 1000.0;
                *lock(&parked) = Some(Box::new(host_net));
                drop(mailbox);
            })?);
        }
        let fps = v.fps;
        let mut sender_stage = None;
        let tap = setup.sent_frame_tap.clone();
        match &setup.source {
            SourceSpec::Scene => {
                let mut scene_cfg = SceneConfig::new(v.resolution.width, v.resolution.height);
                scene_cfg.spin_deg_per_s = options.scene.spin_deg_per_s;
                scene_cfg.walk_speed = options.scene.walk_speed;
                if options.vr.enabled {
                    scene_cfg.stereo = true;
                    scene_cfg.pose_markers = true;
                    scene_cfg.ipd_m = options.vr.ipd_mm / 1000.0;
                    scene_cfg.fov_deg = options.vr.fov_deg;
                }
                let scene = Scene::new(scene_cfg)?;
                let s = shared.clone();
                threads.push(spawn("host-source", move || {
                    source_scene::scene_loop(&s, scene, scene_rx, fps)
                })?);
                let s = shared.clone();
                threads.push(spawn("host-encode", move || {
                    source_scene::encode_loop(&s, stage, tap)
                })?);
            }
            SourceSpec::X11 { .. } => {
                let s = shared.clone();
                let cap = capture.ok_or_else(|| HostError::Usage("no X11 capture".into()))?;
                let stamp = setup.stamp;
                threads.push(spawn("host-x11", move || {
                    source_x11::x11_loop(&s, cap, stage, fps, stamp)
                })?);
            }
            SourceSpec::Pipe { path, format } => {
                let s = shared.clone();
                let src = PipeSource {
                    path: path.clone(),
                    format: *format,
                    width: v.resolution.width,
                    height: v.resolution.height,
                    fps,
                    stamp: setup.stamp,
                };
                let n = net.clone();
                threads.push(spawn("host-pipe", move || {
                    source_pipe::pipe_loop(&s, src, stage, n)
                })?);
            }
            SourceSpec::App => {
                if setup.encoder_thread {
                    let s = shared.clone();
                    threads.push(spawn("host-encode", move || {
                        source_scene::encode_loop(&s, stage, tap)
                    })?);
                } else {
                    sender_stage = Some(stage);
                }
            }
        }
        let mut capture_dev = None;
        match (&setup.audio, &audio) {
            (AudioSpec::Tone, Some(stage)) => {
                let (s, stage) = (shared.clone(), stage.clone());
                threads.push(spawn("host-audio", move || audio::tone_loop(&s, &stage))?);
            }
            (AudioSpec::Capture { device }, Some(stage)) => {
                let (s, stage) = (shared.clone(), stage.clone());
                let sink: media_audio::CaptureSink = Box::new(move |pcm: &[i16], pts: u64| {
                    if s.watched() {
                        if let Err(e) = stage.push(&s, pcm, media_audio::CHANNELS, pts) {
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
            _ => {}
        }
        Ok(Host {
            shared,
            net,
            parked,
            threads,
            local_addr,
            public_key,
            state_dir,
            started_us: now_us(),
            options,
            setup,
            sender_stage: Mutex::new(sender_stage),
            audio,
            capture: capture_dev,
            browsers,
        })
    }

    /// Runs `f` on the network driver's thread with its session at hand (or on the parked
    /// driver once its thread has ended) and returns what it returned.
    fn query<R: Send + 'static>(
        &self,
        f: impl Fn(&mut HostNet) -> R + Send + Sync + 'static,
    ) -> Option<R> {
        let f = Arc::new(f);
        let (tx, rx) = mpsc::sync_channel(1);
        let q = {
            let f = f.clone();
            Arc::new(move |n: &mut HostNet| {
                let _ = tx.send(f(n));
            })
        };
        if self.net.send(HostCommand::Query(q)) {
            if let Ok(r) = rx.recv_timeout(Duration::from_secs(2)) {
                return Some(r);
            }
        }
        // The driver has ended (or did not answer): ask what it left.
        lock(&self.parked).as_mut().map(|n| f(n))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The host's long-term public key (its identity; clients pin it).
    pub fn public_key(&self) -> PublicKey {
        self.public_key
    }

    /// The host's fingerprint, as `untether pair` and clients show it.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.public_key())
    }

    /// The one-time PIN the host accepts now, if any (`access = "pin"`, or `untether pair
    /// --pin` while the host runs).
    pub fn pairing_pin(&self) -> Option<String> {
        self.query(|n| n.pairing.pin.clone()).flatten()
    }

    /// The state directory (None with an in-memory identity).
    pub fn state_dir(&self) -> Option<std::path::PathBuf> {
        self.state_dir.clone()
    }

    /// Fingerprints of the clients that paired with a PIN during this run.
    pub fn paired_clients(&self) -> Vec<String> {
        self.query(|n| n.pairing.paired.clone()).unwrap_or_default()
    }

    /// The newest value of a key of the latest-wins state channel
    /// ([`untether_proto::state::keys`]), e.g. the pointer position or the head pose.
    pub fn state_value(&self, key: untether_proto::StateKey) -> Option<StateEntry> {
        self.query(move |n| n.session.state_value(key)).flatten()
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
        self.shared.fatal()
    }

    pub fn is_stopped(&self) -> bool {
        self.shared.stopped()
    }

    /// Whether a client is connected.
    pub fn has_client(&self) -> bool {
        self.shared.link.connected()
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
        move || s.request_stop()
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
    /// sent at once. Without a client or a consumer's viewer the audio is dropped.
    pub fn push_audio(
        &self,
        pcm: &[i16],
        channels: usize,
        pts_us: Micros,
    ) -> Result<(), HostError> {
        if self.is_stopped() {
            return Err(HostError::Stopped(self.failure()));
        }
        let Some(stage) = &self.audio else {
            return Err(HostError::Usage(
                "this host has no audio stream (set an audio source)".into(),
            ));
        };
        if !self.shared.watched() {
            return Ok(());
        }
        stage.push(&self.shared, pcm, channels, pts_us)
    }

    /// What the host has measured so far.
    pub fn summary(&self) -> HostSummary {
        let net = self.query(|n| {
            n.roster_refresh();
            (
                n.session.stats(),
                n.last_paths.clone(),
                n.target_kbps,
                n.roster.list(),
                n.link.report.clone(),
                n.session.state_staleness(now_us()),
            )
        });
        let (st, paths, target_kbps, clients, link, state_staleness) = net.unwrap_or_default();
        let s = &self.shared;
        let c = &s.counters;
        let samples = lock(&s.samples);
        let mut stages = std::collections::BTreeMap::new();
        stages.insert(Stage::Capture, samples.capture.clone());
        stages.insert(Stage::HostQueue, samples.queue.clone());
        stages.insert(Stage::Convert, samples.convert.clone());
        stages.insert(Stage::Encode, samples.encode.clone());
        stages.insert(Stage::Send, samples.send.clone());
        for (stage, measured) in [
            (Stage::AudioEncode, &samples.audio_encode),
            (Stage::SyncBlocked, &samples.sync_blocked),
            (Stage::Pace, &samples.pace),
        ] {
            if !measured.is_empty() {
                stages.insert(stage, measured.clone());
            }
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
            pacing_window_us: self
                .options
                .network
                .pacing()
                .map_or(0, |p| p.window_us(self.options.video.fps)),
            stages,
            frame_kbytes: samples.frame_bytes.clone(),
            slice_out: (
                samples.first_slice_out.clone(),
                samples.last_slice_out.clone(),
            ),
            fatal: s.fatal(),
            events: s.events(),
            paths,
            bitrate_changes: c.bitrate_changes.load(Ordering::Relaxed),
            final_bitrate_kbps: target_kbps,
            shards_retransmitted: st.shards_retransmitted,
            clients,
            max_clients: self.options.host.max_clients,
            frame_copies_sent: st.frame_copies_sent,
            keyframes_for_joins: st.keyframes_for_joins,
            inputs_dropped_viewer: st.inputs_dropped_viewer,
            viewers_paused: st.viewers_paused,
            viewers_dropped: st.viewers_dropped,
            consumers: s.consumers.summaries(),
            state_staleness: state_staleness.filter(|s| s.keys > 0),
            encoder: s.encoder().map(|e| e.name),
            codec: s.encoder().map(|e| e.codec.name().to_string()),
            forced_keyframes: c.forced_keyframes.load(Ordering::Relaxed),
            refresh_sweeps: c.refresh_sweeps.load(Ordering::Relaxed),
            bitrate_changes_refused: c.bitrate_changes_refused.load(Ordering::Relaxed),
            largest_keyframe_bytes: c.largest_keyframe.load(Ordering::Relaxed),
            largest_frame_bytes: c.largest_frame.load(Ordering::Relaxed),
            link,
        }
    }

    /// The encoder in use (it changes when the stream changes codec: the first client to
    /// connect while none is may prefer another).
    pub fn encoder_info(&self) -> Option<untether_media::codec::EncoderInfo> {
        self.shared.encoder()
    }

    /// Stops the threads and returns the final summary.
    pub fn stop(mut self) -> HostSummary {
        self.shutdown();
        let summary = self.summary();
        lock(&self.parked).take();
        summary
    }

    fn shutdown(&mut self) {
        // Stop the capture device first: its callback hands audio to the driver.
        self.capture = None;
        self.shared.request_stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown();
        // The parked driver holds the shared state: let both go.
        lock(&self.parked).take();
    }
}
