//! The SDL audio subsystem that output and capture share: its initialisation, its last
//! error, and the driver in use.

use std::ffi::{CStr, CString};

use crate::{MediaError, Result};

pub(super) fn sdl_error() -> String {
    // SAFETY: SDL_GetError returns a valid, NUL-terminated, thread-local string.
    unsafe {
        let p = sdl2::sys::SDL_GetError();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

pub(super) fn init_audio_subsystem() -> Result<()> {
    // SAFETY: plain SDL calls; SDL reference-counts subsystems, so this pairs with the
    // SDL_QuitSubSystem in Drop.
    unsafe {
        let hint = CString::new("SDL_AUDIO_INCLUDE_MONITORS").unwrap_or_default();
        let one = CString::new("1").unwrap_or_default();
        sdl2::sys::SDL_SetHint(hint.as_ptr(), one.as_ptr());
        if sdl2::sys::SDL_InitSubSystem(sdl2::sys::SDL_INIT_AUDIO) != 0 {
            return Err(MediaError::Other(format!(
                "SDL audio: {} (set SDL_AUDIODRIVER=pulseaudio, pipewire, alsa, or dummy to play nowhere)",
                sdl_error()
            )));
        }
    }
    Ok(())
}

/// The name of the SDL audio driver in use.
pub fn current_driver() -> String {
    // SAFETY: returns NULL or a static string.
    unsafe {
        let p = sdl2::sys::SDL_GetCurrentAudioDriver();
        if p.is_null() {
            "none".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}
