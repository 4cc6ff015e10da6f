//! Naming a client on the command line, the one way every `untether pair` command does it
//! (approve, deny, revoke, grant, revoke-grant, control): its fingerprint as `untether pair`
//! shows it — at least [`MIN_FINGERPRINT_CHARS`] of its characters, in any case, dashes
//! optional, matching exactly one entry — or its full hex key. Never a place in a list (a
//! flood of requests moves it) nor a name (the client chose it): those are refused with an
//! error saying what to give instead; a prefix matching several entries lists them.

use super::*;

/// The entry among `keys` (64 hex digits each; `names` alongside, the clients' own) that
/// `query` names; `what` is what an entry is, for the errors (`request`, `client`).
pub(crate) fn resolve(query: &str, what: &str, keys: &[&str], names: &[&str]) -> Result<usize> {
    let q = query.trim();
    if let Some(key) = parse_key(q) {
        let hex = key_hex(&key);
        return keys
            .iter()
            .position(|k| k.eq_ignore_ascii_case(&hex))
            .ok_or_else(|| IdentityError::NotFound(q.to_string()));
    }
    let prefix = norm(q);
    let fingerprint_like = !q.is_empty()
        && q.chars()
            .filter(|c| *c != '-' && !c.is_whitespace())
            .all(|c| c.is_ascii_alphabetic() || ('2'..='7').contains(&c));
    let hits: Vec<usize> = (0..keys.len())
        .filter(|&i| {
            parse_key(keys[i]).is_some_and(|k| norm(&fingerprint(&k)).starts_with(&prefix))
        })
        .collect();
    let is_name = names.contains(&q);
    if !fingerprint_like || prefix.len() < MIN_FINGERPRINT_CHARS || (hits.is_empty() && is_name) {
        let why = if !q.is_empty() && q.chars().all(|c| c.is_ascii_digit()) {
            format!(
                "{q:?} looks like a place in the list: a {what} is not chosen by number (a flood \
                 of new requests can move them)"
            )
        } else if is_name {
            format!(
                "{q:?} is the name a client gave itself: a name proves nothing (any client can \
                 take it)"
            )
        } else if fingerprint_like {
            format!("{q:?} is too short")
        } else {
            format!("{q:?} is not a fingerprint (letters A-Z and digits 2-7, as ABCD-EFGH-…)")
        };
        return Err(IdentityError::Invalid(format!(
            "{why}; give the {what}'s fingerprint as `untether pair` shows it (at least \
             {MIN_FINGERPRINT_CHARS} of its characters) or its hex key"
        )));
    }
    match hits.as_slice() {
        [] => Err(IdentityError::NotFound(q.to_string())),
        [i] => Ok(*i),
        _ => Err(IdentityError::Ambiguous {
            query: q.to_string(),
            matches: hits
                .iter()
                .filter_map(|&i| parse_key(keys[i]).map(|k| fingerprint(&k)))
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two keys whose fingerprints share their first 8 characters (found by search).
    fn two_sharing_8() -> (PublicKey, PublicKey) {
        let key = |n: u64| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&n.to_le_bytes());
            k
        };
        (key(181_160), key(904_734))
    }

    #[test]
    fn names_numbers_and_short_prefixes_are_refused_fingerprints_and_keys_resolve() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let hex = [key_hex(&a), key_hex(&b)];
        let keys = [hex[0].as_str(), hex[1].as_str()];
        let names = ["quest", "1"];
        let fa = fingerprint(&a);
        // The fingerprint, a prefix of 8 or more characters (any case, dashes optional),
        // the hex key.
        assert_eq!(resolve(&fa, "client", &keys, &names).unwrap(), 0);
        assert_eq!(resolve(&fa[..9], "client", &keys, &names).unwrap(), 0);
        let lower = norm(&fa)[..8].to_ascii_lowercase();
        assert_eq!(resolve(&lower, "client", &keys, &names).unwrap(), 0);
        assert_eq!(resolve(&hex[1], "client", &keys, &names).unwrap(), 1);
        // A name (even one that looks like a number), a list number, 4 characters: refused,
        // saying what to give.
        for wrong in ["quest", "1", "2", &fa[..4], "not-a-fingerprint!"] {
            let e = resolve(wrong, "client", &keys, &names)
                .unwrap_err()
                .to_string();
            assert!(e.contains("fingerprint"), "{wrong}: {e}");
        }
        assert!(matches!(
            resolve("ZZZZ-ZZZZ", "client", &keys, &names),
            Err(IdentityError::NotFound(_))
        ));
        assert!(matches!(
            resolve(&key_hex(&[9; 32]), "client", &keys, &names),
            Err(IdentityError::NotFound(_))
        ));
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_matches() {
        let (a, b) = two_sharing_8();
        let hex = [key_hex(&a), key_hex(&b)];
        let keys = [hex[0].as_str(), hex[1].as_str()];
        let e = resolve(&fingerprint(&a)[..9], "client", &keys, &[]).unwrap_err();
        match e {
            IdentityError::Ambiguous { matches, .. } => {
                assert_eq!(matches, [fingerprint(&a), fingerprint(&b)])
            }
            e => panic!("{e}"),
        }
        // One character more tells them apart.
        let fa = fingerprint(&a);
        let fb = fingerprint(&b);
        let n = fa
            .chars()
            .zip(fb.chars())
            .take_while(|(x, y)| x == y)
            .count()
            + 1;
        assert_eq!(resolve(&fb[..n], "client", &keys, &[]).unwrap(), 1);
    }
}
