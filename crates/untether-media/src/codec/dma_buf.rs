//! Zero-copy encode: pictures that stay in GPU memory, handed to the encoder as DMA-BUFs
//! ([`DmaBufPicture`]: DRM fourcc, format modifier, per plane a borrowed dma-buf fd, offset and
//! pitch), and the VA-API path that encodes them without a CPU copy ([`VaapiDmaBufImport`]).
//!
//! The path is FFmpeg's kmsgrab recipe (`hwmap=derive_device=vaapi,scale_vaapi=format=nv12`),
//! on the encoder's own VA-API device:
//! 1. the picture becomes a DRM PRIME frame (`AV_PIX_FMT_DRM_PRIME`, `data[0]` an
//!    `AVDRMFrameDescriptor` naming the dma-bufs; [`drm_prime_frame`]);
//! 2. `av_hwframe_map` onto a VAAPI frames context of the picture's format imports it as a VA
//!    surface (`vaCreateSurfaces` with `VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME`: no copy);
//! 3. `scale_vaapi=format=nv12` (VA-API's video processor, on the GPU) converts it to NV12,
//!    BT.601 limited range like every other path;
//! 4. the `*_vaapi` encoder reads that surface.
//!
//! FFmpeg 5.1 (Debian 12) imports with the legacy DRM PRIME memory type, which carries no
//! modifier and one object: VA-API takes linear ([`DRM_FORMAT_MOD_LINEAR`]) single-object
//! buffers only ([`DmaBufPicture::check_vaapi`] says so before any device is opened).
//!
//! **Untested on real hardware**: no machine available has a VA-API driver (the dev box has
//! no `/dev/dri`; the lent GPU machines are NVIDIA H100/H200 without NVENC or VA-API). What is
//! tested: the descriptor (a memfd-backed picture read back through FFmpeg's DRM frames, as a
//! dma-buf would be), every refusal, and the missing render node.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use ffmpeg_next as ff;
use ffmpeg_next::ffi;

use super::hw::{HwDevice, HwFrames, HwKind};
use crate::zero_copy::egl_image::{fourcc_name, DRM_FORMAT_NV12};
use crate::{MediaError, Result};

/// DRM fourccs of the packed RGB formats (drm_fourcc.h); the name is the order in a
/// little-endian 32-bit word: XRGB8888 is B, G, R, X in memory (Vulkan's `B8G8R8A8`).
pub const DRM_FORMAT_XRGB8888: u32 = u32::from_le_bytes(*b"XR24");
pub const DRM_FORMAT_ARGB8888: u32 = u32::from_le_bytes(*b"AR24");
pub const DRM_FORMAT_XBGR8888: u32 = u32::from_le_bytes(*b"XB24");
pub const DRM_FORMAT_ABGR8888: u32 = u32::from_le_bytes(*b"AB24");
/// The linear layout (rows one after the other, `pitch` bytes apart).
pub const DRM_FORMAT_MOD_LINEAR: u64 = 0;
/// Planes a DMA-BUF picture may have (`AV_DRM_MAX_PLANES`).
pub const MAX_PLANES: usize = 4;

/// One plane of a DMA-BUF picture: the dma-buf it lies in (borrowed: the owner keeps it open
/// while the picture is in use), where it starts and its bytes per row.
#[derive(Clone, Copy, Debug)]
pub struct DmaBufPlane<'a> {
    pub fd: BorrowedFd<'a>,
    pub offset: u32,
    pub pitch: u32,
}

/// A picture in GPU memory, described as DMA-BUFs: what `VK_EXT_external_memory_dma_buf`
/// exports or `EGL_MESA_image_dma_buf_export` gives. Planes that share an fd share one
/// object. Read in place by [`VaapiDmaBufImport`]; never mapped by the CPU here.
#[derive(Clone, Copy, Debug)]
pub struct DmaBufPicture<'a> {
    pub width: u32,
    pub height: u32,
    /// DRM fourcc: [`DRM_FORMAT_XRGB8888`] and the other packed RGB formats, or NV12.
    pub fourcc: u32,
    /// DRM format modifier ([`DRM_FORMAT_MOD_LINEAR`], a vendor tiling, or
    /// `DRM_FORMAT_MOD_INVALID` for the driver's implicit layout).
    pub modifier: u64,
    /// The planes in order; `None` after the last.
    pub planes: [Option<DmaBufPlane<'a>>; MAX_PLANES],
}

