//! The handshake's messages: the Hello, Version Negotiation, the codecs and the client's
//! capability bits, the session parameters of an Accept, a Reject, and the encoder the host names
//! beside its Accept.

use std::fmt;

use super::{
    bad, str_prefix_len, Header, Put, Reader, WireError, HEADER_LEN, HELLO_MIN_LEN,
    MAX_MESSAGE_LEN, SHARD_HEADER_LEN, VERSION_NEGOTIATION,
};

/// Capability bits of a client (in the handshake's message 3): the codecs it decodes, as a
/// set (its order of preference is the list after its name, [`Codec`] ids).
pub mod caps {
    /// The client decodes H.264 4:2:0.
    pub const H264: u32 = 1 << 0;
    /// The client decodes the RGB (4:4:4 GBR) stream of libx264rgb.
    pub const H264_RGB: u32 = 1 << 1;
    /// The client decodes HEVC 4:2:0.
    pub const HEVC: u32 = 1 << 2;
    /// The client decodes AV1 4:2:0.
    pub const AV1: u32 = 1 << 3;
}

/// Client → host: Noise message 1, padded so that the datagram is at least
/// [`HELLO_MIN_LEN`] bytes. Body:
/// `mode u8 ‖ token_len u8 ‖ token ‖ noise_len u16 ‖ noise message ‖ zero padding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello<'a> {
    /// [`crate::handshake::Mode`]: 0 plain `XX`, 1 PIN pairing (`XXpsk3` + SPAKE2).
    pub mode: u8,
    /// The address-validation token of a [`PacketType::Retry`] (empty at first).
    ///
    /// [`PacketType::Retry`]: super::PacketType::Retry
    pub token: &'a [u8],
    pub noise: &'a [u8],
}

/// The longest Retry token.
pub const MAX_TOKEN_LEN: usize = 64;

impl<'a> Hello<'a> {
    pub fn encode(&self, header: &Header, out: &mut Vec<u8>) {
        header.write(out);
        out.put_u8(self.mode);
        let token = &self.token[..self.token.len().min(MAX_TOKEN_LEN)];
        out.put_u8(token.len() as u8);
        out.extend_from_slice(token);
        out.put_u16(self.noise.len() as u16);
        out.extend_from_slice(self.noise);
        if out.len() < HELLO_MIN_LEN {
            out.resize(HELLO_MIN_LEN, 0);
        }
    }

    pub fn parse(body: &'a [u8]) -> Result<Hello<'a>, WireError> {
        let mut r = Reader::new(body, "hello");
        let mode = r.u8()?;
        let t = r.u8()? as usize;
        if t > MAX_TOKEN_LEN {
            return Err(bad("hello.token", "too long"));
        }
        let token = r.bytes(t)?;
        let n = r.u16()? as usize;
        let noise = r.bytes(n)?;
        // The rest is padding and is ignored (future versions may put fields there).
        Ok(Hello { mode, token, noise })
    }
}

/// Writes a HelloReply or HelloFinish datagram: header then the Noise message.
pub fn encode_handshake(header: &Header, noise: &[u8], out: &mut Vec<u8>) {
    header.write(out);
    out.extend_from_slice(noise);
}

/// Version Negotiation (byte 0 = 0, version-independent): the versions the host speaks and a
/// message for the user. `00 ‖ count u8 ‖ versions u8 × count ‖ message_len u16 ‖ message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionNegotiation {
    pub versions: Vec<u8>,
    pub message: String,
}

impl VersionNegotiation {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(VERSION_NEGOTIATION);
        out.put_u8(self.versions.len() as u8);
        out.extend_from_slice(&self.versions);
        out.put_str(&self.message, MAX_MESSAGE_LEN);
    }

    pub fn parse(data: &[u8]) -> Result<VersionNegotiation, WireError> {
        let mut r = Reader::new(data, "version negotiation");
        if r.u8()? != VERSION_NEGOTIATION {
            return Err(bad("version_negotiation", "byte 0 must be 0"));
        }
        let n = r.u8()? as usize;
        let versions = r.bytes(n)?.to_vec();
        let message = r.peer_text("version_negotiation.message", MAX_MESSAGE_LEN)?;
        Ok(VersionNegotiation { versions, message })
    }
}

