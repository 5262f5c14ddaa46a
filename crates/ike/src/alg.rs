//! Algorithms with their IANA transform IDs (RFC 7296 3.3.2, IANA "IKEv2 Parameters"), and
//! proposals written as strongSwan writes them in swanctl.conf
//! (`aes128gcm16-prfsha256-x25519`, `aes256-sha256-ecp384`, `aes128gcm16-x25519-esn`).
use crate::error::Error;
use alloc::vec::Vec;

/// Transform types (RFC 7296 3.3.2).
pub mod transform_type {
    /// Encryption Algorithm (ENCR).
    pub const ENCR: u8 = 1;
    /// Pseudorandom Function (PRF).
    pub const PRF: u8 = 2;
    /// Integrity Algorithm (INTEG).
    pub const INTEG: u8 = 3;
    /// Key Exchange Method (KE, formerly D-H group).
    pub const KE: u8 = 4;
    /// Extended Sequence Numbers (ESN).
    pub const ESN: u8 = 5;
    /// Additional Key Exchange 1 (ADDKE1, RFC 9370 2.2.1); ADDKE2..ADDKE7 are 7..12.
    pub const ADDKE1: u8 = 6;
    /// Additional Key Exchange 7 (ADDKE7), the last.
    pub const ADDKE7: u8 = 12;
    /// How many ADDKE transform types there are.
    pub const ADDKE_COUNT: usize = 7;
    /// The ADDKE type of additional exchange `n` (1..=7).
    pub const fn addke(n: usize) -> u8 {
        ADDKE1 + (n as u8) - 1
    }
}

/// Encryption algorithms, for the IKE SA (SK payload) and for ESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encr {
    /// ENCR_AES_CBC (12) with a 128-bit key (RFC 3602).
    AesCbc128,
    /// ENCR_AES_CBC (12) with a 256-bit key.
    AesCbc256,
    /// ENCR_AES_CBC (12) with a 192-bit key.
    AesCbc192,
    /// ENCR_3DES (3), Triple DES in CBC mode (RFC 2451): weak (64-bit blocks, RFC 8247 5),
    /// only when a configuration names it (the built-in Windows client's default).
    TripleDes,
    /// ENCR_AES_GCM_16 (20), 128-bit key, 16-byte ICV (RFC 5282, RFC 4106).
    AesGcm16_128,
    /// ENCR_AES_GCM_16 (20), 256-bit key.
    AesGcm16_256,
    /// ENCR_CHACHA20_POLY1305 (28) (RFC 7634; ESP only here).
    ChaCha20Poly1305,
}

