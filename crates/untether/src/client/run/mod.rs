//! The run record, owned by the threads that write it: the network driver's [`NetRecord`],
//! the decode thread's [`DecodeRecord`] and the presenter's [`PresentRecord`] (each a small
//! type with its own methods), handed back when each thread ends and merged into the report's
//! [`ClientRun`] by [`assemble`]. What other threads read while the run goes on is published
//! as a snapshot ([`view`]).

mod decode;
mod net;
mod present;
pub(crate) mod view;

use untether_proto::Micros;

use super::record::{AudioRun, ClientRun, FrameRecord, MAX_RECORDS};

pub(crate) use decode::DecodeRecord;
pub use net::SessionSpan;
pub(crate) use net::{InputCounts, NetRecord};
pub(crate) use present::PresentRecord;

/// What the client's own thread knows at the end of the run.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunEnd {
    pub ended_us: Micros,
    /// Pictures replaced in the decoder → presenter slot.
    pub dropped_presenter: u64,
    pub sink_frames: u64,
    pub audio: Option<AudioRun>,
    /// The run decoded (false: `--no-decode`).
    pub decoding: bool,
}

/// The report's record of the run, from each thread's part.
pub(crate) fn assemble(
    net: NetRecord,
    decode: DecodeRecord,
    present: PresentRecord,
    end: RunEnd,
) -> ClientRun {
    let reconnects = net
        .reconnects
        .iter()
        .map(|&(lost, by)| {
            let resumed = by.and_then(|s| present.first_shown.get(&s).copied());
            (lost, resumed.unwrap_or(0))
        })
        .collect();
    ClientRun {
        params: net.params,
        link: net.link.unwrap_or_else(crate::link::LinkReport::udp),
        started_us: net.started_us,
        connected_us: net.connected_us,
        ended_us: end.ended_us,
        records: merge_records(decode.dropped, present.records),
        timings: net.timings,
        stats: net.end.stats,
        clock: net.end.clock,
        clock_mode: net.end.clock_mode,
        decode_errors: decode.decode_errors,
        decoded: decode.decoded,
        held: decode.held,
        held_decode_errors: decode.held_decode_errors,
        decoder: decode.decoder,
        host_encoder: net.host_encoder,
        shown: present.shown,
        dropped_presenter: end.dropped_presenter,
        stamp_unreadable: decode.stamp_unreadable,
        concealed: decode.concealed,
        slice_timings: net.slice_timings,
        inputs_sent: net.inputs_sent,
        state_updates: net.state_updates,
        frames_with_pose: decode.frames_with_pose,
        state_staleness: net.end.state_staleness,
        pose_to_photon: present.pose_to_photon,
        pose_photon_unread: present.pose_photon_unread,
        pose_photon_ambiguous: present.pose_photon_ambiguous,
        pose_photon_unmatched: present.pose_photon_unmatched,
        host_key: net.host_key,
        inputs_refused: net.inputs_refused,
        input_responses: present.input_responses,
        pings: net.pings,
        // The host ending the stream, else the presenter's side (a closed sink).
        outcome: net.outcome.or(present.outcome),
        audio: end.audio,
        sink_frames: end.sink_frames,
        device_events: net.device_events,
        paths: net.paths,
        session: net.session,
        reconnects,
        sessions: net.sessions,
        refusals: net.refusals,
        role: net.role,
        input_granted: net.input_granted,
        times_paused: net.times_paused,
        undecoded: net.undecoded,
        decoding: end.decoding,
        presenter: present.presenter,
        rumble: present.rumble,
    }
}

/// The pictures dropped before the presenter and those it showed, each list in decode order,
/// as one list in decode order (the first [`MAX_RECORDS`]).
fn merge_records(dropped: Vec<FrameRecord>, shown: Vec<FrameRecord>) -> Vec<FrameRecord> {
    let mut out = Vec::with_capacity((dropped.len() + shown.len()).min(MAX_RECORDS));
    let (mut a, mut b) = (dropped.into_iter().peekable(), shown.into_iter().peekable());
    while out.len() < MAX_RECORDS {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.decode_end_us < y.decode_end_us => a.next(),
            (Some(_), Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        };
        match next {
            Some(r) => out.push(r),
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests;
