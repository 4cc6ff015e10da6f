//! Tests of the configuration: defaults, every key's validation and messages.

use super::*;

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
    assert_eq!(c.host.access().unwrap(), crate::identity::Access::Allowlist);
    let h = HostToml {
        access: "everyone".into(),
        ..Default::default()
    };
    let e = h.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("host.access") && e.contains("allowlist"),
        "{e}"
    );
}

#[test]
fn multipath_keys_are_checked() {
    let n = NetworkToml {
        scheduler: "fastest".into(),
        ..Default::default()
    };
    let e = n.validate().unwrap_err().to_string();
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
    c.paths = vec!["127.0.0.1".into(); 4];
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("at most 3"), "{e}");
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
    let e = NetworkToml {
        transport: "tcp".into(),
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("network.transport:") && e.contains("udp, raw"),
        "{e}"
    );
    for bad in ["eth0/1", "a-very-long-interface-name", "wl an0", ".."] {
        let e = NetworkToml {
            transport: "raw".into(),
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
fn rgb_encoder_implies_rgb_path() {
    use untether_media::codec::{Codec, EncoderChoice};
    use untether_media::convert::Conversion;
    let v = VideoToml {
        encoder: Some("libx264rgb".into()),
        ..Default::default()
    }
    .validate()
    .unwrap();
    assert_eq!(v.selection.conversion, Conversion::Rgb);
    assert_eq!(v.selection.codec, Some(Codec::H264Rgb));
    assert_eq!(wire_codec(v.codecs()[0]), untether_proto::Codec::H264Rgb);
    let v = ConfigToml::parse("[video]\nconversion = \"rgb\"\n", "t.toml")
        .unwrap()
        .video
        .validate()
        .unwrap();
    assert_eq!(
        v.selection.encoder,
        EncoderChoice::Named("libx264rgb".into())
    );
    let e = VideoToml {
        encoder: Some("libx264".into()),
        conversion: Some("rgb".into()),
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("video.encoder, video.conversion:") && e.contains("libx264rgb"),
        "{e}"
    );
    let e = ConfigToml::parse(
        "[video]\nencoder = \"libx264rgb\"\nconversion = \"simd\"\n",
        "t.toml",
    )
    .unwrap()
    .video
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("video.encoder, video.conversion:") && e.contains("\"simd\""),
        "{e}"
    );
}

#[test]
fn codec_encoder_and_refresh_keys() {
    use untether_media::codec::{Codec, EncoderChoice, Refresh};
    let v = |toml: &str| ConfigToml::parse(toml, "t.toml").unwrap().video.validate();
    // Defaults: H.264, the best encoder that opens, keyframes on demand.
    let d = v("").unwrap();
    assert_eq!(d.codecs(), vec![Codec::H264]);
    assert_eq!(d.selection.encoder, EncoderChoice::Auto);
    assert_eq!((d.refresh, d.refresh_period), (Refresh::Idr, 30));
    // An encoder's codec follows from it; auto offers every codec.
    assert_eq!(
        v("[video]\nencoder = \"libx265\"\n").unwrap().codecs(),
        vec![Codec::Hevc]
    );
    assert_eq!(
        v("[video]\ncodec = \"auto\"\n").unwrap().codecs(),
        vec![Codec::H264, Codec::Hevc, Codec::Av1]
    );
    let e = v("[video]\ncodec = \"av1\"\nencoder = \"libx264\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.codec, video.encoder:") && e.contains("libx264"),
        "{e}"
    );
    let e = v("[video]\ncodec = \"vp8\"\n").unwrap_err().to_string();
    assert!(e.starts_with("video.codec:") && e.contains("hevc"), "{e}");
    let e = v("[video]\nencoder = \"x265\"\n").unwrap_err().to_string();
    assert!(
        e.starts_with("video.encoder:") && e.contains("libx265"),
        "{e}"
    );
    // Intra refresh: x264 and NVENC only, refused clearly elsewhere.
    let i = v("[video]\nrefresh = \"intra\"\nrefresh_period = 20\n").unwrap();
    assert_eq!((i.refresh, i.refresh_period), (Refresh::Intra, 20));
    assert!(v("[video]\nrefresh = \"intra\"\nencoder = \"h264_nvenc\"\n").is_ok());
    let e = v("[video]\nrefresh = \"intra\"\nencoder = \"libx265\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.refresh, video.encoder:") && e.contains("libx265"),
        "{e}"
    );
    let e = v("[video]\nrefresh = \"intra\"\ncodec = \"av1\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("video.refresh, video.codec:"), "{e}");
    let e = v("[video]\nrefresh = \"sometimes\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("video.refresh:") && e.contains("idr, intra"),
        "{e}"
    );
    let e = ConfigToml::parse("[video]\nrefresh_period = 1\n", "t.toml")
        .map(|c| c.video.validate().map(|_| ()))
        .unwrap()
        .unwrap_err()
        .to_string();
    assert_eq!(e, "video.refresh_period: 1 is out of range 2..=600");
}

