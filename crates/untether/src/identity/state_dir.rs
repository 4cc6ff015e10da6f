//! The state directory: the key pair, the allowlist, revoked keys, pending access requests,
//! the pairing PIN and known hosts, as small JSON files written atomically.

use super::*;

/// The state directory (keys, allowlist, requests, known hosts) and the files in it.
#[derive(Clone, Debug)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// An explicit directory.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        StateDir { path: path.into() }
    }

    /// `explicit` (if not empty), else `$UNTETHER_STATE_DIR`, else `$XDG_STATE_HOME/untether`,
    /// else `~/.local/state/untether`.
    pub fn resolve(explicit: Option<&Path>) -> Result<Self> {
        if let Some(p) = explicit.filter(|p| !p.as_os_str().is_empty()) {
            return Ok(Self::at(p));
        }
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(p) = env("UNTETHER_STATE_DIR") {
            return Ok(Self::at(PathBuf::from(p)));
        }
        if let Some(p) = env("XDG_STATE_HOME") {
            return Ok(Self::at(PathBuf::from(p).join("untether")));
        }
        match env("HOME") {
            Some(h) => Ok(Self::at(
                PathBuf::from(h)
                    .join(".local")
                    .join("state")
                    .join("untether"),
            )),
            None => Err(IdentityError::NoStateDir),
        }
    }

    /// The path of one of the files in the table above.
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.file(name)
    }

    /// Modification times of the allowlist, the revoked list and the PIN file: the running
    /// host polls this and re-reads what changed.
    pub fn stamp(&self) -> [Option<SystemTime>; 3] {
        let m = |n: &str| fs::metadata(self.file(n)).and_then(|m| m.modified()).ok();
        [m(ALLOWED_FILE), m(REVOKED_FILE), m(PIN_FILE)]
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn ensure_dir(&self) -> Result<()> {
        fs::create_dir_all(&self.path).map_err(io_err(&self.path))?;
        fs::set_permissions(&self.path, fs::Permissions::from_mode(0o700))
            .map_err(io_err(&self.path))
    }

    /// Writes a file atomically with mode 0600.
    fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.ensure_dir()?;
        let path = self.file(name);
        let tmp = self.file(&format!(".{name}.tmp"));
        {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io_err(&tmp))?;
            // The mode above applies only to a new file: enforce it on an old one too.
            f.set_permissions(fs::Permissions::from_mode(0o600))
                .map_err(io_err(&tmp))?;
            f.write_all(bytes).map_err(io_err(&tmp))?;
            f.sync_all().map_err(io_err(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io_err(&path))
    }

    /// Reads a file; None if it does not exist.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let path = self.file(name);
        match fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
            Ok(m) if m.len() > MAX_FILE_BYTES => {
                return Err(IdentityError::Corrupt {
                    path,
                    reason: "larger than 1 MiB".into(),
                })
            }
            Ok(_) => {}
        }
        fs::read(&path).map(Some).map_err(io_err(&path))
    }

    fn read_json<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<Option<T>> {
        let Some(bytes) = self.read(name)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| IdentityError::Corrupt {
                path: self.file(name),
                reason: e.to_string(),
            })
    }

    fn write_json<T: Serialize>(&self, name: &str, v: &T) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(v).map_err(|e| IdentityError::Corrupt {
            path: self.file(name),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        self.write(name, &bytes)
    }

    // ---- key pairs -------------------------------------------------------------------------

    /// The key pair of `role`, generated (and stored with mode 0600) on first use.
    pub fn load_or_create_identity(&self, role: Role) -> Result<StaticKeypair> {
        let name = role.file();
        if let Some(bytes) = self.read(name)? {
            let path = self.file(name);
            let meta = fs::metadata(&path).map_err(io_err(&path))?;
            if meta.permissions().mode() & 0o077 != 0 {
                // Someone loosened it: tighten, do not refuse (the key is still ours).
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                    .map_err(io_err(&path))?;
            }
            let text = String::from_utf8_lossy(&bytes);
            let private = parse_key(&text).ok_or_else(|| IdentityError::Corrupt {
                path,
                reason: "not 64 hex digits".into(),
            })?;
            return Ok(StaticKeypair::from_private(private));
        }
        let kp = StaticKeypair::generate(&mut SessionRng::from_os());
        self.write(name, format!("{}\n", key_hex(&kp.private)).as_bytes())?;
        Ok(kp)
    }

    // ---- allowlist and revocation ---------------------------------------------------------

    /// The allowed client keys.
    pub fn allowed(&self) -> Result<Vec<KeyEntry>> {
        Ok(self
            .read_json::<Vec<KeyEntry>>(ALLOWED_FILE)?
            .unwrap_or_default())
    }

    /// The revoked client keys.
    pub fn revoked(&self) -> Result<Vec<KeyEntry>> {
        Ok(self
            .read_json::<Vec<KeyEntry>>(REVOKED_FILE)?
            .unwrap_or_default())
    }

    /// Adds a key to the allowlist (and removes it from the revoked list and the pending
    /// requests). Returns the entry.
    pub fn allow(&self, key: &PublicKey, name: &str) -> Result<KeyEntry> {
        let hex = key_hex(key);
        let mut allowed = self.allowed()?;
        let entry = match allowed.iter().find(|e| e.key == hex) {
            Some(e) => e.clone(),
            None => {
                if allowed.len() >= MAX_ENTRIES {
                    return Err(IdentityError::Invalid(format!(
                        "the allowlist is full ({MAX_ENTRIES} clients): revoke some first"
                    )));
                }
                let e = KeyEntry {
                    key: hex.clone(),
                    name: name.chars().take(64).collect(),
                    added: unix_now(),
                };
                allowed.push(e.clone());
                self.write_json(ALLOWED_FILE, &allowed)?;
                e
            }
        };
        let mut revoked = self.revoked()?;
        if revoked.iter().any(|e| e.key == hex) {
            revoked.retain(|e| e.key != hex);
            self.write_json(REVOKED_FILE, &revoked)?;
        }
        let mut pending = self.pending()?;
        if pending.iter().any(|p| p.key == hex) {
            pending.retain(|p| p.key != hex);
            self.write_json(PENDING_FILE, &pending)?;
        }
        Ok(entry)
    }

    /// Revokes an allowed client named by fingerprint (prefix) or hex key: removes it from the
    /// allowlist and records it as revoked.
    pub fn revoke(&self, query: &str) -> Result<KeyEntry> {
        let mut allowed = self.allowed()?;
        let i = find_one(query, allowed.iter().map(|e| e.key.as_str()))
            .or_else(|e| find_name(query, allowed.iter().map(|e| e.name.as_str())).ok_or(e))?;
        let mut entry = allowed.remove(i);
        self.write_json(ALLOWED_FILE, &allowed)?;
        let mut revoked = self.revoked()?;
        entry.added = unix_now();
        if !revoked.iter().any(|e| e.key == entry.key) {
            revoked.push(entry.clone());
            if revoked.len() > MAX_ENTRIES {
                revoked.remove(0);
            }
            self.write_json(REVOKED_FILE, &revoked)?;
        }
        Ok(entry)
    }

    // ---- pending requests -----------------------------------------------------------------

    /// Pending access requests, oldest first.
    pub fn pending(&self) -> Result<Vec<PendingRequest>> {
        Ok(self
            .read_json::<Vec<PendingRequest>>(PENDING_FILE)?
            .unwrap_or_default())
    }

    /// Records (or refreshes) an access request; keeps at most [`MAX_PENDING`].
    pub fn record_request(&self, key: &PublicKey, name: &str, addr: &str) -> Result<()> {
        let hex = key_hex(key);
        let now = unix_now();
        let mut pending = self.pending()?;
        match pending.iter_mut().find(|p| p.key == hex) {
            Some(p) => {
                p.last_seen = now;
                p.attempts = p.attempts.saturating_add(1);
                p.addr = addr.to_string();
            }
            None => {
                pending.push(PendingRequest {
                    key: hex,
                    fingerprint: fingerprint(key),
                    name: name.chars().take(64).collect(),
                    addr: addr.to_string(),
                    first_seen: now,
                    last_seen: now,
                    attempts: 1,
                });
                while pending.len() > MAX_PENDING {
                    pending.remove(0);
                }
            }
        }
        self.write_json(PENDING_FILE, &pending)
    }

    /// Finds a pending request by its 1-based position in [`pending`](Self::pending), its
    /// fingerprint (or a prefix of at least 4 characters) or its hex key.
    pub fn find_pending(&self, query: &str) -> Result<PendingRequest> {
        let pending = self.pending()?;
        if let Ok(n) = query.trim().parse::<usize>() {
            if n >= 1 && n <= pending.len() && query.trim().len() < 4 {
                return Ok(pending[n - 1].clone());
            }
        }
        let i = find_one(query, pending.iter().map(|p| p.key.as_str()))
            .or_else(|e| find_name(query, pending.iter().map(|p| p.name.as_str())).ok_or(e))?;
        Ok(pending[i].clone())
    }

    /// Approves a pending request: its key joins the allowlist.
    pub fn approve(&self, query: &str) -> Result<KeyEntry> {
        let req = self.find_pending(query)?;
        let key = parse_key(&req.key).ok_or_else(|| IdentityError::Corrupt {
            path: self.file(PENDING_FILE),
            reason: "a key is not 64 hex digits".into(),
        })?;
        self.allow(&key, &req.name)
    }

    /// Denies (forgets) a pending request.
    pub fn deny(&self, query: &str) -> Result<PendingRequest> {
        let req = self.find_pending(query)?;
        let mut pending = self.pending()?;
        pending.retain(|p| p.key != req.key);
        self.write_json(PENDING_FILE, &pending)?;
        Ok(req)
    }

    // ---- one-time PINs --------------------------------------------------------------------

    /// Creates a 6-digit one-time PIN valid for `ttl_secs` and `attempts` failed attempts.
    pub fn create_pin(&self, ttl_secs: u64, attempts: u32) -> Result<PinFile> {
        let pin = PinFile {
            pin: random_pin(),
            expires: unix_now() + ttl_secs,
            attempts_left: attempts.max(1),
        };
        self.write_json(PIN_FILE, &pin)?;
        Ok(pin)
    }

    /// The current PIN if it is still valid.
    pub fn current_pin(&self) -> Result<Option<PinFile>> {
        Ok(self
            .read_json::<PinFile>(PIN_FILE)?
            .filter(|p| p.expires > unix_now() && p.attempts_left > 0))
    }

    /// Records how many failed attempts the PIN still allows.
    pub fn update_pin_attempts(&self, attempts_left: u32) -> Result<()> {
        if let Some(mut p) = self.read_json::<PinFile>(PIN_FILE)? {
            p.attempts_left = attempts_left;
            self.write_json(PIN_FILE, &p)?;
        }
        Ok(())
    }

    /// Removes the PIN (used, expired, or cancelled).
    pub fn clear_pin(&self) -> Result<()> {
        let path = self.file(PIN_FILE);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(&path)(e)),
            _ => Ok(()),
        }
    }

    // ---- known hosts (client) -------------------------------------------------------------

    pub fn known_hosts(&self) -> Result<Vec<KnownHost>> {
        Ok(self
            .read_json::<Vec<KnownHost>>(KNOWN_HOSTS_FILE)?
            .unwrap_or_default())
    }

    /// The key trusted for `host`, if any.
    pub fn known_host(&self, host: &str) -> Result<Option<PublicKey>> {
        Ok(self
            .known_hosts()?
            .into_iter()
            .find(|h| h.host == host)
            .and_then(|h| parse_key(&h.key)))
    }

    /// Trusts `key` for `host` (replacing an earlier key).
    pub fn trust_host(&self, host: &str, key: &PublicKey) -> Result<()> {
        let mut hosts = self.known_hosts()?;
        hosts.retain(|h| h.host != host);
        hosts.push(KnownHost {
            host: host.to_string(),
            key: key_hex(key),
            added: unix_now(),
        });
        while hosts.len() > MAX_ENTRIES {
            hosts.remove(0);
        }
        self.write_json(KNOWN_HOSTS_FILE, &hosts)
    }
}

