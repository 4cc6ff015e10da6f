//! The desktop portal's screen cast as a frame source (`untether host --capture portal`): the
//! monitor or window the user picked, from PipeWire through GStreamer (crate
//! `untether-portal`). At each tick of the stream's frame rate the newest frame the compositor
//! sent is encoded (frames it replaced before the tick are counted as dropped), with the same
//! stamps and pacing as the other desktop captures. Its capture time is when it reached the
//! host (CLOCK_MONOTONIC), less its time in the GStreamer pipeline. The portal's compositors
//! send a frame when the screen changes: where none came since the last tick the screen is
//! unchanged and the tick is skipped (as X11 capture does with DAMAGE), unless a keyframe is
//! wanted: then the last frame is encoded again, stamped with the tick (it is what the screen
//! shows then).

use std::sync::atomic::Ordering;
use std::time::Duration;

use untether_portal::{PortalCapture, PortalFrame};

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabOutput, GrabPixels};
use super::shared::HostShared;
use crate::clock::now_us;
use crate::ticker::ArrivalPacer;

pub(crate) fn portal_loop(
    s: &HostShared,
    mut cap: PortalCapture,
    mut stage: EncoderStage,
    fps: u32,
    mut out: GrabOutput,
) {
    // Each frame goes to the encoder when PipeWire delivers it (no tick to wait for).
    let mut pacer = ArrivalPacer::at_fps(fps);
    let mut frame_number: u32 = 0;
    let size = cap.size();
    // Whether the first frame's capture time came from its timestamp on the pipeline's clock.
    let timed = if cap.frames().1 > 0 {
        "capture time: arrival less the frame's age on the pipeline clock"
    } else {
        "capture time: arrival at the host"
    };
    s.note(match cap.portal() {
        Some((version, restored, persisted)) => format!(
            "capturing through the desktop portal (ScreenCast v{version}, {}, {}x{}, {timed}; {})",
            cap.describe(),
            size.0,
            size.1,
            match (restored, persisted) {
                (true, _) =>
                    "the stored permission was offered: no dialog where the portal accepts it",
                (false, true) => "the permission is stored for the next start",
                (false, false) => "the portal keeps no permission: it asks at every start",
            }
        ),
        None => format!(
            "capturing {} ({}x{}, {timed})",
            cap.describe(),
            size.0,
            size.1
        ),
    });
    let mut last: Option<PortalFrame> = None;
    let mut buf = Vec::new();
    let mut dropped = 0u64;
    while !s.stopped() {
        if !s.watched() {
            // Keep the newest frame fresh while nobody watches.
            if let Ok(Some(f)) = cap.take(Duration::from_millis(10)) {
                last = Some(f);
            }
            pacer.reset();
            continue;
        }
        pacer.wait();
        // The next frame as it arrives (a newer one replaced an older one meanwhile).
        let taken = cap.take(pacer.interval());
        let t0 = now_us();
        let (frame, capture_us) = match taken {
            Ok(Some(f)) => {
                let at = f.capture_us.min(t0);
                (f, at)
            }
            // Nothing new for an interval: the screen is unchanged (as X11 damage says); go on
            // waiting unless a keyframe is wanted; then the last frame is what the screen
            // shows now.
            Ok(None) if !stage.must_send() => {
                s.counters.unchanged.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(None) => match last.take() {
                Some(f) => (f, t0),
                None => continue,
            },
            Err(e) => return s.fail(format!("{e}")),
        };
        let now_dropped = cap.dropped();
        s.counters
            .source_dropped
            .fetch_add(now_dropped - dropped, Ordering::Relaxed);
        dropped = now_dropped;
        if (frame.width, frame.height) != size {
            return s.fail(format!(
                "the screen cast changed size ({}x{} to {}x{}): restart the host",
                size.0, size.1, frame.width, frame.height
            ));
        }
        let Some(buffer) = frame.sample.buffer() else {
            continue;
        };
        let Ok(map) = buffer.map_readable() else {
            s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (w, h, stride) = (size.0 & !1, size.1 & !1, frame.stride);
        // The mapped sample is read-only: encoded where it lies, or stamped in a copy.
        let grab_us = now_us().saturating_sub(t0) as u32;
        let grab = Grab {
            pixels: GrabPixels::ReadOnly {
                data: &map[..stride * size.1 as usize],
                scratch: &mut buf,
            },
            width: w,
            height: h,
            stride,
            capture_us,
            grab_us,
            frame_number,
        };
        frame_number = frame_number.wrapping_add(1);
        let sent = encode_grab(s, &mut stage, grab, &mut out);
        pacer.sent(t0);
        drop(map);
        last = Some(frame);
        if !sent {
            return;
        }
    }
}
