//! Audio: Opus in restricted-low-delay mode with 10 ms frames (2.5 ms look-ahead), a playout
//! buffer whose delay adapts between 10 and 40 ms to the arrival jitter, SDL2 playback and
//! capture, and the test tone.
//!
//! Everything is 48 kHz, 16-bit, stereo interleaved. Mono input is duplicated to both channels.
//!
//! - [`AudioEncoder`]: PCM in, one Opus packet per 10 ms out, each with a copy of the previous
//!   packet for redundancy (restricted-low-delay Opus is CELT only, which has no in-band FEC).
//! - [`Playout`]: the client's jitter buffer and decoder. Packets go in from the network in any
//!   order; SDL's audio callback pulls samples. Each packet plays on a schedule read from its
//!   timestamp (see [`Playout::target_us`]). Losses are filled from the redundant copy, else
//!   concealed by the decoder (PLC); an empty buffer re-buffers on the schedule and raises the
//!   target; a playout running late catches up in quiet blocks.
//! - [`SdlAudioOut`] / [`SdlAudioCapture`]: SDL2 devices (PulseAudio, PipeWire, ALSA; the
//!   backend is chosen by SDL, or by `SDL_AUDIODRIVER`; `dummy` plays nowhere, in real time).
//! - [`Tone`]: 1 kHz beeps of 100 ms at every whole second of the host's clock, so their timing
//!   can be checked from what the client plays.

use std::collections::{BTreeMap, VecDeque};

use crate::{MediaError, Result};

mod capture;
mod output;
mod sdl;

pub use capture::{CaptureSink, SdlAudioCapture};
pub use output::{AudioOut, NullAudioOut, SdlAudioOut, NULL_DEVICE};
pub use sdl::current_driver;

/// Samples per second.
pub const RATE: u32 = 48_000;
/// Channels of the stream.
pub const CHANNELS: usize = 2;
/// Samples per channel in one 10 ms packet.
pub const FRAME_SAMPLES: usize = 480;
/// Duration of one packet.
pub const FRAME_US: u64 = 10_000;
/// Opus's algorithmic delay in restricted-low-delay mode (its look-ahead, 120 samples): a
/// sample captured at `pts` comes out of the decoder this much later in the stream.
pub const CODEC_DELAY_US: u64 = 2_500;
/// The playout delay's range.
pub const MIN_TARGET_US: u64 = 10_000;
pub const MAX_TARGET_US: u64 = 40_000;

/// Raises the calling thread's scheduling priority (nice −10) when allowed (root or
/// CAP_SYS_NICE), as SDL does for its own audio thread: audio is produced and consumed in
/// 10 ms and 5 ms rhythms that the video encoder and decoder, busy on every core, would
/// otherwise delay by milliseconds. Returns whether it took effect; without the privilege the
/// thread keeps its priority.
pub fn raise_thread_priority() -> bool {
    // SAFETY: plain syscalls on the calling thread (tid 0 = the caller with PRIO_PROCESS on
    // Linux threads).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, -10) == 0
    }
}

fn opus_err(what: &'static str) -> impl Fn(opus::Error) -> MediaError {
    move |e| MediaError::Other(format!("Opus {what}: {e}"))
}

/// One encoded 10 ms packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedAudio {
    pub seq: u32,
    /// Time of the first sample (the clock of whoever pushed the PCM).
    pub pts_us: u64,
    pub opus: Vec<u8>,
    /// The previous packet (`seq − 1`), or empty.
    pub prev_opus: Vec<u8>,
    pub encode_us: u64,
}

/// PCM → 10 ms Opus packets.
pub struct AudioEncoder {
    enc: opus::Encoder,
    pending: Vec<i16>,
    /// Time of `pending[0]`.
    pending_pts: Option<u64>,
    prev: Vec<u8>,
    seq: u32,
}

