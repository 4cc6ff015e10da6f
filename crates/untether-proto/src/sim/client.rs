//! An extra client of a simulated run: its session, links and the decoder check.

use std::net::SocketAddr;

use super::{frame_payload, SimLink, SimResult, SimRng, ViewerResult};
use crate::client::{ClientEvent, ClientSession};
use crate::Micros;

/// An extra client of a simulated run: its session (from its join), links and decoder check.
pub(super) struct SimClient {
    pub(super) addr: SocketAddr,
    pub(super) session: Option<ClientSession>,
    pub(super) down: SimLink,
    pub(super) up: SimLink,
    pub(super) join_at: Micros,
    pub(super) next_input: Micros,
    pub(super) decoder_at: Option<u32>,
    pub(super) last_delivery: Option<Micros>,
    pub(super) r: ViewerResult,
}

impl SimClient {
    /// Its client's events: frames checked as the main client's are.
    pub(super) fn events(
        &mut self,
        now: Micros,
        sizes: &std::collections::HashMap<u32, (bool, usize)>,
    ) {
        let Some(c) = self.session.as_mut() else {
            return;
        };
        while let Some(ev) = c.poll_event() {
            match ev {
                ClientEvent::Connected(_) => self.r.connected_at = Some(now),
                ClientEvent::Frame(f) => {
                    let intact = sizes.get(&f.frame_number).is_some_and(|&(k, len)| {
                        k == f.keyframe && f.data == frame_payload(f.frame_number, k, len)
                    });
                    let has_reference =
                        f.keyframe || self.decoder_at == Some(f.frame_number.wrapping_sub(1));
                    if intact && has_reference {
                        self.decoder_at = Some(f.frame_number);
                    } else {
                        self.r.corrupted += 1;
                        self.decoder_at = None;
                    }
                    if let Some(prev) = self.last_delivery {
                        self.r.longest_gap_us = self.r.longest_gap_us.max(now - prev);
                    }
                    self.last_delivery = Some(now);
                    self.r.delivered.push((f.frame_number, f.keyframe, now));
                }
                ClientEvent::Role {
                    role,
                    input_granted,
                    paused,
                } => self.r.roles.push((
                    role == crate::wire::ClientRole::Controller,
                    input_granted,
                    paused,
                )),
                ClientEvent::HostGone(why) => self.r.gone.push(why),
                _ => {}
            }
        }
        if c.is_closed() {
            self.r.client = c.stats();
            self.session = None;
        }
    }

    pub(super) fn next_times(&self) -> impl Iterator<Item = Micros> + '_ {
        let session = match &self.session {
            Some(c) => c.poll_timeout(),
            None if self.r.gone.is_empty() => Some(self.join_at),
            None => None,
        };
        [session, self.down.next_delivery(), self.up.next_delivery()]
            .into_iter()
            .flatten()
    }
}

/// The simulated decoder takes one slice (or the report of a lost one) of a frame sent in
/// slices; checks decode order. When the frame ends (its last slice), returns (frame, lost
/// slices, every slice intact).
pub(super) fn take_slice(
    slicing: &mut Option<(u32, Vec<u8>, Vec<u8>, bool)>,
    r: &mut SimResult,
    frame: u32,
    slice: crate::assembler::SliceId,
    intact: bool,
    lost: bool,
) -> Option<(u32, Vec<u8>, bool)> {
    if slicing.as_ref().is_some_and(|s| s.0 != frame) {
        // A frame left unfinished: another one started.
        r.slice_order_violations += 1;
        *slicing = None;
    }
    let s = slicing.get_or_insert_with(|| (frame, Vec::new(), Vec::new(), true));
    let first_ok = !s.1.is_empty() || slice.index == 0;
    let last_ok = !slice.is_last() || s.1.len() + 1 == slice.count as usize;
    if !first_ok || !last_ok || s.1.contains(&slice.index) {
        r.slice_order_violations += 1;
    }
    s.1.push(slice.index);
    if lost {
        s.2.push(slice.index);
    }
    s.3 &= intact;
    if slice.is_last() {
        let (f, _, lost, intact) = slicing.take()?;
        return Some((f, lost, intact));
    }
    None
}

pub(super) fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut rng = SimRng::new(seed);
    let mut out = [0u8; 32];
    for c in out.chunks_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    out
}