/// What a video stream is: the codec of a session (its id on the wire), what the
/// configuration names and what the media crate's encoders and decoders open (the one
/// `Codec` of the workspace; `untether_media::codec::CodecFfmpeg` adds FFmpeg's names for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    /// H.264, 4:2:0 (libx264, the hardware H.264 encoders).
    H264 = 1,
    /// H.264 High 4:4:4 of planar GBR (libx264rgb: the picture as rendered, no conversion).
    H264Rgb = 2,
    /// HEVC (H.265), 4:2:0.
    Hevc = 3,
    /// AV1, 4:2:0.
    Av1 = 4,
}

/// A codec name that is not one of [`Codec::ALL`] (or `auto`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown codec {0:?}; allowed: auto, h264, hevc, av1")]
pub struct UnknownCodec(pub String);

impl Codec {
    pub const ALL: [Codec; 4] = [Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1];
    /// What `--codec` / `video.codec` name (h264rgb follows from `libx264rgb` or conversion
    /// `rgb`).
    pub const SELECTABLE: [Codec; 3] = [Codec::H264, Codec::Hevc, Codec::Av1];

    /// Whether its access units are Annex B NAL units (H.264, HEVC) rather than AV1 OBUs.
    pub fn is_annex_b(self) -> bool {
        !matches!(self, Codec::Av1)
    }

    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Codec::ALL
            .into_iter()
            .find(|c| *c as u8 == v)
            .ok_or(bad("accept.codec", "unknown codec"))
    }

    /// Its name (`h264`, `h264rgb`, `hevc`, `av1`), as in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "h264",
            Codec::H264Rgb => "h264rgb",
            Codec::Hevc => "hevc",
            Codec::Av1 => "av1",
        }
    }

    /// Its [`caps`] bit.
    pub fn cap(self) -> u32 {
        match self {
            Codec::H264 => caps::H264,
            Codec::H264Rgb => caps::H264_RGB,
            Codec::Hevc => caps::HEVC,
            Codec::Av1 => caps::AV1,
        }
    }

    /// The codecs of a [`caps`] mask, in id order (a client that sent no list).
    pub fn from_caps(mask: u32) -> Vec<Codec> {
        Codec::ALL
            .into_iter()
            .filter(|c| mask & c.cap() != 0)
            .collect()
    }

    /// `h264, hevc` (for messages).
    pub fn list(codecs: &[Codec]) -> String {
        if codecs.is_empty() {
            return "(none)".into();
        }
        codecs
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Codec {
    type Err = UnknownCodec;
    /// One of the four names (h264rgb included: a client lists what it decodes).
    fn from_str(s: &str) -> Result<Self, UnknownCodec> {
        Codec::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCodec(s.to_string()))
    }
}

/// No codec of the client's list that the host encodes: both lists, as they were offered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no video codec in common: the host encodes {}, this client decodes {}",
    Codec::list(.host),
    Codec::list(.client)
)]
pub struct NoCommonCodec {
    pub host: Vec<Codec>,
    pub client: Vec<Codec>,
}

/// The codec a host picks for a client: the first of the client's codecs, in its order of
/// preference, that the host can encode. Err: none in common, with both lists named.
pub fn choose_codec(host: &[Codec], client: &[Codec]) -> Result<Codec, NoCommonCodec> {
    client
        .iter()
        .copied()
        .find(|c| host.contains(c))
        .ok_or_else(|| NoCommonCodec {
            host: host.to_vec(),
            client: client.to_vec(),
        })
}

