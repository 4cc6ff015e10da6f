//! The session handshake: Noise `XX` (or `XXpsk3` keyed by a SPAKE2 exchange of a one-time PIN)
//! over Curve25519, ChaCha20-Poly1305 and BLAKE2s, via the `snow` crate.
//!
//! ```text
//! client (initiator)                                   host (responder)
//!  Hello:       -> e                 [offer]            (≥ 1200 bytes, padded)
//!  HelloReply:  <- e, ee, s, es      [session]          (host's static key, encrypted)
//!  HelloFinish: -> s, se (, psk)     [client info]      (client's static key, encrypted)
//!  then protected Control: <- Accept | Reject
//! ```
//! The client learns the host's static key in message 2 and proves its own in message 3; the
//! host decides with the client's key (allowlist, access request, PIN pairing) and answers with a
//! protected Accept or Reject: two round trips from the first Hello to the Accept.
//!
//! **PIN pairing.** A PIN is far too weak a secret for a Noise PSK: anyone who plays host (or
//! client) could test every PIN offline against one handshake transcript. So the PIN goes through
//! SPAKE2 (a password-authenticated key exchange, RFC 9382) first: the client's SPAKE2 message
//! rides in message 1's payload, the host's in message 2's, and the 32-byte SPAKE2 key is the
//! Noise `psk` mixed in at message 3. An active attacker learns one yes/no per handshake (one
//! online guess), and the host counts attempts; a passive one learns nothing.
//!
//! Randomness comes from a caller-seeded ChaCha20 generator, so simulations are reproducible.

use rand_core::{RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use snow::{Builder, HandshakeState};
use spake2::{Ed25519Group, Identity, Password, Spake2};

use crate::crypto::{Suite, ALL_SUITES};
use crate::wire::{Codec, Put, Reader, WireError, MAX_NAME_LEN};

/// The Noise protocol names.
pub const NOISE_XX: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
pub const NOISE_XX_PSK3: &str = "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s";
/// SPAKE2's identity string for PIN pairing (symmetric mode).
pub const SPAKE2_IDENTITY: &[u8] = b"untether pairing v1";
/// Length of a SPAKE2 (Ed25519 group) message.
pub const SPAKE2_MSG_LEN: usize = 33;
/// Length of a Curve25519 key.
pub const KEY_LEN: usize = 32;

/// A Curve25519 public key.
pub type PublicKey = [u8; KEY_LEN];

/// How the client asks for its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Plain `XX`: the client is known, or asks for access with its key.
    Known = 0,
    /// `XXpsk3` with a SPAKE2 PIN: the client pairs with a one-time PIN shown by the host.
    Pin = 1,
}

impl Mode {
    pub fn from_u8(v: u8) -> Option<Mode> {
        match v {
            0 => Some(Mode::Known),
            1 => Some(Mode::Pin),
            _ => None,
        }
    }
    fn noise(self) -> &'static str {
        match self {
            Mode::Known => NOISE_XX,
            Mode::Pin => NOISE_XX_PSK3,
        }
    }
    /// The Noise prologue: binds the protocol version and the mode into the transcript.
    pub fn prologue(self) -> [u8; 12] {
        let mut p = *b"untether/1 \0";
        p[11] = self as u8;
        p
    }
}

/// Why a handshake failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("noise: {0}")]
    Noise(String),
    #[error("handshake payload: {0}")]
    Payload(#[from] WireError),
    #[error("PIN pairing failed (wrong PIN?)")]
    Pin,
    #[error("no cipher suite in common")]
    NoSuite,
}

