//! Arbitrary bytes as a certificate (crates/ike src/pki): `Certificate::from_der` (and the PEM
//! reader and DN parser when that fails), every accessor, `verify_chain` against a fixed store
//! (the test root CA, its CRL; the test intermediate offered), and identity matching. Checked:
//! a certificate contains each of its own SAN identities and its subject DN; a DN's DER reads
//! back equal.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ike::pki::*;
use ipsec_ike::Identity;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const ROOT: &[u8] = include_bytes!("../../crates/ike/tests/data/pki/root-ca.pem");
const INTER: &[u8] = include_bytes!("../../crates/ike/tests/data/pki/inter-ca.pem");
const CRL: &[u8] = include_bytes!("../../crates/ike/tests/data/pki/root-ca.crl.pem");
/// Inside the fixtures' validity (see crates/ike/tests/pki.rs).
const NOW: u64 = 1_900_000_000;

fn fixed() -> &'static (TrustStore, Vec<Certificate>) {
    static S: OnceLock<(TrustStore, Vec<Certificate>)> = OnceLock::new();
    S.get_or_init(|| {
        let mut t = TrustStore::new();
        for c in Certificate::parse_pem_or_der(ROOT).unwrap() {
            t.add_ca(c).unwrap();
        }
        t.add_crl(CRL).unwrap();
        (t, Certificate::parse_pem_or_der(INTER).unwrap())
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(c) = Certificate::from_der(data.to_vec()) else {
        let _ = Certificate::parse_pem_or_der(data);
        if let Ok(d) = Dn::from_der(data) {
            assert_eq!(Dn::from_der(&d.to_der()).unwrap(), d);
            let _ = Dn::from_str_config(&d.to_string());
        }
        return;
    };
    let (store, inter) = fixed();
    let subject = c.subject();
    let _ = (
        c.issuer().to_string(),
        c.ca_key_id(),
        c.is_ca(),
        c.not_after_unix(),
        c.key_kind(),
        format!("{c:?}"),
    );
    if subject.to_der().len() <= MAX_DN_LEN {
        assert_eq!(Dn::from_der(&subject.to_der()).unwrap(), subject);
    }
    let _ = Dn::from_str_config(&subject.to_string());
    let _ = verify_chain(&c, inter, store, NOW);
    let _ = verify_chain(&c, &[], store, 0);
    assert!(cert_matches_id(&c, &Identity::Dn(subject)));
    for san in c.sans() {
        assert!(cert_matches_id(&c, &san), "{san}");
    }
    let _ = cert_matches_id(&c, &Identity::Fqdn("moon.strongswan.org".into()));
    let _ = CertPayload::x509(&c).certificate().unwrap();
});
