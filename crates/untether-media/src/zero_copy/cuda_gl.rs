//! NVDEC → GL through CUDA–GL interop: the presenter's two NV12 textures (Y as R8, UV as RG8
//! at half size) are registered with CUDA once (`cuGraphicsGLRegisterImage`, write-discard);
//! per picture they are mapped, their CUDA arrays taken, the decoder's device pointers copied
//! into them on FFmpeg's stream (`cuMemcpy2DAsync`, device to array: the picture never
//! visits system memory) and unmapped, which orders the copy before GL's next use.
//!
//! libcuda.so.1 is dlopened (no link-time dependency): where it is absent, [`CudaGl::load`]
//! says so and the presenter stays on the software path.

use std::ffi::{c_char, c_void, CStr};

use super::ZeroCopyError;
use crate::codec::CudaNv12;

type CuResult = i32;
type CuInit = unsafe extern "C" fn(u32) -> CuResult;
type CuCtxPush = unsafe extern "C" fn(*mut c_void) -> CuResult;
type CuCtxPop = unsafe extern "C" fn(*mut *mut c_void) -> CuResult;
type CuRegister = unsafe extern "C" fn(*mut *mut c_void, u32, u32, u32) -> CuResult;
type CuUnregister = unsafe extern "C" fn(*mut c_void) -> CuResult;
type CuMap = unsafe extern "C" fn(u32, *mut *mut c_void, *mut c_void) -> CuResult;
type CuArray = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u32, u32) -> CuResult;
type CuCopy = unsafe extern "C" fn(*const Memcpy2D, *mut c_void) -> CuResult;
type CuErrorName = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;

const GL_TEXTURE_2D: u32 = 0x0DE1;
const CU_GRAPHICS_REGISTER_FLAGS_WRITE_DISCARD: u32 = 2;
const CU_MEMORYTYPE_HOST: u32 = 1;
const CU_MEMORYTYPE_DEVICE: u32 = 2;
const CU_MEMORYTYPE_ARRAY: u32 = 3;

/// `CUDA_MEMCPY2D` (cuda.h, the `_v2` layout).
#[repr(C)]
#[derive(Default)]
pub struct Memcpy2D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: usize,
    src_device: u64,
    src_array: usize,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: usize,
    dst_device: u64,
    dst_array: usize,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

/// The copy of one plane (`pitch` bytes a row at `src`, `width_in_bytes` × `rows` of it)
/// into a CUDA array.
pub fn plane_copy(
    src: u64,
    pitch: usize,
    array: usize,
    width_in_bytes: usize,
    rows: usize,
) -> Memcpy2D {
    Memcpy2D {
        src_memory_type: CU_MEMORYTYPE_DEVICE,
        src_device: src,
        src_pitch: pitch,
        dst_memory_type: CU_MEMORYTYPE_ARRAY,
        dst_array: array,
        width_in_bytes,
        height: rows,
        ..Default::default()
    }
}

/// libcuda's entry points the interop needs.
struct Api {
    push: CuCtxPush,
    pop: CuCtxPop,
    register: CuRegister,
    unregister: CuUnregister,
    map: CuMap,
    unmap: CuMap,
    array: CuArray,
    copy: CuCopy,
    error_name: Option<CuErrorName>,
}

/// The interop: libcuda, and the presenter's textures registered with it.
pub struct CudaGl {
    api: Api,
    /// The registered textures (Y, UV), and the GL names and size they were registered for.
    resources: Vec<*mut c_void>,
    registered: Option<([u32; 2], u32, u32)>,
}

/// Looks up `name` in `lib`.
///
/// # Safety
/// `lib` is a dlopen handle.
unsafe fn symbol(lib: *mut c_void, name: &CStr) -> Result<*mut c_void, ZeroCopyError> {
    let s = libc::dlsym(lib, name.as_ptr());
    if s.is_null() {
        Err(ZeroCopyError::CudaSymbol(
            name.to_string_lossy().into_owned(),
        ))
    } else {
        Ok(s)
    }
}

/// `name` from `lib` as the function pointer type `F` (the caller's field or binding says which;
/// it must be the signature cuda.h gives that symbol).
unsafe fn function<F: Copy>(lib: *mut c_void, name: &CStr) -> Result<F, ZeroCopyError> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let s = symbol(lib, name)?;
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&s))
}

impl CudaGl {
    /// Loads libcuda.so.1 (dlopen) and initialises the driver API, or says why not.
    pub fn load() -> Result<CudaGl, ZeroCopyError> {
        Self::load_from(c"libcuda.so.1")
    }

