//! X11 capture as a frame source: grabs the display or a window through MIT-SHM and encodes the
//! grab on the same thread, straight from shared memory (no slot, no copy). With DAMAGE a grab
//! follows the application's drawing: it is taken the moment the X server reports a change
//! (not at the next tick), at most at the stream's rate (`ArrivalPacer`); an interval without
//! a change is counted unchanged, but a joining client always gets a keyframe. Without DAMAGE
//! every tick grabs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_media::x11::X11Capture;

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabFailures, GrabOutput, GrabPixels};
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::ticker::{ArrivalPacer, Ticker};

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 100;

pub(crate) fn x11_loop(
    s: &HostShared,
    mut cap: X11Capture,
    mut stage: EncoderStage,
    fps: u32,
    mut out: GrabOutput,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut pacer = ArrivalPacer::at_fps(fps);
    let on_arrival = cap.tracks_damage();
    let mut frame_number: u32 = 0;
    let mut failures = GrabFailures::new(MAX_GRAB_FAILURES);
    s.note(format!(
        "capturing X display {:?} window 0x{:x} ({}x{}), {}",
        cap.display(),
        cap.window(),
        cap.size().0,
        cap.size().1,
        if cap.tracks_damage() {
            "grabbing when DAMAGE reports a change, as it arrives"
        } else {
            "no DAMAGE: grabbing every tick"
        }
    ));
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            pacer.reset();
            continue;
        }
        let changes = if on_arrival {
            // Not sooner than the stream's rate allows, then as soon as a change arrives (an
            // interval without one: the encoder may still have to send, a keyframe wanted).
            pacer.wait();
            cap.wait_for_changes(pacer.interval())
        } else {
            ticker.wait();
            cap.poll_changes()
        };
        let changes = match changes {
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
                if failures.failed(&s.counters.grab_errors, &e) {
                    return s.fail(format!("X11 capture keeps failing: {e}"));
                }
                continue;
            }
        };
        failures.succeeded();
        let capture_us = now_us();
        pacer.sent(capture_us);
        let grab = Grab {
            pixels: GrabPixels::Writable(pixels),
            width: w,
            height: h,
            stride: w as usize * 4,
            capture_us,
            grab_us: (capture_us - t0) as u32,
            frame_number,
        };
        frame_number = frame_number.wrapping_add(1);
        if !encode_grab(s, &mut stage, grab, &mut out) {
            return;
        }
    }
}
