//! The one network loop both sides run: **poll → receive → handle → timeout → events → flush**.
//!
//! Each side has one network thread that owns its protocol session by value (as quinn's
//! `Connection` or str0m's `Rtc`: driven through `&mut self`, no locks). Other threads never touch
//! the session: they hand the driver [commands](Endpoint::Command) over a channel and wake it
//! ([`Handle::send`]); what the session reports goes back to them as events the endpoint
//! forwards (channels, the input sink, published flags).
//!
//! An [`Endpoint`] is what differs between host and client: what a datagram, a timeout and a
//! command do, and which datagrams leave on which socket. [`run`] is the loop; it owns the
//! sockets, so an endpoint never blocks on one. With the raw layer-2 transport
//! ([`run_with_raw`]) it also owns an `AF_PACKET` socket: frames from it reach the endpoint
//! with their source MAC address ([`Endpoint::handle_raw`]), and a datagram the endpoint routes
//! [`Via::Raw`] leaves as a frame to that MAC address.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use untether_net::raw::RawBuffers;
use untether_net::{MacAddr, RawEndpoint, Readiness, RecvMeta, UdpEndpoint, Waker};
use untether_proto::Micros;

use crate::clock::now_us;

/// The longest the loop sleeps without a timer due (so a stop request is seen within it).
pub const MAX_WAIT_US: Micros = 50_000;

/// The most datagrams read from one socket before the loop handles timers and commands again.
const RECV_BURST: usize = 256;

/// Which socket a datagram leaves on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The socket with this index.
    Socket(usize),
    /// Every socket (redundant multipath).
    All,
    /// A raw layer-2 frame to this MAC address (the driver's raw socket; `dst` is ignored).
    Raw(MacAddr),
}

/// A datagram to send: on an unconnected socket to `dst`, on a connected one to its peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub via: Via,
    pub dst: Option<SocketAddr>,
    pub payload: Vec<u8>,
}

/// One side's session as the loop drives it. Called only from the network thread.
pub trait Endpoint {
    /// What other threads hand the driver.
    type Command: Send;

    /// When the endpoint next needs [`Endpoint::handle_timeout`] (None: no timer).
    fn poll_timeout(&self) -> Option<Micros>;

    /// A datagram arrived on socket `socket` from `from`.
    fn handle_datagram(&mut self, now: Micros, socket: usize, from: SocketAddr, data: &[u8]);

    /// A datagram arrived in a raw layer-2 frame from `src` (the endpoint maps the MAC address
    /// to its peer, or drops and counts it).
    fn handle_raw(&mut self, _now: Micros, _src: MacAddr, _data: &[u8]) {}

    /// Socket `socket` (a connected one) reported ICMP port unreachable.
    fn handle_refused(&mut self, _now: Micros, _socket: usize) {}

    /// A timer is due.
    fn handle_timeout(&mut self, now: Micros);

    /// Another thread's command.
    fn handle_command(&mut self, now: Micros, command: Self::Command);

    /// The driver is stopping (its last turn): say goodbye. Called once, before the last flush.
    fn handle_stop(&mut self, _now: Micros) {}

    /// Acts on what the session reported (called once per loop turn, after the handling).
    fn handle_events(&mut self, now: Micros);

    /// The next datagram to send now, if any (called until None, after the events).
    fn poll_transmit(&mut self, now: Micros) -> Option<Outgoing>;

    /// A send failed (counted; the session's timers handle the rest).
    fn send_failed(&mut self, _dst: Option<SocketAddr>, _error: std::io::Error) {}

    /// The loop ends after this turn.
    fn is_done(&self) -> bool;
}

/// How another thread reaches a driver: its command channel and its waker.
pub struct Handle<C> {
    commands: Sender<C>,
    waker: Arc<Waker>,
}

impl<C> Clone for Handle<C> {
    fn clone(&self) -> Self {
        Handle {
            commands: self.commands.clone(),
            waker: self.waker.clone(),
        }
    }
}

impl<C> Handle<C> {
    /// Hands the driver a command and wakes it; false when the driver has ended.
    pub fn send(&self, command: C) -> bool {
        let ok = self.commands.send(command).is_ok();
        if ok {
            self.waker.wake();
        }
        ok
    }
}

