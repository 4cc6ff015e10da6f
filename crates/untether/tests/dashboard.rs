//! The operator's dashboard (`host.dashboard`) against one real host: its HTTP API and who it
//! refuses (nothing without the token, from loopback too; changes only with the
//! token header), a pending client approved by a real mouse click on the page in headless
//! Chromium (driven over the DevTools pipe) getting in within a second, and a screenshot of
//! the page (DevTools `Page.captureScreenshot`, in the same Chromium: a second `chromium --screenshot` process cost 10 s here) that is not blank and has its layout.
//! The page laid out for windows from a phone's 390 px to a desktop's 1920 px: every button
//! and cell in the window and its card, no plot legend on the traces (measured on the elements).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use common::browser::{devtools, scratch_dir};
use serde_json::Value;
use untether::client::{run_client_with, ClientError, ClientIo, ClientOptions, Display};
use untether::config::{ConfigToml, Resolution};
use untether::{Host, HostOptions};
use untether_proto::RejectReason;

/// An HTTP/1.1 request over a plain socket; the status, the headers (lowercase names) and the
/// body. To this machine's own outside address, the kernel sends from that address (the
/// dashboard sees a peer that is not loopback).
fn http(to: SocketAddr, request: &str) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect_timeout(&to, Duration::from_secs(3)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn get(path: &str, host: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
}

fn post(path: &str, host: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// This machine's address on its default route (not loopback), if it has one.
fn outside_address() -> Option<IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A client that keeps asking until it is let in (what the patient client does), then streams
/// until `stop`. Returns its result; refusals other than "pending approval" end it. Several run
/// at once in this process, each opening and closing SDL's game controllers on every try (SDL's
/// process-wide set-up is serialised for that: it once corrupted the heap here).
fn waiting_client(
    host: SocketAddr,
    state: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<u64, String>> {
    std::thread::spawn(move || loop {
        let cfg = ConfigToml::default();
        let mut c = cfg.client;
        c.state_dir = state.display().to_string();
        c.name = "dashboard-test".into();
        let opts = ClientOptions {
            vr: Default::default(),
            host,
            client: c,
            network: cfg.network,
            display: Display::Headless,
            duration: Some(Duration::from_secs(30)),
            save_frame: None,
        };
        let io = ClientIo {
            host_label: Some("the-host".into()),
            ..Default::default()
        };
        match run_client_with(&opts, io, stop.clone()) {
            Ok(run) => return Ok(run.decoded),
            Err(ClientError::Rejected {
                reason: RejectReason::PendingApproval,
                ..
            }) if !stop.load(Ordering::SeqCst) => {
                // The client's own pace between tries (not a test's wait).
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.to_string()),
        }
    })
}

/// The screenshot's pixels (RGB) through the ffmpeg tool.
fn png_pixels(path: &Path) -> Option<Vec<u8>> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

#[test]
fn the_dashboard_approves_by_click_refuses_strangers_and_draws_its_page() {
    let state = scratch_dir("dashboard-host");
    let client_state = scratch_dir("dashboard-client");
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.host.state_dir = state.display().to_string();
    o.host.dashboard = "0.0.0.0:0".into();
    o.video.resolution = Resolution {
        width: 640,
        height: 360,
    };
    o.video.fps = 30;
    let t0 = Instant::now();
    let mark = |what: &str| eprintln!("[{:>6.2} s] {what}", t0.elapsed().as_secs_f64());
    let host = Host::start(o).expect("host starts");
    let url = host.dashboard_url().expect("a dashboard");
    let link = host.dashboard_link().expect("a link");
    assert!(!host.dashboard_local_only());
    let token = link.split("?admin=").nth(1).unwrap().to_string();
    let port: u16 = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let local = SocketAddr::from(([127, 0, 0, 1], port));
    let here = format!("127.0.0.1:{port}");

    // Every local account reaches loopback: without the token nothing is served there either,
    // neither the page (it carried the token) nor the state (it carried the PIN).
    for path in ["/", "/api/state"] {
        let (s, _, body) = http(local, &get(path, &here, ""));
        assert_eq!(s, 401, "{path} without the token from this machine: {body}");
        assert!(!body.contains(&token), "{body}");
    }
    // The operator finds the link in the state directory, which only its user can read.
    let file = state.join("dashboard_link");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().trim(),
        format!("{}?admin={token}", url)
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // A second local account: it cannot read the link.
        let other = Command::new("setpriv")
            .args(["--reuid=61235", "--regid=61235", "--clear-groups", "cat"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            !other.status.success(),
            "another user read the dashboard link"
        );
    }
    // A read with the token; a change needs the token header.
    let with = format!("X-Untether-Admin: {token}\r\n");
    let (s, h, body) = http(local, &get("/api/state", &here, &with));
    assert_eq!(s, 200, "{body}");
    assert!(h.iter().all(|(k, _)| !k.starts_with("access-control")));
    let st: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(st["host"]["fingerprint"], host.fingerprint());
    assert_eq!(st["settings"]["fps"], 30);
    let (s, _, body) = http(local, &post("/api/pin", &here, "", "{}"));
    assert_eq!(s, 403, "a change without the token header: {body}");
    let (s, _, body) = http(local, &post("/api/pin", &here, &with, "{}"));
    assert_eq!(s, 200, "{body}");
    let pin: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        host.pairing_pin().as_deref(),
        pin["pin"].as_str(),
        "at once"
    );
    let (s, _, _) = http(local, &get("/api/state", "evil.example", ""));
    assert_eq!(s, 401, "a rebound name has no token");
    let (s, h, _) = http(
        local,
        &format!("OPTIONS /api/approve HTTP/1.1\r\nHost: {here}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(s, 405, "no preflight");
    assert!(h.iter().all(|(k, _)| !k.starts_with("access-control")));
    let (s, _, body) = http(local, &post("/api/bitrate", &here, &with, r#"{"kbps":1}"#));
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("bitrate_kbps"), "{body}");
    let (s, _, body) = http(local, &post("/api/fps", &here, &with, r#"{"fps":1000}"#));
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("fps must be 5–30"), "{body}");

    // From another address: nothing without the token, a wrong one refused, the right one let in.
    let outside = outside_address();
    match outside {
        None => {
            println!("skipped the other-address checks: this machine has no address but loopback")
        }
        Some(ip) => {
            let far = SocketAddr::new(ip, port);
            let there = far.to_string();
            for path in ["/", "/api/state", "/index.html"] {
                let (s, h, body) = http(far, &get(path, &there, ""));
                assert_eq!(s, 401, "{path}: {body}");
                assert!(body.contains("admin token"), "{body}");
                assert!(h.iter().any(|(k, _)| k == "www-authenticate"));
            }
            let (s, _, _) = http(
                far,
                &post("/api/approve", &there, "", r#"{"fingerprint":"x"}"#),
            );
            assert_eq!(s, 403);
            let wrong = format!("X-Untether-Admin: {}\r\n", "0".repeat(32));
            let (s, _, body) = http(far, &get("/api/state", &there, &wrong));
            assert_eq!(s, 403, "{body}");
            let (s, _, _) = http(far, &get("/api/state", &there, &with));
            assert_eq!(s, 200);
            let (s, h, body) = http(far, &get(&format!("/?admin={token}"), &there, ""));
            assert_eq!(s, 200);
            assert!(body.contains("Access requests"));
            let cookie = h.iter().find(|(k, _)| k == "set-cookie").expect("a cookie");
            assert!(cookie.1.contains("HttpOnly") && cookie.1.contains("SameSite=Strict"));
            let (s, _, _) = http(
                far,
                &get(
                    "/api/state",
                    &there,
                    &format!("Cookie: untether_admin={token}\r\n"),
                ),
            );
            assert_eq!(s, 200);
        }
    }

    mark("API checks done");
    let Some(bin) = common::browser::chromium() else {
        host.stop();
        return;
    };
    // A client asks and waits (started first: its request is pending by the time the page
    // shows).
    let stop = Arc::new(AtomicBool::new(false));
    let client = waiting_client(host.local_addr(), client_state.clone(), stop.clone());
    let (mut console, mut page) = devtools::open_with(
        &bin,
        "about:blank",
        &["--window-size=1280,1000", "--hide-scrollbars"],
    )
    .expect("Chromium starts with a DevTools pipe");
    mark("devtools open");
    // The page, from another address without the token, in a browser: refused.
    if let Some(ip) = outside {
        page.navigate(&format!("http://{}/", SocketAddr::new(ip, port)))
            .unwrap();
        let text = page
            .wait_text(Duration::from_secs(10), |t| t.contains("admin token"))
            .unwrap();
        assert!(!text.contains("Access requests"), "{text}");
        mark("refused page done");
    }
    // The operator's page on this machine; the operator approves the client by a click.
    page.navigate(&format!("http://{here}/?admin={token}"))
        .unwrap();
    console
        .wait_console("state", Duration::from_secs(10), |v| v["pending"] == 1)
        .expect("the console line wanted");
    mark("pending shown");
    let rect = page
        .eval(
            "(() => { const b = document.querySelector('button.approve'); \
         const r = b.getBoundingClientRect(); return {x: r.x + r.width / 2, y: r.y + r.height / 2, \
         fp: b.dataset.fingerprint}; })()",
        )
        .unwrap();
    assert!(!host.has_client());
    let clicked = page
        .click(rect["x"].as_f64().unwrap(), rect["y"].as_f64().unwrap())
        .unwrap();
    let admitted = host.wait_for_client(Duration::from_secs(5));
    let took = clicked.elapsed();
    assert!(admitted, "the approved client did not get in");
    println!("approved by click → client admitted in {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    console
        .wait_console("action", Duration::from_secs(5), |v| {
            v["path"] == "/api/approve" && v["ok"] == true
        })
        .expect("the console line wanted");
    // Persisted as `untether pair approve` would.
    let allowed = std::fs::read_to_string(state.join("allowed_clients.json")).unwrap_or_default();
    assert!(allowed.contains("dashboard-test"), "{allowed}");
    // The page lists it, with its role.
    console
        .wait_console("state", Duration::from_secs(5), |v| v["clients"] == 1)
        .expect("the console line wanted");
    let layout = page.eval(
        "(() => { const ids = ['pending', 'pairing', 'clients', 'browsers', 'plots', 'settings']; \
         return { sections: ids.map(i => { const r = document.getElementById(i).getBoundingClientRect(); \
         return [i, r.width, r.height]; }), role: document.querySelector('#client-rows td:nth-child(4)').textContent, \
         pin: document.getElementById('pin-value').textContent }; })()",
    ).unwrap();
    for s in layout["sections"].as_array().unwrap() {
        assert!(
            s[1].as_f64().unwrap() > 200.0 && s[2].as_f64().unwrap() > 50.0,
            "{s}"
        );
    }
    assert_eq!(layout["role"], "controller");
    assert_eq!(layout["pin"], pin["pin"]);
    mark("click checks done");

    // The client's own latency (glass-to-glass and its stages, p50/p95 over its last half
    // second, sent beside its quality feedback): kept per client, in the API, plotted.
    console
        .wait_console("state", Duration::from_secs(5), |v| {
            v["g2g"].as_u64().is_some_and(|n| n >= 2) && v["client_stages"].as_u64() >= Some(2)
        })
        .expect("the console line wanted");
    let (s, _, body) = http(local, &get("/api/state", &here, &with));
    assert_eq!(s, 200);
    let st: Value = serde_json::from_str(&body).unwrap();
    let lat = &st["clients"][0]["latency"];
    assert!(lat["frames"].as_u64().is_some_and(|n| n > 0), "{lat}");
    for stage in ["glass_to_glass", "decode"] {
        let (p50, p95) = (
            lat[stage]["p50_ms"].as_f64().unwrap_or(-1.0),
            lat[stage]["p95_ms"].as_f64().unwrap_or(-1.0),
        );
        assert!(p50 > 0.0 && p95 >= p50, "{stage}: {lat}");
    }
    let cell = page
        .eval("document.querySelector('#client-rows td:nth-child(10)').textContent")
        .unwrap();
    assert!(cell.as_str().is_some_and(|t| t.ends_with(" ms")), "{cell}");
    mark("latency checks done");

    // The frame rate, live: a ceiling of 10 fps set on the page; the client's next full
    // report interval shows about a third of the 30 fps it had.
    page.eval(
        "(() => { document.getElementById('fps').value = 10; \
         document.getElementById('apply-fps').click(); return true; })()",
    )
    .unwrap();
    console
        .wait_console("action", Duration::from_secs(5), |v| {
            v["path"] == "/api/fps" && v["ok"] == true
        })
        .expect("the console line wanted");
    // The newest report now arrived at most one interval (0.5 s, +0.1 s feedback) before the
    // change: one that arrives 1.3 s after it covers only frames after the change.
    let (_, _, body) = http(local, &get("/api/state", &here, &with));
    let st: Value = serde_json::from_str(&body).unwrap();
    let before = st["clients"][0]["latency"]["at_s"].as_f64().unwrap_or(0.0);
    let end = Instant::now() + Duration::from_secs(5);
    let shown_fps = loop {
        let (_, _, body) = http(local, &get("/api/state", &here, &with));
        let st: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(st["settings"]["fps"], 10);
        let l = &st["clients"][0]["latency"];
        if l["at_s"].as_f64().is_some_and(|t| t > before + 1.3) {
            break l["frames"].as_f64().unwrap_or(0.0) * 1000.0
                / l["interval_ms"].as_f64().unwrap_or(1.0);
        }
        assert!(Instant::now() < end, "no new latency report: {l}");
        // The client reports every half second: asked again until it has.
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(shown_fps > 0.0 && shown_fps < 14.0, "{shown_fps} fps shown");
    mark("frame rate checks done");

    // A screenshot of the page: not blank, the header band at the top, the sections below.
    let shots = scratch_dir("dashboard-shot");
    let shot = shots.join("dashboard.png");
    let size = page
        .eval("[window.innerWidth, window.innerHeight]")
        .unwrap();
    let (w, h) = (
        size[0].as_u64().unwrap() as usize,
        size[1].as_u64().unwrap() as usize,
    );
    std::fs::write(&shot, page.screenshot().unwrap()).unwrap();
    drop((page, console));
    match png_pixels(&shot) {
        None => println!("skipped the screenshot's pixel checks: ffmpeg cannot read it"),
        Some(px) => {
            assert_eq!(px.len(), w * h * 3, "{w}x{h}");
            assert!(w >= 1000 && h >= 700, "{w}x{h}");
            let at = |x: usize, y: usize| &px[(y * w + x) * 3..(y * w + x) * 3 + 3];
            // The header band (#1d2330) across the top.
            for x in [5, w / 2, w - 10] {
                assert_eq!(at(x, 3), [0x1d, 0x23, 0x30], "header at x {x}");
            }
            // The page's grey, white sections, and text: many colours, not one.
            let mut colours = std::collections::HashSet::new();
            for y in (60..h).step_by(7) {
                for x in (0..w).step_by(7) {
                    colours.insert(at(x, y).to_vec());
                }
            }
            assert!(colours.len() > 20, "{} colours: blank?", colours.len());
            assert!(
                colours.contains(&vec![0xff, 0xff, 0xff]),
                "no white section"
            );
            assert!(
                colours.contains(&vec![0xf4, 0xf5, 0xf7]),
                "no page background"
            );
        }
    }
    println!("screenshot: {}", shot.display());
    mark("screenshot done");

    stop.store(true, Ordering::SeqCst);
    let result = client.join().expect("the client thread");
    assert!(result.is_ok(), "{result:?}");
    mark("client done");
    host.stop();
    mark("host stopped");
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(&client_state);
}

/// The window widths the dashboard is laid out for: a small laptop, two desktops, a phone.
const WIDTHS: [u32; 4] = [1024, 1280, 1920, 390];

/// What is wrong with the page's layout now, as `{ problems: [..], seen: {..} }`: every button
/// and every element of a card inside the window horizontally, inside its card, not cut off
/// by an ancestor that hides its overflow, and (buttons) not under another element nor on
/// another button; every plot's legend an element of its own, off the plot's drawing area (the
/// canvas); the page no wider than the window. The check scrolls the page vertically (a
/// button below the fold is reachable); it never scrolls it sideways.
const LAYOUT_CHECK: &str = r#"(() => {
  const W = document.documentElement.clientWidth;
  const out = [];
  const text = e => (e.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 30);
  const card = e => e.closest('section, header');
  const where = e => { const c = card(e); return c ? (c.id ? '#' + c.id : c.tagName.toLowerCase()) : 'the page'; };
  const tag = a => a.tagName.toLowerCase() + (a.id ? '#' + a.id : '') + (typeof a.className === 'string' && a.className ? '.' + a.className.split(' ').join('.') : '');
  const what = e => {
    if (e.tagName === 'TD' || e.tagName === 'TH') {
      const tr = e.parentElement, part = tr.parentElement;
      return e.tagName.toLowerCase() + ' ' + (e.cellIndex + 1) + ' of ' + where(e) + ' ' + part.tagName.toLowerCase()
        + ' row ' + (tr.sectionRowIndex + 1) + ' "' + text(e) + '"';
    }
    return tag(e) + ' "' + text(e) + '" in ' + where(e);
  };
  const px = v => Math.round(v);
  const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const clipper = e => {
    const r = e.getBoundingClientRect();
    for (let a = e.parentElement; a && a !== document.body && a !== document.documentElement; a = a.parentElement) {
      const s = getComputedStyle(a), ar = a.getBoundingClientRect();
      if (s.overflowX !== 'visible' && (r.left < ar.left - 0.5 || r.right > ar.right + 0.5)) return a;
      if (s.overflowY !== 'visible' && (r.top < ar.top - 0.5 || r.bottom > ar.bottom + 0.5)) return a;
    }
    return null;
  };
  // Sideways: inside the window, inside its card, not cut off.
  const placed = e => {
    const r = e.getBoundingClientRect();
    if (r.left < -0.5 || r.right > W + 0.5) {
      out.push(what(e) + ' spans x ' + px(r.left) + '..' + px(r.right) + ', outside the ' + W + ' px window');
      return false;
    }
    const c = card(e);
    if (c) {
      const cr = c.getBoundingClientRect();
      if (r.left < cr.left - 0.5 || r.right > cr.right + 0.5) {
        out.push(what(e) + ' spans x ' + px(r.left) + '..' + px(r.right) + ', out of its card (x '
          + px(cr.left) + '..' + px(cr.right) + ')');
        return false;
      }
    }
    const a = clipper(e);
    if (a) { out.push(what(e) + ' is cut off by ' + tag(a) + ' (overflow ' + getComputedStyle(a).overflow + ')'); return false; }
    return true;
  };
  if (document.documentElement.scrollWidth > W + 0.5) {
    out.push('the page is ' + document.documentElement.scrollWidth + ' px wide, wider than the ' + W + ' px window');
  }
  // Buttons: each shown, where it should be, its middle the button itself (not another card
  // drawn over it) once scrolled to, no two on each other.
  const buttons = Array.from(document.querySelectorAll('button'));
  const boxes = [];
  for (const b of buttons) {
    if (!shown(b)) { out.push(what(b) + ' is not shown'); continue; }
    placed(b);
    const r0 = b.getBoundingClientRect();
    window.scrollTo(0, window.scrollY + r0.top + r0.height / 2 - window.innerHeight / 2);
    const r = b.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (!hit) out.push(what(b) + ': its middle (x ' + px(r.left + r.width / 2) + ') is off the window');
    else if (!b.contains(hit)) out.push(what(b) + ' is under ' + what(hit));
    boxes.push([b, { l: r.left + window.scrollX, r: r.right + window.scrollX, t: r.top + window.scrollY, b: r.bottom + window.scrollY }]);
  }
  // Every cell of the tables, then whatever else a card holds (a table's rows are their cells).
  const cells = Array.from(document.querySelectorAll('main td, main th')).filter(shown);
  const rows = document.querySelectorAll('#client-rows tr').length;
  let bad = 0;
  for (const e of cells) if (!placed(e)) bad++;
  for (const e of document.querySelectorAll('header *, main *')) {
    if (!shown(e) || /^(BUTTON|TD|TH|TR|THEAD|TBODY|TABLE)$/.test(e.tagName)) continue;
    if (!placed(e)) bad++;
  }
  window.scrollTo(0, 0);
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, p] = boxes[i], [b, q] = boxes[j];
    if (Math.min(p.r, q.r) - Math.max(p.l, q.l) > 0.5 && Math.min(p.b, q.b) - Math.max(p.t, q.t) > 0.5) {
      out.push(what(a) + ' and ' + what(b) + ' overlap');
    }
  }
  // Legends: off the plot.
  const legends = {};
  for (const c of document.querySelectorAll('#plots canvas')) {
    const legend = document.querySelector('.legend[data-for="' + c.id + '"]');
    if (!legend) { out.push('canvas#' + c.id + ' has no legend of its own (.legend[data-for]): it is drawn over the traces'); continue; }
    const cr = c.getBoundingClientRect();
    const entries = Array.from(legend.children).filter(shown);
    legends[c.id] = entries.length;
    for (const e of entries) {
      const r = e.getBoundingClientRect();
      if (Math.min(r.right, cr.right) - Math.max(r.left, cr.left) > 0.5 && Math.min(r.bottom, cr.bottom) - Math.max(r.top, cr.top) > 0.5) {
        out.push('legend entry "' + text(e) + '" of canvas#' + c.id + ' lies on its plot');
      }
    }
  }
  const clients = document.getElementById('clients').getBoundingClientRect();
  return { problems: out, seen: { window: W, page: document.documentElement.scrollWidth, client_rows: rows,
    cells: cells.length, buttons: buttons.length,
    row_buttons: document.querySelectorAll('#client-rows button, #pending-rows button').length, out_of_place: bad, legends: legends,
    clients_card: [px(clients.left), px(clients.right)],
    button_right: Math.max(0, ...buttons.filter(shown).map(b => px(b.getBoundingClientRect().right))) } };
})()"#;

/// A PNG's width and height, from its header.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
    Some((be(16), be(20)))
}

/// The dashboard of a real host with two clients in (the controller and a viewer, so every
/// client button shows) and one asking, at each of [`WIDTHS`] (DevTools
/// `Emulation.setDeviceMetricsOverride`): nothing of the page sticks out of the window or its
/// card, no button is cut off, covered or on another, no plot's legend on the plot (measured
/// on the elements, [`LAYOUT_CHECK`]); a screenshot of the whole page at each width, kept in
/// the target directory, as evidence.
#[test]
fn the_dashboard_fits_windows_from_a_phone_to_a_desktop() {
    let state = scratch_dir("dashboard-fit-host");
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.host.state_dir = state.display().to_string();
    o.host.dashboard = "127.0.0.1:0".into();
    o.video.resolution = Resolution {
        width: 640,
        height: 360,
    };
    o.video.fps = 15;
    let host = Host::start(o).expect("host starts");
    let link = host.dashboard_link().expect("a link");
    let Some(bin) = common::browser::chromium() else {
        host.stop();
        return;
    };
    // Three clients ask; two are approved (the first in is the controller, the second a viewer
    // with the buttons to hand it control and grant it input), the third stays asking.
    let stop = Arc::new(AtomicBool::new(false));
    let client_states: Vec<PathBuf> = (0..3)
        .map(|i| scratch_dir(&format!("dashboard-fit-client{i}")))
        .collect();
    let clients: Vec<_> = client_states
        .iter()
        .map(|s| waiting_client(host.local_addr(), s.clone(), stop.clone()))
        .collect();
    let (mut console, mut page) = devtools::open_with(&bin, "about:blank", &[])
        .expect("Chromium starts with a DevTools pipe");
    page.navigate(&link).unwrap();
    console
        .wait_console("state", Duration::from_secs(20), |v| v["pending"] == 3)
        .unwrap_or_else(|| panic!("three access requests shown: {}", console.tail()));
    let pending = page
        .eval("Array.from(document.querySelectorAll('button.approve')).map(b => b.dataset.fingerprint)")
        .unwrap();
    let token = link.split("?admin=").nth(1).unwrap();
    let here = link
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    let with = format!("X-Untether-Admin: {token}\r\n");
    for fp in pending.as_array().unwrap().iter().take(2) {
        let body = serde_json::json!({ "fingerprint": fp }).to_string();
        let (s, _, reply) = http(
            here.parse().unwrap(),
            &post("/api/approve", here, &with, &body),
        );
        assert_eq!(s, 200, "approve {fp}: {reply}");
    }
    // Both in and streaming (their glass-to-glass plotted: p50 and p95 each), one still asking.
    console
        .wait_console("state", Duration::from_secs(20), |v| {
            v["clients"] == 2 && v["pending"] == 1 && v["g2g"].as_u64().is_some_and(|n| n >= 4)
        })
        .unwrap_or_else(|| panic!("two clients in, one asking: {}", console.tail()));

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-layout");
    std::fs::create_dir_all(&shots).unwrap();
    let mut problems = Vec::new();
    for w in WIDTHS {
        let phone = w < 600;
        let h = if phone { 844 } else { 900 };
        page.call(
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({ "width": w, "height": h, "deviceScaleFactor": 1, "mobile": phone }),
        )
        .unwrap();
        // A fresh state drawn at this size (the page's own poll, awaited).
        page.call(
            "Runtime.evaluate",
            serde_json::json!({ "expression": "poll().then(() => true)", "awaitPromise": true }),
        )
        .unwrap();
        let r = page.eval(LAYOUT_CHECK).unwrap();
        println!("{w} px: {}", r["seen"]);
        // Both tables with their buttons: Approve and Deny, Hand control and Grant input.
        assert_eq!(r["seen"]["client_rows"], 2, "{w} px: {r}");
        assert_eq!(r["seen"]["row_buttons"], 4, "{w} px: {r}");
        let found: Vec<&str> = r["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for p in found.iter().take(25) {
            problems.push(format!("{w} px: {p}"));
        }
        if found.len() > 25 {
            problems.push(format!("{w} px: … and {} more", found.len() - 25));
        }
        // Two clients' p50 and p95: four entries in the glass-to-glass legend.
        let keys = r["seen"]["legends"]["plot-g2g"].as_u64();
        if keys.is_some_and(|n| n < 4) {
            problems.push(format!(
                "{w} px: {keys:?} entries in the glass-to-glass legend"
            ));
        }
        // The whole page, as evidence.
        let full = page
            .eval("[document.documentElement.clientWidth, document.documentElement.scrollHeight]")
            .unwrap();
        let shot = page
            .call(
                "Page.captureScreenshot",
                serde_json::json!({ "format": "png", "captureBeyondViewport": true, "clip": {
                    "x": 0, "y": 0, "width": w, "height": full[1].as_u64().unwrap_or(h as u64),
                    "scale": 1 } }),
            )
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .unwrap();
        let file = shots.join(format!("dashboard-{w}.png"));
        std::fs::write(&file, &png).unwrap();
        let size = png_size(&png);
        assert!(
            size.is_some_and(|(pw, ph)| pw == w && ph >= h / 2),
            "{w} px: the screenshot {} is {size:?}",
            file.display()
        );
        println!("{w} px: screenshot {}", file.display());
    }
    drop((page, console));
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        let _ = c.join();
    }
    host.stop();
    let _ = std::fs::remove_dir_all(&state);
    for s in client_states {
        let _ = std::fs::remove_dir_all(s);
    }
    assert!(
        problems.is_empty(),
        "{} layout problems (screenshots in {}):\n{}",
        problems.len(),
        shots.display(),
        problems.join("\n")
    );
}
