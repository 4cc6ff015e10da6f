//! Picture quality: SSIM and PSNR between the frame the host captured and the frame the
//! client decoded, computed by FFmpeg's own `ssim` and `psnr` filters (libavfilter), the
//! reference implementations, not by hand-written code.
//!
//! Runs off the frame path: callers hand it frames that left the pipeline.

use ffmpeg_next::format::Pixel;
use ffmpeg_next::{filter, frame};

use crate::{BgraFrame, MediaError, Result};

/// Which colour space the comparison happens in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareSpace {
    /// YUV 4:2:0 (BT.601 limited range), what a 4:2:0 stream carries: luma and chroma.
    Yuv420,
    /// Planar G, B, R at full resolution, for the RGB (libx264rgb) stream.
    Gbr,
}

/// An 8-bit picture to compare, borrowed: packed BGR0 or planar with strides.
#[derive(Clone, Copy, Debug)]
pub enum Picture<'a> {
    Bgra(&'a BgraFrame),
    /// Y, U, V planes (U and V at half resolution) with their strides.
    I420 {
        width: u32,
        height: u32,
        planes: [(&'a [u8], usize); 3],
    },
    /// FFmpeg's GBRP plane order: G, B, R, full resolution, with strides.
    Gbrp {
        width: u32,
        height: u32,
        planes: [(&'a [u8], usize); 3],
    },
}

impl Picture<'_> {
    fn size(&self) -> (u32, u32) {
        match *self {
            Picture::Bgra(f) => (f.width, f.height),
            Picture::I420 { width, height, .. } | Picture::Gbrp { width, height, .. } => {
                (width, height)
            }
        }
    }

    fn pixel(&self) -> Pixel {
        match self {
            Picture::Bgra(_) => Pixel::BGRZ,
            Picture::I420 { .. } => Pixel::YUV420P,
            Picture::Gbrp { .. } => Pixel::GBRP,
        }
    }

    /// Copies into a fresh AVFrame (the buffer source takes ownership of what it is given).
    fn to_av_frame(self) -> Result<frame::Video> {
        let (w, h) = self.size();
        let mut out = frame::Video::new(self.pixel(), w, h);
        let copy_plane = |out: &mut frame::Video,
                          i: usize,
                          src: &[u8],
                          stride: usize,
                          row_bytes: usize,
                          rows: usize|
         -> Result<()> {
            let dst_stride = out.stride(i);
            let dst = out.data_mut(i);
            for y in 0..rows {
                let s = src.get(y * stride..y * stride + row_bytes).ok_or_else(|| {
                    MediaError::Other(format!("picture plane {i} is shorter than {w}x{h} needs"))
                })?;
                dst[y * dst_stride..y * dst_stride + row_bytes].copy_from_slice(s);
            }
            Ok(())
        };
        let (wu, hu) = (w as usize, h as usize);
        match self {
            Picture::Bgra(f) => copy_plane(&mut out, 0, &f.data, f.stride, wu * 4, hu)?,
            Picture::I420 { planes, .. } => {
                copy_plane(&mut out, 0, planes[0].0, planes[0].1, wu, hu)?;
                for (i, p) in planes.iter().enumerate().skip(1) {
                    copy_plane(&mut out, i, p.0, p.1, wu.div_ceil(2), hu.div_ceil(2))?;
                }
            }
            Picture::Gbrp { planes, .. } => {
                for (i, p) in planes.iter().enumerate() {
                    copy_plane(&mut out, i, p.0, p.1, wu, hu)?;
                }
            }
        }
        Ok(out)
    }
}

/// SSIM (0..1) and PSNR (dB; capped at 100 for identical pictures) of one pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quality {
    /// SSIM of the first plane (luma, or G for the RGB space).
    pub ssim_y: f64,
    /// FFmpeg's combined SSIM over all planes.
    pub ssim_all: f64,
    pub psnr_y_db: f64,
    /// FFmpeg's combined PSNR over all planes.
    pub psnr_avg_db: f64,
}

/// PSNR reported for identical pictures (FFmpeg says "inf").
pub const PSNR_IDENTICAL_DB: f64 = 100.0;

/// Compares pairs of pictures of one size with FFmpeg's ssim and psnr filters.
pub struct QualityMeter {
    width: u32,
    height: u32,
    space: CompareSpace,
    graph: Option<(Pixel, Pixel, filter::Graph)>,
}

impl QualityMeter {
    pub fn new(width: u32, height: u32, space: CompareSpace) -> Result<QualityMeter> {
        crate::frame::check_size(width, height)?;
        crate::codec::init_ffmpeg();
        Ok(QualityMeter {
            width,
            height,
            space,
            graph: None,
        })
    }

    fn build(&self, reference: Pixel, distorted: Pixel) -> Result<filter::Graph> {
        let fferr = |what: &str| {
            let what = what.to_string();
            move |e| MediaError::ffmpeg(format!("quality filter graph: {what}"), e)
        };
        let mut graph = filter::Graph::new();
        let buffer = filter::find("buffer")
            .ok_or_else(|| MediaError::Other("libavfilter lacks the buffer filter".into()))?;
        let sink = filter::find("buffersink")
            .ok_or_else(|| MediaError::Other("libavfilter lacks buffersink".into()))?;
        let args = |p: Pixel| {
            let id: ffmpeg_next::ffi::AVPixelFormat = p.into();
            format!(
                "video_size={}x{}:pix_fmt={}:time_base=1/60:pixel_aspect=1/1",
                self.width, self.height, id as i32
            )
        };
        graph
            .add(&buffer, "ref", &args(reference))
            .map_err(fferr("ref source"))?;
        graph
            .add(&buffer, "dist", &args(distorted))
            .map_err(fferr("dist source"))?;
        graph.add(&sink, "out", "").map_err(fferr("sink"))?;
        let fmt = match self.space {
            CompareSpace::Yuv420 => "yuv420p",
            CompareSpace::Gbr => "gbrp",
        };
        // ssim passes its first input through with lavfi.ssim.* metadata; psnr adds lavfi.psnr.*.
        let spec = format!(
            "[dist]format={fmt}[d];[ref]format={fmt},split[r1][r2];[d][r1]ssim[ds];[ds][r2]psnr[out]"
        );
        graph
            .output("ref", 0)
            .and_then(|p| p.output("dist", 0))
            .and_then(|p| p.input("out", 0))
            .and_then(|p| p.parse(&spec))
            .map_err(fferr("parse"))?;
        graph.validate().map_err(fferr("configure"))?;
        Ok(graph)
    }

    /// SSIM and PSNR of `distorted` against `reference`.
    pub fn compare(&mut self, reference: &Picture<'_>, distorted: &Picture<'_>) -> Result<Quality> {
        for p in [reference, distorted] {
            if p.size() != (self.width, self.height) {
                let (w, h) = p.size();
                return Err(MediaError::InvalidSize {
                    width: w,
                    height: h,
                    reason: format!(
                        "the quality meter compares {}x{} pictures",
                        self.width, self.height
                    ),
                });
            }
        }
        let (rp, dp) = (reference.pixel(), distorted.pixel());
        if !matches!(&self.graph, Some((r, d, _)) if *r == rp && *d == dp) {
            self.graph = Some((rp, dp, self.build(rp, dp)?));
        }
        let Some((_, _, graph)) = self.graph.as_mut() else {
            return Err(MediaError::Other("quality filter graph missing".into()));
        };
        let fferr = |what: &'static str| move |e| MediaError::ffmpeg(format!("quality: {what}"), e);
        let mut r = reference.to_av_frame()?;
        let mut d = distorted.to_av_frame()?;
        r.set_pts(Some(0));
        d.set_pts(Some(0));
        let mut src = graph
            .get("ref")
            .ok_or_else(|| MediaError::Other("no ref source".into()))?;
        src.source().add(&r).map_err(fferr("feed reference"))?;
        let mut src = graph
            .get("dist")
            .ok_or_else(|| MediaError::Other("no dist source".into()))?;
        src.source().add(&d).map_err(fferr("feed distorted"))?;
        let mut out = frame::Video::empty();
        let mut sink = graph
            .get("out")
            .ok_or_else(|| MediaError::Other("no sink".into()))?;
        let got = sink.sink().frame(&mut out);
        // The filters keep per-stream state (frame sync); a fresh graph per pair keeps pairs
        // independent at a cost far below the comparison itself.
        self.graph = None;
        got.map_err(fferr("read result"))?;
        let md = out.metadata();
        let num = |key: &str| -> Result<f64> {
            let v = md
                .get(key)
                .ok_or_else(|| MediaError::Other(format!("FFmpeg gave no {key}")))?;
            if v.starts_with("inf") {
                return Ok(PSNR_IDENTICAL_DB);
            }
            v.trim()
                .parse::<f64>()
                .map_err(|_| MediaError::Other(format!("FFmpeg's {key} = {v:?} is not a number")))
        };
        let first = match self.space {
            CompareSpace::Yuv420 => ("lavfi.ssim.Y", "lavfi.psnr.psnr.y"),
            CompareSpace::Gbr => ("lavfi.ssim.G", "lavfi.psnr.psnr.g"),
        };
        Ok(Quality {
            ssim_y: num(first.0)?,
            ssim_all: num("lavfi.ssim.All")?,
            psnr_y_db: num(first.1)?.min(PSNR_IDENTICAL_DB),
            psnr_avg_db: num("lavfi.psnr.psnr_avg")?.min(PSNR_IDENTICAL_DB),
        })
    }
}
