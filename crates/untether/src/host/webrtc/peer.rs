//! One WebRTC session on the host: a str0m [`Rtc`] (sans-IO, driven by the host's network
//! thread like our own sessions), the browser's or WHIP endpoint's media sections, and what it
//! measured. Every mutation of the `Rtc` is followed by a full drain of its output
//! ([`BrowserPeer::drain`]), as str0m requires.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::channel::ChannelId;
use str0m::format::Codec;
use str0m::media::{Direction, Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Event, IceConnectionState, Input, Output, Rtc};
use untether_proto::{ClientId, Micros};

/// Datagrams to send: (the driver's socket index, destination, bytes).
pub(crate) type Out = Vec<(usize, SocketAddr, Vec<u8>)>;

/// Maps the host's clock (CLOCK_MONOTONIC µs) to `Instant` (the same clock on Linux) and back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    instant: Instant,
    us: Micros,
}

impl Clock {
    pub fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            us: crate::clock::now_us(),
        }
    }

    pub fn instant(&self, us: Micros) -> Instant {
        if us >= self.us {
            self.instant + Duration::from_micros(us - self.us)
        } else {
            self.instant
                .checked_sub(Duration::from_micros(self.us - us))
                .unwrap_or(self.instant)
        }
    }

    pub fn micros(&self, t: Instant) -> Micros {
        match t.checked_duration_since(self.instant) {
            Some(d) => self.us + d.as_micros() as Micros,
            None => self
                .us
                .saturating_sub(self.instant.duration_since(t).as_micros() as Micros),
        }
    }
}

/// The media sections (`a=mid:`) of an SDP text: str0m tells an answerer of them only once
/// DTLS is up, and the host must know at once whether the stream can be sent.
pub(crate) fn answer_mids(sdp: &str) -> Vec<Mid> {
    sdp.lines()
        .filter_map(|l| l.trim().strip_prefix("a=mid:"))
        .map(|m| Mid::from(m.trim()))
        .collect()
}

/// What the session is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A browser the host serves (it offered, the host answered).
    Browser,
    /// The host publishing to a WHIP endpoint (the host offered).
    Publisher,
}

/// What a peer reports to the WebRTC side after a drain.
#[derive(Debug, PartialEq)]
pub(crate) enum PeerEvent {
    /// ICE and DTLS are up: media can flow (a keyframe is wanted).
    Connected,
    /// The remote asked for a keyframe (PLI or FIR).
    KeyframeRequest,
    /// A message on the `input` data channel.
    Input(Vec<u8>),
    /// The session ended (ICE gave up, the remote closed, or an error).
    Gone(String),
}

/// Counters of one session.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeerStats {
    pub frames_sent: u64,
    pub keyframes_sent: u64,
    pub frames_skipped: u64,
    pub audio_packets: u64,
    pub keyframe_requests: u64,
    pub inputs: u64,
    pub bytes_out: u64,
    pub datagrams_in: u64,
}

pub(crate) struct BrowserPeer {
    /// Its one id (the protocol session's, from its admission on): the session's roles and
    /// keyframe gate know it under it once it is connected (`attached`).
    pub id: ClientId,
    pub attached: bool,
    pub kind: Kind,
    /// The browser's HTTP address (or the WHIP endpoint), for logs.
    pub label: String,
    rtc: Rtc,
    /// The driver's socket this session sends and receives on, and its address.
    pub socket: usize,
    local: SocketAddr,
    video: Option<(Mid, Pt)>,
    audio: Option<(Mid, Pt)>,
    input: Option<ChannelId>,
    pub connected: bool,
    /// No delta frame is sent before the first keyframe (the decoder could not use it).
    need_keyframe: bool,
    pub gone: Option<String>,
    next_timeout: Instant,
    pub created_us: Micros,
    pub stats: PeerStats,
    pub(super) events: Vec<PeerEvent>,
}

