//! The client's input: the window's events (minus the keys the window keeps for itself:
//! [`WindowKeys`]), registered evdev devices (one thread each: buttons in order, axes coalesced
//! per report), and which channel each event takes (continuous values on the latest-wins state
//! channel, discrete ones reliable).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use untether_media::evdev::{DeviceEvent, DeviceReader};
use untether_media::present::{keys, WindowEvent};
use untether_proto::state::keys as state_keys;
use untether_proto::{InputEvent, StateValue};

use super::network::{ClientCommand, InputKind};
use super::options::InputDevice;
use super::ClientShared;
use crate::driver::Handle;

/// Reads one input device until the client stops or the device ends, sending its events.
pub(crate) fn device_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    index: u8,
    dev: InputDevice,
) {
    let fd = dev.file.as_raw_fd();
    let name = dev.name.clone();
    let mut reader = DeviceReader::new(dev.file);
    let mut events = Vec::new();
    while !s.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the fd stays open (owned by `reader`) during the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, 50) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            log::warn!("client: input device {name}: {e}");
            return;
        }
        if rc == 0 {
            continue;
        }
        match reader.read(&mut events) {
            Ok(true) => {}
            Ok(false) => {
                log::info!("client: input device {name} closed");
                return;
            }
            Err(e) => {
                log::warn!("client: input device {name}: {e}");
                return;
            }
        }
        if events.is_empty() {
            continue;
        }
        if !s.status().connected {
            // Nothing to send to yet; state (axes) will be current again at the next report.
            events.clear();
            continue;
        }
        let batch = events.drain(..).map(|ev| device_input(index, ev)).collect();
        if !net.send(ClientCommand::Input(InputKind::Device, batch)) {
            return;
        }
    }
}

/// The protocol event of a device event of device `index`.
pub fn device_input(index: u8, ev: DeviceEvent) -> InputEvent {
    match ev {
        DeviceEvent::Button { code, down } => InputEvent::Button {
            device: index,
            code,
            down,
        },
        DeviceEvent::Absolute { code, value } => InputEvent::Axis {
            device: index,
            relative: false,
            code,
            value,
        },
        DeviceEvent::Relative { code, value } => InputEvent::Axis {
            device: index,
            relative: true,
            code,
            value,
        },
    }
}

/// The latest-wins state key and value of a continuous input event (pointer position, head
/// pose); None for discrete events (keys, buttons, text, wheel, device axes), which go on the
/// reliable channel.
pub fn state_input(event: &InputEvent) -> Option<(untether_proto::StateKey, StateValue)> {
    match *event {
        InputEvent::PointerMotion { x, y, .. } => {
            Some((state_keys::POINTER, StateValue::Pointer { x, y }))
        }
        InputEvent::HeadPose { yaw, pitch, roll } => Some((
            state_keys::HEAD_POSE,
            StateValue::Angles { yaw, pitch, roll },
        )),
        _ => None,
    }
}

/// Game controller changes as the protocol carries them: buttons as reliable events of device
/// `GAMEPAD_DEVICE + controller`, axes as latest-wins keys `gamepad_axis(controller, axis)`.
pub fn gamepad_input(
    changes: Vec<untether_media::gamepad::GamepadChange>,
) -> (Vec<InputEvent>, Vec<(untether_proto::StateKey, StateValue)>) {
    use untether_media::gamepad::GamepadChange;
    let (mut buttons, mut axes) = (Vec::new(), Vec::new());
    for c in changes {
        match c {
            GamepadChange::Button {
                controller,
                code,
                down,
            } => buttons.push(InputEvent::Button {
                device: crate::host::GAMEPAD_DEVICE.saturating_add(controller),
                code,
                down,
            }),
            GamepadChange::Axis {
                controller,
                axis,
                value,
            } => axes.push((
                state_keys::gamepad_axis(controller, axis),
                StateValue::Axis(value),
            )),
        }
    }
    (buttons, axes)
}

