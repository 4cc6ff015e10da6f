//! Pairing and its persistence: the host's identity and allowlist from the state directory
//! (or memory), re-read when `untether pair` changes them while the host runs, and what the
//! session reports (access requests, PIN pairings, wrong PINs) written back. Roles too: the
//! input grants and the control hand-over (`untether pair grant`, `untether pair control`) are
//! re-read the same way, and the connected clients are written to `clients.json` for
//! `untether pair` to show. The controller is written down as it changes, so that a restarted
//! host holds control for it a while ([`CONTROL_HOLD_US`]).

use untether_proto::{
    fingerprint, AccessPolicy, HostConfig, HostSession, Micros, PairingEvent, PairingPin, PublicKey,
};

use super::error::HostError;
use super::shared::HostShared;
use crate::config::HostToml;
use crate::identity::{
    key_hex, unix_now, Access, ClientsFile, ConnectedClient, HostTrust, IdentityError, Role,
    StateDir,
};

/// The host's side of identities and pairing: the state directory it polls, and what it last
/// read from there.
pub(crate) struct Pairing {
    pub dir: Option<StateDir>,
    pub access: Access,
    stamp: [Option<std::time::SystemTime>; 6],
    next_poll_us: Micros,
    allowed: std::collections::HashSet<PublicKey>,
    revoked: std::collections::HashSet<PublicKey>,
    /// The PIN the session accepts (to show the user).
    pub pin: Option<String>,
    /// Fingerprints of clients that paired with a PIN during this run.
    pub paired: Vec<String>,
    /// Viewers granted input, and the client control was handed to, as last read.
    granted: std::collections::HashSet<PublicKey>,
    control: Option<PublicKey>,
    /// The native controller as last written to `last_controller.json`.
    controller: Option<(untether_proto::ClientId, PublicKey)>,
    /// `clients.json` could not be written (said once).
    clients_warned: bool,
}

/// How long a restarted host keeps control for the controller of its last run: the clients
/// retry within a second or two of the host coming back; one that is not back by then may
/// have gone, and the longest-connected client takes over.
pub(crate) const CONTROL_HOLD_US: Micros = 10_000_000;

/// How often the state directory is polled for changes (a few file times; a quarter second
/// lets a client waiting for approval in well within a second of `untether pair approve`).
const PAIRING_POLL_US: Micros = 250_000;

/// Loads the host's identity and allowlist, and prepares the pairing state.
pub(crate) fn host_security(
    host: &HostToml,
    trust: &HostTrust,
    cfg: &mut HostConfig,
) -> Result<Pairing, HostError> {
    let mut pairing = Pairing {
        dir: None,
        access: Access::Allowlist,
        stamp: [None; 6],
        next_poll_us: 0,
        allowed: Default::default(),
        revoked: Default::default(),
        pin: None,
        paired: Vec::new(),
        granted: Default::default(),
        control: None,
        controller: None,
        clients_warned: false,
    };
    match trust {
        HostTrust::Stored => {
            let access = host.access;
            let explicit =
                (!host.state_dir.is_empty()).then(|| std::path::Path::new(&host.state_dir));
            let dir = StateDir::resolve(explicit)?;
            cfg.identity = dir.load_or_create_identity(Role::Host)?;
            pairing.access = access;
            for e in dir.allowed()? {
                if let Some(k) = e.public_key() {
                    pairing.allowed.insert(k);
                }
            }
            for e in dir.revoked()? {
                if let Some(k) = e.public_key() {
                    pairing.revoked.insert(k);
                }
            }
            cfg.allowed_clients = pairing.allowed.iter().copied().collect();
            cfg.revoked_clients = pairing.revoked.iter().copied().collect();
            if access == Access::Pin {
                // The session picks it up from the file at the first poll.
                let pin = dir.create_pin(host.pin_ttl_s, 3)?;
                pairing.pin = Some(pin.pin);
            }
            pairing.dir = Some(dir);
        }
        HostTrust::Memory {
            identity,
            access,
            allowed,
        } => {
            cfg.identity = identity.clone();
            cfg.allowed_clients = allowed.clone();
            pairing.access = *access;
            pairing.allowed = allowed.iter().copied().collect();
            if *access == Access::Pin {
                pairing.pin = Some(crate::identity::random_pin()?);
            }
        }
    }
    cfg.access = match pairing.access {
        Access::Open => AccessPolicy::Open,
        Access::Allowlist | Access::Pin => AccessPolicy::Allowlist,
    };
    Ok(pairing)
}

impl Pairing {
    /// When the state directory is next polled (None: nothing to poll).
    pub fn next_poll(&self) -> Option<Micros> {
        self.dir.as_ref().map(|_| self.next_poll_us)
    }

