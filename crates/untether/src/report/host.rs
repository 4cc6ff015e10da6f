//! The report a standalone host writes (`untether host --report`).

use std::collections::BTreeMap;

use super::{Pcts, ReportConfig};
use crate::host::HostSummary;
use crate::stats::Stage;

/// The report a standalone host writes: only what the host can measure.
pub fn build_host(config: ReportConfig, h: &HostSummary) -> serde_json::Value {
    let stages: BTreeMap<Stage, Pcts> = Stage::HOST
        .into_iter()
        .map(|stage| {
            (
                stage,
                h.stages.get(&stage).map(Pcts::from).unwrap_or_default(),
            )
        })
        .collect();
    let slices = config.slices;
    serde_json::json!({
        "side": "host",
        "config": config,
        "duration_s": h.duration_s,
        "frames": {
            "captured": h.captured, "encoded": h.encoded, "sent": h.sent,
            "dropped_host": h.dropped, "keyframes": h.keyframes,
            "forced_keyframes": h.forced_keyframes, "refresh_sweeps": h.refresh_sweeps,
            "largest_keyframe_bytes": h.largest_keyframe_bytes,
            "largest_frame_bytes": h.largest_frame_bytes,
        },
        "latency_ms": {
            "stages": stages,
            "slices": {
                "count": slices,
                "first_out": Pcts::from(&h.slice_out.0),
                "last_out": Pcts::from(&h.slice_out.1),
            },
        },
        "network": {
            "bytes_sent": h.bytes_sent, "packets_sent": h.packets_sent,
            "malformed": h.malformed_datagrams,
            "keyframe_requests_received": h.keyframe_requests_received,
            "keyframe_requests_ignored": h.keyframe_requests_ignored,
            "paced_frames": h.paced_frames,
            "pacing_window_ms": h.pacing_window_us as f64 / 1000.0,
            "bitrate_changes": h.bitrate_changes,
            "bitrate_changes_refused": h.bitrate_changes_refused,
            "link": h.link,
        },
        "input": {
            "events_applied": h.inputs_applied, "events_dropped": h.inputs_dropped,
            "events_dropped_viewer": h.inputs_dropped_viewer,
        },
        "clients": h.clients,
        "max_clients": h.max_clients,
        "frame_copies_sent": h.frame_copies_sent,
        "keyframes_for_joins": h.keyframes_for_joins,
        "viewers_paused": h.viewers_paused,
        "viewers_dropped": h.viewers_dropped,
        "unchanged_ticks": h.unchanged,
        "audio_packets_sent": h.audio_packets,
        "host_events": h.events,
        "consumers": h.consumers,
    })
}
