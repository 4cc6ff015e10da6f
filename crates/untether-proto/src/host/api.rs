//! The application's commands and queries on [`HostSession`]: each a thin delegation to the
//! part it concerns ([`Responder`](super::admission), [`Roles`](super::roles), the
//! [`Stream`](super::stream), the peers). The session's driving (datagrams in, timers,
//! datagrams and events out) and the glue between its parts are in `mod.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use super::peer::Peer;
use super::stream::{self, keyframes::Requester, ClientDatagrams, FrameMeta};
use super::{
    AccessRequest, ClientId, ClientInfo, ClientStatus, HostSession, HostStats, NoClient,
    PairingEvent, PairingPin, ReceiverKind,
};
use crate::assembler::SliceId;
use crate::fec::FecPolicy;
use crate::handshake::PublicKey;
use crate::keyframe::KeyframeDecision;
use crate::paths::PathStats;
use crate::pose::PoseSample;
use crate::state::{Staleness, StateEntry, StateKey, StateReceiver, StateValue};
use crate::wire::{self, ByeReason, ClientRole, FrameTiming, SessionParams};
use crate::{GoneReason, Micros};

impl HostSession {
    /// Allows a client key (approved by the user); removes its access request.
    pub fn allow_client(&mut self, key: PublicKey) {
        self.responder.allow(key);
    }

    /// Revokes a client key; ends its session if it is connected.
    pub fn revoke_client(&mut self, now: Micros, key: PublicKey) {
        self.responder.revoke(key);
        if let Some(id) = self.peers.by_key(&key) {
            self.end_peer(now, id, ByeReason::Closed, GoneReason::Bye);
        }
    }

    /// Whether a key is allowed.
    pub fn is_allowed(&self, key: &PublicKey) -> bool {
        self.responder.is_allowed(key)
    }

    /// Hands the session the host's one admission ([`crate::admission::Admission`]), shared
    /// with its other doors (browsers, RTSP): PIN handshakes take from the same per-address
    /// budget, and wrong guesses anywhere refuse the address everywhere. A session made alone
    /// keeps an admission of its own.
    pub fn share_admission(&mut self, admission: crate::admission::Admission) {
        self.responder.share_admission(admission);
    }

    /// The admission PIN handshakes go through.
    pub fn admission(&self) -> &crate::admission::Admission {
        self.responder.admission()
    }

    /// Sets (or clears) the one-time PIN the host accepts for pairing. PIN handshakes in
    /// progress under another PIN are dropped (they could never be checked).
    pub fn set_pin(&mut self, pin: Option<PairingPin>) {
        self.responder.set_pin(pin);
    }

    /// The active PIN, if any.
    pub fn pin(&self) -> Option<&PairingPin> {
        self.responder.pin()
    }

    /// Pending access requests, oldest first (at most `max_access_requests`: beyond, a new
    /// one takes the place of the least recently asked of the busiest address; one not
    /// repeated within `access_request_ttl_us` is forgotten).
    pub fn access_requests(&self) -> impl Iterator<Item = &AccessRequest> {
        self.responder.requests()
    }

    /// Denies (forgets) an access request.
    pub fn deny_request(&mut self, key: &PublicKey) {
        self.responder.deny(key);
    }

    /// The next pairing event.
    pub fn poll_pairing_event(&mut self) -> Option<PairingEvent> {
        self.responder.poll_pairing_event()
    }

    /// Handshakes in progress (bounded by `max_handshakes`).
    pub fn handshakes_in_progress(&self) -> usize {
        self.responder.handshakes_in_progress()
    }

    // ---- roles ---------------------------------------------------------------------------

    /// Hands control to the client with this key whenever it is connected (None: the default
    /// rule). Takes effect at once if it is connected.
    pub fn set_preferred_controller(&mut self, now: Micros, key: Option<PublicKey>) {
        self.roles.prefer(key);
        self.assign_roles(now);
    }

    /// Hands control to a connected client now (and whenever it reconnects); false if there
    /// is no such client.
    pub fn hand_control(&mut self, now: Micros, client: ClientId) -> bool {
        let Some(key) = self.peers.get(client).map(|p| p.info().key) else {
            return false;
        };
        self.set_preferred_controller(now, Some(key));
        true
    }

    /// Holds control for the client with this key until `until` (the controller of the host's
    /// last run, read back after a restart): until it comes back or the time is up, the other
    /// native clients are viewers; then the default rule. A preferred key still wins.
    pub fn hold_control_for(&mut self, now: Micros, key: PublicKey, until: Micros) {
        self.roles.hold(now, key, until);
        self.assign_roles(now);
    }

