//! The host's clients as the summary and the report list them: every client of the run, each
//! with its role, address, stream state and figures (frames sent, loss, RTT, input dropped),
//! refreshed from the session while it is connected and kept after it leaves.

use serde::Serialize;
use untether_proto::{
    ClientId, ClientRole, ClientStatus, GoneReason, LatencyReport, Micros, Spread,
};

/// One client of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClientSummary {
    /// The host's number for its session (`#3`: the third admitted).
    pub id: u32,
    pub fingerprint: String,
    /// The name it gave itself (escaped: its own claim, never used to approve anything).
    pub name: String,
    pub addr: String,
    /// `controller` or `viewer` (the last role it had).
    pub role: &'static str,
    pub input_granted: bool,
    /// `live`, `paused` (keyframes only), `awaiting picture`, or `gone: REASON`.
    pub state: String,
    /// Seconds since the host started.
    pub connected_s: f64,
    pub left_s: Option<f64>,
    pub frames_sent: u64,
    /// Frames it was not sent: before its first picture, or while paused.
    pub frames_skipped: u64,
    pub bytes_sent: u64,
    pub shards_retransmitted: u64,
    pub keyframe_requests: u64,
    pub inputs_received: u64,
    /// Of them dropped: a viewer without an input grant.
    pub inputs_dropped: u64,
    pub pauses: u32,
    /// Downstream datagram loss it reported (0..1).
    pub loss: Option<f64>,
    /// Its smoothed RTT as it reported it.
    pub rtt_ms: Option<f64>,
    /// Queueing delay the host's pings measured (adaptive bitrate).
    pub queue_ms: Option<f64>,
    /// A VR client's eye field of view (degrees) and separation (mm), as it sent them.
    pub view_fov_deg: Option<f32>,
    pub view_ipd_mm: Option<f32>,
    /// The latency it reported last (a client that reports none: None).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<ClientLatency>,
}

/// p50 and p95 of one latency over a client's report interval, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SpreadMs {
    pub p50_ms: f64,
    pub p95_ms: f64,
}

fn spread_ms(s: Spread) -> Option<SpreadMs> {
    let ms = |us: u32| (us as f64 / 10.0).round() / 100.0;
    s.is_some().then(|| SpreadMs {
        p50_ms: ms(s.p50_us),
        p95_ms: ms(s.p95_us),
    })
}

/// A client's own measurement of the frames it showed over its last report interval
/// (docs/PROTOCOL.md §7, `Latency`): glass-to-glass and the client-side stages (None: no
/// sample of that stage, e.g. network without a clock offset yet).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClientLatency {
    /// When it arrived, seconds since the host started.
    pub at_s: f64,
    pub frames: u16,
    pub interval_ms: u16,
    pub glass_to_glass: Option<SpreadMs>,
    pub network: Option<SpreadMs>,
    pub reassemble: Option<SpreadMs>,
    pub decode: Option<SpreadMs>,
    pub present: Option<SpreadMs>,
}

/// Most clients kept (the oldest that left are forgotten first).
const MAX_CLIENTS_KEPT: usize = 1024;

/// Every client of the run.
#[derive(Default)]
pub(crate) struct Roster {
    started_us: Micros,
    entries: Vec<ClientSummary>,
}

fn role_name(role: ClientRole) -> &'static str {
    role.name()
}

fn gone_name(reason: GoneReason) -> &'static str {
    match reason {
        GoneReason::Timeout => "silent (idle timeout)",
        GoneReason::Bye => "left (or was revoked)",
        GoneReason::Replaced => "replaced by a new run of the same client",
        GoneReason::ShuttingDown => "host stopped",
        GoneReason::Failed => "host failed",
        GoneReason::TooSlow => "dropped: its link could not carry the stream",
    }
}

impl Roster {
    pub fn new(started_us: Micros) -> Roster {
        Roster {
            started_us,
            entries: Vec::new(),
        }
    }

    fn secs(&self, t: Micros) -> f64 {
        ((t.saturating_sub(self.started_us)) as f64 / 1e5).round() / 10.0
    }

    /// Refreshes (or adds) the connected clients' entries.
    pub fn update(&mut self, clients: &[ClientStatus]) {
        for c in clients {
            let i = match self.entries.iter().position(|e| e.id == c.info.id.0) {
                Some(i) => i,
                None => {
                    if self.entries.len() >= MAX_CLIENTS_KEPT {
                        if let Some(old) = self.entries.iter().position(|e| e.left_s.is_some()) {
                            self.entries.remove(old);
                        }
                    }
                    let connected_s = self.secs(c.info.connected_us);
                    self.entries.push(ClientSummary {
                        id: c.info.id.0,
                        fingerprint: c.info.fingerprint.clone(),
                        name: untether_proto::sanitize_peer_text(&c.info.name),
                        addr: c.info.addr.to_string(),
                        role: role_name(c.role),
                        input_granted: false,
                        state: String::new(),
                        connected_s,
                        left_s: None,
                        frames_sent: 0,
                        frames_skipped: 0,
                        bytes_sent: 0,
                        shards_retransmitted: 0,
                        keyframe_requests: 0,
                        inputs_received: 0,
                        inputs_dropped: 0,
                        pauses: 0,
                        loss: None,
                        rtt_ms: None,
                        queue_ms: None,
                        view_fov_deg: c.info.view.map(|v| v.fov_deg()),
                        view_ipd_mm: c.info.view.map(|v| v.ipd_mm()),
                        latency: None,
                    });
                    self.entries.len() - 1
                }
            };
            let e = &mut self.entries[i];
            e.role = role_name(c.role);
            e.input_granted = c.input_granted;
            e.state = c.state.name().to_string();
            e.frames_sent = c.frames_sent;
            e.frames_skipped = c.frames_skipped;
            e.bytes_sent = c.bytes_sent;
            e.shards_retransmitted = c.shards_retransmitted;
            e.keyframe_requests = c.keyframe_requests;
            e.inputs_received = c.inputs_received;
            e.inputs_dropped = c.inputs_dropped;
            e.pauses = e.pauses.max(c.pauses);
            e.loss = c.loss;
            e.rtt_ms = c.rtt_us.map(|us| us as f64 / 1000.0);
            e.queue_ms = c.queue_us.map(|us| us as f64 / 1000.0);
        }
    }

