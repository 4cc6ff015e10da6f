//! Raw frame buffers passed between the source and the encoder.

use crate::MediaError;

/// A packed 8-bit BGRA (B, G, R, A in memory order; A is ignored, i.e. BGR0) frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgraFrame {
    pub width: u32,
    pub height: u32,
    /// Bytes per row (≥ 4 × width).
    pub stride: usize,
    pub data: Vec<u8>,
}

impl BgraFrame {
    /// A black frame. Width and height must be even and non-zero (4:2:0 needs even sizes).
    pub fn new(width: u32, height: u32) -> Result<Self, MediaError> {
        check_size(width, height)?;
        let stride = width as usize * 4;
        Ok(BgraFrame {
            width,
            height,
            stride,
            data: vec![0; stride * height as usize],
        })
    }

    /// Row `y` as bytes (exactly `4 × width` long).
    pub fn row(&self, y: u32) -> &[u8] {
        let start = y as usize * self.stride;
        &self.data[start..start + self.width as usize * 4]
    }

    /// Row `y` as mutable bytes (exactly `4 × width` long).
    pub fn row_mut(&mut self, y: u32) -> &mut [u8] {
        let start = y as usize * self.stride;
        let w = self.width as usize * 4;
        &mut self.data[start..start + w]
    }
}

/// Checks that a frame size is usable by every stage: non-zero, even, and within H.264 level limits.
pub fn check_size(width: u32, height: u32) -> Result<(), MediaError> {
    let bad = |reason: &str| MediaError::InvalidSize {
        width,
        height,
        reason: reason.to_string(),
    };
    if width == 0 || height == 0 {
        return Err(bad("width and height must be non-zero"));
    }
    if !width.is_multiple_of(2) || !height.is_multiple_of(2) {
        return Err(bad("width and height must be even (4:2:0 chroma)"));
    }
    if width > 4096 || height > 2304 {
        return Err(bad("the largest supported size is 4096x2304"));
    }
    Ok(())
}
