//! One RTSP media: the pipeline gst-rtsp-server runs for the stream (shared by all its
//! viewers), `appsrc ! rtph264pay` for video and `appsrc ! rtpopuspay` for audio, and how a
//! frame or a packet goes into it.
//!
//! The access unit is wrapped, not copied: the `gst::Buffer` holds a clone of the encoder's
//! `Arc`. rtph264pay cuts it into RTP packets (sub-buffers of that memory plus the RTP and
//! FU-A headers); gst-rtsp-server sends each packet to every viewer (one `sendmsg` per UDP
//! viewer, the RTSP connection for TCP viewers).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gst::glib;
use gst::prelude::*;
use gst_app::AppSrc;
use gst_rtsp_server::prelude::{RTSPMediaExt, RTSPStreamExt};
use gst_rtsp_server::{RTSPMedia, RTSPMediaStatus};
use untether::host::EncodedVideo;
use untether_proto::{AudioPacket, Micros};

use crate::feed::{running_time_ns, AudioFeed, Feed, LossReports, Offer};

/// RTP payload types in the SDP (dynamic range).
const PT_H264: u32 = 96;
const PT_OPUS: u32 = 97;

/// The media pipeline: video, and audio when the host has it.
pub(crate) fn launch_line(audio_channels: Option<u8>, queue_frames: u32, mtu: u32) -> String {
    // The appsrc is live (timestamps are capture times mapped to the pipeline's clock) and
    // never blocks: the host checks its level before pushing (feed.rs), the leaky bound is
    // only a safety net. rtph264pay: config-interval=0, it inserts no SPS/PPS of its own:
    // x264 already puts them in front of every keyframe (and the SDP carries them), and
    // with -1 rtph264pay puts another copy in front of *each IDR slice*, which splits a
    // sliced keyframe into several access units for ffmpeg (half pictures, "corrupt decoded
    // frame"). Aggregation without waiting for the next NAL.
    let mut line = format!(
        "( appsrc name=video is-live=true format=time do-timestamp=false min-latency=0 \
         block=false max-buffers={max} leaky-type=downstream \
         caps=video/x-h264,stream-format=byte-stream,alignment=au \
         ! rtph264pay name=pay0 pt={PT_H264} config-interval=0 aggregate-mode=zero-latency mtu={mtu}",
        max = queue_frames + 2,
    );
    if let Some(ch) = audio_channels {
        line.push_str(&format!(
            " appsrc name=audio is-live=true format=time do-timestamp=false min-latency=0 \
             block=false max-buffers={audio_max} leaky-type=downstream \
             caps=audio/x-opus,channel-mapping-family=0,channels={ch},rate=48000 \
             ! rtpopuspay name=pay1 pt={PT_OPUS} mtu={mtu}",
            audio_max = crate::feed::MAX_AUDIO_QUEUE_MS / 10 + 10,
        ));
    }
    line.push_str(" )");
    line
}

/// What a push did, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    Sent,
    Dropped,
    Skipped,
    /// The pipeline is shutting down (flushing): nothing to count.
    Gone,
}

/// One prepared media and its feeds.
pub(crate) struct Media {
    pub media: RTSPMedia,
    video: AppSrc,
    audio: Option<AppSrc>,
    feed: Feed,
    audio_feed: AudioFeed,
    /// Set by a player's keyframe request (RTCP PLI/FIR, which rtpbin turns into an
    /// upstream force-key-unit event), or by its receiver report of lost packets.
    pli: Arc<AtomicBool>,
    /// PLAY requests so far.
    plays: u32,
    /// gst-rtsp-server said the media is prepared (its status can be asked without waiting).
    prepared: Arc<AtomicBool>,
}

