//! Codecs as a user meets them: `untether demo --codec hevc|av1`, a hardware encoder or decoder
//! asked for on a machine without one (one line each), a codec mismatch between a host and a
//! client (both lists named on both sides), and `untether doctor --json`.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c.env(
        "UNTETHER_STATE_DIR",
        std::env::temp_dir().join(format!("untether-codecs-state-{}", std::process::id())),
    );
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-codecs-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The done-when: `untether demo --codec hevc` and `--codec av1` stream with ≥ 95 % of
/// the frames sent shown (the default software encoders, 10 Mbit/s). At 360p: x265 at 720p60
/// encoded 10 frames in 3 s on a CI machine busy with background builds (CI of 2026-11-30), so
/// a floor on frames sent at 720p tests the machine's load, not the stream; the speed at 720p is
/// `untether bench`'s (docs/BENCHMARKS.md).
#[test]
fn demo_streams_hevc_and_av1_and_shows_95_percent_of_the_frames_sent() {
    for (codec, encoder) in [("hevc", "libx265"), ("av1", "libsvtav1")] {
        let report = tmp(&format!("demo-{codec}.json"));
        let o = untether()
            .args(["demo", "--codec", codec, "--resolution", "360p"])
            .args(["--duration", "4", "--headless"])
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert!(o.status.success(), "{codec}: {}", text(&o));
        let r = json(&report);
        assert_eq!(r["config"]["codec"], codec, "{r}");
        assert_eq!(r["config"]["encoder"], encoder, "{r}");
        let f = &r["frames"];
        let (sent, shown) = (f["sent"].as_u64().unwrap(), f["shown"].as_u64().unwrap());
        // Streaming at all (the host drops what it cannot encode, so on loaded cores fewer than
        // 240 frames are sent); what is sent must be shown, but for the one frame that may be
        // on its way when the demo stops (49 sent, 48 shown with two busy loops beside it).
        assert!(sent >= 10, "{codec}: only {sent} frames sent in 4 s: {f}");
        assert!(
            (shown + 1) as f64 >= 0.95 * sent as f64,
            "{codec}: {shown} of {sent} frames shown: {f}"
        );
        assert_eq!(f["corrupted"], 0, "{codec}: {f}");
    }
}

