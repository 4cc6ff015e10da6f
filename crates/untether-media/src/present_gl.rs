//! The GPU presenter: OpenGL ES 3 through SDL2's GL context, called through `glow`.
//!
//! Each decoded plane is uploaded into its own single-channel texture (made once per picture
//! size and format, then refilled with `glTexSubImage2D`, the plane's stride given as
//! `GL_UNPACK_ROW_LENGTH`: no CPU copy or conversion). One shader pass does the rest:
//! YUV→RGB with the stream's matrix and range (BT.601/BT.709, limited/full) or GBR as is, and
//! in VR mode, per eye of the side-by-side picture, the lens pre-distortion (radial polynomial,
//! a sample per colour channel for the chromatic-aberration correction) and before it the late
//! warp (a rotation homography; pixels from outside the rendered picture are black), both
//! evaluated per vertex of a distortion mesh ([`crate::mesh`]: 64 × 64 cells per eye, the warp
//! in the vertex shader from the pose of the draw) and interpolated by the GPU. The
//! statistics overlay is a second, alpha-blended textured quad, its texture refilled only when
//! its text changed. Vsync is asked for (`SDL_GL_SetSwapInterval(1)`) and the log says what
//! the display gave.
//!
//! Outside VR the picture is shown letterboxed at its aspect in a resizable window.

use glow::HasContext;
use sdl2::video::{GLContext, GLProfile, SwapInterval, Window};
use sdl2::EventPump;

use crate::codec::{Colorimetry, DecodedFrame, PictureFormat, YuvMatrix};
use crate::lens::LensProfile;
use crate::mesh::{self, DistortionMesh};
use crate::overlay::{OverlayModel, RgbaImage};
use crate::present::{Presenter, WindowEvent, WindowSpec};
use crate::warp::Warp;
use crate::window::{self, sdl_err};
use crate::zero_copy::{EglSupport, GpuImport};
use crate::{MediaError, Result};

mod overlay;
mod shaders;

use overlay::GlOverlay;
pub use shaders::yuv_to_rgb;
use shaders::{Variant, VideoPrograms};

/// One plane of a picture format as a texture: its size divisors, GL internal format and
/// format, bytes per texel.
#[derive(Clone, Copy, Debug)]
struct PlaneSpec {
    div_w: u32,
    div_h: u32,
    internal: u32,
    format: u32,
    bytes: usize,
}

const R8: PlaneSpec = PlaneSpec {
    div_w: 1,
    div_h: 1,
    internal: glow::R8,
    format: glow::RED,
    bytes: 1,
};
const R8_HALF: PlaneSpec = PlaneSpec {
    div_w: 2,
    div_h: 2,
    ..R8
};
const RG8_HALF: PlaneSpec = PlaneSpec {
    div_w: 2,
    div_h: 2,
    internal: glow::RG8,
    format: glow::RG,
    bytes: 2,
};
/// NV12's textures: what a zero-copy import fills.
const NV12: [PlaneSpec; 2] = [R8, RG8_HALF];

/// The textures a picture format is uploaded into, and whether the shader reads them as G, B,
/// R (else Y, U, V). A new format (NV12: R8 + RG8 at half size) is one more arm here and one
/// shader variant.
fn plane_specs(format: PictureFormat) -> (&'static [PlaneSpec], bool) {
    match format {
        PictureFormat::I420 => (&[R8, R8_HALF, R8_HALF], false),
        PictureFormat::Gbrp => (&[R8, R8, R8], true),
    }
}

/// The picture currently in the textures.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Loaded {
    format: PictureFormat,
    /// In the NV12 textures, imported without a copy.
    nv12: bool,
    width: u32,
    height: u32,
    colour: Colorimetry,
}

