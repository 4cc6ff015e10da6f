//! Presenters: a window that shows decoded pictures and returns the window's keyboard and
//! mouse events — the GPU presenter (OpenGL ES 3, [`crate::present_gl`]) or the SDL renderer
//! (this file, the fallback) — or a headless sink. [`open_window`] picks one
//! (`--presenter gl|sdl|auto`).
//!
//! The SDL renderer gets a streaming IYUV texture for 4:2:0 pictures (SDL does the YUV→RGB step
//! on the renderer, told explicitly to use BT.601 — the matrix of the whole pipeline) and an
//! ARGB8888 texture for GBR pictures. Its vsync is off: a frame is shown as soon as it is
//! decoded. It is SDL's software renderer by default; set `UNTETHER_SDL_RENDERER=accelerated`
//! to use SDL's GPU renderer on a machine with one. It cannot distort for lenses or late-warp:
//! with `--vr` it shows the side-by-side picture as it is, and says so.

use sdl2::pixels::PixelFormatEnum;
use sdl2::render::{BlendMode, Canvas, Texture, TextureCreator};
use sdl2::video::{Window, WindowContext};
use sdl2::EventPump;

use crate::codec::{DecodedFrame, PictureFormat};
use crate::lens::LensProfile;
use crate::overlay::{OverlayModel, TextRaster};
use crate::warp::Warp;
use crate::window::{self, sdl_err};
use crate::{MediaError, Result};

/// An input event from the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowEvent {
    /// `code` is an SDL keycode ([`keys`]); `repeat` marks auto-repeat.
    Key {
        code: i32,
        down: bool,
        repeat: bool,
    },
    /// Absolute position in the window and relative motion, pixels.
    MouseMotion {
        x: i32,
        y: i32,
        dx: i32,
        dy: i32,
    },
    /// 1 left, 2 middle, 3 right, 4/5 extra buttons.
    MouseButton {
        button: u8,
        down: bool,
    },
    Wheel {
        dx: i32,
        dy: i32,
    },
    /// The window was uncovered, resized or changed fullscreen state: show the last picture
    /// again ([`Presenter::redraw`]).
    Exposed,
    /// The window was closed.
    Quit,
}

/// SDL keycodes of the keys the client's window uses for itself (`WindowEvent::Key::code`).
pub mod keys {
    use sdl2::sys::SDL_KeyCode as K;
    pub const F10: i32 = K::SDLK_F10 as i32;
    pub const F11: i32 = K::SDLK_F11 as i32;
    pub const F12: i32 = K::SDLK_F12 as i32;
    pub const RETURN: i32 = K::SDLK_RETURN as i32;
    pub const LALT: i32 = K::SDLK_LALT as i32;
    pub const RALT: i32 = K::SDLK_RALT as i32;
}

/// Shows decoded pictures. Runs on the thread that made it (SDL wants the thread that made
/// the window).
pub trait Presenter {
    /// Uploads a new picture and shows it, with the current warp and overlay.
    fn present(&mut self, picture: &DecodedFrame) -> Result<()>;
    /// Shows the last picture again (after a warp, overlay or window change); Ok(false):
    /// nothing shown yet.
    fn redraw(&mut self) -> Result<bool> {
        Ok(false)
    }
    fn poll_events(&mut self) -> Vec<WindowEvent>;
    /// Reads back `width` pixels of row `y` of what was last presented (window coordinates,
    /// top row 0), as BGRA (the pose-to-photon measurement reads the pose markers there);
    /// None: not supported.
    fn read_row(&mut self, _y: u32, _width: u32) -> Option<Vec<u8>> {
        None
    }
    /// The window's title (keys, the stream's state: the user sees it there).
    fn set_title(&mut self, _title: &str) {}
    /// The late warp of the pictures shown from now on (None: none). Only the GPU presenter
    /// in VR mode warps.
    fn set_warp(&mut self, _warp: Option<Warp>) {}
    /// What this presenter's EGL display offers for zero-copy imports (None: not a GL
    /// presenter).
    fn egl_support(&self) -> Option<crate::zero_copy::EglSupport> {
        None
    }
    /// Whether [`Self::present`] takes pictures a hardware decoder left on the GPU
    /// ([`DecodedFrame::gpu`]); false: the caller downloads them first.
    fn takes_gpu_pictures(&self) -> bool {
        false
    }
    /// [`Self::present`] with the late warp asked for as late as this presenter can: the GPU
    /// presenter uploads the picture first and samples `warp` just before it draws.
    fn present_warped(
        &mut self,
        picture: &DecodedFrame,
        warp: &mut dyn FnMut() -> Option<Warp>,
    ) -> Result<()> {
        self.set_warp(warp());
        self.present(picture)
    }
    /// The statistics overlay (None: hidden); its text is rasterised again only when it
    /// changed.
    fn set_overlay(&mut self, _overlay: Option<&OverlayModel>) -> Result<()> {
        Ok(())
    }
    fn set_fullscreen(&mut self, _on: bool) -> Result<()> {
        Ok(())
    }
    /// Captures the mouse (relative mode, for games) or releases it.
    fn set_mouse_captured(&mut self, _on: bool) {}
    /// What draws: "gl", "sdl" or "headless".
    fn kind(&self) -> &'static str;
}

