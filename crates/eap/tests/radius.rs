//! The authenticator passing EAP through the RADIUS client (RFC 3579) to an in-process
//! RADIUS server built on this crate's MSCHAPv2 server (RFC 2865 signing, RFC 2548 keys),
//! and the failure paths: Access-Reject, a wrong shared secret, a server that is down.
//! (scripts/ci/eap-radius.sh runs the same against a real FreeRADIUS.)

use core::time::Duration;
use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::{self, Credentials, Peer, PeerStep};
use ipsec_eap::radius::client::Config;
use ipsec_eap::radius::packet::{attr, code, Builder, Packet, Repr as RadiusRepr};
use ipsec_eap::radius::{auth, mppe};
use ipsec_eap::server::{Authenticator, Backend, FailureReason, Step};
use ipsec_eap::Error;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

struct Users;
impl Credentials for Users {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        (identity == b"bob").then(|| NtHash::from_password("hunter2").unwrap())
    }
}
struct NoUsers;
impl Credentials for NoUsers {
    fn nt_hash(&self, _: &[u8]) -> Option<NtHash> {
        None
    }
}

/// A RADIUS server: checks each request's Message-Authenticator, runs MSCHAPv2 with the
/// EAP it carries, answers signed with `secret`.
struct FakeRadius {
    secret: Vec<u8>,
    server: Option<mschapv2::Server>,
    state_seen: Vec<Option<Vec<u8>>>,
    rng: ChaCha20Rng,
}

impl FakeRadius {
    fn new(secret: &[u8]) -> FakeRadius {
        FakeRadius {
            secret: secret.to_vec(),
            server: None,
            state_seen: vec![],
            rng: ChaCha20Rng::seed_from_u64(99),
        }
    }
    fn answer(&mut self, request: &[u8]) -> Vec<u8> {
        auth::verify_request(&self.secret, request).expect("request Message-Authenticator");
        let p = Packet::new_checked(request).unwrap();
        let r = RadiusRepr::parse(&p).unwrap();
        assert_eq!(r.code, code::ACCESS_REQUEST);
        self.state_seen.push(r.get(attr::STATE).map(|s| s.to_vec()));
        let eap = r.eap_message().unwrap();
        let (code, eap_out, keys) = match &mut self.server {
            None => {
                let ident = ipsec_eap::packet::Repr::parse_bytes(&eap)
                    .unwrap()
                    .data
                    .unwrap()
                    .1
                    .to_vec();
                assert_eq!(r.get(attr::USER_NAME), Some(&ident[..]));
                let (s, req) = mschapv2::Server::start(&ident, 1, &Users, &mut self.rng).unwrap();
                self.server = Some(s);
                (code::ACCESS_CHALLENGE, req, None)
            }
            Some(s) => match s.handle(&eap).unwrap() {
                Step::Send(b) => (code::ACCESS_CHALLENGE, b, None),
                Step::Success { msk, eap } => (code::ACCESS_ACCEPT, eap, Some(msk)),
                Step::Failure { eap, .. } => (code::ACCESS_REJECT, eap, None),
                Step::Pending => unreachable!(),
            },
        };
        let mut b = Builder::new(code, r.identifier, &[0; 16]);
        if code == code::ACCESS_CHALLENGE {
            b.attr(attr::STATE, &[0xab, r.identifier]).unwrap();
        }
        if let Some(msk) = keys {
            let k = msk.as_bytes();
            let recv = mppe::encrypt(&self.secret, &r.authenticator, [0x80, 1], &k[..16]);
            let send = mppe::encrypt(&self.secret, &r.authenticator, [0x80, 2], &k[16..32]);
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_RECV_KEY, &recv),
            )
            .unwrap();
            b.attr(
                attr::VENDOR_SPECIFIC,
                &mppe::vendor_specific(mppe::MS_MPPE_SEND_KEY, &send),
            )
            .unwrap();
        }
        b.fragmented(attr::EAP_MESSAGE, &eap_out).unwrap();
        b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
        let mut out = b.finish();
        auth::sign_response(&self.secret, &r.authenticator, &mut out).unwrap();
        out
    }
}

fn config(secret: &[u8]) -> Config {
    let mut c = Config::new(secret, b"tunneld-test");
    c.retransmit_after = Duration::from_millis(500);
    c.max_tries = 3;
    c
}

