//! What a browser sends on its `input` data channel: one JSON object per message, turned into
//! the same [`InputEvent`]s our own client sends. Keys arrive as `KeyboardEvent.code` names and
//! become SDL keycodes (what the scene and the XTEST replay expect); the Gamepad API's standard
//! mapping becomes evdev `BTN_*`/`ABS_*` codes, as a registered gamepad of our client would.
//!
//! Messages (`k` is the kind):
//! - `{"k":"key","code":"KeyW","down":true}`
//! - `{"k":"move","dx":3,"dy":-2,"x":640,"y":360}` (pointer lock gives motion; x/y are where
//!   the pointer is over the video, in stream pixels)
//! - `{"k":"button","button":1,"down":true}` (1 left, 2 middle, 3 right, 4/5 back/forward)
//! - `{"k":"wheel","dx":0,"dy":-1}` (notches)
//! - `{"k":"pad","pad":0,"button":0,"down":true}`, `{"k":"axis","pad":0,"axis":0,"value":-0.5}`
//! - `{"k":"ping","t":123.4}`: answered with `{"k":"pong","t":123.4,"host_us":…}` (the page's
//!   clock mapping), not an input event.

use serde::Deserialize;
use untether_proto::InputEvent;

/// The largest message accepted (a longer one is malformed).
pub(crate) const MAX_MESSAGE: usize = 512;

/// One message of the input channel.
#[derive(Debug, PartialEq)]
pub(crate) enum Message {
    Input(InputEvent),
    /// A clock ping: the page's time to echo back.
    Ping(f64),
    /// Understood but nothing to do (a key with no SDL equivalent, an unmapped pad button).
    Ignored,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    k: String,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    down: Option<bool>,
    #[serde(default)]
    dx: Option<f64>,
    #[serde(default)]
    dy: Option<f64>,
    #[serde(default)]
    x: Option<f64>,
    #[serde(default)]
    y: Option<f64>,
    #[serde(default)]
    button: Option<u32>,
    #[serde(default)]
    pad: Option<u32>,
    #[serde(default)]
    axis: Option<u32>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    t: Option<f64>,
}

/// What is wrong with a page's input message (counted and dropped; the first one logged).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MalformedInput {
    #[error("{0} bytes (at most {MAX_MESSAGE})")]
    TooLong(usize),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A field the kind needs: its name.
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("{what} {value} is out of range")]
    OutOfRange { what: &'static str, value: f64 },
    #[error("mouse button {0} (expected 1 to 5)")]
    MouseButton(u32),
    #[error("gamepad {0} (expected 0 to 15)")]
    Gamepad(u32),
    #[error("value is missing or not a number")]
    AxisValue,
    #[error("ping without a time")]
    PingTime,
    #[error("unknown kind {0:?}")]
    UnknownKind(String),
}

/// A finite number within `i32`, rounded.
fn int(v: Option<f64>, what: &'static str) -> Result<i32, MalformedInput> {
    match v {
        Some(v) if v.is_finite() && v.abs() <= 1e6 => Ok(v.round() as i32),
        Some(value) => Err(MalformedInput::OutOfRange { what, value }),
        None => Err(MalformedInput::Missing(what)),
    }
}

fn flag(v: Option<bool>, what: &'static str) -> Result<bool, MalformedInput> {
    v.ok_or(MalformedInput::Missing(what))
}