/// SDL video drivers that show nothing to anyone: a window on one of them is not a display.
pub const INVISIBLE_VIDEO_DRIVERS: [&str; 3] = ["offscreen", "dummy", "evdev"];

/// Refuses an SDL video driver that shows nothing (SDL falls back to its off-screen driver
/// when no display can be opened), unless it was asked for with `SDL_VIDEODRIVER`.
pub fn check_visible_driver(driver: &str, requested: Option<&str>) -> Result<()> {
    if INVISIBLE_VIDEO_DRIVERS.contains(&driver) && requested != Some(driver) {
        return Err(MediaError::Display(format!(
            "no display: SDL could only open its {driver:?} video driver, which shows nothing \
             (DISPLAY={:?}, WAYLAND_DISPLAY={:?}); run under a desktop session, or use --headless \
             to decode without a window",
            std::env::var("DISPLAY").unwrap_or_default(),
            std::env::var("WAYLAND_DISPLAY").unwrap_or_default()
        )));
    }
    Ok(())
}

/// Decodes and drops: for measuring without a display.
pub struct HeadlessPresenter;

impl Presenter for HeadlessPresenter {
    fn present(&mut self, _picture: &DecodedFrame) -> Result<()> {
        Ok(())
    }
    fn poll_events(&mut self) -> Vec<WindowEvent> {
        Vec::new()
    }
    fn kind(&self) -> &'static str {
        "headless"
    }
}

/// Which windowed presenter (`--presenter`, `client.presenter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PresenterKind {
    /// The GPU presenter, or the SDL renderer when it cannot start (one log line says why).
    #[default]
    Auto,
    /// The GPU presenter (OpenGL ES 3) or an error.
    Gl,
    /// SDL's renderer.
    Sdl,
}

