//! KMS/DRM capture, as FFmpeg's `kmsgrab` and Sunshine do it: the framebuffer a display
//! controller scans out, read without a compositor or X server. With universal planes on, the
//! first primary plane that shows a framebuffer is taken; its buffer is exported as a DMA-BUF
//! (`PRIME_HANDLE_TO_FD`, which needs `CAP_SYS_ADMIN`) and mapped; each grab re-reads the
//! plane's framebuffer (page flips change it) and copies the rows between `DMA_BUF_IOCTL_SYNC`
//! brackets. Only linear 32-bit XRGB/ARGB buffers read correctly this way (a tiled or
//! compressed buffer needs the GPU to detile it, as `kmsgrab` + `hwmap` do); a plane with an
//! other layout is an error naming it.
//!
//! **Untested on real hardware**: the development and CI machines have no `/dev/dri`; only
//! the failure to open is tested there.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Why KMS capture is not possible.
#[derive(Debug, thiserror::Error)]
pub enum KmsError {
    #[error(
        "KMS capture: no DRM device ({0} has no card*): KMS capture needs a GPU's display \
         controller (a console with no compositor); on this machine capture X11 (--capture x11) \
         or an application (untether run)"
    )]
    NoDevice(String),
    #[error("KMS capture: cannot open {path}: {source} (it needs access to the card: root or the video group)")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("KMS capture: {path}: {what}: {source}{hint}")]
    Ioctl {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("KMS capture: {path}: no primary plane is showing a framebuffer (is a display connected and on?)")]
    NothingShown { path: PathBuf },
    #[error("KMS capture: {path}: the framebuffer is {bpp} bits per pixel, depth {depth}: only linear 32-bit XRGB/ARGB is read without the GPU")]
    Layout { path: PathBuf, bpp: u32, depth: u32 },
}

const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((b'd' as u64) << 8) | nr
}
const W: u64 = 1;
const RW: u64 = 3;

#[repr(C)]
#[derive(Default)]
struct SetClientCap {
    capability: u64,
    value: u64,
}
#[repr(C)]
#[derive(Default)]
struct PlaneRes {
    plane_id_ptr: u64,
    count_planes: u32,
}
#[repr(C)]
#[derive(Default)]
struct GetPlane {
    plane_id: u32,
    crtc_id: u32,
    fb_id: u32,
    possible_crtcs: u32,
    gamma_size: u32,
    count_format_types: u32,
    format_type_ptr: u64,
}
#[repr(C)]
#[derive(Default)]
struct FbCmd {
    fb_id: u32,
    width: u32,
    height: u32,
    pitch: u32,
    bpp: u32,
    depth: u32,
    handle: u32,
}
#[repr(C)]
#[derive(Default)]
struct PrimeHandle {
    handle: u32,
    flags: u32,
    fd: i32,
}
#[repr(C)]
#[derive(Default)]
struct GemClose {
    handle: u32,
    pad: u32,
}

const SET_CLIENT_CAP: u64 = ioc(W, 0x0D, std::mem::size_of::<SetClientCap>());
const GET_PLANE_RESOURCES: u64 = ioc(RW, 0xB5, std::mem::size_of::<PlaneRes>());
const GET_PLANE: u64 = ioc(RW, 0xB6, std::mem::size_of::<GetPlane>());
const GET_FB: u64 = ioc(RW, 0xAD, std::mem::size_of::<FbCmd>());
const PRIME_HANDLE_TO_FD: u64 = ioc(RW, 0x2D, std::mem::size_of::<PrimeHandle>());
const GEM_CLOSE: u64 = ioc(W, 0x09, std::mem::size_of::<GemClose>());
/// `DMA_BUF_IOCTL_SYNC`: `_IOW('b', 0, u64)`.
const DMA_BUF_SYNC: u64 = (1 << 30) | (8 << 16) | ((b'b' as u64) << 8);
const DMA_BUF_SYNC_READ: u64 = 1;
const DMA_BUF_SYNC_END: u64 = 4;
const CLIENT_CAP_UNIVERSAL_PLANES: u64 = 2;

