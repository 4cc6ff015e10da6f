//! `[video]`: the frame size, rate, bitrate, codec, encoder, conversion, refresh and preset, in
//! text form ([`VideoToml`]) and validated ([`VideoConfig`]).

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
    /// `h264`, `hevc`, `av1` or `auto` (the best the client and this host have in common);
    /// not given: follows from `encoder`, else h264 (see [`Selection::parse`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codec: Option<String>,
    /// `auto` (the best that opens, hardware first) or an FFmpeg encoder name (`libx264`,
    /// `libx264rgb`, `libx265`, `libsvtav1`, `h264_nvenc`, `hevc_vaapi`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder: Option<String>,
    pub preset: String,
    /// `simd`, `swscale` or `rgb`; not given: follows from `encoder`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversion: Option<String>,
    #[serde(deserialize_with = "limits::de_encoder_threads")]
    pub encoder_threads: usize,
    /// `idr` (keyframes when a client joins or loses a frame) or `intra` (an intra-refresh
    /// sweep every `refresh_period` frames; clients wait for one instead of asking).
    pub refresh: String,
    /// Frames per intra-refresh sweep, and between the keyframes of an encoder that cannot
    /// make one on demand (libsvtav1).
    #[serde(deserialize_with = "limits::de_refresh_period")]
    pub refresh_period: u32,
    /// Slices per frame, each sent as soon as x264 has it (1: frames are sent whole; 2 or
    /// more need codec h264, encoder libx264 or auto, refresh idr).
    #[serde(deserialize_with = "limits::de_slices")]
    pub slices: u8,
    /// Frames between keyframes (0: only when a client joins or asks).
    #[serde(deserialize_with = "limits::de_gop_frames")]
    pub gop_frames: u32,
    /// The encoder family's own options (`x264-params`, `x265-params`, `svtav1-params`),
    /// `key=value` pairs joined by `:` (empty: none).
    pub encoder_params: String,
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
    /// [`VideoConfig::default`], with `codec`, `encoder` and `conversion` left out (they follow
    /// from each other, so a file may name just one).
    fn default() -> Self {
        VideoToml {
            codec: None,
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
            codec: Some(v.selection.codec_name().into()),
            encoder: Some(v.selection.encoder.name().into()),
            preset: v.preset.clone(),
            conversion: Some(v.selection.conversion.name().into()),
            encoder_threads: v.encoder_threads,
            refresh: v.refresh.name().into(),
            refresh_period: v.refresh_period,
            slices: v.slices,
            gop_frames: v.gop_frames,
            encoder_params: v.encoder_params.clone(),
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
    /// Codec, encoder and converter (`video.codec`, `video.encoder`, `video.conversion`).
    #[serde(serialize_with = "ser_selection")]
    pub selection: Selection,
    pub preset: String,
    /// Encoder threads (`video.encoder_threads`); 0: auto, from the cores and the resolution
    /// when the encoder opens (`untether_media::codec::sizing`).
    pub encoder_threads: usize,
    #[serde(serialize_with = "ser_display")]
    pub refresh: Refresh,
    pub refresh_period: u32,
    /// Slices per frame (`video.slices`): 1 sends frames whole (any encoder); 2 or more encode
    /// with libx264 through x264's own API and send each slice the moment x264 has written it
    /// (docs/PROTOCOL.md §6.3).
    pub slices: u8,
    /// Frames between keyframes (`video.gop_frames`; 0: only when a client joins or asks).
    pub gop_frames: u32,
    /// The encoder family's own options (`video.encoder_params`: `key=value` pairs joined by
    /// `:`; x264's, x265's or SVT-AV1's), after the low-latency settings; a host serving
    /// browsers adds constrained baseline's.
    pub encoder_params: String,
}

fn ser_selection<S: serde::Serializer>(v: &Selection, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!(
        "codec {}, encoder {}, conversion {}",
        v.codec_name(),
        v.encoder,
        v.conversion
    ))
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
            // H.264 (every client decodes it; `auto` opens an encoder for every codec at
            // start), the best encoder that opens.
            selection: Selection {
                codec: Some(Codec::H264),
                ..Selection::default()
            },
            preset: PRESETS[0].into(),
            encoder_threads: 0,
            refresh: Refresh::Idr,
            refresh_period: 30,
            slices: 1,
            gop_frames: 0,
            encoder_params: String::new(),
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
        REFRESH_PERIOD.check(self.refresh_period)?;
        if self.refresh == Refresh::Intra {
            if let EncoderChoice::Named(n) = &self.selection.encoder {
                if !untether_media::codec::Family::of(n).traits().intra_refresh {
                    return Err(invalid(
                        "video.refresh, video.encoder",
                        untether_media::codec::encoder::no_intra_refresh(n),
                    ));
                }
            }
            if matches!(self.selection.codec, Some(Codec::Av1 | Codec::Hevc)) {
                return Err(invalid(
                    "video.refresh, video.codec",
                    format!(
                        "refresh intra needs an encoder with a usable intra refresh (libx264, \
                         *_nvenc); none of this FFmpeg's {} encoders has one: use refresh idr \
                         or codec h264",
                        self.selection.codec_name()
                    ),
                ));
            }
        }
        SLICES.check(self.slices)?;
        GOP_FRAMES.check(self.gop_frames)?;
        check_encoder_params(&self.encoder_params)?;
        if let Some((keys, why)) = slices_refused(
            self.slices,
            self.selection.codec,
            &self.selection.encoder,
            self.refresh,
        ) {
            return Err(invalid(keys, why));
        }
        Ok(())
    }

    /// The codecs this host may offer, best first (one, or with `auto` every codec).
    pub fn codecs(&self) -> Vec<Codec> {
        self.selection.codecs()
    }
}

