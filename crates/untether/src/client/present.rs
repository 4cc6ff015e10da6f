//! The client's present stage, on the calling thread (SDL wants the thread that made the
//! window): shows the newest decoded picture and/or writes it to a pipe sink, hands the
//! window's (and the application's) input to the network driver, and times each input event's
//! response from the pixel stamp of the first picture that reflects it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use untether_media::codec::DecodedFrame;
use untether_media::pipe::PipeWriter;
use untether_media::present::{HeadlessPresenter, Presenter, SdlPresenter, WindowEvent};
use untether_proto::{InputEvent, Micros};

use super::input::window_input;
use super::network::{ClientCommand, InputKind};
use super::options::{ClientOptions, Display, ShownFrameTap};
use super::record::keep_record;
use super::{lock, ClientError, ClientShared};
use crate::clock::now_us;
use crate::driver::Handle;

#[allow(clippy::too_many_arguments)]
pub(crate) fn present_loop(
    s: &ClientShared,
    net: &Handle<ClientCommand>,
    sent_inputs: &Receiver<(u32, Micros)>,
    options: &ClientOptions,
    stop: &AtomicBool,
    mut sink: Option<&mut PipeWriter>,
    inject: Option<std::sync::mpsc::Receiver<InputEvent>>,
    mut shown_tap: Option<ShownFrameTap>,
) -> Result<(), ClientError> {
    let started = now_us();
    let end = options.duration.map(|d| started + d.as_micros() as u64);
    let mut presenter: Option<Box<dyn Presenter>> = None;
    // Input events sent and not yet seen reflected in a decoded frame: seq → sent time.
    let mut awaiting: BTreeMap<u32, Micros> = BTreeMap::new();
    let probe_every = options.client.input_probe_interval_ms * 1000;
    let mut next_probe = started + 1_000_000;
    let mut probe_sign = 1;
    let mut last_picture: Option<DecodedFrame> = None;
    // What the window's title says besides the host (reconnecting, or this viewer's role).
    let mut shown_status: Option<String> = None;
    let mut photon_probe = super::photon::Probe::new(&options.vr);
    // Game controllers, polled here (SDL's thread); after the presenter, so dropped first.
    let mut gamepads = if options.client.gamepads {
        match untether_media::gamepad::Gamepads::open() {
            Ok(g) => Some(g),
            Err(e) => {
                log::warn!("client: no game controllers: SDL: {e}");
                None
            }
        }
    } else {
        None
    };
    loop {
        if stop.load(Ordering::SeqCst) || s.stop.load(Ordering::SeqCst) {
            break;
        }
        let now = now_us();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let mut window: Vec<InputEvent> = Vec::new();
        if let Some(p) = presenter.as_mut() {
            for ev in p.poll_events() {
                if ev == WindowEvent::Quit {
                    s.finish(None);
                    break;
                }
                window.extend(window_input(&ev));
            }
        }
        let connected = s.connected.load(Ordering::SeqCst);
        let status = status_text(s.reconnecting.load(Ordering::SeqCst), *lock(&s.role));
        if let Some(p) = presenter.as_mut() {
            if status != shown_status {
                p.set_status(status.as_deref());
                shown_status = status;
            }
        }
        if connected {
            if let Some(rx) = &inject {
                window.extend(rx.try_iter().take(1024));
            }
            if let Some(g) = gamepads.as_mut() {
                let (buttons, axes) = super::input::gamepad_input(g.poll());
                for (key, value) in axes {
                    net.send(ClientCommand::State(key, value));
                }
                if !buttons.is_empty() {
                    net.send(ClientCommand::Input(InputKind::Device, buttons));
                }
            }
            if !window.is_empty() {
                net.send(ClientCommand::Input(InputKind::Window, window));
            }
        }
        if probe_every > 0 && connected && now >= next_probe {
            // A synthetic look-around: alternating small turns, each reflected in the picture.
            // It stays on the reliable channel: its response is measured by sequence number.
            net.send(ClientCommand::Input(
                InputKind::Probe,
                vec![InputEvent::PointerMotion {
                    x: 0,
                    y: 0,
                    dx: 8 * probe_sign,
                    dy: 0,
                }],
            ));
            probe_sign = -probe_sign;
            next_probe = now + probe_every;
        }
        for (seq, sent) in sent_inputs.try_iter() {
            if awaiting.len() < 4096 {
                awaiting.insert(seq, sent);
            }
        }
        let Some(mut item) = s.decoded.take(Duration::from_millis(4)) else {
            continue;
        };
        if presenter.is_none() {
            presenter = Some(match options.display {
                Display::Window => Box::new(SdlPresenter::new(
                    &format!("untether — {}", options.host),
                    item.picture.width(),
                    item.picture.height(),
                    false,
                )?),
                Display::Headless => Box::new(HeadlessPresenter),
            });
        }
        if let Some(p) = presenter.as_mut() {
            p.present(&item.picture)?;
            if options.vr.enabled {
                photon_probe.measure(s, p.as_mut(), &item.picture, now_us());
            }
        }
        if let Some(w) = sink.as_deref_mut() {
            if let Err(e) = w.write(&item.picture) {
                // The reader went away (a closed pipe): the pipeline is over.
                log::info!("client: sink: {e}");
                lock(&s.run).outcome = Some(format!("sink closed: {e}"));
                s.finish(None);
            }
        }
        item.record.shown_us = now_us();
        if let Some(tap) = shown_tap.as_mut() {
            (tap.0)(&item.record, &item.picture);
        }
        // Sequence numbers of events sent just before this picture was decoded.
        for (seq, sent) in sent_inputs.try_iter() {
            if awaiting.len() < 4096 {
                awaiting.insert(seq, sent);
            }
        }
        let mut run = lock(&s.run);
        run.shown += 1;
        let session = run.session;
        if let Some(last) = run.reconnects.last_mut() {
            if last.1 == 0 && item.record.session == session && session > 0 {
                // The first picture of the new session: the stream is back.
                last.1 = item.record.shown_us;
            }
        }
        if let Some(stamp) = item.record.stamp {
            // Every event numbered below the stamp's count has been applied by the scene.
            let reflected: Vec<u32> = awaiting.range(..stamp.input_seq).map(|(k, _)| *k).collect();
            for seq in reflected {
                if let Some(sent) = awaiting.remove(&seq) {
                    run.input_responses
                        .push((seq, sent, item.record.decode_end_us));
                }
            }
        }
        keep_record(&mut run, item.record);
        drop(run);
        if options.save_frame.is_some() {
            last_picture = Some(item.picture);
        }
    }
    if let (Some(path), Some(picture)) = (&options.save_frame, last_picture) {
        save_ppm(&picture, path)?;
    }
    Ok(())
}

