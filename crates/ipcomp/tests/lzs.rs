//! LZS: known answers written by hand from the format (RFC 1974 section 2.3 / ANSI X3.241),
//! agreement of compressor and decompressor, and rejection of malformed input.
//!
//! Format reminder (bits MSB first):
//!   literal 0 bbbbbbbb | string 1 <offset> <length>
//!   offset: 1 ooooooo (7-bit, 1..127) or 0 ooooooooooo (11-bit, 1..2047)
//!   length: 00=2 01=3 10=4 1100=5 1101=6 1110=7, 1111 nnnn = 8+n (n<15),
//!           1111 1111 nnnn = 23+n, 1111 1111 1111 nnnn = 38+n, ...
//!   end marker: 1 1 0000000, then zero bits to the byte boundary.
mod common;

use ipsec_ipcomp::lzs::{self, LzsCodec};
use ipsec_ipcomp::{DecompressError, Error};

/// Packs a string of '0'/'1' (spaces ignored) MSB first, zero-padded to a byte.
fn bits(s: &str) -> Vec<u8> {
    let b: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = vec![0u8; b.len().div_ceil(8)];
    for (i, c) in b.iter().enumerate() {
        assert!(*c == b'0' || *c == b'1');
        if *c == b'1' {
            out[i / 8] |= 0x80 >> (i % 8);
        }
    }
    out
}

fn compress(data: &[u8]) -> Vec<u8> {
    let mut c = LzsCodec::new();
    let mut out = vec![0u8; data.len() * 9 / 8 + 8];
    let n = c.compress(data, &mut out).unwrap();
    out.truncate(n);
    out
}

fn decompress(data: &[u8], bound: usize) -> Result<Vec<u8>, Error> {
    let mut out = vec![0u8; bound];
    let n = lzs::decompress(data, &mut out)?;
    out.truncate(n);
    Ok(out)
}

const END: &str = "1 1 0000000";

#[test]
fn known_answers_encode_and_decode() {
    // (data, hand-written bit string)
    let cases: Vec<(Vec<u8>, String)> = vec![
        // Empty input: only the end marker, padded: 11000000 0 -> c0 00.
        (vec![], END.to_string()),
        // One byte 'A' = 0x41: literal 0 01000001, end marker.
        (b"A".to_vec(), format!("0 01000001 {END}")),
        // "ABABABAB": A, B, then a 6-byte string at 7-bit offset 2 (length 6 = 1101).
        (
            b"ABABABAB".to_vec(),
            format!("0 01000001 0 01000010 1 1 0000010 1101 {END}"),
        ),
        // "aaa": 'a' = 0x61 then a 2-byte string at offset 1 (length 2 = 00).
        (b"aaa".to_vec(), format!("0 01100001 1 1 0000001 00 {END}")),
        // 'a' then offset-1 strings of lengths 3, 4, 5, 7 (01, 10, 1100, 1110).
        (vec![b'a'; 4], format!("0 01100001 1 1 0000001 01 {END}")),
        (vec![b'a'; 5], format!("0 01100001 1 1 0000001 10 {END}")),
        (vec![b'a'; 6], format!("0 01100001 1 1 0000001 1100 {END}")),
        (vec![b'a'; 8], format!("0 01100001 1 1 0000001 1110 {END}")),
        // Extended lengths: 8 = 1111 0000, 22 = 1111 1110, 23 = 1111 1111 0000,
        // 37 = 1111 1111 1110, 38 = 1111 1111 1111 0000.
        (vec![b'a'; 9], format!("0 01100001 1 1 0000001 1111 0000 {END}")),
        (vec![b'a'; 23], format!("0 01100001 1 1 0000001 1111 1110 {END}")),
        (vec![b'a'; 24], format!("0 01100001 1 1 0000001 1111 1111 0000 {END}")),
        (vec![b'a'; 38], format!("0 01100001 1 1 0000001 1111 1111 1110 {END}")),
        (
            vec![b'a'; 39],
            format!("0 01100001 1 1 0000001 1111 1111 1111 0000 {END}"),
        ),
    ];
    for (data, s) in &cases {
        let want = bits(s);
        assert_eq!(compress(data), want, "encode {:?}", String::from_utf8_lossy(data));
        assert_eq!(decompress(&want, 100).unwrap(), *data, "decode {s}");
    }
    assert_eq!(bits(END), [0xc0, 0x00]);
    assert_eq!(bits(&format!("0 01000001 {END}")), [0x20, 0xe0, 0x00]);
}

#[test]
fn known_answers_decode_only() {
    // An 11-bit offset may code a short distance: "abc" then 1 0 00000000011 01 (offset 3,
    // length 3) -> "abcabc".
    let s = format!("0 01100001 0 01100010 0 01100011 1 0 00000000011 01 {END}");
    assert_eq!(decompress(&bits(&s), 100).unwrap(), b"abcabc");
    // Maximum offset: 2047 literals, then 1 0 11111111111 1100 copies the first 5 bytes.
    let lits: Vec<u8> = (0..2047u32).map(|i| (i * 31 % 256) as u8).collect();
    let mut s = String::new();
    for b in &lits {
        s += &format!("0 {b:08b} ");
    }
    s += &format!("1 0 11111111111 1100 {END}");
    let out = decompress(&bits(&s), 4096).unwrap();
    assert_eq!(&out[..2047], &lits[..]);
    assert_eq!(&out[2047..], &lits[..5]);
}

