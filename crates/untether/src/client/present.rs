//! The client's present stage, on the calling thread (SDL wants the thread that made the
//! window): shows the newest decoded picture (the GPU presenter or SDL's renderer,
//! `client.presenter`; in VR mode with lens distortion and late warp) and/or writes it to a
//! pipe sink, keeps the window's own keys (fullscreen, mouse capture, the statistics overlay:
//! [`WindowKeys`]) and hands the rest of the window's (and the application's) input to the
//! network driver, refreshes the overlay every 0.5 s, and times each input event's response
//! from the pixel stamp of the first picture that reflects it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use untether_media::codec::DecodedFrame;
use untether_media::pipe::PipeWriter;
use untether_media::present::{open_window, HeadlessPresenter, Presenter, WindowEvent, WindowSpec};
use untether_media::warp::Warp;
use untether_proto::{InputEvent, Micros};

use super::input::{Routed, WindowAction, WindowKeys, WINDOW_KEYS};
use super::live::LiveOverlay;
use super::network::{ClientCommand, InputKind};
use super::options::{ClientOptions, Display, ShownFrameTap, WarpSource};
use super::record::{keep_record, FrameRecord};
use super::{lock, ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::Handle;

#[allow(clippy::too_many_arguments)]
pub(crate) fn present_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    sent_inputs: &Receiver<(u32, Micros)>,
    options: &ClientOptions,
    stop: &AtomicBool,
    mut sink: Option<&mut PipeWriter>,
    inject: Option<std::sync::mpsc::Receiver<InputEvent>>,
    mut shown_tap: Option<ShownFrameTap>,
    mut warp_source: Option<WarpSource>,
) -> Result<(), ClientError> {
    let started = now_us();
    let lens = if options.vr.enabled {
        Some(options.vr.lens_profile()?)
    } else {
        None
    };
    let presenter_kind = options.client.presenter;
    // Late warp needs VR and the option; the poses come from the application's WarpSource,
    // else from the frame's pose (FramePose) and the newest sample of the pose source.
    let late_warp = options.vr.enabled && options.vr.late_warp;
    if !late_warp {
        warp_source = None;
    }
    let mut warp_source = warp_source.unwrap_or_else(|| own_warp_source(s, &options.vr));
    let mut view = View {
        keys: WindowKeys::default(),
        fullscreen: options.client.fullscreen,
        overlay: options.client.overlay,
        status: None,
        live: LiveOverlay::new(started),
        host: options.host.to_string(),
    };
    let mut redraw = false;
    let mut last_warp: Option<Warp> = None;
    let mut last_shown: Option<FrameRecord> = None;
    let end = options.duration.map(|d| started + d.as_micros() as u64);
    let mut presenter: Option<Box<dyn Presenter>> = None;
    // Input events sent and not yet seen reflected in a decoded frame: seq → sent time.
    let mut awaiting: BTreeMap<u32, Micros> = BTreeMap::new();
    let probe_every = options.client.input_probe_interval_ms * 1000;
    let mut next_probe = started + 1_000_000;
    let mut probe_sign = 1;
    let mut last_picture: Option<DecodedFrame> = None;
    let mut photon_probe = super::photon::Probe::new(&options.vr, lens.as_ref());
    // Game controllers, polled here (SDL's thread); after the presenter, so dropped first.
    let mut gamepads = if options.client.gamepads {
        match untether_media::gamepad::Gamepads::open() {
            Ok(g) => Some(g),
            Err(e) => {
                log::warn!("client: no game controllers: SDL: {e}");
                None
            }
        }
    } else {
        None
    };
    loop {
        if stop.load(Ordering::SeqCst) || s.stop.load(Ordering::SeqCst) {
            break;
        }
        let now = now_us();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let mut window: Vec<InputEvent> = Vec::new();
        if let Some(p) = presenter.as_mut() {
            for ev in p.poll_events() {
                match ev {
                    WindowEvent::Quit => {
                        s.finish(None);
                        break;
                    }
                    WindowEvent::Exposed => redraw = true,
                    _ => match view.keys.route(&ev) {
                        Routed::Action(a) => {
                            view.act(p.as_mut(), a);
                            redraw = true;
                        }
                        Routed::Input(e) => window.push(e),
                        Routed::Nothing => {}
                    },
                }
            }
        }
        let connected = s.connected.load(Ordering::SeqCst);
        // What the title says besides the host: reconnecting, or this viewer's role.
        let status = status_text(s.reconnecting.load(Ordering::SeqCst), *lock(&s.role));
        if status != view.status {
            view.status = status;
            if let Some(p) = presenter.as_mut() {
                p.set_title(&view.title());
            }
        }
        if view.live.due(now) {
            view.refresh_overlay(s, now);
            if view.overlay {
                if let Some(p) = presenter.as_mut() {
                    p.set_overlay(Some(view.live.model()))?;
                    redraw = true;
                }
            }
        }
        if connected {
            if let Some(rx) = &inject {
                window.extend(rx.try_iter().take(1024));
            }
            if let Some(g) = gamepads.as_mut() {
                let (buttons, axes) = super::input::gamepad_input(g.poll());
                for (key, value) in axes {
                    net.send(ClientCommand::State(key, value));
                }
                if !buttons.is_empty() {
                    net.send(ClientCommand::Input(InputKind::Device, buttons));
                }
            }
            if !window.is_empty() {
                net.send(ClientCommand::Input(InputKind::Window, window));
            }
        }
        if probe_every > 0 && connected && now >= next_probe {
            // A synthetic look-around: alternating small turns, each reflected in the picture.
            // It stays on the reliable channel: its response is measured by sequence number.
            net.send(ClientCommand::Input(
                InputKind::Probe,
                vec![InputEvent::PointerMotion {
                    x: 0,
                    y: 0,
                    dx: 8 * probe_sign,
                    dy: 0,
                }],
            ));
            probe_sign = -probe_sign;
            next_probe = now + probe_every;
        }
        for (seq, sent) in sent_inputs.try_iter() {
            if awaiting.len() < 4096 {
                awaiting.insert(seq, sent);
            }
        }
        let Some(mut item) = s.decoded.take(Duration::from_millis(4)) else {
            // No new picture: show the last one again if the window, the overlay or the
            // newest head pose asks for it.
            if let Some(p) = presenter.as_mut() {
                if let (true, Some(last)) = (late_warp, last_shown.as_ref()) {
                    let w = (warp_source.0)(last);
                    if w != last_warp {
                        p.set_warp(w);
                        last_warp = w;
                        redraw = true;
                    }
                }
                if redraw {
                    p.redraw()?;
                }
            }
            redraw = false;
            continue;
        };
        if presenter.is_none() {
            let (w, h) = (item.picture.width(), item.picture.height());
            let mut p: Box<dyn Presenter> = match options.display {
                Display::Window => open_window(
                    presenter_kind,
                    &WindowSpec {
                        title: view.title(),
                        width: w,
                        height: h,
                        fullscreen: view.fullscreen,
                        vr: lens.clone(),
                    },
                )?,
                Display::Headless => Box::new(HeadlessPresenter),
            };
            view.live.set_header(format!(
                "{} · {w}x{h}{}",
                p.kind(),
                if lens.is_some() { " · vr" } else { "" }
            ));
            if options.display == Display::Window {
                let vr = if lens.is_some() && p.kind() == "gl" {
                    "-vr"
                } else {
                    ""
                };
                lock(&s.run).presenter = Some(format!("{}-window{vr}", p.kind()));
            }
            if view.overlay {
                view.refresh_overlay(s, now);
                p.set_overlay(Some(view.live.model()))?;
            }
            presenter = Some(p);
        }
        if let Some(p) = presenter.as_mut() {
            if late_warp {
                last_warp = (warp_source.0)(&item.record);
                p.set_warp(last_warp);
            }
            p.present(&item.picture)?;
            redraw = false;
            if options.vr.enabled {
                if let Some(ms) = photon_probe.measure(s, p.as_mut(), &item.picture, now_us()) {
                    view.live.set_pose_to_photon(Some(ms));
                }
            }
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
        // Sequence numbers of events sent just before this picture was decoded.
        for (seq, sent) in sent_inputs.try_iter() {
            if awaiting.len() < 4096 {
                awaiting.insert(seq, sent);
            }
        }
        let mut run = lock(&s.run);
        run.shown += 1;
        let session = run.session;
        if let Some(last) = run.reconnects.last_mut() {
            if last.1 == 0 && item.record.session == session && session > 0 {
                // The first picture of the new session: the stream is back.
                last.1 = item.record.shown_us;
            }
        }
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
        view.live.on_shown(&item.record);
        if late_warp {
            last_shown = Some(FrameRecord {
                thumbnail: Vec::new(),
                ..item.record
            });
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

/// What the window's title says besides the host: reconnecting, or a viewer's role (nothing
/// for the controller, or a host serving one client).
fn status_text(
    reconnecting: bool,
    role: Option<(untether_proto::ClientRole, bool, bool)>,
) -> Option<String> {
    if reconnecting {
        return Some("host unreachable: holding the last picture, reconnecting".into());
    }
    match role? {
        (untether_proto::ClientRole::Controller, ..) => None,
        (_, granted, paused) => Some(format!(
            "viewer{}{}",
            if granted { " · input granted" } else { "" },
            if paused {
                " · paused: this link cannot carry the stream"
            } else {
                ""
            }
        )),
    }
}

/// The late warp's poses when the application gives none: the pose the frame was rendered for
/// (the host's FramePose, [`FrameRecord::pose`]) and the newest sample of the client's pose
/// source ([`super::LocalPose::latest`]), each eye's field of view `vr.fov_deg` over its half of
/// the picture. None (no warp) while either pose is unknown.
fn own_warp_source(s: &ClientShared, vr: &crate::config::VrToml) -> WarpSource {
    let local = s.local_pose.clone();
    let fov_rad = vr.fov_deg.to_radians();
    WarpSource(Box::new(move |r: &FrameRecord| {
        super::pose::pose_warp(r.pose?, local.latest()?, fov_rad, r.width, r.height)
    }))
}

/// What the window shows besides the picture, and its own keys.
struct View {
    keys: WindowKeys,
    fullscreen: bool,
    overlay: bool,
    /// Something about the stream the title says (the host is unreachable, a viewer's role).
    status: Option<String>,
    live: LiveOverlay,
    host: String,
}

impl View {
    /// `untether — HOST [— status] — keys`.
    fn title(&self) -> String {
        let keys = if self.keys.captured() {
            WINDOW_KEYS.replace("F10 capture mouse", "F10 release mouse")
        } else {
            WINDOW_KEYS.to_string()
        };
        match &self.status {
            Some(st) => format!("untether — {} — [{st}] — {keys}", self.host),
            None => format!("untether — {} — {keys}", self.host),
        }
    }

    fn act(&mut self, p: &mut dyn Presenter, action: WindowAction) {
        match action {
            WindowAction::ToggleFullscreen => match p.set_fullscreen(!self.fullscreen) {
                Ok(()) => self.fullscreen = !self.fullscreen,
                Err(e) => log::warn!("client: {e}"),
            },
            WindowAction::ToggleMouseCapture => {
                let on = !self.keys.captured();
                p.set_mouse_captured(on);
                self.keys.set_captured(on);
                p.set_title(&self.title());
                log::info!(
                    "client: mouse {}",
                    if on {
                        "captured (F10 releases it)"
                    } else {
                        "released"
                    }
                );
            }
            WindowAction::ToggleOverlay => {
                self.overlay = !self.overlay;
                let shown = if self.overlay {
                    Some(self.live.model())
                } else {
                    None
                };
                if let Err(e) = p.set_overlay(shown) {
                    log::warn!("client: overlay: {e}");
                }
            }
        }
    }

    /// The overlay's figures for the interval ending `now`: the shown frames' host timings
    /// under the run's lock (a lookup each), the driver's counters under `live`'s (a copy).
    fn refresh_overlay(&mut self, s: &ClientShared, now: Micros) {
        let timings: Vec<_> = {
            let run = lock(&s.run);
            self.live
                .pending()
                .map(|(session, n)| {
                    (session == run.session)
                        .then(|| run.timings.get(&n).copied())
                        .flatten()
                })
                .collect()
        };
        let net = *lock(&s.live);
        self.live.refresh(now, net, &timings);
    }
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
