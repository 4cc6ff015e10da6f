//! The frames on their way out to every client: packetized once by the session, sealed per
//! client, and handed to the socket in paced batches ([`InFlight`], `network.pacing`). Control
//! replies the session queued meanwhile leave between batches, never behind a frame; a newer
//! frame makes the older one send the rest at once. When a client's last datagram of a frame
//! has left it is sent the frame's timing (and the controller the frame's pose again); when
//! every client's has, the frame's `send` stage is recorded.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use untether_proto::{FrameMeta, FrameTiming, HostSession, Micros, Transmit};

use super::commands::{OutgoingFrame, OutgoingSlice, SlicesDone};
use super::inflight::{InFlight, Step};
use super::shared::{lock, HostShared};
use crate::pacing::Pacing;

/// The host's outgoing datagrams: the session's control replies and the frames in flight.
pub(crate) struct Outbox {
    control: VecDeque<Transmit>,
    frames: VecDeque<InFlight>,
    pacing: Pacing,
    fps: u32,
    /// Slices never sent (`HostSetup::lose_slices`, an impairment for tests).
    lose_slices: Vec<(u32, u8)>,
}

impl Outbox {
    pub fn new(pacing: Pacing, fps: u32) -> Outbox {
        Outbox {
            control: VecDeque::new(),
            frames: VecDeque::new(),
            pacing,
            fps,
            lose_slices: Vec::new(),
        }
    }

    /// Slices to lose on purpose (frame number, slice index).
    pub fn set_lose_slices(&mut self, lose: Vec<(u32, u8)>) {
        self.lose_slices = lose;
    }

    /// When the next paced batch is due (None: nothing waits for time).
    pub fn due(&self) -> Option<Micros> {
        self.frames.front().and_then(InFlight::due)
    }

    /// Moves what the session queued into the control queue (it leaves ahead of what follows).
    fn drain(&mut self, session: &mut HostSession, now: Micros) {
        while let Some(t) = session.poll_transmit(now) {
            self.control.push_back(t);
        }
    }

    /// Every frame in flight sends its rest at once (a goodbye, or a newer frame, follows).
    pub fn hurry(&mut self) {
        for f in self.frames.iter_mut() {
            f.hurry = true;
        }
    }

    /// A whole frame for every client (dropped when none is connected).
    pub fn send_frame(&mut self, session: &mut HostSession, now: Micros, f: OutgoingFrame) {
        if session.client_count() == 0 {
            // Nobody to send it to (the last client left after it was encoded).
            return;
        }
        // What the session queued before the frame leaves before it; the pose it was
        // rendered for too (the first datagram of its first batch).
        if let Some(p) = f.pose {
            session.send_frame_pose(now, f.frame_number, p);
        }
        self.drain(session, now);
        // A client waiting for a picture may start on a keyframe or a refresh sweep's start.
        let meta = FrameMeta {
            entry_point: f.keyframe || f.refresh_start,
            ..FrameMeta::new(f.frame_number, f.capture_us, f.keyframe)
        };
        let mut out = Vec::with_capacity(session.client_count());
        if session
            .send_frame_shared(now, &meta, &f.data, &mut out)
            .is_err()
        {
            return;
        }
        // A repeated Accept goes ahead of the shards.
        self.drain(session, now);
        if out.iter().all(|c| c.datagrams.is_empty()) {
            // Every client is waiting for a keyframe (just joined) or paused.
            return;
        }
        self.close_older();
        let mut flight = InFlight::new(
            f.frame_number,
            f.timing,
            f.handed_us,
            now,
            out,
            self.pacing,
            self.fps,
        );
        flight.pose = f.pose;
        self.frames.push_back(flight);
    }

    /// Frames before a new one end: a frame whose encoder never finished (it failed) ends
    /// here, and every older one sends its rest at once.
    fn close_older(&mut self) {
        for older in self.frames.iter_mut() {
            older.close();
            older.hurry = true;
        }
    }

