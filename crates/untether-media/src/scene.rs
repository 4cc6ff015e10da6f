//! The built-in test scene: a CPU-rendered, VR-like room — ray-cast textured walls, perspective
//! floor and ceiling, depth fog — seen by a camera that spins counter-clockwise at a constant
//! rate and walks a circle (as in the OpenUVR evaluation, where the avatar turns and moves), and
//! that answers input: pointer deltas turn and tilt it, held keys walk it, a head pose sets its
//! orientation.
//!
//! **Stereo** (`SceneConfig::stereo`): two eye views side by side (left eye in the left half),
//! each from the head's pose — orientation (yaw and pitch; a ray caster has no roll), position
//! (x, z on the floor, y as the eye height) — offset by ±IPD/2 along the head's right axis.
//! **Pose markers** (`SceneConfig::pose_markers`): thin white bars with black edges drawn at
//! infinity at every [`MARKER_SPACING_DEG`] of world azimuth (a marker's column depends on the
//! view's yaw only, not on its position), over the middle half of each view's rows: the client
//! reads from the presented pixels which yaw the picture shows (pose-to-photon).
//!
//! Fast enough for 1080p60 on one core: textures are precomputed (256×256, procedural, with
//! fine grain so the encoder has real work), walls are drawn column by column with fixed-point
//! texture stepping, floor and ceiling row by row with incremental stepping, fog is one
//! packed-integer blend per pixel; no trigonometry per pixel. Deterministic: the same `t` and the
//! same inputs give the same pixels.

use crate::{BgraFrame, Result};

/// Settings of the scene.
#[derive(Clone, Debug, PartialEq)]
pub struct SceneConfig {
    pub width: u32,
    pub height: u32,
    /// Camera turn rate in degrees per second, counter-clockwise (negative: clockwise).
    pub spin_deg_per_s: f32,
    /// Walking speed along the scene's circular path, m/s (0: stand still).
    pub walk_speed: f32,
    /// Horizontal field of view in degrees.
    pub fov_deg: f32,
    /// Speed of key-driven walking, m/s.
    pub key_speed: f32,
    /// Degrees of turn per pixel of pointer motion.
    pub pointer_deg_per_px: f32,
    /// Two eye views side by side (each half the width, `fov_deg` horizontally each).
    pub stereo: bool,
    /// Eye separation (interpupillary distance), metres: each eye sits ±IPD/2 from the head.
    pub ipd_m: f32,
    /// Draw the pose markers (see the module docs).
    pub pose_markers: bool,
}

impl SceneConfig {
    pub fn new(width: u32, height: u32) -> Self {
        SceneConfig {
            width,
            height,
            spin_deg_per_s: 30.0,
            walk_speed: 0.6,
            fov_deg: 90.0,
            key_speed: 2.0,
            pointer_deg_per_px: 0.15,
            stereo: false,
            ipd_m: 0.064,
            pose_markers: false,
        }
    }
}

/// Movement keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SceneKey {
    Forward,
    Back,
    Left,
    Right,
}

/// An input the scene reacts to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SceneInput {
    /// Relative pointer motion in pixels: dx turns (yaw), dy tilts (pitch).
    PointerDelta { dx: f32, dy: f32 },
    /// A movement key went down or up.
    Key { key: SceneKey, down: bool },
    /// Absolute head orientation in degrees, added to the camera's path orientation.
    HeadPose { yaw_deg: f32, pitch_deg: f32 },
}

/// World azimuth between two pose markers, degrees (markers at 0°, 30°, 60°, …).
pub const MARKER_SPACING_DEG: f32 = 30.0;

/// One view to render: where the eye is and where it looks, and which columns of the frame.
#[derive(Clone, Copy, Debug)]
struct View {
    px: f32,
    py: f32,
    yaw: f32,
    pitch: f32,
    /// Eye height, 0..1 of the wall height (0.5: half way up).
    height: f32,
    x0: usize,
    w: usize,
}

/// The column of a direction `delta_rad` to the left of a view's centre (None: outside), for
/// a view `w` pixels wide with half horizontal field of view `half_fov` (radians): the ray
/// caster's projection, `x = (1 − tan δ / tan(fov/2))·w/2 − 0.5`.
pub fn column_of(delta_rad: f32, w: usize, half_fov: f32) -> Option<f32> {
    if delta_rad.abs() >= std::f32::consts::FRAC_PI_2 {
        return None;
    }
    let cam = -delta_rad.tan() / half_fov.tan();
    (cam.abs() <= 1.0).then(|| (cam + 1.0) * w as f32 / 2.0 - 0.5)
}

/// The inverse of [`column_of`]: how far left of the view's centre (radians) column `x` (may
/// be fractional) looks.
pub fn delta_of_column(x: f32, w: usize, half_fov: f32) -> f32 {
    let cam = 2.0 * (x + 0.5) / w as f32 - 1.0;
    -(cam * half_fov.tan()).atan()
}