/// A DMA-BUF picture the encoder cannot take, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmaBufError {
    /// A fourcc this path has no layout for.
    #[error("DMA-BUF: format {} is not one the encoder takes (XRGB8888, ARGB8888, XBGR8888, ABGR8888, NV12)", fourcc_name(*.0))]
    Format(u32),
    /// Fewer or more planes than the format has.
    #[error("DMA-BUF: format {} has {want} plane(s), the picture gives {got}", fourcc_name(*.fourcc))]
    Planes {
        fourcc: u32,
        want: usize,
        got: usize,
    },
    /// A row does not fit in its pitch.
    #[error("DMA-BUF: plane {plane}'s pitch {pitch} is below the {min} bytes of a row")]
    Pitch { plane: usize, pitch: u32, min: u64 },
    /// A plane ends beyond its dma-buf.
    #[error("DMA-BUF: plane {plane} needs {need} bytes, its dma-buf has {size}")]
    Extent { plane: usize, need: u64, size: u64 },
    /// A modifier FFmpeg 5.1's VA-API import cannot pass on.
    #[error("DMA-BUF: modifier {0:#x} is not linear: FFmpeg 5.1 imports into VA-API without a modifier (linear buffers only)")]
    Modifier(u64),
    /// More than one dma-buf: FFmpeg's VA-API import takes one object.
    #[error("DMA-BUF: {0} dma-bufs: FFmpeg's VA-API import takes a picture in one dma-buf")]
    Objects(usize),
}

impl From<DmaBufError> for MediaError {
    fn from(e: DmaBufError) -> Self {
        MediaError::Other(e.to_string())
    }
}

/// A format: its planes (bytes per pixel, horizontal and vertical subsampling) and FFmpeg's
/// pixel format for the same bytes.
struct Layout {
    planes: &'static [(u64, u32, u32)],
    pixel: ffi::AVPixelFormat,
}

fn layout(fourcc: u32) -> Option<Layout> {
    use ffi::AVPixelFormat as P;
    const PACKED: &[(u64, u32, u32)] = &[(4, 1, 1)];
    let (planes, pixel) = match fourcc {
        DRM_FORMAT_XRGB8888 => (PACKED, P::AV_PIX_FMT_BGR0),
        DRM_FORMAT_ARGB8888 => (PACKED, P::AV_PIX_FMT_BGRA),
        DRM_FORMAT_XBGR8888 => (PACKED, P::AV_PIX_FMT_RGB0),
        DRM_FORMAT_ABGR8888 => (PACKED, P::AV_PIX_FMT_RGBA),
        DRM_FORMAT_NV12 => (&[(1, 1, 1), (2, 2, 2)][..], P::AV_PIX_FMT_NV12),
        _ => return None,
    };
    Some(Layout { planes, pixel })
}

