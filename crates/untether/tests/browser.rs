//! Browsers as clients, in a real headless Chromium (Debian's `chromium`): the host's page
//! connects over WebRTC, frames arrive and their glass-to-glass latency is read from the pixel
//! stamps by the page; an input event from the page reaches the host's scene (the stamp's
//! applied-input count); a browser without the link's token gets no media; the page's stamp
//! reader agrees with ours; and host → WHIP → Janus → Chromium viewer (`janus` and
//! `simple-whip-server`, started and stopped here on loopback with their own configuration).
//!
//! Each test skips, saying so in one line, only when Chromium cannot start (`scripts/setup.sh
//! browser`, which `make test` runs, installs it); the Janus test also when Janus or the WHIP
//! server is not installed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::browser::{chromium, devtools, Page};
use untether::config::ConfigToml;
use untether::identity::{ephemeral_keypair, Access, HostTrust};
use untether::{Host, HostOptions, HostSetup};

/// A host of the test scene at `w`x`h`, `fps`, serving browsers on loopback (access by link).
fn host(w: u32, h: u32, fps: u32, publish: Option<String>) -> Host {
    host_sliced(w, h, fps, publish, 1)
}

/// [`host`], its frames encoded in `slices` slices (`video.slices`).
fn host_sliced(w: u32, h: u32, fps: u32, publish: Option<String>, slices: u8) -> Host {
    host_with(w, h, fps, publish, slices, |_| {})
}

/// The options of [`host_with`]'s host.
fn host_options(w: u32, h: u32, fps: u32, publish: Option<String>, slices: u8) -> HostOptions {
    let mut cfg = ConfigToml::default();
    cfg.video.slices = slices;
    cfg.video.resolution = format!("{w}x{h}");
    cfg.video.fps = fps;
    cfg.video.bitrate_kbps = 4000;
    cfg.scene.spin_deg_per_s = 0.0;
    cfg.scene.walk_speed = 0.0;
    let mut options = HostOptions {
        video: cfg.video.validate().unwrap(),
        scene: cfg.scene.clone(),
        host: cfg.host.clone(),
        network: cfg.network.clone(),
        webrtc: cfg.webrtc.clone(),
        vr: Default::default(),
    };
    options.host.bind = "127.0.0.1:0".into();
    options.webrtc.listen = "127.0.0.1:0".into();
    if let Some(p) = publish {
        options.webrtc.publish = p;
    }
    options
}

/// [`host_sliced`], its options changed by `tweak` last.
fn host_with(
    w: u32,
    h: u32,
    fps: u32,
    publish: Option<String>,
    slices: u8,
    tweak: impl FnOnce(&mut HostOptions),
) -> Host {
    let mut options = host_options(w, h, fps, publish, slices);
    tweak(&mut options);
    let setup = HostSetup {
        trust: HostTrust::Memory {
            identity: ephemeral_keypair(),
            access: Access::Allowlist,
            allowed: vec![],
        },
        ..Default::default()
    };
    Host::start_with(options, setup).unwrap()
}

