//! What the client session reports: its events ([`ClientEvent`]), its counters
//! ([`ClientStats`], [`ClientPathStats`]) and where its datagrams go ([`Route`]).

use crate::assembler::{AssemblerStats, CompleteFrame, LossCause, SliceId};
use crate::paths::MAX_PATHS;
use crate::pose::PoseSample;
use crate::state::StateSenderStats;
use crate::wire::{ClientRole, FrameTiming, RejectReason, SessionParams};
use crate::GoneReason;

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientEvent {
    Connected(SessionParams),
    Rejected {
        reason: RejectReason,
        message: String,
    },
    /// The host did not answer within the connect timeout.
    ConnectTimeout,
    HostGone(GoneReason),
    /// A complete, decodable frame, in order.
    Frame(CompleteFrame),
    /// One slice of a frame sent in slices, in decode order (slice 0 first, the last slice
    /// last; docs/PROTOCOL.md §6.3).
    Slice(CompleteFrame),
    /// A slice given up, in decode order: the rest of its frame is still delivered (its
    /// region concealed by the decoder); a keyframe has been requested.
    SliceLost {
        frame_number: u32,
        slice: SliceId,
        cause: LossCause,
    },
    /// When a sliced frame's first and last slice left the host's encoder, µs after capture.
    SliceTiming {
        frame_number: u32,
        slice_count: u8,
        first_out_us: u32,
        last_out_us: u32,
    },
    /// A frame lost in the network; a keyframe has been requested.
    FrameLost {
        frame_number: u32,
        cause: LossCause,
    },
    /// A complete frame that cannot be decoded (an earlier one was lost).
    FrameSkipped {
        frame_number: u32,
    },
    FrameTiming(FrameTiming),
    /// Every input event below `next_expected` reached the host.
    InputAcked {
        next_expected: u32,
    },
    /// A round-trip time sample from a ping, microseconds.
    Rtt(u64),
    /// An audio packet (unordered: the jitter buffer orders them by `seq`).
    Audio(crate::audio::AudioPacket),
    /// The host told this client its role (a host serving several clients): at the start and
    /// on every change.
    Role {
        role: ClientRole,
        /// A viewer whose input the host applies.
        input_granted: bool,
        /// A viewer paused to keyframes only (its link cannot carry the stream).
        paused: bool,
    },
    /// The pose frame `frame_number` was rendered for (once per frame, whichever copy came
    /// first; possibly after the frame itself).
    FramePose {
        frame_number: u32,
        sample: PoseSample,
    },
    /// The host takes the raw layer-2 transport: its MAC address and EtherType (answer to
    /// [`ClientSession::send_link_address`]; docs/PROTOCOL.md §7.3).
    ///
    /// [`ClientSession::send_link_address`]: super::ClientSession::send_link_address
    LinkAddress {
        ethertype: u16,
        mac: [u8; 6],
    },
    /// The host does not take the raw layer-2 transport: stay on UDP.
    LinkDeclined(crate::wire::LinkDeclineReason),
}

/// Counters of the client session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub bytes_received: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    /// Gaps in the host's packet numbers.
    pub packets_lost: u64,
    pub duplicate_datagrams: u64,
    pub malformed_datagrams: u64,
    pub unknown_connection: u64,
    /// Protected datagrams whose tag did not verify.
    pub auth_failures: u64,
    /// Retry tokens received (the host was under a flood of handshakes).
    pub retries_received: u64,
    /// Version Negotiations that excluded this client's version while it waited for the
    /// host's reply (unauthenticated: reported only if the connect timeout comes first).
    pub version_negotiations_received: u64,
    pub key_updates: u64,
    pub frames_complete: u64,
    pub frames_lost: u64,
    pub frames_skipped: u64,
    /// Frames with shards that arrived after the frame was delivered or given up.
    pub frames_late: u64,
    pub keyframe_requests_sent: u64,
    pub decode_failures: u64,
    pub inputs_sent: u64,
    pub inputs_retransmitted: u64,
    pub inputs_refused: u64,
    pub assembler: AssemblerStats,
    pub state: StateSenderStats,
    /// Host → client state packets received.
    pub state_packets_received: u64,
    /// Retransmission: ShardNacks (and SliceNacks) sent, and frames (slices) given up after
    /// them.
    pub shard_nacks_sent: u64,
    pub frames_abandoned: u64,
    pub slices_abandoned: u64,
    /// Per path (multipath; index as given to [`ClientSession::handle_datagram_on`]).
    ///
    /// [`ClientSession::handle_datagram_on`]: super::ClientSession::handle_datagram_on
    pub paths: [ClientPathStats; MAX_PATHS],
    /// PathChallenges answered.
    pub path_responses_sent: u64,
}

impl ClientStats {
    /// Adds an earlier session's counters to these (a client that reconnected reports every
    /// session's frames, as its decoder counts them). The assembler's and the state channel's
    /// counters stay this session's.
    pub fn absorb(&mut self, earlier: &ClientStats) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += earlier.$f; )* };
        }
        add!(
            bytes_received,
            datagrams_received,
            bytes_sent,
            datagrams_sent,
            packets_lost,
            duplicate_datagrams,
            malformed_datagrams,
            unknown_connection,
            auth_failures,
            retries_received,
            version_negotiations_received,
            key_updates,
            frames_complete,
            frames_lost,
            frames_skipped,
            frames_late,
            keyframe_requests_sent,
            decode_failures,
            inputs_sent,
            inputs_retransmitted,
            inputs_refused,
            state_packets_received,
            shard_nacks_sent,
            frames_abandoned,
            slices_abandoned,
            path_responses_sent
        );
        for (p, e) in self.paths.iter_mut().zip(earlier.paths.iter()) {
            p.datagrams_received += e.datagrams_received;
            p.bytes_received += e.bytes_received;
            p.first_copies += e.first_copies;
            p.duplicates += e.duplicates;
        }
    }
}

/// What arrived on one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientPathStats {
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// Datagrams whose first copy came on this path.
    pub first_copies: u64,
    /// Copies that another path (or an earlier one on this path) had already delivered.
    pub duplicates: u64,
}

/// Where the runtime sends a datagram from [`ClientSession::poll_transmit_routed`].
///
/// [`ClientSession::poll_transmit_routed`]: super::ClientSession::poll_transmit_routed
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The handshake: the host's primary address (path 0).
    Primary,
    /// Every path (the client's datagrams are small: it sends them on all paths, so input and
    /// acknowledgements take the fastest path whichever it is).
    All,
    /// One path only (a PathResponse answers on the path its challenge came from).
    Path(u8),
}
