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

use common::browser::{chromium, Page};
use untether::config::ConfigToml;
use untether::identity::{ephemeral_keypair, Access, HostTrust};
use untether::{Host, HostOptions, HostSetup};

/// A host of the test scene at `w`x`h`, `fps`, serving browsers on loopback (access by link).
fn host(w: u32, h: u32, fps: u32, publish: Option<String>) -> Host {
    host_sliced(w, h, fps, publish, 1)
}

/// [`host`], its frames encoded in `slices` slices (`video.slices`).
fn host_sliced(w: u32, h: u32, fps: u32, publish: Option<String>, slices: u8) -> Host {
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
