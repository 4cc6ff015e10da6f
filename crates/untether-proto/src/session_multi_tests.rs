//! Session-level tests of a host serving several clients from one stream: one encode for
//! all, roles and input grants, control hand-over, joins and their keyframes, the client limit.

use std::net::SocketAddr;

use crate::client::{ClientConfig, ClientEvent, ClientSession};
use crate::handshake::{SessionRng, StaticKeypair};
use crate::host::{AccessPolicy, ClientId, HostConfig, HostEvent, HostSession, StreamState};
use crate::wire::{ClientRole, Codec, InputEvent, PacketType, RejectReason, SessionParams};
use crate::{GoneReason, Micros};

pub(crate) fn params() -> SessionParams {
    SessionParams {
        width: 1280,
        height: 720,
        fps: 60,
        codec: Codec::H264,
        bitrate_kbps: 10_000,
        max_datagram: 1200,
        keepalive_ms: 2000,
        idle_timeout_ms: 30_000,
        refresh_period: 0,
    }
}

/// A client of the test host at its own address.
pub(crate) struct Client {
    pub(crate) addr: SocketAddr,
    pub(crate) id: StaticKeypair,
    pub(crate) session: ClientSession,
    pub(crate) events: Vec<ClientEvent>,
    pub(crate) shards: u64,
    /// Drop every this-many-th shard sent to it (0: none).
    pub(crate) drop_every: u64,
    /// Bytes it sent the host.
    pub(crate) bytes_sent: u64,
}

