//! A frame on its way out to every client: each client's datagrams, in paced batches when
//! `network.pacing` is on (each client's share spread over the window on its own, the
//! controller's first within each batch), and when each client's last datagram left (its
//! frame timing) and the whole frame's (the `send` stage).

use std::collections::{BTreeMap, VecDeque};

use untether_proto::{ClientDatagrams, ClientId, FrameTiming, Micros, PoseSample, Transmit};

use crate::pacing::{self, Pacing};

/// A frame whose datagrams are going out.
pub(crate) struct InFlight {
    pub frame_number: u32,
    pub timing: FrameTiming,
    /// The controller's head pose it was rendered for (told again beside its timing).
    pub pose: Option<PoseSample>,
    pub handed_us: Micros,
    /// Batches not started yet, with the time each is due.
    pub batches: VecDeque<(Micros, Vec<(ClientId, Transmit)>)>,
    /// The batch going out now.
    pub current: VecDeque<(ClientId, Transmit)>,
    /// Datagrams not yet handed to the socket, per client (in the order they were sealed).
    remaining: Vec<(ClientId, usize)>,
    /// Clients whose last datagram was handed out by the previous call (it has left by the
    /// next one: the driver sends each datagram before it asks for the next).
    leaving: Vec<ClientId>,
    pub batch_count: u64,
    /// Time between batches not spent sending (the pacing), µs.
    pub waited_us: u64,
    pub last_batch_end: Option<Micros>,
    /// The current batch is going out.
    pub sending: bool,
    /// A newer frame is waiting: send the rest at once.
    pub hurry: bool,
}

/// What the next step of a frame in flight gives.
pub(crate) enum Step {
    /// Send this datagram now.
    Send(Transmit),
    /// These clients' last datagrams have left.
    Left(Vec<ClientId>),
    /// The next batch is not due yet.
    Wait,
    /// Every datagram has left.
    Done,
}

impl InFlight {
    /// A frame of the datagrams each client got, due from `now`, paced per `pacing` at `fps`.
    pub fn new(
        frame_number: u32,
        timing: FrameTiming,
        handed_us: Micros,
        now: Micros,
        clients: Vec<ClientDatagrams>,
        pacing: Pacing,
        fps: u32,
    ) -> InFlight {
        let window_us = pacing.window_us(fps);
        let remaining = clients
            .iter()
            .map(|c| (c.client, c.datagrams.len()))
            .filter(|&(_, n)| n > 0)
            .collect();
        // Batch offsets → the datagrams due then, each client's in its order, clients in the
        // order given (the controller's first).
        let mut by_offset: BTreeMap<u64, Vec<(ClientId, Transmit)>> = BTreeMap::new();
        for c in clients {
            let n = c.datagrams.len();
            let mut rest = c.datagrams.into_iter();
            if window_us == 0 || n <= pacing.batch {
                by_offset
                    .entry(0)
                    .or_default()
                    .extend(rest.map(|t| (c.client, t)));
                continue;
            }
            for (range, offset) in pacing::schedule(n, pacing.batch, window_us) {
                by_offset
                    .entry(offset)
                    .or_default()
                    .extend(rest.by_ref().take(range.len()).map(|t| (c.client, t)));
            }
        }
        let batches = by_offset
            .into_iter()
            .map(|(offset, b)| (now + offset, b))
            .collect();
        InFlight {
            frame_number,
            timing,
            pose: None,
            handed_us,
            batches,
            current: VecDeque::new(),
            remaining,
            leaving: Vec::new(),
            batch_count: 0,
            waited_us: 0,
            last_batch_end: None,
            sending: false,
            hurry: false,
        }
    }

    /// When this frame next has something to send (`Some(0)`: now).
    pub fn due(&self) -> Option<Micros> {
        if !self.current.is_empty() || !self.leaving.is_empty() {
            Some(0)
        } else {
            self.batches.front().map(|&(due, _)| due)
        }
    }

