//! Encoders: the [`EncoderBackend`] trait (one picture in, one access unit out, keyframes and
//! bitrate changes when the encoder can), [`Encoder`] (any backend: FFmpeg's,
//! [`super::ffmpeg::FfmpegEncoder`], or SVT-AV1 driven directly) and [`open_encoder`] (a name,
//! or `auto`: the best that opens, hardware first, falling back with one line that names the
//! missing device). Every family is set up without B-frames or lookahead
//! ([`super::family`]).

use crate::codec::CodecFfmpeg as _;
use std::fmt;
use std::str::FromStr;

use ffmpeg_next as ff;

use super::family::Family;
use super::ffmpeg::FfmpegEncoder;
use super::select::EncoderChoice;
use super::{init_ffmpeg, Codec, Refresh};
use crate::convert::Conversion;
use crate::{BgraFrame, MediaError, Result};

/// The two x264 encoders by kind (the embedding API's encoder switch); any other encoder is
/// chosen by its FFmpeg name ([`EncoderConfig::encoder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EncoderKind {
    /// libx264: YUV 4:2:0 after colour conversion.
    X264,
    /// libx264rgb: BGR as is (H.264 High 4:4:4 of GBR), no conversion.
    X264Rgb,
}

impl EncoderKind {
    pub const ALL: [EncoderKind; 2] = [EncoderKind::X264, EncoderKind::X264Rgb];

    pub fn name(&self) -> &'static str {
        match self {
            EncoderKind::X264 => "libx264",
            EncoderKind::X264Rgb => "libx264rgb",
        }
    }
}

impl fmt::Display for EncoderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EncoderKind {
    type Err = super::UnknownEncoder;
    fn from_str(s: &str) -> Result<Self, super::UnknownEncoder> {
        EncoderKind::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| super::UnknownEncoder {
                name: s.to_string(),
                known: "libx264, libx264rgb".into(),
            })
    }
}

/// What pictures an encoder is fed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PictureKind {
    /// Packed B, G, R, X (rendered frames, X11 capture).
    #[default]
    Bgra,
    /// Planar YUV 4:2:0 (pipes, applications that convert themselves).
    I420,
}

/// Encoder settings.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub bitrate_kbps: u32,
    /// FFmpeg's name of the encoder: libx264, libx264rgb, libx265, libsvtav1, h264_nvenc, …
    pub encoder: String,
    /// An x264 preset name (ultrafast … placebo), mapped per family (docs/CODECS.md).
    pub preset: String,
    /// Encoder threads (x264 slice threads, x265 pool, SVT-AV1 logical processors).
    pub threads: usize,
    /// BGRA → YUV converter for encoders that take 4:2:0 (simd or swscale); `Rgb` only with
    /// libx264rgb.
    pub conversion: Conversion,
    /// What pictures come in (decides the pixel format of encoders that take either).
    pub input: PictureKind,
    /// Keyframes on demand, or intra-refresh sweeps.
    pub refresh: Refresh,
    /// Frames per intra-refresh sweep; for encoders without keyframes on demand (SVT-AV1),
    /// frames between keyframes.
    pub refresh_period: u32,
    /// A keyframe every this many frames besides those asked for (0: none).
    pub gop_frames: u32,
    /// Appended to the family's parameter string (`x264-params`, `x265-params`,
    /// `svtav1-params`), `key=value:key=value`.
    pub extra_params: String,
}

impl EncoderConfig {
    /// libx264 ultrafast, SIMD conversion, two threads, keyframes on demand.
    pub fn new(width: u32, height: u32, fps: u32, bitrate_kbps: u32) -> EncoderConfig {
        EncoderConfig {
            width,
            height,
            fps,
            bitrate_kbps,
            encoder: "libx264".into(),
            preset: "ultrafast".into(),
            threads: 2,
            conversion: Conversion::Simd,
            input: PictureKind::Bgra,
            refresh: Refresh::Idr,
            refresh_period: 30,
            gop_frames: 0,
            extra_params: String::new(),
        }
    }

