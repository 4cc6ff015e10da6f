//! Roles: one client is the **controller** (its input drives the application, its head pose
//! is the scene's, the adaptive bitrate follows its link), the others are **viewers**, whose
//! input is dropped and counted unless the host granted it.
//!
//! Who controls, decided again whenever a client comes or goes or the host's user changes
//! something: the client the host handed control to ([`HostSession::set_preferred_controller`],
//! `untether pair control FINGERPRINT`) whenever it is connected; else the current controller
//! while it stays; else the longest-connected client (the first admitted, and when the
//! controller leaves, the next). A controller's restarted run (the same key reconnecting)
//! keeps control, and so does the controller of the host's own last run: a restarted host
//! holds control for that key a short while ([`HostSession::hold_control_for`]), so the
//! clients coming back in whatever order find the roles they had. Every client is told its role (a Role control frame beside its Accept and on
//! every change, repeated until acknowledged), so its window and log can say "viewer".
//!
//! Joining: a new client is sent nothing until an entry point — a keyframe, asked for at once
//! (within the keyframe cooldown: a join during the cooldown waits for its end, so joins cost
//! at most one keyframe per cooldown), or, when the stream refreshes itself (a non-zero
//! refresh period in its parameters, or [`super::HostConfig::stream_refreshes`]), the next
//! refresh sweep, with no keyframe asked for.
//!
//! Receivers of other kinds (browsers over WebRTC, RTSP players, WHIP publications: they live
//! outside this crate) register with [`HostSession::attach_receiver`] and are ruled by the same
//! [`Roles`]: a browser controls only while no native client is connected (then the oldest
//! browser); RTSP players and publications never control and have no input. Their keyframe
//! requests go through the same gate, with a viewer's limits unless they control.

use std::collections::HashSet;

use super::stream::keyframes::Requester;
use super::{ClientId, HostEvent, HostSession, ReceiverKind};
use crate::handshake::PublicKey;
use crate::keyframe::KeyframeDecision;
use crate::wire::{role_flags, ClientRole, ControlFrame};
use crate::Micros;

