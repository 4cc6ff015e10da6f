//! Who may watch from a browser: [`BrowserCredentials`] checks a page's credential; the host's
//! one admission (`untether_proto::admission::Admission`) decided before that whether the page's
//! address may try at all, and learns what the check came to. A browser is admitted like any
//! client: with a one-time link
//! the host prints (`http://HOST:PORT/?token=…`: single use, expiring), or with the host's
//! pairing PIN typed into the page (the PIN of `untether host --access pin` or `untether pair
//! --pin`: it is used up as a client's would be). An admitted page gets a resume secret, valid
//! for 12 hours, so that a reload, a dropped connection or a host restart gets back in without
//! a new link (a host with a state directory keeps the secrets' SHA-256 digests there,
//! `browser_resume.json`, never the secrets). A resume secret belongs to one session at a time: coming back with it **replaces**
//! the session it holds (a reload's old session may live on until its ICE times out, and the
//! page must not be locked out by its own ghost; a copied secret so gains one seat, never
//! more). With `--access open` every browser is admitted. Nothing streams to a browser that
//! was not admitted: its offer is refused before any certificate or WebRTC session exists.

use std::collections::HashMap;

use untether_proto::admission::CredentialKind;
use untether_proto::{ClientId, Micros};

/// What a page presents with its offer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Credential {
    None,
    /// From a one-time link.
    Token(String),
    /// The host's pairing PIN.
    Pin(String),
    /// What an admitted page was given to come back with.
    Resume(String),
}

impl Credential {
    /// Its kind, for the host's one admission.
    pub fn kind(&self) -> CredentialKind {
        match self {
            Credential::None => CredentialKind::None,
            Credential::Token(_) => CredentialKind::LinkToken,
            Credential::Pin(_) => CredentialKind::Pin,
            Credential::Resume(_) => CredentialKind::Resume,
        }
    }

    /// Reads `Authorization: Bearer token:…|pin:…|resume:…`.
    pub fn from_authorization(value: Option<&str>) -> Credential {
        let Some(v) = value.and_then(|v| v.trim().strip_prefix("Bearer ")) else {
            return Credential::None;
        };
        let v = v.trim();
        if let Some(t) = v.strip_prefix("token:") {
            Credential::Token(t.to_string())
        } else if let Some(p) = v.strip_prefix("pin:") {
            Credential::Pin(p.to_string())
        } else if let Some(r) = v.strip_prefix("resume:") {
            Credential::Resume(r.to_string())
        } else {
            // A bare bearer token is a link's token (what WHEP players send).
            Credential::Token(v.to_string())
        }
    }
}

/// Why a page was not admitted (HTTP 401/403 with this one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: u16,
    pub reason: String,
}

impl Refusal {
    pub fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
        }
    }
}

/// What a PIN check needs from the host's pairing state (the PIN lives in the session).
/// What the browser layer asks of the protocol session while it admits a browser.
pub(crate) trait SessionAccess {
    /// Whether `pin` is the live PIN: Ok uses it up; Err(attempts left) counts a wrong one.
    fn try_pin(&mut self, now: Micros, pin: &str) -> Result<(), Option<u32>>;
    /// The admitted browser's id, from the one space of clients and receivers (the session
    /// attaches it under this id once it is connected).
    fn new_receiver_id(&mut self) -> ClientId;
}

/// A secret: 128 random bits from the OS's generator (`getrandom(2)`), as 32 hex digits.
pub(crate) fn secret() -> String {
    let mut b = [0u8; 16];
    os_random(&mut b);
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fills `buf` from the kernel's generator (ring's, which reads the same, if the call fails).
fn os_random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, which the call may write.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            let seed = untether_proto::handshake::os_seed();
            for (b, s) in rest.iter_mut().zip(seed.iter().cycle()) {
                *b = *s;
            }
            return;
        }
    }
}

/// How long an admitted page may come back with its resume secret.
const RESUME_TTL_US: Micros = 12 * 3600 * 1_000_000;
/// The most resume secrets kept (the oldest are forgotten first).
const MAX_RESUME: usize = 64;

/// A resume secret: until when it admits, and the session it holds now.
#[derive(Clone, Copy, Debug)]
struct Resume {
    expires_us: Micros,
    session: Option<ClientId>,
}

/// An admitted page: its resume secret, and the session that secret held (to be replaced).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub resume: String,
    pub replaces: Option<ClientId>,
}

