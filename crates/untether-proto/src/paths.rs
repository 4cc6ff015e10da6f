//! Multipath: the host's view of the paths to one client, and the scheduler that picks which
//! paths carry each datagram.
//!
//! A **path** is one address the client's datagrams come from (one client interface or socket,
//! or one relay). Path 0 is the address of the handshake. When an authenticated datagram of the
//! session arrives from a new address, the host adds it (up to [`MAX_PATHS`]) as an
//! *unvalidated* path and sends it a PathChallenge; the path carries data once the client's
//! PathResponse comes back from that same address (so a spoofed or replayed source cannot make
//! the host stream at a victim; an unvalidated path receives at most 3× the bytes it sent).
//!
//! With more than one path the host probes every path with a PathChallenge every
//! [`PathConfig::probe_interval_us`]: the answers give each path's smoothed RTT (the delay
//! estimate of the `lowest-delay` scheduler, one-way ≈ RTT/2 on a symmetric link) and its
//! liveness: a path whose last answer is older than [`PathConfig::timeout_us`] is **dead**; it
//! keeps being probed and comes back with its next answer. The session itself only ends on the
//! idle timeout (nothing heard on any path).

use std::net::SocketAddr;

use crate::Micros;

/// The most paths of one session.
pub const MAX_PATHS: usize = 4;
/// Challenges outstanding per path (answers to older ones are ignored).
const OUTSTANDING: usize = 8;
/// An unvalidated path that has not answered this many challenges is dropped.
const MAX_UNANSWERED_CHALLENGES: u32 = 20;
/// Smoothing of the per-path RTT (weight of a new sample), as TCP's 1/8.
const SRTT_GAIN: f64 = 0.125;
/// `lowest-delay` moves to another path only when its RTT is this much lower (fraction) …
const SWITCH_MARGIN: f64 = 0.2;
/// … plus this (µs): on a LAN two paths differ by noise only.
const SWITCH_MIN_US: f64 = 200.0;

/// Which paths carry a datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Scheduler {
    /// Every datagram on every live path; the receiver keeps the first copy.
    #[default]
    Redundant,
    /// Keyframe shards, control and audio on every live path; other shards on the path with
    /// the lowest delay.
    Keyframes,
    /// Every datagram on the live path with the lowest delay estimate.
    LowestDelay,
}

/// A scheduler name that is not one of [`Scheduler::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown scheduler {0:?}; allowed: {names}", names = Scheduler::NAMES)]
pub struct UnknownScheduler(pub String);

impl Scheduler {
    pub const NAMES: &'static str = "redundant, keyframes, lowest-delay";

    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Redundant => "redundant",
            Scheduler::Keyframes => "keyframes",
            Scheduler::LowestDelay => "lowest-delay",
        }
    }

    /// Parses a scheduler name; the error lists the allowed ones.
    pub fn parse(s: &str) -> Result<Scheduler, UnknownScheduler> {
        match s.trim() {
            "redundant" => Ok(Scheduler::Redundant),
            "keyframes" => Ok(Scheduler::Keyframes),
            "lowest-delay" => Ok(Scheduler::LowestDelay),
            other => Err(UnknownScheduler(other.to_string())),
        }
    }
}

/// What a datagram carries, as far as the scheduler cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A data or parity shard of a keyframe.
    KeyframeShard,
    /// A shard of any other frame.
    Shard,
    /// Control (acks, pongs, timing, keep-alives) and audio.
    Control,
}

/// Multipath settings of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathConfig {
    pub scheduler: Scheduler,
    /// Interval of PathChallenge probes on each path (only while there is more than one).
    pub probe_interval_us: Micros,
    /// A path with no answer for this long is dead (not scheduled) until it answers again.
    pub timeout_us: Micros,
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            scheduler: Scheduler::Redundant,
            probe_interval_us: 100_000,
            timeout_us: 500_000,
        }
    }
}

