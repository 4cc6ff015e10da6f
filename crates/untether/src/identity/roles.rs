//! Roles on disk, for a host serving several clients: the viewers granted input
//! (`input_grants.json`), the client control was handed to (`control.json`), both written by
//! `untether pair` and re-read by the running host, and the clients connected now
//! (`clients.json`), written by the running host so that `untether pair` can show them and name
//! them in `grant` and `control` (a client of an `--access open` host is on no allowlist).

use super::*;

/// Viewers whose input the host applies.
pub const GRANTS_FILE: &str = "input_grants.json";
/// The client that controls whenever it is connected.
pub const CONTROL_FILE: &str = "control.json";
/// The clients connected to the running host.
pub const CLIENTS_FILE: &str = "clients.json";
/// The client that controlled last (kept across host restarts; gone when it left with a bye).
pub const LAST_CONTROLLER_FILE: &str = "last_controller.json";

/// One client connected to the running host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectedClient {
    /// The public key, 64 hex digits.
    pub key: String,
    pub fingerprint: String,
    /// The name it gave itself (escaped).
    pub name: String,
    pub addr: String,
    /// `controller` or `viewer`.
    pub role: String,
    pub input_granted: bool,
    /// Unix seconds.
    pub since: u64,
}

/// What the running host wrote about its clients.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientsFile {
    /// The host process (a file whose process is gone is stale).
    pub host_pid: u32,
    /// Unix seconds.
    pub updated: u64,
    pub clients: Vec<ConnectedClient>,
}

impl ClientsFile {
    /// Whether the host that wrote it still runs.
    pub fn is_live(&self) -> bool {
        self.host_pid != 0 && Path::new(&format!("/proc/{}", self.host_pid)).exists()
    }
}

impl StateDir {
    /// The viewers granted input.
    pub fn input_grants(&self) -> Result<Vec<KeyEntry>> {
        Ok(self
            .read_json::<Vec<KeyEntry>>(GRANTS_FILE)?
            .unwrap_or_default())
    }

    /// The clients connected to the running host (None: no host wrote the file, or it has
    /// stopped).
    pub fn connected_clients(&self) -> Result<Option<ClientsFile>> {
        Ok(self
            .read_json::<ClientsFile>(CLIENTS_FILE)?
            .filter(ClientsFile::is_live))
    }

    /// The running host: its clients now.
    pub fn write_connected_clients(&self, f: &ClientsFile) -> Result<()> {
        self.write_json(CLIENTS_FILE, f)
    }

    /// The running host stops: it has no clients.
    pub fn clear_connected_clients(&self) -> Result<()> {
        remove(&self.file(CLIENTS_FILE))
    }

    /// A client named by fingerprint (8 or more of its characters, matching one) or hex key,
    /// as approve takes them (never by its name: the client chose it), among the allowed
    /// clients and the clients connected now.
    pub fn find_client(&self, query: &str) -> Result<KeyEntry> {
        let mut known = self.allowed()?;
        if let Some(f) = self.connected_clients()? {
            for c in f.clients {
                if !known.iter().any(|e| e.key == c.key) {
                    known.push(KeyEntry {
                        key: c.key,
                        name: c.name,
                        added: c.since,
                    });
                }
            }
        }
        let keys: Vec<&str> = known.iter().map(|e| e.key.as_str()).collect();
        let names: Vec<&str> = known.iter().map(|e| e.name.as_str()).collect();
        let i = super::resolve::resolve(query, "client", &keys, &names).map_err(|e| match e {
            IdentityError::NotFound(q) => IdentityError::Invalid(format!(
                "no allowed or connected client matches {q:?} (`untether pair` lists them)"
            )),
            e => e,
        })?;
        Ok(known.swap_remove(i))
    }

    /// Grants a client input (its events are applied while it is a viewer).
    pub fn grant_input(&self, query: &str) -> Result<KeyEntry> {
        let mut e = self.find_client(query)?;
        let mut grants = self.input_grants()?;
        if let Some(g) = grants.iter().find(|g| g.key == e.key) {
            return Ok(g.clone());
        }
        if grants.len() >= MAX_ENTRIES {
            return Err(IdentityError::Invalid(format!(
                "{MAX_ENTRIES} clients are granted input already: revoke some grants first"
            )));
        }
        e.added = unix_now();
        grants.push(e.clone());
        self.write_json(GRANTS_FILE, &grants)?;
        Ok(e)
    }

    /// Takes a client's input grant back (by fingerprint or hex key among the grants, as
    /// approve takes them).
    pub fn revoke_input_grant(&self, query: &str) -> Result<KeyEntry> {
        let mut grants = self.input_grants()?;
        let keys: Vec<&str> = grants.iter().map(|e| e.key.as_str()).collect();
        let names: Vec<&str> = grants.iter().map(|e| e.name.as_str()).collect();
        let i = super::resolve::resolve(query, "client", &keys, &names)?;
        let e = grants.remove(i);
        self.write_json(GRANTS_FILE, &grants)?;
        Ok(e)
    }

