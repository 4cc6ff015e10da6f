//! What both windowed presenters share: starting SDL's video on a display that shows
//! something, turning SDL's events into [`WindowEvent`]s, and the window's habits (title,
//! fullscreen, mouse capture).

use sdl2::event::{Event, WindowEvent as SdlWindowEvent};
use sdl2::mouse::MouseButton;
use sdl2::video::{FullscreenType, Window};
use sdl2::EventPump;

use crate::present::{check_visible_driver, WindowEvent};
use crate::{MediaError, Result};

pub(crate) fn sdl_err(what: &str) -> impl Fn(String) -> MediaError + '_ {
    move |e| MediaError::Display(format!("{what}: {e}"))
}

thread_local! {
    /// SDL and its video subsystem, kept for the thread's life once started: quitting SDL's
    /// video (and with it the GL library) and starting it again at once, as a fallback from
    /// the GPU presenter to SDL's renderer does, made X11's driver fail now and then under
    /// Xvfb (SDL then only found its off-screen driver).
    static VIDEO: std::cell::RefCell<Option<(sdl2::Sdl, sdl2::VideoSubsystem)>> =
        const { std::cell::RefCell::new(None) };
}

/// Held while SDL's process-wide state is set up or torn down (`SDL_Init`, a subsystem's
/// init and quit): SDL does not allow two threads to do that at once, and clients of one
/// process (tests, benches) each open their window and game controllers on their own thread
/// (two racing corrupted the heap: "malloc_consolidate(): unaligned fastbin chunk").
pub(crate) fn sdl_global() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SDL with its video subsystem on a visible display (started once per thread).
pub(crate) fn init_video() -> Result<(sdl2::Sdl, sdl2::VideoSubsystem)> {
    if let Some(v) = VIDEO.with(|v| v.borrow().clone()) {
        return Ok(v);
    }
    utf8_ctype();
    let _global = sdl_global();
    let sdl = sdl2::init().map_err(sdl_err("SDL init"))?;
    let video = sdl.video().map_err(sdl_err(
        "SDL video (is there a display? set DISPLAY, or run headless)",
    ))?;
    check_visible_driver(
        video.current_video_driver(),
        std::env::var("SDL_VIDEODRIVER").ok().as_deref(),
    )?;
    VIDEO.with(|v| *v.borrow_mut() = Some((sdl.clone(), video.clone())));
    Ok((sdl, video))
}

/// Makes the C library's character type UTF-8 before SDL's X11 driver starts. A Rust program
/// never calls `setlocale`, so C code runs in the "C" locale, where SDL 2.26 converts a
/// window's UTF-8 title to the locale's charset for `WM_NAME` (`untether â` for `untether —`)
/// and Xlib's UTF-8 conversion fails, so no `_NET_WM_NAME` is set at all. The user's own
/// locale is kept when it is UTF-8; otherwise `C.UTF-8` (every glibc since 2.35 has it).
/// Only `LC_CTYPE` changes: numbers and messages stay in the "C" locale.
fn utf8_ctype() {
    fn is_utf8() -> bool {
        // SAFETY: nl_langinfo returns a pointer to a static NUL-terminated string (or null).
        let cs = unsafe { libc::nl_langinfo(libc::CODESET) };
        // SAFETY: checked non-null; valid until the next setlocale, read at once.
        !cs.is_null() && unsafe { std::ffi::CStr::from_ptr(cs) }.to_bytes() == b"UTF-8"
    }
    for name in [c"", c"C.UTF-8"] {
        // SAFETY: a valid NUL-terminated locale name; called before SDL starts its threads.
        if !unsafe { libc::setlocale(libc::LC_CTYPE, name.as_ptr()) }.is_null() && is_utf8() {
            return;
        }
    }
    log::debug!("no UTF-8 locale: window titles may show only ASCII correctly");
}

/// Switches between a borderless window covering the display ("desktop" fullscreen: no mode
/// change, so no flicker or delay) and the normal window.
pub(crate) fn set_fullscreen(window: &mut Window, on: bool) -> Result<()> {
    let t = if on {
        FullscreenType::Desktop
    } else {
        FullscreenType::Off
    };
    window
        .set_fullscreen(t)
        .map_err(|e| MediaError::Display(format!("fullscreen: {e}")))
}

/// Captures the mouse (relative mode: hidden, confined to the window, reporting motion
/// without bounds, as games want) or releases it.
pub(crate) fn set_mouse_captured(sdl: &sdl2::Sdl, on: bool) {
    sdl.mouse().set_relative_mouse_mode(on);
}

/// Sets the title; a title with a NUL byte cannot be set (the status is in the log too).
pub(crate) fn set_title(window: &mut Window, title: &str) {
    let _ = window.set_title(title);
}

/// Everything the window reported since the last call.
pub(crate) fn poll_events(events: &mut EventPump) -> Vec<WindowEvent> {
    let mut out = Vec::new();
    for e in events.poll_iter() {
        let ev = match e {
            Event::Quit { .. } => Some(WindowEvent::Quit),
            Event::Window { win_event, .. } => match win_event {
                SdlWindowEvent::Close => Some(WindowEvent::Quit),
                SdlWindowEvent::Exposed
                | SdlWindowEvent::SizeChanged(..)
                | SdlWindowEvent::Resized(..)
                | SdlWindowEvent::Maximized
                | SdlWindowEvent::Restored => Some(WindowEvent::Exposed),
                _ => None,
            },
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
        // Several resize/expose events in one batch need one redraw.
        if ev == Some(WindowEvent::Exposed) && out.last() == Some(&WindowEvent::Exposed) {
            continue;
        }
        out.extend(ev);
    }
    out
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

/// The largest rectangle of the picture's aspect inside a `w`×`h` area, centred:
/// (x, y, width, height), y from the top.
pub(crate) fn letterbox(w: u32, h: u32, pw: u32, ph: u32) -> (i32, i32, i32, i32) {
    if pw == 0 || ph == 0 || w == 0 || h == 0 {
        return (0, 0, w as i32, h as i32);
    }
    let scale = (w as f64 / pw as f64).min(h as f64 / ph as f64);
    let (vw, vh) = (
        (pw as f64 * scale).round() as i32,
        (ph as f64 * scale).round() as i32,
    );
    ((w as i32 - vw) / 2, (h as i32 - vh) / 2, vw, vh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letterbox_keeps_the_aspect_and_centres() {
        assert_eq!(letterbox(1280, 720, 1280, 720), (0, 0, 1280, 720));
        assert_eq!(letterbox(1920, 1080, 1280, 720), (0, 0, 1920, 1080));
        // A 4:3 picture on a 16:9 screen: bars left and right.
        assert_eq!(letterbox(1920, 1080, 640, 480), (240, 0, 1440, 1080));
        // A wide picture in a tall window: bars top and bottom.
        assert_eq!(letterbox(1000, 1000, 1280, 720), (0, 218, 1000, 563));
        assert_eq!(letterbox(0, 0, 1280, 720), (0, 0, 0, 0));
    }
}
