//! Where the client pins the host's key (trust on first use), by name and by address
//! ([`KnownHosts`]), and what it says when the host's key changed.

use std::net::SocketAddr;
use std::path::PathBuf;

use untether_proto::{fingerprint, PublicKey};

use crate::identity::{StateDir, KNOWN_HOSTS_FILE};

/// The known-hosts file's entries for this host.
pub(crate) struct KnownHosts {
    pub dir: StateDir,
    /// The name the user gave the host.
    pub label: String,
    /// The address and port it resolved to (`ip:port`).
    pub addr: String,
    /// The key pinned before this run (under the name or the address).
    pub pinned: Option<PublicKey>,
    /// The entries that pinned it, described (`"NAME" (ADDR)`).
    pub pinned_by: Vec<String>,
    /// The key the host was chosen by (`ClientIo::host_key`: its advertisement, or named by
    /// the user), which the handshake must prove.
    pub chosen: Option<PublicKey>,
}

impl KnownHosts {
    /// Trust on first use (or after PIN pairing, which proved the key): a key pinned under the
    /// address only is pinned under the name too, and a name's entry learns the address it now
    /// resolves to.
    pub fn pin(&self, key: &PublicKey) {
        let name_pinned = self.dir.known_hosts().is_ok_and(|hosts| {
            hosts
                .iter()
                .any(|h| h.host == self.label && h.addr == self.addr)
        });
        if name_pinned {
            return;
        }
        match self.dir.trust_host(&self.label, &self.addr, key) {
            Ok(()) if self.pinned.is_none() => log::info!(
                "client: trusting host {} at {} ({}) from now on ({})",
                self.label,
                self.addr,
                fingerprint(key),
                self.dir.file_path(KNOWN_HOSTS_FILE).display()
            ),
            Ok(()) => log::info!(
                "client: host {} at {} ({}) pinned under this name too",
                self.label,
                self.addr,
                fingerprint(key)
            ),
            Err(e) => log::warn!("client: cannot pin the host's key: {e}"),
        }
    }
}

/// How the error of a changed host key names the entries that pinned it, and their file
/// (`known`: None, the key was given in memory).
pub(crate) fn pinned_label(known: Option<&KnownHosts>, host: SocketAddr) -> (String, PathBuf) {
    match known {
        Some(kh) if !kh.pinned_by.is_empty() => {
            (kh.pinned_by.join(", "), kh.dir.file_path(KNOWN_HOSTS_FILE))
        }
        Some(kh) => (
            format!("{:?}", kh.label),
            kh.dir.file_path(KNOWN_HOSTS_FILE),
        ),
        None => (
            format!("{:?}", host.to_string()),
            PathBuf::from("(in memory)"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_in_memory_is_named_by_the_host_address() {
        let host: SocketAddr = "10.1.2.3:9000".parse().unwrap();
        let (label, file) = pinned_label(None, host);
        assert_eq!(label, "\"10.1.2.3:9000\"");
        assert_eq!(file, PathBuf::from("(in memory)"));
    }

    #[test]
    fn a_new_host_is_pinned_by_name_and_address_once() {
        let path = std::env::temp_dir().join(format!("untether-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let kh = KnownHosts {
            dir: StateDir::at(&path),
            label: "pc".into(),
            addr: "10.0.0.2:9000".into(),
            pinned: None,
            pinned_by: Vec::new(),
            chosen: None,
        };
        kh.pin(&[5; 32]);
        kh.pin(&[5; 32]);
        let hosts = kh.dir.known_hosts().unwrap_or_default();
        let entries: Vec<_> = hosts
            .iter()
            .map(|h| (h.host.as_str(), h.addr.as_str()))
            .collect();
        assert_eq!(entries, vec![("pc", "10.0.0.2:9000")]);
        let (label, file) = pinned_label(Some(&kh), "10.0.0.2:9000".parse().unwrap());
        assert_eq!(label, "\"pc\"");
        assert_eq!(file, kh.dir.file_path(KNOWN_HOSTS_FILE));
        let by = KnownHosts {
            pinned_by: vec!["\"pc\" (10.0.0.2:9000)".into()],
            ..kh
        };
        let (label, _) = pinned_label(Some(&by), "10.0.0.2:9000".parse().unwrap());
        assert_eq!(label, "\"pc\" (10.0.0.2:9000)");
        let _ = std::fs::remove_dir_all(&path);
    }
}