const TEX: usize = 256;
const MAP: usize = 24;
const CENTER: f32 = 12.0;
const PATH_RADIUS: f32 = 4.0;
const FOG: u32 = 0x0018_1C24; // dark blue-grey
const FOG_DENSITY: f32 = 0.16;
const MAX_PITCH_DEG: f32 = 35.0;

/// The scene's state.
pub struct Scene {
    cfg: SceneConfig,
    /// textures[i][level]: 256×256 >> level, box-filtered mip chain (no shimmering in the
    /// distance: aliasing is unpredictable noise an encoder cannot compress).
    textures: Vec<Vec<Box<[u32; TEX * TEX]>>>,
    map: [[u8; MAP]; MAP],
    /// Input-driven state.
    pointer_yaw: f32,
    pointer_pitch: f32,
    head_yaw: f32,
    head_pitch: f32,
    /// The head's position (x right, y up, z back, metres) relative to the camera's path.
    head_position: [f32; 3],
    keys: [bool; 4],
    /// Per column, the rows [top, bottom) its wall covers (scratch, reused).
    extents: Vec<(u32, u32)>,
    offset: (f32, f32),
    last_t: Option<f64>,
}

/// Integer hash → [0, 1).
fn hash2(x: i32, y: i32, seed: u32) -> f32 {
    let mut h = (x as u32).wrapping_mul(0x27d4_eb2d)
        ^ (y as u32).wrapping_mul(0x1656_67b1)
        ^ seed.wrapping_mul(0x9e37_79b9);
    h ^= h >> 15;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    (h >> 8) as f32 / (1u32 << 24) as f32
}

/// Tileable value noise over a period of `period` cells.
fn value_noise(x: f32, y: f32, period: i32, seed: u32) -> f32 {
    let (xi, yi) = (x.floor() as i32, y.floor() as i32);
    let (fx, fy) = (x - xi as f32, y - yi as f32);
    let s = |t: f32| t * t * (3.0 - 2.0 * t);
    let (sx, sy) = (s(fx), s(fy));
    let g = |a: i32, b: i32| hash2(a.rem_euclid(period), b.rem_euclid(period), seed);
    let top = g(xi, yi) * (1.0 - sx) + g(xi + 1, yi) * sx;
    let bot = g(xi, yi + 1) * (1.0 - sx) + g(xi + 1, yi + 1) * sx;
    top * (1.0 - sy) + bot * sy
}

/// Fractal noise in [0, 1), tileable over the 256-texel texture.
fn fbm(u: usize, v: usize, base_cells: i32, octaves: u32, seed: u32) -> f32 {
    let (mut sum, mut amp, mut norm, mut cells) = (0.0, 1.0, 0.0, base_cells);
    for o in 0..octaves {
        let scale = cells as f32 / TEX as f32;
        sum += amp * value_noise(u as f32 * scale, v as f32 * scale, cells, seed + o);
        norm += amp;
        amp *= 0.5;
        cells *= 2;
    }
    sum / norm
}

fn rgb(r: f32, g: f32, b: f32) -> u32 {
    let c = |v: f32| (v.clamp(0.0, 255.0)) as u32;
    0xFF00_0000 | c(r) << 16 | c(g) << 8 | c(b)
}

fn brick_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let row = v / 32;
            let shift = if row % 2 == 0 { 0 } else { 32 };
            let col = (u + shift) / 64;
            let (bu, bv) = ((u + shift) % 64, v % 32);
            let mortar = bu < 3 || bv < 3;
            let grain = fbm(u, v, 16, 3, 11);
            let brick_tone = hash2(col as i32, row as i32, 3);
            let c = if mortar {
                let m = 150.0 + 50.0 * grain;
                rgb(m, m * 0.97, m * 0.9)
            } else {
                let base = 0.75 + 0.4 * brick_tone;
                let speck = 1.0;
                let k = base * (0.7 + 0.6 * grain) * speck;
                rgb(170.0 * k, 75.0 * k, 52.0 * k)
            };
            t[v * TEX + u] = c;
        }
    }
    t
}

fn stone_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let (cu, cv) = (u / 128, v / 128);
            let (bu, bv) = (u % 128, v % 128);
            let edge = bu < 4 || bv < 4;
            let n = fbm(u, v, 8, 4, 21);
            let crack = (fbm(u, v, 4, 3, 23) - 0.5).abs() < 0.012;
            let tone = 0.8 + 0.3 * hash2(cu as i32, cv as i32, 5);
            let g = if edge || crack {
                60.0
            } else {
                (110.0 + 110.0 * n) * tone
            };
            t[v * TEX + u] = rgb(g * 0.95, g, g * 1.05);
        }
    }
    t
}

fn wood_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let plank = u / 32;
            let seam = u % 32 < 2;
            let n = fbm(u, v, 4, 4, 31 + plank as u32);
            let ring = ((v as f32 * 0.09 + n * 12.0 + plank as f32 * 1.7).sin() * 0.5 + 0.5) * 0.35;
            let k = 0.65 + ring + 0.2 * hash2(plank as i32, 0, 7);
            let c = if seam {
                rgb(40.0, 25.0, 15.0)
            } else {
                rgb(180.0 * k, 120.0 * k, 70.0 * k)
            };
            t[v * TEX + u] = c;
        }
    }
    t
}

