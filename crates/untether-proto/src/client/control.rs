//! The host's control frames on a connected session, each handed to the part it concerns
//! (the clock, the stream, the link, the channels) or to the application as an event.

use super::{ClientEvent, ClientSession, State};
use crate::clock::ClockSample;
use crate::wire::{role_flags, ByeReason, ControlFrame};
use crate::{GoneReason, Micros};

impl ClientSession {
    pub(super) fn on_control(&mut self, now: Micros, f: ControlFrame) {
        match f {
            ControlFrame::ClockId { id } => {
                self.shared_clock = self.cfg.clock_id.is_some_and(|own| own == id);
            }
            ControlFrame::HostEncoder(e) => self.host_encoder = Some(e),
            ControlFrame::Pong {
                ping_sent_us,
                received_us,
                sent_us,
                ..
            } => {
                if let Some(s) = ClockSample::from_times(ping_sent_us, received_us, sent_us, now) {
                    // A pong must answer one of our pings: its echo cannot be in the future.
                    if ping_sent_us <= now {
                        self.clock.add(s);
                        self.events.push_back(ClientEvent::Rtt(s.rtt_us));
                    }
                }
            }
            ControlFrame::Ping { id, sent_us } => self.pending.push(ControlFrame::Pong {
                id,
                ping_sent_us: sent_us,
                received_us: now,
                sent_us: now,
            }),
            ControlFrame::InputAck { next_expected } => {
                self.channels.on_input_ack(next_expected);
                self.events
                    .push_back(ClientEvent::InputAcked { next_expected });
            }
            ControlFrame::FrameTiming(t) => {
                // It leaves the host after the frame's last datagram: the frame-end signal.
                if let State::Connected(c) = &mut self.state {
                    c.stream.frame_sent(now, t.frame_number);
                }
                self.events.push_back(ClientEvent::FrameTiming(t))
            }
            ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            } => self.events.push_back(ClientEvent::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            }),
            ControlFrame::LinkAddress { ethertype, mac } => self
                .events
                .push_back(ClientEvent::LinkAddress { ethertype, mac }),
            ControlFrame::LinkDeclined { reason } => {
                self.events.push_back(ClientEvent::LinkDeclined(reason))
            }
            ControlFrame::ShardNack { .. } | ControlFrame::SliceNack { .. } => {}
            ControlFrame::PathChallenge { token } => {
                if let State::Connected(c) = &mut self.state {
                    c.conn.on_path_challenge(self.rx_path, token);
                }
            }
            ControlFrame::StateAck(a) => self.channels.on_state_ack(now, &a),
            ControlFrame::Role {
                role,
                flags,
                version,
            } => {
                // Acknowledged every time (the host repeats it until it hears this); acted on
                // when newer than the last one seen (a late copy of an older one is not).
                self.pending
                    .retain(|f| !matches!(f, ControlFrame::RoleAck { .. }));
                self.pending.push(ControlFrame::RoleAck { version });
                let newer = self
                    .role
                    .is_none_or(|(_, _, v)| (version.wrapping_sub(v) as i16) > 0);
                if newer {
                    self.role = Some((role, flags, version));
                    self.events.push_back(ClientEvent::Role {
                        role,
                        input_granted: flags & role_flags::INPUT_GRANTED != 0,
                        paused: flags & role_flags::PAUSED != 0,
                    });
                }
            }
            ControlFrame::State(p) => {
                self.stats.state_packets_received += 1;
                self.channels.on_state(now, &p, &mut self.pending);
            }
            ControlFrame::FramePose {
                frame_number,
                sample,
            } => {
                if !self.poses_seen.contains(&frame_number) {
                    if self.poses_seen.len() >= 16 {
                        self.poses_seen.pop_front();
                    }
                    self.poses_seen.push_back(frame_number);
                    self.events.push_back(ClientEvent::FramePose {
                        frame_number,
                        sample,
                    });
                }
            }
            ControlFrame::Bye { reason } => {
                self.close_state();
                self.pending.clear();
                let gone = match reason {
                    ByeReason::ShuttingDown => GoneReason::ShuttingDown,
                    ByeReason::Replaced => GoneReason::Replaced,
                    ByeReason::Failed => GoneReason::Failed,
                    ByeReason::TooSlow => GoneReason::TooSlow,
                    ByeReason::Closed | ByeReason::Other => GoneReason::Bye,
                };
                self.events.push_back(ClientEvent::HostGone(gone));
            }
            // Only the client sends these.
            ControlFrame::KeyframeRequest { .. }
            | ControlFrame::Feedback(_)
            | ControlFrame::Latency(_)
            | ControlFrame::Input { .. }
            | ControlFrame::RoleAck { .. }
            | ControlFrame::PathResponse { .. } => {}
            // Only meaningful while connecting (a repeated Accept after a lost one is ignored).
            ControlFrame::Accept(_) | ControlFrame::Reject(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::crypto::{Protection, Suite};
    use crate::pose::PoseSample;
    use crate::wire::ClientRole;

    /// A session connected at 0, its events and pending frames drained.
    fn connected() -> ClientSession {
        let mut s = ClientSession::with_state(ClientConfig::new("unit"), State::Closed);
        let p = Protection::new(Suite::ChaCha20Poly1305, [1; 32], [2; 32], 20, false);
        s.install(0, 9, p, [0; 32], super::super::test_params());
        while s.poll_event().is_some() {}
        s.pending.clear();
        s
    }

    fn events(s: &mut ClientSession) -> Vec<ClientEvent> {
        std::iter::from_fn(|| s.poll_event()).collect()
    }

    #[test]
    fn a_role_is_acknowledged_every_time_and_acted_on_only_when_newer() {
        let mut s = connected();
        let role = |version, flags| ControlFrame::Role {
            role: ClientRole::Viewer,
            flags,
            version,
        };
        s.on_control(10, role(2, role_flags::INPUT_GRANTED));
        // The host's repetition, then a late copy of an older one.
        s.on_control(11, role(2, 0));
        s.on_control(12, role(1, 0));
        assert_eq!(
            events(&mut s),
            vec![ClientEvent::Role {
                role: ClientRole::Viewer,
                input_granted: true,
                paused: false
            }]
        );
        assert_eq!(s.role(), Some(ClientRole::Viewer));
        // One acknowledgement pending, the last one's.
        assert_eq!(s.pending, vec![ControlFrame::RoleAck { version: 1 }]);
    }

    #[test]
    fn a_frames_pose_is_reported_once() {
        let mut s = connected();
        let pose = ControlFrame::FramePose {
            frame_number: 5,
            sample: PoseSample::default(),
        };
        s.on_control(10, pose.clone());
        s.on_control(11, pose);
        assert_eq!(
            events(&mut s),
            vec![ClientEvent::FramePose {
                frame_number: 5,
                sample: PoseSample::default()
            }]
        );
    }

    #[test]
    fn a_bye_ends_the_session_with_its_reason() {
        let mut s = connected();
        s.on_control(10, ControlFrame::Ping { id: 3, sent_us: 1 });
        assert_eq!(s.pending.len(), 1);
        s.on_control(
            11,
            ControlFrame::Bye {
                reason: ByeReason::ShuttingDown,
            },
        );
        assert!(s.is_closed() && s.pending.is_empty());
        assert_eq!(
            events(&mut s),
            vec![ClientEvent::HostGone(GoneReason::ShuttingDown)]
        );
    }
}
