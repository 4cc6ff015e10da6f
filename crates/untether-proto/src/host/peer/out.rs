//! What leaves for a client: its control datagrams, sealed shards and audio packets, each
//! numbered with its packet numbers, sealed with its keys, a copy on every path the scheduler
//! chose, and counted.

use std::collections::VecDeque;
use std::ops::Range;

use super::super::stream::resend::Resend;
use super::super::{FrameMeta, HostStats};
use super::Peer;
use crate::crypto::TAG_LEN;
use crate::paths::Class;
use crate::wire::{
    self, encode_control, ControlFrame, Header, PacketType, HEADER_LEN, SHARD_HEADER_LEN,
};
use crate::{Micros, Transmit};

impl Peer {
    /// One sealed control datagram of `frames` (none: a keep-alive), numbered with this
    /// client's next packet number; None when sealing fails (the number is spent either way).
    pub(super) fn seal_control(
        &mut self,
        frames: &[ControlFrame],
        capacity: usize,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(capacity);
        let pn = self.next_pn;
        encode_control(
            &Header::new(PacketType::Control, self.info.connection_id, pn),
            frames,
            &mut out,
        );
        self.next_pn += 1;
        self.protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .ok()
            .map(|_| out)
    }

    /// Queues `payload` on each scheduled path (copies for all but the last), counting it.
    pub(super) fn fan_out(
        &mut self,
        sched: &[usize],
        stats: &mut HostStats,
        queue: &mut impl Extend<Transmit>,
        payload: Vec<u8>,
    ) {
        let len = payload.len();
        let mut payload = Some(payload);
        for (k, &i) in sched.iter().enumerate() {
            let Some(dst) = self.paths.addr(i) else {
                continue;
            };
            let p = if k + 1 == sched.len() {
                payload.take().unwrap_or_default()
            } else {
                payload.clone().unwrap_or_default()
            };
            self.paths.on_sent(i, len);
            stats.bytes_sent += len as u64;
            stats.datagrams_sent += 1;
            self.counters.bytes_sent += len as u64;
            self.counters.datagrams_sent += 1;
            queue.extend(std::iter::once(Transmit { dst, payload: p }));
        }
    }

