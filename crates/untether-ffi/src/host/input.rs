//! The client's input on the host: its events (polled, or delivered to a callback), its head
//! pose and game controllers, and the state the host publishes back to it.

use std::ffi::{c_char, c_int, c_void};

use untether_proto::state::keys as untether_proto_keys;
use untether_proto::{InputEvent, InputRecord};

use super::{host_ref, running, running_host, UntetherHost};
use crate::error::{fail, guard, UNTETHER_ERR_INVALID};

/// Kinds of input events.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UntetherInputKind {
    /// a = SDL keycode, b = 1 down / 0 up.
    UNTETHER_INPUT_KEY = 1,
    /// a, b = absolute x, y in the stream; c, d = relative motion.
    UNTETHER_INPUT_POINTER = 2,
    /// a = button (1 left, 2 middle, 3 right), b = 1 down / 0 up.
    UNTETHER_INPUT_MOUSE_BUTTON = 3,
    /// a, b = horizontal, vertical notches.
    UNTETHER_INPUT_WHEEL = 4,
    /// f[0..3] = yaw, pitch, roll in degrees.
    UNTETHER_INPUT_HEAD_POSE = 5,
    /// device = client device number, a = evdev code, b = 1 down / 0 up.
    UNTETHER_INPUT_DEVICE_BUTTON = 6,
    /// device, a = evdev code, b = value, c = 1 relative (EV_REL) / 0 absolute (EV_ABS).
    UNTETHER_INPUT_DEVICE_AXIS = 7,
    /// text = NUL-terminated UTF-8 (at most 32 bytes), a = its length in bytes.
    UNTETHER_INPUT_TEXT = 8,
}

/// One input event from the client.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UntetherInputEvent {
    /// An UntetherInputKind.
    pub kind: c_int,
    /// Sequence number on the client's reliable channel (0, 1, 2, …).
    pub seq: u32,
    pub device: u32,
    pub a: i32,
    pub b: i32,
    pub c: i32,
    pub d: i32,
    pub f: [f32; 3],
    /// UNTETHER_INPUT_TEXT only: the text, NUL-terminated.
    pub text: [c_char; 33],
}

/// A head pose: orientation quaternion (x, y, z, w; +y up, −z forward), position in metres,
/// and when the client sampled it (the client's clock, µs; 0: unknown). docs/PROTOCOL.md §8.3.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UntetherPose {
    pub orientation: [f32; 4],
    pub position: [f32; 3],
    pub sample_us: u64,
}

/// One of the client's game controllers: the Linux `BTN_*` codes held (`button_count` of
/// them) and the axes (left x, left y, right x, right y −1..1; left, right trigger 0..1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UntetherGamepad {
    pub buttons: [u16; 16],
    pub button_count: u32,
    pub axes: [f32; 6],
}

/// Called on the host's network thread for every input event; return quickly.
pub type UntetherInputCallback =
    Option<unsafe extern "C" fn(event: *const UntetherInputEvent, user: *mut c_void)>;

pub(super) fn convert_event(rec: &InputRecord) -> UntetherInputEvent {
    let mut e = UntetherInputEvent {
        kind: UntetherInputKind::UNTETHER_INPUT_KEY as c_int,
        seq: rec.seq,
        device: 0,
        a: 0,
        b: 0,
        c: 0,
        d: 0,
        f: [0.0; 3],
        text: [0; 33],
    };
    match rec.event {
        InputEvent::Key { code, down } => {
            e.a = code as i32;
            e.b = down as i32;
        }
        InputEvent::PointerMotion { x, y, dx, dy } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_POINTER as c_int;
            (e.a, e.b, e.c, e.d) = (x, y, dx, dy);
        }
        InputEvent::MouseButton { button, down } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_MOUSE_BUTTON as c_int;
            (e.a, e.b) = (button as i32, down as i32);
        }
        InputEvent::Wheel { dx, dy } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_WHEEL as c_int;
            (e.a, e.b) = (dx, dy);
        }
        InputEvent::HeadPose { yaw, pitch, roll } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_HEAD_POSE as c_int;
            e.f = [yaw, pitch, roll];
        }
        InputEvent::Button { device, code, down } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_DEVICE_BUTTON as c_int;
            e.device = device as u32;
            (e.a, e.b) = (code as i32, down as i32);
        }
        InputEvent::Axis {
            device,
            relative,
            code,
            value,
        } => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_DEVICE_AXIS as c_int;
            e.device = device as u32;
            (e.a, e.b, e.c) = (code as i32, value, relative as i32);
        }
        InputEvent::Text(t) => {
            e.kind = UntetherInputKind::UNTETHER_INPUT_TEXT as c_int;
            let bytes = t.as_str().as_bytes();
            e.a = bytes.len() as i32;
            for (d, b) in e.text.iter_mut().zip(bytes) {
                *d = *b as c_char;
            }
        }
    }
    e
}

