//! The ffmpeg peer harness reads the peer's decoded frames back with their stamps.

use untether_bench::peer::{run_peer, PeerKind};
use untether_bench::scenario::Scenario;

fn check(kind: PeerKind) {
    if std::process::Command::new("ffmpeg")
        .arg("-version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no ffmpeg command (scripts/setup.sh installs it)");
        return;
    }
    let sc = Scenario {
        width: 640,
        height: 360,
        duration_s: 3.0,
        ..Default::default()
    };
    let r = run_peer(kind, &sc, &mut |_| {}).expect("peer ran");
    let numbers: Vec<u32> = r.frames.iter().map(|f| f.frame).collect();
    assert!(numbers.len() >= 60, "{} frames came back", numbers.len());
    assert!(
        numbers.windows(2).all(|p| p[0] < p[1]),
        "frame numbers out of order: {numbers:?}"
    );
    let g2g = r.report["latency_ms"]["glass_to_glass_pixels"]["p50"]
        .as_f64()
        .expect("measured");
    assert!(g2g > 0.0 && g2g < 1000.0, "{g2g}");
    let missing = untether_bench::contract::violations(&r.report, false);
    assert!(missing.is_empty(), "{missing:?}");
    eprintln!(
        "{}: {} frames, glass-to-glass p50 {g2g:.1} ms",
        kind.name(),
        numbers.len()
    );
}

#[test]
fn ffmpeg_rtp_frames_come_back_in_order() {
    check(PeerKind::FfmpegRtp);
}

#[test]
fn ffmpeg_rtp_tcp_frames_come_back_in_order() {
    check(PeerKind::FfmpegRtpTcp);
}
