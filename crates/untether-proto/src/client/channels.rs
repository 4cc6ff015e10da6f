//! The client's channels beside the stream: input events (reliable, ordered, retransmitted
//! after an RTO) and the latest-wins state in both directions (client → host values, host →
//! client values and their acknowledgements). [`Channels`] owns them for the whole session:
//! input and state set before the Accept go out once it arrives.

use super::{ClientConfig, ClientStats};
use crate::crypto::TAG_LEN;
use crate::reliable::ReliableSender;
use crate::state::{
    StateAck, StateConfig, StateKey, StatePacket, StateReceiver, StateSender, StateValue,
};
use crate::wire::{ControlFrame, InputEvent, HEADER_LEN};
use crate::Micros;

/// Input events are sent at most this many per flush.
const MAX_INPUT_EVENTS: usize = 512;

/// The input channel and the state channels.
pub(super) struct Channels {
    input: ReliableSender,
    state_tx: StateSender,
    /// Host → client state.
    state_rx: StateReceiver,
}

impl Channels {
    pub(super) fn new(cfg: &ClientConfig) -> Channels {
        Channels {
            input: ReliableSender::new(),
            state_tx: StateSender::new(StateConfig {
                alpha: cfg.rtt_alpha,
                beta: cfg.rto_beta,
                min_rto_us: cfg.min_rto_us.min(2_000),
                initial_rto_us: 100_000,
                keepalive_us: cfg.keepalive_us,
                budget_bytes_per_s: cfg.state_budget_bytes_per_s,
                ..StateConfig::default()
            }),
            state_rx: StateReceiver::new(),
        }
    }

    /// Queues an input event; its sequence number, or None when too many are unacknowledged.
    pub(super) fn push_input(&mut self, event: InputEvent) -> Option<u32> {
        self.input.push(event)
    }

    /// The input events due (never sent, or their RTO expired), as Input frames.
    pub(super) fn flush_input(&mut self, now: Micros, rto_us: Micros, out: &mut Vec<ControlFrame>) {
        for (first_seq, events) in self.input.due(now, rto_us, MAX_INPUT_EVENTS) {
            out.push(ControlFrame::Input { first_seq, events });
        }
    }

    /// The host's InputAck: every event below `next_expected` arrived.
    pub(super) fn on_input_ack(&mut self, next_expected: u32) {
        self.input.on_ack(next_expected);
    }

    /// Sets a key of the client → host state; false when the key table is full.
    pub(super) fn set_state(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        self.state_tx.set(now, key, value)
    }

    /// A state packet, when one is due, within a control datagram of `max_datagram` bytes.
    pub(super) fn flush_state(
        &mut self,
        now: Micros,
        max_datagram: usize,
        out: &mut Vec<ControlFrame>,
    ) {
        if !self.state_tx.wants_to_send(now) {
            return;
        }
        if let Some(p) = self
            .state_tx
            .poll_packet(now, max_datagram - HEADER_LEN - TAG_LEN - 3)
        {
            out.push(ControlFrame::State(p));
        }
    }

    /// A host → client state packet: its acknowledgement replaces one not yet sent.
    pub(super) fn on_state(&mut self, now: Micros, p: &StatePacket, out: &mut Vec<ControlFrame>) {
        self.state_rx.on_packet(now, p);
        if let Some(ack) = self.state_rx.poll_ack() {
            out.retain(|f| !matches!(f, ControlFrame::StateAck(_)));
            out.push(ControlFrame::StateAck(ack));
        }
    }

    /// The host acknowledged client → host state packets.
    pub(super) fn on_state_ack(&mut self, now: Micros, ack: &StateAck) {
        self.state_tx.on_ack(now, ack);
    }

    /// The state channel's RTO and its 2 s empty packet.
    pub(super) fn handle_timeout(&mut self, now: Micros) {
        self.state_tx.handle_timeout(now);
    }

    /// The next input retransmission (with `rto_us`) or state timer.
    pub(super) fn poll_timeout(&self, rto_us: Micros) -> Option<Micros> {
        [
            self.input.poll_timeout(rto_us),
            self.state_tx.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Their counters, into the session's.
    pub(super) fn fill_stats(&self, s: &mut ClientStats) {
        s.inputs_retransmitted = self.input.retransmissions;
        s.inputs_refused = self.input.refused;
        s.state = self.state_tx.stats();
    }

    pub(super) fn state_sender(&self) -> &StateSender {
        &self.state_tx
    }

    pub(super) fn state_received(&self) -> &StateReceiver {
        &self.state_rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::keys;

    fn channels() -> Channels {
        Channels::new(&ClientConfig::new("unit"))
    }

    #[test]
    fn input_is_sent_once_then_again_after_the_rto_until_acknowledged() {
        let mut c = channels();
        let a = c
            .push_input(InputEvent::Key {
                code: 30,
                down: true,
            })
            .unwrap();
        let b = c
            .push_input(InputEvent::Key {
                code: 30,
                down: false,
            })
            .unwrap();
        assert_eq!(b, a + 1);
        let mut out = Vec::new();
        c.flush_input(0, 10_000, &mut out);
        let [ControlFrame::Input { first_seq, events }] = &out[..] else {
            panic!("{out:?}");
        };
        assert_eq!((*first_seq, events.len()), (a, 2));
        // Nothing more before the RTO; both again after it; nothing once acknowledged.
        out.clear();
        c.flush_input(9_999, 10_000, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.poll_timeout(10_000), Some(10_000));
        c.flush_input(10_000, 10_000, &mut out);
        assert_eq!(out.len(), 1);
        c.on_input_ack(b + 1);
        out.clear();
        c.flush_input(100_000, 10_000, &mut out);
        assert!(out.is_empty());
        let mut s = ClientStats::default();
        c.fill_stats(&mut s);
        assert_eq!(s.inputs_retransmitted, 2);
    }

    #[test]
    fn state_goes_out_within_the_datagram_and_only_the_newest_ack_is_kept() {
        let mut c = channels();
        assert!(c.set_state(0, keys::POINTER, StateValue::Pointer { x: 3, y: 4 }));
        let mut out = Vec::new();
        c.flush_state(0, 1200, &mut out);
        let [ControlFrame::State(p)] = &out[..] else {
            panic!("{out:?}");
        };
        // The host's side receives it; its acknowledgements to us replace each other.
        let mut host = StateSender::new(StateConfig::default());
        let mut rx = StateReceiver::new();
        rx.on_packet(1, p);
        assert_eq!(
            rx.get(keys::POINTER).map(|e| e.value),
            Some(StateValue::Pointer { x: 3, y: 4 })
        );
        host.set(0, keys::HAPTICS, StateValue::Pointer { x: 1, y: 1 });
        let first = host.poll_packet(0, 1000).unwrap();
        host.set(10, keys::HAPTICS, StateValue::Pointer { x: 2, y: 2 });
        let second = host.poll_packet(10, 1000).unwrap();
        let mut pending = vec![ControlFrame::Ping { id: 1, sent_us: 0 }];
        c.on_state(20, &first, &mut pending);
        c.on_state(30, &second, &mut pending);
        let acks = pending
            .iter()
            .filter(|f| matches!(f, ControlFrame::StateAck(_)))
            .count();
        assert_eq!((pending.len(), acks), (2, 1));
        assert_eq!(
            c.state_received().get(keys::HAPTICS).map(|e| e.value),
            Some(StateValue::Pointer { x: 2, y: 2 })
        );
    }
}