impl HostSession {
    /// Hands control to the client with this key whenever it is connected (None: the default
    /// rule). Takes effect at once if it is connected.
    pub fn set_preferred_controller(&mut self, now: Micros, key: Option<PublicKey>) {
        self.roles.preferred = key;
        self.assign_roles(now);
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

    /// Holds control for the client with this key until `until` (the controller of the host's
    /// last run, read back after a restart): until it comes back or the time is up, the other
    /// native clients are viewers; then the default rule. A preferred key still wins.
    pub fn hold_control_for(&mut self, now: Micros, key: PublicKey, until: Micros) {
        self.roles.held = (until > now).then_some((key, until));
        self.assign_roles(now);
    }

    /// Lets a viewer's input through (by key, connected or not).
    pub fn grant_input(&mut self, now: Micros, key: PublicKey) {
        if self.roles.granted.insert(key) {
            self.assign_roles(now);
        }
    }

    /// Takes a viewer's input grant back.
    pub fn revoke_input_grant(&mut self, now: Micros, key: &PublicKey) {
        if self.roles.granted.remove(key) {
            self.assign_roles(now);
        }
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
        // A silent client cannot control: nothing it sends arrives.
        let natives: Vec<(ClientId, PublicKey)> = self
            .peers
            .iter()
            .filter(|p| !p.silent)
            .map(|p| (p.info.id, p.info.key))
            .collect();
        let want = self.roles.decide(&natives, now);
        if let Some(want) = want {
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
            let (role, granted) = self.roles.native_role(p.info.id, &p.info.key);
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
        for (receiver, kind, role) in self.roles.receiver_changes() {
            self.events.push_back(HostEvent::ReceiverRoleChanged {
                receiver,
                kind,
                role,
            });
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
            .map(|p| (p.info.id, self.roles.controller() != Some(p.info.id)))
            .collect();
        if waiting.is_empty() {
            return;
        }
        // Within the cooldown, a backoff or the viewers' budget: the gate sets a timer.
        if self.stream.keyframes().join(now, &waiting) {
            self.events.push_back(HostEvent::KeyframeRequested);
            self.stats.keyframes_for_joins += 1;
        }
    }
}

impl HostSession {
    /// Registers a receiver of another kind (a browser, an RTSP player, a WHIP publication):
    /// it gets an id from the same space as native clients' and its role from the same rule
    /// ([`role_of`](Self::role_of); a change is a [`HostEvent::ReceiverRoleChanged`]).
    pub fn attach_receiver(&mut self, now: Micros, kind: ReceiverKind) -> ClientId {
        let id = ClientId(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        self.roles.receivers.push(Receiver {
            id,
            kind,
            role: ClientRole::Viewer,
        });
        self.assign_roles(now);
        id
    }

    /// A receiver of another kind left (its role passes on by the same rule).
    pub fn detach_receiver(&mut self, now: Micros, id: ClientId) {
        let before = self.roles.receivers.len();
        self.roles.receivers.retain(|r| r.id != id);
        if self.roles.receivers.len() != before {
            self.stream.forget(id);
            self.assign_roles(now);
        }
    }

    /// A keyframe request (PLI/FIR, an RTSP player joining) from a receiver of another kind,
    /// through the one gate: the cooldown, and a viewer's limits unless it controls. When
    /// honoured, [`HostEvent::KeyframeRequested`] is emitted, as for a native client. An
    /// unknown id is refused ([`KeyframeDecision::Limited`]).
    pub fn receiver_keyframe_request(&mut self, now: Micros, id: ClientId) -> KeyframeDecision {
        self.stats.keyframe_requests_received += 1;
        if !self.roles.receivers.iter().any(|r| r.id == id) {
            return KeyframeDecision::Limited;
        }
        let who = if self.roles.controller == Some(id) {
            Requester::Controller
        } else {
            Requester::Viewer(id)
        };
        // No lost frame to name: any keyframe from now on will do.
        self.keyframe_request(now, who, u32::MAX)
    }

    /// The role the one authority gives a native client or a receiver of another kind (None:
    /// no such id).
    pub fn role_of(&self, id: ClientId) -> Option<ClientRole> {
        if let Some(i) = self.peer_index(id) {
            return Some(self.roles.native_role(id, &self.peers[i].info.key).0);
        }
        self.roles.receiver(id).map(|r| r.role)
    }

    /// Whether an id's input reaches the application: the controller's (a native client's, or
    /// a browser's while it controls), or a native viewer's with a grant. RTSP players and
    /// publications never.
    pub fn input_applies(&self, id: ClientId) -> bool {
        if let Some(i) = self.peer_index(id) {
            let (role, granted) = self.roles.native_role(id, &self.peers[i].info.key);
            return role == ClientRole::Controller || granted;
        }
        self.roles
            .receiver(id)
            .is_some_and(|r| r.kind.may_control() && r.role == ClientRole::Controller)
    }
}

/// A receiver of another kind, as [`Roles`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Receiver {
    id: ClientId,
    kind: ReceiverKind,
    /// The role last reported.
    role: ClientRole,
}

/// Who controls: the one authority over native clients and receivers of other kinds.
#[derive(Default)]
pub(super) struct Roles {
    controller: Option<ClientId>,
    /// The key the host's user handed control to (`untether pair control`): the controller
    /// whenever it is connected.
    preferred: Option<PublicKey>,
    /// The key control is held for, and until when (the controller of the host's last run).
    held: Option<(PublicKey, Micros)>,
    /// Keys of native viewers whose input is applied.
    granted: HashSet<PublicKey>,
    /// Receivers of other kinds, in the order they attached.
    receivers: Vec<Receiver>,
}

impl Roles {
    pub(super) fn new() -> Roles {
        Roles::default()
    }

    pub(super) fn controller(&self) -> Option<ClientId> {
        self.controller
    }

    /// A restarted run of the controller (the same key) takes its place, and control.
    pub(super) fn inherit_control(&mut self, id: ClientId) {
        self.controller = Some(id);
    }

    /// When a hold on control runs out (a timer: the roles are decided again then).
    pub(super) fn hold_deadline(&self) -> Option<Micros> {
        self.held.map(|h| h.1)
    }

    fn receiver(&self, id: ClientId) -> Option<&Receiver> {
        self.receivers.iter().find(|r| r.id == id)
    }

    /// Decides who controls among the native clients (`natives`, id and key, in admission
    /// order) and the receivers: the preferred key whenever it is connected; else the held key
    /// when it is back; else the current controller while it stays (a browser only while no
    /// native client is there); else, unless control is held for a key not back yet, the
    /// longest-connected native client; else the current browser; else the oldest browser.
    /// Some(new controller) if it changed.
    pub(super) fn decide(
        &mut self,
        natives: &[(ClientId, PublicKey)],
        now: Micros,
    ) -> Option<Option<ClientId>> {
        let find = |k: Option<PublicKey>| {
            k.and_then(|k| natives.iter().find(|n| n.1 == k))
                .map(|n| n.0)
        };
        self.held = self.held.filter(|h| now < h.1);
        let preferred = find(self.preferred);
        let held = find(self.held.map(|h| h.0));
        if held.is_some() {
            // Back: it holds control as any controller does from now on.
            self.held = None;
        }
        let current = self.controller;
        let native_current = current.filter(|c| natives.iter().any(|n| n.0 == *c));
        let browser_current =
            current.filter(|&c| self.receiver(c).is_some_and(|r| r.kind.may_control()));
        let longest = natives.first().map(|n| n.0);
        let want = if self.held.is_some() && !natives.is_empty() {
            // Kept for the returning controller: the others watch meanwhile.
            preferred.or(native_current)
        } else {
            preferred
                .or(held)
                .or(native_current)
                .or(longest)
                .or(browser_current)
                .or_else(|| {
                    self.receivers
                        .iter()
                        .find(|r| r.kind.may_control())
                        .map(|r| r.id)
                })
        };
        if want == current {
            return None;
        }
        self.controller = want;
        Some(want)
    }

    /// A native client's role, and whether it is a viewer with an input grant.
    pub(super) fn native_role(&self, id: ClientId, key: &PublicKey) -> (ClientRole, bool) {
        if self.controller == Some(id) {
            (ClientRole::Controller, false)
        } else {
            (ClientRole::Viewer, self.granted.contains(key))
        }
    }

    /// The receivers whose role changed since last asked (now recorded).
    pub(super) fn receiver_changes(&mut self) -> Vec<(ClientId, ReceiverKind, ClientRole)> {
        let controller = self.controller;
        let mut out = Vec::new();
        for r in &mut self.receivers {
            let role = if Some(r.id) == controller {
                ClientRole::Controller
            } else {
                ClientRole::Viewer
            };
            if role != r.role {
                r.role = role;
                out.push((r.id, r.kind, role));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attach(r: &mut Roles, id: u32, kind: ReceiverKind) {
        r.receivers.push(Receiver {
            id: ClientId(id),
            kind,
            role: ClientRole::Viewer,
        });
    }

    #[test]
    fn a_browser_controls_only_while_no_native_client_is_connected() {
        let mut r = Roles::new();
        attach(&mut r, 1, ReceiverKind::Rtsp);
        attach(&mut r, 2, ReceiverKind::Publication);
        // RTSP players and publications never control, even alone.
        assert_eq!(r.decide(&[], 0), None);
        attach(&mut r, 3, ReceiverKind::Browser);
        attach(&mut r, 4, ReceiverKind::Browser);
        assert_eq!(r.decide(&[], 0), Some(Some(ClientId(3))));
        assert_eq!(
            r.receiver_changes(),
            [(ClientId(3), ReceiverKind::Browser, ClientRole::Controller)]
        );
        // A native client connects: it takes control from the browser.
        let natives = [(ClientId(5), [5; 32])];
        assert_eq!(r.decide(&natives, 0), Some(Some(ClientId(5))));
        assert_eq!(
            r.receiver_changes(),
            [(ClientId(3), ReceiverKind::Browser, ClientRole::Viewer)]
        );
        assert_eq!(
            r.native_role(ClientId(5), &[5; 32]).0,
            ClientRole::Controller
        );
        // It leaves, and the first browser left is the oldest: 4 once 3 has gone.
        r.receivers.retain(|x| x.id != ClientId(3));
        assert_eq!(r.decide(&[], 0), Some(Some(ClientId(4))));
        assert_eq!(
            r.receiver_changes(),
            [(ClientId(4), ReceiverKind::Browser, ClientRole::Controller)]
        );
    }

    #[test]
    fn the_preferred_key_then_the_current_then_the_longest_connected_native_controls() {
        let mut r = Roles::new();
        attach(&mut r, 9, ReceiverKind::Browser);
        let (a, b, c) = (
            (ClientId(1), [1; 32]),
            (ClientId(2), [2; 32]),
            (ClientId(3), [3; 32]),
        );
        assert_eq!(r.decide(&[a, b], 0), Some(Some(a.0)));
        // The current controller stays when others come.
        assert_eq!(r.decide(&[a, b, c], 0), None);
        // The preferred key takes over whenever it is connected …
        r.preferred = Some(c.1);
        assert_eq!(r.decide(&[a, b, c], 0), Some(Some(c.0)));
        // … and when it leaves, the longest-connected native, never the browser.
        assert_eq!(r.decide(&[a, b], 0), Some(Some(a.0)));
        r.granted.insert(b.1);
        assert_eq!(r.native_role(b.0, &b.1), (ClientRole::Viewer, true));
        assert_eq!(r.native_role(a.0, &a.1), (ClientRole::Controller, false));
        assert!(r.receiver_changes().is_empty());
    }

    #[test]
    fn control_held_for_the_last_runs_controller_waits_for_it_then_passes_on() {
        let mut r = Roles::new();
        let (a, b, c) = (
            (ClientId(1), [1; 32]),
            (ClientId(2), [2; 32]),
            (ClientId(3), [3; 32]),
        );
        r.held = Some((a.1, 10_000));
        // b and c come back first: both watch, nobody controls.
        assert_eq!(r.decide(&[b], 100), None);
        assert_eq!(r.decide(&[b, c], 200), None);
        assert_eq!(r.native_role(b.0, &b.1).0, ClientRole::Viewer);
        // a is back within the hold: it controls, and the hold is over.
        assert_eq!(r.decide(&[b, c, a], 300), Some(Some(a.0)));
        assert_eq!(r.hold_deadline(), None);
        // It leaves: the longest-connected takes over as usual.
        assert_eq!(r.decide(&[b, c], 400), Some(Some(b.0)));
        // A hold that runs out: the longest-connected native controls.
        let mut r = Roles::new();
        r.held = Some((a.1, 10_000));
        attach(&mut r, 9, ReceiverKind::Browser);
        assert_eq!(r.decide(&[c, b], 5_000), None);
        assert_eq!(r.decide(&[c, b], 10_000), Some(Some(c.0)));
        assert_eq!(r.hold_deadline(), None);
        // A preferred key wins over a hold; with no native client, a browser controls.
        let mut r = Roles::new();
        r.held = Some((a.1, 10_000));
        r.preferred = Some(c.1);
        assert_eq!(r.decide(&[b, c], 100), Some(Some(c.0)));
        attach(&mut r, 9, ReceiverKind::Browser);
        assert_eq!(r.decide(&[], 200), Some(Some(ClientId(9))));
    }
}
