//! Decoders: FFmpeg's software decoder of the stream's codec (h264, hevc, libdav1d), a named
//! one (`h264_v4l2m2m`, `hevc_cuvid`, …), or the software decoder with a hardware accelerator
//! (VA-API, CUDA, VDPAU, DRM) or the SoC's V4L2 decoder — falling back to software, with one
//! line saying why, when the hardware is not there.
//!
//! Pictures a hardware decoder leaves on the GPU stay there when the presenter can take them
//! ([`DecoderConfig::keep_on_gpu`]: DRM PRIME, i.e. dma-buf descriptors); otherwise they are
//! downloaded (`av_hwframe_transfer_data`, into I420 where the driver can, else NV12 then
//! converted), inside [`Decoder::decode`], so the cost is part of the `decode` stage.
//! Every decoder runs in low-delay mode: one access unit in, its picture out at once.

use crate::codec::CodecFfmpeg as _;
use std::fmt;
use std::str::FromStr;

use ff::format::Pixel;
use ff::{codec, frame, Packet};
use ffmpeg_next as ff;
use ffmpeg_next::ffi;

use super::hw::{DeviceNeed, HwDevice, HwKind};
use super::{fferr, init_ffmpeg, Codec};
use crate::quality::Picture;
use crate::{BgraFrame, MediaError, Result};

/// `--decoder`: which decoder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum DecoderChoice {
    /// Software, unless `--hwaccel` asks for hardware (then that, falling back to software).
    #[default]
    Auto,
    /// FFmpeg's software decoder of the codec, never hardware.
    Software,
    /// This FFmpeg decoder (no fallback: it was asked for by name).
    Named(String),
}

impl DecoderChoice {
    pub fn name(&self) -> &str {
        match self {
            DecoderChoice::Auto => "auto",
            DecoderChoice::Software => "software",
            DecoderChoice::Named(n) => n,
        }
    }
}

impl fmt::Display for DecoderChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A decoder name this FFmpeg does not have (as a video decoder of h264, hevc or av1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown decoder {name:?}: not an h264, hevc or av1 decoder of this FFmpeg; allowed: auto, software, {known}")]
pub struct UnknownDecoder {
    pub name: String,
    /// The decoder names that would do, comma-separated.
    pub known: String,
}

/// An `--hwaccel` / `client.hwaccel` name that is not one of [`HwAccel::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown hwaccel {name:?}; allowed: {}", HwAccel::ALL.map(|h| h.name()).join(", "))]
pub struct UnknownHwAccel {
    pub name: String,
}

impl FromStr for DecoderChoice {
    type Err = UnknownDecoder;
    /// `auto`, `software`, or an h264/hevc/av1 decoder this FFmpeg has.
    fn from_str(s: &str) -> Result<Self, UnknownDecoder> {
        match s {
            "auto" => Ok(DecoderChoice::Auto),
            "software" => Ok(DecoderChoice::Software),
            name => {
                init_ffmpeg();
                match ff::decoder::find_by_name(name) {
                    Some(c)
                        if c.medium() == ff::media::Type::Video
                            && crate::codec::codec_of_id(c.id(), false).is_some() =>
                    {
                        Ok(DecoderChoice::Named(name.to_string()))
                    }
                    _ => Err(UnknownDecoder {
                        name: name.to_string(),
                        known: available_decoders()
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    }),
                }
            }
        }
    }
}

/// The codec an FFmpeg decoder decodes, if it is one untether streams.
pub fn decoder_codec(name: &str) -> Option<Codec> {
    init_ffmpeg();
    let c = ff::decoder::find_by_name(name)?;
    if c.medium() != ff::media::Type::Video {
        return None;
    }
    crate::codec::codec_of_id(c.id(), false)
}

/// Every video decoder of this FFmpeg for a codec untether streams, by name.
pub fn available_decoders() -> Vec<(String, Codec)> {
    init_ffmpeg();
    let mut out = Vec::new();
    let mut opaque = std::ptr::null_mut();
    // SAFETY: av_codec_iterate walks FFmpeg's static codec list; names are static C strings.
    unsafe {
        loop {
            let c = ffi::av_codec_iterate(&mut opaque);
            if c.is_null() {
                break;
            }
            if ffi::av_codec_is_decoder(c) == 0
                || (*c).type_ != ffi::AVMediaType::AVMEDIA_TYPE_VIDEO
            {
                continue;
            }
            let name = std::ffi::CStr::from_ptr((*c).name)
                .to_string_lossy()
                .into_owned();
            if let Some(codec) = crate::codec::codec_of_id((*c).id.into(), false) {
                out.push((name, codec));
            }
        }
    }
    out
}

/// `--hwaccel`: the hardware that decodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HwAccel {
    /// None: software.
    #[default]
    None,
    /// Whatever this machine has (V4L2 M2M, VA-API, CUDA, in that order), else software.
    Auto,
    Vaapi,
    Cuda,
    Vdpau,
    Drm,
    /// The SoC's V4L2 memory-to-memory decoder (`h264_v4l2m2m`, `hevc_v4l2m2m`).
    V4l2m2m,
}

