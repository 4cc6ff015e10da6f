//! Pose-to-photon, read from what was presented: from a head pose sample on the client to the
//! moment the presented image shows that pose.
//!
//! The built-in scene draws pose markers (white bars with black edges at every
//! [`MARKER_SPACING_DEG`] of world azimuth, at infinity: their columns depend on the view's yaw
//! only). After each present, the presenter reads back one row through the middle of the left
//! eye's view; [`marker_columns`] finds the bars in it, [`shown_yaw`] turns the bar nearest the
//! view's centre into the yaw the picture shows (modulo the marker spacing) — through the
//! presenter's own mapping from window columns to the rendered view's columns (identity without
//! lens distortion) — and [`PoseMatcher::latency`] finds, in the history of local pose samples,
//! the most recent time the head had that yaw. The latency is the present time minus that time.
//!
//! Whatever made the picture show the pose counts: the host rendering it (the frame's pose) or
//! the presenter's late warp re-projecting it to a newer one. A yaw the head had more than once
//! within the search window (a track turning back) is ambiguous: such a present is not counted
//! ([`PoseMatcher::ambiguous`]), nor one where no marker was readable.

use untether_media::lens::{Eye, LensProfile};
use untether_media::scene::{delta_of_column, MARKER_SPACING_DEG};
use untether_media::warp::Vec2;
use untether_proto::{Micros, PoseSample};

/// How far back a pose may lie (the ambiguity limit of the `turn` track is 500 ms).
pub const SEARCH_WINDOW_US: Micros = 400_000;

/// Centres of the marker bars in a row of BGRA pixels: runs of near-white pixels at least two
/// wide with dark pixels on both sides; the centre is weighted by brightness (sub-pixel).
pub fn marker_columns(row_bgra: &[u8]) -> Vec<f32> {
    let luma: Vec<f32> = row_bgra
        .chunks_exact(4)
        .map(|p| 0.114 * p[0] as f32 + 0.587 * p[1] as f32 + 0.299 * p[2] as f32)
        .collect();
    let mut out = Vec::new();
    let mut x = 0;
    while x < luma.len() {
        if luma[x] < 200.0 {
            x += 1;
            continue;
        }
        let start = x;
        while x < luma.len() && luma[x] >= 200.0 {
            x += 1;
        }
        let end = x; // exclusive
        let dark = |i: Option<usize>| i.and_then(|i| luma.get(i)).is_some_and(|l| *l < 70.0);
        // A bar has black edges within two pixels on each side.
        let left = dark(start.checked_sub(1)) || dark(start.checked_sub(2));
        let right = dark(Some(end)) || dark(Some(end + 1));
        if end - start >= 2 && end - start <= 24 && left && right {
            // Centroid of the brightness above the edges' level over the run ± 1 pixel.
            let (lo, hi) = (start.saturating_sub(1), (end + 1).min(luma.len()));
            let (mut num, mut den) = (0.0, 0.0);
            for (i, l) in luma.iter().enumerate().take(hi).skip(lo) {
                let w = (l - 60.0).max(0.0);
                num += w * i as f32;
                den += w;
            }
            if den > 0.0 {
                out.push(num / den);
            }
        }
    }
    out
}

/// The yaw (degrees, in `[0, spacing)`) the picture shows, from the marker columns of one view
/// `w` pixels wide (half field of view `half_fov`, radians), the one nearest the centre;
/// `to_view` maps a presented column to the rendered view's column.
pub fn shown_yaw(
    columns: &[f32],
    w: usize,
    half_fov: f32,
    to_view: impl Fn(f32) -> f32,
) -> Option<f32> {
    let centre = (w as f32 - 1.0) / 2.0;
    let x = columns
        .iter()
        .map(|&c| to_view(c))
        .filter(|c| c.is_finite())
        .min_by(|a, b| (a - centre).abs().total_cmp(&(b - centre).abs()))?;
    // A marker at azimuth k·spacing, `delta` left of the centre: the view's yaw is
    // k·spacing − delta.
    let delta = delta_of_column(x, w, half_fov).to_degrees();
    Some((-delta).rem_euclid(MARKER_SPACING_DEG))
}

