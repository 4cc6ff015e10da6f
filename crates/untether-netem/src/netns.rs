//! Two machines on one box: a [`Testbed`] is two network namespaces (host side, client side)
//! joined by a veth pair, optionally rate-limited by tbf on both ends.
//!
//! - Names never collide with anything else: namespaces `utb-<pid>-<n>-host` and
//!   `utb-<pid>-<n>-client`, veth ends `utb<pid hex><n>h` / `…c` (≤ 15 characters).
//! - Addresses: `10.77.<k>.1/30` (host) and `10.77.<k>.2/30` (client), k from pid and n.
//! - Always torn down: on drop, by [`Testbed::teardown`], and on SIGINT/SIGTERM/SIGHUP once
//!   [`install_signal_cleanup`] ran (the process then exits with 128 + signal). After a
//!   SIGKILL nothing can run in the process: [`cleanup_stale`] removes the namespaces of pids
//!   that are gone.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2's `ip` and `tc`.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Which end of the testbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The host's namespace.
    Host,
    /// The client's namespace.
    Client,
}

/// A testbed could not be built or entered.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A command failed; its stderr says why.
    #[error("`{command}` failed: {stderr}{hint}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed.
        stderr: String,
        /// "needs root" when that is the cause.
        hint: &'static str,
    },
    /// The rate is not a rate.
    #[error("rate {0:?}: {1} (e.g. 20mbit, 500kbit)")]
    Rate(String, crate::units::ParseError),
    /// The signal handler cannot be installed ([`install_signal_cleanup`]).
    #[error("cannot install the signal handler: {0}")]
    SignalHandler(ctrlc::Error),
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {0}: {1}")]
    Enter(String, std::io::Error),
    /// The loss is not a fraction in [0, 1).
    #[error("loss {0}: must be at least 0 and below 1 (e.g. 0.02 for 2 %)")]
    Loss(f64),
}

/// Namespaces created by this process and not yet removed (for the signal handler).
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NEXT: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "utb-";
/// The loss rule draws a random number below this and drops under the threshold.
const LOSS_SCALE: u64 = 1_000_000;

fn run(args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new(args[0]).args(&args[1..]).output();
    let command = args.join(" ");
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr).trim().to_string();
            let denied = stderr.contains("Operation not permitted") || stderr.contains("ermission");
            Err(NetnsError::Command {
                command,
                stderr,
                hint: if denied {
                    " (needs root: CAP_NET_ADMIN)"
                } else {
                    ""
                },
            })
        }
        Err(e) => Err(NetnsError::Command {
            command,
            stderr: e.to_string(),
            hint: " (is iproute2 installed? scripts/setup.sh installs it)",
        }),
    }
}

fn delete_ns(name: &str) {
    if let Err(e) = run(&["ip", "netns", "delete", name]) {
        log::warn!("netns teardown: {e}");
    }
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|n| n != name);
    }
}

/// `tc qdisc VERB dev DEV root tbf …` in namespace `ns`: burst 10 ms at the rate (at least
/// 16 KB, a few MTU-sized packets), queue 50 ms at the rate.
fn tbf(ns: &str, dev: &str, bps: u64, verb: &str) -> Result<(), NetnsError> {
    let burst = (bps / 8 / 100).max(16_384);
    run(&[
        "ip",
        "netns",
        "exec",
        ns,
        "tc",
        "qdisc",
        verb,
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        &format!("{bps}bit"),
        "burst",
        &burst.to_string(),
        "latency",
        "50ms",
    ])
}

