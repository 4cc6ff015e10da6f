//! libx264 through its own C API (`x264-sys`, against the system's libx264, X264_BUILD 164 in
//! Debian 12), emitting each **slice** the moment x264 finishes it.
//!
//! FFmpeg's libx264 wrapper hands back whole access units only. x264 itself has a per-NAL
//! callback (`param.nalu_process`): with sliced threads, each slice thread calls it as soon as
//! its slice is written, while `x264_encoder_encode` is still running on the caller's thread.
//! [`SliceEncoder::encode`] hands every finished slice to a sink at once ([`EncodedSlice`]:
//! its index in picture order, the frame's slice count, its Annex B bytes — the first slice of
//! a keyframe carries the SPS/PPS in front — and when it was done), so the host can send slice
//! 0 while x264 still works on the others.
//!
//! Slices come from threads in any order; their index comes from the slice's first macroblock
//! (`i_first_mb`) looked up in the encoder's slice layout, which x264 fixes from its parameters
//! alone (no `slice-max-size`): [`SliceEncoder::new`] learns it by encoding one frame with a
//! throwaway encoder of the same parameters, so no formula of x264's internals is copied here.
//!
//! Settings match the FFmpeg path's x264 family (`codec/family.rs`): `tune=zerolatency`, no
//! B-frames, sliced threads, a one-frame VBV (max rate = bitrate, buffer = bitrate / fps), an
//! infinite GOP without scene cuts, IDR keyframes only when asked, each with its SPS/PPS,
//! BT.601 limited range in the VUI.

use std::ffi::CString;
use std::sync::Mutex;
use std::time::Instant;

use x264_sys as x;

use crate::codec::InputPicture;
use crate::convert::{Conversion, Converter, I420Mut};
use crate::{MediaError, Result};

/// The most slices a frame may have (the wire's slice count is a byte; more than 16 only adds
/// header overhead at these sizes).
pub const MAX_SLICES: usize = 16;

/// Settings of a [`SliceEncoder`].
#[derive(Clone, Debug, PartialEq)]
pub struct SliceEncoderConfig {
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub bitrate_kbps: u32,
    /// x264 preset (ultrafast … placebo).
    pub preset: String,
    /// x264 slice threads (at most `slices` are used).
    pub threads: usize,
    /// Slices per frame, 1–[`MAX_SLICES`].
    pub slices: usize,
    /// BGRA → I420 converter for BGRA input (`Simd` or `Swscale`; `Rgb` is refused).
    pub conversion: Conversion,
    /// More x264 options, `key=value:key=value` as x264's command line (`x264_param_parse`),
    /// applied after ours (like FFmpeg's `x264-params`); an unknown key or bad value is an
    /// error naming it.
    pub x264_params: String,
}

/// One slice, handed to the sink as soon as x264 finished it.
#[derive(Debug)]
pub struct EncodedSlice {
    /// Position in picture order (top to bottom), `0..count`.
    pub index: u8,
    /// Slices of this frame.
    pub count: u8,
    pub keyframe: bool,
    /// Annex B: the slice NAL, preceded by the SPS/PPS (and SEI) for slice 0 of a keyframe.
    /// The buffer x264 wrote it into, handed over as is.
    pub data: Vec<u8>,
    /// When x264 finished it.
    pub done: Instant,
}

/// What one [`SliceEncoder::encode`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceFrameInfo {
    pub keyframe: bool,
    /// Bytes of all slices.
    pub bytes: usize,
    /// Slices handed to the sink.
    pub slices: usize,
    /// BGRA → I420, µs (0 for I420 input).
    pub convert_us: u64,
    /// x264, µs: from the call into x264 to its return (the last slice).
    pub encode_us: u64,
    /// From the call into x264 to the first slice handed over, µs.
    pub first_slice_us: u64,
    /// From the call into x264 to the last slice handed over, µs.
    pub last_slice_us: u64,
}

