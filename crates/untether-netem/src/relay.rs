//! The impairment relay: a UDP forwarder between a listen address and a target that applies an
//! [`Impairment`] to each direction.
//!
//! ```text
//!  client ──up──►  listen socket ─[Impairer up]──► target socket ──► target (e.g. untether host)
//!  client ◄─down── listen socket ◄─[Impairer down]─ target socket ◄── target
//! ```
//!
//! The client's address is learnt from the first datagram arriving on the listen socket and kept:
//! a datagram from any other source is dropped and counted (`dropped_other_source`), so nobody
//! who can reach the listen port can divert the stream to themselves or use the relay as a
//! reflector. [`RelayConfig::follow_source`] restores following the newest source (like a NAT
//! binding; unsafe on a reachable address). Datagrams from the target before any client is
//! known are dropped and counted (`dropped_no_client`). The target sees the relay's own
//! (ephemeral) address, one per relay, so N relays are N distinct paths to it.
//!
//! Each direction runs on its own thread, which receives, asks its [`Impairer`] for a verdict and
//! either sends at once (nothing delayed ahead of it) or keeps the datagram in a timer heap and
//! sends it at its time. Waiting is `ppoll(2)` on the receiving socket with a nanosecond timeout
//! and a 1 ns timer slack (the default 50 µs slack alone would eat half the precision budget),
//! until [`RelayConfig::spin_us`] before the due time; the rest is spun (yielding the CPU each
//! turn), still receiving. With nothing held the thread sleeps in `ppoll` (woken by a datagram, or
//! every 20 ms to look at the stop flag), so an idle relay costs next to no CPU. Measurements:
//! docs/NETEM.md.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use untether_net::{now_us, resolve, Micros, NetError, UdpEndpoint, MAX_DATAGRAM};

use crate::impair::{DropCause, Impairer, Impairment, Verdict};
use crate::profile::{direction_seed, Direction, Profile, DEFAULT_SEED};

/// Longest single wait, so that a stop request is seen within this.
pub const IDLE_WAIT_US: Micros = 20_000;
/// Default time before a due datagram at which the relay stops sleeping and spins. `ppoll` with a
/// 1 ns timer slack oversleeps by 37 µs at the median on the 2-core dev VM; 50 µs of spinning
/// halves the median lateness of delayed sends (≈ 30 µs instead of 60–110) for about the same
/// CPU, where 100–200 µs cost 1.5–3× the CPU for a little more (measurements: docs/NETEM.md).
pub const DEFAULT_SPIN_US: Micros = 50;
/// How often a relay thread reads its own CPU time (a system call) for the counters.
const CPU_READ_US: Micros = 100_000;
/// A send more than this late counts in [`DirectionStats::late_sends`].
pub const LATE_US: Micros = 100;
/// Most payload bytes one direction holds for later delivery; beyond it datagrams are dropped
/// (`dropped_overflow`). 64 MiB is 200 ms at 2.5 Gbit/s.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// What one relay does.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayConfig {
    /// Where clients send to.
    pub listen: SocketAddr,
    /// Where their datagrams go.
    pub target: SocketAddr,
    /// Impairment of target → client.
    pub down: Impairment,
    /// Impairment of client → target.
    pub up: Impairment,
    /// Seed of this relay; each direction's impairer gets a seed derived from it
    /// ([`crate::profile::direction_seed`]).
    pub seed: u64,
    /// How long before a due time the scheduler stops sleeping and spins.
    pub spin_us: Micros,
    /// Follow the newest source address on the listen socket (answers go wherever the last
    /// datagram came from) instead of keeping the first client. Unsafe where others can reach
    /// the listen address: any of them can take the stream over, or bounce the target's
    /// traffic at a forged address. Off by default.
    pub follow_source: bool,
}

impl RelayConfig {
    /// A relay that forwards without impairing anything.
    pub fn new(listen: SocketAddr, target: SocketAddr) -> Self {
        RelayConfig {
            listen,
            target,
            down: Impairment::default(),
            up: Impairment::default(),
            seed: DEFAULT_SEED,
            spin_us: DEFAULT_SPIN_US,
            follow_source: false,
        }
    }
}

