//! What the operator reads about refused clients: one line per client and reason every
//! [`EVERY_US`], so a client retrying its handshake does not flood the log.

use std::collections::HashMap;

use untether_proto::{Micros, RejectReason};

/// How often one client's refusals for one reason are noted.
pub(crate) const EVERY_US: Micros = 10_000_000;

/// At most this many (client, reason) pairs are remembered; past it the memory starts over.
const REMEMBERED: usize = 256;

/// When each (client fingerprint, reason) refusal may be noted again.
#[derive(Default)]
pub(crate) struct RefusalNotes {
    next: HashMap<(String, u8), Micros>,
}

impl RefusalNotes {
    /// The line to log for this refusal now, or None while the same one was told lately.
    pub fn note(
        &mut self,
        now: Micros,
        addr: std::net::SocketAddr,
        fingerprint: &str,
        reason: RejectReason,
        message: &str,
    ) -> Option<String> {
        let key = (fingerprint.to_string(), reason as u8);
        if self.next.get(&key).is_some_and(|&t| now < t) {
            return None;
        }
        if self.next.len() >= REMEMBERED {
            self.next.clear();
        }
        self.next.insert(key, now + EVERY_US);
        Some(match reason {
            // The message names both codec lists.
            RejectReason::Codec => format!("refused client {fingerprint} at {addr}: {message}"),
            _ => format!("refused client {fingerprint} at {addr}: {}", text(reason)),
        })
    }
}

/// What the operator reads about a refusal.
fn text(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::PendingApproval => {
            "not paired (see the access request above, or `untether pair`)"
        }
        RejectReason::Busy => "busy: the host serves its maximum of clients (host.max_clients)",
        RejectReason::NotAllowed => "not allowed (revoked, or not on the allowlist)",
        RejectReason::Pin => "wrong, expired or used-up PIN",
        _ => "refused by the access policy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_client_and_reason_a_while() {
        let addr = "127.0.0.1:5".parse().unwrap();
        let mut n = RefusalNotes::default();
        let a = n.note(1_000, addr, "aaaa", RejectReason::Busy, "");
        assert!(a.is_some_and(|l| l.contains("aaaa") && l.contains("busy")));
        assert!(n
            .note(2_000, addr, "aaaa", RejectReason::Busy, "")
            .is_none());
        assert!(n
            .note(2_000, addr, "aaaa", RejectReason::NotAllowed, "")
            .is_some());
        assert!(n
            .note(2_000, addr, "bbbb", RejectReason::Busy, "")
            .is_some());
        assert!(n
            .note(1_000 + EVERY_US, addr, "aaaa", RejectReason::Busy, "")
            .is_some());
    }

    #[test]
    fn a_codec_refusal_says_the_sessions_message() {
        let addr = "127.0.0.1:5".parse().unwrap();
        let mut n = RefusalNotes::default();
        let l = n.note(
            0,
            addr,
            "cc",
            RejectReason::Codec,
            "host offers h264; client hevc",
        );
        assert!(l.is_some_and(|l| l.ends_with("host offers h264; client hevc")));
    }

    #[test]
    fn memory_stays_bounded() {
        let addr = "127.0.0.1:5".parse().unwrap();
        let mut n = RefusalNotes::default();
        for i in 0..10 * REMEMBERED {
            n.note(0, addr, &format!("{i:08x}"), RejectReason::Busy, "");
            assert!(n.next.len() <= REMEMBERED);
        }
    }
}
