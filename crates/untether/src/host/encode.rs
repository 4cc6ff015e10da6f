//! The encoder stage: converts and encodes a picture, numbers it in the current client's
//! stream and hands it to the network driver. Used by the encoder thread, the capture threads
//! and the application's [`FrameSender`] alike.
//!
//! It follows the session through [`EncoderEvent`]s from the driver (a keyframe request, the
//! adaptive bitrate's new target) and the client epoch the driver publishes (a new client
//! starts at frame 0 with a keyframe).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use untether_media::codec::{Encoder, EncoderConfig, InputPicture};
use untether_media::x264::SliceEncoder;
use untether_proto::{FrameTiming, Micros};

use super::encode_slices::{self, slice_encoder_config};
use super::network::{HostCommand, OutgoingFrame, SlicesDone};
use super::options::HostSetup;
use super::shared::{lock, HostShared};
use super::HostError;
use crate::clock::now_us;
use crate::config::VideoConfig;
use crate::driver::Handle;

/// What the network driver tells the encoder stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EncoderEvent {
    /// The client lost a frame: the next one is a keyframe.
    Keyframe,
    /// The adaptive bitrate controller's new target, kbit/s (x264 reconfigures its rate
    /// control, no keyframe).
    Bitrate(u32),
}

/// The encoder configuration of a host's video settings.
pub(crate) fn encoder_config(
    v: &VideoConfig,
    setup: &HostSetup,
    width: u32,
    height: u32,
) -> EncoderConfig {
    let mut params = setup.x264_params.clone();
    if setup.gop_frames > 0 {
        if !params.is_empty() {
            params.push(':');
        }
        params.push_str(&format!("keyint={0}:min-keyint={0}", setup.gop_frames));
    }
    EncoderConfig {
        width,
        height,
        fps: v.fps,
        bitrate_kbps: v.bitrate_kbps,
        preset: v.preset.clone(),
        threads: v.encoder_threads,
        conversion: v.path.conversion(),
        intra_refresh: setup.intra_refresh,
        x264_params: params,
    }
}

/// The stage's encoder: x264 through FFmpeg, frames whole; or x264 through its own API, each
/// slice handed over as it is written (`video.slices` ≥ 2).
// One per encoder stage, never moved on the frame path: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum VideoEncoder {
    Whole(Encoder),
    Sliced(SliceEncoder),
}

impl VideoEncoder {
    /// The encoder for `cfg`: sliced with `slices` ≥ 2.
    pub fn new(cfg: &EncoderConfig, slices: u8) -> Result<VideoEncoder, HostError> {
        Ok(if slices > 1 {
            VideoEncoder::Sliced(SliceEncoder::new(slice_encoder_config(cfg, slices))?)
        } else {
            VideoEncoder::Whole(Encoder::new(cfg.clone())?)
        })
    }

    fn slices(&self) -> u8 {
        match self {
            VideoEncoder::Whole(_) => 1,
            VideoEncoder::Sliced(e) => e.slice_count() as u8,
        }
    }

    fn bitrate_kbps(&self) -> u32 {
        match self {
            VideoEncoder::Whole(e) => e.config().bitrate_kbps,
            VideoEncoder::Sliced(e) => e.config().bitrate_kbps,
        }
    }

    fn set_bitrate(&mut self, kbps: u32) -> Result<(), HostError> {
        match self {
            VideoEncoder::Whole(e) => e.set_bitrate(kbps)?,
            VideoEncoder::Sliced(e) => e.set_bitrate(kbps)?,
        }
        Ok(())
    }
}

/// What the encoder made of a picture: a whole frame to hand over, or a frame whose slices
/// were handed over as they were written.
enum Encoded {
    Whole(Vec<u8>),
    Sliced(encode_slices::SlicedFrame),
}

/// What a send did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendInfo {
    /// False when no client is connected (nothing was encoded).
    pub sent: bool,
    /// The protocol frame number (per client, from 0).
    pub frame_number: u32,
    pub keyframe: bool,
    pub bytes: usize,
    /// Time spent in the call: conversion, encoding and the hand-over to the network thread
    /// (which packetizes and sends, paced with `network.pacing`), µs.
    pub blocked_us: u64,
}

