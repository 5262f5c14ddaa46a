//! The IPComp decompressors (DEFLATE, LZS, LZF; byte 0) on arbitrary input with an output
//! bound from bytes 1-2: never a panic, never more than the bound. Then the round trip:
//! our compressor's output of the same bytes must decompress to them.
#![no_main]
use ipsec_fuzz::MAX_INPUT;
use ipsec_ipcomp::{Algorithm, Compressor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 || data.len() > MAX_INPUT {
        return;
    }
    let alg = [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf][usize::from(data[0] % 3)];
    let bound = usize::from(u16::from_be_bytes([data[1], data[2]]));
    let input = &data[3..];
    let mut c = Compressor::new(alg);
    let mut out = vec![0u8; 65_536];
    if let Ok(n) = c.decompress(input, &mut out[..bound]) {
        assert!(n <= bound);
    }
    let mut packed = vec![0u8; input.len() + 64];
    if let Some(n) = c.compress(input, &mut packed) {
        let m = c
            .decompress(&packed[..n], &mut out[..input.len()])
            .expect("our own output decompresses");
        assert_eq!(&out[..m], input, "{} round trip", alg.name());
    }
});
