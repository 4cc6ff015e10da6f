//! libsvtav1 through SVT-AV1's own API (a C shim, `csrc/svt.c`, built against the installed
//! header): FFmpeg 5.1's libsvtav1 wrapper asks SVT-AV1 for a packet only when the next frame
//! goes in, so every AV1 frame would wait a frame interval inside the encoder, and the wait
//! grows for good after any frame that takes longer than an interval. Here a frame's packet is
//! fetched as soon as SVT-AV1 has it (polled, bounded). SVT-AV1 1.4 itself releases a frame
//! only when the next one has arrived, even in its low-delay mode (measured: frame N comes out
//! after frame N + 1 went in, however long one waits), so each call returns the previous
//! picture's frame ([`EncoderInfo::delay_frames`] = 1): AV1 costs one frame interval more
//! than H.264 and HEVC. The settings are the family table's ([`Family::SvtAv1`]).

use std::ffi::CString;
use std::time::{Duration, Instant};

use super::encoder::{EncodedFrame, EncoderBackend, EncoderConfig, EncoderInfo, InputPicture};
use super::family::{Family, Settings};
use super::{Codec, Refresh};
use crate::convert::{Converter, I420Frame};
use crate::{MediaError, Result};

#[repr(C)]
struct UtSvt {
    _private: [u8; 0],
}

extern "C" {
    fn ut_svt_new() -> *mut UtSvt;
    #[allow(clippy::too_many_arguments)]
    fn ut_svt_configure(
        s: *mut UtSvt,
        width: u32,
        height: u32,
        fps: u32,
        preset: libc::c_int,
        bps: u32,
        threads: u32,
        intra_period: i32,
        buffer_ms: i64,
    ) -> libc::c_int;
    fn ut_svt_parse(
        s: *mut UtSvt,
        key: *const libc::c_char,
        value: *const libc::c_char,
    ) -> libc::c_int;
    fn ut_svt_start(s: *mut UtSvt) -> libc::c_int;
    #[allow(clippy::too_many_arguments)]
    fn ut_svt_send(
        s: *mut UtSvt,
        y: *const u8,
        u: *const u8,
        v: *const u8,
        ys: u32,
        us: u32,
        vs: u32,
        pts: i64,
    ) -> libc::c_int;
    fn ut_svt_poll(
        s: *mut UtSvt,
        data: *mut *const u8,
        len: *mut u32,
        pts: *mut i64,
        key: *mut libc::c_int,
    ) -> libc::c_int;
    fn ut_svt_free(s: *mut UtSvt);
    fn ut_svt_version() -> *const libc::c_char;
}