/// What the window's title says besides the host: reconnecting, or a viewer's role (nothing
/// for the controller, or a host serving one client).
fn status_text(
    reconnecting: bool,
    role: Option<(untether_proto::ClientRole, bool, bool)>,
) -> Option<String> {
    if reconnecting {
        return Some("host unreachable: holding the last picture, reconnecting".into());
    }
    match role? {
        (untether_proto::ClientRole::Controller, ..) => None,
        (_, granted, paused) => Some(format!(
            "viewer{}{}",
            if granted { " · input granted" } else { "" },
            if paused {
                " · paused: this link cannot carry the stream"
            } else {
                ""
            }
        )),
    }
}

/// Writes a decoded picture as a binary PPM.
pub fn save_ppm(picture: &DecodedFrame, path: &std::path::Path) -> Result<(), ClientError> {
    let bgra = picture.to_bgra()?;
    let mut out = format!("P6\n{} {}\n255\n", bgra.width, bgra.height).into_bytes();
    for y in 0..bgra.height {
        for px in bgra.row(y).chunks_exact(4) {
            out.extend_from_slice(&[px[2], px[1], px[0]]);
        }
    }
    std::fs::write(path, out).map_err(|e| {
        ClientError::Media(untether_media::MediaError::Other(format!(
            "cannot write {}: {e}",
            path.display()
        )))
    })
}