/// Waits until `dev` in `ns` is operationally up (IFF_RUNNING, `state UP`), at most 5 s.
///
/// `ip link set up` returns before the kernel's link watcher marks the carrier, which it does
/// later (batched, up to a second under load). Until then the interface is up but not running:
/// programs that list "up and running" interfaces at start, such as mDNS responders and
/// browsers (mdns-sd), leave it out and hear nothing on it until they look again.
fn wait_running(ns: &str, dev: &str) -> Result<(), NetnsError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", dev])
            .output();
        let line = out
            .as_ref()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if line.contains(" state UP ") {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(NetnsError::Command {
                command: format!("ip -n {ns} link show dev {dev}"),
                stderr: format!("not running 5 s after `ip link set up`: {}", line.trim()),
                hint: "",
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Two namespaces joined by a veth pair (see the module docs).
#[derive(Debug)]
pub struct Testbed {
    host_ns: String,
    client_ns: String,
    host_addr: Ipv4Addr,
    client_addr: Ipv4Addr,
    rate: Option<String>,
    /// The veth ends (host side, client side).
    devs: (String, String),
    torn_down: bool,
}

impl Testbed {
    /// Builds a testbed; `rate` (e.g. "20mbit") puts a tbf on both veth ends. On any failure
    /// whatever was already created is removed before the error returns.
    pub fn create(rate: Option<&str>) -> Result<Testbed, NetnsError> {
        let rate_bps = match rate {
            Some(r) => Some(crate::units::rate_bps(r).map_err(|e| NetnsError::Rate(r.into(), e))?),
            None => None,
        };
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let host_ns = format!("{PREFIX}{pid}-{n}-host");
        let client_ns = format!("{PREFIX}{pid}-{n}-client");
        let k = ((pid.wrapping_mul(31).wrapping_add(n)) % 63) as u8;
        let third = (pid.wrapping_add(n) % 250) as u8 + 1;
        let (host_addr, client_addr) = (
            Ipv4Addr::new(10, 77, third, 4 * k + 1),
            Ipv4Addr::new(10, 77, third, 4 * k + 2),
        );
        let mut tb = Testbed {
            host_ns,
            client_ns,
            host_addr,
            client_addr,
            rate: rate.map(str::to_string),
            devs: (format!("utb{pid:x}{n}h"), format!("utb{pid:x}{n}c")),
            torn_down: false,
        };
        tb.build(pid, n, rate_bps).inspect_err(|_| tb.remove())?;
        Ok(tb)
    }

    fn build(&mut self, pid: u32, n: u32, rate_bps: Option<u64>) -> Result<(), NetnsError> {
        let (vh, vc) = self.devs.clone();
        debug_assert!(vh.len() <= 15 && vh == format!("utb{pid:x}{n}h"));
        for ns in [&self.host_ns, &self.client_ns] {
            run(&["ip", "netns", "add", ns])?;
            if let Ok(mut live) = LIVE.lock() {
                live.push(ns.clone());
            }
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        run(&[
            "ip",
            "link",
            "add",
            &vh,
            "netns",
            &self.host_ns,
            "type",
            "veth",
            "peer",
            "name",
            &vc,
            "netns",
            &self.client_ns,
        ])?;
        for (ns, dev, addr) in [
            (&self.host_ns, &vh, self.host_addr),
            (&self.client_ns, &vc, self.client_addr),
        ] {
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/30"),
                "dev",
                dev,
            ])?;
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            if let Some(bps) = rate_bps {
                tbf(ns, dev, bps, "add")?;
            }
        }
        for (ns, dev) in [(&self.host_ns, &vh), (&self.client_ns, &vc)] {
            wait_running(ns, dev)?;
        }
        Ok(())
    }

    /// Changes the tbf rate limit on both veth ends (adds one if there was none), e.g. to
    /// drop the link from 20 to 5 Mbit/s mid-run. [`rate`](Self::rate) stays the initial one.
    pub fn set_rate(&self, rate: &str) -> Result<(), NetnsError> {
        let bps = crate::units::rate_bps(rate).map_err(|e| NetnsError::Rate(rate.into(), e))?;
        tbf(&self.host_ns, &self.devs.0, bps, "replace")?;
        tbf(&self.client_ns, &self.devs.1, bps, "replace")
    }

    /// Drops each packet arriving on either veth end with probability `fraction`, independently
    /// (Bernoulli loss in the kernel: an nftables `numgen random` rule in each namespace's
    /// input hook), so kernel TCP and UDP alike lose real packets, in both directions. The
    /// kernel here has no netem; this is its loss without the delay. Replaces an earlier loss.
    pub fn set_loss(&self, fraction: f64) -> Result<(), NetnsError> {
        if !(0.0..1.0).contains(&fraction) || fraction.is_nan() {
            return Err(NetnsError::Loss(fraction));
        }
        let threshold = (fraction * LOSS_SCALE as f64).round() as u64;
        for (ns, dev) in [
            (&self.host_ns, &self.devs.0),
            (&self.client_ns, &self.devs.1),
        ] {
            // `nft` takes several commands separated by ';' as one argument list. Deleting the
            // table first makes this a replacement (`add` is a no-op on an existing table).
            let script = format!(
                "add table inet utb; delete table inet utb; add table inet utb; \
                 add chain inet utb input {{ type filter hook input priority 0 ; policy accept ; }} ; \
                 add rule inet utb input iifname \"{dev}\" numgen random mod {LOSS_SCALE} < {threshold} counter drop"
            );
            run(&["ip", "netns", "exec", ns, "nft", &script]).map_err(|e| match e {
                NetnsError::Command {
                    command, stderr, ..
                } if stderr.contains("No such file") || stderr.contains("not found") => {
                    NetnsError::Command {
                        command,
                        stderr,
                        hint: " (is nftables installed? scripts/setup.sh installs it)",
                    }
                }
                e => e,
            })?;
        }
        Ok(())
    }

    /// Packets the loss rules dropped so far (host side's input, client side's input).
    pub fn loss_counts(&self) -> (u64, u64) {
        let count = |ns: &str| -> u64 {
            Command::new("ip")
                .args(["netns", "exec", ns, "nft", "list", "table", "inet", "utb"])
                .output()
                .ok()
                .and_then(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned();
                    let i = text.find("counter packets ")? + "counter packets ".len();
                    text[i..].split_whitespace().next()?.parse().ok()
                })
                .unwrap_or(0)
        };
        (count(&self.host_ns), count(&self.client_ns))
    }

    fn remove(&mut self) {
        if !self.torn_down {
            self.torn_down = true;
            // Deleting a namespace deletes its veth end, and with it the peer.
            delete_ns(&self.host_ns);
            delete_ns(&self.client_ns);
        }
    }

    /// The host side's address.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The client side's address.
    pub fn client_addr(&self) -> Ipv4Addr {
        self.client_addr
    }

    /// The namespace of `side`.
    pub fn namespace(&self, side: Side) -> &str {
        match side {
            Side::Host => &self.host_ns,
            Side::Client => &self.client_ns,
        }
    }

    /// The tbf rate, as given.
    pub fn rate(&self) -> Option<&str> {
        self.rate.as_deref()
    }

    /// A command that runs `program` inside `side`'s namespace (`ip netns exec`).
    pub fn command(&self, side: Side, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.namespace(side)]).arg(program);
        c
    }

    /// Moves the calling thread into `side`'s namespace: sockets it creates afterwards live
    /// there, and threads it spawns afterwards inherit the namespace.
    pub fn enter(&self, side: Side) -> Result<(), NetnsError> {
        use std::os::fd::AsRawFd;
        let name = self.namespace(side);
        let f = std::fs::File::open(format!("/var/run/netns/{name}"))
            .map_err(|e| NetnsError::Enter(name.into(), e))?;
        // SAFETY: a valid namespace fd; setns affects only the calling thread.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(NetnsError::Enter(
                name.into(),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Removes both namespaces (also done on drop).
    pub fn teardown(mut self) {
        self.remove();
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes every namespace this process created and has not removed yet.
pub fn teardown_all() {
    let names: Vec<String> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for n in names {
        delete_ns(&n);
    }
}

/// On SIGINT, SIGTERM or SIGHUP: calls `also` (e.g. to note the stop), tears down every live
/// testbed of this process and exits with 128 + signal. Installs the process's one `ctrlc`
/// handler: call it once, instead of any other Ctrl-C handler.
pub fn install_signal_cleanup(also: impl Fn() + Send + 'static) -> Result<(), NetnsError> {
    ctrlc::set_handler(move || {
        also();
        teardown_all();
        std::process::exit(130);
    })
    .map_err(NetnsError::SignalHandler)
}

/// Removes `utb-<pid>-…` namespaces whose process is gone (killed with SIGKILL); returns
/// their names.
pub fn cleanup_stale() -> Result<Vec<String>, NetnsError> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| NetnsError::Command {
            command: "ip netns list".into(),
            stderr: e.to_string(),
            hint: " (is iproute2 installed?)",
        })?;
    let mut removed = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        run(&["ip", "netns", "delete", name])?;
        removed.push(name.to_string());
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> bool {
        // SAFETY: no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_datagram_crosses_the_veth_pair_and_teardown_removes_everything() {
        if !root() {
            eprintln!("skipped: needs root");
            return;
        }
        let tb = Testbed::create(Some("8mbit")).unwrap();
        let (h, c) = (tb.host_addr(), tb.client_addr());
        let names = (
            tb.namespace(Side::Host).to_string(),
            tb.namespace(Side::Client).to_string(),
        );
        let got = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                tb.enter(Side::Client).unwrap();
                let sock = std::net::UdpSocket::bind((c, 40_000)).unwrap();
                sock.set_read_timeout(Some(std::time::Duration::from_secs(3)))
                    .unwrap();
                let mut b = [0u8; 16];
                let (n, from) = sock.recv_from(&mut b).unwrap();
                (b[..n].to_vec(), from)
            });
            std::thread::sleep(std::time::Duration::from_millis(200));
            s.spawn(|| {
                tb.enter(Side::Host).unwrap();
                let sock = std::net::UdpSocket::bind((h, 0)).unwrap();
                sock.send_to(b"frame", (c, 40_000)).unwrap();
            })
            .join()
            .unwrap();
            rx.join().unwrap()
        });
        assert_eq!(got.0, b"frame");
        assert_eq!(got.1.ip(), std::net::IpAddr::V4(h));
        let q = tb
            .command(Side::Host, "tc")
            .args(["qdisc", "show"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&q.stdout).contains("tbf"));
        tb.teardown();
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(
            !list.contains(&names.0) && !list.contains(&names.1),
            "{list}"
        );
    }

    #[test]
    fn kernel_loss_drops_the_configured_fraction_each_way() {
        if !root() {
            eprintln!("skipped: needs root");
            return;
        }
        let tb = Testbed::create(None).unwrap();
        assert!(matches!(tb.set_loss(1.5), Err(NetnsError::Loss(_))));
        tb.set_loss(0.9).unwrap();
        // Replacing the rule, not adding a second one.
        tb.set_loss(0.25).unwrap();
        let (h, c) = (tb.host_addr(), tb.client_addr());
        const N: usize = 4000;
        let got = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                tb.enter(Side::Client).unwrap();
                let sock = std::net::UdpSocket::bind((c, 40_001)).unwrap();
                sock.set_read_timeout(Some(std::time::Duration::from_millis(500)))
                    .unwrap();
                let mut b = [0u8; 16];
                let mut n = 0;
                while sock.recv_from(&mut b).is_ok() {
                    n += 1;
                }
                n
            });
            std::thread::sleep(std::time::Duration::from_millis(200));
            s.spawn(|| {
                tb.enter(Side::Host).unwrap();
                let sock = std::net::UdpSocket::bind((h, 0)).unwrap();
                for i in 0..N {
                    sock.send_to(&(i as u32).to_le_bytes(), (c, 40_001))
                        .unwrap();
                    if i % 50 == 49 {
                        // Do not overflow the receiver's socket buffer.
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            })
            .join()
            .unwrap();
            rx.join().unwrap()
        });
        let (_, dropped_at_client) = tb.loss_counts();
        // 25 % ± 3 % (about 4 standard deviations for 4000 Bernoulli trials), and every
        // datagram is either received or counted by the rule.
        let lost = N - got;
        assert!((880..=1120).contains(&lost), "lost {lost} of {N}");
        assert_eq!(dropped_at_client as usize, lost);
    }

    #[test]
    fn a_bad_rate_is_named() {
        let e = Testbed::create(Some("fast")).unwrap_err().to_string();
        assert!(e.contains("fast") && e.contains("mbit"), "{e}");
    }
}