impl From<snow::Error> for HandshakeError {
    fn from(e: snow::Error) -> Self {
        HandshakeError::Noise(e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Randomness

/// A ChaCha20 CSPRNG seeded by the caller (from the OS in production, from the seed in
/// simulations).
pub struct SessionRng(rand_chacha::ChaCha20Rng);

impl SessionRng {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SessionRng(rand_chacha::ChaCha20Rng::from_seed(seed))
    }
    /// Seeded from the operating system's generator (panics, saying so, when it fails: see
    /// [`os_seed`]).
    pub fn from_os() -> Self {
        Self::from_seed(os_seed())
    }
    /// Seeded from the operating system's generator, or the error when it fails.
    pub fn try_from_os() -> Result<Self, OsRandomUnavailable> {
        try_os_seed().map(Self::from_seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn fill(&mut self, out: &mut [u8]) {
        self.0.fill_bytes(out)
    }
    /// 32 fresh bytes (to seed a child generator).
    pub fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.fill(&mut s);
        s
    }
}

/// The operating system's random generator failed: no key, nonce or PIN can be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operating system's random generator (getrandom) failed: untether cannot make keys, \
     nonces or PINs without it, and stops"
)]
pub struct OsRandomUnavailable;

/// 32 bytes from the operating system's generator, or the error when it fails. Runtimes call
/// this before they make a session (the host and the client stop with its message).
pub fn try_os_seed() -> Result<[u8; 32], OsRandomUnavailable> {
    use ring::rand::SecureRandom;
    seed_with(|s| ring::rand::SystemRandom::new().fill(s).is_ok())
}

/// 32 bytes from `fill` (false: it failed). Never a seed `fill` did not write.
fn seed_with(fill: impl FnOnce(&mut [u8]) -> bool) -> Result<[u8; 32], OsRandomUnavailable> {
    let mut s = [0u8; 32];
    if fill(&mut s) {
        Ok(s)
    } else {
        Err(OsRandomUnavailable)
    }
}

/// 32 bytes from the operating system's generator, for the constructors that cannot fail
/// ([`SessionRng::from_os`], `HostConfig::new`, `ClientConfig::new`). When the generator
/// fails it panics with [`OsRandomUnavailable`]'s message — never a zero or otherwise
/// predictable seed; the runtimes check [`try_os_seed`] first and stop with an error instead.
pub fn os_seed() -> [u8; 32] {
    match try_os_seed() {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

struct NoiseRng(rand_chacha::ChaCha20Rng);
impl Random for NoiseRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// rand_core 0.6's traits for SPAKE2.
struct SpakeRng<'a>(&'a mut SessionRng);
impl rand_core_06::RngCore for SpakeRng<'_> {
    fn next_u32(&mut self) -> u32 {
        self.0 .0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0 .0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0 .0.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core_06::Error> {
        self.0 .0.fill_bytes(dest);
        Ok(())
    }
}
impl rand_core_06::CryptoRng for SpakeRng<'_> {}

struct Resolver {
    seed: [u8; 32],
}

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(NoiseRng(rand_chacha::ChaCha20Rng::from_seed(
            self.seed,
        ))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

fn params(mode: Mode) -> Result<NoiseParams, HandshakeError> {
    Ok(mode.noise().parse()?)
}

// ---------------------------------------------------------------------------------------------
// Identities

/// A long-term Curve25519 key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKeypair {
    pub private: [u8; KEY_LEN],
    pub public: PublicKey,
}

impl std::fmt::Debug for StaticKeypair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StaticKeypair({})", fingerprint(&self.public))
    }
}

impl StaticKeypair {
    /// The key pair of a private key.
    pub fn from_private(private: [u8; KEY_LEN]) -> Self {
        let mut public = [0u8; KEY_LEN];
        if let Some(mut dh) = DefaultResolver.resolve_dh(&DHChoice::Curve25519) {
            dh.set(&private);
            public.copy_from_slice(&dh.pubkey()[..KEY_LEN]);
        }
        StaticKeypair { private, public }
    }
    /// A new random key pair.
    pub fn generate(rng: &mut SessionRng) -> Self {
        let mut private = [0u8; KEY_LEN];
        rng.fill(&mut private);
        Self::from_private(private)
    }
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// The fingerprint users compare: the first 15 bytes of SHA-256("untether fingerprint v1" ‖ key)
/// in RFC 4648 base32, as six groups of four: `ABCD-EFGH-IJKL-MNOP-QRST-UVWX` (120 bits).
pub fn fingerprint(key: &PublicKey) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"untether fingerprint v1");
    ctx.update(key);
    let d = ctx.finish();
    let bytes = &d.as_ref()[..15];
    let mut out = String::with_capacity(29);
    let mut acc: u64 = 0;
    let mut bits = 0;
    let mut n = 0;
    for &b in bytes {
        acc = (acc << 8) | b as u64;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            if n > 0 && n % 4 == 0 {
                out.push('-');
            }
            out.push(BASE32[((acc >> bits) & 31) as usize] as char);
            n += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Payloads

/// Message 1's payload (cleartext but bound into the transcript): what the client offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// Suites the client supports ([`Suite::bit`]s).
    pub suite_mask: u8,
    /// The suite it prefers.
    pub suite_pref: u8,
    /// The client's SPAKE2 message (PIN mode only).
    pub spake: Option<[u8; SPAKE2_MSG_LEN]>,
}

impl Offer {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.suite_mask);
        out.put_u8(self.suite_pref);
        if let Some(s) = &self.spake {
            out.extend_from_slice(s);
        }
    }
    pub fn parse(b: &[u8], mode: Mode) -> Result<Offer, WireError> {
        let mut r = Reader::new(b, "hello offer");
        let suite_mask = r.u8()?;
        let suite_pref = r.u8()?;
        let spake = match mode {
            Mode::Pin => Some(arr(r.bytes(SPAKE2_MSG_LEN)?)),
            Mode::Known => None,
        };
        // Later versions may append fields.
        Ok(Offer {
            suite_mask,
            suite_pref,
            spake,
        })
    }
    /// The suite a host allowing `host_mask` picks: the client's preference if allowed, else
    /// the first both allow.
    pub fn choose(&self, host_mask: u8) -> Option<Suite> {
        let common = self.suite_mask & host_mask & ALL_SUITES;
        if let Some(s) = Suite::from_u8(self.suite_pref) {
            if common & s.bit() != 0 {
                return Some(s);
            }
        }
        [Suite::ChaCha20Poly1305, Suite::Aes256Gcm]
            .into_iter()
            .find(|s| common & s.bit() != 0)
    }
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

