//! The browsers' roles: which browser's input drives the host, and how its input is numbered.
//!
//! **Controller election** is [`elect_controller`], one small pure function: none while one of
//! our own clients is connected, else the current controller while it stays connected, else
//! the oldest connected browser with an input channel. It is the one boundary to replace with
//! the protocol session's role authority (`HostSession::role_of(id)` / attach_receiver);
//! [`Roles`] only keeps its result and the input numbering that goes with it.

/// A browser as the election sees it (in admission order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Candidate {
    pub id: u64,
    pub connected: bool,
    pub has_input: bool,
}

/// THE controller election (see the module's comment): who, among the browsers, controls
/// the host now, given who did until now.
pub(super) fn elect_controller(
    current: Option<u64>,
    native_client: bool,
    browsers: &[Candidate],
) -> Option<u64> {
    if native_client {
        return None;
    }
    current
        .filter(|id| browsers.iter().any(|b| b.id == *id && b.connected))
        .or_else(|| {
            browsers
                .iter()
                .find(|b| b.connected && b.has_input)
                .map(|b| b.id)
        })
}

/// The controller's role name for the page.
pub(super) const CONTROLLER: &str = "controller";
/// Every other browser's.
pub(super) const VIEWER: &str = "viewer";

/// The elected controller and the numbering of its input (the scene counts input per epoch,
/// from 0).
#[derive(Debug, Default)]
pub(super) struct Roles {
    controller: Option<u64>,
    seq: u32,
    epoch: u64,
}

/// What the numbering says about one input message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Numbered {
    /// Deliver it with this sequence number.
    Deliver(u32),
    /// A viewer's (or any browser's while one of our clients is connected): dropped.
    Dropped,
}

impl Roles {
    /// Runs the election; on a change returns the new controller (None: every browser is a
    /// viewer now). A new controller starts a new epoch (`new_epoch` makes it) and counts its
    /// input from 0.
    pub fn update(
        &mut self,
        native_client: bool,
        browsers: &[Candidate],
        new_epoch: impl FnOnce() -> u64,
    ) -> Option<Option<u64>> {
        let wanted = elect_controller(self.controller, native_client, browsers);
        if wanted == self.controller {
            return None;
        }
        self.controller = wanted;
        if wanted.is_some() {
            self.epoch = new_epoch();
            self.seq = 0;
        }
        Some(wanted)
    }

    /// The epoch the current controller's input is counted in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The role the page of browser `id` is told.
    pub fn role_of(&self, id: u64) -> &'static str {
        if Some(id) == self.controller {
            CONTROLLER
        } else {
            VIEWER
        }
    }

    /// Numbers an input event of browser `id` under the driver's current `epoch`.
    pub fn number(&mut self, id: u64, native_client: bool, epoch: u64) -> Numbered {
        if native_client || Some(id) != self.controller {
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
    pub fn skip(&mut self, id: u64, native_client: bool) {
        if Some(id) == self.controller && !native_client {
            self.seq = self.seq.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, connected: bool, has_input: bool) -> Candidate {
        Candidate {
            id,
            connected,
            has_input,
        }
    }

    #[test]
    fn the_oldest_connected_browser_with_input_is_elected_and_kept() {
        let b = [
            c(1, false, true),
            c(2, true, false),
            c(3, true, true),
            c(4, true, true),
        ];
        assert_eq!(elect_controller(None, false, &b), Some(3));
        // The current controller stays while connected, even if an older one connects.
        let b2 = [c(1, true, true), c(3, true, true)];
        assert_eq!(elect_controller(Some(3), false, &b2), Some(3));
        // Gone: the next one.
        assert_eq!(elect_controller(Some(9), false, &b2), Some(1));
        // One of our clients is connected: no browser controls.
        assert_eq!(elect_controller(Some(3), true, &b2), None);
    }

    #[test]
    fn a_new_controller_starts_an_epoch_and_numbers_from_zero() {
        let mut r = Roles::default();
        let b = [c(7, true, true), c(8, true, true)];
        assert_eq!(r.update(false, &b, || 5), Some(Some(7)));
        assert_eq!(r.update(false, &b, || 6), None);
        assert_eq!(r.role_of(7), CONTROLLER);
        assert_eq!(r.role_of(8), VIEWER);
        assert_eq!(r.number(7, false, 5), Numbered::Deliver(0));
        r.skip(7, false);
        assert_eq!(r.number(7, false, 5), Numbered::Deliver(2));
        assert_eq!(r.number(8, false, 5), Numbered::Dropped);
        assert_eq!(r.number(7, true, 5), Numbered::Dropped);
        // Another epoch (a client came and went): from 0 again.
        assert_eq!(r.number(7, false, 9), Numbered::Deliver(0));
        // A native client connects: nobody controls.
        assert_eq!(r.update(true, &b, || 10), Some(None));
        assert_eq!(r.role_of(7), VIEWER);
    }
}
