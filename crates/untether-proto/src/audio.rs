//! Audio datagrams (type 0x30), host → client: one Opus packet of 10 ms per datagram, with a
//! copy of the previous packet as redundancy (RFC 2198 in spirit), so one lost datagram costs
//! nothing and a burst of two is concealed by the decoder.
//!
//! Body, after the 18-byte header (big-endian):
//! `seq u32 ‖ pts_us u64 ‖ samples u16 ‖ len u16 ‖ opus[len] ‖ prev_len u16 ‖ prev_opus[prev_len]`.
//! `seq` counts packets from 0 per session, `pts_us` is the host clock at the packet's first
//! sample, `samples` the samples per channel it holds (480 at 48 kHz). `prev_len` = 0: no
//! redundant copy; otherwise it is packet `seq − 1`, whose pts is `pts_us − samples·10⁶/48000`.

use crate::wire::{Put, Reader, WireError};
use crate::Micros;

/// The sample rate of the audio stream.
pub const AUDIO_RATE: u32 = 48_000;
/// The largest Opus packet a datagram carries (two of these fit any path MTU ≥ 1200).
pub const MAX_OPUS_PACKET: usize = 560;

/// One audio packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioPacket {
    pub seq: u32,
    /// Host clock at the first sample.
    pub pts_us: Micros,
    /// Samples per channel.
    pub samples: u16,
    pub opus: Vec<u8>,
    /// Packet `seq − 1`, or empty.
    pub prev_opus: Vec<u8>,
}

impl AudioPacket {
    pub fn encoded_len(&self) -> usize {
        18 + self.opus.len() + self.prev_opus.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.seq);
        out.put_u64(self.pts_us);
        out.put_u16(self.samples);
        out.put_u16(self.opus.len() as u16);
        out.extend_from_slice(&self.opus);
        out.put_u16(self.prev_opus.len() as u16);
        out.extend_from_slice(&self.prev_opus);
    }

    pub fn parse(body: &[u8]) -> Result<AudioPacket, WireError> {
        let mut r = Reader::new(body, "audio");
        let seq = r.u32()?;
        let pts_us = r.u64()?;
        let samples = r.u16()?;
        let len = r.u16()? as usize;
        if len == 0 || len > MAX_OPUS_PACKET {
            return Err(WireError::Field {
                field: "audio.len",
                reason: "empty or longer than an Opus packet may be",
            });
        }
        let opus = r.bytes(len)?.to_vec();
        let prev_len = r.u16()? as usize;
        if prev_len > MAX_OPUS_PACKET {
            return Err(WireError::Field {
                field: "audio.prev_len",
                reason: "longer than an Opus packet may be",
            });
        }
        let prev_opus = r.bytes(prev_len)?.to_vec();
        if !r.is_empty() {
            return Err(WireError::Field {
                field: "audio",
                reason: "bytes after the packet",
            });
        }
        Ok(AudioPacket {
            seq,
            pts_us,
            samples,
            opus,
            prev_opus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let p = AudioPacket {
            seq: 7,
            pts_us: 123_456_789,
            samples: 480,
            opus: vec![1, 2, 3],
            prev_opus: vec![9; 40],
        };
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(out.len(), p.encoded_len());
        assert_eq!(AudioPacket::parse(&out).unwrap(), p);
        for n in 0..out.len() {
            assert!(AudioPacket::parse(&out[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = out.clone();
        longer.push(0);
        assert!(AudioPacket::parse(&longer).is_err());
        // An empty primary packet is refused.
        let mut empty = Vec::new();
        AudioPacket { opus: vec![], ..p }.encode(&mut empty);
        assert!(AudioPacket::parse(&empty).is_err());
    }
}
