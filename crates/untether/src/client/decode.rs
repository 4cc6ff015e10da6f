//! The client's decode stage: its own thread decodes the frames the network driver assembled,
//! in order, reads the pixel stamp and hands each picture to the presenter through a
//! latest-wins slot (a picture replaced before it was shown is counted as dropped).
//!
//! Each session has its codec: the decoder is opened for it (software, a named one, or with the
//! hardware accelerator `client.hwaccel` names, falling back to software with one line) when the
//! session's first frame arrives, and opened again when a later session has another codec.
//! Frames the protocol marks *held* (an intra-refresh sweep after a join or a loss is under
//! way) are decoded and not shown.

use std::sync::atomic::Ordering;
use std::sync::mpsc;

use untether_media::codec::{Codec, DecodedFrame, Decoder, DecoderConfig};
use untether_media::stamp;
use untether_proto::CompleteFrame;

use super::network::ClientCommand;
use super::record::{keep_record, FrameRecord};
use super::{lock, ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::Handle;

/// One decoded picture on its way to the presenter.
pub(crate) struct Decoded {
    pub picture: DecodedFrame,
    pub record: FrameRecord,
}

/// A complete frame of session `session`, whose codec is `codec`.
pub(crate) struct ToDecode {
    pub session: u32,
    pub codec: Codec,
    pub frame: CompleteFrame,
}

/// Opens the decoder `cfg` asks for (for the codec of `cfg`), saying once why it fell back.
pub(crate) fn open_decoder(s: &ClientShared, cfg: &DecoderConfig) -> Option<Decoder> {
    match Decoder::open(cfg) {
        Ok((d, note)) => {
            if let Some(note) = note {
                log::warn!("client: {note}");
            }
            log::info!("client: decoding {} with {}", cfg.codec, d.info());
            lock(&s.run).decoder = Some(d.info().to_string());
            Some(d)
        }
        Err(e) => {
            s.finish(Some(ClientError::Media(e)));
            None
        }
    }
}

/// Decodes the frames the network thread assembled, in order, and hands them to the presenter.
pub(crate) fn decode_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    frames: mpsc::Receiver<ToDecode>,
    config: DecoderConfig,
) {
    let mut decoder: Option<(Codec, Decoder)> = None;
    loop {
        let ToDecode {
            session,
            codec,
            frame,
        } = match frames.recv_timeout(std::time::Duration::from_millis(20)) {
            Ok(f) => f,
            Err(mpsc::RecvTimeoutError::Timeout) if !s.stop.load(Ordering::SeqCst) => continue,
            // The client stops (its driver may still hold the channel), or the driver ended.
            Err(_) => return,
        };
        if decoder.as_ref().is_none_or(|(c, _)| *c != codec) {
            let cfg = DecoderConfig {
                codec,
                ..config.clone()
            };
            match open_decoder(s, &cfg) {
                Some(d) => decoder = Some((codec, d)),
                None => return,
            }
        }
        let Some((_, decoder)) = decoder.as_mut() else {
            return;
        };
        let decode_start_us = now_us();
        match decoder.decode(&frame.data) {
            Ok(Some(_)) if frame.hold => {
                // Decoded to bring the picture back; not clean yet, so not shown.
                lock(&s.run).held += 1;
            }
            Ok(Some(picture)) => {
                let decode_end_us = now_us();
                net.send(ClientCommand::DecodeTime(decode_end_us - decode_start_us));
                let (plane, stride) = picture.luma();
                let stamp = stamp::read_plane(plane, stride, picture.width(), picture.height());
                let record = FrameRecord {
                    session,
                    frame_number: frame.frame_number,
                    keyframe: frame.keyframe,
                    capture_us: frame.capture_us,
                    first_shard_us: frame.first_shard_us,
                    last_shard_us: frame.last_shard_us,
                    decode_start_us,
                    decode_end_us,
                    shown_us: 0,
                    bytes: frame.data.len(),
                    stamp,
                    pose: None,
                    thumbnail: thumbnail(plane, stride, picture.width(), picture.height()),
                };
                {
                    let mut run = lock(&s.run);
                    run.decoded += 1;
                    if stamp.is_none() {
                        run.stamp_unreadable += 1;
                    }
                }
                let pose = s.frame_poses.get(session, frame.frame_number);
                let mut record = record;
                record.pose = pose;
                if pose.is_some() {
                    lock(&s.run).frames_with_pose += 1;
                }
                if let Some(old) = s.decoded.put(Decoded { picture, record }) {
                    keep_record(&mut lock(&s.run), old.record);
                }
            }
            Ok(None) => {
                if frame.hold {
                    lock(&s.run).held += 1;
                }
            }
            Err(_) if frame.hold => {
                // A frame decoded from a sweep start may lack references the client never
                // had: expected, and no reason to ask for a keyframe.
                let mut run = lock(&s.run);
                run.held += 1;
                run.held_decode_errors += 1;
            }
            Err(e) => {
                log::warn!("client: frame {} failed to decode: {e}", frame.frame_number);
                lock(&s.run).decode_errors += 1;
                net.send(ClientCommand::DecodeFailed(frame.frame_number));
            }
        }
    }
}

/// Samples a 16×9 grid of an 8-bit plane, avoiding the stamp at the top-left.
pub fn thumbnail(plane: &[u8], stride: usize, width: u32, height: u32) -> Vec<u8> {
    let (_, stamp_h) = stamp::stamp_area(width, height);
    let top = stamp_h as usize + 8;
    let (w, h) = (width as usize, height as usize);
    let mut out = Vec::with_capacity(144);
    if h <= top + 9 {
        return out;
    }
    for gy in 0..9 {
        let y = top + (h - top) * (2 * gy + 1) / 18;
        for gx in 0..16 {
            let x = w * (2 * gx + 1) / 32;
            out.push(plane.get(y * stride + x).copied().unwrap_or(0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumbnail_is_a_16_by_9_grid_below_the_stamp() {
        let (w, h) = (320u32, 180u32);
        let plane: Vec<u8> = (0..w * h).map(|i| (i / w) as u8).collect();
        let t = thumbnail(&plane, w as usize, w, h);
        assert_eq!(t.len(), 144);
        // Rows go down the picture, so samples grow row by row.
        assert!(t[0] < t[143]);
        // Too small a picture has no room below the stamp.
        assert!(thumbnail(&plane, 16, 16, 8).is_empty());
    }
}