/// The DRM cards of this machine (`/dev/dri/card*`), sorted.
pub fn cards(dri: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dri)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("card"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A mapped scan-out framebuffer.
struct Mapped {
    fb_id: u32,
    dmabuf: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

/// KMS capture of one card's first shown primary plane.
pub struct KmsCapture {
    path: PathBuf,
    card: File,
    plane: u32,
    pub width: u32,
    pub height: u32,
    pitch: usize,
    mapped: Option<Mapped>,
}

// SAFETY: the mapping is only read through `&mut self`.
unsafe impl Send for KmsCapture {}

impl KmsCapture {
    /// Opens `device` (None: the first `/dev/dri/card*`) and finds what it shows.
    pub fn open(device: Option<&Path>) -> Result<KmsCapture, KmsError> {
        Self::open_in(Path::new("/dev/dri"), device)
    }

    fn open_in(dri: &Path, device: Option<&Path>) -> Result<KmsCapture, KmsError> {
        let path = match device {
            Some(d) => d.to_path_buf(),
            None => cards(dri)
                .into_iter()
                .next()
                .ok_or_else(|| KmsError::NoDevice(dri.display().to_string()))?,
        };
        let card = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| KmsError::Open {
                path: path.clone(),
                source,
            })?;
        let mut k = KmsCapture {
            path,
            card,
            plane: 0,
            width: 0,
            height: 0,
            pitch: 0,
            mapped: None,
        };
        let mut cap = SetClientCap {
            capability: CLIENT_CAP_UNIVERSAL_PLANES,
            value: 1,
        };
        k.ioctl(SET_CLIENT_CAP, &mut cap, "universal planes", "")?;
        let mut res = PlaneRes::default();
        k.ioctl(GET_PLANE_RESOURCES, &mut res, "plane resources", "")?;
        let mut ids = vec![0u32; res.count_planes as usize];
        res.plane_id_ptr = ids.as_mut_ptr() as u64;
        k.ioctl(GET_PLANE_RESOURCES, &mut res, "plane resources", "")?;
        ids.truncate(res.count_planes as usize);
        for id in ids {
            let mut p = GetPlane {
                plane_id: id,
                ..Default::default()
            };
            if k.ioctl(GET_PLANE, &mut p, "plane", "").is_ok() && p.fb_id != 0 && p.crtc_id != 0 {
                k.plane = id;
                k.map(p.fb_id)?;
                return Ok(k);
            }
        }
        Err(KmsError::NothingShown {
            path: k.path.clone(),
        })
    }

    fn ioctl<T>(
        &self,
        req: u64,
        arg: &mut T,
        what: &'static str,
        hint: &'static str,
    ) -> Result<(), KmsError> {
        // SAFETY: `arg` is the repr(C) struct this request reads and writes.
        let r = unsafe { libc::ioctl(self.card.as_raw_fd(), req as _, arg as *mut T) };
        if r < 0 {
            return Err(KmsError::Ioctl {
                path: self.path.clone(),
                what,
                source: std::io::Error::last_os_error(),
                hint,
            });
        }
        Ok(())
    }

    /// Exports and maps framebuffer `fb_id`.
    fn map(&mut self, fb_id: u32) -> Result<(), KmsError> {
        let mut fb = FbCmd {
            fb_id,
            ..Default::default()
        };
        let root = " (exporting another client's framebuffer needs CAP_SYS_ADMIN: run as root)";
        self.ioctl(GET_FB, &mut fb, "framebuffer", root)?;
        if fb.handle == 0 {
            return Err(KmsError::Ioctl {
                path: self.path.clone(),
                what: "framebuffer handle",
                source: std::io::Error::from_raw_os_error(libc::EPERM),
                hint: root,
            });
        }
        let mut prime = PrimeHandle {
            handle: fb.handle,
            flags: libc::O_CLOEXEC as u32,
            fd: -1,
        };
        let exported = self.ioctl(PRIME_HANDLE_TO_FD, &mut prime, "DMA-BUF export", "");
        let mut close = GemClose {
            handle: fb.handle,
            pad: 0,
        };
        let _ = self.ioctl(GEM_CLOSE, &mut close, "GEM close", "");
        exported?;
        // SAFETY: the kernel just gave this process the new fd.
        let dmabuf = unsafe { OwnedFd::from_raw_fd(prime.fd) };
        if fb.bpp != 32 || fb.width == 0 || fb.height == 0 {
            return Err(KmsError::Layout {
                path: self.path.clone(),
                bpp: fb.bpp,
                depth: fb.depth,
            });
        }
        let len = fb.pitch as usize * fb.height as usize;
        // SAFETY: mapping the DMA-BUF read-only for its size; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                dmabuf.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(KmsError::Ioctl {
                path: self.path.clone(),
                what: "DMA-BUF mmap",
                source: std::io::Error::last_os_error(),
                hint: " (this driver does not map its scan-out buffers)",
            });
        }
        self.unmap();
        (self.width, self.height, self.pitch) = (fb.width, fb.height, fb.pitch as usize);
        self.mapped = Some(Mapped {
            fb_id,
            dmabuf,
            ptr: ptr.cast(),
            len,
        });
        Ok(())
    }

    fn unmap(&mut self) {
        if let Some(m) = self.mapped.take() {
            // SAFETY: unmapping what `map` mapped.
            unsafe { libc::munmap(m.ptr.cast(), m.len) };
        }
    }

    /// Copies the frame shown now into `out` as BGRA rows of `width * 4` bytes (XRGB8888 in
    /// memory is B, G, R, X), following page flips to the plane's current framebuffer.
    pub fn grab(&mut self, out: &mut Vec<u8>) -> Result<(u32, u32), KmsError> {
        let mut p = GetPlane {
            plane_id: self.plane,
            ..Default::default()
        };
        self.ioctl(GET_PLANE, &mut p, "plane", "")?;
        if p.fb_id == 0 {
            return Err(KmsError::NothingShown {
                path: self.path.clone(),
            });
        }
        if self.mapped.as_ref().map(|m| m.fb_id) != Some(p.fb_id) {
            self.map(p.fb_id)?;
        }
        let Some(m) = self.mapped.as_ref() else {
            return Err(KmsError::NothingShown {
                path: self.path.clone(),
            });
        };
        let sync = |flags: u64| {
            let mut f = flags;
            // SAFETY: DMA_BUF_IOCTL_SYNC takes a u64 of flags.
            unsafe { libc::ioctl(m.dmabuf.as_raw_fd(), DMA_BUF_SYNC as _, &mut f as *mut u64) };
        };
        sync(DMA_BUF_SYNC_READ);
        let row = self.width as usize * 4;
        out.resize(row * self.height as usize, 0);
        // SAFETY: the mapping holds `pitch * height` bytes and row ≤ pitch.
        let src = unsafe { std::slice::from_raw_parts(m.ptr, m.len) };
        for y in 0..self.height as usize {
            out[y * row..(y + 1) * row].copy_from_slice(&src[y * self.pitch..y * self.pitch + row]);
        }
        sync(DMA_BUF_SYNC_READ | DMA_BUF_SYNC_END);
        Ok((self.width, self.height))
    }

    /// The card being captured.
    pub fn device(&self) -> &Path {
        &self.path
    }
}