/// RelayCounters of one direction, as read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectionStats {
    /// Datagrams received.
    pub received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams sent on (duplicates included).
    pub forwarded: u64,
    /// Bytes sent on.
    pub bytes_forwarded: u64,
    /// Extra copies sent (included in `forwarded`).
    pub duplicated: u64,
    /// Dropped by Bernoulli loss.
    pub dropped_loss: u64,
    /// Dropped by burst loss.
    pub dropped_burst: u64,
    /// Dropped in an outage.
    pub dropped_outage: u64,
    /// Tail-dropped by the rate limiter's queue.
    pub dropped_queue: u64,
    /// Down only: no client address known yet.
    pub dropped_no_client: u64,
    /// Up only: from a source other than the client the relay keeps (see
    /// [`RelayConfig::follow_source`]).
    pub dropped_other_source: u64,
    /// The relay already held [`MAX_HELD_BYTES`].
    pub dropped_overflow: u64,
    /// Sends that failed (full socket buffer, ICMP unreachable from the target, …).
    pub send_errors: u64,
    /// Receives that failed (other than "nothing there").
    pub recv_errors: u64,
    /// Datagrams waiting for their time (after a stop: discarded).
    pub held: u64,
    /// Delayed sends that went out more than [`LATE_US`] after their time.
    pub late_sends: u64,
    /// The latest a delayed send went out after its time, in µs.
    pub max_late_us: u64,
    /// CPU time used by this direction's thread so far, in µs (updated every 0.1 s, and at the
    /// stop).
    pub cpu_us: u64,
}

impl DirectionStats {
    /// Datagrams dropped on purpose (the impairments) or for want of a client.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss
            + self.dropped_burst
            + self.dropped_outage
            + self.dropped_queue
            + self.dropped_no_client
            + self.dropped_other_source
            + self.dropped_overflow
    }
}

impl fmt::Display for DirectionStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in {} ({:.2} MB), out {} ({:.2} MB), dropped {} (loss {}, burst {}, outage {}, queue {}",
            self.received,
            self.bytes_received as f64 / 1e6,
            self.forwarded,
            self.bytes_forwarded as f64 / 1e6,
            self.dropped(),
            self.dropped_loss,
            self.dropped_burst,
            self.dropped_outage,
            self.dropped_queue
        )?;
        if self.dropped_no_client > 0 {
            write!(f, ", no client {}", self.dropped_no_client)?;
        }
        if self.dropped_other_source > 0 {
            write!(f, ", other source {}", self.dropped_other_source)?;
        }
        if self.dropped_overflow > 0 {
            write!(f, ", relay full {}", self.dropped_overflow)?;
        }
        write!(f, "), duplicated {}, held {}", self.duplicated, self.held)?;
        if self.send_errors + self.recv_errors > 0 {
            write!(
                f,
                ", send errors {}, receive errors {}",
                self.send_errors, self.recv_errors
            )?;
        }
        write!(
            f,
            ", late >{}us {} (max {}us), cpu {:.2} s",
            LATE_US,
            self.late_sends,
            self.max_late_us,
            self.cpu_us as f64 / 1e6
        )
    }
}

/// RelayCounters of one relay.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RelayStats {
    /// The relay's listen address.
    pub listen: SocketAddr,
    /// Its target.
    pub target: SocketAddr,
    /// The client it currently sends to.
    pub client: Option<SocketAddr>,
    /// How often the client's address changed after the first (only with
    /// [`RelayConfig::follow_source`]; otherwise 0).
    pub client_changes: u64,
    /// Target → client.
    pub down: DirectionStats,
    /// Client → target.
    pub up: DirectionStats,
}

impl RelayStats {
    /// The counters of direction `d`.
    pub fn direction(&self, d: Direction) -> &DirectionStats {
        match d {
            Direction::Down => &self.down,
            Direction::Up => &self.up,
        }
    }
}

#[derive(Default)]
struct RelayCounters {
    received: AtomicU64,
    bytes_received: AtomicU64,
    forwarded: AtomicU64,
    bytes_forwarded: AtomicU64,
    duplicated: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_burst: AtomicU64,
    dropped_outage: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_no_client: AtomicU64,
    dropped_other_source: AtomicU64,
    dropped_overflow: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
    held: AtomicU64,
    late_sends: AtomicU64,
    max_late_us: AtomicU64,
    cpu_us: AtomicU64,
}

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl RelayCounters {
    fn snapshot(&self) -> DirectionStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectionStats {
            received: g(&self.received),
            bytes_received: g(&self.bytes_received),
            forwarded: g(&self.forwarded),
            bytes_forwarded: g(&self.bytes_forwarded),
            duplicated: g(&self.duplicated),
            dropped_loss: g(&self.dropped_loss),
            dropped_burst: g(&self.dropped_burst),
            dropped_outage: g(&self.dropped_outage),
            dropped_queue: g(&self.dropped_queue),
            dropped_no_client: g(&self.dropped_no_client),
            dropped_other_source: g(&self.dropped_other_source),
            dropped_overflow: g(&self.dropped_overflow),
            send_errors: g(&self.send_errors),
            recv_errors: g(&self.recv_errors),
            held: g(&self.held),
            late_sends: g(&self.late_sends),
            max_late_us: g(&self.max_late_us),
            cpu_us: g(&self.cpu_us),
        }
    }
}