/// `a − b` wrapped into (−spacing/2, spacing/2].
fn wrap(d: f32) -> f32 {
    let s = MARKER_SPACING_DEG;
    let r = d.rem_euclid(s);
    if r > s / 2.0 {
        r - s
    } else {
        r
    }
}

/// Matches shown yaws to the local pose history.
#[derive(Debug, Default)]
pub struct PoseMatcher {
    /// Presents whose yaw the head had more than once in the window.
    pub ambiguous: u64,
    /// Presents whose yaw the head did not have in the window.
    pub unmatched: u64,
}

impl PoseMatcher {
    /// The pose-to-photon latency of a present at `present_us` showing `yaw` (mod the marker
    /// spacing), given the pose samples of the last [`SEARCH_WINDOW_US`] (oldest first).
    pub fn latency(
        &mut self,
        history: &[PoseSample],
        yaw: f32,
        present_us: Micros,
    ) -> Option<Micros> {
        let mut crossings = Vec::new();
        let d: Vec<(Micros, f32)> = history
            .iter()
            .filter(|s| s.sample_us <= present_us)
            .map(|s| (s.sample_us, wrap(s.pose.angles_deg().0 - yaw)))
            .collect();
        for pair in d.windows(2) {
            let ((t0, d0), (t1, d1)) = (pair[0], pair[1]);
            // A sign change through 0 (not the wrap-around at ±spacing/2), counted once even
            // when a sample lands exactly on it.
            let through = (d0 <= 0.0 && d1 > 0.0) || (d0 >= 0.0 && d1 < 0.0);
            if through && (d0 - d1).abs() < MARKER_SPACING_DEG / 3.0 {
                let f = if d1 == d0 { 0.0 } else { d0 / (d0 - d1) };
                crossings.push(t0 + ((t1 - t0) as f32 * f.clamp(0.0, 1.0)) as Micros);
            }
        }
        match crossings.len() {
            0 => {
                self.unmatched += 1;
                None
            }
            1 => Some(present_us.saturating_sub(crossings[0])),
            _ => {
                self.ambiguous += 1;
                None
            }
        }
    }
}

/// The presenter's side of the measurement: reads back the presented row after each present
/// and records what it finds in the presenter's record.
pub(crate) struct Probe {
    matcher: PoseMatcher,
    half_fov: f32,
    /// The GPU presenter's lens profile in VR: its columns are mapped back through it.
    lens: Option<LensProfile>,
}

impl Probe {
    pub fn new(vr: &crate::config::VrToml, lens: Option<&LensProfile>) -> Probe {
        Probe {
            matcher: PoseMatcher::default(),
            half_fov: (vr.fov_deg / 2.0).to_radians(),
            lens: lens.cloned(),
        }
    }

    /// After a present at `present_us` of `picture` (side-by-side stereo): the row through the
    /// middle of the left eye's view. Returns the pose-to-photon latency in ms when one was
    /// read and matched.
    pub fn measure(
        &mut self,
        local_pose: &super::LocalPose,
        presenter: &mut dyn untether_media::present::Presenter,
        picture: &untether_media::codec::DecodedFrame,
        present_us: Micros,
        rec: &mut super::run::PresentRecord,
    ) -> Option<f64> {
        let (w, h) = (picture.width() / 2, picture.height());
        let row = presenter.read_row(h / 2, w);
        let history = local_pose.between(present_us.saturating_sub(SEARCH_WINDOW_US), present_us);
        // Only the GPU presenter distorts for the lens; its left eye's viewport is the left
        // half of the window, the size of the left eye's picture.
        let lens = self
            .lens
            .as_ref()
            .filter(|_| presenter.kind() == "gl" && w > 0);
        let aspect = h as f32 / w.max(1) as f32;
        let to_view = |x: f32| match lens {
            Some(l) => view_column(l, x, w, (h / 2) as f32 + 0.5, h, aspect),
            None => x,
        };
        let yaw = row
            .as_deref()
            .and_then(|r| shown_yaw(&marker_columns(r), w as usize, self.half_fov, to_view));
        let latency = yaw.and_then(|y| self.matcher.latency(&history, y, present_us));
        rec.pose_to_photon(
            present_us,
            yaw.is_some(),
            latency,
            self.matcher.ambiguous,
            self.matcher.unmatched,
        );
        latency.map(|l| l as f64 / 1000.0)
    }
}

