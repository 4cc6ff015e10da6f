//! The client's decode stage: its own thread decodes the frames the network driver assembled,
//! in order, reads the pixel stamp and hands each picture to the presenter through a
//! latest-wins slot (a picture replaced before it was shown is counted as dropped).
//!
//! Each session has its codec: the decoder is opened for it (software, a named one, or with the
//! hardware accelerator `client.hwaccel` names, falling back to software with one line) when the
//! session starts ([`Piece::Open`], the codec from the host's Accept; a hardware decoder is
//! warmed with a dummy keyframe then, and with `--hwaccel` opened at the thread's start
//! already: [`super::warm`]), and opened again when a later session has another codec.
//! Frames the protocol marks *held* (an intra-refresh sweep after a join or a loss is under
//! way) are decoded and not shown.
//!
//! A frame sent in slices (docs/PROTOCOL.md §6.3, H.264 from libx264 only) arrives slice by slice, in decode order, and
//! each slice is decoded the moment it arrives ([`SliceDecoder`]); the picture comes out with
//! the last one. A slice given up arrives as a [`Piece::SliceLost`]: at the frame's end the
//! decoder conceals its region and the picture is shown all the same.

use std::sync::atomic::Ordering;
use std::sync::mpsc;

use untether_media::codec::{Codec, DecodedFrame, Decoder, DecoderConfig, HwAccel};
use untether_media::slice_decoder::{SliceDecoder, SlicePicture};
use untether_media::stamp;
use untether_proto::{CompleteFrame, Micros, SliceId};

use super::network::ClientCommand;
use super::record::FrameRecord;
use super::run::DecodeRecord;
use super::{ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::Handle;

/// One decoded picture on its way to the presenter.
pub(crate) struct Decoded {
    pub picture: DecodedFrame,
    pub record: FrameRecord,
}

/// What the network driver hands the decode thread, in decode order.
pub(crate) enum Piece {
    /// A frame sent whole.
    Frame(CompleteFrame),
    /// One slice of a frame sent in slices.
    Slice(CompleteFrame),
    /// A slice of it that was given up.
    SliceLost { frame_number: u32, slice: SliceId },
    /// The session started (its codec and picture size are known): open the decoder now.
    Open { width: u32, height: u32 },
}

/// A piece of session `session`, whose codec is `codec`.
pub(crate) struct ToDecode {
    pub session: u32,
    pub codec: Codec,
    pub piece: Piece,
}

/// The frame being decoded slice by slice: what its record will say.
struct SlicedFrame {
    session: u32,
    /// Decode it, do not show it (an intra-refresh sweep is under way).
    hold: bool,
    record: FrameRecord,
}

/// The decode thread's context: where pictures and commands go, and its part of the record.
struct DecodeStage<'a> {
    s: &'a ClientShared,
    net: &'a Handle<ClientCommand>,
    rec: DecodeRecord,
}

/// Opens the decoder `cfg` asks for (for the codec of `cfg`), saying once why it fell back.
fn open_decoder(s: &ClientShared, rec: &mut DecodeRecord, cfg: &DecoderConfig) -> Option<Decoder> {
    let t0 = std::time::Instant::now();
    match Decoder::open(cfg) {
        Ok((d, note)) => {
            if let Some(note) = note {
                log::warn!("client: {note}");
            }
            log::info!(
                "client: decoding {} with {} (opened in {:.1} ms)",
                cfg.codec,
                d.info(),
                t0.elapsed().as_secs_f64() * 1e3
            );
            rec.opened(&d.info().to_string());
            Some(d)
        }
        Err(e) => {
            s.finish(Some(ClientError::Media(e)));
            None
        }
    }
}

/// Decodes the frames the network thread assembled, in order, and hands them to the presenter;
/// returns what it measured when the client stops.
pub(crate) fn decode_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    frames: mpsc::Receiver<ToDecode>,
    config: DecoderConfig,
) -> DecodeRecord {
    let mut stage = DecodeStage {
        s,
        net,
        rec: DecodeRecord::default(),
    };
    stage.run(frames, config);
    stage.rec
}