/// Drives peer <-> authenticator <-> fake RADIUS until the end; returns the final step and
/// the peer's MSK if it got one.
fn run(password: &str, nas_secret: &[u8], server: &mut FakeRadius) -> (Step, Option<ipsec_eap::Msk>, Authenticator) {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let mut peer = Peer::new(b"bob", password).unwrap();
    let (mut a, id_req) = Authenticator::start(Backend::Radius(config(nas_secret)), &mut rng);
    let mut to_peer = id_req;
    let mut now = Duration::ZERO;
    loop {
        let resp = match peer.handle(&to_peer, &mut rng).unwrap() {
            PeerStep::Send(b) => b,
            other => panic!("{other:?}"),
        };
        let mut step = a.handle_response(&resp, &NoUsers, now, &mut rng).unwrap();
        while step == Step::Pending {
            if let Some(dgram) = a.poll_radius_transmit() {
                match a.handle_radius(&server.answer(&dgram)) {
                    Ok(s) => step = s,
                    Err(Error::BadAuthenticator) => {}
                    Err(e) => panic!("{e:?}"),
                }
            } else {
                now = a.poll_timeout().expect("a deadline while pending");
                if let Some(s) = a.handle_timeout(now) {
                    step = s;
                }
            }
        }
        match step {
            Step::Send(b) => to_peer = b,
            Step::Success { ref eap, .. } => {
                let msk = match peer.handle(eap, &mut rng).unwrap() {
                    PeerStep::Success(m) => Some(m),
                    other => panic!("{other:?}"),
                };
                return (step, msk, a);
            }
            Step::Failure { ref eap, .. } => {
                assert_eq!(peer.handle(eap, &mut rng).unwrap(), PeerStep::Failure);
                return (step, None, a);
            }
            Step::Pending => unreachable!(),
        }
    }
}

#[test]
fn accepted_user_msk_equal_state_echoed() {
    let mut server = FakeRadius::new(b"testing123");
    let (step, peer_msk, a) = run("hunter2", b"testing123", &mut server);
    let Step::Success { msk, eap } = step else {
        panic!("{step:?}")
    };
    assert_eq!(eap[0], 3);
    assert_eq!(Some(msk), peer_msk);
    assert_eq!(a.identity(), Some(&b"bob"[..]));
    // The first request has no State; each later one echoes the last challenge's.
    assert_eq!(server.state_seen[0], None);
    for s in &server.state_seen[1..] {
        assert_eq!(s.as_ref().map(|v| v[0]), Some(0xab));
    }
    assert_eq!(server.state_seen.len(), 3);
}

#[test]
fn wrong_password_is_rejected() {
    let mut server = FakeRadius::new(b"testing123");
    let (step, _, _) = run("hunter3", b"testing123", &mut server);
    assert!(
        matches!(
            step,
            Step::Failure {
                reason: FailureReason::RadiusReject,
                ..
            }
        ),
        "{step:?}"
    );
}

#[test]
fn wrong_secret_answers_dropped_then_server_down() {
    // The server's answers are signed with another secret than ours.
    let mut server = FakeRadius::new(b"testing123");
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let mut peer = Peer::new(b"bob", "hunter2").unwrap();
    let (mut a, id_req) = Authenticator::start(Backend::Radius(config(b"testing123")), &mut rng);
    let resp = match peer.handle(&id_req, &mut rng).unwrap() {
        PeerStep::Send(b) => b,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).unwrap(),
        Step::Pending
    );
    let first = a.poll_radius_transmit().unwrap();
    let mut answer = server.answer(&first);
    // Re-sign with a different secret.
    let req_auth: [u8; 16] = first[4..20].try_into().unwrap();
    auth::sign_response(b"not-the-secret", &req_auth, &mut answer).unwrap();
    assert_eq!(a.handle_radius(&answer), Err(Error::BadAuthenticator));
    assert_eq!(a.radius_stats().unwrap().bad_authenticator, 1);
    // Retransmissions are the very same datagram; then the server is down.
    let mut now;
    let mut sends = 1;
    let end = loop {
        now = a.poll_timeout().unwrap();
        if let Some(step) = a.handle_timeout(now) {
            break step;
        }
        let again = a.poll_radius_transmit().unwrap();
        assert_eq!(again, first);
        assert_eq!(a.handle_radius(&answer), Err(Error::BadAuthenticator));
        sends += 1;
    };
    assert_eq!(sends, 3);
    assert_eq!(now, Duration::from_millis(1500));
    let st = a.radius_stats().unwrap(); // kept once finished
    assert_eq!((st.bad_authenticator, st.retransmissions), (3, 2));
    assert!(
        matches!(
            end,
            Step::Failure {
                reason: FailureReason::RadiusServerDown,
                ..
            }
        ),
        "{end:?}"
    );
}