    /// Lets a viewer's input through (by key, connected or not).
    pub fn grant_input(&mut self, now: Micros, key: PublicKey) {
        if self.roles.grant(key) {
            self.assign_roles(now);
        }
    }

    /// Takes a viewer's input grant back.
    pub fn revoke_input_grant(&mut self, now: Micros, key: &PublicKey) {
        if self.roles.revoke_grant(key) {
            self.assign_roles(now);
        }
    }

    /// A keyframe for everyone asked for by something other than a client's loss (another
    /// kind of consumer of the stream: an RTSP or WebRTC viewer's PLI/FIR), through the same
    /// cooldown; true if the encoder is to make one
    /// ([`HostEvent::KeyframeRequested`](super::HostEvent::KeyframeRequested)).
    pub fn request_keyframe(&mut self, now: Micros) -> bool {
        self.stats.keyframe_requests_received += 1;
        self.keyframe_request(now, Requester::Host, u32::MAX) == KeyframeDecision::Honour
    }

    /// Registers a receiver of another kind (a browser, an RTSP player, a WHIP publication):
    /// it gets an id from the same space as native clients' and its role from the same rule
    /// ([`role_of`](Self::role_of); a change is a
    /// [`HostEvent::ReceiverRoleChanged`](super::HostEvent::ReceiverRoleChanged)).
    pub fn attach_receiver(&mut self, now: Micros, kind: ReceiverKind) -> ClientId {
        let id = self.new_receiver_id();
        self.attach_receiver_as(now, id, kind);
        id
    }

    /// An id from the one space of native clients and receivers, for a receiver that is known
    /// (admitted) before it can receive: a browser is named by it from its offer on, and
    /// attached under it ([`attach_receiver_as`](Self::attach_receiver_as)) once connected.
    pub fn new_receiver_id(&mut self) -> ClientId {
        let id = ClientId(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        id
    }

    /// Registers receiver `id` (from [`new_receiver_id`](Self::new_receiver_id)) as
    /// [`attach_receiver`](Self::attach_receiver) does.
    pub fn attach_receiver_as(&mut self, now: Micros, id: ClientId, kind: ReceiverKind) {
        self.roles.attach(id, kind);
        self.assign_roles(now);
    }

    /// A receiver of another kind left (its role passes on by the same rule).
    pub fn detach_receiver(&mut self, now: Micros, id: ClientId) {
        if self.roles.detach(id) {
            self.stream.forget(id);
            self.assign_roles(now);
        }
    }

    /// A keyframe request (PLI/FIR, an RTSP player joining) from a receiver of another kind,
    /// through the one gate: the cooldown, and a viewer's limits unless it controls. When
    /// honoured, [`HostEvent::KeyframeRequested`](super::HostEvent::KeyframeRequested) is
    /// emitted, as for a native client. An unknown id is refused ([`KeyframeDecision::Limited`]).
    pub fn receiver_keyframe_request(&mut self, now: Micros, id: ClientId) -> KeyframeDecision {
        self.stats.keyframe_requests_received += 1;
        if !self.roles.is_receiver(id) {
            return KeyframeDecision::Limited;
        }
        // No lost frame to name: any keyframe from now on will do.
        let who = self.roles.requester(id);
        self.keyframe_request(now, who, u32::MAX)
    }

    /// The role the one authority gives a native client or a receiver of another kind (None:
    /// no such id).
    pub fn role_of(&self, id: ClientId) -> Option<ClientRole> {
        if let Some(p) = self.peers.get(id) {
            return Some(self.roles.native_role(id, &p.info().key).0);
        }
        self.roles.receiver_role(id)
    }

    /// Whether an id's input reaches the application: the controller's (a native client's, or
    /// a browser's while it controls), or a native viewer's with a grant. RTSP players and
    /// publications never.
    pub fn input_applies(&self, id: ClientId) -> bool {
        if let Some(p) = self.peers.get(id) {
            let (role, granted) = self.roles.native_role(id, &p.info().key);
            return role == ClientRole::Controller || granted;
        }
        self.roles.receiver_input_applies(id)
    }

    pub fn params(&self) -> &SessionParams {
        &self.cfg.params
    }

    /// The stream as configured: the limits of what a client may ask for (the size, frame
    /// rate and bit rate of [`params`](Self::params) are at most these).
    pub fn stream_limits(&self) -> &SessionParams {
        &self.limits.0
    }

    /// The host's public key (clients pin it; users compare its fingerprint).
    pub fn host_key(&self) -> PublicKey {
        self.cfg.identity.public
    }

    /// The FEC policy.
    pub fn fec_policy(&self) -> FecPolicy {
        self.cfg.fec
    }

    /// The most clients served at once.
    pub fn max_clients(&self) -> usize {
        self.cfg.max_clients.max(1)
    }

    /// [`HostStats::datagrams_authentic`], without copying the counters: a driver compares it
    /// around [`handle_datagram`](Self::handle_datagram) to learn whether that datagram was
    /// authentic.
    pub fn datagrams_authentic(&self) -> u64 {
        self.stats.datagrams_authentic
    }

    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        self.stream.fill_stats(&mut s);
        for p in self.peers.iter() {
            s.key_updates += p.key_updates();
        }
        if let Some(p) = self.controller_peer() {
            s.state_out = p.state_out_stats();
        }
        s
    }

