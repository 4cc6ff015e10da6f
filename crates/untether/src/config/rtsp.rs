//! `[rtsp]`: RTSP for ordinary players (`untether host --rtsp ADDR:PORT`), served by the crate
//! `untether-rtsp` from the host's one encoded stream.

#[allow(unused_imports)]
use super::*;

/// `[rtsp]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RtspToml {
    /// Where the RTSP server listens (TCP), `IP:PORT`; empty: no RTSP server.
    pub listen: String,
    /// The stream's path: players open `rtsp://HOST:PORT/untether`.
    pub path: String,
    /// Who may watch: `auto` (digest authentication unless `host.access = "open"`),
    /// `digest` (always), or `none` (anyone who can reach the port).
    pub auth: String,
    /// The digest user name.
    pub user: String,
    /// The digest password; empty: a new one is made at every start and printed.
    pub password: String,
    /// The RTP transports offered: `udp,tcp` (both; the player picks), `udp` or `tcp`
    /// (interleaved in the RTSP connection).
    pub transports: String,
    /// Frames waiting for the RTSP server's packetizer before a new one is dropped (and the
    /// stream waits for the next keyframe, which it asks for). Lower: less delay behind a
    /// stall; higher: fewer drops on a busy machine.
    #[serde(deserialize_with = "limits::de_rtsp_queue_frames")]
    pub queue_frames: u32,
    /// While RTSP viewers watch, a keyframe at least this often, ms (0: only when one is
    /// needed: a viewer joins, loses packets, or the stream had to drop a frame). Players that
    /// throw away what they read while probing the stream (`ffplay -fflags nobuffer`) start
    /// at the next one.
    #[serde(deserialize_with = "limits::de_rtsp_keyframe_interval_ms")]
    pub keyframe_interval_ms: u64,
    /// The largest RTP packet, bytes (IP and UDP headers not included).
    #[serde(deserialize_with = "limits::de_rtsp_mtu")]
    pub mtu: u32,
    /// Viewers at once; more are turned away.
    #[serde(deserialize_with = "limits::de_rtsp_max_viewers")]
    pub max_viewers: u32,
}

/// The values of `rtsp.auth`.
pub const RTSP_AUTH_MODES: [&str; 3] = ["auto", "digest", "none"];
/// The values of `rtsp.transports`.
pub const RTSP_TRANSPORTS: [&str; 3] = ["udp,tcp", "udp", "tcp"];
/// The default `rtsp.path`.
pub const RTSP_DEFAULT_PATH: &str = "/untether";

impl Default for RtspToml {
    fn default() -> Self {
        RtspToml {
            listen: String::new(),
            path: RTSP_DEFAULT_PATH.into(),
            auth: "auto".into(),
            user: "untether".into(),
            password: String::new(),
            transports: "udp,tcp".into(),
            queue_frames: 4,
            keyframe_interval_ms: 2000,
            mtu: 1200,
            max_viewers: 16,
        }
    }
}

/// Whether viewers must authenticate, from `rtsp.auth` and the host's access policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtspAuth {
    Digest,
    None,
}

impl RtspToml {
    /// Whether an RTSP server is asked for.
    pub fn enabled(&self) -> bool {
        !self.listen.trim().is_empty()
    }

    /// The address to listen on (`listen`), None when off.
    pub fn listen_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        if !self.enabled() {
            return Ok(None);
        }
        self.listen.trim().parse().map(Some).map_err(|_| {
            invalid(
                "rtsp.listen",
                format!(
                    "{:?} is not IP:PORT, e.g. 0.0.0.0:8554 (every interface), 127.0.0.1:8554 \
                     (this machine only) or [::]:8554; port 0 picks a free one",
                    self.listen
                ),
            )
        })
    }

    /// Digest or none, given the host's access policy (`auto`: digest unless it is open).
    pub fn auth_mode(&self, access: crate::identity::Access) -> Result<RtspAuth, ConfigError> {
        match self.auth.as_str() {
            "auto" if access == crate::identity::Access::Open => Ok(RtspAuth::None),
            "auto" | "digest" => Ok(RtspAuth::Digest),
            "none" => Ok(RtspAuth::None),
            other => Err(invalid(
                "rtsp.auth",
                format!("{other:?}: expected one of {}", RTSP_AUTH_MODES.join(", ")),
            )),
        }
    }

    /// (UDP offered, TCP offered).
    pub fn transports(&self) -> Result<(bool, bool), ConfigError> {
        match self.transports.replace(' ', "").as_str() {
            "udp,tcp" | "tcp,udp" => Ok((true, true)),
            "udp" => Ok((true, false)),
            "tcp" => Ok((false, true)),
            other => Err(invalid(
                "rtsp.transports",
                format!("{other:?}: expected one of {}", RTSP_TRANSPORTS.join(", ")),
            )),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.auth_mode(crate::identity::Access::Allowlist)?;
        self.transports()?;
        check_rtsp_path(&self.path)?;
        let printable = |s: &str| s.chars().all(|c| c.is_ascii_graphic());
        if self.user.is_empty() || self.user.len() > 64 || !printable(&self.user) {
            return Err(invalid(
                "rtsp.user",
                format!(
                    "{:?}: 1 to 64 printable ASCII characters, no spaces",
                    self.user
                ),
            ));
        }
        if !self.password.is_empty()
            && (self.password.len() < 8 || self.password.len() > 128 || !printable(&self.password))
        {
            return Err(invalid(
                "rtsp.password",
                "8 to 128 printable ASCII characters, no spaces (or empty: a new one at every start)",
            ));
        }
        RTSP_QUEUE_FRAMES.check(self.queue_frames)?;
        RTSP_KEYFRAME_INTERVAL_MS.check(self.keyframe_interval_ms)?;
        if (1..100).contains(&self.keyframe_interval_ms) {
            return Err(invalid(
                "rtsp.keyframe_interval_ms",
                format!(
                    "{} is below 100 (a keyframe every few frames is no stream); 0 = only on demand",
                    self.keyframe_interval_ms
                ),
            ));
        }
        RTSP_MTU.check(self.mtu)?;
        RTSP_MAX_VIEWERS.check(self.max_viewers)?;
        Ok(())
    }
}

