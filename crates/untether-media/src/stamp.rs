//! The pixel stamp: each frame's number, capture time and applied-input count written into its
//! top-left corner as black and white blocks, so the client can read glass-to-glass latency from
//! what it decoded, trusting no metadata.
//!
//! 120 bits — frame number (32), the low 40 bits of the capture time in µs (12.7 days before
//! wrapping; see [`unwrap_capture_us`]), the input count (32), and a CRC-16 over those 13 bytes —
//! as 30 × 4 blocks of 16×16 pixels (8×8 up to 480 lines, 32×32 above 1080) on the macroblock
//! grid, surrounded by a one-block mid-grey margin: 512×96 pixels at 720p and 1080p. Black is
//! luma 16 and white 235 after conversion: it reads back exactly after x264 ultrafast at
//! 2 Mbit/s (720p) and 4 Mbit/s (1080p), keyframes included, with a one-frame VBV. The reader averages the centre of each block and
//! thresholds it; a wrong CRC means "unreadable", never a wrong value.

use crc::{Crc, CRC_16_IBM_3740};

use crate::BgraFrame;

/// What the stamp carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stamp {
    pub frame_number: u32,
    /// Capture time, µs of the host's monotonic clock (only the low 40 bits are stamped).
    pub capture_us: u64,
    /// How many input events the scene had applied when it rendered this frame.
    pub input_seq: u32,
}

const COLS: u32 = 30;
const ROWS: u32 = 4;
const BITS: usize = (COLS * ROWS) as usize;
const CAPTURE_BITS: u32 = 40;
const CRC16: Crc<u16> = Crc::<u16>::new(&CRC_16_IBM_3740);

fn block(height: u32) -> u32 {
    if height > 1080 {
        32
    } else if height > 480 {
        16
    } else {
        8
    }
}

/// The (width, height) of the top-left region the stamp occupies (its margin included).
pub fn stamp_area(width: u32, height: u32) -> (u32, u32) {
    let b = block(height);
    (((COLS + 2) * b).min(width), ((ROWS + 2) * b).min(height))
}

/// The smallest (width, height) a picture `height` lines tall needs to carry the stamp:
/// 256×48 up to 480 lines, 512×96 up to 1080, 1024×192 above.
pub fn required_size(height: u32) -> (u32, u32) {
    let b = block(height);
    ((COLS + 2) * b, (ROWS + 2) * b)
}

/// Whether a `width`×`height` picture is large enough to carry the stamp (else the writers
/// leave it unstamped).
pub fn fits(width: u32, height: u32) -> bool {
    let (w, h) = required_size(height);
    width >= w && height >= h
}

fn bits_of(stamp: &Stamp) -> [bool; BITS] {
    let mut bytes = [0u8; 15];
    bytes[0..4].copy_from_slice(&stamp.frame_number.to_be_bytes());
    let cap = stamp.capture_us & ((1 << CAPTURE_BITS) - 1);
    bytes[4..9].copy_from_slice(&cap.to_be_bytes()[3..8]);
    bytes[9..13].copy_from_slice(&stamp.input_seq.to_be_bytes());
    let crc = CRC16.checksum(&bytes[..13]);
    bytes[13..15].copy_from_slice(&crc.to_be_bytes());
    let mut bits = [false; BITS];
    for (i, b) in bits.iter_mut().enumerate() {
        *b = bytes[i / 8] & (0x80 >> (i % 8)) != 0;
    }
    bits
}

fn stamp_of(bits: &[bool; BITS]) -> Option<Stamp> {
    let mut bytes = [0u8; 15];
    for (i, &b) in bits.iter().enumerate() {
        if b {
            bytes[i / 8] |= 0x80 >> (i % 8);
        }
    }
    let crc = u16::from_be_bytes([bytes[13], bytes[14]]);
    if CRC16.checksum(&bytes[..13]) != crc {
        return None;
    }
    let mut cap = [0u8; 8];
    cap[3..8].copy_from_slice(&bytes[4..9]);
    Some(Stamp {
        frame_number: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        capture_us: u64::from_be_bytes(cap),
        input_seq: u32::from_be_bytes([bytes[9], bytes[10], bytes[11], bytes[12]]),
    })
}

