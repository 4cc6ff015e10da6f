//! Roles: one client is the **controller** (its input drives the application, its head pose
//! is the scene's, the adaptive bitrate follows its link), the others are **viewers**, whose
//! input is dropped and counted unless the host granted it.
//!
//! Who controls, decided again whenever a client comes or goes or the host's user changes
//! something: the client the host handed control to
//! ([`HostSession::set_preferred_controller`](super::HostSession::set_preferred_controller),
//! `untether pair control FINGERPRINT`) whenever it is connected; else the current controller
//! while it stays; else the longest-connected client (the first admitted, and when the
//! controller leaves, the next). A controller's restarted run (the same key reconnecting)
//! keeps control, and so does the controller of the host's own last run: a restarted host
//! holds control for that key a short while
//! ([`HostSession::hold_control_for`](super::HostSession::hold_control_for)), so the clients
//! coming back in whatever order find the roles they had. Every client is told its role (a
//! Role control frame beside its Accept and on every change, repeated until acknowledged), so
//! its window and log can say "viewer". [`Roles`] decides; the session applies its decision
//! to the peers (`HostSession::assign_roles`, each peer's `Peer::take_role` and
//! `Peer::tell_role`).
//!
//! Joining: a new client is sent nothing until an entry point — a keyframe, asked for at once
//! (within the keyframe cooldown: a join during the cooldown waits for its end, so joins cost
//! at most one keyframe per cooldown), or, when the stream refreshes itself (a non-zero
//! refresh period in its parameters, or [`super::HostConfig::stream_refreshes`]), the next
//! refresh sweep, with no keyframe asked for.
//!
//! Receivers of other kinds (browsers over WebRTC, RTSP players, WHIP publications: they live
//! outside this crate) register with
//! [`HostSession::attach_receiver`](super::HostSession::attach_receiver) and are ruled by the
//! same [`Roles`]: a browser controls only while no native client is connected (then the oldest
//! browser); RTSP players and publications never control and have no input. Their keyframe
//! requests go through the same gate, with a viewer's limits unless they control.

use std::collections::HashSet;

use super::stream::keyframes::Requester;
use super::{ClientId, ReceiverKind};
use crate::handshake::PublicKey;
use crate::wire::ClientRole;
use crate::Micros;

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

    /// Hands control to the client with this key whenever it is connected (None: the default
    /// rule).
    pub(super) fn prefer(&mut self, key: Option<PublicKey>) {
        self.preferred = key;
    }

    /// Holds control for the client with this key until `until` (none if that is past).
    pub(super) fn hold(&mut self, now: Micros, key: PublicKey, until: Micros) {
        self.held = (until > now).then_some((key, until));
    }

    /// Lets a viewer's input through; true if it was not already.
    pub(super) fn grant(&mut self, key: PublicKey) -> bool {
        self.granted.insert(key)
    }

    /// Takes a viewer's input grant back; true if it had one.
    pub(super) fn revoke_grant(&mut self, key: &PublicKey) -> bool {
        self.granted.remove(key)
    }

    /// Registers a receiver of another kind (a viewer until [`decide`](Self::decide) says
    /// otherwise).
    pub(super) fn attach(&mut self, id: ClientId, kind: ReceiverKind) {
        if self.receivers.iter().any(|r| r.id == id) {
            return;
        }
        self.receivers.push(Receiver {
            id,
            kind,
            role: ClientRole::Viewer,
        });
    }

    /// A receiver of another kind left; false if there was none with that id.
    pub(super) fn detach(&mut self, id: ClientId) -> bool {
        let before = self.receivers.len();
        self.receivers.retain(|r| r.id != id);
        self.receivers.len() != before
    }

    /// Whose limits a keyframe request of `id` meets at the gate: the controller's, or a
    /// viewer's.
    pub(super) fn requester(&self, id: ClientId) -> Requester {
        if self.controller == Some(id) {
            Requester::Controller
        } else {
            Requester::Viewer(id)
        }
    }

    /// Whether `id` is a receiver of another kind.
    pub(super) fn is_receiver(&self, id: ClientId) -> bool {
        self.receiver(id).is_some()
    }

    /// A receiver's role as last reported (None: no such receiver).
    pub(super) fn receiver_role(&self, id: ClientId) -> Option<ClientRole> {
        self.receiver(id).map(|r| r.role)
    }

    /// Whether a receiver's input applies: one that may control, while it does.
    pub(super) fn receiver_input_applies(&self, id: ClientId) -> bool {
        self.receiver(id)
            .is_some_and(|r| r.kind.may_control() && r.role == ClientRole::Controller)
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
        r.attach(ClientId(id), kind);
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
