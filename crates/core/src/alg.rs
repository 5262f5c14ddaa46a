//! The algorithm registry, with the names `ip xfrm` uses and the key and ICV lengths the
//! RFCs fix.

use crate::error::Error;

/// ESP encryption algorithms used with a separate integrity algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncAlg {
    /// `cipher_null`, RFC 2410.
    Null,
    /// `cbc(des)`, RFC 2405 (64-bit key with parity bits).
    DesCbc,
    /// `cbc(des3_ede)`, RFC 2451 (192-bit key).
    Des3Cbc,
    /// `cbc(aes)`, RFC 3602, with a 128, 192 or 256-bit key.
    AesCbc,
}

impl EncAlg {
    /// All encryption algorithms.
    pub const ALL: [EncAlg; 4] = [EncAlg::Null, EncAlg::DesCbc, EncAlg::Des3Cbc, EncAlg::AesCbc];

    /// The `ip xfrm` name.
    pub fn name(self) -> &'static str {
        match self {
            EncAlg::Null => "cipher_null",
            EncAlg::DesCbc => "cbc(des)",
            EncAlg::Des3Cbc => "cbc(des3_ede)",
            EncAlg::AesCbc => "cbc(aes)",
        }
    }
    /// Looks an algorithm up by its `ip xfrm` name (a few common aliases are accepted).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "cipher_null" | "ecb(cipher_null)" | "null" => EncAlg::Null,
            "cbc(des)" | "des" => EncAlg::DesCbc,
            "cbc(des3_ede)" | "des3_ede" | "3des" => EncAlg::Des3Cbc,
            "cbc(aes)" | "aes" => EncAlg::AesCbc,
            _ => return None,
        })
    }
    /// Checks a key length.
    pub fn check_key(self, len: usize) -> Result<(), Error> {
        let (ok, expected) = match self {
            EncAlg::Null => (len == 0, "0"),
            EncAlg::DesCbc => (len == 8, "8"),
            EncAlg::Des3Cbc => (len == 24, "24"),
            EncAlg::AesCbc => (matches!(len, 16 | 24 | 32), "16, 24 or 32"),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::KeyLength {
                alg: self.name(),
                expected,
                got: len,
            })
        }
    }
    /// Cipher block size in bytes (1 for the null cipher).
    pub fn block_size(self) -> usize {
        match self {
            EncAlg::Null => 1,
            EncAlg::DesCbc | EncAlg::Des3Cbc => 8,
            EncAlg::AesCbc => 16,
        }
    }
    /// Length of the explicit IV carried in each packet.
    pub fn iv_len(self) -> usize {
        match self {
            EncAlg::Null => 0,
            EncAlg::DesCbc | EncAlg::Des3Cbc => 8,
            EncAlg::AesCbc => 16,
        }
    }
    /// The RFC that specifies the algorithm for ESP.
    pub fn rfc(self) -> &'static str {
        match self {
            EncAlg::Null => "RFC 2410",
            EncAlg::DesCbc => "RFC 2405",
            EncAlg::Des3Cbc => "RFC 2451",
            EncAlg::AesCbc => "RFC 3602",
        }
    }
}

/// Combined-mode (AEAD) algorithms for ESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadAlg {
    /// `rfc4106(gcm(aes))`: AES-GCM, RFC 4106, with a 128, 192 or 256-bit key. Key material is
    /// the AES key and a 4-byte salt.
    AesGcm,
    /// `rfc7539esp(chacha20,poly1305)`: RFC 7634. Key material is a 32-byte key and a 4-byte salt.
    ChaCha20Poly1305,
}

impl AeadAlg {
    /// All AEAD algorithms.
    pub const ALL: [AeadAlg; 2] = [AeadAlg::AesGcm, AeadAlg::ChaCha20Poly1305];
    /// Length of the salt at the end of the key material.
    pub const SALT_LEN: usize = 4;

