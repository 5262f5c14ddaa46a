//! Trusted CAs, CRLs and chain validation with `rustls-webpki` (RFC 5280 path validation as
//! webpki does it: signatures, validity, basicConstraints, pathLen, name constraints; CRLs).
use super::cert::Certificate;
use super::{pem_blocks, CertError, PkiError};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm, TrustAnchor, UnixTime};
use webpki::{
    CertRevocationList, EndEntityCert, ExpirationPolicy, ExtendedKeyUsageValidator, KeyPurposeIdIter,
    OwnedCertRevocationList, RevocationCheckDepth, RevocationOptionsBuilder, UnknownStatusPolicy,
};

/// Most CAs in a [`TrustStore`].
pub const MAX_TRUSTED_CAS: usize = 256;
/// Most CRLs in a [`TrustStore`].
pub const MAX_CRLS: usize = 256;
/// Most intermediate certificates considered for one chain (a peer sends them in CERT
/// payloads; RFC 7296 does not bound them).
pub const MAX_CHAIN_CERTS: usize = 8;

/// The signature algorithms accepted in certificates and CRLs (webpki's ring set: ECDSA
/// P-256/P-384 with SHA-256/384, Ed25519, RSA PKCS#1 v1.5 and PSS with SHA-2, 2048 to 8192
/// bits). No SHA-1.
static SIG_ALGS: &[&dyn SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P256_SHA384,
    webpki::ring::ECDSA_P384_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    webpki::ring::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
];

/// DER contents of the key purpose OIDs IKE accepts (RFC 4945 5.1.3.12, see the module doc).
const EKU_IPSEC_IKE: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x11];
const EKU_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const EKU_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
const EKU_ANY: &[u8] = &[0x55, 0x1d, 0x25, 0x00];

/// Whether an EKU list (DER OID contents) allows IKE: empty (no extension) or one of
/// id-kp-ipsecIKE, anyExtendedKeyUsage, serverAuth, clientAuth.
fn eku_allows_ike<'a>(mut oids: impl Iterator<Item = &'a [u8]>, absent: bool) -> bool {
    absent || oids.any(|o| [EKU_IPSEC_IKE, EKU_ANY, EKU_SERVER_AUTH, EKU_CLIENT_AUTH].contains(&o))
}

/// The RFC 4945 rule as webpki's EKU hook (webpki calls it for every certificate of the
/// path with that certificate's EKU OIDs, none when it has no EKU extension).
struct IkeEku;

impl ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut present = false;
        for id in iter {
            let id = id?;
            present = true;
            if [EKU_IPSEC_IKE, EKU_ANY, EKU_SERVER_AUTH, EKU_CLIENT_AUTH]
                .into_iter()
                .any(|k| webpki::KeyPurposeId::new(k) == id)
            {
                return Ok(());
            }
        }
        if present {
            #[allow(deprecated)]
            return Err(webpki::Error::RequiredEkuNotFound);
        }
        Ok(())
    }
}

/// The DER CRLs of a CRL file: PEM (one or more `X509 CRL` blocks) or one DER CRL (not
/// parsed further here; [`TrustStore::add_crl`] does, and EAP-TLS hands them to rustls).
pub fn crl_ders(bytes: &[u8]) -> Result<Vec<Vec<u8>>, PkiError> {
    let ders: Vec<Vec<u8>> = match pem_blocks(bytes, MAX_CRLS)? {
        None => alloc::vec![bytes.to_vec()],
        Some(b) => b
            .into_iter()
            .filter(|(l, _)| l == "X509 CRL")
            .map(|(_, d)| d.to_vec())
            .collect(),
    };
    if ders.is_empty() {
        return Err(PkiError::BadCrl);
    }
    Ok(ders)
}

/// The CAs trusted to issue peer certificates, and the CRLs the caller loaded.
#[derive(Clone, Default)]
pub struct TrustStore {
    cas: Vec<Certificate>,
    anchors: Vec<TrustAnchor<'static>>,
    crls: Vec<OwnedCertRevocationList>,
}

impl TrustStore {
    /// An empty store (it trusts nothing).
    pub fn new() -> TrustStore {
        TrustStore::default()
    }