/// The GPU presenter. Create and use it on one thread.
pub struct GlPresenter {
    gl: glow::Context,
    /// The video shader's variants compiled so far.
    programs: VideoPrograms,
    vao: glow::VertexArray,
    /// VR's distortion mesh, made for the eye viewport and picture aspects it holds.
    mesh: Option<MeshBuffers>,
    planes: Vec<glow::Texture>,
    /// The planes' sampling filter (NEAREST or LINEAR; 0: not set since they were made).
    filter: u32,
    /// A software GL (llvmpipe, softpipe, SwiftShader): samples nearest, never bilinear.
    software: bool,
    loaded: Option<Loaded>,
    lens: Option<LensProfile>,
    warp: Option<Warp>,
    /// The statistics overlay.
    overlay: GlOverlay,
    /// The window row (y, width) [`Presenter::read_row`] asks for, read back from each new
    /// picture's back buffer before the swap (after it, the back buffer is undefined).
    row_request: Option<(u32, u32)>,
    /// That row of the last picture presented, BGRA.
    row: Option<Vec<u8>>,
    vsync: bool,
    renderer: String,
    /// What the EGL display offers for importing decoded pictures without a copy.
    egl: EglSupport,
    /// The zero-copy import of pictures a hardware decoder left on the GPU, or why not.
    gpu_import: GpuImport,
    // Drop order: the context before the window, the window before SDL.
    _context: GLContext,
    window: Window,
    events: EventPump,
    video_sys: sdl2::VideoSubsystem,
    sdl: sdl2::Sdl,
}

/// The distortion mesh in GL buffers.
struct MeshBuffers {
    vao: glow::VertexArray,
    vbo: glow::Buffer,
    ibo: glow::Buffer,
    indices: i32,
    /// (eye viewport height / width, eye picture height / width) it was made for.
    aspects: (f32, f32),
}

fn gl_err(what: &str) -> impl Fn(String) -> MediaError + '_ {
    move |e| MediaError::Display(format!("GL {what}: {e}"))
}

impl GlPresenter {
    /// A window with an OpenGL ES 3.0 context for `spec`.
    pub fn open(spec: &WindowSpec) -> Result<GlPresenter> {
        let (sdl, video_sys) = window::init_video()?;
        let attr = video_sys.gl_attr();
        attr.set_context_profile(GLProfile::GLES);
        attr.set_context_version(3, 0);
        attr.set_double_buffer(true);
        let mut wb = video_sys.window(&spec.title, spec.width, spec.height);
        wb.position_centered().opengl().resizable();
        if spec.fullscreen {
            wb.fullscreen_desktop();
        }
        let window = wb
            .build()
            .map_err(|e| MediaError::Display(format!("SDL GL window: {e}")))?;
        let context = window
            .gl_create_context()
            .map_err(sdl_err("OpenGL ES 3 context"))?;
        window
            .gl_make_current(&context)
            .map_err(sdl_err("GL make current"))?;
        // SAFETY: the context is current on this thread; SDL returns GL entry points (or
        // null, which glow treats as missing).
        let gl = unsafe {
            glow::Context::from_loader_function(|name| {
                video_sys.gl_get_proc_address(name) as *const _
            })
        };
        let vsync = match video_sys.gl_set_swap_interval(SwapInterval::VSync) {
            Ok(()) => video_sys.gl_get_swap_interval() == SwapInterval::VSync,
            Err(e) => {
                log::info!("GL presenter: no vsync on this display ({e})");
                false
            }
        };
        // SAFETY: the context is current; everything below is plain GL object setup.
        let (renderer, version, overlay, vao) = unsafe {
            let version = gl.get_parameter_string(glow::VERSION);
            if !version.starts_with("OpenGL ES 3") {
                return Err(MediaError::Display(format!(
                    "got {version:?}, not OpenGL ES 3"
                )));
            }
            let renderer = gl.get_parameter_string(glow::RENDERER);
            let overlay = GlOverlay::new(&gl)?;
            let vao = gl.create_vertex_array().map_err(gl_err("vertex array"))?;
            (renderer, version, overlay, vao)
        };
        let software = ["llvmpipe", "softpipe", "swrast", "SwiftShader"]
            .iter()
            .any(|s| renderer.contains(s));
        log::info!(
            "GL presenter: {version}, {renderer}{}; vsync {}{}",
            if software {
                " (software: nearest sampling, bilinear costs ~5× there)"
            } else {
                ""
            },
            if vsync { "on" } else { "off" },
            match &spec.vr {
                Some(l) => format!("; VR: side-by-side stereo, lens profile {:?}", l.name),
                None => String::new(),
            }
        );
        let events = sdl.event_pump().map_err(sdl_err("SDL events"))?;
        // With the context current: can decoded dma-bufs be imported (zero_copy.rs)?
        let egl = crate::zero_copy::probe_egl();
        let mut p = GlPresenter {
            gl,
            programs: VideoPrograms::new(),
            vao,
            mesh: None,
            planes: Vec::new(),
            filter: 0,
            software,
            loaded: None,
            lens: spec.vr.clone(),
            warp: None,
            overlay,
            row_request: None,
            row: None,
            vsync,
            renderer,
            egl,
            gpu_import: GpuImport::default(),
            _context: context,
            window,
            events,
            video_sys,
            sdl,
        };
        // Compile what this window will draw now: a shader that does not build fails here,
        // where `--presenter auto` can still fall back, not at the first picture.
        let vr = spec.vr.is_some();
        let chroma = spec.vr.as_ref().is_some_and(|l| l.chromatic != [1.0; 3]);
        p.programs.index(
            &p.gl,
            Variant {
                gbr: false,
                nv12: false,
                vr,
                chroma,
                warp: false,
            },
        )?;
        if vr {
            p.programs.index(
                &p.gl,
                Variant {
                    gbr: false,
                    nv12: false,
                    vr,
                    chroma,
                    warp: true,
                },
            )?;
        }
        // A black window until the first picture.
        p.clear_and_swap();
        Ok(p)
    }