impl Encr {
    /// IANA transform ID.
    pub fn id(self) -> u16 {
        match self {
            Encr::AesCbc128 | Encr::AesCbc256 | Encr::AesCbc192 => 12,
            Encr::TripleDes => 3,
            Encr::AesGcm16_128 | Encr::AesGcm16_256 => 20,
            Encr::ChaCha20Poly1305 => 28,
        }
    }
    /// The Key Length attribute in bits, for algorithms that carry it (3.3.5).
    pub fn key_len_attr(self) -> Option<u16> {
        match self {
            Encr::AesCbc128 | Encr::AesGcm16_128 => Some(128),
            Encr::AesCbc256 | Encr::AesGcm16_256 => Some(256),
            Encr::AesCbc192 => Some(192),
            Encr::ChaCha20Poly1305 | Encr::TripleDes => None,
        }
    }
    /// From a transform ID and Key Length attribute.
    pub fn from_id(id: u16, key_len: Option<u16>) -> Option<Self> {
        Some(match (id, key_len) {
            (12, Some(128)) => Encr::AesCbc128,
            (12, Some(256)) => Encr::AesCbc256,
            (12, Some(192)) => Encr::AesCbc192,
            (3, None) => Encr::TripleDes,
            (20, Some(128)) => Encr::AesGcm16_128,
            (20, Some(256)) => Encr::AesGcm16_256,
            (28, None) => Encr::ChaCha20Poly1305,
            _ => return None,
        })
    }
    /// Whether it is an AEAD (no separate integrity transform, 3.3).
    pub fn is_aead(self) -> bool {
        !matches!(
            self,
            Encr::AesCbc128 | Encr::AesCbc256 | Encr::AesCbc192 | Encr::TripleDes
        )
    }
    /// Key material taken from prf+ / KEYMAT, salt included (RFC 5282 7.1: 4 salt bytes for
    /// GCM; RFC 7634 2: 4 salt bytes for ChaCha20-Poly1305).
    pub fn keymat_len(self) -> usize {
        match self {
            Encr::AesCbc128 => 16,
            Encr::AesCbc256 => 32,
            Encr::AesCbc192 | Encr::TripleDes => 24,
            Encr::AesGcm16_128 => 20,
            Encr::AesGcm16_256 => 36,
            Encr::ChaCha20Poly1305 => 36,
        }
    }
    /// strongSwan's name.
    pub fn name(self) -> &'static str {
        match self {
            Encr::AesCbc128 => "aes128",
            Encr::AesCbc256 => "aes256",
            Encr::AesCbc192 => "aes192",
            Encr::TripleDes => "3des",
            Encr::AesGcm16_128 => "aes128gcm16",
            Encr::AesGcm16_256 => "aes256gcm16",
            Encr::ChaCha20Poly1305 => "chacha20poly1305",
        }
    }
    /// Why it is weak, for the algorithms accepted only when a configuration names them
    /// (RFC 8247 5: 3DES has 64-bit blocks, SHOULD NOT for IKE), `None` for the others.
    pub fn weakness(self) -> Option<&'static str> {
        (self == Encr::TripleDes).then_some("64-bit blocks (RFC 8247 5)")
    }
}

/// Pseudorandom functions (RFC 7296 2.13; RFC 4868).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prf {
    /// PRF_HMAC_SHA1 (2, RFC 2104 with SHA-1): weak, only when a configuration names it.
    HmacSha1,
    /// PRF_HMAC_SHA2_256 (5).
    HmacSha256,
    /// PRF_HMAC_SHA2_384 (6).
    HmacSha384,
    /// PRF_HMAC_SHA2_512 (7).
    HmacSha512,
}

impl Prf {
    /// IANA transform ID.
    pub fn id(self) -> u16 {
        match self {
            Prf::HmacSha1 => 2,
            Prf::HmacSha256 => 5,
            Prf::HmacSha384 => 6,
            Prf::HmacSha512 => 7,
        }
    }
    /// From the transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            2 => Prf::HmacSha1,
            5 => Prf::HmacSha256,
            6 => Prf::HmacSha384,
            7 => Prf::HmacSha512,
            _ => return None,
        })
    }
    /// Output length, which is also the preferred key length (RFC 4868 2.1).
    pub fn output_len(self) -> usize {
        match self {
            Prf::HmacSha1 => 20,
            Prf::HmacSha256 => 32,
            Prf::HmacSha384 => 48,
            Prf::HmacSha512 => 64,
        }
    }
    /// strongSwan's name.
    pub fn name(self) -> &'static str {
        match self {
            Prf::HmacSha256 => "prfsha256",
            Prf::HmacSha384 => "prfsha384",
            Prf::HmacSha512 => "prfsha512",
            Prf::HmacSha1 => "prfsha1",
        }
    }
    /// Why it is weak (RFC 8247 3.2: PRF_HMAC_SHA1 is MUST-), `None` for the others.
    pub fn weakness(self) -> Option<&'static str> {
        (self == Prf::HmacSha1).then_some("SHA-1 (RFC 8247 3.2)")
    }
}