/// Message 2's payload (encrypted): the session's transport parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSetup {
    /// The connection id of every protected datagram of the session (both directions).
    pub connection_id: u64,
    pub suite: Suite,
    /// Keys change every 2^this packets.
    pub key_update_log2: u8,
    /// Video shards are authenticated only (not encrypted).
    pub video_auth_only: bool,
    /// The host's SPAKE2 message (PIN mode only).
    pub spake: Option<[u8; SPAKE2_MSG_LEN]>,
}

impl SessionSetup {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.connection_id);
        out.put_u8(self.suite as u8);
        out.put_u8(self.key_update_log2);
        out.put_u8(self.video_auth_only as u8);
        if let Some(s) = &self.spake {
            out.extend_from_slice(s);
        }
    }
    pub fn parse(b: &[u8], mode: Mode) -> Result<SessionSetup, WireError> {
        let bad = |field, reason| WireError::Field { field, reason };
        let mut r = Reader::new(b, "hello reply");
        let connection_id = r.u64()?;
        if connection_id == 0 {
            return Err(bad("reply.connection_id", "zero"));
        }
        let suite = Suite::from_u8(r.u8()?).ok_or(bad("reply.suite", "unknown suite"))?;
        let key_update_log2 = r.u8()?;
        if !(crate::crypto::MIN_KEY_UPDATE_LOG2..=crate::crypto::MAX_KEY_UPDATE_LOG2)
            .contains(&key_update_log2)
        {
            return Err(bad("reply.key_update_log2", "out of range"));
        }
        let video_auth_only = r.bool("reply.flags")?;
        let spake = match mode {
            Mode::Pin => Some(arr(r.bytes(SPAKE2_MSG_LEN)?)),
            Mode::Known => None,
        };
        Ok(SessionSetup {
            connection_id,
            suite,
            key_update_log2,
            video_auth_only,
            spake,
        })
    }
}

/// The most codecs a client lists.
pub const MAX_CODECS: usize = 8;

/// The stream a client asks for (0 in a field: no preference, the host's own setting). The
/// host grants it within its limits (its configured size, frame rate and bit rate) to the
/// first client of a stream; a client joining a stream that others watch gets that stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamWants {
    pub width: u16,
    pub height: u16,
    pub fps: u16,
    pub bitrate_kbps: u32,
}

impl StreamWants {
    /// The encoded length.
    pub const LEN: usize = 10;

    /// What the host grants for these wants under its `limits` (its configured stream): each
    /// field asked for, at most the limit (a size larger than the limit in either dimension
    /// gets the limit's size; sizes are even and at least 64×64, frame rates at least 1,
    /// bit rates at least 100 kbit/s); a field not asked for is the limit's. The second value
    /// says whether anything asked for was lowered.
    pub fn grant(&self, limits: &crate::wire::SessionParams) -> (crate::wire::SessionParams, bool) {
        let mut p = *limits;
        let mut clamped = false;
        if self.width > 0 && self.height > 0 {
            if self.width > limits.width || self.height > limits.height {
                clamped = true;
            } else {
                p.width = (self.width & !1).max(64);
                p.height = (self.height & !1).max(64);
            }
        }
        if self.fps > 0 {
            clamped |= self.fps > limits.fps;
            p.fps = self.fps.min(limits.fps).max(1);
        }
        if self.bitrate_kbps > 0 {
            clamped |= self.bitrate_kbps > limits.bitrate_kbps;
            p.bitrate_kbps = self.bitrate_kbps.min(limits.bitrate_kbps).max(100);
        }
        (p, clamped)
    }
}

/// A VR client's eye views, so that the host renders what the client's late warp assumes:
/// each eye's horizontal field of view (its `vr.fov_deg`) in hundredths of a degree and the
/// eye separation (its `vr.ipd_mm`) in hundredths of a millimetre: `fov u16 ‖ ipd u16`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewInfo {
    pub fov_centideg: u16,
    pub ipd_centimm: u16,
}

impl ViewInfo {
    /// The encoded length.
    pub const LEN: usize = 4;

    /// From degrees and millimetres (rounded; out-of-range values saturate).
    pub fn new(fov_deg: f32, ipd_mm: f32) -> ViewInfo {
        ViewInfo {
            fov_centideg: (fov_deg * 100.0).round().clamp(0.0, u16::MAX as f32) as u16,
            ipd_centimm: (ipd_mm * 100.0).round().clamp(0.0, u16::MAX as f32) as u16,
        }
    }

    pub fn fov_deg(&self) -> f32 {
        self.fov_centideg as f32 / 100.0
    }

    pub fn ipd_mm(&self) -> f32 {
        self.ipd_centimm as f32 / 100.0
    }
}

