//! The client driver's reactions, event by event (no sockets).

use std::sync::mpsc::{self, Receiver};

use untether_proto::{ClientEvent, ClientRole, GoneReason};

use super::*;

struct Rig {
    net: ClientNet,
    shared: Arc<ClientShared>,
    timings: Receiver<(u32, FrameTiming)>,
}

/// A driver that never connected (no sockets: events are handed to it directly).
fn rig(decode: bool) -> Rig {
    rig_with(decode, Patience::default())
}

fn rig_with(decode: bool, patience: Patience) -> Rig {
    let shared = Arc::new(ClientShared::for_tests());
    let (frames, _) = mpsc::channel();
    let (sent_inputs, _) = mpsc::channel();
    let (timings_tx, timings) = mpsc::sync_channel(2);
    let out = NetOutputs {
        frames: decode.then_some(frames),
        sent_inputs,
        timings: timings_tx,
        playout: None,
    };
    let record = NetRecord::new(1_000, vec![shared.host]);
    let net = ClientNet::new(
        ClientConfig::new("test"),
        shared.clone(),
        record,
        None,
        out,
        patience,
    );
    Rig {
        net,
        shared,
        timings,
    }
}

#[test]
fn retries_back_off_to_a_ceiling() {
    assert_eq!(retry_delay_us(0), RETRY_FIRST_US);
    assert_eq!(retry_delay_us(1), 2 * RETRY_FIRST_US);
    assert_eq!(retry_delay_us(30), RETRY_MAX_US);
}