impl DecodeStage<'_> {
    fn run(&mut self, frames: mpsc::Receiver<ToDecode>, config: DecoderConfig) {
        let s = self.s;
        let mut decoder: Option<(Codec, Decoder)> = None;
        if config.hwaccel != HwAccel::None {
            // The hardware device opens while the handshake is under way (the codec is the
            // configured one; another from the Accept reopens).
            match open_decoder(s, &mut self.rec, &config) {
                Some(d) => decoder = Some((config.codec, d)),
                None => return,
            }
        }
        let mut slices: Option<SliceDecoder> = None;
        let mut current: Option<SlicedFrame> = None;
        // When the session started, until its first picture is decoded.
        let mut opened_at: Option<(std::time::Instant, u64)> = None;
        loop {
            let ToDecode {
                session,
                codec,
                piece,
            } = match frames.recv_timeout(std::time::Duration::from_millis(20)) {
                Ok(f) => f,
                Err(mpsc::RecvTimeoutError::Timeout) if !s.stop.load(Ordering::SeqCst) => continue,
                // The client stops (its driver may still hold the channel), or the driver ended.
                Err(_) => return,
            };
            match piece {
                Piece::Open { width, height } => {
                    opened_at = Some((std::time::Instant::now(), self.rec.decoded_count()));
                    let cfg = DecoderConfig {
                        codec,
                        ..config.clone()
                    };
                    if !decoder_for(&mut decoder, codec, || open_decoder(s, &mut self.rec, &cfg)) {
                        return;
                    }
                    if let Some((_, d)) = decoder.as_mut() {
                        let line = super::warm::warm(d, codec, width, height);
                        log::info!("client: decoder {}: {line}", d.info());
                    }
                }
                Piece::Frame(frame) => {
                    let cfg = DecoderConfig {
                        codec,
                        ..config.clone()
                    };
                    if !decoder_for(&mut decoder, codec, || open_decoder(s, &mut self.rec, &cfg)) {
                        return;
                    }
                    let Some((_, decoder)) = decoder.as_mut() else {
                        return;
                    };
                    self.decode_whole(decoder, session, frame)
                }
                Piece::Slice(frame) => {
                    let d = match slice_decoder(&mut self.rec, &mut slices) {
                        Some(d) => d,
                        None => continue,
                    };
                    let (number, slice) = (frame.frame_number, frame.slice);
                    let c = frame_record(&mut current, session, &frame);
                    c.hold |= frame.hold;
                    let r = &mut c.record;
                    r.first_shard_us = r.first_shard_us.min(frame.first_shard_us);
                    r.last_shard_us = r.last_shard_us.max(frame.last_shard_us);
                    r.bytes += frame.data.len();
                    let start = now_us();
                    let out = d.slice(number, slice.index, slice.count, frame.data);
                    let end = now_us();
                    if r.first_slice_decoded_us == 0 {
                        r.first_slice_decoded_us = end;
                        r.decode_start_us = start;
                    }
                    r.decode_us += end - start;
                    self.slice_result(&mut current, number, start, end, out);
                }
                Piece::SliceLost {
                    frame_number,
                    slice,
                } => {
                    let d = match slice_decoder(&mut self.rec, &mut slices) {
                        Some(d) => d,
                        None => continue,
                    };
                    let start = now_us();
                    let out = d.lost(frame_number, slice.index, slice.count);
                    let end = now_us();
                    match current
                        .as_mut()
                        .filter(|c| c.record.frame_number == frame_number)
                    {
                        Some(c) => {
                            c.record.slices_lost += 1;
                            c.record.decode_us += end - start;
                        }
                        // Nothing of the frame arrived yet: its record starts here.
                        None => {
                            current = Some(SlicedFrame {
                                session,
                                hold: false,
                                record: FrameRecord {
                                    session,
                                    frame_number,
                                    slices: slice.count,
                                    slices_lost: 1,
                                    first_shard_us: Micros::MAX,
                                    ..Default::default()
                                },
                            })
                        }
                    }
                    self.slice_result(&mut current, frame_number, start, end, out);
                }
            }
            if let Some((t, _)) = opened_at.filter(|&(_, n)| self.rec.decoded_count() > n) {
                log::info!(
                    "client: first picture decoded {:.1} ms after the session started",
                    t.elapsed().as_secs_f64() * 1e3
                );
                opened_at = None;
            }
        }
    }
}

