//! What the page's server answers (see `http` for the connections it takes):
//!
//! - `GET /` — the page (HTML and JS embedded in the binary);
//! - `POST /whep` — an SDP offer (`Content-Type: application/sdp`, `Authorization: Bearer
//!   token:…|pin:…|resume:…`) → `201 Created`, the answer, `Location: /whep/ID` (ID: 128
//!   random bits), the session's secret (`X-Untether-Session`, which a DELETE presents) and
//!   the page's resume secret (`X-Untether-Resume`); a malformed offer gets `400` with a
//!   one-line reason, an unadmitted browser `401`/`403`, one that cannot decode the stream
//!   `406`, an address sending offers too fast (or refused for guessing credentials: the
//!   host's one admission, shared with its other doors) `429` with `Retry-After`, a body not
//!   sent within
//!   [`BODY_READ`] `408`;
//! - `DELETE /whep/ID` with `Authorization: Bearer SECRET` — ends that session; a wrong secret
//!   (`403`) counts as a wrong credential of the host's one admission, and an address refused
//!   there gets `429` unchecked;
//! - `GET /clock` — the host's monotonic clock (`{"mono_us":…}`), for the page's clock mapping.
//!
//! No CORS header is sent: only the page itself (same origin) may use these.
//! The offer is only parsed here; the driver admits the browser, then makes its session.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use str0m::change::SdpOffer;
use tokio::sync::oneshot;
use untether_proto::admission::{self, Admission, Decision, RefuseReason};

use super::access::Credential;
use super::types::{OfferRequest, WebRtcCommand};
use crate::driver::Handle;
use crate::host::commands::HostCommand;

/// The page: one HTML file with its script.
pub(crate) const PAGE: &str = include_str!("page.html");

/// The largest offer accepted (Chrome's are 5–10 kB).
const MAX_OFFER: usize = 64 * 1024;
/// How long a client has to send an offer's body.
pub(super) const BODY_READ: Duration = Duration::from_secs(10);
/// How long a request waits for the driver's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// A response.
pub(crate) type Reply = Response<Full<Bytes>>;

/// The routes and what they share: the driver's handle and the host's one admission.
pub(super) struct Routes {
    net: Handle<HostCommand>,
    admission: Admission,
}

impl Routes {
    pub fn new(net: Handle<HostCommand>, admission: Admission) -> Routes {
        Routes { net, admission }
    }