impl<'a> DmaBufPicture<'a> {
    /// A picture in one plane (the packed RGB formats).
    pub fn packed(
        width: u32,
        height: u32,
        fourcc: u32,
        modifier: u64,
        plane: DmaBufPlane<'a>,
    ) -> DmaBufPicture<'a> {
        DmaBufPicture {
            width,
            height,
            fourcc,
            modifier,
            planes: [Some(plane), None, None, None],
        }
    }

    /// The planes, in order.
    pub fn planes(&self) -> impl Iterator<Item = &DmaBufPlane<'a>> {
        self.planes.iter().map_while(Option::as_ref)
    }

    /// FFmpeg's pixel format of the same bytes (None: a fourcc this path does not take).
    pub fn pixel_format(&self) -> Option<ffi::AVPixelFormat> {
        layout(self.fourcc).map(|l| l.pixel)
    }

    /// Checks the size, the format, the planes and their pitches (every row fits), and that
    /// each plane lies within its dma-buf where the dma-buf's size can be read.
    pub fn check(&self) -> Result<()> {
        crate::frame::check_size(self.width, self.height)?;
        let l = layout(self.fourcc).ok_or(DmaBufError::Format(self.fourcc))?;
        let n = self.planes().count();
        if n != l.planes.len() {
            return Err(DmaBufError::Planes {
                fourcc: self.fourcc,
                want: l.planes.len(),
                got: n,
            }
            .into());
        }
        for (i, (p, &(bpp, sx, sy))) in self.planes().zip(l.planes).enumerate() {
            let row = u64::from(self.width.div_ceil(sx)) * bpp;
            if u64::from(p.pitch) < row {
                return Err(DmaBufError::Pitch {
                    plane: i,
                    pitch: p.pitch,
                    min: row,
                }
                .into());
            }
            let rows = u64::from(self.height.div_ceil(sy));
            let need = u64::from(p.offset) + (rows - 1) * u64::from(p.pitch) + row;
            if let Some(size) = dma_buf_size(p.fd) {
                if need > size {
                    return Err(DmaBufError::Extent {
                        plane: i,
                        need,
                        size,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// [`check`](Self::check), and what FFmpeg 5.1's VA-API import needs besides: one
    /// dma-buf, a linear layout.
    pub fn check_vaapi(&self) -> Result<()> {
        self.check()?;
        check_vaapi_layout(self.fourcc, self.modifier)?;
        let objects = self.descriptor().nb_objects;
        if objects != 1 {
            return Err(DmaBufError::Objects(objects.max(0) as usize).into());
        }
        Ok(())
    }

    /// The DRM PRIME descriptor of this picture: one object per distinct fd (its size read
    /// from the dma-buf, else the extent its planes use), one layer of the picture's fourcc.
    pub fn descriptor(&self) -> ffi::AVDRMFrameDescriptor {
        // SAFETY: AVDRMFrameDescriptor is plain data (integers and arrays of them); all zeros
        // is a valid empty descriptor.
        let mut d: ffi::AVDRMFrameDescriptor = unsafe { std::mem::zeroed() };
        let rows = |i: usize| {
            let sy = layout(self.fourcc)
                .and_then(|l| l.planes.get(i).map(|p| p.2))
                .unwrap_or(1);
            u64::from(self.height.div_ceil(sy))
        };
        let mut fds: Vec<i32> = Vec::new();
        let layer = &mut d.layers[0];
        layer.format = self.fourcc;
        for (i, p) in self.planes().enumerate() {
            let fd = p.fd.as_raw_fd();
            let object = match fds.iter().position(|&f| f == fd) {
                Some(o) => o,
                None => {
                    fds.push(fd);
                    fds.len() - 1
                }
            };
            layer.planes[i].object_index = object as i32;
            layer.planes[i].offset = p.offset as isize;
            layer.planes[i].pitch = p.pitch as isize;
            layer.nb_planes = i as i32 + 1;
            let end = u64::from(p.offset) + rows(i) * u64::from(p.pitch);
            let o = &mut d.objects[object];
            o.fd = fd;
            o.size = o.size.max(end as usize);
            o.format_modifier = self.modifier;
        }
        for (o, &fd) in d.objects.iter_mut().zip(&fds) {
            // SAFETY: fd is a borrowed, open descriptor (BorrowedFd) for the whole call.
            if let Some(size) = dma_buf_size(unsafe { BorrowedFd::borrow_raw(fd) }) {
                o.size = o.size.max(size as usize);
            }
        }
        d.nb_objects = fds.len() as i32;
        d.nb_layers = 1;
        d
    }
}

/// Something the owner of a DMA-BUF picture's image watches: held by a [`DmaBufFrame`] until
/// the encoder is done with the picture (e.g. an `Arc<()>` whose count the owner reads
/// before it draws into the image again).
pub type KeepAlive = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// A DMA-BUF picture that owns its fds (duplicates of the owner's, one per distinct dma-buf)
/// and holds the owner's [`KeepAlive`], to travel to another thread (the host's encoder).
pub struct DmaBufFrame {
    pub width: u32,
    pub height: u32,
    pub fourcc: u32,
    pub modifier: u64,
    objects: Vec<OwnedFd>,
    /// Per plane: its object, offset and pitch.
    planes: Vec<(usize, u32, u32)>,
    _keep: Option<KeepAlive>,
}

impl std::fmt::Debug for DmaBufFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBufFrame")
            .field("size", &(self.width, self.height))
            .field("fourcc", &fourcc_name(self.fourcc))
            .field("modifier", &self.modifier)
            .field("objects", &self.objects)
            .field("planes", &self.planes)
            .finish()
    }
}

impl DmaBufFrame {
    /// `picture` with its fds duplicated (planes that share a dma-buf still share one) and
    /// `keep` held until this frame is dropped. The picture is checked first.
    pub fn dup(picture: &DmaBufPicture<'_>, keep: Option<KeepAlive>) -> Result<DmaBufFrame> {
        picture.check()?;
        let mut raw: Vec<i32> = Vec::new();
        let mut objects = Vec::new();
        let mut planes = Vec::new();
        for p in picture.planes() {
            let fd = p.fd.as_raw_fd();
            let object = match raw.iter().position(|&r| r == fd) {
                Some(o) => o,
                None => {
                    objects.push(p.fd.try_clone_to_owned().map_err(|e| {
                        MediaError::Other(format!("DMA-BUF: cannot duplicate fd {fd}: {e}"))
                    })?);
                    raw.push(fd);
                    objects.len() - 1
                }
            };
            planes.push((object, p.offset, p.pitch));
        }
        Ok(DmaBufFrame {
            width: picture.width,
            height: picture.height,
            fourcc: picture.fourcc,
            modifier: picture.modifier,
            objects,
            planes,
            _keep: keep,
        })
    }

    /// The picture, borrowing this frame's fds.
    pub fn picture(&self) -> DmaBufPicture<'_> {
        let mut planes = [None; MAX_PLANES];
        for (slot, &(object, offset, pitch)) in planes.iter_mut().zip(&self.planes) {
            *slot = self.objects.get(object).map(|fd| DmaBufPlane {
                fd: fd.as_fd(),
                offset,
                pitch,
            });
        }
        DmaBufPicture {
            width: self.width,
            height: self.height,
            fourcc: self.fourcc,
            modifier: self.modifier,
            planes,
        }
    }
}

/// A format and modifier FFmpeg 5.1's VA-API import takes (packed RGB or NV12, linear).
fn check_vaapi_layout(fourcc: u32, modifier: u64) -> std::result::Result<(), DmaBufError> {
    if layout(fourcc).is_none() {
        return Err(DmaBufError::Format(fourcc));
    }
    if modifier != DRM_FORMAT_MOD_LINEAR {
        return Err(DmaBufError::Modifier(modifier));
    }
    Ok(())
}

/// A dma-buf's size (`lseek(SEEK_END)`, which dma-bufs and memfds answer), None when the fd
/// cannot say.
fn dma_buf_size(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: lseek on a descriptor borrowed for the call; the position is put back at 0
    // (dma-bufs have no position that matters; memfds are read by offset).
    unsafe {
        let end = libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END);
        libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET);
        u64::try_from(end).ok().filter(|&s| s > 0)
    }
}

