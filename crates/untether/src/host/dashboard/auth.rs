//! Who may use the dashboard, decided for each request before anything else is read:
//!
//! - a request carrying the admin token (the `X-Untether-Admin` header, the `untether_admin`
//!   cookie, or `?admin=` on the page's address) is the operator's, compared in constant time;
//!   a wrong token is refused (403) whatever the address;
//! - anything else is refused: 401 without a token, 403 with a wrong one — from this machine
//!   too, since every local account reaches loopback (issue 33: another user approved itself
//!   and took control through it). The operator has the link the host printed, or reads it from
//!   `dashboard_link` in the 0700 state directory;
//! - a change (every `POST`) needs the token in the `X-Untether-Admin` header, even from this
//!   machine: another site's page can make the browser send a form or a cookie, never that
//!   header (no CORS header is ever sent, so its preflight fails). The page the operator loads
//!   carries the token for its own requests.

/// The header a change carries its token in (and any request may).
pub(super) const TOKEN_HEADER: &str = "X-Untether-Admin";
/// The cookie the page's first load (`?admin=`) sets.
pub(super) const COOKIE: &str = "untether_admin";

/// What a request says about itself, as far as the gate cares.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Asked<'a> {
    /// A `POST`: it changes something.
    pub change: bool,
    pub header_token: Option<&'a str>,
    pub cookie_token: Option<&'a str>,
    pub query_token: Option<&'a str>,
}

/// The gate's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Served; `set_cookie`: the token came in the page's address, remember it in a cookie.
    Allowed { set_cookie: bool },
    /// Refused with a status (401, 403) and a one-line reason.
    Refused(u16, String),
}

/// The admin token and the decision.
pub(super) struct Gate {
    token: String,
}

impl Gate {
    pub fn new(token: String) -> Gate {
        Gate { token }
    }

    /// The token (for the page the operator loads).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether `given` is the token, in constant time for tokens of its length.
    fn is_token(&self, given: &str) -> bool {
        let (a, b) = (self.token.as_bytes(), given.trim().as_bytes());
        a.len() == b.len() && openssl::memcmp::eq(a, b)
    }

    pub fn check(&self, r: &Asked<'_>) -> Verdict {
        let wrong = || {
            Verdict::Refused(
                403,
                "wrong admin token: use the dashboard link the host printed at start".into(),
            )
        };
        let given = [r.header_token, r.cookie_token, r.query_token];
        let mut any = false;
        for t in given.into_iter().flatten() {
            any = true;
            if !self.is_token(t) {
                return wrong();
            }
        }
        if r.change {
            return match r.header_token {
                Some(_) => Verdict::Allowed { set_cookie: false },
                None => Verdict::Refused(
                    403,
                    format!(
                        "a change needs the admin token in the {TOKEN_HEADER} header (the \
                         dashboard's page sends it; a cookie alone is not enough)"
                    ),
                ),
            };
        }
        if any {
            return Verdict::Allowed {
                set_cookie: r.query_token.is_some(),
            };
        }
        Verdict::Refused(
            401,
            "the dashboard answers to its admin token only: open the link with ?admin=TOKEN that \
             the host printed at start (also in dashboard_link in its state directory, readable \
             by its user only)"
                .into(),
        )
    }
}

/// The `untether_admin` cookie out of a `Cookie` header.
pub(super) fn cookie_token(cookie: &str) -> Option<&str> {
    cookie
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// `admin=` out of a query string.
pub(super) fn query_token(query: &str) -> Option<&str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == "admin")
        .map(|(_, v)| v)
}

/// The operating system's random generator failed: no admin token.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the dashboard's admin token: {0}")]
pub(super) struct NoAdminToken(#[source] untether_proto::handshake::OsRandomUnavailable);

/// A new admin token: 128 random bits as hex.
pub(super) fn new_token() -> Result<String, NoAdminToken> {
    let seed = untether_proto::handshake::try_os_seed().map_err(NoAdminToken)?;
    Ok(seed[..16].iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn gate() -> Gate {
        Gate::new(TOKEN.into())
    }

    fn status(v: Verdict) -> u16 {
        match v {
            Verdict::Allowed { .. } => 200,
            Verdict::Refused(s, _) => s,
        }
    }

    /// Every local account reaches loopback: a read without the token is refused there too
    /// (issue 33 item 3: it handed the token and the PIN to any local user).
    #[test]
    fn nothing_is_served_without_the_token_and_changes_need_it_in_the_header() {
        let g = gate();
        assert_eq!(status(g.check(&Asked::default())), 401);
        let post = Asked {
            change: true,
            ..Default::default()
        };
        assert_eq!(status(g.check(&post)), 403, "no header: CSRF");
        let with_cookie = Asked {
            cookie_token: Some(TOKEN),
            ..post
        };
        assert_eq!(status(g.check(&with_cookie)), 403, "a cookie is not enough");
        let with_header = Asked {
            header_token: Some(TOKEN),
            ..post
        };
        assert_eq!(status(g.check(&with_header)), 200);
    }

    #[test]
    fn the_token_lets_in_and_a_wrong_one_is_refused() {
        let g = gate();
        let query = Asked {
            query_token: Some(TOKEN),
            ..Default::default()
        };
        assert_eq!(g.check(&query), Verdict::Allowed { set_cookie: true });
        let cookie = Asked {
            cookie_token: Some(TOKEN),
            ..Default::default()
        };
        assert_eq!(g.check(&cookie), Verdict::Allowed { set_cookie: false });
        for bad in [
            "",
            "0123",
            &TOKEN.replace('f', "e"),
            "x".repeat(32).as_str(),
        ] {
            let wrong = Asked {
                header_token: Some(bad),
                ..Default::default()
            };
            assert_eq!(status(g.check(&wrong)), 403, "{bad:?}");
        }
        // A good cookie does not excuse a wrong header.
        let mixed = Asked {
            cookie_token: Some(TOKEN),
            header_token: Some("nope"),
            ..Default::default()
        };
        assert_eq!(status(g.check(&mixed)), 403);
    }

    #[test]
    fn tokens_come_out_of_cookies_and_queries() {
        assert_eq!(cookie_token("a=1; untether_admin=xyz; b=2"), Some("xyz"));
        assert_eq!(cookie_token("untether_admin_x=1"), None);
        assert_eq!(query_token("x=1&admin=abc"), Some("abc"));
        assert_eq!(query_token("administrator=1"), None);
        let t = new_token().unwrap();
        assert_eq!(t.len(), 32);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t, new_token().unwrap());
    }
}
