//! What the driver does with each event of its session: one named step per kind.

use untether_proto::{ClientEvent, ClientRole, GoneReason, PublicKey, RejectReason, SessionParams};

use super::super::decode::Piece;
use super::super::run::view::RoleView;
use super::super::trust::pinned_label;
use super::super::ClientError;
use super::{ClientNet, Patience, Reconnect, APPROVAL_RETRY_US};
use crate::clock::now_us;

/// What the client does when the host went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Hold the picture and reconnect (why, for the log).
    Reconnect(&'static str),
    /// End the run normally, with this outcome.
    End(&'static str),
    /// End the run on an error: the host went away, for this reason.
    Fail(&'static str),
}

/// What the client does when the host went away for `reason` (`patience.end_on_host_bye`:
/// the stream ends with the host's goodbye; `patience.wait_for_host`: a host that shut down
/// is waited for).
pub(crate) fn gone(reason: GoneReason, patience: Patience) -> Gone {
    match reason {
        GoneReason::Timeout => Gone::Reconnect("went silent for longer than the idle timeout"),
        GoneReason::Bye | GoneReason::ShuttingDown | GoneReason::Failed
            if patience.end_on_host_bye =>
        {
            Gone::End("the host ended the stream")
        }
        GoneReason::ShuttingDown if patience.wait_for_host => Gone::Reconnect(
            "shut down (a restart, or Ctrl-C there); waiting for it to come back \
             (--exit-on-bye exits instead)",
        ),
        GoneReason::ShuttingDown => Gone::End("the host shut down"),
        GoneReason::Bye => {
            Gone::Fail("it closed the session (this client was revoked, or the host ended it)")
        }
        GoneReason::Replaced => Gone::Fail("another run of this client took over"),
        GoneReason::Failed => Gone::Fail("it stopped on a failure (see the host's log)"),
        GoneReason::TooSlow => Gone::Fail(
            "it dropped this viewer: this link stayed slower than the host's stream \
             (paused to keyframes, it kept falling behind); a faster link, or the host \
             streaming at a lower bitrate (--bitrate), would keep it",
        ),
    }
}

/// What the log says this client is, for the role the host gave it.
pub(crate) fn role_line(role: ClientRole, granted: bool, paused: bool) -> String {
    match role {
        ClientRole::Controller => {
            "the controller: its input drives the host's application".to_string()
        }
        ClientRole::Viewer => format!(
            "a viewer{}{}",
            if granted {
                " with input granted"
            } else {
                " (its input is not applied)"
            },
            if paused {
                "; paused to keyframes: this link cannot carry the stream"
            } else {
                ""
            }
        ),
    }
}

/// The log line of a session that started.
fn connected_line(host: std::net::SocketAddr, p: &SessionParams) -> String {
    format!(
        "client: connected to {host}: {}x{} @ {} fps, {}, {} kbit/s{}",
        p.width,
        p.height,
        p.fps,
        p.codec,
        p.bitrate_kbps,
        if p.refresh_period > 0 {
            format!(", refreshing every {} frames", p.refresh_period)
        } else {
            String::new()
        }
    )
}

/// What the client says when the host granted less than it asked for (None: all of it).
pub(crate) fn wants_line(w: &untether_proto::StreamWants, p: &SessionParams) -> Option<String> {
    let mut lower = Vec::new();
    if w.width > 0 && (w.width, w.height) != (p.width, p.height) {
        lower.push(format!(
            "{}x{} for {}x{}",
            p.width, p.height, w.width, w.height
        ));
    }
    if w.fps > 0 && w.fps != p.fps {
        lower.push(format!("{} fps for {}", p.fps, w.fps));
    }
    if w.bitrate_kbps > 0 && w.bitrate_kbps != p.bitrate_kbps {
        lower.push(format!("{} kbit/s for {}", p.bitrate_kbps, w.bitrate_kbps));
    }
    (!lower.is_empty()).then(|| {
        format!(
            "client: the host grants {} (its limits, or the stream other clients already watch)",
            lower.join(", ")
        )
    })
}

impl ClientNet {
    pub(super) fn on_event(&mut self, ev: ClientEvent) {
        match ev {
            ClientEvent::Connected(params) => self.on_connected(params),
            ClientEvent::LinkAddress { ethertype, mac } => {
                if let Some(l) = self.link.as_mut() {
                    l.on_link_address(now_us(), ethertype, mac);
                    if l.report.transport == crate::config::Transport::Raw {
                        log::info!(
                            "client: the host is at {} on layer 2: raw frames from now on",
                            untether_net::MacAddr(mac)
                        );
                    }
                }
            }
            ClientEvent::LinkDeclined(reason) => {
                if let Some(line) = self.link.as_mut().and_then(|l| l.on_declined(reason)) {
                    log::warn!("client: {line}");
                }
            }
            ClientEvent::Rejected { reason, message } => self.on_rejected(reason, &message),
            ClientEvent::ConnectTimeout if self.connected_once => {
                self.lost(now_us(), "does not answer");
            }
            ClientEvent::ConnectTimeout => {
                let secs = (now_us() - self.record.started_us()) as f64 / 1e6;
                let host = self.shared.host;
                self.finish(Some(ClientError::NoAnswer {
                    host,
                    secs,
                    port: host.port(),
                }));
            }
            ClientEvent::HostGone(reason) => self.on_gone(reason),
            // Decoding runs on its own thread so that audio, input acknowledgements and the
            // next frame's shards are not held behind a decode.
            ClientEvent::Frame(frame) => self.hand_to_decoder(Piece::Frame(frame)),
            ClientEvent::Slice(slice) => self.hand_to_decoder(Piece::Slice(slice)),
            ClientEvent::SliceLost {
                frame_number,
                slice,
                ..
            } => self.hand_to_decoder(Piece::SliceLost {
                frame_number,
                slice,
            }),
            ClientEvent::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            } => self
                .record
                .slice_timing(frame_number, slice_count, first_out_us, last_out_us),
            ClientEvent::Role {
                role,
                input_granted,
                paused,
            } => {
                log::info!(
                    "client: this client is {}",
                    role_line(role, input_granted, paused)
                );
                self.role = Some(RoleView {
                    role,
                    input_granted,
                    paused,
                });
                self.record.role(role, input_granted, paused);
            }
            ClientEvent::FramePose {
                frame_number,
                sample,
            } => self
                .shared
                .frame_poses
                .insert(self.session_number, frame_number, sample),
            ClientEvent::FrameTiming(t) => {
                self.record.frame_timing(t);
                // The overlay does without a timing the presenter had no room for.
                let _ = self.out.timings.try_send((self.session_number, t));
            }
            ClientEvent::Rtt(us) => self.record.rtt(us),
            ClientEvent::Audio(p) => {
                if let Some(playout) = &self.out.playout {
                    super::super::lock(playout).push(
                        now_us(),
                        p.seq,
                        p.pts_us,
                        &p.opus,
                        &p.prev_opus,
                    );
                }
            }
            ClientEvent::FrameLost { .. }
            | ClientEvent::FrameSkipped { .. }
            | ClientEvent::InputAcked { .. } => {}
        }
    }

    /// A session started: the first, or one after the host came back.
    fn on_connected(&mut self, params: SessionParams) {
        log::info!("{}", connected_line(self.shared.host, &params));
        if let Some(w) = self.cfg.wants {
            if let Some(line) = wants_line(&w, &params) {
                log::info!("{line}");
            }
        }
        self.codec = params.codec;
        // The decoder opens (and a hardware one warms) before the first frame arrives.
        self.hand_to_decoder(Piece::Open {
            width: u32::from(params.width),
            height: u32::from(params.height),
        });
        let host_key: Option<PublicKey> = self.session.host_key();
        if host_key.is_some() {
            // Later sessions (after the host went away) must reach the same host.
            self.cfg.host_key = host_key;
        }
        self.connected_once = true;
        self.approval_refusal = None;
        if let Some(r) = self.reconnect.take_if(|r| r.approval) {
            log::info!(
                "client: approved by the host after {:.1} s of waiting",
                (now_us() - r.lost_us) as f64 / 1e6
            );
        }
        if let Some(r) = self.reconnect.take() {
            log::info!(
                "client: reconnected to {} after {:.1} s ({} attempt{})",
                self.shared.host,
                (now_us() - r.lost_us) as f64 / 1e6,
                r.attempt + 1,
                if r.attempt == 0 { "" } else { "s" }
            );
            self.record.reconnected(self.session_number);
        }
        if let (Some(kh), Some(key)) = (&self.known_hosts, host_key) {
            kh.pin(&key);
        }
        if let Some(l) = self.link.as_mut() {
            l.on_connected(now_us());
        }
        self.record.connected(now_us(), params, host_key);
        self.record.host_encoder = self.session.host_encoder().cloned();
    }

    /// The host refused this client as not paired: try again every [`APPROVAL_RETRY_US`]
    /// until it approves this client (said once, with both fingerprints), holding on to the
    /// host's key so that every try reaches the same host.
    fn wait_for_approval(&mut self, message: &str) {
        let now = now_us();
        self.approval_refusal = Some(untether_proto::sanitize_peer_text(message));
        let host_key = self.session.seen_host_key();
        if self.cfg.host_key.is_none() {
            self.cfg.host_key = host_key;
        }
        if let Some(r) = self.reconnect.as_mut() {
            r.attempt += 1;
            r.next_try_us = Some(now + APPROVAL_RETRY_US);
            return;
        }
        let me = untether_proto::fingerprint(&self.cfg.identity.public);
        log::warn!(
            "client: host {} ({}) has not approved this client yet; waiting for it (Ctrl-C \
             ends). On the host: `untether pair approve {me}` (this client's fingerprint), \
             after checking that the host's fingerprint above is the one `untether host` shows",
            self.shared.host,
            host_key.map_or("key not seen".into(), |k| untether_proto::fingerprint(&k)),
        );
        self.reconnect = Some(Reconnect {
            lost_us: now,
            attempt: 0,
            next_try_us: Some(now + APPROVAL_RETRY_US),
            approval: true,
        });
    }

    /// The host refused this client.
    fn on_rejected(&mut self, reason: RejectReason, message: &str) {
        let host = self.shared.host;
        let waiting = self.reconnect.as_ref().is_some_and(|r| r.approval);
        if reason == RejectReason::PendingApproval
            && self.patience.wait_for_approval
            && (waiting || !self.connected_once)
        {
            return self.wait_for_approval(message);
        }
        // The host's text (already escaped by the parser; idempotent).
        let message = untether_proto::sanitize_peer_text(message);
        let chosen = self
            .known_hosts
            .as_ref()
            .and_then(|kh| kh.chosen)
            .filter(|_| !self.connected_once);
        let error = if let (RejectReason::UntrustedHost, Some(k)) = (reason, chosen) {
            // The host answering at the chosen address cannot prove the key it was chosen by.
            ClientError::HostNotProven {
                host,
                chosen: untether_proto::fingerprint(&k),
                message,
            }
        } else if reason == RejectReason::UntrustedHost {
            let (label, file) = pinned_label(self.known_hosts.as_ref(), host);
            ClientError::HostKeyChanged {
                host,
                label,
                file,
                message,
            }
        } else {
            ClientError::Rejected {
                host,
                reason,
                message,
            }
        };
        self.finish(Some(error));
    }

    /// The host went away.
    fn on_gone(&mut self, reason: GoneReason) {
        match gone(reason, self.patience) {
            Gone::Reconnect(why) => self.lost(now_us(), why),
            Gone::End(outcome) => {
                if outcome == "the host shut down" {
                    log::info!("client: host {} shut down", self.shared.host);
                } else {
                    log::info!("client: {outcome}");
                }
                self.record.ended(outcome);
                self.finish(None);
            }
            Gone::Fail(reason) => self.finish(Some(ClientError::HostGone {
                host: self.shared.host,
                reason: reason.to_string(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_going_away_reconnects_ends_or_fails() {
        let ends = Patience {
            end_on_host_bye: true,
            ..Patience::default()
        };
        let exits = Patience::default();
        let waits = Patience {
            wait_for_host: true,
            ..Patience::default()
        };
        assert!(matches!(
            gone(GoneReason::Timeout, ends),
            Gone::Reconnect(_)
        ));
        assert_eq!(
            gone(GoneReason::Bye, ends),
            Gone::End("the host ended the stream")
        );
        assert_eq!(
            gone(GoneReason::ShuttingDown, exits),
            Gone::End("the host shut down")
        );
        assert!(
            matches!(gone(GoneReason::ShuttingDown, waits), Gone::Reconnect(w) if w.contains("--exit-on-bye")),
            "a host that stopped gracefully is waited for"
        );
        assert!(
            matches!(gone(GoneReason::Bye, waits), Gone::Fail(_)),
            "revoked: no wait"
        );
        assert!(matches!(gone(GoneReason::Bye, exits), Gone::Fail(_)));
        assert!(matches!(gone(GoneReason::Replaced, ends), Gone::Fail(_)));
        let Gone::Fail(slow) = gone(GoneReason::TooSlow, exits) else {
            panic!("a viewer dropped for its link fails the run");
        };
        assert!(!slow.contains("  "), "one line of text: {slow}");
    }

    #[test]
    fn the_role_is_said_in_words() {
        assert!(role_line(ClientRole::Controller, false, false).starts_with("the controller"));
        assert_eq!(
            role_line(ClientRole::Viewer, true, true),
            "a viewer with input granted; paused to keyframes: this link cannot carry the stream"
        );
        assert_eq!(
            role_line(ClientRole::Viewer, false, false),
            "a viewer (its input is not applied)"
        );
    }
}