    /// [`Self::load`] from another library name (tests name one that is not there).
    pub fn load_from(library: &CStr) -> Result<CudaGl, ZeroCopyError> {
        // SAFETY: dlopen/dlsym with valid C strings; each symbol is transmuted to the
        // signature cuda.h gives it (the `_v2` names where the driver versions them).
        unsafe {
            let lib = libc::dlopen(library.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if lib.is_null() {
                let why = libc::dlerror();
                let dlerror =
                    (!why.is_null()).then(|| CStr::from_ptr(why).to_string_lossy().into_owned());
                return Err(ZeroCopyError::NoLibcuda {
                    library: library.to_string_lossy().into_owned(),
                    dlerror,
                });
            }
            let init = function::<CuInit>(lib, c"cuInit")?;
            let api = Api {
                push: function::<CuCtxPush>(lib, c"cuCtxPushCurrent_v2")?,
                pop: function::<CuCtxPop>(lib, c"cuCtxPopCurrent_v2")?,
                register: function::<CuRegister>(lib, c"cuGraphicsGLRegisterImage")?,
                unregister: function::<CuUnregister>(lib, c"cuGraphicsUnregisterResource")?,
                map: function::<CuMap>(lib, c"cuGraphicsMapResources")?,
                unmap: function::<CuMap>(lib, c"cuGraphicsUnmapResources")?,
                array: function::<CuArray>(lib, c"cuGraphicsSubResourceGetMappedArray")?,
                copy: function::<CuCopy>(lib, c"cuMemcpy2DAsync_v2")?,
                error_name: function::<CuErrorName>(lib, c"cuGetErrorName").ok(),
            };
            let me = CudaGl {
                api,
                resources: Vec::new(),
                registered: None,
            };
            me.check(init(0), "cuInit")?;
            Ok(me)
        }
    }

    /// `rc` as a result naming the call and CUDA's error.
    fn check(&self, rc: CuResult, what: &'static str) -> Result<(), ZeroCopyError> {
        if rc == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
        let name = unsafe {
            match self.api.error_name {
                Some(f) if f(rc, &mut name) == 0 && !name.is_null() => {
                    CStr::from_ptr(name).to_string_lossy().into_owned()
                }
                _ => format!("error {rc}"),
            }
        };
        Err(ZeroCopyError::CudaCall {
            call: what,
            error: name,
        })
    }

    /// Copies the NVDEC picture into the textures `tex` (Y: R8 `width`×`height`, UV: RG8 at
    /// half size), registering them first when they changed.
    ///
    /// # Safety
    /// The GL context owning `tex` is current on this thread, and `picture`'s pointers are
    /// alive (its frame is held by the caller for the call).
    pub unsafe fn copy(
        &mut self,
        picture: &CudaNv12,
        tex: [u32; 2],
        width: u32,
        height: u32,
    ) -> Result<(), ZeroCopyError> {
        self.check((self.api.push)(picture.context), "cuCtxPushCurrent")?;
        let r = self.copy_in_context(picture, tex, width, height);
        let mut popped = std::ptr::null_mut();
        (self.api.pop)(&mut popped);
        r
    }

    unsafe fn copy_in_context(
        &mut self,
        picture: &CudaNv12,
        tex: [u32; 2],
        width: u32,
        height: u32,
    ) -> Result<(), ZeroCopyError> {
        if self.registered != Some((tex, width, height)) {
            self.unregister();
            for t in tex {
                let mut r = std::ptr::null_mut();
                self.check(
                    (self.api.register)(
                        &mut r,
                        t,
                        GL_TEXTURE_2D,
                        CU_GRAPHICS_REGISTER_FLAGS_WRITE_DISCARD,
                    ),
                    "cuGraphicsGLRegisterImage",
                )?;
                self.resources.push(r);
            }
            self.registered = Some((tex, width, height));
        }
        let stream = picture.stream;
        let n = self.resources.len() as u32;
        let rc = (self.api.map)(n, self.resources.as_mut_ptr(), stream);
        self.check(rc, "cuGraphicsMapResources")?;
        let rows = [height as usize, height.div_ceil(2) as usize];
        // Y: one byte a texel; UV: two bytes a texel at half width.
        let widths = [width as usize, 2 * width.div_ceil(2) as usize];
        let mut result = Ok(());
        for i in 0..2 {
            let mut array = std::ptr::null_mut();
            result = self.check(
                (self.api.array)(&mut array, self.resources[i], 0, 0),
                "cuGraphicsSubResourceGetMappedArray",
            );
            if result.is_err() {
                break;
            }
            let (src, pitch) = picture.planes[i];
            let c = plane_copy(src, pitch, array as usize, widths[i], rows[i]);
            result = self.check((self.api.copy)(&c, stream), "cuMemcpy2DAsync");
            if result.is_err() {
                break;
            }
        }
        let rc = (self.api.unmap)(n, self.resources.as_mut_ptr(), stream);
        let unmapped = self.check(rc, "cuGraphicsUnmapResources");
        result.and(unmapped)
    }

    fn unregister(&mut self) {
        for r in self.resources.drain(..) {
            // SAFETY: a resource this interop registered, unregistered once.
            unsafe { (self.api.unregister)(r) };
        }
        self.registered = None;
    }
}

impl Drop for CudaGl {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// libcuda's entry points for reading a few rows back (the stamp), loaded once.
struct ReadApi {
    push: CuCtxPush,
    pop: CuCtxPop,
    copy: unsafe extern "C" fn(*const Memcpy2D) -> CuResult,
}

static READ_API: std::sync::OnceLock<Option<ReadApi>> = std::sync::OnceLock::new();

/// The first `rows` rows of an NVDEC picture's Y plane (`width` bytes each), copied to system
/// memory (`cuMemcpy2D`: a few kilobytes, where the stamp is), or None when libcuda cannot.
pub fn read_luma_rows(picture: &CudaNv12, width: usize, rows: usize) -> Option<Vec<u8>> {
    let api = READ_API
        .get_or_init(|| {
            // SAFETY: as in `CudaGl::load_from` (the driver is initialised by FFmpeg, which
            // made the picture's context).
            unsafe {
                let lib =
                    libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
                if lib.is_null() {
                    return None;
                }
                Some(ReadApi {
                    push: std::mem::transmute::<*mut c_void, CuCtxPush>(
                        symbol(lib, c"cuCtxPushCurrent_v2").ok()?,
                    ),
                    pop: std::mem::transmute::<*mut c_void, CuCtxPop>(
                        symbol(lib, c"cuCtxPopCurrent_v2").ok()?,
                    ),
                    copy: std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(*const Memcpy2D) -> CuResult,
                    >(symbol(lib, c"cuMemcpy2D_v2").ok()?),
                })
            }
        })
        .as_ref()?;
    let mut out = vec![0u8; width * rows];
    let (src, pitch) = picture.planes[0];
    let c = Memcpy2D {
        src_memory_type: CU_MEMORYTYPE_DEVICE,
        src_device: src,
        src_pitch: pitch,
        dst_memory_type: CU_MEMORYTYPE_HOST,
        dst_host: out.as_mut_ptr() as usize,
        dst_pitch: width,
        width_in_bytes: width.min(pitch),
        height: rows,
        ..Default::default()
    };
    // SAFETY: `out` holds rows × width bytes; the source rows are inside the picture (the
    // caller asks for at most its height); the context is pushed and popped around the copy.
    unsafe {
        if (api.push)(picture.context) != 0 {
            return None;
        }
        let rc = (api.copy)(&c);
        let mut popped = std::ptr::null_mut();
        (api.pop)(&mut popped);
        (rc == 0).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_libcuda_the_interop_says_so() {
        let e = CudaGl::load_from(c"libcuda-absent.so.1")
            .err()
            .expect("no such library");
        assert!(
            matches!(&e, ZeroCopyError::NoLibcuda { library, .. } if library == "libcuda-absent.so.1"),
            "{e}"
        );
        let e = e.to_string();
        assert!(
            e.starts_with("CUDA-GL: libcuda-absent.so.1 does not load"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        if let Err(e) = CudaGl::load() {
            // This box: no NVIDIA driver. A machine with one loads it (or names the call).
            let e = e.to_string();
            assert!(e.contains("libcuda.so.1") || e.contains("cuInit"), "{e}");
        }
    }

    #[test]
    fn a_plane_copy_is_device_to_array_of_the_visible_bytes() {
        let c = plane_copy(0xdead_0000, 2048, 0x42, 1920, 540);
        assert_eq!(
            (c.src_memory_type, c.dst_memory_type),
            (CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_ARRAY)
        );
        assert_eq!(
            (c.src_device, c.src_pitch, c.dst_array),
            (0xdead_0000, 2048, 0x42)
        );
        assert_eq!((c.width_in_bytes, c.height), (1920, 540));
        // cuda.h's CUDA_MEMCPY2D is 128 bytes on 64-bit machines.
        assert_eq!(std::mem::size_of::<Memcpy2D>(), 128);
    }
}
