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
//! - `options`: what the client is told; `start`: what it opens before its threads start;
//!   `trust`: the host's pinned key;
//! - `record`: what a run measured (the report's [`ClientRun`]); `run`: each thread's own
//!   part of it ([`run::NetRecord`], [`run::DecodeRecord`], [`run::PresentRecord`]), handed
//!   back when the thread ends and assembled into the `ClientRun`, and the snapshots other
//!   threads read while the run goes on ([`run::view`]).
//!
//! No thread but the driver touches the session: the others hand it commands. No thread
//! writes another's record.

mod decode;
mod input;
mod live;
mod network;
mod options;
pub mod photon;
mod pose;
mod present;
mod record;
mod run;
pub use run::SessionSpan;
mod start;
mod trust;
mod warm;
mod zero_copy;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use untether_proto::RejectReason;

use crate::clock::now_us;
use crate::driver;
use crate::identity::IdentityError;
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
use network::{ClientCommand, ClientNet, NetOutputs};
use run::view::{Haptics, NetStatus, Published};
use run::{NetRecord, PresentRecord, RunEnd};
use start::Setup;

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
    #[error(
        "host {host} was chosen as {chosen}, but known_hosts.json trusts {label:?} with another \
         key ({pinned}): an impostor may be advertising under its name, or the host's identity \
         was reset. Check the fingerprint `untether host` shows; if it was reset on purpose, \
         `untether pair forget {label}` and connect again"
    )]
    ChosenKeyNotPinned {
        host: SocketAddr,
        label: String,
        /// The fingerprint it was chosen by (advertised, or named by the user).
        chosen: String,
        pinned: String,
    },
    #[error(
        "host {host} could not prove the key it was chosen by ({chosen}): {message}. Its \
         advertisement may be forged (another machine answering under the host's name and \
         key); nothing was trusted. `untether discover` lists the hosts; compare the \
         fingerprint `untether host` shows"
    )]
    HostNotProven {
        host: SocketAddr,
        chosen: String,
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

/// What the client's threads share besides the network driver. Nothing here is a thread's
/// record: what one thread writes and others read is a published snapshot.
pub(crate) struct ClientShared {
    host: SocketAddr,
    stop: AtomicBool,
    /// The driver's connection state (connected, reconnecting, role), published when it
    /// changes.
    status: Published<NetStatus>,
    decoded: Slot<Decoded>,
    /// The pose each recent frame was rendered for (from the host's FramePose).
    frame_poses: pose::FramePoses,
    /// The newest local head poses (the pose source's), for late warp and pose-to-photon.
    pub(crate) local_pose: Arc<LocalPose>,
    /// Mouse-look, when it is the pose source: window mouse motion turns the head.
    mouse_look: Option<crate::pose::MouseLook>,
    /// Where the host's published state is copied for the application.
    host_state: Option<HostStateView>,
    /// The driver's counters for the overlay, published every 250 ms.
    live: Published<Option<live::NetSnapshot>>,
    /// The host's rumble per controller, published by the driver when it changes; the
    /// presenter (SDL's thread, which owns the controllers) applies it.
    haptics: Published<Haptics>,
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

    /// The driver's connection state, as last published.
    fn status(&self) -> NetStatus {
        self.status.get()
    }

    /// A client of 127.0.0.1:9 with nothing running.
    #[cfg(test)]
    pub(crate) fn for_tests() -> ClientShared {
        ClientShared {
            host: SocketAddr::from(([127, 0, 0, 1], 9)),
            stop: AtomicBool::new(false),
            status: Published::new(NetStatus::default()),
            decoded: Slot::new(),
            frame_poses: Default::default(),
            local_pose: Default::default(),
            mouse_look: None,
            host_state: None,
            live: Published::new(None),
            haptics: Published::new(Haptics::default()),
            paths: 1,
            failure: Mutex::new(None),
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
    match run_client_to_end(options, io, stop)? {
        (run, None) => Ok(run),
        (_, Some(e)) => Err(e),
    }
}

/// How many host frame timings may wait for the presenter (its overlay).
const TIMINGS_QUEUE: usize = 1024;

/// Like [`run_client_with`], but a run that started is returned with the error that ended it
/// (None: it ended normally), so that its report can be shown on every exit. `Err`: it could
/// not start (configuration, sockets, identity, devices).
pub fn run_client_to_end(
    options: &ClientOptions,
    io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<(ClientRun, Option<ClientError>), ClientError> {
    let mut setup = Setup::open(options, &io)?;
    let shared = Arc::new(ClientShared {
        host: options.host,
        stop: AtomicBool::new(false),
        status: Published::new(NetStatus::default()),
        decoded: Slot::new(),
        frame_poses: Default::default(),
        host_state: io.host_state.clone(),
        local_pose: Default::default(),
        mouse_look: setup.mouse_look.take(),
        live: Published::new(None),
        haptics: Published::new(Haptics::default()),
        paths: setup.paths.len(),
        failure: Mutex::new(None),
    });
    let (net, mailbox) = driver::channel().map_err(|e| ClientError::Net(e.into()))?;
    let (frames_tx, frames_rx) = mpsc::channel();
    let (sent_tx, sent_rx) = mpsc::channel();
    let (timings_tx, timings_rx) = mpsc::sync_channel(TIMINGS_QUEUE);
    let decoding = options.client.decode;
    let outputs = NetOutputs {
        frames: decoding.then_some(frames_tx),
        sent_inputs: sent_tx,
        timings: timings_tx,
        playout: setup.playout.clone(),
    };
    let net_thread = spawn_net(
        &shared,
        &mut setup,
        options,
        outputs,
        network::Patience {
            end_on_host_bye: io.end_on_host_bye,
            wait_for_approval: io.wait_for_approval,
            wait_for_host: io.wait_for_host,
        },
        mailbox,
    )?;
    let decode = if decoding {
        let (s, n, cfg) = (shared.clone(), net.clone(), setup.decoder.clone());
        Some(
            std::thread::Builder::new()
                .name("client-decode".into())
                .spawn(move || decode::decode_loop(&s, &n, frames_rx, cfg))
                .map_err(ClientError::Thread)?,
        )
    } else {
        None
    };
    let device_threads = spawn_inputs(&shared, &net, &mut setup, options, io.input_devices)?;
    let mut present = PresentRecord::default();
    let presenter_result = present::present_loop(
        &shared,
        &net,
        options,
        &stop,
        present::PresentIo {
            sent_inputs: sent_rx,
            timings: timings_rx,
            sink: setup.sink.as_mut(),
            inject: io.inject,
            shown_tap: io.shown_frame_tap,
            warp: io.warp,
        },
        &mut present,
    );
    // Say goodbye (the driver handles every command sent before the stop), then stop.
    net.send(ClientCommand::Close);
    shared.finish(None);
    // A thread that panicked hands nothing back: its part of the record stays empty.
    let net_record = net_thread
        .join()
        .unwrap_or_else(|_| NetRecord::new(setup.started_us, setup.paths.clone()));
    let decode_record = decode.and_then(|d| d.join().ok()).unwrap_or_default();
    for t in device_threads {
        let _ = t.join();
    }
    let end = end_of_run(&shared, setup, decoding);
    let error = lock(&shared.failure).take().or(presenter_result.err());
    Ok((
        run::assemble(net_record, decode_record, present, end),
        error,
    ))
}

/// Starts the network driver's thread; it hands back its record when it ends.
fn spawn_net(
    shared: &Arc<ClientShared>,
    setup: &mut Setup,
    options: &ClientOptions,
    outputs: NetOutputs,
    patience: network::Patience,
    mailbox: driver::Mailbox<ClientCommand>,
) -> Result<JoinHandle<NetRecord>, ClientError> {
    let with_audio = outputs.playout.is_some();
    let record = NetRecord::new(setup.started_us, setup.paths.clone());
    let mut client_net = ClientNet::new(
        setup.cfg.clone(),
        shared.clone(),
        record,
        setup.known_hosts.take(),
        outputs,
        patience,
    );
    let raw = setup.raw.take();
    if let Some(r) = &raw {
        client_net.link = Some(crate::link::ClientLink::new(
            r.mac(),
            r.ethertype(),
            options.host,
            r.interface(),
        ));
    }
    let sockets = std::mem::take(&mut setup.sockets);
    let note = setup.link_note.take();
    let synchronized = options.client.clock == crate::config::ClientClock::Synchronized;
    let s = shared.clone();
    std::thread::Builder::new()
        .name("client-net".into())
        .spawn(move || {
            // Audio and input acknowledgements pass through here on their way; decoding
            // does not.
            if with_audio {
                untether_media::audio::raise_thread_priority();
            }
            let ended =
                driver::run_with_raw(&mut client_net, &sockets, raw.as_ref(), &mailbox, &s.stop);
            if let driver::Ended::Failed(e) = ended {
                s.finish(Some(ClientError::Net(e.into())));
            }
            s.finish(None);
            client_net.into_record(synchronized, note)
        })
        .map_err(ClientError::Thread)
}

/// Starts the pose source's thread and one per registered input device.
fn spawn_inputs(
    shared: &Arc<ClientShared>,
    net: &driver::Handle<ClientCommand>,
    setup: &mut Setup,
    options: &ClientOptions,
    devices: Vec<InputDevice>,
) -> Result<Vec<JoinHandle<()>>, ClientError> {
    let mut threads = Vec::new();
    if let Some(src) = setup.pose_source.take() {
        let (s, n, rate) = (shared.clone(), net.clone(), options.vr.pose_rate_hz);
        threads.push(
            std::thread::Builder::new()
                .name("client-pose".into())
                .spawn(move || pose::pose_loop(&s, &n, src, rate))
                .map_err(ClientError::Thread)?,
        );
    }
    for (i, dev) in devices.into_iter().enumerate() {
        let (s, n) = (shared.clone(), net.clone());
        let index = i.min(255) as u8;
        log::info!("client: input device {index}: {}", dev.name);
        threads.push(
            std::thread::Builder::new()
                .name(format!("client-input-{i}"))
                .spawn(move || input::device_loop(&s, &n, index, dev))
                .map_err(ClientError::Thread)?,
        );
    }
    Ok(threads)
}

/// What the calling thread knows once the others ended: the slot's drops, the sink's frames
/// and what the audio played (the device is closed first: that waits for its callback).
fn end_of_run(shared: &ClientShared, setup: Setup, decoding: bool) -> RunEnd {
    let audio_driver = setup
        .audio_out
        .as_ref()
        .map(|o| (o.driver(), o.buffer_samples()));
    drop(setup.audio_out);
    let audio = match (setup.playout, audio_driver) {
        (Some(p), Some((driver, buffer_samples))) => {
            let mut p = lock(&p);
            Some(AudioRun {
                driver,
                buffer_samples,
                stats: p.stats,
                played: std::mem::take(&mut p.played),
                targets: p.targets().to_vec(),
                final_target_us: p.target_us(),
                tap: p.tap.take(),
            })
        }
        _ => None,
    };
    RunEnd {
        ended_us: now_us(),
        dropped_presenter: shared.decoded.replaced(),
        sink_frames: setup.sink.as_ref().map_or(0, |w| w.frames_written()),
        audio,
        decoding,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_ends_the_run_and_wakes_the_presenter() {
        let s = ClientShared::for_tests();
        s.finish(Some(ClientError::HostGone {
            host: s.host,
            reason: "first".into(),
        }));
        s.finish(Some(ClientError::Refused {
            host: s.host,
            port: 9,
        }));
        assert!(s.stop.load(Ordering::SeqCst));
        assert!(
            s.decoded.is_closed(),
            "a presenter waiting for a picture wakes"
        );
        assert!(matches!(
            lock(&s.failure).take(),
            Some(ClientError::HostGone { reason, .. }) if reason == "first"
        ));
    }

    #[test]
    fn the_end_of_a_run_says_what_the_calling_thread_knows() {
        let s = ClientShared::for_tests();
        let setup = Setup {
            sink: None,
            playout: None,
            audio_out: None,
            cfg: untether_proto::ClientConfig::new("test"),
            known_hosts: None,
            sockets: Vec::new(),
            paths: vec![s.host],
            raw: None,
            link_note: None,
            decoder: untether_media::codec::DecoderConfig::software(
                untether_media::codec::Codec::H264,
                1,
            ),
            pose_source: None,
            mouse_look: None,
            started_us: 0,
        };
        let before = now_us();
        let end = end_of_run(&s, setup, false);
        assert!(end.ended_us >= before);
        assert_eq!((end.dropped_presenter, end.sink_frames), (0, 0));
        assert!(end.audio.is_none() && !end.decoding);
    }
}
