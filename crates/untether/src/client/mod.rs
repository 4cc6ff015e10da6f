//! The client: UDP → frame assembly → decoder → presenter, and the user's input back to the
//! host.
//!
//! The files follow the pipeline:
//! - `network`: the driver thread that owns the protocol session and one socket per path
//!   (the loop in [`crate::driver`]); it assembles frames, plays audio into the playout buffer
//!   and sends input;
//! - `decode`: the decode thread, handing pictures to the presenter through a latest-wins
//!   slot;
//! - `present`: the presenter on the calling thread (SDL wants the thread that made the
//!   window) and/or a pipe sink, the window's input, input response timing;
//! - `input`: the window's own keys, registered evdev devices (a thread each) and which
//!   channel each event takes;
//! - `live`: the running statistics the window's overlay shows;
//! - `options`: what the client is told; `record`: what a run measured.
//!
//! No thread but the driver touches the session: the others hand it commands.

mod decode;
mod input;
mod live;
mod network;
mod options;
pub mod photon;
mod pose;
mod present;
mod record;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};

use untether_media::audio::{AudioOut, Playout};
use untether_media::codec::{Decoder, DecoderConfig};
use untether_media::pipe::PipeWriter;
use untether_net::UdpEndpoint;
use untether_proto::{fingerprint, ClientConfig, ClientSession, RejectReason};

use crate::clock::now_us;
use crate::config::PoseSpec;
use crate::driver;
use crate::identity::{ClientTrust, HostPin, IdentityError, Role, StateDir, KNOWN_HOSTS_FILE};
use crate::slot::Slot;

pub use decode::thumbnail;
pub use input::{
    device_input, state_input, window_input, Routed, WindowAction, WindowKeys, WINDOW_KEYS,
};
pub use options::{
    ClientAudio, ClientIo, ClientOptions, Display, InputDevice, ShownFrameFn, ShownFrameTap,
    WarpFn, WarpSource,
};
pub use pose::{HostStateView, LocalPose};
pub use present::save_ppm;
pub use record::{AudioRun, ClientRun, ClockMode, FrameRecord};

