//! Control frames (docs/PROTOCOL.md §7): their type codes, [`ControlFrame`] with its encoder and
//! parser, the Control datagram's [`parse_control`] and [`encode_control`], and the small enums
//! and flags the frames carry.

use super::{
    bad, str_prefix_len, Feedback, FrameTiming, Header, HostEncoder, InputEvent, LatencyReport,
    Put, Reader, Reject, SessionParams, Spread, WireError, MAX_MESSAGE_LEN,
};
use crate::pose::PoseSample;
use crate::state::{StateAck, StatePacket};

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
    pub(super) fn parse_body(ty: u8, body: &[u8]) -> Result<Option<ControlFrame>, WireError> {
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

#[cfg(test)]
mod tests {
    use crate::pose::PoseSample;
    use crate::state::StatePacket;
    use crate::wire::*;
    use proptest::prelude::*;

    /// The control frames' test vectors of docs/PROTOCOL.md: a Control datagram's plaintext,
    /// and the State, PathChallenge, ShardNack, Role, RoleAck, SliceNack,
    /// SliceTiming, LinkAddress and LinkDeclined frames.
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
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

        // A state packet.
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
        // A MAC address cut short is an error.
        assert!(ControlFrame::parse_body(0x1C, &[0x88, 0xb5, 2, 0, 0x5e]).is_err());
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

    /// The frames docs/PROTOCOL.md gives no vector for, written out (§7: `type u8 ‖ length u16
    /// ‖` the fields in order): Ping, Pong, Bye, ClockId and PathResponse.
    #[test]
    fn frame_bytes() {
        let frames: [(ControlFrame, &[u8]); 5] = [
            (
                ControlFrame::Ping {
                    id: 7,
                    sent_us: 1_000_000,
                },
                &[
                    0x03, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f,
                    0x42, 0x40,
                ],
            ),
            (
                ControlFrame::Pong {
                    id: 7,
                    ping_sent_us: 1_000_000,
                    received_us: 2_000_000,
                    sent_us: 2_000_050,
                },
                &[
                    0x04, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f,
                    0x42, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1e, 0x84, 0x80, 0x00, 0x00, 0x00,
                    0x00, 0x00, 0x1e, 0x84, 0xb2,
                ],
            ),
            (
                ControlFrame::Bye {
                    reason: ByeReason::TooSlow,
                },
                &[0x08, 0x00, 0x01, 0x04],
            ),
            (
                ControlFrame::ClockId {
                    id: [
                        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
                        0x0c, 0x0d, 0x0e, 0x0f,
                    ],
                },
                &[
                    0x10, 0x00, 0x10, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                    0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
                ],
            ),
            (
                ControlFrame::PathResponse {
                    token: 0x0102_0304_0506_0708,
                },
                &[
                    0x0e, 0x00, 0x08, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                ],
            ),
        ];
        for (frame, bytes) in frames {
            let mut out = Vec::new();
            frame.encode(&mut out);
            assert_eq!(out, bytes, "{frame:?}");
            assert_eq!(out.len(), frame.encoded_len());
            assert_eq!(ControlFrame::parse_body(out[0], &out[3..]), Ok(Some(frame)));
        }
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
    }
}
