//! MPPE master keys from MS-CHAP-2 (RFC 3079 §3.4), which EAP-MSCHAPv2 exports as its MSK.

use crate::ms_chap::NtHash;
use crate::Msk;
use sha1::{Digest, Sha1};
use zeroize::Zeroizing;

const MAGIC1: &[u8; 27] = b"This is the MPPE Master Key";
const MAGIC2: &[u8; 84] = b"On the client side, this is the send key; on the server side, it is the receive key.";
const MAGIC3: &[u8; 84] = b"On the client side, this is the receive key; on the server side, it is the send key.";
const SHS_PAD1: [u8; 40] = [0; 40];
const SHS_PAD2: [u8; 40] = [0xf2; 40];

/// The first 16 octets of a SHA-1, the full digest zeroized after.
fn first16(sha: Sha1) -> Zeroizing<[u8; 16]> {
    let mut d = Zeroizing::new([0u8; 20]);
    sha.finalize_into(sha1::digest::generic_array::GenericArray::from_mut_slice(&mut d[..]));
    let mut out = Zeroizing::new([0u8; 16]);
    out.copy_from_slice(&d[..16]);
    out
}

/// GetMasterKey (RFC 3079 §3.4): the first 16 octets of
/// SHA1(PasswordHashHash | NTResponse | Magic1).
pub fn master_key(hash: &NtHash, nt_response: &[u8; 24]) -> Zeroizing<[u8; 16]> {
    let hh = hash.hash_hash();
    let mut sha = Sha1::new();
    sha.update(&hh[..]);
    sha.update(nt_response);
    sha.update(MAGIC1);
    first16(sha)
}

/// GetAsymmetricStartKey (RFC 3079 §3.4) for a 16-octet (128-bit) key.
pub fn asymmetric_start_key(master: &[u8; 16], is_send: bool, is_server: bool) -> Zeroizing<[u8; 16]> {
    // Magic2 for the client's send key and the server's receive key, Magic3 otherwise.
    let magic = if is_send == is_server { MAGIC3 } else { MAGIC2 };
    let mut sha = Sha1::new();
    sha.update(master);
    sha.update(SHS_PAD1);
    sha.update(magic);
    sha.update(SHS_PAD2);
    first16(sha)
}

/// GetNewKeyFromSHA (RFC 3079 §3.3): the first session key from a start key (§3.5
/// vectors).
pub fn new_key_from_sha(start_key: &[u8; 16], session_key: &[u8; 16]) -> Zeroizing<[u8; 16]> {
    let mut sha = Sha1::new();
    sha.update(start_key);
    sha.update(SHS_PAD1);
    sha.update(session_key);
    sha.update(SHS_PAD2);
    first16(sha)
}

/// The EAP-MSCHAPv2 MSK as IKEv2 implementations build it (strongSwan's eap_mschapv2, the
/// same on both ends): the server's MasterReceiveKey | MasterSendKey | 32 zero octets,
/// i.e. the MS-MPPE-Recv-Key | MS-MPPE-Send-Key a RADIUS server sends (RFC 2548).
pub fn msk(hash: &NtHash, nt_response: &[u8; 24]) -> Msk {
    let mk = master_key(hash, nt_response);
    let recv = asymmetric_start_key(&mk, false, true);
    let send = asymmetric_start_key(&mk, true, true);
    Msk::from_recv_send(&recv[..], &send[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h16(s: &str) -> [u8; 16] {
        hex::decode(s.replace(' ', "")).unwrap().try_into().unwrap()
    }

    /// RFC 3079 §3.5.3 (128-bit keys), from the RFC 2759 §9.2 inputs.
    #[test]
    fn rfc3079_section_3_5_3() {
        let hash = NtHash::from_password("clientPass").unwrap();
        let nt: [u8; 24] = hex::decode("82309ECD8D708B5EA08FAA3981CD83544233114A3D85D6DF")
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(
            *hash.hash_hash(),
            h16("41 C0 0C 58 4B D2 D9 1C 40 17 A2 A1 2F A5 9F 3F")
        );
        let mk = master_key(&hash, &nt);
        assert_eq!(*mk, h16("FD EC E3 71 7A 8C 83 8C B3 88 E5 27 AE 3C DD 31"));
        // The RFC's SendStartKey128 is the server's send key (Magic3) ...
        let send = asymmetric_start_key(&mk, true, true);
        assert_eq!(*send, h16("8B 7C DC 14 9B 99 3A 1B A1 18 CB 15 3F 56 DC CB"));
        // ... which is the client's receive key.
        assert_eq!(*asymmetric_start_key(&mk, false, false), *send);
        assert_eq!(
            *asymmetric_start_key(&mk, true, false),
            *asymmetric_start_key(&mk, false, true)
        );
        assert_ne!(*asymmetric_start_key(&mk, false, true), *send);
        let session = new_key_from_sha(&send, &send);
        assert_eq!(*session, h16("40 5C B2 24 7A 79 56 E6 E2 11 00 7A E2 7B 22 D4"));

        let m = msk(&hash, &nt);
        assert_eq!(m.as_bytes().len(), 64);
        assert_eq!(&m.as_bytes()[..16], &asymmetric_start_key(&mk, false, true)[..]);
        assert_eq!(&m.as_bytes()[16..32], &send[..]);
        assert!(m.as_bytes()[32..].iter().all(|&b| b == 0));
    }
}
