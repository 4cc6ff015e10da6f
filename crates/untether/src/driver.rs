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
//! sockets, so an endpoint never blocks on one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use untether_net::{Readiness, UdpEndpoint, Waker};
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
    let refs: Vec<&UdpEndpoint> = sockets.iter().collect();
    let mut buf = vec![0u8; untether_net::MAX_DATAGRAM];
    // What the endpoint queued before the loop started (a client's first handshake message).
    flush(endpoint, sockets);
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
        let ready =
            match untether_net::wait(&refs, Some(&mailbox.waker), Duration::from_micros(wait_us)) {
                Ok(r) => r,
                Err(e) => return Ended::Failed(e),
            };
        receive(endpoint, sockets, &ready, &mut buf);
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
        flush(endpoint, sockets);
        if stopping || endpoint.is_done() {
            return Ended::Done;
        }
    }
}

/// Reads what the ready sockets hold (up to a burst each) into the endpoint.
fn receive<E: Endpoint>(
    endpoint: &mut E,
    sockets: &[UdpEndpoint],
    ready: &Readiness,
    buf: &mut [u8],
) {
    for (i, socket) in sockets.iter().enumerate() {
        if !ready.readable.get(i).copied().unwrap_or(false) {
            continue;
        }
        for _ in 0..RECV_BURST {
            match socket.try_recv_from(buf) {
                Ok(Some((n, from))) => endpoint.handle_datagram(now_us(), i, from, &buf[..n]),
                Ok(None) => break,
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

/// Sends everything the endpoint has ready.
pub fn flush<E: Endpoint>(endpoint: &mut E, sockets: &[UdpEndpoint]) {
    while let Some(out) = endpoint.poll_transmit(now_us()) {
        let targets: &[UdpEndpoint] = match out.via {
            Via::Socket(i) => match sockets.get(i) {
                Some(s) => std::slice::from_ref(s),
                None => continue,
            },
            Via::All => sockets,
        };
        for s in targets {
            let r = match out.dst {
                Some(dst) => s.send_to(&out.payload, dst),
                None => s.send(&out.payload),
            };
            if let Err(e) = r {
                endpoint.send_failed(out.dst, e);
            }
        }
    }
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
}
