//! Combined-mode ESP ciphers: AES-GCM as RFC 4106 uses it (with 8, 12 or 16-byte ICVs) and
//! ChaCha20-Poly1305 as RFC 7634 uses it. The nonce is the SA's 4-byte salt followed by the
//! packet's 8-byte explicit IV (RFC 4106 section 4, RFC 7634 section 2).
//!
//! Two backends compute the same functions:
//! - [`Backend::Ring`] (cargo feature `ring`, on by default): ring's `LessSafeKey`, keyed once
//!   per SA, for AES-128-GCM and AES-256-GCM with the full 16-byte ICV and for
//!   ChaCha20-Poly1305. Ring runs CTR and GHASH in one pass with the CPU's AES and carry-less
//!   multiply instructions.
//! - [`Backend::RustCrypto`]: GCM built here from the `aes` and `ghash` crates (CTR then GHASH,
//!   as NIST SP 800-38D section 7 states it) and the `chacha20poly1305` crate. It is the only
//!   path for AES-192-GCM and for the 8- and 12-byte ICVs of RFC 4106 section 8.1, which ring
//!   does not offer, and for every case when the `ring` feature is off.
//!
//! [`Aead::new`] takes ring wherever it can; [`Aead::with_backend`] forces one path.
//!
//! Both shapes of the operation are offered: [`Aead::seal`] / [`Aead::open`] with the ICV in a
//! separate slice, and [`Aead::seal_in_place`] / [`Aead::open_in_place`] over one slice that ends
//! in the ICV, as ESP lays it out (RFC 4303 section 2: the ICV follows the trailer). Opening
//! verifies the ICV, in constant time, before any plaintext is given back: the RustCrypto GCM
//! path and `chacha20poly1305` check the tag before they decrypt and leave the buffer as it
//! was on a mismatch; ring decrypts and authenticates in one pass, compares the tags, and
//! overwrites the buffer with zeros on a mismatch, so no unauthenticated plaintext leaves
//! [`Aead::open`] either way.

use crate::alg::AeadAlg;
use crate::error::Error;
use aes::cipher::{BlockEncrypt, KeyInit};
use alloc::boxed::Box;
use chacha20poly1305::aead::AeadInPlace;
use ghash::universal_hash::UniversalHash;
use ghash::GHash;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

/// GCM over one AES key size: the expanded key and the GHASH key (H), both computed once.
#[derive(Clone)]
struct Gcm<C> {
    cipher: C,
    ghash: GHash,
}

