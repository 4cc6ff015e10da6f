//! The report as a person reads it in a terminal ([`Report::to_text`]).

use std::fmt::Write;

use super::{Pcts, Report};
use crate::stats::Stage;

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.2}"))
}

impl Report {
    /// A human-readable summary for the terminal.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        self.write_frames(&mut o);
        self.write_latency(&mut o);
        self.write_network(&mut o);
        self.write_session(&mut o);
        o
    }

    /// The configuration, the machine and the frame counts.
    fn write_frames(&self, o: &mut String) {
        let c = &self.config;
        let f = &self.frames;
        let _ = writeln!(
            o,
            "untether latency report — {}x{} @ {} fps, {} by {} ({} preset, {} conversion, refresh {}), {} kbit/s, {} ({}), {:.1} s",
            c.width, c.height, c.fps, c.codec, c.encoder, c.preset, c.conversion, c.refresh, c.bitrate_kbps, c.transport, c.display, self.duration_s
        );
        if !c.decoder.is_empty() {
            let _ = writeln!(o, "decoder: {}", c.decoder);
        }
        let _ = writeln!(o, "machine: {}", c.machine);
        let _ = writeln!(
            o,
            "frames: captured {} · encoded {} · sent {} · complete {} · decoded {} · shown {} · late {} · lost {} · corrupted {} · dropped host {} / client {} · keyframes {}",
            f.captured, f.encoded, f.sent, f.complete, f.decoded, f.shown, f.late, f.lost, f.corrupted, f.dropped_host, f.dropped_client, f.keyframes
        );
        if f.held > 0 || f.refresh_sweeps.is_some_and(|s| s > 0) {
            let _ = writeln!(
                o,
                "intra refresh: {} sweeps · {} frames held until a sweep was complete · {} keyframes asked for",
                f.refresh_sweeps.map_or("?".into(), |s| s.to_string()),
                f.held,
                f.forced_keyframes.map_or("?".into(), |s| s.to_string())
            );
        }
        if f.concealed > 0 || f.slices_lost > 0 {
            let _ = writeln!(
                o,
                "slices: {} lost · {} frames shown with a lost slice's region concealed",
                f.slices_lost, f.concealed
            );
        }
    }

    /// The latency table: glass-to-glass, the stages, slices, input response.
    fn write_latency(&self, o: &mut String) {
        let l = &self.latency_ms;
        let _ = writeln!(
            o,
            "{:<28} {:>8} {:>8} {:>8} {:>8}",
            "latency (ms)", "p50", "p95", "p99", "max"
        );
        let mut row = |name: &str, p: &Pcts| {
            let _ = writeln!(
                o,
                "{:<28} {:>8} {:>8} {:>8} {:>8}",
                name,
                ms(p.p50),
                ms(p.p95),
                ms(p.p99),
                ms(p.max)
            );
        };
        row("glass-to-glass (timestamps)", &l.glass_to_glass);
        row("glass-to-glass (pixels)", &l.glass_to_glass_pixels);
        for stage in Stage::PIPELINE {
            if let Some(p) = l.stages.get(&stage) {
                row(&format!("  {stage}"), p);
            }
        }
        row("pipeline overhead", &l.pipeline_overhead);
        if l.slices.count > 1 {
            let sl = &l.slices;
            row(&format!("{} slices: first out", sl.count), &sl.first_out);
            row("  last out", &sl.last_out);
            row("  first decoded", &sl.first_decoded);
            row("  last decoded", &sl.last_decoded);
        }
        row("input response", &self.input.response_ms);
        // VR: the head pose → the picture that shows it (null without --vr: no rows).
        if l.pose_to_photon.p50.is_some() {
            row("pose-to-photon (pixels)", &l.pose_to_photon);
        }
        if l.rendered_pose_to_photon.p50.is_some() {
            row("pose-to-photon (rendered)", &l.rendered_pose_to_photon);
        }
        if l.pose_prediction_error_deg.p50.is_some() {
            // Degrees, in the ms table's columns (said in the row's name).
            row("pose prediction error (deg)", &l.pose_prediction_error_deg);
        }
    }

    /// The network, the clock, reconnects and pacing.
    fn write_network(&self, o: &mut String) {
        let n = &self.network;
        let _ = writeln!(
            o,
            "network: {:.2} Mbit/s goodput · {} datagrams received · {} lost · {} malformed · rtt p50 {} ms · clock offset {} ms (±{}, {})",
            n.goodput_mbps,
            n.packets_received,
            n.packets_lost,
            n.malformed,
            ms(n.rtt_ms.p50),
            ms(n.clock_offset_ms),
            ms(n.clock_uncertainty_ms),
            n.clock
        );
        match (self.network.clock, self.network.clock_uncertainty_ms) {
            ("estimated", Some(u)) if u > 1.0 => {
                let _ = writeln!(
                    o,
                    "  ↳ glass-to-glass is ±{u:.1} ms: the clocks' offset is estimated (ping/pong assumes symmetric paths); client.clock = \"synchronized\" if they are"
                );
            }
            ("estimated", None) => {
                let _ = writeln!(o, "  ↳ glass-to-glass: no clock offset estimate yet");
            }
            _ => {}
        }
        for r in &n.reconnects {
            let _ = writeln!(
                o,
                "host lost at {:.1} s: {}",
                r.lost_s,
                match r.resumed_s {
                    Some(t) => format!(
                        "stream resumed at {t:.1} s ({:.0} ms later)",
                        (t - r.lost_s) * 1e3
                    ),
                    None => "never came back".to_string(),
                }
            );
        }
        if self.sessions.len() > 1 {
            for s in &self.sessions {
                let _ = writeln!(
                    o,
                    "  session {} at {:.1} s: {:.1} s · {} frames shown · glass-to-glass p50 {} ms · {:.2} Mbit/s{}",
                    s.session,
                    s.start_s,
                    s.duration_s,
                    s.frames_shown,
                    ms(s.glass_to_glass_ms.p50),
                    s.goodput_mbps,
                    match s.host_captured {
                        Some(c) => format!(" · host captured {c}"),
                        None => String::new(),
                    }
                );
            }
        }
        if let (Some(paced), Some(window)) = (n.paced_frames, n.pacing_window_ms) {
            if window > 0.0 {
                let _ = writeln!(
                    o,
                    "pacing: {paced} frames spread over up to {window:.2} ms (included in send)"
                );
            }
        }
    }

    /// Audio, this client's role, the host's clients and consumers, input.
    fn write_session(&self, o: &mut String) {
        if let Some(a) = &self.audio {
            let _ = writeln!(
                o,
                "audio ({}): mouth-to-ear p50 {} ms p99 {} ms · A/V offset {} ms · jitter buffer {:.0} ms · {} played, {} recovered, {} concealed, {} late, {} underruns",
                a.driver,
                ms(a.mouth_to_ear_ms.p50),
                ms(a.mouth_to_ear_ms.p99),
                ms(a.av_offset_ms),
                a.target_ms,
                a.packets_played,
                a.recovered,
                a.concealed,
                a.late,
                a.underruns
            );
        }
        if let Some(r) = &self.role {
            let _ = writeln!(
                o,
                "role: {}{}{}{}",
                r.role,
                if r.input_granted {
                    " (input granted)"
                } else if r.role == "viewer" {
                    " (input not applied)"
                } else {
                    ""
                },
                if r.times_paused > 0 {
                    format!(
                        " · paused to keyframes {} time{} (link slower than the stream)",
                        r.times_paused,
                        if r.times_paused == 1 { "" } else { "s" }
                    )
                } else {
                    String::new()
                },
                if r.decoded {
                    String::new()
                } else {
                    format!(" · --no-decode: {} frames received undecoded", r.undecoded)
                }
            );
        }
        for line in client_lines(&self.clients) {
            let _ = writeln!(o, "{line}");
        }
        for c in &self.consumers {
            let _ = writeln!(o, "{c}");
        }
        // What the host applied is its total, from every client (the host's summary, or the
        // scene's pixel stamps): not this client's share.
        let _ = writeln!(
            o,
            "input: {} events sent by this client · {}",
            self.input.events_sent,
            self.input.events_applied.map_or(
                "applied: unknown (the host's source does not stamp input)".to_string(),
                |v| format!("{v} applied by the host from all its clients")
            )
        );
        let r = &self.input.rumble;
        if r.changes > 0 {
            let _ = writeln!(
                o,
                "rumble: {} changes from the host · {} applied · {} renewed · {} unsupported (no motors) · {} ignored (no controller at that number)",
                r.changes, r.applied, r.renewed, r.unsupported, r.ignored
            );
        }
    }
}

