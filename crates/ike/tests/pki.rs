//! Certificates and signatures (src/pki) against openssl: fixtures made by
//! scripts/lib/gen-test-certs.sh (crates/ike/tests/data/pki/), signatures openssl made over
//! msg.bin, openssl's own view of the subjects and public key hashes.
use ipsec_ike::pki::*;
use ipsec_ike::Identity;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// 2030-03-17: inside every fixture's validity (they start when generated, 2026, and last
/// 20 years) except expired.pem's (2020-2021). Fixed, so the tests do not depend on the clock.
const NOW: u64 = 1_900_000_000;

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pki")
        .join(name)
}
fn read(name: &str) -> Vec<u8> {
    std::fs::read(path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}
fn cert(name: &str) -> Certificate {
    let mut v = Certificate::parse_pem_or_der(&read(&format!("{name}.pem"))).unwrap();
    assert_eq!(v.len(), 1, "{name}");
    v.remove(0)
}
fn key(name: &str) -> PrivateKey {
    PrivateKey::from_pem(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}
fn signer(name: &str) -> RingSigner {
    RingSigner::new(key(name)).unwrap()
}
fn store(with_crl: bool) -> TrustStore {
    let mut t = TrustStore::new();
    t.add_ca(cert("root-ca")).unwrap();
    if with_crl {
        t.add_crl(&read("root-ca.crl.pem")).unwrap();
    }
    t
}
/// `name<TAB>value` lines written by gen-test-certs.sh.
fn table(name: &str) -> BTreeMap<String, String> {
    String::from_utf8(read(name))
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}
fn id(s: &str) -> Identity {
    Identity::from_str_config(s).unwrap()
}
/// Method-14 AUTH data: length, AlgorithmIdentifier, signature.
fn rfc7427(scheme: SigScheme, sig: &[u8]) -> Vec<u8> {
    let alg = scheme.algorithm_identifier();
    let mut v = vec![alg.len() as u8];
    v.extend_from_slice(alg);
    v.extend_from_slice(sig);
    v
}

const ALL_CERTS: &[&str] = &[
    "root-ca", "other-ca", "inter-ca", "moon", "sun", "carol", "dave", "unknown", "revoked", "codesign", "expired",
];

#[test]
fn chains_validate() {
    let inter = cert("inter-ca");
    for crl in [false, true] {
        let t = store(crl);
        let v = verify_chain(&cert("moon"), std::slice::from_ref(&inter), &t, NOW).unwrap();
        assert_eq!(v.end_entity, cert("moon"));
        assert_eq!(v.chain, vec![cert("moon"), inter.clone(), cert("root-ca")]);
        let v = verify_chain(&cert("carol"), &[cert("sun"), inter.clone()], &t, NOW).unwrap();
        assert_eq!(v.chain, vec![cert("carol"), inter.clone(), cert("root-ca")]);
        for ee in ["sun", "dave"] {
            let v = verify_chain(&cert(ee), std::slice::from_ref(&inter), &t, NOW).unwrap();
            assert_eq!(v.chain, vec![cert(ee), cert("root-ca")], "{ee}");
        }
    }
    // The intermediate as the trust anchor: the chain ends there.
    let mut t = TrustStore::new();
    t.add_ca(inter.clone()).unwrap();
    assert_eq!(
        verify_chain(&cert("moon"), &[], &t, NOW).unwrap().chain,
        vec![cert("moon"), inter.clone()]
    );
    // A PEM chain file (EE then intermediate).
    let chain = Certificate::parse_pem_or_der(&read("moon-chain.pem")).unwrap();
    assert_eq!(chain, vec![cert("moon"), inter]);
    assert!(verify_chain(&chain[0], &chain[1..], &store(true), NOW).is_ok());
    // DER input.
    assert_eq!(
        Certificate::parse_pem_or_der(&read("moon.der")).unwrap(),
        vec![cert("moon")]
    );
}

#[test]
fn each_refusal_has_its_error() {
    let t = store(true);
    let inter = [cert("inter-ca")];
    assert_eq!(verify_chain(&cert("expired"), &[], &t, NOW), Err(CertError::Expired));
    assert_eq!(
        verify_chain(&cert("moon"), &inter, &t, 1_700_000_000),
        Err(CertError::NotYetValid)
    );
    assert_eq!(verify_chain(&cert("unknown"), &[], &t, NOW), Err(CertError::UnknownCa));
    assert_eq!(verify_chain(&cert("moon"), &[], &t, NOW), Err(CertError::UnknownCa));
    assert_eq!(
        verify_chain(&cert("moon"), &inter, &TrustStore::new(), NOW),
        Err(CertError::UnknownCa)
    );
    assert_eq!(verify_chain(&cert("revoked"), &[], &t, NOW), Err(CertError::Revoked));
    // Without the CRL nothing says it is revoked.
    assert!(verify_chain(&cert("revoked"), &[], &store(false), NOW).is_ok());
    // The CRL in DER works as well.
    let mut d = TrustStore::new();
    d.add_ca(cert("root-ca")).unwrap();
    d.add_crl(&read("root-ca.crl.der")).unwrap();
    assert_eq!(verify_chain(&cert("revoked"), &[], &d, NOW), Err(CertError::Revoked));
    assert_eq!(
        verify_chain(&cert("codesign"), &[], &t, NOW),
        Err(CertError::WrongUsage)
    );
    // A CA as the peer's certificate.
    assert_eq!(
        verify_chain(&cert("inter-ca"), &[], &t, NOW),
        Err(CertError::WrongUsage)
    );
    // One bit of the signature flipped.
    let mut der = cert("sun").der().to_vec();
    let n = der.len();
    der[n - 10] ^= 1;
    let bad = Certificate::from_der(der).unwrap();
    assert_eq!(verify_chain(&bad, &[], &t, NOW), Err(CertError::BadSignature));
    // Identity.
    assert_eq!(
        verify_peer(&cert("sun"), &[], &t, NOW, &id("moon.strongswan.org")),
        Err(CertError::IdentityMismatch)
    );
    assert!(verify_peer(&cert("sun"), &[], &t, NOW, &id("sun.strongswan.org")).is_ok());
    // Each has one clear phrase.
    assert_eq!(CertError::Expired.to_string(), "certificate expired");
    assert_eq!(CertError::UnknownCa.to_string(), "issuer unknown (no trusted CA)");
    assert_eq!(CertError::Revoked.to_string(), "certificate revoked");
    assert_eq!(CertError::IdentityMismatch.to_string(), "identity mismatch");
    assert_eq!(CertError::BadSignature.to_string(), "bad signature");
}

#[test]
fn store_and_parsing_refusals() {
    let mut t = TrustStore::new();
    assert!(t.is_empty());
    assert_eq!(t.add_ca(cert("moon")), Err(PkiError::NotCa));
    assert_eq!(t.add_crl(b"not a crl"), Err(PkiError::BadCrl));
    assert_eq!(t.add_crl(&read("moon.pem")), Err(PkiError::BadCrl));
    t.add_ca(cert("root-ca")).unwrap();
    t.add_ca(cert("root-ca")).unwrap();
    t.add_ca(cert("inter-ca")).unwrap();
    assert_eq!(t.cas(), &[cert("root-ca"), cert("inter-ca")]);
    assert!(!t.is_empty());
    assert_eq!(
        Certificate::from_der(vec![0x30, 0x03, 0x02, 0x01, 0x01]).unwrap_err(),
        PkiError::BadCertificate
    );
    assert_eq!(
        Certificate::parse_pem_or_der(&read("moon.key")).unwrap_err(),
        PkiError::BadPem
    );
    assert_eq!(
        Certificate::from_der(vec![0x30; MAX_CERT_LEN + 1]).unwrap_err(),
        PkiError::BadCertificate
    );
    assert_eq!(PrivateKey::from_pem(&read("moon.pem")).unwrap_err(), PkiError::BadPem);
    let enc = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMAA=\n-----END ENCRYPTED PRIVATE KEY-----\n";
    assert_eq!(
        PrivateKey::from_pem(enc.as_bytes()).unwrap_err(),
        PkiError::EncryptedKey
    );
    let junk = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
    assert!(matches!(
        PrivateKey::from_pem(junk.as_bytes()),
        Err(PkiError::BadKey(_))
    ));
}

#[test]
fn certificate_fields() {
    let kinds = [
        ("root-ca", KeyKind::Rsa { bits: 2048 }, true),
        ("inter-ca", KeyKind::EcdsaP384, true),
        ("moon", KeyKind::Rsa { bits: 2048 }, false),
        ("sun", KeyKind::EcdsaP256, false),
        ("carol", KeyKind::EcdsaP384, false),
        ("dave", KeyKind::Ed25519, false),
    ];
    for (n, k, ca) in kinds {
        assert_eq!(cert(n).key_kind(), Some(k), "{n}");
        assert_eq!(cert(n).is_ca(), ca, "{n}");
    }
    // openssl ca -enddate 20210101000000Z
    assert_eq!(cert("expired").not_after_unix(), 1_609_459_200);
    assert!(cert("moon").not_after_unix() > NOW);
    assert_eq!(cert("moon").issuer(), cert("inter-ca").subject());
    assert_eq!(
        format!("{:?}", cert("moon")),
        "Certificate(\"C=CH, O=strongSwan, CN=moon.strongswan.org\")"
    );
    assert_eq!(
        cert("moon").sans(),
        vec![
            id("moon.strongswan.org"),
            id("192.168.0.1"),
            id("fec0::1"),
            id("moon@strongswan.org")
        ]
    );
    assert_eq!(cert("dave").sans(), vec![id("dave@strongswan.org"), id("10.1.0.20")]);
}

#[test]
fn ca_key_ids_are_openssls_spki_sha1() {
    let want = table("openssl-spki-sha1.txt");
    for n in ALL_CERTS {
        assert_eq!(hex::encode(cert(n).ca_key_id()), want[*n], "{n}");
    }
    let mut t = store(false);
    t.add_ca(cert("inter-ca")).unwrap();
    let ids = t.ca_key_ids();
    assert_eq!(
        ids.iter().map(hex::encode).collect::<Vec<_>>(),
        vec![want["root-ca"].clone(), want["inter-ca"].clone()]
    );
    // A CERTREQ listing them, and a CERT carrying moon.
    let req = CertReqPayload::x509(ids.clone());
    let body = req.to_body();
    assert_eq!(body.len(), 41);
    assert_eq!(CertReqPayload::parse(&body).unwrap(), req);
    assert_eq!(t.ca_by_key_id(&ids[1]), Some(&cert("inter-ca")));
    let c = CertPayload::x509(&cert("moon"));
    assert_eq!(c.to_body()[0], cert_encoding::X509_SIGNATURE);
    let back = CertPayload::parse(&c.to_body()).unwrap();
    assert_eq!(back.certificate(), Some(cert("moon")));
}

#[test]
fn dns_print_and_parse_like_openssl() {
    // openssl -nameopt sep_comma_plus_space,sname: the certificate's RDN order, short names;
    // strongSwan writes E for emailAddress and SN for serialNumber.
    let want = table("openssl-subjects.txt");
    for n in ALL_CERTS {
        let ours = cert(n).subject();
        let theirs = &want[*n];
        assert_eq!(
            ours.to_string(),
            theirs.replace("emailAddress=", "E=").replace("serialNumber=", "SN="),
            "{n}"
        );
        // openssl's text parses to an equal DN, and so does ours.
        assert_eq!(Dn::from_str_config(theirs).unwrap(), ours, "{n}");
        assert_eq!(Dn::from_str_config(&ours.to_string()).unwrap(), ours, "{n}");
        assert_eq!(Dn::from_der(&ours.to_der()).unwrap(), ours, "{n}");
        // The ID payload keeps the certificate's exact DER.
        let i = Identity::Dn(ours.clone());
        assert_eq!(Identity::parse(&i.to_body()).unwrap().to_body(), i.to_body());
        assert!(cert_matches_id(&cert(n), &i), "{n}");
    }
    assert_eq!(
        cert("sun").subject().to_string(),
        "C=CH, ST=Zurich, L=Rapperswil, O=strongSwan, OU=Test, CN=sun.strongswan.org, E=sun@strongswan.org"
    );
}

#[test]
fn identities_in_certificates() {
    let moon = cert("moon");
    for yes in [
        "moon.strongswan.org",
        "MOON.strongswan.org",
        "192.168.0.1",
        "fec0::1",
        "moon@strongswan.org",
    ] {
        assert!(cert_matches_id(&moon, &id(yes)), "{yes}");
    }
    assert!(cert_matches_id(
        &moon,
        &id("C=CH, O=strongSwan, CN=moon.strongswan.org")
    ));
    assert!(cert_matches_id(
        &moon,
        &id("c=ch, o=strongswan, cn=moon.strongswan.org")
    ));
    for no in [
        "sun.strongswan.org",
        "strongswan.org",
        "192.168.0.2",
        "fec0::2",
        "sun@strongswan.org",
        "C=CH, O=strongSwan, CN=sun.strongswan.org",
        "O=strongSwan, C=CH, CN=moon.strongswan.org",
        "keyid:0102",
    ] {
        assert!(!cert_matches_id(&moon, &id(no)), "{no}");
    }
    // carol's CN looks like an email address; only the SAN counts.
    assert!(cert_matches_id(&cert("carol"), &id("carol@strongswan.org")));
    assert!(!cert_matches_id(&cert("sun"), &id("sun@strongswan.org")));
    // Patterns from a configuration.
    let p = IdPattern::from_str_config("C=CH, O=strongSwan, CN=*").unwrap();
    assert!(id_matches_pattern(&p, &Identity::Dn(cert("moon").subject())));
    assert!(!id_matches_pattern(&p, &Identity::Dn(cert("carol").subject())));
    let p = IdPattern::from_str_config("*.strongswan.org").unwrap();
    assert!(id_matches_pattern(&p, &id("moon.strongswan.org")));
}

#[test]
fn keys_read_and_match() {
    let cases = [
        ("moon.key", "moon", KeyKind::Rsa { bits: 2048 }),
        ("moon-pkcs8.key", "moon", KeyKind::Rsa { bits: 2048 }),
        ("sun.key", "sun", KeyKind::EcdsaP256),
        ("carol.key", "carol", KeyKind::EcdsaP384),
        ("dave.key", "dave", KeyKind::Ed25519),
    ];
    for (k, c, kind) in cases {
        let key = key(k);
        assert_eq!(key.kind(), kind, "{k}");
        assert_eq!(format!("{key:?}"), format!("PrivateKey({kind:?})"));
        for (_, other, _) in cases {
            assert_eq!(key.public_key_matches(&cert(other)), other == c, "{k} vs {other}");
        }
        let s = RingSigner::new(key).unwrap();
        assert_eq!(s.kind(), kind);
        assert_eq!(format!("{s:?}"), format!("RingSigner({kind:?})"));
    }
}

#[test]
fn sign_then_verify_every_scheme() {
    let octets = b"the signed octets of RFC 7296 2.15".to_vec();
    let keys = [
        ("moon.key", "moon"),
        ("moon-pkcs8.key", "moon"),
        ("sun.key", "sun"),
        ("carol.key", "carol"),
        ("dave.key", "dave"),
    ];
    for (k, c) in keys {
        let s = signer(k);
        let crt = cert(c);
        let mut n = 0;
        for scheme in SigScheme::ALL {
            if !scheme.fits(s.kind()) {
                assert_eq!(s.sign(scheme, &octets), Err(PkiError::SchemeMismatch));
                assert_eq!(
                    auth_sign_with_scheme(&s, scheme, &octets),
                    Err(PkiError::SchemeMismatch)
                );
                continue;
            }
            n += 1;
            let (m, data) = auth_sign_with_scheme(&s, scheme, &octets).unwrap();
            assert_eq!(m, 14);
            assert_eq!(auth_verify(&crt, m, &data, &octets), Ok(()), "{k} {scheme:?}");
            assert_eq!(
                auth_verify(&crt, m, &data, b"other octets"),
                Err(CertError::BadSignature),
                "{k} {scheme:?}"
            );
            let mut bad = data.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert_eq!(auth_verify(&crt, m, &bad, &octets), Err(CertError::BadSignature));
            // Another certificate's key.
            let other = if c == "sun" { cert("expired") } else { cert("sun") };
            assert!(auth_verify(&other, m, &data, &octets).is_err());
        }
        assert!(n >= 1);
        // What auth_sign picks: RFC 7427 with the peer's hashes, classic without.
        let (m, data) = auth_sign(&s, Some(our_hash_algs()), &octets).unwrap();
        assert_eq!(m, 14);
        assert_eq!(auth_verify(&crt, m, &data, &octets), Ok(()));
        match s.kind() {
            KeyKind::EcdsaP256 | KeyKind::EcdsaP384 => {
                let (m, data) = auth_sign(&s, None, &octets).unwrap();
                let (want_m, len) = if s.kind() == KeyKind::EcdsaP256 {
                    (9, 64)
                } else {
                    (10, 96)
                };
                assert_eq!((m, data.len()), (want_m, len));
                assert_eq!(auth_verify(&crt, m, &data, &octets), Ok(()));
                assert_eq!(auth_verify(&crt, m, &data, b"x"), Err(CertError::BadSignature));
                // Peers without a common hash get the classic method too.
                assert_eq!(auth_sign(&s, Some(&[hash_alg::SHA1]), &octets).unwrap().0, want_m);
            }
            // RSA without RFC 7427: method 1, PKCS#1 v1.5 with SHA-1 (RFC 7296 3.8).
            KeyKind::Rsa { .. } => {
                let (m, data) = auth_sign(&s, None, &octets).unwrap();
                assert_eq!((m, data.len()), (1, 256));
                assert_eq!(auth_verify(&crt, m, &data, &octets), Ok(()));
                assert_eq!(auth_verify(&crt, m, &data, b"x"), Err(CertError::BadSignature));
                assert_eq!(auth_sign(&s, Some(&[hash_alg::SHA1]), &octets).unwrap().0, 1);
            }
            KeyKind::Ed25519 => assert!(matches!(auth_sign(&s, None, &octets), Err(PkiError::Unsupported(_)))),
        }
    }
    // RSA: PKCS#1 v1.5 by default, the first SHA-2 the peer lists in our order.
    let (_, data) = auth_sign(&signer("moon.key"), Some(&[hash_alg::SHA2_512]), &octets).unwrap();
    assert_eq!(
        &data[1..1 + data[0] as usize],
        SigScheme::RsaPkcs1Sha512.algorithm_identifier()
    );
}

#[test]
fn auth_verify_refusals() {
    let octets = read("msg.bin");
    let moon = cert("moon");
    let sig = read("moon-pkcs1-sha256.bin");
    // Method/key mismatches.
    assert_eq!(auth_verify(&moon, 9, &[0; 64], &octets), Err(CertError::KeyMismatch));
    assert_eq!(
        auth_verify(&cert("carol"), 9, &[0; 64], &octets),
        Err(CertError::KeyMismatch)
    );
    assert_eq!(auth_verify(&cert("sun"), 1, &sig, &octets), Err(CertError::KeyMismatch));
    assert_eq!(
        auth_verify(&cert("sun"), 14, &rfc7427(SigScheme::RsaPkcs1Sha256, &sig), &octets),
        Err(CertError::KeyMismatch)
    );
    // Wrong sizes, unknown methods and algorithms.
    assert_eq!(
        auth_verify(&cert("sun"), 9, &[0; 63], &octets),
        Err(CertError::Malformed)
    );
    assert_eq!(
        auth_verify(&cert("sun"), 11, &[0; 132], &octets),
        Err(CertError::UnsupportedAlgorithm)
    );
    assert_eq!(
        auth_verify(&moon, 2, &sig, &octets),
        Err(CertError::UnsupportedAlgorithm)
    );
    assert_eq!(auth_verify(&moon, 14, &[], &octets), Err(CertError::Malformed));
    assert_eq!(auth_verify(&moon, 14, &[15, 0x30], &octets), Err(CertError::Malformed));
    // RFC 7427 A.1.1 sha1WithRSAEncryption: refused (no SHA-1 inside method 14).
    let sha1_rsa = hex::decode("300d06092a864886f70d0101050500").unwrap();
    let mut data = vec![sha1_rsa.len() as u8];
    data.extend_from_slice(&sha1_rsa);
    data.extend_from_slice(&read("moon-pkcs1-sha1.bin"));
    assert_eq!(
        auth_verify(&moon, 14, &data, &octets),
        Err(CertError::UnsupportedAlgorithm)
    );
    // A PSS signature announced as PKCS#1.
    let pss = read("moon-pss-sha256.bin");
    assert_eq!(
        auth_verify(&moon, 14, &rfc7427(SigScheme::RsaPkcs1Sha256, &pss), &octets),
        Err(CertError::BadSignature)
    );
}

/// "INTEGER :HEX" lines of `openssl asn1parse`: r and s, each left-padded to `n` octets.
fn r_s_from_asn1parse(name: &str, n: usize) -> Vec<u8> {
    let text = String::from_utf8(read(name)).unwrap();
    let ints: Vec<Vec<u8>> = text
        .lines()
        .filter_map(|l| {
            l.split_once("INTEGER")
                .map(|(_, v)| v.trim().trim_start_matches(':').to_string())
        })
        .map(|h| {
            let h = if h.len() % 2 == 1 { format!("0{h}") } else { h };
            hex::decode(h).unwrap()
        })
        .collect();
    assert_eq!(ints.len(), 2, "{name}");
    let mut out = Vec::new();
    for i in ints {
        let i: Vec<u8> = i.into_iter().skip_while(|&b| b == 0).collect();
        out.extend(std::iter::repeat_n(0, n - i.len()));
        out.extend(i);
    }
    out
}

#[test]
fn openssl_signatures_verify() {
    let msg = read("msg.bin");
    let moon = cert("moon");
    for (file, scheme) in [
        ("moon-pkcs1-sha256.bin", SigScheme::RsaPkcs1Sha256),
        ("moon-pkcs1-sha384.bin", SigScheme::RsaPkcs1Sha384),
        ("moon-pkcs1-sha512.bin", SigScheme::RsaPkcs1Sha512),
        ("moon-pss-sha256.bin", SigScheme::RsaPssSha256),
        ("moon-pss-sha384.bin", SigScheme::RsaPssSha384),
        ("moon-pss-sha512.bin", SigScheme::RsaPssSha512),
    ] {
        let data = rfc7427(scheme, &read(file));
        assert_eq!(auth_verify(&moon, 14, &data, &msg), Ok(()), "{file}");
        assert_eq!(
            auth_verify(&moon, 14, &data, b"not the message"),
            Err(CertError::BadSignature),
            "{file}"
        );
    }
    // The classic RSA method: PKCS#1 v1.5 with SHA-1.
    assert_eq!(auth_verify(&moon, 1, &read("moon-pkcs1-sha1.bin"), &msg), Ok(()));
    // ... which PKCS#1 v1.5 makes deterministic: ours (RustCrypto rsa, ring cannot) is
    // openssl's (`openssl dgst -sha1 -sign moon.key msg.bin`) byte for byte, from either key
    // file.
    for k in ["moon.key", "moon-pkcs8.key"] {
        let s = signer(k);
        assert_eq!(
            s.sign(SigScheme::RsaPkcs1Sha1, &msg).unwrap(),
            read("moon-pkcs1-sha1.bin"),
            "{k}"
        );
        assert_eq!(auth_sign(&s, None, &msg).unwrap(), (1, read("moon-pkcs1-sha1.bin")));
        // Never inside method 14 (RFC 8247 3.4).
        assert!(matches!(
            auth_sign_with_scheme(&s, SigScheme::RsaPkcs1Sha1, &msg),
            Err(PkiError::Unsupported(_))
        ));
    }
    assert_eq!(
        signer("sun.key").sign(SigScheme::RsaPkcs1Sha1, &msg),
        Err(PkiError::SchemeMismatch)
    );
    assert_eq!(
        auth_verify(&moon, 1, &read("moon-pkcs1-sha256.bin"), &msg),
        Err(CertError::BadSignature)
    );
    // ECDSA: DER in method 14, r||s (from openssl asn1parse) in methods 9 and 10.
    for (c, der, txt, scheme, method, n) in [
        (
            "sun",
            "sun-ecdsa-sha256.der",
            "sun-ecdsa-sha256.asn1parse.txt",
            SigScheme::EcdsaP256Sha256,
            9,
            32,
        ),
        (
            "carol",
            "carol-ecdsa-sha384.der",
            "carol-ecdsa-sha384.asn1parse.txt",
            SigScheme::EcdsaP384Sha384,
            10,
            48,
        ),
    ] {
        let crt = cert(c);
        let der = read(der);
        assert_eq!(auth_verify(&crt, 14, &rfc7427(scheme, &der), &msg), Ok(()), "{c}");
        let fixed = r_s_from_asn1parse(txt, n);
        assert_eq!(ecdsa_der_to_fixed(&der, n).unwrap(), fixed, "{c}");
        assert_eq!(auth_verify(&crt, method, &fixed, &msg), Ok(()), "{c}");
        assert_eq!(
            auth_verify(&crt, method, &fixed, b"x"),
            Err(CertError::BadSignature),
            "{c}"
        );
    }
    // Ed25519 (RFC 8420).
    let data = rfc7427(SigScheme::Ed25519, &read("dave-ed25519.bin"));
    assert_eq!(auth_verify(&cert("dave"), 14, &data, &msg), Ok(()));
    assert_eq!(
        auth_verify(&cert("dave"), 14, &data, b"x"),
        Err(CertError::BadSignature)
    );
}

/// `k` fake CA certificates named like `like`: its subject as their subject and issuer, each
/// its own public key (the last octet changed) and its own serial; the signature is `like`'s
/// own, so it verifies for none of them (issue #39 item 6: the probe's fake chain).
fn fakes_like(like: &Certificate, k: usize) -> Vec<Certificate> {
    use der::{Decode, Encode};
    let base = x509_cert::Certificate::from_der(like.der()).unwrap();
    (0..k)
        .map(|i| {
            let mut c = base.clone();
            let tbs = &mut c.tbs_certificate;
            tbs.issuer = tbs.subject.clone();
            let mut key = tbs.subject_public_key_info.subject_public_key.raw_bytes().to_vec();
            let n = key.len();
            key[n - 1] ^= i as u8 + 1;
            tbs.subject_public_key_info.subject_public_key = der::asn1::BitString::from_bytes(&key).unwrap();
            let mut serial = tbs.serial_number.as_bytes().to_vec();
            let n = serial.len();
            serial[n - 1] ^= i as u8 + 1;
            tbs.serial_number = x509_cert::serial_number::SerialNumber::new(&serial).unwrap();
            Certificate::from_der(c.to_der().unwrap()).unwrap()
        })
        .collect()
}

/// Item 6 of issue #39: fake CAs named like the end entity's issuer, sent before the real
/// intermediate, no longer exhaust the path builder: the real chain is found (the shortest
/// candidate path first, candidates by key identifier, a bounded number of paths tried).
/// Before, webpki tried the orderings of the fakes first and gave up at its budget of 100
/// signature checks (`MaximumSignatureChecksExceeded`), refusing a valid chain.
#[test]
fn a_real_chain_behind_fake_cas_named_like_its_issuer_validates() {
    let inter = cert("inter-ca");
    let t = store(true);
    let mut sent = fakes_like(&inter, MAX_CHAIN_CERTS - 1);
    sent.push(inter.clone());
    let v = verify_chain(&cert("moon"), &sent, &t, NOW).expect("the real chain");
    assert_eq!(v.chain, vec![cert("moon"), inter.clone(), cert("root-ca")]);
    // Fakes alone: refused, as an unknown CA.
    let only = fakes_like(&inter, MAX_CHAIN_CERTS);
    assert_eq!(verify_chain(&cert("moon"), &only, &t, NOW), Err(CertError::UnknownCa));
    // Fakes after the real one: found at once, as before.
    let mut after = vec![inter.clone()];
    after.extend(fakes_like(&inter, MAX_CHAIN_CERTS - 1));
    assert!(verify_chain(&cert("moon"), &after, &t, NOW).is_ok());
}
