//! The browsers' side of the roles. The protocol session alone decides who controls, for every
//! kind of receiver (`HostSession::attach_receiver_as` / `role_of` / `input_applies`: the one
//! authority, shared with our own clients); the browser layer asks it and keeps only what is
//! its own: how the controlling browser's input is numbered (the scene counts input per
//! controller epoch, from 0, and the page numbers every event it sends).

use untether_proto::{ClientId, ClientRole};

/// The role's name for the page: "controller", or "viewer" for every other browser (and one
/// the session no longer knows).
pub(super) fn role_name(role: Option<ClientRole>) -> &'static str {
    match role {
        Some(ClientRole::Controller) => "controller",
        _ => "viewer",
    }
}

/// The numbering of the controlling browser's input: the browser it counts for, the
/// controller epoch it counts in, the next sequence number.
#[derive(Debug, Default)]
pub(super) struct InputNumbering {
    of: Option<ClientId>,
    epoch: u64,
    seq: u32,
}

impl InputNumbering {
    /// The session made browser `id` the controller, in the new controller epoch `epoch`:
    /// its input is counted from 0.
    pub fn start(&mut self, id: ClientId, epoch: u64) {
        *self = InputNumbering {
            of: Some(id),
            epoch,
            seq: 0,
        };
    }

    /// The epoch the numbering counts in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sequence number of the next input event of browser `id`, which the session says
    /// controls now, under the driver's current `epoch`. Another browser than the one counted
    /// for, or another epoch (one of our clients came and went), counts from 0 again.
    pub fn number(&mut self, id: ClientId, epoch: u64) -> u32 {
        if self.of != Some(id) || self.epoch != epoch {
            self.start(id, epoch);
        }
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        seq
    }

    /// A message the controlling browser `id` numbered but the host ignores: counted too.
    pub fn skip(&mut self, id: ClientId) {
        if self.of == Some(id) {
            self.seq = self.seq.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_controller_numbers_from_zero_and_a_new_epoch_starts_again() {
        let mut n = InputNumbering::default();
        n.start(ClientId(7), 5);
        assert_eq!(n.epoch(), 5);
        assert_eq!(n.number(ClientId(7), 5), 0);
        n.skip(ClientId(7));
        n.skip(ClientId(8)); // not the one counted for: no effect
        assert_eq!(n.number(ClientId(7), 5), 2);
        // Another epoch (a client came and went): from 0 again.
        assert_eq!(n.number(ClientId(7), 9), 0);
        assert_eq!(n.epoch(), 9);
        // Another browser the session made the controller: from 0 in its epoch.
        n.start(ClientId(8), 10);
        assert_eq!(n.number(ClientId(8), 10), 0);
        assert_eq!(n.number(ClientId(8), 10), 1);
    }

    #[test]
    fn the_page_is_told_controller_only_for_the_controller() {
        assert_eq!(role_name(Some(ClientRole::Controller)), "controller");
        assert_eq!(role_name(Some(ClientRole::Viewer)), "viewer");
        assert_eq!(role_name(None), "viewer");
    }
}
