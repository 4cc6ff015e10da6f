//! Scaling a picture to the stream's size (a client asked for a smaller one than the source
//! gives): BGRA or I420 in, I420 out, through swscale (bilinear).

use ffmpeg_next::format::Pixel;
use ffmpeg_next::software::scaling;

use crate::codec::InputPicture;
use crate::convert::I420Frame;
use crate::{MediaError, Result};

/// Scales pictures of one size and format to one target size; made again when the source
/// changes.
pub struct Scaler {
    from: (u32, u32, Pixel),
    out: I420Frame,
    sws: scaling::Context,
}

// SAFETY: the swscale context is only used through &mut self, by one thread at a time.
unsafe impl Send for Scaler {}

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Scaler({}x{} {:?} → {}x{})",
            self.from.0, self.from.1, self.from.2, self.out.width, self.out.height
        )
    }
}

/// The size and format of a picture in memory (None: a DMA-BUF picture, which the CPU does
/// not read).
fn source(p: &InputPicture<'_>) -> Option<(u32, u32, Pixel)> {
    match p {
        InputPicture::Bgra { width, height, .. } => Some((*width, *height, Pixel::BGRZ)),
        InputPicture::I420 { width, height, .. } => Some((*width, *height, Pixel::YUV420P)),
        InputPicture::DmaBuf(_) => None,
    }
}

fn not_in_memory() -> MediaError {
    MediaError::Conversion(
        "a DMA-BUF picture stays on the GPU: the scaler takes pictures in system memory".into(),
    )
}

impl Scaler {
    /// A scaler from `picture`'s size and format to `width`×`height`.
    pub fn new(picture: &InputPicture<'_>, width: u32, height: u32) -> Result<Scaler> {
        crate::frame::check_size(width, height)?;
        let from = source(picture).ok_or_else(not_in_memory)?;
        crate::codec::init_ffmpeg();
        let sws = scaling::Context::get(
            from.2,
            from.0,
            from.1,
            Pixel::YUV420P,
            width,
            height,
            scaling::Flags::BILINEAR,
        )
        .map_err(|e| MediaError::ffmpeg("swscale context", e))?;
        Ok(Scaler {
            from,
            out: I420Frame::new(width, height),
            sws,
        })
    }

    /// Whether this scaler takes `picture` to `width`×`height`.
    pub fn fits(&self, picture: &InputPicture<'_>, width: u32, height: u32) -> bool {
        source(picture) == Some(self.from) && (self.out.width, self.out.height) == (width, height)
    }

    /// `picture` scaled (its planes checked against its size first).
    pub fn scale(&mut self, picture: &InputPicture<'_>) -> Result<InputPicture<'_>> {
        let (w, h, _) = self.from;
        if source(picture) != Some(self.from) {
            return Err(MediaError::Conversion(format!(
                "this scaler takes {w}x{h} pictures of one format"
            )));
        }
        let need = |stride: usize, row: usize, rows: usize| (rows - 1) * stride + row;
        let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
        let null = std::ptr::null::<u8>();
        let (src, strides) = match picture {
            InputPicture::Bgra { data, stride, .. } => {
                if *stride < w as usize * 4
                    || data.len() < need(*stride, w as usize * 4, h as usize)
                {
                    return Err(MediaError::Conversion(
                        "BGRA picture too small for its size".into(),
                    ));
                }
                ([data.as_ptr(), null, null, null], [*stride as i32, 0, 0, 0])
            }
            InputPicture::DmaBuf(_) => return Err(not_in_memory()),
            InputPicture::I420 { planes, .. } => {
                let [(y, ys), (u, us), (v, vs)] = *planes;
                if y.len() < need(ys, w as usize, h as usize)
                    || u.len() < need(us, w2, h2)
                    || v.len() < need(vs, w2, h2)
                {
                    return Err(MediaError::Conversion(
                        "I420 planes too small for their size".into(),
                    ));
                }
                (
                    [y.as_ptr(), u.as_ptr(), v.as_ptr(), null],
                    [ys as i32, us as i32, vs as i32, 0],
                )
            }
        };
        let (ow, ow2) = (self.out.width as usize, self.out.width.div_ceil(2) as usize);
        let dst = [
            self.out.y.as_mut_ptr(),
            self.out.u.as_mut_ptr(),
            self.out.v.as_mut_ptr(),
            std::ptr::null_mut(),
        ];
        let dst_strides = [ow as i32, ow2 as i32, ow2 as i32, 0];
        // SAFETY: the context was made for exactly these sizes and formats; the source planes
        // were checked above to hold their rows, the destination is this scaler's own frame of
        // the target size.
        let rc = unsafe {
            ffmpeg_next::ffi::sws_scale(
                self.sws.as_mut_ptr(),
                src.as_ptr(),
                strides.as_ptr(),
                0,
                h as i32,
                dst.as_ptr(),
                dst_strides.as_ptr(),
            )
        };
        if rc < 0 {
            return Err(MediaError::ffmpeg(
                "sws_scale",
                ffmpeg_next::Error::from(rc),
            ));
        }
        Ok(InputPicture::I420 {
            width: self.out.width,
            height: self.out.height,
            planes: [(&self.out.y, ow), (&self.out.u, ow2), (&self.out.v, ow2)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bgra_picture_is_scaled_to_a_grey_i420_of_the_target_size() {
        let (w, h) = (320u32, 180u32);
        let data = vec![128u8; (w * h * 4) as usize];
        let pic = InputPicture::Bgra {
            width: w,
            height: h,
            data: &data,
            stride: w as usize * 4,
        };
        let mut s = Scaler::new(&pic, 160, 90).unwrap();
        assert!(s.fits(&pic, 160, 90) && !s.fits(&pic, 320, 180));
        let out = s.scale(&pic).unwrap();
        assert_eq!(out.size(), (160, 90));
        let InputPicture::I420 { planes, .. } = out else {
            panic!("I420 out");
        };
        let y = planes[0].0[160 * 45 + 80];
        assert!((100..=140).contains(&y), "grey stays grey: Y {y}");
        let short = InputPicture::Bgra {
            width: w,
            height: h,
            data: &data[..100],
            stride: w as usize * 4,
        };
        assert!(s.scale(&short).is_err());
    }
}
