//! Certificates and signatures for IKE_AUTH: X.509 chains, RFC 7427 digital signatures and
//! the classic RSA/ECDSA methods, CERT/CERTREQ payload bodies, identities in certificates.
//!
//! No ASN.1 is parsed by hand here: `rustls-webpki` builds and validates chains (signatures,
//! validity, basic constraints, name constraints, CRLs) over `ring`; the RustCrypto `der`
//! crates (`x509-cert`, `pkcs1`, `pkcs8`, `sec1`, `pem-rfc7468`) read names, SANs, EKU, public
//! and private keys. The module is sans-IO: files are loaded by the caller and handed in as
//! bytes, the time of validation is a parameter, and signing goes through the caller's
//! [`Signer`] (see [`RingSigner`] for why).
//!
//! # Decisions
//!
//! * **Extended key usage** (RFC 4945 5.1.3.12): an end-entity certificate is accepted when it
//!   has no EKU extension, or when its EKU lists id-kp-ipsecIKE (1.3.6.1.5.5.7.3.17),
//!   anyExtendedKeyUsage, serverAuth or clientAuth; anything else (e.g. only codeSigning) is
//!   [`CertError::WrongUsage`]. serverAuth and clientAuth are accepted because strongSwan and
//!   Windows deployments issue gateway and client certificates with them (Windows requires
//!   serverAuth on a gateway's certificate). webpki's own `KeyUsage` can only require one OID,
//!   so [`verify_chain`] hands webpki an `ExtendedKeyUsageValidator` implementing exactly this
//!   rule; webpki applies it to every certificate of the path, so a CA whose EKU extension
//!   excludes all four is refused too (EKU chaining, as Windows does).
//! * The keyUsage extension is not checked (RFC 4945 5.1.3.2 leaves it to policy; webpki does
//!   not either), like strongSwan.
//! * **Signature schemes** ([`auth_sign`]): see its documentation. SHA-1 is never used inside
//!   RFC 7427 signatures (RFC 8247 2.4 says MUST NOT) and not announced; the classic RSA method
//!   (1, PKCS#1 v1.5 with SHA-1) is verified for older peers but never produced (`ring` cannot
//!   sign with SHA-1).
//! * RSA keys must have 2048 to 8192 bits (ring's limits; RFC 8247 deprecates smaller ones).
//! * **Identities** ([`cert_matches_id`], [`id_matches_pattern`]): see `identity.rs`; DNs are
//!   written and read as strongSwan writes them (`C=CH, O=strongSwan, CN=moon`, in the
//!   certificate's RDN order, not RFC 4514's reversed one), see [`Dn`].
mod cert;
mod dn;
mod identity;
mod key;
mod payload;
mod signature;
mod trust;

pub use cert::{Certificate, KeyKind};
pub use dn::Dn;
pub use dn::{MAX_DN_ATTRS, MAX_DN_LEN};
pub use identity::{cert_matches_id, id_matches_pattern, IdPattern};
pub use key::{PrivateKey, RingSigner, SigScheme, Signer};
pub use payload::{cert_encoding, CertPayload, CertReqPayload, MAX_CERTREQ_CAS, MAX_CERT_LEN};
pub use signature::{
    auth_method, auth_sign, auth_sign_classic, auth_sign_with_scheme, auth_verify, choose_scheme, ecdsa_der_to_fixed,
    hash_algs_data, our_hash_algs, parse_hash_algs, MAX_HASH_ALGS,
};
pub use trust::{
    crl_ders, verify_chain, verify_peer, TrustStore, Verified, MAX_CHAIN_CERTS, MAX_CRLS, MAX_PATHS_VALIDATED,
    MAX_PATH_STEPS, MAX_TRUSTED_CAS,
};

use core::fmt;

/// Hash algorithm identifiers of the SIGNATURE_HASH_ALGORITHMS notify (RFC 7427 section 4,
/// IANA "IKEv2 Hash Algorithms").
pub mod hash_alg {
    /// SHA1 (never announced nor used here, RFC 8247 2.4).
    pub const SHA1: u16 = 1;
    /// SHA2-256.
    pub const SHA2_256: u16 = 2;
    /// SHA2-384.
    pub const SHA2_384: u16 = 3;
    /// SHA2-512.
    pub const SHA2_512: u16 = 4;
    /// Identity (RFC 8420): the signature algorithm hashes itself (Ed25519).
    pub const IDENTITY: u16 = 5;
}

