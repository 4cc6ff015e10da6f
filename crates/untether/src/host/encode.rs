//! The encoder stage: converts and encodes a picture, numbers it in the host's one stream and
//! hands it to the network driver, which sends it to every client. Used by the encoder thread,
//! the capture threads and the application's [`FrameSender`] alike.
//!
//! It follows the clients through [`EncoderEvent`]s from the driver (a keyframe request — a
//! client lost a frame, or one joined —, the adaptive bitrate's new target).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use untether_media::codec::{Encoder, EncoderConfig, InputPicture};
use untether_proto::{FrameTiming, Micros};

use super::network::{HostCommand, OutgoingFrame};
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

/// What a send did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendInfo {
    /// False when no client is connected (nothing was encoded).
    pub sent: bool,
    /// The protocol frame number (one numbering for the host's stream, whatever client sees
    /// it; from 0 at the host's start).
    pub frame_number: u32,
    pub keyframe: bool,
    pub bytes: usize,
    /// Time spent in the call: conversion, encoding and the hand-over to the network thread
    /// (which packetizes and sends, paced with `network.pacing`), µs.
    pub blocked_us: u64,
}

/// The encoder, its frame numbering and its link to the network driver.
pub(crate) struct EncoderStage {
    encoder: Encoder,
    cfg: EncoderConfig,
    /// The stream's next frame number (every client sees the same numbers).
    frame_number: u32,
    keyframe_wanted: bool,
    target_kbps: Option<u32>,
    /// Set by the application ([`FrameSender::request_keyframe`]).
    app_keyframe: AtomicBool,
    events: Receiver<EncoderEvent>,
    net: Handle<HostCommand>,
    shared: Arc<HostShared>,
}

impl EncoderStage {
    pub fn new(
        encoder: Encoder,
        events: Receiver<EncoderEvent>,
        net: Handle<HostCommand>,
        shared: Arc<HostShared>,
    ) -> Self {
        EncoderStage {
            cfg: encoder.config().clone(),
            encoder,
            frame_number: 0,
            keyframe_wanted: true,
            target_kbps: None,
            app_keyframe: AtomicBool::new(false),
            events,
            net,
            shared,
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

    /// Whether the next frame must be sent even if nothing changed (a keyframe was asked for:
    /// a client joined, or lost a frame).
    pub fn must_send(&mut self) -> bool {
        self.poll_events();
        self.keyframe_wanted
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
            self.encoder = Encoder::new(cfg.clone())?;
            self.cfg = cfg;
            self.keyframe_wanted = true;
            s.note(format!("the source is now {w}x{h}: new encoder, keyframe"));
        }
        if let Some(target) = self.target_kbps {
            if target != self.encoder.config().bitrate_kbps {
                self.encoder.set_bitrate(target)?;
                s.counters.bitrate_changes.fetch_add(1, Ordering::Relaxed);
            }
        }
        let start = now_us();
        let force = std::mem::take(&mut self.keyframe_wanted);
        let encoded = self.encoder.encode_picture(picture, force)?;
        let c = &s.counters;
        c.encoded.fetch_add(1, Ordering::Relaxed);
        if encoded.keyframe {
            c.keyframes.fetch_add(1, Ordering::Relaxed);
        }
        let frame_number = self.frame_number;
        let bytes = encoded.data.len();
        {
            let mut sm = lock(&s.samples);
            sm.queue.push_us(start as i64 - capture_us as i64);
            sm.convert.push_us(encoded.convert_us as i64);
            sm.encode.push_us(encoded.encode_us as i64);
            sm.frame_bytes.push(bytes as f64 / 1000.0);
        }
        let timing = FrameTiming {
            frame_number,
            capture_dur_us,
            convert_us: encoded.convert_us as u32,
            encode_us: encoded.encode_us as u32,
            send_us: 0,
            send_done_us: 0,
            frame_bytes: bytes as u32,
            // The host's counts: the session makes them each client's (from its first frame).
            captured: c.captured.load(Ordering::Relaxed) as u32,
            encoded: c.encoded.load(Ordering::Relaxed) as u32,
            dropped: s.frames.replaced() as u32,
        };
        let handed = self.net.send(HostCommand::Frame(OutgoingFrame {
            frame_number,
            capture_us,
            keyframe: encoded.keyframe,
            // Shared by every client's copy and the retransmission ring: never copied.
            data: Arc::new(encoded.data),
            handed_us: now_us(),
            timing,
        }));
        if !handed {
            return Err(HostError::Stopped(s.fatal()));
        }
        self.frame_number = self.frame_number.wrapping_add(1);
        Ok(SendInfo {
            sent: true,
            frame_number,
            keyframe: encoded.keyframe,
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

    fn frames(mailbox: &driver::Mailbox<HostCommand>) -> Vec<(u32, bool)> {
        mailbox
            .drain()
            .into_iter()
            .filter_map(|c| match c {
                HostCommand::Frame(f) => Some((f.frame_number, f.keyframe)),
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
        let stage = EncoderStage::new(Encoder::new(cfg).unwrap(), rx, net, shared.clone());
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
    fn numbers_frames_per_stream_and_follows_the_drivers_events() {
        let (mut stage, shared, mailbox, events) = stage();
        let pixels = BgraFrame::new(128, 72).unwrap();
        let picture = bgra(&pixels);
        assert!(stage.must_send(), "the first frame is a keyframe");
        shared.link.set_clients(1);
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
        // Another client joins (the driver asks for its keyframe) and a new controller takes
        // over: the numbering goes on, one stream for all.
        shared.link.set_clients(2);
        shared.link.new_controller();
        events.send(EncoderEvent::Keyframe).unwrap();
        stage.send(&picture, now_us(), 0).unwrap();
        assert_eq!(
            frames(&mailbox),
            vec![(0, true), (1, false), (2, true), (3, false), (4, true)]
        );
        assert_eq!(shared.counters.encoded.load(Ordering::Relaxed), 5);
        assert_eq!(shared.counters.keyframes.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_frame_carries_the_hosts_counts_for_the_session_to_make_each_clients() {
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
        shared.link.set_clients(1);
        for _ in 0..3 {
            c.captured.fetch_add(1, Ordering::Relaxed);
            stage.send(&picture, now_us(), 0).unwrap();
        }
        assert_eq!(counts(&mailbox), vec![(1, 1), (2, 2), (3, 3)]);
    }

    #[test]
    fn a_stopped_driver_is_an_error_not_a_silent_drop() {
        let (mut stage, shared, mailbox, _events) = stage();
        drop(mailbox);
        let pixels = BgraFrame::new(128, 72).unwrap();
        let picture = bgra(&pixels);
        shared.link.set_clients(1);
        assert!(matches!(
            stage.send(&picture, now_us(), 0),
            Err(HostError::Stopped(_))
        ));
    }
}
