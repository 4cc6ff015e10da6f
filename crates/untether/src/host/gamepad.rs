//! The client's game controllers on the host: buttons arrive on the reliable channel
//! (`InputEvent::Button` with `device` = [`GAMEPAD_DEVICE`] + controller, Linux `BTN_*` codes),
//! sticks and triggers on the latest-wins channel (keys [`keys::gamepad_axis`], −1..1, triggers
//! 0..1). The host keeps each controller's state for the application
//! ([`crate::host::Host::gamepad`]) and, where `/dev/uinput` can be opened, replays it into a
//! virtual gamepad per controller (so an unmodified game sees a gamepad). Where it cannot (no
//! uinput module, no permission, a container), it says so once, in one line, and the
//! application API still gets everything. **The uinput path is untested on real hardware**
//! (the development machine has no `/dev/uinput`).

use std::path::{Path, PathBuf};

use evdev::uinput::VirtualDevice;
use evdev::{AbsInfo, AbsoluteAxisCode, AttributeSet, EventType, InputEvent as EvEvent, KeyCode};
use untether_proto::state::keys;
use untether_proto::{InputEvent, StateEntry, StateKey, StateValue};

/// Input devices numbered from here are the client's game controllers (0x80 + controller).
pub const GAMEPAD_DEVICE: u8 = 0x80;
/// Controllers tracked.
pub const MAX_GAMEPADS: usize = 4;
/// Axes per controller: left x, left y, right x, right y, left trigger, right trigger (SDL's
/// order).
pub const AXES: usize = 6;
/// The evdev axes of a virtual pad, in that order (ABS_X, ABS_Y, ABS_RX, ABS_RY, ABS_Z,
/// ABS_RZ).
const ABS_CODES: [u16; AXES] = [0x00, 0x01, 0x03, 0x04, 0x02, 0x05];
/// Buttons a virtual pad has (BTN_SOUTH … BTN_THUMBR, BTN_DPAD_*).
const BUTTONS: [u16; 15] = [
    0x130, 0x131, 0x133, 0x134, 0x136, 0x137, 0x13a, 0x13b, 0x13c, 0x13d, 0x13e, 0x220, 0x221,
    0x222, 0x223,
];
/// Where uinput lives.
pub const UINPUT: &str = "/dev/uinput";

/// One controller as the host last heard it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GamepadState {
    /// Linux `BTN_*` codes of the buttons held.
    pub buttons: Vec<u16>,
    /// Left x, left y, right x, right y (−1..1), left and right trigger (0..1).
    pub axes: [f32; AXES],
    /// Whether the controller has sent anything.
    pub seen: bool,
}

/// Virtual gamepads through uinput, opened on first use.
enum Virtual {
    Untried(PathBuf),
    Open(Vec<Option<VirtualDevice>>),
    Unavailable,
}

/// Every controller's state and the virtual pads.
pub(crate) struct Gamepads {
    pads: [GamepadState; MAX_GAMEPADS],
    axis_pids: [[Option<u32>; AXES]; MAX_GAMEPADS],
    virt: Virtual,
    /// Notes for the host's log (the "no virtual gamepad" line).
    pub notes: Vec<String>,
}

impl Default for Gamepads {
    fn default() -> Self {
        Gamepads::with_uinput(Path::new(UINPUT))
    }
}

impl Gamepads {
    pub fn with_uinput(path: &Path) -> Gamepads {
        Gamepads {
            pads: Default::default(),
            axis_pids: [[None; AXES]; MAX_GAMEPADS],
            virt: Virtual::Untried(path.to_path_buf()),
            notes: Vec::new(),
        }
    }

    pub fn state(&self, n: usize) -> Option<GamepadState> {
        self.pads.get(n).filter(|p| p.seen).cloned()
    }

    /// A reliable input event: true when it was a controller's button (recorded, replayed).
    pub fn on_event(&mut self, ev: &InputEvent) -> bool {
        let InputEvent::Button { device, code, down } = *ev else {
            return false;
        };
        let Some(n) = (device as usize).checked_sub(GAMEPAD_DEVICE as usize) else {
            return false;
        };
        if n >= MAX_GAMEPADS {
            return false;
        }
        let pad = &mut self.pads[n];
        pad.seen = true;
        pad.buttons.retain(|b| *b != code);
        if down {
            pad.buttons.push(code);
        }
        self.replay(n, &[EvEvent::new(EventType::KEY.0, code, down as i32)]);
        true
    }