/// Frees a descriptor made by [`drm_prime_frame_keeping`], closing the fds it was given to
/// keep (`opaque`: a boxed `Vec<OwnedFd>`, or null when the fds are borrowed).
unsafe extern "C" fn free_descriptor(opaque: *mut libc::c_void, data: *mut u8) {
    if !opaque.is_null() {
        drop(Box::from_raw(opaque as *mut Vec<OwnedFd>));
    }
    ffi::av_free(data as *mut libc::c_void);
}

/// The picture as an FFmpeg DRM PRIME frame (`data[0]` its descriptor, kept alive by
/// `buf[0]`; the fds are borrowed: the frame must not outlive the picture's fds), on
/// `frames` when given (a DRM frames context, to download through; a reference is taken).
pub fn drm_prime_frame(
    picture: &DmaBufPicture<'_>,
    frames: Option<*mut ffi::AVBufferRef>,
) -> Result<ff::frame::Video> {
    drm_prime_frame_keeping(picture, frames, Vec::new())
}

/// [`drm_prime_frame`], the frame also owning `keep` (the picture's fds, closed when FFmpeg
/// frees the frame's descriptor): a picture whose dma-bufs live exactly as long as its frame.
pub(crate) fn drm_prime_frame_keeping(
    picture: &DmaBufPicture<'_>,
    frames: Option<*mut ffi::AVBufferRef>,
    keep: Vec<OwnedFd>,
) -> Result<ff::frame::Video> {
    picture.check()?;
    let descriptor = picture.descriptor();
    let oom = || MediaError::Other("out of memory (DRM PRIME descriptor)".into());
    let keep = if keep.is_empty() {
        std::ptr::null_mut()
    } else {
        Box::into_raw(Box::new(keep)) as *mut libc::c_void
    };
    // SAFETY: FFmpeg allocations checked for null; the descriptor is written before the frame
    // references it and freed (with `keep`) by the buffer's callback with the frame, or here
    // when the buffer could not be made; `frames`, when given, is a live reference of the
    // caller's, of which the frame takes its own.
    unsafe {
        let d = ffi::av_malloc(std::mem::size_of::<ffi::AVDRMFrameDescriptor>())
            as *mut ffi::AVDRMFrameDescriptor;
        if d.is_null() {
            free_descriptor(keep, std::ptr::null_mut());
            return Err(oom());
        }
        d.write(descriptor);
        let buf = ffi::av_buffer_create(
            d as *mut u8,
            std::mem::size_of::<ffi::AVDRMFrameDescriptor>(),
            Some(free_descriptor),
            keep,
            0,
        );
        if buf.is_null() {
            free_descriptor(keep, d as *mut u8);
            return Err(oom());
        }
        let mut f = ff::frame::Video::empty();
        let p = f.as_mut_ptr();
        (*p).buf[0] = buf;
        (*p).data[0] = d as *mut u8;
        (*p).format = ffi::AVPixelFormat::AV_PIX_FMT_DRM_PRIME as i32;
        (*p).width = picture.width as i32;
        (*p).height = picture.height as i32;
        if picture.fourcc != DRM_FORMAT_NV12 {
            // RGB has no studio range; NV12's range is the producer's (left unspecified).
            (*p).color_range = ffi::AVColorRange::AVCOL_RANGE_JPEG;
        }
        if let Some(frames) = frames {
            (*p).hw_frames_ctx = ffi::av_buffer_ref(frames);
            if (*p).hw_frames_ctx.is_null() {
                return Err(oom());
            }
        }
        Ok(f)
    }
}

