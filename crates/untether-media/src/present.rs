//! Presenters: an SDL2 window that shows decoded pictures at 1:1 and returns the window's
//! keyboard and mouse events, or a headless sink.
//!
//! The window gets a streaming IYUV texture for 4:2:0 pictures (SDL does the YUV→RGB step on
//! the renderer, told explicitly to use BT.601 — the matrix of the whole pipeline) and an
//! ARGB8888 texture for GBR pictures. Vsync is off: a frame is shown as soon as it is decoded.
//! The renderer is SDL's software renderer by default, which measured faster than Mesa's
//! llvmpipe GL under Xvfb on the dev box (docs/BENCHMARKS.md); set
//! `UNTETHER_SDL_RENDERER=accelerated` to use the GPU renderer on a machine with one.

use sdl2::event::{Event, WindowEvent as SdlWindowEvent};
use sdl2::mouse::MouseButton;
use sdl2::pixels::PixelFormatEnum;
use sdl2::render::{Canvas, Texture, TextureCreator};
use sdl2::video::{Window, WindowContext};
use sdl2::EventPump;

use crate::codec::{DecodedFrame, PictureFormat};
use crate::{MediaError, Result};

/// An input event from the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowEvent {
    /// `code` is an SDL keycode; `repeat` marks auto-repeat.
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
    /// The window was closed.
    Quit,
}

/// Shows decoded pictures.
pub trait Presenter {
    fn present(&mut self, picture: &DecodedFrame) -> Result<()>;
    fn poll_events(&mut self) -> Vec<WindowEvent>;
    /// Says something about the stream where the user sees it (a window's title), e.g. that
    /// the picture is held while the host is unreachable; None: nothing to say.
    fn set_status(&mut self, _status: Option<&str>) {}
    /// Reads back `width` pixels of row `y` of what was last presented, as BGRA (the
    /// pose-to-photon measurement reads the pose markers there); None: not supported.
    fn read_row(&mut self, _y: u32, _width: u32) -> Option<Vec<u8>> {
        None
    }
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

fn sdl_err(what: &str) -> impl Fn(String) -> MediaError + '_ {
    move |e| MediaError::Display(format!("{what}: {e}"))
}

/// An SDL2 window the size of the stream. Create and use it on one thread.
pub struct SdlPresenter {
    // Field order is drop order: textures before their creator, the canvas, then SDL.
    texture: Option<(Texture, PictureFormat, u32, u32)>,
    scratch: Vec<u8>,
    creator: TextureCreator<WindowContext>,
    canvas: Canvas<Window>,
    events: EventPump,
    _video: sdl2::VideoSubsystem,
    _sdl: sdl2::Sdl,
}

impl SdlPresenter {
    pub fn new(title: &str, width: u32, height: u32, fullscreen: bool) -> Result<Self> {
        Self::with_renderer(title, width, height, fullscreen, RendererKind::from_env())
    }

    pub fn with_renderer(
        title: &str,
        width: u32,
        height: u32,
        fullscreen: bool,
        renderer: RendererKind,
    ) -> Result<Self> {
        let sdl = sdl2::init().map_err(sdl_err("SDL init"))?;
        let video = sdl.video().map_err(sdl_err(
            "SDL video (is there a display? set DISPLAY, or run headless)",
        ))?;
        check_visible_driver(
            video.current_video_driver(),
            std::env::var("SDL_VIDEODRIVER").ok().as_deref(),
        )?;
        // SAFETY: a plain setter of SDL global state, called after SDL_Init on this thread.
        unsafe {
            sdl2::sys::SDL_SetYUVConversionMode(
                sdl2::sys::SDL_YUV_CONVERSION_MODE::SDL_YUV_CONVERSION_BT601,
            );
        }
        let mut wb = video.window(title, width, height);
        wb.position_centered();
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
        canvas.set_draw_color(sdl2::pixels::Color::RGB(0, 0, 0));
        canvas.clear();
        canvas.present();
        let creator = canvas.texture_creator();
        let events = sdl.event_pump().map_err(sdl_err("SDL events"))?;
        Ok(SdlPresenter {
            texture: None,
            scratch: Vec::new(),
            creator,
            canvas,
            events,
            _video: video,
            _sdl: sdl,
        })
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

    fn set_status(&mut self, status: Option<&str>) {
        let window = self.canvas.window_mut();
        let base = window
            .title()
            .split(" — [")
            .next()
            .unwrap_or("")
            .to_string();
        let title = match status {
            Some(st) => format!("{base} — [{st}]"),
            None => base,
        };
        // A title with a NUL byte cannot be set; the status is also in the log.
        let _ = window.set_title(&title);
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
                self.scratch.clear();
                tex.update(None, &bgra.data, bgra.stride)
                    .map_err(|e| MediaError::Display(format!("SDL upload: {e}")))?;
            }
        }
        self.canvas.clear();
        self.canvas
            .copy(tex, None, None)
            .map_err(sdl_err("SDL copy"))?;
        self.canvas.present();
        Ok(())
    }

    fn poll_events(&mut self) -> Vec<WindowEvent> {
        let mut out = Vec::new();
        for e in self.events.poll_iter() {
            let ev = match e {
                Event::Quit { .. } => Some(WindowEvent::Quit),
                Event::Window {
                    win_event: SdlWindowEvent::Close,
                    ..
                } => Some(WindowEvent::Quit),
                Event::KeyDown {
                    keycode: Some(k),
                    repeat,
                    ..
                } => Some(WindowEvent::Key {
                    code: k.into_i32(),
                    down: true,
                    repeat,
                }),
                Event::KeyUp {
                    keycode: Some(k),
                    repeat,
                    ..
                } => Some(WindowEvent::Key {
                    code: k.into_i32(),
                    down: false,
                    repeat,
                }),
                Event::MouseMotion {
                    x, y, xrel, yrel, ..
                } => Some(WindowEvent::MouseMotion {
                    x,
                    y,
                    dx: xrel,
                    dy: yrel,
                }),
                Event::MouseButtonDown { mouse_btn, .. } => {
                    button(mouse_btn).map(|b| WindowEvent::MouseButton {
                        button: b,
                        down: true,
                    })
                }
                Event::MouseButtonUp { mouse_btn, .. } => {
                    button(mouse_btn).map(|b| WindowEvent::MouseButton {
                        button: b,
                        down: false,
                    })
                }
                Event::MouseWheel { x, y, .. } => Some(WindowEvent::Wheel { dx: x, dy: y }),
                _ => None,
            };
            out.extend(ev);
        }
        out
    }
}

fn button(b: MouseButton) -> Option<u8> {
    Some(match b {
        MouseButton::Left => 1,
        MouseButton::Middle => 2,
        MouseButton::Right => 3,
        MouseButton::X1 => 4,
        MouseButton::X2 => 5,
        MouseButton::Unknown => return None,
    })
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
