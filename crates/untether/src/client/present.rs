//! The client's present stage, on the calling thread (SDL wants the thread that made the
//! window): shows the newest decoded picture (the GPU presenter or SDL's renderer,
//! `client.presenter`; in VR mode with lens distortion and late warp) and/or writes it to a
//! pipe sink, keeps the window's own keys (fullscreen, mouse capture, the statistics overlay:
//! [`WindowKeys`]) and hands the rest of the window's (and the application's) input to the
//! network driver, refreshes the overlay every 0.5 s, and times each input event's response
//! from the pixel stamp of the first picture that reflects it.

//!
//! The loop is a [`PresentLoop`]: one turn polls the window, keeps the title and the overlay
//! current, sends input, and shows the newest picture (or redraws the last). What it measures
//! goes into its [`PresentRecord`]; what it reads from the driver comes as published snapshots
//! (connection state, counters) and a channel (host frame timings, sent input numbers).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use untether_media::codec::DecodedFrame;
use untether_media::gamepad::Gamepads;
use untether_media::lens::LensProfile;
use untether_media::pipe::PipeWriter;
use untether_media::present::{
    open_window, HeadlessPresenter, Presenter, PresenterKind, WindowEvent, WindowSpec,
};
use untether_media::warp::Warp;
use untether_proto::{FrameTiming, InputEvent, Micros};

use super::decode::Decoded;
use super::input::{Routed, WindowAction, WindowKeys, WINDOW_KEYS};
use super::live::{LiveOverlay, RecentTimings};
use super::network::{ClientCommand, InputKind};
use super::options::{ClientOptions, Display, ShownFrameTap, WarpSource};
use super::record::FrameRecord;
use super::run::view::{Haptics, NetStatus};
use super::run::PresentRecord;
use super::{ClientError, ClientShared};
use crate::clock::now_us;

/// The most often the late warp redraws the last picture for a newer head pose: once per
/// refresh of a 60 Hz display. With vsync the swap paces it anyway; without (Xvfb, a software
/// GL) each redraw is a full draw that would otherwise crowd out the new pictures.
const WARP_REDRAW_INTERVAL_US: Micros = 16_667;
use crate::driver::Handle;

/// What the presenter reads and writes besides the picture slot.
pub(crate) struct PresentIo<'a> {
    /// (sequence number, send time) of each reliable input event the driver sent.
    pub sent_inputs: Receiver<(u32, Micros)>,
    /// The host's timing of each frame, with its session (for the overlay).
    pub timings: Receiver<(u32, FrameTiming)>,
    pub sink: Option<&'a mut PipeWriter>,
    /// The application's input events.
    pub inject: Option<Receiver<InputEvent>>,
    pub shown_tap: Option<ShownFrameTap>,
    pub warp: Option<WarpSource>,
}

/// Shows pictures until the client stops, the duration ends or the window closes; what it
/// measured is in `rec`, whatever ended it.
pub(crate) fn present_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    options: &ClientOptions,
    stop: &AtomicBool,
    io: PresentIo<'_>,
    rec: &mut PresentRecord,
) -> Result<(), ClientError> {
    let mut p = PresentLoop::new(s, net, options, io, rec)?;
    let ended = p.run(stop);
    p.note_rumble();
    ended?;
    if let (Some(path), Some(picture)) = (&options.save_frame, p.last_picture.take()) {
        save_ppm(&picture, path)?;
    }
    Ok(())
}

/// When the next synthetic input probe is sent.
struct Probes {
    every_us: Micros,
    next_us: Micros,
    sign: i32,
}

impl Probes {
    /// The probe due at `now`, if one is (a small turn, alternating left and right).
    fn due(&mut self, now: Micros) -> Option<InputEvent> {
        if self.every_us == 0 || now < self.next_us {
            return None;
        }
        let ev = InputEvent::PointerMotion {
            x: 0,
            y: 0,
            dx: 8 * self.sign,
            dy: 0,
        };
        self.sign = -self.sign;
        self.next_us = now + self.every_us;
        Some(ev)
    }
}

