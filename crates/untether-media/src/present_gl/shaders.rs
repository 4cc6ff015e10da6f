//! The GL presenter's shaders: their sources, the video shader's variants (compiled on first
//! use, each with its uniforms), and the YUV→RGB matrix the video shader applies.

use glow::HasContext;

use super::gl_err;
use crate::codec::{Colorimetry, YuvMatrix};
use crate::warp::{Mat3, Warp};
use crate::{MediaError, Result};

pub(super) const VERTEX_SHADER: &str = include_str!("../shaders/fullscreen.vert");

/// The planes' sampling and colour, before either video fragment shader.
const PLANES: &str = include_str!("../shaders/planes.glsl");

/// The video pass outside VR, specialised per variant by the `#define`s [`Variant::defines`]
/// puts before it (a software GL like llvmpipe runs both sides of a branch, even a uniform
/// one, so the paths a picture does not take are compiled out, not skipped).
const VIDEO_SHADER: &str = include_str!("../shaders/video.frag");

/// The VR pass: the distortion mesh's vertex stage (the late warp per vertex, mirroring
/// `DistortionMesh::sample`) and fragment stage.
const MESH_VERTEX_SHADER: &str = include_str!("../shaders/mesh.vert");
const MESH_SHADER: &str = include_str!("../shaders/mesh.frag");

/// Which specialisation of the video shader draws a picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Variant {
    pub(super) gbr: bool,
    /// NV12 (Y, then U and V interleaved in one half-size texture): pictures imported from a
    /// hardware decoder without a copy ([`crate::zero_copy`]).
    pub(super) nv12: bool,
    /// Side-by-side stereo with lens distortion (VR).
    pub(super) vr: bool,
    /// Chromatic-aberration correction (a sample per colour channel; off when the profile's
    /// scales are all 1).
    pub(super) chroma: bool,
    pub(super) warp: bool,
}

impl Variant {
    fn defines(self) -> String {
        let mut d = String::from("#version 300 es\n");
        if self.gbr {
            d.push_str("#define GBR 1\n");
        }
        if self.nv12 {
            d.push_str("#define NV12 1\n");
        }
        if self.vr {
            d.push_str("#define STEREO 1\n");
            if self.chroma {
                d.push_str("#define CHROMA 1\n");
            }
        }
        if self.warp {
            d.push_str("#define WARP 1\n");
        }
        d
    }
}

/// The YUV→RGB matrix (column-major, applied to (Y, U, V) − offset) and the offset, for
/// samples normalised to 0..1.
pub fn yuv_to_rgb(c: Colorimetry) -> (Mat3, [f32; 3]) {
    let (kr, kb) = match c.matrix {
        YuvMatrix::Bt601 => (0.299f32, 0.114f32),
        YuvMatrix::Bt709 => (0.2126, 0.0722),
    };
    let kg = 1.0 - kr - kb;
    let (ys, cs, y0) = if c.full_range {
        (1.0, 1.0, 0.0)
    } else {
        (255.0 / 219.0, 255.0 / 224.0, 16.0 / 255.0)
    };
    let (rv, bu) = (2.0 * (1.0 - kr), 2.0 * (1.0 - kb));
    let (gu, gv) = (-bu * kb / kg, -rv * kr / kg);
    // Columns: the contribution of Y, of U, of V to (R, G, B).
    let m = Mat3::from_cols(
        glam::Vec3::new(ys, ys, ys),
        glam::Vec3::new(0.0, gu * cs, bu * cs),
        glam::Vec3::new(rv * cs, gv * cs, 0.0),
    );
    (m, [y0, 128.0 / 255.0, 128.0 / 255.0])
}

/// A compiled variant of the video shader and its uniforms (those compiled out are None).
pub(super) struct VideoProgram {
    variant: Variant,
    program: glow::Program,
    tex: [Option<glow::UniformLocation>; 3],
    yuv: Option<glow::UniformLocation>,
    offset: Option<glow::UniformLocation>,
    rot: Option<glow::UniformLocation>,
    tan: Option<glow::UniformLocation>,
    texel: Option<glow::UniformLocation>,
}

/// Compiles and links a program from the vertex shader and `fragment`.
///
/// # Safety
/// A current GL context on this thread.
pub(super) unsafe fn program(
    gl: &glow::Context,
    vertex: &str,
    fragment: &str,
    name: &str,
) -> Result<glow::Program> {
    let prog = gl.create_program().map_err(gl_err("program"))?;
    let mut shaders = Vec::new();
    for (kind, src) in [
        (glow::VERTEX_SHADER, vertex),
        (glow::FRAGMENT_SHADER, fragment),
    ] {
        let sh = gl.create_shader(kind).map_err(gl_err("shader"))?;
        gl.shader_source(sh, src);
        gl.compile_shader(sh);
        if !gl.get_shader_compile_status(sh) {
            let log = gl.get_shader_info_log(sh);
            return Err(MediaError::Display(format!(
                "GL: the {name} shader does not compile: {log}"
            )));
        }
        gl.attach_shader(prog, sh);
        shaders.push(sh);
    }
    gl.link_program(prog);
    if !gl.get_program_link_status(prog) {
        return Err(MediaError::Display(format!(
            "GL: the {name} program does not link: {}",
            gl.get_program_info_log(prog)
        )));
    }
    for sh in shaders {
        gl.detach_shader(prog, sh);
        gl.delete_shader(sh);
    }
    Ok(prog)
}