/// Integrity algorithms (RFC 4868).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integ {
    /// AUTH_HMAC_SHA1_96 (2, RFC 2404): weak, only when a configuration names it.
    HmacSha1_96,
    /// AUTH_HMAC_SHA2_256_128 (12).
    HmacSha256_128,
    /// AUTH_HMAC_SHA2_384_192 (13).
    HmacSha384_192,
    /// AUTH_HMAC_SHA2_512_256 (14).
    HmacSha512_256,
}

impl Integ {
    /// IANA transform ID.
    pub fn id(self) -> u16 {
        match self {
            Integ::HmacSha1_96 => 2,
            Integ::HmacSha256_128 => 12,
            Integ::HmacSha384_192 => 13,
            Integ::HmacSha512_256 => 14,
        }
    }
    /// From the transform ID.
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            2 => Integ::HmacSha1_96,
            12 => Integ::HmacSha256_128,
            13 => Integ::HmacSha384_192,
            14 => Integ::HmacSha512_256,
            _ => return None,
        })
    }
    /// Key length (RFC 4868 2.1.1: the hash's output length; RFC 2404 3: 160 bits for SHA-1).
    pub fn key_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 20,
            Integ::HmacSha256_128 => 32,
            Integ::HmacSha384_192 => 48,
            Integ::HmacSha512_256 => 64,
        }
    }
    /// Truncated ICV length (half the hash for SHA-2, RFC 4868 2.1; 96 bits for SHA-1,
    /// RFC 2404 2).
    pub fn icv_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 12,
            _ => self.key_len() / 2,
        }
    }
    /// strongSwan's name.
    pub fn name(self) -> &'static str {
        match self {
            Integ::HmacSha256_128 => "sha256",
            Integ::HmacSha384_192 => "sha384",
            Integ::HmacSha512_256 => "sha512",
            Integ::HmacSha1_96 => "sha1",
        }
    }
    /// Why it is weak (RFC 8247 3.3: AUTH_HMAC_SHA1_96 is MUST-), `None` for the others.
    pub fn weakness(self) -> Option<&'static str> {
        (self == Integ::HmacSha1_96).then_some("SHA-1 (RFC 8247 3.3)")
    }
    /// The PRF strongSwan pairs with it when a proposal names no PRF.
    pub fn matching_prf(self) -> Prf {
        match self {
            Integ::HmacSha256_128 => Prf::HmacSha256,
            Integ::HmacSha384_192 => Prf::HmacSha384,
            Integ::HmacSha512_256 => Prf::HmacSha512,
            Integ::HmacSha1_96 => Prf::HmacSha1,
        }
    }
}

/// Key exchange methods (Diffie-Hellman groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DhGroup {
    /// 1024-bit MODP group 2 (RFC 2409 6.2): weak (RFC 8247 2.4: SHOULD NOT), only when a
    /// configuration names it (the built-in Windows client's default).
    Modp1024,
    /// 2048-bit MODP group 14 (RFC 3526 3).
    Modp2048,
    /// 256-bit random ECP group 19 (RFC 5903).
    Ecp256,
    /// 384-bit random ECP group 20 (RFC 5903).
    Ecp384,
    /// Curve25519 group 31 (RFC 8031).
    Curve25519,
    /// ML-KEM-512, 35 (FIPS 203; draft-ietf-ipsecme-ikev2-mlkem).
    MlKem512,
    /// ML-KEM-768, 36.
    MlKem768,
    /// ML-KEM-1024, 37.
    MlKem1024,
}

