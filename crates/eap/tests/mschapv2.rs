//! EAP-MSCHAPv2 server <-> peer conversations (RFC 3748, draft-kamath-pppext-eap-mschapv2-02).

use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::{Credentials, Peer, PeerStep, Server};
use ipsec_eap::packet::{self, Code, Repr, Type};
use ipsec_eap::server::{FailureReason, Step};
use ipsec_eap::Error;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

struct Users;
impl Credentials for Users {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        match identity {
            b"alice" | b"CORP\\alice" => NtHash::from_password("correct horse").ok(),
            _ => None,
        }
    }
}

fn send(step: Step) -> Vec<u8> {
    match step {
        Step::Send(b) => b,
        other => panic!("expected Send, got {other:?}"),
    }
}
fn peer_send(step: PeerStep) -> Vec<u8> {
    match step {
        PeerStep::Send(b) => b,
        other => panic!("expected Send, got {other:?}"),
    }
}

/// Identity round, then the method; returns (server, peer, challenge request).
fn begin(identity: &[u8], password: &str, rng: &mut ChaCha20Rng) -> (Server, Peer, Vec<u8>) {
    let mut peer = Peer::new(identity, password).unwrap();
    let id_req = packet::build(Code::Request, 40, Type::Identity, b"").unwrap();
    let id_resp = peer_send(peer.handle(&id_req, rng).unwrap());
    let r = Repr::parse_bytes(&id_resp).unwrap();
    assert_eq!(r.identifier, 40);
    let (_, ident) = r.data.unwrap();
    assert_eq!(ident, identity);
    let (server, challenge) = Server::start(ident, 41, &Users, rng).unwrap();
    (server, peer, challenge)
}