impl AudioEncoder {
    /// A restricted-low-delay encoder at `bitrate_kbps` (e.g. 96 or 128).
    pub fn new(bitrate_kbps: u32) -> Result<AudioEncoder> {
        let mut enc = opus::Encoder::new(RATE, opus::Channels::Stereo, opus::Application::LowDelay)
            .map_err(opus_err("encoder"))?;
        enc.set_bitrate(opus::Bitrate::Bits(
            bitrate_kbps.clamp(16, 510) as i32 * 1000,
        ))
        .map_err(opus_err("bitrate"))?;
        enc.set_vbr(false).map_err(opus_err("cbr"))?;
        Ok(AudioEncoder {
            enc,
            pending: Vec::with_capacity(FRAME_SAMPLES * CHANNELS * 2),
            pending_pts: None,
            prev: Vec::new(),
            seq: 0,
        })
    }

    /// Opus's look-ahead, µs (2.5 ms in this mode).
    pub fn lookahead_us(&mut self) -> u64 {
        self.enc
            .get_lookahead()
            .map_or(0, |s| s.max(0) as u64 * 1_000_000 / RATE as u64)
    }

    /// Takes interleaved PCM with `channels` (1 or 2) whose first sample was captured at
    /// `pts_us`, and appends each complete 10 ms packet to `out`.
    pub fn push(
        &mut self,
        pcm: &[i16],
        channels: usize,
        pts_us: u64,
        out: &mut Vec<EncodedAudio>,
    ) -> Result<()> {
        if channels != 1 && channels != 2 {
            return Err(MediaError::Other(format!(
                "audio: {channels} channels; untether takes mono or stereo"
            )));
        }
        if !pcm.len().is_multiple_of(channels) {
            return Err(MediaError::Other(
                "audio: the sample count is not a multiple of the channel count".into(),
            ));
        }
        // A gap or overlap of more than a packet in the pushed timestamps: start afresh.
        let expected = self
            .pending_pts
            .map(|p| p + (self.pending.len() / CHANNELS) as u64 * 1_000_000 / RATE as u64);
        match expected {
            Some(e) if e.abs_diff(pts_us) <= FRAME_US => {}
            _ => {
                self.pending.clear();
                self.pending_pts = Some(pts_us);
            }
        }
        if channels == 2 {
            self.pending.extend_from_slice(pcm);
        } else {
            self.pending.extend(pcm.iter().flat_map(|&s| [s, s]));
        }
        let per = FRAME_SAMPLES * CHANNELS;
        let mut buf = [0u8; 1500];
        while self.pending.len() >= per {
            let t0 = untether_clock::now_us();
            let n = self
                .enc
                .encode(&self.pending[..per], &mut buf[..crate::audio::MAX_PACKET])
                .map_err(opus_err("encode"))?;
            let pts = self.pending_pts.unwrap_or(pts_us);
            let opus = buf[..n].to_vec();
            out.push(EncodedAudio {
                seq: self.seq,
                pts_us: pts,
                prev_opus: std::mem::replace(&mut self.prev, opus.clone()),
                opus,
                encode_us: untether_clock::now_us() - t0,
            });
            self.seq = self.seq.wrapping_add(1);
            self.pending.drain(..per);
            self.pending_pts = Some(pts + FRAME_US);
        }
        Ok(())
    }
}

/// The largest Opus packet produced (fits twice in a datagram with room to spare).
pub const MAX_PACKET: usize = 500;

/// Counters of the playout buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlayoutStats {
    pub received: u64,
    /// Packets that arrived after their turn (or twice).
    pub late: u64,
    /// Lost packets recovered from the next packet's redundant copy.
    pub recovered: u64,
    /// Lost packets concealed by the decoder.
    pub concealed: u64,
    /// Of those, packets that came late after all and were played after their concealment
    /// (which stretched the stream by one packet).
    pub concealed_then_played: u64,
    pub played: u64,
    /// Times the buffer ran empty and re-buffered.
    pub underruns: u64,
    /// Packets dropped because the buffer held more than the target (clock drift, bursts).
    pub dropped: u64,
    /// Audio skipped in quiet stretches to bring a late-running playout back to its schedule
    /// (after a re-buffer or a startup burst), µs.
    pub trimmed_us: u64,
    pub decode_errors: u64,
}