/// A plain HTTP/1.0 exchange (what `curl` does): status line, headers, body.
fn http(base: &str, method: &str, path: &str, ctype: &str, body: &str) -> (u16, String) {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn the_page_and_the_signalling_endpoint_answer_like_curl_expects() {
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    let (status, page) = http(&base, "GET", "/", "text/plain", "");
    assert_eq!(status, 200);
    assert!(page.contains("<title>untether</title>") && page.contains("requestVideoFrameCallback"));
    // A malformed offer: 400 with a one-line reason.
    let (status, reason) = http(&base, "POST", "/whep", "application/sdp", "v=0\r\nnonsense");
    assert_eq!(status, 400, "{reason}");
    assert_eq!(reason.trim().lines().count(), 1, "{reason:?}");
    assert!(reason.starts_with("malformed SDP offer"), "{reason}");
    let (status, _) = http(&base, "POST", "/whep", "text/plain", "v=0\r\n");
    assert_eq!(status, 415);
    let (status, _) = http(&base, "DELETE", "/whep/99", "text/plain", "");
    assert_eq!(status, 404);
    let (status, clock) = http(&base, "GET", "/clock", "text/plain", "");
    assert_eq!(status, 200);
    assert!(clock.contains("mono_us"));
    host.stop();
}

#[test]
fn a_browser_watches_reads_the_stamps_and_steers_the_scene() {
    let Some(chrome) = chromium() else { return };
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    // Without the link's token: refused before any WebRTC session, no frame.
    let mut page = Page::open(&chrome, &format!("{base}?seconds=2")).unwrap();
    let err = page.wait_for("error", Duration::from_secs(20));
    assert!(
        err.as_ref().is_some_and(|e| e.contains("HTTP 401")),
        "{err:?}\n{}",
        page.tail()
    );
    page.settle(Duration::from_millis(1500));
    assert!(page.lines("first-frame").is_empty(), "{}", page.tail());
    drop(page);
    let s = host.webrtc_summary().unwrap();
    assert_eq!(
        (s.browsers_refused, s.browsers_connected, s.frames_sent),
        (1, 0, 0)
    );

    // With the link: frames, glass-to-glass from the stamps, input into the scene.
    let link = host.browser_link().unwrap();
    let mut page = Page::open(&chrome, &format!("{link}&seconds=4&autoinput=150")).unwrap();
    let done = page.wait_for("done", Duration::from_secs(40));
    let done = done.unwrap_or_else(|| panic!("no result from the page:\n{}", page.tail()));
    let v: serde_json::Value = serde_json::from_str(&done).unwrap();
    eprintln!("browser: {done}");
    assert!(v["frames"].as_u64().unwrap() >= 30, "{done}");
    assert!(v["stamped"].as_u64().unwrap() >= 20, "{done}");
    assert!(v["g2g_n"].as_u64().unwrap() >= 20, "{done}");
    let g2g = v["g2g_p50"].as_f64().unwrap();
    assert!(g2g > 0.0 && g2g < 1000.0, "{done}");
    assert_eq!(v["role"], "controller", "{done}");
    assert!(v["inputs_seen"].as_u64().unwrap() >= 1, "{done}");
    assert!(v["input_applied_p50"].as_f64().is_some(), "{done}");
    // The same link again: used up.
    let mut again = Page::open(&chrome, &link).unwrap();
    let err = again.wait_for("error", Duration::from_secs(20));
    assert!(
        err.as_ref().is_some_and(|e| e.contains("HTTP 403")),
        "{err:?}"
    );
    drop(again);
    drop(page);
    let s = host.webrtc_summary().unwrap();
    assert!(s.inputs_delivered >= 1 && s.frames_sent >= 30, "{s:?}");
    let summary = host.stop();
    assert!(summary.inputs_applied >= 1, "{summary:?}");
}

/// With `video.slices`, browsers (which take frames whole) get each frame's slices put
/// together: frames arrive and their stamps read.
#[test]
fn a_browser_watches_a_host_that_sends_slices() {
    let Some(chrome) = chromium() else { return };
    let host = host_sliced(640, 360, 30, None, 4);
    let link = host.browser_link().unwrap();
    let mut page = Page::open(&chrome, &format!("{link}&seconds=3")).unwrap();
    let done = page.wait_for("done", Duration::from_secs(40));
    let done = done.unwrap_or_else(|| panic!("no result from the page:\n{}", page.tail()));
    eprintln!("browser (4 slices): {done}");
    let v: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert!(v["frames"].as_u64().unwrap() >= 30, "{done}");
    assert!(v["stamped"].as_u64().unwrap() >= 20, "{done}");
    drop(page);
    let s = host.webrtc_summary().unwrap();
    assert!(s.frames_sent >= 30, "{s:?}");
    host.stop();
}

#[test]
fn the_page_reads_the_stamp_as_the_client_does() {
    let Some(chrome) = chromium() else { return };
    let dir = common::browser::scratch_dir("stamp");
    std::fs::write(dir.join("page.html"), common::browser::PAGE).unwrap();
    let cases = common::browser::stamp_pictures(&dir);
    for (file, expected) in cases {
        let url = format!("file://{}/page.html?stamptest={file}", dir.display());
        let mut page = Page::open_with(&chrome, &url, &["--allow-file-access-from-files"]).unwrap();
        let line = page
            .wait_for("stamp", Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no stamp line:\n{}", page.tail()));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let read = match &v["stamp"] {
            serde_json::Value::Null => None,
            s => Some((
                s["frame_number"].as_u64().unwrap() as u32,
                s["capture_us"].as_u64().unwrap(),
                s["input_seq"].as_u64().unwrap() as u32,
            )),
        };
        assert_eq!(read, expected, "{file}: {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn host_publishes_by_whip_to_janus_and_a_browser_watches_the_videoroom() {
    let Some(chrome) = chromium() else { return };
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: the Janus test needs root (Janus runs in a network namespace)");
        return;
    }
    let tb = untether_netem::netns::Testbed::create(None).unwrap();
    // The host and the browser in the testbed's host namespace, Janus in its client one.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tb.enter(untether_netem::netns::Side::Host).unwrap();
                whip_to_janus(&chrome, &tb);
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
    });
}