    /// Whether the display gave vsync.
    pub fn vsync(&self) -> bool {
        self.vsync
    }

    /// GL_RENDERER (e.g. "llvmpipe (LLVM 15.0.6, 256 bits)").
    pub fn renderer(&self) -> &str {
        &self.renderer
    }

    fn clear_and_swap(&mut self) {
        // SAFETY: the context is current on this thread.
        unsafe {
            self.gl.clear_color(0.0, 0.0, 0.0, 1.0);
            self.gl.clear(glow::COLOR_BUFFER_BIT);
        }
        self.window.gl_swap_window();
    }

    /// Uploads the picture's planes into the textures (made again only when the format or
    /// size changed).
    fn upload(&mut self, picture: &DecodedFrame) -> Result<()> {
        let (w, h, format) = (picture.width(), picture.height(), picture.format());
        let (specs, _) = plane_specs(format);
        let colour = match format {
            PictureFormat::I420 => picture.colorimetry(),
            // Not used for GBR.
            PictureFormat::Gbrp => Colorimetry {
                matrix: YuvMatrix::Bt601,
                full_range: true,
            },
        };
        let same = self
            .loaded
            .is_some_and(|l| !l.nv12 && l.format == format && l.width == w && l.height == h);
        // SAFETY: the context is current; every slice handed to GL holds rows × stride bytes
        // (`DecodedFrame::plane`) and GL reads (height − 1) × row length + width texels.
        unsafe {
            if !same {
                self.make_textures(specs, w, h)?;
            }
            let gl = &self.gl;
            gl.pixel_store_i32(glow::UNPACK_ALIGNMENT, 1);
            for (i, (s, t)) in specs.iter().zip(&self.planes).enumerate() {
                let (data, stride) = picture.plane(i);
                let (pw, ph) = (w.div_ceil(s.div_w), h.div_ceil(s.div_h));
                let needed = stride * (ph as usize - 1) + pw as usize * s.bytes;
                if stride % s.bytes != 0 || data.len() < needed {
                    return Err(MediaError::Display(format!(
                        "plane {i}: {} bytes at stride {stride} cannot hold {pw}x{ph}",
                        data.len()
                    )));
                }
                gl.bind_texture(glow::TEXTURE_2D, Some(*t));
                gl.pixel_store_i32(glow::UNPACK_ROW_LENGTH, (stride / s.bytes) as i32);
                gl.tex_sub_image_2d(
                    glow::TEXTURE_2D,
                    0,
                    0,
                    0,
                    pw as i32,
                    ph as i32,
                    s.format,
                    glow::UNSIGNED_BYTE,
                    glow::PixelUnpackData::Slice(Some(&data[..needed])),
                );
            }
            gl.pixel_store_i32(glow::UNPACK_ROW_LENGTH, 0);
        }
        self.gpu_import.release();
        self.loaded = Some(Loaded {
            format,
            nv12: false,
            width: w,
            height: h,
            colour,
        });
        Ok(())
    }