impl PresenterKind {
    pub const NAMES: [&'static str; 3] = ["auto", "gl", "sdl"];

    pub fn parse(s: &str) -> Option<PresenterKind> {
        match s {
            "auto" => Some(PresenterKind::Auto),
            "gl" => Some(PresenterKind::Gl),
            "sdl" => Some(PresenterKind::Sdl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PresenterKind::Auto => "auto",
            PresenterKind::Gl => "gl",
            PresenterKind::Sdl => "sdl",
        }
    }
}

/// What a window is opened with.
#[derive(Clone, Debug)]
pub struct WindowSpec {
    pub title: String,
    /// The picture's size: the window's initial size.
    pub width: u32,
    pub height: u32,
    pub fullscreen: bool,
    /// VR: the picture is side-by-side stereo, pre-distorted per eye for this lens profile.
    pub vr: Option<LensProfile>,
}

/// Opens the window `kind` asks for; `Auto` falls back to the SDL renderer, saying why in one
/// line, when the GPU presenter cannot start.
pub fn open_window(kind: PresenterKind, spec: &WindowSpec) -> Result<Box<dyn Presenter>> {
    match kind {
        PresenterKind::Sdl => Ok(Box::new(SdlPresenter::open(spec)?)),
        PresenterKind::Gl => Ok(Box::new(
            crate::present_gl::GlPresenter::open(spec).map_err(|e| {
                MediaError::Display(format!(
                    "the GL presenter (--presenter gl) cannot start: {e}"
                ))
            })?,
        )),
        PresenterKind::Auto => match crate::present_gl::GlPresenter::open(spec) {
            Ok(p) => Ok(Box::new(p)),
            Err(e) => {
                log::warn!("GL presenter unavailable ({e}): falling back to the SDL renderer");
                Ok(Box::new(SdlPresenter::open(spec)?))
            }
        },
    }
}

/// Which SDL renderer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RendererKind {
    Software,
    Accelerated,
}

impl RendererKind {
    /// From `UNTETHER_SDL_RENDERER` (software | accelerated), software by default.
    pub fn from_env() -> RendererKind {
        match std::env::var("UNTETHER_SDL_RENDERER").as_deref() {
            Ok("accelerated") => RendererKind::Accelerated,
            _ => RendererKind::Software,
        }
    }
}

/// The overlay's smallest text size, pixels (it grows with the output:
/// [`crate::overlay::text_px_for`]).
pub(crate) const OVERLAY_PX: f32 = 13.0;
/// The overlay's distance from the window's top-left corner, pixels.
pub(crate) const OVERLAY_MARGIN: i32 = 8;

/// An SDL2 window with SDL's renderer (the fallback presenter). Create and use it on one
/// thread.
pub struct SdlPresenter {
    // Field order is drop order: textures before their creator, the canvas, then SDL.
    texture: Option<(Texture, PictureFormat, u32, u32)>,
    overlay_texture: Option<(Texture, u32, u32)>,
    overlay: Option<TextRaster>,
    overlay_on: bool,
    creator: TextureCreator<WindowContext>,
    canvas: Canvas<Window>,
    events: EventPump,
    _video: sdl2::VideoSubsystem,
    sdl: sdl2::Sdl,
}

impl SdlPresenter {
    pub fn new(title: &str, width: u32, height: u32, fullscreen: bool) -> Result<Self> {
        Self::with_renderer(title, width, height, fullscreen, RendererKind::from_env())
    }

    /// A window for `spec` (with `--vr`, the side-by-side picture is shown undistorted).
    pub fn open(spec: &WindowSpec) -> Result<Self> {
        if spec.vr.is_some() {
            log::warn!(
                "--vr: the SDL renderer cannot distort for lenses or late-warp; showing the \
                 side-by-side picture as it is (use the GL presenter)"
            );
        }
        Self::new(&spec.title, spec.width, spec.height, spec.fullscreen)
    }

    pub fn with_renderer(
        title: &str,
        width: u32,
        height: u32,
        fullscreen: bool,
        renderer: RendererKind,
    ) -> Result<Self> {
        let (sdl, video) = window::init_video()?;
        // SAFETY: a plain setter of SDL global state, called after SDL_Init on this thread.
        unsafe {
            sdl2::sys::SDL_SetYUVConversionMode(
                sdl2::sys::SDL_YUV_CONVERSION_MODE::SDL_YUV_CONVERSION_BT601,
            );
        }
        let mut wb = video.window(title, width, height);
        wb.position_centered().resizable();
        if fullscreen {
            wb.fullscreen_desktop();
        }
        let window = wb
            .build()
            .map_err(|e| MediaError::Display(format!("SDL window: {e}")))?;
        let cb = window.into_canvas();
        let cb = match renderer {
            RendererKind::Software => cb.software(),
            RendererKind::Accelerated => cb.accelerated(),
        };
        let mut canvas = cb
            .build()
            .map_err(|e| MediaError::Display(format!("SDL renderer: {e}")))?;
        // Keeps the picture's aspect in a resized or fullscreen window (black bars).
        canvas
            .set_logical_size(width, height)
            .map_err(|e| MediaError::Display(format!("SDL logical size: {e}")))?;
        canvas.set_draw_color(sdl2::pixels::Color::RGB(0, 0, 0));
        canvas.clear();
        canvas.present();
        let creator = canvas.texture_creator();
        let events = sdl.event_pump().map_err(sdl_err("SDL events"))?;
        Ok(SdlPresenter {
            texture: None,
            overlay_texture: None,
            overlay: None,
            overlay_on: false,
            creator,
            canvas,
            events,
            _video: video,
            sdl,
        })
    }

