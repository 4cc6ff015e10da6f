//! Where the client's input goes on the host: the input sinks (the test scene, an application
//! queue or callback, XTEST replay into an X server, or nothing), and how each event maps to
//! the scene and to X.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use untether_media::scene::{SceneInput, SceneKey};
use untether_media::x11::{self, PointerMode, XtestReplay};
use untether_proto::{InputEvent, InputRecord};

use super::options::InputCallback;
use super::shared::{lock, HostShared};

/// The most input events waiting for the scene or the application.
pub(crate) const INPUT_QUEUE: usize = 4096;

/// An input record for the scene, tagged with the controller epoch it came in (records sent
/// before another client took control are not applied), and whether it is the controller's:
/// the scene counts only the controller's reliable events in its stamp (a granted viewer's
/// are applied but numbered by its own channel).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SceneRecord {
    pub epoch: u64,
    pub controller: bool,
    pub record: InputRecord,
}

/// Where the network driver delivers input.
pub(crate) enum InputSink {
    /// The test scene's thread applies them before its next frame.
    Scene(SyncSender<SceneRecord>),
    /// The application drains [`HostShared::app_inputs`].
    Queue,
    Callback(InputCallback),
    Xtest(Box<XtestReplay>),
    Uinput(Box<super::uinput::UinputDevices>),
    Discard,
}

impl InputSink {
    /// Delivers one input event that came in controller epoch `epoch`, from the controller
    /// (`controller`) or a viewer granted input.
    pub fn deliver(&mut self, s: &HostShared, epoch: u64, controller: bool, rec: InputRecord) {
        let c = &s.counters;
        match self {
            InputSink::Scene(tx) => match tx.try_send(SceneRecord {
                epoch,
                controller,
                record: rec,
            }) {
                Ok(()) => {}
                // The scene stalled (or ended): drop, counted.
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    c.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                }
            },
            InputSink::Queue => {
                let mut q = lock(&s.app_inputs);
                if q.len() >= INPUT_QUEUE {
                    q.pop_front();
                    c.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                }
                q.push_back(rec);
            }
            InputSink::Callback(cb) => {
                let cb: Arc<dyn Fn(&InputRecord) + Send + Sync> = cb.0.clone();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (cb)(&rec))).is_err() {
                    log::error!(
                        "host: the input callback panicked; event {} dropped",
                        rec.seq
                    );
                    c.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                c.inputs_applied.fetch_add(1, Ordering::Relaxed);
            }
            InputSink::Xtest(x) => {
                x.origin = *lock(&s.capture_origin);
                match replay_xtest(x, &rec.event) {
                    Ok(true) => {
                        c.inputs_applied.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {
                        c.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if c.inputs_dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                            log::warn!("host: XTEST replay failed: {e}");
                        }
                    }
                }
            }
            InputSink::Uinput(u) => match u.replay(&rec.event) {
                Ok(true) => {
                    c.inputs_applied.fetch_add(1, Ordering::Relaxed);
                }
                Ok(false) => {
                    c.inputs_dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    if c.inputs_dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                        log::warn!("host: uinput replay failed: {e}");
                    }
                }
            },
            InputSink::Discard => {}
        }
    }
}

/// Replays one event with XTEST. Ok(false): the event has no X equivalent (dropped).
pub(crate) fn replay_xtest(
    x: &XtestReplay,
    event: &InputEvent,
) -> Result<bool, untether_media::MediaError> {
    let done = match *event {
        InputEvent::Key { code, down } => match x11::sdl_keycode_to_keysym(code) {
            Some(sym) => x.key(sym, down)?,
            None => false,
        },
        InputEvent::PointerMotion {
            x: px,
            y: py,
            dx,
            dy,
        } => {
            match x.pointer {
                PointerMode::Absolute => x.motion_absolute(px, py)?,
                PointerMode::Relative => x.motion_relative(dx, dy)?,
            }
            true
        }
        InputEvent::MouseButton { button, down } => {
            // SDL numbers X1/X2 as 4/5; X uses 8/9 for them (4–7 are the wheel).
            let b = match button {
                4 => 8,
                5 => 9,
                b => b,
            };
            x.button(b, down)?;
            true
        }
        InputEvent::Wheel { dx, dy } => {
            x.wheel(dx, dy)?;
            true
        }
        InputEvent::Button { code, down, .. } => match x11::evdev_button_to_x(code) {
            Some(b) => {
                x.button(b, down)?;
                true
            }
            // Evdev key codes are X keycodes minus 8 on every evdev/XKB keyboard.
            None if code < 248 => x.keycode(code as u8 + 8, down)?,
            None => false,
        },
        InputEvent::Axis {
            relative: true,
            code,
            value,
            ..
        } => {
            match code {
                0 => x.motion_relative(value, 0)?, // REL_X
                1 => x.motion_relative(0, value)?, // REL_Y
                6 => x.wheel(value, 0)?,           // REL_HWHEEL
                8 => x.wheel(0, value)?,           // REL_WHEEL
                _ => return Ok(false),
            }
            true
        }
        InputEvent::Text(t) => {
            // Type each character whose keysym the keyboard map has (Latin-1 keysyms equal
            // the code point; others are 0x0100_0000 + code point).
            let mut any = false;
            for c in t.as_str().chars() {
                let cp = c as u32;
                let sym = if cp <= 0xFF { cp } else { 0x0100_0000 + cp };
                if x.key(sym, true)? {
                    x.key(sym, false)?;
                    any = true;
                }
            }
            any
        }
        InputEvent::Axis { .. } | InputEvent::HeadPose { .. } => false,
    };
    x.flush()?;
    Ok(done)
}

