use super::*;

const S: Micros = 1_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("a test address")
}

fn knock(a: &mut AdmissionState, now: Micros, from: &str, kind: CredentialKind) -> Decision {
    a.decide(now, &Incoming::connection(ip(from), kind))
}

/// A wrong credential from `from`, accepted first.
fn guess(a: &mut AdmissionState, now: Micros, from: &str) -> Option<Failure> {
    let i = Incoming::connection(ip(from), CredentialKind::Pin);
    assert_eq!(a.decide(now, &i), Decision::Accept, "at {now}");
    a.checked(now, &i, false)
}

/// Lots of budget, so that the throttle's tests see only the throttle.
fn roomy() -> AdmissionConfig {
    AdmissionConfig {
        burst: 1_000_000,
        ..AdmissionConfig::default()
    }
}

#[test]
fn the_budget_is_a_burst_then_one_per_refill_per_address() {
    let mut a = AdmissionState::default();
    let cfg = *a.config();
    for _ in 0..cfg.burst {
        assert!(knock(&mut a, 0, "192.0.2.1", CredentialKind::LinkToken).accepted());
    }
    // Whatever the door or the credential: the address's one budget is used up.
    let d = knock(&mut a, S / 2, "192.0.2.1", CredentialKind::RtspDigest);
    assert_eq!(
        d,
        Decision::Refuse {
            reason: RefuseReason::Budget,
            retry_after_us: cfg.refill_every_us - S / 2,
        }
    );
    // A datagram from it, its source not validated, is asked to prove it.
    let dgram = Incoming::datagram(ip("192.0.2.1"), CredentialKind::NoiseKey, false);
    assert_eq!(a.decide(S / 2, &dgram), Decision::Retry);
    // Another address has its own.
    assert!(knock(&mut a, 0, "192.0.2.2", CredentialKind::None).accepted());
    // One refill gives one attempt, not more.
    let t1 = cfg.refill_every_us;
    assert!(knock(&mut a, t1, "192.0.2.1", CredentialKind::Pin).accepted());
    assert!(!knock(&mut a, t1, "192.0.2.1", CredentialKind::Pin).accepted());
    // A long pause fills the bucket up to the burst, no further.
    let t2 = t1 + 100 * cfg.refill_every_us;
    for _ in 0..cfg.burst {
        assert!(knock(&mut a, t2, "192.0.2.1", CredentialKind::Resume).accepted());
    }
    assert!(!knock(&mut a, t2, "192.0.2.1", CredentialKind::Resume).accepted());
    let st = a.stats();
    assert_eq!(st.accepted, 2 * cfg.burst as u64 + 2);
    assert_eq!(st.over_budget, 4);
    // A clock that went backwards (another thread's older `now`) takes nothing extra.
    assert!(!knock(&mut a, 0, "192.0.2.1", CredentialKind::Resume).accepted());
}

#[test]
fn wrong_credentials_block_after_the_free_ones_doubling_and_said_once() {
    let mut a = AdmissionState::new(roomy());
    let cfg = *a.config();
    let from = "10.0.0.9";
    let mut lines = 0;
    let mut checked = 0;
    // 1000 guesses within a second: the free ones are checked, the rest refused unchecked.
    for i in 0..1000u64 {
        let now = i * 1000;
        let inc = Incoming::connection(ip(from), CredentialKind::RtspDigest);
        match a.decide(now, &inc) {
            Decision::Accept => {}
            Decision::Refuse { reason, .. } => {
                assert_eq!(reason, RefuseReason::WrongCredentials);
                continue;
            }
            d => panic!("{d:?}"),
        }
        checked += 1;
        match a.checked(now, &inc, false) {
            Some(Failure::Again) => {}
            Some(Failure::First | Failure::Blocked { .. }) => lines += 1,
            None => panic!("a wrong credential counts"),
        }
    }
    assert_eq!(checked, cfg.free_failures);
    assert_eq!(lines, 2, "the first wrong one and the refusal");
    assert_eq!(a.stats().throttled, 1000 - cfg.free_failures as u64);
    // The refusal's end is told; an unvalidated source is not answered at all.
    let blocked_at = (cfg.free_failures as u64 - 1) * 1000;
    assert_eq!(
        a.refused_until(S, ip(from)),
        Some(blocked_at + cfg.first_block_us)
    );
    let dgram = Incoming::datagram(ip(from), CredentialKind::NoiseKey, false);
    assert_eq!(a.decide(S, &dgram), Decision::Ignore);
    // Another address is not affected.
    assert!(knock(&mut a, S, "10.0.0.10", CredentialKind::Pin).accepted());
    // After the refusal, one more wrong one: refused again, twice as long, and the failure
    // says how many were refused during the first.
    let t = blocked_at + cfg.first_block_us;
    let i = Incoming::connection(ip(from), CredentialKind::RtspDigest);
    assert!(a.decide(t, &i).accepted());
    assert_eq!(
        a.checked(t, &i, false),
        Some(Failure::Blocked {
            failures: cfg.free_failures + 1,
            for_us: 2 * cfg.first_block_us,
            refused_before: 1000 - cfg.free_failures as u64 + 1,
        })
    );
    assert!(a
        .refused_until(t + 2 * cfg.first_block_us - 1, ip(from))
        .is_some());
    assert!(a
        .refused_until(t + 2 * cfg.first_block_us, ip(from))
        .is_none());
}

