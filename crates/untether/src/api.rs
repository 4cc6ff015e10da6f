//! The embedding API: an application links untether and streams what it renders, from its own
//! address space (OpenUVR's model), and gets its users' input back.
//!
//! ```no_run
//! use untether::api::{Frame, HostContext};
//! # fn render(_: &mut [u8]) {}
//! let mut host = HostContext::builder()
//!     .size(1280, 720)
//!     .fps(60)
//!     .bitrate_kbps(10_000)
//!     .bind("0.0.0.0:9710")
//!     .synchronous(true) // encode on this thread in send_frame; no encoder thread
//!     .build()?;
//! let mut pixels = vec![0u8; 1280 * 720 * 4];
//! loop {
//!     render(&mut pixels);
//!     host.send_frame(&Frame::bgra(&pixels, 1280 * 4, 1280, 720))?;
//!     while let Some(input) = host.poll_input() {
//!         println!("{:?}", input.event);
//!     }
//! #   break;
//! }
//! # Ok::<(), untether::host::HostError>(())
//! ```
//!
//! Frames are borrowed, with strides. BGRA and I420 reach the encoder without a copy (BGRA is
//! converted straight into the encoder's planes; I420 planes are read in place); RGBA and NV12
//! are converted once with yuvutils-rs. In threaded mode ([`HostContext::publish`]) the frame is
//! copied once into a pooled buffer so the application may reuse its own at once.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use untether_media::codec::{EncoderKind, InputPicture, VideoPath};
pub use untether_media::convert::Conversion;
use untether_media::convert::I420Frame;
use untether_media::x11::PointerMode;
use untether_media::{BgraFrame, MediaError};
pub use untether_proto::{InputEvent, InputRecord, Micros};
use yuvutils_rs::{
    BufferStoreMut, YuvBiPlanarImage, YuvConversionMode, YuvPlanarImageMut, YuvRange,
    YuvStandardMatrix,
};

use crate::client::{
    run_client_with, ClientAudio, ClientError, ClientIo, ClientOptions, ClientRun, Display,
    InputDevice,
};
use crate::config::Resolution;
pub use crate::host::{AudioSpec, HostSetup, InputSpec, SendInfo, SourceSpec};
use crate::host::{FrameSender, Host, HostError, HostOptions, HostSummary, InputCallback};
pub use crate::identity::{Access, ClientTrust, HostTrust};

/// Layouts of frames an application can hand over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// Packed B, G, R, A/X (Direct3D, most X11 and Wayland buffers).
    Bgra,
    /// Packed R, G, B, A/X (OpenGL's `glReadPixels(GL_RGBA)`).
    Rgba,
    /// Planar Y, U, V at 4:2:0.
    I420,
    /// Y plane, then interleaved U/V at 4:2:0 (hardware decoders, VA-API).
    Nv12,
}

/// A frame borrowed from the application: up to three planes with their strides (bytes per
/// row). Rows may be padded; the planes are only read.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub width: u32,
    pub height: u32,
    pub format: PixelFormat,
    pub planes: [&'a [u8]; 3],
    pub strides: [usize; 3],
}

impl<'a> Frame<'a> {
    pub fn bgra(data: &'a [u8], stride: usize, width: u32, height: u32) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::Bgra,
            planes: [data, &[], &[]],
            strides: [stride, 0, 0],
        }
    }

    pub fn rgba(data: &'a [u8], stride: usize, width: u32, height: u32) -> Self {
        Frame {
            format: PixelFormat::Rgba,
            ..Self::bgra(data, stride, width, height)
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn i420(
        y: &'a [u8],
        y_stride: usize,
        u: &'a [u8],
        u_stride: usize,
        v: &'a [u8],
        v_stride: usize,
        width: u32,
        height: u32,
    ) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::I420,
            planes: [y, u, v],
            strides: [y_stride, u_stride, v_stride],
        }
    }

    pub fn nv12(
        y: &'a [u8],
        y_stride: usize,
        uv: &'a [u8],
        uv_stride: usize,
        width: u32,
        height: u32,
    ) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::Nv12,
            planes: [y, uv, &[]],
            strides: [y_stride, uv_stride, 0],
        }
    }
}

