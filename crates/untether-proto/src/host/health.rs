//! Whether a viewer keeps up with the stream: a host serving several clients sends every one of
//! them the same frames at the rate the controller's link carries (the adaptive bitrate follows
//! the controller). A viewer whose own link is slower falls behind: its Feedback reports loss
//! (datagrams, then whole frames), and the host's pings see its queue grow. Such a viewer is
//! **paused** — sent keyframes only — so it stops loading its link (and never holds the others
//! back: nothing waits for it), and **resumed** after a hold (2 s, then 4 s, 8 s for later
//! pauses within a minute) to try again — its link may have recovered, and only the full
//! stream shows whether it carries the full stream; a viewer that falls behind a third time
//! within a minute is **dropped** with a Bye saying why (`ByeReason::TooSlow`). The
//! controller is never judged here.
//!
//! Signals, at each Feedback (every 100 ms): the share of datagrams lost and of frames lost
//! since the previous Feedback, and the queueing delay (from the host's pings when the adaptive
//! bitrate runs, else from the smoothed RTT the client reports, against its minimum of the
//! last 10 s).

use std::collections::VecDeque;

use crate::wire::Feedback;
use crate::Micros;

/// What the host does with a viewer that cannot keep up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlowViewer {
    /// Pause it to keyframes only; drop it when it falls behind again too often.
    #[default]
    Pause,
    /// Drop it at once (a Bye saying why).
    Drop,
}

/// A `host.slow_viewer` value that is neither `pause` nor `drop`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected pause or drop")]
pub struct UnknownSlowViewer(pub String);

impl SlowViewer {
    pub fn name(self) -> &'static str {
        match self {
            SlowViewer::Pause => "pause",
            SlowViewer::Drop => "drop",
        }
    }

    /// `"pause"` or `"drop"`.
    pub fn parse(s: &str) -> Result<SlowViewer, UnknownSlowViewer> {
        match s {
            "pause" => Ok(SlowViewer::Pause),
            "drop" => Ok(SlowViewer::Drop),
            _ => Err(UnknownSlowViewer(s.to_string())),
        }
    }
}

/// Thresholds of the viewer health check.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthConfig {
    pub action: SlowViewer,
    /// Behind: more than this share of the host's datagrams lost in a Feedback interval …
    pub loss_high: f64,
    /// … or more than this share of frames lost …
    pub frame_loss_high: f64,
    /// … or a queueing delay above this.
    pub queue_high_us: Micros,
    /// Behind for this long without a break: pause (or drop).
    pub sustain_us: Micros,
    /// A paused viewer is tried again after this long (doubled for each earlier pause in the
    /// window, at most 8×).
    pub resume_after_us: Micros,
    /// A viewer falling behind more often than this within `pause_window_us` is dropped.
    pub max_pauses: u32,
    pub pause_window_us: Micros,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            action: SlowViewer::Pause,
            loss_high: 0.25,
            frame_loss_high: 0.10,
            queue_high_us: 100_000,
            sustain_us: 1_000_000,
            resume_after_us: 2_000_000,
            max_pauses: 2,
            pause_window_us: 60_000_000,
        }
    }
}

/// What to do with the viewer now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Pause,
    Resume,
    Drop,
}

/// One viewer's health, fed with its Feedback.
#[derive(Clone, Debug)]
pub struct ViewerHealth {
    cfg: HealthConfig,
    last: Option<(Micros, Feedback)>,
    /// Smoothed RTTs the client reported, for a queue estimate without host pings.
    srtts: VecDeque<(Micros, Micros)>,
    behind_since: Option<Micros>,
    /// Paused until then (None: not paused).
    paused_until: Option<Micros>,
    /// When it was paused (or dropped), within the window.
    pauses: VecDeque<Micros>,
    /// The last interval's figures, for reports.
    pub last_loss: f64,
    pub last_frame_loss: f64,
    pub last_queue_us: Option<Micros>,
}

const SRTT_WINDOW_US: Micros = 10_000_000;

