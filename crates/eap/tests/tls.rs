//! EAP-TLS conversations (RFC 5216, RFC 9190): the crate's authenticator
//! ([`Authenticator`] with [`Backend::Tls`]) against rustls's client driven through this
//! crate's EAP-TLS framing ([`Peer`]), with tiny fragments so that every fragment carries
//! L/M and is ACKed; the MSK equal on both sides; a client certificate from another CA, an
//! expired one and none refused; malformed packets typed errors with the exchange going on.
//! The test PKI is made by tests/data/tls/make.sh (openssl).

use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::Credentials;
use ipsec_eap::packet::{self, Code, Type};
use ipsec_eap::server::{Authenticator, Backend, FailureReason, Step};
use ipsec_eap::tls::packet::Repr as TlsRepr;
use ipsec_eap::tls::rustls::pki_types::pem::PemObject;
use ipsec_eap::tls::rustls::pki_types::CertificateDer;
use ipsec_eap::tls::rustls::ProtocolVersion;
use ipsec_eap::tls::{Peer, PeerConfig, PeerStep, PrivateKeyDer, ServerConfig, Versions};
use ipsec_eap::{Error, Msk};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::time::Duration;

/// 2027-12-27, inside the test certificates' validity (made 2026-11-28, 20 years).
const NOW_UNIX: u64 = 1_830_000_000;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/tls/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}
fn cert(name: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(&data(&format!("{name}.pem")))
        .unwrap()
        .to_vec()
}
fn key(name: &str) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(&data(&format!("{name}.key"))).unwrap()
}

fn server_config(versions: Versions, fragment: usize) -> ServerConfig {
    ServerConfig::new(&[cert("server")], key("server"), &[cert("ca")], &[], versions)
        .unwrap()
        .with_fragment_size(fragment)
}
fn peer_config(who: &str, versions: Versions, fragment: usize) -> PeerConfig {
    PeerConfig::new(&[cert(who)], key(who), &[cert("ca")], "vpn.example.org", versions)
        .unwrap()
        .with_fragment_size(fragment)
}

/// EAP-TLS needs no password store.
struct NoUsers;
impl Credentials for NoUsers {
    fn nt_hash(&self, _: &[u8]) -> Option<NtHash> {
        None
    }
}

/// What one conversation saw.
#[derive(Default, Debug)]
struct Seen {
    /// Requests and Responses with the L flag, with the M flag, and empty ACKs.
    l_flags: usize,
    m_flags: usize,
    acks: usize,
    rounds: usize,
}

fn count(seen: &mut Seen, p: &[u8]) {
    if let Ok(r) = TlsRepr::parse_eap(p) {
        seen.l_flags += usize::from(r.flags.length);
        seen.m_flags += usize::from(r.flags.more);
        seen.acks += usize::from(r.is_ack());
    }
}

struct Outcome {
    /// The server's last step (a Send when the peer gave up first).
    server: Step,
    peer: Option<PeerStep>,
    auth: Authenticator,
    peer_version: Option<ProtocolVersion>,
    seen: Seen,
}

/// Identity, then EAP-TLS to the end; `mangle` may replace a Response before the server
/// sees it (and the original is sent after it, as a peer whose garbage was dropped).
fn run(
    server: ServerConfig,
    peer: PeerConfig,
    unix: Option<u64>,
    mut mangle: impl FnMut(usize, &[u8]) -> Option<Vec<u8>>,
) -> Outcome {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let (mut auth, id_req) = Authenticator::start(Backend::Tls(server), &mut rng);
    auth.set_unix_time(unix);
    let id = packet::Repr::parse_bytes(&id_req).unwrap().identifier;
    let mut resp = packet::build(Code::Response, id, Type::Identity, b"alice@example.org").unwrap();
    let mut peer = Peer::new(peer);
    let mut seen = Seen::default();
    let now = Duration::from_secs(1);
    loop {
        seen.rounds += 1;
        assert!(seen.rounds < 2000, "the conversation does not end");
        if let Some(bad) = mangle(seen.rounds, &resp) {
            let e = auth.handle_response(&bad, &NoUsers, now, &mut rng);
            assert!(e.is_err(), "round {}: garbage taken: {e:?}", seen.rounds);
        }
        count(&mut seen, &resp);
        let step = auth.handle_response(&resp, &NoUsers, now, &mut rng).unwrap();
        let req = match step {
            Step::Send(req) => req,
            Step::Success { ref eap, .. } | Step::Failure { ref eap, .. } => {
                // The peer sees EAP-Success or EAP-Failure.
                let p = peer.handle(eap, unix).ok();
                let peer_version = peer.version();
                return Outcome {
                    server: step,
                    peer: p,
                    auth,
                    peer_version,
                    seen,
                };
            }
            Step::Pending => panic!("no RADIUS here"),
        };
        count(&mut seen, &req);
        resp = match peer.handle(&req, unix).unwrap() {
            PeerStep::Send(r) => r,
            other => {
                let peer_version = peer.version();
                return Outcome {
                    server: Step::Send(req),
                    peer: Some(other),
                    auth,
                    peer_version,
                    seen,
                };
            }
        };
    }
}

