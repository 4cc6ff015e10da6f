//! Warm decoders: the decode thread opens its decoder before the session's first frame, so no
//! picture waits for it.
//!
//! - At the decode thread's start, a client that asked for hardware decoding (`--hwaccel`)
//!   opens the decoder of its configured codec at once: the hardware device (a CUDA context,
//!   the VA-API driver) opens while the handshake is under way.
//! - When the session starts ([`Piece::Open`](super::decode::Piece::Open): the codec and
//!   picture size from the host's Accept), the decoder is opened for that codec if it is not
//!   already, and a hardware decoder is warmed with one dummy keyframe of the session's size
//!   (made here with the software encoder): a hardware decoder makes its surfaces and its
//!   session on the first keyframe, which would otherwise be the host's first frame. The
//!   dummy picture is never shown; the host's first frame is a keyframe of its own (or the
//!   start of an intra-refresh sweep, held until clean), so nothing of it is referenced.

use untether_media::codec::{Codec, Decoder, EncoderConfig};
use untether_media::frame::BgraFrame;

/// The encoder that makes a dummy keyframe of `codec` (None: not warmed, e.g. AV1, whose
/// software encoders are too slow to be worth it at connect).
fn dummy_encoder(codec: Codec) -> Option<&'static str> {
    match codec {
        Codec::H264 => Some("libx264"),
        Codec::Hevc => Some("libx265"),
        Codec::H264Rgb | Codec::Av1 => None,
    }
}

/// Why a hardware decoder was not warmed (said in its one line).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WarmError {
    #[error("no dummy keyframe for {0}")]
    NoEncoder(Codec),
    /// Making the dummy keyframe failed.
    #[error(transparent)]
    Media(#[from] untether_media::MediaError),
    /// The encoder (its name) held the keyframe back.
    #[error("{0} gave no keyframe at once")]
    NoKeyframe(&'static str),
    #[error("the decoder refused it: {0}")]
    Refused(#[source] untether_media::MediaError),
}

/// One keyframe of a black `width`×`height` picture in `codec`.
pub(crate) fn dummy_keyframe(codec: Codec, width: u32, height: u32) -> Result<Vec<u8>, WarmError> {
    let name = dummy_encoder(codec).ok_or(WarmError::NoEncoder(codec))?;
    let mut cfg = EncoderConfig::new(width, height, 60, 2_000).with_encoder(name);
    cfg.threads = 1;
    let mut enc = untether_media::codec::Encoder::new(cfg)?;
    let picture = BgraFrame::new(width, height)?;
    enc.encode(&picture, true)?
        .map(|f| f.data)
        .ok_or(WarmError::NoKeyframe(name))
}

/// Warms a hardware decoder with a dummy keyframe of the session's size; says what it did
/// in one line (software decoders need no warming: they allocate as they go, in
/// microseconds).
pub(crate) fn warm(decoder: &mut Decoder, codec: Codec, width: u32, height: u32) -> String {
    if !decoder.info().hardware() {
        return "software: nothing to warm".into();
    }
    let t0 = std::time::Instant::now();
    let result = dummy_keyframe(codec, width, height).and_then(|k| {
        let made = t0.elapsed();
        decoder.decode(&k).map(|_| made).map_err(WarmError::Refused)
    });
    match result {
        Ok(made) => format!(
            "warmed with a {width}x{height} dummy keyframe in {:.1} ms ({:.1} ms to make it)",
            t0.elapsed().as_secs_f64() * 1e3,
            made.as_secs_f64() * 1e3
        ),
        Err(e) => format!("not warmed ({e}); the first frame warms it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::codec::DecoderConfig;

    #[test]
    fn a_dummy_keyframe_decodes_and_leaves_the_decoder_ready_for_the_stream() {
        let k = dummy_keyframe(Codec::H264, 320, 240).expect("libx264 makes a keyframe");
        let (mut d, _) = Decoder::open(&DecoderConfig::software(Codec::H264, 1)).expect("h264");
        let p = d.decode(&k).expect("decodes").expect("a picture at once");
        assert_eq!((p.width(), p.height()), (320, 240));
        // A software decoder is not warmed, and says so.
        assert!(warm(&mut d, Codec::H264, 320, 240).starts_with("software"));
        // The stream's own keyframe (another size) decodes after the dummy one.
        let k2 = dummy_keyframe(Codec::H264, 640, 360).expect("keyframe");
        let p2 = d.decode(&k2).expect("decodes").expect("a picture");
        assert_eq!((p2.width(), p2.height()), (640, 360));
        let e = dummy_keyframe(Codec::Av1, 64, 64).unwrap_err();
        assert!(matches!(e, WarmError::NoEncoder(Codec::Av1)), "{e:?}");
        assert_eq!(e.to_string(), "no dummy keyframe for av1");
    }
}