/// Turns window events into protocol input events.
pub fn window_input(event: &WindowEvent) -> Option<InputEvent> {
    match *event {
        WindowEvent::Key { code, down, repeat } if !repeat => Some(InputEvent::Key {
            code: code as u32,
            down,
        }),
        WindowEvent::MouseMotion { x, y, dx, dy } => {
            Some(InputEvent::PointerMotion { x, y, dx, dy })
        }
        WindowEvent::MouseButton { button, down } => Some(InputEvent::MouseButton { button, down }),
        WindowEvent::Wheel { dx, dy } => Some(InputEvent::Wheel { dx, dy }),
        WindowEvent::Key { .. } | WindowEvent::Exposed | WindowEvent::Quit => None,
    }
}

/// What a window-control key does. These keys are never sent to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowAction {
    /// F11, or Alt+Enter.
    ToggleFullscreen,
    /// F10: relative mouse mode (hidden, confined, unbounded motion, as games want) or back.
    ToggleMouseCapture,
    /// F12: the statistics overlay.
    ToggleOverlay,
}

/// The window's own keys, as the title and `--help` say them.
pub const WINDOW_KEYS: &str = "F11 or Alt+Enter fullscreen · F10 capture mouse · F12 statistics";

/// Where a window event goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Routed {
    /// A window-control key: the window acts on it, the host never sees it.
    Action(WindowAction),
    /// Input for the host.
    Input(InputEvent),
    /// Nothing to do (a control key's release or repeat, a key repeat, a redraw request).
    Nothing,
}

/// Sorts the window's events into window control and input for the host. While the mouse is
/// captured, SDL reports motion only (the pointer stays put), so the pointer position sent on
/// is the sum of that motion: the host sees the movement whatever it makes of positions.
#[derive(Debug, Default)]
pub struct WindowKeys {
    alt_down: [bool; 2],
    /// Control keys pressed whose release must not reach the host either.
    held: Vec<i32>,
    captured: bool,
    /// The last pointer position sent (absolute, or summed motion while captured).
    pointer: (i32, i32),
}

impl WindowKeys {
    pub fn captured(&self) -> bool {
        self.captured
    }

    /// The mouse was captured or released; summed motion continues from the last position.
    pub fn set_captured(&mut self, on: bool) {
        self.captured = on;
    }

