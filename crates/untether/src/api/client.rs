//! The client side of the embedding API: [`ClientBuilder`] and [`ClientContext`].

#[allow(unused_imports)]
use super::*;

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
                vr: Default::default(),
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
    /// What the host publishes on the latest-wins channel (rumble, other players, application
    /// state): the returned view is updated while the client runs.
    pub fn host_state(&mut self) -> crate::client::HostStateView {
        let v = crate::client::HostStateView::default();
        self.io.host_state = Some(v.clone());
        v
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
