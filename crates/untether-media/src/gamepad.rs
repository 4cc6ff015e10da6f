//! SDL game controllers: polled on the thread that runs the window (SDL wants one thread), up
//! to [`MAX_GAMEPADS`]; each poll reports what changed — buttons as Linux `BTN_*` codes (so a
//! host can replay them into a uinput gamepad as they are), sticks −1..1 and triggers 0..1.
//! (The client sends buttons on the reliable channel, axes on the latest-wins one.)
//!
//! Through `sdl2::sys` rather than the `sdl2` crate's context, which allows one `Sdl` per
//! process and thread and would shut the window's SDL down with ours: the subsystem is
//! reference-counted by SDL itself (`SDL_InitSubSystem` / `SDL_QuitSubSystem`).
//!
//! The host's rumble (`HAPTICS + n` on the latest-wins channel) comes back to controller `n`:
//! [`Rumble`] decides which SDL commands a change needs, [`Gamepads::apply_rumble`] sends them.

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

/// Controllers the host may rumble: keys `HAPTICS + 0..16`, the protocol's controller numbers
/// (only the first [`MAX_GAMEPADS`] can be open).
pub const RUMBLE_CONTROLLERS: usize = 16;

/// How long one rumble command lasts, ms. The state channel sends a value once (and again
/// only if lost), so a steady rumble is renewed by the client while the host's value stays
/// non-zero; the bound is what a controller keeps rumbling when the renewals stop (a stalled
/// presenter, a client that ended without its stop).
pub const RUMBLE_DURATION_MS: u32 = 1000;

/// A running rumble is renewed this long after it was last sent: half its duration, so a late
/// presenter turn does not let it lapse.
const RUMBLE_RENEW_US: u64 = RUMBLE_DURATION_MS as u64 * 500;

/// One rumble command for SDL (`SDL_GameControllerRumble`): motor strengths 0..0xFFFF, and
/// how long it lasts (0 with zero strengths: stop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RumbleCommand {
    pub controller: u8,
    pub low: u16,
    pub high: u16,
    pub duration_ms: u32,
}

/// What became of the host's rumble on this client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RumbleCounts {
    /// Changes of the host's value, every controller.
    pub changes: u64,
    /// Commands a controller took: starts, changes, stops (not renewals).
    pub applied: u64,
    /// Renewals of a running rumble before its duration ended.
    pub renewed: u64,
    /// Commands SDL refused (a controller without rumble motors: SDL returns -1).
    pub unsupported: u64,
    /// Changes for a controller that is not open (none plugged in at that number).
    pub ignored: u64,
}

/// What one controller was last told.
#[derive(Clone, Copy, Debug)]
struct Running {
    value: (u16, u16),
    /// When to send it again (None: a stop, or a controller that cannot rumble).
    renew_at_us: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Motor {
    /// The host's newest value.
    wanted: (u16, u16),
    /// `wanted` changed since the last [`Rumble::issue`].
    changed: bool,
    /// What the controller runs (None: nothing told since it was opened).
    running: Option<Running>,
}

/// The rumble decision, apart from SDL (so it is tested without a controller): the host's
/// newest value per controller in, the commands to issue out — a changed value at once, a
/// running one renewed before [`RUMBLE_DURATION_MS`] ends, a zero as a stop, nothing for a
/// controller that is not open (counted as ignored; it gets the value once it opens).
#[derive(Debug, Default)]
pub struct Rumble {
    motors: [Motor; RUMBLE_CONTROLLERS],
    counts: RumbleCounts,
    /// The first change was logged (at info; the others at debug).
    announced: bool,
}

/// A strength 0..1 as SDL's 0..0xFFFF (anything out of range clamped, NaN as 0: the value
/// comes from the network).
fn strength(v: f32) -> u16 {
    if v.is_nan() {
        0
    } else {
        (v.clamp(0.0, 1.0) * 65535.0).round() as u16
    }
}

impl Rumble {
    pub fn new() -> Rumble {
        Rumble::default()
    }

    /// The host's newest value for `controller` (each motor 0..1); the same value again is no
    /// change. Controllers beyond [`RUMBLE_CONTROLLERS`] are ignored.
    pub fn set(&mut self, controller: u8, low: f32, high: f32) {
        let value = (strength(low), strength(high));
        let Some(m) = self.motors.get_mut(controller as usize) else {
            return;
        };
        if m.wanted != value {
            m.wanted = value;
            m.changed = true;
            self.counts.changes += 1;
            if !self.announced {
                self.announced = true;
                log::info!(
                    "client: the host's rumble arrived (controller {controller}: {} / {})",
                    value.0,
                    value.1
                );
            } else {
                log::debug!(
                    "client: rumble controller {controller}: {} / {}",
                    value.0,
                    value.1
                );
            }
        }
    }

