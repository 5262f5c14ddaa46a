//! The MS-CHAP-V2 algorithms of RFC 2759 §8 (NT-Response, authenticator response) that
//! EAP-MSCHAPv2 runs.

use crate::Error;
use core::fmt;
use des::cipher::{BlockEncrypt, KeyInit};
use md4::{Digest, Md4};
use sha1::Sha1;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// RFC 2759 §4: the maximum password length in Unicode characters.
pub const MAX_PASSWORD_CHARS: usize = 256;

/// NtPasswordHash (RFC 2759 §8.3): MD4 of the UTF-16LE password. What the credentials
/// source stores or derives; zeroized on drop, never printed.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct NtHash(pub(crate) [u8; 16]);

impl NtHash {
    /// NtPasswordHash(Password) of RFC 2759 §8.3 (the password as UTF-16LE, at most 256
    /// characters).
    pub fn from_password(password: &str) -> Result<NtHash, Error> {
        let mut md4 = Md4::new();
        let mut n = 0usize;
        for unit in password.encode_utf16() {
            n += 1;
            if n > MAX_PASSWORD_CHARS {
                return Err(Error::Malformed("password longer than 256 characters"));
            }
            md4.update(unit.to_le_bytes());
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&md4.finalize());
        Ok(NtHash(out))
    }

    /// A stored NT hash (16 octets, as in strongSwan's `NTLM` secrets).
    pub fn from_bytes(hash: [u8; 16]) -> NtHash {
        NtHash(hash)
    }

    /// HashNtPasswordHash (RFC 2759 §8.4): MD4 of the hash.
    pub fn hash_hash(&self) -> Zeroizing<[u8; 16]> {
        let mut out = Zeroizing::new([0u8; 16]);
        out.copy_from_slice(&Md4::digest(self.0));
        out
    }

    /// The hash bytes (tests and the credentials plumbing only).
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Debug for NtHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NtHash(..)")
    }
}

/// The user name part of an identity for ChallengeHash: RFC 2759 §8.2 hashes "only the
/// user name ... excluding any prepended domain name" (`DOMAIN\user` -> `user`).
pub fn user_name_without_domain(identity: &[u8]) -> &[u8] {
    match identity.iter().rposition(|&b| b == b'\\') {
        Some(i) => &identity[i + 1..],
        None => identity,
    }
}

/// ChallengeHash (RFC 2759 §8.2): the first 8 octets of
/// SHA1(PeerChallenge | AuthenticatorChallenge | UserName).
pub fn challenge_hash(peer_challenge: &[u8; 16], auth_challenge: &[u8; 16], user_name: &[u8]) -> [u8; 8] {
    let mut sha = Sha1::new();
    sha.update(peer_challenge);
    sha.update(auth_challenge);
    sha.update(user_name_without_domain(user_name));
    let d = sha.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// The 7-octet to 8-octet DES key expansion of RFC 2759 §8.6 (the parity bits are set
/// to odd parity; DES ignores them).
fn des_key(k7: &[u8]) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[0] = k7[0];
    k[1] = (k7[0] << 7) | (k7[1] >> 1);
    k[2] = (k7[1] << 6) | (k7[2] >> 2);
    k[3] = (k7[2] << 5) | (k7[3] >> 3);
    k[4] = (k7[3] << 4) | (k7[4] >> 4);
    k[5] = (k7[4] << 3) | (k7[5] >> 5);
    k[6] = (k7[5] << 2) | (k7[6] >> 6);
    k[7] = k7[6] << 1;
    for b in &mut k {
        let ones = (*b >> 1).count_ones();
        *b = (*b & 0xfe) | u8::from(ones % 2 == 0);
    }
    k
}

/// ChallengeResponse (RFC 2759 §8.5): the password hash zero-padded to 21 octets, split in
/// three DES keys, each encrypting the 8-octet challenge.
pub fn challenge_response(challenge: &[u8; 8], hash: &NtHash) -> [u8; 24] {
    let mut z = Zeroizing::new([0u8; 21]);
    z[..16].copy_from_slice(&hash.0);
    let mut out = [0u8; 24];
    for i in 0..3 {
        let mut key = Zeroizing::new(des_key(&z[i * 7..i * 7 + 7]));
        let cipher = des::Des::new_from_slice(&key[..]).expect("8-octet DES key");
        key.zeroize();
        let mut block = des::cipher::Block::<des::Des>::clone_from_slice(challenge);
        cipher.encrypt_block(&mut block);
        out[i * 8..i * 8 + 8].copy_from_slice(&block);
    }
    out
}

/// GenerateNTResponse (RFC 2759 §8.1).
pub fn generate_nt_response(
    auth_challenge: &[u8; 16],
    peer_challenge: &[u8; 16],
    user_name: &[u8],
    hash: &NtHash,
) -> [u8; 24] {
    let ch = challenge_hash(peer_challenge, auth_challenge, user_name);
    challenge_response(&ch, hash)
}

const MAGIC1: &[u8; 39] = b"Magic server to client signing constant";
const MAGIC2: &[u8; 41] = b"Pad to make it do more than one iteration";

