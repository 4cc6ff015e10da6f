//! `untether host --rtsp` as a user runs it: the flag's errors, and a host process whose
//! printed URL ffmpeg plays, with the viewer in its summary and report.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c.env(
        "UNTETHER_STATE_DIR",
        std::env::temp_dir().join(format!("untether-rtsp-state-{}", std::process::id())),
    );
    c
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn bad_rtsp_settings_name_the_key_and_the_flag() {
    let o = untether()
        .args(["host", "--rtsp", "8554", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("rtsp.listen (--rtsp)") && t.contains("IP:PORT"),
        "{t}"
    );
    let cfg = std::env::temp_dir().join(format!("untether-rtsp-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[rtsp]\nqueue_frames = 0\n").unwrap();
    let o = untether()
        .args(["demo", "--duration", "1", "--headless", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("rtsp.queue_frames: 0 is out of range 1..=60"),
        "{t}"
    );
    let t = text(&untether().args(["host", "--help"]).output().unwrap());
    assert!(
        t.contains("--rtsp <ADDR:PORT>") && t.contains("rtsp.listen"),
        "{t}"
    );
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn a_host_process_serves_the_url_it_prints() {
    let report = std::env::temp_dir().join(format!("untether-rtsp-{}.json", std::process::id()));
    let mut host = untether()
        .args([
            "host",
            "--bind",
            "127.0.0.1:0",
            "--rtsp",
            "127.0.0.1:0",
            "--resolution",
            "640x360",
            "--duration",
            "60",
            "--report",
        ])
        .arg(&report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(host.stderr.take().unwrap()).lines();
    let mut url = None;
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line
            .split("play it: ffplay -fflags nobuffer -flags low_delay \"")
            .nth(1)
        {
            url = rest.split('"').next().map(str::to_string);
            break;
        }
        seen.push(line);
    }
    let url = url.unwrap_or_else(|| panic!("no URL printed: {seen:?}"));
    assert!(
        url.starts_with("rtsp://untether:") && url.ends_with("/untether"),
        "{url}"
    );
    let start = Instant::now();
    let played = Command::new("timeout")
        .args([
            "40",
            "ffmpeg",
            "-hide_banner",
            "-loglevel",
            "error",
            "-nostdin",
        ])
        .args([
            "-rtsp_transport",
            "tcp",
            "-i",
            &url,
            "-frames:v",
            "30",
            "-f",
            "null",
            "-",
        ])
        .output()
        .unwrap();
    assert!(
        played.status.success(),
        "ffmpeg failed after {:?}: {}",
        start.elapsed(),
        text(&played)
    );
    // Ctrl-C: the host stops, prints its summary with the RTSP line and writes its report.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(host.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(host.wait().unwrap().success(), "{rest:?}");
    let summary = rest
        .iter()
        .find(|l| l.contains("untether host: rtsp rtsp://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no RTSP summary: {rest:?}"));
    assert!(
        summary.contains("0 viewers now (1 in all, 0 refused)"),
        "{summary}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let c = &r["consumers"][0];
    assert_eq!(c["kind"], "rtsp");
    assert_eq!(c["viewers"][0]["transport"], "rtp/tcp");
    assert!(c["frames_sent"].as_u64().unwrap() >= 30, "{c}");
    let _ = std::fs::remove_file(report);
}
