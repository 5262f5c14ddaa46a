//! IKE_AUTH with certificates between two in-memory endpoints, with the openssl-made
//! fixtures of `tests/data/pki/` (scripts/lib/gen-test-certs.sh): signatures of each key type,
//! chains through an intermediate sent in CERT, the refusals (expired, unknown CA, revoked,
//! identity not in the certificate, bad signature, no clock) with the reason in the event,
//! and the responder's choice of connection by the identity and method the peer proves.
mod common;
use common::*;
use ipsec_ike::authenticator::Refusal;
use ipsec_ike::pki::{CertError, Certificate, IdPattern, PrivateKey, RingSigner, TrustStore};
use ipsec_ike::*;
use std::sync::Arc;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
/// 2027-06-01: inside every fixture's validity (made 2026-11-27 for 20 years) but the expired one's.
const NOW_UNIX: u64 = 1_811_808_000;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/pki/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn certs(name: &str) -> Vec<Certificate> {
    Certificate::parse_pem_or_der(&data(name)).unwrap()
}

fn trust(cas: &[&str], crl: Option<&str>) -> Arc<TrustStore> {
    let mut t = TrustStore::new();
    for c in cas {
        for c in certs(c) {
            t.add_ca(c).unwrap();
        }
    }
    if let Some(c) = crl {
        t.add_crl(&data(c)).unwrap();
    }
    Arc::new(t)
}

/// Signs with `key`, presents `chain` (PEM file(s), ours first), claims `id`.
fn pubkey(c: &mut Connection, id: &str, key: &str, chain: &[&str]) {
    c.local_id = Identity::from_str_config(id).unwrap();
    let signer = RingSigner::new(PrivateKey::from_pem(&data(key)).unwrap()).unwrap();
    c.local_auth = LocalAuth::Pubkey {
        signer: Arc::new(signer),
        certs: chain.iter().flat_map(|f| certs(f)).collect(),
        send_cert: SendCert::Always,
    };
}

/// A (10.0.0.1) initiates to B (10.0.0.2): A signs as `a_id` with `a_key`/`a_chain`, B as
/// moon; each trusts the root CA (B also `b_crl`); B requires `b_wants` of A.
fn cert_pair(
    a_id: &str,
    a_key: &str,
    a_chain: &[&str],
    b_wants: Option<&str>,
    b_crl: Option<&str>,
) -> (Config, Config) {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    let (ca, cb) = (&mut a.connections[0], &mut b.connections[0]);
    pubkey(ca, a_id, a_key, a_chain);
    pubkey(cb, "moon.strongswan.org", "moon.key", &["moon.pem", "inter-ca.pem"]);
    ca.remote_id = Some(Identity::from_str_config("moon.strongswan.org").unwrap());
    ca.remote_auth = RemoteAuth::Pubkey {
        trust: trust(&["root-ca.pem"], None),
    };
    cb.remote_id = b_wants.map(|w| Identity::from_str_config(w).unwrap());
    cb.remote_auth = RemoteAuth::Pubkey {
        trust: trust(&["root-ca.pem"], b_crl),
    };
    (a, b)
}

fn with_clocks(a: Config, b: Config) -> Net {
    let mut net = Net::new(a, b);
    let now = net.now;
    net.a.set_unix_time(now, NOW_UNIX);
    net.b.set_unix_time(now, NOW_UNIX);
    net
}

fn ike_up(events: &[Event]) -> Vec<IkeSaInfo> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::IkeUp { info, .. } => Some(info.clone()),
            _ => None,
        })
        .collect()
}

fn refusal(events: &[Event]) -> Option<Refusal> {
    events.iter().find_map(|e| match e {
        Event::AuthFailed {
            local: true, reason, ..
        } => *reason,
        _ => None,
    })
}

fn children_up(events: &[Event]) -> usize {
    events.iter().filter(|e| matches!(e, Event::ChildUp(_))).count()
}

