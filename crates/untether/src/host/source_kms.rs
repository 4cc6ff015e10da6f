//! KMS/DRM capture as a frame source (`untether host --capture kms[:/dev/dri/cardN]`): the
//! scan-out framebuffer of the card's first shown primary plane, grabbed at the frame rate
//! (crate `untether-capture`, as FFmpeg's kmsgrab). Untested on real hardware: the machines
//! this is developed and tested on have no `/dev/dri`; there the host refuses to start,
//! saying what KMS capture needs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_capture::kms::KmsCapture;
use untether_media::codec::InputPicture;
use untether_media::stamp::{self, Stamp};

use super::encode::EncoderStage;
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::ticker::Ticker;

/// The most consecutive failed grabs before the host gives up.
const MAX_GRAB_FAILURES: u32 = 100;

pub(crate) fn kms_loop(
    s: &HostShared,
    mut cap: KmsCapture,
    mut stage: EncoderStage,
    fps: u32,
    stamp_frames: bool,
) {
    let mut ticker = Ticker::at_fps(fps);
    let mut buf = Vec::new();
    let (mut frame_number, mut failures) = (0u32, 0u32);
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
                s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                if failures > MAX_GRAB_FAILURES {
                    return s.fail(format!("{e}"));
                }
                continue;
            }
        };
        failures = 0;
        let capture_us = now_us();
        if stamp_frames {
            let st = Stamp {
                frame_number,
                capture_us,
                input_seq: s.counters.inputs_applied.load(Ordering::Relaxed) as u32,
            };
            stamp::write_bgra_raw(&mut buf, w as usize * 4, w, h, &st);
        }
        frame_number = frame_number.wrapping_add(1);
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let dur = (capture_us - t0) as u32;
        lock(&s.samples).capture.push_us(dur as i64);
        let picture = InputPicture::Bgra {
            width: w & !1,
            height: h & !1,
            data: &buf,
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
