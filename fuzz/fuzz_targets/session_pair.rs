//! A host with two connected clients — the controller and a viewer — joined by a network the
//! fuzzer controls (drop, duplicate, reorder, corrupt, delay), with input, text and state
//! traffic from both, frames for both (rendered for a pose, some starting an intra-refresh
//! sweep: the stream refreshes every 4 frames), state the host publishes to both, and the
//! host's user granting and taking back the viewer's input and handing control back and
//! forth: the sessions never panic, the input the host applies is each client's, exactly once
//! and in order, none of it from a client while it had neither control nor a grant, the
//! scene's state (the controller's) never goes backwards while one client controls, the
//! host's state never goes backwards at either client, and a frame's pose is reported once.
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

/// One client of the pair and the network between it and the host.
struct Side {
    addr: SocketAddr,
    client: ClientSession,
    up: VecDeque<Vec<u8>>,
    down: VecDeque<Vec<u8>>,
    /// The next input sequence number the host should apply from it.
    next_seq: u32,
    /// Its pointer's version (x) as it last set it.
    version: i32,
    /// It was without control and without a grant at some point: its events sent then were
    /// dropped, so its applied sequence numbers may skip (never repeat or go back).
    lost_rights: bool,
    /// The host's published state (application keys) as this client last saw it.
    client_seen: [i64; 4],
    /// Frames whose pose this client reported (the last few).
    poses_seen: VecDeque<u32>,
}

