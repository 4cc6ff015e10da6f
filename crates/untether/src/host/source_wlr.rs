//! A wlroots compositor's output as a frame source (wlr-screencopy into shared memory): one
//! grab per tick, encoded on the same thread straight from the shared buffer (no slot, no
//! copy), with the same stamps and pacing as X11 capture. A grab waits for the compositor's
//! next composition, so a frame is at most one output refresh old when it is encoded; its
//! capture time is the compositor's `ready` time (the same monotonic clock as the host's).

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_media::codec::InputPicture;
use untether_media::stamp::{self, Stamp};
use untether_media::wlr::WlrCapture;

use super::encode::EncoderStage;
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::ticker::Ticker;

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 20;

pub(crate) fn wlr_loop(
    s: &HostShared,
    mut cap: WlrCapture,
    mut stage: EncoderStage,
    fps: u32,
    stamp_frames: bool,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut frame_number: u32 = 0;
    let mut failures = 0u32;
    let size = cap.size();
    s.note(format!(
        "capturing Wayland output {} of {} ({}x{}) through wlr-screencopy",
        cap.output_name(),
        cap.display(),
        size.0,
        size.1
    ));
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            continue;
        }
        ticker.wait();
        let t0 = now_us();
        if let Err(e) = cap.grab() {
            s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
            failures += 1;
            if failures > MAX_GRAB_FAILURES {
                return s.fail(format!("Wayland capture keeps failing: {e}"));
            }
            log::debug!("host: {e}");
            continue;
        }
        failures = 0;
        let done_us = now_us();
        if cap.size() != size {
            return s.fail(format!(
                "the Wayland output changed size ({}x{} to {}x{}): restart the host",
                size.0,
                size.1,
                cap.size().0,
                cap.size().1
            ));
        }
        // The compositor's ready time, where it is on our clock and not in the future.
        let capture_us = cap
            .ready_us()
            .filter(|&r| r <= done_us && done_us - r < 1_000_000)
            .unwrap_or(done_us);
        let (w, h, stride) = (size.0, size.1, cap.stride());
        let pixels = cap.frame();
        if stamp_frames {
            stamp::write_bgra_raw(
                pixels,
                stride,
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
        let dur = done_us.saturating_sub(t0) as u32;
        lock(&s.samples).capture.push_us(dur as i64);
        let picture = InputPicture::Bgra {
            width: w,
            height: h,
            data: pixels,
            stride,
        };
        if let Err(e) = stage.send(&picture, capture_us, dur, None) {
            if !s.stopped() {
                s.fail(format!("encoder: {e}"));
            }
            return;
        }
    }
}