/// The presenter's state from one turn to the next.
struct PresentLoop<'a, 'r> {
    s: &'a ClientShared,
    net: &'a Handle<ClientCommand>,
    options: &'a ClientOptions,
    io: PresentIo<'a>,
    rec: &'r mut PresentRecord,
    lens: Option<LensProfile>,
    presenter_kind: PresenterKind,
    /// Late warp (VR and `vr.late_warp`), with where its poses come from.
    late_warp: bool,
    warp_source: WarpSource,
    last_warp: Option<Warp>,
    /// When the late warp may next redraw the last picture for a newer pose.
    next_warp_us: Micros,
    /// The last picture's record (without its thumbnail), for late warp.
    last_shown: Option<FrameRecord>,
    view: View,
    redraw: bool,
    end: Option<Micros>,
    /// When the run started: with no picture 3 s later, the window opens anyway.
    started_us: Micros,
    /// The window is open and no stream picture was shown yet (it shows the waiting state).
    waiting_window: bool,
    probes: Probes,
    photon: super::photon::Probe,
    timings: RecentTimings,
    /// The last picture shown, for `save_frame`.
    last_picture: Option<DecodedFrame>,
    /// Game controllers, polled here (SDL's thread); before the presenter, so dropped first.
    gamepads: Option<Gamepads>,
    presenter: Option<Box<dyn Presenter>>,
}

impl<'a, 'r> PresentLoop<'a, 'r> {
    fn new(
        s: &'a ClientShared,
        net: &'a Handle<ClientCommand>,
        options: &'a ClientOptions,
        mut io: PresentIo<'a>,
        rec: &'r mut PresentRecord,
    ) -> Result<Self, ClientError> {
        let started = now_us();
        let lens = if options.vr.enabled {
            Some(options.vr.lens_profile()?)
        } else {
            None
        };
        let presenter_kind = options.client.presenter;
        // Late warp needs VR and the option; the poses come from the application's
        // WarpSource, else from the frame's pose (FramePose) and the newest sample of the pose
        // source.
        let late_warp = options.vr.enabled && options.vr.late_warp;
        let warp = io.warp.take().filter(|_| late_warp);
        let warp_source = warp.unwrap_or_else(|| own_warp_source(s, &options.vr));
        let gamepads = if options.client.gamepads {
            match Gamepads::open() {
                Ok(g) => Some(g),
                Err(e) => {
                    log::warn!("client: no game controllers: SDL: {e}");
                    None
                }
            }
        } else {
            None
        };
        Ok(PresentLoop {
            s,
            net,
            options,
            io,
            rec,
            photon: super::photon::Probe::new(&options.vr, lens.as_ref()),
            lens,
            presenter_kind,
            late_warp,
            warp_source,
            last_warp: None,
            next_warp_us: 0,
            last_shown: None,
            view: View {
                keys: WindowKeys::default(),
                fullscreen: options.client.fullscreen,
                overlay: options.client.overlay,
                status: None,
                banner: None,
                live: LiveOverlay::new(started),
                host: options.host.to_string(),
            },
            redraw: false,
            end: options.duration.map(|d| started + d.as_micros() as u64),
            started_us: started,
            waiting_window: false,
            probes: Probes {
                every_us: options.client.input_probe_interval_ms * 1000,
                next_us: started + 1_000_000,
                sign: 1,
            },
            timings: RecentTimings::default(),
            last_picture: None,
            gamepads,
            presenter: None,
        })
    }

    /// Turns until the run is over.
    fn run(&mut self, stop: &AtomicBool) -> Result<(), ClientError> {
        while !stop.load(Ordering::SeqCst) && self.turn()? {}
        Ok(())
    }

    /// One turn; false when the run is over.
    fn turn(&mut self) -> Result<bool, ClientError> {
        if self.s.stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let now = now_us();
        if self.end.is_some_and(|e| now >= e) {
            return Ok(false);
        }
        let window = self.poll_window();
        let status = self.s.status();
        self.set_status(status.title_words());
        self.timings.extend(self.io.timings.try_iter());
        let banner = status.banner(self.waiting_window);
        let banner_changed = banner != self.view.banner;
        if self.view.live.due(now) || banner_changed {
            if let Some(r) = self.view.refresh_overlay(self.s, &self.timings, now) {
                self.net.send(ClientCommand::Latency(r)); // for the host's dashboard
            }
            self.view.banner = banner;
            if let Some(p) = self.presenter.as_mut() {
                if self.view.overlay || self.view.banner.is_some() {
                    p.set_overlay(Some(&self.view.overlay_model()))?;
                    self.redraw = true;
                } else if banner_changed {
                    p.set_overlay(None)?;
                    self.redraw = true;
                }
            }
        }
        self.open_waiting_window(&status, now)?;
        if status.connected {
            self.send_input(window, now);
        }
        self.note_sent_inputs();
        self.rumble(now);
        match self.s.decoded.take(Duration::from_millis(4)) {
            Some(item) => self.show(item, now)?,
            None => self.idle()?,
        }
        Ok(true)
    }