fuzz_target!(|data: &[u8]| {
    let (hc, cc) = configs();
    let mut now = 1_000_000u64;
    let mut host = HostSession::new(hc.clone());
    let mut sides: Vec<Side> = (0..2u8)
        .map(|i| {
            let addr: SocketAddr = ([10, 0, 0, 2 + i], 4000).into();
            let cid = 77 + i as u64;
            let (k1, k2) = ([1 + 2 * i; 32], [2 + 2 * i; 32]);
            host.fuzz_connect(now, addr, cid, Suite::ChaCha20Poly1305, k2, k1, 6, false);
            Side {
                addr,
                client: ClientSession::fuzz_connected(
                    cc.clone(),
                    now,
                    cid,
                    Suite::ChaCha20Poly1305,
                    k1,
                    k2,
                    6,
                    false,
                    PARAMS,
                ),
                up: VecDeque::new(),
                down: VecDeque::new(),
                next_seq: 0,
                version: 0,
                lost_rights: false,
                client_seen: [0; 4],
                poses_seen: VecDeque::new(),
            }
        })
        .collect();
    let ids: Vec<_> = host.clients().map(|c| (c.id, c.key)).collect();
    for (side, &(id, _)) in sides.iter_mut().zip(&ids) {
        side.lost_rights = !host.input_applies(id);
    }
    let mut host_seen = 0i32;
    let mut controller_at_seen = host.controller();
    let mut host_version = 0i64;
    for &op in data {
        // Bit 3 picks the client most operations concern.
        let s = usize::from(op & 0x08 != 0);
        let side = &mut sides[s];
        match op >> 4 {
            0 => now += (op as u64 & 7) * 1000,
            1 => {
                let _ = side.client.send_input(
                    now,
                    InputEvent::Key {
                        code: op as u32,
                        down: true,
                    },
                );
            }
            2 => {
                let _ = side
                    .client
                    .send_text(now, "héllo wörld, a longer text than thirty-two bytes");
            }
            3 => {
                side.version += 1;
                side.client.send_state(
                    now,
                    keys::POINTER,
                    StateValue::Pointer {
                        x: side.version,
                        y: 0,
                    },
                );
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
                side.up.pop_front(); // drop
            }
            6 => {
                if let Some(d) = side.up.front().cloned() {
                    side.up.push_back(d); // duplicate, reordered
                }
            }
            7 => {
                if let Some(d) = side.up.front_mut() {
                    let i = op as usize % d.len().max(1);
                    if let Some(b) = d.get_mut(i) {
                        *b ^= 0x40; // corrupt
                    }
                }
            }
            8 => {
                side.down.pop_front();
            }
            9 => {
                if let Some(d) = side.down.pop_front() {
                    side.down.push_back(d);
                }
            }
            10 => {
                if let Some(d) = side.up.pop_front() {
                    host.handle_datagram(now, side.addr, &d);
                }
            }
            11 => {
                if let Some(d) = side.down.pop_front() {
                    side.client.handle_datagram(now, &d);
                }
            }
            12 => {
                // The host's user: the viewer's input granted or taken back, or control
                // handed to one of them; or the client's raw layer-2 offer (PROTOCOL.md
                // §7.3; the host answers below).
                let (id, key) = ids[s];
                match op & 7 {
                    0 => host.grant_input(now, key),
                    1 => host.revoke_input_grant(now, &key),
                    2 | 3 => {
                        host.hand_control(now, id);
                    }
                    _ => side.client.send_link_address(now, 0x88B5, [2, 0, 0, 0, 0, op]),
                }
            }
            13 => {
                // The host publishes state (the channel's other direction, to every client),
                // keys in the application's range.
                host_version += 1;
                host.publish_state(
                    now,
                    keys::APP + (op & 3) as u16,
                    StateValue::Int(host_version),
                );
            }
            _ => {
                if host.poll_timeout().is_some_and(|t| t <= now) {
                    host.handle_timeout(now);
                }
                for side in sides.iter_mut() {
                    if side.client.poll_timeout().is_some_and(|t| t <= now) {
                        side.client.handle_timeout(now);
                    }
                }
            }
        }
        while let Some(t) = host.poll_transmit(now) {
            if let Some(side) = sides.iter_mut().find(|s| s.addr == t.dst) {
                if side.down.len() < 4096 {
                    side.down.push_back(t.payload);
                }
            }
        }
        for side in sides.iter_mut() {
            while let Some(p) = side.client.poll_transmit(now) {
                if side.up.len() < 4096 {
                    side.up.push_back(p);
                }
            }
            while let Some(ev) = side.client.poll_event() {
                if let untether_proto::ClientEvent::FramePose { frame_number, .. } = ev {
                    // Each frame's pose is reported once, whichever copy came first.
                    assert!(
                        !side.poses_seen.contains(&frame_number),
                        "a frame's pose reported twice"
                    );
                    side.poses_seen.push_back(frame_number);
                    if side.poses_seen.len() > 8 {
                        side.poses_seen.pop_front();
                    }
                }
            }
        }
        while let Some(ev) = host.poll_event() {
            match ev {
                HostEvent::Input { client, record } => {
                    let s = ids
                        .iter()
                        .position(|&(id, _)| id == client)
                        .expect("input from a known client");
                    // Applied only while it controls or is granted input.
                    assert!(host.input_applies(client), "input applied without a right");
                    let side = &mut sides[s];
                    // Exactly once and in order per client (with no gap unless it lost its
                    // right for a while: records it sent then were dropped).
                    if side.lost_rights {
                        assert!(record.seq >= side.next_seq, "input out of order or duplicated");
                    } else {
                        assert_eq!(
                            record.seq, side.next_seq,
                            "input lost, out of order or duplicated"
                        );
                    }
                    side.next_seq = record.seq + 1;
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
        for (side, &(id, _)) in sides.iter_mut().zip(&ids) {
            side.lost_rights |= !host.input_applies(id);
        }
        if host.controller() != controller_at_seen {
            // A new controller: the scene's state is now its own.
            controller_at_seen = host.controller();
            host_seen = i32::MIN;
        }
        for side in sides.iter_mut() {
            for k in 0..4u16 {
                if let Some(e) = side.client.state_value(keys::APP + k) {
                    if let StateValue::Int(v) = e.value {
                        assert!(v >= side.client_seen[k as usize], "host state went backwards");
                        side.client_seen[k as usize] = v;
                    }
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