fn whip_to_janus(chrome: &std::path::Path, tb: &untether_netem::netns::Testbed) {
    let Some(janus) = common::janus::Janus::start(tb) else {
        return;
    };
    let host = host(640, 360, 30, Some(janus.whip_endpoint()));
    let url = format!(
        "{}?janus={}&room={}&seconds=4",
        host.browser_url().unwrap(),
        janus.http_api(),
        common::janus::ROOM
    );
    let mut page = Page::open(chrome, &url).unwrap();
    let done = page.wait_for("done", Duration::from_secs(60));
    let s = host.webrtc_summary().unwrap();
    let done = done.unwrap_or_else(|| {
        panic!(
            "no result from the Janus viewer ({s:?}):\n{}\n{}",
            page.tail(),
            janus.log_tail()
        )
    });
    eprintln!("janus viewer: {done}");
    let v: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert!(v["frames"].as_u64().unwrap() >= 30, "{done}");
    assert!(v["g2g_n"].as_u64().unwrap() >= 20, "{done}");
    assert!(s.published && s.publish_frames >= 30, "{s:?}");
    drop(page);
    host.stop();
    drop(janus);
}

// ---- the page's server under load and abuse (no Chromium needed) --------------------------

/// A response as read off the wire.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn parse(raw: &str) -> Reply {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_string(),
        }
    }
}

/// One HTTP/1.0 request with `headers` (Content-Length added) on a new connection.
fn request(base: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    Reply::parse(&resp)
}

/// An offer like a browser's (receive video and audio, an input channel), made by str0m.
fn offer_sdp() -> String {
    use str0m::media::{Direction, MediaKind};
    let mut rtc = str0m::Rtc::new(std::time::Instant::now());
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
    api.add_channel("input".into());
    api.apply().unwrap().0.to_sdp_string()
}