/// What the host tells the client about the session in its Accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionParams {
    pub width: u16,
    pub height: u16,
    pub fps: u16,
    pub codec: Codec,
    pub bitrate_kbps: u32,
    /// The largest datagram either side sends.
    pub max_datagram: u16,
    pub keepalive_ms: u32,
    pub idle_timeout_ms: u32,
    /// 0: keyframes on demand (a joining or recovering client asks for one). N > 0: the stream
    /// refreshes itself every N frames — an intra-refresh sweep starts (shards flagged
    /// [`shard_flags::REFRESH`]; the picture is clean N − 1 frames later) or a keyframe comes
    /// — so a client waits for the next refresh instead of asking. Sent only when non-zero.
    ///
    /// [`shard_flags::REFRESH`]: super::shard_flags::REFRESH
    pub refresh_period: u16,
}

impl SessionParams {
    /// The Accept's length without the optional refresh period.
    pub const LEN: usize = 21;

    /// The encoded length.
    pub fn encoded_len(&self) -> usize {
        Self::LEN + if self.refresh_period > 0 { 2 } else { 0 }
    }

    /// One frame interval in microseconds.
    pub fn frame_interval_us(&self) -> u64 {
        1_000_000 / self.fps.max(1) as u64
    }

    /// Writes the parameters (the body of an Accept control frame).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(self.width);
        out.put_u16(self.height);
        out.put_u16(self.fps);
        out.put_u8(self.codec as u8);
        out.put_u32(self.bitrate_kbps);
        out.put_u16(self.max_datagram);
        out.put_u32(self.keepalive_ms);
        out.put_u32(self.idle_timeout_ms);
        if self.refresh_period > 0 {
            out.put_u16(self.refresh_period);
        }
    }

    pub fn parse(body: &[u8]) -> Result<SessionParams, WireError> {
        let mut r = Reader::new(body, "accept");
        let p = SessionParams {
            width: r.u16()?,
            height: r.u16()?,
            fps: r.u16()?,
            codec: Codec::from_u8(r.u8()?)?,
            bitrate_kbps: r.u32()?,
            max_datagram: r.u16()?,
            keepalive_ms: r.u32()?,
            idle_timeout_ms: r.u32()?,
            refresh_period: if r.remaining() >= 2 { r.u16()? } else { 0 },
        };
        if p.width == 0 || p.height == 0 {
            return Err(bad("accept.size", "zero width or height"));
        }
        if p.fps == 0 {
            return Err(bad("accept.fps", "zero"));
        }
        if (p.max_datagram as usize) < HEADER_LEN + SHARD_HEADER_LEN + 64 {
            return Err(bad("accept.max_datagram", "too small"));
        }
        if p.keepalive_ms == 0 || p.idle_timeout_ms <= p.keepalive_ms {
            return Err(bad(
                "accept.timers",
                "keep-alive must be non-zero and below the idle timeout",
            ));
        }
        Ok(p)
    }
}

/// Why the host refused a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RejectReason {
    /// The host serves another client.
    Busy = 1,
    /// The client speaks a protocol version the host does not.
    Version = 2,
    /// The client cannot decode the host's codec.
    Codec = 3,
    /// The client is not allowed (not paired, or revoked).
    NotAllowed = 4,
    /// The host is shutting down.
    ShuttingDown = 5,
    /// The host does not know this client: an access request is waiting for the host's user
    /// (`untether pair`); try again once approved.
    PendingApproval = 6,
    /// PIN pairing failed: wrong, expired or used-up PIN, or no PIN is active on the host.
    Pin = 7,
    /// The host is busy with other handshakes (rate limit); try again shortly.
    TryAgain = 8,
    /// Never sent: the client found the host's key differs from the one it pinned.
    UntrustedHost = 9,
    /// Any other reason; the message says which.
    Other = 255,
}

impl RejectReason {
    pub fn from_u8(v: u8) -> RejectReason {
        match v {
            1 => RejectReason::Busy,
            2 => RejectReason::Version,
            3 => RejectReason::Codec,
            4 => RejectReason::NotAllowed,
            5 => RejectReason::ShuttingDown,
            6 => RejectReason::PendingApproval,
            7 => RejectReason::Pin,
            8 => RejectReason::TryAgain,
            9 => RejectReason::UntrustedHost,
            _ => RejectReason::Other,
        }
    }
}

/// Host → client: no session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    pub reason: RejectReason,
    pub message: String,
}

