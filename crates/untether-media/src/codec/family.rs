//! Encoder families and their low-latency settings: **the one table** of what untether asks of
//! each encoder (docs/CODECS.md prints it). Every family gets: no B-frames, no lookahead, a
//! rate control that holds each frame to about one frame interval's worth of bits (CBR with a
//! one-frame VBV where the encoder allows it), keyframes only when asked (IDR, with parameter
//! sets in band) or, with [`Refresh::Intra`], an intra-refresh sweep every `refresh_period`
//! frames, and the fastest preset the configured one maps to.
//!
//! A new backend (e.g. libx264 through its own C API) adds a variant here with its traits and
//! settings, and an [`EncoderBackend`](super::EncoderBackend) that reads them.

use crate::codec::CodecFfmpeg as _;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::encoder::{EncoderConfig, PictureKind};
use super::hw::{DeviceNeed, HwKind};
use super::{Codec, Refresh};

/// A family of encoders that share settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// libx264, libx264rgb.
    X264,
    /// libx265.
    X265,
    /// libsvtav1 (SVT-AV1).
    SvtAv1,
    /// NVIDIA NVENC: h264_nvenc, hevc_nvenc, av1_nvenc.
    Nvenc,
    /// VA-API (Intel, AMD on Linux): h264_vaapi, hevc_vaapi, av1_vaapi.
    Vaapi,
    /// Intel Quick Sync: h264_qsv, hevc_qsv, av1_qsv.
    Qsv,
    /// AMD AMF: h264_amf, hevc_amf, av1_amf.
    Amf,
    /// V4L2 memory-to-memory (Raspberry Pi and other SoCs): h264_v4l2m2m, hevc_v4l2m2m.
    V4l2m2m,
    /// Any other FFmpeg encoder: FFmpeg's generic options only (no B-frames, VBV).
    Other,
}

/// What untether relies on an encoder family for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traits {
    /// Runs on a GPU or a SoC's video block: needs [`device`](Self::device).
    pub hardware: bool,
    pub device: Option<DeviceNeed>,
    /// A keyframe (IDR) when a frame is sent with `pict_type = I`. Without it the stream has a
    /// keyframe every `refresh_period` frames and clients wait for the next one.
    pub keyframes_on_demand: bool,
    /// The bitrate changes between frames without a new encoder or a keyframe (adaptive
    /// bitrate).
    pub live_bitrate: bool,
    /// Supports [`Refresh::Intra`].
    pub intra_refresh: bool,
    /// May return a frame's packet a moment after the frame went in (its own threads): the
    /// encoder waits for it, bounded.
    pub asynchronous: bool,
}

