//! Frames an application presented, from the shared-memory frame ring its capture hook writes
//! (`untether run`: the Vulkan layer or the GL hook of crate `untether-capture-hook`). The host
//! tells the hook the stream's frame period and whether anyone watches; it sleeps on the ring's
//! futex, takes the newest frame and encodes it with its present time as the capture time, so
//! the report's glass-to-glass is present-to-client. BGRA top-down frames are encoded straight
//! from the shared slot; GL's bottom-up rows and RGBA are turned into BGRA rows first.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use untether_capture::{FrameFormat, FrameRing, TakenFrame};

use super::encode::EncoderStage;
use super::grab::{encode_grab, Grab, GrabOutput, GrabPixels};
use super::shared::HostShared;
use crate::clock::now_us;

/// The ring an application's capture hook writes into (equal when it is the same ring).
#[derive(Clone)]
pub struct PresentRing(pub Arc<FrameRing>);

impl PartialEq for PresentRing {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PresentRing {}

impl fmt::Debug for PresentRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PresentRing(fd {})", self.0.raw_fd())
    }
}

/// Rows of `frame` as top-down BGRA of even width and height in `buf` (None: use the slot as
/// it is). Returns the picture's width, height and stride.
fn to_bgra(frame: &TakenFrame<'_>, buf: &mut Vec<u8>) -> (u32, u32, usize, bool) {
    let (w, h) = (frame.width & !1, frame.height & !1);
    if frame.format == FrameFormat::Bgra && !frame.bottom_up {
        return (w, h, frame.stride, false);
    }
    let row = w as usize * 4;
    buf.resize(row * h as usize, 0);
    let src = frame.data();
    for y in 0..h as usize {
        let sy = if frame.bottom_up {
            frame.height as usize - 1 - y
        } else {
            y
        };
        let s = &src[sy * frame.stride..sy * frame.stride + row];
        let d = &mut buf[y * row..(y + 1) * row];
        match frame.format {
            FrameFormat::Bgra => d.copy_from_slice(s),
            FrameFormat::Rgba => {
                for (d, s) in d.chunks_exact_mut(4).zip(s.chunks_exact(4)) {
                    d.copy_from_slice(&[s[2], s[1], s[0], s[3]]);
                }
            }
        }
    }
    (w, h, row, true)
}

/// The capture time of a frame presented at `present_us` (written by the application, so not
/// trusted): at most now (a time ahead would make glass-to-glass 0 or negative), and a time
/// more than a second old is taken as now (no present is that old when the host takes it).
fn capture_time(present_us: u64, now: u64) -> u64 {
    if present_us > now || now - present_us > 1_000_000 {
        now
    } else {
        present_us
    }
}

pub(crate) fn ring_loop(
    s: &HostShared,
    ring: Arc<FrameRing>,
    mut stage: EncoderStage,
    fps: u32,
    mut out: GrabOutput,
) {
    ring.set_interval(Duration::from_micros(1_000_000 / fps.max(1) as u64));
    s.note("taking the application's presented frames from its capture hook".into());
    let mut buf = Vec::new();
    let mut refusals = std::collections::HashSet::new();
    // Since when a client watches: a frame presented before is stale (the one copied at the
    // start for the stream's size, or the last before everyone left) and is not sent.
    let mut watched_since = None;
    while !s.stopped() {
        let watched = s.watched();
        ring.set_watching(watched);
        if !watched {
            watched_since = None;
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let since = *watched_since.get_or_insert_with(now_us);
        let taken = ring.take(Duration::from_millis(100));
        if let Some(why) = ring.take_refusal() {
            // Said once per reason (the first 16 reasons); every refused frame is counted as a
            // grab error.
            s.counters.grab_errors.fetch_add(1, Ordering::Relaxed);
            if refusals.len() < 16 && refusals.insert(why.clone()) {
                log::warn!("host: a frame from the application's capture hook was refused: {why}");
            }
        }
        let Some(mut frame) = taken else {
            continue;
        };
        if frame.present_us < since {
            continue;
        }
        let t0 = now_us();
        let (w, h, stride, copied) = to_bgra(&frame, &mut buf);
        if w == 0 || h == 0 {
            continue;
        }
        // The capture instant is the present: glass-to-glass counts from the application's
        // present call (the copy and the wait for the host are inside it). The stamp carries
        // the frame's due number: the client's gaps are due frames it never showed.
        let (capture_us, frame_number) = (capture_time(frame.present_us, t0), frame.frame as u32);
        let grab = Grab {
            pixels: GrabPixels::Writable(if copied { &mut buf } else { frame.data_mut() }),
            width: w,
            height: h,
            stride,
            capture_us,
            grab_us: now_us().saturating_sub(t0) as u32,
            frame_number,
        };
        if !encode_grab(s, &mut stage, grab, &mut out) {
            return;
        }
    }
    ring.set_watching(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_time_ahead_or_long_gone_is_taken_as_now() {
        assert_eq!(capture_time(5_000_000, 5_000_100), 5_000_000);
        assert_eq!(capture_time(9_000_000, 5_000_000), 5_000_000, "ahead");
        assert_eq!(capture_time(1, 5_000_000), 5_000_000, "long gone");
    }

    #[test]
    fn bottom_up_rgba_rows_become_top_down_bgra_of_even_size() {
        let ring = FrameRing::create(2, 4096).unwrap();
        let (w, h) = (3u32, 3u32);
        let mut slot = ring.begin_write(w, h, 12, FrameFormat::Rgba, true).unwrap();
        for (y, row) in slot.pixels_mut().chunks_exact_mut(12).enumerate() {
            for px in row.chunks_exact_mut(4) {
                px.copy_from_slice(&[10 + y as u8, 20, 30, 255]);
            }
        }
        slot.publish(5, 1);
        let f = ring.take(Duration::ZERO).unwrap();
        let mut buf = Vec::new();
        let (cw, ch, stride, copied) = to_bgra(&f, &mut buf);
        assert_eq!((cw, ch, stride, copied), (2, 2, 8, true));
        // The top row of the picture is the last row GL wrote, as B, G, R, A.
        assert_eq!(&buf[..4], &[30, 20, 12, 255]);
        assert_eq!(&buf[8..12], &[30, 20, 11, 255]);
    }
}
