//! The bytes on the wire: the datagram header, every message, and their encoders and parsers.
//!
//! Every integer is big-endian (network order). docs/PROTOCOL.md is the normative description;
//! the test vectors there are checked by `tests` below.
//!
//! ```text
//! datagram = header (18 bytes) ‖ body
//! header   = version u8 ‖ type u8 ‖ connection_id u64 ‖ packet_number u64
//! ```
//! Parsers never panic and never allocate before the header has been validated; they return a
//! [`WireError`] that names what was wrong.

use std::fmt;

use crate::pose::PoseSample;
use crate::state::{StateAck, StatePacket};

/// The protocol version this implementation speaks.
pub const VERSION: u8 = 1;
/// Byte 0 of a Version Negotiation datagram (never a protocol version).
pub const VERSION_NEGOTIATION: u8 = 0;
/// Bytes in the datagram header.
pub const HEADER_LEN: usize = 18;
/// Bytes in a video shard's header (after the datagram header).
pub const SHARD_HEADER_LEN: usize = 26;
/// The most slices a frame may be cut into (docs/PROTOCOL.md §6.3).
pub const MAX_SLICES: u8 = 16;
/// A Hello is padded to at least this many bytes, so that the host's answer to an address that
/// has not proven it can receive is never larger than what that address sent.
pub const HELLO_MIN_LEN: usize = 1200;
/// The longest client name a Hello may carry.
pub const MAX_NAME_LEN: usize = 64;
/// The longest reason text a Reject may carry.
pub const MAX_MESSAGE_LEN: usize = 512;
/// The largest frame (access unit) the protocol carries.
pub const MAX_FRAME_BYTES: u32 = 16 << 20;

/// Why a datagram could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("datagram too short: {len} bytes, need at least {need}")]
    TooShort { len: usize, need: usize },
    #[error("unsupported protocol version {0} (this implementation speaks {VERSION})")]
    Version(u8),
    #[error("unknown datagram type 0x{0:02x}")]
    UnknownType(u8),
    #[error("bad {field}: {reason}")]
    Field {
        field: &'static str,
        reason: &'static str,
    },
    #[error("truncated {0}")]
    Truncated(&'static str),
    #[error("the peer speaks protocol version(s) {0:?}, this implementation {VERSION}: {1}")]
    VersionNegotiation(Vec<u8>, String),
}

/// Text a peer chose (a Reject's or a Version Negotiation's message, a client's name), made
/// safe to show in a terminal, a log or a file: every control character (C0, DEL, C1: the
/// escape sequences that clear a screen or retitle a window, and line breaks that forge log
/// lines) and every bidirectional formatting character (which reorders what is displayed) is
/// replaced by its `\u{…}` escape. Everything else is kept. The parsers of those fields apply
/// it, so no peer text leaves this crate unescaped. Idempotent.
pub fn sanitize_peer_text(text: &str) -> String {
    sanitize_within(text, usize::MAX)
}

/// [`sanitize_peer_text`], cut (between characters and escapes) to at most `max` bytes: what a
/// parser returns then fits its field again, so it re-encodes to the same text.
fn sanitize_within(text: &str, max: usize) -> String {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if text.len() <= max && !text.chars().any(unsafe_char) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for c in text.chars() {
        let len = if unsafe_char(c) {
            c.escape_unicode().count()
        } else {
            c.len_utf8()
        };
        if out.len() + len > max {
            break;
        }
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// A [`WireError::Field`].
pub fn bad(field: &'static str, reason: &'static str) -> WireError {
    WireError::Field { field, reason }
}

/// Datagram types (header byte 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Client → host, cleartext, ≥ 1200 bytes: Noise message 1 (asks for a session).
    Hello = 0x01,
    /// Host → client, cleartext: no session, and why (only before the handshake has keys).
    Reject = 0x03,
    /// Host → client: Noise message 2.
    HelloReply = 0x04,
    /// Client → host: Noise message 3.
    HelloFinish = 0x05,
    /// Host → client, cleartext: "repeat your Hello with this token" (address validation when
    /// the host is under a flood of handshakes).
    Retry = 0x06,
    /// Host → client, protected: one shard of a video frame.
    Shard = 0x10,
    /// Either way, protected: a sequence of control frames (may be empty: a keep-alive).
    Control = 0x20,
    /// Host → client: one Opus audio packet (see [`crate::audio`]).
    Audio = 0x30,
}

impl PacketType {
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0x01 => PacketType::Hello,
            0x03 => PacketType::Reject,
            0x04 => PacketType::HelloReply,
            0x05 => PacketType::HelloFinish,
            0x06 => PacketType::Retry,
            0x10 => PacketType::Shard,
            0x20 => PacketType::Control,
            0x30 => PacketType::Audio,
            other => return Err(WireError::UnknownType(other)),
        })
    }

    /// Whether datagrams of this type are AEAD-protected.
    pub fn is_protected(self) -> bool {
        matches!(
            self,
            PacketType::Shard | PacketType::Control | PacketType::Audio
        )
    }
}

/// The datagram header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub packet_type: PacketType,
    /// 0 in a Hello; afterwards the id the host assigned in its Accept.
    pub connection_id: u64,
    /// Per sender and session, starting at 0 and increasing by one per datagram.
    pub packet_number: u64,
}

impl Header {
    pub fn new(packet_type: PacketType, connection_id: u64, packet_number: u64) -> Self {
        Header {
            version: VERSION,
            packet_type,
            connection_id,
            packet_number,
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.packet_type as u8);
        out.extend_from_slice(&self.connection_id.to_be_bytes());
        out.extend_from_slice(&self.packet_number.to_be_bytes());
    }

    /// Parses the header; the version must be [`VERSION`].
    pub fn parse(data: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if data.len() < HEADER_LEN {
            return Err(WireError::TooShort {
                len: data.len(),
                need: HEADER_LEN,
            });
        }
        if data[0] != VERSION {
            return Err(WireError::Version(data[0]));
        }
        let packet_type = PacketType::from_u8(data[1])?;
        let connection_id = u64::from_be_bytes(arr(&data[2..10]));
        let packet_number = u64::from_be_bytes(arr(&data[10..18]));
        Ok((
            Header {
                version: data[0],
                packet_type,
                connection_id,
                packet_number,
            },
            &data[HEADER_LEN..],
        ))
    }
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

/// A bounds-checked reader over a body.
pub struct Reader<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], what: &'static str) -> Self {
        Reader { data, what }
    }
    pub fn remaining(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.data.len() < n {
            return Err(WireError::Truncated(self.what));
        }
        let (a, b) = self.data.split_at(n);
        self.data = b;
        Ok(a)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(arr(self.bytes(2)?)))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(arr(self.bytes(4)?)))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(arr(self.bytes(8)?)))
    }
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(self.u32()? as i32)
    }
    pub fn f32(&mut self) -> Result<f32, WireError> {
        Ok(f32::from_bits(self.u32()?))
    }
    pub fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad(field, "must be 0 or 1")),
        }
    }
    /// A u8 length followed by that many UTF-8 bytes.
    pub fn string(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(bad(field, "too long"));
        }
        let b = self.bytes(n)?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| bad(field, "not UTF-8"))
    }

    /// A `str` a peer chose for people to read, escaped by [`sanitize_peer_text`] and kept
    /// within `max` bytes (so it re-encodes unchanged).
    pub fn peer_text(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        self.string(field, max).map(|s| sanitize_within(&s, max))
    }
}

/// Little writer helpers.
pub trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i32(&mut self, v: i32);
    fn put_f32(&mut self, v: f32);
    fn put_str(&mut self, s: &str, max: usize);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v)
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_i32(&mut self, v: i32) {
        self.put_u32(v as u32)
    }
    fn put_f32(&mut self, v: f32) {
        self.put_u32(v.to_bits())
    }
    /// Truncates to `max` bytes at a character boundary.
    fn put_str(&mut self, s: &str, max: usize) {
        let end = str_prefix_len(s, max);
        self.put_u16(end as u16);
        self.extend_from_slice(&s.as_bytes()[..end]);
    }
}

// ---------------------------------------------------------------------------------------------
// Handshake messages

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