    /// Adds a trusted CA (a root or an intermediate to anchor at); it must be a CA
    /// (basicConstraints cA=TRUE). Adding the same certificate twice is a no-op.
    pub fn add_ca(&mut self, ca: Certificate) -> Result<(), PkiError> {
        if !ca.is_ca() {
            return Err(PkiError::NotCa);
        }
        if self.cas.contains(&ca) {
            return Ok(());
        }
        if self.cas.len() == MAX_TRUSTED_CAS {
            return Err(PkiError::TooMany("trusted CAs"));
        }
        let der = CertificateDer::from(ca.der());
        let anchor = webpki::anchor_from_trusted_cert(&der)
            .map_err(|_| PkiError::NotCa)?
            .to_owned();
        self.cas.push(ca);
        self.anchors.push(anchor);
        Ok(())
    }

    /// Adds CRLs: PEM (one or more `X509 CRL` blocks) or one DER CRL. Their signatures are
    /// checked when a chain through their issuer is validated; a CRL whose issuer is not on
    /// the path is not used. A certificate without a CRL from its issuer is accepted (no
    /// revocation information is not revocation), as strongSwan does by default; a CRL past
    /// its nextUpdate is still used.
    pub fn add_crl(&mut self, bytes: &[u8]) -> Result<(), PkiError> {
        let ders = crl_ders(bytes)?;
        if self.crls.len() + ders.len() > MAX_CRLS {
            return Err(PkiError::TooMany("CRLs"));
        }
        let parsed = ders
            .iter()
            .map(|d| OwnedCertRevocationList::from_der(d).map_err(|_| PkiError::BadCrl))
            .collect::<Result<Vec<_>, _>>()?;
        self.crls.extend(parsed);
        Ok(())
    }

    /// SHA-1 of each CA's SubjectPublicKeyInfo: what our CERTREQ lists (RFC 7296 3.7).
    pub fn ca_key_ids(&self) -> Vec<[u8; 20]> {
        self.cas.iter().map(Certificate::ca_key_id).collect()
    }

    /// The trusted CAs.
    pub fn cas(&self) -> &[Certificate] {
        &self.cas
    }

    /// The CA whose key ID (see [`Certificate::ca_key_id`]) is `id`, e.g. from a peer's
    /// CERTREQ.
    pub fn ca_by_key_id(&self, id: &[u8; 20]) -> Option<&Certificate> {
        self.cas.iter().find(|c| &c.ca_key_id() == id)
    }

    /// Number of CRLs loaded.
    pub fn crl_count(&self) -> usize {
        self.crls.len()
    }

    /// Whether no CA is trusted.
    pub fn is_empty(&self) -> bool {
        self.cas.is_empty()
    }
}

impl fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustStore")
            .field("cas", &self.cas)
            .field("crls", &self.crls.len())
            .finish()
    }
}

/// A validated chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The peer's certificate.
    pub end_entity: Certificate,
    /// The path: the end entity first, then the intermediates used, up to and including the
    /// trusted CA.
    pub chain: Vec<Certificate>,
}

/// Path building's work budget (issue #39 item 6): candidate paths made (one certificate put
/// on a path) before the search stops. Eight fake CAs all named like an end entity's issuer
/// made webpki try their orderings, up to its 200,000 path-building calls (45-54 ms of CPU
/// per unauthenticated IKE_AUTH); breadth first, the real chains (one to three
/// intermediates) are among the first few candidates.
pub const MAX_PATH_STEPS: usize = 256;
/// Candidate paths (each ending in a certificate named as issued by a trusted CA) given to
/// full validation (signatures, validity, CRLs) before the chain is refused.
pub const MAX_PATHS_VALIDATED: usize = 4;
/// Intermediates on one path (webpki's own bound, `MAX_SUB_CA_COUNT`, is 6).
const MAX_PATH_INTERMEDIATES: usize = 6;

