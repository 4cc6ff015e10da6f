//! The browsers' side of the roles: the protocol session decides who controls, for every kind
//! of receiver (`HostSession::attach_receiver` / `role_of`: the one authority, shared with our
//! own clients); this keeps what the browser layer needs of its decision — which browser is
//! the controller now, and how that browser's input is numbered (the scene counts input per
//! controller epoch, from 0).

use untether_proto::ClientId;

/// The controller's role name for the page.
pub(super) const CONTROLLER: &str = "controller";
/// Every other browser's.
pub(super) const VIEWER: &str = "viewer";

/// The browser the session made the controller (if any) and the numbering of its input.
#[derive(Debug, Default)]
pub(super) struct BrowserControl {
    controller: Option<ClientId>,
    seq: u32,
    epoch: u64,
}

/// What the numbering says about one input message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Numbered {
    /// Deliver it with this sequence number.
    Deliver(u32),
    /// A viewer's: dropped.
    Dropped,
}

impl BrowserControl {
    /// The session made browser `id` the controller (`controls`) or a viewer. A new
    /// controller starts a new epoch (`new_epoch` makes it) and counts its input from 0; true
    /// when the controller changed.
    pub fn set(&mut self, id: ClientId, controls: bool, new_epoch: impl FnOnce() -> u64) -> bool {
        match (controls, self.controller == Some(id)) {
            (true, false) => {
                self.controller = Some(id);
                self.epoch = new_epoch();
                self.seq = 0;
                true
            }
            (false, true) => {
                self.controller = None;
                true
            }
            _ => false,
        }
    }

    /// The epoch the current controller's input is counted in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The role the page of browser `id` is told.
    pub fn role_of(&self, id: ClientId) -> &'static str {
        if Some(id) == self.controller {
            CONTROLLER
        } else {
            VIEWER
        }
    }

    /// Numbers an input event of browser `id` under the driver's current `epoch`.
    pub fn number(&mut self, id: ClientId, epoch: u64) -> Numbered {
        if Some(id) != self.controller {
            return Numbered::Dropped;
        }
        if self.epoch != epoch {
            // A new epoch (one of our clients came and went): count from 0 again.
            self.epoch = epoch;
            self.seq = 0;
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        Numbered::Deliver(seq)
    }

    /// A message the page numbered but the host ignores: counted by the controller's
    /// numbering too.
    pub fn skip(&mut self, id: ClientId) {
        if Some(id) == self.controller {
            self.seq = self.seq.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_controller_starts_an_epoch_and_numbers_from_zero() {
        let mut r = BrowserControl::default();
        assert!(r.set(ClientId(7), true, || 5));
        assert!(!r.set(ClientId(7), true, || 6), "no change, no new epoch");
        assert!(!r.set(ClientId(8), false, || 6));
        assert_eq!(r.epoch(), 5);
        assert_eq!(r.role_of(ClientId(7)), CONTROLLER);
        assert_eq!(r.role_of(ClientId(8)), VIEWER);
        assert_eq!(r.number(ClientId(7), 5), Numbered::Deliver(0));
        r.skip(ClientId(7));
        assert_eq!(r.number(ClientId(7), 5), Numbered::Deliver(2));
        assert_eq!(r.number(ClientId(8), 5), Numbered::Dropped);
        // Another epoch (a client came and went): from 0 again.
        assert_eq!(r.number(ClientId(7), 9), Numbered::Deliver(0));
        // The session made it a viewer (one of our clients connected): nobody controls here.
        assert!(r.set(ClientId(7), false, || 10));
        assert_eq!(r.role_of(ClientId(7)), VIEWER);
        assert_eq!(r.number(ClientId(7), 10), Numbered::Dropped);
    }
}