fn panel_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let (bu, bv) = (u % 64, v % 64);
            let groove = bu < 2 || bv < 2;
            let rivet = {
                let (du, dv) = (bu as i32 - 8, bv as i32 - 8);
                du * du + dv * dv < 10
            };
            let n = fbm(u, v, 16, 2, 41);
            let stripe = if (v / 8) % 8 == 3 && u % 64 > 16 && u % 64 < 48 {
                1.0
            } else {
                0.0
            };
            let c = if groove {
                rgb(30.0, 35.0, 40.0)
            } else if rivet {
                rgb(210.0, 215.0, 220.0)
            } else if stripe > 0.0 {
                rgb(220.0, 170.0, 30.0)
            } else {
                let g = 95.0 + 70.0 * n;
                rgb(g * 0.85, g * 0.95, g * 1.1)
            };
            t[v * TEX + u] = c;
        }
    }
    t
}

fn floor_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let (cu, cv) = (u / 64, v / 64);
            let grout = u % 64 < 2 || v % 64 < 2;
            let n = fbm(u, v, 16, 2, 51);
            let checker = (cu + cv) % 2 == 0;
            let c = if grout {
                rgb(50.0, 50.0, 45.0)
            } else if checker {
                let g = 150.0 + 50.0 * n;
                rgb(g, g * 0.95, g * 0.85)
            } else {
                let g = 105.0 + 50.0 * n;
                rgb(g * 0.75, g * 0.85, g)
            };
            t[v * TEX + u] = c;
        }
    }
    t
}

fn ceiling_texture() -> Vec<u32> {
    let mut t = vec![0; TEX * TEX];
    for v in 0..TEX {
        for u in 0..TEX {
            let (bu, bv) = (u % 128, v % 128);
            let light = (44..84).contains(&bu) && (44..84).contains(&bv);
            let frame = bu < 3 || bv < 3;
            let n = fbm(u, v, 16, 2, 61);
            let c = if light {
                rgb(215.0, 210.0, 195.0)
            } else if frame {
                rgb(70.0, 70.0, 75.0)
            } else {
                let g = 120.0 + 40.0 * n;
                rgb(g, g, g * 1.02)
            };
            t[v * TEX + u] = c;
        }
    }
    t
}

fn build_map() -> [[u8; MAP]; MAP] {
    let mut m = [[0u8; MAP]; MAP];
    m[0] = [1; MAP];
    m[MAP - 1] = [1; MAP];
    for row in m.iter_mut() {
        row[0] = 1;
        row[MAP - 1] = 1;
    }
    // A central column.
    for (y, x) in [(11, 11), (11, 12), (12, 11), (12, 12)] {
        m[y][x] = 4;
    }
    // A ring of pillars outside the camera's path.
    for k in 0..12 {
        let a = k as f32 * std::f32::consts::TAU / 12.0;
        let (x, y) = (CENTER + 7.5 * a.cos(), CENTER + 7.5 * a.sin());
        m[y as usize][x as usize] = if k % 2 == 0 { 2 } else { 3 };
    }
    // Alcoves along the outer walls.
    for i in (3..MAP - 3).step_by(5) {
        m[1][i] = 3;
        m[MAP - 2][i + 1] = 2;
        m[i][1] = 4;
        m[i + 1][MAP - 2] = 3;
    }
    m
}

const MIP_LEVELS: usize = 6;

/// Box-filtered mip levels 0..MIP_LEVELS of a 256×256 texture, each stored with a 256-texel
/// row pitch in a 256×256 array (so a masked index is provably in bounds: no bounds checks in
/// the inner loops).
fn mip_chain(base: Vec<u32>) -> Vec<Box<[u32; TEX * TEX]>> {
    mip_levels(base)
        .into_iter()
        .enumerate()
        .map(|(l, level)| {
            let s = TEX >> l;
            let mut out = Box::new([0u32; TEX * TEX]);
            for y in 0..s {
                out[y * TEX..y * TEX + s].copy_from_slice(&level[y * s..(y + 1) * s]);
            }
            out
        })
        .collect()
}

fn mip_levels(base: Vec<u32>) -> Vec<Vec<u32>> {
    let mut levels = vec![base];
    for l in 1..MIP_LEVELS {
        let prev = &levels[l - 1];
        let (ps, s) = (TEX >> (l - 1), TEX >> l);
        let mut next = vec![0u32; s * s];
        for y in 0..s {
            for x in 0..s {
                let mut acc = [0u32; 3];
                for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    let p = prev[(2 * y + dy) * ps + 2 * x + dx];
                    acc[0] += p & 0xFF;
                    acc[1] += (p >> 8) & 0xFF;
                    acc[2] += (p >> 16) & 0xFF;
                }
                next[y * s + x] =
                    0xFF00_0000 | (acc[2] / 4) << 16 | (acc[1] / 4) << 8 | (acc[0] / 4);
            }
        }
        levels.push(next);
    }
    levels
}

