//! An established IKE SA (`ipsec_fuzz::ike::established`) driven with authenticated requests
//! whose decrypted content is the fuzz input: each `[kind u8][first payload u8][len u16 BE]
//! [inner chain]` record is sealed with the initiator's real keys and the next message ID, so
//! every mutation passes the integrity check and reaches the CREATE_CHILD_SA (further
//! children, child and IKE SA rekeys, KE, REKEY_SA) and INFORMATIONAL (Deletes, notifies)
//! handlers; kind bit 0: INFORMATIONAL instead of CREATE_CHILD_SA, bit 1: the clock moves 30 s
//! first, bit 2: the message ID is not advanced (a retransmission). Then the timers run.
#![no_main]
use ipsec_fuzz::{ike, MAX_INPUT};
use ipsec_ike::header::ExchangeType;
use libfuzzer_sys::fuzz_target;
use rand_chacha::rand_core::SeedableRng;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let mut ri = rand_chacha::ChaCha20Rng::seed_from_u64(ike::INITIATOR_SEED);
    let mut rr = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
    let mut e = ike::established(&mut ri, &mut rr);
    let mut now = Duration::from_secs(1000);
    let mut rest = data;
    let mut n = 0;
    while rest.len() >= 4 && n < 16 {
        n += 1;
        let (kind, first) = (rest[0], rest[1]);
        let len = (u16::from_be_bytes([rest[2], rest[3]]) as usize).min(rest.len() - 4);
        let inner = &rest[4..4 + len];
        rest = &rest[4 + len..];
        if kind & 2 != 0 {
            now += Duration::from_secs(30);
            e.r.handle_timeout(now, &mut rr);
        }
        let mut h = e.header;
        h.exchange = if kind & 1 != 0 {
            ExchangeType::Informational
        } else {
            ExchangeType::CreateChildSa
        };
        let Ok(msg) = e.seal.seal(&h, first, inner, &mut ri) else { continue };
        let _ = e.r.handle_datagram(now, e.to, e.from, &msg, &mut rr);
        if kind & 4 == 0 {
            e.header.message_id = e.header.message_id.wrapping_add(1);
        }
        while e.r.poll_transmit().is_some() {}
        while e.r.poll_event().is_some() {}
    }
    for _ in 0..8 {
        match e.r.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                e.r.handle_timeout(now, &mut rr);
            }
            None => break,
        }
        while e.r.poll_transmit().is_some() {}
        while e.r.poll_event().is_some() {}
    }
    let _ = e.i;
});
