//! Decoding a frame slice by slice, as its slices arrive, and concealing the slices that never
//! do (docs/PROTOCOL.md §6.3).
//!
//! FFmpeg's h264 decoder takes a frame's slices one call at a time with
//! `AV_CODEC_FLAG2_CHUNKS` ([`Decoder::new_chunked`]): each call decodes its slice at once, and
//! the picture comes out with the call whose slice reaches the bottom of the picture. The
//! slices come in **decode order** (the network's assembler guarantees it): the frame's first
//! slice first (it opens the picture), its last slice last (it closes it), the others in any
//! order — x264's sliced threads write slices that depend on nothing outside themselves (no
//! prediction and no deblocking across slice edges: `disable_deblocking_filter_idc = 2`), so
//! any order gives the same picture.
//!
//! Error resilience is off while slices are fed one at a time: FFmpeg runs its concealment at
//! the end of every call that leaves the picture unfinished, which would conceal the whole
//! not-yet-decoded rest of the picture after every slice (measured at 720p: 4 slices cost
//! 38 ms instead of 1 ms). When a slice of the frame is lost, the frame's end is the signal:
//! the slices that did arrive are decoded again, as one access unit without `CHUNKS` and with
//! error resilience on, so FFmpeg conceals the missing region from the reference picture and
//! outputs the picture (the partly decoded one is dropped; its reference state was never
//! updated). The picture is bit-identical to what a decoder given those slices as one access
//! unit produces (tested), and the rest of the picture is intact: a lost slice costs only its
//! own region until a keyframe repairs it.

use crate::codec::{DecodedFrame, Decoder};
use crate::{MediaError, Result};

/// A picture the slices of a frame made.
pub struct SlicePicture {
    pub picture: DecodedFrame,
    /// Slices of the frame that were lost (their region concealed from the reference).
    pub lost: u8,
    /// The frame's first slice was lost (the top of the picture is concealed).
    pub first_lost: bool,
}

/// The frame being decoded.
struct InProgress {
    number: u32,
    count: u8,
    /// The slices that arrived, in arrival order (kept to decode them again after a loss).
    received: Vec<(u8, Vec<u8>)>,
    /// Slices seen (arrived or lost), one bit each.
    seen: u32,
    lost: u8,
    first_lost: bool,
    /// Slices fed to the decoder one at a time.
    fed: u8,
    /// Still decoding slice by slice (no loss, nothing out of order, no error).
    chunked: bool,
    /// The chunked decode already gave the picture.
    picture: Option<DecodedFrame>,
}

/// FFmpeg's h264 decoder fed one slice at a time (see the module documentation).
pub struct SliceDecoder {
    decoder: Decoder,
    frame: Option<InProgress>,
    /// Frames abandoned unfinished (another frame's slice came first: never from our
    /// assembler).
    pub abandoned: u64,
}

impl SliceDecoder {
    /// One decoder thread: each call decodes one slice, so slice threads would have nothing
    /// to share, and FFmpeg's error resilience works only without them.
    pub fn new() -> Result<SliceDecoder> {
        let mut decoder = Decoder::new_chunked(1)?;
        decoder.set_error_resilience(false)?;
        Ok(SliceDecoder {
            decoder,
            frame: None,
            abandoned: 0,
        })
    }

    /// Slice `index` of `count` of frame `frame_number` (Annex B) arrived: decodes it now if
    /// it can. Returns the picture when this slice ends the frame.
    pub fn slice(
        &mut self,
        frame_number: u32,
        index: u8,
        count: u8,
        data: Vec<u8>,
    ) -> Result<Option<SlicePicture>> {
        self.take(frame_number, index, count, Some(data))
    }

    /// Slice `index` of `count` of frame `frame_number` was given up. Returns the picture,
    /// its missing region concealed, when this ends the frame (it was the last slice).
    pub fn lost(
        &mut self,
        frame_number: u32,
        index: u8,
        count: u8,
    ) -> Result<Option<SlicePicture>> {
        self.take(frame_number, index, count, None)
    }

