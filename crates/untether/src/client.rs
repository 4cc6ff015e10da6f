//! The client: UDP → frame assembly → H.264 decoder → presenter, and the window's input back
//! to the host.
//!
//! Two threads: **network** (receive, reassemble via the protocol session, decode, read the
//! pixel stamp) hands each decoded picture through a latest-wins slot to the **presenter**,
//! which runs on the calling thread (SDL wants the thread that made the window), shows the
//! newest picture (and/or writes it to a pipe sink) and sends the window's input events
//! straight to the host.
//!
//! With [`run_client_with`] and a [`ClientIo`]: one thread per registered input device reads
//! its evdev records and sends them (buttons in order, axes coalesced per report), and audio
//! packets go from the network thread into a [`Playout`] that SDL's audio callback drains.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use untether_media::audio::{AudioOut, Played, Playout, PlayoutStats, Tap};
use untether_media::codec::{DecodedFrame, Decoder};
use untether_media::evdev::{DeviceEvent, DeviceReader};
use untether_media::pipe::PipeWriter;
use untether_media::present::{HeadlessPresenter, Presenter, SdlPresenter, WindowEvent};
use untether_media::stamp::{self, Stamp};
use untether_net::{Received, UdpEndpoint};
use untether_proto::state::keys as state_keys;
use untether_proto::{
    fingerprint, ClientConfig, ClientEvent, ClientSession, ClientStats, ClockEstimate,
    CompleteFrame, FrameTiming, GoneReason, InputEvent, Micros, PublicKey, RejectReason, Route,
    SessionParams, StateValue,
};

use crate::clock::now_us;
use crate::config::{ClientToml, NetworkToml};
use crate::identity::{ClientTrust, IdentityError, Role, StateDir, KNOWN_HOSTS_FILE};
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
    #[error(
        "host {host} presented a different key than the one this client trusts for {label:?}: {message}. \
         If the host's identity was reset on purpose, remove the entry for {label:?} from {file} \
         (or the whole file) and connect again; otherwise do not connect"
    )]
    HostKeyChanged {
        host: SocketAddr,
        label: String,
        file: PathBuf,
        message: String,
    },
    #[error("identity: {0}")]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
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

/// A Linux input device (or anything carrying evdev `input_event` records: a pipe, a socket)
/// whose events the client sends to the host.
pub struct InputDevice {
    pub name: String,
    file: File,
}

impl InputDevice {
    /// Opens `/dev/input/eventN` (or any path carrying evdev records: a FIFO, a character
    /// device) for reading.
    pub fn open(path: &std::path::Path) -> Result<InputDevice, ClientError> {
        let file = File::open(path).map_err(|e| {
            ClientError::Media(untether_media::MediaError::Other(format!(
                "cannot open input device {}: {e}{}",
                path.display(),
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (add yourself to the `input` group)"
                } else {
                    ""
                }
            )))
        })?;
        let name = untether_media::evdev::device_name(file.as_fd())
            .unwrap_or_else(|| path.display().to_string());
        Ok(InputDevice { name, file })
    }

    /// Takes an open file descriptor (a device, a pipe's read end, a socket).
    pub fn from_fd(fd: OwnedFd, name: impl Into<String>) -> InputDevice {
        let file = File::from(fd);
        let name = untether_media::evdev::device_name(file.as_fd()).unwrap_or(name.into());
        InputDevice { name, file }
    }
}

impl std::fmt::Debug for InputDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InputDevice({:?}, fd {})",
            self.name,
            self.file.as_raw_fd()
        )
    }
}

/// Client audio playback.
#[derive(Clone, Debug)]
pub struct ClientAudio {
    /// SDL output device name (None: the default).
    pub device: Option<String>,
    /// Device buffer in samples (240 = 5 ms at 48 kHz).
    pub buffer_samples: u16,
    /// Record what is played (left channel) for this many seconds, into the run.
    pub tap_seconds: u32,
}

impl Default for ClientAudio {
    fn default() -> Self {
        ClientAudio {
            device: None,
            buffer_samples: 240,
            tap_seconds: 0,
        }
    }
}

