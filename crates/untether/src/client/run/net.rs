//! The network driver's part of the run record ([`NetRecord`]): what it alone writes (the
//! session's parameters, timings, pings, reconnections, role, input counts…), owned by the
//! driver thread and handed back when it ends.

use std::collections::HashMap;
use std::net::SocketAddr;

use untether_proto::{
    ClientRole, ClientSession, ClientStats, ClockEstimate, FrameTiming, Micros, PublicKey,
    SessionParams, Staleness,
};

use crate::client::record::{ClockMode, MAX_RECORDS};

/// Where input events of one batch went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InputCounts {
    /// Sent on the reliable channel.
    pub sent: u64,
    /// Refused by the session (too many unacknowledged).
    pub refused: u64,
    /// Set on the latest-wins state channel.
    pub state: u64,
}

/// What the session said at its end (the last session's).
#[derive(Clone, Debug, Default)]
pub(super) struct SessionEnd {
    pub stats: ClientStats,
    pub state_staleness: Option<Staleness>,
    pub clock: Option<ClockEstimate>,
    pub clock_mode: ClockMode,
}

/// One session of a run (the first, or one after the host came back): when it connected and
/// ended, the bytes it received and the host's counters over it (from its FrameTimings), so
/// that a report across reconnections counts each side over the same time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSpan {
    pub session: u32,
    pub connected_us: Micros,
    /// When the host was lost (None: it lasted to the end of the run).
    pub lost_us: Option<Micros>,
    pub bytes_received: u64,
    /// The host's (captured, encoded, dropped) counters at this session's first and last
    /// FrameTiming (they count from the host's start).
    pub host_first: Option<(u32, u32, u32)>,
    pub host_last: Option<(u32, u32, u32)>,
    /// FrameTimings received in this session: frames the host said it sent to this client.
    pub frames_timed: u64,
    /// Its counters are in (the session ended, or the run did).
    pub(crate) closed: bool,
}

impl SessionSpan {
    /// The host's (captured, encoded, dropped) frames over this session.
    pub fn host_counts(&self) -> Option<(u64, u64, u64)> {
        let (a, b) = (self.host_first?, self.host_last?);
        let d = |x: u32, y: u32| u64::from(y.saturating_sub(x));
        // The first timing's frame was captured and encoded within the session too.
        Some((d(a.0, b.0) + 1, d(a.1, b.1) + 1, d(a.2, b.2)))
    }
}

/// What the network driver measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct NetRecord {
    pub(super) started_us: Micros,
    pub(super) paths: Vec<SocketAddr>,
    pub(super) params: Option<SessionParams>,
    pub(super) connected_us: Option<Micros>,
    pub(super) host_key: Option<PublicKey>,
    /// The encoder the host of the last session said makes the stream.
    pub(crate) host_encoder: Option<untether_proto::HostEncoder>,
    pub(super) session: u32,
    pub(super) timings: HashMap<u32, FrameTiming>,
    pub(super) slice_timings: HashMap<u32, (u8, u32, u32)>,
    pub(super) pings: Vec<u64>,
    /// Each time the host went away: when, and the session that resumed the stream (None:
    /// never).
    pub(super) reconnects: Vec<(Micros, Option<u32>)>,
    /// Each session that connected, in order (the first [`MAX_RECORDS`]).
    pub(super) sessions: Vec<SessionSpan>,
    pub(super) refusals: u64,
    pub(super) outcome: Option<String>,
    pub(super) role: Option<ClientRole>,
    pub(super) input_granted: bool,
    pub(super) times_paused: u32,
    pub(super) inputs_sent: u64,
    pub(super) inputs_refused: u64,
    pub(super) state_updates: u64,
    pub(super) device_events: u64,
    pub(super) undecoded: u64,
    pub(super) end: SessionEnd,
    /// The counters of the sessions before the current one (summed with its own at the end).
    pub(super) earlier: ClientStats,
    pub(super) link: Option<crate::link::LinkReport>,
}

