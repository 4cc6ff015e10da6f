//! Zero-copy from a hardware decoder to the GL presenter: which path a decoded picture can
//! take, decided once per session from what this machine has, with the one line that says
//! why when it is the software path (the picture downloaded to system memory and uploaded
//! again, as always before).
//!
//! The two paths (docs/ARCHITECTURE.md, "Zero-copy to the presenter"):
//! - **DMA-BUF → EGL image**: VA-API (or V4L2 M2M, DRM PRIME) pictures stay on the GPU as
//!   dma-bufs ([`crate::codec::DecoderConfig::keep_on_gpu`] gives their DRM PRIME descriptor);
//!   the presenter imports each plane with `EGL_EXT_image_dma_buf_import` and binds it to its
//!   texture (`glEGLImageTargetTexture2DOES`). Needs a render node, the EGL extension on the
//!   presenter's display, and the GLES entry point.
//! - **NVDEC → GL** (CUDA–GL interop): the CUDA picture copied device-to-device into GL
//!   textures registered with CUDA (`cuGraphicsGLRegisterImage`), libcuda dlopened so the
//!   binary builds and runs without it. Needs an NVIDIA device and libcuda.so.1.
//!
//! What is built: the probe of every requirement ([`probe_egl`] with the presenter's context
//! current, [`plan`]), both imports ([`egl_image`], [`cuda_gl`]) and [`GpuImport`], the
//! presenter's state that runs one and, at the first failure (extension missing, import
//! refused, libcuda absent), falls back to the software path for good with ONE log line
//! naming the reason. Tested without a GPU: the fallbacks, with a DRM PRIME picture on a
//! memfd ([`memfd`]) presented through them (Mesa 22.3's llvmpipe has no
//! `EGL_EXT_image_dma_buf_import`, so `eglCreateImageKHR` itself never ran here); not yet run
//! on real hardware.

pub mod cuda_gl;
pub mod egl_image;
pub mod memfd;

use std::ffi::{c_char, c_void, CStr};
use std::fmt;

use crate::codec::hw::{library_loads, nvidia_devices, render_nodes};
use crate::codec::{DecodedFrame, GpuPicture, HwAccel};

/// Why a zero-copy import cannot run (the presenter then takes the software path, naming it), or
/// why the `UNTETHER_ZERO_COPY` setting is not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZeroCopyError {
    /// `UNTETHER_ZERO_COPY` is neither `auto` nor `off`.
    #[error("UNTETHER_ZERO_COPY={0:?}: allowed values are auto (the default) and off")]
    Setting(String),
    /// The picture to import is in system memory.
    #[error("the picture is in system memory")]
    SystemMemory,
    /// A DRM PRIME picture without its descriptor.
    #[error("DMA-BUF: the picture has no DRM PRIME descriptor")]
    NoDrmPrime,
    /// A DRM PRIME layer that is not part of NV12.
    #[error("DMA-BUF: layer format {} with {planes} planes is not NV12 (R8 + GR88)", egl_image::fourcc_name(*.fourcc))]
    LayerFormat {
        /// The layer's DRM fourcc.
        fourcc: u32,
        /// Its number of planes.
        planes: usize,
    },
    /// A plane whose object index is not one of the descriptor's objects.
    #[error("DMA-BUF: plane object {0} out of range")]
    PlaneObject(i32),
    /// The layers do not add up to NV12's Y and UV planes.
    #[error("DMA-BUF: {planes} planes in {layers} layers, not NV12's Y and UV")]
    NotNv12 {
        /// Planes found.
        planes: usize,
        /// Layers in the descriptor.
        layers: usize,
    },
    /// libEGL.so.1 does not load.
    #[error("EGL: libEGL.so.1 does not load")]
    NoLibEgl,
    /// libEGL.so.1 lacks EGL 1.4's entry points.
    #[error("EGL: libEGL.so.1 lacks EGL 1.4's entry points")]
    EglEntryPoints,
    /// The presenter's GL context is not an EGL one.
    #[error("EGL: the presenter's GL context is not an EGL one (GLX)")]
    NotEgl,
    /// The EGL display lacks an extension the import needs.
    #[error("EGL: no {0}")]
    EglExtension(&'static str),
    /// No `eglCreateImageKHR` / `eglDestroyImageKHR`.
    #[error("EGL: no eglCreateImageKHR / eglDestroyImageKHR")]
    EglImageFunctions,
    /// No `glEGLImageTargetTexture2DOES`.
    #[error("GLES: no glEGLImageTargetTexture2DOES")]
    GlesImageTarget,
    /// `eglCreateImageKHR` refused a plane.
    #[error("EGL: eglCreateImageKHR of the {} plane ({width}x{height}, fd {fd}) failed: EGL error 0x{code:04x}", egl_image::fourcc_name(*.fourcc))]
    CreateImage {
        /// The plane's DRM fourcc.
        fourcc: u32,
        width: u32,
        height: u32,
        /// The dma-buf.
        fd: i32,
        /// `eglGetError()`.
        code: i32,
    },
    /// A CUDA picture without its planes.
    #[error("CUDA-GL: the picture has no CUDA planes")]
    NoCudaPlanes,
    /// libcuda does not load.
    #[error("CUDA-GL: {library} does not load (no NVIDIA driver){}", .dlerror.as_deref().map(|e| format!(": {e}")).unwrap_or_default())]
    NoLibcuda {
        /// The library name.
        library: String,
        /// `dlerror()`, when it said something.
        dlerror: Option<String>,
    },
    /// libcuda lacks an entry point.
    #[error("CUDA-GL: libcuda.so.1 has no {0}")]
    CudaSymbol(String),
    /// A CUDA call failed.
    #[error("CUDA-GL: {call} failed: {error}")]
    CudaCall {
        /// The call (`cuInit`, `cuGraphicsMapResources`, …).
        call: &'static str,
        /// CUDA's error name (`CUDA_ERROR_…`, or `error N`).
        error: String,
    },
    /// The imported picture cannot be held (a new reference to its frame): the
    /// [`crate::MediaError`]'s message.
    #[error("{0}")]
    Hold(String),
}