/// GenerateAuthenticatorResponse (RFC 2759 §8.7): the 20 octets the server proves it knew
/// the password with (sent as "S=" and 40 upper-case hex digits).
pub fn authenticator_response(
    hash: &NtHash,
    nt_response: &[u8; 24],
    peer_challenge: &[u8; 16],
    auth_challenge: &[u8; 16],
    user_name: &[u8],
) -> [u8; 20] {
    let hh = hash.hash_hash();
    let mut sha = Sha1::new();
    sha.update(&hh[..]);
    sha.update(nt_response);
    sha.update(MAGIC1);
    let digest = sha.finalize();
    let ch = challenge_hash(peer_challenge, auth_challenge, user_name);
    let mut sha = Sha1::new();
    sha.update(digest);
    sha.update(ch);
    sha.update(MAGIC2);
    let mut out = [0u8; 20];
    out.copy_from_slice(&sha.finalize());
    out
}

/// "S=" and 40 upper-case hex digits (RFC 2759 §8.7).
pub fn format_authenticator_response(auth: &[u8; 20]) -> [u8; 42] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = [0u8; 42];
    s[0] = b'S';
    s[1] = b'=';
    for (i, b) in auth.iter().enumerate() {
        s[2 + 2 * i] = HEX[usize::from(b >> 4)];
        s[3 + 2 * i] = HEX[usize::from(b & 15)];
    }
    s
}

/// Reads `S=<40 hex digits>` (either case) back into 20 octets.
pub fn parse_authenticator_response(s: &[u8]) -> Result<[u8; 20], Error> {
    let hex = s
        .strip_prefix(b"S=")
        .ok_or(Error::Malformed("no S= in the success message"))?;
    let hex = hex.get(..40).ok_or(Error::Malformed("short S= value"))?;
    let nib = |c: u8| -> Result<u8, Error> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(Error::Malformed("S= value is not hex")),
        }
    };
    let mut out = [0u8; 20];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nib(hex[2 * i])? << 4) | nib(hex[2 * i + 1])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<const N: usize>(s: &str) -> [u8; N] {
        let v = hex::decode(s.replace(' ', "")).unwrap();
        v.try_into().unwrap()
    }

    // RFC 2759 §9.2, every intermediate value.
    const AUTH_CHALLENGE: &str = "5B 5D 7C 7D 7B 3F 2F 3E 3C 2C 60 21 32 26 26 28";
    const PEER_CHALLENGE: &str = "21 40 23 24 25 5E 26 2A 28 29 5F 2B 3A 33 7C 7E";

    #[test]
    fn rfc2759_section_9_2() {
        let user = b"User";
        let hash = NtHash::from_password("clientPass").unwrap();
        assert_eq!(hash.0, h::<16>("44 EB BA 8D 53 12 B8 D6 11 47 44 11 F5 69 89 AE"));
        assert_eq!(
            *hash.hash_hash(),
            h::<16>("41 C0 0C 58 4B D2 D9 1C 40 17 A2 A1 2F A5 9F 3F")
        );
        let ac = h::<16>(AUTH_CHALLENGE);
        let pc = h::<16>(PEER_CHALLENGE);
        let ch = challenge_hash(&pc, &ac, user);
        assert_eq!(ch, h::<8>("D0 2E 43 86 BC E9 12 26"));
        let nt = generate_nt_response(&ac, &pc, user, &hash);
        assert_eq!(
            nt,
            h::<24>("82 30 9E CD 8D 70 8B 5E A0 8F AA 39 81 CD 83 54 42 33 11 4A 3D 85 D6 DF")
        );
        let auth = authenticator_response(&hash, &nt, &pc, &ac, user);
        assert_eq!(
            &format_authenticator_response(&auth),
            b"S=407A5589115FD0D6209F510FE9C04566932CDA56"
        );
        assert_eq!(
            parse_authenticator_response(b"S=407a5589115fd0d6209f510fe9c04566932cda56").unwrap(),
            auth
        );
    }

    #[test]
    fn domain_is_left_out_of_the_challenge_hash() {
        let ac = h::<16>(AUTH_CHALLENGE);
        let pc = h::<16>(PEER_CHALLENGE);
        assert_eq!(
            challenge_hash(&pc, &ac, b"CORP\\User"),
            challenge_hash(&pc, &ac, b"User")
        );
        assert_ne!(challenge_hash(&pc, &ac, b"user"), challenge_hash(&pc, &ac, b"User"));
    }

    #[test]
    fn bad_authenticator_strings() {
        assert!(parse_authenticator_response(b"S=407A").is_err());
        assert!(parse_authenticator_response(b"X=407A5589115FD0D6209F510FE9C04566932CDA56").is_err());
        assert!(parse_authenticator_response(b"S=407A5589115FD0D6209F510FE9C04566932CDAZZ").is_err());
        let long: alloc::string::String = core::iter::repeat_n('a', 257).collect();
        assert!(NtHash::from_password(&long).is_err());
    }
}
