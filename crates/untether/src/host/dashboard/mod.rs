//! The operator's dashboard (`host.dashboard`, `--dashboard`; docs/DASHBOARD.md): one page and
//! its JSON API, served by the host's HTTP server (`webrtc::start_http`, plain HTTP, its own
//! `host-dashboard` thread and port):
//!
//! - `GET /` — the page (HTML, script and plots embedded: it works offline);
//! - `GET /api/state` — pending requests, the PIN, clients, browsers, links, settings, the
//!   host's stages (polled by the page every second);
//! - `POST /api/approve`, `/api/deny` (`{"fingerprint"}`), `/api/pin` (a new PIN),
//!   `/api/control` (`{"fingerprint"}`), `/api/grant` (`{"fingerprint","granted"}`),
//!   `/api/bitrate` (`{"kbps"}`), `/api/fps` (`{"fps"}`), `/api/link` (a browser's one-time
//!   link).
//!
//! `auth` decides who may (this machine, or the admin token; changes always need the token in
//! a header); `api` reads and changes the session on the network driver's thread.

mod api;
mod auth;

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request};
use serde_json::Value;

use super::ask::{Answer, Ask};
use super::commands::HostCommand;
use super::shared::HostShared;
use super::webrtc::{
    request_header, respond, start_http, text, MakeService, Reply, ServerName, Service,
};
use crate::driver::Handle;
use api::Facts;
pub(crate) use api::{Action, Refused};
use auth::{Asked, Gate, Verdict, TOKEN_HEADER};

/// The page.
const PAGE: &str = include_str!("page.html");
/// Where the page's copy of the admin token goes.
const TOKEN_SLOT: &str = "__UNTETHER_ADMIN_TOKEN__";
/// The largest request body (a fingerprint or a number).
const MAX_BODY: usize = 4096;
/// How long a client has to send a body.
const BODY_READ: Duration = Duration::from_secs(5);
/// How long a request waits for the driver.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the dashboard is, for the line the host prints at start.
#[derive(Clone, Debug)]
pub(crate) struct DashboardInfo {
    /// `http://ADDR:PORT/` (ADDR: this machine's address on the default route when listening
    /// on every interface).
    pub url: String,
    /// The admin token (printed once, at start; never logged).
    pub token: String,
    /// Listening on loopback: this machine only.
    pub local_only: bool,
}

