//! The several-clients figures of docs/BENCHMARKS.md (## Several clients, one stream):
//!
//! 1. host CPU per additional viewer: the test scene at 720p60, 10 Mbit/s, x264 ultrafast, to
//!    a controller (decoding, headless) and N viewers that receive and reassemble but do not
//!    decode (`--no-decode`), CPU of the host's threads read from /proc/self/task/*/stat over
//!    the measured window; with N = 0 and N = VIEWERS;
//! 2. the controller's glass-to-glass (pixel stamps) p50/p99 in the same runs: alone, and with
//!    the viewers attached;
//! 3. viewers joining mid-stream: the keyframe each join asks for (its bytes against the
//!    P-frames around it), and the controller's and another viewer's frame times around the
//!    join.
//!
//! Host, controller and viewers all run in this process on this machine. The viewers stand
//! for other machines: their threads run at nice 10 (`--viewer-nice N` to change it; 0 puts
//! them on equal terms with the host and the controller, which then share the cores with
//! every viewer's receive work).
//!
//! `cargo run --release -p untether --example multi_bench -- [SECONDS] [VIEWERS] [--viewer-nice N]`
//! (defaults 10 s per run, 31 viewers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use untether::client::{ClientIo, ClientOptions, ClientRun, Display};
use untether::config::ConfigToml;
use untether::host::HostSetup;
use untether::identity::{ephemeral_keypair, Access, ClientTrust, HostTrust};
use untether::report::frame_rows;
use untether::stats::percentile;
use untether::{Host, HostOptions, HostSummary};

/// CPU time (user + system, clock ticks) of this process's threads, summed by thread name.
fn thread_ticks() -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After the name: state (field 3) … utime (14), stime (15).
        let t = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        *out.entry(name).or_default() += t(11) + t(12);
    }
    out
}

