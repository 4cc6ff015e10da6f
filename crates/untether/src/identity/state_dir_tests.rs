//! Tests of the state directory: keys, the allowlist, pending requests, the PIN, known hosts,
//! and the permission checks.

use super::*;

fn tmp(tag: &str) -> StateDir {
    let p = std::env::temp_dir().join(format!(
        "untether-identity-{tag}-{}-{}",
        std::process::id(),
        unix_now()
    ));
    let _ = fs::remove_dir_all(&p);
    StateDir::at(p)
}

#[test]
fn keys_are_created_once_with_0600() {
    let d = tmp("keys");
    let a = d.load_or_create_identity(Role::Host).unwrap();
    let b = d.load_or_create_identity(Role::Host).unwrap();
    assert_eq!(a, b);
    let c = d.load_or_create_identity(Role::Client).unwrap();
    assert_ne!(a.public, c.public);
    let mode = fs::metadata(d.path().join("host.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let dmode = fs::metadata(d.path()).unwrap().permissions().mode();
    assert_eq!(dmode & 0o777, 0o700);
    fs::write(d.path().join("client.key"), "garbage").unwrap();
    assert!(matches!(
        d.load_or_create_identity(Role::Client),
        Err(IdentityError::Corrupt { .. })
    ));
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn request_approve_revoke() {
    let d = tmp("pair");
    let k1 = [1u8; 32];
    let k2 = [2u8; 32];
    d.record_request(&k1, "quest", "10.0.0.2:4000").unwrap();
    d.record_request(&k2, "pi", "10.0.0.3:4000").unwrap();
    d.record_request(&k1, "quest", "10.0.0.2:4001").unwrap();
    let p = d.pending().unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].attempts, 2);
    // By fingerprint prefix (any case, with or without dashes) or hex key; never by
    // position nor by name.
    assert!(matches!(
        d.find_pending("2"),
        Err(IdentityError::Invalid(_))
    ));
    assert!(matches!(
        d.find_pending("pi"),
        Err(IdentityError::Invalid(_))
    ));
    assert_eq!(d.find_pending(&key_hex(&k2)).unwrap().key, key_hex(&k2));
    let fp = fingerprint(&k1);
    assert_eq!(
        d.find_pending(&fp[..9].to_lowercase()).unwrap().name,
        "quest"
    );
    assert!(matches!(
        d.find_pending("ZZZZ-ZZZZ"),
        Err(IdentityError::NotFound(_))
    ));
    let e = d.approve(&fp).unwrap();
    assert_eq!(e.public_key(), Some(k1));
    assert_eq!(d.pending().unwrap().len(), 1);
    assert_eq!(d.allowed().unwrap().len(), 1);
    assert!(d.deny("1").is_err());
    d.deny(&fingerprint(&k2)).unwrap();
    assert!(d.pending().unwrap().is_empty());
    let r = d.revoke(&fp).unwrap();
    assert_eq!(r.key, key_hex(&k1));
    assert!(d.allowed().unwrap().is_empty());
    // The denied request's key and the revoked one are both refused now.
    let refused: Vec<String> = d.revoked().unwrap().into_iter().map(|e| e.key).collect();
    assert_eq!(refused, [key_hex(&k2), key_hex(&k1)]);
    // Re-allowing clears the revocation; approve takes a denial back.
    d.allow(&k1, "quest").unwrap();
    assert_eq!(d.revoked().unwrap().len(), 1);
    assert_eq!(d.approve(&fingerprint(&k2)).unwrap().key, key_hex(&k2));
    assert!(d.revoked().unwrap().is_empty());
    let mode = fs::metadata(d.path().join(ALLOWED_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn pending_requests_are_bounded() {
    let d = tmp("bound");
    for i in 0..(MAX_PENDING as u8 + 10) {
        let recorded = d.record_request(&[i; 32], "x", "a").unwrap();
        assert_eq!(recorded, (i as usize) < MAX_PENDING, "{i}");
    }
    let p = d.pending().unwrap();
    assert_eq!(p.len(), MAX_PENDING);
    // Full: the new ones were refused, the old ones stay.
    assert_eq!(p[0].key, key_hex(&[0; 32]));
    // A pending one asking again is refreshed, not refused.
    assert!(d.record_request(&[0; 32], "x", "b").unwrap());
    assert_eq!(d.pending().unwrap()[0].attempts, 2);
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn requests_the_session_no_longer_holds_leave_the_file() {
    let d = tmp("retain");
    for i in 0..4u8 {
        assert!(d.record_request(&[i; 32], "x", "a").unwrap());
    }
    let keep = [key_hex(&[1; 32]), key_hex(&[3; 32])];
    assert_eq!(
        d.retain_pending(|k| keep.iter().any(|x| x == k)).unwrap(),
        2
    );
    let left: Vec<String> = d.pending().unwrap().into_iter().map(|p| p.key).collect();
    assert_eq!(left, keep);
    assert_eq!(d.retain_pending(|_| true).unwrap(), 0);
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn requests_not_asked_again_for_5_minutes_are_forgotten_and_make_room() {
    let d = tmp("expiry");
    for i in 0..MAX_PENDING as u8 {
        assert!(d.record_request(&[i; 32], "x", "a").unwrap());
    }
    assert!(!d.record_request(&[200; 32], "new", "a").unwrap(), "full");
    // All but the first were last asked just over the expiry ago.
    let mut on_disk: Vec<PendingRequest> = d.read_json(PENDING_FILE).unwrap().unwrap();
    let old = unix_now() - PENDING_EXPIRY_SECS - 1;
    for p in &mut on_disk[1..] {
        p.last_seen = old;
    }
    d.write_json(PENDING_FILE, &on_disk).unwrap();
    let p = d.pending().unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].key, key_hex(&[0; 32]));
    assert!(
        d.find_pending(&key_hex(&[1; 32])).is_err(),
        "an expired one cannot be approved"
    );
    // Room again: the new request is recorded, and the file keeps only live ones.
    assert!(d.record_request(&[200; 32], "new", "a").unwrap());
    let on_disk: Vec<PendingRequest> = d.read_json(PENDING_FILE).unwrap().unwrap();
    assert_eq!(on_disk.len(), 2);
    // A request stamped ahead of the clock (the clock went back) stays.
    let ahead = PendingRequest {
        last_seen: unix_now() + 600,
        ..on_disk[0].clone()
    };
    assert!(!ahead.expired(unix_now()));
    let _ = fs::remove_dir_all(d.path());
}

/// Issue 15, item 1: forty requests with fresh keys after the real one must neither push it
/// off the list nor let a list number approve another key; a name the client chose never
/// approves; an ambiguous prefix names the matching fingerprints.
#[test]
fn approving_takes_a_fingerprint_never_a_number_or_a_name() {
    let d = tmp("steer");
    let real = [1u8; 32];
    d.record_request(&real, "quest", "10.0.0.2:4000").unwrap();
    for i in 0..40u8 {
        let mut k = [0xa0; 32];
        k[0] = i;
        let _ = d.record_request(&k, "quest", "10.0.0.66:4000").unwrap();
    }
    let p = d.pending().unwrap();
    assert_eq!(p[0].key, key_hex(&real), "the real request stays");
    for query in ["6", "1", "quest", "10.0.0.2:4000"] {
        let e = d.approve(query).unwrap_err();
        assert!(
            matches!(e, IdentityError::Invalid(_)) && e.to_string().contains("fingerprint"),
            "{query}: {e}"
        );
    }
    assert!(d.allowed().unwrap().is_empty());
    // Fewer than 8 fingerprint characters is refused, even when it names one request.
    let fp = fingerprint(&real);
    let e = d.approve(&fp[..4]).unwrap_err();
    assert!(e.to_string().contains("too short"), "{e}");
    // Eight characters (one dash not counted) name it.
    let e = d.approve(&fp[..9]).unwrap();
    assert_eq!(e.public_key(), Some(real));
    // Two keys whose fingerprints share their first 8 characters (found by search).
    let key = |n: u64| {
        let mut k = [0u8; 32];
        k[..8].copy_from_slice(&n.to_le_bytes());
        k
    };
    let (a, b) = (key(181_160), key(904_734));
    assert_eq!(fingerprint(&a)[..9], fingerprint(&b)[..9]);
    assert_ne!(fingerprint(&a), fingerprint(&b));
    let d = tmp("ambiguous");
    d.record_request(&a, "a", "x").unwrap();
    d.record_request(&b, "b", "y").unwrap();
    // A name that looks like a fingerprint is still a name.
    assert!(d.record_request(&[2; 32], "questpro", "z").unwrap());
    let e = d.approve("questpro").unwrap_err();
    assert!(e.to_string().contains("name a client gave itself"), "{e}");
    let e = d.approve(&fingerprint(&a)[..9]).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, IdentityError::Ambiguous { .. }), "{text}");
    assert!(
        text.contains(&fingerprint(&a)) && text.contains(&fingerprint(&b)),
        "{text}"
    );
    assert!(d.allowed().unwrap().is_empty());
    assert_eq!(d.approve(&fingerprint(&b)).unwrap().public_key(), Some(b));
    let _ = fs::remove_dir_all(d.path());
    let _ = fs::remove_dir_all(tmp("steer").path());
}

#[test]
fn pins_expire_and_are_six_digits() {
    let d = tmp("pin");
    let p = d.create_pin(300, 3).unwrap();
    assert_eq!(p.pin.len(), 6);
    assert!(p.pin.chars().all(|c| c.is_ascii_digit()));
    assert_eq!(d.current_pin().unwrap(), Some(p));
    d.create_pin(0, 3).unwrap();
    assert_eq!(d.current_pin().unwrap(), None);
    d.clear_pin().unwrap();
    d.clear_pin().unwrap();
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn pin_attempts_are_bounded_by_the_one_limit() {
    let d = tmp("pin-attempts");
    for bad in [0, 11, u32::MAX] {
        let e = d.create_pin(300, bad).unwrap_err().to_string();
        assert!(e.contains("--pin-attempts") && e.contains("1..=10"), "{e}");
    }
    assert_eq!(d.current_pin().unwrap(), None, "no PIN was made");
    assert_eq!(d.create_pin(300, 10).unwrap().attempts_left, 10);
    assert_eq!(d.create_pin(300, 1).unwrap().attempts_left, 1);
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn known_hosts_trust_on_first_use() {
    let d = tmp("hosts");
    assert_eq!(d.known_host("box:9710").unwrap(), None);
    d.trust_host("box:9710", "10.0.0.5:9710", &[7; 32]).unwrap();
    assert_eq!(d.known_host("box:9710").unwrap(), Some([7; 32]));
    d.trust_host("box:9710", "10.0.0.5:9710", &[8; 32]).unwrap();
    assert_eq!(d.known_hosts().unwrap().len(), 1);
    let _ = fs::remove_dir_all(d.path());
}

/// Issue 15, item 4: a host is pinned by name and by address, so another name for the same
/// address finds the pin; a name and an address pinning different keys conflict.
#[test]
fn host_pins_are_found_by_name_or_address_and_must_agree() {
    let d = tmp("pins");
    assert_eq!(
        d.host_pin("localhost:9", "127.0.0.1:9").unwrap(),
        HostPin::None
    );
    d.trust_host("127.0.0.1:9", "127.0.0.1:9", &[7; 32])
        .unwrap();
    // Another name, the same address: the same pin.
    match d.host_pin("localhost:9", "127.0.0.1:9").unwrap() {
        HostPin::Key { key, by } => {
            assert_eq!(key, [7; 32]);
            assert_eq!(by, vec!["\"127.0.0.1:9\"".to_string()]);
        }
        p => panic!("{p:?}"),
    }
    // An entry written before addresses were kept (its name is the address) counts too.
    fs::write(
        d.file_path(KNOWN_HOSTS_FILE),
        format!(
            "[{{\"host\": \"[::1]:9\", \"key\": \"{}\", \"added\": 1}}]",
            key_hex(&[5; 32])
        ),
    )
    .unwrap();
    assert!(matches!(
        d.host_pin("ip6-localhost:9", "[::1]:9").unwrap(),
        HostPin::Key { key: [5, ..], .. }
    ));
    // The name says one key, the address another: a conflict naming both.
    d.trust_host("box", "10.0.0.5:9", &[1; 32]).unwrap();
    d.trust_host("other", "10.0.0.6:9", &[2; 32]).unwrap();
    match d.host_pin("box", "10.0.0.6:9").unwrap() {
        HostPin::Conflict { entries } => {
            assert_eq!(entries.len(), 2, "{entries:?}");
            assert!(entries
                .iter()
                .any(|(e, fp)| e.contains("box") && *fp == fingerprint(&[1; 32])));
            assert!(entries
                .iter()
                .any(|(e, fp)| e.contains("other") && *fp == fingerprint(&[2; 32])));
        }
        p => panic!("{p:?}"),
    }
    let _ = fs::remove_dir_all(d.path());
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Issue 15, item 7: a folder untether did not create is never chmodded; one another user
/// could write is refused (a shared 1777 folder such as /tmp included); so is an allowlist
/// others could write, also when re-read later.
#[test]
fn an_existing_folder_is_checked_never_chmodded() {
    // A private folder of the user's (0750): used as it is, mode unchanged.
    let d = tmp("existing");
    fs::create_dir_all(d.path()).unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o750)).unwrap();
    d.load_or_create_identity(Role::Host).unwrap();
    assert_eq!(mode(d.path()), 0o750, "an existing folder keeps its mode");
    // A shared folder (mode 1777): refused, and left as it was.
    let shared = tmp("shared");
    fs::create_dir_all(shared.path()).unwrap();
    fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let e = shared.load_or_create_identity(Role::Host).unwrap_err();
    assert!(matches!(e, IdentityError::Unsafe { .. }), "{e}");
    assert!(e.to_string().contains("every user"), "{e}");
    assert!(e.to_string().contains("--state-dir"), "{e}");
    assert_eq!(
        mode(shared.path()),
        0o1777,
        "a shared folder is never chmodded"
    );
    assert!(!shared.path().join("host.key").exists());
    assert!(matches!(
        shared.allowed(),
        Err(IdentityError::Unsafe { .. })
    ));
    // A group-writable folder: refused when read too.
    fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o770)).unwrap();
    assert!(matches!(
        shared.pending(),
        Err(IdentityError::Unsafe { .. })
    ));
    // An allowlist others could write: refused (each time it is read).
    d.allow(&[3; 32], "pi").unwrap();
    assert_eq!(d.allowed().unwrap().len(), 1);
    let allow = d.file_path(ALLOWED_FILE);
    fs::set_permissions(&allow, fs::Permissions::from_mode(0o666)).unwrap();
    let e = d.allowed().unwrap_err();
    assert!(matches!(e, IdentityError::Unsafe { .. }), "{e}");
    assert!(e.to_string().contains("chmod go-w"), "{e}");
    fs::set_permissions(&allow, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(d.allowed().unwrap().len(), 1);
    // An allowlist another user owns: refused (only root can hand a file over).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&allow, Some(65534), None).unwrap();
        let e = d.allowed().unwrap_err();
        assert!(e.to_string().contains("owned by user 65534"), "{e}");
        std::os::unix::fs::chown(&allow, Some(0), None).unwrap();
        assert_eq!(d.allowed().unwrap().len(), 1);
    }
    // A key readable by others is tightened (with a warning) and still loads.
    let key = d.file_path("host.key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    d.load_identity(Role::Host).unwrap().expect("the key");
    assert_eq!(mode(&key), 0o600);
    // A new folder is made 0700 (its missing parents with the usual mode).
    let nested = StateDir::at(shared.path().join("a").join("b"));
    fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o700)).unwrap();
    nested.load_or_create_identity(Role::Client).unwrap();
    assert_eq!(mode(nested.path()), 0o700);
    for p in [d.path(), shared.path()] {
        let _ = fs::remove_dir_all(p);
    }
}