impl Drop for KmsCapture {
    fn drop(&mut self) {
        self.unmap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_without_dri_gets_an_error_that_says_what_kms_needs() {
        let e = KmsCapture::open_in(Path::new("/nonexistent/dri"), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no DRM device"), "{e}");
        assert!(e.contains("/nonexistent/dri"), "{e}");
        assert!(e.contains("untether run"), "{e}");
    }

    #[test]
    fn a_card_that_cannot_be_opened_is_named() {
        let e = KmsCapture::open(Some(Path::new("/nonexistent/card7")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot open /nonexistent/card7"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_a_drm_card_fails_at_its_first_ioctl() {
        // /dev/null opens but is no DRM device: the first ioctl fails, named.
        let e = KmsCapture::open(Some(Path::new("/dev/null")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("/dev/null: universal planes"), "{e}");
    }

    #[test]
    fn the_ioctl_numbers_are_the_kernels() {
        // From drm.h / drm_mode.h / dma-buf.h, as the C macros compute them on x86-64.
        assert_eq!(GET_FB, 0xC01C_64AD);
        assert_eq!(GET_PLANE, 0xC020_64B6);
        assert_eq!(GET_PLANE_RESOURCES, 0xC010_64B5);
        assert_eq!(PRIME_HANDLE_TO_FD, 0xC00C_642D);
        assert_eq!(SET_CLIENT_CAP, 0x4010_640D);
        assert_eq!(GEM_CLOSE, 0x4008_6409);
        assert_eq!(DMA_BUF_SYNC, 0x4008_6200);
    }
}
