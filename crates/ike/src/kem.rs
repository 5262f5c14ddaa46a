//! ML-KEM (FIPS 203) as an IKEv2 key exchange method (draft-ietf-ipsecme-ikev2-mlkem):
//! transform type 4 IDs 35 (ML-KEM-512), 36 (ML-KEM-768) and 37 (ML-KEM-1024), usable in
//! IKE_SA_INIT, as an additional key exchange (RFC 9370) in IKE_INTERMEDIATE, and in
//! CREATE_CHILD_SA.
//!
//! Unlike Diffie-Hellman the exchange is asymmetric (draft section 2): the initiator's KE data
//! is an encapsulation key `ek`, the responder's the ciphertext `c` it encapsulated to that
//! key; the shared secret is the 32-byte `K` on both sides. The checks the draft asks for:
//!
//! - the responder checks the initiator's `ek` with FIPS 203 7.2: its length (type check)
//!   and that every 12-bit coefficient re-encodes to itself, that is, is below q = 3329
//!   (modulus check); a key that fails is answered with INVALID_SYNTAX (draft 2.2);
//! - the initiator checks the length of `c` (FIPS 203 7.3 type check); decapsulation of a
//!   ciphertext of the right length never fails (implicit rejection gives a pseudo-random K).
//!
//! The arithmetic is libcrux-ml-kem's (Cryspen; formally verified with hax/F* for panic
//! freedom and functional correctness against the FIPS 203 specification; its C extraction
//! is the ML-KEM of NSS). Why that crate: docs/ike-pq.md. Randomness is passed in (64 bytes
//! `d | z` for a key pair, 32 bytes `m` to encapsulate) so known-answer vectors (NIST ACVP,
//! tests/vectors/mlkem-acvp.txt) run through the same functions as the protocol.
use crate::error::Error;
use alloc::vec::Vec;
use libcrux_ml_kem::{mlkem1024, mlkem512, mlkem768};
use zeroize::{Zeroize, Zeroizing};

/// The three parameter sets of FIPS 203 (table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MlKem {
    /// ML-KEM-512 (NIST category 1), transform ID 35.
    MlKem512,
    /// ML-KEM-768 (category 3), transform ID 36.
    MlKem768,
    /// ML-KEM-1024 (category 5), transform ID 37.
    MlKem1024,
}

/// Length of the shared secret K (FIPS 203 table 3).
pub const SHARED_SECRET_LEN: usize = 32;
/// Length of the key generation seed d | z (FIPS 203 7.1).
pub const KEYGEN_SEED_LEN: usize = 64;
/// Length of the encapsulation randomness m (FIPS 203 7.2).
pub const ENCAPS_SEED_LEN: usize = 32;

impl MlKem {
    /// Length of the encapsulation key (the initiator's KE data): 384k + 32.
    pub fn ek_len(self) -> usize {
        match self {
            MlKem::MlKem512 => 800,
            MlKem::MlKem768 => 1184,
            MlKem::MlKem1024 => 1568,
        }
    }
    /// Length of the ciphertext (the responder's KE data): 32(du k + dv).
    pub fn ct_len(self) -> usize {
        match self {
            MlKem::MlKem512 => 768,
            MlKem::MlKem768 => 1088,
            MlKem::MlKem1024 => 1568,
        }
    }
    /// Length of the decapsulation key: 768k + 96.
    pub fn dk_len(self) -> usize {
        match self {
            MlKem::MlKem512 => 1632,
            MlKem::MlKem768 => 2400,
            MlKem::MlKem1024 => 3168,
        }
    }
}

/// The initiator's half: the decapsulation key (zeroized on drop) and the encapsulation key
/// sent in the KE payload.
pub struct Decapsulator {
    set: MlKem,
    dk: Zeroizing<Vec<u8>>,
    ek: Vec<u8>,
}

impl core::fmt::Debug for Decapsulator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Decapsulator({:?})", self.set)
    }
}

fn keep_secret<const N: usize>(mut a: [u8; N]) -> Zeroizing<Vec<u8>> {
    let v = Zeroizing::new(a.to_vec());
    a.zeroize();
    v
}

impl Decapsulator {
    /// ML-KEM.KeyGen_internal(d, z) (FIPS 203 algorithm 16) with `seed` = d | z.
    pub fn from_seed(set: MlKem, seed: &[u8; KEYGEN_SEED_LEN]) -> Self {
        let (dk, ek) = match set {
            MlKem::MlKem512 => {
                let (sk, pk) = mlkem512::generate_key_pair(*seed).into_parts();
                (keep_secret(sk.into()), pk.as_slice().to_vec())
            }
            MlKem::MlKem768 => {
                let (sk, pk) = mlkem768::generate_key_pair(*seed).into_parts();
                (keep_secret(sk.into()), pk.as_slice().to_vec())
            }
            MlKem::MlKem1024 => {
                let (sk, pk) = mlkem1024::generate_key_pair(*seed).into_parts();
                (keep_secret(sk.into()), pk.as_slice().to_vec())
            }
        };
        Decapsulator { set, dk, ek }
    }

    /// The parameter set.
    pub fn set(&self) -> MlKem {
        self.set
    }

