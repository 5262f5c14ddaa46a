//! RADIUS authenticators: the Response Authenticator (RFC 2865 §3) and the
//! Message-Authenticator (RFC 3579 §3.2, RFC 2869 §5.14), both compared in constant time.

use super::packet::{attr, Packet, Repr, HEADER_LEN};
use crate::Error;
use alloc::vec::Vec;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

type HmacMd5 = Hmac<Md5>;

/// The offset of the Message-Authenticator value in checked packet bytes; an error if
/// there is none, more than one, or one of the wrong length (RFC 3579 §3.2: 16 octets).
fn message_authenticator_offset(bytes: &[u8]) -> Result<usize, Error> {
    let len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
    let mut off = HEADER_LEN;
    let mut found = None;
    while off + 2 <= len {
        let (t, l) = (bytes[off], usize::from(bytes[off + 1]));
        if l < 2 {
            return Err(Error::BadLength);
        }
        if t == attr::MESSAGE_AUTHENTICATOR {
            if l != 18 || found.is_some() {
                return Err(Error::Malformed("Message-Authenticator"));
            }
            found = Some(off + 2);
        }
        off += l;
    }
    found.ok_or(Error::BadAuthenticator)
}

/// HMAC-MD5(secret, packet) with the packet's Authenticator field replaced by `auth` and
/// the Message-Authenticator value zeroed (RFC 3579 §3.2).
fn compute_ma(secret: &[u8], bytes: &[u8], auth: &[u8; 16], ma_off: usize) -> [u8; 16] {
    let mut mac = HmacMd5::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(&bytes[..4]);
    mac.update(auth);
    mac.update(&bytes[HEADER_LEN..ma_off]);
    mac.update(&[0u8; 16]);
    mac.update(&bytes[ma_off + 16..]);
    let mut out = [0u8; 16];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

/// Fills the Message-Authenticator of an Access-Request (its Request Authenticator already
/// in place).
pub fn sign_request(secret: &[u8], bytes: &mut [u8]) -> Result<(), Error> {
    Packet::new_checked(&*bytes)?;
    let off = message_authenticator_offset(bytes)?;
    let mut auth = [0u8; 16];
    auth.copy_from_slice(&bytes[4..20]);
    let ma = compute_ma(secret, bytes, &auth, off);
    bytes[off..off + 16].copy_from_slice(&ma);
    Ok(())
}

/// The Response Authenticator: MD5(Code | Identifier | Length | RequestAuth | Attributes |
/// Secret) (RFC 2865 §3); an Accounting-Response's too (RFC 2866 §3).
pub(super) fn response_authenticator(secret: &[u8], bytes: &[u8], request_auth: &[u8; 16]) -> [u8; 16] {
    let mut md5 = Md5::new();
    md5.update(&bytes[..4]);
    md5.update(request_auth);
    md5.update(&bytes[HEADER_LEN..]);
    md5.update(secret);
    let mut out = [0u8; 16];
    out.copy_from_slice(&md5.finalize());
    out
}

/// Signs an answer as a server does (Message-Authenticator over the Request Authenticator,
/// then the Response Authenticator): for tests and the fuzz seeds.
pub fn sign_response(secret: &[u8], request_auth: &[u8; 16], bytes: &mut [u8]) -> Result<(), Error> {
    Packet::new_checked(&*bytes)?;
    let len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
    let bytes = &mut bytes[..len];
    if let Ok(off) = message_authenticator_offset(bytes) {
        let ma = compute_ma(secret, bytes, request_auth, off);
        bytes[off..off + 16].copy_from_slice(&ma);
    }
    let ra = response_authenticator(secret, bytes, request_auth);
    bytes[4..20].copy_from_slice(&ra);
    Ok(())
}

/// Checks an answer (Access-Accept/Reject/Challenge) to the request whose Request
/// Authenticator was `request_auth`: the Response Authenticator, then the
/// Message-Authenticator, which must be present. Any failure is
/// [`Error::BadAuthenticator`] (or a parse error).
pub fn verify_response<'a>(secret: &[u8], request_auth: &[u8; 16], bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
    let len = usize::from(Packet::new_checked(bytes)?.length());
    let bytes = &bytes[..len];
    let ra = response_authenticator(secret, bytes, request_auth);
    if !bool::from(ra.ct_eq(&bytes[4..20])) {
        return Err(Error::BadAuthenticator);
    }
    let off = message_authenticator_offset(bytes)?;
    let ma = compute_ma(secret, bytes, request_auth, off);
    if !bool::from(ma.ct_eq(&bytes[off..off + 16])) {
        return Err(Error::BadAuthenticator);
    }
    let mut auth = [0u8; 16];
    auth.copy_from_slice(&bytes[4..20]);
    Ok(Repr {
        code: bytes[0],
        identifier: bytes[1],
        authenticator: auth,
        attributes: &bytes[HEADER_LEN..],
    })
}

