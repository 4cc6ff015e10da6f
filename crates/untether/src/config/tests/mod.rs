//! Tests of the configuration: defaults, every key's validation and messages (by section in
//! the files beside this one).

use super::*;

mod keys;
mod network;
mod video;

#[test]
fn defaults_validate() {
    let c = ConfigToml::default();
    let v = c.video.validate().unwrap();
    assert_eq!(
        v.resolution,
        Resolution {
            width: 1280,
            height: 720
        }
    );
    c.network.validate().unwrap();
    c.client.validate().unwrap();
    c.host.validate().unwrap();
    assert_eq!(c.host.access, crate::identity::Access::Allowlist);
    let e = parse_key::<crate::identity::Access>("everyone")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("host.access") && e.contains("allowlist"),
        "{e}"
    );
}

#[test]
fn unknown_key_is_named() {
    let e = ConfigToml::parse("[video]\nfsp = 60\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("fsp") && e.contains("fps"), "{e}");
    let e = ConfigToml::parse("[vidoe]\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("vidoe") && e.contains("video"), "{e}");
}

#[test]
fn bad_values_name_key_and_allowed_values() {
    let mut v = VideoToml {
        encoder: Some("x265".into()),
        ..Default::default()
    };
    let e = v.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("video.encoder") && e.contains("libx264rgb") && e.contains("libx265"),
        "{e}"
    );
    v = VideoToml {
        conversion: Some("magic".into()),
        ..Default::default()
    };
    let e = v.validate().unwrap_err().to_string();
    assert!(
        e.contains("video.conversion") && e.contains("swscale"),
        "{e}"
    );
    v = VideoToml {
        resolution: "12x7".into(),
        ..Default::default()
    };
    assert!(v
        .validate()
        .unwrap_err()
        .to_string()
        .contains("video.resolution"));
    v = VideoToml {
        preset: "turbo".into(),
        ..Default::default()
    };
    assert!(v.validate().unwrap_err().to_string().contains("superfast"));
}

#[test]
fn defaults_are_written_once() {
    assert_eq!(
        VideoToml::default().validate().unwrap(),
        VideoConfig::default()
    );
    let t = VideoToml::from(&VideoConfig::default());
    assert_eq!(t.codec.as_deref(), Some("h264"));
    assert_eq!(t.encoder.as_deref(), Some("auto"));
    assert_eq!(t.conversion.as_deref(), Some("simd"));
    assert_eq!(t.refresh, "idr");
    assert_eq!(t.validate().unwrap(), VideoConfig::default());
}

#[test]
fn ranges_are_named_in_one_style() {
    let e = VideoToml {
        bitrate_kbps: 0,
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert_eq!(e, "video.bitrate_kbps: 0 is out of range 100..=500000");
    let e = VideoConfig {
        fps: 0,
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert_eq!(e, "video.fps: 0 is out of range 1..=240");
    assert_eq!(
        FPS.check_wide(-5i64).unwrap_err().to_string(),
        "video.fps: -5 is out of range 1..=240"
    );
    assert_eq!(
        FPS.check_wide(1i64 << 40).unwrap_err().to_string(),
        "video.fps: 1099511627776 is out of range 1..=240"
    );
    assert_eq!(FPS.check_wide(30i64).unwrap(), 30u32);
    let e = ClientToml {
        decoder_threads: 0,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key(), Some("client.decoder_threads"));
    let e = SceneToml {
        walk_speed: f32::NAN,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key(), Some("scene.walk_speed"));
}

#[test]
fn validate_host_and_client_check_every_section() {
    let c = ConfigToml::default();
    let v = VideoConfig::default();
    validate_host(&v, &c.host, &c.network, &c.scene).unwrap();
    validate_client(&c.client, &c.network).unwrap();
    let bad_net = NetworkToml {
        keepalive_ms: 40_000,
        ..Default::default()
    };
    let e = validate_host(&v, &c.host, &bad_net, &c.scene).unwrap_err();
    assert_eq!(e.key(), Some("network.keepalive_ms"));
    let e = validate_client(&c.client, &bad_net).unwrap_err();
    assert_eq!(e.key(), Some("network.keepalive_ms"));
    let small = VideoConfig {
        resolution: Resolution {
            width: 64,
            height: 64,
        },
        ..Default::default()
    };
    let e = validate_host(&small, &c.host, &c.network, &c.scene)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "video.resolution: 64x64 is out of range 512..=4096 x 288..=2304"
    );
}

#[test]
fn a_missing_file_names_the_path_and_the_io_error_once() {
    let e = ConfigToml::load(Path::new("/nonexistent/untether.toml")).unwrap_err();
    let mut chain = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        chain.push_str(&format!(": {s}"));
        src = s.source();
    }
    assert_eq!(chain.matches("No such file").count(), 1, "{chain}");
    assert!(chain.contains("/nonexistent/untether.toml"), "{chain}");
}

#[test]
fn example_config_parses() {
    let text = include_str!("../../../../../docs/untether.example.toml");
    let c = ConfigToml::parse(text, "example").unwrap();
    let v = c.video.validate().unwrap();
    assert_eq!(v, VideoConfig::default(), "the example shows the defaults");
    validate_host(&v, &c.host, &c.network, &c.scene).unwrap();
    validate_client(&c.client, &c.network).unwrap();
    assert_eq!(
        c.rtsp,
        RtspToml::default(),
        "the example shows the defaults"
    );
    c.rtsp.validate().unwrap();
    assert_eq!(
        c.vr,
        VrToml::default(),
        "the example shows the [vr] defaults"
    );
    assert_eq!(c.client.presenter, ClientToml::default().presenter);
    c.vr.validate().unwrap();
    assert_eq!(
        c.webrtc,
        WebRtcToml::default(),
        "the example shows the defaults"
    );
    c.webrtc.validate().unwrap();
}

/// Issue 15 item 8: `idle_timeout_ms = 4294968296` was truncated to a `u32` in the session
/// parameters (to 1000 ms) and surfaced as "no answer from host". Every integer key is checked
/// against the range it ends in, with its key and range.
#[test]
fn integers_past_their_width_name_the_key_and_the_range() {
    let c = ConfigToml::parse("[network]\nidle_timeout_ms = 4294968296\n", "t.toml").unwrap();
    let e = validate_client(&c.client, &c.network).unwrap_err();
    assert_eq!(
        e.to_string(),
        "network.idle_timeout_ms: 4294968296 is out of range 100..=3600000"
    );
    let v = VideoConfig::default();
    let e = validate_host(&v, &c.host, &c.network, &c.scene).unwrap_err();
    assert_eq!(e.key(), Some("network.idle_timeout_ms"));

    // Every millisecond key that lacked a limit: past u32 (or a product in µs past u64).
    for (section, key, range) in [
        ("network", "keepalive_ms", "10..=600000"),
        ("network", "idle_timeout_ms", "100..=3600000"),
        ("host", "keyframe_cooldown_ms", "0..=10000"),
        ("client", "input_probe_interval_ms", "0..=60000"),
    ] {
        let text = format!("[{section}]\n{key} = 18446744073709551\n");
        let c = ConfigToml::parse(&text, "t.toml").unwrap();
        let e = match section {
            "host" => c.host.validate(),
            "client" => c.client.validate(),
            _ => c.network.validate(),
        }
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            format!("{section}.{key}: 18446744073709551 is out of range {range}")
        );
    }

    // A value that does not fit the key's type at all is refused while parsing, with the same
    // words (not "expected u16").
    for (text, want) in [
        (
            "[network]\nmax_datagram = 70000\n",
            "network.max_datagram: 70000 is out of range 256..=9000",
        ),
        (
            "[video]\nfps = 4294967297\n",
            "video.fps: 4294967297 is out of range 1..=240",
        ),
        (
            "[video]\nbitrate_kbps = 4294967396\n",
            "video.bitrate_kbps: 4294967396 is out of range 100..=500000",
        ),
        (
            "[network]\npacing_batch = 4294967296\n",
            "network.pacing_batch: 4294967296 is out of range 1..=64",
        ),
        (
            "[network]\nkeepalive_ms = -1\n",
            "network.keepalive_ms: -1 is out of range 10..=600000",
        ),
        (
            "[client]\ndecoder_threads = -2\n",
            "client.decoder_threads: -2 is out of range 1..=16",
        ),
        (
            "[host]\npin_ttl_s = -300\n",
            "host.pin_ttl_s: -300 is out of range 10..=86400",
        ),
    ] {
        let e = ConfigToml::parse(text, "t.toml").unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }

    // In range, the keys still parse and validate; keepalive stays below the idle timeout.
    let c = ConfigToml::parse(
        "[network]\nkeepalive_ms = 500\nidle_timeout_ms = 5000\n[host]\nkeyframe_cooldown_ms = 0\n\
         [client]\ninput_probe_interval_ms = 500\n",
        "t.toml",
    )
    .unwrap();
    c.network.validate().unwrap();
    c.host.validate().unwrap();
    c.client.validate().unwrap();
    let n = NetworkToml {
        keepalive_ms: 5000,
        idle_timeout_ms: 5000,
        ..Default::default()
    };
    assert_eq!(
        n.validate().unwrap_err().to_string(),
        "network.keepalive_ms: 5000 must be below network.idle_timeout_ms (5000)"
    );
}

/// A value refused after parsing is pointed at in the file: the line and column of the value,
/// however the key is written (a table header, a dotted key, an inline table).
#[test]
fn a_key_is_found_on_its_line_and_column() {
    let f = ConfigFile::new(
        "u.toml",
        "# comment\nclient.name = \"x\"\nnetwork = { pacing = 2.0 }\n\n[video]\n\
         resolution = \"720p\"\nfps   = 500\n\n[host]\nmax_clients = 0\n",
    );
    let c = f.parse().unwrap();
    assert_eq!(c.video.fps, 500);
    let at = |line, column| Some(Place { line, column });
    assert_eq!(f.place("client.name"), at(2, 15));
    assert_eq!(f.place("network.pacing"), at(3, 22));
    assert_eq!(f.place("video.fps"), at(7, 9));
    assert_eq!(f.place("host.max_clients"), at(10, 15));
    assert_eq!(f.place("video.bitrate_kbps"), None);
    assert_eq!(f.place("nothing"), None);
    assert_eq!(f.path(), "u.toml");
}
