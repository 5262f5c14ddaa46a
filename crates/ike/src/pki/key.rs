//! Private keys (PEM: PKCS#8, PKCS#1, SEC1) and signing through the caller's [`Signer`].
use super::cert::{Certificate, KeyKind, EC_PUBLIC_KEY, ED25519, RSA_ENCRYPTION, SECP256R1, SECP384R1};
use super::{pem_blocks, PkiError};
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use const_oid::ObjectIdentifier;
use core::fmt;
use der::asn1::AnyRef;
use der::{Decode, Encode};
use ring::rand::SystemRandom;
use ring::signature::{self as rsig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use zeroize::Zeroizing;

/// A signature scheme (RFC 7427 AlgorithmIdentifier / classic method) a [`Signer`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SigScheme {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RsaPkcs1Sha256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RsaPkcs1Sha384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RsaPkcs1Sha512,
    /// RSASSA-PSS with SHA-256, MGF1 with SHA-256, salt length 32.
    RsaPssSha256,
    /// RSASSA-PSS with SHA-384, MGF1 with SHA-384, salt length 48.
    RsaPssSha384,
    /// RSASSA-PSS with SHA-512, MGF1 with SHA-512, salt length 64.
    RsaPssSha512,
    /// ECDSA on P-256 with SHA-256.
    EcdsaP256Sha256,
    /// ECDSA on P-384 with SHA-384.
    EcdsaP384Sha384,
    /// Ed25519 (PureEdDSA, RFC 8032).
    Ed25519,
    /// RSASSA-PKCS1-v1_5 with SHA-1: AUTH method 1 only (RFC 7296 3.8), for peers that
    /// announce no RFC 7427 hash (the built-in Windows client). Never in method 14 (RFC 8247
    /// 3.4: SHA-1 signatures MUST NOT), so not in [`SigScheme::ALL`].
    RsaPkcs1Sha1,
}

impl SigScheme {
    /// Every scheme of RFC 7427 method 14 (all but [`SigScheme::RsaPkcs1Sha1`]).
    pub const ALL: [SigScheme; 9] = [
        SigScheme::RsaPkcs1Sha256,
        SigScheme::RsaPkcs1Sha384,
        SigScheme::RsaPkcs1Sha512,
        SigScheme::RsaPssSha256,
        SigScheme::RsaPssSha384,
        SigScheme::RsaPssSha512,
        SigScheme::EcdsaP256Sha256,
        SigScheme::EcdsaP384Sha384,
        SigScheme::Ed25519,
    ];

    /// The SIGNATURE_HASH_ALGORITHMS value of its hash (RFC 7427 4).
    pub fn hash_alg(self) -> u16 {
        use super::hash_alg::*;
        match self {
            SigScheme::RsaPkcs1Sha256 | SigScheme::RsaPssSha256 | SigScheme::EcdsaP256Sha256 => SHA2_256,
            SigScheme::RsaPkcs1Sha384 | SigScheme::RsaPssSha384 | SigScheme::EcdsaP384Sha384 => SHA2_384,
            SigScheme::RsaPkcs1Sha512 | SigScheme::RsaPssSha512 => SHA2_512,
            SigScheme::Ed25519 => IDENTITY,
            SigScheme::RsaPkcs1Sha1 => SHA1,
        }
    }

    /// Whether a key of `kind` makes this scheme.
    pub fn fits(self, kind: KeyKind) -> bool {
        match self {
            SigScheme::EcdsaP256Sha256 => kind == KeyKind::EcdsaP256,
            SigScheme::EcdsaP384Sha384 => kind == KeyKind::EcdsaP384,
            SigScheme::Ed25519 => kind == KeyKind::Ed25519,
            _ => matches!(kind, KeyKind::Rsa { .. }),
        }
    }
}