/// The codec a host picks for a client: the first of the client's codecs, in its order of
/// preference, that the host can encode. Err: none in common, with both lists named.
pub fn choose_codec(host: &[Codec], client: &[Codec]) -> Result<Codec, String> {
    client
        .iter()
        .copied()
        .find(|c| host.contains(c))
        .ok_or_else(|| {
            format!(
                "no video codec in common: the host encodes {}, this client decodes {}",
                Codec::list(host),
                Codec::list(client)
            )
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

    fn encode(&self, out: &mut Vec<u8>) {
        for f in self.fields() {
            out.put_str(f, Self::MAX_FIELD);
        }
    }

    fn encoded_len(&self) -> usize {
        self.fields()
            .iter()
            .map(|f| 2 + str_prefix_len(f, Self::MAX_FIELD))
            .sum()
    }

    fn parse(r: &mut Reader) -> Result<HostEncoder, WireError> {
        Ok(HostEncoder {
            encoder: r.peer_text("host_encoder.encoder", Self::MAX_FIELD)?,
            preset: r.peer_text("host_encoder.preset", Self::MAX_FIELD)?,
            conversion: r.peer_text("host_encoder.conversion", Self::MAX_FIELD)?,
        })
    }
}

/// The bytes of `s` that [`Put::put_str`] writes within `max`: cut at a character boundary.
fn str_prefix_len(s: &str, max: usize) -> usize {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

// ---------------------------------------------------------------------------------------------
// Video shards

/// Shard flag bits.
pub mod shard_flags {
    /// The frame is a keyframe (IDR): decodable without any earlier frame.
    pub const KEYFRAME: u8 = 1 << 0;
    /// This shard carries Reed–Solomon parity, not frame bytes.
    pub const PARITY: u8 = 1 << 1;
    /// This is a retransmission.
    pub const RETRANSMIT: u8 = 1 << 2;
    /// An intra-refresh sweep starts with this frame (sessions with a refresh period): a client
    /// waiting for a clean picture decodes from here and shows the picture `refresh_period − 1`
    /// frames later.
    pub const REFRESH: u8 = 1 << 3;
}

/// The header of one video shard.
///
/// A frame is sent as `slice_count` **slices** (1: whole), each cut into its own shards and
/// protected by its own parity: the shard counts, `shard_len` and `frame_bytes` describe the
/// shard's slice (the whole frame when `slice_count` is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// Counts encoded frames of this session from 0.
    pub frame_number: u32,
    pub flags: u8,
    /// The slice this shard belongs to, `0..slice_count`, top to bottom.
    pub slice_index: u8,
    /// How many slices the frame has (1 to [`MAX_SLICES`]; 1: the frame is sent whole). On
    /// the wire both share one byte: `(slice_count − 1) << 4 | slice_index`.
    pub slice_count: u8,
    /// 0..data_count are data shards, data_count..data_count+parity_count parity shards.
    pub shard_index: u16,
    pub data_count: u16,
    pub parity_count: u16,
    /// Length of every shard but the last data shard (which may be shorter on the wire).
    pub shard_len: u16,
    /// Exact length of the slice's bytes (the frame's, sent whole).
    pub frame_bytes: u32,
    /// When the frame was captured, host clock, microseconds.
    pub capture_us: u64,
}

impl ShardHeader {
    pub fn keyframe(&self) -> bool {
        self.flags & shard_flags::KEYFRAME != 0
    }
    /// An intra-refresh sweep starts with this frame.
    pub fn refresh_start(&self) -> bool {
        self.flags & shard_flags::REFRESH != 0
    }
    pub fn is_parity(&self) -> bool {
        self.shard_index >= self.data_count
    }

    /// The payload length this shard must have.
    pub fn expected_len(&self) -> usize {
        let l = self.shard_len as usize;
        if self.shard_index + 1 == self.data_count {
            self.frame_bytes as usize - (self.data_count as usize - 1) * l
        } else {
            l
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.frame_number);
        out.put_u8(self.flags);
        out.put_u8((self.slice_count.saturating_sub(1) & 0x0F) << 4 | (self.slice_index & 0x0F));
        out.put_u16(self.shard_index);
        out.put_u16(self.data_count);
        out.put_u16(self.parity_count);
        out.put_u16(self.shard_len);
        out.put_u32(self.frame_bytes);
        out.put_u64(self.capture_us);
    }

    /// Parses and validates a shard: the header's fields agree with each other and with the
    /// payload's length.
    pub fn parse(body: &[u8]) -> Result<(ShardHeader, &[u8]), WireError> {
        let mut r = Reader::new(body, "shard header");
        let frame_number = r.u32()?;
        let flags = r.u8()?;
        let slice = r.u8()?;
        let h = ShardHeader {
            frame_number,
            flags,
            slice_index: slice & 0x0F,
            slice_count: (slice >> 4) + 1,
            shard_index: r.u16()?,
            data_count: r.u16()?,
            parity_count: r.u16()?,
            shard_len: r.u16()?,
            frame_bytes: r.u32()?,
            capture_us: r.u64()?,
        };
        let payload = r.rest();
        if h.slice_index >= h.slice_count {
            return Err(bad("shard.slice", "slice_index is not below slice_count"));
        }
        if h.data_count == 0 || h.shard_len == 0 {
            return Err(bad(
                "shard.data_count",
                "a frame has at least one data shard of non-zero length",
            ));
        }
        if h.shard_index as u32 >= h.data_count as u32 + h.parity_count as u32 {
            return Err(bad("shard.shard_index", "beyond data_count + parity_count"));
        }
        if h.frame_bytes == 0 || h.frame_bytes > MAX_FRAME_BYTES {
            return Err(bad("shard.frame_bytes", "zero or above the 16 MiB limit"));
        }
        let full = (h.data_count as u64 - 1) * h.shard_len as u64;
        if (h.frame_bytes as u64) <= full || (h.frame_bytes as u64) > full + h.shard_len as u64 {
            return Err(bad(
                "shard.frame_bytes",
                "does not match data_count × shard_len",
            ));
        }
        if h.parity_count > 0
            && (h.parity_count > h.data_count
                || h.data_count as usize > crate::fec::MAX_FEC_DATA_SHARDS
                || !h.shard_len.is_multiple_of(2))
        {
            return Err(bad(
                "shard.parity_count",
                "parity needs parity_count ≤ data_count ≤ 32768 and an even shard_len",
            ));
        }
        if (h.flags & shard_flags::PARITY != 0) != h.is_parity() {
            return Err(bad("shard.flags", "parity flag disagrees with shard_index"));
        }
        if payload.len() != h.expected_len() {
            return Err(bad("shard.payload", "length disagrees with the header"));
        }
        Ok((h, payload))
    }
}

// ---------------------------------------------------------------------------------------------
// Input events

/// A user input event, client → host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputEvent {
    /// A key went down or up. `code` is an SDL keycode.
    Key { code: u32, down: bool },
    /// The pointer moved: absolute position in the client's window and relative motion.
    PointerMotion { x: i32, y: i32, dx: i32, dy: i32 },
    /// A mouse button (1 left, 2 middle, 3 right, …) went down or up.
    MouseButton { button: u8, down: bool },
    /// Wheel motion in notches.
    Wheel { dx: i32, dy: i32 },
    /// Absolute head orientation in degrees. (Prefer the latest-wins state channel,
    /// [`crate::state::keys::HEAD_POSE`]: a pose is state, not an event.)
    HeadPose { yaw: f32, pitch: f32, roll: f32 },
    /// Text typed (an input method's commit): up to 32 bytes of UTF-8 per event; longer text
    /// is split at character boundaries by [`TextChunk::split`].
    Text(TextChunk),
    /// A button or key of a registered input device (`device` numbers the client's devices
    /// from 0); `code` is the Linux evdev code (`KEY_*`, `BTN_*`).
    Button { device: u8, code: u16, down: bool },
    /// An axis of a registered input device: evdev `EV_ABS` (absolute value) or `EV_REL`
    /// (`relative`: a delta) with its `ABS_*`/`REL_*` code.
    Axis {
        device: u8,
        relative: bool,
        code: u16,
        value: i32,
    },
}

/// Up to [`TextChunk::MAX`] bytes of UTF-8 (fixed size, so input events stay `Copy`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TextChunk {
    len: u8,
    bytes: [u8; TextChunk::MAX],
}

impl TextChunk {
    /// The most bytes in one chunk (SDL's text input events carry at most 32).
    pub const MAX: usize = 32;

    /// The chunk of `s`, if it fits.
    pub fn new(s: &str) -> Option<TextChunk> {
        if s.len() > Self::MAX {
            return None;
        }
        let mut bytes = [0u8; Self::MAX];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(TextChunk {
            len: s.len() as u8,
            bytes,
        })
    }

