//! IKE fragments (RFC 7383) into an established IKE SA (`ipsec_fuzz::ike::established`, where
//! both sides announced fragmentation): each record `[flags u8][number u16 BE][total u16 BE]
//! [next u8][len u16 BE][piece]` becomes an Encrypted Fragment payload sealed with the
//! initiator's real keys, so it passes the ICV and reaches reassembly (bounds, duplicates,
//! Total Fragments changes, the message-ID window) and, once a message is whole, the
//! CREATE_CHILD_SA / INFORMATIONAL handlers. Flags: bit 0 INFORMATIONAL instead of
//! CREATE_CHILD_SA, bit 1 the clock moves 31 s first (a partial message expires), bit 2 the
//! message ID advances afterwards, bit 3 one byte of the sealed fragment is flipped (its ICV
//! fails), bit 4 the datagram is the record's piece as it is (not sealed). At most 40
//! records; then the timers run.
#![no_main]
use ipsec_fuzz::ike::Driver;
use ipsec_ike::payload::kind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    Driver::run(data, 8, 40, |d, head, piece| {
        let (flags, fields, next) = (head[0], [head[1], head[2], head[3], head[4]], head[5]);
        if flags & 2 != 0 {
            d.advance(31);
        }
        let h = d.request_header(flags & 1 != 0);
        let msg = if flags & 16 != 0 {
            piece.to_vec()
        } else {
            let Ok(mut m) =
                d.sa.seal
                    .seal_payload(&h, kind::SKF, next, &fields, piece, &mut d.rng_i)
            else {
                return;
            };
            if flags & 8 != 0 {
                let at = usize::from(next) % m.len();
                m[at] ^= 0x01;
            }
            m
        };
        d.deliver(&msg);
        if flags & 4 != 0 {
            d.next_message_id();
        }
    });
});
