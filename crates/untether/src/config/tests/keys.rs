//! The named values (`config/keys.rs`): each key is parsed once, when the file is read or a
//! flag or the C API sets it; a bad value names the key and the allowed values; each value is
//! written back as the file spells it.

use super::super::*;
use untether_media::codec::{DecoderChoice, HwAccel};
use untether_media::present::PresenterKind;
use untether_proto::{FecPolicy, Scheduler, SlowViewer};

/// `section.key = "value"` read from a file: the error's text.
fn file_error(key: &str, value: &str) -> String {
    let (section, name) = key.split_once('.').unwrap();
    let text = format!("[{section}]\n{name} = {value:?}\n");
    match ConfigToml::parse(&text, "t.toml") {
        Ok(_) => panic!("{key} = {value:?} was taken"),
        Err(e) => e.to_string(),
    }
}

/// A bad value of `T`'s key, from the file and from a flag, names the key and `allowed`.
fn bad_value_is_named<T: KeyValue + std::fmt::Debug>(bad: &str, allowed: &[&str]) {
    let e = file_error(T::KEY, bad);
    assert!(e.contains(T::KEY), "{e}");
    let e2 = parse_key::<T>(bad).unwrap_err();
    assert_eq!(e2.key(), Some(T::KEY));
    let e2 = e2.to_string();
    for a in allowed {
        assert!(e.contains(a), "the file's error names {a}: {e}");
        assert!(e2.contains(a), "the flag's error names {a}: {e2}");
    }
}

/// Every allowed spelling parses, from the file too, and is written back the same.
fn spellings_round_trip<T: KeyValue + std::fmt::Debug + PartialEq>(spellings: &[&str]) {
    for s in spellings {
        let v = parse_key::<T>(s).unwrap();
        assert_eq!(v.value_name(), *s);
        assert_eq!(parse_key::<T>(&v.value_name()).unwrap(), v);
    }
}

#[test]
fn network_transport_is_typed() {
    bad_value_is_named::<Transport>("tcp", &["udp", "raw"]);
    spellings_round_trip::<Transport>(&TRANSPORTS);
    let c = ConfigToml::parse("[network]\ntransport = \"raw\"\n", "t.toml").unwrap();
    assert_eq!(c.network.transport, Transport::Raw);
}

#[test]
fn network_fec_is_typed() {
    bad_value_is_named::<FecPolicy>("lots", &["off", "adaptive", "20%"]);
    spellings_round_trip::<FecPolicy>(&["off", "adaptive", "20%", "100%"]);
    let c = ConfigToml::parse("[network]\nfec = \"30%\"\n", "t.toml").unwrap();
    assert_eq!(c.network.fec, "30%".parse::<FecPolicy>().unwrap());
    assert_eq!(NetworkToml::default().fec, FecPolicy::default());
}

#[test]
fn network_scheduler_is_typed() {
    bad_value_is_named::<Scheduler>("fastest", &["redundant", "keyframes", "lowest-delay"]);
    spellings_round_trip::<Scheduler>(&["redundant", "keyframes", "lowest-delay"]);
    let c = ConfigToml::parse("[network]\nscheduler = \"keyframes\"\n", "t.toml").unwrap();
    assert_eq!(c.network.scheduler, Scheduler::Keyframes);
}

#[test]
fn the_default_file_is_written_in_the_files_spelling_and_reads_back() {
    let text = toml::to_string(&NetworkToml::default()).unwrap();
    assert!(text.contains("fec = \"adaptive\""), "{text}");
    assert!(text.contains("transport = \"udp\""), "{text}");
    let back: NetworkToml = toml::from_str(&text).unwrap();
    assert_eq!(back.fec, FecPolicy::default());
    assert_eq!(back.scheduler, Scheduler::Redundant);
}

#[test]
fn host_access_and_slow_viewer_are_typed() {
    use crate::identity::Access;
    bad_value_is_named::<Access>("everyone", &["allowlist", "open", "pin"]);
    spellings_round_trip::<Access>(&["allowlist", "open", "pin"]);
    bad_value_is_named::<SlowViewer>("kick", &["pause", "drop"]);
    spellings_round_trip::<SlowViewer>(&["pause", "drop"]);
    let c = ConfigToml::parse("[host]\naccess = \"pin\"\nslow_viewer = \"drop\"\n", "t").unwrap();
    assert_eq!(
        (c.host.access, c.host.slow_viewer),
        (Access::Pin, SlowViewer::Drop)
    );
    let text = toml::to_string(&HostToml::default()).unwrap();
    assert!(text.contains("access = \"allowlist\""), "{text}");
    let back: HostToml = toml::from_str(&text).unwrap();
    assert_eq!(back.slow_viewer, SlowViewer::Pause);
}

