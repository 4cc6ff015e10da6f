//! The built-in test scene as a frame source: renders on its own thread at the frame rate,
//! applies the client's input before each frame and renders for the client's newest head pose
//! (the frame carries that pose to the client), stamps frame number, capture time and the
//! input it has applied into the pixels, and puts the frame in the slot for the encoder thread
//! (latest wins, replaced frames counted as dropped).

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use untether_media::scene::Scene;
use untether_media::stamp::{self, Stamp};
use untether_media::BgraFrame;

use super::encode::EncoderStage;
use super::input::{scene_input, SceneRecord};
use super::shared::{lock, CapturedFrame, HostShared, Pixels};
use super::state_input::STATE_SEQ;
use crate::clock::now_us;
use crate::ticker::Ticker;

/// Applies the queued input of the current controller (and of viewers granted input) to the
/// scene; returns the stamp's input count: the controller's reliable channel numbers events
/// 0, 1, 2, … so "applied > seq" means "seq is reflected". A granted viewer's events move the
/// scene but not the count (their numbers are its own channel's).
pub(crate) fn apply_input(
    s: &HostShared,
    scene: &mut Scene,
    inputs: &Receiver<SceneRecord>,
    epoch: u64,
    mut applied: u32,
) -> u32 {
    for r in inputs.try_iter() {
        if r.epoch != epoch {
            continue;
        }
        if let Some(input) = scene_input(&r.record.event) {
            scene.apply_input(input);
        }
        if r.controller && r.record.seq != STATE_SEQ {
            applied = r.record.seq.wrapping_add(1);
        }
        s.counters.inputs_applied.fetch_add(1, Ordering::Relaxed);
    }
    applied
}

pub(crate) fn scene_loop(
    s: &HostShared,
    mut scene: Scene,
    inputs: Receiver<SceneRecord>,
    fps: u32,
) {
    let (w, h) = (scene.config().width, scene.config().height);
    let mut ticker = Ticker::at_fps(fps);
    let start = now_us();
    let mut frame_number: u32 = 0;
    let mut inputs_applied: u32 = 0;
    let mut epoch = s.audience.epoch();
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            ticker.resync(now_us());
            continue;
        }
        let e = s.audience.epoch();
        if e != epoch {
            epoch = e;
            inputs_applied = 0;
        }
        ticker.wait();
        inputs_applied = apply_input(s, &mut scene, &inputs, epoch, inputs_applied);
        // The newest head pose, read just before rendering (as a VR application locates its
        // views): the frame is rendered for it and carries it.
        let pose = *lock(&s.head_pose);
        if let Some(p) = pose {
            let (yaw, pitch, _roll) = p.pose.angles_deg();
            scene.set_head_pose(yaw, pitch, p.pose.position);
        }
        let mut pixels = match lock(&s.spare).pop() {
            Some(Pixels::Bgra(p)) => p,
            _ => match BgraFrame::new(w, h) {
                Ok(p) => p,
                Err(e) => return s.fail(format!("frame buffer: {e}")),
            },
        };
        let t0 = now_us();
        scene.render((t0 - start) as f64 / 1e6, &mut pixels);
        let capture_us = now_us();
        stamp::write_bgra(
            &mut pixels,
            &Stamp {
                frame_number,
                capture_us,
                input_seq: inputs_applied,
            },
        );
        frame_number = frame_number.wrapping_add(1);
        s.counters.captured.fetch_add(1, Ordering::Relaxed);
        let capture_dur_us = (capture_us - t0) as u32;
        lock(&s.samples).capture.push_us(capture_dur_us as i64);
        if let Some(old) = s.frames.put(CapturedFrame {
            pixels: Pixels::Bgra(pixels),
            capture_us,
            capture_dur_us,
            pose,
        }) {
            s.recycle(old.pixels);
        }
    }
}

/// The encoder thread of the scene and app sources: encodes the newest frame in the slot.
pub(crate) fn encode_loop(
    s: &HostShared,
    mut stage: EncoderStage,
    tap: Option<super::options::SentFrameTap>,
) {
    while !s.stopped() {
        let Some(frame) = s.frames.take(Duration::from_millis(50)) else {
            continue;
        };
        let r = stage.send(
            &frame.pixels.picture(),
            frame.capture_us,
            frame.capture_dur_us,
            frame.pose,
        );
        if let (Ok(_), Some(tap)) = (&r, &tap) {
            (tap.0)(&frame.pixels.picture());
        }
        let dma_buf = matches!(frame.pixels, Pixels::DmaBuf(_));
        s.recycle(frame.pixels);
        match r {
            // The application's GPU picture could not be encoded in place: zero-copy off for
            // good (one line), that frame lost; the application reads back from now on.
            Err(e) if dma_buf && !s.stopped() => {
                s.zero_copy.turn_off(
                    s,
                    format!("the encoder could not take a DMA-BUF picture: {e}"),
                );
                continue;
            }
            _ => {}
        }
        if let Err(e) = r {
            if !s.stopped() {
                s.fail(format!("encoder: {e}"));
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;
    use untether_media::scene::SceneConfig;
    use untether_proto::{InputEvent, InputRecord};

    #[test]
    fn input_of_the_current_controller_is_applied_and_counted() {
        let s = HostShared::new((0, 0));
        let mut scene = Scene::new(SceneConfig::new(64, 36)).unwrap();
        let (tx, rx) = sync_channel(16);
        let rec = |epoch, controller, seq| SceneRecord {
            epoch,
            controller,
            record: InputRecord {
                seq,
                event: if seq == STATE_SEQ {
                    InputEvent::PointerMotion {
                        x: 1,
                        y: 1,
                        dx: 1,
                        dy: 0,
                    }
                } else {
                    InputEvent::Key {
                        code: super::super::input::keys::W,
                        down: true,
                    }
                },
            },
        };
        tx.send(rec(1, true, 0)).unwrap();
        tx.send(rec(2, true, 0)).unwrap();
        tx.send(rec(2, true, 1)).unwrap();
        tx.send(rec(2, true, STATE_SEQ)).unwrap();
        // A granted viewer's event 7: applied, but the count is the controller's.
        tx.send(rec(2, false, 7)).unwrap();
        // Epoch 2 is current: the old controller's record is skipped; the state record and
        // the viewer's count as applied but do not move the reliable count.
        assert_eq!(apply_input(&s, &mut scene, &rx, 2, 0), 2);
        assert_eq!(s.counters.inputs_applied.load(Ordering::Relaxed), 4);
    }
}
