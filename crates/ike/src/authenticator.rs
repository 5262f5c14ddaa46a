//! Authenticators (RFC 7296 2.15), as strongSwan's `sa/ikev2/authenticators/` are: how the
//! AUTH payload is made for our side of a connection ([`LocalAuth`]) and checked for the
//! peer's ([`RemoteAuth`]). Both cover the same signed octets:
//!
//! ```text
//! InitiatorSignedOctets = RealMessage1 | NonceRData | MACedIDForI,  MACedIDForI = prf(SK_pi, IDi')
//! ResponderSignedOctets = RealMessage2 | NonceIData | MACedIDForR,  MACedIDForR = prf(SK_pr, IDr')
//! ```
//!
//! A pre-shared key MACs them (`prf(prf(PSK, "Key Pad for IKEv2"), octets)`, compared in
//! constant time); a private key signs them ([`crate::pki::auth_sign`], RFC 7427 or the
//! classic methods of 3.8) and the peer's signature is checked with the key of a
//! certificate that chains to a trusted CA, is valid now and carries the identity the peer
//! claims ([`crate::pki::verify_chain`], [`crate::pki::cert_matches_id`]).
use crate::alg::Prf;
use crate::auth::{method, psk_auth, verify as psk_equal, AuthPayload};
use crate::config::{LocalAuth, RemoteAuth};
use crate::id::Identity;
use crate::pki::{self, cert_encoding, CertError, CertPayload, Certificate};
use crate::prf::prf;
use alloc::vec::Vec;
use core::fmt;

/// What an AUTH covers besides the key: the sender's IKE_SA_INIT message, the other side's
/// nonce, the sender's SK_p and its ID payload body.
pub(crate) struct Signed<'a> {
    pub prf: Prf,
    pub message: &'a [u8],
    pub nonce: &'a [u8],
    pub sk_p: &'a [u8],
    pub id_body: &'a [u8],
    /// IntAuth (RFC 9242 3.3.2), appended to the octets; empty without IKE_INTERMEDIATE.
    pub int_auth: &'a [u8],
}

impl Signed<'_> {
    /// The octets a signature covers (2.15).
    fn octets(&self) -> Vec<u8> {
        let maced_id = prf(self.prf, self.sk_p, &[self.id_body]);
        let mut v = Vec::with_capacity(self.message.len() + self.nonce.len() + maced_id.len() + self.int_auth.len());
        v.extend_from_slice(self.message);
        v.extend_from_slice(self.nonce);
        v.extend_from_slice(&maced_id);
        v.extend_from_slice(self.int_auth);
        v
    }

    pub(crate) fn psk(&self, psk: &crate::config::Psk) -> crate::prf::KeyBytes {
        if self.int_auth.is_empty() {
            return psk_auth(
                self.prf,
                psk.expose(),
                self.message,
                self.nonce,
                self.sk_p,
                self.id_body,
            );
        }
        // prf(prf(PSK, "Key Pad for IKEv2"), <SignedOctets>) with IntAuth in the octets.
        let key = prf(self.prf, psk.expose(), &[crate::auth::KEY_PAD]);
        prf(self.prf, &key, &[&self.octets()])
    }
}

/// Our AUTH payload. `peer_hashes`: the hash algorithms the peer announced in
/// SIGNATURE_HASH_ALGORITHMS (RFC 7427 4), `None` if it sent none (then a classic method).
pub(crate) fn build(auth: &LocalAuth, s: &Signed, peer_hashes: Option<&[u16]>) -> Result<AuthPayload, pki::PkiError> {
    Ok(match auth {
        LocalAuth::Psk(k) => AuthPayload {
            method: method::SHARED_KEY,
            data: s.psk(k).to_vec(),
        },
        LocalAuth::Pubkey { signer, .. } => {
            let (method, data) = pki::auth_sign(signer.as_ref(), peer_hashes, &s.octets())?;
            AuthPayload { method, data }
        }
        // Made with the MSK once EAP succeeded ([`crate::eap`]), never here.
        LocalAuth::Eap { .. } => return Err(pki::PkiError::Unsupported("EAP has no AUTH before the MSK")),
    })
}