/// A wrapper that lets a `gst::Buffer` hold the encoder's `Arc` without a copy.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl Media {
    /// The feeds of a media gst-rtsp-server just made; None if its pipeline lacks our appsrc.
    pub fn new(
        media: &RTSPMedia,
        queue_frames: u32,
        keyframe_interval_ms: u64,
        fps: u32,
    ) -> Option<Media> {
        let bin = media.element().downcast::<gst::Bin>().ok()?;
        let video = bin.by_name("video")?.downcast::<AppSrc>().ok()?;
        let audio = bin
            .by_name("audio")
            .and_then(|e| e.downcast::<AppSrc>().ok());
        let pli = Arc::new(AtomicBool::new(false));
        if let Some(pad) = video.static_pad("src") {
            let flag = pli.clone();
            pad.add_probe(gst::PadProbeType::EVENT_UPSTREAM, move |_, info| {
                if let Some(gst::PadProbeData::Event(ev)) = &info.data {
                    let force_key_unit = ev.type_() == gst::EventType::CustomUpstream
                        && ev
                            .structure()
                            .is_some_and(|s| s.name() == "GstForceKeyUnit");
                    if force_key_unit {
                        flag.store(true, Ordering::Relaxed);
                    }
                }
                gst::PadProbeReturn::Ok
            });
        }
        watch_receiver_reports(media, pli.clone());
        let prepared = Arc::new(AtomicBool::new(false));
        {
            let prepared = prepared.clone();
            media.connect_prepared(move |_| prepared.store(true, Ordering::Relaxed));
        }
        Some(Media {
            media: media.clone(),
            video,
            audio,
            feed: Feed::new(queue_frames, keyframe_interval_ms),
            audio_feed: AudioFeed::new(queue_frames, fps),
            pli,
            plays: 0,
            prepared,
        })
    }

    /// Whether the media is going down or down but still known (the last connection that
    /// used it closed; it leaves the server's cache when its `unprepared` signal has run):
    /// until then gst-rtsp-server finds it for a new viewer and cannot prepare it (503, "media
    /// was not unprepared", "can not reuse media").
    pub fn going_down(&self) -> bool {
        // The status is asked only once the media was prepared: while it prepares,
        // gst_rtsp_media_get_status waits (up to 20 s) for the preparation to end.
        self.prepared.load(Ordering::Relaxed)
            && matches!(
                self.media.status(),
                RTSPMediaStatus::Unpreparing | RTSPMediaStatus::Unprepared
            )
    }

    /// A viewer starts playing. The media's first viewer gets the keyframe the media was
    /// prepared with (gst-rtsp-server holds it until that PLAY); a later one needs a new one.
    pub fn viewer_plays(&mut self) {
        if self.plays > 0 {
            self.feed.want_keyframe();
        }
        self.plays += 1;
    }

    /// Whether the encoder should be asked for a keyframe for this media.
    pub fn needs_keyframe(&mut self) -> bool {
        if self.pli.swap(false, Ordering::Relaxed) {
            self.feed.want_keyframe();
        }
        self.feed.needs_keyframe(untether::clock::now_us())
    }

    /// Offers a frame to the packetizer (never blocks).
    pub fn push_video(&mut self, frame: &EncodedVideo) -> Pushed {
        let queued = self.video.current_level_buffers();
        match self
            .feed
            .offer(frame.keyframe, queued, untether::clock::now_us())
        {
            Offer::Drop => return Pushed::Dropped,
            Offer::Skip => return Pushed::Skipped,
            Offer::Push => {}
        }
        let mut buffer = gst::Buffer::from_slice(Shared(frame.data.clone()));
        let pts = self
            .feed
            .monotonic(pipeline_time(&self.video, frame.capture_us));
        if let Some(b) = buffer.get_mut() {
            b.set_pts(pts.map(gst::ClockTime::from_nseconds));
            if !frame.keyframe {
                b.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
        }
        match self.video.push_buffer(buffer) {
            Ok(_) => Pushed::Sent,
            Err(_) => Pushed::Gone,
        }
    }

    /// Offers an Opus packet (its 10 ms) to the audio packetizer, if the media has audio.
    pub fn push_audio(&mut self, packet: &AudioPacket) -> Option<Pushed> {
        let src = self.audio.as_ref()?;
        if !self.feed.started() {
            // The media is still preparing (gst-rtsp-server holds it until the video's first
            // keyframe): audio from before the picture would only add delay.
            return Some(Pushed::Gone);
        }
        if !self.audio_feed.fits(src.current_level_buffers()) {
            return Some(Pushed::Dropped);
        }
        let mut buffer = gst::Buffer::from_slice(packet.opus.clone());
        let pts = self.audio_feed.monotonic(pipeline_time(src, packet.pts_us));
        if let Some(b) = buffer.get_mut() {
            b.set_pts(pts.map(gst::ClockTime::from_nseconds));
            b.set_duration(gst::ClockTime::from_nseconds(
                u64::from(packet.samples) * 1_000_000_000 / 48_000,
            ));
        }
        Some(match src.push_buffer(buffer) {
            Ok(_) => Pushed::Sent,
            Err(_) => Pushed::Gone,
        })
    }

    /// Ends the streams (the host stops): players see the end instead of a stall.
    pub fn end(&self) {
        let _ = self.video.end_of_stream();
        if let Some(a) = &self.audio {
            let _ = a.end_of_stream();
        }
    }
}

