//! Signature authentication in the AUTH payload: RFC 7427 digital signatures (method 14) and
//! the classic methods, RSA (1, RFC 7296 3.8: PKCS#1 v1.5 with SHA-1; signed with RustCrypto
//! `rsa`, as ring cannot, for peers without RFC 7427) and ECDSA (9, 10, 11, RFC 4754: r||s,
//! each padded to the field size).
use super::cert::{Certificate, KeyKind};
use super::hash_alg;
use super::key::{SigScheme, Signer};
use super::{CertError, PkiError};
use alloc::vec::Vec;
use der::asn1::UintRef;
use der::{Decode, Reader, SliceReader};
use ring::signature::{self as rsig, UnparsedPublicKey, VerificationAlgorithm};

/// Authentication methods (RFC 7296 3.8, RFC 4754, RFC 7427).
pub mod auth_method {
    pub use crate::auth::method::*;
    /// ECDSA with SHA-256 on the P-256 curve (RFC 4754).
    pub const ECDSA_SHA256_P256: u8 = 9;
    /// ECDSA with SHA-384 on the P-384 curve (RFC 4754).
    pub const ECDSA_SHA384_P384: u8 = 10;
    /// ECDSA with SHA-512 on the P-521 curve (RFC 4754; not supported: ring has no P-521).
    pub const ECDSA_SHA512_P521: u8 = 11;
}

/// The hashes announced in our SIGNATURE_HASH_ALGORITHMS notify (RFC 7427 4): SHA2-256,
/// SHA2-384, SHA2-512 and Identity (RFC 8420, for Ed25519). Not SHA-1 (RFC 8247 2.4).
pub fn our_hash_algs() -> &'static [u16] {
    &[
        hash_alg::SHA2_256,
        hash_alg::SHA2_384,
        hash_alg::SHA2_512,
        hash_alg::IDENTITY,
    ]
}

/// Most hash algorithms read from one SIGNATURE_HASH_ALGORITHMS notify.
pub const MAX_HASH_ALGS: usize = 32;

/// Reads the Notification Data of SIGNATURE_HASH_ALGORITHMS (RFC 7427 4: 2-octet hash
/// algorithm identifiers). `None` if the length is odd or it lists more than
/// [`MAX_HASH_ALGS`].
pub fn parse_hash_algs(data: &[u8]) -> Option<Vec<u16>> {
    if !data.len().is_multiple_of(2) || data.len() / 2 > MAX_HASH_ALGS {
        return None;
    }
    Some(data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect())
}

/// The Notification Data of SIGNATURE_HASH_ALGORITHMS for `algs` (e.g. [`our_hash_algs`]).
pub fn hash_algs_data(algs: &[u16]) -> Vec<u8> {
    algs.iter().flat_map(|a| a.to_be_bytes()).collect()
}