    /// The encapsulation key (KE data of the initiator).
    pub fn ek(&self) -> &[u8] {
        &self.ek
    }

    /// The decapsulation key (for known-answer tests; never logged).
    pub fn dk(&self) -> &[u8] {
        &self.dk
    }

    /// ML-KEM.Decaps (FIPS 203 algorithm 21) after the type check of 7.3: a ciphertext of
    /// the wrong length is refused ([`Error::BadKeyExchange`]).
    pub fn decapsulate(&self, ct: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        if ct.len() != self.set.ct_len() {
            return Err(Error::BadKeyExchange);
        }
        let k: [u8; SHARED_SECRET_LEN] = match self.set {
            MlKem::MlKem512 => {
                let c = mlkem512::MlKem512Ciphertext::try_from(ct).map_err(|_| Error::BadKeyExchange)?;
                let sk = mlkem512::MlKem512PrivateKey::try_from(&self.dk[..]).map_err(|_| Error::BadKeyExchange)?;
                let k = mlkem512::decapsulate(&sk, &c);
                keep_secret::<1632>(sk.into());
                k
            }
            MlKem::MlKem768 => {
                let c = mlkem768::MlKem768Ciphertext::try_from(ct).map_err(|_| Error::BadKeyExchange)?;
                let sk = mlkem768::MlKem768PrivateKey::try_from(&self.dk[..]).map_err(|_| Error::BadKeyExchange)?;
                let k = mlkem768::decapsulate(&sk, &c);
                keep_secret::<2400>(sk.into());
                k
            }
            MlKem::MlKem1024 => {
                let c = mlkem1024::MlKem1024Ciphertext::try_from(ct).map_err(|_| Error::BadKeyExchange)?;
                let sk = mlkem1024::MlKem1024PrivateKey::try_from(&self.dk[..]).map_err(|_| Error::BadKeyExchange)?;
                let k = mlkem1024::decapsulate(&sk, &c);
                keep_secret::<3168>(sk.into());
                k
            }
        };
        Ok(keep_secret(k))
    }
}

/// FIPS 203 7.2 input checking of an encapsulation key: the type check (length) and the
/// modulus check (each of the 256k coefficients, 12 bits little-endian, is below q = 3329,
/// so ByteEncode12(ByteDecode12(ek)) = ek). Written out here, besides libcrux's own
/// `validate_public_key`, so the rule the draft cites is visible and tested on its own.
pub fn check_ek(set: MlKem, ek: &[u8]) -> Result<(), Error> {
    if ek.len() != set.ek_len() {
        return Err(Error::BadKeyExchange);
    }
    // The last 32 bytes are the seed rho; the rest is t-hat, 3 bytes per 2 coefficients.
    let t = &ek[..ek.len() - 32];
    let mut bad = 0u16;
    for c in t.chunks_exact(3) {
        let a = u16::from(c[0]) | (u16::from(c[1] & 0x0f) << 8);
        let b = u16::from(c[1] >> 4) | (u16::from(c[2]) << 4);
        // Constant time over the key (it is public, but no reason to branch).
        bad |= u16::from(a >= 3329) | u16::from(b >= 3329);
    }
    let lib_ok = match set {
        MlKem::MlKem512 => mlkem512::MlKem512PublicKey::try_from(ek)
            .map(|k| mlkem512::validate_public_key(&k))
            .unwrap_or(false),
        MlKem::MlKem768 => mlkem768::MlKem768PublicKey::try_from(ek)
            .map(|k| mlkem768::validate_public_key(&k))
            .unwrap_or(false),
        MlKem::MlKem1024 => mlkem1024::MlKem1024PublicKey::try_from(ek)
            .map(|k| mlkem1024::validate_public_key(&k))
            .unwrap_or(false),
    };
    if bad != 0 || !lib_ok {
        return Err(Error::BadKeyExchange);
    }
    Ok(())
}

