//! The pseudorandom functions and prf+ (RFC 7296 section 2.13): HMAC-SHA2-256/384/512
//! (RFC 4868), and HMAC-SHA1 (RFC 2104) when a configuration names the weak `prfsha1`.
use crate::alg::Prf;
use alloc::vec::Vec;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// Output of a PRF or prf+: key material, zeroized on drop.
pub type KeyBytes = Zeroizing<Vec<u8>>;

fn hmac<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[&[u8]]) -> KeyBytes {
    // HMAC takes keys of any length (RFC 2104 2).
    let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable_hmac());
    for d in data {
        m.update(d);
    }
    Zeroizing::new(m.finalize().into_bytes().to_vec())
}

#[cold]
fn unreachable_hmac() -> ! {
    // Hmac::new_from_slice accepts every key length; this is never reached.
    panic!("HMAC refused a key")
}

/// `prf(key, data[0] | data[1] | ...)`.
pub fn prf(alg: Prf, key: &[u8], data: &[&[u8]]) -> KeyBytes {
    match alg {
        Prf::HmacSha1 => hmac::<Hmac<Sha1>>(key, data),
        Prf::HmacSha256 => hmac::<Hmac<Sha256>>(key, data),
        Prf::HmacSha384 => hmac::<Hmac<Sha384>>(key, data),
        Prf::HmacSha512 => hmac::<Hmac<Sha512>>(key, data),
    }
}

/// Longest prf+ output: 255 iterations of the PRF (2.13: the counter is one octet).
pub fn prf_plus_max(alg: Prf) -> usize {
    255 * alg.output_len()
}

/// prf+(K, S) = T1 | T2 | ..., T1 = prf(K, S | 0x01), Tn = prf(K, Tn-1 | S | n), cut to
/// `len` bytes (2.13). `len` is capped by [`prf_plus_max`]; callers ask for fixed sizes.
pub fn prf_plus(alg: Prf, key: &[u8], seed: &[&[u8]], len: usize) -> KeyBytes {
    let len = len.min(prf_plus_max(alg));
    let mut out = Zeroizing::new(Vec::with_capacity(len + alg.output_len()));
    let mut t: KeyBytes = Zeroizing::new(Vec::new());
    let mut n: u8 = 1;
    while out.len() < len {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(seed.len() + 2);
        parts.push(&t);
        parts.extend_from_slice(seed);
        let c = [n];
        parts.push(&c);
        t = prf(alg, key, &parts);
        out.extend_from_slice(&t);
        n = n.wrapping_add(1);
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4231 test cases 1, 2 and 6 (HMAC-SHA-256/384/512).
    #[test]
    fn rfc4231_vectors() {
        let k1 = [0x0bu8; 20];
        let d1 = b"Hi There";
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha256, &k1, &[d1])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha384, &k1, &[d1])),
            "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6"
        );
        assert_eq!(hex::encode(&*prf(Prf::HmacSha512, &k1, &[d1])), "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854");
        // Case 2, data split in two to exercise concatenation.
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha256, b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Case 6: a 131-byte key (longer than the block, hashed first).
        let k6 = [0xaau8; 131];
        let d6 = b"Test Using Larger Than Block-Size Key - Hash Key First";
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha256, &k6, &[d6])),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        assert_eq!(hex::encode(&*prf(Prf::HmacSha512, &k6, &[d6])), "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598");
    }

    // RFC 2202 section 3, HMAC-SHA-1 test cases 1, 2, 3 and 6 (the PRF_HMAC_SHA1 of RFC 7296,
    // and the untruncated HMAC of AUTH_HMAC_SHA1_96, RFC 2404).
    #[test]
    fn rfc2202_hmac_sha1_vectors() {
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha1, &[0x0b; 20], &[b"Hi There"])),
            "b617318655057264e28bc0b6fb378c8ef146be00"
        );
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha1, b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        assert_eq!(
            hex::encode(&*prf(Prf::HmacSha1, &[0xaa; 20], &[&[0xdd; 50]])),
            "125d7342b9ac11cd91a39af48aa17b4f63f175d3"
        );
        assert_eq!(
            hex::encode(&*prf(
                Prf::HmacSha1,
                &[0xaa; 80],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            )),
            "aa4ae5e15272d00e95705637ce8a3b55ed402112"
        );
        assert_eq!(prf_plus(Prf::HmacSha1, b"k", &[b"s"], 45).len(), 45);
    }

    #[test]
    fn prf_plus_is_the_chain_of_2_13() {
        let k = b"key";
        let s = b"seed";
        let t1 = prf(Prf::HmacSha256, k, &[s, &[1]]);
        let t2 = prf(Prf::HmacSha256, k, &[&t1, s, &[2]]);
        let t3 = prf(Prf::HmacSha256, k, &[&t2, s, &[3]]);
        let out = prf_plus(Prf::HmacSha256, k, &[s], 80);
        assert_eq!(&out[..32], &t1[..]);
        assert_eq!(&out[32..64], &t2[..]);
        assert_eq!(&out[64..80], &t3[..16]);
    }
}
