//! The merge keeps every field of every part.

use std::collections::HashMap;

use untether_proto::{
    ClientRole, ClientStats, ClockEstimate, FrameTiming, Micros, SessionParams, Staleness,
};

use super::net::SessionEnd;
use super::*;
use crate::client::record::ClockMode;

fn rec(n: u32, decode_end_us: Micros, shown_us: Micros) -> FrameRecord {
    FrameRecord {
        frame_number: n,
        decode_end_us,
        shown_us,
        ..Default::default()
    }
}

fn params() -> SessionParams {
    SessionParams {
        width: 1280,
        height: 720,
        fps: 90,
        codec: untether_proto::Codec::H264,
        bitrate_kbps: 20_000,
        max_datagram: 1200,
        keepalive_ms: 100,
        idle_timeout_ms: 3000,
        refresh_period: 0,
    }
}

#[test]
fn the_merge_keeps_every_field() {
    let link = crate::link::LinkReport {
        configured: crate::config::Transport::Raw,
        ..crate::link::LinkReport::udp()
    };
    let stats = ClientStats {
        bytes_received: 77,
        ..Default::default()
    };
    let clock = ClockEstimate {
        offset_us: -5,
        uncertainty_us: 3,
        ..Default::default()
    };
    let staleness = Staleness::default();
    let timing = FrameTiming {
        frame_number: 4,
        encode_us: 9,
        ..Default::default()
    };
    let key: untether_proto::PublicKey = [7; 32];
    let addr: std::net::SocketAddr = "10.0.0.1:9000".parse().unwrap();
    let net = NetRecord {
        started_us: 1,
        paths: vec![addr],
        params: Some(params()),
        connected_us: Some(2),
        host_key: Some(key),
        host_encoder: Some(untether_proto::HostEncoder {
            encoder: "libx264".into(),
            ..Default::default()
        }),
        session: 3,
        timings: HashMap::from([(4, timing)]),
        slice_timings: HashMap::from([(5, (4, 10, 20))]),
        pings: vec![6],
        reconnects: vec![(7, Some(3)), (8, None)],
        sessions: vec![SessionSpan {
            session: 3,
            connected_us: 2,
            ..Default::default()
        }],
        refusals: 9,
        outcome: None,
        role: Some(ClientRole::Viewer),
        input_granted: true,
        times_paused: 10,
        inputs_sent: 11,
        inputs_refused: 12,
        state_updates: 13,
        device_events: 14,
        undecoded: 15,
        end: SessionEnd {
            stats,
            state_staleness: Some(staleness),
            clock: Some(clock),
            clock_mode: ClockMode::Synchronized,
        },
        earlier: Default::default(),
        link: Some(link.clone()),
    };
    let mut decode = DecodeRecord::default();
    decode.opened("h264 (software)");
    decode.decoded(&FrameRecord::default());
    decode.held(true);
    decode.held(false);
    decode.error();
    decode.error();
    decode.error();
    decode.decoded(&FrameRecord {
        slices_lost: 1,
        pose: Some(Default::default()),
        stamp: Some(Default::default()),
        ..Default::default()
    });
    decode.dropped(rec(2, 20, 0));
    let mut present = PresentRecord::default();
    present.presenter("gl-window".into());
    present.ended("sink closed".into());
    present.input_sent(1, 50);
    present.shown(rec(1, 10, 11));
    present.shown(FrameRecord {
        session: 3,
        stamp: Some(untether_media::stamp::Stamp {
            input_seq: 2,
            ..Default::default()
        }),
        ..rec(3, 30, 31)
    });
    present.pose_to_photon(40, true, Some(21), 2, 3);
    present.pose_to_photon(41, false, None, 2, 3);
    let rumbled = untether_media::gamepad::RumbleCounts {
        applied: 18,
        ignored: 19,
        ..Default::default()
    };
    present.rumble(rumbled);
    let audio = AudioRun {
        driver: "alsa".into(),
        ..Default::default()
    };
    let end = RunEnd {
        ended_us: 100,
        dropped_presenter: 16,
        sink_frames: 17,
        audio: Some(audio),
        decoding: true,
    };
    let ClientRun {
        params: p,
        link: l,
        started_us,
        connected_us,
        ended_us,
        records,
        timings,
        stats: st,
        clock: c,
        clock_mode,
        decode_errors,
        decoded,
        held,
        held_decode_errors,
        decoder,
        host_encoder,
        shown,
        dropped_presenter,
        stamp_unreadable,
        concealed,
        slice_timings,
        inputs_sent,
        state_updates,
        frames_with_pose,
        state_staleness,
        pose_to_photon,
        pose_photon_unread,
        pose_photon_ambiguous,
        pose_photon_unmatched,
        host_key,
        inputs_refused,
        input_responses,
        pings,
        outcome,
        audio,
        sink_frames,
        device_events,
        paths,
        session,
        reconnects,
        sessions,
        refusals,
        role,
        input_granted,
        times_paused,
        undecoded,
        decoding,
        presenter,
        rumble,
    } = assemble(net, decode, present, end);
    assert_eq!(p, Some(params()));
    assert_eq!(l, link);
    assert_eq!((started_us, connected_us, ended_us), (1, Some(2), 100));
    let order: Vec<(u32, Micros)> = records
        .iter()
        .map(|r| (r.frame_number, r.shown_us))
        .collect();
    assert_eq!(order, vec![(1, 11), (2, 0), (3, 31)], "decode order");
    assert_eq!(timings, HashMap::from([(4, timing)]));
    assert_eq!(
        (st, c, clock_mode),
        (stats, Some(clock), ClockMode::Synchronized)
    );
    assert_eq!(
        (decode_errors, decoded, held, held_decode_errors),
        (3, 2, 2, 1)
    );
    assert_eq!(decoder.as_deref(), Some("h264 (software)"));
    assert_eq!((shown, dropped_presenter), (2, 16));
    assert_eq!((stamp_unreadable, concealed, frames_with_pose), (1, 1, 1));
    assert_eq!(slice_timings, HashMap::from([(5, (4, 10, 20))]));
    assert_eq!((inputs_sent, state_updates, inputs_refused), (11, 13, 12));
    assert_eq!(state_staleness, Some(staleness));
    assert_eq!(pose_to_photon, vec![(40, 21)]);
    assert_eq!(
        (
            pose_photon_unread,
            pose_photon_ambiguous,
            pose_photon_unmatched
        ),
        (1, 2, 3)
    );
    assert_eq!(host_key, Some(key));
    assert_eq!(host_encoder.map(|e| e.encoder).as_deref(), Some("libx264"));
    assert_eq!(input_responses, vec![(1, 50, 30)]);
    assert_eq!(pings, vec![6]);
    assert_eq!(outcome.as_deref(), Some("sink closed"));
    assert_eq!(audio.map(|a| a.driver).as_deref(), Some("alsa"));
    assert_eq!((sink_frames, device_events), (17, 14));
    assert_eq!(paths, vec![addr]);
    assert_eq!(session, 3);
    // Session 3 resumed the first loss (its first picture at 31); the second never resumed.
    assert_eq!(reconnects, vec![(7, 31), (8, 0)]);
    assert_eq!(sessions.iter().map(|s| s.session).collect::<Vec<_>>(), [3]);
    assert_eq!(refusals, 9);
    assert_eq!(
        (role, input_granted, times_paused),
        (Some(ClientRole::Viewer), true, 10)
    );
    assert_eq!((undecoded, decoding), (15, true));
    assert_eq!(presenter.as_deref(), Some("gl-window"));
    assert_eq!(rumble, rumbled);
}

#[test]
fn the_host_ending_the_stream_is_the_outcome_over_a_closed_sink() {
    let mut net = NetRecord::default();
    net.ended("the host shut down");
    let mut present = PresentRecord::default();
    present.ended("sink closed".into());
    let run = assemble(net, DecodeRecord::default(), present, RunEnd::default());
    assert_eq!(run.outcome.as_deref(), Some("the host shut down"));
    assert_eq!(run.link, crate::link::LinkReport::udp());
}

#[test]
fn records_merge_in_decode_order_bounded() {
    let dropped: Vec<_> = (0..MAX_RECORDS as u32)
        .map(|i| rec(2 * i, 2 * i as u64, 0))
        .collect();
    let shown: Vec<_> = (0..10u32)
        .map(|i| rec(2 * i + 1, 2 * i as u64 + 1, 5))
        .collect();
    let merged = merge_records(dropped, shown);
    assert_eq!(merged.len(), MAX_RECORDS);
    let first: Vec<u32> = merged.iter().take(5).map(|r| r.frame_number).collect();
    assert_eq!(first, vec![0, 1, 2, 3, 4]);
}