/// The settings a family's encoder is opened with: AVOptions, the family's private parameter
/// string, and the context fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// AVOptions passed to `avcodec_open2`.
    pub options: Vec<(&'static str, String)>,
    /// Options tried first and dropped if the encoder will not open with them (e.g. VA-API's
    /// low-power mode, which not every GPU has).
    pub optional: Vec<(&'static str, String)>,
    /// The family's own parameter string option (`x264-params`, …) and its `key=value` items,
    /// joined with `:` (the user's extra parameters are appended).
    pub params_option: Option<&'static str>,
    pub params: Vec<String>,
    /// `AVCodecContext.gop_size`.
    pub gop_size: i32,
    /// `rc_max_rate` (None: left unset) and `rc_buffer_size`, bits.
    pub max_rate: Option<i64>,
    pub buffer_bits: i64,
    /// Slice threads on the context (x264); other families thread on their own.
    pub slice_threads: Option<usize>,
    /// The pixel format the encoder is opened with.
    pub pixel: Pixel,
    /// Pictures go up to this hardware device's frames once (NV12), then the encoder reads
    /// them there.
    pub upload: Option<HwKind>,
}

/// An infinite GOP for encoders whose `gop_size` has no "infinite" value.
const LONG_GOP: i32 = 1 << 30;

impl Family {
    pub const ALL: [Family; 9] = [
        Family::X264,
        Family::X265,
        Family::SvtAv1,
        Family::Nvenc,
        Family::Vaapi,
        Family::Qsv,
        Family::Amf,
        Family::V4l2m2m,
        Family::Other,
    ];

    /// The family of an FFmpeg encoder name.
    pub fn of(encoder: &str) -> Family {
        match encoder {
            "libx264" | "libx264rgb" => Family::X264,
            "libx265" => Family::X265,
            "libsvtav1" => Family::SvtAv1,
            n if n.ends_with("_nvenc") => Family::Nvenc,
            n if n.ends_with("_vaapi") => Family::Vaapi,
            n if n.ends_with("_qsv") => Family::Qsv,
            n if n.ends_with("_amf") => Family::Amf,
            n if n.ends_with("_v4l2m2m") => Family::V4l2m2m,
            _ => Family::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::X264 => "x264",
            Family::X265 => "x265",
            Family::SvtAv1 => "SVT-AV1",
            Family::Nvenc => "NVENC",
            Family::Vaapi => "VA-API",
            Family::Qsv => "Quick Sync",
            Family::Amf => "AMF",
            Family::V4l2m2m => "V4L2 M2M",
            Family::Other => "other",
        }
    }

    pub fn traits(self) -> Traits {
        let base = Traits {
            hardware: false,
            device: None,
            keyframes_on_demand: true,
            live_bitrate: false,
            intra_refresh: false,
            asynchronous: false,
        };
        match self {
            Family::X264 => Traits {
                live_bitrate: true,
                intra_refresh: true,
                ..base
            },
            // libx265 3.5's intra refresh is not constrained: a decoder joining at a sweep
            // start is still wrong a sweep later (docs/CODECS.md), so it is refused.
            Family::X265 => base,
            // SVT-AV1 1.4 forces keyframes only in its random-access CRF/CQP mode ("Force key
            // frame is only supported with RA CRF/CQP mode"), not in low-delay CBR.
            Family::SvtAv1 => Traits {
                keyframes_on_demand: false,
                asynchronous: true,
                ..base
            },
            Family::Nvenc => Traits {
                hardware: true,
                device: Some(DeviceNeed::Nvidia),
                live_bitrate: true,
                intra_refresh: true,
                asynchronous: true,
                ..base
            },
            Family::Vaapi | Family::Qsv | Family::Amf => Traits {
                hardware: true,
                device: Some(DeviceNeed::Dri),
                asynchronous: true,
                ..base
            },
            Family::V4l2m2m => Traits {
                hardware: true,
                device: Some(DeviceNeed::Video),
                asynchronous: true,
                ..base
            },
            Family::Other => base,
        }
    }

    /// The encoders `--encoder auto` tries for `codec`, best first: hardware (NVENC, Quick
    /// Sync, VA-API, AMF, V4L2 M2M), then the software encoder.
    pub fn auto_order(codec: Codec) -> Vec<String> {
        let stem = match codec {
            Codec::H264 => "h264",
            Codec::Hevc => "hevc",
            Codec::Av1 => "av1",
            // Only libx264rgb takes RGB as is.
            Codec::H264Rgb => return vec!["libx264rgb".into()],
        };
        let mut out: Vec<String> = ["nvenc", "qsv", "vaapi", "amf", "v4l2m2m"]
            .iter()
            .filter(|hw| !(codec == Codec::Av1 && **hw == "v4l2m2m"))
            .map(|hw| format!("{stem}_{hw}"))
            .collect();
        out.push(codec.software_encoder().into());
        out
    }

    /// The low-latency settings of this family for `cfg`, encoding `codec` from pictures of
    /// `input` kind.
    pub fn settings(self, cfg: &EncoderConfig, codec: Codec, input: PictureKind) -> Settings {
        let bps = cfg.bitrate_kbps as i64 * 1000;
        let fps = cfg.fps.max(1) as i64;
        let one_frame = bps / fps;
        let period = cfg.refresh_period.max(2);
        let intra = cfg.refresh == Refresh::Intra;
        // Frames between keyframes when not asked for: none (infinite), or the periodic GOP.
        let gop = if cfg.gop_frames > 0 {
            cfg.gop_frames as i32
        } else {
            LONG_GOP
        };
        let mut s = Settings {
            options: Vec::new(),
            optional: Vec::new(),
            params_option: None,
            params: Vec::new(),
            gop_size: gop,
            max_rate: Some(bps),
            buffer_bits: one_frame,
            slice_threads: None,
            pixel: Pixel::YUV420P,
            upload: None,
        };
        let preset = cfg.preset.as_str();
        match self {
            Family::X264 => {
                s.options.push(("preset", preset.into()));
                s.options.push(("tune", "zerolatency".into()));
                s.options.push(("forced-idr", "1".into()));
                s.params_option = Some("x264-params");
                // Intra refresh sweeps once per keyint: a finite keyint is what makes it move.
                s.params.push(if intra {
                    format!("keyint={period}:min-keyint={period}:intra-refresh=1")
                } else if cfg.gop_frames > 0 {
                    format!("keyint={0}:min-keyint={0}", cfg.gop_frames)
                } else {
                    "keyint=infinite".into()
                });
                s.params
                    .push("scenecut=0:repeat-headers=1:sliced-threads=1".into());
                s.gop_size = -1;
                s.slice_threads = Some(cfg.threads.max(1));
                s.pixel = if codec == Codec::H264Rgb {
                    Pixel::BGRZ
                } else {
                    Pixel::YUV420P
                };
            }
            Family::X265 => {
                s.options.push(("preset", preset.into()));
                s.options.push(("tune", "zerolatency".into()));
                s.options.push(("forced-idr", "1".into()));
                s.params_option = Some("x265-params");
                s.params.push(if cfg.gop_frames > 0 {
                    format!("keyint={0}:min-keyint={0}", cfg.gop_frames)
                } else {
                    "keyint=-1".into()
                });
                s.params.push(format!(
                    "scenecut=0:bframes=0:rc-lookahead=0:repeat-headers=1:frame-threads=1:\
                     pools={}:vbv-maxrate={}:vbv-bufsize={}:log-level=error",
                    cfg.threads.max(1),
                    bps / 1000,
                    (one_frame / 1000).max(1)
                ));
                s.gop_size = -1;
            }
            Family::SvtAv1 => {
                s.options.push(("preset", svt_preset(preset).to_string()));
                s.params_option = Some("svtav1-params");
                // Low-delay prediction (no frames from the future), CBR, no lookahead, no
                // scene-change keyframes. CBR refuses max rate = target and buffers below
                // 20 ms: the buffer is one frame interval or 20 ms, whichever is longer.
                s.params.push(format!(
                    "pred-struct=1:rc=2:lookahead=0:scd=0:lp={}",
                    cfg.threads.max(1)
                ));
                s.max_rate = None;
                s.buffer_bits = one_frame.max(bps / 50);
                // No keyframes on demand: one every `refresh_period` frames (or the GOP).
                s.gop_size = if cfg.gop_frames > 0 {
                    cfg.gop_frames as i32
                } else {
                    period as i32
                };
            }
            Family::Nvenc => {
                s.options.push(("preset", nvenc_preset(preset).into()));
                s.options.push(("tune", "ull".into()));
                s.options.push(("zerolatency", "1".into()));
                s.options.push(("delay", "0".into()));
                s.options.push(("rc", "cbr".into()));
                s.options.push(("rc-lookahead", "0".into()));
                s.options.push(("no-scenecut", "1".into()));
                s.options.push(("forced-idr", "1".into()));
                s.options.push(("b_ref_mode", "disabled".into()));
                s.options.push(("multipass", "disabled".into()));
                if intra {
                    // NVENC: refresh period = gop_size, spread over gop_size − 1 frames, GOP
                    // infinite, recovery-point SEI.
                    s.options.push(("intra-refresh", "1".into()));
                    s.gop_size = period as i32;
                }
                // BGRA as is: the GPU converts.
                s.pixel = match input {
                    PictureKind::Bgra => Pixel::BGRZ,
                    PictureKind::I420 => Pixel::YUV420P,
                };
            }
            Family::Vaapi => {
                s.optional.push(("low_power", "1".into()));
                s.options.push(("rc_mode", "CBR".into()));
                s.options.push(("async_depth", "1".into()));
                s.pixel = Pixel::VAAPI;
                s.upload = Some(HwKind::Vaapi);
            }
            Family::Qsv => {
                s.optional.push(("low_power", "1".into()));
                s.options.push(("preset", qsv_preset(preset).into()));
                s.options.push(("async_depth", "1".into()));
                s.options.push(("look_ahead", "0".into()));
                s.options.push(("forced_idr", "1".into()));
                s.pixel = Pixel::QSV;
                s.upload = Some(HwKind::Qsv);
            }
            Family::Amf => {
                s.options.push(("usage", "ultralowlatency".into()));
                s.options.push((
                    "quality",
                    if matches!(preset, "ultrafast" | "superfast" | "veryfast") {
                        "speed".into()
                    } else {
                        "balanced".into()
                    },
                ));
                s.options.push(("rc", "cbr".into()));
                s.options.push(("header_spacing", "1".into()));
            }
            Family::V4l2m2m => {
                s.options.push(("num_capture_buffers", "4".into()));
                s.options.push(("num_output_buffers", "2".into()));
            }
            Family::Other => {}
        }
        s
    }
}

/// SVT-AV1's numeric preset for an x264 preset name: ultrafast → 12 (its fastest real-time
/// preset; 13 is for debugging only) down to placebo → 3.
pub fn svt_preset(x264_preset: &str) -> u8 {
    match x264_preset {
        "ultrafast" => 12,
        "superfast" => 11,
        "veryfast" => 10,
        "faster" => 9,
        "fast" => 8,
        "medium" => 7,
        "slow" => 6,
        "slower" => 5,
        "veryslow" => 4,
        _ => 3,
    }
}

/// NVENC's preset (p1 fastest … p7 best) for an x264 preset name.
pub fn nvenc_preset(x264_preset: &str) -> &'static str {
    match x264_preset {
        "ultrafast" => "p1",
        "superfast" => "p2",
        "veryfast" => "p3",
        "faster" | "fast" => "p4",
        "medium" => "p5",
        "slow" => "p6",
        _ => "p7",
    }
}

