//! The impairment flags, shared by `untether netem` and `untether bench`
//! (`#[command(flatten)] impairment: ImpairmentArgs`).

use std::path::PathBuf;

use untether_net::Micros;

use crate::impair::{GilbertElliott, Outage, DEFAULT_MEAN_BURST};
use crate::profile::{
    BurstLoss, ConfigError, ImpairmentSpec, JitterDist, KeyStyle, Overrides, Profile, ProfileSpec,
    MAX_PATHS,
};
use crate::units::{self, SizeSpec};

/// Which direction(s) the impairment flags apply to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DirectionScope {
    /// Both directions.
    #[default]
    Both,
    /// Target → client only (the host's stream).
    Down,
    /// Client → target only (input and feedback).
    Up,
}

/// Impairment flags. Every flag is optional; together with `--profile` they describe what each
/// relay does to the datagrams passing through it.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
#[command(next_help_heading = "Impairment (see docs/NETEM.md)")]
pub struct ImpairmentArgs {
    /// Impairment profile (TOML; `[both]`, `[down]`, `[up]` sections and `[[path]]` entries).
    #[arg(
        long,
        value_name = "FILE",
        help = "Impairment profile: TOML with [both], [down], [up] sections and [[path]] entries \
                (docs/NETEM.md, ready ones in docs/netem/). The flags below are laid over it"
    )]
    pub profile: Option<PathBuf>,

    /// Which direction the impairment flags apply to: down (target → client, e.g. the host's
    /// video), up (client → target: input, feedback) or both. For different impairments each
    /// way, use a profile (or run with --direction down, and put the up side in the profile).
    #[arg(long, value_enum, value_name = "DIR", default_value_t = DirectionScope::Both)]
    pub direction: DirectionScope,

    /// Average loss, independent per datagram: 2% or 0.02.
    #[arg(long, value_name = "FRACTION", value_parser = units::fraction)]
    pub loss: Option<f64>,

    /// Make --loss come in Wi-Fi-like bursts with the same average (a Gilbert–Elliott channel that
    /// fades for MEAN_BURST datagrams on average, default 4, and loses everything while faded).
    #[arg(long, value_name = "MEAN_BURST", num_args = 0..=1, default_missing_value = "4")]
    pub burst_loss: Option<f64>,

    /// An explicit Gilbert–Elliott burst-loss model, on top of `--loss`.
    #[arg(
        long,
        value_name = "P,R[,BAD[,GOOD]]",
        value_parser = units::gilbert,
        help = "An explicit Gilbert–Elliott burst-loss model, on top of --loss: \
                P,R[,LOSS_BAD[,LOSS_GOOD]] (per-datagram good→bad and bad→good probabilities, then \
                the loss in each state; defaults 100% and 0%), e.g. 0.5%,25%"
    )]
    pub gilbert: Option<GilbertElliott>,

    /// Fixed one-way delay: 5ms, 500us, 1s.
    #[arg(long, value_name = "DURATION", value_parser = units::duration_us)]
    pub delay: Option<Micros>,

    /// Delay variation added to --delay: σ of a normal distribution, or the scale of a Pareto
    /// tail with --jitter-dist pareto. Datagrams keep their order (a late one holds up the ones
    /// behind it) unless --jitter-reorders.
    #[arg(long, value_name = "DURATION", value_parser = units::duration_us)]
    pub jitter: Option<Micros>,

    /// Jitter distribution.
    #[arg(long, value_enum, value_name = "DIST")]
    pub jitter_dist: Option<JitterDist>,

    /// Tail index of the Pareto jitter (default 2.5; smaller is heavier: 1.5 gives rare
    /// delays of hundreds of times the scale).
    #[arg(long, value_name = "SHAPE", value_parser = units::pareto_shape)]
    pub pareto_shape: Option<f64>,

    /// Replay the delays in FILE, one per datagram, in order, looping (one value a line, with a
    /// unit or in milliseconds; # comments). Added to --delay; replaces --jitter.
    #[arg(long, value_name = "FILE")]
    pub delay_trace: Option<PathBuf>,

    /// Let jitter reorder datagrams (netem-like) instead of keeping them in order.
    #[arg(long)]
    pub jitter_reorders: bool,

    /// Rate limit (token bucket; applied before the delay): 20mbit, 500kbit, 1gbit, 20M.
    #[arg(long, value_name = "RATE", value_parser = units::rate_bps)]
    pub rate: Option<u64>,

    /// Token-bucket size: how much may leave back to back after an idle spell: 3000B, 16KiB, or
    /// a time at the rate (1ms) [default: 1ms at the rate, at least 3000B].
    #[arg(long, value_name = "SIZE", value_parser = units::burst_size)]
    pub rate_burst: Option<SizeSpec>,

    /// Bound of the queue in front of the rate limiter (tail drop): packets (64p), bytes (128kB)
    /// or a time at the rate (50ms) [default: 50ms].
    #[arg(long, value_name = "LIMIT", value_parser = units::queue_limit)]
    pub queue: Option<SizeSpec>,

    /// Reordering: this fraction of datagrams is held back --reorder-delay and overtaken by
    /// the ones behind it: 1%.
    #[arg(long, value_name = "FRACTION", value_parser = units::fraction)]
    pub reorder: Option<f64>,

    /// Extra delay of a reordered datagram [default: 1ms].
    #[arg(long, value_name = "DURATION", value_parser = units::duration_us)]
    pub reorder_delay: Option<Micros>,

    /// Duplication: this fraction of datagrams is delivered twice: 0.5%.
    #[arg(long, value_name = "FRACTION", value_parser = units::fraction)]
    pub duplicate: Option<f64>,

    /// Drop everything for DURATION starting START after the relay starts: 5s@10s. Repeatable.
    #[arg(long, value_name = "DURATION@START", value_parser = units::outage, action = clap::ArgAction::Append)]
    pub outage: Vec<Outage>,

    /// Number of paths (relays).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=MAX_PATHS as i64),
        help = "Number of paths: N relays listening on consecutive ports from the listen port, \
                each with the same impairment (or the profile's [[path]] entries) and its own seed"
    )]
    pub paths: Option<u16>,

    /// Seed of the random impairments: the same seed and traffic give the same drops and
    /// delays [default: the profile's, else 1].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

