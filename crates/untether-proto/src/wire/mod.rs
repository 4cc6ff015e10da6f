//! The bytes on the wire: the datagram header, every message, and their encoders and parsers.
//!
//! Every integer is big-endian (network order). docs/PROTOCOL.md is the normative description;
//! the test vectors there are checked by the `tests` of each file below.
//!
//! ```text
//! datagram = header (18 bytes) ‖ body
//! header   = version u8 ‖ type u8 ‖ connection_id u64 ‖ packet_number u64
//! ```
//! Parsers never panic and never allocate before the header has been validated; they return a
//! [`WireError`] that names what was wrong.
//!
//! This file holds what every message shares: the constants, [`WireError`], the [`Header`] and
//! its [`PacketType`], the [`Reader`] and [`Put`] helpers, and [`parse`] of a whole datagram. The
//! messages are in one file per family, all re-exported here:
//! - `handshake`: the Hello, Version Negotiation, [`Codec`] and [`caps`], [`SessionParams`],
//!   [`Reject`], [`HostEncoder`];
//! - `shard`: [`ShardHeader`] and [`shard_flags`];
//! - `input`: [`InputEvent`] and [`TextChunk`];
//! - `control`: [`ControlFrame`], [`parse_control`], [`encode_control`] and the enums and flags
//!   the frames carry;
//! - `feedback`: [`FrameTiming`], [`Feedback`], [`LatencyReport`] and its [`Spread`].

use std::fmt;

mod control;
mod feedback;
mod handshake;
mod input;
mod shard;

pub use control::{
    encode_control, frame_type, parse_control, role_flags, ByeReason, ClientRole, ControlFrame,
    LinkDeclineReason, MAX_FRAME_BODY, MAX_NACK_SHARDS,
};
pub use feedback::{Feedback, FrameTiming, LatencyReport, Spread};
pub use handshake::{
    caps, choose_codec, encode_handshake, Codec, Hello, HostEncoder, NoCommonCodec, Reject,
    RejectReason, SessionParams, UnknownCodec, VersionNegotiation, MAX_TOKEN_LEN,
};
pub use input::{InputEvent, TextChunk};
pub use shard::{shard_flags, ShardHeader};

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
    /// A u16 length followed by that many UTF-8 bytes.
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

/// The bytes of `s` that [`Put::put_str`] writes within `max`: cut at a character boundary.
fn str_prefix_len(s: &str, max: usize) -> usize {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
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

    /// The datagram header's test vector of docs/PROTOCOL.md §2.
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
    }

    /// A Retry datagram written out (docs/PROTOCOL.md §2, §3.6): the header (type 0x06,
    /// connection id 7, packet number 1), then the token as it is.
    #[test]
    fn retry_bytes() {
        let token = [0xab; 4];
        let mut out = Vec::new();
        Header::new(PacketType::Retry, 7, 1).write(&mut out);
        out.extend_from_slice(&token);
        assert_eq!(
            out,
            [
                0x01, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x01, 0xab, 0xab, 0xab, 0xab,
            ]
        );
        let (h, d) = parse(&out).unwrap();
        assert_eq!(h, Header::new(PacketType::Retry, 7, 1));
        assert_eq!(d, Datagram::Retry(&token));
        // No token, or one longer than 64 bytes, is refused.
        assert!(parse(&out[..HEADER_LEN]).is_err());
        let mut long = out[..HEADER_LEN].to_vec();
        long.extend([0xab; MAX_TOKEN_LEN + 1]);
        assert!(parse(&long).is_err());
    }

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

    /// Every vector in crate::vectors appears in docs/PROTOCOL.md.
    #[test]
    fn the_document_carries_the_vectors() {
        let doc: String = include_str!("../../../../docs/PROTOCOL.md")
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

    proptest! {
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