    /// Splits text into chunks at character boundaries.
    pub fn split(s: &str) -> impl Iterator<Item = TextChunk> + '_ {
        let mut rest = s;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut end = rest.len().min(Self::MAX);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (a, b) = rest.split_at(end);
            rest = b;
            TextChunk::new(a)
        })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for TextChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl InputEvent {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            InputEvent::Key { code, down } => {
                out.put_u8(1);
                out.put_u32(code);
                out.put_u8(down as u8);
            }
            InputEvent::PointerMotion { x, y, dx, dy } => {
                out.put_u8(2);
                out.put_i32(x);
                out.put_i32(y);
                out.put_i32(dx);
                out.put_i32(dy);
            }
            InputEvent::MouseButton { button, down } => {
                out.put_u8(3);
                out.put_u8(button);
                out.put_u8(down as u8);
            }
            InputEvent::Wheel { dx, dy } => {
                out.put_u8(4);
                out.put_i32(dx);
                out.put_i32(dy);
            }
            InputEvent::HeadPose { yaw, pitch, roll } => {
                out.put_u8(5);
                out.put_f32(yaw);
                out.put_f32(pitch);
                out.put_f32(roll);
            }
            InputEvent::Text(t) => {
                out.put_u8(6);
                out.put_u8(t.len);
                out.extend_from_slice(t.as_str().as_bytes());
            }
            InputEvent::Button { device, code, down } => {
                out.put_u8(7);
                out.put_u8(device);
                out.put_u16(code);
                out.put_u8(down as u8);
            }
            InputEvent::Axis {
                device,
                relative,
                code,
                value,
            } => {
                out.put_u8(8);
                out.put_u8(device);
                out.put_u8(relative as u8);
                out.put_u16(code);
                out.put_i32(value);
            }
        }
    }

    /// The encoded length.
    pub fn encoded_len(&self) -> usize {
        match self {
            InputEvent::Key { .. } => 6,
            InputEvent::PointerMotion { .. } => 17,
            InputEvent::MouseButton { .. } => 3,
            InputEvent::Wheel { .. } => 9,
            InputEvent::HeadPose { .. } => 13,
            InputEvent::Text(t) => 2 + t.len as usize,
            InputEvent::Button { .. } => 5,
            InputEvent::Axis { .. } => 9,
        }
    }

    pub fn parse(r: &mut Reader<'_>) -> Result<InputEvent, WireError> {
        Ok(match r.u8()? {
            1 => InputEvent::Key {
                code: r.u32()?,
                down: r.bool("input.key.down")?,
            },
            2 => InputEvent::PointerMotion {
                x: r.i32()?,
                y: r.i32()?,
                dx: r.i32()?,
                dy: r.i32()?,
            },
            3 => InputEvent::MouseButton {
                button: r.u8()?,
                down: r.bool("input.button.down")?,
            },
            4 => InputEvent::Wheel {
                dx: r.i32()?,
                dy: r.i32()?,
            },
            5 => {
                let (yaw, pitch, roll) = (r.f32()?, r.f32()?, r.f32()?);
                if !(yaw.is_finite() && pitch.is_finite() && roll.is_finite()) {
                    return Err(bad("input.head_pose", "not a finite number"));
                }
                InputEvent::HeadPose { yaw, pitch, roll }
            }
            6 => {
                let n = r.u8()? as usize;
                if n == 0 || n > TextChunk::MAX {
                    return Err(bad("input.text", "length must be 1..=32"));
                }
                let s =
                    std::str::from_utf8(r.bytes(n)?).map_err(|_| bad("input.text", "not UTF-8"))?;
                InputEvent::Text(TextChunk::new(s).ok_or(bad("input.text", "too long"))?)
            }
            7 => InputEvent::Button {
                device: r.u8()?,
                code: r.u16()?,
                down: r.bool("input.button.down")?,
            },
            8 => InputEvent::Axis {
                device: r.u8()?,
                relative: r.bool("input.axis.relative")?,
                code: r.u16()?,
                value: r.i32()?,
            },
            _ => return Err(bad("input.kind", "unknown input event kind")),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Control frames

/// Per-frame timing the host reports to the client after sending a frame, so the client can
/// account for every stage. Durations in microseconds; `send_done_us` is host clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameTiming {
    pub frame_number: u32,
    pub capture_dur_us: u32,
    pub convert_us: u32,
    pub encode_us: u32,
    /// First shard handed to the socket → last shard handed to the socket.
    pub send_us: u32,
    /// When the last shard was handed to the socket (host clock).
    pub send_done_us: u64,
    pub frame_bytes: u32,
    /// Host counters at this frame (for reports of a client without the host's own report).
    pub captured: u32,
    pub encoded: u32,
    pub dropped: u32,
}

/// Client → host: how the stream is doing. Counters are cumulative since the session start, so a
/// lost Feedback loses nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    pub frames_complete: u32,
    pub frames_lost: u32,
    pub frames_late: u32,
    pub datagrams_received: u32,
    pub packets_lost: u32,
    /// Interarrival jitter estimate, microseconds (RFC 3550 style).
    pub jitter_us: u32,
    /// The client's smoothed RTT, microseconds (0: unknown).
    pub srtt_us: u32,
    /// The client's recent decode time, microseconds.
    pub decode_us: u32,
}

/// A percentile pair of one latency over a report interval, µs; [`Spread::NONE`]: no sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    pub p50_us: u32,
    pub p95_us: u32,
}

impl Spread {
    /// No sample in the interval (both fields `u32::MAX` on the wire).
    pub const NONE: Spread = Spread {
        p50_us: u32::MAX,
        p95_us: u32::MAX,
    };

    /// Whether it carries a measurement.
    pub fn is_some(&self) -> bool {
        *self != Spread::NONE
    }
}

impl Default for Spread {
    fn default() -> Self {
        Spread::NONE
    }
}

/// Client → host, beside the Feedback: the latency of the frames the client showed over its
/// last report interval (docs/PROTOCOL.md §7, `Latency`): glass-to-glass and the client-side
/// stages, each as p50/p95. An older host skips the frame by its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyReport {
    /// The frames shown in the interval.
    pub frames: u16,
    /// The interval's length, ms.
    pub interval_ms: u16,
    /// Host capture → shown on the client.
    pub glass_to_glass: Spread,
    /// Last shard sent (host) → last shard received (client).
    pub network: Spread,
    /// Last shard received → decoder start.
    pub reassemble: Spread,
    /// FFmpeg decode.
    pub decode: Spread,
    /// Decoded → shown.
    pub present: Spread,
}

impl LatencyReport {
    /// The body's length: two u16 and five spreads.
    pub const LEN: usize = 4 + 5 * 8;

    /// The spreads in wire order, with their names (as the dashboard shows them).
    pub fn spreads(&self) -> [(&'static str, Spread); 5] {
        [
            ("glass_to_glass", self.glass_to_glass),
            ("network", self.network),
            ("reassemble", self.reassemble),
            ("decode", self.decode),
            ("present", self.present),
        ]
    }
}

/// Control frame type codes.
pub mod frame_type {
    pub const KEYFRAME_REQUEST: u8 = 0x01;
    pub const FEEDBACK: u8 = 0x02;
    pub const PING: u8 = 0x03;
    pub const PONG: u8 = 0x04;
    pub const INPUT: u8 = 0x05;
    pub const INPUT_ACK: u8 = 0x06;
    pub const FRAME_TIMING: u8 = 0x07;
    pub const BYE: u8 = 0x08;
    pub const ACCEPT: u8 = 0x09;
    pub const REJECT: u8 = 0x0A;
    pub const STATE: u8 = 0x0B;
    pub const STATE_ACK: u8 = 0x0C;
    pub const PATH_CHALLENGE: u8 = 0x0D;
    pub const PATH_RESPONSE: u8 = 0x0E;
    pub const SHARD_NACK: u8 = 0x0F;
    pub const CLOCK_ID: u8 = 0x10;
    /// 0x11–0x13: reserved (codecs); 0x14–0x17: the pose's (0x15–0x17 reserved); 0x18–0x1B:
    /// several clients per host (0x1A, 0x1B unused); 0x1C–0x1F: the raw layer-2 transport.
    pub const FRAME_POSE: u8 = 0x14;
    pub const ROLE: u8 = 0x18;
    pub const ROLE_ACK: u8 = 0x19;
    pub const LINK_ADDRESS: u8 = 0x1C;
    pub const LINK_DECLINED: u8 = 0x1D;
    pub const SLICE_NACK: u8 = 0x1E;
    pub const SLICE_TIMING: u8 = 0x1F;
    /// Client → host: the shown frames' latency over the last report interval.
    pub const LATENCY: u8 = 0x20;
    /// Host → client, beside the Accept: which encoder makes the stream.
    pub const HOST_ENCODER: u8 = 0x21;
}

/// A client's part in a session of a host that serves several (docs/PROTOCOL.md §7.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClientRole {
    /// Its input drives the application, its head pose is the scene's pose, the adaptive
    /// bitrate follows its link.
    Controller = 0,
    /// It watches: its input is dropped (and counted) unless the host granted it input.
    Viewer = 1,
}

impl ClientRole {
    /// Unknown values read as viewer (the safe side: nothing a newer host says grants input).
    pub fn from_u8(v: u8) -> ClientRole {
        match v {
            0 => ClientRole::Controller,
            _ => ClientRole::Viewer,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientRole::Controller => "controller",
            ClientRole::Viewer => "viewer",
        }
    }
}

/// Flags of a [`ControlFrame::Role`].
pub mod role_flags {
    /// A viewer whose input the host applies (`untether pair grant FINGERPRINT input`).
    pub const INPUT_GRANTED: u8 = 0x01;
    /// The viewer's link cannot carry the stream: it is sent keyframes only until it keeps up.
    pub const PAUSED: u8 = 0x02;
}

/// Why a host declines the raw layer-2 transport a client offered ([`ControlFrame::LinkDeclined`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LinkDeclineReason {
    /// The host runs the data plane over UDP (`network.transport = "udp"`).
    HostUsesUdp = 1,
    /// The host has no raw socket (no CAP_NET_RAW, or its interface failed).
    Unavailable = 2,
    /// The host uses another EtherType.
    EtherType = 3,
    Other = 255,
}

