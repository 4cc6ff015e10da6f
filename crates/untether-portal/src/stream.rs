//! The screen cast's PipeWire stream through GStreamer: `pipewiresrc fd=N path=NODE !
//! videoconvert ! video/x-raw,format=BGRx ! appsink`. The appsink's callback keeps only the
//! newest frame (a frame replaced before the host took it is counted as dropped), stamped with
//! its arrival time on the host's clock, moved back by how long the frame spent in the
//! pipeline where GStreamer's clock says so.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use gst::prelude::*;
use untether_clock::now_us;

use crate::PortalError;

/// One frame of the stream: packed BGRx rows.
pub struct PortalFrame {
    pub sample: gst::Sample,
    pub width: u32,
    pub height: u32,
    pub stride: usize,
    /// When the frame was captured (µs of CLOCK_MONOTONIC): its arrival, less its time in
    /// the pipeline where the pipeline's clock gives it.
    pub capture_us: u64,
}

#[derive(Default)]
struct Latest {
    frame: Option<PortalFrame>,
    ended: Option<String>,
}

/// Where the appsink's streaming thread leaves the newest frame.
#[derive(Default)]
struct Mailbox {
    latest: Mutex<Latest>,
    ready: Condvar,
    dropped: AtomicU64,
    frames: AtomicU64,
    /// Frames whose capture time came from the pipeline clock (the rest: arrival time).
    clocked: AtomicU64,
}

/// The running GStreamer pipeline of one PipeWire node.
pub struct PipeWireStream {
    pipeline: gst::Pipeline,
    mailbox: Arc<Mailbox>,
    _remote: Option<OwnedFd>,
}

/// Whether GStreamer has the `pipewiresrc` element (Debian: gstreamer1.0-pipewire).
pub fn pipewiresrc_available() -> Result<(), PortalError> {
    gst::init().map_err(|e| PortalError::Stream(format!("GStreamer: {e}")))?;
    gst::ElementFactory::find("pipewiresrc")
        .map(|_| ())
        .ok_or(PortalError::NoPipeWireSrc)
}

fn frame_of(sink: &gst_app::AppSink, sample: gst::Sample) -> Option<(PortalFrame, bool)> {
    let arrival = now_us();
    let caps = sample.caps()?;
    let st = caps.structure(0)?;
    let width = u32::try_from(st.get::<i32>("width").ok()?).ok()?;
    let height = u32::try_from(st.get::<i32>("height").ok()?).ok()?;
    let buffer = sample.buffer()?;
    // The time the frame spent between its timestamp and now, on the pipeline's clock.
    let in_pipeline = (|| {
        let clock = sink.clock()?;
        let base = sink.base_time()?;
        let pts = buffer.pts()?;
        let now = clock.time();
        let age = now.checked_sub(base + pts)?;
        (age < gst::ClockTime::SECOND).then(|| age.useconds())
    })();
    let stride = width as usize * 4;
    if (buffer.size()) < stride * height as usize {
        return None;
    }
    Some((
        PortalFrame {
            width,
            height,
            stride,
            capture_us: arrival - in_pipeline.unwrap_or(0).min(arrival),
            sample,
        },
        in_pipeline.is_some(),
    ))
}

impl PipeWireStream {
    /// Starts reading `node` from the PipeWire `remote` the portal opened.
    pub fn start(remote: OwnedFd, node: u32) -> Result<PipeWireStream, PortalError> {
        Self::start_with(Some(remote), ("path", node.to_string()))
    }

    /// Starts reading the node named `target` (a `node.name` or an object serial) of the
    /// PipeWire daemon of this session (`PIPEWIRE_RUNTIME_DIR` / `XDG_RUNTIME_DIR`).
    pub fn start_target(target: &str) -> Result<PipeWireStream, PortalError> {
        Self::start_with(None, ("target-object", target.to_string()))
    }