/// Writes the stamp into a BGRA frame (no-op if the frame is too small to hold it).
pub fn write_bgra(frame: &mut BgraFrame, stamp: &Stamp) {
    let b = block(frame.height);
    let (aw, ah) = stamp_area(frame.width, frame.height);
    if aw < (COLS + 2) * b || ah < (ROWS + 2) * b {
        return;
    }
    let bits = bits_of(stamp);
    for y in 0..ah {
        let row = frame.row_mut(y);
        let by = y / b;
        for x in 0..aw {
            let bx = x / b;
            let v = if by == 0 || by > ROWS || bx == 0 || bx > COLS {
                128
            } else if bits[((by - 1) * COLS + (bx - 1)) as usize] {
                255
            } else {
                0
            };
            let p = x as usize * 4;
            row[p..p + 4].copy_from_slice(&[v, v, v, 255]);
        }
    }
}

/// Writes the stamp into the luma plane of a 4:2:0 picture (black 16, white 235, margin 126:
/// what the BGRA stamp becomes after conversion). The chroma under it should be neutral (128)
/// for the picture to look like the BGRA stamp; the reader looks at luma only.
pub fn write_luma(plane: &mut [u8], stride: usize, width: u32, height: u32, stamp: &Stamp) {
    let b = block(height);
    let (aw, ah) = stamp_area(width, height);
    if aw < (COLS + 2) * b || ah < (ROWS + 2) * b {
        return;
    }
    if stride < aw as usize || plane.len() < (ah as usize - 1) * stride + aw as usize {
        return;
    }
    let bits = bits_of(stamp);
    for y in 0..ah {
        let by = y / b;
        let row = &mut plane[y as usize * stride..y as usize * stride + aw as usize];
        for (x, px) in row.iter_mut().enumerate() {
            let bx = x as u32 / b;
            *px = if by == 0 || by > ROWS || bx == 0 || bx > COLS {
                126
            } else if bits[((by - 1) * COLS + (bx - 1)) as usize] {
                235
            } else {
                16
            };
        }
    }
}

/// Writes the stamp into packed BGRA rows of `stride` bytes (like [`write_bgra`], for a
/// borrowed buffer).
pub fn write_bgra_raw(data: &mut [u8], stride: usize, width: u32, height: u32, stamp: &Stamp) {
    let b = block(height);
    let (aw, ah) = stamp_area(width, height);
    if aw < (COLS + 2) * b || ah < (ROWS + 2) * b {
        return;
    }
    if stride < aw as usize * 4 || data.len() < (ah as usize - 1) * stride + aw as usize * 4 {
        return;
    }
    let bits = bits_of(stamp);
    for y in 0..ah {
        let by = y / b;
        let row = &mut data[y as usize * stride..y as usize * stride + aw as usize * 4];
        for (x, px) in row.chunks_exact_mut(4).enumerate() {
            let bx = x as u32 / b;
            let v = if by == 0 || by > ROWS || bx == 0 || bx > COLS {
                128
            } else if bits[((by - 1) * COLS + (bx - 1)) as usize] {
                255
            } else {
                0
            };
            px.copy_from_slice(&[v, v, v, 255]);
        }
    }
}

/// Reads the stamp from an 8-bit plane (Y of a 4:2:0 picture, or G of a GBR one).
/// None when the plane is too small or the CRC does not match.
pub fn read_plane(plane: &[u8], stride: usize, width: u32, height: u32) -> Option<Stamp> {
    let b = block(height) as usize;
    let (aw, ah) = stamp_area(width, height);
    if (aw as usize) < (COLS as usize + 2) * b || (ah as usize) < (ROWS as usize + 2) * b {
        return None;
    }
    if stride < aw as usize || plane.len() < (ah as usize - 1) * stride + aw as usize {
        return None;
    }
    let mut bits = [false; BITS];
    // Average the central half of each block (away from its edges, where ringing is).
    let (c0, c1) = (b / 4, b - b / 4);
    for r in 0..ROWS as usize {
        for c in 0..COLS as usize {
            let (x0, y0) = ((c + 1) * b, (r + 1) * b);
            let mut sum = 0u32;
            for y in y0 + c0..y0 + c1 {
                let row = &plane[y * stride + x0 + c0..y * stride + x0 + c1];
                sum += row.iter().map(|&v| v as u32).sum::<u32>();
            }
            let n = ((c1 - c0) * (c1 - c0)) as u32;
            bits[r * COLS as usize + c] = sum > 128 * n;
        }
    }
    stamp_of(&bits)
}

