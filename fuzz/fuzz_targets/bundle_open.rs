//! Arbitrary bytes to `Bundle::open` with bundles where no ICV guards the parsing (byte 0
//! picks one): IPComp alone (DEFLATE, LZS, LZF; transport or tunnel), IPComp inside ESP with
//! `digest_null`, and IPComp + ESP (HMAC) + AH. Decompression, nesting (a payload that
//! decompresses to another IPComp header) and the depth bound are reached by raw bytes.
#![no_main]
use ipsec_fuzz::{in_buf, open_bundle, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    let mut b = open_bundle(data[0]);
    let _ = in_buf(&data[1..], |buf| b.open(buf).map(|_| ()));
});