/// Why the peer's AUTH was refused: one clear phrase for the log line and the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its AUTH method is not the one the connection requires (3.8).
    Method(u8),
    /// The pre-shared key MAC did not verify.
    Psk,
    /// A signature but no X.509 certificate to verify it with (3.6).
    NoCertificate,
    /// The certificate (chain) was refused.
    Certificate(CertError),
    /// The certificate does not carry the identity the peer claims (RFC 4945 4.1.3).
    IdentityMismatch,
    /// The signature did not verify with the certificate's key.
    Signature(CertError),
    /// No wall-clock time was given to the endpoint, so validity cannot be checked.
    NoClock,
    /// No connection accepts this identity with this method.
    NoConnection,
    /// Authenticated, but this identity has [`crate::limits::MAX_IKE_SAS_PER_IDENTITY`] IKE
    /// SAs already and did not send INITIAL_CONTACT.
    TooManySas,
    /// The EAP method failed (RFC 7296 2.16): wrong password, unknown user, ...
    Eap(ipsec_eap::server::FailureReason),
    /// EAP succeeded but the AUTH made with the MSK did not verify (2.16).
    EapAuth,
    /// The EAP conversation broke its rules: more IKE_AUTH rounds than
    /// [`crate::limits::MAX_EAP_ROUNDS`], or AUTH before EAP-Success.
    EapProtocol,
    /// The client ended the EAP conversation (AUTHENTICATION_FAILED in an INFORMATIONAL)
    /// before the method had failed it.
    EapAbandoned,
    /// Authenticated, but this identity has an IKE SA already and the connection's
    /// `unique = keep` keeps that one.
    UniqueKeep,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Method(m) => write!(f, "authentication method {m} is not the one configured"),
            Refusal::Psk => f.write_str("pre-shared key mismatch"),
            Refusal::UniqueKeep => f.write_str("identity has an IKE SA already (unique = keep)"),
            Refusal::NoCertificate => f.write_str("signature without a certificate"),
            Refusal::Certificate(e) => write!(f, "certificate refused: {e}"),
            Refusal::IdentityMismatch => f.write_str("identity not in the certificate"),
            Refusal::Signature(e) => write!(f, "signature refused: {e}"),
            Refusal::NoClock => f.write_str("no wall-clock time to check the certificate's validity"),
            Refusal::NoConnection => f.write_str("no connection for this identity and method"),
            Refusal::TooManySas => f.write_str("this identity has as many IKE SAs as it may"),
            Refusal::Eap(r) => write!(f, "EAP failed: {r}"),
            Refusal::EapAuth => f.write_str("AUTH with the EAP MSK did not verify"),
            Refusal::EapProtocol => f.write_str("EAP conversation out of its rules (rounds, order)"),
            Refusal::EapAbandoned => f.write_str("the client ended the EAP conversation"),
        }
    }
}