    /// Makes `specs`' textures for a `w`×`h` picture (the old ones deleted).
    ///
    /// # Safety
    /// The context is current on this thread.
    unsafe fn make_textures(&mut self, specs: &[PlaneSpec], w: u32, h: u32) -> Result<()> {
        let gl = &self.gl;
        self.filter = 0;
        for t in self.planes.drain(..) {
            gl.delete_texture(t);
        }
        for s in specs {
            let t = gl.create_texture().map_err(gl_err("texture"))?;
            gl.bind_texture(glow::TEXTURE_2D, Some(t));
            for (p, v) in [
                (glow::TEXTURE_MIN_FILTER, glow::LINEAR),
                (glow::TEXTURE_MAG_FILTER, glow::LINEAR),
                (glow::TEXTURE_WRAP_S, glow::CLAMP_TO_EDGE),
                (glow::TEXTURE_WRAP_T, glow::CLAMP_TO_EDGE),
            ] {
                gl.tex_parameter_i32(glow::TEXTURE_2D, p, v as i32);
            }
            gl.tex_image_2d(
                glow::TEXTURE_2D,
                0,
                s.internal as i32,
                w.div_ceil(s.div_w) as i32,
                h.div_ceil(s.div_h) as i32,
                0,
                s.format,
                glow::UNSIGNED_BYTE,
                glow::PixelUnpackData::Slice(None),
            );
            self.planes.push(t);
        }
        Ok(())
    }

    /// Loads a picture: one a hardware decoder left on the GPU is imported into the NV12
    /// textures without a copy ([`crate::zero_copy`]), or downloaded when that cannot run
    /// (said once); any other is uploaded.
    fn load(&mut self, picture: &DecodedFrame) -> Result<()> {
        if picture.gpu().is_none() {
            return self.upload(picture);
        }
        if self.gpu_import.off_reason().is_none() {
            let (w, h) = (picture.width(), picture.height());
            let same = self
                .loaded
                .is_some_and(|l| l.nv12 && l.width == w && l.height == h);
            // SAFETY: the context is current on this thread; the textures are its own and
            // `bind` binds them.
            let imported = unsafe {
                if !same {
                    self.make_textures(&NV12, w, h)?;
                }
                let tex = [self.planes[0], self.planes[1]];
                let gl = &self.gl;
                self.gpu_import
                    .import(picture, [tex[0].0.get(), tex[1].0.get()], |i| {
                        gl.bind_texture(glow::TEXTURE_2D, Some(tex[i]))
                    })
            };
            if imported {
                self.loaded = Some(Loaded {
                    format: PictureFormat::I420,
                    nv12: true,
                    width: w,
                    height: h,
                    colour: picture.colorimetry(),
                });
                return Ok(());
            }
            // The NV12 textures may hold a failed import: made again for the upload.
            self.loaded = None;
        }
        self.upload(&picture.download()?)
    }

    /// Fills the NV12 textures from system memory (Y: `width` bytes a row, UV: `width`
    /// bytes a row of U, V pairs at half height) and shows them: the textures and shader
    /// variant both zero-copy paths draw with, checked where no GPU can import (tests).
    pub fn present_nv12(&mut self, y: &[u8], uv: &[u8], width: u32, height: u32) -> Result<()> {
        let (w, h) = (width, height);
        let (cw, ch) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
        if y.len() < (w * h) as usize || uv.len() < 2 * cw * ch {
            return Err(MediaError::Display(format!(
                "NV12 {w}x{h}: {} + {} bytes is too little",
                y.len(),
                uv.len()
            )));
        }
        // SAFETY: the context is current; the slices hold what GL reads (checked above).
        unsafe {
            self.make_textures(&NV12, w, h)?;
            let gl = &self.gl;
            gl.pixel_store_i32(glow::UNPACK_ALIGNMENT, 1);
            for (i, (data, pw, ph, format)) in [
                (y, w as i32, h as i32, glow::RED),
                (uv, cw as i32, ch as i32, glow::RG),
            ]
            .into_iter()
            .enumerate()
            {
                gl.bind_texture(glow::TEXTURE_2D, Some(self.planes[i]));
                gl.tex_sub_image_2d(
                    glow::TEXTURE_2D,
                    0,
                    0,
                    0,
                    pw,
                    ph,
                    format,
                    glow::UNSIGNED_BYTE,
                    glow::PixelUnpackData::Slice(Some(data)),
                );
            }
        }
        self.loaded = Some(Loaded {
            format: PictureFormat::I420,
            nv12: true,
            width: w,
            height: h,
            colour: Colorimetry {
                matrix: YuvMatrix::Bt601,
                full_range: false,
            },
        });
        self.draw()?;
        self.window.gl_swap_window();
        Ok(())
    }

