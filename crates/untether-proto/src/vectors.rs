//! The hex test vectors of docs/PROTOCOL.md, shared by the unit tests (which check that the
//! code produces them) and by a test that checks the document contains each of them.

/// An empty Control datagram's header: connection id 0x0102030405060708, packet number 9.
pub const KEEPALIVE_HEADER: &str = "012001020304050607080000000000000009";
/// Plaintext of a Control datagram: KeyframeRequest(300) + InputAck(7), connection id
/// 0xaabbccddeeff0011, packet number 42.
pub const CONTROL_PLAINTEXT: &str =
    "0120aabbccddeeff0011000000000000002a0100040000012c06000400000007";
/// A shard's datagram header and shard header (connection id 7, packet number 3).
pub const SHARD_HEADER: &str =
    "01100000000000000007000000000000000300000005010000010002000003e8000005dc00000000000f4240";
/// An Accept control frame.
pub const ACCEPT_FRAME: &str = "090015050002d0003c010000271004b0000007d000007530";
/// A Reject control frame (pending approval, "ask").
pub const REJECT_FRAME: &str = "0a000606000361736b";
/// The first 21 bytes of a Hello (connection id 0x0102030405060708, mode 0, 34-byte message).
pub const HELLO_PREFIX: &str = "010101020304050607080000000000000000000022";
/// A Version Negotiation datagram.
pub const VERSION_NEGOTIATION: &str = "00010100027631";
/// An Input frame carrying the text "hé" as event 3.
pub const TEXT_INPUT_FRAME: &str = "05000b000000030001060368c3a9";
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

/// Every vector, by name.
pub const ALL: &[(&str, &str)] = &[
    ("KEEPALIVE_HEADER", KEEPALIVE_HEADER),
    ("CONTROL_PLAINTEXT", CONTROL_PLAINTEXT),
    ("SHARD_HEADER", SHARD_HEADER),
    ("ACCEPT_FRAME", ACCEPT_FRAME),
    ("REJECT_FRAME", REJECT_FRAME),
    ("HELLO_PREFIX", HELLO_PREFIX),
    ("VERSION_NEGOTIATION", VERSION_NEGOTIATION),
    ("TEXT_INPUT_FRAME", TEXT_INPUT_FRAME),
    ("STATE_FRAME", STATE_FRAME),
    ("PROTECTED_KEEPALIVE_CHACHA", PROTECTED_KEEPALIVE_CHACHA),
    ("PROTECTED_KEEPALIVE_AES", PROTECTED_KEEPALIVE_AES),
    ("STATE_ACK_EXAMPLE", STATE_ACK_EXAMPLE),
];