/// Starts the dashboard when `host.dashboard` asks for it.
pub(crate) fn start(
    options: &super::options::HostOptions,
    host_key: &untether_proto::PublicKey,
    browsers: Option<&super::webrtc::BrowserInfo>,
    net: &Handle<HostCommand>,
    shared: &Arc<HostShared>,
    threads: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<Option<DashboardInfo>, super::error::HostError> {
    use super::error::HostError;
    let Some(addr) = options.host.dashboard_addr()? else {
        return Ok(None);
    };
    let token = auth::new_token().map_err(|e| HostError::Usage(e.to_string()))?;
    let v = &options.video;
    let facts = Facts {
        fingerprint: untether_proto::fingerprint(host_key),
        resolution: v.resolution.to_string(),
        fps: v.fps,
        bitrate_kbps: v.bitrate_kbps,
        pin_ttl_s: options.host.pin_ttl_s,
        page: browsers.map(|b| b.base_url.clone()),
        page_cert: browsers.and_then(|b| b.fingerprint.clone()),
    };
    let (gate_token, net) = (token.clone(), net.clone());
    let make: MakeService = Box::new(move || {
        Rc::new(Dashboard {
            gate: Gate::new(gate_token),
            facts: Rc::new(facts),
            net,
        })
    });
    let name = ServerName {
        key: "host.dashboard",
        thread: "host-dashboard",
    };
    let http = start_http(name, addr, None, make, shared.clone())
        .map_err(|e| HostError::Usage(e.to_string()))?;
    threads.push(http.thread);
    let shown = if addr.ip().is_unspecified() {
        super::webrtc::types::route_source(IpAddr::from([192, 0, 2, 1]))
            .unwrap_or(IpAddr::from([127, 0, 0, 1]))
    } else {
        addr.ip()
    };
    Ok(Some(DashboardInfo {
        url: format!("http://{}/", SocketAddr::new(shown, http.addr.port())),
        token,
        local_only: addr.ip().is_loopback(),
    }))
}

/// The dashboard's routes, on its server's thread.
struct Dashboard {
    gate: Gate,
    facts: Rc<Facts>,
    net: Handle<HostCommand>,
}

impl Service for Dashboard {
    fn handle(
        self: Rc<Self>,
        req: Request<Incoming>,
        from: SocketAddr,
    ) -> Pin<Box<dyn std::future::Future<Output = Reply>>> {
        Box::pin(async move { self.answer(req, from).await })
    }
}

impl Dashboard {
    async fn answer(&self, req: Request<Incoming>, from: SocketAddr) -> Reply {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let change = method == Method::POST;
        if !(change || method == Method::GET || method == Method::HEAD) {
            // No OPTIONS either: no CORS preflight ever succeeds.
            return text(405, "method not allowed: the dashboard takes GET and POST");
        }
        let verdict = {
            let cookie = request_header(&req, "Cookie").and_then(auth::cookie_token);
            let asked = Asked {
                change,
                header_token: request_header(&req, TOKEN_HEADER),
                cookie_token: cookie,
                query_token: req.uri().query().and_then(auth::query_token),
            };
            self.gate.check(&asked)
        };
        let set_cookie = match verdict {
            Verdict::Refused(status, reason) => {
                log::debug!("host: dashboard: refused {method} {path} from {from}: {reason}");
                let r = refuse(&path, status, &reason);
                return with_auth_challenge(r, status);
            }
            Verdict::Allowed { set_cookie } => set_cookie,
        };
        match (change, path.as_str()) {
            (false, "/" | "/index.html") => self.page(set_cookie),
            (false, "/api/state") => {
                let f = self.facts.clone();
                let facts = (*f).clone();
                self.ask(Action::State(facts)).await
            }
            (true, p) if p.starts_with("/api/") => {
                let body = match self.body(req).await {
                    Ok(b) => b,
                    Err((s, r)) => return refuse(&path, s, &r),
                };
                self.act(p, body).await
            }
            _ => refuse(
                &path,
                404,
                "not found: the page is at /, the API under /api/ (docs/DASHBOARD.md)",
            ),
        }
    }

    /// The page, with the admin token for its own requests.
    fn page(&self, set_cookie: bool) -> Reply {
        let html = PAGE.replace(TOKEN_SLOT, self.gate.token());
        let cookie = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            auth::COOKIE,
            self.gate.token()
        );
        let mut headers = vec![
            ("Content-Type", "text/html; charset=utf-8"),
            ("Cache-Control", "no-store"),
            ("X-Frame-Options", "DENY"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
            (
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
        ];
        if set_cookie {
            headers.push(("Set-Cookie", cookie.as_str()));
        }
        respond(200, &headers, html)
    }

    /// A `POST /api/…`: its action on the driver's thread.
    async fn act(&self, path: &str, body: Value) -> Reply {
        let fp = body["fingerprint"].as_str().unwrap_or("").to_string();
        let facts = (*self.facts).clone();
        let need_fp = || -> Result<(), Refused> {
            if fp.trim().is_empty() {
                return Err((400, "the body must name a \"fingerprint\"".into()));
            }
            Ok(())
        };
        let checked = match path {
            "/api/approve" | "/api/deny" | "/api/control" | "/api/grant" => need_fp(),
            _ => Ok(()),
        };
        if let Err((s, r)) = checked {
            return json_error(s, &r);
        }
        match path {
            "/api/approve" => self.ask(Action::Approve(fp)).await,
            "/api/deny" => self.ask(Action::Deny(fp)).await,
            "/api/control" => self.ask(Action::Control(fp)).await,
            "/api/grant" => {
                let Some(granted) = body["granted"].as_bool() else {
                    return json_error(400, "the body must say \"granted\": true or false");
                };
                self.ask(Action::Grant {
                    fingerprint: fp,
                    granted,
                })
                .await
            }
            "/api/pin" => self.ask(Action::RenewPin(facts)).await,
            "/api/bitrate" => {
                let Some(kbps) = body["kbps"].as_u64() else {
                    return json_error(400, "the body must give \"kbps\", a whole number");
                };
                self.ask(Action::Bitrate(facts, kbps)).await
            }
            "/api/fps" => {
                let Some(fps) = body["fps"].as_u64() else {
                    return json_error(400, "the body must give \"fps\", a whole number");
                };
                self.ask(Action::Fps(facts, fps)).await
            }
            "/api/link" => self.ask(Action::BrowserLink(facts)).await,
            _ => json_error(404, "no such action (docs/DASHBOARD.md lists them)"),
        }
    }

    /// A change's JSON body (`Content-Type: application/json`, at most [`MAX_BODY`] bytes; an
    /// empty body is `{}`).
    async fn body(&self, req: Request<Incoming>) -> Result<Value, Refused> {
        let ctype = request_header(&req, "Content-Type").unwrap_or("");
        if !ctype.trim().starts_with("application/json") {
            return Err((
                415,
                "a change is sent as Content-Type: application/json".into(),
            ));
        }
        let body = Limited::new(req.into_body(), MAX_BODY).collect();
        let bytes = match tokio::time::timeout(BODY_READ, body).await {
            Err(_) => return Err((408, "the body did not arrive in time".into())),
            Ok(Err(_)) => return Err((413, format!("the body is larger than {MAX_BODY} bytes"))),
            Ok(Ok(b)) => b.to_bytes(),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Default::default()));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err((400, "the body must be a JSON object".into())),
            Err(e) => Err((400, format!("the body is not JSON: {e}"))),
        }
    }

    /// Runs `action` on the network driver's thread and answers with its JSON (or its
    /// refusal).
    async fn ask(&self, action: Action) -> Reply {
        let (answer, rx) = Answer::oneshot();
        if !self
            .net
            .send(HostCommand::Ask(Ask::Dashboard(action, answer)))
        {
            return json_error(503, "the host is stopping");
        }
        match tokio::time::timeout(DRIVER_TIMEOUT, rx).await {
            Ok(Ok(Ok(v))) => json(200, &v),
            Ok(Ok(Err((s, r)))) => json_error(s, &r),
            Ok(Err(_)) => json_error(503, "the host is stopping"),
            Err(_) => json_error(503, "the host did not answer in time"),
        }
    }
}