/// The VA-API filter that converts the imported picture: NV12, BT.601 limited range (what the
/// encoders' other paths produce and the stream's header says).
pub const VPP_FILTER: &str = "scale_vaapi=format=nv12:out_color_matrix=bt601:out_range=limited";

/// DMA-BUF pictures of one format and size into NV12 VA surfaces on a VA-API device, on the
/// GPU: mapped (`av_hwframe_map`, no copy) and converted by [`VPP_FILTER`].
pub struct VaapiDmaBufImport {
    /// VAAPI frames of the picture's format, what the dma-bufs are mapped onto.
    map_frames: HwFrames,
    graph: ff::filter::Graph,
    fourcc: u32,
    width: u32,
    height: u32,
    /// Holds the device while the frames and graph use it.
    _device: Option<HwDevice>,
}

// SAFETY: the frames reference and the graph are owned by this value and used through &mut
// self only (the encoder thread that owns it).
unsafe impl Send for VaapiDmaBufImport {}

impl VaapiDmaBufImport {
    /// An import of `fourcc` pictures (linear, one dma-buf) of `width`×`height` on its own
    /// VA-API device: a machine without a render node gets [`super::hw::HwError::NoRenderNode`]'s
    /// line (`/dev/dri/renderD*`) as [`MediaError::Unavailable`].
    pub fn open(width: u32, height: u32, fourcc: u32, fps: u32) -> Result<VaapiDmaBufImport> {
        crate::frame::check_size(width, height)?;
        check_vaapi_layout(fourcc, DRM_FORMAT_MOD_LINEAR)?;
        let device = HwDevice::open(HwKind::Vaapi).map_err(MediaError::from)?;
        let mut import = Self::on(&device, width, height, fourcc, fps)?;
        import._device = Some(device);
        Ok(import)
    }

    /// The same on `device` (the encoder's: its surfaces must be the encoder's display's).
    pub fn on(
        device: &HwDevice,
        width: u32,
        height: u32,
        fourcc: u32,
        fps: u32,
    ) -> Result<VaapiDmaBufImport> {
        check_vaapi_layout(fourcc, DRM_FORMAT_MOD_LINEAR)?;
        if device.kind() != HwKind::Vaapi {
            return Err(MediaError::Unavailable(format!(
                "DMA-BUF import needs a VA-API device, not {}",
                device.kind().name()
            )));
        }
        let pixel = layout(fourcc)
            .map(|l| l.pixel)
            .ok_or(DmaBufError::Format(fourcc))?;
        let map_frames =
            HwFrames::with_format(device, pixel, width, height, 0).map_err(MediaError::from)?;
        let graph = vpp_graph(&map_frames, width, height, fps)?;
        Ok(VaapiDmaBufImport {
            map_frames,
            graph,
            fourcc,
            width,
            height,
            _device: None,
        })
    }

    /// The fourcc and size it takes.
    pub fn format(&self) -> (u32, u32, u32) {
        (self.fourcc, self.width, self.height)
    }

    /// Whether this import takes `picture`'s format and size.
    pub fn fits(&self, picture: &DmaBufPicture<'_>) -> bool {
        (picture.fourcc, picture.width, picture.height) == self.format()
    }

