//! The untether host inside the application's process: the configuration it starts with, the
//! frames it is given, the client's pose and input it hands back.

use std::collections::HashSet;
use std::path::PathBuf;

use untether::api::{HostSetup, InputSpec, SourceSpec};
use untether::config::ConfigToml;
use untether::{Host, HostError, HostOptions};
use untether_media::codec::InputPicture;
use untether_proto::{InputEvent, Micros, PoseSample, StateKey, StateValue};

use crate::math::Predictor;

/// What a frame carries through the read-back to the encoder: the head pose it was rendered
/// for and when the application ended it (`xrEndFrame`, on [`untether::clock::now_us`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameTag {
    pub pose: Option<PoseSample>,
    pub ended_us: Micros,
}

/// What the runtime reads from untether's configuration file: `UNTETHER_CONFIG=FILE`, else
/// `$XDG_CONFIG_HOME/untether/untether.toml` (or `~/.config/untether/untether.toml`) when it
/// exists, else the defaults. `video.resolution` is the side-by-side stereo frame (each eye
/// half its width), `video.fps` the frame rate `xrWaitFrame` paces at, `vr.ipd_mm` and
/// `vr.fov_deg` the views; `host.*` the bind address, access and state directory as for
/// `untether host`.
#[derive(Clone, Debug)]
pub struct Settings {
    pub options: HostOptions,
    /// Where they came from (for messages).
    pub origin: String,
}

impl Settings {
    pub fn load() -> Result<Settings, String> {
        let (cfg, origin) = match config_path() {
            Some(path) => (
                ConfigToml::load(&path).map_err(|e| error_chain(&e))?,
                path.display().to_string(),
            ),
            None => (ConfigToml::default(), "defaults".to_string()),
        };
        Settings::from_config(&cfg, origin)
    }

    pub fn from_config(cfg: &ConfigToml, origin: String) -> Result<Settings, String> {
        let video = cfg.video.validate().map_err(|e| error_chain(&e))?;
        let options = HostOptions {
            vr: cfg.vr.clone(),
            video,
            scene: cfg.scene.clone(),
            host: cfg.host.clone(),
            network: cfg.network.clone(),
            webrtc: cfg.webrtc.clone(),
        };
        options.validate().map_err(|e| error_chain(&e))?;
        let r = options.video.resolution;
        if !r.width.is_multiple_of(4) || r.width < 64 || r.height < 32 {
            return Err(format!(
                "video.resolution: {}x{} cannot be split into two eye views; the stereo frame needs a width that is a multiple of 4, at least 64x32",
                r.width, r.height
            ));
        }
        Ok(Settings { options, origin })
    }

    /// One eye's view: half the stereo frame's width, its height.
    pub fn eye_size(&self) -> (u32, u32) {
        let r = self.options.video.resolution;
        (r.width / 2, r.height)
    }

    pub fn frame_size(&self) -> (u32, u32) {
        let r = self.options.video.resolution;
        (r.width, r.height)
    }

    pub fn fps(&self) -> u32 {
        self.options.video.fps.max(1)
    }

    pub fn ipd_m(&self) -> f32 {
        self.options.vr.ipd_mm / 1000.0
    }

    /// Takes a client's eye views (field of view in degrees, eye separation in mm), within the
    /// configuration's limits for `vr.fov_deg` and `vr.ipd_mm`; false if they are outside.
    pub fn use_client_view(&mut self, fov_deg: f32, ipd_mm: f32) -> bool {
        let mut vr = self.options.vr.clone();
        vr.fov_deg = fov_deg;
        vr.ipd_mm = ipd_mm;
        if let Err(e) = vr.validate() {
            log::warn!("untether OpenXR runtime: the client's views are not used: {e}");
            return false;
        }
        self.options.vr = vr;
        true
    }

    /// Half the horizontal and vertical field of view of one eye, radians (symmetric views).
    pub fn half_fov(&self) -> (f32, f32) {
        let (w, h) = self.eye_size();
        let hx = (self.options.vr.fov_deg.to_radians() / 2.0).clamp(0.1, 1.5);
        let hy = (hx.tan() * h as f32 / w as f32).atan();
        (hx, hy)
    }
}

fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UNTETHER_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let p = base.join("untether").join("untether.toml");
    p.is_file().then_some(p)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Buttons held on the client, from its input events and its first game controller.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// SDL keycodes down.
    pub keys: HashSet<u32>,
    /// Mouse buttons down (1 left, 2 middle, 3 right).
    pub mouse: HashSet<u8>,
    /// Controller 0: Linux `BTN_*` codes held and axes (lx, ly, rx, ry, lt, rt).
    pub pad_buttons: Vec<u16>,
    pub pad_axes: [f32; 6],
}

/// The running host and what it has heard.
pub struct Stream {
    host: Option<Host>,
    pub predictor: Predictor,
    pub held: Held,
    /// Frames handed to the host while a client was connected / in all.
    pub frames_published: u64,
    pub frames_submitted: u64,
    /// Frames handed over since a client was last connected without interruption.
    pub frames_to_current: u64,
    /// When the rumble running now ends (runtime clock, ns).
    rumble_until: Option<i64>,
    /// Per frame streamed, from its `xrEndFrame` to its pixels in the host's hands: the
    /// application's GPU work finishing, the blit and the read-back.
    to_pixels: untether_proto::stats::Samples,
    /// The client's last reported `xrEndFrame` → shown (its glass-to-glass p50, ns) and when
    /// it was last asked for (runtime clock, µs).
    shown_after_end: (Option<i64>, i64),
}

impl Stream {
    /// Starts the host: the application is the source, with an encoder thread (frames are
    /// published and the newest is encoded, so `xrEndFrame` never waits for the encoder).
    pub fn start(settings: &Settings) -> Result<Stream, String> {
        let setup = HostSetup {
            source: SourceSpec::App,
            input: InputSpec::Queue,
            encoder_thread: true,
            ..HostSetup::default()
        };
        let host =
            Host::start_with(settings.options.clone(), setup).map_err(|e| error_chain(&e))?;
        log::info!(
            "untether OpenXR runtime: host listening on {} ({}), fingerprint {}",
            host.local_addr(),
            settings.origin,
            host.fingerprint()
        );
        if let Some(pin) = host.pairing_pin() {
            // The application's output may be a log: the PIN only to a terminal (issue 33).
            let secrets = untether::identity::Secrets::for_stderr(host.state_dir().as_deref());
            eprintln!(
                "{}",
                secrets.pairing_pin(&pin, settings.options.host.pin_ttl_s)
            );
        }
        Ok(Stream::with(Some(host)))
    }

    /// A stream without a host (the core's tests: sessions that stream nowhere).
    #[cfg(test)]
    pub(crate) fn without_host() -> Stream {
        Stream::with(None)
    }

    /// A stream on `host` that has handled no frame yet.
    fn with(host: Option<Host>) -> Stream {
        Stream {
            host,
            predictor: Predictor::default(),
            held: Held::default(),
            frames_published: 0,
            frames_submitted: 0,
            frames_to_current: 0,
            rumble_until: None,
            to_pixels: Default::default(),
            shown_after_end: (None, i64::MIN),
        }
    }

    pub fn has_client(&self) -> bool {
        self.host.as_ref().is_some_and(Host::has_client)
    }

    /// The connected client's eye views as it sent them (field of view in degrees, eye
    /// separation in mm): the controller's, else the first connected client's that sent any.
    pub fn client_view(&self) -> Option<(f32, f32)> {
        let clients = self.host.as_ref()?.clients();
        let live = || clients.iter().filter(|c| c.left_s.is_none());
        live()
            .filter(|c| c.role == "controller")
            .chain(live())
            .find_map(|c| Some((c.view_fov_deg?, c.view_ipd_mm?)))
    }