/// What the presenter's EGL display offers for importing dma-bufs (probed with its context
/// current).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EglSupport {
    /// `EGL_EXT_image_dma_buf_import`, `EGL_KHR_image_base` and
    /// `glEGLImageTargetTexture2DOES` are there.
    DmaBufImport,
    /// Not there, and why.
    Missing(String),
}

/// The path decoded pictures take to the presenter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZeroCopyPlan {
    /// Downloaded to system memory and uploaded (the software path), with the reasons the
    /// zero-copy paths cannot run here.
    SystemMemory(Vec<String>),
    /// DMA-BUF → EGL image (VA-API / DRM PRIME).
    DmaBuf,
    /// NVDEC → GL textures through CUDA–GL interop.
    CudaGl,
}

impl fmt::Display for ZeroCopyPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZeroCopyPlan::SystemMemory(why) => write!(
                f,
                "zero-copy to the presenter unavailable ({}); decoded pictures go through \
                 system memory",
                why.join("; ")
            ),
            ZeroCopyPlan::DmaBuf => write!(f, "zero-copy: DMA-BUF to EGL images"),
            ZeroCopyPlan::CudaGl => write!(f, "zero-copy: NVDEC to GL through CUDA-GL interop"),
        }
    }
}

/// The path for a session decoding with `hwaccel` into a presenter whose EGL display offers
/// `egl` (None: no GL presenter, e.g. headless or SDL's renderer).
pub fn plan(hwaccel: HwAccel, egl: Option<&EglSupport>) -> ZeroCopyPlan {
    let mut why = Vec::new();
    if hwaccel == HwAccel::None {
        return ZeroCopyPlan::SystemMemory(vec!["software decoding (--hwaccel none)".into()]);
    }
    let wants_dma = matches!(hwaccel, HwAccel::Auto | HwAccel::Vaapi | HwAccel::V4l2m2m);
    let wants_cuda = matches!(hwaccel, HwAccel::Auto | HwAccel::Cuda);
    match egl {
        None => why.push("no GL presenter".into()),
        Some(EglSupport::Missing(m)) if wants_dma => why.push(m.clone()),
        _ => {}
    }
    if wants_dma {
        if render_nodes().is_empty() {
            why.push("DMA-BUF: no render node /dev/dri/renderD*".into());
        } else if egl == Some(&EglSupport::DmaBufImport) {
            return ZeroCopyPlan::DmaBuf;
        }
    }
    if wants_cuda {
        if nvidia_devices().is_empty() {
            why.push("CUDA-GL: no NVIDIA device /dev/nvidia*".into());
        } else if !library_loads("libcuda.so.1") {
            why.push("CUDA-GL: libcuda.so.1 does not load".into());
        } else if egl.is_some() {
            return ZeroCopyPlan::CudaGl;
        }
    }
    if !wants_dma && !wants_cuda {
        why.push(format!("--hwaccel {hwaccel} has no zero-copy path"));
    }
    ZeroCopyPlan::SystemMemory(why)
}

