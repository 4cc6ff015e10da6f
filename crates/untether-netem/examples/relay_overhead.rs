//! What the impairment relay itself costs, over loopback:
//! 1. the one-way delay it adds with every impairment off (relay vs direct, interleaved rounds);
//! 2. how close to their time delayed datagrams leave (2 ms delay), for several spin margins, and
//!    the CPU the relay thread uses meanwhile;
//! 3. its CPU use when idle;
//! 4. how many datagrams per second it forwards when blasted.
//!
//! ```text
//! cargo run --release -p untether-netem --example relay_overhead [-- PACKETS [INTERVAL_US]]
//! ```
//! Defaults: 20000 datagrams of 200 bytes per measurement, one every 200 µs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use untether_net::{now_us, Received, UdpEndpoint};
use untether_netem::impair::Impairment;
use untether_netem::relay::{Relay, RelayConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The project's one percentile definition (nearest rank) at a quantile `q` in 0..=1.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    untether_proto::stats::percentile(sorted, q * 100.0).unwrap_or(0)
}

/// Sends `n` stamped datagrams to `dst` one every `interval_us` and returns the one-way delays
/// seen by a receiver thread on `rx`.
fn one_way(
    rx: &Arc<UdpEndpoint>,
    dst: SocketAddr,
    n: u64,
    interval_us: u64,
    len: usize,
) -> Res<Vec<u64>> {
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let rx = rx.clone();
        let done = done.clone();
        std::thread::spawn(move || -> Vec<u64> {
            let mut buf = vec![0u8; 65_535];
            let mut delays = Vec::with_capacity(n as usize);
            loop {
                match rx.recv(&mut buf, Duration::from_millis(50)) {
                    Ok(Received::Datagram(m, _)) if m >= 8 => {
                        let mut stamp = [0u8; 8];
                        stamp.copy_from_slice(&buf[..8]);
                        delays.push(now_us().saturating_sub(u64::from_le_bytes(stamp)));
                    }
                    Ok(Received::TimedOut) if done.load(Ordering::SeqCst) => break,
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("receive failed: {e}");
                        break;
                    }
                }
            }
            delays
        })
    };
    let tx = UdpEndpoint::bind("127.0.0.1:0".parse()?)?;
    let mut payload = vec![0u8; len];
    let t0 = now_us();
    for i in 0..n {
        let due = t0 + i * interval_us;
        loop {
            let left = due.saturating_sub(now_us());
            if left <= 60 {
                break;
            }
            std::thread::sleep(Duration::from_micros(left - 60));
        }
        while now_us() < due {
            std::hint::spin_loop();
        }
        payload[..8].copy_from_slice(&now_us().to_le_bytes());
        tx.send_to(&payload, dst)?;
    }
    std::thread::sleep(Duration::from_millis(20));
    done.store(true, Ordering::SeqCst);
    let mut d = receiver.join().map_err(|_| "receiver panicked")?;
    if (d.len() as u64) < n {
        eprintln!("  (warning: {} of {n} datagrams arrived)", d.len());
    }
    d.sort_unstable();
    Ok(d)
}

