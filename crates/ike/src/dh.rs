//! Key exchange (RFC 7296 sections 1.2, 2.14, 3.4): Curve25519 (RFC 8031), ECP-256 and
//! ECP-384 (RFC 5903), the 2048-bit MODP group 14 (RFC 3526) and, when a configuration
//! names it, the weak 1024-bit MODP group 2 (RFC 2409 6.2), all on RustCrypto crates
//! (x25519-dalek, p256, p384, crypto-bigint): no curve or bignum arithmetic here; and
//! ML-KEM-512/768/1024 ([`crate::kem`], draft-ietf-ipsecme-ikev2-mlkem), a KEM: the
//! initiator's [`KeyExchange`] holds the decapsulation key and sends the encapsulation key,
//! the responder answers with [`KeyExchange::respond`] (a ciphertext, not a public value).
use crate::alg::DhGroup;
use crate::error::Error;
use crate::prf::KeyBytes;
use alloc::vec::Vec;
use crypto_bigint::modular::runtime_mod::{DynResidue, DynResidueParams};
use crypto_bigint::{Encoding, Uint, U1024, U2048, U512};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use rand_core::CryptoRngCore;
use zeroize::{Zeroize, Zeroizing};

/// RFC 3526 section 3: the 2048-bit MODP prime, generator 2.
pub const MODP2048_PRIME_HEX: &str = concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
);

/// RFC 2409 section 6.2: the 1024-bit MODP prime of group 2, generator 2,
/// 2^1024 - 2^960 - 1 + 2^64 * { [2^894 pi] + 129093 }.
pub const MODP1024_PRIME_HEX: &str = concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF",
);

fn modp_prime() -> U2048 {
    U2048::from_be_hex(MODP2048_PRIME_HEX)
}

/// `base`^`exp` mod `p`, the base being the generator 2 (a public value) or the peer's
/// public value y, which must be 1 < y < p-1 (RFC 6989 2.1).
fn modp_pow<const L: usize>(p: &Uint<L>, base: Option<Uint<L>>, exp: &U512) -> Result<Uint<L>, Error> {
    let y = match base {
        None => Uint::<L>::from_u8(2),
        Some(y) => {
            if y <= Uint::<L>::ONE || y >= p.wrapping_sub(&Uint::<L>::ONE) {
                return Err(Error::BadKeyExchange);
            }
            y
        }
    };
    let params = DynResidueParams::new(p);
    Ok(DynResidue::new(&y, params).pow(exp).retrieve())
}

/// g^e or y^e in the MODP group `group`, big-endian, as long as the prime (RFC 7296 3.4).
fn modp_exp(group: DhGroup, peer: Option<&[u8]>, e: &[u8; 64]) -> Result<Zeroizing<Vec<u8>>, Error> {
    let exp = U512::from_be_slice(&e[..]);
    Ok(Zeroizing::new(if group == DhGroup::Modp1024 {
        let mut r = modp_pow(
            &U1024::from_be_hex(MODP1024_PRIME_HEX),
            peer.map(U1024::from_be_slice),
            &exp,
        )?;
        let out = r.to_be_bytes().to_vec();
        r.zeroize();
        out
    } else {
        let mut r = modp_pow(&modp_prime(), peer.map(U2048::from_be_slice), &exp)?;
        let out = r.to_be_bytes().to_vec();
        r.zeroize();
        out
    }))
}

/// Our half of a key exchange: the private value (zeroized on drop) and the public value
/// sent in the KE payload.
pub struct KeyExchange {
    group: DhGroup,
    secret: Secret,
    public: Vec<u8>,
}

enum Secret {
    X25519(x25519_dalek::StaticSecret),
    P256(p256::SecretKey),
    P384(p384::SecretKey),
    /// A 512-bit private exponent (RFC 3526 8 asks for at least twice the ~110-bit
    /// strength of the group).
    Modp(Zeroizing<[u8; 64]>),
    /// ML-KEM: the initiator's decapsulation key.
    MlKem(crate::kem::Decapsulator),
}

impl core::fmt::Debug for KeyExchange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KeyExchange({:?})", self.group)
    }
}