#[test]
fn client_codecs_decoder_and_hwaccel_keys() {
    use untether_media::codec::{Codec, DecoderChoice, HwAccel};
    let c = ClientToml::default();
    assert_eq!(
        c.codec_list().unwrap(),
        vec![Codec::H264, Codec::H264Rgb, Codec::Hevc, Codec::Av1]
    );
    assert_eq!(
        c.decoder_choice().unwrap(),
        (DecoderChoice::Auto, HwAccel::None)
    );
    let with = |f: &dyn Fn(&mut ClientToml)| {
        let mut c = ClientToml::default();
        f(&mut c);
        c.validate().map_err(|e| e.to_string())
    };
    let e = with(&|c| c.codecs = vec!["hevc".into(), "mpeg2".into()]).unwrap_err();
    assert!(
        e.starts_with("client.codecs:") && e.contains("mpeg2"),
        "{e}"
    );
    let e = with(&|c| c.codecs = vec!["hevc".into(), "hevc".into()]).unwrap_err();
    assert!(e.contains("twice"), "{e}");
    assert!(with(&|c| c.codecs = vec![]).is_err());
    let e = with(&|c| c.hwaccel = "opencl".into()).unwrap_err();
    assert!(
        e.starts_with("client.hwaccel:") && e.contains("vaapi"),
        "{e}"
    );
    let e = with(&|c| c.decoder = "magic".into()).unwrap_err();
    assert!(
        e.starts_with("client.decoder:") && e.contains("software"),
        "{e}"
    );
    let e = with(&|c| {
        c.decoder = "software".into();
        c.hwaccel = "vaapi".into();
    })
    .unwrap_err();
    assert!(e.starts_with("client.decoder, client.hwaccel:"), "{e}");
    assert!(with(&|c| {
        c.decoder = "h264_v4l2m2m".into();
        c.hwaccel = "vaapi".into();
    })
    .is_ok());
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
        fec: "lots".into(),
        ..Default::default()
    };
    let e = validate_host(&v, &c.host, &bad_net, &c.scene).unwrap_err();
    assert_eq!(e.key(), Some("network.fec"));
    let e = validate_client(&c.client, &bad_net).unwrap_err();
    assert_eq!(e.key(), Some("network.fec"));
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
fn bitrate_key_takes_units() {
    let c = ConfigToml::parse("[video]\nbitrate_kbps = \"10M\"\n", "t.toml").unwrap();
    assert_eq!(c.video.bitrate_kbps, 10_000);
    let c = ConfigToml::parse("[video]\nbitrate_kbps = 8000\n", "t.toml").unwrap();
    assert_eq!(c.video.bitrate_kbps, 8000);
    let e = ConfigToml::parse("[video]\nbitrate_kbps = \"fast\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bitrate_kbps") && e.contains("10M"), "{e}");
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
fn resolutions() {
    assert_eq!(
        "1080p".parse::<Resolution>().unwrap(),
        Resolution {
            width: 1920,
            height: 1080
        }
    );
    assert_eq!("1920X1080".parse::<Resolution>().unwrap().height, 1080);
    assert_eq!("360p".parse::<Resolution>().unwrap().width, 640);
    assert!("1281x720"
        .parse::<Resolution>()
        .unwrap()
        .validate()
        .is_err());
    assert!("big".parse::<Resolution>().is_err());
    for (name, ..) in units::NAMED_SIZES {
        name.parse::<Resolution>().unwrap().validate().unwrap();
    }
}

