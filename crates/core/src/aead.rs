//! Combined-mode ESP ciphers: AES-GCM as RFC 4106 uses it (with 8, 12 or 16-byte ICVs) and
//! ChaCha20-Poly1305 as RFC 7634 uses it. The nonce is the SA's 4-byte salt followed by the
//! packet's 8-byte explicit IV (RFC 4106 section 4, RFC 7634 section 2).

use crate::alg::AeadAlg;
use crate::error::Error;
use aes::cipher::{BlockEncrypt, KeyInit};
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

// One of these per SA, never per packet, so the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Inner {
    Gcm128(Gcm<aes::Aes128>),
    Gcm192(Gcm<aes::Aes192>),
    Gcm256(Gcm<aes::Aes256>),
    ChaCha(chacha20poly1305::ChaCha20Poly1305),
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
    /// Sets up `alg` with `keymat` (key followed by the 4-byte salt) and an ICV of `icv_len` bytes.
    pub fn new(alg: AeadAlg, keymat: &[u8], icv_len: usize) -> Result<Self, Error> {
        alg.check_key(keymat.len())?;
        alg.check_icv_bits(icv_len * 8)?;
        let (key, salt) = keymat.split_at(keymat.len() - AeadAlg::SALT_LEN);
        let bad = |_| Error::KeyLength {
            alg: alg.name(),
            expected: "valid",
            got: keymat.len(),
        };
        let inner = match (alg, key.len()) {
            (AeadAlg::AesGcm, 16) => Inner::Gcm128(Gcm::new(aes::Aes128::new_from_slice(key).map_err(bad)?)),
            (AeadAlg::AesGcm, 24) => Inner::Gcm192(Gcm::new(aes::Aes192::new_from_slice(key).map_err(bad)?)),
            (AeadAlg::AesGcm, _) => Inner::Gcm256(Gcm::new(aes::Aes256::new_from_slice(key).map_err(bad)?)),
            (AeadAlg::ChaCha20Poly1305, _) => {
                Inner::ChaCha(chacha20poly1305::ChaCha20Poly1305::new_from_slice(key).map_err(bad)?)
            }
        };
        let mut s = [0u8; 4];
        s.copy_from_slice(salt);
        Ok(Aead {
            inner,
            salt: s,
            icv_len,
        })
    }

    /// ICV length in bytes.
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }

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
        }
        Ok(())
    }

    /// Verifies `icv` over `aad` and the ciphertext `data`, in constant time, and only then
    /// decrypts `data` in place.
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
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use hex::decode as h;

    fn run(alg: AeadAlg, keymat: &str, iv: &str, aad: &str, pt: &str, ct: &str, tag: &str) {
        let tag = h(tag).unwrap();
        let a = Aead::new(alg, &h(keymat).unwrap(), tag.len()).unwrap();
        let iv: [u8; 8] = h(iv).unwrap().try_into().unwrap();
        let aad = h(aad).unwrap();
        let mut data = h(pt).unwrap();
        let mut icv = vec![0u8; tag.len()];
        a.seal(&iv, &aad, &mut data, &mut icv).unwrap();
        assert_eq!(hex::encode(&data), ct);
        assert_eq!(icv, tag);
        // A flipped ciphertext bit is caught before decryption, and the data is left as it was.
        let mut bad = data.clone();
        bad[0] ^= 1;
        let copy = bad.clone();
        assert_eq!(a.open(&iv, &aad, &mut bad, &icv), Err(Error::BadIcv));
        assert_eq!(bad, copy);
        a.open(&iv, &aad, &mut data, &icv).unwrap();
        assert_eq!(data, h(pt).unwrap());
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

    /// The same case with the ICV truncated to 8 and 12 bytes (RFC 4106 section 8.1).
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
