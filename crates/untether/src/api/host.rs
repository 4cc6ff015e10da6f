//! The host side of the embedding API: [`HostBuilder`] and [`HostContext`].

#[allow(unused_imports)]
use super::*;

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
    /// libx264 (4:2:0) or libx264rgb (BGR as is, implies no conversion).
    pub fn encoder(self, kind: EncoderKind) -> Self {
        self.encoder_name(kind.name())
    }
    /// Any encoder by its FFmpeg name (`libx265`, `h264_nvenc`, …) or `auto`; its codec
    /// follows (checked by [`build`](Self::build), which names the key).
    pub fn encoder_name(mut self, name: &str) -> Self {
        let sel = &mut self.options.video.selection;
        sel.encoder = EncoderChoice::from_name(name);
        if sel.encoder == EncoderChoice::Auto {
            return self;
        }
        sel.codec = untether_media::codec::encoder::codec_of_encoder(name).or(sel.codec);
        sel.conversion = match (name, sel.conversion) {
            ("libx264rgb", _) => Conversion::Rgb,
            (_, Conversion::Rgb) => Conversion::Simd,
            (_, c) => c,
        };
        self
    }
    /// The codec (`None`: auto, the best the client and this host have in common).
    pub fn codec(mut self, codec: Option<Codec>) -> Self {
        self.options.video.selection.codec = codec;
        self
    }
    /// BGRA→YUV conversion for encoders that take 4:2:0: SIMD (default) or swscale;
    /// [`Conversion::Rgb`] (none) selects libx264rgb.
    pub fn conversion(mut self, c: Conversion) -> Self {
        let sel = &mut self.options.video.selection;
        if c == Conversion::Rgb {
            sel.encoder = EncoderChoice::Named("libx264rgb".into());
            sel.codec = Some(Codec::H264Rgb);
        } else if sel.conversion == Conversion::Rgb {
            sel.encoder = EncoderChoice::Auto;
            sel.codec = Some(Codec::H264);
        }
        sel.conversion = c;
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
    /// Intra refresh (a sweep every `video.refresh_period` frames) instead of keyframes for
    /// joining and recovering clients (libx264 and NVENC).
    pub fn intra_refresh(mut self, on: bool) -> Self {
        self.options.video.refresh = if on { Refresh::Intra } else { Refresh::Idr };
        self
    }
    /// A keyframe every `frames` frames (0: only when a client joins or asks).
    pub fn gop(mut self, frames: u32) -> Self {
        self.options.video.gop_frames = frames;
        self
    }
    /// The encoder family's own options (`video.encoder_params`), `key=value:key=value`.
    pub fn encoder_params(mut self, params: &str) -> Self {
        self.options.video.encoder_params = params.to_string();
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
        self.options.host.audio_bitrate_kbps = kbps;
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
        self.options.host.access = access;
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
        let host = Host::start_with(self.options, self.setup)?;
        let rgb = host.encoder_info().is_some_and(|e| e.bgra_input);
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

    /// Like [`send_frame`](Self::send_frame), for a frame rendered for the client's head pose
    /// `pose` (read with [`head_pose`](Self::head_pose) before rendering): the client gets the
    /// pose with the frame, re-projects it to its newest pose at display time (late warp) and
    /// measures pose-to-photon.
    pub fn send_frame_with_pose(
        &mut self,
        frame: &Frame<'_>,
        pose: Option<PoseSample>,
    ) -> Result<SendInfo, HostError> {
        self.send(frame, None, pose)
    }

    /// Like [`send_frame`](Self::send_frame), with the time the frame was rendered
    /// ([`crate::clock::now_us`]), so glass-to-glass includes the time since.
    pub fn send_frame_at(
        &mut self,
        frame: &Frame<'_>,
        capture_us: Option<Micros>,
    ) -> Result<SendInfo, HostError> {
        self.send(frame, capture_us, None)
    }

    /// The newest head pose of the client (orientation, position, its sample time), None
    /// before it sent one: render for it and pass it to
    /// [`send_frame_with_pose`](Self::send_frame_with_pose).
    pub fn head_pose(&self) -> Option<PoseSample> {
        self.host.head_pose()
    }

    /// Publishes host → client state (rumble, other players, application state) on the
    /// latest-wins channel; false when the key table (4096 keys) is full.
    pub fn publish_state(&self, key: StateKey, value: StateValue) -> bool {
        self.host.publish_state(key, value)
    }

    /// The client's game controller `n` as last heard (None before it sent anything).
    pub fn gamepad(&self, n: usize) -> Option<crate::host::GamepadState> {
        self.host.gamepad(n)
    }

    /// Whether the host's encoder takes pictures in GPU memory as DMA-BUFs (zero-copy
    /// encode): Ok, or why not, decided once per stream with ONE log line when off
    /// ([`crate::Host::dma_buf_input`]). Ask before every frame; when it says no, hand over
    /// frames in memory as before ([`publish`](Self::publish)).
    pub fn dma_buf_input(&self) -> Result<(), String> {
        self.host.dma_buf_input()
    }

    /// Zero-copy off for this stream for the application's own reason (it cannot export its
    /// frames): the one line names `why` unless the host had said why already.
    pub fn refuse_dma_buf(&self, why: &str) {
        self.host.refuse_dma_buf(why)
    }

    /// Hands a picture in GPU memory to the encoder thread (threaded mode), without a copy:
    /// see [`crate::Host::publish_dma_buf`] (`keep` is held until the encoder is done with the
    /// picture; don't draw into its image until then). `rendered_us`: when the application
    /// finished it (None: now).
    pub fn publish_dma_buf(
        &mut self,
        picture: &untether_media::codec::DmaBufPicture<'_>,
        keep: untether_media::codec::KeepAlive,
        pose: Option<PoseSample>,
        rendered_us: Option<Micros>,
    ) -> Result<(), HostError> {
        let rendered = rendered_us.unwrap_or_else(crate::clock::now_us);
        self.host.publish_dma_buf(picture, keep, pose, rendered)
    }

    /// Like [`publish`](Self::publish), for a frame rendered for `pose`.
    pub fn publish_with_pose(
        &mut self,
        frame: &Frame<'_>,
        pose: Option<PoseSample>,
    ) -> Result<(), HostError> {
        let picture = self.adapter.adapt(frame, self.rgb)?;
        self.host.publish_with_pose(&picture, pose)
    }

    fn send(
        &mut self,
        frame: &Frame<'_>,
        capture_us: Option<Micros>,
        pose: Option<PoseSample>,
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
        let mut info = sender.send_frame(&picture, capture_us.or(Some(t0)), pose)?;
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
