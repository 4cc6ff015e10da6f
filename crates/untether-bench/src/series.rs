//! What a scenario run produced, frame by frame: the data behind the HTML plots and the
//! comparison table. Filled by the untether runner and by the peer harness alike.

use serde::Serialize;
use std::collections::BTreeMap;
use untether::stats::Stage;

/// One displayed frame.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FrameSample {
    /// The frame number (from the pixel stamp for peers, from the protocol for untether).
    pub frame: u32,
    /// When it was captured, ms since the scenario started (host clock).
    pub captured_ms: f64,
    /// Capture → shown, ms (from the pixel stamp when readable).
    pub glass_to_glass_ms: f64,
    /// Per-stage times, ms (serialized under the report's stage names). Empty for a peer,
    /// which sees only glass-to-glass.
    pub stages_ms: BTreeMap<Stage, f64>,
    /// Encoded size, bytes (0 when unknown).
    pub bytes: u64,
    pub keyframe: bool,
}

/// One frame compared with the picture the host captured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QualitySample {
    pub frame: u32,
    /// ms since the scenario started.
    pub at_ms: f64,
    /// SSIM of luma (Y), 0..1.
    pub ssim_y: f64,
    /// SSIM over Y, U, V weighted 4:1:1 (FFmpeg's "All").
    pub ssim_all: f64,
    /// PSNR of luma, dB.
    pub psnr_y_db: f64,
    /// PSNR over all planes, dB.
    pub psnr_all_db: f64,
}

/// One injected input event and the first decoded frame that showed it (GamingAnywhere's
/// response delay RD = PD + OD + ND: processing on the host, playout on the client, network).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResponseSample {
    /// ms since the scenario started.
    pub at_ms: f64,
    /// Input sent → first frame showing it displayed, ms.
    pub response_ms: f64,
    /// Network delay: input to host plus the frame's transit to the client, ms.
    pub network_ms: f64,
    /// Host processing: input applied → frame showing it captured, encoded and sent, ms.
    pub processing_ms: f64,
    /// Client playout: frame received → decoded and shown, ms.
    pub playout_ms: f64,
}

/// Everything one scenario produced.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScenarioResult {
    /// The scenario's name (as in the TOML file or derived from the flags).
    pub name: String,
    /// `untether`, `ffmpeg-rtp` or `ffmpeg-rtp-tcp`.
    pub system: String,
    /// The JSON report (docs/REPORT.md contract).
    pub report: serde_json::Value,
    pub frames: Vec<FrameSample>,
    pub quality: Vec<QualitySample>,
    pub response: Vec<ResponseSample>,
    /// Wall-clock duration, s.
    pub duration_s: f64,
}
