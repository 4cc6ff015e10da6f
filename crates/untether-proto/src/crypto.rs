//! Packet protection after the handshake: AEAD with the packet number as nonce, the cleartext
//! header as associated data, the tag appended; implicit key updates every `2^key_update_log2`
//! packets (forward secrecy and the AEAD's usage limits); an authenticated-only mode for video.
//!
//! ```text
//! protected datagram = header (18 bytes, AD) ‖ AEAD(body) ‖ tag (16)
//! authenticated-only = header ‖ body ‖ tag           (tag = AEAD(plaintext = ∅, AD = header ‖ body))
//! nonce              = iv XOR (0^32 ‖ packet_number as u64, big-endian)
//! generation g       = packet_number >> key_update_log2
//! secret_0           = the Noise split key of the direction
//! secret_{g+1}       = HKDF-Expand(secret_g, "untether v1 ku", 32)
//! key_g / iv_g       = HKDF-Expand(secret_g, "untether v1 key", 32 / "untether v1 iv", 12)
//! ```
//! HKDF is HKDF-SHA256 with the secret used directly as the pseudo-random key (as in TLS 1.3's
//! HKDF-Expand-Label). A packet's key generation follows from its (authenticated) packet number,
//! so no key-phase bit is needed and both sides rotate at the same packet without signalling.
//! The receiver keeps the previous generation's key for packets reordered across a rotation and
//! derives up to [`MAX_GENERATIONS_AHEAD`] future generations on demand (cached, so forged
//! packets cost one AEAD check each, never a key derivation chain).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use ring::hkdf::{KeyType, Prk, HKDF_SHA256};

/// The AEAD tag appended to every protected datagram.
pub const TAG_LEN: usize = 16;
/// How many key generations beyond the current one a receiver will derive to open a packet.
pub const MAX_GENERATIONS_AHEAD: u64 = 4;
/// The default key-update interval: 2^22 packets per key (AES-GCM's confidentiality limit is
/// 2^23 packets per key, RFC 9001 §6.6), about 45 min of a 15 Mbit/s stream.
pub const DEFAULT_KEY_UPDATE_LOG2: u8 = 22;
/// The smallest interval a peer accepts (2^6 = 64 packets: for tests).
pub const MIN_KEY_UPDATE_LOG2: u8 = 6;
/// The largest interval a peer accepts.
pub const MAX_KEY_UPDATE_LOG2: u8 = 22;
/// Packet numbers stop here: a sender never uses a packet number at or above 2^62 (it would
/// end the session long before; at 10^6 packets/s this is 146 000 years).
pub const MAX_PACKET_NUMBER: u64 = 1 << 62;

/// An AEAD cipher suite (negotiated in the handshake).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Suite {
    /// ChaCha20-Poly1305 (RFC 8439): fast everywhere, constant time without AES instructions.
    ChaCha20Poly1305 = 1,
    /// AES-256-GCM: fastest where the CPU has AES and carry-less multiply instructions.
    Aes256Gcm = 2,
}

impl Suite {
    /// The suite with this wire id.
    pub fn from_u8(v: u8) -> Option<Suite> {
        match v {
            1 => Some(Suite::ChaCha20Poly1305),
            2 => Some(Suite::Aes256Gcm),
            _ => None,
        }
    }
    /// This suite's bit in a suite mask.
    pub fn bit(self) -> u8 {
        1 << (self as u8 - 1)
    }
    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Suite::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Suite::Aes256Gcm => &AES_256_GCM,
        }
    }
}

/// Every suite this implementation supports, as a mask.
pub const ALL_SUITES: u8 = 0b11;

/// Why a datagram could not be protected or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The tag did not verify: tampered, forged, or keyed differently.
    #[error("authentication failed")]
    Authentication,
    /// The packet's key generation is too old or too far ahead.
    #[error("no key for this packet's generation")]
    KeyUnavailable,
    /// Shorter than header + tag.
    #[error("datagram too short to carry a tag")]
    TooShort,
    /// The sender ran out of packet numbers (never in practice).
    #[error("packet numbers exhausted")]
    Exhausted,
}

