//! Starting a host: the socket, the capture, the encoders, the protocol session with its
//! pairing state and every other receiver registered with it, then the threads (the network
//! driver, the source, the encoder, audio). Configuration errors surface here, not on a thread.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use untether_media::audio::{self as media_audio, SdlAudioCapture};
use untether_media::scene::{Scene, SceneConfig};
use untether_media::x11::{PointerMode, XtestReplay};
use untether_net::UdpEndpoint;
use untether_proto::{fingerprint, HostSession, PairingPin, PublicKey, ReceiverKind};

use super::audio::{self, AudioStage};
use super::capture::Capture;
use super::commands::HostCommand;
use super::consumer::{KeyframeRequests, StreamInfo};
use super::encode::{open_encoders, EncoderPlan, EncoderStage};
use super::error::HostError;
use super::grab::GrabOutput;
use super::input::{self, InputSink, INPUT_QUEUE};
use super::network::HostNet;
use super::options::{
    session_config, session_params, AudioSpec, HostOptions, HostSetup, InputSpec, SourceSpec,
};
use super::pairing::host_security;
use super::shared::{lock, HostShared};
use super::source_pipe::PipeSource;
use super::uinput::UinputDevices;
use super::{source_kms, source_pipe, source_ring, source_scene, source_wlr, source_x11, webrtc};
use crate::clock::now_us;
use crate::config::Resolution;
use crate::driver::{self, Handle};
use crate::identity::Access;
use crate::link::HostLink;

/// What a started host is made of (the application's [`super::Host`] holds it).
pub(super) struct Started {
    pub shared: Arc<HostShared>,
    pub net: Handle<HostCommand>,
    /// The driver, parked here when its thread ends (for the final summary and late queries).
    pub parked: Arc<Mutex<Option<Box<HostNet>>>>,
    pub threads: Vec<JoinHandle<()>>,
    pub local_addr: SocketAddr,
    pub public_key: PublicKey,
    pub state_dir: Option<std::path::PathBuf>,
    /// The encoder stage for a frame sender (app source without an encoder thread).
    pub sender_stage: Option<EncoderStage>,
    pub audio: Option<Arc<AudioStage>>,
    pub capture: Option<SdlAudioCapture>,
    /// Where browsers find the page (`webrtc.listen`).
    pub browsers: Option<webrtc::BrowserInfo>,
    /// Where the operator's dashboard is (`host.dashboard`).
    pub dashboard: Option<super::dashboard::DashboardInfo>,
}

