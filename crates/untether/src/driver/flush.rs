//! The loop's send side: what the endpoint has ready leaves in batched calls, a [`Group`] of
//! equal-length datagrams (a frame's shards) at a time.

use std::net::SocketAddr;

use untether_net::{RawEndpoint, UdpEndpoint};

use super::{Endpoint, Outgoing, Via};
use crate::clock::now_us;

/// The sockets a flush sends on.
pub(super) struct Sockets<'a> {
    pub(super) udp: &'a [UdpEndpoint],
    pub(super) raw: Option<&'a RawEndpoint>,
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
pub(super) fn flush_to<E: Endpoint>(endpoint: &mut E, out: &Sockets<'_>) {
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
