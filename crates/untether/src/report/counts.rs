//! The report's frame counts, state channels, input and audio sections, each built from what
//! the client (and, in one process, the host) measured.

use serde::Serialize;

use super::Pcts;
use crate::client::ClientRun;
use crate::host::HostSummary;
use crate::stats::Samples;

#[derive(Clone, Debug, Default, Serialize)]
pub struct FrameCounts {
    pub captured: u64,
    pub encoded: u64,
    pub sent: u64,
    pub complete: u64,
    pub decoded: u64,
    pub shown: u64,
    pub late: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub dropped_host: u64,
    pub dropped_client: u64,
    pub keyframes: u64,
    pub stamp_unreadable: u64,
    /// Shown frames of the last session whose pixel stamp was read, and the first and last
    /// frame numbers those stamps carry: `stamped_shown / (stamp_last − stamp_first + 1)` is
    /// the share of the frames the host numbered in that span that were shown (for
    /// `untether run`: of the application's presents due on the stream's grid).
    pub stamped_shown: u64,
    pub stamp_first: Option<u32>,
    pub stamp_last: Option<u32>,
    /// Frames decoded but not shown: an intra-refresh sweep after a join or a loss was still
    /// under way (the picture was not yet clean).
    pub held: u64,
    /// Host (demo only): intra-refresh sweeps started, and keyframes the host asked the encoder
    /// for (a joining client, a keyframe request, the application).
    pub refresh_sweeps: Option<u64>,
    pub forced_keyframes: Option<u64>,
    /// Host (demo only): the largest keyframe and the largest other frame encoded, bytes.
    pub largest_keyframe_bytes: Option<u64>,
    pub largest_frame_bytes: Option<u64>,
    /// Frames sent in slices that were decoded with a lost slice's region concealed.
    pub concealed: u64,
    /// Slices given up (their frame still shown, the region concealed).
    pub slices_lost: u64,
    /// The longest time between two shown frames (a freeze), and how many such gaps exceeded
    /// 100 ms.
    pub longest_freeze_ms: f64,
    pub freezes_over_100ms: u64,
}

impl FrameCounts {
    /// The frames of `run`; the host's counts from its summary when it ran in this process,
    /// else from its last frame timing.
    pub(super) fn measure(run: &ClientRun, host: Option<&HostSummary>) -> FrameCounts {
        let last_timing = run.timings.values().max_by_key(|t| t.frame_number);
        let s = &run.stats;
        let shown_at: Vec<u64> = run
            .records
            .iter()
            .filter(|r| r.shown_us != 0)
            .map(|r| r.shown_us)
            .collect();
        let gaps = || shown_at.windows(2).map(|w| w[1].saturating_sub(w[0]));
        let last_session = run.records.iter().map(|r| r.session).max();
        let stamped: Vec<u32> = run
            .records
            .iter()
            .filter(|r| r.shown_us != 0 && Some(r.session) == last_session)
            .filter_map(|r| r.stamp.map(|st| st.frame_number))
            .collect();
        // Without the host's own summary: its counts over this client's sessions (each
        // session's first to last FrameTiming), else its last FrameTiming's.
        let spans: Vec<(u64, u64, u64)> = run
            .sessions
            .iter()
            .filter_map(|s| s.host_counts())
            .collect();
        let over_sessions = |i: usize, last: Option<u64>| -> u64 {
            if spans.is_empty() {
                return last.unwrap_or(0);
            }
            spans.iter().map(|c| [c.0, c.1, c.2][i]).sum()
        };
        FrameCounts {
            stamped_shown: stamped.len() as u64,
            stamp_first: stamped.iter().copied().min(),
            stamp_last: stamped.iter().copied().max(),
            longest_freeze_ms: gaps().max().unwrap_or(0) as f64 / 1000.0,
            freezes_over_100ms: gaps().filter(|&g| g > 100_000).count() as u64,
            captured: host.map_or_else(
                || over_sessions(0, last_timing.map(|t| t.captured as u64)),
                |h| h.captured,
            ),
            encoded: host.map_or_else(
                || over_sessions(1, last_timing.map(|t| t.encoded as u64)),
                |h| h.encoded,
            ),
            // Without the host's summary: the frames it said it sent (their FrameTimings, over
            // the sessions), and never fewer than arrived whole (a frame's timing follows it and
            // the run can end between the two).
            sent: host.map_or_else(
                || {
                    let timed: u64 = run.sessions.iter().map(|s| s.frames_timed).sum();
                    let timed = if run.sessions.is_empty() {
                        run.timings.len() as u64
                    } else {
                        timed
                    };
                    timed.max(s.frames_complete)
                },
                |h| h.sent,
            ),
            complete: s.frames_complete,
            decoded: run.decoded,
            shown: run.shown,
            late: s.frames_late,
            lost: s.frames_lost,
            corrupted: run.decode_errors,
            dropped_host: host.map_or_else(
                || over_sessions(2, last_timing.map(|t| t.dropped as u64)),
                |h| h.dropped,
            ),
            dropped_client: run.dropped_presenter,
            keyframes: run.records.iter().filter(|r| r.keyframe).count() as u64,
            stamp_unreadable: run.stamp_unreadable,
            held: run.held,
            refresh_sweeps: host.map(|h| h.refresh_sweeps),
            forced_keyframes: host.map(|h| h.forced_keyframes),
            largest_keyframe_bytes: host.map(|h| h.largest_keyframe_bytes),
            largest_frame_bytes: host.map(|h| h.largest_frame_bytes),
            concealed: run.concealed,
            slices_lost: s.assembler.slices_lost,
        }
    }
}

