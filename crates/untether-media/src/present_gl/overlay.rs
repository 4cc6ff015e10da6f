//! The statistics overlay in GL: its program, its texture (refilled only when its text
//! changed), and its alpha-blended quad over the picture, once per eye in VR.

use glow::HasContext;

use super::gl_err;
use super::shaders::{program, VERTEX_SHADER};
use crate::overlay::{OverlayModel, RgbaImage, TextRaster};
use crate::present::{OVERLAY_MARGIN, OVERLAY_PX};
use crate::Result;

const OVERLAY_SHADER: &str = include_str!("../shaders/overlay.frag");

/// The overlay: its program, its text raster and texture, and whether it is shown.
pub(super) struct GlOverlay {
    program: glow::Program,
    loc: Option<glow::UniformLocation>,
    raster: Option<TextRaster>,
    tex: Option<(glow::Texture, u32, u32)>,
    on: bool,
}

impl GlOverlay {
    /// Compiles the overlay's program; the overlay is hidden.
    ///
    /// # Safety
    /// A current GL context on this thread.
    pub(super) unsafe fn new(gl: &glow::Context) -> Result<GlOverlay> {
        let overlay_src = format!("#version 300 es\n{OVERLAY_SHADER}");
        let program = program(gl, VERTEX_SHADER, &overlay_src, "overlay")?;
        let loc = gl.get_uniform_location(program, "u_overlay");
        Ok(GlOverlay {
            program,
            loc,
            raster: None,
            tex: None,
            on: false,
        })
    }

    /// Shows `overlay` (None: hides it), its text sized for a back buffer `drawable_height`
    /// pixels high (a new raster when that changed).
    pub(super) fn set(
        &mut self,
        gl: &glow::Context,
        overlay: Option<&OverlayModel>,
        drawable_height: u32,
    ) -> Result<()> {
        let Some(model) = overlay else {
            self.on = false;
            return Ok(());
        };
        self.on = true;
        // Text sized for the output (a new raster when the window changed size).
        let px = crate::overlay::text_px_for(drawable_height, OVERLAY_PX);
        if self.raster.as_ref().is_none_or(|r| r.px() != px) {
            self.raster = Some(TextRaster::new(px)?);
        }
        let Some(mut raster) = self.raster.take() else {
            return Ok(());
        };
        let result = if raster.update(&model.lines()) {
            self.upload(gl, raster.image())
        } else {
            Ok(())
        };
        self.raster = Some(raster);
        result
    }

    fn upload(&mut self, gl: &glow::Context, img: &RgbaImage) -> Result<()> {
        // SAFETY: the context is current; the image holds width × height × 4 bytes.
        unsafe {
            let fits = matches!(self.tex, Some((_, w, h)) if w == img.width && h == img.height);
            if !fits {
                if let Some((t, ..)) = self.tex.take() {
                    gl.delete_texture(t);
                }
                let t = gl.create_texture().map_err(gl_err("overlay texture"))?;
                gl.bind_texture(glow::TEXTURE_2D, Some(t));
                for (p, v) in [
                    (glow::TEXTURE_MIN_FILTER, glow::NEAREST),
                    (glow::TEXTURE_MAG_FILTER, glow::NEAREST),
                    (glow::TEXTURE_WRAP_S, glow::CLAMP_TO_EDGE),
                    (glow::TEXTURE_WRAP_T, glow::CLAMP_TO_EDGE),
                ] {
                    gl.tex_parameter_i32(glow::TEXTURE_2D, p, v as i32);
                }
                gl.tex_image_2d(
                    glow::TEXTURE_2D,
                    0,
                    glow::RGBA8 as i32,
                    img.width as i32,
                    img.height as i32,
                    0,
                    glow::RGBA,
                    glow::UNSIGNED_BYTE,
                    glow::PixelUnpackData::Slice(None),
                );
                self.tex = Some((t, img.width, img.height));
            }
            if let Some((t, ..)) = self.tex {
                gl.bind_texture(glow::TEXTURE_2D, Some(t));
                gl.pixel_store_i32(glow::UNPACK_ALIGNMENT, 1);
                gl.tex_sub_image_2d(
                    glow::TEXTURE_2D,
                    0,
                    0,
                    0,
                    img.width as i32,
                    img.height as i32,
                    glow::RGBA,
                    glow::UNSIGNED_BYTE,
                    glow::PixelUnpackData::Slice(Some(&img.data)),
                );
            }
        }
        Ok(())
    }

    /// When shown, the overlay's quad (twice in `vr`) over whatever is in the `dw`x`dh` back
    /// buffer, drawn with the full-screen triangle's vertex array `vao`.
    pub(super) fn draw(
        &self,
        gl: &glow::Context,
        vao: glow::VertexArray,
        vr: bool,
        dw: u32,
        dh: u32,
    ) {
        if !self.on {
            return;
        }
        let Some((t, w, h)) = self.tex else {
            return;
        };
        // SAFETY: the context is current; the program, texture and VAO are this context's.
        unsafe {
            gl.enable(glow::BLEND);
            gl.blend_func(glow::SRC_ALPHA, glow::ONE_MINUS_SRC_ALPHA);
            gl.use_program(Some(self.program));
            gl.bind_vertex_array(Some(vao));
            gl.active_texture(glow::TEXTURE0);
            gl.bind_texture(glow::TEXTURE_2D, Some(t));
            gl.uniform_1_i32(self.loc.as_ref(), 0);
            for (x, y) in spots(vr, dw, dh, w, h) {
                gl.viewport(x, y, w as i32, h as i32);
                gl.draw_arrays(glow::TRIANGLES, 0, 3);
            }
            gl.disable(glow::BLEND);
        }
    }
}

/// Where the overlay goes in a `dw`x`dh` back buffer, GL's bottom-left corners of its
/// `w`x`h` quad: its top-left corner outside VR; in VR once per eye, at the same place in
/// each (centred across, a quarter down: inside what the lens shows, seen by both eyes as
/// one panel).
fn spots(vr: bool, dw: u32, dh: u32, w: u32, h: u32) -> Vec<(i32, i32)> {
    let m = crate::overlay::margin_for(dh).max(OVERLAY_MARGIN);
    if !vr {
        return vec![(m, dh as i32 - m - h as i32)];
    }
    let eye_w = (dw / 2) as i32;
    let x = ((eye_w - w as i32) / 2).max(m);
    let y = (dh as i32 - dh as i32 / 4 - h as i32).max(m);
    vec![(x, y), (eye_w + x, y)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_sits_top_left_and_in_vr_at_one_place_in_each_eye() {
        // GL's y runs upwards: these are the quad's bottom-left corners.
        let m = crate::overlay::margin_for(720).max(OVERLAY_MARGIN);
        assert_eq!(spots(false, 1280, 720, 300, 100), vec![(m, 720 - m - 100)]);
        let s = spots(true, 2560, 1440, 400, 200);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1], (s[0].0 + 1280, s[0].1));
        // Centred across its eye, its top a quarter down.
        assert_eq!(s[0].0 + 400 / 2, 1280 / 2);
        assert_eq!(s[0].1 + 200, 1440 - 1440 / 4);
    }
}
