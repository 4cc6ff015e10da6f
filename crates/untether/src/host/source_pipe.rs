//! Raw frames from a file, a named pipe or standard input as a frame source: a reader thread
//! reads exactly one frame, encodes and sends it, and only then reads the next (no read-ahead:
//! the writer is held back instead of frames dropped). A regular file is paced at the frame
//! rate. At the end of the input the host says goodbye, so the client ends too.

use std::sync::atomic::Ordering;

use untether_media::codec::InputPicture;
use untether_media::pipe::{PipeFormat, PipeReader};
use untether_media::stamp::{self, Stamp};

use super::commands::HostCommand;
use super::encode::EncoderStage;
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::driver::Handle;
use crate::ticker::Ticker;

/// Where a pipe source reads from and what.
pub(crate) struct PipeSource {
    pub path: String,
    pub format: PipeFormat,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub stamp: bool,
}

/// A borrowed picture of one raw frame in `buf`.
pub(crate) fn raw_picture(
    buf: &[u8],
    format: PipeFormat,
    width: u32,
    height: u32,
) -> InputPicture<'_> {
    let (w, h) = (width as usize, height as usize);
    match format {
        PipeFormat::Bgra => InputPicture::Bgra {
            width,
            height,
            data: buf,
            stride: w * 4,
        },
        PipeFormat::I420 => {
            let (w2, h2) = (w.div_ceil(2), h.div_ceil(2));
            let (y, rest) = buf.split_at((w * h).min(buf.len()));
            let (u, v) = rest.split_at((w2 * h2).min(rest.len()));
            InputPicture::I420 {
                width,
                height,
                planes: [(y, w), (u, w2), (v, w2)],
            }
        }
    }
}

pub(crate) fn pipe_loop(
    s: &HostShared,
    src: PipeSource,
    mut stage: EncoderStage,
    net: Handle<HostCommand>,
) {
    let PipeSource {
        path,
        format,
        width,
        height,
        fps,
        stamp: stamp_frames,
    } = src;
    // Wait for a client before opening: a producer writing into a pipe is held back until
    // someone watches, so no frame is lost before the first client.
    if !s.wait_client() {
        return;
    }
    let mut reader = match PipeReader::open(&path, format, width, height) {
        Ok(r) => r,
        Err(e) => return s.fail(format!("pipe source: {e}")),
    };
    s.note(format!(
        "reading {width}x{height} {format} frames from {path}"
    ));
    let mut ticker = reader.is_regular_file().then(|| Ticker::at_fps(fps));
    let mut buf = Vec::new();
    let mut n: u64 = 0;
    while !s.stopped() {
        if !s.wait_client() {
            return;
        }
        if let Some(t) = ticker.as_mut() {
            t.wait();
        }
        match reader.read_frame(&mut buf) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return s.fail(format!("pipe source: {e}")),
        }
        let capture_us = now_us();
        let (w, h) = (width as usize, height as usize);
        if stamp_frames {
            let st = Stamp {
                frame_number: n as u32,
                capture_us,
                input_seq: 0,
            };
            match format {
                PipeFormat::Bgra => stamp::write_bgra_raw(&mut buf, w * 4, width, height, &st),
                PipeFormat::I420 => stamp::write_luma(&mut buf[..w * h], w, width, height, &st),
            }
        }
        n += 1;
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        // Reading includes waiting for the writer: a pipe frame costs nothing to "capture".
        lock(&s.samples).capture.push_us(0);
        let picture = raw_picture(&buf, format, width, height);
        if let Err(e) = stage.send(&picture, capture_us, 0, None) {
            if !s.stopped() {
                s.fail(format!("encoder: {e}"));
            }
            return;
        }
    }
    // End of input: say goodbye so the client ends too.
    s.note(format!("{path}: end of input after {n} frames"));
    s.source_ended.store(true, Ordering::SeqCst);
    net.send(HostCommand::Close);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_i420_planes_are_cut_at_their_sizes() {
        let buf = vec![0u8; 4 * 2 + 2 * 2];
        match raw_picture(&buf, PipeFormat::I420, 4, 2) {
            InputPicture::I420 { planes, .. } => {
                assert_eq!(planes[0].0.len(), 8);
                assert_eq!(planes[1].0.len(), 2);
                assert_eq!(planes[2].0.len(), 2);
                assert_eq!((planes[0].1, planes[1].1), (4, 2));
            }
            _ => panic!("not I420"),
        }
        // A short buffer gives short planes (the encoder's check refuses them), never a panic.
        let _ = raw_picture(&buf[..3], PipeFormat::I420, 4, 2);
    }
}
