//! The loop's receive side: a `recvmmsg` (GRO where the kernel has it) at a time from each ready
//! UDP socket, and the raw socket's frames, handed to the endpoint datagram by datagram.

use std::io::IoSliceMut;

use untether_net::raw::RawBuffers;
use untether_net::{RawEndpoint, Readiness, RecvMeta, UdpEndpoint};

use super::Endpoint;
use crate::clock::now_us;

/// The most datagrams read from one socket before the loop handles timers and commands again.
const RECV_BURST: usize = 256;

/// Reads what the raw socket holds (up to a burst) into the endpoint.
pub(super) fn receive_raw<E: Endpoint>(endpoint: &mut E, raw: &RawEndpoint, bufs: &mut RawBuffers) {
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

/// Where received datagrams land: [`untether_net::BATCH_SIZE`] buffers of
/// [`untether_net::MAX_DATAGRAM`] bytes (a GRO buffer holds up to 64 datagrams) and their metas.
pub(super) struct RecvBuffers {
    storage: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
}

impl RecvBuffers {
    pub(super) fn new() -> Self {
        RecvBuffers {
            storage: vec![vec![0u8; untether_net::MAX_DATAGRAM]; untether_net::BATCH_SIZE],
            metas: vec![RecvMeta::default(); untether_net::BATCH_SIZE],
        }
    }
}

/// Reads what the ready sockets hold (up to a burst each) into the endpoint, a `recvmmsg` (with
/// GRO where the kernel has it) at a time.
pub(super) fn receive<E: Endpoint>(
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
pub(super) fn deliver<E: Endpoint>(
    endpoint: &mut E,
    socket: usize,
    buf: &[u8],
    meta: &RecvMeta,
) -> usize {
    let mut n = 0;
    for d in untether_net::datagrams(buf, meta) {
        endpoint.handle_datagram(now_us(), socket, meta.addr, d);
        n += 1;
    }
    n
}
