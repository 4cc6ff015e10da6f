//! The report's network section: bytes, loss, RTT, the clock, paths, pacing, reconnects and
//! the link.

use serde::Serialize;

use crate::client::ClientRun;
use crate::host::HostSummary;
use crate::stats::Samples;

#[derive(Clone, Debug, Default, Serialize)]
pub struct RttMs {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct NetworkReport {
    pub bytes_sent: u64,
    pub packets_sent: u64,
    pub bytes_received: u64,
    pub packets_received: u64,
    pub packets_lost: u64,
    /// Lost shards the client rebuilt from FEC parity.
    pub packets_recovered: u64,
    pub malformed: u64,
    pub keyframe_requests_sent: u64,
    pub rtt_ms: RttMs,
    /// Host clock minus client clock, as estimated by ping/pong (≈ 0 on one machine).
    pub clock_offset_ms: Option<f64>,
    pub clock_uncertainty_ms: Option<f64>,
    /// How the offset was known: `shared` (one machine, one clock: exact), `synchronized`
    /// (the user says so) or `estimated` (ping/pong, within the uncertainty).
    pub clock: &'static str,
    /// Bytes received over the time actually connected (`connected_s`), Mbit/s.
    pub goodput_mbps: f64,
    /// The time connected to the host: the run's duration less the time the host was gone
    /// (from each loss to its reconnection, or to the end), seconds.
    pub connected_s: f64,
    /// Per path (one without multipath): what the host sent on it and what the client got.
    pub paths: Vec<PathReport>,
    /// Adaptive bitrate: encoder reconfigurations, and the controller's target at the end
    /// (null: never changed, or the controller is off).
    pub bitrate_changes: u64,
    pub final_bitrate_kbps: Option<u32>,
    /// Retransmission: ShardNacks the client sent, data shards the host resent, frames given
    /// up after their NACKs failed.
    pub shard_nacks_sent: u64,
    pub shards_retransmitted: Option<u64>,
    pub frames_abandoned: u64,
    /// Host (demo only): frames whose datagrams were spread over more than one paced batch
    /// (`network.pacing`); their `send` stage includes the pacing.
    pub paced_frames: Option<u64>,
    /// Host (demo only): the pacing window a frame's datagrams are spread over (0: off).
    pub pacing_window_ms: Option<f64>,
    /// ICMP port-unreachable reports the client got on its main path (a live session survives
    /// forged ones).
    pub refusals: u64,
    /// Each time the host went away and the client reconnected (seconds since the client
    /// started; `resumed_s` null: it never came back).
    pub reconnects: Vec<ReconnectReport>,
    /// The data plane's transport, each side (`network.transport`, raw layer 2).
    pub link: LinkSides,
}

/// The raw layer-2 transport as each side saw it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LinkSides {
    pub client: crate::link::LinkReport,
    /// Null in a client-only report.
    pub host: Option<crate::link::LinkReport>,
}

/// One loss of the host and the client's return to it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReconnectReport {
    pub lost_s: f64,
    pub resumed_s: Option<f64>,
}

/// One session of a run across reconnections: its own duration, frames, glass-to-glass,
/// goodput and the host's counts over the same time (the run's figures are their sum).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SessionReport {
    pub session: u32,
    /// When it connected, seconds after the run's first connection.
    pub start_s: f64,
    /// Connected to its loss (or to the end of the run), seconds.
    pub duration_s: f64,
    pub frames_shown: u64,
    pub glass_to_glass_ms: super::Pcts,
    pub goodput_mbps: f64,
    /// The host's frames over this session, from its FrameTimings (None: none arrived).
    pub host_captured: Option<u64>,
    pub host_encoded: Option<u64>,
    pub host_dropped: Option<u64>,
}

impl SessionReport {
    /// Each session of `run` that connected, in order.
    pub(super) fn measure(run: &ClientRun) -> Vec<SessionReport> {
        let first = run.connected_us.unwrap_or(run.started_us);
        let offset = run.clock.map_or(0, |c| c.offset_us);
        let secs = |us: u64| (us as f64 / 1e3).round() / 1e3;
        run.sessions
            .iter()
            .map(|span| {
                let end = span.lost_us.unwrap_or(run.ended_us);
                let duration_us = end.saturating_sub(span.connected_us);
                let mut g2g = Samples::default();
                let mut shown = 0;
                for r in run
                    .records
                    .iter()
                    .filter(|r| r.session == span.session && r.shown_us != 0)
                {
                    shown += 1;
                    let row = super::frame_row(r, None, offset);
                    g2g.push(row.glass_to_glass_us as f64 / 1000.0);
                }
                let host = span.host_counts();
                SessionReport {
                    session: span.session,
                    start_s: secs(span.connected_us.saturating_sub(first)),
                    duration_s: secs(duration_us),
                    frames_shown: shown,
                    glass_to_glass_ms: super::Pcts::from(&g2g),
                    goodput_mbps: if duration_us > 0 {
                        span.bytes_received as f64 * 8.0 / duration_us as f64
                    } else {
                        0.0
                    },
                    host_captured: host.map(|h| h.0),
                    host_encoded: host.map(|h| h.1),
                    host_dropped: host.map(|h| h.2),
                }
            })
            .collect()
    }
}

