//! Who may watch: RTSP digest authentication (gst-rtsp-server's `RTSPAuth`), with the user
//! and password from the configuration or a password made at start; and a thin subclass of
//! `RTSPAuth` that asks a [`Gate`] before each check of a request's credentials (to refuse an
//! address that guessed wrong too often without checking them) and tells it what the check
//! came to (to count and log refusals: gst-rtsp-server answers them itself, with 401).

use std::sync::OnceLock;

use gst_rtsp_server::glib;
use gst_rtsp_server::prelude::*;
use gst_rtsp_server::subclass::prelude::*;
use gst_rtsp_server::{RTSPAuth, RTSPContext, RTSPToken};
use rand::distr::Alphanumeric;
use rand::Rng;

/// The role a viewer's token carries, and the media factory's role that lets it watch.
pub(crate) const VIEWER_ROLE: &str = "viewer";

/// A digest user and password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl Credentials {
    /// The configured password, or a new random one (16 letters and digits, ~95 bits) when
    /// it is empty.
    pub fn new(user: &str, password: &str) -> Credentials {
        let password = if password.is_empty() {
            rand::rng()
                .sample_iter(&Alphanumeric)
                .take(16)
                .map(char::from)
                .collect()
        } else {
            password.to_string()
        };
        Credentials {
            user: user.to_string(),
            password,
        }
    }

    /// `user:password@` for a URL, percent-encoded.
    pub fn userinfo(&self) -> String {
        format!(
            "{}:{}@",
            percent_encode(&self.user),
            percent_encode(&self.password)
        )
    }
}

/// RFC 3986 userinfo: unreserved characters as they are, everything else `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What checking a request's credentials came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// The right user and password: the request goes on.
    Valid,
    /// Credentials, wrong ones: answered 401.
    Wrong,
    /// No credentials (the challenge every player gets first): answered 401.
    Missing,
}

/// Around each check of a request's credentials (gst-rtsp-server's `authenticate`, called once
/// per request that needs them: DESCRIBE, SETUP, PLAY, …).
pub(crate) trait Gate: Send + Sync {
    /// Whether the credentials may be checked at all; false: the request is answered 401
    /// unchecked.
    fn may_try(&self, ctx: &RTSPContext) -> bool;
    /// What the check came to.
    fn checked(&self, ctx: &RTSPContext, outcome: Checked);
}

mod imp {
    use super::*;

    #[derive(Default)]
    pub struct CountingAuth {
        pub(super) gate: OnceLock<Box<dyn Gate>>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for CountingAuth {
        const NAME: &'static str = "UntetherRtspAuth";
        type Type = super::CountingAuth;
        type ParentType = RTSPAuth;
    }

    impl ObjectImpl for CountingAuth {}

    impl RTSPAuthImpl for CountingAuth {
        // gst-rtsp-server calls this once per request that needs credentials; false (or no
        // token set) makes it answer 401 and stop there.
        fn authenticate(&self, ctx: &RTSPContext) -> bool {
            let Some(gate) = self.gate.get() else {
                return self.parent_authenticate(ctx);
            };
            if !gate.may_try(ctx) {
                return false;
            }
            let ok = self.parent_authenticate(ctx);
            // The parent sets the token of the credentials it verified (there is no default
            // token): none means missing or wrong credentials.
            let outcome = if ok && ctx.token().is_some() {
                Checked::Valid
            } else if ctx
                .request()
                .is_some_and(|m| !m.parse_auth_credentials().is_empty())
            {
                Checked::Wrong
            } else {
                Checked::Missing
            };
            gate.checked(ctx, outcome);
            ok
        }
    }
}

glib::wrapper! {
    /// gst-rtsp-server's `RTSPAuth`, asking a [`Gate`] around each check.
    pub struct CountingAuth(ObjectSubclass<imp::CountingAuth>) @extends RTSPAuth;
}

impl CountingAuth {
    /// Digest authentication for `c`, whose token lets the viewer watch; `gate` is asked
    /// around each check.
    pub(crate) fn digest(c: &Credentials, gate: Box<dyn Gate>) -> CountingAuth {
        let auth: CountingAuth = glib::Object::new();
        let _ = auth.imp().gate.set(gate);
        auth.set_supported_methods(gst_rtsp_server::gst_rtsp::RTSPAuthMethod::Digest);
        auth.set_realm(Some("untether"));
        let token = RTSPToken::builder()
            .field(
                gst_rtsp_server::RTSP_TOKEN_MEDIA_FACTORY_ROLE.as_str(),
                VIEWER_ROLE,
            )
            .build();
        auth.add_digest(&c.user, &c.password, &token);
        auth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_kept_or_made() {
        let c = Credentials::new("untether", "given-password");
        assert_eq!(c.password, "given-password");
        let a = Credentials::new("untether", "");
        let b = Credentials::new("untether", "");
        assert_eq!(a.password.len(), 16);
        assert!(a.password.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.password, b.password, "a new one each time");
    }

    #[test]
    fn userinfo_is_percent_encoded() {
        let c = Credentials {
            user: "ann".into(),
            password: "p@ss:w/rd%".into(),
        };
        assert_eq!(c.userinfo(), "ann:p%40ss%3Aw%2Frd%25@");
    }
}
