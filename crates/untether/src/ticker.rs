//! The frame ticker: wakes a source at a fixed rate on the monotonic clock, skipping (not
//! bursting) the ticks it missed after a stall. One copy for every source that runs on a clock:
//! the test scene, X11 capture, a paced pipe file, the test tone. A source whose frames arrive
//! on their own (PipeWire) runs on [`ArrivalPacer`] instead: each frame goes when it arrives.

use untether_proto::Micros;

use crate::clock::{now_us, sleep_until};

/// Ticks at a fixed interval from a start time.
#[derive(Clone, Debug)]
pub struct Ticker {
    start: Micros,
    interval: Micros,
    /// The next tick's number (its deadline is `start + next * interval`).
    next: u64,
    skipped: u64,
}

impl Ticker {
    /// Ticks every `interval` µs (at least 1), the first tick at `start`.
    pub fn new(start: Micros, interval: Micros) -> Ticker {
        Ticker {
            start,
            interval: interval.max(1),
            next: 0,
            skipped: 0,
        }
    }

    /// Ticks at `fps` frames per second from now.
    pub fn at_fps(fps: u32) -> Ticker {
        Ticker::new(now_us(), 1_000_000 / u64::from(fps.max(1)))
    }

    pub fn interval(&self) -> Micros {
        self.interval
    }

    /// The deadline of the next tick.
    pub fn deadline(&self) -> Micros {
        self.start + self.next * self.interval
    }

    /// Ticks missed because the caller fell behind by more than one interval.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Advances past the tick due at `deadline`, given that it is now `now`: to the next tick,
    /// or, when the caller fell behind by more than an interval (a stall), to the first tick
    /// after `now` (the missed ones are skipped, not burst).
    pub fn advance(&mut self, now: Micros) {
        let deadline = self.deadline();
        if now > deadline + self.interval {
            let next = (now - self.start) / self.interval + 1;
            self.skipped += next - self.next - 1;
            self.next = next;
        } else {
            self.next += 1;
        }
    }

    /// Re-aligns to the clock after a pause (e.g. no client): the next tick is the first after
    /// `now`, and the pause does not count as skipped.
    pub fn resync(&mut self, now: Micros) {
        self.next = now.saturating_sub(self.start) / self.interval + 1;
    }

    /// Sleeps until the next tick and advances; returns the tick's deadline.
    pub fn wait(&mut self) -> Micros {
        let deadline = self.deadline();
        sleep_until(deadline);
        self.advance(now_us());
        deadline
    }
}

/// The stream's rate for a source whose frames arrive on their own: a frame goes to the
/// encoder the moment it arrives (no tick to wait for), but not sooner than three quarters of
/// an interval after the one before, and never more often than the stream's rate over time
/// (each frame's earliest time is also a whole interval after the previous one's), so a source
/// faster than the stream is thinned to its rate (the newest frame wins at the source) while
/// one at the stream's rate passes with its jitter.
#[derive(Clone, Debug)]
pub struct ArrivalPacer {
    interval: Micros,
    /// The earliest time the next frame may go (None: at once).
    next: Option<Micros>,
}

impl ArrivalPacer {
    pub fn at_fps(fps: u32) -> ArrivalPacer {
        ArrivalPacer {
            interval: 1_000_000 / u64::from(fps.max(1)),
            next: None,
        }
    }

    /// How long to wait for the source's next frame before sending the last one again (when
    /// the encoder must send: a keyframe wanted).
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.interval)
    }

    /// The earliest time the next frame may go.
    pub fn earliest(&self) -> Micros {
        self.next.unwrap_or(0)
    }

    /// Sleeps until the next frame may go (at once when it may already).
    pub fn wait(&self) {
        sleep_until(self.earliest());
    }

    /// A frame went at `now`.
    pub fn sent(&mut self, now: Micros) {
        let soonest = now + self.interval * 3 / 4;
        self.next = Some(
            self.next
                .map_or(soonest, |n| (n + self.interval).max(soonest)),
        );
    }

    /// No client: the next frame may go at once.
    pub fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_on_schedule() {
        let mut t = Ticker::new(1_000, 100);
        assert_eq!(t.deadline(), 1_000);
        t.advance(1_000);
        assert_eq!(t.deadline(), 1_100);
        // Late by less than an interval: the next tick keeps its slot.
        t.advance(1_150);
        assert_eq!(t.deadline(), 1_200);
        assert_eq!(t.skipped(), 0);
    }

    #[test]
    fn a_stall_skips_missed_ticks_instead_of_bursting() {
        let mut t = Ticker::new(0, 100);
        t.advance(0);
        // The tick due at 100 ran at 550: ticks 200..=500 are skipped, the next is at 600.
        t.advance(550);
        assert_eq!(t.deadline(), 600);
        assert_eq!(t.skipped(), 4);
    }

    #[test]
    fn resync_after_a_pause_is_not_a_skip() {
        let mut t = Ticker::new(0, 100);
        t.resync(10_050);
        assert_eq!(t.deadline(), 10_100);
        assert_eq!(t.skipped(), 0);
        assert_eq!(Ticker::new(0, 0).interval(), 1);
    }

    #[test]
    fn wait_sleeps_to_the_deadline() {
        let mut t = Ticker::at_fps(1000);
        let d0 = t.wait();
        let d1 = t.wait();
        assert!(d1 > d0);
        assert!(now_us() >= d1);
    }

    #[test]
    fn a_frame_may_go_on_arrival_but_not_sooner_than_three_quarters_of_an_interval() {
        let mut p = ArrivalPacer::at_fps(100); // 10 ms
        assert_eq!(p.earliest(), 0, "the first frame goes at once");
        p.sent(1_000_000);
        assert_eq!(p.earliest(), 1_007_500);
        p.reset();
        assert_eq!(p.earliest(), 0);
        assert_eq!(p.interval(), std::time::Duration::from_millis(10));
    }

    #[test]
    fn a_source_faster_than_the_stream_is_thinned_to_the_streams_rate() {
        // A source with a frame every 1 ms, sent whenever the pacer allows: 100 fps stream.
        let mut p = ArrivalPacer::at_fps(100);
        let mut sent = Vec::new();
        for t in (0..1_000_000u64).step_by(1_000) {
            if t >= p.earliest() {
                p.sent(t);
                sent.push(t);
            }
        }
        assert!(
            (99..=101).contains(&sent.len()),
            "{} frames in 1 s",
            sent.len()
        );
        // A late frame lets the next come a quarter interval early, no sooner.
        let mut p = ArrivalPacer::at_fps(100);
        p.sent(0);
        p.sent(15_000); // due at 7.5 ms, came at 15 ms
        assert_eq!(p.earliest(), 22_500);
        // Sparse frames (7 fps against 100) each go at once.
        let mut p = ArrivalPacer::at_fps(100);
        for k in 0..7u64 {
            let t = k * 142_857;
            assert!(t >= p.earliest(), "frame {k} held back");
            p.sent(t);
        }
    }
}
