//! The one keyframe gate of the stream, with limits per requester.
//!
//! Every keyframe request — a native client's after a loss, a join's, a browser's PLI/FIR, an
//! RTSP player joining — goes through here. The shared cooldown of [`KeyframeGate`] applies to
//! all (a request within it of the last honoured one is ignored, and so is one for a loss
//! older than a keyframe already sent). On top of it:
//!
//! - the **controller** keeps just that: its losses are honoured once per cooldown;
//! - a **viewer** (any receiver that does not control) is honoured at most once per
//!   [`VIEWER_KEYFRAME_INTERVAL_US`], and all viewers together at most
//!   [`VIEWER_KEYFRAMES_PER_S`] a second (a burst of as many): viewers can never make the
//!   controller's stream a string of keyframes;
//! - a **join** asks for a keyframe for the receivers waiting for their first picture, within
//!   the cooldown (joins during it share the one at its end) and, for viewers, within the
//!   viewers' budget; a key that keeps reconnecting is **backed off**: from its third join
//!   within [`REJOIN_WINDOW_US`] its join keyframe waits [`REJOIN_BASE_US`], doubled for each
//!   further join, at most [`REJOIN_MAX_US`] (any keyframe sent meanwhile still starts it).

use std::collections::HashMap;

use super::super::ClientId;
use crate::handshake::PublicKey;
use crate::keyframe::{KeyframeDecision, KeyframeGate};
use crate::Micros;

/// A viewer's own keyframe requests are honoured at most this often.
pub const VIEWER_KEYFRAME_INTERVAL_US: Micros = 1_000_000;
/// Keyframes all viewers together may cause per second (and in a burst).
pub const VIEWER_KEYFRAMES_PER_S: f64 = 2.0;
/// Joins of one key within this window count towards its backoff …
pub const REJOIN_WINDOW_US: Micros = 30_000_000;
/// … the third waits this long for its keyframe, each further one twice as long …
pub const REJOIN_BASE_US: Micros = 250_000;
/// … at most this long.
pub const REJOIN_MAX_US: Micros = 4_000_000;
/// Keys whose joins are remembered.
const MAX_KEYS: usize = 1024;

/// Who asks for a keyframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::host) enum Requester {
    /// The controller: the cooldown only.
    Controller,
    /// A receiver that does not control: its own interval and the viewers' budget.
    Viewer(ClientId),
    /// The host application itself (an encoder restart, a consumer outside the session): the
    /// cooldown only.
    Host,
}

/// Counters of the keyframe limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyframeLimitStats {
    /// Viewer requests refused by their own interval or the viewers' budget.
    pub viewer_limited: u64,
    /// Joins whose keyframe was put off by the rejoin backoff.
    pub joins_backed_off: u64,
}

/// The gate and its limits.
pub(in crate::host) struct Keyframes {
    gate: KeyframeGate,
    cooldown_us: Micros,
    last_honoured_us: Option<Micros>,
    /// A join waits: ask again then.
    join_due: Option<Micros>,
    /// When each viewer's own request was last honoured.
    viewer_last: HashMap<ClientId, Micros>,
    viewer_tokens: f64,
    viewer_tokens_us: Micros,
    /// Per key: (joins within the window, the last one).
    joins: HashMap<PublicKey, (u32, Micros)>,
    /// Per waiting receiver: no join keyframe for it before this.
    not_before: HashMap<ClientId, Micros>,
    stats: KeyframeLimitStats,
}

impl Keyframes {
    pub(in crate::host) fn new(cooldown_us: Micros) -> Keyframes {
        Keyframes {
            gate: KeyframeGate::new(cooldown_us),
            cooldown_us,
            last_honoured_us: None,
            join_due: None,
            viewer_last: HashMap::new(),
            viewer_tokens: VIEWER_KEYFRAMES_PER_S,
            viewer_tokens_us: 0,
            joins: HashMap::new(),
            not_before: HashMap::new(),
            stats: KeyframeLimitStats::default(),
        }
    }

    /// The gate's counters (honoured, ignored in the cooldown, ignored as already sent).
    pub(in crate::host) fn gate(&self) -> &KeyframeGate {
        &self.gate
    }

    pub(in crate::host) fn stats(&self) -> KeyframeLimitStats {
        self.stats
    }

