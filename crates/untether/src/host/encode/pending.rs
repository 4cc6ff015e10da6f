//! The pictures inside an encoder: an encoder with a delay hands a picture's frame back with a
//! later call, and the frame must carry that picture's capture time and pose.

use std::collections::VecDeque;

use untether_proto::{Micros, PoseSample};

/// A picture inside the encoder (an encoder with a delay hands its frame back later).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Inside {
    /// Its number among the pictures handed to this encoder (the encoder's `input`).
    pub input: u64,
    pub capture_us: Micros,
    pub capture_dur_us: u32,
    pub start_us: Micros,
    /// The head pose the picture was rendered for.
    pub pose: Option<PoseSample>,
}

/// Pictures handed to the current encoder, and those it has not handed back yet.
#[derive(Debug, Default)]
pub(super) struct Pending {
    inputs: u64,
    inside: VecDeque<Inside>,
}

impl Pending {
    /// Notes a picture handed to the encoder now; returns it with its number.
    pub fn push(
        &mut self,
        capture_us: Micros,
        capture_dur_us: u32,
        start_us: Micros,
        pose: Option<PoseSample>,
    ) -> Inside {
        let picture = Inside {
            input: self.inputs,
            capture_us,
            capture_dur_us,
            start_us,
            pose,
        };
        self.inside.push_back(picture);
        self.inputs += 1;
        picture
    }

    /// The picture of the frame the encoder handed back for `input` (the pictures before it
    /// are gone: the encoder dropped them); None if it is not inside.
    pub fn take(&mut self, input: u64) -> Option<Inside> {
        while self.inside.front().is_some_and(|i| i.input < input) {
            self.inside.pop_front();
        }
        self.inside.pop_front()
    }

    /// Forgets the pictures inside (an encoder without delay handed its frame back at once).
    pub fn clear(&mut self) {
        self.inside.clear();
    }

    /// A new encoder: numbering starts again, and nothing is inside.
    pub fn reset(&mut self) {
        self.inputs = 0;
        self.inside.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delayed_frame_gets_its_own_pictures_capture_time_and_older_ones_are_dropped() {
        let mut p = Pending::default();
        for i in 0..4u64 {
            assert_eq!(p.push(100 + i, 1, 200 + i, None).input, i);
        }
        // The encoder skipped picture 0 and hands back picture 1's frame.
        assert_eq!(p.take(1).map(|i| i.capture_us), Some(101));
        assert_eq!(p.take(3).map(|i| i.capture_us), Some(103));
        assert_eq!(p.take(4), None);
        p.push(7, 0, 8, None);
        p.reset();
        assert_eq!(p.take(0), None);
        assert_eq!(
            p.push(9, 0, 9, None).input,
            0,
            "a new encoder numbers from 0"
        );
        p.clear();
        assert_eq!(p.take(0), None);
        assert_eq!(p.push(9, 0, 9, None).input, 1, "clear keeps the numbering");
    }
}
