//! Hardware video: which devices this machine has (`/dev/dri` render nodes, an NVIDIA GPU,
//! V4L2 memory-to-memory devices) and FFmpeg's device and frame contexts on them.
//!
//! Every hardware path checks its device first, so that a machine without one gets a line
//! naming the device that is missing (not FFmpeg's error from deep inside a driver).

use std::ffi::CString;
use std::path::{Path, PathBuf};

use ffmpeg_next as ff;
use ffmpeg_next::ffi;

/// A hardware device that is missing or cannot be opened; the message names the device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HwError {
    /// No `/dev/nvidiactl`.
    #[error("no NVIDIA GPU: /dev/nvidiactl is missing")]
    NoNvidiaGpu,
    /// `/dev/nvidiactl` is there but the driver's library does not load.
    #[error("the NVIDIA driver's libcuda.so.1 does not load (install the driver)")]
    NoLibcuda,
    /// No `/dev/dri/renderD*`.
    #[error("no GPU render node: /dev/dri/renderD* is missing")]
    NoRenderNode,
    /// No `/dev/video*`.
    #[error("no V4L2 device: /dev/video* is missing")]
    NoV4l2Device,
    /// Neither a render node nor an NVIDIA GPU.
    #[error("no GPU: neither /dev/dri/renderD* nor /dev/nvidiactl")]
    NoGpu,
    /// The device path has a NUL byte.
    #[error("bad device name")]
    BadDeviceName,
    /// FFmpeg cannot open the device.
    #[error("{} on {device}: FFmpeg cannot open it: {error}", .kind.name())]
    Open {
        kind: HwKind,
        /// The device node or name.
        device: String,
        error: ff::Error,
    },
    /// FFmpeg cannot allocate a frames context.
    #[error("cannot allocate hardware frames")]
    FramesAlloc,
    /// FFmpeg cannot make frames of this size on the device.
    #[error("cannot make {width}x{height} {format} frames on {}: {error}", .kind.name())]
    Frames {
        kind: HwKind,
        /// Their layout in memory (NV12, BGR0, …).
        format: String,
        width: u32,
        height: u32,
        error: ff::Error,
    },
}

impl From<HwError> for crate::MediaError {
    /// A missing or unopenable device is [`crate::MediaError::Unavailable`] (callers fall back
    /// on it), in the same words.
    fn from(e: HwError) -> Self {
        crate::MediaError::Unavailable(e.to_string())
    }
}

/// A kind of device a hardware encoder or decoder needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceNeed {
    /// An NVIDIA GPU with its driver (`/dev/nvidiactl`, `libcuda.so.1`).
    Nvidia,
    /// A DRM render node (`/dev/dri/renderD*`): Intel or AMD GPUs through VA-API / Quick Sync /
    /// AMF, or a SoC's DRM device.
    Dri,
    /// A V4L2 device (`/dev/video*`): a SoC's memory-to-memory codec (Raspberry Pi).
    Video,
    /// Any GPU (VDPAU: NVIDIA or a Mesa driver, on an X display).
    AnyGpu,
}

impl DeviceNeed {
    /// The device in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            DeviceNeed::Nvidia => "an NVIDIA GPU (/dev/nvidiactl and libcuda.so.1)",
            DeviceNeed::Dri => "a DRM render node (/dev/dri/renderD*)",
            DeviceNeed::Video => "a V4L2 memory-to-memory device (/dev/video*)",
            DeviceNeed::AnyGpu => "a GPU (/dev/dri/renderD* or /dev/nvidiactl)",
        }
    }

    /// The device found (its path), or why there is none.
    pub fn find(self) -> Result<String, HwError> {
        match self {
            DeviceNeed::Nvidia => {
                if !Path::new("/dev/nvidiactl").exists() {
                    return Err(HwError::NoNvidiaGpu);
                }
                if !library_loads("libcuda.so.1") {
                    return Err(HwError::NoLibcuda);
                }
                Ok("/dev/nvidiactl".into())
            }
            DeviceNeed::Dri => render_nodes()
                .into_iter()
                .next()
                .map(|p| p.display().to_string())
                .ok_or(HwError::NoRenderNode),
            DeviceNeed::Video => video_devices()
                .into_iter()
                .next()
                .map(|p| p.display().to_string())
                .ok_or(HwError::NoV4l2Device),
            DeviceNeed::AnyGpu => DeviceNeed::Dri
                .find()
                .or_else(|_| DeviceNeed::Nvidia.find())
                .map_err(|_| HwError::NoGpu),
        }
    }
}

