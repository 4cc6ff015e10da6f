//! The ffmpeg peer harness reads the peer's decoded frames back with their stamps.

use untether_bench::peer::{run_peer, PeerKind};
use untether_bench::scenario::Scenario;

fn no_ffmpeg() -> bool {
    if std::process::Command::new("ffmpeg")
        .arg("-version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no ffmpeg command (scripts/setup.sh installs it)");
        return true;
    }
    false
}

/// Runs `kind` for `duration_s` at 640x360 over `transport` (with `loss`) and checks that at
/// least 60 of its frames come back, in increasing order, with a valid report.
fn check(kind: PeerKind, transport: &str, loss: Option<f64>, duration_s: f64) -> serde_json::Value {
    let sc = Scenario {
        width: 640,
        height: 360,
        duration_s,
        transport: transport.into(),
        loss,
        ..Default::default()
    };
    let r = run_peer(kind, &sc, &mut |_| {}).expect("peer ran");
    let numbers: Vec<u32> = r.frames.iter().map(|f| f.frame).collect();
    assert!(numbers.len() >= 60, "{} frames came back", numbers.len());
    assert!(
        numbers.windows(2).all(|p| p[0] < p[1]),
        "frame numbers out of order: {numbers:?}"
    );
    if loss.is_none() {
        // The receiver keeps the first keyframe (it arrives while ffmpeg probes the stream):
        // frames come back from the first GOP (60 frames), not from the second keyframe on.
        assert!(
            numbers[0] < 60,
            "the first frame back is {}: the first GOP was lost",
            numbers[0]
        );
    }
    let g2g = r.report["latency_ms"]["glass_to_glass_pixels"]["p50"]
        .as_f64()
        .expect("measured");
    assert!(g2g > 0.0 && g2g < 1000.0, "{g2g}");
    let missing = untether_bench::contract::violations(&r.report, false);
    assert!(missing.is_empty(), "{missing:?}");
    eprintln!(
        "{} ({transport}): {} frames, glass-to-glass p50 {g2g:.1} ms",
        kind.name(),
        numbers.len()
    );
    r.report
}

#[test]
fn ffmpeg_rtp_frames_come_back_in_order() {
    if !no_ffmpeg() {
        check(PeerKind::FfmpegRtp, "loopback", None, 3.0);
    }
}

#[test]
fn ffmpeg_rtp_tcp_frames_come_back_in_order() {
    if !no_ffmpeg() {
        check(PeerKind::FfmpegRtpTcp, "loopback", None, 3.0);
    }
}

#[test]
fn ffmpeg_rtp_tcp_streams_between_namespaces_through_kernel_loss() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (network namespaces); make test runs as root in CI");
        return;
    }
    if no_ffmpeg() {
        return;
    }
    // Real kernel TCP through 5 % loss each way: frames come back in order (TCP retransmits),
    // and the report names the loss and what the kernel dropped. 6 s, not 3: the loss also
    // takes the RTSP handshake's packets, and a lost SYN costs the sender 1 s (two, 3 s)
    // before the first frame flows (CI once saw 5 frames back in a 3 s run).
    let report = check(PeerKind::FfmpegRtpTcp, "netns", Some(0.05), 6.0);
    let imp = report["config"]["impairment"].as_str().unwrap_or_default();
    assert!(imp.contains("kernel loss 5%"), "{imp}");
    let dropped: u64 = imp
        .split("dropped ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(dropped > 0, "the kernel dropped nothing: {imp}");
    // The namespaces are gone with the run.
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let me = format!("utb-{}-", std::process::id());
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&me),
        "namespaces left behind"
    );
}
