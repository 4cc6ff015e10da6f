//! WHIP publishing (RFC 9725): the host offers its stream once to a WHIP endpoint (e.g.
//! Janus's VideoRoom behind `simple-whip-server`), which then serves any number of viewers. The
//! `host-whip` thread makes the offer with str0m, POSTs it, applies the answer and hands the
//! session to the network driver, which feeds it the same frames and audio as every other
//! session; when the host stops, the thread DELETEs the resource. A failed attempt is retried
//! with a growing pause (2 s up to 30 s), told once per distinct reason.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::Candidate;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

use super::types::{route_source, rtc_config, Publication, WebRtcCommand};
use crate::driver::Handle;
use crate::host::commands::HostCommand;
use crate::host::shared::HostShared;

/// A running publisher thread.
pub(crate) struct WhipPublisher {
    pub thread: JoinHandle<()>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .tls_config(
            TlsConfig::builder()
                .provider(TlsProvider::NativeTls)
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

/// The endpoint's host address (for the candidate's route).
pub(crate) fn endpoint_ip(url: &str) -> Option<IpAddr> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split('/').next()?;
    let default_port = if url.starts_with("https://") { 443 } else { 80 };
    let with_port = if authority.starts_with('[') || authority.matches(':').count() != 1 {
        if authority.contains("]:") {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        }
    } else {
        authority.to_string()
    };
    with_port.to_socket_addrs().ok()?.next().map(|a| a.ip())
}

/// `scheme://authority` of a URL, lower-cased (for comparing origins).
fn origin(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    url[..end].to_ascii_lowercase()
}

/// Whether the bearer token may go to `resource` (the server's `Location`): only on the
/// endpoint's own origin. A server answering with another origin's address never gets the
/// token sent there (issue 33: the DELETE carried it to whatever `Location` said).
pub(crate) fn token_may_go_to(endpoint: &str, resource: &str) -> bool {
    origin(endpoint) == origin(resource)
}

/// `Location` resolved against the endpoint's URL.
pub(crate) fn resolve_location(endpoint: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    let scheme_end = endpoint.find("://").map_or(0, |i| i + 3);
    let origin_end = endpoint[scheme_end..]
        .find('/')
        .map_or(endpoint.len(), |i| scheme_end + i);
    if location.starts_with('/') {
        format!("{}{location}", &endpoint[..origin_end])
    } else {
        let dir_end = endpoint
            .rfind('/')
            .filter(|&i| i >= origin_end)
            .unwrap_or(origin_end);
        format!("{}/{location}", &endpoint[..dir_end])
    }
}

/// One attempt: offer, POST, answer; the session and the resource URL.
fn publish_once(
    url: &str,
    token: &str,
    socket: SocketAddr,
    audio: bool,
) -> Result<(Publication, Option<String>), String> {
    let cand = if socket.ip().is_unspecified() {
        let ip = endpoint_ip(url).ok_or_else(|| format!("cannot resolve the host of {url}"))?;
        let local = route_source(ip).ok_or_else(|| format!("no route to {ip}"))?;
        SocketAddr::new(local, socket.port())
    } else {
        socket
    };
    let mut rtc = rtc_config().build(Instant::now());
    let candidate =
        Candidate::host(cand, "udp").map_err(|e| format!("host candidate {cand}: {e}"))?;
    rtc.add_local_candidate(candidate);
    let mut change = rtc.sdp_api();
    let mut mids = vec![change.add_media(MediaKind::Video, Direction::SendOnly, None, None, None)];
    if audio {
        mids.push(change.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None));
    }
    let (offer, pending) = change
        .apply()
        .ok_or_else(|| "str0m made no offer".to_string())?;
    let mut req = agent().post(url).header("Content-Type", "application/sdp");
    if !token.is_empty() {
        req = req.header("Authorization", &format!("Bearer {token}"));
    }
    let mut resp = req
        .send(offer.to_sdp_string())
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(|l| resolve_location(url, l));
    let body = resp
        .body_mut()
        .with_config()
        .limit(256 * 1024)
        .read_to_string()
        .map_err(|e| format!("POST {url}: reading the answer: {e}"))?;
    if status != 201 && status != 200 {
        let line = body.lines().next().unwrap_or("").trim().to_string();
        return Err(format!("POST {url}: HTTP {status} {line}"));
    }
    let answer = SdpAnswer::from_sdp_string(&body)
        .map_err(|e| format!("POST {url}: the answer is not SDP: {e}"))?;
    rtc.sdp_api()
        .accept_answer(pending, answer)
        .map_err(|e| format!("POST {url}: cannot use the answer: {e}"))?;
    Ok((
        Publication {
            rtc,
            mids,
            label: url.to_string(),
        },
        location,
    ))
}