    /// Answers one request from `from`.
    pub async fn answer(&self, req: Request<Incoming>, from: SocketAddr) -> Reply {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        match (&method, path.as_str()) {
            (&Method::GET | &Method::HEAD, "/" | "/index.html") => respond(
                200,
                &[
                    ("Content-Type", "text/html; charset=utf-8"),
                    ("Cache-Control", "no-store"),
                ],
                PAGE,
            ),
            (&Method::GET, "/clock") => respond(
                200,
                &[
                    ("Content-Type", "application/json"),
                    ("Cache-Control", "no-store"),
                ],
                format!(r#"{{"mono_us":{}}}"#, crate::clock::now_us()),
            ),
            (&Method::OPTIONS, p) if p.starts_with("/whep") => respond(
                204,
                &[
                    ("Allow", "POST, DELETE, OPTIONS"),
                    ("Accept-Post", "application/sdp"),
                ],
                "",
            ),
            (&Method::POST, "/whep") => self.post_offer(req, from).await,
            (&Method::DELETE, p) if p.starts_with("/whep/") => {
                let id = p["/whep/".len()..].to_string();
                self.delete(&id, &req, from).await
            }
            (
                &Method::GET | &Method::HEAD | &Method::POST | &Method::DELETE | &Method::OPTIONS,
                _,
            ) => text(
                404,
                "not found: the page is at /, the signalling endpoint at /whep",
            ),
            _ => text(405, "method not allowed"),
        }
    }

    /// `POST /whep`: the host's admission, checks, then the driver checks the credential and
    /// answers.
    async fn post_offer(&self, req: Request<Incoming>, from: SocketAddr) -> Reply {
        let credential = Credential::from_authorization(request_header(&req, "Authorization"));
        // One attempt of the address's budget per offer, whatever it carries; none at all
        // while the address is refused for guessing (here or at another door).
        let incoming = admission::Incoming::connection(from.ip(), credential.kind());
        let refused = match self.admission.decide(crate::clock::now_us(), &incoming) {
            Decision::Accept => None,
            Decision::Refuse {
                reason: RefuseReason::WrongCredentials,
                retry_after_us,
            } => Some((
                "too many wrong links, PINs or resume secrets",
                retry_after_us,
            )),
            Decision::Refuse {
                reason: RefuseReason::Budget,
                retry_after_us,
            } => Some(("too many offers", retry_after_us)),
            // Not for a connection's address (validated); refused alike should it come.
            Decision::Retry | Decision::Ignore => Some(("too many offers", 1_000_000)),
        };
        if let Some((what, retry_after_us)) = refused {
            return too_many(what, from, retry_after_us);
        }
        let ctype = request_header(&req, "Content-Type").unwrap_or("");
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
        let offer = match read_body(req).await.and_then(|b| parse_offer(&b)) {
            Ok(o) => o,
            Err((status, reason)) => return text(status, &reason),
        };
        let (tx, rx) = oneshot::channel();
        let request = OfferRequest {
            offer,
            credential,
            from,
            reply: tx,
        };
        if !self
            .net
            .send(HostCommand::WebRtc(WebRtcCommand::Offer(Box::new(request))))
        {
            return text(503, "the host is stopping");
        }
        match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
            Ok(Ok(Ok(answer))) => {
                let location = format!("/whep/{}", answer.resource.id);
                respond(
                    201,
                    &[
                        ("Content-Type", "application/sdp"),
                        ("Location", &location),
                        ("X-Untether-Session", &answer.resource.secret),
                        ("X-Untether-Resume", &answer.resume),
                        ("Cache-Control", "no-store"),
                    ],
                    answer.sdp,
                )
            }
            Ok(Ok(Err(refusal))) => text(refusal.status, &refusal.reason),
            Ok(Err(_)) => text(503, "the host is stopping"),
            Err(_) => text(503, "the host did not answer in time"),
        }
    }

    /// `DELETE /whep/ID`: ends the session if the secret is its own. It takes nothing of the
    /// address's budget (it starts nothing), but an address refused for guessing is refused
    /// here too, unchecked, and a wrong secret counts as a wrong credential (the driver tells
    /// the admission).
    async fn delete(&self, id: &str, req: &Request<Incoming>, from: SocketAddr) -> Reply {
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return text(404, "no such session");
        }
        let now = crate::clock::now_us();
        if let Some(until) = self.admission.refused_until(now, from.ip()) {
            self.admission.note_refused(now, from.ip());
            return too_many(
                "too many wrong links, PINs or secrets",
                from,
                until.saturating_sub(now),
            );
        }
        let secret = request_header(req, "Authorization")
            .and_then(|v| v.trim().strip_prefix("Bearer "))
            .map(|s| s.trim().to_string());
        let (tx, rx) = oneshot::channel();
        let cmd = WebRtcCommand::Delete {
            id: id.to_string(),
            secret,
            from,
            reply: tx,
        };
        if !self.net.send(HostCommand::WebRtc(cmd)) {
            return text(503, "the host is stopping");
        }
        match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
            Ok(Ok(Ok(()))) => text(200, "session ended"),
            Ok(Ok(Err(r))) => text(r.status(), r.reason()),
            Ok(Err(_)) => text(503, "the host is stopping"),
            Err(_) => text(503, "the host did not answer in time"),
        }
    }
}

