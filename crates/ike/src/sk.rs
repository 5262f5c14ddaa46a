//! The Encrypted and Authenticated payload SK (RFC 7296 section 3.14) with AES-CBC plus
//! HMAC-SHA2 (RFC 3602, RFC 4868) or AES-GCM with a 16-byte ICV (RFC 5282); and, when a
//! configuration names them, 3DES-CBC (RFC 2451, 8-byte blocks and IV) and HMAC-SHA1-96
//! (RFC 2404). One [`SkCipher`] per direction, keys expanded once; integrity checked before
//! decryption.
use crate::alg::{Encr, Integ};
use crate::error::Error;
use crate::header::{HeaderRepr, HEADER_LEN};
use crate::limits::MAX_MESSAGE_LEN;
use crate::payload::{emit_generic_header, kind, GENERIC_HEADER_LEN};
use aes::cipher::{
    Block, BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, InnerIvInit, KeyInit,
};
use aes_gcm::aead::AeadInPlace;
use alloc::boxed::Box;
use alloc::vec::Vec;
use hmac::{Hmac, Mac};
use rand_core::CryptoRngCore;
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

enum Engine {
    Gcm128(Box<aes_gcm::Aes128Gcm>, [u8; 4]),
    Gcm256(Box<aes_gcm::Aes256Gcm>, [u8; 4]),
    Cbc128(Box<aes::Aes128>),
    Cbc256(Box<aes::Aes256>),
    Cbc192(Box<aes::Aes192>),
    Des3(Box<des::TdesEde3>),
}

/// The integrity key of a non-AEAD suite. Boxed: an HMAC's two keyed states take up to 300
/// bytes (SHA-512), which inline made every `SkCipher` that large, the AEAD suites' (which
/// have none) included: two per IKE SA (issue #36 item 6).
enum MacKey {
    None,
    S1(Box<Hmac<Sha1>>),
    S256(Box<Hmac<Sha256>>),
    S384(Box<Hmac<Sha384>>),
    S512(Box<Hmac<Sha512>>),
}

/// The SK payload protection of one direction of an IKE SA.
pub struct SkCipher {
    engine: Engine,
    mac: MacKey,
    icv_len: usize,
    /// Next GCM IV: a counter, so an IV never repeats under one key (RFC 5282 3.1).
    next_iv: u64,
}

impl core::fmt::Debug for SkCipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SkCipher(..)")
    }
}

