//! The state directory: the key pair, the allowlist, revoked keys, pending access requests,
//! the pairing PIN and known hosts, as small JSON files written atomically.

use std::os::unix::fs::DirBuilderExt;

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

    /// Modification times of the allowlist, the revoked list, the PIN file, the pending
    /// requests, the input grants and the control hand-over: the running host polls this and
    /// re-reads what changed.
    pub fn stamp(&self) -> [Option<SystemTime>; 6] {
        let m = |n: &str| fs::metadata(self.file(n)).and_then(|m| m.modified()).ok();
        [
            m(ALLOWED_FILE),
            m(REVOKED_FILE),
            m(PIN_FILE),
            m(PENDING_FILE),
            m(GRANTS_FILE),
            m(CONTROL_FILE),
        ]
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The checks every read makes, made now without creating or changing anything
    /// (`untether doctor`): the directory and its lists must be private (owner you or root, no
    /// group/other write). Ok(false): the directory does not exist yet (it is made, 0700, on
    /// first use).
    pub fn check(&self) -> Result<bool> {
        if !self.check_dir()? {
            return Ok(false);
        }
        self.allowed()?;
        self.revoked()?;
        self.known_hosts()?;
        Ok(true)
    }

    /// Checks the directory if it exists (false: it does not).
    fn check_dir(&self) -> Result<bool> {
        match fs::metadata(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&self.path)(e)),
            Ok(m) if !m.is_dir() => Err(IdentityError::Invalid(format!(
                "{}: not a directory (the state directory must be one)",
                self.path.display()
            ))),
            Ok(m) => check_private(&self.path, &m, "directory").map(|()| true),
        }
    }

    /// Creates the directory with mode 0700 if it does not exist (its missing parents with the
    /// usual mode); an existing one is checked, never chmodded.
    fn ensure_dir(&self) -> Result<()> {
        if self.check_dir()? {
            return Ok(());
        }
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        match fs::DirBuilder::new().mode(0o700).create(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            r => r.map_err(io_err(&self.path))?,
        }
        // Whoever made it (us, or someone quicker), it must be private now.
        self.check_dir().map(|_| ())
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

    /// Reads a file (after checking that no other user could have written it or its
    /// directory); None if it does not exist.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.read_with_mode(name)?.map(|(bytes, _)| bytes))
    }

    /// Reads a file and its mode, see [`read`](Self::read).
    fn read_with_mode(&self, name: &str) -> Result<Option<(Vec<u8>, u32)>> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        if !self.check_dir()? {
            return Ok(None);
        }
        let path = self.file(name);
        let f = match fs::File::open(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            r => r.map_err(io_err(&path))?,
        };
        // The checks are on the file opened, not on whatever the name points to later.
        let meta = f.metadata().map_err(io_err(&path))?;
        check_private(&path, &meta, "file")?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(IdentityError::Corrupt {
                path,
                reason: "larger than 1 MiB".into(),
            });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        f.take(MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(io_err(&path))?;
        Ok(Some((bytes, meta.mode())))
    }

    pub(super) fn read_json<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<Option<T>> {
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

    pub(super) fn write_json<T: Serialize>(&self, name: &str, v: &T) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(v).map_err(|e| IdentityError::Corrupt {
            path: self.file(name),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        self.write(name, &bytes)
    }

    /// Writes the running host's dashboard link (with its admin token), mode 0600, where only
    /// this user can read it ([`DASHBOARD_LINK_FILE`]).
    pub fn write_dashboard_link(&self, link: &str) -> Result<()> {
        self.write(DASHBOARD_LINK_FILE, format!("{link}\n").as_bytes())
    }

    /// Writes the browsers' current one-time link, mode 0600 ([`BROWSER_LINK_FILE`]).
    pub fn write_browser_link(&self, link: &str) -> Result<()> {
        self.write(BROWSER_LINK_FILE, format!("{link}\n").as_bytes())
    }

    /// The browsers' resume secrets a host kept (digests and expiry; empty when none).
    pub fn browser_resume(&self) -> Result<Vec<super::StoredResume>> {
        Ok(self
            .read_json::<Vec<super::StoredResume>>(super::BROWSER_RESUME_FILE)?
            .unwrap_or_default())
    }

    /// Keeps the browsers' resume secrets (digests only), mode 0600.
    pub fn write_browser_resume(&self, r: &[super::StoredResume]) -> Result<()> {
        self.write_json(super::BROWSER_RESUME_FILE, &r)
    }

    /// The running host's dashboard link, if one was written (checked private like every read).
    pub fn dashboard_link(&self) -> Result<Option<String>> {
        Ok(self
            .read(DASHBOARD_LINK_FILE)?
            .map(|b| String::from_utf8_lossy(&b).trim().to_string()))
    }

    // ---- key pairs -------------------------------------------------------------------------

    /// The key pair of `role`, generated (and stored with mode 0600) on first use.
    pub fn load_or_create_identity(&self, role: Role) -> Result<StaticKeypair> {
        if let Some(kp) = self.load_identity(role)? {
            return Ok(kp);
        }
        let kp = StaticKeypair::generate(&mut SessionRng::try_from_os()?);
        self.write(
            role.file(),
            format!("{}\n", key_hex(&kp.private)).as_bytes(),
        )?;
        Ok(kp)
    }

    /// The key pair of `role` if it exists (creates nothing). A key file others could read is
    /// tightened to 0600, with a warning.
    pub fn load_identity(&self, role: Role) -> Result<Option<StaticKeypair>> {
        let name = role.file();
        let Some((bytes, mode)) = self.read_with_mode(name)? else {
            return Ok(None);
        };
        let path = self.file(name);
        if mode & 0o077 != 0 {
            // Someone loosened it: tighten, do not refuse (the key is still ours), but say so:
            // whoever could read it may hold a copy.
            log::warn!(
                "{}: the private key was readable by others (mode {:o}); set it to 0600. If \
                 another user may have copied it, make a new identity (remove the file).",
                path.display(),
                mode & 0o777
            );
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io_err(&path))?;
        }
        let text = String::from_utf8_lossy(&bytes);
        let private = parse_key(&text).ok_or_else(|| IdentityError::Corrupt {
            path,
            reason: "not 64 hex digits".into(),
        })?;
        Ok(Some(StaticKeypair::from_private(private)))
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

    /// Revokes an allowed client named by fingerprint (8 or more of its characters) or hex
    /// key, as approve takes them: removes it from the allowlist and records it as revoked.
    pub fn revoke(&self, query: &str) -> Result<KeyEntry> {
        let mut allowed = self.allowed()?;
        let keys: Vec<&str> = allowed.iter().map(|e| e.key.as_str()).collect();
        let names: Vec<&str> = allowed.iter().map(|e| e.name.as_str()).collect();
        let i = super::resolve::resolve(query, "client", &keys, &names)?;
        let entry = allowed.remove(i);
        self.write_json(ALLOWED_FILE, &allowed)?;
        self.add_revoked(entry)
    }

    /// Puts `entry` on the revoked list (refused without an access request; the oldest
    /// leaves past [`MAX_ENTRIES`]), dated now.
    fn add_revoked(&self, mut entry: KeyEntry) -> Result<KeyEntry> {
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

    /// Pending access requests, oldest first: those still asked for (the latest ask within
    /// [`PENDING_EXPIRY_SECS`]; a waiting client asks again every quarter second).
    pub fn pending(&self) -> Result<Vec<PendingRequest>> {
        let now = unix_now();
        let mut pending = self
            .read_json::<Vec<PendingRequest>>(PENDING_FILE)?
            .unwrap_or_default();
        pending.retain(|p| !p.expired(now));
        Ok(pending)
    }

    /// Records (or refreshes) an access request. Keeps at most [`MAX_PENDING`]: when the list
    /// is full, a new request is refused (false) and the old ones stay (a flood of requests
    /// must not push out the one the user is about to approve) until they expire (no ask for
    /// [`PENDING_EXPIRY_SECS`]; they leave the file at the next write).
    pub fn record_request(&self, key: &PublicKey, name: &str, addr: &str) -> Result<bool> {
        let hex = key_hex(key);
        let now = unix_now();
        let mut pending = self.pending()?;
        let full = pending.len() >= MAX_PENDING;
        match pending.iter_mut().find(|p| p.key == hex) {
            Some(p) => {
                p.last_seen = now;
                p.attempts = p.attempts.saturating_add(1);
                p.addr = addr.to_string();
            }
            None if full => return Ok(false),
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
            }
        }
        self.write_json(PENDING_FILE, &pending).map(|()| true)
    }

    /// Keeps only the pending requests whose hex key `keep` accepts (the host's session
    /// pushed the others out of its bounded list); returns how many were dropped.
    pub fn retain_pending(&self, keep: impl Fn(&str) -> bool) -> Result<usize> {
        let mut pending = self.pending()?;
        let before = pending.len();
        pending.retain(|p| keep(&p.key));
        let dropped = before - pending.len();
        if dropped > 0 {
            self.write_json(PENDING_FILE, &pending)?;
        }
        Ok(dropped)
    }

    /// Finds a pending request by its fingerprint (at least [`MIN_FINGERPRINT_CHARS`]
    /// characters of it, in any case, dashes optional, matching exactly one request) or its
    /// hex key. Never by its place in the list (a flood of requests moves it) nor by its name
    /// (the client chose it): those are refused with an error saying what to give instead.
    pub fn find_pending(&self, query: &str) -> Result<PendingRequest> {
        let pending = self.pending()?;
        let keys: Vec<&str> = pending.iter().map(|p| p.key.as_str()).collect();
        let names: Vec<&str> = pending.iter().map(|p| p.name.as_str()).collect();
        let i = super::resolve::resolve(query, "request", &keys, &names)?;
        Ok(pending[i].clone())
    }

    /// Approves a pending request: its key joins the allowlist.
    /// Approves a pending request, or takes back a denial or revocation: the key joins the
    /// allowlist. A revoked (or denied) key is found by its fingerprint or hex key only.
    pub fn approve(&self, query: &str) -> Result<KeyEntry> {
        let (hex, name, file) = match self.find_pending(query) {
            Ok(req) => (req.key, req.name, PENDING_FILE),
            Err(pending_err) => {
                let revoked = self.revoked()?;
                let keys: Vec<&str> = revoked.iter().map(|e| e.key.as_str()).collect();
                match super::resolve::resolve(query, "revoked client", &keys, &[]) {
                    Ok(i) => (
                        revoked[i].key.clone(),
                        revoked[i].name.clone(),
                        REVOKED_FILE,
                    ),
                    Err(_) => return Err(pending_err),
                }
            }
        };
        let key = parse_key(&hex).ok_or_else(|| IdentityError::Corrupt {
            path: self.file(file),
            reason: "a key is not 64 hex digits".into(),
        })?;
        self.allow(&key, &name)
    }

    /// Denies a pending request: it leaves the list and its key is refused from now on (the
    /// client is told and stops asking) until `approve` takes the denial back.
    pub fn deny(&self, query: &str) -> Result<PendingRequest> {
        let req = self.find_pending(query)?;
        let mut pending = self.pending()?;
        pending.retain(|p| p.key != req.key);
        self.write_json(PENDING_FILE, &pending)?;
        self.add_revoked(KeyEntry {
            key: req.key.clone(),
            name: req.name.clone(),
            added: 0,
        })?;
        Ok(req)
    }

    // ---- one-time PINs --------------------------------------------------------------------

    /// Creates a 6-digit one-time PIN valid for `ttl_secs` and `attempts` failed attempts.
    pub fn create_pin(&self, ttl_secs: u64, attempts: u32) -> Result<PinFile> {
        let attempts_left = crate::config::PIN_ATTEMPTS
            .check(attempts)
            .map_err(|e| IdentityError::Invalid(e.to_string()))?;
        let pin = PinFile {
            pin: random_pin()?,
            expires: unix_now() + ttl_secs,
            attempts_left,
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

    // ---- the browser page's certificate (host, `webrtc.cert = "auto"`) ---------------------

    /// The self-signed certificate and key of the browser page (PEM), if one was made.
    pub fn webrtc_cert(&self) -> Result<Option<Vec<u8>>> {
        self.read(WEBRTC_CERT_FILE)
    }

    /// Keeps the browser page's self-signed certificate and key (PEM, mode 0600), so its
    /// fingerprint stays the same across restarts.
    pub fn save_webrtc_cert(&self, pem: &[u8]) -> Result<()> {
        self.write(WEBRTC_CERT_FILE, pem)
    }

    // ---- known hosts (client) -------------------------------------------------------------

    pub fn known_hosts(&self) -> Result<Vec<KnownHost>> {
        Ok(self
            .read_json::<Vec<KnownHost>>(KNOWN_HOSTS_FILE)?
            .unwrap_or_default())
    }

    /// The key trusted under the name `host`, if any.
    pub fn known_host(&self, host: &str) -> Result<Option<PublicKey>> {
        Ok(self
            .known_hosts()?
            .into_iter()
            .find(|h| h.host == host)
            .and_then(|h| parse_key(&h.key)))
    }

    /// What is pinned for the host named `label` at `addr` (`ip:port`, as `SocketAddr`
    /// prints it): the entry under that name and every entry for that address. They must
    /// agree; if they do not, [`HostPin::Conflict`] names them.
    pub fn host_pin(&self, label: &str, addr: &str) -> Result<HostPin> {
        let mut keys: Vec<(PublicKey, String)> = Vec::new();
        for h in self.known_hosts()? {
            if h.host != label && !h.pins_addr(addr) {
                continue;
            }
            let key = h.public_key_or(&self.file(KNOWN_HOSTS_FILE))?;
            keys.push((key, h.describe()));
        }
        let Some((first, _)) = keys.first().cloned() else {
            return Ok(HostPin::None);
        };
        if keys.iter().all(|(k, _)| *k == first) {
            return Ok(HostPin::Key {
                key: first,
                by: keys.into_iter().map(|(_, d)| d).collect(),
            });
        }
        Ok(HostPin::Conflict {
            entries: keys
                .into_iter()
                .map(|(k, d)| (d, fingerprint(&k)))
                .collect(),
        })
    }

    /// Trusts `key` for the name `host` at `addr` (replacing the name's earlier entry).
    pub fn trust_host(&self, host: &str, addr: &str, key: &PublicKey) -> Result<()> {
        let mut hosts = self.known_hosts()?;
        hosts.retain(|h| h.host != host);
        hosts.push(KnownHost {
            host: host.to_string(),
            addr: addr.to_string(),
            key: key_hex(key),
            added: unix_now(),
        });
        while hosts.len() > MAX_ENTRIES {
            hosts.remove(0);
        }
        self.write_json(KNOWN_HOSTS_FILE, &hosts)
    }
}

impl StateDir {
    /// Forgets a host this client trusts: every `known_hosts.json` entry whose name or address
    /// is `query`, or whose key's fingerprint starts with it (8 or more characters, dashes
    /// optional) or is it in hex. Its next connection trusts on first use again. Returns the
    /// entries removed; none matching is an error listing the known hosts.
    pub fn forget_host(&self, query: &str) -> Result<Vec<KnownHost>> {
        let q = query.trim();
        let plain = |s: &str| s.replace('-', "").to_ascii_uppercase();
        let by_key = |h: &KnownHost| match parse_key(&h.key) {
            Some(k) => {
                (plain(q).len() >= 8 && plain(&fingerprint(&k)).starts_with(&plain(q)))
                    || parse_key(q) == Some(k)
            }
            None => false,
        };
        let hosts = self.known_hosts()?;
        // Every pin of the keys the query names goes: a host known by name and by address
        // is one host (issue 36: `forget NAME` left its address entry with the same key).
        let keys: std::collections::HashSet<String> = hosts
            .iter()
            .filter(|h| !q.is_empty() && (h.host == q || h.addr == q || by_key(h)))
            .map(|h| h.key.to_ascii_lowercase())
            .collect();
        let (gone, kept): (Vec<KnownHost>, Vec<KnownHost>) = hosts
            .into_iter()
            .partition(|h| keys.contains(&h.key.to_ascii_lowercase()));
        if gone.is_empty() {
            let known: Vec<String> = kept.iter().map(KnownHost::describe).collect();
            return Err(IdentityError::Invalid(format!(
                "no known host matches {q:?} in {} (known: {})",
                self.file(KNOWN_HOSTS_FILE).display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
        self.write_json(KNOWN_HOSTS_FILE, &kept)?;
        Ok(gone)
    }
}

impl KnownHost {
    fn public_key_or(&self, file: &Path) -> Result<PublicKey> {
        parse_key(&self.key).ok_or_else(|| IdentityError::Corrupt {
            path: file.to_path_buf(),
            reason: format!("the key of {} is not 64 hex digits", self.describe()),
        })
    }
}

/// Refuses a directory or file another user could have written: owned by someone else than
/// this user or root, or writable by group or others.
fn check_private(path: &Path, meta: &fs::Metadata, what: &'static str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = meta.mode();
    let elsewhere = "or give untether a folder of your own with --state-dir";
    let (reason, fix) = if meta.uid() != me && meta.uid() != 0 {
        (
            format!("owned by user {}, not by this user ({me})", meta.uid()),
            format!("use it as its owner, {elsewhere}"),
        )
    } else if mode & 0o022 != 0 {
        let fix = if what == "directory" && mode & 0o1000 != 0 {
            // A shared folder such as /tmp: do not advise changing it.
            "it is a shared folder (sticky bit): give untether a folder of its own inside it \
             with --state-dir"
                .to_string()
        } else {
            format!(
                "`chmod go-w {}` if it is yours alone, {elsewhere}",
                path.display()
            )
        };
        (
            format!(
                "mode {:o} lets {} write it",
                mode & 0o7777,
                if mode & 0o002 != 0 {
                    "every user"
                } else {
                    "its group"
                }
            ),
            fix,
        )
    } else {
        return Ok(());
    };
    Err(IdentityError::Unsafe {
        path: path.to_path_buf(),
        what,
        reason,
        fix,
    })
}

#[cfg(test)]
#[path = "state_dir_tests.rs"]
mod tests;
