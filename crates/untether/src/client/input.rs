//! The client's input: the window's events, registered evdev devices (one thread each: buttons
//! in order, axes coalesced per report), and which channel each event takes (continuous values
//! on the latest-wins state channel, discrete ones reliable).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use untether_media::evdev::{DeviceEvent, DeviceReader};
use untether_media::present::WindowEvent;
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
        if !s.connected.load(Ordering::SeqCst) {
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
        WindowEvent::Key { .. } | WindowEvent::Quit => None,
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
}