/// Binds the socket, opens the capture and the encoders, makes the protocol session (every
/// receiver registered with it) and starts the threads.
pub(super) fn start(
    options: &mut HostOptions,
    setup: &mut HostSetup,
) -> Result<Started, HostError> {
    options.validate()?;
    webrtc::prepare(options);
    // As validated: the same parse (surrounding spaces allowed), the same error naming the key.
    let bind: SocketAddr = options.host.bind_addr()?;
    // No session without the OS random generator (keys, nonces, PINs): stop, saying so.
    crate::identity::check_random()?;
    let mut host_cfg = session_config(options)?;
    // Open the capture first: its size is the stream's size.
    let capture = Capture::open(&setup.source, &options.host)?;
    if let Some(cap) = &capture {
        let (w, h) = cap.size();
        options.video.resolution = Resolution {
            width: w,
            height: h,
        };
        host_cfg.params = session_params(options);
    }
    let socket = UdpEndpoint::bind(bind)?;
    let local_addr = socket.local_addr()?;
    let (raw, link) = open_link(options, local_addr)?;
    let v = options.video.clone();
    let shared = Arc::new(HostShared::new(
        capture.as_ref().map_or((0, 0), |c| c.origin()),
    ));
    // Open the encoders now so a bad configuration (or an absent device asked for by
    // name) fails here, not on a thread.
    let mut plan = EncoderPlan::new(&v, setup, v.resolution.width, v.resolution.height);
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
    let size = (v.resolution.width, v.resolution.height);
    let sink = open_input_sink(setup, Some(scene_tx), &shared, size)?;
    let mut session = HostSession::new(host_cfg);
    // One admission for every door: PIN handshakes here, browsers' offers, RTSP connections.
    session.share_admission(setup.admission.clone());
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
    // Every other consumer of the stream (RTSP) is a receiver of the session's own: the
    // one roles authority and the one keyframe gate.
    let started = now_us();
    shared.consumers.set(
        &setup.consumers,
        StreamInfo {
            width: v.resolution.width,
            height: v.resolution.height,
            fps: v.fps,
            audio_channels: (setup.audio != AudioSpec::None).then_some(media_audio::CHANNELS as u8),
        },
        || {
            let id = session.attach_receiver(started, ReceiverKind::Rtsp);
            KeyframeRequests::new(net.clone(), id)
        },
    );
    let stage = EncoderStage::new(encoder, plan, encoder_rx, net.clone(), shared.clone());
    let audio = match setup.audio {
        AudioSpec::None => None,
        _ => Some(Arc::new(AudioStage::new(
            options.host.audio_bitrate_kbps,
            net.clone(),
        )?)),
    };
    let parked = Arc::new(Mutex::new(None));
    let mut threads = Vec::new();
    let web = webrtc::start(
        options,
        &pairing,
        audio.is_some(),
        &net,
        &shared,
        &setup.admission,
    )?;
    let (sockets, webrtc_side, browsers) = webrtc::Started::split(web, socket, &mut threads);
    let dashboard = super::dashboard::start(
        options,
        &public_key,
        browsers.as_ref(),
        &net,
        &shared,
        &mut threads,
    )?;
    if let (Some(d), Some(dir)) = (dashboard.as_ref(), pairing.dir.as_ref()) {
        // The one place besides the printed link where the operator finds the token: a file
        // only this user can read.
        if let Err(e) = dir.write_dashboard_link(&format!("{}?admin={}", d.url, d.token)) {
            log::warn!("host: the dashboard's link was not written to the state directory: {e}");
        }
    }
    {
        let s = shared.clone();
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
        host_net.outbox.set_lose_slices(setup.lose_slices.clone());
        threads.push(spawn_driver(host_net, sockets, raw, mailbox, &s, &parked)?);
    }
    let sender_stage = start_source(
        options,
        setup,
        &shared,
        &net,
        stage,
        capture,
        scene_rx,
        &mut threads,
    )?;
    let capture = start_audio(setup, &shared, &audio, &mut threads)?;
    Ok(Started {
        shared,
        net,
        parked,
        threads,
        local_addr,
        public_key,
        state_dir,
        sender_stage,
        audio,
        capture,
        browsers,
        dashboard,
    })
}

/// Starts the network driver's thread; when it ends, the driver is parked for the final
/// summary and late queries.
fn spawn_driver(
    mut host_net: HostNet,
    sockets: Vec<UdpEndpoint>,
    raw: Option<untether_net::RawEndpoint>,
    mailbox: driver::Mailbox<HostCommand>,
    s: &Arc<HostShared>,
    parked: &Arc<Mutex<Option<Box<HostNet>>>>,
) -> Result<JoinHandle<()>, HostError> {
    let (s, parked) = (s.clone(), parked.clone());
    spawn("host-net", move || {
        if let driver::Ended::Failed(e) =
            driver::run_with_raw(&mut host_net, &sockets, raw.as_ref(), &mailbox, &s.stop)
        {
            s.fail(format!("network: {e}"));
        }
        host_net.link.report.net_thread_cpu_ms = crate::link::thread_cpu_us() as f64 / 1000.0;
        *lock(&parked) = Some(Box::new(host_net));
        drop(mailbox);
    })
}

