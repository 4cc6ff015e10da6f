//! The live statistics overlay: what it shows ([`OverlayModel`], filled by the client from its
//! running statistics) and its text, rasterised with `fontdue` from an embedded open font
//! (DejaVu Sans Mono, `assets/`) into an RGBA image ([`TextRaster`]) that a presenter draws
//! over the video as a second, alpha-blended quad. The image is made again only when the text
//! changes (the client refreshes the model every 0.5 s), so a frame costs one textured quad.

use std::collections::HashMap;

use crate::{MediaError, Result};

/// DejaVu Sans Mono (Bitstream Vera licence, `assets/DejaVuSansMono.LICENSE`).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Shown for a figure that is not measured (yet).
pub const NOT_MEASURED: &str = "—";

/// The overlay's figures. `None` shows as "—" (not measured, or nothing to measure yet).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OverlayModel {
    /// First line: what is presenting and the picture size, e.g. "gl · 1280x720 · vr".
    pub header: String,
    /// Pictures shown per second.
    pub fps: Option<f64>,
    /// Glass-to-glass over the last refresh interval: median and maximum, ms.
    pub glass_to_glass_ms: Option<f64>,
    pub glass_to_glass_max_ms: Option<f64>,
    /// Each stage's median over the last interval, ms, in pipeline order (name as in the
    /// report: capture, host_queue, convert, encode, send, network, reassemble, decode, present).
    pub stages_ms: Vec<(&'static str, Option<f64>)>,
    /// What arrived on the wire, Mbit/s.
    pub bitrate_mbps: Option<f64>,
    /// Packets lost over the last interval, percent of the packets sent.
    pub loss_percent: Option<f64>,
    /// Lost shards rebuilt from FEC parity, and retransmission requests (shard NACKs) sent,
    /// over the last interval.
    pub fec_repaired: Option<u64>,
    pub nacks: Option<u64>,
    /// Smoothed round-trip time, ms.
    pub rtt_ms: Option<f64>,
    /// Paths that carried datagrams in the last interval, and paths configured.
    pub paths: Option<(usize, usize)>,
    /// Pose-to-photon, ms (set with [`set_pose_to_photon`](Self::set_pose_to_photon)).
    pub pose_to_photon_ms: Option<f64>,
    /// A line above the figures about the connection (the host is unreachable and the client
    /// reconnects, or it waits for approval): shown inside the picture, so that it is seen in
    /// fullscreen and in a headset, where the title is not.
    pub banner: Option<String>,
    /// Only the banner (the statistics are hidden: F12 is off).
    pub banner_only: bool,
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.1}"),
        _ => NOT_MEASURED.into(),
    }
}

impl OverlayModel {
    /// Pose-to-photon (ms): from a pose sample on the client to the moment the shown picture
    /// reflects it. `None` shows "—".
    pub fn set_pose_to_photon(&mut self, ms: Option<f64>) {
        self.pose_to_photon_ms = ms.filter(|v| v.is_finite());
    }

    pub fn pose_to_photon(&self) -> Option<f64> {
        self.pose_to_photon_ms
    }

