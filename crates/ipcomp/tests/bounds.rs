//! Decompression is bounded: a tiny packet cannot expand past 65535 bytes or the MTU.
mod common;

use common::*;
use ipsec_core::ip::{self, proto};
use ipsec_core::Mode;
use ipsec_ipcomp::{Algorithm, Compressor, Error, IpcompSa};

/// An IPv4 packet whose payload is an IPComp header and `compressed`.
fn ipcomp_packet(cpi: u16, next: u8, compressed: &[u8]) -> Vec<u8> {
    let mut p = v4_tcp(&[]);
    p.truncate(20);
    p[9] = proto::COMP;
    p.extend_from_slice(&[next, 0]);
    p.extend_from_slice(&cpi.to_be_bytes());
    p.extend_from_slice(compressed);
    ip::fix_length(&mut p).unwrap();
    p
}

/// A hand-made DEFLATE bomb: one fixed-Huffman block holding the literal 0 and then the
/// length-258/distance-1 pair `reps` times (RFC 1951 3.2.6: BFINAL 1, BTYPE 01; literal 0 =
/// 8-bit code 00110000; length 258 = code 285, 8-bit 11000101; distance 1 = code 0, 5-bit
/// 00000; end of block = 7-bit 0000000). Huffman codes go MSB first into the LSB-first stream.
fn deflate_bomb(reps: usize) -> Vec<u8> {
    let mut bits: Vec<u8> = vec![1, 1, 0]; // BFINAL, BTYPE = 01 (LSB first)
    let code = |bits: &mut Vec<u8>, s: &str| bits.extend(s.bytes().map(|c| c - b'0'));
    code(&mut bits, "00110000");
    for _ in 0..reps {
        code(&mut bits, "11000101");
        code(&mut bits, "00000");
    }
    code(&mut bits, "0000000");
    let mut out = vec![0u8; bits.len().div_ceil(8)];
    for (i, b) in bits.iter().enumerate() {
        out[i / 8] |= b << (i % 8);
    }
    out
}

#[test]
fn the_bomb_is_valid_deflate() {
    let b = deflate_bomb(10);
    assert_eq!(miniz_oxide_inflate(&b), vec![0u8; 1 + 2580]);
}

fn miniz_oxide_inflate(b: &[u8]) -> Vec<u8> {
    let mut c = Compressor::new(Algorithm::Deflate);
    let mut out = vec![0u8; 1 << 20];
    let n = c.decompress(b, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn deflate_bomb_gets_the_typed_error() {
    // 1000 pairs = 258001 bytes from 1.6 KB.
    let bomb = deflate_bomb(1000);
    assert!(bomb.len() < 1700);
    let p = ipcomp_packet(2, proto::TCP, &bomb);
    let mut sa = IpcompSa::new(config(Algorithm::Deflate, Mode::Transport, false)).unwrap();
    assert_eq!(open(&mut sa, &p).unwrap_err(), Error::DecompressedTooBig);
    // Just under the 65535 limit works: 20 + 1 + 253 * 258 = 65295.
    let ok = ipcomp_packet(2, proto::TCP, &deflate_bomb(253));
    let (_, opened) = open(&mut sa, &ok).unwrap();
    assert_eq!(opened.len(), 20 + 1 + 253 * 258);
    assert_eq!(ip::claimed_len(&opened).unwrap(), opened.len());
    // One more pair is past it.
    let over = ipcomp_packet(2, proto::TCP, &deflate_bomb(254));
    assert_eq!(open(&mut sa, &over).unwrap_err(), Error::DecompressedTooBig);
}

#[test]
fn mtu_bounds_every_algorithm() {
    let text = b"bounded ".repeat(500); // 4000 bytes
    for alg in Algorithm::ALL {
        let mut tx = IpcompSa::new(config(alg, Mode::Transport, false)).unwrap();
        let (_, sealed) = seal(&mut tx, &v4_tcp(&text));
        let mut cfg = config(alg, Mode::Transport, false);
        cfg.mtu = 1500;
        let mut rx = IpcompSa::new(cfg).unwrap();
        assert_eq!(open(&mut rx, &sealed).unwrap_err(), Error::DecompressedTooBig, "{alg}");
        let mut cfg = config(alg, Mode::Transport, false);
        cfg.mtu = 4040;
        let mut rx = IpcompSa::new(cfg).unwrap();
        assert_eq!(
            open(&mut rx, &sealed).unwrap().1,
            v4_tcp(&text),
            "{alg}: exactly the MTU"
        );
        // Tunnel mode bounds the inner packet the same way.
        let mut tx = IpcompSa::new(config(alg, Mode::Tunnel, true)).unwrap();
        let (_, sealed) = seal(&mut tx, &v4_tcp(&text));
        let mut cfg = config(alg, Mode::Tunnel, true);
        cfg.mtu = 4039;
        let mut rx = IpcompSa::new(cfg).unwrap();
        assert_eq!(
            open(&mut rx, &sealed).unwrap_err(),
            Error::DecompressedTooBig,
            "{alg} tunnel"
        );
    }
}

#[test]
fn lzs_and_lzf_bombs_are_bounded() {
    // LZS: 'a' then one string of offset 1 with a length of 4000 nibbles of 1111 (60000+).
    let mut s = String::from("0 01100001 1 1 0000001 1111");
    for _ in 0..4500 {
        s += " 1111";
    }
    s += " 0000 1 1 0000000";
    let b: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut lzs = vec![0u8; b.len().div_ceil(8)];
    for (i, c) in b.iter().enumerate() {
        lzs[i / 8] |= (c - b'0') << (7 - i % 8);
    }
    let mut sa = IpcompSa::new(config(Algorithm::Lzs, Mode::Transport, false)).unwrap();
    assert_eq!(
        open(&mut sa, &ipcomp_packet(3, proto::TCP, &lzs)).unwrap_err(),
        Error::DecompressedTooBig
    );
    // LZF: a literal then 300 max-length copies (264 bytes each) = 79201 bytes.
    let mut lzf = vec![0u8, b'z'];
    for _ in 0..300 {
        lzf.extend_from_slice(&[0xe0, 255, 0]);
    }
    let mut sa = IpcompSa::new(config(Algorithm::Lzf, Mode::Transport, false)).unwrap();
    assert_eq!(
        open(&mut sa, &ipcomp_packet(61440, proto::TCP, &lzf)).unwrap_err(),
        Error::DecompressedTooBig
    );
}

/// Found by the `ip_views` fuzz target: a 2-byte "IPv6" packet made `transport_placement`
/// index past its end. Every short or malformed input is now a typed error.
#[test]
fn transport_placement_refuses_short_packets() {
    for len in 0..40 {
        let mut p = vec![0x6bu8; len];
        if let Some(b) = p.first_mut() {
            *b = 0x60;
        }
        assert!(ipsec_ipcomp::transport_placement(&p).is_err(), "len {len}");
    }
    assert!(ipsec_ipcomp::transport_placement(&[0x6b, 0x6b]).is_err());
}