/// When a packet's first sample went to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Played {
    pub seq: u32,
    /// Sender's clock.
    pub pts_us: u64,
    /// Receiver's clock: when the sound captured at `pts_us` leaves the device (estimated:
    /// device buffer and Opus's 2.5 ms delay included).
    pub out_us: u64,
}

/// What a capture tap recorded: the left channel as played, and when blocks of it played.
#[derive(Clone, Debug, Default)]
pub struct Tap {
    pub samples: Vec<i16>,
    /// (index into `samples`, receiver clock when that sample left the device).
    pub marks: Vec<(usize, u64)>,
    pub max_samples: usize,
}

enum Pending {
    Packet { pts_us: u64, opus: Vec<u8> },
}

/// The client's jitter buffer and decoder (see the module docs).
pub struct Playout {
    decoder: opus::Decoder,
    packets: BTreeMap<u32, Pending>,
    next_seq: Option<u32>,
    block: Vec<i16>,
    block_pos: usize,
    playing: bool,
    target_us: u64,
    /// Raised by underruns, decays while none happen.
    bump_us: f64,
    transit: VecDeque<i64>,
    /// The smallest transit of the window: the arrival time (receiver clock) of a packet with
    /// `pts` 0 sent without queueing; `pts + min_transit` is when a packet can be expected.
    min_transit: Option<i64>,
    last_pull_us: u64,
    /// The device's pull period (smoothed), µs.
    pull_period_us: f64,
    /// Missing packets concealed in a row (reset when a packet plays).
    concealed_run: u32,
    /// The last packets concealed as missing, to tell a late arrival from a duplicate.
    concealed_seqs: VecDeque<u32>,
    pub stats: PlayoutStats,
    pub played: Vec<Played>,
    pub tap: Option<Tap>,
    targets: Vec<u64>,
}

/// What an underrun (or a packet concealed as lost that then arrived) adds to the target, µs;
/// it decays by 3 ms per second.
const UNDERRUN_BUMP_US: f64 = 3_000.0;
/// Missing packets concealed in a row, with nothing queued behind them, before the playout
/// treats the stream as paused and re-buffers.
const MAX_CONCEALED_RUN: u32 = 2;
/// Lateness against the schedule tolerated before the playout catches up.
const LATE_SLACK_US: u64 = 1_000;
/// A block whose peak is under this (−40 dBFS) is quiet enough to skip audio in.
const QUIET_PEAK: u16 = 328;

/// The most `played` records kept (10 minutes).
const MAX_PLAYED: usize = 60_000;

impl Playout {
    pub fn new() -> Result<Playout> {
        Ok(Playout {
            decoder: opus::Decoder::new(RATE, opus::Channels::Stereo)
                .map_err(opus_err("decoder"))?,
            packets: BTreeMap::new(),
            next_seq: None,
            block: vec![0; FRAME_SAMPLES * CHANNELS],
            block_pos: FRAME_SAMPLES * CHANNELS,
            playing: false,
            target_us: MIN_TARGET_US,
            bump_us: 0.0,
            transit: VecDeque::new(),
            min_transit: None,
            last_pull_us: 0,
            pull_period_us: 0.0,
            concealed_run: 0,
            concealed_seqs: VecDeque::new(),
            stats: PlayoutStats::default(),
            played: Vec::new(),
            tap: None,
            targets: Vec::new(),
        })
    }

    /// Records what is played (left channel) up to `max_seconds`, for tests and measurements.
    pub fn enable_tap(&mut self, max_seconds: u32) {
        self.tap = Some(Tap {
            max_samples: max_seconds as usize * RATE as usize,
            ..Default::default()
        });
    }

    /// The current target: the audio queued when a packet arrives at the earliest, itself
    /// included (one packet + the arrival jitter + the device's pull period + 1 ms, raised by
    /// underruns), between 10 and 40 ms.
    pub fn target_us(&self) -> u64 {
        self.target_us
    }

    /// Every target the buffer moved to (µs), for the report.
    pub fn targets(&self) -> &[u64] {
        &self.targets
    }

