//! The application as a frame source: [`Host::publish`](super::Host::publish) copies each
//! picture into a pooled buffer for the encoder thread (latest wins), or the application
//! encodes on its own thread with a [`FrameSender`](super::FrameSender) (no copy, no hand-over).

use untether_media::codec::InputPicture;
use untether_media::convert::I420Frame;
use untether_media::BgraFrame;

use super::error::HostError;
use super::shared::{lock, HostShared, Pixels};

/// Copies a borrowed picture into a pooled buffer of the same layout.
pub(crate) fn copy_picture(
    s: &HostShared,
    picture: &InputPicture<'_>,
) -> Result<Pixels, HostError> {
    let (w, h) = picture.size();
    let mut spare = lock(&s.spare);
    let pos = spare.iter().position(|p| match (p, picture) {
        (Pixels::Bgra(f), InputPicture::Bgra { .. }) => (f.width, f.height) == (w, h),
        (Pixels::I420(f), InputPicture::I420 { .. }) => (f.width, f.height) == (w, h),
        _ => false,
    });
    let recycled = pos.map(|i| spare.swap_remove(i));
    drop(spare);
    match *picture {
        InputPicture::DmaBuf(_) => Err(HostError::Usage(
            "a DMA-BUF picture is handed over with publish_dma_buf (it is not copied)".into(),
        )),
        InputPicture::Bgra { data, stride, .. } => {
            let mut f = match recycled {
                Some(Pixels::Bgra(f)) => f,
                _ => BgraFrame::new(w, h)?,
            };
            let row = w as usize * 4;
            for y in 0..h as usize {
                f.data[y * f.stride..y * f.stride + row]
                    .copy_from_slice(&data[y * stride..y * stride + row]);
            }
            Ok(Pixels::Bgra(f))
        }
        InputPicture::I420 { planes, .. } => {
            let mut f = match recycled {
                Some(Pixels::I420(f)) => f,
                _ => I420Frame::new(w, h),
            };
            let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
            let dims = [(w as usize, h as usize), (w2, h2), (w2, h2)];
            let dsts = [&mut f.y, &mut f.u, &mut f.v];
            for ((dst, (src, stride)), (cw, ch)) in dsts.into_iter().zip(planes).zip(dims) {
                for y in 0..ch {
                    dst[y * cw..(y + 1) * cw].copy_from_slice(&src[y * stride..y * stride + cw]);
                }
            }
            Ok(Pixels::I420(f))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_rows_without_the_stride_padding_and_reuses_buffers() {
        let s = HostShared::new((0, 0));
        let (w, h, stride) = (4u32, 2u32, 20usize);
        let mut data = vec![0u8; stride * 2];
        data[..16].copy_from_slice(&[1; 16]);
        data[20..36].copy_from_slice(&[2; 16]);
        let pic = InputPicture::Bgra {
            width: w,
            height: h,
            data: &data,
            stride,
        };
        let Pixels::Bgra(f) = copy_picture(&s, &pic).unwrap() else {
            panic!("not BGRA")
        };
        assert_eq!(f.row(0), &[1; 16][..]);
        assert_eq!(f.row(1), &[2; 16][..]);
        s.recycle(Pixels::Bgra(f));
        assert_eq!(lock(&s.spare).len(), 1);
        copy_picture(&s, &pic).unwrap();
        assert!(lock(&s.spare).is_empty(), "the pooled buffer was reused");
    }
}