struct Shared {
    stop: AtomicBool,
    client: Mutex<Option<SocketAddr>>,
    client_changes: AtomicU64,
    down: RelayCounters,
    up: RelayCounters,
}

impl Shared {
    fn client(&self) -> MutexGuard<'_, Option<SocketAddr>> {
        // A poisoned lock only means a relay thread panicked; the address in it is still valid.
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counters(&self, d: Direction) -> &RelayCounters {
        match d {
            Direction::Down => &self.down,
            Direction::Up => &self.up,
        }
    }
}

/// A running relay. Dropping it stops it; [`Relay::stop`] also returns the final counters.
pub struct Relay {
    listen: SocketAddr,
    outbound: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("listen", &self.listen)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Binds the listen address and an ephemeral socket towards the target and starts
    /// forwarding; outage windows count from now.
    pub fn start(cfg: RelayConfig) -> Result<Relay, NetError> {
        Self::start_at(cfg, now_us(), 0)
    }

    /// Like [`Relay::start`], with outage windows counting from `start` (a [`now_us`] instant)
    /// and `index` naming the threads (`netem0-down`, …).
    pub fn start_at(cfg: RelayConfig, start: Micros, index: usize) -> Result<Relay, NetError> {
        cfg.down.validate().map_err(invalid)?;
        cfg.up.validate().map_err(invalid)?;
        let listen_sock = UdpEndpoint::bind(cfg.listen)?;
        let target_sock = UdpEndpoint::connect_to(cfg.target)?;
        let listen = listen_sock.local_addr()?;
        let outbound = target_sock.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            client: Mutex::new(None),
            client_changes: AtomicU64::new(0),
            down: RelayCounters::default(),
            up: RelayCounters::default(),
        });
        let mut relay = Relay {
            listen,
            outbound,
            target: cfg.target,
            shared: shared.clone(),
            threads: Vec::new(),
        };
        for dir in Direction::ALL {
            let (rx, tx, imp) = match dir {
                Direction::Up => (listen_sock.try_clone()?, target_sock.try_clone()?, &cfg.up),
                Direction::Down => (
                    target_sock.try_clone()?,
                    listen_sock.try_clone()?,
                    &cfg.down,
                ),
            };
            let worker = Worker {
                dir,
                rx,
                tx,
                imp: Impairer::new(imp.clone(), direction_seed(cfg.seed, dir), start),
                shared: shared.clone(),
                spin_us: cfg.spin_us,
                follow_source: cfg.follow_source,
                heap: BinaryHeap::new(),
                seq: 0,
                held_bytes: 0,
                pool: Vec::new(),
            };
            // On failure `relay` is dropped, which stops the thread already started.
            let handle = std::thread::Builder::new()
                .name(format!("netem{index}-{dir}"))
                .spawn(move || worker.run())?;
            relay.threads.push(handle);
        }
        Ok(relay)
    }

    /// The address clients send to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The relay's own address towards the target: where the target sees its datagrams come
    /// from and sends its answers (an ephemeral port).
    pub fn outbound_addr(&self) -> SocketAddr {
        self.outbound
    }

    /// The target.
    pub fn target_addr(&self) -> SocketAddr {
        self.target
    }

    /// The client currently sent to, once one has been heard.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        *self.shared.client()
    }

    /// The counters now (the relay keeps running).
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            listen: self.listen,
            target: self.target,
            client: self.client_addr(),
            client_changes: self.shared.client_changes.load(Ordering::Relaxed),
            down: self.shared.down.snapshot(),
            up: self.shared.up.snapshot(),
        }
    }

    /// Stops both directions (within [`IDLE_WAIT_US`]); datagrams still held are discarded and
    /// left counted in `held`. Returns the final counters.
    pub fn stop(mut self) -> RelayStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("netem relay {}: a relay thread panicked", self.listen);
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn invalid(e: crate::impair::ImpairError) -> NetError {
    NetError::Io(io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// A datagram waiting for its time. Ordered so that `BinaryHeap` pops the earliest first, and
/// among equal times the first received.
struct Held {
    at: Micros,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// One direction: receive on `rx`, impair, send on `tx`.
struct Worker {
    dir: Direction,
    rx: UdpEndpoint,
    tx: UdpEndpoint,
    imp: Impairer,
    shared: Arc<Shared>,
    spin_us: Micros,
    follow_source: bool,
    heap: BinaryHeap<Held>,
    seq: u64,
    held_bytes: usize,
    /// Buffers of sent datagrams, reused for the next held ones.
    pool: Vec<Vec<u8>>,
}

/// Asks for 1 ns timer slack on this thread so `ppoll` timeouts are not rounded up by 50 µs.
fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only the calling thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        log::debug!("PR_SET_TIMERSLACK failed: {}", io::Error::last_os_error());
    }
}

/// CPU time of the calling thread in µs.
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

impl Worker {
    fn counters(&self) -> &RelayCounters {
        self.shared.counters(self.dir)
    }

    fn run(mut self) {
        tight_timer_slack();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut cpu_read_at = 0;
        while !self.shared.stop.load(Ordering::Relaxed) {
            // Everything waiting in the socket.
            loop {
                match self.rx.try_recv_from(&mut buf) {
                    Ok(Some((n, from))) => self.on_datagram(&buf[..n], from),
                    Ok(None) => break,
                    // An ICMP error from an earlier send to the target: reported once, go on.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        inc(&self.counters().send_errors, 1);
                    }
                    Err(e) => {
                        log::warn!("netem {}: receive failed: {e}", self.dir);
                        inc(&self.counters().recv_errors, 1);
                        break;
                    }
                }
            }
            let now = now_us();
            self.send_due(now);
            let wait = match self.heap.peek() {
                None => IDLE_WAIT_US,
                Some(h) => {
                    let now = now_us();
                    if h.at <= now {
                        continue;
                    }
                    let left = h.at - now;
                    if left <= self.spin_us {
                        // Spin, but let other threads run: on a busy machine a pure spin
                        // competes with the sender and receiver and makes things later.
                        std::thread::yield_now();
                        continue;
                    }
                    (left - self.spin_us).min(IDLE_WAIT_US)
                }
            };
            if now >= cpu_read_at + CPU_READ_US {
                cpu_read_at = now;
                self.counters()
                    .cpu_us
                    .store(thread_cpu_us(), Ordering::Relaxed);
            }
            if let Err(e) = self.rx.wait_readable(Duration::from_micros(wait)) {
                log::warn!("netem {}: ppoll failed: {e}", self.dir);
                inc(&self.counters().recv_errors, 1);
                std::thread::sleep(Duration::from_micros(wait));
            }
        }
        self.counters()
            .cpu_us
            .store(thread_cpu_us(), Ordering::Relaxed);
    }

    fn on_datagram(&mut self, data: &[u8], from: SocketAddr) {
        let n = data.len() as u64;
        {
            let c = self.counters();
            inc(&c.received, 1);
            inc(&c.bytes_received, n);
        }
        if self.dir == Direction::Up {
            let mut client = self.shared.client();
            match *client {
                None => *client = Some(from),
                Some(c) if c == from => {}
                Some(c) if self.follow_source => {
                    inc(&self.shared.client_changes, 1);
                    log::info!("netem: client moved from {c} to {from}");
                    *client = Some(from);
                }
                Some(_) => {
                    drop(client);
                    let c = self.counters();
                    if c.dropped_other_source.fetch_add(1, Ordering::Relaxed) == 0 {
                        log::warn!(
                            "netem: dropping datagrams from {from}: this relay serves the first \
                             client only (--follow-source to follow the newest source)"
                        );
                    }
                    return;
                }
            }
        }
        let now = now_us();
        match self.imp.on_packet(now, data.len()) {
            Verdict::Drop(cause) => {
                let c = self.counters();
                inc(
                    match cause {
                        DropCause::Loss => &c.dropped_loss,
                        DropCause::Burst => &c.dropped_burst,
                        DropCause::Outage => &c.dropped_outage,
                        DropCause::Queue => &c.dropped_queue,
                    },
                    1,
                );
            }
            Verdict::Deliver { at, duplicate_at } => {
                self.deliver(now, at, data);
                if let Some(d) = duplicate_at {
                    inc(&self.counters().duplicated, 1);
                    self.deliver(now, d, data);
                }
            }
        }
    }

    fn deliver(&mut self, now: Micros, at: Micros, data: &[u8]) {
        if at <= now {
            // Anything held that is due goes first, then this one, without a copy.
            self.send_due(now);
            self.send(data);
            return;
        }
        if self.held_bytes + data.len() > MAX_HELD_BYTES {
            inc(&self.counters().dropped_overflow, 1);
            return;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.held_bytes += data.len();
        self.seq += 1;
        self.heap.push(Held {
            at,
            seq: self.seq,
            data: buf,
        });
        inc(&self.counters().held, 1);
    }

    fn send_due(&mut self, now: Micros) {
        while self.heap.peek().is_some_and(|h| h.at <= now) {
            let Some(h) = self.heap.pop() else { break };
            self.held_bytes -= h.data.len();
            self.counters().held.fetch_sub(1, Ordering::Relaxed);
            self.send(&h.data);
            let late = now_us().saturating_sub(h.at);
            let c = self.counters();
            if late > LATE_US {
                inc(&c.late_sends, 1);
            }
            c.max_late_us.fetch_max(late, Ordering::Relaxed);
            if self.pool.len() < 1024 {
                self.pool.push(h.data);
            }
        }
    }

    fn send(&self, data: &[u8]) {
        let c = self.counters();
        let sent = match self.dir {
            Direction::Up => self.tx.try_send(data),
            Direction::Down => match *self.shared.client() {
                Some(client) => self.tx.try_send_to(data, client),
                None => {
                    inc(&c.dropped_no_client, 1);
                    return;
                }
            },
        };
        match sent {
            Ok(_) => {
                inc(&c.forwarded, 1);
                inc(&c.bytes_forwarded, data.len() as u64);
            }
            Err(e) => {
                log::debug!("netem {}: send failed: {e}", self.dir);
                inc(&c.send_errors, 1);
            }
        }
    }
}

/// Several relays, one per path, started together (their outage windows share one start).
#[derive(Debug, Default)]
pub struct RelaySet {
    relays: Vec<Relay>,
}

impl RelaySet {
    /// Starts one relay per configuration.
    pub fn start(configs: Vec<RelayConfig>) -> Result<RelaySet, NetError> {
        let start = now_us();
        let mut set = RelaySet::default();
        for (i, cfg) in configs.into_iter().enumerate() {
            set.relays.push(Relay::start_at(cfg, start, i)?);
        }
        Ok(set)
    }

    /// The configurations for `profile`: path i listens on `listen`'s port + i (or on an
    /// ephemeral port each when `listen`'s port is 0, or where its `[[path]]` entry says) and
    /// forwards to `target` (or its entry's target).
    pub fn configs(
        profile: &Profile,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> Result<Vec<RelayConfig>, NetError> {
        profile
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let listen = match &p.listen {
                    Some(name) => resolve(name, listen.port())?,
                    None if listen.port() == 0 => listen,
                    None => {
                        let port = u16::try_from(listen.port() as usize + i).map_err(|_| {
                            NetError::Resolve {
                                name: listen.to_string(),
                                reason: format!(
                                    "path {}: port {} + {i} is above 65535",
                                    i + 1,
                                    listen.port()
                                ),
                            }
                        })?;
                        SocketAddr::new(listen.ip(), port)
                    }
                };
                let target = match &p.target {
                    Some(name) => resolve(name, target.port())?,
                    None => target,
                };
                Ok(RelayConfig {
                    listen,
                    target,
                    down: p.down.clone(),
                    up: p.up.clone(),
                    seed: p.seed,
                    spin_us: DEFAULT_SPIN_US,
                    follow_source: false,
                })
            })
            .collect()
    }

    /// Starts the relays of `profile` (see [`RelaySet::configs`]).
    pub fn from_profile(
        profile: &Profile,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> Result<RelaySet, NetError> {
        Self::start(Self::configs(profile, listen, target)?)
    }

    /// The relays, in path order.
    pub fn relays(&self) -> &[Relay] {
        &self.relays
    }

    /// The listen address of each path.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.relays.iter().map(Relay::listen_addr).collect()
    }

    /// The counters of each relay now.
    pub fn stats(&self) -> Vec<RelayStats> {
        self.relays.iter().map(Relay::stats).collect()
    }

    /// Stops every relay and returns their final counters.
    pub fn stop(self) -> Vec<RelayStats> {
        self.relays.into_iter().map(Relay::stop).collect()
    }
}