    /// Queued audio, µs.
    pub fn queued_us(&self) -> u64 {
        self.packets.len() as u64 * FRAME_US
            + ((self.block.len() - self.block_pos) / CHANNELS) as u64 * 1_000_000 / RATE as u64
    }

    /// A packet from the network at `now_us` (receiver clock). `prev_opus` is the copy of
    /// packet `seq − 1`, used if that one never came.
    pub fn push(&mut self, now_us: u64, seq: u32, pts_us: u64, opus: &[u8], prev_opus: &[u8]) {
        self.stats.received += 1;
        let before = |s: u32, n: u32| (s.wrapping_sub(n) as i32) < 0;
        if let Some(n) = self.next_seq {
            let was_concealed = self.concealed_seqs.contains(&seq);
            if was_concealed {
                // Concealed as lost, but only late: the jitter is more than planned for.
                self.concealed_seqs.retain(|&c| c != seq);
                self.bump_us = (self.bump_us + UNDERRUN_BUMP_US).min(MAX_TARGET_US as f64);
            }
            if was_concealed && seq.wrapping_add(1) == n && self.packets.is_empty() {
                // It was the last block concealed and nothing came after it: play it now,
                // the concealment having stretched the stream by one packet (the playout
                // runs a packet later, which the target now asks for, or which quiet blocks
                // trim again).
                self.next_seq = Some(seq);
                self.stats.concealed_then_played += 1;
            } else if before(seq, n) || self.packets.contains_key(&seq) {
                self.stats.late += 1;
                self.adapt();
                return;
            }
        }
        if self.packets.len() >= 64 {
            // Nobody is pulling (no device): keep the newest only.
            self.packets.clear();
            self.next_seq = None;
            self.playing = false;
        }
        self.packets.insert(
            seq,
            Pending::Packet {
                pts_us,
                opus: opus.to_vec(),
            },
        );
        let prev = seq.wrapping_sub(1);
        if !prev_opus.is_empty()
            && !self.packets.contains_key(&prev)
            && self.next_seq.is_some_and(|n| !before(prev, n))
        {
            self.packets.insert(
                prev,
                Pending::Packet {
                    pts_us: pts_us.saturating_sub(FRAME_US),
                    opus: prev_opus.to_vec(),
                },
            );
            self.stats.recovered += 1;
        }
        // Transit time (receiver clock − sender clock: a constant offset plus the variable
        // delay); its spread over the last 2 s is the jitter the buffer must absorb.
        self.transit.push_back(now_us as i64 - pts_us as i64);
        if self.transit.len() > 200 {
            self.transit.pop_front();
        }
        self.adapt();
    }

    fn adapt(&mut self) {
        if self.transit.len() < 4 {
            return;
        }
        let mut v: Vec<i64> = self.transit.iter().copied().collect();
        v.sort_unstable();
        let min = v[0];
        self.min_transit = Some(min);
        let p95 = v[(v.len() * 95 / 100).min(v.len() - 1)];
        let spread = (p95 - min).max(0) as f64;
        // A packet arriving at the earliest finds the target queued, itself (10 ms) included;
        // one arriving `spread` later must still come before the device pull that needs its
        // first sample, up to one pull period before that sample plays. So: one packet, the
        // jitter, one pull period and 1 ms of slack; underruns add to it.
        let want = FRAME_US as f64 + spread + self.pull_period_us + 1_000.0 + self.bump_us;
        let t = (want as u64).clamp(MIN_TARGET_US, MAX_TARGET_US);
        if t.abs_diff(self.target_us) >= 1_000 {
            self.target_us = t;
            if self.targets.len() < 10_000 {
                self.targets.push(t);
            }
        }
    }

