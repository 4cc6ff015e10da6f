//! The JSON report contract (docs/REPORT.md, "The contract"): the keys every report —
//! untether's or a peer's — must carry. Checked by the tests and before a bench run writes.

use serde_json::Value;
use untether::stats::Stage;

const CONFIG: [&str; 9] = [
    "width",
    "height",
    "fps",
    "codec",
    "encoder",
    "bitrate_kbps",
    "transport",
    "paths",
    "impairment",
];
const FRAMES: [&str; 11] = [
    "captured",
    "encoded",
    "sent",
    "complete",
    "decoded",
    "shown",
    "late",
    "lost",
    "corrupted",
    "dropped_host",
    "dropped_client",
];
const PCTS: [&str; 4] = ["p50", "p95", "p99", "max"];
/// Stages every untether report measures (a peer reports what it can see): the pipeline but
/// the host queue, which only untether's host can see.
pub fn required_stages() -> impl Iterator<Item = Stage> {
    Stage::PIPELINE
        .into_iter()
        .filter(|s| *s != Stage::HostQueue)
}

/// Every violation of the contract in `report`; empty when it conforms. `all_stages`: require
/// every pipeline stage (untether's own reports).
pub fn violations(report: &Value, all_stages: bool) -> Vec<String> {
    let mut v = Vec::new();
    let mut need = |path: &str, ok: bool| {
        if !ok {
            v.push(path.to_string());
        }
    };
    need("duration_s", report["duration_s"].is_number());
    for k in CONFIG {
        need(&format!("config.{k}"), report["config"].get(k).is_some());
    }
    for k in FRAMES {
        need(&format!("frames.{k}"), report["frames"][k].is_u64());
    }
    for m in ["glass_to_glass", "glass_to_glass_pixels"] {
        for p in PCTS {
            need(
                &format!("latency_ms.{m}.{p}"),
                report["latency_ms"][m].get(p).is_some(),
            );
        }
    }
    need(
        "latency_ms.stages",
        report["latency_ms"]["stages"].is_object(),
    );
    if all_stages {
        for s in required_stages() {
            for p in ["p50", "p95", "p99"] {
                need(
                    &format!("latency_ms.stages.{s}.{p}"),
                    report["latency_ms"]["stages"][s.name()].get(p).is_some(),
                );
            }
        }
    }
    for k in [
        "bytes_sent",
        "packets_sent",
        "packets_lost",
        "packets_recovered",
    ] {
        need(&format!("network.{k}"), report["network"].get(k).is_some());
    }
    for p in ["p50", "p99"] {
        need(
            &format!("network.rtt_ms.{p}"),
            report["network"]["rtt_ms"].get(p).is_some(),
        );
    }
    for k in ["events_sent", "events_applied"] {
        need(&format!("input.{k}"), report["input"].get(k).is_some());
    }
    for p in ["p50", "p99"] {
        need(
            &format!("input.response_ms.{p}"),
            report["input"]["response_ms"].get(p).is_some(),
        );
    }
    if let Some(q) = report.get("quality") {
        need("quality.ssim", q["ssim"].is_number());
        need("quality.psnr_db", q["psnr_db"].is_number());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_object_misses_everything_and_names_it() {
        let v = violations(&serde_json::json!({}), true);
        assert!(v.contains(&"config.width".to_string()));
        assert!(v.contains(&"latency_ms.stages.decode.p50".to_string()));
        assert!(v.contains(&"input.response_ms.p99".to_string()));
    }
}
