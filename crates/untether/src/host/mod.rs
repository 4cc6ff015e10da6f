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

mod ask;
mod audio;
mod capture;
mod clients;
mod commands;
mod consumer;
mod dashboard;
mod encode;
mod encode_slices;
mod error;
mod gamepad;
mod grab;
mod inflight;
mod input;
mod network;
mod options;
mod outbox;
mod pairing;
mod refusals;
mod shared;
mod source_app;
mod source_kms;
mod source_pipe;
#[cfg(feature = "portal")]
mod source_portal;
mod source_ring;
mod source_scene;
mod source_wlr;
mod source_x11;
mod start;
mod state_input;
mod stream_note;
mod summary;
mod uinput;
mod webrtc;
mod zero_copy;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use untether_media::audio::SdlAudioCapture;
/// The stream's codec: the one the configuration validates (`video.codec`), the wire carries
/// (`untether_proto::Codec`, where it is defined) and the encoders open; also
/// [`crate::api::Codec`].
pub use untether_media::codec::Codec;
use untether_media::codec::InputPicture;
use untether_proto::{
    fingerprint, InputRecord, Micros, PoseSample, PublicKey, StateEntry, StateKey, StateValue,
};

use crate::clock::now_us;
use crate::driver::Handle;
use crate::stats::Stage;

pub use clients::{ClientLatency, ClientSummary, SpreadMs};
pub use consumer::{
    Consumer, ConsumerSummary, EncodedVideo, KeyframeRequests, StreamConsumer, StreamInfo,
    ViewerSummary,
};
pub use encode::{FrameSender, SendInfo};
pub use error::HostError;
pub use gamepad::{GamepadState, GAMEPAD_DEVICE, MAX_GAMEPADS};
pub use input::{keys, scene_input};
pub use options::{
    AudioSpec, HostOptions, HostSetup, InputCallback, InputSpec, SentFrameTap, SourceSpec,
};
pub use source_ring::PresentRing;
pub use state_input::STATE_SEQ;
pub use summary::HostSummary;
pub use webrtc::WebRtcSummary;

