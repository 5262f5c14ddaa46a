//! Arbitrary text to the setkey config parser (`ipsec::config::parse` with `Format::Setkey`);
//! what parses is built into an engine (SAs keyed, policies checked). Errors, never panics.
#![no_main]
use ipsec::config::{parse, Format};
use ipsec_fuzz::MAX_INPUT;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(loaded) = parse(text, Format::Setkey) {
        let _ = loaded.config.build(std::time::Duration::ZERO);
    }
});
