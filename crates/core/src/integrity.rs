//! Keyed integrity (HMAC, RFC 2104) truncated as RFC 2403, RFC 2404 and RFC 4868 say.
//! The HMAC inner and outer states are computed once per SA; each packet clones them.

use crate::alg::IntegAlg;
use crate::error::Error;
use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq;

/// The largest untruncated digest (SHA-512).
pub const MAX_DIGEST: usize = 64;

#[derive(Clone)]
enum Keyed {
    Null,
    Md5(Hmac<md5::Md5>),
    Sha1(Hmac<sha1::Sha1>),
    Sha256(Hmac<sha2::Sha256>),
    Sha384(Hmac<sha2::Sha384>),
    Sha512(Hmac<sha2::Sha512>),
}

/// A keyed, truncated integrity algorithm.
#[derive(Clone)]
pub struct Integrity {
    alg: IntegAlg,
    keyed: Keyed,
    icv_len: usize,
}

impl core::fmt::Debug for Integrity {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Integrity")
            .field("alg", &self.alg)
            .field("icv_len", &self.icv_len)
            .finish()
    }
}

/// The HMAC states are as good as the key (RFC 2104: the hashed `K ^ ipad` and `K ^ opad`
/// blocks let anyone compute the MAC). `hmac` 0.12 and `digest` 0.10 have no `zeroize`
/// feature, and this crate forbids `unsafe`, so a dropped state cannot be wiped with
/// volatile writes: instead each state is overwritten in place with the state of an empty
/// key (a write of the whole value over the same memory) and the result passed through
/// `black_box`, so the compiler must assume it is read and cannot drop the writes. What this
/// does not reach: the copy of a state each packet's MAC works on, on the stack, which later
/// calls overwrite. The key bytes themselves are held in `Zeroizing` buffers (`sa::Key`).
impl Keyed {
    /// Overwrites the state in place with that of an empty key (see above).
    fn wipe(&mut self) {
        fn blank<M: Mac + hmac::digest::KeyInit>(m: &mut M) {
            if let Ok(empty) = <M as hmac::digest::KeyInit>::new_from_slice(&[]) {
                *m = empty;
            }
            core::hint::black_box(&*m);
        }
        match self {
            Keyed::Null => {}
            Keyed::Md5(m) => blank(m),
            Keyed::Sha1(m) => blank(m),
            Keyed::Sha256(m) => blank(m),
            Keyed::Sha384(m) => blank(m),
            Keyed::Sha512(m) => blank(m),
        }
    }
}

impl Drop for Keyed {
    fn drop(&mut self) {
        self.wipe();
    }
}

fn mac_parts<M: Mac + Clone>(m: &M, parts: &[&[u8]], out: &mut [u8; MAX_DIGEST]) -> usize {
    let mut m = m.clone();
    for p in parts {
        m.update(p);
    }
    let d = m.finalize().into_bytes();
    out[..d.len()].copy_from_slice(&d);
    d.len()
}

impl Integrity {
    /// Keys `alg` with `key` and truncates its output to `icv_len` bytes. The key length and
    /// the truncation are checked.
    pub fn new(alg: IntegAlg, key: &[u8], icv_len: usize) -> Result<Self, Error> {
        alg.check_key(key.len())?;
        alg.check_icv_bits(icv_len * 8)?;
        Self::new_unchecked_key(alg, key, icv_len)
    }

    /// Like [`Integrity::new`] but accepts any HMAC key length (RFC 2104 allows it). Used for
    /// test vectors; SAs use [`Integrity::new`].
    pub fn new_unchecked_key(alg: IntegAlg, key: &[u8], icv_len: usize) -> Result<Self, Error> {
        if icv_len > alg.digest_len() {
            return Err(Error::IcvLength {
                alg: alg.name(),
                bits: icv_len * 8,
            });
        }
        let bad = |_| Error::KeyLength {
            alg: alg.name(),
            expected: "valid",
            got: key.len(),
        };
        let keyed = match alg {
            IntegAlg::Null => Keyed::Null,
            IntegAlg::HmacMd5 => Keyed::Md5(Hmac::new_from_slice(key).map_err(bad)?),
            IntegAlg::HmacSha1 => Keyed::Sha1(Hmac::new_from_slice(key).map_err(bad)?),
            IntegAlg::HmacSha256 => Keyed::Sha256(Hmac::new_from_slice(key).map_err(bad)?),
            IntegAlg::HmacSha384 => Keyed::Sha384(Hmac::new_from_slice(key).map_err(bad)?),
            IntegAlg::HmacSha512 => Keyed::Sha512(Hmac::new_from_slice(key).map_err(bad)?),
        };
        Ok(Integrity { alg, keyed, icv_len })
    }