    /// When a waiting join should be looked at again.
    pub(in crate::host) fn poll_timeout(&self) -> Option<Micros> {
        self.join_due
    }

    /// Whether a waiting join is due now (and forgets the timer: the caller asks again).
    pub(in crate::host) fn take_join_due(&mut self, now: Micros) -> bool {
        if self.join_due.is_some_and(|t| t <= now) {
            self.join_due = None;
            return true;
        }
        false
    }

    fn refill(&mut self, now: Micros) {
        let dt = now.saturating_sub(self.viewer_tokens_us) as f64 / 1e6;
        self.viewer_tokens_us = self.viewer_tokens_us.max(now);
        self.viewer_tokens =
            (self.viewer_tokens + dt * VIEWER_KEYFRAMES_PER_S).min(VIEWER_KEYFRAMES_PER_S);
    }

    /// A keyframe request for a loss of `lost_frame` (`u32::MAX`: any keyframe from now on).
    pub(in crate::host) fn request(
        &mut self,
        now: Micros,
        who: Requester,
        lost_frame: u32,
    ) -> KeyframeDecision {
        if let Requester::Viewer(id) = who {
            self.refill(now);
            let recent = self
                .viewer_last
                .get(&id)
                .is_some_and(|&t| now < t + VIEWER_KEYFRAME_INTERVAL_US);
            if recent || self.viewer_tokens < 1.0 {
                self.stats.viewer_limited += 1;
                return KeyframeDecision::Limited;
            }
        }
        let d = self.gate.on_request(now, lost_frame);
        if d == KeyframeDecision::Honour {
            self.last_honoured_us = Some(now);
            if let Requester::Viewer(id) = who {
                self.viewer_last.insert(id, now);
                self.viewer_tokens -= 1.0;
            }
        }
        d
    }

    /// A keyframe with this number went out.
    pub(in crate::host) fn on_keyframe_sent(&mut self, frame_number: u32) {
        self.gate.on_keyframe_sent(frame_number);
    }

    /// A receiver joined (`key`: a native client's, for the rejoin backoff): returns how long
    /// its join keyframe waits.
    pub(in crate::host) fn on_join(
        &mut self,
        now: Micros,
        id: ClientId,
        key: Option<PublicKey>,
    ) -> Micros {
        let Some(key) = key else {
            return 0;
        };
        if self.joins.len() >= MAX_KEYS {
            self.joins.retain(|_, (_, t)| now < *t + REJOIN_WINDOW_US);
        }
        let known = self.joins.contains_key(&key);
        if !known && self.joins.len() >= MAX_KEYS {
            return 0;
        }
        let e = self.joins.entry(key).or_insert((0, now));
        if now >= e.1 + REJOIN_WINDOW_US {
            *e = (0, now);
        }
        let earlier = e.0;
        *e = (earlier.saturating_add(1), now);
        let wait = match earlier {
            0 | 1 => 0,
            n => REJOIN_BASE_US
                .saturating_mul(1 << (n - 2).min(20))
                .min(REJOIN_MAX_US),
        };
        if wait > 0 {
            self.stats.joins_backed_off += 1;
            self.not_before.insert(id, now + wait);
        }
        wait
    }

    /// A receiver left (or stopped waiting for good).
    pub(in crate::host) fn forget(&mut self, id: ClientId) {
        self.viewer_last.remove(&id);
        self.not_before.remove(&id);
    }