/// The responder's side: checks the initiator's `ek` ([`check_ek`]) and runs
/// ML-KEM.Encaps_internal(ek, m) (FIPS 203 algorithm 17). Returns the ciphertext (the
/// responder's KE data) and the shared secret.
pub fn encapsulate(set: MlKem, ek: &[u8], m: &[u8; ENCAPS_SEED_LEN]) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), Error> {
    check_ek(set, ek)?;
    let (ct, k) = match set {
        MlKem::MlKem512 => {
            let pk = mlkem512::MlKem512PublicKey::try_from(ek).map_err(|_| Error::BadKeyExchange)?;
            let (c, k) = mlkem512::encapsulate(&pk, *m);
            (c.as_slice().to_vec(), k)
        }
        MlKem::MlKem768 => {
            let pk = mlkem768::MlKem768PublicKey::try_from(ek).map_err(|_| Error::BadKeyExchange)?;
            let (c, k) = mlkem768::encapsulate(&pk, *m);
            (c.as_slice().to_vec(), k)
        }
        MlKem::MlKem1024 => {
            let pk = mlkem1024::MlKem1024PublicKey::try_from(ek).map_err(|_| Error::BadKeyExchange)?;
            let (c, k) = mlkem1024::encapsulate(&pk, *m);
            (c.as_slice().to_vec(), k)
        }
    };
    Ok((ct, keep_secret(k)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    fn set(s: &str) -> MlKem {
        match s {
            "512" => MlKem::MlKem512,
            "768" => MlKem::MlKem768,
            "1024" => MlKem::MlKem1024,
            _ => panic!("set {s}"),
        }
    }

    /// NIST ACVP's ML-KEM keyGen, encapsulation and decapsulation (valid and modified
    /// ciphertexts: implicit rejection) vectors, all three parameter sets.
    #[test]
    fn nist_acvp_vectors() {
        let text = include_str!("../tests/vectors/mlkem-acvp.txt");
        let mut n = [0usize; 3];
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let s = set(f[1]);
            match f[0] {
                "keygen" => {
                    let mut seed = [0u8; 64];
                    seed[..32].copy_from_slice(&h(f[2]));
                    seed[32..].copy_from_slice(&h(f[3]));
                    let d = Decapsulator::from_seed(s, &seed);
                    assert_eq!(d.ek(), &h(f[4])[..], "{line:.40}");
                    assert_eq!(d.dk(), &h(f[5])[..]);
                    assert_eq!((d.ek().len(), d.dk().len()), (s.ek_len(), s.dk_len()));
                    n[0] += 1;
                }
                "encap" => {
                    let m: [u8; 32] = h(f[3]).try_into().unwrap();
                    let (c, k) = encapsulate(s, &h(f[2]), &m).unwrap();
                    assert_eq!(c, h(f[4]));
                    assert_eq!(&k[..], &h(f[5])[..]);
                    assert_eq!(c.len(), s.ct_len());
                    n[1] += 1;
                }
                "decap" => {
                    let dk = h(f[2]);
                    let d = Decapsulator {
                        set: s,
                        dk: Zeroizing::new(dk),
                        ek: Vec::new(),
                    };
                    assert_eq!(&d.decapsulate(&h(f[3])).unwrap()[..], &h(f[4])[..], "{line:.40}");
                    n[2] += 1;
                }
                other => panic!("record {other}"),
            }
        }
        assert_eq!(n, [9, 9, 12], "every record ran");
    }

    #[test]
    fn round_trip_and_type_checks() {
        for s in [MlKem::MlKem512, MlKem::MlKem768, MlKem::MlKem1024] {
            let d = Decapsulator::from_seed(s, &[7u8; 64]);
            let (c, k) = encapsulate(s, d.ek(), &[9u8; 32]).unwrap();
            assert_eq!(d.decapsulate(&c).unwrap(), k);
            // Wrong lengths, both ways (FIPS 203 7.2 and 7.3 type checks).
            assert_eq!(
                encapsulate(s, &d.ek()[1..], &[9u8; 32]).err(),
                Some(Error::BadKeyExchange)
            );
            let mut long = d.ek().to_vec();
            long.push(0);
            assert_eq!(encapsulate(s, &long, &[9u8; 32]).err(), Some(Error::BadKeyExchange));
            assert_eq!(d.decapsulate(&c[..c.len() - 1]).err(), Some(Error::BadKeyExchange));
            assert_eq!(d.decapsulate(&[]).err(), Some(Error::BadKeyExchange));
            // A modified ciphertext of the right length decapsulates to another secret
            // (implicit rejection), never an error or a panic.
            let mut c2 = c.clone();
            c2[0] ^= 1;
            assert_ne!(d.decapsulate(&c2).unwrap(), k);
        }
    }

    /// The modulus check: a coefficient of q = 3329 (0xd01) or 4095 is refused, q - 1 taken.
    #[test]
    fn modulus_check() {
        for s in [MlKem::MlKem512, MlKem::MlKem768, MlKem::MlKem1024] {
            let d = Decapsulator::from_seed(s, &[1u8; 64]);
            assert_eq!(check_ek(s, d.ek()), Ok(()));
            let mut ek = d.ek().to_vec();
            // First coefficient := 3329 (low 12 bits of bytes 0..2).
            ek[0] = 0x01;
            ek[1] = (ek[1] & 0xf0) | 0x0d;
            assert_eq!(check_ek(s, &ek), Err(Error::BadKeyExchange));
            assert!(encapsulate(s, &ek, &[0u8; 32]).is_err());
            // Second coefficient of the last triple := 4095.
            let at = ek.len() - 32 - 3;
            let mut ek2 = d.ek().to_vec();
            ek2[at + 1] |= 0xf0;
            ek2[at + 2] = 0xff;
            assert_eq!(check_ek(s, &ek2), Err(Error::BadKeyExchange));
            // 3328 everywhere is the largest valid key body.
            let mut ek3 = d.ek().to_vec();
            let body = ek3.len() - 32;
            for c in ek3[..body].chunks_exact_mut(3) {
                c.copy_from_slice(&[0x00, 0x0d, 0xd0]);
            }
            // 0x000 | 0xd << 8 = 0xd00 = 3328; 0x0 | 0xd0 << 4 = 0xd00.
            assert_eq!(check_ek(s, &ek3), Ok(()));
        }
    }
}