    /// Forgets what `controller` was told (it was closed: one opened there later starts
    /// from nothing).
    pub fn forget(&mut self, controller: u8) {
        if let Some(m) = self.motors.get_mut(controller as usize) {
            m.running = None;
        }
    }

    /// Issues the commands due at `now_us`: `open(n)` says whether controller `n` is open,
    /// `apply` sends one command and says whether the controller took it (false: it cannot
    /// rumble; it is not renewed, and told again only when the value changes).
    pub fn issue(
        &mut self,
        now_us: u64,
        open: impl Fn(u8) -> bool,
        mut apply: impl FnMut(RumbleCommand) -> bool,
    ) {
        for (n, m) in self.motors.iter_mut().enumerate() {
            let n = n as u8;
            let changed = std::mem::take(&mut m.changed);
            if !open(n) {
                m.running = None;
                if changed {
                    self.counts.ignored += 1;
                    log::debug!("client: rumble for controller {n} ignored: none open there");
                }
                continue;
            }
            let renewal = match m.running {
                Some(r) if r.value == m.wanted => match r.renew_at_us {
                    Some(at) if now_us >= at => true,
                    _ => continue,
                },
                Some(_) => false,
                // Nothing told, nothing wanted: the controller is still.
                None if m.wanted == (0, 0) => continue,
                None => false,
            };
            let (low, high) = m.wanted;
            let on = m.wanted != (0, 0);
            let took = apply(RumbleCommand {
                controller: n,
                low,
                high,
                duration_ms: if on { RUMBLE_DURATION_MS } else { 0 },
            });
            match (took, renewal) {
                (false, _) => self.counts.unsupported += 1,
                (true, true) => self.counts.renewed += 1,
                (true, false) => self.counts.applied += 1,
            }
            m.running = Some(Running {
                value: m.wanted,
                renew_at_us: (took && on).then_some(now_us + RUMBLE_RENEW_US),
            });
        }
    }