impl Reject {
    /// A cleartext Reject datagram.
    pub fn encode(&self, header: &Header, out: &mut Vec<u8>) {
        header.write(out);
        self.encode_body(out);
    }

    /// The body (also the body of a protected Reject control frame).
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u8(self.reason as u8);
        out.put_str(&self.message, MAX_MESSAGE_LEN);
    }

    pub fn parse(body: &[u8]) -> Result<Reject, WireError> {
        let mut r = Reader::new(body, "reject");
        let reason = RejectReason::from_u8(r.u8()?);
        let message = r.peer_text("reject.message", MAX_MESSAGE_LEN)?;
        Ok(Reject { reason, message })
    }
}

/// Host → client, beside the Accept: which encoder makes the stream, with its preset and
/// colour conversion, as the host's own report names them, so that a client's report written
/// on another machine can name them too (docs/PROTOCOL.md §7).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEncoder {
    /// The encoder, e.g. `libx264`, `h264_nvenc`.
    pub encoder: String,
    /// Its speed/quality preset, e.g. `ultrafast`.
    pub preset: String,
    /// How the captured pixels reach the encoder's format, e.g. `libyuv`, `rgb`.
    pub conversion: String,
}

impl HostEncoder {
    /// The longest of each field, in bytes.
    pub const MAX_FIELD: usize = 64;

    fn fields(&self) -> [&str; 3] {
        [&self.encoder, &self.preset, &self.conversion]
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        for f in self.fields() {
            out.put_str(f, Self::MAX_FIELD);
        }
    }

    pub(super) fn encoded_len(&self) -> usize {
        self.fields()
            .iter()
            .map(|f| 2 + str_prefix_len(f, Self::MAX_FIELD))
            .sum()
    }

