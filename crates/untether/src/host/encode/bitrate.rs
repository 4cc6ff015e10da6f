//! The adaptive bitrate controller's target, as the encoder follows it: x264 and NVENC
//! reconfigure their rate control in place; another encoder refuses, once, and keeps its rate.

use std::sync::atomic::Ordering;

use super::super::encode_slices::VideoEncoder;
use super::super::shared::HostShared;
use crate::host::error::HostError;

/// The controller's latest target and the last one the encoder refused.
#[derive(Debug, Default)]
pub(super) struct BitrateTarget {
    target_kbps: Option<u32>,
    /// The last target the encoder refused to apply in place (not asked again).
    refused_kbps: Option<u32>,
}

impl BitrateTarget {
    /// The controller's new target, kbit/s.
    pub fn set(&mut self, kbps: u32) {
        self.target_kbps = Some(kbps);
    }

    /// The rate a new encoder opens with: the target, or `configured` without one.
    pub fn kbps_or(&self, configured: u32) -> u32 {
        self.target_kbps.unwrap_or(configured)
    }

    /// A new encoder: it has refused nothing yet.
    pub fn reset_refusal(&mut self) {
        self.refused_kbps = None;
    }

    /// Whether `encoder` (at `current` kbit/s) should be asked for the target: there is one, it
    /// differs, and it was not refused already.
    fn wanted(&self, current: u32) -> Option<u32> {
        self.target_kbps
            .filter(|&t| t != current && self.refused_kbps != Some(t))
    }

    /// Asks `encoder` for the target, counting the change or the refusal (the first refusal
    /// is noted for the user).
    pub fn apply(&mut self, encoder: &mut VideoEncoder, s: &HostShared) -> Result<(), HostError> {
        let Some(target) = self.wanted(encoder.config().bitrate_kbps) else {
            return Ok(());
        };
        if encoder.set_bitrate(target)? {
            s.counters.bitrate_changes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if self.refused_kbps.is_none() {
            s.note(format!(
                "encoder {} cannot change its bitrate in place: it stays at {} \
                 kbit/s (adaptive bitrate works with libx264 and NVENC)",
                encoder.info().name,
                encoder.config().bitrate_kbps
            ));
        }
        self.refused_kbps = Some(target);
        s.counters
            .bitrate_changes_refused
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_asked_for_once_and_a_refused_one_not_again() {
        let mut b = BitrateTarget::default();
        assert_eq!(b.wanted(1000), None, "no target: nothing to ask");
        assert_eq!(b.kbps_or(1000), 1000);
        b.set(500);
        assert_eq!(b.kbps_or(1000), 500);
        assert_eq!(b.wanted(1000), Some(500));
        assert_eq!(b.wanted(500), None, "already there");
        b.refused_kbps = Some(500);
        assert_eq!(b.wanted(1000), None, "refused: not asked again");
        b.set(400);
        assert_eq!(b.wanted(1000), Some(400), "a new target is asked for");
        b.set(500);
        b.reset_refusal();
        assert_eq!(b.wanted(1000), Some(500), "a new encoder is asked again");
    }
}
