//! What the WebRTC side's parts share, and what the driver and the HTTP thread hand each
//! other: a leaf of `webrtc/` (it imports none of its siblings but the leaves `access` and
//! `resource`).

use std::net::{IpAddr, SocketAddr};

use str0m::change::SdpOffer;
use str0m::RtcConfig;
use tokio::sync::oneshot;

use super::access::{Credential, Refusal};
use super::h264;
use super::resource::{DeleteRefusal, Resource};

/// The driver's first WebRTC socket (0 is our protocol's): browsers' media, then the
/// publication's (bound to the address that routes to the WHIP endpoint).
pub(crate) const SOCKET: usize = 1;

/// A browser's offer, parsed on the HTTP thread (nothing else is made there: the driver
/// admits the browser before it makes any certificate or session).
pub(crate) struct OfferRequest {
    pub offer: SdpOffer,
    pub credential: Credential,
    /// The browser's HTTP address.
    pub from: SocketAddr,
    pub reply: oneshot::Sender<Result<Answer, Refusal>>,
}

/// The host's answer to a browser.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The session's resource (`/whep/ID`) and the secret that ends it.
    pub resource: Resource,
    pub sdp: String,
    pub resume: String,
}

/// A WHIP publication whose SDP exchange is done, handed to the driver.
pub(crate) struct Publication {
    pub rtc: str0m::Rtc,
    pub mids: Vec<str0m::media::Mid>,
    pub label: String,
}

/// What other threads hand the driver about WebRTC.
pub(crate) enum WebRtcCommand {
    Offer(Box<OfferRequest>),
    /// The browser's DELETE of its session resource, with the secret it presented.
    Delete {
        id: String,
        secret: Option<String>,
        from: std::net::SocketAddr,
        reply: oneshot::Sender<Result<(), DeleteRefusal>>,
    },
    Publish(Box<Publication>),
    /// The WHIP publication ended on the thread's side (stop): close it.
    Unpublish,
}

/// What the WebRTC sessions counted (the host's summary and report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebRtcSummary {
    /// Offers admitted and answered.
    pub browsers_admitted: u64,
    /// Offers refused: not admitted (no or a bad link, PIN or resume secret).
    pub browsers_refused: u64,
    /// Offers refused because the browser cannot decode the stream or the host was full.
    pub browsers_unsupported: u64,
    /// Browsers whose connection came up.
    pub browsers_connected: u64,
    /// Sessions built (a DTLS certificate and an `Rtc` each): for admitted offers only.
    pub sessions_built: u64,
    pub frames_sent: u64,
    /// Bytes of the datagrams sent to browsers and the WHIP endpoint (SRTP, DTLS, STUN).
    pub bytes_sent: u64,
    pub audio_packets: u64,
    pub keyframe_requests: u64,
    /// Keyframe requests the host session's one gate did not honour (its cooldown, or a
    /// viewer's limits): our clients' requests and the browsers' share that gate.
    pub keyframe_requests_limited: u64,
    /// Browser input events delivered to the input sink.
    pub inputs_delivered: u64,
    /// Input of viewers (dropped, as their role says).
    pub inputs_dropped_viewer: u64,
    /// Malformed data channel messages (dropped).
    pub inputs_malformed: u64,
    /// Datagrams on the WebRTC socket no session took (counted and dropped).
    pub datagrams_unmatched: u64,
    /// The WHIP publication: connected, and the frames it sent.
    pub published: bool,
    pub publish_frames: u64,
}

/// The local address the kernel would send from to reach `remote` (no packet is sent).
pub(crate) fn route_source(remote: IpAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if remote.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect(SocketAddr::new(remote, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The codecs and extensions every session of the host uses: H.264 constrained baseline
/// (packetization mode 1) and Opus, the playout-delay extension, no bandwidth estimation
/// (the encoder's rate is the host's).
pub(crate) fn rtc_config() -> RtcConfig {
    let mut cfg = RtcConfig::new()
        .clear_codecs()
        .enable_opus(true, false)
        .set_extension(5, str0m::rtp::Extension::PlayoutDelay);
    cfg.codec_config().add_h264(
        str0m::media::Pt::new_with_value(102),
        Some(str0m::media::Pt::new_with_value(103)),
        true,
        h264::PROFILE_LEVEL_ID,
    );
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_source_towards_loopback_is_loopback() {
        assert_eq!(
            route_source("127.0.0.1".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
    }
}
