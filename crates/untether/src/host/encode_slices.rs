//! The encoder stage's sliced path (`video.slices` ≥ 2, docs/PROTOCOL.md §6.3): x264 through
//! its own API ([`SliceEncoder`]), each slice handed to the network driver from x264's slice
//! thread the moment it is written ([`HostCommand::Slice`]), while x264 still works on the
//! others; when x264 returns, the frame's timing follows ([`HostCommand::SlicesDone`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use untether_media::codec::{EncoderConfig, InputPicture};
use untether_media::x264::{EncodedSlice, SliceEncoder, SliceEncoderConfig, SliceFrameInfo};
use untether_proto::{Micros, SliceId};

use super::network::{HostCommand, OutgoingSlice};
use super::HostError;
use crate::clock::now_us;
use crate::driver::Handle;

/// The slice encoder's settings for the stage's encoder settings and slice count.
pub(crate) fn slice_encoder_config(cfg: &EncoderConfig, slices: u8) -> SliceEncoderConfig {
    let mut params = cfg.x264_params.clone();
    if cfg.intra_refresh {
        if !params.is_empty() {
            params.push(':');
        }
        params.push_str("intra-refresh=1");
    }
    SliceEncoderConfig {
        width: cfg.width,
        height: cfg.height,
        fps: cfg.fps,
        bitrate_kbps: cfg.bitrate_kbps,
        preset: cfg.preset.clone(),
        threads: cfg.threads,
        slices: slices as usize,
        conversion: cfg.conversion,
        x264_params: params,
    }
}

/// What one sliced encode did.
pub(crate) struct SlicedFrame {
    pub info: SliceFrameInfo,
    /// When the first and the last slice were handed to the driver (host clock).
    pub first_out_us: Micros,
    pub last_out_us: Micros,
}

/// Encodes `picture` as frame `frame_number` of the client of `epoch`, handing each slice to
/// the driver as x264 finishes it.
pub(crate) fn encode(
    enc: &mut SliceEncoder,
    picture: &InputPicture<'_>,
    force_keyframe: bool,
    net: &Handle<HostCommand>,
    epoch: u64,
    frame_number: u32,
    capture_us: Micros,
) -> Result<SlicedFrame, HostError> {
    let first = AtomicU64::new(u64::MAX);
    let last = AtomicU64::new(0);
    let stopped = AtomicBool::new(false);
    let sink = |s: EncodedSlice| {
        let handed_us = now_us();
        first.fetch_min(handed_us, Ordering::Relaxed);
        last.fetch_max(handed_us, Ordering::Relaxed);
        let handed = net.send(HostCommand::Slice(OutgoingSlice {
            epoch,
            frame_number,
            capture_us,
            keyframe: s.keyframe,
            slice: SliceId {
                index: s.index,
                count: s.count,
            },
            data: s.data,
            handed_us,
        }));
        if !handed {
            stopped.store(true, Ordering::Relaxed);
        }
    };
    let info = enc.encode(picture, force_keyframe, &sink)?;
    if stopped.load(Ordering::Relaxed) {
        return Err(HostError::Stopped(None));
    }
    let first_out_us = first.load(Ordering::Relaxed);
    Ok(SlicedFrame {
        info,
        first_out_us: if first_out_us == u64::MAX {
            now_us()
        } else {
            first_out_us
        },
        last_out_us: last.load(Ordering::Relaxed),
    })
}