/// Validates `end_entity` at `now_unix` (seconds since the epoch) through `intermediates`
/// (e.g. the peer's other CERT payloads; at most [`MAX_CHAIN_CERTS`] are considered, order
/// free) up to a CA of `trust`, checking every certificate's signature, validity and CRL
/// status and the extended key usage rule of the module documentation.
///
/// Paths are built here (RFC 4158's shape, bounded): breadth first from the end entity, a
/// candidate issuer being a certificate whose subject is the issuer name octet for octet,
/// one whose subjectKeyIdentifier differs from the authorityKeyIdentifier left out and one
/// whose key identifier matches tried first; each path that reaches a name a trusted CA has
/// is validated by webpki as it stands (so webpki tries no orderings), at most
/// [`MAX_PATHS_VALIDATED`] of them and [`MAX_PATH_STEPS`] steps in all.
pub fn verify_chain(
    end_entity: &Certificate,
    intermediates: &[Certificate],
    trust: &TrustStore,
    now_unix: u64,
) -> Result<Verified, CertError> {
    // The EKU rule first, for a clear error (webpki checks it again on the whole path).
    match end_entity.eku() {
        None => {}
        Some(Err(_)) => return Err(CertError::Malformed),
        Some(Ok(eku)) => {
            let ders: Vec<&[u8]> = eku.0.iter().map(|o| o.as_bytes()).collect();
            if !eku_allows_ike(ders.into_iter(), false) {
                return Err(CertError::WrongUsage);
            }
        }
    }
    let ee_der = CertificateDer::from(end_entity.der());
    let ee = EndEntityCert::try_from(&ee_der).map_err(map_err)?;
    let inter: Vec<&Certificate> = intermediates.iter().take(MAX_CHAIN_CERTS).collect();
    let crls: Vec<CertRevocationList<'static>> = trust.crls.iter().cloned().map(CertRevocationList::from).collect();
    let crl_refs: Vec<&CertRevocationList<'_>> = crls.iter().collect();
    let revocation = RevocationOptionsBuilder::new(&crl_refs).ok().map(|b| {
        b.with_depth(RevocationCheckDepth::Chain)
            .with_status_policy(UnknownStatusPolicy::Allow)
            .with_expiration_policy(ExpirationPolicy::Ignore)
            .build()
    });
    let time = UnixTime::since_unix_epoch(Duration::from_secs(now_unix));
    // One path, validated as it stands: the end entity, then `path`'s intermediates.
    let validate = |path: &[usize]| -> Result<Verified, CertError> {
        let ders: Vec<CertificateDer<'_>> = path.iter().map(|&i| CertificateDer::from(inter[i].der())).collect();
        let p = ee
            .verify_for_usage(SIG_ALGS, &trust.anchors, &ders, time, IkeEku, revocation, None)
            .map_err(map_err)?;
        let mut chain = alloc::vec![end_entity.clone()];
        for c in p.intermediate_certificates() {
            let found = inter
                .iter()
                .find(|i| i.der() == c.der().as_ref())
                .ok_or(CertError::InvalidChain)?;
            chain.push((*found).clone());
        }
        let anchor = p.anchor();
        let idx = trust
            .anchors
            .iter()
            .position(|a| core::ptr::eq(a, anchor))
            .ok_or(CertError::InvalidChain)?;
        chain.push(trust.cas[idx].clone());
        Ok(Verified {
            end_entity: end_entity.clone(),
            chain,
        })
    };
    let named_by_anchor = |c: &Certificate| trust.cas.iter().any(|a| a.subject_name() == c.issuer_name());
    let ski: Vec<Option<Vec<u8>>> = inter.iter().map(|c| c.subject_key_id()).collect();
    let aki: Vec<Option<Vec<u8>>> = inter.iter().map(|c| c.authority_key_id()).collect();
    let ee_aki = end_entity.authority_key_id();
    let mut queue: VecDeque<Vec<usize>> = VecDeque::new();
    queue.push_back(Vec::new());
    let (mut steps, mut validated) = (0, 0);
    let mut first_err = None;
    'search: while let Some(path) = queue.pop_front() {
        let (head, head_aki) = match path.last() {
            Some(&i) => (inter[i], &aki[i]),
            None => (end_entity, &ee_aki),
        };
        if named_by_anchor(head) {
            match validate(&path) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
            validated += 1;
            if validated == MAX_PATHS_VALIDATED {
                break;
            }
        }
        if path.len() == MAX_PATH_INTERMEDIATES {
            continue;
        }
        // Its candidate issuers: the key identifier matching first (false sorts first).
        let mut next: Vec<(bool, usize)> = (0..inter.len())
            .filter(|i| !path.contains(i) && inter[*i].der() != end_entity.der())
            .filter(|&i| inter[i].subject_name() == head.issuer_name())
            .filter_map(|i| match (head_aki, &ski[i]) {
                (Some(a), Some(s)) if a != s => None,
                (Some(_), Some(_)) => Some((false, i)),
                _ => Some((true, i)),
            })
            .collect();
        next.sort_by_key(|(unmatched, _)| *unmatched);
        for (_, i) in next {
            steps += 1;
            if steps > MAX_PATH_STEPS {
                break 'search;
            }
            let mut p = path.clone();
            p.push(i);
            queue.push_back(p);
        }
    }
    match first_err {
        Some(e) => Err(e),
        // No path reaches a trusted CA's name: webpki's own verdict on the end entity alone
        // (expired, unknown issuer, ...).
        None => validate(&[]),
    }
}