/// The video shader's variants compiled so far (at most 2 formats × 3 modes).
pub(super) struct VideoPrograms {
    compiled: Vec<VideoProgram>,
}

impl VideoPrograms {
    pub(super) fn new() -> VideoPrograms {
        VideoPrograms {
            compiled: Vec::new(),
        }
    }

    /// The index of `variant`'s program, compiled on first use.
    pub(super) fn index(&mut self, gl: &glow::Context, variant: Variant) -> Result<usize> {
        if let Some(i) = self.compiled.iter().position(|p| p.variant == variant) {
            return Ok(i);
        }
        let defines = variant.defines();
        let (vertex, fragment, name) = if variant.vr {
            (
                format!("{defines}{MESH_VERTEX_SHADER}"),
                format!("{defines}{PLANES}{MESH_SHADER}"),
                "VR mesh",
            )
        } else {
            (
                VERTEX_SHADER.to_string(),
                format!("{defines}{PLANES}{VIDEO_SHADER}"),
                "video",
            )
        };
        // SAFETY: the context is current on this thread.
        let vp = unsafe {
            let program = program(gl, &vertex, &fragment, name)?;
            let u = |n: &str| gl.get_uniform_location(program, n);
            VideoProgram {
                variant,
                program,
                tex: [u("u_tex0"), u("u_tex1"), u("u_tex2")],
                yuv: u("u_yuv"),
                offset: u("u_offset"),
                rot: u("u_rot"),
                tan: u("u_tan"),
                texel: u("u_texel"),
            }
        };
        self.compiled.push(vp);
        Ok(self.compiled.len() - 1)
    }

    /// The program at `index` (from [`VideoPrograms::index`]).
    pub(super) fn get(&self, index: usize) -> &VideoProgram {
        &self.compiled[index]
    }
}

impl VideoProgram {
    /// Draws with this program from now on.
    ///
    /// # Safety
    /// The context it was compiled in is current on this thread.
    pub(super) unsafe fn use_program(&self, gl: &glow::Context) {
        gl.use_program(Some(self.program));
    }

    /// Points the sampler of plane `i` at texture unit `i`.
    ///
    /// # Safety
    /// As [`VideoProgram::use_program`], and the program in use.
    pub(super) unsafe fn set_sampler(&self, gl: &glow::Context, i: usize) {
        gl.uniform_1_i32(self.tex[i].as_ref(), i as i32);
    }

    /// Sets the picture's colour (the YUV→RGB matrix and offset of `colour`), its texel size
    /// (`width`x`height`) and, when given, the late warp.
    ///
    /// # Safety
    /// As [`VideoProgram::set_sampler`].
    pub(super) unsafe fn set_picture(
        &self,
        gl: &glow::Context,
        colour: Colorimetry,
        width: u32,
        height: u32,
        warp: Option<Warp>,
    ) {
        let (yuv, offset) = yuv_to_rgb(colour);
        gl.uniform_matrix_3_f32_slice(self.yuv.as_ref(), false, &yuv.to_cols_array());
        gl.uniform_3_f32(self.offset.as_ref(), offset[0], offset[1], offset[2]);
        gl.uniform_2_f32(self.texel.as_ref(), 1.0 / width as f32, 1.0 / height as f32);
        if let Some(w) = warp {
            let t = w.fov.tan_half();
            gl.uniform_matrix_3_f32_slice(self.rot.as_ref(), false, &w.rotation().to_cols_array());
            gl.uniform_2_f32(self.tan.as_ref(), t.x, t.y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yuv_matrices_match_the_standards() {
        let (m, off) = yuv_to_rgb(Colorimetry {
            matrix: YuvMatrix::Bt601,
            full_range: false,
        });
        // Limited-range white and black.
        let white = m * (glam::Vec3::new(235.0, 128.0, 128.0) / 255.0 - glam::Vec3::from(off));
        assert!(
            (white - glam::Vec3::ONE).abs().max_element() < 1e-4,
            "{white}"
        );
        let black = m * (glam::Vec3::new(16.0, 128.0, 128.0) / 255.0 - glam::Vec3::from(off));
        assert!(black.abs().max_element() < 1e-4, "{black}");
        // BT.601 full-range pure red: Y = 0.299, Cr at its maximum.
        let (m, off) = yuv_to_rgb(Colorimetry {
            matrix: YuvMatrix::Bt601,
            full_range: true,
        });
        let red = m * (glam::Vec3::new(0.299, 0.5 - 0.168736, 1.0) - glam::Vec3::from(off));
        assert!(
            (red - glam::Vec3::new(1.0, 0.0, 0.0)).abs().max_element() < 0.01,
            "{red}"
        );
        // BT.709 full range: Y = 0.2126 for red.
        let (m, off) = yuv_to_rgb(Colorimetry {
            matrix: YuvMatrix::Bt709,
            full_range: true,
        });
        let red = m * (glam::Vec3::new(0.2126, 0.5 - 0.114572, 1.0) - glam::Vec3::from(off));
        assert!(
            (red - glam::Vec3::new(1.0, 0.0, 0.0)).abs().max_element() < 0.01,
            "{red}"
        );
    }
}
