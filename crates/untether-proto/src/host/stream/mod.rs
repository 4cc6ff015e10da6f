//! The host's one stream: frame numbering, the FEC encoder and its parity buffer (computed once
//! per frame for every receiver), the resend store with each client's budget ([`resend`]), and
//! the one keyframe gate with its limits per requester and the joins waiting ([`keyframes`]).
//! [`Stream`] owns that state; the packetizer ([`frame`]) drives it for the session.

mod frame;
pub(super) mod keyframes;
pub(super) mod resend;

use super::{ClientId, HostStats};
use crate::fec::FecEncoder;
use crate::Micros;

pub(super) use frame::Sending;
pub use frame::{ClientDatagrams, FrameMeta};
use keyframes::Keyframes;
use resend::ResendStore;

/// The stream's state, shared by every receiver.
pub(super) struct Stream {
    fec: FecEncoder,
    /// Parity shards of the frame being sent (computed once, reused).
    parity_buf: Vec<u8>,
    /// Retransmission: the last frames sent (shared by every client), with each client's
    /// resend budget.
    resend: ResendStore,
    /// The one keyframe gate, with its limits per requester and the joins waiting.
    keyframes: Keyframes,
    /// The next frame number to be sent (frames are numbered per stream, not per client).
    next_frame: Option<u32>,
}

impl Stream {
    pub(super) fn new(keyframe_cooldown_us: Micros) -> Stream {
        Stream {
            fec: FecEncoder::new(),
            parity_buf: Vec::new(),
            resend: ResendStore::new(),
            keyframes: Keyframes::new(keyframe_cooldown_us),
            next_frame: None,
        }
    }

    /// The keyframe gate and its limits.
    pub(super) fn keyframes(&mut self) -> &mut Keyframes {
        &mut self.keyframes
    }

    /// A receiver left: its resend budget and keyframe limits go.
    pub(super) fn forget(&mut self, id: ClientId) {
        self.resend.forget(id);
        self.keyframes.forget(id);
    }

    /// When the stream needs [`HostSession::handle_timeout`](super::HostSession): a join
    /// waiting for its keyframe.
    pub(super) fn poll_timeout(&self) -> Option<Micros> {
        self.keyframes.poll_timeout()
    }

    /// Its counters, into the session's.
    pub(super) fn fill_stats(&self, s: &mut HostStats) {
        let gate = self.keyframes.gate();
        s.keyframe_requests_honoured = gate.honoured;
        s.keyframe_requests_ignored_cooldown = gate.ignored_cooldown;
        s.keyframe_requests_ignored_already_sent = gate.ignored_already_sent;
        let limits = self.keyframes.stats();
        s.keyframe_requests_ignored_limit = limits.viewer_limited;
        s.joins_backed_off = limits.joins_backed_off;
        let r = self.resend.stats();
        s.shard_nacks_duplicates = r.duplicates;
        s.shard_resends_over_limit = r.over_shard_limit;
        s.shard_resends_over_budget = r.over_budget;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyframe::KeyframeDecision;
    use keyframes::Requester;

    #[test]
    fn a_receiver_that_leaves_takes_its_limits_with_it() {
        let mut s = Stream::new(50_000);
        let v = ClientId(4);
        let k = s.keyframes();
        assert_eq!(
            k.request(0, Requester::Viewer(v), 1),
            KeyframeDecision::Honour
        );
        assert_eq!(
            k.request(100_000, Requester::Viewer(v), 2),
            KeyframeDecision::Limited
        );
        s.forget(v);
        let k = s.keyframes();
        assert_eq!(
            k.request(200_000, Requester::Viewer(v), 3),
            KeyframeDecision::Honour
        );
        let mut st = HostStats::default();
        s.fill_stats(&mut st);
        assert_eq!(
            (
                st.keyframe_requests_honoured,
                st.keyframe_requests_ignored_limit
            ),
            (2, 1)
        );
    }
}
