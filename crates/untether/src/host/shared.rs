//! What the host's threads share besides the network driver: the stop flag, the failure, the
//! connection state the driver publishes, the frame slot between a source and the encoder,
//! counters and stage samples. The protocol session is not here: the driver owns it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use untether_media::codec::InputPicture;
use untether_media::convert::I420Frame;
use untether_media::BgraFrame;
use untether_proto::{InputRecord, Micros, PoseSample};

use super::consumer::Consumers;
use crate::slot::Slot;
use crate::stats::Samples;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Owned pixels on their way from a source to the encoder thread.
pub(crate) enum Pixels {
    Bgra(BgraFrame),
    I420(I420Frame),
    /// The application's picture in GPU memory (zero-copy encode): its dma-bufs duplicated,
    /// and the application's token held until the encoder is done with it.
    DmaBuf(untether_media::codec::DmaBufFrame),
}

impl Pixels {
    pub(crate) fn picture(&self) -> InputPicture<'_> {
        match self {
            Pixels::Bgra(f) => InputPicture::Bgra {
                width: f.width,
                height: f.height,
                data: &f.data,
                stride: f.stride,
            },
            Pixels::I420(f) => {
                let (w, w2) = (f.width as usize, f.width.div_ceil(2) as usize);
                InputPicture::I420 {
                    width: f.width,
                    height: f.height,
                    planes: [(&f.y, w), (&f.u, w2), (&f.v, w2)],
                }
            }
            Pixels::DmaBuf(f) => InputPicture::DmaBuf(f.picture()),
        }
    }
}

/// A frame as the source produced it.
pub(crate) struct CapturedFrame {
    pub pixels: Pixels,
    pub capture_us: Micros,
    pub capture_dur_us: u32,
    /// The client's head pose the frame was rendered for (None: not rendered for a pose).
    pub pose: Option<PoseSample>,
}

#[derive(Default)]
pub(crate) struct HostSamples {
    pub capture: Samples,
    pub queue: Samples,
    pub convert: Samples,
    pub encode: Samples,
    pub send: Samples,
    /// With pacing on: per frame, the time between its first and last batch not spent
    /// sending (part of `send`).
    pub pace: Samples,
    pub frame_bytes: Samples,
    pub audio_encode: Samples,
    /// Time the caller of a synchronous send was blocked.
    pub sync_blocked: Samples,
    /// Frames sent in slices: capture → first / last slice handed to the network driver.
    pub first_slice_out: Samples,
    pub last_slice_out: Samples,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub captured: AtomicU64,
    pub encoded: AtomicU64,
    pub sent: AtomicU64,
    pub keyframes: AtomicU64,
    pub inputs_applied: AtomicU64,
    pub inputs_dropped: AtomicU64,
    pub send_errors: AtomicU64,
    pub unchanged: AtomicU64,
    /// Frames a source replaced before the host took them (newest wins), e.g. PipeWire's.
    pub source_dropped: AtomicU64,
    pub grab_errors: AtomicU64,
    pub audio_packets: AtomicU64,
    pub bitrate_changes: AtomicU64,
    /// Bitrate targets the encoder could not apply in place (it keeps its rate).
    pub bitrate_changes_refused: AtomicU64,
    /// Keyframes the host asked the encoder for (a joining client, a request, the application).
    pub forced_keyframes: AtomicU64,
    /// Intra-refresh sweeps started.
    pub refresh_sweeps: AtomicU64,
    /// The largest keyframe and the largest other frame encoded, bytes.
    pub largest_keyframe: AtomicU64,
    pub largest_frame: AtomicU64,
    /// Frames whose datagrams went out in more than one paced batch.
    pub paced_frames: AtomicU64,
}

/// What the network driver publishes about its clients (read by the sources and the API).
#[derive(Default)]
pub(crate) struct Audience {
    /// How many clients are connected (0 and no browser: the sources idle).
    clients: AtomicUsize,
    /// A browser (WebRTC) or a WHIP publication takes the stream.
    browsers: AtomicBool,
    /// Bumped when a new controller takes over: the input the scene applies (and counts in
    /// its stamp) is the new controller's from then on.
    epoch: AtomicU64,
}

impl Audience {
    /// Whether any client is connected (one of ours, or a browser).
    pub fn connected(&self) -> bool {
        self.clients() > 0 || self.browsers.load(Ordering::SeqCst)
    }

    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::SeqCst)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub(crate) fn set_clients(&self, n: usize) {
        self.clients.store(n, Ordering::SeqCst);
    }

    /// Whether browsers (or a WHIP publication) take the stream.
    pub(crate) fn set_browsers(&self, on: bool) {
        self.browsers.store(on, Ordering::SeqCst);
    }

    /// A new controller: the next epoch.
    pub(crate) fn new_controller(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }
}

