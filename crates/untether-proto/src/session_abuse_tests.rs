//! Session-level tests of admitted clients misbehaving: NACK floods, keyframe-request spam,
//! rejoin storms (docs/PROTOCOL.md, "Retransmission" and "Keyframe requests").

use crate::fec::FecPolicy;
use crate::session_multi_tests::World;
use crate::wire::ControlFrame;

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