impl HwAccel {
    pub const ALL: [HwAccel; 7] = [
        HwAccel::None,
        HwAccel::Auto,
        HwAccel::Vaapi,
        HwAccel::Cuda,
        HwAccel::Vdpau,
        HwAccel::Drm,
        HwAccel::V4l2m2m,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HwAccel::None => "none",
            HwAccel::Auto => "auto",
            HwAccel::Vaapi => "vaapi",
            HwAccel::Cuda => "cuda",
            HwAccel::Vdpau => "vdpau",
            HwAccel::Drm => "drm",
            HwAccel::V4l2m2m => "v4l2m2m",
        }
    }

    /// FFmpeg's device type (not for none, auto and v4l2m2m, which is a decoder of its own).
    fn device(self) -> Option<HwKind> {
        match self {
            HwAccel::Vaapi => Some(HwKind::Vaapi),
            HwAccel::Cuda => Some(HwKind::Cuda),
            HwAccel::Vdpau => Some(HwKind::Vdpau),
            HwAccel::Drm => Some(HwKind::Drm),
            _ => None,
        }
    }
}

impl fmt::Display for HwAccel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HwAccel {
    type Err = UnknownHwAccel;
    fn from_str(s: &str) -> Result<Self, UnknownHwAccel> {
        HwAccel::ALL
            .into_iter()
            .find(|h| h.name() == s)
            .ok_or_else(|| UnknownHwAccel { name: s.into() })
    }
}

/// Decoder settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecoderConfig {
    pub codec: Codec,
    pub decoder: DecoderChoice,
    pub hwaccel: HwAccel,
    /// Slice (h264, hevc) or tile/frame (dav1d) threads.
    pub threads: usize,
    /// Leave hardware pictures on the GPU as DRM PRIME (dma-buf) descriptors for a presenter
    /// that imports them; false: download every picture.
    pub keep_on_gpu: bool,
    /// Take a frame's slices one [`Decoder::decode`] call at a time (`AV_CODEC_FLAG2_CHUNKS`):
    /// each slice is decoded when it is given, and the picture comes out with the call that
    /// gives the slice ending at the bottom of the picture.
    pub chunks: bool,
}

impl DecoderConfig {
    /// The software decoder of `codec`.
    pub fn software(codec: Codec, threads: usize) -> DecoderConfig {
        DecoderConfig {
            codec,
            decoder: DecoderChoice::Software,
            hwaccel: HwAccel::None,
            threads,
            keep_on_gpu: false,
            chunks: false,
        }
    }
}

/// What decodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecoderInfo {
    /// FFmpeg's decoder name.
    pub name: String,
    /// The hardware accelerator and its device, if any.
    pub hwaccel: Option<(HwAccel, String)>,
}

impl DecoderInfo {
    pub fn hardware(&self) -> bool {
        self.hwaccel.is_some()
    }
}

impl fmt::Display for DecoderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hwaccel {
            None => write!(f, "{} (software)", self.name),
            Some((h, dev)) => write!(f, "{} with {h} on {dev}", self.name),
        }
    }
}

/// The decoder.
pub struct Decoder {
    decoder: ff::decoder::Video,
    frame: frame::Video,
    info: DecoderInfo,
    keep_on_gpu: bool,
    /// The hardware device (kept alive with the decoder).
    _device: Option<HwDevice>,
    /// Converts pictures that came out in another layout (NV12 downloads) to I420.
    scaler: Option<(ff::software::scaling::Context, Pixel, u32, u32)>,
}

// SAFETY: owned FFmpeg objects used through &mut self only.
unsafe impl Send for Decoder {}

/// Picks the hardware format `opaque` names, else FFmpeg's default (software).
unsafe extern "C" fn pick_hw_format(
    ctx: *mut ffi::AVCodecContext,
    formats: *const ffi::AVPixelFormat,
) -> ffi::AVPixelFormat {
    let want = (*ctx).opaque as isize as i32;
    let mut p = formats;
    while !p.is_null() && *p != ffi::AVPixelFormat::AV_PIX_FMT_NONE {
        if *p as i32 == want {
            return *p;
        }
        p = p.add(1);
    }
    ffi::avcodec_default_get_format(ctx, formats)
}