    pub fn counts(&self) -> RumbleCounts {
        self.counts
    }
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
    /// The host's rumble for each controller.
    rumble: Rumble,
}

/// SDL refused to start its game controller subsystem: its reason (`SDL_GetError()`), word for
/// word.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SdlError(pub String);

impl Gamepads {
    /// Starts SDL's game controller subsystem on this thread; Err: SDL's reason.
    pub fn open() -> Result<Gamepads, SdlError> {
        let _global = crate::window::sdl_global();
        // SAFETY: SDL's own initialisation, reference-counted; released in Drop.
        unsafe {
            sdl::SDL_SetHint(
                c"SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS".as_ptr(),
                c"1".as_ptr(),
            );
            if sdl::SDL_InitSubSystem(sdl::SDL_INIT_GAMECONTROLLER) != 0 {
                return Err(SdlError(sdl_error()));
            }
        }
        Ok(Gamepads {
            pads: (0..MAX_GAMEPADS).map(|_| None).collect(),
            opened: Vec::new(),
            rumble: Rumble::new(),
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
                    self.rumble.forget(n as u8);
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

    /// The host's rumble for `controller` (each motor 0..1), sent by [`Self::apply_rumble`].
    pub fn set_rumble(&mut self, controller: u8, low: f32, high: f32) {
        self.rumble.set(controller, low, high);
    }

    /// Sends the rumble commands due at `now_us` ([`Rumble`]) with `SDL_GameControllerRumble`.
    /// A controller without rumble motors makes SDL return -1: counted as unsupported, not an
    /// error. Tested on SDL's virtual controllers only: what a real controller's motors do
    /// with it (and its driver's own limits) is not, as no controller (nor `/dev/input`) is
    /// there to test with.
    pub fn apply_rumble(&mut self, now_us: u64) {
        let pads = &self.pads;
        let open = |n: u8| pads.get(n as usize).is_some_and(Option::is_some);
        self.rumble.issue(now_us, open, |c| {
            let Some(Some(pad)) = pads.get(c.controller as usize) else {
                return false;
            };
            // SAFETY: a handle SDL gave us, open (closed only in `poll` or Drop), used on the
            // thread that owns it.
            unsafe { sdl::SDL_GameControllerRumble(pad.handle, c.low, c.high, c.duration_ms) == 0 }
        });
    }

    /// What became of the host's rumble so far.
    pub fn rumble_counts(&self) -> RumbleCounts {
        self.rumble.counts()
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
    use std::sync::Mutex;

    /// SDL's controllers are process-wide: the tests that attach virtual ones take turns (one
    /// counts the controllers it sees).
    static SDL_PADS: Mutex<()> = Mutex::new(());

    fn sdl_pads() -> std::sync::MutexGuard<'static, ()> {
        SDL_PADS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A virtual controller (SDL's virtual joystick driver, a real SDL code path): pressing a
    /// button and moving a stick come out as a reliable button event and a latest-wins axis.
    #[test]
    fn a_virtual_controller_is_read() {
        let _pads = sdl_pads();
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

    const HALF: u16 = 32768;

    /// Runs `r.issue` at `now_us` with controllers `open`, every command taken (or refused
    /// when `takes` is false); the commands issued.
    fn issue(r: &mut Rumble, now_us: u64, open: &[u8], takes: bool) -> Vec<RumbleCommand> {
        let mut out = Vec::new();
        r.issue(
            now_us,
            |n| open.contains(&n),
            |c| {
                out.push(c);
                takes
            },
        );
        out
    }

    fn cmd(controller: u8, low: u16, high: u16, duration_ms: u32) -> RumbleCommand {
        RumbleCommand {
            controller,
            low,
            high,
            duration_ms,
        }
    }

    #[test]
    fn gamepad_rumble_is_sent_on_change_renewed_while_it_lasts_and_stopped_by_a_zero() {
        let mut r = Rumble::new();
        assert!(
            issue(&mut r, 0, &[0], true).is_empty(),
            "a still controller"
        );
        r.set(0, 0.5, 0.25);
        let d = RUMBLE_DURATION_MS;
        assert_eq!(issue(&mut r, 1_000, &[0], true), [cmd(0, HALF, 16384, d)]);
        // The same value again is no change; nothing is due before half the duration.
        r.set(0, 0.5, 0.25);
        assert!(issue(&mut r, 2_000, &[0], true).is_empty());
        assert!(issue(&mut r, 1_000 + RUMBLE_RENEW_US - 1, &[0], true).is_empty());
        // Renewed before the duration ends, and again from the renewal.
        let renew = 1_000 + RUMBLE_RENEW_US;
        assert_eq!(issue(&mut r, renew, &[0], true), [cmd(0, HALF, 16384, d)]);
        assert!(issue(&mut r, renew + RUMBLE_RENEW_US - 1, &[0], true).is_empty());
        assert_eq!(issue(&mut r, renew + RUMBLE_RENEW_US, &[0], true).len(), 1);
        // A new strength at once; a zero stops it, and a stopped controller is not renewed.
        r.set(0, 1.0, 0.0);
        assert_eq!(issue(&mut r, renew + 1, &[0], true), [cmd(0, 65535, 0, d)]);
        r.set(0, 0.0, 0.0);
        assert_eq!(issue(&mut r, renew + 2, &[0], true), [cmd(0, 0, 0, 0)]);
        assert!(issue(&mut r, renew + 10 * RUMBLE_RENEW_US, &[0], true).is_empty());
        assert_eq!(
            r.counts(),
            RumbleCounts {
                changes: 3,
                applied: 3,
                renewed: 2,
                ..RumbleCounts::default()
            }
        );
    }

    /// A value for a controller that is not open is counted and kept: a controller opened
    /// there later starts with it; one unplugged and plugged again is told again.
    #[test]
    fn gamepad_rumble_for_a_controller_not_open_is_ignored_until_one_opens() {
        let mut r = Rumble::new();
        r.set(1, 0.5, 0.5);
        r.set(7, 1.0, 1.0);
        // Beyond the protocol's controllers: nothing at all.
        r.set(200, 1.0, 1.0);
        assert!(issue(&mut r, 0, &[0], true).is_empty());
        assert!(issue(&mut r, 1, &[0], true).is_empty(), "counted once");
        let c = r.counts();
        assert_eq!((c.changes, c.ignored, c.applied), (2, 2, 0));
        assert_eq!(
            issue(&mut r, 2, &[0, 1], true),
            [cmd(1, HALF, HALF, RUMBLE_DURATION_MS)]
        );
        r.forget(1);
        assert_eq!(
            issue(&mut r, 3, &[0, 1], true).len(),
            1,
            "a new controller there"
        );
        // Closed between two turns: the next one there is told too.
        assert!(issue(&mut r, 4, &[0], true).is_empty());
        assert_eq!(issue(&mut r, 5, &[1], true).len(), 1);
        assert_eq!(r.counts().applied, 3);
    }

    /// SDL returns -1 for a controller without rumble motors: counted, never renewed, tried
    /// again only when the value changes.
    #[test]
    fn gamepad_rumble_on_a_controller_without_motors_counts_as_unsupported() {
        let mut r = Rumble::new();
        r.set(0, 0.5, 0.0);
        assert_eq!(issue(&mut r, 0, &[0], false).len(), 1);
        assert!(issue(&mut r, 10 * RUMBLE_RENEW_US, &[0], false).is_empty());
        r.set(0, 0.0, 0.0);
        assert_eq!(issue(&mut r, 11 * RUMBLE_RENEW_US, &[0], false).len(), 1);
        let c = r.counts();
        assert_eq!((c.changes, c.unsupported, c.applied), (2, 2, 0));
    }

    /// Strengths come from the network: out of range is clamped, NaN is no rumble.
    #[test]
    fn gamepad_rumble_strengths_are_clamped() {
        assert_eq!(strength(f32::NAN), 0);
        assert_eq!(strength(-3.0), 0);
        assert_eq!(strength(7.0), 65535);
        assert_eq!(strength(f32::INFINITY), 65535);
        assert_eq!(strength(0.5), HALF);
        let mut r = Rumble::new();
        r.set(0, f32::NAN, f32::NEG_INFINITY);
        assert_eq!(r.counts().changes, 0, "NaN is zero: no change");
    }

    /// What SDL's virtual controller's motors were told.
    static MOTORS: Mutex<Vec<(u16, u16)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn record_rumble(_: *mut std::ffi::c_void, low: u16, high: u16) -> i32 {
        MOTORS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((low, high));
        0
    }

    /// Through SDL (its virtual joystick driver, as near to a controller as this machine
    /// has): a controller with motors gets the host's strengths and a stop; one without
    /// (SDL returns -1) is counted as unsupported, not an error.
    #[test]
    fn gamepad_rumble_reaches_a_virtual_controllers_motors() {
        let _pads = sdl_pads();
        let mut g = Gamepads::open().expect("SDL game controller subsystem");
        // SAFETY: SDL's virtual joystick API after the subsystem started; the description is
        // zeroed as SDL asks, then filled; the callback outlives the controller (a static).
        let with_motors = unsafe {
            let mut desc: sdl::SDL_VirtualJoystickDesc = std::mem::zeroed();
            desc.version = sdl::SDL_VIRTUAL_JOYSTICK_DESC_VERSION as u16;
            desc.type_ = sdl::SDL_JoystickType::SDL_JOYSTICK_TYPE_GAMECONTROLLER as u16;
            desc.naxes = 6;
            desc.nbuttons = 15;
            desc.Rumble = Some(record_rumble);
            let i = sdl::SDL_JoystickAttachVirtualEx(&desc);
            assert!(i >= 0, "attach: {}", sdl_error());
            sdl::SDL_JoystickGetDeviceInstanceID(i)
        };
        assert!(g.poll().is_empty());
        // SAFETY: as above (a virtual controller without a rumble callback).
        let without = unsafe {
            let i = sdl::SDL_JoystickAttachVirtual(
                sdl::SDL_JoystickType::SDL_JOYSTICK_TYPE_GAMECONTROLLER,
                6,
                15,
                0,
            );
            assert!(i >= 0, "attach: {}", sdl_error());
            sdl::SDL_JoystickGetDeviceInstanceID(i)
        };
        g.poll();
        assert_eq!(g.count(), 2);
        assert_eq!(g.opened, [with_motors, without], "slots 0 and 1");
        MOTORS.lock().unwrap_or_else(|p| p.into_inner()).clear();
        g.set_rumble(0, 0.5, 0.25);
        g.set_rumble(1, 1.0, 1.0);
        g.set_rumble(3, 1.0, 1.0);
        g.apply_rumble(0);
        g.set_rumble(0, 0.0, 0.0);
        g.apply_rumble(1);
        let told = MOTORS.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(told, [(HALF, 16384), (0, 0)]);
        let c = g.rumble_counts();
        assert_eq!(
            (c.changes, c.applied, c.unsupported, c.ignored),
            (4, 2, 1, 1),
            "{c:?}"
        );
    }
}