/// Counters and state of one path, for reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathStats {
    pub addr: SocketAddr,
    pub validated: bool,
    pub alive: bool,
    /// Smoothed RTT of the path's probes.
    pub srtt_us: Option<u64>,
    pub min_rtt_us: Option<u64>,
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    /// Authenticated datagrams received from the path (including copies the window dropped).
    pub datagrams_received: u64,
    pub probes_sent: u64,
    pub probes_answered: u64,
    /// Times the path was declared dead.
    pub deaths: u64,
}

#[derive(Clone, Debug)]
struct Path {
    stats: PathStats,
    srtt: Option<f64>,
    last_answer_us: Micros,
    next_probe_us: Micros,
    outstanding: [(u64, Micros); OUTSTANDING],
    next_slot: usize,
    unanswered: u32,
    /// Anti-amplification while unvalidated.
    bytes_received: u64,
    was_alive: bool,
}

impl Path {
    fn new(addr: SocketAddr, now: Micros, validated: bool) -> Path {
        Path {
            stats: PathStats {
                addr,
                validated,
                alive: validated,
                srtt_us: None,
                min_rtt_us: None,
                datagrams_sent: 0,
                bytes_sent: 0,
                datagrams_received: 0,
                probes_sent: 0,
                probes_answered: 0,
                deaths: 0,
            },
            srtt: None,
            // A validated path counts as answered when it appears.
            last_answer_us: now,
            next_probe_us: now,
            outstanding: [(0, 0); OUTSTANDING],
            next_slot: 0,
            unanswered: 0,
            bytes_received: 0,
            was_alive: validated,
        }
    }
}

/// The paths of one session and the scheduler.
#[derive(Clone, Debug)]
pub struct PathSet {
    cfg: PathConfig,
    paths: Vec<Path>,
    next_token: u64,
    /// The path the single-path choices went on last (hysteresis: datagrams of one frame
    /// should not alternate between two paths of about the same delay and arrive reordered).
    current: usize,
}

impl PathSet {
    /// A session's paths, starting with the (validated) handshake address.
    pub fn new(cfg: PathConfig, primary: SocketAddr, now: Micros, token_seed: u64) -> PathSet {
        PathSet {
            cfg,
            paths: vec![Path::new(primary, now, true)],
            next_token: token_seed | 1,
            current: 0,
        }
    }

