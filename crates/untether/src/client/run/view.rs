//! What other threads read while the run goes on, published by its owner: a small snapshot put
//! into a [`Published`] cell (latest wins; a reader gets a copy and never holds the owner's
//! state).

use std::sync::Mutex;

use untether_proto::ClientRole;

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
}
