//! The latency report: the JSON contract of docs/REPORT.md (fields may be added, never
//! renamed) and its text rendering.
//!
//! Each section is its own type that builds itself from the run: [`Latency`] (`latency.rs`,
//! with the frame rows), [`FrameCounts`], [`StateReport`], [`InputReport`] and [`AudioReport`]
//! (`counts.rs`), [`NetworkReport`] (`network.rs`); [`build`] puts them together, and
//! [`build_host`] (`host.rs`) writes a standalone host's.

use serde::Serialize;

use crate::client::ClientRun;
use crate::host::HostSummary;

mod counts;
mod host;
mod latency;
mod network;
mod text;

pub use counts::{AudioReport, FrameCounts, InputReport, RumbleReport, StalenessMs, StateReport};
pub use host::build_host;
pub use latency::{frame_row, frame_rows, FrameRow, Latency, Pcts, SliceLatency};
pub use network::{LinkSides, NetworkReport, PathReport, ReconnectReport, RttMs, SessionReport};
pub use text::client_lines;

#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub codec: String,
    pub encoder: String,
    /// The client's decoder (and hardware accelerator), e.g. `h264 (software)`.
    pub decoder: String,
    /// How the stream recovers: `idr`, or `intra/N` (an intra-refresh sweep every N frames).
    pub refresh: String,
    pub preset: String,
    pub conversion: String,
    pub bitrate_kbps: u32,
    /// Slices per frame (`video.slices`; 1: frames sent whole).
    pub slices: u8,
    pub transport: String,
    pub paths: u32,
    pub impairment: Option<String>,
    pub display: String,
    pub machine: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub duration_s: f64,
    pub frames: FrameCounts,
    pub latency_ms: Latency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<serde_json::Value>,
    pub network: NetworkReport,
    pub input: InputReport,
    pub host_events: Vec<String>,
    /// Each session of the run (one more after each reconnection); the figures above are the
    /// whole run's.
    pub sessions: Vec<SessionReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioReport>,
    /// This client's role on a host serving several clients (None: the host did not say).
    pub role: Option<RoleReport>,
    /// The host's clients (with the host's summary: the demo, bench); empty otherwise.
    pub clients: Vec<crate::host::ClientSummary>,
    /// The host's other consumers (RTSP) and their viewers, when the host ran in this process
    /// and had any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<crate::host::ConsumerSummary>,
    pub state: StateReport,
}

/// A client's role as the host told it.
#[derive(Clone, Debug, Serialize)]
pub struct RoleReport {
    /// `controller` or `viewer`.
    pub role: &'static str,
    pub input_granted: bool,
    /// Times the host paused it to keyframes (its link could not carry the stream).
    pub times_paused: u32,
    /// False with `--no-decode` (frames received and counted, not decoded).
    pub decoded: bool,
    /// `--no-decode`: complete frames received.
    pub undecoded: u64,
}

/// Builds the report from what the client measured and, when the host ran in this process,
/// what the host measured.
pub fn build(mut config: ReportConfig, run: &ClientRun, host: Option<&HostSummary>) -> Report {
    if let Some(p) = &run.presenter {
        // What really drew (the GPU presenter, or SDL's renderer after a fallback).
        config.display = p.clone();
    }
    let duration_s = run
        .ended_us
        .saturating_sub(run.connected_us.unwrap_or(run.started_us)) as f64
        / 1e6;
    let latency_ms = Latency::measure(run);
    let audio = AudioReport::measure(run, latency_ms.glass_to_glass.p50);
    Report {
        config,
        duration_s: (duration_s * 1000.0).round() / 1000.0,
        frames: FrameCounts::measure(run, host),
        latency_ms,
        quality: None,
        network: NetworkReport::measure(run, host, duration_s),
        input: InputReport::measure(run, host),
        host_events: host.map(|h| h.events.clone()).unwrap_or_default(),
        sessions: SessionReport::measure(run),
        audio,
        role: run.role.map(|r| RoleReport {
            role: r.name(),
            input_granted: run.input_granted,
            times_paused: run.times_paused,
            decoded: run.decoding,
            undecoded: run.undecoded,
        }),
        clients: host.map(|h| h.clients.clone()).unwrap_or_default(),
        consumers: host.map(|h| h.consumers.clone()).unwrap_or_default(),
        state: StateReport::measure(run, host),
    }
}