/// Sees every shown picture with its record, after it was shown and timed (so off that
/// frame's path): for picture-quality measurement. Runs on the presenter thread: keep it short.
pub struct ShownFrameTap(pub ShownFrameFn);

/// The function a [`ShownFrameTap`] calls.
pub type ShownFrameFn = Box<dyn FnMut(&FrameRecord, &DecodedFrame) + Send>;

impl std::fmt::Debug for ShownFrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShownFrameTap")
    }
}

/// What the client does beyond showing the stream: a pipe sink, input devices, audio.
#[derive(Debug, Default)]
pub struct ClientIo {
    /// Write every decoded picture as raw I420 here (`-`: standard output), flushed per frame.
    pub sink: Option<String>,
    /// Devices whose evdev records go to the host; numbered 0, 1, … in this order.
    pub input_devices: Vec<InputDevice>,
    pub audio: Option<ClientAudio>,
    /// Treat the host's goodbye as the normal end of the stream (a pipeline whose input ended)
    /// rather than an error.
    pub end_on_host_bye: bool,
    /// Events the application sends itself (its own head tracking, synthetic input), sent
    /// like the window's (pointer motion and head pose on the latest-wins state channel).
    pub inject: Option<std::sync::mpsc::Receiver<InputEvent>>,
    /// Sees every shown picture, see [`ShownFrameTap`].
    pub shown_frame_tap: Option<ShownFrameTap>,
    /// The client's identity and the host keys it trusts: the state directory (default) or
    /// in memory.
    pub trust: ClientTrust,
    /// Pair with the host using this one-time PIN (shown by the host).
    pub pin: Option<String>,
    /// The name the host's key is pinned under in `known_hosts.json` (default: its address).
    pub host_label: Option<String>,
}

/// What the audio playback measured.
#[derive(Clone, Debug, Default)]
pub struct AudioRun {
    pub driver: String,
    pub buffer_samples: u16,
    pub stats: PlayoutStats,
    /// When each packet's first sample left the device.
    pub played: Vec<Played>,
    /// The playout targets the buffer moved to, µs.
    pub targets: Vec<u64>,
    pub final_target_us: u64,
    pub tap: Option<Tap>,
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
    /// Pointer positions and head poses set on the latest-wins state channel.
    pub state_updates: u64,
    /// The host's key (authenticated by the handshake), once connected.
    pub host_key: Option<PublicKey>,
    /// Input events the session refused (too many unacknowledged: the host is unreachable).
    pub inputs_refused: u64,
    /// Input response samples: (seq, sent_us, reflected_in_decoded_frame_us), client clock.
    pub input_responses: Vec<(u32, Micros, Micros)>,
    pub pings: Vec<u64>,
    pub outcome: Option<String>,
    /// Audio playback, when enabled.
    pub audio: Option<AudioRun>,
    /// Frames written to the pipe sink.
    pub sink_frames: u64,
    /// Events read from registered input devices and sent.
    pub device_events: u64,
    /// The host address of each path (path 0: the main one; more with `client.paths`).
    pub paths: Vec<SocketAddr>,
}

/// The most frames whose records we keep (10 minutes at 60 fps).
const MAX_RECORDS: usize = 36_000;

/// Where the client pins the host's key (trust on first use).
struct KnownHosts {
    dir: StateDir,
    label: String,
    /// The key pinned before this run.
    pinned: Option<PublicKey>,
}

struct Shared {
    host: SocketAddr,
    known_hosts: Option<KnownHosts>,
    playout: Option<Arc<Mutex<Playout>>>,
    end_on_host_bye: bool,
    session: Mutex<ClientSession>,
    /// One socket per path (path 0: the main host address), each connected to its host address.
    sockets: Vec<UdpEndpoint>,
    /// The host address of each path.
    paths: Vec<SocketAddr>,
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
        while let Some((route, payload)) = session.poll_transmit_routed(now) {
            // ECONNREFUSED from an earlier datagram can surface on send too; the receive
            // path reports it.
            match route {
                Route::Primary => {
                    let _ = self.sockets[0].send(&payload);
                }
                Route::Path(i) => {
                    if let Some(s) = self.sockets.get(i as usize) {
                        let _ = s.send(&payload);
                    }
                }
                Route::All => {
                    for s in &self.sockets {
                        let _ = s.send(&payload);
                    }
                }
            }
        }
    }
}

