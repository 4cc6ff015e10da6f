//! WebRTC as one more kind of session the host's network driver serves: browsers that asked
//! for the stream (WHEP-style: the page posts an offer, the host answers) and the host's own
//! WHIP publication, each a str0m [`Rtc`](str0m::Rtc) owned by the driver's [`WebRtc`] field of
//! `HostNet`, fed from the **same** encoder's access units and the same Opus packets as our own
//! clients, all on one UDP socket (the driver's socket 1) demultiplexed with `Rtc::accepts`.
//!
//! - `http`: the small HTTP(S) server (hyper on a current-thread tokio runtime, on a thread
//!   beside the driver): connection limits, deadlines, TLS; `routes`: the page, the
//!   signalling endpoint, the clock (each offer asks the host's one admission,
//!   `untether_proto::admission::Admission`, first: one budget and one wrong-credential
//!   throttle per source address for every door);
//! - `sessions`: the driver's [`WebRtc`]: admission first, then the sessions;
//! - `roles`: the controlling browser's input numbering and the role names pages are told
//!   (who controls is asked of the protocol session each time: its `Roles` decide, for every
//!   kind of receiver, and nothing here keeps a copy);
//! - `whip`: the publishing thread (offer, POST, answer, DELETE at the end);
//! - `peer`: one session; `access`: links, PINs and resume secrets (`BrowserCredentials`,
//!   the checker); `resource`: the sessions'
//!   unguessable IDs and DELETE secrets; `pins`: the protocol session as the admission sees it
//!   (`SessionLink`: the PIN check and the browser's id); `input`: the data channel's
//!   messages; `h264`: the stream's profile; `cert`: HTTPS certificates; `setup`: starting it.
//!
//! Roles and keyframes: every browser (and the publication) is a receiver of the protocol
//! session, with one id from the session's one space of clients and receivers (a `ClientId`,
//! given when it is admitted and used for its resource, its role and its notes; attached with
//! `HostSession::attach_receiver_as` once connected), whose `Roles` decide who controls for every kind
//! of receiver and whose one keyframe gate takes its PLI/FIR. With one of our own clients
//! connected, browsers are viewers (their input is dropped and counted). Without one, the
//! oldest connected browser is the controller: its input goes to the host's input sink like a
//! client's, numbered from 0 in the scene's stamp (the page is told its role and where its
//! numbering starts). `types` holds what the parts share.

mod access;
mod cert;
mod h264;
mod http;
mod input;
mod peer;
mod pins;
mod resource;
mod roles;
mod routes;
mod sessions;
mod setup;
pub(crate) mod types;
mod whip;

pub(crate) use http::{start_http, MakeService, ServerName, Service};
pub(crate) use pins::SessionLink;
pub(crate) use routes::{request_header, respond, text, with_headers, Reply};
pub(crate) use sessions::{DriverParts, WebRtc};
pub(crate) use setup::{prepare, start, BrowserInfo, Started};
pub use types::WebRtcSummary;
pub(crate) use types::SOCKET;