impl<C> Gcm<C>
where
    C: BlockEncrypt
        + aes::cipher::BlockCipher
        + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>
        + Clone,
{
    fn new(cipher: C) -> Self {
        let mut h = ghash::Block::default();
        cipher.encrypt_block(&mut h);
        let ghash = GHash::new(&h);
        h.zeroize();
        Gcm { cipher, ghash }
    }

    /// GHASH(H, A, C) XOR E(K, J0): the full 16-byte tag, over the ciphertext `ct`.
    fn tag(&self, j0: &[u8; 16], aad: &[u8], ct: &[u8]) -> [u8; 16] {
        let mut g = self.ghash.clone();
        g.update_padded(aad);
        g.update_padded(ct);
        let mut lens = ghash::Block::default();
        lens[..8].copy_from_slice(&((aad.len() as u64) * 8).to_be_bytes());
        lens[8..].copy_from_slice(&((ct.len() as u64) * 8).to_be_bytes());
        g.update(&[lens]);
        let s = g.finalize();
        let mut ek = ghash::Block::clone_from_slice(j0);
        self.cipher.encrypt_block(&mut ek);
        let mut out = [0u8; 16];
        for i in 0..16 {
            out[i] = s[i] ^ ek[i];
        }
        out
    }

    /// Encrypts `data` and writes the tag, truncated to `icv.len()` bytes.
    fn seal(&self, j0: &[u8; 16], aad: &[u8], data: &mut [u8], icv: &mut [u8]) {
        self.ctr(j0, data);
        let n = icv.len();
        icv.copy_from_slice(&self.tag(j0, aad, data)[..n]);
    }

    /// Checks the (truncated) tag in constant time, then decrypts `data`.
    fn open(&self, j0: &[u8; 16], aad: &[u8], data: &mut [u8], icv: &[u8]) -> Result<(), Error> {
        let t = self.tag(j0, aad, data);
        if !bool::from(t[..icv.len()].ct_eq(icv)) {
            return Err(Error::BadIcv);
        }
        self.ctr(j0, data);
        Ok(())
    }

    /// GCTR from inc32(J0): CTR mode with a 32-bit big-endian counter, eight blocks of
    /// keystream at a time so the AES backend can pipeline them.
    fn ctr(&self, j0: &[u8; 16], data: &mut [u8]) {
        const PAR: usize = 8;
        let mut counter = 2u32; // J0 ends in 0x00000001 for a 96-bit nonce
        let mut ks = [ghash::Block::default(); PAR];
        for chunk in data.chunks_mut(16 * PAR) {
            let nblocks = chunk.len().div_ceil(16);
            for b in ks.iter_mut().take(nblocks) {
                b[..12].copy_from_slice(&j0[..12]);
                b[12..].copy_from_slice(&counter.to_be_bytes());
                counter = counter.wrapping_add(1);
            }
            self.cipher.encrypt_blocks(&mut ks[..nblocks]);
            for (d, k) in chunk.iter_mut().zip(ks.iter().flat_map(|b| b.iter())) {
                *d ^= k;
            }
        }
        for b in ks.iter_mut() {
            b.as_mut_slice().zeroize();
        }
    }
}

/// Which implementation computes an [`Aead`]'s cipher and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// ring (`ring::aead::LessSafeKey`): AES-128/256-GCM with a 16-byte ICV and
    /// ChaCha20-Poly1305. Needs the `ring` cargo feature.
    Ring,
    /// The `aes` + `ghash` GCM in this module and the `chacha20poly1305` crate: every case.
    RustCrypto,
}

impl Backend {
    /// Whether this backend can run `alg` with a `key_len`-byte key (salt excluded) and an
    /// `icv_len`-byte ICV in this build.
    pub fn supports(self, alg: AeadAlg, key_len: usize, icv_len: usize) -> bool {
        match self {
            Backend::RustCrypto => true,
            Backend::Ring => {
                cfg!(feature = "ring")
                    && icv_len == 16
                    && match alg {
                        AeadAlg::AesGcm => matches!(key_len, 16 | 32),
                        AeadAlg::ChaCha20Poly1305 => key_len == 32,
                    }
            }
        }
    }
}

/// What [`Aead::with_backend`] says when [`Backend::supports`] refuses ring.
const RING_REFUSED: Error = Error::InvalidSa(
    "the ring AEAD backend needs the `ring` feature, AES-128/256-GCM or ChaCha20-Poly1305, and a 16-byte ICV",
);

// One of these per SA (an ESP SA, an IKE SA's direction). The RustCrypto GCMs are boxed:
// their two key schedules (AES, GHASH) take about 1 KB, which inline made every `Aead` as large
// as the largest, ring's included (ring does AES-128/256-GCM by default, in half of that);
// a tenth of the memory a remote-access client costs tunneld (issue #36 item 6). ring's key,
// the default AES-GCM, stays inline: no pointer more per packet.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Inner {
    Gcm128(Box<Gcm<aes::Aes128>>),
    Gcm192(Box<Gcm<aes::Aes192>>),
    Gcm256(Box<Gcm<aes::Aes256>>),
    ChaCha(chacha20poly1305::ChaCha20Poly1305),
    /// Always a 16-byte ICV (ring's tag length).
    #[cfg(feature = "ring")]
    Ring(ring::aead::LessSafeKey),
}

