//! The hex test vectors of docs/PROTOCOL.md, shared by the unit tests (which check that the
//! code produces them) and by a test that checks the document contains each of them.

/// An empty Control datagram's header: connection id 0x0102030405060708, packet number 9.
pub const KEEPALIVE_HEADER: &str = "012001020304050607080000000000000009";
/// Plaintext of a Control datagram: KeyframeRequest(300) + InputAck(7), connection id
/// 0xaabbccddeeff0011, packet number 42.
pub const CONTROL_PLAINTEXT: &str =
    "0120aabbccddeeff0011000000000000002a0100040000012c06000400000007";
/// A shard's datagram header and shard header (connection id 7, packet number 3): frame 5
/// sent whole (slice 0 of 1).
pub const SHARD_HEADER: &str =
    "01100000000000000007000000000000000300000005010000010002000003e8000005dc00000000000f4240";
/// A parity shard of slice 2 of 4 (connection id 7, packet number 4).
pub const SLICE_SHARD_HEADER: &str =
    "01100000000000000007000000000000000400000009023200030003000103e8000009c400000000001e8480";
/// An Accept control frame.
pub const ACCEPT_FRAME: &str = "090015050002d0003c010000271004b0000007d000007530";
/// An Accept control frame with a refresh period (HEVC, 30 frames).
pub const ACCEPT_FRAME_REFRESH: &str = "090017050002d0003c030000271004b0000007d000007530001e";
/// Message 3's plaintext payload with a codec list (max_datagram 1200, capabilities h264 and
/// hevc, name "pi", codecs hevc then h264).
pub const CLIENT_INFO_CODECS: &str = "04b00000000500027069020301";
/// The client info's tail with no codec list, no wants and the view 100°, 63.5 mm:
/// count 0 ‖ zero wants ‖ fov 10000 ‖ ipd 6350.
pub const CLIENT_INFO_VIEW_TAIL: &str = "0000000000000000000000271018ce";
/// A Reject control frame (pending approval, "ask").
pub const REJECT_FRAME: &str = "0a000606000361736b";
/// The first 22 bytes of a Hello (connection id 0x0102030405060708, mode 0, no token, 34-byte
/// message).
pub const HELLO_PREFIX: &str = "01010102030405060708000000000000000000000022";
/// A Version Negotiation datagram.
pub const VERSION_NEGOTIATION: &str = "00010100027631";
/// An Input frame carrying the text "hé" as event 3.
pub const TEXT_INPUT_FRAME: &str = "05000b000000030001060368c3a9";
/// A PathChallenge frame with token 0x0102030405060708.
pub const PATH_CHALLENGE_FRAME: &str = "0d00080102030405060708";
/// A ShardNack frame: frame 300, data shards 2 and 5.
pub const SHARD_NACK_FRAME: &str = "0f000a0000012c000200020005";
/// A Role frame: viewer, input granted, version 7 (several clients per host, §7.4).
pub const ROLE_FRAME: &str = "18000401010007";
/// Its RoleAck.
pub const ROLE_ACK_FRAME: &str = "1900020007";
/// A SliceNack frame: frame 300, slice 3, data shards 2 and 5.
pub const SLICE_NACK_FRAME: &str = "1e000b0000012c03000200020005";
/// A SliceTiming frame: frame 300, 4 slices, first out 2.5 ms and last out 4 ms after capture.
pub const SLICE_TIMING_FRAME: &str = "1f000d0000012c04000009c400000fa0";
/// A Latency frame: 30 frames in 500 ms; glass-to-glass p50 24 ms, p95 31 ms; network 1.5 /
/// 2.5 ms, reassembly 0.2 / 0.4 ms, decode 1.4 / 2.1 ms, present: no sample.
pub const LATENCY_FRAME: &str = "20002c001e01f400005dc000007918000005dc000009c4000000c8000001900000057800000834ffffffffffffffff";
/// A LinkAddress frame: EtherType 0x88B5, MAC 02:00:5e:10:00:01.
pub const LINK_ADDRESS_FRAME: &str = "1c000888b502005e100001";
/// A LinkDeclined frame: the host runs over UDP (reason 1).
pub const LINK_DECLINED_FRAME: &str = "1d000101";
/// A HostEncoder frame: `libx264`, `ultrafast`, `libyuv`.
pub const HOST_ENCODER_FRAME: &str =
    "21001c00076c6962783236340009756c7472616661737400066c6962797576";
/// A State frame: pid 9, ank 8, pointer (640, −1).
pub const STATE_FRAME: &str = "0b001400000009000000080100000100000280ffffffff";
/// A protected keep-alive (empty Control), ChaCha20-Poly1305, secret 0x11 × 32, connection
/// id 5, packet number 1, key generation 0.
pub const PROTECTED_KEEPALIVE_CHACHA: &str =
    "012000000000000000050000000000000001e4dc910855f2a6cb864f8443d03dc826";
/// The same with AES-256-GCM.
pub const PROTECTED_KEEPALIVE_AES: &str =
    "0120000000000000000500000000000000014469cb0b000a66e904680fdb1beac7aa";