/// Players that lose packets over UDP (a full socket buffer, Wi-Fi) but never send a PLI or
/// FIR (ffmpeg, VLC's live555, GStreamer by default) would show a broken picture until the
/// next keyframe, and with keyframes on demand there is none. Their RTCP receiver reports
/// say how many packets they lost: when that count grows, the next frame asks for a keyframe
/// (behind the host's cooldown, and at most one a second per media: a viewer that keeps
/// losing gets a fresh picture every second), so a lossy viewer heals within a report
/// interval (ffmpeg sends several a second).
fn watch_receiver_reports(media: &RTSPMedia, pli: Arc<AtomicBool>) {
    media.connect_prepared(move |media| {
        // The video is stream 0 (pay0); its RTP session exists once the media is prepared.
        let Some(session) = media.stream(0).and_then(|s| s.rtpsession()) else {
            return;
        };
        let pli = pli.clone();
        let reports = Mutex::new(LossReports::default());
        session.connect("on-ssrc-active", false, move |values| {
            let source = values.get(1)?.get::<glib::Object>().ok()?;
            let stats = source.property::<gst::Structure>("stats");
            if !stats.get::<bool>("have-rb").unwrap_or(false) {
                return None;
            }
            let ssrc = stats.get::<u32>("ssrc").ok()?;
            let lost = stats.get::<i32>("rb-packetslost").ok()?;
            let action = reports
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .report(ssrc, lost, Instant::now());
            if let Some(n) = action.log {
                log::info!(
                    "rtsp: viewers report {n} lost packets (RTCP): asking for keyframes, at most one a second"
                );
            }
            if action.keyframe {
                pli.store(true, Ordering::Relaxed);
            }
            None
        });
    });
}

/// The running time, in `src`'s pipeline, of host instant `at_us`: read the pipeline's clock
/// and base time now (gst-rtsp-server sets a live media PLAYING while it prepares it, so
/// both are there once frames flow). None before that.
fn pipeline_time(src: &AppSrc, at_us: Micros) -> Option<u64> {
    let clock = src.clock()?;
    let base = src.base_time()?;
    let now = untether::clock::now_us();
    running_time_ns(at_us, now, clock.time().nseconds(), base.nseconds())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_line_has_audio_only_when_the_host_does() {
        let v = launch_line(None, 4, 1200);
        assert!(
            v.starts_with("( appsrc name=video") && v.ends_with(" )"),
            "{v}"
        );
        assert!(v.contains("rtph264pay name=pay0 pt=96 config-interval=0"));
        assert!(v.contains("mtu=1200") && v.contains("max-buffers=6"));
        assert!(!v.contains("opus"));
        let av = launch_line(Some(2), 4, 1400);
        assert!(av.contains("rtpopuspay name=pay1 pt=97 mtu=1400"));
        assert!(av.contains("channels=2,rate=48000"));
    }

    #[test]
    fn the_pipeline_parses_with_the_installed_plugins() {
        gst::init().unwrap();
        for line in [launch_line(None, 4, 1200), launch_line(Some(2), 4, 1200)] {
            let bin = gst::parse::launch(&line).unwrap();
            let bin = bin.downcast::<gst::Bin>().unwrap();
            assert!(bin.by_name("video").unwrap().is::<AppSrc>());
            assert!(bin.by_name("pay0").is_some());
        }
    }
}
