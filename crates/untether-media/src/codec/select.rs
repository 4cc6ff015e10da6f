//! The user's choice of codec, encoder and conversion (`video.codec`, `video.encoder`,
//! `video.conversion`, and their flags), validated together: where one implies another it
//! follows (`libx264rgb` ⇔ conversion `rgb`; an encoder's codec), and where they contradict
//! each other the error names both.

use std::fmt;
use std::str::FromStr;

use ffmpeg_next::ffi;

use super::encoder::codec_of_encoder;
use super::{init_ffmpeg, Codec, UnknownCodec};
use crate::convert::{Conversion, UnknownConversion};

/// `auto` or an FFmpeg encoder name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum EncoderChoice {
    /// The best that opens, hardware first ([`super::Family::auto_order`]).
    #[default]
    Auto,
    Named(String),
}

impl EncoderChoice {
    /// The choice a name stands for, as `video.encoder` and the host builder read it: `auto`,
    /// or an FFmpeg encoder's name (whether this FFmpeg has it is checked with the rest of the
    /// selection, [`Selection::parse`]).
    pub fn from_name(name: &str) -> EncoderChoice {
        match name {
            "auto" => EncoderChoice::Auto,
            n => EncoderChoice::Named(n.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            EncoderChoice::Auto => "auto",
            EncoderChoice::Named(n) => n,
        }
    }
}

impl fmt::Display for EncoderChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An encoder name this FFmpeg does not have (as a video encoder of h264, hevc or av1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown encoder {name:?}: not an h264, hevc or av1 encoder of this FFmpeg; allowed: auto, {known}")]
pub struct UnknownEncoder {
    pub name: String,
    /// The names that would do, comma-separated.
    pub known: String,
}

/// Every video encoder of this FFmpeg that produces a codec untether streams, by name, with
/// its codec (hardware wrappers included: whether their device exists is another question).
pub fn available_encoders() -> Vec<(String, Codec)> {
    init_ffmpeg();
    let mut out = Vec::new();
    let mut opaque = std::ptr::null_mut();
    // SAFETY: av_codec_iterate walks FFmpeg's static codec list; names are static C strings.
    unsafe {
        loop {
            let c = ffi::av_codec_iterate(&mut opaque);
            if c.is_null() {
                break;
            }
            if ffi::av_codec_is_encoder(c) == 0
                || (*c).type_ != ffi::AVMediaType::AVMEDIA_TYPE_VIDEO
            {
                continue;
            }
            let name = std::ffi::CStr::from_ptr((*c).name)
                .to_string_lossy()
                .into_owned();
            if let Some(codec) = crate::codec::codec_of_id((*c).id.into(), name == "libx264rgb") {
                out.push((name, codec));
            }
        }
    }
    out
}

/// Why a selection is refused; each names the keys involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(transparent)]
    Codec(#[from] UnknownCodec),
    #[error(transparent)]
    Encoder(#[from] UnknownEncoder),
    #[error(transparent)]
    Conversion(#[from] UnknownConversion),
    /// Two settings contradict each other: `keys` names them (`video.codec, video.encoder`).
    #[error("{message}")]
    Contradiction { keys: &'static str, message: String },
}

/// A validated codec / encoder / conversion choice.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selection {
    /// None: auto (the best common codec with the client).
    pub codec: Option<Codec>,
    pub encoder: EncoderChoice,
    pub conversion: Conversion,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            codec: None,
            encoder: EncoderChoice::Auto,
            conversion: Conversion::Simd,
        }
    }
}

impl Selection {
    /// Reads the three settings, each optional (not given: auto, or what the others imply).
    pub fn parse(
        codec: Option<&str>,
        encoder: Option<&str>,
        conversion: Option<&str>,
    ) -> Result<Selection, SelectionError> {
        let codec = match codec {
            None | Some("auto") => None,
            Some(s) => {
                let c: Codec = s.parse()?;
                if !Codec::SELECTABLE.contains(&c) {
                    return Err(UnknownCodec(s.into()).into());
                }
                Some(c)
            }
        };
        let conversion = conversion.map(str::parse::<Conversion>).transpose()?;
        let encoder = match encoder.map(EncoderChoice::from_name) {
            None | Some(EncoderChoice::Auto) => None,
            Some(EncoderChoice::Named(name)) => {
                let name = name.as_str();
                let c = codec_of_encoder(name).ok_or_else(|| UnknownEncoder {
                    name: name.to_string(),
                    known: available_encoders()
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
                Some((name.to_string(), c))
            }
        };
        let contradiction = |keys, message: String| SelectionError::Contradiction { keys, message };
        let (encoder, conversion) = match (encoder, conversion) {
            (None, Some(Conversion::Rgb)) => (
                Some(("libx264rgb".to_string(), Codec::H264Rgb)),
                Conversion::Rgb,
            ),
            (None, c) => (None, c.unwrap_or(Conversion::Simd)),
            (Some((n, Codec::H264Rgb)), None | Some(Conversion::Rgb)) => {
                (Some((n, Codec::H264Rgb)), Conversion::Rgb)
            }
            (Some((n, Codec::H264Rgb)), Some(c)) => {
                return Err(contradiction(
                    "video.encoder, video.conversion",
                    format!(
                        "encoder {n:?} and conversion {:?} contradict each other: libx264rgb \
                         takes BGR as is; use conversion rgb (or leave it out)",
                        c.name()
                    ),
                ))
            }
            (Some((n, _)), Some(Conversion::Rgb)) => {
                return Err(contradiction(
                    "video.encoder, video.conversion",
                    format!(
                        "encoder {n:?} and conversion \"rgb\" contradict each other: rgb (no \
                         conversion) needs libx264rgb; {n} takes simd or swscale"
                    ),
                ))
            }
            (Some(e), c) => (Some(e), c.unwrap_or(Conversion::Simd)),
        };
        if let (Some(c), Some((n, ec))) = (codec, &encoder) {
            let fits = *ec == c || (c == Codec::H264 && *ec == Codec::H264Rgb);
            if !fits {
                return Err(contradiction(
                    if conversion == Conversion::Rgb && ec == &Codec::H264Rgb {
                        "video.codec, video.conversion"
                    } else {
                        "video.codec, video.encoder"
                    },
                    format!("codec {c} and encoder {n:?} contradict each other: {n} encodes {ec}"),
                ));
            }
        }
        Ok(Selection {
            codec: codec.or(encoder.as_ref().map(|(_, c)| *c)),
            encoder: encoder.map_or(EncoderChoice::Auto, |(n, _)| EncoderChoice::Named(n)),
            conversion,
        })
    }

    /// The codecs this host may offer, best first: the one chosen, or (auto) h264, hevc, av1.
    pub fn codecs(&self) -> Vec<Codec> {
        match self.codec {
            Some(c) => vec![c],
            None => Codec::SELECTABLE.to_vec(),
        }
    }

    /// The codec name as configured (`auto` or one).
    pub fn codec_name(&self) -> &'static str {
        self.codec.map_or("auto", Codec::name)
    }
}

impl FromStr for EncoderChoice {
    type Err = UnknownEncoder;
    /// `auto`, or a name this FFmpeg has.
    fn from_str(s: &str) -> Result<Self, UnknownEncoder> {
        match Selection::parse(None, Some(s), None) {
            Ok(sel) => Ok(sel.encoder),
            Err(SelectionError::Encoder(e)) => Err(e),
            Err(e) => Err(UnknownEncoder {
                name: s.into(),
                known: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_read_in_one_place_for_the_config_and_the_builder() {
        assert_eq!(EncoderChoice::from_name("auto"), EncoderChoice::Auto);
        let named = EncoderChoice::from_name("libx265");
        assert_eq!(named, EncoderChoice::Named("libx265".into()));
        assert_eq!(EncoderChoice::from_name(named.name()), named);
        assert_eq!(
            Selection::parse(None, Some("auto"), None),
            Ok(Selection::default())
        );
    }

    #[test]
    fn codec_encoder_and_conversion_follow_from_each_other_or_contradict() {
        let p = |c: Option<&str>, e: Option<&str>, v: Option<&str>| Selection::parse(c, e, v);
        assert_eq!(p(None, None, None), Ok(Selection::default()));
        let rgb = p(None, None, Some("rgb")).unwrap();
        assert_eq!(rgb.encoder, EncoderChoice::Named("libx264rgb".into()));
        assert_eq!(rgb.codec, Some(Codec::H264Rgb));
        assert_eq!(
            p(None, Some("libx264rgb"), None).unwrap().conversion,
            Conversion::Rgb
        );
        let hevc = p(None, Some("libx265"), None).unwrap();
        assert_eq!(hevc.codec, Some(Codec::Hevc));
        assert_eq!(hevc.codecs(), vec![Codec::Hevc]);
        assert_eq!(
            p(Some("av1"), None, Some("swscale")).unwrap(),
            Selection {
                codec: Some(Codec::Av1),
                encoder: EncoderChoice::Auto,
                conversion: Conversion::Swscale
            }
        );
        // A named hardware encoder is a valid choice (whether it opens is decided later).
        assert_eq!(
            p(None, Some("h264_nvenc"), None).unwrap().codec,
            Some(Codec::H264)
        );
        assert_eq!(
            p(None, None, None).unwrap().codecs(),
            vec![Codec::H264, Codec::Hevc, Codec::Av1]
        );
        let bad = |r: Result<Selection, SelectionError>| r.unwrap_err().to_string();
        let e = bad(p(Some("hevc"), Some("libx264"), None));
        assert!(e.contains("hevc") && e.contains("libx264"), "{e}");
        let e = bad(p(None, Some("libx264rgb"), Some("simd")));
        assert!(e.contains("libx264rgb") && e.contains("simd"), "{e}");
        let e = bad(p(None, Some("libx265"), Some("rgb")));
        assert!(e.contains("libx265") && e.contains("rgb"), "{e}");
        let e = bad(p(Some("vp9"), None, None));
        assert!(e.contains("h264") && e.contains("av1"), "{e}");
        let e = bad(p(Some("h264rgb"), None, None));
        assert!(e.contains("auto, h264, hevc, av1"), "{e}");
        let e = bad(p(None, Some("x265"), None));
        assert!(e.contains("libx265") && e.contains("auto"), "{e}");
        // An audio encoder is no video encoder.
        assert!(p(None, Some("libopus"), None).is_err());
        assert_eq!(
            "auto".parse::<EncoderChoice>().unwrap(),
            EncoderChoice::Auto
        );
        let names: Vec<String> = available_encoders().into_iter().map(|(n, _)| n).collect();
        for n in ["libx264", "libx264rgb", "libx265", "libsvtav1"] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
    }
}
