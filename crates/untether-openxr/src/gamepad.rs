//! The gamepad interaction profile, `/interaction_profiles/microsoft/xbox_controller` (the
//! one OpenXR 1.0 defines for `/user/gamepad`), fed from the client's first game controller:
//! its buttons (Linux `BTN_*` codes), sticks and triggers as the host hears them. Haptic
//! outputs rumble that controller.
//!
//! | xbox_controller source | the client's controller |
//! |---|---|
//! | `/input/a/click`, `b`, `x`, `y` | BTN_SOUTH, BTN_EAST, BTN_WEST, BTN_NORTH |
//! | `/input/menu/click`, `/input/view/click` | BTN_START, BTN_SELECT |
//! | `/input/dpad_{up,down,left,right}/click` | BTN_DPAD_UP … BTN_DPAD_RIGHT |
//! | `/input/shoulder_{left,right}/click` | BTN_TL, BTN_TR |
//! | `/input/thumbstick_{left,right}/click` | BTN_THUMBL, BTN_THUMBR |
//! | `/input/trigger_{left,right}/value` | the triggers (0..1) |
//! | `/input/thumbstick_{left,right}` (`/x`, `/y`) | the sticks (y up, −1..1) |
//! | `/output/haptic_left`, `_right`, `_left_trigger`, `_right_trigger` | rumble |

#![forbid(unsafe_code)]

use crate::stream::Held;

pub const XBOX: &str = "/interaction_profiles/microsoft/xbox_controller";
pub const TOP: &str = "/user/gamepad";

/// The buttons: component → Linux button code.
const BUTTONS: [(&str, u16); 14] = [
    ("/input/a/click", 0x130),
    ("/input/b/click", 0x131),
    ("/input/x/click", 0x134),
    ("/input/y/click", 0x133),
    ("/input/menu/click", 0x13b),
    ("/input/view/click", 0x13a),
    ("/input/dpad_up/click", 0x220),
    ("/input/dpad_down/click", 0x221),
    ("/input/dpad_left/click", 0x222),
    ("/input/dpad_right/click", 0x223),
    ("/input/shoulder_left/click", 0x136),
    ("/input/shoulder_right/click", 0x137),
    ("/input/thumbstick_left/click", 0x13d),
    ("/input/thumbstick_right/click", 0x13e),
];

const HAPTICS: [&str; 4] = [
    "/output/haptic_left",
    "/output/haptic_right",
    "/output/haptic_left_trigger",
    "/output/haptic_right_trigger",
];

/// The client's stick `n` (0 left, 1 right) with OpenXR's y up (SDL's is down).
fn stick(held: &Held, n: usize) -> [f32; 2] {
    [held.pad_axes[2 * n], -held.pad_axes[2 * n + 1]]
}

/// What an xbox_controller source reads from the client's controller: a scalar in `x` (y 0),
/// a stick in both; None for an output or a path that is not a source of the profile.
pub fn source_value(path: &str, held: &Held) -> Option<[f32; 2]> {
    let component = path.strip_prefix(TOP)?;
    if let Some((_, code)) = BUTTONS.iter().find(|(c, _)| *c == component) {
        let on = held.pad_buttons.contains(code);
        return Some([if on { 1.0 } else { 0.0 }, 0.0]);
    }
    let scalar = |v: f32| Some([v, 0.0]);
    match component {
        "/input/trigger_left/value" => scalar(held.pad_axes[4].clamp(0.0, 1.0)),
        "/input/trigger_right/value" => scalar(held.pad_axes[5].clamp(0.0, 1.0)),
        "/input/thumbstick_left" => Some(stick(held, 0)),
        "/input/thumbstick_right" => Some(stick(held, 1)),
        "/input/thumbstick_left/x" => scalar(stick(held, 0)[0]),
        "/input/thumbstick_left/y" => scalar(stick(held, 0)[1]),
        "/input/thumbstick_right/x" => scalar(stick(held, 1)[0]),
        "/input/thumbstick_right/y" => scalar(stick(held, 1)[1]),
        _ => None,
    }
}

/// Whether `path` is a source (input or output) of the xbox_controller profile.
pub fn source_ok(path: &str) -> bool {
    let Some(component) = path.strip_prefix(TOP) else {
        return false;
    };
    HAPTICS.contains(&component) || source_value(path, &Held::default()).is_some()
}

/// The component's name for `xrGetInputSourceLocalizedName` ("Thumbstick Left", "A", …).
pub fn component_name(path: &str) -> String {
    let component = path
        .strip_prefix(TOP)
        .and_then(|c| c.split('/').nth(2))
        .unwrap_or("");
    component
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_controller_drives_the_xbox_controller_profile() {
        let mut held = Held::default();
        let a = "/user/gamepad/input/a/click";
        assert_eq!(source_value(a, &held), Some([0.0, 0.0]));
        held.pad_buttons.push(0x130);
        held.pad_buttons.push(0x220);
        assert_eq!(source_value(a, &held), Some([1.0, 0.0]));
        assert_eq!(
            source_value("/user/gamepad/input/dpad_up/click", &held),
            Some([1.0, 0.0])
        );
        assert_eq!(
            source_value("/user/gamepad/input/x/click", &held),
            Some([0.0, 0.0])
        );
        // SDL's stick y is down; OpenXR's is up. Triggers stay within 0..1.
        held.pad_axes = [0.5, 0.25, -1.0, 0.0, 0.8, 2.0];
        assert_eq!(
            source_value("/user/gamepad/input/thumbstick_left", &held),
            Some([0.5, -0.25])
        );
        assert_eq!(
            source_value("/user/gamepad/input/thumbstick_right/x", &held),
            Some([-1.0, 0.0])
        );
        assert_eq!(
            source_value("/user/gamepad/input/trigger_right/value", &held),
            Some([1.0, 0.0])
        );
        // Outputs are sources of the profile but have no value; other paths are neither.
        assert!(source_ok("/user/gamepad/output/haptic_left"));
        assert_eq!(
            source_value("/user/gamepad/output/haptic_left", &held),
            None
        );
        assert!(source_ok("/user/gamepad/input/thumbstick_left/y"));
        assert!(!source_ok("/user/gamepad/input/squeeze/value"));
        assert!(!source_ok("/user/hand/left/input/a/click"));
        assert!(!source_ok("/user/gamepadx/input/a/click"));
        assert_eq!(
            component_name("/user/gamepad/input/thumbstick_left/click"),
            "Thumbstick Left"
        );
        assert_eq!(
            component_name("/user/gamepad/output/haptic_left"),
            "Haptic Left"
        );
    }
}