    /// One slice of a frame sent in slices: packetized once, sealed for every client that
    /// takes it and queued at once behind what is in flight, each client's datagrams paced
    /// over its share of the pacing window.
    pub fn send_slice(&mut self, session: &mut HostSession, now: Micros, s: OutgoingSlice) {
        if session.client_count() == 0
            || self.lose_slices.contains(&(s.frame_number, s.slice.index))
        {
            return;
        }
        let open = |f: &InFlight| f.open && f.frame_number == s.frame_number;
        if !self.frames.back().is_some_and(open) {
            // The pose the frame was rendered for leaves ahead of its first slice.
            if let Some(p) = s.pose {
                session.send_frame_pose(now, s.frame_number, p);
            }
        }
        self.drain(session, now);
        let meta = FrameMeta {
            entry_point: s.keyframe || s.refresh_start,
            slice: s.slice,
            ..FrameMeta::new(s.frame_number, s.capture_us, s.keyframe)
        };
        let mut out = Vec::with_capacity(session.client_count());
        if session
            .send_frame_shared(now, &meta, &Arc::new(s.data), &mut out)
            .is_err()
        {
            return;
        }
        // A repeated Accept goes ahead of the shards.
        self.drain(session, now);
        let window_us = self.pacing.window_us(self.fps) / s.slice.count.max(1) as u64;
        match self.frames.back_mut() {
            Some(f) if open(f) => {
                f.add(now, out, self.pacing, window_us);
                f.handed_us = s.handed_us;
            }
            _ => {
                self.close_older();
                let timing = FrameTiming {
                    frame_number: s.frame_number,
                    ..Default::default()
                };
                let mut f = InFlight::new(
                    s.frame_number,
                    timing,
                    s.handed_us,
                    now,
                    Vec::new(),
                    self.pacing,
                    self.fps,
                );
                f.add(now, out, self.pacing, window_us);
                f.open = true;
                f.pose = s.pose;
                self.frames.push_back(f);
            }
        }
    }

    /// The encoder finished a frame sent in slices: each client's copy is timed (the client's
    /// frame-end signal) once its datagrams have left; the frame ends when all have.
    pub fn slices_done(&mut self, d: SlicesDone) {
        if let Some(f) = self
            .frames
            .iter_mut()
            .rev()
            .find(|f| f.open && f.frame_number == d.frame_number)
        {
            f.timing = d.timing;
            f.slices = Some((d.slice_count, d.first_out_us, d.last_out_us));
            f.close();
        }
    }

    /// The next datagram due: a control reply, what the session queued, or the next datagram
    /// of the oldest frame in flight.
    pub fn poll(
        &mut self,
        session: &mut HostSession,
        shared: &HostShared,
        now: Micros,
    ) -> Option<Transmit> {
        if let Some(t) = self.control.pop_front() {
            return Some(t);
        }
        if let Some(t) = session.poll_transmit(now) {
            return Some(t);
        }
        self.next_frame_datagram(session, shared, now)
    }

    /// The next datagram of the oldest frame in flight, if one is due; times each client's
    /// copy when its last datagram has left, and finishes frames whose datagrams have all left.
    fn next_frame_datagram(
        &mut self,
        session: &mut HostSession,
        shared: &HostShared,
        now: Micros,
    ) -> Option<Transmit> {
        loop {
            let f = self.frames.front_mut()?;
            match f.step(now) {
                Step::Send(t) => return Some(t),
                Step::Left(clients) => {
                    let send_done = crate::clock::now_us();
                    let timing = FrameTiming {
                        frame_number: f.frame_number,
                        send_us: send_done.saturating_sub(f.handed_us).min(u32::MAX as u64) as u32,
                        send_done_us: send_done,
                        ..f.timing
                    };
                    let controller = session.controller();
                    for c in clients {
                        session.send_frame_timing_to(send_done, c, timing);
                        if let Some((count, first, last)) = f.slices {
                            session.send_slice_timing_to(
                                send_done,
                                c,
                                f.frame_number,
                                count,
                                first,
                                last,
                            );
                        }
                        if let (Some(p), true) = (f.pose, Some(c) == controller) {
                            // The second copy, beside the timing: one lost control datagram
                            // loses no pose.
                            session.send_frame_pose(send_done, f.frame_number, p);
                        }
                    }
                    self.drain(session, send_done);
                }
                Step::Wait => return None,
                Step::Done => {
                    let done = self.frames.pop_front()?;
                    self.finish_frame(shared, done);
                    if let Some(t) = self.control.pop_front() {
                        return Some(t);
                    }
                }
            }
        }
    }