    /// Decodes the next packet (or conceals it) into the block, which starts being handed to
    /// the device at `play_us` and leaves it `device_latency_us` later.
    fn start_block(&mut self, play_us: u64, device_latency_us: u64) -> bool {
        let Some(next) = self.next_seq else {
            return false;
        };
        let n = FRAME_SAMPLES * CHANNELS;
        self.block.resize(n, 0);
        let mut skip = 0;
        if let Some(Pending::Packet { pts_us, opus }) = self.packets.remove(&next) {
            match self.decoder.decode(&opus, &mut self.block, false) {
                Ok(s) if s == FRAME_SAMPLES => {}
                _ => {
                    self.stats.decode_errors += 1;
                    let _ = self.decoder.decode(&[], &mut self.block, false);
                }
            }
            self.stats.played += 1;
            self.concealed_run = 0;
            // Running late against the schedule (a restart after an underrun or a burst left
            // more queued than the target): catch up by skipping the lateness, where nobody
            // hears it: in a quiet block.
            let late = play_us.saturating_sub(self.play_at(pts_us));
            if late > LATE_SLACK_US && self.min_transit.is_some() {
                let peak = self
                    .block
                    .iter()
                    .map(|v| v.unsigned_abs())
                    .max()
                    .unwrap_or(0);
                if peak < QUIET_PEAK {
                    let samples = (late * RATE as u64 / 1_000_000).min(FRAME_SAMPLES as u64);
                    skip = samples as usize * CHANNELS;
                    self.stats.trimmed_us += samples * 1_000_000 / RATE as u64;
                }
            }
            if self.played.len() < MAX_PLAYED {
                let skipped_us = (skip / CHANNELS) as u64 * 1_000_000 / RATE as u64;
                self.played.push(Played {
                    seq: next,
                    pts_us,
                    // The packet's first sample of sound sits CODEC_DELAY_US into the decoded
                    // stream.
                    out_us: (play_us + device_latency_us + CODEC_DELAY_US)
                        .saturating_sub(skipped_us),
                });
            }
        } else if !self.packets.is_empty() || self.concealed_run < MAX_CONCEALED_RUN {
            // Due and not here: lost if a later packet is here; else lost or late, and the
            // decoder conceals it on schedule rather than the stream stopping to re-buffer
            // (if it comes after all, it is too late and raises the target). Several missing
            // in a row with nothing behind them: the stream paused, re-buffer.
            if self.decoder.decode(&[], &mut self.block, false).is_err() {
                self.block.fill(0);
            }
            self.stats.concealed += 1;
            self.concealed_run += 1;
            self.concealed_seqs.push_back(next);
            if self.concealed_seqs.len() > 16 {
                self.concealed_seqs.pop_front();
            }
        } else {
            return false;
        }
        self.block_pos = skip;
        self.next_seq = Some(next.wrapping_add(1));
        true
    }

    /// When (receiver clock) the first sample of the packet captured at `pts_us` is handed to
    /// the device: when such a packet arrives at the earliest (`pts + min_transit`, which
    /// includes the 10 ms it takes to capture a packet) plus the target less one packet. So a
    /// packet arriving at the earliest finds `target_us` of audio queued, itself included:
    /// with the 10 ms floor it plays the moment it arrives; jitter raises the target.
    fn play_at(&self, pts_us: u64) -> u64 {
        match self.min_transit {
            Some(t) => (pts_us as i64 + t + (self.target_us - FRAME_US) as i64).max(0) as u64,
            None => 0,
        }
    }

