//! The overhead/MTU calculator against real packets: every figure is checked by sealing
//! packets with the transforms and measuring them (lengths, the pad length ESP reports on
//! open, the headers found in the sealed packet), never by re-deriving the formula.
//! Fragmentation figures are checked by fragmenting sealed packets with a small routine of
//! this file and reassembling them (and, for IPv4, with etherparse's defragmenter).

use ipsec_core::ip::proto;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf};
use ipsec_engine::overhead::*;
use ipsec_engine::AnySa;
use ipsec_ipcomp::Algorithm;
use std::net::IpAddr;

const HEAD: usize = 512;
const TAIL: usize = 512;

// ---------------------------------------------------------------- packets

/// Deterministic incompressible bytes (xorshift).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn text(len: usize) -> Vec<u8> {
    b"to be, or not to be, that is the question. "
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V {
    V4,
    V6,
}

/// An inner packet: IPv4 or IPv6, with or without header options (4 bytes of IPv4 options;
/// an 8-byte IPv6 Hop-by-Hop header), TCP or UDP, carrying `payload`.
fn packet(v: V, opts: bool, upper: Upper, payload: &[u8]) -> Vec<u8> {
    // Addresses without zero bytes: tunnel-mode IPComp compresses the inner header too, and
    // the payloads here are meant not to compress.
    let b = match v {
        V::V4 => etherparse::PacketBuilder::ipv4([198, 51, 100, 17], [192, 88, 99, 201], 64),
        V::V6 => {
            let src = [
                0x20, 1, 0xd, 0xb8, 0x3c, 0x91, 0x5e, 0xa7, 0x12, 0xf4, 0x6b, 0x88, 0xd9, 0x27, 0x4e, 0xb1,
            ];
            let dst = [
                0x20, 1, 0xd, 0xb8, 0x71, 0xc6, 0x2d, 0x9a, 0xe3, 0x58, 0x14, 0xbf, 0x66, 0x0b, 0x93, 0xca,
            ];
            etherparse::PacketBuilder::ipv6(src, dst, 64)
        }
    };
    let mut out = Vec::new();
    match upper {
        Upper::Tcp => b.tcp(1000, 2000, 1, 65535).write(&mut out, payload).unwrap(),
        Upper::Udp => b.udp(1000, 2000).write(&mut out, payload).unwrap(),
        Upper::Other(_) => unreachable!(),
    }
    if opts {
        match v {
            V::V4 => {
                out.splice(20..20, [1, 1, 1, 0]); // NOP NOP NOP EOL
                out[0] = 0x46;
                let tl = out.len() as u16;
                out[2..4].copy_from_slice(&tl.to_be_bytes());
                out[10..12].copy_from_slice(&[0, 0]);
                let c = ipsec_core::ip::checksum(&out[..24]);
                out[10..12].copy_from_slice(&c.to_be_bytes());
            }
            V::V6 => {
                let nh = out[6];
                out.splice(40..40, [nh, 0, 1, 4, 0, 0, 0, 0]); // Hop-by-Hop with PadN
                out[6] = proto::HOPOPTS;
                let pl = (out.len() - 40) as u16;
                out[4..6].copy_from_slice(&pl.to_be_bytes());
            }
        }
    }
    out
}

fn inner_of(v: V, opts: bool) -> Inner {
    match (v, opts) {
        (V::V4, false) => Inner::ipv4(),
        (V::V6, false) => Inner::ipv6(),
        (V::V4, true) => Inner::new(IpVersion::V4, 24).unwrap(),
        (V::V6, true) => Inner::new(IpVersion::V6, 48).unwrap(),
    }
}

fn seal_with(sas: &mut [AnySa], pkt: &[u8]) -> Vec<u8> {
    seal_steps(sas, pkt).0
}

/// Seals with each SA in turn: the result and the length after each SA.
fn seal_steps(sas: &mut [AnySa], pkt: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    let mut lens = Vec::new();
    for sa in sas.iter_mut() {
        sa.seal(&mut buf).unwrap();
        lens.push(buf.len());
    }
    (buf.packet().to_vec(), lens)
}

