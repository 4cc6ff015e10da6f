//! The encoder stage: converts and encodes a picture, numbers it in the host's one stream and
//! hands it to the network driver, which sends it to every client, then to the other
//! consumers (RTSP). Used by the encoder thread, the capture threads and the application's
//! [`FrameSender`] alike.
//!
//! It follows the clients through [`EncoderEvent`]s from the driver (a keyframe request — a
//! client lost a frame, or one joined —, the adaptive bitrate's new target, the stream's
//! codec).

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use untether_media::codec::{Codec, EncodedFrame, InputPicture};
use untether_proto::{FrameTiming, Micros, PoseSample};

use super::commands::{HostCommand, OutgoingFrame};
use super::consumer::EncodedVideo;
use super::encode_slices::{self, OpenedVideo, SliceTarget, SlicedFrame, VideoEncoder};
use super::error::HostError;
use super::shared::{lock, HostShared};
use crate::clock::now_us;
use crate::driver::Handle;

mod bitrate;
mod pending;
mod plan;
mod shape;

use bitrate::BitrateTarget;
use pending::{Inside, Pending};
pub(crate) use plan::{open_encoders, EncoderPlan};

/// What the network driver tells the encoder stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EncoderEvent {
    /// A client lost a frame, or one joined: the next one is a keyframe.
    Keyframe,
    /// The adaptive bitrate controller's new target, kbit/s (x264 and NVENC reconfigure their
    /// rate control, no keyframe; other encoders keep their rate).
    Bitrate(u32),
    /// The stream's codec, as the session chose it for the first client to connect (the
    /// others join that stream): a different one opens its encoder.
    Codec(Codec),
    /// The stream's size and frame rate as the first client asked for them (None: the
    /// host's own), granted within the host's limits: pictures are scaled down and dropped
    /// to them.
    Shape {
        size: Option<(u32, u32)>,
        fps: Option<u32>,
    },
    /// The operator's frame rate ceiling (the dashboard; None: none): pictures are dropped
    /// to the lower of it and the stream's rate.
    FpsCeiling(Option<u32>),
}

/// What a send did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendInfo {
    /// False when no client is connected and no consumer (RTSP) has a viewer (nothing was
    /// encoded), or the encoder keeps the picture for now (an encoder with a frame of delay:
    /// its frame comes with the next one).
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
    encoder: VideoEncoder,
    plan: EncoderPlan,
    /// The stream's codec (every client gets it).
    codec: Codec,
    /// The stream's next frame number (every client sees the same numbers).
    frame_number: u32,
    keyframe_wanted: bool,
    /// The adaptive bitrate's target, as the encoder follows it.
    bitrate: BitrateTarget,
    events: Receiver<EncoderEvent>,
    net: Handle<HostCommand>,
    shared: Arc<HostShared>,
    /// Pictures handed to the current encoder, and those it has not handed back yet.
    pending: Pending,
    shape: shape::StreamShape,
}

impl EncoderStage {
    pub fn new(
        opened: OpenedVideo,
        plan: EncoderPlan,
        events: Receiver<EncoderEvent>,
        net: Handle<HostCommand>,
        shared: Arc<HostShared>,
    ) -> Self {
        if let Some(note) = &opened.note {
            shared.note(note.clone());
        }
        shared.set_encoder(opened.encoder.info());
        EncoderStage {
            codec: opened.encoder.info().codec,
            encoder: opened.encoder,
            plan,
            frame_number: 0,
            keyframe_wanted: true,
            bitrate: BitrateTarget::default(),
            events,
            net,
            shared,
            pending: Pending::default(),
            shape: shape::StreamShape::default(),
        }
    }

    fn poll_events(&mut self) {
        while let Ok(e) = self.events.try_recv() {
            match e {
                EncoderEvent::Keyframe => self.keyframe_wanted = true,
                EncoderEvent::Bitrate(kbps) => self.bitrate.set(kbps),
                EncoderEvent::Codec(c) => self.codec = c,
                EncoderEvent::Shape { size, fps } => self.shape.set(size, fps),
                EncoderEvent::FpsCeiling(fps) => self.shape.set_ceiling(fps),
            }
        }
    }

    /// Whether the next frame must be sent even if nothing changed (a keyframe was asked for:
    /// a client joined, or lost a frame; or the stream changes codec). Whether a joining
    /// client waits for the stream's next refresh instead is the session's decision (the
    /// refresh period is in its parameters).
    pub fn must_send(&mut self) -> bool {
        self.poll_events();
        self.keyframe_wanted || self.codec != self.encoder.info().codec
    }

