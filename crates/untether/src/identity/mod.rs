//! Identities and pairing on disk: the long-term key pairs of host and client, the host's
//! allowlist of client keys, revoked keys, pending access requests, one-time PINs, and the
//! client's known hosts.
//!
//! Everything lives in one directory, chosen in this order: an explicit path (`--state-dir`,
//! `host.state_dir`, `client.state_dir`), `$UNTETHER_STATE_DIR`, `$XDG_STATE_HOME/untether`,
//! `~/.local/state/untether`. A directory untether creates gets mode 0700 (one that exists is
//! used as it is: never chmodded), and every file mode 0600; files are replaced atomically
//! (write a temporary file, then rename).
//!
//! Whatever it reads, untether first checks that no other user could have written it: the
//! directory and each file must belong to this user (or root) and must not be writable by
//! group or others, or the read is refused with [`IdentityError::Unsafe`] (the running host
//! re-checks each time it re-reads the allowlist). A key file readable by others is tightened
//! to 0600, with a warning.
//!
//! | file | written by | content |
//! |---|---|---|
//! | `host.key`, `client.key` | first run | the private key, 64 hex digits |
//! | `allowed_clients.json` | `untether pair approve`, PIN pairing (edit by hand too: the host re-reads it within a second) | `[{key, name, added}]` |
//! | `revoked_clients.json` | `untether pair revoke` | `[{key, name, added}]` (added = revoked at) |
//! | `pending_requests.json` | the running host | `[{key, fingerprint, name, addr, first_seen, last_seen, attempts}]`, at most 32: when full, new requests are refused, the old ones stay until not asked for 5 minutes |
//! | `pairing_pin.json` | `untether pair --pin` | `{pin, expires, attempts_left}` |
//! | `known_hosts.json` | the client (trust on first use) | `[{host, addr, key, added}]`: the name typed and the address it resolved to |
//! | `input_grants.json` | `untether pair grant FINGERPRINT input` / `revoke-grant` (the host re-reads it within a second) | `[{key, name, added}]`: viewers whose input the host applies |
//! | `control.json` | `untether pair control FINGERPRINT` / `--release` (re-read within a second) | `{key, name, added}`: the client that controls whenever it is connected |
//! | `dashboard_link` | the running host with `--dashboard` | its link with the admin token, one line: the dashboard answers to nothing else |
//! | `clients.json` | the running host, when a client comes, goes or changes role (removed when it stops) | `{host_pid, updated, clients: [{key, fingerprint, name, addr, role, input_granted, since}]}` |
//!
//! Keys are shown to users as fingerprints ([`untether_proto::fingerprint`]):
//! `ABCD-EFGH-IJKL-MNOP-QRST-UVWX`. A pending request is approved or denied by its
//! fingerprint (at least [`MIN_FINGERPRINT_CHARS`] characters of it, matching one request) or
//! its hex key, never by its place in the list (a flood of requests moves it) nor by its
//! name (the client chose it).

mod resolve;

/// The one way a client is named on the command line or through the API (see `resolve.rs`):
/// ≥ 8 fingerprint characters or the full hex key, never a number or a name.
pub(crate) use resolve::resolve as resolve_client;
mod roles;
mod secrets;
mod state_dir;

pub use roles::{ClientsFile, ConnectedClient, CLIENTS_FILE, CONTROL_FILE, GRANTS_FILE};
pub use secrets::Secrets;
pub use state_dir::StateDir;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
pub use untether_proto::fingerprint;
use untether_proto::handshake::{try_os_seed, OsRandomUnavailable, SessionRng};
use untether_proto::{PublicKey, StaticKeypair};

/// The host's allowlist.
pub const ALLOWED_FILE: &str = "allowed_clients.json";
/// The host's revoked client keys.
pub const REVOKED_FILE: &str = "revoked_clients.json";
/// Access requests the running host recorded.
pub const PENDING_FILE: &str = "pending_requests.json";
/// The one-time PIN of `untether pair --pin` (or `untether host --access pin`).
pub const PIN_FILE: &str = "pairing_pin.json";
/// The browser page's self-signed certificate and key (`webrtc.cert = "auto"`), PEM.
pub const WEBRTC_CERT_FILE: &str = "webrtc_cert.pem";
/// The client's trusted host keys.
pub const KNOWN_HOSTS_FILE: &str = "known_hosts.json";
/// The running host's dashboard link with its admin token (0600, this user's only).
pub const DASHBOARD_LINK_FILE: &str = "dashboard_link";
/// The running host's one-time link for the next browser (0600, this user's only), rewritten
/// whenever the last one is used or expires, when the host's output is not a terminal.
pub const BROWSER_LINK_FILE: &str = "browser_link";
/// The browsers' resume secrets, as SHA-256 digests with their expiry: a page admitted before
/// the host restarted gets back in without a new link. The secrets themselves are never written.
pub const BROWSER_RESUME_FILE: &str = "browser_resume.json";