    /// The frame's last datagram has left, to every client: record its send time.
    fn finish_frame(&self, shared: &HostShared, f: InFlight) {
        let send_done = crate::clock::now_us();
        let c = &shared.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        if f.batch_count > 1 {
            c.paced_frames.fetch_add(1, Ordering::Relaxed);
        }
        let send_us = send_done.saturating_sub(f.handed_us);
        let mut sm = lock(&shared.samples);
        sm.send.push_us(send_us as i64);
        if self.pacing.window_us(self.fps) > 0 {
            sm.pace.push_us(f.waited_us as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::pairing::tests::memory;
    use crate::identity::Access;
    use untether_proto::ClientId;

    fn session() -> HostSession {
        let (_, cfg) = memory(Access::Open);
        HostSession::new(cfg)
    }

    fn in_flight(frame_number: u32, client: u32, bytes: &[u8], pacing: Pacing) -> InFlight {
        InFlight::new(
            frame_number,
            FrameTiming::default(),
            0,
            100,
            vec![untether_proto::ClientDatagrams {
                client: ClientId(client),
                datagrams: bytes
                    .iter()
                    .map(|&n| Transmit {
                        dst: "127.0.0.1:9".parse().unwrap(),
                        payload: vec![n],
                    })
                    .collect(),
            }],
            pacing,
            60,
        )
    }

    fn sent(out: &mut Outbox, s: &mut HostSession, shared: &HostShared, now: Micros) -> Vec<u8> {
        std::iter::from_fn(|| out.poll(s, shared, now))
            .map(|t| t.payload[0])
            .collect()
    }

    #[test]
    fn paced_batches_leave_at_their_time_and_control_never_waits() {
        let pacing = Pacing {
            fraction: 0.5,
            batch: 2,
        };
        let (mut s, shared) = (session(), HostShared::new((0, 0)));
        let mut out = Outbox::new(pacing, 60);
        let window = pacing.window_us(60);
        out.frames.push_back(in_flight(7, 1, &[1, 2, 3], pacing));
        assert_eq!(sent(&mut out, &mut s, &shared, 100), vec![1, 2]);
        // The next batch is due half a window later: the driver sleeps until then.
        assert!(out.due().is_some_and(|t| t <= 100 + window / 2));
        // A control reply queued meanwhile leaves at once, ahead of the frame's rest.
        out.control.push_back(Transmit {
            dst: "127.0.0.1:9".parse().unwrap(),
            payload: vec![99],
        });
        assert_eq!(sent(&mut out, &mut s, &shared, 500), vec![99]);
        assert_eq!(sent(&mut out, &mut s, &shared, 100 + window / 2), vec![3]);
        // The frame is finished: counted once, as paced (two batches), its wait recorded.
        assert!(out.frames.is_empty());
        let c = &shared.counters;
        assert_eq!(c.sent.load(Ordering::Relaxed), 1);
        assert_eq!(c.paced_frames.load(Ordering::Relaxed), 1);
        assert!(lock(&shared.samples).pace.summary().is_some());
    }

    #[test]
    fn a_newer_frame_hurries_the_older_one_out_in_order() {
        let pacing = Pacing {
            fraction: 0.5,
            batch: 1,
        };
        let (mut s, shared) = (session(), HostShared::new((0, 0)));
        let mut out = Outbox::new(pacing, 60);
        out.frames.push_back(in_flight(1, 1, &[1, 2, 3], pacing));
        assert_eq!(sent(&mut out, &mut s, &shared, 100), vec![1]);
        out.hurry();
        out.frames.push_back(in_flight(2, 1, &[4], pacing));
        assert_eq!(sent(&mut out, &mut s, &shared, 110), vec![2, 3, 4]);
        assert_eq!(shared.counters.sent.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn frames_without_a_client_are_dropped() {
        let (mut s, shared) = (session(), HostShared::new((0, 0)));
        let mut out = Outbox::new(Pacing::default(), 60);
        let frame = OutgoingFrame {
            frame_number: 0,
            capture_us: 0,
            keyframe: true,
            refresh_start: false,
            data: Arc::new(vec![0; 100]),
            handed_us: 0,
            timing: FrameTiming::default(),
            pose: None,
        };
        out.send_frame(&mut s, 0, frame);
        assert!(out.frames.is_empty());
        assert!(sent(&mut out, &mut s, &shared, 0).is_empty());
    }
}