/// Checks a request's Message-Authenticator (the server side; for tests).
pub fn verify_request(secret: &[u8], bytes: &[u8]) -> Result<(), Error> {
    let p = Packet::new_checked(bytes)?;
    let bytes = p.as_bytes();
    let off = message_authenticator_offset(bytes)?;
    let mut auth = [0u8; 16];
    auth.copy_from_slice(&bytes[4..20]);
    let ma = compute_ma(secret, bytes, &auth, off);
    if bool::from(ma.ct_eq(&bytes[off..off + 16])) {
        Ok(())
    } else {
        Err(Error::BadAuthenticator)
    }
}

/// The 18-octet placeholder a packet carries before signing.
pub fn placeholder() -> Vec<u8> {
    alloc::vec![0u8; 16]
}

#[cfg(test)]
mod tests {
    use super::super::packet::{code, Builder};
    use super::*;

    /// RFC 2865 §7.1's Access-Accept: the Response Authenticator of the example, computed
    /// from its request (secret "xyzzy5461").
    #[test]
    fn rfc2865_7_1_response_authenticator() {
        let req_auth: [u8; 16] = hex::decode("0f403f9473978057bd83d5cb98f4227a")
            .unwrap()
            .try_into()
            .unwrap();
        let accept =
            hex::decode("0200002686fe220e7624ba2a1005f6bf9b55e0b20606000000010f06000000000e06c0a80103").unwrap();
        let ra = response_authenticator(b"xyzzy5461", &accept, &req_auth);
        assert_eq!(&ra[..], &accept[4..20]);
        // It has no Message-Authenticator, so it is not a valid EAP answer.
        assert_eq!(
            verify_response(b"xyzzy5461", &req_auth, &accept).err(),
            Some(Error::BadAuthenticator)
        );
    }

    #[test]
    fn sign_and_verify() {
        let req_auth = [7u8; 16];
        let mut b = Builder::new(code::ACCESS_CHALLENGE, 3, &[0; 16]);
        b.attr(attr::EAP_MESSAGE, &[1, 2, 0, 4]).unwrap();
        b.attr(attr::MESSAGE_AUTHENTICATOR, &placeholder()).unwrap();
        let mut ans = b.finish();
        sign_response(b"s3cret", &req_auth, &mut ans).unwrap();
        assert!(verify_response(b"s3cret", &req_auth, &ans).is_ok());
        assert_eq!(
            verify_response(b"other", &req_auth, &ans).err(),
            Some(Error::BadAuthenticator)
        );
        assert_eq!(
            verify_response(b"s3cret", &[8; 16], &ans).err(),
            Some(Error::BadAuthenticator)
        );
        // Flip any bit of the packet: refused.
        for i in 0..ans.len() {
            let mut bad = ans.clone();
            bad[i] ^= 1;
            assert!(verify_response(b"s3cret", &req_auth, &bad).is_err(), "bit at {i}");
        }
        // The Message-Authenticator alone wrong (Response Authenticator recomputed): refused.
        let mut bad = ans.clone();
        let off = message_authenticator_offset(&bad).unwrap();
        bad[off] ^= 1;
        let ra = response_authenticator(b"s3cret", &bad, &req_auth);
        bad[4..20].copy_from_slice(&ra);
        assert_eq!(
            verify_response(b"s3cret", &req_auth, &bad).err(),
            Some(Error::BadAuthenticator)
        );
    }
}