/// The encoder, its frame numbering and its link to the network driver.
pub(crate) struct EncoderStage {
    encoder: VideoEncoder,
    cfg: EncoderConfig,
    /// Slices per frame asked for (1: whole).
    slices: u8,
    frame_number: u32,
    epoch: u64,
    keyframe_wanted: bool,
    target_kbps: Option<u32>,
    /// Set by the application ([`FrameSender::request_keyframe`]).
    app_keyframe: AtomicBool,
    events: Receiver<EncoderEvent>,
    net: Handle<HostCommand>,
    shared: Arc<HostShared>,
    /// The host's (captured, encoded, dropped) counters when this client's session began: the
    /// counts each frame carries to the client are this session's.
    session_base: (u64, u64, u64),
}

impl EncoderStage {
    pub fn new(
        cfg: EncoderConfig,
        encoder: VideoEncoder,
        events: Receiver<EncoderEvent>,
        net: Handle<HostCommand>,
        shared: Arc<HostShared>,
    ) -> Self {
        EncoderStage {
            cfg,
            slices: encoder.slices(),
            encoder,
            frame_number: 0,
            epoch: 0,
            keyframe_wanted: true,
            target_kbps: None,
            app_keyframe: AtomicBool::new(false),
            events,
            net,
            shared,
            session_base: (0, 0, 0),
        }
    }

    fn poll_events(&mut self) {
        while let Ok(e) = self.events.try_recv() {
            match e {
                EncoderEvent::Keyframe => self.keyframe_wanted = true,
                EncoderEvent::Bitrate(kbps) => self.target_kbps = Some(kbps),
            }
        }
        if self.app_keyframe.swap(false, Ordering::SeqCst) {
            self.keyframe_wanted = true;
        }
    }

    /// Whether the next frame must be sent even if nothing changed (a new client, or a
    /// keyframe was asked for).
    pub fn must_send(&mut self) -> bool {
        self.poll_events();
        self.epoch != self.shared.link.epoch() || self.keyframe_wanted
    }