    /// The window's events: its own keys act at once, the rest is input for the host.
    fn poll_window(&mut self) -> Vec<InputEvent> {
        let mut window = Vec::new();
        let Some(p) = self.presenter.as_mut() else {
            return window;
        };
        for ev in p.poll_events() {
            match ev {
                WindowEvent::Quit => {
                    self.s.finish(None);
                    break;
                }
                WindowEvent::Exposed => self.redraw = true,
                _ => match self.view.keys.route(&ev) {
                    Routed::Action(a) => {
                        self.view.act(p.as_mut(), a);
                        self.redraw = true;
                    }
                    Routed::Input(e) => window.push(e),
                    Routed::Nothing => {}
                },
            }
        }
        window
    }

    /// What the title says besides the host, when it changed.
    fn set_status(&mut self, status: Option<String>) {
        if status != self.view.status {
            self.view.status = status;
            if let Some(p) = self.presenter.as_mut() {
                p.set_title(&self.view.title());
            }
        }
    }

    /// Hands the window's, the application's and the game controllers' input to the driver,
    /// and the input probe when one is due.
    fn send_input(&mut self, mut window: Vec<InputEvent>, now: Micros) {
        if let Some(rx) = &self.io.inject {
            window.extend(rx.try_iter().take(1024));
        }
        if let Some(g) = self.gamepads.as_mut() {
            let (buttons, axes) = super::input::gamepad_input(g.poll());
            for (key, value) in axes {
                self.net.send(ClientCommand::State(key, value));
            }
            if !buttons.is_empty() {
                self.net
                    .send(ClientCommand::Input(InputKind::Device, buttons));
            }
        }
        if !window.is_empty() {
            self.net
                .send(ClientCommand::Input(InputKind::Window, window));
        }
        if let Some(probe) = self.probes.due(now) {
            // A synthetic look-around: alternating small turns, each reflected in the
            // picture. It stays on the reliable channel: its response is measured by sequence
            // number.
            self.net
                .send(ClientCommand::Input(InputKind::Probe, vec![probe]));
        }
    }

    /// The host's rumble onto the controllers: the driver's snapshot is copied out (no lock is
    /// held over SDL's calls), then each controller gets what changed and the renewal of what
    /// still runs. Every turn, connected or not: the driver's zeros after the host went away
    /// are the stop.
    fn rumble(&mut self, now: Micros) {
        let Some(g) = self.gamepads.as_mut() else {
            return;
        };
        let Haptics(motors) = self.s.haptics.get();
        for (n, (low, high)) in motors.into_iter().enumerate() {
            g.set_rumble(n as u8, low, high);
        }
        g.apply_rumble(now);
    }

    /// The rumble's counts into the record, and the log when the host rumbled at all.
    fn note_rumble(&mut self) {
        let Some(g) = self.gamepads.as_ref() else {
            return;
        };
        let c = g.rumble_counts();
        if c.changes > 0 {
            log::info!(
                "client: the host's rumble: {} changes; {} applied, {} renewed, {} refused by \
                 a controller without motors, {} ignored (no controller open at that number)",
                c.changes,
                c.applied,
                c.renewed,
                c.unsupported,
                c.ignored
            );
        }
        self.rec.rumble(c);
    }

    /// The input events the driver sent since the last look: their responses are timed.
    fn note_sent_inputs(&mut self) {
        for (seq, sent) in self.io.sent_inputs.try_iter() {
            self.rec.input_sent(seq, sent);
        }
    }

    /// No new picture: shows the last one again if the window, the overlay or the newest head
    /// pose asks for it.
    fn idle(&mut self) -> Result<(), ClientError> {
        if let Some(p) = self.presenter.as_mut() {
            let now = now_us();
            if let (true, Some(last)) = (self.late_warp, self.last_shown.as_ref()) {
                // At most one warped redraw per display refresh.
                if now >= self.next_warp_us {
                    let w = (self.warp_source.0)(last);
                    if w != self.last_warp {
                        p.set_warp(w);
                        self.last_warp = w;
                        self.redraw = true;
                        self.next_warp_us = now + WARP_REDRAW_INTERVAL_US;
                    }
                }
            }
            if self.redraw {
                p.redraw()?;
            }
        }
        self.redraw = false;
        Ok(())
    }