    /// Re-reads the allowlist, the revoked list, the PIN file and the pending requests if they
    /// changed.
    pub fn poll(&mut self, session: &mut HostSession, now: Micros) {
        if now < self.next_poll_us {
            return;
        }
        self.next_poll_us = now + PAIRING_POLL_US;
        let Some(dir) = self.dir.clone() else {
            return;
        };
        let stamp = dir.stamp();
        if stamp == self.stamp {
            return;
        }
        let old = std::mem::replace(&mut self.stamp, stamp);
        if stamp[0] != old[0] || stamp[1] != old[1] {
            let keys = |r: Result<Vec<crate::identity::KeyEntry>, IdentityError>| {
                r.map(|v| {
                    v.iter()
                        .filter_map(|e| e.public_key())
                        .collect::<std::collections::HashSet<_>>()
                })
            };
            match (keys(dir.allowed()), keys(dir.revoked())) {
                (Ok(allowed), Ok(revoked)) => {
                    for k in allowed.difference(&self.allowed) {
                        log::info!("host: {} is now allowed", fingerprint(k));
                        session.allow_client(*k);
                    }
                    for k in self.allowed.difference(&allowed) {
                        // Taken off the allowlist: refused from now on (a connected client
                        // is disconnected).
                        log::info!("host: {} is no longer allowed", fingerprint(k));
                        session.revoke_client(now, *k);
                    }
                    for k in revoked.difference(&self.revoked) {
                        if !allowed.contains(k) {
                            session.revoke_client(now, *k);
                        }
                    }
                    self.allowed = allowed;
                    self.revoked = revoked;
                }
                (Err(e), _) | (_, Err(e)) => {
                    log::warn!("host: cannot re-read the allowlist: {e}; keeping the old one")
                }
            }
        }
        if stamp[3] != old[3] {
            // `untether pair deny` (or approve) took requests off the file: forget them here
            // too, so they no longer hold places in the session's bounded list.
            match dir.pending() {
                Ok(pending) => {
                    let on_disk: std::collections::HashSet<String> =
                        pending.into_iter().map(|p| p.key).collect();
                    let gone: Vec<PublicKey> = session
                        .access_requests()
                        .map(|r| r.key)
                        .filter(|k| !on_disk.contains(&crate::identity::key_hex(k)))
                        .collect();
                    for k in gone {
                        session.deny_request(&k);
                    }
                }
                Err(e) => log::warn!("host: cannot re-read the pending requests: {e}"),
            }
        }
        if stamp[4] != old[4] {
            match dir.input_grants() {
                Ok(entries) => {
                    let granted: std::collections::HashSet<PublicKey> =
                        entries.iter().filter_map(|e| e.public_key()).collect();
                    for k in granted.difference(&self.granted) {
                        log::info!("host: {} may send input as a viewer", fingerprint(k));
                        session.grant_input(now, *k);
                    }
                    for k in self.granted.difference(&granted) {
                        log::info!("host: {}'s input grant was taken back", fingerprint(k));
                        session.revoke_input_grant(now, k);
                    }
                    self.granted = granted;
                }
                Err(e) => log::warn!("host: cannot re-read the input grants: {e}"),
            }
        }
        if stamp[5] != old[5] {
            match dir.control() {
                Ok(entry) => {
                    let key = entry.and_then(|e| e.public_key());
                    if key != self.control {
                        match &key {
                            Some(k) => log::info!(
                                "host: control handed to {} (it controls whenever connected)",
                                fingerprint(k)
                            ),
                            None => log::info!("host: control hand-over released"),
                        }
                        session.set_preferred_controller(now, key);
                        self.control = key;
                    }
                }
                Err(e) => log::warn!("host: cannot re-read the control hand-over: {e}"),
            }
        }
        if stamp[2] != old[2] {
            match dir.current_pin() {
                Ok(Some(pf)) => {
                    let same = session
                        .pin()
                        .is_some_and(|p| p.pin == pf.pin && p.attempts_left == pf.attempts_left);
                    if !same {
                        let ttl = pf.expires.saturating_sub(unix_now());
                        session.set_pin(Some(PairingPin {
                            pin: pf.pin.clone(),
                            expires_us: now + ttl * 1_000_000,
                            attempts_left: pf.attempts_left,
                        }));
                        log::info!("host: a pairing PIN is active for {ttl} s");
                    }
                    self.pin = Some(pf.pin);
                }
                Ok(None) => {
                    if session.pin().is_some() {
                        session.set_pin(None);
                    }
                    self.pin = None;
                }
                Err(e) => log::warn!("host: cannot read the pairing PIN: {e}"),
            }
        }
    }