#[test]
fn client_clock_presenter_hwaccel_and_decoder_are_typed() {
    bad_value_is_named::<ClientClock>("ntp", &["auto", "synchronized"]);
    spellings_round_trip::<ClientClock>(&CLOCK_MODES);
    bad_value_is_named::<PresenterKind>("vulkan", &PresenterKind::NAMES);
    spellings_round_trip::<PresenterKind>(&PresenterKind::NAMES);
    bad_value_is_named::<HwAccel>("opencl", &["none", "auto", "vaapi", "cuda"]);
    spellings_round_trip::<HwAccel>(&HwAccel::ALL.map(|h| h.name()));
    bad_value_is_named::<DecoderChoice>("magic", &["auto", "software"]);
    spellings_round_trip::<DecoderChoice>(&["auto", "software", "h264"]);
    let c = ConfigToml::parse(
        "[client]\nclock = \"synchronized\"\npresenter = \"sdl\"\nhwaccel = \"vaapi\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.client.clock, ClientClock::Synchronized);
    assert_eq!(c.client.presenter, PresenterKind::Sdl);
    assert_eq!(c.client.hwaccel, HwAccel::Vaapi);
    let client = ClientToml {
        name: "t".into(),
        ..Default::default()
    };
    let text = toml::to_string(&client).unwrap();
    assert!(text.contains("hwaccel = \"none\""), "{text}");
    let back: ClientToml = toml::from_str(&text).unwrap();
    assert_eq!(back.decoder, DecoderChoice::Auto);
    assert_eq!(back.clock, ClientClock::Auto);
}

#[test]
fn a_bad_name_is_typed_with_the_allowed_names() {
    let e = Transport::parse_value("tcp").unwrap_err();
    assert_eq!(
        e,
        UnknownName {
            value: "tcp".into(),
            allowed: &TRANSPORTS
        }
    );
    assert_eq!(e.to_string(), r#""tcp": expected one of udp, raw"#);
    assert_eq!(
        parse_key::<Transport>("tcp").unwrap_err().to_string(),
        r#"network.transport: "tcp": expected one of udp, raw"#
    );
    let e = PresenterKind::parse_value("vulkan").unwrap_err();
    assert_eq!(e.allowed, &PresenterKind::NAMES);
    assert_eq!(e.to_string(), r#""vulkan": expected one of auto, gl, sdl"#);
    let e = ClientClock::parse_value("ntp").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#""ntp": expected one of auto, synchronized"#
    );
}

#[test]
fn a_bad_codec_list_says_what_is_wrong() {
    assert_eq!(
        CodecList::from_names(&["hevc", " av1 "]).unwrap().codecs(),
        &[
            untether_media::codec::Codec::Hevc,
            untether_media::codec::Codec::Av1
        ]
    );
    let e = CodecList::from_names(&["h264", "vp9"]).unwrap_err();
    assert_eq!(e, CodecListError::Unknown("vp9".into()));
    assert_eq!(
        e.to_string(),
        r#"unknown codec "vp9"; allowed: h264, h264rgb, hevc, av1"#
    );
    let e = CodecList::from_names(&["h264", "h264"]).unwrap_err();
    assert_eq!(e, CodecListError::Twice("h264".into()));
    assert_eq!(e.to_string(), "h264 is listed twice");
    let e = CodecList::parse_value(" , ").unwrap_err();
    assert_eq!(e, CodecListError::Empty);
    assert_eq!(
        e.to_string(),
        "empty: list the codecs this client decodes (h264, h264rgb, hevc, av1)"
    );
    // The flag's spelling and the file's name the key.
    assert_eq!(
        parse_key::<CodecList>("h264,vp9").unwrap_err().to_string(),
        r#"client.codecs: unknown codec "vp9"; allowed: h264, h264rgb, hevc, av1"#
    );
    let e = ConfigToml::parse("[client]\ncodecs = [\"av1\", \"av1\"]\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("client.codecs: av1 is listed twice"), "{e}");
}

#[test]
fn a_bad_pose_names_the_kinds() {
    assert_eq!(
        "synthetic:nod".parse::<PoseSpec>(),
        Ok(PoseSpec::Synthetic("nod".into()))
    );
    let e = "synthetic:spin".parse::<PoseSpec>().unwrap_err();
    assert_eq!(
        e,
        PoseSpecError::UnknownTrackKind {
            spec: "synthetic:spin".into(),
            kind: "spin".into()
        }
    );
    assert_eq!(
        e.to_string(),
        r#""synthetic:spin": unknown track kind "spin" (expected one of sweep, turn, nod, still)"#
    );
    let e = "track:".parse::<PoseSpec>().unwrap_err();
    assert_eq!(e, PoseSpecError::Unknown("track:".into()));
    assert_eq!(
        e.to_string(),
        r#""track:": expected auto, mouse, synthetic[:sweep|turn|nod|still], track:FILE, imu[:PATH] or none"#
    );
    let vr = VrToml {
        pose: "wand".into(),
        ..Default::default()
    };
    let e = vr.pose_spec().unwrap_err();
    assert_eq!(e.key(), Some("vr.pose"));
}

#[test]
fn a_bad_pin_names_the_value() {
    assert_eq!(check_pin("012345"), Ok(()));
    let e = check_pin("12345a").unwrap_err();
    assert_eq!(e, BadPin("12345a".into()));
    assert_eq!(
        e.to_string(),
        r#""12345a": a pairing PIN is the 6 digits the host shows"#
    );
}

#[test]
fn a_bad_access_policy_is_typed() {
    use crate::identity::{Access, UnknownAccess};
    let e = "everyone".parse::<Access>().unwrap_err();
    assert_eq!(e, UnknownAccess("everyone".into()));
    assert_eq!(
        e.to_string(),
        r#"unknown access policy "everyone"; allowed: allowlist, open, pin"#
    );
}
