//! Structure-aware ESP: the target seals a valid UDP packet with a known key (suite, mode, ESN
//! and IP version from byte 0, payload length from byte 1), then applies the fuzzer's edits
//! (`ipsec_fuzz::apply_edits`: XORs and a truncation) and opens it. With the `digest_null`
//! suites no ICV rejects the edits, so padding and next-header parsing see them; with an ICV
//! an accepted tunnel-mode packet must be exactly the original inner packet.
#![no_main]
use ipsec_core::sa::Mode;
use ipsec_esp::EspSa;
use ipsec_fuzz::{apply_edits, esp_params, in_buf, rng, udp_packet, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 || data.len() > MAX_INPUT {
        return;
    }
    let params = esp_params(data[0]);
    let authenticated = params.aead.is_some() || params.integ.as_ref().is_some_and(|k| k.icv_len > 0);
    let (Ok(mut tx), Ok(mut rx)) = (EspSa::with_rng(&params, rng()), EspSa::with_rng(&params, rng())) else {
        return;
    };
    let inner = udp_packet(data[0] & 0x80 != 0, &vec![0xab; usize::from(data[1])]);
    let mut sealed = in_buf(&inner, |b| tx.seal(b).map(|_| ())).expect("a valid packet seals");
    apply_edits(&mut sealed, &data[2..]);
    if let Ok(opened) = in_buf(&sealed, |b| rx.open(b).map(|_| ())) {
        if authenticated && params.mode == Mode::Tunnel {
            assert_eq!(opened, inner, "an authenticated tunnel packet opened to something else");
        }
    }
});
