//! The encoder stage's sliced path (`video.slices` ≥ 2, docs/PROTOCOL.md §6.3): x264 through
//! its own API ([`SliceEncoder`]), each slice handed to the network driver from x264's slice
//! thread the moment it is written ([`HostCommand::Slice`]), while x264 still works on the
//! others; when x264 returns, the frame's timing follows ([`HostCommand::SlicesDone`]).
//!
//! Slices are one way to run libx264 among the encoders the host may open
//! ([`super::encode::EncoderPlan`]): they need codec h264, encoder libx264 (or `auto`, which
//! then means libx264) and keyframes on demand (refresh idr); the configuration refuses the
//! rest by name ([`crate::config::slices_refused`]), and [`open_sliced`] again for settings
//! built in code.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use untether_media::codec::{
    Codec, EncodedFrame, Encoder, EncoderChoice, EncoderConfig, EncoderInfo, Family, Refresh,
};
use untether_media::codec::{InputPicture, OpenedEncoder};
use untether_media::x264::{EncodedSlice, SliceEncoder, SliceEncoderConfig, SliceFrameInfo};
use untether_proto::{FrameTiming, Micros, PoseSample, SliceId};

use super::commands::{HostCommand, OutgoingSlice, SlicesDone};
use super::error::HostError;
use crate::clock::now_us;
use crate::driver::Handle;

/// The stage's encoder: any encoder opened by name, frames whole; or libx264 through its own
/// API, each slice handed over as it is written (`video.slices` ≥ 2).
pub(crate) enum VideoEncoder {
    Whole(Encoder),
    Sliced(Box<Sliced>),
}

/// libx264 sending slices, with what the stage asks of any encoder.
pub(crate) struct Sliced {
    encoder: SliceEncoder,
    cfg: EncoderConfig,
    info: EncoderInfo,
}

/// An opened encoder and, when `auto` passed over others, the line saying which and why.
pub(crate) struct OpenedVideo {
    pub encoder: VideoEncoder,
    pub note: Option<String>,
}

impl From<OpenedEncoder> for OpenedVideo {
    fn from(o: OpenedEncoder) -> Self {
        OpenedVideo {
            encoder: VideoEncoder::Whole(o.encoder),
            note: o.note,
        }
    }
}

impl VideoEncoder {
    pub fn info(&self) -> &EncoderInfo {
        match self {
            VideoEncoder::Whole(e) => e.info(),
            VideoEncoder::Sliced(s) => &s.info,
        }
    }

    pub fn config(&self) -> &EncoderConfig {
        match self {
            VideoEncoder::Whole(e) => e.config(),
            VideoEncoder::Sliced(s) => &s.cfg,
        }
    }

    /// Changes the bitrate in place; Ok(false): this encoder cannot.
    pub fn set_bitrate(&mut self, kbps: u32) -> Result<bool, HostError> {
        Ok(match self {
            VideoEncoder::Whole(e) => e.set_bitrate(kbps)?,
            VideoEncoder::Sliced(s) => {
                s.encoder.set_bitrate(kbps)?;
                s.cfg.bitrate_kbps = kbps;
                true
            }
        })
    }
}

/// Opens libx264 through its own API for `slices` slices per frame, with the settings every
/// encoder of the stage gets (`cfg`; its encoder name is libx264 from now on).
pub(crate) fn open_sliced(
    choice: &EncoderChoice,
    codec: Codec,
    cfg: EncoderConfig,
    slices: u8,
) -> Result<OpenedVideo, HostError> {
    if let Some((keys, why)) =
        crate::config::slices_refused(slices, Some(codec), choice, cfg.refresh)
    {
        return Err(HostError::Usage(format!("{keys}: {why}")));
    }
    let cfg = cfg.with_encoder("libx264");
    let encoder = SliceEncoder::new(slice_encoder_config(&cfg, slices))?;
    let info = EncoderInfo {
        name: "libx264".into(),
        codec: Codec::H264,
        family: Family::X264,
        hardware: false,
        device: None,
        keyframes_on_demand: true,
        live_bitrate: true,
        refresh: Refresh::Idr,
        refresh_period: cfg.refresh_period,
        delay_frames: 0,
        bgra_input: false,
    };
    // `auto` would have tried a hardware encoder whose device is here: say why it did not.
    let passed: Vec<String> = match choice {
        EncoderChoice::Auto => Family::auto_order(Codec::H264)
            .into_iter()
            .filter(|n| {
                let t = Family::of(n).traits();
                t.hardware && t.device.is_some_and(|d| d.find().is_ok())
            })
            .collect(),
        EncoderChoice::Named(_) => Vec::new(),
    };
    let note = (!passed.is_empty()).then(|| {
        format!(
            "encoder auto with {slices} slices: libx264 through x264's own API; passed over {} \
             (they send frames whole)",
            passed.join(", ")
        )
    });
    Ok(OpenedVideo {
        encoder: VideoEncoder::Sliced(Box::new(Sliced { encoder, cfg, info })),
        note,
    })
}

