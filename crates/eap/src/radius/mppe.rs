//! MS-MPPE-Send-Key and MS-MPPE-Recv-Key (RFC 2548 §2.4.2, §2.4.3): Microsoft
//! Vendor-Specific attributes whose key is hidden with the shared secret and the Request
//! Authenticator; decrypted here into the MSK.

use super::packet::{attr, Repr};
use crate::Error;
use alloc::vec::Vec;
use md5::{Digest, Md5};
use zeroize::Zeroizing;

/// Microsoft's SMI Network Management Private Enterprise Code.
pub const VENDOR_MICROSOFT: u32 = 311;
pub const MS_MPPE_SEND_KEY: u8 = 16;
pub const MS_MPPE_RECV_KEY: u8 = 17;

fn keystream_block(secret: &[u8], prev: &[u8]) -> [u8; 16] {
    let mut md5 = Md5::new();
    md5.update(secret);
    md5.update(prev);
    let mut b = [0u8; 16];
    b.copy_from_slice(&md5.finalize());
    b
}

/// Decrypts a key attribute's value (Salt (2) | String): b(1) = MD5(S | R | A),
/// c(i) = p(i) xor b(i), b(i) = MD5(S | c(i-1)); the plaintext is Key-Length | Key |
/// padding (RFC 2548 §2.4.2).
pub fn decrypt(secret: &[u8], request_auth: &[u8; 16], value: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
    if value.len() < 2 + 16 || !(value.len() - 2).is_multiple_of(16) {
        return Err(Error::Malformed("MPPE key length"));
    }
    let (salt, cipher) = value.split_at(2);
    if salt[0] & 0x80 == 0 {
        return Err(Error::Malformed("MPPE salt without its high bit"));
    }
    let mut plain = Zeroizing::new(Vec::with_capacity(cipher.len()));
    let mut first = [0u8; 18];
    first[..16].copy_from_slice(request_auth);
    first[16..].copy_from_slice(salt);
    let mut prev: &[u8] = &first;
    for c in cipher.chunks(16) {
        let b = Zeroizing::new(keystream_block(secret, prev));
        plain.extend(c.iter().zip(b.iter()).map(|(x, y)| x ^ y));
        prev = c;
    }
    let klen = usize::from(plain[0]);
    if klen == 0 || klen > plain.len() - 1 {
        return Err(Error::Malformed("MPPE Key-Length"));
    }
    Ok(Zeroizing::new(plain[1..1 + klen].to_vec()))
}

/// Hides `key` as a server does (for tests and the fuzz seeds).
pub fn encrypt(secret: &[u8], request_auth: &[u8; 16], salt: [u8; 2], key: &[u8]) -> Vec<u8> {
    let mut plain = alloc::vec![key.len() as u8];
    plain.extend_from_slice(key);
    while !plain.len().is_multiple_of(16) {
        plain.push(0);
    }
    let mut out = Vec::from(salt);
    let mut first = [0u8; 18];
    first[..16].copy_from_slice(request_auth);
    first[16..].copy_from_slice(&salt);
    let mut prev: Vec<u8> = first.to_vec();
    for p in plain.chunks(16) {
        let b = keystream_block(secret, &prev);
        let c: Vec<u8> = p.iter().zip(b.iter()).map(|(x, y)| x ^ y).collect();
        out.extend_from_slice(&c);
        prev = c;
    }
    out
}

/// A Microsoft Vendor-Specific attribute value carrying one sub-attribute.
pub fn vendor_specific(vendor_type: u8, value: &[u8]) -> Vec<u8> {
    let mut v = VENDOR_MICROSOFT.to_be_bytes().to_vec();
    v.push(vendor_type);
    v.push((value.len() + 2) as u8);
    v.extend_from_slice(value);
    v
}

/// The (Recv, Send) keys of an Access-Accept, decrypted; `None` where absent.
#[allow(clippy::type_complexity)]
pub fn keys(
    repr: &Repr<'_>,
    secret: &[u8],
    request_auth: &[u8; 16],
) -> Result<(Option<Zeroizing<Vec<u8>>>, Option<Zeroizing<Vec<u8>>>), Error> {
    let (mut recv, mut send) = (None, None);
    for (t, v) in repr.iter() {
        if t != attr::VENDOR_SPECIFIC || v.len() < 4 {
            continue;
        }
        if u32::from_be_bytes([v[0], v[1], v[2], v[3]]) != VENDOR_MICROSOFT {
            continue;
        }
        let mut rest = &v[4..];
        while rest.len() >= 2 {
            let (vt, vl) = (rest[0], usize::from(rest[1]));
            if vl < 2 || vl > rest.len() {
                return Err(Error::Malformed("Microsoft vendor attribute length"));
            }
            let val = &rest[2..vl];
            match vt {
                MS_MPPE_RECV_KEY => recv = Some(decrypt(secret, request_auth, val)?),
                MS_MPPE_SEND_KEY => send = Some(decrypt(secret, request_auth, val)?),
                _ => {}
            }
            rest = &rest[vl..];
        }
    }
    Ok((recv, send))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let ra = [0x5a; 16];
        for key_len in [16usize, 32] {
            let key: Vec<u8> = (0..key_len as u8).collect();
            let c = encrypt(b"secret", &ra, [0x80, 0x01], &key);
            assert_eq!(c.len(), 2 + if key_len == 16 { 32 } else { 48 });
            assert_eq!(&decrypt(b"secret", &ra, &c).unwrap()[..], &key[..]);
            // With the wrong secret the Key-Length is garbage or the key differs.
            assert!(decrypt(b"secreT", &ra, &c).map(|k| k[..] != key[..]).unwrap_or(true));
        }
        assert!(decrypt(b"s", &ra, &[0x80, 1, 2]).is_err());
        assert!(decrypt(b"s", &ra, &[0x00; 18]).is_err()); // salt high bit clear
    }
}