    /// The host starts: control is held for the controller of its last run
    /// ([`CONTROL_HOLD_US`]), so that the clients reconnecting in any order find their roles.
    pub fn hold_last_controller(&mut self, session: &mut HostSession, now: Micros) {
        let Some(dir) = &self.dir else {
            return;
        };
        match dir.last_controller() {
            Ok(Some(e)) => {
                if let Some(k) = e.public_key() {
                    log::info!(
                        "host: control is kept for {} ({}), the controller when the host last \
                         ran, for {} s",
                        fingerprint(&k),
                        e.name,
                        CONTROL_HOLD_US / 1_000_000
                    );
                    session.hold_control_for(now, k, now + CONTROL_HOLD_US);
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("host: cannot read the last controller: {e}"),
        }
    }

    /// A client left: one that controlled and said goodbye is not waited for by the next run.
    pub fn on_client_gone(&mut self, client: untether_proto::ClientId, bye: bool) {
        if !bye || self.controller.is_none_or(|c| c.0 != client) {
            return;
        }
        self.controller = None;
        if let Some(dir) = &self.dir {
            if let Err(e) = dir.write_last_controller(None) {
                log::warn!("host: cannot forget the last controller: {e}");
            }
        }
    }

    /// Writes the connected clients to `clients.json` (for `untether pair`), and the
    /// controller to `last_controller.json` when it changed.
    pub fn write_clients(&mut self, session: &HostSession) {
        let Some(dir) = &self.dir else {
            return;
        };
        let statuses = session.client_status();
        if let Some(c) = statuses
            .iter()
            .find(|c| c.role == untether_proto::ClientRole::Controller)
        {
            let changed = self.controller.is_none_or(|k| k.1 != c.info.key);
            // (A restarted run of the same client has a new id.)
            self.controller = Some((c.info.id, c.info.key));
            if changed {
                let e = crate::identity::KeyEntry {
                    key: key_hex(&c.info.key),
                    name: untether_proto::sanitize_peer_text(&c.info.name),
                    added: unix_now(),
                };
                if let Err(e) = dir.write_last_controller(Some(&e)) {
                    log::warn!("host: cannot write the last controller: {e}");
                }
            }
        }
        let now = unix_now();
        let clients = statuses
            .into_iter()
            .map(|c| ConnectedClient {
                key: key_hex(&c.info.key),
                fingerprint: c.info.fingerprint.clone(),
                name: untether_proto::sanitize_peer_text(&c.info.name),
                addr: c.info.addr.to_string(),
                role: c.role.name().to_string(),
                input_granted: c.input_granted,
                since: now.saturating_sub(
                    crate::clock::now_us().saturating_sub(c.info.connected_us) / 1_000_000,
                ),
            })
            .collect();
        let f = ClientsFile {
            host_pid: std::process::id(),
            updated: now,
            clients,
        };
        if let Err(e) = dir.write_connected_clients(&f) {
            if !std::mem::replace(&mut self.clients_warned, true) {
                log::warn!("host: cannot write the connected clients: {e}");
            }
        }
    }

    /// The host stops: no connected clients any more.
    pub fn clear_clients(&mut self) {
        if let Some(dir) = &self.dir {
            if let Err(e) = dir.clear_connected_clients() {
                log::warn!("host: cannot remove the connected clients' file: {e}");
            }
        }
    }

    /// Persists what the session reports (access requests, PIN pairings).
    pub fn on_event(&mut self, s: &HostShared, session: &mut HostSession, e: PairingEvent) {
        match e {
            PairingEvent::AccessRequested(mut r) => {
                // The client chose its name (already escaped by the parser; idempotent).
                r.name = untether_proto::sanitize_peer_text(&r.name);
                // The session's list is the one truth: requests it pushed out to make room
                // (the least recently asked of the busiest address) leave the file first.
                if let Some(dir) = &self.dir {
                    let live: std::collections::HashSet<String> = session
                        .access_requests()
                        .map(|q| crate::identity::key_hex(&q.key))
                        .collect();
                    if let Err(e) = dir.retain_pending(|k| live.contains(k)) {
                        log::warn!("host: cannot update the pending requests: {e}");
                    }
                }
                let recorded = match &self.dir {
                    Some(dir) => match dir.record_request(&r.key, &r.name, &r.addr.to_string()) {
                        Ok(recorded) => recorded,
                        Err(e) => {
                            log::warn!("host: cannot record the access request: {e}");
                            false
                        }
                    },
                    None => true,
                };
                if recorded {
                    // The name is the client's own claim: shown quoted (escaped), never used
                    // to approve; the fingerprint is what the user checks and types.
                    s.note(format!(
                        "access request from {} (key {}, calls itself {:?}): check the \
                         fingerprint with the client's owner, then approve with `untether pair \
                         approve {}`",
                        r.addr, r.fingerprint, r.name, r.fingerprint
                    ));
                } else {
                    // Full (or unwritable): the old requests stay, this one is not kept.
                    session.deny_request(&r.key);
                    s.note(format!(
                        "access request from {} (key {}) refused: the list of pending requests \
                         is full ({}); deny old ones with `untether pair deny FINGERPRINT`",
                        r.addr,
                        r.fingerprint,
                        crate::identity::MAX_PENDING
                    ));
                }
            }
            PairingEvent::Paired {
                key,
                fingerprint,
                name,
            } => {
                let name = untether_proto::sanitize_peer_text(&name);
                s.note(format!("paired with {name:?} ({fingerprint}) by PIN"));
                self.paired.push(fingerprint);
                self.pin = None;
                self.allowed.insert(key);
                session.set_pin(None);
                if let Some(dir) = &self.dir {
                    if let Err(e) = dir.allow(&key, &name) {
                        log::warn!("host: cannot add the paired client to the allowlist: {e}");
                    }
                    if let Err(e) = dir.clear_pin() {
                        log::warn!("host: cannot remove the used PIN: {e}");
                    }
                }
            }
            PairingEvent::PinFailed {
                addr,
                attempts_left,
            } => {
                s.note(format!(
                    "wrong PIN from {addr} ({attempts_left} attempts left)"
                ));
                if let Some(dir) = &self.dir {
                    let r = if attempts_left == 0 {
                        dir.clear_pin()
                    } else {
                        dir.update_pin_attempts(attempts_left)
                    };
                    if let Err(e) = r {
                        log::warn!("host: cannot update the PIN file: {e}");
                    }
                }
                if attempts_left == 0 {
                    self.pin = None;
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use untether_proto::{Codec, SessionParams};

    pub(crate) fn params() -> SessionParams {
        SessionParams {
            width: 64,
            height: 36,
            fps: 60,
            codec: Codec::H264,
            bitrate_kbps: 1_000,
            max_datagram: 1200,
            keepalive_ms: 2000,
            idle_timeout_ms: 30_000,
            refresh_period: 0,
        }
    }

    pub(crate) fn memory(access: Access) -> (Pairing, HostConfig) {
        let mut cfg = HostConfig::new(params());
        let trust = HostTrust::Memory {
            identity: crate::identity::ephemeral_keypair(),
            access,
            allowed: vec![[7; 32]],
        };
        let p = host_security(&HostToml::default(), &trust, &mut cfg).unwrap();
        (p, cfg)
    }

    #[test]
    fn in_memory_trust_sets_policy_allowlist_and_pin() {
        let (p, cfg) = memory(Access::Pin);
        assert_eq!(cfg.access, AccessPolicy::Allowlist);
        assert_eq!(cfg.allowed_clients, vec![[7; 32]]);
        assert!(p.pin.is_some());
        assert!(p.dir.is_none() && p.next_poll().is_none());
        let (p, cfg) = memory(Access::Open);
        assert_eq!(cfg.access, AccessPolicy::Open);
        assert!(p.pin.is_none());
    }

    #[test]
    fn a_pin_pairing_allows_the_key_and_uses_the_pin_up() {
        let (mut p, cfg) = memory(Access::Pin);
        let mut session = HostSession::new(cfg);
        let shared = HostShared::new((0, 0));
        let key: PublicKey = crate::identity::ephemeral_keypair().public;
        p.on_event(
            &shared,
            &mut session,
            PairingEvent::Paired {
                key,
                fingerprint: fingerprint(&key),
                name: "headset".into(),
            },
        );
        assert!(p.allowed.contains(&key));
        assert_eq!(p.paired, vec![fingerprint(&key)]);
        assert!(p.pin.is_none() && session.pin().is_none());
        assert!(shared.events()[0].contains("paired with \"headset\""));
    }

    #[test]
    fn the_last_wrong_pin_clears_it() {
        let (mut p, cfg) = memory(Access::Pin);
        let mut session = HostSession::new(cfg);
        let shared = HostShared::new((0, 0));
        let addr = "127.0.0.1:9".parse().unwrap();
        p.on_event(
            &shared,
            &mut session,
            PairingEvent::PinFailed {
                addr,
                attempts_left: 1,
            },
        );
        assert!(p.pin.is_some());
        p.on_event(
            &shared,
            &mut session,
            PairingEvent::PinFailed {
                addr,
                attempts_left: 0,
            },
        );
        assert!(p.pin.is_none());
    }
}
