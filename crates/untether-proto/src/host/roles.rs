//! Roles: one client is the **controller** (its input drives the application, its head pose
//! is the scene's, the adaptive bitrate follows its link), the others are **viewers**, whose
//! input is dropped and counted unless the host granted it.
//!
//! Who controls, decided again whenever a client comes or goes or the host's user changes
//! something: the client the host handed control to ([`HostSession::set_preferred_controller`],
//! `untether pair control FINGERPRINT`) whenever it is connected; else the current controller
//! while it stays; else the longest-connected client (the first admitted, and when the
//! controller leaves, the next). A controller's restarted run (the same key reconnecting)
//! keeps control. Every client is told its role (a Role control frame beside its Accept and on
//! every change, repeated until acknowledged), so its window and log can say "viewer".
//!
//! Joining: a new client is sent nothing until an entry point — a keyframe, asked for at once
//! (within the keyframe cooldown: a join during the cooldown waits for its end, so joins cost
//! at most one keyframe per cooldown), or, when the stream refreshes itself (a non-zero
//! refresh period in its parameters, or [`super::HostConfig::stream_refreshes`]), the next
//! refresh sweep, with no keyframe asked for.

use super::keyframes::Requester;
use super::{ClientId, HostEvent, HostSession};
use crate::handshake::PublicKey;
use crate::keyframe::KeyframeDecision;
use crate::wire::{role_flags, ClientRole, ControlFrame};
use crate::Micros;

impl HostSession {
    /// Hands control to the client with this key whenever it is connected (None: the default
    /// rule). Takes effect at once if it is connected.
    pub fn set_preferred_controller(&mut self, now: Micros, key: Option<PublicKey>) {
        self.preferred_controller = key;
        self.assign_roles(now);
    }

    /// The key control was handed to, if any.
    pub fn preferred_controller(&self) -> Option<PublicKey> {
        self.preferred_controller
    }

    /// Hands control to a connected client now (and whenever it reconnects); false if there
    /// is no such client.
    pub fn hand_control(&mut self, now: Micros, client: ClientId) -> bool {
        let Some(i) = self.peer_index(client) else {
            return false;
        };
        let key = self.peers[i].info.key;
        self.set_preferred_controller(now, Some(key));
        true
    }

    /// Lets a viewer's input through (by key, connected or not).
    pub fn grant_input(&mut self, now: Micros, key: PublicKey) {
        if self.granted.insert(key) {
            self.assign_roles(now);
        }
    }

    /// Takes a viewer's input grant back.
    pub fn revoke_input_grant(&mut self, now: Micros, key: &PublicKey) {
        if self.granted.remove(key) {
            self.assign_roles(now);
        }
    }

    /// Whether the client with this key has an input grant.
    pub fn is_input_granted(&self, key: &PublicKey) -> bool {
        self.granted.contains(key)
    }

    /// A keyframe for everyone asked for by something other than a client's loss (another
    /// kind of consumer of the stream: an RTSP or WebRTC viewer's PLI/FIR), through the same
    /// cooldown; true if the encoder is to make one ([`HostEvent::KeyframeRequested`]).
    pub fn request_keyframe(&mut self, now: Micros) -> bool {
        self.stats.keyframe_requests_received += 1;
        self.keyframe_request(now, Requester::Host, u32::MAX) == KeyframeDecision::Honour
    }

    /// Picks the controller and tells every client whose role changed.
    pub(super) fn assign_roles(&mut self, now: Micros) {
        let preferred = self
            .preferred_controller
            .and_then(|k| self.peers.iter().find(|p| p.info.key == k))
            .map(|p| p.info.id);
        let current = self.controller.filter(|&c| self.peer_index(c).is_some());
        let want = preferred
            .or(current)
            .or_else(|| self.peers.first().map(|p| p.info.id));
        if want != self.controller {
            self.controller = want;
            if want.is_some() {
                self.stats.controller_changes += 1;
            }
            // The bitrate follows the new controller's link.
            let target = self
                .controller_peer()
                .and_then(|p| p.rate.as_ref())
                .map(|r| r.target_kbps());
            if let Some(kbps) = target.filter(|&t| self.target_kbps.is_some_and(|o| o != t)) {
                self.target_kbps = Some(kbps);
                self.events.push_back(HostEvent::BitrateChanged { kbps });
            }
        }
        let mut resumed = false;
        for i in 0..self.peers.len() {
            let p = &mut self.peers[i];
            let role = if Some(p.info.id) == self.controller {
                ClientRole::Controller
            } else {
                ClientRole::Viewer
            };
            let granted = role == ClientRole::Viewer && self.granted.contains(&p.info.key);
            if role != p.role || granted != p.input_granted {
                if role == ClientRole::Controller && p.health.is_paused() {
                    // A paused viewer taking control is judged no more: it takes every frame
                    // again, from the next keyframe.
                    p.awaiting_entry = true;
                    resumed = true;
                }
                if role == ClientRole::Controller {
                    p.health.reset();
                }
                p.role = role;
                p.input_granted = granted;
                self.events.push_back(HostEvent::RoleChanged {
                    client: p.info.id,
                    role,
                    input_granted: granted,
                });
            }
            self.tell_role(now, i);
        }
        if resumed {
            self.request_entry_point(now);
        }
    }

    /// Queues peer `i`'s Role frame if what it was last told differs.
    pub(super) fn tell_role(&mut self, now: Micros, i: usize) {
        let p = &mut self.peers[i];
        let mut flags = 0;
        if p.input_granted {
            flags |= role_flags::INPUT_GRANTED;
        }
        if p.health.is_paused() {
            flags |= role_flags::PAUSED;
        }
        if p.role_told == Some((p.role, flags)) {
            return;
        }
        p.role_version = p.role_version.wrapping_add(1);
        p.role_told = Some((p.role, flags));
        p.role_acked = false;
        self.tell_role_again(now, i);
    }

    /// Queues peer `i`'s current Role frame (again: it was not acknowledged).
    pub(super) fn tell_role_again(&mut self, now: Micros, i: usize) {
        let p = &mut self.peers[i];
        let Some((role, flags)) = p.role_told else {
            return;
        };
        p.pending
            .retain(|f| !matches!(f, ControlFrame::Role { .. }));
        p.pending.push(ControlFrame::Role {
            role,
            flags,
            version: p.role_version,
        });
        p.role_sent_us = now;
        self.stats.roles_sent += 1;
    }

    /// A client waits for a picture it can start on: with a self-refreshing stream, the next
    /// sweep; otherwise a keyframe for everyone, within the cooldown.
    pub(super) fn request_entry_point(&mut self, now: Micros) {
        if self.cfg.stream_refreshes || self.cfg.params.refresh_period > 0 {
            return;
        }
        self.request_join_keyframe(now);
    }

    /// Asks for a keyframe for the clients waiting for their first picture, now or (during
    /// the keyframe cooldown) when it ends.
    pub(super) fn request_join_keyframe(&mut self, now: Micros) {
        let waiting: Vec<(ClientId, bool)> = self
            .peers
            .iter()
            .filter(|p| p.awaiting_entry)
            .map(|p| (p.info.id, p.role != ClientRole::Controller))
            .collect();
        if waiting.is_empty() {
            return;
        }
        // Within the cooldown, a backoff or the viewers' budget: the gate sets a timer.
        if self.keyframes.join(now, &waiting) {
            self.events.push_back(HostEvent::KeyframeRequested);
            self.stats.keyframes_for_joins += 1;
        }
    }
}