use ask::{Answer, Ask, DriverFigures};
use audio::AudioStage;
use commands::HostCommand;
use encode::EncoderStage;
use network::HostNet;
use shared::{lock, CapturedFrame, HostShared, Pixels};
use source_app::copy_picture;

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
    /// The operator's dashboard (`host.dashboard`).
    dashboard: Option<dashboard::DashboardInfo>,
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
        let s = start::start(&mut options, &mut setup)?;
        Ok(Host {
            shared: s.shared,
            net: s.net,
            parked: s.parked,
            threads: s.threads,
            local_addr: s.local_addr,
            public_key: s.public_key,
            state_dir: s.state_dir,
            started_us: now_us(),
            options,
            setup,
            sender_stage: Mutex::new(s.sender_stage),
            audio: s.audio,
            capture: s.capture,
            browsers: s.browsers,
            dashboard: s.dashboard,
        })
    }

    /// Asks the network driver (on its thread, with its session at hand; or the parked driver
    /// once its thread has ended) and returns its answer. `ask` makes the question around
    /// where the answer goes (twice when the driver has gone).
    fn ask<R: Send + 'static>(&self, ask: impl Fn(Answer<R>) -> Ask) -> Option<R> {
        let (answer, rx) = Answer::channel();
        if self.net.send(HostCommand::Ask(ask(answer))) {
            if let Ok(r) = rx.recv_timeout(Duration::from_secs(2)) {
                return Some(r);
            }
        }
        // The driver has ended (or did not answer): ask what it left.
        let mut parked = lock(&self.parked);
        let n = parked.as_mut()?;
        let (answer, rx) = Answer::channel();
        ask(answer).answer(n);
        rx.try_recv().ok()
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
        self.ask(Ask::PairingPin).flatten()
    }

    /// The state directory (None with an in-memory identity).
    pub fn state_dir(&self) -> Option<std::path::PathBuf> {
        self.state_dir.clone()
    }

    /// Fingerprints of the clients that paired with a PIN during this run.
    pub fn paired_clients(&self) -> Vec<String> {
        self.ask(Ask::PairedClients).unwrap_or_default()
    }

    /// The newest value of a key of the latest-wins state channel
    /// ([`untether_proto::state::keys`]), e.g. the pointer position or the head pose.
    pub fn state_value(&self, key: untether_proto::StateKey) -> Option<StateEntry> {
        self.ask(|a| Ask::StateValue(key, a)).flatten()
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
        self.shared.audience.connected()
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
        let DriverFigures {
            stats: st,
            paths,
            target_kbps,
            clients,
            link,
            state_staleness,
            webrtc_bytes_sent,
        } = self.ask(Ask::Figures).unwrap_or_default();
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
            dropped: s.frames.replaced() + c.source_dropped.load(Ordering::Relaxed),
            inputs_applied: c.inputs_applied.load(Ordering::Relaxed),
            inputs_dropped: c.inputs_dropped.load(Ordering::Relaxed),
            unchanged: c.unchanged.load(Ordering::Relaxed),
            audio_packets: c.audio_packets.load(Ordering::Relaxed),
            bytes_sent: st.bytes_sent,
            webrtc_bytes_sent,
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

/// Several clients, seen from the application.
impl Host {
    /// The clients of this run (connected now or gone), with their roles and figures.
    pub fn clients(&self) -> Vec<ClientSummary> {
        self.ask(Ask::Clients).unwrap_or_default()
    }

    /// How many clients are connected now.
    pub fn client_count(&self) -> usize {
        self.shared.audience.clients()
    }

    /// Hands control to the connected client whose fingerprint starts with `fingerprint` (8 or
    /// more characters, one match), for this run (`untether pair control` persists it in the
    /// state directory instead). Returns the new controller.
    pub fn hand_control(&self, fingerprint: &str) -> Result<ClientSummary, HostError> {
        self.ask(|a| Ask::HandControl(fingerprint.to_string(), a))
            .unwrap_or_else(|| Err(HostError::Stopped(self.failure())))
    }

    /// Grants (or takes back) a viewer's input, by fingerprint as for [`Host::hand_control`],
    /// for this run (`untether pair grant` persists it).
    pub fn grant_input(
        &self,
        fingerprint: &str,
        granted: bool,
    ) -> Result<ClientSummary, HostError> {
        self.ask(|answer| Ask::GrantInput {
            fingerprint: fingerprint.to_string(),
            granted,
            answer,
        })
        .unwrap_or_else(|| Err(HostError::Stopped(self.failure())))
    }
}

/// The application as the frame source (`SourceSpec::App`): its frames, its client's pose,
/// controllers and state.
impl Host {
    /// Publishes a frame of the application (app source with an encoder thread): it is copied
    /// into a pooled buffer and the encoder thread encodes the newest one (latest wins; a
    /// frame replaced before the encoder took it counts as dropped). Returns at once.
    pub fn publish(&self, picture: &InputPicture<'_>) -> Result<(), HostError> {
        self.publish_with_pose(picture, None)
    }

    /// Like [`publish`](Self::publish), for a frame rendered for the client's head pose `pose`
    /// (from [`head_pose`](Self::head_pose)): the client gets the pose with the frame.
    pub fn publish_with_pose(
        &self,
        picture: &InputPicture<'_>,
        pose: Option<PoseSample>,
    ) -> Result<(), HostError> {
        self.publish_frame(picture, pose, None)
    }

    /// Like [`publish_with_pose`](Self::publish_with_pose), for a frame the application
    /// finished at `rendered_us` ([`crate::clock::now_us`]) and hands over later (after a
    /// read-back): glass-to-glass starts at `rendered_us`, not at this call.
    pub fn publish_with_pose_at(
        &self,
        picture: &InputPicture<'_>,
        pose: Option<PoseSample>,
        rendered_us: Micros,
    ) -> Result<(), HostError> {
        self.publish_frame(picture, pose, Some(rendered_us))
    }

    fn publish_frame(
        &self,
        picture: &InputPicture<'_>,
        pose: Option<PoseSample>,
        rendered_us: Option<Micros>,
    ) -> Result<(), HostError> {
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
        self.hand_over(pixels, t0, pose, rendered_us);
        Ok(())
    }

    /// Whether the encoder takes the application's pictures as DMA-BUFs (zero-copy encode,
    /// [`publish_dma_buf`](Self::publish_dma_buf)): Ok, or why not. Decided at the first
    /// call, once per stream: when it is off the host logs ONE line naming why (`zero-copy
    /// off (no GPU render node: /dev/dri/renderD* is missing): frames read back by the
    /// CPU`) and the application goes on handing over pictures in memory
    /// ([`publish_with_pose_at`](Self::publish_with_pose_at)). Ask before every frame: the
    /// encoder turns it off (with the same one line) if it cannot take a picture after all.
    pub fn dma_buf_input(&self) -> Result<(), String> {
        self.shared.zero_copy.decide(&self.shared)
    }

    /// Zero-copy off for this stream, for the application's own reason (it cannot export
    /// its frames as DMA-BUFs): the one line names `why`, unless the host had said why
    /// already.
    pub fn refuse_dma_buf(&self, why: &str) {
        self.shared
            .zero_copy
            .turn_off(&self.shared, why.to_string());
    }

    /// Like [`publish_with_pose_at`](Self::publish_with_pose_at), for a picture in GPU memory
    /// (after [`dma_buf_input`](Self::dma_buf_input) said Ok): no pixel is copied, its fds
    /// are duplicated and `keep` is held until the encoder has encoded the picture, or
    /// dropped it for a newer one (latest wins); the application must not draw into the
    /// image while it holds `keep` (an `Arc<()>` whose count it reads before drawing).
    /// The GPU work that made the picture must be finished before this call.
    pub fn publish_dma_buf(
        &self,
        picture: &untether_media::codec::DmaBufPicture<'_>,
        keep: untether_media::codec::KeepAlive,
        pose: Option<PoseSample>,
        rendered_us: Micros,
    ) -> Result<(), HostError> {
        if self.setup.source != SourceSpec::App || !self.setup.encoder_thread {
            return Err(HostError::Usage(
                "publish_dma_buf needs the app source with the encoder thread".into(),
            ));
        }
        if self.is_stopped() {
            return Err(HostError::Stopped(self.failure()));
        }
        if let Err(why) = self.dma_buf_input() {
            return Err(HostError::Usage(format!(
                "zero-copy is off ({why}): hand over pictures in memory"
            )));
        }
        let t0 = now_us();
        let frame = untether_media::codec::DmaBufFrame::dup(picture, Some(keep))?;
        self.hand_over(Pixels::DmaBuf(frame), t0, pose, Some(rendered_us));
        Ok(())
    }

    /// Puts a picture in the encoder thread's slot (latest wins; the one it replaces is
    /// recycled), counted as captured at `t0`.
    fn hand_over(
        &self,
        pixels: Pixels,
        t0: Micros,
        pose: Option<PoseSample>,
        rendered_us: Option<Micros>,
    ) {
        let copied_us = now_us();
        self.shared
            .counters
            .captured
            .fetch_add(1, Ordering::Relaxed);
        let dur = (copied_us - t0) as u32;
        lock(&self.shared.samples).capture.push_us(dur as i64);
        // A time ahead of the clock would make glass-to-glass negative: at most now.
        let capture_us = rendered_us.map_or(copied_us, |r| r.min(copied_us));
        if let Some(old) = self.shared.frames.put(CapturedFrame {
            pixels,
            capture_us,
            capture_dur_us: dur,
            pose,
        }) {
            self.shared.recycle(old.pixels);
        }
    }

    /// The synchronous sender of an app host without an encoder thread: encodes on the
    /// caller's thread. There is one per host.
    pub fn frame_sender(&self) -> Result<FrameSender, HostError> {
        if self.setup.source != SourceSpec::App || self.setup.encoder_thread {
            return Err(HostError::Usage(
                "a frame sender needs the app source without the encoder thread".into(),
            ));
        }
        match lock(&self.sender_stage).take() {
            Some(stage) => Ok(FrameSender { stage }),
            None => Err(HostError::Usage(
                "this host's frame sender was already taken".into(),
            )),
        }
    }

    /// The client's newest head pose (orientation, position, and the client's sample time;
    /// `sample_us` 0 when its client sent none), None before it sent one. Render for it and
    /// pass it back with the frame ([`FrameSender::send_frame`],
    /// [`publish_with_pose`](Self::publish_with_pose)).
    pub fn head_pose(&self) -> Option<PoseSample> {
        *lock(&self.shared.head_pose)
    }

    /// Controller `n` (0..[`MAX_GAMEPADS`]) of the client as the host last heard it
    /// (buttons held, sticks and triggers); None before it sent anything.
    pub fn gamepad(&self, n: usize) -> Option<GamepadState> {
        self.ask(|a| Ask::Gamepad(n, a)).flatten()
    }

    /// Publishes host → client state (rumble, other players, the application's own keys from
    /// [`untether_proto::state::keys::APP`]) on the latest-wins channel; the client reads it
    /// with `ClientContext::state_value`. False when the key table (4096) is full.
    pub fn publish_state(&self, key: StateKey, value: StateValue) -> bool {
        self.ask(|a| Ask::PublishState(key, value, a))
            .unwrap_or(false)
    }
}

/// Browsers: the link to print, the page's address and certificate, what the WebRTC
/// sessions counted.
impl Host {
    /// The page's one-time link for the next browser (`http://HOST:PORT/?token=…`: single use,
    /// valid `webrtc.link_ttl_s`; a new one is made once it is used or expired). None without
    /// `webrtc.listen`.
    pub fn browser_link(&self) -> Option<String> {
        let base = self.browsers.as_ref()?.base_url.clone();
        let token = self.ask(Ask::BrowserLinkToken)??;
        Some(format!("{base}?token={token}"))
    }

    /// The page's address without a token (for `--access open`, or the PIN form).
    pub fn browser_url(&self) -> Option<String> {
        self.browsers.as_ref().map(|b| b.base_url.clone())
    }

    /// The SHA-256 fingerprint of the page's HTTPS certificate (`webrtc.cert`).
    pub fn browser_cert_fingerprint(&self) -> Option<String> {
        self.browsers.as_ref()?.fingerprint.clone()
    }

    /// The operator's dashboard (`host.dashboard`): `http://ADDR:PORT/` (it answers to the
    /// admin token only: [`dashboard_link`](Self::dashboard_link)).
    pub fn dashboard_url(&self) -> Option<String> {
        self.dashboard.as_ref().map(|d| d.url.clone())
    }

    /// The dashboard's link with its admin token (`…/?admin=TOKEN`), which answers from any
    /// address it listens on: print it once, never log it.
    pub fn dashboard_link(&self) -> Option<String> {
        let d = self.dashboard.as_ref()?;
        Some(format!("{}?admin={}", d.url, d.token))
    }

    /// Whether the dashboard listens on loopback only (this machine).
    pub fn dashboard_local_only(&self) -> bool {
        self.dashboard.as_ref().is_some_and(|d| d.local_only)
    }

    /// What the WebRTC sessions (browsers, the WHIP publication) counted; None when
    /// `[webrtc]` is off.
    pub fn webrtc_summary(&self) -> Option<WebRtcSummary> {
        self.ask(Ask::WebRtcSummary)?
    }
}
