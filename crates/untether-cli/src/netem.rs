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
(the answers, sent to the client: the first source heard on --listen; datagrams from any other \
source are dropped and counted as \"other source\" unless --follow-source). The impairment flags apply to both \
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
    /// Address clients send to: ADDR:PORT, or PORT for 127.0.0.1:PORT (loopback only; give
    /// 0.0.0.0:PORT to listen on every interface). With several paths, the first of
    /// consecutive ports (port 0: an ephemeral port each).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// Where the datagrams go: HOST:PORT (e.g. an untether host); IPv6 as [ADDR]:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: String,
    /// Stop after this long: seconds (10) or with a unit (500ms, 5s, 2m) (default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration_arg)]
    pub duration: Option<Duration>,
    /// Print each path's per-direction counters this often: seconds (5) or with a unit (500ms)
    /// (default: only the final ones, at the end or on Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration_arg)]
    pub stats_interval: Option<Duration>,
    /// Send the answers to whichever source spoke last (a client whose address changes, as
    /// after a NAT rebinding) instead of keeping the first client. UNSAFE on an address others
    /// can reach: any of them can take the stream over or make the relay reflect the target's
    /// traffic at a forged address.
    #[arg(long)]
    pub follow_source: bool,
    #[command(flatten)]
    pub impairment: ImpairmentArgs,
}

/// `--listen`: ADDR:PORT, or a bare port on loopback (never every interface by default).
fn listen_addr(s: &str) -> Result<SocketAddr> {
    if let Ok(port) = s.trim().parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
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

/// A duration flag, checked: more than 0, at most a year.
fn positive(flag: &str, v: Option<Duration>) -> Result<Option<Duration>> {
    const MAX: Duration = Duration::from_secs(86_400 * 365);
    match v {
        Some(d) if d.is_zero() || d > MAX => {
            bail!("{flag}: {d:?} is out of range 1ms..={}s", MAX.as_secs())
        }
        d => Ok(d),
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
        outln!(
            "[{:>7.1} s] {path}{} ({client})",
            elapsed.as_secs_f64(),
            s.listen
        );
        for d in Direction::ALL {
            outln!("    {:<4} {}", d.name(), s.direction(d));
        }
    }
}

/// Runs `untether netem` until Ctrl-C or `--duration`.
pub fn run(args: NetemArgs) -> Result<()> {
    let listen = listen_addr(&args.listen)?;
    let target = target_addr(&args.target)?;
    let duration = positive("--duration", args.duration)?;
    let interval = positive("--stats-interval", args.stats_interval)?;
    let profile = args.impairment.profile()?;
    let mut configs = RelaySet::configs(&profile, listen, target)?;
    for c in &mut configs {
        c.follow_source = args.follow_source;
        if c.listen.ip().is_unspecified() {
            eprintln!(
                "untether netem: warning: listening on every interface ({}): anyone who can reach \
                 it can send through the relay{}",
                c.listen,
                if args.follow_source {
                    " and, with --follow-source, take the stream over"
                } else {
                    " (only the first client is answered)"
                }
            );
        }
    }
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
        "untether netem: relaying with seed {}{}, answering {}. Ctrl-C to stop.",
        profile.seed,
        duration.map_or(String::new(), |d| format!(" for {:.1} s", d.as_secs_f64())),
        if args.follow_source {
            "the newest source (--follow-source)"
        } else {
            "the first client only"
        }
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
        // A bare port is loopback; every interface must be asked for.
        assert_eq!(
            listen_addr("9000").unwrap(),
            "127.0.0.1:9000".parse().unwrap()
        );
        assert_eq!(
            listen_addr("0.0.0.0:9000").unwrap(),
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
        assert!(crate::duration_arg("-1").is_err());
        assert!(crate::duration_arg("NaN").is_err());
        let e = positive("--duration", Some(Duration::ZERO))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--duration: 0ns is out of range 1ms..=31536000s");
        assert_eq!(
            positive("--stats-interval", Some(Duration::from_secs(5))).unwrap(),
            Some(Duration::from_secs(5))
        );
    }
}
