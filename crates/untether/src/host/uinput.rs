//! The client's keyboard and mouse on a Wayland desktop (or a console): virtual devices
//! through `/dev/uinput`, which the compositor's libinput takes as real ones. A keyboard (SDL
//! keycodes mapped to evdev `KEY_*`), an absolute pointer over the captured size (the client's
//! window position maps 1:1 to the captured output, like QEMU's USB tablet) and a relative mouse
//! (for games that grab the pointer). Where `/dev/uinput` cannot be opened the host stops at
//! start with one line that says why and what to do. **Untested on real hardware** (the
//! development machine has no `/dev/uinput`).

use std::path::Path;

use evdev::uinput::VirtualDevice;
use evdev::{
    AbsInfo, AbsoluteAxisCode, AttributeSet, EventType, InputEvent as EvEvent, KeyCode,
    RelativeAxisCode, UinputAbsSetup,
};
use untether_proto::InputEvent;

use super::error::HostError;

/// evdev codes of the mouse buttons (BTN_LEFT … BTN_EXTRA).
const BUTTONS: [u16; 5] = [0x110, 0x111, 0x112, 0x113, 0x114];
const REL_X: u16 = 0;
const REL_Y: u16 = 1;
const REL_HWHEEL: u16 = 6;
const REL_WHEEL: u16 = 8;

/// The virtual keyboard, absolute pointer and relative mouse.
pub(crate) struct UinputDevices {
    keyboard: VirtualDevice,
    pointer: VirtualDevice,
    mouse: VirtualDevice,
}

/// Checks that `path` can be opened for writing (what creating a device needs), with the
/// error the host stops with.
pub(crate) fn check(path: &Path) -> Result<(), HostError> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map(|_| ())
        .map_err(|e| {
            HostError::Usage(format!(
                "Wayland input needs {}: {e} (load the module with `modprobe uinput`, and run the host as a user who may write it, e.g. in group input with a udev rule; or pass --input none)",
                path.display()
            ))
        })
}

impl UinputDevices {
    /// Creates the devices; the pointer spans `width` x `height`.
    pub fn open(path: &Path, width: u32, height: u32) -> Result<UinputDevices, HostError> {
        check(path)?;
        let io = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| HostError::Usage(format!("uinput {what}: {e}"))
        };
        let mut keys = AttributeSet::<KeyCode>::new();
        for code in 1..248u16 {
            keys.insert(KeyCode::new(code));
        }
        let keyboard = VirtualDevice::builder()
            .map_err(io("keyboard"))?
            .name("untether keyboard")
            .with_keys(&keys)
            .map_err(io("keyboard"))?
            .build()
            .map_err(io("keyboard"))?;
        let mut buttons = AttributeSet::<KeyCode>::new();
        for b in BUTTONS {
            buttons.insert(KeyCode::new(b));
        }
        let mut wheels = AttributeSet::<RelativeAxisCode>::new();
        wheels.insert(RelativeAxisCode(REL_WHEEL));
        wheels.insert(RelativeAxisCode(REL_HWHEEL));
        let mut b = VirtualDevice::builder()
            .map_err(io("pointer"))?
            .name("untether pointer")
            .with_keys(&buttons)
            .map_err(io("pointer"))?
            .with_relative_axes(&wheels)
            .map_err(io("pointer"))?;
        for (code, max) in [(0u16, width), (1, height)] {
            let setup = UinputAbsSetup::new(
                AbsoluteAxisCode(code),
                AbsInfo::new(0, 0, max.saturating_sub(1) as i32, 0, 0, 1),
            );
            b = b.with_absolute_axis(&setup).map_err(io("pointer"))?;
        }
        let pointer = b.build().map_err(io("pointer"))?;
        let mut rels = AttributeSet::<RelativeAxisCode>::new();
        for c in [REL_X, REL_Y, REL_WHEEL, REL_HWHEEL] {
            rels.insert(RelativeAxisCode(c));
        }
        let mouse = VirtualDevice::builder()
            .map_err(io("mouse"))?
            .name("untether mouse")
            .with_keys(&buttons)
            .map_err(io("mouse"))?
            .with_relative_axes(&rels)
            .map_err(io("mouse"))?
            .build()
            .map_err(io("mouse"))?;
        Ok(UinputDevices {
            keyboard,
            pointer,
            mouse,
        })
    }

    /// Replays one event. Ok(false): it has no keyboard or mouse equivalent (dropped).
    pub fn replay(&mut self, event: &InputEvent) -> std::io::Result<bool> {
        let plan = plan(event);
        if plan.is_empty() {
            return Ok(false);
        }
        for (dev, events) in plan {
            let d = match dev {
                Dev::Keyboard => &mut self.keyboard,
                Dev::Pointer => &mut self.pointer,
                Dev::Mouse => &mut self.mouse,
            };
            d.emit(&events)?;
        }
        Ok(true)
    }
}