/// The mip level for a footprint of `texels_per_pixel`.
fn mip_level(texels_per_pixel: f32) -> usize {
    if texels_per_pixel <= 1.0 {
        0
    } else {
        (texels_per_pixel.log2().ceil() as usize).min(MIP_LEVELS - 1)
    }
}

/// Packed fog blend: `vis` in 0..=256 is how much of the pixel survives.
#[inline(always)]
fn fog(p: u32, vis: u32, fog_rb: u32, fog_g: u32) -> u32 {
    let rb = ((p & 0x00FF_00FF) * vis + fog_rb) >> 8 & 0x00FF_00FF;
    let g = ((p & 0x0000_FF00) * vis + fog_g) >> 8 & 0x0000_FF00;
    0xFF00_0000 | rb | g
}

#[inline(always)]
fn fog_terms(vis: u32) -> (u32, u32) {
    let inv = 256 - vis;
    ((FOG & 0x00FF_00FF) * inv, (FOG & 0x0000_FF00) * inv)
}

fn visibility(dist: f32) -> u32 {
    ((-dist * FOG_DENSITY).exp() * 256.0).clamp(0.0, 256.0) as u32
}

impl Scene {
    pub fn new(cfg: SceneConfig) -> Result<Scene> {
        crate::frame::check_size(cfg.width, cfg.height)?;
        let textures = [
            floor_texture(),
            brick_texture(),
            stone_texture(),
            wood_texture(),
            panel_texture(),
            ceiling_texture(),
        ]
        .into_iter()
        .map(mip_chain)
        .collect();
        Ok(Scene {
            cfg,
            textures,
            map: build_map(),
            pointer_yaw: 0.0,
            pointer_pitch: 0.0,
            head_yaw: 0.0,
            head_pitch: 0.0,
            head_position: [0.0; 3],
            keys: [false; 4],
            extents: Vec::new(),
            offset: (0.0, 0.0),
            last_t: None,
        })
    }

    pub fn config(&self) -> &SceneConfig {
        &self.cfg
    }

    pub fn apply_input(&mut self, input: SceneInput) {
        match input {
            SceneInput::PointerDelta { dx, dy } => {
                if dx.is_finite() && dy.is_finite() {
                    // Moving the pointer right turns right (clockwise seen from above).
                    self.pointer_yaw =
                        (self.pointer_yaw - dx * self.cfg.pointer_deg_per_px).rem_euclid(360.0);
                    self.pointer_pitch = (self.pointer_pitch - dy * self.cfg.pointer_deg_per_px)
                        .clamp(-MAX_PITCH_DEG, MAX_PITCH_DEG);
                }
            }
            SceneInput::Key { key, down } => self.keys[key as usize] = down,
            SceneInput::HeadPose { yaw_deg, pitch_deg } => {
                if yaw_deg.is_finite() && pitch_deg.is_finite() {
                    self.head_yaw = yaw_deg;
                    self.head_pitch = pitch_deg.clamp(-MAX_PITCH_DEG, MAX_PITCH_DEG);
                }
            }
        }
    }

    /// Sets the head's pose: yaw (degrees, positive to the left) and pitch (degrees, positive
    /// up), added to the camera's path orientation, and its position (metres: x right, y up,
    /// z back) relative to the camera's path, y being the eye's height above the resting one.
    /// Non-finite values are ignored.
    pub fn set_head_pose(&mut self, yaw_deg: f32, pitch_deg: f32, position: [f32; 3]) {
        if yaw_deg.is_finite() && pitch_deg.is_finite() && position.iter().all(|v| v.is_finite()) {
            self.head_yaw = yaw_deg;
            self.head_pitch = pitch_deg.clamp(-MAX_PITCH_DEG, MAX_PITCH_DEG);
            self.head_position = position.map(|v| v.clamp(-8.0, 8.0));
        }
    }

    fn wall(&self, x: f32, y: f32) -> bool {
        let (xi, yi) = (x.floor() as isize, y.floor() as isize);
        if xi < 0 || yi < 0 || xi >= MAP as isize || yi >= MAP as isize {
            return true;
        }
        self.map[yi as usize][xi as usize] != 0
    }