#[test]
fn each_key_type_authenticates_both_ways_through_the_intermediate() {
    // sun: ECDSA P-256 under the root; carol: P-384 under the intermediate (which A sends);
    // dave: Ed25519 under the root, identified by an IP address in its subjectAltName. B
    // (moon) signs with RSA and sends the intermediate too.
    for (id, key, chain) in [
        ("sun.strongswan.org", "sun.key", &["sun.pem"][..]),
        ("carol@strongswan.org", "carol.key", &["carol.pem", "inter-ca.pem"][..]),
        ("10.1.0.20", "dave.key", &["dave.pem"][..]),
        ("moon.strongswan.org", "moon-pkcs8.key", &["moon-chain.pem"][..]),
    ] {
        let (a, b) = cert_pair(id, key, chain, Some(id), None);
        let mut net = with_clocks(a, b);
        net.up();
        let (ua, ub) = (ike_up(&net.events_a), ike_up(&net.events_b));
        assert_eq!(
            (ua.len(), ub.len()),
            (1, 1),
            "{id}: {:?} {:?}",
            net.events_a,
            net.events_b
        );
        assert_eq!(ub[0].remote_id.to_string(), id);
        assert_eq!(ua[0].remote_id.to_string(), "moon.strongswan.org");
        assert_eq!((children_up(&net.events_a), children_up(&net.events_b)), (1, 1), "{id}");
        // CERT payloads were on the wire (IKE_AUTH is encrypted: the request is far larger
        // than a PSK one).
        let auth_req = net.sent.iter().filter(|s| s.from_a).nth(1).unwrap();
        assert!(
            auth_req.t.payload.len() > 700,
            "{id}: IKE_AUTH of {} bytes",
            auth_req.t.payload.len()
        );
    }
}

#[test]
fn a_dn_identity_matches_a_wildcard_pattern() {
    let dn = "C=CH, O=strongSwan, OU=Research, CN=carol@strongswan.org";
    let (a, mut b) = cert_pair(dn, "carol.key", &["carol.pem", "inter-ca.pem"], None, None);
    b.connections[0].remote_id_match = Some(IdPattern::from_str_config("C=CH, O=strongSwan, OU=*, CN=*").unwrap());
    let mut net = with_clocks(a, b);
    net.up();
    assert_eq!(ike_up(&net.events_b).len(), 1, "{:?}", net.events_b);
    // The same identity against a pattern it does not match.
    let (a, mut b) = cert_pair(dn, "carol.key", &["carol.pem", "inter-ca.pem"], None, None);
    b.connections[0].remote_id_match = Some(IdPattern::from_str_config("C=CH, O=Other, OU=*, CN=*").unwrap());
    let mut net = with_clocks(a, b);
    net.up();
    assert!(ike_up(&net.events_b).is_empty());
    assert_eq!(refusal(&net.events_b), Some(Refusal::NoConnection));
}

/// A's AUTH is refused by B for `want`; nothing is up and no SA is left on either side.
fn refused(net: &mut Net, want: Refusal) {
    net.up();
    assert!(ike_up(&net.events_b).is_empty(), "{:?}", net.events_b);
    assert_eq!(refusal(&net.events_b), Some(want), "{:?}", net.events_b);
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::AuthFailed { local: false, .. })));
    assert_eq!(net.a.ike_sa_count() + net.b.ike_sa_count(), 0);
    assert_eq!(children_up(&net.events_a) + children_up(&net.events_b), 0);
}

#[test]
fn refusals_say_why() {
    // The chain is checked before the signature, so a certificate whose key we do not have
    // is presented with another key: the chain's refusal is the one reported.
    let (a, b) = cert_pair("expired.strongswan.org", "sun.key", &["expired.pem"], None, None);
    refused(&mut with_clocks(a, b), Refusal::Certificate(CertError::Expired));
    let (a, b) = cert_pair("unknown.strongswan.org", "sun.key", &["unknown.pem"], None, None);
    refused(&mut with_clocks(a, b), Refusal::Certificate(CertError::UnknownCa));
    let (a, b) = cert_pair(
        "revoked.strongswan.org",
        "sun.key",
        &["revoked.pem"],
        None,
        Some("root-ca.crl.pem"),
    );
    refused(&mut with_clocks(a, b), Refusal::Certificate(CertError::Revoked));
    let (a, b) = cert_pair("codesign.strongswan.org", "sun.key", &["codesign.pem"], None, None);
    refused(&mut with_clocks(a, b), Refusal::Certificate(CertError::WrongUsage));
    // sun's certificate signed with dave's key: the signature does not verify.
    let (a, b) = cert_pair("sun.strongswan.org", "dave.key", &["sun.pem"], None, None);
    let mut net = with_clocks(a, b);
    net.up();
    assert!(
        matches!(refusal(&net.events_b), Some(Refusal::Signature(_))),
        "{:?}",
        net.events_b
    );
    // A claims carol's identity with sun's (valid, correctly signed) certificate.
    let (a, b) = cert_pair("carol@strongswan.org", "sun.key", &["sun.pem"], None, None);
    refused(&mut with_clocks(a, b), Refusal::IdentityMismatch);
    // No certificate at all.
    let (mut a, b) = cert_pair("sun.strongswan.org", "sun.key", &["sun.pem"], None, None);
    if let LocalAuth::Pubkey { send_cert, .. } = &mut a.connections[0].local_auth {
        *send_cert = SendCert::Never;
    }
    refused(&mut with_clocks(a, b), Refusal::NoCertificate);
    // Without a wall clock the validity cannot be checked: refused.
    let (a, b) = cert_pair("sun.strongswan.org", "sun.key", &["sun.pem"], None, None);
    refused(&mut Net::new(a, b), Refusal::NoClock);
}