#[test]
fn refusals_are_bounded_and_the_right_credential_resets() {
    let mut a = AdmissionState::new(roomy());
    let cfg = *a.config();
    let from = "10.0.0.9";
    let mut now = 0;
    for _ in 0..100 {
        now += cfg.max_block_us + 1;
        if let Some(Failure::Blocked { for_us, .. }) = guess(&mut a, now, from) {
            assert!(for_us <= cfg.max_block_us);
        }
    }
    assert_eq!(a.refused_until(now, ip(from)), Some(now + cfg.max_block_us));
    // The right credential (from another door of the same address) resets it.
    let right = Incoming::connection(ip(from), CredentialKind::LinkToken);
    assert_eq!(a.checked(now, &right, true), None);
    assert!(a.refused_until(now, ip(from)).is_none());
    assert_eq!(guess(&mut a, now, from), Some(Failure::First));
    // A mistyped password now and then never adds up to a refusal.
    let mut a = AdmissionState::new(roomy());
    for i in 0..10 {
        assert_eq!(
            guess(&mut a, i * (cfg.forget_us + 1), from),
            Some(Failure::First)
        );
    }
    // No credential at all is not a guess.
    let none = Incoming::connection(ip(from), CredentialKind::None);
    for _ in 0..100 {
        assert_eq!(a.checked(0, &none, false), None);
    }
    assert_eq!(a.stats().failures, 10);
}

#[test]
fn a_flood_from_one_network_pushes_out_its_own_entries() {
    let cfg = AdmissionConfig {
        max_addresses: 64,
        ..AdmissionConfig::default()
    };
    let mut a = AdmissionState::new(cfg);
    // A quiet client used its budget at 0; a guesser got itself refused.
    for _ in 0..cfg.burst {
        assert!(knock(&mut a, 0, "192.0.2.7", CredentialKind::LinkToken).accepted());
    }
    let mut b = AdmissionState::new(AdmissionConfig { burst: 100, ..cfg });
    for _ in 0..cfg.free_failures {
        let i = Incoming::connection(ip("198.51.100.3"), CredentialKind::Pin);
        assert!(a.decide(0, &i).accepted() || b.decide(0, &i).accepted());
        a.checked(0, &i, false);
    }
    assert!(a.refused_until(1, ip("198.51.100.3")).is_some());
    // 250 addresses of one /24, each once, later.
    for n in 1..=250u32 {
        let from = format!("10.0.0.{n}");
        assert!(knock(&mut a, S, &from, CredentialKind::None).accepted());
        assert!(a.len() <= cfg.max_addresses);
    }
    assert!(a.stats().evicted > 0);
    // The quiet client's budget is still used up (no fresh one by eviction), the guesser
    // still refused.
    assert!(!knock(&mut a, S, "192.0.2.7", CredentialKind::LinkToken).accepted());
    assert!(a.refused_until(S, ip("198.51.100.3")).is_some());
}

#[test]
fn a_refused_address_outlives_a_flood_from_everywhere() {
    let cfg = AdmissionConfig {
        max_addresses: 64,
        ..AdmissionConfig::default()
    };
    let mut a = AdmissionState::new(cfg);
    for _ in 0..cfg.free_failures {
        guess(&mut a, 0, "198.51.100.3");
    }
    // Every address its own network: the least recently seen go, never the refused one.
    for n in 0..1000u32 {
        let from = IpAddr::from((0x0b00_0000 + (n << 8)).to_be_bytes());
        a.decide(S, &Incoming::connection(from, CredentialKind::None));
    }
    assert!(a.len() <= cfg.max_addresses);
    assert!(a.refused_until(S, ip("198.51.100.3")).is_some());
}

