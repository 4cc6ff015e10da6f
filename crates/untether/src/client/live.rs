//! The live statistics behind the window's overlay, from the client's running statistics
//! without holding up the driver: the network driver publishes a small copy of its session's
//! counters ([`NetSnapshot`], at most every 250 ms, into `ClientShared::live`: a published
//! snapshot), and the presenter thread keeps the frames it showed in the last interval and
//! turns both into an [`OverlayModel`] every 0.5 s ([`LiveOverlay`]). The host's per-frame
//! timings come from the driver on a bounded channel into the presenter's own
//! [`RecentTimings`].

use std::collections::{HashMap, VecDeque};

use untether_media::overlay::OverlayModel;
use untether_proto::stats::percentile;
use untether_proto::{ClientStats, FrameTiming, LatencyReport, Micros, Spread};

use super::record::FrameRecord;
use crate::report::frame_row;
use crate::stats::Stage;

/// How often the driver publishes its counters.
pub(crate) const PUBLISH_EVERY_US: Micros = 250_000;
/// How often the overlay's figures are made again (and its text rasterised, if it changed).
pub(crate) const REFRESH_EVERY_US: Micros = 500_000;
/// The most frames kept between refreshes (0.5 s at 240 fps is 120).
const MAX_FRAMES: usize = 512;

/// The driver's counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NetSnapshot {
    pub at_us: Micros,
    pub stats: ClientStats,
    /// Smoothed RTT, µs.
    pub srtt_us: Option<u64>,
    /// Host clock minus client clock, µs.
    pub clock_offset_us: i64,
    /// Paths configured (1 without multipath).
    pub paths: usize,
}

/// The most host timings the presenter keeps (a few seconds of frames).
const MAX_TIMINGS: usize = 2048;

/// The host's timings of the newest frames, by (session, frame number): the oldest go first.
#[derive(Debug, Default)]
pub(crate) struct RecentTimings {
    by_frame: HashMap<(u32, u32), FrameTiming>,
    order: VecDeque<(u32, u32)>,
}

impl RecentTimings {
    /// Keeps each (session, timing), forgetting the oldest beyond [`MAX_TIMINGS`].
    pub fn extend(&mut self, timings: impl IntoIterator<Item = (u32, FrameTiming)>) {
        for (session, t) in timings {
            let key = (session, t.frame_number);
            if self.by_frame.insert(key, t).is_none() {
                self.order.push_back(key);
            }
            while self.order.len() > MAX_TIMINGS {
                if let Some(old) = self.order.pop_front() {
                    self.by_frame.remove(&old);
                }
            }
        }
    }

    /// The host's timing of frame `frame_number` of session `session`, if it arrived.
    pub fn get(&self, session: u32, frame_number: u32) -> Option<FrameTiming> {
        self.by_frame.get(&(session, frame_number)).copied()
    }
}

/// The overlay's figures as the stream goes.
pub(crate) struct LiveOverlay {
    header: String,
    frames: VecDeque<FrameRecord>,
    prev_net: Option<NetSnapshot>,
    last_refresh_us: Micros,
    pose_to_photon_ms: Option<f64>,
    model: OverlayModel,
    /// The last interval's latency for the host (None: no frame was shown in it).
    latency: Option<LatencyReport>,
}

/// p50/p95 of `sorted` (µs) for the wire; [`Spread::NONE`] without samples.
fn spread(sorted: &[i64]) -> Spread {
    let us = |v: i64| v.clamp(0, u32::MAX as i64 - 1) as u32;
    match (percentile(sorted, 50.0), percentile(sorted, 95.0)) {
        (Some(a), Some(b)) => Spread {
            p50_us: us(a),
            p95_us: us(b),
        },
        _ => Spread::NONE,
    }
}

impl LiveOverlay {
    pub fn new(now: Micros) -> LiveOverlay {
        LiveOverlay {
            header: String::new(),
            frames: VecDeque::new(),
            prev_net: None,
            last_refresh_us: now,
            pose_to_photon_ms: None,
            model: OverlayModel::default(),
            latency: None,
        }
    }

    /// The first line (presenter, picture size, mode).
    pub fn set_header(&mut self, header: String) {
        self.header = header;
    }

    /// Pose-to-photon, ms, for the next refresh (None: "—").
    pub fn set_pose_to_photon(&mut self, ms: Option<f64>) {
        self.pose_to_photon_ms = ms;
    }

    /// A picture was shown (its record complete with `shown_us`).
    pub fn on_shown(&mut self, r: &FrameRecord) {
        if self.frames.len() >= MAX_FRAMES {
            self.frames.pop_front();
        }
        // The record without its thumbnail (every other field is `Copy`): no allocation.
        self.frames.push_back(FrameRecord {
            thumbnail: Vec::new(),
            ..*r
        });
    }

    /// Whether a refresh is due at `now`.
    pub fn due(&self, now: Micros) -> bool {
        now >= self.last_refresh_us + REFRESH_EVERY_US
    }

