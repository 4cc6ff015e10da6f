//! The host's small HTTP(S) server, on its own thread beside the network driver (`tiny_http`,
//! synchronous): the page, the WHEP-style signalling endpoint and the clock.
//!
//! - `GET /` — the page (HTML and JS embedded in the binary);
//! - `POST /whep` — an SDP offer (`Content-Type: application/sdp`, `Authorization: Bearer
//!   token:…|pin:…|resume:…`) → `201 Created`, the answer, `Location: /whep/ID` and the page's
//!   resume secret (`X-Untether-Resume`); a malformed offer gets `400` with a one-line reason,
//!   an unadmitted browser `401`/`403`, one that cannot decode the stream `406`;
//! - `DELETE /whep/ID` — ends that session;
//! - `GET /clock` — the host's monotonic clock (`{"mono_us":…}`), for the page's clock mapping.
//!
//! The offer is parsed and the session's DTLS certificate made here, off the driver's thread;
//! the driver admits the browser and answers (it owns the sessions and the PIN).

use std::io::Read;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use str0m::change::SdpOffer;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};

use super::access::{Credential, Refusal};
use super::cert::PageCert;
use super::{rtc_config, OfferRequest, WebRtcCommand};
use crate::driver::Handle;
use crate::host::network::HostCommand;
use crate::host::shared::HostShared;

/// The page: one HTML file with its script.
pub(crate) const PAGE: &str = include_str!("page.html");

/// The largest offer accepted (Chrome's are 5–10 kB).
const MAX_OFFER: usize = 64 * 1024;

/// How long a request waits for the driver's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// A running HTTP server.
pub(crate) struct HttpServer {
    pub addr: SocketAddr,
    pub https: bool,
    pub thread: JoinHandle<()>,
}

/// Binds `addr` (TCP) and starts serving on a `host-http` thread until the host stops.
pub(crate) fn start_http(
    addr: SocketAddr,
    cert: Option<&PageCert>,
    net: Handle<HostCommand>,
    shared: Arc<HostShared>,
) -> Result<HttpServer, String> {
    let server = match cert {
        None => Server::http(addr),
        Some(c) => Server::https(
            addr,
            tiny_http::SslConfig {
                certificate: c.pem.clone(),
                private_key: c.pem.clone(),
            },
        ),
    }
    .map_err(|e| format!("webrtc.listen {addr}: {e}"))?;
    let local = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("webrtc.listen {addr}: not an IP address"))?;
    let thread = std::thread::Builder::new()
        .name("host-http".into())
        .spawn(move || {
            while !shared.stopped() {
                match server.recv_timeout(Duration::from_millis(100)) {
                    Ok(Some(req)) => handle(req, &net),
                    Ok(None) => {}
                    Err(e) => log::debug!("host: http: {e}"),
                }
            }
        })
        .map_err(|e| format!("cannot start the HTTP thread: {e}"))?;
    Ok(HttpServer {
        addr: local,
        https: cert.is_some(),
        thread,
    })
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn with_headers<R: Read>(mut r: Response<R>, headers: &[(&str, &str)]) -> Response<R> {
    for (n, v) in headers {
        if let Some(h) = header(n, v) {
            r.add_header(h);
        }
    }
    r
}

/// A response with a one-line reason (newlines in it become spaces).
fn text(status: u16, reason: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    with_headers(
        Response::from_string(format!("{line}\n")).with_status_code(StatusCode(status)),
        &[
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Access-Control-Allow-Origin", "*"),
        ],
    )
}

/// str0m's SDP parse error without the parser's memory address.
fn parse_error(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    match (s.find(" at PointerOffset("), s.find(')')) {
        (Some(a), Some(b)) if b > a => format!("{}{}", &s[..a], &s[b + 1..]),
        _ => s,
    }
}

fn request_header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