/// The driver's end of a [`Handle`].
pub struct Mailbox<C> {
    commands: Receiver<C>,
    waker: Arc<Waker>,
}

impl<C> Mailbox<C> {
    /// The commands waiting (for tests of the threads that send them).
    #[cfg(test)]
    pub(crate) fn drain(&self) -> Vec<C> {
        self.commands.try_iter().collect()
    }
}

/// A command channel and the waker that goes with it.
pub fn channel<C>() -> std::io::Result<(Handle<C>, Mailbox<C>)> {
    let (tx, rx) = mpsc::channel();
    let waker = Arc::new(Waker::new()?);
    Ok((
        Handle {
            commands: tx,
            waker: waker.clone(),
        },
        Mailbox {
            commands: rx,
            waker,
        },
    ))
}

/// Why the loop ended.
#[derive(Debug)]
pub enum Ended {
    /// The endpoint said it is done, or `stop` was set.
    Done,
    /// Waiting on the sockets failed.
    Failed(std::io::Error),
}

/// Runs `endpoint` over `sockets` until it is done or `stop` is set. Commands are handled in
/// the order they were sent; every command sent before `stop` was set is handled.
pub fn run<E: Endpoint>(
    endpoint: &mut E,
    sockets: &[UdpEndpoint],
    mailbox: &Mailbox<E::Command>,
    stop: &AtomicBool,
) -> Ended {
    run_with_raw(endpoint, sockets, None, mailbox, stop)
}

/// Like [`run`], with a raw layer-2 socket beside the UDP ones: its frames reach
/// [`Endpoint::handle_raw`] (after the UDP sockets' datagrams of the same turn), and datagrams
/// routed [`Via::Raw`] leave on it.
pub fn run_with_raw<E: Endpoint>(
    endpoint: &mut E,
    sockets: &[UdpEndpoint],
    raw: Option<&RawEndpoint>,
    mailbox: &Mailbox<E::Command>,
    stop: &AtomicBool,
) -> Ended {
    let fds: Vec<std::os::fd::RawFd> = sockets
        .iter()
        .map(UdpEndpoint::raw_fd)
        .chain(raw.map(RawEndpoint::raw_fd))
        .collect();
    let mut bufs = RecvBuffers::new();
    let mut raw_bufs = raw.map(|r| RawBuffers::new(r.mtu()));
    let out = Sockets { udp: sockets, raw };
    // What the endpoint queued before the loop started (a client's first handshake message).
    flush_to(endpoint, &out);
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let now = now_us();
        let wait_us = if stopping {
            0
        } else {
            endpoint
                .poll_timeout()
                .map_or(MAX_WAIT_US, |t| t.saturating_sub(now))
                .min(MAX_WAIT_US)
        };
        let ready = match untether_net::wait_fds(
            &fds,
            Some(&mailbox.waker),
            Duration::from_micros(wait_us),
        ) {
            Ok(r) => r,
            Err(e) => return Ended::Failed(e),
        };
        receive(endpoint, sockets, &ready, &mut bufs);
        if let (Some(r), Some(b)) = (raw, raw_bufs.as_mut()) {
            if ready.readable.get(sockets.len()).copied().unwrap_or(false) {
                receive_raw(endpoint, r, b);
            }
        }
        while let Ok(c) = mailbox.commands.try_recv() {
            endpoint.handle_command(now_us(), c);
        }
        let now = now_us();
        if endpoint.poll_timeout().is_some_and(|t| t <= now) {
            endpoint.handle_timeout(now);
        }
        endpoint.handle_events(now);
        if stopping {
            endpoint.handle_stop(now);
        }
        flush_to(endpoint, &out);
        if stopping || endpoint.is_done() {
            return Ended::Done;
        }
    }
}

/// Reads what the raw socket holds (up to a burst) into the endpoint.
fn receive_raw<E: Endpoint>(endpoint: &mut E, raw: &RawEndpoint, bufs: &mut RawBuffers) {
    let mut read = 0;
    while read < RECV_BURST {
        match raw.recv_batch(bufs) {
            Ok(0) => break,
            Ok(n) => {
                for i in 0..n {
                    if let Some((src, d)) = bufs.get(i) {
                        endpoint.handle_raw(now_us(), src, d);
                    }
                }
                read += n;
            }
            Err(e) => {
                log::debug!("receive on the raw socket: {e}");
                break;
            }
        }
    }
}