    fn draw(&mut self) -> Result<bool> {
        let Some((tex, ..)) = self.texture.as_ref() else {
            return Ok(false);
        };
        self.canvas.clear();
        self.canvas
            .copy(tex, None, None)
            .map_err(sdl_err("SDL copy"))?;
        if self.overlay_on {
            if let Some((t, w, h)) = &self.overlay_texture {
                let (_, oh) = self.canvas.output_size().unwrap_or((0, 720));
                let m = crate::overlay::margin_for(oh).max(OVERLAY_MARGIN);
                let dst = sdl2::rect::Rect::new(m, m, *w, *h);
                self.canvas
                    .copy(t, None, dst)
                    .map_err(sdl_err("SDL overlay copy"))?;
            }
        }
        self.canvas.present();
        Ok(true)
    }
}

impl Presenter for SdlPresenter {
    fn read_row(&mut self, y: u32, width: u32) -> Option<Vec<u8>> {
        // ARGB8888 is B, G, R, A in memory on little-endian machines.
        let fmt = if cfg!(target_endian = "little") {
            PixelFormatEnum::ARGB8888
        } else {
            PixelFormatEnum::BGRA8888
        };
        self.canvas
            .read_pixels(sdl2::rect::Rect::new(0, y as i32, width, 1), fmt)
            .ok()
    }

    fn kind(&self) -> &'static str {
        "sdl"
    }

    fn set_title(&mut self, title: &str) {
        window::set_title(self.canvas.window_mut(), title);
    }

    fn set_fullscreen(&mut self, on: bool) -> Result<()> {
        window::set_fullscreen(self.canvas.window_mut(), on)
    }

    fn set_mouse_captured(&mut self, on: bool) {
        window::set_mouse_captured(&self.sdl, on);
    }

    fn set_overlay(&mut self, overlay: Option<&OverlayModel>) -> Result<()> {
        let Some(model) = overlay else {
            self.overlay_on = false;
            return Ok(());
        };
        self.overlay_on = true;
        // Text sized for the output (a new raster when the window changed size).
        let (_, oh) = self.canvas.output_size().unwrap_or((0, 720));
        let px = crate::overlay::text_px_for(oh, OVERLAY_PX);
        if self.overlay.as_ref().is_none_or(|r| r.px() != px) {
            self.overlay = Some(TextRaster::new(px)?);
        }
        let Some(raster) = self.overlay.as_mut() else {
            return Ok(());
        };
        if !raster.update(&model.lines()) {
            return Ok(());
        }
        let img = raster.image();
        if !matches!(&self.overlay_texture, Some((_, w, h)) if *w == img.width && *h == img.height)
        {
            let mut t = self
                .creator
                .create_texture_streaming(PixelFormatEnum::ABGR8888, img.width, img.height)
                .map_err(|e| MediaError::Display(format!("SDL overlay texture: {e}")))?;
            t.set_blend_mode(BlendMode::Blend);
            if let Some((old, ..)) = self.overlay_texture.take() {
                // SAFETY: the old texture belongs to this renderer and is no longer used.
                unsafe { old.destroy() };
            }
            self.overlay_texture = Some((t, img.width, img.height));
        }
        if let Some((t, ..)) = self.overlay_texture.as_mut() {
            // ABGR8888 is R, G, B, A in memory on little-endian machines: the image's order.
            t.update(None, &img.data, img.width as usize * 4)
                .map_err(|e| MediaError::Display(format!("SDL overlay upload: {e}")))?;
        }
        Ok(())
    }

    fn redraw(&mut self) -> Result<bool> {
        self.draw()
    }