    /// Seals one shard (data or parity) into a datagram and queues it on the paths in
    /// `sched`; false if sealing failed.
    fn seal_shard(
        &mut self,
        stats: &mut HostStats,
        queue: &mut impl Extend<Transmit>,
        sched: &[usize],
        sh: &wire::ShardHeader,
        payload: &[u8],
    ) -> bool {
        let mut out = Vec::with_capacity(HEADER_LEN + SHARD_HEADER_LEN + payload.len() + TAG_LEN);
        let pn = self.next_pn;
        Header::new(PacketType::Shard, self.info.connection_id, pn).write(&mut out);
        self.next_pn += 1;
        sh.write(&mut out);
        out.extend_from_slice(payload);
        let encrypt = !self.protection.video_auth_only;
        if self
            .protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, encrypt)
            .is_err()
        {
            return false;
        }
        self.fan_out(sched, stats, queue, out);
        true
    }

    /// Seals one encoded audio packet (`body`) and queues it on the control class's paths;
    /// false if sealing failed.
    pub(in crate::host) fn send_audio(
        &mut self,
        now: Micros,
        body: &[u8],
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
        queue: &mut VecDeque<Transmit>,
    ) -> bool {
        let mut out = Vec::with_capacity(HEADER_LEN + body.len() + TAG_LEN);
        let pn = self.next_pn;
        Header::new(PacketType::Audio, self.info.connection_id, pn).write(&mut out);
        self.next_pn += 1;
        out.extend_from_slice(body);
        // Audio is always encrypted, like control and input.
        if self
            .protection
            .sealer
            .seal(&mut out, HEADER_LEN, pn, true)
            .is_err()
        {
            return false;
        }
        self.last_send_us = now;
        self.paths.schedule(Class::Control, now, sched);
        self.fan_out(sched, stats, queue, out);
        true
    }

    /// Builds every pending control frame into protected datagrams (a copy per scheduled
    /// path) on `control_out`; true if a Bye went out (the session is over).
    pub(in crate::host) fn build_controls(
        &mut self,
        now: Micros,
        max_datagram: usize,
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
        control_out: &mut VecDeque<Transmit>,
    ) -> bool {
        let max = max_datagram;
        // Host → client state, once the application has published any (an idle channel
        // sends nothing, not even its keep-alive).
        if self.state_tx.key_count() > 0 {
            if let Some(p) = self
                .state_tx
                .poll_packet(now, max.saturating_sub(HEADER_LEN + TAG_LEN + 3))
            {
                self.pending.push(ControlFrame::State(p));
            }
        }
        let mut closing = false;
        while !self.pending.is_empty() {
            let mut frames = Vec::new();
            let mut len = HEADER_LEN + TAG_LEN;
            while let Some(f) = self.pending.first() {
                let l = f.encoded_len();
                if !frames.is_empty() && len + l > max {
                    break;
                }
                let mut f = self.pending.remove(0);
                if let ControlFrame::Pong { sent_us, .. } | ControlFrame::Ping { sent_us, .. } =
                    &mut f
                {
                    *sent_us = now;
                }
                closing |= matches!(f, ControlFrame::Bye { .. });
                len += l;
                frames.push(f);
            }
            let Some(out) = self.seal_control(&frames, len) else {
                continue;
            };
            self.last_send_us = now;
            self.paths.schedule(Class::Control, now, sched);
            self.fan_out(sched, stats, control_out, out);
        }
        closing
    }

    /// Its copy of a frame (slice): the data shards, then (all of them sealed) its parity
    /// shards, sealed under its keys for the paths scheduled for `class`; counted.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::host) fn seal_frame<'p>(
        &mut self,
        now: Micros,
        class: Class,
        meta: &FrameMeta,
        shards: &[(wire::ShardHeader, Range<usize>)],
        data: &[u8],
        parity: impl Iterator<Item = (wire::ShardHeader, &'p [u8])>,
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
    ) -> Vec<Transmit> {
        let first_slice = meta.slice.index == 0;
        self.paths.schedule(class, now, sched);
        let mut datagrams = Vec::with_capacity(shards.len() + parity.size_hint().0);
        let mut sealed = 0;
        for (sh, range) in shards {
            if !self.seal_shard(stats, &mut datagrams, sched, sh, &data[range.clone()]) {
                break;
            }
            sealed += 1;
        }
        let mut parity_sent = 0;
        if sealed == shards.len() {
            for (ph, shard) in parity {
                if !self.seal_shard(stats, &mut datagrams, sched, &ph, shard) {
                    break;
                }
                parity_sent += 1;
            }
        }
        self.last_send_us = now;
        self.counters.frames_sent += first_slice as u64;
        self.counters.parity_shards_sent += parity_sent as u64;
        if meta.entry_point {
            self.awaiting_entry = false;
        }
        stats.shards_sent += (sealed + parity_sent) as u64;
        stats.parity_shards_sent += parity_sent as u64;
        stats.frame_copies_sent += first_slice as u64;
        datagrams
    }

    /// Shards the resend store allowed it ([`Resend`]), sealed again (new packet numbers) on
    /// `queue`; counted.
    pub(in crate::host) fn resend(
        &mut self,
        now: Micros,
        r: &Resend,
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
        queue: &mut VecDeque<Transmit>,
    ) {
        let class = if r.keyframe {
            Class::KeyframeShard
        } else {
            Class::Shard
        };
        self.paths.schedule(class, now, sched);
        for (sh, range) in &r.shards {
            let Some(payload) = r.data.get(range.clone()) else {
                continue;
            };
            if !self.seal_shard(stats, queue, sched, sh, payload) {
                break;
            }
            stats.shards_retransmitted += 1;
            self.counters.shards_retransmitted += 1;
        }
    }
}