#[test]
fn server_down_and_stray_answers() {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let (mut a, id_req) = Authenticator::start(Backend::Radius(config(b"s")), &mut rng);
    let mut resp = id_req.clone();
    resp[0] = 2;
    resp.extend_from_slice(b"bob");
    resp[3] = 8;
    assert_eq!(
        a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).unwrap(),
        Step::Pending
    );
    let dgram = a.poll_radius_transmit().unwrap();
    // An answer with another identifier and garbage are counted, not taken.
    let mut b = Builder::new(code::ACCESS_ACCEPT, dgram[1].wrapping_add(1), &[0; 16]);
    b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
    assert!(matches!(a.handle_radius(&b.finish()), Err(Error::Unexpected(_))));
    assert!(a.handle_radius(&[2, 1, 0]).is_err());
    let st = a.radius_stats().unwrap();
    assert_eq!((st.unexpected, st.malformed, st.requests), (1, 1, 1));
    // A peer Response while waiting for RADIUS is refused.
    assert!(a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).is_err());
    // Nothing answers: retransmitted at 0.5 s and 1 s, down at 1.5 s.
    assert_eq!(a.handle_timeout(Duration::from_millis(499)), None);
    assert_eq!(a.poll_radius_transmit(), None);
    let mut now;
    let end = loop {
        now = a.poll_timeout().unwrap();
        if let Some(s) = a.handle_timeout(now) {
            break s;
        }
        assert_eq!(a.poll_radius_transmit().unwrap(), dgram);
    };
    assert_eq!(now, Duration::from_millis(1500));
    assert!(matches!(
        end,
        Step::Failure {
            reason: FailureReason::RadiusServerDown,
            ..
        }
    ));
    assert_eq!(a.handle_response(&resp, &NoUsers, now, &mut rng), Err(Error::Finished));
}

#[test]
fn challenge_without_an_eap_request_ends_the_exchange() {
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let (mut a, id_req) = Authenticator::start(Backend::Radius(config(b"s")), &mut rng);
    let mut resp = id_req.clone();
    resp[0] = 2;
    resp.extend_from_slice(b"bob");
    resp[3] = 8;
    a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).unwrap();
    let dgram = a.poll_radius_transmit().unwrap();
    // A correctly signed Access-Challenge whose EAP-Message is an EAP Success.
    let mut b = Builder::new(code::ACCESS_CHALLENGE, dgram[1], &[0; 16]);
    b.attr(attr::EAP_MESSAGE, &[3, 9, 0, 4]).unwrap();
    b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
    let mut out = b.finish();
    auth::sign_response(b"s", dgram[4..20].try_into().unwrap(), &mut out).unwrap();
    let step = a.handle_radius(&out).unwrap();
    assert!(
        matches!(
            step,
            Step::Failure {
                reason: FailureReason::RadiusBadEap,
                ..
            }
        ),
        "{step:?}"
    );
    assert_eq!(a.poll_timeout(), None);
}