/// Message 3's payload (encrypted, so authenticated with the rest of the handshake): who the
/// client is and what it decodes.
/// `max_datagram u16 ‖ capabilities u32 ‖ name (u16 length ‖ UTF-8) [‖ count u8 ‖ codec u8 ×
/// count [‖ width u16 ‖ height u16 ‖ fps u16 ‖ bitrate_kbps u32]]`: the codecs it decodes in
/// its order of preference (absent: those of its [`crate::wire::caps`] bits, in id order;
/// count 0 when only the wants follow), then the stream it asks for ([`StreamWants`]; absent:
/// none; all zero when only the view follows) [‖ fov u16 ‖ ipd u16]]]`: then a VR client's
/// eye views ([`ViewInfo`]; absent: none). A host that predates the wants ignores them (it
/// reads no further than the codecs), one that predates the view ignores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfoPayload {
    pub max_datagram: u16,
    /// [`crate::wire::caps`] bits: the codecs it decodes, as a set.
    pub capabilities: u32,
    pub name: String,
    /// The codecs it decodes, preferred first (at most [`MAX_CODECS`]; empty: not sent).
    pub codecs: Vec<Codec>,
    /// The stream it asks for (None: not sent).
    pub wants: Option<StreamWants>,
    /// A VR client's eye views (None: not sent).
    pub view: Option<ViewInfo>,
}

impl ClientInfoPayload {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(self.max_datagram);
        out.put_u32(self.capabilities);
        out.put_str(&self.name, MAX_NAME_LEN);
        if !self.codecs.is_empty() || self.wants.is_some() || self.view.is_some() {
            let n = self.codecs.len().min(MAX_CODECS);
            out.put_u8(n as u8);
            for c in &self.codecs[..n] {
                out.put_u8(*c as u8);
            }
        }
        if self.wants.is_some() || self.view.is_some() {
            let w = self.wants.unwrap_or_default();
            out.put_u16(w.width);
            out.put_u16(w.height);
            out.put_u16(w.fps);
            out.put_u32(w.bitrate_kbps);
        }
        if let Some(v) = &self.view {
            out.put_u16(v.fov_centideg);
            out.put_u16(v.ipd_centimm);
        }
    }
    pub fn parse(b: &[u8]) -> Result<ClientInfoPayload, WireError> {
        let mut r = Reader::new(b, "hello finish");
        let max_datagram = r.u16()?;
        let capabilities = r.u32()?;
        let name = r.peer_text("finish.name", MAX_NAME_LEN)?;
        let mut codecs = Vec::new();
        if !r.is_empty() {
            let n = r.u8()? as usize;
            if n > MAX_CODECS {
                return Err(WireError::Field {
                    field: "finish.codecs",
                    reason: "more than 8",
                });
            }
            for &id in r.bytes(n)? {
                // A codec this host does not know is one it cannot encode: skipped.
                if let Ok(c) = Codec::from_u8(id) {
                    if !codecs.contains(&c) {
                        codecs.push(c);
                    }
                }
            }
        }
        // The wants (all zero: none, written because the view follows).
        let wants = if r.remaining() >= StreamWants::LEN {
            Some(StreamWants {
                width: r.u16()?,
                height: r.u16()?,
                fps: r.u16()?,
                bitrate_kbps: r.u32()?,
            })
            .filter(|w| *w != StreamWants::default())
        } else {
            None
        };
        // The view (a later field, if any, is for a later version: ignored).
        let view = if r.remaining() >= ViewInfo::LEN {
            Some(ViewInfo {
                fov_centideg: r.u16()?,
                ipd_centimm: r.u16()?,
            })
        } else {
            None
        };
        Ok(ClientInfoPayload {
            max_datagram,
            capabilities,
            name,
            codecs,
            wants,
            view,
        })
    }

    /// What the client decodes, preferred first: its list, or its capability bits.
    pub fn decodes(&self) -> Vec<Codec> {
        if self.codecs.is_empty() {
            Codec::from_caps(self.capabilities)
        } else {
            self.codecs.clone()
        }
    }
}

/// The two directional secrets a finished handshake yields.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub send: [u8; 32],
    pub recv: [u8; 32],
}

// ---------------------------------------------------------------------------------------------
// The two sides

const MSG_BUF: usize = 1024;

fn spake_start(pin: &str, rng: &mut SessionRng) -> (Spake2<Ed25519Group>, [u8; SPAKE2_MSG_LEN]) {
    let (state, msg) = Spake2::<Ed25519Group>::start_symmetric_with_rng(
        &Password::new(pin.as_bytes()),
        &Identity::new(SPAKE2_IDENTITY),
        SpakeRng(rng),
    );
    let mut m = [0u8; SPAKE2_MSG_LEN];
    m.copy_from_slice(&msg[..SPAKE2_MSG_LEN.min(msg.len())]);
    (state, m)
}

fn spake_finish(
    state: Spake2<Ed25519Group>,
    theirs: &[u8; SPAKE2_MSG_LEN],
) -> Result<[u8; 32], HandshakeError> {
    let k = state.finish(theirs).map_err(|_| HandshakeError::Pin)?;
    if k.len() != 32 {
        return Err(HandshakeError::Pin);
    }
    Ok(arr(&k))
}

/// The client's side of a handshake.
pub struct ClientHandshake {
    hs: HandshakeState,
    mode: Mode,
    spake: Option<Spake2<Ed25519Group>>,
}