    /// The `ip xfrm` name.
    pub fn name(self) -> &'static str {
        match self {
            AeadAlg::AesGcm => "rfc4106(gcm(aes))",
            AeadAlg::ChaCha20Poly1305 => "rfc7539esp(chacha20,poly1305)",
        }
    }
    /// Looks an algorithm up by its `ip xfrm` name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "rfc4106(gcm(aes))" => AeadAlg::AesGcm,
            "rfc7539esp(chacha20,poly1305)" => AeadAlg::ChaCha20Poly1305,
            _ => return None,
        })
    }
    /// Checks the key material length (key plus 4-byte salt).
    pub fn check_key(self, len: usize) -> Result<(), Error> {
        let (ok, expected) = match self {
            AeadAlg::AesGcm => (
                matches!(len, 20 | 28 | 36),
                "20, 28 or 36 (a 16, 24 or 32-byte key and a 4-byte salt)",
            ),
            AeadAlg::ChaCha20Poly1305 => (len == 36, "36 (a 32-byte key and a 4-byte salt)"),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::KeyLength {
                alg: self.name(),
                expected,
                got: len,
            })
        }
    }
    /// Checks an ICV length given in bits (RFC 4106 section 8.1 allows 8, 12 and 16 bytes).
    pub fn check_icv_bits(self, bits: usize) -> Result<usize, Error> {
        let ok = match self {
            AeadAlg::AesGcm => matches!(bits, 64 | 96 | 128),
            AeadAlg::ChaCha20Poly1305 => bits == 128,
        };
        if ok {
            Ok(bits / 8)
        } else {
            Err(Error::IcvLength { alg: self.name(), bits })
        }
    }
    /// The explicit IV in each packet is 8 bytes for both.
    pub fn iv_len(self) -> usize {
        8
    }
    /// The RFC that specifies the algorithm for ESP.
    pub fn rfc(self) -> &'static str {
        match self {
            AeadAlg::AesGcm => "RFC 4106",
            AeadAlg::ChaCha20Poly1305 => "RFC 7634",
        }
    }
}

/// Integrity algorithms (for ESP and AH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntegAlg {
    /// `digest_null`: no integrity (ESP only).
    Null,
    /// `hmac(md5)`, RFC 2403 (HMAC-MD5-96).
    HmacMd5,
    /// `hmac(sha1)`, RFC 2404 (HMAC-SHA1-96).
    HmacSha1,
    /// `hmac(sha256)`, RFC 4868 (HMAC-SHA-256-128).
    HmacSha256,
    /// `hmac(sha384)`, RFC 4868 (HMAC-SHA-384-192).
    HmacSha384,
    /// `hmac(sha512)`, RFC 4868 (HMAC-SHA-512-256).
    HmacSha512,
}

impl IntegAlg {
    /// All integrity algorithms.
    pub const ALL: [IntegAlg; 6] = [
        IntegAlg::Null,
        IntegAlg::HmacMd5,
        IntegAlg::HmacSha1,
        IntegAlg::HmacSha256,
        IntegAlg::HmacSha384,
        IntegAlg::HmacSha512,
    ];

