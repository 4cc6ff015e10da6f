//! `untether doctor`: what this machine can do and what to fix, one line per check — the
//! encoders and decoders that really open (each timed on a short real encode of the test
//! scene), hardware devices, the display and a GL ES 3 context, audio devices, UDP buffer
//! limits, clock synchronisation, the state directory, the CPU frequency governor. `--json`
//! for scripts. Exits 0 when both the host and the client role can run here.

use std::time::Instant;
use untether_media::codec::CodecFfmpeg as _;

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use untether::config::ConfigToml;
use untether_media::codec::hw::{self, DeviceNeed};
use untether_media::codec::{
    Codec, Decoder, DecoderChoice, DecoderConfig, EncodedFrame, Encoder, EncoderConfig, Family,
    HwAccel,
};
use untether_media::scene::{Scene, SceneConfig};
use untether_media::BgraFrame;

mod capture;
mod wayland;

pub const LONG_ABOUT: &str = "Check what this machine can do as an untether host and client, \
    and what to fix: one line per check.\n\n\
    Encoders: every H.264, HEVC and AV1 encoder of this FFmpeg that --encoder auto would try \
    (hardware first) is opened at the test size and encodes a few frames of the test scene; \
    the line gives its time per frame, or the device it lacks. Decoders: the software decoders, \
    and each hardware accelerator (--hwaccel) whose device exists, decode those frames. Then: \
    GPUs and video devices (/dev/dri, NVIDIA, /dev/video*), the display and a GL ES 3 context \
    (what a GPU presenter needs), audio devices, the kernel's UDP buffer limits (net.core.rmem_max, \
    wmem_max) against the \
    8 MiB untether asks for, clock synchronisation (chrony, PTP; needed only between two \
    machines), the state directory's permissions, and the CPU frequency governor.\n\n\
    Exit status 0 when both roles can run (an encoder and a decoder work, the state directory \
    is usable, a UDP socket opens); 1 otherwise. --json prints the same as one JSON object.";

#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print one JSON object (for scripts) instead of lines.
    #[arg(long)]
    json: bool,
    /// Frame size the encoders and decoders are tried at (default 720p).
    #[arg(long, value_name = "WxH", default_value = "720p")]
    resolution: String,
    /// Frames each encoder encodes for its timing.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=600))]
    frames: u32,
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    /// Works.
    Ok,
    /// Works, but something is worth fixing.
    Warn,
    /// Not here (no device, not in this FFmpeg): fine unless you need it.
    Absent,
    /// Needed and broken.
    Fail,
}