/// Which virtual device an event goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dev {
    Keyboard,
    Pointer,
    Mouse,
}

fn key(code: u16, down: bool) -> EvEvent {
    EvEvent::new(EventType::KEY.0, code, down as i32)
}

fn rel(code: u16, value: i32) -> EvEvent {
    EvEvent::new(EventType::RELATIVE.0, code, value)
}

/// The evdev events for one client input event, per device (emit adds the SYN_REPORT).
fn plan(event: &InputEvent) -> Vec<(Dev, Vec<EvEvent>)> {
    match *event {
        InputEvent::Key { code, down } => sdl_to_evdev(code)
            .map(|k| vec![(Dev::Keyboard, vec![key(k, down)])])
            .unwrap_or_default(),
        InputEvent::PointerMotion { x, y, .. } => vec![(
            Dev::Pointer,
            vec![
                EvEvent::new(EventType::ABSOLUTE.0, 0, x.max(0)),
                EvEvent::new(EventType::ABSOLUTE.0, 1, y.max(0)),
            ],
        )],
        InputEvent::MouseButton { button, down } => match button {
            1..=5 => {
                // SDL: 1 left, 2 middle, 3 right, 4 X1, 5 X2.
                let code = [0x110, 0x112, 0x111, 0x113, 0x114][button as usize - 1];
                vec![(Dev::Pointer, vec![key(code, down)])]
            }
            _ => Vec::new(),
        },
        InputEvent::Wheel { dx, dy } => {
            let mut ev = Vec::new();
            if dy != 0 {
                ev.push(rel(REL_WHEEL, dy));
            }
            if dx != 0 {
                ev.push(rel(REL_HWHEEL, dx));
            }
            if ev.is_empty() {
                Vec::new()
            } else {
                vec![(Dev::Pointer, ev)]
            }
        }
        InputEvent::Button { code, down, .. } => match code {
            1..=247 => vec![(Dev::Keyboard, vec![key(code, down)])],
            0x110..=0x114 => vec![(Dev::Pointer, vec![key(code, down)])],
            _ => Vec::new(),
        },
        InputEvent::Axis {
            relative: true,
            code: c @ (REL_X | REL_Y | REL_WHEEL | REL_HWHEEL),
            value,
            ..
        } => vec![(Dev::Mouse, vec![rel(c, value)])],
        InputEvent::Text(t) => {
            let mut ev = Vec::new();
            for ch in t.as_str().chars() {
                let shift = ch.is_ascii_uppercase();
                let Some(k) = sdl_to_evdev(ch.to_ascii_lowercase() as u32) else {
                    continue;
                };
                if shift {
                    ev.push(key(42, true));
                }
                ev.push(key(k, true));
                ev.push(key(k, false));
                if shift {
                    ev.push(key(42, false));
                }
            }
            if ev.is_empty() {
                Vec::new()
            } else {
                vec![(Dev::Keyboard, ev)]
            }
        }
        InputEvent::Axis { .. } | InputEvent::HeadPose { .. } => Vec::new(),
    }
}

