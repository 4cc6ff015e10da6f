//! The client: UDP → frame assembly → H.264 decoder → presenter, and the window's input back
//! to the host.
//!
//! Two threads: **network** (receive, reassemble via the protocol session, decode, read the
//! pixel stamp) hands each decoded picture through a latest-wins slot to the **presenter**,
//! which runs on the calling thread (SDL wants the thread that made the window), shows the
//! newest picture and sends the window's input events straight to the host.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use untether_media::codec::{DecodedFrame, Decoder};
use untether_media::present::{HeadlessPresenter, Presenter, SdlPresenter, WindowEvent};
use untether_media::stamp::{self, Stamp};
use untether_net::{Received, UdpEndpoint};
use untether_proto::{
    ClientConfig, ClientEvent, ClientSession, ClientStats, ClockEstimate, FrameTiming, GoneReason,
    InputEvent, Micros, RejectReason, SessionParams,
};

use crate::clock::now_us;
use crate::config::{ClientToml, NetworkToml};
use crate::slot::Slot;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Net(#[from] untether_net::NetError),
    #[error(transparent)]
    Media(#[from] untether_media::MediaError),
    #[error("no answer from host {host} within {secs:.1} s: is `untether host` running there, and is UDP port {port} reachable?")]
    NoAnswer {
        host: SocketAddr,
        secs: f64,
        port: u16,
    },
    #[error("host {host} refused the connection: nothing is listening on UDP port {port} there (ICMP port unreachable)")]
    Refused { host: SocketAddr, port: u16 },
    #[error("host {host} rejected this client ({reason:?}): {message}")]
    Rejected {
        host: SocketAddr,
        reason: RejectReason,
        message: String,
    },
    #[error("host {host} went away: {reason}")]
    HostGone { host: SocketAddr, reason: String },
    #[error("cannot start thread: {0}")]
    Thread(std::io::Error),
}

/// Where decoded pictures go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// An SDL2 window (needs a display: X11 or Wayland).
    Window,
    /// No window: pictures are decoded, stamped times read, then dropped.
    Headless,
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub host: SocketAddr,
    pub client: ClientToml,
    pub network: NetworkToml,
    pub display: Display,
    /// Stop after this long (None: until the window closes, the host leaves or `stop` is set).
    pub duration: Option<Duration>,
    /// Write the last shown picture here as a binary PPM (P6).
    pub save_frame: Option<PathBuf>,
}

/// One decoded picture on its way to the presenter.
struct Decoded {
    picture: DecodedFrame,
    record: FrameRecord,
}

/// Everything the client knows about one frame it decoded.
#[derive(Clone, Debug, Default)]
pub struct FrameRecord {
    pub frame_number: u32,
    pub keyframe: bool,
    /// Host clock.
    pub capture_us: Micros,
    pub first_shard_us: Micros,
    pub last_shard_us: Micros,
    pub decode_start_us: Micros,
    pub decode_end_us: Micros,
    /// 0 when the picture was never shown (a newer one replaced it first).
    pub shown_us: Micros,
    pub bytes: usize,
    pub stamp: Option<Stamp>,
    /// A 16×9 grid of luma samples from below the stamp: enough to see that the picture
    /// changed (input took effect, or a freeze), far too little to store pictures.
    pub thumbnail: Vec<u8>,
}

/// What one client run measured.
#[derive(Clone, Debug, Default)]
pub struct ClientRun {
    pub params: Option<SessionParams>,
    pub started_us: Micros,
    pub connected_us: Option<Micros>,
    pub ended_us: Micros,
    pub records: Vec<FrameRecord>,
    pub timings: HashMap<u32, FrameTiming>,
    pub stats: ClientStats,
    pub clock: Option<ClockEstimate>,
    pub decode_errors: u64,
    pub decoded: u64,
    pub shown: u64,
    pub dropped_presenter: u64,
    pub stamp_unreadable: u64,
    pub inputs_sent: u64,
    /// Input events the session refused (too many unacknowledged: the host is unreachable).
    pub inputs_refused: u64,
    /// Input response samples: (seq, sent_us, reflected_in_decoded_frame_us), client clock.
    pub input_responses: Vec<(u32, Micros, Micros)>,
    pub pings: Vec<u64>,
    pub outcome: Option<String>,
}

/// The most frames whose records we keep (10 minutes at 60 fps).
const MAX_RECORDS: usize = 36_000;