/// A one-line description of this machine for reports: cores, CPU model, GPU (none used).
pub fn machine_description() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    format!("{cores} cores ({model}), CPU only (no GPU used)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Samples, Stage};
    use std::collections::BTreeMap;

    fn config() -> ReportConfig {
        crate::report_config(
            &crate::HostOptions::default(),
            crate::client::Display::Headless,
            "test",
        )
    }

    /// The report's stage keys (the JSON contract, literally in `stats::tests`) and their
    /// order are those of the string-keyed map `Stage` replaced.
    #[test]
    fn stage_keys_are_the_contracts() {
        let r = build(config(), &ClientRun::default(), None);
        let expected: BTreeMap<&str, Pcts> =
            Stage::PIPELINE.map(|s| (s.name(), Pcts::default())).into();
        assert_eq!(
            serde_json::to_string(&r.latency_ms.stages).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }

    /// Issue 36, item 3: a run with a reconnection reports its whole duration (from the first
    /// connection) and the goodput over the time actually connected (it was the last session's
    /// duration only: 98.59 Mbit/s on a 10 Mbit/s stream).
    #[test]
    fn a_run_with_a_reconnection_reports_goodput_over_the_time_connected() {
        let mut run = ClientRun {
            started_us: 500_000,
            connected_us: Some(1_000_000),
            ended_us: 11_000_000,
            // Gone 2 s, back; gone again for the last second.
            reconnects: vec![(3_000_000, 5_000_000), (10_000_000, 0)],
            ..Default::default()
        };
        // 10 Mbit/s over the 7 s connected.
        run.stats.bytes_received = 10_000_000 / 8 * 7;
        let r = build(config(), &run, None);
        assert_eq!(r.duration_s, 10.0);
        assert_eq!(r.network.connected_s, 7.0);
        assert!(
            (r.network.goodput_mbps - 10.0).abs() < 1e-9,
            "{}",
            r.network.goodput_mbps
        );
        assert_eq!(r.network.reconnects.len(), 2);
        assert_eq!(r.network.reconnects[1].resumed_s, None);
    }

    /// Issue 36, item 3: per-session sections, and the host's counts over the same time as the
    /// client's (they were the last session's host counts beside every session's client counts).
    #[test]
    fn a_run_across_a_host_restart_reports_each_session_and_sums_them() {
        use crate::client::{FrameRecord, SessionSpan};
        let span = |session, connected_us, lost_us, bytes, first, last| {
            let mut s = SessionSpan {
                session,
                connected_us,
                lost_us,
                bytes_received: bytes,
                host_first: Some(first),
                host_last: Some(last),
                ..Default::default()
            };
            s.closed = true;
            s
        };
        let shown = |session, capture_us, shown_us| FrameRecord {
            session,
            capture_us,
            shown_us,
            ..Default::default()
        };
        let run = ClientRun {
            started_us: 500_000,
            connected_us: Some(1_000_000),
            ended_us: 11_000_000,
            reconnects: vec![(3_000_000, 5_000_000)],
            // 10 Mbit/s for 2 s; the host restarts (its counters from 0); 10 Mbit/s for 6 s.
            sessions: vec![
                span(
                    0,
                    1_000_000,
                    Some(3_000_000),
                    2_500_000,
                    (100, 100, 0),
                    (159, 159, 1),
                ),
                span(1, 5_000_000, None, 7_500_000, (0, 0, 0), (179, 179, 0)),
            ],
            records: vec![
                shown(0, 2_000_000, 2_005_000),
                shown(0, 2_100_000, 2_107_000),
                shown(1, 6_000_000, 6_010_000),
            ],
            ..Default::default()
        };
        let r = build(config(), &run, None);
        let s = &r.sessions;
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].start_s, s[0].duration_s), (0.0, 2.0));
        assert_eq!((s[1].start_s, s[1].duration_s), (4.0, 6.0));
        assert!((s[0].goodput_mbps - 10.0).abs() < 1e-9 && (s[1].goodput_mbps - 10.0).abs() < 1e-9);
        assert_eq!((s[0].frames_shown, s[1].frames_shown), (2, 1));
        assert_eq!(s[0].glass_to_glass_ms.count, 2);
        assert_eq!(s[1].glass_to_glass_ms.p50, Some(10.0));
        assert_eq!(
            (s[0].host_captured, s[1].host_captured),
            (Some(60), Some(180))
        );
        // The run's host counts are the sessions' sum, not the last host run's counter.
        assert_eq!((r.frames.captured, r.frames.dropped_host), (240, 1));
        let text = r.to_text();
        assert!(
            text.contains("session 1 at 4.0 s: 6.0 s · 1 frames shown"),
            "{text}"
        );
    }

    #[test]
    fn the_host_report_names_the_host_queue_host_queue() {
        let mut h = HostSummary::default();
        h.stages.insert(Stage::HostQueue, Samples::default());
        h.stages.get_mut(&Stage::HostQueue).unwrap().push(1.5);
        let json = build_host(config(), &h);
        let stages = json["latency_ms"]["stages"].as_object().unwrap();
        let keys: Vec<&str> = stages.keys().map(String::as_str).collect();
        let mut expected = Stage::HOST.map(Stage::name);
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert!(!stages.contains_key("queue"));
        assert_eq!(stages[Stage::HostQueue.name()]["p50"], 1.5);
        assert_eq!(
            stages[Stage::Capture.name()]["p50"],
            serde_json::Value::Null
        );
    }
}
