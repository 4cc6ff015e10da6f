//! The latency report: the JSON contract of docs/REPORT.md (fields may be added, never
//! renamed) and its text rendering.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::client::{ClientRun, FrameRecord};
use crate::host::HostSummary;
use crate::stats::{Samples, Stage, Summary};
use untether_proto::FrameTiming;

/// Percentiles in milliseconds; null when nothing was measured.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Pcts {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub count: u64,
}

impl From<Option<Summary>> for Pcts {
    fn from(s: Option<Summary>) -> Self {
        match s {
            None => Pcts::default(),
            Some(s) => Pcts {
                p50: Some(s.p50),
                p95: Some(s.p95),
                p99: Some(s.p99),
                max: Some(s.max),
                mean: Some(s.mean),
                count: s.count,
            },
        }
    }
}

impl From<&Samples> for Pcts {
    fn from(s: &Samples) -> Self {
        s.summary().into()
    }
}

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

#[derive(Clone, Debug, Default, Serialize)]
pub struct FrameCounts {
    pub captured: u64,
    pub encoded: u64,
    pub sent: u64,
    pub complete: u64,
    pub decoded: u64,
    pub shown: u64,
    pub late: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub dropped_host: u64,
    pub dropped_client: u64,
    pub keyframes: u64,
    pub stamp_unreadable: u64,
    /// Frames decoded but not shown: an intra-refresh sweep after a join or a loss was still
    /// under way (the picture was not yet clean).
    pub held: u64,
    /// Host (demo only): intra-refresh sweeps started, and keyframes the host asked the encoder
    /// for (a joining client, a keyframe request, the application).
    pub refresh_sweeps: Option<u64>,
    pub forced_keyframes: Option<u64>,
    /// Host (demo only): the largest keyframe and the largest other frame encoded, bytes.
    pub largest_keyframe_bytes: Option<u64>,
    pub largest_frame_bytes: Option<u64>,
    /// Frames sent in slices that were decoded with a lost slice's region concealed.
    pub concealed: u64,
    /// Slices given up (their frame still shown, the region concealed).
    pub slices_lost: u64,
    /// The longest time between two shown frames (a freeze), and how many such gaps exceeded
    /// 100 ms.
    pub longest_freeze_ms: f64,
    pub freezes_over_100ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub glass_to_glass: Pcts,
    pub glass_to_glass_pixels: Pcts,
    /// Per-frame |glass_to_glass − glass_to_glass_pixels|: how well metadata and pixels agree.
    pub timestamp_pixel_disagreement: Pcts,
    /// Every stage of [`Stage::PIPELINE`], keyed by [`Stage::name`]; host_queue is capture
    /// instant → encoder start (the time a frame waits for the encoder).
    pub stages: BTreeMap<Stage, Pcts>,
    /// glass-to-glass minus convert, encode and decode, per frame.
    pub pipeline_overhead: Pcts,
    /// A head pose sample on the client → the presented image shows that pose, read from the
    /// presented pixels (the scene's pose markers; `client::photon`). Null without `--vr`.
    pub pose_to_photon: Pcts,
    /// Per shown frame: shown time − the client's sample time of the pose the host rendered it
    /// for (from the FramePose metadata: pose-to-photon without late warp).
    pub rendered_pose_to_photon: Pcts,
    /// Frames sent in slices: when their slices left the encoder and were decoded.
    pub slices: SliceLatency,
}

/// The timeline of frames sent in slices, each a time since the frame's capture: the host's
/// encoder handed the first and the last slice to the network; the client decoded the first
/// slice and the last (the picture). Null with slices = 1.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SliceLatency {
    /// Slices per frame (the most seen; 1: frames sent whole).
    pub count: u8,
    pub first_out: Pcts,
    pub last_out: Pcts,
    pub first_decoded: Pcts,
    pub last_decoded: Pcts,
}