/// SDL keycodes of the keys the test scene walks with.
pub mod keys {
    pub const W: u32 = b'w' as u32;
    pub const A: u32 = b'a' as u32;
    pub const S: u32 = b's' as u32;
    pub const D: u32 = b'd' as u32;
    pub const RIGHT: u32 = 0x4000_004F;
    pub const LEFT: u32 = 0x4000_0050;
    pub const DOWN: u32 = 0x4000_0051;
    pub const UP: u32 = 0x4000_0052;
}

/// How the test scene reacts to an input event (None: the scene ignores it).
pub fn scene_input(event: &InputEvent) -> Option<SceneInput> {
    match *event {
        InputEvent::PointerMotion { dx, dy, .. } => Some(SceneInput::PointerDelta {
            dx: dx as f32,
            dy: dy as f32,
        }),
        InputEvent::Key { code, down } => {
            let key = match code {
                keys::W | keys::UP => SceneKey::Forward,
                keys::S | keys::DOWN => SceneKey::Back,
                keys::A | keys::LEFT => SceneKey::Left,
                keys::D | keys::RIGHT => SceneKey::Right,
                _ => return None,
            };
            Some(SceneInput::Key { key, down })
        }
        // The scene renders for the whole head pose (orientation and position), which it
        // reads from the driver's newest pose before each frame, not from events.
        InputEvent::HeadPose { .. } => None,
        // A relative device (mouse) looks around like the window's pointer.
        InputEvent::Axis {
            relative: true,
            code: c @ (0 | 1),
            value,
            ..
        } => Some(SceneInput::PointerDelta {
            dx: if c == 0 { value as f32 } else { 0.0 },
            dy: if c == 1 { value as f32 } else { 0.0 },
        }),
        InputEvent::MouseButton { .. }
        | InputEvent::Wheel { .. }
        | InputEvent::Button { .. }
        | InputEvent::Axis { .. }
        | InputEvent::Text(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    fn key(seq: u32) -> InputRecord {
        InputRecord {
            seq,
            event: InputEvent::Key {
                code: keys::W,
                down: true,
            },
        }
    }

    #[test]
    fn the_queue_keeps_the_newest_and_counts_what_it_drops() {
        let s = HostShared::new((0, 0));
        let mut sink = InputSink::Queue;
        for i in 0..(INPUT_QUEUE as u32 + 3) {
            sink.deliver(&s, 1, true, key(i));
        }
        let q = lock(&s.app_inputs);
        assert_eq!(q.len(), INPUT_QUEUE);
        assert_eq!(q.front().map(|r| r.seq), Some(3));
        assert_eq!(s.counters.inputs_dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_panicking_callback_drops_the_event_and_the_host_goes_on() {
        let s = HostShared::new((0, 0));
        let mut sink = InputSink::Callback(InputCallback(Arc::new(|r: &InputRecord| {
            assert!(r.seq != 1, "the application's callback panics on event 1");
        })));
        for i in 0..3 {
            sink.deliver(&s, 1, true, key(i));
        }
        assert_eq!(s.counters.inputs_applied.load(Ordering::Relaxed), 2);
        assert_eq!(s.counters.inputs_dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_stalled_scene_drops_and_counts() {
        let s = HostShared::new((0, 0));
        let (tx, rx) = sync_channel(1);
        let mut sink = InputSink::Scene(tx);
        sink.deliver(&s, 4, true, key(0));
        sink.deliver(&s, 4, true, key(1));
        assert_eq!(rx.try_recv().map(|r| (r.epoch, r.record.seq)), Ok((4, 0)));
        assert_eq!(s.counters.inputs_dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_scene_walks_with_wasd_and_the_arrows() {
        assert_eq!(
            scene_input(&InputEvent::Key {
                code: keys::UP,
                down: true
            }),
            Some(SceneInput::Key {
                key: SceneKey::Forward,
                down: true
            })
        );
        assert!(scene_input(&InputEvent::Key {
            code: 1,
            down: true
        })
        .is_none());
    }
}
