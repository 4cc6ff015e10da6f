//! The RTSP viewers: who is connected, since when, over which transport, who left, and who
//! was turned away. Plain bookkeeping, keyed by an id per RTSP connection.
//!
//! A connection is not a viewer: it becomes one when its first DESCRIBE, SETUP or PLAY got
//! past authentication ([`Viewers::admit`]), so connections that never authenticate (idle
//! ones, wrong passwords) take no place of `rtsp.max_viewers`.

use untether::host::ViewerSummary;

/// How many past viewers the summary keeps (the current ones are always there).
const KEEP_GONE: usize = 32;

#[derive(Debug)]
struct Viewer {
    id: u64,
    summary: ViewerSummary,
}

/// Where one RTSP connection stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Connection {
    /// Connected, not a viewer (yet): closed if it stays so for `IDLE_CONNECTION`.
    #[default]
    Pending,
    /// A viewer.
    Viewer,
    /// Turned away (`rtsp.max_viewers` were there): every request is answered 503.
    TurnedAway,
}

/// What [`Viewers::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seat {
    /// A viewer already: go on.
    Viewer,
    /// A viewer from now on: go on (and say so).
    Joined,
    /// Turned away now: 503 (and say so).
    TurnedAway,
    /// Turned away before: 503.
    StillAway,
}

impl Seat {
    /// Whether the request goes on (else: 503 Service Unavailable).
    pub fn goes_on(self) -> bool {
        matches!(self, Seat::Viewer | Seat::Joined)
    }
}

/// The viewers of one RTSP server.
#[derive(Debug)]
pub(crate) struct Viewers {
    max: usize,
    list: Vec<Viewer>,
    pub total: u64,
    /// Connections closed because `rtsp.max_viewers` were there.
    pub turned_away: u64,
    /// Requests answered 401 that carried credentials (wrong user or password).
    pub refused: u64,
    /// Requests answered 401 without credentials (the digest challenge every player gets
    /// first; a player without credentials stops there).
    pub challenged: u64,
}

impl Viewers {
    pub fn new(max: u32) -> Viewers {
        Viewers {
            max: max.max(1) as usize,
            list: Vec::new(),
            total: 0,
            turned_away: 0,
            refused: 0,
            challenged: 0,
        }
    }

    /// Viewers connected now.
    pub fn connected(&self) -> usize {
        self.list
            .iter()
            .filter(|v| v.summary.left_s.is_none())
            .count()
    }

    /// A connection from `address` at `now_s`: false when `max` viewers are already there
    /// (the connection is to be closed).
    pub fn join(&mut self, id: u64, address: String, now_s: f64) -> bool {
        if self.connected() >= self.max {
            self.turned_away += 1;
            return false;
        }
        self.total += 1;
        self.list.push(Viewer {
            id,
            summary: ViewerSummary {
                address,
                transport: String::new(),
                connected_s: now_s,
                left_s: None,
            },
        });
        // Bounded: forget the oldest viewers that left.
        let gone = self.list.len() - self.connected();
        if gone > KEEP_GONE {
            if let Some(i) = self.list.iter().position(|v| v.summary.left_s.is_some()) {
                self.list.remove(i);
            }
        }
        true
    }

    /// A request of the connection `id` from `address` (in the state `conn`) got past
    /// authentication at `now_s`: it joins unless `max` viewers are there, once.
    pub fn admit(&mut self, conn: &mut Connection, id: u64, address: &str, now_s: f64) -> Seat {
        match *conn {
            Connection::Viewer => Seat::Viewer,
            Connection::TurnedAway => Seat::StillAway,
            Connection::Pending if self.join(id, address.to_string(), now_s) => {
                *conn = Connection::Viewer;
                Seat::Joined
            }
            Connection::Pending => {
                *conn = Connection::TurnedAway;
                Seat::TurnedAway
            }
        }
    }

    /// The transport a viewer set up (`rtp/udp`, `rtp/tcp`).
    pub fn set_transport(&mut self, id: u64, transport: &str) {
        if let Some(v) = self.current(id) {
            v.summary.transport = transport.to_string();
        }
    }

    /// The connection closed; returns its summary.
    pub fn leave(&mut self, id: u64, now_s: f64) -> Option<ViewerSummary> {
        let v = self.current(id)?;
        v.summary.left_s = Some(now_s);
        Some(v.summary.clone())
    }

    /// The address of a connected viewer.
    pub fn address(&self, id: u64) -> Option<&str> {
        self.list
            .iter()
            .find(|v| v.id == id && v.summary.left_s.is_none())
            .map(|v| v.summary.address.as_str())
    }

    fn current(&mut self, id: u64) -> Option<&mut Viewer> {
        self.list
            .iter_mut()
            .find(|v| v.id == id && v.summary.left_s.is_none())
    }

    pub fn summaries(&self) -> Vec<ViewerSummary> {
        self.list.iter().map(|v| v.summary.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewers_come_and_go_and_the_extra_one_is_turned_away() {
        let mut v = Viewers::new(2);
        assert!(v.join(1, "10.0.0.1".into(), 0.5));
        assert!(v.join(2, "10.0.0.2".into(), 1.0));
        assert!(!v.join(3, "10.0.0.3".into(), 1.5));
        assert_eq!((v.connected(), v.total, v.turned_away), (2, 2, 1));
        v.set_transport(1, "rtp/tcp");
        let gone = v.leave(1, 2.0).unwrap();
        assert_eq!(gone.transport, "rtp/tcp");
        assert_eq!(gone.left_s, Some(2.0));
        assert!(v.leave(1, 3.0).is_none(), "leaves once");
        assert_eq!(v.address(2), Some("10.0.0.2"));
        assert!(v.join(3, "10.0.0.3".into(), 2.5), "a place is free again");
        let s = v.summaries();
        assert_eq!(s.len(), 3);
        assert_eq!(s.iter().filter(|s| s.left_s.is_none()).count(), 2);
    }

    #[test]
    fn a_connection_is_a_viewer_from_its_first_authenticated_request_once() {
        let mut v = Viewers::new(1);
        let (mut idle, mut a, mut b) = (
            Connection::default(),
            Connection::default(),
            Connection::default(),
        );
        // Connections that never got past authentication take no place.
        assert_eq!(idle, Connection::Pending);
        assert_eq!(v.connected(), 0);
        assert_eq!(v.admit(&mut a, 1, "10.0.0.1", 1.0), Seat::Joined);
        assert_eq!(v.admit(&mut a, 1, "10.0.0.1", 1.1), Seat::Viewer);
        assert_eq!((v.connected(), v.total), (1, 1));
        assert_eq!(v.admit(&mut b, 2, "10.0.0.2", 1.2), Seat::TurnedAway);
        assert_eq!(v.admit(&mut b, 2, "10.0.0.2", 1.3), Seat::StillAway);
        assert!(!Seat::StillAway.goes_on() && Seat::Viewer.goes_on());
        assert_eq!(v.turned_away, 1, "counted once per connection");
        v.leave(1, 2.0);
        assert_eq!(v.admit(&mut idle, 3, "10.0.0.3", 2.5), Seat::Joined);
    }

    #[test]
    fn past_viewers_are_bounded() {
        let mut v = Viewers::new(4);
        for id in 0..100 {
            assert!(v.join(id, format!("10.0.0.{id}"), id as f64));
            v.leave(id, id as f64 + 0.5);
        }
        assert!(v.join(1000, "10.0.1.1".into(), 200.0));
        assert!(v.summaries().len() <= KEEP_GONE + 2);
        assert_eq!(v.total, 101);
        assert_eq!(v.connected(), 1);
    }
}
