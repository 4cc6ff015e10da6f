//! Questions for the host's network driver from other threads — [`super::Host`]'s getters and
//! the dashboard's API — as typed data: what is asked, and where its answer goes. The driver
//! answers each on its own thread with the session at hand ([`Ask::answer`], from its command
//! loop), so an approval or a hand-over takes effect at once and nothing but the driver touches
//! the session. Once the driver's thread has ended, `Host` asks the driver it left (parked) the
//! same way.

use std::sync::mpsc;

use serde_json::Value;
use tokio::sync::oneshot;
use untether_proto::{PathStats, StateEntry, StateKey, StateValue};

use super::dashboard::{Action, Refused};
use super::network::HostNet;
use super::{ClientSummary, GamepadState, HostError, WebRtcSummary};
use crate::clock::now_us;
use crate::link::LinkReport;

/// Where the answer to one question goes (a thread blocked on a channel, or an async task).
pub(crate) struct Answer<T>(Box<dyn FnOnce(T) + Send>);

impl<T: Send + 'static> Answer<T> {
    /// For a thread that waits for the answer.
    pub fn channel() -> (Answer<T>, mpsc::Receiver<T>) {
        let (tx, rx) = mpsc::sync_channel(1);
        (
            Answer(Box::new(move |v| {
                // The asker may have given up waiting (it says so itself).
                let _ = tx.send(v);
            })),
            rx,
        )
    }

    /// For an async task (the dashboard's HTTP server).
    pub fn oneshot() -> (Answer<T>, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        (
            Answer(Box::new(move |v| {
                let _ = tx.send(v);
            })),
            rx,
        )
    }

    fn send(self, v: T) {
        (self.0)(v)
    }
}

/// What the driver alone knows of the host's figures, for [`super::Host::summary`].
#[derive(Default)]
pub(crate) struct DriverFigures {
    pub stats: untether_proto::HostStats,
    pub paths: Vec<PathStats>,
    pub target_kbps: Option<u32>,
    pub clients: Vec<ClientSummary>,
    pub link: LinkReport,
    pub state_staleness: Option<untether_proto::Staleness>,
    pub webrtc_bytes_sent: u64,
}

/// A question for the driver, with where its answer goes.
pub(crate) enum Ask {
    /// The one-time PIN accepted now.
    PairingPin(Answer<Option<String>>),
    /// Fingerprints of the clients that paired with a PIN during this run.
    PairedClients(Answer<Vec<String>>),
    /// The newest value of a key of the latest-wins state channel.
    StateValue(StateKey, Answer<Option<StateEntry>>),
    /// Publish host → client state; false when the key table is full.
    PublishState(StateKey, StateValue, Answer<bool>),
    /// A gamepad of the client as last heard.
    Gamepad(usize, Answer<Option<GamepadState>>),
    /// The driver's part of the summary.
    Figures(Answer<DriverFigures>),
    /// The clients of this run, connected or gone.
    Clients(Answer<Vec<ClientSummary>>),
    /// Hand control to the connected client matching a fingerprint prefix.
    HandControl(String, Answer<Result<ClientSummary, HostError>>),
    /// Grant or take back a viewer's input, by fingerprint prefix.
    GrantInput {
        fingerprint: String,
        granted: bool,
        answer: Answer<Result<ClientSummary, HostError>>,
    },
    /// A new one-time token for the browser page (None without `[webrtc]`).
    BrowserLinkToken(Answer<Option<String>>),
    /// What the WebRTC sessions counted (None without `[webrtc]`).
    WebRtcSummary(Answer<Option<WebRtcSummary>>),
    /// One of the dashboard API's reads or actions.
    Dashboard(Action, Answer<Result<Value, Refused>>),
}

impl Ask {
    /// Answers on the driver's thread.
    pub(super) fn answer(self, n: &mut HostNet) {
        match self {
            Ask::PairingPin(a) => a.send(n.pairing.pin.clone()),
            Ask::PairedClients(a) => a.send(n.pairing.paired.clone()),
            Ask::StateValue(key, a) => a.send(n.session.state_value(key)),
            Ask::PublishState(key, value, a) => {
                a.send(n.session.publish_state(now_us(), key, value))
            }
            Ask::Gamepad(i, a) => a.send(n.gamepads.state(i)),
            Ask::Figures(a) => {
                n.roster_refresh();
                a.send(DriverFigures {
                    stats: n.session.stats(),
                    paths: n.last_paths.clone(),
                    target_kbps: n.target_kbps,
                    clients: n.roster.list(),
                    link: n.link.report.clone(),
                    state_staleness: n.session.state_staleness(now_us()),
                    webrtc_bytes_sent: n.webrtc.as_ref().map_or(0, |w| w.summary().bytes_sent),
                })
            }
            Ask::Clients(a) => {
                n.roster_refresh();
                a.send(n.roster.list())
            }
            Ask::HandControl(fingerprint, a) => a.send(n.hand_control(&fingerprint)),
            Ask::GrantInput {
                fingerprint,
                granted,
                answer,
            } => answer.send(n.grant_input(&fingerprint, granted)),
            Ask::BrowserLinkToken(a) => a.send(n.webrtc.as_mut().map(|w| w.link_token(now_us()))),
            Ask::WebRtcSummary(a) => a.send(n.webrtc.as_ref().map(|w| w.summary().clone())),
            Ask::Dashboard(action, a) => a.send(action.run(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reaches_a_waiting_thread_and_a_task() {
        let (a, rx) = Answer::channel();
        std::thread::spawn(move || a.send(7u32));
        assert_eq!(rx.recv().ok(), Some(7));
        let (a, mut rx) = Answer::<&str>::oneshot();
        a.send("ok");
        assert_eq!(rx.try_recv().ok(), Some("ok"));
    }

    #[test]
    fn an_answer_whose_asker_left_is_dropped_quietly() {
        let (a, rx) = Answer::channel();
        drop(rx);
        a.send(1u8);
        let (a, rx) = Answer::<u8>::oneshot();
        drop(rx);
        a.send(1);
    }
}
