//! Session-level tests of the security properties: pairing, revocation, replay and tampering,
//! version negotiation, host-key pinning, round trips of the handshake.

use std::net::SocketAddr;

use crate::admission::{Admission, AdmissionConfig, CredentialKind, Decision, Incoming};
use crate::client::{ClientConfig, ClientEvent, ClientSession};
use crate::handshake::{SessionRng, StaticKeypair};
use crate::host::{AccessPolicy, HostConfig, HostEvent, HostSession, PairingEvent, PairingPin};
use crate::wire::{self, Codec, InputEvent, PacketType, RejectReason, SessionParams};
use crate::{GoneReason, Micros};

const CLIENT: ([u8; 4], u16) = ([10, 0, 0, 2], 4000);

fn params() -> SessionParams {
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

struct World {
    host: HostSession,
    now: Micros,
    /// Datagrams the client received, by type byte.
    shards_to_client: u64,
}

fn ids(seed: u8) -> (StaticKeypair, StaticKeypair) {
    let mut rng = SessionRng::from_seed([seed; 32]);
    (
        StaticKeypair::generate(&mut rng),
        StaticKeypair::generate(&mut rng),
    )
}

fn host(host_id: &StaticKeypair, access: AccessPolicy, allowed: Vec<[u8; 32]>) -> World {
    let mut c = HostConfig::new(params());
    c.identity = host_id.clone();
    c.entropy = [4; 32];
    c.access = access;
    c.allowed_clients = allowed;
    World {
        host: HostSession::new(c),
        now: 1_000_000,
        shards_to_client: 0,
    }
}

fn client(w: &World, id: &StaticKeypair, pin: Option<&str>, nonce: u64) -> ClientSession {
    let mut c = ClientConfig::new("test");
    c.identity = id.clone();
    c.entropy = [nonce as u8; 32];
    c.nonce = nonce;
    c.pin = pin.map(str::to_string);
    ClientSession::new(c, w.now)
}

/// Exchanges datagrams (1 ms each way) until quiet or `until`; returns client events.
fn run(w: &mut World, c: &mut ClientSession, until: Micros) -> Vec<ClientEvent> {
    let addr: SocketAddr = CLIENT.into();
    let mut events = Vec::new();
    let end = w.now + until;
    while w.now < end {
        let mut moved = false;
        while let Some(d) = c.poll_transmit(w.now) {
            w.host.handle_datagram(w.now + 1000, addr, &d);
            moved = true;
        }
        while let Some(t) = w.host.poll_transmit(w.now) {
            if t.payload[1] == PacketType::Shard as u8 {
                w.shards_to_client += 1;
            }
            c.handle_datagram(w.now + 1000, &t.payload);
            moved = true;
        }
        while let Some(e) = c.poll_event() {
            events.push(e);
        }
        if !moved {
            w.now += 1000;
            if c.poll_timeout().is_some_and(|t| t <= w.now) {
                c.handle_timeout(w.now);
            }
            if w.host.poll_timeout().is_some_and(|t| t <= w.now) {
                w.host.handle_timeout(w.now);
            }
        }
    }
    events
}

fn connected(ev: &[ClientEvent]) -> bool {
    ev.iter().any(|e| matches!(e, ClientEvent::Connected(_)))
}

fn rejected(ev: &[ClientEvent]) -> Option<(RejectReason, String)> {
    ev.iter().find_map(|e| match e {
        ClientEvent::Rejected { reason, message } => Some((*reason, message.clone())),
        _ => None,
    })
}

#[test]
fn an_unpaired_client_gets_no_video_and_leaves_an_access_request() {
    let (hid, cid) = ids(1);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    let mut c = client(&w, &cid, None, 11);
    let ev = run(&mut w, &mut c, 500_000);
    assert!(!connected(&ev));
    let (reason, msg) = rejected(&ev).expect("a clear refusal");
    assert_eq!(reason, RejectReason::PendingApproval);
    assert!(msg.contains("untether pair"), "{msg}");
    assert!(w.host.client().is_none());
    assert!(w.host.send_frame(w.now, 0, 0, true, &[1; 5000]).is_err());
    assert_eq!(w.shards_to_client, 0);
    let req: Vec<_> = w.host.access_requests().cloned().collect();
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].key, cid.public);
    assert_eq!(req[0].fingerprint, crate::fingerprint(&cid.public));
    assert!(matches!(
        w.host.poll_pairing_event(),
        Some(PairingEvent::AccessRequested(_))
    ));
    // Approved: the next attempt connects, and video flows.
    w.host.allow_client(cid.public);
    let mut c = client(&w, &cid, None, 12);
    let ev = run(&mut w, &mut c, 300_000);
    assert!(connected(&ev));
    assert_eq!(w.host.access_requests().count(), 0);
    assert!(w.host.send_frame(w.now, 0, 0, true, &[1; 5000]).is_ok());
    let ev = run(&mut w, &mut c, 50_000);
    assert!(ev.iter().any(|e| matches!(e, ClientEvent::Frame(_))));
}

#[test]
fn a_revoked_client_is_refused() {
    let (hid, cid) = ids(2);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let mut c = client(&w, &cid, None, 21);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    w.host.revoke_client(w.now, cid.public);
    assert!(w.host.client().is_none());
    let ev = run(&mut w, &mut c, 100_000);
    assert!(ev.contains(&ClientEvent::HostGone(GoneReason::Bye)));
    let mut c = client(&w, &cid, None, 22);
    let (reason, msg) = rejected(&run(&mut w, &mut c, 300_000)).unwrap();
    assert_eq!(reason, RejectReason::NotAllowed);
    assert!(msg.contains("revoked"));
    assert_eq!(w.host.access_requests().count(), 0);
}