impl LinkDeclineReason {
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => LinkDeclineReason::HostUsesUdp,
            2 => LinkDeclineReason::Unavailable,
            3 => LinkDeclineReason::EtherType,
            _ => LinkDeclineReason::Other,
        }
    }

    /// What the user reads.
    pub fn text(self) -> &'static str {
        match self {
            LinkDeclineReason::HostUsesUdp => {
                "the host runs over UDP (network.transport = \"udp\")"
            }
            LinkDeclineReason::Unavailable => {
                "the host cannot open raw layer 2 (no CAP_NET_RAW, or its interface failed)"
            }
            LinkDeclineReason::EtherType => "the host uses another EtherType",
            LinkDeclineReason::Other => "the host declined",
        }
    }
}

/// Most shard indices one ShardNack names.
pub const MAX_NACK_SHARDS: usize = 256;

/// Why a side ends a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ByeReason {
    /// The user or the application closed it.
    Closed = 0,
    /// The host is shutting down.
    ShuttingDown = 1,
    /// Another client took over (same address, new client run).
    Replaced = 2,
    /// The host stopped on a failure (a lost display, an encoder error).
    Failed = 3,
    /// Host → viewer: its link stayed slower than the stream (sustained loss or queueing
    /// after being paused to keyframes); it was dropped so it cannot slow the others.
    TooSlow = 4,
    Other = 255,
}

impl ByeReason {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => ByeReason::Closed,
            1 => ByeReason::ShuttingDown,
            2 => ByeReason::Replaced,
            3 => ByeReason::Failed,
            4 => ByeReason::TooSlow,
            _ => ByeReason::Other,
        }
    }
}

/// One control frame inside a Control datagram: `type u8 ‖ length u16 ‖ body`. Unknown types
/// are skipped by their length, so a newer peer can add frames.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlFrame {
    /// Client → host: a frame was lost; send a keyframe. Repeated every frame interval until
    /// one arrives. `lost_frame` is the first frame the client could not use.
    KeyframeRequest {
        lost_frame: u32,
    },
    Feedback(Feedback),
    /// `sent_us` is the sender's clock.
    Ping {
        id: u32,
        sent_us: u64,
    },
    /// Echoes the ping's id and time, and adds the receiver's clock when it received the ping
    /// and when it sent the pong.
    Pong {
        id: u32,
        ping_sent_us: u64,
        received_us: u64,
        sent_us: u64,
    },
    /// Reliable, ordered input events: `events[i]` has sequence number `first_seq + i`.
    Input {
        first_seq: u32,
        events: Vec<InputEvent>,
    },
    /// Every input event below `next_expected` has been delivered.
    InputAck {
        next_expected: u32,
    },
    FrameTiming(FrameTiming),
    Bye {
        reason: ByeReason,
    },
    /// Host → client, the first protected datagram: the session is open.
    Accept(SessionParams),
    /// Host → client, protected: no session (the client's key is not allowed, …).
    Reject(Reject),
    /// Client → host: a latest-wins state packet.
    State(StatePacket),
    /// Host → client: which state packets arrived (ACK/NAK runs).
    StateAck(StateAck),
    /// Host → client on one path: answer with a PathResponse on the same path (validates the
    /// path and samples its RTT).
    PathChallenge {
        token: u64,
    },
    /// Client → host, on the path the challenge came from: its token.
    PathResponse {
        token: u64,
    },
    /// Client → host: resend these data shards of this frame (retransmission; at most
    /// [`MAX_NACK_SHARDS`] indices).
    ShardNack {
        frame_number: u32,
        missing: Vec<u16>,
    },
    /// Host → client, beside the Accept: which monotonic clock the host reads (a hash of the
    /// kernel's boot id and the time namespace). Equal to the client's: host and client share
    /// one clock, so the clock offset is exactly 0, not an estimate.
    ClockId {
        id: [u8; 16],
    },
    /// Host → client: its role on a host that serves several clients, sent beside the Accept
    /// and again on every change, repeated until acknowledged. `version` grows with each
    /// change (wrapping); a client acts on a version newer than the last it saw.
    Role {
        role: ClientRole,
        /// [`role_flags`].
        flags: u8,
        version: u16,
    },
    /// Client → host: the Role of this version arrived.
    RoleAck {
        version: u16,
    },
    /// Host → client: the head pose frame `frame_number` was rendered for, with the client's
    /// sample time of that pose (echoed as the client sent it). Sent before the frame's first
    /// shard and again after its last (beside its FrameTiming), so one lost copy loses nothing.
    FramePose {
        frame_number: u32,
        sample: PoseSample,
    },
    /// Both ways, after the Accept: "send me the data plane as raw layer-2 frames of this
    /// EtherType at this MAC address" (docs/PROTOCOL.md §7.3).
    LinkAddress {
        ethertype: u16,
        mac: [u8; 6],
    },
    /// Host → client: the host does not take the raw layer-2 transport; stay on UDP.
    LinkDeclined {
        reason: LinkDeclineReason,
    },
    /// Client → host: resend these data shards of this slice of a frame sent in slices
    /// (retransmission, §6.3; at most [`MAX_NACK_SHARDS`] indices).
    SliceNack {
        frame_number: u32,
        slice_index: u8,
        missing: Vec<u16>,
    },
    /// Host → client, beside a sliced frame's FrameTiming: when its first and its last slice
    /// were handed to the network, µs after the frame's capture (host clock).
    SliceTiming {
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    },
    /// Client → host, beside the Feedback: glass-to-glass and the client's stages over the
    /// last report interval.
    Latency(LatencyReport),
    /// Host → client, beside the Accept: the encoder that makes the stream.
    HostEncoder(HostEncoder),
}

/// The longest control frame body.
pub const MAX_FRAME_BODY: usize = u16::MAX as usize;

