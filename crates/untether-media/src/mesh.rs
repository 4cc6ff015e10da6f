//! The lens distortion mesh of the GPU presenter's VR pass: instead of evaluating the lens
//! polynomial and the late warp's homography for every pixel, both are evaluated at the
//! vertices of a grid over each eye's viewport (the lens on the CPU when the window or picture
//! size changes, the warp in the vertex shader at every draw, from the pose of that draw), and
//! the GPU interpolates between them. The fragment shader is left with a bounds test and the
//! texture reads.
//!
//! [`DistortionMesh::sample`] is what the GPU draws at a point, computed on the CPU (the same
//! triangles, interpolated the same way): the tests hold it against the exact per-pixel
//! mapping ([`LensProfile::distort`] then [`crate::warp::sample_uv`]).

use glam::{Mat3, Vec2, Vec3};

use crate::lens::{Eye, LensProfile};

/// Cells per side of each eye's grid (the default: 2 × 65 × 65 vertices; 32 cells leave the generic profile's corners 2.4 px off the exact mapping at a 640x720 eye, 64 cells 0.6 px).
pub const CELLS: u32 = 64;

/// Floats per vertex: clip x, y; eye (0 left, 1 right); the undistorted eye-picture point
/// each colour channel shows there (red, green, blue: x, y).
pub const FLOATS_PER_VERTEX: usize = 9;

/// The grid of both eyes, ready for a vertex and an index buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct DistortionMesh {
    /// [`FLOATS_PER_VERTEX`] floats per vertex, the left eye's vertices first, rows top down.
    pub vertices: Vec<f32>,
    /// Two triangles per cell.
    pub indices: Vec<u16>,
    pub cells: u32,
    /// What it was made for: (eye viewport height / width, eye picture height / width).
    pub aspects: (f32, f32),
}

impl DistortionMesh {
    /// The mesh of `lens` with `cells` × `cells` cells per eye (1 to 180) for eye viewports of
    /// aspect `view_aspect` and eye pictures of aspect `pic_aspect` (height / width).
    pub fn new(lens: &LensProfile, cells: u32, view_aspect: f32, pic_aspect: f32) -> Self {
        let cells = cells.clamp(1, 180);
        let n = cells + 1;
        let mut vertices = Vec::with_capacity((2 * n * n) as usize * FLOATS_PER_VERTEX);
        let mut indices = Vec::with_capacity((2 * cells * cells * 6) as usize);
        for (e, eye) in [Eye::Left, Eye::Right].into_iter().enumerate() {
            for j in 0..n {
                for i in 0..n {
                    // s: the point of the eye's viewport, v downwards.
                    let s = Vec2::new(i as f32 / cells as f32, j as f32 / cells as f32);
                    vertices.extend([e as f32 + s.x - 1.0, 1.0 - 2.0 * s.y, e as f32]);
                    for c in 0..3 {
                        let p = lens.distort(eye, s, view_aspect, pic_aspect, c);
                        vertices.extend([p.x, p.y]);
                    }
                }
            }
            let base = e as u32 * n * n;
            for j in 0..cells {
                for i in 0..cells {
                    let v00 = base + j * n + i;
                    let (v10, v01, v11) = (v00 + 1, v00 + n, v00 + n + 1);
                    // The split [`Self::sample`] assumes: (00, 10, 11) where fx ≥ fy.
                    indices.extend([v00, v10, v11, v00, v11, v01].map(|v| v as u16));
                }
            }
        }
        DistortionMesh {
            vertices,
            indices,
            cells,
            aspects: (view_aspect, pic_aspect),
        }
    }

    /// The vertex shader's warp of one point (None: behind the eye).
    fn warp(rotation: Mat3, tan_half: Vec2, p: Vec2) -> Option<Vec2> {
        let d = Vec3::new(
            (2.0 * p.x - 1.0) * tan_half.x,
            (1.0 - 2.0 * p.y) * tan_half.y,
            -1.0,
        );
        let r = rotation * d;
        (r.z <= -1e-6).then(|| {
            Vec2::new(
                0.5 + 0.5 * (r.x / -r.z) / tan_half.x,
                0.5 - 0.5 * (r.y / -r.z) / tan_half.y,
            )
        })
    }

