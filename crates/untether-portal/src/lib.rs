//! Desktop capture through the xdg-desktop-portal (GNOME, KDE, wlroots with
//! xdg-desktop-portal-wlr): the ScreenCast portal on the session bus hands out a PipeWire
//! stream of the monitor or window the user picks, read here with GStreamer's `pipewiresrc`.
//! The user approves once: the portal's restore token is stored in a file (the host's state
//! directory) and offered on the next start.

pub mod screencast;
pub mod stream;

use std::path::Path;
use std::time::{Duration, Instant};

pub use screencast::{offer, session_bus, Offer};
pub use stream::{pipewiresrc_available, PipeWireStream, PortalFrame};

/// The file in the host's state directory that holds the portal's restore token.
pub const TOKEN_FILE: &str = "portal-restore-token";

/// Why a portal capture cannot start or goes on no more.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    #[error("no D-Bus session bus, so no desktop portal: {0}")]
    NoSessionBus(String),
    #[error(
        "no desktop portal on the session bus (install xdg-desktop-portal and the desktop's \
         backend: -gnome, -kde or -wlr): {0}"
    )]
    NoPortal(String),
    #[error(
        "the desktop portal has no ScreenCast interface (no backend implements it here: \
         xdg-desktop-portal-wlr for sway, -gnome, -kde): {0}"
    )]
    NoScreenCast(String),
    #[error("the screen-cast request was cancelled at {0} (the portal's dialog was closed)")]
    Cancelled(String),
    #[error("the portal's {0} failed: {1}")]
    Request(String, String),
    #[error("the portal answered unexpectedly: {0}")]
    Protocol(String),
    #[error(
        "GStreamer has no pipewiresrc element (install gstreamer1.0-pipewire) to read the \
         portal's PipeWire stream"
    )]
    NoPipeWireSrc,
    #[error("the PipeWire stream: {0}")]
    Stream(String),
}

/// A running portal screen cast (or a PipeWire node named directly) and its stream.
pub struct PortalCapture {
    // Dropped first: the pipeline stops before the session is closed.
    stream: PipeWireStream,
    cast: Option<screencast::Cast>,
    size: (u32, u32),
    first: Option<PortalFrame>,
    what: String,
}

impl PortalCapture {
    /// Asks the portal for a screen cast (the dialog, or the permission stored as a restore
    /// token in `token_file`) and waits for the first frame (its size is the stream's size).
    pub fn open(token_file: Option<&Path>) -> Result<PortalCapture, PortalError> {
        pipewiresrc_available()?;
        let cast = screencast::open(token_file)?;
        let remote = cast.remote.try_clone().map_err(|e| {
            PortalError::Stream(format!("cannot duplicate the PipeWire remote: {e}"))
        })?;
        let stream = PipeWireStream::start(remote, cast.node)?;
        let what = format!("PipeWire node {}", cast.node);
        Self::first_frame(stream, Some(cast), what)
    }

    /// Reads the PipeWire video node `target` (its `node.name` or serial) of this session's
    /// PipeWire daemon without the portal (a camera, a virtual output, a cast opened elsewhere).
    pub fn pipewire(target: &str) -> Result<PortalCapture, PortalError> {
        let stream = PipeWireStream::start_target(target)?;
        Self::first_frame(stream, None, format!("PipeWire node {target:?}"))
    }

    fn first_frame(
        stream: PipeWireStream,
        cast: Option<screencast::Cast>,
        what: String,
    ) -> Result<PortalCapture, PortalError> {
        let t = Instant::now();
        let first = loop {
            if let Some(f) = stream.take(Duration::from_millis(500))? {
                break f;
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err(PortalError::Stream(format!("no frame from {what} in 10 s")));
            }
        };
        Ok(PortalCapture {
            size: (first.width, first.height),
            first: Some(first),
            stream,
            cast,
            what,
        })
    }

    /// The stream's size (of its first frame).
    pub fn size(&self) -> (u32, u32) {
        self.size
    }

    /// What is read, e.g. `PipeWire node 42`.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// The portal's ScreenCast version, and whether a stored restore token was offered (the
    /// portal shows no dialog where it accepts it; one it does not know it ignores, and asks)
    /// and whether it gave a new one (stored for the next start). None: no portal.
    pub fn portal(&self) -> Option<(u32, bool, bool)> {
        self.cast
            .as_ref()
            .map(|c| (c.version, c.restored, c.persisted))
    }

    /// The newest frame not yet taken (waiting up to `timeout`); None when none came.
    pub fn take(&mut self, timeout: Duration) -> Result<Option<PortalFrame>, PortalError> {
        if let Some(f) = self.first.take() {
            // A newer one may have come meanwhile: newest wins.
            return Ok(Some(self.stream.take(Duration::ZERO)?.unwrap_or(f)));
        }
        self.stream.take(timeout)
    }

    /// Frames the compositor sent that were replaced before the host took them.
    pub fn dropped(&self) -> u64 {
        self.stream.dropped()
    }

    /// Frames received, and how many were timed by the pipeline's clock (the rest by arrival).
    pub fn frames(&self) -> (u64, u64) {
        self.stream.frames()
    }
}