    /// The overlay's text, a line per entry.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(8);
        if let Some(b) = &self.banner {
            out.push(b.clone());
            if self.banner_only {
                return out;
            }
        }
        let fps = match self.fps {
            Some(f) => format!("{f:.1} fps"),
            None => format!("{NOT_MEASURED} fps"),
        };
        out.push(if self.header.is_empty() {
            fps
        } else {
            format!("{} · {fps}", self.header)
        });
        out.push(format!(
            "glass-to-glass {} ms (max {})",
            ms(self.glass_to_glass_ms),
            ms(self.glass_to_glass_max_ms)
        ));
        // Stages, three to a line: a narrow panel covers less of the picture (and costs a
        // software GL less to blend).
        let stages: Vec<String> = self
            .stages_ms
            .iter()
            .map(|(name, v)| format!("{} {}", short_stage(name), ms(*v)))
            .collect();
        for chunk in stages.chunks(3) {
            out.push(format!(" {}", chunk.join("  ")));
        }
        let bitrate = match self.bitrate_mbps {
            Some(b) => format!("{b:.2} Mbit/s"),
            None => format!("{NOT_MEASURED} Mbit/s"),
        };
        let loss = match self.loss_percent {
            Some(l) => format!("{l:.2} %"),
            None => NOT_MEASURED.into(),
        };
        out.push(format!(
            "{bitrate}  loss {loss}  RTT {} ms",
            ms(self.rtt_ms)
        ));
        let count = |v: Option<u64>| v.map_or(NOT_MEASURED.to_string(), |v| v.to_string());
        let paths = match self.paths {
            Some((live, all)) => format!("{live}/{all}"),
            None => NOT_MEASURED.into(),
        };
        out.push(format!(
            "FEC repaired {}  NACKs {}  paths {paths}",
            count(self.fec_repaired),
            count(self.nacks)
        ));
        out.push(format!(
            "pose-to-photon {}{}",
            ms(self.pose_to_photon_ms),
            if self.pose_to_photon_ms.is_some() {
                " ms"
            } else {
                ""
            }
        ));
        out
    }
}

/// The overlay's short name for a report stage.
fn short_stage(name: &str) -> &str {
    match name {
        "host_queue" => "queue",
        "reassemble" => "reasm",
        other => other,
    }
}

/// An RGBA picture, 8 bits per channel, straight (not premultiplied) alpha, rows top to
/// bottom, no padding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RgbaImage {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// Rasterises lines of text (white on a translucent black panel) with a glyph cache, only
/// when the text changed.
pub struct TextRaster {
    font: fontdue::Font,
    px: f32,
    glyphs: HashMap<char, (fontdue::Metrics, Vec<u8>)>,
    advance: usize,
    line_height: usize,
    ascent: f32,
    text: Vec<String>,
    image: RgbaImage,
    /// Times the image was made (for tests and the cost figures).
    pub rasterised: u64,
}

/// The overlay's text size (em, pixels) on an output `height` pixels high: a 45th of the
/// height (16 px at 720 lines, 24 at 1080, 48 at 2160), never under `min_px`.
pub fn text_px_for(height: u32, min_px: f32) -> f32 {
    (height as f32 / 45.0).clamp(min_px, 96.0)
}

/// The overlay's distance from the edges on an output `height` pixels high (8 px at 1080).
pub fn margin_for(height: u32) -> i32 {
    (height / 135).max(8) as i32
}

/// Padding around the text, pixels.
const PAD: usize = 6;
/// The panel's opacity behind the text.
const PANEL_ALPHA: f32 = 0.62;

impl TextRaster {
    /// A rasteriser for text `px` pixels high (the em size).
    pub fn new(px: f32) -> Result<TextRaster> {
        let font = fontdue::Font::from_bytes(FONT, fontdue::FontSettings::default())
            .map_err(|e| MediaError::Other(format!("overlay font: {e}")))?;
        let px = px.clamp(6.0, 96.0);
        let advance = font.metrics('M', px).advance_width.ceil().max(1.0) as usize;
        let (ascent, line_height) = match font.horizontal_line_metrics(px) {
            Some(m) => (m.ascent, m.new_line_size.ceil().max(1.0) as usize),
            None => (px, (px * 1.2).ceil() as usize),
        };
        Ok(TextRaster {
            font,
            px,
            glyphs: HashMap::new(),
            advance,
            line_height,
            ascent,
            text: Vec::new(),
            image: RgbaImage::default(),
            rasterised: 0,
        })
    }

    /// Makes the image of `lines` unless it shows them already; true if it changed.
    pub fn update(&mut self, lines: &[String]) -> bool {
        if self.text == lines && self.image.width > 0 {
            return false;
        }
        self.text = lines.to_vec();
        self.rasterise();
        true
    }

    pub fn image(&self) -> &RgbaImage {
        &self.image
    }

    /// The text size it was made for (em, pixels).
    pub fn px(&self) -> f32 {
        self.px
    }