/// The sockets a flush sends on.
struct Sockets<'a> {
    udp: &'a [UdpEndpoint],
    raw: Option<&'a RawEndpoint>,
}

/// Where received datagrams land: [`untether_net::BATCH_SIZE`] buffers of
/// [`untether_net::MAX_DATAGRAM`] bytes (a GRO buffer holds up to 64 datagrams) and their metas.
struct RecvBuffers {
    storage: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
}

impl RecvBuffers {
    fn new() -> Self {
        RecvBuffers {
            storage: vec![vec![0u8; untether_net::MAX_DATAGRAM]; untether_net::BATCH_SIZE],
            metas: vec![RecvMeta::default(); untether_net::BATCH_SIZE],
        }
    }
}

/// Reads what the ready sockets hold (up to a burst each) into the endpoint, a `recvmmsg` (with
/// GRO where the kernel has it) at a time.
fn receive<E: Endpoint>(
    endpoint: &mut E,
    sockets: &[UdpEndpoint],
    ready: &Readiness,
    bufs: &mut RecvBuffers,
) {
    for (i, socket) in sockets.iter().enumerate() {
        if !ready.readable.get(i).copied().unwrap_or(false) {
            continue;
        }
        let mut read = 0;
        while read < RECV_BURST {
            let mut slices: Vec<IoSliceMut<'_>> = bufs
                .storage
                .iter_mut()
                .map(|b| IoSliceMut::new(b))
                .collect();
            match socket.recv_batch(&mut slices, &mut bufs.metas) {
                Ok(0) => break,
                Ok(n) => {
                    for (buf, meta) in bufs.storage.iter().zip(&bufs.metas).take(n) {
                        read += deliver(endpoint, i, buf, meta);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    endpoint.handle_refused(now_us(), i);
                    break;
                }
                Err(e) => {
                    log::debug!("receive on socket {i}: {e}");
                    break;
                }
            }
        }
    }
}

/// Hands the endpoint the datagrams of one received buffer one by one (a GRO buffer holds
/// several, `meta.stride` bytes each but the last); returns how many.
fn deliver<E: Endpoint>(endpoint: &mut E, socket: usize, buf: &[u8], meta: &RecvMeta) -> usize {
    let mut n = 0;
    for d in untether_net::datagrams(buf, meta) {
        endpoint.handle_datagram(now_us(), socket, meta.addr, d);
        n += 1;
    }
    n
}

/// The most datagrams one batched send carries (a pacing batch is at most this many too).
const MAX_GROUP: usize = 64;

/// Consecutive datagrams for one socket choice and destination, all of one length but the last
/// (which may be shorter and then ends the group): a frame's shards, sent in one batched call.
struct Group {
    via: Via,
    dst: Option<SocketAddr>,
    segment_size: usize,
    count: usize,
    /// No datagram can join (a shorter one joined, or the group is full).
    closed: bool,
    contents: Vec<u8>,
}

impl Group {
    fn new() -> Self {
        Group {
            via: Via::All,
            dst: None,
            segment_size: 0,
            count: 0,
            closed: false,
            contents: Vec::new(),
        }
    }

    /// Whether `out` can join: same socket choice and destination, not longer than the others,
    /// and the group not closed.
    fn accepts(&self, out: &Outgoing) -> bool {
        self.count == 0
            || (!self.closed
                && out.via == self.via
                && out.dst == self.dst
                && !out.payload.is_empty()
                && out.payload.len() <= self.segment_size)
    }

    /// Adds `out` (which [`accepts`](Self::accepts) took).
    fn push(&mut self, out: Outgoing) {
        if self.count == 0 {
            self.via = out.via;
            self.dst = out.dst;
            self.segment_size = out.payload.len();
        }
        self.count += 1;
        self.contents.extend_from_slice(&out.payload);
        let max = untether_net::batch_segments(self.segment_size).min(MAX_GROUP);
        self.closed =
            out.payload.len() < self.segment_size || out.payload.is_empty() || self.count >= max;
    }

    /// Sends the group (one batched call per socket) and empties it.
    fn send<E: Endpoint>(&mut self, endpoint: &mut E, out: &Sockets<'_>) {
        if self.count == 0 {
            return;
        }
        let sockets = out.udp;
        let targets: &[UdpEndpoint] = match self.via {
            Via::Socket(i) => sockets.get(i).map_or(&[], std::slice::from_ref),
            Via::All => sockets,
            Via::Raw(mac) => {
                let r = match out.raw {
                    Some(raw) => raw
                        .send_batch(mac, self.contents.chunks(self.segment_size.max(1)))
                        .map(|_| ()),
                    None => Err(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "no raw layer-2 socket",
                    )),
                };
                if let Err(e) = r {
                    endpoint.send_failed(self.dst, e);
                }
                &[]
            }
        };
        for s in targets {
            let r = if self.count == 1 {
                match self.dst {
                    Some(dst) => s.send_to(&self.contents, dst),
                    None => s.send(&self.contents),
                }
            } else {
                s.send_batch(self.dst, &self.contents, self.segment_size)
            };
            if let Err(e) = r {
                endpoint.send_failed(self.dst, e);
            }
        }
        self.count = 0;
        self.closed = false;
        self.contents.clear();
    }
}

