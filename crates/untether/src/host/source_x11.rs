//! X11 capture as a frame source: grabs the display or a window through MIT-SHM at the frame
//! rate and encodes the grab on the same thread, straight from shared memory (no slot, no
//! copy). Ticks without DAMAGE are skipped, but a joining client always gets a keyframe.

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_media::codec::InputPicture;
use untether_media::stamp::{self, Stamp};
use untether_media::x11::X11Capture;

use super::encode::EncoderStage;
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::ticker::Ticker;

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 100;

pub(crate) fn x11_loop(
    s: &HostShared,
    mut cap: X11Capture,
    mut stage: EncoderStage,
    fps: u32,
    stamp_frames: bool,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut frame_number: u32 = 0;
    let mut failures = 0u32;
    s.note(format!(
        "capturing X display {:?} window 0x{:x} ({}x{}), {}",
        cap.display(),
        cap.window(),
        cap.size().0,
        cap.size().1,
        if cap.tracks_damage() {
            "grabbing only when DAMAGE reports a change"
        } else {
            "no DAMAGE: grabbing every tick"
        }
    ));
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            continue;
        }
        ticker.wait();
        let changes = match cap.poll_changes() {
            Ok(c) => c,
            Err(e) => return s.fail(format!("X11 capture: {e}")),
        };
        if changes.resized {
            *lock(&s.capture_origin) = cap.origin();
        }
        if !changes.damaged && !stage.must_send() {
            s.counters.unchanged.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let t0 = now_us();
        let (w, h) = cap.size();
        let pixels = match cap.grab() {
            Ok(p) => p,
            Err(e) => {
                s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                if failures > MAX_GRAB_FAILURES {
                    return s.fail(format!("X11 capture keeps failing: {e}"));
                }
                log::debug!("host: {e}");
                continue;
            }
        };
        failures = 0;
        let capture_us = now_us();
        if stamp_frames {
            stamp::write_bgra_raw(
                pixels,
                w as usize * 4,
                w,
                h,
                &Stamp {
                    frame_number,
                    capture_us,
                    input_seq: s.counters.inputs_applied.load(Ordering::Relaxed) as u32,
                },
            );
        }
        frame_number = frame_number.wrapping_add(1);
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let dur = (capture_us - t0) as u32;
        lock(&s.samples).capture.push_us(dur as i64);
        let picture = InputPicture::Bgra {
            width: w,
            height: h,
            data: pixels,
            stride: w as usize * 4,
        };
        if let Err(e) = stage.send(&picture, capture_us, dur, None) {
            if !s.stopped() {
                s.fail(format!("encoder: {e}"));
            }
            return;
        }
    }
}
