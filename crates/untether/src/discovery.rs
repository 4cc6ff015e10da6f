//! Finding hosts on the local network: the host advertises itself over mDNS/DNS-SD
//! (`_untether._udp`, [`Advertiser`]) and clients browse for it ([`browse`]).
//!
//! The advertisement's TXT record says who the host is and what it serves:
//!
//! | key | value |
//! |---|---|
//! | `v` | the protocol version it speaks |
//! | `name` | the host's name (`host.name`, default the machine's host name) |
//! | `fp` | its key's fingerprint, as `untether pair` and the client show it |
//! | `key` | its static public key, 64 hex digits (what a client pins) |
//! | `access` | `allowlist`, `pin` or `open` |
//! | `web` | the browser page's URL scheme and port (`http:8080`, `https:8443`), when it serves browsers |
//! | `rtsp` | the RTSP server's TCP port, when it serves one |
//!
//! The SRV record's port is the host's UDP port (its data: the handshake, video, input).
//! Discovery only says where to knock: the handshake still proves the host's key, and a
//! client that pinned a key connects only to a host holding it (a paired host is found again
//! by its key when its address changed, see [`FoundHost::key`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent, ServiceInfo};
use untether_proto::{fingerprint, PublicKey};

use crate::identity::{key_hex, parse_key};

/// The DNS-SD service type hosts advertise.
pub const SERVICE_TYPE: &str = "_untether._udp.local.";

/// What went wrong starting discovery.
#[derive(Debug, thiserror::Error)]
#[error("mDNS discovery: {0}")]
pub struct DiscoveryError(String);

impl From<mdns_sd::Error> for DiscoveryError {
    fn from(e: mdns_sd::Error) -> Self {
        DiscoveryError(e.to_string())
    }
}

/// What a host advertises.
#[derive(Clone, Debug)]
pub struct Advert {
    /// The host's name (shown by `untether discover`).
    pub name: String,
    pub key: PublicKey,
    /// The UDP port of its data (handshake, video, input).
    pub port: u16,
    /// The one address the host is bound to (None: every interface's, following them as
    /// they change).
    pub addr: Option<IpAddr>,
    /// The host's socket is IPv4 (bound to 0.0.0.0 or one IPv4 address): only IPv4 addresses
    /// are advertised, never an IPv6 one a client would find nothing listening on.
    pub ipv4_only: bool,
    /// The browser page: its scheme (`http` or `https`) and TCP port.
    pub web: Option<(String, u16)>,
    /// The RTSP server's TCP port.
    pub rtsp: Option<u16>,
    /// Who may connect: `allowlist`, `pin` or `open`.
    pub access: String,
}

/// The machine's host name (for the advertisement's default name and its `.local` host).
pub fn machine_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    if name.trim().is_empty() {
        "untether-host".into()
    } else {
        name
    }
}

/// A DNS label from `name`: letters, digits and `-` only (others become `-`), at most 63.
fn dns_label(name: &str) -> String {
    let label: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    let label = label.trim_matches('-').to_string();
    if label.is_empty() {
        "untether".into()
    } else {
        label
    }
}

impl Advert {
    /// The DNS-SD instance name: the name and the fingerprint's first group, so that two hosts
    /// with one name (two on one machine) never collide.
    pub fn instance(&self) -> String {
        let fp = fingerprint(&self.key);
        let short = fp.split('-').next().unwrap_or(&fp).to_string();
        let name: String = self.name.chars().take(40).collect();
        format!("{name} ({short})")
    }

    fn txt(&self) -> Vec<(String, String)> {
        let mut txt = vec![
            ("v".to_string(), untether_proto::wire::VERSION.to_string()),
            ("name".into(), self.name.chars().take(64).collect()),
            ("fp".into(), fingerprint(&self.key)),
            ("key".into(), key_hex(&self.key)),
            ("access".into(), self.access.clone()),
        ];
        if let Some((scheme, port)) = &self.web {
            txt.push(("web".into(), format!("{scheme}:{port}")));
        }
        if let Some(port) = self.rtsp {
            txt.push(("rtsp".into(), port.to_string()));
        }
        txt
    }
}

/// A running advertisement; dropping it withdraws it (a goodbye on the network).
pub struct Advertiser {
    daemon: ServiceDaemon,
    fullname: String,
}

impl std::fmt::Debug for Advertiser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Advertiser({:?})", self.fullname)
    }
}

/// How often the daemon looks for interfaces that came up (or went), seconds. mdns-sd's
/// default is 5: a browse started just after a link came up (a laptop joining Wi-Fi, a veth
/// whose carrier the kernel had not marked yet) heard nothing on it for its whole wait.
const INTERFACE_CHECK_S: u32 = 1;

