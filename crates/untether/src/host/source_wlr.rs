//! A wlroots compositor's output as a frame source (wlr-screencopy into shared memory): one
//! grab per tick, encoded on the same thread straight from the shared buffer (no slot, no
//! copy), with the same stamps and pacing as X11 capture. A grab waits for the compositor's
//! next composition, so a frame is at most one output refresh old when it is encoded; its
//! capture time is the compositor's `ready` time (the same monotonic clock as the host's).

use std::time::Duration;

use untether_media::wlr::WlrCapture;

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabFailures, GrabOutput, GrabPixels};
use super::shared::HostShared;
use crate::clock::now_us;
use crate::ticker::Ticker;

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 20;

pub(crate) fn wlr_loop(
    s: &HostShared,
    mut cap: WlrCapture,
    mut stage: EncoderStage,
    fps: u32,
    mut out: GrabOutput,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut frame_number: u32 = 0;
    let mut failures = GrabFailures::new(MAX_GRAB_FAILURES);
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
            if failures.failed(&s.counters.grab_errors, &e) {
                return s.fail(format!("Wayland capture keeps failing: {e}"));
            }
            continue;
        }
        failures.succeeded();
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
        let grab = Grab {
            stride: cap.stride(),
            pixels: GrabPixels::Writable(cap.frame()),
            width: size.0,
            height: size.1,
            capture_us,
            grab_us: done_us.saturating_sub(t0) as u32,
            frame_number,
        };
        frame_number = frame_number.wrapping_add(1);
        if !encode_grab(s, &mut stage, grab, &mut out) {
            return;
        }
    }
}