/// One kept resume secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResume {
    /// SHA-256 of the secret, 64 hex digits.
    pub sha256: String,
    /// Unix seconds.
    pub expires: u64,
}

/// Most pending access requests kept on disk: when full, new requests are refused (the old ones
/// stay until the user approves or denies them).
pub const MAX_PENDING: usize = untether_proto::host::DEFAULT_MAX_ACCESS_REQUESTS;
/// A pending access request not asked again for this long (5 minutes, the host session's own
/// [`untether_proto::host::ACCESS_REQUEST_TTL_US`]) is forgotten: its client stopped waiting (a
/// waiting client asks every quarter second), and a full list of such requests would refuse
/// every new one.
pub const PENDING_EXPIRY_SECS: u64 = untether_proto::host::ACCESS_REQUEST_TTL_US / 1_000_000;
/// The fewest fingerprint characters (dashes not counted) that name a pending request.
pub const MIN_FINGERPRINT_CHARS: usize = 8;
/// Most entries in the allowlist, the revoked list and the known hosts (a sanity bound).
pub const MAX_ENTRIES: usize = 1024;
/// Largest file read (a sanity bound against a corrupted or hostile file).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What can go wrong with the identity files.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot find a state directory: pass --state-dir, or set UNTETHER_STATE_DIR, XDG_STATE_HOME or HOME")]
    NoStateDir,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("no pending request or client matches {0:?}")]
    NotFound(String),
    #[error("{query:?} matches more than one entry ({}): give more of the fingerprint", matches.join(", "))]
    Ambiguous { query: String, matches: Vec<String> },
    #[error("{path}: {reason}; another user could change the keys untether trusts, so it refuses this {what}: {fix}")]
    Unsafe {
        path: PathBuf,
        /// "directory" or "file".
        what: &'static str,
        reason: String,
        fix: String,
    },
    #[error("{0}")]
    Invalid(String),
    /// The operating system's random generator failed (no keys, nonces or PINs without it).
    #[error(transparent)]
    Random(#[from] OsRandomUnavailable),
}

type Result<T> = std::result::Result<T, IdentityError>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Which side's key pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Host,
    Client,
}

impl Role {
    fn file(self) -> &'static str {
        match self {
            Role::Host => "host.key",
            Role::Client => "client.key",
        }
    }
}

/// A client on the allowlist (or the revoked list), or a known host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    /// The public key, 64 hex digits.
    pub key: String,
    pub name: String,
    /// Unix seconds.
    pub added: u64,
}

impl KeyEntry {
    pub fn public_key(&self) -> Option<PublicKey> {
        parse_key(&self.key)
    }
    pub fn fingerprint(&self) -> String {
        self.public_key()
            .map_or_else(|| "?".into(), |k| fingerprint(&k))
    }
}

/// An access request from an unknown client, written by the running host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRequest {
    pub key: String,
    pub fingerprint: String,
    pub name: String,
    pub addr: String,
    pub first_seen: u64,
    pub last_seen: u64,
    pub attempts: u32,
}

impl PendingRequest {
    /// Whether it was last asked for more than [`PENDING_EXPIRY_SECS`] before `now` (Unix
    /// seconds; a `last_seen` ahead of the clock is not expired).
    pub fn expired(&self, now: u64) -> bool {
        now.saturating_sub(self.last_seen) > PENDING_EXPIRY_SECS
    }
}

/// A one-time PIN the host accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinFile {
    pub pin: String,
    /// Unix seconds.
    pub expires: u64,
    pub attempts_left: u32,
}

/// A host the client trusts (trust on first use).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownHost {
    /// How the user named the host (address or name).
    pub host: String,
    /// The address and port that name resolved to (`ip:port`; empty in entries written before
    /// pins were kept by address too).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr: String,
    pub key: String,
    pub added: u64,
}

impl KnownHost {
    /// Whether this entry pins the host at `addr` (`ip:port`): its resolved address, or its
    /// name when that was typed as the address itself.
    pub fn pins_addr(&self, addr: &str) -> bool {
        self.addr == addr || self.host == addr
    }

    /// `"NAME" (ADDR)`, for messages.
    pub fn describe(&self) -> String {
        if self.addr.is_empty() || self.addr == self.host {
            format!("{:?}", self.host)
        } else {
            format!("{:?} ({})", self.host, self.addr)
        }
    }
}