    /// Camera position and orientation at time `t` (after the key-driven offset is applied).
    fn camera(&mut self, t: f64) -> (f32, f32, f32, f32) {
        let yaw_deg =
            self.cfg.spin_deg_per_s as f64 * t + self.pointer_yaw as f64 + self.head_yaw as f64;
        let yaw = (yaw_deg.rem_euclid(360.0) as f32).to_radians();
        let pitch = (self.pointer_pitch + self.head_pitch)
            .clamp(-MAX_PITCH_DEG, MAX_PITCH_DEG)
            .to_radians();
        let w = self.cfg.walk_speed as f64 / PATH_RADIUS as f64;
        let a = (w * t).rem_euclid(std::f64::consts::TAU) as f32;
        let base = (
            CENTER + PATH_RADIUS * a.cos(),
            CENTER + PATH_RADIUS * a.sin(),
        );
        // Key-driven walking, integrated over render calls.
        let dt = self.last_t.map_or(0.0, |l| (t - l).clamp(0.0, 0.1)) as f32;
        self.last_t = Some(t);
        let (fwd, right) = (
            self.keys[SceneKey::Forward as usize] as i32
                - self.keys[SceneKey::Back as usize] as i32,
            self.keys[SceneKey::Right as usize] as i32 - self.keys[SceneKey::Left as usize] as i32,
        );
        if (fwd != 0 || right != 0) && dt > 0.0 {
            let step = self.cfg.key_speed * dt;
            let (dx, dy) = (
                (yaw.cos() * fwd as f32 + yaw.sin() * right as f32) * step,
                (yaw.sin() * fwd as f32 - yaw.cos() * right as f32) * step,
            );
            let (nx, ny) = (base.0 + self.offset.0 + dx, base.1 + self.offset.1 + dy);
            if !self.wall(nx, base.1 + self.offset.1) && nx > 1.2 && nx < MAP as f32 - 1.2 {
                self.offset.0 += dx;
            }
            if !self.wall(base.0 + self.offset.0, ny) && ny > 1.2 && ny < MAP as f32 - 1.2 {
                self.offset.1 += dy;
            }
        }
        let (mut px, mut py) = (base.0 + self.offset.0, base.1 + self.offset.1);
        if self.wall(px, py) {
            // The path moved into a wall: step back out to the path.
            self.offset = (0.0, 0.0);
            (px, py) = base;
        }
        (px, py, yaw, pitch)
    }

    /// The views of a frame at the camera's pose: one, or two eyes side by side.
    fn views(&self, px: f32, py: f32, yaw: f32, pitch: f32, base_yaw: f32) -> Vec<View> {
        let w = self.cfg.width as usize;
        // The head's offset in the map: forward is the path's direction (without the head's
        // own yaw), right is its clockwise normal.
        let (fx, fy) = (base_yaw.cos(), base_yaw.sin());
        let (rx, ry) = (fy, -fx);
        let [hx, hy, hz] = self.head_position;
        let (cx, cy) = (px + fx * -hz + rx * hx, py + fy * -hz + ry * hx);
        let height = (0.5 + hy).clamp(0.05, 0.95);
        if !self.cfg.stereo {
            return vec![View {
                px: cx,
                py: cy,
                yaw,
                pitch,
                height,
                x0: 0,
                w,
            }];
        }
        // Each eye ±IPD/2 along the head's right axis (the head's own yaw included).
        let half = self.cfg.ipd_m.clamp(0.0, 0.2) / 2.0;
        let (ex, ey) = (yaw.sin() * half, -yaw.cos() * half);
        let lw = w / 2;
        vec![
            View {
                px: cx - ex,
                py: cy - ey,
                yaw,
                pitch,
                height,
                x0: 0,
                w: lw,
            },
            View {
                px: cx + ex,
                py: cy + ey,
                yaw,
                pitch,
                height,
                x0: lw,
                w: w - lw,
            },
        ]
    }

    /// Renders the scene at time `t` (seconds) into `out`.
    pub fn render(&mut self, t: f64, out: &mut BgraFrame) {
        if (out.width, out.height) != (self.cfg.width, self.cfg.height) {
            return;
        }
        let (px, py, yaw, pitch) = self.camera(t);
        let base_yaw = yaw - self.head_yaw.to_radians();
        let h = self.cfg.height as usize;
        let stride = out.stride;
        if !(out.data.as_ptr() as usize).is_multiple_of(4)
            || !stride.is_multiple_of(4)
            || out.data.len() < stride * h
        {
            return self.render_unaligned(t, out);
        }
        // SAFETY: every bit pattern is a valid u32 and the buffer is 4-byte aligned (checked
        // above), so the prefix is empty and `body` covers the whole frame.
        let (_, body, _) = unsafe { out.data.align_to_mut::<u32>() };
        let pitch_px = stride / 4;
        for view in self.views(px, py, yaw, pitch, base_yaw) {
            self.render_view(view, body, pitch_px, h);
            if self.cfg.pose_markers {
                self.draw_markers(view, body, pitch_px, h);
            }
        }
    }

    /// The half horizontal field of view of each view, radians.
    pub fn half_fov(&self) -> f32 {
        (self.cfg.fov_deg.clamp(30.0, 150.0) / 2.0).to_radians()
    }