    /// The latest-wins state: the axes of every controller that changed.
    pub fn on_state(&mut self, get: impl Fn(StateKey) -> Option<StateEntry>) {
        for n in 0..MAX_GAMEPADS {
            let mut changed = Vec::new();
            for (a, &abs) in ABS_CODES.iter().enumerate() {
                let Some(e) = get(keys::gamepad_axis(n as u8, a as u8)) else {
                    continue;
                };
                if self.axis_pids[n][a] == Some(e.pid) {
                    continue;
                }
                self.axis_pids[n][a] = Some(e.pid);
                if let StateValue::Axis(v) = e.value {
                    let v = v.clamp(-1.0, 1.0);
                    self.pads[n].axes[a] = v;
                    self.pads[n].seen = true;
                    changed.push(EvEvent::new(
                        EventType::ABSOLUTE.0,
                        abs,
                        (v * 32767.0) as i32,
                    ));
                }
            }
            if !changed.is_empty() {
                self.replay(n, &changed);
            }
        }
    }

    fn replay(&mut self, n: usize, events: &[EvEvent]) {
        if let Virtual::Untried(path) = &self.virt {
            self.virt = match open_uinput(path) {
                Ok(()) => Virtual::Open((0..MAX_GAMEPADS).map(|_| None).collect()),
                Err(e) => {
                    self.notes.push(format!(
                        "no virtual gamepad: cannot open {}: {e}; the client's controllers \
                         reach the application API only (Host::gamepad, input events)",
                        path.display()
                    ));
                    Virtual::Unavailable
                }
            };
        }
        let Virtual::Open(devs) = &mut self.virt else {
            return;
        };
        if devs[n].is_none() {
            match create_pad(n) {
                Ok(d) => devs[n] = Some(d),
                Err(e) => {
                    self.notes
                        .push(format!("no virtual gamepad {n}: uinput refused it: {e}"));
                    self.virt = Virtual::Unavailable;
                    return;
                }
            }
        }
        if let Some(d) = devs[n].as_mut() {
            if let Err(e) = d.emit(events) {
                self.notes.push(format!("virtual gamepad {n}: {e}"));
                devs[n] = None;
            }
        }
    }
}

/// Whether uinput can be opened for writing (what creating a device needs).
fn open_uinput(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map(|_| ())
}

/// A virtual Xbox-like pad for controller `n`.
fn create_pad(n: usize) -> std::io::Result<VirtualDevice> {
    let mut buttons = AttributeSet::<KeyCode>::new();
    for b in BUTTONS {
        buttons.insert(KeyCode::new(b));
    }
    let name = format!("untether gamepad {n}");
    let mut b = VirtualDevice::builder()?
        .name(name.as_bytes())
        .with_keys(&buttons)?;
    for (a, code) in ABS_CODES.iter().enumerate() {
        let (min, max) = if a >= 4 { (0, 32767) } else { (-32768, 32767) };
        let setup = evdev::UinputAbsSetup::new(
            AbsoluteAxisCode(*code),
            AbsInfo::new(0, min, max, 16, 128, 0),
        );
        b = b.with_absolute_axis(&setup)?;
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_and_axes_make_the_state_and_no_uinput_is_one_line() {
        let mut g = Gamepads::with_uinput(Path::new("/nonexistent/uinput"));
        assert!(g.state(0).is_none());
        assert!(g.on_event(&InputEvent::Button {
            device: GAMEPAD_DEVICE + 1,
            code: 0x130,
            down: true,
        }));
        // An evdev device's button is not a controller's.
        assert!(!g.on_event(&InputEvent::Button {
            device: 0,
            code: 0x130,
            down: true,
        }));
        g.on_state(|k| {
            (k == keys::gamepad_axis(1, 4)).then_some(StateEntry {
                value: StateValue::Axis(0.5),
                pid: 3,
                received_us: 0,
            })
        });
        let s = g.state(1).unwrap();
        assert_eq!(s.buttons, vec![0x130]);
        assert_eq!(s.axes[4], 0.5);
        g.on_event(&InputEvent::Button {
            device: GAMEPAD_DEVICE + 1,
            code: 0x130,
            down: false,
        });
        assert!(g.state(1).unwrap().buttons.is_empty());
        // The missing uinput was said once, in one line.
        assert_eq!(g.notes.len(), 1, "{:?}", g.notes);
        assert!(
            g.notes[0].starts_with("no virtual gamepad: cannot open /nonexistent/uinput"),
            "{}",
            g.notes[0]
        );
        // This machine: whatever /dev/uinput is, the state is kept.
        let mut real = Gamepads::default();
        real.on_event(&InputEvent::Button {
            device: GAMEPAD_DEVICE,
            code: 0x131,
            down: true,
        });
        assert_eq!(real.state(0).unwrap().buttons, vec![0x131]);
        if !Path::new(UINPUT).exists() {
            assert_eq!(real.notes.len(), 1);
        }
    }
}
