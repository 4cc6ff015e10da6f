//! What the grabbing sources (X11, wlr-screencopy, KMS, the application's frame ring) share:
//! counting failed grabs ([`GrabFailures`]) and handing a grabbed picture to the encoder with
//! its stamp, count and capture-time sample ([`encode_grab`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use untether_media::codec::InputPicture;
use untether_media::stamp::{self, Stamp};

use super::encode::EncoderStage;
use super::options::SentFrameTap;
use super::shared::{lock, HostShared};

/// Failed grabs in a row: a source gives up after more than its limit, else logs and retries.
#[derive(Debug)]
pub(crate) struct GrabFailures {
    in_a_row: u32,
    limit: u32,
}

impl GrabFailures {
    /// Gives up after more than `limit` failed grabs in a row.
    pub fn new(limit: u32) -> GrabFailures {
        GrabFailures { in_a_row: 0, limit }
    }

    /// Counts a failed grab in `errors` (the host's counter); true when the source must give
    /// up (more than the limit in a row), else logs it.
    pub fn failed(&mut self, errors: &AtomicU64, e: &dyn fmt::Display) -> bool {
        errors.fetch_add(1, Ordering::Relaxed);
        self.in_a_row = self.in_a_row.saturating_add(1);
        if self.in_a_row > self.limit {
            return true;
        }
        log::debug!("host: grab failed ({} in a row): {e}", self.in_a_row);
        false
    }

    /// A grab succeeded: the count in a row starts again.
    pub fn succeeded(&mut self) {
        self.in_a_row = 0;
    }
}

/// What a grabbing source does with each picture besides encoding it.
#[derive(Clone, Debug, Default)]
pub(crate) struct GrabOutput {
    /// Stamp the frame number and capture time into the picture (`--stamp`).
    pub stamp: bool,
    /// Shown every picture sent (the bench's picture quality).
    pub tap: Option<SentFrameTap>,
    /// The picture size last said to be too small for the stamp (said once per size).
    pub too_small_for_stamp: Option<(u32, u32)>,
}

/// Where a grabbed picture's bytes lie.
pub(crate) enum GrabPixels<'a> {
    /// In memory the source owns: the stamp is written in place.
    Writable(&'a mut [u8]),
    /// In memory the source may only read (a mapped PipeWire sample): sent where it lies, or,
    /// with the stamp on, copied into `scratch` and stamped there. Only the PipeWire source
    /// makes one, so a build without the `portal` feature never does.
    #[cfg_attr(not(feature = "portal"), allow(dead_code))]
    ReadOnly {
        data: &'a [u8],
        scratch: &'a mut Vec<u8>,
    },
}

/// A grabbed picture (top-down BGRA), ready for the encoder.
pub(crate) struct Grab<'a> {
    pub pixels: GrabPixels<'a>,
    pub width: u32,
    pub height: u32,
    pub stride: usize,
    /// When it was captured (host clock, µs): the grab, or the application's present.
    pub capture_us: u64,
    /// How long the grab (or the conversion) took, µs.
    pub grab_us: u32,
    /// The number the stamp carries.
    pub frame_number: u32,
}

/// Stamps the picture (as `out` says), counts it as captured, records its grab time, sends it
/// to the encoder and shows it to the tap. False when the source must end (the encoder failed:
/// the host has been told, unless it is stopping anyway).
pub(crate) fn encode_grab(
    s: &HostShared,
    stage: &mut EncoderStage,
    g: Grab<'_>,
    out: &mut GrabOutput,
) -> bool {
    if out.stamp
        && !stamp::fits(g.width, g.height)
        && out.too_small_for_stamp != Some((g.width, g.height))
    {
        out.too_small_for_stamp = Some((g.width, g.height));
        let (w, h) = stamp::required_size(g.height);
        log::warn!(
            "host: --stamp: a {}x{} picture is too small to carry the stamp (at this height it \
             needs {w}x{h} pixels: 256x48 up to 480 lines, 512x96 up to 1080, 1024x192 above); \
             its frames go unstamped, so glass-to-glass is not read from the pixels",
            g.width,
            g.height
        );
    }
    let st = out.stamp.then(|| Stamp {
        frame_number: g.frame_number,
        capture_us: g.capture_us,
        input_seq: s.counters.inputs_applied.load(Ordering::Relaxed) as u32,
    });
    let data: &[u8] = match (g.pixels, st) {
        (GrabPixels::Writable(p), None) => p,
        (GrabPixels::ReadOnly { data, .. }, None) => data,
        (GrabPixels::Writable(p), Some(st)) => {
            stamp::write_bgra_raw(p, g.stride, g.width, g.height, &st);
            p
        }
        (GrabPixels::ReadOnly { data, scratch }, Some(st)) => {
            scratch.clear();
            scratch.extend_from_slice(data);
            stamp::write_bgra_raw(scratch, g.stride, g.width, g.height, &st);
            scratch
        }
    };
    s.counters.captured.fetch_add(1, Ordering::Relaxed);
    lock(&s.samples).capture.push_us(g.grab_us as i64);
    let picture = InputPicture::Bgra {
        width: g.width,
        height: g.height,
        data,
        stride: g.stride,
    };
    if let Err(e) = stage.send(&picture, g.capture_us, g.grab_us, None) {
        if !s.stopped() {
            s.fail(format!("encoder: {e}"));
        }
        return false;
    }
    if let Some(tap) = &out.tap {
        (tap.0)(&picture);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gives_up_only_after_more_than_its_limit_of_failures_in_a_row() {
        let errors = AtomicU64::new(0);
        let mut f = GrabFailures::new(2);
        assert!(!f.failed(&errors, &"one"));
        assert!(!f.failed(&errors, &"two"));
        f.succeeded();
        assert!(
            !f.failed(&errors, &"one again"),
            "a success starts the count again"
        );
        assert!(!f.failed(&errors, &"two"));
        assert!(f.failed(&errors, &"three in a row"));
        assert_eq!(
            errors.load(Ordering::Relaxed),
            5,
            "every failure is counted"
        );
        let mut none = GrabFailures::new(0);
        assert!(
            none.failed(&errors, &"first"),
            "limit 0: the first failure ends it"
        );
    }
}
