//! Latency: percentiles ([`Pcts`]), the shown frames' rows ([`FrameRow`]: the one place a
//! frame's stages are defined) and their summary ([`Latency`]).

use std::collections::BTreeMap;

use serde::Serialize;
use untether_proto::FrameTiming;

use crate::client::{ClientRun, FrameRecord};
use crate::stats::{Samples, Stage, Summary};

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
    /// Per shown frame rendered for a pose: the angle, **degrees** (not ms), between the head
    /// orientation it was rendered for (the host's prediction for its display) and the
    /// client's newest local pose when it was shown — the prediction's error, before late warp.
    pub pose_prediction_error_deg: Pcts,
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

impl Latency {
    /// Summarises the shown frames of `run` (the client's clock).
    pub(super) fn measure(run: &ClientRun) -> Latency {
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
        let mut pose_to_photon = Samples::default();
        for &(_, l) in &run.pose_to_photon {
            pose_to_photon.push_us(l as i64);
        }
        let mut rendered_pose = Samples::default();
        let mut pose_error = Samples::default();
        for r in run.records.iter().filter(|r| r.shown_us > 0) {
            if let Some(p) = r.pose.filter(|p| p.sample_us > 0) {
                rendered_pose.push_us(r.shown_us as i64 - p.sample_us as i64);
            }
            if let Some(deg) = r.pose_error_deg {
                pose_error.push(deg as f64);
            }
        }
        Latency {
            glass_to_glass: (&g2g).into(),
            glass_to_glass_pixels: (&g2g_px).into(),
            timestamp_pixel_disagreement: (&disagree).into(),
            stages,
            pipeline_overhead: (&overhead).into(),
            pose_to_photon: (&pose_to_photon).into(),
            rendered_pose_to_photon: (&rendered_pose).into(),
            pose_prediction_error_deg: (&pose_error).into(),
            slices: slice_latency(run),
        }
    }
}

/// One shown frame's measurements, client clock: what [`super::build`] summarises, for benchmarks
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
