//! An established IKE SA (`ipsec_fuzz::ike::established`) driven with authenticated requests
//! whose decrypted content is the fuzz input: each `[kind u8][first payload u8][len u16 BE]
//! [inner chain]` record is sealed with the initiator's real keys and the next message ID, so
//! every mutation passes the integrity check and reaches the CREATE_CHILD_SA (further
//! children, child and IKE SA rekeys, KE, REKEY_SA) and INFORMATIONAL (Deletes, notifies)
//! handlers; kind bit 0: INFORMATIONAL instead of CREATE_CHILD_SA, bit 1: the clock moves 30 s
//! first, bit 2: the message ID is not advanced (a retransmission). Then the timers run.
#![no_main]
use ipsec_fuzz::{ike, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let mut d = ike::Driver::new();
    let mut rest = data;
    let mut n = 0;
    while rest.len() >= 4 && n < 16 {
        n += 1;
        let (kind, first) = (rest[0], rest[1]);
        let len = (u16::from_be_bytes([rest[2], rest[3]]) as usize).min(rest.len() - 4);
        let inner = &rest[4..4 + len];
        rest = &rest[4 + len..];
        if kind & 2 != 0 {
            d.advance(30);
        }
        let h = d.request_header(kind & 1 != 0);
        let Ok(msg) = d.sa.seal.seal(&h, first, inner, &mut d.rng_i) else { continue };
        d.deliver(&msg);
        if kind & 4 == 0 {
            d.next_message_id();
        }
    }
    d.run_timers();
});