// RFC 7427 Appendix A: the DER AlgorithmIdentifiers of method 14, byte for byte.
/// A.1.1 sha1WithRSAEncryption (refused in method 14: SHA-1).
const SHA1_WITH_RSA: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05, 0x05, 0x00,
];
/// A.1.2 sha256WithRSAEncryption.
const SHA256_WITH_RSA: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05, 0x00,
];
/// A.1.3 sha384WithRSAEncryption.
const SHA384_WITH_RSA: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c, 0x05, 0x00,
];
/// A.1.4 sha512WithRSAEncryption.
const SHA512_WITH_RSA: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d, 0x05, 0x00,
];
/// A.3.1 ecdsa-with-sha1 (refused: SHA-1).
#[cfg_attr(not(test), allow(dead_code))] // documents a refusal; the tests use it
const ECDSA_WITH_SHA1: &[u8] = &[0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
/// A.3.2 ecdsa-with-sha256.
const ECDSA_WITH_SHA256: &[u8] = &[0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
/// A.3.3 ecdsa-with-sha384.
const ECDSA_WITH_SHA384: &[u8] = &[0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
/// A.3.4 ecdsa-with-sha512 (no P-521 in ring; with P-256/P-384 keys not made by ring either).
#[cfg_attr(not(test), allow(dead_code))] // documents a refusal; the tests use it
const ECDSA_WITH_SHA512: &[u8] = &[0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
/// RFC 8420 3: id-Ed25519.
const ED25519_ALG: &[u8] = &[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];

/// RSASSA-PSS with explicit parameters: hash H (with NULL parameters), MGF1 with H, salt
/// length = H's length, trailer field default. `h` is the last octet of the hash OID
/// 2.16.840.1.101.3.4.2.h, `salt` the salt length. RFC 7427 A.4.2 gives this encoding for
/// SHA-256 (salt 32); SHA-384/512 differ only in the OID's last octet and the salt, which is
/// what strongSwan sends (`rsa_pss_params_build`).
const fn pss(h: u8, salt: u8) -> [u8; 67] {
    [
        0x30, 0x41, // AlgorithmIdentifier
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a, // id-RSASSA-PSS
        0x30, 0x34, // RSASSA-PSS-params
        0xa0, 0x0f, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, h, 0x05,
        0x00, // hashAlgorithm
        0xa1, 0x1c, 0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01,
        0x08, // maskGenAlgorithm: MGF1
        0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, h, 0x05, 0x00, //   with H
        0xa2, 0x03, 0x02, 0x01, salt, // saltLength
    ]
}
const PSS_SHA256: [u8; 67] = pss(0x01, 32);
const PSS_SHA384: [u8; 67] = pss(0x02, 48);
const PSS_SHA512: [u8; 67] = pss(0x03, 64);

impl SigScheme {
    /// The DER AlgorithmIdentifier of method 14 (RFC 7427 Appendix A, RFC 8420).
    pub fn algorithm_identifier(self) -> &'static [u8] {
        match self {
            SigScheme::RsaPkcs1Sha256 => SHA256_WITH_RSA,
            SigScheme::RsaPkcs1Sha384 => SHA384_WITH_RSA,
            SigScheme::RsaPkcs1Sha512 => SHA512_WITH_RSA,
            SigScheme::RsaPssSha256 => &PSS_SHA256,
            SigScheme::RsaPssSha384 => &PSS_SHA384,
            SigScheme::RsaPssSha512 => &PSS_SHA512,
            SigScheme::EcdsaP256Sha256 => ECDSA_WITH_SHA256,
            SigScheme::EcdsaP384Sha384 => ECDSA_WITH_SHA384,
            SigScheme::Ed25519 => ED25519_ALG,
            // Only for completeness: never sent nor accepted (method 1 has no identifier).
            SigScheme::RsaPkcs1Sha1 => SHA1_WITH_RSA,
        }
    }

    /// The scheme of a method-14 AlgorithmIdentifier; `Err(UnsupportedAlgorithm)` for SHA-1
    /// ones, ecdsa-with-sha512 and anything not listed.
    pub fn from_algorithm_identifier(alg: &[u8]) -> Result<SigScheme, CertError> {
        SigScheme::ALL
            .into_iter()
            .find(|s| s.algorithm_identifier() == alg)
            .ok_or(CertError::UnsupportedAlgorithm)
    }

    fn ring_verify(self) -> &'static dyn VerificationAlgorithm {
        match self {
            SigScheme::RsaPkcs1Sha256 => &rsig::RSA_PKCS1_2048_8192_SHA256,
            SigScheme::RsaPkcs1Sha384 => &rsig::RSA_PKCS1_2048_8192_SHA384,
            SigScheme::RsaPkcs1Sha512 => &rsig::RSA_PKCS1_2048_8192_SHA512,
            SigScheme::RsaPssSha256 => &rsig::RSA_PSS_2048_8192_SHA256,
            SigScheme::RsaPssSha384 => &rsig::RSA_PSS_2048_8192_SHA384,
            SigScheme::RsaPssSha512 => &rsig::RSA_PSS_2048_8192_SHA512,
            SigScheme::EcdsaP256Sha256 => &rsig::ECDSA_P256_SHA256_ASN1,
            SigScheme::EcdsaP384Sha384 => &rsig::ECDSA_P384_SHA384_ASN1,
            SigScheme::Ed25519 => &rsig::ED25519,
            SigScheme::RsaPkcs1Sha1 => &rsig::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        }
    }
}

/// The method-14 scheme for a key of `kind` given the hashes the peer announced, or `None`
/// when none fits (then [`auth_sign`] falls back to a classic method):
///
/// * Ed25519: needs Identity (RFC 8420).
/// * ECDSA: P-256 needs SHA2-256, P-384 needs SHA2-384 (the curve's hash, as RFC 4754 pairs
///   them and ring signs).
/// * RSA: PKCS#1 v1.5 (or PSS when `rsa_pss`) with the first of SHA2-256, SHA2-384, SHA2-512
///   the peer announced. PKCS#1 v1.5 by default because it is what strongSwan 5.9 sends by
///   default and what every RFC 7427 peer verifies; PSS (RFC 8247 recommends it) when the
///   configuration asks for it, as strongSwan's `rsa/pss` does.
pub fn choose_scheme(kind: KeyKind, peer_hash_algs: &[u16], rsa_pss: bool) -> Option<SigScheme> {
    let has = |h| peer_hash_algs.contains(&h);
    match kind {
        KeyKind::Ed25519 => has(hash_alg::IDENTITY).then_some(SigScheme::Ed25519),
        KeyKind::EcdsaP256 => has(hash_alg::SHA2_256).then_some(SigScheme::EcdsaP256Sha256),
        KeyKind::EcdsaP384 => has(hash_alg::SHA2_384).then_some(SigScheme::EcdsaP384Sha384),
        KeyKind::Rsa { .. } => {
            let (a, b, c) = if rsa_pss {
                (
                    SigScheme::RsaPssSha256,
                    SigScheme::RsaPssSha384,
                    SigScheme::RsaPssSha512,
                )
            } else {
                (
                    SigScheme::RsaPkcs1Sha256,
                    SigScheme::RsaPkcs1Sha384,
                    SigScheme::RsaPkcs1Sha512,
                )
            };
            [
                (hash_alg::SHA2_256, a),
                (hash_alg::SHA2_384, b),
                (hash_alg::SHA2_512, c),
            ]
            .into_iter()
            .find(|(h, _)| has(*h))
            .map(|(_, s)| s)
        }
    }
}

/// The AUTH payload (method, data) for `octets` (the signed octets of RFC 7296 2.15, built by
/// the caller).
///
/// With `peer_hash_algs` (the peer sent SIGNATURE_HASH_ALGORITHMS) and a scheme from
/// [`choose_scheme`] (PKCS#1 v1.5 for RSA): RFC 7427 method 14, the data being the
/// AlgorithmIdentifier's length (1 octet), the AlgorithmIdentifier and the signature.
/// Otherwise a classic method: 9 (P-256) or 10 (P-384) with r||s (RFC 4754), or for RSA
/// method 1, PKCS#1 v1.5 with SHA-1 (RFC 7296 3.8), as strongSwan does for a peer that did
/// not send SIGNATURE_HASH_ALGORITHMS (the built-in Windows client); Ed25519 has no classic
/// method: `Err(Unsupported)`.
pub fn auth_sign(
    signer: &dyn Signer,
    peer_hash_algs: Option<&[u16]>,
    octets: &[u8],
) -> Result<(u8, Vec<u8>), PkiError> {
    if let Some(h) = peer_hash_algs {
        if let Some(s) = choose_scheme(signer.kind(), h, false) {
            return auth_sign_with_scheme(signer, s, octets);
        }
    }
    auth_sign_classic(signer, octets)
}

/// The method-14 AUTH payload (method, data) for `octets` with `scheme`.
pub fn auth_sign_with_scheme(signer: &dyn Signer, scheme: SigScheme, octets: &[u8]) -> Result<(u8, Vec<u8>), PkiError> {
    if scheme == SigScheme::RsaPkcs1Sha1 {
        return Err(PkiError::Unsupported("SHA-1 in an RFC 7427 signature (RFC 8247 3.4)"));
    }
    if !scheme.fits(signer.kind()) {
        return Err(PkiError::SchemeMismatch);
    }
    let alg = scheme.algorithm_identifier();
    let sig = signer.sign(scheme, octets)?;
    let mut data = Vec::with_capacity(1 + alg.len() + sig.len());
    data.push(alg.len() as u8);
    data.extend_from_slice(alg);
    data.extend_from_slice(&sig);
    Ok((auth_method::DIGITAL_SIGNATURE, data))
}

/// The classic-method AUTH payload: ECDSA 9/10 (RFC 4754), RSA 1 (RFC 7296 3.8: "RSA
/// Digital Signature", RSASSA-PKCS1-v1_5 with SHA-1 over the signed octets).
pub fn auth_sign_classic(signer: &dyn Signer, octets: &[u8]) -> Result<(u8, Vec<u8>), PkiError> {
    let (method, scheme, n) = match signer.kind() {
        KeyKind::EcdsaP256 => (auth_method::ECDSA_SHA256_P256, SigScheme::EcdsaP256Sha256, 32),
        KeyKind::EcdsaP384 => (auth_method::ECDSA_SHA384_P384, SigScheme::EcdsaP384Sha384, 48),
        KeyKind::Rsa { .. } => return Ok((auth_method::RSA_SIG, signer.sign(SigScheme::RsaPkcs1Sha1, octets)?)),
        KeyKind::Ed25519 => return Err(PkiError::Unsupported("Ed25519 needs RFC 7427 signatures")),
    };
    let der = signer.sign(scheme, octets)?;
    let fixed = ecdsa_der_to_fixed(&der, n).ok_or(PkiError::SigningFailed)?;
    Ok((method, fixed))
}

/// DER `Ecdsa-Sig-Value` (SEQUENCE { r INTEGER, s INTEGER }) to r||s, each `n` octets
/// (RFC 4754 7), read with the `der` crate.
pub fn ecdsa_der_to_fixed(der: &[u8], n: usize) -> Option<Vec<u8>> {
    let mut rd = SliceReader::new(der).ok()?;
    let (r, s) = rd
        .sequence(|seq| {
            let r = UintRef::decode(seq)?;
            let s = UintRef::decode(seq)?;
            Ok((r, s))
        })
        .ok()?;
    rd.finish(()).ok()?;
    let (r, s) = (r.as_bytes(), s.as_bytes());
    if r.len() > n || s.len() > n {
        return None;
    }
    let mut out = alloc::vec![0u8; 2 * n];
    out[n - r.len()..n].copy_from_slice(r);
    out[2 * n - s.len()..].copy_from_slice(s);
    Some(out)
}

/// Verifies the peer's AUTH payload (method 1, 9, 10, 11 or 14 and its data) over `octets`
/// with the public key of its (already validated) end-entity certificate.
///
/// Method 14's AlgorithmIdentifier is compared byte for byte with RFC 7427 Appendix A's
/// encodings (and RFC 8420's for Ed25519), see [`SigScheme::algorithm_identifier`]; unknown
/// ones and SHA-1 ones are refused ([`CertError::UnsupportedAlgorithm`]): we never announce
/// SHA-1, so a peer following RFC 7427 does not use it (RFC 8247 2.4: MUST NOT). Method 1
/// (RSA, PKCS#1 v1.5 with SHA-1, RFC 7296 3.8) is verified for older peers.
pub fn auth_verify(cert: &Certificate, method: u8, data: &[u8], octets: &[u8]) -> Result<(), CertError> {
    let kind = cert.key_kind().ok_or(CertError::UnsupportedAlgorithm)?;
    let key = cert.public_key_bytes().ok_or(CertError::Malformed)?;
    if let KeyKind::Rsa { bits } = kind {
        if !(2048..=8192).contains(&bits) {
            return Err(CertError::UnsupportedAlgorithm);
        }
    }
    let (alg, sig): (&'static dyn VerificationAlgorithm, &[u8]) = match method {
        auth_method::RSA_SIG => {
            if !matches!(kind, KeyKind::Rsa { .. }) {
                return Err(CertError::KeyMismatch);
            }
            (&rsig::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, data)
        }
        auth_method::ECDSA_SHA256_P256 | auth_method::ECDSA_SHA384_P384 => {
            let (want, n, alg): (_, _, &'static dyn VerificationAlgorithm) = if method == auth_method::ECDSA_SHA256_P256
            {
                (KeyKind::EcdsaP256, 64, &rsig::ECDSA_P256_SHA256_FIXED)
            } else {
                (KeyKind::EcdsaP384, 96, &rsig::ECDSA_P384_SHA384_FIXED)
            };
            if kind != want {
                return Err(CertError::KeyMismatch);
            }
            if data.len() != n {
                return Err(CertError::Malformed);
            }
            (alg, data)
        }
        auth_method::ECDSA_SHA512_P521 => return Err(CertError::UnsupportedAlgorithm),
        auth_method::DIGITAL_SIGNATURE => {
            let (&len, rest) = data.split_first().ok_or(CertError::Malformed)?;
            let len = usize::from(len);
            if rest.len() <= len {
                return Err(CertError::Malformed);
            }
            let scheme = SigScheme::from_algorithm_identifier(&rest[..len])?;
            if !scheme.fits(kind) {
                return Err(CertError::KeyMismatch);
            }
            (scheme.ring_verify(), &rest[len..])
        }
        _ => return Err(CertError::UnsupportedAlgorithm),
    };
    UnparsedPublicKey::new(alg, key)
        .verify(octets, sig)
        .map_err(|_| CertError::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7427_a42_pss_sha256_encoding() {
        // RFC 7427 A.4.2, "RSASSA-PSS with parameters" (SHA-256, MGF1-SHA-256, salt 32).
        let rfc = "3041\
                   06092a864886f70d01010a\
                   3034\
                   a00f300d0609608648016503040201\
                   0500\
                   a11c301a06092a864886f70d010108\
                   300d06096086480165030402010500\
                   a203020120";
        let rfc: Vec<u8> = (0..rfc.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&rfc[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(&PSS_SHA256[..], &rfc[..]);
        assert_eq!(SigScheme::from_algorithm_identifier(&rfc), Ok(SigScheme::RsaPssSha256));
        assert_eq!(
            SigScheme::from_algorithm_identifier(SHA1_WITH_RSA),
            Err(CertError::UnsupportedAlgorithm)
        );
        assert_eq!(
            SigScheme::from_algorithm_identifier(ECDSA_WITH_SHA1),
            Err(CertError::UnsupportedAlgorithm)
        );
        assert_eq!(
            SigScheme::from_algorithm_identifier(ECDSA_WITH_SHA512),
            Err(CertError::UnsupportedAlgorithm)
        );
        // Each scheme has its own encoding.
        for a in SigScheme::ALL {
            assert_eq!(SigScheme::from_algorithm_identifier(a.algorithm_identifier()), Ok(a));
        }
    }

    #[test]
    fn hash_algs_notify() {
        assert_eq!(hash_algs_data(our_hash_algs()), [0, 2, 0, 3, 0, 4, 0, 5]);
        assert_eq!(parse_hash_algs(&[0, 2, 0, 5]), Some(alloc::vec![2, 5]));
        assert_eq!(parse_hash_algs(&[0, 2, 0]), None);
        assert_eq!(parse_hash_algs(&[0; 66]), None);
    }

    #[test]
    fn scheme_choice() {
        use hash_alg::*;
        let rsa = KeyKind::Rsa { bits: 2048 };
        assert_eq!(
            choose_scheme(rsa, &[SHA2_512, SHA2_256], false),
            Some(SigScheme::RsaPkcs1Sha256)
        );
        assert_eq!(choose_scheme(rsa, &[SHA2_384], true), Some(SigScheme::RsaPssSha384));
        assert_eq!(choose_scheme(rsa, &[SHA1, IDENTITY], false), None);
        assert_eq!(choose_scheme(KeyKind::Ed25519, &[SHA2_256], false), None);
        assert_eq!(
            choose_scheme(KeyKind::Ed25519, &[IDENTITY], false),
            Some(SigScheme::Ed25519)
        );
        assert_eq!(choose_scheme(KeyKind::EcdsaP384, &[SHA2_256], false), None);
        assert_eq!(
            choose_scheme(KeyKind::EcdsaP256, &[SHA2_256], false),
            Some(SigScheme::EcdsaP256Sha256)
        );
    }

    #[test]
    fn ecdsa_fixed_conversion() {
        // r = 0x00ff (DER needs the leading zero), s = 1.
        let der = [0x30, 0x07, 0x02, 0x02, 0x00, 0xff, 0x02, 0x01, 0x01];
        let f = ecdsa_der_to_fixed(&der, 4).unwrap();
        assert_eq!(f, [0, 0, 0, 0xff, 0, 0, 0, 1]);
        assert_eq!(ecdsa_der_to_fixed(&der, 0), None);
        assert_eq!(ecdsa_der_to_fixed(&der[..8], 4), None);
        let mut trailing = der.to_vec();
        trailing.push(0);
        assert_eq!(ecdsa_der_to_fixed(&trailing, 4), None);
    }
}