struct Shared {
    host: SocketAddr,
    session: Mutex<ClientSession>,
    socket: UdpEndpoint,
    stop: AtomicBool,
    decoded: Slot<Decoded>,
    run: Mutex<ClientRun>,
    failure: Mutex<Option<ClientError>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn finish(&self, error: Option<ClientError>) {
        if let Some(e) = error {
            lock(&self.failure).get_or_insert(e);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.decoded.close();
    }

    fn flush(&self, session: &mut ClientSession, now: Micros) {
        while let Some(payload) = session.poll_transmit(now) {
            // ECONNREFUSED from an earlier datagram can surface on send too; the receive
            // path reports it.
            let _ = self.socket.send(&payload);
        }
    }
}

/// Runs a client until the duration ends, the window closes, `stop` is set, or the session
/// fails. The presenter runs on the calling thread.
pub fn run_client(
    options: &ClientOptions,
    stop: Arc<AtomicBool>,
) -> Result<ClientRun, ClientError> {
    let socket = UdpEndpoint::connect_to(options.host)?;
    let now = now_us();
    let c = &options.client;
    let mut cfg = ClientConfig::new(c.name.clone());
    cfg.nonce = now ^ ((std::process::id() as u64) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    cfg.connect_timeout_us = c.connect_timeout_ms * 1000;
    cfg.reassembly_deadline_us = c.reassembly_deadline_ms * 1000;
    cfg.keepalive_us = options.network.keepalive_ms * 1000;
    cfg.idle_timeout_us = options.network.idle_timeout_ms * 1000;
    let decoder = Decoder::new(c.decoder_threads)?;
    let shared = Arc::new(Shared {
        host: options.host,
        session: Mutex::new(ClientSession::new(cfg, now)),
        socket: socket.try_clone()?,
        stop: AtomicBool::new(false),
        decoded: Slot::new(),
        run: Mutex::new(ClientRun {
            started_us: now,
            ..Default::default()
        }),
        failure: Mutex::new(None),
    });
    {
        let mut session = lock(&shared.session);
        shared.flush(&mut session, now);
    }
    let net = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("client-net".into())
            .spawn(move || network_loop(&s, socket, decoder))
            .map_err(ClientError::Thread)?
    };
    let presenter_result = present_loop(&shared, options, &stop);
    {
        let now = now_us();
        let mut session = lock(&shared.session);
        if session.is_connected() {
            session.close(now);
            shared.flush(&mut session, now);
        }
    }
    shared.finish(None);
    let _ = net.join();
    if let Some(e) = lock(&shared.failure).take() {
        return Err(e);
    }
    presenter_result?;
    let mut run = std::mem::take(&mut *lock(&shared.run));
    let session = lock(&shared.session);
    run.stats = session.stats();
    run.clock = session.clock();
    run.dropped_presenter = shared.decoded.replaced();
    run.ended_us = now_us();
    Ok(run)
}

fn network_loop(s: &Shared, socket: UdpEndpoint, mut decoder: Decoder) {
    let mut buf = vec![0u8; untether_net::MAX_DATAGRAM];
    let mut events = Vec::new();
    let port = s.host.port();
    while !s.stop.load(Ordering::SeqCst) {
        let wake = lock(&s.session).poll_timeout();
        let now = now_us();
        let wait = wake.map_or(50_000, |t| t.saturating_sub(now)).min(50_000);
        let received = match socket.recv(&mut buf, Duration::from_micros(wait)) {
            Ok(r) => r,
            Err(e) => return s.finish(Some(e.into())),
        };
        let now = now_us();
        {
            let mut session = lock(&s.session);
            match received {
                Received::Datagram(n, _) => session.handle_datagram(now, &buf[..n]),
                Received::Refused => {
                    // Before the session starts, a refusal means nobody listens; later it
                    // means the host process is gone.
                    let err = if session.is_connected() {
                        ClientError::HostGone {
                            host: s.host,
                            reason: "its port is closed (the host process stopped)".into(),
                        }
                    } else {
                        ClientError::Refused { host: s.host, port }
                    };
                    return s.finish(Some(err));
                }
                Received::TimedOut => {}
            }
            if session.poll_timeout().is_some_and(|t| t <= now) {
                session.handle_timeout(now);
            }
            while let Some(ev) = session.poll_event() {
                events.push(ev);
            }
            s.flush(&mut session, now);
        }
        for ev in events.drain(..) {
            match ev {
                ClientEvent::Connected(params) => {
                    log::info!(
                        "client: connected to {}: {}x{} @ {} fps, {:?}, {} kbit/s",
                        s.host,
                        params.width,
                        params.height,
                        params.fps,
                        params.codec,
                        params.bitrate_kbps
                    );
                    let mut run = lock(&s.run);
                    run.params = Some(params);
                    run.connected_us = Some(now_us());
                }
                ClientEvent::Rejected { reason, message } => {
                    return s.finish(Some(ClientError::Rejected {
                        host: s.host,
                        reason,
                        message,
                    }))
                }
                ClientEvent::ConnectTimeout => {
                    let secs = (now_us() - lock(&s.run).started_us) as f64 / 1e6;
                    return s.finish(Some(ClientError::NoAnswer {
                        host: s.host,
                        secs,
                        port,
                    }));
                }
                ClientEvent::HostGone(reason) => {
                    let reason = match reason {
                        GoneReason::Timeout => {
                            "silent for longer than the idle timeout".to_string()
                        }
                        GoneReason::Bye => "it closed the session".to_string(),
                        GoneReason::Replaced => "another run of this client took over".to_string(),
                    };
                    return s.finish(Some(ClientError::HostGone {
                        host: s.host,
                        reason,
                    }));
                }
                ClientEvent::Frame(frame) => {
                    let decode_start_us = now_us();
                    match decoder.decode(&frame.data) {
                        Ok(Some(picture)) => {
                            let decode_end_us = now_us();
                            lock(&s.session).note_decode_time(decode_end_us - decode_start_us);
                            let (plane, stride) = picture.luma();
                            let stamp =
                                stamp::read_plane(plane, stride, picture.width(), picture.height());
                            let record = FrameRecord {
                                frame_number: frame.frame_number,
                                keyframe: frame.keyframe,
                                capture_us: frame.capture_us,
                                first_shard_us: frame.first_shard_us,
                                last_shard_us: frame.last_shard_us,
                                decode_start_us,
                                decode_end_us,
                                shown_us: 0,
                                bytes: frame.data.len(),
                                stamp,
                                thumbnail: thumbnail(
                                    plane,
                                    stride,
                                    picture.width(),
                                    picture.height(),
                                ),
                            };
                            {
                                let mut run = lock(&s.run);
                                run.decoded += 1;
                                if stamp.is_none() {
                                    run.stamp_unreadable += 1;
                                }
                            }
                            if let Some(old) = s.decoded.put(Decoded { picture, record }) {
                                keep_record(&mut lock(&s.run), old.record);
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            log::warn!(
                                "client: frame {} failed to decode: {e}",
                                frame.frame_number
                            );
                            lock(&s.run).decode_errors += 1;
                            let now = now_us();
                            let mut session = lock(&s.session);
                            session.decode_failed(now, frame.frame_number);
                            s.flush(&mut session, now);
                        }
                    }
                }
                ClientEvent::FrameTiming(t) => {
                    let mut run = lock(&s.run);
                    if run.timings.len() < MAX_RECORDS {
                        run.timings.insert(t.frame_number, t);
                    }
                }
                ClientEvent::Rtt(us) => {
                    let mut run = lock(&s.run);
                    if run.pings.len() < MAX_RECORDS {
                        run.pings.push(us);
                    }
                }
                ClientEvent::FrameLost { .. }
                | ClientEvent::FrameSkipped { .. }
                | ClientEvent::InputAcked { .. } => {}
            }
        }
    }
}

/// Samples a 16×9 grid of an 8-bit plane, avoiding the stamp at the top-left.
pub fn thumbnail(plane: &[u8], stride: usize, width: u32, height: u32) -> Vec<u8> {
    let (_, stamp_h) = stamp::stamp_area(width, height);
    let top = stamp_h as usize + 8;
    let (w, h) = (width as usize, height as usize);
    let mut out = Vec::with_capacity(144);
    if h <= top + 9 {
        return out;
    }
    for gy in 0..9 {
        let y = top + (h - top) * (2 * gy + 1) / 18;
        for gx in 0..16 {
            let x = w * (2 * gx + 1) / 32;
            out.push(plane.get(y * stride + x).copied().unwrap_or(0));
        }
    }
    out
}

fn keep_record(run: &mut ClientRun, record: FrameRecord) {
    if run.records.len() < MAX_RECORDS {
        run.records.push(record);
    }
}

/// Turns window events into protocol input events.
pub fn window_input(event: &WindowEvent) -> Option<InputEvent> {
    match *event {
        WindowEvent::Key { code, down, repeat } if !repeat => Some(InputEvent::Key {
            code: code as u32,
            down,
        }),
        WindowEvent::MouseMotion { x, y, dx, dy } => {
            Some(InputEvent::PointerMotion { x, y, dx, dy })
        }
        WindowEvent::MouseButton { button, down } => Some(InputEvent::MouseButton { button, down }),
        WindowEvent::Wheel { dx, dy } => Some(InputEvent::Wheel { dx, dy }),
        WindowEvent::Key { .. } | WindowEvent::Quit => None,
    }
}

fn present_loop(s: &Shared, options: &ClientOptions, stop: &AtomicBool) -> Result<(), ClientError> {
    let started = now_us();
    let end = options.duration.map(|d| started + d.as_micros() as u64);
    let mut presenter: Option<Box<dyn Presenter>> = None;
    // Input events sent and not yet seen reflected in a decoded frame: seq → sent time.
    let mut awaiting: BTreeMap<u32, Micros> = BTreeMap::new();
    let probe_every = options.client.input_probe_interval_ms * 1000;
    let mut next_probe = started + 1_000_000;
    let mut probe_sign = 1;
    let mut last_picture: Option<DecodedFrame> = None;
    loop {
        if stop.load(Ordering::SeqCst) || s.stop.load(Ordering::SeqCst) {
            break;
        }
        let now = now_us();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let mut inputs = Vec::new();
        if let Some(p) = presenter.as_mut() {
            for ev in p.poll_events() {
                if ev == WindowEvent::Quit {
                    s.finish(None);
                    break;
                }
                inputs.extend(window_input(&ev));
            }
        }
        let connected = lock(&s.session).is_connected();
        if probe_every > 0 && connected && now >= next_probe {
            // A synthetic look-around: alternating small turns, each reflected in the picture.
            inputs.push(InputEvent::PointerMotion {
                x: 0,
                y: 0,
                dx: 8 * probe_sign,
                dy: 0,
            });
            probe_sign = -probe_sign;
            next_probe = now + probe_every;
        }
        if !inputs.is_empty() && connected {
            let now = now_us();
            let mut session = lock(&s.session);
            for ev in inputs {
                match session.send_input(now, ev) {
                    Some(seq) => {
                        if awaiting.len() < 4096 {
                            awaiting.insert(seq, now);
                        }
                        lock(&s.run).inputs_sent += 1;
                    }
                    None => lock(&s.run).inputs_refused += 1,
                }
            }
            s.flush(&mut session, now);
        }
        let Some(mut item) = s.decoded.take(Duration::from_millis(4)) else {
            continue;
        };
        if presenter.is_none() {
            presenter = Some(match options.display {
                Display::Window => Box::new(SdlPresenter::new(
                    &format!("untether — {}", options.host),
                    item.picture.width(),
                    item.picture.height(),
                    false,
                )?),
                Display::Headless => Box::new(HeadlessPresenter),
            });
        }
        if let Some(p) = presenter.as_mut() {
            p.present(&item.picture)?;
        }
        item.record.shown_us = now_us();
        let mut run = lock(&s.run);
        run.shown += 1;
        if let Some(stamp) = item.record.stamp {
            // Every event numbered below the stamp's count has been applied by the scene.
            let reflected: Vec<u32> = awaiting.range(..stamp.input_seq).map(|(k, _)| *k).collect();
            for seq in reflected {
                if let Some(sent) = awaiting.remove(&seq) {
                    run.input_responses
                        .push((seq, sent, item.record.decode_end_us));
                }
            }
        }
        keep_record(&mut run, item.record);
        drop(run);
        if options.save_frame.is_some() {
            last_picture = Some(item.picture);
        }
    }
    if let (Some(path), Some(picture)) = (&options.save_frame, last_picture) {
        save_ppm(&picture, path)?;
    }
    Ok(())
}

/// Writes a decoded picture as a binary PPM.
pub fn save_ppm(picture: &DecodedFrame, path: &std::path::Path) -> Result<(), ClientError> {
    let bgra = picture.to_bgra()?;
    let mut out = format!("P6\n{} {}\n255\n", bgra.width, bgra.height).into_bytes();
    for y in 0..bgra.height {
        for px in bgra.row(y).chunks_exact(4) {
            out.extend_from_slice(&[px[2], px[1], px[0]]);
        }
    }
    std::fs::write(path, out).map_err(|e| {
        ClientError::Media(untether_media::MediaError::Other(format!(
            "cannot write {}: {e}",
            path.display()
        )))
    })
}
