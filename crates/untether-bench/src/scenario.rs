//! A scenario: what one measured run streams and how (from flags or a TOML file).

use serde::{Deserialize, Serialize};

/// One measured run. Every field has a default, so a TOML `[[scenario]]` table names only
/// what differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// Shown in the HTML report and used for the JSON file name.
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    /// The codec: h264, hevc, av1 (`video.codec`).
    pub codec: String,
    /// `auto` or an FFmpeg encoder name (`video.encoder`); `libx264rgb` is what
    /// `conversion = "rgb"` selects.
    pub encoder: String,
    /// `idr` or `intra` (`video.refresh`), and the sweep period in frames.
    pub refresh: String,
    pub refresh_period: u32,
    /// x264 preset: ultrafast, superfast, veryfast, …
    pub preset: String,
    /// x264 tune (untether always uses zerolatency; the peer gets the same).
    pub tune: String,
    pub bitrate_kbps: u32,
    /// Slices per frame (`video.slices`; 0 or 1: frames sent whole): 2–16 send each slice as
    /// x264 finishes it (libx264, codec h264).
    pub slices: u32,
    /// Keyframe interval in frames (0: infinite — keyframes only when asked).
    pub gop: u32,
    /// Conversion path: simd, swscale, rgb.
    pub conversion: String,
    pub duration_s: f64,
    /// `loopback` (both ends in this process over 127.0.0.1) or `netns` (host and client in
    /// two network namespaces joined by a veth pair).
    pub transport: String,
    /// tbf rate limit on the veth pair in netns mode (e.g. `20mbit`); none by default.
    pub rate: Option<String>,
    /// Random loss on the veth pair in netns mode, each direction, as a fraction (0.02 = 2 %):
    /// the kernel drops the packets (nftables), so TCP peers lose real segments too.
    pub loss: Option<f64>,
    /// Camera spin, degrees per second.
    pub spin_deg_per_s: f64,
    /// Forward error correction: off, adaptive, or a fixed percentage (`20%`).
    pub fec: String,
    /// Retransmission of lost shards (both sides).
    pub retransmit: bool,
    /// The host's adaptive bitrate controller.
    pub adaptive_bitrate: bool,
    /// Multipath scheduler (with `--paths N` > 1): redundant, keyframes, lowest-delay.
    pub scheduler: String,
    /// Host send pacing (`network.pacing`): the fraction of the frame interval a frame's
    /// datagrams are spread over, 0.0–1.0; 0 = off (one burst).
    pub pacing: f64,
    /// The data plane after the handshake (`network.transport`): `udp`, or `raw` (raw layer-2
    /// frames between the veth ends' MAC addresses; needs `transport = "netns"`).
    pub network_transport: String,
    /// VR: the host renders side-by-side stereo from the client's head pose (a generated
    /// turning head, `synthetic:turn`); the client shows it in a window (the GPU presenter,
    /// with lens distortion; needs a display, e.g. Xvfb) and measures pose-to-photon from the
    /// presented pixels.
    pub vr: bool,
    /// With `vr`: the presenter's late warp (`vr.late_warp`).
    pub late_warp: bool,
    /// Capture a Wayland desktop instead of rendering the scene: `wlr` or `wlr:OUTPUT` (the
    /// wlroots compositor in `$WAYLAND_DISPLAY`, wlr-screencopy), or `portal` (the desktop
    /// portal's screen cast on the session bus, PipeWire); frames stamped by the host; the
    /// resolution must be the output's size.
    pub capture: Option<String>,
}

impl Default for Scenario {
    /// The configuration's defaults ([`untether::config`]), except the bench's own: preset
    /// superfast, 10 s, loopback.
    fn default() -> Self {
        use untether::config::KeyValue;
        let cfg = untether::config::ConfigToml::default();
        let video = untether::config::VideoConfig::default();
        Scenario {
            name: String::new(),
            width: video.resolution.width,
            height: video.resolution.height,
            fps: video.fps,
            codec: video.selection.codec_name().into(),
            encoder: video.selection.encoder.name().into(),
            refresh: video.refresh.name().into(),
            refresh_period: video.refresh_period,
            preset: "superfast".into(),
            tune: "zerolatency".into(),
            bitrate_kbps: video.bitrate_kbps,
            slices: 0,
            gop: 0,
            conversion: video.selection.conversion.name().into(),
            duration_s: 10.0,
            transport: "loopback".into(),
            rate: None,
            loss: None,
            spin_deg_per_s: cfg.scene.spin_deg_per_s as f64,
            fec: cfg.network.fec.value_name(),
            retransmit: cfg.network.retransmit,
            adaptive_bitrate: cfg.network.adaptive_bitrate,
            scheduler: cfg.network.scheduler.value_name(),
            pacing: cfg.network.pacing,
            network_transport: cfg.network.transport.value_name(),
            vr: false,
            late_warp: cfg.vr.late_warp,
            capture: None,
        }
    }
}

impl Scenario {
    /// `720p60-superfast-10mbps-simd` unless named.
    pub fn display_name(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        let d = Scenario::default();
        let mut recovery = String::new();
        if let Some(r) = &self.rate {
            recovery.push_str(&format!("-{r}"));
        }
        if let Some(l) = self.loss {
            recovery.push_str(&format!("-loss{}pct", (l * 1000.0).round() / 10.0));
        }
        if self.fec != d.fec {
            recovery.push_str(&format!("-fec{}", self.fec.trim_end_matches('%')));
        }
        if !self.retransmit {
            recovery.push_str("-noretx");
        }
        if !self.adaptive_bitrate {
            recovery.push_str("-fixedrate");
        }
        if self.scheduler != d.scheduler {
            recovery.push_str(&format!("-{}", self.scheduler));
        }
        if self.pacing > 0.0 {
            recovery.push_str(&format!("-pacing{}", self.pacing));
        }
        if self.slices > 0 {
            recovery.push_str(&format!("-{}slices", self.slices));
        }
        if self.network_transport != d.network_transport {
            recovery.push_str(&format!("-{}", self.network_transport));
        }
        if self.vr {
            recovery.push_str(if self.late_warp {
                "-vr-warp"
            } else {
                "-vr-nowarp"
            });
        }
        if let Some(c) = &self.capture {
            recovery.push_str(&format!("-{}", c.replace(':', "-")));
        }
        if self.refresh != d.refresh {
            recovery.push_str(&format!("-{}{}", self.refresh, self.refresh_period));
        }
        let codec = if self.codec == d.codec {
            String::new()
        } else {
            format!("-{}", self.codec)
        };
        format!(
            "{}p{}{codec}-{}-{}kbps-{}{}{}",
            self.height,
            self.fps,
            self.preset,
            self.bitrate_kbps,
            self.conversion,
            if self.transport == "loopback" {
                String::new()
            } else {
                format!("-{}", self.transport)
            },
            recovery
        )
    }
}
