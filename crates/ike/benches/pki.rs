//! What IKE_AUTH costs with certificates, each beside ring doing the bare cryptography on the
//! same bytes: `cargo bench -p ipsec-ike --bench pki` (under `flock /tmp/ipsec-bench.lock`;
//! `-- --warm-up-time 1 --measurement-time 2` for a quick run).
//!
//! The fixtures are those of `tests/pki.rs` (`tests/data/pki/`, made by
//! `scripts/lib/gen-test-certs.sh`).
//!
//! | group | functions | parameter |
//! |---|---|---|
//! | `verify_chain` | `verify_chain`, `ring-signatures` | the chain |
//! | `sign/<key>` | `auth_sign`, `ring` | — |
//! | `verify/<key>` | `auth_verify`, `ring` | — |
//! | `fake_chain` | `verify_chain`, `webpki-all-orderings` | k fake CAs |
//!
//! - `verify_chain`: [`verify_chain`] (rustls-webpki: path building, validity, EKU, the CRL at
//!   every depth) of `moon` (RSA-2048) <- `inter-ca` (P-384) <- `root-ca` (RSA-2048) and of
//!   `sun` (P-256) <- `root-ca`, with root-ca's CRL. `ring-signatures` is ring verifying only
//!   the signatures that validation checks: each certificate's by its issuer's key and the
//!   CRL's by the root's (the CRL covers the certificates the root issued: inter-ca, sun).
//! - `sign/<key>`: [`auth_sign_with_scheme`] (RFC 7427 method 14: [`RingSigner`], then the
//!   AlgorithmIdentifier framing) of 600 octets, beside ring's key pair signing the same
//!   octets. Keys: `rsa2048-pkcs1-sha256` (moon.key), `p256-sha256` (sun.key), `ed25519`
//!   (dave.key).
//! - `verify/<key>`: [`auth_verify`] of that AUTH data with the certificate (method and
//!   AlgorithmIdentifier parsed, the key taken from the certificate), beside ring's
//!   `UnparsedPublicKey::verify` of the bare signature with the same key.
//! - `fake_chain/<k>`: an end entity sent with `k` fake CAs all named like its issuer, none
//!   chaining to the trusted root (issue #39 item 6), refused by [`verify_chain`] (path building
//!   with a work budget) beside webpki given all the intermediates at once (what
//!   `verify_chain` did before: it tries their orderings).
//!
//! Every pairing is checked once (both sides accept what the other produced) before timing.

use const_oid::db::rfc5912::{ECDSA_WITH_SHA_256, ECDSA_WITH_SHA_384, SHA_256_WITH_RSA_ENCRYPTION};
use const_oid::ObjectIdentifier;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use der::{Decode, Encode};
use ipsec_ike::pki::*;
use ring::rand::SystemRandom;
use ring::signature::{self as rsig, EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair, UnparsedPublicKey};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

/// Inside every fixture's validity (as in tests/pki.rs).
const NOW: u64 = 1_900_000_000;
/// The signed octets: about what IKE_AUTH signs (RFC 7296 2.15).
const OCTETS: [u8; 600] = [0x5a; 600];

fn read(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pki")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
fn cert(name: &str) -> Certificate {
    let mut v = Certificate::parse_pem_or_der(&read(&format!("{name}.pem"))).expect(name);
    assert_eq!(v.len(), 1, "{name}");
    v.remove(0)
}
fn signer(name: &str) -> RingSigner {
    RingSigner::new(PrivateKey::from_pem(&read(name)).expect(name)).expect(name)
}
/// The DER inside a one-block PEM file.
fn pem_der(name: &str) -> Vec<u8> {
    pem_rfc7468::decode_vec(&read(name)).expect(name).1
}

/// A signature ring checks: what is signed, the signature, the algorithm, the signer's key.
struct Signed {
    tbs: Vec<u8>,
    sig: Vec<u8>,
    alg: &'static dyn rsig::VerificationAlgorithm,
    key: Vec<u8>,
}

impl Signed {
    fn verify(&self) -> Result<(), ring::error::Unspecified> {
        UnparsedPublicKey::new(self.alg, &self.key).verify(&self.tbs, &self.sig)
    }
}

fn ring_alg(oid: ObjectIdentifier, issuer: &Certificate) -> &'static dyn rsig::VerificationAlgorithm {
    match (oid, issuer.key_kind()) {
        (SHA_256_WITH_RSA_ENCRYPTION, Some(KeyKind::Rsa { .. })) => &rsig::RSA_PKCS1_2048_8192_SHA256,
        (ECDSA_WITH_SHA_256, Some(KeyKind::EcdsaP256)) => &rsig::ECDSA_P256_SHA256_ASN1,
        (ECDSA_WITH_SHA_256, Some(KeyKind::EcdsaP384)) => &rsig::ECDSA_P384_SHA256_ASN1,
        (ECDSA_WITH_SHA_384, Some(KeyKind::EcdsaP384)) => &rsig::ECDSA_P384_SHA384_ASN1,
        (oid, kind) => panic!("fixture signed with {oid} by a {kind:?} key: add it here"),
    }
}

