//! Colour conversion BGRA (BGR0) → YUV 4:2:0, the step between a rendered frame and the H.264
//! encoder.
//!
//! One colour matrix for the whole pipeline: **BT.601, limited ("TV") range**. It is what
//! FFmpeg's swscale and `format` filter assume by default (so SSIM/PSNR compare like with like),
//! what the encoder signals in the H.264 VUI, and what the SDL presenter is told to use.
//!
//! Two converters, chosen by [`Conversion`]: the SIMD one from `yuvutils-rs` (AVX2 here) and
//! FFmpeg's swscale; `Rgb` means no conversion at all (libx264rgb encodes BGR as is). Both write
//! straight into the planes the encoder reads, so there is no copy after conversion.

use std::fmt;
use std::str::FromStr;

use ffmpeg_next::format::Pixel;
use ffmpeg_next::software::scaling;
use yuvutils_rs::{
    BufferStoreMut, YuvConversionMode, YuvPlanarImageMut, YuvRange, YuvStandardMatrix,
};

use crate::{BgraFrame, MediaError, Result};

/// How BGRA frames become what the encoder takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// yuvutils-rs, SIMD (AVX2/SSE4.1 on x86-64, NEON on ARM).
    Simd,
    /// FFmpeg's swscale.
    Swscale,
    /// None: the RGB encoder (libx264rgb) takes BGR as is.
    Rgb,
}

impl Conversion {
    pub const ALL: [Conversion; 3] = [Conversion::Simd, Conversion::Swscale, Conversion::Rgb];

    pub fn name(&self) -> &'static str {
        match self {
            Conversion::Simd => "simd",
            Conversion::Swscale => "swscale",
            Conversion::Rgb => "rgb",
        }
    }
}

impl fmt::Display for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown name for a [`Conversion`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown conversion {0:?}; allowed: simd, swscale, rgb")]
pub struct UnknownConversion(pub String);

impl FromStr for Conversion {
    type Err = UnknownConversion;
    fn from_str(s: &str) -> Result<Self, UnknownConversion> {
        Conversion::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownConversion(s.to_string()))
    }
}

