//! The host's state machine fed arbitrary datagrams (from a few addresses, at fuzzed times),
//! before and after a client is connected. Bounds: handshakes in progress, and the host never
//! sends more than 3× what an unvalidated address sent.
#![no_main]
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use untether_proto::crypto::Suite;
use untether_proto::{AccessPolicy, Codec, HostConfig, HostSession, SessionParams, StaticKeypair};

fn config() -> &'static HostConfig {
    static CFG: OnceLock<HostConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let mut c = HostConfig::new(SessionParams {
            width: 1280,
            height: 720,
            fps: 60,
            codec: Codec::H264,
            bitrate_kbps: 10_000,
            max_datagram: 1200,
            keepalive_ms: 2000,
            idle_timeout_ms: 30_000,
            refresh_period: 4,
        });
        c.identity = StaticKeypair::from_private([5; 32]);
        c.entropy = [6; 32];
        c.access = AccessPolicy::Allowlist;
        c
    })
}

fuzz_target!(|data: &[u8]| {
    let mut host = HostSession::new(config().clone());
    let client: SocketAddr = ([10, 0, 0, 2], 4000).into();
    let mut now = 1_000_000u64;
    let mut r = data;
    let mut received: HashMap<SocketAddr, u64> = HashMap::new();
    let mut sent: HashMap<SocketAddr, u64> = HashMap::new();
    let mut first = true;
    while r.len() >= 4 {
        let ctl = r[0];
        let len = u16::from_be_bytes([r[1], r[2]]) as usize % 1600;
        r = &r[3..];
        let n = len.min(r.len());
        let (dgram, rest) = r.split_at(n);
        r = rest;
        now += (ctl as u64 & 0x0f) * 1000;
        let from: SocketAddr = ([10, 0, 0, 2 + (ctl >> 6)], 4000).into();
        if first && ctl & 0x10 != 0 {
            // Sometimes a connected client, so protected paths are reached too.
            host.fuzz_connect(
                now,
                client,
                0x1234,
                Suite::ChaCha20Poly1305,
                [1; 32],
                [2; 32],
                6,
                ctl & 0x20 != 0,
            );
        }
        first = false;
        *received.entry(from).or_default() += dgram.len() as u64;
        host.handle_datagram(now, from, dgram);
        if ctl & 0x30 == 0x30 {
            let _ = host.send_frame(now, 1, now, true, &[7; 3000]);
        }
        if host.poll_timeout().is_some_and(|t| t <= now) {
            host.handle_timeout(now);
        }
        while let Some(t) = host.poll_transmit(now) {
            *sent.entry(t.dst).or_default() += t.payload.len() as u64;
        }
        while host.poll_event().is_some() {}
        while host.poll_pairing_event().is_some() {}
        assert!(host.handshakes_in_progress() <= 16);
    }
    for (addr, s) in sent {
        if addr != client {
            assert!(
                s <= 3 * received.get(&addr).copied().unwrap_or(0),
                "amplification"
            );
        }
    }
});