/// `video.encoder_params`: empty, or `key=value` pairs joined by `:` (keys of letters, digits,
/// `-` and `_`; a value without `:`), as `x264-params` (and x265's, SVT-AV1's) take them.
pub fn check_encoder_params(params: &str) -> Result<(), ConfigError> {
    if params.is_empty() {
        return Ok(());
    }
    for pair in params.split(':') {
        let ok = pair.split_once('=').is_some_and(|(k, v)| {
            !k.is_empty()
                && !v.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !v.chars().any(|c| c.is_control())
        });
        if !ok {
            return Err(invalid(
                "video.encoder_params",
                format!(
                    "{pair:?} is not key=value; allowed: x264 options as key=value pairs joined                      by ':' (e.g. \"aq-mode=0:keyint=120\")"
                ),
            ));
        }
    }
    Ok(())
}

/// Why slices cannot be sent with this codec, encoder or refresh (None: they can).
pub fn slices_refused(
    slices: u8,
    codec: Option<Codec>,
    encoder: &EncoderChoice,
    refresh: Refresh,
) -> Option<(&'static str, String)> {
    if slices < 2 {
        return None;
    }
    let why = format!(
        "{slices} slices are sent with libx264 through x264's own API (codec h264, encoder \
         libx264 or auto, refresh idr)"
    );
    if let EncoderChoice::Named(n) = encoder {
        if n != "libx264" {
            return Some((
                "video.slices, video.encoder",
                format!("{why}: encoder {n} sends frames whole; use slices = 1 for it"),
            ));
        }
    }
    match codec {
        Some(Codec::H264) => {}
        Some(c) => {
            return Some((
                "video.slices, video.codec",
                format!("{why}: codec {c} is sent whole; use slices = 1, or codec h264"),
            ))
        }
        None => {
            return Some((
                "video.slices, video.codec",
                format!(
                    "{why}: codec auto may choose hevc or av1 per client; name codec h264 \
                     (or use slices = 1)"
                ),
            ))
        }
    }
    if refresh == Refresh::Intra {
        return Some((
            "video.slices, video.refresh",
            format!(
                "{why}: the sliced encoder makes keyframes on demand only, not intra-refresh \
                 sweeps; use refresh idr, or slices = 1"
            ),
        ));
    }
    None
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
        let mut selection = Selection::parse(
            self.codec.as_deref(),
            self.encoder.as_deref(),
            self.conversion.as_deref(),
        )
        .map_err(selection_error)?;
        if self.codec.is_none() && selection.codec.is_none() {
            // Not given: H.264, unless the encoder says otherwise.
            selection.codec = Some(Codec::H264);
        }
        let refresh = self
            .refresh
            .parse::<Refresh>()
            .map_err(|e| invalid("video.refresh", e.to_string()))?;
        let v = VideoConfig {
            resolution,
            fps: self.fps,
            bitrate_kbps: self.bitrate_kbps,
            selection,
            preset: self.preset.clone(),
            encoder_threads: self.encoder_threads,
            refresh,
            refresh_period: self.refresh_period,
            slices: self.slices,
            gop_frames: self.gop_frames,
            encoder_params: self.encoder_params.trim().to_string(),
        };
        v.validate()?;
        Ok(v)
    }
}

/// A [`SelectionError`] as a config error naming its keys.
pub fn selection_error(e: SelectionError) -> ConfigError {
    match &e {
        SelectionError::Codec(_) => invalid("video.codec", e.to_string()),
        SelectionError::Encoder(_) => invalid("video.encoder", e.to_string()),
        SelectionError::Conversion(_) => invalid("video.conversion", e.to_string()),
        SelectionError::Contradiction { keys, .. } => invalid(keys, e.to_string()),
    }
}
