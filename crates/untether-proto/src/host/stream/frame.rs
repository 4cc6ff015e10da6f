//! One stream, many clients: a frame's shard layout and its Reed–Solomon parity are computed
//! once; each client's copy is only sealed (AEAD under its keys, with its packet numbers) and
//! queued, the controller's first. Each client gets the parity its own loss calls for (the
//! first of the frame's parity shards, whose count is the largest any receiving client needs).
//! The last frames' data shards are kept once, as the encoder's buffer (an `Arc`, never
//! copied), for every client's retransmissions.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::super::peer::{BesideAccept, Peer};
use super::super::{ClientId, HostConfig, HostStats};
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

/// What the packetizer borrows of the session: the settings, the peers (in admission order)
/// and who controls, the counters, the scheduler's scratch and the control queue (a repeated
/// Accept goes ahead of a frame's shards).
pub(in crate::host) struct Sending<'a> {
    pub cfg: &'a HostConfig,
    pub peers: &'a mut [Peer],
    pub controller: Option<ClientId>,
    pub stats: &'a mut HostStats,
    pub sched: &'a mut Vec<usize>,
    pub control_out: &'a mut VecDeque<Transmit>,
}

impl Stream {
    /// Packetizes one encoded frame (slice) once — its shards, and the Reed–Solomon parity the
    /// receiving client with the most loss needs — then seals each receiving client's copy
    /// (data shards, then the parity its own loss needs) into `out`, one entry per client, the
    /// controller first. A client that just joined takes only entry points, a paused viewer
    /// only keyframes. Returns how many datagrams went into `out`.
    pub(in crate::host) fn send_frame(
        &mut self,
        now: Micros,
        meta: &FrameMeta,
        data: &Arc<Vec<u8>>,
        s: Sending<'_>,
        out: &mut Vec<ClientDatagrams>,
    ) -> usize {
        if data.is_empty() {
            return 0;
        }
        let Sending {
            cfg,
            peers,
            controller,
            stats,
            sched,
            control_out,
        } = s;
        let policy = cfg.fec;
        let keyframe = meta.keyframe;
        let slice = meta.slice;
        let first_slice = slice.index == 0;
        if keyframe && first_slice {
            self.keyframes.on_keyframe_sent(meta.frame_number);
        }
        self.next_frame = Some(meta.frame_number.wrapping_add(1));
        // Who takes it, controller first (a client waiting for a picture starts at any slice
        // of an entry point: slices come in any order, and the rest of that frame follows).
        let mut order: Vec<usize> = (0..peers.len()).collect();
        order.sort_by_key(|&i| Some(peers[i].info().id) != controller);
        let mut receivers = Vec::with_capacity(order.len());
        for i in order {
            if peers[i].offered(meta.keyframe, meta.entry_point, first_slice) {
                receivers.push(i);
            }
        }
        if receivers.is_empty() {
            return 0;
        }
        let max = cfg.params.max_datagram as usize;
        let beside = BesideAccept::of(cfg);
        for &i in &receivers {
            // Ahead of this frame's shards (control goes first): if the Accept was lost, the
            // client connects now instead of after its 200 ms HelloFinish repeat.
            if peers[i].accept_again(now, &beside) {
                stats.accepts_repeated += 1;
                peers[i].build_controls(now, max, stats, sched, control_out);
            }
        }
        // The layout, once.
        let mut max_payload = max
            .saturating_sub(HEADER_LEN + SHARD_HEADER_LEN + TAG_LEN)
            .clamp(1, u16::MAX as usize);
        if !policy.is_off() && max_payload >= 2 {
            // Reed–Solomon works on 16-bit symbols: parity needs an even shard length.
            max_payload &= !1;
        }
        let losses: Vec<Option<f64>> = receivers.iter().map(|&i| peers[i].loss()).collect();
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
            return 0;
        };
        let (m, l) = (template.parity_count as usize, template.shard_len as usize);
        // The parity, once.
        let mut parity = 0;
        if m > 0 {
            let buf = &mut self.parity_buf;
            buf.clear();
            buf.resize(m * l, 0);
            let ok = self
                .fec
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
            let peer = &mut peers[i];
            let parity_shards = self
                .parity_buf
                .chunks(l.max(1))
                .take(parity.min(needs[r]))
                .enumerate()
                .map(|(j, shard)| (parity_header(&template, j as u16), shard));
            let datagrams =
                peer.seal_frame(now, class, meta, &shards, data, parity_shards, stats, sched);
            total += datagrams.len();
            out.push(ClientDatagrams {
                client: peer.info().id,
                datagrams,
            });
        }
        stats.frames_sent += first_slice as u64;
        if slice.count > 1 {
            stats.slices_sent += 1;
        }
        stats.frames_with_parity += (parity > 0 && first_slice) as u64;
        if cfg.retransmit {
            let kept = SentFrame::new(
                meta.frame_number,
                slice.index,
                keyframe,
                data.clone(),
                shards,
            );
            self.resend.keep(kept, slice.count);
        }
        total
    }

    /// A client's ShardNack (slice 0 of a frame sent whole) or SliceNack: its missing data
    /// shards of a kept frame (slice), deduplicated, each at most twice, within its resend
    /// byte budget ([`super::resend`]; `shape`: the stream's bitrate, frame rate and largest
    /// datagram), sealed for it on `queue`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::host) fn retransmit(
        &mut self,
        now: Micros,
        peer: &mut Peer,
        frame_number: u32,
        slice_index: u8,
        missing: &[u16],
        shape: (u32, u32, u64),
        stats: &mut HostStats,
        sched: &mut Vec<usize>,
        queue: &mut VecDeque<Transmit>,
    ) {
        stats.shard_nacks_received += 1;
        let Some(r) = self.resend.on_nack(
            now,
            peer.info().id,
            frame_number,
            slice_index,
            missing,
            shape,
        ) else {
            stats.shard_nacks_too_late += 1;
            return;
        };
        if r.shards.is_empty() {
            return;
        }
        peer.resend(now, &r, stats, sched, queue);
    }
}