/// The evdev `KEY_*` code of an SDL keycode (US layout), where it has one.
pub(crate) fn sdl_to_evdev(code: u32) -> Option<u16> {
    const LETTERS: [u16; 26] = [
        30, 48, 46, 32, 18, 33, 34, 35, 23, 36, 37, 38, 50, 49, 24, 25, 16, 19, 31, 20, 22, 47, 17,
        45, 21, 44,
    ];
    const SCANCODE_MASK: u32 = 0x4000_0000;
    Some(match code {
        0x61..=0x7A => LETTERS[(code - 0x61) as usize],
        0x31..=0x39 => (code - 0x31 + 2) as u16,
        0x30 => 11,
        0x0D => 28,
        0x1B => 1,
        0x08 => 14,
        0x09 => 15,
        0x20 => 57,
        0x2D => 12,
        0x3D => 13,
        0x5B => 26,
        0x5D => 27,
        0x5C => 43,
        0x3B => 39,
        0x27 => 40,
        0x60 => 41,
        0x2C => 51,
        0x2E => 52,
        0x2F => 53,
        0x7F => 111,
        c if c & SCANCODE_MASK != 0 => match c & !SCANCODE_MASK {
            // F1..F10, F11, F12.
            s @ 58..=67 => (s + 1) as u16,
            68 => 87,
            69 => 88,
            0x39 => 58,  // caps lock
            0x49 => 110, // insert
            0x4A => 102, // home
            0x4B => 104, // page up
            0x4D => 107, // end
            0x4E => 109, // page down
            0x4F => 106, // right
            0x50 => 105, // left
            0x51 => 108, // down
            0x52 => 103, // up
            0xE0 => 29,  // left ctrl
            0xE1 => 42,  // left shift
            0xE2 => 56,  // left alt
            0xE3 => 125, // left meta
            0xE4 => 97,  // right ctrl
            0xE5 => 54,  // right shift
            0xE6 => 100, // right alt
            0xE7 => 126, // right meta
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_proto::TextChunk;

    #[test]
    fn missing_uinput_is_one_clear_line() {
        let e = UinputDevices::open(Path::new("/nonexistent/uinput"), 640, 480)
            .err()
            .expect("no uinput there");
        let line = e.to_string();
        assert!(
            line.contains("/nonexistent/uinput") && line.contains("modprobe uinput"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn keys_and_the_pointer_map_to_evdev() {
        assert_eq!(sdl_to_evdev(b'w' as u32), Some(17));
        assert_eq!(sdl_to_evdev(b'0' as u32), Some(11));
        assert_eq!(sdl_to_evdev(0x4000_0052), Some(103), "up");
        assert_eq!(sdl_to_evdev(0x4000_003A), Some(59), "F1");
        assert_eq!(sdl_to_evdev(0x4000_0045), Some(88), "F12");
        assert_eq!(sdl_to_evdev(0x1234), None);
        let p = plan(&InputEvent::MouseButton {
            button: 3,
            down: true,
        });
        assert_eq!(p[0].0, Dev::Pointer);
        assert_eq!(p[0].1[0].code(), 0x111, "SDL's right button is BTN_RIGHT");
        let t = plan(&InputEvent::Text(TextChunk::new("Hi").unwrap()));
        let codes: Vec<(u16, i32)> = t[0].1.iter().map(|e| (e.code(), e.value())).collect();
        assert_eq!(
            codes,
            [(42, 1), (35, 1), (35, 0), (42, 0), (23, 1), (23, 0)],
            "H with shift, then i"
        );
        assert!(plan(&InputEvent::HeadPose {
            yaw: 0.0,
            pitch: 0.0,
            roll: 0.0
        })
        .is_empty());
    }

    /// On a machine without /dev/uinput (this development box, most containers) the real
    /// path gives the same clear line; where it exists, the devices are created.
    #[test]
    fn the_real_uinput_opens_or_says_why() {
        let path = Path::new(super::super::gamepad::UINPUT);
        match UinputDevices::open(path, 1920, 1080) {
            Ok(mut d) => {
                assert!(d.replay(&InputEvent::Wheel { dx: 0, dy: 1 }).unwrap());
            }
            Err(e) => {
                assert!(!path.exists() || e.to_string().contains("uinput"), "{e}");
                assert!(e.to_string().contains(&path.display().to_string()), "{e}");
            }
        }
    }
}
