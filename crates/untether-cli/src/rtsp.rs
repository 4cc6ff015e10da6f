//! `--rtsp ADDR:PORT` on `untether host` and `demo`: starts the RTSP server (crate
//! `untether-rtsp`) before the host, gives it to the host as a consumer of its stream, and says
//! how to play it.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Result;
use untether::config::{ConfigToml, RtspAuth};
use untether::host::{Consumer, HostSetup};
use untether::identity::Access;
use untether_rtsp::RtspServer;

/// Starts the RTSP server `cfg.rtsp` asks for (none when `rtsp.listen` is empty) and adds it
/// to `setup`'s consumers. `access`: the host's, for `rtsp.auth = "auto"`. The server decides
/// with the host's one admission (`setup.admission`): an address has one budget and one count
/// of wrong credentials for RTSP, the browsers and the host's clients.
pub fn start(
    cfg: &ConfigToml,
    access: Access,
    setup: &mut HostSetup,
) -> Result<Option<Arc<RtspServer>>> {
    if !cfg.rtsp.enabled() {
        return Ok(None);
    }
    let server = Arc::new(
        RtspServer::start_with(&cfg.rtsp, access, setup.admission.clone()).map_err(with_flag)?,
    );
    setup.consumers.push(Consumer(server.clone()));
    Ok(Some(server))
}

/// What the server saw (its viewers), for the host's summary.
pub fn summary(server: &RtspServer) -> untether::host::ConsumerSummary {
    untether::host::StreamConsumer::summary(server)
}

/// Names the flag beside the key: `rtsp.listen (--rtsp): …`.
fn with_flag(e: untether_rtsp::RtspError) -> anyhow::Error {
    match e {
        untether_rtsp::RtspError::Config(c) => crate::with_flag(c),
        e => e.into(),
    }
}

/// What the operator needs to know: where, who may watch, and a command that plays it.
/// The RTSP server's TCP port (advertised on the local network).
pub fn port(server: &RtspServer) -> u16 {
    server.local_addr().port()
}

pub fn announce(who: &str, server: &RtspServer, cfg: &ConfigToml, access: Access) {
    let addr = server.local_addr();
    let (udp, tcp) = cfg.rtsp.transports().unwrap_or((true, true));
    let transports = match (udp, tcp) {
        (true, true) => "RTP over UDP or TCP",
        (true, false) => "RTP over UDP only",
        _ => "RTP over TCP only",
    };
    eprintln!(
        "untether {who}: RTSP on {} ({transports}, at most {} viewers)",
        server.url(),
        cfg.rtsp.max_viewers
    );
    let host = match addr.ip() {
        ip if ip.is_unspecified() => {
            // Every interface: the address to type depends on where the player is.
            let local = if matches!(ip, IpAddr::V6(_)) {
                "::1"
            } else {
                "127.0.0.1"
            };
            eprintln!(
                "untether {who}: play it here: ffplay -fflags nobuffer -flags low_delay \"{}\" (elsewhere: this machine's address instead of {local})",
                server.url_for(local, true)
            );
            return say_auth(who, server, cfg, access);
        }
        ip => ip.to_string(),
    };
    eprintln!(
        "untether {who}: play it: ffplay -fflags nobuffer -flags low_delay \"{}\"",
        server.url_for(&host, true)
    );
    say_auth(who, server, cfg, access);
}

fn say_auth(who: &str, server: &RtspServer, cfg: &ConfigToml, access: Access) {
    match server.credentials() {
        Some(c) => eprintln!(
            "untether {who}: RTSP viewers authenticate (digest): user {} · password {}{}",
            c.user,
            c.password,
            if cfg.rtsp.password.is_empty() {
                " (new at every start; set rtsp.password to keep one)"
            } else {
                ""
            }
        ),
        None => {
            let why = if cfg.rtsp.auth_mode(access).ok() == Some(RtspAuth::None)
                && cfg.rtsp.auth == "auto"
            {
                "the host's access is open"
            } else {
                "rtsp.auth = \"none\""
            };
            eprintln!(
                "untether {who}: WARNING: RTSP is OPEN ({why}) — anyone who can reach tcp {} may watch",
                server.local_addr()
            );
        }
    }
}