    /// Encodes `picture` (captured at `capture_us`, the capture took `capture_dur_us`) and
    /// hands it to the network driver.
    pub fn send(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Micros,
        capture_dur_us: u32,
    ) -> Result<SendInfo, HostError> {
        let shared = self.shared.clone();
        let s = &*shared;
        self.poll_events();
        let e = s.link.epoch();
        if e != self.epoch {
            // A new client: its stream starts at frame 0 with a keyframe.
            self.epoch = e;
            self.frame_number = 0;
            self.keyframe_wanted = true;
            let c = &s.counters;
            // This frame was captured for the new session, and is not encoded yet.
            self.session_base = (
                c.captured.load(Ordering::Relaxed).saturating_sub(1),
                c.encoded.load(Ordering::Relaxed),
                s.frames.replaced(),
            );
        }
        let (w, h) = picture.size();
        if (w, h) != (self.cfg.width, self.cfg.height) {
            // The source changed size: a new encoder, starting with a keyframe (the client's
            // decoder follows the new SPS).
            let mut cfg = self.cfg.clone();
            cfg.width = w;
            cfg.height = h;
            if let Some(kbps) = self.target_kbps {
                cfg.bitrate_kbps = kbps;
            }
            self.encoder = VideoEncoder::new(&cfg, self.slices)?;
            self.cfg = cfg;
            self.keyframe_wanted = true;
            s.note(format!("the source is now {w}x{h}: new encoder, keyframe"));
        }
        if let Some(target) = self.target_kbps {
            if target != self.encoder.bitrate_kbps() {
                self.encoder.set_bitrate(target)?;
                s.counters.bitrate_changes.fetch_add(1, Ordering::Relaxed);
            }
        }
        let start = now_us();
        let force = std::mem::take(&mut self.keyframe_wanted);
        let frame_number = self.frame_number;
        let (keyframe, bytes, convert_us, encode_us, frame) = match &mut self.encoder {
            VideoEncoder::Whole(enc) => {
                let e = enc.encode_picture(picture, force)?;
                (
                    e.keyframe,
                    e.data.len(),
                    e.convert_us,
                    e.encode_us,
                    Encoded::Whole(e.data),
                )
            }
            VideoEncoder::Sliced(enc) => {
                let f = encode_slices::encode(
                    enc,
                    picture,
                    force,
                    &self.net,
                    self.epoch,
                    frame_number,
                    capture_us,
                )?;
                let i = f.info;
                (
                    i.keyframe,
                    i.bytes,
                    i.convert_us,
                    i.encode_us,
                    Encoded::Sliced(f),
                )
            }
        };
        let c = &s.counters;
        c.encoded.fetch_add(1, Ordering::Relaxed);
        if keyframe {
            c.keyframes.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut sm = lock(&s.samples);
            sm.queue.push_us(start as i64 - capture_us as i64);
            sm.convert.push_us(convert_us as i64);
            sm.encode.push_us(encode_us as i64);
            sm.frame_bytes.push(bytes as f64 / 1000.0);
            if let Encoded::Sliced(f) = &frame {
                sm.first_slice_out
                    .push_us(f.first_out_us as i64 - capture_us as i64);
                sm.last_slice_out
                    .push_us(f.last_out_us as i64 - capture_us as i64);
            }
        }
        let timing = FrameTiming {
            frame_number,
            capture_dur_us,
            convert_us: convert_us as u32,
            encode_us: encode_us as u32,
            send_us: 0,
            send_done_us: 0,
            frame_bytes: bytes as u32,
            captured: c
                .captured
                .load(Ordering::Relaxed)
                .saturating_sub(self.session_base.0) as u32,
            encoded: c
                .encoded
                .load(Ordering::Relaxed)
                .saturating_sub(self.session_base.1) as u32,
            dropped: s.frames.replaced().saturating_sub(self.session_base.2) as u32,
        };
        let since_capture = |t: Micros| t.saturating_sub(capture_us).min(u32::MAX as u64) as u32;
        let handed = self.net.send(match frame {
            Encoded::Whole(data) => HostCommand::Frame(OutgoingFrame {
                epoch: self.epoch,
                frame_number,
                capture_us,
                keyframe,
                data,
                handed_us: now_us(),
                timing,
            }),
            Encoded::Sliced(f) => HostCommand::SlicesDone(SlicesDone {
                epoch: self.epoch,
                frame_number,
                slice_count: f.info.slices as u8,
                first_out_us: since_capture(f.first_out_us),
                last_out_us: since_capture(f.last_out_us),
                timing,
            }),
        });
        if !handed {
            return Err(HostError::Stopped(s.fatal()));
        }
        self.frame_number = self.frame_number.wrapping_add(1);
        Ok(SendInfo {
            sent: true,
            frame_number,
            keyframe,
            bytes,
            blocked_us: 0,
        })
    }
}

/// Encodes frames on the caller's thread (OpenUVR's synchronous mode): no encoder thread, no
/// hand-over of pictures; the network thread packetizes, sends and receives control and input.
pub struct FrameSender {
    pub(crate) stage: EncoderStage,
}

impl FrameSender {
    /// Encodes `picture` and sends it to the client. `capture_us` is when the application
    /// finished rendering it (host clock, [`crate::clock::now_us`]; None: now).
    pub fn send(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Option<Micros>,
    ) -> Result<SendInfo, HostError> {
        let t0 = now_us();
        let s = self.stage.shared.clone();
        if s.stopped() {
            return Err(HostError::Stopped(s.fatal()));
        }
        if !s.link.connected() {
            return Ok(SendInfo::default());
        }
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        picture.check()?;
        let mut info = self.stage.send(picture, capture_us.unwrap_or(t0), 0)?;
        info.blocked_us = now_us() - t0;
        lock(&s.samples)
            .sync_blocked
            .push_us(info.blocked_us as i64);
        Ok(info)
    }

