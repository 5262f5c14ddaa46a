//! Adversarial properties of ESP (RFC 4303) over every suite (the algorithm table of docs/config.md), both
//! modes and IPv4/IPv6 (transport v4 and v6; tunnel 4in4, 6in6, 4in6, 6in4): seal→open is
//! the identity; a replay is rejected (3.4.3); every truncation is rejected; a single-bit flip
//! is rejected or changes nothing the SA covers; arbitrary bytes never panic.
//! `PROPTEST_CASES` raises the case count (default 48 per property).
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, Error, IntegAlg, PacketBuf, SaParams};
use ipsec_esp::EspSa;
use proptest::prelude::*;

/// (cipher and key length, integrity, AEAD with key length and ICV bytes).
type Suite = (
    Option<(EncAlg, usize)>,
    Option<IntegAlg>,
    Option<(AeadAlg, usize, usize)>,
);

/// Every suite: CBC ciphers (AES 128/192/256) × every integrity algorithm (null+null is not
/// an SA), GCM 128/192/256 × ICV 8/12/16, ChaCha20-Poly1305.
fn suites() -> Vec<Suite> {
    let mut v = Vec::new();
    for (enc, klen) in [(EncAlg::Null, 0), (EncAlg::DesCbc, 8), (EncAlg::Des3Cbc, 24)]
        .into_iter()
        .chain([16, 24, 32].map(|k| (EncAlg::AesCbc, k)))
    {
        for integ in IntegAlg::ALL {
            if enc != EncAlg::Null || integ != IntegAlg::Null {
                v.push((Some((enc, klen)), Some(integ), None));
            }
        }
    }
    for k in [16, 24, 32] {
        for icv in [8, 12, 16] {
            v.push((None, None, Some((AeadAlg::AesGcm, k + 4, icv))));
        }
    }
    v.push((None, None, Some((AeadAlg::ChaCha20Poly1305, 36, 16))));
    v
}

/// (mode, inner IPv6?, outer IPv6?): transport v4/v6, tunnel 4in4, 6in6, 4in6, 6in4.
const MODES: [(Mode, bool, bool); 6] = [
    (Mode::Transport, false, false),
    (Mode::Transport, true, true),
    (Mode::Tunnel, false, false),
    (Mode::Tunnel, true, true),
    (Mode::Tunnel, false, true),
    (Mode::Tunnel, true, false),
];

fn params(suite: usize, mode: usize, esn: bool) -> (SaParams, bool) {
    let (enc, integ, aead) = suites()[suite];
    let mut p = SaParams::new(Proto::Esp, 0x4242);
    let key = |n: usize| (0..n).map(|i| (i * 13 + 1) as u8).collect::<Vec<u8>>();
    p.enc = enc.map(|(a, n)| Keyed::new(a, &key(n), 0));
    let klen = |a: IntegAlg| if a == IntegAlg::Null { 0 } else { a.digest_len() };
    p.integ = integ.map(|a| Keyed::new(a, &key(klen(a)), a.default_icv_len()));
    p.aead = aead.map(|(a, n, icv)| Keyed::new(a, &key(n), icv));
    let (m, _, outer6) = MODES[mode];
    p.mode = m;
    if m == Mode::Tunnel {
        p.tunnel = Some(if outer6 {
            Tunnel {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
            }
        } else {
            Tunnel {
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.2".parse().unwrap(),
            }
        });
    }
    p.esn = esn;
    let authenticated = aead.is_some() || integ != Some(IntegAlg::Null);
    (p, authenticated)
}

fn inner(v6: bool, payload: &[u8]) -> Vec<u8> {
    let l = 8 + payload.len();
    let mut udp = vec![0x30, 0x39, 0, 53, (l >> 8) as u8, l as u8, 0, 0];
    udp.extend_from_slice(payload);
    if v6 {
        let mut p = vec![0x60, 0, 0, 0, (l >> 8) as u8, l as u8, 17, 64];
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xa]);
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb]);
        p.extend_from_slice(&udp);
        p
    } else {
        let t = 20 + l;
        let mut p = vec![
            0x45,
            0,
            (t >> 8) as u8,
            t as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
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
        p.extend_from_slice(&udp);
        p
    }
}

