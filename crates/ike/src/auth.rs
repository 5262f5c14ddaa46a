//! The Authentication payload (RFC 7296 section 3.8) and pre-shared key authentication
//! (2.15): AUTH = prf(prf(Shared Secret, "Key Pad for IKEv2"), `<SignedOctets>`), where the
//! signed octets are the sender's first message, the peer's nonce and prf(SK_p, IDx').
use crate::alg::Prf;
use crate::error::Error;
use crate::prf::{prf, KeyBytes};
use alloc::vec::Vec;
use subtle::ConstantTimeEq;

/// Authentication methods (3.8).
pub mod method {
    /// RSA Digital Signature.
    pub const RSA_SIG: u8 = 1;
    /// Shared Key Message Integrity Code.
    pub const SHARED_KEY: u8 = 2;
    /// DSS Digital Signature.
    pub const DSS_SIG: u8 = 3;
    /// Digital Signature (RFC 7427).
    pub const DIGITAL_SIGNATURE: u8 = 14;
}

/// The key pad of 2.15.
pub const KEY_PAD: &[u8] = b"Key Pad for IKEv2";

/// An Authentication payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPayload {
    /// Auth Method.
    pub method: u8,
    /// Authentication Data.
    pub data: Vec<u8>,
}

impl AuthPayload {
    /// Parses the body.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < 5 {
            return Err(Error::Truncated);
        }
        Ok(AuthPayload {
            method: body[0],
            data: body[4..].to_vec(),
        })
    }
    /// The body.
    pub fn to_body(&self) -> Vec<u8> {
        let mut v = alloc::vec![self.method, 0, 0, 0];
        v.extend_from_slice(&self.data);
        v
    }
}

/// The PSK AUTH value (2.15). `message` is the sender's IKE_SA_INIT message as sent,
/// `peer_nonce` the other side's nonce, `sk_p` the sender's SK_pi or SK_pr, `id_body` the
/// sender's ID payload body (IDx').
pub fn psk_auth(p: Prf, psk: &[u8], message: &[u8], peer_nonce: &[u8], sk_p: &[u8], id_body: &[u8]) -> KeyBytes {
    let maced_id = prf(p, sk_p, &[id_body]);
    let key = prf(p, psk, &[KEY_PAD]);
    prf(p, &key, &[message, peer_nonce, &maced_id])
}

/// Compares a received AUTH value with the expected one in constant time.
pub fn verify(expected: &[u8], received: &[u8]) -> bool {
    expected.len() == received.len() && bool::from(expected.ct_eq(received))
}
