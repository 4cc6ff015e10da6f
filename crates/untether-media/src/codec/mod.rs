//! Video encoders and decoders through FFmpeg (ffmpeg-next): H.264, HEVC and AV1, by any name
//! FFmpeg has, with one low-latency setting table per encoder family.
//!
//! - [`Codec`]: what a stream is (h264, h264rgb, hevc, av1) and the names that select it;
//! - [`family`]: the encoder families (x264, x265, SVT-AV1, NVENC, VAAPI, QSV, AMF, V4L2 M2M)
//!   and their low-latency settings, in one table (docs/CODECS.md prints it);
//! - [`encoder`]: [`Encoder`] (an [`EncoderBackend`]), [`open_encoder`] (by name, or `auto`:
//!   the best that opens, hardware first); [`ffmpeg`]: the FFmpeg backend ([`FfmpegEncoder`]),
//!   [`svt`]: SVT-AV1 driven directly;
//! - [`decoder`]: [`Decoder`] (software, by name, or with a hardware accelerator, falling back
//!   to software), [`DecodedFrame`];
//! - [`dma_buf`]: pictures in GPU memory (DMA-BUF) and the VA-API path that encodes them
//!   without a CPU copy;
//! - [`hw`]: hardware devices (`/dev/dri`, NVIDIA, `/dev/video*`) and FFmpeg device contexts;
//! - [`bitstream`]: what an access unit is (IDR, parameter sets) from its bytes;
//! - [`select`]: the user's codec/encoder/conversion choice, validated ([`Selection`]).

pub mod bitstream;
pub mod decoder;
pub mod dma_buf;
pub mod encoder;
pub mod family;
pub mod ffmpeg;
pub mod hw;
pub mod select;
pub mod sizing;
#[cfg(untether_svt)]
pub mod svt;

use std::fmt;
use std::str::FromStr;
use std::sync::Once;

use ffmpeg_next as ff;

pub use decoder::{
    Colorimetry, CudaNv12, DecodedFrame, Decoder, DecoderChoice, DecoderConfig, DecoderInfo,
    GpuPicture, HwAccel, PictureFormat, UnknownDecoder, UnknownHwAccel, YuvMatrix,
};
pub use dma_buf::{DmaBufFrame, DmaBufPicture, DmaBufPlane, KeepAlive, VaapiDmaBufImport};
pub use encoder::{
    open_encoder, EncodedFrame, Encoder, EncoderBackend, EncoderConfig, EncoderInfo, EncoderKind,
    InputPicture, OpenedEncoder,
};
pub use family::Family;
pub use ffmpeg::FfmpegEncoder;
pub use select::{EncoderChoice, Selection, SelectionError, UnknownEncoder};

/// Initialises FFmpeg once and quiets its log (errors it reports reach us as return codes).
/// `UNTETHER_FFMPEG_LOG=1` shows FFmpeg's own messages.
pub fn init_ffmpeg() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = ff::init();
        let level = if std::env::var("UNTETHER_FFMPEG_LOG").is_ok() {
            ff::util::log::Level::Info
        } else {
            ff::util::log::Level::Fatal
        };
        ff::util::log::set_level(level);
    });
}

pub use untether_proto::{Codec, UnknownCodec};

/// FFmpeg's names for a [`Codec`]: its codec id, and the software encoder and decoder.
pub trait CodecFfmpeg {
    /// FFmpeg's codec id.
    fn id(self) -> ff::codec::Id;
    /// The software encoder `auto` ends with.
    fn software_encoder(self) -> &'static str;
    /// FFmpeg's software decoder of this codec (AV1: dav1d; FFmpeg 5.1's own `av1` decoder
    /// needs a hardware accelerator).
    fn software_decoder(self) -> &'static str;
}

impl CodecFfmpeg for Codec {
    fn id(self) -> ff::codec::Id {
        match self {
            Codec::H264 | Codec::H264Rgb => ff::codec::Id::H264,
            Codec::Hevc => ff::codec::Id::HEVC,
            Codec::Av1 => ff::codec::Id::AV1,
        }
    }

    fn software_encoder(self) -> &'static str {
        match self {
            Codec::H264 => "libx264",
            Codec::H264Rgb => "libx264rgb",
            Codec::Hevc => "libx265",
            Codec::Av1 => "libsvtav1",
        }
    }

    fn software_decoder(self) -> &'static str {
        match self {
            Codec::H264 | Codec::H264Rgb => "h264",
            Codec::Hevc => "hevc",
            Codec::Av1 => "libdav1d",
        }
    }
}

/// The codec of FFmpeg's codec id (`rgb`: the encoder takes RGB, as libx264rgb does).
pub fn codec_of_id(id: ff::codec::Id, rgb: bool) -> Option<Codec> {
    match id {
        ff::codec::Id::H264 if rgb => Some(Codec::H264Rgb),
        ff::codec::Id::H264 => Some(Codec::H264),
        ff::codec::Id::HEVC => Some(Codec::Hevc),
        ff::codec::Id::AV1 => Some(Codec::Av1),
        _ => None,
    }
}

/// How a stream recovers from a loss and lets a client join.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Refresh {
    /// A keyframe (IDR) when a client joins or asks after a loss.
    #[default]
    Idr,
    /// Intra refresh: a column of intra blocks sweeps the picture every `refresh_period`
    /// frames; a joining or recovering client waits for the next full sweep instead of asking
    /// for a keyframe, so no frame is ever much larger than the others.
    Intra,
}

impl Refresh {
    pub const ALL: [Refresh; 2] = [Refresh::Idr, Refresh::Intra];

    pub fn name(self) -> &'static str {
        match self {
            Refresh::Idr => "idr",
            Refresh::Intra => "intra",
        }
    }
}

impl fmt::Display for Refresh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `video.refresh` name that is not one of [`Refresh::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown refresh {name:?}; allowed: {}", Refresh::ALL.map(|r| r.name()).join(", "))]
pub struct UnknownRefresh {
    pub name: String,
}

impl FromStr for Refresh {
    type Err = UnknownRefresh;
    fn from_str(s: &str) -> Result<Self, UnknownRefresh> {
        Refresh::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| UnknownRefresh { name: s.into() })
    }
}

fn fferr(context: &'static str) -> impl Fn(ff::Error) -> crate::MediaError {
    move |e| crate::MediaError::ffmpeg(context, e)
}

#[cfg(test)]
mod tests;
