//! `untether bench` as a user runs it: a short scenario writes a JSON report that meets the
//! contract and an HTML report with every plot; the netns mode cleans up after itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_three_second_scenario_writes_a_valid_json_and_an_html_report_with_plots() {
    let out = tmp("short");
    let o = untether()
        .args([
            "bench",
            "--duration",
            "3",
            "--resolution",
            "640x360",
            "--quality-batch",
            "60",
            "--response-interval",
            "400",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    let files = json_files(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let missing = untether_bench::contract::violations(&report, true);
    assert!(missing.is_empty(), "missing {missing:?} in {report}");
    let ssim = report["quality"]["ssim"].as_f64().expect("SSIM measured");
    assert!(ssim > 0.8 && ssim <= 1.0, "ssim {ssim}");
    assert!(report["quality"]["frames_compared"].as_u64().unwrap() >= 20);
    assert!(
        report["input"]["response_delay_ms"]["samples"]
            .as_u64()
            .unwrap()
            >= 2
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for plot in [
        "g2g-cdf",
        "stage-breakdown",
        "latency-over-time",
        "bitrate-over-time",
        "ssim-over-time",
        "response-delay",
    ] {
        let at = html
            .find(&format!("data-plot=\"{plot}\""))
            .unwrap_or_else(|| panic!("no {plot} plot"));
        let section_end = html[at..].find("</section>").map_or(html.len(), |e| at + e);
        assert!(html[at..section_end].contains("<svg"), "{plot} has no SVG");
    }
}

#[test]
fn impairment_flags_route_the_stream_through_relays() {
    let out = tmp("lossy");
    let o = untether()
        .args([
            "bench",
            "--duration",
            "3",
            "--resolution",
            "640x360",
            "--bitrate-kbps",
            "3000",
            "--quality-batch",
            "0",
            "--loss",
            "5%",
            "--seed",
            "7",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    let files = json_files(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let missing = untether_bench::contract::violations(&report, false);
    assert!(missing.is_empty(), "missing {missing:?} in {report}");
    assert_eq!(report["config"]["paths"], 1);
    let imp = report["config"]["impairment"].as_str().unwrap_or_default();
    assert!(imp.contains("loss 5"), "{imp}");
    // The relay dropped about 5 % of the host's datagrams (binomial, ~1500 datagrams: ±2 %).
    let down = &report["relays"][0]["down"];
    let (received, lost) = (
        down["received"].as_f64().unwrap(),
        down["dropped_loss"].as_f64().unwrap(),
    );
    assert!(received > 500.0, "{down}");
    let share = lost / received;
    assert!(
        (0.03..0.07).contains(&share),
        "dropped {share} of {received}"
    );
    // And the stream survived it (FEC and retransmission on by default), FEC rebuilding
    // some of the lost shards.
    assert!(
        report["frames"]["shown"].as_u64().unwrap() > 60,
        "{}",
        report["frames"]
    );
    assert!(
        report["network"]["packets_recovered"].as_u64().unwrap_or(0) > 0,
        "{}",
        report["network"]
    );
}

#[test]
fn a_bad_impairment_value_names_the_flag() {
    let o = untether()
        .args(["bench", "--duration", "1", "--loss", "150%"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("--loss"), "{err}");
    let o = untether()
        .args(["bench", "--duration", "1", "--netns", "--jitter", "2ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--netns") && err.contains("--loss") && err.contains("loopback"),
        "{err}"
    );
}

#[test]
fn a_bad_scenario_key_is_named() {
    let file = tmp("bad.toml");
    std::fs::write(&file, "[[scenario]]\nname = \"x\"\nprest = \"ultrafast\"\n").unwrap();
    let o = untether()
        .args(["bench", "--scenarios"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("prest"), "{err}");
    let o = untether()
        .args(["bench", "--preset", "warp", "--duration", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("preset") && err.contains("ultrafast"), "{err}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn namespaces_of(pid: u32) -> Vec<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("utb-{pid}-")))
        .map(str::to_string)
        .collect()
}

fn wait_for(mut f: impl FnMut() -> bool, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Starts a 30 s `untether bench --netns` at 640x360 with `extra` flags, stderr piped.
fn netns_bench(extra: &[&str], out: &str) -> std::process::Child {
    untether()
        .args([
            "bench",
            "--netns",
            "--duration",
            "30",
            "--resolution",
            "640x360",
        ])
        .args(extra)
        .args(["--quality-batch", "0", "--quiet", "--out"])
        .arg(tmp(out))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn netns_mode_cleans_up_when_killed_mid_run() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces); make test runs as root in CI");
        return;
    }
    let bench = |out: &str| netns_bench(&["--rate", "50mbit"], out);
    // Ctrl-C / SIGTERM: the command tears its namespaces down itself.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let child = bench("killed");
        let pid = child.id();
        assert!(
            wait_for(|| namespaces_of(pid).len() == 2, 15),
            "the namespaces never appeared"
        );
        std::thread::sleep(Duration::from_secs(2));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as i32, signal) };
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success());
        assert!(
            namespaces_of(pid).is_empty(),
            "left behind after signal {signal}: {:?}",
            namespaces_of(pid)
        );
    }
    // SIGKILL: nothing can run in the process; `--cleanup` removes what it left.
    let mut child = bench("sigkill");
    let pid = child.id();
    assert!(wait_for(|| namespaces_of(pid).len() == 2, 15));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(namespaces_of(pid).len(), 2, "SIGKILL cannot clean up");
    let o = untether().args(["bench", "--cleanup"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(namespaces_of(pid).is_empty(), "{:?}", namespaces_of(pid));
}

#[test]
fn netns_mode_cleans_up_when_the_client_is_killed_mid_run() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces); make test runs as root in CI");
        return;
    }
    // The peer's client is a process of its own (the receiving ffmpeg, in the client
    // namespace): kill it mid-run. The command notices, says so, and tears everything down.
    let child = netns_bench(&["--peer", "ffmpeg-rtp"], "client-killed");
    let pid = child.id();
    assert!(
        wait_for(|| namespaces_of(pid).len() == 2, 15),
        "the namespaces never appeared"
    );
    let client_ns = namespaces_of(pid)
        .into_iter()
        .find(|n| n.ends_with("-client"))
        .unwrap();
    let mut client_pids = Vec::new();
    assert!(
        wait_for(
            || {
                let o = Command::new("ip")
                    .args(["netns", "pids", &client_ns])
                    .output()
                    .unwrap();
                client_pids = String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .collect();
                !client_pids.is_empty()
            },
            15
        ),
        "no client process in {client_ns}"
    );
    std::thread::sleep(Duration::from_secs(2));
    for p in &client_pids {
        // SAFETY: signalling the receiving ffmpeg our child started.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    let killed_at = Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "took {:?} to notice",
        killed_at.elapsed()
    );
    assert!(
        err.contains("receiving ffmpeg") && err.contains("exited mid-run"),
        "{err}"
    );
    assert!(
        namespaces_of(pid).is_empty(),
        "left behind: {:?}",
        namespaces_of(pid)
    );
}