impl SkCipher {
    /// Expands SK_e (with the 4 salt bytes at its end for GCM, RFC 5282 7.1) and SK_a.
    pub fn new(encr: Encr, integ: Option<Integ>, sk_e: &[u8], sk_a: &[u8]) -> Result<Self, Error> {
        if sk_e.len() != encr.keymat_len() {
            return Err(Error::BadLength);
        }
        let salt = |k: &[u8]| -> [u8; 4] {
            let mut s = [0; 4];
            s.copy_from_slice(&k[k.len() - 4..]);
            s
        };
        let engine = match encr {
            Encr::AesGcm16_128 => Engine::Gcm128(
                Box::new(aes_gcm::Aes128Gcm::new_from_slice(&sk_e[..16]).map_err(|_| Error::BadLength)?),
                salt(sk_e),
            ),
            Encr::AesGcm16_256 => Engine::Gcm256(
                Box::new(aes_gcm::Aes256Gcm::new_from_slice(&sk_e[..32]).map_err(|_| Error::BadLength)?),
                salt(sk_e),
            ),
            Encr::AesCbc128 => Engine::Cbc128(Box::new(
                aes::Aes128::new_from_slice(sk_e).map_err(|_| Error::BadLength)?,
            )),
            Encr::AesCbc256 => Engine::Cbc256(Box::new(
                aes::Aes256::new_from_slice(sk_e).map_err(|_| Error::BadLength)?,
            )),
            Encr::AesCbc192 => Engine::Cbc192(Box::new(
                aes::Aes192::new_from_slice(sk_e).map_err(|_| Error::BadLength)?,
            )),
            // RFC 2451 2.3: the three DES keys in order, parity bits ignored.
            Encr::TripleDes => Engine::Des3(Box::new(
                des::TdesEde3::new_from_slice(sk_e).map_err(|_| Error::BadLength)?,
            )),
            Encr::ChaCha20Poly1305 => return Err(Error::BadProposal),
        };
        let (mac, icv_len) = match (encr.is_aead(), integ) {
            (true, None) => (MacKey::None, 16),
            (false, Some(i)) => {
                if sk_a.len() != i.key_len() {
                    return Err(Error::BadLength);
                }
                let m = match i {
                    Integ::HmacSha1_96 => MacKey::S1(Box::new(
                        <Hmac<Sha1> as KeyInit>::new_from_slice(sk_a).map_err(|_| Error::BadLength)?,
                    )),
                    Integ::HmacSha256_128 => MacKey::S256(Box::new(
                        <Hmac<Sha256> as KeyInit>::new_from_slice(sk_a).map_err(|_| Error::BadLength)?,
                    )),
                    Integ::HmacSha384_192 => MacKey::S384(Box::new(
                        <Hmac<Sha384> as KeyInit>::new_from_slice(sk_a).map_err(|_| Error::BadLength)?,
                    )),
                    Integ::HmacSha512_256 => MacKey::S512(Box::new(
                        <Hmac<Sha512> as KeyInit>::new_from_slice(sk_a).map_err(|_| Error::BadLength)?,
                    )),
                };
                (m, i.icv_len())
            }
            _ => return Err(Error::BadProposal),
        };
        Ok(SkCipher {
            engine,
            mac,
            icv_len,
            next_iv: 1,
        })
    }

    fn iv_len(&self) -> usize {
        match self.engine {
            Engine::Gcm128(..) | Engine::Gcm256(..) | Engine::Des3(_) => 8,
            _ => 16,
        }
    }

    fn block_len(&self) -> usize {
        match self.engine {
            Engine::Gcm128(..) | Engine::Gcm256(..) => 1,
            Engine::Des3(_) => 8,
            _ => 16,
        }
    }

    /// Bytes the SK payload adds around the inner payloads, at most (for size planning).
    pub fn overhead(&self) -> usize {
        GENERIC_HEADER_LEN + self.iv_len() + self.block_len() + self.icv_len
    }

    fn mac(&self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        let full = match &self.mac {
            MacKey::None => Vec::new(),
            MacKey::S1(m) => (**m).clone().chain_update(data).finalize().into_bytes().to_vec(),
            MacKey::S256(m) => (**m).clone().chain_update(data).finalize().into_bytes().to_vec(),
            MacKey::S384(m) => (**m).clone().chain_update(data).finalize().into_bytes().to_vec(),
            MacKey::S512(m) => (**m).clone().chain_update(data).finalize().into_bytes().to_vec(),
        };
        let mut v = Zeroizing::new(full);
        v.truncate(self.icv_len);
        v
    }

    /// Builds a whole message: `header` (its Next Payload and Length are set here), one SK
    /// payload whose Next Payload is `first_inner`, and the inner payload chain `inner`
    /// encrypted and authenticated (3.14; RFC 5282 5.1 for the GCM AAD: the IKE header
    /// and the SK payload's generic header).
    pub fn seal(
        &mut self,
        header: &HeaderRepr,
        first_inner: u8,
        inner: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        self.seal_payload(header, kind::SK, first_inner, &[], inner, rng)
    }

    /// Plaintext bytes (padding and its length byte included) for `inner` bytes of payloads.
    fn plaintext_len(&self, inner: usize) -> usize {
        let bl = self.block_len();
        inner + (bl - (inner + 1) % bl) % bl + 1
    }

    /// The length of the whole message [`SkCipher::seal`] builds around `inner` bytes.
    pub fn sealed_len(&self, inner: usize) -> usize {
        HEADER_LEN + GENERIC_HEADER_LEN + self.iv_len() + self.plaintext_len(inner) + self.icv_len
    }

