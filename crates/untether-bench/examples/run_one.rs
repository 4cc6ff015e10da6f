//! Runs one untether scenario and prints its summary: `cargo run --release -p untether-bench
//! --example run_one -- [SECONDS] [WIDTHxHEIGHT] [PRESET]`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use untether_bench::run::{run_untether, BenchOptions, QualityPlan};
use untether_bench::scenario::Scenario;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut sc = Scenario {
        duration_s: args.first().and_then(|s| s.parse().ok()).unwrap_or(4.0),
        ..Default::default()
    };
    if let Some((w, h)) = args.get(1).and_then(|s| s.split_once('x')) {
        sc.width = w.parse().unwrap_or(1280);
        sc.height = h.parse().unwrap_or(720);
    }
    if let Some(p) = args.get(2) {
        sc.preset = p.clone();
    }
    let opts = BenchOptions {
        quality: QualityPlan {
            batch_frames: std::env::var("BATCH")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(60),
            every_s: 10.0,
            first_s: 1.0,
        },
        ..Default::default()
    };
    match run_untether(&sc, &opts, &mut |_| {}, Arc::new(AtomicBool::new(false))) {
        Ok(r) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&r.report["latency_ms"]["glass_to_glass_pixels"])
                    .unwrap_or_default()
            );
            println!("quality: {}", r.report["quality"]);
            println!("response: {}", r.report["input"]["response_delay_ms"]);
            println!(
                "frames {} quality samples {} response samples {}",
                r.frames.len(),
                r.quality.len(),
                r.response.len()
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
