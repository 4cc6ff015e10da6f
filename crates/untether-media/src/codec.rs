//! H.264 through FFmpeg (ffmpeg-next): the x264 encoder (libx264 for 4:2:0, libx264rgb for BGR
//! as is) with low-latency settings, and the h264 decoder in low-delay, slice-threaded mode.
//!
//! Encoder settings: `tune=zerolatency` (no lookahead, no frame threads, no B-frames),
//! sliced threads, a one-frame VBV (max rate = bitrate, buffer = bitrate / fps) so no frame
//! waits behind a big one, an infinite GOP without scene cuts, and IDR keyframes only when asked
//! (`forced-idr`), each with its SPS/PPS (Annex B, no global header), BT.601 limited range in the
//! VUI. One frame in gives one access unit out at once. The bitrate can change between frames
//! without a keyframe (FFmpeg's libx264 wrapper calls `x264_encoder_reconfig` when
//! `bit_rate`/`rc_max_rate`/`rc_buffer_size` change).
//!
//! The 4:2:0 path converts straight into the planes of the AVFrame the encoder reads, so the
//! only pass over the pixels before x264 is the colour conversion itself.

use std::fmt;
use std::str::FromStr;
use std::sync::Once;
use std::time::Instant;

use ff::format::Pixel;
use ff::{codec, frame, picture, Dictionary, Packet};
use ffmpeg_next as ff;

use crate::convert::{Conversion, Converter, I420Mut, UnknownConversion};
use crate::quality::Picture;
use crate::{BgraFrame, MediaError, Result};

/// Initialises FFmpeg once and quiets its log (errors it reports reach us as return codes).
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

/// Which x264 encoder.
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

/// An unknown encoder name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown encoder {0:?}; allowed: libx264, libx264rgb")]
pub struct UnknownEncoder(pub String);

impl FromStr for EncoderKind {
    type Err = UnknownEncoder;
    fn from_str(s: &str) -> Result<Self, UnknownEncoder> {
        EncoderKind::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| UnknownEncoder(s.to_string()))
    }
}

/// The video path from BGRA pixels to H.264: which converter and which encoder. The one place
/// where they are coupled — the RGB encoder takes BGR as is (no conversion), the 4:2:0 encoder
/// needs a converter — so [`conversion`](Self::conversion), [`encoder`](Self::encoder) (and
/// the stream's codec, `untether::config::VideoConfig::codec`) follow from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum VideoPath {
    /// libx264 on YUV 4:2:0, converted by yuvutils-rs (SIMD).
    #[default]
    Yuv420Simd,
    /// libx264 on YUV 4:2:0, converted by FFmpeg's swscale.
    Yuv420Swscale,
    /// libx264rgb on BGR as is: no conversion (H.264 High 4:4:4 of GBR).
    Rgb,
}