fn post_offer(base: &str, credential: Option<&str>) -> Reply {
    let auth = credential.map(|c| format!("Bearer {c}"));
    let mut headers = vec![
        ("Content-Type", "application/sdp"),
        ("Origin", "http://elsewhere.example"),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    request(base, "POST", "/whep", &headers, &offer_sdp())
}

fn token_of(link: &str) -> String {
    link.split("token=").nth(1).unwrap().to_string()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Hole: `DELETE /whep/N` ended any session without a credential, N counted from 1, and
/// every origin was allowed.
#[test]
fn a_session_ends_only_with_its_secret_and_no_other_origin_may_ask() {
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    let link = host.browser_link().unwrap();
    let a = post_offer(&base, Some(&format!("token:{}", token_of(&link))));
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.header("Access-Control-Allow-Origin").is_none());
    let location = a.header("Location").unwrap().to_string();
    let id = location.strip_prefix("/whep/").unwrap();
    assert!(
        id.len() >= 32 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "{location}"
    );
    let secret = a.header("X-Untether-Session").unwrap().to_string();
    // The ids of the old scheme, and the session without or with a wrong secret: refused.
    for n in 1..4 {
        let r = request(&base, "DELETE", &format!("/whep/{n}"), &[], "");
        assert_eq!(r.status, 404);
    }
    let r = request(&base, "DELETE", &location, &[], "");
    assert_eq!(r.status, 401, "{}", r.body);
    let wrong = format!("Bearer {}", "0".repeat(32));
    let r = request(&base, "DELETE", &location, &[("Authorization", &wrong)], "");
    assert_eq!(r.status, 403, "{}", r.body);
    let pre = request(
        &base,
        "OPTIONS",
        "/whep",
        &[
            ("Origin", "http://elsewhere.example"),
            ("Access-Control-Request-Method", "DELETE"),
        ],
        "",
    );
    assert!(pre.header("Access-Control-Allow-Origin").is_none());
    assert!(pre.header("Access-Control-Allow-Methods").is_none());
    let right = format!("Bearer {secret}");
    let r = request(&base, "DELETE", &location, &[("Authorization", &right)], "");
    assert_eq!(r.status, 200, "{}", r.body);
    // Wrong secrets are guesses: after the free ones (counted afresh since the right link
    // below) the address is refused unchecked, even with the right secret, and told when to
    // come back.
    let link = host.browser_link().unwrap();
    let b = post_offer(&base, Some(&format!("token:{}", token_of(&link))));
    assert_eq!(b.status, 201, "{}", b.body);
    let location = b.header("Location").unwrap().to_string();
    let right = format!("Bearer {}", b.header("X-Untether-Session").unwrap());
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = request(&base, "DELETE", &location, &[("Authorization", &wrong)], "");
        statuses.push(r.status);
        if r.status == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(
        statuses.len() <= 6,
        "more than the free guesses checked: {statuses:?}"
    );
    let r = request(&base, "DELETE", &location, &[("Authorization", &right)], "");
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.header("Retry-After").is_some());
    assert!(r.body.contains("try again in"), "{}", r.body);
    host.stop();
}

/// Hole: one POST with an unfinished body blocked the server (and the host's stop).
#[test]
fn a_slow_offer_holds_up_neither_the_page_nor_the_host_stopping() {
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(
        b"POST /whep HTTP/1.1\r\nHost: h\r\nContent-Type: application/sdp\r\n\
          Content-Length: 5000\r\n\r\nv=0\r\n",
    )
    .unwrap();
    // Another client loads the page meanwhile.
    let (status, page) = http(&base, "GET", "/", "text/plain", "");
    assert_eq!(status, 200);
    assert!(page.contains("<title>untether</title>"));
    // The host stops while the slow client still holds its connection.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        host.stop();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the host did not stop while a client held a request open"
    );
    drop(slow);
}

/// Hole: with `--webrtc-cert auto`, one idle TCP connection blocked the TLS accept loop.
#[test]
fn an_idle_connection_does_not_hold_up_the_tls_page() {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    let host = host_with(640, 360, 30, None, 1, |o| o.webrtc.cert = "auto".into());
    let base = host.browser_url().unwrap();
    assert!(base.starts_with("https://"), "{base}");
    let addr = base.trim_start_matches("https://").trim_end_matches('/');
    let _idle = TcpStream::connect(addr).unwrap();
    let mut c = SslConnector::builder(SslMethod::tls_client()).unwrap();
    c.set_verify(SslVerifyMode::NONE);
    let c = c.build();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = c.connect("localhost", tcp).expect("a TLS handshake");
    tls.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut resp = Vec::new();
    let _ = tls.read_to_end(&mut resp);
    let r = Reply::parse(&String::from_utf8_lossy(&resp));
    assert_eq!(r.status, 200);
    assert!(r.body.contains("<title>untether</title>"));
    host.stop();
}