impl NetRecord {
    /// A run started at `started_us` on these host addresses (path 0 first).
    pub fn new(started_us: Micros, paths: Vec<SocketAddr>) -> NetRecord {
        NetRecord {
            started_us,
            paths,
            ..Default::default()
        }
    }

    pub fn started_us(&self) -> Micros {
        self.started_us
    }

    /// A session started (the first, or one after the host came back).
    pub fn connected(&mut self, now: Micros, params: SessionParams, host_key: Option<PublicKey>) {
        self.params = Some(params);
        // The run's first connection: the report's duration counts from there, across
        // reconnections (the time without a host is taken out where it matters).
        self.connected_us.get_or_insert(now);
        self.host_key = host_key;
        if self.sessions.len() < MAX_RECORDS {
            self.sessions.push(SessionSpan {
                session: self.session,
                connected_us: now,
                ..Default::default()
            });
        }
    }

    /// Session `session` resumed the stream after the host went away: its timings start over.
    pub fn reconnected(&mut self, session: u32) {
        self.session = session;
        self.timings.clear();
        if let Some(last) = self.reconnects.last_mut() {
            last.1 = Some(session);
        }
    }

    /// The host went away at `now`.
    pub fn lost(&mut self, now: Micros) {
        // Bounded like the frame records: a host that flaps for days keeps the first ones.
        if self.reconnects.len() < MAX_RECORDS {
            self.reconnects.push((now, None));
        }
        if let Some(s) = self.open_session() {
            s.lost_us = Some(now);
        }
    }

    /// The session under way (connected, its counters not in yet).
    fn open_session(&mut self) -> Option<&mut SessionSpan> {
        self.sessions.last_mut().filter(|s| !s.closed)
    }

    pub fn frame_timing(&mut self, t: FrameTiming) {
        if self.timings.len() < MAX_RECORDS {
            self.timings.insert(t.frame_number, t);
        }
        if let Some(s) = self.open_session() {
            let c = (t.captured, t.encoded, t.dropped);
            s.host_first.get_or_insert(c);
            s.host_last = Some(c);
            s.frames_timed += 1;
        }
    }

    pub fn slice_timing(&mut self, frame_number: u32, count: u8, first_us: u32, last_us: u32) {
        if self.slice_timings.len() < MAX_RECORDS {
            self.slice_timings
                .insert(frame_number, (count, first_us, last_us));
        }
    }

    pub fn rtt(&mut self, us: u64) {
        if self.pings.len() < MAX_RECORDS {
            self.pings.push(us);
        }
    }

    /// An ICMP port-unreachable on the main path.
    pub fn refused(&mut self) {
        self.refusals += 1;
    }

    /// Why the run ended, when the host ended it.
    pub fn ended(&mut self, outcome: &str) {
        self.outcome = Some(outcome.to_string());
    }

    pub fn role(&mut self, role: ClientRole, input_granted: bool, paused: bool) {
        self.role = Some(role);
        self.input_granted = input_granted;
        self.times_paused += paused as u32;
    }

    /// A batch of input (`device`: from a registered input device).
    pub fn inputs(&mut self, counts: InputCounts, device: bool) {
        self.inputs_sent += counts.sent;
        self.inputs_refused += counts.refused;
        self.state_updates += counts.state;
        if device {
            self.device_events += counts.sent;
        }
    }

    /// One key set on the state channel.
    pub fn state_update(&mut self) {
        self.state_updates += 1;
    }

    /// `--no-decode`: a complete frame dropped undecoded.
    pub fn undecoded(&mut self) {
        self.undecoded += 1;
    }

    /// A session ended and another starts (the host went away, or it was waiting for
    /// approval): its counters count towards the run's.
    pub fn session_ended(&mut self, session: &ClientSession) {
        self.earlier.absorb(&session.stats());
        let bytes = session.stats().bytes_received;
        if let Some(s) = self.open_session() {
            s.bytes_received = bytes;
            s.closed = true;
        }
    }

