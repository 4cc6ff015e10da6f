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
//! What is built here: the probe of every requirement ([`probe_egl`] with the presenter's
//! context current, [`plan`]) and the selection with its fallback line. The import and the
//! interop copy themselves are designed, not built (no GPU was at hand to run them): every
//! session takes the software path, saying why.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;

use crate::codec::hw::{library_loads, nvidia_devices, render_nodes};
use crate::codec::HwAccel;

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

/// Whether the built presenter can take the path (false: designed, not built yet).
const DMA_BUF_BUILT: bool = false;
const CUDA_GL_BUILT: bool = false;

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
        } else if !DMA_BUF_BUILT {
            why.push("DMA-BUF: the EGL image import is designed, not built".into());
        } else if egl == Some(&EglSupport::DmaBufImport) {
            return ZeroCopyPlan::DmaBuf;
        }
    }
    if wants_cuda {
        if nvidia_devices().is_empty() {
            why.push("CUDA-GL: no NVIDIA device /dev/nvidia*".into());
        } else if !library_loads("libcuda.so.1") {
            why.push("CUDA-GL: libcuda.so.1 does not load".into());
        } else if !CUDA_GL_BUILT {
            why.push("CUDA-GL: the interop copy is designed, not built".into());
        } else if egl.is_some() {
            return ZeroCopyPlan::CudaGl;
        }
    }
    if !wants_dma && !wants_cuda {
        why.push(format!("--hwaccel {hwaccel} has no zero-copy path"));
    }
    ZeroCopyPlan::SystemMemory(why)
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
}
