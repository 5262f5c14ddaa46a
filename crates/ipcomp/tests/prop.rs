//! Adversarial properties of IPComp (RFC 3173; no integrity): seal→open is the identity for
//! every algorithm and mode; bit flips and truncations of a compressed packet never panic and
//! never produce more than the SA's bound; decompression bombs (10 MB of output from one
//! packet) are refused quickly by the configured MTU bound.
use ipsec_core::{Mode, PacketBuf, Tunnel};
use ipsec_ipcomp::{Algorithm, Compressor, Error, IpcompConfig, IpcompSa};
use proptest::prelude::*;
use std::time::{Duration, Instant};

const ALGS: [Algorithm; 3] = [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf];

fn sa(alg: Algorithm, tunnel: bool, mtu: usize) -> IpcompSa {
    let mut c = IpcompConfig::new(alg);
    if tunnel {
        c.mode = Mode::Tunnel;
        c.tunnel = Some(Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        });
    }
    c.mtu = mtu;
    IpcompSa::new(c).unwrap()
}

fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let t = 20 + payload.len();
    let mut p = vec![
        0x45,
        0,
        (t >> 8) as u8,
        t as u8,
        0,
        1,
        0,
        0,
        64,
        proto,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    let c = ipsec_core::ip::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn run(sa: &mut IpcompSa, packet: &[u8], seal: bool) -> Result<Vec<u8>, Error> {
    let mut raw = vec![0u8; packet.len() + 70_000];
    raw[256..256 + packet.len()].copy_from_slice(packet);
    let mut b = PacketBuf::new(&mut raw, 256, packet.len())?;
    if seal {
        sa.seal(&mut b)?;
    } else {
        sa.open(&mut b)?;
    }
    Ok(b.packet().to_vec())
}

/// Compressible UDP-ish payloads: repeated words.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop::sample::select(vec![&b"alpha "[..], b"beta ", b"gamma, ", b"\0\0\0\0"]),
        20..120,
    )
    .prop_map(|w| w.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)))]

    #[test]
    fn seal_open_is_the_identity(alg in 0..3usize, tunnel in any::<bool>(), data in payload()) {
        let pkt = ipv4(17, &data);
        let sealed = run(&mut sa(ALGS[alg], tunnel, 65535), &pkt, true).unwrap();
        prop_assert_eq!(run(&mut sa(ALGS[alg], tunnel, 65535), &sealed, false).unwrap(), pkt);
    }

    #[test]
    fn flips_and_truncations_stay_bounded(alg in 0..3usize, tunnel in any::<bool>(), data in payload(),
                                          bit in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let pkt = ipv4(17, &data);
        let mut sealed = run(&mut sa(ALGS[alg], tunnel, 65535), &pkt, true).unwrap();
        let bit = bit.index(sealed.len() * 8);
        sealed[bit / 8] ^= 1 << (bit % 8);
        let mtu = 1500;
        if let Ok(out) = run(&mut sa(ALGS[alg], tunnel, mtu), &sealed, false) {
            prop_assert!(out.len() <= mtu.max(sealed.len()));
        }
        let len = cut.index(sealed.len());
        if let Ok(out) = run(&mut sa(ALGS[alg], tunnel, mtu), &sealed[..len], false) {
            prop_assert!(out.len() <= mtu.max(len));
        }
    }
}

/// An LZF stream of `n` zero bytes: one literal, then copies of 264 at offset 1.
fn lzf_zeros(n: usize) -> Vec<u8> {
    let mut v = vec![0, 0];
    let mut left = n - 1;
    while left >= 264 {
        v.extend_from_slice(&[0xe0, 255, 0]);
        left -= 264;
    }
    v
}

#[test]
fn a_10_mb_bomb_is_refused_quickly_by_the_bound() {
    let ten_mb = 10 << 20;
    let deflate = miniz_oxide::deflate::compress_to_vec(&vec![0u8; ten_mb], 9);
    let lzf = lzf_zeros(ten_mb);
    for (alg, stream) in [(Algorithm::Deflate, &deflate), (Algorithm::Lzf, &lzf)] {
        // The decompressor alone: the output slice is the bound, whatever the stream says.
        let mut out = vec![0u8; 1500];
        let start = Instant::now();
        let r = Compressor::new(alg).decompress(stream, &mut out);
        assert_eq!(r, Err(Error::DecompressedTooBig), "{}", alg.name());
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{} took {:?}",
            alg.name(),
            start.elapsed()
        );
    }
    // In one packet (as much of the stream as an IP packet holds): the SA's mtu stops it.
    for (alg, stream) in [
        (Algorithm::Deflate, deflate.clone()),
        (Algorithm::Lzf, lzf[..60_000].to_vec()),
    ] {
        let mut body = vec![17, 0];
        body.extend_from_slice(&alg.cpi().to_be_bytes());
        body.extend_from_slice(&stream);
        let pkt = ipv4(108, &body);
        assert_eq!(
            run(&mut sa(alg, false, 1500), &pkt, false),
            Err(Error::DecompressedTooBig),
            "{}",
            alg.name()
        );
    }
    // LZS: our own compressor's output of 60 000 zero bytes, opened under a 1500-byte mtu.
    let mut lzs = vec![0u8; 70_000];
    let n = Compressor::new(Algorithm::Lzs)
        .compress(&[0u8; 60_000], &mut lzs)
        .unwrap();
    let mut body = vec![17, 0];
    body.extend_from_slice(&Algorithm::Lzs.cpi().to_be_bytes());
    body.extend_from_slice(&lzs[..n]);
    assert_eq!(
        run(&mut sa(Algorithm::Lzs, false, 1500), &ipv4(108, &body), false),
        Err(Error::DecompressedTooBig)
    );
}
