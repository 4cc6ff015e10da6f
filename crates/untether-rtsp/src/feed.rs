//! The hand-over from the host's encoder to one RTSP media, as decisions (no GStreamer here):
//! which frame goes in, which is dropped because the queue in front of the RTP packetizer is
//! full, which is skipped because nobody could decode it, and when to ask for a keyframe; and
//! the buffer timestamps, mapped from the host's clock to the pipeline's running time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use untether_proto::Micros;

/// What to do with a video frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Push it to the packetizer.
    Push,
    /// The queue is full: drop it (counted); the stream then waits for a keyframe.
    Drop,
    /// A delta frame while the stream waits for a keyframe (none yet, or one was dropped):
    /// nothing after the gap could be decoded, so it is not sent (counted).
    Skip,
}

/// The video state of one media: whether its stream is broken until a keyframe, whether
/// someone (a new viewer, a player's PLI/FIR or loss report) wants one, and when the periodic
/// one (`rtsp.keyframe_interval_ms`) is due.
#[derive(Debug)]
pub(crate) struct Feed {
    /// Frames the packetizer may have waiting before a new one is dropped.
    limit: u64,
    /// No keyframe since the start or the last drop: deltas are useless.
    waiting: bool,
    /// A keyframe is wanted though the stream is intact (a viewer joined, or asked).
    wanted: bool,
    /// The last buffer timestamp pushed, ns (they must not go backwards).
    last_pts_ns: Option<u64>,
    /// A frame went in.
    pushed: bool,
    /// A keyframe at least this often (µs; None: only on demand).
    interval_us: Option<Micros>,
    /// When the last keyframe went in (host clock, µs).
    last_keyframe_us: Option<Micros>,
}

impl Feed {
    /// A new media's feed: it starts with a keyframe, and wants one every `interval_ms`
    /// (0: only on demand).
    pub fn new(limit: u32, interval_ms: u64) -> Feed {
        Feed {
            limit: u64::from(limit.max(1)),
            waiting: true,
            wanted: true,
            last_pts_ns: None,
            pushed: false,
            interval_us: (interval_ms > 0).then(|| interval_ms.saturating_mul(1000)),
            last_keyframe_us: None,
        }
    }

    /// Decides about a frame at `now_us`, with `queued` buffers waiting in front of the
    /// packetizer.
    pub fn offer(&mut self, keyframe: bool, queued: u64, now_us: Micros) -> Offer {
        if queued >= self.limit {
            self.waiting = true;
            return Offer::Drop;
        }
        if keyframe {
            self.waiting = false;
            self.wanted = false;
            self.pushed = true;
            self.last_keyframe_us = Some(now_us);
            return Offer::Push;
        }
        if self.waiting {
            Offer::Skip
        } else {
            Offer::Push
        }
    }

    /// Whether a frame went in yet (the media's first keyframe).
    pub fn started(&self) -> bool {
        self.pushed
    }

    /// Whether the encoder should be asked for a keyframe at `now_us` (on every frame until
    /// one comes; the host's cooldown spaces the requests out).
    pub fn needs_keyframe(&self, now_us: Micros) -> bool {
        let periodic = match (self.interval_us, self.last_keyframe_us) {
            (Some(every), Some(last)) => now_us.saturating_sub(last) >= every,
            _ => false,
        };
        self.waiting || self.wanted || periodic
    }

    /// A viewer joined or asked for a keyframe.
    pub fn want_keyframe(&mut self) {
        self.wanted = true;
    }

    /// The timestamp for a buffer at `pts_ns`, never before the previous one.
    pub fn monotonic(&mut self, pts_ns: Option<u64>) -> Option<u64> {
        let pts = pts_ns.map(|p| match self.last_pts_ns {
            Some(last) if p <= last => last + 1,
            _ => p,
        });
        if pts.is_some() {
            self.last_pts_ns = pts;
        }
        pts
    }
}

/// The pipeline running time (ns) of host instant `at_us`, given that the pipeline clock reads
/// `clock_ns` at host time `now_us` and the pipeline's base time is `base_ns`. None before the
/// pipeline's start (a frame captured before it began playing).
pub(crate) fn running_time_ns(
    at_us: Micros,
    now_us: Micros,
    clock_ns: u64,
    base_ns: u64,
) -> Option<u64> {
    let ago_ns = now_us.saturating_sub(at_us).saturating_mul(1000);
    clock_ns.checked_sub(base_ns)?.checked_sub(ago_ns)
}

