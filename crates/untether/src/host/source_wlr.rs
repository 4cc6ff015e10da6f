//! A wlroots compositor's output as a frame source (wlr-screencopy into shared memory),
//! encoded on the same thread straight from the shared buffer (no slot, no copy), with the
//! same stamps as X11 capture. Where the compositor tracks damage (screencopy version 2 and
//! later: every wlroots release since 0.9) a frame is taken as it arrives: the compositor
//! answers the moment the output has changed, at most at the stream's rate (`ArrivalPacer`);
//! an interval without a change is counted unchanged, but a joining client always gets a
//! keyframe (the last frame again). Otherwise one grab per tick, each waiting for the
//! compositor's next composition. A frame's capture time is the compositor's `ready` time
//! (the same monotonic clock as the host's).

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_media::wlr::WlrCapture;

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabFailures, GrabOutput, GrabPixels};
use super::shared::HostShared;
use crate::clock::now_us;
use crate::ticker::{ArrivalPacer, Ticker};

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
    let mut pacer = ArrivalPacer::at_fps(fps);
    let on_arrival = cap.tracks_damage();
    let mut frame_number: u32 = 0;
    let mut failures = GrabFailures::new(MAX_GRAB_FAILURES);
    let size = cap.size();
    s.note(format!(
        "capturing Wayland output {} of {} ({}x{}) through wlr-screencopy, {}",
        cap.output_name(),
        cap.display(),
        size.0,
        size.1,
        if on_arrival {
            "taking each frame as the compositor reports a change"
        } else {
            "the compositor tracks no damage (screencopy version 1): grabbing every tick"
        }
    ));
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            pacer.reset();
            cap.cancel();
            continue;
        }
        let t0;
        let changed = if on_arrival {
            // Not sooner than the stream's rate allows, then as soon as the output changes
            // (an interval without a change: the encoder may still have to send).
            pacer.wait();
            t0 = now_us();
            cap.wait_for_change(pacer.interval())
        } else {
            ticker.wait();
            t0 = now_us();
            cap.grab().map(|()| true)
        };
        let fresh = match changed {
            Ok(true) => {
                failures.succeeded();
                true
            }
            Ok(false) if stage.must_send() => false,
            Ok(false) => {
                s.counters.unchanged.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => {
                if failures.failed(&s.counters.grab_errors, &e) {
                    return s.fail(format!("Wayland capture keeps failing: {e}"));
                }
                continue;
            }
        };
        let done_us = now_us();
        if on_arrival {
            pacer.sent(done_us);
        }
        if cap.size() != size {
            return s.fail(format!(
                "the Wayland output changed size ({}x{} to {}x{}): restart the host",
                size.0,
                size.1,
                cap.size().0,
                cap.size().1
            ));
        }
        // The compositor's ready time, where it is on our clock and not in the future (the
        // last frame sent again: now).
        let capture_us = Some(fresh)
            .filter(|&f| f)
            .and(cap.ready_us())
            .filter(|&r| r <= done_us && done_us - r < 1_000_000)
            .unwrap_or(done_us);
        let grab = Grab {
            stride: cap.stride(),
            pixels: GrabPixels::Writable(cap.frame()),
            width: size.0,
            height: size.1,
            capture_us,
            // Waiting for a change is not grabbing: on arrival, ready → in our hands.
            grab_us: done_us.saturating_sub(if on_arrival { capture_us } else { t0 }) as u32,
            frame_number,
        };
        frame_number = frame_number.wrapping_add(1);
        if !encode_grab(s, &mut stage, grab, &mut out) {
            return;
        }
    }
}