/// `subject`'s signature by `issuer`'s key.
fn cert_signature(subject: &Certificate, issuer: &Certificate) -> Signed {
    let c = x509_cert::Certificate::from_der(subject.der()).expect("certificate");
    Signed {
        tbs: c.tbs_certificate.to_der().expect("tbsCertificate"),
        sig: c.signature.raw_bytes().to_vec(),
        alg: ring_alg(c.signature_algorithm.oid, issuer),
        key: issuer.public_key_bytes().expect("issuer key").to_vec(),
    }
}

/// The CRL's signature by `issuer`'s key.
fn crl_signature(der: &[u8], issuer: &Certificate) -> Signed {
    let l = x509_cert::crl::CertificateList::from_der(der).expect("CRL");
    Signed {
        tbs: l.tbs_cert_list.to_der().expect("tbsCertList"),
        sig: l.signature.raw_bytes().to_vec(),
        alg: ring_alg(l.signature_algorithm.oid, issuer),
        key: issuer.public_key_bytes().expect("issuer key").to_vec(),
    }
}

fn chains(c: &mut Criterion) {
    let mut t = TrustStore::new();
    t.add_ca(cert("root-ca")).expect("root");
    t.add_crl(&read("root-ca.crl.der")).expect("CRL");
    let (root, inter, moon, sun) = (cert("root-ca"), cert("inter-ca"), cert("moon"), cert("sun"));
    let crl = read("root-ca.crl.der");
    let cases = [
        (
            "rsa-ee<-p384-inter<-root+crl",
            moon.clone(),
            vec![inter.clone()],
            vec![
                cert_signature(&moon, &inter),
                cert_signature(&inter, &root),
                crl_signature(&crl, &root),
            ],
        ),
        (
            "p256-ee<-root+crl",
            sun.clone(),
            vec![],
            vec![cert_signature(&sun, &root), crl_signature(&crl, &root)],
        ),
    ];
    let mut g = c.benchmark_group("verify_chain");
    for (name, ee, intermediates, sigs) in &cases {
        let v = verify_chain(ee, intermediates, &t, NOW).expect(name);
        assert_eq!(v.chain.len(), intermediates.len() + 2, "{name}");
        for s in sigs {
            s.verify().expect(name);
        }
        g.bench_function(BenchmarkId::new("verify_chain", name), |b| {
            b.iter(|| verify_chain(black_box(ee), black_box(intermediates), &t, NOW).expect("chain"))
        });
        g.bench_function(BenchmarkId::new("ring-signatures", name), |b| {
            b.iter(|| {
                for s in sigs {
                    black_box(s.verify()).expect("signature");
                }
            })
        });
    }
    g.finish();
}

/// ring's own key pair for one of the fixtures' keys, signing into a reused buffer.
enum Bare {
    Rsa(RsaKeyPair, Vec<u8>),
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

impl Bare {
    /// Signs `msg` as `RingSigner` would (no copy of the signature) and hands it to `with`.
    fn sign<R>(&mut self, rng: &SystemRandom, msg: &[u8], with: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Bare::Rsa(kp, out) => {
                kp.sign(&rsig::RSA_PKCS1_SHA256, rng, msg, out).expect("sign");
                with(out)
            }
            Bare::Ecdsa(kp) => with(kp.sign(rng, msg).expect("sign").as_ref()),
            Bare::Ed25519(kp) => with(kp.sign(msg).as_ref()),
        }
    }
}

fn signatures(c: &mut Criterion) {
    let rng = SystemRandom::new();
    let rsa = RsaKeyPair::from_der(&pem_der("moon.key")).expect("RSA key");
    let n = rsa.public().modulus_len();
    let sun_der = pem_der("sun.key");
    let sec1 = sec1::EcPrivateKey::from_der(&sun_der).expect("SEC1 key");
    let p256 = EcdsaKeyPair::from_private_key_and_public_key(
        &rsig::ECDSA_P256_SHA256_ASN1_SIGNING,
        sec1.private_key,
        sec1.public_key.expect("public key"),
        &rng,
    )
    .expect("P-256 key");
    let ed = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pem_der("dave.key")).expect("Ed25519 key");
    let cases: [(
        &str,
        &str,
        &str,
        SigScheme,
        Bare,
        &'static dyn rsig::VerificationAlgorithm,
    ); 3] = [
        (
            "rsa2048-pkcs1-sha256",
            "moon.key",
            "moon",
            SigScheme::RsaPkcs1Sha256,
            Bare::Rsa(rsa, vec![0; n]),
            &rsig::RSA_PKCS1_2048_8192_SHA256,
        ),
        (
            "p256-sha256",
            "sun.key",
            "sun",
            SigScheme::EcdsaP256Sha256,
            Bare::Ecdsa(p256),
            &rsig::ECDSA_P256_SHA256_ASN1,
        ),
        (
            "ed25519",
            "dave.key",
            "dave",
            SigScheme::Ed25519,
            Bare::Ed25519(ed),
            &rsig::ED25519,
        ),
    ];
    for (name, key, crt, scheme, mut bare, alg) in cases {
        let s = signer(key);
        let crt = cert(crt);
        let public = UnparsedPublicKey::new(alg, crt.public_key_bytes().expect("key").to_vec());
        // Checked once: each side accepts the other's signature.
        let (m, data) = auth_sign_with_scheme(&s, scheme, &OCTETS).expect("auth_sign");
        let alg_len = 1 + usize::from(data[0]);
        public.verify(&OCTETS, &data[alg_len..]).expect("ring verifies ours");
        let sig = bare.sign(&rng, &OCTETS, <[u8]>::to_vec);
        let mut ours = data[..alg_len].to_vec();
        ours.extend_from_slice(&sig);
        assert_eq!(
            auth_verify(&crt, m, &ours, &OCTETS),
            Ok(()),
            "{name}: ours verifies ring's"
        );

        let mut g = c.benchmark_group(format!("sign/{name}"));
        g.bench_function("auth_sign", |b| {
            b.iter(|| auth_sign_with_scheme(&s, scheme, black_box(&OCTETS)).expect("sign"))
        });
        g.bench_function("ring", |b| b.iter(|| bare.sign(&rng, black_box(&OCTETS), <[u8]>::len)));
        g.finish();

        let mut g = c.benchmark_group(format!("verify/{name}"));
        g.bench_function("auth_verify", |b| {
            b.iter(|| auth_verify(&crt, m, black_box(&data), black_box(&OCTETS)).expect("verify"))
        });
        let bare_sig = &data[alg_len..];
        g.bench_function("ring", |b| {
            b.iter(|| public.verify(black_box(&OCTETS), black_box(bare_sig)).expect("verify"))
        });
        g.finish();
    }
}