/// SVT-AV1's version string.
pub fn version() -> String {
    // SAFETY: a static C string from the library.
    unsafe {
        let p = ut_svt_version();
        if p.is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// How long SVT-AV1 may take to hand back a frame.
const PACKET_WAIT: Duration = Duration::from_secs(2);

/// libsvtav1, driven directly.
pub struct SvtEncoder {
    cfg: EncoderConfig,
    info: EncoderInfo,
    svt: *mut UtSvt,
    converter: Option<Converter>,
    yuv: I420Frame,
    pts: i64,
    /// (picture, when it went in, its conversion time µs) of pictures inside the encoder.
    inside: std::collections::VecDeque<(i64, Instant, u64)>,
}

// SAFETY: the SVT handle is owned by this value and used through &mut self only.
unsafe impl Send for SvtEncoder {}

impl Drop for SvtEncoder {
    fn drop(&mut self) {
        // SAFETY: our handle, freed once.
        unsafe { ut_svt_free(self.svt) };
    }
}

fn svt_err(what: &str, rc: libc::c_int) -> MediaError {
    MediaError::Other(format!("SVT-AV1: {what} failed (error 0x{:x})", rc as u32))
}

impl SvtEncoder {
    pub fn open(cfg: EncoderConfig) -> Result<SvtEncoder> {
        crate::frame::check_size(cfg.width, cfg.height)?;
        if cfg.fps == 0 || cfg.bitrate_kbps == 0 {
            return Err(MediaError::Other(
                "encoder: fps and bitrate must be non-zero".into(),
            ));
        }
        if cfg.refresh == Refresh::Intra {
            return Err(MediaError::Unavailable(super::encoder::no_intra_refresh(
                "libsvtav1",
            )));
        }
        let s: Settings = Family::SvtAv1.settings(&cfg, Codec::Av1, cfg.input);
        let preset = s
            .options
            .iter()
            .find(|(k, _)| *k == "preset")
            .and_then(|(_, v)| v.parse::<i32>().ok())
            .unwrap_or(12);
        let bps = cfg.bitrate_kbps.saturating_mul(1000);
        // At least 21 ms: SVT-AV1 wants its start and optimal levels (20 ms, its minimum) below it.
        let buffer_ms = (s.buffer_bits * 1000 / bps.max(1) as i64).max(21);
        // SAFETY: a new handle, freed by Drop (or here on failure).
        let svt = unsafe { ut_svt_new() };
        if svt.is_null() {
            return Err(MediaError::Other(
                "SVT-AV1: cannot create an encoder".into(),
            ));
        }
        let enc = SvtEncoder {
            info: EncoderInfo {
                name: "libsvtav1".into(),
                codec: Codec::Av1,
                family: Family::SvtAv1,
                hardware: false,
                device: None,
                keyframes_on_demand: false,
                live_bitrate: false,
                refresh: cfg.refresh,
                refresh_period: cfg.refresh_period.max(2),
                delay_frames: 1,
                bgra_input: false,
            },
            converter: match cfg.conversion {
                crate::convert::Conversion::Rgb => None,
                c => Some(Converter::new(c, cfg.width, cfg.height)?),
            },
            yuv: I420Frame::new(cfg.width, cfg.height),
            cfg,
            svt,
            pts: 0,
            inside: std::collections::VecDeque::new(),
        };
        let c = &enc.cfg;
        // SAFETY: calls on our live handle with plain values and valid C strings.
        unsafe {
            let rc = ut_svt_configure(
                svt,
                c.width,
                c.height,
                c.fps,
                preset,
                bps,
                c.threads.max(1) as u32,
                s.gop_size.max(1) - 1,
                buffer_ms,
            );
            if rc != 0 {
                return Err(svt_err("configure", rc));
            }
            let mut params = s.params.join(":");
            if !c.extra_params.is_empty() {
                params.push(':');
                params.push_str(&c.extra_params);
            }
            for kv in params.split(':').filter(|p| !p.is_empty()) {
                let (k, v) = kv.split_once('=').unwrap_or((kv, "1"));
                let (Ok(k), Ok(v)) = (CString::new(k), CString::new(v)) else {
                    return Err(MediaError::Other(format!("SVT-AV1: bad parameter {kv:?}")));
                };
                let rc = ut_svt_parse(svt, k.as_ptr(), v.as_ptr());
                if rc != 0 {
                    return Err(MediaError::Other(format!(
                        "SVT-AV1: parameter {kv:?} refused (error 0x{:x})",
                        rc as u32
                    )));
                }
            }
            let rc = ut_svt_start(svt);
            if rc != 0 {
                return Err(svt_err("start (settings refused)", rc));
            }
        }
        Ok(enc)
    }
}

impl EncoderBackend for SvtEncoder {
    fn info(&self) -> &EncoderInfo {
        &self.info
    }

    fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    fn set_bitrate(&mut self, _kbps: u32) -> Result<bool> {
        Ok(false)
    }

    /// BGRA is converted into this encoder's I420 buffer, I420 is read in place; SVT-AV1
    /// copies the picture in `send`. Returns the previous picture's frame (None for the first
    /// picture). Keyframes come every `refresh_period` frames (SVT-AV1 1.4 forces none in
    /// low-delay mode), so `force_keyframe` is not honoured.
    fn encode_picture(
        &mut self,
        src: &InputPicture<'_>,
        _force_keyframe: bool,
    ) -> Result<Option<EncodedFrame>> {
        src.check()?;
        let (w, h) = (self.cfg.width, self.cfg.height);
        if src.size() != (w, h) {
            return Err(MediaError::InvalidSize {
                width: src.size().0,
                height: src.size().1,
                reason: format!("the encoder takes {w}x{h}"),
            });
        }
        let t0 = Instant::now();
        let planes: [(*const u8, usize); 3] = match *src {
            InputPicture::DmaBuf(_) => return Err(super::encoder::no_dma_buf_input("libsvtav1")),
            InputPicture::I420 { planes, .. } => [
                (planes[0].0.as_ptr(), planes[0].1),
                (planes[1].0.as_ptr(), planes[1].1),
                (planes[2].0.as_ptr(), planes[2].1),
            ],
            InputPicture::Bgra { data, stride, .. } => {
                let conv = self.converter.as_mut().ok_or_else(|| {
                    MediaError::Conversion("libsvtav1 takes YUV: use simd or swscale".into())
                })?;
                conv.convert_raw(data, stride, self.yuv.planes_mut())?;
                let w2 = w.div_ceil(2) as usize;
                [
                    (self.yuv.y.as_ptr(), w as usize),
                    (self.yuv.u.as_ptr(), w2),
                    (self.yuv.v.as_ptr(), w2),
                ]
            }
        };
        let t1 = Instant::now();
        let pts = self.pts;
        self.pts += 1;
        // SAFETY: the planes hold every row (checked above, or our own buffer); SVT-AV1
        // copies them during the call.
        let rc = unsafe {
            ut_svt_send(
                self.svt,
                planes[0].0,
                planes[1].0,
                planes[2].0,
                planes[0].1 as u32,
                planes[1].1 as u32,
                planes[2].1 as u32,
                pts,
            )
        };
        if rc != 0 {
            return Err(svt_err("send", rc));
        }
        self.inside
            .push_back((pts, t1, (t1 - t0).as_micros() as u64));
        // The oldest picture inside is due once `delay_frames` newer ones went in.
        let due = self.inside.len() > self.info.delay_frames as usize;
        let deadline = Instant::now() + PACKET_WAIT;
        loop {
            let (mut data, mut len, mut out_pts, mut key) = (std::ptr::null(), 0u32, 0i64, 0);
            // SAFETY: out-parameters on our stack; the packet stays valid until the next poll.
            let got = unsafe { ut_svt_poll(self.svt, &mut data, &mut len, &mut out_pts, &mut key) };
            match got {
                1 => {
                    let Some(pos) = self.inside.iter().position(|(p, ..)| *p == out_pts) else {
                        log::warn!("SVT-AV1 returned a frame it was not given ({out_pts})");
                        continue;
                    };
                    let (_, sent, convert_us) = self.inside.remove(pos).unwrap_or((0, t1, 0));
                    // SAFETY: SVT-AV1's packet buffer of `len` bytes, copied before the next
                    // poll releases it.
                    let bytes = unsafe { std::slice::from_raw_parts(data, len as usize) }.to_vec();
                    return Ok(Some(EncodedFrame {
                        input: out_pts.max(0) as u64,
                        data: bytes,
                        keyframe: key != 0,
                        refresh_start: false,
                        convert_us,
                        encode_us: sent.elapsed().as_micros() as u64,
                    }));
                }
                0 if !due => return Ok(None),
                0 if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(50)),
                0 => {
                    return Err(MediaError::Other(
                        "SVT-AV1 held a frame back for 2 s".into(),
                    ))
                }
                e => return Err(svt_err("get packet", e)),
            }
        }
    }
}
