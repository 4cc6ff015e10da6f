//! The host's periodic one-line status (`host.status_interval_s`, `--status-interval`): what a
//! host running as a service says in its log every so often — clients, the rate it sends at,
//! the loss they report.

use std::time::{Duration, Instant};

use untether::host::{ClientSummary, HostSummary};

/// Counters at the last line, for the rates over the interval.
pub struct StatusLog {
    every: Duration,
    last: Instant,
    frames: u64,
    bytes: u64,
}

impl StatusLog {
    /// A line every `every` (zero: never), the first one `every` after now.
    pub fn new(every: Duration) -> StatusLog {
        StatusLog {
            every,
            last: Instant::now(),
            frames: 0,
            bytes: 0,
        }
    }

    /// Whether a line is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        !self.every.is_zero() && now.duration_since(self.last) >= self.every
    }

    /// The line for `summary` at `now`; the next interval starts here.
    pub fn line(&mut self, summary: &HostSummary, now: Instant) -> String {
        let secs = now.duration_since(self.last).as_secs_f64().max(1e-3);
        let frames = summary.sent.saturating_sub(self.frames);
        // untether's protocol and the browsers' WebRTC together.
        let total = summary.bytes_sent + summary.webrtc_bytes_sent;
        let bytes = total.saturating_sub(self.bytes);
        (self.last, self.frames, self.bytes) = (now, summary.sent, total);
        status_line(
            &summary.clients,
            frames as f64 / secs,
            bytes as f64 * 8.0 / secs / 1e6,
        )
    }
}

/// `status: 2 clients (1 controller, 1 viewer) · 60.0 fps · 9.81 Mbit/s · loss 0.2 % (worst
/// 0.4 %) · rtt p50 1.2 ms`, from the clients of the run (those gone are not counted).
pub fn status_line(clients: &[ClientSummary], fps: f64, mbps: f64) -> String {
    let here: Vec<&ClientSummary> = clients
        .iter()
        .filter(|c| !c.state.starts_with("gone"))
        .collect();
    let controllers = here.iter().filter(|c| c.role == "controller").count();
    // Silent: nothing heard from them for 5 s (killed, out of range); sent nothing.
    let silent = here.iter().filter(|c| c.state == "silent").count();
    let viewers = here.len() - controllers - silent;
    let mut line = format!(
        "status: {} client{}",
        here.len(),
        if here.len() == 1 { "" } else { "s" }
    );
    if !here.is_empty() {
        line += &format!(
            " ({controllers} controller, {viewers} viewer{}",
            if viewers == 1 { "" } else { "s" }
        );
        if silent > 0 {
            line += &format!(", {silent} silent");
        }
        line += ")";
    }
    line += &format!(" · {fps:.1} fps · {mbps:.2} Mbit/s");
    let losses: Vec<f64> = here.iter().filter_map(|c| c.loss).collect();
    if !losses.is_empty() {
        let mean = losses.iter().sum::<f64>() / losses.len() as f64;
        let worst = losses.iter().cloned().fold(0.0, f64::max);
        line += &format!(" · loss {:.1} %", mean * 100.0);
        if losses.len() > 1 {
            line += &format!(" (worst {:.1} %)", worst * 100.0);
        }
    }
    let mut rtts: Vec<f64> = here.iter().filter_map(|c| c.rtt_ms).collect();
    if !rtts.is_empty() {
        rtts.sort_by(f64::total_cmp);
        line += &format!(" · rtt p50 {:.1} ms", rtts[rtts.len() / 2]);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(role: &'static str, state: &str, loss: Option<f64>) -> ClientSummary {
        ClientSummary {
            role,
            state: state.into(),
            loss,
            rtt_ms: Some(2.0),
            ..Default::default()
        }
    }

    #[test]
    fn status_counts_the_clients_here_and_their_loss() {
        let clients = [
            client("controller", "live", Some(0.01)),
            client("viewer", "paused", Some(0.03)),
            client("viewer", "gone: left", Some(0.5)),
        ];
        let l = status_line(&clients, 59.96, 9.8123);
        assert_eq!(
            l,
            "status: 2 clients (1 controller, 1 viewer) · 60.0 fps · 9.81 Mbit/s · loss 2.0 % (worst 3.0 %) · rtt p50 2.0 ms"
        );
        // A silent client (a controller that was killed: it lost control) is said apart.
        let clients = [
            client("controller", "live", None),
            client("viewer", "silent", None),
        ];
        assert!(
            status_line(&clients, 60.0, 1.0)
                .starts_with("status: 2 clients (1 controller, 0 viewers, 1 silent) ·"),
            "{}",
            status_line(&clients, 60.0, 1.0)
        );
        assert_eq!(
            status_line(&[], 60.0, 0.0),
            "status: 0 clients · 60.0 fps · 0.00 Mbit/s"
        );
    }

    #[test]
    fn a_zero_interval_is_never_due() {
        let s = StatusLog::new(Duration::ZERO);
        assert!(!s.due(Instant::now() + Duration::from_secs(3600)));
        let s = StatusLog::new(Duration::from_secs(10));
        assert!(!s.due(Instant::now()));
        assert!(s.due(Instant::now() + Duration::from_secs(11)));
    }
}
