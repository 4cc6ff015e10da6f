//! The protocol session as the browser layer sees it while admitting: the host's pairing PIN
//! as a browser's credential (the PIN lives in the session) and the admitted browser's id.

use untether_proto::{ClientId, Micros};

use super::access::{self, SessionAccess};
use crate::host::shared::HostShared;

/// The protocol session for the browser layer: its PIN is a browser's credential too (as for
/// our own clients; a right one is used up, a wrong one counts against its attempts), and its
/// one id space names the browsers.
pub(crate) struct SessionLink<'a> {
    pub session: &'a mut untether_proto::HostSession,
    pub pairing: &'a mut crate::host::pairing::Pairing,
    pub shared: &'a HostShared,
}

impl SessionAccess for SessionLink<'_> {
    fn new_receiver_id(&mut self) -> ClientId {
        self.session.new_receiver_id()
    }

    fn try_pin(&mut self, now: Micros, pin: &str) -> Result<(), Option<u32>> {
        let Some(live) = self.session.pin().cloned() else {
            return Err(None);
        };
        if now >= live.expires_us || live.attempts_left == 0 {
            return Err(None);
        }
        let dir = self.pairing.dir.clone();
        if access::ct_eq(&live.pin, pin) {
            self.session.set_pin(None);
            self.pairing.pin = None;
            if let Some(dir) = &dir {
                if let Err(e) = dir.clear_pin() {
                    log::warn!("host: cannot remove the used PIN: {e}");
                }
            }
            self.shared
                .note("a browser was admitted with the pairing PIN (now used up)".into());
            return Ok(());
        }
        let left = live.attempts_left - 1;
        self.shared
            .note(format!("wrong PIN from a browser ({left} attempts left)"));
        if left == 0 {
            self.session.set_pin(None);
            self.pairing.pin = None;
        } else {
            self.session.set_pin(Some(untether_proto::PairingPin {
                attempts_left: left,
                ..live
            }));
        }
        if let Some(dir) = &dir {
            let r = if left == 0 {
                dir.clear_pin()
            } else {
                dir.update_pin_attempts(left)
            };
            if let Err(e) = r {
                log::warn!("host: cannot update the PIN file: {e}");
            }
        }
        Err(Some(left))
    }
}