// ---------------------------------------------------------------- SAs

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Every suite: (name, parameters in transport mode).
fn suites() -> Vec<(String, SaParams)> {
    let mut v = Vec::new();
    let encs: [(EncAlg, usize); 6] = [
        (EncAlg::Null, 0),
        (EncAlg::DesCbc, 8),
        (EncAlg::Des3Cbc, 24),
        (EncAlg::AesCbc, 16),
        (EncAlg::AesCbc, 24),
        (EncAlg::AesCbc, 32),
    ];
    for (e, klen) in encs {
        for i in IntegAlg::ALL {
            if e == EncAlg::Null && i == IntegAlg::Null {
                continue; // neither confidentiality nor integrity: invalid
            }
            let mut p = SaParams::new(Proto::Esp, 0x1000);
            p.enc = Some(Keyed::new(e, &vec![0x11; klen], 0));
            p.integ = Some(Keyed::new(i, &vec![0x22; i.digest_len()], i.default_icv_len()));
            v.push((format!("esp {}-{} {}", e.name(), klen * 8, i.name()), p));
        }
    }
    // A non-default truncation.
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[0x11; 16], 0));
    p.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[0x22; 32], 12));
    v.push(("esp cbc(aes)-128 hmac(sha256)-96".into(), p));
    for klen in [16, 24, 32] {
        for icv in [8, 12, 16] {
            let mut p = SaParams::new(Proto::Esp, 0x1000);
            p.aead = Some(Keyed::new(AeadAlg::AesGcm, &vec![0x33; klen + 4], icv));
            v.push((format!("esp rfc4106(gcm(aes))-{} icv {icv}", klen * 8), p));
        }
    }
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.aead = Some(Keyed::new(AeadAlg::ChaCha20Poly1305, &[0x44; 36], 16));
    v.push(("esp rfc7539esp(chacha20,poly1305)".into(), p));
    for i in IntegAlg::ALL.into_iter().skip(1) {
        let mut p = SaParams::new(Proto::Ah, 0x2000);
        p.integ = Some(Keyed::new(i, &vec![0x55; i.digest_len()], i.default_icv_len()));
        v.push((format!("ah {}", i.name()), p));
    }
    let mut p = SaParams::new(Proto::Ah, 0x2000);
    p.integ = Some(Keyed::new(IntegAlg::HmacSha512, &[0x55; 64], 12));
    v.push(("ah hmac(sha512)-96".into(), p));
    v
}

/// Transport, or tunnel with an outer header of version `outer`.
#[derive(Clone, Copy, Debug)]
enum M {
    Transport,
    Tunnel(V),
}

fn with_mode(mut p: SaParams, m: M) -> SaParams {
    match m {
        M::Transport => {
            p.mode = Mode::Transport;
            p.tunnel = None;
        }
        M::Tunnel(v) => {
            p.mode = Mode::Tunnel;
            p.tunnel = Some(match v {
                V::V4 => Tunnel {
                    src: ip("192.0.2.1"),
                    dst: ip("192.0.2.2"),
                },
                V::V6 => Tunnel {
                    src: ip("2001:db8:ffff::1"),
                    dst: ip("2001:db8:ffff::2"),
                },
            });
        }
    }
    p
}

/// (inner version, inner header options, mode): transport with each inner version (with and
/// without options), tunnel with every inner/outer combination.
fn layouts() -> Vec<(V, bool, M)> {
    let mut v = Vec::new();
    for inner in [V::V4, V::V6] {
        for opts in [false, true] {
            v.push((inner, opts, M::Transport));
        }
        for outer in [V::V4, V::V6] {
            v.push((inner, false, M::Tunnel(outer)));
        }
    }
    v
}

fn sa(p: &SaParams, comp: Option<Algorithm>) -> AnySa {
    AnySa::new(p, comp).unwrap()
}

fn version_of(pkt: &[u8]) -> IpVersion {
    if pkt[0] >> 4 == 4 {
        IpVersion::V4
    } else {
        IpVersion::V6
    }
}