/// Runs a client until the duration ends, the window closes, `stop` is set, or the session
/// fails. The presenter runs on the calling thread.
pub fn run_client(
    options: &ClientOptions,
    stop: Arc<AtomicBool>,
) -> Result<ClientRun, ClientError> {
    run_client_with(options, ClientIo::default(), stop)
}

/// Like [`run_client`], with a pipe sink, input devices and audio playback from `io`.
pub fn run_client_with(
    options: &ClientOptions,
    io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<ClientRun, ClientError> {
    crate::config::validate_client(&options.client, &options.network)?;
    let mut sink = match &io.sink {
        Some(path) => Some(PipeWriter::open(path)?),
        None => None,
    };
    let (playout, audio_out) = match &io.audio {
        Some(a) => {
            let mut p = Playout::new()?;
            if a.tap_seconds > 0 {
                p.enable_tap(a.tap_seconds);
            }
            let p = Arc::new(Mutex::new(p));
            let out = AudioOut::open(a.device.as_deref(), p.clone(), a.buffer_samples)?;
            log::info!(
                "client: audio through {} ({} sample buffer)",
                out.driver(),
                out.buffer_samples()
            );
            (Some(p), Some(out))
        }
        None => (None, None),
    };
    let c = &options.client;
    let mut cfg = ClientConfig::new(c.name.clone());
    let known_hosts = match &io.trust {
        ClientTrust::Stored => {
            let explicit =
                (!c.state_dir.is_empty()).then(|| std::path::Path::new(c.state_dir.as_str()));
            let dir = StateDir::resolve(explicit)?;
            cfg.identity = dir.load_or_create_identity(Role::Client)?;
            let label = io
                .host_label
                .clone()
                .unwrap_or_else(|| options.host.to_string());
            let pinned = dir.known_host(&label)?;
            cfg.host_key = pinned;
            Some(KnownHosts { dir, label, pinned })
        }
        ClientTrust::Memory { identity, host_key } => {
            cfg.identity = identity.clone();
            cfg.host_key = *host_key;
            None
        }
    };
    cfg.pin = io.pin.clone();
    log::info!(
        "client: identity {}{}",
        fingerprint(&cfg.identity.public),
        match cfg.host_key {
            Some(k) => format!(", expecting host {}", fingerprint(&k)),
            None => String::new(),
        }
    );
    let mut sockets = vec![UdpEndpoint::connect_to(options.host)?];
    let mut paths = vec![options.host];
    for spec in &c.paths {
        let (local, addr) = crate::config::parse_path(spec, options.host.port()).map_err(|e| {
            crate::config::ConfigError::Invalid {
                key: "client.paths".into(),
                message: e,
            }
        })?;
        sockets.push(UdpEndpoint::connect_from(local, addr)?);
        paths.push(addr);
        log::info!(
            "client: path {} to {addr}{}",
            paths.len() - 1,
            local.map(|l| format!(" from {l}")).unwrap_or_default()
        );
    }
    let now = now_us();
    cfg.nonce = now ^ ((std::process::id() as u64) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    cfg.connect_timeout_us = c.connect_timeout_ms * 1000;
    cfg.reassembly_deadline_us = c.reassembly_deadline_ms * 1000;
    cfg.keepalive_us = options.network.keepalive_ms * 1000;
    cfg.idle_timeout_us = options.network.idle_timeout_ms * 1000;
    cfg.retransmit = options.network.retransmit;
    let decoder = Decoder::new(c.decoder_threads)?;
    let shared = Arc::new(Shared {
        host: options.host,
        known_hosts,
        playout: playout.clone(),
        end_on_host_bye: io.end_on_host_bye,
        session: Mutex::new(ClientSession::new(cfg, now)),
        sockets: sockets
            .iter()
            .map(UdpEndpoint::try_clone)
            .collect::<Result<_, _>>()?,
        paths,
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
    let (frames_tx, frames_rx) = mpsc::channel();
    let net = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("client-net".into())
            .spawn(move || network_loop(&s, sockets, frames_tx))
            .map_err(ClientError::Thread)?
    };
    let decode = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("client-decode".into())
            .spawn(move || decode_loop(&s, frames_rx, decoder))
            .map_err(ClientError::Thread)?
    };
    let mut device_threads = Vec::new();
    for (i, dev) in io.input_devices.into_iter().enumerate() {
        let s = shared.clone();
        let index = i.min(255) as u8;
        log::info!("client: input device {index}: {}", dev.name);
        device_threads.push(
            std::thread::Builder::new()
                .name(format!("client-input-{i}"))
                .spawn(move || device_loop(&s, index, dev))
                .map_err(ClientError::Thread)?,
        );
    }
    let presenter_result = present_loop(
        &shared,
        options,
        &stop,
        sink.as_mut(),
        io.inject,
        io.shown_frame_tap,
    );
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
    let _ = decode.join();
    for t in device_threads {
        let _ = t.join();
    }
    // Close the device (waits for its callback) before reading what it played.
    let audio_driver = audio_out.as_ref().map(|o| (o.driver(), o.buffer_samples()));
    drop(audio_out);
    if let Some(e) = lock(&shared.failure).take() {
        return Err(e);
    }
    presenter_result?;
    let mut run = std::mem::take(&mut *lock(&shared.run));
    let session = lock(&shared.session);
    run.stats = session.stats();
    run.paths = shared.paths.clone();
    run.clock = session.clock();
    run.dropped_presenter = shared.decoded.replaced();
    run.ended_us = now_us();
    run.sink_frames = sink.as_ref().map_or(0, |w| w.frames_written());
    if let (Some(p), Some((driver, buffer_samples))) = (playout, audio_driver) {
        let mut p = lock(&p);
        run.audio = Some(AudioRun {
            driver,
            buffer_samples,
            stats: p.stats,
            played: std::mem::take(&mut p.played),
            targets: p.targets().to_vec(),
            final_target_us: p.target_us(),
            tap: p.tap.take(),
        });
    }
    Ok(run)
}

/// Reads one input device until the client stops or the device ends, sending its events.
fn device_loop(s: &Shared, index: u8, dev: InputDevice) {
    let fd = dev.file.as_raw_fd();
    let name = dev.name.clone();
    let mut reader = DeviceReader::new(dev.file);
    let mut events = Vec::new();
    while !s.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the fd stays open (owned by `reader`) during the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, 50) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            log::warn!("client: input device {name}: {e}");
            return;
        }
        if rc == 0 {
            continue;
        }
        match reader.read(&mut events) {
            Ok(true) => {}
            Ok(false) => {
                log::info!("client: input device {name} closed");
                return;
            }
            Err(e) => {
                log::warn!("client: input device {name}: {e}");
                return;
            }
        }
        if events.is_empty() {
            continue;
        }
        let now = now_us();
        let mut session = lock(&s.session);
        if !session.is_connected() {
            // Nothing to send to yet; state (axes) will be current again at the next report.
            events.clear();
            continue;
        }
        let (mut sent, mut refused) = (0, 0);
        for ev in events.drain(..) {
            match session.send_input(now, device_input(index, ev)) {
                Some(_) => sent += 1,
                None => refused += 1,
            }
        }
        s.flush(&mut session, now);
        drop(session);
        let mut run = lock(&s.run);
        run.inputs_sent += sent;
        run.device_events += sent;
        run.inputs_refused += refused;
    }
}

