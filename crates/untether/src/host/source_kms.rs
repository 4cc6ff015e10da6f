//! KMS/DRM capture as a frame source (`untether host --capture kms[:/dev/dri/cardN]`): the
//! scan-out framebuffer of the card's first shown primary plane, grabbed at the frame rate
//! (crate `untether-capture`, as FFmpeg's kmsgrab). Untested on real hardware: the machines
//! this is developed and tested on have no `/dev/dri`; there the host refuses to start,
//! saying what KMS capture needs.

use std::time::Duration;

use untether_capture::kms::KmsCapture;

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabFailures, GrabOutput, GrabPixels};
use super::shared::HostShared;
use crate::clock::now_us;
use crate::ticker::Ticker;

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 100;

pub(crate) fn kms_loop(
    s: &HostShared,
    mut cap: KmsCapture,
    mut stage: EncoderStage,
    fps: u32,
    mut out: GrabOutput,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut buf = Vec::new();
    let mut frame_number = 0u32;
    let mut failures = GrabFailures::new(MAX_GRAB_FAILURES);
    s.note(format!(
        "capturing the KMS plane of {} ({}x{})",
        cap.device().display(),
        cap.width,
        cap.height
    ));
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            continue;
        }
        ticker.wait();
        let t0 = now_us();
        let (w, h) = match cap.grab(&mut buf) {
            Ok(size) => size,
            Err(e) => {
                if failures.failed(&s.counters.grab_errors, &e) {
                    return s.fail(format!("{e}"));
                }
                continue;
            }
        };
        failures.succeeded();
        let capture_us = now_us();
        let grab = Grab {
            pixels: GrabPixels::Writable(&mut buf),
            width: w & !1,
            height: h & !1,
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