impl Decoder {
    /// The software h264 decoder with `threads` slice threads, in low-delay mode.
    pub fn new(threads: usize) -> Result<Decoder> {
        Self::open_exact(&DecoderConfig::software(Codec::H264, threads), "h264", None)
    }

    /// The software h264 decoder taking a frame's slices one call at a time
    /// ([`DecoderConfig::chunks`]).
    pub fn new_chunked(threads: usize) -> Result<Decoder> {
        let cfg = DecoderConfig {
            chunks: true,
            ..DecoderConfig::software(Codec::H264, threads)
        };
        Self::open_exact(&cfg, "h264", None)
    }

    /// Opens the decoder `cfg` asks for. A hardware path that cannot run here falls back to
    /// software (`--decoder auto`), returning the one line that says why; a decoder named with
    /// `--decoder NAME` does not fall back.
    pub fn open(cfg: &DecoderConfig) -> Result<(Decoder, Option<String>)> {
        init_ffmpeg();
        let software = cfg.codec.software_decoder();
        match &cfg.decoder {
            DecoderChoice::Named(name) => {
                let hw = cfg.hwaccel.device();
                Ok((Self::open_exact(cfg, name, hw)?, None))
            }
            DecoderChoice::Software => Ok((Self::open_exact(cfg, software, None)?, None)),
            DecoderChoice::Auto => {
                let tries: Vec<HwAccel> = match cfg.hwaccel {
                    HwAccel::None => vec![],
                    HwAccel::Auto => {
                        let mut t = Vec::new();
                        if DeviceNeed::Video.find().is_ok() && cfg.codec != Codec::Av1 {
                            t.push(HwAccel::V4l2m2m);
                        }
                        if DeviceNeed::Dri.find().is_ok() {
                            t.push(HwAccel::Vaapi);
                        }
                        if DeviceNeed::Nvidia.find().is_ok() {
                            t.push(HwAccel::Cuda);
                        }
                        t
                    }
                    h => vec![h],
                };
                let mut why = Vec::new();
                for h in tries {
                    match Self::open_hw(cfg, h) {
                        Ok(d) => return Ok((d, None)),
                        Err(e) => why.push(format!("{h}: {e}")),
                    }
                }
                let d = Self::open_exact(cfg, software, None)?;
                let note = (!why.is_empty()).then(|| {
                    format!(
                        "hardware decoding unavailable ({}); decoding {} in software with {software}",
                        why.join("; "),
                        cfg.codec
                    )
                });
                Ok((d, note))
            }
        }
    }

    /// One hardware path: the V4L2 M2M decoder, or the software decoder with a device.
    fn open_hw(cfg: &DecoderConfig, h: HwAccel) -> Result<Decoder> {
        if h == HwAccel::V4l2m2m {
            DeviceNeed::Video.find().map_err(MediaError::from)?;
            let name = match cfg.codec {
                Codec::H264 | Codec::H264Rgb => "h264_v4l2m2m",
                Codec::Hevc => "hevc_v4l2m2m",
                Codec::Av1 => {
                    return Err(MediaError::Unavailable(
                        "FFmpeg 5.1 has no AV1 V4L2 decoder".into(),
                    ))
                }
            };
            let mut d = Self::open_exact(cfg, name, None)?;
            d.info.hwaccel = Some((h, DeviceNeed::Video.find().unwrap_or_default()));
            return Ok(d);
        }
        Self::open_exact(cfg, cfg.codec.software_decoder(), h.device())
    }

