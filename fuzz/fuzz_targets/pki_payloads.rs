//! Arbitrary bytes to the CERT/CERTREQ payload bodies (crates/ike src/pki: parse then emit
//! gives the same bytes), the SIGNATURE_HASH_ALGORITHMS data, ID payloads, identity patterns,
//! and `auth_verify` of the rest as AUTH data (method picked by the first byte) against the
//! test certificates' keys (RSA, P-256, P-384, Ed25519). Checked: no AUTH data verifies over
//! octets nobody signed.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ike::pki::*;
use ipsec_ike::Identity;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const CERTS: [&[u8]; 4] = [
    include_bytes!("../../crates/ike/tests/data/pki/moon.pem"),
    include_bytes!("../../crates/ike/tests/data/pki/sun.pem"),
    include_bytes!("../../crates/ike/tests/data/pki/carol.pem"),
    include_bytes!("../../crates/ike/tests/data/pki/dave.pem"),
];
/// The methods the first byte picks from (then the byte itself, for unknown ones).
const METHODS: [u8; 6] = [1, 9, 10, 11, 14, 14];
const UNSIGNED: &[u8] = b"octets nobody signed";

fn certs() -> &'static Vec<Certificate> {
    static C: OnceLock<Vec<Certificate>> = OnceLock::new();
    C.get_or_init(|| {
        CERTS
            .iter()
            .map(|p| Certificate::parse_pem_or_der(p).unwrap().remove(0))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&sel, rest)) = data.split_first() else { return };
    if let Ok(p) = CertPayload::parse(rest) {
        assert_eq!(p.to_body(), rest);
        let _ = p.certificate();
    }
    if let Ok(p) = CertReqPayload::parse(rest) {
        assert_eq!(p.to_body(), rest);
    }
    if let Some(h) = parse_hash_algs(rest) {
        assert_eq!(hash_algs_data(&h), rest);
    }
    if let Ok(id) = Identity::parse(rest) {
        if rest[1..4] == [0, 0, 0] {
            assert_eq!(id.to_body(), rest);
        }
        if let Ok(s) = std::str::from_utf8(data) {
            if let Ok(p) = IdPattern::from_str_config(s) {
                let _ = id_matches_pattern(&p, &id);
            }
        }
    }
    let cert = &certs()[usize::from(sel >> 4) % 4];
    let i = usize::from(sel & 0x0f);
    let method = METHODS.get(i).copied().unwrap_or(sel);
    assert!(auth_verify(cert, method, rest, UNSIGNED).is_err());
});