/// A refusal: one line of text for the page, JSON (`{"error": …}`) for the API.
fn refuse(path: &str, status: u16, reason: &str) -> Reply {
    if path.starts_with("/api/") {
        json_error(status, reason)
    } else {
        text(status, reason)
    }
}

/// A 401 says how to authenticate.
fn with_auth_challenge(r: Reply, status: u16) -> Reply {
    if status == 401 {
        super::webrtc::with_headers(r, &[("WWW-Authenticate", "Bearer realm=\"untether\"")])
    } else {
        r
    }
}

fn json(status: u16, v: &Value) -> Reply {
    respond(
        status,
        &[
            ("Content-Type", "application/json"),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
        ],
        v.to_string(),
    )
}

fn json_error(status: u16, reason: &str) -> Reply {
    json(status, &serde_json::json!({ "error": reason }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_json_for_the_api_and_text_for_the_page() {
        let r = refuse("/api/state", 401, "no");
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["Content-Type"], "application/json");
        let r = with_auth_challenge(refuse("/", 401, "no"), 401);
        assert!(r.headers()["Content-Type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        assert!(r.headers().get("WWW-Authenticate").is_some());
        assert!(r.headers().get("Access-Control-Allow-Origin").is_none());
    }

    #[test]
    fn the_page_carries_the_token_slot_once_and_needs_no_network() {
        assert_eq!(PAGE.matches(TOKEN_SLOT).count(), 1);
        for outside in ["http://", "https://", "//cdn", "@import"] {
            let hits: Vec<&str> = PAGE.lines().filter(|l| l.contains(outside)).collect();
            assert!(hits.is_empty(), "the page loads {outside}: {hits:?}");
        }
    }
}
