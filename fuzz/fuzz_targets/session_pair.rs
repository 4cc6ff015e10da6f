//! A connected host and client joined by a network the fuzzer controls (drop, duplicate,
//! reorder, corrupt, delay), with input, text and state traffic and frames that may start an
//! intra-refresh sweep (the session refreshes every 4 frames): the sessions never panic,
//! reliable input stays exactly-once and in order, and the host's state never goes backwards.
#![no_main]
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use untether_proto::crypto::Suite;
use untether_proto::state::keys;
use untether_proto::{
    ClientConfig, ClientSession, Codec, ControlFrame, HostConfig, HostEvent, HostSession,
    InputEvent, LinkDeclineReason, SessionParams, StateValue, StaticKeypair,
};

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

fn configs() -> &'static (HostConfig, ClientConfig) {
    static C: OnceLock<(HostConfig, ClientConfig)> = OnceLock::new();
    C.get_or_init(|| {
        let mut h = HostConfig::new(PARAMS);
        h.identity = StaticKeypair::from_private([5; 32]);
        h.entropy = [6; 32];
        let mut c = ClientConfig::new("fuzz");
        c.identity = StaticKeypair::from_private([8; 32]);
        c.entropy = [9; 32];
        (h, c)
    })
}

fuzz_target!(|data: &[u8]| {
    let (hc, cc) = configs();
    let mut now = 1_000_000u64;
    let addr: SocketAddr = ([10, 0, 0, 2], 4000).into();
    let mut host = HostSession::new(hc.clone());
    host.fuzz_connect(
        now,
        addr,
        77,
        Suite::ChaCha20Poly1305,
        [2; 32],
        [1; 32],
        6,
        false,
    );
    let mut client = ClientSession::fuzz_connected(
        cc.clone(),
        now,
        77,
        Suite::ChaCha20Poly1305,
        [1; 32],
        [2; 32],
        6,
        false,
        PARAMS,
    );
    let mut up: VecDeque<Vec<u8>> = VecDeque::new();
    let mut down: VecDeque<Vec<u8>> = VecDeque::new();
    let mut next_seq = 0u32;
    let mut version = 0i32;
    let mut host_seen = 0i32;
    let mut host_version = 0i64;
    let mut client_seen = [0i64; 4];
    let mut poses_seen: VecDeque<u32> = VecDeque::new();
    for &op in data {
        match op >> 4 {
            0 => now += (op as u64 & 15) * 1000,
            1 => {
                if client
                    .send_input(
                        now,
                        InputEvent::Key {
                            code: op as u32,
                            down: true,
                        },
                    )
                    .is_some()
                {}
            }
            2 => {
                let _ = client.send_text(now, "héllo wörld, a longer text than thirty-two bytes");
            }
            3 => {
                version += 1;
                client.send_state(now, keys::POINTER, StateValue::Pointer { x: version, y: 0 });
            }
            4 => {
                // A frame rendered for a pose (the FramePose goes before and after it).
                let sample = untether_proto::PoseSample {
                    sample_us: now,
                    pose: untether_proto::Pose::from_angles(op as f32, 0.0, 0.0, [0.0, 1.5, 0.0]),
                };
                host.send_frame_pose(now, op as u32, sample);
                let _ =
                    host.send_frame_flagged(now, op as u32, now, op & 1 == 1, op & 2 == 2, &[1; 2500]);
                host.send_frame_pose(now, op as u32, sample);
            }
            5 => {
                up.pop_front(); // drop
            }
            6 => {
                if let Some(d) = up.front().cloned() {
                    up.push_back(d); // duplicate, reordered
                }
            }
            7 => {
                if let Some(d) = up.front_mut() {
                    let i = op as usize % d.len().max(1);
                    if let Some(b) = d.get_mut(i) {
                        *b ^= 0x40; // corrupt
                    }
                }
            }
            8 => {
                down.pop_front();
            }
            9 => {
                if let Some(d) = down.pop_front() {
                    down.push_back(d);
                }
            }
            10 => {
                if let Some(d) = up.pop_front() {
                    host.handle_datagram(now, addr, &d);
                }
            }
            11 => {
                if let Some(d) = down.pop_front() {
                    client.handle_datagram(now, &d);
                }
            }
            12 => {
                // The host publishes state (the channel's other direction), keys in the
                // application's range.
                host_version += 1;
                host.publish_state(
                    now,
                    keys::APP + (op & 3) as u16,
                    StateValue::Int(host_version),
                );
            }
            13 => {
                // The raw layer-2 offer (PROTOCOL.md §7.3); the host answers below.
                client.send_link_address(now, 0x88B5, [2, 0, 0, 0, 0, op]);
            }
            _ => {
                if host.poll_timeout().is_some_and(|t| t <= now) {
                    host.handle_timeout(now);
                }
                if client.poll_timeout().is_some_and(|t| t <= now) {
                    client.handle_timeout(now);
                }
            }
        }
        while let Some(t) = host.poll_transmit(now) {
            if down.len() < 4096 {
                down.push_back(t.payload);
            }
        }
        while let Some(p) = client.poll_transmit(now) {
            if up.len() < 4096 {
                up.push_back(p);
            }
        }
        while let Some(ev) = host.poll_event() {
            match ev {
                HostEvent::Input(rec) => {
                    assert_eq!(rec.seq, next_seq, "input out of order or duplicated");
                    next_seq += 1;
                }
                HostEvent::LinkAddress { addr, mac, .. } => {
                    assert_eq!(mac[..5], [2, 0, 0, 0, 0], "an offer the client never made");
                    let answer = if mac[5] & 1 == 0 {
                        ControlFrame::LinkAddress {
                            ethertype: 0x88B5,
                            mac: [2, 0, 0, 0, 1, 0],
                        }
                    } else {
                        ControlFrame::LinkDeclined {
                            reason: LinkDeclineReason::HostUsesUdp,
                        }
                    };
                    host.send_link_frame(now, addr, answer);
                }
                _ => {}
            }
        }
        while let Some(ev) = client.poll_event() {
            if let untether_proto::ClientEvent::FramePose { frame_number, .. } = ev {
                // Each frame's pose is reported once, whichever copy came first.
                assert!(
                    !poses_seen.contains(&frame_number),
                    "a frame's pose reported twice"
                );
                poses_seen.push_back(frame_number);
                if poses_seen.len() > 8 {
                    poses_seen.pop_front();
                }
            }
        }
        for k in 0..4u16 {
            if let Some(e) = client.state_value(keys::APP + k) {
                if let StateValue::Int(v) = e.value {
                    assert!(v >= client_seen[k as usize], "host state went backwards");
                    client_seen[k as usize] = v;
                }
            }
        }
        if let Some(e) = host.state_value(keys::POINTER) {
            if let StateValue::Pointer { x, .. } = e.value {
                assert!(x >= host_seen, "state went backwards");
                host_seen = x;
            }
        }
    }
});
