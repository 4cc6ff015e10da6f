//! The host's API for browsers: the link to print, the page's address and certificate, what
//! the WebRTC sessions counted.

use crate::clock::now_us;
use crate::host::Host;

pub use super::types::WebRtcSummary;

impl Host {
    /// The page's one-time link for the next browser (`http://HOST:PORT/?token=…`: single use,
    /// valid `webrtc.link_ttl_s`; a new one is made once it is used or expired). None without
    /// `webrtc.listen`.
    pub fn browser_link(&self) -> Option<String> {
        let base = self.browsers.as_ref()?.base_url.clone();
        let token = self.query(|n| n.webrtc.as_mut().map(|w| w.link_token(now_us())))??;
        Some(format!("{base}?token={token}"))
    }

    /// The page's address without a token (for `--access open`, or the PIN form).
    pub fn browser_url(&self) -> Option<String> {
        self.browsers.as_ref().map(|b| b.base_url.clone())
    }

    /// The SHA-256 fingerprint of the page's HTTPS certificate (`webrtc.cert`).
    pub fn browser_cert_fingerprint(&self) -> Option<String> {
        self.browsers.as_ref()?.fingerprint.clone()
    }

    /// What the WebRTC sessions (browsers, the WHIP publication) counted; None when
    /// `[webrtc]` is off.
    pub fn webrtc_summary(&self) -> Option<WebRtcSummary> {
        self.query(|n| n.webrtc.as_ref().map(|w| w.summary().clone()))?
    }
}
