//! ring against RustCrypto: the two `Aead` backends must compute the same function (NIST SP
//! 800-38D GCM as RFC 4106 uses it, RFC 8439 ChaCha20-Poly1305 as RFC 7634 uses it).
//!
//! Random keys, salts, IVs and 8- or 12-byte AADs (ESP's SPI || sequence number, with or
//! without the ESN high half, RFC 4106 section 5) from a seeded PRNG, over every length 0..=64
//! and a few hundred random lengths up to 9000: both backends give the same ciphertext and ICV,
//! each opens the other's output, both refuse a flipped bit in the ciphertext, the ICV or the
//! AAD, and the detached and in-place API shapes agree.
#![cfg(feature = "ring")]

use ipsec_core::aead::{Aead, Backend};
use ipsec_core::{AeadAlg, Error};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ICV: usize = 16;

/// The cases ring does, by key length (salt excluded).
const CASES: [(AeadAlg, usize); 3] = [
    (AeadAlg::AesGcm, 16),
    (AeadAlg::AesGcm, 32),
    (AeadAlg::ChaCha20Poly1305, 32),
];

fn bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// Lengths 0..=64, then `extra` random lengths up to 9000.
fn lengths(rng: &mut ChaCha8Rng, extra: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..=64).collect();
    v.extend((0..extra).map(|_| (rng.next_u32() % 9001) as usize));
    v
}

/// Seals with the detached API and checks the in-place API gives the same bytes.
fn seal_both_shapes(a: &Aead, iv: &[u8; 8], aad: &[u8], pt: &[u8]) -> (Vec<u8>, [u8; ICV]) {
    let mut ct = pt.to_vec();
    let mut icv = [0u8; ICV];
    a.seal(iv, aad, &mut ct, &mut icv).unwrap();
    let mut buf = pt.to_vec();
    buf.extend_from_slice(&[0xee; ICV]);
    a.seal_in_place(iv, aad, &mut buf).unwrap();
    assert_eq!(buf[..pt.len()], ct[..], "{:?}: in-place ciphertext", a.backend());
    assert_eq!(buf[pt.len()..], icv[..], "{:?}: in-place ICV", a.backend());
    (ct, icv)
}

/// Opens `ct` || `icv` with both API shapes; both must agree.
fn open_both_shapes(a: &Aead, iv: &[u8; 8], aad: &[u8], ct: &[u8], icv: &[u8]) -> Result<Vec<u8>, Error> {
    let mut data = ct.to_vec();
    let detached = a.open(iv, aad, &mut data, icv).map(|()| data);
    let mut buf = ct.to_vec();
    buf.extend_from_slice(icv);
    let in_place = a.open_in_place(iv, aad, &mut buf).map(|()| buf[..ct.len()].to_vec());
    assert_eq!(
        detached,
        in_place,
        "{:?}: detached and in-place open differ",
        a.backend()
    );
    detached
}

#[test]
fn ring_and_rustcrypto_agree() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x4106_7634);
    for (alg, key_len) in CASES {
        for len in lengths(&mut rng, 200) {
            let keymat = bytes(&mut rng, key_len + AeadAlg::SALT_LEN);
            let ring = Aead::with_backend(alg, &keymat, ICV, Backend::Ring).unwrap();
            let rc = Aead::with_backend(alg, &keymat, ICV, Backend::RustCrypto).unwrap();
            assert_eq!((ring.backend(), rc.backend()), (Backend::Ring, Backend::RustCrypto));
            let iv: [u8; 8] = bytes(&mut rng, 8).try_into().unwrap();
            let aad_len = if rng.next_u32() & 1 == 0 { 8 } else { 12 };
            let aad = bytes(&mut rng, aad_len);
            let pt = bytes(&mut rng, len);
            let what = format!("{alg:?}/{key_len} len {len} aad {aad_len}");

            let (ct_ring, icv_ring) = seal_both_shapes(&ring, &iv, &aad, &pt);
            let (ct_rc, icv_rc) = seal_both_shapes(&rc, &iv, &aad, &pt);
            assert_eq!(ct_ring, ct_rc, "{what}: ciphertext");
            assert_eq!(icv_ring, icv_rc, "{what}: ICV");
            if len > 0 {
                assert_ne!(ct_ring, pt, "{what}: nothing was encrypted");
            }

            // Each opens the other's output (the two are equal, so this is also each its own).
            assert_eq!(
                open_both_shapes(&ring, &iv, &aad, &ct_rc, &icv_rc),
                Ok(pt.clone()),
                "{what}"
            );
            assert_eq!(
                open_both_shapes(&rc, &iv, &aad, &ct_ring, &icv_ring),
                Ok(pt.clone()),
                "{what}"
            );

            // One flipped bit anywhere is refused by both.
            let pick = |rng: &mut ChaCha8Rng, n: usize| (rng.next_u32() as usize % n, 1u8 << (rng.next_u32() % 8));
            for a in [&ring, &rc] {
                if len > 0 {
                    let (i, bit) = pick(&mut rng, len);
                    let mut ct = ct_ring.clone();
                    ct[i] ^= bit;
                    assert_eq!(
                        open_both_shapes(a, &iv, &aad, &ct, &icv_ring),
                        Err(Error::BadIcv),
                        "{what}: ct"
                    );
                }
                let (i, bit) = pick(&mut rng, ICV);
                let mut icv = icv_ring;
                icv[i] ^= bit;
                assert_eq!(
                    open_both_shapes(a, &iv, &aad, &ct_ring, &icv),
                    Err(Error::BadIcv),
                    "{what}: ICV"
                );
                let (i, bit) = pick(&mut rng, aad_len);
                let mut bad_aad = aad.clone();
                bad_aad[i] ^= bit;
                assert_eq!(
                    open_both_shapes(a, &iv, &bad_aad, &ct_ring, &icv_ring),
                    Err(Error::BadIcv),
                    "{what}: AAD"
                );
                // The wrong IV (nonce) too.
                let mut bad_iv = iv;
                bad_iv[7] ^= 1;
                assert_eq!(
                    open_both_shapes(a, &bad_iv, &aad, &ct_ring, &icv_ring),
                    Err(Error::BadIcv),
                    "{what}: IV"
                );
            }
        }
    }
}

