//! The self-contained HTML report: inline CSS and inline SVG plots drawn by plotters (no
//! scripts, fonts or images fetched from anywhere).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use untether::stats::{percentile, Stage};

use crate::series::ScenarioResult;

/// A plot that could not be drawn, or the file that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error("plot {0}: {1}")]
    Plot(&'static str, String),
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
}

/// The stage-breakdown segment of a system that shows no stages (a peer): its glass-to-glass.
const TOTAL: &str = "total";

const W: u32 = 960;
const H: u32 = 420;

fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn label(r: &ScenarioResult) -> String {
    format!("{} ({})", r.name, r.system)
}

/// A finite (lo, hi) range with hi > lo, padded; None when there is no finite value.
fn range(values: impl Iterator<Item = f64>, floor_zero: bool) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return None;
    }
    if floor_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-9 {
        hi = lo + 1.0;
    }
    Some((lo, hi + (hi - lo) * 0.05))
}

/// The median (nearest rank, as in the reports) of the finite values of `v`.
fn median(v: &mut Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    percentile(v, 50.0)
}

type Series = (String, Vec<Vec<(f64, f64)>>);

/// Lines (each series may have several segments), x and y ranges from the data.
fn line_plot(
    id: &'static str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    y_floor_zero: bool,
) -> Result<Option<String>, HtmlError> {
    let all = || series.iter().flat_map(|s| s.1.iter().flatten());
    let (Some(xr), Some(yr)) = (
        range(all().map(|p| p.0), false),
        range(all().map(|p| p.1), y_floor_zero),
    ) else {
        return Ok(None);
    };
    let err = |e: &dyn std::fmt::Display| HtmlError::Plot(id, e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (name, segments)) in series.iter().enumerate() {
            let c = colour(i);
            for (k, seg) in segments.iter().enumerate() {
                let s = chart
                    .draw_series(LineSeries::new(seg.iter().copied(), c.stroke_width(2)))
                    .map_err(|e| err(&e))?;
                if k == 0 {
                    s.label(name.clone()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                    });
                }
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(Some(svg))
}

/// Horizontal stacked bars: one bar per row, segments in `keys` order.
fn stacked_bars(
    id: &'static str,
    x_desc: &str,
    rows: &[(String, Vec<(String, f64)>)],
    keys: &[String],
) -> Result<Option<String>, HtmlError> {
    let total = |r: &(String, Vec<(String, f64)>)| r.1.iter().map(|s| s.1.max(0.0)).sum::<f64>();
    let Some(xr) = range(rows.iter().map(total), true) else {
        return Ok(None);
    };
    if rows.is_empty() {
        return Ok(None);
    }
    let err = |e: &dyn std::fmt::Display| HtmlError::Plot(id, e.to_string());
    let mut svg = String::new();
    {
        let height = (120 + 50 * rows.len() as u32).max(240);
        let root = SVGBackend::with_string(&mut svg, (W, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let n = rows.len();
        let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(260)
            .build_cartesian_2d(0f64..xr.1 * 1.25, 0f64..n as f64)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|y: &f64| {
                let i = (*y - 0.5).round();
                if (y - 0.5 - i).abs() < 0.01 && i >= 0.0 && (i as usize) < names.len() {
                    names[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc(x_desc)
            .draw()
            .map_err(|e| err(&e))?;
        for (k, key) in keys.iter().enumerate() {
            let c = colour(k);
            let mut rects = Vec::new();
            for (i, (_, segs)) in rows.iter().enumerate() {
                let start: f64 = segs
                    .iter()
                    .take_while(|s| &s.0 != key)
                    .map(|s| s.1.max(0.0))
                    .sum();
                if let Some(v) = segs.iter().find(|s| &s.0 == key).map(|s| s.1.max(0.0)) {
                    if v > 0.0 {
                        rects.push(Rectangle::new(
                            [(start, i as f64 + 0.2), (start + v, i as f64 + 0.8)],
                            c.filled(),
                        ));
                    }
                }
            }
            chart
                .draw_series(rects)
                .map_err(|e| err(&e))?
                .label(key.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(Some(svg))
}

/// Splits points into segments wherever x jumps by more than `gap`.
fn segments(points: Vec<(f64, f64)>, gap: f64) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    for p in points
        .into_iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
    {
        match out.last_mut() {
            Some(seg) if seg.last().is_some_and(|l| p.0 - l.0 <= gap) => seg.push(p),
            _ => out.push(vec![p]),
        }
    }
    out
}

fn section(html: &mut String, id: &str, title: &str, note: &str, svg: Option<String>) {
    let _ = write!(
        html,
        "<section data-plot=\"{id}\"><h2>{}</h2><p class=\"note\">{}</p>",
        escape(title),
        escape(note)
    );
    match svg {
        Some(svg) => html.push_str(&svg),
        None => html.push_str("<p class=\"nodata\">no data</p>"),
    }
    html.push_str("</section>\n");
}

fn f(v: &serde_json::Value, digits: usize) -> String {
    v.as_f64().map_or("–".into(), |x| format!("{x:.digits$}"))
}

fn p50(r: &ScenarioResult) -> Option<f64> {
    let l = &r.report["latency_ms"];
    l["glass_to_glass_pixels"]["p50"]
        .as_f64()
        .or_else(|| l["glass_to_glass"]["p50"].as_f64())
}

/// Renders the report for `results`; `notes` (machine, date, command) are listed on top.
pub fn render(
    title: &str,
    results: &[ScenarioResult],
    notes: &[String],
) -> Result<String, HtmlError> {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#f3f3f3}}td:first-child,td:nth-child(2){{text-align:left}}\
         .note{{color:#555;font-size:90%}}.nodata{{color:#a00}}.pass{{color:#070}}.fail{{color:#a00}}</style>\
         </head><body><h1>{t}</h1>\n<ul>",
        t = escape(title)
    );
    for n in notes {
        let _ = write!(html, "<li>{}</li>", escape(n));
    }
    html.push_str("</ul>\n");
    // Summary table.
    html.push_str(
        "<h2>Summary</h2><table><tr><th>scenario</th><th>system</th><th>size</th><th>fps</th>\
         <th>preset</th><th>kbit/s</th><th>shown</th><th>lost</th><th>g2g p50</th><th>p95</th>\
         <th>p99</th><th>SSIM mean</th><th>SSIM min</th><th>PSNR Y</th><th>response p50</th></tr>\n",
    );
    for r in results {
        let c = &r.report["config"];
        let l = &r.report["latency_ms"];
        let g = if l["glass_to_glass_pixels"]["p50"].is_number() {
            &l["glass_to_glass_pixels"]
        } else {
            &l["glass_to_glass"]
        };
        let ssim: Vec<f64> = r.quality.iter().map(|q| q.ssim_y).collect();
        let ssim_mean = (!ssim.is_empty()).then(|| ssim.iter().sum::<f64>() / ssim.len() as f64);
        let ssim_min = ssim.iter().copied().reduce(f64::min);
        let psnr: Vec<f64> = r.quality.iter().map(|q| q.psnr_y_db).collect();
        let psnr_mean = (!psnr.is_empty()).then(|| psnr.iter().sum::<f64>() / psnr.len() as f64);
        let mut resp: Vec<f64> = r.response.iter().map(|x| x.response_ms).collect();
        let o = |v: Option<f64>, d: usize| v.map_or("–".into(), |x| format!("{x:.d$}"));
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}x{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.name),
            escape(&r.system),
            c["width"],
            c["height"],
            c["fps"],
            escape(c["preset"].as_str().unwrap_or("–")),
            c["bitrate_kbps"],
            r.report["frames"]["shown"],
            r.report["frames"]["lost"],
            f(&g["p50"], 2),
            f(&g["p95"], 2),
            f(&g["p99"], 2),
            o(ssim_mean, 4),
            o(ssim_min, 4),
            o(psnr_mean, 1),
            o(median(&mut resp), 1),
        );
    }
    html.push_str("</table>\n");
    // The link each scenario ran over, when it was impaired.
    let links: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let c = &r.report["config"];
            let imp = c["impairment"].as_str()?;
            Some(format!(
                "<li>{} ({}): {} path(s), {}</li>",
                escape(&r.name),
                escape(&r.system),
                c["paths"],
                escape(imp)
            ))
        })
        .collect();
    if !links.is_empty() {
        let _ = writeln!(
            html,
            "<h2>Link</h2><ul data-table=\"link\">{}</ul>",
            links.join("")
        );
    }
    // Comparison with peers.
    let mut rows = String::new();
    for u in results.iter().filter(|r| r.system == "untether") {
        for p in results
            .iter()
            .filter(|r| r.system != "untether" && r.name == u.name)
        {
            if let (Some(a), Some(b)) = (p50(u), p50(p)) {
                let ratio = a / b;
                let _ = writeln!(
                    rows,
                    "<tr><td>{}</td><td>{}</td><td>{a:.2}</td><td>{b:.2}</td><td>{ratio:.2}</td>\
                     <td class=\"{}\">{}</td></tr>",
                    escape(&u.name),
                    escape(&p.system),
                    if ratio <= 0.5 { "pass" } else { "fail" },
                    if ratio <= 0.5 { "met" } else { "not met" }
                );
            }
        }
    }
    if !rows.is_empty() {
        html.push_str(
            "<h2>untether vs peer</h2><table data-table=\"comparison\"><tr><th>scenario</th>\
             <th>peer</th><th>untether g2g p50 (ms)</th><th>peer g2g p50 (ms)</th>\
             <th>ratio</th><th>target ≤ 0.5</th></tr>\n",
        );
        html.push_str(&rows);
        html.push_str("</table>\n");
    }
    // 1. CDF.
    let cdf: Vec<Series> = results
        .iter()
        .map(|r| {
            let mut v: Vec<f64> = r
                .frames
                .iter()
                .map(|f| f.glass_to_glass_ms)
                .filter(|x| x.is_finite())
                .collect();
            v.sort_by(f64::total_cmp);
            let n = v.len() as f64;
            let pts = v
                .iter()
                .enumerate()
                .map(|(i, x)| (*x, (i + 1) as f64 / n))
                .collect();
            (label(r), vec![pts])
        })
        .collect();
    section(
        &mut html,
        "g2g-cdf",
        "Glass-to-glass latency, CDF",
        "capture → shown, from the pixel stamp (fraction of frames at or below x)",
        line_plot(
            "g2g-cdf",
            "glass-to-glass (ms)",
            "fraction of frames",
            &cdf,
            true,
        )?,
    );
    // 2. Stage breakdown: the stages in pipeline order; a system that shows none (a peer) gets
    // one `total` segment, its glass-to-glass.
    let mut bars = Vec::new();
    for r in results {
        let mut segs: Vec<(String, f64)> = Stage::ALL
            .into_iter()
            .filter_map(|stage| {
                let mut v: Vec<f64> = r
                    .frames
                    .iter()
                    .filter_map(|f| f.stages_ms.get(&stage).copied())
                    .collect();
                median(&mut v).map(|m| (stage.name().to_string(), m))
            })
            .collect();
        if r.frames.iter().all(|f| f.stages_ms.is_empty()) {
            let mut v: Vec<f64> = r.frames.iter().map(|f| f.glass_to_glass_ms).collect();
            segs.extend(median(&mut v).map(|m| (TOTAL.to_string(), m)));
        }
        if !segs.is_empty() {
            bars.push((label(r), segs));
        }
    }
    let keys: Vec<String> = Stage::ALL
        .map(Stage::name)
        .into_iter()
        .chain([TOTAL])
        .filter(|k| {
            bars.iter()
                .any(|(_, segs)| segs.iter().any(|(n, _)| n == k))
        })
        .map(String::from)
        .collect();
    section(
        &mut html,
        "stage-breakdown",
        "Latency breakdown by stage (medians)",
        "each bar stacks the median of every stage; peers show what they can see",
        stacked_bars("stage-breakdown", "ms", &bars, &keys)?,
    );
    // 3. Latency over time.
    let over: Vec<Series> = results
        .iter()
        .map(|r| {
            let pts = r
                .frames
                .iter()
                .map(|f| (f.captured_ms / 1000.0, f.glass_to_glass_ms))
                .collect();
            (label(r), segments(pts, 1.0))
        })
        .collect();
    section(
        &mut html,
        "latency-over-time",
        "Glass-to-glass latency per frame",
        "every shown frame, by capture time",
        line_plot(
            "latency-over-time",
            "time (s)",
            "glass-to-glass (ms)",
            &over,
            true,
        )?,
    );
    // 4. Bitrate over time.
    let rate: Vec<Series> = results
        .iter()
        .filter(|r| r.frames.iter().any(|f| f.bytes > 0))
        .map(|r| {
            let mut bins: BTreeMap<i64, u64> = BTreeMap::new();
            for f in &r.frames {
                *bins
                    .entry((f.captured_ms / 500.0).floor() as i64)
                    .or_default() += f.bytes;
            }
            let pts = bins
                .iter()
                .map(|(k, b)| ((*k as f64 + 0.5) * 0.5, *b as f64 * 8.0 / 0.5 / 1e6))
                .collect();
            (label(r), segments(pts, 1.0))
        })
        .collect();
    let skipped = results.len() - rate.len();
    section(
        &mut html,
        "bitrate-over-time",
        "Video bitrate",
        &format!(
            "encoded bytes of shown frames per 0.5 s window{}",
            if skipped > 0 {
                format!("; {skipped} result(s) without frame sizes left out")
            } else {
                String::new()
            }
        ),
        line_plot("bitrate-over-time", "time (s)", "Mbit/s", &rate, true)?,
    );
    // 5. SSIM over time.
    let ssim: Vec<Series> = results
        .iter()
        .filter(|r| !r.quality.is_empty())
        .map(|r| {
            let pts = r
                .quality
                .iter()
                .map(|q| (q.at_ms / 1000.0, q.ssim_y))
                .collect();
            (label(r), segments(pts, 1.0))
        })
        .collect();
    section(
        &mut html,
        "ssim-over-time",
        "Picture quality (SSIM, luma)",
        "captured vs decoded, FFmpeg's ssim filter, sampled in batches",
        line_plot("ssim-over-time", "time (s)", "SSIM", &ssim, false)?,
    );
    // 6. Response delay.
    let rd: Vec<(String, Vec<(String, f64)>)> = results
        .iter()
        .filter(|r| !r.response.is_empty())
        .map(|r| {
            let m = |g: fn(&crate::series::ResponseSample) -> f64| {
                let mut v: Vec<f64> = r.response.iter().map(g).collect();
                median(&mut v).unwrap_or(0.0)
            };
            (
                format!("{} RD {:.1} ms", label(r), m(|x| x.response_ms)),
                vec![
                    ("network (ND)".to_string(), m(|x| x.network_ms)),
                    ("host processing (PD)".to_string(), m(|x| x.processing_ms)),
                    ("client playout (OD)".to_string(), m(|x| x.playout_ms)),
                ],
            )
        })
        .collect();
    let rd_keys: Vec<String> = [
        "network (ND)",
        "host processing (PD)",
        "client playout (OD)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    section(
        &mut html,
        "response-delay",
        "Response delay RD = ND + PD + OD (medians)",
        "input sent → first shown frame whose pixel stamp shows the input applied",
        stacked_bars("response-delay", "ms", &rd, &rd_keys)?,
    );
    html.push_str("</body></html>\n");
    Ok(html)
}

/// [`render`] into `path` (parent directories created).
pub fn write(
    path: &Path,
    title: &str,
    results: &[ScenarioResult],
    notes: &[String],
) -> Result<(), HtmlError> {
    let html = render(title, results, notes)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| HtmlError::Write(dir.display().to_string(), e))?;
    }
    std::fs::write(path, html).map_err(|e| HtmlError::Write(path.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{FrameSample, QualitySample, ResponseSample};

    fn result(system: &str, base: f64, n: usize) -> ScenarioResult {
        ScenarioResult {
            name: "720p60".into(),
            system: system.into(),
            report: serde_json::json!({
                "config": {"width": 1280, "height": 720, "fps": 60, "preset": "superfast", "bitrate_kbps": 10000},
                "latency_ms": {"glass_to_glass_pixels": {"p50": base, "p95": base * 1.5, "p99": base * 2.0}},
                "frames": {"shown": n, "lost": 0}
            }),
            frames: (0..n)
                .map(|i| FrameSample {
                    frame: i as u32,
                    captured_ms: i as f64 * 16.7,
                    glass_to_glass_ms: base + (i % 7) as f64,
                    stages_ms: [(Stage::Encode, 5.0), (Stage::Decode, 2.0)]
                        .into_iter()
                        .collect(),
                    bytes: 20_000,
                    keyframe: i == 0,
                })
                .collect(),
            quality: (0..60)
                .chain(600..660)
                .map(|i| QualitySample {
                    frame: i,
                    at_ms: i as f64 * 16.7,
                    ssim_y: 0.95,
                    ssim_all: 0.96,
                    psnr_y_db: 37.0,
                    psnr_all_db: 38.0,
                })
                .collect(),
            response: vec![ResponseSample {
                at_ms: 1000.0,
                response_ms: 30.0,
                network_ms: 1.0,
                processing_ms: 25.0,
                playout_ms: 4.0,
            }],
            duration_s: 10.0,
        }
    }

    #[test]
    fn every_plot_and_the_comparison_are_there() {
        let html = render(
            "t <&>",
            &[
                result("untether", 10.0, 600),
                result("ffmpeg-rtp", 40.0, 500),
            ],
            &["machine: 2 cores".into()],
        )
        .unwrap();
        for id in [
            "g2g-cdf",
            "stage-breakdown",
            "latency-over-time",
            "bitrate-over-time",
            "ssim-over-time",
            "response-delay",
        ] {
            let at = html.find(&format!("data-plot=\"{id}\"")).expect(id);
            let end = at + html[at..].find("</section>").unwrap();
            assert!(html[at..end].contains("<svg"), "{id}");
        }
        assert!(html.contains("data-table=\"comparison\""));
        assert!(html.contains("<td>0.25</td>"), "ratio 10/40");
        assert!(html.contains("t &lt;&amp;&gt;"));
        let external = html
            .match_indices("http")
            .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/"))
            .count();
        assert_eq!(external, 0, "only the SVG namespace may be a URL");
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let mut empty = result("untether", 10.0, 0);
        empty.quality.clear();
        empty.response.clear();
        let html = render("x", &[empty.clone()], &[]).unwrap();
        assert!(html.contains("no data"));
        let mut one = result("untether", 10.0, 1);
        one.frames[0].glass_to_glass_ms = f64::NAN;
        render("x", &[one], &[]).unwrap();
        let mut flat = result("untether", 10.0, 50);
        for f in &mut flat.frames {
            f.glass_to_glass_ms = 7.0;
            f.bytes = 0;
        }
        render("x", &[flat], &[]).unwrap();
        render("x", &[], &[]).unwrap();
    }
}
