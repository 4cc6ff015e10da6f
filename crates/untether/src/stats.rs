//! Latency samples, their percentiles (one definition: [`untether_proto::stats`]), and the
//! latency stages the reports break glass-to-glass into.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

pub use untether_proto::stats::{nearest_rank, percentile, Samples, Summary, HIGHEST_US};

/// One latency stage of a frame's (or an audio packet's) way from capture to the screen, as the
/// reports name it: [`Stage::name`] is the JSON key under `latency_ms.stages`.
///
/// Ordered by name, so a map keyed by `Stage` serializes its keys in the same order as the
/// string-keyed maps it replaced; [`Stage::PIPELINE`] is the order a frame goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Host: rendering or grabbing the picture (before the capture instant).
    Capture,
    /// Host: capture instant → encoder start (waiting in the source→encoder slot).
    HostQueue,
    /// Host: BGRA → YUV (or the BGRA copy for RGB encoding).
    Convert,
    /// Host: x264.
    Encode,
    /// Host: first shard handed to the socket → last shard handed to the socket (includes
    /// [`Stage::Pace`] when pacing is on).
    Send,
    /// Host: time the sender slept between paced batches of one frame.
    Pace,
    /// Last shard sent (host) → last shard received (client).
    Network,
    /// Client: last shard received → decoder start.
    Reassemble,
    /// Client: FFmpeg decode.
    Decode,
    /// Client: decoded → shown.
    Present,
    /// Host: Opus encoding of one audio packet.
    AudioEncode,
    /// Host (synchronous API): time `send_frame` blocked waiting for the encoder.
    SyncBlocked,
}

impl Stage {
    /// Every stage: [`Stage::PIPELINE`] with `pace` after `send`, then the audio and API stages.
    pub const ALL: [Stage; 12] = [
        Stage::Capture,
        Stage::HostQueue,
        Stage::Convert,
        Stage::Encode,
        Stage::Send,
        Stage::Pace,
        Stage::Network,
        Stage::Reassemble,
        Stage::Decode,
        Stage::Present,
        Stage::AudioEncode,
        Stage::SyncBlocked,
    ];

    /// The stages of a video frame in the order it goes through them: the rows of the report.
    pub const PIPELINE: [Stage; 9] = [
        Stage::Capture,
        Stage::HostQueue,
        Stage::Convert,
        Stage::Encode,
        Stage::Send,
        Stage::Network,
        Stage::Reassemble,
        Stage::Decode,
        Stage::Present,
    ];

    /// The stages the host measures on its own (its standalone report's rows).
    pub const HOST: [Stage; 5] = [
        Stage::Capture,
        Stage::HostQueue,
        Stage::Convert,
        Stage::Encode,
        Stage::Send,
    ];

    /// The JSON key (`latency_ms.stages.<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Capture => "capture",
            Stage::HostQueue => "host_queue",
            Stage::Convert => "convert",
            Stage::Encode => "encode",
            Stage::Send => "send",
            Stage::Pace => "pace",
            Stage::Network => "network",
            Stage::Reassemble => "reassemble",
            Stage::Decode => "decode",
            Stage::Present => "present",
            Stage::AudioEncode => "audio_encode",
            Stage::SyncBlocked => "sync_blocked",
        }
    }
}

impl Ord for Stage {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl PartialOrd for Stage {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Stage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A stage name that is none of [`Stage::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown latency stage {0:?}: expected one of {names}", names = stage_names())]
pub struct UnknownStage(pub String);

fn stage_names() -> String {
    Stage::ALL.map(Stage::name).join(", ")
}

impl FromStr for Stage {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Stage::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownStage(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn percentiles_nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push_us(i);
        }
        let m = s.summary().unwrap();
        assert_eq!((m.p50, m.p95, m.p99, m.max), (0.05, 0.095, 0.099, 0.1));
        assert!(Samples::default().summary().is_none());
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 95.0), Some(95));
    }

    #[test]
    fn bounded() {
        // The whole session counts (no ring buffer), NaN is skipped.
        let mut s = Samples::default();
        for i in 0..36_010 {
            s.push(i as f64);
        }
        assert_eq!(s.len(), 36_010);
        s.push(f64::NAN);
        assert_eq!(s.len(), 36_010);
    }

    #[test]
    fn stage_names_round_trip_and_are_unique() {
        for st in Stage::ALL {
            assert_eq!(st.name().parse::<Stage>(), Ok(st));
            assert_eq!(st.to_string(), st.name());
            assert_eq!(
                serde_json::to_value(st).unwrap(),
                serde_json::Value::String(st.name().into())
            );
        }
        let mut names: Vec<_> = Stage::ALL.map(Stage::name).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Stage::ALL.len());
        assert!(Stage::PIPELINE.iter().all(|s| Stage::ALL.contains(s)));
        assert!(Stage::HOST.iter().all(|s| Stage::PIPELINE.contains(s)));
        let e = "queue".parse::<Stage>().unwrap_err().to_string();
        assert!(
            e.contains("\"queue\"") && e.contains("host_queue, convert"),
            "{e}"
        );
    }

    /// The JSON contract (docs/REPORT.md): these keys never change.
    #[test]
    fn names_are_the_report_contract() {
        assert_eq!(
            Stage::PIPELINE.map(Stage::name),
            [
                "capture",
                "host_queue",
                "convert",
                "encode",
                "send",
                "network",
                "reassemble",
                "decode",
                "present"
            ]
        );
        assert_eq!(
            Stage::ALL.map(Stage::name)[9..],
            ["present", "audio_encode", "sync_blocked"]
        );
        assert_eq!(Stage::Pace.name(), "pace");
    }

    #[test]
    fn a_stage_map_serializes_like_the_string_map_it_replaced() {
        let by_stage: BTreeMap<Stage, u32> = Stage::ALL.iter().map(|&s| (s, 1)).collect();
        let by_name: BTreeMap<&str, u32> = Stage::ALL.iter().map(|s| (s.name(), 1)).collect();
        assert_eq!(
            serde_json::to_string(&by_stage).unwrap(),
            serde_json::to_string(&by_name).unwrap()
        );
    }
}
