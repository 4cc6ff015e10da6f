//! `[video]`: the frame size, rate, bitrate, preset and video path, in text form
//! ([`VideoToml`]) and validated ([`VideoConfig`]).

#[allow(unused_imports)]
use super::*;

/// A frame size such as 1280x720.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Resolution {
    pub width: u32,
    pub height: u32,
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// `WIDTHxHEIGHT` or a named size ([`units::parse_resolution`]); the range is checked by
/// [`Resolution::validate`].
impl FromStr for Resolution {
    type Err = units::UnitError;
    fn from_str(s: &str) -> Result<Self, units::UnitError> {
        let (width, height) = units::parse_resolution(s)?;
        Ok(Resolution { width, height })
    }
}

impl Resolution {
    /// Within [`WIDTH`] × [`HEIGHT`], both even.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (w, h) = (self.width, self.height);
        if WIDTH.check(w).is_err() || HEIGHT.check(h).is_err() {
            return Err(invalid(
                "video.resolution",
                format!(
                    "{self} is out of range {:?}..={:?} x {:?}..={:?}",
                    WIDTH.min, WIDTH.max, HEIGHT.min, HEIGHT.max
                ),
            ));
        }
        if w % 2 != 0 || h % 2 != 0 {
            return Err(invalid(
                "video.resolution",
                format!("{self}: width and height must be even"),
            ));
        }
        Ok(())
    }
}

/// `[video]`: what the host captures and how it encodes it. The text form of
/// [`VideoConfig`]; [`validate`](Self::validate) turns it into one.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VideoToml {
    pub resolution: String,
    #[serde(deserialize_with = "limits::de_fps")]
    pub fps: u32,
    /// kbit/s: a number, or a string with a unit (`"10M"`, [`units::parse_bitrate`]).
    #[serde(deserialize_with = "de_bitrate")]
    pub bitrate_kbps: u32,
    /// `libx264` or `libx264rgb`; not given: follows from `conversion` (see
    /// [`VideoPath::parse`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder: Option<String>,
    pub preset: String,
    /// `simd`, `swscale` or `rgb`; not given: follows from `encoder`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversion: Option<String>,
    #[serde(deserialize_with = "limits::de_encoder_threads")]
    pub encoder_threads: usize,
    /// Slices per frame, each sent as soon as x264 has it (1: frames are sent whole).
    #[serde(deserialize_with = "limits::de_slices")]
    pub slices: u8,
}

fn de_bitrate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct Kbps;
    impl serde::de::Visitor<'_> for Kbps {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", units::BITRATE_FORMS)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u32, E> {
            BITRATE_KBPS.fit(v).map_err(E::custom)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u32, E> {
            BITRATE_KBPS.fit(v).map_err(E::custom)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u32, E> {
            units::parse_bitrate(v).map_err(E::custom)
        }
    }
    d.deserialize_any(Kbps)
}

impl Default for VideoToml {
    /// [`VideoConfig::default`], with `encoder` and `conversion` left out (they follow from
    /// each other, so a file may name just one).
    fn default() -> Self {
        VideoToml {
            encoder: None,
            conversion: None,
            ..VideoToml::from(&VideoConfig::default())
        }
    }
}

impl From<&VideoConfig> for VideoToml {
    fn from(v: &VideoConfig) -> Self {
        VideoToml {
            resolution: v.resolution.to_string(),
            fps: v.fps,
            bitrate_kbps: v.bitrate_kbps,
            encoder: Some(v.path.encoder_name().into()),
            preset: v.preset.clone(),
            conversion: Some(v.path.conversion().name().into()),
            encoder_threads: v.encoder_threads,
            slices: v.slices,
        }
    }
}

/// Validated video settings (what the host runs with). The defaults of every `[video]` key are
/// written here, once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VideoConfig {
    pub resolution: Resolution,
    pub fps: u32,
    pub bitrate_kbps: u32,
    /// Converter and encoder (`video.conversion`, `video.encoder`).
    #[serde(serialize_with = "ser_display")]
    pub path: VideoPath,
    pub preset: String,
    pub encoder_threads: usize,
    /// Slices per frame (`video.slices`): 1 sends frames whole (x264 through FFmpeg); 2 or
    /// more encode with x264's own API and send each slice the moment x264 has written it
    /// (docs/PROTOCOL.md §6.3).
    pub slices: u8,
}

fn ser_display<S: serde::Serializer>(v: &impl fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl Default for VideoConfig {
    fn default() -> Self {
        VideoConfig {
            resolution: Resolution {
                width: 1280,
                height: 720,
            },
            fps: 60,
            bitrate_kbps: 10_000,
            path: VideoPath::default(),
            preset: PRESETS[0].into(),
            encoder_threads: 2,
            slices: 1,
        }
    }
}

impl VideoConfig {
    /// Checks every range and name; the error names the key and what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.resolution.validate()?;
        FPS.check(self.fps)?;
        BITRATE_KBPS.check(self.bitrate_kbps)?;
        check_preset(&self.preset)?;
        ENCODER_THREADS.check(self.encoder_threads)?;
        SLICES.check(self.slices)?;
        if self.slices > 1 && self.path.is_rgb() {
            return Err(invalid(
                "video.slices, video.encoder",
                format!(
                    "{} slices need libx264 (4:2:0, conversion simd or swscale): libx264rgb \
                     sends frames whole (slices = 1)",
                    self.slices
                ),
            ));
        }
        Ok(())
    }

    /// The stream's codec, from the video path.
    pub fn codec(&self) -> untether_proto::Codec {
        codec_of(self.path)
    }
}

/// The codec a video path produces (the media crate does not know the wire's codecs).
pub fn codec_of(path: VideoPath) -> untether_proto::Codec {
    match path {
        VideoPath::Yuv420Simd | VideoPath::Yuv420Swscale => untether_proto::Codec::H264,
        VideoPath::Rgb => untether_proto::Codec::H264Rgb,
    }
}

/// x264 presets, fastest first.
pub const PRESETS: [&str; 10] = [
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
];

fn check_preset(preset: &str) -> Result<(), ConfigError> {
    if PRESETS.contains(&preset) {
        Ok(())
    } else {
        Err(invalid(
            "video.preset",
            format!("unknown preset {preset:?}; allowed: {}", PRESETS.join(", ")),
        ))
    }
}

impl VideoToml {
    pub fn validate(&self) -> Result<VideoConfig, ConfigError> {
        let resolution = self
            .resolution
            .parse::<Resolution>()
            .map_err(|m| invalid("video.resolution", m.to_string()))?;
        let path =
            VideoPath::parse(self.encoder.as_deref(), self.conversion.as_deref()).map_err(|e| {
                use untether_media::codec::VideoPathError as E;
                match e {
                    E::Encoder(e) => invalid("video.encoder", e.to_string()),
                    E::Conversion(e) => invalid("video.conversion", e.to_string()),
                    E::Contradiction { .. } => {
                        invalid("video.encoder, video.conversion", e.to_string())
                    }
                }
            })?;
        let v = VideoConfig {
            resolution,
            fps: self.fps,
            bitrate_kbps: self.bitrate_kbps,
            path,
            preset: self.preset.clone(),
            encoder_threads: self.encoder_threads,
            slices: self.slices,
        };
        v.validate()?;
        Ok(v)
    }
}