    /// Opens decoder `name` (with a hardware device of `hw`), no fallback.
    fn open_exact(cfg: &DecoderConfig, name: &str, hw: Option<HwKind>) -> Result<Decoder> {
        init_ffmpeg();
        let ff_codec = ff::decoder::find_by_name(name).ok_or_else(|| {
            MediaError::Unavailable(format!("decoder {name} is not in this FFmpeg build"))
        })?;
        if ff_codec.id() != cfg.codec.id() {
            return Err(MediaError::Unavailable(format!(
                "decoder {name} decodes {:?}; the stream is {}",
                ff_codec.id(),
                cfg.codec
            )));
        }
        let mut ctx = codec::context::Context::new_with_codec(ff_codec);
        ctx.set_threading(ff::threading::Config {
            kind: ff::threading::Type::Slice,
            count: cfg.threads.max(1),
            ..Default::default()
        });
        // Output even pictures whose references were lost: the protocol decides what is shown
        // (an intra-refresh stream is decoded from a sweep start and held until it is clean).
        ctx.set_flags(codec::Flags::LOW_DELAY | codec::Flags::OUTPUT_CORRUPT);
        let mut device = None;
        let mut hwaccel = None;
        if let Some(kind) = hw {
            let pix = hw_format(&ff_codec, kind).ok_or_else(|| {
                MediaError::Unavailable(format!(
                    "decoder {name} has no {} acceleration in this FFmpeg",
                    kind.name()
                ))
            })?;
            let dev = HwDevice::open(kind).map_err(MediaError::from)?;
            hwaccel = Some((accel_of(kind), dev.device.clone()));
            // SAFETY: field writes on the context we own before opening it; the device
            // reference is a new one the context owns; `opaque` carries the wanted format for
            // the get_format callback.
            unsafe {
                let c = ctx.as_mut_ptr();
                (*c).hw_device_ctx = ffi::av_buffer_ref(dev.as_ptr());
                (*c).opaque = pix as i32 as isize as *mut libc::c_void;
                (*c).get_format = Some(pick_hw_format);
                if cfg.keep_on_gpu {
                    // Pictures left on the GPU are held by the presenter and the slot between
                    // decoder and presenter: surfaces beyond the references, so the pool never
                    // runs dry.
                    (*c).extra_hw_frames = 4;
                }
            }
            device = Some(dev);
        }
        // SAFETY: plain field writes before opening.
        unsafe {
            (*ctx.as_mut_ptr()).flags2 |= ffi::AV_CODEC_FLAG2_SHOW_ALL;
            if cfg.chunks {
                (*ctx.as_mut_ptr()).flags2 |= ffi::AV_CODEC_FLAG2_CHUNKS;
            }
        }
        let decoder = ctx
            .decoder()
            .video()
            .map_err(|e| MediaError::ffmpeg(format!("open decoder {name}"), e))?;
        Ok(Decoder {
            decoder,
            frame: frame::Video::empty(),
            info: DecoderInfo {
                name: name.to_string(),
                hwaccel,
            },
            keep_on_gpu: cfg.keep_on_gpu,
            _device: device,
            scaler: None,
        })
    }

    pub fn info(&self) -> &DecoderInfo {
        &self.info
    }

    /// Turns `AV_CODEC_FLAG2_CHUNKS` on or off between calls.
    pub fn set_chunks(&mut self, on: bool) {
        // SAFETY: a plain field write on the context we own; the h264 decoder reads flags2 on
        // every call and keeps no copy of it (no frame threads).
        unsafe {
            let ctx = self.decoder.as_mut_ptr();
            if on {
                (*ctx).flags2 |= ffi::AV_CODEC_FLAG2_CHUNKS;
            } else {
                (*ctx).flags2 &= !ffi::AV_CODEC_FLAG2_CHUNKS;
            }
        }
    }

    /// Turns the h264 decoder's error resilience (`enable_er`: concealment of missing
    /// macroblocks from the reference) on or off between calls.
    pub fn set_error_resilience(&mut self, on: bool) -> Result<()> {
        let name = c"enable_er";
        let value = if on { c"1" } else { c"0" };
        // SAFETY: priv_data is the h264 decoder's own context (an AVClass-enabled struct);
        // av_opt_set validates the option's name and value.
        let rc = unsafe {
            let ctx = self.decoder.as_mut_ptr();
            ffi::av_opt_set((*ctx).priv_data, name.as_ptr(), value.as_ptr(), 0)
        };
        if rc < 0 {
            return Err(MediaError::Other(format!(
                "{} decoder: enable_er: error {rc}",
                self.info.name
            )));
        }
        Ok(())
    }

    /// Decodes one access unit. Its picture comes out at once (Ok(Some)); Ok(None) if the
    /// decoder produced nothing (e.g. parameter sets only); Err for data it rejects.
    pub fn decode(&mut self, access_unit: &[u8]) -> Result<Option<DecodedFrame>> {
        if access_unit.is_empty() {
            return Ok(None);
        }
        let packet = Packet::copy(access_unit);
        self.decoder.send_packet(&packet).map_err(fferr("decode"))?;
        match self.decoder.receive_frame(&mut self.frame) {
            Ok(()) => {
                let f = std::mem::replace(&mut self.frame, frame::Video::empty());
                if f.width() == 0 || f.height() == 0 {
                    return Err(MediaError::Other("decoded an empty picture".into()));
                }
                let f = self.system_memory_picture(f)?;
                Ok(Some(f))
            }
            Err(ff::Error::Other { errno }) if errno == ff::util::error::EAGAIN => Ok(None),
            Err(e) => Err(MediaError::ffmpeg("receive frame", e)),
        }
    }

