//! Random and mutated bytes through every parser and state machine of the crate (the same
//! calls as fuzz/fuzz_targets/eap_parse.rs and radius_parse.rs, a fixed seed, a few
//! thousand inputs, so it runs in CI in well under a second): typed errors, never a panic.

use core::time::Duration;
use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::message::Message;
use ipsec_eap::mschapv2::{Credentials, Peer, PeerStep, Server};
use ipsec_eap::packet::Repr;
use ipsec_eap::radius::client::{Config, Session};
use ipsec_eap::radius::packet::{attr, code, Builder, Packet, Repr as RRepr};
use ipsec_eap::radius::{auth, mppe};
use ipsec_eap::server::{Authenticator, Backend, Step};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

struct One;
impl Credentials for One {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        (identity == b"alice").then(|| NtHash::from_bytes([7; 16]))
    }
}

/// The messages of a real conversation, to mutate.
fn conversation() -> Vec<Vec<u8>> {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let mut peer = Peer::with_hash(b"alice", NtHash::from_bytes([7; 16]));
    let (mut server, mut req) = Server::start(b"alice", 1, &One, &mut rng).unwrap();
    let mut all = Vec::new();
    loop {
        all.push(req.clone());
        let PeerStep::Send(resp) = peer.handle(&req, &mut rng).unwrap() else {
            break;
        };
        all.push(resp.clone());
        match server.handle(&resp).unwrap() {
            Step::Send(b) => req = b,
            Step::Success { eap, .. } | Step::Failure { eap, .. } => {
                all.push(eap);
                break;
            }
            Step::Pending => unreachable!(),
        }
    }
    all
}

fn radius_answer() -> Vec<u8> {
    let mut b = Builder::new(code::ACCESS_ACCEPT, 1, &[0; 16]);
    let k = mppe::encrypt(b"secret", &[2; 16], [0x80, 1], &[9; 16]);
    b.attr(
        attr::VENDOR_SPECIFIC,
        &mppe::vendor_specific(mppe::MS_MPPE_RECV_KEY, &k),
    )
    .unwrap();
    b.fragmented(attr::EAP_MESSAGE, &[3, 1, 0, 4]).unwrap();
    b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
    let mut out = b.finish();
    auth::sign_response(b"secret", &[2; 16], &mut out).unwrap();
    out
}

fn one_input(data: &[u8], rng: &mut ChaCha20Rng) {
    if let Ok(r) = Repr::parse_bytes(data) {
        assert_eq!(Repr::parse_bytes(&r.to_vec().unwrap()).unwrap(), r);
    }
    for req in [true, false] {
        if let Ok(m) = Message::parse(req, data) {
            assert_eq!(Message::parse(req, &m.to_vec().unwrap()).unwrap(), m);
        }
    }
    let mut peer = Peer::new(b"alice", "pw").unwrap();
    let _ = peer.handle(data, rng);
    let (mut server, _) = Server::start(b"alice", data.first().copied().unwrap_or(0), &One, rng).unwrap();
    let _ = server.handle(data);
    let (mut a, _) = Authenticator::start(Backend::Local, rng);
    let _ = a.handle_response(data, &One, Duration::ZERO, rng);
    if let Ok(p) = Packet::new_checked(data) {
        let r = RRepr::parse(&p).unwrap();
        let _ = r.eap_message();
        let _ = mppe::keys(&r, b"secret", &[2; 16]);
    }
    let _ = mppe::decrypt(b"secret", &[1; 16], data);
    let _ = auth::verify_response(b"secret", &[2; 16], data);
    let mut s = Session::new(Config::new(b"secret", b"t"), b"alice").unwrap();
    s.send_eap(&[2, 1, 0, 5, 1], data.get(1).copied().unwrap_or(0), Duration::ZERO, rng)
        .unwrap();
    let _ = s.handle_datagram(data);
}

#[test]
fn random_and_mutated_inputs_never_panic() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let mut seeds = conversation();
    seeds.push(radius_answer());
    for round in 0..4000u32 {
        let mut data = if round % 4 == 0 {
            let mut v = vec![0u8; (rng.next_u32() % 300) as usize];
            rng.fill_bytes(&mut v);
            v
        } else {
            seeds[(rng.next_u32() as usize) % seeds.len()].clone()
        };
        // A few byte flips, a truncation or an extension.
        for _ in 0..(rng.next_u32() % 4) {
            if !data.is_empty() {
                let i = (rng.next_u32() as usize) % data.len();
                data[i] = rng.next_u32() as u8;
            }
        }
        match rng.next_u32() % 4 {
            0 => data.truncate((rng.next_u32() as usize) % (data.len() + 1)),
            1 => data.extend_from_slice(&[0xff; 7]),
            _ => {}
        }
        one_input(&data, &mut rng);
    }
}