/// Issue 15, item 7: reading (listing) creates nothing, neither key nor folder.
#[test]
fn reading_creates_nothing() {
    let d = tmp("read-only");
    assert_eq!(d.load_identity(Role::Host).unwrap(), None);
    assert!(d.pending().unwrap().is_empty());
    assert!(d.allowed().unwrap().is_empty());
    assert_eq!(d.current_pin().unwrap(), None);
    assert!(!d.path().exists());
    fs::create_dir_all(d.path()).unwrap();
    assert_eq!(d.load_identity(Role::Host).unwrap(), None);
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
    let _ = fs::remove_dir_all(d.path());
}

#[test]
fn resolve_order() {
    let d = StateDir::resolve(Some(Path::new("/x/y"))).unwrap();
    assert_eq!(d.path(), Path::new("/x/y"));
}

/// A failing OS generator is an error that names itself, carried up to the host and the
/// client (`HostError::Identity`, `ClientError::Identity`), never a zero seed.
#[test]
fn a_failing_random_generator_is_an_error_that_stops_host_and_client() {
    use untether_proto::handshake::OsRandomUnavailable;
    assert!(check_random().is_ok(), "this machine's generator works");
    let e = IdentityError::from(OsRandomUnavailable);
    let host = crate::host::HostError::from(IdentityError::from(OsRandomUnavailable));
    let client = crate::client::ClientError::from(IdentityError::from(OsRandomUnavailable));
    for text in [e.to_string(), host.to_string(), client.to_string()] {
        assert!(
            text.contains("random generator") && text.contains("stops"),
            "{text}"
        );
    }
    let pins: std::collections::HashSet<String> = (0..20).map(|_| random_pin().unwrap()).collect();
    assert!(pins.len() > 1, "{pins:?}");
}