#[test]
fn pin_pairing_pairs_once_and_counts_wrong_pins() {
    let (hid, cid) = ids(3);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    // No PIN active: a clear refusal before any key exchange work.
    let mut c = client(&w, &cid, Some("123456"), 31);
    assert_eq!(
        rejected(&run(&mut w, &mut c, 300_000)).unwrap().0,
        RejectReason::Pin
    );
    w.host.set_pin(Some(PairingPin {
        pin: "123456".into(),
        expires_us: w.now + 60_000_000,
        attempts_left: 2,
    }));
    let mut c = client(&w, &cid, Some("654321"), 32);
    let (reason, msg) = rejected(&run(&mut w, &mut c, 300_000)).unwrap();
    assert_eq!(reason, RejectReason::Pin);
    assert!(msg.contains("1 attempts left"), "{msg}");
    assert!(matches!(
        w.host.poll_pairing_event(),
        Some(PairingEvent::PinFailed {
            attempts_left: 1,
            ..
        })
    ));
    let mut c = client(&w, &cid, Some("123456"), 33);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    assert!(w.host.is_allowed(&cid.public));
    assert!(w.host.pin().is_none(), "a PIN pairs once");
    assert!(matches!(
        w.host.poll_pairing_event(),
        Some(PairingEvent::Paired { key, .. }) if key == cid.public
    ));
    // Known now: connects without a PIN.
    let mut c = client(&w, &cid, None, 34);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
}

/// Issue 35: one admission for every door. Wrong passwords at another door (RTSP here, a
/// browser's PIN alike) refuse the address's PIN handshakes, before any key exchange and
/// without taking the PIN's attempts; wrong PINs here teach the other doors.
#[test]
fn pin_handshakes_go_through_the_hosts_one_admission() {
    let (hid, cid) = ids(27);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    let shared = Admission::new(AdmissionConfig::default());
    w.host.share_admission(shared.clone());
    assert!(w.host.admission().same(&shared));
    w.host.set_pin(Some(PairingPin {
        pin: "123456".into(),
        expires_us: w.now + 600_000_000,
        attempts_left: 3,
    }));
    let ip = SocketAddr::from(CLIENT).ip();
    let rtsp = Incoming::connection(ip, CredentialKind::RtspDigest);
    for _ in 0..AdmissionConfig::default().free_failures {
        assert_eq!(shared.decide(w.now, &rtsp), Decision::Accept);
        shared.checked(w.now, &rtsp, false);
    }
    // The right PIN, from that address: refused (after a Retry proved the address), told
    // when to come back; the PIN keeps its attempts.
    let mut c = client(&w, &cid, Some("123456"), 71);
    let (reason, msg) = rejected(&run(&mut w, &mut c, 300_000)).expect("refused");
    assert_eq!(reason, RejectReason::Pin);
    assert!(
        msg.contains("too many wrong PINs, links or passwords"),
        "{msg}"
    );
    assert_eq!(w.host.pin().map(|p| p.attempts_left), Some(3));
    assert!(w.host.stats().pin_attempts_refused >= 1);
    assert!(!w.host.is_allowed(&cid.public));
    // Once the refusal is over (10 s), a wrong PIN here is one more failure of the address
    // at every door: refused again, twice as long (20 s); then the right one pairs and ends
    // the streak.
    w.now += 11_000_000;
    let failures = shared.stats().failures;
    let mut c = client(&w, &cid, Some("000000"), 72);
    assert_eq!(
        rejected(&run(&mut w, &mut c, 300_000)).map(|r| r.0),
        Some(RejectReason::Pin)
    );
    assert_eq!(shared.stats().failures, failures + 1);
    let until = shared.refused_until(w.now, ip).expect("refused again");
    assert!(until > w.now + 19_000_000, "twice as long");
    assert!(!shared.decide(w.now, &rtsp).accepted());
    w.now = until + 1;
    let mut c = client(&w, &cid, Some("123456"), 73);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    assert!(w.host.is_allowed(&cid.public));
    assert_eq!(shared.refused_until(w.now, ip), None);
    assert_eq!(shared.decide(w.now, &rtsp), Decision::Accept);
}

#[test]
fn pin_attempts_are_limited_and_expire() {
    let (hid, cid) = ids(4);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    w.host.set_pin(Some(PairingPin {
        pin: "111111".into(),
        expires_us: w.now + 60_000_000,
        attempts_left: 1,
    }));
    let mut c = client(&w, &cid, Some("222222"), 41);
    run(&mut w, &mut c, 300_000);
    assert!(w.host.pin().is_none(), "used up");
    let mut c = client(&w, &cid, Some("111111"), 42);
    assert!(!connected(&run(&mut w, &mut c, 300_000)));
    w.host.set_pin(Some(PairingPin {
        pin: "111111".into(),
        expires_us: w.now + 1000,
        attempts_left: 3,
    }));
    w.now += 10_000;
    let mut c = client(&w, &cid, Some("111111"), 43);
    assert!(!connected(&run(&mut w, &mut c, 300_000)), "expired");
}

#[test]
fn replayed_and_tampered_datagrams_are_rejected() {
    let (hid, cid) = ids(5);
    let mut w = host(&hid, AccessPolicy::Open, vec![]);
    let mut c = client(&w, &cid, None, 51);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    while w.host.poll_event().is_some() {}
    let addr: SocketAddr = CLIENT.into();
    c.send_input(
        w.now,
        InputEvent::Key {
            code: 7,
            down: true,
        },
    );
    let d = c.poll_transmit(w.now).unwrap();
    w.host.handle_datagram(w.now, addr, &d);
    let inputs = |h: &mut HostSession| {
        let mut n = 0;
        while let Some(e) = h.poll_event() {
            n += matches!(e, HostEvent::Input { .. }) as u32;
        }
        n
    };
    assert_eq!(inputs(&mut w.host), 1);
    let before = w.host.stats();
    w.host.handle_datagram(w.now, addr, &d);
    assert_eq!(inputs(&mut w.host), 0);
    assert_eq!(
        w.host.stats().duplicate_datagrams,
        before.duplicate_datagrams + 1
    );
    // Tampered copies of a fresh datagram: each byte flipped is refused.
    c.send_input(
        w.now,
        InputEvent::Key {
            code: 8,
            down: true,
        },
    );
    let d = c.poll_transmit(w.now).unwrap();
    for i in wire::HEADER_LEN..d.len() {
        let mut t = d.clone();
        t[i] ^= 0x20;
        w.host.handle_datagram(w.now, addr, &t);
    }
    assert_eq!(inputs(&mut w.host), 0);
    assert_eq!(
        w.host.stats().auth_failures,
        before.auth_failures + (d.len() - wire::HEADER_LEN) as u64
    );
    // The genuine one still gets through afterwards (failures are not recorded as seen).
    w.host.handle_datagram(w.now, addr, &d);
    assert_eq!(inputs(&mut w.host), 1);
}