impl KeyExchange {
    /// A fresh private value from `rng`.
    pub fn generate(group: DhGroup, rng: &mut impl CryptoRngCore) -> Self {
        let mut seed = Zeroizing::new([0u8; 64]);
        rng.fill_bytes(&mut seed[..]);
        let r = match group {
            DhGroup::Curve25519 => {
                let mut k = [0u8; 32];
                k.copy_from_slice(&seed[..32]);
                let r = Self::from_private(group, &k);
                k.zeroize();
                r
            }
            DhGroup::Ecp256 => Ok(Self::from_secret(group, Secret::P256(p256::SecretKey::random(rng)))),
            DhGroup::Ecp384 => Ok(Self::from_secret(group, Secret::P384(p384::SecretKey::random(rng)))),
            DhGroup::Modp2048 | DhGroup::Modp1024 => Self::from_private(group, &seed[..]),
            DhGroup::MlKem512 | DhGroup::MlKem768 | DhGroup::MlKem1024 => Self::from_private(group, &seed[..]),
        };
        // Every group accepts these private values (random scalars are drawn by the curve
        // crates, x25519 clamps any 32 bytes, any 64 bytes are an exponent).
        r.unwrap_or_else(|_| Self::from_secret(group, Secret::P256(p256::SecretKey::random(rng))))
    }

    /// From a known private value (for test vectors): 32 bytes for Curve25519, the scalar
    /// for ECP (32 or 48 bytes), up to 64 bytes of exponent for MODP, the 64-byte seed
    /// d | z for ML-KEM (FIPS 203 7.1).
    pub fn from_private(group: DhGroup, private: &[u8]) -> Result<Self, Error> {
        let s = match group {
            DhGroup::Curve25519 => {
                let k: [u8; 32] = private.try_into().map_err(|_| Error::BadKeyExchange)?;
                Secret::X25519(x25519_dalek::StaticSecret::from(k))
            }
            DhGroup::Ecp256 => Secret::P256(p256::SecretKey::from_slice(private).map_err(|_| Error::BadKeyExchange)?),
            DhGroup::Ecp384 => Secret::P384(p384::SecretKey::from_slice(private).map_err(|_| Error::BadKeyExchange)?),
            DhGroup::Modp2048 | DhGroup::Modp1024 => {
                if private.len() > 64 {
                    return Err(Error::BadKeyExchange);
                }
                let mut e = Zeroizing::new([0u8; 64]);
                e[64 - private.len()..].copy_from_slice(private);
                Secret::Modp(e)
            }
            DhGroup::MlKem512 | DhGroup::MlKem768 | DhGroup::MlKem1024 => {
                let seed: &[u8; crate::kem::KEYGEN_SEED_LEN] = private.try_into().map_err(|_| Error::BadKeyExchange)?;
                let set = group.kem().ok_or(Error::BadKeyExchange)?;
                Secret::MlKem(crate::kem::Decapsulator::from_seed(set, seed))
            }
        };
        Ok(Self::from_secret(group, s))
    }

    fn from_secret(group: DhGroup, secret: Secret) -> Self {
        let public = match &secret {
            Secret::X25519(s) => x25519_dalek::PublicKey::from(s).as_bytes().to_vec(),
            Secret::P256(s) => s.public_key().to_encoded_point(false).as_bytes()[1..].to_vec(),
            Secret::P384(s) => s.public_key().to_encoded_point(false).as_bytes()[1..].to_vec(),
            // The generator is never refused.
            Secret::Modp(e) => modp_exp(group, None, e).map_or_else(|_| Vec::new(), |v| v.to_vec()),
            Secret::MlKem(d) => d.ek().to_vec(),
        };
        KeyExchange { group, secret, public }
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The public value for the KE payload: 32 bytes (RFC 8031 2), x | y without a point
    /// format byte (RFC 5903 7), 256 bytes big-endian (RFC 7296 3.4), or ML-KEM's
    /// encapsulation key (draft-ietf-ipsecme-ikev2-mlkem 2).
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret g^ir with the peer's public value, after validating it: the
    /// length, an on-curve point (RFC 5903 8 / SEC1), 1 < y < p-1 for MODP (RFC 6989 2.1),
    /// a non-zero X25519 result (RFC 8031 2.3).
    /// For ML-KEM (the initiator's side) `peer` is the responder's ciphertext, of the
    /// parameter set's length (FIPS 203 7.3), and the result is its decapsulation.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<KeyBytes, Error> {
        if let Secret::MlKem(d) = &self.secret {
            return d.decapsulate(peer);
        }
        if peer.len() != self.group.public_len() {
            return Err(Error::BadKeyExchange);
        }
        match &self.secret {
            Secret::X25519(s) => {
                let p: [u8; 32] = peer.try_into().map_err(|_| Error::BadKeyExchange)?;
                let ss = s.diffie_hellman(&x25519_dalek::PublicKey::from(p));
                if !ss.was_contributory() {
                    return Err(Error::BadKeyExchange);
                }
                Ok(Zeroizing::new(ss.as_bytes().to_vec()))
            }
            Secret::P256(s) => {
                let mut sec1 = Vec::with_capacity(65);
                sec1.push(4);
                sec1.extend_from_slice(peer);
                let pk = p256::PublicKey::from_sec1_bytes(&sec1).map_err(|_| Error::BadKeyExchange)?;
                let ss = p256::ecdh::diffie_hellman(s.to_nonzero_scalar(), pk.as_affine());
                Ok(Zeroizing::new(ss.raw_secret_bytes().to_vec()))
            }
            Secret::P384(s) => {
                let mut sec1 = Vec::with_capacity(97);
                sec1.push(4);
                sec1.extend_from_slice(peer);
                let pk = p384::PublicKey::from_sec1_bytes(&sec1).map_err(|_| Error::BadKeyExchange)?;
                let ss = p384::ecdh::diffie_hellman(s.to_nonzero_scalar(), pk.as_affine());
                Ok(Zeroizing::new(ss.raw_secret_bytes().to_vec()))
            }
            Secret::Modp(e) => modp_exp(self.group, Some(peer), e),
            Secret::MlKem(d) => d.decapsulate(peer),
        }
    }