    fn rasterise(&mut self) {
        let cols = self
            .text
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
            .max(1);
        let (w, h) = (
            2 * PAD + cols * self.advance,
            2 * PAD + self.text.len().max(1) * self.line_height,
        );
        // The panel: black at PANEL_ALPHA.
        let mut coverage = vec![0f32; w * h];
        for (row, line) in self.text.iter().enumerate() {
            let baseline = PAD as f32 + row as f32 * self.line_height as f32 + self.ascent;
            for (col, ch) in line.chars().enumerate() {
                if ch == ' ' {
                    continue;
                }
                let px = self.px;
                let font = &self.font;
                let (m, bitmap) = self
                    .glyphs
                    .entry(ch)
                    .or_insert_with(|| font.rasterize(ch, px));
                let x0 = (PAD + col * self.advance) as i32 + m.xmin;
                // fontdue: ymin is the bitmap's bottom edge relative to the baseline, upwards.
                let y0 = (baseline - m.ymin as f32 - m.height as f32).round() as i32;
                for gy in 0..m.height {
                    let y = y0 + gy as i32;
                    if y < 0 || y >= h as i32 {
                        continue;
                    }
                    for gx in 0..m.width {
                        let x = x0 + gx as i32;
                        if x < 0 || x >= w as i32 {
                            continue;
                        }
                        let c = bitmap[gy * m.width + gx] as f32 / 255.0;
                        let i = y as usize * w + x as usize;
                        coverage[i] = coverage[i].max(c);
                    }
                }
            }
        }
        let mut data = Vec::with_capacity(w * h * 4);
        for c in coverage {
            // White text of coverage c over the black panel, straight alpha.
            let a = c + PANEL_ALPHA * (1.0 - c);
            let v = if a > 0.0 { c / a } else { 0.0 };
            let v = (v * 255.0).round() as u8;
            data.extend_from_slice(&[v, v, v, (a * 255.0).round() as u8]);
        }
        self.image = RgbaImage {
            width: w as u32,
            height: h as u32,
            data,
        };
        self.rasterised += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_figures_show_a_dash_and_pose_to_photon_takes_a_value() {
        let mut m = OverlayModel {
            header: "gl · 1280x720".into(),
            fps: Some(59.94),
            stages_ms: vec![("encode", Some(4.25)), ("host_queue", None)],
            ..Default::default()
        };
        let text = m.lines().join("\n");
        assert!(text.starts_with("gl · 1280x720 · 59.9 fps"), "{text}");
        assert!(text.contains("glass-to-glass — ms"), "{text}");
        assert!(
            text.contains("encode 4.2") && text.contains("queue —"),
            "{text}"
        );
        assert!(text.contains("pose-to-photon —"), "{text}");
        m.set_pose_to_photon(Some(12.34));
        assert!(m.lines().join("\n").contains("pose-to-photon 12.3 ms"));
        m.set_pose_to_photon(Some(f64::NAN));
        assert_eq!(m.pose_to_photon(), None);
    }

    #[test]
    fn text_is_rasterised_only_when_it_changes() {
        let mut r = TextRaster::new(15.0).unwrap();
        let lines = vec![
            "glass-to-glass 7.9 ms".to_string(),
            "RTT 0.4 ms".to_string(),
        ];
        assert!(r.update(&lines));
        assert!(!r.update(&lines));
        assert_eq!(r.rasterised, 1);
        let img = r.image().clone();
        assert_eq!(img.data.len(), (img.width * img.height * 4) as usize);
        assert!(
            img.width > 100 && img.height > 20,
            "{}x{}",
            img.width,
            img.height
        );
        // Some pixels are text (opaque white), the rest the translucent panel.
        let white = img
            .data
            .chunks(4)
            .filter(|p| p[0] > 200 && p[3] > 200)
            .count();
        let panel = img
            .data
            .chunks(4)
            .filter(|p| p[0] == 0 && p[3] > 100)
            .count();
        assert!(white > 50 && panel > white, "{white} {panel}");
        let mut changed = lines.clone();
        changed[1] = "RTT 0.5 ms".into();
        assert!(r.update(&changed));
        assert_ne!(r.image(), &img);
        assert_eq!(r.rasterised, 2);
    }
}