/// Files in `dir` whose name starts with `prefix`, sorted.
fn devices(dir: &str, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// DRM render nodes (`/dev/dri/renderD128`, …).
pub fn render_nodes() -> Vec<PathBuf> {
    devices("/dev/dri", "renderD")
}

/// V4L2 devices (`/dev/video0`, …).
pub fn video_devices() -> Vec<PathBuf> {
    devices("/dev", "video")
}

/// NVIDIA device nodes (`/dev/nvidia0`, `/dev/nvidiactl`, …).
pub fn nvidia_devices() -> Vec<PathBuf> {
    devices("/dev", "nvidia")
}

/// Whether a shared library loads (dlopen).
pub fn library_loads(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: dlopen with a valid C string; the handle is closed at once.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            false
        } else {
            libc::dlclose(h);
            true
        }
    }
}

/// FFmpeg's hardware device types untether uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HwKind {
    Vaapi,
    Cuda,
    Vdpau,
    Drm,
    Qsv,
}

impl HwKind {
    pub fn name(self) -> &'static str {
        match self {
            HwKind::Vaapi => "vaapi",
            HwKind::Cuda => "cuda",
            HwKind::Vdpau => "vdpau",
            HwKind::Drm => "drm",
            HwKind::Qsv => "qsv",
        }
    }

    pub fn av_type(self) -> ffi::AVHWDeviceType {
        use ffi::AVHWDeviceType as T;
        match self {
            HwKind::Vaapi => T::AV_HWDEVICE_TYPE_VAAPI,
            HwKind::Cuda => T::AV_HWDEVICE_TYPE_CUDA,
            HwKind::Vdpau => T::AV_HWDEVICE_TYPE_VDPAU,
            HwKind::Drm => T::AV_HWDEVICE_TYPE_DRM,
            HwKind::Qsv => T::AV_HWDEVICE_TYPE_QSV,
        }
    }

    /// The hardware pixel format of this device's frames.
    pub fn pixel(self) -> ffi::AVPixelFormat {
        use ffi::AVPixelFormat as P;
        match self {
            HwKind::Vaapi => P::AV_PIX_FMT_VAAPI,
            HwKind::Cuda => P::AV_PIX_FMT_CUDA,
            HwKind::Vdpau => P::AV_PIX_FMT_VDPAU,
            HwKind::Drm => P::AV_PIX_FMT_DRM_PRIME,
            HwKind::Qsv => P::AV_PIX_FMT_QSV,
        }
    }

    /// The device it needs.
    pub fn need(self) -> DeviceNeed {
        match self {
            HwKind::Vaapi | HwKind::Drm | HwKind::Qsv => DeviceNeed::Dri,
            HwKind::Cuda => DeviceNeed::Nvidia,
            HwKind::Vdpau => DeviceNeed::AnyGpu,
        }
    }
}

/// An FFmpeg hardware device context (a reference; dropped with the last user).
pub struct HwDevice {
    ptr: *mut ffi::AVBufferRef,
    kind: HwKind,
    /// The device node or name it was opened on.
    pub device: String,
}

// SAFETY: an AVBufferRef to a device context is reference counted and thread safe to hand
// over; we only unref it in Drop.
unsafe impl Send for HwDevice {}

impl HwDevice {
    /// Opens a device of `kind`: checks the device node first (the error names it), then asks
    /// FFmpeg (the error carries FFmpeg's reason).
    pub fn open(kind: HwKind) -> Result<HwDevice, HwError> {
        let found = kind.need().find()?;
        super::init_ffmpeg();
        // VA-API and DRM open the render node; QSV opens the hardware implementation on it;
        // CUDA and VDPAU their default device.
        let (device, opts): (Option<String>, Vec<(&str, String)>) = match kind {
            HwKind::Vaapi | HwKind::Drm => (Some(found.clone()), vec![]),
            HwKind::Qsv => (Some("hw".into()), vec![("child_device", found.clone())]),
            HwKind::Cuda | HwKind::Vdpau => (None, vec![]),
        };
        let c_device = device
            .as_deref()
            .map(CString::new)
            .transpose()
            .map_err(|_| HwError::BadDeviceName)?;
        let mut dict = ff::Dictionary::new();
        for (k, v) in &opts {
            dict.set(k, v);
        }
        let mut ptr: *mut ffi::AVBufferRef = std::ptr::null_mut();
        // SAFETY: FFmpeg allocates the context into `ptr`; the dictionary is ours and freed
        // after the call.
        let rc = unsafe {
            let mut d = dict.disown();
            let rc = ffi::av_hwdevice_ctx_create(
                &mut ptr,
                kind.av_type(),
                c_device.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                d,
                0,
            );
            ffi::av_dict_free(&mut d);
            rc
        };
        if rc < 0 || ptr.is_null() {
            return Err(HwError::Open {
                kind,
                device: found,
                error: ff::Error::from(rc),
            });
        }
        Ok(HwDevice {
            ptr,
            kind,
            device: found,
        })
    }

    pub fn kind(&self) -> HwKind {
        self.kind
    }

    /// The AVBufferRef (borrowed: take a reference with `av_buffer_ref` to keep it).
    pub fn as_ptr(&self) -> *mut ffi::AVBufferRef {
        self.ptr
    }
}

