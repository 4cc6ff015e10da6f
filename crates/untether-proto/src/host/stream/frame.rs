//! One stream, many clients: a frame's shard layout and its Reed–Solomon parity are computed
//! once; each client's copy is only sealed (AEAD under its keys, with its packet numbers) and
//! queued, the controller's first. Each client gets the parity its own loss calls for (the
//! first of the frame's parity shards, whose count is the largest any receiving client needs).
//! The last frames' data shards are kept once, as the encoder's buffer (an `Arc`, never
//! copied), for every client's retransmissions.

use std::ops::Range;
use std::sync::Arc;

use super::super::peer::{queue_accept, BesideAccept, ACCEPT_REPEAT_FOR_US, ACCEPT_REPEAT_US};
use super::super::{ClientId, HostSession, NoClient};
use super::resend::SentFrame;
use super::Stream;
use crate::assembler::{parity_header, shard_slice_fec, SliceId};
use crate::crypto::TAG_LEN;
use crate::paths::Class;
use crate::wire::{self, ShardHeader, HEADER_LEN, SHARD_HEADER_LEN};
use crate::{Micros, Transmit};

/// What the host says about an encoded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameMeta {
    /// Numbered per stream (not per client): every client sees the same numbers.
    pub frame_number: u32,
    /// Host clock.
    pub capture_us: Micros,
    pub keyframe: bool,
    /// A client may start decoding here: a keyframe, or (intra refresh) the first frame of a
    /// refresh sweep. A client that just joined is sent only these (a paused viewer only
    /// keyframes). An
    /// entry point that is not a keyframe is a sweep's start: its shards carry
    /// [`wire::shard_flags::REFRESH`].
    pub entry_point: bool,
    /// Which slice of the frame this is (docs/PROTOCOL.md §6.3): [`SliceId::WHOLE`] for a
    /// frame sent whole. Every slice of a frame carries the frame's meta; a client waiting for
    /// a picture starts at an entry point's first slice to be sent (slices come in any order).
    pub slice: SliceId,
}

impl FrameMeta {
    /// A frame whose only entry points are keyframes.
    pub fn new(frame_number: u32, capture_us: Micros, keyframe: bool) -> FrameMeta {
        FrameMeta {
            frame_number,
            capture_us,
            keyframe,
            entry_point: keyframe,
            slice: SliceId::WHOLE,
        }
    }
}

/// One client's datagrams of a frame, in order (data shards, then its parity shards).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientDatagrams {
    pub client: ClientId,
    pub datagrams: Vec<Transmit>,
}

