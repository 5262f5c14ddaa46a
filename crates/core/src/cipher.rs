//! CBC block ciphers with their keys expanded once per SA (RFC 2405, RFC 2451, RFC 3602).

use crate::alg::EncAlg;
use crate::error::Error;
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit};

/// A keyed CBC cipher. The key schedule is computed in [`CbcCipher::new`] and reused for every
/// packet; the schedules are zeroized on drop (the `zeroize` features of `aes` and `des`).
#[derive(Clone)]
pub enum CbcCipher {
    /// The null cipher (RFC 2410): the identity.
    Null,
    /// DES-CBC.
    Des(des::Des),
    /// 3DES-EDE-CBC.
    Des3(des::TdesEde3),
    /// AES-128-CBC.
    Aes128(aes::Aes128),
    /// AES-192-CBC.
    Aes192(aes::Aes192),
    /// AES-256-CBC.
    Aes256(aes::Aes256),
}

impl core::fmt::Debug for CbcCipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self {
            CbcCipher::Null => "null",
            CbcCipher::Des(_) => "des-cbc",
            CbcCipher::Des3(_) => "3des-cbc",
            CbcCipher::Aes128(_) => "aes128-cbc",
            CbcCipher::Aes192(_) => "aes192-cbc",
            CbcCipher::Aes256(_) => "aes256-cbc",
        };
        f.write_str(name)
    }
}

fn enc<C>(cipher: &C, iv: &[u8], data: &mut [u8]) -> Result<(), Error>
where
    C: cbc::cipher::BlockEncrypt + cbc::cipher::BlockCipher + Clone,
{
    let e = cbc::Encryptor::<C>::inner_iv_slice_init(cipher.clone(), iv).map_err(|_| Error::InvalidSa("IV length"))?;
    let n = data.len();
    e.encrypt_padded_mut::<NoPadding>(data, n)
        .map_err(|_| Error::BadAlignment)?;
    Ok(())
}

fn dec<C>(cipher: &C, iv: &[u8], data: &mut [u8]) -> Result<(), Error>
where
    C: cbc::cipher::BlockDecrypt + cbc::cipher::BlockCipher + Clone,
{
    let d = cbc::Decryptor::<C>::inner_iv_slice_init(cipher.clone(), iv).map_err(|_| Error::InvalidSa("IV length"))?;
    d.decrypt_padded_mut::<NoPadding>(data)
        .map_err(|_| Error::BadAlignment)?;
    Ok(())
}

impl CbcCipher {
    /// Expands `key` for `alg`. The key length is checked.
    pub fn new(alg: EncAlg, key: &[u8]) -> Result<Self, Error> {
        alg.check_key(key.len())?;
        let bad = |_| Error::KeyLength {
            alg: alg.name(),
            expected: "valid",
            got: key.len(),
        };
        Ok(match (alg, key.len()) {
            (EncAlg::Null, _) => CbcCipher::Null,
            (EncAlg::DesCbc, _) => CbcCipher::Des(des::Des::new_from_slice(key).map_err(bad)?),
            (EncAlg::Des3Cbc, _) => CbcCipher::Des3(des::TdesEde3::new_from_slice(key).map_err(bad)?),
            (EncAlg::AesCbc, 16) => CbcCipher::Aes128(aes::Aes128::new_from_slice(key).map_err(bad)?),
            (EncAlg::AesCbc, 24) => CbcCipher::Aes192(aes::Aes192::new_from_slice(key).map_err(bad)?),
            (EncAlg::AesCbc, _) => CbcCipher::Aes256(aes::Aes256::new_from_slice(key).map_err(bad)?),
        })
    }

    /// Encrypts `data` (a whole number of blocks) in place with `iv`.
    pub fn encrypt(&self, iv: &[u8], data: &mut [u8]) -> Result<(), Error> {
        match self {
            CbcCipher::Null => Ok(()),
            CbcCipher::Des(c) => enc(c, iv, data),
            CbcCipher::Des3(c) => enc(c, iv, data),
            CbcCipher::Aes128(c) => enc(c, iv, data),
            CbcCipher::Aes192(c) => enc(c, iv, data),
            CbcCipher::Aes256(c) => enc(c, iv, data),
        }
    }

    /// Decrypts `data` (a whole number of blocks) in place with `iv`.
    pub fn decrypt(&self, iv: &[u8], data: &mut [u8]) -> Result<(), Error> {
        match self {
            CbcCipher::Null => Ok(()),
            CbcCipher::Des(c) => dec(c, iv, data),
            CbcCipher::Des3(c) => dec(c, iv, data),
            CbcCipher::Aes128(c) => dec(c, iv, data),
            CbcCipher::Aes192(c) => dec(c, iv, data),
            CbcCipher::Aes256(c) => dec(c, iv, data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex::decode as h;

    /// RFC 3602 section 4, case #1 (AES-128-CBC, one block).
    #[test]
    fn rfc3602_case1() {
        let c = CbcCipher::new(EncAlg::AesCbc, &h("06a9214036b8a15b512e03d534120006").unwrap()).unwrap();
        let iv = h("3dafba429d9eb430b422da802c9fac41").unwrap();
        let mut data = *b"Single block msg";
        c.encrypt(&iv, &mut data).unwrap();
        assert_eq!(data.to_vec(), h("e353779c1079aeb82708942dbe77181a").unwrap());
        c.decrypt(&iv, &mut data).unwrap();
        assert_eq!(&data, b"Single block msg");
    }

    /// RFC 3602 section 4, case #2 (AES-128-CBC, two blocks).
    #[test]
    fn rfc3602_case2() {
        let c = CbcCipher::new(EncAlg::AesCbc, &h("c286696d887c9aa0611bbb3e2025a45a").unwrap()).unwrap();
        let iv = h("562e17996d093d28ddb3ba695a2e6f58").unwrap();
        let mut data = h("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f").unwrap();
        c.encrypt(&iv, &mut data).unwrap();
        assert_eq!(
            data,
            h("d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1").unwrap()
        );
    }

    /// FIPS 81 / NBS DES test: key 0123456789abcdef, "Now is the time for all " in CBC.
    #[test]
    fn fips81_des_cbc() {
        let c = CbcCipher::new(EncAlg::DesCbc, &h("0123456789abcdef").unwrap()).unwrap();
        let iv = h("1234567890abcdef").unwrap();
        let mut data = *b"Now is the time for all ";
        c.encrypt(&iv, &mut data).unwrap();
        assert_eq!(
            data.to_vec(),
            h("e5c7cdde872bf27c43e934008c389c0f683788499a7c05f6").unwrap()
        );
    }

    #[test]
    fn misaligned_input_is_an_error() {
        let c = CbcCipher::new(EncAlg::AesCbc, &[0; 16]).unwrap();
        let mut data = [0u8; 17];
        assert_eq!(c.encrypt(&[0; 16], &mut data), Err(Error::BadAlignment));
        assert!(c.decrypt(&[0; 16], &mut data).is_err());
        assert!(CbcCipher::new(EncAlg::Des3Cbc, &[0; 8]).is_err());
    }
}