    /// Why pictures left on the GPU are downloaded (None: zero-copy has not failed), and how
    /// many were imported without a copy.
    pub fn zero_copy_state(&self) -> (Option<&str>, u64) {
        (self.gpu_import.off_reason(), self.gpu_import.imported())
    }

    /// Draws the loaded picture (and the overlay) into the back buffer; false: nothing loaded.
    fn draw(&mut self) -> Result<bool> {
        let Some(l) = self.loaded else {
            return Ok(false);
        };
        let (specs, gbr) = if l.nv12 {
            (&NV12[..], false)
        } else {
            plane_specs(l.format)
        };
        let vr = self.lens.is_some();
        let (dw, dh) = self.window.drawable_size();
        // Outside VR: the picture at its aspect, black bars around. In VR: each half of the
        // window is an eye's viewport.
        let (vx, vy, vw, vh) = if vr {
            (0, 0, dw as i32, dh as i32)
        } else {
            window::letterbox(dw, dh, l.width, l.height)
        };
        let warp = self.warp.filter(|w| vr && w.fov.is_valid());
        let chroma = self.lens.as_ref().is_some_and(|l| l.chromatic != [1.0; 3]);
        let index = self.programs.index(
            &self.gl,
            Variant {
                gbr,
                nv12: l.nv12,
                vr,
                chroma,
                warp: warp.is_some(),
            },
        )?;
        // Sample exactly at 1:1 (each output pixel on a texel centre), bilinearly when the
        // picture is scaled or distorted, except on a software GL where bilinear costs ~5×.
        let one_to_one = !vr && vw as u32 == l.width && vh as u32 == l.height;
        let filter = if one_to_one || self.software {
            glow::NEAREST
        } else {
            glow::LINEAR
        };
        let mesh_vao = if vr {
            // Each eye's viewport and picture are half as wide.
            let view_aspect = vh as f32 / (vw as f32 / 2.0).max(1.0);
            let pic_aspect = l.height as f32 / (l.width as f32 / 2.0).max(1.0);
            Some(self.mesh_for(view_aspect, pic_aspect)?)
        } else {
            None
        };
        let gl = &self.gl;
        let vp = self.programs.get(index);
        // SAFETY: the context is current; the program, textures and VAO are this context's.
        unsafe {
            gl.viewport(0, 0, dw as i32, dh as i32);
            gl.clear_color(0.0, 0.0, 0.0, 1.0);
            gl.clear(glow::COLOR_BUFFER_BIT);
            // GL's y runs upwards: the letterbox's top margin is its bottom one too.
            gl.viewport(vx, dh as i32 - vy - vh, vw, vh);
            vp.use_program(gl);
            gl.bind_vertex_array(Some(mesh_vao.map_or(self.vao, |m| m.0)));
            for (i, t) in self.planes.iter().enumerate().take(specs.len()) {
                gl.active_texture(glow::TEXTURE0 + i as u32);
                gl.bind_texture(glow::TEXTURE_2D, Some(*t));
                if self.filter != filter {
                    gl.tex_parameter_i32(glow::TEXTURE_2D, glow::TEXTURE_MIN_FILTER, filter as i32);
                    gl.tex_parameter_i32(glow::TEXTURE_2D, glow::TEXTURE_MAG_FILTER, filter as i32);
                }
                vp.set_sampler(gl, i);
            }
            vp.set_picture(gl, l.colour, l.width, l.height, warp);
            match mesh_vao {
                Some((_, n)) => gl.draw_elements(glow::TRIANGLES, n, glow::UNSIGNED_SHORT, 0),
                None => gl.draw_arrays(glow::TRIANGLES, 0, 3),
            }
            self.filter = filter;
        }
        self.overlay
            .draw(&self.gl, self.vao, self.lens.is_some(), dw, dh);
        Ok(true)
    }