/// The links and resume secrets of a host: the checker of a browser's credential (whether its
/// address may present one at all is the host's one admission's to say).
pub(crate) struct BrowserCredentials {
    open: bool,
    link_ttl_us: Micros,
    /// The current one-time link's token and when it expires.
    link: Option<(String, Micros)>,
    resume: HashMap<String, Resume>,
    /// Resume secrets of an earlier run of the host, by digest, until a page presents one.
    kept: Vec<([u8; 32], Micros)>,
    /// Where the secrets' digests are kept (None: in memory only).
    store: Option<crate::identity::StateDir>,
    /// Bumped whenever a new link is made (the CLI prints each).
    links_made: u64,
}

impl BrowserCredentials {
    pub fn new(open: bool, link_ttl_s: u64) -> BrowserCredentials {
        BrowserCredentials {
            open,
            link_ttl_us: link_ttl_s * 1_000_000,
            link: None,
            resume: HashMap::new(),
            kept: Vec::new(),
            store: None,
            links_made: 0,
        }
    }

    /// Keeps the resume secrets' digests in `dir`, and takes back those an earlier run of the
    /// host kept there (the unexpired ones).
    pub fn keep_in(&mut self, dir: crate::identity::StateDir, now: Micros) {
        let unix = crate::identity::unix_now();
        match dir.browser_resume() {
            Ok(kept) => {
                for k in kept {
                    let Some(digest) = parse_digest(&k.sha256) else {
                        continue;
                    };
                    if k.expires > unix && self.kept.len() < MAX_RESUME {
                        self.kept
                            .push((digest, now + (k.expires - unix) * 1_000_000));
                    }
                }
            }
            Err(e) => log::warn!("browsers: the kept resume secrets are not read: {e}"),
        }
        self.store = Some(dir);
    }

    /// Writes the live secrets' digests where they are kept.
    fn persist(&mut self, now: Micros) {
        let Some(dir) = &self.store else {
            return;
        };
        let unix = crate::identity::unix_now();
        self.kept.retain(|k| now < k.1);
        let stored: Vec<crate::identity::StoredResume> = self
            .resume
            .iter()
            .map(|(secret, r)| (digest(secret), r.expires_us))
            .chain(self.kept.iter().copied())
            .filter(|&(_, expires)| now < expires)
            .map(|(d, expires)| crate::identity::StoredResume {
                sha256: hex(&d),
                expires: unix + (expires - now) / 1_000_000,
            })
            .collect();
        if let Err(e) = dir.write_browser_resume(&stored) {
            log::warn!("browsers: the resume secrets cannot be kept: {e}");
        }
    }

    /// A secret of an earlier run presented again: live from now on, as if minted here.
    fn take_back(&mut self, now: Micros, r: &str) {
        let d = digest(r);
        let Some(i) = self
            .kept
            .iter()
            .position(|k| now < k.1 && ct_eq_bytes(&k.0, &d))
        else {
            return;
        };
        let (_, expires_us) = self.kept.swap_remove(i);
        self.resume.insert(
            r.to_string(),
            Resume {
                expires_us,
                session: None,
            },
        );
        self.persist(now);
    }

    /// The current one-time link's token, made anew when there is none or it expired.
    pub fn link_token(&mut self, now: Micros) -> String {
        match &self.link {
            Some((t, expires)) if now < *expires => t.clone(),
            _ => {
                let t = secret();
                self.link = Some((t.clone(), now + self.link_ttl_us));
                self.links_made += 1;
                t
            }
        }
    }

    /// The current link's token without making one.
    #[cfg(test)]
    pub fn current_link(&self, now: Micros) -> Option<&str> {
        self.link
            .as_ref()
            .filter(|(_, e)| now < *e)
            .map(|(t, _)| t.as_str())
    }

    /// How many links were made (the CLI prints each).
    #[cfg(test)]
    pub fn links_made(&self) -> u64 {
        self.links_made
    }

    /// The live resume secret equal to `r` (compared in constant time).
    fn find_resume(&self, now: Micros, r: &str) -> Option<String> {
        self.resume
            .iter()
            .filter(|(_, v)| now < v.expires_us)
            .find(|(k, _)| ct_eq(k, r))
            .map(|(k, _)| k.clone())
    }

    /// The session a page presenting `cred` would replace (its resume secret's), without
    /// admitting anything.
    pub fn replaces(&self, now: Micros, cred: &Credential) -> Option<ClientId> {
        match cred {
            Credential::Resume(r) => {
                let k = self.find_resume(now, r)?;
                self.resume.get(&k).and_then(|v| v.session)
            }
            _ => None,
        }
    }

    /// Gives the session `id` the resume secret `resume` (the one it was admitted with).
    pub fn bind(&mut self, resume: &str, id: ClientId) {
        if let Some(v) = self.resume.get_mut(resume) {
            v.session = Some(id);
        }
    }

