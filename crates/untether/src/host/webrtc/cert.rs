//! HTTPS for the browser page: a self-signed certificate made with OpenSSL (kept in the state
//! directory so its fingerprint stays the same across restarts), or the user's PEM file; and
//! the SHA-256 fingerprint the host shows so the user can check what the browser warns about.

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::x509::extension::SubjectAlternativeName;
use openssl::x509::{X509NameBuilder, X509};

use openssl::error::ErrorStack;

use crate::config::CertSource;
use crate::identity::{IdentityError, StateDir};

/// A certificate (chain) and its private key, PEM, for the page's HTTPS.
#[derive(Clone)]
pub(crate) struct PageCert {
    /// The certificate chain then the key (one PEM text).
    pub pem: Vec<u8>,
    /// SHA-256 of the leaf certificate, `AB:CD:…`.
    pub fingerprint: String,
}

impl std::fmt::Debug for PageCert {
    // The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageCert({})", self.fingerprint)
    }
}

/// Why the page has no certificate: making one failed, or a PEM file is not a certificate and
/// its key. `origin` names the file (`webrtc.cert /path`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertError {
    /// OpenSSL failed at this step of making a certificate.
    #[error("{what}: {source}")]
    Make {
        what: &'static str,
        #[source]
        source: ErrorStack,
    },
    #[error("{origin}: {source}")]
    Pem {
        origin: String,
        #[source]
        source: ErrorStack,
    },
    #[error("{0}: no certificate (expected PEM \"BEGIN CERTIFICATE\")")]
    NoCertificate(String),
    #[error("{0}: no private key (expected PEM \"BEGIN PRIVATE KEY\")")]
    NoKey(String),
    #[error("{origin}: certificate: {source}")]
    PublicKey {
        origin: String,
        #[source]
        source: ErrorStack,
    },
    #[error("{0}: the private key does not belong to the first certificate")]
    KeyMismatch(String),
    #[error("webrtc.cert: cannot read {}: {source}", .path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The state directory's certificate cannot be read.
    #[error("webrtc.cert: {0}")]
    Stored(#[source] IdentityError),
    #[error("webrtc.cert: cannot keep the certificate: {0}")]
    Keep(#[source] IdentityError),
}

fn ssl_err(what: &'static str) -> impl Fn(ErrorStack) -> CertError {
    move |source| CertError::Make { what, source }
}

/// A new self-signed certificate (EC P-256, valid ten years) for `localhost` and the
/// addresses given.
pub(crate) fn self_signed(ips: &[std::net::IpAddr]) -> Result<PageCert, CertError> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(ssl_err("EC group"))?;
    let key = PKey::from_ec_key(EcKey::generate(&group).map_err(ssl_err("EC key"))?)
        .map_err(ssl_err("key"))?;
    let mut name = X509NameBuilder::new().map_err(ssl_err("name"))?;
    name.append_entry_by_text("CN", "untether host (self-signed)")
        .map_err(ssl_err("name"))?;
    let name = name.build();
    let mut b = X509::builder().map_err(ssl_err("certificate"))?;
    b.set_version(2).map_err(ssl_err("version"))?;
    let mut serial = BigNum::new().map_err(ssl_err("serial"))?;
    serial
        .rand(127, MsbOption::MAYBE_ZERO, false)
        .map_err(ssl_err("serial"))?;
    let serial = serial.to_asn1_integer().map_err(ssl_err("serial"))?;
    b.set_serial_number(&serial).map_err(ssl_err("serial"))?;
    b.set_subject_name(&name).map_err(ssl_err("subject"))?;
    b.set_issuer_name(&name).map_err(ssl_err("issuer"))?;
    b.set_pubkey(&key).map_err(ssl_err("public key"))?;
    let from = Asn1Time::days_from_now(0).map_err(ssl_err("validity"))?;
    let until = Asn1Time::days_from_now(3650).map_err(ssl_err("validity"))?;
    b.set_not_before(&from).map_err(ssl_err("validity"))?;
    b.set_not_after(&until).map_err(ssl_err("validity"))?;
    let mut san = SubjectAlternativeName::new();
    san.dns("localhost");
    for ip in ips {
        san.ip(&ip.to_string());
    }
    let san = san
        .build(&b.x509v3_context(None, None))
        .map_err(ssl_err("subject alternative names"))?;
    b.append_extension(san).map_err(ssl_err("extension"))?;
    b.sign(&key, MessageDigest::sha256())
        .map_err(ssl_err("signature"))?;
    let cert = b.build();
    let mut pem = cert.to_pem().map_err(ssl_err("PEM"))?;
    pem.extend(key.private_key_to_pem_pkcs8().map_err(ssl_err("PEM"))?);
    Ok(PageCert {
        fingerprint: fingerprint(&cert)?,
        pem,
    })
}

