//! DMA-BUF → EGL image → GL texture: a DRM PRIME picture's planes imported into the
//! presenter's textures without a copy (`EGL_EXT_image_dma_buf_import`, with
//! `EGL_EXT_image_dma_buf_import_modifiers` when the display has it and the buffer has a
//! modifier), each bound with `glEGLImageTargetTexture2DOES`.
//!
//! NV12 becomes two images: the Y plane as `DRM_FORMAT_R8` (a one-channel texture) and the
//! interleaved UV plane as `DRM_FORMAT_GR88` at half size (U in red, V in green), the
//! layout the presenter's NV12 shader variant samples. VA-API exports NV12 as those two
//! layers already; a single NV12 layer (two planes) is split the same way.
//!
//! libEGL is dlopened: a machine without it gets a line saying so, never a failed start.

use std::ffi::{c_char, c_void, CStr};

use super::ZeroCopyError;
use ffmpeg_next::ffi::AVDRMFrameDescriptor;

/// DRM fourccs (drm_fourcc.h).
pub const DRM_FORMAT_R8: u32 = u32::from_le_bytes(*b"R8  ");
pub const DRM_FORMAT_GR88: u32 = u32::from_le_bytes(*b"GR88");
pub const DRM_FORMAT_NV12: u32 = u32::from_le_bytes(*b"NV12");
/// No modifier known (the driver's implicit layout).
pub const DRM_FORMAT_MOD_INVALID: u64 = 0x00ff_ffff_ffff_ffff;

// EGL enums (egl.h, eglext.h).
const EGL_NONE: i32 = 0x3038;
const EGL_WIDTH: i32 = 0x3057;
const EGL_HEIGHT: i32 = 0x3056;
const EGL_EXTENSIONS: i32 = 0x3055;
const EGL_LINUX_DMA_BUF_EXT: u32 = 0x3270;
const EGL_LINUX_DRM_FOURCC_EXT: i32 = 0x3271;
const EGL_DMA_BUF_PLANE0_FD_EXT: i32 = 0x3272;
const EGL_DMA_BUF_PLANE0_OFFSET_EXT: i32 = 0x3273;
const EGL_DMA_BUF_PLANE0_PITCH_EXT: i32 = 0x3274;
const EGL_DMA_BUF_PLANE0_MODIFIER_LO_EXT: i32 = 0x3443;
const EGL_DMA_BUF_PLANE0_MODIFIER_HI_EXT: i32 = 0x3444;
const GL_TEXTURE_2D: u32 = 0x0DE1;

/// One plane to import as one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaneImage {
    pub fourcc: u32,
    pub width: u32,
    pub height: u32,
    pub fd: i32,
    pub offset: i64,
    pub pitch: i64,
    pub modifier: u64,
}

/// The images an NV12 DRM PRIME picture of `width`×`height` is imported as: Y (R8), UV
/// (GR88 at half size). Other layouts (10-bit, 4:4:4) are named in the error.
pub fn nv12_plane_images(
    d: &AVDRMFrameDescriptor,
    width: u32,
    height: u32,
) -> Result<[PlaneImage; 2], ZeroCopyError> {
    let nb_layers = d.nb_layers.clamp(0, 4) as usize;
    let mut planes = Vec::new();
    for layer in &d.layers[..nb_layers] {
        let n = layer.nb_planes.clamp(0, 4) as usize;
        let fourccs: &[u32] = match (layer.format, n) {
            (DRM_FORMAT_NV12, 2) => &[DRM_FORMAT_R8, DRM_FORMAT_GR88],
            (DRM_FORMAT_R8, 1) => &[DRM_FORMAT_R8],
            (DRM_FORMAT_GR88, 1) => &[DRM_FORMAT_GR88],
            (f, _) => {
                return Err(ZeroCopyError::LayerFormat {
                    fourcc: f,
                    planes: n,
                })
            }
        };
        for (p, &fourcc) in layer.planes[..n].iter().zip(fourccs) {
            let object = usize::try_from(p.object_index)
                .ok()
                .filter(|&o| o < d.nb_objects.clamp(0, 4) as usize)
                .ok_or(ZeroCopyError::PlaneObject(p.object_index))?;
            let o = &d.objects[object];
            let half = fourcc == DRM_FORMAT_GR88;
            planes.push(PlaneImage {
                fourcc,
                width: if half { width.div_ceil(2) } else { width },
                height: if half { height.div_ceil(2) } else { height },
                fd: o.fd,
                offset: p.offset as i64,
                pitch: p.pitch as i64,
                modifier: o.format_modifier,
            });
        }
    }
    match planes.as_slice() {
        [y, uv] if y.fourcc == DRM_FORMAT_R8 && uv.fourcc == DRM_FORMAT_GR88 => Ok([*y, *uv]),
        _ => Err(ZeroCopyError::NotNv12 {
            planes: planes.len(),
            layers: nb_layers,
        }),
    }
}