/// The latest-wins state channels: staleness per key (each key's worst, over keys) and the
/// head pose bookkeeping.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StateReport {
    /// Client → host (pointer, head pose, axes).
    pub keys: usize,
    pub staleness_ms: StalenessMs,
    /// Host → client (what the host published); null without the host's summary.
    pub host_keys: Option<usize>,
    pub host_staleness_ms: Option<StalenessMs>,
    pub updates_sent: u64,
    /// Decoded frames whose FramePose was known.
    pub frames_with_pose: u64,
    /// Presents whose pose-to-photon could not be measured: no marker read, a yaw the head had
    /// twice in the search window, or one it never had.
    pub pose_photon_unread: u64,
    pub pose_photon_ambiguous: u64,
    pub pose_photon_unmatched: u64,
}

/// Staleness over keys, ms.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StalenessMs {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// At delivery, over every delivery.
    pub mean: f64,
}

impl From<untether_proto::Staleness> for StalenessMs {
    fn from(s: untether_proto::Staleness) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        StalenessMs {
            p50: ms(s.p50_us),
            p99: ms(s.p99_us),
            max: ms(s.max_us),
            mean: ms(s.mean_us),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RttMs {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct NetworkReport {
    pub bytes_sent: u64,
    pub packets_sent: u64,
    pub bytes_received: u64,
    pub packets_received: u64,
    pub packets_lost: u64,
    /// Lost shards the client rebuilt from FEC parity.
    pub packets_recovered: u64,
    pub malformed: u64,
    pub keyframe_requests_sent: u64,
    pub rtt_ms: RttMs,
    /// Host clock minus client clock, as estimated by ping/pong (≈ 0 on one machine).
    pub clock_offset_ms: Option<f64>,
    pub clock_uncertainty_ms: Option<f64>,
    /// How the offset was known: `shared` (one machine, one clock: exact), `synchronized`
    /// (the user says so) or `estimated` (ping/pong, within the uncertainty).
    pub clock: &'static str,
    pub goodput_mbps: f64,
    /// Per path (one without multipath): what the host sent on it and what the client got.
    pub paths: Vec<PathReport>,
    /// Adaptive bitrate: encoder reconfigurations, and the controller's target at the end
    /// (null: never changed, or the controller is off).
    pub bitrate_changes: u64,
    pub final_bitrate_kbps: Option<u32>,
    /// Retransmission: ShardNacks the client sent, data shards the host resent, frames given
    /// up after their NACKs failed.
    pub shard_nacks_sent: u64,
    pub shards_retransmitted: Option<u64>,
    pub frames_abandoned: u64,
    /// Host (demo only): frames whose datagrams were spread over more than one paced batch
    /// (`network.pacing`); their `send` stage includes the pacing.
    pub paced_frames: Option<u64>,
    /// Host (demo only): the pacing window a frame's datagrams are spread over (0: off).
    pub pacing_window_ms: Option<f64>,
    /// ICMP port-unreachable reports the client got on its main path (a live session survives
    /// forged ones).
    pub refusals: u64,
    /// Each time the host went away and the client reconnected (seconds since the client
    /// started; `resumed_s` null: it never came back).
    pub reconnects: Vec<ReconnectReport>,
    /// The data plane's transport, each side (`network.transport`, raw layer 2).
    pub link: LinkSides,
}

/// The raw layer-2 transport as each side saw it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LinkSides {
    pub client: crate::link::LinkReport,
    /// Null in a client-only report.
    pub host: Option<crate::link::LinkReport>,
}

/// One loss of the host and the client's return to it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReconnectReport {
    pub lost_s: f64,
    pub resumed_s: Option<f64>,
}

/// One path of the session.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathReport {
    /// The host address the client sent to.
    pub host_addr: String,
    /// The client address the host sent to (as the host saw it).
    pub client_addr: Option<String>,
    pub datagrams_sent: Option<u64>,
    pub datagrams_received: u64,
    /// Datagrams whose first copy came on this path.
    pub first_copies: u64,
    /// Copies another path had already delivered (dropped).
    pub duplicates: u64,
    pub srtt_ms: Option<f64>,
    pub alive: Option<bool>,
    /// Times the host declared the path dead.
    pub deaths: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct InputReport {
    pub events_sent: u64,
    pub events_applied: Option<u64>,
    /// Input event sent by the client → first decoded frame whose pixel stamp shows the
    /// scene had applied it.
    pub response_ms: Pcts,
}

/// Audio playback on the client.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AudioReport {
    pub driver: String,
    pub device_buffer_ms: f64,
    pub packets_received: u64,
    pub packets_played: u64,
    pub late: u64,
    /// Lost packets recovered from the redundant copy in the next packet.
    pub recovered: u64,
    /// Lost packets concealed by the decoder.
    pub concealed: u64,
    pub underruns: u64,
    /// Packets dropped to bring the buffer back to its target.
    pub dropped: u64,
    /// Audio skipped in quiet blocks to bring a late playout back to its schedule.
    pub trimmed_ms: f64,
    /// The jitter buffer's playout target: where it ended, and its range over the run.
    pub target_ms: f64,
    pub target_min_ms: Option<f64>,
    pub target_max_ms: Option<f64>,
    /// A packet's first sample: captured on the host → leaves the client's audio device.
    pub mouth_to_ear_ms: Pcts,
    /// Audio latency minus video glass-to-glass (medians): > 0 means sound comes late.
    pub av_offset_ms: Option<f64>,
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

/// One shown frame's measurements, client clock: what [`build`] summarises, for benchmarks
/// that plot frame by frame.
#[derive(Clone, Debug, Serialize)]
pub struct FrameRow {
    pub frame_number: u32,
    pub keyframe: bool,
    /// Capture time on the client's clock (host clock minus the estimated offset).
    pub captured_us: i64,
    /// Capture (as the frame header says) → shown.
    pub glass_to_glass_us: i64,
    /// Capture (as the pixel stamp says) → shown, when the stamp was readable.
    pub glass_to_glass_pixels_us: Option<i64>,
    /// Per-stage times in pipeline order; host stages only when the host's timing arrived.
    pub stages_us: Vec<(Stage, i64)>,
    /// Glass-to-glass minus conversion, encoding and decoding: what the pipeline adds.
    pub overhead_us: Option<i64>,
    pub bytes: usize,
}

/// Every shown frame of `run` as a [`FrameRow`], in display order.
pub fn frame_rows(run: &ClientRun) -> Vec<FrameRow> {
    let offset = run.clock.map_or(0, |c| c.offset_us);
    let mut rows = Vec::with_capacity(run.records.len());
    for r in run.records.iter().filter(|r| r.shown_us != 0) {
        // Timings are the current session's: an earlier session's frame numbers repeat.
        let timing = run
            .timings
            .get(&r.frame_number)
            .filter(|_| r.session == run.session);
        rows.push(frame_row(r, timing, offset));
    }
    rows
}

/// One shown frame's row: `timing` is the host's report for it (None: not arrived, or another
/// session's), `offset` the host clock minus the client's, µs. The one place the stages of a
/// frame are defined (the report and the client's live overlay both use it).
pub fn frame_row(r: &FrameRecord, timing: Option<&FrameTiming>, offset: i64) -> FrameRow {
    let to_client = |host_us: u64| host_us as i64 - offset;
    let shown = r.shown_us as i64;
    let g = shown - to_client(r.capture_us);
    let gp = r.stamp.map(|stamp| {
        let reference = (r.shown_us as i64 + offset).max(0) as u64;
        let captured = untether_media::stamp::unwrap_capture_us(stamp.capture_us, reference);
        shown - to_client(captured)
    });
    // The time in the decoder (for a frame sent in slices, its calls' sum).
    let decode = r.decode_us as i64;
    let mut stages = Vec::with_capacity(9);
    let mut overhead = None;
    if let Some(t) = timing {
        let send_start = t.send_done_us as i64 - t.send_us as i64;
        stages.push((Stage::Capture, t.capture_dur_us as i64));
        stages.push((
            Stage::HostQueue,
            send_start - t.encode_us as i64 - t.convert_us as i64 - r.capture_us as i64,
        ));
        stages.push((Stage::Convert, t.convert_us as i64));
        stages.push((Stage::Encode, t.encode_us as i64));
        stages.push((Stage::Send, t.send_us as i64));
        // Clock-offset error can make this slightly negative on one machine: clamp.
        stages.push((
            Stage::Network,
            (r.last_shard_us as i64 - to_client(t.send_done_us)).max(0),
        ));
        overhead = Some(g - t.convert_us as i64 - t.encode_us as i64 - decode);
    }
    stages.push((
        Stage::Reassemble,
        r.last_decode_start_us as i64 - r.last_shard_us as i64,
    ));
    stages.push((Stage::Decode, decode));
    stages.push((Stage::Present, r.shown_us as i64 - r.decode_end_us as i64));
    FrameRow {
        frame_number: r.frame_number,
        keyframe: r.keyframe,
        captured_us: to_client(r.capture_us),
        glass_to_glass_us: g,
        glass_to_glass_pixels_us: gp,
        stages_us: stages,
        overhead_us: overhead,
        bytes: r.bytes,
    }
}

/// Builds the report from what the client measured and, when the host ran in this process,
/// what the host measured.
pub fn build(mut config: ReportConfig, run: &ClientRun, host: Option<&HostSummary>) -> Report {
    if let Some(p) = &run.presenter {
        // What really drew (the GPU presenter, or SDL's renderer after a fallback).
        config.display = p.clone();
    }
    let offset = run.clock.map_or(0, |c| c.offset_us);
    let to_client = |host_us: u64| host_us as i64 - offset;
    let mut g2g = Samples::default();
    let mut g2g_px = Samples::default();
    let mut disagree = Samples::default();
    let mut overhead = Samples::default();
    let mut st: BTreeMap<Stage, Samples> = BTreeMap::new();
    for row in frame_rows(run) {
        g2g.push_us(row.glass_to_glass_us);
        if let Some(gp) = row.glass_to_glass_pixels_us {
            g2g_px.push_us(gp);
            disagree.push_us((row.glass_to_glass_us - gp).abs());
        }
        for &(stage, us) in &row.stages_us {
            st.entry(stage).or_default().push_us(us);
        }
        if let Some(o) = row.overhead_us {
            overhead.push_us(o);
        }
    }
    let stages = Stage::PIPELINE
        .into_iter()
        .map(|stage| (stage, st.get(&stage).map(Pcts::from).unwrap_or_default()))
        .collect();
    let slices = slice_latency(run);
    let last_timing = run.timings.values().max_by_key(|t| t.frame_number);
    let s = &run.stats;
    let shown_at: Vec<u64> = run
        .records
        .iter()
        .filter(|r| r.shown_us != 0)
        .map(|r| r.shown_us)
        .collect();
    let gaps = || shown_at.windows(2).map(|w| w[1].saturating_sub(w[0]));
    let frames = FrameCounts {
        longest_freeze_ms: gaps().max().unwrap_or(0) as f64 / 1000.0,
        freezes_over_100ms: gaps().filter(|&g| g > 100_000).count() as u64,
        captured: host.map_or(last_timing.map_or(0, |t| t.captured as u64), |h| h.captured),
        encoded: host.map_or(last_timing.map_or(0, |t| t.encoded as u64), |h| h.encoded),
        sent: host.map_or(run.timings.len() as u64, |h| h.sent),
        complete: s.frames_complete,
        decoded: run.decoded,
        shown: run.shown,
        late: s.frames_late,
        lost: s.frames_lost,
        corrupted: run.decode_errors,
        dropped_host: host.map_or(last_timing.map_or(0, |t| t.dropped as u64), |h| h.dropped),
        dropped_client: run.dropped_presenter,
        keyframes: run.records.iter().filter(|r| r.keyframe).count() as u64,
        stamp_unreadable: run.stamp_unreadable,
        held: run.held,
        refresh_sweeps: host.map(|h| h.refresh_sweeps),
        forced_keyframes: host.map(|h| h.forced_keyframes),
        largest_keyframe_bytes: host.map(|h| h.largest_keyframe_bytes),
        largest_frame_bytes: host.map(|h| h.largest_frame_bytes),
        concealed: run.concealed,
        slices_lost: s.assembler.slices_lost,
    };
    let duration_s = run
        .ended_us
        .saturating_sub(run.connected_us.unwrap_or(run.started_us)) as f64
        / 1e6;
    let mut rtt = Samples::default();
    for &r in &run.pings {
        rtt.push_us(r as i64);
    }
    let rtt_sum = rtt.summary();
    let mut response = Samples::default();
    for &(_, sent, seen) in &run.input_responses {
        response.push_us(seen as i64 - sent as i64);
    }
    let mut pose_to_photon = Samples::default();
    for &(_, l) in &run.pose_to_photon {
        pose_to_photon.push_us(l as i64);
    }
    let mut rendered_pose = Samples::default();
    for r in run.records.iter().filter(|r| r.shown_us > 0) {
        if let Some(p) = r.pose.filter(|p| p.sample_us > 0) {
            rendered_pose.push_us(r.shown_us as i64 - p.sample_us as i64);
        }
    }
    let state = StateReport {
        keys: run.state_staleness.map_or(0, |s| s.keys),
        staleness_ms: run.state_staleness.map(Into::into).unwrap_or_default(),
        host_keys: host.and_then(|h| h.state_staleness).map(|s| s.keys),
        host_staleness_ms: host.and_then(|h| h.state_staleness).map(Into::into),
        updates_sent: run.state_updates,
        frames_with_pose: run.frames_with_pose,
        pose_photon_unread: run.pose_photon_unread,
        pose_photon_ambiguous: run.pose_photon_ambiguous,
        pose_photon_unmatched: run.pose_photon_unmatched,
    };
    let network = NetworkReport {
        bytes_sent: host.map_or(0, |h| h.bytes_sent),
        packets_sent: host.map_or(0, |h| h.packets_sent),
        bytes_received: s.bytes_received,
        packets_received: s.datagrams_received,
        packets_lost: s.packets_lost,
        packets_recovered: s.assembler.shards_recovered,
        malformed: s.malformed_datagrams + host.map_or(0, |h| h.malformed_datagrams),
        keyframe_requests_sent: s.keyframe_requests_sent,
        rtt_ms: RttMs {
            p50: rtt_sum.map(|x| x.p50),
            p99: rtt_sum.map(|x| x.p99),
            min: run.clock.map(|c| c.rtt_us as f64 / 1000.0),
        },
        clock_offset_ms: run.clock.map(|c| c.offset_us as f64 / 1000.0),
        clock_uncertainty_ms: run.clock.map(|c| c.uncertainty_us as f64 / 1000.0),
        clock: run.clock_mode.name(),
        goodput_mbps: if duration_s > 0.0 {
            s.bytes_received as f64 * 8.0 / duration_s / 1e6
        } else {
            0.0
        },
        paths: path_reports(run, host),
        bitrate_changes: host.map_or(0, |h| h.bitrate_changes),
        final_bitrate_kbps: host.and_then(|h| h.final_bitrate_kbps),
        shard_nacks_sent: s.shard_nacks_sent,
        shards_retransmitted: host.map(|h| h.shards_retransmitted),
        frames_abandoned: s.frames_abandoned,
        paced_frames: host.map(|h| h.paced_frames),
        pacing_window_ms: host.map(|h| h.pacing_window_us as f64 / 1000.0),
        refusals: run.refusals,
        link: LinkSides {
            client: run.link.clone(),
            host: host.map(|h| h.link.clone()),
        },
        reconnects: run
            .reconnects
            .iter()
            .map(|&(lost, resumed)| {
                let since_start = |t: u64| t.saturating_sub(run.started_us) as f64 / 1e6;
                ReconnectReport {
                    lost_s: since_start(lost),
                    resumed_s: (resumed != 0).then(|| since_start(resumed)),
                }
            })
            .collect(),
    };
    let audio = run.audio.as_ref().map(|a| {
        let mut m2e = Samples::default();
        for p in &a.played {
            m2e.push_us(p.out_us as i64 - to_client(p.pts_us));
        }
        let m2e = Pcts::from(&m2e);
        let ms = |us: u64| us as f64 / 1000.0;
        AudioReport {
            driver: a.driver.clone(),
            device_buffer_ms: a.buffer_samples as f64 / 48.0,
            packets_received: a.stats.received,
            packets_played: a.stats.played,
            late: a.stats.late,
            recovered: a.stats.recovered,
            concealed: a.stats.concealed,
            underruns: a.stats.underruns,
            dropped: a.stats.dropped,
            trimmed_ms: ms(a.stats.trimmed_us),
            target_ms: ms(a.final_target_us),
            target_min_ms: a.targets.iter().min().map(|&t| ms(t)),
            target_max_ms: a.targets.iter().max().map(|&t| ms(t)),
            av_offset_ms: match (m2e.p50, g2g.summary()) {
                (Some(a), Some(v)) => Some(((a - v.p50) * 1000.0).round() / 1000.0),
                _ => None,
            },
            mouth_to_ear_ms: m2e,
        }
    });
    Report {
        config,
        duration_s: (duration_s * 1000.0).round() / 1000.0,
        frames,
        latency_ms: Latency {
            glass_to_glass: (&g2g).into(),
            glass_to_glass_pixels: (&g2g_px).into(),
            timestamp_pixel_disagreement: (&disagree).into(),
            stages,
            pipeline_overhead: (&overhead).into(),
            pose_to_photon: (&pose_to_photon).into(),
            rendered_pose_to_photon: (&rendered_pose).into(),
            slices,
        },
        quality: None,
        network,
        input: InputReport {
            events_sent: run.inputs_sent,
            // Without the host's summary: the scene's pixel stamps count the events it applied.
            events_applied: host.map(|h| h.inputs_applied).or_else(|| {
                run.records
                    .iter()
                    .filter(|r| r.session == run.session)
                    .filter_map(|r| r.stamp.map(|s| u64::from(s.input_seq)))
                    .max()
                    // All zero: a source that does not stamp input (unknown, not "none").
                    .filter(|&n| n > 0 || run.inputs_sent == 0)
            }),
            response_ms: (&response).into(),
        },
        host_events: host.map(|h| h.events.clone()).unwrap_or_default(),
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
        state,
    }
}

/// The slice timeline of the frames of `run` sent in slices (its current session's).
fn slice_latency(run: &ClientRun) -> SliceLatency {
    let offset = run.clock.map_or(0, |c| c.offset_us);
    let (mut first_out, mut last_out) = (Samples::default(), Samples::default());
    let (mut first_dec, mut last_dec) = (Samples::default(), Samples::default());
    let mut count = 1;
    for r in run.records.iter().filter(|r| r.slices > 1) {
        count = count.max(r.slices);
        let captured = r.capture_us as i64 - offset;
        if r.first_slice_decoded_us != 0 {
            first_dec.push_us(r.first_slice_decoded_us as i64 - captured);
        }
        last_dec.push_us(r.decode_end_us as i64 - captured);
        if r.session != run.session {
            continue;
        }
        if let Some(&(_, first, last)) = run.slice_timings.get(&r.frame_number) {
            first_out.push_us(first as i64);
            last_out.push_us(last as i64);
        }
    }
    SliceLatency {
        count,
        first_out: (&first_out).into(),
        last_out: (&last_out).into(),
        first_decoded: (&first_dec).into(),
        last_decoded: (&last_dec).into(),
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

/// Pairs the client's paths (by index) with the host's (path i of the host is the i-th client
/// address it learnt, which is the client's path i when the paths came up in order).
fn path_reports(run: &ClientRun, host: Option<&HostSummary>) -> Vec<PathReport> {
    let n = run.paths.len().max(1);
    (0..n.min(untether_proto::MAX_PATHS))
        .map(|i| {
            let c = run.stats.paths[i];
            let h = host.and_then(|h| h.paths.get(i));
            PathReport {
                host_addr: run.paths.get(i).map(|a| a.to_string()).unwrap_or_default(),
                client_addr: h.map(|h| h.addr.to_string()),
                datagrams_sent: h.map(|h| h.datagrams_sent),
                datagrams_received: c.datagrams_received,
                first_copies: c.first_copies,
                duplicates: c.duplicates,
                srtt_ms: h.and_then(|h| h.srtt_us).map(|us| us as f64 / 1000.0),
                alive: h.map(|h| h.alive),
                deaths: h.map(|h| h.deaths),
            }
        })
        .collect()
}

mod text;

pub use text::client_lines;

#[cfg(test)]
mod tests {
    use super::*;

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
