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

pub use untether_media::codec::{Codec, EncoderChoice, EncoderKind, InputPicture, Refresh};
pub use untether_media::convert::Conversion;
use untether_media::convert::I420Frame;
use untether_media::x11::PointerMode;
use untether_media::{BgraFrame, MediaError};
pub use untether_proto::{InputEvent, InputRecord, Micros, Pose, PoseSample, StateKey, StateValue};
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

mod client;
mod frame;
mod host;

pub use client::*;
pub use frame::*;
pub use host::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// One codec: the host's, the API's and the configuration's are the same type.
    #[test]
    fn host_and_api_name_the_one_codec_the_configuration_validates() {
        let c: crate::host::Codec = Codec::Hevc;
        let v = crate::config::VideoConfig::default();
        let configured: crate::host::Codec = v.codecs()[0];
        assert_eq!(configured, Codec::H264);
        assert_eq!(c, untether_proto::Codec::Hevc);
    }

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