/// One path of the session.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathReport {
    /// The host address the client sent to.
    pub host_addr: String,
    /// The client address the host sent to (as the host saw it).
    pub client_addr: Option<String>,
    pub datagrams_sent: Option<u64>,
    pub datagrams_received: u64,
    /// Datagrams whose first copy came on this path.
    pub first_copies: u64,
    /// Copies another path had already delivered (dropped).
    pub duplicates: u64,
    pub srtt_ms: Option<f64>,
    pub alive: Option<bool>,
    /// Times the host declared the path dead.
    pub deaths: Option<u64>,
}

impl NetworkReport {
    /// The network as `run` (and the host, with its summary) saw it over `duration_s`.
    pub(super) fn measure(
        run: &ClientRun,
        host: Option<&HostSummary>,
        duration_s: f64,
    ) -> NetworkReport {
        let s = &run.stats;
        let connected_s = connected_s(run, duration_s);
        let mut rtt = Samples::default();
        for &r in &run.pings {
            rtt.push_us(r as i64);
        }
        let rtt_sum = rtt.summary();
        NetworkReport {
            bytes_sent: host.map_or(0, |h| h.bytes_sent),
            packets_sent: host.map_or(0, |h| h.packets_sent),
            bytes_received: s.bytes_received,
            packets_received: s.datagrams_received,
            packets_lost: s.packets_lost,
            packets_recovered: s.assembler.shards_recovered,
            malformed: s.malformed_datagrams + host.map_or(0, |h| h.malformed_datagrams),
            keyframe_requests_sent: s.keyframe_requests_sent,
            rtt_ms: RttMs {
                p50: rtt_sum.map(|x| x.p50),
                p99: rtt_sum.map(|x| x.p99),
                min: run.clock.map(|c| c.rtt_us as f64 / 1000.0),
            },
            clock_offset_ms: run.clock.map(|c| c.offset_us as f64 / 1000.0),
            clock_uncertainty_ms: run.clock.map(|c| c.uncertainty_us as f64 / 1000.0),
            clock: run.clock_mode.name(),
            goodput_mbps: if connected_s > 0.0 {
                s.bytes_received as f64 * 8.0 / connected_s / 1e6
            } else {
                0.0
            },
            connected_s: (connected_s * 1000.0).round() / 1000.0,
            paths: path_reports(run, host),
            bitrate_changes: host.map_or(0, |h| h.bitrate_changes),
            final_bitrate_kbps: host.and_then(|h| h.final_bitrate_kbps),
            shard_nacks_sent: s.shard_nacks_sent,
            shards_retransmitted: host.map(|h| h.shards_retransmitted),
            frames_abandoned: s.frames_abandoned,
            paced_frames: host.map(|h| h.paced_frames),
            pacing_window_ms: host.map(|h| h.pacing_window_us as f64 / 1000.0),
            refusals: run.refusals,
            link: LinkSides {
                client: run.link.clone(),
                host: host.map(|h| h.link.clone()),
            },
            reconnects: run
                .reconnects
                .iter()
                .map(|&(lost, resumed)| {
                    let since_start = |t: u64| t.saturating_sub(run.started_us) as f64 / 1e6;
                    ReconnectReport {
                        lost_s: since_start(lost),
                        resumed_s: (resumed != 0).then(|| since_start(resumed)),
                    }
                })
                .collect(),
        }
    }
}

/// The run's `duration_s` (from its first connection to its end) less the time the host was
/// gone: each loss to its reconnection, or to the end of the run.
fn connected_s(run: &ClientRun, duration_s: f64) -> f64 {
    let gone_us: u64 = run
        .reconnects
        .iter()
        .map(|&(lost, resumed)| {
            let back = if resumed == 0 { run.ended_us } else { resumed };
            back.saturating_sub(lost)
        })
        .sum();
    (duration_s - gone_us as f64 / 1e6).max(0.0)
}

/// Pairs the client's paths (by index) with the host's (path i of the host is the i-th client
/// address it learnt, which is the client's path i when the paths came up in order).
fn path_reports(run: &ClientRun, host: Option<&HostSummary>) -> Vec<PathReport> {
    let n = run.paths.len().max(1);
    (0..n.min(untether_proto::MAX_PATHS))
        .map(|i| {
            let c = run.stats.paths[i];
            let h = host.and_then(|h| h.paths.get(i));
            PathReport {
                host_addr: run.paths.get(i).map(|a| a.to_string()).unwrap_or_default(),
                client_addr: h.map(|h| h.addr.to_string()),
                datagrams_sent: h.map(|h| h.datagrams_sent),
                datagrams_received: c.datagrams_received,
                first_copies: c.first_copies,
                duplicates: c.duplicates,
                srtt_ms: h.and_then(|h| h.srtt_us).map(|us| us as f64 / 1000.0),
                alive: h.map(|h| h.alive),
                deaths: h.map(|h| h.deaths),
            }
        })
        .collect()
}
