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