/// The client's newest head pose: 1 and `*pose` filled, 0 when it has sent none, or a
/// negative error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_head_pose(
    host: *mut UntetherHost,
    pose: *mut UntetherPose,
) -> c_int {
    guard(|| {
        if pose.is_null() {
            return fail(UNTETHER_ERR_INVALID, "pose is NULL");
        }
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let ctx = match unsafe { running_host(host) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.head_pose() {
            Some(p) => {
                // SAFETY: checked non-null.
                unsafe {
                    *pose = UntetherPose {
                        orientation: p.pose.orientation,
                        position: p.pose.position,
                        sample_us: p.sample_us,
                    }
                };
                1
            }
            None => 0,
        }
    })
}

/// The client's game controller `n` (0–3): 1 and `*pad` filled, 0 when it has sent nothing,
/// or a negative error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_gamepad(
    host: *mut UntetherHost,
    n: u32,
    pad: *mut UntetherGamepad,
) -> c_int {
    guard(|| {
        if pad.is_null() {
            return fail(UNTETHER_ERR_INVALID, "pad is NULL");
        }
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let ctx = match unsafe { running_host(host) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.gamepad(n as usize) {
            Some(g) => {
                let mut out = UntetherGamepad {
                    axes: g.axes,
                    ..Default::default()
                };
                for (i, b) in g.buttons.iter().take(16).enumerate() {
                    out.buttons[i] = *b;
                    out.button_count = i as u32 + 1;
                }
                // SAFETY: checked non-null.
                unsafe { *pad = out };
                1
            }
            None => 0,
        }
    })
}

/// Publishes host → client state on the latest-wins channel: key `key` (0x1000 and up are the
/// application's; 0x200 + n is controller n's rumble) set to `count` floats — 1: an axis,
/// 2: a stick (or with key 0x200 + n, rumble low/high 0..1) — or, with `count` 0, to the
/// integer `value`. 1 when queued, 0 when the key table (4096 keys) is full, or a negative
/// error.
#[no_mangle]
pub unsafe extern "C" fn untether_host_publish_state(
    host: *mut UntetherHost,
    key: u16,
    values: *const f32,
    count: usize,
    value: i64,
) -> c_int {
    guard(|| {
        use untether::api::StateValue;
        let v: Vec<f32> = if count == 0 {
            Vec::new()
        } else if values.is_null() || count > 2 {
            return fail(UNTETHER_ERR_INVALID, "values: NULL, or more than 2");
        } else {
            // SAFETY: non-null, `count` (≤ 2) floats as documented.
            unsafe { std::slice::from_raw_parts(values, count) }.to_vec()
        };
        if v.iter().any(|x| !x.is_finite()) {
            return fail(UNTETHER_ERR_INVALID, "values: not finite");
        }
        let haptic =
            (untether_proto_keys::HAPTICS..untether_proto_keys::HAPTICS + 16).contains(&key);
        let state = match (v.as_slice(), haptic) {
            ([], _) => StateValue::Int(value),
            ([a], _) => StateValue::Axis(*a),
            ([low, high], true) => StateValue::Haptic {
                low: *low,
                high: *high,
            },
            ([x, y], false) => StateValue::Stick { x: *x, y: *y },
            _ => return fail(UNTETHER_ERR_INVALID, "values"),
        };
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let ctx = match unsafe { running_host(host) } {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        ctx.publish_state(key, state) as c_int
    })
}

/// Takes the next input event: 1 and `*event` filled, 0 when there is none, or a negative
/// error. (Without an input callback, events queue here; the oldest are dropped past 4096.)
#[no_mangle]
pub unsafe extern "C" fn untether_host_poll_input(
    host: *mut UntetherHost,
    event: *mut UntetherInputEvent,
) -> c_int {
    guard(|| {
        // SAFETY: `host` is NULL or a live context (the C API's contract: crate doc).
        let h = match unsafe { host_ref(host) } {
            Ok(h) => h,
            Err(rc) => return rc,
        };
        if event.is_null() {
            return fail(UNTETHER_ERR_INVALID, "event is NULL");
        }
        let ctx = match running(h) {
            Ok(c) => c,
            Err(rc) => return rc,
        };
        match ctx.poll_input() {
            Some(rec) => {
                // SAFETY: checked non-null.
                unsafe { *event = convert_event(&rec) };
                1
            }
            None => 0,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests_support::*;
    use crate::*;

    #[test]
    fn pose_state_and_gamepad_calls_check_their_arguments() {
        // SAFETY: the C API's own contract: valid or NULL pointers.
        unsafe {
            let mut pose = UntetherPose::default();
            assert_eq!(
                untether_host_head_pose(std::ptr::null_mut(), &mut pose),
                UNTETHER_ERR_INVALID
            );
            let mut h: *mut UntetherHost = std::ptr::null_mut();
            assert_eq!(untether_host_new(&mut h, 0, 0, 0, 640, 360), UNTETHER_OK);
            // Not started yet.
            assert_eq!(untether_host_head_pose(h, &mut pose), UNTETHER_ERR_STATE);
            assert_eq!(
                untether_host_head_pose(h, std::ptr::null_mut()),
                UNTETHER_ERR_INVALID
            );
            let mut pad = UntetherGamepad::default();
            assert_eq!(untether_host_gamepad(h, 0, &mut pad), UNTETHER_ERR_STATE);
            // A pose that is not a rotation is refused, whatever the host's state.
            let bad = UntetherPose {
                orientation: [0.0; 4],
                ..Default::default()
            };
            assert_eq!(
                untether_host_send_frame_pose(h, std::ptr::null(), &bad),
                UNTETHER_ERR_INVALID
            );
            assert!(last_error().contains("unit quaternion"), "{}", last_error());
            let three = [0.0f32; 3];
            assert_eq!(
                untether_host_publish_state(h, 0x1000, three.as_ptr(), 3, 0),
                UNTETHER_ERR_INVALID
            );
            let nan = [f32::NAN];
            assert_eq!(
                untether_host_publish_state(h, 0x1000, nan.as_ptr(), 1, 0),
                UNTETHER_ERR_INVALID
            );
            assert_eq!(
                untether_host_publish_state(h, 0x1000, std::ptr::null(), 0, 7),
                UNTETHER_ERR_STATE
            );
            untether_host_free(h);
        }
    }
}
