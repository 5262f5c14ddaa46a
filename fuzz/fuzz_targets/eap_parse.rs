//! Arbitrary bytes to the EAP parsers (crates/eap): the EAP packet (RFC 3748 §4; what parses
//! must emit back to the same packet), the EAP-MSCHAPv2 messages, and the state machines: a
//! peer, a local MSCHAPv2 authenticator, and the top-level authenticator, each fed the input
//! as a sequence of EAP packets (a length-prefixed list). Typed errors only, never a panic.
#![no_main]
use core::time::Duration;
use ipsec_eap::ms_chap::NtHash;
use ipsec_eap::mschapv2::message::Message;
use ipsec_eap::mschapv2::{Credentials, Peer, Server};
use ipsec_eap::packet::{Packet, Repr};
use ipsec_eap::server::{Authenticator, Backend};
use ipsec_fuzz::MAX_INPUT;
use libfuzzer_sys::fuzz_target;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

struct One;
impl Credentials for One {
    fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
        (identity == b"alice").then(|| NtHash::from_bytes([7; 16]))
    }
}

/// The input as packets: each a 1-octet length then that many octets.
fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        out.push(&tail[..n]);
        rest = &tail[n..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    if let Ok(r) = Repr::parse_bytes(data) {
        let v = r.to_vec().unwrap();
        assert_eq!(Repr::parse_bytes(&v).unwrap(), r);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }
    if let Ok(p) = Packet::new_checked(data) {
        let _ = Repr::parse(&p);
    }
    for req in [true, false] {
        if let Ok(m) = Message::parse(req, data) {
            let _ = m.to_vec();
        }
    }
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let packets = split(data);
    let mut peer = Peer::new(b"alice", "pw").unwrap();
    for p in &packets {
        let _ = peer.handle(p, &mut rng);
    }
    let (mut server, _) = Server::start(b"alice", 1, &One, &mut rng).unwrap();
    for p in &packets {
        let _ = server.handle(p);
    }
    let (mut auth, _) = Authenticator::start(Backend::Local, &mut rng);
    for p in &packets {
        let _ = auth.handle_response(p, &One, Duration::ZERO, &mut rng);
    }
});
