//! The decode thread's part of the run record ([`DecodeRecord`]): what it decoded, held back,
//! failed on, and the records of pictures replaced before the presenter took them.

use crate::client::record::{keep_record, FrameRecord};

/// What the decode thread measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct DecodeRecord {
    pub(super) decoder: Option<String>,
    pub(super) decoded: u64,
    pub(super) held: u64,
    pub(super) held_decode_errors: u64,
    pub(super) decode_errors: u64,
    pub(super) stamp_unreadable: u64,
    pub(super) concealed: u64,
    pub(super) frames_with_pose: u64,
    /// Pictures replaced in the slot before they were shown (decode order).
    pub(super) dropped: Vec<FrameRecord>,
}

impl DecodeRecord {
    /// The session's decoder opened (`h264 (software)`, …).
    pub fn opened(&mut self, decoder: &str) {
        self.decoder = Some(decoder.to_string());
    }

    /// A frame decoded and not shown (an intra-refresh sweep is under way); `failed`: its
    /// decode failed (expected there).
    pub fn held(&mut self, failed: bool) {
        self.held += 1;
        self.held_decode_errors += failed as u64;
    }

    /// A frame failed to decode (or the slice decoder to open).
    pub fn error(&mut self) {
        self.decode_errors += 1;
    }

    /// Pictures handed to the presenter so far.
    pub fn decoded_count(&self) -> u64 {
        self.decoded
    }

    /// A picture on its way to the presenter.
    pub fn decoded(&mut self, r: &FrameRecord) {
        self.decoded += 1;
        self.stamp_unreadable += r.stamp.is_none() as u64;
        self.concealed += (r.slices_lost > 0) as u64;
        self.frames_with_pose += r.pose.is_some() as u64;
    }

    /// A picture replaced before the presenter took it.
    pub fn dropped(&mut self, r: FrameRecord) {
        keep_record(&mut self.dropped, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pictures_are_counted_by_what_their_record_says() {
        let mut d = DecodeRecord::default();
        d.opened("h264 (software)");
        d.decoded(&FrameRecord::default());
        d.decoded(&FrameRecord {
            stamp: Some(Default::default()),
            slices_lost: 1,
            pose: Some(Default::default()),
            ..Default::default()
        });
        d.held(false);
        d.held(true);
        d.error();
        d.dropped(FrameRecord {
            frame_number: 9,
            ..Default::default()
        });
        assert_eq!(d.decoder.as_deref(), Some("h264 (software)"));
        assert_eq!(
            (
                d.decoded,
                d.stamp_unreadable,
                d.concealed,
                d.frames_with_pose
            ),
            (2, 1, 1, 1)
        );
        assert_eq!((d.held, d.held_decode_errors, d.decode_errors), (2, 1, 1));
        assert_eq!(d.dropped.len(), 1);
        assert_eq!(d.dropped[0].frame_number, 9);
    }
}