fn too_small(what: &str) -> HostError {
    HostError::Media(MediaError::Other(format!(
        "{what}: buffer too small for the frame size"
    )))
}

/// Turns a [`Frame`] into what the encoder reads, converting only RGBA and NV12 (into
/// buffers kept from frame to frame).
#[derive(Default)]
pub struct FrameAdapter {
    i420: Option<I420Frame>,
    bgra: Option<BgraFrame>,
}

impl FrameAdapter {
    /// The encoder's view of `frame`; `rgb_encoder` is true for libx264rgb (which takes BGRA).
    pub fn adapt<'b>(
        &'b mut self,
        frame: &Frame<'b>,
        rgb_encoder: bool,
    ) -> Result<InputPicture<'b>, HostError> {
        let (w, h) = (frame.width, frame.height);
        untetherize_size(w, h)?;
        let need = |stride: usize, row: usize, rows: usize| (rows.max(1) - 1) * stride + row;
        let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
        match (frame.format, rgb_encoder) {
            (PixelFormat::Bgra, _) => Ok(InputPicture::Bgra {
                width: w,
                height: h,
                data: frame.planes[0],
                stride: frame.strides[0],
            }),
            (PixelFormat::I420, false) => Ok(InputPicture::I420 {
                width: w,
                height: h,
                planes: [
                    (frame.planes[0], frame.strides[0]),
                    (frame.planes[1], frame.strides[1]),
                    (frame.planes[2], frame.strides[2]),
                ],
            }),
            (PixelFormat::Rgba, false) => {
                let (data, stride) = (frame.planes[0], frame.strides[0]);
                if stride < w as usize * 4 || data.len() < need(stride, w as usize * 4, h as usize)
                {
                    return Err(too_small("RGBA frame"));
                }
                let out = self.i420_buf(w, h);
                let mut img = YuvPlanarImageMut {
                    y_plane: BufferStoreMut::Borrowed(&mut out.y),
                    y_stride: w,
                    u_plane: BufferStoreMut::Borrowed(&mut out.u),
                    u_stride: w2 as u32,
                    v_plane: BufferStoreMut::Borrowed(&mut out.v),
                    v_stride: w2 as u32,
                    width: w,
                    height: h,
                };
                yuvutils_rs::rgba_to_yuv420(
                    &mut img,
                    data,
                    stride as u32,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                    YuvConversionMode::Balanced,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("RGBA: {e}"))))?;
                let out = &*out;
                Ok(InputPicture::I420 {
                    width: w,
                    height: h,
                    planes: [(&out.y, w as usize), (&out.u, w2), (&out.v, w2)],
                })
            }
            (PixelFormat::Nv12, false) => {
                let (uv, uvs) = (frame.planes[1], frame.strides[1]);
                if uvs < w2 * 2 || uv.len() < need(uvs, w2 * 2, h2) {
                    return Err(too_small("NV12 chroma plane"));
                }
                // The Y plane is read in place; only chroma is de-interleaved.
                let out = self.i420_buf(w, h);
                for row in 0..h2 {
                    let src = &uv[row * uvs..row * uvs + w2 * 2];
                    for (i, pair) in src.chunks_exact(2).enumerate() {
                        out.u[row * w2 + i] = pair[0];
                        out.v[row * w2 + i] = pair[1];
                    }
                }
                let out = &*out;
                Ok(InputPicture::I420 {
                    width: w,
                    height: h,
                    planes: [
                        (frame.planes[0], frame.strides[0]),
                        (&out.u, w2),
                        (&out.v, w2),
                    ],
                })
            }
            (PixelFormat::Rgba, true) => {
                let (data, stride) = (frame.planes[0], frame.strides[0]);
                if stride < w as usize * 4 || data.len() < need(stride, w as usize * 4, h as usize)
                {
                    return Err(too_small("RGBA frame"));
                }
                let out = self.bgra_buf(w, h)?;
                for y in 0..h as usize {
                    let src = &data[y * stride..y * stride + w as usize * 4];
                    let dst = out.row_mut(y as u32);
                    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                        d.copy_from_slice(&[s[2], s[1], s[0], s[3]]);
                    }
                }
                Ok(bgra_picture(out))
            }
            (PixelFormat::Nv12, true) => {
                let out = self.bgra_buf(w, h)?;
                let img = YuvBiPlanarImage {
                    y_plane: frame.planes[0],
                    y_stride: frame.strides[0] as u32,
                    uv_plane: frame.planes[1],
                    uv_stride: frame.strides[1] as u32,
                    width: w,
                    height: h,
                };
                let stride = out.stride as u32;
                yuvutils_rs::yuv_nv12_to_bgra(
                    &img,
                    &mut out.data,
                    stride,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                    YuvConversionMode::Balanced,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("NV12: {e}"))))?;
                Ok(bgra_picture(out))
            }
            (PixelFormat::I420, true) => {
                let out = self.bgra_buf(w, h)?;
                let img = yuvutils_rs::YuvPlanarImage {
                    y_plane: frame.planes[0],
                    y_stride: frame.strides[0] as u32,
                    u_plane: frame.planes[1],
                    u_stride: frame.strides[1] as u32,
                    v_plane: frame.planes[2],
                    v_stride: frame.strides[2] as u32,
                    width: w,
                    height: h,
                };
                let stride = out.stride as u32;
                yuvutils_rs::yuv420_to_bgra(
                    &img,
                    &mut out.data,
                    stride,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("I420: {e}"))))?;
                Ok(bgra_picture(out))
            }
        }
    }

    fn i420_buf(&mut self, w: u32, h: u32) -> &mut I420Frame {
        if !matches!(&self.i420, Some(f) if (f.width, f.height) == (w, h)) {
            self.i420 = Some(I420Frame::new(w, h));
        }
        self.i420.get_or_insert_with(|| I420Frame::new(w, h))
    }

    fn bgra_buf(&mut self, w: u32, h: u32) -> Result<&mut BgraFrame, HostError> {
        if !matches!(&self.bgra, Some(f) if (f.width, f.height) == (w, h)) {
            self.bgra = Some(BgraFrame::new(w, h)?);
        }
        self.bgra
            .as_mut()
            .ok_or_else(|| HostError::Usage("no conversion buffer".into()))
    }
}

