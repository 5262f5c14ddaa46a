//! Arbitrary text to the `--sa` SPEC parser (`ipsec::spec`: tokenizer, key parser, SA
//! words), and what it accepts must set up an SA or say why not. Errors never contain the key.
#![no_main]
use ipsec::bundle::AnySa;
use ipsec_fuzz::{rng, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = ipsec::spec::tokenize(s);
    let _ = ipsec::spec::parse_key(s);
    if let Ok(p) = ipsec::spec::parse(s) {
        let _ = AnySa::with_rng(&p.params, p.comp, rng());
    }
});