    fn take(
        &mut self,
        frame_number: u32,
        index: u8,
        count: u8,
        data: Option<Vec<u8>>,
    ) -> Result<Option<SlicePicture>> {
        if count == 0 || count > 32 || index >= count {
            return Err(MediaError::Other(format!(
                "slice {index} of {count}: not a slice of a frame"
            )));
        }
        if self
            .frame
            .as_ref()
            .is_some_and(|f| f.number != frame_number || f.count != count)
        {
            // The previous frame never ended: finish it (its picture is dropped) so the
            // decoder is not left in the middle of it.
            self.abandoned += 1;
            let _ = self.finish();
        }
        let f = self.frame.get_or_insert_with(|| InProgress {
            number: frame_number,
            count,
            received: Vec::with_capacity(count as usize),
            seen: 0,
            lost: 0,
            first_lost: false,
            fed: 0,
            chunked: true,
            picture: None,
        });
        let bit = 1u32 << index;
        if f.seen & bit != 0 {
            // Twice: keep the first.
            return Ok(None);
        }
        f.seen |= bit;
        let last = index + 1 == count;
        match data {
            None => {
                f.lost += 1;
                f.first_lost |= index == 0;
                f.chunked = false;
            }
            Some(data) => {
                // Decode order: the first slice opens the picture, the last closes it (and
                // only when every other slice is in).
                let in_order = if index == 0 {
                    f.fed == 0
                } else if last {
                    f.fed + 1 == count
                } else {
                    f.fed > 0
                };
                if f.chunked && in_order {
                    match self.decoder.decode(&data) {
                        Ok(out) => {
                            f.fed += 1;
                            if out.is_some() {
                                f.picture = out;
                            }
                        }
                        Err(_) => f.chunked = false,
                    }
                } else {
                    f.chunked = false;
                }
                f.received.push((index, data));
            }
        }
        let all = f.seen.count_ones() == count as u32;
        if last || all {
            return self.finish();
        }
        Ok(None)
    }