/// Quick Sync's preset for an x264 preset name.
pub fn qsv_preset(x264_preset: &str) -> &'static str {
    match x264_preset {
        "ultrafast" | "superfast" | "veryfast" => "veryfast",
        "faster" => "faster",
        "fast" => "fast",
        "medium" => "medium",
        "slow" => "slow",
        "slower" => "slower",
        _ => "veryslow",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(refresh: Refresh) -> EncoderConfig {
        EncoderConfig {
            refresh,
            refresh_period: 30,
            ..EncoderConfig::new(1280, 720, 60, 10_000)
        }
    }

    #[test]
    fn families_by_name() {
        assert_eq!(Family::of("libx264rgb"), Family::X264);
        assert_eq!(Family::of("hevc_nvenc"), Family::Nvenc);
        assert_eq!(Family::of("av1_qsv"), Family::Qsv);
        assert_eq!(Family::of("h264_v4l2m2m"), Family::V4l2m2m);
        assert_eq!(Family::of("libaom-av1"), Family::Other);
        assert_eq!(
            Family::auto_order(Codec::Hevc),
            [
                "hevc_nvenc",
                "hevc_qsv",
                "hevc_vaapi",
                "hevc_amf",
                "hevc_v4l2m2m",
                "libx265"
            ]
        );
        assert_eq!(Family::auto_order(Codec::Av1).last().unwrap(), "libsvtav1");
        // Hardware first, software last, for every codec.
        for c in Codec::SELECTABLE {
            let order = Family::auto_order(c);
            let n = order.len();
            assert!(order[..n - 1]
                .iter()
                .all(|e| Family::of(e).traits().hardware));
            assert!(!Family::of(&order[n - 1]).traits().hardware);
        }
    }

    #[test]
    fn x264_intra_refresh_has_a_finite_keyint_so_it_sweeps() {
        let s = Family::X264.settings(&cfg(Refresh::Intra), Codec::H264, PictureKind::Bgra);
        let p = s.params.join(":");
        assert!(
            p.contains("keyint=30:") && p.contains("intra-refresh=1"),
            "{p}"
        );
        assert!(!p.contains("infinite"), "{p}");
        let s = Family::X264.settings(&cfg(Refresh::Idr), Codec::H264, PictureKind::Bgra);
        let p = s.params.join(":");
        assert!(
            p.contains("keyint=infinite") && !p.contains("intra-refresh"),
            "{p}"
        );
        // One-frame VBV at the target rate.
        assert_eq!(s.max_rate, Some(10_000_000));
        assert_eq!(s.buffer_bits, 10_000_000 / 60);
    }

    #[test]
    fn nvenc_is_p1_ull_cbr_without_b_frames_or_lookahead_on_bgra() {
        let s = Family::Nvenc.settings(&cfg(Refresh::Intra), Codec::H264, PictureKind::Bgra);
        let has = |k: &str, v: &str| s.options.iter().any(|(a, b)| *a == k && b == v);
        assert!(has("preset", "p1") && has("tune", "ull") && has("rc", "cbr"));
        assert!(has("rc-lookahead", "0") && has("intra-refresh", "1"));
        assert_eq!(s.gop_size, 30);
        assert_eq!(s.pixel, Pixel::BGRZ);
        assert_eq!(s.buffer_bits, 10_000_000 / 60);
    }

    #[test]
    fn svt_av1_is_low_delay_cbr_with_its_keyframe_period() {
        let s = Family::SvtAv1.settings(&cfg(Refresh::Idr), Codec::Av1, PictureKind::Bgra);
        let p = s.params.join(":");
        assert!(p.contains("pred-struct=1") && p.contains("rc=2"), "{p}");
        assert_eq!(s.gop_size, 30);
        // At least 20 ms of buffer (SVT-AV1's minimum).
        assert_eq!(s.buffer_bits, 10_000_000 / 50);
        assert!(!Family::SvtAv1.traits().keyframes_on_demand);
        assert!(!Family::SvtAv1.traits().intra_refresh);
    }

    #[test]
    fn hardware_families_upload_or_take_rgb() {
        let c = cfg(Refresh::Idr);
        let v = Family::Vaapi.settings(&c, Codec::Hevc, PictureKind::Bgra);
        assert_eq!(v.upload, Some(HwKind::Vaapi));
        assert!(v.optional.iter().any(|(k, _)| *k == "low_power"));
        let q = Family::Qsv.settings(&c, Codec::H264, PictureKind::I420);
        assert_eq!(q.upload, Some(HwKind::Qsv));
        let n = Family::Nvenc.settings(&c, Codec::H264, PictureKind::I420);
        assert_eq!(n.pixel, Pixel::YUV420P);
        for f in Family::ALL {
            let t = f.traits();
            assert_eq!(t.hardware, t.device.is_some(), "{f:?}");
        }
    }
}
