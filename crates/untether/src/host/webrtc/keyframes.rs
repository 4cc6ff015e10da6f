//! The browsers' keyframe cooldown: a browser that connects or asks for a picture (PLI/FIR)
//! gets a keyframe from the one encoder, at most one per `host.keyframe_cooldown_ms`.
//!
//! This is the one place the WebRTC side decides whether to ask the encoder for a keyframe:
//! [`KeyframeGate::request`] is meant to be routed to the host session's own keyframe gate
//! (shared with our clients' requests), which replaces this type.

use untether_proto::Micros;

/// At most one keyframe per cooldown for the browsers' requests.
pub(super) struct KeyframeGate {
    cooldown_us: Micros,
    last_us: Option<Micros>,
}

impl KeyframeGate {
    pub fn new(cooldown_us: Micros) -> KeyframeGate {
        KeyframeGate {
            cooldown_us,
            last_us: None,
        }
    }

    /// A keyframe is wanted at `now`: true when the encoder should be asked (the cooldown has
    /// passed since the last one asked for), which starts a new cooldown.
    pub fn request(&mut self, now: Micros) -> bool {
        let due = self
            .last_us
            .is_none_or(|t| now >= t.saturating_add(self.cooldown_us));
        if due {
            self.last_us = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_keyframe_per_cooldown() {
        let mut g = KeyframeGate::new(500);
        assert!(g.request(1000));
        assert!(!g.request(1000));
        assert!(!g.request(1499));
        assert!(g.request(1500));
        assert!(!g.request(1600));
    }

    #[test]
    fn no_cooldown_lets_every_request_through() {
        let mut g = KeyframeGate::new(0);
        assert!(g.request(5));
        assert!(g.request(5));
    }
}
