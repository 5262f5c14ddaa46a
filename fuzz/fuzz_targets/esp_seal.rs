//! Seals fuzzer-chosen bytes (taken as an inner IP packet, so padding, next header and the
//! tunnel's inner checks see fuzzer bytes) with the suite byte 0 picks, then opens the result
//! with a second SA from the same parameters: whatever seals must open to the same bytes.
#![no_main]
use ipsec_esp::EspSa;
use ipsec_fuzz::{esp_params, in_buf, rng, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    let params = esp_params(data[0]);
    let (Ok(mut tx), Ok(mut rx)) = (EspSa::with_rng(&params, rng()), EspSa::with_rng(&params, rng())) else {
        return;
    };
    let Ok(sealed) = in_buf(&data[1..], |b| tx.seal(b).map(|_| ())) else {
        return;
    };
    let mut opened = in_buf(&sealed, |b| rx.open(b).map(|_| ())).expect("what seals opens");
    // Seal may trim bytes beyond the IP length of the input; compare the packet it sealed.
    let claimed = ipsec_core::ip::claimed_len(&data[1..]).expect("sealed, so IP");
    let mut want = data[1..1 + claimed].to_vec();
    // Transport mode rewrites the IPv4 header (protocol, length) and so recomputes its
    // checksum: a wrong checksum in the input is not kept.
    if want[0] >> 4 == 4 && opened.len() >= 12 && want.len() >= 12 {
        want[10..12].fill(0);
        opened[10..12].fill(0);
    }
    assert_eq!(opened, want);
});