impl ClientHandshake {
    /// Starts a handshake; returns it and message 1.
    pub fn start(
        identity: &StaticKeypair,
        pin: Option<&str>,
        suite_mask: u8,
        suite_pref: Suite,
        rng: &mut SessionRng,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        let mode = if pin.is_some() {
            Mode::Pin
        } else {
            Mode::Known
        };
        let prologue = mode.prologue();
        let mut hs = Builder::with_resolver(params(mode)?, Box::new(Resolver { seed: rng.seed() }))
            .local_private_key(&identity.private)?
            .prologue(&prologue)?
            .build_initiator()?;
        let (spake, spake_msg) = match pin {
            Some(pin) => {
                let (s, m) = spake_start(pin, rng);
                (Some(s), Some(m))
            }
            None => (None, None),
        };
        let mut payload = Vec::with_capacity(2 + SPAKE2_MSG_LEN);
        Offer {
            suite_mask,
            suite_pref: suite_pref as u8,
            spake: spake_msg,
        }
        .encode(&mut payload);
        let mut buf = vec![0u8; MSG_BUF];
        let n = hs.write_message(&payload, &mut buf)?;
        buf.truncate(n);
        Ok((ClientHandshake { hs, mode, spake }, buf))
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Reads message 2: the host's static key and the session's setup.
    pub fn read_reply(&mut self, msg2: &[u8]) -> Result<(PublicKey, SessionSetup), HandshakeError> {
        let mut payload = vec![0u8; MSG_BUF];
        let n = self.hs.read_message(msg2, &mut payload)?;
        let setup = SessionSetup::parse(&payload[..n], self.mode)?;
        let host_key: PublicKey = match self.hs.get_remote_static() {
            Some(k) if k.len() == KEY_LEN => arr(k),
            _ => return Err(HandshakeError::Noise("no host static key".into())),
        };
        if let (Some(state), Some(theirs)) = (self.spake.take(), setup.spake.as_ref()) {
            let k = spake_finish(state, theirs)?;
            self.hs.set_psk(3, &k)?;
        }
        Ok((host_key, setup))
    }

    /// Writes message 3 with the client's info; returns it and the session keys.
    pub fn finish(
        &mut self,
        info: &ClientInfoPayload,
    ) -> Result<(Vec<u8>, SessionKeys), HandshakeError> {
        let mut payload = Vec::with_capacity(8 + MAX_NAME_LEN);
        info.encode(&mut payload);
        let mut buf = vec![0u8; MSG_BUF];
        let n = self.hs.write_message(&payload, &mut buf)?;
        buf.truncate(n);
        let (i2r, r2i) = self.hs.dangerously_get_raw_split();
        Ok((
            buf,
            SessionKeys {
                send: i2r,
                recv: r2i,
            },
        ))
    }
}

/// The host's side of a handshake.
pub struct HostHandshake {
    hs: HandshakeState,
    mode: Mode,
}

/// What the host learned from message 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloSummary {
    pub mode: Mode,
    pub offer: Offer,
}