    /// Pose markers at infinity: a bar at every [`MARKER_SPACING_DEG`] of world azimuth, over
    /// the middle half of the rows.
    fn draw_markers(&self, v: View, body: &mut [u32], pitch_px: usize, h: usize) {
        let half_fov = self.half_fov();
        let yaw_deg = v.yaw.to_degrees();
        let first = ((yaw_deg - 90.0) / MARKER_SPACING_DEG).floor() as i32;
        let last = ((yaw_deg + 90.0) / MARKER_SPACING_DEG).ceil() as i32;
        // Widths scale with the view: a 4-pixel white core and 2-pixel black edges at 640.
        let core = (v.w as f32 / 160.0).max(2.0);
        let edge = (v.w as f32 / 320.0).max(1.0);
        for k in first..=last {
            let az = (k as f32 * MARKER_SPACING_DEG).to_radians();
            let Some(xc) = column_of(az - v.yaw, v.w, half_fov) else {
                continue;
            };
            let x_lo = (xc - core / 2.0 - edge).floor().max(0.0) as usize;
            let x_hi = ((xc + core / 2.0 + edge).ceil() as usize).min(v.w.saturating_sub(1));
            for y in h / 4..3 * h / 4 {
                let row = &mut body[y * pitch_px + v.x0..y * pitch_px + v.x0 + v.w];
                for (x, p) in row.iter_mut().enumerate().take(x_hi + 1).skip(x_lo) {
                    let d = (x as f32 - xc).abs();
                    *p = if d <= core / 2.0 {
                        0xFFFF_FFFF
                    } else {
                        0xFF00_0000
                    };
                }
            }
        }
    }

    /// Renders one view into its columns of `body`.
    fn render_view(&mut self, v: View, body: &mut [u32], pitch_px: usize, h: usize) {
        let View {
            px,
            py,
            yaw,
            pitch,
            height,
            x0,
            w,
        } = v;
        let half_fov = self.half_fov();
        // Screen y grows downwards; world y grows "up" the map. Direction and camera plane:
        let (dir_x, dir_y) = (yaw.cos(), yaw.sin());
        let plane = half_fov.tan();
        let (plane_x, plane_y) = (dir_y * plane, -dir_x * plane);
        let focal = (w as f32 / 2.0) / plane;
        let horizon = h as f32 / 2.0 + pitch.tan() * focal;
        let texs = &self.textures;

        // Walls first, column by column (DDA ray casting), remembering what each column
        // covers so the floor and ceiling skip those pixels.
        let mut extents = std::mem::take(&mut self.extents);
        extents.resize(w, (0, 0));
        for x in 0..w {
            let cam = 2.0 * (x as f32 + 0.5) / w as f32 - 1.0;
            let (rdx, rdy) = (dir_x + plane_x * cam, dir_y + plane_y * cam);
            let (mut mx, mut my) = (px.floor() as i32, py.floor() as i32);
            let ddx = if rdx == 0.0 {
                f32::INFINITY
            } else {
                (1.0 / rdx).abs()
            };
            let ddy = if rdy == 0.0 {
                f32::INFINITY
            } else {
                (1.0 / rdy).abs()
            };
            let (step_x, mut side_x) = if rdx < 0.0 {
                (-1, (px - mx as f32) * ddx)
            } else {
                (1, (mx as f32 + 1.0 - px) * ddx)
            };
            let (step_y, mut side_y) = if rdy < 0.0 {
                (-1, (py - my as f32) * ddy)
            } else {
                (1, (my as f32 + 1.0 - py) * ddy)
            };
            let mut side = 0;
            let mut cell = 0u8;
            for _ in 0..(MAP * 3) {
                if side_x < side_y {
                    side_x += ddx;
                    mx += step_x;
                    side = 0;
                } else {
                    side_y += ddy;
                    my += step_y;
                    side = 1;
                }
                if mx < 0 || my < 0 || mx >= MAP as i32 || my >= MAP as i32 {
                    cell = 1;
                    break;
                }
                cell = self.map[my as usize][mx as usize];
                if cell != 0 {
                    break;
                }
            }
            if cell == 0 {
                extents[x] = (0, 0);
                continue;
            }
            let dist = if side == 0 {
                side_x - ddx
            } else {
                side_y - ddy
            }
            .max(0.02);
            let hit = if side == 0 {
                py + dist * rdy
            } else {
                px + dist * rdx
            };
            let mut tu = ((hit - hit.floor()) * TEX as f32) as usize & (TEX - 1);
            if (side == 0 && rdx > 0.0) || (side == 1 && rdy < 0.0) {
                tu = TEX - 1 - tu;
            }
            let line = focal / dist;
            let top = horizon - (1.0 - height) * line;
            let y0 = top.max(0.0) as usize;
            let y1 = ((horizon + height * line).ceil().max(0.0) as usize).min(h);
            extents[x] = (y0 as u32, y1.max(y0) as u32);
            let mut vis = visibility(dist);
            if side == 1 {
                vis = vis * 205 / 256;
            }
            let (frb, fg) = fog_terms(vis);
            let level = mip_level(TEX as f32 / line);
            let tex = &texs[cell.min(4) as usize][level];
            let tu = tu >> level;
            let step = ((TEX as f32 / line) * 65536.0) as u32;
            let mut v = (((y0 as f32 + 0.5 - top) * TEX as f32 / line) * 65536.0).max(0.0) as u32;
            for y in y0..y1 {
                let texel = tex
                    [((((v >> 16) as usize).min(TEX - 1) >> level) * TEX + tu) & (TEX * TEX - 1)];
                body[y * pitch_px + x0 + x] = fog(texel, vis, frb, fg);
                v = v.wrapping_add(step);
            }
        }

        // Floor and ceiling, row by row.
        let (lx, ly) = (dir_x - plane_x, dir_y - plane_y);
        let (rx, ry) = (dir_x + plane_x, dir_y + plane_y);
        for y in 0..h {
            let row = &mut body[y * pitch_px + x0..y * pitch_px + x0 + w];
            let dy = y as f32 + 0.5 - horizon;
            let yy = y as u32;
            let uncovered = |row: &mut [u32]| {
                for (p, &(top, bottom)) in row.iter_mut().zip(extents.iter()) {
                    if yy < top || yy >= bottom {
                        *p = 0xFF00_0000 | FOG;
                    }
                }
            };
            if dy.abs() < 0.5 {
                uncovered(row);
                continue;
            }
            let floor = dy > 0.0;
            let dist = if floor { height } else { 1.0 - height } * focal / dy.abs();
            let vis = visibility(dist);
            if vis == 0 {
                uncovered(row);
                continue;
            }
            let (frb, fg) = fog_terms(vis);
            let (sx, sy) = (dist * (rx - lx) / w as f32, dist * (ry - ly) / w as f32);
            // Footprint of a pixel along the row, and between rows (the row distance's slope).
            let along = sx.abs().max(sy.abs()) * TEX as f32;
            let across = dist / dy.abs() * TEX as f32;
            let level = mip_level(along.max(across * 0.5));
            let tex = &texs[if floor { 0 } else { 5 }][level];
            let (shift, mask) = (16 + level as u32, ((TEX >> level) - 1) as u32);
            let scale = TEX as f32 * 65536.0;
            let mut u = ((px + dist * lx) * scale) as i64 as u32;
            let mut v = ((py + dist * ly) * scale) as i64 as u32;
            let du = (sx * scale) as i64 as u32;
            let dv = (sy * scale) as i64 as u32;
            for (p, &(top, bottom)) in row.iter_mut().zip(extents.iter()) {
                if yy < top || yy >= bottom {
                    let i = (((v >> shift) & mask) << 8 | ((u >> shift) & mask)) as usize;
                    let texel = tex[i & (TEX * TEX - 1)];
                    *p = fog(texel, vis, frb, fg);
                }
                u = u.wrapping_add(du);
                v = v.wrapping_add(dv);
            }
        }

        self.extents = extents;
    }