struct Len(usize);
impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand(secret: &[u8; 32], label: &[u8], out: &mut [u8]) {
    let prk = Prk::new_less_safe(HKDF_SHA256, secret);
    // Expanding at most 255 × 32 bytes cannot fail; the lengths here are 12 and 32.
    if let Ok(okm) = prk.expand(&[label], Len(out.len())) {
        let _ = okm.fill(out);
    }
}

/// The key material of one generation.
struct GenKeys {
    generation: u64,
    key: LessSafeKey,
    iv: [u8; 12],
}

impl GenKeys {
    fn derive(suite: Suite, secret: &[u8; 32], generation: u64) -> GenKeys {
        let mut k = [0u8; 32];
        expand(secret, b"untether v1 key", &mut k);
        let mut iv = [0u8; 12];
        expand(secret, b"untether v1 iv", &mut iv);
        // Both algorithms take 32-byte keys, so this cannot fail.
        let unbound = UnboundKey::new(suite.algorithm(), &k)
            .unwrap_or_else(|_| unreachable!("32-byte key for a 256-bit AEAD"));
        k.fill(0);
        GenKeys {
            generation,
            key: LessSafeKey::new(unbound),
            iv,
        }
    }

    fn nonce(&self, pn: u64) -> Nonce {
        let mut n = self.iv;
        for (b, p) in n[4..].iter_mut().zip(pn.to_be_bytes()) {
            *b ^= p;
        }
        Nonce::assume_unique_for_key(n)
    }
}

fn next_secret(secret: &[u8; 32]) -> [u8; 32] {
    let mut s = [0u8; 32];
    expand(secret, b"untether v1 ku", &mut s);
    s
}

/// The sending half of one direction.
pub struct Sealer {
    suite: Suite,
    log2: u8,
    secret: [u8; 32],
    keys: GenKeys,
    /// Key updates done.
    pub key_updates: u64,
}

impl Sealer {
    /// From the direction's initial secret.
    pub fn new(suite: Suite, secret: [u8; 32], key_update_log2: u8) -> Sealer {
        Sealer {
            suite,
            log2: key_update_log2.clamp(MIN_KEY_UPDATE_LOG2, MAX_KEY_UPDATE_LOG2),
            keys: GenKeys::derive(suite, &secret, 0),
            secret,
            key_updates: 0,
        }
    }

    pub fn suite(&self) -> Suite {
        self.suite
    }

    fn keys_for(&mut self, pn: u64) -> Result<&GenKeys, CryptoError> {
        if pn >= MAX_PACKET_NUMBER {
            return Err(CryptoError::Exhausted);
        }
        let g = pn >> self.log2;
        // Packet numbers only grow, so generations only move forward; the old key is dropped.
        while self.keys.generation < g {
            self.secret = next_secret(&self.secret);
            self.keys = GenKeys::derive(self.suite, &self.secret, self.keys.generation + 1);
            self.key_updates += 1;
        }
        Ok(&self.keys)
    }

    /// Protects `out[header_len..]` in place and appends the tag. `out[..header_len]` is the
    /// cleartext header (associated data) and `pn` the packet number written in it. With
    /// `encrypt = false` the body stays readable and the tag authenticates header and body.
    pub fn seal(
        &mut self,
        out: &mut Vec<u8>,
        header_len: usize,
        pn: u64,
        encrypt: bool,
    ) -> Result<(), CryptoError> {
        let keys = self.keys_for(pn)?;
        let nonce = keys.nonce(pn);
        let tag = if encrypt {
            let split = header_len.min(out.len());
            let (ad, body) = out.split_at_mut(split);
            keys.key
                .seal_in_place_separate_tag(nonce, Aad::from(&*ad), body)
                .map_err(|_| CryptoError::Exhausted)?
        } else {
            keys.key
                .seal_in_place_separate_tag(nonce, Aad::from(&out[..]), &mut [])
                .map_err(|_| CryptoError::Exhausted)?
        };
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }
}

/// The receiving half of one direction.
pub struct Opener {
    suite: Suite,
    log2: u8,
    /// The newest generation a packet authenticated under, and its secret.
    current: GenKeys,
    current_secret: [u8; 32],
    /// The generation before it, for packets reordered across a key update.
    previous: Option<GenKeys>,
    /// Derived future generations (bounded by [`MAX_GENERATIONS_AHEAD`]).
    ahead: Vec<(GenKeys, [u8; 32])>,
    /// Key updates done.
    pub key_updates: u64,
}