/// The host's clients, a line each: number, name, fingerprint, role, address, state, frames
/// sent, loss, RTT, input dropped (the `untether host` output and the text report).
pub fn client_lines(clients: &[crate::host::ClientSummary]) -> Vec<String> {
    let mut out = Vec::new();
    if clients.is_empty() {
        return out;
    }
    // The state is last and never cut ("gone: left (or was dropped) …" is read whole).
    out.push(format!(
        "clients: {:<4} {:<16} {:<14} {:<10} {:<21} {:>7} {:>6} {:>7} {:>10}  {}",
        "#",
        "name",
        "fingerprint",
        "role",
        "address",
        "frames",
        "loss",
        "rtt",
        "input drop",
        "state"
    ));
    for c in clients {
        let fp: String = c.fingerprint.chars().take(14).collect();
        let name: String = c.name.chars().take(16).collect();
        let role = if c.role == "viewer" && c.input_granted {
            "viewer+in"
        } else {
            c.role
        };
        out.push(format!(
            "         {:<4} {:<16} {:<14} {:<10} {:<21} {:>7} {:>6} {:>7} {:>10}  {}",
            c.id,
            name,
            fp,
            role,
            c.addr,
            c.frames_sent,
            c.loss.map_or("—".into(), |l| format!("{:.1}%", l * 100.0)),
            c.rtt_ms.map_or("—".into(), |r| format!("{r:.1}ms")),
            c.inputs_dropped,
            c.state,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ClientSummary;

    /// A client that left is listed with its whole state, not "gone: left (or was".
    #[test]
    fn the_client_table_shows_the_whole_state() {
        let state = "gone: left (or was dropped by the network)";
        let c = ClientSummary {
            id: 1,
            role: "viewer",
            state: state.into(),
            ..Default::default()
        };
        let lines = client_lines(&[c]);
        assert!(lines[1].ends_with(state), "{}", lines[1]);
        assert!(lines[0].ends_with("state"), "{}", lines[0]);
    }

    /// The scene's total of applied input is not shown as this client's.
    #[test]
    fn applied_input_is_the_hosts_total() {
        let config = crate::report_config(
            &crate::HostOptions::default(),
            crate::client::Display::Headless,
            "test",
        );
        let mut r = super::super::build(config, &crate::client::ClientRun::default(), None);
        r.input.events_sent = 3;
        r.input.events_applied = Some(40);
        r.input.rumble.changes = 2;
        r.input.rumble.ignored = 2;
        let text = r.to_text();
        assert!(
            text.contains("rumble: 2 changes from the host · 0 applied · 0 renewed · 0 unsupported (no motors) · 2 ignored"),
            "{text}"
        );
        assert!(
            text.contains(
                "input: 3 events sent by this client · 40 applied by the host from all its clients"
            ),
            "{text}"
        );
    }

    /// `demo --vr`: the printed report has the pose-to-photon rows the JSON has.
    #[test]
    fn the_text_report_has_pose_to_photon_when_measured() {
        let config = crate::report_config(
            &crate::HostOptions::default(),
            crate::client::Display::Headless,
            "test",
        );
        let mut r = super::super::build(config, &crate::client::ClientRun::default(), None);
        assert!(!r.to_text().contains("pose-to-photon"));
        r.latency_ms.pose_to_photon.p50 = Some(21.5);
        r.latency_ms.rendered_pose_to_photon.p50 = Some(30.25);
        r.latency_ms.pose_prediction_error_deg.p50 = Some(0.75);
        let text = r.to_text();
        let line = text
            .lines()
            .find(|l| l.starts_with("pose-to-photon (pixels)"))
            .unwrap_or_else(|| panic!("no pose-to-photon line in {text}"));
        assert!(line.contains("21.50"), "{line}");
        assert!(text.contains("pose-to-photon (rendered)"), "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("pose prediction error (deg)"))
            .unwrap_or_else(|| panic!("no prediction error line in {text}"));
        assert!(line.contains("0.75"), "{line}");
    }
}
