//! Arbitrary bytes to the IKEv2 parsers (crates/ike): the header and payload chain, every
//! payload, the SK payload opened with fixed keys (integrity must fail, never panic), and as
//! text to the proposal, traffic selector and identity parsers.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ike::alg::{parse_proposals, Encr, Integ, ProposalKind};
use ipsec_ike::sk::SkCipher;
use ipsec_ike::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    if let Ok(m) = message::Message::parse(data) {
        if let Some((off, _)) = m.chain.sk {
            for (e, i) in [
                (Encr::AesGcm16_128, None),
                (Encr::AesCbc128, Some(Integ::HmacSha256_128)),
            ] {
                let sk = SkCipher::new(e, i, &vec![1; e.keymat_len()], &vec![2; i.map_or(0, |i| i.key_len())]).unwrap();
                let _ = sk.open(data, off);
            }
        }
    }
    let first = data.first().copied().unwrap_or(0);
    let rest = data.get(1..).unwrap_or_default();
    let _ = message::parse_chain(rest, first);
    let _ = sa::SaPayload::parse(rest);
    let _ = ts::parse(rest);
    let _ = notify::Notify::parse(rest);
    let _ = delete::Delete::parse(rest);
    let _ = id::Identity::parse(rest);
    let _ = auth::AuthPayload::parse(rest);
    let _ = ke::KePayload::parse(rest);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_proposals(s, ProposalKind::Ike);
        let _ = parse_proposals(s, ProposalKind::Esp);
        let _ = config::parse_ts_list(s);
        let _ = Identity::from_str_config(s);
    }
});
