//! How the host opens its encoders ([`EncoderPlan`]), and the encoders of every codec it may
//! offer ([`open_encoders`]).

use untether_media::codec::{open_encoder, sizing, Codec, EncoderChoice, EncoderConfig};

use super::super::encode_slices::{self, OpenedVideo};
use super::super::options::HostSetup;
use super::super::shared::HostShared;
use crate::config::VideoConfig;
use crate::host::error::HostError;

/// How the host opens its encoders: the configured choice and the settings every one gets.
#[derive(Clone, Debug)]
pub(crate) struct EncoderPlan {
    pub choice: EncoderChoice,
    /// Slices per frame (`video.slices`; 1: whole frames, any encoder).
    pub slices: u8,
    /// Frames sent in slices are also put together whole for the network driver (browsers
    /// take frames whole).
    pub whole_frames: bool,
    /// Everything but the encoder's name (and, per codec, what follows from it).
    pub base: EncoderConfig,
}

impl EncoderPlan {
    pub fn new(v: &VideoConfig, setup: &HostSetup, width: u32, height: u32) -> EncoderPlan {
        let (threads, auto) = sizing::resolve_threads(v.encoder_threads, height);
        match auto {
            Some(a) => log::info!("host: {a}; video.encoder_threads sets them"),
            None => log::info!("host: {threads} encoder threads (video.encoder_threads)"),
        }
        EncoderPlan {
            choice: v.selection.encoder.clone(),
            slices: v.slices,
            whole_frames: false,
            base: EncoderConfig {
                preset: v.preset.clone(),
                threads,
                conversion: v.selection.conversion,
                input: setup.source.picture_kind(),
                refresh: v.refresh,
                refresh_period: v.refresh_period,
                gop_frames: v.gop_frames,
                extra_params: v.encoder_params.clone(),
                ..EncoderConfig::new(width, height, v.fps, v.bitrate_kbps)
            },
        }
    }

    /// Opens the encoder for `codec` (for pictures of `width`×`height` at `kbps`): the one
    /// named, or the best that opens (with a line naming what it passed over); with slices,
    /// libx264 through its own API.
    pub fn open(
        &self,
        codec: Codec,
        width: u32,
        height: u32,
        kbps: u32,
    ) -> Result<OpenedVideo, HostError> {
        let mut cfg = EncoderConfig {
            width,
            height,
            bitrate_kbps: kbps,
            ..self.base.clone()
        };
        if codec != Codec::H264Rgb && cfg.conversion == untether_media::convert::Conversion::Rgb {
            cfg.conversion = untether_media::convert::Conversion::Simd;
        }
        if self.slices > 1 {
            return encode_slices::open_sliced(&self.choice, codec, cfg, self.slices);
        }
        Ok(open_encoder(&self.choice, codec, cfg)?.into())
    }
}

/// Opens the encoder of every codec the host may offer (one, or with `auto` each whose
/// encoder opens here): the first one opened, to start with, and the offers.
pub(crate) fn open_encoders(
    plan: &EncoderPlan,
    v: &crate::config::VideoConfig,
    shared: &HostShared,
) -> Result<(OpenedVideo, Vec<untether_proto::CodecOffer>), HostError> {
    let (w, h) = (v.resolution.width, v.resolution.height);
    let codecs = v.codecs();
    let mut first = None;
    let mut offers = Vec::new();
    let mut missing = Vec::new();
    for c in &codecs {
        match plan.open(*c, w, h, v.bitrate_kbps) {
            Ok(o) => {
                offers.push(untether_proto::CodecOffer {
                    codec: *c,
                    refresh_period: o.encoder.info().refresh_frames().min(u16::MAX as u32) as u16,
                });
                if first.is_none() {
                    first = Some(o);
                }
            }
            Err(e) if codecs.len() > 1 => missing.push(format!("{c} ({e})")),
            Err(e) => return Err(e),
        }
    }
    if !missing.is_empty() {
        shared.note(format!(
            "codec auto: offering {}; not {}",
            offers
                .iter()
                .map(|o| o.codec.name())
                .collect::<Vec<_>>()
                .join(", "),
            missing.join("; ")
        ));
    }
    let first = first.ok_or_else(|| {
        HostError::Usage(format!("no encoder opens here: {}", missing.join("; ")))
    })?;
    Ok((first, offers))
}