impl DhGroup {
    /// IANA transform ID (group number).
    pub fn id(self) -> u16 {
        match self {
            DhGroup::Modp1024 => 2,
            DhGroup::Modp2048 => 14,
            DhGroup::Ecp256 => 19,
            DhGroup::Ecp384 => 20,
            DhGroup::Curve25519 => 31,
            DhGroup::MlKem512 => 35,
            DhGroup::MlKem768 => 36,
            DhGroup::MlKem1024 => 37,
        }
    }
    /// From the group number.
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            2 => DhGroup::Modp1024,
            14 => DhGroup::Modp2048,
            19 => DhGroup::Ecp256,
            20 => DhGroup::Ecp384,
            31 => DhGroup::Curve25519,
            35 => DhGroup::MlKem512,
            36 => DhGroup::MlKem768,
            37 => DhGroup::MlKem1024,
            _ => return None,
        })
    }
    /// Length of the public value in a KE payload; for ML-KEM the initiator's (the
    /// encapsulation key; the responder's ciphertext: [`crate::kem::MlKem::ct_len`]).
    pub fn public_len(self) -> usize {
        match self {
            DhGroup::Modp1024 => 128,
            DhGroup::Modp2048 => 256,
            DhGroup::Ecp256 => 64,
            DhGroup::Ecp384 => 96,
            DhGroup::Curve25519 => 32,
            DhGroup::MlKem512 | DhGroup::MlKem768 | DhGroup::MlKem1024 => self.kem().map_or(0, |k| k.ek_len()),
        }
    }
    /// The ML-KEM parameter set, for the KEM methods.
    pub fn kem(self) -> Option<crate::kem::MlKem> {
        match self {
            DhGroup::MlKem512 => Some(crate::kem::MlKem::MlKem512),
            DhGroup::MlKem768 => Some(crate::kem::MlKem::MlKem768),
            DhGroup::MlKem1024 => Some(crate::kem::MlKem::MlKem1024),
            _ => None,
        }
    }
    /// Whether it resists a quantum computer (ML-KEM); the Diffie-Hellman groups do not.
    pub fn is_post_quantum(self) -> bool {
        self.kem().is_some()
    }
    /// strongSwan's name.
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Modp1024 => "modp1024",
            DhGroup::Modp2048 => "modp2048",
            DhGroup::Ecp256 => "ecp256",
            DhGroup::Ecp384 => "ecp384",
            DhGroup::Curve25519 => "x25519",
            DhGroup::MlKem512 => "mlkem512",
            DhGroup::MlKem768 => "mlkem768",
            DhGroup::MlKem1024 => "mlkem1024",
        }
    }
    /// Why it is weak (RFC 8247 2.4: group 2 SHOULD NOT), `None` for the others.
    pub fn weakness(self) -> Option<&'static str> {
        (self == DhGroup::Modp1024).then_some("1024-bit MODP group (RFC 8247 2.4)")
    }
}

/// Which SA a proposal is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProposalKind {
    /// The IKE SA (needs a PRF and a key exchange method).
    Ike,
    /// An ESP child SA.
    Esp,
}

/// One configured proposal: for each transform type, the algorithms acceptable, most
/// preferred first (RFC 7296 3.3: within a proposal, one of each type is chosen).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProposalSpec {
    /// Encryption algorithms.
    pub encr: Vec<Encr>,
    /// Integrity algorithms (empty with AEADs).
    pub integ: Vec<Integ>,
    /// PRFs (IKE only).
    pub prf: Vec<Prf>,
    /// Key exchange methods (IKE: at least one; ESP: empty, or groups for PFS in CREATE_CHILD_SA).
    pub dh: Vec<DhGroup>,
    /// ESN choices for ESP (`true` = ESN); empty for IKE.
    pub esn: Vec<bool>,
    /// Additional key exchanges (RFC 9370), ADDKE1 first: for each, the methods acceptable,
    /// `None` standing for the NONE transform (ID 0: the exchange may be skipped). An empty
    /// list: that additional exchange is not asked for.
    pub addke: [Vec<Option<DhGroup>>; transform_type::ADDKE_COUNT],
}