    /// The most inner payload bytes whose IV, padded ciphertext and ICV fit in `room` bytes
    /// (for the fragments of RFC 7383 2.5.3); 0 when not even one fits.
    pub fn max_inner(&self, room: usize) -> usize {
        let Some(ct) = room.checked_sub(self.iv_len() + self.icv_len) else {
            return 0;
        };
        let bl = self.block_len();
        (ct - ct % bl).saturating_sub(1)
    }

    /// Builds a message whose one payload is of type `payload` (SK, or SKF for RFC 7383):
    /// its generic header with Next Payload `first_inner`, then `fields` (SKF's Fragment
    /// Number and Total Fragments), then the IV, the encrypted `inner` and the ICV. The
    /// AAD (GCM) and the ICV (CBC) cover everything before the IV, resp. the ICV.
    pub fn seal_payload(
        &mut self,
        header: &HeaderRepr,
        payload: u8,
        first_inner: u8,
        fields: &[u8],
        inner: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        let iv_len = self.iv_len();
        // Padding: the pad length byte included, the plaintext a multiple of the block.
        let pt_len = self.plaintext_len(inner.len());
        let pad = pt_len - inner.len() - 1;
        let sk_len = GENERIC_HEADER_LEN + fields.len() + iv_len + pt_len + self.icv_len;
        let total = HEADER_LEN + sk_len;
        if total > MAX_MESSAGE_LEN {
            return Err(Error::MessageTooLong);
        }
        let mut msg = alloc::vec![0u8; total];
        let mut h = *header;
        h.next_payload = payload;
        h.length = total as u32;
        h.emit(&mut msg)?;
        emit_generic_header(&mut msg[HEADER_LEN..], first_inner, false, sk_len)?;
        let fields_at = HEADER_LEN + GENERIC_HEADER_LEN;
        msg[fields_at..fields_at + fields.len()].copy_from_slice(fields);
        let iv_at = fields_at + fields.len();
        let ct_at = iv_at + iv_len;
        let icv_at = ct_at + pt_len;
        msg[ct_at..ct_at + inner.len()].copy_from_slice(inner);
        msg[icv_at - 1] = pad as u8;
        match &self.engine {
            Engine::Gcm128(..) | Engine::Gcm256(..) => {
                let iv = self.next_iv.to_be_bytes();
                self.next_iv = self.next_iv.wrapping_add(1);
                msg[iv_at..ct_at].copy_from_slice(&iv);
                let (aad, rest) = msg.split_at_mut(iv_at);
                let (pt, tag_out) = rest[iv_len..].split_at_mut(pt_len);
                let tag = match &self.engine {
                    Engine::Gcm128(c, salt) => c.encrypt_in_place_detached(&nonce(salt, &iv).into(), aad, pt),
                    Engine::Gcm256(c, salt) => c.encrypt_in_place_detached(&nonce(salt, &iv).into(), aad, pt),
                    _ => return Err(Error::BadProposal),
                }
                .map_err(|_| Error::MessageTooLong)?;
                tag_out.copy_from_slice(&tag);
            }
            Engine::Cbc128(_) | Engine::Cbc256(_) | Engine::Cbc192(_) | Engine::Des3(_) => {
                rng.fill_bytes(&mut msg[iv_at..ct_at]);
                let (head, pt) = msg[..icv_at].split_at_mut(ct_at);
                let iv = &head[iv_at..];
                match &self.engine {
                    Engine::Cbc128(c) => cbc_encrypt::<aes::Aes128>(c, iv, pt)?,
                    Engine::Cbc256(c) => cbc_encrypt::<aes::Aes256>(c, iv, pt)?,
                    Engine::Cbc192(c) => cbc_encrypt::<aes::Aes192>(c, iv, pt)?,
                    Engine::Des3(c) => cbc_encrypt::<des::TdesEde3>(c, iv, pt)?,
                    _ => {}
                }
                let icv = self.mac(&msg[..icv_at]);
                msg[icv_at..].copy_from_slice(&icv);
            }
        }
        Ok(msg)
    }

