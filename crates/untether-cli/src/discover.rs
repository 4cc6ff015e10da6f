//! Discovery on the command line: `untether discover` lists the hosts on the local network,
//! `untether client` without an address (or with a name no DNS server knows) finds its host
//! there, and `untether host` advertises itself (unless `--no-advertise`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use untether::config::{ConfigToml, DEFAULT_PORT};
use untether::discovery::{self, Advert, Advertiser, FoundHost};
use untether::identity::{KnownHost, StateDir};
use untether::Host;
use untether_proto::PublicKey;

/// Arguments of `untether discover`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Hosts advertise themselves over mDNS/DNS-SD (`_untether._udp`) unless started \
    with --no-advertise (host.advertise = false). PAIRED says whether this client already \
    trusts the host's key (known_hosts.json in the state directory): a paired host is \
    recognised by its key wherever its address moved. Connect the first time by naming the \
    host, `untether client FINGERPRINT` (or NAME, or ADDRESS), after comparing the fingerprint \
    with the one `untether host` prints: the host must then prove that key. Later a bare \
    `untether client` finds the paired host on its own."
)]
pub struct DiscoverArgs {
    /// How long to listen for hosts: seconds (2) or with a unit (500ms, 3s).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::duration_arg)]
    pub wait: Duration,
    /// Print the hosts as JSON (one array) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// How long `untether client` listens when it looks for its host.
const CLIENT_WAIT: Duration = Duration::from_millis(1500);

/// The entry of `known_hosts.json` that pins this host's key, if any.
fn known_entry<'a>(known: &'a [KnownHost], host: &FoundHost) -> Option<&'a KnownHost> {
    let key = host.key?;
    known
        .iter()
        .find(|k| untether::identity::parse_key(&k.key) == Some(key))
}

fn client_dir(state_dir: Option<&std::path::Path>) -> Result<StateDir> {
    Ok(StateDir::resolve(state_dir)?)
}