impl ProposalSpec {
    /// Whether it asks for any additional key exchange (RFC 9370).
    pub fn has_addke(&self) -> bool {
        self.addke.iter().any(|a| a.iter().any(|x| x.is_some()))
    }
    /// The weak algorithms it allows (3DES, SHA-1, PRF SHA-1, MODP-1024), each by name with
    /// why: accepted only because a configuration names them, for `ipsec check-config`.
    pub fn weak_algorithms(&self) -> Vec<(&'static str, &'static str)> {
        let mut v = Vec::new();
        v.extend(self.encr.iter().filter_map(|a| a.weakness().map(|w| (a.name(), w))));
        v.extend(self.integ.iter().filter_map(|a| a.weakness().map(|w| (a.name(), w))));
        v.extend(self.prf.iter().filter_map(|a| a.weakness().map(|w| (a.name(), w))));
        v.extend(self.dh.iter().filter_map(|a| a.weakness().map(|w| (a.name(), w))));
        v
    }
    /// Whether every choice it allows includes a post-quantum key exchange: ML-KEM as the
    /// KE of IKE_SA_INIT, or an additional exchange that cannot be NONE and offers only ML-KEM.
    pub fn is_post_quantum(&self) -> bool {
        let ke = !self.dh.is_empty() && self.dh.iter().all(|g| g.is_post_quantum());
        let add = self
            .addke
            .iter()
            .any(|a| !a.is_empty() && a.iter().all(|x| x.is_some_and(|g| g.is_post_quantum())));
        ke || add
    }
}

/// Algorithms chosen for an IKE SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IkeSuite {
    /// Encryption of the SK payload.
    pub encr: Encr,
    /// Integrity (None with an AEAD).
    pub integ: Option<Integ>,
    /// PRF.
    pub prf: Prf,
    /// Key exchange method.
    pub dh: DhGroup,
    /// The additional key exchanges agreed (RFC 9370), ADDKE1 first; `None`: not run.
    pub addke: [Option<DhGroup>; transform_type::ADDKE_COUNT],
}

impl IkeSuite {
    /// The additional key exchanges to run, in order (RFC 9370 2.2.2: ADDKE1 first,
    /// skipping those agreed as NONE): (ADDKE number 1..=7, method).
    pub fn additional(&self) -> impl Iterator<Item = (usize, DhGroup)> + '_ {
        self.addke.iter().enumerate().filter_map(|(i, g)| g.map(|g| (i + 1, g)))
    }
}