    /// The distortion mesh's vertex array (and index count) for these aspects, made again
    /// only when they changed (the window or the picture was resized).
    fn mesh_for(&mut self, view_aspect: f32, pic_aspect: f32) -> Result<(glow::VertexArray, i32)> {
        let aspects = (view_aspect, pic_aspect);
        if let Some(m) = self.mesh.as_ref().filter(|m| m.aspects == aspects) {
            return Ok((m.vao, m.indices));
        }
        let Some(lens) = &self.lens else {
            return Err(MediaError::Display("GL: a VR mesh without a lens".into()));
        };
        let mesh = DistortionMesh::new(lens, mesh::CELLS, view_aspect, pic_aspect);
        let gl = &self.gl;
        let bytes: Vec<u8> = mesh.vertices.iter().flat_map(|f| f.to_ne_bytes()).collect();
        let index_bytes: Vec<u8> = mesh.indices.iter().flat_map(|i| i.to_ne_bytes()).collect();
        // SAFETY: the context is current; the buffers and vertex array are made here and
        // described by the layout DistortionMesh documents.
        let m = unsafe {
            let (vao, vbo, ibo) = match self.mesh.take() {
                Some(old) => (old.vao, old.vbo, old.ibo),
                None => (
                    gl.create_vertex_array()
                        .map_err(gl_err("mesh vertex array"))?,
                    gl.create_buffer().map_err(gl_err("mesh vertices"))?,
                    gl.create_buffer().map_err(gl_err("mesh indices"))?,
                ),
            };
            gl.bind_vertex_array(Some(vao));
            gl.bind_buffer(glow::ARRAY_BUFFER, Some(vbo));
            gl.buffer_data_u8_slice(glow::ARRAY_BUFFER, &bytes, glow::STATIC_DRAW);
            gl.bind_buffer(glow::ELEMENT_ARRAY_BUFFER, Some(ibo));
            gl.buffer_data_u8_slice(glow::ELEMENT_ARRAY_BUFFER, &index_bytes, glow::STATIC_DRAW);
            let stride = (mesh::FLOATS_PER_VERTEX * 4) as i32;
            // a_pos, a_eye, a_r, a_g, a_b.
            for (loc, size, offset) in [(0, 2, 0), (1, 1, 2), (2, 2, 3), (3, 2, 5), (4, 2, 7)] {
                gl.enable_vertex_attrib_array(loc);
                gl.vertex_attrib_pointer_f32(loc, size, glow::FLOAT, false, stride, offset * 4);
            }
            gl.bind_vertex_array(None);
            MeshBuffers {
                vao,
                vbo,
                ibo,
                indices: mesh.indices.len() as i32,
                aspects,
            }
        };
        let out = (m.vao, m.indices);
        self.mesh = Some(m);
        Ok(out)
    }

    /// Draws only the overlay (when shown) into the back buffer, as every frame does after
    /// the picture, and waits for GL: what the overlay costs a frame. For benchmarks.
    pub fn draw_overlay_only(&mut self) {
        let (dw, dh) = self.window.drawable_size();
        self.overlay
            .draw(&self.gl, self.vao, self.lens.is_some(), dw, dh);
        self.finish();
    }

    /// Draws the current picture and overlay into the back buffer and reads it back (top row
    /// first, RGBA), without showing it: what the window would show next. For tests.
    pub fn snapshot(&mut self) -> Result<Option<RgbaImage>> {
        if !self.draw()? {
            return Ok(None);
        }
        let (w, h) = self.window.drawable_size();
        let mut data = vec![0u8; (w * h * 4) as usize];
        // SAFETY: the context is current; `data` holds w × h RGBA texels.
        unsafe {
            self.gl.pixel_store_i32(glow::PACK_ALIGNMENT, 1);
            self.gl.read_pixels(
                0,
                0,
                w as i32,
                h as i32,
                glow::RGBA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::Slice(Some(&mut data)),
            );
        }
        // GL's rows run bottom-up.
        let row = (w * 4) as usize;
        let mut flipped = Vec::with_capacity(data.len());
        for r in data.chunks_exact(row).rev() {
            flipped.extend_from_slice(r);
        }
        Ok(Some(RgbaImage {
            width: w,
            height: h,
            data: flipped,
        }))
    }

