//! Property-style tests: truncated, mutated and random packets never panic, a failed open
//! never changes the buffer (checked inside `common::open`), and any packet seal accepts
//! opens back to itself.

mod common;

use common::*;
use ipsec_core::ip::proto;
use ipsec_core::IntegAlg;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// `ip::fix_length`, only where it cannot panic: core's panics on an IPv4 header whose IHL
/// runs past the buffer (reported to the core owner).
fn fix_length(p: &mut [u8]) -> Result<(), ipsec_core::Error> {
    let ok = match p.first().map(|b| b >> 4) {
        Some(4) => p.len() >= 20 && ((p[0] & 15) as usize) * 4 <= p.len(),
        Some(6) => p.len() >= 40,
        _ => false,
    };
    if ok {
        ipsec_core::ip::fix_length(p)
    } else {
        Err(ipsec_core::Error::MalformedIp)
    }
}

const T4: Option<(&str, &str)> = Some(("203.0.113.1", "203.0.113.2"));
const T6: Option<(&str, &str)> = Some(("2001:db8:1::1", "2001:db8:2::2"));

/// Random IPv4 options: a mix of known and random option types, well-formed or not.
fn random_v4_options(r: &mut Rng) -> Vec<u8> {
    let mut o = Vec::new();
    let want = 4 * r.below(11);
    while o.len() < want {
        let room = want - o.len();
        let t = [0u8, 1, 0x07, 0x44, 0x83, 0x89, 0x94, 0x82, r.next() as u8][r.below(9)];
        if t <= 1 || room < 3 {
            o.push(t);
            continue;
        }
        let len = 3 + r.below(room - 2);
        o.push(t);
        o.push(if r.below(10) == 0 { r.next() as u8 } else { len as u8 });
        o.push(4 + 4 * r.below(3) as u8);
        o.extend(r.bytes(len - 3));
    }
    o
}

/// A random chain of IPv6 extension headers (HBH, DST, routing types 0/2/4, sometimes junk).
fn random_v6_ext(r: &mut Rng) -> Vec<(u8, Vec<u8>)> {
    let mut ext = Vec::new();
    for _ in 0..r.below(5) {
        let kind = [proto::HOPOPTS, proto::DSTOPTS, proto::ROUTING, proto::FRAGMENT][r.below(4)];
        let units = if kind == proto::FRAGMENT { 0 } else { r.below(4) };
        let mut h = vec![0u8; 8 * (units + 1)];
        h[1] = units as u8;
        match kind {
            proto::ROUTING => {
                h[1] = 2 * (units / 2) as u8;
                h.truncate(8 * (h[1] as usize + 1));
                h[2] = [0u8, 2, 4][r.below(3)];
                h[3] = r.below(h[1] as usize / 2 + 2) as u8;
                for b in h[8..].iter_mut() {
                    *b = r.next() as u8;
                }
            }
            proto::FRAGMENT => {}
            _ => {
                // Options: PadN / random types with lengths that may or may not fit.
                let mut i = 2;
                while i < h.len() {
                    let t = if r.below(3) == 0 { 0 } else { r.next() as u8 };
                    h[i] = t;
                    if t != 0 && i + 1 < h.len() {
                        let l = r.below(h.len() - i);
                        h[i + 1] = l as u8;
                        i += 2 + l;
                    } else {
                        i += 1;
                    }
                }
            }
        }
        ext.push((kind, h));
    }
    ext
}

#[test]
fn whatever_seal_accepts_opens_back_to_itself() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut sealed_ok = 0;
    for round in 0..3000 {
        let alg = ALGS[round % ALGS.len()];
        let tunnel = [None, T4, T6][r.below(3)];
        let len = r.below(64);
        let payload = r.bytes(len);
        let p = if r.below(2) == 0 {
            udp4(&random_v4_options(&mut r), &payload)
        } else {
            udp6(&random_v6_ext(&mut r), &payload)
        };
        let mut tx = sa(alg, tunnel);
        let Ok(s) = seal(&mut tx, &p) else { continue };
        sealed_ok += 1;
        let (_, out) = open(&mut sa(alg, tunnel), &s).unwrap_or_else(|e| panic!("{e:?}: {}", hex::encode(&p)));
        assert_eq!(out, p);
    }
    assert!(sealed_ok > 1000, "{sealed_ok}");
}

#[test]
fn truncated_and_mutated_packets_never_panic() {
    let mut r = Rng(0x0dd_ba11_cafe_f00d);
    for alg in [IntegAlg::HmacSha1, IntegAlg::HmacSha384] {
        for tunnel in [None, T4, T6] {
            let inputs = [
                udp4(
                    &[1, 0x94, 4, 0, 0, 0x07, 7, 4, 0, 0, 0, 0, 0x83, 7, 4, 1, 2, 3, 4, 0],
                    b"abc",
                ),
                udp6(&random_v6_ext(&mut Rng(7)), b"abc"),
                udp6(&[], b""),
            ];
            for p in inputs {
                let Ok(s) = seal(&mut sa(alg, tunnel), &p) else {
                    continue;
                };
                // Every truncation, with the IP length left alone and with it fixed up.
                for n in 0..s.len() {
                    let mut t = s[..n].to_vec();
                    assert!(open(&mut sa(alg, tunnel), &t).is_err());
                    if fix_length(&mut t).is_ok() {
                        assert!(open(&mut sa(alg, tunnel), &t).is_err(), "truncated to {n}");
                    }
                }
                // Random mutations.
                for _ in 0..1000 {
                    let mut m = s.clone();
                    for _ in 0..1 + r.below(4) {
                        let i = r.below(m.len());
                        m[i] = r.next() as u8;
                    }
                    let _ = open(&mut sa(alg, tunnel), &m);
                }
            }
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut r = Rng(0xfeed_face_dead_beef);
    for _ in 0..10000 {
        let n = r.below(160);
        let mut p = r.bytes(n);
        if let Some(b) = p.first_mut() {
            *b = (*b & 0x0f) | [0x40, 0x60][r.below(2)];
        }
        if r.below(2) == 0 {
            let _ = fix_length(&mut p);
            // Point the protocol at AH half of the time.
            if p.len() > 9 && p[0] >> 4 == 4 {
                p[9] = proto::AH;
                let _ = fix_length(&mut p);
            } else if p.len() > 6 {
                p[6] = [proto::AH, proto::HOPOPTS, proto::ROUTING, proto::DSTOPTS][r.below(4)];
            }
        }
        for tunnel in [None, T4] {
            let _ = open(&mut sa(IntegAlg::HmacSha1, tunnel), &p);
            let _ = seal(&mut sa(IntegAlg::HmacSha1, tunnel), &p);
        }
    }
}