    /// The last session's figures at the end (`synchronized`: the user says the clocks agree).
    pub fn close(&mut self, session: &ClientSession, now: Micros, synchronized: bool) {
        let mut clock = session.clock();
        let clock_mode = if session.shares_clock() {
            ClockMode::Shared
        } else if synchronized {
            clock = Some(ClockEstimate {
                offset_us: 0,
                uncertainty_us: 0,
                ..clock.unwrap_or_default()
            });
            ClockMode::Synchronized
        } else {
            ClockMode::Estimated
        };
        // The host may name its encoder again once it opened (`--encoder auto`).
        if let Some(e) = session.host_encoder() {
            self.host_encoder = Some(e.clone());
        }
        let mut stats = session.stats();
        if let Some(s) = self.open_session() {
            s.bytes_received = stats.bytes_received;
            s.closed = true;
        }
        stats.absorb(&self.earlier);
        self.end = SessionEnd {
            stats,
            state_staleness: Some(session.state_staleness(now)),
            clock,
            clock_mode,
        };
    }

    /// The transport the data plane ran on.
    pub fn set_link(&mut self, link: crate::link::LinkReport) {
        self.link = Some(link);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconnection_is_resumed_by_the_session_that_came_back() {
        let mut r = NetRecord::new(5, vec![]);
        r.frame_timing(FrameTiming {
            frame_number: 3,
            ..Default::default()
        });
        r.lost(100);
        r.lost(200);
        r.reconnected(4);
        assert_eq!(r.reconnects, vec![(100, None), (200, Some(4))]);
        assert_eq!(r.session, 4);
        assert!(r.timings.is_empty(), "the new session's timings start over");
        assert_eq!(r.started_us(), 5);
    }

    #[test]
    fn synchronized_clocks_are_taken_as_offset_zero() {
        let session = ClientSession::new(untether_proto::ClientConfig::new("t"), 0);
        let mut r = NetRecord::default();
        r.close(&session, 10, false);
        assert_eq!(r.end.clock_mode, ClockMode::Estimated);
        assert!(r.end.state_staleness.is_some());
        r.close(&session, 10, true);
        assert_eq!(r.end.clock_mode, ClockMode::Synchronized);
        let c = r.end.clock.unwrap_or_default();
        assert_eq!(
            (r.end.clock.is_some(), c.offset_us, c.uncertainty_us),
            (true, 0, 0)
        );
    }

    #[test]
    fn inputs_are_counted_by_channel_and_device_events_apart() {
        let mut r = NetRecord::default();
        let c = InputCounts {
            sent: 3,
            refused: 1,
            state: 2,
        };
        r.inputs(c, false);
        r.inputs(c, true);
        r.state_update();
        assert_eq!(
            (
                r.inputs_sent,
                r.inputs_refused,
                r.state_updates,
                r.device_events
            ),
            (6, 2, 5, 3)
        );
    }

    #[test]
    fn roles_count_pauses_and_lists_are_bounded() {
        let mut r = NetRecord::default();
        r.role(ClientRole::Viewer, true, true);
        r.role(ClientRole::Viewer, false, true);
        r.role(ClientRole::Controller, false, false);
        assert_eq!(
            (r.role, r.input_granted, r.times_paused),
            (Some(ClientRole::Controller), false, 2)
        );
        for i in 0..MAX_RECORDS as u64 + 3 {
            r.rtt(i);
            r.lost(i);
        }
        assert_eq!(
            (r.pings.len(), r.reconnects.len()),
            (MAX_RECORDS, MAX_RECORDS)
        );
        r.slice_timing(7, 4, 10, 20);
        assert_eq!(r.slice_timings.get(&7), Some(&(4, 10, 20)));
        r.refused();
        r.undecoded();
        r.ended("the host shut down");
        assert_eq!((r.refusals, r.undecoded), (1, 1));
        assert_eq!(r.outcome.as_deref(), Some("the host shut down"));
    }
}