#[test]
fn an_absent_nvenc_asked_for_by_name_is_one_line_naming_the_device() {
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has an NVIDIA GPU");
        return;
    }
    let o = untether()
        .args([
            "demo",
            "--encoder",
            "h264_nvenc",
            "--duration",
            "1",
            "--headless",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    // (The demo's banner names the encoder too.)
    let lines: Vec<&str> = t.lines().filter(|l| l.contains("nvidia")).collect();
    assert_eq!(lines.len(), 1, "{t}");
    let l = lines[0];
    assert!(
        l.starts_with("untether: error:")
            && l.contains("/dev/nvidiactl")
            && l.contains("does not fall back")
            && l.contains("libx264"),
        "{l}"
    );
}

#[test]
fn hwaccel_vaapi_without_a_gpu_falls_back_to_software_with_one_line() {
    if Path::new("/dev/dri").exists() {
        eprintln!("skipped: this machine has /dev/dri");
        return;
    }
    let report = tmp("hw-decoding.json");
    let o = untether()
        .args([
            "demo",
            "--hwaccel",
            "vaapi",
            "--duration",
            "1500ms",
            "--headless",
            "--resolution",
            "640x360",
        ])
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    let lines: Vec<&str> = t.lines().filter(|l| l.contains("vaapi")).collect();
    assert_eq!(lines.len(), 1, "{t}");
    assert!(
        lines[0].contains("/dev/dri/renderD") && lines[0].contains("in software"),
        "{}",
        lines[0]
    );
    let r = json(&report);
    assert!(r["frames"]["shown"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["config"]["decoder"], "h264 (software)", "{r}");
}

#[test]
fn a_codec_mismatch_names_both_lists_on_both_sides() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = untether()
        .env("RUST_LOG", "info")
        .args([
            "host",
            "--access",
            "open",
            "--codec",
            "hevc",
            "--resolution",
            "640x360",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--duration",
            "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host never bound udp port {port}"
    );
    let o = untether()
        .args([
            "client",
            &format!("127.0.0.1:{port}"),
            "--codecs",
            "h264,av1",
            "--headless",
            "--duration",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("Codec") && t.contains("the host encodes hevc, this client decodes h264, av1"),
        "{t}"
    );
    let h = host.wait_with_output().unwrap();
    let ht = String::from_utf8_lossy(&h.stderr);
    assert!(
        ht.contains(
            "no video codec in common: the host encodes hevc, this client decodes h264, av1"
        ),
        "{ht}"
    );
}

/// `untether doctor --json` (make test runs it): the software encoders open at 720p60, the
/// host and client roles can run, every line says what it checked.
#[test]
fn doctor_json_names_the_software_encoders_as_working() {
    let o = untether()
        .args(["doctor", "--json", "--frames", "6"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["ok"], true, "{d}");
    assert_eq!(d["size"], "1280x720");
    let works = |list: &str, name: &str| {
        d[list]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == name && e["works"] == true && e["ms_per_frame"].is_number())
    };
    for e in ["libx264", "libx265", "libsvtav1", "libx264rgb"] {
        assert!(works("encoders", e), "{e} does not work: {d}");
    }
    for dec in ["h264", "hevc", "libdav1d"] {
        assert!(works("decoders", dec), "{dec} does not work: {d}");
    }
    let kinds: Vec<&str> = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    for k in [
        "encoder", "decoder", "device", "display", "audio", "network", "clock", "state", "cpu",
    ] {
        assert!(kinds.contains(&k), "no {k} check: {d}");
    }
    // A check that is not fine says how to fix it.
    for c in d["checks"].as_array().unwrap() {
        if c["status"] == "warn" || c["status"] == "fail" {
            assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c}");
        }
    }
}

#[test]
fn help_names_the_codec_flags_and_the_doctor() {
    let t = |args: &[&str]| text(&untether().args(args).output().unwrap());
    let top = t(&["--help"]);
    assert!(top.contains("doctor"), "{top}");
    let demo = t(&["demo", "--help"]);
    for flag in [
        "--codec",
        "--encoder",
        "--refresh",
        "--refresh-period",
        "--codecs",
        "--decoder",
        "--hwaccel",
    ] {
        assert!(demo.contains(flag), "demo --help lacks {flag}");
    }
    let client = t(&["client", "--help"]);
    for flag in ["--codecs", "--decoder", "--hwaccel"] {
        assert!(client.contains(flag), "client --help lacks {flag}");
    }
    let doctor = t(&["doctor", "--help"]);
    assert!(
        doctor.contains("--json") && doctor.contains("rmem_max"),
        "{doctor}"
    );
    let bench = t(&["bench", "--help"]);
    assert!(
        bench.contains("--codec") && bench.contains("--refresh"),
        "{bench}"
    );
    // A bad value names the flag and what is allowed.
    let o = untether()
        .args(["demo", "--refresh", "sometimes"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("intra"),
        "{}",
        text(&o)
    );
    let o = untether()
        .args(["demo", "--codec", "hevc", "--refresh", "intra"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("--refresh") && text(&o).contains("--codec"),
        "{}",
        text(&o)
    );
}

/// Issue 36, item 6: `doctor` with a configuration file that does not load still checks the
/// rest (with the defaults) and says what is wrong with the file as a failed check of its own.
#[test]
fn doctor_checks_everything_even_with_a_bad_config_file() {
    let dir = std::env::temp_dir().join(format!("untether-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[video]\nfps = \"sixty\"\n").unwrap();
    let o = untether()
        .arg("--config")
        .arg(&bad)
        .args(["doctor", "--json", "--frames", "2"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a bad config file is a failure");
    let d: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {}", text(&o)));
    let checks = d["checks"].as_array().unwrap();
    let config = checks
        .iter()
        .find(|c| c["kind"] == "config")
        .expect("a config check");
    assert_eq!(config["status"], "fail", "{config}");
    assert!(
        config["detail"].as_str().unwrap().contains("fps"),
        "{config}"
    );
    // The rest was checked all the same.
    assert!(checks.iter().any(|c| c["kind"] == "encoder"), "{d}");
    assert!(checks.iter().any(|c| c["kind"] == "network"), "{d}");
    let _ = std::fs::remove_dir_all(&dir);
}