    /// A new encoder (another codec or size), starting with a keyframe; the pictures inside
    /// the old one are dropped.
    fn reopen(&mut self, w: u32, h: u32) -> Result<(), HostError> {
        let kbps = self.bitrate.kbps_or(self.encoder.config().bitrate_kbps);
        let opened = self.plan.open(self.codec, w, h, kbps)?;
        if let Some(note) = &opened.note {
            self.shared.note(note.clone());
        }
        self.shared.set_encoder(opened.encoder.info());
        self.encoder = opened.encoder;
        self.bitrate.reset_refusal();
        self.pending.reset();
        self.keyframe_wanted = true;
        Ok(())
    }

    /// Encodes `picture` (captured at `capture_us`, the capture took `capture_dur_us`,
    /// rendered for the client's head pose `pose`) and hands the frame that comes out to the
    /// network driver; shaped first to the stream the first client asked for (a picture
    /// beyond its frame rate is not sent, a larger one is scaled down to its size).
    pub fn send(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Micros,
        capture_dur_us: u32,
        pose: Option<PoseSample>,
    ) -> Result<SendInfo, HostError> {
        self.poll_events();
        if !self.shape.due(capture_us) {
            return Ok(SendInfo::default());
        }
        let Some((w, h)) = self.shape.size_for(picture) else {
            return self.send_shaped(picture, capture_us, capture_dur_us, pose);
        };
        let mut scaler = match self.shape.scaler.take() {
            Some(s) if s.fits(picture, w, h) => s,
            _ => untether_media::scale::Scaler::new(picture, w, h)?,
        };
        let sent = match scaler.scale(picture) {
            Ok(p) => self.send_shaped(&p, capture_us, capture_dur_us, pose),
            Err(e) => Err(e.into()),
        };
        self.shape.scaler = Some(scaler);
        sent
    }

    fn send_shaped(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Micros,
        capture_dur_us: u32,
        pose: Option<PoseSample>,
    ) -> Result<SendInfo, HostError> {
        let shared = self.shared.clone();
        let s = &*shared;
        self.poll_events();
        let (w, h) = picture.size();
        let cfg = self.encoder.config();
        if (w, h) != (cfg.width, cfg.height) {
            // The source changed size: the client's decoder follows the new parameter sets.
            self.reopen(w, h)?;
            s.note(format!("the source is now {w}x{h}: new encoder, keyframe"));
        } else if self.codec != self.encoder.info().codec {
            self.reopen(w, h)?;
            s.note(format!(
                "the stream is now {} (the first client's choice): encoder {}",
                self.codec,
                self.encoder.info().name
            ));
        }
        self.bitrate.apply(&mut self.encoder, s)?;
        let start = now_us();
        let force = std::mem::take(&mut self.keyframe_wanted);
        let picture_meta = self.pending.push(capture_us, capture_dur_us, start, pose);
        let encoder = match &mut self.encoder {
            VideoEncoder::Whole(e) => e,
            VideoEncoder::Sliced(sliced) => {
                // No delay: this picture's slices are on their way when x264 returns.
                self.pending.clear();
                let to = SliceTarget {
                    net: &self.net,
                    frame_number: self.frame_number,
                    capture_us,
                    pose,
                    whole: self.plan.whole_frames || !self.shared.consumers.is_empty(),
                };
                let (frame, encoded) = encode_slices::encode(sliced, picture, force, &to)?;
                return self.hand_over(encoded, picture_meta, force, Some(frame));
            }
        };
        let Some(encoded) = encoder.encode_picture(picture, force)? else {
            // Inside the encoder for now; an asked-for keyframe is asked for again.
            self.keyframe_wanted |= force;
            return Ok(SendInfo::default());
        };
        // The picture this frame encodes (the oldest inside, for an encoder with a delay).
        let meta = self.pending.take(encoded.input).unwrap_or(Inside {
            input: encoded.input,
            ..picture_meta
        });
        if force && !encoded.keyframe && self.encoder.info().keyframes_on_demand {
            self.keyframe_wanted = true;
        }
        self.hand_over(encoded, meta, force, None)
    }

