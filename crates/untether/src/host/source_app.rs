//! The application as a frame source: [`Host::publish`](super::Host::publish) copies each
//! picture into a pooled buffer for the encoder thread (latest wins), or the application
//! encodes on its own thread with a [`FrameSender`](super::FrameSender) (no copy, no hand-over).

use std::sync::atomic::Ordering;

use untether_media::codec::InputPicture;
use untether_media::convert::I420Frame;
use untether_media::BgraFrame;
use untether_proto::{PoseSample, StateKey, StateValue};

use super::encode::FrameSender;
use super::error::HostError;
use super::shared::{lock, CapturedFrame, HostShared, Pixels};
use super::{Host, SourceSpec};
use crate::clock::now_us;

impl Host {
    /// Publishes a frame of the application (app source with an encoder thread): it is copied
    /// into a pooled buffer and the encoder thread encodes the newest one (latest wins; a
    /// frame replaced before the encoder took it counts as dropped). Returns at once.
    pub fn publish(&self, picture: &InputPicture<'_>) -> Result<(), HostError> {
        self.publish_with_pose(picture, None)
    }

    /// Like [`publish`](Self::publish), for a frame rendered for the client's head pose `pose`
    /// (from [`head_pose`](Self::head_pose)): the client gets the pose with the frame.
    pub fn publish_with_pose(
        &self,
        picture: &InputPicture<'_>,
        pose: Option<PoseSample>,
    ) -> Result<(), HostError> {
        if self.setup.source != SourceSpec::App || !self.setup.encoder_thread {
            return Err(HostError::Usage(
                "publish needs the app source with the encoder thread (synchronous mode uses a FrameSender)".into(),
            ));
        }
        if self.is_stopped() {
            return Err(HostError::Stopped(self.failure()));
        }
        picture.check()?;
        let t0 = now_us();
        let pixels = copy_picture(&self.shared, picture)?;
        let capture_us = now_us();
        self.shared
            .counters
            .captured
            .fetch_add(1, Ordering::Relaxed);
        let dur = (capture_us - t0) as u32;
        lock(&self.shared.samples).capture.push_us(dur as i64);
        if let Some(old) = self.shared.frames.put(CapturedFrame {
            pixels,
            capture_us,
            capture_dur_us: dur,
            pose,
        }) {
            self.shared.recycle(old.pixels);
        }
        Ok(())
    }

    /// The synchronous sender of an app host without an encoder thread: encodes on the
    /// caller's thread. There is one per host.
    pub fn frame_sender(&self) -> Result<FrameSender, HostError> {
        if self.setup.source != SourceSpec::App || self.setup.encoder_thread {
            return Err(HostError::Usage(
                "a frame sender needs the app source without the encoder thread".into(),
            ));
        }
        match lock(&self.sender_stage).take() {
            Some(stage) => Ok(FrameSender { stage }),
            None => Err(HostError::Usage(
                "this host's frame sender was already taken".into(),
            )),
        }
    }

    /// The client's newest head pose (orientation, position, and the client's sample time;
    /// `sample_us` 0 when its client sent none), None before it sent one. Render for it and
    /// pass it back with the frame ([`FrameSender::send_frame`],
    /// [`publish_with_pose`](Self::publish_with_pose)).
    pub fn head_pose(&self) -> Option<PoseSample> {
        *lock(&self.shared.head_pose)
    }

    /// Controller `n` (0..[`super::MAX_GAMEPADS`]) of the client as the host last heard it
    /// (buttons held, sticks and triggers); None before it sent anything.
    pub fn gamepad(&self, n: usize) -> Option<super::GamepadState> {
        self.query(move |net| net.gamepads.state(n)).flatten()
    }

    /// Publishes host → client state (rumble, other players, the application's own keys from
    /// [`untether_proto::state::keys::APP`]) on the latest-wins channel; the client reads it
    /// with `ClientContext::state_value`. False when the key table (4096) is full.
    pub fn publish_state(&self, key: StateKey, value: StateValue) -> bool {
        self.query(move |n| n.session.publish_state(now_us(), key, value))
            .unwrap_or(false)
    }
}

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
