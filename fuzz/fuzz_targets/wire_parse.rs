//! Every datagram-level parser on arbitrary bytes: must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use untether_proto::wire;

fuzz_target!(|data: &[u8]| {
    let _ = wire::parse(data);
    let _ = wire::Header::parse(data);
    let _ = wire::Hello::parse(data);
    let _ = wire::Reject::parse(data);
    let _ = wire::VersionNegotiation::parse(data);
    let _ = wire::SessionParams::parse(data);
    if let Ok((h, payload)) = wire::ShardHeader::parse(data) {
        assert_eq!(payload.len(), h.expected_len());
    }
    if let Ok(frames) = wire::parse_control(data) {
        // What parses re-encodes to something that parses to the same frames.
        let mut out = Vec::new();
        for f in &frames {
            f.encode(&mut out);
        }
        assert_eq!(wire::parse_control(&out).ok().as_ref(), Some(&frames));
    }
});
