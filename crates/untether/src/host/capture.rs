//! The desktop captures a host opens before anything else (their size is the stream's size):
//! X11 (MIT-SHM) or a wlroots compositor (wlr-screencopy).

use untether_media::wlr::WlrCapture;
use untether_media::x11::X11Capture;

use super::error::HostError;
use super::options::SourceSpec;

/// An opened desktop capture.
pub(crate) enum Capture {
    X11(X11Capture),
    Wlr(WlrCapture),
}

impl Capture {
    /// Opens the capture `source` names (None: the source is not a desktop capture).
    pub fn open(source: &SourceSpec) -> Result<Option<Capture>, HostError> {
        Ok(match source {
            SourceSpec::X11 { display, target } => {
                Some(Capture::X11(X11Capture::open(display.as_deref(), target)?))
            }
            SourceSpec::Wlr { display, target } => {
                Some(Capture::Wlr(WlrCapture::open(display.as_deref(), target)?))
            }
            _ => None,
        })
    }

    pub fn size(&self) -> (u32, u32) {
        match self {
            Capture::X11(c) => c.size(),
            Capture::Wlr(c) => c.size(),
        }
    }

    /// Where the captured area is on its screen (for pointer replay).
    pub fn origin(&self) -> (i32, i32) {
        match self {
            Capture::X11(c) => c.origin(),
            Capture::Wlr(_) => (0, 0),
        }
    }
}