/// Algorithms chosen for an ESP child SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChildSuite {
    /// Encryption (or AEAD).
    pub encr: Encr,
    /// Integrity (None with an AEAD).
    pub integ: Option<Integ>,
    /// Extended sequence numbers.
    pub esn: bool,
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// Parses one proposal in strongSwan's syntax, algorithms separated by `-`:
/// `aes128 aes192 aes256 aes128gcm16 aes256gcm16 aes128gcm128 aes256gcm128 chacha20poly1305`,
/// `sha256 sha384 sha512` (also `sha2_256` ...), `prfsha256 prfsha384 prfsha512`,
/// `modp2048 ecp256 ecp384 x25519 curve25519`, `esn noesn`; and the weak ones the built-in
/// Windows client needs, accepted here and named by `ipsec check-config`
/// ([`ProposalSpec::weak_algorithms`]): `3des sha1 prfsha1 modp1024`.
/// As strongSwan does: an IKE proposal without a PRF takes the PRFs matching its integrity
/// algorithms (an AEAD IKE proposal must name one); an ESP proposal without `esn`/`noesn`
/// is `noesn`. Mixing AEAD and non-AEAD ciphers in one proposal is refused (write two).
pub fn parse_proposal(s: &str, kind: ProposalKind) -> Result<ProposalSpec, Error> {
    let mut p = ProposalSpec::default();
    let mut count = 0;
    for tok in s.trim().split('-') {
        count += 1;
        if count > crate::limits::MAX_TRANSFORMS {
            return Err(Error::TooManyTransforms);
        }
        let t = tok.trim().to_ascii_lowercase_bounded();
        match t.as_str() {
            "aes128" | "aes" | "aes128cbc" => push_unique(&mut p.encr, Encr::AesCbc128),
            "aes256" | "aes256cbc" => push_unique(&mut p.encr, Encr::AesCbc256),
            "aes192" | "aes192cbc" => push_unique(&mut p.encr, Encr::AesCbc192),
            "3des" => push_unique(&mut p.encr, Encr::TripleDes),
            "aes128gcm16" | "aes128gcm128" | "aes128gcm" => push_unique(&mut p.encr, Encr::AesGcm16_128),
            "aes256gcm16" | "aes256gcm128" | "aes256gcm" => push_unique(&mut p.encr, Encr::AesGcm16_256),
            "chacha20poly1305" => push_unique(&mut p.encr, Encr::ChaCha20Poly1305),
            "sha1" | "sha" => push_unique(&mut p.integ, Integ::HmacSha1_96),
            "sha256" | "sha2_256" => push_unique(&mut p.integ, Integ::HmacSha256_128),
            "sha384" | "sha2_384" => push_unique(&mut p.integ, Integ::HmacSha384_192),
            "sha512" | "sha2_512" => push_unique(&mut p.integ, Integ::HmacSha512_256),
            "prfsha1" => push_unique(&mut p.prf, Prf::HmacSha1),
            "prfsha256" => push_unique(&mut p.prf, Prf::HmacSha256),
            "prfsha384" => push_unique(&mut p.prf, Prf::HmacSha384),
            "prfsha512" => push_unique(&mut p.prf, Prf::HmacSha512),
            "modp1024" => push_unique(&mut p.dh, DhGroup::Modp1024),
            "modp2048" => push_unique(&mut p.dh, DhGroup::Modp2048),
            "ecp256" => push_unique(&mut p.dh, DhGroup::Ecp256),
            "ecp384" => push_unique(&mut p.dh, DhGroup::Ecp384),
            "x25519" | "curve25519" => push_unique(&mut p.dh, DhGroup::Curve25519),
            "mlkem512" => push_unique(&mut p.dh, DhGroup::MlKem512),
            "mlkem768" => push_unique(&mut p.dh, DhGroup::MlKem768),
            "mlkem1024" => push_unique(&mut p.dh, DhGroup::MlKem1024),
            "esn" => push_unique(&mut p.esn, true),
            "noesn" => push_unique(&mut p.esn, false),
            // RFC 9370 in strongSwan's words: `ke1_mlkem768`, `ke2_none` ... `ke7_...`.
            t if t.len() > 4 && t.starts_with("ke") && t.as_bytes()[3] == b'_' => {
                let n = (t.as_bytes()[2] as char).to_digit(10).unwrap_or(0) as usize;
                if !(1..=transform_type::ADDKE_COUNT).contains(&n) {
                    return Err(Error::UnknownAlgorithm);
                }
                let m = match &t[4..] {
                    "none" => None,
                    g => Some(group_by_name(g).ok_or(Error::UnknownAlgorithm)?),
                };
                push_unique(&mut p.addke[n - 1], m);
            }
            _ => return Err(Error::UnknownAlgorithm),
        }
    }
    if p.encr.is_empty() {
        return Err(Error::BadProposalString("no encryption algorithm"));
    }
    let aead = p.encr[0].is_aead();
    if p.encr.iter().any(|e| e.is_aead() != aead) {
        return Err(Error::BadProposalString(
            "AEAD and non-AEAD ciphers mixed in one proposal",
        ));
    }
    if aead && !p.integ.is_empty() {
        return Err(Error::BadProposalString("integrity algorithm with an AEAD"));
    }
    if !aead && p.integ.is_empty() {
        return Err(Error::BadProposalString("no integrity algorithm"));
    }
    match kind {
        ProposalKind::Ike => {
            if p.encr.contains(&Encr::ChaCha20Poly1305) {
                return Err(Error::BadProposalString("chacha20poly1305 is offered for ESP only"));
            }
            if !p.esn.is_empty() {
                return Err(Error::BadProposalString("esn/noesn in an IKE proposal"));
            }
            if p.prf.is_empty() {
                if aead {
                    return Err(Error::BadProposalString("an AEAD IKE proposal needs a PRF"));
                }
                let derived: Vec<Prf> = p.integ.iter().map(|i| i.matching_prf()).collect();
                for d in derived {
                    push_unique(&mut p.prf, d);
                }
            }
            if p.dh.is_empty() {
                return Err(Error::BadProposalString("no key exchange method"));
            }
        }
        ProposalKind::Esp if p.has_addke() && p.dh.is_empty() => {
            return Err(Error::BadProposalString(
                "additional key exchanges (keN_) in an ESP proposal need a key exchange method (PFS) too",
            ));
        }
        ProposalKind::Esp => {
            if !p.prf.is_empty() {
                return Err(Error::BadProposalString("PRF in an ESP proposal"));
            }
            if p.esn.is_empty() {
                p.esn.push(false);
            }
        }
    }
    Ok(p)
}

