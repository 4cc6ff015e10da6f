//! The desktop captures a host opens before anything else (their size is the stream's size):
//! X11 (MIT-SHM), a wlroots compositor (wlr-screencopy) or the desktop portal (PipeWire).

use untether_media::wlr::WlrCapture;
use untether_media::x11::X11Capture;

use super::error::HostError;
use super::options::SourceSpec;
use crate::config::HostToml;

/// An opened desktop capture.
pub(crate) enum Capture {
    X11(X11Capture),
    Wlr(WlrCapture),
    #[cfg(feature = "portal")]
    Portal(Box<untether_portal::PortalCapture>),
}

impl Capture {
    /// Opens the capture `source` names (None: the source is not a desktop capture). The
    /// portal's restore token lives in the host's state directory (`host.state_dir`).
    pub fn open(source: &SourceSpec, host: &HostToml) -> Result<Option<Capture>, HostError> {
        Ok(match source {
            SourceSpec::X11 { display, target } => {
                Some(Capture::X11(X11Capture::open(display.as_deref(), target)?))
            }
            SourceSpec::Wlr { display, target } => {
                Some(Capture::Wlr(WlrCapture::open(display.as_deref(), target)?))
            }
            SourceSpec::Portal { token_file } => Some(open_portal(token_file.as_deref(), host)?),
            SourceSpec::PipeWire { target } => Some(open_pipewire(target)?),
            _ => None,
        })
    }

    pub fn size(&self) -> (u32, u32) {
        match self {
            Capture::X11(c) => c.size(),
            Capture::Wlr(c) => c.size(),
            #[cfg(feature = "portal")]
            Capture::Portal(c) => c.size(),
        }
    }

    /// Where the captured area is on its screen (for pointer replay).
    pub fn origin(&self) -> (i32, i32) {
        match self {
            Capture::X11(c) => c.origin(),
            _ => (0, 0),
        }
    }
}

#[cfg(feature = "portal")]
fn open_portal(
    token_file: Option<&std::path::Path>,
    host: &HostToml,
) -> Result<Capture, HostError> {
    let token_file = token_file.map(std::path::Path::to_path_buf).or_else(|| {
        let explicit = (!host.state_dir.is_empty()).then(|| std::path::Path::new(&host.state_dir));
        crate::identity::StateDir::resolve(explicit)
            .ok()
            .map(|d| d.file_path(untether_portal::TOKEN_FILE))
    });
    if token_file.is_none() {
        log::warn!("host: no state directory: the portal will ask again at every start");
    }
    let cap = untether_portal::PortalCapture::open(token_file.as_deref())
        .map_err(|e| HostError::Portal(e.to_string()))?;
    Ok(Capture::Portal(Box::new(cap)))
}

#[cfg(feature = "portal")]
fn open_pipewire(target: &str) -> Result<Capture, HostError> {
    let cap = untether_portal::PortalCapture::pipewire(target)
        .map_err(|e| HostError::Portal(e.to_string()))?;
    Ok(Capture::Portal(Box::new(cap)))
}

#[cfg(not(feature = "portal"))]
fn open_portal(_: Option<&std::path::Path>, _: &HostToml) -> Result<Capture, HostError> {
    Err(no_portal())
}

#[cfg(not(feature = "portal"))]
fn open_pipewire(_: &str) -> Result<Capture, HostError> {
    Err(no_portal())
}

#[cfg(not(feature = "portal"))]
fn no_portal() -> HostError {
    HostError::Portal(
        "this build has no portal or PipeWire capture (built without the `portal` feature)".into(),
    )
}