    /// The picture as an NV12 VA surface (a VAAPI frame), converted on the GPU. The dma-buf is
    /// read by the GPU until the encoder that takes this frame has finished with it: the
    /// caller keeps the picture unchanged until then (a packet out of the encoder means it
    /// has).
    pub fn convert(&mut self, picture: &DmaBufPicture<'_>) -> Result<ff::frame::Video> {
        picture.check_vaapi()?;
        if !self.fits(picture) {
            return Err(MediaError::InvalidSize {
                width: picture.width,
                height: picture.height,
                reason: format!(
                    "this DMA-BUF import takes {}x{} {}",
                    self.width,
                    self.height,
                    fourcc_name(self.fourcc)
                ),
            });
        }
        let drm = drm_prime_frame(picture, None)?;
        let mut mapped = ff::frame::Video::empty();
        // SAFETY: `mapped` is a fresh frame we own; it gets its own reference to our VAAPI
        // frames context; av_hwframe_map imports the descriptor's dma-buf as a VA surface
        // that `mapped` holds (and destroys when freed), keeping a reference to `drm`.
        let rc = unsafe {
            let m = mapped.as_mut_ptr();
            (*m).format = ffi::AVPixelFormat::AV_PIX_FMT_VAAPI as i32;
            (*m).hw_frames_ctx = ffi::av_buffer_ref(self.map_frames.as_ptr());
            if (*m).hw_frames_ctx.is_null() {
                return Err(MediaError::Other("out of memory (VAAPI frames)".into()));
            }
            let rc = ffi::av_hwframe_map(m, drm.as_ptr(), ffi::AV_HWFRAME_MAP_READ as i32);
            (*m).color_range = ffi::AVColorRange::AVCOL_RANGE_JPEG;
            (*m).colorspace = ffi::AVColorSpace::AVCOL_SPC_RGB;
            rc
        };
        if rc < 0 {
            return Err(MediaError::ffmpeg(
                "av_hwframe_map (DMA-BUF to VA-API surface)",
                ff::Error::from(rc),
            ));
        }
        let mut src = self
            .graph
            .get("in")
            .ok_or_else(|| MediaError::Other("VA-API filter graph: no source".into()))?;
        src.source()
            .add(&mapped)
            .map_err(|e| MediaError::ffmpeg("scale_vaapi input", e))?;
        let mut out = ff::frame::Video::empty();
        let mut sink = self
            .graph
            .get("out")
            .ok_or_else(|| MediaError::Other("VA-API filter graph: no sink".into()))?;
        sink.sink()
            .frame(&mut out)
            .map_err(|e| MediaError::ffmpeg("scale_vaapi output", e))?;
        Ok(out)
    }
}