    /// Asks for a keyframe at the next frame.
    pub fn request_keyframe(&self) {
        self.stage.app_keyframe.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver;
    use crate::host::options::HostOptions;
    use std::sync::mpsc;
    use untether_media::BgraFrame;

    fn frames(mailbox: &driver::Mailbox<HostCommand>) -> Vec<(u64, u32, bool)> {
        mailbox
            .drain()
            .into_iter()
            .filter_map(|c| match c {
                HostCommand::Frame(f) => Some((f.epoch, f.frame_number, f.keyframe)),
                _ => None,
            })
            .collect()
    }

    type Stage = (
        EncoderStage,
        Arc<HostShared>,
        driver::Mailbox<HostCommand>,
        mpsc::Sender<EncoderEvent>,
    );

    /// A 128x72 encoder stage, its driver's mailbox and its event sender.
    fn stage() -> Stage {
        let cfg = encoder_config(
            &HostOptions::default().video,
            &HostSetup::default(),
            128,
            72,
        );
        let shared = Arc::new(HostShared::new((0, 0)));
        let (net, mailbox) = driver::channel().unwrap();
        let (events, rx) = mpsc::channel();
        let stage = EncoderStage::new(
            cfg.clone(),
            VideoEncoder::Whole(Encoder::new(cfg).unwrap()),
            rx,
            net,
            shared.clone(),
        );
        (stage, shared, mailbox, events)
    }

    fn bgra(f: &BgraFrame) -> InputPicture<'_> {
        InputPicture::Bgra {
            width: f.width,
            height: f.height,
            data: &f.data,
            stride: f.stride,
        }
    }

    #[test]
    fn numbers_frames_per_client_and_follows_the_drivers_events() {
        let (mut stage, shared, mailbox, events) = stage();
        let pixels = BgraFrame::new(128, 72).unwrap();
        let picture = bgra(&pixels);
        assert!(stage.must_send(), "the first frame is a keyframe");
        shared.link.new_client();
        for _ in 0..2 {
            stage.send(&picture, now_us(), 0).unwrap();
        }
        events.send(EncoderEvent::Keyframe).unwrap();
        assert!(stage.must_send());
        stage.send(&picture, now_us(), 0).unwrap();
        assert!(!stage.must_send());
        events.send(EncoderEvent::Bitrate(500)).unwrap();
        stage.send(&picture, now_us(), 0).unwrap();
        assert_eq!(shared.counters.bitrate_changes.load(Ordering::Relaxed), 1);
        // A new client: numbering restarts with a keyframe.
        shared.link.new_client();
        stage.send(&picture, now_us(), 0).unwrap();
        assert_eq!(
            frames(&mailbox),
            vec![
                (1, 0, true),
                (1, 1, false),
                (1, 2, true),
                (1, 3, false),
                (2, 0, true)
            ]
        );
        assert_eq!(shared.counters.encoded.load(Ordering::Relaxed), 5);
        assert_eq!(shared.counters.keyframes.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn the_counts_a_frame_carries_are_this_clients_session() {
        let (mut stage, shared, mailbox, _events) = stage();
        let pixels = BgraFrame::new(128, 72).unwrap();
        let picture = bgra(&pixels);
        let c = &shared.counters;
        let counts = |m: &driver::Mailbox<HostCommand>| -> Vec<(u32, u32)> {
            m.drain()
                .into_iter()
                .filter_map(|c| match c {
                    HostCommand::Frame(f) => Some((f.timing.captured, f.timing.encoded)),
                    _ => None,
                })
                .collect()
        };
        shared.link.new_client();
        for _ in 0..3 {
            c.captured.fetch_add(1, Ordering::Relaxed);
            stage.send(&picture, now_us(), 0).unwrap();
        }
        assert_eq!(counts(&mailbox), vec![(1, 1), (2, 2), (3, 3)]);
        // The next client's first frame is its first, whatever the host did before.
        shared.link.new_client();
        c.captured.fetch_add(1, Ordering::Relaxed);
        stage.send(&picture, now_us(), 0).unwrap();
        assert_eq!(counts(&mailbox), vec![(1, 1)]);
    }

    #[test]
    fn a_stopped_driver_is_an_error_not_a_silent_drop() {
        let (mut stage, shared, mailbox, _events) = stage();
        drop(mailbox);
        let pixels = BgraFrame::new(128, 72).unwrap();
        let picture = bgra(&pixels);
        shared.link.new_client();
        assert!(matches!(
            stage.send(&picture, now_us(), 0),
            Err(HostError::Stopped(_))
        ));
    }
}