    /// The `ip xfrm` name.
    pub fn name(self) -> &'static str {
        match self {
            IntegAlg::Null => "digest_null",
            IntegAlg::HmacMd5 => "hmac(md5)",
            IntegAlg::HmacSha1 => "hmac(sha1)",
            IntegAlg::HmacSha256 => "hmac(sha256)",
            IntegAlg::HmacSha384 => "hmac(sha384)",
            IntegAlg::HmacSha512 => "hmac(sha512)",
        }
    }
    /// Looks an algorithm up by its `ip xfrm` name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "digest_null" | "null" => IntegAlg::Null,
            "hmac(md5)" | "md5" => IntegAlg::HmacMd5,
            "hmac(sha1)" | "sha1" => IntegAlg::HmacSha1,
            "hmac(sha256)" | "sha256" => IntegAlg::HmacSha256,
            "hmac(sha384)" | "sha384" => IntegAlg::HmacSha384,
            "hmac(sha512)" | "sha512" => IntegAlg::HmacSha512,
            _ => return None,
        })
    }
    /// Length of the untruncated digest.
    pub fn digest_len(self) -> usize {
        match self {
            IntegAlg::Null => 0,
            IntegAlg::HmacMd5 => 16,
            IntegAlg::HmacSha1 => 20,
            IntegAlg::HmacSha256 => 32,
            IntegAlg::HmacSha384 => 48,
            IntegAlg::HmacSha512 => 64,
        }
    }
    /// The ICV length the RFC fixes for IPsec use, in bytes (the truncation).
    pub fn default_icv_len(self) -> usize {
        match self {
            IntegAlg::Null => 0,
            IntegAlg::HmacMd5 | IntegAlg::HmacSha1 => 12,
            IntegAlg::HmacSha256 => 16,
            IntegAlg::HmacSha384 => 24,
            IntegAlg::HmacSha512 => 32,
        }
    }
    /// Checks a key length. RFC 2403/2404 fix 16 and 20 bytes, RFC 4868 32, 48 and 64.
    pub fn check_key(self, len: usize) -> Result<(), Error> {
        let want = match self {
            IntegAlg::Null => 0,
            IntegAlg::HmacMd5 => 16,
            IntegAlg::HmacSha1 => 20,
            IntegAlg::HmacSha256 => 32,
            IntegAlg::HmacSha384 => 48,
            IntegAlg::HmacSha512 => 64,
        };
        if len == want {
            Ok(())
        } else {
            let expected = match want {
                0 => "0",
                16 => "16",
                20 => "20",
                32 => "32",
                48 => "48",
                _ => "64",
            };
            Err(Error::KeyLength {
                alg: self.name(),
                expected,
                got: len,
            })
        }
    }
    /// Checks a truncation length given in bits: a multiple of 32 bits, at least 96 and at
    /// most the digest length (for `digest_null`, 0).
    pub fn check_icv_bits(self, bits: usize) -> Result<usize, Error> {
        let ok = match self {
            IntegAlg::Null => bits == 0,
            _ => bits.is_multiple_of(32) && bits >= 96 && bits / 8 <= self.digest_len(),
        };
        if ok {
            Ok(bits / 8)
        } else {
            Err(Error::IcvLength { alg: self.name(), bits })
        }
    }
    /// The RFC that specifies the algorithm for IPsec.
    pub fn rfc(self) -> &'static str {
        match self {
            IntegAlg::Null => "RFC 4303 (none)",
            IntegAlg::HmacMd5 => "RFC 2403",
            IntegAlg::HmacSha1 => "RFC 2404",
            _ => "RFC 4868",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in EncAlg::ALL {
            assert_eq!(EncAlg::from_name(a.name()), Some(a));
        }
        for a in AeadAlg::ALL {
            assert_eq!(AeadAlg::from_name(a.name()), Some(a));
        }
        for a in IntegAlg::ALL {
            assert_eq!(IntegAlg::from_name(a.name()), Some(a));
        }
        assert_eq!(EncAlg::from_name("cbc(twofish)"), None);
    }

    #[test]
    fn key_lengths_are_checked() {
        assert!(EncAlg::AesCbc.check_key(24).is_ok());
        assert!(matches!(
            EncAlg::AesCbc.check_key(20),
            Err(Error::KeyLength { got: 20, .. })
        ));
        assert!(EncAlg::Des3Cbc.check_key(16).is_err());
        assert!(AeadAlg::AesGcm.check_key(16).is_err());
        assert!(AeadAlg::AesGcm.check_key(36).is_ok());
        assert!(IntegAlg::HmacSha1.check_key(16).is_err());
        assert_eq!(IntegAlg::HmacSha256.check_icv_bits(128), Ok(16));
        assert!(IntegAlg::HmacSha256.check_icv_bits(100).is_err());
        assert!(AeadAlg::AesGcm.check_icv_bits(32).is_err());
    }
}