fn bgra_picture(f: &BgraFrame) -> InputPicture<'_> {
    InputPicture::Bgra {
        width: f.width,
        height: f.height,
        data: &f.data,
        stride: f.stride,
    }
}

fn untetherize_size(w: u32, h: u32) -> Result<(), HostError> {
    untether_media::frame::check_size(w, h).map_err(HostError::Media)
}

/// Builds a [`HostContext`]. Defaults: those of the configuration
/// ([`crate::config::VideoConfig::default`]: 1280x720 at 60 fps, 10 Mbit/s, libx264 ultrafast
/// with SIMD conversion), the application as the source with an encoder thread, input queued
/// for [`HostContext::poll_input`], no audio, listening on 0.0.0.0:9710.
#[derive(Clone, Debug)]
pub struct HostBuilder {
    options: HostOptions,
    setup: HostSetup,
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            options: HostOptions::default(),
            setup: HostSetup {
                source: SourceSpec::App,
                input: InputSpec::Queue,
                ..HostSetup::default()
            },
        }
    }
}

impl HostBuilder {
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.options.video.resolution = Resolution { width, height };
        self
    }
    pub fn fps(mut self, fps: u32) -> Self {
        self.options.video.fps = fps;
        self
    }
    pub fn bitrate_kbps(mut self, kbps: u32) -> Self {
        self.options.video.bitrate_kbps = kbps;
        self
    }
    /// libx264 (4:2:0) or libx264rgb (BGR as is, implies no conversion); see
    /// [`VideoPath::with_encoder`].
    pub fn encoder(mut self, kind: EncoderKind) -> Self {
        self.options.video.path = self.options.video.path.with_encoder(kind);
        self
    }
    /// BGRA→YUV conversion for libx264: SIMD (default) or swscale; [`Conversion::Rgb`] (none)
    /// selects libx264rgb.
    pub fn conversion(mut self, c: Conversion) -> Self {
        self.options.video.path = VideoPath::from_conversion(c);
        self
    }
    /// Converter and encoder at once.
    pub fn video_path(mut self, path: VideoPath) -> Self {
        self.options.video.path = path;
        self
    }
    pub fn preset(mut self, preset: &str) -> Self {
        self.options.video.preset = preset.to_string();
        self
    }
    pub fn encoder_threads(mut self, n: usize) -> Self {
        self.options.video.encoder_threads = n;
        self
    }
    /// Periodic intra refresh instead of keyframes.
    pub fn intra_refresh(mut self, on: bool) -> Self {
        self.setup.intra_refresh = on;
        self
    }
    /// A keyframe every `frames` frames (0: only when a client joins or asks).
    pub fn gop(mut self, frames: u32) -> Self {
        self.setup.gop_frames = frames;
        self
    }
    pub fn x264_params(mut self, params: &str) -> Self {
        self.setup.x264_params = params.to_string();
        self
    }
    /// IP:PORT to listen on (port 0: any free port, see [`HostContext::local_addr`]).
    pub fn bind(mut self, addr: &str) -> Self {
        self.options.host.bind = addr.to_string();
        self
    }
    /// The largest datagram sent (the path MTU minus IP/UDP headers).
    pub fn max_datagram(mut self, bytes: u16) -> Self {
        self.options.network.max_datagram = bytes;
        self
    }
    /// Encode on the caller's thread in [`HostContext::send_frame`] (true), or on an encoder
    /// thread fed by [`HostContext::publish`] (false, the default).
    pub fn synchronous(mut self, on: bool) -> Self {
        self.setup.encoder_thread = !on;
        self
    }
    /// Another frame source (the scene, X11 capture, a pipe) instead of the application.
    pub fn source(mut self, source: SourceSpec) -> Self {
        self.setup.source = source;
        self
    }
    pub fn input(mut self, input: InputSpec) -> Self {
        self.setup.input = input;
        self
    }
    /// Deliver input events to `f` on the network thread as they arrive.
    pub fn input_callback(mut self, f: impl Fn(&InputRecord) + Send + Sync + 'static) -> Self {
        self.setup.input = InputSpec::Callback(InputCallback(Arc::new(f)));
        self
    }
    /// Replay input into an X server with XTEST.
    pub fn input_xtest(mut self, display: Option<&str>, pointer: PointerMode) -> Self {
        self.setup.input = InputSpec::Xtest {
            display: display.map(str::to_string),
            pointer,
        };
        self
    }
    pub fn audio(mut self, audio: AudioSpec) -> Self {
        self.setup.audio = audio;
        self
    }
    pub fn audio_bitrate_kbps(mut self, kbps: u32) -> Self {
        self.setup.audio_bitrate_kbps = kbps;
        self
    }
    /// Stamp frame number and capture time into each frame's top-left corner.
    pub fn stamp(mut self, on: bool) -> Self {
        self.setup.stamp = on;
        self
    }
    /// Who may connect: [`Access::Allowlist`] (the default: clients approved with `untether
    /// pair`, or paired with a PIN), [`Access::Pin`] (print a PIN with
    /// [`HostContext::pairing_pin`]) or [`Access::Open`] (anyone).
    pub fn access(mut self, access: Access) -> Self {
        self.options.host.access = access.name().to_string();
        self
    }
    /// Where the host's key, allowlist and access requests live (default
    /// `$XDG_STATE_HOME/untether`).
    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.options.host.state_dir = dir.display().to_string();
        self
    }
    /// An in-memory identity and allowlist instead of the state directory.
    pub fn trust(mut self, trust: HostTrust) -> Self {
        self.setup.trust = trust;
        self
    }
    /// The options and setup as they stand.
    pub fn parts(&self) -> (&HostOptions, &HostSetup) {
        (&self.options, &self.setup)
    }

    /// Validates (with [`crate::config::validate_host`]: errors name the key and its range),
    /// binds the socket, opens the encoder and starts the threads.
    pub fn build(self) -> Result<HostContext, HostError> {
        let rgb = self.options.video.path.is_rgb();
        let host = Host::start_with(self.options, self.setup)?;
        let sender = match host.frame_sender() {
            Ok(s) => Some(s),
            Err(HostError::Usage(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(HostContext {
            host,
            sender,
            adapter: FrameAdapter::default(),
            rgb,
        })
    }
}

/// A host embedded in an application (see the module docs).
pub struct HostContext {
    host: Host,
    sender: Option<FrameSender>,
    adapter: FrameAdapter,
    rgb: bool,
}

impl HostContext {
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// The one-time PIN the host accepts now (with [`Access::Pin`]), to show the user.
    pub fn pairing_pin(&self) -> Option<String> {
        self.host.pairing_pin()
    }

    /// The host's fingerprint.
    pub fn fingerprint(&self) -> String {
        self.host.fingerprint()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.host.local_addr()
    }

    pub fn has_client(&self) -> bool {
        self.host.has_client()
    }

    pub fn wait_for_client(&self, timeout: Duration) -> bool {
        self.host.wait_for_client(timeout)
    }

    /// Hands a frame to the encoder thread and returns at once (threaded mode). The newest
    /// published frame wins.
    pub fn publish(&mut self, frame: &Frame<'_>) -> Result<(), HostError> {
        let picture = self.adapter.adapt(frame, self.rgb)?;
        self.host.publish(&picture)
    }

    /// Encodes a frame on this thread (synchronous mode) and hands it to the network thread,
    /// which packetizes and sends it; returns once it is handed over. Without a client it
    /// returns at once (`sent` false).
    pub fn send_frame(&mut self, frame: &Frame<'_>) -> Result<SendInfo, HostError> {
        self.send_frame_at(frame, None)
    }

    /// Like [`send_frame`](Self::send_frame), with the time the frame was rendered
    /// ([`crate::clock::now_us`]), so glass-to-glass includes the time since.
    pub fn send_frame_at(
        &mut self,
        frame: &Frame<'_>,
        capture_us: Option<Micros>,
    ) -> Result<SendInfo, HostError> {
        let Some(sender) = self.sender.as_mut() else {
            return Err(HostError::Usage(
                "send_frame needs a synchronous host (builder.synchronous(true)); this one has an encoder thread: use publish".into(),
            ));
        };
        let t0 = crate::clock::now_us();
        if !self.host.has_client() {
            return Ok(SendInfo::default());
        }
        let picture = self.adapter.adapt(frame, self.rgb)?;
        let mut info = sender.send(&picture, capture_us.or(Some(t0)))?;
        info.blocked_us = crate::clock::now_us() - t0;
        Ok(info)
    }

    /// The next input event from the client (input sink: queue).
    pub fn poll_input(&self) -> Option<InputRecord> {
        self.host.poll_input()
    }

    /// Pushes 48 kHz PCM (interleaved, 1 or 2 channels) produced at `pts_us`.
    pub fn push_audio(
        &self,
        pcm: &[i16],
        channels: usize,
        pts_us: Micros,
    ) -> Result<(), HostError> {
        self.host.push_audio(pcm, channels, pts_us)
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    pub fn summary(&self) -> HostSummary {
        self.host.summary()
    }

    pub fn stop(self) -> HostSummary {
        self.host.stop()
    }
}

/// Builds a [`ClientContext`].
pub struct ClientBuilder {
    options: ClientOptions,
    io: ClientIo,
}

impl ClientBuilder {
    pub fn new(host: SocketAddr) -> Self {
        let cfg = crate::config::ConfigToml::default();
        ClientBuilder {
            options: ClientOptions {
                host,
                client: cfg.client,
                network: cfg.network,
                display: Display::Headless,
                duration: None,
                save_frame: None,
            },
            io: ClientIo::default(),
        }
    }
    /// Show the stream in an SDL window (default: headless).
    pub fn window(mut self, on: bool) -> Self {
        self.options.display = if on {
            Display::Window
        } else {
            Display::Headless
        };
        self
    }
    pub fn name(mut self, name: &str) -> Self {
        self.options.client.name = name.to_string();
        self
    }
    pub fn duration(mut self, d: Option<Duration>) -> Self {
        self.options.duration = d;
        self
    }
    /// Write every decoded frame as raw I420 to `path` (`-`: standard output).
    pub fn sink(mut self, path: &str) -> Self {
        self.io.sink = Some(path.to_string());
        self
    }
    pub fn audio(mut self, audio: Option<ClientAudio>) -> Self {
        self.io.audio = audio;
        self
    }
    pub fn end_on_host_bye(mut self, on: bool) -> Self {
        self.io.end_on_host_bye = on;
        self
    }
    /// A channel for events the application sends itself (sent once connected, in order).
    pub fn input_channel(&mut self) -> std::sync::mpsc::Sender<InputEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.io.inject = Some(rx);
        tx
    }
    /// Where the client's key and known hosts live (default `$XDG_STATE_HOME/untether`).
    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.options.client.state_dir = dir.display().to_string();
        self
    }
    /// An in-memory identity (and host key to insist on) instead of the state directory.
    pub fn trust(mut self, trust: ClientTrust) -> Self {
        self.io.trust = trust;
        self
    }
    /// Pair with the host using the one-time PIN it shows.
    pub fn pin(mut self, pin: &str) -> Self {
        self.io.pin = Some(pin.to_string());
        self
    }
    pub fn input_device(mut self, dev: InputDevice) -> Self {
        self.io.input_devices.push(dev);
        self
    }
    pub fn options_mut(&mut self) -> &mut ClientOptions {
        &mut self.options
    }
    pub fn build(self) -> ClientContext {
        ClientContext {
            options: self.options,
            io: Some(self.io),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }
}

/// A client embedded in an application: register input devices, start the presenting thread,
/// stop it and get what it measured.
pub struct ClientContext {
    options: ClientOptions,
    io: Option<ClientIo>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<ClientRun, ClientError>>>,
}

impl ClientContext {
    pub fn builder(host: SocketAddr) -> ClientBuilder {
        ClientBuilder::new(host)
    }

    fn io_mut(&mut self) -> Result<&mut ClientIo, ClientError> {
        self.io.as_mut().ok_or_else(|| {
            ClientError::Media(MediaError::Other(
                "the client has started: register devices before start".into(),
            ))
        })
    }

    /// Registers an input device by file descriptor (a `/dev/input/event*` device, or a pipe
    /// or socket carrying evdev records); returns its device number on the wire.
    pub fn register_input_fd(&mut self, fd: OwnedFd, name: &str) -> Result<u8, ClientError> {
        let io = self.io_mut()?;
        if io.input_devices.len() >= 255 {
            return Err(ClientError::Media(MediaError::Other(
                "at most 255 input devices".into(),
            )));
        }
        io.input_devices.push(InputDevice::from_fd(fd, name));
        Ok((io.input_devices.len() - 1) as u8)
    }

    /// Registers an input device by path.
    pub fn register_input_path(&mut self, path: &Path) -> Result<u8, ClientError> {
        let dev = InputDevice::open(path)?;
        let io = self.io_mut()?;
        io.input_devices.push(dev);
        Ok((io.input_devices.len() - 1) as u8)
    }

    /// Starts the client (network, decoder, presenter and device threads).
    pub fn start(&mut self) -> Result<(), ClientError> {
        let io = self.io.take().ok_or_else(|| {
            ClientError::Media(MediaError::Other("the client was already started".into()))
        })?;
        let options = self.options.clone();
        let stop = self.stop.clone();
        self.thread = Some(
            std::thread::Builder::new()
                .name("client-present".into())
                .spawn(move || run_client_with(&options, io, stop))
                .map_err(ClientError::Thread)?,
        );
        Ok(())
    }

    /// Whether the client is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the client and returns what it measured.
    pub fn stop(mut self) -> Result<ClientRun, ClientError> {
        self.stop.store(true, Ordering::SeqCst);
        self.join()
    }

    /// Waits until the client ends by itself (its duration, the host ending the stream).
    pub fn wait(mut self) -> Result<ClientRun, ClientError> {
        self.join()
    }

    fn join(&mut self) -> Result<ClientRun, ClientError> {
        match self.thread.take() {
            None => Err(ClientError::Media(MediaError::Other(
                "the client was never started".into(),
            ))),
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(ClientError::Media(MediaError::Other(
                    "the client thread panicked".into(),
                )))
            }),
        }
    }
}

