//! `rtsp-udp` / `rtsp-tcp`: untether's host (the test scene, x264, in this process) with its
//! RTSP server (`untether host --rtsp`), played by the `ffmpeg` command over RTP/UDP or RTP
//! interleaved in the RTSP connection, which decodes and writes raw I420 that we read back;
//! glass-to-glass from the pixel stamps, as for the ffmpeg peers.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use untether::config::RtspToml;
use untether::host::{Consumer, HostSetup, StreamConsumer};
use untether::identity::Access;
use untether::report::Pcts;
use untether::stats::Stage;
use untether::Host;
use untether_rtsp::RtspServer;

use crate::peer::{peer_result, spawn_reader, PeerError, PeerKind, PeerRun, Reaped, LOW_DELAY_IN};
use crate::run::{demo_options, BenchOptions};
use crate::scenario::Scenario;
use crate::series::ScenarioResult;

/// Runs `sc` with the host's RTSP server and `ffmpeg -i rtsp://…` as the player.
pub(crate) fn run(
    kind: PeerKind,
    sc: &Scenario,
    progress: &mut dyn FnMut(f64),
) -> Result<ScenarioResult, PeerError> {
    if sc.transport != "loopback" {
        return Err(PeerError::Failed(format!(
            "{}: runs over loopback only (the host is in this process), not transport {:?}",
            kind.name(),
            sc.transport
        )));
    }
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        PeerError::Failed(format!("{}: {what}: {e}", kind.name()))
    };
    let transport = if kind == PeerKind::RtspTcp {
        "tcp"
    } else {
        "udp"
    };
    let mut opts = demo_options(
        sc,
        &BenchOptions {
            response_interval_ms: 0,
            ..Default::default()
        },
    )
    .map_err(|e| failed("scenario", &e))?;
    opts.host.host.bind = "127.0.0.1:0".into();
    // The host's one admission, shared with its RTSP server (as `untether host --rtsp` does).
    let defaults = HostSetup::default();
    let server = Arc::new(
        RtspServer::start_with(
            &RtspToml {
                listen: "127.0.0.1:0".into(),
                ..Default::default()
            },
            Access::Allowlist,
            defaults.admission.clone(),
        )
        .map_err(|e| failed("RTSP server", &e))?,
    );
    let (trust, _) = untether::identity::memory_pair();
    let host = Host::start_with(
        opts.host.clone(),
        HostSetup {
            trust,
            consumers: vec![Consumer(server.clone())],
            ..defaults
        },
    )
    .map_err(|e| failed("host", &e))?;
    let (w, h) = (sc.width, sc.height);
    let url = server.url_for("127.0.0.1", true);
    let mut player = Command::new("ffmpeg");
    player
        .args(["-hide_banner", "-loglevel", "error", "-nostats"])
        .args(LOW_DELAY_IN)
        .args(["-rtsp_transport", transport, "-i", &url])
        // Every decoded frame written once, as decoded: the rawvideo muxer would otherwise
        // make the output constant-rate (duplicating or dropping frames by timestamp).
        .args(["-fps_mode", "passthrough"])
        .args(["-an", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"]);
    let mut receiver = Reaped(
        Some(
            player
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(PeerError::NoFfmpeg)?,
        ),
        "ffmpeg (the RTSP player)",
    );
    let out = receiver
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .ok_or_else(|| PeerError::Failed("no player stdout".into()))?;
    let (reader, unreadable) = spawn_reader(out, w, h)?;
    let started = Instant::now();
    let total = Duration::from_secs_f64(sc.duration_s);
    let mut player_gone = None;
    while started.elapsed() < total {
        std::thread::sleep(Duration::from_millis(100));
        progress(started.elapsed().as_secs_f64() / sc.duration_s);
        if let Some(Ok(Some(status))) = receiver.0.as_mut().map(|c| c.try_wait()) {
            player_gone = Some(status);
            break;
        }
        if host.is_stopped() {
            break;
        }
    }
    let summary = host.stop();
    server.stop();
    let rtsp = server.summary();
    let tail = receiver.stderr_tail();
    let got = reader
        .join()
        .map_err(|_| PeerError::Failed("the reader panicked".into()))?;
    progress(1.0);
    if let Some(f) = &summary.fatal {
        return Err(failed("the host failed", f));
    }
    if let Some(status) = player_gone {
        return Err(PeerError::Failed(format!(
            "{}: the player exited mid-run ({status}) after {:.1} s. {tail}",
            kind.name(),
            started.elapsed().as_secs_f64()
        )));
    }
    if got.is_empty() {
        return Err(PeerError::Failed(format!(
            "{}: no frame came back. {tail}",
            kind.name()
        )));
    }
    let mut stages = serde_json::Map::new();
    for stage in [Stage::HostQueue, Stage::Convert, Stage::Encode] {
        if let Some(s) = summary.stages.get(&stage) {
            stages.insert(stage.name().into(), serde_json::json!(Pcts::from(s)));
        }
    }
    let mut extra = serde_json::Map::new();
    extra.insert("rtsp".into(), serde_json::json!(rtsp));
    let first_frame = got.iter().map(|r| u64::from(r.frame)).min().unwrap_or(0);
    Ok(peer_result(PeerRun {
        kind,
        sc,
        got,
        // The host captured and encoded only while the player watched.
        captured: summary.captured,
        encoded: summary.encoded,
        dropped_host: summary.dropped + rtsp.frames_dropped,
        first_frame,
        unreadable: unreadable.load(Ordering::Relaxed),
        duration_s: started.elapsed().as_secs_f64(),
        encoder: opts.host.video.selection.encoder.name(),
        conversion: opts.host.video.selection.conversion.name(),
        impairment: serde_json::Value::Null,
        stages,
        note: "untether's host encodes once (x264 as for its own clients) and serves the stream with its RTSP server (gst-rtsp-server, rtph264pay); the ffmpeg command plays rtsp:// (low-delay input flags as for the ffmpeg peers), decodes and writes raw I420 that untether reads back; glass-to-glass from the pixel stamps",
        extra,
    }))
}