    /// Ends the frame in progress: its picture from the slice-by-slice decode, or, after a
    /// loss (or anything out of order), from its slices decoded again as one access unit with
    /// the missing region concealed.
    fn finish(&mut self) -> Result<Option<SlicePicture>> {
        let Some(mut f) = self.frame.take() else {
            return Ok(None);
        };
        if f.chunked && f.lost == 0 {
            if let Some(picture) = f.picture.take() {
                return Ok(Some(SlicePicture {
                    picture,
                    lost: 0,
                    first_lost: false,
                }));
            }
        }
        if f.received.is_empty() {
            return Ok(None);
        }
        f.received.sort_by_key(|s| s.0);
        let au: Vec<u8> = f
            .received
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .collect();
        self.decoder.set_chunks(false);
        self.decoder.set_error_resilience(true)?;
        let out = self.decoder.decode(&au);
        self.decoder.set_chunks(true);
        self.decoder.set_error_resilience(false)?;
        Ok(out?.map(|picture| SlicePicture {
            picture,
            lost: f.lost,
            first_lost: f.first_lost,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::InputPicture;
    use crate::convert::Conversion;
    use crate::scene::{Scene, SceneConfig};
    use crate::stamp::{self, Stamp};
    use crate::x264::{EncodedSlice, SliceEncoder, SliceEncoderConfig};
    use crate::BgraFrame;
    use std::sync::Mutex;

    const W: u32 = 640;
    const H: u32 = 360;

    /// `n` frames of the moving scene in 4 slices each (index order), the slice layout's
    /// first rows, and the order x264 finished them in.
    fn frames(n: u32, key_at: &[u32]) -> (Vec<Vec<Vec<u8>>>, Vec<usize>) {
        let mut enc = SliceEncoder::new(SliceEncoderConfig {
            width: W,
            height: H,
            fps: 60,
            bitrate_kbps: 10_000,
            preset: "ultrafast".into(),
            threads: 2,
            slices: 4,
            conversion: Conversion::Simd,
            x264_params: String::new(),
        })
        .unwrap();
        let mut scene = Scene::new(SceneConfig::new(W, H)).unwrap();
        let mut f = BgraFrame::new(W, H).unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            scene.render(i as f64 / 20.0, &mut f);
            stamp::write_bgra(
                &mut f,
                &Stamp {
                    frame_number: 100 + i,
                    capture_us: 1000,
                    input_seq: 0,
                },
            );
            let got = Mutex::new(Vec::new());
            enc.encode(
                &InputPicture::Bgra {
                    width: W,
                    height: H,
                    data: &f.data,
                    stride: f.stride,
                },
                i == 0 || key_at.contains(&i),
                &|s: EncodedSlice| got.lock().unwrap().push((s.index, s.data)),
            )
            .unwrap();
            let mut got = got.into_inner().unwrap();
            got.sort_by_key(|s| s.0);
            out.push(got.into_iter().map(|s| s.1).collect());
        }
        // Rows where each slice starts: 640x360 is 40x23 macroblocks, 4 slices of 240.
        (out, vec![0, 6 * 16, 12 * 16, 18 * 16])
    }

    fn luma(p: &DecodedFrame) -> Vec<u8> {
        let (pl, s) = p.luma();
        let (w, h) = (p.width() as usize, p.height() as usize);
        (0..h).flat_map(|y| pl[y * s..y * s + w].to_vec()).collect()
    }

    /// Pixel rows (of luma) where two pictures differ.
    fn rows_differing(a: &[u8], b: &[u8]) -> Vec<usize> {
        (0..H as usize)
            .filter(|&y| {
                a[y * W as usize..(y + 1) * W as usize] != b[y * W as usize..(y + 1) * W as usize]
            })
            .collect()
    }

    fn stamp_of(p: &DecodedFrame) -> Option<u32> {
        let (pl, s) = p.luma();
        stamp::read_plane(pl, s, W, H).map(|s| s.frame_number)
    }

    #[test]
    fn slices_in_any_decode_order_give_the_whole_frames_picture_at_the_last() {
        let (frames, _) = frames(6, &[]);
        let mut whole = Decoder::new(1).unwrap();
        let mut d = SliceDecoder::new().unwrap();
        for (i, slices) in frames.iter().enumerate() {
            let want = luma(&whole.decode(&slices.concat()).unwrap().unwrap());
            // The first first, the last last, the middle ones either way round.
            let order: &[usize] = if i % 2 == 0 {
                &[0, 1, 2, 3]
            } else {
                &[0, 2, 1, 3]
            };
            for (k, &s) in order.iter().enumerate() {
                let out = d.slice(i as u32, s as u8, 4, slices[s].clone()).unwrap();
                if k < 3 {
                    assert!(out.is_none(), "frame {i}: a picture before the last slice");
                } else {
                    let p = out.expect("the picture with the last slice");
                    assert_eq!((p.lost, p.first_lost), (0, false));
                    assert_eq!(luma(&p.picture), want, "frame {i}: not the whole decode's");
                    assert_eq!(stamp_of(&p.picture), Some(100 + i as u32));
                }
            }
        }
        assert_eq!(d.abandoned, 0);
    }

    /// A lost slice (first, middle or last) costs only its own region: the picture still
    /// comes out at the frame's end, identical to what a decoder makes of the slices that
    /// arrived, equal to the clean picture outside the lost band; later frames decode, and
    /// after the next keyframe the pictures are clean again.
    #[test]
    fn a_lost_slice_is_concealed_and_the_region_recovers_at_the_keyframe() {
        for lost_slice in [0usize, 2, 3] {
            let (frames, rows) = frames(8, &[5]);
            let lost_rows =
                rows[lost_slice]..rows.get(lost_slice + 1).copied().unwrap_or(H as usize);
            let mut clean = Decoder::new(1).unwrap();
            let mut reference = Decoder::new(1).unwrap();
            let mut d = SliceDecoder::new().unwrap();
            for (i, slices) in frames.iter().enumerate() {
                let clean_pic = luma(&clean.decode(&slices.concat()).unwrap().unwrap());
                let damaged = i == 2;
                let au: Vec<u8> = slices
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !(damaged && *k == lost_slice))
                    .flat_map(|(_, s)| s.clone())
                    .collect();
                let want = luma(&reference.decode(&au).unwrap().unwrap());
                let mut out = None;
                for (k, s) in slices.iter().enumerate() {
                    let r = if damaged && k == lost_slice {
                        d.lost(i as u32, k as u8, 4).unwrap()
                    } else {
                        d.slice(i as u32, k as u8, 4, s.clone()).unwrap()
                    };
                    if k < 3 {
                        assert!(r.is_none());
                    }
                    out = r;
                }
                let p = out.expect("a picture at the frame's end");
                assert_eq!(luma(&p.picture), want, "slice {lost_slice}, frame {i}");
                if damaged {
                    assert_eq!((p.lost, p.first_lost), (1, lost_slice == 0));
                    let diff = rows_differing(&clean_pic, &want);
                    assert!(!diff.is_empty());
                    assert!(
                        diff.iter().all(|y| lost_rows.contains(y)),
                        "slice {lost_slice}: rows {diff:?} outside {lost_rows:?} differ"
                    );
                    if lost_slice != 0 {
                        assert_eq!(stamp_of(&p.picture), Some(102));
                    }
                } else if i >= 5 {
                    assert_eq!(luma(&p.picture), clean_pic, "frame {i} after the keyframe");
                }
            }
        }
    }

    #[test]
    fn a_frame_left_unfinished_does_not_block_the_next() {
        let (frames, _) = frames(3, &[]);
        let mut d = SliceDecoder::new().unwrap();
        for (k, s) in frames[0].iter().enumerate() {
            d.slice(0, k as u8, 4, s.clone()).unwrap();
        }
        // Frame 1 stops after two slices; frame 2 comes whole.
        d.slice(1, 0, 4, frames[1][0].clone()).unwrap();
        d.slice(1, 1, 4, frames[1][1].clone()).unwrap();
        let mut out = None;
        for (k, s) in frames[2].iter().enumerate() {
            out = d.slice(2, k as u8, 4, s.clone()).unwrap();
        }
        assert!(out.is_some());
        assert_eq!(d.abandoned, 1);
        assert!(d.slice(3, 4, 4, vec![0, 0, 0, 1]).is_err());
        assert!(d.lost(3, 0, 0).is_err());
    }
}