/// Something that signs with a private key. The IKE state machine takes a `Signer` rather
/// than a key so that keys can live elsewhere (an HSM, a TPM, a separate process) and so the
/// crate itself never draws randomness.
///
/// Output formats: RSA gives the signature octets (as long as the modulus), ECDSA the DER
/// `Ecdsa-Sig-Value` (RFC 3279 2.2.3, as in X.509 and RFC 7427; [`super::auth_sign`] turns it
/// into r||s for the classic methods of RFC 4754), Ed25519 the 64 signature bytes.
pub trait Signer: Send + Sync {
    /// The kind of the key.
    fn kind(&self) -> KeyKind;
    /// Signs `msg` with `scheme` (which must fit [`Signer::kind`]).
    fn sign(&self, scheme: SigScheme, msg: &[u8]) -> Result<Vec<u8>, PkiError>;
}

/// A private key read from PEM. Its bytes are zeroized on drop (each clone's too); `Debug`
/// shows only the kind.
#[derive(Clone)]
pub struct PrivateKey {
    kind: KeyKind,
    /// PKCS#1 RSAPrivateKey for RSA, PKCS#8 PrivateKeyInfo otherwise (what ring loads).
    der: Zeroizing<Vec<u8>>,
    /// The public key as a certificate carries it (see [`Certificate::public_key_bytes`]).
    public: Vec<u8>,
}

impl PrivateKey {
    /// Reads the first private key of a PEM file: PKCS#8 `PRIVATE KEY` (RSA, EC P-256/P-384,
    /// Ed25519), PKCS#1 `RSA PRIVATE KEY` or SEC1 `EC PRIVATE KEY` (re-wrapped as PKCS#8 for
    /// ring; it must carry its public key, as openssl writes it). Other blocks (`EC
    /// PARAMETERS`, certificates) are skipped. Encrypted keys are refused.
    pub fn from_pem(bytes: &[u8]) -> Result<PrivateKey, PkiError> {
        let blocks = pem_blocks(bytes, 16)?.ok_or(PkiError::BadPem)?;
        for (label, der) in blocks {
            match label.as_str() {
                "PRIVATE KEY" => return Self::from_pkcs8(&der),
                "RSA PRIVATE KEY" => return Self::from_pkcs1(&der),
                "EC PRIVATE KEY" => return Self::from_sec1(&der),
                "ENCRYPTED PRIVATE KEY" => return Err(PkiError::EncryptedKey),
                _ => {}
            }
        }
        Err(PkiError::BadPem)
    }