    /// Opens the SK payload of a whole received message. `sk_offset` is the offset of the
    /// SK payload's generic header in `msg` (the last payload, 3.14). Returns the inner
    /// payload chain (the first inner type is the SK payload's Next Payload).
    pub fn open(&self, msg: &[u8], sk_offset: usize) -> Result<Zeroizing<Vec<u8>>, Error> {
        self.open_at(msg, sk_offset.checked_add(GENERIC_HEADER_LEN).ok_or(Error::Truncated)?)
    }

    /// Opens an encrypted payload that ends the message and whose IV starts at `iv_at`
    /// (SK: after its generic header; SKF: after its Fragment Number and Total Fragments,
    /// RFC 7383 2.5): the ICV (CBC) or the AAD (GCM) covers `msg[..iv_at]` and more.
    pub fn open_at(&self, msg: &[u8], iv_at: usize) -> Result<Zeroizing<Vec<u8>>, Error> {
        let iv_len = self.iv_len();
        let ct_at = iv_at.checked_add(iv_len).ok_or(Error::Truncated)?;
        if msg.len() < ct_at + self.icv_len + 1 {
            return Err(Error::Truncated);
        }
        let icv_at = msg.len() - self.icv_len;
        let ct_len = icv_at - ct_at;
        if !ct_len.is_multiple_of(self.block_len()) {
            return Err(Error::BadLength);
        }
        let mut pt = Zeroizing::new(msg[ct_at..icv_at].to_vec());
        match &self.engine {
            Engine::Gcm128(..) | Engine::Gcm256(..) => {
                let iv: [u8; 8] = msg[iv_at..ct_at].try_into().map_err(|_| Error::Truncated)?;
                let tag = aes_gcm::Tag::clone_from_slice(&msg[icv_at..]);
                let aad = &msg[..iv_at];
                let r = match &self.engine {
                    Engine::Gcm128(c, salt) => {
                        c.decrypt_in_place_detached(&nonce(salt, &iv).into(), aad, &mut pt, &tag)
                    }
                    Engine::Gcm256(c, salt) => {
                        c.decrypt_in_place_detached(&nonce(salt, &iv).into(), aad, &mut pt, &tag)
                    }
                    _ => return Err(Error::BadProposal),
                };
                r.map_err(|_| Error::BadIntegrity)?;
            }
            Engine::Cbc128(_) | Engine::Cbc256(_) | Engine::Cbc192(_) | Engine::Des3(_) => {
                let icv = self.mac(&msg[..icv_at]);
                if !bool::from(icv.ct_eq(&msg[icv_at..])) {
                    return Err(Error::BadIntegrity);
                }
                let iv = &msg[iv_at..ct_at];
                match &self.engine {
                    Engine::Cbc128(c) => cbc_decrypt::<aes::Aes128>(c, iv, &mut pt)?,
                    Engine::Cbc256(c) => cbc_decrypt::<aes::Aes256>(c, iv, &mut pt)?,
                    Engine::Cbc192(c) => cbc_decrypt::<aes::Aes192>(c, iv, &mut pt)?,
                    Engine::Des3(c) => cbc_decrypt::<des::TdesEde3>(c, iv, &mut pt)?,
                    _ => {}
                }
            }
        }
        let pad = *pt.last().ok_or(Error::BadPadding)? as usize;
        if pad + 1 > pt.len() {
            return Err(Error::BadPadding);
        }
        let n = pt.len() - pad - 1;
        pt.truncate(n);
        Ok(pt)
    }
}

fn nonce(salt: &[u8; 4], iv: &[u8; 8]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(salt);
    n[4..].copy_from_slice(iv);
    n
}