    fn start_with(
        remote: Option<OwnedFd>,
        (key, node): (&str, String),
    ) -> Result<PipeWireStream, PortalError> {
        pipewiresrc_available()?;
        let bad =
            |what: &str, e: &dyn std::fmt::Display| PortalError::Stream(format!("{what}: {e}"));
        let mut src = gst::ElementFactory::make("pipewiresrc")
            .property(key, node)
            .property("always-copy", true);
        if let Some(fd) = &remote {
            src = src.property("fd", fd.as_raw_fd());
        }
        let src = src.build().map_err(|e| bad("pipewiresrc", &e))?;
        let convert = gst::ElementFactory::make("videoconvert")
            .build()
            .map_err(|e| bad("videoconvert (gstreamer1.0-plugins-base)", &e))?;
        let caps = gst::Caps::builder("video/x-raw")
            .field("format", "BGRx")
            .build();
        let sink = gst_app::AppSink::builder()
            .caps(&caps)
            .max_buffers(1)
            .drop(true)
            .sync(false)
            .build();
        let pipeline = gst::Pipeline::new();
        pipeline
            .add_many([&src, &convert, sink.upcast_ref()])
            .map_err(|e| bad("pipeline", &e))?;
        gst::Element::link_many([&src, &convert, sink.upcast_ref()])
            .map_err(|e| bad("pipeline", &e))?;
        let mailbox = Arc::new(Mailbox::default());
        let mb = mailbox.clone();
        sink.set_callbacks(
            gst_app::AppSinkCallbacks::builder()
                .new_sample(move |sink| {
                    let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                    if let Some((frame, clocked)) = frame_of(sink, sample) {
                        mb.frames.fetch_add(1, Ordering::Relaxed);
                        if clocked {
                            mb.clocked.fetch_add(1, Ordering::Relaxed);
                        }
                        let mut l = mb.latest.lock().unwrap_or_else(|e| e.into_inner());
                        if l.frame.replace(frame).is_some() {
                            mb.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        mb.ready.notify_all();
                    }
                    Ok(gst::FlowSuccess::Ok)
                })
                .build(),
        );
        // Errors and the end of the stream (the user stopped sharing) wake the taker.
        let bus = pipeline.bus().ok_or_else(|| bad("pipeline", &"no bus"))?;
        let mb = mailbox.clone();
        bus.set_sync_handler(move |_, msg| {
            let end = match msg.view() {
                gst::MessageView::Error(e) => Some(format!(
                    "{} ({})",
                    e.error(),
                    e.debug().map(|d| d.to_string()).unwrap_or_default()
                )),
                gst::MessageView::Eos(_) => Some("the screen cast ended".into()),
                _ => None,
            };
            if let Some(end) = end {
                let mut l = mb.latest.lock().unwrap_or_else(|e| e.into_inner());
                l.ended.get_or_insert(end);
                mb.ready.notify_all();
            }
            gst::BusSyncReply::Drop
        });
        if let Err(e) = pipeline.set_state(gst::State::Playing) {
            let _ = pipeline.set_state(gst::State::Null);
            return Err(bad("pipewiresrc does not start", &e));
        }
        Ok(PipeWireStream {
            pipeline,
            mailbox,
            _remote: remote,
        })
    }

    /// The newest frame not yet taken, waiting up to `timeout` for one (None: none came).
    /// An error once the stream failed or ended.
    pub fn take(&self, timeout: Duration) -> Result<Option<PortalFrame>, PortalError> {
        let mb = &self.mailbox;
        let l = mb.latest.lock().unwrap_or_else(|e| e.into_inner());
        let (mut l, _) = mb
            .ready
            .wait_timeout_while(l, timeout, |l| l.frame.is_none() && l.ended.is_none())
            .unwrap_or_else(|e| e.into_inner());
        if let Some(f) = l.frame.take() {
            return Ok(Some(f));
        }
        match &l.ended {
            Some(e) => Err(PortalError::Stream(e.clone())),
            None => Ok(None),
        }
    }

    /// Frames replaced before they were taken.
    pub fn dropped(&self) -> u64 {
        self.mailbox.dropped.load(Ordering::Relaxed)
    }

    /// Frames received, and how many of them were timed by the pipeline's clock.
    pub fn frames(&self) -> (u64, u64) {
        (
            self.mailbox.frames.load(Ordering::Relaxed),
            self.mailbox.clocked.load(Ordering::Relaxed),
        )
    }
}

impl Drop for PipeWireStream {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}
