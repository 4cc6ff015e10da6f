//! The client's state machine fed arbitrary datagrams while connecting and once connected.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use untether_proto::crypto::{Sealer, Suite};
use untether_proto::wire::{self, Header, PacketType, HEADER_LEN};
use untether_proto::{ClientConfig, ClientSession, Codec, SessionParams, StaticKeypair};

fn config() -> &'static ClientConfig {
    static CFG: OnceLock<ClientConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let mut c = ClientConfig::new("fuzz");
        c.identity = StaticKeypair::from_private([5; 32]);
        c.entropy = [6; 32];
        c
    })
}

const PARAMS: SessionParams = SessionParams {
    width: 1280,
    height: 720,
    fps: 60,
    codec: Codec::H264,
    bitrate_kbps: 10_000,
    max_datagram: 1200,
    keepalive_ms: 2000,
    idle_timeout_ms: 30_000,
    refresh_period: 4,
};

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let mut now = 1_000_000u64;
    let connected = data[0] & 1 != 0;
    let auth_only = data[0] & 2 != 0;
    let mut client = if connected {
        ClientSession::fuzz_connected(
            config().clone(),
            now,
            0x1234,
            Suite::Aes256Gcm,
            [1; 32],
            [2; 32],
            6,
            auth_only,
            PARAMS,
        )
    } else {
        ClientSession::new(config().clone(), now)
    };
    // The host's sealer, so fuzzed plaintext reaches the frame parsers and the assembler.
    let mut sealer = Sealer::new(Suite::Aes256Gcm, [2; 32], 6);
    let mut pn = 0u64;
    let mut r = &data[1..];
    while r.len() >= 4 {
        let ctl = r[0];
        let len = u16::from_be_bytes([r[1], r[2]]) as usize % 1600;
        r = &r[3..];
        let n = len.min(r.len());
        let (body, rest) = r.split_at(n);
        r = rest;
        now += (ctl as u64 & 0x0f) * 700;
        if connected && ctl & 0x80 != 0 {
            let ty = if ctl & 0x40 != 0 {
                PacketType::Shard
            } else {
                PacketType::Control
            };
            let mut d = Vec::new();
            Header::new(ty, 0x1234, pn).write(&mut d);
            d.extend_from_slice(body);
            let encrypt = !(ty == PacketType::Shard && auth_only);
            if sealer.seal(&mut d, HEADER_LEN, pn, encrypt).is_ok() {
                client.handle_datagram(now, &d);
            }
            pn += 1 + (ctl as u64 & 0x20);
        } else {
            client.handle_datagram(now, body);
        }
        if ctl & 0x10 != 0 {
            let _ = client.send_input(
                now,
                wire::InputEvent::Key {
                    code: 1,
                    down: true,
                },
            );
            client.send_state(now, 0, untether_proto::StateValue::Pointer { x: 1, y: 2 });
        }
        if client.poll_timeout().is_some_and(|t| t <= now) {
            client.handle_timeout(now);
        }
        while client.poll_transmit(now).is_some() {}
        while client.poll_event().is_some() {}
    }
});
