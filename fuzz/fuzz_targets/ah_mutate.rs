//! Structure-aware AH: seal a valid UDP packet with a known key, apply the fuzzer's edits
//! (`ipsec_fuzz::apply_edits`), open. An accepted tunnel-mode packet must be the original
//! inner packet (only the outer header's mutable fields are outside the ICV).
#![no_main]
use ipsec_ah::AhSa;
use ipsec_core::sa::Mode;
use ipsec_fuzz::{ah_params, apply_edits, in_buf, udp_packet, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 || data.len() > MAX_INPUT {
        return;
    }
    let params = ah_params(data[0]);
    let (Ok(mut tx), Ok(mut rx)) = (AhSa::new(&params), AhSa::new(&params)) else {
        return;
    };
    let inner = udp_packet(data[0] & 0x80 != 0, &vec![0x3c; usize::from(data[1])]);
    let mut sealed = in_buf(&inner, |b| tx.seal(b).map(|_| ())).expect("a valid packet seals");
    apply_edits(&mut sealed, &data[2..]);
    if let Ok(opened) = in_buf(&sealed, |b| rx.open(b).map(|_| ())) {
        if params.mode == Mode::Tunnel {
            assert_eq!(opened, inner, "an authenticated tunnel packet opened to something else");
        }
    }
});
