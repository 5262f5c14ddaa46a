//! TEMPORARY STUB of the pki API (being built on branch h-pki); replaced on merge.
#![allow(missing_docs, unused_variables, dead_code)]
use crate::error::Error;
use crate::id::Identity;
use alloc::vec::Vec;
use core::fmt;

#[derive(Clone, Debug)]
pub struct Certificate(Vec<u8>);
impl Certificate {
    pub fn from_der(der: Vec<u8>) -> Result<Certificate, PkiError> { Ok(Certificate(der)) }
    pub fn parse_pem_or_der(bytes: &[u8]) -> Result<Vec<Certificate>, PkiError> { Err(PkiError::Malformed) }
    pub fn der(&self) -> &[u8] { &self.0 }
    pub fn subject(&self) -> Dn { Dn }
    pub fn issuer(&self) -> Dn { Dn }
    pub fn ca_key_id(&self) -> [u8; 20] { [0; 20] }
    pub fn is_ca(&self) -> bool { false }
    pub fn not_after_unix(&self) -> u64 { 0 }
    pub fn key_kind(&self) -> Option<KeyKind> { None }
    pub fn sans(&self) -> Vec<Identity> { Vec::new() }
}
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Dn;
impl fmt::Display for Dn { fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str("stub") } }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind { Rsa { bits: u32 }, EcdsaP256, EcdsaP384, Ed25519 }
#[derive(Clone)]
pub struct PrivateKey;
impl PrivateKey {
    pub fn from_pem(b: &[u8]) -> Result<PrivateKey, PkiError> { Err(PkiError::Malformed) }
    pub fn kind(&self) -> KeyKind { KeyKind::Ed25519 }
    pub fn public_key_matches(&self, c: &Certificate) -> bool { false }
}
#[derive(Clone, Copy, Debug)]
pub enum SigScheme { RsaPkcs1Sha256, RsaPkcs1Sha384, RsaPkcs1Sha512, RsaPssSha256, RsaPssSha384, RsaPssSha512, EcdsaP256Sha256, EcdsaP384Sha384, Ed25519 }
pub trait Signer: Send + Sync { fn kind(&self) -> KeyKind; fn sign(&self, scheme: SigScheme, msg: &[u8]) -> Result<Vec<u8>, PkiError>; }
pub struct RingSigner;
impl RingSigner { pub fn new(k: PrivateKey) -> Result<RingSigner, PkiError> { Err(PkiError::Malformed) } }
impl Signer for RingSigner { fn kind(&self) -> KeyKind { KeyKind::Ed25519 } fn sign(&self, s: SigScheme, m: &[u8]) -> Result<Vec<u8>, PkiError> { Err(PkiError::Malformed) } }
pub mod hash_alg { pub const SHA1: u16 = 1; pub const SHA2_256: u16 = 2; pub const SHA2_384: u16 = 3; pub const SHA2_512: u16 = 4; pub const IDENTITY: u16 = 5; }
pub fn our_hash_algs() -> &'static [u16] { &[2, 3, 4, 5] }
pub fn auth_sign(signer: &dyn Signer, peer_hash_algs: Option<&[u16]>, octets: &[u8]) -> Result<(u8, Vec<u8>), PkiError> { Err(PkiError::Malformed) }
pub fn auth_verify(cert: &Certificate, method: u8, data: &[u8], octets: &[u8]) -> Result<(), CertError> { Err(CertError::BadSignature) }
#[derive(Default)]
pub struct TrustStore(Vec<Certificate>);
impl TrustStore {
    pub fn new() -> Self { TrustStore(Vec::new()) }
    pub fn add_ca(&mut self, c: Certificate) -> Result<(), PkiError> { self.0.push(c); Ok(()) }
    pub fn add_crl(&mut self, b: &[u8]) -> Result<(), PkiError> { Ok(()) }
    pub fn ca_key_ids(&self) -> Vec<[u8; 20]> { Vec::new() }
    pub fn cas(&self) -> &[Certificate] { &self.0 }
    pub fn is_empty(&self) -> bool { self.0.is_empty() }
}
pub struct Verified { pub end_entity: Certificate, pub chain: Vec<Certificate> }
pub fn verify_chain(ee: &Certificate, im: &[Certificate], t: &TrustStore, now_unix: u64) -> Result<Verified, CertError> { Err(CertError::UnknownCa) }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertError { Malformed, Expired, NotYetValid, UnknownCa, Revoked, BadSignature, WrongUsage, IdentityMismatch, UnsupportedAlgorithm }
impl fmt::Display for CertError { fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "{self:?}") } }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PkiError { Malformed }
impl fmt::Display for PkiError { fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "{self:?}") } }
pub fn cert_matches_id(cert: &Certificate, id: &Identity) -> bool { false }
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdPattern;
impl IdPattern { pub fn from_str_config(s: &str) -> Result<IdPattern, PkiError> { Ok(IdPattern) } }
pub fn id_matches_pattern(p: &IdPattern, id: &Identity) -> bool { false }
pub mod cert_encoding { pub const X509_SIGNATURE: u8 = 4; }
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPayload { pub encoding: u8, pub data: Vec<u8> }
impl CertPayload { pub fn parse(b: &[u8]) -> Result<Self, Error> { Err(Error::Truncated) } pub fn to_body(&self) -> Vec<u8> { Vec::new() } }
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertReqPayload { pub encoding: u8, pub ca_key_ids: Vec<[u8; 20]> }
impl CertReqPayload { pub fn parse(b: &[u8]) -> Result<Self, Error> { Err(Error::Truncated) } pub fn to_body(&self) -> Vec<u8> { Vec::new() } }