pub(crate) struct HostShared {
    pub stop: AtomicBool,
    pub audience: Audience,
    /// The newest captured frame for the encoder thread (scene and app sources).
    pub frames: Slot<CapturedFrame>,
    pub spare: Mutex<Vec<Pixels>>,
    /// Input for the application (input sink: queue).
    pub app_inputs: Mutex<std::collections::VecDeque<InputRecord>>,
    /// The captured area's origin on the X screen (for absolute pointer replay).
    pub capture_origin: Mutex<(i32, i32)>,
    pub source_ended: AtomicBool,
    /// The client's newest head pose (latest wins), published by the network driver: the scene
    /// renders for it, [`crate::host::Host::head_pose`] reads it. `sample_us` 0: the client
    /// sent a pose without its sample time.
    pub head_pose: Mutex<Option<PoseSample>>,
    pub counters: Counters,
    pub samples: Mutex<HostSamples>,
    /// Other consumers of the encoded stream (RTSP), set once at start.
    pub consumers: Consumers,
    fatal: Mutex<Option<String>>,
    events: Mutex<Vec<String>>,
    /// The encoder in use (name, codec), for the summary.
    encoder: Mutex<Option<untether_media::codec::EncoderInfo>>,
    /// Whether the application's DMA-BUF pictures go to the encoder (zero-copy encode).
    pub zero_copy: super::zero_copy::ZeroCopy,
}

impl HostShared {
    pub fn new(capture_origin: (i32, i32)) -> HostShared {
        HostShared {
            stop: AtomicBool::new(false),
            audience: Audience::default(),
            frames: Slot::new(),
            spare: Mutex::new(Vec::new()),
            app_inputs: Mutex::new(Default::default()),
            capture_origin: Mutex::new(capture_origin),
            source_ended: AtomicBool::new(false),
            head_pose: Mutex::new(None),
            counters: Counters::default(),
            samples: Mutex::new(HostSamples::default()),
            consumers: Consumers::default(),
            fatal: Mutex::new(None),
            events: Mutex::new(Vec::new()),
            encoder: Mutex::new(None),
            zero_copy: Default::default(),
        }
    }

    /// The encoder the stage opened.
    pub fn set_encoder(&self, info: &untether_media::codec::EncoderInfo) {
        *lock(&self.encoder) = Some(info.clone());
    }

    pub fn encoder(&self) -> Option<untether_media::codec::EncoderInfo> {
        lock(&self.encoder).clone()
    }

    /// A fatal error: the host stops.
    pub fn fail(&self, message: String) {
        log::error!("host: {message}");
        lock(&self.fatal).get_or_insert(message);
        self.request_stop();
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.frames.close();
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn fatal(&self) -> Option<String> {
        lock(&self.fatal).clone()
    }

    /// Something the user should see in the host's log and summary.
    pub fn note(&self, message: String) {
        log::info!("host: {message}");
        let mut ev = lock(&self.events);
        if ev.len() < 1000 {
            ev.push(message);
        }
    }

    pub fn events(&self) -> Vec<String> {
        lock(&self.events).clone()
    }

    /// Whether anyone watches: a client is connected, or a consumer (RTSP) has a viewer. The
    /// sources produce frames only then.
    pub fn watched(&self) -> bool {
        self.audience.connected() || self.consumers.watching()
    }

    /// Waits for a client or a consumer's viewer; false when the host stops first.
    pub fn wait_client(&self) -> bool {
        while !self.stopped() {
            if self.watched() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    /// Gives a frame buffer back for reuse.
    pub fn recycle(&self, pixels: Pixels) {
        if let Pixels::DmaBuf(_) = pixels {
            // Not reusable: dropped, letting the application's image go.
            return;
        }
        let mut spare = lock(&self.spare);
        if spare.len() < 4 {
            spare.push(pixels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audience_counts_clients_and_controller_epochs() {
        let l = Audience::default();
        assert!(!l.connected());
        l.set_clients(3);
        assert!(l.connected());
        assert_eq!(l.clients(), 3);
        assert_eq!(l.new_controller(), 1);
        l.set_clients(0);
        assert!(!l.connected());
        assert_eq!(l.new_controller(), 2);
        assert_eq!(l.epoch(), 2);
    }

    #[test]
    fn a_failure_stops_and_keeps_the_first_message() {
        let s = HostShared::new((0, 0));
        s.fail("first".into());
        s.fail("second".into());
        assert!(s.stopped());
        assert_eq!(s.fatal().as_deref(), Some("first"));
        assert!(s.frames.is_closed());
    }

    #[test]
    fn notes_are_bounded() {
        let s = HostShared::new((0, 0));
        for i in 0..1100 {
            s.note(format!("{i}"));
        }
        assert_eq!(s.events().len(), 1000);
    }
}
