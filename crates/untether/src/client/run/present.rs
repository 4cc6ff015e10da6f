//! The presenter's part of the run record ([`PresentRecord`]): the pictures it showed (their
//! records), the input events each one reflected, pose-to-photon, and what showed them.

use std::collections::BTreeMap;

use untether_media::gamepad::RumbleCounts;
use untether_proto::Micros;

use crate::client::record::{keep_record, FrameRecord, MAX_RECORDS};

/// The most input events awaiting their response at once.
const MAX_AWAITING: usize = 4096;

/// What the presenter measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct PresentRecord {
    pub(super) presenter: Option<String>,
    pub(super) outcome: Option<String>,
    pub(super) shown: u64,
    /// Records of the pictures shown, in order.
    pub(super) records: Vec<FrameRecord>,
    /// When the first picture of each later session (1, 2, …) was shown: the stream was back.
    pub(super) first_shown: BTreeMap<u32, Micros>,
    /// Input events sent and not yet seen reflected in a picture: seq → sent time.
    awaiting: BTreeMap<u32, Micros>,
    pub(super) input_responses: Vec<(u32, Micros, Micros)>,
    pub(super) pose_to_photon: Vec<(Micros, Micros)>,
    pub(super) pose_photon_unread: u64,
    pub(super) pose_photon_ambiguous: u64,
    pub(super) pose_photon_unmatched: u64,
    pub(super) rumble: RumbleCounts,
}

impl PresentRecord {
    /// What shows the pictures (`gl-window`, …).
    pub fn presenter(&mut self, name: String) {
        self.presenter = Some(name);
    }

    /// Why the run ended, when the presenter's side ended it (a closed sink).
    pub fn ended(&mut self, outcome: String) {
        self.outcome = Some(outcome);
    }

    /// What became of the host's rumble (the controllers' counts at the end of the run).
    pub fn rumble(&mut self, counts: RumbleCounts) {
        self.rumble = counts;
    }

    /// A reliable input event `seq` was sent at `sent_us`: its response is timed.
    pub fn input_sent(&mut self, seq: u32, sent_us: Micros) {
        if self.awaiting.len() < MAX_AWAITING {
            self.awaiting.insert(seq, sent_us);
        }
    }

    /// A picture was shown (its record complete with `shown_us`).
    pub fn shown(&mut self, record: FrameRecord) {
        self.shown += 1;
        if record.session > 0 && self.first_shown.len() < MAX_RECORDS {
            self.first_shown
                .entry(record.session)
                .or_insert(record.shown_us);
        }
        if let Some(stamp) = record.stamp {
            // Every event numbered below the stamp's count has been applied by the scene.
            let later = self.awaiting.split_off(&stamp.input_seq);
            for (seq, sent) in std::mem::replace(&mut self.awaiting, later) {
                self.input_responses.push((seq, sent, record.decode_end_us));
            }
        }
        keep_record(&mut self.records, record);
    }

    /// A pose-to-photon reading of the present at `present_us`: `read` when a marker was
    /// read, its latency when it matched; the matcher's running counts.
    pub fn pose_to_photon(
        &mut self,
        present_us: Micros,
        read: bool,
        latency: Option<Micros>,
        ambiguous: u64,
        unmatched: u64,
    ) {
        match (read, latency) {
            (false, _) => self.pose_photon_unread += 1,
            (true, Some(l)) if self.pose_to_photon.len() < MAX_RECORDS => {
                self.pose_to_photon.push((present_us, l))
            }
            _ => {}
        }
        self.pose_photon_ambiguous = ambiguous;
        self.pose_photon_unmatched = unmatched;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::stamp::Stamp;

    fn shown(session: u32, n: u32, at: Micros, input_seq: Option<u32>) -> FrameRecord {
        FrameRecord {
            session,
            frame_number: n,
            shown_us: at,
            decode_end_us: at - 1,
            stamp: input_seq.map(|s| Stamp {
                input_seq: s,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_stamp_answers_the_events_numbered_below_it() {
        let mut p = PresentRecord::default();
        for seq in 1..=4 {
            p.input_sent(seq, 100 + seq as u64);
        }
        p.shown(shown(0, 1, 1_000, Some(3)));
        assert_eq!(p.input_responses, vec![(1, 101, 999), (2, 102, 999)]);
        // A picture without a stamp answers nothing.
        p.shown(shown(0, 2, 2_000, None));
        p.shown(shown(0, 3, 3_000, Some(10)));
        assert_eq!(p.input_responses.len(), 4);
        assert_eq!(p.input_responses[3], (4, 104, 2_999));
        assert_eq!(p.shown, 3);
        assert_eq!(p.records.len(), 3);
    }

    #[test]
    fn the_first_picture_of_each_later_session_is_remembered() {
        let mut p = PresentRecord::default();
        p.shown(shown(0, 1, 10, None));
        p.shown(shown(2, 1, 20, None));
        p.shown(shown(2, 2, 30, None));
        p.shown(shown(3, 1, 40, None));
        assert_eq!(p.first_shown, BTreeMap::from([(2, 20), (3, 40)]));
    }

    #[test]
    fn pose_to_photon_counts_unread_presents() {
        let mut p = PresentRecord::default();
        p.pose_to_photon(100, false, None, 0, 0);
        p.pose_to_photon(200, true, Some(25), 1, 2);
        p.pose_to_photon(300, true, None, 1, 3);
        assert_eq!(p.pose_to_photon, vec![(200, 25)]);
        assert_eq!(
            (
                p.pose_photon_unread,
                p.pose_photon_ambiguous,
                p.pose_photon_unmatched
            ),
            (1, 1, 3)
        );
        p.presenter("gl-window".into());
        p.ended("sink closed".into());
        assert_eq!(p.presenter.as_deref(), Some("gl-window"));
        assert_eq!(p.outcome.as_deref(), Some("sink closed"));
    }
}