#[test]
fn the_role_is_published_for_the_title_and_kept_in_the_record() {
    let mut r = rig(true);
    r.net.on_event(ClientEvent::Role {
        role: ClientRole::Viewer,
        input_granted: true,
        paused: true,
    });
    assert_eq!(
        r.shared.status().role,
        None,
        "published at the end of the turn"
    );
    r.net.handle_events(0);
    let role = r
        .shared
        .status()
        .role
        .map(|v| (v.role, v.input_granted, v.paused));
    assert_eq!(role, Some((ClientRole::Viewer, true, true)));
    assert!(!r.shared.status().connected);
    let rec = r.net.into_record(false, None);
    let run = super::super::run::assemble(
        rec,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(
        (run.role, run.input_granted, run.times_paused),
        (Some(ClientRole::Viewer), true, 1)
    );
}

#[test]
fn host_timings_go_to_the_record_and_the_overlay_until_its_queue_is_full() {
    let mut r = rig(true);
    for n in 0..3 {
        r.net.on_event(ClientEvent::FrameTiming(FrameTiming {
            frame_number: n,
            ..Default::default()
        }));
    }
    r.net.on_event(ClientEvent::Rtt(250));
    let queued: Vec<u32> = r.timings.try_iter().map(|(_, t)| t.frame_number).collect();
    assert_eq!(
        queued,
        vec![0, 1],
        "the overlay's queue holds two here; the third waits"
    );
    let note = crate::link::LinkReport {
        note: Some("stays on UDP".into()),
        ..crate::link::LinkReport::udp()
    };
    let run = super::super::run::assemble(
        r.net.into_record(false, Some(note)),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(run.timings.len(), 3, "the record keeps every timing");
    assert_eq!(run.pings, vec![250]);
    assert_eq!(run.link.note.as_deref(), Some("stays on UDP"));
    assert_eq!(run.started_us, 1_000);
}

#[test]
fn a_refusal_before_the_session_starts_ends_the_run() {
    let mut r = rig(true);
    r.net.handle_refused(5, 1);
    assert!(
        !r.net.is_done(),
        "another path's refusal is that path's problem"
    );
    r.net.handle_refused(5, 0);
    assert!(r.net.is_done());
    assert!(r.shared.stop.load(std::sync::atomic::Ordering::SeqCst));
    let failure = super::super::lock(&r.shared.failure).take();
    assert!(
        matches!(failure, Some(ClientError::Refused { .. })),
        "{failure:?}"
    );
    let run = super::super::run::assemble(
        r.net.into_record(false, None),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(run.refusals, 1);
}

#[test]
fn the_host_shutting_down_ends_the_run_with_its_outcome() {
    let mut r = rig(true);
    r.net
        .on_event(ClientEvent::HostGone(GoneReason::ShuttingDown));
    assert!(r.net.is_done());
    assert!(super::super::lock(&r.shared.failure).is_none());
    let rec = r.net.into_record(false, None);
    let run = super::super::run::assemble(
        rec,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(run.outcome.as_deref(), Some("the host shut down"));
}

#[test]
fn a_silent_host_is_reconnected_to_and_said_so() {
    let mut r = rig(true);
    r.net.on_event(ClientEvent::HostGone(GoneReason::Timeout));
    assert!(!r.net.is_done());
    r.net.handle_events(0);
    assert!(r.shared.status().reconnecting);
    // The first attempt after the first backoff starts session 1.
    r.net.handle_timeout(now_us() + RETRY_FIRST_US + 1);
    assert_eq!(r.net.session_number, 1);
}

#[test]
fn refusals_while_reconnecting_end_one_attempt_each_not_one_each() {
    let mut r = rig(true);
    r.net.on_event(ClientEvent::HostGone(GoneReason::Timeout));
    // Refusals left over from the lost session, while the first attempt waits: none
    // counts as an attempt.
    for _ in 0..50 {
        r.net.handle_refused(now_us(), 0);
    }
    assert_eq!(r.net.reconnect.as_ref().map(|x| x.attempt), Some(0));
    // The attempt starts; each of its repeated Hellos is refused: one failed attempt.
    r.net.handle_timeout(now_us() + RETRY_FIRST_US + 1);
    for _ in 0..20 {
        r.net.handle_refused(now_us(), 0);
    }
    assert_eq!(r.net.reconnect.as_ref().map(|x| x.attempt), Some(1));
    assert!(!r.net.is_done());
}

#[test]
fn an_unpaired_client_waits_for_approval_and_tries_again() {
    let patient = Patience {
        wait_for_approval: true,
        ..Patience::default()
    };
    let mut r = rig_with(true, patient);
    let refusal = || ClientEvent::Rejected {
        reason: untether_proto::RejectReason::PendingApproval,
        message: "not paired".into(),
    };
    r.net.on_event(refusal());
    r.net.handle_events(0);
    assert!(!r.net.is_done(), "it waits");
    let st = r.shared.status();
    assert!(st.awaiting_approval && !st.reconnecting, "{st:?}");
    r.net.handle_timeout(now_us() + APPROVAL_RETRY_US + 1);
    assert_eq!(
        r.net.session_number, 1,
        "tried again after a quarter second"
    );
    r.net.on_event(refusal());
    assert!(!r.net.is_done());
    // Impatient: the refusal ends the run, naming the reason.
    let mut r = rig(true);
    r.net.on_event(refusal());
    assert!(r.net.is_done());
    assert!(matches!(
        super::super::lock(&r.shared.failure).take(),
        Some(ClientError::Rejected { .. })
    ));
}

#[test]
fn without_a_decoder_frames_are_counted_not_sent() {
    let mut r = rig(false);
    let frame = |index: u8, count: u8| untether_proto::CompleteFrame {
        frame_number: 1,
        keyframe: false,
        refresh_start: false,
        hold: false,
        capture_us: 0,
        first_shard_us: 0,
        last_shard_us: 0,
        shards: 1,
        slice: untether_proto::SliceId { index, count },
        data: vec![0; 4],
    };
    r.net.hand_to_decoder(Piece::Frame(frame(0, 1)));
    r.net.hand_to_decoder(Piece::Slice(frame(0, 2)));
    r.net.hand_to_decoder(Piece::Slice(frame(1, 2)));
    let run = super::super::run::assemble(
        r.net.into_record(false, None),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(run.undecoded, 2, "a sliced frame counts at its last slice");
}