/// A keyed AEAD, set up once per SA.
#[derive(Clone)]
pub struct Aead {
    inner: Inner,
    salt: [u8; 4],
    icv_len: usize,
}

impl core::fmt::Debug for Aead {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Aead")
            .field("backend", &self.backend())
            .field("icv_len", &self.icv_len)
            .finish_non_exhaustive()
    }
}

impl Drop for Aead {
    fn drop(&mut self) {
        self.salt.zeroize();
    }
}

impl Aead {
    /// Sets up `alg` with `keymat` (key followed by the 4-byte salt) and an ICV of `icv_len`
    /// bytes, on ring where ring does the case (see [`Backend::supports`]), else on RustCrypto.
    pub fn new(alg: AeadAlg, keymat: &[u8], icv_len: usize) -> Result<Self, Error> {
        let key_len = keymat.len().saturating_sub(AeadAlg::SALT_LEN);
        let backend = if Backend::Ring.supports(alg, key_len, icv_len) {
            Backend::Ring
        } else {
            Backend::RustCrypto
        };
        Self::with_backend(alg, keymat, icv_len, backend)
    }

    /// As [`Aead::new`], on the backend given. Asking for [`Backend::Ring`] where
    /// [`Backend::supports`] says no (AES-192, an 8- or 12-byte ICV, or a build without the
    /// `ring` feature) is an [`Error::InvalidSa`].
    pub fn with_backend(alg: AeadAlg, keymat: &[u8], icv_len: usize, backend: Backend) -> Result<Self, Error> {
        alg.check_key(keymat.len())?;
        alg.check_icv_bits(icv_len * 8)?;
        let (key, salt) = keymat.split_at(keymat.len() - AeadAlg::SALT_LEN);
        if !backend.supports(alg, key.len(), icv_len) {
            return Err(RING_REFUSED);
        }
        let bad = Error::KeyLength {
            alg: alg.name(),
            expected: "valid",
            got: keymat.len(),
        };
        let inner = match backend {
            #[cfg(feature = "ring")]
            Backend::Ring => {
                let ralg = match (alg, key.len()) {
                    (AeadAlg::AesGcm, 16) => &ring::aead::AES_128_GCM,
                    (AeadAlg::AesGcm, _) => &ring::aead::AES_256_GCM,
                    (AeadAlg::ChaCha20Poly1305, _) => &ring::aead::CHACHA20_POLY1305,
                };
                Inner::Ring(ring::aead::LessSafeKey::new(
                    ring::aead::UnboundKey::new(ralg, key).map_err(|_| bad)?,
                ))
            }
            #[cfg(not(feature = "ring"))]
            Backend::Ring => return Err(RING_REFUSED),
            Backend::RustCrypto => match (alg, key.len()) {
                (AeadAlg::AesGcm, 16) => {
                    Inner::Gcm128(Box::new(Gcm::new(aes::Aes128::new_from_slice(key).map_err(|_| bad)?)))
                }
                (AeadAlg::AesGcm, 24) => {
                    Inner::Gcm192(Box::new(Gcm::new(aes::Aes192::new_from_slice(key).map_err(|_| bad)?)))
                }
                (AeadAlg::AesGcm, _) => {
                    Inner::Gcm256(Box::new(Gcm::new(aes::Aes256::new_from_slice(key).map_err(|_| bad)?)))
                }
                (AeadAlg::ChaCha20Poly1305, _) => {
                    Inner::ChaCha(chacha20poly1305::ChaCha20Poly1305::new_from_slice(key).map_err(|_| bad)?)
                }
            },
        };
        let mut s = [0u8; 4];
        s.copy_from_slice(salt);
        Ok(Aead {
            inner,
            salt: s,
            icv_len,
        })
    }

    /// The backend this AEAD runs on.
    pub fn backend(&self) -> Backend {
        match self.inner {
            #[cfg(feature = "ring")]
            Inner::Ring(_) => Backend::Ring,
            _ => Backend::RustCrypto,
        }
    }