/// Sends everything the endpoint has ready. Consecutive datagrams with the same socket choice,
/// destination and length (a frame's shards; the last may be shorter) leave in one batched call
/// ([`UdpEndpoint::send_batch`]: one GSO `sendmsg` where the kernel has it, at most
/// [`MAX_GROUP`] datagrams). A group leaves as soon as it is closed (its shorter last datagram,
/// or full), before a datagram that cannot join it, and when the endpoint has nothing more now
/// (a paced batch ends there): the order is kept and nothing waits for a later datagram.
pub fn flush<E: Endpoint>(endpoint: &mut E, sockets: &[UdpEndpoint]) {
    flush_to(
        endpoint,
        &Sockets {
            udp: sockets,
            raw: None,
        },
    )
}

/// [`flush`] over the UDP sockets and the raw one.
fn flush_to<E: Endpoint>(endpoint: &mut E, out: &Sockets<'_>) {
    let mut group = Group::new();
    while let Some(o) = endpoint.poll_transmit(now_us()) {
        if !group.accepts(&o) {
            group.send(endpoint, out);
        }
        group.push(o);
        if group.closed {
            group.send(endpoint, out);
        }
    }
    group.send(endpoint, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Echoes every datagram back, counts commands, ends on command 0.
    struct Echo {
        out: VecDeque<Outgoing>,
        commands: Vec<u32>,
        timer: Option<Micros>,
        timeouts: u32,
        done: bool,
        events: u32,
    }

    impl Endpoint for Echo {
        type Command = u32;
        fn poll_timeout(&self) -> Option<Micros> {
            self.timer
        }
        fn handle_datagram(&mut self, _now: Micros, socket: usize, from: SocketAddr, d: &[u8]) {
            self.out.push_back(Outgoing {
                via: Via::Socket(socket),
                dst: Some(from),
                payload: d.to_vec(),
            });
        }
        fn handle_timeout(&mut self, _now: Micros) {
            self.timeouts += 1;
            self.timer = None;
        }
        fn handle_command(&mut self, now: Micros, c: u32) {
            self.commands.push(c);
            if c == 0 {
                self.done = true;
            } else if c == 1 {
                self.timer = Some(now + 1_000);
            }
        }
        fn handle_events(&mut self, _now: Micros) {
            self.events += 1;
        }
        fn poll_transmit(&mut self, _now: Micros) -> Option<Outgoing> {
            self.out.pop_front()
        }
        fn is_done(&self) -> bool {
            self.done
        }
    }

    fn echo() -> Echo {
        Echo {
            out: VecDeque::new(),
            commands: Vec::new(),
            timer: None,
            timeouts: 0,
            done: false,
            events: 0,
        }
    }

    #[test]
    fn echoes_handles_commands_in_order_and_fires_timers() {
        let server = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let (handle, mailbox) = channel::<u32>().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let t = std::thread::spawn(move || {
            let mut e = echo();
            let ended = run(&mut e, &[server], &mailbox, &AtomicBool::new(false));
            (e, ended)
        });
        let client = UdpEndpoint::connect_to(addr).unwrap();
        client.send(b"ping").unwrap();
        let mut buf = [0u8; 16];
        match client.recv(&mut buf, Duration::from_secs(5)).unwrap() {
            untether_net::Received::Datagram(n, _) => assert_eq!(&buf[..n], b"ping"),
            other => panic!("no echo: {other:?}"),
        }
        for c in [5, 1, 7] {
            assert!(handle.send(c));
        }
        std::thread::sleep(Duration::from_millis(30));
        assert!(handle.send(0));
        let (e, ended) = t.join().unwrap();
        assert!(matches!(ended, Ended::Done));
        assert_eq!(e.commands, vec![5, 1, 7, 0]);
        assert_eq!(e.timeouts, 1, "the 1 ms timer fired once");
        assert!(e.events >= 3);
        drop(stop);
    }

    #[test]
    fn stop_ends_after_pending_commands() {
        let (handle, mailbox) = channel::<u32>().unwrap();
        let stop = AtomicBool::new(true);
        handle.send(9);
        let mut e = echo();
        let ended = run(&mut e, &[], &mailbox, &stop);
        assert!(matches!(ended, Ended::Done));
        assert_eq!(e.commands, vec![9]);
    }

    /// Sends what it is given, records what arrives.
    #[derive(Default)]
    struct Script {
        out: VecDeque<Outgoing>,
        got: Vec<(usize, SocketAddr, Vec<u8>)>,
    }

    impl Endpoint for Script {
        type Command = ();
        fn poll_timeout(&self) -> Option<Micros> {
            None
        }
        fn handle_datagram(&mut self, _now: Micros, socket: usize, from: SocketAddr, d: &[u8]) {
            self.got.push((socket, from, d.to_vec()));
        }
        fn handle_timeout(&mut self, _now: Micros) {}
        fn handle_command(&mut self, _now: Micros, _c: ()) {}
        fn handle_events(&mut self, _now: Micros) {}
        fn poll_transmit(&mut self, _now: Micros) -> Option<Outgoing> {
            self.out.pop_front()
        }
        fn send_failed(&mut self, dst: Option<SocketAddr>, error: std::io::Error) {
            panic!("send to {dst:?} failed: {error}");
        }
        fn is_done(&self) -> bool {
            false
        }
    }

    fn bind() -> UdpEndpoint {
        UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap()
    }

    /// A datagram of `len` bytes tagged `tag` (its first byte).
    fn tagged(via: Via, dst: SocketAddr, tag: u8, len: usize) -> Outgoing {
        let mut payload = vec![0xAB; len];
        payload[0] = tag;
        Outgoing {
            via,
            dst: Some(dst),
            payload,
        }
    }

    /// Receives through the batched path until `want` datagrams arrived on `socket` (5 s at most).
    fn receive_all(socket: &UdpEndpoint, want: usize) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut sink = Script::default();
        let mut bufs = RecvBuffers::new();
        let ready = Readiness {
            readable: vec![true],
            woken: false,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while sink.got.len() < want && std::time::Instant::now() < deadline {
            socket.wait_readable(Duration::from_millis(50)).unwrap();
            receive(&mut sink, std::slice::from_ref(socket), &ready, &mut bufs);
        }
        sink.got.into_iter().map(|(_, from, d)| (from, d)).collect()
    }

    /// (tag, length) of each datagram, in arrival order.
    fn shapes(got: &[(SocketAddr, Vec<u8>)], from: SocketAddr) -> Vec<(u8, usize)> {
        got.iter()
            .filter(|(f, _)| *f == from)
            .map(|(_, d)| (d[0], d.len()))
            .collect()
    }

    #[test]
    fn a_burst_of_equal_datagrams_arrives_complete_and_in_order_through_the_batched_path() {
        let (tx, rx) = (bind(), bind());
        let to = rx.local_addr().unwrap();
        let mut src = Script::default();
        // A keyframe's shards: 100 of 1200 bytes and a shorter last one.
        for i in 0..100u8 {
            src.out.push_back(tagged(Via::Socket(0), to, i, 1200));
        }
        src.out.push_back(tagged(Via::Socket(0), to, 100, 345));
        flush(&mut src, std::slice::from_ref(&tx));
        let got = receive_all(&rx, 101);
        let want: Vec<(u8, usize)> = (0..101u8)
            .map(|i| (i, if i == 100 { 345 } else { 1200 }))
            .collect();
        assert_eq!(shapes(&got, tx.local_addr().unwrap()), want);
        let counts = tx.batch_send_counts();
        assert_eq!(counts.gso_datagrams + counts.single_datagrams, 101);
        if tx.max_gso_segments() > 1 {
            // 54 (a sendmsg's 65,487 bytes) then 46 and the shorter last one.
            assert_eq!(counts.gso_calls, 2, "{counts:?}");
            assert_eq!(counts.gso_datagrams, 101);
        }
    }

    #[test]
    fn mixed_sizes_sockets_and_destinations_are_split_into_groups() {
        let (tx0, tx1, a, b) = (bind(), bind(), bind(), bind());
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut src = Script::default();
        let script = [
            // One group: five of 1000 and a shorter last one.
            (Via::Socket(0), to_a, 1000, 5),
            (Via::Socket(0), to_a, 600, 1),
            // Another destination: a new group.
            (Via::Socket(0), to_b, 1000, 3),
            // Another socket: a new group; then a longer one starts another (alone).
            (Via::Socket(1), to_a, 500, 2),
            (Via::Socket(1), to_a, 1000, 1),
            // Every socket.
            (Via::All, to_b, 700, 2),
        ];
        let mut tag = 0u8;
        for (via, dst, len, n) in script {
            for _ in 0..n {
                src.out.push_back(tagged(via, dst, tag, len));
                tag += 1;
            }
        }
        let sockets = [tx0, tx1];
        flush(&mut src, &sockets);
        let (from0, from1) = (
            sockets[0].local_addr().unwrap(),
            sockets[1].local_addr().unwrap(),
        );
        let got_a = receive_all(&a, 9);
        let got_b = receive_all(&b, 7);
        assert_eq!(
            shapes(&got_a, from0),
            vec![
                (0, 1000),
                (1, 1000),
                (2, 1000),
                (3, 1000),
                (4, 1000),
                (5, 600)
            ]
        );
        assert_eq!(shapes(&got_a, from1), vec![(9, 500), (10, 500), (11, 1000)]);
        assert_eq!(
            shapes(&got_b, from0),
            vec![(6, 1000), (7, 1000), (8, 1000), (12, 700), (13, 700)]
        );
        assert_eq!(shapes(&got_b, from1), vec![(12, 700), (13, 700)]);
        if sockets[0].max_gso_segments() > 1 {
            let (c0, c1) = (
                sockets[0].batch_send_counts(),
                sockets[1].batch_send_counts(),
            );
            assert_eq!((c0.gso_calls, c0.gso_datagrams), (3, 11), "{c0:?}");
            // The lone 1000-byte datagram left with a plain send.
            assert_eq!((c1.gso_calls, c1.gso_datagrams), (2, 4), "{c1:?}");
        }
    }

    #[test]
    fn gro_received_datagrams_are_handed_over_one_by_one_with_their_lengths() {
        let from: SocketAddr = "10.0.0.7:4000".parse().unwrap();
        let mut buf = Vec::new();
        for i in 0..3u8 {
            buf.extend(std::iter::repeat_n(i, 1200));
        }
        buf.extend(std::iter::repeat_n(3u8, 100));
        let mut meta = RecvMeta::default();
        meta.addr = from;
        meta.len = buf.len();
        meta.stride = 1200;
        let mut sink = Script::default();
        assert_eq!(deliver(&mut sink, 2, &buf, &meta), 4);
        let got: Vec<(usize, SocketAddr, u8, usize)> = sink
            .got
            .iter()
            .map(|(s, f, d)| (*s, *f, d[0], d.len()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, from, 0, 1200),
                (2, from, 1, 1200),
                (2, from, 2, 1200),
                (2, from, 3, 100)
            ]
        );
        assert!(sink
            .got
            .iter()
            .all(|(_, _, d)| d.iter().all(|&b| b == d[0])));
        // Without GRO a buffer is one datagram (stride = len).
        meta.len = 700;
        meta.stride = 700;
        let mut one = Script::default();
        assert_eq!(deliver(&mut one, 0, &buf, &meta), 1);
        assert_eq!(one.got[0].2.len(), 700);
    }
}