    /// This configuration with another encoder.
    pub fn with_encoder(mut self, name: &str) -> EncoderConfig {
        self.encoder = name.to_string();
        if name == "libx264rgb" {
            self.conversion = Conversion::Rgb;
        } else if self.conversion == Conversion::Rgb {
            self.conversion = Conversion::Simd;
        }
        self
    }
}

/// What an open encoder is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderInfo {
    /// FFmpeg's name (libx264, hevc_nvenc, …), or the backend's.
    pub name: String,
    pub codec: Codec,
    pub family: Family,
    pub hardware: bool,
    /// The device it runs on (hardware only).
    pub device: Option<String>,
    /// A keyframe when asked (false: one every `refresh_period` frames).
    pub keyframes_on_demand: bool,
    /// The bitrate changes in place (adaptive bitrate).
    pub live_bitrate: bool,
    pub refresh: Refresh,
    pub refresh_period: u32,
    /// Frames an encoded frame comes out after its picture went in: 0 (at once), 1 for
    /// SVT-AV1 1.4, whose low-delay mode releases a frame when the next one arrives.
    pub delay_frames: u32,
    /// It reads BGRA pictures as they are (libx264rgb; NVENC on a BGRA source): I420 pictures
    /// must be converted before.
    pub bgra_input: bool,
}

impl EncoderInfo {
    /// Frames between the points where a client may start decoding without asking: the sweep
    /// period with intra refresh, the keyframe period of an encoder without keyframes on
    /// demand, 0 when keyframes come on demand.
    pub fn refresh_frames(&self) -> u32 {
        if self.refresh == Refresh::Intra || !self.keyframes_on_demand {
            self.refresh_period
        } else {
            0
        }
    }
}

/// One encoded frame.
#[derive(Clone, Debug, Default)]
pub struct EncodedFrame {
    /// Which picture this is: the count of pictures the encoder had taken before it (0 for
    /// the first). Equal to the call's own picture except for encoders with
    /// [`EncoderInfo::delay_frames`].
    pub input: u64,
    /// An access unit: Annex B for H.264/HEVC (parameter sets in front of keyframes and of
    /// intra-refresh sweep starts), a temporal unit of OBUs for AV1.
    pub data: Vec<u8>,
    /// Decodable on its own (IDR/IRAP, AV1 key frame).
    pub keyframe: bool,
    /// An intra-refresh sweep starts here: a decoder starting with this frame shows a clean
    /// picture `refresh_period − 1` frames later.
    pub refresh_start: bool,
    /// BGRA→YUV conversion, or on the RGB paths the hand-over, µs.
    pub convert_us: u64,
    /// The encoder, µs (for hardware encoders including the upload).
    pub encode_us: u64,
}