#[test]
fn a_future_version_client_gets_a_clear_version_error() {
    let (hid, cid) = ids(6);
    let mut w = host(&hid, AccessPolicy::Open, vec![]);
    let addr: SocketAddr = CLIENT.into();
    // A version-2 client's first datagram (≥ 1200 bytes).
    let mut d = vec![2u8, 0x01];
    d.resize(1200, 0);
    w.host.handle_datagram(w.now, addr, &d);
    let t = w.host.poll_transmit(w.now).expect("a version negotiation");
    assert_eq!(t.payload[0], wire::VERSION_NEGOTIATION);
    assert!(t.payload.len() < 3 * d.len());
    let vn = wire::VersionNegotiation::parse(&t.payload).unwrap();
    assert_eq!(vn.versions, vec![wire::VERSION]);
    // A short datagram of another version gets nothing (no amplification).
    w.host.handle_datagram(w.now, addr, &d[..100]);
    assert!(w.host.poll_transmit(w.now).is_none());
    // And our client, facing a host that speaks only version 7, says so (at the connect
    // timeout: until then an authentic answer could still come, the negotiation is not
    // authenticated).
    let mut c = client(&w, &cid, None, 61);
    let mut vn7 = Vec::new();
    wire::VersionNegotiation {
        versions: vec![7],
        message: "upgrade".into(),
    }
    .encode(&mut vn7);
    c.handle_datagram(w.now, &vn7);
    w.now += 3_000_000;
    c.handle_timeout(w.now);
    let ev: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    let (reason, msg) = rejected(&ev).unwrap();
    assert_eq!(reason, RejectReason::Version);
    assert!(msg.contains("[7]") && msg.contains("upgrade"), "{msg}");
}

#[test]
fn a_client_refuses_a_host_with_another_key() {
    let (hid, cid) = ids(7);
    let mut w = host(&hid, AccessPolicy::Open, vec![]);
    let mut cfg = ClientConfig::new("test");
    cfg.identity = cid;
    cfg.host_key = Some([9; 32]);
    let mut c = ClientSession::new(cfg, w.now);
    let (reason, msg) = rejected(&run(&mut w, &mut c, 300_000)).unwrap();
    assert_eq!(reason, RejectReason::UntrustedHost);
    assert!(msg.contains(&crate::fingerprint(&hid.public)));
}

#[test]
fn the_handshake_takes_two_round_trips() {
    let (hid, cid) = ids(8);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let start = w.now;
    let mut c = client(&w, &cid, None, 81);
    let addr: SocketAddr = CLIENT.into();
    // One-way delay 10 ms: count the trips until Connected.
    let mut trips = 0;
    let mut connected_at = None;
    while connected_at.is_none() && trips < 10 {
        let up: Vec<_> = std::iter::from_fn(|| c.poll_transmit(w.now)).collect();
        w.now += 10_000;
        trips += 1;
        for d in up {
            w.host.handle_datagram(w.now, addr, &d);
        }
        let down: Vec<_> = std::iter::from_fn(|| w.host.poll_transmit(w.now)).collect();
        w.now += 10_000;
        trips += 1;
        for t in down {
            c.handle_datagram(w.now, &t.payload);
        }
        if std::iter::from_fn(|| c.poll_event()).any(|e| matches!(e, ClientEvent::Connected(_))) {
            connected_at = Some(w.now);
        }
    }
    assert_eq!(
        connected_at,
        Some(start + 40_000),
        "2 RTT = 4 one-way trips"
    );
    assert_eq!(trips, 4);
}

#[test]
fn a_lost_accept_rides_again_ahead_of_the_next_video_frame() {
    let (hid, cid) = ids(9);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let start = w.now;
    let mut c = client(&w, &cid, None, 91);
    let addr: SocketAddr = CLIENT.into();
    let mut dropped_accept = false;
    let mut connected_at = None;
    let mut frames = 0;
    let data = vec![7u8; 20_000];
    let mut next_frame = start + 20_000;
    let mut n = 0;
    while w.now < start + 150_000 {
        while let Some(d) = c.poll_transmit(w.now) {
            w.host.handle_datagram(w.now + 500, addr, &d);
        }
        if w.host.client().is_some() && w.now >= next_frame {
            w.host.send_frame(w.now, n, w.now, n == 0, &data).unwrap();
            n += 1;
            next_frame += 16_667;
        }
        while let Some(t) = w.host.poll_transmit(w.now) {
            if t.payload[1] == PacketType::Control as u8 && !dropped_accept {
                // The Accept, the host's first protected datagram: lost.
                dropped_accept = true;
                continue;
            }
            c.handle_datagram(w.now + 500, &t.payload);
        }
        while let Some(e) = c.poll_event() {
            match e {
                ClientEvent::Connected(_) => connected_at = Some(w.now),
                ClientEvent::Frame(_) => frames += 1,
                _ => {}
            }
        }
        w.now += 1000;
        if c.poll_timeout().is_some_and(|t| t <= w.now) {
            c.handle_timeout(w.now);
        }
        if w.host.poll_timeout().is_some_and(|t| t <= w.now) {
            w.host.handle_timeout(w.now);
        }
    }
    assert!(dropped_accept);
    // Connected with the first video frame, long before the HelloFinish repeat (200 ms).
    let at = connected_at.expect("connected") - start;
    assert!(at <= 25_000, "connected after {at} µs");
    assert!(w.host.stats().accepts_repeated >= 1);
    assert!(frames >= 7, "{frames} frames");
}