/// Reconstructs a full capture time from its stamped low 40 bits: the value with those low bits
/// nearest to `reference_us` (e.g. the time the frame was shown, on the host's clock).
pub fn unwrap_capture_us(stamped: u64, reference_us: u64) -> u64 {
    let m = 1u64 << CAPTURE_BITS;
    let low = stamped & (m - 1);
    let base = reference_us & !(m - 1);
    [base.checked_sub(m), Some(base), base.checked_add(m)]
        .into_iter()
        .flatten()
        .filter_map(|b| b.checked_add(low))
        .min_by_key(|c| c.abs_diff(reference_us))
        .unwrap_or(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn luma_of(f: &BgraFrame) -> Vec<u8> {
        // Rec. 601 limited range, like the converter.
        f.data
            .chunks_exact(4)
            .map(|p| {
                (16.0
                    + (65.481 * p[2] as f64 + 128.553 * p[1] as f64 + 24.966 * p[0] as f64) / 255.0)
                    .round() as u8
            })
            .collect()
    }

    #[test]
    fn round_trip_exact() {
        for (w, h) in [(1280, 720), (1920, 1080), (3840, 2160), (640, 360)] {
            let mut f = BgraFrame::new(w, h).unwrap();
            let s = Stamp {
                frame_number: 0xDEAD_BEEF,
                capture_us: 0x12_3456_789A,
                input_seq: 77,
            };
            write_bgra(&mut f, &s);
            let y = luma_of(&f);
            assert_eq!(read_plane(&y, w as usize, w, h), Some(s), "{w}x{h}");
        }
    }

    #[test]
    fn luma_and_raw_writers_read_back() {
        let (w, h) = (1280, 720);
        let s = Stamp {
            frame_number: 77,
            capture_us: 123,
            input_seq: 4,
        };
        let mut y = vec![50u8; (w * h) as usize];
        write_luma(&mut y, w as usize, w, h, &s);
        assert_eq!(read_plane(&y, w as usize, w, h), Some(s));
        let mut f = BgraFrame::new(w, h).unwrap();
        let stride = f.stride;
        write_bgra_raw(&mut f.data, stride, w, h, &s);
        assert_eq!(read_plane(&luma_of(&f), w as usize, w, h), Some(s));
    }

    #[test]
    fn corruption_reads_as_none_not_a_wrong_value() {
        let (w, h) = (1280, 720);
        let mut f = BgraFrame::new(w, h).unwrap();
        write_bgra(
            &mut f,
            &Stamp {
                frame_number: 5,
                capture_us: 9,
                input_seq: 1,
            },
        );
        let mut y = luma_of(&f);
        // Flip one block (bit 3 of the frame number: row 0, column 3, after the margin).
        let b = block(h) as usize;
        for yy in b..2 * b {
            for xx in 4 * b..5 * b {
                y[yy * w as usize + xx] = 255 - y[yy * w as usize + xx];
            }
        }
        assert_eq!(read_plane(&y, w as usize, w, h), None);
        // A plane too small.
        assert_eq!(read_plane(&y[..100], w as usize, w, h), None);
    }

    #[test]
    fn unwrap_capture_time() {
        let m = 1u64 << 40;
        let t = 5 * m + 1000;
        assert_eq!(unwrap_capture_us(t & (m - 1), t + 20_000), t);
        // Across a wrap: captured just before, shown just after.
        let t = 6 * m - 10;
        assert_eq!(unwrap_capture_us(t & (m - 1), 6 * m + 5000), t);
        assert_eq!(unwrap_capture_us(123, 200), 123);
    }

    #[test]
    fn a_picture_too_narrow_for_its_block_size_does_not_fit() {
        assert!(fits(1280, 720) && fits(512, 481) && fits(256, 360));
        assert!(!fits(500, 500), "481–1080 lines need 512 px of width");
        assert_eq!(required_size(500), (512, 96));
        assert_eq!(required_size(2160), (1024, 192));
        assert!(!fits(255, 100));
    }
}