/// A picture for the encoder, borrowed from its owner (the caller's buffer, a shared memory
/// segment, a pipe's read buffer, a GPU image's dma-buf) and read in place.
///
/// Pictures in GPU memory are one more variant ([`InputPicture::DmaBuf`]), not a separate
/// call, so that every stage that hands pictures on (the host's encoder stage, the frame
/// tap, the scaler) carries them the same way; a backend that cannot read one refuses it
/// by name ([`EncoderBackend::dma_buf_input`] says so up front), and no CPU ever maps it.
#[derive(Clone, Copy, Debug)]
pub enum InputPicture<'a> {
    /// Packed B, G, R, X; `stride` bytes per row (≥ 4 × width).
    Bgra {
        width: u32,
        height: u32,
        data: &'a [u8],
        stride: usize,
    },
    /// Planar Y, U, V at 4:2:0, each plane with its stride.
    I420 {
        width: u32,
        height: u32,
        planes: [(&'a [u8], usize); 3],
    },
    /// A picture in GPU memory as DMA-BUFs (zero-copy encode: [`super::dma_buf`]); taken by
    /// the VA-API encoders ([`EncoderBackend::dma_buf_input`]).
    DmaBuf(super::dma_buf::DmaBufPicture<'a>),
}

impl InputPicture<'_> {
    pub fn size(&self) -> (u32, u32) {
        match *self {
            InputPicture::Bgra { width, height, .. } | InputPicture::I420 { width, height, .. } => {
                (width, height)
            }
            InputPicture::DmaBuf(p) => (p.width, p.height),
        }
    }

    /// What kind of picture this is (a DMA-BUF one: what its bytes are, packed RGB as BGRA,
    /// NV12 as 4:2:0).
    pub fn kind(&self) -> PictureKind {
        match self {
            InputPicture::Bgra { .. } => PictureKind::Bgra,
            InputPicture::I420 { .. } => PictureKind::I420,
            InputPicture::DmaBuf(p) if p.fourcc == crate::zero_copy::egl_image::DRM_FORMAT_NV12 => {
                PictureKind::I420
            }
            InputPicture::DmaBuf(_) => PictureKind::Bgra,
        }
    }

    /// The DMA-BUF picture, if this is one.
    pub fn dma_buf(&self) -> Option<&super::dma_buf::DmaBufPicture<'_>> {
        match self {
            InputPicture::DmaBuf(p) => Some(p),
            _ => None,
        }
    }

    /// Checks that every plane holds its rows.
    pub fn check(&self) -> Result<()> {
        let need = |stride: usize, row: usize, rows: usize| (rows.max(1) - 1) * stride + row;
        let (w, h) = self.size();
        crate::frame::check_size(w, h)?;
        let bad = |reason: String| MediaError::InvalidSize {
            width: w,
            height: h,
            reason,
        };
        match *self {
            InputPicture::Bgra { data, stride, .. } => {
                if stride < w as usize * 4 || data.len() < need(stride, w as usize * 4, h as usize)
                {
                    return Err(bad(format!(
                        "BGRA buffer of {} bytes with stride {stride} is too small",
                        data.len()
                    )));
                }
            }
            InputPicture::I420 { planes, .. } => {
                let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
                for (i, (plane, stride)) in planes.iter().enumerate() {
                    let (cw, ch) = if i == 0 {
                        (w as usize, h as usize)
                    } else {
                        (w2, h2)
                    };
                    if *stride < cw || plane.len() < need(*stride, cw, ch) {
                        return Err(bad(format!(
                            "I420 plane {i} of {} bytes with stride {stride} is too small",
                            plane.len()
                        )));
                    }
                }
            }
            InputPicture::DmaBuf(p) => p.check()?,
        }
        Ok(())
    }
}

/// An encoder untether can drive: one picture in, one access unit out, keyframes when asked
/// (if [`EncoderInfo::keyframes_on_demand`]), the bitrate changed between frames (if
/// [`EncoderInfo::live_bitrate`]). The FFmpeg backend is [`FfmpegEncoder`]; another backend
/// (e.g. libx264 through its own C API, emitting slices early) implements this with its
/// family's settings.
pub trait EncoderBackend: Send {
    fn info(&self) -> &EncoderInfo;
    fn config(&self) -> &EncoderConfig;
    /// Changes the target (and VBV) bitrate from the next frame on, without a keyframe.
    /// Ok(false): this encoder cannot, and keeps its rate.
    fn set_bitrate(&mut self, kbps: u32) -> Result<bool>;
    /// Encodes one borrowed picture; `force_keyframe` asks for an IDR. Returns the frame that
    /// came out: this picture's, or with [`EncoderInfo::delay_frames`] an earlier one's
    /// (None while the encoder still holds the first pictures).
    fn encode_picture(
        &mut self,
        src: &InputPicture<'_>,
        force_keyframe: bool,
    ) -> Result<Option<EncodedFrame>>;
    /// Whether this encoder reads [`InputPicture::DmaBuf`] pictures of `fourcc` (a DRM
    /// fourcc) in place, without a CPU copy: Ok once it is ready to (its import set up), or
    /// why not ([`MediaError::Unavailable`], one line). Only the VA-API encoders can
    /// ([`super::dma_buf`]); the others refuse here, and refuse such a picture in
    /// [`encode_picture`](Self::encode_picture), with the same line.
    fn dma_buf_input(&mut self, fourcc: u32) -> Result<()> {
        let _ = fourcc;
        Err(no_dma_buf_input(&self.info().name))
    }
}