impl Drop for HwDevice {
    fn drop(&mut self) {
        // SAFETY: our reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.ptr) };
    }
}

/// A pool of hardware frames (NV12 in system memory uploaded once per picture).
pub struct HwFrames {
    ptr: *mut ffi::AVBufferRef,
}

// SAFETY: reference counted, released in Drop only.
unsafe impl Send for HwFrames {}

impl HwFrames {
    /// Frames of `width`×`height` on `device`, uploaded from NV12.
    pub fn new(device: &HwDevice, width: u32, height: u32) -> Result<HwFrames, HwError> {
        Self::with_format(
            device,
            ffi::AVPixelFormat::AV_PIX_FMT_NV12,
            width,
            height,
            8,
        )
    }

    /// Frames of `sw_format` (their layout in memory), `pool` of them made up front (0: made
    /// as needed, or never, for frames only mapped onto, as DMA-BUF imports are).
    pub fn with_format(
        device: &HwDevice,
        sw_format: ffi::AVPixelFormat,
        width: u32,
        height: u32,
        pool: i32,
    ) -> Result<HwFrames, HwError> {
        // SAFETY: standard hwframe context set-up on a device reference we hold; every field
        // written belongs to the AVHWFramesContext FFmpeg allocated.
        unsafe {
            let mut ptr = ffi::av_hwframe_ctx_alloc(device.as_ptr());
            if ptr.is_null() {
                return Err(HwError::FramesAlloc);
            }
            let ctx = (*ptr).data as *mut ffi::AVHWFramesContext;
            (*ctx).format = device.kind().pixel();
            (*ctx).sw_format = sw_format;
            (*ctx).width = width as i32;
            (*ctx).height = height as i32;
            (*ctx).initial_pool_size = pool;
            let rc = ffi::av_hwframe_ctx_init(ptr);
            if rc < 0 {
                ffi::av_buffer_unref(&mut ptr);
                return Err(HwError::Frames {
                    kind: device.kind(),
                    format: pixel_name(sw_format),
                    width,
                    height,
                    error: ff::Error::from(rc),
                });
            }
            Ok(HwFrames { ptr })
        }
    }

    pub fn as_ptr(&self) -> *mut ffi::AVBufferRef {
        self.ptr
    }
}

/// FFmpeg's name of a pixel format (`nv12`, `bgr0`), upper case.
fn pixel_name(p: ffi::AVPixelFormat) -> String {
    // SAFETY: av_get_pix_fmt_name returns a static string or null.
    let name = unsafe { ffi::av_get_pix_fmt_name(p) };
    if name.is_null() {
        return format!("{p:?}");
    }
    // SAFETY: a static, NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .to_uppercase()
}

impl Drop for HwFrames {
    fn drop(&mut self) {
        // SAFETY: our reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.ptr) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_are_unchanged() {
        assert_eq!(
            HwError::Frames {
                kind: HwKind::Vaapi,
                format: pixel_name(ffi::AVPixelFormat::AV_PIX_FMT_NV12),
                width: 1920,
                height: 1080,
                error: ff::Error::Bug,
            }
            .to_string(),
            format!(
                "cannot make 1920x1080 NV12 frames on vaapi: {}",
                ff::Error::Bug
            )
        );
        assert_eq!(
            HwError::Open {
                kind: HwKind::Cuda,
                device: "/dev/nvidiactl".into(),
                error: ff::Error::Bug,
            }
            .to_string(),
            format!(
                "cuda on /dev/nvidiactl: FFmpeg cannot open it: {}",
                ff::Error::Bug
            )
        );
    }

    use super::*;

    #[test]
    fn a_missing_device_is_named_before_ffmpeg_is_asked() {
        // This box has no GPU; on one that has, the device opens or FFmpeg says why.
        for kind in [HwKind::Vaapi, HwKind::Cuda, HwKind::Qsv, HwKind::Drm] {
            match HwDevice::open(kind) {
                Ok(d) => assert!(!d.device.is_empty()),
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        e.contains("/dev/") || e.contains("libcuda") || e.contains("FFmpeg"),
                        "{kind:?}: {e}"
                    )
                }
            }
        }
        assert!(DeviceNeed::Nvidia.describe().contains("NVIDIA"));
        // Typed: the missing device is the variant, whatever this machine has.
        match DeviceNeed::Nvidia.find() {
            Ok(dev) => assert_eq!(dev, "/dev/nvidiactl"),
            Err(e) => assert!(
                matches!(e, HwError::NoNvidiaGpu | HwError::NoLibcuda),
                "{e}"
            ),
        }
        if let Err(e) = DeviceNeed::AnyGpu.find() {
            assert_eq!(e, HwError::NoGpu);
        }
        assert!(!library_loads("libdoes-not-exist.so.7"));
    }
}