/// `buffer` (VAAPI frames of the picture's format) → [`VPP_FILTER`] → `buffersink`.
fn vpp_graph(frames: &HwFrames, width: u32, height: u32, fps: u32) -> Result<ff::filter::Graph> {
    let err = |what: &'static str| move |e: ff::Error| MediaError::ffmpeg(what, e);
    let find = |name: &str| {
        ff::filter::find(name).ok_or_else(|| {
            MediaError::Unavailable(format!(
                "this FFmpeg build has no {name} filter (libavfilter with VA-API)"
            ))
        })
    };
    let mut graph = ff::filter::Graph::new();
    let args = format!(
        "video_size={width}x{height}:pix_fmt={}:time_base=1/{}:pixel_aspect=1/1",
        ffi::AVPixelFormat::AV_PIX_FMT_VAAPI as i32,
        fps.max(1)
    );
    let mut src = graph
        .add(&find("buffer")?, "in", &args)
        .map_err(err("VA-API filter graph: buffer"))?;
    // SAFETY: parameters allocated by FFmpeg (checked), given a new reference to our frames
    // context, copied into the source by av_buffersrc_parameters_set (which takes its own
    // reference), then freed with ours.
    unsafe {
        let par = ffi::av_buffersrc_parameters_alloc();
        if par.is_null() {
            return Err(MediaError::Other(
                "out of memory (buffersrc parameters)".into(),
            ));
        }
        (*par).hw_frames_ctx = ffi::av_buffer_ref(frames.as_ptr());
        let rc = ffi::av_buffersrc_parameters_set(src.as_mut_ptr(), par);
        ffi::av_buffer_unref(&mut (*par).hw_frames_ctx);
        ffi::av_free(par as *mut libc::c_void);
        if rc < 0 {
            return Err(MediaError::ffmpeg(
                "VA-API filter graph: source frames",
                ff::Error::from(rc),
            ));
        }
    }
    graph
        .add(&find("buffersink")?, "out", "")
        .map_err(err("VA-API filter graph: buffersink"))?;
    find("scale_vaapi")?;
    graph
        .output("in", 0)
        .and_then(|p| p.input("out", 0))
        .and_then(|p| p.parse(VPP_FILTER))
        .map_err(err("VA-API filter graph: scale_vaapi"))?;
    graph
        .validate()
        .map_err(err("VA-API filter graph: configure"))?;
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;

    /// A memfd holding `bytes` (a dma-buf stand-in: same lseek, same mmap).
    fn memfd(bytes: &[u8]) -> OwnedFd {
        // SAFETY: memfd_create with a valid name; the new fd is owned by the File.
        let fd = unsafe { libc::memfd_create(c"untether-dma-buf-test".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor we own.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        file.write_all(bytes).unwrap();
        file.into()
    }

    fn plane(fd: &OwnedFd, offset: u32, pitch: u32) -> DmaBufPlane<'_> {
        DmaBufPlane {
            fd: fd.as_fd(),
            offset,
            pitch,
        }
    }

    #[test]
    fn a_packed_picture_is_one_object_one_layer_with_the_dma_bufs_size() {
        let fd = memfd(&[0; 4096]);
        let p = DmaBufPicture::packed(
            16,
            8,
            DRM_FORMAT_XRGB8888,
            DRM_FORMAT_MOD_LINEAR,
            plane(&fd, 256, 128),
        );
        p.check_vaapi().unwrap();
        assert_eq!(p.pixel_format(), Some(ffi::AVPixelFormat::AV_PIX_FMT_BGR0));
        let d = p.descriptor();
        assert_eq!((d.nb_objects, d.nb_layers), (1, 1));
        assert_eq!(d.objects[0].fd, fd.as_raw_fd());
        assert_eq!(d.objects[0].size, 4096, "the dma-buf's own size");
        assert_eq!(d.objects[0].format_modifier, DRM_FORMAT_MOD_LINEAR);
        let l = &d.layers[0];
        assert_eq!((l.format, l.nb_planes), (DRM_FORMAT_XRGB8888, 1));
        assert_eq!(
            (
                l.planes[0].object_index,
                l.planes[0].offset,
                l.planes[0].pitch
            ),
            (0, 256, 128)
        );
    }

    #[test]
    fn planes_sharing_a_dma_buf_share_its_object() {
        let (a, b) = (memfd(&[0; 1024]), memfd(&[0; 1024]));
        fn nv12<'a>(y: &'a OwnedFd, uv: &'a OwnedFd, uv_offset: u32) -> DmaBufPicture<'a> {
            DmaBufPicture {
                width: 16,
                height: 16,
                fourcc: DRM_FORMAT_NV12,
                modifier: DRM_FORMAT_MOD_LINEAR,
                planes: [
                    Some(plane(y, 0, 16)),
                    Some(plane(uv, uv_offset, 16)),
                    None,
                    None,
                ],
            }
        }
        let one = nv12(&a, &a, 256);
        one.check_vaapi().unwrap();
        let d = one.descriptor();
        assert_eq!((d.nb_objects, d.layers[0].nb_planes), (1, 2));
        assert_eq!(d.layers[0].planes[1].object_index, 0);
        assert_eq!(d.layers[0].planes[1].offset, 256);
        let two = nv12(&a, &b, 0);
        two.check().unwrap();
        let d = two.descriptor();
        assert_eq!((d.nb_objects, d.layers[0].planes[1].object_index), (2, 1));
        let e = two.check_vaapi().unwrap_err().to_string();
        assert!(e.contains("one dma-buf"), "{e}");
    }

    #[test]
    fn an_owned_frame_keeps_the_layout_and_holds_the_owners_token() {
        let (a, b) = (memfd(&[0; 1024]), memfd(&[0; 1024]));
        let pic = DmaBufPicture {
            width: 16,
            height: 16,
            fourcc: DRM_FORMAT_NV12,
            modifier: DRM_FORMAT_MOD_LINEAR,
            planes: [Some(plane(&a, 0, 16)), Some(plane(&a, 256, 16)), None, None],
        };
        let token = std::sync::Arc::new(());
        let frame = DmaBufFrame::dup(&pic, Some(token.clone())).unwrap();
        assert_eq!(std::sync::Arc::strong_count(&token), 2, "held by the frame");
        let p = frame.picture();
        let d = p.descriptor();
        assert_eq!(d.nb_objects, 1, "planes of one dma-buf stay one object");
        assert_ne!(
            d.objects[0].fd,
            a.as_raw_fd(),
            "a duplicate, not the owner's fd"
        );
        assert_eq!(
            (d.layers[0].planes[1].offset, d.layers[0].nb_planes),
            (256, 2)
        );
        p.check_vaapi().unwrap();
        drop(frame);
        assert_eq!(
            std::sync::Arc::strong_count(&token),
            1,
            "let go with the frame"
        );
        let bad = DmaBufPicture {
            planes: [Some(plane(&b, 0, 8)), None, None, None],
            ..pic
        };
        assert!(DmaBufFrame::dup(&bad, None).is_err());
    }

    #[test]
    fn bad_pictures_are_refused_with_the_reason() {
        let fd = memfd(&[0; 4096]);
        let ok = DmaBufPicture::packed(
            16,
            8,
            DRM_FORMAT_XRGB8888,
            DRM_FORMAT_MOD_LINEAR,
            plane(&fd, 0, 64),
        );
        ok.check_vaapi().unwrap();
        let err = |p: DmaBufPicture<'_>| p.check_vaapi().unwrap_err().to_string();
        let e = err(DmaBufPicture {
            fourcc: u32::from_le_bytes(*b"YUYV"),
            ..ok
        });
        assert!(e.contains("format YUYV") && e.contains("XRGB8888"), "{e}");
        let e = err(DmaBufPicture {
            planes: [None; MAX_PLANES],
            ..ok
        });
        assert!(e.contains("1 plane(s), the picture gives 0"), "{e}");
        let e = err(DmaBufPicture::packed(
            16,
            8,
            DRM_FORMAT_XRGB8888,
            0,
            plane(&fd, 0, 60),
        ));
        assert!(e.contains("pitch 60 is below the 64 bytes"), "{e}");
        let e = err(DmaBufPicture::packed(
            16,
            8,
            DRM_FORMAT_XRGB8888,
            0,
            plane(&fd, 4000, 64),
        ));
        assert!(e.contains("needs 4512 bytes, its dma-buf has 4096"), "{e}");
        let e = err(DmaBufPicture {
            modifier: 0x0100_0000_0000_0002,
            ..ok
        });
        assert!(
            e.contains("modifier 0x100000000000002 is not linear"),
            "{e}"
        );
        let e = err(DmaBufPicture { width: 0, ..ok });
        assert!(e.contains("0x8"), "{e}");
    }

    #[test]
    fn the_descriptor_reads_back_as_the_picture_through_ffmpegs_drm_frames() {
        // A 6x4 BGRX picture at offset 64 with 32-byte rows (8 bytes of padding per row) on a
        // memfd: FFmpeg's DRM frames download it by mmap, as they would a dma-buf, so the
        // descriptor's offset, pitch and object are the picture's.
        let (w, h, offset, pitch) = (6u32, 4u32, 64usize, 32usize);
        let mut bytes = vec![0xEEu8; offset + pitch * h as usize];
        for y in 0..h as usize {
            for x in 0..w as usize {
                let px = &mut bytes[offset + y * pitch + x * 4..][..4];
                px.copy_from_slice(&[x as u8 * 10, y as u8 * 20, 200, 255]);
            }
        }
        let fd = memfd(&bytes);
        let pic = DmaBufPicture::packed(
            w,
            h,
            DRM_FORMAT_XRGB8888,
            DRM_FORMAT_MOD_LINEAR,
            plane(&fd, offset as u32, pitch as u32),
        );
        // SAFETY: a DRM frames context on no device (fd −1), released below.
        let mut frames = unsafe {
            crate::zero_copy::memfd::drm_frames(ffi::AVPixelFormat::AV_PIX_FMT_BGR0, w, h)
        }
        .unwrap();
        let drm = drm_prime_frame(&pic, Some(frames)).unwrap();
        // SAFETY: our reference; the frame holds its own.
        unsafe { ffi::av_buffer_unref(&mut frames) };
        let mut sw = ff::frame::Video::empty();
        // SAFETY: a DRM PRIME frame on a DRM frames context, downloaded into a new frame.
        let rc = unsafe {
            (*sw.as_mut_ptr()).format = ffi::AVPixelFormat::AV_PIX_FMT_BGR0 as i32;
            ffi::av_hwframe_transfer_data(sw.as_mut_ptr(), drm.as_ptr(), 0)
        };
        assert!(rc >= 0, "{}", ff::Error::from(rc));
        assert_eq!((sw.width(), sw.height()), (w, h));
        for y in 0..h as usize {
            let row = &sw.data(0)[y * sw.stride(0)..][..w as usize * 4];
            assert_eq!(
                row,
                &bytes[offset + y * pitch..][..w as usize * 4],
                "row {y}"
            );
        }
    }

    #[test]
    fn a_vaapi_import_without_a_render_node_names_it() {
        if !super::super::hw::render_nodes().is_empty() {
            println!("skipped: this machine has a render node");
            return;
        }
        let e = VaapiDmaBufImport::open(64, 32, DRM_FORMAT_XRGB8888, 30)
            .err()
            .expect("no VA-API without a render node");
        assert!(matches!(e, MediaError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("/dev/dri/renderD*"), "{e}");
        // The format is refused before any device is looked for.
        let e = VaapiDmaBufImport::open(64, 32, u32::from_le_bytes(*b"YUYV"), 30)
            .err()
            .expect("YUYV is not taken");
        assert!(e.to_string().contains("format YUYV"), "{e}");
    }

    #[test]
    fn this_ffmpeg_has_the_filters_the_import_needs() {
        super::super::init_ffmpeg();
        for f in ["buffer", "buffersink", "scale_vaapi"] {
            assert!(ff::filter::find(f).is_some(), "no {f} filter");
        }
    }
}
