//! Zero-copy encode for an application that renders on the GPU (the OpenXR runtime): whether
//! the host's encoder takes its pictures as DMA-BUFs ([`Host::dma_buf_input`]), decided once
//! per stream, with ONE line naming why when it does not (`zero-copy off (…): frames read back
//! by the CPU`); the application then reads its frames back as before.
//!
//! The decision at the first question: `UNTETHER_ZERO_COPY` is not `off`, a render node is
//! there, and the encoder is a VA-API one (the only backend that reads DMA-BUFs in place,
//! `untether_media::codec::dma_buf`). The import itself is made by the encoder at the first
//! DMA-BUF picture; if it fails there (a driver refusing the buffer, a stream scaled to a
//! client's smaller size), zero-copy turns off for good with the same one line, that picture
//! is lost, and the application, which asks before every frame, reads back from then on.
//!
//! [`Host::dma_buf_input`]: super::Host::dma_buf_input

use std::sync::Mutex;

use untether_media::codec::encoder::no_dma_buf_input;
use untether_media::codec::hw::DeviceNeed;
use untether_media::codec::{EncoderInfo, Family};

use super::shared::{lock, HostShared};

/// Where the decision stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Undecided,
    On,
    Off(String),
}

/// The host's zero-copy decision (in [`HostShared`]).
#[derive(Default)]
pub(crate) struct ZeroCopy {
    state: Mutex<State>,
}

impl ZeroCopy {
    /// Ok when DMA-BUF pictures go to the encoder; else why not. The first call decides
    /// (logging the one line when off); later ones return the decision, or the reason the
    /// encoder turned it off since.
    pub fn decide(&self, shared: &HostShared) -> Result<(), String> {
        let mut state = lock(&self.state);
        if *state == State::Undecided {
            let setting = untether_media::zero_copy::setting();
            let render_node = DeviceNeed::Dri.find().map(|_| ());
            *state = match why_not(setting, render_node, shared.encoder().as_ref()) {
                None => {
                    log::info!(
                        "host: zero-copy on: the encoder reads the application's DMA-BUF pictures"
                    );
                    State::On
                }
                Some(why) => {
                    shared.note(off_line(&why));
                    State::Off(why)
                }
            };
        }
        match &*state {
            State::Off(why) => Err(why.clone()),
            _ => Ok(()),
        }
    }

    /// Turns zero-copy off for good (the application cannot export its frames, or the
    /// encoder could not take one), with the one line unless it was off already.
    pub fn turn_off(&self, shared: &HostShared, why: String) {
        let mut state = lock(&self.state);
        if !matches!(*state, State::Off(_)) {
            shared.note(off_line(&why));
            *state = State::Off(why);
        }
    }
}

/// The one line.
fn off_line(why: &str) -> String {
    format!("zero-copy off ({why}): frames read back by the CPU")
}

/// Why the encoder cannot take DMA-BUF pictures here (None: it can).
fn why_not(
    setting: Result<bool, untether_media::zero_copy::ZeroCopyError>,
    render_node: Result<(), untether_media::codec::hw::HwError>,
    encoder: Option<&EncoderInfo>,
) -> Option<String> {
    match setting {
        Ok(false) => return Some("UNTETHER_ZERO_COPY=off".into()),
        Err(e) => return Some(e.to_string()),
        Ok(true) => {}
    }
    if let Err(e) = render_node {
        return Some(e.to_string());
    }
    match encoder {
        None => Some("no encoder is open".into()),
        Some(e) if e.family != Family::Vaapi => Some(no_dma_buf_input(&e.name).to_string()),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::codec::hw::HwError;
    use untether_media::codec::{Codec, Refresh};
    use untether_media::zero_copy::ZeroCopyError;

    fn info(name: &str, family: Family) -> EncoderInfo {
        EncoderInfo {
            name: name.into(),
            codec: Codec::H264,
            family,
            hardware: family != Family::X264,
            device: None,
            keyframes_on_demand: true,
            live_bitrate: true,
            refresh: Refresh::Idr,
            refresh_period: 30,
            delay_frames: 0,
            bgra_input: false,
        }
    }

    #[test]
    fn the_reason_names_what_is_missing_first() {
        let vaapi = info("h264_vaapi", Family::Vaapi);
        let x264 = info("libx264", Family::X264);
        assert_eq!(why_not(Ok(true), Ok(()), Some(&vaapi)), None);
        assert_eq!(
            why_not(Ok(false), Ok(()), Some(&vaapi)).as_deref(),
            Some("UNTETHER_ZERO_COPY=off")
        );
        let bad = why_not(Err(ZeroCopyError::Setting("yes".into())), Ok(()), None).unwrap();
        assert!(bad.contains("\"yes\""), "{bad}");
        assert_eq!(
            why_not(Ok(true), Err(HwError::NoRenderNode), Some(&x264)).as_deref(),
            Some("no GPU render node: /dev/dri/renderD* is missing")
        );
        let sw = why_not(Ok(true), Ok(()), Some(&x264)).unwrap();
        assert!(sw.contains("libx264") && sw.contains("h264_vaapi"), "{sw}");
        assert_eq!(
            off_line("no GPU render node: /dev/dri/renderD* is missing"),
            "zero-copy off (no GPU render node: /dev/dri/renderD* is missing): frames read \
             back by the CPU"
        );
    }

    #[test]
    fn the_decision_is_made_once_and_said_once() {
        let shared = HostShared::new((0, 0));
        shared.set_encoder(&info("libx264", Family::X264));
        let z = ZeroCopy::default();
        let first = z.decide(&shared).unwrap_err();
        assert_eq!(z.decide(&shared).unwrap_err(), first);
        z.turn_off(&shared, "the compositor cannot export".into());
        assert_eq!(
            z.decide(&shared).unwrap_err(),
            first,
            "the first reason stays"
        );
        let lines: Vec<String> = shared
            .events()
            .into_iter()
            .filter(|e| e.starts_with("zero-copy off"))
            .collect();
        assert_eq!(lines, vec![off_line(&first)]);
    }
}