fn success(o: &Outcome) -> (Msk, Msk) {
    let Step::Success { msk, eap } = &o.server else {
        panic!("server: {:?}", o.server)
    };
    assert_eq!(eap[0], 3, "EAP-Success");
    let Some(PeerStep::Success(peer_msk)) = &o.peer else {
        panic!("peer: {:?}", o.peer)
    };
    (msk.clone(), peer_msk.clone())
}

#[test]
fn tls12_tiny_fragments_both_ways_msk_equal() {
    let o = run(
        server_config(Versions::Both, 60),
        peer_config("alice", Versions::Tls12, 45),
        Some(NOW_UNIX),
        |_, _| None,
    );
    let (s, p) = success(&o);
    assert_eq!(s, p, "the MSK is the same on both sides");
    assert_eq!(s.as_bytes().len(), 64);
    assert_ne!(s.as_bytes(), &[0u8; 64][..]);
    assert_eq!(o.peer_version, Some(ProtocolVersion::TLSv1_2));
    // Every flight went in many fragments, each first one with L, each ACKed.
    assert!(o.seen.m_flags > 20 && o.seen.acks > 20, "{:?}", o.seen);
    assert!(o.seen.l_flags >= 3, "{:?}", o.seen);
    assert_eq!(o.auth.peer_certificate(), Some(&cert("alice")[..]));
    assert_eq!(o.auth.method_name(), "eap-tls");
}

#[test]
fn tls13_tiny_fragments_success_indication_msk_equal() {
    let o = run(
        server_config(Versions::Both, 50),
        peer_config("alice", Versions::Both, 70),
        Some(NOW_UNIX),
        |_, _| None,
    );
    let (s, p) = success(&o);
    assert_eq!(s, p);
    assert_eq!(o.peer_version, Some(ProtocolVersion::TLSv1_3));
    assert!(o.seen.m_flags > 20 && o.seen.acks > 20, "{:?}", o.seen);
    assert_eq!(o.auth.peer_certificate(), Some(&cert("alice")[..]));
}

#[test]
fn default_fragments_take_few_rounds_both_versions() {
    // (That the MSK is the one RFC 5216 2.3 / RFC 9190 2.3 define, not only the same on both
    // sides, is checked against strongSwan's EAP-TLS in scripts/ci/ike-eap-tls.sh: the IKE
    // AUTH payloads are made with it.)
    let a = run(
        server_config(Versions::Both, 1024),
        peer_config("alice", Versions::Tls12, 1024),
        Some(NOW_UNIX),
        |_, _| None,
    );
    let b = run(
        server_config(Versions::Both, 1024),
        peer_config("alice", Versions::Tls13, 1024),
        Some(NOW_UNIX),
        |_, _| None,
    );
    let (a1, a2) = success(&a);
    let (b1, b2) = success(&b);
    assert_eq!((a1, b1), (a2, b2));
    // IKE carries each EAP message in its own IKE_AUTH exchange: with 1 KiB fragments the
    // whole conversation stays well inside the IKE crate's bound on EAP rounds.
    assert!(b.seen.rounds <= 8, "{:?}", b.seen);
}

#[test]
fn a_client_certificate_from_another_ca_is_refused() {
    for v in [Versions::Tls12, Versions::Tls13] {
        let o = run(
            server_config(Versions::Both, 200),
            peer_config("mallory", v, 200),
            Some(NOW_UNIX),
            |_, _| None,
        );
        match &o.server {
            Step::Failure { reason, eap } => {
                assert_eq!(*reason, FailureReason::CertificateRefused, "{v:?}");
                assert_eq!(eap[0], 4, "EAP-Failure");
            }
            other => panic!("{v:?}: {other:?}"),
        }
        assert_eq!(o.peer, Some(PeerStep::Failure));
        assert_eq!(o.auth.peer_certificate(), None);
    }
}

#[test]
fn no_clock_or_an_expired_certificate_is_refused() {
    // 2050: past the certificates' notAfter; None: the time is not known.
    for unix in [Some(2_524_608_000), None] {
        let o = run(
            server_config(Versions::Both, 1024),
            peer_config("alice", Versions::Tls12, 1024),
            unix,
            |_, _| None,
        );
        // The peer refuses the server's certificate first (the server's check is the same
        // code, rustls's): nothing succeeds on either side.
        assert!(!matches!(o.server, Step::Success { .. }), "{unix:?}: {:?}", o.server);
        assert!(!matches!(o.peer, Some(PeerStep::Success(_))), "{unix:?}: {:?}", o.peer);
    }
}