    /// The responder's side of a key exchange with the initiator's KE data `peer`: our KE
    /// data and the shared secret. Diffie-Hellman: a fresh private value, its public value
    /// and g^ir. ML-KEM: the initiator's encapsulation key checked (FIPS 203 7.2: length and
    /// modulus) and encapsulated to, the ciphertext and K.
    pub fn respond(group: DhGroup, peer: &[u8], rng: &mut impl CryptoRngCore) -> Result<(Vec<u8>, KeyBytes), Error> {
        if let Some(set) = group.kem() {
            let mut m = Zeroizing::new([0u8; crate::kem::ENCAPS_SEED_LEN]);
            rng.fill_bytes(&mut m[..]);
            return crate::kem::encapsulate(set, peer, &m);
        }
        let kex = Self::generate(group, rng);
        let shared = kex.shared_secret(peer)?;
        Ok((kex.public, shared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    // RFC 7748 section 6.1 (Alice and Bob), the exchange RFC 8031 uses.
    #[test]
    fn x25519_rfc7748() {
        let a = KeyExchange::from_private(
            DhGroup::Curve25519,
            &h("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"),
        )
        .unwrap();
        let b = KeyExchange::from_private(
            DhGroup::Curve25519,
            &h("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"),
        )
        .unwrap();
        assert_eq!(
            hex::encode(a.public()),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        assert_eq!(
            hex::encode(b.public()),
            "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
        );
        let k = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
        assert_eq!(hex::encode(&*a.shared_secret(b.public()).unwrap()), k);
        assert_eq!(hex::encode(&*b.shared_secret(a.public()).unwrap()), k);
        // An all-zero result (small-order point) is refused (RFC 8031 2.3).
        assert_eq!(a.shared_secret(&[0u8; 32]).err(), Some(Error::BadKeyExchange));
    }

    // RFC 5903 section 8.1: ECP-256.
    #[test]
    fn ecp256_rfc5903() {
        let i = KeyExchange::from_private(
            DhGroup::Ecp256,
            &h("C88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433"),
        )
        .unwrap();
        let r = KeyExchange::from_private(
            DhGroup::Ecp256,
            &h("C6EF9C5D78AE012A011164ACB397CE2088685D8F06BF9BE0B283AB46476BEE53"),
        )
        .unwrap();
        assert_eq!(
            hex::encode_upper(i.public()),
            "DAD0B65394221CF9B051E1FECA5787D098DFE637FC90B9EF945D0C3772581180\
5271A0461CDB8252D61F1C456FA3E59AB1F45B33ACCF5F58389E0577B8990BB3"
        );
        assert_eq!(
            hex::encode_upper(r.public()),
            "D12DFB5289C8D4F81208B70270398C342296970A0BCCB74C736FC7554494BF63\
56FBF3CA366CC23E8157854C13C58D6AAC23F046ADA30F8353E74F33039872AB"
        );
        let z = "D6840F6B42F6EDAFD13116E0E12565202FEF8E9ECE7DCE03812464D04B9442DE";
        assert_eq!(hex::encode_upper(&*i.shared_secret(r.public()).unwrap()), z);
        assert_eq!(hex::encode_upper(&*r.shared_secret(i.public()).unwrap()), z);
        // A point off the curve is refused.
        let mut bad = r.public().to_vec();
        bad[63] ^= 1;
        assert_eq!(i.shared_secret(&bad).err(), Some(Error::BadKeyExchange));
    }

    // RFC 5903 section 8.2: ECP-384.
    #[test]
    fn ecp384_rfc5903() {
        let i = KeyExchange::from_private(
            DhGroup::Ecp384,
            &h("099F3C7034D4A2C699884D73A375A67F7624EF7C6B3C0F160647B67414DCE655E35B538041E649EE3FAEF896783AB194"),
        )
        .unwrap();
        let r = KeyExchange::from_private(
            DhGroup::Ecp384,
            &h("41CB0779B4BDB85D47846725FBEC3C9430FAB46CC8DC5060855CC9BDA0AA2942E0308312916B8ED2960E4BD55A7448FC"),
        )
        .unwrap();
        assert_eq!(
            hex::encode_upper(i.public()),
            "667842D7D180AC2CDE6F74F37551F55755C7645C20EF73E31634FE72B4C55EE6DE3AC808ACB4BDB4C88732AEE95F41AA\
9482ED1FC0EEB9CAFC4984625CCFC23F65032149E0E144ADA024181535A0F38EEB9FCFF3C2C947DAE69B4C634573A81C"
        );
        let z = "11187331C279962D93D604243FD592CB9D0A926F422E47187521287E7156C5C4D603135569B9E9D09CF5D4A270F59746";
        assert_eq!(hex::encode_upper(&*i.shared_secret(r.public()).unwrap()), z);
        assert_eq!(hex::encode_upper(&*r.shared_secret(i.public()).unwrap()), z);
    }

    // The prime's digits: a mistyped digit makes a composite, which fails Fermat's test
    // with overwhelming probability; and 2 is a quadratic residue mod a safe prime p with
    // p = 7 mod 8, so 2^((p-1)/2) = 1.
    #[test]
    fn modp2048_prime_is_rfc3526s() {
        let p = modp_prime();
        let params = DynResidueParams::new(&p);
        let p1 = p.wrapping_sub(&U2048::ONE);
        assert_eq!(
            DynResidue::new(&U2048::from_u8(3), params).pow(&p1).retrieve(),
            U2048::ONE
        );
        assert_eq!(
            DynResidue::new(&U2048::from_u8(2), params)
                .pow(&p1.shr_vartime(1))
                .retrieve(),
            U2048::ONE
        );
    }

    // The group 2 prime as typed is the one RFC 2409 6.2's formula gives (checked with
    // Python from RFC 3526's group 14 prime, whose formula shares [2^k pi]), and a prime.
    #[test]
    fn modp1024_prime_is_rfc2409s() {
        let p = U1024::from_be_hex(MODP1024_PRIME_HEX);
        let params = DynResidueParams::new(&p);
        let p1 = p.wrapping_sub(&U1024::ONE);
        assert_eq!(
            DynResidue::new(&U1024::from_u8(3), params).pow(&p1).retrieve(),
            U1024::ONE
        );
        // Its digits of pi are group 14's: [2^894 pi] is the top of [2^1918 pi] (RFC 3526 3).
        assert_eq!(&MODP1024_PRIME_HEX[..224], &MODP2048_PRIME_HEX[..224]);
    }

    // A vector from Python's pow(), not from this crate: the same private values as the
    // group 14 vector below, p the RFC 2409 prime:
    // `pow(2, a, p)`, `pow(2, b, p)`, `pow(pow(2, b, p), a, p)`.
    #[test]
    fn modp1024_python_vector_and_validation() {
        let a = KeyExchange::from_private(DhGroup::Modp1024, &h("c97c8d11d3850a2b809462ff0f9876a019c35d085d520e60b673adc781925c40478e6d7dc8c6b492ba57c70be9ac1a28889359d9b3406ffc3cd627a3be2ea8e8")).unwrap();
        let b = KeyExchange::from_private(DhGroup::Modp1024, &h("91fdf59e1a754b81c92ab758bbdeea3688ed773efa655b0600c1cfa625f033eece5723c99f20eb269799025f4321c08224c050a42583aecb8b39e1ead27a6acd")).unwrap();
        assert_eq!(hex::encode(a.public()), "dcf4104f4ad41c31e39eead0d7407add7bfc5d2728abd1fc08f4db68d3349a56e9c27139a74084aea742fb1baacaa576fffe7e156ad6e142aa6844c2158e21565aeeb4877f13f080a183c986d42705d13c929eb6c0a5a555fa6623915892ffaee785ca17c3641c78bd7b92740c8b0e314d924e0695093e55e80f3285ddb1d300");
        assert_eq!(hex::encode(b.public()), "cb9c884bf02d65cffb6a89fcf99dc65c08dbd4ae98bd6852f711d0be4fb92281619526fed714bb5294136c0ed07c3e8b0bd13b685d79de9d59418e2765cbfe7c3a392b728f0e0f5e73c267af0de0be80fbf1414ed5b51d291665babbb5d2395467593648e1e7c367d0b99c3bc5118c6bbe86258bda0e37179086f0d6f4a62889");
        let s = "8b9a6fc77a16eff68d7f9ef0465f5dc16beb76b55aa2e00ecb875747c5a5f3d772910c2f203dbadce565c7f8c48d20b32a351b75390bf8b39f973ddfd0fbed6804ba6cdcafdf14a3f34960a42369d763cfa693af64a33ababce922719340ff1b339704713a3fea6ea44ab28814571a1a3daf599e34e0cbb2a44af5746d9f0649";
        assert_eq!(hex::encode(&*a.shared_secret(b.public()).unwrap()), s);
        assert_eq!(hex::encode(&*b.shared_secret(a.public()).unwrap()), s);
        let mut one = [0u8; 128];
        one[127] = 1;
        assert_eq!(a.shared_secret(&one).err(), Some(Error::BadKeyExchange));
        assert_eq!(
            a.shared_secret(&h(MODP1024_PRIME_HEX)).err(),
            Some(Error::BadKeyExchange)
        );
        // A group 14 value is not a group 2 one.
        assert_eq!(a.shared_secret(&[7u8; 256]).err(), Some(Error::BadKeyExchange));
    }

    // A vector from Python's pow() (tests/vectors/modp.py), not from this crate.
    #[test]
    fn modp2048_python_vector_and_validation() {
        let a = KeyExchange::from_private(DhGroup::Modp2048, &h("c97c8d11d3850a2b809462ff0f9876a019c35d085d520e60b673adc781925c40478e6d7dc8c6b492ba57c70be9ac1a28889359d9b3406ffc3cd627a3be2ea8e8")).unwrap();
        let b = KeyExchange::from_private(DhGroup::Modp2048, &h("91fdf59e1a754b81c92ab758bbdeea3688ed773efa655b0600c1cfa625f033eece5723c99f20eb269799025f4321c08224c050a42583aecb8b39e1ead27a6acd")).unwrap();
        assert_eq!(hex::encode(a.public()), "2f94b14c1ee60bb1c13ac25d1572ad73906d6b6558221707be18117f117b332fe0634de6b211fcab05bb034e0e55fdcb149458e98dc420d3d25792333309419a8ced3ad42ff59251bef083fdd26ecd91ba2a4b9e009aa4e89acb4c05a00f548228159e7905aed1dcb4864f3bb3432d23dcc533d3c0f660fed13275c48586cd0d885c5486aabc5f4c8c43f3575d266ff862d4843b645f30e519653ca4c0dd4e4b2612c5293c4f9bba6ceba00405d4bb3fdb977f571f65f151203ddcc5b1364b08f32fa3132aad3995a7c0d58bcde5081f76d01daef10e41d6727e37e4142867f0f5fa1ddc7b2fa22028d9ccafd00cb59a2a4ac86d8bdff6b1fb1df577a14f17b1");
        let s = "9a6e4f5b773b2c8b3b374e0a42e32d3ce36435d2a5b4ea2125c7acad39f5cdc48018a3393a6f130c3dc703f54ab66be6055d3f9a1e87e3ccb79cce41597d5522f221fa6f66a1173e9abd64c4cf9cbb73dbcaa29e0afa7420d5cb2dc60bf7eb3958d9e05164ea8811897891e04217f1aeb89728942a7fc99bfd1505f8cf786c2efe7094df4a6a331125d2e2da8e00a686275c25c52adc4816f69138331ea0ee92cc687a68899596a6f6529d73ee4aaa63e36c3ee4a2b2db12b138676dc0042eced81e28fe0bebcc03352bd93f1b76580111f0d1f46112b25272393f2779fb95d4fd81bb1af2867f785cb9ea65a2925273a9d3ba5999eb223e633eba3f24d22c00";
        assert_eq!(hex::encode(&*a.shared_secret(b.public()).unwrap()), s);
        assert_eq!(hex::encode(&*b.shared_secret(a.public()).unwrap()), s);
        let mut one = [0u8; 256];
        one[255] = 1;
        assert_eq!(a.shared_secret(&one).err(), Some(Error::BadKeyExchange));
        assert_eq!(
            a.shared_secret(&h(MODP2048_PRIME_HEX)).err(),
            Some(Error::BadKeyExchange)
        );
        assert_eq!(a.shared_secret(&one[..255]).err(), Some(Error::BadKeyExchange));
    }
}
