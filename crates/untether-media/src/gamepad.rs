//! SDL game controllers: polled on the thread that runs the window (SDL wants one thread), up
//! to [`MAX_GAMEPADS`]; each poll reports what changed — buttons as Linux `BTN_*` codes (so a
//! host can replay them into a uinput gamepad as they are), sticks −1..1 and triggers 0..1.
//! (The client sends buttons on the reliable channel, axes on the latest-wins one.)
//!
//! Through `sdl2::sys` rather than the `sdl2` crate's context, which allows one `Sdl` per
//! process and thread and would shut the window's SDL down with ours: the subsystem is
//! reference-counted by SDL itself (`SDL_InitSubSystem` / `SDL_QuitSubSystem`).

use sdl2::sys as sdl;

/// Controllers read at once.
pub const MAX_GAMEPADS: usize = 4;

/// SDL's buttons (A, B, X, Y, back, guide, start, left stick, right stick, left shoulder,
/// right shoulder, d-pad up/down/left/right) and their Linux codes.
const BUTTONS: [(sdl::SDL_GameControllerButton, u16); 15] = {
    use sdl::SDL_GameControllerButton::*;
    [
        (SDL_CONTROLLER_BUTTON_A, 0x130),
        (SDL_CONTROLLER_BUTTON_B, 0x131),
        (SDL_CONTROLLER_BUTTON_X, 0x133),
        (SDL_CONTROLLER_BUTTON_Y, 0x134),
        (SDL_CONTROLLER_BUTTON_BACK, 0x13a),
        (SDL_CONTROLLER_BUTTON_GUIDE, 0x13c),
        (SDL_CONTROLLER_BUTTON_START, 0x13b),
        (SDL_CONTROLLER_BUTTON_LEFTSTICK, 0x13d),
        (SDL_CONTROLLER_BUTTON_RIGHTSTICK, 0x13e),
        (SDL_CONTROLLER_BUTTON_LEFTSHOULDER, 0x136),
        (SDL_CONTROLLER_BUTTON_RIGHTSHOULDER, 0x137),
        (SDL_CONTROLLER_BUTTON_DPAD_UP, 0x220),
        (SDL_CONTROLLER_BUTTON_DPAD_DOWN, 0x221),
        (SDL_CONTROLLER_BUTTON_DPAD_LEFT, 0x222),
        (SDL_CONTROLLER_BUTTON_DPAD_RIGHT, 0x223),
    ]
};

/// SDL's axes in the order of the state keys (left x, left y, right x, right y, left trigger,
/// right trigger).
const AXES: [sdl::SDL_GameControllerAxis; 6] = {
    use sdl::SDL_GameControllerAxis::*;
    [
        SDL_CONTROLLER_AXIS_LEFTX,
        SDL_CONTROLLER_AXIS_LEFTY,
        SDL_CONTROLLER_AXIS_RIGHTX,
        SDL_CONTROLLER_AXIS_RIGHTY,
        SDL_CONTROLLER_AXIS_TRIGGERLEFT,
        SDL_CONTROLLER_AXIS_TRIGGERRIGHT,
    ]
};

/// A change on a controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GamepadChange {
    /// A button went down or up (`code`: Linux `BTN_*`).
    Button {
        controller: u8,
        code: u16,
        down: bool,
    },
    /// An axis moved: left x, left y, right x, right y (−1..1), left and right trigger (0..1).
    Axis {
        controller: u8,
        axis: u8,
        value: f32,
    },
}

struct Pad {
    handle: *mut sdl::SDL_GameController,
    buttons: u32,
    axes: [i16; 6],
}

/// The open controllers.
pub struct Gamepads {
    pads: Vec<Option<Pad>>,
    /// `SDL_JoystickInstanceID`s already opened (an instance is never reused by SDL).
    opened: Vec<i32>,
}

impl Gamepads {
    /// Starts SDL's game controller subsystem on this thread; Err: SDL's reason.
    pub fn open() -> Result<Gamepads, String> {
        let _global = crate::window::sdl_global();
        // SAFETY: SDL's own initialisation, reference-counted; released in Drop.
        unsafe {
            sdl::SDL_SetHint(
                c"SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS".as_ptr(),
                c"1".as_ptr(),
            );
            if sdl::SDL_InitSubSystem(sdl::SDL_INIT_GAMECONTROLLER) != 0 {
                return Err(sdl_error());
            }
        }
        Ok(Gamepads {
            pads: (0..MAX_GAMEPADS).map(|_| None).collect(),
            opened: Vec::new(),
        })
    }