    /// What the GPU shows at point `s` of `eye`'s viewport in colour `channel`: the point of
    /// the rendered eye picture it samples (None: black), with the late warp's `rotation`
    /// and tan(fov / 2) when there is one.
    pub fn sample(
        &self,
        eye: Eye,
        s: Vec2,
        warp: Option<(Mat3, Vec2)>,
        channel: usize,
    ) -> Option<Vec2> {
        let cells = self.cells as f32;
        let n = self.cells + 1;
        let (gx, gy) = (s.x.clamp(0.0, 1.0) * cells, s.y.clamp(0.0, 1.0) * cells);
        let (i, j) = (
            (gx as u32).min(self.cells - 1),
            (gy as u32).min(self.cells - 1),
        );
        let (fx, fy) = (gx - i as f32, gy - j as f32);
        let base = if eye == Eye::Left { 0 } else { n * n };
        let at = |di: u32, dj: u32| -> Option<Vec2> {
            let v = (base + (j + dj) * n + i + di) as usize * FLOATS_PER_VERTEX;
            let c = 3 + 2 * channel.min(2);
            let p = Vec2::new(self.vertices[v + c], self.vertices[v + c + 1]);
            match warp {
                Some((r, t)) => Self::warp(r, t, p),
                None => Some(p),
            }
        };
        // Barycentric interpolation over the cell's triangle holding the point.
        let p = if fx >= fy {
            let (a, b, c) = (at(0, 0)?, at(1, 0)?, at(1, 1)?);
            a + (b - a) * (fx - fy) + (c - a) * fy
        } else {
            let (a, c, d) = (at(0, 0)?, at(1, 1)?, at(0, 1)?);
            a + (c - a) * fx + (d - a) * (fy - fx)
        };
        ((0.0..=1.0).contains(&p.x) && (0.0..=1.0).contains(&p.y)).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::{sample_uv, Fov, Warp};
    use glam::Quat;

    /// The exact per-pixel mapping (what the per-pixel shader computed).
    fn exact(
        lens: &LensProfile,
        eye: Eye,
        s: Vec2,
        aspects: (f32, f32),
        warp: Option<(Mat3, Vec2)>,
        channel: usize,
    ) -> Option<Vec2> {
        let p = lens.distort(eye, s, aspects.0, aspects.1, channel);
        match warp {
            Some((r, t)) => sample_uv(r, t, p),
            None => ((0.0..=1.0).contains(&p.x) && (0.0..=1.0).contains(&p.y)).then_some(p),
        }
    }

    /// The largest distance, in pixels of a `w`×`h` eye picture, between the mesh and the
    /// exact mapping over a dense grid of the viewport, and how many points agree on black.
    fn worst(mesh: &DistortionMesh, lens: &LensProfile, warp: Option<(Mat3, Vec2)>) -> f32 {
        let (w, h) = (640.0, 720.0);
        let mut worst = 0.0f32;
        let mut compared = 0;
        for eye in [Eye::Left, Eye::Right] {
            for j in 0..=200 {
                for i in 0..=200 {
                    let s = Vec2::new(i as f32 / 200.0, j as f32 / 200.0);
                    for c in 0..3 {
                        let (a, b) = (
                            mesh.sample(eye, s, warp, c),
                            exact(lens, eye, s, mesh.aspects, warp, c),
                        );
                        if let (Some(a), Some(b)) = (a, b) {
                            let d = (a - b) * Vec2::new(w, h);
                            worst = worst.max(d.length());
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert!(
            compared > 50_000,
            "only {compared} points inside the picture"
        );
        worst
    }

    #[test]
    fn the_mesh_agrees_with_the_per_pixel_mapping_within_a_pixel() {
        let lens = LensProfile::generic();
        // 1280x720 window and picture: each eye 640x720.
        let mesh = DistortionMesh::new(&lens, CELLS, 720.0 / 640.0, 720.0 / 640.0);
        assert_eq!(mesh.vertices.len(), 2 * 65 * 65 * FLOATS_PER_VERTEX);
        assert_eq!(mesh.indices.len(), 2 * 64 * 64 * 6);
        let still = worst(&mesh, &lens, None);
        assert!(still < 1.0, "lens only: {still:.3} px apart");
        // A head turned 5° right and 2° down since the frame was rendered.
        let fov = Fov::from_horizontal(100f32.to_radians(), 640, 720);
        let w = Warp {
            rendered: Quat::IDENTITY,
            latest: Quat::from_rotation_y(-5f32.to_radians())
                * Quat::from_rotation_x(-2f32.to_radians()),
            fov,
        };
        let turned = worst(&mesh, &lens, Some((w.rotation(), fov.tan_half())));
        assert!(turned < 1.0, "lens and warp: {turned:.3} px apart");
    }

    #[test]
    fn a_coarse_mesh_is_visibly_off_so_the_comparison_can_fail() {
        let lens = LensProfile::generic();
        let coarse = DistortionMesh::new(&lens, 2, 720.0 / 640.0, 720.0 / 640.0);
        assert!(worst(&coarse, &lens, None) > 1.0);
    }
}
