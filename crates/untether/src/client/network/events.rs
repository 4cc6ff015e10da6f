//! What the driver does with each event of its session: one named step per kind.

use untether_proto::{ClientEvent, ClientRole, GoneReason, PublicKey, RejectReason, SessionParams};

use super::super::decode::Piece;
use super::super::run::view::RoleView;
use super::super::trust::pinned_label;
use super::super::ClientError;
use super::ClientNet;
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

/// What the client does when the host went away for `reason` (`end_on_host_bye`: the stream
/// ends with the host's goodbye).
pub(crate) fn gone(reason: GoneReason, end_on_host_bye: bool) -> Gone {
    match reason {
        GoneReason::Timeout => Gone::Reconnect("went silent for longer than the idle timeout"),
        GoneReason::Bye | GoneReason::ShuttingDown | GoneReason::Failed if end_on_host_bye => {
            Gone::End("the host ended the stream")
        }
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

impl ClientNet {
    pub(super) fn on_event(&mut self, ev: ClientEvent) {
        match ev {
            ClientEvent::Connected(params) => self.on_connected(params),
            ClientEvent::LinkAddress { ethertype, mac } => {
                if let Some(l) = self.link.as_mut() {
                    l.on_link_address(now_us(), ethertype, mac);
                    if l.report.transport == "raw" {
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
        self.codec = crate::config::media_codec(params.codec);
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
        if let Some(r) = self.reconnect.take() {
            log::info!(
                "client: reconnected to {} after {:.1} s",
                self.shared.host,
                (now_us() - r.lost_us) as f64 / 1e6
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
    }

    /// The host refused this client.
    fn on_rejected(&mut self, reason: RejectReason, message: &str) {
        let host = self.shared.host;
        // The host's text (already escaped by the parser; idempotent).
        let message = untether_proto::sanitize_peer_text(message);
        let error = if reason == RejectReason::UntrustedHost {
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
        match gone(reason, self.end_on_host_bye) {
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
        assert!(matches!(
            gone(GoneReason::Timeout, true),
            Gone::Reconnect(_)
        ));
        assert_eq!(
            gone(GoneReason::Bye, true),
            Gone::End("the host ended the stream")
        );
        assert_eq!(
            gone(GoneReason::ShuttingDown, false),
            Gone::End("the host shut down")
        );
        assert!(matches!(gone(GoneReason::Bye, false), Gone::Fail(_)));
        assert!(matches!(gone(GoneReason::Replaced, true), Gone::Fail(_)));
        let Gone::Fail(slow) = gone(GoneReason::TooSlow, false) else {
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