    /// The receivers waiting for their first picture (`true`: a viewer): whether to ask the
    /// encoder for a keyframe now. If not, and some still wait, a timer is set for when the
    /// cooldown, a backoff or the viewers' budget allows one.
    pub(in crate::host) fn join(&mut self, now: Micros, waiting: &[(ClientId, bool)]) -> bool {
        let waiting: Vec<(ClientId, bool, Micros)> = waiting
            .iter()
            .map(|&(id, viewer)| (id, viewer, self.not_before.get(&id).copied().unwrap_or(0)))
            .collect();
        let due: Vec<bool> = waiting.iter().filter(|w| w.2 <= now).map(|w| w.1).collect();
        let mut later = waiting.iter().map(|w| w.2).filter(|&t| t > now).min();
        if !due.is_empty() {
            let cooldown_end = self
                .last_honoured_us
                .map(|t| t + self.cooldown_us)
                .filter(|&end| end > now);
            self.refill(now);
            let viewers_only = due.iter().all(|&v| v);
            let wait = if let Some(end) = cooldown_end {
                // A keyframe was just asked for (it may be this one's): look again when the
                // cooldown ends.
                Some(end)
            } else if viewers_only && self.viewer_tokens < 1.0 {
                let missing = 1.0 - self.viewer_tokens;
                Some(now + (missing / VIEWER_KEYFRAMES_PER_S * 1e6).ceil() as Micros)
            } else {
                None
            };
            match wait {
                Some(t) => later = Some(later.map_or(t, |l| l.min(t))),
                // No lost frame to name: any keyframe from now on will do.
                None => {
                    if self.gate.on_request(now, u32::MAX) == KeyframeDecision::Honour {
                        self.last_honoured_us = Some(now);
                        if viewers_only {
                            self.viewer_tokens -= 1.0;
                        }
                        for (id, _, t) in &waiting {
                            if *t <= now {
                                self.not_before.remove(id);
                            }
                        }
                        self.set_due(later);
                        return true;
                    }
                }
            }
        }
        self.set_due(later);
        false
    }

    fn set_due(&mut self, t: Option<Micros>) {
        if let Some(t) = t {
            self.join_due = Some(self.join_due.map_or(t, |d| d.min(t)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_viewer_is_honoured_once_a_second_and_the_controller_per_cooldown() {
        let mut k = Keyframes::new(50_000);
        let v = Requester::Viewer(ClientId(2));
        let mut honoured = 0;
        for n in 0..200u32 {
            // Every 16 ms for 3.2 s, each naming the newest frame.
            if k.request(n as u64 * 16_000, v, n) == KeyframeDecision::Honour {
                honoured += 1;
            }
        }
        assert!(honoured <= 4, "{honoured}");
        assert!(k.stats().viewer_limited > 150);
        // The controller is held by the cooldown only.
        let t = 10_000_000;
        assert_eq!(
            k.request(t, Requester::Controller, 500),
            KeyframeDecision::Honour
        );
        assert_eq!(
            k.request(t + 20_000, Requester::Controller, 501),
            KeyframeDecision::Cooldown
        );
        assert_eq!(
            k.request(t + 60_000, Requester::Controller, 502),
            KeyframeDecision::Honour
        );
    }

    #[test]
    fn all_viewers_together_cause_at_most_two_keyframes_a_second() {
        let mut k = Keyframes::new(50_000);
        let mut honoured = 0;
        for n in 0..100u32 {
            // Ten viewers take turns, every 100 ms, for 10 s.
            let v = Requester::Viewer(ClientId(2 + n % 10));
            if k.request(n as u64 * 100_000, v, n) == KeyframeDecision::Honour {
                honoured += 1;
            }
        }
        assert!(honoured <= 22, "{honoured}");
    }

    #[test]
    fn rejoins_back_off_up_to_the_cap_and_a_fresh_key_does_not() {
        let mut k = Keyframes::new(50_000);
        let key = [7; 32];
        let waits: Vec<Micros> = (0..8)
            .map(|i| k.on_join(i * 30_000, ClientId(i as u32 + 1), Some(key)))
            .collect();
        assert_eq!(
            waits,
            [0, 0, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000, 4_000_000]
        );
        assert_eq!(k.on_join(0, ClientId(50), Some([8; 32])), 0);
        // A minute later the key starts afresh.
        assert_eq!(k.on_join(60_000_000, ClientId(60), Some(key)), 0);
    }

    #[test]
    fn a_join_waits_for_its_backoff_then_asks_once() {
        let mut k = Keyframes::new(50_000);
        let (a, key) = (ClientId(3), [9; 32]);
        for i in 0..3 {
            k.on_join(i, a, Some(key));
        }
        assert!(!k.join(10, &[(a, true)]));
        assert_eq!(k.poll_timeout(), Some(2 + REJOIN_BASE_US));
        assert!(!k.take_join_due(100));
        assert!(k.take_join_due(2 + REJOIN_BASE_US));
        assert!(k.join(2 + REJOIN_BASE_US, &[(a, true)]));
        // Within the cooldown another join waits for its end.
        let b = ClientId(4);
        assert!(!k.join(2 + REJOIN_BASE_US + 10, &[(b, false)]));
        assert_eq!(k.poll_timeout(), Some(2 + REJOIN_BASE_US + 50_000));
    }
}