    /// How long after `xrEndFrame` the client shows a frame: the glass-to-glass p50 the
    /// controller (else the first live client) reported last — the client measures it from the
    /// `xrEndFrame` instant each frame carries. Asked of the host at most twice a second.
    pub fn shown_after_end_ns(&mut self, now_us: i64) -> Option<i64> {
        if now_us.saturating_sub(self.shown_after_end.1) >= 500_000 {
            let clients = self.host.as_ref().map(Host::clients).unwrap_or_default();
            let live = || clients.iter().filter(|c| c.left_s.is_none());
            let p50 = live()
                .filter(|c| c.role == "controller")
                .chain(live())
                .find_map(|c| c.latency.as_ref()?.glass_to_glass.map(|g| g.p50_ms));
            self.shown_after_end = (p50.map(|ms| (ms * 1e6) as i64), now_us);
        }
        self.shown_after_end.0
    }

    /// Reads the client's newest head pose into the predictor (`now_us`: runtime clock).
    pub fn observe_pose(&mut self, now_us: i64) {
        if let Some(s) = self.host.as_ref().and_then(Host::head_pose) {
            self.predictor.observe(s, now_us);
        }
    }

    /// Drains the client's input into [`Held`].
    pub fn poll_input(&mut self) {
        let Some(host) = self.host.as_ref() else {
            return;
        };
        while let Some(rec) = host.poll_input() {
            match rec.event {
                InputEvent::Key { code, down: true } => {
                    self.held.keys.insert(code);
                }
                InputEvent::Key { code, down: false } => {
                    self.held.keys.remove(&code);
                }
                InputEvent::MouseButton { button, down: true } => {
                    self.held.mouse.insert(button);
                }
                InputEvent::MouseButton {
                    button,
                    down: false,
                } => {
                    self.held.mouse.remove(&button);
                }
                _ => {}
            }
        }
        if let Some(pad) = host.gamepad(0) {
            self.held.pad_buttons = pad.buttons;
            self.held.pad_axes = pad.axes;
        }
    }

    /// Hands a finished Vulkan frame to the encoder: read back, or (zero-copy) the exported
    /// image it is in.
    pub fn hand_over(
        &mut self,
        ready: crate::vk_compositor::Ready<'_>,
        w: u32,
        h: u32,
        tag: FrameTag,
    ) {
        match ready {
            crate::vk_compositor::Ready::Pixels(bgra) => self.publish(bgra, w, h, tag),
            crate::vk_compositor::Ready::DmaBuf(picture, keep) => {
                self.publish_dma_buf(&picture, keep, tag)
            }
        }
    }

    /// Whether the host's encoder takes the stereo frame as a DMA-BUF (zero-copy): decided
    /// once per stream by the host, which logs the one line when not.
    pub fn dma_buf_input(&self) -> Result<(), String> {
        match self.host.as_ref() {
            Some(h) => h.dma_buf_input(),
            None => Err("the host has stopped".into()),
        }
    }

    /// Zero-copy off for the runtime's own reason (the device cannot export): the host's one
    /// line names it.
    pub fn refuse_dma_buf(&self, why: &str) {
        if let Some(h) = self.host.as_ref() {
            h.refuse_dma_buf(why);
        }
    }

    /// Like [`publish`](Self::publish), for the stereo frame in an exported image: the host
    /// holds `keep` until the encoder is done with it.
    pub fn publish_dma_buf(
        &mut self,
        picture: &untether_media::codec::DmaBufPicture<'_>,
        keep: untether_media::codec::KeepAlive,
        tag: FrameTag,
    ) {
        self.submit(tag, |host| {
            host.publish_dma_buf(picture, keep, tag.pose, tag.ended_us)
        });
    }

    /// Hands a BGRA stereo frame to the encoder with the pose it was rendered for and the time
    /// the application ended it (glass-to-glass starts there, before the read-back).
    pub fn publish(&mut self, bgra: &[u8], width: u32, height: u32, tag: FrameTag) {
        let picture = InputPicture::Bgra {
            width,
            height,
            data: bgra,
            stride: width as usize * 4,
        };
        self.submit(tag, |host| {
            host.publish_with_pose_at(&picture, tag.pose, tag.ended_us)
        });
    }