    fn present(&mut self, picture: &DecodedFrame) -> Result<()> {
        let (w, h, fmt) = (picture.width(), picture.height(), picture.format());
        if !matches!(&self.texture, Some((_, f, tw, th)) if *f == fmt && *tw == w && *th == h) {
            let pf = match fmt {
                PictureFormat::I420 => PixelFormatEnum::IYUV,
                PictureFormat::Gbrp => PixelFormatEnum::ARGB8888,
            };
            let t = self
                .creator
                .create_texture_streaming(pf, w, h)
                .map_err(|e| MediaError::Display(format!("SDL texture: {e}")))?;
            if let Some((old, ..)) = self.texture.take() {
                // SAFETY: the old texture belongs to this renderer and is no longer used.
                unsafe { old.destroy() };
            }
            self.texture = Some((t, fmt, w, h));
            self.canvas
                .set_logical_size(w, h)
                .map_err(|e| MediaError::Display(format!("SDL logical size: {e}")))?;
        }
        let Some((tex, ..)) = self.texture.as_mut() else {
            return Err(MediaError::Display("no texture".into()));
        };
        match fmt {
            PictureFormat::I420 => {
                let (y, u, v) = (picture.plane(0), picture.plane(1), picture.plane(2));
                tex.update_yuv(None, y.0, y.1, u.0, u.1, v.0, v.1)
                    .map_err(|e| MediaError::Display(format!("SDL YUV upload: {e}")))?;
            }
            PictureFormat::Gbrp => {
                let bgra = picture.to_bgra()?;
                tex.update(None, &bgra.data, bgra.stride)
                    .map_err(|e| MediaError::Display(format!("SDL upload: {e}")))?;
            }
        }
        self.draw()?;
        Ok(())
    }

    fn poll_events(&mut self) -> Vec<WindowEvent> {
        window::poll_events(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invisible_video_driver_is_refused_unless_asked_for() {
        let e = check_visible_driver("offscreen", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no display") && e.contains("--headless"), "{e}");
        assert!(check_visible_driver("dummy", Some("x11")).is_err());
        assert!(check_visible_driver("offscreen", Some("offscreen")).is_ok());
        assert!(check_visible_driver("x11", None).is_ok());
        assert!(check_visible_driver("wayland", None).is_ok());
    }
    use crate::codec::{Decoder, Encoder, EncoderConfig};
    use crate::convert::Conversion;
    use crate::scene::{Scene, SceneConfig};
    use crate::BgraFrame;

    /// Under a display (Xvfb in `make test`): the window shows the decoded picture at 1:1.
    #[test]
    fn window_shows_the_decoded_frame() {
        if std::env::var_os("DISPLAY").is_none() {
            eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
            return;
        }
        let (w, h) = (640, 360);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        scene.render(0.7, &mut f);
        let mut enc = Encoder::new(EncoderConfig {
            threads: 1,
            conversion: Conversion::Simd,
            ..EncoderConfig::new(w, h, 60, 20_000)
        })
        .unwrap();
        let pic = Decoder::new(1)
            .unwrap()
            .decode(&enc.encode(&f, true).unwrap().unwrap().data)
            .unwrap()
            .unwrap();
        let expected = pic.to_bgra().unwrap();
        let mut p = SdlPresenter::new("untether test", w, h, false).unwrap();
        for _ in 0..5 {
            p.present(&pic).unwrap();
            p.poll_events();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        // Read the window back through the renderer.
        let shot = p
            .canvas
            .read_pixels(None, PixelFormatEnum::ARGB8888)
            .expect("read pixels");
        assert_eq!(shot.len(), (w * h * 4) as usize);
        let mut sum = 0.0;
        let mut n = 0.0;
        for y in h / 4..3 * h / 4 {
            for x in w / 4..3 * w / 4 {
                let i = (y * w + x) as usize * 4;
                for c in 0..3 {
                    sum += (shot[i + c] as f64 - expected.data[i + c] as f64).abs();
                    n += 1.0;
                }
            }
        }
        let mad = sum / n;
        assert!(
            mad < 4.0,
            "window centre differs from the decoded frame by {mad}"
        );
    }
}