/// CBC encryption of whole blocks in place with block cipher `C` (AES: 16-byte blocks, 3DES:
/// 8) and an IV of one block.
fn cbc_encrypt<C: BlockCipher + BlockEncryptMut + BlockEncrypt + Clone>(
    c: &C,
    iv: &[u8],
    data: &mut [u8],
) -> Result<(), Error> {
    let mut e = cbc::Encryptor::<C>::inner_iv_slice_init(c.clone(), iv).map_err(|_| Error::BadLength)?;
    for b in data.chunks_exact_mut(C::block_size()) {
        e.encrypt_block_mut(Block::<C>::from_mut_slice(b));
    }
    Ok(())
}

/// CBC decryption of whole blocks in place (see [`cbc_encrypt`]).
fn cbc_decrypt<C: BlockCipher + BlockDecryptMut + BlockDecrypt + Clone>(
    c: &C,
    iv: &[u8],
    data: &mut [u8],
) -> Result<(), Error> {
    let mut d = cbc::Decryptor::<C>::inner_iv_slice_init(c.clone(), iv).map_err(|_| Error::BadLength)?;
    for b in data.chunks_exact_mut(C::block_size()) {
        d.decrypt_block_mut(Block::<C>::from_mut_slice(b));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hdr;
    use rand_core::SeedableRng;

    #[test]
    fn seal_open_every_suite_and_tamper() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        for (e, i) in [
            (Encr::AesGcm16_128, None),
            (Encr::AesGcm16_256, None),
            (Encr::AesCbc128, Some(Integ::HmacSha256_128)),
            (Encr::AesCbc256, Some(Integ::HmacSha384_192)),
            (Encr::AesCbc256, Some(Integ::HmacSha512_256)),
            (Encr::AesCbc192, Some(Integ::HmacSha256_128)),
            (Encr::TripleDes, Some(Integ::HmacSha1_96)),
            (Encr::AesCbc256, Some(Integ::HmacSha1_96)),
        ] {
            let ke = alloc::vec![7u8; e.keymat_len()];
            let ka = alloc::vec![9u8; i.map_or(0, |i| i.key_len())];
            let mut s = SkCipher::new(e, i, &ke, &ka).unwrap();
            for len in [0usize, 1, 15, 16, 17, 100] {
                let inner: Vec<u8> = (0..len as u8).collect();
                let m = s.seal(&hdr(), 41, &inner, &mut rng).unwrap();
                assert_eq!(&s.open(&m, HEADER_LEN).unwrap()[..], &inner[..]);
                for k in [0, 20, HEADER_LEN + 2, m.len() - 1, m.len() / 2] {
                    let mut t = m.clone();
                    t[k] ^= 0x40;
                    assert!(s.open(&t, HEADER_LEN).is_err(), "{e:?} tamper at {k}");
                }
                assert!(s.open(&m[..m.len() - 1], HEADER_LEN).is_err());
            }
        }
    }

    /// Gives `self.0` as its random bytes: the IV a test expects.
    struct FixedIv(Vec<u8>);
    impl rand_core::RngCore for FixedIv {
        fn next_u32(&mut self) -> u32 {
            0
        }
        fn next_u64(&mut self) -> u64 {
            0
        }
        fn fill_bytes(&mut self, d: &mut [u8]) {
            d.copy_from_slice(&self.0[..d.len()]);
        }
        fn try_fill_bytes(&mut self, d: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(d);
            Ok(())
        }
    }
    impl rand_core::CryptoRng for FixedIv {}

    // NIST SP 800-67 Rev. 1 Appendix B: the TDEA example (three keys, "The qufck brown fox
    // jump" in ECB mode), block by block: the key order of RFC 2451 2.3 (K1 | K2 | K3).
    #[test]
    fn tdes_nist_sp800_67_example() {
        let k = hex::decode("0123456789ABCDEF23456789ABCDEF01456789ABCDEF0123").unwrap();
        let c = des::TdesEde3::new_from_slice(&k).unwrap();
        let mut b = *b"The qufck brown fox jump";
        for blk in b.chunks_exact_mut(8) {
            c.encrypt_block(Block::<des::TdesEde3>::from_mut_slice(blk));
        }
        assert_eq!(hex::encode(b), "a826fd8ce53b855fcce21c8112256fe668d5c05dd9b6b900");
    }

    // NIST SP 800-38A F.2.3 CBC-AES192.Encrypt, first block.
    #[test]
    fn aes192_cbc_nist_sp800_38a() {
        let k = hex::decode("8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b").unwrap();
        let iv = hex::decode("000102030405060708090a0b0c0d0e0f").unwrap();
        let mut b = hex::decode("6bc1bee22e409f96e93d7e117393172a").unwrap();
        cbc_encrypt(&aes::Aes192::new_from_slice(&k).unwrap(), &iv, &mut b).unwrap();
        assert_eq!(hex::encode(&b), "4f021db243bc633d7178183a9fa071e8");
        cbc_decrypt(&aes::Aes192::new_from_slice(&k).unwrap(), &iv, &mut b).unwrap();
        assert_eq!(hex::encode(&b), "6bc1bee22e409f96e93d7e117393172a");
    }

    // An SK payload with ENCR_3DES and AUTH_HMAC_SHA1_96, the Windows client's default: the
    // 8-byte IV after the generic header, the ciphertext of `inner | pad length 0` as
    // `openssl enc -des-ede3-cbc -K <key> -iv <iv> -nopad` makes it, and the ICV the first
    // 12 bytes of HMAC-SHA1 (RFC 2404) over everything before it (3.14).
    #[test]
    fn sk_3des_sha1_openssl_vector() {
        let ke = hex::decode("0123456789ABCDEF23456789ABCDEF01456789ABCDEF0123").unwrap();
        let ka = [0x0bu8; 20];
        let iv = hex::decode("f69f2445df4f9b17").unwrap();
        let inner = b"The quick brown fox jum";
        let mut s = SkCipher::new(Encr::TripleDes, Some(Integ::HmacSha1_96), &ke, &ka).unwrap();
        let m = s.seal(&hdr(), 41, inner, &mut FixedIv(iv.clone())).unwrap();
        let at = HEADER_LEN + GENERIC_HEADER_LEN;
        assert_eq!(m.len(), at + 8 + 24 + 12);
        assert_eq!(&m[at..at + 8], &iv[..]);
        assert_eq!(
            hex::encode(&m[at + 8..at + 32]),
            "63693c3d378a862f8051ae7c2934a296248f6468560b51eb"
        );
        let full = crate::prf::prf(crate::alg::Prf::HmacSha1, &ka, &[&m[..at + 32]]);
        assert_eq!(&m[at + 32..], &full[..12]);
        assert_eq!(&s.open(&m, HEADER_LEN).unwrap()[..], &inner[..]);
        // A 3DES payload is a whole number of 8-byte blocks.
        let mut short = m[..at + 8 + 20].to_vec();
        short.extend_from_slice(&m[at + 32..]);
        assert!(s.open(&short, HEADER_LEN).is_err());
    }

    // RFC 4106-style GCM: NIST GCM test case 3 (AES-128, 96-bit IV split as salt | IV as
    // RFC 4106 section 4 does: the salt is the first 4 bytes of the nonce).
    #[test]
    fn gcm_nist_test_case_3() {
        let key = hex::decode("feffe9928665731c6d6a8f9467308308").unwrap();
        let nonce_b = hex::decode("cafebabefacedbaddecaf888").unwrap();
        let pt = hex::decode("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255").unwrap();
        let c = aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap();
        let salt: [u8; 4] = nonce_b[..4].try_into().unwrap();
        let iv: [u8; 8] = nonce_b[4..].try_into().unwrap();
        let mut buf = pt.clone();
        let tag = c
            .encrypt_in_place_detached(&nonce(&salt, &iv).into(), b"", &mut buf)
            .unwrap();
        assert_eq!(hex::encode(&buf), "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985");
        assert_eq!(hex::encode(tag), "4d5c2af327cd64a62cf35abd2ba6fab4");
    }
}
