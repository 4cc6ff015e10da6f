//! Playback: a [`Playout`] pulled by an SDL output device, or by a thread on our own clock
//! that plays nowhere ([`NullAudioOut`]), and [`AudioOut`], either of them.

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use super::sdl::{current_driver, init_audio_subsystem, sdl_error};
use super::{raise_thread_priority, Playout, CHANNELS, RATE};
use crate::{MediaError, Result};

struct OutCtx {
    playout: Arc<Mutex<Playout>>,
    latency_us: u64,
}

unsafe extern "C" fn out_callback(userdata: *mut libc::c_void, stream: *mut u8, len: libc::c_int) {
    if stream.is_null() || len <= 0 {
        return;
    }
    // SAFETY: SDL hands a buffer of `len` bytes, 2-byte aligned for AUDIO_S16SYS; userdata is
    // the OutCtx that outlives the device (closed before it is dropped).
    let out = unsafe { std::slice::from_raw_parts_mut(stream as *mut i16, len as usize / 2) };
    // SAFETY: as above: userdata is the device's OutCtx, alive while the device is open.
    let ctx = unsafe { &*(userdata as *const OutCtx) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut p = ctx.playout.lock().unwrap_or_else(|e| e.into_inner());
        p.pull(untether_clock::now_us(), ctx.latency_us, out);
    }));
    if r.is_err() {
        out.fill(0);
    }
}

/// Plays a [`Playout`] on an SDL audio device.
pub struct SdlAudioOut {
    dev: sdl2::sys::SDL_AudioDeviceID,
    ctx: *mut OutCtx,
    pub buffer_samples: u16,
    pub driver: String,
}

// SAFETY: the device id and context pointer are only used in new/drop; SDL's audio functions
// are thread-safe.
unsafe impl Send for SdlAudioOut {}

impl SdlAudioOut {
    /// Opens the default (or the named) output device with a `buffer_samples` device buffer
    /// (240 = 5 ms) and starts pulling from `playout`.
    pub fn open(
        device: Option<&str>,
        playout: Arc<Mutex<Playout>>,
        buffer_samples: u16,
    ) -> Result<SdlAudioOut> {
        init_audio_subsystem()?;
        let ctx = Box::into_raw(Box::new(OutCtx {
            playout,
            latency_us: 0,
        }));
        let want = sdl2::sys::SDL_AudioSpec {
            freq: RATE as i32,
            format: sdl2::sys::AUDIO_S16SYS as u16,
            channels: CHANNELS as u8,
            silence: 0,
            samples: buffer_samples,
            padding: 0,
            size: 0,
            callback: Some(out_callback),
            userdata: ctx as *mut libc::c_void,
        };
        let mut have = want;
        let name = device.map(|d| CString::new(d).unwrap_or_default());
        // SAFETY: valid specs; allowed_changes 0 makes SDL convert to our format.
        let dev = unsafe {
            sdl2::sys::SDL_OpenAudioDevice(
                name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                0,
                &want,
                &mut have,
                0,
            )
        };
        if dev == 0 {
            let e = sdl_error();
            // SAFETY: the context was never handed to a device.
            unsafe {
                drop(Box::from_raw(ctx));
                sdl2::sys::SDL_QuitSubSystem(sdl2::sys::SDL_INIT_AUDIO);
            }
            return Err(MediaError::Other(format!(
                "cannot open audio output {:?} with SDL driver {}: {e} (SDL_AUDIODRIVER=dummy plays nowhere)",
                device.unwrap_or("default"),
                current_driver()
            )));
        }
        // The device plays a buffer while we fill the next one.
        // SAFETY: the callback is not running yet (the device is paused).
        unsafe {
            (*ctx).latency_us = have.samples as u64 * 1_000_000 / RATE as u64;
            sdl2::sys::SDL_PauseAudioDevice(dev, 0);
        }
        Ok(SdlAudioOut {
            dev,
            ctx,
            buffer_samples: have.samples,
            driver: current_driver(),
        })
    }
}