/// What the NAL callback needs, shared with x264's slice threads for one encode call.
struct CallbackCtx<'a> {
    layout: &'a [i32],
    sink: &'a (dyn Fn(EncodedSlice) + Sync),
    /// SPS/PPS/SEI of this frame (written before any slice), for slice 0.
    headers: Mutex<Vec<u8>>,
    state: Mutex<CallbackState>,
}

#[derive(Default)]
struct CallbackState {
    bytes: usize,
    slices: usize,
    keyframe: bool,
    first: Option<Instant>,
    last: Option<Instant>,
    /// A slice whose first macroblock is not in the layout (never expected).
    unknown: usize,
}

/// x264's `nalu_process`: encodes the NAL into Annex B and hands slices to the sink.
unsafe extern "C" fn nalu_process(
    h: *mut x::x264_t,
    nal: *mut x::x264_nal_t,
    opaque: *mut libc::c_void,
) {
    if nal.is_null() || opaque.is_null() {
        return;
    }
    // SAFETY: `opaque` is the CallbackCtx that `encode` set on the picture and keeps alive until
    // x264_encoder_encode returns, which is after every callback of the frame.
    let ctx = unsafe { &*(opaque as *const CallbackCtx<'_>) };
    // SAFETY: x264 passes a valid NAL of this frame.
    let n = unsafe { &mut *nal };
    let size = (n.i_payload.max(0) as usize) * 3 / 2 + 5 + 64;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` has the size x264.h asks for; x264_nal_encode writes Annex B into it and
    // points the NAL at it.
    unsafe { x::x264_nal_encode(h, buf.as_mut_ptr(), nal) };
    let len = (n.i_payload.max(0) as usize).min(buf.len());
    buf.truncate(len);
    let t = n.i_type as u32;
    if t != x::nal_unit_type_e_NAL_SLICE && t != x::nal_unit_type_e_NAL_SLICE_IDR {
        ctx.headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(&buf);
        return;
    }
    let keyframe = t == x::nal_unit_type_e_NAL_SLICE_IDR;
    let Ok(index) = ctx.layout.binary_search(&n.i_first_mb) else {
        ctx.state.lock().unwrap_or_else(|p| p.into_inner()).unknown += 1;
        return;
    };
    let data = if index == 0 {
        let mut h = std::mem::take(&mut *ctx.headers.lock().unwrap_or_else(|p| p.into_inner()));
        h.extend_from_slice(&buf);
        h
    } else {
        buf
    };
    let done = Instant::now();
    {
        let mut s = ctx.state.lock().unwrap_or_else(|p| p.into_inner());
        s.bytes += data.len();
        s.slices += 1;
        s.keyframe |= keyframe;
        s.first.get_or_insert(done);
        s.last = Some(s.last.map_or(done, |l| l.max(done)));
    }
    (ctx.sink)(EncodedSlice {
        index: index as u8,
        count: ctx.layout.len() as u8,
        keyframe,
        data,
        done,
    });
}

/// An open x264 encoder.
struct Handle(*mut x::x264_t);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: an encoder x264_encoder_open returned, closed once.
        unsafe { x::x264_encoder_close(self.0) };
    }
}

/// x264 through its C API, each slice handed over as soon as it is done.
pub struct SliceEncoder {
    cfg: SliceEncoderConfig,
    param: x::x264_param_t,
    enc: Handle,
    /// x264's input picture (its own planes).
    pic: x::x264_picture_t,
    /// The first macroblock of each slice, in picture order.
    layout: Vec<i32>,
    converter: Option<Converter>,
    pts: i64,
}

// SAFETY: the x264 handle and picture are owned by this value and used through &mut self only.
unsafe impl Send for SliceEncoder {}

impl Drop for SliceEncoder {
    fn drop(&mut self) {
        // SAFETY: the picture x264_picture_alloc filled, freed once.
        unsafe { x::x264_picture_clean(&mut self.pic) };
    }
}

fn open_param(cfg: &SliceEncoderConfig) -> Result<x::x264_param_t> {
    let bad = |m: String| MediaError::Other(format!("x264: {m}"));
    crate::frame::check_size(cfg.width, cfg.height)?;
    if cfg.fps == 0 || cfg.bitrate_kbps == 0 {
        return Err(bad("fps and bitrate must be non-zero".into()));
    }
    if !(1..=MAX_SLICES).contains(&cfg.slices) {
        return Err(bad(format!(
            "{} slices: allowed 1 to {MAX_SLICES}",
            cfg.slices
        )));
    }
    let preset = CString::new(cfg.preset.as_str()).map_err(|_| bad("bad preset".into()))?;
    let tune = CString::new("zerolatency").map_err(|_| bad("bad tune".into()))?;
    let mut p = std::mem::MaybeUninit::<x::x264_param_t>::uninit();
    // SAFETY: x264_param_default_preset fills the whole struct (or fails).
    let rc =
        unsafe { x::x264_param_default_preset(p.as_mut_ptr(), preset.as_ptr(), tune.as_ptr()) };
    if rc < 0 {
        return Err(bad(format!("unknown preset {:?}", cfg.preset)));
    }
    // SAFETY: initialised by x264_param_default_preset.
    let mut p = unsafe { p.assume_init() };
    p.i_width = cfg.width as i32;
    p.i_height = cfg.height as i32;
    p.i_csp = x::X264_CSP_I420 as i32;
    p.i_fps_num = cfg.fps;
    p.i_fps_den = 1;
    p.i_timebase_num = 1;
    p.i_timebase_den = cfg.fps;
    p.b_vfr_input = 0;
    p.i_bframe = 0;
    p.i_keyint_max = x::X264_KEYINT_MAX_INFINITE as i32;
    p.i_scenecut_threshold = 0;
    p.b_repeat_headers = 1;
    p.b_annexb = 1;
    p.i_log_level = -1;
    // Threads that divide the slices evenly: each thread writes the same number of slices.
    let mut threads = cfg.threads.clamp(1, cfg.slices);
    while !cfg.slices.is_multiple_of(threads) {
        threads -= 1;
    }
    p.i_threads = threads as i32;
    p.b_sliced_threads = 1;
    if threads > 1 && cfg.slices > threads {
        // Each thread's band of macroblock rows is cut into slices of at most this many
        // macroblocks (sized on the taller band, so every band gives the same number).
        let (cols, rows) = (
            cfg.width.div_ceil(16) as usize,
            cfg.height.div_ceil(16) as usize,
        );
        let band = rows.div_ceil(threads) * cols;
        p.i_slice_max_mbs = band.div_ceil(cfg.slices / threads) as i32;
    } else {
        p.i_slice_count = cfg.slices as i32;
    }
    p.rc.i_rc_method = x::X264_RC_ABR as i32;
    set_rate(&mut p, cfg.bitrate_kbps, cfg.fps);
    p.vui.i_colorprim = 6;
    p.vui.i_transfer = 6;
    p.vui.i_colmatrix = 6;
    p.vui.b_fullrange = 0;
    for kv in cfg.x264_params.split(':').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, "1"));
        let (ck, cv) = (
            CString::new(k).map_err(|_| bad(format!("bad option {kv:?}")))?,
            CString::new(v).map_err(|_| bad(format!("bad option {kv:?}")))?,
        );
        // SAFETY: a parameter struct x264 filled, NUL-terminated name and value.
        let rc = unsafe { x::x264_param_parse(&mut p, ck.as_ptr(), cv.as_ptr()) };
        if rc != 0 {
            return Err(bad(format!("option {kv:?}: unknown name or bad value")));
        }
    }
    p.nalu_process = Some(nalu_process);
    Ok(p)
}

fn set_rate(p: &mut x::x264_param_t, kbps: u32, fps: u32) {
    p.rc.i_bitrate = kbps as i32;
    p.rc.i_vbv_max_bitrate = kbps as i32;
    p.rc.i_vbv_buffer_size = (kbps / fps.max(1)).max(1) as i32;
}

fn open(param: &mut x::x264_param_t) -> Result<Handle> {
    // SAFETY: a valid parameter struct; x264 copies what it needs.
    let h = unsafe { x::x264_encoder_open(param) };
    if h.is_null() {
        return Err(MediaError::Other(
            "x264_encoder_open failed (invalid parameters)".into(),
        ));
    }
    Ok(Handle(h))
}

impl SliceEncoder {
    pub fn new(cfg: SliceEncoderConfig) -> Result<SliceEncoder> {
        let mut param = open_param(&cfg)?;
        let converter =
            match cfg.conversion {
                Conversion::Rgb => return Err(MediaError::Other(
                    "x264 slices: the rgb path (libx264rgb) is not supported; use simd or swscale"
                        .into(),
                )),
                c => Some(Converter::new(c, cfg.width, cfg.height)?),
            };
        let mut pic = std::mem::MaybeUninit::<x::x264_picture_t>::uninit();
        // SAFETY: x264_picture_alloc initialises the picture and allocates its planes.
        let rc = unsafe {
            x::x264_picture_alloc(
                pic.as_mut_ptr(),
                x::X264_CSP_I420 as i32,
                cfg.width as i32,
                cfg.height as i32,
            )
        };
        if rc < 0 {
            return Err(MediaError::Other("x264_picture_alloc failed".into()));
        }
        // SAFETY: initialised by x264_picture_alloc.
        let pic = unsafe { pic.assume_init() };
        let mut me = SliceEncoder {
            layout: Vec::new(),
            enc: open(&mut param)?,
            param,
            pic,
            converter,
            pts: 0,
            cfg,
        };
        me.layout = me.learn_layout()?;
        Ok(me)
    }

    /// The slices' first macroblocks, from one frame of a throwaway encoder with the same
    /// parameters (x264 fixes the layout from them).
    fn learn_layout(&mut self) -> Result<Vec<i32>> {
        let mut param = self.param;
        param.nalu_process = None;
        let enc = open(&mut param)?;
        let mut out = std::mem::MaybeUninit::<x::x264_picture_t>::uninit();
        let mut nals: *mut x::x264_nal_t = std::ptr::null_mut();
        let mut n = 0;
        self.pic.i_pts = 0;
        self.pic.i_type = x::X264_TYPE_IDR as i32;
        self.pic.opaque = std::ptr::null_mut();
        // SAFETY: valid encoder, picture (its planes hold whatever they hold: any content
        // gives the same layout) and out-pointers.
        let rc = unsafe {
            x::x264_encoder_encode(enc.0, &mut nals, &mut n, &mut self.pic, out.as_mut_ptr())
        };
        if rc < 0 || nals.is_null() {
            return Err(MediaError::Other("x264: the layout frame failed".into()));
        }
        // SAFETY: x264 returned `n` NALs at `nals`, valid until the next call on `enc`.
        let nals = unsafe { std::slice::from_raw_parts(nals, n.max(0) as usize) };
        let mut layout: Vec<i32> = nals
            .iter()
            .filter(|nal| {
                let t = nal.i_type as u32;
                t == x::nal_unit_type_e_NAL_SLICE || t == x::nal_unit_type_e_NAL_SLICE_IDR
            })
            .map(|nal| nal.i_first_mb)
            .collect();
        layout.sort_unstable();
        layout.dedup();
        if layout.is_empty() || layout.len() > MAX_SLICES || layout[0] != 0 {
            return Err(MediaError::Other(format!(
                "x264: unexpected slice layout {layout:?}"
            )));
        }
        Ok(layout)
    }

    pub fn config(&self) -> &SliceEncoderConfig {
        &self.cfg
    }

    /// Slices per frame (x264's layout: `slices` as asked, or close to it when more slices
    /// than threads do not divide the picture evenly).
    pub fn slice_count(&self) -> usize {
        self.layout.len()
    }

    /// The first macroblock of each slice, top to bottom (macroblocks count in rows of
    /// `width / 16`).
    pub fn layout(&self) -> &[i32] {
        &self.layout
    }

    /// Changes the target (and VBV) bitrate from the next frame on, without a keyframe.
    pub fn set_bitrate(&mut self, kbps: u32) -> Result<()> {
        if kbps == 0 {
            return Err(MediaError::Other("bitrate must be non-zero".into()));
        }
        set_rate(&mut self.param, kbps, self.cfg.fps);
        // SAFETY: valid encoder and parameters; x264 applies the rate control fields.
        let rc = unsafe { x::x264_encoder_reconfig(self.enc.0, &mut self.param) };
        if rc < 0 {
            return Err(MediaError::Other("x264_encoder_reconfig failed".into()));
        }
        self.cfg.bitrate_kbps = kbps;
        Ok(())
    }

    /// Encodes one picture (`force_keyframe`: an IDR), handing each slice to `sink` as soon as
    /// it is done — from x264's slice threads, possibly out of picture order — before this
    /// returns.
    pub fn encode(
        &mut self,
        src: &InputPicture<'_>,
        force_keyframe: bool,
        sink: &(dyn Fn(EncodedSlice) + Sync),
    ) -> Result<SliceFrameInfo> {
        src.check()?;
        let (w, h) = src.size();
        if (w, h) != (self.cfg.width, self.cfg.height) {
            return Err(MediaError::InvalidSize {
                width: w,
                height: h,
                reason: format!("the encoder takes {}x{}", self.cfg.width, self.cfg.height),
            });
        }
        let t0 = Instant::now();
        let img = self.pic.img;
        let rows = [h as usize, h.div_ceil(2) as usize, h.div_ceil(2) as usize];
        // SAFETY: x264_picture_alloc allocated each plane as stride × rows bytes.
        let plane = |i: usize| unsafe {
            std::slice::from_raw_parts_mut(img.plane[i], img.i_stride[i] as usize * rows[i])
        };
        let (y, u, v) = (plane(0), plane(1), plane(2));
        let strides = [
            img.i_stride[0] as usize,
            img.i_stride[1] as usize,
            img.i_stride[2] as usize,
        ];
        match *src {
            InputPicture::DmaBuf(_) => {
                return Err(crate::codec::encoder::no_dma_buf_input("libx264 (slices)"))
            }
            InputPicture::Bgra { data, stride, .. } => {
                let conv = self
                    .converter
                    .as_mut()
                    .ok_or_else(|| MediaError::Other("no converter".into()))?;
                conv.convert_raw(
                    data,
                    stride,
                    I420Mut {
                        width: w,
                        height: h,
                        y: (y, strides[0]),
                        u: (u, strides[1]),
                        v: (v, strides[2]),
                    },
                )?;
            }
            InputPicture::I420 { planes, .. } => {
                let widths = [w as usize, w.div_ceil(2) as usize, w.div_ceil(2) as usize];
                for (i, dst) in [y, u, v].into_iter().enumerate() {
                    let (s, ss) = planes[i];
                    for r in 0..rows[i] {
                        dst[r * strides[i]..r * strides[i] + widths[i]]
                            .copy_from_slice(&s[r * ss..r * ss + widths[i]]);
                    }
                }
            }
        }
        let t1 = Instant::now();
        let ctx = CallbackCtx {
            layout: &self.layout,
            sink,
            headers: Mutex::new(Vec::new()),
            state: Mutex::new(CallbackState::default()),
        };
        self.pic.i_pts = self.pts;
        self.pts += 1;
        self.pic.i_type = if force_keyframe {
            x::X264_TYPE_IDR as i32
        } else {
            x::X264_TYPE_AUTO as i32
        };
        self.pic.opaque = &ctx as *const CallbackCtx<'_> as *mut libc::c_void;
        let mut out = std::mem::MaybeUninit::<x::x264_picture_t>::uninit();
        let mut nals: *mut x::x264_nal_t = std::ptr::null_mut();
        let mut n = 0;
        // SAFETY: valid encoder, picture and out-pointers; the callback context outlives the
        // call (x264 calls back only during it: sliced threads, no frame threads).
        let rc = unsafe {
            x::x264_encoder_encode(
                self.enc.0,
                &mut nals,
                &mut n,
                &mut self.pic,
                out.as_mut_ptr(),
            )
        };
        self.pic.opaque = std::ptr::null_mut();
        let t2 = Instant::now();
        if rc < 0 {
            return Err(MediaError::Other("x264_encoder_encode failed".into()));
        }
        let s = ctx.state.into_inner().unwrap_or_else(|p| p.into_inner());
        if s.unknown > 0 || s.slices != self.layout.len() {
            return Err(MediaError::Other(format!(
                "x264 gave {} slices ({} outside the layout {:?})",
                s.slices, s.unknown, self.layout
            )));
        }
        Ok(SliceFrameInfo {
            keyframe: s.keyframe,
            bytes: s.bytes,
            slices: s.slices,
            convert_us: (t1 - t0).as_micros() as u64,
            encode_us: (t2 - t1).as_micros() as u64,
            first_slice_us: s.first.map_or(0, |f| (f - t1).as_micros() as u64),
            last_slice_us: s.last.map_or(0, |f| (f - t1).as_micros() as u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Decoder;
    use crate::scene::{Scene, SceneConfig};
    use crate::stamp::{self, Stamp};
    use crate::BgraFrame;

    fn cfg(w: u32, h: u32, slices: usize, threads: usize) -> SliceEncoderConfig {
        SliceEncoderConfig {
            width: w,
            height: h,
            fps: 60,
            bitrate_kbps: 10_000,
            preset: "ultrafast".into(),
            threads,
            slices,
            conversion: Conversion::Simd,
            x264_params: String::new(),
        }
    }

    /// A slice's index, keyframe flag and bytes.
    type SliceBytes = (u8, bool, Vec<u8>);

    /// Encodes `n` stamped frames of the scene; returns each frame's slices (index order) and
    /// the encode infos.
    fn encode_frames(c: SliceEncoderConfig, n: u32) -> (Vec<Vec<SliceBytes>>, Vec<SliceFrameInfo>) {
        let (w, h, want) = (c.width, c.height, c.slices);
        let mut enc = SliceEncoder::new(c).unwrap();
        assert_eq!(enc.slice_count(), want);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        let (mut frames, mut infos) = (Vec::new(), Vec::new());
        for i in 0..n {
            scene.render(i as f64 / 60.0, &mut f);
            stamp::write_bgra(
                &mut f,
                &Stamp {
                    frame_number: 100 + i,
                    capture_us: 1_000 + i as u64,
                    input_seq: 0,
                },
            );
            let got = Mutex::new(Vec::new());
            let info = enc
                .encode(
                    &InputPicture::Bgra {
                        width: w,
                        height: h,
                        data: &f.data,
                        stride: f.stride,
                    },
                    i == 0,
                    &|s: EncodedSlice| {
                        got.lock()
                            .unwrap()
                            .push((s.index, s.count, s.keyframe, s.data))
                    },
                )
                .unwrap();
            let mut got = got.into_inner().unwrap();
            got.sort_by_key(|s| s.0);
            let count = enc.slice_count();
            assert_eq!(got.len(), count, "frame {i}");
            for (k, s) in got.iter().enumerate() {
                assert_eq!((s.0 as usize, s.1 as usize), (k, count), "frame {i}");
                assert_eq!(&s.3[..4], &[0, 0, 0, 1], "Annex B");
            }
            frames.push(got.into_iter().map(|s| (s.0, s.2, s.3)).collect());
            infos.push(info);
        }
        (frames, infos)
    }

    #[test]
    fn every_slice_arrives_once_in_its_place_and_the_frame_decodes_whole() {
        for (slices, threads) in [(1, 1), (2, 2), (4, 2), (8, 2)] {
            let (frames, infos) = encode_frames(cfg(640, 360, slices, threads), 6);
            let mut dec = Decoder::new(1).unwrap();
            for (i, (slices_of, info)) in frames.iter().zip(&infos).enumerate() {
                assert_eq!(info.keyframe, i == 0);
                assert!(slices_of.iter().all(|s| s.1 == (i == 0)));
                // The keyframe's first slice carries the SPS.
                if i == 0 {
                    let d = &slices_of[0].2;
                    assert!(d
                        .windows(5)
                        .any(|w| w[..4] == [0, 0, 0, 1] && w[4] & 0x1f == 7));
                }
                let au: Vec<u8> = slices_of.iter().flat_map(|s| s.2.clone()).collect();
                assert_eq!(au.len(), info.bytes);
                let pic = dec.decode(&au).unwrap().expect("a picture");
                let (p, s) = pic.luma();
                assert_eq!(
                    stamp::read_plane(p, s, 640, 360).map(|s| s.frame_number),
                    Some(100 + i as u32),
                    "{slices} slices, frame {i}"
                );
            }
        }
    }

    #[test]
    fn slices_fed_one_at_a_time_decode_into_the_picture_at_the_last() {
        let (frames, _) = encode_frames(cfg(640, 360, 4, 2), 5);
        let mut dec = Decoder::new_chunked(1).unwrap();
        for (i, slices_of) in frames.iter().enumerate() {
            for (k, (_, _, data)) in slices_of.iter().enumerate() {
                let out = dec.decode(data).unwrap();
                if k + 1 < slices_of.len() {
                    assert!(out.is_none(), "frame {i}: a picture after slice {k}");
                } else {
                    let pic = out.expect("the picture with the last slice");
                    let (p, s) = pic.luma();
                    assert_eq!(
                        stamp::read_plane(p, s, 640, 360).map(|s| s.frame_number),
                        Some(100 + i as u32)
                    );
                }
            }
        }
    }

    #[test]
    fn the_first_slice_is_out_before_the_encoder_returns() {
        let (_, infos) = encode_frames(cfg(1280, 720, 4, 2), 10);
        // Timing is load-dependent: check only the order of events, never a speed.
        for info in &infos {
            assert!(info.first_slice_us <= info.encode_us, "{info:?}");
            assert_eq!(info.slices, 4);
        }
        let mut first: Vec<u64> = infos[1..].iter().map(|i| i.first_slice_us).collect();
        let mut all: Vec<u64> = infos[1..].iter().map(|i| i.encode_us).collect();
        first.sort_unstable();
        all.sort_unstable();
        eprintln!(
            "720p, 4 slices, 2 threads: first slice out after {} µs, the last (x264 returns) \
             after {} µs (medians of 9 P-frames)",
            first[4], all[4]
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let e = SliceEncoder::new(cfg(640, 360, 0, 2))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("slices"), "{e}");
        let e = SliceEncoder::new(cfg(640, 360, 17, 2))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("16"), "{e}");
        let e = SliceEncoder::new(SliceEncoderConfig {
            preset: "warp".into(),
            ..cfg(640, 360, 2, 2)
        })
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("warp"), "{e}");
        let e = SliceEncoder::new(SliceEncoderConfig {
            x264_params: "keyint=30:no-such-option=1".into(),
            ..cfg(640, 360, 2, 2)
        })
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("no-such-option"), "{e}");
        assert!(SliceEncoder::new(SliceEncoderConfig {
            x264_params: "keyint=30:min-keyint=30:intra-refresh".into(),
            ..cfg(640, 360, 2, 2)
        })
        .is_ok());
    }
}
