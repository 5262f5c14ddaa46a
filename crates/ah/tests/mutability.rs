//! RFC 4302 3.3.3.1: what routers may change in transit still verifies; any change to an
//! immutable bit is refused. Exhaustive bit-flip loops over whole sealed packets.

mod common;

use common::*;
use ipsec_ah::mutable_fields::zeroed_copy;
use ipsec_ah::MAX_ICV_HEADER;
use ipsec_core::ip::proto;
use ipsec_core::{Error, IntegAlg};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Mutable: still verifies.
    Accept,
    /// Immutable and only protected by the ICV.
    BadIcv,
    /// Immutable and structural (version, lengths, protocol numbers, SPI...): refused, with
    /// whatever error the structure check gives first.
    Refused,
    /// Neither checked nor asserted (type/length octets of mutable IPv4 options).
    Skip,
}

/// Flips every bit of `sealed` in turn and opens it with a fresh receiver.
fn flip_all(alg: IntegAlg, tunnel: Option<(&str, &str)>, sealed: &[u8], expect: impl Fn(usize, u8) -> Expect) {
    let mut counts = [0usize; 3];
    for i in 0..sealed.len() {
        for bit in 0..8 {
            let m = 1u8 << bit;
            let e = expect(i, m);
            if e == Expect::Skip {
                continue;
            }
            let mut p = sealed.to_vec();
            p[i] ^= m;
            let got = open(&mut sa(alg, tunnel), &p);
            match e {
                Expect::Accept => {
                    assert!(got.is_ok(), "{alg:?} byte {i} bit {m:#04x}: {:?}", got.err());
                    counts[0] += 1;
                }
                Expect::BadIcv => {
                    assert_eq!(got.err(), Some(Error::BadIcv), "{alg:?} byte {i} bit {m:#04x}");
                    counts[1] += 1;
                }
                Expect::Refused => {
                    assert!(got.is_err(), "{alg:?} byte {i} bit {m:#04x} accepted");
                    counts[2] += 1;
                }
                Expect::Skip => {}
            }
        }
    }
    assert!(counts[0] > 0 && counts[1] > 0, "{counts:?}");
}

/// NOP, Router Alert, Record Route (one slot), Timestamp (one slot): 20 bytes.
const V4_OPTS: [u8; 20] = [1, 0x94, 4, 0, 0, 0x07, 7, 4, 0, 0, 0, 0, 0x44, 8, 5, 0, 0, 0, 0, 0];

/// Mutable bits of an IPv4 header with `V4_OPTS` (or none) at `base`.
fn v4_header(i: usize, m: u8, opts: bool) -> Option<Expect> {
    Some(match i {
        0 | 2 | 3 | 9 => Expect::Refused,     // version/IHL, total length, protocol
        1 | 8 | 10 | 11 => Expect::Accept,    // TOS (DSCP, ECN), TTL, checksum
        6 if m & 0xc0 != 0 => Expect::Accept, // reserved flag, DF
        6 | 7 => Expect::Refused,             // MF / fragment offset: a fragment (3.4.1)
        20..=39 if opts => match i - 20 {
            0..=2 => Expect::Refused,        // NOP, Router Alert type and length: structure
            3 | 4 => Expect::BadIcv,         // Router Alert value: immutable
            5 | 6 | 12 | 13 => Expect::Skip, // RR / TS type and length octets
            _ => Expect::Accept,             // RR / TS pointer and data: zeroed
        },
        _ => return None,
    })
}

/// AH's own fields (the sealed packets all carry sequence number 1).
fn ah_fields(i: usize, m: u8) -> Expect {
    match i {
        1 | 4..=7 => Expect::Refused,    // Payload Len, SPI
        11 if m == 1 => Expect::Refused, // sequence number 0
        _ => Expect::BadIcv,             // Next Header, reserved, seq, ICV, ICV padding
    }
}

#[test]
fn ipv4_transport_with_options() {
    for alg in ALGS {
        let p = udp4(&V4_OPTS, b"payload bytes");
        let s = seal(&mut sa(alg, None), &p).unwrap();
        let icv = alg.default_icv_len();
        flip_all(alg, None, &s, |i, m| {
            v4_header(i, m, true).unwrap_or_else(|| {
                if (40..52 + icv).contains(&i) {
                    ah_fields(i - 40, m)
                } else {
                    Expect::BadIcv
                }
            })
        });
    }
}

/// HBH: Router Alert (immutable), 0x3e (may change); DST before RH: 0x1e (immutable), 0x3d
/// (may change); RH type 0 with both segments left; DST after RH (inside AH): 0x3f (may
/// change, but protected as payload).
fn v6_ext() -> Vec<(u8, Vec<u8>)> {
    let hbh = vec![0, 1, 5, 2, 0, 0, 0x3e, 2, 0xaa, 0xbb, 1, 4, 0, 0, 0, 0];
    let dst = vec![0, 1, 0x1e, 2, 1, 2, 0x3d, 3, 3, 4, 5, 1, 1, 0, 0, 0];
    let mut rt = vec![0, 4, 0, 2, 0, 0, 0, 0];
    rt.extend_from_slice(&[0x11; 16]);
    rt.extend_from_slice(&[0x22; 16]);
    let dst2 = vec![0, 0, 0x3f, 2, 0xcc, 0xdd, 1, 0];
    vec![
        (proto::HOPOPTS, hbh),
        (proto::DSTOPTS, dst),
        (proto::ROUTING, rt),
        (proto::DSTOPTS, dst2),
    ]
}