#[test]
fn the_initiator_refuses_a_responder_it_cannot_verify() {
    // B (moon) is fine but A trusts only the other root: A refuses B's AUTH, and B's SA is
    // deleted (A sends nothing more; B's half of the IKE SA goes when A deletes it).
    let (mut a, b) = cert_pair("sun.strongswan.org", "sun.key", &["sun.pem"], None, None);
    a.connections[0].remote_auth = RemoteAuth::Pubkey {
        trust: trust(&["other-ca.pem"], None),
    };
    let mut net = with_clocks(a, b);
    net.up();
    assert_eq!(refusal(&net.events_a), Some(Refusal::Certificate(CertError::UnknownCa)));
    assert!(ike_up(&net.events_a).is_empty());
    assert_eq!(net.a.ike_sa_count(), 0);
}

#[test]
fn the_responder_picks_its_connection_by_identity_and_method() {
    // B has, for any address: a PSK connection first, then a certificate one for DNs under
    // O=strongSwan. A signs: B must move to the second connection at IKE_AUTH.
    let (a, b) = cert_pair(
        "sun.strongswan.org",
        "sun.key",
        &["sun.pem"],
        Some("sun.strongswan.org"),
        None,
    );
    let mut psk_any = common::conn("psk-any", B_IP, None, b"another secret", IKE);
    psk_any
        .children
        .push(ChildConfig::new("other", "10.9.0.0/16", "10.8.0.0/16", ESP).unwrap());
    let mut certs_any = b.connections[0].clone();
    certs_any.name = "certs-any".into();
    certs_any.remote_addr = None;
    certs_any.remote_id = None;
    certs_any.remote_id_match = Some(IdPattern::from_str_config("*.strongswan.org").unwrap());
    let b = Config::new(vec![psk_any.clone(), certs_any.clone()]);
    let mut net = with_clocks(a.clone(), b);
    net.up();
    let ub = ike_up(&net.events_b);
    assert_eq!(ub.len(), 1, "{:?}", net.events_b);
    assert_eq!(ub[0].conn, "certs-any");
    // A PSK initiator reaches the PSK connection, listed first.
    let (mut pa, _) = pair(IKE, IKE, ESP, ESP);
    pa.connections[0] = common::conn("a2b", A_IP, Some(B_IP), b"another secret", IKE);
    pa.connections[0]
        .children
        .push(ChildConfig::new("net", "10.8.0.0/16", "10.9.0.0/16", ESP).unwrap());
    pa.connections[0].remote_id = None;
    let mut net = with_clocks(pa, Config::new(vec![psk_any, certs_any]));
    net.up();
    let ub = ike_up(&net.events_b);
    assert_eq!(ub.len(), 1, "{:?}", net.events_b);
    assert_eq!(ub[0].conn, "psk-any");
}

#[test]
fn no_key_byte_in_debug_output() {
    let (a, b) = cert_pair("sun.strongswan.org", "sun.key", &["sun.pem"], None, None);
    let dbg = format!("{:?} {:?}", a, b);
    let key = PrivateKey::from_pem(&data("sun.key")).unwrap();
    assert!(format!("{key:?}").len() < 80);
    assert!(!dbg.contains("PRIVATE"), "{dbg}");
}
