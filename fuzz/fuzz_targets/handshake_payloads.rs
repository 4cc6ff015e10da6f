//! The handshake payload parsers and the state channel's wire forms.
#![no_main]
use libfuzzer_sys::fuzz_target;
use untether_proto::handshake::{ClientInfoPayload, Mode, Offer, SessionSetup};
use untether_proto::state::{StateAck, StatePacket};
use untether_proto::wire::Reader;

fuzz_target!(|data: &[u8]| {
    for mode in [Mode::Known, Mode::Pin] {
        let _ = Offer::parse(data, mode);
        let _ = SessionSetup::parse(data, mode);
    }
    if let Ok(info) = ClientInfoPayload::parse(data) {
        // What the host negotiates with: never more than 8 codecs, each once.
        let codecs = info.decodes();
        assert!(codecs.len() <= 8);
        let _ = untether_proto::wire::choose_codec(&[untether_proto::Codec::Hevc], &codecs);
    }
    if let Ok(a) = StateAck::parse(&mut Reader::new(data, "fuzz")) {
        for (range, _) in a.runs() {
            assert!(range.start() <= range.end());
        }
    }
    let _ = StatePacket::parse(&mut Reader::new(data, "fuzz"));
});
