//! Session-level tests of admitted clients misbehaving: NACK floods, keyframe-request spam,
//! rejoin storms (docs/PROTOCOL.md, "Retransmission" and "Keyframe requests").

use crate::client::{ClientConfig, ClientSession};
use crate::fec::FecPolicy;
use crate::host::{
    AccessPolicy, ClientId, HostConfig, HostEvent, ReceiverKind, StreamState,
    ACCESS_REQUEST_TTL_US, DEFAULT_MAX_ACCESS_REQUESTS,
};
use crate::keyframe::KeyframeDecision;
use crate::session_multi_tests::{params, World};
use crate::wire::{ByeReason, ClientRole, ControlFrame};

/// A viewer flooding ShardNacks (every shard of every kept frame, each named twice, every
/// frame interval) draws at most its resend budget back (a quarter of the stream's rate);
/// an honest viewer losing every tenth shard still gets every frame.
#[test]
fn a_nack_flood_draws_a_bounded_answer_and_honest_loss_is_still_recovered() {
    let mut w = World::with(20, 8, 50_000, |c| c.fec = FecPolicy::OFF);
    w.add();
    let flooder = w.add();
    let lossy = w.add();
    w.clients[lossy].drop_every = 10;
    w.run(100_000);
    assert_eq!(w.host.client_count(), 3);
    let (flooder_id, lossy_id) = (w.id(flooder), w.id(lossy));
    let nack_bytes_before = w.clients[flooder].bytes_sent;
    let start = w.now;
    let frames = 60u32;
    let mut want_key = true;
    for n in 0..frames {
        let key = std::mem::take(&mut want_key) || n == 0;
        let data = crate::sim::frame_payload(n, key, 30_000);
        let _ = w.host.send_frame(w.now, n, w.now, key, &data);
        for f in n.saturating_sub(7)..=n {
            // 25 data shards, each named twice, plus a few past the end.
            let missing: Vec<u16> = (0..25).chain(0..25).chain(200..210).collect();
            w.clients[flooder]
                .session
                .queue_control_for_test(ControlFrame::ShardNack {
                    frame_number: f,
                    missing,
                });
        }
        w.run(16_000);
        if w.keyframe_requests() > 0 {
            want_key = true;
        }
    }
    let elapsed_s = (w.now - start) as f64 / 1e6;
    let nack_bytes = (w.clients[flooder].bytes_sent - nack_bytes_before) as f64;
    let status = w.host.client_status();
    let of = |id| {
        status
            .iter()
            .find(|s| s.info.id == id)
            .expect("connected")
            .clone()
    };
    // Each resent shard is at most one full datagram.
    let resent = of(flooder_id).shards_retransmitted as f64 * 1200.0;
    // The budget: a quarter of the stream's 10 Mbit/s, and a burst of one (30 kB) frame.
    let budget = 10_000.0 * 1000.0 / 8.0 / 4.0 * elapsed_s + 30_000.0 + 1200.0;
    assert!(resent <= budget, "resent {resent} B > budget {budget} B");
    // It asked for 60 × 8 × 25 shards (14 MB): at most the budget came back, a few times its
    // NACK bytes (an honest one-shard NACK of ~50 bytes draws a 1200-byte shard; the bound
    // is on bytes per second, not on the ratio).
    assert!(
        resent <= 6.0 * nack_bytes,
        "resent {resent} B for {nack_bytes} B of NACKs"
    );
    let stats = w.host.stats();
    assert!(stats.shard_nacks_duplicates > 0);
    assert!(stats.shard_resends_over_budget + stats.shard_resends_over_limit > 0);
    // The honest viewer lost shards, asked for them, and has every frame.
    assert!(of(lossy_id).shards_retransmitted > 0);
    let got: Vec<u32> = w.clients[lossy].frames().iter().map(|f| f.0).collect();
    assert_eq!(got, (0..frames).collect::<Vec<u32>>());
}

/// Frames 1..=count, one every 16 ms, through [`World::frame`] (a keyframe when one was asked
/// for), `each` before each; returns how many keyframes were asked for.
fn frames(
    w: &mut World,
    from: u32,
    count: u32,
    want_key: &mut bool,
    mut each: impl FnMut(&mut World, u32),
) -> u32 {
    let mut keyframes = 0;
    for n in from..from + count {
        each(w, n);
        w.frame(n, want_key);
        keyframes += *want_key as u32;
    }
    keyframes
}

#[test]
fn a_viewer_spamming_keyframe_requests_is_honoured_once_a_second_the_controller_per_cooldown() {
    let mut w = World::new(21, 8, 50_000);
    let ctl = w.add();
    let viewer = w.add();
    w.run(100_000);
    let mut want_key = true;
    w.frame(0, &mut want_key);
    want_key = false;
    // Two seconds of a request every frame, each naming the newest frame.
    let keyframes = frames(&mut w, 1, 120, &mut want_key, |w, n| {
        w.clients[viewer]
            .session
            .queue_control_for_test(ControlFrame::KeyframeRequest { lost_frame: n })
    });
    assert!(
        keyframes <= 3,
        "{keyframes} keyframes for one viewer in 2 s"
    );
    assert!(w.host.stats().keyframe_requests_ignored_limit > 100);
    // The controller's loss is answered within its cooldown, as before.
    want_key = false;
    let keyframes = frames(&mut w, 121, 4, &mut want_key, |w, n| {
        w.clients[ctl]
            .session
            .queue_control_for_test(ControlFrame::KeyframeRequest { lost_frame: n })
    });
    assert!(keyframes >= 1);
}