/// Parses one message; Err says what is wrong with it (counted and dropped by the caller).
pub(crate) fn parse(data: &[u8]) -> Result<Message, MalformedInput> {
    if data.len() > MAX_MESSAGE {
        return Err(MalformedInput::TooLong(data.len()));
    }
    let r: Raw = serde_json::from_slice(data)?;
    Ok(match r.k.as_str() {
        "key" => {
            let code = r.code.as_deref().ok_or(MalformedInput::Missing("code"))?;
            let down = flag(r.down, "down")?;
            match sdl_keycode(code) {
                Some(code) => Message::Input(InputEvent::Key { code, down }),
                None => Message::Ignored,
            }
        }
        "move" => Message::Input(InputEvent::PointerMotion {
            x: r.x.map_or(Ok(0), |_| int(r.x, "x"))?,
            y: r.y.map_or(Ok(0), |_| int(r.y, "y"))?,
            dx: int(r.dx, "dx")?,
            dy: int(r.dy, "dy")?,
        }),
        "button" => {
            let b = r.button.ok_or(MalformedInput::Missing("button"))?;
            if !(1..=5).contains(&b) {
                return Err(MalformedInput::MouseButton(b));
            }
            Message::Input(InputEvent::MouseButton {
                button: b as u8,
                down: flag(r.down, "down")?,
            })
        }
        "wheel" => Message::Input(InputEvent::Wheel {
            dx: int(r.dx, "dx")?,
            dy: int(r.dy, "dy")?,
        }),
        "pad" => {
            let pad = pad_index(r.pad)?;
            let b = r.button.ok_or(MalformedInput::Missing("button"))?;
            let down = flag(r.down, "down")?;
            match pad_button(b) {
                Some(code) => Message::Input(InputEvent::Button {
                    device: pad,
                    code,
                    down,
                }),
                None => Message::Ignored,
            }
        }
        "axis" => {
            let pad = pad_index(r.pad)?;
            let a = r.axis.ok_or(MalformedInput::Missing("axis"))?;
            let v = match r.value {
                Some(v) if v.is_finite() => v.clamp(-1.0, 1.0),
                _ => return Err(MalformedInput::AxisValue),
            };
            match pad_axis(a) {
                Some(code) => Message::Input(InputEvent::Axis {
                    device: pad,
                    relative: false,
                    code,
                    value: (v * 32767.0).round() as i32,
                }),
                None => Message::Ignored,
            }
        }
        "ping" => match r.t {
            Some(t) if t.is_finite() => Message::Ping(t),
            _ => return Err(MalformedInput::PingTime),
        },
        k => return Err(MalformedInput::UnknownKind(k.to_string())),
    })
}

fn pad_index(p: Option<u32>) -> Result<u8, MalformedInput> {
    match p {
        Some(p) if p < 16 => Ok(p as u8),
        Some(p) => Err(MalformedInput::Gamepad(p)),
        None => Err(MalformedInput::Missing("pad")),
    }
}

/// The Gamepad API's standard mapping → evdev button codes (linux/input-event-codes.h).
fn pad_button(b: u32) -> Option<u16> {
    Some(match b {
        0 => 0x130,  // BTN_SOUTH (A)
        1 => 0x131,  // BTN_EAST (B)
        2 => 0x134,  // BTN_WEST (X)
        3 => 0x133,  // BTN_NORTH (Y)
        4 => 0x136,  // BTN_TL
        5 => 0x137,  // BTN_TR
        6 => 0x138,  // BTN_TL2
        7 => 0x139,  // BTN_TR2
        8 => 0x13a,  // BTN_SELECT
        9 => 0x13b,  // BTN_START
        10 => 0x13d, // BTN_THUMBL
        11 => 0x13e, // BTN_THUMBR
        12 => 0x220, // BTN_DPAD_UP
        13 => 0x221, // BTN_DPAD_DOWN
        14 => 0x222, // BTN_DPAD_LEFT
        15 => 0x223, // BTN_DPAD_RIGHT
        16 => 0x13c, // BTN_MODE
        _ => return None,
    })
}

/// Standard-mapping axes → evdev absolute axes.
fn pad_axis(a: u32) -> Option<u16> {
    Some(match a {
        0 => 0, // ABS_X (left stick)
        1 => 1, // ABS_Y
        2 => 3, // ABS_RX (right stick)
        3 => 4, // ABS_RY
        _ => return None,
    })
}

/// SDL's keycode for a key of scancode `s` that has no character.
const fn scan(s: u32) -> u32 {
    s | 0x4000_0000
}