    /// The frames shown since the last refresh: (session, frame number) each, to look their
    /// host timings up.
    pub fn pending(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.frames.iter().map(|r| (r.session, r.frame_number))
    }

    /// Makes the figures of the interval that ends at `now` from the frames shown in it, their
    /// host `timings` (in [`pending`](Self::pending)'s order; None where none arrived) and the
    /// driver's latest counters.
    pub fn refresh(
        &mut self,
        now: Micros,
        net: Option<NetSnapshot>,
        timings: &[Option<FrameTiming>],
    ) -> &OverlayModel {
        let interval_s = now.saturating_sub(self.last_refresh_us).max(1) as f64 / 1e6;
        let offset = net.map_or(0, |n| n.clock_offset_us);
        let mut g2g = Vec::with_capacity(self.frames.len());
        let mut stages: Vec<Vec<i64>> = vec![Vec::new(); Stage::PIPELINE.len()];
        for (i, r) in self.frames.iter().enumerate() {
            let row = frame_row(r, timings.get(i).and_then(|t| t.as_ref()), offset);
            g2g.push(row.glass_to_glass_us);
            for (stage, us) in row.stages_us {
                if let Some(k) = Stage::PIPELINE.iter().position(|s| *s == stage) {
                    stages[k].push(us);
                }
            }
        }
        let median_ms = |v: &mut Vec<i64>| {
            v.sort_unstable();
            percentile(v, 50.0).map(|us| us.max(0) as f64 / 1000.0)
        };
        let m = &mut self.model;
        m.header = self.header.clone();
        // Before the first picture there is no rate to speak of.
        m.fps = (!g2g.is_empty() || m.fps.is_some()).then(|| g2g.len() as f64 / interval_s);
        m.glass_to_glass_max_ms = g2g.iter().max().map(|&us| us.max(0) as f64 / 1000.0);
        m.glass_to_glass_ms = median_ms(&mut g2g);
        m.stages_ms = Stage::PIPELINE
            .iter()
            .zip(stages.iter_mut())
            .map(|(s, v)| (s.name(), median_ms(v)))
            .collect();
        // Every list is sorted now (median_ms sorted it).
        let stage = |s: Stage| {
            Stage::PIPELINE
                .iter()
                .position(|p| *p == s)
                .map_or(Spread::NONE, |k| spread(&stages[k]))
        };
        self.latency = (!g2g.is_empty()).then(|| LatencyReport {
            frames: g2g.len().min(u16::MAX as usize) as u16,
            interval_ms: (interval_s * 1000.0).round().min(u16::MAX as f64) as u16,
            glass_to_glass: spread(&g2g),
            network: stage(Stage::Network),
            reassemble: stage(Stage::Reassemble),
            decode: stage(Stage::Decode),
            present: stage(Stage::Present),
        });
        if let Some(n) = net {
            m.rtt_ms = n.srtt_us.map(|us| us as f64 / 1000.0);
            if let Some(p) = self.prev_net.filter(|p| n.at_us > p.at_us) {
                let (a, b) = (&p.stats, &n.stats);
                let secs = (n.at_us - p.at_us) as f64 / 1e6;
                m.bitrate_mbps = Some(
                    b.bytes_received.saturating_sub(a.bytes_received) as f64 * 8.0 / secs / 1e6,
                );
                let lost = b.packets_lost.saturating_sub(a.packets_lost);
                let got = b.datagrams_received.saturating_sub(a.datagrams_received);
                m.loss_percent =
                    Some(lost as f64 * 100.0 / (lost + got).max(1) as f64).filter(|_| got > 0);
                m.fec_repaired = Some(
                    b.assembler
                        .shards_recovered
                        .saturating_sub(a.assembler.shards_recovered),
                );
                m.nacks = Some(b.shard_nacks_sent.saturating_sub(a.shard_nacks_sent));
                let live = a
                    .paths
                    .iter()
                    .zip(&b.paths)
                    .take(n.paths)
                    .filter(|(x, y)| y.datagrams_received > x.datagrams_received)
                    .count();
                m.paths = Some((live, n.paths));
            }
            if self.prev_net.is_none_or(|p| n.at_us > p.at_us) {
                self.prev_net = Some(n);
            }
        }
        m.set_pose_to_photon(self.pose_to_photon_ms);
        self.frames.clear();
        self.last_refresh_us = now;
        &self.model
    }

    pub fn model(&self) -> &OverlayModel {
        &self.model
    }

