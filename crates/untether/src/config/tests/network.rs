//! `[network]`, `[client]` and the host's clients: multipath, pacing, transport, clock and
//! several clients.

use super::super::*;

#[test]
fn multipath_keys_are_checked() {
    let e = parse_key::<untether_proto::Scheduler>("fastest")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("network.scheduler") && e.contains("lowest-delay"),
        "{e}"
    );
    let mut c = ClientToml {
        paths: vec!["wlan1@10.0.0.1".into()],
        ..Default::default()
    };
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("client.paths") && e.contains("LOCAL_IP@"),
        "{e}"
    );
    c.paths = vec!["10.0.0.2@10.0.0.1:9000".into(), "127.0.0.1".into()];
    c.validate().unwrap();
    assert_eq!(
        parse_path("10.0.0.2@10.0.0.1:9000", 9710).unwrap(),
        (Some([10, 0, 0, 2].into()), ([10, 0, 0, 1], 9000).into())
    );
    let e = parse_path("10.0.0.x@10.0.0.1", 9710).unwrap_err();
    assert!(
        matches!(&e, PathSpecError::Local { local, .. } if local == "10.0.0.x"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        r#""10.0.0.x@10.0.0.1": "10.0.0.x" is not a local IP address (expected LOCAL_IP@HOST[:PORT])"#
    );
    let e = parse_path("10.0.0.2@", 9710).unwrap_err();
    assert!(matches!(e, PathSpecError::Host { .. }), "{e:?}");
    assert!(e.to_string().starts_with(r#""10.0.0.2@": "#), "{e}");
    c.paths = vec!["127.0.0.1".into(); 4];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("at most 3"), "{e}");
}

#[test]
fn pacing_is_validated_with_key_and_range() {
    let n = NetworkToml::default();
    assert!(n.pacing().unwrap().is_off());
    for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let e = NetworkToml {
            pacing: bad,
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("network.pacing:") && e.contains("0.0..=1.0"),
            "{e}"
        );
    }
    for bad in [0, 65] {
        let e = NetworkToml {
            pacing_batch: bad,
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("network.pacing_batch") && e.contains("1..=64"),
            "{e}"
        );
    }
    let c = ConfigToml::parse("[network]\npacing = 0.5\npacing_batch = 4\n", "t.toml").unwrap();
    let p = c.network.pacing().unwrap();
    assert_eq!((p.fraction, p.batch), (0.5, 4));
    // `pacing = 0` (an integer) is accepted too.
    let c = ConfigToml::parse("[network]\npacing = 0\n", "t.toml").unwrap();
    assert!(c.network.pacing().unwrap().is_off());
}

#[test]
fn transport_and_interface_are_checked_with_their_keys() {
    use crate::config::Transport;
    assert_eq!(NetworkToml::default().transport().unwrap(), Transport::Udp);
    let c = ConfigToml::parse(
        "[network]\ntransport = \"raw\"\ninterface = \"veth0\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.network.transport().unwrap(), Transport::Raw);
    assert_eq!(c.network.interface, "veth0");
    let e = parse_key::<Transport>("tcp").unwrap_err().to_string();
    assert!(
        e.starts_with("network.transport:") && e.contains("udp, raw"),
        "{e}"
    );
    for bad in ["eth0/1", "a-very-long-interface-name", "wl an0", ".."] {
        let e = NetworkToml {
            transport: Transport::Raw,
            interface: bad.into(),
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("network.interface:"), "{bad}: {e}");
    }
}

#[test]
fn client_clock_is_auto_or_synchronized() {
    let mut c = ClientToml::default();
    assert_eq!(c.clock, ClientClock::Auto);
    c.clock = parse_key("synchronized").unwrap();
    c.validate().unwrap();
    let e = parse_key::<ClientClock>("ntp").unwrap_err().to_string();
    assert!(
        e.contains("client.clock") && e.contains("auto, synchronized"),
        "{e}"
    );
}

#[test]
fn several_clients_keys_are_checked() {
    let c = ConfigToml::parse(
        "[host]\nmax_clients = 32\nslow_viewer = \"drop\"\n[client]\ndecode = false\n",
        "t",
    )
    .unwrap();
    c.host.validate().unwrap();
    assert_eq!(c.host.slow_viewer, untether_proto::SlowViewer::Drop);
    assert!(!c.client.decode);
    let mut h = HostToml::default();
    assert_eq!(h.max_clients, 8);
    h.max_clients = 0;
    assert_eq!(
        h.validate().unwrap_err().to_string(),
        "host.max_clients: 0 is out of range 1..=256"
    );
    h.max_clients = 8;
    let e = parse_key::<untether_proto::SlowViewer>("kick")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("host.slow_viewer") && e.contains("pause or drop"),
        "{e}"
    );
    // Past its width in the file: the key and its range, not the Rust type.
    let e = ConfigToml::parse("[host]\nmax_clients = -1\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host.max_clients") && e.contains("1..=256"),
        "{e}"
    );
}
