//! Adversarial properties of AH (RFC 4302) over every HMAC, both modes and IPv4/IPv6
//! (transport v4 and v6; tunnel 4in4, 6in6, 4in6, 6in4), with and without ESN: seal→open is
//! the identity; a replay is rejected (3.4.3); every truncation is rejected; a single-bit flip
//! is rejected unless it falls in a field AH does not cover, and then the opened packet
//! differs from the original in that field only; arbitrary bytes never panic.
//!
//! The fields AH does not cover (RFC 4302 3.3.3.1, the mutable fields zeroed for the ICV) of
//! the outermost header, which are the only ones a flip may change unnoticed:
//! - IPv4: TOS/DSCP+ECN (byte 1), flags and fragment offset (bytes 6–7; a flip that makes
//!   the packet a fragment is refused, RFC 4302 3.4.1), TTL (byte 8), header checksum
//!   (bytes 10–11);
//! - IPv6: traffic class and flow label (the 28 bits after the version nibble, bytes 0–3),
//!   hop limit (byte 7).
//!
//! `PROPTEST_CASES` raises the case count (default 64 per property).
use ipsec_ah::AhSa;
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{Error, IntegAlg, PacketBuf, SaParams};
use proptest::prelude::*;

const ALGS: [IntegAlg; 5] = [
    IntegAlg::HmacMd5,
    IntegAlg::HmacSha1,
    IntegAlg::HmacSha256,
    IntegAlg::HmacSha384,
    IntegAlg::HmacSha512,
];

/// (mode, inner IPv6?, outer IPv6?).
const MODES: [(Mode, bool, bool); 6] = [
    (Mode::Transport, false, false),
    (Mode::Transport, true, true),
    (Mode::Tunnel, false, false),
    (Mode::Tunnel, true, true),
    (Mode::Tunnel, false, true),
    (Mode::Tunnel, true, false),
];

fn params(alg: usize, mode: usize, esn: bool) -> SaParams {
    let a = ALGS[alg];
    let mut p = SaParams::new(Proto::Ah, 0x5151);
    let key: Vec<u8> = (0..a.digest_len()).map(|i| (i * 7 + 3) as u8).collect();
    p.integ = Some(Keyed::new(a, &key, a.default_icv_len()));
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
    p
}

fn inner(v6: bool, payload: &[u8]) -> Vec<u8> {
    let l = 8 + payload.len();
    let mut udp = vec![0x30, 0x39, 0, 53, (l >> 8) as u8, l as u8, 0, 0];
    udp.extend_from_slice(payload);
    let mut p = if v6 {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
        p.extend_from_slice(&"2001:db8::a".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"2001:db8::b".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p
    } else {
        let mut p = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        p
    };
    p.extend_from_slice(&udp);
    ipsec_core::ip::fix_length(&mut p).unwrap();
    p
}

fn run(sa: &mut AhSa, packet: &[u8], seal: bool) -> Result<Vec<u8>, Error> {
    let mut raw = vec![0u8; packet.len() + 512];
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
        0..ALGS.len(),
        0..MODES.len(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
}

fn sas(alg: usize, mode: usize, esn: bool) -> (AhSa, AhSa, bool) {
    let p = params(alg, mode, esn);
    (AhSa::new(&p).unwrap(), AhSa::new(&p).unwrap(), MODES[mode].1)
}

/// Whether bit `bit` of an IPv4 or IPv6 header (the packet's first header) is in a field AH
/// does not cover.
fn uncovered(v6: bool, bit: usize) -> bool {
    let byte = bit / 8;
    if v6 {
        (4..32).contains(&bit) || byte == 7
    } else {
        matches!(byte, 1 | 6 | 7 | 8 | 10 | 11)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64)))]

    #[test]
    fn seal_open_is_the_identity_and_a_replay_is_rejected((alg, mode, esn, payload) in case()) {
        let (mut tx, mut rx, v6) = sas(alg, mode, esn);
        let pkt = inner(v6, &payload);
        for _ in 0..2 {
            let sealed = run(&mut tx, &pkt, true).unwrap();
            prop_assert_eq!(run(&mut rx, &sealed, false).unwrap(), pkt.clone());
            prop_assert_eq!(run(&mut rx, &sealed, false), Err(Error::Replay));
        }
    }

    #[test]
    fn every_truncation_is_rejected((alg, mode, esn, payload) in case(), cut in any::<prop::sample::Index>()) {
        let (mut tx, mut rx, v6) = sas(alg, mode, esn);
        let sealed = run(&mut tx, &inner(v6, &payload), true).unwrap();
        let len = cut.index(sealed.len());
        prop_assert!(run(&mut rx, &sealed[..len], false).is_err(), "accepted {} of {} bytes", len, sealed.len());
    }

    #[test]
    fn a_bit_flip_is_rejected_or_only_changes_an_uncovered_field((alg, mode, esn, payload) in case(), bit in any::<prop::sample::Index>()) {
        let (mut tx, mut rx, v6) = sas(alg, mode, esn);
        let pkt = inner(v6, &payload);
        let mut sealed = run(&mut tx, &pkt, true).unwrap();
        let outer6 = MODES[mode].2;
        let bit = bit.index(sealed.len() * 8);
        sealed[bit / 8] ^= 1 << (7 - bit % 8);
        if let Ok(opened) = run(&mut rx, &sealed, false) {
            prop_assert!(uncovered(outer6, bit), "flip of covered bit {} accepted (IPv6 outer: {})", bit, outer6);
            if MODES[mode].0 == Mode::Tunnel {
                prop_assert_eq!(opened, pkt);
            } else {
                // Transport mode keeps the header: only the flipped byte may differ (and the
                // IPv4 checksum, which opening recomputes).
                prop_assert_eq!(opened.len(), pkt.len());
                for (i, (a, b)) in opened.iter().zip(&pkt).enumerate() {
                    let allowed = i == bit / 8 || (!v6 && (i == 10 || i == 11));
                    prop_assert!(a == b || allowed, "byte {} changed by a flip of bit {}", i, bit);
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic((alg, mode, esn, _p) in case(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (_, mut rx, _) = sas(alg, mode, esn);
        let _ = run(&mut rx, &bytes, false);
    }
}