    /// Counts and times an encoded frame and hands it to the network driver (a frame sent in
    /// slices: its end, its slices have gone already), then to the other consumers.
    fn hand_over(
        &mut self,
        encoded: EncodedFrame,
        meta: Inside,
        forced: bool,
        sliced: Option<SlicedFrame>,
    ) -> Result<SendInfo, HostError> {
        let s = &*self.shared;
        let c = &s.counters;
        c.encoded.fetch_add(1, Ordering::Relaxed);
        if encoded.keyframe {
            c.keyframes.fetch_add(1, Ordering::Relaxed);
            if forced {
                c.forced_keyframes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if encoded.refresh_start {
            c.refresh_sweeps.fetch_add(1, Ordering::Relaxed);
        }
        let largest = if encoded.keyframe {
            &c.largest_keyframe
        } else {
            &c.largest_frame
        };
        let frame_number = self.frame_number;
        let bytes = sliced.as_ref().map_or(encoded.data.len(), |f| f.info.bytes);
        largest.fetch_max(bytes as u64, Ordering::Relaxed);
        {
            let mut sm = lock(&s.samples);
            sm.queue
                .push_us(meta.start_us as i64 - meta.capture_us as i64);
            sm.convert.push_us(encoded.convert_us as i64);
            sm.encode.push_us(encoded.encode_us as i64);
            sm.frame_bytes.push(bytes as f64 / 1000.0);
            if let Some(f) = &sliced {
                let since = |t: Micros| t as i64 - meta.capture_us as i64;
                sm.first_slice_out.push_us(since(f.first_out_us));
                sm.last_slice_out.push_us(since(f.last_out_us));
            }
        }
        let timing = FrameTiming {
            frame_number,
            capture_dur_us: meta.capture_dur_us,
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
        // Shared by every client's copy, the retransmission ring and the other consumers:
        // never copied.
        let data = Arc::new(encoded.data);
        let handed = self.net.send(match &sliced {
            None => HostCommand::Frame(OutgoingFrame {
                frame_number,
                capture_us: meta.capture_us,
                keyframe: encoded.keyframe,
                refresh_start: encoded.refresh_start,
                data: data.clone(),
                handed_us: now_us(),
                timing,
                pose: meta.pose,
            }),
            Some(f) => HostCommand::SlicesDone(f.done(
                frame_number,
                meta.capture_us,
                (!data.is_empty()).then(|| data.clone()),
                timing,
            )),
        });
        if !handed {
            return Err(HostError::Stopped(s.fatal()));
        }
        // After our own clients, the other consumers (RTSP): the same access unit, shared
        // (a frame sent in slices: its slices put together in picture order).
        if !s.consumers.is_empty() && !data.is_empty() {
            s.consumers.video(&EncodedVideo {
                data,
                keyframe: encoded.keyframe,
                capture_us: meta.capture_us,
            });
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
        self.send_frame(picture, capture_us, None)
    }

    /// Like [`send`](Self::send), for a frame rendered for the client's head pose `pose` (as
    /// read from [`crate::host::Host::head_pose`]): the client gets the pose with the frame,
    /// re-projects the frame to its newest pose at display time and measures pose-to-photon.
    pub fn send_frame(
        &mut self,
        picture: &InputPicture<'_>,
        capture_us: Option<Micros>,
        pose: Option<PoseSample>,
    ) -> Result<SendInfo, HostError> {
        let t0 = now_us();
        let s = self.stage.shared.clone();
        if s.stopped() {
            return Err(HostError::Stopped(s.fatal()));
        }
        if !s.watched() {
            return Ok(SendInfo::default());
        }
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        picture.check()?;
        let mut info = self
            .stage
            .send(picture, capture_us.unwrap_or(t0), 0, pose)?;
        info.blocked_us = now_us() - t0;
        lock(&s.samples)
            .sync_blocked
            .push_us(info.blocked_us as i64);
        Ok(info)
    }

    /// Asks for a keyframe at the next frame. The request goes through the session's one
    /// keyframe gate, as every client's does: within its cooldown (`host.keyframe_cooldown_ms`)
    /// of the last keyframe honoured it is ignored (counted), so an application asking every
    /// frame cannot make the stream all keyframes.
    pub fn request_keyframe(&self) {
        self.stage.net.send(HostCommand::AppKeyframe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver;
    use crate::host::options::{HostOptions, HostSetup};
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

    /// A 512x288 encoder stage (the video settings `v`), its driver's mailbox and its event
    /// sender.
    fn stage_with(v: &crate::config::VideoConfig) -> Stage {
        let plan = EncoderPlan::new(v, &HostSetup::default(), 512, 288);
        let opened = plan.open(v.codecs()[0], 512, 288, v.bitrate_kbps).unwrap();
        let shared = Arc::new(HostShared::new((0, 0)));
        let (net, mailbox) = driver::channel().unwrap();
        let (events, rx) = mpsc::channel();
        let stage = EncoderStage::new(opened, plan, rx, net, shared.clone());
        (stage, shared, mailbox, events)
    }

    fn stage() -> Stage {
        stage_with(&HostOptions::default().video)
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
        let pixels = BgraFrame::new(512, 288).unwrap();
        let picture = bgra(&pixels);
        assert!(stage.must_send(), "the first frame is a keyframe");
        shared.audience.set_clients(1);
        for _ in 0..2 {
            stage.send(&picture, now_us(), 0, None).unwrap();
        }
        events.send(EncoderEvent::Keyframe).unwrap();
        assert!(stage.must_send());
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert!(!stage.must_send());
        events.send(EncoderEvent::Bitrate(500)).unwrap();
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert_eq!(shared.counters.bitrate_changes.load(Ordering::Relaxed), 1);
        // Another client joins (the driver asks for its keyframe) and a new controller takes
        // over: the numbering goes on, one stream for all.
        shared.audience.set_clients(2);
        shared.audience.new_controller();
        events.send(EncoderEvent::Keyframe).unwrap();
        stage.send(&picture, now_us(), 0, None).unwrap();
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
        let pixels = BgraFrame::new(512, 288).unwrap();
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
        shared.audience.set_clients(1);
        for _ in 0..3 {
            c.captured.fetch_add(1, Ordering::Relaxed);
            stage.send(&picture, now_us(), 0, None).unwrap();
        }
        assert_eq!(counts(&mailbox), vec![(1, 1), (2, 2), (3, 3)]);
    }

    #[test]
    fn a_stopped_driver_is_an_error_not_a_silent_drop() {
        let (mut stage, shared, mailbox, _events) = stage();
        drop(mailbox);
        let pixels = BgraFrame::new(512, 288).unwrap();
        let picture = bgra(&pixels);
        shared.audience.set_clients(1);
        assert!(matches!(
            stage.send(&picture, now_us(), 0, None),
            Err(HostError::Stopped(_))
        ));
    }

    use untether_media::codec::Refresh;

    fn flagged(m: &driver::Mailbox<HostCommand>) -> Vec<(u32, bool, bool)> {
        m.drain()
            .into_iter()
            .filter_map(|c| match c {
                HostCommand::Frame(f) => Some((f.frame_number, f.keyframe, f.refresh_start)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn with_intra_refresh_the_stream_sweeps_and_makes_keyframes_only_when_asked() {
        let mut v = HostOptions::default().video;
        v.refresh = Refresh::Intra;
        v.refresh_period = 4;
        let plan = EncoderPlan::new(&v, &HostSetup::default(), 512, 288);
        let opened = plan.open(Codec::H264, 512, 288, 2000).unwrap();
        assert_eq!(opened.encoder.info().refresh_frames(), 4);
        let shared = Arc::new(HostShared::new((0, 0)));
        let (net, mailbox) = driver::channel().unwrap();
        let (events, rx) = mpsc::channel();
        let mut stage = EncoderStage::new(opened, plan, rx, net, shared.clone());
        let pixels = BgraFrame::new(512, 288).unwrap();
        let picture = InputPicture::Bgra {
            width: 512,
            height: 288,
            data: &pixels.data,
            stride: pixels.stride,
        };
        shared.audience.set_clients(1);
        for _ in 0..6 {
            stage.send(&picture, now_us(), 0, None).unwrap();
        }
        // The encoder's first frame is an IDR; sweeps start every 4 frames after it.
        assert_eq!(
            flagged(&mailbox),
            vec![
                (0, true, false),
                (1, false, false),
                (2, false, false),
                (3, false, false),
                (4, false, true),
                (5, false, false)
            ]
        );
        // A second client joins mid-sweep: the session asks for no keyframe (it waits for the
        // next sweep), and the stream goes on.
        shared.audience.set_clients(2);
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert_eq!(flagged(&mailbox), vec![(6, false, false)]);
        // Asked for (a client's last resort): an IDR.
        events.send(EncoderEvent::Keyframe).unwrap();
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert_eq!(flagged(&mailbox), vec![(7, true, false)]);
        let c = &shared.counters;
        assert_eq!(c.refresh_sweeps.load(Ordering::Relaxed), 1);
        assert_eq!(c.forced_keyframes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_stream_that_changes_codec_gets_another_encoder_starting_with_a_keyframe() {
        let mut v = HostOptions::default().video;
        v.selection.codec = None; // auto
        let (mut stage, shared, mailbox, events) = stage_with(&v);
        let pixels = BgraFrame::new(512, 288).unwrap();
        let picture = InputPicture::Bgra {
            width: 512,
            height: 288,
            data: &pixels.data,
            stride: pixels.stride,
        };
        shared.audience.set_clients(1);
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert_eq!(stage.encoder.info().name, "libx264");
        assert!(!stage.must_send());
        // The first client of a new run of the stream decodes HEVC first.
        events.send(EncoderEvent::Codec(Codec::Hevc)).unwrap();
        assert!(stage.must_send());
        stage.send(&picture, now_us(), 0, None).unwrap();
        assert_eq!(stage.encoder.info().name, "libx265");
        assert_eq!(flagged(&mailbox), vec![(0, true, false), (1, true, false)]);
    }
}