/// A new run of client `i` (the same key, a new session) connecting now.
fn rejoin(w: &mut World, i: usize, run: u64) {
    let mut c = ClientConfig::new(format!("c{i}"));
    c.identity = w.clients[i].id.clone();
    c.entropy = [run as u8 + 100; 32];
    c.nonce = 5000 + run;
    w.clients[i].session = ClientSession::new(c, w.now);
    w.clients[i].events.clear();
}

#[test]
fn a_viewer_rejoining_29_times_a_second_causes_a_few_keyframes_and_still_gets_its_picture() {
    let mut w = World::new(22, 8, 50_000);
    w.add();
    let v = w.add();
    w.run(100_000);
    let mut want_key = true;
    w.frame(0, &mut want_key);
    want_key = false;
    // A rejoin every other frame (34 ms) for a second.
    let keyframes = frames(&mut w, 1, 58, &mut want_key, |w, n| {
        if n % 2 == 1 {
            rejoin(w, v, n as u64);
        }
    });
    assert!(keyframes <= 4, "{keyframes} keyframes for 29 rejoins");
    assert!(w.host.stats().joins_backed_off > 0);
    // It stops rejoining: its join keyframe comes within the backoff's cap.
    let keyframes = frames(&mut w, 59, 300, &mut want_key, |_, _| {});
    assert!(keyframes >= 1);
    assert!(w.clients[v].frames().first().is_some_and(|f| f.1));
    assert_eq!(w.host.client_status()[1].state, StreamState::Live);
}

#[test]
fn a_pending_access_request_expires_unless_repeated_and_32_are_kept() {
    assert_eq!(
        HostConfig::new(params()).max_access_requests,
        DEFAULT_MAX_ACCESS_REQUESTS
    );
    assert_eq!(DEFAULT_MAX_ACCESS_REQUESTS, 32);
    let mut w = World::with(23, 8, 50_000, |c| c.access = AccessPolicy::Allowlist);
    w.add();
    let b = w.add();
    w.run(300_000);
    assert_eq!(w.host.access_requests().count(), 2);
    let t = w.now;
    // Four minutes later, b asks again; the other does not.
    w.now += 240_000_000;
    w.host.handle_timeout(w.now);
    assert_eq!(w.host.access_requests().count(), 2);
    rejoin(&mut w, b, 1);
    w.run(300_000);
    // Past the first requests' TTL: only b's is left.
    w.now = t + ACCESS_REQUEST_TTL_US + 1_000;
    assert!(w.host.poll_timeout().is_some_and(|x| x <= w.now));
    w.host.handle_timeout(w.now);
    let left: Vec<_> = w.host.access_requests().map(|r| r.key).collect();
    assert_eq!(left, vec![w.clients[b].id.public]);
    assert_eq!(w.host.stats().access_requests_expired, 1);
}

#[test]
fn receivers_of_other_kinds_share_the_one_roles_authority_and_the_keyframe_gate() {
    let mut w = World::new(24, 8, 50_000);
    let now = w.now;
    let rtsp = w.host.attach_receiver(now, ReceiverKind::Rtsp);
    let b1 = w.host.attach_receiver(now, ReceiverKind::Browser);
    let b2 = w.host.attach_receiver(now, ReceiverKind::Browser);
    // No native client: the oldest browser controls; RTSP players never do.
    assert_eq!(w.host.controller(), Some(b1));
    assert_eq!(w.host.role_of(rtsp), Some(ClientRole::Viewer));
    assert_eq!(w.host.role_of(b2), Some(ClientRole::Viewer));
    assert!(w.host.input_applies(b1));
    assert!(!w.host.input_applies(b2) && !w.host.input_applies(rtsp));
    // A native client connects (its id from the same space): it takes control.
    let c = w.add();
    w.run(100_000);
    let cid = w.id(c);
    assert!(cid.0 > b2.0);
    assert_eq!(w.host.controller(), Some(cid));
    assert_eq!(w.host.role_of(cid), Some(ClientRole::Controller));
    assert_eq!(w.host.role_of(b1), Some(ClientRole::Viewer));
    assert!(w.host.input_applies(cid) && !w.host.input_applies(b1));
    // A browser viewer's PLIs go through the one gate with a viewer's limit.
    w.keyframe_requests();
    let mut honoured = 0;
    for _ in 0..60 {
        if w.host.receiver_keyframe_request(w.now, b2) == KeyframeDecision::Honour {
            honoured += 1;
        }
        w.run(16_000);
    }
    assert!((1..=2).contains(&honoured), "{honoured}");
    assert_eq!(w.keyframe_requests(), honoured);
    assert_eq!(
        w.host.receiver_keyframe_request(w.now, ClientId(999)),
        KeyframeDecision::Limited
    );
    // The native client leaves: the oldest browser controls again; it detaches: the next.
    w.host.close_client(w.now, cid, ByeReason::Closed);
    assert_eq!(w.host.controller(), Some(b1));
    w.host.detach_receiver(w.now, b1);
    assert_eq!(w.host.controller(), Some(b2));
    assert_eq!(w.host.role_of(b1), None);
    w.run(1_000);
    let changes: Vec<(ClientId, ClientRole)> = w
        .host_events
        .iter()
        .filter_map(|e| match e {
            HostEvent::ReceiverRoleChanged { receiver, role, .. } => Some((*receiver, *role)),
            _ => None,
        })
        .collect();
    use ClientRole::{Controller, Viewer};
    assert_eq!(
        changes,
        [
            (b1, Controller),
            (b1, Viewer),
            (b1, Controller),
            (b2, Controller)
        ]
    );
}
