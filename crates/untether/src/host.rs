//! The host: test scene → colour conversion → encoder → protocol session → UDP, and the
//! client's input back into the scene.
//!
//! Three threads, with at most one frame between stages (latest wins, drops counted):
//! - **source** renders the scene at the frame rate, stamps it, and puts it in the frame slot;
//! - **encoder** takes the newest frame, converts and encodes it, packetizes and sends it;
//! - **network** receives control datagrams (session start, keyframe requests, input, pings)
//!   and drives the session's timers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use untether_media::codec::{Encoder, EncoderConfig};
use untether_media::scene::{Scene, SceneConfig, SceneInput, SceneKey};
use untether_media::stamp::{self, Stamp};
use untether_media::BgraFrame;
use untether_net::{Received, UdpEndpoint};
pub use untether_proto::Codec;
use untether_proto::{
    FrameTiming, HostConfig, HostEvent, HostSession, InputEvent, InputRecord, Micros,
    SessionParams, Transmit,
};

use crate::clock::{now_us, sleep_until};
use crate::config::{HostToml, NetworkToml, SceneToml, VideoConfig};
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
}

/// Everything the host needs to run.
#[derive(Clone, Debug)]
pub struct HostOptions {
    pub video: VideoConfig,
    pub scene: SceneToml,
    pub host: HostToml,
    pub network: NetworkToml,
}

/// A frame as the source produced it.
struct CapturedFrame {
    pixels: BgraFrame,
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
    frame_bytes: Samples,
}

#[derive(Default)]
struct Counters {
    captured: AtomicU64,
    encoded: AtomicU64,
    sent: AtomicU64,
    keyframes: AtomicU64,
    inputs_applied: AtomicU64,
    send_errors: AtomicU64,
}

struct Shared {
    session: Mutex<HostSession>,
    socket: UdpEndpoint,
    stop: AtomicBool,
    frames: Slot<CapturedFrame>,
    spare: Mutex<Vec<BgraFrame>>,
    keyframe_wanted: AtomicBool,
    /// Bumped when a new client connects: the encoder restarts frame numbering with a keyframe.
    client_epoch: AtomicU64,
    inputs: Mutex<Vec<InputRecord>>,
    counters: Counters,
    samples: Mutex<HostSamples>,
    fatal: Mutex<Option<String>>,
    events: Mutex<Vec<String>>,
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
            if let Err(e) = self.socket.send_to(&t.payload, t.dst) {
                if self.counters.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    log::warn!("host: send to {} failed: {e}", t.dst);
                }
            }
        }
    }

    fn drain_transmits(session: &mut HostSession, now: Micros, out: &mut Vec<Transmit>) {
        while let Some(t) = session.poll_transmit(now) {
            out.push(t);
        }
    }
}

/// A running host. Dropping it without [`Host::stop`] stops it too.
pub struct Host {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
    started_us: Micros,
    options: HostOptions,
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
    pub bytes_sent: u64,
    pub packets_sent: u64,
    pub malformed_datagrams: u64,
    pub keyframe_requests_received: u64,
    pub keyframe_requests_ignored: u64,
    pub stages: std::collections::BTreeMap<&'static str, Samples>,
    pub fatal: Option<String>,
    pub events: Vec<String>,
}