/// [`verify_chain`], then whether the end entity contains the peer's identity
/// ([`super::cert_matches_id`]; [`CertError::IdentityMismatch`] if not): what IKE_AUTH checks
/// before the AUTH payload.
pub fn verify_peer(
    end_entity: &Certificate,
    intermediates: &[Certificate],
    trust: &TrustStore,
    now_unix: u64,
    id: &crate::id::Identity,
) -> Result<Verified, CertError> {
    let v = verify_chain(end_entity, intermediates, trust, now_unix)?;
    if !super::cert_matches_id(end_entity, id) {
        return Err(CertError::IdentityMismatch);
    }
    Ok(v)
}

#[allow(deprecated)]
fn map_err(e: webpki::Error) -> CertError {
    use webpki::Error as E;
    match e {
        E::CertExpired { .. } => CertError::Expired,
        E::CertNotValidYet { .. } => CertError::NotYetValid,
        E::UnknownIssuer => CertError::UnknownCa,
        E::CertRevoked => CertError::Revoked,
        E::InvalidSignatureForPublicKey | E::InvalidCrlSignatureForPublicKey => CertError::BadSignature,
        E::RequiredEkuNotFound
        | E::RequiredEkuNotFoundContext(_)
        | E::EmptyEkuExtension
        | E::CaUsedAsEndEntity
        | E::EndEntityUsedAsCa
        | E::IssuerNotCrlSigner => CertError::WrongUsage,
        E::UnsupportedSignatureAlgorithm
        | E::UnsupportedSignatureAlgorithmContext(_)
        | E::UnsupportedSignatureAlgorithmForPublicKey
        | E::UnsupportedSignatureAlgorithmForPublicKeyContext(_)
        | E::UnsupportedCrlSignatureAlgorithm
        | E::UnsupportedCrlSignatureAlgorithmContext(_)
        | E::UnsupportedCrlSignatureAlgorithmForPublicKey
        | E::UnsupportedCrlSignatureAlgorithmForPublicKeyContext(_) => CertError::UnsupportedAlgorithm,
        E::BadDer
        | E::BadDerTime
        | E::TrailingData(_)
        | E::MalformedExtensions
        | E::ExtensionValueInvalid
        | E::InvalidSerialNumber
        | E::InvalidCertValidity
        | E::UnsupportedCertVersion => CertError::Malformed,
        _ => CertError::InvalidChain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eku_rule() {
        assert!(eku_allows_ike([].into_iter(), true));
        assert!(eku_allows_ike([EKU_SERVER_AUTH].into_iter(), false));
        assert!(eku_allows_ike([&[1u8][..], EKU_IPSEC_IKE].into_iter(), false));
        assert!(eku_allows_ike([EKU_ANY].into_iter(), false));
        assert!(eku_allows_ike([EKU_CLIENT_AUTH].into_iter(), false));
        // codeSigning 1.3.6.1.5.5.7.3.3
        assert!(!eku_allows_ike([&[0x2b, 6, 1, 5, 5, 7, 3, 3][..]].into_iter(), false));
        assert!(!eku_allows_ike([].into_iter(), false));
    }
}