fn show(name: &str, d: &[u64]) {
    println!(
        "  {name:<28} n {:>6}  p50 {:>6} us  p90 {:>6} us  p99 {:>6} us  max {:>7} us",
        d.len(),
        percentile(d, 0.5),
        percentile(d, 0.9),
        percentile(d, 0.99),
        d.last().copied().unwrap_or(0)
    );
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let interval: u64 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(200);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "relay overhead over loopback: {n} datagrams of 200 B per measurement, one every {interval} us; \
         {} CPUs, load average {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    let rx = Arc::new(UdpEndpoint::bind("127.0.0.1:0".parse()?)?);
    let target = rx.local_addr()?;

    // 1. Added delay, no impairment: interleave direct and relayed rounds so that load changes
    //    on the machine hit both alike.
    println!("\n1. one-way delay, every impairment off (4 interleaved rounds each)");
    let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse()?, target))?;
    let (mut direct, mut relayed) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        direct.extend(one_way(&rx, target, n / 4, interval, 200)?);
        relayed.extend(one_way(&rx, relay.listen_addr(), n / 4, interval, 200)?);
    }
    let s = relay.stop();
    direct.sort_unstable();
    relayed.sort_unstable();
    show("direct", &direct);
    show("through the relay", &relayed);
    println!(
        "  added by the relay: p50 {} us, p90 {} us, p99 {} us; relay thread CPU {:.1} % of one core while forwarding {} datagrams",
        percentile(&relayed, 0.5) as i64 - percentile(&direct, 0.5) as i64,
        percentile(&relayed, 0.9) as i64 - percentile(&direct, 0.9) as i64,
        percentile(&relayed, 0.99) as i64 - percentile(&direct, 0.99) as i64,
        s.up.cpu_us as f64 / (n / 2 * interval) as f64 * 100.0,
        s.up.forwarded
    );
    let base = percentile(&direct, 0.5);

    // 2. Precision of delayed sends for several spin margins.
    println!(
        "\n2. 2 ms delay: one-way minus 2 ms minus the direct median ({base} us), by spin margin"
    );
    for spin in [0u64, 50, 100, 200] {
        let cfg = RelayConfig {
            up: Impairment {
                delay_us: 2000,
                ..Default::default()
            },
            spin_us: spin,
            ..RelayConfig::new("127.0.0.1:0".parse()?, target)
        };
        let relay = Relay::start(cfg)?;
        let t = now_us();
        let d = one_way(&rx, relay.listen_addr(), n / 2, interval, 200)?;
        let wall = now_us() - t;
        let s = relay.stop();
        let late: Vec<u64> = d.iter().map(|&x| x.saturating_sub(2000 + base)).collect();
        println!(
            "  spin {spin:>3} us: late p50 {:>4} us  p90 {:>4} us  p99 {:>5} us  max {:>6} us; sends >100 us late {:>5}; relay thread CPU {:>5.1} %",
            percentile(&late, 0.5),
            percentile(&late, 0.9),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(0),
            s.up.late_sends,
            s.up.cpu_us as f64 / wall as f64 * 100.0
        );
    }

    // 3. Idle.
    let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse()?, target))?;
    std::thread::sleep(Duration::from_secs(3));
    let s = relay.stop();
    println!(
        "\n3. idle for 3 s: relay threads used {} us + {} us of CPU ({:.3} % of a core)",
        s.up.cpu_us,
        s.down.cpu_us,
        (s.up.cpu_us + s.down.cpu_us) as f64 / 3e6 * 100.0
    );

    // 4. Blast.
    let m = 100_000u64;
    let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse()?, target))?;
    let got = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = {
        let (rx, got, stop) = (rx.clone(), got.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_535];
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Received::Datagram(..)) = rx.recv(&mut buf, Duration::from_millis(50)) {
                    got.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let tx = UdpEndpoint::bind("127.0.0.1:0".parse()?)?;
    let payload = vec![0u8; 1200];
    let t = now_us();
    for _ in 0..m {
        tx.send_to(&payload, relay.listen_addr())?;
    }
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let g = got.load(Ordering::Relaxed);
        if g == last {
            break;
        }
        last = g;
    }
    let wall = (now_us() - t - 100_000) as f64 / 1e6;
    stop.store(true, Ordering::SeqCst);
    counter.join().map_err(|_| "counter panicked")?;
    let s = relay.stop();
    println!(
        "\n4. blast of {m} × 1200 B: relay received {}, forwarded {}, target got {last} in {wall:.2} s \
         ({:.0} datagrams/s, {:.0} Mbit/s; losses are socket-buffer overflows on this 2-core box)",
        s.up.received,
        s.up.forwarded,
        last as f64 / wall,
        last as f64 * 1200.0 * 8.0 / wall / 1e6
    );
    Ok(())
}
