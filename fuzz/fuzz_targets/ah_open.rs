//! Arbitrary bytes to `AhSa::open` (HMAC, mode, ESN and IP version from the first byte):
//! an error or a packet, never a panic. The ICV computation walks IPv4 options and IPv6
//! extension headers to zero mutable fields before it can reject anything.
#![no_main]
use ipsec_ah::AhSa;
use ipsec_fuzz::{ah_params, in_buf, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    let Ok(mut sa) = AhSa::new(&ah_params(data[0])) else {
        return;
    };
    let _ = in_buf(&data[1..], |b| sa.open(b).map(|_| ()));
});