/// The protocol number of the header at `offset`, read from the header in front of it.
fn proto_before(pkt: &[u8], offset: usize) -> u8 {
    if pkt[0] >> 4 == 4 {
        assert_eq!(
            offset,
            (pkt[0] & 0xf) as usize * 4,
            "IPsec header right after the IPv4 header"
        );
        pkt[9]
    } else {
        let (mut nh, mut at) = (pkt[6], 40);
        while at < offset {
            nh = pkt[at];
            at += (pkt[at + 1] as usize + 1) * 8;
        }
        assert_eq!(at, offset, "IPsec header after the IPv6 extension headers");
        nh
    }
}

// ---------------------------------------------------------------- single SAs

/// UDP payload sizes: every remainder modulo 16 (twice) near the smallest packets, and a
/// few larger ones.
fn payload_sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=33).collect();
    v.extend([100, 555, 1000, 1371, 1472, 4001]);
    v
}

#[test]
fn every_suite_mode_and_version_matches_sealed_packets() {
    let mut checked = 0;
    for (name, base) in suites() {
        for (iv, opts, m) in layouts() {
            let p = with_mode(base.clone(), m);
            let calc = Calculator::from_params([&p]).unwrap();
            let mut tx = [sa(&p, None)];
            let mut rx = sa(&p, None);
            let inner = inner_of(iv, opts);
            for n in payload_sizes() {
                let pkt = packet(iv, opts, Upper::Udp, &noise(n, n as u64));
                assert_eq!(Inner::of_packet(&pkt).unwrap(), (inner, pkt.len()));
                let sealed = seal_with(&mut tx, &pkt);
                let o = calc.overhead(inner, pkt.len()).unwrap();
                let ctx = format!("{name} {m:?} inner {iv:?} opts {opts} len {}", pkt.len());
                assert_eq!(sealed.len(), o.sealed_len, "{ctx}");
                assert_eq!(o.bytes, sealed.len() - pkt.len(), "{ctx}");
                assert_eq!(o.breakdown.total(), o.bytes, "{ctx}");
                assert_eq!(o.per_sa, vec![o.breakdown], "{ctx}");
                assert_eq!(version_of(&sealed), o.outer_version, "{ctx}");
                // The IPsec header sits right after what the calculator calls unfragmentable.
                let at = o.unfragmentable_len;
                let want = if p.proto == Proto::Esp { proto::ESP } else { proto::AH };
                assert_eq!(proto_before(&sealed, at), want, "{ctx}");
                match m {
                    M::Transport => assert_eq!(o.breakdown.outer_ip, 0, "{ctx}"),
                    M::Tunnel(_) => assert_eq!(o.breakdown.outer_ip, at, "{ctx}"),
                }
                let spi = u32::from_be_bytes(if p.proto == Proto::Esp {
                    sealed[at..at + 4].try_into().unwrap()
                } else {
                    sealed[at + 4..at + 8].try_into().unwrap()
                });
                assert_eq!(spi, p.spi, "{ctx}");
                if p.proto == Proto::Ah {
                    // AH's own length field: (Payload Len + 2) 32-bit words.
                    assert_eq!((sealed[at + 1] as usize + 2) * 4, o.breakdown.ah, "{ctx}");
                    assert_eq!(o.bytes, o.breakdown.ah + o.breakdown.outer_ip, "{ctx}");
                } else {
                    // The pad length the receiver finds after decrypting.
                    let mut raw = vec![0u8; sealed.len() + 64];
                    raw[..sealed.len()].copy_from_slice(&sealed);
                    let mut buf = PacketBuf::new(&mut raw, 0, sealed.len()).unwrap();
                    let AnySa::Esp(esp) = &mut rx else { unreachable!() };
                    let opened = esp.open(&mut buf).unwrap();
                    assert_eq!(opened.pad_len, o.breakdown.esp_padding, "{ctx}");
                    assert_eq!(buf.packet(), &pkt[..], "{ctx}");
                    assert_eq!((o.breakdown.esp_header, o.breakdown.esp_trailer), (8, 2), "{ctx}");
                    assert_eq!(o.breakdown.esp_iv, esp.iv_len(), "{ctx}");
                    assert_eq!(o.breakdown.esp_icv, esp.icv_len(), "{ctx}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn max_inner_mtu_fits_and_one_byte_more_does_not() {
    for (name, base) in suites() {
        for (iv, opts, m) in layouts() {
            let p = with_mode(base.clone(), m);
            let calc = Calculator::from_params([&p]).unwrap();
            let mut tx = [sa(&p, None)];
            let inner = inner_of(iv, opts);
            let hl = inner.header_len() + 8;
            // Sixteen MTUs in a row (every remainder modulo the largest block) for two
            // layouts, a few common ones for all.
            let mut mtus = vec![576, 1280, 1500];
            if matches!(
                (iv, opts, m),
                (V::V6, true, M::Transport) | (V::V4, false, M::Tunnel(V::V6))
            ) {
                mtus.extend(1401..=1416);
            }
            for mtu in mtus {
                let max = calc.max_inner_mtu(inner, mtu).unwrap();
                let ctx = format!("{name} {m:?} inner {iv:?} opts {opts} mtu {mtu} max {max}");
                let fits = seal_with(&mut tx, &packet(iv, opts, Upper::Udp, &noise(max - hl, 1)));
                assert!(fits.len() <= mtu, "{ctx}: {}", fits.len());
                let over = seal_with(&mut tx, &packet(iv, opts, Upper::Udp, &noise(max + 1 - hl, 1)));
                assert!(over.len() > mtu, "{ctx}: {}", over.len());
                assert_eq!(calc.overhead(inner, max).unwrap().sealed_len, fits.len(), "{ctx}");
            }
        }
    }
}

#[test]
fn mtu_too_small_is_an_error() {
    let (_, p) = suites()
        .into_iter()
        .find(|(n, _)| n.starts_with("esp cbc(aes)-128 hmac(sha1)"))
        .unwrap();
    let p = with_mode(p, M::Tunnel(V::V6));
    let calc = Calculator::from_params([&p]).unwrap();
    // Smallest sealed packet: a bare 20-byte IPv4 header in an IPv6 tunnel.
    let smallest = calc.sealed_len(Inner::ipv4(), 20).unwrap();
    let pkt = {
        let mut h = packet(V::V4, false, Upper::Udp, &[]);
        h.truncate(20);
        h[2..4].copy_from_slice(&20u16.to_be_bytes());
        h
    };
    assert_eq!(seal_with(&mut [sa(&p, None)], &pkt).len(), smallest);
    // Padding: a few larger inner packets seal to the same length.
    let max = calc.max_inner_mtu(Inner::ipv4(), smallest).unwrap();
    assert!((20..36).contains(&max), "{max}");
    assert_eq!(calc.sealed_len(Inner::ipv4(), max), Ok(smallest));
    assert!(calc.sealed_len(Inner::ipv4(), max + 1).unwrap() > smallest);
    assert_eq!(
        calc.max_inner_mtu(Inner::ipv4(), smallest - 1),
        Err(OverheadError::MtuTooSmall {
            link_mtu: smallest - 1,
            smallest
        })
    );
}

// ---------------------------------------------------------------- bundles

const CBC_SHA1: (EncAlg, usize, IntegAlg) = (EncAlg::AesCbc, 16, IntegAlg::HmacSha1);

fn esp_params(m: M) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.enc = Some(Keyed::new(CBC_SHA1.0, &[0x11; CBC_SHA1.1], 0));
    p.integ = Some(Keyed::new(CBC_SHA1.2, &[0x22; 20], 12));
    with_mode(p, m)
}

fn des3_params(m: M) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1001);
    p.enc = Some(Keyed::new(EncAlg::Des3Cbc, &[0x11; 24], 0));
    with_mode(p, m)
}

fn ah_params(m: M, alg: IntegAlg) -> SaParams {
    let mut p = SaParams::new(Proto::Ah, 0x2000);
    p.integ = Some(Keyed::new(alg, &vec![0x33; alg.digest_len()], alg.default_icv_len()));
    with_mode(p, m)
}

fn comp_params(m: M) -> SaParams {
    with_mode(SaParams::new(Proto::Comp, Algorithm::Deflate.cpi() as u32), m)
}

/// Bundles in seal order, with a name.
fn bundles() -> Vec<(&'static str, Vec<SaParams>)> {
    use M::*;
    vec![
        (
            "comp+esp transport",
            vec![comp_params(Transport), esp_params(Transport)],
        ),
        (
            "comp+esp tunnel4",
            vec![comp_params(Transport), esp_params(Tunnel(V::V4))],
        ),
        (
            "comp tunnel6+esp transport",
            vec![comp_params(Tunnel(V::V6)), esp_params(Transport)],
        ),
        (
            "esp+ah transport",
            vec![esp_params(Transport), ah_params(Transport, IntegAlg::HmacSha384)],
        ),
        (
            "esp tunnel6+ah transport",
            vec![esp_params(Tunnel(V::V6)), ah_params(Transport, IntegAlg::HmacSha384)],
        ),
        (
            "esp tunnel4+ah tunnel6",
            vec![esp_params(Tunnel(V::V4)), ah_params(Tunnel(V::V6), IntegAlg::HmacMd5)],
        ),
        (
            "comp+esp+ah transport",
            vec![
                comp_params(Transport),
                des3_params(Transport),
                ah_params(Transport, IntegAlg::HmacSha1),
            ],
        ),
        (
            "comp+esp tunnel4+ah transport",
            vec![
                comp_params(Transport),
                esp_params(Tunnel(V::V4)),
                ah_params(Transport, IntegAlg::HmacSha256),
            ],
        ),
        (
            "comp tunnel4+esp+ah transport",
            vec![
                comp_params(Tunnel(V::V4)),
                esp_params(Transport),
                ah_params(Transport, IntegAlg::HmacSha512),
            ],
        ),
    ]
}

fn keyed(ps: &[SaParams]) -> Vec<AnySa> {
    ps.iter()
        .map(|p| sa(p, (p.proto == Proto::Comp).then_some(Algorithm::Deflate)))
        .collect()
}

#[test]
fn bundles_with_incompressible_payloads_match_sealed_packets() {
    for (name, ps) in bundles() {
        let calc = Calculator::from_params(&ps).unwrap();
        let mut tx = keyed(&ps);
        for (iv, opts) in [(V::V4, false), (V::V4, true), (V::V6, false), (V::V6, true)] {
            let inner = inner_of(iv, opts);
            let sizes = payload_sizes().into_iter().chain([200, 201, 202, 203, 1300]);
            for n in sizes {
                let pkt = packet(iv, opts, Upper::Tcp, &noise(n, 7 + n as u64));
                let (sealed, lens) = seal_steps(&mut tx, &pkt);
                let o = calc.overhead(inner, pkt.len()).unwrap();
                let ctx = format!("{name} inner {iv:?} opts {opts} len {}", pkt.len());
                assert_eq!(sealed.len(), o.sealed_len, "{ctx}");
                assert_eq!(o.len_after, lens, "{ctx}");
                assert_eq!(o.per_sa.len(), ps.len(), "{ctx}");
                assert_eq!(o.breakdown.ipcomp, 0, "{ctx}");
                assert_eq!(version_of(&sealed), o.outer_version, "{ctx}");
                let outermost = if ps.last().unwrap().proto == Proto::Ah {
                    proto::AH
                } else {
                    proto::ESP
                };
                assert_eq!(proto_before(&sealed, o.unfragmentable_len), outermost, "{ctx}");
            }
            for mtu in [576, 1280, 1500] {
                let max = calc.max_inner_mtu(inner, mtu).unwrap();
                let hl = inner.header_len() + 20;
                let fits = seal_with(&mut tx, &packet(iv, opts, Upper::Tcp, &noise(max - hl, 3)));
                let over = seal_with(&mut tx, &packet(iv, opts, Upper::Tcp, &noise(max + 1 - hl, 3)));
                assert!(fits.len() <= mtu && over.len() > mtu, "{name} {iv:?} {mtu} {max}");
            }
        }
    }
}

/// With [`CompAssumption::Compressed`], the lengths given are the compressor's output: the
/// bundle's result must match sealing a compressible packet for real.
#[test]
fn compressed_assumption_matches_sealed_compressible_packets() {
    for (name, ps) in bundles().into_iter().filter(|(_, ps)| ps[0].proto == Proto::Comp) {
        let calc = Calculator::from_params(&ps)
            .unwrap()
            .comp_assumption(CompAssumption::Compressed);
        let mut comp_only = keyed(&ps[..1]);
        let mut tx = keyed(&ps);
        for iv in [V::V4, V::V6] {
            let inner = inner_of(iv, false);
            for n in [300, 1000, 1001, 1002, 1003, 4000] {
                let pkt = packet(iv, false, Upper::Tcp, &text(n));
                let compressed = seal_with(&mut comp_only, &pkt);
                let outer = match ps[0].mode {
                    Mode::Tunnel => version_of(&compressed).header_len(),
                    Mode::Transport => 0,
                };
                // What came out of the compressor, without the IPComp (and outer) header.
                let given = compressed.len() - 4 - outer;
                assert!(given + 100 < pkt.len(), "{name}: the payload compresses");
                let sealed = seal_with(&mut tx, &pkt);
                let o = calc.overhead(inner, given).unwrap();
                assert_eq!(o.sealed_len, sealed.len(), "{name} {iv:?} {n}");
                assert_eq!(o.breakdown.ipcomp, 4, "{name}");
            }
        }
    }
}

#[test]
fn udp_encapsulation_adds_eight_bytes_per_esp_header() {
    // GCM pads to 4 bytes only, so 8 more bytes per packet cost exactly 8 of inner MTU.
    let mut gcm = SaParams::new(Proto::Esp, 0x3000);
    gcm.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    let ps = [
        with_mode(gcm, M::Tunnel(V::V4)),
        ah_params(M::Transport, IntegAlg::HmacSha1),
    ];
    let plain = Calculator::from_params(&ps).unwrap();
    let nat = plain.clone().udp_encap(true);
    for len in [20, 100, 1000] {
        let a = plain.overhead(Inner::ipv4(), len).unwrap();
        let b = nat.overhead(Inner::ipv4(), len).unwrap();
        assert_eq!(b.bytes, a.bytes + 8);
        assert_eq!(b.breakdown.udp_encap, 8);
    }
    assert_eq!(
        nat.max_inner_mtu(Inner::ipv4(), 1500).unwrap() + 8,
        plain.max_inner_mtu(Inner::ipv4(), 1500).unwrap()
    );
}

// ---------------------------------------------------------------- payloads

/// This file's own fragmenter: splits `pkt` into fragments of at most `mtu` bytes. IPv4:
/// copies the header (options included) and sets offset and MF; IPv6: keeps the
/// Hop-by-Hop/Routing headers in front and adds a Fragment header.
fn fragment_packet(pkt: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    if pkt.len() <= mtu {
        return vec![pkt.to_vec()];
    }
    let mut out = Vec::new();
    if pkt[0] >> 4 == 4 {
        let ihl = (pkt[0] & 0xf) as usize * 4;
        let data = &pkt[ihl..];
        let per = (mtu - ihl) & !7;
        for (i, chunk) in data.chunks(per).enumerate() {
            let mut f = pkt[..ihl].to_vec();
            f.extend_from_slice(chunk);
            let more = (i + 1) * per < data.len();
            let df = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x4000;
            let off = (i * per / 8) as u16 | if more { 0x2000 } else { 0 } | df;
            let tl = f.len() as u16;
            f[2..4].copy_from_slice(&tl.to_be_bytes());
            f[6..8].copy_from_slice(&off.to_be_bytes());
            f[10..12].copy_from_slice(&[0, 0]);
            let c = ipsec_core::ip::checksum(&f[..ihl]);
            f[10..12].copy_from_slice(&c.to_be_bytes());
            out.push(f);
        }
    } else {
        // Unfragmentable part: the IPv6 header, then Hop-by-Hop and Routing headers.
        let (mut nh_at, mut at) = (6, 40);
        while matches!(pkt[nh_at], proto::HOPOPTS | proto::ROUTING) {
            nh_at = at;
            at += (pkt[at + 1] as usize + 1) * 8;
        }
        let next = pkt[nh_at];
        let data = &pkt[at..];
        let per = (mtu - at - 8) & !7;
        for (i, chunk) in data.chunks(per).enumerate() {
            let mut f = pkt[..at].to_vec();
            f[nh_at] = proto::FRAGMENT;
            let more = (i + 1) * per < data.len();
            let off = ((i * per) as u16) | more as u16;
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&off.to_be_bytes());
            f.extend_from_slice(&0x1234_5678u32.to_be_bytes());
            f.extend_from_slice(chunk);
            let pl = (f.len() - 40) as u16;
            f[4..6].copy_from_slice(&pl.to_be_bytes());
            out.push(f);
        }
    }
    out
}

/// Reassembles what [`fragment_packet`] made, checking each fragment's length fields.
fn reassemble(frags: &[Vec<u8>]) -> Vec<u8> {
    if frags.len() == 1 {
        return frags[0].clone();
    }
    let mut data = Vec::new();
    let first = &frags[0];
    let mut head;
    if first[0] >> 4 == 4 {
        let ihl = (first[0] & 0xf) as usize * 4;
        head = first[..ihl].to_vec();
        for f in frags {
            assert_eq!(u16::from_be_bytes([f[2], f[3]]) as usize, f.len());
            let off = (u16::from_be_bytes([f[6], f[7]]) & 0x1fff) as usize * 8;
            assert_eq!(off, data.len());
            data.extend_from_slice(&f[ihl..]);
        }
        let df = u16::from_be_bytes([first[6], first[7]]) & 0x4000;
        head[6..8].copy_from_slice(&df.to_be_bytes());
        head[2..4].copy_from_slice(&((ihl + data.len()) as u16).to_be_bytes());
        head[10..12].copy_from_slice(&[0, 0]);
        let c = ipsec_core::ip::checksum(&head);
        head[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        let (mut nh_at, mut at) = (6, 40);
        while first[nh_at] != proto::FRAGMENT {
            nh_at = at;
            at += (first[at + 1] as usize + 1) * 8;
        }
        head = first[..at].to_vec();
        head[nh_at] = first[at];
        for f in frags {
            assert_eq!(u16::from_be_bytes([f[4], f[5]]) as usize + 40, f.len());
            let off = (u16::from_be_bytes([f[at + 2], f[at + 3]]) & !7) as usize;
            assert_eq!(off, data.len());
            data.extend_from_slice(&f[at + 8..]);
        }
        head[4..6].copy_from_slice(&((at - 40 + data.len()) as u16).to_be_bytes());
    }
    head.extend_from_slice(&data);
    head
}

/// The IPv4 fragments reassemble with etherparse's defragmenter too.
fn etherparse_defrag_v4(frags: &[Vec<u8>], whole: &[u8]) {
    let mut pool = etherparse::defrag::IpDefragPool::<(), ()>::new();
    let mut done = None;
    for f in frags {
        let s = etherparse::SlicedPacket::from_ip(f).unwrap();
        if let Some(p) = pool.process_sliced_packet(&s, (), ()).unwrap() {
            done = Some(p.payload);
        }
    }
    let ihl = (whole[0] & 0xf) as usize * 4;
    assert_eq!(done.as_deref(), Some(&whole[ihl..]));
}

fn payload_cases() -> Vec<(&'static str, Vec<SaParams>)> {
    use M::*;
    let mut v = vec![
        ("esp transport", vec![esp_params(Transport)]),
        ("esp tunnel4", vec![esp_params(Tunnel(V::V4))]),
        ("esp tunnel6", vec![esp_params(Tunnel(V::V6))]),
        ("ah transport sha384", vec![ah_params(Transport, IntegAlg::HmacSha384)]),
    ];
    let mut gcm = SaParams::new(Proto::Esp, 0x3000);
    gcm.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    v.push(("gcm transport", vec![gcm]));
    v.extend(bundles());
    v
}

#[test]
fn one_packet_fragmented_after_sealing() {
    for (name, ps) in payload_cases() {
        let calc = Calculator::from_params(&ps).unwrap();
        let mut tx = keyed(&ps);
        for (iv, opts) in [(V::V4, false), (V::V4, true), (V::V6, false), (V::V6, true)] {
            let inner = inner_of(iv, opts);
            for upper in [Upper::Tcp, Upper::Udp] {
                for payload in [0, 1, 1000, 1024, 1400, 4096, 64512] {
                    let pkt = packet(iv, opts, upper, &noise(payload, payload as u64));
                    let sealed = seal_with(&mut tx, &pkt);
                    for mtu in [576, 1280, 1500] {
                        let ctx = format!("{name} {iv:?} opts {opts} {upper:?} payload {payload} mtu {mtu}");
                        let f = calc.fragmented(inner, upper, payload, mtu).unwrap();
                        let frags = fragment_packet(&sealed, mtu);
                        assert!(frags.iter().all(|f| f.len() <= mtu), "{ctx}");
                        assert_eq!(reassemble(&frags), sealed, "{ctx}");
                        // etherparse reads AH as an IPv4 extension header: only ESP outside.
                        if frags.len() > 1 && version_of(&sealed) == IpVersion::V4 && sealed[9] == proto::ESP {
                            etherparse_defrag_v4(&frags, &sealed);
                        }
                        assert_eq!(f.inner_len, pkt.len(), "{ctx}");
                        assert_eq!(f.sealed_len, sealed.len(), "{ctx}");
                        assert_eq!(f.packets, frags.len(), "{ctx}");
                        assert_eq!(f.wire_bytes, frags.iter().map(Vec::len).sum::<usize>(), "{ctx}");
                    }
                }
            }
        }
    }
}

#[test]
fn payload_segmented_to_fit_the_path_mtu() {
    for (name, ps) in payload_cases() {
        let calc = Calculator::from_params(&ps).unwrap();
        let mut tx = keyed(&ps);
        for (iv, opts) in [(V::V4, false), (V::V6, true), (V::V6, false)] {
            let inner = inner_of(iv, opts);
            for upper in [Upper::Tcp, Upper::Udp] {
                for payload in [0, 1, 1024, 4096, 20000] {
                    for mtu in [1280, 1500] {
                        let ctx = format!("{name} {iv:?} {upper:?} payload {payload} mtu {mtu}");
                        let s = calc.segmented(inner, upper, payload, mtu).unwrap();
                        let data = noise(payload, 99);
                        let chunks: Vec<&[u8]> = if payload == 0 {
                            vec![&[]]
                        } else {
                            data.chunks(s.segment_payload).collect()
                        };
                        let mut wire = 0;
                        for c in &chunks {
                            let sealed = seal_with(&mut tx, &packet(iv, opts, upper, c));
                            assert!(sealed.len() <= mtu, "{ctx}");
                            wire += sealed.len();
                        }
                        // A segment one byte larger would not fit.
                        let big = seal_with(&mut tx, &packet(iv, opts, upper, &noise(s.segment_payload + 1, 5)));
                        assert!(big.len() > mtu, "{ctx}");
                        assert_eq!(s.packets, chunks.len(), "{ctx}");
                        assert_eq!(s.last_segment_payload, chunks.last().unwrap().len(), "{ctx}");
                        assert_eq!(s.wire_bytes, wire, "{ctx}");
                    }
                }
            }
        }
    }
}

/// The same bundle described by hand (as a model without keys would) gives the same figures
/// as the one read from keyed SAs.
#[test]
fn hand_made_shapes_match_keyed_ones() {
    let ps = [
        comp_params(M::Transport),
        des3_params(M::Transport),
        ah_params(M::Transport, IntegAlg::HmacSha1),
    ];
    let from_keys = Calculator::from_params(&ps).unwrap();
    let by_hand = Calculator::new(vec![
        SaShape::Comp {
            encap: Encap::Transport,
        },
        SaShape::Esp {
            encap: Encap::Transport,
            iv_len: 8,
            block_size: 8,
            icv_len: 0,
        },
        SaShape::Ah {
            encap: Encap::Transport,
            icv_len: 12,
        },
    ])
    .unwrap();
    assert_eq!(from_keys, by_hand);
}

#[test]
fn shapes_reject_bad_params() {
    let mut p = esp_params(M::Transport);
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[0; 15], 0));
    assert!(matches!(SaShape::from_params(&p), Err(OverheadError::Sa(_))));
    let mut p = esp_params(M::Tunnel(V::V4));
    p.tunnel = None;
    assert!(SaShape::from_params(&p).is_err());
}
