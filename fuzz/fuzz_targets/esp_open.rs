//! Arbitrary bytes to `EspSa::open`. The first byte picks the suite (CBC+HMAC, GCM, ChaCha20,
//! and unauthenticated `digest_null` suites), transport or tunnel mode, ESN, IPv4/IPv6 (see
//! `ipsec_fuzz::esp_params`). Must return an error or a packet, never panic.
#![no_main]
use ipsec_esp::EspSa;
use ipsec_fuzz::{esp_params, in_buf, rng, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    let Ok(mut sa) = EspSa::with_rng(&esp_params(data[0]), rng()) else {
        return;
    };
    let _ = in_buf(&data[1..], |b| sa.open(b).map(|_| ()));
});