/// A daemon on every interface that is up and running, loopback included (a client on the
/// same machine finds the host even with no network), following interfaces as they change.
fn daemon() -> Result<ServiceDaemon, DiscoveryError> {
    let d = ServiceDaemon::new()?;
    d.enable_interface(IfKind::LoopbackV4)?;
    d.set_ip_check_interval(INTERFACE_CHECK_S)?;
    Ok(d)
}

impl Advertiser {
    /// Advertises `advert` on every interface (the addresses follow the interfaces as they
    /// change).
    pub fn start(advert: &Advert) -> Result<Advertiser, DiscoveryError> {
        let daemon = daemon()?;
        if advert.ipv4_only {
            daemon.disable_interface(IfKind::IPv6)?;
        }
        let host = format!("{}.local.", dns_label(&machine_name()));
        let txt = advert.txt();
        let info = match advert.addr {
            Some(ip) => ServiceInfo::new(
                SERVICE_TYPE,
                &advert.instance(),
                &host,
                ip,
                advert.port,
                &txt[..],
            )?,
            None => ServiceInfo::new(
                SERVICE_TYPE,
                &advert.instance(),
                &host,
                "",
                advert.port,
                &txt[..],
            )?
            .enable_addr_auto(),
        };
        let fullname = info.get_fullname().to_string();
        daemon.register(info)?;
        Ok(Advertiser { daemon, fullname })
    }

    /// The advertisement's DNS-SD name (`NAME (FP)._untether._udp.local.`).
    pub fn fullname(&self) -> &str {
        &self.fullname
    }
}

impl Drop for Advertiser {
    fn drop(&mut self) {
        // Say goodbye (clients forget the host at once), waiting a little for it to go out.
        if let Ok(rx) = self.daemon.unregister(&self.fullname) {
            let _ = rx.recv_timeout(Duration::from_millis(500));
        }
        if let Ok(rx) = self.daemon.shutdown() {
            let _ = rx.recv_timeout(Duration::from_millis(500));
        }
    }
}

/// A host found on the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundHost {
    /// Its DNS-SD instance name.
    pub instance: String,
    /// The name it gives itself.
    pub name: String,
    pub fingerprint: String,
    /// Its key, when the advertisement carries a valid one.
    pub key: Option<PublicKey>,
    /// Its addresses (preferred first: routable IPv4, then IPv6, then loopback).
    pub addrs: Vec<IpAddr>,
    /// Its UDP port.
    pub port: u16,
    pub access: String,
    /// The browser page (`http:8080`).
    pub web: Option<String>,
    pub rtsp: Option<u16>,
}

impl FoundHost {
    /// The address to connect to.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addrs.first().map(|ip| SocketAddr::new(*ip, self.port))
    }

    /// Whether `name` names this host: its name, instance, fingerprint (8+ characters) or
    /// hex key.
    pub fn is_named(&self, name: &str) -> bool {
        let n = name.trim();
        if n.is_empty() {
            return false;
        }
        n.eq_ignore_ascii_case(&self.name)
            || n.eq_ignore_ascii_case(&self.instance)
            || self.is_keyed_by(n)
    }

    /// Whether `name` names this host's key: its fingerprint (8+ characters) or its hex key.
    /// Unlike a name, which any advertisement can claim, a key is proven by the handshake.
    pub fn is_keyed_by(&self, name: &str) -> bool {
        let n = name.trim();
        let plain = |s: &str| s.replace('-', "").to_ascii_uppercase();
        self.key.is_some()
            && ((plain(n).len() >= 8 && plain(&self.fingerprint).starts_with(&plain(n)))
                || (parse_key(n).is_some() && parse_key(n) == self.key))
    }
}

/// How an address ranks: routable IPv4 first, then IPv6 (link-local last), then loopback.
fn rank(ip: &IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => 5,
        IpAddr::V4(v4) if v4.is_link_local() => 2,
        IpAddr::V4(_) => 0,
        IpAddr::V6(v6) if v6.is_loopback() => 6,
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => 4,
        IpAddr::V6(_) => 3,
    }
}

