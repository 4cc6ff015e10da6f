//! Capture: an SDL recording device (a microphone, or the monitor of an output) handing its
//! PCM to a sink.

use std::ffi::{CStr, CString};
use std::sync::Mutex;

use super::sdl::{current_driver, init_audio_subsystem, sdl_error};
use super::{CHANNELS, RATE};
use crate::{MediaError, Result};

/// What a capture device delivers: interleaved stereo PCM and the time of its first sample.
pub type CaptureSink = Box<dyn FnMut(&[i16], u64) + Send>;

struct CaptureCtx {
    sink: Mutex<CaptureSink>,
}

unsafe extern "C" fn capture_callback(
    userdata: *mut libc::c_void,
    stream: *mut u8,
    len: libc::c_int,
) {
    if stream.is_null() || len <= 0 {
        return;
    }
    let now = untether_clock::now_us();
    // SAFETY: SDL hands `len` bytes of AUDIO_S16SYS samples; userdata outlives the device.
    let pcm = unsafe { std::slice::from_raw_parts(stream as *const i16, len as usize / 2) };
    // SAFETY: userdata is the CaptureCtx the device was opened with; it outlives the device
    // (closed before it is dropped).
    let ctx = unsafe { &*(userdata as *const CaptureCtx) };
    let dur = (pcm.len() / CHANNELS) as u64 * 1_000_000 / RATE as u64;
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sink = ctx.sink.lock().unwrap_or_else(|e| e.into_inner());
        (sink)(pcm, now.saturating_sub(dur));
    }));
}

/// Captures from an SDL recording device: a microphone, or (PulseAudio/PipeWire) the monitor
/// of an output, e.g. "Monitor of Built-in Audio Analog Stereo".
pub struct SdlAudioCapture {
    dev: sdl2::sys::SDL_AudioDeviceID,
    ctx: *mut CaptureCtx,
    pub driver: String,
}

// SAFETY: as for SdlAudioOut.
unsafe impl Send for SdlAudioCapture {}

impl SdlAudioCapture {
    /// The names of the recording devices (monitors included).
    pub fn devices() -> Result<Vec<String>> {
        init_audio_subsystem()?;
        let mut out = Vec::new();
        // SAFETY: index within the count; names are copied before the next SDL call.
        unsafe {
            let n = sdl2::sys::SDL_GetNumAudioDevices(1);
            for i in 0..n.max(0) {
                let p = sdl2::sys::SDL_GetAudioDeviceName(i, 1);
                if !p.is_null() {
                    out.push(CStr::from_ptr(p).to_string_lossy().into_owned());
                }
            }
            sdl2::sys::SDL_QuitSubSystem(sdl2::sys::SDL_INIT_AUDIO);
        }
        Ok(out)
    }

    /// Opens `device` (None: the default source) and hands 5 ms blocks to `sink`.
    pub fn open(device: Option<&str>, sink: CaptureSink) -> Result<SdlAudioCapture> {
        init_audio_subsystem()?;
        let ctx = Box::into_raw(Box::new(CaptureCtx {
            sink: Mutex::new(sink),
        }));
        let want = sdl2::sys::SDL_AudioSpec {
            freq: RATE as i32,
            format: sdl2::sys::AUDIO_S16SYS as u16,
            channels: CHANNELS as u8,
            silence: 0,
            samples: 240,
            padding: 0,
            size: 0,
            callback: Some(capture_callback),
            userdata: ctx as *mut libc::c_void,
        };
        let mut have = want;
        let name = device.map(|d| CString::new(d).unwrap_or_default());
        // SAFETY: valid specs; SDL converts to our format.
        let dev = unsafe {
            sdl2::sys::SDL_OpenAudioDevice(
                name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                1,
                &want,
                &mut have,
                0,
            )
        };
        if dev == 0 {
            let e = sdl_error();
            let driver = current_driver();
            // SAFETY: never handed to a device.
            unsafe {
                drop(Box::from_raw(ctx));
                sdl2::sys::SDL_QuitSubSystem(sdl2::sys::SDL_INIT_AUDIO);
            }
            return Err(MediaError::Other(format!(
                "cannot capture audio from {:?} with SDL driver {driver}: {e}. Is PulseAudio or PipeWire running? \
                 To capture what the machine plays, name its monitor source (e.g. --audio \"capture:Monitor of …\"; \
                 `pactl list short sources` lists them); SDL_AUDIODRIVER picks the backend (pulseaudio, pipewire, alsa)",
                device.unwrap_or("the default source")
            )));
        }
        // SAFETY: a device we opened.
        unsafe { sdl2::sys::SDL_PauseAudioDevice(dev, 0) };
        Ok(SdlAudioCapture {
            dev,
            ctx,
            driver: current_driver(),
        })
    }
}

impl Drop for SdlAudioCapture {
    fn drop(&mut self) {
        // SAFETY: closing waits for the callback; then the context is freed.
        unsafe {
            sdl2::sys::SDL_CloseAudioDevice(self.dev);
            drop(Box::from_raw(self.ctx));
            sdl2::sys::SDL_QuitSubSystem(sdl2::sys::SDL_INIT_AUDIO);
        }
    }
}
