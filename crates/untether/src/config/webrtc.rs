//! `[webrtc]`: browsers as clients (the page and WHEP-style signalling the host serves) and
//! WHIP publishing. docs/BROWSER.md explains both.

use serde::{Deserialize, Serialize};

use super::{invalid, limits, ConfigError, WEBRTC_LINK_TTL_S, WEBRTC_MAX_BROWSERS};

/// `[webrtc]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WebRtcToml {
    /// `ADDR:PORT` where the host serves the browser page and the signalling endpoint (TCP)
    /// and the browsers' media (UDP, the same port); empty: no browsers.
    pub listen: String,
    /// HTTPS for the page: empty (plain HTTP), `auto` (a self-signed certificate, made once
    /// and kept in the state directory) or the path of a PEM file holding the certificate and
    /// its private key.
    pub cert: String,
    /// Publish the stream once to this WHIP endpoint (`http(s)://…`, or `whip://` for
    /// `http://`, `whips://` for `https://`); empty: no publishing.
    pub publish: String,
    /// The bearer token the WHIP endpoint asks for (empty: none).
    pub publish_token: String,
    /// How long a one-time browser link is valid, seconds.
    #[serde(deserialize_with = "limits::de_webrtc_link_ttl_s")]
    pub link_ttl_s: u64,
    /// Browsers served at once.
    #[serde(deserialize_with = "limits::de_webrtc_max_browsers")]
    pub max_browsers: u32,
}

impl Default for WebRtcToml {
    fn default() -> Self {
        WebRtcToml {
            listen: String::new(),
            cert: String::new(),
            publish: String::new(),
            publish_token: String::new(),
            link_ttl_s: 600,
            max_browsers: 4,
        }
    }
}

/// Where HTTPS comes from (`webrtc.cert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// Plain HTTP.
    None,
    /// A self-signed certificate, kept in the state directory (made in memory without one).
    Auto,
    /// A PEM file with the certificate (chain) and its private key.
    File(std::path::PathBuf),
}

impl WebRtcToml {
    /// Whether the host does anything with WebRTC.
    pub fn enabled(&self) -> bool {
        !self.listen.trim().is_empty() || !self.publish.trim().is_empty()
    }

    /// The address browsers reach (`listen`), None when off.
    pub fn listen_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let s = self.listen.trim();
        if s.is_empty() {
            return Ok(None);
        }
        s.parse().map(Some).map_err(|_| {
            invalid(
                "webrtc.listen",
                format!(
                    "{s:?} is not IP:PORT, e.g. 0.0.0.0:8080 (every interface) or \
                     127.0.0.1:8080 (this machine only); port 0 picks a free one"
                ),
            )
        })
    }

    /// The certificate source (`cert`).
    pub fn cert_source(&self) -> Result<CertSource, ConfigError> {
        Ok(match self.cert.trim() {
            "" => CertSource::None,
            "auto" => CertSource::Auto,
            path => {
                let p = std::path::PathBuf::from(path);
                if !p.is_file() {
                    return Err(invalid(
                        "webrtc.cert",
                        format!(
                            "{path:?} is not a file; expected auto (a self-signed certificate) \
                             or a PEM file with the certificate and its private key"
                        ),
                    ));
                }
                CertSource::File(p)
            }
        })
    }

    /// The WHIP endpoint as an `http(s)://` URL (`publish`), None when off.
    pub fn publish_url(&self) -> Result<Option<String>, ConfigError> {
        let s = self.publish.trim();
        if s.is_empty() {
            return Ok(None);
        }
        let url = if let Some(rest) = s.strip_prefix("whip://") {
            format!("http://{rest}")
        } else if let Some(rest) = s.strip_prefix("whips://") {
            format!("https://{rest}")
        } else {
            s.to_string()
        };
        let host_part = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        match host_part {
            Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !rest.contains(' ') => {
                Ok(Some(url))
            }
            _ => Err(invalid(
                "webrtc.publish",
                format!(
                    "{s:?} is not a WHIP endpoint URL: expected http(s)://HOST[:PORT]/PATH \
                     (whip:// and whips:// stand for http:// and https://)"
                ),
            )),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.cert_source()?;
        self.publish_url()?;
        if self.cert.trim() != "" && self.listen.trim().is_empty() {
            return Err(invalid(
                "webrtc.cert",
                "a certificate is for the browser page: set webrtc.listen too",
            ));
        }
        if self
            .publish_token
            .chars()
            .any(|c| c.is_control() || c == ' ')
        {
            return Err(invalid(
                "webrtc.publish_token",
                "a bearer token has no spaces or control characters",
            ));
        }
        WEBRTC_LINK_TTL_S.check(self.link_ttl_s)?;
        WEBRTC_MAX_BROWSERS.check(self.max_browsers)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_valid() {
        let w = WebRtcToml::default();
        assert!(!w.enabled());
        assert!(w.validate().is_ok());
        assert_eq!(w.listen_addr().unwrap(), None);
        assert_eq!(w.publish_url().unwrap(), None);
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |w: WebRtcToml| w.validate().unwrap_err().key().map(str::to_string);
        let listen = |s: &str| WebRtcToml {
            listen: s.into(),
            ..Default::default()
        };
        assert_eq!(bad(listen("8080")).as_deref(), Some("webrtc.listen"));
        let publish = |s: &str| WebRtcToml {
            publish: s.into(),
            ..Default::default()
        };
        assert_eq!(
            bad(publish("rtmp://x/y")).as_deref(),
            Some("webrtc.publish")
        );
        assert_eq!(
            bad(publish("http:///whip")).as_deref(),
            Some("webrtc.publish")
        );
        let cert = WebRtcToml {
            cert: "/nonexistent/cert.pem".into(),
            listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        assert_eq!(bad(cert).as_deref(), Some("webrtc.cert"));
        let cert_alone = WebRtcToml {
            cert: "auto".into(),
            ..Default::default()
        };
        assert_eq!(bad(cert_alone).as_deref(), Some("webrtc.cert"));
        let browsers = WebRtcToml {
            max_browsers: 0,
            ..Default::default()
        };
        assert_eq!(bad(browsers).as_deref(), Some("webrtc.max_browsers"));
    }

    #[test]
    fn whip_schemes_stand_for_http() {
        let p = |s: &str| {
            WebRtcToml {
                publish: s.into(),
                ..Default::default()
            }
            .publish_url()
            .unwrap()
        };
        assert_eq!(
            p("whip://127.0.0.1:7080/whip/endpoint/abc").as_deref(),
            Some("http://127.0.0.1:7080/whip/endpoint/abc")
        );
        assert_eq!(p("whips://x/w").as_deref(), Some("https://x/w"));
        assert_eq!(p("https://x/w").as_deref(), Some("https://x/w"));
    }

    #[test]
    fn the_file_parses_and_refuses_out_of_range_values() {
        let cfg = crate::config::ConfigToml::parse(
            "[webrtc]\nlisten = \"127.0.0.1:8080\"\nlink_ttl_s = 60\n",
            "t",
        )
        .unwrap();
        assert_eq!(cfg.webrtc.listen, "127.0.0.1:8080");
        assert_eq!(cfg.webrtc.link_ttl_s, 60);
        let e = crate::config::ConfigToml::parse("[webrtc]\nmax_browsers = -1\n", "t").unwrap_err();
        assert!(e.to_string().contains("webrtc.max_browsers"), "{e}");
    }
}
