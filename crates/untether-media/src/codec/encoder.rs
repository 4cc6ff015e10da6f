//! Encoders: the [`EncoderBackend`] trait, the FFmpeg backend ([`FfmpegEncoder`], any encoder
//! FFmpeg has, opened by name with its family's low-latency [`Settings`](super::family::Settings))
//! and [`open_encoder`] (a name, or `auto`: the best that opens, hardware first, falling back
//! with one line that names the missing device).
//!
//! One frame in gives one access unit out: every family is set up without B-frames or
//! lookahead. Encoders that hand packets back on their own threads (SVT-AV1, the hardware
//! ones) are waited for, bounded. BGRA pictures are converted straight into the planes the
//! encoder reads (4:2:0), uploaded to the GPU once (VA-API, Quick Sync: NV12), or handed over
//! as they are (libx264rgb, NVENC: the GPU converts); I420 pictures are read in place.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use ff::format::Pixel;
use ff::{codec, frame, picture, Dictionary, Packet};
use ffmpeg_next as ff;
use ffmpeg_next::ffi;

use super::bitstream;
use super::family::{Family, Settings, Traits};
use super::hw::{HwDevice, HwFrames};
use super::select::EncoderChoice;
use super::{fferr, init_ffmpeg, Codec, Refresh};
use crate::convert::{Conversion, Converter, I420Mut};
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
/// segment, a pipe's read buffer) and read in place.
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
}