    /// Reads a DER PKCS#8 PrivateKeyInfo.
    pub fn from_pkcs8(der: &[u8]) -> Result<PrivateKey, PkiError> {
        let pki = pkcs8::PrivateKeyInfo::from_der(der).map_err(|_| PkiError::BadKey("PKCS#8"))?;
        let oid = pki.algorithm.oid;
        if oid == RSA_ENCRYPTION {
            Self::from_pkcs1(pki.private_key)
        } else if oid == EC_PUBLIC_KEY {
            let curve = pki
                .algorithm
                .parameters_oid()
                .map_err(|_| PkiError::BadKey("PKCS#8 EC curve"))?;
            let kind = ec_kind(curve)?;
            let ec = sec1::EcPrivateKey::from_der(pki.private_key).map_err(|_| PkiError::BadKey("SEC1"))?;
            let public = ec
                .public_key
                .ok_or(PkiError::BadKey("EC key without its public key"))?
                .to_vec();
            Ok(PrivateKey {
                kind,
                der: Zeroizing::new(der.to_vec()),
                public,
            })
        } else if oid == ED25519 {
            let kp = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).map_err(|_| PkiError::BadKey("Ed25519"))?;
            Ok(PrivateKey {
                kind: KeyKind::Ed25519,
                der: Zeroizing::new(der.to_vec()),
                public: kp.public_key().as_ref().to_vec(),
            })
        } else {
            Err(PkiError::UnsupportedKey)
        }
    }

    /// Reads a DER PKCS#1 RSAPrivateKey.
    pub fn from_pkcs1(der: &[u8]) -> Result<PrivateKey, PkiError> {
        let k = pkcs1::RsaPrivateKey::from_der(der).map_err(|_| PkiError::BadKey("PKCS#1"))?;
        let m = k.modulus.as_bytes();
        let bits = (m.len() as u32 * 8).saturating_sub(m.first().map_or(8, |b| b.leading_zeros()));
        if !(2048..=8192).contains(&bits) {
            return Err(PkiError::UnsupportedKey);
        }
        let public = pkcs1::RsaPublicKey {
            modulus: k.modulus,
            public_exponent: k.public_exponent,
        }
        .to_der()
        .map_err(|_| PkiError::BadKey("PKCS#1"))?;
        Ok(PrivateKey {
            kind: KeyKind::Rsa { bits },
            der: Zeroizing::new(der.to_vec()),
            public,
        })
    }

    /// Reads a DER SEC1 ECPrivateKey (with its namedCurve parameters and public key) and
    /// wraps it as PKCS#8 with the `pkcs8` crate.
    pub fn from_sec1(der: &[u8]) -> Result<PrivateKey, PkiError> {
        let ec = sec1::EcPrivateKey::from_der(der).map_err(|_| PkiError::BadKey("SEC1"))?;
        let curve = ec
            .parameters
            .and_then(|p| p.named_curve())
            .ok_or(PkiError::BadKey("SEC1 key without its named curve"))?;
        ec_kind(curve)?;
        let alg = spki::AlgorithmIdentifierRef {
            oid: EC_PUBLIC_KEY,
            parameters: Some(AnyRef::from(&curve)),
        };
        let p8 = Zeroizing::new(
            pkcs8::PrivateKeyInfo::new(alg, der)
                .to_der()
                .map_err(|_| PkiError::BadKey("SEC1"))?,
        );
        Self::from_pkcs8(&p8)
    }

    /// The key as a TLS stack takes it (EAP-TLS's rustls, [`ipsec_eap::tls`]): PKCS#1 for
    /// RSA, PKCS#8 otherwise. A copy the caller owns (rustls zeroizes it on drop).
    pub fn to_key_der(&self) -> rustls_pki_types::PrivateKeyDer<'static> {
        match self.kind {
            KeyKind::Rsa { .. } => rustls_pki_types::PrivatePkcs1KeyDer::from(self.der.to_vec()).into(),
            _ => rustls_pki_types::PrivatePkcs8KeyDer::from(self.der.to_vec()).into(),
        }
    }

    /// The kind of the key.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// Whether `cert` carries this key's public key.
    pub fn public_key_matches(&self, cert: &Certificate) -> bool {
        cert.key_kind() == Some(self.kind) && cert.public_key_bytes() == Some(&self.public[..])
    }
}

fn ec_kind(curve: ObjectIdentifier) -> Result<KeyKind, PkiError> {
    match curve {
        SECP256R1 => Ok(KeyKind::EcdsaP256),
        SECP384R1 => Ok(KeyKind::EcdsaP384),
        _ => Err(PkiError::UnsupportedKey),
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKey({:?})", self.kind)
    }
}

enum RingKey {
    /// ring's key, and the same key for RustCrypto `rsa` to sign method 1 (SHA-1) with,
    /// which ring does not do.
    Rsa(RsaKeyPair, Box<rsa::pkcs1v15::SigningKey<sha1::Sha1>>),
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// A [`Signer`] over a [`PrivateKey`] with `ring`.
///
/// It draws its randomness (RSA blinding, the PSS salt, the ECDSA nonce) from the operating
/// system through `ring::rand::SystemRandom`, as ring requires: ring's `SecureRandom` trait is
/// sealed, so a caller-provided generator cannot be passed in. This is why the sans-IO IKE
/// crate takes a [`Signer`] rather than a key: the randomness and the key stay with the
/// caller's signer (this one, or an HSM, TPM or agent implementing the trait).
pub struct RingSigner {
    kind: KeyKind,
    key: RingKey,
    rng: SystemRandom,
}

impl RingSigner {
    /// Loads the key into ring (which checks it: the RSA key's consistency, the EC public key
    /// against the private scalar).
    pub fn new(key: PrivateKey) -> Result<RingSigner, PkiError> {
        let rng = SystemRandom::new();
        let k = match key.kind {
            KeyKind::Rsa { .. } => {
                use rsa::pkcs1::DecodeRsaPrivateKey;
                let kp = RsaKeyPair::from_der(&key.der).map_err(|_| PkiError::BadKey("RSA key refused by ring"))?;
                let legacy = rsa::RsaPrivateKey::from_pkcs1_der(&key.der)
                    .map_err(|_| PkiError::BadKey("RSA key refused by the rsa crate"))?;
                RingKey::Rsa(kp, Box::new(rsa::pkcs1v15::SigningKey::new(legacy)))
            }
            KeyKind::EcdsaP256 => RingKey::Ecdsa(
                EcdsaKeyPair::from_pkcs8(&rsig::ECDSA_P256_SHA256_ASN1_SIGNING, &key.der, &rng)
                    .map_err(|_| PkiError::BadKey("EC key refused by ring"))?,
            ),
            KeyKind::EcdsaP384 => RingKey::Ecdsa(
                EcdsaKeyPair::from_pkcs8(&rsig::ECDSA_P384_SHA384_ASN1_SIGNING, &key.der, &rng)
                    .map_err(|_| PkiError::BadKey("EC key refused by ring"))?,
            ),
            KeyKind::Ed25519 => RingKey::Ed25519(
                Ed25519KeyPair::from_pkcs8_maybe_unchecked(&key.der).map_err(|_| PkiError::BadKey("Ed25519"))?,
            ),
        };
        Ok(RingSigner {
            kind: key.kind,
            key: k,
            rng,
        })
    }
}

/// ring's system randomness for the `rsa` crate (rand_core's traits).
struct RingRng<'a>(&'a SystemRandom);

