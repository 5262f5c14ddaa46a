//! Post-quantum IKEv2 (issue #37): an IKE SA that came up with x25519 + ke1 ML-KEM-768 (one
//! IKE_INTERMEDIATE exchange, `ipsec_fuzz::ike::established_pq`) driven with authenticated
//! requests whose decrypted content is the fuzz input: each `[kind u8][first payload u8]
//! [len u16 BE][inner chain]` record is sealed with the initiator's real keys, so mutations
//! reach the CREATE_CHILD_SA handlers with ADDKE proposals (children and IKE SA rekeyed with
//! ML-KEM: KE payloads of every length, ADDITIONAL_KEY_EXCHANGE links) and the IKE_FOLLOWUP_KE
//! and IKE_INTERMEDIATE responders. kind bits 0-1: 0 CREATE_CHILD_SA, 1 IKE_FOLLOWUP_KE,
//! 2 IKE_INTERMEDIATE (refused once the SA is up), 3 INFORMATIONAL; bit 2: the message ID is not
//! advanced (a retransmission); bit 3: the clock moves 30 s first (a pending follow-up expires).
//! Seeds (scripts/fuzz/fuzz-seeds.sh): a real child rekey and IKE rekey, each CREATE_CHILD_SA
//! followed by its IKE_FOLLOWUP_KE. At most 16 records; then the timers run.
#![no_main]
use ipsec_fuzz::ike::Driver;
use ipsec_ike::header::ExchangeType;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    Driver::run_with(Driver::new_pq, data, 4, 16, |d, head, inner| {
        let (kind, first) = (head[0], head[1]);
        if kind & 8 != 0 {
            d.advance(30);
        }
        let mut h = d.request_header(false);
        h.exchange = match kind & 3 {
            0 => ExchangeType::CreateChildSa,
            1 => ExchangeType::IkeFollowupKe,
            2 => ExchangeType::IkeIntermediate,
            _ => ExchangeType::Informational,
        };
        let Ok(msg) = d.sa.seal.seal(&h, first, inner, &mut d.rng_i) else {
            return;
        };
        d.deliver(&msg);
        if kind & 4 == 0 {
            d.next_message_id();
        }
    });
});