impl Opener {
    /// From the direction's initial secret.
    pub fn new(suite: Suite, secret: [u8; 32], key_update_log2: u8) -> Opener {
        Opener {
            suite,
            log2: key_update_log2.clamp(MIN_KEY_UPDATE_LOG2, MAX_KEY_UPDATE_LOG2),
            current: GenKeys::derive(suite, &secret, 0),
            current_secret: secret,
            previous: None,
            ahead: Vec::new(),
            key_updates: 0,
        }
    }

    /// Verifies (and with `encrypted`, decrypts in place) a datagram whose first `header_len`
    /// bytes are its cleartext header. Returns the body's length: the plaintext is
    /// `buf[header_len..header_len + len]`. Nothing is allocated (after the first packets of a
    /// new generation).
    pub fn open(
        &mut self,
        buf: &mut [u8],
        header_len: usize,
        pn: u64,
        encrypted: bool,
    ) -> Result<usize, CryptoError> {
        if buf.len() < header_len + TAG_LEN || pn >= MAX_PACKET_NUMBER {
            return Err(CryptoError::TooShort);
        }
        let g = pn >> self.log2;
        let cur = self.current.generation;
        let keys: &GenKeys = if g == cur {
            &self.current
        } else if g + 1 == cur {
            self.previous.as_ref().ok_or(CryptoError::KeyUnavailable)?
        } else if g > cur && g - cur <= MAX_GENERATIONS_AHEAD {
            while self.ahead.len() < (g - cur) as usize {
                let (prev_secret, prev_gen) = match self.ahead.last() {
                    Some((k, s)) => (*s, k.generation),
                    None => (self.current_secret, cur),
                };
                let s = next_secret(&prev_secret);
                self.ahead
                    .push((GenKeys::derive(self.suite, &s, prev_gen + 1), s));
            }
            &self.ahead[(g - cur - 1) as usize].0
        } else {
            return Err(CryptoError::KeyUnavailable);
        };
        let nonce = keys.nonce(pn);
        let len = if encrypted {
            let (ad, body) = buf.split_at_mut(header_len);
            keys.key
                .open_in_place(nonce, Aad::from(&*ad), body)
                .map_err(|_| CryptoError::Authentication)?
                .len()
        } else {
            let split = buf.len() - TAG_LEN;
            let mut tag = [0u8; TAG_LEN];
            tag.copy_from_slice(&buf[split..]);
            keys.key
                .open_in_place(nonce, Aad::from(&buf[..split]), &mut tag)
                .map_err(|_| CryptoError::Authentication)?;
            split - header_len
        };
        if g > cur {
            // Authenticated under a newer generation: move forward and forget old keys.
            let n = (g - cur) as usize;
            let mut taken: Vec<(GenKeys, [u8; 32])> = self.ahead.drain(..n).collect();
            let (keys, secret) = taken.pop().unwrap_or_else(|| unreachable!("n ≥ 1 derived"));
            let before = std::mem::replace(&mut self.current, keys);
            self.previous = Some(taken.pop().map_or(before, |(k, _)| k));
            self.current_secret = secret;
            self.key_updates += g - cur;
        }
        Ok(len)
    }
}

/// Both directions of a session's packet protection.
pub struct Protection {
    pub sealer: Sealer,
    pub opener: Opener,
    /// Video shards are authenticated only (not encrypted).
    pub video_auth_only: bool,
}