#[test]
fn example_config_parses() {
    let text = include_str!("../../../../docs/untether.example.toml");
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

#[test]
fn client_clock_is_auto_or_synchronized() {
    let mut c = ClientToml::default();
    assert_eq!(c.clock, "auto");
    c.clock = "synchronized".into();
    c.validate().unwrap();
    c.clock = "ntp".into();
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("client.clock") && e.contains("auto, synchronized"),
        "{e}"
    );
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

#[test]
fn display_and_vr_keys_are_checked() {
    let c = ConfigToml::parse(
        "[client]\npresenter = \"gl\"\nfullscreen = true\noverlay = true\n[vr]\nenabled = true\nlate_warp = false\n",
        "t",
    )
    .unwrap();
    validate_client(&c.client, &c.network).unwrap();
    assert_eq!(
        c.client.presenter_kind().unwrap(),
        untether_media::present::PresenterKind::Gl
    );
    assert!(c.vr.enabled && !c.vr.late_warp && c.client.fullscreen && c.client.overlay);
    assert_eq!(c.vr.lens_profile().unwrap().name, "generic");
    let bad = ClientToml {
        presenter: "vulkan".into(),
        ..Default::default()
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("client.presenter") && e.contains("auto, gl, sdl"),
        "{e}"
    );
    // A lens profile is read and checked at start; the error names vr.lens, the file and
    // the profile's key.
    let dir = std::env::temp_dir().join(format!("untether-lens-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "name = \"x\"\nk = [0.2]\nchromatic = [1.0, 1.0, 1.5]\ncenter = [0.5, 0.5]\nfit = 1.0\n",
    )
    .unwrap();
    let vr = VrToml {
        lens: file.display().to_string(),
        ..Default::default()
    };
    let e = vr.validate().unwrap_err();
    assert_eq!(e.key(), Some("vr.lens"));
    let msg = e.to_string();
    assert!(
        msg.contains("bad.toml") && msg.contains("chromatic: the blue scale 1.5"),
        "{msg}"
    );
    let missing = VrToml {
        lens: "/nonexistent/lens.toml".into(),
        ..Default::default()
    };
    assert!(missing
        .validate()
        .unwrap_err()
        .to_string()
        .contains("cannot read it"));
    let e = ConfigToml::parse("[vr]\nlens_file = \"x\"\n", "t").unwrap_err();
    assert!(e.to_string().contains("lens_file"), "{e}");
    assert!(parse_on_off("--late-warp", "on").unwrap());
    assert!(!parse_on_off("--late-warp", "off").unwrap());
    assert!(parse_on_off("--late-warp", "maybe").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn several_clients_keys_are_checked() {
    let c = ConfigToml::parse(
        "[host]\nmax_clients = 32\nslow_viewer = \"drop\"\n[client]\ndecode = false\n",
        "t",
    )
    .unwrap();
    c.host.validate().unwrap();
    assert_eq!(
        c.host.slow_viewer().unwrap(),
        untether_proto::SlowViewer::Drop
    );
    assert!(!c.client.decode);
    let mut h = HostToml::default();
    assert_eq!(h.max_clients, 8);
    h.max_clients = 0;
    assert_eq!(
        h.validate().unwrap_err().to_string(),
        "host.max_clients: 0 is out of range 1..=256"
    );
    h.max_clients = 8;
    h.slow_viewer = "kick".into();
    let e = h.validate().unwrap_err().to_string();
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

#[test]
fn slices_are_checked_by_the_one_validator() {
    // The file's key: a count out of range names the key and its range.
    let e = ConfigToml::parse("[video]\nslices = 17\n", "t.toml")
        .map(|c| c.video.validate())
        .and_then(|r| r.map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("video.slices") && e.contains("1..=16"), "{e}");
    let e = ConfigToml::parse("[video]\nslices = -1\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("video.slices"), "{e}");
    let mut v = VideoToml {
        slices: 0,
        ..Default::default()
    };
    let e = v.validate().unwrap_err().to_string();
    assert!(e.starts_with("video.slices"), "{e}");
    // Slices need libx264: libx264rgb sends frames whole.
    v.slices = 4;
    v.encoder = Some("libx264rgb".into());
    let e = v.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("video.slices, video.encoder") && e.contains("libx264"),
        "{e}"
    );
    v.encoder = None;
    assert_eq!(v.validate().unwrap().slices, 4);
    let c = ConfigToml::parse("[video]\nslices = 8\n", "t.toml").unwrap();
    assert_eq!(c.video.validate().unwrap().slices, 8);
    assert_eq!(VideoConfig::default().slices, 1);
    // The wire and the encoder agree on the bound.
    assert_eq!(
        untether_proto::wire::MAX_SLICES as usize,
        untether_media::x264::MAX_SLICES
    );
}

#[test]
fn slices_are_refused_by_name_where_libx264_does_not_send_them() {
    use untether_media::codec::{Codec, EncoderChoice, Refresh};
    let named = |n: &str| EncoderChoice::Named(n.into());
    let h264 = Some(Codec::H264);
    assert!(slices_refused(1, None, &named("libx265"), Refresh::Intra).is_none());
    assert!(slices_refused(4, h264, &EncoderChoice::Auto, Refresh::Idr).is_none());
    assert!(slices_refused(4, h264, &named("libx264"), Refresh::Idr).is_none());
    let (keys, why) = slices_refused(4, h264, &named("h264_nvenc"), Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.encoder");
    assert!(
        why.contains("h264_nvenc") && why.contains("libx264"),
        "{why}"
    );
    let (keys, why) =
        slices_refused(2, Some(Codec::Hevc), &EncoderChoice::Auto, Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.codec");
    assert!(why.contains("hevc"), "{why}");
    let (keys, why) = slices_refused(2, None, &EncoderChoice::Auto, Refresh::Idr).unwrap();
    assert_eq!(keys, "video.slices, video.codec");
    assert!(why.contains("auto"), "{why}");
    let (keys, why) = slices_refused(8, h264, &EncoderChoice::Auto, Refresh::Intra).unwrap();
    assert_eq!(keys, "video.slices, video.refresh");
    assert!(why.contains("refresh idr"), "{why}");
    // Through the file's keys, as the CLI's flags go.
    for (toml, keys) in [
        (
            "slices = 4\ncodec = \"hevc\"\n",
            "video.slices, video.codec",
        ),
        (
            "slices = 4\ncodec = \"auto\"\n",
            "video.slices, video.codec",
        ),
        (
            "slices = 4\nencoder = \"libx265\"\n",
            "video.slices, video.encoder",
        ),
        (
            "slices = 4\nrefresh = \"intra\"\n",
            "video.slices, video.refresh",
        ),
    ] {
        let e = ConfigToml::parse(&format!("[video]\n{toml}"), "t.toml")
            .unwrap()
            .video
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(keys), "{toml}: {e}");
    }
    let c = ConfigToml::parse(
        "[video]\nslices = 4\ncodec = \"h264\"\nencoder = \"libx264\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.video.validate().unwrap().slices, 4);
}