/// Encoder and conversion settings that contradict each other, or an unknown name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VideoPathError {
    #[error(transparent)]
    Encoder(#[from] UnknownEncoder),
    #[error(transparent)]
    Conversion(#[from] UnknownConversion),
    /// The encoder and the conversion do not go together.
    #[error("encoder {encoder:?} and conversion {conversion:?} contradict each other: {why}")]
    Contradiction {
        encoder: &'static str,
        conversion: &'static str,
        why: &'static str,
    },
}

impl VideoPath {
    pub const ALL: [VideoPath; 3] = [
        VideoPath::Yuv420Simd,
        VideoPath::Yuv420Swscale,
        VideoPath::Rgb,
    ];

    /// The path a converter implies (`Rgb`: no conversion, the RGB encoder).
    pub fn from_conversion(conversion: Conversion) -> VideoPath {
        match conversion {
            Conversion::Simd => VideoPath::Yuv420Simd,
            Conversion::Swscale => VideoPath::Yuv420Swscale,
            Conversion::Rgb => VideoPath::Rgb,
        }
    }

    /// This path with another encoder: the RGB encoder takes the RGB path; the 4:2:0 encoder
    /// keeps this path's converter, or SIMD when coming from the RGB path.
    pub fn with_encoder(self, encoder: EncoderKind) -> VideoPath {
        match (encoder, self) {
            (EncoderKind::X264Rgb, _) => VideoPath::Rgb,
            (EncoderKind::X264, VideoPath::Rgb) => VideoPath::Yuv420Simd,
            (EncoderKind::X264, p) => p,
        }
    }

    /// The path chosen by an encoder name and a conversion name, each optional (not given:
    /// follows from the other; neither: the default). `libx264rgb` alone implies conversion
    /// `rgb` and `rgb` alone implies `libx264rgb`; `libx264rgb` with `simd`/`swscale`, or
    /// `libx264` with `rgb`, is a [`VideoPathError::Contradiction`].
    pub fn parse(
        encoder: Option<&str>,
        conversion: Option<&str>,
    ) -> Result<VideoPath, VideoPathError> {
        let encoder = encoder.map(str::parse::<EncoderKind>).transpose()?;
        let conversion = conversion.map(str::parse::<Conversion>).transpose()?;
        match (encoder, conversion) {
            (None, None) => Ok(VideoPath::default()),
            (Some(e), None) => Ok(VideoPath::default().with_encoder(e)),
            (None, Some(c)) => Ok(VideoPath::from_conversion(c)),
            (Some(e), Some(c)) => {
                let path = VideoPath::from_conversion(c);
                if path.encoder() == e {
                    Ok(path)
                } else {
                    Err(VideoPathError::Contradiction {
                        encoder: e.name(),
                        conversion: c.name(),
                        why: match e {
                            EncoderKind::X264Rgb => "libx264rgb takes BGR as is; use conversion rgb (or leave it out)",
                            EncoderKind::X264 => "rgb (no conversion) needs libx264rgb; libx264 takes simd or swscale",
                        },
                    })
                }
            }
        }
    }

    /// The BGRA converter ([`Conversion::Rgb`]: none).
    pub fn conversion(self) -> Conversion {
        match self {
            VideoPath::Yuv420Simd => Conversion::Simd,
            VideoPath::Yuv420Swscale => Conversion::Swscale,
            VideoPath::Rgb => Conversion::Rgb,
        }
    }

    /// The encoder.
    pub fn encoder(self) -> EncoderKind {
        match self {
            VideoPath::Yuv420Simd | VideoPath::Yuv420Swscale => EncoderKind::X264,
            VideoPath::Rgb => EncoderKind::X264Rgb,
        }
    }

    /// FFmpeg's name of the encoder: `libx264` or `libx264rgb`.
    pub fn encoder_name(self) -> &'static str {
        self.encoder().name()
    }

    /// Whether frames reach the encoder as BGR (no conversion).
    pub fn is_rgb(self) -> bool {
        self == VideoPath::Rgb
    }
}

impl fmt::Display for VideoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} conversion)",
            self.encoder_name(),
            self.conversion().name()
        )
    }
}

/// Encoder settings.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub bitrate_kbps: u32,
    /// x264 preset (ultrafast … placebo).
    pub preset: String,
    /// x264 slice threads.
    pub threads: usize,
    /// `Rgb` selects libx264rgb; `Simd`/`Swscale` libx264 with that converter.
    pub conversion: Conversion,
    /// Periodic intra refresh (a moving column of intra blocks) instead of keyframes: forced
    /// keyframes are still IDRs.
    pub intra_refresh: bool,
    /// Extra x264 options, `key=value:key=value`, applied after the preset (e.g. `subme=2`).
    pub x264_params: String,
}

impl EncoderConfig {
    pub fn kind(&self) -> EncoderKind {
        self.path().encoder()
    }

    /// The video path `conversion` stands for.
    pub fn path(&self) -> VideoPath {
        VideoPath::from_conversion(self.conversion)
    }
}

/// One encoded frame.
#[derive(Clone, Debug, Default)]
pub struct EncodedFrame {
    /// An H.264 access unit, Annex B.
    pub data: Vec<u8>,
    pub keyframe: bool,
    /// BGRA→YUV conversion (or, on the RGB path, the copy into the encoder's frame), µs.
    pub convert_us: u64,
    /// x264, µs.
    pub encode_us: u64,
}