/// Whether a session decoding with `hwaccel` should leave pictures on the GPU for a GL
/// presenter: a zero-copy path has its device here (the presenter still checks its EGL
/// display and falls back at the first failure). `UNTETHER_ZERO_COPY=off` keeps every
/// picture on the software path (to compare the two on one machine).
pub fn keep_on_gpu(hwaccel: HwAccel) -> std::result::Result<bool, ZeroCopyError> {
    if !setting()? {
        return Ok(false);
    }
    Ok(!matches!(
        plan(hwaccel, Some(&EglSupport::DmaBufImport)),
        ZeroCopyPlan::SystemMemory(_)
    ))
}

/// `UNTETHER_ZERO_COPY`: true for `auto` (the default, also when unset), false for `off`
/// (the decoder's pictures and the host's encoder input both go through system memory).
pub fn setting() -> std::result::Result<bool, ZeroCopyError> {
    match std::env::var("UNTETHER_ZERO_COPY").as_deref() {
        Ok("off") => Ok(false),
        Ok("auto") | Err(_) => Ok(true),
        Ok(other) => Err(ZeroCopyError::Setting(other.into())),
    }
}

/// The GL presenter's zero-copy state: the import that runs (made at the first picture left
/// on the GPU), or why pictures go through system memory.
#[derive(Default)]
pub struct GpuImport {
    dma_buf: Option<egl_image::EglImporter>,
    cuda: Option<cuda_gl::CudaGl>,
    /// Why zero-copy stopped (logged once, when it did).
    off: Option<String>,
    /// The picture the textures show now (its buffers stay alive while the GPU reads them).
    held: Option<DecodedFrame>,
    /// Pictures imported so far.
    imported: u64,
}

impl GpuImport {
    /// Why pictures go through system memory (None: zero-copy has not failed).
    pub fn off_reason(&self) -> Option<&str> {
        self.off.as_deref()
    }

    /// Pictures imported without a copy so far.
    pub fn imported(&self) -> u64 {
        self.imported
    }

    /// Imports `picture` (left on the GPU) into the NV12 textures `tex` (Y: R8 at the
    /// picture's size, UV: RG8 at half size): Ok(true) when it did; Ok(false) when zero-copy is
    /// off (this call may have turned it off: ONE warning line names the reason) and the
    /// caller takes the software path.
    ///
    /// # Safety
    /// The presenter's GL context is current on this thread; `bind(i)` binds `tex[i]` to
    /// `GL_TEXTURE_2D`.
    pub unsafe fn import(
        &mut self,
        picture: &DecodedFrame,
        tex: [u32; 2],
        bind: impl FnMut(usize),
    ) -> bool {
        if self.off.is_some() {
            return false;
        }
        match self.try_import(picture, tex, bind) {
            Ok(()) => {
                self.imported += 1;
                true
            }
            Err(why) => {
                log::warn!(
                    "GL presenter: zero-copy off ({why}); decoded pictures are downloaded to \
                     system memory from now on"
                );
                self.release();
                self.off = Some(why.to_string());
                false
            }
        }
    }