    /// Admits or refuses a page; an admitted one gets a resume secret (the same one when it
    /// came back with it, which then replaces the session it held).
    pub fn admit(
        &mut self,
        now: Micros,
        cred: &Credential,
        pins: &mut dyn SessionAccess,
    ) -> Result<Admitted, Refusal> {
        let ok =
            match cred {
                Credential::Token(t) => {
                    match &self.link {
                        Some((link, expires)) if ct_eq(link, t) => {
                            if now >= *expires {
                                self.link = None;
                                return Err(Refusal::new(
                                    403,
                                    "this link has expired: ask the host for a new one",
                                ));
                            }
                            // Single use: the next page needs the next link.
                            self.link = None;
                            true
                        }
                        _ if self.open => true,
                        _ => return Err(Refusal::new(
                            403,
                            "this link was used or is not the host's: ask the host for a new one",
                        )),
                    }
                }
                Credential::Pin(p) => match pins.try_pin(now, p) {
                    Ok(()) => true,
                    Err(_) if self.open => true,
                    Err(Some(left)) => {
                        return Err(Refusal::new(
                            403,
                            format!("wrong or expired PIN ({left} attempt(s) left)"),
                        ))
                    }
                    Err(None) => return Err(Refusal::new(
                        403,
                        "no pairing PIN is active on the host (run `untether pair --pin` there)",
                    )),
                },
                Credential::Resume(r) => {
                    self.resume.retain(|_, v| now < v.expires_us);
                    if self.find_resume(now, r).is_none() {
                        self.take_back(now, r);
                    }
                    if let Some(k) = self.find_resume(now, r) {
                        let replaces = self.resume.get(&k).and_then(|v| v.session);
                        return Ok(Admitted {
                            resume: k,
                            replaces,
                        });
                    } else if self.open {
                        true
                    } else {
                        return Err(Refusal::new(
                            403,
                            "this page's admission has expired: open a new link from the host",
                        ));
                    }
                }
                Credential::None if self.open => true,
                Credential::None => {
                    return Err(Refusal::new(
                        401,
                        "not admitted: open the link the host printed, or enter the host's PIN",
                    ))
                }
            };
        debug_assert!(ok);
        if self.resume.len() >= MAX_RESUME {
            if let Some(oldest) = self
                .resume
                .iter()
                .min_by_key(|(_, v)| v.expires_us)
                .map(|(k, _)| k.clone())
            {
                self.resume.remove(&oldest);
            }
        }
        let r = secret();
        self.resume.insert(
            r.clone(),
            Resume {
                expires_us: now + RESUME_TTL_US,
                session: None,
            },
        );
        self.persist(now);
        Ok(Admitted {
            resume: r,
            replaces: None,
        })
    }
}

fn digest(secret: &str) -> [u8; 32] {
    openssl::sha::sha256(secret.as_bytes())
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_digest(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut d = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let t = std::str::from_utf8(pair).ok()?;
        d[i] = u8::from_str_radix(t, 16).ok()?;
    }
    Some(d)
}