impl rand_core::RngCore for RingRng<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, d: &mut [u8]) {
        // SystemRandom fails only without an operating system source, where ring could not
        // have signed either; the signature is then made with less blinding, not refused.
        let _ = ring::rand::SecureRandom::fill(self.0, d);
    }
    fn try_fill_bytes(&mut self, d: &mut [u8]) -> Result<(), rand_core::Error> {
        ring::rand::SecureRandom::fill(self.0, d).map_err(|_| rand_core::Error::from(core::num::NonZeroU32::MIN))
    }
}

impl rand_core::CryptoRng for RingRng<'_> {}

impl fmt::Debug for RingSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RingSigner({:?})", self.kind)
    }
}

impl Signer for RingSigner {
    fn kind(&self) -> KeyKind {
        self.kind
    }

    fn sign(&self, scheme: SigScheme, msg: &[u8]) -> Result<Vec<u8>, PkiError> {
        if !scheme.fits(self.kind) {
            return Err(PkiError::SchemeMismatch);
        }
        match &self.key {
            RingKey::Rsa(_, legacy) if scheme == SigScheme::RsaPkcs1Sha1 => {
                use rsa::signature::{RandomizedSigner, SignatureEncoding};
                // Blinded with randomness from ring's SystemRandom, as ring's own signing is.
                let sig = legacy
                    .try_sign_with_rng(&mut RingRng(&self.rng), msg)
                    .map_err(|_| PkiError::SigningFailed)?;
                Ok(sig.to_vec())
            }
            RingKey::Rsa(kp, _) => {
                let pad: &'static dyn rsig::RsaEncoding = match scheme {
                    SigScheme::RsaPkcs1Sha256 => &rsig::RSA_PKCS1_SHA256,
                    SigScheme::RsaPkcs1Sha384 => &rsig::RSA_PKCS1_SHA384,
                    SigScheme::RsaPkcs1Sha512 => &rsig::RSA_PKCS1_SHA512,
                    SigScheme::RsaPssSha256 => &rsig::RSA_PSS_SHA256,
                    SigScheme::RsaPssSha384 => &rsig::RSA_PSS_SHA384,
                    SigScheme::RsaPssSha512 => &rsig::RSA_PSS_SHA512,
                    _ => return Err(PkiError::SchemeMismatch),
                };
                let mut sig = vec![0; kp.public().modulus_len()];
                kp.sign(pad, &self.rng, msg, &mut sig)
                    .map_err(|_| PkiError::SigningFailed)?;
                Ok(sig)
            }
            RingKey::Ecdsa(kp) => Ok(kp
                .sign(&self.rng, msg)
                .map_err(|_| PkiError::SigningFailed)?
                .as_ref()
                .to_vec()),
            RingKey::Ed25519(kp) => Ok(kp.sign(msg).as_ref().to_vec()),
        }
    }
}
