//! The loop's tests: commands, timers and stop; batched sends; GRO buffers.

use std::collections::VecDeque;

use untether_net::{Readiness, RecvMeta};

use super::receive::deliver;
use super::*;

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
