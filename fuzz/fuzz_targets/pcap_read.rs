//! Arbitrary bytes as a capture for `ipsec open` (`ipsec::tool::run`: the pcap reader, link
//! types, frame offsets, then the bundle): an error or a summary, never a panic.
#![no_main]
use ipsec::bundle::{AnySa, Bundle};
use ipsec::tool::{run, Direction};
use ipsec_fuzz::{esp_params, rng, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let mut b = Bundle::new(vec![AnySa::with_rng(&esp_params(6), None, rng()).unwrap()]);
    let _ = run(Direction::Open, &mut b, data, std::io::sink(), |_, _| {});
});