    /// One frame for the encoder (`send`: read back or as a DMA-BUF): counted, its wait since
    /// `xrEndFrame` recorded, handed over only while a client watches.
    fn submit(&mut self, tag: FrameTag, send: impl FnOnce(&Host) -> Result<(), HostError>) {
        let Some(host) = self.host.as_ref() else {
            return;
        };
        self.frames_submitted += 1;
        if !host.has_client() {
            self.frames_to_current = 0;
            return;
        }
        let ready = untether::clock::now_us().saturating_sub(tag.ended_us);
        self.to_pixels.push_us(ready.min(i64::MAX as u64) as i64);
        match send(host) {
            Ok(()) => {
                self.frames_published += 1;
                self.frames_to_current += 1;
            }
            Err(e) => log::warn!("untether OpenXR runtime: frame not streamed: {e}"),
        }
    }

    /// Rumble on the client's first controller at `amplitude` (0 stops it) until `until_ns`
    /// (runtime clock; [`Stream::tick`] stops it then).
    pub fn rumble(&mut self, amplitude: f32, until_ns: Option<i64>) {
        self.rumble_until = until_ns.filter(|_| amplitude > 0.0);
        if let Some(host) = self.host.as_ref() {
            let a = amplitude.clamp(0.0, 1.0);
            let key: StateKey = untether_proto::state::keys::HAPTICS;
            host.publish_state(key, StateValue::Haptic { low: a, high: a });
        }
    }

    /// Ends a rumble whose time is up.
    pub fn tick(&mut self, now_ns: i64) {
        if self.rumble_until.is_some_and(|t| now_ns >= t) {
            self.rumble(0.0, None);
        }
    }

    /// Stops the host: connected clients are told goodbye.
    pub fn stop(&mut self) {
        if let (Some(p50), Some(p95)) = (
            self.to_pixels.percentile(50.0),
            self.to_pixels.percentile(95.0),
        ) {
            log::info!(
                "untether OpenXR runtime: xrEndFrame → pixels in the host (the application's GPU \
                 work finishing, the blit, the read-back) p50 {p50:.2} ms, p95 {p95:.2} ms over {} \
                 frames",
                self.to_pixels.len()
            );
        }
        if let Some(host) = self.host.take() {
            let s = host.stop();
            log::info!(
                "untether OpenXR runtime: host stopped after {} frames submitted, {} streamed ({} to the client watching at the end, since it connected (0: none watched then); {} encoded, {} replaced before the encoder took them)",
                self.frames_submitted,
                self.frames_published,
                self.frames_to_current,
                s.encoded,
                s.dropped
            );
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stereo_frame_splits_into_two_eyes_with_the_configured_fov() {
        let cfg = ConfigToml::parse(
            "[video]\nresolution = \"1280x720\"\n[vr]\nfov_deg = 90.0\n",
            "t",
        )
        .unwrap();
        let s = Settings::from_config(&cfg, "t".into()).unwrap();
        assert_eq!(s.eye_size(), (640, 720));
        let (hx, hy) = s.half_fov();
        assert!((hx.to_degrees() - 45.0).abs() < 1e-3);
        // 640x720: taller than wide, so the vertical half-angle is larger.
        assert!((hy.tan() - 720.0 / 640.0).abs() < 1e-3);
    }

    #[test]
    fn the_clients_view_replaces_the_configured_one_within_the_limits() {
        let cfg = ConfigToml::parse("[video]\nresolution = \"1280x720\"\n", "t").unwrap();
        let mut s = Settings::from_config(&cfg, "t".into()).unwrap();
        assert!(s.use_client_view(100.0, 60.0));
        assert!((s.half_fov().0.to_degrees() - 50.0).abs() < 1e-3);
        assert!((s.ipd_m() - 0.060).abs() < 1e-6);
        // Out of vr.fov_deg's range: refused, the previous values kept.
        assert!(!s.use_client_view(655.35, 64.0));
        assert!((s.half_fov().0.to_degrees() - 50.0).abs() < 1e-3);
        assert!(!s.use_client_view(90.0, 0.0));
        assert!((s.ipd_m() - 0.060).abs() < 1e-6);
    }

    #[test]
    fn a_bad_key_is_named() {
        let cfg = ConfigToml::parse("[video]\nfps = 0\n", "t").unwrap();
        let e = Settings::from_config(&cfg, "t".into()).unwrap_err();
        assert!(e.contains("video.fps"), "{e}");
    }
}