    /// The next thing to do for this frame at `now`.
    pub fn step(&mut self, now: Micros) -> Step {
        if !self.leaving.is_empty() {
            return Step::Left(std::mem::take(&mut self.leaving));
        }
        loop {
            if let Some((client, t)) = self.current.pop_front() {
                if let Some(r) = self.remaining.iter_mut().find(|(c, _)| *c == client) {
                    r.1 = r.1.saturating_sub(1);
                    if r.1 == 0 {
                        self.leaving.push(client);
                    }
                }
                return Step::Send(t);
            }
            if self.sending {
                self.sending = false;
                self.last_batch_end = Some(now);
            }
            match self.batches.front() {
                Some(&(due, _)) if due <= now || self.hurry => {
                    let Some((_, batch)) = self.batches.pop_front() else {
                        return Step::Done;
                    };
                    if let Some(end) = self.last_batch_end {
                        self.waited_us += now.saturating_sub(end);
                    }
                    self.batch_count += 1;
                    self.current = batch.into();
                    self.sending = true;
                }
                Some(_) => return Step::Wait,
                None => return Step::Done,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagrams(client: u32, bytes: &[u8]) -> ClientDatagrams {
        ClientDatagrams {
            client: ClientId(client),
            datagrams: bytes
                .iter()
                .map(|&n| Transmit {
                    dst: ([127, 0, 0, 1], 9000 + client as u16).into(),
                    payload: vec![n],
                })
                .collect(),
        }
    }

    /// Steps the frame at `now` until it waits or is done: (sent bytes, clients that left).
    fn run(f: &mut InFlight, now: Micros) -> (Vec<u8>, Vec<u32>) {
        let (mut sent, mut left) = (Vec::new(), Vec::new());
        loop {
            match f.step(now) {
                Step::Send(t) => sent.push(t.payload[0]),
                Step::Left(c) => left.extend(c.iter().map(|c| c.0)),
                Step::Wait | Step::Done => return (sent, left),
            }
        }
    }

    #[test]
    fn without_pacing_each_client_goes_out_in_turn_and_is_timed_when_its_last_left() {
        let mut f = InFlight::new(
            1,
            FrameTiming::default(),
            0,
            100,
            vec![datagrams(1, &[1, 2]), datagrams(2, &[3]), datagrams(3, &[])],
            Pacing::default(),
            60,
        );
        assert_eq!(f.due(), Some(100));
        let (sent, left) = run(&mut f, 100);
        assert_eq!(sent, vec![1, 2, 3]);
        // Client 3 got nothing of this frame: it is not timed.
        assert_eq!(left, vec![1, 2]);
        assert!(matches!(f.step(100), Step::Done));
    }

    #[test]
    fn paced_each_clients_share_is_spread_over_the_window_controller_first() {
        let pacing = Pacing {
            fraction: 0.5,
            batch: 2,
        };
        let window = pacing.window_us(60);
        let mut f = InFlight::new(
            1,
            FrameTiming::default(),
            0,
            0,
            vec![datagrams(1, &[1, 2, 3, 4]), datagrams(2, &[5, 6, 7, 8])],
            pacing,
            60,
        );
        // Two batches each: at 0 and at half the window, the controller's first in each.
        assert_eq!(run(&mut f, 0), (vec![1, 2, 5, 6], vec![]));
        assert_eq!(f.due(), Some(window / 2));
        assert_eq!(run(&mut f, window / 2), (vec![3, 4, 7, 8], vec![1, 2]));
        assert!(f.waited_us > 0);
        assert_eq!(f.batch_count, 2);
    }

    #[test]
    fn a_hurried_frame_sends_the_rest_at_once() {
        let pacing = Pacing {
            fraction: 1.0,
            batch: 1,
        };
        let mut f = InFlight::new(
            1,
            FrameTiming::default(),
            0,
            0,
            vec![datagrams(1, &[1, 2, 3])],
            pacing,
            60,
        );
        assert_eq!(run(&mut f, 0).0, vec![1]);
        f.hurry = true;
        assert_eq!(run(&mut f, 1), (vec![2, 3], vec![1]));
    }
}