    /// A hardware picture kept as DRM PRIME (if asked) or downloaded; any layout but I420 and
    /// GBR converted to I420.
    fn system_memory_picture(&mut self, f: frame::Video) -> Result<DecodedFrame> {
        let mut f = f;
        // SAFETY: reading fields of a frame we own.
        let hw = unsafe { !(*f.as_ptr()).hw_frames_ctx.is_null() };
        if hw {
            if self.keep_on_gpu {
                if cuda_nv12(&f) {
                    return Ok(DecodedFrame {
                        frame: f,
                        gpu: Some(GpuPicture::Cuda),
                        hw_source: None,
                    });
                }
                if let Some(prime) = map_drm_prime(&f) {
                    return Ok(DecodedFrame {
                        frame: prime,
                        gpu: Some(GpuPicture::DrmPrime),
                        hw_source: Some(f),
                    });
                }
            }
            f = download(&f)?;
        }
        to_i420(f, &mut self.scaler)
    }
}

/// A picture in system memory as I420 or GBR (`scaler` is kept for the next picture of the
/// same layout and size).
fn to_i420(
    f: frame::Video,
    scaler: &mut Option<(ff::software::scaling::Context, Pixel, u32, u32)>,
) -> Result<DecodedFrame> {
    match f.format() {
        Pixel::YUV420P | Pixel::YUVJ420P | Pixel::GBRP => Ok(DecodedFrame {
            frame: f,
            gpu: None,
            hw_source: None,
        }),
        other => {
            let (w, h) = (f.width(), f.height());
            if !matches!(&*scaler, Some((_, p, sw, sh)) if *p == other && *sw == w && *sh == h) {
                let s = ff::software::scaling::Context::get(
                    other,
                    w,
                    h,
                    Pixel::YUV420P,
                    w,
                    h,
                    ff::software::scaling::Flags::POINT,
                )
                .map_err(|_| {
                    MediaError::Other(format!(
                        "the decoder produced {other:?}; untether handles 4:2:0 and GBR \
                             pictures"
                    ))
                })?;
                *scaler = Some((s, other, w, h));
            }
            let mut out = frame::Video::new(Pixel::YUV420P, w, h);
            if let Some((s, ..)) = scaler.as_mut() {
                s.run(&f, &mut out)
                    .map_err(fferr("convert the decoded picture"))?;
            }
            Ok(DecodedFrame {
                frame: out,
                gpu: None,
                hw_source: None,
            })
        }
    }
}

/// The hardware pixel format decoder `c` produces with a device of `kind`.
fn hw_format(c: &ff::Codec, kind: HwKind) -> Option<ffi::AVPixelFormat> {
    // SAFETY: avcodec_get_hw_config walks the codec's static list until it returns null.
    unsafe {
        for i in 0.. {
            let cfg = ffi::avcodec_get_hw_config(c.as_ptr(), i);
            if cfg.is_null() {
                return None;
            }
            let device_ctx = ffi::AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX as i32;
            if (*cfg).methods & device_ctx != 0 && (*cfg).device_type == kind.av_type() {
                return Some((*cfg).pix_fmt);
            }
        }
    }
    None
}

fn accel_of(kind: HwKind) -> HwAccel {
    match kind {
        HwKind::Vaapi | HwKind::Qsv => HwAccel::Vaapi,
        HwKind::Cuda => HwAccel::Cuda,
        HwKind::Vdpau => HwAccel::Vdpau,
        HwKind::Drm => HwAccel::Drm,
    }
}

/// Downloads a hardware picture: into I420 if the driver can, else its own layout (NV12).
fn download(hw: &frame::Video) -> Result<frame::Video> {
    for want in [Pixel::YUV420P, Pixel::None] {
        let mut sw = frame::Video::empty();
        // SAFETY: the transfer allocates `sw`'s buffers for the format we set (or the device's
        // own when None); both frames are ours.
        let rc = unsafe {
            (*sw.as_mut_ptr()).format = ffi::AVPixelFormat::from(want) as i32;
            ffi::av_hwframe_transfer_data(sw.as_mut_ptr(), hw.as_ptr(), 0)
        };
        if rc >= 0 {
            // SAFETY: copy the frame properties (size, colour) over, as the transfer leaves
            // them out.
            unsafe {
                ffi::av_frame_copy_props(sw.as_mut_ptr(), hw.as_ptr());
            }
            return Ok(sw);
        }
        if want == Pixel::None {
            return Err(MediaError::ffmpeg(
                "download the hardware picture",
                ff::Error::from(rc),
            ));
        }
    }
    Err(MediaError::Other("no download format".into()))
}

