//! What an access unit is, read from its bytes: Annex B NAL units of H.264 and HEVC (IDR or
//! IRAP pictures, parameter sets, recovery-point SEI). Encoders disagree on what their
//! "keyframe" flag means (x264 sets it on intra-refresh recovery points too), so untether
//! decides from the bitstream whether a frame can be decoded on its own.

use super::Codec;

/// The NAL units of an Annex B access unit, each from its header byte on, start codes (and
/// the zero bytes before the next one) removed.
pub fn nal_units(au: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= au.len() {
        if au[i] == 0 && au[i + 1] == 0 && au[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .map(|&s| {
            // The next start code, minus its zero prefix (3 or 4 bytes).
            let mut e = s - 3;
            while e > 0 && au[e - 1] == 0 {
                e -= 1;
            }
            e
        })
        .chain(std::iter::once(au.len()))
        .collect();
    starts
        .into_iter()
        .zip(ends)
        .filter(|(s, e)| s < e)
        .map(move |(s, e)| &au[s..e])
}

/// H.264's nal_unit_type.
fn h264_type(nal: &[u8]) -> u8 {
    nal.first().map_or(0, |b| b & 0x1f)
}

/// HEVC's nal_unit_type.
fn hevc_type(nal: &[u8]) -> u8 {
    nal.first().map_or(0, |b| (b >> 1) & 0x3f)
}

/// Whether the access unit holds a picture decodable without any earlier one: an IDR slice
/// (H.264) or an IRAP picture (HEVC: BLA, IDR, CRA — untether's streams have no leading
/// pictures). AV1 (not Annex B) answers `packet_key`, the encoder's key-frame flag.
pub fn is_keyframe(codec: Codec, au: &[u8], packet_key: bool) -> bool {
    match codec {
        Codec::H264 | Codec::H264Rgb => nal_units(au).any(|n| h264_type(n) == 5),
        Codec::Hevc => nal_units(au).any(|n| (16..=21).contains(&hevc_type(n))),
        Codec::Av1 => packet_key,
    }
}

/// Whether the access unit carries the sequence parameter sets a decoder starting here needs
/// (H.264 SPS and PPS; HEVC VPS, SPS and PPS). AV1 answers true (its sequence header rides
/// with every key frame).
pub fn has_parameter_sets(codec: Codec, au: &[u8]) -> bool {
    match codec {
        Codec::H264 | Codec::H264Rgb => {
            let t: Vec<u8> = nal_units(au).map(h264_type).collect();
            t.contains(&7) && t.contains(&8)
        }
        Codec::Hevc => {
            let t: Vec<u8> = nal_units(au).map(hevc_type).collect();
            t.contains(&32) && t.contains(&33) && t.contains(&34)
        }
        Codec::Av1 => true,
    }
}

/// The parameter-set NAL units of an access unit, each with a 4-byte start code, in order
/// (empty if it has none).
pub fn parameter_sets(codec: Codec, au: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if !codec.is_annex_b() {
        return out;
    }
    for n in nal_units(au) {
        let ps = match codec {
            Codec::Hevc => (32..=34).contains(&hevc_type(n)),
            _ => matches!(h264_type(n), 7 | 8),
        };
        if ps {
            out.extend_from_slice(&[0, 0, 0, 1]);
            out.extend_from_slice(n);
        }
    }
    out
}

/// Whether the access unit has a recovery-point SEI (H.264 payload type 6 in an SEI NAL; HEVC
/// in a prefix SEI): where an intra-refresh sweep starts (x264 writes one at each).
pub fn has_recovery_point(codec: Codec, au: &[u8]) -> bool {
    let first_payload_type = |n: &[u8], header: usize| -> Option<u8> {
        // payload_type is a run of 0xFF bytes plus a last byte; recovery point = 6.
        let mut t = 0u32;
        for &b in n.get(header..)? {
            t += b as u32;
            if b != 0xff {
                return u8::try_from(t).ok();
            }
        }
        None
    };
    nal_units(au).any(|n| match codec {
        Codec::H264 | Codec::H264Rgb => h264_type(n) == 6 && first_payload_type(n, 1) == Some(6),
        Codec::Hevc => hevc_type(n) == 39 && first_payload_type(n, 2) == Some(6),
        Codec::Av1 => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nal_units_split_on_3_and_4_byte_start_codes() {
        let au = [
            0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 1, 0x65, 9, 9,
        ];
        let n: Vec<&[u8]> = nal_units(&au).collect();
        assert_eq!(
            n,
            vec![&[0x67, 1, 2][..], &[0x68, 3][..], &[0x65, 9, 9][..]]
        );
        assert!(is_keyframe(Codec::H264, &au, false));
        assert!(has_parameter_sets(Codec::H264, &au));
        assert_eq!(
            parameter_sets(Codec::H264, &au),
            vec![0, 0, 0, 1, 0x67, 1, 2, 0, 0, 0, 1, 0x68, 3]
        );
        // A P slice with an SEI recovery point (payload type 6).
        let p = [0, 0, 0, 1, 0x06, 0x06, 1, 0x80, 0, 0, 1, 0x41, 7];
        assert!(!is_keyframe(Codec::H264, &p, true));
        assert!(!has_parameter_sets(Codec::H264, &p));
        assert!(has_recovery_point(Codec::H264, &p));
        // HEVC: VPS, SPS, PPS (32–34) and a CRA (21).
        let h = [
            0, 0, 1, 0x40, 1, 0, 0, 1, 0x42, 1, 0, 0, 1, 0x44, 1, 0, 0, 1, 0x2a, 1, 5,
        ];
        assert!(is_keyframe(Codec::Hevc, &h, false));
        assert!(has_parameter_sets(Codec::Hevc, &h));
        assert!(nal_units(&[0, 0, 1]).next().is_none());
        assert!(nal_units(&[]).next().is_none());
        // AV1 trusts the encoder's flag.
        assert!(is_keyframe(Codec::Av1, &[0x12, 0], true));
    }
}