#[test]
fn full_conversation_msk_equal() {
    for identity in [&b"alice"[..], b"CORP\\alice"] {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let (mut server, mut peer, challenge) = begin(identity, "correct horse", &mut rng);
        let response = peer_send(peer.handle(&challenge, &mut rng).unwrap());
        let success_req = send(server.handle(&response).unwrap());
        // The Success-Request carries S= and 40 hex digits.
        let r = Repr::parse_bytes(&success_req).unwrap();
        assert_eq!(r.identifier, 42);
        assert!(r.data.unwrap().1.windows(2).any(|w| w == b"S="));
        let ack = peer_send(peer.handle(&success_req, &mut rng).unwrap());
        let (server_msk, eap_success) = match server.handle(&ack).unwrap() {
            Step::Success { msk, eap } => (msk, eap),
            other => panic!("{other:?}"),
        };
        assert_eq!(eap_success, [3, 42, 0, 4]);
        let peer_msk = match peer.handle(&eap_success, &mut rng).unwrap() {
            PeerStep::Success(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(server_msk, peer_msk);
        assert_eq!(server_msk.as_bytes().len(), 64);
        assert!(server_msk.as_bytes()[..32].iter().any(|&b| b != 0));
        // Nothing more is taken once finished.
        assert_eq!(server.handle(&ack), Err(Error::Finished));
        // No key byte in Debug.
        assert_eq!(format!("{server_msk:?}"), "Msk(64 bytes)");
        assert!(!format!("{server:?}{peer:?}").contains("hash"));
    }
}

#[test]
fn wrong_password_and_unknown_user_fail_alike() {
    for (identity, password, reason) in [
        (&b"alice"[..], "wrong", FailureReason::WrongPassword),
        (b"mallory", "whatever", FailureReason::UnknownIdentity),
    ] {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let (mut server, mut peer, challenge) = begin(identity, password, &mut rng);
        let response = peer_send(peer.handle(&challenge, &mut rng).unwrap());
        let failure_req = send(server.handle(&response).unwrap());
        let (_, data) = Repr::parse_bytes(&failure_req).unwrap().data.unwrap();
        let text = String::from_utf8_lossy(&data[4..]).into_owned();
        assert!(text.starts_with("E=691 R=0 C="), "{text}");
        let ack = peer_send(peer.handle(&failure_req, &mut rng).unwrap());
        match server.handle(&ack).unwrap() {
            Step::Failure { reason: r, eap } => {
                assert_eq!(r, reason);
                assert_eq!(eap[0], 4);
                assert_eq!(peer.handle(&eap, &mut rng).unwrap(), PeerStep::Failure);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn out_of_order_duplicate_and_truncated_are_refused() {
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let (mut server, mut peer, challenge) = begin(b"alice", "correct horse", &mut rng);
    // A Success-Response before the Response: out of order, state unchanged.
    let early_ack = packet::build(Code::Response, 41, Type::MsChapV2, &[3]).unwrap();
    assert!(matches!(server.handle(&early_ack), Err(Error::Unexpected(_))));
    // EAP-Success to the peer before it authenticated the server: refused.
    assert!(matches!(
        peer.handle(&[3, 41, 0, 4], &mut rng),
        Err(Error::Unexpected(_))
    ));
    let response = peer_send(peer.handle(&challenge, &mut rng).unwrap());
    // A retransmitted Challenge gets the very same Response (RFC 3748 §4.1).
    assert_eq!(peer_send(peer.handle(&challenge, &mut rng).unwrap()), response);
    // Every truncation of the Response is a typed error, state unchanged.
    for n in 0..response.len() {
        assert!(server.handle(&response[..n]).is_err(), "cut at {n}");
    }
    // Wrong identifier.
    let mut wrong_id = response.clone();
    wrong_id[1] ^= 0x55;
    assert!(matches!(server.handle(&wrong_id), Err(Error::WrongIdentifier { .. })));
    let success_req = send(server.handle(&response).unwrap());
    // The duplicate Response (old identifier) is refused now.
    assert!(matches!(server.handle(&response), Err(Error::WrongIdentifier { .. })));
    // A server whose S= is wrong is refused by the peer.
    let mut forged = success_req.clone();
    let pos = forged.windows(2).position(|w| w == b"S=").unwrap() + 2;
    forged[pos] = if forged[pos] == b'0' { b'1' } else { b'0' };
    assert_eq!(peer.handle(&forged, &mut rng), Err(Error::BadAuthenticatorResponse));
    assert_eq!(peer.handle(&success_req, &mut rng), Err(Error::Finished));
}

#[test]
fn nak_and_round_bound() {
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let (mut server, _peer, _challenge) = begin(b"alice", "correct horse", &mut rng);
    // The peer Naks MSCHAPv2 asking for EAP-TLS: no common method.
    let nak = packet::build(Code::Response, 41, Type::Nak, &[13]).unwrap();
    match server.handle(&nak).unwrap() {
        Step::Failure { reason, .. } => assert_eq!(reason, FailureReason::NoCommonMethod),
        other => panic!("{other:?}"),
    }
    // The peer answers another method's Request with a Nak proposing MSCHAPv2.
    let mut peer = Peer::new(b"alice", "x").unwrap();
    let md5 = packet::build(Code::Request, 9, Type::Other(4), &[1, 0]).unwrap();
    let r = peer_send(peer.handle(&md5, &mut rng).unwrap());
    assert_eq!(Repr::parse_bytes(&r).unwrap().data, Some((Type::Nak, &[26u8][..])));
    // A server that keeps sending Notifications is cut off after a bounded number of rounds.
    let mut n = 0;
    let err = loop {
        let note = packet::build(Code::Request, 10 + n, Type::Notification, b"hi").unwrap();
        match peer.handle(&note, &mut rng) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 100);
    };
    assert_eq!(err, Error::TooManyRounds);
}

/// The top-level authenticator (what the IKE responder drives) with the local backend:
/// Identity, then MSCHAPv2, to Success with the peer's MSK; a wrong Identifier or a
/// non-Identity answer to the Identity Request is refused and changes nothing.
#[test]
fn authenticator_local_backend() {
    use ipsec_eap::server::{Authenticator, Backend};
    use std::time::Duration;
    let mut rng = ChaCha20Rng::seed_from_u64(6);
    let (mut a, id_req) = Authenticator::start(Backend::Local, &mut rng);
    let r = Repr::parse_bytes(&id_req).unwrap();
    assert_eq!((r.code, r.data), (Code::Request, Some((Type::Identity, &[][..]))));
    let mut peer = Peer::new(b"CORP\\alice", "correct horse").unwrap();
    let resp = peer_send(peer.handle(&id_req, &mut rng).unwrap());
    let mut wrong = resp.clone();
    wrong[1] = wrong[1].wrapping_add(1);
    assert!(matches!(
        a.handle_response(&wrong, &Users, Duration::ZERO, &mut rng),
        Err(Error::WrongIdentifier { .. })
    ));
    let nak = packet::build(Code::Response, resp[1], Type::Nak, &[26]).unwrap();
    assert!(matches!(
        a.handle_response(&nak, &Users, Duration::ZERO, &mut rng),
        Err(Error::Unexpected(_))
    ));
    let mut to_peer = send(a.handle_response(&resp, &Users, Duration::ZERO, &mut rng).unwrap());
    assert_eq!(a.identity(), Some(&b"CORP\\alice"[..]));
    let msk = loop {
        let resp = peer_send(peer.handle(&to_peer, &mut rng).unwrap());
        match a.handle_response(&resp, &Users, Duration::ZERO, &mut rng).unwrap() {
            Step::Send(b) => to_peer = b,
            Step::Success { msk, eap } => {
                assert_eq!(peer.handle(&eap, &mut rng).unwrap(), PeerStep::Success(msk.clone()));
                break msk;
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(msk.as_bytes().len(), 64);
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(
        a.handle_response(&resp, &Users, Duration::ZERO, &mut rng),
        Err(Error::Finished)
    );
}