/// Runs `untether discover`.
pub fn run(args: DiscoverArgs, state_dir: Option<PathBuf>) -> Result<()> {
    let dir = client_dir(state_dir.as_deref())?;
    let known = dir.known_hosts().unwrap_or_default();
    let hosts = discovery::browse(args.wait, |_| false)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<serde_json::Value> = hosts
            .iter()
            .map(|h| {
                serde_json::json!({
                    "name": h.name,
                    "instance": h.instance,
                    "address": h.addr().map(|a| a.to_string()),
                    "addresses": h.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "fingerprint": h.fingerprint,
                    "paired": known_entry(&known, h).is_some(),
                    "access": h.access,
                    "web": h.web,
                    "rtsp": h.rtsp,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    if hosts.is_empty() {
        writeln!(
            out,
            "no untether host answered within {:.1} s (mDNS on the local network). Is `untether \
             host` running there, without --no-advertise? Multicast must pass between the \
             machines (same network; UDP port 5353 open)",
            args.wait.as_secs_f64()
        )?;
        return Ok(());
    }
    writeln!(out, "{}", table(&hosts, &known).join("\n"))?;
    Ok(())
}

/// The table `untether discover` prints (and `untether client` when it must ask which).
fn table(hosts: &[FoundHost], known: &[KnownHost]) -> Vec<String> {
    let rows: Vec<[String; 5]> = hosts
        .iter()
        .map(|h| {
            let mut serves = vec![format!("udp {}", h.port)];
            if let Some(w) = &h.web {
                serves.push(format!("browser {w}"));
            }
            if let Some(r) = h.rtsp {
                serves.push(format!("rtsp {r}"));
            }
            [
                h.name.clone(),
                h.addr().map_or("?".into(), |a| a.to_string()),
                h.fingerprint.clone(),
                match known_entry(known, h) {
                    Some(k) if k.host != h.name => format!("yes (as {:?})", k.host),
                    Some(_) => "yes".into(),
                    None => "no".into(),
                },
                format!("{} · access {}", serves.join(", "), h.access),
            ]
        })
        .collect();
    let head = ["NAME", "ADDRESS", "FINGERPRINT", "PAIRED", "SERVES"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..4).map(width).collect();
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate().take(4) {
            s.push_str(&format!("{c:<w$}  ", w = widths[i]));
        }
        s.push_str(cells[4]);
        s
    };
    let mut out = vec![line(head)];
    for r in &rows {
        out.push(line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    out
}

/// Where `untether client` connects, the name its key is pinned under, and the key the host
/// must prove when it was chosen from an advertisement.
pub struct Target {
    pub addr: SocketAddr,
    pub label: String,
    /// The advertised key (the host was found on the local network): the handshake must prove
    /// it before anything is trusted. None: an address the user gave (its pin, else trust on
    /// first use).
    pub key: Option<PublicKey>,
}

/// Whether `name` can only be a name to look up (no port, not an IP address).
fn plain_name(name: &str) -> bool {
    !name.contains(':') && name.parse::<std::net::IpAddr>().is_err()
}

/// The host `untether client` connects to: `wanted` resolved as an address or a DNS name;
/// else (no address, or a name DNS does not know) found on the local network.
///
/// An advertisement is anyone's claim, so a host found there is bound to its advertised key
/// (the handshake must prove it) and chosen only where that cannot be an impostor's choice:
/// named by its fingerprint or key; by its name when it is the only host of that name (or
/// the paired one among several); with no name at all, only a host this client is already
/// paired with.
pub fn client_target(wanted: Option<&str>, state_dir: Option<&std::path::Path>) -> Result<Target> {
    let resolved = match wanted {
        Some(w) => match untether::resolve_host(w, DEFAULT_PORT) {
            Ok(addr) => {
                return Ok(Target {
                    addr,
                    label: w.to_string(),
                    key: None,
                })
            }
            Err(e) if plain_name(w) => Some(e.to_string()),
            Err(e) => bail!("{e}"),
        },
        None => None,
    };
    let dir = client_dir(state_dir)?;
    let known = dir.known_hosts().unwrap_or_default();
    let paired = |h: &FoundHost| known_entry(&known, h).is_some();
    // A paired host is recognised by its key: its pin applies (under the name it was pinned
    // by) and learns the address it moved to.
    let label = |h: &FoundHost| {
        known_entry(&known, h)
            .map(|k| k.host.clone())
            .unwrap_or_else(|| h.name.clone())
    };
    if let Some(w) = wanted {
        eprintln!("untether client: looking for {w:?} on the local network (mDNS) …");
        let named =
            |h: &FoundHost| h.is_named(w) || known_entry(&known, h).is_some_and(|k| k.host == w);
        // Named by its key, or a paired host of that name: found. Otherwise listen the whole
        // time: a second host claiming the name must not go unseen.
        let sure = |h: &FoundHost| h.is_keyed_by(w) || (named(h) && paired(h));
        let hosts = discovery::browse(CLIENT_WAIT, |found| found.iter().any(sure))?;
        let matching: Vec<&FoundHost> = hosts.iter().filter(|h| named(h)).collect();
        if let Some(h) = matching.iter().find(|h| sure(h)) {
            return pick(h, label(h));
        }
        return match matching.as_slice() {
            [] => bail!(
                "{}; and no host named {w:?} answered on the local network within {:.1} s \
                 (`untether discover` lists the hosts there)",
                resolved.unwrap_or_default(),
                CLIENT_WAIT.as_secs_f64()
            ),
            [one] => pick(one, label(one)),
            several => {
                bail!(
                "{} hosts on the local network call themselves {w:?}, with different keys (one \
                 may be an impostor): say which by its fingerprint, as `untether host` shows \
                 it: `untether client FINGERPRINT`\n{}",
                several.len(),
                table(&several.iter().map(|h| (*h).clone()).collect::<Vec<_>>(), &known)
                    .join("\n")
            )
            }
        };
    }
    eprintln!("untether client: no address given: looking for hosts on the local network (mDNS) …");
    let hosts = discovery::browse(CLIENT_WAIT, |_| false)?;
    let known_ones: Vec<&FoundHost> = hosts.iter().filter(|h| paired(h)).collect();
    match (known_ones.as_slice(), hosts.as_slice()) {
        ([one], _) => pick(one, label(one)),
        (_, []) => bail!(
            "no untether host answered on the local network within {:.1} s (mDNS): is `untether \
             host` running there (without --no-advertise)? Or give its address: untether \
             client HOST[:PORT]",
            CLIENT_WAIT.as_secs_f64()
        ),
        ([], [one]) => bail!(
            "found {:?} at {} ({}), which this client has not paired with yet. Anyone on the \
             network can advertise a host, so a new one is not chosen on its own: check that \
             fingerprint against the one `untether host` shows, then connect by naming it: \
             `untether client {}`",
            one.name,
            one.addr().map_or("?".into(), |a| a.to_string()),
            one.fingerprint,
            one.fingerprint
        ),
        (several, _) => {
            let list: Vec<FoundHost> = if several.is_empty() {
                hosts.clone()
            } else {
                several.iter().map(|h| (*h).clone()).collect()
            };
            bail!(
                "{} {}hosts answered on the local network; say which: `untether client NAME` \
                 (or FINGERPRINT, or ADDRESS)\n{}",
                list.len(),
                if several.is_empty() { "" } else { "paired " },
                table(&list, &known).join("\n")
            )
        }
    }
}

fn pick(h: &FoundHost, label: String) -> Result<Target> {
    let Some(addr) = h.addr() else {
        bail!("host {:?} advertised no address", h.name);
    };
    let Some(key) = h.key else {
        bail!(
            "host {:?} at {addr} advertised no valid key, so there is nothing to prove it is \
             the host you mean: connect by its address (`untether client {addr}`) and compare \
             the fingerprint",
            h.name
        );
    };
    eprintln!(
        "untether client: found {:?} at {addr} ({}){}; the host must prove that key",
        h.name,
        h.fingerprint,
        if label != h.name {
            format!(", paired as {label:?}")
        } else {
            String::new()
        }
    );
    Ok(Target {
        addr,
        label,
        key: Some(key),
    })
}

/// Advertises a started host (unless `host.advertise` is off): its UDP port, name, key, and the
/// browser page and RTSP port when it serves them. A failure is one warning: the host runs on.
pub fn advertise(host: &Host, cfg: &ConfigToml, rtsp_port: Option<u16>) -> Option<Advertiser> {
    if !cfg.host.advertise {
        return None;
    }
    let web = host.browser_url().and_then(|u| {
        let (scheme, rest) = u.split_once("://")?;
        let authority = rest.split('/').next()?;
        let port = authority.rsplit_once(':')?.1.parse().ok()?;
        Some((scheme.to_string(), port))
    });
    let advert = Advert {
        name: if cfg.host.name.trim().is_empty() {
            discovery::machine_name()
        } else {
            cfg.host.name.trim().to_string()
        },
        key: host.public_key(),
        port: host.local_addr().port(),
        addr: Some(host.local_addr().ip()).filter(|ip| !ip.is_unspecified()),
        ipv4_only: host.local_addr().is_ipv4(),
        web,
        rtsp: rtsp_port,
        access: host.options().host.access.name().to_string(),
    };
    match Advertiser::start(&advert) {
        Ok(a) => {
            eprintln!(
                "untether host: advertised on the local network as {:?} (mDNS `_untether._udp`; \
                 clients: `untether discover`, `untether client`; --no-advertise turns it off)",
                advert.name
            );
            Some(a)
        }
        Err(e) => {
            log::warn!("host: not advertised on the local network: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_which_hosts_are_paired_and_what_they_serve() {
        let key = [3u8; 32];
        let h = FoundHost {
            instance: "pc (ABCD)".into(),
            name: "pc".into(),
            fingerprint: untether::identity::fingerprint(&key),
            key: Some(key),
            addrs: vec!["10.0.0.2".parse().unwrap()],
            port: 9710,
            access: "allowlist".into(),
            web: Some("https:8443".into()),
            rtsp: None,
        };
        let known = vec![KnownHost {
            host: "studio".into(),
            addr: "10.0.0.9:9710".into(),
            key: untether::identity::key_hex(&key),
            added: 0,
        }];
        let t = table(std::slice::from_ref(&h), &known);
        assert!(t[0].starts_with("NAME"));
        assert!(t[1].contains("10.0.0.2:9710"), "{t:?}");
        assert!(t[1].contains("yes (as \"studio\")"), "{t:?}");
        assert!(t[1].contains("browser https:8443"), "{t:?}");
        let t = table(&[h], &[]);
        assert!(t[1].contains(" no "), "{t:?}");
        assert!(plain_name("pc") && !plain_name("pc:9710") && !plain_name("10.0.0.2"));
    }
}