/// The slice encoder's settings for the stage's encoder settings and slice count.
pub(crate) fn slice_encoder_config(cfg: &EncoderConfig, slices: u8) -> SliceEncoderConfig {
    let mut params = Vec::new();
    if cfg.gop_frames > 0 {
        params.push(format!("keyint={0}:min-keyint={0}", cfg.gop_frames));
    }
    if !cfg.extra_params.is_empty() {
        params.push(cfg.extra_params.clone());
    }
    SliceEncoderConfig {
        width: cfg.width,
        height: cfg.height,
        fps: cfg.fps,
        bitrate_kbps: cfg.bitrate_kbps,
        preset: cfg.preset.clone(),
        threads: cfg.threads,
        slices: slices as usize,
        conversion: cfg.conversion,
        x264_params: params.join(":"),
    }
}

/// What one sliced encode did.
pub(crate) struct SlicedFrame {
    pub info: SliceFrameInfo,
    /// When the first and the last slice were handed to the driver (host clock).
    pub first_out_us: Micros,
    pub last_out_us: Micros,
}

impl SlicedFrame {
    /// The end of this frame (its timing once x264 is done).
    pub fn done(
        &self,
        frame_number: u32,
        capture_us: Micros,
        whole: Option<Arc<Vec<u8>>>,
        timing: FrameTiming,
    ) -> SlicesDone {
        let since_capture = |t: Micros| t.saturating_sub(capture_us).min(u32::MAX as u64) as u32;
        SlicesDone {
            frame_number,
            keyframe: self.info.keyframe,
            capture_us,
            whole,
            slice_count: self.info.slices as u8,
            first_out_us: since_capture(self.first_out_us),
            last_out_us: since_capture(self.last_out_us),
            timing,
        }
    }
}

/// Where the sliced frame goes: the host's one stream, as frame `frame_number`.
pub(crate) struct SliceTarget<'a> {
    pub net: &'a Handle<HostCommand>,
    pub frame_number: u32,
    pub capture_us: Micros,
    pub pose: Option<PoseSample>,
    /// Also keep the whole access unit (the slices in picture order) for the other consumers
    /// (RTSP) and browsers, which take frames whole.
    pub whole: bool,
}

/// Encodes `picture`, handing each slice to the driver as x264 finishes it. Returns what the
/// encode did and, as an [`EncodedFrame`], the frame's flags and times and — with
/// [`SliceTarget::whole`] — its access unit (else no data).
pub(crate) fn encode(
    s: &mut Sliced,
    picture: &InputPicture<'_>,
    force_keyframe: bool,
    to: &SliceTarget<'_>,
) -> Result<(SlicedFrame, EncodedFrame), HostError> {
    let first = AtomicU64::new(u64::MAX);
    let last = AtomicU64::new(0);
    let stopped = AtomicBool::new(false);
    let kept: Mutex<Vec<(u8, Vec<u8>)>> = Mutex::new(Vec::new());
    let sink = |sl: EncodedSlice| {
        let handed_us = now_us();
        first.fetch_min(handed_us, Ordering::Relaxed);
        last.fetch_max(handed_us, Ordering::Relaxed);
        if to.whole {
            if let Ok(mut k) = kept.lock() {
                k.push((sl.index, sl.data.clone()));
            }
        }
        let handed = to.net.send(HostCommand::Slice(OutgoingSlice {
            frame_number: to.frame_number,
            capture_us: to.capture_us,
            keyframe: sl.keyframe,
            refresh_start: false,
            slice: SliceId {
                index: sl.index,
                count: sl.count,
            },
            data: sl.data,
            pose: to.pose,
            handed_us,
        }));
        if !handed {
            stopped.store(true, Ordering::Relaxed);
        }
    };
    let info = s.encoder.encode(picture, force_keyframe, &sink)?;
    if stopped.load(Ordering::Relaxed) {
        return Err(HostError::Stopped(None));
    }
    let first_out_us = first.load(Ordering::Relaxed);
    let mut kept = kept.into_inner().unwrap_or_default();
    kept.sort_by_key(|(i, _)| *i);
    let data = kept.into_iter().flat_map(|(_, d)| d).collect();
    Ok((
        SlicedFrame {
            info,
            first_out_us: if first_out_us == u64::MAX {
                now_us()
            } else {
                first_out_us
            },
            last_out_us: last.load(Ordering::Relaxed),
        },
        EncodedFrame {
            input: 0,
            data,
            keyframe: info.keyframe,
            refresh_start: false,
            convert_us: info.convert_us,
            encode_us: info.encode_us,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sliced_encoder_gets_the_stages_gop_and_x264_params() {
        let mut cfg = EncoderConfig::new(640, 360, 60, 4000);
        cfg.gop_frames = 120;
        cfg.extra_params = "aq-mode=0".into();
        let s = slice_encoder_config(&cfg, 4);
        assert_eq!(s.slices, 4);
        assert_eq!(s.x264_params, "keyint=120:min-keyint=120:aq-mode=0");
        let opened = open_sliced(&EncoderChoice::Auto, Codec::H264, cfg, 4).unwrap();
        assert_eq!(opened.encoder.info().name, "libx264");
        let e = open_sliced(
            &EncoderChoice::Auto,
            Codec::Av1,
            EncoderConfig::new(640, 360, 60, 4000),
            4,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("video.slices, video.codec"), "{e}");
    }
}