impl ImpairmentArgs {
    /// The impairment keys set by the flags (without `--direction` scoping).
    pub fn spec(&self) -> ImpairmentSpec {
        ImpairmentSpec {
            loss: self.loss,
            burst_loss: self.burst_loss.map(BurstLoss::MeanBurst),
            gilbert: self.gilbert,
            delay_us: self.delay,
            jitter_us: self.jitter,
            jitter_dist: self.jitter_dist,
            pareto_shape: self.pareto_shape,
            delay_trace: self.delay_trace.clone(),
            preserve_order: self.jitter_reorders.then_some(false),
            rate_bps: self.rate,
            rate_burst: self.rate_burst,
            queue: self.queue,
            reorder: self.reorder,
            reorder_delay_us: self.reorder_delay,
            duplicate: self.duplicate,
            outages: (!self.outage.is_empty()).then(|| self.outage.clone()),
        }
    }

    /// True when any impairment, profile or path count is asked for (a bench without any can
    /// skip the relays).
    pub fn is_set(&self) -> bool {
        self.profile.is_some() || self.paths.is_some() || !self.spec().is_empty()
    }

    /// The command line as overrides of a profile.
    pub fn overrides(&self) -> Overrides {
        let spec = self.spec();
        let (down, up) = match self.direction {
            DirectionScope::Both => (spec.clone(), spec),
            DirectionScope::Down => (spec, ImpairmentSpec::default()),
            DirectionScope::Up => (ImpairmentSpec::default(), spec),
        };
        Overrides {
            seed: self.seed,
            paths: self.paths.map(usize::from),
            down,
            up,
            key_style: KeyStyle::Profile,
        }
    }

    /// Loads `--profile` (if any), lays the flags over it and resolves every path. Errors name
    /// the flag or the profile key.
    pub fn profile(&self) -> Result<Profile, ConfigError> {
        let spec = match &self.profile {
            Some(path) => ProfileSpec::load(path)?,
            None => ProfileSpec::default(),
        };
        let mut overrides = self.overrides();
        if self.profile.is_none() {
            overrides.key_style = KeyStyle::Flag;
        }
        spec.resolve(&overrides)
    }
}