/// Why an encoder cannot take DMA-BUF pictures.
pub fn no_dma_buf_input(name: &str) -> MediaError {
    MediaError::Unavailable(format!(
        "encoder {name} reads pictures from system memory; DMA-BUF pictures need a VA-API \
         encoder (h264_vaapi, hevc_vaapi, av1_vaapi)"
    ))
}

/// An open encoder (any backend).
pub struct Encoder {
    backend: Box<dyn EncoderBackend>,
}

impl Encoder {
    /// Opens `cfg.encoder` through FFmpeg (no fallback; see [`open_encoder`]).
    /// libsvtav1 is driven through SVT-AV1's own API ([`super::svt`]), the others through
    /// FFmpeg.
    pub fn new(cfg: EncoderConfig) -> Result<Encoder> {
        if cfg.encoder == "libsvtav1" {
            #[cfg(untether_svt)]
            return Ok(Encoder {
                backend: Box::new(super::svt::SvtEncoder::open(cfg)?),
            });
            #[cfg(not(untether_svt))]
            return Err(MediaError::Unavailable(
                "libsvtav1: this build of untether has no SVT-AV1 (FFmpeg 5.1's wrapper hands \
                 a frame back only when the next one goes in); install libsvtav1-dev \
                 libsvtav1enc-dev and rebuild"
                    .into(),
            ));
        }
        Ok(Encoder {
            backend: Box::new(FfmpegEncoder::open(cfg)?),
        })
    }

    pub fn from_backend(backend: Box<dyn EncoderBackend>) -> Encoder {
        Encoder { backend }
    }

    pub fn info(&self) -> &EncoderInfo {
        self.backend.info()
    }

    pub fn config(&self) -> &EncoderConfig {
        self.backend.config()
    }

    /// See [`EncoderBackend::set_bitrate`].
    pub fn set_bitrate(&mut self, kbps: u32) -> Result<bool> {
        if kbps == 0 {
            return Err(MediaError::Other("bitrate must be non-zero".into()));
        }
        self.backend.set_bitrate(kbps)
    }

    /// Encodes one frame; `force_keyframe` asks for an IDR. See
    /// [`EncoderBackend::encode_picture`] for what comes out.
    pub fn encode(
        &mut self,
        src: &BgraFrame,
        force_keyframe: bool,
    ) -> Result<Option<EncodedFrame>> {
        self.encode_picture(
            &InputPicture::Bgra {
                width: src.width,
                height: src.height,
                data: &src.data,
                stride: src.stride,
            },
            force_keyframe,
        )
    }

    /// See [`EncoderBackend::dma_buf_input`].
    pub fn dma_buf_input(&mut self, fourcc: u32) -> Result<()> {
        self.backend.dma_buf_input(fourcc)
    }

    /// Encodes one borrowed picture; `force_keyframe` asks for an IDR. See
    /// [`EncoderBackend::encode_picture`] for what comes out.
    pub fn encode_picture(
        &mut self,
        src: &InputPicture<'_>,
        force_keyframe: bool,
    ) -> Result<Option<EncodedFrame>> {
        self.backend.encode_picture(src, force_keyframe)
    }
}

/// The codec an FFmpeg encoder produces, if it is one untether streams.
pub fn codec_of_encoder(name: &str) -> Option<Codec> {
    init_ffmpeg();
    let c = ff::encoder::find_by_name(name)?;
    if c.medium() != ff::media::Type::Video {
        return None;
    }
    crate::codec::codec_of_id(c.id(), name == "libx264rgb")
}

/// An opened encoder and, when `auto` passed over hardware encoders, the one line saying
/// which and why.
pub struct OpenedEncoder {
    pub encoder: Encoder,
    pub note: Option<String>,
}