fn handle(mut req: Request, net: &Handle<HostCommand>) {
    let url = req.url().to_string();
    let path = url.split('?').next().unwrap_or("").to_string();
    let method = req.method().clone();
    let response = match (&method, path.as_str()) {
        (Method::Get | Method::Head, "/" | "/index.html") => with_headers(
            Response::from_string(PAGE),
            &[
                ("Content-Type", "text/html; charset=utf-8"),
                ("Cache-Control", "no-store"),
            ],
        ),
        (Method::Get, "/clock") => with_headers(
            Response::from_string(format!(r#"{{"mono_us":{}}}"#, crate::clock::now_us())),
            &[
                ("Content-Type", "application/json"),
                ("Cache-Control", "no-store"),
                ("Access-Control-Allow-Origin", "*"),
            ],
        ),
        (Method::Options, p) if p.starts_with("/whep") => with_headers(
            Response::from_string("").with_status_code(StatusCode(204)),
            &[
                ("Access-Control-Allow-Origin", "*"),
                ("Access-Control-Allow-Methods", "POST, DELETE, OPTIONS"),
                (
                    "Access-Control-Allow-Headers",
                    "Authorization, Content-Type",
                ),
                (
                    "Access-Control-Expose-Headers",
                    "Location, X-Untether-Resume",
                ),
                ("Accept-Post", "application/sdp"),
            ],
        ),
        (Method::Post, "/whep") => post_offer(&mut req, net),
        (Method::Delete, p) if p.starts_with("/whep/") => {
            match p["/whep/".len()..].parse::<u64>() {
                Ok(id) => {
                    let (tx, rx) = mpsc::sync_channel(1);
                    let sent =
                        net.send(HostCommand::WebRtc(WebRtcCommand::Delete { id, reply: tx }));
                    match (sent, rx.recv_timeout(ANSWER_TIMEOUT)) {
                        (true, Ok(true)) => text(200, "session ended"),
                        (true, Ok(false)) => text(404, "no such session"),
                        _ => text(503, "the host is stopping"),
                    }
                }
                Err(_) => text(404, "no such session"),
            }
        }
        (Method::Get | Method::Head | Method::Post | Method::Delete | Method::Options, _) => text(
            404,
            "not found: the page is at /, the signalling endpoint at /whep",
        ),
        _ => text(405, "method not allowed"),
    };
    if let Err(e) = req.respond(response) {
        log::debug!("host: http: respond: {e}");
    }
}

/// `POST /whep`: checks the offer here, then asks the driver to admit and answer.
fn post_offer(req: &mut Request, net: &Handle<HostCommand>) -> Response<std::io::Cursor<Vec<u8>>> {
    let ctype = request_header(req, "Content-Type").unwrap_or("");
    if !ctype
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("application/sdp")
    {
        return text(
            415,
            "the offer must be sent as Content-Type: application/sdp",
        );
    }
    let credential = Credential::from_authorization(request_header(req, "Authorization"));
    let from = req
        .remote_addr()
        .copied()
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut body = Vec::new();
    if let Err(e) = req
        .as_reader()
        .take(MAX_OFFER as u64 + 1)
        .read_to_end(&mut body)
    {
        return text(400, &format!("cannot read the offer: {e}"));
    }
    if body.len() > MAX_OFFER {
        return text(413, &format!("the offer is larger than {MAX_OFFER} bytes"));
    }
    let Ok(sdp) = String::from_utf8(body) else {
        return text(400, "malformed offer: not UTF-8 text");
    };
    if !sdp.trim_start().starts_with("v=0") {
        return text(400, "malformed offer: an SDP offer starts with v=0");
    }
    let offer = match SdpOffer::from_sdp_string(&sdp) {
        Ok(o) => o,
        Err(e) => return text(400, &format!("malformed SDP offer: {}", parse_error(&e))),
    };
    let provider = str0m::crypto::from_feature_flags();
    let Some(cert) = provider.dtls_provider.generate_certificate() else {
        return text(500, "cannot make a DTLS certificate");
    };
    let (tx, rx) = mpsc::sync_channel(1);
    let request = OfferRequest {
        offer,
        config: rtc_config().set_dtls_cert(cert),
        credential,
        from,
        reply: tx,
    };
    if !net.send(HostCommand::WebRtc(WebRtcCommand::Offer(Box::new(request)))) {
        return text(503, "the host is stopping");
    }
    match rx.recv_timeout(ANSWER_TIMEOUT) {
        Ok(Ok(answer)) => {
            let location = format!("/whep/{}", answer.id);
            with_headers(
                Response::from_string(answer.sdp).with_status_code(StatusCode(201)),
                &[
                    ("Content-Type", "application/sdp"),
                    ("Location", &location),
                    ("X-Untether-Resume", &answer.resume),
                    ("Access-Control-Allow-Origin", "*"),
                    (
                        "Access-Control-Expose-Headers",
                        "Location, X-Untether-Resume",
                    ),
                ],
            )
        }
        Ok(Err(Refusal { status, reason })) => text(status, &reason),
        Err(_) => text(503, "the host did not answer in time"),
    }
}