/// The slice decoder, made with the first slice.
fn slice_decoder<'a>(
    rec: &mut DecodeRecord,
    slices: &'a mut Option<SliceDecoder>,
) -> Option<&'a mut SliceDecoder> {
    if slices.is_none() {
        match SliceDecoder::new() {
            Ok(d) => *slices = Some(d),
            Err(e) => {
                log::warn!("client: the slice decoder failed to open: {e}");
                rec.error();
                return None;
            }
        }
    }
    slices.as_mut()
}

/// The record of the frame `frame`'s slice belongs to (a new one for a new frame).
fn frame_record<'a>(
    current: &'a mut Option<SlicedFrame>,
    session: u32,
    frame: &CompleteFrame,
) -> &'a mut SlicedFrame {
    if current
        .as_ref()
        .is_some_and(|c| c.record.frame_number != frame.frame_number || c.session != session)
    {
        *current = None;
    }
    current.get_or_insert_with(|| SlicedFrame {
        session,
        hold: frame.hold,
        record: FrameRecord {
            session,
            frame_number: frame.frame_number,
            keyframe: frame.keyframe,
            capture_us: frame.capture_us,
            first_shard_us: Micros::MAX,
            slices: frame.slice.count,
            ..Default::default()
        },
    })
}

impl DecodeStage<'_> {
    /// What a slice (or a lost one) gave: the frame's picture when it ended it.
    fn slice_result(
        &mut self,
        current: &mut Option<SlicedFrame>,
        frame_number: u32,
        start: Micros,
        end: Micros,
        out: untether_media::Result<Option<SlicePicture>>,
    ) {
        match out {
            Ok(Some(p)) => {
                let Some(mut c) = current.take() else {
                    return;
                };
                let r = &mut c.record;
                if r.first_shard_us == Micros::MAX {
                    r.first_shard_us = r.last_shard_us;
                }
                r.decode_start_us = if r.decode_start_us == 0 {
                    start
                } else {
                    r.decode_start_us
                };
                // The call that made the picture: reassemble runs up to its start.
                r.last_decode_start_us = start;
                r.decode_end_us = end;
                if c.hold {
                    // Decoded to bring the picture back; not clean yet, so not shown.
                    self.rec.held(false);
                    return;
                }
                self.net.send(ClientCommand::DecodeTime(r.decode_us));
                // The stamp sits in the first slice: concealed, it would show an older frame's.
                let readable = !p.first_lost;
                self.show(p.picture, c.record, readable);
            }
            Ok(None) => {}
            Err(_) if current.as_ref().is_some_and(|c| c.hold) => {
                // A frame decoded from a sweep start may lack references the client never had.
                *current = None;
                self.rec.held(true);
            }
            Err(e) => {
                log::warn!("client: frame {frame_number} failed to decode: {e}");
                *current = None;
                self.rec.error();
                self.net.send(ClientCommand::DecodeFailed(frame_number));
            }
        }
    }

    /// A frame sent whole: decoded in one call.
    fn decode_whole(&mut self, decoder: &mut Decoder, session: u32, frame: CompleteFrame) {
        let decode_start_us = now_us();
        match decoder.decode(&frame.data) {
            Ok(Some(_)) if frame.hold => {
                // Decoded to bring the picture back; not clean yet, so not shown.
                self.rec.held(false);
            }
            Ok(Some(picture)) => {
                let decode_end_us = now_us();
                self.net
                    .send(ClientCommand::DecodeTime(decode_end_us - decode_start_us));
                let record = FrameRecord {
                    session,
                    frame_number: frame.frame_number,
                    keyframe: frame.keyframe,
                    capture_us: frame.capture_us,
                    first_shard_us: frame.first_shard_us,
                    last_shard_us: frame.last_shard_us,
                    decode_start_us,
                    last_decode_start_us: decode_start_us,
                    decode_end_us,
                    decode_us: decode_end_us - decode_start_us,
                    bytes: frame.data.len(),
                    slices: 1,
                    ..Default::default()
                };
                self.show(picture, record, true);
            }
            Ok(None) => {
                if frame.hold {
                    self.rec.held(false);
                }
            }
            Err(_) if frame.hold => {
                // A frame decoded from a sweep start may lack references the client never had:
                // expected, and no reason to ask for a keyframe.
                self.rec.held(true);
            }
            Err(e) => {
                log::warn!("client: frame {} failed to decode: {e}", frame.frame_number);
                self.rec.error();
                self.net
                    .send(ClientCommand::DecodeFailed(frame.frame_number));
            }
        }
    }

    /// Reads the picture's stamp, attaches the pose it was rendered for and hands it to the
    /// presenter.
    fn show(&mut self, picture: DecodedFrame, mut record: FrameRecord, stamp_readable: bool) {
        let s = self.s;
        record.pose = s.frame_poses.get(record.session, record.frame_number);
        let (w, h) = (picture.width(), picture.height());
        if picture.gpu().is_some() {
            // Left on the GPU for the presenter (zero-copy): only the stamp's rows are read
            // back (none for DRM PRIME), so no thumbnail.
            let rows = stamp::stamp_area(w, h).1;
            record.stamp = stamp_readable
                .then(|| picture.luma_rows(rows))
                .flatten()
                .and_then(|(top, stride)| stamp::read_plane(&top, stride, w, rows));
        } else {
            let (plane, stride) = picture.luma();
            let stamp = stamp_readable
                .then(|| stamp::read_plane(plane, stride, w, h))
                .flatten();
            record.stamp = stamp;
            record.thumbnail = thumbnail(plane, stride, w, h);
        }
        // The picture's size, for the presenter's late warp.
        record.width = picture.width();
        record.height = picture.height();
        self.rec.decoded(&record);
        if let Some(old) = s.decoded.put(Decoded { picture, record }) {
            self.rec.dropped(old.record);
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

/// Makes `slot` hold a decoder of `codec`, opening one with `open` unless it already does:
/// false when it could not be opened (the decode thread ends; `open` said why).
fn decoder_for<D>(
    slot: &mut Option<(Codec, D)>,
    codec: Codec,
    open: impl FnOnce() -> Option<D>,
) -> bool {
    if slot.as_ref().is_none_or(|(c, _)| *c != codec) {
        match open() {
            Some(d) => *slot = Some((codec, d)),
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_decoder_is_opened_once_per_codec_and_a_failed_open_says_so() {
        let mut slot: Option<(super::Codec, u32)> = None;
        let opens = std::cell::Cell::new(0);
        let open = |v| {
            opens.set(opens.get() + 1);
            v
        };
        assert!(super::decoder_for(&mut slot, super::Codec::H264, || open(
            Some(1)
        )));
        assert!(super::decoder_for(&mut slot, super::Codec::H264, || open(
            Some(2)
        )));
        assert_eq!(
            (slot.map(|(_, d)| d), opens.get()),
            (Some(1), 1),
            "reused, not reopened"
        );
        assert!(!super::decoder_for(&mut slot, super::Codec::Hevc, || open(
            None
        )));
        assert_eq!(opens.get(), 2);
    }

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