impl Status {
    fn tag(self) -> &'static str {
        match self {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Absent => "--  ",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the doctor's findings.
#[derive(Clone, Debug, Serialize)]
struct Check {
    /// What was checked: encoder, decoder, device, display, audio, network, clock, state, cpu,
    /// openxr.
    kind: &'static str,
    name: String,
    status: Status,
    detail: String,
    /// What to do about it (empty when nothing).
    #[serde(skip_serializing_if = "String::is_empty")]
    fix: String,
}

/// An encoder or decoder tried for real.
#[derive(Clone, Debug, Serialize)]
struct Codecs {
    name: String,
    codec: &'static str,
    hardware: bool,
    works: bool,
    /// Median time per frame, ms (encode, or decode).
    ms_per_frame: Option<f64>,
    detail: String,
}

#[derive(Debug, Default, Serialize)]
struct Findings {
    /// Both roles can run.
    ok: bool,
    host_ok: bool,
    client_ok: bool,
    size: String,
    encoders: Vec<Codecs>,
    decoders: Vec<Codecs>,
    checks: Vec<Check>,
}

mod openxr;

fn check(kind: &'static str, name: impl Into<String>, status: Status, detail: String) -> Check {
    Check {
        kind,
        name: name.into(),
        status,
        detail,
        fix: String::new(),
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// The test scene's frames at `w`×`h`.
fn scene_frames(w: u32, h: u32, n: u32) -> Result<Vec<BgraFrame>> {
    let mut scene = Scene::new(SceneConfig::new(w, h))?;
    (0..n)
        .map(|i| {
            let mut f = BgraFrame::new(w, h)?;
            scene.render(i as f64 / 60.0, &mut f);
            Ok(f)
        })
        .collect()
}

/// Why an encoder or a decoder fails the doctor's trial (the detail of its check).
#[derive(Debug, thiserror::Error)]
enum TrialError {
    #[error(transparent)]
    Media(#[from] untether_media::MediaError),
    /// The decoder asked for would run as another (the note says which, and why).
    #[error("{0}")]
    Fallback(String),
    /// Nothing came out: `frame` (encoder) or `picture` (decoder).
    #[error("no {0} came out")]
    NoOutput(&'static str),
}

/// Encodes `frames` with encoder `name`; its frames and the median time per frame.
fn try_encoder(
    name: &str,
    frames: &[BgraFrame],
) -> std::result::Result<(Vec<EncodedFrame>, f64), TrialError> {
    let (w, h) = (frames[0].width, frames[0].height);
    let mut enc = Encoder::new(EncoderConfig::new(w, h, 60, 10_000).with_encoder(name))?;
    let mut out = Vec::new();
    let mut times = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        if let Some(e) = enc.encode(f, i == 0)? {
            times.push((e.convert_us + e.encode_us) as f64 / 1000.0);
            out.push(e);
        }
    }
    let ms = median(times).ok_or(TrialError::NoOutput("frame"))?;
    Ok((out, ms))
}

/// Decodes `frames` with `cfg`; the decoder's description and the median time per picture.
fn try_decoder(
    cfg: &DecoderConfig,
    frames: &[EncodedFrame],
) -> std::result::Result<(String, f64), TrialError> {
    let (mut dec, note) = Decoder::open(cfg)?;
    if let Some(note) = note {
        return Err(TrialError::Fallback(note));
    }
    let mut times = Vec::new();
    for f in frames {
        let t = Instant::now();
        if dec.decode(&f.data)?.is_some() {
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let ms = median(times).ok_or(TrialError::NoOutput("picture"))?;
    Ok((dec.info().to_string(), ms))
}

fn encoders_and_decoders(f: &mut Findings, w: u32, h: u32, n: u32) -> Result<()> {
    let frames = scene_frames(w, h, n)?;
    let interval_ms = 1000.0 / 60.0;
    let available: Vec<String> = untether_media::codec::select::available_encoders()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut streams: Vec<(Codec, Vec<EncodedFrame>)> = Vec::new();
    let mut names: Vec<(Codec, String)> = Vec::new();
    for codec in Codec::SELECTABLE {
        for name in Family::auto_order(codec) {
            names.push((codec, name));
        }
    }
    names.push((Codec::H264Rgb, "libx264rgb".into()));
    for (codec, name) in names {
        if !available.contains(&name) {
            continue;
        }
        let traits = Family::of(&name).traits();
        let mut c = Codecs {
            name: name.clone(),
            codec: codec.name(),
            hardware: traits.hardware,
            works: false,
            ms_per_frame: None,
            detail: String::new(),
        };
        let line = if let Some(Err(why)) = traits.device.map(DeviceNeed::find) {
            let why = why.to_string();
            c.detail = why.clone();
            Check {
                fix: format!(
                    "needs {}; --encoder auto passes it over",
                    traits.device.map_or("", DeviceNeed::describe)
                ),
                ..check("encoder", &name, Status::Absent, why)
            }
        } else {
            match try_encoder(&name, &frames) {
                Ok((out, ms)) => {
                    c.works = true;
                    c.ms_per_frame = Some(ms);
                    c.detail = format!("{w}x{h}@60 10 Mbit/s: {ms:.1} ms/frame");
                    let status = if ms > interval_ms {
                        Status::Warn
                    } else {
                        Status::Ok
                    };
                    let mut l = check("encoder", &name, status, c.detail.clone());
                    if status == Status::Warn {
                        l.fix = format!(
                            "slower than a 60 fps frame interval here ({interval_ms:.1} ms): use \
                             a smaller --resolution, a lower --fps or a hardware encoder"
                        );
                    }
                    if !streams.iter().any(|(k, _)| *k == codec) {
                        streams.push((codec, out));
                    }
                    l
                }
                Err(e) => {
                    let e = e.to_string();
                    c.detail = e.clone();
                    Check {
                        fix: "see the error; --encoder auto passes it over".into(),
                        ..check(
                            "encoder",
                            &name,
                            if traits.hardware {
                                Status::Absent
                            } else {
                                Status::Fail
                            },
                            e,
                        )
                    }
                }
            }
        };
        f.encoders.push(c);
        f.checks.push(line);
    }
    // Decoders: each software decoder, then each hardware path — one line when its device is
    // missing, else one per codec.
    // (libx264rgb's stream is decoded by h264 too: once is enough.)
    if streams_has(&streams, Codec::H264) {
        streams.retain(|(c, _)| *c != Codec::H264Rgb);
    }
    for (codec, stream) in &streams {
        let cfg = DecoderConfig::software(*codec, 2);
        f.decoders_try(&cfg, *codec, stream, w, h);
    }
    for hwaccel in [
        HwAccel::V4l2m2m,
        HwAccel::Vaapi,
        HwAccel::Cuda,
        HwAccel::Vdpau,
        HwAccel::Drm,
    ] {
        let need = match hwaccel {
            HwAccel::V4l2m2m => DeviceNeed::Video,
            HwAccel::Cuda => DeviceNeed::Nvidia,
            HwAccel::Vdpau => DeviceNeed::AnyGpu,
            _ => DeviceNeed::Dri,
        };
        if let Err(why) = need.find() {
            let why = why.to_string();
            f.checks.push(Check {
                fix: format!(
                    "needs {}; --hwaccel {hwaccel} falls back to software",
                    need.describe()
                ),
                ..check(
                    "decoder",
                    format!("--hwaccel {hwaccel}"),
                    Status::Absent,
                    why,
                )
            });
            continue;
        }
        for (codec, stream) in &streams {
            let cfg = DecoderConfig {
                decoder: DecoderChoice::Auto,
                hwaccel,
                ..DecoderConfig::software(*codec, 2)
            };
            f.decoders_try(&cfg, *codec, stream, w, h);
        }
    }
    Ok(())
}

fn streams_has(streams: &[(Codec, Vec<EncodedFrame>)], codec: Codec) -> bool {
    streams.iter().any(|(c, _)| *c == codec)
}

impl Findings {
    /// Decodes `stream` with `cfg`: one line, and the decoder's entry.
    fn decoders_try(
        &mut self,
        cfg: &DecoderConfig,
        codec: Codec,
        stream: &[EncodedFrame],
        w: u32,
        h: u32,
    ) {
        let label = if cfg.hwaccel == HwAccel::None {
            codec.software_decoder().to_string()
        } else {
            format!("{} with {}", codec.software_decoder(), cfg.hwaccel)
        };
        let hardware = cfg.hwaccel != HwAccel::None;
        let mut c = Codecs {
            name: label.clone(),
            codec: codec.name(),
            hardware,
            works: false,
            ms_per_frame: None,
            detail: String::new(),
        };
        let line = match try_decoder(cfg, stream) {
            Ok((what, ms)) => {
                c.works = true;
                c.ms_per_frame = Some(ms);
                c.detail = format!("{what}: {ms:.1} ms/frame at {w}x{h}");
                check("decoder", &label, Status::Ok, c.detail.clone())
            }
            Err(e) => {
                let e = e.to_string();
                c.detail = e.clone();
                check(
                    "decoder",
                    &label,
                    if hardware {
                        Status::Absent
                    } else {
                        Status::Fail
                    },
                    e,
                )
            }
        };
        self.decoders.push(c);
        self.checks.push(line);
    }
}

fn list(paths: Vec<std::path::PathBuf>) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn devices(f: &mut Findings) {
    let dri = hw::render_nodes();
    f.checks.push(if dri.is_empty() {
        Check {
            fix: "no VA-API/Quick Sync/AMF here: install the GPU's driver (mesa-va-drivers, \
                  intel-media-va-driver) or use a software encoder"
                .into(),
            ..check(
                "device",
                "/dev/dri",
                Status::Absent,
                "no render node".into(),
            )
        }
    } else {
        check("device", "/dev/dri", Status::Ok, list(dri))
    });
    f.checks.push(zero_copy_encode());
    let nv = hw::nvidia_devices();
    f.checks
        .push(match (nv.is_empty(), hw::library_loads("libcuda.so.1")) {
            (true, _) => check(
                "device",
                "NVIDIA",
                Status::Absent,
                "no /dev/nvidia* (no NVENC/NVDEC)".into(),
            ),
            (false, false) => Check {
                fix: "install the NVIDIA driver (libcuda.so.1)".into(),
                ..check(
                    "device",
                    "NVIDIA",
                    Status::Warn,
                    format!("{} but libcuda.so.1 does not load", list(nv)),
                )
            },
            (false, true) => check("device", "NVIDIA", Status::Ok, list(nv)),
        });
    let video = hw::video_devices();
    f.checks.push(if video.is_empty() {
        check(
            "device",
            "/dev/video*",
            Status::Absent,
            "no V4L2 device (no V4L2 M2M codec)".into(),
        )
    } else {
        check("device", "/dev/video*", Status::Ok, list(video))
    });
}

/// Zero-copy encode (issue 34): whether VA-API takes DMA-BUF pictures here — its device, the
/// frames a dma-buf is mapped onto and the `scale_vaapi` conversion to NV12 set up for real
/// (no dma-buf is mapped: that happens with the OpenXR runtime's first frame).
fn zero_copy_encode() -> Check {
    use untether_media::codec::dma_buf::DRM_FORMAT_XRGB8888;
    use untether_media::codec::VaapiDmaBufImport;
    match VaapiDmaBufImport::open(1280, 720, DRM_FORMAT_XRGB8888, 60) {
        Ok(_) => check(
            "device",
            "zero-copy encode",
            Status::Ok,
            "VA-API maps DMA-BUF pictures and converts them to NV12 on the GPU: the OpenXR \
             runtime's Vulkan frames skip the read-back with a *_vaapi encoder"
                .into(),
        ),
        Err(e) => check(
            "device",
            "zero-copy encode",
            Status::Absent,
            format!("{e}: the OpenXR runtime's frames are read back by the CPU"),
        ),
    }
}

/// GL ES 3 through SDL on the display (what a GPU presenter needs).
fn gles_probe() -> std::result::Result<String, String> {
    let sdl = sdl2::init()?;
    let video = sdl.video()?;
    let driver = video.current_video_driver().to_string();
    if matches!(driver.as_str(), "offscreen" | "dummy") {
        return Err(format!("SDL's {driver} video driver shows nothing"));
    }
    let gl = video.gl_attr();
    gl.set_context_profile(sdl2::video::GLProfile::GLES);
    gl.set_context_version(3, 0);
    let window = video
        .window("untether doctor", 64, 64)
        .opengl()
        .hidden()
        .build()
        .map_err(|e| e.to_string())?;
    let _ctx = window.gl_create_context()?;
    let get = video.gl_get_proc_address("glGetString");
    if get.is_null() {
        return Ok(format!("{driver}: GL ES 3 context"));
    }
    // SAFETY: glGetString of the current context, called with valid enums; it returns static
    // strings (or null).
    let s = |which: u32| unsafe {
        let f: extern "C" fn(u32) -> *const libc::c_char = std::mem::transmute(get);
        let p = f(which);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Ok(format!("{driver}: {} ({})", s(0x1F02), s(0x1F01)))
}

fn display(f: &mut Findings) {
    let has = std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
        || std::env::var_os("SDL_VIDEODRIVER").is_some();
    if !has {
        // kmsdrm drives a display controller directly: only worth naming where there is one.
        let kms = std::fs::read_dir("/dev/dri").is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("card"))
        });
        let fix = if kms {
            "the client runs with --headless (or a pipe sink); for a window set DISPLAY \
             (X11) or WAYLAND_DISPLAY, or SDL_VIDEODRIVER=kmsdrm for a screen without a desktop"
        } else {
            "the client runs with --headless (or a pipe sink); for a window set DISPLAY \
             (X11) or WAYLAND_DISPLAY (this machine has no display controller, /dev/dri/card*, \
             so no screen without a desktop either)"
        };
        f.checks.push(Check {
            fix: fix.into(),
            ..check(
                "display",
                "display",
                Status::Warn,
                "no DISPLAY or WAYLAND_DISPLAY".into(),
            )
        });
        return;
    }
    f.checks.push(match gles_probe() {
        Ok(what) => check("display", "GL ES 3", Status::Ok, what),
        Err(e) => Check {
            fix: "install the GL driver (Mesa: libgles2, libegl1); the SDL window presenter \
                  still works without GL ES"
                .into(),
            ..check("display", "GL ES 3", Status::Warn, e)
        },
    });
}

fn audio(f: &mut Findings) {
    let probe = || -> std::result::Result<(Vec<String>, Vec<String>, String), String> {
        let sdl = sdl2::init()?;
        let a = sdl.audio()?;
        let names = |capture: bool| -> Vec<String> {
            let n = if capture {
                a.num_audio_capture_devices()
            } else {
                a.num_audio_playback_devices()
            }
            .unwrap_or(0);
            (0..n)
                .filter_map(|i| {
                    if capture {
                        a.audio_capture_device_name(i).ok()
                    } else {
                        a.audio_playback_device_name(i).ok()
                    }
                })
                .collect()
        };
        Ok((
            names(false),
            names(true),
            a.current_audio_driver().to_string(),
        ))
    };
    f.checks.push(match probe() {
        Ok((out, inp, driver)) if !out.is_empty() => check(
            "audio",
            "audio",
            Status::Ok,
            format!(
                "{driver}: playback {}; capture {}",
                out.join(", "),
                if inp.is_empty() {
                    "none".to_string()
                } else {
                    inp.join(", ")
                }
            ),
        ),
        Ok((_, _, driver)) => Check {
            fix: "client --audio needs a playback device (PulseAudio/PipeWire or ALSA); \
                  SDL_AUDIODRIVER=dummy plays nowhere"
                .into(),
            ..check(
                "audio",
                "audio",
                Status::Warn,
                format!("{driver}: no playback device"),
            )
        },
        Err(e) => Check {
            fix: "client --audio and host --audio capture need SDL audio (PulseAudio, \
                  PipeWire or ALSA); video works without"
                .into(),
            ..check("audio", "audio", Status::Warn, e)
        },
    });
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn network(f: &mut Findings) -> bool {
    let want = untether_net::SOCKET_BUFFER_BYTES as u64;
    for (key, name) in [("rmem_max", "receive"), ("wmem_max", "send")] {
        let path = format!("/proc/sys/net/core/{key}");
        f.checks.push(match read_u64(&path) {
            Some(v) if v >= want => check(
                "network",
                key,
                Status::Ok,
                format!("{v} bytes ≥ the {want} untether asks for"),
            ),
            Some(v) => Check {
                fix: format!("sysctl -w net.core.{key}={want} (and in /etc/sysctl.d/ to keep it)"),
                ..check(
                    "network",
                    key,
                    Status::Warn,
                    format!(
                        "{v} bytes < the {want} untether asks for: the kernel caps the {name} \
                         buffer, so a keyframe's burst may overflow it"
                    ),
                )
            },
            None => check("network", key, Status::Absent, format!("no {path}")),
        });
    }
    match std::net::UdpSocket::bind("0.0.0.0:0") {
        Ok(_) => {
            f.checks.push(check(
                "network",
                "udp",
                Status::Ok,
                "a UDP socket opens".into(),
            ));
            true
        }
        Err(e) => {
            f.checks
                .push(check("network", "udp", Status::Fail, e.to_string()));
            false
        }
    }
}

/// The output of a command, if it runs and succeeds.
fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn clock(f: &mut Findings) {
    let ptp = hw_list("/dev", "ptp");
    let fix = "only needed between two machines (one machine shares its clock exactly): \
               install chrony (apt install chrony) or run ptp4l and phc2sys, then set \
               client.clock = \"synchronized\"";
    if let Some(t) = command_output("chronyc", &["tracking"]) {
        let status = t
            .lines()
            .find_map(|l| {
                l.strip_prefix("Leap status")
                    .map(|s| s.trim_start_matches([' ', ':']).to_string())
            })
            .unwrap_or_default();
        let offset = t
            .lines()
            .find(|l| l.starts_with("System time"))
            .unwrap_or("")
            .to_string();
        f.checks.push(if status == "Normal" {
            check(
                "clock",
                "chrony",
                Status::Ok,
                format!("synchronised; {offset}"),
            )
        } else {
            Check {
                fix: fix.into(),
                ..check(
                    "clock",
                    "chrony",
                    Status::Warn,
                    format!("leap status {status:?}"),
                )
            }
        });
    } else {
        let timedatectl = probe("timedatectl", &["show", "-p", "NTPSynchronized", "--value"]);
        f.checks.push(timedatectl_check(timedatectl, &ptp, fix));
    }
}

/// What running a command gave.
#[derive(Debug)]
enum Probe {
    /// It is not installed (not on PATH).
    Missing,
    /// It ran and failed: its first line of error output (or its status).
    Failed(String),
    /// It ran and succeeded: its standard output.
    Output(String),
}

fn probe(cmd: &str, args: &[&str]) -> Probe {
    match std::process::Command::new(cmd).args(args).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Probe::Missing,
        Err(e) => Probe::Failed(e.to_string()),
        Ok(out) if out.status.success() => {
            Probe::Output(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(out) => Probe::Failed(
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map_or_else(|| out.status.to_string(), str::to_string),
        ),
    }
}

/// The clock line from `timedatectl show -p NTPSynchronized` when chrony is not installed:
/// synchronised or not, or why timedatectl could not tell (no systemd as init, no D-Bus, as in
/// a container), or neither tool.
fn timedatectl_check(timedatectl: Probe, ptp: &[std::path::PathBuf], fix: &str) -> Check {
    let ptp = if ptp.is_empty() {
        String::new()
    } else {
        format!(" (PTP clocks: {})", list(ptp.to_vec()))
    };
    match timedatectl {
        Probe::Output(t) if t.trim() == "yes" => check(
            "clock",
            "ntp",
            Status::Ok,
            "systemd-timesyncd: synchronised".into(),
        ),
        Probe::Output(_) => Check {
            fix: fix.into(),
            ..check("clock", "ntp", Status::Warn, "not synchronised".into())
        },
        Probe::Failed(why) => Check {
            fix: fix.into(),
            ..check(
                "clock",
                "ntp",
                Status::Warn,
                format!("no chrony; timedatectl cannot tell: {why}{ptp}"),
            )
        },
        Probe::Missing => Check {
            fix: fix.into(),
            ..check(
                "clock",
                "sync",
                Status::Warn,
                format!("no chrony or timedatectl found{ptp}"),
            )
        },
    }
}

fn hw_list(dir: &str, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn state(f: &mut Findings, cfg: &ConfigToml, global: &crate::Global) -> bool {
    let explicit = global.state_dir.clone().or_else(|| {
        [&cfg.host.state_dir, &cfg.client.state_dir]
            .into_iter()
            .find(|d| !d.is_empty())
            .map(std::path::PathBuf::from)
    });
    let dir = match untether::identity::StateDir::resolve(explicit.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            f.checks.push(Check {
                fix: "pass --state-dir or set UNTETHER_STATE_DIR".into(),
                ..check("state", "state directory", Status::Fail, e.to_string())
            });
            return false;
        }
    };
    let shown = dir.path().display().to_string();
    match dir.check() {
        Ok(true) => {
            f.checks.push(check(
                "state",
                "state directory",
                Status::Ok,
                format!("{shown}: private"),
            ));
            true
        }
        Ok(false) => {
            let parent_ok = dir
                .path()
                .ancestors()
                .skip(1)
                .find(|p| p.exists())
                .is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| !m.permissions().readonly()));
            f.checks.push(if parent_ok {
                check(
                    "state",
                    "state directory",
                    Status::Ok,
                    format!("{shown}: not made yet (made with mode 0700 on first use)"),
                )
            } else {
                Check {
                    fix: "pass a writable --state-dir".into(),
                    ..check(
                        "state",
                        "state directory",
                        Status::Fail,
                        format!("{shown}: cannot be made"),
                    )
                }
            });
            parent_ok
        }
        Err(e) => {
            f.checks.push(Check {
                fix: format!(
                    "make it yours and private (chmod 700 {shown}; chmod 600 its files), or pass \
                     another --state-dir"
                ),
                ..check("state", "state directory", Status::Fail, e.to_string())
            });
            false
        }
    }
}

fn governor(f: &mut Findings) {
    let govs: Vec<String> = hw_list("/sys/devices/system/cpu", "cpu")
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p.join("cpufreq/scaling_governor")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    f.checks.push(if govs.is_empty() {
        check(
            "cpu",
            "governor",
            Status::Absent,
            "no cpufreq (a VM or a fixed clock): nothing to set".into(),
        )
    } else if govs.iter().all(|g| g == "performance") {
        check("cpu", "governor", Status::Ok, "performance".into())
    } else {
        let mut g = govs.clone();
        g.dedup();
        Check {
            fix: "cpupower frequency-set -g performance (or echo performance > \
                  /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor): a CPU that clocks \
                  down between frames adds encode and decode time"
                .into(),
            ..check("cpu", "governor", Status::Warn, g.join(", "))
        }
    });
}

/// Runs every check. A configuration file that does not load is a failed check of its own (the
/// rest is checked with the defaults), not a reason not to check anything.
pub fn run(a: DoctorArgs, loaded: Result<ConfigToml>, global: &crate::Global) -> Result<()> {
    let (cfg, config_error) = match loaded {
        Ok(c) => (c, None),
        Err(e) => (ConfigToml::default(), Some(format!("{e:#}"))),
    };
    let cfg = &cfg;
    let (w, h) = untether_proto::units::parse_resolution(&a.resolution)
        .map_err(|e| anyhow::anyhow!("--resolution: {e}"))?;
    untether_media::frame::check_size(w, h).map_err(|e| anyhow::anyhow!("--resolution: {e}"))?;
    let mut f = Findings {
        size: format!("{w}x{h}"),
        ..Default::default()
    };
    encoders_and_decoders(&mut f, w, h, a.frames)?;
    devices(&mut f);
    capture::checks(&mut f);
    display(&mut f);
    wayland::checks(&mut f);
    audio(&mut f);
    let udp = network(&mut f);
    clock(&mut f);
    let config_ok = config_error.is_none();
    f.checks.push(match config_error {
        None => check(
            "config",
            "file",
            Status::Ok,
            crate::config_file::describe(global.config.as_deref()),
        ),
        Some(e) => Check {
            fix: "correct the key the error names (docs/CONFIG.md lists every key and its \
                  values); the other checks here used the defaults"
                .into(),
            ..check("config", "file", Status::Fail, e)
        },
    });
    let state_ok = state(&mut f, cfg, global);
    governor(&mut f);
    openxr::openxr(&mut f);
    // Neither role starts with a configuration file that does not load.
    f.host_ok = config_ok && udp && state_ok && f.encoders.iter().any(|e| e.works);
    f.client_ok = config_ok && udp && state_ok && f.decoders.iter().any(|d| d.works);
    f.ok = f.host_ok && f.client_ok;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&f)?);
    } else {
        for c in &f.checks {
            let fix = if c.fix.is_empty() {
                String::new()
            } else {
                format!(" — fix: {}", c.fix)
            };
            outln!(
                "[{}] {} {}: {}{fix}",
                c.status.tag(),
                c.kind,
                c.name,
                c.detail
            );
        }
        outln!(
            "host role: {} · client role: {}",
            if f.host_ok { "can run" } else { "CANNOT run" },
            if f.client_ok { "can run" } else { "CANNOT run" }
        );
    }
    if f.ok {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "doctor: {} here (see the FAIL lines)",
            match (f.host_ok, f.client_ok) {
                (false, false) => "neither the host nor the client role can run",
                (false, true) => "the host role cannot run",
                _ => "the client role cannot run",
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_errors_say_what_failed() {
        assert_eq!(
            TrialError::NoOutput("picture").to_string(),
            "no picture came out"
        );
        let e = TrialError::from(untether_media::MediaError::Other("no encoder x".into()));
        assert_eq!(
            e.to_string(),
            untether_media::MediaError::Other("no encoder x".into()).to_string()
        );
    }

    #[test]
    fn median_and_status_tags() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
        assert_eq!(Status::Fail.tag(), "FAIL");
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    /// timedatectl installed but unable to answer (no systemd as init, as in this container):
    /// the line says so instead of claiming it is not there.
    #[test]
    fn a_timedatectl_that_fails_is_not_reported_missing() {
        let c = timedatectl_check(
            Probe::Failed("System has not been booted with systemd as init system (PID 1).".into()),
            &[],
            "fix",
        );
        assert!(
            c.detail
                .contains("timedatectl cannot tell: System has not been booted"),
            "{}",
            c.detail
        );
        assert!(
            !c.detail.contains("no chrony or timedatectl"),
            "{}",
            c.detail
        );
        let c = timedatectl_check(Probe::Missing, &[], "fix");
        assert_eq!(c.detail, "no chrony or timedatectl found");
        // On this machine: the probe itself tells a missing command from a failing one.
        assert!(matches!(
            probe("untether-no-such-command", &[]),
            Probe::Missing
        ));
        assert!(matches!(probe("false", &[]), Probe::Failed(_)));
    }
}
