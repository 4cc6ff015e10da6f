//! Keyframe requests: the client asks after a loss and repeats every frame interval until a
//! keyframe arrives; the host honours a request unless it honoured one within the cooldown or
//! has already sent a keyframe newer than the loss.
//!
//! A stream that refreshes itself (a session with a refresh period: intra-refresh sweeps, or
//! an encoder's periodic keyframes) recovers without asking: the requester then waits two
//! refresh periods (and two frames) for the stream's own refresh before it asks for a
//! keyframe after all — the sweep start after a loss may itself be lost.

use crate::Micros;

/// Client side: when to (re)send a keyframe request.
#[derive(Clone, Debug)]
pub struct KeyframeRequester {
    interval_us: Micros,
    /// Frames per refresh (0: none; ask at once).
    refresh_period: u32,
    /// (newest lost frame, when to send next) while a keyframe is awaited.
    active: Option<(u32, Micros)>,
    pub requests_sent: u64,
}

impl KeyframeRequester {
    /// `interval_us`: the repeat period, one frame interval.
    pub fn new(interval_us: Micros) -> Self {
        KeyframeRequester {
            interval_us: interval_us.max(1),
            refresh_period: 0,
            active: None,
            requests_sent: 0,
        }
    }

    pub fn set_interval(&mut self, interval_us: Micros) {
        self.interval_us = interval_us.max(1);
    }

    /// The session's refresh period in frames (0: the stream does not refresh itself).
    pub fn set_refresh_period(&mut self, frames: u32) {
        self.refresh_period = frames;
    }

    /// How long after a loss the first request waits: 0, or two refresh periods and two
    /// frames when the stream refreshes itself.
    pub fn first_wait_us(&self) -> Micros {
        if self.refresh_period == 0 {
            0
        } else {
            (2 * self.refresh_period as u64 + 2) * self.interval_us
        }
    }

    /// A frame was lost (or could not be decoded): a keyframe is needed. The request names the
    /// newest lost frame, so a host that already answered an older loss with a keyframe that was
    /// itself lost still sees the request as new.
    pub fn on_loss(&mut self, now: Micros, lost_frame: u32) {
        match &mut self.active {
            Some((f, _)) => *f = (*f).max(lost_frame),
            None => self.active = Some((lost_frame, now + self.first_wait_us())),
        }
    }

    /// The picture is clean again (a keyframe arrived, or a refresh sweep completed): stop
    /// asking.
    pub fn on_keyframe(&mut self) {
        self.active = None;
    }

    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// The request to send now, if one is due.
    pub fn poll(&mut self, now: Micros) -> Option<u32> {
        let (f, at) = self.active.as_mut()?;
        if now < *at {
            return None;
        }
        *at = now + self.interval_us;
        self.requests_sent += 1;
        Some(*f)
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        self.active.map(|(_, at)| at)
    }
}

/// What the host did with a keyframe request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyframeDecision {
    /// Encode the next frame as a keyframe.
    Honour,
    /// A request was honoured less than the cooldown ago.
    Cooldown,
    /// A keyframe newer than the lost frame is already on its way.
    AlreadySent,
    /// The requester's own limit (a viewer: one a second, all viewers together two a second;
    /// host::keyframes).
    Limited,
}

/// Host side: the cooldown against repeated requests.
#[derive(Clone, Debug)]
pub struct KeyframeGate {
    cooldown_us: Micros,
    last_honoured_us: Option<Micros>,
    last_keyframe_sent: Option<u32>,
    pub honoured: u64,
    pub ignored_cooldown: u64,
    pub ignored_already_sent: u64,
}

impl KeyframeGate {
    pub fn new(cooldown_us: Micros) -> Self {
        KeyframeGate {
            cooldown_us,
            last_honoured_us: None,
            last_keyframe_sent: None,
            honoured: 0,
            ignored_cooldown: 0,
            ignored_already_sent: 0,
        }
    }

    pub fn on_request(&mut self, now: Micros, lost_frame: u32) -> KeyframeDecision {
        if self.last_keyframe_sent.is_some_and(|k| k > lost_frame) {
            self.ignored_already_sent += 1;
            return KeyframeDecision::AlreadySent;
        }
        if self
            .last_honoured_us
            .is_some_and(|t| now < t + self.cooldown_us)
        {
            self.ignored_cooldown += 1;
            return KeyframeDecision::Cooldown;
        }
        self.last_honoured_us = Some(now);
        self.honoured += 1;
        KeyframeDecision::Honour
    }

    /// The host sent a keyframe with this frame number.
    pub fn on_keyframe_sent(&mut self, frame_number: u32) {
        self.last_keyframe_sent = Some(frame_number);
    }

    /// A new client: forget the previous one's history.
    pub fn reset(&mut self) {
        self.last_honoured_us = None;
        self.last_keyframe_sent = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requester_repeats_every_interval_until_keyframe() {
        let mut r = KeyframeRequester::new(16_667);
        assert_eq!(r.poll(0), None);
        r.on_loss(100, 7);
        assert_eq!(r.poll(100), Some(7));
        assert_eq!(r.poll(200), None);
        r.on_loss(300, 9);
        assert_eq!(r.poll(16_767), Some(9));
        assert_eq!(r.poll_timeout(), Some(16_767 + 16_667));
        r.on_keyframe();
        assert_eq!(r.poll(100_000), None);
        assert_eq!(r.requests_sent, 2);
    }

    #[test]
    fn a_refreshing_stream_is_given_two_periods_before_a_keyframe_is_asked_for() {
        let mut r = KeyframeRequester::new(10_000);
        r.set_refresh_period(30);
        assert_eq!(r.first_wait_us(), 62 * 10_000);
        r.on_loss(0, 7);
        assert_eq!(r.poll(0), None);
        assert_eq!(r.poll(619_999), None);
        assert_eq!(r.poll_timeout(), Some(620_000));
        // The sweep came: nothing is asked.
        r.on_keyframe();
        assert_eq!(r.poll(700_000), None);
        // It did not come: ask, then every frame.
        r.on_loss(1_000_000, 90);
        assert_eq!(r.poll(1_620_000), Some(90));
        assert_eq!(r.poll(1_630_000), Some(90));
        assert_eq!(r.requests_sent, 2);
    }

    #[test]
    fn gate_cooldown_and_already_sent() {
        let mut g = KeyframeGate::new(50_000);
        assert_eq!(g.on_request(0, 5), KeyframeDecision::Honour);
        assert_eq!(g.on_request(16_000, 5), KeyframeDecision::Cooldown);
        g.on_keyframe_sent(6);
        assert_eq!(g.on_request(60_000, 5), KeyframeDecision::AlreadySent);
        // The keyframe (6) itself was lost: the client now names 6.
        assert_eq!(g.on_request(70_000, 6), KeyframeDecision::Honour);
        assert_eq!(
            (g.honoured, g.ignored_cooldown, g.ignored_already_sent),
            (2, 1, 1)
        );
    }
}