    /// Issue 36: a client that waits (for the host's approval, for a host that went away, or
    /// three seconds for its first picture) opens its window at once and says so there, in the
    /// title and over a dark picture, instead of showing nothing until the stream starts.
    fn open_waiting_window(&mut self, status: &NetStatus, now: Micros) -> Result<(), ClientError> {
        let waiting = status.awaiting_approval
            || status.reconnecting
            || now >= self.started_us + WAITING_WINDOW_AFTER_US;
        if self.presenter.is_some() || self.options.display != Display::Window || !waiting {
            return Ok(());
        }
        let (w, h) = WAITING_WINDOW_SIZE;
        self.open_presenter(w, h, now)?;
        self.waiting_window = true;
        self.view.banner = status.banner(true);
        if let Some(p) = self.presenter.as_mut() {
            p.set_overlay(Some(&self.view.overlay_model()))?;
            p.present(&DecodedFrame::blank(w, h))?;
        }
        Ok(())
    }

    /// The window (or the headless presenter), opened for the first picture's size.
    fn open_presenter(&mut self, w: u32, h: u32, now: Micros) -> Result<(), ClientError> {
        let mut p: Box<dyn Presenter> = match self.options.display {
            Display::Window => open_window(
                self.presenter_kind,
                &WindowSpec {
                    title: self.view.title(),
                    width: w,
                    height: h,
                    fullscreen: self.view.fullscreen,
                    vr: self.lens.clone(),
                },
            )?,
            Display::Headless => Box::new(HeadlessPresenter),
        };
        let vr = self.lens.is_some();
        self.view.live.set_header(format!(
            "{} · {w}x{h}{}",
            p.kind(),
            if vr { " · vr" } else { "" }
        ));
        if self.options.display == Display::Window {
            let suffix = if vr && p.kind() == "gl" { "-vr" } else { "" };
            self.rec.presenter(format!("{}-window{suffix}", p.kind()));
        }
        if self.view.overlay {
            self.view.refresh_overlay(self.s, &self.timings, now);
            p.set_overlay(Some(self.view.live.model()))?;
        }
        super::zero_copy::log_plan(self.options, p.as_ref());
        self.presenter = Some(p);
        Ok(())
    }

    /// Shows a new picture (and/or writes it to the sink) and records it.
    fn show(&mut self, mut item: Decoded, now: Micros) -> Result<(), ClientError> {
        if self.presenter.is_none() {
            self.open_presenter(item.picture.width(), item.picture.height(), now)?;
        }
        if std::mem::take(&mut self.waiting_window) {
            // The stream's first picture replaces the waiting one, and its banner.
            self.view.banner = self.s.status().banner(false);
            if let Some(p) = self.presenter.as_mut() {
                let model = self.view.overlay_model();
                p.set_overlay((self.view.overlay || self.view.banner.is_some()).then_some(&model))?;
            }
        }
        // Left on the GPU (zero-copy) for a presenter or sink that cannot take it: downloaded.
        let sink = self.io.sink.is_some();
        if super::zero_copy::must_download(&item.picture, self.presenter.as_deref(), sink) {
            item.picture = item.picture.download()?;
        }
        if let Some(p) = self.presenter.as_mut() {
            if self.late_warp {
                let (source, record) = (&mut self.warp_source, &item.record);
                let mut sampled = None;
                p.present_warped(&item.picture, &mut || {
                    sampled = (source.0)(record);
                    sampled
                })?;
                self.last_warp = sampled;
                self.next_warp_us = now_us() + WARP_REDRAW_INTERVAL_US;
            } else {
                p.present(&item.picture)?;
            }
            self.redraw = false;
            if self.options.vr.enabled {
                let read = self.photon.measure(
                    &self.s.local_pose,
                    p.as_mut(),
                    &item.picture,
                    now_us(),
                    self.rec,
                );
                if let Some(ms) = read {
                    self.view.live.set_pose_to_photon(Some(ms));
                }
            }
        }
        if let Some(w) = self.io.sink.as_deref_mut() {
            if let Err(e) = w.write(&item.picture) {
                // The reader went away (a closed pipe): the pipeline is over.
                log::info!("client: sink: {e}");
                self.rec.ended(format!("sink closed: {e}"));
                self.s.finish(None);
            }
        }
        item.record.shown_us = now_us();
        if let (Some(rendered), Some(now_pose)) = (item.record.pose, self.s.local_pose.latest()) {
            item.record.pose_error_deg = super::pose::orientation_error_deg(rendered, now_pose);
        }
        if let Some(tap) = self.io.shown_tap.as_mut() {
            (tap.0)(&item.record, &item.picture);
        }
        // Sequence numbers of events sent just before this picture was decoded.
        self.note_sent_inputs();
        self.view.live.on_shown(&item.record);
        if self.late_warp {
            self.last_shown = Some(FrameRecord {
                thumbnail: Vec::new(),
                ..item.record
            });
        }
        self.rec.shown(item.record);
        if self.options.save_frame.is_some() {
            self.last_picture = Some(item.picture);
        }
        Ok(())
    }
}