fn run(sa: &mut EspSa, packet: &[u8], seal: bool) -> Result<Vec<u8>, Error> {
    let mut raw = vec![0u8; packet.len() + 1024];
    raw[256..256 + packet.len()].copy_from_slice(packet);
    let mut b = PacketBuf::new(&mut raw, 256, packet.len())?;
    if seal {
        sa.seal(&mut b)?;
    } else {
        sa.open(&mut b)?;
    }
    Ok(b.packet().to_vec())
}

fn case() -> impl Strategy<Value = (usize, usize, bool, Vec<u8>)> {
    (
        0..suites().len(),
        0..MODES.len(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
}

fn sas(suite: usize, mode: usize, esn: bool) -> (EspSa, EspSa, bool, bool) {
    let (p, auth) = params(suite, mode, esn);
    let inner6 = MODES[mode].1;
    let tx = EspSa::with_rng(&p, IvRng::from_seed([1; 32])).unwrap();
    let rx = EspSa::with_rng(&p, IvRng::from_seed([2; 32])).unwrap();
    (tx, rx, auth, inner6)
}

fn outer_header_len(sealed: &[u8]) -> usize {
    ipsec_core::ip::upper_split(sealed).unwrap().offset
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)))]

    #[test]
    fn seal_open_is_the_identity_and_a_replay_is_rejected((suite, mode, esn, payload) in case()) {
        let (mut tx, mut rx, _, v6) = sas(suite, mode, esn);
        let pkt = inner(v6, &payload);
        for _ in 0..2 {
            let sealed = run(&mut tx, &pkt, true).unwrap();
            prop_assert_eq!(run(&mut rx, &sealed, false).unwrap(), pkt.clone());
            prop_assert_eq!(run(&mut rx, &sealed, false), Err(Error::Replay));
        }
    }

    #[test]
    fn every_truncation_is_rejected((suite, mode, esn, payload) in case(), cut in any::<prop::sample::Index>()) {
        let (mut tx, mut rx, _, v6) = sas(suite, mode, esn);
        let sealed = run(&mut tx, &inner(v6, &payload), true).unwrap();
        let len = cut.index(sealed.len());
        prop_assert!(run(&mut rx, &sealed[..len], false).is_err(), "accepted {} of {} bytes", len, sealed.len());
    }

    #[test]
    fn a_bit_flip_is_rejected_or_changes_nothing_covered((suite, mode, esn, payload) in case(), bit in any::<prop::sample::Index>()) {
        let (mut tx, mut rx, auth, v6) = sas(suite, mode, esn);
        prop_assume!(auth);
        let pkt = inner(v6, &payload);
        let mut sealed = run(&mut tx, &pkt, true).unwrap();
        let bit = bit.index(sealed.len() * 8);
        let hlen = outer_header_len(&sealed);
        sealed[bit / 8] ^= 1 << (bit % 8);
        if let Ok(opened) = run(&mut rx, &sealed, false) {
            // ESP covers nothing of the outer IP header (RFC 4303 3.1): a flip there may be
            // accepted; everything from the ESP header on is covered.
            prop_assert!(bit / 8 < hlen, "flip of bit {} (ESP starts at byte {}) accepted", bit, hlen);
            if MODES[mode].0 == Mode::Tunnel {
                prop_assert_eq!(opened, pkt);
            } else {
                prop_assert_eq!(&opened[hlen..], &pkt[hlen..]);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic((suite, mode, esn, _p) in case(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (_, mut rx, _, _) = sas(suite, mode, esn);
        let _ = run(&mut rx, &bytes, false);
    }
}