/// Maps a hardware picture to DRM PRIME (dma-buf descriptors), if the device can.
fn map_drm_prime(hw: &frame::Video) -> Option<frame::Video> {
    let mut prime = frame::Video::empty();
    // SAFETY: av_hwframe_map fills `prime` (ours) with a mapping of `hw`, which it references.
    let rc = unsafe {
        (*prime.as_mut_ptr()).format = ffi::AVPixelFormat::AV_PIX_FMT_DRM_PRIME as i32;
        if (*hw.as_ptr()).format == ffi::AVPixelFormat::AV_PIX_FMT_DRM_PRIME as i32 {
            ffi::av_frame_ref(prime.as_mut_ptr(), hw.as_ptr())
        } else {
            ffi::av_hwframe_map(
                prime.as_mut_ptr(),
                hw.as_ptr(),
                ffi::AV_HWFRAME_MAP_READ as i32,
            )
        }
    };
    (rc >= 0).then_some(prime)
}

/// Whether a hardware picture is NV12 in CUDA memory (what NVDEC gives for 8-bit 4:2:0).
fn cuda_nv12(f: &frame::Video) -> bool {
    // SAFETY: reading the frame's format and its frames context (FFmpeg's, alive with it).
    unsafe {
        let p = f.as_ptr();
        if (*p).format != ffi::AVPixelFormat::AV_PIX_FMT_CUDA as i32 || (*p).hw_frames_ctx.is_null()
        {
            return false;
        }
        let fc = (*(*p).hw_frames_ctx).data as *const ffi::AVHWFramesContext;
        (*fc).sw_format == ffi::AVPixelFormat::AV_PIX_FMT_NV12
    }
}

/// Where a picture a hardware decoder left on the GPU is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPicture {
    /// DRM PRIME: dma-buf descriptors (VA-API mapped, or the DRM / V4L2 decoders' own).
    DrmPrime,
    /// NV12 in CUDA device memory (NVDEC): `data[0]`, `data[1]` are device pointers.
    Cuda,
}

/// NV12 in CUDA device memory, as the CUDA–GL copy needs it.
#[derive(Clone, Copy, Debug)]
pub struct CudaNv12 {
    /// Device pointers of the Y and the interleaved UV plane, and their pitches in bytes.
    pub planes: [(u64, usize); 2],
    /// FFmpeg's CUDA context (`CUcontext`) and stream (`CUstream`) of the decoder's device.
    pub context: *mut libc::c_void,
    pub stream: *mut libc::c_void,
}

/// A decoded picture: YUV 4:2:0 or planar GBR in FFmpeg's frame (no copy), or a picture left
/// on the GPU ([`DecoderConfig::keep_on_gpu`]).
pub struct DecodedFrame {
    frame: frame::Video,
    gpu: Option<GpuPicture>,
    /// The hardware picture a DRM PRIME mapping was made from (downloaded from when the
    /// presenter cannot import the mapping).
    hw_source: Option<frame::Video>,
}

// SAFETY: the frame is reference counted and owned; nothing else mutates its buffers.
unsafe impl Send for DecodedFrame {}

/// How a picture's YUV samples map to RGB, as the stream says (a GBR picture has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Colorimetry {
    pub matrix: YuvMatrix,
    /// Full range (0–255, "JPEG"); otherwise limited (16–235 luma, 16–240 chroma, "MPEG").
    pub full_range: bool,
}