#[test]
fn malformed_responses_are_typed_errors_and_the_exchange_goes_on() {
    let o = run(
        server_config(Versions::Both, 100),
        peer_config("alice", Versions::Tls13, 100),
        Some(NOW_UNIX),
        |round, good| {
            let mut bad = good.to_vec();
            match round % 7 {
                // Cut inside the EAP header / the Length past the buffer.
                0 => bad.truncate(3),
                // Another Identifier.
                1 => bad[1] = bad[1].wrapping_add(1),
                // EAP-TLS without its Flags octet.
                2 => bad = vec![2, good[1], 0, 5, 13],
                // L flag with the TLS Message Length cut short.
                3 => bad = vec![2, good[1], 0, 7, 13, 0x80, 0],
                // A TLS Message Length over the reassembly cap.
                4 => bad = vec![2, good[1], 0, 11, 13, 0xc0, 0x7f, 0xff, 0xff, 0xff, 0x16],
                // The S flag in a Response.
                5 => bad = vec![2, good[1], 0, 6, 13, 0x20],
                // An empty fragment with M / no ACK where one belongs.
                _ => bad = vec![2, good[1], 0, 6, 13, 0x40],
            }
            (round > 1).then_some(bad)
        },
    );
    let (s, p) = success(&o);
    assert_eq!(s, p);
}

#[test]
fn the_typed_errors_of_bad_packets() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let (mut auth, id_req) = Authenticator::start(Backend::Tls(server_config(Versions::Both, 1024)), &mut rng);
    let id = id_req[1];
    let ident = packet::build(Code::Response, id, Type::Identity, b"alice").unwrap();
    let start = match auth
        .handle_response(&ident, &NoUsers, Duration::ZERO, &mut rng)
        .unwrap()
    {
        Step::Send(s) => s,
        other => panic!("{other:?}"),
    };
    // RFC 5216 3.1: the Start, S flag, no data, the next Identifier.
    assert_eq!(start, [1, id.wrapping_add(1), 0, 6, 13, 0x20]);
    let sid = start[1];
    let h = |auth: &mut Authenticator, rng: &mut ChaCha20Rng, b: &[u8]| {
        auth.handle_response(b, &NoUsers, Duration::ZERO, rng)
    };
    assert_eq!(
        h(&mut auth, &mut rng, &[2, sid, 0, 5, 13]),
        Err(Error::Malformed("EAP-TLS packet without its Flags octet"))
    );
    assert_eq!(
        h(&mut auth, &mut rng, &[2, sid, 0, 11, 13, 0xc0, 0, 1, 0, 1, 0x16]),
        Err(Error::TooLong)
    );
    assert_eq!(
        h(&mut auth, &mut rng, &[2, sid, 0, 12, 13, 0x80, 0, 0, 0, 1, 0x16, 3]),
        Err(Error::LengthMismatch)
    );
    assert!(matches!(
        h(&mut auth, &mut rng, &[2, sid, 0, 6, 13, 0x40]),
        Err(Error::Malformed(_))
    ));
    assert!(matches!(
        h(&mut auth, &mut rng, &[2, sid, 0, 6, 13, 0x00]),
        Err(Error::Unexpected(_))
    ));
    assert_eq!(
        h(&mut auth, &mut rng, &[2, sid.wrapping_add(1), 0, 6, 13, 0]),
        Err(Error::WrongIdentifier {
            expected: sid,
            got: sid.wrapping_add(1)
        })
    );
    assert!(matches!(
        h(&mut auth, &mut rng, &[2, sid, 0, 6, 26, 0]),
        Err(Error::Unexpected(_))
    ));
    // Not TLS at all: rustls refuses it, and the exchange ends with EAP-Failure.
    match h(&mut auth, &mut rng, &[2, sid, 0, 10, 13, 0, 1, 2, 3, 4]).unwrap() {
        Step::Failure { reason, .. } => assert_eq!(reason, FailureReason::TlsHandshake),
        Step::Send(alert) => {
            // The alert goes first (RFC 5216 2.1.3); the peer's answer ends it.
            let ack = [2, alert[1], 0, 6, 13, 0];
            assert!(matches!(
                h(&mut auth, &mut rng, &ack).unwrap(),
                Step::Failure {
                    reason: FailureReason::TlsHandshake,
                    ..
                }
            ));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h(&mut auth, &mut rng, &[2, sid, 0, 6, 13, 0]), Err(Error::Finished));
}

#[test]
fn a_nak_ends_with_no_common_method() {
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    let (mut auth, id_req) = Authenticator::start(Backend::Tls(server_config(Versions::Both, 1024)), &mut rng);
    let ident = packet::build(Code::Response, id_req[1], Type::Identity, b"bob").unwrap();
    let Step::Send(start) = auth
        .handle_response(&ident, &NoUsers, Duration::ZERO, &mut rng)
        .unwrap()
    else {
        panic!()
    };
    let nak = packet::build(Code::Response, start[1], Type::Nak, &[26]).unwrap();
    assert!(matches!(
        auth.handle_response(&nak, &NoUsers, Duration::ZERO, &mut rng).unwrap(),
        Step::Failure {
            reason: FailureReason::NoCommonMethod,
            ..
        }
    ));
}