/// The most audio queued before the packetizer, ms (the appsrc's own bound is above it).
pub(crate) const MAX_AUDIO_QUEUE_MS: u64 = 1500;

/// The audio state of one media: Opus packets are independent, so a full queue only drops.
#[derive(Debug)]
pub(crate) struct AudioFeed {
    limit: u64,
    last_pts_ns: Option<u64>,
}

impl AudioFeed {
    /// Packets waiting before a new one is dropped: `limit` frames' worth, at least 500 ms.
    /// The queue is empty while the stream flows; it fills only while gst-rtsp-server holds
    /// a new media between its DESCRIBE and the PLAY (a few round trips), and a player's
    /// jitter buffer takes that burst better than a gap.
    pub fn new(video_limit: u32, fps: u32) -> AudioFeed {
        let frame_ms = 1000 / u64::from(fps.max(1));
        let ms = (u64::from(video_limit) * frame_ms).clamp(500, MAX_AUDIO_QUEUE_MS);
        AudioFeed {
            limit: ms / 10,
            last_pts_ns: None,
        }
    }

    /// Whether a packet fits, with `queued` waiting.
    pub fn fits(&self, queued: u64) -> bool {
        queued < self.limit
    }

    pub fn monotonic(&mut self, pts_ns: Option<u64>) -> Option<u64> {
        let pts = pts_ns.map(|p| match self.last_pts_ns {
            Some(last) if p <= last => last + 1,
            _ => p,
        });
        if pts.is_some() {
            self.last_pts_ns = pts;
        }
        pts
    }
}

/// Loss-triggered keyframes at most this often per media: a viewer that keeps losing
/// packets gets a fresh picture every second, not one per receiver report.
pub(crate) const LOSS_KEYFRAME_EVERY: Duration = Duration::from_secs(1);
/// How often a media's loss reports are logged (summed), at most.
const LOSS_LOG_EVERY: Duration = Duration::from_secs(10);

/// What the receiver reports of a media's players say: which players lost packets since
/// their last report (RTCP `cumulative number of packets lost`, per SSRC).
#[derive(Debug, Default)]
pub(crate) struct LossReports {
    lost: HashMap<u32, i32>,
    last_keyframe: Option<Instant>,
    last_log: Option<Instant>,
    unlogged: i64,
}

/// What to do about a receiver report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LossAction {
    /// Ask for a keyframe.
    pub keyframe: bool,
    /// Log this many packets lost since the last line.
    pub log: Option<i64>,
}

impl LossReports {
    /// Player `ssrc` reports `lost` packets lost in all at `now`.
    pub fn report(&mut self, ssrc: u32, lost: i32, now: Instant) -> LossAction {
        let before = self.lost.insert(ssrc, lost).unwrap_or(0);
        let new = i64::from(lost) - i64::from(before);
        if new <= 0 {
            return LossAction::default();
        }
        self.unlogged += new;
        let keyframe = self
            .last_keyframe
            .is_none_or(|t| now.duration_since(t) >= LOSS_KEYFRAME_EVERY);
        if keyframe {
            self.last_keyframe = Some(now);
        }
        let log = self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOSS_LOG_EVERY)
            .then(|| std::mem::take(&mut self.unlogged));
        if log.is_some() {
            self.last_log = Some(now);
        }
        LossAction { keyframe, log }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_feed_waits_for_its_first_keyframe_and_asks_for_it() {
        let mut f = Feed::new(4, 0);
        assert!(f.needs_keyframe(0) && !f.started());
        assert_eq!(f.offer(false, 0, 0), Offer::Skip);
        assert!(f.needs_keyframe(0) && !f.started());
        assert_eq!(f.offer(true, 0, 0), Offer::Push);
        assert!(f.started());
        assert!(!f.needs_keyframe(0));
        assert_eq!(f.offer(false, 1, 0), Offer::Push);
    }

    #[test]
    fn a_full_queue_drops_and_the_stream_waits_for_the_next_keyframe() {
        let mut f = Feed::new(2, 0);
        assert_eq!(f.offer(true, 0, 0), Offer::Push);
        assert_eq!(f.offer(false, 1, 0), Offer::Push);
        assert_eq!(f.offer(false, 2, 0), Offer::Drop);
        assert!(f.needs_keyframe(0));
        // The queue drained, but the frames after the gap reference the dropped one.
        assert_eq!(f.offer(false, 0, 0), Offer::Skip);
        // A keyframe arriving while the queue is still full is dropped too.
        assert_eq!(f.offer(true, 2, 0), Offer::Drop);
        assert_eq!(f.offer(true, 1, 0), Offer::Push);
        assert!(!f.needs_keyframe(0));
        assert_eq!(f.offer(false, 1, 0), Offer::Push);
    }