    /// A client's latency report arrived (kept until the next; an entry that is not listed
    /// yet gets it at its next report).
    pub fn latency(&mut self, now: Micros, id: ClientId, r: &LatencyReport) {
        let at_s = self.secs(now);
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id.0) {
            e.latency = Some(ClientLatency {
                at_s,
                frames: r.frames,
                interval_ms: r.interval_ms,
                glass_to_glass: spread_ms(r.glass_to_glass),
                network: spread_ms(r.network),
                reassemble: spread_ms(r.reassemble),
                decode: spread_ms(r.decode),
                present: spread_ms(r.present),
            });
        }
    }

    /// A client left.
    pub fn gone(&mut self, now: Micros, id: ClientId, reason: GoneReason) {
        let left = self.secs(now);
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id.0) {
            e.state = format!("gone: {}", gone_name(reason));
            e.left_s = Some(left);
        }
    }

    pub fn get(&self, id: ClientId) -> Option<&ClientSummary> {
        self.entries.iter().find(|e| e.id == id.0)
    }

    pub fn list(&self) -> Vec<ClientSummary> {
        self.entries.clone()
    }
}

/// The connected client whose fingerprint starts with `query` (4 or more characters, dashes
/// and case ignored, exactly one match).
pub(super) fn find_connected(
    session: &untether_proto::HostSession,
    query: &str,
) -> Result<ClientId, crate::identity::IdentityError> {
    // The one resolver of `untether pair`: ≥ 8 fingerprint characters or the hex key, never a
    // list number nor a name a client chose.
    let clients: Vec<&untether_proto::ClientInfo> = session.clients().collect();
    let keys: Vec<String> = clients
        .iter()
        .map(|c| crate::identity::key_hex(&c.key))
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let names: Vec<&str> = clients.iter().map(|c| c.name.as_str()).collect();
    crate::identity::resolve_client(query, "connected client", &keys, &names).map(|i| clients[i].id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_proto::{ClientInfo, StreamState, Suite};

    fn status(id: u32, role: ClientRole) -> ClientStatus {
        ClientStatus {
            info: ClientInfo {
                id: ClientId(id),
                addr: "10.0.0.2:4000".parse().unwrap(),
                name: "head\u{1b}[31mset".into(),
                connection_id: 1,
                connected_us: 2_500_000,
                key: [1; 32],
                fingerprint: "ABCD".into(),
                suite: Suite::ChaCha20Poly1305,
                view: None,
            },
            role,
            input_granted: false,
            state: StreamState::Live,
            frames_sent: 10,
            frames_skipped: 1,
            bytes_sent: 1000,
            datagrams_sent: 5,
            parity_shards_sent: 0,
            shards_retransmitted: 0,
            keyframe_requests: 0,
            inputs_received: 3,
            inputs_dropped: 3,
            pauses: 0,
            loss: Some(0.01),
            rtt_us: Some(1500),
            queue_us: None,
        }
    }

    #[test]
    fn clients_are_kept_after_they_leave_with_their_last_figures() {
        let mut r = Roster::new(1_000_000);
        r.update(&[
            status(1, ClientRole::Controller),
            status(2, ClientRole::Viewer),
        ]);
        let mut s = status(2, ClientRole::Viewer);
        s.frames_sent = 20;
        r.update(&[s]);
        r.gone(4_000_000, ClientId(2), GoneReason::TooSlow);
        let l = r.list();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].role, "controller");
        assert_eq!(l[0].connected_s, 1.5);
        assert_eq!(l[1].frames_sent, 20);
        assert_eq!(l[1].left_s, Some(3.0));
        assert!(l[1].state.contains("could not carry"), "{}", l[1].state);
        assert_eq!(l[1].rtt_ms, Some(1.5));
        // The client's own name never reaches a terminal raw.
        assert!(!l[0].name.contains('\u{1b}'));
    }

    #[test]
    fn a_clients_latency_report_is_kept_in_ms_with_no_sample_as_none() {
        let mut r = Roster::new(0);
        r.update(&[status(1, ClientRole::Controller)]);
        let report = LatencyReport {
            frames: 30,
            interval_ms: 500,
            glass_to_glass: Spread {
                p50_us: 24_125,
                p95_us: 31_000,
            },
            ..Default::default()
        };
        r.latency(2_500_000, ClientId(1), &report);
        // An unknown client's report is dropped.
        r.latency(2_500_000, ClientId(9), &report);
        let l = r.list()[0].latency.clone().expect("kept");
        assert_eq!((l.at_s, l.frames, l.interval_ms), (2.5, 30, 500));
        let g = l.glass_to_glass.expect("measured");
        assert_eq!((g.p50_ms, g.p95_ms), (24.13, 31.0));
        assert_eq!(l.decode, None);
        let json = serde_json::to_value(&r.list()[0]).unwrap();
        assert_eq!(json["latency"]["glass_to_glass"]["p95_ms"], 31.0);
        assert!(json["latency"]["network"].is_null());
    }
}