/// The column of the left eye's undistorted view (`w` pixels wide, pixel centres at integers)
/// that the presented column `x` of the left eye's viewport (as wide, height/width `aspect`)
/// shows on the row at `y` (of `h`; a marker row is level with the lens centre when the
/// profile's centre is at mid-height): the presenter's own lens mapping (green channel).
pub fn view_column(lens: &LensProfile, x: f32, w: u32, y: f32, h: u32, aspect: f32) -> f32 {
    let w = w.max(1) as f32;
    let uv = Vec2::new((x + 0.5) / w, y / h.max(1) as f32);
    let p = lens.distort(Eye::Left, uv, aspect, aspect, 1);
    p.x * w - 0.5
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::scene::{column_of, Scene, SceneConfig};
    use untether_media::BgraFrame;
    use untether_proto::Pose;

    #[test]
    fn the_yaw_a_rendered_picture_shows_is_read_back() {
        let mut cfg = SceneConfig::new(1280, 720);
        cfg.spin_deg_per_s = 0.0;
        cfg.walk_speed = 0.0;
        cfg.stereo = true;
        cfg.pose_markers = true;
        let mut s = Scene::new(cfg).unwrap();
        let mut f = BgraFrame::new(1280, 720).unwrap();
        for yaw in [0.0f32, 3.3, 17.0, -8.25, 100.4] {
            s.set_head_pose(yaw, 0.0, [0.0; 3]);
            s.render(1.0, &mut f);
            let row = &f.row(360)[..640 * 4];
            let cols = marker_columns(row);
            assert!(!cols.is_empty(), "yaw {yaw}");
            let shown = shown_yaw(&cols, 640, s.half_fov(), |x| x).unwrap();
            let err = wrap(shown - yaw);
            assert!(err.abs() < 0.1, "yaw {yaw}: shown {shown}, error {err}°");
        }
    }

    #[test]
    fn a_marker_column_maps_back_to_its_direction() {
        let half = 45f32.to_radians();
        for d in [-40.0f32, -10.0, 0.0, 12.5, 44.0] {
            let x = column_of(d.to_radians(), 640, half).unwrap();
            assert!((delta_of_column(x, 640, half).to_degrees() - d).abs() < 1e-3);
        }
    }

    fn history(from_ms: u64, to_ms: u64, deg_per_s: f32) -> Vec<PoseSample> {
        (from_ms..=to_ms)
            .map(|ms| PoseSample {
                sample_us: ms * 1000,
                pose: Pose::from_angles(deg_per_s * ms as f32 / 1000.0, 0.0, 0.0, [0.0; 3]),
            })
            .collect()
    }

    #[test]
    fn latency_is_found_on_a_monotonic_track_and_refused_when_ambiguous() {
        let mut m = PoseMatcher::default();
        let h = history(1000, 1400, 60.0);
        // At 1.4 s the head is at 84°; a picture showing 82.5° (≡ 22.5° mod 30) is 25 ms old.
        let l = m.latency(&h, 22.5, 1_400_000).unwrap();
        assert!((l as i64 - 25_000).abs() < 200, "{l}");
        // A sweep turning back: 10° was reached twice in the window.
        let mut h: Vec<PoseSample> = history(0, 200, 60.0);
        h.extend((201..=400).map(|ms| PoseSample {
            sample_us: ms * 1000,
            pose: Pose::from_angles(12.0 - 60.0 * (ms - 200) as f32 / 1000.0, 0.0, 0.0, [0.0; 3]),
        }));
        assert!(m.latency(&h, 10.0, 400_000).is_none());
        assert_eq!(m.ambiguous, 1);
        // A yaw the head never had.
        assert!(m.latency(&history(0, 100, 10.0), 20.0, 100_000).is_none());
        assert_eq!(m.unmatched, 1);
    }
}