#[test]
fn the_table_is_bounded_under_100k_addresses() {
    let mut a = AdmissionState::default();
    let max = a.config().max_addresses;
    for n in 0..100_000u32 {
        let from = IpAddr::from((0x0a00_0000 + n).to_be_bytes());
        let i = Incoming::datagram(from, CredentialKind::NoiseKey, false);
        // Spoofed sources each get their first attempts: the bound is on memory.
        assert_eq!(a.decide(u64::from(n), &i), Decision::Accept);
        if n % 3 == 0 {
            a.checked(u64::from(n), &i, false);
        }
        assert!(a.len() <= max);
    }
    // Entries that say nothing (full bucket, no streak) are dropped first, for free.
    let mut b = AdmissionState::default();
    for n in 0..(2 * max as u32) {
        let from = IpAddr::from((0x0a00_0000 + n).to_be_bytes());
        b.decide(
            u64::from(n) * 100 * S,
            &Incoming::connection(from, CredentialKind::None),
        );
    }
    assert_eq!(b.stats().evicted, 0);
    assert!(b.len() <= max);
}

#[test]
fn the_busiest_network_then_address_makes_room_oldest_first() {
    let v4 = |a: u8, b: u8| IpAddr::from([10, 0, a, b]);
    // One network with three addresses, another with one.
    let entries = [
        (v4(1, 1), 50),
        (v4(1, 2), 10),
        (v4(1, 2), 40),
        (v4(1, 3), 5),
        (v4(2, 1), 1),
    ];
    // 10.0.1.0/24 is busiest; in it 10.0.1.2 holds two; its oldest is at 10.
    assert_eq!(fair_victim(&entries), Some(1));
    // Then the other of 10.0.1.2, then 10.0.1.3 (its network still the busiest); then one
    // each: the older first.
    assert_eq!(fair_victims(&entries, 5), [1, 2, 3, 4, 0]);
    // Every address of the busiest network holds one: the oldest of them goes (not the
    // older entry of the quieter network).
    let flat = [
        (v4(1, 1), 50),
        (v4(1, 2), 30),
        (v4(2, 1), 1),
        (v4(1, 3), 20),
    ];
    assert_eq!(fair_victim(&flat), Some(3));
    assert_eq!(fair_victim(&[]), None);
    assert!(fair_victims(&flat, 10).len() == 4);
    // IPv6: /64 networks; an IPv4-mapped address counts with its IPv4 network.
    let six = |last: u16, net: u16| IpAddr::from([0x2001, 0xdb8, 0, net, 0, 0, 0, last]);
    let entries = [
        (six(1, 1), 9),
        (six(2, 1), 8),
        (six(3, 2), 1),
        (
            IpAddr::from(std::net::Ipv4Addr::new(10, 0, 9, 1).to_ipv6_mapped()),
            0,
        ),
        (v4(9, 2), 3),
        (v4(9, 3), 2),
    ];
    assert_eq!(network(entries[3].0), network(v4(9, 7)));
    // 10.0.9.0/24 holds three (mapped one included), its oldest is the mapped one.
    assert_eq!(fair_victim(&entries), Some(3));
}

#[test]
fn clones_of_the_handle_share_one_table() {
    let a = Admission::default();
    let b = a.clone();
    assert!(a.same(&b) && !a.same(&Admission::default()));
    let from = ip("192.0.2.1");
    // Drained through one door (browser offers) …
    for _ in 0..a.config().burst {
        assert!(a
            .decide(0, &Incoming::connection(from, CredentialKind::LinkToken))
            .accepted());
    }
    // … drained for the other (RTSP), from another thread.
    let d = std::thread::spawn(move || {
        b.decide(0, &Incoming::connection(from, CredentialKind::RtspDigest))
    })
    .join()
    .expect("the thread ran");
    assert!(matches!(
        d,
        Decision::Refuse {
            reason: RefuseReason::Budget,
            ..
        }
    ));
    assert_eq!(a.stats().over_budget, 1);
}
