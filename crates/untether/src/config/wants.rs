//! `client.resolution`, `client.fps`, `client.bitrate_kbps`: the stream a client asks the host
//! for (sent in the handshake; the host grants it within its limits, docs/PROTOCOL.md §3.4).

use untether_proto::StreamWants;

use super::{invalid, ClientToml, ConfigError};

impl ClientToml {
    /// The stream asked for (None: nothing asked, the host's own). A bad value names its key.
    pub fn wants(&self) -> Result<Option<StreamWants>, ConfigError> {
        let (width, height) = if self.resolution.trim().is_empty() {
            (0, 0)
        } else {
            let (w, h) = untether_proto::units::parse_resolution(&self.resolution)
                .map_err(|e| invalid("client.resolution", e.to_string()))?;
            if !(64..=7680).contains(&w) || !(64..=4320).contains(&h) {
                return Err(invalid(
                    "client.resolution",
                    format!("{w}x{h} is out of range: 64x64 to 7680x4320"),
                ));
            }
            (w as u16, h as u16)
        };
        if self.fps > 240 {
            return Err(invalid(
                "client.fps",
                format!("{} is out of range: 1–240 (0: the host's)", self.fps),
            ));
        }
        if self.bitrate_kbps != 0 && !(100..=1_000_000).contains(&self.bitrate_kbps) {
            return Err(invalid(
                "client.bitrate_kbps",
                format!(
                    "{} kbit/s is out of range: 100–1000000 (0: the host's)",
                    self.bitrate_kbps
                ),
            ));
        }
        let w = StreamWants {
            width,
            height,
            fps: self.fps as u16,
            bitrate_kbps: self.bitrate_kbps,
        };
        Ok((w != StreamWants::default()).then_some(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wants_are_parsed_and_a_bad_one_names_its_key() {
        let mut c = ClientToml::default();
        assert_eq!(c.wants().unwrap(), None);
        c.resolution = "720p".into();
        c.fps = 30;
        assert_eq!(
            c.wants().unwrap(),
            Some(StreamWants {
                width: 1280,
                height: 720,
                fps: 30,
                bitrate_kbps: 0
            })
        );
        c.resolution = "huge".into();
        let e = c.wants().unwrap_err().to_string();
        assert!(e.contains("client.resolution"), "{e}");
        c.resolution = String::new();
        c.bitrate_kbps = 5;
        let e = c.wants().unwrap_err().to_string();
        assert!(
            e.contains("client.bitrate_kbps") && e.contains("100"),
            "{e}"
        );
        c.bitrate_kbps = 0;
        c.fps = 1000;
        assert!(c.validate().unwrap_err().to_string().contains("client.fps"));
    }
}