    pub(super) fn parse(r: &mut Reader) -> Result<HostEncoder, WireError> {
        Ok(HostEncoder {
            encoder: r.peer_text("host_encoder.encoder", Self::MAX_FIELD)?,
            preset: r.peer_text("host_encoder.preset", Self::MAX_FIELD)?,
            conversion: r.peer_text("host_encoder.conversion", Self::MAX_FIELD)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::*;
    use proptest::prelude::*;

    #[test]
    fn no_codec_in_common_names_both_lists() {
        assert_eq!(
            choose_codec(&[Codec::Hevc, Codec::H264], &[Codec::Av1, Codec::H264]),
            Ok(Codec::H264)
        );
        let e = choose_codec(&[Codec::Hevc], &[Codec::H264, Codec::Av1]).unwrap_err();
        assert_eq!(
            e,
            NoCommonCodec {
                host: vec![Codec::Hevc],
                client: vec![Codec::H264, Codec::Av1]
            }
        );
        assert_eq!(
            e.to_string(),
            "no video codec in common: the host encodes hevc, this client decodes h264, av1"
        );
        let e = choose_codec(&[Codec::Hevc], &[]).unwrap_err();
        assert!(e.to_string().ends_with("this client decodes (none)"), "{e}");
    }

    /// The handshake's test vectors of docs/PROTOCOL.md: the Accept and Reject frames, the Hello,
    /// Version Negotiation and the HostEncoder frame.
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
        // An Accept control frame: 1280x720 @ 60, H.264, 10 000 kbit/s, 1200-byte datagrams,
        // keep-alive 2 s, idle 30 s.
        let p = SessionParams {
            width: 1280,
            height: 720,
            fps: 60,
            codec: Codec::H264,
            bitrate_kbps: 10_000,
            max_datagram: 1200,
            keepalive_ms: 2000,
            idle_timeout_ms: 30_000,
            refresh_period: 0,
        };
        let mut out = Vec::new();
        ControlFrame::Accept(p).encode(&mut out);
        assert_eq!(h(&out), v::ACCEPT_FRAME);
        assert_eq!(parse_control(&out).unwrap(), vec![ControlFrame::Accept(p)]);
        // With a refresh period (HEVC, intra refresh every 30 frames): two bytes more.
        let p = SessionParams {
            codec: Codec::Hevc,
            refresh_period: 30,
            ..p
        };
        let mut out = Vec::new();
        ControlFrame::Accept(p).encode(&mut out);
        assert_eq!(h(&out), v::ACCEPT_FRAME_REFRESH);
        assert_eq!(parse_control(&out).unwrap(), vec![ControlFrame::Accept(p)]);

        // A protected Reject frame: pending approval, "ask".
        let mut out = Vec::new();
        ControlFrame::Reject(Reject {
            reason: RejectReason::PendingApproval,
            message: "ask".into(),
        })
        .encode(&mut out);
        assert_eq!(h(&out), v::REJECT_FRAME);

        // A Hello is padded to 1200 bytes: mode 0, no token, a 34-byte Noise message (here 0x5A
        // bytes).
        let noise = [0x5Au8; 34];
        let mut out = Vec::new();
        Hello {
            mode: 0,
            token: &[],
            noise: &noise,
        }
        .encode(
            &Header::new(PacketType::Hello, 0x0102030405060708, 0),
            &mut out,
        );
        assert_eq!(out.len(), HELLO_MIN_LEN);
        assert_eq!(h(&out[..22]), v::HELLO_PREFIX);
        let (_, d) = parse(&out).unwrap();
        assert_eq!(
            d,
            Datagram::Hello(Hello {
                mode: 0,
                token: &[],
                noise: &noise
            })
        );

        // Version negotiation: the host speaks version 1, message "v1".
        let mut out = Vec::new();
        VersionNegotiation {
            versions: vec![1],
            message: "v1".into(),
        }
        .encode(&mut out);
        assert_eq!(h(&out), v::VERSION_NEGOTIATION);
        assert_eq!(
            parse(&out).unwrap_err(),
            WireError::VersionNegotiation(vec![1], "v1".into())
        );

        let mut out = Vec::new();
        let enc = ControlFrame::HostEncoder(HostEncoder {
            encoder: "libx264".into(),
            preset: "ultrafast".into(),
            conversion: "libyuv".into(),
        });
        enc.encode(&mut out);
        assert_eq!(h(&out), v::HOST_ENCODER_FRAME);
        assert_eq!(out.len(), enc.encoded_len());
        assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(enc)));
        // Longer fields are cut at a character boundary, and what a host sends is escaped.
        let long = ControlFrame::HostEncoder(HostEncoder {
            encoder: "é".repeat(40),
            preset: "\u{1b}[2J".into(),
            conversion: String::new(),
        });
        let mut out = Vec::new();
        long.encode(&mut out);
        assert_eq!(out.len(), long.encoded_len());
        let Ok(Some(ControlFrame::HostEncoder(back))) = ControlFrame::parse_body(out[0], &out[3..])
        else {
            panic!("a HostEncoder frame");
        };
        assert_eq!(back.encoder, "é".repeat(32));
        assert_eq!(back.preset, "\\u{1b}[2J");
    }

    proptest! {
        #[test]
        fn hello_reject_round_trip(cid in 1u64.., noise in proptest::collection::vec(any::<u8>(), 0..200), msg in ".{0,100}", reason in any::<u8>()) {
            let mut out = Vec::new();
            Hello { mode: 1, token: &[9; 20], noise: &noise }.encode(&Header::new(PacketType::Hello, cid, 0), &mut out);
            prop_assert!(out.len() >= HELLO_MIN_LEN);
            let (h, d) = parse(&out).unwrap();
            prop_assert_eq!(h.connection_id, cid);
            prop_assert_eq!(d, Datagram::Hello(Hello { mode: 1, token: &[9; 20], noise: &noise }));
            let rej = Reject { reason: RejectReason::from_u8(reason), message: msg.clone() };
            let mut out = Vec::new();
            rej.encode(&Header::new(PacketType::Reject, 0, 1), &mut out);
            let (_, d) = parse(&out).unwrap();
            // Peer text comes out escaped (the same text when it has no control characters).
            let rej = Reject { message: sanitize_within(&rej.message, MAX_MESSAGE_LEN), ..rej };
            prop_assert_eq!(d, Datagram::Reject(rej));
        }
    }
}