/// A key exchange method by strongSwan's name.
fn group_by_name(s: &str) -> Option<DhGroup> {
    [
        DhGroup::Modp1024,
        DhGroup::Modp2048,
        DhGroup::Ecp256,
        DhGroup::Ecp384,
        DhGroup::Curve25519,
        DhGroup::MlKem512,
        DhGroup::MlKem768,
        DhGroup::MlKem1024,
    ]
    .into_iter()
    .find(|g| g.name() == s || (s == "curve25519" && *g == DhGroup::Curve25519))
}

/// Parses a comma-separated list of proposals (swanctl.conf `proposals = a, b`).
pub fn parse_proposals(s: &str, kind: ProposalKind) -> Result<Vec<ProposalSpec>, Error> {
    let mut v = Vec::new();
    for part in s.split(',') {
        if part.trim().is_empty() {
            continue;
        }
        if v.len() >= crate::limits::MAX_PROPOSALS {
            return Err(Error::TooManyProposals);
        }
        v.push(parse_proposal(part, kind)?);
    }
    if v.is_empty() {
        return Err(Error::BadProposalString("empty"));
    }
    Ok(v)
}

trait Lower {
    fn to_ascii_lowercase_bounded(&self) -> alloc::string::String;
}
impl Lower for str {
    fn to_ascii_lowercase_bounded(&self) -> alloc::string::String {
        let mut s = alloc::string::String::with_capacity(self.len().min(64));
        for c in self.chars().take(64) {
            s.push(c.to_ascii_lowercase());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongswan_proposals() {
        let p = parse_proposal("aes128gcm16-prfsha256-x25519", ProposalKind::Ike).unwrap();
        assert_eq!(p.encr, [Encr::AesGcm16_128]);
        assert!(p.integ.is_empty());
        assert_eq!(p.prf, [Prf::HmacSha256]);
        assert_eq!(p.dh, [DhGroup::Curve25519]);
        let p = parse_proposal("aes256-sha256-ecp384", ProposalKind::Ike).unwrap();
        assert_eq!(p.encr, [Encr::AesCbc256]);
        assert_eq!(p.integ, [Integ::HmacSha256_128]);
        assert_eq!(p.prf, [Prf::HmacSha256], "PRF taken from the integrity algorithm");
        let p = parse_proposal("aes128gcm16-x25519", ProposalKind::Esp).unwrap();
        assert_eq!(p.esn, [false]);
        assert_eq!(p.dh, [DhGroup::Curve25519]);
        let p = parse_proposal("chacha20poly1305-esn-noesn", ProposalKind::Esp).unwrap();
        assert_eq!(p.esn, [true, false]);
        assert_eq!(
            parse_proposal("aes128gcm16-x25519", ProposalKind::Ike).map(|_| ()),
            Err(Error::BadProposalString("an AEAD IKE proposal needs a PRF"))
        );
        assert_eq!(
            parse_proposal("aes128-x25519", ProposalKind::Ike).map(|_| ()),
            Err(Error::BadProposalString("no integrity algorithm"))
        );
        assert_eq!(
            parse_proposal("des-sha1-modp1024", ProposalKind::Ike).map(|_| ()),
            Err(Error::UnknownAlgorithm)
        );
        assert_eq!(
            parse_proposal("3des-md5-modp1024", ProposalKind::Ike).map(|_| ()),
            Err(Error::UnknownAlgorithm)
        );
        assert_eq!(
            parse_proposals(
                "aes128gcm16-prfsha256-x25519, aes256-sha384-modp2048",
                ProposalKind::Ike
            )
            .unwrap()
            .len(),
            2
        );
    }

    /// The Windows client's default IKE proposal in strongSwan's words, with the IANA
    /// numbers of RFC 7296 3.3.2 written out, and each weak algorithm named.
    #[test]
    fn windows_default_proposal() {
        let p = parse_proposal("3des-sha1-modp1024", ProposalKind::Ike).unwrap();
        assert_eq!(p.encr, [Encr::TripleDes]);
        assert_eq!(p.integ, [Integ::HmacSha1_96]);
        assert_eq!(p.prf, [Prf::HmacSha1], "PRF taken from the integrity algorithm");
        assert_eq!(p.dh, [DhGroup::Modp1024]);
        assert_eq!(
            (
                Encr::TripleDes.id(),
                Integ::HmacSha1_96.id(),
                Prf::HmacSha1.id(),
                DhGroup::Modp1024.id()
            ),
            (3, 2, 2, 2)
        );
        assert_eq!(
            (Encr::TripleDes.key_len_attr(), Encr::AesCbc192.key_len_attr()),
            (None, Some(192))
        );
        assert_eq!((Integ::HmacSha1_96.key_len(), Integ::HmacSha1_96.icv_len()), (20, 12));
        let names: Vec<&str> = p.weak_algorithms().iter().map(|w| w.0).collect();
        assert_eq!(names, ["3des", "sha1", "prfsha1", "modp1024"]);
        let p = parse_proposal("aes192-aes256-sha256-prfsha1-modp2048", ProposalKind::Ike).unwrap();
        assert_eq!(p.encr, [Encr::AesCbc192, Encr::AesCbc256]);
        assert_eq!(p.weak_algorithms().iter().map(|w| w.0).collect::<Vec<_>>(), ["prfsha1"]);
        let esp = parse_proposal("aes256-3des-sha1", ProposalKind::Esp).unwrap();
        assert_eq!(esp.weak_algorithms().len(), 2);
        for d in [
            "aes128gcm16-aes256gcm16-prfsha256-prfsha384-prfsha512-x25519-ecp256-ecp384-modp2048",
            "aes128-aes256-sha256-sha384-sha512-x25519-ecp256-ecp384-modp2048",
        ] {
            assert!(parse_proposal(d, ProposalKind::Ike)
                .unwrap()
                .weak_algorithms()
                .is_empty());
        }
    }

    #[test]
    fn transform_ids_round_trip() {
        for e in [
            Encr::AesCbc128,
            Encr::AesCbc256,
            Encr::AesCbc192,
            Encr::TripleDes,
            Encr::AesGcm16_128,
            Encr::AesGcm16_256,
            Encr::ChaCha20Poly1305,
        ] {
            assert_eq!(Encr::from_id(e.id(), e.key_len_attr()), Some(e));
        }
        for g in [
            DhGroup::Modp1024,
            DhGroup::Modp2048,
            DhGroup::Ecp256,
            DhGroup::Ecp384,
            DhGroup::Curve25519,
        ] {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
        }
        // IANA values, written out.
        assert_eq!(
            (
                Encr::AesCbc128.id(),
                Encr::AesGcm16_256.id(),
                Encr::ChaCha20Poly1305.id()
            ),
            (12, 20, 28)
        );
        assert_eq!(
            (
                Prf::HmacSha256.id(),
                Integ::HmacSha512_256.id(),
                DhGroup::Curve25519.id()
            ),
            (5, 14, 31)
        );
    }
}