/// What `known_hosts.json` pins for a host reached by a name at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPin {
    /// Nothing: trust on first use.
    None,
    /// This key, by these entries (all agreeing).
    Key {
        key: PublicKey,
        /// The entries that pin it, described (`"NAME" (ADDR)`).
        by: Vec<String>,
    },
    /// Entries disagree: the name pins one key, the address another.
    Conflict {
        /// Each disagreeing entry, described, with its key's fingerprint.
        entries: Vec<(String, String)>,
    },
}

/// The key in 64 hex digits.
pub fn key_hex(key: &PublicKey) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses 64 hex digits.
pub fn parse_key(s: &str) -> Option<PublicKey> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(k)
}

/// Normalizes a fingerprint (or a prefix of one) for comparison: upper case, no separators.
fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// Six uniformly random decimal digits from the OS generator (an error when it fails).
pub fn random_pin() -> Result<String> {
    loop {
        let s = try_os_seed()?;
        let v = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        // Rejection sampling: no modulo bias.
        if v < u32::MAX - u32::MAX % 1_000_000 {
            return Ok(format!("{:06}", v % 1_000_000));
        }
    }
}

/// Whether the operating system's random generator works: the host and the client check it
/// before they make a session, and stop with this error when it does not (the session's
/// keys, nonces and PINs come from it; there is no fallback seed).
pub fn check_random() -> Result<()> {
    try_os_seed().map(|_| ()).map_err(IdentityError::from)
}

/// Who may connect to the host (`host.access`, `--access`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Clients on the allowlist; others leave an access request (`untether pair`). A PIN made
    /// with `untether pair --pin` is accepted too.
    #[default]
    Allowlist,
    /// Any client (still authenticated and encrypted, but anyone in range may connect).
    Open,
    /// Like allowlist, and the host makes a one-time PIN at start, prints it and accepts it.
    Pin,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Allowlist => "allowlist",
            Access::Open => "open",
            Access::Pin => "pin",
        }
    }
}

/// An access policy that is not `allowlist`, `open` or `pin`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown access policy {0:?}; allowed: allowlist, open, pin")]
pub struct UnknownAccess(pub String);

impl std::str::FromStr for Access {
    type Err = UnknownAccess;
    fn from_str(s: &str) -> std::result::Result<Self, UnknownAccess> {
        match s {
            "allowlist" => Ok(Access::Allowlist),
            "open" => Ok(Access::Open),
            "pin" => Ok(Access::Pin),
            _ => Err(UnknownAccess(s.to_string())),
        }
    }
}

/// Where a runtime host's identity and allowlist come from.
#[derive(Clone, Debug, Default)]
pub enum HostTrust {
    /// The state directory (`host.state_dir`) with the policy `host.access`: the host's key
    /// pair is loaded (or created), the allowlist is re-read when it changes, access requests
    /// and PIN pairings are written back.
    #[default]
    Stored,
    /// In memory only (tests, the in-process demo): this key pair, this policy, these allowed
    /// client keys; nothing is read or written.
    Memory {
        identity: StaticKeypair,
        access: Access,
        allowed: Vec<PublicKey>,
    },
}

/// Where a runtime client's identity and trusted host keys come from.
#[derive(Clone, Debug, Default)]
pub enum ClientTrust {
    /// The state directory (`client.state_dir`): the client's key pair is loaded (or
    /// created); the host's key is pinned in `known_hosts.json` on first use under its label
    /// (`ClientIo::host_label`; None: the host's address) and its resolved address, and both
    /// are looked up on connect (a name and an address pinning different keys are refused).
    #[default]
    Stored,
    /// In memory only: this key pair, and the host key to insist on (None: any).
    Memory {
        identity: StaticKeypair,
        host_key: Option<PublicKey>,
    },
}

/// A fresh random key pair (for [`HostTrust::Memory`] and [`ClientTrust::Memory`]).
pub fn ephemeral_keypair() -> StaticKeypair {
    StaticKeypair::generate(&mut SessionRng::from_os())
}

/// A host and a client that trust each other, in memory: the host allows only this client,
/// the client insists on this host.
pub fn memory_pair() -> (HostTrust, ClientTrust) {
    let host = ephemeral_keypair();
    let client = ephemeral_keypair();
    (
        HostTrust::Memory {
            allowed: vec![client.public],
            identity: host.clone(),
            access: Access::Allowlist,
        },
        ClientTrust::Memory {
            identity: client,
            host_key: Some(host.public),
        },
    )
}