#[test]
fn max_offset_match_is_found_and_used() {
    // 2047 bytes without repeats of length >= 8, then the first 100 of them again: the only
    // long match is at offset 2047.
    let mut x: Vec<u8> = common::corpus::seeded_random(2047, 42);
    let head: Vec<u8> = x[..100].to_vec();
    x.extend_from_slice(&head);
    let c = compress(&x);
    assert_eq!(decompress(&c, 4096).unwrap(), x);
    // The repeat costs about 1+1+11+12 bits instead of 900.
    let lits_only = compress(&x[..2047]).len();
    assert!(c.len() < lits_only + 10, "{} vs {}", c.len(), lits_only);
    // And 2048 back is out of reach: a repeat at distance 2048 stays literal.
    let mut y: Vec<u8> = common::corpus::seeded_random(2048, 43);
    let head: Vec<u8> = y[..100].to_vec();
    y.extend_from_slice(&head);
    let c = compress(&y);
    assert_eq!(decompress(&c, 4096).unwrap(), y);
    assert!(c.len() > 2148 * 9 / 8 - 40);
}

#[test]
fn agreement_on_varied_data() {
    let mut cases: Vec<Vec<u8>> = vec![vec![], vec![7], vec![0; 70000], b"ab".repeat(5000)];
    cases.push(common::corpus::seeded_random(5000, 9));
    for set in common::corpus::load() {
        cases.push(set.data[..set.data.len().min(64 * 1024)].to_vec());
    }
    // Long runs and every length around the encoding boundaries.
    for len in 1..100 {
        let mut d = b"xyz".to_vec();
        d.resize(d.len() + len, b'q');
        d.extend_from_slice(b"xyz");
        cases.push(d);
    }
    for d in cases {
        let c = compress(&d);
        assert_eq!(decompress(&c, d.len()).unwrap(), d);
        if !d.is_empty() {
            assert_eq!(decompress(&c, d.len() - 1), Err(Error::DecompressedTooBig));
        }
    }
}

#[test]
fn malformed_input_is_rejected() {
    let e = |s: &str| decompress(&bits(s), 100).unwrap_err();
    // Truncated inside a literal.
    assert_eq!(
        decompress(&[0x20], 100).unwrap_err(),
        Error::Decompress(DecompressError::Truncated)
    );
    // Truncated inside an 11-bit offset (13 bits + 3 padding bits: 6 of 11 offset bits).
    assert_eq!(e("0 01100001 1 0 000"), Error::Decompress(DecompressError::Truncated));
    // 11-bit offset 0.
    assert_eq!(
        e(&format!("0 01100001 1 0 00000000000 00 {END}")),
        Error::Decompress(DecompressError::OffsetZero)
    );
    // Offset beyond the output: 1 byte out, offset 2.
    assert_eq!(
        e(&format!("0 01100001 1 1 0000010 00 {END}")),
        Error::Decompress(DecompressError::OffsetBeyondOutput)
    );
    assert_eq!(
        e(&format!("1 0 00000000001 00 {END}")),
        Error::Decompress(DecompressError::OffsetBeyondOutput)
    );
    // Missing end marker: a literal then padding; empty input.
    assert_eq!(e("0 01100001"), Error::Decompress(DecompressError::MissingEndMarker));
    assert_eq!(
        decompress(&[], 100).unwrap_err(),
        Error::Decompress(DecompressError::MissingEndMarker)
    );
    // Data after the end marker, or non-zero padding.
    assert_eq!(
        decompress(&[0xc0, 0x00, 0x00], 100).unwrap_err(),
        Error::Decompress(DecompressError::TrailingData)
    );
    assert_eq!(
        decompress(&[0xc0, 0x01], 100).unwrap_err(),
        Error::Decompress(DecompressError::TrailingData)
    );
    // A length that runs past the bound (100): 8 + 7 * 15 = 113.
    let long = format!("0 01100001 1 1 0000001 1111 {} 0000 {END}", "1111 ".repeat(7));
    assert_eq!(e(&long), Error::DecompressedTooBig);
}

#[test]
fn random_garbage_never_panics() {
    let mut out = vec![0u8; 4096];
    let pool = common::corpus::seeded_random(1 << 20, 77);
    let mut ok = 0;
    for i in 0..50_000usize {
        let start = (i * 7919) % (pool.len() - 300);
        let len = i % 97 + (i % 3) * 50;
        let data = &pool[start..start + len];
        if lzs::decompress(data, &mut out).is_ok() {
            ok += 1;
        }
        // Also a valid stream with one flipped bit, and cut short.
        if i % 50 == 0 {
            let mut c = compress(&pool[start..start + 200]);
            let bit = i % (c.len() * 8);
            c[bit / 8] ^= 0x80 >> (bit % 8);
            let _ = lzs::decompress(&c, &mut out);
            let _ = lzs::decompress(&c[..c.len() / 2], &mut out);
        }
    }
    assert!(ok < 50_000);
}
