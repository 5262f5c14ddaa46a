//! X.509 certificates (RFC 5280), read with `x509-cert`.
use super::{pem_blocks, Dn, PkiError};
use crate::id::Identity;
use alloc::sync::Arc;
use alloc::vec::Vec;
use const_oid::db::rfc5280::{
    ID_CE_AUTHORITY_KEY_IDENTIFIER, ID_CE_BASIC_CONSTRAINTS, ID_CE_EXT_KEY_USAGE, ID_CE_SUBJECT_ALT_NAME,
    ID_CE_SUBJECT_KEY_IDENTIFIER,
};
use const_oid::ObjectIdentifier;
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use der::{Decode, Encode};
use sha1::{Digest, Sha1};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, SubjectAltName};

/// Largest certificate accepted (DER), from a file or a CERT payload.
pub const MAX_CERT_DER_LEN: usize = super::MAX_CERT_LEN;
/// Most certificates in one PEM file.
pub const MAX_PEM_CERTS: usize = 16;

pub(crate) const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
pub(crate) const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
pub(crate) const SECP256R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
pub(crate) const SECP384R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
pub(crate) const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

/// The kind of a public or private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// RSA with a modulus of `bits` bits.
    Rsa {
        /// Modulus length in bits.
        bits: u32,
    },
    /// ECDSA on NIST P-256 (secp256r1).
    EcdsaP256,
    /// ECDSA on NIST P-384 (secp384r1).
    EcdsaP384,
    /// Ed25519 (RFC 8410, RFC 8420 for IKEv2).
    Ed25519,
}

/// A parsed X.509 certificate (cheap to clone). Parsing checks the DER structure only;
/// [`super::verify_chain`] validates it.
#[derive(Clone)]
pub struct Certificate {
    inner: Arc<Inner>,
}

struct Inner {
    der: Vec<u8>,
    cert: x509_cert::Certificate,
    subject: Dn,
    issuer: Dn,
}

impl Certificate {
    /// Parses a DER certificate (at most [`super::MAX_CERT_LEN`] bytes).
    pub fn from_der(der: Vec<u8>) -> Result<Certificate, PkiError> {
        if der.len() > MAX_CERT_DER_LEN {
            return Err(PkiError::BadCertificate);
        }
        let cert = x509_cert::Certificate::from_der(&der).map_err(|_| PkiError::BadCertificate)?;
        let tbs = &cert.tbs_certificate;
        let subject = name_dn(&tbs.subject)?;
        let issuer = name_dn(&tbs.issuer)?;
        Ok(Certificate {
            inner: Arc::new(Inner {
                der,
                cert,
                subject,
                issuer,
            }),
        })
    }

    /// One or more PEM `CERTIFICATE` blocks (other blocks, e.g. a key in the same file, are
    /// skipped), or one DER certificate.
    pub fn parse_pem_or_der(bytes: &[u8]) -> Result<Vec<Certificate>, PkiError> {
        match pem_blocks(bytes, MAX_PEM_CERTS * 2)? {
            None => Ok(alloc::vec![Certificate::from_der(bytes.to_vec())?]),
            Some(blocks) => {
                let certs = blocks
                    .into_iter()
                    .filter(|(l, _)| l == "CERTIFICATE")
                    .map(|(_, d)| Certificate::from_der(d.to_vec()))
                    .collect::<Result<Vec<_>, _>>()?;
                if certs.is_empty() {
                    return Err(PkiError::BadPem);
                }
                if certs.len() > MAX_PEM_CERTS {
                    return Err(PkiError::TooMany("certificates in one file"));
                }
                Ok(certs)
            }
        }
    }