    /// The client control was handed to, if any.
    pub fn control(&self) -> Result<Option<KeyEntry>> {
        self.read_json::<KeyEntry>(CONTROL_FILE)
    }

    /// Hands control to a client (allowed or connected): the running host makes it the
    /// controller whenever it is connected.
    pub fn hand_control(&self, query: &str) -> Result<KeyEntry> {
        let mut e = self.find_client(query)?;
        e.added = unix_now();
        self.write_json(CONTROL_FILE, &e)?;
        Ok(e)
    }

    /// The client that controlled when the host last ran (None: none, or it said goodbye).
    pub fn last_controller(&self) -> Result<Option<KeyEntry>> {
        self.read_json::<KeyEntry>(LAST_CONTROLLER_FILE)
    }

    /// The running host: this client controls now (None: the controller left for good).
    pub fn write_last_controller(&self, e: Option<&KeyEntry>) -> Result<()> {
        match e {
            Some(e) => self.write_json(LAST_CONTROLLER_FILE, e),
            None => remove(&self.file(LAST_CONTROLLER_FILE)),
        }
    }

    /// Forgets the hand-over: the running host keeps its current controller, and picks the
    /// longest-connected client when it leaves.
    pub fn release_control(&self) -> Result<Option<KeyEntry>> {
        let e = self.control()?;
        remove(&self.file(CONTROL_FILE))?;
        Ok(e)
    }
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> StateDir {
        let p = std::env::temp_dir().join(format!("untether-roles-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        StateDir::at(p)
    }

    #[test]
    fn grants_and_control_name_allowed_or_connected_clients() {
        let d = dir("grants");
        d.allow(&[3; 32], "headset").unwrap();
        // Not known at all: a clear error.
        let e = d.grant_input(&fingerprint(&[9; 32])).unwrap_err();
        assert!(
            e.to_string().contains("no allowed or connected client"),
            "{e}"
        );
        // A client of an open host, known only as connected.
        d.write_connected_clients(&ClientsFile {
            host_pid: std::process::id(),
            updated: unix_now(),
            clients: vec![ConnectedClient {
                key: key_hex(&[9; 32]),
                fingerprint: fingerprint(&[9; 32]),
                name: "laptop".into(),
                addr: "10.0.0.9:4000".into(),
                role: "viewer".into(),
                input_granted: false,
                since: unix_now(),
            }],
        })
        .unwrap();
        let before = d.stamp();
        let g = d.grant_input(&fingerprint(&[9; 32])[..9]).unwrap();
        assert_eq!(g.name, "laptop");
        // Never by the name a client chose, nor by 4 characters: as approve.
        for wrong in ["headset", "laptop", &fingerprint(&[3; 32])[..4]] {
            let e = d.grant_input(wrong).unwrap_err().to_string();
            assert!(e.contains("fingerprint"), "{wrong}: {e}");
            let e = d.hand_control(wrong).unwrap_err().to_string();
            assert!(e.contains("fingerprint"), "{wrong}: {e}");
        }
        assert_eq!(d.input_grants().unwrap().len(), 1);
        assert!(d.control().unwrap().is_none());
        assert_eq!(d.grant_input(&key_hex(&[3; 32])).unwrap().name, "headset");
        assert_eq!(d.input_grants().unwrap().len(), 2);
        // Granting twice keeps one entry.
        d.grant_input(&fingerprint(&[9; 32])).unwrap();
        assert_eq!(d.input_grants().unwrap().len(), 2);
        assert_ne!(d.stamp(), before, "the running host sees the change");
        assert!(d.revoke_input_grant("laptop").is_err());
        let laptop = fingerprint(&[9; 32]);
        assert_eq!(
            d.revoke_input_grant(&laptop[..9]).unwrap().key,
            key_hex(&[9; 32])
        );
        assert_eq!(d.input_grants().unwrap().len(), 1);
        assert!(d.revoke_input_grant(&laptop).is_err());
        // Control.
        assert!(d.control().unwrap().is_none());
        let headset = fingerprint(&[3; 32]);
        assert_eq!(
            d.hand_control(&headset[..9]).unwrap().key,
            key_hex(&[3; 32])
        );
        assert_eq!(d.control().unwrap().map(|e| e.name), Some("headset".into()));
        assert!(d.release_control().unwrap().is_some());
        assert!(d.control().unwrap().is_none());
        // A host that is gone leaves a stale file: not a connected client any more.
        d.write_connected_clients(&ClientsFile {
            host_pid: u32::MAX - 1,
            ..Default::default()
        })
        .unwrap();
        assert!(d.connected_clients().unwrap().is_none());
        d.clear_connected_clients().unwrap();
        let _ = fs::remove_dir_all(d.path());
    }
}