    /// The algorithm.
    pub fn alg(&self) -> IntegAlg {
        self.alg
    }
    /// ICV length in bytes (0 for `digest_null`).
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }

    /// Computes the full digest over the concatenation of `parts` into `out`, returning its
    /// length. No allocation: the parts are fed one after another.
    pub fn digest(&self, parts: &[&[u8]], out: &mut [u8; MAX_DIGEST]) -> usize {
        match &self.keyed {
            Keyed::Null => 0,
            Keyed::Md5(m) => mac_parts(m, parts, out),
            Keyed::Sha1(m) => mac_parts(m, parts, out),
            Keyed::Sha256(m) => mac_parts(m, parts, out),
            Keyed::Sha384(m) => mac_parts(m, parts, out),
            Keyed::Sha512(m) => mac_parts(m, parts, out),
        }
    }

    /// Writes the truncated ICV over `parts` to `icv` (which must be `icv_len` bytes).
    pub fn compute(&self, parts: &[&[u8]], icv: &mut [u8]) -> Result<(), Error> {
        if icv.len() != self.icv_len {
            return Err(Error::NoTailroom);
        }
        let mut d = [0u8; MAX_DIGEST];
        self.digest(parts, &mut d);
        icv.copy_from_slice(&d[..self.icv_len]);
        Ok(())
    }

    /// Checks `icv` against the ICV over `parts`, in constant time.
    pub fn verify(&self, parts: &[&[u8]], icv: &[u8]) -> Result<(), Error> {
        if icv.len() != self.icv_len {
            return Err(Error::BadIcv);
        }
        let mut d = [0u8; MAX_DIGEST];
        self.digest(parts, &mut d);
        if bool::from(d[..self.icv_len].ct_eq(icv)) {
            Ok(())
        } else {
            Err(Error::BadIcv)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use hex::decode as h;

    fn check(alg: IntegAlg, key: &[u8], data: &[u8], want_hex: &str) {
        let want = h(want_hex).unwrap();
        let i = Integrity::new_unchecked_key(alg, key, want.len()).unwrap();
        let mut icv = vec![0u8; want.len()];
        // Split the data in two to check that parts are concatenated.
        let (a, b) = data.split_at(data.len() / 2);
        i.compute(&[a, b], &mut icv).unwrap();
        assert_eq!(hex::encode(&icv), want_hex, "{alg:?} key {}", hex::encode(key));
        i.verify(&[data], &want).unwrap();
        let mut bad = want.clone();
        *bad.last_mut().unwrap() ^= 0x80;
        assert_eq!(i.verify(&[data], &bad), Err(Error::BadIcv));
    }

    /// RFC 2202 section 2: HMAC-MD5 test cases 1-7, including case 5's 96-bit truncation.
    #[test]
    fn rfc2202_hmac_md5() {
        let md5 = IntegAlg::HmacMd5;
        check(md5, &[0x0b; 16], b"Hi There", "9294727a3638bb1c13f48ef8158bfc9d");
        check(
            md5,
            b"Jefe",
            b"what do ya want for nothing?",
            "750c783e6ab0b503eaa86e310a5db738",
        );
        check(md5, &[0xaa; 16], &[0xdd; 50], "56be34521d144c88dbb8c733f0e8b3f6");
        let k4 = h("0102030405060708090a0b0c0d0e0f10111213141516171819").unwrap();
        check(md5, &k4, &[0xcd; 50], "697eaf0aca3a3aea3a75164746ffaa79");
        check(md5, &[0x0c; 16], b"Test With Truncation", "56461ef2342edc00f9bab995");
        check(
            md5,
            &[0xaa; 80],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "6b1ab7fe4bd7bf8f0b62e6ce61b9d0cd",
        );
        check(
            md5,
            &[0xaa; 80],
            b"Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data",
            "6f630fad67cda0ee1fb1f562db3aa53e",
        );
    }

    /// RFC 2202 section 3: HMAC-SHA-1 test cases 1-7, including case 5's 96-bit truncation.
    #[test]
    fn rfc2202_hmac_sha1() {
        let s = IntegAlg::HmacSha1;
        check(s, &[0x0b; 20], b"Hi There", "b617318655057264e28bc0b6fb378c8ef146be00");
        check(
            s,
            b"Jefe",
            b"what do ya want for nothing?",
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
        );
        check(s, &[0xaa; 20], &[0xdd; 50], "125d7342b9ac11cd91a39af48aa17b4f63f175d3");
        let k4 = h("0102030405060708090a0b0c0d0e0f10111213141516171819").unwrap();
        check(s, &k4, &[0xcd; 50], "4c9007f4026250c6bc8414f9bf50c86c2d7235da");
        check(s, &[0x0c; 20], b"Test With Truncation", "4c1a03424b55e07fe7f27be1");
        check(
            s,
            &[0xaa; 80],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "aa4ae5e15272d00e95705637ce8a3b55ed402112",
        );
        check(
            s,
            &[0xaa; 80],
            b"Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data",
            "e8e99d0f45237d786d6bbaa7965c7808bbff1a91",
        );
    }

    /// RFC 4231 section 4: HMAC-SHA-256/384/512 test cases 1-4, 5 (truncated to 128 bits),
    /// 6 and 7.
    #[test]
    fn rfc4231() {
        use IntegAlg::{HmacSha256 as S256, HmacSha384 as S384, HmacSha512 as S512};
        let k1 = [0x0b; 20];
        let d1 = b"Hi There";
        check(
            S256,
            &k1,
            d1,
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        );
        check(
            S384,
            &k1,
            d1,
            "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6",
        );
        check(S512, &k1, d1, "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854");
        let (k2, d2) = (b"Jefe", b"what do ya want for nothing?");
        check(
            S256,
            k2,
            d2,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        );
        check(
            S384,
            k2,
            d2,
            "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649",
        );
        check(S512, k2, d2, "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737");
        let (k3, d3) = ([0xaa; 20], [0xdd; 50]);
        check(
            S256,
            &k3,
            &d3,
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        );
        check(
            S384,
            &k3,
            &d3,
            "88062608d3e6ad8a0aa2ace014c8a86f0aa635d947ac9febe83ef4e55966144b2a5ab39dc13814b94e3ab6e101a34f27",
        );
        check(S512, &k3, &d3, "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39bf3e848279a722c806b485a47e67c807b946a337bee8942674278859e13292fb");
        let k4 = h("0102030405060708090a0b0c0d0e0f10111213141516171819").unwrap();
        let d4 = [0xcd; 50];
        check(
            S256,
            &k4,
            &d4,
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        );
        check(
            S384,
            &k4,
            &d4,
            "3e8a69b7783c25851933ab6290af6ca77a9981480850009cc5577c6e1f573b4e6801dd23c4a7d679ccf8a386c674cffb",
        );
        check(S512, &k4, &d4, "b0ba465637458c6990e5a8c5f61d4af7e576d97ff94b872de76f8050361ee3dba91ca5c11aa25eb4d679275cc5788063a5f19741120c4f2de2adebeb10a298dd");
        // Test case 5: truncation to 128 bits.
        let (k5, d5) = ([0x0c; 20], b"Test With Truncation");
        check(S256, &k5, d5, "a3b6167473100ee06e0c796c2955552b");
        check(S384, &k5, d5, "3abf34c3503b2a23a46efc619baef897");
        check(S512, &k5, d5, "415fad6271580a531d4179bc891d87a6");
        let k6 = [0xaa; 131];
        let d6 = b"Test Using Larger Than Block-Size Key - Hash Key First";
        check(
            S256,
            &k6,
            d6,
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        );
        check(
            S384,
            &k6,
            d6,
            "4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f44952",
        );
        check(S512, &k6, d6, "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598");
        let d7: Vec<u8> = b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec();
        check(
            S256,
            &k6,
            &d7,
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        );
        check(
            S384,
            &k6,
            &d7,
            "6617178e941f020d351e2f254e8fd32c602420feb0b8fb9adccebb82461e99c5a678cc31e799176d3860e6110c46523e",
        );
        check(S512, &k6, &d7, "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58");
    }

    #[test]
    fn ipsec_truncations_and_key_checks() {
        // RFC 2404's HMAC-SHA1-96 is the first 96 bits of RFC 2202 case 2 when keyed properly.
        let i = Integrity::new(IntegAlg::HmacSha1, &[0x0b; 20], 12).unwrap();
        let mut icv = [0u8; 12];
        i.compute(&[b"Hi There"], &mut icv).unwrap();
        assert_eq!(hex::encode(icv), "b617318655057264e28bc0b6");
        assert!(Integrity::new(IntegAlg::HmacSha1, &[0; 16], 12).is_err());
        assert!(Integrity::new(IntegAlg::HmacSha256, &[0; 32], 12).is_ok());
        assert!(Integrity::new(IntegAlg::HmacMd5, &[0; 16], 20).is_err());
    }

    /// The wipe on drop replaces a state with the state of an empty key: after it, the MAC
    /// is HMAC with an empty key (RFC 2104 pads the key with zeros, so HMAC-SHA-256 of "" with
    /// an empty key is the known value below), not the keyed one.
    #[test]
    fn drop_overwrites_the_keyed_state() {
        let mut k = Keyed::Sha256(Hmac::new_from_slice(&[0x0b; 20]).unwrap());
        let mut before = [0u8; MAX_DIGEST];
        if let Keyed::Sha256(m) = &k {
            mac_parts(m, &[b""], &mut before);
        }
        // Run what Drop runs, then look at the state it left.
        k.wipe();
        let mut after = [0u8; MAX_DIGEST];
        if let Keyed::Sha256(m) = &k {
            mac_parts(m, &[b""], &mut after);
        }
        assert_ne!(before[..32], after[..32]);
        // HMAC-SHA256(key = "", msg = ""), as computed by Python's hmac module and OpenSSL.
        assert_eq!(
            hex::encode(&after[..32]),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"
        );
    }
}