fn v6_header(i: usize, m: u8) -> Option<Expect> {
    Some(match i {
        0 if m & 0xf0 != 0 => Expect::Refused, // version
        0..=3 | 7 => Expect::Accept,           // traffic class, flow label, hop limit
        4..=6 => Expect::Refused,              // payload length, next header
        _ => return None,
    })
}

#[test]
fn ipv6_transport_with_extension_headers() {
    for alg in ALGS {
        let p = udp6(&v6_ext(), b"payload bytes");
        let s = seal(&mut sa(alg, None), &p).unwrap();
        let icv = alg.default_icv_len();
        let ah = 40 + 16 + 16 + 40; // AH goes after the routing header
        let ah_len = ipsec_ah::wire::header_len(icv, true);
        flip_all(alg, None, &s, |i, m| {
            if let Some(e) = v6_header(i, m) {
                return e;
            }
            match i {
                40 | 41 | 56 | 57 | 72 | 73 => Expect::Refused, // ext Next Header / length
                42 | 43 | 46 | 47 | 50 | 51 => Expect::Refused, // HBH option types / lengths
                58 | 59 | 62 | 63 | 67 | 68 | 70 | 71 => Expect::Refused, // DST option types / lengths, Pad1
                48 | 49 => Expect::Accept,                      // HBH 0x3e data
                64..=66 => Expect::Accept,                      // DST 0x3d data
                74 | 75 => Expect::Refused,                     // routing type, segments left
                _ if (ah..ah + ah_len).contains(&i) => ah_fields(i - ah, m),
                _ => Expect::BadIcv,
            }
        });
    }
}

#[test]
fn tunnel_outer_headers() {
    let alg = IntegAlg::HmacSha256;
    let icv = alg.default_icv_len();
    for inner in [udp4(&V4_OPTS, b"inner"), udp6(&v6_ext(), b"inner")] {
        // Outer IPv4: the inner packet is payload, every byte of it immutable.
        let t = Some(("203.0.113.1", "203.0.113.2"));
        let s = seal(&mut sa(alg, t), &inner).unwrap();
        flip_all(alg, t, &s, |i, m| {
            v4_header(i, m, false).unwrap_or_else(|| {
                if (20..32 + icv).contains(&i) {
                    ah_fields(i - 20, m)
                } else {
                    Expect::BadIcv
                }
            })
        });
        let t = Some(("2001:db8:1::1", "2001:db8:2::2"));
        let s = seal(&mut sa(alg, t), &inner).unwrap();
        let ah_len = ipsec_ah::wire::header_len(icv, true);
        flip_all(alg, t, &s, |i, m| {
            v6_header(i, m).unwrap_or_else(|| {
                if (40..40 + ah_len).contains(&i) {
                    ah_fields(i - 40, m)
                } else {
                    Expect::BadIcv
                }
            })
        });
    }
}

/// The fragment fields do not enter the ICV either (section 3.3.3.1.1.1); a packet with them
/// set is refused as a fragment before the ICV is checked.
#[test]
fn ipv4_flags_and_offset_are_zeroed_in_the_icv_input() {
    let p = udp4(&V4_OPTS, b"x");
    let hl = 40;
    let mut a = [0u8; MAX_ICV_HEADER];
    let want = zeroed_copy(&p[..hl], &mut a).unwrap().to_vec();
    for v in [0x2000u16, 0x1fff, 0xffff, 0x0001] {
        let mut q = p.clone();
        q[6..8].copy_from_slice(&v.to_be_bytes());
        let mut b = [0u8; MAX_ICV_HEADER];
        assert_eq!(zeroed_copy(&q[..hl], &mut b).unwrap(), &want[..]);
    }
}

/// A routing header on its way: each hop swaps the destination in; the receiver verifies
/// whatever number of segments are done, and at every intermediate stage too.
#[test]
fn ipv6_routing_header_in_transit() {
    let alg = IntegAlg::HmacSha1;
    let p = udp6(&v6_ext(), b"routed");
    let s = seal(&mut sa(alg, None), &p).unwrap();
    let rh = 72;
    let mut q = s.clone();
    for _ in 0..2 {
        let n = q[rh + 1] as usize / 2;
        let k = n - q[rh + 3] as usize;
        let a = rh + 8 + 16 * k;
        let mut dst = [0u8; 16];
        dst.copy_from_slice(&q[24..40]);
        let next: Vec<u8> = q[a..a + 16].to_vec();
        q[24..40].copy_from_slice(&next);
        q[a..a + 16].copy_from_slice(&dst);
        q[rh + 3] -= 1;
        q[7] -= 1;
        assert!(open(&mut sa(alg, None), &q).is_ok(), "segments left {}", q[rh + 3]);
    }
    // Tampering with an address in the list is caught.
    q[rh + 8] ^= 1;
    assert_eq!(open(&mut sa(alg, None), &q).err(), Some(Error::BadIcv));
}
