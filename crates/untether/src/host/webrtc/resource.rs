//! The browsers' session resources (`/whep/ID`): each session's ID is 128 random bits (not a
//! count anyone can guess), and ending it (`DELETE /whep/ID`) takes the session's own secret,
//! given with the answer (`X-Untether-Session`) and sent back by the page as
//! `Authorization: Bearer SECRET`.

use std::collections::HashMap;

use untether_proto::ClientId;

use super::access::{ct_eq, secret};

/// A session's resource as the answer names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    /// The ID in `/whep/ID`.
    pub id: String,
    /// What a DELETE must present.
    pub secret: String,
}

/// Why a DELETE was refused (its HTTP status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeleteRefusal {
    /// 404: no such session.
    Unknown,
    /// 401: no secret presented.
    NoSecret,
    /// 403: not this session's secret.
    WrongSecret,
}

impl DeleteRefusal {
    pub fn status(self) -> u16 {
        match self {
            DeleteRefusal::Unknown => 404,
            DeleteRefusal::NoSecret => 401,
            DeleteRefusal::WrongSecret => 403,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            DeleteRefusal::Unknown => "no such session",
            DeleteRefusal::NoSecret => {
                "ending a session takes its secret (Authorization: Bearer, from the answer's \
                 X-Untether-Session)"
            }
            DeleteRefusal::WrongSecret => "not this session's secret",
        }
    }
}

/// The resources of the live sessions, by the driver's session number.
#[derive(Debug, Default)]
pub(super) struct Resources {
    by_session: HashMap<ClientId, Resource>,
}

impl Resources {
    /// A new resource for session `session`.
    pub fn issue(&mut self, session: ClientId) -> Resource {
        let r = Resource {
            id: secret(),
            secret: secret(),
        };
        self.by_session.insert(session, r.clone());
        r
    }

    /// The session a DELETE of `/whep/{id}` presenting `presented` may end.
    pub fn authorize(&self, id: &str, presented: Option<&str>) -> Result<ClientId, DeleteRefusal> {
        let (session, r) = self
            .by_session
            .iter()
            .find(|(_, r)| ct_eq(&r.id, id))
            .ok_or(DeleteRefusal::Unknown)?;
        match presented {
            None => Err(DeleteRefusal::NoSecret),
            Some(p) if ct_eq(&r.secret, p) => Ok(*session),
            Some(_) => Err(DeleteRefusal::WrongSecret),
        }
    }

    /// Forgets the sessions `live` does not keep.
    pub fn retain(&mut self, mut live: impl FnMut(ClientId) -> bool) {
        self.by_session.retain(|s, _| live(*s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unguessable_and_a_delete_needs_the_secret() {
        let mut rs = Resources::default();
        let a = rs.issue(ClientId(1));
        let b = rs.issue(ClientId(2));
        assert_eq!(a.id.len(), 32);
        assert_ne!(a.id, b.id);
        assert_ne!(a.id, a.secret);
        assert_eq!(
            rs.authorize("1", Some(&a.secret)),
            Err(DeleteRefusal::Unknown)
        );
        assert_eq!(rs.authorize(&a.id, None), Err(DeleteRefusal::NoSecret));
        assert_eq!(
            rs.authorize(&a.id, Some(&b.secret)),
            Err(DeleteRefusal::WrongSecret)
        );
        assert_eq!(rs.authorize(&a.id, Some(&a.secret)), Ok(ClientId(1)));
        rs.retain(|s| s != ClientId(1));
        assert_eq!(
            rs.authorize(&a.id, Some(&a.secret)),
            Err(DeleteRefusal::Unknown)
        );
        assert_eq!(rs.authorize(&b.id, Some(&b.secret)), Ok(ClientId(2)));
    }
}