/// The fingerprint of the all-zero public key.
pub const FINGERPRINT_ZERO_KEY: &str = "6X5Z-I2RL-MBVM-DIJB-IJMY-42JF";
/// A StateAck body: ack(31) nak(33) ack(36), end 38.
pub const STATE_ACK_EXAMPLE: &str = "0000002601030000001f0000002100000024";
/// A FramePose frame: frame 300 rendered for the pose sampled at 1 000 000 µs (client clock),
/// identity orientation, position (0, 1.5, −0.25) m.
pub const FRAME_POSE_FRAME: &str =
    "1400280000012c00000000000f42400000000000000000000000003f800000000000003fc00000be800000";
/// A state entry: key 1 (head pose), a pose sample (the same pose and time).
pub const POSE_SAMPLE_ENTRY: &str =
    "00010700000000000f42400000000000000000000000003f800000000000003fc00000be800000";

/// The handshake of docs/PROTOCOL.md §3.7: Noise message 1 (offer: both suites, AES preferred).
pub const HANDSHAKE_MSG1: &str =
    "5dfedd3b6bd47f6fa28ee15d969d5bb0ea53774d488bdaf9df1c6e0124b3ef220302";
/// Message 2 (session id 0x0102030405060708, AES-256-GCM, key_update_log2 22, encrypted video).
pub const HANDSHAKE_MSG2: &str = "ac01b2209e86354fb853237b5de0f4fab13c7fcbf433a61c019369617fecf10ba008df889bb35e8223335723afaf9154defd8da5df240cc3592090c2fb4518e08a5ab08cdc1286d69f27c12d99735f57613703368b4998f606b32a025283e03755bd8fa65f8e556e8ff136";
/// Message 3 (max_datagram 1200, capabilities 1, name "pi").
pub const HANDSHAKE_MSG3: &str = "b7cdf8c991735a27cbc64fb59293bea96330d41179052f565b352ffad9b79b87a151f6a4711dd4b45bb1858bce84398a45a86d2b162e88e50d93eb23a18e46255cf5ac8f6f12bc157132";
/// The split keys: client → host, host → client.
pub const HANDSHAKE_K1: &str = "73596986e620ea5c8c67e985bdf902cbf3e90ae1990df1267c7a82249e407584";
pub const HANDSHAKE_K2: &str = "ce869dc46445191413f8cc28f469280c09849f3d8d38190c6415ace483a92434";
/// The host's protected Accept (1920x1080 @ 60, H.264, 15 000 kbit/s, 1200 B, 2 s, 30 s).
pub const HANDSHAKE_ACCEPT: &str = "012001020304050607080000000000000000485d35dc263e672fb6d840a1a87b9c54453f78e507f065ec421d04d3735db4bf42b105a9b5f7ae4a";

/// Every vector, by name.
pub const ALL: &[(&str, &str)] = &[
    ("KEEPALIVE_HEADER", KEEPALIVE_HEADER),
    ("CONTROL_PLAINTEXT", CONTROL_PLAINTEXT),
    ("SHARD_HEADER", SHARD_HEADER),
    ("SLICE_SHARD_HEADER", SLICE_SHARD_HEADER),
    ("ACCEPT_FRAME", ACCEPT_FRAME),
    ("ACCEPT_FRAME_REFRESH", ACCEPT_FRAME_REFRESH),
    ("CLIENT_INFO_CODECS", CLIENT_INFO_CODECS),
    ("CLIENT_INFO_VIEW_TAIL", CLIENT_INFO_VIEW_TAIL),
    ("REJECT_FRAME", REJECT_FRAME),
    ("HELLO_PREFIX", HELLO_PREFIX),
    ("VERSION_NEGOTIATION", VERSION_NEGOTIATION),
    ("TEXT_INPUT_FRAME", TEXT_INPUT_FRAME),
    ("STATE_FRAME", STATE_FRAME),
    ("PATH_CHALLENGE_FRAME", PATH_CHALLENGE_FRAME),
    ("SHARD_NACK_FRAME", SHARD_NACK_FRAME),
    ("ROLE_FRAME", ROLE_FRAME),
    ("ROLE_ACK_FRAME", ROLE_ACK_FRAME),
    ("SLICE_NACK_FRAME", SLICE_NACK_FRAME),
    ("SLICE_TIMING_FRAME", SLICE_TIMING_FRAME),
    ("LATENCY_FRAME", LATENCY_FRAME),
    ("LINK_ADDRESS_FRAME", LINK_ADDRESS_FRAME),
    ("LINK_DECLINED_FRAME", LINK_DECLINED_FRAME),
    ("HOST_ENCODER_FRAME", HOST_ENCODER_FRAME),
    ("PROTECTED_KEEPALIVE_CHACHA", PROTECTED_KEEPALIVE_CHACHA),
    ("PROTECTED_KEEPALIVE_AES", PROTECTED_KEEPALIVE_AES),
    ("STATE_ACK_EXAMPLE", STATE_ACK_EXAMPLE),
    ("FRAME_POSE_FRAME", FRAME_POSE_FRAME),
    ("POSE_SAMPLE_ENTRY", POSE_SAMPLE_ENTRY),
    ("HANDSHAKE_MSG1", HANDSHAKE_MSG1),
    ("HANDSHAKE_MSG2", HANDSHAKE_MSG2),
    ("HANDSHAKE_MSG3", HANDSHAKE_MSG3),
    ("HANDSHAKE_K1", HANDSHAKE_K1),
    ("HANDSHAKE_K2", HANDSHAKE_K2),
    ("HANDSHAKE_ACCEPT", HANDSHAKE_ACCEPT),
];