impl HostSession {
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
        if data.is_empty() {
            return Ok(0);
        }
        let policy = self.cfg.fec;
        let keyframe = meta.keyframe;
        let slice = meta.slice;
        let first_slice = slice.index == 0;
        if keyframe && first_slice {
            self.stream.keyframes.on_keyframe_sent(meta.frame_number);
        }
        self.stream.next_frame = Some(meta.frame_number.wrapping_add(1));
        // Who takes it, controller first (a client waiting for a picture starts at any slice
        // of an entry point: slices come in any order, and the rest of that frame follows).
        let mut order: Vec<usize> = (0..self.peers.len()).collect();
        let controller = self.roles.controller();
        order.sort_by_key(|&i| Some(self.peers[i].info.id) != controller);
        let mut receivers = Vec::with_capacity(order.len());
        for i in order {
            if self.peers[i].takes(meta.keyframe, meta.entry_point) {
                receivers.push(i);
            } else if first_slice {
                self.peers[i].counters.frames_skipped += 1;
            }
        }
        if receivers.is_empty() {
            return Ok(0);
        }
        for &i in &receivers {
            let p = &self.peers[i];
            if !p.confirmed
                && now >= p.accept_sent_us + ACCEPT_REPEAT_US
                && now < p.info.connected_us + ACCEPT_REPEAT_FOR_US
            {
                // Ahead of this frame's shards (control goes first): if the Accept was lost,
                // the client connects now instead of after its 200 ms HelloFinish repeat.
                let beside = BesideAccept::of(&self.cfg);
                let p = &mut self.peers[i];
                let params = p.params;
                queue_accept(&mut p.pending, params, &beside);
                p.accept_sent_us = now;
                self.stats.accepts_repeated += 1;
                self.build_controls_of(now, i);
            }
        }
        // The layout, once.
        let max = self.cfg.params.max_datagram as usize;
        let mut max_payload = max
            .saturating_sub(HEADER_LEN + SHARD_HEADER_LEN + TAG_LEN)
            .clamp(1, u16::MAX as usize);
        if !policy.is_off() && max_payload >= 2 {
            // Reed–Solomon works on 16-bit symbols: parity needs an even shard length.
            max_payload &= !1;
        }
        let losses: Vec<Option<f64>> = receivers
            .iter()
            .map(|&i| self.peers[i].loss.loss())
            .collect();
        let mut needs = vec![0usize; receivers.len()];
        let extra_flags = if meta.entry_point && !keyframe {
            wire::shard_flags::REFRESH
        } else {
            0
        };
        let shards: Vec<(ShardHeader, Range<usize>)> = shard_slice_fec(
            slice,
            meta.frame_number,
            meta.capture_us,
            keyframe,
            data.len(),
            max_payload,
            |k| {
                for (n, loss) in needs.iter_mut().zip(&losses) {
                    *n = policy.parity_count(k, keyframe, *loss);
                }
                needs.iter().copied().max().unwrap_or(0)
            },
        )
        .map(|(mut sh, range)| {
            sh.flags |= extra_flags;
            (sh, range)
        })
        .collect();
        let Some(&(template, _)) = shards.first() else {
            return Ok(0);
        };
        let (m, l) = (template.parity_count as usize, template.shard_len as usize);
        // The parity, once.
        let mut parity = 0;
        if m > 0 {
            let Stream {
                parity_buf: buf,
                fec,
                ..
            } = &mut self.stream;
            buf.clear();
            buf.resize(m * l, 0);
            let ok = fec
                .encode(data, l, m, |i, s| {
                    if let Some(d) = buf.get_mut(i * l..(i + 1) * l) {
                        d.copy_from_slice(s);
                    }
                })
                .is_ok();
            if ok {
                parity = m;
            }
        }
        let class = if keyframe {
            Class::KeyframeShard
        } else {
            Class::Shard
        };
        // Each client's copy: sealed under its keys.
        let mut total = 0;
        for (r, &i) in receivers.iter().enumerate() {
            let peer = &mut self.peers[i];
            peer.paths.schedule(class, now, &mut self.sched);
            let mut datagrams = Vec::with_capacity(shards.len() + needs[r]);
            let mut sealed = 0;
            for (sh, range) in &shards {
                if !peer.seal_shard(
                    &mut self.stats,
                    &mut datagrams,
                    &self.sched,
                    sh,
                    &data[range.clone()],
                ) {
                    break;
                }
                sealed += 1;
            }
            let mut parity_sent = 0;
            if sealed == shards.len() {
                for (j, shard) in self
                    .stream
                    .parity_buf
                    .chunks(l.max(1))
                    .take(parity.min(needs[r]))
                    .enumerate()
                {
                    let ph = parity_header(&template, j as u16);
                    if !peer.seal_shard(&mut self.stats, &mut datagrams, &self.sched, &ph, shard) {
                        break;
                    }
                    parity_sent += 1;
                }
            }
            peer.last_send_us = now;
            peer.counters.frames_sent += first_slice as u64;
            peer.counters.parity_shards_sent += parity_sent as u64;
            if meta.entry_point {
                peer.awaiting_entry = false;
            }
            self.stats.shards_sent += (sealed + parity_sent) as u64;
            self.stats.parity_shards_sent += parity_sent as u64;
            self.stats.frame_copies_sent += first_slice as u64;
            total += datagrams.len();
            out.push(ClientDatagrams {
                client: peer.info.id,
                datagrams,
            });
        }
        self.stats.frames_sent += first_slice as u64;
        if slice.count > 1 {
            self.stats.slices_sent += 1;
        }
        self.stats.frames_with_parity += (parity > 0 && first_slice) as u64;
        if self.cfg.retransmit {
            let kept = SentFrame::new(
                meta.frame_number,
                slice.index,
                keyframe,
                data.clone(),
                shards,
            );
            self.stream.resend.keep(kept, slice.count);
        }
        Ok(total)
    }

    /// A client's ShardNack (slice 0 of a frame sent whole) or SliceNack: its missing data
    /// shards of a kept frame (slice), deduplicated, each at most twice, within its resend
    /// byte budget ([`super::resend`]), sealed for it.
    pub(in crate::host) fn retransmit(
        &mut self,
        now: Micros,
        i: usize,
        frame_number: u32,
        slice_index: u8,
        missing: &[u16],
    ) {
        self.stats.shard_nacks_received += 1;
        let stream = (
            self.target_kbps.unwrap_or(self.cfg.params.bitrate_kbps),
            self.cfg.params.fps as u32,
            self.cfg.params.max_datagram as u64,
        );
        let id = self.peers[i].info.id;
        let Some(r) =
            self.stream
                .resend
                .on_nack(now, id, frame_number, slice_index, missing, stream)
        else {
            self.stats.shard_nacks_too_late += 1;
            return;
        };
        if r.shards.is_empty() {
            return;
        }
        let class = if r.keyframe {
            Class::KeyframeShard
        } else {
            Class::Shard
        };
        let peer = &mut self.peers[i];
        peer.paths.schedule(class, now, &mut self.sched);
        for (sh, range) in &r.shards {
            let Some(payload) = r.data.get(range.clone()) else {
                continue;
            };
            if !peer.seal_shard(
                &mut self.stats,
                &mut self.transmits,
                &self.sched,
                sh,
                payload,
            ) {
                break;
            }
            self.stats.shards_retransmitted += 1;
            peer.counters.shards_retransmitted += 1;
        }
    }
}