impl ControlFrame {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (ty, start) = (self.type_code(), out.len());
        out.put_u8(ty);
        out.put_u16(0);
        match self {
            ControlFrame::KeyframeRequest { lost_frame } => out.put_u32(*lost_frame),
            ControlFrame::Feedback(f) => {
                for v in [
                    f.frames_complete,
                    f.frames_lost,
                    f.frames_late,
                    f.datagrams_received,
                    f.packets_lost,
                    f.jitter_us,
                    f.srtt_us,
                    f.decode_us,
                ] {
                    out.put_u32(v);
                }
            }
            ControlFrame::Ping { id, sent_us } => {
                out.put_u32(*id);
                out.put_u64(*sent_us);
            }
            ControlFrame::Pong {
                id,
                ping_sent_us,
                received_us,
                sent_us,
            } => {
                out.put_u32(*id);
                out.put_u64(*ping_sent_us);
                out.put_u64(*received_us);
                out.put_u64(*sent_us);
            }
            ControlFrame::Input { first_seq, events } => {
                out.put_u32(*first_seq);
                out.put_u16(events.len() as u16);
                for e in events {
                    e.encode(out);
                }
            }
            ControlFrame::InputAck { next_expected } => out.put_u32(*next_expected),
            ControlFrame::FrameTiming(t) => {
                out.put_u32(t.frame_number);
                out.put_u32(t.capture_dur_us);
                out.put_u32(t.convert_us);
                out.put_u32(t.encode_us);
                out.put_u32(t.send_us);
                out.put_u64(t.send_done_us);
                out.put_u32(t.frame_bytes);
                out.put_u32(t.captured);
                out.put_u32(t.encoded);
                out.put_u32(t.dropped);
            }
            ControlFrame::Bye { reason } => out.put_u8(*reason as u8),
            ControlFrame::Accept(p) => p.encode(out),
            ControlFrame::Reject(r) => r.encode_body(out),
            ControlFrame::State(p) => p.encode(out),
            ControlFrame::StateAck(a) => a.encode(out),
            ControlFrame::PathChallenge { token } | ControlFrame::PathResponse { token } => {
                out.put_u64(*token)
            }
            ControlFrame::ShardNack {
                frame_number,
                missing,
            } => {
                out.put_u32(*frame_number);
                let n = missing.len().min(MAX_NACK_SHARDS);
                out.put_u16(n as u16);
                for &i in &missing[..n] {
                    out.put_u16(i);
                }
            }
            ControlFrame::ClockId { id } => {
                out.extend_from_slice(id);
            }
            ControlFrame::HostEncoder(e) => e.encode(out),
            ControlFrame::Role {
                role,
                flags,
                version,
            } => {
                out.put_u8(*role as u8);
                out.put_u8(*flags);
                out.put_u16(*version);
            }
            ControlFrame::RoleAck { version } => out.put_u16(*version),
            ControlFrame::FramePose {
                frame_number,
                sample,
            } => {
                out.put_u32(*frame_number);
                sample.encode(out);
            }
            ControlFrame::LinkAddress { ethertype, mac } => {
                out.put_u16(*ethertype);
                out.extend_from_slice(mac);
            }
            ControlFrame::LinkDeclined { reason } => out.put_u8(*reason as u8),
            ControlFrame::SliceNack {
                frame_number,
                slice_index,
                missing,
            } => {
                out.put_u32(*frame_number);
                out.put_u8(*slice_index);
                let n = missing.len().min(MAX_NACK_SHARDS);
                out.put_u16(n as u16);
                for &i in &missing[..n] {
                    out.put_u16(i);
                }
            }
            ControlFrame::SliceTiming {
                frame_number,
                slice_count,
                first_out_us,
                last_out_us,
            } => {
                out.put_u32(*frame_number);
                out.put_u8(*slice_count);
                out.put_u32(*first_out_us);
                out.put_u32(*last_out_us);
            }
            ControlFrame::Latency(l) => {
                out.put_u16(l.frames);
                out.put_u16(l.interval_ms);
                for (_, sp) in l.spreads() {
                    out.put_u32(sp.p50_us);
                    out.put_u32(sp.p95_us);
                }
            }
        }
        let len = (out.len() - start - 3) as u16;
        out[start + 1..start + 3].copy_from_slice(&len.to_be_bytes());
    }

    pub fn type_code(&self) -> u8 {
        use frame_type::*;
        match self {
            ControlFrame::KeyframeRequest { .. } => KEYFRAME_REQUEST,
            ControlFrame::Feedback(_) => FEEDBACK,
            ControlFrame::Ping { .. } => PING,
            ControlFrame::Pong { .. } => PONG,
            ControlFrame::Input { .. } => INPUT,
            ControlFrame::InputAck { .. } => INPUT_ACK,
            ControlFrame::FrameTiming(_) => FRAME_TIMING,
            ControlFrame::Bye { .. } => BYE,
            ControlFrame::Accept(_) => ACCEPT,
            ControlFrame::Reject(_) => REJECT,
            ControlFrame::State(_) => STATE,
            ControlFrame::StateAck(_) => STATE_ACK,
            ControlFrame::PathChallenge { .. } => PATH_CHALLENGE,
            ControlFrame::PathResponse { .. } => PATH_RESPONSE,
            ControlFrame::ShardNack { .. } => SHARD_NACK,
            ControlFrame::ClockId { .. } => CLOCK_ID,
            ControlFrame::Role { .. } => ROLE,
            ControlFrame::RoleAck { .. } => ROLE_ACK,
            ControlFrame::FramePose { .. } => FRAME_POSE,
            ControlFrame::LinkAddress { .. } => LINK_ADDRESS,
            ControlFrame::LinkDeclined { .. } => LINK_DECLINED,
            ControlFrame::SliceNack { .. } => SLICE_NACK,
            ControlFrame::SliceTiming { .. } => SLICE_TIMING,
            ControlFrame::Latency(_) => LATENCY,
            ControlFrame::HostEncoder(_) => HOST_ENCODER,
        }
    }

    /// The encoded length including the 3-byte frame header.
    pub fn encoded_len(&self) -> usize {
        3 + match self {
            ControlFrame::KeyframeRequest { .. } => 4,
            ControlFrame::Feedback(_) => 32,
            ControlFrame::Ping { .. } => 12,
            ControlFrame::Pong { .. } => 28,
            ControlFrame::Input { events, .. } => {
                6 + events.iter().map(|e| e.encoded_len()).sum::<usize>()
            }
            ControlFrame::InputAck { .. } => 4,
            ControlFrame::FrameTiming(_) => 44,
            ControlFrame::Bye { .. } => 1,
            ControlFrame::Accept(p) => p.encoded_len(),
            ControlFrame::Reject(r) => 3 + str_prefix_len(&r.message, MAX_MESSAGE_LEN),
            ControlFrame::State(p) => p.encoded_len(),
            ControlFrame::StateAck(a) => a.encoded_len(),
            ControlFrame::PathChallenge { .. } | ControlFrame::PathResponse { .. } => 8,
            ControlFrame::ShardNack { missing, .. } => 6 + 2 * missing.len().min(MAX_NACK_SHARDS),
            ControlFrame::ClockId { .. } => 16,
            ControlFrame::Role { .. } => 4,
            ControlFrame::RoleAck { .. } => 2,
            ControlFrame::FramePose { .. } => 4 + PoseSample::LEN,
            ControlFrame::LinkAddress { .. } => 8,
            ControlFrame::LinkDeclined { .. } => 1,
            ControlFrame::SliceNack { missing, .. } => 7 + 2 * missing.len().min(MAX_NACK_SHARDS),
            ControlFrame::SliceTiming { .. } => 13,
            ControlFrame::Latency(_) => LatencyReport::LEN,
            ControlFrame::HostEncoder(e) => e.encoded_len(),
        }
    }

    /// Parses one frame body of a known type; None for an unknown type (skipped).
    fn parse_body(ty: u8, body: &[u8]) -> Result<Option<ControlFrame>, WireError> {
        use frame_type::*;
        let mut r = Reader::new(body, "control frame");
        let f = match ty {
            KEYFRAME_REQUEST => ControlFrame::KeyframeRequest {
                lost_frame: r.u32()?,
            },
            FEEDBACK => ControlFrame::Feedback(Feedback {
                frames_complete: r.u32()?,
                frames_lost: r.u32()?,
                frames_late: r.u32()?,
                datagrams_received: r.u32()?,
                packets_lost: r.u32()?,
                jitter_us: r.u32()?,
                srtt_us: r.u32()?,
                decode_us: r.u32()?,
            }),
            PING => ControlFrame::Ping {
                id: r.u32()?,
                sent_us: r.u64()?,
            },
            PONG => ControlFrame::Pong {
                id: r.u32()?,
                ping_sent_us: r.u64()?,
                received_us: r.u64()?,
                sent_us: r.u64()?,
            },
            INPUT => {
                let first_seq = r.u32()?;
                let n = r.u16()? as usize;
                // Each event is at least 3 bytes: bound the allocation by what is there.
                if n > r.remaining() / 3 {
                    return Err(bad("input.count", "more events than bytes"));
                }
                let mut events = Vec::with_capacity(n);
                for _ in 0..n {
                    events.push(InputEvent::parse(&mut r)?);
                }
                ControlFrame::Input { first_seq, events }
            }
            INPUT_ACK => ControlFrame::InputAck {
                next_expected: r.u32()?,
            },
            FRAME_TIMING => ControlFrame::FrameTiming(FrameTiming {
                frame_number: r.u32()?,
                capture_dur_us: r.u32()?,
                convert_us: r.u32()?,
                encode_us: r.u32()?,
                send_us: r.u32()?,
                send_done_us: r.u64()?,
                frame_bytes: r.u32()?,
                captured: r.u32()?,
                encoded: r.u32()?,
                dropped: r.u32()?,
            }),
            BYE => ControlFrame::Bye {
                reason: ByeReason::from_u8(r.u8()?),
            },
            ACCEPT => ControlFrame::Accept(SessionParams::parse(r.rest())?),
            REJECT => ControlFrame::Reject(Reject::parse(r.rest())?),
            STATE => ControlFrame::State(StatePacket::parse(&mut r)?),
            STATE_ACK => ControlFrame::StateAck(StateAck::parse(&mut r)?),
            PATH_CHALLENGE => ControlFrame::PathChallenge { token: r.u64()? },
            PATH_RESPONSE => ControlFrame::PathResponse { token: r.u64()? },
            SHARD_NACK => {
                let frame_number = r.u32()?;
                let n = r.u16()? as usize;
                if n > MAX_NACK_SHARDS || n > r.remaining() / 2 {
                    return Err(bad(
                        "shard_nack.count",
                        "more indices than allowed or present",
                    ));
                }
                let mut missing = Vec::with_capacity(n);
                for _ in 0..n {
                    missing.push(r.u16()?);
                }
                ControlFrame::ShardNack {
                    frame_number,
                    missing,
                }
            }
            HOST_ENCODER => ControlFrame::HostEncoder(HostEncoder::parse(&mut r)?),
            CLOCK_ID => {
                let mut id = [0u8; 16];
                id.copy_from_slice(r.bytes(16)?);
                ControlFrame::ClockId { id }
            }
            ROLE => ControlFrame::Role {
                role: ClientRole::from_u8(r.u8()?),
                flags: r.u8()?,
                version: r.u16()?,
            },
            ROLE_ACK => ControlFrame::RoleAck { version: r.u16()? },
            FRAME_POSE => ControlFrame::FramePose {
                frame_number: r.u32()?,
                sample: PoseSample::parse(&mut r)?,
            },
            LINK_ADDRESS => {
                let ethertype = r.u16()?;
                let mut mac = [0u8; 6];
                mac.copy_from_slice(r.bytes(6)?);
                ControlFrame::LinkAddress { ethertype, mac }
            }
            LINK_DECLINED => ControlFrame::LinkDeclined {
                reason: LinkDeclineReason::from_u8(r.u8()?),
            },
            SLICE_NACK => {
                let frame_number = r.u32()?;
                let slice_index = r.u8()?;
                let n = r.u16()? as usize;
                if n > MAX_NACK_SHARDS || n > r.remaining() / 2 {
                    return Err(bad(
                        "slice_nack.count",
                        "more indices than allowed or present",
                    ));
                }
                let mut missing = Vec::with_capacity(n);
                for _ in 0..n {
                    missing.push(r.u16()?);
                }
                ControlFrame::SliceNack {
                    frame_number,
                    slice_index,
                    missing,
                }
            }
            SLICE_TIMING => ControlFrame::SliceTiming {
                frame_number: r.u32()?,
                slice_count: r.u8()?,
                first_out_us: r.u32()?,
                last_out_us: r.u32()?,
            },
            LATENCY => {
                let (frames, interval_ms) = (r.u16()?, r.u16()?);
                let mut sp = [Spread::NONE; 5];
                for s in &mut sp {
                    *s = Spread {
                        p50_us: r.u32()?,
                        p95_us: r.u32()?,
                    };
                }
                ControlFrame::Latency(LatencyReport {
                    frames,
                    interval_ms,
                    glass_to_glass: sp[0],
                    network: sp[1],
                    reassemble: sp[2],
                    decode: sp[3],
                    present: sp[4],
                })
            }
            _ => return Ok(None),
        };
        if !r.is_empty() {
            return Err(bad("control frame", "longer than its type's fields"));
        }
        Ok(Some(f))
    }
}