/// Why a certificate, key, CRL or DN given by the caller (configuration) could not be used,
/// or why signing failed. Never carries key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PkiError {
    /// Not PEM with the expected label, or bad base64.
    BadPem,
    /// A certificate is not valid DER X.509.
    BadCertificate,
    /// A certificate given as a CA is not one (no basicConstraints cA=TRUE) or is unusable as
    /// a trust anchor.
    NotCa,
    /// A CRL is not valid DER/PEM.
    BadCrl,
    /// A private key could not be read (the text says which structure).
    BadKey(&'static str),
    /// An encrypted private key (PEM "ENCRYPTED PRIVATE KEY"): decrypt it first.
    EncryptedKey,
    /// A key type or size this module does not support (RSA outside 2048..=8192 bits, other
    /// curves than P-256/P-384, Ed448, DSA).
    UnsupportedKey,
    /// A distinguished name string or DER could not be parsed (the text says why).
    BadDn(&'static str),
    /// An identity pattern could not be parsed.
    BadPattern(&'static str),
    /// The operation is not supported (the text says which).
    Unsupported(&'static str),
    /// The signer cannot make the requested signature scheme with its key.
    SchemeMismatch,
    /// The signer failed.
    SigningFailed,
    /// Too many of something (the text says what).
    TooMany(&'static str),
}

impl fmt::Display for PkiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PkiError::BadPem => f.write_str("malformed PEM"),
            PkiError::BadCertificate => f.write_str("malformed certificate"),
            PkiError::NotCa => f.write_str("not a CA certificate"),
            PkiError::BadCrl => f.write_str("malformed CRL"),
            PkiError::BadKey(s) => write!(f, "malformed private key ({s})"),
            PkiError::EncryptedKey => f.write_str("encrypted private keys are not supported"),
            PkiError::UnsupportedKey => f.write_str("unsupported key type or size"),
            PkiError::BadDn(s) => write!(f, "bad distinguished name: {s}"),
            PkiError::BadPattern(s) => write!(f, "bad identity pattern: {s}"),
            PkiError::Unsupported(s) => write!(f, "unsupported: {s}"),
            PkiError::SchemeMismatch => f.write_str("signature scheme does not fit the key"),
            PkiError::SigningFailed => f.write_str("signing failed"),
            PkiError::TooMany(s) => write!(f, "too many {s}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PkiError {}

/// Why a peer's certificate, chain or AUTH payload is refused. Each has one clear phrase
/// (Display) for logs and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CertError {
    /// A certificate, CRL, AUTH payload or signature encoding is malformed.
    Malformed,
    /// A certificate of the chain has expired (its notAfter is before now).
    Expired,
    /// A certificate of the chain is not valid yet (its notBefore is after now).
    NotYetValid,
    /// No chain leads to a trusted CA.
    UnknownCa,
    /// A certificate of the chain is listed on its issuer's CRL.
    Revoked,
    /// A certificate's or the AUTH payload's signature does not verify.
    BadSignature,
    /// The extended key usage excludes IKE (RFC 4945 5.1.3.12), or a CA is used as an end
    /// entity (or the reverse).
    WrongUsage,
    /// The certificate does not contain the peer's identity.
    IdentityMismatch,
    /// A signature or key algorithm not supported (or refused: SHA-1 in RFC 7427, P-521).
    UnsupportedAlgorithm,
    /// The authentication method does not fit the certificate's key (e.g. ECDSA method 9 with
    /// an RSA key, or with a P-384 key).
    KeyMismatch,
    /// The chain is invalid for another reason (path length or name constraints, unsupported
    /// critical extension, path too long).
    InvalidChain,
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CertError::Malformed => "malformed certificate or signature",
            CertError::Expired => "certificate expired",
            CertError::NotYetValid => "certificate not yet valid",
            CertError::UnknownCa => "issuer unknown (no trusted CA)",
            CertError::Revoked => "certificate revoked",
            CertError::BadSignature => "bad signature",
            CertError::WrongUsage => "certificate not valid for IKE (key usage)",
            CertError::IdentityMismatch => "identity mismatch",
            CertError::UnsupportedAlgorithm => "unsupported signature algorithm",
            CertError::KeyMismatch => "authentication method does not fit the key",
            CertError::InvalidChain => "invalid certificate chain",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CertError {}

/// Splits PEM text into its blocks (label, DER) with `pem-rfc7468`; text outside the blocks
/// (openssl's "Bag Attributes", comments) is skipped. `Ok(None)` when the input has no PEM
/// block at all (it may be DER). At most `max` blocks.
/// PEM blocks: (label, DER), the DER zeroized on drop (it may be a key).
pub(crate) type PemBlocks = alloc::vec::Vec<(alloc::string::String, zeroize::Zeroizing<alloc::vec::Vec<u8>>)>;

pub(crate) fn pem_blocks(bytes: &[u8], max: usize) -> Result<Option<PemBlocks>, PkiError> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const END: &[u8] = b"-----END ";
    let mut out = alloc::vec::Vec::new();
    let mut rest = bytes;
    while let Some(start) = find(rest, BEGIN) {
        let from_end = find(&rest[start..], END).ok_or(PkiError::BadPem)? + start;
        // The END line ends with "-----" after its label.
        let after = &rest[from_end + END.len()..];
        let close = find(after, b"-----").ok_or(PkiError::BadPem)?;
        let stop = from_end + END.len() + close + 5;
        if out.len() == max {
            return Err(PkiError::TooMany("PEM blocks"));
        }
        let (label, der) = pem_rfc7468::decode_vec(&rest[start..stop]).map_err(|_| PkiError::BadPem)?;
        out.push((label.into(), zeroize::Zeroizing::new(der)));
        rest = &rest[stop..];
    }
    Ok(if out.is_empty() { None } else { Some(out) })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_splitting() {
        let pem = b"junk\n-----BEGIN A-----\nAAEC\n-----END A-----\nmore\n-----BEGIN B-----\nAw==\n-----END B-----\n";
        let b = pem_blocks(pem, 4).unwrap().unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].0.as_str(), &b[0].1[..]), ("A", &[0u8, 1, 2][..]));
        assert_eq!((b[1].0.as_str(), &b[1].1[..]), ("B", &[3u8][..]));
        assert_eq!(pem_blocks(pem, 1), Err(PkiError::TooMany("PEM blocks")));
        assert_eq!(pem_blocks(b"\x30\x03\x02\x01\x01", 4), Ok(None));
        assert_eq!(pem_blocks(b"-----BEGIN A-----\nAAEC\n", 4), Err(PkiError::BadPem));
        assert_eq!(
            pem_blocks(b"-----BEGIN A-----\n!!!!\n-----END A-----", 4),
            Err(PkiError::BadPem)
        );
    }
}