/// `untether pair forget HOST`: by name, address or fingerprint, with every other pin of the
/// same key (issue 36: `forget NAME` left the address entry); other hosts stay.
#[test]
fn a_known_host_is_forgotten_by_name_address_or_fingerprint() {
    let d = tmp("forget");
    d.trust_host("pc", "10.0.0.2:9710", &[1; 32]).unwrap();
    d.trust_host("laptop", "10.0.0.3:9710", &[2; 32]).unwrap();
    d.trust_host("pc.lan", "10.0.0.2:9710", &[1; 32]).unwrap();
    let gone = d.forget_host("pc").unwrap();
    let names: Vec<&str> = gone.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(names, ["pc", "pc.lan"]);
    d.trust_host("pc.lan", "10.0.0.2:9710", &[1; 32]).unwrap();
    let fp = fingerprint(&[1; 32]);
    let gone = d.forget_host(&fp[..9]).unwrap();
    assert_eq!(gone[0].host, "pc.lan");
    let e = d.forget_host("10.9.9.9:1").unwrap_err().to_string();
    assert!(
        e.contains("no known host matches") && e.contains("laptop"),
        "{e}"
    );
    let gone = d.forget_host("10.0.0.3:9710").unwrap();
    assert_eq!(gone[0].host, "laptop");
    assert!(d.known_hosts().unwrap().is_empty());
    let _ = fs::remove_dir_all(d.path());
}