/// The YUV→RGB matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YuvMatrix {
    Bt601,
    Bt709,
}

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

    /// The stream's colour matrix and range: BT.709 when the stream says so, else BT.601
    /// (what untether's own encoder writes, and the usual reading of "unspecified" at these
    /// sizes); full range for YUVJ pictures or a stream that says so, else limited.
    pub fn colorimetry(&self) -> Colorimetry {
        use ff::util::color::{Range, Space};
        let matrix = match self.frame.color_space() {
            Space::BT709 => YuvMatrix::Bt709,
            _ => YuvMatrix::Bt601,
        };
        let full_range =
            self.frame.format() == Pixel::YUVJ420P || self.frame.color_range() == Range::JPEG;
        Colorimetry { matrix, full_range }
    }

    /// Where the picture is when a hardware decoder left it on the GPU (its planes are then
    /// empty: [`Self::download`] gives them).
    pub fn gpu(&self) -> Option<GpuPicture> {
        self.gpu
    }

    /// The CUDA device pointers of an NVDEC picture left on the GPU.
    pub fn cuda_nv12(&self) -> Option<CudaNv12> {
        if self.gpu != Some(GpuPicture::Cuda) {
            return None;
        }
        // SAFETY: a CUDA frame's data[0..2] are device pointers, linesize their pitches; its
        // device context's hwctx is an AVCUDADeviceContext, whose first two fields are the
        // CUcontext and the CUstream (hwcontext_cuda.h).
        unsafe {
            let p = self.frame.as_ptr();
            let fc = (*(*p).hw_frames_ctx).data as *const ffi::AVHWFramesContext;
            let dc = (*(*fc).device_ref).data as *const ffi::AVHWDeviceContext;
            let cuda = (*dc).hwctx as *const [*mut libc::c_void; 2];
            Some(CudaNv12 {
                planes: [
                    ((*p).data[0] as u64, (*p).linesize[0] as usize),
                    ((*p).data[1] as u64, (*p).linesize[1] as usize),
                ],
                context: (*cuda)[0],
                stream: (*cuda)[1],
            })
        }
    }

    /// The first `rows` rows of the luma plane (where the stamp is) and their stride: the
    /// plane itself in system memory; for an NVDEC picture left on the GPU a copy of just those
    /// rows (a few kilobytes); None for a DRM PRIME one (its layout may be tiled).
    pub fn luma_rows(&self, rows: u32) -> Option<(std::borrow::Cow<'_, [u8]>, usize)> {
        let rows = rows.min(self.height());
        match self.gpu {
            None => {
                let (data, stride) = self.plane(0);
                let n = (stride * rows as usize).min(data.len());
                Some((std::borrow::Cow::Borrowed(&data[..n]), stride))
            }
            Some(GpuPicture::Cuda) => {
                let w = self.width() as usize;
                let out = crate::zero_copy::cuda_gl::read_luma_rows(
                    &self.cuda_nv12()?,
                    w,
                    rows as usize,
                )?;
                Some((std::borrow::Cow::Owned(out), w))
            }
            Some(GpuPicture::DrmPrime) => None,
        }
    }

    /// Another reference to the same picture (no copy): what a presenter holds while the GPU
    /// reads an imported picture.
    pub fn share(&self) -> Result<DecodedFrame> {
        let reference = |f: &frame::Video| -> Result<frame::Video> {
            let mut out = frame::Video::empty();
            // SAFETY: av_frame_ref makes `out` (ours, empty) reference `f`'s buffers.
            let rc = unsafe { ffi::av_frame_ref(out.as_mut_ptr(), f.as_ptr()) };
            if rc < 0 {
                return Err(MediaError::ffmpeg(
                    "reference a picture",
                    ff::Error::from(rc),
                ));
            }
            Ok(out)
        };
        Ok(DecodedFrame {
            frame: reference(&self.frame)?,
            gpu: self.gpu,
            hw_source: self.hw_source.as_ref().map(reference).transpose()?,
        })
    }

    /// The picture in system memory (I420 or GBR): a picture left on the GPU downloaded
    /// (`av_hwframe_transfer_data`, from the decoder's own picture when this is a DRM PRIME
    /// mapping of it), else another reference to it. The software path's fallback.
    pub fn download(&self) -> Result<DecodedFrame> {
        if self.gpu.is_none() {
            return self.share();
        }
        let source = self.hw_source.as_ref().unwrap_or(&self.frame);
        to_i420(download(source)?, &mut None)
    }

    /// A dark grey I420 picture of `width`×`height` (even sides): what a window shows before
    /// the stream's first picture, under the overlay that says what the client waits for.
    pub fn blank(width: u32, height: u32) -> DecodedFrame {
        init_ffmpeg();
        let mut frame = frame::Video::new(Pixel::YUV420P, width & !1, height & !1);
        for (plane, value) in [(0, 40u8), (1, 128), (2, 128)] {
            frame.data_mut(plane).fill(value);
        }
        DecodedFrame {
            frame,
            gpu: None,
            hw_source: None,
        }
    }

    /// A DRM PRIME picture from its frame (format `AV_PIX_FMT_DRM_PRIME`, `data[0]` its
    /// descriptor, `hw_frames_ctx` a DRM frames context to download through): what a V4L2 or
    /// DRM decoder outputs, and how tests make one from memory they own.
    pub fn from_drm_prime(frame: frame::Video) -> Result<DecodedFrame> {
        // SAFETY: reading the fields of a frame we own.
        let ok = unsafe {
            let p = frame.as_ptr();
            (*p).format == ffi::AVPixelFormat::AV_PIX_FMT_DRM_PRIME as i32
                && !(*p).data[0].is_null()
        };
        if !ok {
            return Err(MediaError::Other(
                "not a DRM PRIME picture (format AV_PIX_FMT_DRM_PRIME with a descriptor)".into(),
            ));
        }
        Ok(DecodedFrame {
            frame,
            gpu: Some(GpuPicture::DrmPrime),
            hw_source: None,
        })
    }

    /// The DRM PRIME descriptor of a picture left on the GPU ([`DecoderConfig::keep_on_gpu`]):
    /// the dma-bufs a presenter imports (EGL, KMS). Its planes are then empty.
    pub fn drm_prime(&self) -> Option<&ffi::AVDRMFrameDescriptor> {
        if self.gpu != Some(GpuPicture::DrmPrime) {
            return None;
        }
        // SAFETY: a DRM PRIME frame's data[0] is its AVDRMFrameDescriptor, alive with it.
        unsafe {
            let d = (*self.frame.as_ptr()).data[0] as *const ffi::AVDRMFrameDescriptor;
            d.as_ref()
        }
    }

    /// Plane `i` (0..3) with its stride; exactly `rows × stride` bytes (empty for a picture
    /// left on the GPU).
    pub fn plane(&self, i: usize) -> (&[u8], usize) {
        if self.gpu.is_some() {
            return (&[], 0);
        }
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
        if self.gpu.is_some() {
            return self.download()?.to_bgra();
        }
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
    use super::*;

    #[test]
    fn names_parse_and_errors_list_what_is_allowed() {
        assert_eq!("auto".parse::<DecoderChoice>(), Ok(DecoderChoice::Auto));
        assert_eq!(
            "software".parse::<DecoderChoice>(),
            Ok(DecoderChoice::Software)
        );
        assert_eq!(
            "libdav1d".parse::<DecoderChoice>(),
            Ok(DecoderChoice::Named("libdav1d".into()))
        );
        let e = "magic".parse::<DecoderChoice>().unwrap_err().to_string();
        assert!(e.contains("software") && e.contains("hevc"), "{e}");
        for h in HwAccel::ALL {
            assert_eq!(h.name().parse::<HwAccel>(), Ok(h));
        }
        assert!("opencl"
            .parse::<HwAccel>()
            .unwrap_err()
            .to_string()
            .contains("vaapi"));
    }

    #[test]
    fn name_errors_are_typed() {
        let e = "magic".parse::<DecoderChoice>().unwrap_err();
        assert_eq!(e.name, "magic");
        assert!(e.known.split(", ").any(|n| n == "h264"), "{}", e.known);
        assert_eq!(
            "opencl".parse::<HwAccel>(),
            Err(UnknownHwAccel {
                name: "opencl".into()
            })
        );
        assert_eq!(
            "opencl".parse::<HwAccel>().unwrap_err().to_string(),
            "unknown hwaccel \"opencl\"; allowed: none, auto, vaapi, cuda, vdpau, drm, v4l2m2m"
        );
        assert_eq!(
            "gdr".parse::<crate::codec::Refresh>(),
            Err(crate::codec::UnknownRefresh { name: "gdr".into() })
        );
        assert_eq!(
            "gdr"
                .parse::<crate::codec::Refresh>()
                .unwrap_err()
                .to_string(),
            "unknown refresh \"gdr\"; allowed: idr, intra"
        );
    }

    #[test]
    fn hwaccel_vaapi_without_a_gpu_falls_back_to_software_with_one_line() {
        let cfg = DecoderConfig {
            codec: Codec::H264,
            decoder: DecoderChoice::Auto,
            hwaccel: HwAccel::Vaapi,
            threads: 1,
            keep_on_gpu: false,
            chunks: false,
        };
        let (d, note) = Decoder::open(&cfg).unwrap();
        if DeviceNeed::Dri.find().is_err() {
            assert!(!d.info().hardware());
            let note = note.expect("a line saying why");
            assert!(
                note.contains("vaapi") && note.contains("/dev/dri") && note.contains("software"),
                "{note}"
            );
            assert!(!note.contains('\n'));
        }
        // Named, it does not fall back.
        let named = DecoderConfig {
            decoder: DecoderChoice::Named("h264".into()),
            ..cfg
        };
        if DeviceNeed::Dri.find().is_err() {
            let e = Decoder::open(&named).err().unwrap().to_string();
            assert!(e.contains("/dev/dri"), "{e}");
        }
    }
}