use decode::Decoded;
use network::{ClientCommand, ClientNet, KnownHosts};

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
        "host {host} presented a different key than the one this client trusts for {label}: {message}. \
         If the host's identity was reset on purpose, remove the entry for {label} from {file} \
         (or the whole file) and connect again; otherwise do not connect"
    )]
    HostKeyChanged {
        host: SocketAddr,
        /// The known-hosts entries that pinned the key, quoted (`"NAME" (ADDR)`).
        label: String,
        file: PathBuf,
        message: String,
    },
    #[error(
        "{file} pins different keys for host {host} named {label:?}: {entries}. One of them is \
         wrong (an impostor was trusted under one name, or the host's identity was reset): \
         check the host's fingerprint (`untether pair` on the host shows it), remove the wrong \
         entry from {file} and connect again"
    )]
    HostPinConflict {
        host: SocketAddr,
        label: String,
        /// Each disagreeing entry and the fingerprint it pins.
        entries: String,
        file: PathBuf,
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

/// What the client's threads share besides the network driver.
pub(crate) struct ClientShared {
    host: SocketAddr,
    stop: AtomicBool,
    /// Published by the driver after every turn.
    connected: AtomicBool,
    /// The host went away and the driver is trying to reach it again (the presenter holds the
    /// last picture and says so).
    reconnecting: AtomicBool,
    /// The role the host gave this client last: (role, input granted, paused).
    role: Mutex<Option<(untether_proto::ClientRole, bool, bool)>>,
    decoded: Slot<Decoded>,
    /// The pose each recent frame was rendered for (from the host's FramePose).
    frame_poses: pose::FramePoses,
    /// The newest local head poses (the pose source's), for late warp and pose-to-photon.
    pub(crate) local_pose: Arc<LocalPose>,
    /// Mouse-look, when it is the pose source: window mouse motion turns the head.
    mouse_look: Option<crate::pose::MouseLook>,
    /// Where the host's published state is copied for the application.
    host_state: Option<HostStateView>,
    run: Mutex<ClientRun>,
    /// The driver's counters for the overlay, published every 250 ms (a copy under the lock).
    live: Mutex<Option<live::NetSnapshot>>,
    /// Paths to the host (1 without multipath).
    paths: usize,
    failure: Mutex<Option<ClientError>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientShared {
    /// Ends the run (the first error is the one reported).
    fn finish(&self, error: Option<ClientError>) {
        if let Some(e) = error {
            lock(&self.failure).get_or_insert(e);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.decoded.close();
    }
}

/// The report of a client that wanted raw layer 2 but stays on UDP.
fn link_note(line: &str) -> crate::link::LinkReport {
    crate::link::LinkReport {
        configured: "raw".into(),
        note: Some(line.to_string()),
        ..crate::link::LinkReport::udp()
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
    match run_client_to_end(options, io, stop)? {
        (run, None) => Ok(run),
        (_, Some(e)) => Err(e),
    }
}

/// Like [`run_client_with`], but a run that started is returned with the error that ended it
/// (None: it ended normally), so that its report can be shown on every exit. `Err`: it could
/// not start (configuration, sockets, identity, devices).
pub fn run_client_to_end(
    options: &ClientOptions,
    io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<(ClientRun, Option<ClientError>), ClientError> {
    crate::config::validate_client(&options.client, &options.network)?;
    options.vr.validate()?;
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
    // No session without the OS random generator (keys, nonces): stop, saying so.
    crate::identity::check_random()?;
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
            // Pinned by the name typed and by the address it resolved to: `localhost:P` and
            // `127.0.0.1:P` are one host, and must not be trusted with two keys.
            let addr = options.host.to_string();
            let (pinned, pinned_by) = match dir.host_pin(&label, &addr)? {
                HostPin::None => (None, Vec::new()),
                HostPin::Key { key, by } => (Some(key), by),
                HostPin::Conflict { entries } => {
                    return Err(ClientError::HostPinConflict {
                        host: options.host,
                        label,
                        entries: entries
                            .iter()
                            .map(|(entry, fp)| format!("{entry} pins {fp}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                        file: dir.file_path(KNOWN_HOSTS_FILE),
                    });
                }
            };
            cfg.host_key = pinned;
            Some(KnownHosts {
                dir,
                label,
                addr,
                pinned,
                pinned_by,
            })
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
    let (raw, link) =
        if options.network.transport()? == crate::config::Transport::Raw && !c.paths.is_empty() {
            let line = "raw layer 2 does not combine with multipath (client.paths); staying on UDP";
            log::warn!("client: {line}");
            (None, Some(link_note(line)))
        } else {
            match crate::link::open(&options.network, || {
                crate::link::client_interface(options.host)
            })? {
                crate::link::Opened::Udp => (None, None),
                crate::link::Opened::Raw(r) => {
                    log::info!(
                    "client: raw layer 2 on {} ({}, EtherType 0x{:04X}): offering it to the host",
                    r.interface(),
                    r.mac(),
                    r.ethertype()
                );
                    (Some(r), None)
                }
                crate::link::Opened::Fallback(_, line) => {
                    log::warn!("client: {line}");
                    (None, Some(link_note(&line)))
                }
            }
        };
    let now = now_us();
    cfg.nonce = now ^ ((std::process::id() as u64) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    cfg.connect_timeout_us = c.connect_timeout_ms * 1000;
    cfg.reassembly_deadline_us = c.reassembly_deadline_ms * 1000;
    cfg.keepalive_us = options.network.keepalive_ms * 1000;
    cfg.idle_timeout_us = options.network.idle_timeout_ms * 1000;
    cfg.retransmit = options.network.retransmit;
    cfg.state_budget_bytes_per_s = options.network.state_budget_bytes_per_s();
    cfg.clock_id = untether_net::clock_identity();
    // What this client decodes: the configured list, less the codecs no decoder here opens
    // (checked now, so that the host never picks one).
    let (choice, hwaccel) = c.decoder_choice()?;
    let decoder_cfg = DecoderConfig {
        codec: untether_media::codec::Codec::H264,
        decoder: choice,
        hwaccel,
        threads: c.decoder_threads,
        keep_on_gpu: false,
        chunks: false,
    };
    cfg.codecs = decodable(&c.codec_list()?, &decoder_cfg)?;
    // `--no-decode` (a load-test viewer): frames are reassembled and counted, never decoded
    // (the client still offers only codecs it could decode).
    if !c.decode {
        log::info!("client: --no-decode: frames are reassembled and counted, not decoded");
    }
    // The head pose source: a failure to open it (no IMU, a bad track) stops the start.
    let pose_spec = options.vr.pose_spec()?;
    let mouse = crate::pose::MouseLook::default();
    let pose_source = crate::pose::open(
        &pose_spec,
        options.display == Display::Window,
        &mouse,
        now_us(),
    )
    .map_err(|e| ClientError::Media(untether_media::MediaError::Other(e.to_string())))?;
    if let Some(src) = &pose_source {
        log::info!(
            "client: head pose from {} at {} Hz",
            src.name(),
            options.vr.pose_rate_hz
        );
    }
    let shared = Arc::new(ClientShared {
        host: options.host,
        stop: AtomicBool::new(false),
        connected: AtomicBool::new(false),
        reconnecting: AtomicBool::new(false),
        role: Mutex::new(None),
        decoded: Slot::new(),
        frame_poses: Default::default(),
        host_state: io.host_state.clone(),
        local_pose: Default::default(),
        mouse_look: pose_source
            .as_ref()
            .and(matches!(pose_spec, PoseSpec::Auto | PoseSpec::Mouse).then(|| mouse.clone())),
        run: Mutex::new(ClientRun {
            started_us: now,
            decoding: c.decode,
            ..Default::default()
        }),
        live: Mutex::new(None),
        paths: paths.len(),
        failure: Mutex::new(None),
    });
    let session = ClientSession::new(cfg.clone(), now);
    let (net, mailbox) = driver::channel().map_err(|e| ClientError::Net(e.into()))?;
    let (frames_tx, frames_rx) = mpsc::channel();
    let (sent_tx, sent_rx) = mpsc::channel();
    let mut client_net = ClientNet::new(
        cfg,
        session,
        shared.clone(),
        known_hosts,
        playout.clone(),
        c.decode.then_some(frames_tx),
        sent_tx,
        io.end_on_host_bye,
    );
    if let Some(r) = &raw {
        client_net.link = Some(crate::link::ClientLink::new(
            r.mac(),
            r.ethertype(),
            options.host,
            r.interface(),
        ));
    }
    let net_thread = {
        let s = shared.clone();
        let with_audio = playout.is_some();
        std::thread::Builder::new()
            .name("client-net".into())
            .spawn(move || {
                // Audio and input acknowledgements pass through here on their way; decoding
                // does not.
                if with_audio {
                    untether_media::audio::raise_thread_priority();
                }
                let ended = driver::run_with_raw(
                    &mut client_net,
                    &sockets,
                    raw.as_ref(),
                    &mailbox,
                    &s.stop,
                );
                if let driver::Ended::Failed(e) = ended {
                    s.finish(Some(ClientError::Net(e.into())));
                }
                s.finish(None);
                client_net.cpu_us = crate::link::thread_cpu_us();
                client_net
            })
            .map_err(ClientError::Thread)?
    };
    let decode = if c.decode {
        let (s, n) = (shared.clone(), net.clone());
        Some(
            std::thread::Builder::new()
                .name("client-decode".into())
                .spawn(move || decode::decode_loop(&s, &n, frames_rx, decoder_cfg))
                .map_err(ClientError::Thread)?,
        )
    } else {
        None
    };
    let mut device_threads = Vec::new();
    if let Some(src) = pose_source {
        let (s, n, rate) = (shared.clone(), net.clone(), options.vr.pose_rate_hz);
        device_threads.push(
            std::thread::Builder::new()
                .name("client-pose".into())
                .spawn(move || pose::pose_loop(&s, &n, src, rate))
                .map_err(ClientError::Thread)?,
        );
    }
    for (i, dev) in io.input_devices.into_iter().enumerate() {
        let (s, n) = (shared.clone(), net.clone());
        let index = i.min(255) as u8;
        log::info!("client: input device {index}: {}", dev.name);
        device_threads.push(
            std::thread::Builder::new()
                .name(format!("client-input-{i}"))
                .spawn(move || input::device_loop(&s, &n, index, dev))
                .map_err(ClientError::Thread)?,
        );
    }
    let presenter_result = present::present_loop(
        &shared,
        &net,
        &sent_rx,
        options,
        &stop,
        sink.as_mut(),
        io.inject,
        io.shown_frame_tap,
        io.warp,
    );
    // Say goodbye (the driver handles every command sent before the stop), then stop.
    net.send(ClientCommand::Close);
    shared.finish(None);
    let client_net = net_thread.join().ok();
    if let Some(d) = decode {
        let _ = d.join();
    }
    for t in device_threads {
        let _ = t.join();
    }
    // Close the device (waits for its callback) before reading what it played.
    let audio_driver = audio_out.as_ref().map(|o| (o.driver(), o.buffer_samples()));
    drop(audio_out);
    let error = lock(&shared.failure).take().or(presenter_result.err());
    let mut run = std::mem::take(&mut *lock(&shared.run));
    if let Some(n) = &client_net {
        run.stats = n.session.stats();
        run.state_staleness = Some(n.session.state_staleness(now_us()));
        run.clock = n.session.clock();
        run.clock_mode = if n.session.shares_clock() {
            ClockMode::Shared
        } else if options.client.clock == "synchronized" {
            run.clock = Some(untether_proto::ClockEstimate {
                offset_us: 0,
                uncertainty_us: 0,
                ..run.clock.unwrap_or_default()
            });
            ClockMode::Synchronized
        } else {
            ClockMode::Estimated
        };
    }
    run.link = match (&client_net, link) {
        (Some(n), _) if n.link.is_some() => n.link.as_ref().map(|l| l.report.clone()),
        (_, note) => note,
    }
    .unwrap_or_else(crate::link::LinkReport::udp);
    run.link.net_thread_cpu_ms = client_net
        .as_ref()
        .map_or(0.0, |n| n.cpu_us as f64 / 1000.0);
    run.paths = paths;
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
    Ok((run, error))
}

/// The codecs of `wanted` a software decoder opens for here, in order (a hardware decoder is
/// tried per session, falling back to this software one), as the wire names them. None: an
/// error naming the list.
fn decodable(
    wanted: &[untether_media::codec::Codec],
    cfg: &DecoderConfig,
) -> Result<Vec<untether_proto::Codec>, ClientError> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for &codec in wanted {
        let sw = DecoderConfig::software(codec, 1);
        let named_other = matches!(&cfg.decoder, untether_media::codec::DecoderChoice::Named(n)
            if untether_media::codec::decoder::decoder_codec(n).is_some_and(|c| c.id() != codec.id()));
        match Decoder::open(&sw) {
            Ok(_) if !named_other => out.push(crate::config::wire_codec(codec)),
            Ok(_) => missing.push(format!(
                "{codec} (decoder {} decodes another codec)",
                cfg.decoder
            )),
            Err(e) => missing.push(format!("{codec} ({e})")),
        }
    }
    if !missing.is_empty() {
        log::info!("client: not offering {}", missing.join(", "));
    }
    if out.is_empty() {
        return Err(ClientError::Config(crate::config::ConfigError::Invalid {
            key: "client.codecs".into(),
            message: format!("no decoder here opens any of them: {}", missing.join(", ")),
        }));
    }
    Ok(out)
}