/// The latest-wins state channels: staleness per key (each key's worst, over keys) and the
/// head pose bookkeeping.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StateReport {
    /// Client → host (pointer, head pose, axes).
    pub keys: usize,
    pub staleness_ms: StalenessMs,
    /// Host → client (what the host published); null without the host's summary.
    pub host_keys: Option<usize>,
    pub host_staleness_ms: Option<StalenessMs>,
    pub updates_sent: u64,
    /// Decoded frames whose FramePose was known.
    pub frames_with_pose: u64,
    /// Presents whose pose-to-photon could not be measured: no marker read, a yaw the head had
    /// twice in the search window, or one it never had.
    pub pose_photon_unread: u64,
    pub pose_photon_ambiguous: u64,
    pub pose_photon_unmatched: u64,
}

/// Staleness over keys, ms.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StalenessMs {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// At delivery, over every delivery.
    pub mean: f64,
}

impl From<untether_proto::Staleness> for StalenessMs {
    fn from(s: untether_proto::Staleness) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        StalenessMs {
            p50: ms(s.p50_us),
            p99: ms(s.p99_us),
            max: ms(s.max_us),
            mean: ms(s.mean_us),
        }
    }
}

impl StateReport {
    /// The state channels of `run` (and the host's side, with its summary).
    pub(super) fn measure(run: &ClientRun, host: Option<&HostSummary>) -> StateReport {
        StateReport {
            keys: run.state_staleness.map_or(0, |s| s.keys),
            staleness_ms: run.state_staleness.map(Into::into).unwrap_or_default(),
            host_keys: host.and_then(|h| h.state_staleness).map(|s| s.keys),
            host_staleness_ms: host.and_then(|h| h.state_staleness).map(Into::into),
            updates_sent: run.state_updates,
            frames_with_pose: run.frames_with_pose,
            pose_photon_unread: run.pose_photon_unread,
            pose_photon_ambiguous: run.pose_photon_ambiguous,
            pose_photon_unmatched: run.pose_photon_unmatched,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct InputReport {
    pub events_sent: u64,
    pub events_applied: Option<u64>,
    /// Input event sent by the client → first decoded frame whose pixel stamp shows the
    /// scene had applied it.
    pub response_ms: Pcts,
    /// The host's rumble on this client's game controllers.
    pub rumble: RumbleReport,
}

/// What became of the host's rumble (`HAPTICS + n`) on the client's game controllers.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RumbleReport {
    /// Changes of the host's value, every controller.
    pub changes: u64,
    /// Commands a controller took (starts, changes, stops; not renewals).
    pub applied: u64,
    /// Renewals of a running rumble.
    pub renewed: u64,
    /// Refused by SDL: a controller without rumble motors.
    pub unsupported: u64,
    /// For a controller number with no controller open.
    pub ignored: u64,
}

impl From<untether_media::gamepad::RumbleCounts> for RumbleReport {
    fn from(c: untether_media::gamepad::RumbleCounts) -> Self {
        RumbleReport {
            changes: c.changes,
            applied: c.applied,
            renewed: c.renewed,
            unsupported: c.unsupported,
            ignored: c.ignored,
        }
    }
}

/// Audio playback on the client.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AudioReport {
    pub driver: String,
    pub device_buffer_ms: f64,
    pub packets_received: u64,
    pub packets_played: u64,
    pub late: u64,
    /// Lost packets recovered from the redundant copy in the next packet.
    pub recovered: u64,
    /// Lost packets concealed by the decoder.
    pub concealed: u64,
    pub underruns: u64,
    /// Packets dropped to bring the buffer back to its target.
    pub dropped: u64,
    /// Audio skipped in quiet blocks to bring a late playout back to its schedule.
    pub trimmed_ms: f64,
    /// The jitter buffer's playout target: where it ended, and its range over the run.
    pub target_ms: f64,
    pub target_min_ms: Option<f64>,
    pub target_max_ms: Option<f64>,
    /// A packet's first sample: captured on the host → leaves the client's audio device.
    pub mouth_to_ear_ms: Pcts,
    /// Audio latency minus video glass-to-glass (medians): > 0 means sound comes late.
    pub av_offset_ms: Option<f64>,
}

impl InputReport {
    /// The input `run` sent and what became of it.
    pub(super) fn measure(run: &ClientRun, host: Option<&HostSummary>) -> InputReport {
        let mut response = Samples::default();
        for &(_, sent, seen) in &run.input_responses {
            response.push_us(seen as i64 - sent as i64);
        }
        InputReport {
            events_sent: run.inputs_sent,
            // Without the host's summary: the scene's pixel stamps count the events it applied.
            events_applied: host.map(|h| h.inputs_applied).or_else(|| {
                run.records
                    .iter()
                    .filter(|r| r.session == run.session)
                    .filter_map(|r| r.stamp.map(|s| u64::from(s.input_seq)))
                    .max()
                    // All zero: a source that does not stamp input (unknown, not "none").
                    .filter(|&n| n > 0 || run.inputs_sent == 0)
            }),
            response_ms: (&response).into(),
            rumble: run.rumble.into(),
        }
    }
}

impl AudioReport {
    /// The audio `run` played (None: it played none); `video_p50_ms` is the video's median
    /// glass-to-glass, for the A/V offset.
    pub(super) fn measure(run: &ClientRun, video_p50_ms: Option<f64>) -> Option<AudioReport> {
        let offset = run.clock.map_or(0, |c| c.offset_us);
        let to_client = |host_us: u64| host_us as i64 - offset;
        run.audio.as_ref().map(|a| {
            let mut m2e = Samples::default();
            for p in &a.played {
                m2e.push_us(p.out_us as i64 - to_client(p.pts_us));
            }
            let m2e = Pcts::from(&m2e);
            let ms = |us: u64| us as f64 / 1000.0;
            AudioReport {
                driver: a.driver.clone(),
                device_buffer_ms: a.buffer_samples as f64 / 48.0,
                packets_received: a.stats.received,
                packets_played: a.stats.played,
                late: a.stats.late,
                recovered: a.stats.recovered,
                concealed: a.stats.concealed,
                underruns: a.stats.underruns,
                dropped: a.stats.dropped,
                trimmed_ms: ms(a.stats.trimmed_us),
                target_ms: ms(a.final_target_us),
                target_min_ms: a.targets.iter().min().map(|&t| ms(t)),
                target_max_ms: a.targets.iter().max().map(|&t| ms(t)),
                av_offset_ms: match (m2e.p50, video_p50_ms) {
                    (Some(a), Some(v)) => Some(((a - v) * 1000.0).round() / 1000.0),
                    _ => None,
                },
                mouth_to_ear_ms: m2e,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::SessionSpan;

    /// A frame's FrameTiming follows its last datagram: a run that ends between the two has one
    /// frame more received than timed, and the report said "119 decoded / 118 sent".
    #[test]
    fn sent_counts_every_session_and_never_falls_below_what_arrived() {
        let span = |frames_timed| SessionSpan {
            frames_timed,
            ..Default::default()
        };
        let mut run = ClientRun {
            sessions: vec![span(40), span(78)],
            ..Default::default()
        };
        run.stats.frames_complete = 119;
        assert_eq!(FrameCounts::measure(&run, None).sent, 119);
        run.stats.frames_complete = 100;
        assert_eq!(
            FrameCounts::measure(&run, None).sent,
            118,
            "both sessions' timings"
        );
    }
}