    #[test]
    fn a_joining_viewer_wants_a_keyframe_without_breaking_the_stream() {
        let mut f = Feed::new(4, 0);
        f.offer(true, 0, 0);
        f.want_keyframe();
        assert!(f.needs_keyframe(0));
        // The others keep getting deltas meanwhile.
        assert_eq!(f.offer(false, 0, 0), Offer::Push);
        assert!(f.needs_keyframe(0));
        assert_eq!(f.offer(true, 0, 0), Offer::Push);
        assert!(!f.needs_keyframe(0));
    }

    #[test]
    fn a_keyframe_is_wanted_every_interval_while_the_stream_flows() {
        let mut f = Feed::new(4, 2000);
        assert_eq!(f.offer(true, 0, 1_000_000), Offer::Push);
        assert!(!f.needs_keyframe(2_999_999));
        assert!(f.needs_keyframe(3_000_000));
        // Deltas still flow while it is due.
        assert_eq!(f.offer(false, 0, 3_000_000), Offer::Push);
        assert_eq!(f.offer(true, 0, 3_050_000), Offer::Push);
        assert!(!f.needs_keyframe(3_100_000));
        // 0: only on demand.
        let mut f = Feed::new(4, 0);
        f.offer(true, 0, 0);
        assert!(!f.needs_keyframe(1_000_000_000));
    }

    #[test]
    fn running_time_maps_host_instants_into_the_pipeline() {
        // The pipeline started (base) at clock 5 s; now the clock reads 7 s, host time 100 s.
        let (base, clock, now) = (5_000_000_000, 7_000_000_000, 100_000_000);
        // A frame captured 4 ms ago ran at 2 s − 4 ms.
        assert_eq!(
            running_time_ns(now - 4_000, now, clock, base),
            Some(1_996_000_000)
        );
        // Captured before the pipeline started: no running time.
        assert_eq!(running_time_ns(now - 3_000_000, now, clock, base), None);
        // A capture "in the future" (clock jitter) is now.
        assert_eq!(
            running_time_ns(now + 10, now, clock, base),
            Some(2_000_000_000)
        );
    }

    #[test]
    fn timestamps_never_go_backwards() {
        let mut f = Feed::new(1, 0);
        assert_eq!(f.monotonic(Some(10)), Some(10));
        assert_eq!(f.monotonic(Some(10)), Some(11));
        assert_eq!(f.monotonic(Some(5)), Some(12));
        assert_eq!(f.monotonic(None), None);
        assert_eq!(f.monotonic(Some(20)), Some(20));
        let mut a = AudioFeed::new(4, 60);
        assert_eq!(a.monotonic(Some(3)), Some(3));
        assert_eq!(a.monotonic(Some(3)), Some(4));
    }

    #[test]
    fn lost_packets_ask_for_a_keyframe_at_most_once_a_second_and_log_sums() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut r = LossReports::default();
        // No loss: nothing.
        assert_eq!(r.report(7, 0, at(0)), LossAction::default());
        let a = r.report(7, 5, at(100));
        assert_eq!(
            a,
            LossAction {
                keyframe: true,
                log: Some(5)
            }
        );
        // The same count again: nothing new.
        assert_eq!(r.report(7, 5, at(200)), LossAction::default());
        // More loss within the second: no keyframe, no line (summed for later).
        assert_eq!(r.report(7, 9, at(600)), LossAction::default());
        // Another player's loss a second later: a keyframe; the line waits for 10 s.
        assert_eq!(
            r.report(9, 3, at(1_200)),
            LossAction {
                keyframe: true,
                log: None
            }
        );
        assert_eq!(
            r.report(7, 10, at(10_200)),
            LossAction {
                keyframe: true,
                log: Some(8)
            }
        );
    }

    #[test]
    fn the_audio_queue_holds_at_least_500_ms() {
        let a = AudioFeed::new(4, 60);
        assert!(a.fits(49) && !a.fits(50));
        // 60 frames at 60 fps: 960 ms.
        let a = AudioFeed::new(60, 60);
        assert!(a.fits(95) && !a.fits(96));
        // At most 1.5 s, whatever the video queue.
        let a = AudioFeed::new(60, 1);
        assert!(a.fits(149) && !a.fits(150));
    }
}