/// Three 8-bit planes to write I420 into: Y (width × height), U and V (half size each).
pub struct I420Mut<'a> {
    pub width: u32,
    pub height: u32,
    pub y: (&'a mut [u8], usize),
    pub u: (&'a mut [u8], usize),
    pub v: (&'a mut [u8], usize),
}

/// A BGRA → I420 converter with its state (swscale's context), reused frame after frame.
pub struct Converter {
    kind: Conversion,
    width: u32,
    height: u32,
    sws: Option<scaling::Context>,
}

// SAFETY: the swscale context is only used through &mut self, by one thread at a time.
unsafe impl Send for Converter {}

impl Converter {
    /// A converter for frames of one size. `Rgb` is not a conversion and is refused.
    pub fn new(kind: Conversion, width: u32, height: u32) -> Result<Converter> {
        crate::frame::check_size(width, height)?;
        let sws = match kind {
            Conversion::Simd => None,
            Conversion::Swscale => {
                crate::codec::init_ffmpeg();
                Some(
                    scaling::Context::get(
                        Pixel::BGRZ,
                        width,
                        height,
                        Pixel::YUV420P,
                        width,
                        height,
                        scaling::Flags::BILINEAR,
                    )
                    .map_err(|e| MediaError::ffmpeg("swscale context", e))?,
                )
            }
            Conversion::Rgb => {
                return Err(MediaError::Conversion(
                    "the rgb path has no BGRA→YUV conversion (libx264rgb takes BGR as is)".into(),
                ))
            }
        };
        Ok(Converter {
            kind,
            width,
            height,
            sws,
        })
    }

    pub fn kind(&self) -> Conversion {
        self.kind
    }

    /// Converts `src` into `dst`'s planes.
    pub fn convert(&mut self, src: &BgraFrame, dst: I420Mut<'_>) -> Result<()> {
        if (src.width, src.height) != (self.width, self.height) {
            return Err(MediaError::InvalidSize {
                width: src.width,
                height: src.height,
                reason: format!(
                    "this converter converts {}x{} frames",
                    self.width, self.height
                ),
            });
        }
        self.convert_raw(&src.data, src.stride, dst)
    }

    /// Converts BGRA rows of `stride` bytes (a frame of this converter's size) into `dst`.
    pub fn convert_raw(&mut self, src: &[u8], src_stride: usize, dst: I420Mut<'_>) -> Result<()> {
        if src_stride < self.width as usize * 4
            || src.len() < (self.height as usize - 1) * src_stride + self.width as usize * 4
        {
            return Err(MediaError::Conversion(format!(
                "BGRA source of {} bytes, stride {src_stride}, is too small for {}x{}",
                src.len(),
                self.width,
                self.height
            )));
        }
        if (dst.width, dst.height) != (self.width, self.height) {
            return Err(MediaError::InvalidSize {
                width: dst.width,
                height: dst.height,
                reason: format!(
                    "this converter converts {}x{} frames",
                    self.width, self.height
                ),
            });
        }
        match self.kind {
            Conversion::Simd => {
                let mut img = YuvPlanarImageMut {
                    y_plane: BufferStoreMut::Borrowed(dst.y.0),
                    y_stride: dst.y.1 as u32,
                    u_plane: BufferStoreMut::Borrowed(dst.u.0),
                    u_stride: dst.u.1 as u32,
                    v_plane: BufferStoreMut::Borrowed(dst.v.0),
                    v_stride: dst.v.1 as u32,
                    width: self.width,
                    height: self.height,
                };
                yuvutils_rs::bgra_to_yuv420(
                    &mut img,
                    src,
                    src_stride as u32,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                    YuvConversionMode::Balanced,
                )
                .map_err(|e| MediaError::Conversion(format!("yuvutils: {e}")))
            }
            Conversion::Swscale => {
                let Some(sws) = self.sws.as_mut() else {
                    return Err(MediaError::Conversion("swscale context missing".into()));
                };
                let h = self.height as i32;
                let src_data = [
                    src.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null(),
                ];
                let src_strides = [src_stride as i32, 0, 0, 0];
                let dst_data = [
                    dst.y.0.as_mut_ptr(),
                    dst.u.0.as_mut_ptr(),
                    dst.v.0.as_mut_ptr(),
                    std::ptr::null_mut(),
                ];
                let dst_stride = [dst.y.1 as i32, dst.u.1 as i32, dst.v.1 as i32, 0];
                // Check the destination planes are large enough before handing raw pointers over.
                let (w2, h2) = (
                    self.width.div_ceil(2) as usize,
                    self.height.div_ceil(2) as usize,
                );
                let need = |stride: usize, row: usize, rows: usize| (rows - 1) * stride + row;
                if dst.y.0.len() < need(dst.y.1, self.width as usize, self.height as usize)
                    || dst.u.0.len() < need(dst.u.1, w2, h2)
                    || dst.v.0.len() < need(dst.v.1, w2, h2)
                    || src.len() < need(src_stride, self.width as usize * 4, self.height as usize)
                {
                    return Err(MediaError::Conversion(
                        "planes too small for the frame size".into(),
                    ));
                }
                // SAFETY: the context was made for exactly these sizes and formats; every plane
                // was checked above to hold `height` rows of its stride.
                let rc = unsafe {
                    ffmpeg_next::ffi::sws_scale(
                        sws.as_mut_ptr(),
                        src_data.as_ptr(),
                        src_strides.as_ptr(),
                        0,
                        h,
                        dst_data.as_ptr(),
                        dst_stride.as_ptr(),
                    )
                };
                if rc < 0 {
                    return Err(MediaError::ffmpeg(
                        "sws_scale",
                        ffmpeg_next::Error::from(rc),
                    ));
                }
                Ok(())
            }
            Conversion::Rgb => Err(MediaError::Conversion(
                "no conversion on the rgb path".into(),
            )),
        }
    }
}

/// An owned I420 picture (for tests, benches and the pipe sink).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct I420Frame {
    pub width: u32,
    pub height: u32,
    pub y: Vec<u8>,
    pub u: Vec<u8>,
    pub v: Vec<u8>,
}

impl I420Frame {
    pub fn new(width: u32, height: u32) -> Self {
        let (w2, h2) = (width.div_ceil(2) as usize, height.div_ceil(2) as usize);
        I420Frame {
            width,
            height,
            y: vec![0; width as usize * height as usize],
            u: vec![128; w2 * h2],
            v: vec![128; w2 * h2],
        }
    }

    pub fn planes_mut(&mut self) -> I420Mut<'_> {
        let (w, w2) = (self.width as usize, self.width.div_ceil(2) as usize);
        I420Mut {
            width: self.width,
            height: self.height,
            y: (&mut self.y, w),
            u: (&mut self.u, w2),
            v: (&mut self.v, w2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::{Scene, SceneConfig};

    #[test]
    fn names_round_trip_and_errors_list_allowed_values() {
        for c in Conversion::ALL {
            assert_eq!(c.name().parse::<Conversion>().unwrap(), c);
        }
        let e = "magic".parse::<Conversion>().unwrap_err().to_string();
        assert!(
            e.contains("simd") && e.contains("swscale") && e.contains("rgb"),
            "{e}"
        );
    }

    #[test]
    fn simd_and_swscale_agree_on_a_detailed_frame() {
        let (w, h) = (640, 360);
        let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
        let mut f = BgraFrame::new(w, h).unwrap();
        scene.render(1.3, &mut f);
        let mut a = I420Frame::new(w, h);
        let mut b = I420Frame::new(w, h);
        Converter::new(Conversion::Simd, w, h)
            .unwrap()
            .convert(&f, a.planes_mut())
            .unwrap();
        Converter::new(Conversion::Swscale, w, h)
            .unwrap()
            .convert(&f, b.planes_mut())
            .unwrap();
        let maxdiff = |x: &[u8], y: &[u8]| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (*p as i32 - *q as i32).abs())
                .max()
                .unwrap()
        };
        assert!(
            maxdiff(&a.y, &b.y) <= 2,
            "luma differs by {}",
            maxdiff(&a.y, &b.y)
        );
        // swscale's bilinear chroma siting differs slightly from a 2x2 box average on edges.
        let mean = |x: &[u8], y: &[u8]| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (*p as f64 - *q as f64).abs())
                .sum::<f64>()
                / x.len() as f64
        };
        assert!(
            mean(&a.u, &b.u) < 1.5 && mean(&a.v, &b.v) < 1.5,
            "chroma mean diff {} {}",
            mean(&a.u, &b.u),
            mean(&a.v, &b.v)
        );
        // Limited range: white is 235, black 16.
        let mut white = BgraFrame::new(16, 16).unwrap_or_else(|_| unreachable!());
        white.data.fill(255);
        let mut out = I420Frame::new(16, 16);
        Converter::new(Conversion::Simd, 16, 16)
            .unwrap()
            .convert(&white, out.planes_mut())
            .unwrap();
        assert!(
            out.y.iter().all(|&v| (234..=236).contains(&v)),
            "{:?}",
            &out.y[..4]
        );
    }

    #[test]
    fn rgb_is_not_a_converter_and_sizes_are_checked() {
        assert!(Converter::new(Conversion::Rgb, 64, 64).is_err());
        let mut c = Converter::new(Conversion::Simd, 64, 64).unwrap();
        let f = BgraFrame::new(32, 32).unwrap();
        let mut out = I420Frame::new(64, 64);
        assert!(c.convert(&f, out.planes_mut()).is_err());
    }
}