impl InputPicture<'_> {
    pub fn size(&self) -> (u32, u32) {
        match *self {
            InputPicture::Bgra { width, height, .. } | InputPicture::I420 { width, height, .. } => {
                (width, height)
            }
        }
    }

    pub fn kind(&self) -> PictureKind {
        match self {
            InputPicture::Bgra { .. } => PictureKind::Bgra,
            InputPicture::I420 { .. } => PictureKind::I420,
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
    Codec::of_id(c.id(), name == "libx264rgb")
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
                        passed.push((name, why));
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

/// How pictures reach an FFmpeg encoder.
enum Feed {
    /// 4:2:0 planes in `input`: BGRA converted into them, I420 borrowed in place.
    Yuv420 { converter: Option<Converter> },
    /// BGR0 as is (libx264rgb; NVENC on BGRA, converting on the GPU): BGRA borrowed.
    Bgr,
    /// NV12 in `input` (converted), uploaded to the device's frames once per picture.
    Upload { frames: HwFrames, _device: HwDevice },
}

/// Any FFmpeg video encoder, opened with its family's low-latency settings.
pub struct FfmpegEncoder {
    cfg: EncoderConfig,
    info: EncoderInfo,
    traits: Traits,
    settings: Settings,
    encoder: ff::encoder::video::Encoder,
    feed: Feed,
    /// The picture the encoder reads (4:2:0 planes, BGR0, or NV12 for an upload).
    input: frame::Video,
    packet: Packet,
    pts: i64,
    /// Frames since the last keyframe.
    since_key: u32,
    /// Parameter sets of the last keyframe (or the encoder's global header), put in front of
    /// an intra-refresh sweep start (or a keyframe) that lacks them.
    parameter_sets: Vec<u8>,
}

// SAFETY: the FFmpeg objects are owned by this value and used through &mut self only.
unsafe impl Send for FfmpegEncoder {}

/// How long an asynchronous encoder may take to hand back a frame's packet.
const PACKET_WAIT: Duration = Duration::from_secs(2);

impl FfmpegEncoder {
    pub fn open(cfg: EncoderConfig) -> Result<FfmpegEncoder> {
        init_ffmpeg();
        crate::frame::check_size(cfg.width, cfg.height)?;
        if cfg.fps == 0 || cfg.bitrate_kbps == 0 {
            return Err(MediaError::Other(
                "encoder: fps and bitrate must be non-zero".into(),
            ));
        }
        let name = cfg.encoder.as_str();
        let ff_codec =
            ff::encoder::find_by_name(name).ok_or_else(|| MediaError::EncoderMissing {
                name: name.to_string(),
            })?;
        let codec = Codec::of_id(ff_codec.id(), name == "libx264rgb").ok_or_else(|| {
            MediaError::Other(format!(
                "encoder {name} encodes {:?}; untether streams h264, hevc or av1",
                ff_codec.id()
            ))
        })?;
        let family = Family::of(name);
        let traits = family.traits();
        if cfg.refresh == Refresh::Intra && !traits.intra_refresh {
            return Err(MediaError::Unavailable(no_intra_refresh(name)));
        }
        if (cfg.conversion == Conversion::Rgb) != (codec == Codec::H264Rgb) {
            return Err(MediaError::Conversion(format!(
                "conversion {} does not go with {name}: rgb (no conversion) is libx264rgb's, \
                 the others are for encoders that take YUV",
                cfg.conversion
            )));
        }
        let settings = family.settings(&cfg, codec, cfg.input);
        let device = match settings.upload {
            Some(kind) => Some(HwDevice::open(kind).map_err(MediaError::Unavailable)?),
            None => None,
        };
        let frames = match &device {
            Some(d) => {
                Some(HwFrames::new(d, cfg.width, cfg.height).map_err(MediaError::Unavailable)?)
            }
            None => None,
        };
        let try_open = |with_optional: bool| -> Result<ff::encoder::video::Encoder> {
            let mut ctx = codec::context::Context::new_with_codec(ff_codec);
            if let Some(n) = settings.slice_threads {
                ctx.set_threading(ff::threading::Config {
                    kind: ff::threading::Type::Slice,
                    count: n,
                    ..Default::default()
                });
            }
            let mut enc = ctx.encoder().video().map_err(fferr("encoder context"))?;
            enc.set_width(cfg.width);
            enc.set_height(cfg.height);
            enc.set_format(settings.pixel);
            enc.set_time_base((1, cfg.fps as i32));
            enc.set_frame_rate(Some((cfg.fps as i32, 1)));
            enc.set_max_b_frames(0);
            if codec == Codec::H264Rgb {
                // Identity matrix: the decoder then outputs planar GBR.
                enc.set_colorspace(ff::color::Space::RGB);
                enc.set_color_range(ff::color::Range::JPEG);
            } else {
                enc.set_colorspace(ff::color::Space::SMPTE170M);
                enc.set_color_range(ff::color::Range::MPEG);
            }
            enc.set_color_primaries(ff::color::Primaries::SMPTE170M);
            enc.set_color_transfer_characteristic(ff::color::TransferCharacteristic::SMPTE170M);
            let bps = cfg.bitrate_kbps as usize * 1000;
            enc.set_bit_rate(bps);
            if let Some(max) = settings.max_rate {
                enc.set_max_bit_rate(max as usize);
            }
            // SAFETY: plain field writes on the context we own, before it is opened; the
            // frames reference is a new one the context then owns.
            unsafe {
                let c = enc.as_mut_ptr();
                (*c).rc_buffer_size = settings.buffer_bits.min(i32::MAX as i64) as i32;
                (*c).gop_size = settings.gop_size;
                if let Some(f) = &frames {
                    (*c).hw_frames_ctx = ffi::av_buffer_ref(f.as_ptr());
                }
            }
            let mut opts = Dictionary::new();
            for (k, v) in &settings.options {
                opts.set(k, v);
            }
            if with_optional {
                for (k, v) in &settings.optional {
                    opts.set(k, v);
                }
            }
            if let Some(key) = settings.params_option {
                let mut params = settings.params.join(":");
                if !cfg.extra_params.is_empty() {
                    params.push(':');
                    params.push_str(&cfg.extra_params);
                }
                opts.set(key, &params);
            }
            // SAFETY: avcodec_open2 on the context we own, with our dictionary; what the
            // encoder did not take is freed after a debug line.
            unsafe {
                let mut d = opts.disown();
                let rc = ffi::avcodec_open2(enc.as_mut_ptr(), ff_codec.as_ptr(), &mut d);
                let left = Dictionary::own(d);
                let unused: Vec<String> = left.iter().map(|(k, _)| k.to_string()).collect();
                if !unused.is_empty() {
                    log::debug!("encoder {name} ignored options {}", unused.join(", "));
                }
                if rc < 0 {
                    return Err(MediaError::ffmpeg(
                        format!("open {name}"),
                        ff::Error::from(rc),
                    ));
                }
            }
            Ok(ff::encoder::video::Encoder(enc))
        };
        let encoder = match try_open(true) {
            Ok(e) => e,
            Err(_) if !settings.optional.is_empty() => try_open(false)?,
            Err(e) => return Err(e),
        };
        let (feed, input) = match (&settings.upload, settings.pixel) {
            (Some(_), _) => (
                Feed::Upload {
                    frames: frames.ok_or_else(|| MediaError::Other("no hardware frames".into()))?,
                    _device: device.ok_or_else(|| MediaError::Other("no device".into()))?,
                },
                frame::Video::new(Pixel::NV12, cfg.width, cfg.height),
            ),
            (None, Pixel::BGRZ) => (
                Feed::Bgr,
                frame::Video::new(Pixel::BGRZ, cfg.width, cfg.height),
            ),
            (None, p) => (
                Feed::Yuv420 {
                    converter: match cfg.conversion {
                        Conversion::Rgb => None,
                        c => Some(Converter::new(c, cfg.width, cfg.height)?),
                    },
                },
                frame::Video::new(p, cfg.width, cfg.height),
            ),
        };
        let mut parameter_sets = Vec::new();
        // SAFETY: reading the opened context's extradata (owned by it) into our buffer.
        unsafe {
            let c = encoder.as_ptr();
            if !(*c).extradata.is_null() && (*c).extradata_size > 0 {
                let x = std::slice::from_raw_parts((*c).extradata, (*c).extradata_size as usize);
                parameter_sets = bitstream::parameter_sets(codec, x);
            }
        }
        let info = EncoderInfo {
            name: name.to_string(),
            codec,
            family,
            hardware: traits.hardware,
            device: traits.device.and_then(|d| d.find().ok()),
            keyframes_on_demand: traits.keyframes_on_demand,
            live_bitrate: traits.live_bitrate,
            refresh: cfg.refresh,
            refresh_period: cfg.refresh_period.max(2),
            delay_frames: 0,
            bgra_input: settings.pixel == Pixel::BGRZ,
        };
        Ok(FfmpegEncoder {
            cfg,
            info,
            traits,
            settings,
            encoder,
            feed,
            input,
            packet: Packet::empty(),
            pts: 0,
            since_key: 0,
            parameter_sets,
        })
    }

    /// Fills `self.input` from `src` (conversion), or returns the planes to point it at for
    /// this call (no copy).
    fn fill_input(&mut self, src: &InputPicture<'_>) -> Result<Option<[(*const u8, usize); 3]>> {
        let (w, h) = (self.cfg.width, self.cfg.height);
        // The encoder may still hold a reference to the previous input: never write into a
        // frame someone else reads.
        // SAFETY: a valid, allocated AVFrame we own.
        let rc = unsafe { ffi::av_frame_make_writable(self.input.as_mut_ptr()) };
        if rc < 0 {
            return Err(MediaError::ffmpeg(
                "av_frame_make_writable",
                ff::Error::from(rc),
            ));
        }
        // SAFETY: reading the line sizes of a frame we own (0 for planes it does not have).
        let strides = unsafe {
            let l = (*self.input.as_ptr()).linesize;
            [
                l[0].max(0) as usize,
                l[1].max(0) as usize,
                l[2].max(0) as usize,
            ]
        };
        match (&mut self.feed, src) {
            (Feed::Yuv420 { .. }, InputPicture::I420 { planes, .. }) => Ok(Some([
                (planes[0].0.as_ptr(), planes[0].1),
                (planes[1].0.as_ptr(), planes[1].1),
                (planes[2].0.as_ptr(), planes[2].1),
            ])),
            (Feed::Yuv420 { converter: None }, InputPicture::Bgra { .. }) => {
                Err(MediaError::Conversion(
                    "this encoder takes YUV; BGRA pictures need a converter".into(),
                ))
            }
            (
                Feed::Yuv420 {
                    converter: Some(conv),
                },
                InputPicture::Bgra { data, stride, .. },
            ) => {
                let (ys, us, vs) = (strides[0], strides[1], strides[2]);
                // SAFETY: three distinct planes of the frame; each slice covers exactly its
                // plane's allocated rows (stride × rows).
                let (y, u, v) = unsafe {
                    let f = self.input.as_mut_ptr();
                    let rows = |i: usize| {
                        if i == 0 {
                            h as usize
                        } else {
                            h.div_ceil(2) as usize
                        }
                    };
                    let plane = |i: usize, stride: usize| {
                        std::slice::from_raw_parts_mut((*f).data[i], stride * rows(i))
                    };
                    (plane(0, ys), plane(1, us), plane(2, vs))
                };
                conv.convert_raw(
                    data,
                    *stride,
                    I420Mut {
                        width: w,
                        height: h,
                        y: (y, ys),
                        u: (u, us),
                        v: (v, vs),
                    },
                )?;
                Ok(None)
            }
            (Feed::Bgr, InputPicture::Bgra { data, stride, .. }) => Ok(Some([
                (data.as_ptr(), *stride),
                (std::ptr::null(), 0),
                (std::ptr::null(), 0),
            ])),
            (Feed::Bgr, InputPicture::I420 { .. }) => Err(MediaError::Conversion(format!(
                "{} takes BGRA pictures; convert I420 frames or use an encoder that takes YUV",
                self.info.name
            ))),
            (Feed::Upload { .. }, src) => {
                let (ys, uvs) = (strides[0], strides[1]);
                // SAFETY: the NV12 frame's two planes, each slice exactly its allocation.
                let (y, uv) = unsafe {
                    let f = self.input.as_mut_ptr();
                    (
                        std::slice::from_raw_parts_mut((*f).data[0], ys * h as usize),
                        std::slice::from_raw_parts_mut((*f).data[1], uvs * h.div_ceil(2) as usize),
                    )
                };
                to_nv12(src, y, ys, uv, uvs)?;
                Ok(None)
            }
        }
    }

    /// The next packet: at once, or (asynchronous encoders) within [`PACKET_WAIT`].
    fn receive(&mut self) -> Result<()> {
        let deadline = Instant::now() + PACKET_WAIT;
        loop {
            match self.encoder.receive_packet(&mut self.packet) {
                Ok(()) => return Ok(()),
                Err(ff::Error::Other { errno }) if errno == ff::util::error::EAGAIN => {
                    if !self.traits.asynchronous || Instant::now() >= deadline {
                        return Err(MediaError::Other(format!(
                            "{} held a frame back (it must not with low-latency settings)",
                            self.info.name
                        )));
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => {
                    return Err(MediaError::ffmpeg(
                        format!("{} receive packet", self.info.name),
                        e,
                    ))
                }
            }
        }
    }
}

/// BGRA or I420 → NV12 planes.
fn to_nv12(
    src: &InputPicture<'_>,
    y: &mut [u8],
    ys: usize,
    uv: &mut [u8],
    uvs: usize,
) -> Result<()> {
    let (w, h) = src.size();
    match *src {
        InputPicture::Bgra { data, stride, .. } => {
            let mut img = yuvutils_rs::YuvBiPlanarImageMut {
                y_plane: yuvutils_rs::BufferStoreMut::Borrowed(y),
                y_stride: ys as u32,
                uv_plane: yuvutils_rs::BufferStoreMut::Borrowed(uv),
                uv_stride: uvs as u32,
                width: w,
                height: h,
            };
            yuvutils_rs::bgra_to_yuv_nv12(
                &mut img,
                data,
                stride as u32,
                yuvutils_rs::YuvRange::Limited,
                yuvutils_rs::YuvStandardMatrix::Bt601,
                yuvutils_rs::YuvConversionMode::Balanced,
            )
            .map_err(|e| MediaError::Conversion(format!("yuvutils: {e}")))
        }
        InputPicture::I420 { planes, .. } => {
            let (w, h, w2, h2) = (
                w as usize,
                h as usize,
                w.div_ceil(2) as usize,
                h.div_ceil(2) as usize,
            );
            for r in 0..h {
                y[r * ys..r * ys + w].copy_from_slice(&planes[0].0[r * planes[0].1..][..w]);
            }
            for r in 0..h2 {
                let (u, v) = (
                    &planes[1].0[r * planes[1].1..],
                    &planes[2].0[r * planes[2].1..],
                );
                let row = &mut uv[r * uvs..r * uvs + 2 * w2];
                for x in 0..w2 {
                    row[2 * x] = u[x];
                    row[2 * x + 1] = v[x];
                }
            }
            Ok(())
        }
    }
}

impl EncoderBackend for FfmpegEncoder {
    fn info(&self) -> &EncoderInfo {
        &self.info
    }

    fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    fn set_bitrate(&mut self, kbps: u32) -> Result<bool> {
        if !self.traits.live_bitrate {
            return Ok(false);
        }
        self.cfg.bitrate_kbps = kbps;
        let bps = kbps as i64 * 1000;
        let fps = self.cfg.fps.max(1) as i64;
        // SAFETY: field writes on our open context between frames; libx264's and NVENC's
        // wrappers read them at the next frame and reconfigure the encoder.
        unsafe {
            let c = self.encoder.as_mut_ptr();
            (*c).bit_rate = bps;
            if self.settings.max_rate.is_some() {
                (*c).rc_max_rate = bps;
            }
            (*c).rc_buffer_size = (bps / fps) as i32;
        }
        Ok(true)
    }

    /// BGRA to a 4:2:0 encoder is converted straight into the encoder's input planes; I420 to
    /// it, and BGRA to libx264rgb or NVENC, are not copied at all: the input frame points at
    /// the caller's planes for the duration of the call (the encoders copy the picture inside
    /// `avcodec_send_frame` — x264 into its own padded frame, NVENC into its input surface —
    /// and with no lookahead FFmpeg releases its reference before returning). Hardware
    /// uploads convert to NV12 and transfer once.
    fn encode_picture(
        &mut self,
        src: &InputPicture<'_>,
        force_keyframe: bool,
    ) -> Result<Option<EncodedFrame>> {
        src.check()?;
        let (sw, sh) = src.size();
        if (sw, sh) != (self.cfg.width, self.cfg.height) {
            return Err(MediaError::InvalidSize {
                width: sw,
                height: sh,
                reason: format!("the encoder takes {}x{}", self.cfg.width, self.cfg.height),
            });
        }
        let t0 = Instant::now();
        let borrowed = self.fill_input(src)?;
        let t1 = Instant::now();
        let kind = if force_keyframe && self.traits.keyframes_on_demand {
            picture::Type::I
        } else {
            picture::Type::None
        };
        let pts = self.pts;
        self.pts += 1;
        let sent = match (&self.feed, borrowed) {
            (Feed::Upload { frames, .. }, _) => {
                // SAFETY: a new hardware frame from our pool, filled by one transfer from the
                // NV12 frame we own; freed after sending (the encoder keeps its reference).
                unsafe {
                    let mut hw = ffi::av_frame_alloc();
                    if hw.is_null() {
                        return Err(MediaError::Other("out of memory (hardware frame)".into()));
                    }
                    let mut rc = ffi::av_hwframe_get_buffer(frames.as_ptr(), hw, 0);
                    if rc >= 0 {
                        rc = ffi::av_hwframe_transfer_data(hw, self.input.as_ptr(), 0);
                    }
                    let r = if rc < 0 {
                        Err(ff::Error::from(rc))
                    } else {
                        (*hw).pts = pts;
                        (*hw).pict_type = kind.into();
                        match ffi::avcodec_send_frame(self.encoder.as_mut_ptr(), hw) {
                            0 => Ok(()),
                            e => Err(ff::Error::from(e)),
                        }
                    };
                    ffi::av_frame_free(&mut hw);
                    r
                }
            }
            (_, None) => {
                self.input.set_pts(Some(pts));
                self.input.set_kind(kind);
                self.encoder.send_frame(&self.input)
            }
            (_, Some(planes)) => {
                self.input.set_pts(Some(pts));
                self.input.set_kind(kind);
                // SAFETY: the frame's data pointers and line sizes are swapped for the
                // borrowed planes (checked above to hold every row) for this call only and
                // restored before returning; its buffers (buf[]) stay ours, so FFmpeg's
                // reference keeps our allocation alive, and nothing reads the borrowed
                // pointers after send_frame returns (see the doc comment).
                unsafe {
                    let f = self.input.as_mut_ptr();
                    let saved = ((*f).data, (*f).linesize);
                    for (i, (p, stride)) in planes.iter().enumerate() {
                        if !p.is_null() {
                            (*f).data[i] = *p as *mut u8;
                            (*f).linesize[i] = *stride as i32;
                        }
                    }
                    let r = self.encoder.send_frame(&self.input);
                    (*f).data = saved.0;
                    (*f).linesize = saved.1;
                    r
                }
            }
        };
        sent.map_err(|e| MediaError::ffmpeg(format!("{} encode", self.info.name), e))?;
        self.receive()?;
        let t2 = Instant::now();
        let codec = self.info.codec;
        let mut data = self.packet.data().map(<[u8]>::to_vec).unwrap_or_default();
        let keyframe = bitstream::is_keyframe(codec, &data, self.packet.is_key());
        if keyframe {
            self.since_key = 0;
            let ps = bitstream::parameter_sets(codec, &data);
            if !ps.is_empty() {
                self.parameter_sets = ps;
            }
        } else {
            self.since_key = self.since_key.saturating_add(1);
        }
        let refresh_start = !keyframe
            && self.info.refresh == Refresh::Intra
            && self.since_key % self.info.refresh_period == 0;
        if (keyframe || refresh_start)
            && codec.is_annex_b()
            && !self.parameter_sets.is_empty()
            && !bitstream::has_parameter_sets(codec, &data)
        {
            // A decoder may start here: it needs the parameter sets in band.
            let mut with = Vec::with_capacity(self.parameter_sets.len() + data.len());
            with.extend_from_slice(&self.parameter_sets);
            with.append(&mut data);
            data = with;
        }
        Ok(Some(EncodedFrame {
            input: self.packet.pts().map_or(pts as u64, |p| p.max(0) as u64),
            keyframe,
            refresh_start,
            data,
            convert_us: (t1 - t0).as_micros() as u64,
            encode_us: (t2 - t1).as_micros() as u64,
        }))
    }
}