    unsafe fn try_import(
        &mut self,
        picture: &DecodedFrame,
        tex: [u32; 2],
        bind: impl FnMut(usize),
    ) -> std::result::Result<(), ZeroCopyError> {
        let (w, h) = (picture.width(), picture.height());
        match picture.gpu() {
            Some(GpuPicture::DrmPrime) => {
                let d = picture.drm_prime().ok_or(ZeroCopyError::NoDrmPrime)?;
                let planes = egl_image::nv12_plane_images(d, w, h)?;
                if self.dma_buf.is_none() {
                    self.dma_buf = Some(egl_image::EglImporter::new()?);
                }
                if let Some(i) = self.dma_buf.as_mut() {
                    i.import(&planes, bind)?;
                }
            }
            Some(GpuPicture::Cuda) => {
                let p = picture.cuda_nv12().ok_or(ZeroCopyError::NoCudaPlanes)?;
                if self.cuda.is_none() {
                    self.cuda = Some(cuda_gl::CudaGl::load()?);
                }
                if let Some(c) = self.cuda.as_mut() {
                    c.copy(&p, tex, w, h)?;
                }
                // The copy is ordered on FFmpeg's stream before the surface can be reused: the
                // picture goes back to the decoder's pool at once.
                self.held = None;
                return Ok(());
            }
            None => return Err(ZeroCopyError::SystemMemory),
        }
        self.held = Some(
            picture
                .share()
                .map_err(|e| ZeroCopyError::Hold(e.to_string()))?,
        );
        Ok(())
    }

    /// Lets the last imported picture go (its images destroyed, its buffers released).
    pub fn release(&mut self) {
        if let Some(i) = self.dma_buf.as_mut() {
            i.release();
        }
        self.held = None;
    }
}

type GetProc = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type GetDisplay = unsafe extern "C" fn() -> *mut c_void;
type QueryString = unsafe extern "C" fn(*mut c_void, i32) -> *const c_char;
const EGL_EXTENSIONS: i32 = 0x3055;

/// Probes the current EGL display (the presenter's GL context must be current on this
/// thread): libEGL is dlopened, so a machine without it says so instead of failing to start.
pub fn probe_egl() -> EglSupport {
    // SAFETY: dlopen/dlsym with valid C strings; the symbols are called with the signatures
    // EGL 1.4 gives them; the handle stays open (libEGL is in use by the GL context anyway).
    unsafe {
        let lib = libc::dlopen(c"libEGL.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if lib.is_null() {
            return EglSupport::Missing("EGL: libEGL.so.1 does not load".into());
        }
        let sym = |n: &CStr| libc::dlsym(lib, n.as_ptr());
        let (gd, qs, gp) = (
            sym(c"eglGetCurrentDisplay"),
            sym(c"eglQueryString"),
            sym(c"eglGetProcAddress"),
        );
        if gd.is_null() || qs.is_null() || gp.is_null() {
            return EglSupport::Missing("EGL: libEGL.so.1 lacks EGL 1.4's entry points".into());
        }
        let get_display: GetDisplay = std::mem::transmute::<*mut c_void, GetDisplay>(gd);
        let query: QueryString = std::mem::transmute::<*mut c_void, QueryString>(qs);
        let get_proc: GetProc = std::mem::transmute::<*mut c_void, GetProc>(gp);
        let display = get_display();
        if display.is_null() {
            return EglSupport::Missing(
                "EGL: the presenter's GL context is not an EGL one (GLX)".into(),
            );
        }
        let ext = query(display, EGL_EXTENSIONS);
        let ext = if ext.is_null() {
            String::new()
        } else {
            CStr::from_ptr(ext).to_string_lossy().into_owned()
        };
        egl_support(
            &ext,
            !get_proc(c"glEGLImageTargetTexture2DOES".as_ptr()).is_null(),
        )
    }
}

