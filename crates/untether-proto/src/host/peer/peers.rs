//! The connected clients, in the order they were admitted (the longest-connected first: the
//! default controller), looked up by [`ClientId`], connection id, key or address.

use std::net::SocketAddr;

use super::Peer;
use crate::handshake::PublicKey;
use crate::host::ClientId;
use crate::wire::RejectReason;

/// The connected clients, in admission order.
#[derive(Default)]
pub(in crate::host) struct Peers {
    list: Vec<Peer>,
}

impl Peers {
    pub(in crate::host) fn len(&self) -> usize {
        self.list.len()
    }

    pub(in crate::host) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(in crate::host) fn iter(&self) -> impl Iterator<Item = &Peer> {
        self.list.iter()
    }

    pub(in crate::host) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Peer> {
        self.list.iter_mut()
    }

    /// Every client, for the packetizer (which orders them itself).
    pub(in crate::host) fn as_mut_slice(&mut self) -> &mut [Peer] {
        &mut self.list
    }

    /// The ids, in admission order (to visit each while some may leave).
    pub(in crate::host) fn ids(&self) -> Vec<ClientId> {
        self.list.iter().map(|p| p.info.id).collect()
    }

    pub(in crate::host) fn get(&self, id: ClientId) -> Option<&Peer> {
        self.list.iter().find(|p| p.info.id == id)
    }

    pub(in crate::host) fn get_mut(&mut self, id: ClientId) -> Option<&mut Peer> {
        self.list.iter_mut().find(|p| p.info.id == id)
    }

    /// The client whose protected datagrams carry this connection id.
    pub(in crate::host) fn by_connection_id(&self, cid: u64) -> Option<ClientId> {
        self.list
            .iter()
            .find(|p| p.info.connection_id == cid)
            .map(|p| p.info.id)
    }

    /// The client with this key (at most one: a new run of a key replaces the old).
    pub(in crate::host) fn by_key(&self, key: &PublicKey) -> Option<ClientId> {
        self.list
            .iter()
            .find(|p| &p.info.key == key)
            .map(|p| p.info.id)
    }

    /// The client whose handshake's address this is (the layer-2 exchange answers it).
    pub(in crate::host) fn by_addr_mut(&mut self, addr: SocketAddr) -> Option<&mut Peer> {
        self.list.iter_mut().find(|p| p.info.addr == addr)
    }

    /// The client whose handshake had this connection id and address (a repeated
    /// HelloFinish).
    pub(in crate::host) fn by_handshake_mut(
        &mut self,
        cid: u64,
        addr: SocketAddr,
    ) -> Option<&mut Peer> {
        self.list
            .iter_mut()
            .find(|p| p.handshake_cid == cid && p.info.addr == addr)
    }

    /// Admits a client at `place` (a restarted run takes its old run's place; else the end).
    pub(in crate::host) fn insert(&mut self, place: usize, peer: Peer) {
        let place = place.min(self.list.len());
        self.list.insert(place, peer);
    }

    /// Removes a client; its place in the admission order with it.
    pub(in crate::host) fn remove(&mut self, id: ClientId) -> Option<(usize, Peer)> {
        let i = self.list.iter().position(|p| p.info.id == id)?;
        Some((i, self.list.remove(i)))
    }

    /// The clients that may control, id and key in admission order (a silent client cannot:
    /// nothing it sends arrives).
    pub(in crate::host) fn natives(&self) -> Vec<(ClientId, PublicKey)> {
        self.list
            .iter()
            .filter(|p| !p.silent)
            .map(|p| (p.info.id, p.info.key))
            .collect()
    }

    /// Why an authenticated client is refused for want of room: the host serves its maximum
    /// (a client whose key is connected replaces its old run, and is never refused for it).
    pub(in crate::host) fn busy_refusal(
        &self,
        key: &PublicKey,
        max: usize,
    ) -> Option<(RejectReason, String)> {
        if self.by_key(key).is_some() || self.list.len() < max {
            return None;
        }
        let names: Vec<String> = self
            .list
            .iter()
            .take(4)
            .map(|p| format!("{:?}", p.info.name))
            .collect();
        Some((
            RejectReason::Busy,
            format!(
                "the host serves its maximum of {max} client{} ({}{}); try again when one \
                 leaves, or raise host.max_clients (--max-clients) on the host",
                if max == 1 { "" } else { "s" },
                names.join(", "),
                if self.list.len() > 4 { ", …" } else { "" }
            ),
        ))
    }
}
