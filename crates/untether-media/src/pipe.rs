//! Raw frames through files and pipes, so untether slots into shell pipelines beside ffmpeg and
//! GStreamer: [`PipeReader`] reads one frame at a time as it arrives (no read-ahead: exactly one
//! frame's bytes are read, with no buffering layer in between), [`PipeWriter`] writes each
//! decoded picture as raw I420 and flushes it at once.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::str::FromStr;

use crate::codec::{DecodedFrame, PictureFormat};
use crate::{MediaError, Result};

/// Layout of raw frames in a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PipeFormat {
    /// Planar Y, U, V at 4:2:0, no padding (FFmpeg's `yuv420p`, GStreamer's `I420`).
    #[default]
    I420,
    /// Packed B, G, R, A (FFmpeg's `bgra`/`bgr0`, GStreamer's `BGRA`/`BGRx`).
    Bgra,
}

impl PipeFormat {
    pub fn name(&self) -> &'static str {
        match self {
            PipeFormat::I420 => "i420",
            PipeFormat::Bgra => "bgra",
        }
    }

    /// Bytes of one frame.
    pub fn frame_len(&self, width: u32, height: u32) -> usize {
        let (w, h) = (width as usize, height as usize);
        match self {
            PipeFormat::I420 => w * h + 2 * (w.div_ceil(2) * h.div_ceil(2)),
            PipeFormat::Bgra => w * h * 4,
        }
    }
}

impl fmt::Display for PipeFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PipeFormat {
    type Err = MediaError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "i420" | "yuv420p" | "iyuv" => Ok(PipeFormat::I420),
            "bgra" | "bgr0" | "bgrx" => Ok(PipeFormat::Bgra),
            _ => Err(MediaError::Other(format!(
                "unknown pipe format {s:?}; allowed: i420, bgra"
            ))),
        }
    }
}

/// Opens FILE for reading: `-` is standard input.
fn open_read(path: &str) -> Result<(Box<dyn Read + Send>, bool)> {
    if path == "-" {
        return Ok((Box::new(io::stdin()), false));
    }
    let f = File::open(path)
        .map_err(|e| MediaError::Other(format!("cannot open {path:?} for reading: {e}")))?;
    let regular = f.metadata().map(|m| m.is_file()).unwrap_or(false);
    Ok((Box::new(f), regular))
}

/// Reads raw frames from a file, named pipe or standard input.
pub struct PipeReader {
    input: Box<dyn Read + Send>,
    regular_file: bool,
    pub format: PipeFormat,
    pub width: u32,
    pub height: u32,
    frames: u64,
}

impl PipeReader {
    /// Opens `path` (`-`: standard input). A named pipe blocks here until a writer opens it.
    pub fn open(path: &str, format: PipeFormat, width: u32, height: u32) -> Result<PipeReader> {
        crate::frame::check_size(width, height)?;
        let (input, regular_file) = open_read(path)?;
        Ok(Self::from_reader(
            input,
            regular_file,
            format,
            width,
            height,
        ))
    }

    pub fn from_reader(
        input: Box<dyn Read + Send>,
        regular_file: bool,
        format: PipeFormat,
        width: u32,
        height: u32,
    ) -> PipeReader {
        PipeReader {
            input,
            regular_file,
            format,
            width,
            height,
            frames: 0,
        }
    }

    /// Whether the input is a regular file (whose frames are all there at once, so the
    /// caller paces them at the frame rate).
    pub fn is_regular_file(&self) -> bool {
        self.regular_file
    }

    pub fn frame_len(&self) -> usize {
        self.format.frame_len(self.width, self.height)
    }

    /// Reads the next frame into `buf` (resized to one frame). Ok(false) at the end of the
    /// input on a frame boundary; an error for a frame cut short.
    pub fn read_frame(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        let len = self.frame_len();
        buf.resize(len, 0);
        let mut got = 0;
        while got < len {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(MediaError::Other(format!("reading frames: {e}"))),
            }
        }
        if got == 0 {
            return Ok(false);
        }
        if got < len {
            return Err(MediaError::Other(format!(
                "the input ended inside frame {} ({got} of {len} bytes): is --size {}x{} --pipe-format {} right?",
                self.frames, self.width, self.height, self.format
            )));
        }
        self.frames += 1;
        Ok(true)
    }

    pub fn frames_read(&self) -> u64 {
        self.frames
    }
}