impl ViewerHealth {
    pub fn new(cfg: HealthConfig) -> Self {
        ViewerHealth {
            cfg,
            last: None,
            srtts: VecDeque::new(),
            behind_since: None,
            paused_until: None,
            pauses: VecDeque::new(),
            last_loss: 0.0,
            last_frame_loss: 0.0,
            last_queue_us: None,
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// Times it was paused within the window.
    pub fn pauses(&self) -> usize {
        self.pauses.len()
    }

    /// The client became the controller (never judged) or a new session began: forget.
    pub fn reset(&mut self) {
        *self = ViewerHealth::new(self.cfg);
    }

    /// The queue from the client's reported smoothed RTT against its minimum of the last
    /// 10 s (used when the host does not ping).
    fn srtt_queue(&mut self, now: Micros, srtt_us: u32) -> Option<Micros> {
        if srtt_us == 0 {
            return None;
        }
        self.srtts.push_back((now, srtt_us as Micros));
        while self
            .srtts
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > SRTT_WINDOW_US)
        {
            self.srtts.pop_front();
        }
        let base = self.srtts.iter().map(|&(_, r)| r).min()?;
        Some((srtt_us as Micros).saturating_sub(base))
    }

    /// A Feedback from the viewer; `host_queue_us` is the queueing delay the host's own pings
    /// measured, when it pings.
    pub fn on_feedback(
        &mut self,
        now: Micros,
        fb: &Feedback,
        host_queue_us: Option<Micros>,
    ) -> Verdict {
        let srtt_queue = self.srtt_queue(now, fb.srtt_us);
        let queue = host_queue_us.or(srtt_queue);
        let Some((_, prev)) = self.last.replace((now, *fb)) else {
            return Verdict::Keep;
        };
        let d = |a: u32, b: u32| a.wrapping_sub(b) as f64;
        let (received, lost) = (
            d(fb.datagrams_received, prev.datagrams_received),
            d(fb.packets_lost, prev.packets_lost),
        );
        let (complete, frames_lost) = (
            d(fb.frames_complete, prev.frames_complete),
            d(fb.frames_lost, prev.frames_lost),
        );
        if received > 1e7 || lost > 1e7 || complete > 1e7 || frames_lost > 1e7 {
            // Counters went backwards (a new session) or nonsense: skip this interval.
            return Verdict::Keep;
        }
        let share = |part: f64, other: f64| {
            if part + other > 0.0 {
                part / (part + other)
            } else {
                0.0
            }
        };
        self.last_loss = share(lost, received);
        self.last_frame_loss = share(frames_lost, complete);
        self.last_queue_us = queue;
        let behind = self.last_loss > self.cfg.loss_high
            || self.last_frame_loss > self.cfg.frame_loss_high
            || queue.is_some_and(|q| q > self.cfg.queue_high_us);
        while self
            .pauses
            .front()
            .is_some_and(|&t| now.saturating_sub(t) > self.cfg.pause_window_us)
        {
            self.pauses.pop_front();
        }
        if let Some(until) = self.paused_until {
            if now < until {
                return Verdict::Keep;
            }
            // Try the full stream again.
            self.paused_until = None;
            self.behind_since = None;
            return Verdict::Resume;
        }
        if !behind {
            self.behind_since = None;
            return Verdict::Keep;
        }
        let since = *self.behind_since.get_or_insert(now);
        if now.saturating_sub(since) < self.cfg.sustain_us {
            return Verdict::Keep;
        }
        self.behind_since = None;
        if self.cfg.action == SlowViewer::Drop || self.pauses.len() >= self.cfg.max_pauses as usize
        {
            return Verdict::Drop;
        }
        let hold = self.cfg.resume_after_us << self.pauses.len().min(3);
        self.pauses.push_back(now);
        self.paused_until = Some(now + hold);
        Verdict::Pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cumulative Feedback after `t` intervals with `lost` of every 100 datagrams lost.
    struct TestLink {
        fb: Feedback,
    }

    impl TestLink {
        fn step(&mut self, lost_per_100: u32) -> Feedback {
            self.fb.datagrams_received += 100 - lost_per_100;
            self.fb.packets_lost += lost_per_100;
            self.fb.frames_complete += if lost_per_100 > 20 { 1 } else { 6 };
            self.fb.frames_lost += if lost_per_100 > 20 { 5 } else { 0 };
            self.fb
        }
    }

    fn feed(
        h: &mut ViewerHealth,
        link: &mut TestLink,
        t: &mut Micros,
        secs: f64,
        lost: u32,
    ) -> Vec<Verdict> {
        let mut out = Vec::new();
        let end = *t + (secs * 1e6) as Micros;
        while *t < end {
            *t += 100_000;
            let fb = link.step(lost);
            let v = h.on_feedback(*t, &fb, None);
            if v != Verdict::Keep {
                out.push(v);
            }
        }
        out
    }

    #[test]
    fn a_viewer_behind_for_a_second_is_paused_then_resumed_then_dropped() {
        let mut h = ViewerHealth::new(HealthConfig::default());
        let mut link = TestLink {
            fb: Feedback::default(),
        };
        let mut t = 0;
        // A little loss (FEC's business) never pauses anyone.
        assert!(feed(&mut h, &mut link, &mut t, 5.0, 5).is_empty());
        // Half the datagrams lost: paused after a second, not before.
        assert!(feed(&mut h, &mut link, &mut t, 0.9, 50).is_empty());
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 0.3, 50),
            vec![Verdict::Pause]
        );
        assert!(h.is_paused());
        // Tried again after 2 s, whatever the (keyframes-only) link showed meanwhile.
        assert!(feed(&mut h, &mut link, &mut t, 1.8, 50).is_empty());
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 0.4, 0),
            vec![Verdict::Resume]
        );
        assert!(!h.is_paused());
        // It keeps up for a while, then falls behind again: paused again, for 4 s this time.
        assert!(feed(&mut h, &mut link, &mut t, 3.0, 0).is_empty());
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 1.5, 60),
            vec![Verdict::Pause]
        );
        assert!(feed(&mut h, &mut link, &mut t, 3.5, 0).is_empty());
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 1.0, 0),
            vec![Verdict::Resume]
        );
        // A third time within the minute: dropped (the session ends it at once).
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 1.5, 60).first(),
            Some(&Verdict::Drop)
        );
        // A minute later, a viewer's old pauses are forgotten.
        let mut h = ViewerHealth::new(HealthConfig::default());
        let mut t = 0;
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 1.5, 80),
            vec![Verdict::Pause]
        );
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 2.5, 80),
            vec![Verdict::Resume]
        );
        assert!(feed(&mut h, &mut link, &mut t, 70.0, 0).is_empty());
        assert_eq!(
            feed(&mut h, &mut link, &mut t, 1.5, 80),
            vec![Verdict::Pause]
        );
        assert_eq!(h.pauses(), 1);
    }

    #[test]
    fn the_drop_policy_drops_at_once_and_a_queue_counts_as_behind() {
        let cfg = HealthConfig {
            action: SlowViewer::Drop,
            ..Default::default()
        };
        let mut h = ViewerHealth::new(cfg);
        let fb = |n: u32| Feedback {
            datagrams_received: n * 100,
            frames_complete: n * 6,
            ..Default::default()
        };
        let mut verdicts = Vec::new();
        for n in 0..20u32 {
            // No loss at all, but the host's pings wait 300 ms behind the viewer's queue.
            verdicts.push(h.on_feedback(n as Micros * 100_000, &fb(n), Some(300_000)));
        }
        assert_eq!(verdicts.iter().filter(|&&v| v == Verdict::Drop).count(), 1);
        assert!(verdicts.iter().all(|&v| v != Verdict::Pause));
        assert_eq!(h.last_queue_us, Some(300_000));
    }

    #[test]
    fn without_host_pings_the_reported_rtt_shows_the_queue() {
        let mut h = ViewerHealth::new(HealthConfig::default());
        let mut fb = Feedback::default();
        let mut verdicts = Vec::new();
        for n in 0..30u32 {
            fb.datagrams_received += 100;
            fb.frames_complete += 6;
            // 2 ms at first, then 250 ms: a queue of ~248 ms.
            fb.srtt_us = if n < 5 { 2_000 } else { 250_000 };
            verdicts.push(h.on_feedback(n as Micros * 100_000, &fb, None));
        }
        assert!(verdicts.contains(&Verdict::Pause), "{verdicts:?}");
        assert_eq!(h.last_queue_us, Some(248_000));
    }

    #[test]
    fn slow_viewer_policies_parse() {
        assert_eq!(SlowViewer::parse("drop"), Ok(SlowViewer::Drop));
        let e = SlowViewer::parse("kick").unwrap_err();
        assert_eq!(e, UnknownSlowViewer("kick".into()));
        assert_eq!(e.to_string(), r#""kick": expected pause or drop"#);
    }
}
