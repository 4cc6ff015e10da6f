//! The stream's shape as the first client asked for it (`client --resolution/--fps`, granted
//! by the session within the host's limits): pictures scaled down to its size, and dropped to
//! its frame rate, before they reach the encoder.

use untether_media::codec::InputPicture;
use untether_media::scale::Scaler;
use untether_proto::Micros;

/// What the stream is shaped to (the default: the source as it comes).
#[derive(Debug, Default)]
pub(crate) struct StreamShape {
    /// Scale to this size (None: the source's size).
    size: Option<(u32, u32)>,
    /// At least this long between two pictures sent, µs (0: every picture).
    interval_us: Micros,
    /// The operator's frame rate ceiling (the dashboard) as an interval, µs (0: none); the
    /// longer of the two intervals applies.
    ceiling_us: Micros,
    next_due_us: Micros,
    pub(super) scaler: Option<Scaler>,
}

impl StreamShape {
    /// A new shape: `size` when smaller than the host's own, `fps` when lower.
    pub fn set(&mut self, size: Option<(u32, u32)>, fps: Option<u32>) {
        self.size = size;
        self.interval_us = fps
            .filter(|&f| f > 0)
            .map_or(0, |f| 1_000_000 / f as Micros);
        self.next_due_us = 0;
        if size.is_none() {
            self.scaler = None;
        }
    }

    /// The operator's frame rate ceiling (None: none), from the next picture.
    pub fn set_ceiling(&mut self, fps: Option<u32>) {
        self.ceiling_us = fps
            .filter(|&f| f > 0)
            .map_or(0, |f| 1_000_000 / f as Micros);
        self.next_due_us = 0;
    }

    /// Whether the picture captured at `capture_us` is sent (the frame rate asked for: one
    /// per interval, a quarter interval early at most, so that a source rate that is not a
    /// multiple of it averages out).
    pub fn due(&mut self, capture_us: Micros) -> bool {
        let interval = self.interval_us.max(self.ceiling_us);
        if interval == 0 {
            return true;
        }
        if capture_us + interval / 4 < self.next_due_us {
            return false;
        }
        self.next_due_us = if capture_us > self.next_due_us + interval {
            capture_us + interval
        } else {
            self.next_due_us + interval
        };
        true
    }

    /// The size `picture` is scaled to (None: sent as it is: no size asked for, or the
    /// source is not larger).
    pub fn size_for(&self, picture: &InputPicture<'_>) -> Option<(u32, u32)> {
        let (w, h) = picture.size();
        self.size
            .filter(|&(tw, th)| (tw, th) != (w, h) && tw <= w && th <= h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_frame_rate_drops_pictures_and_a_smaller_size_is_only_ever_down() {
        let mut s = StreamShape::default();
        assert!(
            (0..5).all(|i| s.due(i * 16_667)),
            "no rate asked: every picture"
        );
        s.set(Some((640, 360)), Some(30));
        let sent = (0..60).filter(|i| s.due(i * 16_667)).count();
        assert!(
            (29..=31).contains(&sent),
            "60 pictures in 1 s at 30 fps: {sent} sent"
        );
        let data = vec![0u8; 1280 * 720 * 4];
        let pic = InputPicture::Bgra {
            width: 1280,
            height: 720,
            data: &data,
            stride: 1280 * 4,
        };
        assert_eq!(s.size_for(&pic), Some((640, 360)));
        s.set(Some((1920, 1080)), None);
        assert_eq!(s.size_for(&pic), None, "never scaled up");
        s.set(None, None);
        assert_eq!(s.size_for(&pic), None);
        // The operator's ceiling: the lower of it and the client's rate.
        s.set(None, Some(30));
        s.set_ceiling(Some(10));
        let sent = (0..60).filter(|i| s.due(i * 16_667)).count();
        assert!((9..=11).contains(&sent), "ceiling 10 fps: {sent} sent");
        s.set_ceiling(Some(50));
        let sent = (60..120).filter(|i| s.due(i * 16_667)).count();
        assert!(
            (29..=31).contains(&sent),
            "the client's 30 fps: {sent} sent"
        );
        s.set_ceiling(None);
    }
}