/// Writes decoded pictures as raw I420 to a file, named pipe or standard output.
pub struct PipeWriter {
    out: Box<dyn Write + Send>,
    scratch: Vec<u8>,
    frames: u64,
}

impl PipeWriter {
    /// Opens `path` for writing (`-`: standard output; a file is created or truncated).
    pub fn open(path: &str) -> Result<PipeWriter> {
        let out: Box<dyn Write + Send> = if path == "-" {
            Box::new(io::stdout())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)
                    .map_err(|e| {
                        MediaError::Other(format!("cannot open {path:?} for writing: {e}"))
                    })?,
            )
        };
        Ok(Self::from_writer(out))
    }

    pub fn from_writer(out: Box<dyn Write + Send>) -> PipeWriter {
        PipeWriter {
            out,
            scratch: Vec::new(),
            frames: 0,
        }
    }

    /// Writes one picture as I420 (Y, then U, then V, no padding) and flushes.
    pub fn write(&mut self, picture: &DecodedFrame) -> Result<()> {
        let (w, h) = (picture.width() as usize, picture.height() as usize);
        let (w2, h2) = (w.div_ceil(2), h.div_ceil(2));
        self.scratch.clear();
        match picture.format() {
            PictureFormat::I420 => {
                for (i, (cw, ch)) in [(w, h), (w2, h2), (w2, h2)].into_iter().enumerate() {
                    let (plane, stride) = picture.plane(i);
                    for y in 0..ch {
                        let row = plane.get(y * stride..y * stride + cw).ok_or_else(|| {
                            MediaError::Other("decoded plane shorter than its size".into())
                        })?;
                        self.scratch.extend_from_slice(row);
                    }
                }
            }
            PictureFormat::Gbrp => {
                let bgra = picture.to_bgra()?;
                let mut i420 = crate::convert::I420Frame::new(bgra.width, bgra.height);
                crate::convert::Converter::new(
                    crate::convert::Conversion::Simd,
                    bgra.width,
                    bgra.height,
                )?
                .convert(&bgra, i420.planes_mut())?;
                self.scratch.extend_from_slice(&i420.y);
                self.scratch.extend_from_slice(&i420.u);
                self.scratch.extend_from_slice(&i420.v);
            }
        }
        self.out
            .write_all(&self.scratch)
            .and_then(|_| self.out.flush())
            .map_err(|e| MediaError::Other(format!("writing frame {}: {e}", self.frames)))?;
        self.frames += 1;
        Ok(())
    }

    pub fn frames_written(&self) -> u64 {
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `chunk` bytes per read, like a pipe.
    struct Chunky(Vec<u8>, usize, usize);
    impl Read for Chunky {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.2).min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn reads_whole_frames_from_short_reads_and_reports_a_cut_frame() {
        let (w, h) = (64, 32);
        let len = PipeFormat::I420.frame_len(w, h);
        assert_eq!(len, 64 * 32 * 3 / 2);
        let mut data: Vec<u8> = (0..len * 2).map(|i| (i / len) as u8).collect();
        data.extend_from_slice(&[9; 10]);
        let mut r = PipeReader::from_reader(
            Box::new(Chunky(data, 0, 1000)),
            false,
            PipeFormat::I420,
            w,
            h,
        );
        let mut buf = Vec::new();
        assert!(r.read_frame(&mut buf).unwrap());
        assert!(buf.iter().all(|&b| b == 0));
        assert!(r.read_frame(&mut buf).unwrap());
        assert!(buf.iter().all(|&b| b == 1));
        let e = r.read_frame(&mut buf).unwrap_err().to_string();
        assert!(e.contains("10 of"), "{e}");
        let mut r = PipeReader::from_reader(
            Box::new(Chunky(vec![], 0, 1)),
            false,
            PipeFormat::Bgra,
            w,
            h,
        );
        assert!(!r.read_frame(&mut buf).unwrap());
        assert_eq!("BGRA".parse::<PipeFormat>().unwrap(), PipeFormat::Bgra);
        assert!("rgb24".parse::<PipeFormat>().is_err());
    }
}