/// `KeyboardEvent.code` (the physical key, layout-independent) → SDL keycode (US layout:
/// what SDL reports for that key on a US keyboard). None: a key SDL has no code for here.
pub(crate) fn sdl_keycode(code: &str) -> Option<u32> {
    if let Some(c) = code.strip_prefix("Key") {
        let b = c.as_bytes();
        if b.len() == 1 && b[0].is_ascii_uppercase() {
            return Some(b[0].to_ascii_lowercase() as u32);
        }
        return None;
    }
    if let Some(d) = code.strip_prefix("Digit") {
        let b = d.as_bytes();
        if b.len() == 1 && b[0].is_ascii_digit() {
            return Some(b[0] as u32);
        }
        return None;
    }
    if let Some(n) = code.strip_prefix('F') {
        if let Ok(n) = n.parse::<u32>() {
            return match n {
                1..=12 => Some(scan(57 + n)),  // SDL_SCANCODE_F1 = 58
                13..=24 => Some(scan(91 + n)), // SDL_SCANCODE_F13 = 104
                _ => None,
            };
        }
    }
    Some(match code {
        "Enter" => 13,
        "Escape" => 27,
        "Backspace" => 8,
        "Tab" => 9,
        "Space" => b' ' as u32,
        "Minus" => b'-' as u32,
        "Equal" => b'=' as u32,
        "BracketLeft" => b'[' as u32,
        "BracketRight" => b']' as u32,
        "Backslash" => b'\\' as u32,
        "Semicolon" => b';' as u32,
        "Quote" => b'\'' as u32,
        "Backquote" => b'`' as u32,
        "Comma" => b',' as u32,
        "Period" => b'.' as u32,
        "Slash" => b'/' as u32,
        "Delete" => 127,
        "CapsLock" => scan(57),
        "PrintScreen" => scan(70),
        "ScrollLock" => scan(71),
        "Pause" => scan(72),
        "Insert" => scan(73),
        "Home" => scan(74),
        "PageUp" => scan(75),
        "End" => scan(77),
        "PageDown" => scan(78),
        "ArrowRight" => scan(79),
        "ArrowLeft" => scan(80),
        "ArrowDown" => scan(81),
        "ArrowUp" => scan(82),
        "NumLock" => scan(83),
        "NumpadDivide" => scan(84),
        "NumpadMultiply" => scan(85),
        "NumpadSubtract" => scan(86),
        "NumpadAdd" => scan(87),
        "NumpadEnter" => scan(88),
        "Numpad1" => scan(89),
        "Numpad2" => scan(90),
        "Numpad3" => scan(91),
        "Numpad4" => scan(92),
        "Numpad5" => scan(93),
        "Numpad6" => scan(94),
        "Numpad7" => scan(95),
        "Numpad8" => scan(96),
        "Numpad9" => scan(97),
        "Numpad0" => scan(98),
        "NumpadDecimal" => scan(99),
        "ContextMenu" => scan(101),
        "ControlLeft" => scan(224),
        "ShiftLeft" => scan(225),
        "AltLeft" => scan(226),
        "MetaLeft" => scan(227),
        "ControlRight" => scan(228),
        "ShiftRight" => scan(229),
        "AltRight" => scan(230),
        "MetaRight" => scan(231),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::keys;

    fn input(s: &str) -> InputEvent {
        match parse(s.as_bytes()) {
            Ok(Message::Input(e)) => e,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn keys_are_sdl_keycodes_the_scene_walks_with() {
        assert_eq!(
            input(r#"{"k":"key","code":"KeyW","down":true}"#),
            InputEvent::Key {
                code: keys::W,
                down: true
            }
        );
        assert_eq!(sdl_keycode("ArrowUp"), Some(keys::UP));
        assert_eq!(sdl_keycode("ArrowLeft"), Some(keys::LEFT));
        assert_eq!(sdl_keycode("Digit7"), Some(b'7' as u32));
        assert_eq!(sdl_keycode("F1"), Some(0x4000_003A));
        assert_eq!(sdl_keycode("F13"), Some(0x4000_0068));
        assert_eq!(sdl_keycode("ShiftLeft"), Some(0x4000_00E1));
        assert_eq!(sdl_keycode("KeyWW"), None);
        assert_eq!(
            parse(br#"{"k":"key","code":"Lang1","down":true}"#).unwrap(),
            Message::Ignored
        );
    }

    #[test]
    fn pointer_buttons_wheel_and_gamepads() {
        assert_eq!(
            input(r#"{"k":"move","dx":3.4,"dy":-2}"#),
            InputEvent::PointerMotion {
                x: 0,
                y: 0,
                dx: 3,
                dy: -2
            }
        );
        assert_eq!(
            input(r#"{"k":"button","button":3,"down":false}"#),
            InputEvent::MouseButton {
                button: 3,
                down: false
            }
        );
        assert_eq!(
            input(r#"{"k":"wheel","dx":0,"dy":-1}"#),
            InputEvent::Wheel { dx: 0, dy: -1 }
        );
        assert_eq!(
            input(r#"{"k":"pad","pad":1,"button":0,"down":true}"#),
            InputEvent::Button {
                device: 1,
                code: 0x130,
                down: true
            }
        );
        assert_eq!(
            input(r#"{"k":"axis","pad":0,"axis":2,"value":-2}"#),
            InputEvent::Axis {
                device: 0,
                relative: false,
                code: 3,
                value: -32767
            }
        );
        assert_eq!(
            parse(br#"{"k":"ping","t":12.5}"#).unwrap(),
            Message::Ping(12.5)
        );
    }

    #[test]
    fn random_and_mutated_messages_never_panic() {
        // A small deterministic generator (no fuzzer in this crate's tests): random bytes, and
        // valid messages with bytes flipped, cut or repeated.
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid: [&[u8]; 4] = [
            br#"{"k":"key","code":"KeyW","down":true}"#,
            br#"{"k":"move","dx":3,"dy":-2,"x":640,"y":360}"#,
            br#"{"k":"axis","pad":0,"axis":2,"value":-0.5}"#,
            br#"{"k":"ping","t":123.4}"#,
        ];
        for i in 0..50_000 {
            let mut m: Vec<u8> = if i % 2 == 0 {
                (0..next() % 80).map(|_| next() as u8).collect()
            } else {
                valid[(next() % 4) as usize].to_vec()
            };
            for _ in 0..(next() % 4) {
                if m.is_empty() {
                    break;
                }
                let at = (next() as usize) % m.len();
                match next() % 3 {
                    0 => m[at] = next() as u8,
                    1 => m.truncate(at),
                    _ => {
                        let b = m[at];
                        m.insert(at, b);
                    }
                }
            }
            let _ = parse(&m);
        }
    }

    #[test]
    fn malformed_messages_are_errors_never_panics() {
        for bad in [
            &b"not json"[..],
            br#"{"k":"key","down":true}"#,
            br#"{"k":"move","dx":1e300,"dy":0}"#,
            br#"{"k":"button","button":9,"down":true}"#,
            br#"{"k":"pad","pad":99,"button":0,"down":true}"#,
            br#"{"k":"teleport"}"#,
            br#"{"k":"key","code":"KeyW","down":true,"extra":1}"#,
            br#"{"k":"ping"}"#,
            &[b' '; MAX_MESSAGE + 1][..],
            &[0xff, 0xfe][..],
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn malformed_messages_say_what_is_wrong() {
        let why = |m: &[u8]| parse(m).err().unwrap();
        let e = why(br#"{"k":"key","down":true}"#);
        assert!(matches!(e, MalformedInput::Missing("code")), "{e:?}");
        assert_eq!(e.to_string(), "code is missing");
        let e = why(br#"{"k":"move","dx":1e300,"dy":0}"#);
        assert!(
            matches!(e, MalformedInput::OutOfRange { what: "dx", .. }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), format!("dx {} is out of range", 1e300));
        assert_eq!(
            why(br#"{"k":"button","button":9,"down":true}"#).to_string(),
            "mouse button 9 (expected 1 to 5)"
        );
        assert_eq!(
            why(br#"{"k":"pad","pad":99,"button":0,"down":true}"#).to_string(),
            "gamepad 99 (expected 0 to 15)"
        );
        assert_eq!(
            why(br#"{"k":"axis","pad":0,"axis":1}"#).to_string(),
            "value is missing or not a number"
        );
        assert_eq!(why(br#"{"k":"ping"}"#).to_string(), "ping without a time");
        assert_eq!(
            why(br#"{"k":"teleport"}"#).to_string(),
            r#"unknown kind "teleport""#
        );
        assert!(matches!(why(b"not json"), MalformedInput::Json(_)));
        assert_eq!(
            why(&[b' '; MAX_MESSAGE + 1]).to_string(),
            format!("{} bytes (at most {MAX_MESSAGE})", MAX_MESSAGE + 1)
        );
    }
}