#[test]
fn a_restarted_client_replaces_its_session_but_another_client_is_busy() {
    let (hid, cid) = ids(9);
    let (_, other) = ids(10);
    // A host serving one client at a time (host.max_clients = 1).
    let mut w = host(
        &hid,
        AccessPolicy::Allowlist,
        vec![cid.public, other.public],
    );
    let mut c = HostConfig::new(params());
    c.identity = hid.clone();
    c.entropy = [4; 32];
    c.access = AccessPolicy::Allowlist;
    c.allowed_clients = vec![cid.public, other.public];
    c.max_clients = 1;
    w.host = HostSession::new(c);
    let mut c = client(&w, &cid, None, 91);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    let mut o = client(&w, &other, None, 92);
    let (reason, message) = rejected(&run(&mut w, &mut o, 300_000)).unwrap();
    assert_eq!(reason, RejectReason::Busy);
    assert!(message.contains("maximum of 1 client"), "{message}");
    assert!(message.contains("max_clients"), "{message}");
    let mut c2 = client(&w, &cid, None, 93);
    assert!(connected(&run(&mut w, &mut c2, 300_000)));
    let gone: Vec<_> = std::iter::from_fn(|| w.host.poll_event()).collect();
    assert!(gone.iter().any(|e| matches!(
        e,
        HostEvent::ClientGone {
            reason: GoneReason::Replaced,
            ..
        }
    )));
}

// ---- issue 15: PIN attempts, anti-amplification, peer text ----------------------------------

/// Runs a handshake up to the client's message 3 and returns the HelloFinish datagram,
/// undelivered (the host's answers are for this client only: handshakes are opened one by
/// one).
fn open_handshake(w: &mut World, c: &mut ClientSession, addr: SocketAddr) -> Vec<u8> {
    while let Some(d) = c.poll_transmit(w.now) {
        w.host.handle_datagram(w.now, addr, &d);
    }
    while let Some(t) = w.host.poll_transmit(w.now) {
        assert_eq!(t.dst, addr);
        c.handle_datagram(w.now, &t.payload);
    }
    let d = c.poll_transmit(w.now).expect("message 3");
    assert_eq!(d[1], PacketType::HelloFinish as u8);
    d
}