    /// Row `y` (from the top) of the back buffer, `width` pixels from the left, as BGRA; None
    /// when it lies outside the drawable.
    fn read_back_row(&self, y: u32, width: u32) -> Option<Vec<u8>> {
        let (dw, dh) = self.window.drawable_size();
        if y >= dh || width == 0 || width > dw {
            return None;
        }
        let mut data = vec![0u8; width as usize * 4];
        // SAFETY: the context is current; `data` holds `width` RGBA texels.
        unsafe {
            self.gl.pixel_store_i32(glow::PACK_ALIGNMENT, 1);
            self.gl.read_pixels(
                0,
                // GL's rows run bottom-up.
                (dh - 1 - y) as i32,
                width as i32,
                1,
                glow::RGBA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::Slice(Some(&mut data)),
            );
        }
        for px in data.chunks_exact_mut(4) {
            px.swap(0, 2);
        }
        Some(data)
    }

    /// Waits until GL has finished everything queued (for timing in benchmarks).
    pub fn finish(&self) {
        // SAFETY: the context is current.
        unsafe { self.gl.finish() };
    }

    /// The window's drawable size in pixels.
    pub fn drawable_size(&self) -> (u32, u32) {
        self.window.drawable_size()
    }

    /// The SDL video subsystem (for tests that need it).
    pub fn video_subsystem(&self) -> &sdl2::VideoSubsystem {
        &self.video_sys
    }
}

impl Presenter for GlPresenter {
    fn kind(&self) -> &'static str {
        "gl"
    }

    fn present(&mut self, picture: &DecodedFrame) -> Result<()> {
        self.load(picture)?;
        self.draw()?;
        self.row = self.row_request.and_then(|(y, w)| self.read_back_row(y, w));
        self.window.gl_swap_window();
        Ok(())
    }

    fn present_warped(
        &mut self,
        picture: &DecodedFrame,
        warp: &mut dyn FnMut() -> Option<Warp>,
    ) -> Result<()> {
        self.load(picture)?;
        // The pose as late as the presenter can take it: after the upload, right before the
        // draw.
        self.warp = warp();
        self.draw()?;
        self.row = self.row_request.and_then(|(y, w)| self.read_back_row(y, w));
        self.window.gl_swap_window();
        Ok(())
    }

    fn read_row(&mut self, y: u32, width: u32) -> Option<Vec<u8>> {
        if self.row_request != Some((y, width)) {
            // Asked for the first time (or another row): read from the next picture on.
            self.row_request = Some((y, width));
            return None;
        }
        self.row.take()
    }

    fn redraw(&mut self) -> Result<bool> {
        if !self.draw()? {
            return Ok(false);
        }
        self.window.gl_swap_window();
        Ok(true)
    }

    fn poll_events(&mut self) -> Vec<WindowEvent> {
        window::poll_events(&mut self.events)
    }

    fn set_title(&mut self, title: &str) {
        window::set_title(&mut self.window, title);
    }

    fn set_warp(&mut self, warp: Option<Warp>) {
        self.warp = warp;
    }

    fn egl_support(&self) -> Option<EglSupport> {
        Some(self.egl.clone())
    }

    fn takes_gpu_pictures(&self) -> bool {
        true
    }

    fn set_overlay(&mut self, overlay: Option<&OverlayModel>) -> Result<()> {
        let (_, dh) = self.window.drawable_size();
        self.overlay.set(&self.gl, overlay, dh)
    }

    fn set_fullscreen(&mut self, on: bool) -> Result<()> {
        window::set_fullscreen(&mut self.window, on)
    }

    fn set_mouse_captured(&mut self, on: bool) {
        window::set_mouse_captured(&self.sdl, on);
    }
}
