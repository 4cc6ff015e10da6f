//! The user's input events of the reliable ordered channel (docs/PROTOCOL.md §8.1), as an Input
//! control frame carries them.

use std::fmt;

use super::{bad, Put, Reader, WireError};

/// A user input event, client → host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputEvent {
    /// A key went down or up. `code` is an SDL keycode.
    Key { code: u32, down: bool },
    /// The pointer moved: absolute position in the client's window and relative motion.
    PointerMotion { x: i32, y: i32, dx: i32, dy: i32 },
    /// A mouse button (1 left, 2 middle, 3 right, …) went down or up.
    MouseButton { button: u8, down: bool },
    /// Wheel motion in notches.
    Wheel { dx: i32, dy: i32 },
    /// Absolute head orientation in degrees. (Prefer the latest-wins state channel,
    /// [`crate::state::keys::HEAD_POSE`]: a pose is state, not an event.)
    HeadPose { yaw: f32, pitch: f32, roll: f32 },
    /// Text typed (an input method's commit): up to 32 bytes of UTF-8 per event; longer text
    /// is split at character boundaries by [`TextChunk::split`].
    Text(TextChunk),
    /// A button or key of a registered input device (`device` numbers the client's devices
    /// from 0); `code` is the Linux evdev code (`KEY_*`, `BTN_*`).
    Button { device: u8, code: u16, down: bool },
    /// An axis of a registered input device: evdev `EV_ABS` (absolute value) or `EV_REL`
    /// (`relative`: a delta) with its `ABS_*`/`REL_*` code.
    Axis {
        device: u8,
        relative: bool,
        code: u16,
        value: i32,
    },
}

/// Up to [`TextChunk::MAX`] bytes of UTF-8 (fixed size, so input events stay `Copy`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TextChunk {
    len: u8,
    bytes: [u8; TextChunk::MAX],
}

impl TextChunk {
    /// The most bytes in one chunk (SDL's text input events carry at most 32).
    pub const MAX: usize = 32;

    /// The chunk of `s`, if it fits.
    pub fn new(s: &str) -> Option<TextChunk> {
        if s.len() > Self::MAX {
            return None;
        }
        let mut bytes = [0u8; Self::MAX];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(TextChunk {
            len: s.len() as u8,
            bytes,
        })
    }

