//! What other threads read while the run goes on, published by its owner: a small snapshot put
//! into a [`Published`] cell (latest wins; a reader gets a copy and never holds the owner's
//! state).

use std::sync::Mutex;

use untether_media::gamepad::RUMBLE_CONTROLLERS;
use untether_proto::state::keys::HAPTICS;
use untether_proto::{ClientRole, ClientSession, StateKey, StateValue};

/// A latest-wins cell: the owner publishes a new snapshot, readers copy the newest one out.
/// The lock is held for one copy only, never while the owner works.
#[derive(Debug, Default)]
pub(crate) struct Published<T> {
    value: Mutex<T>,
}

impl<T: Clone> Published<T> {
    pub fn new(value: T) -> Published<T> {
        Published {
            value: Mutex::new(value),
        }
    }

    /// Replaces the snapshot.
    pub fn publish(&self, value: T) {
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
    }

    /// A copy of the newest snapshot.
    pub fn get(&self) -> T {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The role the host gave this client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RoleView {
    pub role: ClientRole,
    /// A viewer whose input the host applies.
    pub input_granted: bool,
    /// Paused to keyframes (its link cannot carry the stream).
    pub paused: bool,
}

/// The network driver's connection state, for the window's title and the threads that send
/// only while connected (published when it changes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetStatus {
    pub connected: bool,
    /// The host went away and the driver is trying to reach it again.
    pub reconnecting: bool,
    /// The host refused this client as not paired and it waits for the host's approval.
    pub awaiting_approval: bool,
    /// The role the host gave this client last (None: none yet).
    pub role: Option<RoleView>,
}

impl NetStatus {
    /// What the picture itself says about the connection (in fullscreen and in a headset the
    /// title is not seen): the host is unreachable, or this client waits for its approval; and, in
    /// the window opened before any picture (`waiting`), that it is connecting.
    pub fn banner(&self, waiting: bool) -> Option<String> {
        if self.reconnecting {
            Some("host unreachable: reconnecting…".into())
        } else if self.awaiting_approval {
            Some("waiting for the host to approve this client…".into())
        } else if waiting {
            Some(if self.connected {
                "connected: waiting for the first picture…".into()
            } else {
                "connecting to the host…".into()
            })
        } else {
            None
        }
    }

    /// What the window's title says besides the host: reconnecting, waiting for approval, or a
    /// viewer's role (nothing for the controller, or a host serving one client).
    pub fn title_words(&self) -> Option<String> {
        if self.reconnecting {
            return Some("host unreachable: holding the last picture, reconnecting".into());
        }
        if self.awaiting_approval {
            return Some("not paired: waiting for the host's approval".into());
        }
        if !self.connected && self.role.is_none() {
            return Some("connecting to the host".into());
        }
        match self.role? {
            RoleView {
                role: ClientRole::Controller,
                ..
            } => None,
            RoleView {
                input_granted: granted,
                paused,
                ..
            } => Some(format!(
                "viewer{}{}",
                if granted { " · input granted" } else { "" },
                if paused {
                    " · paused: this link cannot carry the stream"
                } else {
                    ""
                }
            )),
        }
    }
}

/// The host's rumble for each controller (key `HAPTICS + n`: low and high motor, 0..1), all
/// zero while not connected (a host that went away leaves no controller rumbling): published by
/// the network driver when it changes, applied by the presenter, which owns the controllers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Haptics(pub [(f32, f32); RUMBLE_CONTROLLERS]);

impl Haptics {
    /// What `session` has from the host (a value of another kind on a rumble key, or a NaN,
    /// counts as no rumble: they come from the network).
    pub fn of(session: &ClientSession) -> Haptics {
        let mut h = Haptics::default();
        if !session.is_connected() {
            return h;
        }
        for (n, motors) in h.0.iter_mut().enumerate() {
            let key = HAPTICS + n as StateKey;
            if let Some(StateValue::Haptic { low, high }) =
                session.state_value(key).map(|e| e.value)
            {
                let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
                *motors = (finite(low), finite(high));
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_see_the_latest_snapshot() {
        let cell = Arc::new(Published::new(NetStatus::default()));
        assert!(!cell.get().connected);
        let up = NetStatus {
            connected: true,
            reconnecting: false,
            awaiting_approval: false,
            role: Some(RoleView {
                role: ClientRole::Viewer,
                input_granted: true,
                paused: false,
            }),
        };
        cell.publish(up);
        let reader = {
            let cell = cell.clone();
            std::thread::spawn(move || cell.get())
        };
        assert_eq!(reader.join().ok(), Some(up));
        cell.publish(NetStatus {
            reconnecting: true,
            ..NetStatus::default()
        });
        assert!(cell.get().reconnecting && !cell.get().connected);
    }

    #[test]
    fn the_title_says_reconnecting_or_a_viewers_role() {
        let st = |reconnecting, role| NetStatus {
            reconnecting,
            role,
            ..NetStatus::default()
        };
        let viewer = |input_granted, paused| {
            Some(RoleView {
                role: ClientRole::Viewer,
                input_granted,
                paused,
            })
        };
        assert!(NetStatus::title_words(&st(true, viewer(true, false)))
            .is_some_and(|t| t.contains("reconnecting")));
        // Not connected yet, no role: the title says it is connecting (issue 36); connected
        // without a role (a host serving one client) says nothing.
        assert_eq!(
            NetStatus::title_words(&st(false, None)).as_deref(),
            Some("connecting to the host")
        );
        let connected = NetStatus {
            connected: true,
            ..NetStatus::default()
        };
        assert_eq!(NetStatus::title_words(&connected), None);
        let controller = Some(RoleView {
            role: ClientRole::Controller,
            input_granted: true,
            paused: false,
        });
        assert_eq!(NetStatus::title_words(&st(false, controller)), None);
        assert_eq!(
            NetStatus::title_words(&st(false, viewer(true, true))).as_deref(),
            Some("viewer · input granted · paused: this link cannot carry the stream")
        );
        assert_eq!(
            NetStatus::title_words(&st(false, viewer(false, false))).as_deref(),
            Some("viewer")
        );
    }
}
