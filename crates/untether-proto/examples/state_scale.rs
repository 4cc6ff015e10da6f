//! The latest-wins state channel at scale (docs/BENCHMARKS.md): 4096 keys changing at 60 Hz
//! under a 1 Mbit/s budget with 2 % loss each way and 5 ms each way, 20 s simulated.
//!
//! `cargo run --release -p untether-proto --features sim --example state_scale [KEYS [HZ [BUDGET_KBPS [LOSS_PCT [SECONDS]]]]]`

use untether_proto::sim_state::{run, StateScaleConfig};

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or_else(|_| panic!("not a number: {a}")))
        .collect();
    let arg = |i: usize, d: f64| args.get(i).copied().unwrap_or(d);
    let cfg = StateScaleConfig {
        keys: arg(0, 4096.0) as u16,
        change_hz: arg(1, 60.0) as u32,
        budget_bytes_per_s: (arg(2, 1000.0) * 1000.0 / 8.0) as u64,
        loss: arg(3, 2.0) / 100.0,
        duration_us: (arg(4, 20.0) * 1e6) as u64,
        ..StateScaleConfig::default()
    };
    let t = std::time::Instant::now();
    let r = run(&cfg);
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{} keys at {} Hz, budget {} kbit/s, loss {:.1} % each way, {} ms each way, {:.0} s \
         simulated in {:.1} s",
        cfg.keys,
        cfg.change_hz,
        cfg.budget_bytes_per_s * 8 / 1000,
        cfg.loss * 100.0,
        cfg.one_way_us / 1000,
        cfg.duration_us as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    println!(
        "true staleness over keys (each key's worst after {:.0} s): p50 {:.1} ms, p99 {:.1} ms, \
         max {:.1} ms; time-averaged {:.1} ms",
        cfg.warmup_us as f64 / 1e6,
        ms(r.true_p50_us),
        ms(r.true_p99_us),
        ms(r.true_max_us),
        ms(r.true_mean_us)
    );
    println!(
        "the sender's estimate: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (mean at delivery {:.1} ms)",
        ms(r.estimate.p50_us),
        ms(r.estimate.p99_us),
        ms(r.estimate.max_us),
        ms(r.estimate.mean_us)
    );
    println!(
        "used {:.1} kbit/s up (state), {:.1} kbit/s down (acks); {} sets, {} entries sent \
         ({} resent), {} obsolete entries not resent, {} packets; keys never delivered: {}",
        r.bytes_per_s_up * 8.0 / 1000.0,
        r.bytes_per_s_down * 8.0 / 1000.0,
        r.sets,
        r.entries_sent,
        r.entries_resent,
        r.obsolete_skipped,
        r.packets_sent,
        r.keys_never_delivered
    );
}
