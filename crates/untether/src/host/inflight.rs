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
    /// When the encoder handed it over (a sliced frame: its latest slice so far).
    pub handed_us: Micros,
    /// A frame sent in slices whose encoder has not finished: more slices may come, so a
    /// client whose datagrams so far have left is not timed yet, and the frame is not done.
    pub open: bool,
    /// A frame sent in slices: (slice count, capture → first slice out, → last slice out).
    pub slices: Option<(u8, u32, u32)>,
    /// Clients whose datagrams have all left while the frame was open (timed when it closes).
    waiting: Vec<ClientId>,
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
        let mut f = InFlight {
            frame_number,
            timing,
            pose: None,
            handed_us,
            open: false,
            slices: None,
            waiting: Vec::new(),
            batches: VecDeque::new(),
            current: VecDeque::new(),
            remaining: Vec::new(),
            leaving: Vec::new(),
            batch_count: 0,
            waited_us: 0,
            last_batch_end: None,
            sending: false,
            hurry: false,
        };
        f.add(now, clients, pacing, pacing.window_us(fps));
        f
    }

    /// More datagrams of this frame (a slice of a frame sent in slices), due from `now`, each
    /// client's paced over `window_us` (0: at once).
    pub fn add(
        &mut self,
        now: Micros,
        clients: Vec<ClientDatagrams>,
        pacing: Pacing,
        window_us: u64,
    ) {
        for c in &clients {
            if c.datagrams.is_empty() {
                continue;
            }
            self.waiting.retain(|w| *w != c.client);
            match self.remaining.iter_mut().find(|(id, _)| *id == c.client) {
                Some(r) => r.1 += c.datagrams.len(),
                None => self.remaining.push((c.client, c.datagrams.len())),
            }
        }
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
        self.batches
            .extend(by_offset.into_iter().map(|(offset, b)| (now + offset, b)));
    }

    /// The encoder finished the frame (or a newer one came): no more slices; the clients whose
    /// datagrams have all left are timed now.
    pub fn close(&mut self) {
        self.open = false;
        let waiting = std::mem::take(&mut self.waiting);
        self.leaving.extend(waiting);
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
                        if self.open {
                            self.waiting.push(client);
                        } else {
                            self.leaving.push(client);
                        }
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
                // More slices of it are coming.
                None if self.open => return Step::Wait,
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

    #[test]
    fn a_sliced_frame_times_each_client_only_once_the_encoder_has_finished_it() {
        let mut f = InFlight::new(
            4,
            FrameTiming::default(),
            0,
            100,
            vec![datagrams(1, &[1]), datagrams(2, &[2])],
            Pacing::default(),
            60,
        );
        f.open = true;
        // The first slice has left: nobody is timed, and the frame is not done.
        assert_eq!(run(&mut f, 100), (vec![1, 2], vec![]));
        assert!(matches!(f.step(100), Step::Wait));
        // The second slice, for client 1 only; then the encoder finishes the frame.
        f.add(110, vec![datagrams(1, &[3])], Pacing::default(), 0);
        assert_eq!(run(&mut f, 110), (vec![3], vec![]));
        f.close();
        let (sent, mut left) = run(&mut f, 120);
        left.sort();
        assert_eq!((sent, left), (vec![], vec![1, 2]));
        assert!(matches!(f.step(120), Step::Done));
    }
}