    /// Splits text into chunks at character boundaries.
    pub fn split(s: &str) -> impl Iterator<Item = TextChunk> + '_ {
        let mut rest = s;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut end = rest.len().min(Self::MAX);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (a, b) = rest.split_at(end);
            rest = b;
            TextChunk::new(a)
        })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for TextChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl InputEvent {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            InputEvent::Key { code, down } => {
                out.put_u8(1);
                out.put_u32(code);
                out.put_u8(down as u8);
            }
            InputEvent::PointerMotion { x, y, dx, dy } => {
                out.put_u8(2);
                out.put_i32(x);
                out.put_i32(y);
                out.put_i32(dx);
                out.put_i32(dy);
            }
            InputEvent::MouseButton { button, down } => {
                out.put_u8(3);
                out.put_u8(button);
                out.put_u8(down as u8);
            }
            InputEvent::Wheel { dx, dy } => {
                out.put_u8(4);
                out.put_i32(dx);
                out.put_i32(dy);
            }
            InputEvent::HeadPose { yaw, pitch, roll } => {
                out.put_u8(5);
                out.put_f32(yaw);
                out.put_f32(pitch);
                out.put_f32(roll);
            }
            InputEvent::Text(t) => {
                out.put_u8(6);
                out.put_u8(t.len);
                out.extend_from_slice(t.as_str().as_bytes());
            }
            InputEvent::Button { device, code, down } => {
                out.put_u8(7);
                out.put_u8(device);
                out.put_u16(code);
                out.put_u8(down as u8);
            }
            InputEvent::Axis {
                device,
                relative,
                code,
                value,
            } => {
                out.put_u8(8);
                out.put_u8(device);
                out.put_u8(relative as u8);
                out.put_u16(code);
                out.put_i32(value);
            }
        }
    }

    /// The encoded length.
    pub fn encoded_len(&self) -> usize {
        match self {
            InputEvent::Key { .. } => 6,
            InputEvent::PointerMotion { .. } => 17,
            InputEvent::MouseButton { .. } => 3,
            InputEvent::Wheel { .. } => 9,
            InputEvent::HeadPose { .. } => 13,
            InputEvent::Text(t) => 2 + t.len as usize,
            InputEvent::Button { .. } => 5,
            InputEvent::Axis { .. } => 9,
        }
    }

    pub fn parse(r: &mut Reader<'_>) -> Result<InputEvent, WireError> {
        Ok(match r.u8()? {
            1 => InputEvent::Key {
                code: r.u32()?,
                down: r.bool("input.key.down")?,
            },
            2 => InputEvent::PointerMotion {
                x: r.i32()?,
                y: r.i32()?,
                dx: r.i32()?,
                dy: r.i32()?,
            },
            3 => InputEvent::MouseButton {
                button: r.u8()?,
                down: r.bool("input.button.down")?,
            },
            4 => InputEvent::Wheel {
                dx: r.i32()?,
                dy: r.i32()?,
            },
            5 => {
                let (yaw, pitch, roll) = (r.f32()?, r.f32()?, r.f32()?);
                if !(yaw.is_finite() && pitch.is_finite() && roll.is_finite()) {
                    return Err(bad("input.head_pose", "not a finite number"));
                }
                InputEvent::HeadPose { yaw, pitch, roll }
            }
            6 => {
                let n = r.u8()? as usize;
                if n == 0 || n > TextChunk::MAX {
                    return Err(bad("input.text", "length must be 1..=32"));
                }
                let s =
                    std::str::from_utf8(r.bytes(n)?).map_err(|_| bad("input.text", "not UTF-8"))?;
                InputEvent::Text(TextChunk::new(s).ok_or(bad("input.text", "too long"))?)
            }
            7 => InputEvent::Button {
                device: r.u8()?,
                code: r.u16()?,
                down: r.bool("input.button.down")?,
            },
            8 => InputEvent::Axis {
                device: r.u8()?,
                relative: r.bool("input.axis.relative")?,
                code: r.u16()?,
                value: r.i32()?,
            },
            _ => return Err(bad("input.kind", "unknown input event kind")),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::*;

    /// The text input test vector of docs/PROTOCOL.md.
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
        let mut out = Vec::new();
        ControlFrame::Input {
            first_seq: 3,
            events: vec![InputEvent::Text(TextChunk::new("hé").unwrap())],
        }
        .encode(&mut out);
        assert_eq!(h(&out), v::TEXT_INPUT_FRAME);
    }

    /// Every kind of input event but text (the vector above) written out (docs/PROTOCOL.md
    /// §8.1: `kind u8` then the kind's fields).
    #[test]
    fn event_bytes() {
        let events: [(InputEvent, &[u8]); 7] = [
            (
                InputEvent::Key {
                    code: 0x61,
                    down: true,
                },
                &[0x01, 0x00, 0x00, 0x00, 0x61, 0x01],
            ),
            (
                InputEvent::PointerMotion {
                    x: 640,
                    y: -1,
                    dx: 3,
                    dy: -2,
                },
                &[
                    0x02, 0x00, 0x00, 0x02, 0x80, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x03,
                    0xff, 0xff, 0xff, 0xfe,
                ],
            ),
            (
                InputEvent::MouseButton {
                    button: 3,
                    down: false,
                },
                &[0x03, 0x03, 0x00],
            ),
            (
                InputEvent::Wheel { dx: 0, dy: -1 },
                &[0x04, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                InputEvent::HeadPose {
                    yaw: 90.0,
                    pitch: -45.0,
                    roll: 0.5,
                },
                &[
                    0x05, 0x42, 0xb4, 0x00, 0x00, 0xc2, 0x34, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00,
                ],
            ),
            (
                InputEvent::Button {
                    device: 1,
                    code: 0x130,
                    down: true,
                },
                &[0x07, 0x01, 0x01, 0x30, 0x01],
            ),
            (
                InputEvent::Axis {
                    device: 1,
                    relative: false,
                    code: 0x01,
                    value: -32768,
                },
                &[0x08, 0x01, 0x00, 0x00, 0x01, 0xff, 0xff, 0x80, 0x00],
            ),
        ];
        for (event, bytes) in events {
            let mut out = Vec::new();
            event.encode(&mut out);
            assert_eq!(out, bytes, "{event:?}");
            assert_eq!(out.len(), event.encoded_len());
            let mut r = Reader::new(&out, "input");
            assert_eq!(InputEvent::parse(&mut r), Ok(event));
            assert!(r.is_empty());
        }
        // A `down` other than 0 or 1 is refused, and so is an unknown kind.
        assert!(InputEvent::parse(&mut Reader::new(&[0x03, 0x03, 0x02], "input")).is_err());
        assert!(InputEvent::parse(&mut Reader::new(&[0x09], "input")).is_err());
    }

    #[test]
    fn text_splits_at_character_boundaries() {
        let s = "ab€".repeat(20);
        let chunks: Vec<TextChunk> = TextChunk::split(&s).collect();
        assert!(chunks.iter().all(|c| c.as_str().len() <= TextChunk::MAX));
        assert_eq!(chunks.iter().map(|c| c.as_str()).collect::<String>(), s);
    }
}