/// Starts the `host-whip` thread: publishes to `url` until the host stops, then DELETEs. Err:
/// the thread cannot start.
pub(crate) fn start_whip(
    url: String,
    token: String,
    socket: SocketAddr,
    audio: bool,
    net: Handle<HostCommand>,
    shared: Arc<HostShared>,
) -> std::io::Result<WhipPublisher> {
    let thread = std::thread::Builder::new()
        .name("host-whip".into())
        .spawn(move || {
            let mut pause = Duration::from_secs(2);
            let mut last_error = String::new();
            let mut resource = None;
            while !shared.stopped() {
                match publish_once(&url, &token, socket, audio) {
                    Ok((publication, location)) => {
                        resource = location;
                        if !net.send(HostCommand::WebRtc(WebRtcCommand::Publish(Box::new(
                            publication,
                        )))) {
                            return;
                        }
                        break;
                    }
                    Err(e) => {
                        if e != last_error {
                            shared.note(format!(
                                "WHIP: cannot publish ({e}); retrying every {} s at most",
                                30
                            ));
                            last_error = e;
                        }
                        let until = Instant::now() + pause;
                        while Instant::now() < until && !shared.stopped() {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        pause = (pause * 2).min(Duration::from_secs(30));
                    }
                }
            }
            while !shared.stopped() {
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Some(r) = resource {
                let _ = net.send(HostCommand::WebRtc(WebRtcCommand::Unpublish));
                let mut req = agent().delete(&r);
                if !token.is_empty() && token_may_go_to(&url, &r) {
                    req = req.header("Authorization", &format!("Bearer {token}"));
                } else if !token.is_empty() {
                    log::warn!(
                        "host: WHIP: the resource {r} is not on the endpoint's origin: its DELETE \
                         goes without the bearer token"
                    );
                }
                match req.call() {
                    Ok(resp) => log::info!("host: WHIP: DELETE {r}: HTTP {}", resp.status()),
                    Err(e) => log::warn!("host: WHIP: DELETE {r}: {e}"),
                }
            }
        })?;
    Ok(WhipPublisher { thread })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_endpoint() {
        let ep = "http://127.0.0.1:7080/whip/endpoint/abc";
        assert_eq!(
            resolve_location(ep, "/whip/resource/1"),
            "http://127.0.0.1:7080/whip/resource/1"
        );
        assert_eq!(
            resolve_location(ep, "https://x/r"),
            "https://x/r".to_string()
        );
        assert_eq!(
            resolve_location(ep, "r/2"),
            "http://127.0.0.1:7080/whip/endpoint/r/2"
        );
        assert_eq!(endpoint_ip(ep), Some("127.0.0.1".parse().unwrap()));
        assert!(token_may_go_to(
            ep,
            &resolve_location(ep, "/whip/resource/1")
        ));
        assert!(token_may_go_to(ep, "HTTP://127.0.0.1:7080/other"));
        assert!(!token_may_go_to(ep, "https://x/r"), "another origin");
        assert!(
            !token_may_go_to(ep, "http://127.0.0.1:7081/whip/r"),
            "another port"
        );
        assert!(
            !token_may_go_to(ep, "https://127.0.0.1:7080/whip/r"),
            "another scheme"
        );
        assert!(!token_may_go_to(ep, "http://127.0.0.1:7080@evil.example/r"));
        assert_eq!(
            endpoint_ip("http://[::1]:8/x"),
            Some("::1".parse().unwrap())
        );
    }
}