impl Host {
    /// Binds the socket, builds the scene and the encoder (so configuration errors surface
    /// here), and starts the threads.
    pub fn start(options: HostOptions) -> Result<Host, HostError> {
        let bind: SocketAddr = options
            .host
            .bind
            .parse()
            .map_err(|_| HostError::BadBind(options.host.bind.clone()))?;
        let socket = UdpEndpoint::bind(bind)?;
        let local_addr = socket.local_addr()?;
        let v = &options.video;
        let mut scene_cfg = SceneConfig::new(v.resolution.width, v.resolution.height);
        scene_cfg.spin_deg_per_s = options.scene.spin_deg_per_s;
        scene_cfg.walk_speed = options.scene.walk_speed;
        let scene = Scene::new(scene_cfg)?;
        let encoder = Encoder::new(EncoderConfig {
            width: v.resolution.width,
            height: v.resolution.height,
            fps: v.fps,
            bitrate_kbps: v.bitrate_kbps,
            preset: v.preset.clone(),
            threads: v.encoder_threads,
            conversion: v.conversion,
            intra_refresh: false,
            x264_params: String::new(),
        })?;
        let params = SessionParams {
            width: v.resolution.width as u16,
            height: v.resolution.height as u16,
            fps: v.fps as u16,
            codec: match v.encoder {
                untether_media::codec::EncoderKind::X264 => Codec::H264,
                untether_media::codec::EncoderKind::X264Rgb => Codec::H264Rgb,
            },
            bitrate_kbps: v.bitrate_kbps,
            max_datagram: options.network.max_datagram,
            keepalive_ms: options.network.keepalive_ms as u32,
            idle_timeout_ms: options.network.idle_timeout_ms as u32,
        };
        let mut host_cfg = HostConfig::new(params);
        host_cfg.keyframe_cooldown_us = options.host.keyframe_cooldown_ms * 1000;
        host_cfg.connection_id_seed = now_us() ^ (std::process::id() as u64) << 32;
        let shared = Arc::new(Shared {
            session: Mutex::new(HostSession::new(host_cfg)),
            socket,
            stop: AtomicBool::new(false),
            frames: Slot::new(),
            spare: Mutex::new(Vec::new()),
            keyframe_wanted: AtomicBool::new(true),
            client_epoch: AtomicU64::new(0),
            inputs: Mutex::new(Vec::new()),
            counters: Counters::default(),
            samples: Mutex::new(HostSamples::default()),
            fatal: Mutex::new(None),
            events: Mutex::new(Vec::new()),
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
        let s = shared.clone();
        threads.push(spawn(
            "host-source",
            Box::new(move || source_loop(&s, scene, fps)),
        )?);
        let s = shared.clone();
        threads.push(spawn(
            "host-encode",
            Box::new(move || encode_loop(&s, encoder)),
        )?);
        Ok(Host {
            shared,
            threads,
            local_addr,
            started_us: now_us(),
            options,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// The fatal error that stopped the host, if any.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.fatal).clone()
    }

    pub fn is_stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// A request to stop, e.g. from a signal handler thread.
    pub fn stop_flag(&self) -> impl Fn() + Send + Sync + 'static {
        let s = self.shared.clone();
        move || {
            s.stop.store(true, Ordering::SeqCst);
            s.frames.close();
        }
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
        HostSummary {
            duration_s: (now_us() - self.started_us) as f64 / 1e6,
            captured: c.captured.load(Ordering::Relaxed),
            encoded: c.encoded.load(Ordering::Relaxed),
            sent: c.sent.load(Ordering::Relaxed),
            keyframes: c.keyframes.load(Ordering::Relaxed),
            dropped: s.frames.replaced(),
            inputs_applied: c.inputs_applied.load(Ordering::Relaxed),
            bytes_sent: st.bytes_sent,
            packets_sent: st.datagrams_sent,
            malformed_datagrams: st.malformed_datagrams + st.unknown_connection,
            keyframe_requests_received: st.keyframe_requests_received,
            keyframe_requests_ignored: st.keyframe_requests_ignored_cooldown,
            stages,
            fatal: lock(&s.fatal).clone(),
            events: lock(&s.events).clone(),
        }
    }

    /// Stops the threads and returns the final summary.
    pub fn stop(mut self) -> HostSummary {
        self.shutdown();
        self.summary()
    }

    fn shutdown(&mut self) {
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
        InputEvent::MouseButton { .. } | InputEvent::Wheel { .. } | InputEvent::Text(_) => None,
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
        for rec in lock(&s.inputs).drain(..) {
            if let Some(input) = scene_input(&rec.event) {
                scene.apply_input(input);
            }
            inputs_applied = rec.seq.wrapping_add(1);
            s.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
        }
        let mut pixels = match lock(&s.spare).pop() {
            Some(p) => p,
            None => match BgraFrame::new(w, h) {
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
            pixels,
            capture_us,
            capture_dur_us,
        }) {
            lock(&s.spare).push(old.pixels);
        }
    }
}

fn encode_loop(s: &Shared, mut encoder: Encoder) {
    let mut frame_number: u32 = 0;
    let mut epoch = u64::MAX;
    let mut pending = Vec::new();
    while !s.stop.load(Ordering::SeqCst) {
        let Some(frame) = s.frames.take(Duration::from_millis(50)) else {
            continue;
        };
        let e = s.client_epoch.load(Ordering::SeqCst);
        if e != epoch {
            // A new client: its stream starts at frame 0 with a keyframe.
            epoch = e;
            frame_number = 0;
            s.keyframe_wanted.store(true, Ordering::SeqCst);
        }
        let start = now_us();
        let force = s.keyframe_wanted.swap(false, Ordering::SeqCst);
        let encoded = match encoder.encode(&frame.pixels, force) {
            Ok(e) => e,
            Err(e) => return s.fail(format!("encoder: {e}")),
        };
        lock(&s.spare).push(frame.pixels);
        s.counters.encoded.fetch_add(1, Ordering::Relaxed);
        if encoded.keyframe {
            s.counters.keyframes.fetch_add(1, Ordering::Relaxed);
        }
        let send_start = now_us();
        let shards = {
            let mut session = lock(&s.session);
            let r = session.send_frame(
                send_start,
                frame_number,
                frame.capture_us,
                encoded.keyframe,
                &encoded.data,
            );
            Shared::drain_transmits(&mut session, send_start, &mut pending);
            r
        };
        if shards.is_err() {
            // The client left between capture and send.
            pending.clear();
            continue;
        }
        s.flush(&mut pending);
        let send_done = now_us();
        s.counters.sent.fetch_add(1, Ordering::Relaxed);
        let c = &s.counters;
        let timing = FrameTiming {
            frame_number,
            capture_dur_us: frame.capture_dur_us,
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
            Shared::drain_transmits(&mut session, send_done, &mut pending);
        }
        s.flush(&mut pending);
        {
            let mut sm = lock(&s.samples);
            sm.queue.push_us(start as i64 - frame.capture_us as i64);
            sm.convert.push_us(encoded.convert_us as i64);
            sm.encode.push_us(encoded.encode_us as i64);
            sm.send.push_us((send_done - send_start) as i64);
            sm.frame_bytes.push(encoded.data.len() as f64 / 1000.0);
        }
        frame_number = frame_number.wrapping_add(1);
    }
}

fn network_loop(s: &Shared) {
    let mut buf = vec![0u8; untether_net::MAX_DATAGRAM];
    let mut pending = Vec::new();
    let mut events = Vec::new();
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
            if let Received::Datagram(n, from) = received {
                session.handle_datagram(now, from, &buf[..n]);
            }
            if session.poll_timeout().is_some_and(|t| t <= now) {
                session.handle_timeout(now);
            }
            while let Some(ev) = session.poll_event() {
                events.push(ev);
            }
            Shared::drain_transmits(&mut session, now, &mut pending);
        }
        s.flush(&mut pending);
        for ev in events.drain(..) {
            match ev {
                HostEvent::ClientConnected { addr, name } => {
                    s.note(format!("client {name:?} connected from {addr}"));
                    lock(&s.inputs).clear();
                    s.client_epoch.fetch_add(1, Ordering::SeqCst);
                }
                HostEvent::ClientGone { addr, reason } => {
                    s.note(format!("client at {addr} gone ({reason:?})"));
                }
                HostEvent::KeyframeRequested => {
                    s.keyframe_wanted.store(true, Ordering::SeqCst);
                }
                HostEvent::Input(rec) => {
                    let mut q = lock(&s.inputs);
                    // The source applies these every frame; bound it in case it stalls.
                    if q.len() < 4096 {
                        q.push(rec);
                    }
                }
                HostEvent::Feedback(_) => {}
            }
        }
    }
}
