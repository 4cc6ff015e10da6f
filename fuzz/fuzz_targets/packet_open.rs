//! Packet protection: opening arbitrary bytes never panics and never succeeds for bytes that
//! were not sealed; sealed bytes always open.
#![no_main]
use libfuzzer_sys::fuzz_target;
use untether_proto::crypto::{Opener, Sealer, Suite};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let suite = if data[0] & 1 == 0 {
        Suite::ChaCha20Poly1305
    } else {
        Suite::Aes256Gcm
    };
    let encrypted = data[0] & 2 == 0;
    let log2 = 6 + (data[1] % 17);
    let rest = &data[2..];
    let mut opener = Opener::new(suite, [3; 32], log2);
    let mut buf = rest.to_vec();
    let pn = if rest.len() >= 18 {
        u64::from_be_bytes(rest[10..18].try_into().unwrap())
    } else {
        0
    };
    let hl = 18.min(buf.len());
    let _ = opener.open(&mut buf, hl, pn, encrypted);
    // Round trip.
    if rest.len() >= 18 {
        // A sealer only moves forward one generation at a time in practice.
        let pn = pn % (1u64 << (log2 + 3));
        let mut sealer = Sealer::new(suite, [3; 32], log2);
        let mut d = rest.to_vec();
        d[10..18].copy_from_slice(&pn.to_be_bytes());
        sealer.seal(&mut d, 18, pn, encrypted).unwrap();
        let mut o = Opener::new(suite, [3; 32], log2);
        // Only generations 0..=4 are reachable from a fresh opener.
        if pn >> log2 <= 4 {
            let n = o.open(&mut d, 18, pn, encrypted).unwrap();
            assert_eq!(&d[18..18 + n], &rest[18..]);
        }
    }
});
