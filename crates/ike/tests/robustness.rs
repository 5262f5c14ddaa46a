//! Arbitrary and mutated bytes into the parsers, the responder and the initiator: errors,
//! never a panic, never an unbounded loop.
mod common;
use common::*;
use ipsec_ike::*;
use proptest::prelude::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

const IKE: &str = "aes128-sha256-x25519";

/// A valid exchange, recorded: every datagram, in order.
fn recorded() -> Vec<Sent> {
    let (a, b) = pair(IKE, IKE, "aes128gcm16", "aes128gcm16");
    let mut net = Net::new(a, b);
    net.up();
    net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    net.a.terminate(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    net.sent
}

fn responder() -> Endpoint {
    let (_, b) = pair(IKE, IKE, "aes128gcm16", "aes128gcm16");
    Endpoint::new(b.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parsers_take_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = message::Message::parse(&data);
        let _ = sa::SaPayload::parse(&data);
        let _ = ts::parse(&data);
        let _ = notify::Notify::parse(&data);
        let _ = delete::Delete::parse(&data);
        let _ = id::Identity::parse(&data);
        let _ = message::parse_chain(&data, data.first().copied().unwrap_or(33));
    }

    #[test]
    fn responder_takes_any_datagram(data in proptest::collection::vec(any::<u8>(), 0..600), natt in any::<bool>()) {
        let mut b = responder();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let port = if natt { 4500 } else { 500 };
        let _ = b.handle_datagram(std::time::Duration::ZERO, format!("{B_IP}:{port}").parse().unwrap(), format!("{A_IP}:{port}").parse().unwrap(), &data, &mut rng);
        while b.poll_transmit().is_some() {}
    }
}

/// Each recorded datagram mutated many ways (bit flips, truncations, length fields, payload
/// types) and fed to the side it was meant for, in the state it was meant for.
#[test]
fn mutated_exchanges_never_panic() {
    let sent = recorded();
    assert!(sent.len() >= 8);
    let mut rng = ChaCha20Rng::seed_from_u64(99);
    for round in 0..300 {
        let (a, b) = pair(IKE, IKE, "aes128gcm16", "aes128gcm16");
        let mut net = Net::new(a, b);
        net.a.initiate(net.now, "a2b", &mut net.rng).unwrap();
        // Replay the recording's datagrams with one of them mutated.
        let victim = round % sent.len();
        for (i, s) in sent.iter().enumerate() {
            let mut p = s.t.payload.clone();
            if i == victim {
                match rng.next_u32() % 5 {
                    0 => {
                        let k = rng.next_u32() as usize % p.len();
                        p[k] ^= 1 << (rng.next_u32() % 8);
                    }
                    1 => p.truncate(rng.next_u32() as usize % p.len()),
                    2 => {
                        let k = 24 + rng.next_u32() as usize % 8;
                        if k < p.len() {
                            p[k] = rng.next_u32() as u8;
                        }
                    }
                    3 => {
                        let k = 16.min(p.len() - 1);
                        p[k] = rng.next_u32() as u8;
                    }
                    _ => p.extend((0..rng.next_u32() % 64).map(|_| rng.next_u32() as u8)),
                }
            }
            let to = if s.from_a { &mut net.b } else { &mut net.a };
            let _ = to.handle_datagram(net.now, s.t.remote, s.t.local, &p, &mut net.rng);
            while to.poll_transmit().is_some() {}
            while to.poll_event().is_some() {}
        }
        net.now += std::time::Duration::from_secs(500);
        net.a.handle_timeout(net.now, &mut net.rng);
        net.b.handle_timeout(net.now, &mut net.rng);
    }
}

/// Random payload chains with valid headers go past the header check into the payload
/// parsers and the exchange handlers.
#[test]
fn random_chains_behind_valid_headers() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let mut b = responder();
    for _ in 0..20_000 {
        let n = (rng.next_u32() % 300) as usize;
        let mut m = vec![0u8; 28 + n];
        rng.fill_bytes(&mut m[..]);
        m[16] = [33, 34, 40, 41, 46, 44, 0, 99][rng.next_u32() as usize % 8];
        m[17] = 0x20;
        m[18] = 34 + (rng.next_u32() % 4) as u8;
        m[19] = 0x08;
        if rng.next_u32() % 2 == 0 {
            m[8..16].fill(0);
            m[20..24].fill(0);
        }
        let l = m.len() as u32;
        m[24..28].copy_from_slice(&l.to_be_bytes());
        let _ = b.handle_datagram(
            std::time::Duration::ZERO,
            format!("{B_IP}:500").parse().unwrap(),
            format!("{A_IP}:500").parse().unwrap(),
            &m,
            &mut rng,
        );
        while b.poll_transmit().is_some() {}
        while b.poll_event().is_some() {}
    }
    assert!(b.ike_sa_count() <= limits::MAX_IKE_SAS);
}