fn ticks_per_s() -> f64 {
    // SAFETY: a plain query.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// % of one core each thread name used between two readings `secs` apart.
fn cpu_percent(
    a: &HashMap<String, u64>,
    b: &HashMap<String, u64>,
    secs: f64,
) -> HashMap<String, f64> {
    b.iter()
        .map(|(k, v)| {
            let d = v.saturating_sub(a.get(k).copied().unwrap_or(0));
            (k.clone(), d as f64 / ticks_per_s() / secs * 100.0)
        })
        .collect()
}

fn host_options(max_clients: usize) -> HostOptions {
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.host.max_clients = max_clients;
    o
}

/// A client on its own thread until `seconds` pass or `stop` is set.
fn client(
    host: SocketAddr,
    seconds: f64,
    decode: bool,
    name: &str,
    nice: i32,
    stop: &Arc<AtomicBool>,
) -> (String, JoinHandle<ClientRun>) {
    let stop = stop.clone();
    let identity = ephemeral_keypair();
    let fp = untether_proto::fingerprint(&identity.public);
    let mut cfg = ConfigToml::default();
    cfg.client.decode = decode;
    cfg.client.name = name.into();
    // 32 handshakes at once on a busy 2-core box (the viewers at a low priority) take a while.
    cfg.client.connect_timeout_ms = 30_000;
    let options = ClientOptions {
        host,
        client: cfg.client,
        network: cfg.network,
        display: Display::Headless,
        duration: Some(Duration::from_secs_f64(seconds)),
        save_frame: None,
        vr: Default::default(),
    };
    let handle = std::thread::spawn(move || {
        if nice != 0 {
            // The client's threads inherit it (nice is per thread on Linux).
            // SAFETY: a plain syscall on this thread.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
        }
        let (run, error) = untether::client::run_client_to_end(
            &options,
            ClientIo {
                trust: ClientTrust::Memory {
                    identity,
                    host_key: None,
                },
                ..Default::default()
            },
            stop,
        )
        .expect("client starts");
        if let Some(e) = error {
            eprintln!("multi_bench: client {} ended: {e}", options.client.name);
        }
        run
    });
    (fp, handle)
}

fn start_host(max_clients: usize) -> Host {
    Host::start_with(
        host_options(max_clients),
        HostSetup {
            trust: HostTrust::Memory {
                identity: ephemeral_keypair(),
                access: Access::Open,
                allowed: Vec::new(),
            },
            ..Default::default()
        },
    )
    .expect("host starts")
}

fn wait_clients(host: &Host, n: usize) {
    let t = Instant::now();
    while host.client_count() < n {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} of {n} clients connected",
            host.client_count()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Glass-to-glass from the pixel stamps of the frames captured in `[from, to)` (µs, this
/// machine's clock), ms.
fn g2g(run: &ClientRun, from: u64, to: u64) -> Vec<f64> {
    let mut v: Vec<f64> = frame_rows(run)
        .iter()
        .filter(|r| r.captured_us >= from as i64 && r.captured_us < to as i64)
        .filter_map(|r| r.glass_to_glass_pixels_us)
        .map(|us| us as f64 / 1000.0)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

fn pct(v: &[f64], p: f64) -> f64 {
    percentile(v, p).unwrap_or(f64::NAN)
}

struct ViewersRun {
    viewers: usize,
    cpu: HashMap<String, f64>,
    controller: Vec<f64>,
    frames_sent: u64,
    viewer_min_share: f64,
    summary: HostSummary,
}

/// A controller and `viewers` no-decode viewers for `seconds` measured.
fn viewers_run(seconds: f64, viewers: usize, nice: i32) -> ViewersRun {
    let host = start_host(viewers + 1);
    let addr = host.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let long = 120.0 + seconds;
    let (_, controller) = client(addr, long, true, "controller", 0, &stop);
    wait_clients(&host, 1);
    let vs: Vec<(String, JoinHandle<ClientRun>)> = (0..viewers)
        .map(|i| client(addr, long, false, &format!("viewer{i}"), nice, &stop))
        .collect();
    wait_clients(&host, 1 + viewers);
    // Let the joins' keyframes and the first feedback settle.
    std::thread::sleep(Duration::from_secs(2));
    let sent0 = host.summary().sent;
    let (t0, c0) = (untether::clock::now_us(), thread_ticks());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (t1, c1) = (untether::clock::now_us(), thread_ticks());
    let sent1 = host.summary().sent;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let secs = (t1 - t0) as f64 / 1e6;
    let cpu = cpu_percent(&c0, &c1, secs);
    let viewer_runs: Vec<(String, ClientRun)> = vs
        .into_iter()
        .map(|(fp, h)| (fp, h.join().expect("viewer")))
        .collect();
    let run = controller.join().expect("controller");
    let summary = host.stop();
    let frames_sent = sent1 - sent0;
    // Each viewer's complete frames against the frames the host sent it.
    let viewer_min_share = viewer_runs
        .iter()
        .map(|(fp, r)| {
            let sent = summary
                .clients
                .iter()
                .find(|c| &c.fingerprint == fp)
                .map_or(0, |c| c.frames_sent);
            r.stats.frames_complete as f64 / sent.max(1) as f64
        })
        .fold(f64::INFINITY, f64::min);
    ViewersRun {
        viewers,
        cpu,
        controller: g2g(&run, t0, t1),
        frames_sent,
        viewer_min_share: if viewers == 0 {
            f64::NAN
        } else {
            viewer_min_share
        },
        summary,
    }
}

struct Join {
    keyframe_kb: f64,
    p_frame_kb: f64,
    controller_before: Vec<f64>,
    controller_after: Vec<f64>,
    viewer_before: Vec<f64>,
    viewer_after: Vec<f64>,
}

/// A controller and a viewer (both decoding); `joins` more viewers join, one every 2 s.
fn join_run(joins: usize) -> (Vec<Join>, HostSummary) {
    let host = start_host(2 + joins);
    let addr = host.local_addr();
    let total = 4.0 + 2.0 * joins as f64 + 1.0;
    let never = Arc::new(AtomicBool::new(false));
    let (_, controller) = client(addr, total, true, "controller", 0, &never);
    wait_clients(&host, 1);
    let (_, viewer) = client(addr, total, true, "viewer", 0, &never);
    wait_clients(&host, 2);
    std::thread::sleep(Duration::from_secs(3));
    let mut join_times = Vec::new();
    let mut joiners = Vec::new();
    for i in 0..joins {
        join_times.push(untether::clock::now_us());
        joiners.push(client(addr, 1.5, true, &format!("joiner{i}"), 0, &never).1);
        std::thread::sleep(Duration::from_secs(2));
    }
    let joined: Vec<ClientRun> = joiners
        .into_iter()
        .map(|h| h.join().expect("joiner"))
        .collect();
    let run_c = controller.join().expect("controller");
    let run_v = viewer.join().expect("viewer");
    let summary = host.stop();
    let rows = frame_rows(&run_c);
    let joins = join_times
        .iter()
        .zip(&joined)
        .map(|(&t, j)| {
            let at = j.connected_us.unwrap_or(t);
            let key = rows
                .iter()
                .find(|r| r.keyframe && r.captured_us >= at as i64);
            let mut p: Vec<f64> = rows
                .iter()
                .filter(|r| !r.keyframe && (r.captured_us - at as i64).abs() < 1_000_000)
                .map(|r| r.bytes as f64 / 1000.0)
                .collect();
            p.sort_by(f64::total_cmp);
            Join {
                keyframe_kb: key.map_or(f64::NAN, |r| r.bytes as f64 / 1000.0),
                p_frame_kb: pct(&p, 50.0),
                controller_before: g2g(&run_c, at - 1_000_000, at),
                controller_after: g2g(&run_c, at, at + 1_000_000),
                viewer_before: g2g(&run_v, at - 1_000_000, at),
                viewer_after: g2g(&run_v, at, at + 1_000_000),
            }
        })
        .collect();
    (joins, summary)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut nice = 10;
    let mut plain = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--viewer-nice" {
            nice = args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .expect("--viewer-nice N");
            i += 2;
        } else {
            plain.push(args[i].clone());
            i += 1;
        }
    }
    let seconds: f64 = plain.first().and_then(|v| v.parse().ok()).unwrap_or(10.0);
    let viewers: usize = plain.get(1).and_then(|v| v.parse().ok()).unwrap_or(31);
    eprintln!(
        "multi_bench: 720p60 10 Mbit/s x264 ultrafast, {seconds} s per run, 0 and {viewers} \
         no-decode viewers at nice {nice}; load average {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let runs = [
        viewers_run(seconds, 0, nice),
        viewers_run(seconds, viewers, nice),
    ];
    println!("| viewers | host-net CPU (% of a core) | host total (net + encode + scene) | viewers' receive CPU | controller g2g p50 / p99 (ms) | frames | least share a viewer got |");
    println!("|---|---|---|---|---|---|---|");
    let net = |r: &ViewersRun| r.cpu.get("host-net").copied().unwrap_or(0.0);
    let host_total = |r: &ViewersRun| {
        ["host-net", "host-encode", "host-source"]
            .iter()
            .map(|k| r.cpu.get(*k).copied().unwrap_or(0.0))
            .sum::<f64>()
    };
    for r in &runs {
        let client_net = r.cpu.get("client-net").copied().unwrap_or(0.0);
        println!(
            "| {} | {:.1} | {:.1} | {:.1} (controller's and viewers' client-net) | {:.2} / {:.2} | {} | {} |",
            r.viewers,
            net(r),
            host_total(r),
            client_net,
            pct(&r.controller, 50.0),
            pct(&r.controller, 99.0),
            r.frames_sent,
            if r.viewer_min_share.is_nan() {
                "—".to_string()
            } else {
                format!("{:.1} %", r.viewer_min_share * 100.0)
            }
        );
    }
    let per_viewer = (net(&runs[1]) - net(&runs[0])) / viewers.max(1) as f64;
    let per_viewer_total = (host_total(&runs[1]) - host_total(&runs[0])) / viewers.max(1) as f64;
    println!();
    println!(
        "Host CPU per additional viewer: {per_viewer:.2} % of a core (host-net), {per_viewer_total:.2} % (all host threads); \
         controller g2g p50 {:+.2} ms, p99 {:+.2} ms with {viewers} viewers.",
        pct(&runs[1].controller, 50.0) - pct(&runs[0].controller, 50.0),
        pct(&runs[1].controller, 99.0) - pct(&runs[0].controller, 99.0),
    );
    println!(
        "Host with {viewers} viewers: {} frames encoded, {} sent, {} copies, {} keyframes ({} for joins), {} paused, {} dropped.",
        runs[1].summary.encoded,
        runs[1].summary.sent,
        runs[1].summary.frame_copies_sent,
        runs[1].summary.keyframes,
        runs[1].summary.keyframes_for_joins,
        runs[1].summary.viewers_paused,
        runs[1].summary.viewers_dropped,
    );
    let (joins, summary) = join_run(3);
    println!();
    println!("| join | keyframe it asked for (kB) | P-frame median (kB) | controller g2g p50 / max, 1 s before → 1 s after (ms) | other viewer g2g p50 / max, before → after (ms) |");
    println!("|---|---|---|---|---|");
    for (i, j) in joins.iter().enumerate() {
        let max = |v: &[f64]| v.last().copied().unwrap_or(f64::NAN);
        println!(
            "| {} | {:.1} | {:.1} | {:.2} / {:.2} → {:.2} / {:.2} | {:.2} / {:.2} → {:.2} / {:.2} |",
            i + 1,
            j.keyframe_kb,
            j.p_frame_kb,
            pct(&j.controller_before, 50.0),
            max(&j.controller_before),
            pct(&j.controller_after, 50.0),
            max(&j.controller_after),
            pct(&j.viewer_before, 50.0),
            max(&j.viewer_before),
            pct(&j.viewer_after, 50.0),
            max(&j.viewer_after),
        );
    }
    println!();
    println!(
        "Join runs: {} keyframes asked for by joins, {} keyframes in all.",
        summary.keyframes_for_joins, summary.keyframes
    );
}