fn ct_eq_bytes(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Compares secrets without an early exit on the first difference.
pub(crate) fn ct_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pins(Option<(String, u32)>);
    impl SessionAccess for Pins {
        fn try_pin(&mut self, _now: Micros, pin: &str) -> Result<(), Option<u32>> {
            match &mut self.0 {
                Some((p, _)) if p == pin => {
                    self.0 = None;
                    Ok(())
                }
                Some((_, left)) => {
                    *left = left.saturating_sub(1);
                    Err(Some(*left))
                }
                None => Err(None),
            }
        }
        fn new_receiver_id(&mut self) -> ClientId {
            ClientId(1)
        }
    }

    #[test]
    fn a_link_admits_once_and_expires() {
        let mut a = BrowserCredentials::new(false, 60);
        let mut pins = Pins(None);
        let t = a.link_token(0);
        assert_eq!(a.current_link(0), Some(t.as_str()));
        let resume = a
            .admit(1, &Credential::Token(t.clone()), &mut pins)
            .unwrap()
            .resume;
        // Used up: the same link again is refused, and a new one is made.
        let r = a.admit(2, &Credential::Token(t.clone()), &mut pins);
        assert_eq!(r.unwrap_err().status, 403);
        let t2 = a.link_token(3);
        assert_ne!(t, t2);
        assert_eq!(a.links_made(), 2);
        // Expired.
        let r = a.admit(61_000_000, &Credential::Token(t2), &mut pins);
        assert!(r.unwrap_err().reason.contains("expired"));
        // The admitted page comes back with its resume secret.
        assert!(a.admit(5, &Credential::Resume(resume), &mut pins).is_ok());
        assert!(a
            .admit(5, &Credential::Resume("0".repeat(32)), &mut pins)
            .is_err());
    }

    #[test]
    fn a_resume_secret_holds_one_session_at_a_time() {
        let mut a = BrowserCredentials::new(false, 60);
        let mut pins = Pins(None);
        let t = a.link_token(0);
        let first = a.admit(1, &Credential::Token(t), &mut pins).unwrap();
        assert_eq!(first.replaces, None);
        a.bind(&first.resume, ClientId(10));
        let cred = Credential::Resume(first.resume.clone());
        assert_eq!(a.replaces(2, &cred), Some(ClientId(10)));
        // Coming back with it: the same secret, replacing session 10.
        let again = a.admit(2, &cred, &mut pins).unwrap();
        assert_eq!(
            again,
            Admitted {
                resume: first.resume.clone(),
                replaces: Some(ClientId(10))
            }
        );
        a.bind(&again.resume, ClientId(11));
        // A third use replaces the second session: never two sessions on one secret.
        assert_eq!(
            a.admit(3, &cred, &mut pins).unwrap().replaces,
            Some(ClientId(11))
        );
        assert_eq!(a.replaces(3, &Credential::None), None);
    }

    /// Issue 36: a page reconnecting to a restarted host gets back in with its resume secret,
    /// which the host kept as a digest only.
    #[test]
    fn a_resume_secret_outlives_a_host_restart_kept_as_its_digest() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("untether-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dir = crate::identity::StateDir::at(&p);
        let mut pins = Pins(None);
        let mut a = BrowserCredentials::new(false, 60);
        a.keep_in(dir.clone(), 0);
        let t = a.link_token(0);
        let first = a.admit(1, &Credential::Token(t), &mut pins).unwrap();
        let file = std::fs::read_to_string(p.join(crate::identity::BROWSER_RESUME_FILE)).unwrap();
        assert!(
            !file.contains(&first.resume),
            "the secret itself is kept: {file}"
        );
        assert!(file.contains(&hex(&digest(&first.resume))), "{file}");
        // The host restarts (its clock starts again).
        let mut b = BrowserCredentials::new(false, 60);
        b.keep_in(dir.clone(), 5);
        assert!(b
            .admit(6, &Credential::Resume("0".repeat(32)), &mut pins)
            .is_err());
        let back = b
            .admit(7, &Credential::Resume(first.resume.clone()), &mut pins)
            .expect("taken back");
        assert_eq!(back.resume, first.resume);
        // Live again: it holds one session at a time as before.
        b.bind(&back.resume, ClientId(3));
        assert_eq!(
            b.replaces(8, &Credential::Resume(first.resume.clone())),
            Some(ClientId(3))
        );
        // A host without a state directory keeps nothing.
        let mut c = BrowserCredentials::new(false, 60);
        assert!(c
            .admit(9, &Credential::Resume(first.resume.clone()), &mut pins)
            .is_err());
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn secrets_are_128_random_bits() {
        let (x, y) = (secret(), secret());
        assert_eq!(x.len(), 32);
        assert!(x.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(x, y);
    }

    #[test]
    fn nothing_is_admitted_without_a_credential_unless_open() {
        let mut pins = Pins(None);
        let mut a = BrowserCredentials::new(false, 60);
        assert_eq!(
            a.admit(0, &Credential::None, &mut pins).unwrap_err().status,
            401
        );
        let mut open = BrowserCredentials::new(true, 60);
        assert!(open.admit(0, &Credential::None, &mut pins).is_ok());
    }

    #[test]
    fn the_pin_is_used_up_and_wrong_ones_count() {
        let mut a = BrowserCredentials::new(false, 60);
        let mut pins = Pins(Some(("123456".into(), 3)));
        let e = a.admit(0, &Credential::Pin("000000".into()), &mut pins);
        assert!(e.unwrap_err().reason.contains("2 attempt(s) left"));
        assert!(a
            .admit(0, &Credential::Pin("123456".into()), &mut pins)
            .is_ok());
        let e = a.admit(0, &Credential::Pin("123456".into()), &mut pins);
        assert!(e.unwrap_err().reason.contains("no pairing PIN"));
    }

    #[test]
    fn the_authorization_header_names_the_credential() {
        let c = |v| Credential::from_authorization(Some(v));
        assert_eq!(c("Bearer token:abc"), Credential::Token("abc".into()));
        assert_eq!(c("Bearer pin:123456"), Credential::Pin("123456".into()));
        assert_eq!(c("Bearer resume:ff"), Credential::Resume("ff".into()));
        assert_eq!(c("Bearer abc"), Credential::Token("abc".into()));
        assert_eq!(c("Basic abc"), Credential::None);
        assert_eq!(Credential::from_authorization(None), Credential::None);
    }
}