    pub fn config(&self) -> PathConfig {
        self.cfg
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The path whose address is `addr`.
    pub fn find(&self, addr: SocketAddr) -> Option<usize> {
        self.paths.iter().position(|p| p.stats.addr == addr)
    }

    /// Whether more than one path is in use (probing is on).
    pub fn is_multipath(&self) -> bool {
        self.paths.len() > 1
    }

    fn alive_at(&self, p: &Path, now: Micros) -> bool {
        p.stats.validated
            && (!self.is_multipath() || now.saturating_sub(p.last_answer_us) < self.cfg.timeout_us)
    }

    /// Notes an authenticated datagram of `len` bytes from path `i`.
    pub fn on_received(&mut self, i: usize, len: usize) {
        if let Some(p) = self.paths.get_mut(i) {
            p.stats.datagrams_received += 1;
            p.bytes_received += len as u64;
        }
    }

    /// Adds `addr` as an unvalidated path after an authenticated datagram came from it; when
    /// all [`MAX_PATHS`] are taken, a dead path (or an unvalidated one) makes room. Returns
    /// its index, or None when there is no room.
    pub fn add(&mut self, addr: SocketAddr, now: Micros) -> Option<usize> {
        if let Some(i) = self.find(addr) {
            return Some(i);
        }
        if self.paths.len() >= MAX_PATHS {
            // Never evict path 0 while it is alive; prefer the path silent the longest.
            let victim = (0..self.paths.len())
                .filter(|&i| {
                    let p = &self.paths[i];
                    !p.stats.validated || !self.alive_at(p, now)
                })
                .min_by_key(|&i| self.paths[i].last_answer_us)?;
            self.paths.remove(victim);
        }
        self.paths.push(Path::new(addr, now, false));
        Some(self.paths.len() - 1)
    }

    /// A PathResponse with `token` came from `from`: validates the path, samples its RTT.
    /// False when it answers nothing we asked (a stale or forged token, another address).
    pub fn on_response(&mut self, now: Micros, from: SocketAddr, token: u64) -> bool {
        let Some(i) = self.find(from) else {
            return false;
        };
        let p = &mut self.paths[i];
        let Some(slot) = p
            .outstanding
            .iter()
            .position(|&(t, _)| t == token && t != 0)
        else {
            return false;
        };
        let sent = p.outstanding[slot].1;
        p.outstanding[slot] = (0, 0);
        let rtt = now.saturating_sub(sent);
        p.srtt = Some(match p.srtt {
            None => rtt as f64,
            Some(s) => s + SRTT_GAIN * (rtt as f64 - s),
        });
        p.stats.srtt_us = p.srtt.map(|s| s.round() as u64);
        p.stats.min_rtt_us = Some(p.stats.min_rtt_us.map_or(rtt, |m| m.min(rtt)));
        p.stats.probes_answered += 1;
        p.stats.validated = true;
        p.last_answer_us = now;
        p.unanswered = 0;
        true
    }

    /// Challenges due now: `(address, token)` for each, to send as a PathChallenge. With one
    /// path there are none.
    pub fn due_challenges(&mut self, now: Micros, out: &mut Vec<(SocketAddr, u64)>) {
        if !self.is_multipath() {
            return;
        }
        let interval = self.cfg.probe_interval_us.max(1);
        let mut i = 0;
        while i < self.paths.len() {
            let p = &mut self.paths[i];
            if now < p.next_probe_us {
                i += 1;
                continue;
            }
            if !p.stats.validated {
                // Anti-amplification: a challenge is ~60 bytes.
                let sent = p.stats.bytes_sent;
                if sent + 64 > 3 * p.bytes_received || p.unanswered >= MAX_UNANSWERED_CHALLENGES {
                    if p.unanswered >= MAX_UNANSWERED_CHALLENGES {
                        self.paths.remove(i);
                        continue;
                    }
                    p.next_probe_us = now + interval;
                    i += 1;
                    continue;
                }
            }
            let token = self.next_token;
            self.next_token = self
                .next_token
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                | 1;
            p.outstanding[p.next_slot] = (token, now);
            p.next_slot = (p.next_slot + 1) % OUTSTANDING;
            p.unanswered += 1;
            p.stats.probes_sent += 1;
            p.next_probe_us = now + interval;
            out.push((p.stats.addr, token));
            i += 1;
        }
    }

    /// Updates liveness (counting deaths); call from the timer.
    pub fn update(&mut self, now: Micros) {
        for i in 0..self.paths.len() {
            let alive = self.alive_at(&self.paths[i], now);
            let p = &mut self.paths[i];
            if p.was_alive && !alive {
                p.stats.deaths += 1;
            }
            p.was_alive = alive;
            p.stats.alive = alive;
        }
    }

    /// When the next challenge or liveness change is due (only with several paths).
    pub fn next_timeout(&self) -> Option<Micros> {
        if !self.is_multipath() {
            return None;
        }
        self.paths
            .iter()
            .map(|p| {
                let death = p.last_answer_us + self.cfg.timeout_us;
                if p.was_alive {
                    p.next_probe_us.min(death)
                } else {
                    p.next_probe_us
                }
            })
            .min()
    }

    /// The path for single-path choices: the current one while it is alive and no other is
    /// faster by more than [`SWITCH_MARGIN`]; else [`best`](Self::best).
    fn choose(&mut self, now: Micros) -> usize {
        let best = self.best(now);
        let cur = self.current;
        let keep = cur < self.paths.len()
            && self.alive_at(&self.paths[cur], now)
            && match (self.paths[cur].srtt, self.paths[best].srtt) {
                (Some(c), Some(b)) => b > c * (1.0 - SWITCH_MARGIN) - SWITCH_MIN_US,
                (None, Some(_)) => false,
                _ => true,
            };
        if !keep {
            self.current = best;
        }
        self.current
    }

    /// The live path with the lowest smoothed RTT (path order breaks ties; a path without a
    /// sample ranks after those with one); when none is alive, the one heard from last.
    fn best(&self, now: Micros) -> usize {
        let alive = (0..self.paths.len()).filter(|&i| self.alive_at(&self.paths[i], now));
        alive
            .min_by(|&a, &b| {
                let key = |i: usize| self.paths[i].srtt.unwrap_or(f64::MAX);
                key(a).total_cmp(&key(b)).then(a.cmp(&b))
            })
            .unwrap_or_else(|| {
                (0..self.paths.len())
                    .filter(|&i| self.paths[i].stats.validated)
                    .max_by_key(|&i| self.paths[i].last_answer_us)
                    .unwrap_or(0)
            })
    }

    /// The indices of the paths that carry a datagram of `class` (at least one).
    pub fn schedule(&mut self, class: Class, now: Micros, out: &mut Vec<usize>) {
        out.clear();
        if self.paths.len() <= 1 {
            out.push(0);
            return;
        }
        let all = match (self.cfg.scheduler, class) {
            (Scheduler::Redundant, _) => true,
            (Scheduler::Keyframes, Class::KeyframeShard | Class::Control) => true,
            (Scheduler::Keyframes, Class::Shard) | (Scheduler::LowestDelay, _) => false,
        };
        if all {
            out.extend((0..self.paths.len()).filter(|&i| self.alive_at(&self.paths[i], now)));
        }
        if out.is_empty() {
            let i = self.choose(now);
            out.push(i);
        }
    }

    /// The address of path `i`.
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        self.paths.get(i).map(|p| p.stats.addr)
    }