/// What an EGL extension string and the GLES entry point allow.
fn egl_support(extensions: &str, target_texture: bool) -> EglSupport {
    let has = |e: &str| extensions.split_ascii_whitespace().any(|x| x == e);
    let missing: Vec<&str> = ["EGL_EXT_image_dma_buf_import", "EGL_KHR_image_base"]
        .into_iter()
        .filter(|e| !has(e))
        .collect();
    if !missing.is_empty() {
        return EglSupport::Missing(format!("EGL: no {}", missing.join(", ")));
    }
    if !target_texture {
        return EglSupport::Missing("GLES: no glEGLImageTargetTexture2DOES".into());
    }
    EglSupport::DmaBufImport
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_string_decides_the_egl_support() {
        let all = "EGL_KHR_image_base EGL_EXT_image_dma_buf_import EGL_KHR_fence_sync";
        assert_eq!(egl_support(all, true), EglSupport::DmaBufImport);
        assert_eq!(
            egl_support("EGL_KHR_image_base", true),
            EglSupport::Missing("EGL: no EGL_EXT_image_dma_buf_import".into())
        );
        // A prefix of a name is not the name.
        assert!(matches!(
            egl_support("EGL_EXT_image_dma_buf_import_modifiers", true),
            EglSupport::Missing(_)
        ));
        assert!(matches!(egl_support(all, false), EglSupport::Missing(m) if m.contains("glEGL")));
    }

    #[test]
    fn without_a_gpu_every_session_takes_the_software_path_and_says_why() {
        if !render_nodes().is_empty() || !nvidia_devices().is_empty() {
            println!("skipped: this machine has a GPU device node; the fallback reasons differ");
            return;
        }
        let egl = EglSupport::DmaBufImport;
        let ZeroCopyPlan::SystemMemory(why) = plan(HwAccel::Auto, Some(&egl)) else {
            panic!("a zero-copy path without a GPU");
        };
        let line = ZeroCopyPlan::SystemMemory(why.clone()).to_string();
        assert!(line.contains("/dev/dri/renderD*"), "{line}");
        assert!(line.contains("/dev/nvidia*"), "{line}");
        assert!(line.contains("system memory"), "{line}");
        assert_eq!(
            plan(HwAccel::None, None),
            ZeroCopyPlan::SystemMemory(vec!["software decoding (--hwaccel none)".into()])
        );
        let ZeroCopyPlan::SystemMemory(why) = plan(HwAccel::Vaapi, None) else {
            panic!("zero-copy without a presenter");
        };
        assert!(why.iter().any(|w| w == "no GL presenter"), "{why:?}");
    }

    #[test]
    fn a_failed_import_turns_zero_copy_off_once_with_the_reason() {
        let pic = memfd::memfd_nv12_picture(32, 16, [16, 128, 128]).unwrap();
        let mut g = GpuImport::default();
        let mut bound = 0;
        // SAFETY: no GL context on this thread: the importer finds no EGL display and stops
        // before any GL call.
        assert!(!unsafe { g.import(&pic, [1, 2], |_| bound += 1) });
        let why = g.off_reason().expect("the reason").to_string();
        assert!(why.starts_with("EGL:"), "{why}");
        // The reason is one of the importer's typed errors, in its words.
        let e = egl_image::EglImporter::new().err();
        assert!(
            matches!(
                e,
                Some(
                    ZeroCopyError::NoLibEgl | ZeroCopyError::NotEgl | ZeroCopyError::EglEntryPoints
                )
            ),
            "{e:?}"
        );
        assert_eq!(e.map(|e| e.to_string()), Some(why.clone()));
        // SAFETY: as above.
        assert!(!unsafe { g.import(&pic, [1, 2], |_| bound += 1) });
        assert_eq!(g.off_reason(), Some(why.as_str()));
        assert_eq!((bound, g.imported()), (0, 0));
    }

    #[test]
    fn untether_zero_copy_takes_auto_or_off() {
        std::env::set_var("UNTETHER_ZERO_COPY", "off");
        assert_eq!(keep_on_gpu(HwAccel::Cuda), Ok(false));
        std::env::set_var("UNTETHER_ZERO_COPY", "yes");
        let e = keep_on_gpu(HwAccel::Cuda).unwrap_err();
        assert_eq!(e, ZeroCopyError::Setting("yes".into()));
        let e = e.to_string();
        assert!(
            e.contains("\"yes\"") && e.contains("auto") && e.contains("off"),
            "{e}"
        );
        std::env::remove_var("UNTETHER_ZERO_COPY");
        // Software decoding never keeps pictures on the GPU; hardware does where its device is.
        assert_eq!(keep_on_gpu(HwAccel::None), Ok(false));
        let here = !render_nodes().is_empty() || !nvidia_devices().is_empty();
        if !here {
            assert_eq!(keep_on_gpu(HwAccel::Auto), Ok(false));
        }
    }
}