impl Drop for ClientContext {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_passes_bgra_and_i420_through_and_converts_rgba_and_nv12() {
        let (w, h) = (64u32, 32u32);
        let bgra = vec![7u8; (w * h * 4) as usize];
        let mut a = FrameAdapter::default();
        match a.adapt(&Frame::bgra(&bgra, 256, w, h), false).unwrap() {
            InputPicture::Bgra { data, .. } => assert_eq!(data.as_ptr(), bgra.as_ptr()),
            _ => panic!("BGRA is passed as is"),
        }
        let y = vec![100u8; (w * h) as usize];
        let uv = vec![128u8; (w * h / 2) as usize];
        match a
            .adapt(&Frame::i420(&y, 64, &uv, 32, &uv, 32, w, h), false)
            .unwrap()
        {
            InputPicture::I420 { planes, .. } => assert_eq!(planes[0].0.as_ptr(), y.as_ptr()),
            _ => panic!("I420 is passed as is"),
        }
        // White RGBA becomes limited-range white.
        let white = vec![255u8; (w * h * 4) as usize];
        match a.adapt(&Frame::rgba(&white, 256, w, h), false).unwrap() {
            InputPicture::I420 { planes, .. } => {
                assert!(planes[0].0.iter().all(|&v| (234..=236).contains(&v)))
            }
            _ => panic!(),
        }
        let mut nv = vec![0u8; (w * h / 2) as usize];
        for p in nv.chunks_exact_mut(2) {
            p.copy_from_slice(&[90, 200]);
        }
        match a.adapt(&Frame::nv12(&y, 64, &nv, 64, w, h), false).unwrap() {
            InputPicture::I420 { planes, .. } => {
                assert_eq!(planes[0].0.as_ptr(), y.as_ptr());
                assert!(planes[1].0.iter().all(|&v| v == 90));
                assert!(planes[2].0.iter().all(|&v| v == 200));
            }
            _ => panic!(),
        }
        // RGBA for the RGB encoder: channels swapped.
        let mut rgba = vec![0u8; (w * h * 4) as usize];
        for p in rgba.chunks_exact_mut(4) {
            p.copy_from_slice(&[1, 2, 3, 4]);
        }
        match a.adapt(&Frame::rgba(&rgba, 256, w, h), true).unwrap() {
            InputPicture::Bgra { data, .. } => assert_eq!(&data[..4], &[3, 2, 1, 4]),
            _ => panic!(),
        }
        // Short buffers are errors, not panics.
        assert!(a
            .adapt(&Frame::rgba(&rgba[..100], 256, w, h), false)
            .is_err());
        assert!(a
            .adapt(&Frame::nv12(&y, 64, &nv[..10], 64, w, h), false)
            .is_err());
        assert!(a.adapt(&Frame::bgra(&bgra, 256, 63, h), false).is_err());
    }
}