    /// Fills `out` (interleaved stereo) at `now_us`; its first sample leaves the device
    /// `device_latency_us` later.
    pub fn pull(&mut self, now_us: u64, device_latency_us: u64, out: &mut [i16]) {
        let elapsed = now_us.saturating_sub(self.last_pull_us);
        self.last_pull_us = now_us;
        if elapsed < 5_000_000 {
            self.bump_us = (self.bump_us - elapsed as f64 * 0.003).max(0.0);
        }
        if elapsed < 100_000 {
            if self.pull_period_us == 0.0 {
                self.pull_period_us = elapsed as f64;
            }
            self.pull_period_us += (elapsed as f64 - self.pull_period_us) * 0.05;
        }
        let mut i = 0;
        if !self.playing {
            // Start (or restart after a gap) at the oldest packet we hold, at the moment its
            // schedule says (`play_at`), to the sample: silence before it in this buffer.
            let first = self.packets.iter().next().map(|(&s, p)| {
                let Pending::Packet { pts_us, .. } = p;
                (s, *pts_us)
            });
            let lead_samples = first.map(|(_, pts)| {
                let lead_us = self.play_at(pts).saturating_sub(now_us);
                (lead_us * RATE as u64 / 1_000_000) as usize
            });
            match (first, lead_samples) {
                (Some((first, _)), Some(lead)) if lead * CHANNELS < out.len() => {
                    self.playing = true;
                    let before = |s: u32, n: u32| (s.wrapping_sub(n) as i32) < 0;
                    if self.next_seq.is_none_or(|n| before(n, first)) {
                        self.next_seq = Some(first);
                    }
                    i = lead * CHANNELS;
                    out[..i].fill(0);
                    // Whatever remained of the previous block was cut short by the gap.
                    self.block_pos = self.block.len();
                }
                _ => {
                    out.fill(0);
                    self.record_tap(out, now_us + device_latency_us);
                    return;
                }
            }
        }
        while i < out.len() {
            if self.block_pos >= self.block.len() {
                // Drop whole packets while we hold far more than the target (drift, bursts).
                while self.queued_us() > self.target_us + 10_000 && self.packets.len() > 1 {
                    if let Some(n) = self.next_seq {
                        self.packets.remove(&n);
                        self.next_seq = Some(n.wrapping_add(1));
                        self.stats.dropped += 1;
                    }
                }
                let t = now_us + (i / CHANNELS) as u64 * 1_000_000 / RATE as u64;
                if !self.start_block(t, device_latency_us) {
                    self.stats.underruns += 1;
                    self.playing = false;
                    self.bump_us = (self.bump_us + UNDERRUN_BUMP_US).min(MAX_TARGET_US as f64);
                    self.adapt();
                    out[i..].fill(0);
                    break;
                }
            }
            let n = (self.block.len() - self.block_pos).min(out.len() - i);
            out[i..i + n].copy_from_slice(&self.block[self.block_pos..self.block_pos + n]);
            self.block_pos += n;
            i += n;
        }
        self.record_tap(out, now_us + device_latency_us);
    }

    fn record_tap(&mut self, out: &[i16], at_us: u64) {
        if let Some(tap) = self.tap.as_mut() {
            if tap.samples.len() + out.len() / CHANNELS <= tap.max_samples {
                tap.marks.push((tap.samples.len(), at_us));
                tap.samples.extend(out.iter().step_by(CHANNELS));
            }
        }
    }
}

/// The test tone: `freq_hz` beeps of `beep_ms` starting at every multiple of `period_ms` of
/// the host's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Tone {
    pub freq_hz: f64,
    pub beep_ms: u64,
    pub period_ms: u64,
    pub amplitude: f64,
}

impl Default for Tone {
    fn default() -> Self {
        Tone {
            freq_hz: 1000.0,
            beep_ms: 100,
            period_ms: 1000,
            amplitude: 0.4,
        }
    }
}

impl Tone {
    /// Fills `out` (interleaved stereo) with the samples starting at `pts_us`.
    pub fn fill(&self, pts_us: u64, out: &mut [i16]) {
        let period = self.period_ms * 1000;
        let beep = self.beep_ms * 1000;
        for (i, frame) in out.chunks_exact_mut(CHANNELS).enumerate() {
            // Sample time in µs; whole samples keep the phase exact across calls.
            let n = pts_us as u128 * RATE as u128 / 1_000_000 + i as u128;
            let t_us = (n * 1_000_000 / RATE as u128) as u64;
            let v = if t_us % period < beep {
                let phase = (n % RATE as u128) as f64 / RATE as f64 * self.freq_hz;
                (self.amplitude * (std::f64::consts::TAU * phase).sin() * 32767.0) as i16
            } else {
                0
            };
            frame.fill(v);
        }
    }
}

