//! Arbitrary bytes to the RADIUS parsers (crates/eap): the packet and its attributes (RFC
//! 2865; what parses must emit back the same), the EAP-Message reassembly, the MS-MPPE key
//! decryption (RFC 2548), the answer check, and a RADIUS client session with a request
//! outstanding fed the input as answers (dropped and counted, never a panic), and the
//! accounting client (RFC 2866) likewise.
#![no_main]
use core::time::Duration;
use ipsec_eap::radius::client::{Config, Session};
use ipsec_eap::radius::packet::{Packet, Repr};
use ipsec_eap::radius::{auth, mppe};
use ipsec_fuzz::MAX_INPUT;
use libfuzzer_sys::fuzz_target;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    if let Ok(p) = Packet::new_checked(data) {
        let r = Repr::parse(&p).unwrap();
        let mut v = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut v[..])).unwrap();
        assert_eq!(&v[..], p.as_bytes());
        let _ = r.iter().count();
        let _ = r.eap_message();
        let _ = mppe::keys(&r, b"secret", &[0; 16]);
    }
    let _ = mppe::decrypt(b"secret", &[1; 16], data);
    let _ = auth::verify_response(b"secret", &[2; 16], data);
    let _ = auth::verify_request(b"secret", data);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut s = Session::new(Config::new(b"secret", b"fuzz"), b"alice").unwrap();
    s.send_eap(
        &[2, 1, 0, 10, 1, b'a', b'l', b'i', b'c', b'e'],
        data.first().copied().unwrap_or(0),
        Duration::ZERO,
        &mut rng,
    )
    .unwrap();
    let _ = s.handle_datagram(data);
    let _ = s.handle_datagram(data.get(1..).unwrap_or_default());
    let _ = s.handle_datagram_from(1, data);
    let _ = ipsec_eap::radius::accounting::verify_request(b"secret", data);
    let mut a = ipsec_eap::radius::accounting::Accounting::new(ipsec_eap::radius::accounting::Config {
        secrets: vec![Config::new(b"secret", b"fuzz").secret],
        retransmit_after: Duration::from_secs(1),
        max_tries: 2,
    });
    let record = ipsec_eap::radius::accounting::Record {
        user_name: b"alice".to_vec(),
        ..Default::default()
    };
    a.send(ipsec_eap::radius::accounting::StatusType::Start, &record, None, None, Duration::ZERO)
        .unwrap();
    let _ = a.handle_datagram(0, data);
    let _ = a.handle_datagram(1, data);
});