/// Failover (strongSwan's eap-radius `servers`; RFC 2865 §2.5, RFC 3579 §2.6.1): server 0
/// never answers; when its tries are exhausted the caller names server 1, and the same EAP
/// Response goes there with the caller's new Identifier, a new Request Authenticator and
/// server 1's secret. An answer that comes from server 0 is then dropped; server 1's ends
/// the conversation (accepted, the MSK equal to the peer's).
#[test]
fn a_silent_server_fails_over_to_the_next_with_a_new_identifier_and_authenticator() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let mut cfg = config(b"first-secret");
    cfg.fallback_secrets
        .push(zeroize::Zeroizing::new(b"second-secret".to_vec()));
    let mut peer = Peer::new(b"bob", "hunter2").unwrap();
    let (mut a, id_req) = Authenticator::start(Backend::Radius(cfg), &mut rng);
    let resp = match peer.handle(&id_req, &mut rng).unwrap() {
        PeerStep::Send(b) => b,
        other => panic!("{other:?}"),
    };
    a.use_radius_identifier(40);
    assert_eq!(
        a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).unwrap(),
        Step::Pending
    );
    assert_eq!(a.radius_server(), Some(0));
    let first = a.poll_radius_transmit().unwrap();
    assert_eq!(first[1], 40);
    auth::verify_request(b"first-secret", &first).unwrap();
    // Server 0 stays silent: two retransmissions of the same bytes, then the failover.
    let mut asked = Vec::new();
    let mut sent = vec![first.clone()];
    let mut now;
    loop {
        now = a.poll_timeout().unwrap();
        let step = a.handle_timeout_failover(now, &mut rng, &mut |failed, tried| {
            asked.push((failed, tried));
            (tried & 2 == 0).then_some((1, 41))
        });
        assert_eq!(step, None, "failed over, not given up");
        sent.push(a.poll_radius_transmit().unwrap());
        if a.radius_server() == Some(1) {
            break;
        }
        assert!(sent.len() < 10);
    }
    assert_eq!(asked, [(0, 0b01)]);
    assert_eq!(sent.len(), 4, "three sends to server 0, then server 1");
    assert!(sent[..3].iter().all(|d| *d == first));
    let moved = &sent[3];
    assert_eq!(moved[1], 41, "the caller's new Identifier");
    assert_ne!(moved[4..20], first[4..20], "a new Request Authenticator");
    assert!(auth::verify_request(b"first-secret", moved).is_err());
    auth::verify_request(b"second-secret", moved).unwrap();
    assert_eq!(a.radius_identifier(), Some(41));
    // The EAP-Message is the same Response.
    let eap_of = |d: &[u8]| {
        RadiusRepr::parse(&Packet::new_checked(d).unwrap())
            .unwrap()
            .eap_message()
    };
    assert_eq!(eap_of(moved), eap_of(&first));
    // Server 1 answers; the same answer arriving from server 0's address is dropped first.
    let mut second = FakeRadius::new(b"second-secret");
    let mut answer = second.answer(moved);
    assert!(a.handle_radius_from(0, &answer).is_err());
    let mut step = a.handle_radius_from(1, &answer).unwrap();
    while let Step::Send(req) = step {
        let resp = match peer.handle(&req, &mut rng).unwrap() {
            PeerStep::Send(b) => b,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            a.handle_response(&resp, &NoUsers, now, &mut rng).unwrap(),
            Step::Pending
        );
        let d = a.poll_radius_transmit().unwrap();
        auth::verify_request(b"second-secret", &d).unwrap();
        answer = second.answer(&d);
        step = a.handle_radius_from(1, &answer).unwrap();
    }
    let Step::Success { msk, eap } = step else {
        panic!("{step:?}")
    };
    assert_eq!(peer.handle(&eap, &mut rng).unwrap(), PeerStep::Success(msk));
    assert_eq!(a.radius_stats().unwrap().failovers, 1);
}

/// Failover with no other server (the caller names none): the conversation ends with
/// RadiusServerDown as before.
#[test]
fn no_server_left_ends_with_server_down() {
    let mut rng = ChaCha20Rng::seed_from_u64(12);
    let mut peer = Peer::new(b"bob", "hunter2").unwrap();
    let (mut a, id_req) = Authenticator::start(Backend::Radius(config(b"s")), &mut rng);
    let resp = match peer.handle(&id_req, &mut rng).unwrap() {
        PeerStep::Send(b) => b,
        other => panic!("{other:?}"),
    };
    a.handle_response(&resp, &NoUsers, Duration::ZERO, &mut rng).unwrap();
    let mut end = None;
    for _ in 0..5 {
        let now = a.poll_timeout().unwrap();
        if let Some(s) = a.handle_timeout_failover(now, &mut rng, &mut |_, _| None) {
            end = Some(s);
            break;
        }
    }
    assert!(matches!(
        end,
        Some(Step::Failure {
            reason: FailureReason::RadiusServerDown,
            ..
        })
    ));
}
