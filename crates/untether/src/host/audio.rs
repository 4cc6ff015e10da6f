//! The host's audio: PCM (the test tone, an SDL capture device, or the application's) encoded
//! into Opus on the producing thread, the packets handed to the network driver.

use std::sync::Mutex;
use std::time::Duration;

use untether_media::audio::{self, AudioEncoder, EncodedAudio, Tone};
use untether_proto::{AudioPacket, Micros};

use super::commands::HostCommand;
use super::error::HostError;
use super::shared::{lock, HostShared};
use crate::clock::{now_us, sleep_until};
use crate::driver::Handle;

/// The Opus encoder of a host with audio, shared by whoever pushes PCM.
pub(crate) struct AudioStage {
    encoder: Mutex<(AudioEncoder, Vec<EncodedAudio>)>,
    net: Handle<HostCommand>,
}

impl AudioStage {
    pub fn new(bitrate_kbps: u32, net: Handle<HostCommand>) -> Result<AudioStage, HostError> {
        Ok(AudioStage {
            encoder: Mutex::new((AudioEncoder::new(bitrate_kbps)?, Vec::new())),
            net,
        })
    }

    /// Encodes PCM into Opus packets and hands them to the network driver and the other
    /// consumers (RTSP).
    pub fn push(
        &self,
        s: &HostShared,
        pcm: &[i16],
        channels: usize,
        pts_us: Micros,
    ) -> Result<(), HostError> {
        let mut guard = lock(&self.encoder);
        let (encoder, out) = &mut *guard;
        out.clear();
        encoder.push(pcm, channels, pts_us, out)?;
        if out.is_empty() {
            return Ok(());
        }
        let packets = out
            .iter()
            .map(|a| AudioPacket {
                seq: a.seq,
                pts_us: a.pts_us,
                samples: audio::FRAME_SAMPLES as u16,
                opus: a.opus.clone(),
                prev_opus: a.prev_opus.clone(),
            })
            .collect();
        {
            let mut sm = lock(&s.samples);
            for a in out.iter() {
                sm.audio_encode.push_us(a.encode_us as i64);
            }
        }
        drop(guard);
        for p in &packets {
            s.consumers.audio(p);
        }
        if !self.net.send(HostCommand::Audio(packets)) {
            return Err(HostError::Stopped(s.fatal()));
        }
        Ok(())
    }
}

/// The test tone, produced in real time like a capture device would: every 10 ms, the 10 ms
/// that just ended. Audio is not a frame source: after a stall it catches up (up to ten
/// blocks) instead of skipping, as a capture device delivers every sample.
pub(crate) fn tone_loop(s: &HostShared, stage: &AudioStage) {
    audio::raise_thread_priority();
    let tone = Tone::default();
    let mut pcm = vec![0i16; audio::FRAME_SAMPLES * audio::CHANNELS];
    let frame = audio::FRAME_US;
    let mut pts = now_us() / frame * frame;
    while !s.stopped() {
        if !s.watched() {
            std::thread::sleep(Duration::from_millis(10));
            pts = now_us() / frame * frame;
            continue;
        }
        sleep_until(pts + frame);
        if now_us() > pts + 10 * frame {
            // A long stall: skip ahead instead of bursting.
            pts = now_us() / frame * frame - frame;
        }
        tone.fill(pts, &mut pcm);
        if let Err(e) = stage.push(s, &pcm, audio::CHANNELS, pts) {
            if !s.stopped() {
                s.fail(format!("audio: {e}"));
            }
            return;
        }
        pts += frame;
    }
}
