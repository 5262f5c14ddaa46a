//! What one IKE_AUTH with certificates costs the responder (issue #39 item 6):
//! `cargo bench -p ipsec-ike --bench ike_auth` (under `flock /tmp/ipsec-bench.lock`).
//!
//! Two in-memory endpoints; A initiates with carol's key (carol <- inter-ca <- root-ca), B
//! trusts root-ca. Timed: B handling A's IKE_AUTH request (every datagram of it, fragments
//! included) and building its answer; the IKE_SA_INIT before it is set-up, not timed.
//!
//! | function | A sends |
//! |---|---|
//! | `real` | carol, inter-ca: authenticated, the child up |
//! | `fake/<k>` | carol and `k` fake CAs named like inter-ca (subject and issuer), none chaining to root-ca: refused (AUTHENTICATION_FAILED, unknown CA) |
//!
//! Only the crate's public API as it was before issue #39, so the same file runs on the
//! commit before the fix (the "before" column of docs/robustness.md).
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use der::{Decode, Encode};
use ipsec_ike::pki::{Certificate, PrivateKey, RingSigner, TrustStore};
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::sync::Arc;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
/// Inside every fixture's validity (as in tests/certs.rs).
const NOW_UNIX: u64 = 1_811_808_000;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/pki/{name}", env!("CARGO_MANIFEST_DIR"))).expect(name)
}

fn cert(name: &str) -> Certificate {
    Certificate::parse_pem_or_der(&data(name)).expect(name).remove(0)
}

/// `k` fake CA certificates named like `like` (its subject as their subject and issuer), each
/// its own public key and serial, the signature `like`'s (it verifies for none of them).
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

fn connection(name: &str, local: &str, remote: &str, id: &str, key: &str, certs: Vec<Certificate>) -> Connection {
    let mut c = Connection::new(
        name,
        local.parse().unwrap(),
        Some(remote.parse().unwrap()),
        Identity::from_str_config(id).unwrap(),
        None,
        Psk::new(b"unused"),
        IKE,
    )
    .unwrap();
    let signer = RingSigner::new(PrivateKey::from_pem(&data(key)).unwrap()).unwrap();
    c.local_auth = LocalAuth::Pubkey {
        signer: Arc::new(signer),
        certs,
        send_cert: SendCert::Always,
    };
    let mut t = TrustStore::new();
    t.add_ca(cert("root-ca.pem")).unwrap();
    c.remote_auth = RemoteAuth::Pubkey { trust: Arc::new(t) };
    c
}

/// B, waiting for A's IKE_AUTH, and A's IKE_AUTH datagrams (local and remote as B sees them).
fn at_ike_auth(a_certs: &[Certificate]) -> (Endpoint, Vec<Transmit>) {
    let mut a = connection(
        "a2b",
        "10.0.0.1",
        "10.0.0.2",
        "carol@strongswan.org",
        "carol.key",
        a_certs.to_vec(),
    );
    a.children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", ESP).unwrap());
    let mut b = connection(
        "b2a",
        "10.0.0.2",
        "10.0.0.1",
        "moon.strongswan.org",
        "moon.key",
        vec![cert("moon.pem"), cert("inter-ca.pem")],
    );
    b.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", ESP).unwrap());
    let (mut a, mut b) = (Endpoint::new(Config::new(vec![a])), Endpoint::new(Config::new(vec![b])));
    let now = Duration::from_secs(1000);
    a.set_unix_time(now, NOW_UNIX);
    b.set_unix_time(now, NOW_UNIX);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    a.initiate(now, "a2b", &mut rng).unwrap();
    let init = a.poll_transmit().unwrap();
    b.handle_datagram(now, init.remote, init.local, &init.payload, &mut rng)
        .unwrap();
    let resp = b.poll_transmit().unwrap();
    a.handle_datagram(now, resp.remote, resp.local, &resp.payload, &mut rng)
        .unwrap();
    let auth: Vec<Transmit> = std::iter::from_fn(|| a.poll_transmit()).collect();
    assert!(!auth.is_empty());
    (b, auth)
}

/// B handles the IKE_AUTH; returns whether it came up.
fn handle(b: &mut Endpoint, auth: &[Transmit]) -> bool {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let now = Duration::from_secs(1000);
    for t in auth {
        let _ = b.handle_datagram(now, t.remote, t.local, &t.payload, &mut rng);
    }
    while b.poll_transmit().is_some() {}
    std::iter::from_fn(|| b.poll_event()).any(|e| matches!(e, Event::IkeUp { .. }))
}

fn ike_auth(c: &mut Criterion) {
    let (carol, inter) = (cert("carol.pem"), cert("inter-ca.pem"));
    let mut g = c.benchmark_group("ike_auth");
    let real = vec![carol.clone(), inter.clone()];
    let (mut b, auth) = at_ike_auth(&real);
    assert!(handle(&mut b, &auth), "the real chain authenticates");
    g.bench_function("real", |bch| {
        bch.iter_batched(
            || at_ike_auth(&real),
            |(mut b, auth)| handle(&mut b, &auth),
            BatchSize::PerIteration,
        )
    });
    for k in [6, 7, 8] {
        let mut sent = vec![carol.clone()];
        sent.extend(fakes_like(&inter, k));
        let (mut b, auth) = at_ike_auth(&sent);
        assert!(!handle(&mut b, &auth), "fakes are refused");
        g.bench_function(BenchmarkId::new("fake", k), |bch| {
            bch.iter_batched(
                || at_ike_auth(&sent),
                |(mut b, auth)| handle(&mut b, &auth),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .nresamples(2000)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = ike_auth
}
criterion_main!(benches);