/// Checks the peer's AUTH for identity `peer_id` with the CERT payloads of its message
/// (`certs`; the first X.509 one holds the signing key, the others are intermediates).
/// Returns the validated end-entity certificate when a signature was checked.
pub(crate) fn verify(
    auth: &RemoteAuth,
    s: &Signed,
    peer_id: &Identity,
    payload: &AuthPayload,
    certs: &[&CertPayload],
    unix_now: Option<u64>,
) -> Result<Option<Certificate>, Refusal> {
    if !auth.accepts_method(payload.method) {
        return Err(Refusal::Method(payload.method));
    }
    match auth {
        RemoteAuth::Psk(k) => {
            if psk_equal(&s.psk(k), &payload.data) {
                Ok(None)
            } else {
                Err(Refusal::Psk)
            }
        }
        RemoteAuth::Eap { .. } => Err(Refusal::Method(payload.method)),
        RemoteAuth::Pubkey { trust } => {
            let mut x509 = certs
                .iter()
                .filter(|c| c.encoding == cert_encoding::X509_SIGNATURE)
                .map(|c| Certificate::from_der(c.data.clone()));
            let ee = x509
                .next()
                .ok_or(Refusal::NoCertificate)?
                .map_err(|_| Refusal::Certificate(CertError::Malformed))?;
            // An intermediate we cannot parse is skipped: the chain is built without it.
            let intermediates: Vec<Certificate> = x509.filter_map(Result::ok).collect();
            let now = unix_now.ok_or(Refusal::NoClock)?;
            let verified = pki::verify_chain(&ee, &intermediates, trust, now).map_err(Refusal::Certificate)?;
            pki::auth_verify(&verified.end_entity, payload.method, &payload.data, &s.octets())
                .map_err(Refusal::Signature)?;
            if !pki::cert_matches_id(&verified.end_entity, peer_id) {
                return Err(Refusal::IdentityMismatch);
            }
            Ok(Some(verified.end_entity))
        }
    }
}

/// The CERT payloads we send with our AUTH (3.6): ours first, then intermediates; none for
/// a PSK, or when `send_cert` says not now (`peer_asked`: it sent a CERTREQ).
pub(crate) fn cert_payloads(auth: &LocalAuth, peer_asked: bool) -> Vec<crate::message::Payload> {
    use crate::config::SendCert;
    match auth {
        LocalAuth::Pubkey { certs, send_cert, .. }
            if *send_cert == SendCert::Always || (*send_cert == SendCert::IfAsked && peer_asked) =>
        {
            certs
                .iter()
                .map(|c| {
                    crate::message::Payload::Cert(CertPayload {
                        encoding: cert_encoding::X509_SIGNATURE,
                        data: c.der().to_vec(),
                    })
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// A CERTREQ for the CAs we trust for the peer in `conns` (3.7: the hashes of their public
/// keys, each once), if any of them wants a signature and says so (`send_certreq`).
pub(crate) fn certreq_payload<'a>(
    conns: impl IntoIterator<Item = &'a crate::config::Connection>,
) -> Option<crate::message::Payload> {
    let mut ids: Vec<[u8; 20]> = Vec::new();
    for c in conns {
        if let RemoteAuth::Pubkey { trust } = &c.remote_auth {
            if c.send_certreq {
                for k in trust.ca_key_ids() {
                    if !ids.contains(&k) && ids.len() < crate::limits::MAX_CERTREQ_CAS {
                        ids.push(k);
                    }
                }
            }
        }
    }
    if ids.is_empty() {
        return None;
    }
    Some(crate::message::Payload::CertReq(pki::CertReqPayload {
        encoding: cert_encoding::X509_SIGNATURE,
        ca_key_ids: ids,
    }))
}

/// The SIGNATURE_HASH_ALGORITHMS notify we send in IKE_SA_INIT (RFC 7427 4).
pub(crate) fn hash_algs_notify() -> crate::message::Payload {
    let mut data = Vec::new();
    for h in pki::our_hash_algs() {
        data.extend_from_slice(&h.to_be_bytes());
    }
    crate::message::Payload::Notify(crate::notify::Notify::ike(
        crate::notify::kind::SIGNATURE_HASH_ALGORITHMS,
        &data,
    ))
}

/// The hash algorithms a peer announced (RFC 7427 4), `None` if it sent no such notify.
/// At most 16 are kept; an odd trailing byte is ignored.
pub(crate) fn peer_hash_algs(ps: &[crate::message::Payload]) -> Option<Vec<u16>> {
    use crate::message::Find;
    let n = ps.notify(crate::notify::kind::SIGNATURE_HASH_ALGORITHMS)?;
    Some(
        n.data
            .chunks_exact(2)
            .take(16)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect(),
    )
}