/// Opens the encoder `choice` names for `codec`:
/// - a name: that encoder or an error (an absent device is named, and nothing else is tried:
///   the user asked for this one);
/// - `auto`: the first of [`Family::auto_order`] that opens (hardware whose device exists,
///   then software), with a note naming what was passed over and why.
///
/// Intra refresh ([`Refresh::Intra`]) is refused by name for encoders without it, and `auto`
/// passes over them.
pub fn open_encoder(
    choice: &EncoderChoice,
    codec: Codec,
    cfg: EncoderConfig,
) -> Result<OpenedEncoder> {
    init_ffmpeg();
    match choice {
        EncoderChoice::Named(name) => {
            let family = Family::of(name);
            let traits = family.traits();
            let fallback = codec.software_encoder();
            if let Some(need) = traits.device {
                if let Err(why) = need.find() {
                    return Err(MediaError::Unavailable(format!(
                        "encoder {name} cannot run here: {why} ({name} needs {}); it was asked \
                         for by name, so untether does not fall back (--encoder auto would use \
                         {fallback})",
                        need.describe()
                    )));
                }
            }
            if cfg.refresh == Refresh::Intra && !traits.intra_refresh {
                return Err(MediaError::Unavailable(no_intra_refresh(name)));
            }
            let encoder = Encoder::new(EncoderConfig {
                encoder: name.clone(),
                ..cfg
            })
            .map_err(|e| {
                if traits.hardware {
                    MediaError::Unavailable(format!(
                        "encoder {name} did not open: {e}; it was asked for by name, so \
                         untether does not fall back (--encoder auto would use {fallback})"
                    ))
                } else {
                    e
                }
            })?;
            Ok(OpenedEncoder {
                encoder,
                note: None,
            })
        }
        EncoderChoice::Auto => {
            let mut passed: Vec<(String, String)> = Vec::new();
            let mut last_error = None;
            for name in Family::auto_order(codec) {
                let traits = Family::of(&name).traits();
                if ff::encoder::find_by_name(&name).is_none() {
                    passed.push((name, "not in this FFmpeg build".into()));
                    continue;
                }
                if cfg.refresh == Refresh::Intra && !traits.intra_refresh {
                    passed.push((name, "no intra refresh".into()));
                    continue;
                }
                if let Some(need) = traits.device {
                    if let Err(why) = need.find() {
                        passed.push((name, why.to_string()));
                        continue;
                    }
                }
                match Encoder::new(EncoderConfig {
                    encoder: name.clone(),
                    ..cfg.clone()
                }) {
                    Ok(encoder) => {
                        let note = passed.iter().any(|(n, _)| Family::of(n).traits().hardware);
                        return Ok(OpenedEncoder {
                            note: note.then(|| {
                                format!(
                                    "encoder auto for {codec}: using {name}; passed over {}",
                                    group_reasons(&passed)
                                )
                            }),
                            encoder,
                        });
                    }
                    Err(e) => {
                        passed.push((name, e.to_string()));
                        last_error = Some(e);
                    }
                }
            }
            Err(MediaError::Unavailable(format!(
                "no encoder for {codec} opens here: {}{}",
                group_reasons(&passed),
                last_error
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            )))
        }
    }
}

/// The message for an encoder without intra refresh.
pub fn no_intra_refresh(name: &str) -> String {
    format!(
        "encoder {name} has no usable intra refresh (refresh intra works with libx264 and the \
         *_nvenc encoders; libx265's sweep leaves a joining decoder's picture wrong); use \
         refresh idr, or one of those"
    )
}

/// `a, b: why; c: other why`: names grouped by their reason, in order.
fn group_reasons(items: &[(String, String)]) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for (name, why) in items {
        match groups.iter_mut().find(|(_, w)| *w == why) {
            Some((names, _)) => names.push(name),
            None => groups.push((vec![name], why)),
        }
    }
    groups
        .iter()
        .map(|(names, why)| format!("{} ({why})", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}
