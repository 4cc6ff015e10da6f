//! What the browsers are told about the stream: the H.264 profile and level of the encoder's
//! access units, read from their SPS, as an SDP `profile-level-id`. Every WebRTC browser decodes
//! constrained baseline with packetization mode 1 (RFC 7742), so a host that serves browsers
//! asks x264 for it (no CABAC, no 8x8 transform, no weighted prediction, no B-frames).

/// x264 options that make its stream constrained baseline (ultrafast already is).
pub(crate) const CONSTRAINED_BASELINE_X264: &str = "cabac=0:8x8dct=0:weightp=0:bframes=0";

/// The `profile-level-id` browsers are offered: constrained baseline, level 3.1. A level is a
/// receiver's limit that browsers do not enforce; the SPS carries the stream's real one.
pub(crate) const PROFILE_LEVEL_ID: u32 = 0x42e01f;

/// Profile, constraint flags and level of a sequence parameter set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProfileLevel {
    pub profile_idc: u8,
    pub constraints: u8,
    pub level_idc: u8,
}

impl ProfileLevel {
    /// Constrained baseline: baseline (or main/extended) with constraint_set1 (decodable by a
    /// main-profile decoder) — RFC 6184 §8.1.
    pub fn constrained_baseline(&self) -> bool {
        match self.profile_idc {
            66 => self.constraints & 0x40 != 0,
            77 | 88 => self.constraints & 0xC0 == 0xC0,
            _ => false,
        }
    }

    /// `profile-level-id` as SDP writes it (six hex digits).
    pub fn hex(&self) -> String {
        format!(
            "{:02x}{:02x}{:02x}",
            self.profile_idc, self.constraints, self.level_idc
        )
    }

    /// A name for logs and errors.
    pub fn name(&self) -> String {
        let p = match self.profile_idc {
            66 if self.constrained_baseline() => "constrained baseline",
            66 => "baseline",
            77 => "main",
            88 => "extended",
            100 => "high",
            110 => "high 10",
            122 => "high 4:2:2",
            244 => "high 4:4:4",
            _ => "unknown",
        };
        format!(
            "{p} (profile-level-id {}, level {}.{})",
            self.hex(),
            self.level_idc / 10,
            self.level_idc % 10
        )
    }
}

/// The NAL units of an Annex B access unit (start codes removed).
pub(crate) fn nal_units(au: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = au;
    std::iter::from_fn(move || loop {
        let start = find_start(rest)?;
        let body = &rest[start..];
        let end = find_start_code_pos(body).unwrap_or(body.len());
        rest = &body[end..];
        let nal = &body[..end];
        // A trailing zero of the next four-byte start code belongs to no NAL unit.
        let nal = match nal.iter().rposition(|&b| b != 0) {
            Some(i) => &nal[..=i],
            None => continue,
        };
        return Some(nal);
    })
}

/// Index just after the first start code (00 00 01), if any.
fn find_start(b: &[u8]) -> Option<usize> {
    find_start_code_pos(b).map(|i| i + 3)
}

fn find_start_code_pos(b: &[u8]) -> Option<usize> {
    b.windows(3).position(|w| w == [0, 0, 1])
}

/// The profile and level of the first SPS in an access unit (None: it has none).
pub(crate) fn sps_profile(au: &[u8]) -> Option<ProfileLevel> {
    nal_units(au)
        .find(|n| n.first().is_some_and(|h| h & 0x1F == 7) && n.len() >= 4)
        .map(|n| ProfileLevel {
            profile_idc: n[1],
            constraints: n[2],
            level_idc: n[3],
        })
}

/// Whether an access unit starts a stream a decoder can join (an IDR slice).
#[cfg(test)]
pub(crate) fn is_idr(au: &[u8]) -> bool {
    nal_units(au).any(|n| n.first().is_some_and(|h| h & 0x1F == 5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use untether_media::codec::{Encoder, EncoderConfig};
    use untether_media::convert::Conversion;
    use untether_media::BgraFrame;

    fn first_au(preset: &str, params: &str) -> Vec<u8> {
        let mut cfg = EncoderConfig::new(640, 360, 60, 2000);
        cfg.preset = preset.into();
        cfg.threads = 1;
        cfg.conversion = Conversion::Simd;
        cfg.extra_params = params.into();
        let mut enc = Encoder::new(cfg).unwrap();
        let frame = BgraFrame::new(640, 360).unwrap();
        enc.encode(&frame, true)
            .unwrap()
            .expect("libx264 has no delay")
            .data
    }

    #[test]
    fn x264_with_our_options_is_constrained_baseline_and_superfast_alone_is_not() {
        let au = first_au("superfast", CONSTRAINED_BASELINE_X264);
        assert!(is_idr(&au));
        let p = sps_profile(&au).unwrap();
        assert!(p.constrained_baseline(), "{}", p.name());
        let high = sps_profile(&first_au("superfast", "")).unwrap();
        assert!(!high.constrained_baseline(), "{}", high.name());
        assert_eq!(high.profile_idc, 100);
        let ultrafast = sps_profile(&first_au("ultrafast", "")).unwrap();
        assert!(ultrafast.constrained_baseline(), "{}", ultrafast.name());
    }

    #[test]
    fn nal_units_split_on_three_and_four_byte_start_codes() {
        let au = [
            0, 0, 0, 1, 0x67, 0x42, 0xc0, 0x1f, 0, 0, 1, 0x68, 9, 0, 0, 0, 1, 0x65, 1,
        ];
        let nals: Vec<&[u8]> = nal_units(&au).collect();
        assert_eq!(
            nals,
            vec![&[0x67, 0x42, 0xc0, 0x1f][..], &[0x68, 9], &[0x65, 1]]
        );
        assert_eq!(sps_profile(&au).unwrap().hex(), "42c01f");
        assert!(is_idr(&au));
        assert!(sps_profile(&[1, 2, 3]).is_none());
    }
}