impl Client {
    pub(crate) fn frames(&self) -> Vec<(u32, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                ClientEvent::Frame(f) => Some((f.frame_number, f.keyframe)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn roles(&self) -> Vec<(ClientRole, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                ClientEvent::Role {
                    role,
                    input_granted,
                    ..
                } => Some((*role, *input_granted)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn connected(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, ClientEvent::Connected(_)))
    }
}

pub(crate) struct World {
    pub(crate) host: HostSession,
    pub(crate) now: Micros,
    pub(crate) clients: Vec<Client>,
    pub(crate) host_events: Vec<HostEvent>,
    keys: SessionRng,
}

impl World {
    pub(crate) fn new(seed: u8, max_clients: usize, cooldown_us: Micros) -> World {
        World::with(seed, max_clients, cooldown_us, |_| {})
    }

    /// [`World::new`] with the host's configuration edited by `edit`.
    pub(crate) fn with(
        seed: u8,
        max_clients: usize,
        cooldown_us: Micros,
        edit: impl FnOnce(&mut HostConfig),
    ) -> World {
        let mut keys = SessionRng::from_seed([seed; 32]);
        let host_id = StaticKeypair::generate(&mut keys);
        let mut c = HostConfig::new(params());
        c.identity = host_id;
        c.entropy = [seed.wrapping_add(1); 32];
        c.access = AccessPolicy::Open;
        c.max_clients = max_clients;
        c.keyframe_cooldown_us = cooldown_us;
        edit(&mut c);
        World {
            host: HostSession::new(c),
            now: 1_000_000,
            clients: Vec::new(),
            host_events: Vec::new(),
            keys,
        }
    }

    /// A new client (index returned) that starts connecting now.
    pub(crate) fn add(&mut self) -> usize {
        self.add_with(|_| {})
    }

    /// [`World::add`] with the client's configuration edited by `edit`.
    pub(crate) fn add_with(&mut self, edit: impl FnOnce(&mut ClientConfig)) -> usize {
        let n = self.clients.len();
        let mut c = ClientConfig::new(format!("c{n}"));
        c.identity = StaticKeypair::generate(&mut self.keys);
        c.entropy = [n as u8 + 40; 32];
        c.nonce = 1000 + n as u64;
        edit(&mut c);
        self.clients.push(Client {
            addr: ([10, 0, 1, n as u8 + 1], 4000).into(),
            // The identity it runs with (`edit` may have given it another).
            id: c.identity.clone(),
            session: ClientSession::new(c, self.now),
            events: Vec::new(),
            shards: 0,
            drop_every: 0,
            bytes_sent: 0,
        });
        n
    }

    /// Exchanges datagrams (1 ms each way) until `until` from now.
    pub(crate) fn run(&mut self, until: Micros) {
        let end = self.now + until;
        while self.now < end {
            let mut moved = false;
            for c in &mut self.clients {
                while let Some(d) = c.session.poll_transmit(self.now) {
                    c.bytes_sent += d.len() as u64;
                    self.host.handle_datagram(self.now + 1000, c.addr, &d);
                    moved = true;
                }
            }
            while let Some(t) = self.host.poll_transmit(self.now) {
                if let Some(c) = self.clients.iter_mut().find(|c| c.addr == t.dst) {
                    if t.payload[1] == PacketType::Shard as u8 {
                        c.shards += 1;
                        if c.drop_every > 0 && c.shards % c.drop_every == 0 {
                            moved = true;
                            continue;
                        }
                    }
                    c.session.handle_datagram(self.now + 1000, &t.payload);
                }
                moved = true;
            }
            for c in &mut self.clients {
                while let Some(e) = c.session.poll_event() {
                    c.events.push(e);
                }
            }
            while let Some(e) = self.host.poll_event() {
                self.host_events.push(e);
            }
            if !moved {
                self.now += 1000;
                for c in &mut self.clients {
                    if c.session.poll_timeout().is_some_and(|t| t <= self.now) {
                        c.session.handle_timeout(self.now);
                    }
                }
                if self.host.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.host.handle_timeout(self.now);
                }
            }
        }
    }

    /// The host's id for client `i`.
    pub(crate) fn id(&self, i: usize) -> ClientId {
        let key = self.clients[i].id.public;
        self.host
            .clients()
            .find(|c| c.key == key)
            .map(|c| c.id)
            .expect("connected")
    }

    /// Keyframe requests the host application was handed so far (and forgets them).
    pub(crate) fn keyframe_requests(&mut self) -> usize {
        let n = self
            .host_events
            .iter()
            .filter(|e| matches!(e, HostEvent::KeyframeRequested))
            .count();
        self.host_events
            .retain(|e| !matches!(e, HostEvent::KeyframeRequested));
        n
    }

    /// The host application: one frame (a keyframe if one was asked for).
    pub(crate) fn frame(&mut self, number: u32, keyframe_wanted: &mut bool) {
        let key = std::mem::take(keyframe_wanted);
        let data = crate::sim::frame_payload(number, key, if key { 9000 } else { 3000 });
        let _ = self.host.send_frame(self.now, number, self.now, key, &data);
        self.run(16_000);
        if self.keyframe_requests() > 0 {
            *keyframe_wanted = true;
        }
    }
}

#[test]
fn four_clients_take_one_stream_encoded_once_each_from_its_first_keyframe() {
    let mut w = World::new(1, 8, 50_000);
    let mut want_key = true;
    for _ in 0..4 {
        w.add();
    }
    w.run(300_000);
    assert!(w.clients.iter().all(Client::connected));
    assert_eq!(w.host.client_count(), 4);
    // One keyframe asked for all four joins (they came within the cooldown).
    assert!(w.keyframe_requests() <= 2);
    for n in 0..60 {
        w.frame(n, &mut want_key);
    }
    let st = w.host.stats();
    // Each frame was packetized once and sent to every client.
    assert_eq!(st.frames_sent, 60);
    assert_eq!(st.frame_copies_sent, 240);
    for (i, c) in w.clients.iter().enumerate() {
        let f = c.frames();
        assert_eq!(f.len(), 60, "client {i}: {} frames", f.len());
        assert!(f[0].1, "client {i} starts on a keyframe");
        assert!(f.windows(2).all(|p| p[1].0 == p[0].0 + 1));
    }
    // Roles: the first to connect controls, the others watch, and each was told.
    let roles: Vec<Vec<(ClientRole, bool)>> = w.clients.iter().map(Client::roles).collect();
    assert_eq!(roles[0], vec![(ClientRole::Controller, false)]);
    for r in &roles[1..] {
        assert_eq!(r, &vec![(ClientRole::Viewer, false)]);
    }
    assert_eq!(w.host.controller(), Some(w.id(0)));
    let status = w.host.client_status();
    assert!(status
        .iter()
        .all(|s| s.state == StreamState::Live && s.frames_sent == 60));
}

#[test]
fn a_client_joining_mid_stream_waits_for_the_keyframe_its_join_asks_for() {
    let mut w = World::new(2, 8, 50_000);
    let mut want_key = true;
    w.add();
    w.run(300_000);
    for n in 0..20 {
        w.frame(n, &mut want_key);
    }
    assert!(!want_key);
    let late = w.add();
    // The join itself asks for a keyframe (no loss needed); until it comes, no video at all.
    w.run(200_000);
    assert!(w.clients[late].connected());
    assert_eq!(w.clients[late].shards, 0);
    let before = w.host.stats().keyframes_for_joins;
    w.frame(20, &mut want_key);
    assert!(want_key, "the join asked for a keyframe");
    assert_eq!(w.host.stats().keyframes_for_joins, before);
    for n in 21..40 {
        w.frame(n, &mut want_key);
    }
    let f = w.clients[late].frames();
    assert_eq!(f.first(), Some(&(21, true)), "{f:?}");
    assert_eq!(f.len(), 19);
    // The first client saw every frame.
    assert_eq!(w.clients[0].frames().len(), 40);
    // Its frames before the keyframe were skipped, not sent.
    let s = w.host.client_status();
    assert_eq!(s[1].frames_skipped, 1);
}

#[test]
fn joins_within_the_cooldown_share_one_keyframe() {
    let mut w = World::new(3, 8, 200_000);
    w.add();
    w.run(100_000);
    assert_eq!(w.keyframe_requests(), 1);
    // Two more within the 200 ms cooldown: no keyframe until it ends …
    w.add();
    w.add();
    w.run(50_000);
    assert_eq!(w.keyframe_requests(), 0);
    // … then one, for both (the first client had its keyframe long ago, but these did not).
    w.run(200_000);
    assert_eq!(w.keyframe_requests(), 1);
    let mut want_key = true;
    w.frame(0, &mut want_key);
    w.run(300_000);
    // Nobody waits any more: no further keyframe for joins.
    assert_eq!(w.keyframe_requests(), 0);
    assert!(w.clients.iter().all(|c| c.frames() == vec![(0, true)]));
}

fn key(seq: u32) -> InputEvent {
    InputEvent::Key {
        code: 4 + seq,
        down: true,
    }
}

fn inputs_from(w: &World, client: ClientId) -> usize {
    w.host_events
        .iter()
        .filter(|e| matches!(e, HostEvent::Input { client: c, .. } if *c == client))
        .count()
}

#[test]
fn a_viewers_input_is_dropped_and_counted_unless_granted() {
    let mut w = World::new(4, 8, 50_000);
    let (ctl, viewer) = (w.add(), w.add());
    w.run(300_000);
    let (ctl_id, viewer_id) = (w.id(ctl), w.id(viewer));
    for s in 0..5 {
        w.clients[ctl].session.send_input(w.now, key(s));
        w.clients[viewer].session.send_input(w.now, key(s));
    }
    w.run(100_000);
    assert_eq!(inputs_from(&w, ctl_id), 5);
    assert_eq!(inputs_from(&w, viewer_id), 0);
    let s = &w.host.client_status()[1];
    assert_eq!((s.inputs_received, s.inputs_dropped), (5, 5));
    assert_eq!(w.host.stats().inputs_dropped_viewer, 5);
    // Dropped, but acknowledged: the viewer's channel does not stall or resend.
    assert!(w.clients[viewer]
        .events
        .iter()
        .any(|e| matches!(e, ClientEvent::InputAcked { next_expected: 5 })));
    // Granted: its input goes through from then on, and it is told.
    let viewer_key = w.clients[viewer].id.public;
    w.host.grant_input(w.now, viewer_key);
    for s in 5..8 {
        w.clients[viewer].session.send_input(w.now, key(s));
    }
    w.run(300_000);
    assert_eq!(inputs_from(&w, viewer_id), 3);
    assert_eq!(
        w.clients[viewer].roles().last(),
        Some(&(ClientRole::Viewer, true))
    );
    assert!(w.host_events.iter().any(|e| matches!(
        e,
        HostEvent::RoleChanged { client, role: ClientRole::Viewer, input_granted: true }
            if *client == viewer_id
    )));
    // Revoked: dropped again.
    w.host.revoke_input_grant(w.now, &viewer_key);
    w.clients[viewer].session.send_input(w.now, key(8));
    w.run(300_000);
    assert_eq!(inputs_from(&w, viewer_id), 3);
    assert_eq!(w.host.client_status()[1].inputs_dropped, 6);
}

#[test]
fn control_is_handed_over_and_passes_on_when_the_controller_leaves() {
    let mut w = World::new(5, 8, 50_000);
    let (a, b, c) = (w.add(), w.add(), w.add());
    w.run(300_000);
    let (a_id, b_id, c_id) = (w.id(a), w.id(b), w.id(c));
    assert_eq!(w.host.controller(), Some(a_id));
    // Hand control to c: c controls, a watches; both told.
    assert!(w.host.hand_control(w.now, c_id));
    w.run(300_000);
    assert_eq!(w.host.controller(), Some(c_id));
    assert_eq!(
        w.clients[a].roles().last(),
        Some(&(ClientRole::Viewer, false))
    );
    assert_eq!(
        w.clients[c].roles().last(),
        Some(&(ClientRole::Controller, false))
    );
    w.clients[a].session.send_input(w.now, key(0));
    w.clients[c].session.send_input(w.now, key(0));
    w.run(100_000);
    assert_eq!((inputs_from(&w, a_id), inputs_from(&w, c_id)), (0, 1));
    // c leaves: the longest-connected client left (a) takes over.
    w.clients[c].session.close(w.now);
    w.run(300_000);
    assert!(w.host_events.iter().any(|e| matches!(
        e,
        HostEvent::ClientGone { client, reason: GoneReason::Bye, .. } if *client == c_id
    )));
    assert_eq!(w.host.controller(), Some(a_id));
    assert_eq!(
        w.clients[a].roles().last(),
        Some(&(ClientRole::Controller, false))
    );
    assert_eq!(w.clients[b].roles(), vec![(ClientRole::Viewer, false)]);
    // c comes back (a new run of the same key): control was handed to it, so it takes it.
    let c_key = w.clients[c].id.clone();
    let mut cfg = ClientConfig::new("c again");
    cfg.identity = c_key;
    cfg.entropy = [99; 32];
    cfg.nonce = 77;
    w.clients[c].session = ClientSession::new(cfg, w.now);
    w.clients[c].events.clear();
    w.run(300_000);
    let c_new = w.id(c);
    assert_ne!(c_new, c_id, "a new session, a new number");
    assert_eq!(w.host.controller(), Some(c_new));
    assert_eq!(
        w.clients[a].roles().last(),
        Some(&(ClientRole::Viewer, false))
    );
    // Without a preference, the current controller keeps control when others come and go.
    w.host.set_preferred_controller(w.now, None);
    w.run(10_000);
    assert_eq!(w.host.controller(), Some(c_new));
    let _ = b_id;
}

#[test]
fn a_full_host_refuses_with_busy_and_a_restarted_client_keeps_its_place_and_role() {
    let mut w = World::new(6, 2, 50_000);
    let (a, _b) = (w.add(), w.add());
    w.run(300_000);
    let third = w.add();
    w.run(300_000);
    let refused = w.clients[third].events.iter().find_map(|e| match e {
        ClientEvent::Rejected { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let (reason, message) = refused.expect("refused");
    assert_eq!(reason, RejectReason::Busy);
    assert!(message.contains("maximum of 2 clients"), "{message}");
    // The controller restarts: it replaces its old session, keeps control, and the full
    // host does not refuse it.
    let id = w.clients[a].id.clone();
    let mut cfg = ClientConfig::new("a again");
    cfg.identity = id;
    cfg.entropy = [98; 32];
    cfg.nonce = 78;
    w.clients[a].session = ClientSession::new(cfg, w.now);
    w.clients[a].events.clear();
    w.run(300_000);
    assert!(w.clients[a].connected());
    assert_eq!(w.host.client_count(), 2);
    assert_eq!(w.host.controller(), Some(w.id(a)));
    assert!(w.host_events.iter().any(|e| matches!(
        e,
        HostEvent::ClientGone {
            reason: GoneReason::Replaced,
            ..
        }
    )));
}

#[test]
fn audio_and_the_host_goodbye_reach_every_client() {
    let mut w = World::new(7, 8, 50_000);
    for _ in 0..3 {
        w.add();
    }
    w.run(300_000);
    let packet = crate::audio::AudioPacket {
        seq: 1,
        pts_us: w.now,
        samples: 480,
        opus: vec![1, 2, 3],
        prev_opus: Vec::new(),
    };
    assert_eq!(w.host.send_audio(w.now, &packet), Ok(3));
    w.run(10_000);
    w.host.close(w.now);
    w.run(100_000);
    for c in &w.clients {
        assert!(c.events.iter().any(|e| matches!(e, ClientEvent::Audio(_))));
        assert!(c
            .events
            .contains(&ClientEvent::HostGone(GoneReason::ShuttingDown)));
    }
    assert_eq!(w.host.client_count(), 0);
}

/// A room of clients switched on together: every Hello first, every message 3 late (busy
/// clients). Returns how many connected.
fn room(max_handshakes: usize) -> (usize, u64) {
    let mut w = World::new(8, 32, 50_000);
    let mut c = HostConfig::new(params());
    c.identity = StaticKeypair::generate(&mut w.keys);
    c.entropy = [8; 32];
    c.max_clients = 32;
    c.max_handshakes = max_handshakes;
    w.host = HostSession::new(c);
    for _ in 0..32 {
        w.add();
    }
    // Every Hello reaches the host and every HelloReply its client …
    for c in &mut w.clients {
        while let Some(d) = c.session.poll_transmit(w.now) {
            w.host.handle_datagram(w.now, c.addr, &d);
        }
    }
    while let Some(t) = w.host.poll_transmit(w.now) {
        if let Some(c) = w.clients.iter_mut().find(|c| c.addr == t.dst) {
            c.session.handle_datagram(w.now, &t.payload);
        }
    }
    // … before any message 3.
    w.run(1_000_000);
    let n = w.clients.iter().filter(|c| c.connected()).count();
    (n, w.host.stats().handshakes_evicted)
}

#[test]
fn a_room_of_clients_switched_on_together_connects_when_the_handshake_table_holds_them() {
    // The table as the runtime sizes it (2 × max_clients): everyone connects.
    assert_eq!(room(64), (32, 0));
    // The protocol's bare default of 16: the later Hellos evict the earlier handshakes.
    let (n, evicted) = room(16);
    assert!(n < 32 && evicted > 0, "{n} connected, {evicted} evicted");
}

/// One stream, one codec: the first client chooses it among the host's, a client that joins is
/// given it (whatever it prefers), and one that cannot decode it is refused naming both lists.
#[test]
fn the_first_client_chooses_the_streams_codec_and_the_others_join_it_or_are_refused() {
    use crate::host::CodecOffer;
    let mut w = World::with(7, 8, 50_000, |c| {
        c.codecs = vec![
            CodecOffer {
                codec: Codec::H264,
                refresh_period: 0,
            },
            CodecOffer {
                codec: Codec::Hevc,
                refresh_period: 30,
            },
        ];
    });
    let connected = |c: &Client| {
        c.events.iter().find_map(|e| match e {
            ClientEvent::Connected(p) => Some(*p),
            _ => None,
        })
    };
    w.add_with(|c| c.codecs = vec![Codec::Av1, Codec::Hevc, Codec::H264]);
    w.run(300_000);
    let first = connected(&w.clients[0]).expect("the first client connects");
    assert_eq!(
        first.codec,
        Codec::Hevc,
        "its first choice the host encodes"
    );
    assert_eq!(first.refresh_period, 30, "with that codec's refresh period");
    assert_eq!(w.host.params().codec, Codec::Hevc, "the stream's codec");
    // A self-refreshing stream: the first client's join asked for no keyframe.
    assert_eq!(w.keyframe_requests(), 0);
    w.add_with(|c| c.codecs = vec![Codec::H264, Codec::Hevc]);
    w.run(300_000);
    let second = connected(&w.clients[1]).expect("the second client connects");
    assert_eq!(
        second.codec,
        Codec::Hevc,
        "the stream's codec, not its first choice"
    );
    w.add_with(|c| c.codecs = vec![Codec::H264]);
    w.run(300_000);
    assert!(connected(&w.clients[2]).is_none());
    let refused = w.clients[2].events.iter().find_map(|e| match e {
        ClientEvent::Rejected { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let (reason, message) = refused.expect("refused");
    assert_eq!(reason, RejectReason::Codec);
    assert!(
        message.contains("hevc") && message.contains("h264"),
        "{message}"
    );
    assert!(w.host_events.iter().any(|e| matches!(
        e,
        HostEvent::ClientRefused { reason: RejectReason::Codec, message: m, .. } if *m == message
    )));
    assert_eq!(w.host.client_count(), 2);
}

/// What the host publishes reaches every client on its own channel, a late one included; a
/// frame's pose goes to the controller only.
#[test]
fn published_state_reaches_every_client_and_a_frames_pose_only_the_controller() {
    use crate::state::{keys, StateValue};
    let mut w = World::new(8, 8, 50_000);
    assert!(w.host.publish_state(w.now, keys::APP, StateValue::Int(5)));
    w.add();
    w.add();
    w.run(300_000);
    assert_eq!(w.host.client_count(), 2);
    assert!(w
        .host
        .publish_state(w.now, keys::APP + 1, StateValue::Int(6)));
    w.add();
    w.run(500_000);
    assert_eq!(w.host.client_count(), 3);
    for (i, c) in w.clients.iter().enumerate() {
        for (k, v) in [(keys::APP, 5), (keys::APP + 1, 6)] {
            let got = c.session.state_value(k).map(|e| e.value);
            assert_eq!(got, Some(StateValue::Int(v)), "client {i}, key {k:#x}");
        }
    }
    let controller = w.host.controller().expect("a controller");
    let sample = crate::pose::PoseSample {
        sample_us: 1234,
        pose: crate::pose::Pose::from_angles(10.0, 0.0, 0.0, [0.0, 1.5, 0.0]),
    };
    w.host.send_frame_pose(w.now, 77, sample);
    w.run(50_000);
    for (i, c) in w.clients.iter().enumerate() {
        let poses = c
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ClientEvent::FramePose {
                        frame_number: 77,
                        ..
                    }
                )
            })
            .count();
        let is_controller = w.id(i) == controller;
        assert_eq!(poses, is_controller as usize, "client {i}");
    }
}

/// A stream that refreshes itself: a client that joins asks for no keyframe and is sent
/// nothing until a sweep starts (its shards flagged), then every frame.
#[test]
fn a_join_on_a_self_refreshing_stream_waits_for_the_next_sweep_without_a_keyframe() {
    let mut w = World::with(9, 8, 50_000, |c| c.params.refresh_period = 4);
    w.add();
    w.run(300_000);
    let mut number = 0u32;
    let mut send = |w: &mut World, key: bool| {
        let refresh = !key && number.is_multiple_of(4);
        let data = crate::sim::frame_payload(number, key, 3000);
        let _ = w
            .host
            .send_frame_flagged(w.now, number, w.now, key, refresh, &data);
        number += 1;
        w.run(16_000);
    };
    send(&mut w, true);
    for _ in 0..5 {
        send(&mut w, false);
    }
    w.keyframe_requests();
    w.add();
    w.run(300_000);
    assert_eq!(w.host.client_count(), 2);
    for _ in 0..10 {
        send(&mut w, false);
    }
    assert_eq!(w.keyframe_requests(), 0, "a join asks for no keyframe");
    let status = w.host.client_status();
    let joiner = &status[1];
    assert_eq!(joiner.state, StreamState::Live);
    assert!(joiner.frames_skipped > 0, "nothing before the sweep");
    // Its first frame is the sweep's start (numbers 8 or 12 here), and it held nothing it
    // could not decode: the session delivered each frame after it.
    let got: Vec<u32> = w.clients[1]
        .events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Frame(f) => Some(f.frame_number),
            _ => None,
        })
        .collect();
    assert!(!got.is_empty(), "the joiner got frames");
    assert_eq!(got[0] % 4, 0, "it starts at a sweep: {got:?}");
    assert!(got.windows(2).all(|p| p[1] == p[0] + 1), "{got:?}");
}

/// Issue 33, item 6: a client killed without a goodbye. The old host kept its slot, its role
/// and its full-rate stream until the 30 s idle timeout (a killed controller was replaced
/// after 29.6 s; 50 vanished viewers drew 333 → 460 Mbit/s to dead ports). Now it falls
/// silent after `silence_us` (5 s): control passes on, nothing more is sent to it; heard
/// again, it is live from the next keyframe, as a viewer.
#[test]
fn a_vanished_controller_is_replaced_and_sent_nothing_within_seconds_and_may_come_back() {
    let mut w = World::new(41, 8, 50_000);
    let mut want_key = true;
    let (a, b) = (w.add(), w.add());
    w.run(300_000);
    let (a_id, b_id) = (w.id(a), w.id(b));
    assert_eq!(w.host.controller(), Some(a_id));
    for n in 0..10 {
        w.frame(n, &mut want_key);
    }
    let status = |w: &World, id: ClientId| {
        w.host
            .client_status()
            .into_iter()
            .find(|s| s.info.id == id)
            .expect("still connected")
    };
    // A vanishes: nothing more from it, nothing reaches it.
    let gone = w.clients.remove(a);
    let vanished_at = w.now;
    let mut n = 10;
    while w.host.controller() != Some(b_id) {
        w.frame(n, &mut want_key);
        n += 1;
        assert!(
            w.now < vanished_at + 6_000_000,
            "control was not handed on within 6 s"
        );
    }
    // Not before two keep-alives could have been missed (its last Feedback came ≤ 100 ms
    // before it vanished).
    assert!(
        w.now >= vanished_at + 4_800_000,
        "{} µs",
        w.now - vanished_at
    );
    assert_eq!(status(&w, a_id).state, StreamState::Silent);
    assert_eq!(w.host.stats().clients_silenced, 1);
    // B was told it controls now.
    assert_eq!(
        w.clients[0].roles().last(),
        Some(&(ClientRole::Controller, false))
    );
    // Two more seconds of stream: not one frame more to the vanished client's address.
    let sent = status(&w, a_id).frames_sent;
    for _ in 0..120 {
        w.frame(n, &mut want_key);
        n += 1;
    }
    assert_eq!(status(&w, a_id).frames_sent, sent);
    assert!(
        w.host.client_count() == 2,
        "its slot stays until the idle timeout"
    );
    // A comes back in range: heard again, it is live from the next keyframe, as a viewer.
    let shown_before = gone.frames().len();
    w.clients.push(gone);
    for _ in 0..30 {
        w.frame(n, &mut want_key);
        n += 1;
    }
    assert_eq!(w.host.stats().clients_heard_again, 1);
    let told: Vec<bool> = w
        .host_events
        .iter()
        .filter_map(|e| match e {
            HostEvent::ClientSilent { client, silent } if *client == a_id => Some(*silent),
            _ => None,
        })
        .collect();
    assert_eq!(told, [true, false], "the application is told both ways");
    assert_eq!(status(&w, a_id).state, StreamState::Live);
    assert_eq!(
        w.host.controller(),
        Some(b_id),
        "control stays where it went"
    );
    let back = &w.clients[1].frames()[shown_before..];
    assert!(
        !back.is_empty() && back[0].1,
        "it restarts on a keyframe: {back:?}"
    );
    assert_eq!(
        w.clients[1].roles().last(),
        Some(&(ClientRole::Viewer, false))
    );
}

#[test]
fn silence_is_never_judged_within_two_and_a_half_keep_alives() {
    let mut c = HostConfig::new(params());
    assert_eq!(
        c.silence_after_us(),
        5_000_000,
        "2 s keep-alive: the 5 s default"
    );
    c.params.keepalive_ms = 4_000;
    assert_eq!(c.silence_after_us(), 10_000_000);
    c.silence_us = 20_000_000;
    assert_eq!(c.silence_after_us(), 20_000_000);
}

#[test]
fn a_restarted_host_holds_control_for_its_last_controller_and_then_passes_it_on() {
    let last = StaticKeypair::generate(&mut SessionRng::from_seed([77; 32]));
    let mut w = World::new(8, 4, 50_000);
    w.host
        .hold_control_for(w.now, last.public, w.now + 3_000_000);
    // Another client is back first: it watches, nobody controls meanwhile.
    let b = w.add();
    w.run(300_000);
    assert_eq!(w.host.controller(), None);
    assert_eq!(w.clients[b].roles(), vec![(ClientRole::Viewer, false)]);
    // The last run's controller is back: it controls, the other was never the controller.
    let id = last.clone();
    let a = w.add_with(move |c| c.identity = id);
    w.run(300_000);
    assert_eq!(w.host.controller(), Some(w.id(a)));
    assert_eq!(w.clients[b].roles(), vec![(ClientRole::Viewer, false)]);
    assert_eq!(
        w.clients[a].roles().last(),
        Some(&(ClientRole::Controller, false))
    );
    // It does not come back: when the hold is up, the longest-connected client controls.
    let mut w = World::new(9, 4, 50_000);
    w.host
        .hold_control_for(w.now, last.public, w.now + 2_000_000);
    let b = w.add();
    w.run(1_000_000);
    assert_eq!(w.host.controller(), None);
    w.run(1_200_000);
    assert_eq!(w.host.controller(), Some(w.id(b)));
    assert_eq!(
        w.clients[b].roles().last(),
        Some(&(ClientRole::Controller, false))
    );
}

#[test]
fn the_client_learns_which_encoder_makes_the_stream_beside_the_accept() {
    let encoder = crate::wire::HostEncoder {
        encoder: "libx264".into(),
        preset: "ultrafast".into(),
        conversion: "libyuv".into(),
    };
    let told = encoder.clone();
    let mut w = World::with(10, 2, 50_000, move |c| c.encoder = Some(told));
    let a = w.add();
    w.run(300_000);
    assert!(w.clients[a].connected());
    assert_eq!(w.clients[a].session.host_encoder(), Some(&encoder));
    // A host that does not say: nothing to name.
    let mut w = World::new(11, 2, 50_000);
    let a = w.add();
    w.run(300_000);
    assert!(w.clients[a].connected());
    assert_eq!(w.clients[a].session.host_encoder(), None);
}

#[test]
fn a_connected_client_learns_the_encoder_that_opened_later() {
    let named = |encoder: &str| crate::wire::HostEncoder {
        encoder: encoder.into(),
        preset: "ultrafast".into(),
        conversion: "simd".into(),
    };
    let first = named("auto");
    let mut w = World::with(12, 2, 50_000, move |c| c.encoder = Some(first));
    let a = w.add();
    w.run(300_000);
    assert_eq!(w.clients[a].session.host_encoder(), Some(&named("auto")));
    w.host.set_host_encoder(Some(named("libx264")));
    w.run(300_000);
    assert_eq!(w.clients[a].session.host_encoder(), Some(&named("libx264")));
    assert_eq!(w.host.host_encoder(), Some(&named("libx264")));
}