    /// The latency of the frames shown in the last refreshed interval, for the host's
    /// dashboard (sent beside the quality feedback); None when none was shown.
    pub fn latency(&self) -> Option<LatencyReport> {
        self.latency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(n: u32, capture: Micros, shown: Micros) -> FrameRecord {
        FrameRecord {
            frame_number: n,
            capture_us: capture,
            last_shard_us: capture + 5_000,
            decode_start_us: capture + 5_100,
            last_decode_start_us: capture + 5_100,
            decode_end_us: capture + 6_100,
            decode_us: 1_000,
            shown_us: shown,
            thumbnail: vec![7; 144],
            ..Default::default()
        }
    }

    #[test]
    fn figures_come_from_the_last_interval() {
        let mut live = LiveOverlay::new(0);
        live.set_header("gl · 1280x720".into());
        assert!(!live.due(400_000) && live.due(500_000));
        // 30 frames in 0.5 s, each 8 ms glass-to-glass, host timings for the first 10.
        for i in 0..30u32 {
            let c = 1_000 + i as u64 * 16_667;
            live.on_shown(&shown(i, c, c + 8_000));
        }
        let pending: Vec<_> = live.pending().collect();
        assert_eq!(pending.len(), 30);
        let timings: Vec<Option<FrameTiming>> = (0..30)
            .map(|i| {
                (i < 10).then_some(FrameTiming {
                    frame_number: i,
                    encode_us: 4_000,
                    ..Default::default()
                })
            })
            .collect();
        let mut stats = ClientStats::default();
        let net0 = NetSnapshot {
            at_us: 0,
            stats,
            srtt_us: Some(400),
            clock_offset_us: 0,
            paths: 2,
        };
        live.refresh(500_000, Some(net0), &timings);
        // What the host is told: the interval's frames, glass-to-glass and decode p50/p95.
        let r = live.latency().expect("frames were shown");
        assert_eq!((r.frames, r.interval_ms), (30, 500));
        assert_eq!(
            (r.glass_to_glass.p50_us, r.glass_to_glass.p95_us),
            (8_000, 8_000)
        );
        assert_eq!((r.decode.p50_us, r.decode.p95_us), (1_000, 1_000));
        // Then 0.5 s of traffic: 1 MB, 1000 datagrams + 10 lost, 4 shards rebuilt, path 1 idle.
        stats.bytes_received = 1_000_000;
        stats.datagrams_received = 1000;
        stats.packets_lost = 10;
        stats.assembler.shards_recovered = 4;
        stats.paths[0].datagrams_received = 1000;
        for i in 30..60u32 {
            let c = 1_000 + i as u64 * 16_667;
            live.on_shown(&shown(i, c, c + 8_000));
        }
        let m = live
            .refresh(
                1_000_000,
                Some(NetSnapshot {
                    at_us: 500_000,
                    stats,
                    ..net0
                }),
                &[],
            )
            .clone();
        assert_eq!(m.fps, Some(60.0));
        assert_eq!(m.glass_to_glass_ms, Some(8.0));
        assert_eq!(m.bitrate_mbps, Some(16.0));
        let loss = m.loss_percent.unwrap();
        assert!((loss - 0.990).abs() < 0.01, "{loss}");
        assert_eq!(m.fec_repaired, Some(4));
        assert_eq!(m.paths, Some((1, 2)));
        assert_eq!(m.rtt_ms, Some(0.4));
        let stage = |name: &str| m.stages_ms.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(stage("decode"), Some(1.0));
        assert_eq!(stage("reassemble"), Some(0.1));
        // No host timings in this interval: its host stages are not measured.
        assert_eq!(stage("encode"), None);
        assert!(m.lines().join("\n").contains("pose-to-photon —"));
        // An interval without pictures: 0 fps, not the old figure.
        live.set_pose_to_photon(Some(21.0));
        let m = live.refresh(1_500_000, None, &[]);
        assert_eq!(m.fps, Some(0.0));
        assert_eq!(m.glass_to_glass_ms, None);
        assert_eq!(m.pose_to_photon(), Some(21.0));
    }

    #[test]
    fn recent_timings_are_found_by_session_and_frame_and_bounded() {
        let t = |n: u32| FrameTiming {
            frame_number: n,
            encode_us: n,
            ..Default::default()
        };
        let mut r = RecentTimings::default();
        r.extend([(0, t(1)), (1, t(1))]);
        assert_eq!(r.get(1, 1).map(|t| t.frame_number), Some(1));
        assert!(
            r.get(2, 1).is_none(),
            "another session's frame 1 is another frame"
        );
        r.extend((0..MAX_TIMINGS as u32).map(|n| (2, t(n))));
        assert!(
            r.get(0, 1).is_none() && r.get(1, 1).is_none(),
            "the oldest go first"
        );
        assert_eq!(r.get(2, 5).map(|t| t.encode_us), Some(5));
        assert_eq!(r.by_frame.len(), MAX_TIMINGS);
        assert_eq!(r.order.len(), MAX_TIMINGS);
    }

    #[test]
    fn host_timings_give_the_host_stages() {
        let mut live = LiveOverlay::new(0);
        live.on_shown(&shown(0, 1_000, 9_000));
        let t = FrameTiming {
            frame_number: 0,
            encode_us: 4_000,
            convert_us: 500,
            ..Default::default()
        };
        let m = live.refresh(500_000, None, &[Some(t)]);
        let stage = |name: &str| m.stages_ms.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(stage("encode"), Some(4.0));
        assert_eq!(stage("convert"), Some(0.5));
        assert_eq!(m.fps, Some(2.0));
    }
}