/// A different salt is a different nonce (RFC 4106 section 4): the same key and IV under two
/// salts must not give the same ciphertext on either backend, and the two backends still agree.
#[test]
fn salt_is_part_of_the_nonce() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (alg, key_len) in CASES {
        let mut keymat = bytes(&mut rng, key_len + AeadAlg::SALT_LEN);
        let (iv, aad, pt) = ([3u8; 8], [4u8; 8], bytes(&mut rng, 100));
        let mut out = Vec::new();
        for _ in 0..2 {
            let mut per_backend = Vec::new();
            for b in [Backend::Ring, Backend::RustCrypto] {
                let a = Aead::with_backend(alg, &keymat, ICV, b).unwrap();
                per_backend.push(seal_both_shapes(&a, &iv, &aad, &pt));
            }
            assert_eq!(per_backend[0], per_backend[1], "{alg:?}/{key_len}");
            out.push(per_backend.swap_remove(0));
            keymat[key_len] ^= 1;
        }
        assert_ne!(out[0].0, out[1].0, "{alg:?}/{key_len}: salt ignored");
    }
}

/// Ring refuses what it does not do; `new` falls back to RustCrypto for those and picks ring for
/// the rest.
#[test]
fn backend_choice() {
    let k = |n: usize| vec![0x42u8; n + AeadAlg::SALT_LEN];
    for (alg, key_len, icv, ring_ok) in [
        (AeadAlg::AesGcm, 16, 16, true),
        (AeadAlg::AesGcm, 32, 16, true),
        (AeadAlg::ChaCha20Poly1305, 32, 16, true),
        (AeadAlg::AesGcm, 24, 16, false),
        (AeadAlg::AesGcm, 16, 8, false),
        (AeadAlg::AesGcm, 16, 12, false),
        (AeadAlg::AesGcm, 32, 12, false),
    ] {
        let forced = Aead::with_backend(alg, &k(key_len), icv, Backend::Ring);
        assert_eq!(forced.is_ok(), ring_ok, "{alg:?}/{key_len}/{icv}");
        if !ring_ok {
            assert!(matches!(forced, Err(Error::InvalidSa(_))));
        }
        assert!(Aead::with_backend(alg, &k(key_len), icv, Backend::RustCrypto).is_ok());
        let expect = if ring_ok { Backend::Ring } else { Backend::RustCrypto };
        assert_eq!(Aead::new(alg, &k(key_len), icv).unwrap().backend(), expect);
        assert_eq!(Backend::Ring.supports(alg, key_len, icv), ring_ok);
    }
    // Bad key or ICV lengths are refused by both, before the backend is looked at.
    for b in [Backend::Ring, Backend::RustCrypto] {
        assert!(matches!(
            Aead::with_backend(AeadAlg::AesGcm, &[0u8; 19], 16, b),
            Err(Error::KeyLength { .. })
        ));
        assert!(matches!(
            Aead::with_backend(AeadAlg::ChaCha20Poly1305, &[0u8; 36], 12, b),
            Err(Error::IcvLength { .. })
        ));
    }
}
