//! What leaves for a client: sealed shards and audio packets, each copy on every path the
//! scheduler chose, counted.

use std::collections::VecDeque;

use super::peer::Peer;
use super::{HostSession, HostStats, NoClient};
use crate::crypto::TAG_LEN;
use crate::paths::Class;
use crate::wire::{self, Header, PacketType, HEADER_LEN, SHARD_HEADER_LEN};
use crate::{Micros, Transmit};

impl HostSession {
    /// Queues one audio packet for every client that is sent frames (one datagram each, after
    /// queued shards). Returns how many clients it was queued for.
    pub fn send_audio(
        &mut self,
        now: Micros,
        packet: &crate::audio::AudioPacket,
    ) -> Result<usize, NoClient> {
        if self.peers.is_empty() {
            return Err(NoClient);
        }
        let mut body = Vec::with_capacity(packet.encoded_len());
        packet.encode(&mut body);
        let mut n = 0;
        for peer in &mut self.peers {
            let mut out = Vec::with_capacity(HEADER_LEN + body.len() + TAG_LEN);
            let pn = peer.next_pn;
            Header::new(PacketType::Audio, peer.info.connection_id, pn).write(&mut out);
            peer.next_pn += 1;
            out.extend_from_slice(&body);
            // Audio is always encrypted, like control and input.
            if peer
                .protection
                .sealer
                .seal(&mut out, HEADER_LEN, pn, true)
                .is_err()
            {
                continue;
            }
            peer.last_send_us = now;
            peer.paths.schedule(Class::Control, now, &mut self.sched);
            fan_out(peer, &self.sched, &mut self.stats, &mut self.transmits, out);
            n += 1;
        }
        Ok(n)
    }
}

/// Queues an answer to an address (a handshake's), counting it.
pub(super) fn reply(
    stats: &mut HostStats,
    queue: &mut VecDeque<Transmit>,
    dst: std::net::SocketAddr,
    payload: Vec<u8>,
) {
    stats.bytes_sent += payload.len() as u64;
    stats.datagrams_sent += 1;
    queue.push_back(Transmit { dst, payload });
}

/// Queues `payload` on each scheduled path of `peer` (copies for all but the last), counting
/// it.
pub(super) fn fan_out(
    peer: &mut Peer,
    sched: &[usize],
    stats: &mut HostStats,
    queue: &mut impl Extend<Transmit>,
    payload: Vec<u8>,
) {
    let len = payload.len();
    let mut payload = Some(payload);
    for (k, &i) in sched.iter().enumerate() {
        let Some(dst) = peer.paths.addr(i) else {
            continue;
        };
        let p = if k + 1 == sched.len() {
            payload.take().unwrap_or_default()
        } else {
            payload.clone().unwrap_or_default()
        };
        peer.paths.on_sent(i, len);
        stats.bytes_sent += len as u64;
        stats.datagrams_sent += 1;
        peer.counters.bytes_sent += len as u64;
        peer.counters.datagrams_sent += 1;
        queue.extend(std::iter::once(Transmit { dst, payload: p }));
    }
}

/// Seals one shard (data or parity) for `peer` into a datagram and queues it; false if
/// sealing failed.
pub(super) fn seal_shard(
    peer: &mut Peer,
    stats: &mut HostStats,
    queue: &mut impl Extend<Transmit>,
    sched: &[usize],
    sh: &wire::ShardHeader,
    payload: &[u8],
) -> bool {
    let mut out = Vec::with_capacity(HEADER_LEN + SHARD_HEADER_LEN + payload.len() + TAG_LEN);
    let pn = peer.next_pn;
    Header::new(PacketType::Shard, peer.info.connection_id, pn).write(&mut out);
    peer.next_pn += 1;
    sh.write(&mut out);
    out.extend_from_slice(payload);
    let encrypt = !peer.protection.video_auth_only;
    if peer
        .protection
        .sealer
        .seal(&mut out, HEADER_LEN, pn, encrypt)
        .is_err()
    {
        return false;
    }
    fan_out(peer, sched, stats, queue, out);
    true
}
