//! What a client sends: its protected datagrams opened (the replay window, a new path, the
//! tag), and each control frame in them handled as far as the client's own state goes; what
//! the session must do besides (the keyframe gate, the bitrate, a viewer's verdict, a
//! retransmission, the end of the session) comes back as an [`Action`].

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::super::health::Verdict;
use super::super::{HostEvent, HostStats};
use super::Peer;
use crate::rate::RateController;
use crate::window::Seen;
use crate::wire::{ControlFrame, HEADER_LEN};
use crate::Micros;

/// An authentic new datagram of the client, opened into the session's scratch buffer.
pub(in crate::host) struct Opened {
    /// The length of its plaintext (after the header).
    pub len: usize,
    /// It had fallen silent and is heard again: it waits for an entry point, and the roles
    /// are decided again.
    pub heard_again: bool,
}

/// What the session does about a control frame, beyond the client's own state.
pub(in crate::host) enum Action {
    /// A keyframe request to put through the one gate (`paused`: from a paused viewer).
    Keyframe { lost_frame: u32, paused: bool },
    /// Feedback: the new bitrate target if this is the controller's link and it moved, and
    /// a viewer's health verdict ([`Verdict::Keep`] for the controller).
    Feedback {
        bitrate: Option<u32>,
        verdict: Verdict,
    },
    /// A ShardNack or SliceNack: missing data shards of a kept frame (slice).
    Nack {
        frame_number: u32,
        slice_index: u8,
        missing: Vec<u16>,
    },
    /// A Bye: the session is over.
    Bye,
}