/// Parses the body of a Control datagram into its frames (unknown frame types are skipped).
pub fn parse_control(body: &[u8]) -> Result<Vec<ControlFrame>, WireError> {
    let mut r = Reader::new(body, "control datagram");
    let mut frames = Vec::new();
    while !r.is_empty() {
        let ty = r.u8()?;
        let len = r.u16()? as usize;
        let b = r.bytes(len)?;
        if let Some(f) = ControlFrame::parse_body(ty, b)? {
            frames.push(f);
        }
    }
    Ok(frames)
}

/// Writes a Control datagram's cleartext: header then frames (protect it before sending).
pub fn encode_control(header: &Header, frames: &[ControlFrame], out: &mut Vec<u8>) {
    header.write(out);
    for f in frames {
        f.encode(out);
    }
}

/// A whole datagram, parsed as far as is possible without keys.
#[derive(Clone, Debug, PartialEq)]
pub enum Datagram<'a> {
    Hello(Hello<'a>),
    Reject(Reject),
    /// Noise message 2.
    HelloReply(&'a [u8]),
    /// Noise message 3.
    HelloFinish(&'a [u8]),
    /// A Retry token.
    Retry(&'a [u8]),
    /// A protected shard: AEAD output (or body ‖ tag when authenticated only).
    Shard(&'a [u8]),
    /// A protected control datagram: AEAD output.
    Control(&'a [u8]),
    /// A protected audio packet: AEAD output.
    Audio(&'a [u8]),
}

/// Parses a whole datagram (protected bodies are returned as they are, to be opened).
pub fn parse(data: &[u8]) -> Result<(Header, Datagram<'_>), WireError> {
    if data.first() == Some(&VERSION_NEGOTIATION) {
        let vn = VersionNegotiation::parse(data)?;
        return Err(WireError::VersionNegotiation(vn.versions, vn.message));
    }
    let (h, body) = Header::parse(data)?;
    let d = match h.packet_type {
        PacketType::Hello => Datagram::Hello(Hello::parse(body)?),
        PacketType::Reject => Datagram::Reject(Reject::parse(body)?),
        PacketType::HelloReply => Datagram::HelloReply(body),
        PacketType::HelloFinish => Datagram::HelloFinish(body),
        PacketType::Retry => {
            if body.is_empty() || body.len() > MAX_TOKEN_LEN {
                return Err(bad("retry.token", "must be 1..=64 bytes"));
            }
            Datagram::Retry(body)
        }
        PacketType::Shard => Datagram::Shard(body),
        PacketType::Control => Datagram::Control(body),
        PacketType::Audio => Datagram::Audio(body),
    };
    Ok((h, d))
}

/// Hex for test vectors and logs.
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The framing test vectors of docs/PROTOCOL.md (cleartext before protection).
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
        // A keep-alive: an empty Control datagram (its cleartext header; 16 tag bytes follow).
        let mut out = Vec::new();
        encode_control(
            &Header::new(PacketType::Control, 0x0102030405060708, 9),
            &[],
            &mut out,
        );
        assert_eq!(h(&out), v::KEEPALIVE_HEADER);

        // A keyframe request for frame 300 plus an input ack (plaintext of a Control datagram).
        let mut out = Vec::new();
        encode_control(
            &Header::new(PacketType::Control, 0xAABBCCDDEEFF0011, 0x2A),
            &[
                ControlFrame::KeyframeRequest { lost_frame: 300 },
                ControlFrame::InputAck { next_expected: 7 },
            ],
            &mut out,
        );
        assert_eq!(h(&out), v::CONTROL_PLAINTEXT);
        let (hd, d) = parse(&out).unwrap();
        assert_eq!(hd.packet_number, 0x2A);
        assert_eq!(d, Datagram::Control(&out[HEADER_LEN..]));
        assert_eq!(
            parse_control(&out[HEADER_LEN..]).unwrap(),
            vec![
                ControlFrame::KeyframeRequest { lost_frame: 300 },
                ControlFrame::InputAck { next_expected: 7 }
            ]
        );

        // A shard: frame 5, keyframe, data shard 1 of 2, no parity, 1000-byte shards,
        // 1500-byte frame, captured at 1 000 000 µs; payload 500 bytes of 0xEE.
        let sh = ShardHeader {
            frame_number: 5,
            flags: shard_flags::KEYFRAME,
            slice_index: 0,
            slice_count: 1,
            shard_index: 1,
            data_count: 2,
            parity_count: 0,
            shard_len: 1000,
            frame_bytes: 1500,
            capture_us: 1_000_000,
        };
        let mut out = Vec::new();
        Header::new(PacketType::Shard, 7, 3).write(&mut out);
        sh.write(&mut out);
        assert_eq!(h(&out), v::SHARD_HEADER);
        out.extend(std::iter::repeat_n(0xEE, 500));
        let (sh2, payload) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
        assert_eq!((sh2, payload), (sh, &[0xEE; 500][..]));
        // A frame in slices: parity shard 0 of slice 2 of 4 of P-frame 9 (3 data shards of
        // 1000 bytes, a 2500-byte slice), captured at 2 000 000 µs.
        let sh = ShardHeader {
            frame_number: 9,
            flags: shard_flags::PARITY,
            slice_index: 2,
            slice_count: 4,
            shard_index: 3,
            data_count: 3,
            parity_count: 1,
            shard_len: 1000,
            frame_bytes: 2500,
            capture_us: 2_000_000,
        };
        let mut out = Vec::new();
        Header::new(PacketType::Shard, 7, 4).write(&mut out);
        sh.write(&mut out);
        assert_eq!(h(&out), v::SLICE_SHARD_HEADER);
        out.extend(std::iter::repeat_n(0xEE, 1000));
        let (sh2, _) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
        assert_eq!(sh2, sh);
        // An index beyond the count is refused.
        let mut out = Vec::new();
        sh.write(&mut out);
        out[5] = 0x34;
        out.extend(std::iter::repeat_n(0xEE, 1000));
        assert!(ShardHeader::parse(&out).is_err(), "slice 4 of 4");
        out[5] = 0xF0;
        assert_eq!(ShardHeader::parse(&out).map(|(h, _)| h.slice_count), Ok(16));

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

        // A text input event and a state packet.
        let mut out = Vec::new();
        ControlFrame::Input {
            first_seq: 3,
            events: vec![InputEvent::Text(TextChunk::new("hé").unwrap())],
        }
        .encode(&mut out);
        assert_eq!(h(&out), v::TEXT_INPUT_FRAME);
        let mut out = Vec::new();
        ControlFrame::State(StatePacket {
            pid: 9,
            ank: 8,
            entries: vec![(
                crate::state::keys::POINTER,
                crate::state::StateValue::Pointer { x: 640, y: -1 },
            )],
        })
        .encode(&mut out);
        assert_eq!(h(&out), v::STATE_FRAME);
        let mut out = Vec::new();
        let challenge = ControlFrame::PathChallenge {
            token: 0x0102_0304_0506_0708,
        };
        challenge.encode(&mut out);
        assert_eq!(h(&out), v::PATH_CHALLENGE_FRAME);
        assert_eq!(out.len(), challenge.encoded_len());
        assert_eq!(
            ControlFrame::parse_body(out[0], &out[3..]),
            Ok(Some(challenge))
        );
        let mut out = Vec::new();
        let nack = ControlFrame::ShardNack {
            frame_number: 300,
            missing: vec![2, 5],
        };
        nack.encode(&mut out);
        assert_eq!(h(&out), v::SHARD_NACK_FRAME);
        assert_eq!(out.len(), nack.encoded_len());
        assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(nack)));
        // A count beyond what the body holds is an error, not an allocation.
        assert!(ControlFrame::parse_body(0x0F, &[0, 0, 1, 44, 0xff, 0xff, 0, 1]).is_err());
        // Several clients: a Role (viewer, input granted, version 7) and its RoleAck.
        for (frame, hex) in [
            (
                ControlFrame::Role {
                    role: ClientRole::Viewer,
                    flags: role_flags::INPUT_GRANTED,
                    version: 7,
                },
                v::ROLE_FRAME,
            ),
            (ControlFrame::RoleAck { version: 7 }, v::ROLE_ACK_FRAME),
        ] {
            let mut out = Vec::new();
            frame.encode(&mut out);
            assert_eq!(h(&out), hex);
            assert_eq!(out.len(), frame.encoded_len());
            assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(frame)));
        }
        // A role a newer host might add reads as viewer (it never grants input by accident).
        assert_eq!(ClientRole::from_u8(9), ClientRole::Viewer);
        assert_eq!(ByeReason::from_u8(4), ByeReason::TooSlow);
        let mut out = Vec::new();
        let nack = ControlFrame::SliceNack {
            frame_number: 300,
            slice_index: 3,
            missing: vec![2, 5],
        };
        nack.encode(&mut out);
        assert_eq!(h(&out), v::SLICE_NACK_FRAME);
        assert_eq!(out.len(), nack.encoded_len());
        assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(nack)));
        assert!(ControlFrame::parse_body(0x1E, &[0, 0, 1, 44, 3, 0xff, 0xff, 0, 1]).is_err());
        let mut out = Vec::new();
        let timing = ControlFrame::SliceTiming {
            frame_number: 300,
            slice_count: 4,
            first_out_us: 2_500,
            last_out_us: 4_000,
        };
        timing.encode(&mut out);
        assert_eq!(h(&out), v::SLICE_TIMING_FRAME);
        assert_eq!(out.len(), timing.encoded_len());
        assert_eq!(
            ControlFrame::parse_body(out[0], &out[3..]),
            Ok(Some(timing))
        );
        let mut out = Vec::new();
        let spread = |a, b| Spread {
            p50_us: a,
            p95_us: b,
        };
        let latency = ControlFrame::Latency(LatencyReport {
            frames: 30,
            interval_ms: 500,
            glass_to_glass: spread(24_000, 31_000),
            network: spread(1_500, 2_500),
            reassemble: spread(200, 400),
            decode: spread(1_400, 2_100),
            present: Spread::NONE,
        });
        latency.encode(&mut out);
        assert_eq!(h(&out), v::LATENCY_FRAME);
        assert_eq!(out.len(), latency.encoded_len());
        assert_eq!(
            ControlFrame::parse_body(out[0], &out[3..]),
            Ok(Some(latency))
        );
        // An older peer's view: a frame type it does not know is skipped by its length.
        assert_eq!(ControlFrame::parse_body(0x7f, &out[3..]), Ok(None));
        assert!(ControlFrame::parse_body(0x20, &out[3..40]).is_err());
        let mut out = Vec::new();
        let link = ControlFrame::LinkAddress {
            ethertype: 0x88B5,
            mac: [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01],
        };
        link.encode(&mut out);
        assert_eq!(h(&out), v::LINK_ADDRESS_FRAME);
        assert_eq!(out.len(), link.encoded_len());
        assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(link)));
        let mut out = Vec::new();
        let declined = ControlFrame::LinkDeclined {
            reason: LinkDeclineReason::HostUsesUdp,
        };
        declined.encode(&mut out);
        assert_eq!(h(&out), v::LINK_DECLINED_FRAME);
        assert_eq!(out.len(), declined.encoded_len());
        assert_eq!(
            ControlFrame::parse_body(out[0], &out[3..]),
            Ok(Some(declined))
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
        // A MAC address cut short is an error.
        assert!(ControlFrame::parse_body(0x1C, &[0x88, 0xb5, 2, 0, 0x5e]).is_err());
    }

    /// Every vector in crate::vectors appears in docs/PROTOCOL.md.
    #[test]
    fn peer_text_is_escaped_wherever_it_is_decoded() {
        // The screen-clearing, window-retitling text a fake host sent (issue 15, item 6), a
        // forged log line, and a right-to-left override.
        let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}ok\nhost: paired\u{202e}dcba\u{9b}";
        let clean = sanitize_peer_text(evil);
        assert!(
            !clean.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{clean:?}"
        );
        assert_eq!(
            clean,
            "\\u{1b}[2J\\u{1b}]0;pwned\\u{7}ok\\u{a}host: paired\\u{202e}dcba\\u{9b}"
        );
        // Idempotent, and ordinary text (accents, emoji, CJK) is kept as it is.
        assert_eq!(sanitize_peer_text(&clean), clean);
        assert_eq!(sanitize_peer_text("Zoë's 🎮 ゲーム"), "Zoë's 🎮 ゲーム");
        // Parsed text stays within its field (cut between escapes), so it re-encodes as is.
        let long = "\u{1b}".repeat(MAX_MESSAGE_LEN);
        let cut = sanitize_within(&long, MAX_MESSAGE_LEN);
        assert_eq!(cut.len(), MAX_MESSAGE_LEN / 6 * 6);
        assert!(cut.ends_with("\\u{1b}"));
        // Every parser of peer text applies it: a Reject (cleartext or protected) …
        let rej = Reject {
            reason: RejectReason::Other,
            message: evil.into(),
        };
        let mut out = Vec::new();
        rej.encode(&Header::new(PacketType::Reject, 1, 0), &mut out);
        let Ok((_, Datagram::Reject(r))) = parse(&out) else {
            panic!("a Reject")
        };
        assert_eq!(r.message, clean);
        let mut out = Vec::new();
        encode_control(
            &Header::new(PacketType::Control, 1, 0),
            &[ControlFrame::Reject(rej)],
            &mut out,
        );
        let frames = parse_control(&out[HEADER_LEN..]).unwrap();
        assert!(matches!(&frames[..], [ControlFrame::Reject(r)] if r.message == clean));
        // … a Version Negotiation (directly and as the parse error) …
        let mut out = Vec::new();
        VersionNegotiation {
            versions: vec![7],
            message: evil.into(),
        }
        .encode(&mut out);
        assert_eq!(VersionNegotiation::parse(&out).unwrap().message, clean);
        assert_eq!(
            parse(&out).unwrap_err(),
            WireError::VersionNegotiation(vec![7], clean.clone())
        );
        // … and a client's name in message 3.
        let mut out = Vec::new();
        crate::handshake::ClientInfoPayload {
            max_datagram: 1200,
            capabilities: 1,
            name: "\u{1b}[31mred".into(),
            codecs: Vec::new(),
            wants: None,
            view: None,
        }
        .encode(&mut out);
        assert_eq!(
            crate::handshake::ClientInfoPayload::parse(&out)
                .unwrap()
                .name,
            "\\u{1b}[31mred"
        );
    }

    #[test]
    fn frame_pose_vector() {
        let sample = PoseSample {
            sample_us: 1_000_000,
            pose: crate::pose::Pose {
                orientation: [0.0, 0.0, 0.0, 1.0],
                position: [0.0, 1.5, -0.25],
            },
        };
        let f = ControlFrame::FramePose {
            frame_number: 300,
            sample,
        };
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(out.len(), f.encoded_len());
        assert_eq!(Hex(&out).to_string(), crate::vectors::FRAME_POSE_FRAME);
        assert_eq!(parse_control(&out).unwrap(), vec![f]);
        let mut entry = Vec::new();
        crate::state::StateValue::PoseSample(sample).encode_entry(1, &mut entry);
        assert_eq!(Hex(&entry).to_string(), crate::vectors::POSE_SAMPLE_ENTRY);
        // A pose that is not a rotation is refused.
        let mut bad_q = out.clone();
        bad_q[15..19].copy_from_slice(&0f32.to_be_bytes());
        bad_q[27..31].copy_from_slice(&0f32.to_be_bytes());
        assert!(parse_control(&bad_q).is_err());
    }

    #[test]
    fn the_document_carries_the_vectors() {
        let doc: String = include_str!("../../../docs/PROTOCOL.md")
            .chars()
            .filter(|c| c.is_ascii_hexdigit() || *c == '\n')
            .collect::<String>()
            .to_lowercase();
        let doc_nows: String = doc.chars().filter(|c| *c != '\n').collect();
        for (name, v) in crate::vectors::ALL {
            let v: String = v.chars().filter(|c| c.is_ascii_hexdigit()).collect();
            assert!(
                doc_nows.contains(&v.to_lowercase()),
                "docs/PROTOCOL.md lacks test vector {name}"
            );
        }
    }

    #[test]
    fn rejects_malformed() {
        assert!(matches!(parse(&[1, 0x20]), Err(WireError::TooShort { .. })));
        let mut d = vec![2u8, 0x20];
        d.extend([0; 16]);
        assert_eq!(parse(&d).unwrap_err(), WireError::Version(2));
        d[0] = 1;
        d[1] = 0x77;
        assert_eq!(parse(&d).unwrap_err(), WireError::UnknownType(0x77));
        // A control frame whose length runs past the end.
        assert!(parse_control(&[1, 0, 9, 0]).is_err());
        // Text that is not UTF-8, or empty.
        assert!(parse_control(&[5, 0, 9, 0, 0, 0, 0, 0, 1, 6, 1, 0xff]).is_err());
        assert!(parse_control(&[5, 0, 8, 0, 0, 0, 0, 0, 1, 6, 0]).is_err());
    }

    #[test]
    fn unknown_control_frames_are_skipped() {
        let mut out = vec![0x7f, 0, 2, 0xaa, 0xbb];
        ControlFrame::InputAck { next_expected: 3 }.encode(&mut out);
        assert_eq!(
            parse_control(&out).unwrap(),
            vec![ControlFrame::InputAck { next_expected: 3 }]
        );
    }

    #[test]
    fn text_splits_at_character_boundaries() {
        let s = "ab€".repeat(20);
        let chunks: Vec<TextChunk> = TextChunk::split(&s).collect();
        assert!(chunks.iter().all(|c| c.as_str().len() <= TextChunk::MAX));
        assert_eq!(chunks.iter().map(|c| c.as_str()).collect::<String>(), s);
    }

    fn arb_event() -> impl Strategy<Value = InputEvent> {
        prop_oneof![
            (any::<u32>(), any::<bool>()).prop_map(|(code, down)| InputEvent::Key { code, down }),
            (any::<i32>(), any::<i32>(), any::<i32>(), any::<i32>())
                .prop_map(|(x, y, dx, dy)| InputEvent::PointerMotion { x, y, dx, dy }),
            (any::<u8>(), any::<bool>())
                .prop_map(|(button, down)| InputEvent::MouseButton { button, down }),
            (any::<i32>(), any::<i32>()).prop_map(|(dx, dy)| InputEvent::Wheel { dx, dy }),
            (-360f32..360.0, -90f32..90.0, -180f32..180.0)
                .prop_map(|(yaw, pitch, roll)| InputEvent::HeadPose { yaw, pitch, roll }),
            "[a-z€é ]{1,10}".prop_map(|t| InputEvent::Text(TextChunk::new(&t).unwrap())),
        ]
    }

    fn arb_frame() -> impl Strategy<Value = ControlFrame> {
        prop_oneof![
            any::<u32>().prop_map(|lost_frame| ControlFrame::KeyframeRequest { lost_frame }),
            any::<[u32; 8]>().prop_map(|v| ControlFrame::Feedback(Feedback {
                frames_complete: v[0],
                frames_lost: v[1],
                frames_late: v[2],
                datagrams_received: v[3],
                packets_lost: v[4],
                jitter_us: v[5],
                srtt_us: v[6],
                decode_us: v[7],
            })),
            (any::<u32>(), any::<u64>())
                .prop_map(|(id, sent_us)| ControlFrame::Ping { id, sent_us }),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(id, a, b, c)| {
                ControlFrame::Pong {
                    id,
                    ping_sent_us: a,
                    received_us: b,
                    sent_us: c,
                }
            }),
            (any::<u32>(), proptest::collection::vec(arb_event(), 0..20))
                .prop_map(|(first_seq, events)| ControlFrame::Input { first_seq, events }),
            any::<u32>().prop_map(|next_expected| ControlFrame::InputAck { next_expected }),
            (any::<[u32; 9]>(), any::<u64>()).prop_map(|(v, t)| ControlFrame::FrameTiming(
                FrameTiming {
                    frame_number: v[0],
                    capture_dur_us: v[1],
                    convert_us: v[2],
                    encode_us: v[3],
                    send_us: v[4],
                    send_done_us: t,
                    frame_bytes: v[5],
                    captured: v[6],
                    encoded: v[7],
                    dropped: v[8],
                }
            )),
            any::<u8>().prop_map(|r| ControlFrame::Bye {
                reason: ByeReason::from_u8(r)
            }),
            any::<[u8; 16]>().prop_map(|id| ControlFrame::ClockId { id }),
            (any::<bool>(), any::<u8>(), any::<u16>()).prop_map(|(c, flags, version)| {
                ControlFrame::Role {
                    role: if c {
                        ClientRole::Controller
                    } else {
                        ClientRole::Viewer
                    },
                    flags,
                    version,
                }
            }),
            any::<u16>().prop_map(|version| ControlFrame::RoleAck { version }),
            (any::<u32>(), any::<u64>(), 0usize..3, -100f32..100.0).prop_map(|(f, t, q, x)| {
                ControlFrame::FramePose {
                    frame_number: f,
                    sample: PoseSample {
                        sample_us: t,
                        pose: crate::pose::Pose {
                            orientation: [
                                [0.0, 0.0, 0.0, 1.0],
                                [1.0, 0.0, 0.0, 0.0],
                                [0.0, 0.0, -1.0, 0.0],
                            ][q],
                            position: [x, 1.5, -x],
                        },
                    },
                }
            }),
            (any::<u16>(), any::<[u8; 6]>())
                .prop_map(|(ethertype, mac)| ControlFrame::LinkAddress { ethertype, mac }),
            prop_oneof![Just(1u8), Just(2), Just(3), Just(255)].prop_map(|r| {
                ControlFrame::LinkDeclined {
                    reason: LinkDeclineReason::from_u8(r),
                }
            }),
            (
                any::<u32>(),
                any::<u8>(),
                proptest::collection::vec(any::<u16>(), 0..40)
            )
                .prop_map(|(frame_number, slice_index, missing)| {
                    ControlFrame::SliceNack {
                        frame_number,
                        slice_index,
                        missing,
                    }
                }),
            (any::<u32>(), any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(f, c, a, b)| {
                ControlFrame::SliceTiming {
                    frame_number: f,
                    slice_count: c,
                    first_out_us: a,
                    last_out_us: b,
                }
            }),
            (any::<[u16; 2]>(), any::<[u32; 10]>()).prop_map(|(n, v)| {
                let sp = |i: usize| Spread {
                    p50_us: v[2 * i],
                    p95_us: v[2 * i + 1],
                };
                ControlFrame::Latency(LatencyReport {
                    frames: n[0],
                    interval_ms: n[1],
                    glass_to_glass: sp(0),
                    network: sp(1),
                    reassemble: sp(2),
                    decode: sp(3),
                    present: sp(4),
                })
            }),
            ("[a-z0-9_]{0,12}", "[a-z]{0,10}", "[a-z0-9]{0,8}").prop_map(|(a, b, c)| {
                ControlFrame::HostEncoder(HostEncoder {
                    encoder: a,
                    preset: b,
                    conversion: c,
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn control_round_trips(cid in any::<u64>(), pn in any::<u64>(), frames in proptest::collection::vec(arb_frame(), 0..8)) {
            let mut out = Vec::new();
            encode_control(&Header::new(PacketType::Control, cid, pn), &frames, &mut out);
            prop_assert_eq!(out.len(), HEADER_LEN + frames.iter().map(|f| f.encoded_len()).sum::<usize>());
            let (h, _) = parse(&out).unwrap();
            prop_assert_eq!(h.connection_id, cid);
            prop_assert_eq!(h.packet_number, pn);
            prop_assert_eq!(parse_control(&out[HEADER_LEN..]).unwrap(), frames);
        }

        #[test]
        fn shard_round_trips(frame_number in any::<u32>(), key in any::<bool>(), data_count in 1u16..300, parity_count in 0u16..60,
                             shard_len in 1u16..1400, last_fill in 1u16..1400, idx in any::<u16>(), capture_us in any::<u64>(),
                             slice_count in 1u8..=MAX_SLICES, slice_seed in any::<u8>()) {
            // Parity: at most data_count shards, and an even shard_len.
            let parity_count = parity_count.min(data_count);
            let shard_len = if parity_count > 0 { (shard_len & !1).max(2) } else { shard_len };
            let last = last_fill.min(shard_len);
            let frame_bytes = (data_count as u32 - 1) * shard_len as u32 + last as u32;
            let shard_index = idx % (data_count + parity_count);
            let parity = shard_index >= data_count;
            let h = ShardHeader {
                frame_number,
                flags: (key as u8) | if parity { shard_flags::PARITY } else { 0 },
                slice_index: slice_seed % slice_count,
                slice_count,
                shard_index,
                data_count,
                parity_count,
                shard_len,
                frame_bytes,
                capture_us,
            };
            let payload = vec![7u8; h.expected_len()];
            let mut out = Vec::new();
            Header::new(PacketType::Shard, 1, 2).write(&mut out);
            h.write(&mut out);
            out.extend_from_slice(&payload);
            let (h2, p2) = ShardHeader::parse(&out[HEADER_LEN..]).unwrap();
            prop_assert_eq!((h2, p2), (h, &payload[..]));
        }

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

        #[test]
        fn parser_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = parse(&data);
            let _ = parse_control(&data);
            let _ = ShardHeader::parse(&data);
        }

        #[test]
        fn parser_never_panics_on_valid_header(ty in prop_oneof![Just(1u8), Just(3), Just(4), Just(5), Just(6), Just(0x10), Just(0x20)],
                                               body in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut d = vec![VERSION, ty];
            d.extend([0u8; 16]);
            d.extend(body);
            let _ = parse(&d);
        }
    }
}
