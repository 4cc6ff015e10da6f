//! Frames as the application holds them (borrowed, with strides) and their adaptation to what
//! the encoder reads.

#[allow(unused_imports)]
use super::*;

/// Layouts of frames an application can hand over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// Packed B, G, R, A/X (Direct3D, most X11 and Wayland buffers).
    Bgra,
    /// Packed R, G, B, A/X (OpenGL's `glReadPixels(GL_RGBA)`).
    Rgba,
    /// Planar Y, U, V at 4:2:0.
    I420,
    /// Y plane, then interleaved U/V at 4:2:0 (hardware decoders, VA-API).
    Nv12,
}

/// A frame borrowed from the application: up to three planes with their strides (bytes per
/// row). Rows may be padded; the planes are only read.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub width: u32,
    pub height: u32,
    pub format: PixelFormat,
    pub planes: [&'a [u8]; 3],
    pub strides: [usize; 3],
}

impl<'a> Frame<'a> {
    pub fn bgra(data: &'a [u8], stride: usize, width: u32, height: u32) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::Bgra,
            planes: [data, &[], &[]],
            strides: [stride, 0, 0],
        }
    }

    pub fn rgba(data: &'a [u8], stride: usize, width: u32, height: u32) -> Self {
        Frame {
            format: PixelFormat::Rgba,
            ..Self::bgra(data, stride, width, height)
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn i420(
        y: &'a [u8],
        y_stride: usize,
        u: &'a [u8],
        u_stride: usize,
        v: &'a [u8],
        v_stride: usize,
        width: u32,
        height: u32,
    ) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::I420,
            planes: [y, u, v],
            strides: [y_stride, u_stride, v_stride],
        }
    }

    pub fn nv12(
        y: &'a [u8],
        y_stride: usize,
        uv: &'a [u8],
        uv_stride: usize,
        width: u32,
        height: u32,
    ) -> Self {
        Frame {
            width,
            height,
            format: PixelFormat::Nv12,
            planes: [y, uv, &[]],
            strides: [y_stride, uv_stride, 0],
        }
    }
}

pub(super) fn too_small(what: &str) -> HostError {
    HostError::Media(MediaError::Other(format!(
        "{what}: buffer too small for the frame size"
    )))
}

/// Turns a [`Frame`] into what the encoder reads, converting only RGBA and NV12 (into
/// buffers kept from frame to frame).
#[derive(Default)]
pub struct FrameAdapter {
    i420: Option<I420Frame>,
    bgra: Option<BgraFrame>,
}