/// Hole: a thread per connection, unbounded. Now: tasks on one thread, a cap, excess refused.
#[test]
fn connections_are_capped_and_take_no_thread_each() {
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let before = threads();
    let n = 200;
    let conns: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for c in &conns {
        c.set_nonblocking(true).unwrap();
    }
    // Wait until the server has turned away all it does not serve (it serves at most 64).
    let mut refused = vec![false; n];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while refused.iter().filter(|r| **r).count() < n - 64 && std::time::Instant::now() < deadline {
        for (c, r) in conns.iter().zip(refused.iter_mut()).filter(|(_, r)| !**r) {
            let mut buf = [0u8; 256];
            match (&*c).read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // Closed, reset, or answered 503: turned away.
                Ok(0) | Err(_) => *r = true,
                Ok(k) => {
                    assert!(String::from_utf8_lossy(&buf[..k]).contains(" 503 "));
                    *r = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let turned_away = refused.iter().filter(|r| **r).count();
    let during = threads();
    eprintln!(
        "{n} connections: {turned_away} turned away; threads {before} before, {during} with them"
    );
    assert!(turned_away >= n - 64, "{turned_away} of {n} turned away");
    assert!(
        during < before + 16,
        "{n} connections: {before} threads before, {during} with them"
    );
    drop(conns);
    // The slots come back: the page loads again.
    let (status, _) = http(&base, "GET", "/", "text/plain", "");
    assert_eq!(status, 200);
    host.stop();
}

/// Hole: an unauthenticated offer cost a DTLS certificate and an `Rtc`; a flood of them went
/// unchecked. Now: admission first, and one address's offers are rate limited.
#[test]
fn a_flood_of_offers_is_refused_with_429_and_builds_no_session() {
    let host = host(640, 360, 30, None);
    let base = host.browser_url().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let r = post_offer(&base, None);
        if r.status == 429 {
            assert!(r.body.contains("too many offers"), "{}", r.body);
            assert!(r.header("Retry-After").is_some());
        }
        statuses.push(r.status);
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    let s = host.webrtc_summary().unwrap();
    let unauthorized = statuses.iter().filter(|s| **s == 401).count() as u64;
    assert_eq!(s.browsers_refused, unauthorized, "{s:?}");
    assert_eq!(s.sessions_built, 0, "{s:?}");
    host.stop();
}

/// Hole: a resume secret was a reusable bearer token (one filled every seat). Now it holds
/// one session at a time: coming back with it replaces that session.
#[test]
fn a_resume_secret_fills_one_seat() {
    let host = host_with(640, 360, 30, None, 1, |o| o.webrtc.max_browsers = 2);
    let base = host.browser_url().unwrap();
    let link = host.browser_link().unwrap();
    let first = post_offer(&base, Some(&format!("token:{}", token_of(&link))));
    assert_eq!(first.status, 201, "{}", first.body);
    let resume = first.header("X-Untether-Resume").unwrap().to_string();
    let mut kept = Vec::new();
    for _ in 0..2 {
        let again = post_offer(&base, Some(&format!("resume:{resume}")));
        assert_eq!(again.status, 201, "{}", again.body);
        kept.push(again.header("X-Untether-Resume").map(String::from));
    }
    // The secret stays the page's (it is not a new bearer token each time).
    assert!(kept.iter().all(|k| k.as_deref() == Some(resume.as_str())));
    // One seat taken, whatever the secret was used for: another page gets the other.
    let link = host.browser_link().unwrap();
    let other = post_offer(&base, Some(&format!("token:{}", token_of(&link))));
    assert_eq!(other.status, 201, "{}", other.body);
    host.stop();
}

/// docs/BROWSER.md: a reload after admission gets back in. The used link's token leaves the
/// address bar once admitted; the page tries its resume secret before any token in the URL (a
/// used link opened again in the same tab still gets in), and a refused token does not throw
/// the secret away.
/// The page reconnects by itself: the host stops and comes back on the same address, and the
/// page, which said "reconnecting" meanwhile, shows the new host's picture without a reload
/// (it used to say "the connection failed" over a frozen picture for good). Admitted by a
/// one-time link, it gets back in with its resume secret, which the host kept (as a digest) in
/// its state directory.
#[test]
fn the_page_reconnects_by_itself_to_a_restarted_host() {
    let Some(chrome) = chromium() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let dir = std::env::temp_dir().join(format!("untether-br-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let open_host = || {
        let mut options = host_options(640, 360, 30, None, 1);
        options.webrtc.listen = format!("127.0.0.1:{port}");
        options.host.state_dir = dir.display().to_string();
        // The state directory's identity and allowlist (access allowlist: no open door).
        Host::start_with(options, HostSetup::default()).unwrap()
    };
    let host = open_host();
    let url = host.browser_link().unwrap();
    let (mut page, _devtools) = devtools::open(&chrome, &url).unwrap();
    let wait = |page: &mut Page, kind: &str, n: usize, secs: u64| {
        let end = std::time::Instant::now() + Duration::from_secs(secs);
        while page.lines(kind).len() < n && std::time::Instant::now() < end {
            page.settle(Duration::from_millis(100));
        }
        assert!(
            page.lines(kind).len() >= n,
            "no {n} {kind:?} lines:\n{}",
            page.tail()
        );
    };
    wait(&mut page, "first-frame", 1, 30);
    drop(host.stop());
    wait(&mut page, "reconnecting", 1, 15);
    let host = open_host();
    wait(&mut page, "first-frame", 2, 30);
    let last = page.lines("first-frame").pop().unwrap_or_default();
    assert!(last.contains("\"connection\":2"), "{last}");
    assert!(page.lines("refused").is_empty(), "{}", page.tail());
    drop(page);
    let s = host.webrtc_summary().unwrap();
    assert_eq!((s.browsers_admitted, s.browsers_refused), (1, 0), "{s:?}");
    drop(host.stop());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reload_after_admission_gets_back_in() {
    let Some(chrome) = chromium() else { return };
    let host = host(640, 360, 30, None);
    let link = host.browser_link().unwrap();
    let (mut page, mut devtools) = devtools::open(&chrome, &link).unwrap();
    let first_frames = |page: &mut Page, n: usize| {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while page.lines("first-frame").len() < n && std::time::Instant::now() < end {
            page.settle(Duration::from_millis(100));
        }
        let errors = page.lines("error");
        assert!(errors.is_empty(), "{errors:?}\n{}", page.tail());
        assert!(
            page.lines("first-frame").len() >= n,
            "no picture after load {n}:\n{}",
            page.tail()
        );
    };
    first_frames(&mut page, 1);
    let url = devtools.url().unwrap();
    assert!(!url.contains("token="), "the used token stays in {url}");
    // F5.
    devtools.reload().unwrap();
    first_frames(&mut page, 2);
    // The used link again, in the same tab: the resume secret comes first.
    devtools
        .call("Page.navigate", serde_json::json!({ "url": link }))
        .unwrap();
    first_frames(&mut page, 3);
    drop(page);
    let s = host.webrtc_summary().unwrap();
    assert_eq!((s.browsers_admitted, s.browsers_refused), (3, 0), "{s:?}");
    // What went to the browsers counts in the host's bytes sent (it said "0.0 MB sent").
    let summary = host.stop();
    assert!(
        summary.webrtc_bytes_sent > 50_000 && summary.webrtc_bytes_sent >= s.bytes_sent,
        "{} bytes to browsers ({s:?})",
        summary.webrtc_bytes_sent
    );
}
