//! MSS clamping against packets scapy made (gen_scapy.py, scapy.txt): the clamped packet must
//! be byte for byte the one scapy builds with the lowered MSS and computes the checksum of.

use super::*;

struct Case {
    name: String,
    clamp: MssClamp,
    input: Vec<u8>,
    expected: Vec<u8>,
}

fn cases() -> Vec<Case> {
    include_str!("scapy.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "bad line {l}");
            let v4: u16 = f[1].parse().unwrap();
            let v6: u16 = f[2].parse().unwrap();
            Case {
                name: f[0].to_string(),
                clamp: MssClamp { v4, v6 },
                input: hex::decode(f[3]).unwrap(),
                expected: hex::decode(f[4]).unwrap(),
            }
        })
        .collect()
}

/// The TCP checksum of an IPv4 or IPv6 packet computed whole (pseudo-header and segment):
/// 0 when it verifies.
fn tcp_verify(p: &[u8]) -> u16 {
    use ipsec_core::ip::{fold, ones_sum};
    let (pseudo, seg) = if p[0] >> 4 == 4 {
        let ihl = usize::from(p[0] & 15) * 4;
        let seg = &p[ihl..];
        let mut ps = Vec::new();
        ps.extend_from_slice(&p[12..20]);
        ps.extend_from_slice(&[0, 6]);
        ps.extend_from_slice(&(seg.len() as u16).to_be_bytes());
        (ps, seg)
    } else {
        let seg = &p[40..];
        let mut ps = Vec::new();
        ps.extend_from_slice(&p[8..40]);
        ps.extend_from_slice(&(seg.len() as u32).to_be_bytes());
        ps.extend_from_slice(&[0, 0, 0, 6]);
        (ps, seg)
    };
    !fold(ones_sum(ones_sum(0, &pseudo), seg))
}

#[test]
fn the_limits_are_the_mtu_less_the_headers() {
    let c = MssClamp::auto(1400);
    assert_eq!(c.limits(), (1360, 1340));
    assert!(c.is_on());
    assert!(!MssClamp::OFF.is_on());
    assert!(!MssClamp::fixed(0).is_on());
    assert_eq!(MssClamp::fixed(1200).limits(), (1200, 1200));
    // A tiny MTU never gives 0 (which would mean off) or wraps.
    assert_eq!(MssClamp::auto(40).limits(), (1, 1));
}

#[test]
fn scapy_syns_are_clamped_as_scapy_builds_them() {
    let cases = cases();
    assert!(cases.len() >= 15);
    let mut lowered = 0;
    for c in &cases {
        let mut p = c.input.clone();
        let r = c.clamp.apply(&mut p);
        assert_eq!(hex::encode(&p), hex::encode(&c.expected), "{}", c.name);
        assert_eq!(r == Clamped::No, c.input == c.expected, "{}: {r:?}", c.name);
        if c.input != c.expected {
            lowered += 1;
            assert_eq!(tcp_verify(&p), 0, "{}: checksum", c.name);
        }
        // Applied again: nothing more to do.
        assert_eq!(c.clamp.apply(&mut p), Clamped::No, "{}", c.name);
    }
    assert!(lowered >= 8, "only {lowered} cases clamp");
}

#[test]
fn off_leaves_every_packet_alone() {
    for c in cases() {
        let mut p = c.input.clone();
        assert_eq!(MssClamp::OFF.apply(&mut p), Clamped::No);
        assert_eq!(p, c.input, "{}", c.name);
    }
}

#[test]
fn cut_or_corrupted_packets_never_panic() {
    for c in cases() {
        // Every truncation, with the IP length fields left claiming more.
        for n in 0..c.input.len() {
            let mut p = c.input[..n].to_vec();
            let _ = c.clamp.apply(&mut p);
        }
        // Every byte of the headers set to every interesting value.
        for i in 0..c.input.len().min(80) {
            for v in [0u8, 1, 2, 3, 4, 0x0f, 0x45, 0x60, 0xf0, 0xff] {
                let mut p = c.input.clone();
                p[i] = v;
                let _ = c.clamp.apply(&mut p);
            }
        }
    }
}

#[test]
fn incremental_checksum_matches_a_full_one() {
    // RFC 1624's example: a word changing from 0x5555 to 0x3285 in data summing to 0xcd7a.
    let data = [0x00u8, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
    let hc = ipsec_core::ip::checksum(&data);
    let mut d2 = data;
    d2[2..4].copy_from_slice(&[0x12, 0x34]);
    assert_eq!(update_checksum(hc, 0xf203, 0x1234), ipsec_core::ip::checksum(&d2));
    // The -0 case of RFC 1624 section 3: a sum of all ones.
    let data = [0xffu8, 0xff, 0x00, 0x00];
    let hc = ipsec_core::ip::checksum(&data);
    let mut d2 = data;
    d2[2..4].copy_from_slice(&[0x00, 0x01]);
    assert_eq!(update_checksum(hc, 0, 1), ipsec_core::ip::checksum(&d2));
}