fn found(info: &mdns_sd::ResolvedService) -> FoundHost {
    let txt = |k: &str| info.get_property_val_str(k).map(str::to_string);
    let key = txt("key").and_then(|k| parse_key(&k));
    let mut addrs: Vec<IpAddr> = info
        .get_addresses()
        .iter()
        .map(|a| a.to_ip_addr())
        // An IPv6 link-local address needs its interface, which a socket address here does
        // not carry: left out.
        .filter(|ip| rank(ip) != 4)
        .collect();
    addrs.sort_by_key(|ip| (rank(ip), *ip));
    addrs.dedup();
    let instance = info
        .get_fullname()
        .strip_suffix(&format!(".{SERVICE_TYPE}"))
        .unwrap_or(info.get_fullname())
        .to_string();
    FoundHost {
        name: untether_proto::sanitize_peer_text(&txt("name").unwrap_or_else(|| instance.clone())),
        instance: untether_proto::sanitize_peer_text(&instance),
        // The fingerprint of the key it carries (what the handshake will prove); else its word.
        fingerprint: key
            .as_ref()
            .map(fingerprint)
            .unwrap_or_else(|| untether_proto::sanitize_peer_text(&txt("fp").unwrap_or_default())),
        key,
        addrs,
        port: info.get_port(),
        access: untether_proto::sanitize_peer_text(&txt("access").unwrap_or_default()),
        web: txt("web").map(|w| untether_proto::sanitize_peer_text(&w)),
        rtsp: txt("rtsp").and_then(|p| p.parse().ok()),
    }
}

/// Browses for hosts for at most `wait`, returning early once `enough` says the hosts found
/// so far suffice (checked as each is resolved). Hosts are listed by name.
pub fn browse(
    wait: Duration,
    mut enough: impl FnMut(&[FoundHost]) -> bool,
) -> Result<Vec<FoundHost>, DiscoveryError> {
    let daemon = daemon()?;
    let rx = daemon.browse(SERVICE_TYPE)?;
    let deadline = Instant::now() + wait;
    let mut hosts: BTreeMap<String, FoundHost> = BTreeMap::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left) {
            Ok(ServiceEvent::ServiceResolved(info)) => {
                let h = found(&info);
                if h.addr().is_some() {
                    hosts.insert(info.get_fullname().to_string(), h);
                    let list: Vec<FoundHost> = hosts.values().cloned().collect();
                    if enough(&list) {
                        break;
                    }
                }
            }
            Ok(ServiceEvent::ServiceRemoved(_, fullname)) => {
                hosts.remove(&fullname);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = daemon.stop_browse(SERVICE_TYPE);
    if let Ok(rx) = daemon.shutdown() {
        let _ = rx.recv_timeout(Duration::from_millis(200));
    }
    let mut list: Vec<FoundHost> = hosts.into_values().collect();
    list.sort_by(|a, b| (&a.name, &a.instance).cmp(&(&b.name, &b.instance)));
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> FoundHost {
        let key = [7u8; 32];
        FoundHost {
            instance: format!("{name} (ABCD)"),
            name: name.into(),
            fingerprint: fingerprint(&key),
            key: Some(key),
            addrs: vec![IpAddr::from([10, 0, 0, 2])],
            port: 9710,
            access: "allowlist".into(),
            web: None,
            rtsp: None,
        }
    }

    #[test]
    fn a_host_is_named_by_its_name_fingerprint_or_key() {
        let h = host("pc");
        assert!(h.is_named("PC"));
        assert!(h.is_named(&h.fingerprint[..9]));
        assert!(h.is_named(&key_hex(&[7u8; 32])));
        assert!(!h.is_named("laptop"));
        assert!(!h.is_named(&h.fingerprint[..4]), "too short to name a key");
        assert!(h.is_keyed_by(&h.fingerprint[..9]) && !h.is_keyed_by("pc"));
        assert_eq!(h.addr(), Some("10.0.0.2:9710".parse().unwrap()));
    }

    #[test]
    fn routable_addresses_come_before_link_local_and_loopback() {
        let mut ips: Vec<IpAddr> = [
            "127.0.0.1",
            "fe80::1",
            "169.254.1.1",
            "192.168.1.5",
            "fd00::2",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        ips.sort_by_key(|ip| (rank(ip), *ip));
        let first: IpAddr = "192.168.1.5".parse().unwrap();
        assert_eq!(ips[0], first);
        assert_eq!(ips[4], "127.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_advertisement_names_the_key_and_what_the_host_serves() {
        let a = Advert {
            name: "studio pc".into(),
            key: [9; 32],
            port: 9710,
            addr: None,
            ipv4_only: true,
            web: Some(("https".into(), 8443)),
            rtsp: Some(8554),
            access: "pin".into(),
        };
        let txt: BTreeMap<String, String> = a.txt().into_iter().collect();
        assert_eq!(txt["key"], key_hex(&[9; 32]));
        assert_eq!(txt["fp"], fingerprint(&[9; 32]));
        assert_eq!(txt["web"], "https:8443");
        assert_eq!(txt["rtsp"], "8554");
        assert!(a.instance().starts_with("studio pc ("));
        assert_eq!(dns_label("my box_1.lan"), "my-box-1-lan");
    }
}
