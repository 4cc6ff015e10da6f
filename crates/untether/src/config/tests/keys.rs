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
