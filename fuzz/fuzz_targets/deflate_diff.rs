//! Differential DEFLATE: our encoder (`ipsec_ipcomp::deflate`, 2 KB or 32 KB window from
//! byte 0) → miniz_oxide's raw inflate must give the input back, with the 2 KB
//! window or the full 32 KB one.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ipcomp::deflate::DeflateCodec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    let window = if data[0] & 1 == 0 { 2048 } else { 32768 };
    let input = &data[1..];
    let mut codec = DeflateCodec::new(window);
    let mut packed = vec![0u8; input.len() * 2 + 64];
    let Some(n) = codec.compress(input, &mut packed) else {
        return;
    };
    let back = miniz_oxide::inflate::decompress_to_vec(&packed[..n]).expect("miniz_oxide inflates our DEFLATE");
    assert_eq!(back, input);
});