    /// Counts a datagram sent on path `i`.
    pub fn on_sent(&mut self, i: usize, len: usize) {
        if let Some(p) = self.paths.get_mut(i) {
            p.stats.datagrams_sent += 1;
            p.stats.bytes_sent += len as u64;
        }
    }

    pub fn stats(&self) -> Vec<PathStats> {
        self.paths.iter().map(|p| p.stats).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddr {
        ([10, 0, 0, 1], port).into()
    }

    fn two_paths(s: Scheduler) -> PathSet {
        let cfg = PathConfig {
            scheduler: s,
            ..Default::default()
        };
        let mut ps = PathSet::new(cfg, a(1), 0, 7);
        ps.on_received(0, 1000);
        let i = ps.add(a(2), 0).unwrap();
        ps.on_received(i, 1000);
        let mut ch = Vec::new();
        ps.due_challenges(0, &mut ch);
        assert_eq!(ch.len(), 2);
        // Path 0 answers in 10 ms, path 1 in 4 ms.
        assert!(ps.on_response(10_000, ch[0].0, ch[0].1));
        assert!(ps.on_response(4_000, ch[1].0, ch[1].1));
        ps.update(10_000);
        ps
    }

    #[test]
    fn a_new_path_is_unvalidated_until_it_answers_from_its_own_address() {
        let mut ps = PathSet::new(PathConfig::default(), a(1), 0, 7);
        assert!(!ps.is_multipath());
        let mut out = Vec::new();
        ps.schedule(Class::Shard, 0, &mut out);
        assert_eq!(out, vec![0]);
        ps.on_received(0, 1200);
        let i = ps.add(a(2), 0).unwrap();
        ps.on_received(i, 1200);
        ps.schedule(Class::Control, 0, &mut out);
        assert_eq!(out, vec![0], "unvalidated path carries nothing");
        let mut ch = Vec::new();
        ps.due_challenges(0, &mut ch);
        let (addr, token) = ch.iter().copied().find(|c| c.0 == a(2)).unwrap();
        // The right token from the wrong address, or a wrong token, validates nothing.
        assert!(!ps.on_response(1000, a(3), token));
        assert!(!ps.on_response(1000, addr, token ^ 2));
        assert!(ps.on_response(1000, addr, token));
        assert!(!ps.on_response(1001, addr, token), "an answer counts once");
        ps.schedule(Class::Control, 1000, &mut out);
        assert_eq!(out, vec![0, 1]);
    }

    #[test]
    fn an_unknown_scheduler_names_the_allowed_ones() {
        assert_eq!(Scheduler::parse(" keyframes "), Ok(Scheduler::Keyframes));
        let e = Scheduler::parse("fastest").unwrap_err();
        assert_eq!(e, UnknownScheduler("fastest".into()));
        assert_eq!(
            e.to_string(),
            r#"unknown scheduler "fastest"; allowed: redundant, keyframes, lowest-delay"#
        );
    }

    #[test]
    fn schedulers_pick_their_paths() {
        let now = 10_000;
        let mut out = Vec::new();
        let mut ps = two_paths(Scheduler::Redundant);
        ps.schedule(Class::Shard, now, &mut out);
        assert_eq!(out, vec![0, 1]);
        let mut ps = two_paths(Scheduler::Keyframes);
        ps.schedule(Class::KeyframeShard, now, &mut out);
        assert_eq!(out, vec![0, 1]);
        ps.schedule(Class::Control, now, &mut out);
        assert_eq!(out, vec![0, 1]);
        ps.schedule(Class::Shard, now, &mut out);
        assert_eq!(out, vec![1], "the lower-RTT path");
        let mut ps = two_paths(Scheduler::LowestDelay);
        ps.schedule(Class::KeyframeShard, now, &mut out);
        assert_eq!(out, vec![1]);
    }

    #[test]
    fn a_silent_path_dies_and_comes_back() {
        let mut ps = two_paths(Scheduler::Redundant);
        let mut out = Vec::new();
        // Only path 0 answers from now on.
        let mut t = 10_000;
        while t < 1_000_000 {
            let mut ch = Vec::new();
            ps.due_challenges(t, &mut ch);
            for (addr, token) in ch {
                if addr == a(1) {
                    assert!(ps.on_response(t + 2_000, addr, token));
                }
            }
            t += 50_000;
            ps.update(t);
        }
        ps.schedule(Class::Shard, t, &mut out);
        assert_eq!(out, vec![0]);
        let st = ps.stats();
        assert!(!st[1].alive);
        assert_eq!(st[1].deaths, 1);
        // Path 1 answers again: alive at once.
        let mut ch = Vec::new();
        ps.due_challenges(t + 100_000, &mut ch);
        let (addr, token) = ch.into_iter().find(|c| c.0 == a(2)).unwrap();
        assert!(ps.on_response(t + 101_000, addr, token));
        ps.update(t + 101_000);
        ps.schedule(Class::Shard, t + 101_000, &mut out);
        assert_eq!(out, vec![0, 1]);
        // Both dead: still send somewhere (the one heard from last).
        ps.update(t + 10_000_000);
        ps.schedule(Class::Shard, t + 10_000_000, &mut out);
        assert_eq!(out, vec![1]);
    }

    #[test]
    fn paths_are_bounded_and_dead_ones_make_room() {
        let mut ps = two_paths(Scheduler::Redundant);
        assert!(ps.add(a(3), 10_000).is_some());
        assert!(ps.add(a(4), 10_000).is_some());
        assert_eq!(ps.len(), MAX_PATHS);
        // All validated ones alive except the two unvalidated: a new address replaces one.
        assert!(ps.add(a(5), 10_000).is_some());
        assert_eq!(ps.len(), MAX_PATHS);
        assert!(ps.find(a(1)).is_some(), "path 0 stays");
    }

    #[test]
    fn an_unvalidated_path_gets_at_most_three_times_what_it_sent() {
        let mut ps = PathSet::new(PathConfig::default(), a(1), 0, 7);
        let i = ps.add(a(2), 0).unwrap();
        ps.on_received(i, 60);
        let mut sent = 0u64;
        for k in 0..100u64 {
            let mut ch = Vec::new();
            ps.due_challenges(k * 100_000, &mut ch);
            for (addr, _) in ch {
                if addr == a(2) {
                    ps.on_sent(i, 60);
                    sent += 60;
                }
            }
        }
        assert!(sent <= 3 * 60, "{sent} bytes to an address that sent 60");
    }
}
