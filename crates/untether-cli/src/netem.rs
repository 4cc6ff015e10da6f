//! `untether netem`: the impairment relay on the command line. The logic (units, profiles,
//! relays) is in `untether_netem`; this only parses, starts, prints and stops.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use untether_netem::profile::Direction;
use untether_netem::relay::{RelaySet, RelayStats};
use untether_netem::ImpairmentArgs;

/// Flags of `untether netem`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = "\
Directions: \"up\" is client → target (what clients send to --listen), \"down\" is target → client \
(the answers, sent to the client the relay last heard from). The impairment flags apply to both \
directions unless --direction says otherwise; a profile can give each direction and each path its \
own settings.

Order of stages for each datagram: outage → rate limit (queue, tail drop) → loss → delay + jitter \
(order kept unless --jitter-reorders) → reorder → duplicate. Everything random comes from --seed.

Examples:
  untether netem --listen 9000 --target HOST:9710 --loss 2% --burst-loss --delay 5ms --jitter 2ms
  untether netem --listen 9000 --target HOST:9710 --rate 20mbit --queue 50ms --outage 5s@10s
  untether netem --listen 9000 --target HOST:9710 --profile docs/netem/wifi.toml --stats-interval 5
  untether netem --listen 9000 --target HOST:9710 --paths 2 --loss 1%     (ports 9000 and 9001)

Units: fractions 2% or 0.02; durations 500us, 5ms, 1s; rates 500kbit, 20mbit, 1gbit, 20M; \
sizes 3000B, 64KiB; queues 64p, 128kB, 50ms. Profiles and measurements: docs/NETEM.md.")]
pub struct NetemArgs {
    /// Address clients send to: ADDR:PORT, or PORT for 0.0.0.0:PORT. With several paths, the
    /// first of consecutive ports (port 0: an ephemeral port each).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// Where the datagrams go: HOST:PORT (e.g. an untether host); IPv6 as [ADDR]:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: String,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Print each path's per-direction counters every SECONDS (default: only the final ones,
    /// at the end or on Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub stats_interval: Option<f64>,
    #[command(flatten)]
    pub impairment: ImpairmentArgs,
}

fn listen_addr(s: &str) -> Result<SocketAddr> {
    if let Ok(port) = s.trim().parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    s.trim().parse::<SocketAddr>().with_context(|| {
        format!("--listen {s:?}: expected ADDR:PORT (127.0.0.1:9000, [::1]:9000) or a port (9000)")
    })
}

fn target_addr(s: &str) -> Result<SocketAddr> {
    let addr = untether_net::resolve(s, 0).with_context(|| format!("--target {s:?}"))?;
    if addr.port() == 0 {
        bail!("--target {s:?}: needs a port: HOST:PORT, e.g. 127.0.0.1:9710");
    }
    Ok(addr)
}

fn seconds(flag: &str, v: Option<f64>) -> Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 * 365.0 => {
            Ok(Some(Duration::from_secs_f64(d)))
        }
        Some(d) => bail!("{flag} {d}: must be a number of seconds greater than 0"),
    }
}

fn print_stats(elapsed: Duration, stats: &[RelayStats]) {
    for (i, s) in stats.iter().enumerate() {
        let path = if stats.len() > 1 {
            format!("path {} ", i + 1)
        } else {
            String::new()
        };
        let client = s
            .client
            .map_or_else(|| "no client yet".to_string(), |c| format!("client {c}"));
        println!(
            "[{:>7.1} s] {path}{} ({client})",
            elapsed.as_secs_f64(),
            s.listen
        );
        for d in Direction::ALL {
            println!("    {:<4} {}", d.name(), s.direction(d));
        }
    }
}

/// Runs `untether netem` until Ctrl-C or `--duration`.
pub fn run(args: NetemArgs) -> Result<()> {
    let listen = listen_addr(&args.listen)?;
    let target = target_addr(&args.target)?;
    let duration = seconds("--duration", args.duration)?;
    let interval = seconds("--stats-interval", args.stats_interval)?;
    let profile = args.impairment.profile()?;
    let configs = RelaySet::configs(&profile, listen, target)?;
    let set = RelaySet::start(configs).context("cannot start the relays")?;

    if let Some(d) = &profile.description {
        eprintln!("untether netem: {d}");
    }
    for (i, (relay, path)) in set.relays().iter().zip(&profile.paths).enumerate() {
        eprintln!(
            "untether netem: {}udp {} → {} (from {})",
            if profile.paths.len() > 1 {
                format!("path {}: ", i + 1)
            } else {
                String::new()
            },
            relay.listen_addr(),
            relay.target_addr(),
            relay.outbound_addr(),
        );
        eprintln!("    up   (client → target): {}", path.up.describe());
        eprintln!("    down (target → client): {}", path.down.describe());
    }
    eprintln!(
        "untether netem: relaying with seed {}{}. Ctrl-C to stop.",
        profile.seed,
        duration.map_or(String::new(), |d| format!(" for {:.1} s", d.as_secs_f64()))
    );

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        if let Err(e) = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst)) {
            log::warn!("cannot install the Ctrl-C handler: {e}");
        }
    }
    let started = Instant::now();
    let mut next_print = interval;
    while !stop.load(Ordering::SeqCst) && duration.is_none_or(|d| started.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(at), Some(every)) = (next_print, interval) {
            if started.elapsed() >= at {
                print_stats(started.elapsed(), &set.stats());
                next_print = Some(at + every);
            }
        }
    }
    let elapsed = started.elapsed();
    let stats = set.stop();
    eprintln!("untether netem: stopped; final counters:");
    print_stats(elapsed, &stats);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            listen_addr("9000").unwrap(),
            "0.0.0.0:9000".parse().unwrap()
        );
        assert_eq!(
            listen_addr("127.0.0.1:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert!(listen_addr("localhost")
            .unwrap_err()
            .to_string()
            .contains("ADDR:PORT"));
        assert_eq!(target_addr("127.0.0.1:9710").unwrap().port(), 9710);
        assert!(target_addr("127.0.0.1")
            .unwrap_err()
            .to_string()
            .contains("needs a port"));
        assert!(seconds("--duration", Some(-1.0)).is_err());
        assert!(seconds("--duration", Some(f64::NAN)).is_err());
    }
}
