//! EAP in IKE_AUTH (RFC 7296 2.16): the AUTH payloads of both sides after a successful EAP
//! exchange are made with the MSK as the shared key,
//!
//! ```text
//! AUTH = prf(prf(MSK, "Key Pad for IKEv2"), <InitiatorSignedOctets or ResponderSignedOctets>)
//! ```
//!
//! (2.16: "the shared key from the EAP exchange"; method 2, Shared Key Message Integrity
//! Code), over the same signed octets as the first IKE_AUTH request and response: the
//! sender's IKE_SA_INIT message, the other side's nonce, prf(SK_px, IDx') with the ID
//! payloads of the first IKE_AUTH exchange (and IntAuth with the first IKE_AUTH's message ID,
//! RFC 9242 3.3.2). The exchange itself is in `task/ike_auth_eap.rs`.
use crate::auth::{method, verify as equal, AuthPayload};
use crate::authenticator::Signed;
use crate::config::Psk;
use ipsec_eap::Msk;

/// Our AUTH payload made with the MSK (2.16).
pub(crate) fn auth_with_msk(msk: &Msk, s: &Signed) -> AuthPayload {
    AuthPayload {
        method: method::SHARED_KEY,
        data: s.psk(&Psk::new(msk.as_bytes())).to_vec(),
    }
}

/// Whether the peer's AUTH is the one made with the MSK (method 2, compared in constant time).
pub(crate) fn verify_with_msk(msk: &Msk, s: &Signed, peer: &AuthPayload) -> bool {
    peer.method == method::SHARED_KEY && equal(&s.psk(&Psk::new(msk.as_bytes())), &peer.data)
}

/// The EAP method's name for `ipsec ike list` and the log.
pub const METHOD_MSCHAPV2: &str = "eap-mschapv2";
/// EAP-TLS (RFC 5216, RFC 9190).
pub const METHOD_TLS: &str = "eap-tls";

/// The client's identity after a successful EAP exchange: with EAP-TLS the verified
/// certificate's ([`identity_of_certificate`]), otherwise the EAP-Identity's ([`identity_of`]).
pub(crate) fn peer_identity(auth: &ipsec_eap::server::Authenticator) -> Option<crate::id::Identity> {
    match auth.peer_certificate() {
        Some(der) => identity_of_certificate(der, auth.identity()),
        None => auth.identity().map(identity_of),
    }
}

/// The EAP-TLS client's identity, taken from its certificate (the TLS handshake verified it;
/// the EAP-Identity is only a hint, RFC 5216 5.2): the subjectAltName equal to the identity
/// the client gave in EAP-Identity, else the subject DN, else the first subjectAltName. So a
/// client cannot claim another user's name (and lease) with its own certificate.
pub fn identity_of_certificate(der: &[u8], eap_identity: Option<&[u8]>) -> Option<crate::id::Identity> {
    use crate::id::Identity;
    let cert = crate::pki::Certificate::from_der(der.to_vec()).ok()?;
    let sans = cert.sans();
    let claimed = eap_identity.map(identity_of);
    if let Some(id) = claimed.filter(|c| sans.contains(c)) {
        return Some(id);
    }
    let subject = cert.subject();
    if !subject.is_empty() {
        return Some(Identity::Dn(subject));
    }
    sans.into_iter().next()
}

/// The identity the EAP-Identity Response gave, as an IKE identity (for the lease, the
/// per-identity caps and `ipsec ike list`): `user@realm` an RFC 822 name, other UTF-8 text
/// an FQDN-typed name (as strongSwan shows it), anything else a key ID.
pub fn identity_of(eap_identity: &[u8]) -> crate::id::Identity {
    use crate::id::Identity;
    match core::str::from_utf8(eap_identity) {
        Ok(s) if s.contains('@') => Identity::UserFqdn(s.into()),
        Ok(s) => Identity::Fqdn(s.into()),
        Err(_) => Identity::KeyId(eap_identity.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Identity;

    fn alice() -> alloc::vec::Vec<u8> {
        let pem = include_bytes!("../../eap/tests/data/tls/alice.pem");
        crate::pki::Certificate::parse_pem_or_der(pem).unwrap()[0]
            .der()
            .to_vec()
    }

    /// EAP-TLS: the identity comes from the certificate; the EAP-Identity only picks which
    /// of its names, never a name the certificate does not carry.
    #[test]
    fn the_eap_tls_identity_is_the_certificates() {
        let der = alice();
        assert_eq!(
            identity_of_certificate(&der, Some(b"alice@example.org")),
            Some(Identity::UserFqdn("alice@example.org".into()))
        );
        for claimed in [Some(&b"bob@example.org"[..]), Some(b"anonymous"), None] {
            let id = identity_of_certificate(&der, claimed).unwrap();
            assert!(matches!(id, Identity::Dn(_)), "{id}");
            assert_eq!(alloc::format!("{id}"), "C=CH, O=tunneld test, CN=alice@example.org");
        }
        assert_eq!(identity_of_certificate(b"not a certificate", None), None);
    }
}