/// The raw layer-2 transport, when `network.transport` asks for it: its socket and the
/// host's side of the link (None, None: plain UDP).
fn open_link(
    options: &HostOptions,
    local_addr: SocketAddr,
) -> Result<(Option<untether_net::RawEndpoint>, Option<HostLink>), HostError> {
    Ok(
        match crate::link::open(&options.network, || crate::link::host_interface(local_addr))? {
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
        },
    )
}

/// Starts the frame source's threads (the scene, X11, a pipe, or the application's frames);
/// with the app source and no encoder thread, returns the encoder stage for a frame sender.
#[allow(clippy::too_many_arguments)]
fn start_source(
    options: &HostOptions,
    setup: &HostSetup,
    shared: &Arc<HostShared>,
    net: &Handle<HostCommand>,
    stage: EncoderStage,
    capture: Option<Capture>,
    scene_rx: mpsc::Receiver<input::SceneRecord>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<Option<EncoderStage>, HostError> {
    let v = &options.video;
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
        SourceSpec::X11 { .. }
        | SourceSpec::Wlr { .. }
        | SourceSpec::Portal { .. }
        | SourceSpec::PipeWire { .. } => {
            let s = shared.clone();
            let out = GrabOutput {
                stamp: setup.stamp,
                tap: tap.clone(),
                ..GrabOutput::default()
            };
            threads.push(match capture {
                Some(Capture::X11(cap)) => spawn("host-x11", move || {
                    source_x11::x11_loop(&s, cap, stage, fps, out)
                })?,
                Some(Capture::Wlr(cap)) => spawn("host-wlr", move || {
                    source_wlr::wlr_loop(&s, cap, stage, fps, out)
                })?,
                #[cfg(feature = "portal")]
                Some(Capture::Portal(cap)) => spawn("host-portal", move || {
                    super::source_portal::portal_loop(&s, *cap, stage, fps, out)
                })?,
                None => return Err(HostError::Usage("no desktop capture".into())),
            });
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
        SourceSpec::Kms { device } => {
            let cap = untether_capture::kms::KmsCapture::open(
                device.as_deref().map(std::path::Path::new),
            )?;
            let s = shared.clone();
            let out = GrabOutput {
                stamp: setup.stamp,
                tap: tap.clone(),
                ..GrabOutput::default()
            };
            threads.push(spawn("host-kms", move || {
                source_kms::kms_loop(&s, cap, stage, fps, out)
            })?);
        }
        SourceSpec::Presents(ring) => {
            let (s, ring) = (shared.clone(), ring.0.clone());
            let out = GrabOutput {
                stamp: setup.stamp,
                tap: tap.clone(),
                ..GrabOutput::default()
            };
            threads.push(spawn("host-presents", move || {
                source_ring::ring_loop(&s, ring, stage, fps, out)
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
    Ok(sender_stage)
}

/// Starts the audio source (the test tone's thread, or SDL's capture device).
fn start_audio(
    setup: &HostSetup,
    shared: &Arc<HostShared>,
    audio: &Option<Arc<AudioStage>>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<Option<SdlAudioCapture>, HostError> {
    let mut capture_dev = None;
    match (&setup.audio, audio) {
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
    Ok(capture_dev)
}

/// Opens the input sink `setup` asks for.
fn open_input_sink(
    setup: &HostSetup,
    scene: Option<mpsc::SyncSender<input::SceneRecord>>,
    shared: &HostShared,
    (w, h): (u32, u32),
) -> Result<InputSink, HostError> {
    let uinput = std::path::Path::new(super::gamepad::UINPUT);
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
        (InputSpec::Uinput, _, _) => {
            InputSink::Uinput(Box::new(UinputDevices::open(uinput, w, h)?))
        }
        (InputSpec::Auto, SourceSpec::Wlr { .. } | SourceSpec::Portal { .. }, _) => {
            match UinputDevices::open(uinput, w, h) {
                Ok(d) => InputSink::Uinput(Box::new(d)),
                Err(e) => {
                    shared.note(format!("no Wayland input, client input is dropped: {e}"));
                    InputSink::Discard
                }
            }
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