/// With no stream picture this long after the start (a slow first connection), the window
/// opens anyway and says why.
const WAITING_WINDOW_AFTER_US: Micros = 3_000_000;
/// The size the window opens at before the stream's first picture.
const WAITING_WINDOW_SIZE: (u32, u32) = (1280, 720);

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
    /// What the picture says about the connection ([`NetStatus::banner`]).
    banner: Option<String>,
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
                let model = self.overlay_model();
                let shown = (self.overlay || self.banner.is_some()).then_some(&model);
                if let Err(e) = p.set_overlay(shown) {
                    log::warn!("client: overlay: {e}");
                }
            }
        }
    }

    /// The overlay: the statistics (F12) and the connection's banner above them.
    fn overlay_model(&self) -> untether_media::overlay::OverlayModel {
        untether_media::overlay::OverlayModel {
            banner: self.banner.clone(),
            banner_only: !self.overlay,
            ..self.live.model().clone()
        }
    }

    /// The overlay's figures for the interval ending `now` (the shown frames' host timings,
    /// the driver's counters); the interval's latency, for the host.
    fn refresh_overlay(&mut self, s: &ClientShared, t: &RecentTimings, now: Micros) -> Latency {
        let timings: Vec<_> = self.live.pending().map(|(k, n)| t.get(k, n)).collect();
        self.live.refresh(now, s.live.get(), &timings);
        self.live.latency()
    }
}

type Latency = Option<untether_proto::LatencyReport>;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_alternate_at_their_interval_and_never_when_off() {
        let mut p = Probes {
            every_us: 100,
            next_us: 1_000,
            sign: 1,
        };
        assert!(p.due(999).is_none());
        let dx = |e: Option<InputEvent>| match e {
            Some(InputEvent::PointerMotion { dx, .. }) => Some(dx),
            _ => None,
        };
        assert_eq!(dx(p.due(1_000)), Some(8));
        assert!(p.due(1_050).is_none());
        assert_eq!(dx(p.due(1_100)), Some(-8));
        let mut off = Probes {
            every_us: 0,
            next_us: 0,
            sign: 1,
        };
        assert!(off.due(u64::MAX).is_none());
    }

    #[test]
    fn the_picture_says_reconnecting_or_waiting_for_approval_with_or_without_f12() {
        let mut v = View {
            keys: WindowKeys::default(),
            fullscreen: true,
            overlay: false,
            status: None,
            banner: None,
            live: LiveOverlay::new(0),
            host: "pc:9000".into(),
        };
        assert_eq!(NetStatus::default().banner(false), None);
        let lost = NetStatus {
            reconnecting: true,
            ..NetStatus::default()
        };
        v.banner = lost.banner(false);
        let lines = v.overlay_model().lines();
        assert_eq!(lines, vec!["host unreachable: reconnecting…".to_string()]);
        v.overlay = true;
        let lines = v.overlay_model().lines();
        assert!(
            lines.len() > 3 && lines[0].contains("reconnecting"),
            "{lines:?}"
        );
        let waiting = NetStatus {
            awaiting_approval: true,
            ..NetStatus::default()
        };
        assert!(waiting.banner(false).is_some_and(|b| b.contains("approve")));
        assert!(waiting
            .title_words()
            .is_some_and(|t| t.contains("approval")));
    }

    #[test]
    fn the_title_names_the_host_status_and_keys() {
        let mut v = View {
            keys: WindowKeys::default(),
            fullscreen: false,
            overlay: false,
            status: None,
            banner: None,
            live: LiveOverlay::new(0),
            host: "pc:9000".into(),
        };
        assert_eq!(v.title(), format!("untether — pc:9000 — {WINDOW_KEYS}"));
        v.status = Some("viewer".into());
        assert!(v.title().starts_with("untether — pc:9000 — [viewer] — "));
    }
}