fn fferr(context: &'static str) -> impl Fn(ff::Error) -> MediaError {
    move |e| MediaError::ffmpeg(context, e)
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

/// The x264 encoder.
pub struct Encoder {
    cfg: EncoderConfig,
    encoder: ff::encoder::video::Encoder,
    converter: Option<Converter>,
    input: frame::Video,
    packet: Packet,
    pts: i64,
}

// SAFETY: the FFmpeg objects are owned by this value and used through &mut self only.
unsafe impl Send for Encoder {}

impl Encoder {
    pub fn new(cfg: EncoderConfig) -> Result<Encoder> {
        init_ffmpeg();
        crate::frame::check_size(cfg.width, cfg.height)?;
        if cfg.fps == 0 || cfg.bitrate_kbps == 0 {
            return Err(MediaError::Other(
                "encoder: fps and bitrate must be non-zero".into(),
            ));
        }
        let kind = cfg.kind();
        let codec =
            ff::encoder::find_by_name(kind.name()).ok_or_else(|| MediaError::EncoderMissing {
                name: kind.name().to_string(),
            })?;
        let mut ctx = codec::context::Context::new_with_codec(codec);
        ctx.set_threading(ff::threading::Config {
            kind: ff::threading::Type::Slice,
            count: cfg.threads.max(1),
            ..Default::default()
        });
        let mut enc = ctx.encoder().video().map_err(fferr("encoder context"))?;
        let pixel = match kind {
            EncoderKind::X264 => Pixel::YUV420P,
            EncoderKind::X264Rgb => Pixel::BGRZ,
        };
        enc.set_width(cfg.width);
        enc.set_height(cfg.height);
        enc.set_format(pixel);
        enc.set_time_base((1, cfg.fps as i32));
        enc.set_frame_rate(Some((cfg.fps as i32, 1)));
        enc.set_max_b_frames(0);
        match kind {
            EncoderKind::X264 => {
                enc.set_colorspace(ff::color::Space::SMPTE170M);
                enc.set_color_range(ff::color::Range::MPEG);
            }
            EncoderKind::X264Rgb => {
                // Identity matrix: the decoder then outputs planar GBR.
                enc.set_colorspace(ff::color::Space::RGB);
                enc.set_color_range(ff::color::Range::JPEG);
            }
        }
        enc.set_color_primaries(ff::color::Primaries::SMPTE170M);
        enc.set_color_transfer_characteristic(ff::color::TransferCharacteristic::SMPTE170M);
        let bps = cfg.bitrate_kbps as usize * 1000;
        enc.set_bit_rate(bps);
        enc.set_max_bit_rate(bps);
        // SAFETY: plain field writes on the context we own, before it is opened.
        unsafe {
            let c = enc.as_mut_ptr();
            (*c).rc_buffer_size = (bps / cfg.fps as usize) as i32;
            (*c).gop_size = -1;
        }
        let mut opts = Dictionary::new();
        opts.set("preset", &cfg.preset);
        opts.set("tune", "zerolatency");
        opts.set("forced-idr", "1");
        let mut params =
            String::from("keyint=infinite:scenecut=0:repeat-headers=1:sliced-threads=1");
        if cfg.intra_refresh {
            params.push_str(":intra-refresh=1");
        }
        if !cfg.x264_params.is_empty() {
            params.push(':');
            params.push_str(&cfg.x264_params);
        }
        opts.set("x264-params", &params);
        let encoder = enc.open_with(opts).map_err(fferr("open x264"))?;
        let converter = match kind {
            EncoderKind::X264 => Some(Converter::new(cfg.conversion, cfg.width, cfg.height)?),
            EncoderKind::X264Rgb => None,
        };
        Ok(Encoder {
            input: frame::Video::new(pixel, cfg.width, cfg.height),
            cfg,
            encoder,
            converter,
            packet: Packet::empty(),
            pts: 0,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// Changes the target (and VBV) bitrate from the next frame on, without a keyframe.
    pub fn set_bitrate(&mut self, kbps: u32) -> Result<()> {
        if kbps == 0 {
            return Err(MediaError::Other("bitrate must be non-zero".into()));
        }
        self.cfg.bitrate_kbps = kbps;
        let bps = kbps as i64 * 1000;
        // SAFETY: field writes on our open context between frames; libx264's wrapper reads
        // them at the next frame and reconfigures x264.
        unsafe {
            let c = self.encoder.as_mut_ptr();
            (*c).bit_rate = bps;
            (*c).rc_max_rate = bps;
            (*c).rc_buffer_size = (bps / self.cfg.fps as i64) as i32;
        }
        Ok(())
    }

    /// Encodes one frame; `force_keyframe` makes it an IDR.
    pub fn encode(&mut self, src: &BgraFrame, force_keyframe: bool) -> Result<EncodedFrame> {
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

    /// Encodes one borrowed picture; `force_keyframe` makes it an IDR.
    ///
    /// BGRA to libx264 is converted straight into the encoder's input planes. I420 to libx264
    /// and BGRA to libx264rgb are not copied at all: the encoder's input frame points at the
    /// caller's planes for the duration of the call (x264 copies the picture into its own
    /// padded frame inside `x264_encoder_encode`, and with `tune=zerolatency` FFmpeg releases
    /// its reference before `avcodec_send_frame` returns). I420 to libx264rgb is refused.
    pub fn encode_picture(
        &mut self,
        src: &InputPicture<'_>,
        force_keyframe: bool,
    ) -> Result<EncodedFrame> {
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
        // The encoder may still hold a reference to the previous input (it should not with
        // zerolatency): never write into a frame someone else reads.
        // SAFETY: a valid, allocated AVFrame we own.
        let rc = unsafe { ff::ffi::av_frame_make_writable(self.input.as_mut_ptr()) };
        if rc < 0 {
            return Err(MediaError::ffmpeg(
                "av_frame_make_writable",
                ff::Error::from(rc),
            ));
        }
        // Planes to point the input frame at for this call (no copy), if any.
        let mut borrowed: Option<[(*const u8, usize); 3]> = None;
        match (self.converter.as_mut(), src) {
            (_, InputPicture::I420 { planes, .. }) => {
                if self.converter.is_none() {
                    return Err(MediaError::Conversion(
                        "libx264rgb takes BGRA; convert I420 frames or use libx264".into(),
                    ));
                }
                borrowed = Some([
                    (planes[0].0.as_ptr(), planes[0].1),
                    (planes[1].0.as_ptr(), planes[1].1),
                    (planes[2].0.as_ptr(), planes[2].1),
                ]);
            }
            (None, InputPicture::Bgra { data, stride, .. }) => {
                borrowed = Some([
                    (data.as_ptr(), *stride),
                    (std::ptr::null(), 0),
                    (std::ptr::null(), 0),
                ]);
            }
            (Some(conv), InputPicture::Bgra { data, stride, .. }) => {
                let (w, h) = (self.cfg.width, self.cfg.height);
                let (ys, us, vs) = (
                    self.input.stride(0),
                    self.input.stride(1),
                    self.input.stride(2),
                );
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
            }
        }
        let t1 = Instant::now();
        self.input.set_pts(Some(self.pts));
        self.pts += 1;
        self.input.set_kind(if force_keyframe {
            picture::Type::I
        } else {
            picture::Type::None
        });
        let sent = match borrowed {
            None => self.encoder.send_frame(&self.input),
            Some(planes) => {
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
        sent.map_err(fferr("x264 encode"))?;
        match self.encoder.receive_packet(&mut self.packet) {
            Ok(()) => {}
            Err(ff::Error::Other { errno }) if errno == ff::util::error::EAGAIN => {
                return Err(MediaError::Other(
                    "x264 held a frame back (it must not with tune=zerolatency)".into(),
                ))
            }
            Err(e) => return Err(MediaError::ffmpeg("x264 receive packet", e)),
        }
        let t2 = Instant::now();
        let data = self.packet.data().map(<[u8]>::to_vec).unwrap_or_default();
        Ok(EncodedFrame {
            keyframe: self.packet.is_key(),
            data,
            convert_us: (t1 - t0).as_micros() as u64,
            encode_us: (t2 - t1).as_micros() as u64,
        })
    }
}

/// The h264 decoder.
pub struct Decoder {
    decoder: ff::decoder::Video,
    frame: frame::Video,
}

// SAFETY: owned FFmpeg objects used through &mut self only.
unsafe impl Send for Decoder {}

impl Decoder {
    /// A low-delay decoder with `threads` slice threads.
    pub fn new(threads: usize) -> Result<Decoder> {
        Self::open(threads, false)
    }

    /// A low-delay decoder that takes a frame's slices one [`decode`](Self::decode) call at a
    /// time (`AV_CODEC_FLAG2_CHUNKS`): each slice is decoded when it is given, and the picture
    /// comes out with the call that gives the slice ending at the bottom of the picture.
    pub fn new_chunked(threads: usize) -> Result<Decoder> {
        Self::open(threads, true)
    }

    fn open(threads: usize, chunks: bool) -> Result<Decoder> {
        init_ffmpeg();
        let codec =
            ff::decoder::find(codec::Id::H264).ok_or_else(|| MediaError::EncoderMissing {
                name: "h264 (decoder)".into(),
            })?;
        let mut ctx = codec::context::Context::new_with_codec(codec);
        ctx.set_threading(ff::threading::Config {
            kind: ff::threading::Type::Slice,
            count: threads.max(1),
            ..Default::default()
        });
        ctx.set_flags(codec::Flags::LOW_DELAY);
        if chunks {
            // SAFETY: a plain field write on the context we own, before it is opened.
            unsafe { (*ctx.as_mut_ptr()).flags2 |= ff::ffi::AV_CODEC_FLAG2_CHUNKS };
        }
        let decoder = ctx.decoder().video().map_err(fferr("open h264 decoder"))?;
        Ok(Decoder {
            decoder,
            frame: frame::Video::empty(),
        })
    }

    /// Decodes one access unit. Its picture comes out at once (Ok(Some)); Ok(None) if the
    /// decoder produced nothing (e.g. parameter sets only); Err for data it rejects.
    pub fn decode(&mut self, access_unit: &[u8]) -> Result<Option<DecodedFrame>> {
        if access_unit.is_empty() {
            return Ok(None);
        }
        let packet = Packet::copy(access_unit);
        self.decoder
            .send_packet(&packet)
            .map_err(fferr("h264 decode"))?;
        match self.decoder.receive_frame(&mut self.frame) {
            Ok(()) => {
                let f = std::mem::replace(&mut self.frame, frame::Video::empty());
                match f.format() {
                    Pixel::YUV420P | Pixel::YUVJ420P | Pixel::GBRP => {}
                    other => {
                        return Err(MediaError::Other(format!(
                            "the decoder produced {other:?}; untether handles 4:2:0 and GBR streams"
                        )))
                    }
                }
                if f.width() == 0 || f.height() == 0 {
                    return Err(MediaError::Other("decoded an empty picture".into()));
                }
                Ok(Some(DecodedFrame { frame: f }))
            }
            Err(ff::Error::Other { errno }) if errno == ff::util::error::EAGAIN => Ok(None),
            Err(e) => Err(MediaError::ffmpeg("h264 receive frame", e)),
        }
    }
}

/// A decoded picture: YUV 4:2:0 or planar GBR, in FFmpeg's frame (no copy).
pub struct DecodedFrame {
    frame: frame::Video,
}

// SAFETY: the frame is reference counted and owned; nothing else mutates its buffers.
unsafe impl Send for DecodedFrame {}

/// The layout of a decoded picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PictureFormat {
    /// Y, U, V planes, chroma at half resolution.
    I420,
    /// G, B, R planes at full resolution.
    Gbrp,
}

impl DecodedFrame {
    pub fn width(&self) -> u32 {
        self.frame.width()
    }

    pub fn height(&self) -> u32 {
        self.frame.height()
    }

    pub fn format(&self) -> PictureFormat {
        if self.frame.format() == Pixel::GBRP {
            PictureFormat::Gbrp
        } else {
            PictureFormat::I420
        }
    }

    /// Plane `i` (0..3) with its stride; exactly `rows × stride` bytes.
    pub fn plane(&self, i: usize) -> (&[u8], usize) {
        let stride = self.frame.stride(i);
        let rows = match (self.format(), i) {
            (PictureFormat::I420, 1 | 2) => self.height().div_ceil(2) as usize,
            _ => self.height() as usize,
        };
        let data = self.frame.data(i);
        (&data[..(stride * rows).min(data.len())], stride)
    }

    /// The plane the stamp is read from: Y, or G for a GBR picture.
    pub fn luma(&self) -> (&[u8], usize) {
        self.plane(0)
    }

    /// The picture for the quality meter.
    pub fn picture(&self) -> Picture<'_> {
        let planes = [self.plane(0), self.plane(1), self.plane(2)];
        match self.format() {
            PictureFormat::I420 => Picture::I420 {
                width: self.width(),
                height: self.height(),
                planes,
            },
            PictureFormat::Gbrp => Picture::Gbrp {
                width: self.width(),
                height: self.height(),
                planes,
            },
        }
    }

    /// Converts to packed BGRA (BT.601 limited range for YUV).
    pub fn to_bgra(&self) -> Result<BgraFrame> {
        let (w, h) = (self.width(), self.height());
        let mut out = BgraFrame::new(w, h)?;
        match self.format() {
            PictureFormat::I420 => {
                let (y, u, v) = (self.plane(0), self.plane(1), self.plane(2));
                let img = yuvutils_rs::YuvPlanarImage {
                    y_plane: y.0,
                    y_stride: y.1 as u32,
                    u_plane: u.0,
                    u_stride: u.1 as u32,
                    v_plane: v.0,
                    v_stride: v.1 as u32,
                    width: w,
                    height: h,
                };
                let stride = out.stride as u32;
                yuvutils_rs::yuv420_to_bgra(
                    &img,
                    &mut out.data,
                    stride,
                    yuvutils_rs::YuvRange::Limited,
                    yuvutils_rs::YuvStandardMatrix::Bt601,
                )
                .map_err(|e| MediaError::Conversion(format!("yuvutils: {e}")))?;
            }
            PictureFormat::Gbrp => {
                let (g, b, r) = (self.plane(0), self.plane(1), self.plane(2));
                for yy in 0..h as usize {
                    let row = out.row_mut(yy as u32);
                    for x in 0..w as usize {
                        row[4 * x] = b.0[yy * b.1 + x];
                        row[4 * x + 1] = g.0[yy * g.1 + x];
                        row[4 * x + 2] = r.0[yy * r.1 + x];
                        row[4 * x + 3] = 255;
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn video_path_couples_encoder_and_conversion_once() {
        use VideoPath as P;
        assert_eq!(P::parse(None, None), Ok(P::Yuv420Simd));
        assert_eq!(P::parse(Some("libx264rgb"), None), Ok(P::Rgb));
        assert_eq!(P::parse(None, Some("rgb")), Ok(P::Rgb));
        assert_eq!(P::parse(Some("libx264rgb"), Some("rgb")), Ok(P::Rgb));
        assert_eq!(
            P::parse(Some("libx264"), Some("swscale")),
            Ok(P::Yuv420Swscale)
        );
        assert_eq!(P::parse(None, Some("swscale")), Ok(P::Yuv420Swscale));
        let e = P::parse(Some("libx264rgb"), Some("simd"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("libx264rgb") && e.contains("simd"), "{e}");
        let e = P::parse(Some("libx264"), Some("rgb"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("libx264") && e.contains("rgb"), "{e}");
        assert!(P::parse(Some("x265"), None)
            .unwrap_err()
            .to_string()
            .contains("libx264rgb"));
        assert!(P::parse(None, Some("magic"))
            .unwrap_err()
            .to_string()
            .contains("swscale"));
        for p in P::ALL {
            assert_eq!(P::from_conversion(p.conversion()), p);
            assert_eq!(
                P::parse(Some(p.encoder_name()), Some(p.conversion().name())),
                Ok(p)
            );
            assert_eq!(p.is_rgb(), p.encoder() == EncoderKind::X264Rgb);
        }
        assert_eq!(
            P::Yuv420Swscale.with_encoder(EncoderKind::X264),
            P::Yuv420Swscale
        );
        assert_eq!(P::Yuv420Swscale.with_encoder(EncoderKind::X264Rgb), P::Rgb);
        assert_eq!(P::Rgb.with_encoder(EncoderKind::X264), P::Yuv420Simd);
    }
    use super::*;
    use crate::quality::{CompareSpace, QualityMeter};
    use crate::scene::{Scene, SceneConfig};
    use crate::stamp::{self, Stamp};

    fn cfg(w: u32, h: u32, kbps: u32, conversion: Conversion) -> EncoderConfig {
        EncoderConfig {
            width: w,
            height: h,
            fps: 60,
            bitrate_kbps: kbps,
            preset: "ultrafast".into(),
            threads: 2,
            conversion,
            intra_refresh: false,
            x264_params: String::new(),
        }
    }

    /// Streams `n` frames of the moving scene, stamped, through encoder and decoder; checks
    /// every stamp reads back exactly.
    ///
    /// One encoder thread: with sliced threads x264's one-frame VBV reads the other slices'
    /// running size estimates, so its output depends on thread timing. On a loaded machine a
    /// starved frame (the RGB path at 10 Mbit/s) then sometimes skipped the stamp's macroblocks,
    /// and the decoder showed the previous frame's stamp there (seen in `make test` with
    /// two fuzzers running: frame 21 read as frame 20). One thread makes the output, and so
    /// this test, repeatable.
    fn stamp_round_trip(w: u32, h: u32, kbps: u32, conversion: Conversion, n: u32) {
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut enc = Encoder::new(EncoderConfig {
            threads: 1,
            ..cfg(w, h, kbps, conversion)
        })
        .unwrap();
        let mut dec = Decoder::new(2).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        for i in 0..n {
            scene.render(i as f64 / 60.0, &mut f);
            let s = Stamp {
                frame_number: 1000 + i,
                capture_us: 5_000_000_000 + i as u64 * 16_667,
                input_seq: i * 3,
            };
            stamp::write_bgra(&mut f, &s);
            let e = enc.encode(&f, i == 0).unwrap();
            assert_eq!(e.keyframe, i == 0, "frame {i}");
            let pic = dec
                .decode(&e.data)
                .unwrap()
                .expect("one picture per access unit, at once");
            let (p, stride) = pic.luma();
            let got = stamp::read_plane(p, stride, pic.width(), pic.height());
            let mut want = s;
            want.capture_us &= (1 << 40) - 1;
            assert_eq!(
                got,
                Some(want),
                "{w}x{h} {kbps} kbit/s {conversion:?} frame {i}"
            );
        }
    }

    #[test]
    fn stamp_survives_x264_720p_at_2_and_10_mbps_and_1080p_at_4_and_10() {
        stamp_round_trip(1280, 720, 2000, Conversion::Simd, 40);
        stamp_round_trip(1280, 720, 10_000, Conversion::Swscale, 30);
        stamp_round_trip(1920, 1080, 4000, Conversion::Simd, 30);
        stamp_round_trip(1920, 1080, 10_000, Conversion::Simd, 30);
    }

    #[test]
    fn stamp_survives_the_rgb_path() {
        stamp_round_trip(1280, 720, 10_000, Conversion::Rgb, 30);
    }

    #[test]
    fn forced_keyframes_only_and_bitrate_changes_without_one() {
        let (w, h) = (640, 360);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut enc = Encoder::new(cfg(w, h, 4000, Conversion::Simd)).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        let mut sizes = Vec::new();
        for i in 0..120 {
            if i == 60 {
                enc.set_bitrate(500).unwrap();
            }
            scene.render(i as f64 / 60.0, &mut f);
            let e = enc.encode(&f, i == 0 || i == 30).unwrap();
            assert_eq!(e.keyframe, i == 0 || i == 30, "frame {i}");
            // Annex B, with SPS/PPS in front of every IDR.
            assert_eq!(&e.data[..4], &[0, 0, 0, 1]);
            if e.keyframe {
                assert!(
                    e.data
                        .windows(5)
                        .any(|w| w[..4] == [0, 0, 0, 1] && w[4] & 0x1f == 7),
                    "no SPS"
                );
            }
            sizes.push(e.data.len());
        }
        let before: usize = sizes[40..60].iter().sum::<usize>() / 20;
        let after: usize = sizes[100..120].iter().sum::<usize>() / 20;
        assert!(
            after * 2 < before,
            "bitrate change had no effect: {before} → {after} bytes/frame"
        );
    }

    #[test]
    fn decoder_rejects_garbage_without_panicking_and_recovers_at_a_keyframe() {
        let (w, h) = (640, 360);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut enc = Encoder::new(cfg(w, h, 4000, Conversion::Simd)).unwrap();
        let mut dec = Decoder::new(2).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        let mut x = 12345u32;
        for len in [1usize, 7, 100, 5000] {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = dec.decode(&junk);
        }
        scene.render(0.0, &mut f);
        stamp::write_bgra(
            &mut f,
            &Stamp {
                frame_number: 9,
                capture_us: 1,
                input_seq: 0,
            },
        );
        let e = enc.encode(&f, true).unwrap();
        let pic = dec.decode(&e.data).unwrap().expect("picture");
        let (p, s) = pic.luma();
        assert_eq!(
            stamp::read_plane(p, s, w, h).map(|s| s.frame_number),
            Some(9)
        );
    }

    #[test]
    fn scene_quality_at_720p_10mbps() {
        let (w, h) = (1280, 720);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        // superfast: ultrafast's integer-pel motion search loses ~0.05 SSIM on the spinning
        // camera (docs/BENCHMARKS.md has both).
        let mut enc = Encoder::new(EncoderConfig {
            preset: "superfast".into(),
            ..cfg(w, h, 10_000, Conversion::Simd)
        })
        .unwrap();
        let mut dec = Decoder::new(2).unwrap();
        let mut meter = QualityMeter::new(w, h, CompareSpace::Yuv420).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        let (mut ssim, mut psnr, mut n) = (0.0, 0.0, 0.0);
        for i in 0..90 {
            scene.render(i as f64 / 60.0, &mut f);
            let e = enc.encode(&f, i == 0).unwrap();
            let pic = dec.decode(&e.data).unwrap().unwrap();
            if i >= 30 && i % 10 == 0 {
                let q = meter.compare(&Picture::Bgra(&f), &pic.picture()).unwrap();
                ssim += q.ssim_y;
                psnr += q.psnr_y_db;
                n += 1.0;
            }
        }
        let (ssim, psnr) = (ssim / n, psnr / n);
        eprintln!("720p 10 Mbit/s superfast: SSIM(Y) {ssim:.4}, PSNR(Y) {psnr:.2} dB");
        assert!(ssim >= 0.95, "SSIM {ssim}");
        // Far from trivially compressible.
        assert!(psnr < 50.0, "PSNR {psnr}: the scene is too easy");
    }

    #[test]
    fn to_bgra_matches_the_source() {
        let (w, h) = (640, 360);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        scene.render(0.5, &mut f);
        for conv in [Conversion::Simd, Conversion::Rgb] {
            let mut enc = Encoder::new(cfg(w, h, 20_000, conv)).unwrap();
            let mut dec = Decoder::new(1).unwrap();
            let e = enc.encode(&f, true).unwrap();
            let pic = dec.decode(&e.data).unwrap().unwrap();
            let back = pic.to_bgra().unwrap();
            let mad = f
                .data
                .iter()
                .zip(&back.data)
                .map(|(a, b)| (*a as f64 - *b as f64).abs())
                .sum::<f64>()
                / f.data.len() as f64;
            assert!(mad < 12.0, "{conv:?}: mean abs diff {mad}");
        }
    }
}