impl HostHandshake {
    /// Reads message 1 and writes message 2. `pin` must be given for [`Mode::Pin`];
    /// `setup` decides the session's parameters from the client's offer (return None to refuse:
    /// no suite in common).
    pub fn respond(
        identity: &StaticKeypair,
        mode: Mode,
        msg1: &[u8],
        pin: Option<&str>,
        rng: &mut SessionRng,
        setup: impl FnOnce(&Offer) -> Option<SessionSetup>,
    ) -> Result<(HostHandshake, Vec<u8>, HelloSummary, SessionSetup), HandshakeError> {
        let prologue = mode.prologue();
        let mut hs = Builder::with_resolver(params(mode)?, Box::new(Resolver { seed: rng.seed() }))
            .local_private_key(&identity.private)?
            .prologue(&prologue)?
            .build_responder()?;
        let mut payload = [0u8; 256];
        let n = hs.read_message(msg1, &mut payload)?;
        let offer = Offer::parse(&payload[..n], mode)?;
        let mut s = setup(&offer).ok_or(HandshakeError::NoSuite)?;
        match (mode, pin, offer.spake.as_ref()) {
            (Mode::Pin, Some(pin), Some(theirs)) => {
                let (state, mine) = spake_start(pin, rng);
                let k = spake_finish(state, theirs)?;
                hs.set_psk(3, &k)?;
                s.spake = Some(mine);
            }
            (Mode::Pin, _, _) => return Err(HandshakeError::Pin),
            (Mode::Known, _, _) => s.spake = None,
        }
        let mut out = Vec::with_capacity(64);
        s.encode(&mut out);
        let mut buf = vec![0u8; MSG_BUF];
        let n = hs.write_message(&out, &mut buf)?;
        buf.truncate(n);
        Ok((
            HostHandshake { hs, mode },
            buf,
            HelloSummary { mode, offer },
            s,
        ))
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Reads message 3: the client's static key, its info and the session keys.
    pub fn finish(
        &mut self,
        msg3: &[u8],
    ) -> Result<(PublicKey, ClientInfoPayload, SessionKeys), HandshakeError> {
        let mut payload = [0u8; 256];
        let n = self.hs.read_message(msg3, &mut payload).map_err(|e| {
            if self.mode == Mode::Pin {
                HandshakeError::Pin
            } else {
                e.into()
            }
        })?;
        let info = ClientInfoPayload::parse(&payload[..n])?;
        let key: PublicKey = match self.hs.get_remote_static() {
            Some(k) if k.len() == KEY_LEN => arr(k),
            _ => return Err(HandshakeError::Noise("no client static key".into())),
        };
        let (i2r, r2i) = self.hs.dangerously_get_raw_split();
        Ok((
            key,
            info,
            SessionKeys {
                send: r2i,
                recv: i2r,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failing_os_generator_is_an_error_never_a_zero_seed() {
        assert_eq!(seed_with(|_| false), Err(OsRandomUnavailable));
        // A generator that wrote nothing before failing: still an error.
        assert_eq!(
            seed_with(|s| {
                s[0] = 1;
                false
            }),
            Err(OsRandomUnavailable)
        );
        assert_eq!(
            seed_with(|s| {
                s.fill(7);
                true
            }),
            Ok([7; 32])
        );
        let e = OsRandomUnavailable.to_string();
        assert!(e.contains("random generator") && e.contains("stops"), "{e}");
        let a = try_os_seed().unwrap();
        assert_ne!(a, [0; 32]);
        assert_ne!(a, try_os_seed().unwrap());
        assert!(SessionRng::try_from_os().is_ok());
    }

    use super::*;

    fn setup(offer: &Offer) -> Option<SessionSetup> {
        Some(SessionSetup {
            connection_id: 77,
            suite: offer.choose(ALL_SUITES)?,
            key_update_log2: 22,
            video_auth_only: false,
            spake: None,
        })
    }

    fn run(client_pin: Option<&str>, host_pin: Option<&str>) -> Result<(), HandshakeError> {
        let mut rng = SessionRng::from_seed([1; 32]);
        let host = StaticKeypair::generate(&mut rng);
        let client = StaticKeypair::generate(&mut rng);
        let (mut c, m1) =
            ClientHandshake::start(&client, client_pin, ALL_SUITES, Suite::Aes256Gcm, &mut rng)?;
        let (mut h, m2, summary, _) =
            HostHandshake::respond(&host, c.mode(), &m1, host_pin, &mut rng, setup)?;
        assert_eq!(summary.offer.suite_pref, 2);
        let (hk, s) = c.read_reply(&m2)?;
        assert_eq!(hk, host.public);
        assert_eq!(s.connection_id, 77);
        assert_eq!(s.suite, Suite::Aes256Gcm);
        let info = ClientInfoPayload {
            max_datagram: 1400,
            capabilities: 3,
            name: "quest".into(),
            codecs: vec![Codec::Hevc, Codec::H264],
            wants: None,
            view: None,
        };
        let (m3, ck) = c.finish(&info)?;
        let (ckey, got, hk) = h.finish(&m3)?;
        assert_eq!(ckey, client.public);
        assert_eq!(got, info);
        assert!(ck.send == hk.recv && ck.recv == hk.send && ck.send != ck.recv);
        Ok(())
    }

    #[test]
    fn xx_handshake_authenticates_both_and_agrees_on_keys() {
        run(None, None).unwrap();
    }

    #[test]
    fn pin_pairing_succeeds_with_the_right_pin_only() {
        run(Some("482913"), Some("482913")).unwrap();
        assert_eq!(
            run(Some("482913"), Some("482914")).unwrap_err(),
            HandshakeError::Pin
        );
    }

    #[test]
    fn tampered_messages_fail() {
        let mut rng = SessionRng::from_seed([2; 32]);
        let host = StaticKeypair::generate(&mut rng);
        let client = StaticKeypair::generate(&mut rng);
        let (mut c, m1) =
            ClientHandshake::start(&client, None, ALL_SUITES, Suite::Aes256Gcm, &mut rng).unwrap();
        let (_, mut m2, _, _) =
            HostHandshake::respond(&host, Mode::Known, &m1, None, &mut rng, setup).unwrap();
        let last = m2.len() - 1;
        m2[last] ^= 1;
        assert!(c.read_reply(&m2).is_err());
    }

    #[test]
    fn the_wants_follow_the_codecs_and_an_older_reader_ignores_them() {
        use crate::wire::{caps, Hex};
        let info = ClientInfoPayload {
            max_datagram: 1200,
            capabilities: caps::H264,
            name: "pi".into(),
            codecs: vec![Codec::H264],
            wants: Some(StreamWants {
                width: 1280,
                height: 720,
                fps: 60,
                bitrate_kbps: 10_000,
            }),
            view: None,
        };
        let mut b = Vec::new();
        info.encode(&mut b);
        assert_eq!(
            Hex(&b[b.len() - 12..]).to_string(),
            "0101050002d0003c00002710",
            "count 1, h264, then 1280 ‖ 720 ‖ 60 ‖ 10000"
        );
        assert_eq!(ClientInfoPayload::parse(&b).unwrap(), info);
        // Wants without a codec list: count 0, then the wants.
        let bare = ClientInfoPayload {
            codecs: Vec::new(),
            ..info.clone()
        };
        let mut b2 = Vec::new();
        bare.encode(&mut b2);
        let parsed = ClientInfoPayload::parse(&b2).unwrap();
        assert_eq!(
            (parsed.wants, parsed.decodes()),
            (info.wants, vec![Codec::H264])
        );
        // An older host reads the codecs and stops: the same codecs, the wants unread.
        let older = &b[..b.len() - StreamWants::LEN];
        assert_eq!(
            ClientInfoPayload::parse(older).unwrap().codecs,
            vec![Codec::H264]
        );
    }

    #[test]
    fn the_view_follows_the_wants_and_an_older_reader_ignores_it() {
        use crate::wire::{caps, Hex};
        let info = ClientInfoPayload {
            max_datagram: 1200,
            capabilities: caps::H264,
            name: "pi".into(),
            codecs: Vec::new(),
            wants: None,
            view: Some(ViewInfo::new(100.0, 63.5)),
        };
        let mut b = Vec::new();
        info.encode(&mut b);
        assert_eq!(
            Hex(&b[b.len() - 15..]).to_string(),
            crate::vectors::CLIENT_INFO_VIEW_TAIL,
            "count 0, no wants (zeros), then 100.00° ‖ 63.50 mm"
        );
        let parsed = ClientInfoPayload::parse(&b).unwrap();
        assert_eq!(parsed, info);
        assert_eq!(
            (
                parsed.view.unwrap().fov_deg(),
                parsed.view.unwrap().ipd_mm()
            ),
            (100.0, 63.5)
        );
        // A host that predates the view reads the (empty) wants and stops.
        let older = &b[..b.len() - ViewInfo::LEN];
        let o = ClientInfoPayload::parse(older).unwrap();
        assert_eq!((o.wants, o.view), (None, None));
        // With wants, both come back.
        let both = ClientInfoPayload {
            wants: Some(StreamWants {
                fps: 72,
                ..Default::default()
            }),
            ..info.clone()
        };
        let mut b = Vec::new();
        both.encode(&mut b);
        assert_eq!(ClientInfoPayload::parse(&b).unwrap(), both);
        assert_eq!(
            ViewInfo::new(-5.0, 1e9),
            ViewInfo {
                fov_centideg: 0,
                ipd_centimm: u16::MAX
            }
        );
    }

    #[test]
    fn the_host_grants_what_is_asked_within_its_limits_and_says_what_it_lowered() {
        let limits = crate::wire::SessionParams {
            width: 1920,
            height: 1080,
            fps: 60,
            codec: Codec::H264,
            bitrate_kbps: 20_000,
            max_datagram: 1200,
            keepalive_ms: 100,
            idle_timeout_ms: 3000,
            refresh_period: 0,
        };
        let ask = |width, height, fps, bitrate_kbps| StreamWants {
            width,
            height,
            fps,
            bitrate_kbps,
        };
        let (p, clamped) = ask(1280, 720, 30, 8_000).grant(&limits);
        assert_eq!(
            (p.width, p.height, p.fps, p.bitrate_kbps, clamped),
            (1280, 720, 30, 8_000, false)
        );
        let (p, clamped) = ask(3840, 2160, 120, 50_000).grant(&limits);
        assert_eq!(
            (p.width, p.height, p.fps, p.bitrate_kbps, clamped),
            (1920, 1080, 60, 20_000, true)
        );
        let (p, clamped) = ask(0, 0, 0, 0).grant(&limits);
        assert_eq!((p, clamped), (limits, false));
        let (p, _) = ask(641, 9, 0, 1).grant(&limits);
        assert_eq!((p.width, p.height, p.bitrate_kbps), (640, 64, 100));
    }

    #[test]
    fn the_codec_list_is_optional_bounded_and_falls_back_to_the_capability_bits() {
        use crate::wire::{caps, Hex};
        let info = ClientInfoPayload {
            max_datagram: 1200,
            capabilities: caps::H264 | caps::HEVC,
            name: "pi".into(),
            codecs: vec![Codec::Hevc, Codec::H264],
            wants: None,
            view: None,
        };
        let mut b = Vec::new();
        info.encode(&mut b);
        assert_eq!(Hex(&b).to_string(), crate::vectors::CLIENT_INFO_CODECS);
        assert_eq!(ClientInfoPayload::parse(&b).unwrap(), info);
        assert_eq!(info.decodes(), vec![Codec::Hevc, Codec::H264]);
        // Without the list: the bits, in id order.
        let old = ClientInfoPayload {
            codecs: Vec::new(),
            wants: None,
            ..info.clone()
        };
        let mut b = Vec::new();
        old.encode(&mut b);
        assert_eq!(b.len(), 2 + 4 + 2 + 2);
        let parsed = ClientInfoPayload::parse(&b).unwrap();
        assert_eq!(parsed.decodes(), vec![Codec::H264, Codec::Hevc]);
        // Unknown ids are skipped, repeats once, more than 8 refused, a short list truncated.
        let mut b = Vec::new();
        old.encode(&mut b);
        b.extend_from_slice(&[4, 9, 4, 4, 1]);
        assert_eq!(
            ClientInfoPayload::parse(&b).unwrap().codecs,
            vec![Codec::Av1, Codec::H264]
        );
        let mut b = Vec::new();
        old.encode(&mut b);
        b.push(9);
        b.extend_from_slice(&[1; 9]);
        assert!(ClientInfoPayload::parse(&b).is_err());
        let mut b = Vec::new();
        old.encode(&mut b);
        b.extend_from_slice(&[3, 1]);
        assert!(ClientInfoPayload::parse(&b).is_err());
    }

    #[test]
    fn fingerprints_are_grouped_base32() {
        let f = fingerprint(&[0; 32]);
        assert_eq!(f.len(), 29);
        assert_eq!(f.matches('-').count(), 5);
        assert_eq!(f, crate::vectors::FINGERPRINT_ZERO_KEY);
        assert_ne!(f, fingerprint(&[1; 32]));
    }

    #[test]
    fn suite_choice() {
        let o = Offer {
            suite_mask: ALL_SUITES,
            suite_pref: 2,
            spake: None,
        };
        assert_eq!(o.choose(ALL_SUITES), Some(Suite::Aes256Gcm));
        assert_eq!(o.choose(1), Some(Suite::ChaCha20Poly1305));
        assert_eq!(o.choose(0), None);
    }

    /// A whole handshake with fixed keys (docs/PROTOCOL.md §3.7): the static private keys are
    /// 0x01 × 32 (client) and 0x02 × 32 (host), the ephemeral ones 0x03 × 32 and 0x04 × 32.
    #[test]
    fn handshake_vector() {
        use crate::crypto::{Sealer, Suite};
        use crate::wire::Hex;
        let p: NoiseParams = NOISE_XX.parse().unwrap();
        let prologue = Mode::Known.prologue();
        let (s1, s2, e1, e2) = ([1u8; 32], [2u8; 32], [3u8; 32], [4u8; 32]);
        let mut c = Builder::with_resolver(p.clone(), Box::new(Resolver { seed: [0; 32] }))
            .local_private_key(&s1)
            .unwrap()
            .fixed_ephemeral_key_for_testing_only(&e1)
            .prologue(&prologue)
            .unwrap()
            .build_initiator()
            .unwrap();
        let mut h = Builder::with_resolver(p, Box::new(Resolver { seed: [0; 32] }))
            .local_private_key(&s2)
            .unwrap()
            .fixed_ephemeral_key_for_testing_only(&e2)
            .prologue(&prologue)
            .unwrap()
            .build_responder()
            .unwrap();
        let mut buf = [0u8; 1024];
        let mut pl = [0u8; 1024];
        let mut offer = Vec::new();
        Offer {
            suite_mask: ALL_SUITES,
            suite_pref: Suite::Aes256Gcm as u8,
            spake: None,
        }
        .encode(&mut offer);
        let n = c.write_message(&offer, &mut buf).unwrap();
        let m1 = buf[..n].to_vec();
        h.read_message(&m1, &mut pl).unwrap();
        let mut setup = Vec::new();
        SessionSetup {
            connection_id: 0x0102030405060708,
            suite: Suite::Aes256Gcm,
            key_update_log2: 22,
            video_auth_only: false,
            spake: None,
        }
        .encode(&mut setup);
        let n = h.write_message(&setup, &mut buf).unwrap();
        let m2 = buf[..n].to_vec();
        c.read_message(&m2, &mut pl).unwrap();
        let mut info = Vec::new();
        ClientInfoPayload {
            max_datagram: 1200,
            capabilities: 1,
            name: "pi".into(),
            codecs: Vec::new(),
            wants: None,
            view: None,
        }
        .encode(&mut info);
        let n = c.write_message(&info, &mut buf).unwrap();
        let m3 = buf[..n].to_vec();
        let n = h.read_message(&m3, &mut pl).unwrap();
        assert_eq!(ClientInfoPayload::parse(&pl[..n]).unwrap().name, "pi");
        let (k1, k2) = c.dangerously_get_raw_split();
        assert_eq!((k1, k2), h.dangerously_get_raw_split());
        // The Accept, the host's first protected datagram (packet number 0).
        let mut accept = Vec::new();
        crate::wire::encode_control(
            &crate::wire::Header::new(crate::wire::PacketType::Control, 0x0102030405060708, 0),
            &[crate::wire::ControlFrame::Accept(
                crate::wire::SessionParams {
                    width: 1920,
                    height: 1080,
                    fps: 60,
                    codec: crate::wire::Codec::H264,
                    bitrate_kbps: 15_000,
                    max_datagram: 1200,
                    keepalive_ms: 2000,
                    idle_timeout_ms: 30_000,
                    refresh_period: 0,
                },
            )],
            &mut accept,
        );
        Sealer::new(Suite::Aes256Gcm, k2, 22)
            .seal(&mut accept, crate::wire::HEADER_LEN, 0, true)
            .unwrap();
        use crate::vectors as v;
        assert_eq!(Hex(&m1).to_string(), v::HANDSHAKE_MSG1);
        assert_eq!(Hex(&m2).to_string(), v::HANDSHAKE_MSG2);
        assert_eq!(Hex(&m3).to_string(), v::HANDSHAKE_MSG3);
        assert_eq!(Hex(&k1).to_string(), v::HANDSHAKE_K1);
        assert_eq!(Hex(&k2).to_string(), v::HANDSHAKE_K2);
        assert_eq!(Hex(&accept).to_string(), v::HANDSHAKE_ACCEPT);
    }
}
