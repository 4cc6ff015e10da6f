//! The FFmpeg backend of [`EncoderBackend`]: any video encoder FFmpeg has, opened by name
//! with its family's low-latency [`Settings`] (the table in [`super::family`]).
//!
//! BGRA pictures are converted straight into the planes the encoder reads (4:2:0), uploaded to
//! the GPU once (VA-API, Quick Sync: NV12), or handed over as they are (libx264rgb, NVENC: the
//! GPU converts); I420 pictures are read in place. Encoders that hand packets back on their
//! own threads (the hardware ones) are waited for, bounded.

use std::time::{Duration, Instant};

use ff::format::Pixel;
use ff::{codec, frame, picture, Dictionary, Packet};
use ffmpeg_next as ff;
use ffmpeg_next::ffi;

use super::bitstream;
use super::dma_buf::{DmaBufPicture, VaapiDmaBufImport};
use super::encoder::no_dma_buf_input;
use super::encoder::{
    no_intra_refresh, EncodedFrame, EncoderBackend, EncoderConfig, EncoderInfo, InputPicture,
};
use super::family::{Family, Settings, Traits};
use super::hw::{HwDevice, HwFrames, HwKind};
use super::{fferr, init_ffmpeg, Codec, Refresh};
use crate::convert::{Conversion, Converter, I420Mut};
use crate::{MediaError, Result};

/// How pictures reach an FFmpeg encoder.
enum Feed {
    /// 4:2:0 planes in `input`: BGRA converted into them, I420 borrowed in place.
    Yuv420 { converter: Option<Converter> },
    /// BGR0 as is (libx264rgb; NVENC on BGRA, converting on the GPU): BGRA borrowed.
    Bgr,
    /// NV12 in `input` (converted), uploaded to the device's frames once per picture; DMA-BUF
    /// pictures (VA-API only) mapped and converted on the GPU instead.
    Upload { frames: HwFrames, device: HwDevice },
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
    /// DMA-BUF pictures into the VA-API encoder's surfaces (made when asked for, or at the
    /// first such picture).
    dma_buf: Option<VaapiDmaBufImport>,
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
        let codec =
            crate::codec::codec_of_id(ff_codec.id(), name == "libx264rgb").ok_or_else(|| {
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
            Some(kind) => Some(HwDevice::open(kind).map_err(MediaError::from)?),
            None => None,
        };
        let frames = match &device {
            Some(d) => Some(HwFrames::new(d, cfg.width, cfg.height).map_err(MediaError::from)?),
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
                    device: device.ok_or_else(|| MediaError::Other("no device".into()))?,
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
            dma_buf: None,
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
            (_, InputPicture::DmaBuf(_)) => Err(no_dma_buf_input(&self.info.name)),
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
        InputPicture::DmaBuf(_) => Err(MediaError::Conversion(
            "a DMA-BUF picture is converted on the GPU, not to NV12 in memory".into(),
        )),
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
        let kind = if force_keyframe && self.traits.keyframes_on_demand {
            picture::Type::I
        } else {
            picture::Type::None
        };
        if let InputPicture::DmaBuf(p) = src {
            return self.encode_dma_buf(p, kind, t0);
        }
        let borrowed = self.fill_input(src)?;
        let t1 = Instant::now();
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
        self.collect(pts, t0, t1)
    }

    /// Sets up the DMA-BUF import: a VA-API encoder only.
    fn dma_buf_input(&mut self, fourcc: u32) -> Result<()> {
        self.dma_buf_import(fourcc).map(|_| ())
    }
}

impl FfmpegEncoder {
    /// The VA-API DMA-BUF import for `fourcc` pictures of the encoder's size, made on the
    /// encoder's device (its surfaces must be the encoder's display's) when first asked for.
    fn dma_buf_import(&mut self, fourcc: u32) -> Result<&mut VaapiDmaBufImport> {
        let (w, h, fps) = (self.cfg.width, self.cfg.height, self.cfg.fps);
        let device = match &self.feed {
            Feed::Upload { device, .. } if device.kind() == HwKind::Vaapi => device,
            _ => return Err(no_dma_buf_input(&self.info.name)),
        };
        let stale = self
            .dma_buf
            .as_ref()
            .is_some_and(|i| i.format() != (fourcc, w, h));
        if stale || self.dma_buf.is_none() {
            self.dma_buf = Some(VaapiDmaBufImport::on(device, w, h, fourcc, fps)?);
        }
        self.dma_buf
            .as_mut()
            .ok_or_else(|| MediaError::Other("no DMA-BUF import".into()))
    }

    /// A DMA-BUF picture: mapped to a VA surface and converted to NV12 on the GPU
    /// ([`VaapiDmaBufImport`]), that surface encoded; no CPU copy. `convert_us` is the map
    /// and the conversion's submission.
    fn encode_dma_buf(
        &mut self,
        p: &DmaBufPicture<'_>,
        kind: picture::Type,
        t0: Instant,
    ) -> Result<Option<EncodedFrame>> {
        let name = self.info.name.clone();
        let mut surface = self.dma_buf_import(p.fourcc)?.convert(p)?;
        let t1 = Instant::now();
        let pts = self.pts;
        self.pts += 1;
        surface.set_pts(Some(pts));
        surface.set_kind(kind);
        self.encoder
            .send_frame(&surface)
            .map_err(|e| MediaError::ffmpeg(format!("{name} encode (DMA-BUF)"), e))?;
        self.collect(pts, t0, t1)
    }

    /// The packet of the frame just sent, as an [`EncodedFrame`] (parameter sets in front
    /// where a decoder may start).
    fn collect(&mut self, pts: i64, t0: Instant, t1: Instant) -> Result<Option<EncodedFrame>> {
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
            && self.since_key.is_multiple_of(self.info.refresh_period);
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