    pub fn route(&mut self, event: &WindowEvent) -> Routed {
        match *event {
            WindowEvent::Key { code, down, repeat } => {
                if code == keys::LALT || code == keys::RALT {
                    self.alt_down[(code == keys::RALT) as usize] = down;
                }
                let alt = self.alt_down[0] || self.alt_down[1];
                let action = match code {
                    keys::F11 => Some(WindowAction::ToggleFullscreen),
                    keys::F10 => Some(WindowAction::ToggleMouseCapture),
                    keys::F12 => Some(WindowAction::ToggleOverlay),
                    keys::RETURN if alt && down && !self.held.contains(&code) => {
                        Some(WindowAction::ToggleFullscreen)
                    }
                    _ => None,
                };
                if down {
                    if let Some(a) = action {
                        if repeat || self.held.contains(&code) {
                            return Routed::Nothing;
                        }
                        self.held.push(code);
                        return Routed::Action(a);
                    }
                    if self.held.contains(&code) {
                        return Routed::Nothing;
                    }
                } else if let Some(i) = self.held.iter().position(|&k| k == code) {
                    self.held.swap_remove(i);
                    return Routed::Nothing;
                }
                window_input(event).map_or(Routed::Nothing, Routed::Input)
            }
            WindowEvent::MouseMotion { x, y, dx, dy } => {
                self.pointer = if self.captured {
                    (
                        self.pointer.0.saturating_add(dx),
                        self.pointer.1.saturating_add(dy),
                    )
                } else {
                    (x, y)
                };
                Routed::Input(InputEvent::PointerMotion {
                    x: self.pointer.0,
                    y: self.pointer.1,
                    dx,
                    dy,
                })
            }
            _ => window_input(event).map_or(Routed::Nothing, Routed::Input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuous_input_takes_the_state_channel() {
        let motion = InputEvent::PointerMotion {
            x: 3,
            y: 4,
            dx: 1,
            dy: 0,
        };
        assert_eq!(
            state_input(&motion),
            Some((state_keys::POINTER, StateValue::Pointer { x: 3, y: 4 }))
        );
        assert!(state_input(&InputEvent::Key {
            code: 1,
            down: true
        })
        .is_none());
    }

    #[test]
    fn key_repeats_are_not_sent() {
        assert!(window_input(&WindowEvent::Key {
            code: 7,
            down: true,
            repeat: true
        })
        .is_none());
        assert_eq!(
            window_input(&WindowEvent::Key {
                code: 7,
                down: true,
                repeat: false
            }),
            Some(InputEvent::Key {
                code: 7,
                down: true
            })
        );
        assert!(window_input(&WindowEvent::Quit).is_none());
    }

    fn key(code: i32, down: bool) -> WindowEvent {
        WindowEvent::Key {
            code,
            down,
            repeat: false,
        }
    }

    #[test]
    fn window_keys_act_and_never_reach_the_host() {
        let mut k = WindowKeys::default();
        assert_eq!(
            k.route(&key(keys::F11, true)),
            Routed::Action(WindowAction::ToggleFullscreen)
        );
        assert_eq!(k.route(&key(keys::F11, false)), Routed::Nothing);
        assert_eq!(
            k.route(&key(keys::F10, true)),
            Routed::Action(WindowAction::ToggleMouseCapture)
        );
        // Held down: auto-repeat does nothing, the release is not forwarded.
        let repeat = WindowEvent::Key {
            code: keys::F10,
            down: true,
            repeat: true,
        };
        assert_eq!(k.route(&repeat), Routed::Nothing);
        assert_eq!(k.route(&key(keys::F10, false)), Routed::Nothing);
        assert_eq!(
            k.route(&key(keys::F12, true)),
            Routed::Action(WindowAction::ToggleOverlay)
        );
        // Alt+Enter: Alt goes to the host (it may be half of a host shortcut), Enter does not.
        assert_eq!(
            k.route(&key(keys::LALT, true)),
            Routed::Input(InputEvent::Key {
                code: keys::LALT as u32,
                down: true
            })
        );
        assert_eq!(
            k.route(&key(keys::RETURN, true)),
            Routed::Action(WindowAction::ToggleFullscreen)
        );
        assert_eq!(k.route(&key(keys::RETURN, false)), Routed::Nothing);
        assert!(matches!(
            k.route(&key(keys::LALT, false)),
            Routed::Input(InputEvent::Key { down: false, .. })
        ));
        // Enter alone is the host's.
        assert_eq!(
            k.route(&key(keys::RETURN, true)),
            Routed::Input(InputEvent::Key {
                code: keys::RETURN as u32,
                down: true
            })
        );
        assert!(matches!(
            k.route(&key(keys::RETURN, false)),
            Routed::Input(_)
        ));
        // Other keys pass.
        assert!(matches!(k.route(&key(119, true)), Routed::Input(_)));
        assert_eq!(k.route(&WindowEvent::Exposed), Routed::Nothing);
    }

    #[test]
    fn a_captured_pointer_sends_summed_motion() {
        let mut k = WindowKeys::default();
        let motion = |x, y, dx, dy| WindowEvent::MouseMotion { x, y, dx, dy };
        assert_eq!(
            k.route(&motion(100, 50, 3, 0)),
            Routed::Input(InputEvent::PointerMotion {
                x: 100,
                y: 50,
                dx: 3,
                dy: 0
            })
        );
        k.set_captured(true);
        // Relative mode: SDL's position stays put, the motion keeps coming.
        k.route(&motion(100, 50, 7, -2));
        assert_eq!(
            k.route(&motion(100, 50, 7, -2)),
            Routed::Input(InputEvent::PointerMotion {
                x: 114,
                y: 46,
                dx: 7,
                dy: -2
            })
        );
        k.set_captured(false);
        assert!(matches!(
            k.route(&motion(10, 10, 1, 1)),
            Routed::Input(InputEvent::PointerMotion { x: 10, y: 10, .. })
        ));
    }
}