impl super::http::Service for Routes {
    fn handle(
        self: std::rc::Rc<Self>,
        req: Request<Incoming>,
        from: SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Reply>>> {
        Box::pin(async move { self.answer(req, from).await })
    }
}

/// 429 with `Retry-After`: `what` came from `from`'s address too often.
fn too_many(what: &str, from: SocketAddr, retry_after_us: u64) -> Reply {
    let secs = retry_after_us.div_ceil(1_000_000).max(1).to_string();
    with_headers(
        text(
            429,
            &format!("{what} from {}: try again in {secs} s", from.ip()),
        ),
        &[("Retry-After", &secs)],
    )
}

/// Why a request is refused: its status and a one-line reason.
type Refused = (u16, String);

fn refused(status: u16, reason: &str) -> Refused {
    (status, reason.to_string())
}

/// The offer's body, within [`MAX_OFFER`] bytes and [`BODY_READ`].
async fn read_body(req: Request<Incoming>) -> Result<Bytes, Refused> {
    let declared = request_header(&req, "Content-Length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_OFFER as u64) {
        return Err(too_large());
    }
    let body = Limited::new(req.into_body(), MAX_OFFER).collect();
    match tokio::time::timeout(BODY_READ, body).await {
        Err(_) => Err(refused(
            408,
            &format!("the offer did not arrive within {} s", BODY_READ.as_secs()),
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(refused(400, &format!("cannot read the offer: {e}"))),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

fn too_large() -> Refused {
    refused(413, &format!("the offer is larger than {MAX_OFFER} bytes"))
}

/// Checks and parses an offer's text.
fn parse_offer(body: &[u8]) -> Result<SdpOffer, Refused> {
    let Ok(sdp) = std::str::from_utf8(body) else {
        return Err(refused(400, "malformed offer: not UTF-8 text"));
    };
    if !sdp.trim_start().starts_with("v=0") {
        return Err(refused(
            400,
            "malformed offer: an SDP offer starts with v=0",
        ));
    }
    let offer = SdpOffer::from_sdp_string(sdp)
        .map_err(|e| refused(400, &format!("malformed SDP offer: {}", parse_error(&e))))?;
    if !offers_h264(sdp) {
        // Before admission, so that such a browser uses up no link or PIN.
        return Err(refused(
            406,
            "this browser offers no H.264 (the one stream the host encodes); Chrome, Edge and \
             Safari do, Firefox with its OpenH264 plugin",
        ));
    }
    Ok(offer)
}

/// Whether an offer has an H.264 payload type at all.
fn offers_h264(sdp: &str) -> bool {
    sdp.lines().any(|l| {
        l.trim()
            .strip_prefix("a=rtpmap:")
            .and_then(|r| r.split_whitespace().nth(1))
            .is_some_and(|codec| codec.to_ascii_uppercase().starts_with("H264/"))
    })
}

/// str0m's SDP parse error without the parser's memory address.
fn parse_error(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    match (s.find(" at PointerOffset("), s.find(')')) {
        (Some(a), Some(b)) if b > a => format!("{}{}", &s[..a], &s[b + 1..]),
        _ => s,
    }
}

pub(crate) fn request_header<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A response with a status, headers (invalid ones are left out) and a body.
pub(crate) fn respond(status: u16, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
    let r = Response::new(Full::new(body.into()));
    let mut r = with_headers(r, headers);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

pub(crate) fn with_headers(mut r: Reply, headers: &[(&str, &str)]) -> Reply {
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            r.headers_mut().append(n, v);
        }
    }
    r
}

/// A response with a one-line reason (control characters in it become spaces).
pub(crate) fn text(status: u16, reason: &str) -> Reply {
    let line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    respond(
        status,
        &[("Content-Type", "text/plain; charset=utf-8")],
        format!("{line}\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_line_and_carries_no_cors_header() {
        let r = text(400, "two\nlines");
        assert_eq!(r.status(), 400);
        assert!(r.headers().get("Access-Control-Allow-Origin").is_none());
        let r = respond(1000, &[("Bad Name", "x"), ("X-Ok", "y")], "");
        assert_eq!(r.status(), 500);
        assert!(r.headers().get("X-Ok").is_some());
        assert_eq!(r.headers().len(), 1);
    }

    #[test]
    fn an_offer_without_h264_is_refused_before_admission() {
        let vp8 = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
                   m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n";
        assert!(!offers_h264(vp8));
        assert!(offers_h264(
            "m=video 9 UDP/TLS/RTP/SAVPF 102\r\na=rtpmap:102 H264/90000\r\n"
        ));
        assert!(matches!(parse_offer(b"nonsense"), Err((400, _))));
        assert!(matches!(parse_offer(&[0xff, 0xfe]), Err((400, _))));
    }

    #[test]
    fn the_parse_error_loses_the_pointer() {
        let e = "bad at PointerOffset(0x1234) here";
        assert_eq!(parse_error(&e), "bad here");
    }
}