const _: () = assert!(
    DEFAULT_MEAN_BURST == 4.0,
    "keep --burst-loss's default_missing_value in step"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impair::{Jitter, QueueLimit};
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        imp: ImpairmentArgs,
    }

    fn parse(args: &[&str]) -> Result<ImpairmentArgs, clap::Error> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).map(|c| c.imp)
    }

    #[test]
    fn the_issue_flags_parse() {
        let a = parse(&[
            "--loss",
            "2%",
            "--burst-loss",
            "--delay",
            "5ms",
            "--jitter",
            "2ms",
            "--rate",
            "20mbit",
            "--outage",
            "5s@10s",
            "--outage",
            "1s@30s",
            "--paths",
            "2",
        ])
        .unwrap();
        let p = a.profile().unwrap();
        assert_eq!(p.paths.len(), 2);
        let d = &p.paths[0].down;
        assert!((d.gilbert.unwrap().average_loss() - 0.02).abs() < 1e-12);
        assert_eq!(d.delay_us, 5000);
        assert_eq!(d.jitter, Jitter::Normal { sigma_us: 2000.0 });
        assert_eq!(d.rate.unwrap().bits_per_s, 20_000_000);
        assert_eq!(d.outages.len(), 2);
        assert_eq!(p.paths[1].up, *d);
        assert_eq!(p.seed, 1);
        assert!(a.is_set());
        assert!(!parse(&[]).unwrap().is_set());
    }

    #[test]
    fn burst_loss_takes_an_optional_length() {
        let a = parse(&["--loss", "1%", "--burst-loss", "10", "--delay", "1ms"]).unwrap();
        let g = a.profile().unwrap().paths[0].down.gilbert.unwrap();
        assert!((g.mean_bad_run() - 10.0).abs() < 1e-9);
        let a = parse(&["--burst-loss", "--loss", "1%"]).unwrap();
        assert_eq!(a.burst_loss, Some(4.0));
    }

    #[test]
    fn direction_scopes_the_flags() {
        let a = parse(&[
            "--loss",
            "5%",
            "--direction",
            "down",
            "--queue",
            "64p",
            "--rate",
            "1M",
        ])
        .unwrap();
        let p = a.profile().unwrap();
        assert_eq!(p.paths[0].down.loss, 0.05);
        assert_eq!(p.paths[0].down.rate.unwrap().queue, QueueLimit::Packets(64));
        assert!(p.paths[0].up.is_passthrough());
    }

    #[test]
    fn bad_values_name_the_flag_and_the_forms() {
        let e = parse(&["--loss", "2"]).unwrap_err().to_string();
        assert!(e.contains("--loss") && e.contains("2%"), "{e}");
        let e = parse(&["--delay", "5"]).unwrap_err().to_string();
        assert!(e.contains("--delay") && e.contains("5ms"), "{e}");
        let e = parse(&["--rate", "20furlongs"]).unwrap_err().to_string();
        assert!(e.contains("--rate") && e.contains("20mbit"), "{e}");
        let e = parse(&["--outage", "5s"]).unwrap_err().to_string();
        assert!(
            e.contains("--outage") && e.contains("DURATION@START"),
            "{e}"
        );
        let e = parse(&["--jitter-dist", "cauchy"]).unwrap_err().to_string();
        assert!(e.contains("normal") && e.contains("pareto"), "{e}");
        let e = parse(&["--paths", "0"]).unwrap_err().to_string();
        assert!(e.contains("--paths"), "{e}");
        // Semantic errors speak in flags, not profile keys.
        let e = parse(&["--burst-loss"]).unwrap().profile().unwrap_err().0;
        assert!(e.contains("--burst-loss") && e.contains("--loss"), "{e}");
        let e = parse(&["--queue", "64p"]).unwrap().profile().unwrap_err().0;
        assert!(e.contains("--queue") && e.contains("--rate"), "{e}");
        let e = parse(&["--pareto-shape", "2"])
            .unwrap()
            .profile()
            .unwrap_err()
            .0;
        assert!(
            e.contains("--pareto-shape") && e.contains("--jitter-dist"),
            "{e}"
        );
        let e = parse(&["--profile", "/nonexistent.toml"])
            .unwrap()
            .profile()
            .unwrap_err()
            .0;
        assert!(e.contains("/nonexistent.toml"), "{e}");
    }

    #[test]
    fn flags_override_a_profile() {
        let dir = std::env::temp_dir().join(format!("untether-netem-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        std::fs::write(&file, "seed = 5\n[both]\nloss = \"1%\"\ndelay = \"10ms\"\n").unwrap();
        let a = parse(&[
            "--profile",
            file.to_str().unwrap(),
            "--delay",
            "3ms",
            "--seed",
            "9",
        ])
        .unwrap();
        let p = a.profile().unwrap();
        assert_eq!(
            (p.paths[0].up.loss, p.paths[0].up.delay_us, p.seed),
            (0.01, 3000, 9)
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