/// Sample indices where a beep starts: the 1 ms RMS envelope rises above `threshold` (0..1 of
/// full scale) after at least 50 ms below it.
pub fn onsets(samples: &[i16], threshold: f64) -> Vec<usize> {
    let block = RATE as usize / 1000;
    let mut out = Vec::new();
    let mut quiet = 0usize;
    for (b, chunk) in samples.chunks(block).enumerate() {
        let rms = (chunk.iter().map(|&s| (s as f64).powi(2)).sum::<f64>()
            / chunk.len().max(1) as f64)
            .sqrt()
            / 32768.0;
        if rms > threshold {
            if quiet >= 50 {
                // Refine to the first sample above half the threshold in this block.
                let start = b * block;
                let first = chunk
                    .iter()
                    .position(|&s| (s as f64).abs() / 32768.0 > threshold * 0.5)
                    .unwrap_or(0);
                out.push(start + first);
            }
            quiet = 0;
        } else {
            quiet += 1;
        }
    }
    out
}

/// The frequency of a tone by counting zero crossings (Hz).
pub fn zero_crossing_frequency(samples: &[i16]) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let crossings = samples
        .windows(2)
        .filter(|w| (w[0] < 0) != (w[1] < 0))
        .count();
    crossings as f64 / 2.0 / (samples.len() as f64 / RATE as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone_packets(n: usize) -> Vec<EncodedAudio> {
        let mut enc = AudioEncoder::new(128).unwrap();
        let tone = Tone {
            period_ms: 200,
            beep_ms: 100,
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut pcm = vec![0i16; FRAME_SAMPLES * CHANNELS];
        for i in 0..n {
            let pts = 1_000_000_000 + i as u64 * FRAME_US;
            tone.fill(pts, &mut pcm);
            enc.push(&pcm, 2, pts, &mut out).unwrap();
        }
        assert_eq!(out.len(), n);
        out
    }

    #[test]
    fn encoder_makes_10ms_packets_with_redundancy_and_accepts_odd_pushes() {
        let p = tone_packets(5);
        assert!(p
            .iter()
            .all(|x| x.opus.len() <= MAX_PACKET && !x.opus.is_empty()));
        assert!(p[0].prev_opus.is_empty());
        assert_eq!(p[3].prev_opus, p[2].opus);
        assert_eq!(p[4].pts_us - p[3].pts_us, FRAME_US);
        // Mono, pushed in pieces of 7 ms.
        let mut enc = AudioEncoder::new(64).unwrap();
        assert!(enc.lookahead_us() <= 5_000);
        let mut out = Vec::new();
        for k in 0..10u64 {
            enc.push(&vec![100i16; 336], 1, 5_000_000 + k * 7_000, &mut out)
                .unwrap();
        }
        assert_eq!(out.len(), 7);
        assert_eq!(out[1].pts_us, 5_010_000);
        assert!(enc.push(&[1, 2, 3], 3, 0, &mut out).is_err());
    }

    #[test]
    fn playout_plays_the_tone_through_loss_and_reordering() {
        let packets = tone_packets(100);
        let mut p = Playout::new().unwrap();
        p.enable_tap(5);
        let mut now = 2_000_000_000u64;
        let mut out = vec![0i16; 240 * CHANNELS];
        for i in 0..packets.len() {
            // Lose every 10th packet; its copy rides in the next one. Swap 4/5 pairs.
            if i % 10 != 3 {
                let j = if i % 10 == 4 {
                    i + 1
                } else if i % 10 == 5 {
                    i - 1
                } else {
                    i
                };
                let q = &packets[j];
                p.push(now, q.seq, q.pts_us, &q.opus, &q.prev_opus);
            }
            for _ in 0..2 {
                p.pull(now, 5_000, &mut out);
                now += 5_000;
            }
        }
        let s = p.stats;
        // Packet 4 of every ten arrives first as the copy inside packet 5 (recovered), then
        // itself (late); packet 3 is lost with no copy in time (concealed).
        assert!(s.recovered >= 9 && s.late >= 9, "{s:?}");
        assert!(s.concealed <= 10, "{s:?}");
        assert!(s.played + s.concealed >= 95, "{s:?}");
        assert!(s.underruns <= 2, "{s:?}");
        let tap = p.tap.as_ref().unwrap();
        let on = onsets(&tap.samples, 0.05);
        assert!(on.len() >= 4, "onsets {on:?}");
        // Beeps every 200 ms.
        for w in on.windows(2) {
            let d = (w[1] - w[0]) as f64 / RATE as f64;
            assert!((d - 0.2).abs() < 0.003, "beep spacing {d}");
        }
        let beep = &tap.samples[on[1] + 480..on[1] + 480 + 2400];
        let f = zero_crossing_frequency(beep);
        assert!((f - 1000.0).abs() < 15.0, "frequency {f}");
        assert!(p.target_us() >= MIN_TARGET_US && p.target_us() <= MAX_TARGET_US);
    }

    #[test]
    fn packets_play_on_their_schedule_not_a_packet_late() {
        // Packets arrive 10.3 ms after their first sample (10 ms to capture, 0.3 ms to encode
        // and send); the device pulls 5 ms every 5 ms (5 ms device latency). Packets 100..150
        // are lost (a 0.5 s outage).
        let packets = tone_packets(300);
        let mut p = Playout::new().unwrap();
        let base = 5_000_000_000u64;
        let mut out = vec![0i16; 240 * CHANNELS];
        let mut t = base + 1_700;
        let mut restart_target = 0;
        for (k, pk) in packets.iter().enumerate() {
            let arrive = pk.pts_us - 1_000_000_000 + base + 10_300;
            while t <= arrive {
                p.pull(t, 5_000, &mut out);
                t += 5_000;
            }
            if (100..150).contains(&k) {
                continue;
            }
            // The first packet after the outage carries no copy of the one before (lost too).
            let prev: &[u8] = if k == 150 { &[] } else { &pk.prev_opus };
            p.push(arrive, pk.seq, pk.pts_us, &pk.opus, prev);
            if k == 150 {
                restart_target = p.target_us();
            }
        }
        // Mouth-to-ear less the transit, the device and Opus's delay: the time in the buffer.
        let buffered = |pl: &Played| {
            pl.out_us as i64 - (pl.pts_us - 1_000_000_000 + base) as i64 - 10_300 - 5_000 - 2_500
        };
        // Before the outage: the first packet plays the moment a pull after its arrival comes
        // (under one pull period), the rest follow back to back, none waits a whole packet.
        let before: Vec<i64> = p.played[4..100].iter().map(buffered).collect();
        assert!(
            before.iter().all(|&b| (0..5_000).contains(&b)),
            "{before:?}"
        );
        assert!(before.iter().all(|&b| b == before[0]), "{before:?}");
        // The outage empties the buffer once; the restart is on the schedule: the target
        // (one packet, one pull period, 1 ms, the underrun's bump) less the packet, to within
        // a sample.
        assert_eq!(p.stats.underruns, 1, "{:?}", p.stats);
        assert!(
            (16_000..=20_000).contains(&restart_target),
            "{restart_target}"
        );
        let after = p
            .played
            .iter()
            .find(|pl| pl.seq == packets[150].seq)
            .unwrap();
        let want = restart_target as i64 - FRAME_US as i64;
        assert!(
            (buffered(after) - want).abs() <= 21,
            "{} vs {want}",
            buffered(after)
        );
    }

    #[test]
    fn target_grows_with_jitter_and_stays_in_range() {
        let packets = tone_packets(300);
        let mut p = Playout::new().unwrap();
        let base = 3_000_000_000u64;
        let mut out = vec![0i16; 240 * CHANNELS];
        let mut t = base;
        let mut x = 7u32;
        for pk in &packets {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let jitter = (x >> 16) as u64 % 25_000;
            let arrive = pk.pts_us - 1_000_000_000 + base + 10_000 + jitter;
            while t + 5_000 <= arrive {
                p.pull(t, 5_000, &mut out);
                t += 5_000;
            }
            p.push(arrive, pk.seq, pk.pts_us, &pk.opus, &pk.prev_opus);
        }
        assert!(
            p.target_us() >= 20_000,
            "target {} with 25 ms jitter",
            p.target_us()
        );
        assert!(p.target_us() <= MAX_TARGET_US);
    }
}