impl Protection {
    /// `send` and `recv` are the two Noise split keys as this side uses them.
    pub fn new(
        suite: Suite,
        send: [u8; 32],
        recv: [u8; 32],
        key_update_log2: u8,
        video_auth_only: bool,
    ) -> Protection {
        Protection {
            sealer: Sealer::new(suite, send, key_update_log2),
            opener: Opener::new(suite, recv, key_update_log2),
            video_auth_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(suite: Suite, log2: u8) -> (Sealer, Opener) {
        (
            Sealer::new(suite, [7; 32], log2),
            Opener::new(suite, [7; 32], log2),
        )
    }

    fn datagram(pn: u64, body: &[u8]) -> Vec<u8> {
        let mut v = vec![1, 0x20];
        v.extend_from_slice(&5u64.to_be_bytes());
        v.extend_from_slice(&pn.to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn seal_open_round_trip_both_suites_both_modes() {
        for suite in [Suite::ChaCha20Poly1305, Suite::Aes256Gcm] {
            for encrypt in [true, false] {
                let (mut s, mut o) = pair(suite, 22);
                let mut d = datagram(3, b"hello, host");
                s.seal(&mut d, 18, 3, encrypt).unwrap();
                assert_eq!(d.len(), 18 + 11 + TAG_LEN);
                assert_eq!(&d[18..29] == b"hello, host", !encrypt);
                let n = o.open(&mut d, 18, 3, encrypt).unwrap();
                assert_eq!(&d[18..18 + n], b"hello, host");
            }
        }
    }

    #[test]
    fn tampering_anywhere_fails() {
        for encrypt in [true, false] {
            let (mut s, _) = pair(Suite::ChaCha20Poly1305, 22);
            let mut d = datagram(9, b"0123456789");
            s.seal(&mut d, 18, 9, encrypt).unwrap();
            for i in 0..d.len() {
                let mut t = d.clone();
                t[i] ^= 0x01;
                let (_, mut o) = pair(Suite::ChaCha20Poly1305, 22);
                assert!(o.open(&mut t, 18, 9, encrypt).is_err(), "byte {i}");
            }
            // The wrong packet number (nonce) fails too.
            let (_, mut o) = pair(Suite::ChaCha20Poly1305, 22);
            let mut t = d.clone();
            assert!(o.open(&mut t, 18, 10, encrypt).is_err());
        }
    }

    #[test]
    fn key_updates_follow_packet_numbers_and_tolerate_reordering() {
        let (mut s, mut o) = pair(Suite::Aes256Gcm, 6);
        let mut sealed = Vec::new();
        for pn in 0..400u64 {
            let mut d = datagram(pn, &pn.to_be_bytes());
            s.seal(&mut d, 18, pn, true).unwrap();
            sealed.push(d);
        }
        assert_eq!(s.key_updates, 399 >> 6);
        // Deliver with a little reordering across generation boundaries.
        for chunk in sealed.chunks_mut(5) {
            chunk.reverse();
        }
        for d in sealed.iter_mut() {
            let pn = u64::from_be_bytes(d[10..18].try_into().unwrap());
            let n = o.open(d, 18, pn, true).unwrap();
            assert_eq!(&d[18..18 + n], &pn.to_be_bytes());
        }
        assert_eq!(o.key_updates, 399 >> 6);
        // A packet two generations old is refused without trying.
        let mut old = datagram(10, b"x");
        Sealer::new(Suite::Aes256Gcm, [7; 32], 6)
            .seal(&mut old, 18, 10, true)
            .unwrap();
        assert_eq!(
            o.open(&mut old, 18, 10, true),
            Err(CryptoError::KeyUnavailable)
        );
    }

    #[test]
    fn far_future_generations_are_refused() {
        let (_, mut o) = pair(Suite::ChaCha20Poly1305, 6);
        let mut d = datagram(1 << 20, &[0; 40]);
        assert_eq!(
            o.open(&mut d, 18, 1 << 20, true),
            Err(CryptoError::KeyUnavailable)
        );
        // A forged packet a few generations ahead fails authentication and moves nothing.
        let mut d = datagram(200, &[0; 40]);
        assert_eq!(
            o.open(&mut d, 18, 200, true),
            Err(CryptoError::Authentication)
        );
        assert_eq!(o.key_updates, 0);
    }

    /// The packet-protection test vector of docs/PROTOCOL.md.
    #[test]
    fn test_vector() {
        let mut s = Sealer::new(Suite::ChaCha20Poly1305, [0x11; 32], 22);
        let mut d = datagram(1, b"");
        s.seal(&mut d, 18, 1, true).unwrap();
        let mut a = Sealer::new(Suite::Aes256Gcm, [0x11; 32], 22);
        let mut e = datagram(1, b"");
        a.seal(&mut e, 18, 1, true).unwrap();
        assert_eq!(
            crate::wire::Hex(&d).to_string(),
            crate::vectors::PROTECTED_KEEPALIVE_CHACHA
        );
        assert_eq!(
            crate::wire::Hex(&e).to_string(),
            crate::vectors::PROTECTED_KEEPALIVE_AES
        );
    }
}
