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

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use untether_net::raw::RawBuffers;
use untether_net::{MacAddr, RawEndpoint, UdpEndpoint, Waker};
use untether_proto::Micros;

use crate::clock::now_us;

mod flush;
mod receive;
#[cfg(test)]
mod tests;

pub use flush::flush;
use flush::{flush_to, Sockets};
use receive::{receive, receive_raw, RecvBuffers};

/// The longest the loop sleeps without a timer due (so a stop request is seen within it).
pub const MAX_WAIT_US: Micros = 50_000;

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