fn find_one<'a>(query: &str, keys: impl Iterator<Item = &'a str>) -> Result<usize> {
    let hits: Vec<usize> = keys
        .enumerate()
        .filter(|(_, k)| matches(query, k))
        .map(|(i, _)| i)
        .collect();
    match hits.as_slice() {
        [] => Err(IdentityError::NotFound(query.to_string())),
        [i] => Ok(*i),
        _ => Err(IdentityError::Ambiguous(query.to_string())),
    }
}

/// The only entry whose name is exactly `query`.
fn find_name<'a>(query: &str, names: impl Iterator<Item = &'a str>) -> Option<usize> {
    let hits: Vec<usize> = names
        .enumerate()
        .filter(|(_, n)| *n == query.trim())
        .map(|(i, _)| i)
        .collect();
    match hits.as_slice() {
        [i] => Some(*i),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> StateDir {
        let p = std::env::temp_dir().join(format!(
            "untether-identity-{tag}-{}-{}",
            std::process::id(),
            unix_now()
        ));
        let _ = fs::remove_dir_all(&p);
        StateDir::at(p)
    }

    #[test]
    fn keys_are_created_once_with_0600() {
        let d = tmp("keys");
        let a = d.load_or_create_identity(Role::Host).unwrap();
        let b = d.load_or_create_identity(Role::Host).unwrap();
        assert_eq!(a, b);
        let c = d.load_or_create_identity(Role::Client).unwrap();
        assert_ne!(a.public, c.public);
        let mode = fs::metadata(d.path().join("host.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = fs::metadata(d.path()).unwrap().permissions().mode();
        assert_eq!(dmode & 0o777, 0o700);
        fs::write(d.path().join("client.key"), "garbage").unwrap();
        assert!(matches!(
            d.load_or_create_identity(Role::Client),
            Err(IdentityError::Corrupt { .. })
        ));
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn request_approve_revoke() {
        let d = tmp("pair");
        let k1 = [1u8; 32];
        let k2 = [2u8; 32];
        d.record_request(&k1, "quest", "10.0.0.2:4000").unwrap();
        d.record_request(&k2, "pi", "10.0.0.3:4000").unwrap();
        d.record_request(&k1, "quest", "10.0.0.2:4001").unwrap();
        let p = d.pending().unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].attempts, 2);
        // By position, by fingerprint prefix (any case, with or without dashes).
        assert_eq!(d.find_pending("2").unwrap().name, "pi");
        assert_eq!(d.find_pending("pi").unwrap().key, key_hex(&k2));
        let fp = fingerprint(&k1);
        assert_eq!(
            d.find_pending(&fp[..9].to_lowercase()).unwrap().name,
            "quest"
        );
        assert!(matches!(
            d.find_pending("ZZZZZZ"),
            Err(IdentityError::NotFound(_))
        ));
        let e = d.approve(&fp).unwrap();
        assert_eq!(e.public_key(), Some(k1));
        assert_eq!(d.pending().unwrap().len(), 1);
        assert_eq!(d.allowed().unwrap().len(), 1);
        d.deny("1").unwrap();
        assert!(d.pending().unwrap().is_empty());
        let r = d.revoke(&fp).unwrap();
        assert_eq!(r.key, key_hex(&k1));
        assert!(d.allowed().unwrap().is_empty());
        assert_eq!(d.revoked().unwrap().len(), 1);
        // Re-allowing clears the revocation.
        d.allow(&k1, "quest").unwrap();
        assert!(d.revoked().unwrap().is_empty());
        let mode = fs::metadata(d.path().join(ALLOWED_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn pending_requests_are_bounded() {
        let d = tmp("bound");
        for i in 0..(MAX_PENDING as u8 + 10) {
            d.record_request(&[i; 32], "x", "a").unwrap();
        }
        let p = d.pending().unwrap();
        assert_eq!(p.len(), MAX_PENDING);
        assert_eq!(p[0].key, key_hex(&[10; 32]));
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn pins_expire_and_are_six_digits() {
        let d = tmp("pin");
        let p = d.create_pin(300, 3).unwrap();
        assert_eq!(p.pin.len(), 6);
        assert!(p.pin.chars().all(|c| c.is_ascii_digit()));
        assert_eq!(d.current_pin().unwrap(), Some(p));
        d.create_pin(0, 3).unwrap();
        assert_eq!(d.current_pin().unwrap(), None);
        d.clear_pin().unwrap();
        d.clear_pin().unwrap();
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn known_hosts_trust_on_first_use() {
        let d = tmp("hosts");
        assert_eq!(d.known_host("box:9710").unwrap(), None);
        d.trust_host("box:9710", &[7; 32]).unwrap();
        assert_eq!(d.known_host("box:9710").unwrap(), Some([7; 32]));
        d.trust_host("box:9710", &[8; 32]).unwrap();
        assert_eq!(d.known_hosts().unwrap().len(), 1);
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn resolve_order() {
        let d = StateDir::resolve(Some(Path::new("/x/y"))).unwrap();
        assert_eq!(d.path(), Path::new("/x/y"));
    }
}