    /// ICV length in bytes.
    #[inline]
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }

    #[inline]
    fn nonce(&self, iv: &[u8; 8]) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(iv);
        n
    }

    fn j0(&self, iv: &[u8; 8]) -> [u8; 16] {
        let mut j = [0u8; 16];
        j[..12].copy_from_slice(&self.nonce(iv));
        j[15] = 1;
        j
    }

    /// Encrypts `data` in place and writes the ICV (`icv_len` bytes) to `icv`.
    #[inline]
    pub fn seal(&self, iv: &[u8; 8], aad: &[u8], data: &mut [u8], icv: &mut [u8]) -> Result<(), Error> {
        if icv.len() != self.icv_len {
            return Err(Error::NoTailroom);
        }
        match &self.inner {
            Inner::Gcm128(g) => g.seal(&self.j0(iv), aad, data, icv),
            Inner::Gcm192(g) => g.seal(&self.j0(iv), aad, data, icv),
            Inner::Gcm256(g) => g.seal(&self.j0(iv), aad, data, icv),
            Inner::ChaCha(c) => {
                let tag = c
                    .encrypt_in_place_detached(&self.nonce(iv).into(), aad, data)
                    .map_err(|_| Error::TooBig)?;
                icv.copy_from_slice(&tag);
            }
            #[cfg(feature = "ring")]
            Inner::Ring(k) => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(self.nonce(iv));
                let tag = k
                    .seal_in_place_separate_tag(nonce, ring::aead::Aad::from(aad), data)
                    .map_err(|_| Error::TooBig)?;
                icv.copy_from_slice(tag.as_ref());
            }
        }
        Ok(())
    }

    /// Verifies `icv` over `aad` and the ciphertext `data` in constant time and decrypts `data`
    /// in place. On [`Error::BadIcv`] no plaintext is given back: the RustCrypto backend checks
    /// before it decrypts and leaves `data` as it was; ring decrypts and authenticates in one
    /// pass and overwrites `data` with zeros when the tags differ.
    #[inline]
    pub fn open(&self, iv: &[u8; 8], aad: &[u8], data: &mut [u8], icv: &[u8]) -> Result<(), Error> {
        if icv.len() != self.icv_len {
            return Err(Error::Truncated);
        }
        match &self.inner {
            Inner::Gcm128(g) => g.open(&self.j0(iv), aad, data, icv)?,
            Inner::Gcm192(g) => g.open(&self.j0(iv), aad, data, icv)?,
            Inner::Gcm256(g) => g.open(&self.j0(iv), aad, data, icv)?,
            Inner::ChaCha(c) => {
                // The crate computes and compares the Poly1305 tag (in constant time) before it
                // applies the keystream.
                c.decrypt_in_place_detached(&self.nonce(iv).into(), aad, data, icv.into())
                    .map_err(|_| Error::BadIcv)?;
            }
            #[cfg(feature = "ring")]
            Inner::Ring(k) => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(self.nonce(iv));
                let tag = ring::aead::Tag::try_from(icv).map_err(|_| Error::Truncated)?;
                // ring compares the tags in constant time and zeroes `data` if they differ.
                k.open_in_place_separate_tag(nonce, ring::aead::Aad::from(aad), tag, data, 0..)
                    .map_err(|_| Error::BadIcv)?;
            }
        }
        Ok(())
    }

    /// Encrypts in place with the ICV after the data, as ESP lays a packet out: `buf` is the
    /// plaintext followed by [`Aead::icv_len`] bytes of room, where the ICV is written.
    /// [`Error::NoTailroom`] if `buf` is shorter than the ICV.
    pub fn seal_in_place(&self, iv: &[u8; 8], aad: &[u8], buf: &mut [u8]) -> Result<(), Error> {
        let n = buf.len().checked_sub(self.icv_len).ok_or(Error::NoTailroom)?;
        let (data, icv) = buf.split_at_mut(n);
        self.seal(iv, aad, data, icv)
    }

    /// Verifies and decrypts in place: `buf` is the ciphertext followed by the ICV. On success
    /// the plaintext is `buf[..buf.len() - icv_len]`; the ICV bytes are left as they were.
    /// [`Error::Truncated`] if `buf` is shorter than the ICV, [`Error::BadIcv`] (with no
    /// plaintext given back, as for [`Aead::open`]) if the ICV does not verify.
    pub fn open_in_place(&self, iv: &[u8; 8], aad: &[u8], buf: &mut [u8]) -> Result<(), Error> {
        let n = buf.len().checked_sub(self.icv_len).ok_or(Error::Truncated)?;
        let (data, icv) = buf.split_at_mut(n);
        self.open(iv, aad, data, icv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use hex::decode as h;

    /// The backends that can run the case, checked against [`Backend::supports`] by asking
    /// for each: ring must refuse exactly the cases it does not do.
    fn backends(alg: AeadAlg, keymat: &[u8], icv_len: usize) -> Vec<Backend> {
        let ring_case = cfg!(feature = "ring") && icv_len == 16 && keymat.len() != 24 + AeadAlg::SALT_LEN;
        let ring = Aead::with_backend(alg, keymat, icv_len, Backend::Ring);
        assert_eq!(ring.is_ok(), ring_case, "{alg:?} key {} icv {icv_len}", keymat.len());
        if !ring_case {
            assert_eq!(ring.err(), Some(RING_REFUSED));
        }
        // `new` takes ring wherever ring does the case.
        let picked = Aead::new(alg, keymat, icv_len).unwrap().backend();
        assert_eq!(picked == Backend::Ring, ring_case);
        if ring_case {
            vec![Backend::Ring, Backend::RustCrypto]
        } else {
            vec![Backend::RustCrypto]
        }
    }

    /// Seals `pt` to `ct` || `tag` under every backend that does the case, with both API
    /// shapes, and checks that a flipped ciphertext bit is refused without releasing plaintext.
    fn run(alg: AeadAlg, keymat: &str, iv: &str, aad: &str, pt: &str, ct: &str, tag: &str) {
        let tag = h(tag).unwrap();
        let keymat = h(keymat).unwrap();
        let iv: [u8; 8] = h(iv).unwrap().try_into().unwrap();
        let aad = h(aad).unwrap();
        let pt = h(pt).unwrap();
        for backend in backends(alg, &keymat, tag.len()) {
            let a = Aead::with_backend(alg, &keymat, tag.len(), backend).unwrap();
            assert_eq!(a.backend(), backend);

            // Detached ICV.
            let mut data = pt.clone();
            let mut icv = vec![0u8; tag.len()];
            a.seal(&iv, &aad, &mut data, &mut icv).unwrap();
            assert_eq!(hex::encode(&data), ct, "{backend:?}");
            assert_eq!(icv, tag, "{backend:?}");
            // A flipped ciphertext bit is caught before any plaintext is released: RustCrypto
            // leaves the data as it was, ring zeroes it.
            let mut bad = data.clone();
            bad[0] ^= 1;
            let copy = bad.clone();
            assert_eq!(a.open(&iv, &aad, &mut bad, &icv), Err(Error::BadIcv), "{backend:?}");
            match backend {
                Backend::RustCrypto => assert_eq!(bad, copy),
                Backend::Ring => assert!(bad.iter().all(|&b| b == 0)),
            }
            a.open(&iv, &aad, &mut data, &icv).unwrap();
            assert_eq!(data, pt, "{backend:?}");

            // Contiguous: plaintext || room for the ICV.
            let mut buf = pt.clone();
            buf.extend_from_slice(&vec![0u8; tag.len()]);
            a.seal_in_place(&iv, &aad, &mut buf).unwrap();
            assert_eq!(hex::encode(&buf[..pt.len()]), ct, "{backend:?}");
            assert_eq!(buf[pt.len()..], tag[..], "{backend:?}");
            let last = buf.len() - 1;
            buf[last] ^= 0x80;
            assert_eq!(a.open_in_place(&iv, &aad, &mut buf), Err(Error::BadIcv), "{backend:?}");
            assert_ne!(buf[..pt.len()], pt[..]);
            // Rebuild the sealed buffer (ring zeroed the ciphertext) and open it.
            buf[..pt.len()].copy_from_slice(&h(ct).unwrap());
            buf[last] ^= 0x80;
            a.open_in_place(&iv, &aad, &mut buf).unwrap();
            assert_eq!(buf[..pt.len()], pt[..], "{backend:?}");
            assert_eq!(buf[pt.len()..], tag[..], "the ICV bytes are left as they were");

            // Shorter than the ICV.
            let mut short = vec![0u8; tag.len() - 1];
            assert_eq!(a.open_in_place(&iv, &aad, &mut short), Err(Error::Truncated));
            assert_eq!(a.seal_in_place(&iv, &aad, &mut short), Err(Error::NoTailroom));
        }
    }

    /// AES-192-GCM (McGrew & Viega test case 10) runs on RustCrypto only: ring refuses it.
    #[test]
    fn gcm_spec_case10_aes192() {
        run(
            AeadAlg::AesGcm,
            "feffe9928665731c6d6a8f9467308308feffe9928665731ccafebabe",
            "facedbaddecaf888",
            "feedfacedeadbeeffeedfacedeadbeefabaddad2",
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
            "3980ca0b3c00e841eb06fac4872a2757859e1ceaa6efd984628593b40ca1e19c7d773d00c144c525ac619d18c84a3f4718e2448b2fe324d9ccda2710",
            "2519498e80f1478f37ba55bd6d27618c",
        );
    }

    /// McGrew & Viega GCM spec test case 4 (AES-128, 60-byte plaintext with AAD). The 12-byte
    /// IV cafebabefacedbaddecaf888 is split as salt cafebabe || IV facedbaddecaf888.
    #[test]
    fn gcm_spec_case4() {
        run(
            AeadAlg::AesGcm,
            "feffe9928665731c6d6a8f9467308308cafebabe",
            "facedbaddecaf888",
            "feedfacedeadbeeffeedfacedeadbeefabaddad2",
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
            "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
            "5bc94fbc3221a5db94fae95ae7121a47",
        );
    }

    /// The same case with the ICV truncated to 8 and 12 bytes (RFC 4106 section 8.1): RustCrypto
    /// only, ring refuses them (checked in `backends`).
    #[test]
    fn gcm_truncated_icvs() {
        for n in [8usize, 12] {
            let full = "5bc94fbc3221a5db94fae95ae7121a47";
            run(
                AeadAlg::AesGcm,
                "feffe9928665731c6d6a8f9467308308cafebabe",
                "facedbaddecaf888",
                "feedfacedeadbeeffeedfacedeadbeefabaddad2",
                "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
                &full[..n * 2],
            );
        }
    }

    /// McGrew & Viega GCM spec test case 16 (AES-256 with AAD).
    #[test]
    fn gcm_spec_case16() {
        run(
            AeadAlg::AesGcm,
            "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308cafebabe",
            "facedbaddecaf888",
            "feedfacedeadbeeffeedfacedeadbeefabaddad2",
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
            "76fc6ece0f4e1768cddf8853bb2d551b",
        );
    }

    /// RFC 7539 section 2.8.2: the AEAD test vector. Nonce 070000004041424344454647 is salt
    /// 07000000 || IV 4041424344454647.
    #[test]
    fn chacha20poly1305_rfc7539() {
        let pt: Vec<u8> = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        run(
            AeadAlg::ChaCha20Poly1305,
            "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f07000000",
            "4041424344454647",
            "50515253c0c1c2c3c4c5c6c7",
            &hex::encode(pt),
            "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
            "1ae10b594f09e26a7e902ecbd0600691",
        );
    }
}