/// SHA-256 of a certificate as browsers show it: `AB:CD:…`.
fn fingerprint(cert: &X509) -> Result<String, CertError> {
    let d = cert
        .digest(MessageDigest::sha256())
        .map_err(ssl_err("digest"))?;
    Ok(d.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":"))
}

/// Checks a PEM text holding a certificate chain and a private key that belongs to it.
pub(crate) fn from_pem(pem: Vec<u8>, origin: &str) -> Result<PageCert, CertError> {
    let chain = X509::stack_from_pem(&pem).map_err(|source| CertError::Pem {
        origin: origin.to_string(),
        source,
    })?;
    let leaf = chain
        .first()
        .ok_or_else(|| CertError::NoCertificate(origin.to_string()))?;
    let key = PKey::private_key_from_pem(&pem).map_err(|_| CertError::NoKey(origin.to_string()))?;
    let public = leaf.public_key().map_err(|source| CertError::PublicKey {
        origin: origin.to_string(),
        source,
    })?;
    if !public.public_eq(&key) {
        return Err(CertError::KeyMismatch(origin.to_string()));
    }
    Ok(PageCert {
        fingerprint: fingerprint(leaf)?,
        pem,
    })
}

/// The page's certificate for `source`: None for plain HTTP. `auto` reuses the one in the
/// state directory (making and keeping it the first time); without a state directory it is
/// made for this run only.
pub(crate) fn page_cert(
    source: &CertSource,
    dir: Option<&StateDir>,
    ips: &[std::net::IpAddr],
) -> Result<Option<PageCert>, CertError> {
    match source {
        CertSource::None => Ok(None),
        CertSource::File(path) => {
            let pem = std::fs::read(path).map_err(|source| CertError::Read {
                path: path.clone(),
                source,
            })?;
            from_pem(pem, &format!("webrtc.cert {}", path.display())).map(Some)
        }
        CertSource::Auto => {
            if let Some(dir) = dir {
                match dir.webrtc_cert() {
                    Ok(Some(pem)) => {
                        let origin = dir
                            .file_path(crate::identity::WEBRTC_CERT_FILE)
                            .display()
                            .to_string();
                        return from_pem(pem, &origin).map(Some);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(CertError::Stored(e)),
                }
                let cert = self_signed(ips)?;
                dir.save_webrtc_cert(&cert.pem).map_err(CertError::Keep)?;
                Ok(Some(cert))
            } else {
                self_signed(ips).map(Some)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_reads_back_with_the_same_fingerprint() {
        let c = self_signed(&["127.0.0.1".parse().unwrap()]).unwrap();
        assert_eq!(c.fingerprint.len(), 32 * 3 - 1);
        let again = from_pem(c.pem.clone(), "test").unwrap();
        assert_eq!(again.fingerprint, c.fingerprint);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let a = self_signed(&[]).unwrap();
        let b = self_signed(&[]).unwrap();
        let text = String::from_utf8(a.pem).unwrap();
        let key_b = String::from_utf8(b.pem).unwrap();
        let cert_a = &text[..text.find("-----BEGIN PRIVATE KEY").unwrap()];
        let key_b = &key_b[key_b.find("-----BEGIN PRIVATE KEY").unwrap()..];
        let mixed = format!("{cert_a}{key_b}").into_bytes();
        let e = from_pem(mixed, "t").unwrap_err();
        assert!(matches!(&e, CertError::KeyMismatch(o) if o == "t"), "{e:?}");
        assert_eq!(
            e.to_string(),
            "t: the private key does not belong to the first certificate"
        );
        let e = from_pem(b"garbage".to_vec(), "t").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t: no certificate (expected PEM \"BEGIN CERTIFICATE\")"
        );
        let e = from_pem(cert_a.as_bytes().to_vec(), "t").unwrap_err();
        assert!(matches!(e, CertError::NoKey(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "t: no private key (expected PEM \"BEGIN PRIVATE KEY\")"
        );
    }
}