/// `k` fake CA certificates named like `like` (its subject as their subject and issuer), each
/// its own public key and serial, the signature `like`'s (so it verifies for none of them):
/// the probe's fake chain of issue #39 item 6 (as `tests/pki.rs` makes it).
fn fakes_like(like: &Certificate, k: usize) -> Vec<Certificate> {
    let base = x509_cert::Certificate::from_der(like.der()).expect("DER");
    (0..k)
        .map(|i| {
            let mut c = base.clone();
            let tbs = &mut c.tbs_certificate;
            tbs.issuer = tbs.subject.clone();
            let mut key = tbs.subject_public_key_info.subject_public_key.raw_bytes().to_vec();
            let n = key.len();
            key[n - 1] ^= i as u8 + 1;
            tbs.subject_public_key_info.subject_public_key = der::asn1::BitString::from_bytes(&key).expect("key");
            let mut serial = tbs.serial_number.as_bytes().to_vec();
            let n = serial.len();
            serial[n - 1] ^= i as u8 + 1;
            tbs.serial_number = x509_cert::serial_number::SerialNumber::new(&serial).expect("serial");
            Certificate::from_der(c.to_der().expect("DER")).expect("certificate")
        })
        .collect()
}

/// Takes any extended key usage (the fakes are refused for their path, not their EKU).
struct AnyEku;

impl webpki::ExtendedKeyUsageValidator for AnyEku {
    fn validate(&self, _: webpki::KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        Ok(())
    }
}

/// `fake_chain/<k>`: an end entity (moon) sent with `k` fake CAs named like its issuer, none
/// chaining to the trusted root (issue #39 item 6). `verify_chain` is this crate's path
/// building with its work budget; `webpki-all-orderings` is what `verify_chain` did before:
/// every intermediate handed to webpki at once, which tries their orderings (up to its
/// 200,000 path-building calls). Both refuse the chain.
fn fake_chains(c: &mut Criterion) {
    let mut t = TrustStore::new();
    t.add_ca(cert("root-ca")).expect("root");
    let root = rustls_pki_types::CertificateDer::from(cert("root-ca").der().to_vec());
    let anchors = [webpki::anchor_from_trusted_cert(&root).expect("anchor").to_owned()];
    let (inter, moon) = (cert("inter-ca"), cert("moon"));
    let time = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(NOW));
    let mut g = c.benchmark_group("fake_chain");
    for k in [6, 7, 8] {
        let fakes = fakes_like(&inter, k);
        assert_eq!(verify_chain(&moon, &fakes, &t, NOW), Err(CertError::UnknownCa));
        let ee_der = rustls_pki_types::CertificateDer::from(moon.der());
        let ee = webpki::EndEntityCert::try_from(&ee_der).expect("EE");
        let ders: Vec<rustls_pki_types::CertificateDer<'_>> = fakes
            .iter()
            .map(|f| rustls_pki_types::CertificateDer::from(f.der()))
            .collect();
        let old = || {
            ee.verify_for_usage(webpki::ALL_VERIFICATION_ALGS, &anchors, &ders, time, AnyEku, None, None)
                .is_err()
        };
        assert!(old());
        g.bench_function(BenchmarkId::new("verify_chain", k), |b| {
            b.iter(|| verify_chain(black_box(&moon), black_box(&fakes), &t, NOW).is_err())
        });
        g.bench_function(BenchmarkId::new("webpki-all-orderings", k), |b| b.iter(old));
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .nresamples(2000)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = chains, signatures, fake_chains
}
criterion_main!(benches);
