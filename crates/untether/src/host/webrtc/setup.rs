//! Starting the WebRTC side with the host: the page's certificate, the HTTP(S) server, the
//! media sockets, the WHIP publisher, and the driver's [`WebRtc`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::cert;
use super::h264::CONSTRAINED_BASELINE_X264;
use super::http::{start_http, MakeService, ServerName};
use super::routes::Routes;
use super::sessions::{Sockets, WebRtc};
use super::types::{route_source, SOCKET};
use super::whip::{self, start_whip};
use crate::host::shared::HostShared;
use std::rc::Rc;

/// Where browsers find the host, for the link it prints.
#[derive(Clone, Debug)]
pub(crate) struct BrowserInfo {
    /// `http(s)://ADDR:PORT/` (ADDR: the listen address, or this machine's address on the
    /// default route when listening on every interface).
    pub base_url: String,
    /// The page's certificate fingerprint (HTTPS only).
    pub fingerprint: Option<String>,
}

/// What [`start`] made: the driver's WebRTC side, its socket, the threads, the page's address.
pub(crate) struct Started {
    pub webrtc: Box<WebRtc>,
    /// The driver's sockets from [`SOCKET`] on.
    pub sockets: Vec<untether_net::UdpEndpoint>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
    pub browsers: Option<BrowserInfo>,
}

impl Started {
    /// The driver's sockets (ours, then the WebRTC one), its WebRTC side and the page's
    /// address; the threads join the host's.
    pub fn split(
        started: Option<Started>,
        socket: untether_net::UdpEndpoint,
        threads: &mut Vec<std::thread::JoinHandle<()>>,
    ) -> (
        Vec<untether_net::UdpEndpoint>,
        Option<Box<WebRtc>>,
        Option<BrowserInfo>,
    ) {
        match started {
            None => (vec![socket], None, None),
            Some(w) => {
                threads.extend(w.threads);
                let mut all = vec![socket];
                all.extend(w.sockets);
                (all, Some(w.webrtc), w.browsers)
            }
        }
    }
}

/// A host that serves browsers or publishes encodes constrained baseline, the H.264 profile
/// every WebRTC browser decodes: the one stream is encoded so (no second encode for them).
pub(crate) fn prepare(options: &mut crate::host::options::HostOptions) {
    if options.webrtc.enabled() {
        let params = &mut options.video.encoder_params;
        if !params.is_empty() {
            params.push(':');
        }
        params.push_str(CONSTRAINED_BASELINE_X264);
    }
}

/// Starts what `[webrtc]` asks for: the HTTP(S) server for browsers (`listen`) and the WHIP
/// publisher (`publish`), and binds the media socket (UDP, the HTTP port when free).
pub(crate) fn start(
    options: &crate::host::options::HostOptions,
    pairing: &crate::host::pairing::Pairing,
    audio: bool,
    net: &crate::driver::Handle<crate::host::commands::HostCommand>,
    shared: &Arc<HostShared>,
    admission: &untether_proto::admission::Admission,
) -> Result<Option<Started>, crate::host::error::HostError> {
    use crate::host::error::HostError;
    let w = &options.webrtc;
    if !w.enabled() {
        return Ok(None);
    }
    let (dir, open) = (
        pairing.dir.as_ref(),
        pairing.access == crate::identity::Access::Open,
    );
    // The page's certificate and its server: their errors, as they say them.
    fn usage(e: impl std::fmt::Display) -> crate::host::error::HostError {
        crate::host::error::HostError::Usage(e.to_string())
    }
    let listen = w.listen_addr()?;
    let publish = w.publish_url()?;
    let listen_ip = listen.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
    let shown_ip = if listen_ip.is_unspecified() {
        route_source(IpAddr::from([192, 0, 2, 1])).unwrap_or(IpAddr::from([127, 0, 0, 1]))
    } else {
        listen_ip
    };
    let mut threads = Vec::new();
    let mut browsers = None;
    let mut sockets = Vec::new();
    let mut browser_socket = None;
    if let Some(addr) = listen {
        let cert = cert::page_cert(&w.cert_source()?, dir, &[shown_ip]).map_err(usage)?;
        let routes_net = net.clone();
        let routes_admission = admission.clone();
        let make: MakeService =
            Box::new(move || Rc::new(Routes::new(routes_net, routes_admission)));
        let name = ServerName {
            key: "webrtc.listen",
            thread: "host-http",
        };
        let http = start_http(name, addr, cert.as_ref(), make, shared.clone()).map_err(usage)?;
        let scheme = if http.https { "https" } else { "http" };
        if !http.https && !addr.ip().is_loopback() {
            // Issue 33: the page's one-time links, PINs and session secrets would cross the
            // network in the clear.
            log::warn!(
                "host: the browser page listens on {addr} over plain HTTP: its links, PINs and \
                 session secrets cross the network unencrypted (anyone on it can read them); \
                 webrtc.cert = \"auto\" (--webrtc-cert auto) serves HTTPS"
            );
        }
        browsers = Some(BrowserInfo {
            base_url: format!(
                "{scheme}://{}/",
                SocketAddr::new(shown_ip, http.addr.port())
            ),
            fingerprint: cert.map(|c| c.fingerprint),
        });
        threads.push(http.thread);
        // The media on the HTTP port's number when it is free.
        let udp = untether_net::UdpEndpoint::bind(SocketAddr::new(listen_ip, http.addr.port()))
            .or_else(|_| untether_net::UdpEndpoint::bind(SocketAddr::new(listen_ip, 0)))?;
        browser_socket = Some((SOCKET + sockets.len(), udp.local_addr()?));
        sockets.push(udp);
    }
    let mut publish_socket = None;
    if let Some(url) = &publish {
        // On the address that routes to the endpoint (every interface if that is unknown).
        let ip = whip::endpoint_ip(url)
            .and_then(route_source)
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let udp = untether_net::UdpEndpoint::bind(SocketAddr::new(ip, 0))?;
        publish_socket = Some((SOCKET + sockets.len(), udp.local_addr()?));
        sockets.push(udp);
    }
    let mut webrtc = Box::new(WebRtc::new(
        Sockets {
            browser: browser_socket,
            listen_ip,
            publish: publish_socket,
        },
        open,
        w.link_ttl_s,
        w.max_browsers,
        admission.clone(),
    ));
    if let Some(dir) = &pairing.dir {
        webrtc.keep_resume_in(dir.clone(), crate::clock::now_us());
    }
    if let (Some(url), Some((_, local))) = (publish, publish_socket) {
        let p = start_whip(
            url,
            w.publish_token.clone(),
            local,
            audio,
            net.clone(),
            shared.clone(),
        )
        .map_err(|e| HostError::Usage(format!("cannot start the WHIP thread: {e}")))?;
        threads.push(p.thread);
    }
    Ok(Some(Started {
        webrtc,
        sockets,
        threads,
        browsers,
    }))
}