/// The protocol event of a device event of device `index`.
pub fn device_input(index: u8, ev: DeviceEvent) -> InputEvent {
    match ev {
        DeviceEvent::Button { code, down } => InputEvent::Button {
            device: index,
            code,
            down,
        },
        DeviceEvent::Absolute { code, value } => InputEvent::Axis {
            device: index,
            relative: false,
            code,
            value,
        },
        DeviceEvent::Relative { code, value } => InputEvent::Axis {
            device: index,
            relative: true,
            code,
            value,
        },
    }
}

fn network_loop(s: &Shared, sockets: Vec<UdpEndpoint>, frames: mpsc::Sender<CompleteFrame>) {
    // Audio and input acknowledgements pass through here on their way; decoding does not.
    if s.playout.is_some() {
        untether_media::audio::raise_thread_priority();
    }
    let mut buf = vec![0u8; untether_net::MAX_DATAGRAM];
    let mut events = Vec::new();
    let port = s.host.port();
    let refs: Vec<&UdpEndpoint> = sockets.iter().collect();
    let mut received_on: Vec<(usize, Received)> = Vec::new();
    while !s.stop.load(Ordering::SeqCst) {
        let wake = lock(&s.session).poll_timeout();
        let now = now_us();
        let wait = wake.map_or(50_000, |t| t.saturating_sub(now)).min(50_000);
        received_on.clear();
        if sockets.len() == 1 {
            match sockets[0].recv(&mut buf, Duration::from_micros(wait)) {
                Ok(r) => received_on.push((0, r)),
                Err(e) => return s.finish(Some(e.into())),
            }
        } else {
            let ready = match UdpEndpoint::wait_any_readable(&refs, Duration::from_micros(wait)) {
                Ok(r) => r,
                Err(e) => return s.finish(Some(ClientError::Net(e.into()))),
            };
            for (i, r) in ready.into_iter().enumerate() {
                if !r {
                    continue;
                }
                match sockets[i].recv(&mut buf, Duration::ZERO) {
                    Ok(Received::Datagram(n, _)) => {
                        lock(&s.session).handle_datagram_on(now_us(), i, &buf[..n]);
                    }
                    // Another path's host address refusing is that path's problem only.
                    Ok(Received::Refused) if i > 0 => {}
                    Ok(r) => received_on.push((i, r)),
                    Err(e) => return s.finish(Some(e.into())),
                }
            }
            if received_on.is_empty() {
                received_on.push((0, Received::TimedOut));
            }
        }
        let now = now_us();
        for (path, received) in received_on.drain(..) {
            let mut session = lock(&s.session);
            match received {
                Received::Datagram(n, _) => session.handle_datagram_on(now, path, &buf[..n]),
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
                    let host_key = lock(&s.session).host_key();
                    if let (Some(kh), Some(key)) = (&s.known_hosts, host_key) {
                        if kh.pinned.is_none() {
                            // Trust on first use (or after PIN pairing, which proved the key).
                            match kh.dir.trust_host(&kh.label, &key) {
                                Ok(()) => log::info!(
                                    "client: trusting host {} ({}) from now on ({})",
                                    kh.label,
                                    fingerprint(&key),
                                    kh.dir.file_path(KNOWN_HOSTS_FILE).display()
                                ),
                                Err(e) => log::warn!("client: cannot pin the host's key: {e}"),
                            }
                        }
                    }
                    let mut run = lock(&s.run);
                    run.params = Some(params);
                    run.connected_us = Some(now_us());
                    run.host_key = host_key;
                }
                ClientEvent::Rejected {
                    reason: RejectReason::UntrustedHost,
                    message,
                } => {
                    let (label, file) = match &s.known_hosts {
                        Some(kh) => (kh.label.clone(), kh.dir.file_path(KNOWN_HOSTS_FILE)),
                        None => (s.host.to_string(), PathBuf::from("(in memory)")),
                    };
                    return s.finish(Some(ClientError::HostKeyChanged {
                        host: s.host,
                        label,
                        file,
                        message,
                    }));
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
                ClientEvent::HostGone(GoneReason::Bye) if s.end_on_host_bye => {
                    log::info!("client: the host ended the stream");
                    lock(&s.run).outcome = Some("the host ended the stream".into());
                    return s.finish(None);
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
                    // Decoding runs on its own thread so that audio, input acknowledgements
                    // and the next frame's shards are not held behind a decode.
                    if frames.send(frame).is_err() {
                        return;
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
                ClientEvent::Audio(p) => {
                    if let Some(playout) = &s.playout {
                        lock(playout).push(now_us(), p.seq, p.pts_us, &p.opus, &p.prev_opus);
                    }
                }
                ClientEvent::FrameLost { .. }
                | ClientEvent::FrameSkipped { .. }
                | ClientEvent::InputAcked { .. } => {}
            }
        }
    }
}

/// Decodes the frames the network thread assembled, in order, and hands them to the presenter.
fn decode_loop(s: &Shared, frames: mpsc::Receiver<CompleteFrame>, mut decoder: Decoder) {
    while let Ok(frame) = frames.recv() {
        let decode_start_us = now_us();
        match decoder.decode(&frame.data) {
            Ok(Some(picture)) => {
                let decode_end_us = now_us();
                lock(&s.session).note_decode_time(decode_end_us - decode_start_us);
                let (plane, stride) = picture.luma();
                let stamp = stamp::read_plane(plane, stride, picture.width(), picture.height());
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
                    thumbnail: thumbnail(plane, stride, picture.width(), picture.height()),
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
                log::warn!("client: frame {} failed to decode: {e}", frame.frame_number);
                lock(&s.run).decode_errors += 1;
                let now = now_us();
                let mut session = lock(&s.session);
                session.decode_failed(now, frame.frame_number);
                s.flush(&mut session, now);
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

/// The latest-wins state key and value of a continuous input event (pointer position, head
/// pose); None for discrete events (keys, buttons, text, wheel, device axes), which go on the
/// reliable channel.
pub fn state_input(event: &InputEvent) -> Option<(untether_proto::StateKey, StateValue)> {
    match *event {
        InputEvent::PointerMotion { x, y, .. } => {
            Some((state_keys::POINTER, StateValue::Pointer { x, y }))
        }
        InputEvent::HeadPose { yaw, pitch, roll } => Some((
            state_keys::HEAD_POSE,
            StateValue::Angles { yaw, pitch, roll },
        )),
        _ => None,
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

fn present_loop(
    s: &Shared,
    options: &ClientOptions,
    stop: &AtomicBool,
    mut sink: Option<&mut PipeWriter>,
    inject: Option<std::sync::mpsc::Receiver<InputEvent>>,
    mut shown_tap: Option<ShownFrameTap>,
) -> Result<(), ClientError> {
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
        // (event, must go on the reliable channel)
        let mut inputs: Vec<(InputEvent, bool)> = Vec::new();
        if let Some(p) = presenter.as_mut() {
            for ev in p.poll_events() {
                if ev == WindowEvent::Quit {
                    s.finish(None);
                    break;
                }
                inputs.extend(window_input(&ev).map(|e| (e, false)));
            }
        }
        let connected = lock(&s.session).is_connected();
        if connected {
            if let Some(rx) = &inject {
                inputs.extend(rx.try_iter().take(1024).map(|e| (e, false)));
            }
        }
        if probe_every > 0 && connected && now >= next_probe {
            // A synthetic look-around: alternating small turns, each reflected in the picture.
            // It stays on the reliable channel: its response is measured by sequence number.
            inputs.push((
                InputEvent::PointerMotion {
                    x: 0,
                    y: 0,
                    dx: 8 * probe_sign,
                    dy: 0,
                },
                true,
            ));
            probe_sign = -probe_sign;
            next_probe = now + probe_every;
        }
        if !inputs.is_empty() && connected {
            let now = now_us();
            let mut session = lock(&s.session);
            for (ev, reliable) in inputs {
                // Continuous state goes on the latest-wins channel: only the newest value
                // matters, and a lost one is never resent once a newer one exists.
                if let Some((key, value)) = state_input(&ev).filter(|_| !reliable) {
                    if session.send_state(now, key, value) {
                        lock(&s.run).state_updates += 1;
                    }
                    continue;
                }
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
        if let Some(w) = sink.as_deref_mut() {
            if let Err(e) = w.write(&item.picture) {
                // The reader went away (a closed pipe): the pipeline is over.
                log::info!("client: sink: {e}");
                lock(&s.run).outcome = Some(format!("sink closed: {e}"));
                s.finish(None);
            }
        }
        item.record.shown_us = now_us();
        if let Some(tap) = shown_tap.as_mut() {
            (tap.0)(&item.record, &item.picture);
        }
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