/// A fourcc in letters, for messages.
pub(crate) fn fourcc_name(f: u32) -> String {
    f.to_le_bytes()
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// The `eglCreateImageKHR` attribute list for `p` (the modifier only where the display takes
/// modifiers and the buffer has one).
pub fn attributes(p: &PlaneImage, modifiers: bool) -> Vec<i32> {
    let mut a = vec![
        EGL_WIDTH,
        p.width as i32,
        EGL_HEIGHT,
        p.height as i32,
        EGL_LINUX_DRM_FOURCC_EXT,
        p.fourcc as i32,
        EGL_DMA_BUF_PLANE0_FD_EXT,
        p.fd,
        EGL_DMA_BUF_PLANE0_OFFSET_EXT,
        p.offset as i32,
        EGL_DMA_BUF_PLANE0_PITCH_EXT,
        p.pitch as i32,
    ];
    if modifiers && p.modifier != DRM_FORMAT_MOD_INVALID {
        a.extend([
            EGL_DMA_BUF_PLANE0_MODIFIER_LO_EXT,
            (p.modifier & 0xffff_ffff) as u32 as i32,
            EGL_DMA_BUF_PLANE0_MODIFIER_HI_EXT,
            (p.modifier >> 32) as u32 as i32,
        ]);
    }
    a.push(EGL_NONE);
    a
}

type GetProc = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type GetDisplay = unsafe extern "C" fn() -> *mut c_void;
type QueryString = unsafe extern "C" fn(*mut c_void, i32) -> *const c_char;
type GetError = unsafe extern "C" fn() -> i32;
type CreateImage =
    unsafe extern "C" fn(*mut c_void, *mut c_void, u32, *mut c_void, *const i32) -> *mut c_void;
type DestroyImage = unsafe extern "C" fn(*mut c_void, *mut c_void) -> u32;
type TargetTexture = unsafe extern "C" fn(u32, *mut c_void);

/// The EGL display of the current context and the entry points the import needs.
pub struct EglImporter {
    display: *mut c_void,
    modifiers: bool,
    get_error: GetError,
    create: CreateImage,
    destroy: DestroyImage,
    target: TargetTexture,
    /// The images bound to the textures now (destroyed when the next picture replaces them).
    images: Vec<*mut c_void>,
}

impl EglImporter {
    /// The importer for the EGL context current on this thread, or why there is none.
    pub fn new() -> Result<EglImporter, ZeroCopyError> {
        // SAFETY: dlopen/dlsym with valid C strings; each symbol is called with the signature
        // EGL 1.4 and its extensions give it; the library stays loaded (the GL context uses
        // it).
        unsafe {
            let lib = libc::dlopen(c"libEGL.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if lib.is_null() {
                return Err(ZeroCopyError::NoLibEgl);
            }
            let sym = |n: &CStr| libc::dlsym(lib, n.as_ptr());
            let (gd, qs, gp, ge) = (
                sym(c"eglGetCurrentDisplay"),
                sym(c"eglQueryString"),
                sym(c"eglGetProcAddress"),
                sym(c"eglGetError"),
            );
            if gd.is_null() || qs.is_null() || gp.is_null() || ge.is_null() {
                return Err(ZeroCopyError::EglEntryPoints);
            }
            let get_display = std::mem::transmute::<*mut c_void, GetDisplay>(gd);
            let query = std::mem::transmute::<*mut c_void, QueryString>(qs);
            let get_proc = std::mem::transmute::<*mut c_void, GetProc>(gp);
            let display = get_display();
            if display.is_null() {
                return Err(ZeroCopyError::NotEgl);
            }
            let ext = query(display, EGL_EXTENSIONS);
            let ext = if ext.is_null() {
                String::new()
            } else {
                CStr::from_ptr(ext).to_string_lossy().into_owned()
            };
            let has = |e: &str| ext.split_ascii_whitespace().any(|x| x == e);
            for e in ["EGL_KHR_image_base", "EGL_EXT_image_dma_buf_import"] {
                if !has(e) {
                    return Err(ZeroCopyError::EglExtension(e));
                }
            }
            let (create, destroy, target) = (
                get_proc(c"eglCreateImageKHR".as_ptr()),
                get_proc(c"eglDestroyImageKHR".as_ptr()),
                get_proc(c"glEGLImageTargetTexture2DOES".as_ptr()),
            );
            if create.is_null() || destroy.is_null() {
                return Err(ZeroCopyError::EglImageFunctions);
            }
            if target.is_null() {
                return Err(ZeroCopyError::GlesImageTarget);
            }
            Ok(EglImporter {
                display,
                modifiers: has("EGL_EXT_image_dma_buf_import_modifiers"),
                get_error: std::mem::transmute::<*mut c_void, GetError>(ge),
                create: std::mem::transmute::<*mut c_void, CreateImage>(create),
                destroy: std::mem::transmute::<*mut c_void, DestroyImage>(destroy),
                target: std::mem::transmute::<*mut c_void, TargetTexture>(target),
                images: Vec::new(),
            })
        }
    }

    /// Imports the planes and binds plane i's image to the texture `bind(i)` bound to
    /// `GL_TEXTURE_2D`, after destroying the images of the picture before. The caller keeps
    /// the picture (its dma-bufs) alive until the next import.
    ///
    /// # Safety
    /// The EGL context this importer was made for is current on this thread.
    pub unsafe fn import(
        &mut self,
        planes: &[PlaneImage],
        mut bind: impl FnMut(usize),
    ) -> Result<(), ZeroCopyError> {
        self.release();
        for (i, p) in planes.iter().enumerate() {
            let attrs = attributes(p, self.modifiers);
            let image = (self.create)(
                self.display,
                std::ptr::null_mut(),
                EGL_LINUX_DMA_BUF_EXT,
                std::ptr::null_mut(),
                attrs.as_ptr(),
            );
            if image.is_null() {
                let e = (self.get_error)();
                self.release();
                return Err(ZeroCopyError::CreateImage {
                    fourcc: p.fourcc,
                    width: p.width,
                    height: p.height,
                    fd: p.fd,
                    code: e,
                });
            }
            self.images.push(image);
            bind(i);
            (self.target)(GL_TEXTURE_2D, image);
        }
        Ok(())
    }

    /// Destroys the images bound now.
    pub fn release(&mut self) {
        for image in self.images.drain(..) {
            // SAFETY: an image this importer made on its display, destroyed once.
            unsafe { (self.destroy)(self.display, image) };
        }
    }
}

impl Drop for EglImporter {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffmpeg_next::ffi::{AVDRMLayerDescriptor, AVDRMObjectDescriptor, AVDRMPlaneDescriptor};

    fn plane(object_index: i32, offset: isize, pitch: isize) -> AVDRMPlaneDescriptor {
        AVDRMPlaneDescriptor {
            object_index,
            offset,
            pitch,
        }
    }

    fn descriptor(layers: &[(u32, &[AVDRMPlaneDescriptor])]) -> AVDRMFrameDescriptor {
        let none = plane(0, 0, 0);
        let mut d = AVDRMFrameDescriptor {
            nb_objects: 1,
            objects: [AVDRMObjectDescriptor {
                fd: 7,
                size: 1920 * 1088 * 3 / 2,
                format_modifier: 0x0100_0000_0000_0004,
            }; 4],
            nb_layers: layers.len() as i32,
            layers: [AVDRMLayerDescriptor {
                format: 0,
                nb_planes: 0,
                planes: [none; 4],
            }; 4],
        };
        for (l, (format, planes)) in d.layers.iter_mut().zip(layers) {
            l.format = *format;
            l.nb_planes = planes.len() as i32;
            l.planes[..planes.len()].copy_from_slice(planes);
        }
        d
    }

    #[test]
    fn nv12_as_one_layer_or_two_becomes_y_and_uv_images() {
        let (y, uv) = (plane(0, 0, 2048), plane(0, 2048 * 1088, 2048));
        let one = descriptor(&[(DRM_FORMAT_NV12, &[y, uv])]);
        let two = descriptor(&[(DRM_FORMAT_R8, &[y]), (DRM_FORMAT_GR88, &[uv])]);
        for d in [one, two] {
            let [py, puv] = nv12_plane_images(&d, 1920, 1080).unwrap();
            assert_eq!(
                (py.fourcc, py.width, py.height),
                (DRM_FORMAT_R8, 1920, 1080)
            );
            assert_eq!(
                (puv.fourcc, puv.width, puv.height),
                (DRM_FORMAT_GR88, 960, 540)
            );
            assert_eq!((puv.offset, puv.pitch, puv.fd), (2048 * 1088, 2048, 7));
        }
        let p010 = descriptor(&[(u32::from_le_bytes(*b"P010"), &[y, uv])]);
        let e = nv12_plane_images(&p010, 1920, 1080)
            .unwrap_err()
            .to_string();
        assert!(e.contains("P010") && e.contains("NV12"), "{e}");
        let bad = descriptor(&[(DRM_FORMAT_R8, &[plane(3, 0, 2048)])]);
        assert!(nv12_plane_images(&bad, 1920, 1080)
            .unwrap_err()
            .to_string()
            .contains("object 3"));
        // Typed: the variant names what is wrong.
        assert!(matches!(
            nv12_plane_images(&p010, 1920, 1080).unwrap_err(),
            ZeroCopyError::LayerFormat { fourcc, planes: 2 } if fourcc == u32::from_le_bytes(*b"P010")
        ));
        assert!(matches!(
            nv12_plane_images(&bad, 1920, 1080).unwrap_err(),
            ZeroCopyError::PlaneObject(3)
        ));
        let y_only = descriptor(&[(DRM_FORMAT_R8, &[y])]);
        let e = nv12_plane_images(&y_only, 1920, 1080).unwrap_err();
        assert!(
            matches!(
                e,
                ZeroCopyError::NotNv12 {
                    planes: 1,
                    layers: 1
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "DMA-BUF: 1 planes in 1 layers, not NV12's Y and UV"
        );
    }

    #[test]
    fn the_attribute_list_carries_the_modifier_only_when_it_can() {
        let p = PlaneImage {
            fourcc: DRM_FORMAT_GR88,
            width: 960,
            height: 540,
            fd: 9,
            offset: 4096,
            pitch: 2048,
            modifier: 0x0100_0000_0000_0004,
        };
        let a = attributes(&p, true);
        assert_eq!(a.last(), Some(&EGL_NONE));
        assert_eq!(a.len(), 12 + 4 + 1);
        let at = |k: i32| a.chunks(2).find(|c| c[0] == k).map(|c| c[1]);
        assert_eq!(at(EGL_DMA_BUF_PLANE0_FD_EXT), Some(9));
        assert_eq!(at(EGL_DMA_BUF_PLANE0_MODIFIER_LO_EXT), Some(4));
        assert_eq!(at(EGL_DMA_BUF_PLANE0_MODIFIER_HI_EXT), Some(0x0100_0000));
        assert_eq!(attributes(&p, false).len(), 13);
        let implicit = PlaneImage {
            modifier: DRM_FORMAT_MOD_INVALID,
            ..p
        };
        assert_eq!(attributes(&implicit, true).len(), 13);
    }
}
