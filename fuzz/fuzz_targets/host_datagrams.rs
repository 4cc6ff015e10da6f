//! The host's state machine fed arbitrary datagrams (from a few addresses, at fuzzed times),
//! before and after up to three clients are connected, with frames, audio, input grants,
//! control hand-overs and goodbyes in between. Bounds: handshakes in progress, the client
//! limit, one controller whenever a live (not silent) client is connected, and the host never sends more than 3×
//! what an unvalidated address sent.
#![no_main]
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use untether_proto::crypto::Suite;
use untether_proto::{
    AccessPolicy, AudioPacket, ByeReason, ClientId, Codec, HostConfig, HostEvent, HostSession,
    SessionParams, StaticKeypair,
};

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
        c.max_clients = 3;
        c
    })
}

fuzz_target!(|data: &[u8]| {
    let mut host = HostSession::new(config().clone());
    // The connected clients' addresses (10.0.0.2 … 10.0.0.4).
    let clients: Vec<SocketAddr> = (0..3u8).map(|i| ([10, 0, 0, 2 + i], 4000).into()).collect();
    let mut now = 1_000_000u64;
    let mut r = data;
    let mut received: HashMap<SocketAddr, u64> = HashMap::new();
    let mut sent: HashMap<SocketAddr, u64> = HashMap::new();
    let mut first = true;
    let mut frame = 0u32;
    let mut connected: Vec<SocketAddr> = Vec::new();
    let mut silent: HashSet<ClientId> = HashSet::new();
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
            // Sometimes connected clients (one to three), so protected paths are reached too.
            for (i, &addr) in clients.iter().enumerate().take(1 + (ctl as usize >> 6) % 3) {
                connected.push(addr);
                host.fuzz_connect(
                    now,
                    addr,
                    0x1234 + i as u64,
                    Suite::ChaCha20Poly1305,
                    [1 + i as u8; 32],
                    [2 + i as u8; 32],
                    6,
                    ctl & 0x20 != 0,
                );
            }
        }
        first = false;
        *received.entry(from).or_default() += dgram.len() as u64;
        host.handle_datagram(now, from, dgram);
        match ctl & 0x30 {
            0x30 => {
                let _ = host.send_frame(now, frame, now, frame % 7 == 0, &[7; 3000]);
                frame = frame.wrapping_add(1);
            }
            0x20 if dgram.len() > 2 => {
                // The host's user and application: a grant, a hand-over, a goodbye, audio.
                let ids: Vec<_> = host.clients().map(|c| (c.id, c.key)).collect();
                if let Some(&(id, key)) = ids.get(dgram[0] as usize % ids.len().max(1)) {
                    match dgram[1] % 5 {
                        0 => host.grant_input(now, key),
                        1 => host.revoke_input_grant(now, &key),
                        2 => {
                            host.hand_control(now, id);
                        }
                        3 => host.close_client(now, id, ByeReason::TooSlow),
                        _ => {
                            let _ = host.send_audio(
                                now,
                                &AudioPacket {
                                    seq: frame,
                                    pts_us: now,
                                    samples: 480,
                                    opus: dgram.to_vec(),
                                    prev_opus: Vec::new(),
                                },
                            );
                        }
                    }
                }
            }
            _ => {}
        }
        if host.poll_timeout().is_some_and(|t| t <= now) {
            host.handle_timeout(now);
        }
        while let Some(t) = host.poll_transmit(now) {
            *sent.entry(t.dst).or_default() += t.payload.len() as u64;
        }
        while let Some(e) = host.poll_event() {
            match e {
                HostEvent::ClientSilent {
                    client,
                    silent: true,
                } => {
                    silent.insert(client);
                }
                HostEvent::ClientSilent { client, .. } | HostEvent::ClientGone { client, .. } => {
                    silent.remove(&client);
                }
                _ => {}
            }
        }
        while host.poll_pairing_event().is_some() {}
        assert!(host.handshakes_in_progress() <= 16);
        assert!(host.client_count() <= 3);
        // Exactly one controller whenever a client that is heard (not silent) is connected; a
        // silent client cannot control (nothing it sends arrives), so with every client silent
        // there may be none.
        let live = host
            .client_status()
            .iter()
            .filter(|c| !silent.contains(&c.info.id))
            .count();
        let controllers = host
            .client_status()
            .iter()
            .filter(|c| c.role == untether_proto::ClientRole::Controller)
            .count();
        assert!(controllers <= 1);
        assert_eq!(controllers, usize::from(host.controller().is_some()));
        if live > 0 {
            assert!(
                host.controller().is_some(),
                "a live client and no controller"
            );
        }
    }
    for (addr, s) in sent {
        if !connected.contains(&addr) {
            assert!(
                s <= 3 * received.get(&addr).copied().unwrap_or(0),
                "amplification"
            );
        }
    }
});