impl Peer {
    /// Opens a protected datagram (packet number `pn`) from `from` into `scratch`. Too old,
    /// forged, from a path it cannot add, or a duplicate: None (counted). An authentic copy
    /// from a new address adds a path (validated before it carries anything).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::host) fn open(
        &mut self,
        now: Micros,
        from: SocketAddr,
        pn: u64,
        data: &[u8],
        scratch: &mut Vec<u8>,
        stats: &mut HostStats,
    ) -> Option<Opened> {
        let path = self.paths.find(from);
        let seen = self.window.check(pn);
        if seen == Seen::TooOld {
            // Too far behind to be of use: dropped before any work, and credits no path.
            stats.duplicate_datagrams += 1;
            return None;
        }
        // A copy from another path (multipath) or a replay is opened too: only an authentic
        // datagram credits a path's anti-amplification budget (and its counters).
        scratch.clear();
        scratch.extend_from_slice(data);
        let len = match self.protection.opener.open(scratch, HEADER_LEN, pn, true) {
            Ok(n) => n,
            Err(_) => {
                stats.auth_failures += 1;
                return None;
            }
        };
        // An authentic datagram from a new address: a new path of this client (validated by a
        // PathChallenge before it carries anything). A copy that lost the race from another
        // path is authentic too, and still counts as a duplicate.
        let path = match path {
            Some(i) => i,
            None => match self.paths.add(from, now) {
                Some(i) => {
                    stats.paths_added += 1;
                    i
                }
                None => {
                    stats.unknown_connection += 1;
                    return None;
                }
            },
        };
        self.paths.on_received(path, data.len());
        if seen != Seen::New {
            stats.duplicate_datagrams += 1;
            return None;
        }
        // Record only now that the datagram is authentic.
        self.window.record(pn);
        self.last_recv_us = now;
        self.confirmed = true;
        stats.datagrams_authentic += 1;
        let heard_again = std::mem::take(&mut self.silent);
        if heard_again {
            // Live from the next keyframe.
            self.awaiting_entry = true;
            stats.clients_heard_again += 1;
        }
        Some(Opened { len, heard_again })
    }

    /// One control frame from the client: its own state (feedback, pongs, input and state
    /// channels, acknowledgements, paths) is updated here, and the events that concern only
    /// it queued; what else the session must do is returned.
    pub(in crate::host) fn on_control(
        &mut self,
        now: Micros,
        from: SocketAddr,
        f: ControlFrame,
        is_controller: bool,
        stats: &mut HostStats,
        events: &mut VecDeque<HostEvent>,
    ) -> Option<Action> {
        match f {
            ControlFrame::KeyframeRequest { lost_frame } => {
                stats.keyframe_requests_received += 1;
                self.counters.keyframe_requests += 1;
                if self.awaiting_entry {
                    // Its first picture is on its way (the join asked for it).
                    return None;
                }
                // A viewer (paused or not) gets the keyframes others cause, and at most one of
                // its own a second: it must not make everyone's stream a string of keyframes.
                Some(Action::Keyframe {
                    lost_frame,
                    paused: self.health.is_paused(),
                })
            }
            ControlFrame::Feedback(fb) => {
                self.feedback = Some(fb);
                self.loss.on_feedback(&fb);
                let mut bitrate = None;
                if let Some(rate) = self.rate.as_mut() {
                    let mean = stats.bytes_sent as f64 / stats.datagrams_sent.max(1) as f64;
                    if let (_, Some(kbps)) = rate.on_feedback(now, &fb, mean) {
                        bitrate = Some(kbps);
                    }
                }
                let verdict = if is_controller {
                    Verdict::Keep
                } else {
                    let queue = self.rate.as_ref().and_then(RateController::queue_delay_us);
                    self.health.on_feedback(now, &fb, queue)
                };
                events.push_back(HostEvent::Feedback {
                    client: self.info.id,
                    feedback: fb,
                });
                Some(Action::Feedback {
                    // The bitrate follows the controller's link only.
                    bitrate: bitrate.filter(|_| is_controller),
                    verdict,
                })
            }
            ControlFrame::Ping { id, sent_us } => {
                // The pong's send time is stamped when the datagram is built.
                self.pending.push(ControlFrame::Pong {
                    id,
                    ping_sent_us: sent_us,
                    received_us: now,
                    sent_us: 0,
                });
                None
            }
            ControlFrame::Pong {
                ping_sent_us,
                received_us,
                sent_us,
                ..
            } => {
                // A pong to the host's own ping (adaptive bitrate): RTT without the client's
                // turnaround.
                if let Some(rate) = self.rate.as_mut() {
                    if ping_sent_us <= now {
                        let turnaround = sent_us.saturating_sub(received_us);
                        rate.on_rtt(now, (now - ping_sent_us).saturating_sub(turnaround));
                    }
                }
                None
            }
            ControlFrame::ShardNack {
                frame_number,
                missing,
            } => Some(Action::Nack {
                frame_number,
                slice_index: 0,
                missing,
            }),
            ControlFrame::SliceNack {
                frame_number,
                slice_index,
                missing,
            } => Some(Action::Nack {
                frame_number,
                slice_index,
                missing,
            }),
            ControlFrame::PathResponse { token } => {
                if !self.paths.on_response(now, from, token) {
                    stats.path_responses_unknown += 1;
                }
                self.paths.update(now);
                None
            }
            ControlFrame::Input {
                first_seq,
                events: records,
            } => {
                let mut out = Vec::new();
                let before = self.input.duplicates;
                self.input.on_events(first_seq, &records, &mut out);
                stats.inputs_duplicate += self.input.duplicates - before;
                stats.inputs_received += out.len() as u64;
                self.counters.inputs_received += out.len() as u64;
                // Acknowledged whatever the role (the client's channel must not stall);
                // delivered only from the controller and viewers with a grant.
                if self.input_applies() {
                    let client = self.info.id;
                    for record in out {
                        events.push_back(HostEvent::Input { client, record });
                    }
                } else {
                    self.counters.inputs_dropped += out.len() as u64;
                    stats.inputs_dropped_viewer += out.len() as u64;
                }
                if self.input.ack_due {
                    self.input.ack_due = false;
                    self.pending
                        .retain(|f| !matches!(f, ControlFrame::InputAck { .. }));
                    self.pending.push(ControlFrame::InputAck {
                        next_expected: self.input.next_expected(),
                    });
                }
                None
            }
            ControlFrame::State(p) => {
                stats.state_packets_received += 1;
                self.state.on_packet(now, &p);
                if let Some(ack) = self.state.poll_ack() {
                    self.pending
                        .retain(|f| !matches!(f, ControlFrame::StateAck(_)));
                    self.pending.push(ControlFrame::StateAck(ack));
                }
                None
            }
            ControlFrame::StateAck(a) => {
                self.state_tx.on_ack(now, &a);
                None
            }
            ControlFrame::RoleAck { version } => {
                self.roles_acked(version);
                None
            }
            ControlFrame::Bye { .. } => Some(Action::Bye),
            ControlFrame::Latency(report) => {
                events.push_back(HostEvent::Latency {
                    client: self.info.id,
                    report,
                });
                None
            }
            ControlFrame::LinkAddress { ethertype, mac } => {
                events.push_back(HostEvent::LinkAddress {
                    addr: self.info.addr,
                    ethertype,
                    mac,
                });
                None
            }
            // Only the host sends these.
            ControlFrame::LinkDeclined { .. }
            | ControlFrame::SliceTiming { .. }
            | ControlFrame::InputAck { .. }
            | ControlFrame::FrameTiming(_)
            | ControlFrame::Accept(_)
            | ControlFrame::Reject(_)
            | ControlFrame::ClockId { .. }
            | ControlFrame::HostEncoder(_)
            | ControlFrame::FramePose { .. }
            | ControlFrame::Role { .. }
            | ControlFrame::PathChallenge { .. } => None,
        }
    }
}