    /// Opens controllers plugged in since the last call, closes unplugged ones, and reports
    /// what changed.
    pub fn poll(&mut self) -> Vec<GamepadChange> {
        let mut out = Vec::new();
        // SAFETY: every handle is one SDL gave us and is closed only here or in Drop.
        unsafe {
            sdl::SDL_GameControllerUpdate();
            for i in 0..sdl::SDL_NumJoysticks().max(0) {
                let id = sdl::SDL_JoystickGetDeviceInstanceID(i);
                if self.opened.contains(&id)
                    || sdl::SDL_IsGameController(i) != sdl::SDL_bool::SDL_TRUE
                {
                    continue;
                }
                let Some(slot) = self.pads.iter().position(|p| p.is_none()) else {
                    break;
                };
                let handle = sdl::SDL_GameControllerOpen(i);
                if handle.is_null() {
                    continue;
                }
                self.opened.push(id);
                log::info!("client: game controller {slot}: {}", name(handle));
                self.pads[slot] = Some(Pad {
                    handle,
                    buttons: 0,
                    axes: [0; 6],
                });
            }
            for (n, slot) in self.pads.iter_mut().enumerate() {
                let Some(pad) = slot else { continue };
                if sdl::SDL_GameControllerGetAttached(pad.handle) != sdl::SDL_bool::SDL_TRUE {
                    log::info!("client: game controller {n} unplugged");
                    sdl::SDL_GameControllerClose(pad.handle);
                    *slot = None;
                    continue;
                }
                for (bit, &(button, code)) in BUTTONS.iter().enumerate() {
                    let down = sdl::SDL_GameControllerGetButton(pad.handle, button) != 0;
                    if down != (pad.buttons & (1 << bit) != 0) {
                        pad.buttons ^= 1 << bit;
                        out.push(GamepadChange::Button {
                            controller: n as u8,
                            code,
                            down,
                        });
                    }
                }
                for (a, &axis) in AXES.iter().enumerate() {
                    let v = sdl::SDL_GameControllerGetAxis(pad.handle, axis);
                    if v != pad.axes[a] {
                        pad.axes[a] = v;
                        out.push(GamepadChange::Axis {
                            controller: n as u8,
                            axis: a as u8,
                            value: (v as f32 / 32767.0).clamp(-1.0, 1.0),
                        });
                    }
                }
            }
        }
        out
    }

    /// Controllers open now.
    pub fn count(&self) -> usize {
        self.pads.iter().flatten().count()
    }
}

impl Drop for Gamepads {
    fn drop(&mut self) {
        let _global = crate::window::sdl_global();
        // SAFETY: handles from SDL_GameControllerOpen, closed once; the subsystem reference
        // taken in `open`.
        unsafe {
            for pad in self.pads.iter_mut().flatten() {
                sdl::SDL_GameControllerClose(pad.handle);
            }
            sdl::SDL_QuitSubSystem(sdl::SDL_INIT_GAMECONTROLLER);
        }
    }
}

fn sdl_error() -> String {
    // SAFETY: SDL_GetError returns a valid NUL-terminated string owned by SDL.
    unsafe { std::ffi::CStr::from_ptr(sdl::SDL_GetError()) }
        .to_string_lossy()
        .into_owned()
}

fn name(handle: *mut sdl::SDL_GameController) -> String {
    // SAFETY: a valid handle; the name may be null.
    let p = unsafe { sdl::SDL_GameControllerName(handle) };
    if p.is_null() {
        "unnamed".into()
    } else {
        // SAFETY: non-null NUL-terminated string owned by SDL.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A virtual controller (SDL's virtual joystick driver, a real SDL code path): pressing a
    /// button and moving a stick come out as a reliable button event and a latest-wins axis.
    #[test]
    fn a_virtual_controller_is_read() {
        let mut g = Gamepads::open().expect("SDL game controller subsystem");
        // SAFETY: SDL's virtual joystick API on the thread that initialised the subsystem.
        let joy = unsafe {
            let i = sdl::SDL_JoystickAttachVirtual(
                sdl::SDL_JoystickType::SDL_JOYSTICK_TYPE_GAMECONTROLLER,
                6,
                15,
                0,
            );
            assert!(i >= 0, "attach: {}", sdl_error());
            sdl::SDL_JoystickOpen(i)
        };
        assert!(!joy.is_null(), "{}", sdl_error());
        assert!(g.poll().is_empty());
        assert_eq!(g.count(), 1, "the virtual controller is a game controller");
        // SAFETY: as above.
        unsafe {
            sdl::SDL_JoystickSetVirtualButton(
                joy,
                sdl::SDL_GameControllerButton::SDL_CONTROLLER_BUTTON_A as i32,
                1,
            );
            sdl::SDL_JoystickSetVirtualAxis(
                joy,
                sdl::SDL_GameControllerAxis::SDL_CONTROLLER_AXIS_LEFTX as i32,
                16384,
            );
        }
        let got = g.poll();
        assert!(got.contains(&GamepadChange::Button {
            controller: 0,
            code: 0x130,
            down: true
        }));
        assert!(got.iter().any(|c| matches!(c,
            GamepadChange::Axis { controller: 0, axis: 0, value } if (value - 0.5).abs() < 0.01)));
        // Nothing changed: nothing to send.
        assert!(g.poll().is_empty());
        // SAFETY: as above.
        unsafe {
            sdl::SDL_JoystickClose(joy);
        }
    }
}