    /// The DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.inner.der
    }

    /// The subject DN.
    pub fn subject(&self) -> Dn {
        self.inner.subject.clone()
    }

    /// The issuer DN.
    pub fn issuer(&self) -> Dn {
        self.inner.issuer.clone()
    }

    /// SHA-1 of the DER SubjectPublicKeyInfo: the CA key ID a CERTREQ lists (RFC 7296 3.7)
    /// and the hash of a "Hash and URL" CERT.
    pub fn ca_key_id(&self) -> [u8; 20] {
        Sha1::digest(self.spki_der()).into()
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn spki_der(&self) -> Vec<u8> {
        // x509-cert parsed strict DER, so encoding it again gives the original bytes.
        self.inner
            .cert
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .unwrap_or_default()
    }

    /// Whether basicConstraints says cA=TRUE.
    pub fn is_ca(&self) -> bool {
        matches!(self.extension::<BasicConstraints>(ID_CE_BASIC_CONSTRAINTS), Some(Ok(b)) if b.ca)
    }

    /// notAfter, seconds since the Unix epoch.
    pub fn not_after_unix(&self) -> u64 {
        self.inner
            .cert
            .tbs_certificate
            .validity
            .not_after
            .to_unix_duration()
            .as_secs()
    }

    /// notBefore, seconds since the Unix epoch.
    pub fn not_before_unix(&self) -> u64 {
        self.inner
            .cert
            .tbs_certificate
            .validity
            .not_before
            .to_unix_duration()
            .as_secs()
    }

    /// The kind of the subject public key; `None` for keys this module does not support.
    pub fn key_kind(&self) -> Option<KeyKind> {
        let spki = &self.inner.cert.tbs_certificate.subject_public_key_info;
        let alg = &spki.algorithm;
        if alg.oid == RSA_ENCRYPTION {
            let key = pkcs1::RsaPublicKey::from_der(self.public_key_bytes()?).ok()?;
            let m = key.modulus.as_bytes();
            let bits = (m.len() as u32)
                .checked_mul(8)?
                .checked_sub(m.first()?.leading_zeros())?;
            Some(KeyKind::Rsa { bits })
        } else if alg.oid == EC_PUBLIC_KEY {
            let curve = alg.parameters.as_ref()?.decode_as::<ObjectIdentifier>().ok()?;
            match curve {
                SECP256R1 => Some(KeyKind::EcdsaP256),
                SECP384R1 => Some(KeyKind::EcdsaP384),
                _ => None,
            }
        } else if alg.oid == ED25519 {
            Some(KeyKind::Ed25519)
        } else {
            None
        }
    }

    /// The subjectPublicKey bits: an RSAPublicKey (DER), an uncompressed EC point, or 32
    /// bytes of Ed25519 key (what `ring` verifies with).
    pub fn public_key_bytes(&self) -> Option<&[u8]> {
        self.inner
            .cert
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .as_bytes()
    }

    /// The subjectAltName entries usable as IKE identities: dNSName as [`Identity::Fqdn`],
    /// iPAddress as [`Identity::Ipv4`]/[`Identity::Ipv6`], rfc822Name as
    /// [`Identity::UserFqdn`], directoryName as [`Identity::Dn`]. Others are skipped.
    pub fn sans(&self) -> Vec<Identity> {
        let Some(Ok(san)) = self.extension::<SubjectAltName>(ID_CE_SUBJECT_ALT_NAME) else {
            return Vec::new();
        };
        san.0
            .iter()
            .filter_map(|g| match g {
                GeneralName::DnsName(s) => Some(Identity::Fqdn(s.as_str().into())),
                GeneralName::Rfc822Name(s) => Some(Identity::UserFqdn(s.as_str().into())),
                GeneralName::IpAddress(o) => match o.as_bytes().len() {
                    4 => <[u8; 4]>::try_from(o.as_bytes())
                        .ok()
                        .map(|a| Identity::Ipv4(Ipv4Addr::from(a))),
                    16 => <[u8; 16]>::try_from(o.as_bytes())
                        .ok()
                        .map(|a| Identity::Ipv6(Ipv6Addr::from(a))),
                    _ => None,
                },
                GeneralName::DirectoryName(n) => {
                    let der = n.to_der().ok()?;
                    Dn::from_name(n, der).ok().map(Identity::Dn)
                }
                _ => None,
            })
            .collect()
    }

    /// The extendedKeyUsage OIDs: `None` without the extension, `Some(Err)` when it is
    /// malformed.
    pub(crate) fn eku(&self) -> Option<Result<ExtendedKeyUsage, der::Error>> {
        self.extension::<ExtendedKeyUsage>(ID_CE_EXT_KEY_USAGE)
    }

    /// The subject as it is encoded (path building compares names octet for octet, as
    /// webpki does).
    pub(crate) fn subject_name(&self) -> &x509_cert::name::Name {
        &self.inner.cert.tbs_certificate.subject
    }

    /// The issuer as it is encoded.
    pub(crate) fn issuer_name(&self) -> &x509_cert::name::Name {
        &self.inner.cert.tbs_certificate.issuer
    }

    /// The subjectKeyIdentifier (RFC 5280 4.2.1.2), if present and well-formed.
    pub(crate) fn subject_key_id(&self) -> Option<Vec<u8>> {
        let ski = self
            .extension::<x509_cert::ext::pkix::SubjectKeyIdentifier>(ID_CE_SUBJECT_KEY_IDENTIFIER)?
            .ok()?;
        Some(ski.0.as_bytes().to_vec())
    }

    /// The authorityKeyIdentifier's keyIdentifier (RFC 5280 4.2.1.1), if present.
    pub(crate) fn authority_key_id(&self) -> Option<Vec<u8>> {
        let aki = self
            .extension::<x509_cert::ext::pkix::AuthorityKeyIdentifier>(ID_CE_AUTHORITY_KEY_IDENTIFIER)?
            .ok()?;
        aki.key_identifier.map(|k| k.as_bytes().to_vec())
    }

    fn extension<'a, T: Decode<'a>>(&'a self, id: ObjectIdentifier) -> Option<Result<T, der::Error>> {
        let exts = self.inner.cert.tbs_certificate.extensions.as_ref()?;
        let e = exts.iter().find(|e| e.extn_id == id)?;
        Some(T::from_der(e.extn_value.as_bytes()))
    }
}

fn name_dn(n: &x509_cert::name::Name) -> Result<Dn, PkiError> {
    let der = n.to_der().map_err(|_| PkiError::BadCertificate)?;
    Dn::from_name(n, der).map_err(|_| PkiError::BadCertificate)
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Certificate(\"{}\")", self.inner.subject)
    }
}

impl PartialEq for Certificate {
    fn eq(&self, o: &Certificate) -> bool {
        self.der() == o.der()
    }
}

impl Eq for Certificate {}