/// Delivers one datagram to the host and returns the client's events from the answers.
fn deliver(w: &mut World, c: &mut ClientSession, addr: SocketAddr, d: &[u8]) -> Vec<ClientEvent> {
    w.host.handle_datagram(w.now, addr, d);
    while let Some(t) = w.host.poll_transmit(w.now) {
        if t.dst == addr {
            c.handle_datagram(w.now, &t.payload);
        }
    }
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn paired(h: &mut HostSession) -> (u32, u32) {
    let (mut failed, mut paired) = (0, 0);
    while let Some(e) = h.poll_pairing_event() {
        match e {
            PairingEvent::PinFailed { .. } => failed += 1,
            PairingEvent::Paired { .. } => paired += 1,
            PairingEvent::AccessRequested(_) => {}
        }
    }
    (failed, paired)
}

#[test]
fn concurrent_pin_guesses_never_get_more_checks_than_the_attempts() {
    // Issue 15, item 2: 16 handshakes opened before any message 3 against a 3-attempt PIN.
    // With the correct guess opened first and read last, the old host checked all 16 (15
    // failures, then the correct PIN paired although the attempts were used up).
    for correct_at in [0usize, 8, 15] {
        let (hid, _) = ids(20);
        let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
        w.host.set_pin(Some(PairingPin {
            pin: "123456".into(),
            expires_us: w.now + 60_000_000,
            attempts_left: 3,
        }));
        let mut clients = Vec::new();
        for k in 0..16usize {
            let (_, id) = ids(100 + k as u8);
            let pin = if k == correct_at { "123456" } else { "000000" };
            let mut c = client(&w, &id, Some(pin), 200 + k as u64);
            let addr: SocketAddr = ([10, 0, 1, k as u8], 5000).into();
            let msg3 = open_handshake(&mut w, &mut c, addr);
            clients.push((c, addr, msg3, id.public));
        }
        // Every wrong guess first, the correct one last.
        let mut order: Vec<usize> = (0..16).filter(|&k| k != correct_at).collect();
        order.push(correct_at);
        for k in order {
            let (c, addr, msg3, _) = &mut clients[k];
            deliver(&mut w, c, *addr, msg3);
        }
        let (failed, paired) = paired(&mut w.host);
        let s = w.host.stats();
        assert_eq!(u64::from(failed), s.pin_failures);
        assert!(
            failed + paired <= 3,
            "correct guess #{correct_at}: {failed} failures and {paired} pairings were checked"
        );
        let correct_key = clients[correct_at].3;
        if failed == 3 {
            assert!(
                !w.host.is_allowed(&correct_key),
                "the correct PIN after the attempts were used up must be refused"
            );
        }
        assert!(w.host.pin().is_none(), "used up or used");
    }
}

/// Issue 33, item 8: 150 unauthenticated PIN Hellos a second (message 1 only) while a real
/// client pairs. The old host held one PIN attempt per PIN handshake in progress and let the
/// newest push the oldest out, so the flood evicted the real client's handshake before its
/// message 3 arrived and the correct PIN failed. Now nothing but the table's size bounds PIN
/// handshakes, and a full table makes room from the busiest address.
#[test]
fn a_flood_of_pin_hellos_does_not_take_a_real_pairing_away() {
    for distinct in [1u8, 8] {
        let (hid, _) = ids(25);
        let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
        w.host.set_pin(Some(PairingPin {
            pin: "123456".into(),
            expires_us: w.now + 60_000_000,
            attempts_left: 3,
        }));
        let (_, real) = ids(26);
        let real_addr: SocketAddr = ([10, 0, 3, 1], 5000).into();
        let mut c = client(&w, &real, Some("123456"), 7);
        let msg3 = open_handshake(&mut w, &mut c, real_addr);
        // A second of flood, one Hello every 6.7 ms, from `distinct` addresses.
        for k in 0..150u64 {
            let mut seed = [0x33; 32];
            seed[..8].copy_from_slice(&k.to_le_bytes());
            let id = StaticKeypair::generate(&mut SessionRng::from_seed(seed));
            let mut f = client(&w, &id, Some("000000"), 3000 + k);
            let from: SocketAddr = ([10, 0, 4, (k % distinct as u64) as u8 + 1], 6000).into();
            while let Some(d) = f.poll_transmit(w.now) {
                w.host.handle_datagram(w.now, from, &d);
            }
            while w.host.poll_transmit(w.now).is_some() {}
            w.now += 6_667;
        }
        let ev = deliver(&mut w, &mut c, real_addr, &msg3);
        assert!(
            connected(&ev),
            "from {distinct} address(es): the real pairing failed: {:?}",
            rejected(&ev)
        );
        assert!(w.host.is_allowed(&real.public));
        assert_eq!(paired(&mut w.host), (0, 1));
    }
}

#[test]
fn a_pin_guess_is_checked_only_under_the_live_pin() {
    let (hid, _) = ids(21);
    let pin = |w: &World, attempts| PairingPin {
        pin: "123456".into(),
        expires_us: w.now + 60_000_000,
        attempts_left: attempts,
    };
    // Two clients with the correct PIN at once: the PIN pairs one of them only.
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    w.host.set_pin(Some(pin(&w, 3)));
    let (_, a) = ids(22);
    let (_, b) = ids(23);
    let (addr_a, addr_b): (SocketAddr, SocketAddr) =
        (([10, 0, 2, 1], 5000).into(), ([10, 0, 2, 2], 5000).into());
    let mut ca = client(&w, &a, Some("123456"), 1);
    let mut cb = client(&w, &b, Some("123456"), 2);
    let ma = open_handshake(&mut w, &mut ca, addr_a);
    let mb = open_handshake(&mut w, &mut cb, addr_b);
    assert!(connected(&deliver(&mut w, &mut ca, addr_a, &ma)));
    let ev = deliver(&mut w, &mut cb, addr_b, &mb);
    let (reason, msg) = rejected(&ev).expect("the second is refused");
    assert_eq!(reason, RejectReason::Pin);
    assert!(msg.contains("no longer active"), "{msg}");
    assert!(w.host.is_allowed(&a.public));
    assert!(
        !w.host.is_allowed(&b.public),
        "a one-time PIN paired two keys"
    );
    assert_eq!(paired(&mut w.host), (0, 1));

    // A PIN that expired between the Hello and message 3.
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    w.host.set_pin(Some(PairingPin {
        expires_us: w.now + 50_000,
        ..pin(&w, 3)
    }));
    let mut ca = client(&w, &a, Some("123456"), 3);
    let ma = open_handshake(&mut w, &mut ca, addr_a);
    w.now += 100_000;
    let ev = deliver(&mut w, &mut ca, addr_a, &ma);
    assert_eq!(rejected(&ev).map(|r| r.0), Some(RejectReason::Pin));
    assert!(!w.host.is_allowed(&a.public), "paired with an expired PIN");

    // A PIN replaced meanwhile (`untether pair --pin` again): the old one's guess is not read.
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    w.host.set_pin(Some(pin(&w, 3)));
    let mut ca = client(&w, &a, Some("123456"), 4);
    let ma = open_handshake(&mut w, &mut ca, addr_a);
    w.host.set_pin(Some(PairingPin {
        pin: "999999".into(),
        ..pin(&w, 3)
    }));
    assert_eq!(w.host.handshakes_in_progress(), 0);
    deliver(&mut w, &mut ca, addr_a, &ma);
    assert!(!w.host.is_allowed(&a.public), "paired with a replaced PIN");
    assert_eq!(w.host.pin().map(|p| p.attempts_left), Some(3));
}

/// Sums what the host sends to `addr`.
fn sent_to(h: &mut HostSession, now: Micros, addr: SocketAddr) -> (u64, u64) {
    let (mut n, mut bytes) = (0, 0);
    while let Some(t) = h.poll_transmit(now) {
        if t.dst == addr {
            n += 1;
            bytes += t.payload.len() as u64;
        }
    }
    (n, bytes)
}

#[test]
fn a_refused_handshake_answers_forged_hello_finishes_within_three_times_their_bytes() {
    // Issue 15, item 5: 200 forged HelloFinish datagrams at a refused handshake drew the
    // stored protected Reject each, 12.4× their bytes.
    let (hid, cid) = ids(24);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    let addr: SocketAddr = CLIENT.into();
    let mut c = client(&w, &cid, None, 1);
    let msg3 = open_handshake(&mut w, &mut c, addr);
    let ev = deliver(&mut w, &mut c, addr, &msg3);
    assert_eq!(rejected(&ev).unwrap().0, RejectReason::PendingApproval);
    // Forged: the right address and handshake id (an on-path attacker), any body.
    let mut forged_bytes = 0;
    let mut answered = 0;
    for i in 0..200u32 {
        w.now += 5_000;
        let mut f = msg3[..wire::HEADER_LEN].to_vec();
        f.extend_from_slice(&i.to_be_bytes());
        f.extend_from_slice(&[0xAA; 4]);
        forged_bytes += f.len() as u64;
        w.host.handle_datagram(w.now, addr, &f);
        answered += sent_to(&mut w.host, w.now, addr).1;
    }
    assert!(
        answered <= 3 * forged_bytes,
        "{answered} bytes answered {forged_bytes} forged bytes"
    );
    // The client's real repeats (its Reject was lost) are answered, at most once per
    // interval, within the budget.
    let (mut n, mut bytes, mut received) = (0, 0, 0);
    for _ in 0..200 {
        w.now += 5_000;
        received += msg3.len() as u64;
        w.host.handle_datagram(w.now, addr, &msg3);
        let (k, b) = sent_to(&mut w.host, w.now, addr);
        n += k;
        bytes += b;
    }
    assert!(n >= 1, "a lost Reject is sent again");
    assert!(
        n <= 1_000_000 / crate::host::HANDSHAKE_REPEAT_ANSWER_US,
        "{n} answers in 1 s"
    );
    assert!(bytes <= 3 * received);
}

#[test]
fn an_accepted_clients_repeated_hello_finish_draws_at_most_one_accept_per_interval() {
    // Issue 15, item 5: each repeated cleartext HelloFinish queued a new Accept.
    let (hid, cid) = ids(25);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let addr: SocketAddr = CLIENT.into();
    let mut c = client(&w, &cid, None, 1);
    let msg3 = open_handshake(&mut w, &mut c, addr);
    w.host.handle_datagram(w.now, addr, &msg3);
    assert!(w.host.client().is_some());
    // The Accept is lost.
    assert_eq!(sent_to(&mut w.host, w.now, addr).0, 1);
    // Forged copies (other bytes, same handshake id) draw nothing.
    for i in 0..200u32 {
        w.now += 1_000;
        let mut f = msg3.clone();
        let last = f.len() - 1;
        f[last] ^= 1 + (i % 255) as u8;
        w.host.handle_datagram(w.now, addr, &f);
        assert_eq!(
            sent_to(&mut w.host, w.now, addr).0,
            0,
            "a forged HelloFinish"
        );
    }
    // 200 copies of the real one in a second: at most one Accept per interval.
    let mut accepts = Vec::new();
    for _ in 0..200 {
        w.now += 5_000;
        w.host.handle_datagram(w.now, addr, &msg3);
        let (n, _) = sent_to(&mut w.host, w.now, addr);
        accepts.extend(std::iter::repeat_n(w.now, n as usize));
    }
    assert!(!accepts.is_empty(), "a lost Accept is sent again");
    assert!(
        accepts
            .windows(2)
            .all(|p| p[1] - p[0] >= crate::host::HANDSHAKE_REPEAT_ANSWER_US),
        "{accepts:?}"
    );
    // Once the client is heard under the session keys it has the Accept: no more.
    w.host.handle_datagram(w.now, addr, &msg3);
    let ev = {
        let mut ev = Vec::new();
        w.now += crate::host::HANDSHAKE_REPEAT_ANSWER_US;
        w.host.handle_datagram(w.now, addr, &msg3);
        while let Some(t) = w.host.poll_transmit(w.now) {
            c.handle_datagram(w.now, &t.payload);
        }
        ev.extend(std::iter::from_fn(|| c.poll_event()));
        ev
    };
    assert!(connected(&ev));
    c.send_input(
        w.now,
        InputEvent::Key {
            code: 1,
            down: true,
        },
    );
    while let Some(d) = c.poll_transmit(w.now) {
        w.host.handle_datagram(w.now, addr, &d);
    }
    sent_to(&mut w.host, w.now, addr);
    for _ in 0..10 {
        w.now += crate::host::HANDSHAKE_REPEAT_ANSWER_US;
        w.host.handle_datagram(w.now, addr, &msg3);
        assert_eq!(
            sent_to(&mut w.host, w.now, addr).0,
            0,
            "confirmed: no Accept"
        );
    }
}

#[test]
fn a_multipath_copy_with_a_bad_tag_earns_no_reply_budget() {
    // Issue 15, item 5: a copy from a known path was credited to its 3× budget before (without)
    // its tag being checked, so a spoofer could buy PathChallenges at a victim's address.
    let (hid, cid) = ids(26);
    let mut w = host(&hid, AccessPolicy::Open, vec![]);
    let a: SocketAddr = CLIENT.into();
    let b: SocketAddr = ([192, 0, 2, 9], 7000).into();
    let mut c = client(&w, &cid, None, 1);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    c.send_input(
        w.now,
        InputEvent::Key {
            code: 1,
            down: true,
        },
    );
    let d = c.poll_transmit(w.now).unwrap();
    w.host.handle_datagram(w.now, a, &d);
    // The client's copy on its second path: authentic, so B becomes an unvalidated path.
    w.host.handle_datagram(w.now, b, &d);
    let authentic_from_b = d.len() as u64;
    let mut to_b = sent_to(&mut w.host, w.now, b).1;
    let before = w.host.stats();
    // Forged copies from B (a victim's address): the header of a seen packet, any body.
    for i in 0..100u8 {
        let mut f = d[..wire::HEADER_LEN].to_vec();
        f.resize(1200, i);
        w.host.handle_datagram(w.now, b, &f);
        let mut t = d.clone();
        let last = t.len() - 1;
        t[last] ^= 1 | i;
        w.host.handle_datagram(w.now, b, &t);
    }
    let s = w.host.stats();
    assert_eq!(s.auth_failures, before.auth_failures + 200);
    let path_b = w
        .host
        .path_stats()
        .into_iter()
        .find(|p| p.addr == b)
        .unwrap();
    assert!(!path_b.validated);
    assert_eq!(
        path_b.datagrams_received, 1,
        "only the authentic copy counts"
    );
    // B never answers: over 3 s of probes it gets at most 3× what it really sent.
    for _ in 0..300 {
        w.now += 10_000;
        w.host.handle_timeout(w.now);
        to_b += sent_to(&mut w.host, w.now, b).1;
    }
    assert!(to_b > 0, "the path was challenged");
    assert!(
        to_b <= 3 * authentic_from_b,
        "{to_b} bytes to an unvalidated path that sent {authentic_from_b}"
    );
}

#[test]
fn a_forged_version_negotiation_does_not_end_a_handshake() {
    // Issue 15, item 6: a Version Negotiation carries no handshake id, so anyone can send one;
    // it must not end an attempt that may still get (or already got) an authentic answer.
    let (hid, cid) = ids(27);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let addr: SocketAddr = CLIENT.into();
    let mut vn = Vec::new();
    wire::VersionNegotiation {
        versions: vec![7],
        message: "\u{1b}[2J\u{1b}]0;pwned\u{7}upgrade".into(),
    }
    .encode(&mut vn);
    let mut c = client(&w, &cid, None, 1);
    // Before the HelloReply …
    c.handle_datagram(w.now, &vn);
    assert!(!c.is_closed());
    let msg3 = open_handshake(&mut w, &mut c, addr);
    // … and after it (the host answered under its key: it speaks our version).
    c.handle_datagram(w.now, &vn);
    assert!(!c.is_closed());
    let ev = deliver(&mut w, &mut c, addr, &msg3);
    assert!(connected(&ev), "{ev:?}");
    assert!(rejected(&ev).is_none());
    assert_eq!(c.stats().version_negotiations_received, 1);

    // A host that really speaks another version: the client says so at the connect timeout,
    // with the host's text escaped.
    let mut c = client(&w, &cid, None, 2);
    let start = w.now;
    while c.poll_transmit(w.now).is_some() {}
    c.handle_datagram(w.now, &vn);
    let mut ev = Vec::new();
    while !c.is_closed() {
        w.now = c.poll_timeout().expect("a timer while connecting");
        c.handle_timeout(w.now);
        while c.poll_transmit(w.now).is_some() {}
        ev.extend(std::iter::from_fn(|| c.poll_event()));
    }
    assert!(
        w.now >= start + 3_000_000,
        "gave up before the connect timeout"
    );
    let (reason, msg) = rejected(&ev).expect("a version error, not a timeout");
    assert_eq!(reason, RejectReason::Version);
    assert!(!ev.contains(&ClientEvent::ConnectTimeout));
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    assert!(msg.contains("[7]") && msg.contains("upgrade"), "{msg}");
}

#[test]
fn a_clients_name_reaches_the_host_escaped() {
    let (hid, cid) = ids(28);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    let mut cfg = ClientConfig::new("\u{1b}[2Jevil\nhost: paired with admin");
    cfg.identity = cid.clone();
    cfg.entropy = [5; 32];
    let mut c = ClientSession::new(cfg, w.now);
    run(&mut w, &mut c, 300_000);
    let req: Vec<_> = w.host.access_requests().cloned().collect();
    assert_eq!(req.len(), 1);
    assert!(
        !req[0].name.chars().any(char::is_control),
        "{:?}",
        req[0].name
    );
    assert!(req[0].name.contains("evil"));
}

/// A host and a client that say which clock they read, connected; the client's estimate after.
fn clock_after_connect(
    host_clock: Option<[u8; 16]>,
    client_clock: Option<[u8; 16]>,
) -> (bool, Option<crate::ClockEstimate>) {
    let (hid, cid) = ids(40);
    let mut c = HostConfig::new(params());
    c.identity = hid.clone();
    c.entropy = [4; 32];
    c.access = AccessPolicy::Open;
    c.clock_id = host_clock;
    let mut w = World {
        host: HostSession::new(c),
        now: 1_000_000,
        shards_to_client: 0,
    };
    let mut cc = ClientConfig::new("test");
    cc.identity = cid.clone();
    cc.entropy = [41; 32];
    cc.nonce = 41;
    cc.clock_id = client_clock;
    let mut client = ClientSession::new(cc, w.now);
    assert!(connected(&run(&mut w, &mut client, 300_000)));
    // Ping/pong for a while so an estimate exists either way.
    run(&mut w, &mut client, 2_000_000);
    (client.shares_clock(), client.clock())
}

#[test]
fn a_shared_clock_gives_an_exact_zero_offset_and_a_different_one_an_estimate() {
    let (shared, est) = clock_after_connect(Some([7; 16]), Some([7; 16]));
    assert!(shared);
    let est = est.expect("an offset");
    assert_eq!((est.offset_us, est.uncertainty_us), (0, 0));
    // Different machines (or one side does not say): the ping/pong estimate.
    let (shared, _) = clock_after_connect(Some([7; 16]), Some([8; 16]));
    assert!(!shared);
    let (shared, _) = clock_after_connect(None, Some([7; 16]));
    assert!(!shared);
    let (shared, _) = clock_after_connect(Some([7; 16]), None);
    assert!(!shared);
}

/// Runs one fresh client (a new key) from `addr` until it is refused; returns the refusal.
fn request_from(w: &mut World, seed: u64, addr: SocketAddr) -> (RejectReason, String) {
    let mut s = [0x5a; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    let id = StaticKeypair::generate(&mut SessionRng::from_seed(s));
    let mut c = client(w, &id, None, 1000 + seed);
    let end = w.now + 300_000;
    let mut refusal = None;
    while w.now < end && refusal.is_none() {
        while let Some(d) = c.poll_transmit(w.now) {
            w.host.handle_datagram(w.now + 1000, addr, &d);
        }
        while let Some(t) = w.host.poll_transmit(w.now) {
            c.handle_datagram(w.now + 1000, &t.payload);
        }
        while let Some(e) = c.poll_event() {
            if let ClientEvent::Rejected { reason, message } = e {
                refusal = Some((reason, message));
            }
        }
        w.now += 1000;
        if c.poll_timeout().is_some_and(|t| t <= w.now) {
            c.handle_timeout(w.now);
        }
        if w.host.poll_timeout().is_some_and(|t| t <= w.now) {
            w.host.handle_timeout(w.now);
        }
    }
    refusal.expect("an unknown client is refused")
}

/// Issue 15, item 1 and issue 33, item 5: a flood of access requests never keeps a waiting
/// client's request off the list (approval goes by fingerprint, so the list's order names
/// nothing). New requests are limited per address and minute; beyond the list's size a new one
/// takes the place of the least recently asked of the busiest address. On the old host, 80
/// requests from 40 addresses filled the 32 places and the real client was refused.
#[test]
fn a_flood_of_access_requests_cannot_keep_a_waiting_client_off_the_list() {
    let (hid, cid) = ids(9);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![]);
    let mut c = client(&w, &cid, None, 91);
    let (reason, _) = rejected(&run(&mut w, &mut c, 300_000)).unwrap();
    assert_eq!(reason, RejectReason::PendingApproval);
    let per_minute = HostConfig::new(params()).access_requests_per_minute as usize;
    let max = HostConfig::new(params()).max_access_requests;
    // Forty fresh keys from one address: only `per_minute` are recorded.
    let flood: SocketAddr = ([10, 0, 0, 66], 5000).into();
    for i in 0..40 {
        let (reason, msg) = request_from(&mut w, i, flood);
        assert_eq!(reason, RejectReason::PendingApproval);
        if i as usize >= per_minute {
            assert!(
                msg.contains("not recorded") && msg.contains("this address"),
                "{msg}"
            );
        }
    }
    let pending: Vec<_> = w.host.access_requests().map(|r| r.key).collect();
    assert_eq!(pending.len(), 1 + per_minute, "{pending:?}");
    assert_eq!(pending[0], cid.public, "the real request stays first");
    let refused = w.host.stats().access_requests_refused;
    assert_eq!(refused, (40 - per_minute) as u64);
    // 80 requests from 40 addresses of the client's own network (a LAN flood), while the
    // real client, waiting for approval, asks again now and then.
    for i in 0..80u64 {
        let addr: SocketAddr = ([10, 0, 0, 100 + (i / 2) as u8], 5000).into();
        let (_, msg) = request_from(&mut w, 100 + i, addr);
        assert!(!msg.contains("not recorded"), "{i}: {msg}");
        if i % 8 == 7 {
            let mut c = client(&w, &cid, None, 500 + i);
            let (_, msg) = rejected(&run(&mut w, &mut c, 300_000)).unwrap();
            assert!(msg.contains("untether pair approve"), "{msg}");
        }
        assert!(
            w.host.access_requests().any(|r| r.key == cid.public),
            "the waiting client's request was pushed out by flood request {i}"
        );
    }
    assert_eq!(w.host.access_requests().count(), max);
    let stats = w.host.stats();
    assert_eq!(stats.access_requests_refused, refused, "none refused");
    assert_eq!(
        stats.access_requests_evicted,
        (1 + per_minute + 80 - max) as u64
    );
    // The busiest address made room first: the single-address flood's requests are gone.
    assert_eq!(
        w.host.access_requests().filter(|r| r.addr == flood).count(),
        0
    );
    // A minute later the flooding address may ask again: recorded, in someone's place.
    w.now += 61_000_000;
    let mut c = client(&w, &cid, None, 999);
    rejected(&run(&mut w, &mut c, 300_000)).unwrap();
    let (_, msg) = request_from(&mut w, 300, flood);
    assert!(msg.contains("untether pair approve"), "{msg}");
    assert_eq!(w.host.access_requests().count(), max);
    assert!(w.host.access_requests().any(|r| r.key == cid.public));
}

#[test]
fn the_host_gives_each_client_its_first_codec_it_can_encode_or_names_both_lists() {
    let (hid, cid) = ids(31);
    let mut w = host(&hid, AccessPolicy::Open, vec![]);
    let mut cfg = HostConfig::new(params());
    cfg.identity = hid.clone();
    cfg.entropy = [4; 32];
    cfg.access = AccessPolicy::Open;
    cfg.codecs = [Codec::H264, Codec::Hevc]
        .map(|codec| crate::host::CodecOffer {
            codec,
            refresh_period: if codec == Codec::Hevc { 30 } else { 0 },
        })
        .to_vec();
    w.host = HostSession::new(cfg);
    // A Raspberry Pi 5 prefers HEVC: it gets HEVC though the host lists H.264 first.
    let mut cc = ClientConfig::new("pi5");
    cc.identity = cid.clone();
    cc.entropy = [7; 32];
    cc.codecs = vec![Codec::Hevc, Codec::H264];
    let mut c = ClientSession::new(cc, w.now);
    let ev = run(&mut w, &mut c, 300_000);
    let p = ev
        .iter()
        .find_map(|e| match e {
            ClientEvent::Connected(p) => Some(*p),
            _ => None,
        })
        .expect("connected");
    assert_eq!(p.codec, Codec::Hevc);
    // …with that codec's refresh period.
    assert_eq!(p.refresh_period, 30);
    assert_eq!(w.host.params().codec, Codec::Hevc);
    c.close(w.now);
    run(&mut w, &mut c, 50_000);
    // An AV1-only client: refused, both lists named, on both sides.
    let mut cc = ClientConfig::new("av1");
    cc.identity = cid.clone();
    cc.entropy = [8; 32];
    cc.nonce = 2;
    cc.codecs = vec![Codec::Av1];
    let mut c = ClientSession::new(cc, w.now);
    let ev = run(&mut w, &mut c, 300_000);
    assert!(!connected(&ev));
    let (reason, msg) = rejected(&ev).expect("refused");
    assert_eq!(reason, RejectReason::Codec);
    assert!(msg.contains("h264, hevc") && msg.contains("av1"), "{msg}");
    let host_saw = std::iter::from_fn(|| w.host.poll_event()).find_map(|e| match e {
        HostEvent::ClientRefused {
            reason: RejectReason::Codec,
            message,
            ..
        } => Some(message),
        _ => None,
    });
    assert_eq!(host_saw.as_deref(), Some(msg.as_str()));
}

#[test]
fn link_addresses_are_exchanged_sealed_after_the_accept() {
    let (hid, cid) = ids(41);
    let mut w = host(&hid, AccessPolicy::Allowlist, vec![cid.public]);
    let mut c = client(&w, &cid, None, 41);
    // Before the Accept an offer is not sent at all.
    c.send_link_address(w.now, 0x88B5, [2, 0, 0, 0, 0, 1]);
    assert!(connected(&run(&mut w, &mut c, 300_000)));
    while w.host.poll_event().is_some() {}
    c.send_link_address(w.now, 0x88B5, [2, 0, 0, 0, 0, 1]);
    // The offer travels sealed: its MAC address is not in the clear.
    let d = c.poll_transmit(w.now).expect("the offer");
    assert!(!d.windows(6).any(|x| x == [2, 0, 0, 0, 0, 1]));
    let addr: SocketAddr = CLIENT.into();
    w.host.handle_datagram(w.now, addr, &d);
    let offered: Vec<HostEvent> = std::iter::from_fn(|| w.host.poll_event()).collect();
    assert!(
        offered.contains(&HostEvent::LinkAddress {
            addr,
            ethertype: 0x88B5,
            mac: [2, 0, 0, 0, 0, 1]
        }),
        "{offered:?}"
    );
    // The host answers with its own; a frame of another kind is not sent this way.
    w.host.send_link_frame(
        w.now,
        addr,
        wire::ControlFrame::LinkAddress {
            ethertype: 0x88B5,
            mac: [2, 0, 0, 0, 0, 2],
        },
    );
    w.host.send_link_frame(
        w.now,
        addr,
        wire::ControlFrame::Bye {
            reason: wire::ByeReason::Closed,
        },
    );
    let ev = run(&mut w, &mut c, 20_000);
    assert!(ev.contains(&ClientEvent::LinkAddress {
        ethertype: 0x88B5,
        mac: [2, 0, 0, 0, 0, 2]
    }));
    assert!(!ev.iter().any(|e| matches!(e, ClientEvent::HostGone(_))));
    w.host.send_link_frame(
        w.now,
        addr,
        wire::ControlFrame::LinkDeclined {
            reason: wire::LinkDeclineReason::HostUsesUdp,
        },
    );
    let ev = run(&mut w, &mut c, 20_000);
    assert!(ev.contains(&ClientEvent::LinkDeclined(
        wire::LinkDeclineReason::HostUsesUdp
    )));
}