impl BrowserPeer {
    /// Wraps a session whose SDP exchange is done; `mids` are its media sections (the ones
    /// the host added, or [`answer_mids`] of the answer it gave).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: ClientId,
        kind: Kind,
        label: String,
        rtc: Rtc,
        mids: &[Mid],
        (socket, local): (usize, SocketAddr),
        now: Micros,
        clock: &Clock,
    ) -> BrowserPeer {
        let mut p = BrowserPeer {
            attached: false,
            id,
            kind,
            label,
            rtc,
            socket,
            local,
            video: None,
            audio: None,
            input: None,
            connected: false,
            need_keyframe: true,
            gone: None,
            next_timeout: clock.instant(now),
            created_us: now,
            stats: PeerStats::default(),
            events: Vec::new(),
        };
        for &mid in mids {
            p.find_media(mid);
        }
        p
    }

    /// Notes the negotiated payload type of a video (H.264) or audio (Opus) section we send.
    fn find_media(&mut self, mid: Mid) {
        let Some(m) = self.rtc.media(mid) else {
            return;
        };
        let kind = m.kind();
        if !matches!(m.direction(), Direction::SendOnly | Direction::SendRecv) {
            return;
        }
        let Some(w) = self.rtc.writer(mid) else {
            return;
        };
        let want = if kind == MediaKind::Video {
            Codec::H264
        } else {
            Codec::Opus
        };
        let pt = w
            .payload_params()
            .find(|p| p.spec().codec == want)
            .map(|p| p.pt());
        if let Some(pt) = pt {
            match kind {
                MediaKind::Video if self.video.is_none() => self.video = Some((mid, pt)),
                MediaKind::Audio if self.audio.is_none() => self.audio = Some((mid, pt)),
                _ => {}
            }
        }
    }

    pub fn has_video(&self) -> bool {
        self.video.is_some()
    }

    pub fn has_audio(&self) -> bool {
        self.audio.is_some()
    }

    /// Whether this session takes a datagram that arrived from `from` (str0m's demultiplexer).
    pub fn accepts(&self, now: Instant, from: SocketAddr, data: &[u8]) -> bool {
        match Receive::new(Protocol::Udp, from, self.local, data) {
            Ok(r) => self.rtc.accepts(&Input::Receive(now, r)),
            Err(_) => false,
        }
    }

    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8], out: &mut Out) {
        self.stats.datagrams_in += 1;
        if let Ok(r) = Receive::new(Protocol::Udp, from, self.local, data) {
            let res = self.rtc.handle_input(Input::Receive(now, r));
            self.after(res.map(|_| ()), out);
        }
    }

    pub fn next_timeout(&self) -> Instant {
        self.next_timeout
    }

    pub fn handle_timeout(&mut self, now: Instant, out: &mut Out) {
        if now >= self.next_timeout {
            let res = self.rtc.handle_input(Input::Timeout(now));
            self.after(res, out);
        }
    }

    /// Sends one H.264 access unit (Annex B) captured at `capture`; skipped until the first
    /// keyframe. Returns whether it was written.
    pub fn send_frame(
        &mut self,
        capture: Instant,
        capture_us: Micros,
        keyframe: bool,
        data: &Arc<[u8]>,
        out: &mut Out,
    ) -> bool {
        let Some((mid, pt)) = self.video else {
            return false;
        };
        if !self.connected || self.gone.is_some() {
            return false;
        }
        if self.need_keyframe && !keyframe {
            self.stats.frames_skipped += 1;
            return false;
        }
        let rtp_time = MediaTime::new(capture_us.wrapping_mul(9) / 100, Frequency::NINETY_KHZ);
        let zero = MediaTime::new(0, Frequency::NINETY_KHZ);
        let res = match self.rtc.writer(mid) {
            // Playout delay 0/0: the browser renders each frame as soon as it is decoded.
            Some(w) => w
                .playout_delay(zero, zero)
                .write(pt, capture, rtp_time, data.clone()),
            None => return false,
        };
        let ok = res.is_ok();
        self.after(res, out);
        if ok {
            self.need_keyframe = false;
            self.stats.frames_sent += 1;
            self.stats.keyframes_sent += keyframe as u64;
        }
        ok
    }

    /// Sends one Opus packet (10 ms) whose first sample was produced at `pts_us`.
    pub fn send_audio(&mut self, pts: Instant, pts_us: Micros, opus: &[u8], out: &mut Out) {
        let Some((mid, pt)) = self.audio else {
            return;
        };
        if !self.connected || self.gone.is_some() {
            return;
        }
        let rtp_time = MediaTime::new(pts_us.wrapping_mul(48) / 1000, Frequency::FORTY_EIGHT_KHZ);
        let res = match self.rtc.writer(mid) {
            Some(w) => w.write(pt, pts, rtp_time, opus.to_vec()),
            None => return,
        };
        if res.is_ok() {
            self.stats.audio_packets += 1;
        }
        self.after(res, out);
    }

    /// Sends a text message on the input channel (clock pongs).
    pub fn send_text(&mut self, text: &str, out: &mut Out) {
        let Some(id) = self.input else {
            return;
        };
        let res = match self.rtc.channel(id) {
            Some(mut c) => c.write(false, text.as_bytes()).map(|_| ()),
            None => return,
        };
        self.after(res, out);
    }

    /// Starts closing (DTLS close_notify, RTCP BYE).
    pub fn close(&mut self, out: &mut Out) {
        self.rtc.disconnect();
        self.drain(out);
        if self.gone.is_none() {
            self.gone = Some("closed by the host".into());
        }
    }

    fn after<T>(&mut self, res: Result<T, str0m::RtcError>, out: &mut Out) {
        if let Err(e) = res {
            if self.gone.is_none() {
                self.gone = Some(format!("WebRTC error: {e}"));
                self.events
                    .push(PeerEvent::Gone(format!("WebRTC error: {e}")));
            }
        }
        self.drain(out);
    }

    /// Polls the session until it has nothing more to say; datagrams go to `out`.
    pub fn drain(&mut self, out: &mut Out) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => {
                    self.next_timeout = t;
                    return;
                }
                Ok(Output::Transmit(t)) => {
                    self.stats.bytes_out += t.contents.len() as u64;
                    out.push((self.socket, t.destination, t.contents.to_vec()));
                }
                Ok(Output::Event(e)) => self.on_event(e),
                Err(e) => {
                    if self.gone.is_none() {
                        self.gone = Some(format!("WebRTC error: {e}"));
                        self.events
                            .push(PeerEvent::Gone(format!("WebRTC error: {e}")));
                    }
                    // Nothing more will come out of a failed session; wake again soon.
                    self.next_timeout = Instant::now() + Duration::from_millis(100);
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, e: Event) {
        let gone = match e {
            Event::Connected => {
                self.connected = true;
                self.need_keyframe = true;
                self.events.push(PeerEvent::Connected);
                None
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                Some("the connection was lost (ICE disconnected)")
            }
            Event::Closed => Some("the remote closed the session"),
            Event::MediaAdded(m) => {
                self.find_media(m.mid);
                None
            }
            Event::ChannelOpen(id, label) if label == "input" && self.kind == Kind::Browser => {
                self.input = Some(id);
                None
            }
            Event::ChannelData(d) if Some(d.id) == self.input => {
                self.stats.inputs += 1;
                self.events.push(PeerEvent::Input(d.data));
                None
            }
            Event::ChannelClose(id) if Some(id) == self.input => {
                self.input = None;
                None
            }
            Event::KeyframeRequest(_) => {
                self.stats.keyframe_requests += 1;
                self.events.push(PeerEvent::KeyframeRequest);
                None
            }
            _ => None,
        };
        if let (Some(why), None) = (gone, &self.gone) {
            self.gone = Some(why.to_string());
            self.events.push(PeerEvent::Gone(why.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_maps_both_ways() {
        let c = Clock::now();
        let us = crate::clock::now_us();
        let back = c.micros(c.instant(us + 1234));
        assert_eq!(back, us + 1234);
        assert_eq!(
            c.micros(c.instant(us.saturating_sub(500))),
            us.saturating_sub(500)
        );
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;
    use str0m::change::SdpOffer;

    /// Chrome 156's offer (recvonly video and audio, a data channel), as the page makes it.
    const CHROME_OFFER: &str = include_str!("testdata/chrome156_offer.sdp");

    #[test]
    fn a_chrome_offer_is_answered_with_h264_constrained_baseline_and_opus() {
        let clock = Clock::now();
        let now = crate::clock::now_us();
        let mut rtc = crate::host::webrtc::types::rtc_config().build(clock.instant(now));
        let local: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        rtc.add_local_candidate(str0m::Candidate::host(local, "udp").unwrap());
        let offer = SdpOffer::from_sdp_string(CHROME_OFFER).unwrap();
        let answer = rtc.sdp_api().accept_offer(offer).unwrap().to_sdp_string();
        let mids = answer_mids(&answer);
        assert_eq!(mids.len(), 3);
        let mut peer = BrowserPeer::new(
            ClientId(1),
            Kind::Browser,
            "t".into(),
            rtc,
            &mids,
            (1, local),
            now,
            &clock,
        );
        let mut out = Vec::new();
        peer.drain(&mut out);
        assert!(peer.has_video(), "{answer}");
        assert!(peer.has_audio(), "{answer}");
        assert!(answer.contains("profile-level-id=42e01f"), "{answer}");
        assert!(answer.contains("packetization-mode=1"), "{answer}");
        assert!(answer.contains("opus/48000"), "{answer}");
        assert!(answer.contains("playout-delay"), "{answer}");
    }
}