    /// The status of each client removed since the last call, as it left: its final counters
    /// (frames and bytes sent up to its last datagram), which [`client_status`] no longer
    /// shows. The last [`MAX_DEPARTED`](super::MAX_DEPARTED) are kept.
    ///
    /// [`client_status`]: Self::client_status
    pub fn take_departed(&mut self) -> Vec<ClientStatus> {
        std::mem::take(&mut self.departed)
    }

    /// The controller (on a host serving one client: that client), if any client is
    /// connected.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.controller_peer().map(Peer::info)
    }

    /// Every connected client, in the order they were admitted.
    pub fn clients(&self) -> impl Iterator<Item = &ClientInfo> {
        self.peers.iter().map(Peer::info)
    }

    /// How many clients are connected.
    pub fn client_count(&self) -> usize {
        self.peers.len()
    }

    /// The controller's id (a native client's, or a browser's while no native client is
    /// connected).
    pub fn controller(&self) -> Option<ClientId> {
        self.roles.controller()
    }

    /// Every connected client's role, stream state and counters, in admission order.
    /// The encoder, preset and conversion clients are told beside their Accept.
    pub fn host_encoder(&self) -> Option<&crate::wire::HostEncoder> {
        self.cfg.encoder.as_ref()
    }

    /// Names the encoder to clients (the one that opened, once known): the connected ones now
    /// (once: it is information, not state), the others beside their Accept.
    pub fn set_host_encoder(&mut self, e: Option<crate::wire::HostEncoder>) {
        if let Some(e) = &e {
            for p in self.peers.iter_mut() {
                p.tell_host_encoder(e);
            }
        }
        self.cfg.encoder = e;
    }

    pub fn client_status(&self) -> Vec<ClientStatus> {
        self.peers.iter().map(Peer::status).collect()
    }

    /// The controller's latest-wins state (pointer, head pose, …): the scene's.
    pub fn state(&self) -> Option<&StateReceiver> {
        self.controller_peer().map(Peer::state)
    }

    /// The newest value of one state key of the controller (the scene's pose).
    pub fn state_value(&self, key: StateKey) -> Option<StateEntry> {
        self.controller_peer()
            .and_then(|p| p.state().get(key).copied())
    }

    /// The newest value of one state key of one client.
    pub fn state_value_of(&self, client: ClientId, key: StateKey) -> Option<StateEntry> {
        self.peers.get(client)?.state().get(key).copied()
    }

    /// Fuzzing only: installs a connected client with the given secrets, skipping the
    /// handshake (so a fuzzer can reach the protected paths quickly). Several calls install
    /// several clients (up to `max_clients`; beyond, None).
    #[cfg(fuzzing)]
    #[allow(clippy::too_many_arguments)]
    pub fn fuzz_connect(
        &mut self,
        now: Micros,
        addr: SocketAddr,
        connection_id: u64,
        suite: crate::crypto::Suite,
        send: [u8; 32],
        recv: [u8; 32],
        key_update_log2: u8,
        video_auth_only: bool,
    ) -> Option<ClientId> {
        if self.peers.len() >= self.max_clients() {
            return None;
        }
        let id = ClientId(self.next_client);
        self.next_client += 1;
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(&id.0.to_le_bytes());
        let protection =
            crate::crypto::Protection::new(suite, send, recv, key_update_log2, video_auth_only);
        let info = ClientInfo {
            id,
            addr,
            name: "fuzz".into(),
            connection_id,
            connected_us: now,
            key,
            fingerprint: String::new(),
            suite,
            view: None,
        };
        let mut p = Peer::new(
            &self.cfg,
            self.cfg.params,
            &self.published,
            info,
            1,
            Vec::new(),
            protection,
            now,
            connection_id,
        );
        p.fuzz_confirm();
        self.peers.insert(usize::MAX, p);
        self.assign_roles(now);
        Some(id)
    }

    /// Queues a raw layer-2 answer ([`wire::ControlFrame::LinkAddress`] with the host's MAC,
    /// or [`wire::ControlFrame::LinkDeclined`]) for the client at `addr`; other frames are
    /// ignored.
    pub fn send_link_frame(&mut self, _now: Micros, addr: SocketAddr, frame: wire::ControlFrame) {
        if !matches!(
            frame,
            wire::ControlFrame::LinkAddress { .. } | wire::ControlFrame::LinkDeclined { .. }
        ) {
            return;
        }
        if let Some(peer) = self.peers.by_addr_mut(addr) {
            peer.queue(frame);
        }
    }

    /// Queues a frame's timing report for one client (its counts made relative to the first
    /// frame it was sent).
    pub fn send_frame_timing_to(&mut self, _now: Micros, client: ClientId, timing: FrameTiming) {
        if let Some(p) = self.peers.get_mut(client) {
            p.queue_frame_timing(timing);
        }
    }

    /// Queues a sliced frame's encoder timing for one client (a SliceTiming frame, beside its
    /// FrameTiming): when its first and last slice were handed to the network, µs after
    /// capture.
    pub fn send_slice_timing_to(
        &mut self,
        _now: Micros,
        client: ClientId,
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    ) {
        if let Some(p) = self.peers.get_mut(client) {
            p.queue(wire::ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            });
        }
    }

    /// Queues a frame's timing report for every client (counts made relative per client).
    pub fn send_frame_timing(&mut self, now: Micros, timing: FrameTiming) {
        for id in self.peers.ids() {
            self.send_frame_timing_to(now, id, timing);
        }
    }

    /// Queues the pose frame `frame_number` was rendered for, for the controller (the pose is
    /// its head's, its sample time on its clock; viewers are sent the picture without it and
    /// show it as it is). Call it before sending the frame, so it leaves ahead of the shards,
    /// and again with the frame's timing: the client keeps the first copy.
    pub fn send_frame_pose(&mut self, _now: Micros, frame_number: u32, sample: PoseSample) {
        let Some(id) = self.roles.controller() else {
            return;
        };
        if let Some(p) = self.peers.get_mut(id) {
            p.queue(wire::ControlFrame::FramePose {
                frame_number,
                sample,
            });
        }
    }

    /// Publishes a key of host → client state (haptics, other players, application state) on
    /// the latest-wins channel, to every client (each has its own channel, acknowledgements
    /// and budget). Kept while no client is connected; a client that connects gets every
    /// key's current value. False when the key table is full.
    pub fn publish_state(&mut self, now: Micros, key: StateKey, value: StateValue) -> bool {
        if !self.published.contains_key(&key) && self.published.len() >= crate::state::MAX_KEYS {
            return false;
        }
        self.published.insert(key, value);
        let mut ok = true;
        for p in self.peers.iter_mut() {
            ok &= p.publish(now, key, value);
        }
        ok
    }

    /// Staleness of the host → client state (the controller's; None without a client).
    pub fn state_staleness(&self, now: Micros) -> Option<Staleness> {
        self.controller_peer().map(|p| p.state_staleness(now))
    }

    /// Ends every session (host shutting down).
    pub fn close(&mut self, now: Micros) {
        self.close_with(now, ByeReason::ShuttingDown);
    }

    /// Says goodbye to every client with `reason` (sent with the next datagrams; the sessions
    /// end once it is built).
    pub fn close_with(&mut self, _now: Micros, reason: ByeReason) {
        for p in self.peers.iter_mut() {
            p.queue(wire::ControlFrame::Bye { reason });
        }
    }

    /// Says goodbye to one client and ends its session now.
    pub fn close_client(&mut self, now: Micros, client: ClientId, reason: ByeReason) {
        if self.peers.get(client).is_some() {
            let gone = match reason {
                ByeReason::TooSlow => GoneReason::TooSlow,
                ByeReason::Replaced => GoneReason::Replaced,
                ByeReason::ShuttingDown => GoneReason::ShuttingDown,
                ByeReason::Failed => GoneReason::Failed,
                ByeReason::Closed | ByeReason::Other => GoneReason::Bye,
            };
            self.end_peer(now, client, reason, gone);
        }
    }

    /// How long a client may be unheard before it is silent ([`HostConfig::silence_us`]).
    pub fn silence_us(&self) -> Micros {
        self.cfg.silence_after_us()
    }

    /// Per-path counters and state of the controller's paths (one entry without multipath).
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.controller_peer()
            .map(Peer::path_stats)
            .unwrap_or_default()
    }

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
        for peer in self.peers.iter_mut() {
            n += peer.send_audio(
                now,
                &body,
                &mut self.stats,
                &mut self.sched,
                &mut self.transmits,
            ) as usize;
        }
        Ok(n)
    }

    // ---- frames --------------------------------------------------------------------------

    /// [`send_frame`](Self::send_frame), saying whether an intra-refresh sweep starts with
    /// this frame (its shards carry [`wire::shard_flags::REFRESH`], and a client waiting for
    /// a picture may start on it).
    pub fn send_frame_flagged(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        refresh_start: bool,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_slice_flagged(
            now,
            frame_number,
            capture_us,
            keyframe,
            refresh_start,
            SliceId::WHOLE,
            data,
        )
    }

    /// Packetizes one slice of a frame sent in slices (docs/PROTOCOL.md §6.3) — its Annex B
    /// NAL units — into shards of its own and its own parity, for every client that takes it,
    /// as soon as the encoder hands it over. Slices of a frame share its number, capture time
    /// and keyframe flag; each may be sent as soon as it is encoded, in any order.
    /// [`SliceId::WHOLE`] sends a whole frame ([`send_frame`](Self::send_frame)).
    pub fn send_slice(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        slice: SliceId,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_slice_flagged(now, frame_number, capture_us, keyframe, false, slice, data)
    }

    /// [`send_slice`](Self::send_slice), saying whether an intra-refresh sweep starts with
    /// this frame (every slice of it says so: its shards carry
    /// [`wire::shard_flags::REFRESH`]).
    #[allow(clippy::too_many_arguments)]
    pub fn send_slice_flagged(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        refresh_start: bool,
        slice: SliceId,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        let mut out = Vec::new();
        let meta = FrameMeta {
            entry_point: keyframe || refresh_start,
            slice,
            ..FrameMeta::new(frame_number, capture_us, keyframe)
        };
        let n = self.send_frame_shared(now, &meta, &Arc::new(data.to_vec()), &mut out)?;
        for c in out {
            self.transmits.extend(c.datagrams);
        }
        Ok(n)
    }

    /// Packetizes one encoded frame (an Annex B access unit) for every client that takes it
    /// and queues the datagrams (controller first) for [`poll_transmit`](Self::poll_transmit);
    /// returns how many it queued. Copies `data` once (for the retransmission ring): the
    /// runtime hands the encoder's buffer to [`send_frame_shared`](Self::send_frame_shared)
    /// instead.
    pub fn send_frame(
        &mut self,
        now: Micros,
        frame_number: u32,
        capture_us: Micros,
        keyframe: bool,
        data: &[u8],
    ) -> Result<usize, NoClient> {
        self.send_frame_flagged(now, frame_number, capture_us, keyframe, false, data)
    }

    /// Packetizes one encoded frame once — its shards, and the Reed–Solomon parity the
    /// receiving client with the most loss needs — then seals each receiving client's copy
    /// (data shards, then the parity its own loss needs) into `out`, one entry per client, the
    /// controller first. A client that just joined takes only entry points, a paused viewer
    /// only keyframes. Control datagrams that must precede the shards (a repeated Accept) go to
    /// [`poll_transmit`](Self::poll_transmit). Returns how many datagrams went into `out`.
    pub fn send_frame_shared(
        &mut self,
        now: Micros,
        meta: &FrameMeta,
        data: &Arc<Vec<u8>>,
        out: &mut Vec<ClientDatagrams>,
    ) -> Result<usize, NoClient> {
        if self.peers.is_empty() {
            return Err(NoClient);
        }
        let sending = stream::Sending {
            cfg: &self.cfg,
            peers: self.peers.as_mut_slice(),
            controller: self.roles.controller(),
            stats: &mut self.stats,
            sched: &mut self.sched,
            control_out: &mut self.control_out,
        };
        Ok(self.stream.send_frame(now, meta, data, sending, out))
    }
}
