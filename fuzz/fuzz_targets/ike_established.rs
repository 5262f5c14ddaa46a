//! An established IKE SA (`ipsec_fuzz::ike::established`) driven with authenticated requests
//! whose decrypted content is the fuzz input: each `[kind u8][first payload u8][len u16 BE]
//! [inner chain]` record is sealed with the initiator's real keys and the next message ID, so
//! every mutation passes the integrity check and reaches the CREATE_CHILD_SA (further
//! children, child and IKE SA rekeys, KE, REKEY_SA) and INFORMATIONAL (Deletes, notifies)
//! handlers; kind bit 0: INFORMATIONAL instead of CREATE_CHILD_SA, bit 1: the clock moves 30 s
//! first, bit 2: the message ID is not advanced (a retransmission). At most 16 records; then
//! the timers run.
#![no_main]
use ipsec_fuzz::ike::Driver;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    Driver::run(data, 4, 16, |d, head, inner| {
        let (kind, first) = (head[0], head[1]);
        if kind & 2 != 0 {
            d.advance(30);
        }
        let h = d.request_header(kind & 1 != 0);
        let Ok(msg) = d.sa.seal.seal(&h, first, inner, &mut d.rng_i) else {
            return;
        };
        d.deliver(&msg);
        if kind & 4 == 0 {
            d.next_message_id();
        }
    });
});