impl FrameAdapter {
    /// The encoder's view of `frame`; `rgb_encoder` is true for libx264rgb (which takes BGRA).
    pub fn adapt<'b>(
        &'b mut self,
        frame: &Frame<'b>,
        rgb_encoder: bool,
    ) -> Result<InputPicture<'b>, HostError> {
        let (w, h) = (frame.width, frame.height);
        untetherize_size(w, h)?;
        let need = |stride: usize, row: usize, rows: usize| (rows.max(1) - 1) * stride + row;
        let (w2, h2) = (w.div_ceil(2) as usize, h.div_ceil(2) as usize);
        match (frame.format, rgb_encoder) {
            (PixelFormat::Bgra, _) => Ok(InputPicture::Bgra {
                width: w,
                height: h,
                data: frame.planes[0],
                stride: frame.strides[0],
            }),
            (PixelFormat::I420, false) => Ok(InputPicture::I420 {
                width: w,
                height: h,
                planes: [
                    (frame.planes[0], frame.strides[0]),
                    (frame.planes[1], frame.strides[1]),
                    (frame.planes[2], frame.strides[2]),
                ],
            }),
            (PixelFormat::Rgba, false) => {
                let (data, stride) = (frame.planes[0], frame.strides[0]);
                if stride < w as usize * 4 || data.len() < need(stride, w as usize * 4, h as usize)
                {
                    return Err(too_small("RGBA frame"));
                }
                let out = self.i420_buf(w, h);
                let mut img = YuvPlanarImageMut {
                    y_plane: BufferStoreMut::Borrowed(&mut out.y),
                    y_stride: w,
                    u_plane: BufferStoreMut::Borrowed(&mut out.u),
                    u_stride: w2 as u32,
                    v_plane: BufferStoreMut::Borrowed(&mut out.v),
                    v_stride: w2 as u32,
                    width: w,
                    height: h,
                };
                yuvutils_rs::rgba_to_yuv420(
                    &mut img,
                    data,
                    stride as u32,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                    YuvConversionMode::Balanced,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("RGBA: {e}"))))?;
                let out = &*out;
                Ok(InputPicture::I420 {
                    width: w,
                    height: h,
                    planes: [(&out.y, w as usize), (&out.u, w2), (&out.v, w2)],
                })
            }
            (PixelFormat::Nv12, false) => {
                let (uv, uvs) = (frame.planes[1], frame.strides[1]);
                if uvs < w2 * 2 || uv.len() < need(uvs, w2 * 2, h2) {
                    return Err(too_small("NV12 chroma plane"));
                }
                // The Y plane is read in place; only chroma is de-interleaved.
                let out = self.i420_buf(w, h);
                for row in 0..h2 {
                    let src = &uv[row * uvs..row * uvs + w2 * 2];
                    for (i, pair) in src.chunks_exact(2).enumerate() {
                        out.u[row * w2 + i] = pair[0];
                        out.v[row * w2 + i] = pair[1];
                    }
                }
                let out = &*out;
                Ok(InputPicture::I420 {
                    width: w,
                    height: h,
                    planes: [
                        (frame.planes[0], frame.strides[0]),
                        (&out.u, w2),
                        (&out.v, w2),
                    ],
                })
            }
            (PixelFormat::Rgba, true) => {
                let (data, stride) = (frame.planes[0], frame.strides[0]);
                if stride < w as usize * 4 || data.len() < need(stride, w as usize * 4, h as usize)
                {
                    return Err(too_small("RGBA frame"));
                }
                let out = self.bgra_buf(w, h)?;
                for y in 0..h as usize {
                    let src = &data[y * stride..y * stride + w as usize * 4];
                    let dst = out.row_mut(y as u32);
                    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                        d.copy_from_slice(&[s[2], s[1], s[0], s[3]]);
                    }
                }
                Ok(bgra_picture(out))
            }
            (PixelFormat::Nv12, true) => {
                let out = self.bgra_buf(w, h)?;
                let img = YuvBiPlanarImage {
                    y_plane: frame.planes[0],
                    y_stride: frame.strides[0] as u32,
                    uv_plane: frame.planes[1],
                    uv_stride: frame.strides[1] as u32,
                    width: w,
                    height: h,
                };
                let stride = out.stride as u32;
                yuvutils_rs::yuv_nv12_to_bgra(
                    &img,
                    &mut out.data,
                    stride,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                    YuvConversionMode::Balanced,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("NV12: {e}"))))?;
                Ok(bgra_picture(out))
            }
            (PixelFormat::I420, true) => {
                let out = self.bgra_buf(w, h)?;
                let img = yuvutils_rs::YuvPlanarImage {
                    y_plane: frame.planes[0],
                    y_stride: frame.strides[0] as u32,
                    u_plane: frame.planes[1],
                    u_stride: frame.strides[1] as u32,
                    v_plane: frame.planes[2],
                    v_stride: frame.strides[2] as u32,
                    width: w,
                    height: h,
                };
                let stride = out.stride as u32;
                yuvutils_rs::yuv420_to_bgra(
                    &img,
                    &mut out.data,
                    stride,
                    YuvRange::Limited,
                    YuvStandardMatrix::Bt601,
                )
                .map_err(|e| HostError::Media(MediaError::Conversion(format!("I420: {e}"))))?;
                Ok(bgra_picture(out))
            }
        }
    }

    fn i420_buf(&mut self, w: u32, h: u32) -> &mut I420Frame {
        if !matches!(&self.i420, Some(f) if (f.width, f.height) == (w, h)) {
            self.i420 = Some(I420Frame::new(w, h));
        }
        self.i420.get_or_insert_with(|| I420Frame::new(w, h))
    }

    fn bgra_buf(&mut self, w: u32, h: u32) -> Result<&mut BgraFrame, HostError> {
        if !matches!(&self.bgra, Some(f) if (f.width, f.height) == (w, h)) {
            self.bgra = Some(BgraFrame::new(w, h)?);
        }
        self.bgra
            .as_mut()
            .ok_or_else(|| HostError::Usage("no conversion buffer".into()))
    }
}

pub(super) fn bgra_picture(f: &BgraFrame) -> InputPicture<'_> {
    InputPicture::Bgra {
        width: f.width,
        height: f.height,
        data: &f.data,
        stride: f.stride,
    }
}

pub(super) fn untetherize_size(w: u32, h: u32) -> Result<(), HostError> {
    untether_media::frame::check_size(w, h).map_err(HostError::Media)
}
