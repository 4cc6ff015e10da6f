//! untether's media stages: the built-in test scene and its pixel stamp, colour conversion,
//! FFmpeg encoders and decoders, and presenters (the GPU presenter — OpenGL ES 3 with lens
//! distortion, late warp and the statistics overlay —, the SDL renderer, or a headless sink).
//!
//! Also: X11 capture and XTEST input replay ([`x11`]), raw frames through pipes ([`pipe`]),
//! Linux input devices ([`evdev`]) and audio ([`audio`]: Opus, jitter buffer, SDL playback and
//! capture, the test tone).
//!
//! Nothing here knows about the network.

pub mod audio;
pub mod codec;
pub mod convert;
pub mod evdev;
pub mod frame;
pub mod gamepad;
pub mod lens;
pub mod mesh;
pub mod overlay;
pub mod pipe;
pub mod present;
pub mod present_gl;
pub mod quality;
pub mod scale;
pub mod scene;
pub mod slice_decoder;
pub mod stamp;
pub mod warp;
mod window;
pub mod wlr;
pub mod x11;
pub mod x264;
pub mod zero_copy;

pub use frame::BgraFrame;

/// Errors from the media stages. Every variant says what failed and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("invalid frame size {width}x{height}: {reason}")]
    InvalidSize {
        width: u32,
        height: u32,
        reason: String,
    },
    #[error("FFmpeg {context}: {source}")]
    Ffmpeg {
        context: String,
        #[source]
        source: ffmpeg_next::Error,
    },
    #[error("encoder {name:?} is not in this FFmpeg build")]
    EncoderMissing { name: String },
    /// An encoder or decoder that cannot run here, and why (a missing device, a feature it
    /// lacks): one line, complete.
    #[error("{0}")]
    Unavailable(String),
    #[error("colour conversion failed: {0}")]
    Conversion(String),
    #[error("display: {0}")]
    Display(String),
    #[error("{0}")]
    Other(String),
}

impl MediaError {
    pub fn ffmpeg(context: impl Into<String>, source: ffmpeg_next::Error) -> Self {
        MediaError::Ffmpeg {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = MediaError> = std::result::Result<T, E>;