impl Drop for SdlAudioOut {
    fn drop(&mut self) {
        // SAFETY: closing waits for the callback to finish; only then is its context freed.
        unsafe {
            sdl2::sys::SDL_CloseAudioDevice(self.dev);
            drop(Box::from_raw(self.ctx));
            sdl2::sys::SDL_QuitSubSystem(sdl2::sys::SDL_INIT_AUDIO);
        }
    }
}

/// The output device name that plays nowhere, in real time, on our own clock (see
/// [`NullAudioOut`]).
pub const NULL_DEVICE: &str = "null";

/// Plays a [`Playout`] nowhere: a thread pulls one device buffer every buffer period on
/// absolute deadlines of the monotonic clock, as a sound card would. Headless clients,
/// benchmarks and tests use it; unlike SDL's `dummy` driver (which sleeps a whole number of
/// milliseconds after each callback and so plays a few percent slow) it keeps real time.
pub struct NullAudioOut {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub buffer_samples: u16,
}

impl NullAudioOut {
    /// Starts pulling `buffer_samples` (per channel) from `playout` every buffer period.
    pub fn start(playout: Arc<Mutex<Playout>>, buffer_samples: u16) -> Result<NullAudioOut> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let samples = buffer_samples.max(16);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let period_ns = samples as u64 * 1_000_000_000 / RATE as u64;
        let latency_us = samples as u64 * 1_000_000 / RATE as u64;
        let thread = std::thread::Builder::new()
            .name("audio-null-out".into())
            .spawn(move || {
                raise_thread_priority();
                let mut out = vec![0i16; samples as usize * CHANNELS];
                let start = std::time::Instant::now();
                let start_us = untether_clock::now_us();
                let mut n: u64 = 0;
                while !flag.load(Ordering::Relaxed) {
                    {
                        // A sound card consumes at its own steady rate whenever its callback
                        // runs: the buffer is due at its deadline, not when this thread woke.
                        let due_us = start_us + n * period_ns / 1_000;
                        let mut p = playout.lock().unwrap_or_else(|e| e.into_inner());
                        p.pull(due_us, latency_us, &mut out);
                    }
                    n += 1;
                    let due = start + std::time::Duration::from_nanos(n * period_ns);
                    let now = std::time::Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                }
            })
            .map_err(|e| MediaError::Other(format!("cannot start the null audio output: {e}")))?;
        Ok(NullAudioOut {
            stop,
            thread: Some(thread),
            buffer_samples: samples,
        })
    }
}

impl Drop for NullAudioOut {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An audio output: an SDL device, or [`NullAudioOut`] for the device named [`NULL_DEVICE`].
pub enum AudioOut {
    Sdl(SdlAudioOut),
    Null(NullAudioOut),
}

impl AudioOut {
    /// Opens `device` (`None`: SDL's default; [`NULL_DEVICE`]: nowhere, on our clock) with a
    /// `buffer_samples` device buffer and starts pulling from `playout`.
    pub fn open(
        device: Option<&str>,
        playout: Arc<Mutex<Playout>>,
        buffer_samples: u16,
    ) -> Result<AudioOut> {
        if device == Some(NULL_DEVICE) {
            return NullAudioOut::start(playout, buffer_samples).map(AudioOut::Null);
        }
        SdlAudioOut::open(device, playout, buffer_samples).map(AudioOut::Sdl)
    }

    /// The backend: SDL's driver name, or `null`.
    pub fn driver(&self) -> String {
        match self {
            AudioOut::Sdl(o) => o.driver.clone(),
            AudioOut::Null(_) => NULL_DEVICE.into(),
        }
    }

    /// The device buffer actually granted, samples per channel.
    pub fn buffer_samples(&self) -> u16 {
        match self {
            AudioOut::Sdl(o) => o.buffer_samples,
            AudioOut::Null(o) => o.buffer_samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_null_device_pulls_on_its_own_thread_until_dropped() {
        let playout = Arc::new(Mutex::new(Playout::new().unwrap()));
        let out = AudioOut::open(Some(NULL_DEVICE), playout, 8).unwrap();
        assert_eq!(out.driver(), NULL_DEVICE);
        // At least 16 samples a buffer.
        assert_eq!(out.buffer_samples(), 16);
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Dropping stops and joins its thread.
        drop(out);
    }
}