    /// The rare case of a frame buffer whose bytes are not u32-aligned: render into an aligned
    /// copy.
    fn render_unaligned(&mut self, t: f64, out: &mut BgraFrame) {
        let mut tmp = match BgraFrame::new(out.width, out.height) {
            Ok(f) => f,
            Err(_) => return,
        };
        // A fresh Vec<u8> from the global allocator of this size is aligned; if not, give up.
        if !(tmp.data.as_ptr() as usize).is_multiple_of(4) {
            return;
        }
        self.last_t = self.last_t.map(|l| l.min(t));
        self.render(t, &mut tmp);
        for y in 0..out.height {
            out.row_mut(y).copy_from_slice(tmp.row(y));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(scene: &mut Scene, t: f64) -> BgraFrame {
        let c = scene.config();
        let mut f = BgraFrame::new(c.width, c.height).unwrap();
        scene.render(t, &mut f);
        f
    }

    fn diff(a: &BgraFrame, b: &BgraFrame) -> f64 {
        a.data
            .iter()
            .zip(&b.data)
            .map(|(x, y)| (*x as f64 - *y as f64).abs())
            .sum::<f64>()
            / a.data.len() as f64
    }

    #[test]
    fn deterministic_and_detailed() {
        let mut a = Scene::new(SceneConfig::new(640, 360)).unwrap();
        let mut b = Scene::new(SceneConfig::new(640, 360)).unwrap();
        let fa = render(&mut a, 2.5);
        assert_eq!(fa, render(&mut b, 2.5));
        // Not flat: many distinct colours and strong local contrast.
        let mut colours = std::collections::HashSet::new();
        for p in fa.data.chunks_exact(4) {
            colours.insert((p[0], p[1], p[2]));
        }
        assert!(colours.len() > 2000, "only {} colours", colours.len());
        // Every pixel is opaque.
        assert!(fa.data.chunks_exact(4).all(|p| p[3] == 255));
    }

    #[test]
    fn spins_and_walks_by_default_still_when_told() {
        let mut s = Scene::new(SceneConfig::new(320, 180)).unwrap();
        let a = render(&mut s, 1.0);
        let b = render(&mut s, 1.1);
        assert!(diff(&a, &b) > 5.0);
        let mut cfg = SceneConfig::new(320, 180);
        cfg.spin_deg_per_s = 0.0;
        cfg.walk_speed = 0.0;
        let mut s = Scene::new(cfg).unwrap();
        let a = render(&mut s, 1.0);
        let b = render(&mut s, 7.0);
        assert_eq!(a, b);
    }

    #[test]
    fn input_moves_the_camera() {
        let mut cfg = SceneConfig::new(320, 180);
        cfg.spin_deg_per_s = 0.0;
        cfg.walk_speed = 0.0;
        let mut s = Scene::new(cfg).unwrap();
        let a = render(&mut s, 1.0);
        s.apply_input(SceneInput::PointerDelta { dx: 40.0, dy: 0.0 });
        let b = render(&mut s, 1.0);
        assert!(
            diff(&a, &b) > 5.0,
            "pointer turn changed the picture by {}",
            diff(&a, &b)
        );
        s.apply_input(SceneInput::PointerDelta { dx: 0.0, dy: -30.0 });
        let c = render(&mut s, 1.0);
        assert!(diff(&b, &c) > 5.0);
        s.apply_input(SceneInput::Key {
            key: SceneKey::Forward,
            down: true,
        });
        let d0 = render(&mut s, 1.05);
        let d1 = render(&mut s, 1.1);
        assert!(diff(&d0, &d1) > 1.0);
        s.apply_input(SceneInput::Key {
            key: SceneKey::Forward,
            down: false,
        });
        let e0 = render(&mut s, 1.2);
        let e1 = render(&mut s, 1.3);
        assert_eq!(e0, e1);
        s.apply_input(SceneInput::HeadPose {
            yaw_deg: 90.0,
            pitch_deg: 0.0,
        });
        assert!(diff(&e1, &render(&mut s, 1.3)) > 5.0);
        // Nonsense input is ignored, never a panic.
        s.apply_input(SceneInput::PointerDelta {
            dx: f32::NAN,
            dy: f32::INFINITY,
        });
        render(&mut s, 1.4);
    }

    #[test]
    fn long_walks_stay_inside() {
        let mut s = Scene::new(SceneConfig::new(160, 90)).unwrap();
        s.apply_input(SceneInput::Key {
            key: SceneKey::Forward,
            down: true,
        });
        for i in 0..2000 {
            let f = render(&mut s, i as f64 / 60.0);
            assert!(f.data.chunks_exact(4).all(|p| p[3] == 255));
        }
    }

    fn still(w: u32, h: u32) -> SceneConfig {
        let mut cfg = SceneConfig::new(w, h);
        cfg.spin_deg_per_s = 0.0;
        cfg.walk_speed = 0.0;
        cfg
    }

    #[test]
    fn stereo_renders_two_eyes_from_the_head_pose() {
        let mut cfg = still(640, 360);
        cfg.stereo = true;
        cfg.ipd_m = 0.0;
        let mut s = Scene::new(cfg.clone()).unwrap();
        let f = render(&mut s, 1.0);
        // Without eye separation both halves are the same picture.
        for y in 0..360 {
            let row = f.row(y);
            assert_eq!(&row[..320 * 4], &row[320 * 4..]);
        }
        cfg.ipd_m = 0.064;
        let mut s = Scene::new(cfg).unwrap();
        let g = render(&mut s, 1.0);
        let (l, r): (Vec<u8>, Vec<u8>) = (0..360)
            .map(|y| (g.row(y)[..1280].to_vec(), g.row(y)[1280..].to_vec()))
            .fold((vec![], vec![]), |(mut a, mut b), (x, y)| {
                a.extend(x);
                b.extend(y);
                (a, b)
            });
        let d = l
            .iter()
            .zip(&r)
            .map(|(a, b)| (*a as f64 - *b as f64).abs())
            .sum::<f64>()
            / l.len() as f64;
        assert!(d > 0.5 && d < 40.0, "parallax between the eyes: {d}");
        // Moving the head forward and up changes what each eye sees.
        s.set_head_pose(0.0, 0.0, [0.0, 0.2, -0.5]);
        assert!(diff(&g, &render(&mut s, 1.0)) > 2.0);
    }

    #[test]
    fn pose_markers_show_the_views_yaw() {
        let mut cfg = still(640, 360);
        cfg.pose_markers = true;
        let mut s = Scene::new(cfg).unwrap();
        for yaw in [0.0f32, 7.5, -12.0, 44.0] {
            s.set_head_pose(yaw, 0.0, [0.0; 3]);
            let f = render(&mut s, 1.0);
            // White runs on the middle row.
            let row = f.row(180);
            let mut runs = Vec::new();
            let mut start = None;
            for x in 0..640usize {
                let white = row[x * 4] == 255 && row[x * 4 + 1] == 255 && row[x * 4 + 2] == 255;
                match (white, start) {
                    (true, None) => start = Some(x),
                    (false, Some(a)) => {
                        runs.push((a + x - 1) as f32 / 2.0);
                        start = None;
                    }
                    _ => {}
                }
            }
            assert!(!runs.is_empty(), "yaw {yaw}: no marker");
            for xc in runs {
                let delta = delta_of_column(xc, 640, s.half_fov()).to_degrees();
                // The marker's azimuth is a multiple of 30°: yaw + delta.
                let az = yaw + delta;
                let off = (az / MARKER_SPACING_DEG).round() * MARKER_SPACING_DEG - az;
                assert!(off.abs() < 0.3, "yaw {yaw}: marker at {xc} is {off}° off");
            }
        }
    }
}