/// `rtsp.path`: `/` and 1 to 63 more characters of letters, digits, `-`, `_`, `.`, `~` and
/// inner `/`.
fn check_rtsp_path(path: &str) -> Result<(), ConfigError> {
    let ok = path.len() >= 2
        && path.len() <= 64
        && path.starts_with('/')
        && !path.ends_with('/')
        && !path.contains("//")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~/".contains(c));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "rtsp.path",
            format!(
                "{path:?}: a path such as {RTSP_DEFAULT_PATH}: `/` then up to 63 letters, digits, \
                 `-`, `_`, `.`, `~` and inner `/`"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Access;

    #[test]
    fn defaults_are_valid_and_off() {
        let r = RtspToml::default();
        r.validate().unwrap();
        assert!(!r.enabled());
        assert_eq!(r.listen_addr().unwrap(), None);
    }

    #[test]
    fn auth_follows_the_hosts_access_unless_set() {
        let mut r = RtspToml::default();
        assert_eq!(r.auth_mode(Access::Allowlist).unwrap(), RtspAuth::Digest);
        assert_eq!(r.auth_mode(Access::Pin).unwrap(), RtspAuth::Digest);
        assert_eq!(r.auth_mode(Access::Open).unwrap(), RtspAuth::None);
        r.auth = "digest".into();
        assert_eq!(r.auth_mode(Access::Open).unwrap(), RtspAuth::Digest);
        r.auth = "none".into();
        assert_eq!(r.auth_mode(Access::Allowlist).unwrap(), RtspAuth::None);
        r.auth = "basic".into();
        let e = r.validate().unwrap_err().to_string();
        assert!(
            e.contains("rtsp.auth") && e.contains("auto, digest, none"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |f: &dyn Fn(&mut RtspToml), key: &str| {
            let mut r = RtspToml::default();
            f(&mut r);
            let e = r.validate().unwrap_err();
            assert_eq!(e.key(), Some(key), "{e}");
        };
        bad(&|r| r.listen = "8554".into(), "rtsp.listen");
        bad(&|r| r.path = "untether".into(), "rtsp.path");
        bad(&|r| r.path = "/a b".into(), "rtsp.path");
        bad(&|r| r.path = "/".into(), "rtsp.path");
        bad(&|r| r.path = "/a/".into(), "rtsp.path");
        bad(&|r| r.user = "a b".into(), "rtsp.user");
        bad(&|r| r.user = String::new(), "rtsp.user");
        bad(&|r| r.password = "short".into(), "rtsp.password");
        bad(&|r| r.transports = "sctp".into(), "rtsp.transports");
        bad(&|r| r.queue_frames = 0, "rtsp.queue_frames");
        bad(&|r| r.mtu = 100, "rtsp.mtu");
        bad(
            &|r| r.keyframe_interval_ms = 99,
            "rtsp.keyframe_interval_ms",
        );
        bad(&|r| r.max_viewers = 0, "rtsp.max_viewers");
    }

    #[test]
    fn good_values_parse() {
        let r = RtspToml {
            listen: "127.0.0.1:0".into(),
            path: "/live/cam-1".into(),
            transports: "tcp".into(),
            password: "correct horse".replace(' ', "-"),
            ..Default::default()
        };
        r.validate().unwrap();
        assert_eq!(r.listen_addr().unwrap().map(|a| a.port()), Some(0));
        assert_eq!(r.transports().unwrap(), (false, true));
    }

    #[test]
    fn the_file_section_is_read_with_ranges() {
        let c = ConfigToml::parse(
            "[rtsp]\nlisten = \"0.0.0.0:8554\"\nqueue_frames = 2\n",
            "t.toml",
        )
        .unwrap();
        assert!(c.rtsp.enabled());
        assert_eq!(c.rtsp.queue_frames, 2);
        let e = ConfigToml::parse("[rtsp]\nmtu = -5\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("rtsp.mtu"), "{e}");
        let e = ConfigToml::parse("[rtsp]\nport = 5\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
    }
}
