//! The index against the plain first-match scan ([`Spd::lookup_linear`]), over random policy
//! sets and packets (seeded, so a failure reproduces), and a few hand-written orders.

use super::*;
use alloc::vec;
use core::net::{Ipv4Addr, Ipv6Addr};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

fn v4(s: &str) -> IpAddr {
    IpAddr::V4(s.parse::<Ipv4Addr>().unwrap())
}

fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

fn pfx(s: &str) -> Option<Prefix> {
    Some(s.parse().unwrap())
}

fn pol(dir: Direction, src: Option<Prefix>, dst: Option<Prefix>, action: Action) -> Policy {
    Policy {
        dir,
        selector: Selector {
            src,
            dst,
            ..Selector::default()
        },
        action,
    }
}

fn flow(src: IpAddr, dst: IpAddr, proto: u8, sp: Option<u16>, dp: Option<u16>) -> Flow {
    Flow {
        src,
        dst,
        proto,
        src_port: sp,
        dst_port: dp,
    }
}

fn at(spd: &Spd, dir: Direction, f: &Flow) -> Option<usize> {
    let got = spd.lookup(dir, f).map(|(i, _)| i);
    assert_eq!(got, spd.lookup_linear(dir, f).map(|(i, _)| i), "{f:?} {dir}");
    got
}

struct Gen(ChaCha8Rng);

impl Gen {
    fn below(&mut self, n: u32) -> u32 {
        self.0.next_u32() % n
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u32) as usize]
    }

    /// An address from a small pool, so that prefixes overlap often.
    fn addr(&mut self, v6: bool) -> IpAddr {
        let (a, b) = (self.below(4) as u8, self.below(4) as u8);
        if v6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, a as u16, 0, 0, 0, 0, b as u16))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 0, a, b))
        }
    }

    fn prefix(&mut self) -> Option<Prefix> {
        match self.below(5) {
            0 => None,
            1 | 2 => Prefix::new(self.addr(false), self.pick(&[0, 8, 16, 24, 30, 32])),
            _ => Prefix::new(self.addr(true), self.pick(&[0, 32, 48, 64, 126, 128])),
        }
    }

    fn ports(&mut self) -> PortRange {
        match self.below(4) {
            0 | 1 => PortRange::ANY,
            2 => PortRange::single(self.below(4) as u16),
            _ => {
                let lo = self.below(4) as u16;
                PortRange {
                    lo,
                    hi: lo + self.below(3) as u16,
                }
            }
        }
    }

    fn policy(&mut self) -> Policy {
        Policy {
            dir: self.pick(&[Direction::In, Direction::Out]),
            selector: Selector {
                src: self.prefix(),
                dst: self.prefix(),
                proto: self.pick(&[None, None, Some(6), Some(17), Some(1)]),
                src_ports: self.ports(),
                dst_ports: self.ports(),
            },
            action: match self.below(3) {
                0 => Action::Bypass,
                1 => Action::Discard,
                _ => Action::Protect(vec![SaId(self.below(8))]),
            },
        }
    }

    fn port(&mut self) -> Option<u16> {
        (self.below(5) != 0).then(|| self.below(6) as u16)
    }

    fn flow(&mut self) -> Flow {
        let v6 = self.below(2) == 0;
        // Now and then the families differ: `Flow` is public, and the scan answers for it too.
        let dst_v6 = if self.below(10) == 0 { !v6 } else { v6 };
        Flow {
            src: self.addr(v6),
            dst: self.addr(dst_v6),
            proto: self.pick(&[6, 17, 1, 50]),
            src_port: self.port(),
            dst_port: self.port(),
        }
    }
}

/// Every direction's answer for `n` random packets agrees with the scan.
fn agree(spd: &Spd, g: &mut Gen, n: usize) {
    for _ in 0..n {
        let f = g.flow();
        for dir in [Direction::In, Direction::Out] {
            at(spd, dir, &f);
        }
    }
}

#[test]
fn random_sets_push_remove_readd_agree_with_the_scan() {
    for seed in 0..64u64 {
        let mut g = Gen(ChaCha8Rng::seed_from_u64(seed));
        let mut spd = Spd::new();
        let n = 1 + g.below(60) as usize;
        for _ in 0..n {
            spd.push(g.policy());
        }
        agree(&spd, &mut g, 200);
        let mut removed = Vec::new();
        for _ in 0..40 {
            match g.below(3) {
                0 if !spd.policies().is_empty() => {
                    let i = g.below(spd.policies().len() as u32) as usize;
                    let before = spd.policies().to_vec();
                    let p = spd.remove(i).unwrap();
                    assert_eq!(p, before[i]);
                    assert_eq!(spd.policies(), [&before[..i], &before[i + 1..]].concat().as_slice());
                    removed.push(p);
                }
                1 if !removed.is_empty() => {
                    let k = g.below(removed.len() as u32) as usize;
                    spd.push(removed.swap_remove(k));
                }
                _ => spd.push(g.policy()),
            }
            agree(&spd, &mut g, 50);
        }
        // Down to nothing, checking on the way, then built again from the same policies.
        let all = spd.policies().to_vec();
        while !spd.policies().is_empty() {
            let i = g.below(spd.policies().len() as u32) as usize;
            spd.remove(i).unwrap();
            agree(&spd, &mut g, 10);
        }
        assert_eq!(spd.shapes(Direction::In) + spd.shapes(Direction::Out), 0);
        assert!(spd.remove(0).is_none());
        for p in all {
            spd.push(p);
        }
        agree(&spd, &mut g, 100);
    }
}

/// `Spd::insert` anywhere and `Spd::remove_where` of several at once (what an IKE child's
/// install, rekey and delete do) keep the list as a plain `Vec` model has it and the index
/// agreeing with the scan, policies of every shape mixed, in both directions.
#[test]
fn random_bulk_inserts_and_removals_agree_with_a_model_and_the_scan() {
    for seed in 0..64u64 {
        let mut g = Gen(ChaCha8Rng::seed_from_u64(0x5eed_0000 + seed));
        let mut spd = Spd::new();
        let mut model: Vec<Policy> = Vec::new();
        for _ in 0..40 {
            match g.below(4) {
                0 | 1 => {
                    // anywhere, past the end too (taken as the end), 0 to 3 policies
                    let at = g.below(model.len() as u32 + 2) as usize;
                    let new: Vec<Policy> = (0..g.below(4)).map(|_| g.policy()).collect();
                    let a = at.min(model.len());
                    model.splice(a..a, new.clone());
                    spd.insert(at, new);
                }
                2 => {
                    // the policies protecting with one of two random SAs
                    let ids = [SaId(g.below(8)), SaId(g.below(8))];
                    let want: Vec<(usize, Policy)> = model
                        .iter()
                        .cloned()
                        .enumerate()
                        .filter(|(_, p)| p.protects_with_any(&ids))
                        .collect();
                    model.retain(|p| !p.protects_with_any(&ids));
                    assert_eq!(spd.remove_where(|p| p.protects_with_any(&ids)), want);
                }
                _ => {
                    let p = g.policy();
                    model.push(p.clone());
                    spd.push(p);
                }
            }
            assert_eq!(spd.policies(), model.as_slice());
            agree(&spd, &mut g, 60);
        }
        // all taken out at once: nothing is left in the index either
        let all = spd.remove_where(|_| true);
        assert_eq!(all.len(), model.len());
        assert_eq!(spd.shapes(Direction::In) + spd.shapes(Direction::Out), 0);
    }
}

#[test]
fn ipv4_overlapping_policies_first_match_decides() {
    let mut spd = Spd::new();
    // A host pair, then its subnets, then a catch-all: the most specific is first.
    spd.push(pol(Direction::Out, pfx("10.1.0.5"), pfx("10.2.0.9"), Action::Discard));
    spd.push(pol(
        Direction::Out,
        pfx("10.1.0.0/16"),
        pfx("10.2.0.0/16"),
        Action::Protect(vec![SaId(1)]),
    ));
    spd.push(pol(Direction::Out, None, None, Action::Bypass));
    let f = |s, d| flow(v4(s), v4(d), 17, Some(1), Some(2));
    assert_eq!(at(&spd, Direction::Out, &f("10.1.0.5", "10.2.0.9")), Some(0));
    assert_eq!(at(&spd, Direction::Out, &f("10.1.0.6", "10.2.0.9")), Some(1));
    assert_eq!(at(&spd, Direction::Out, &f("10.3.0.6", "10.2.0.9")), Some(2));
    assert_eq!(at(&spd, Direction::In, &f("10.1.0.5", "10.2.0.9")), None);
    // The catch-all first: it shadows the rest (one probe and done).
    let mut rev = Spd::new();
    rev.push(pol(Direction::Out, None, None, Action::Bypass));
    rev.push(pol(Direction::Out, pfx("10.1.0.5"), pfx("10.2.0.9"), Action::Discard));
    assert_eq!(at(&rev, Direction::Out, &f("10.1.0.5", "10.2.0.9")), Some(0));
    // Taking the first out moves the rest up and lets the next match.
    rev.remove(0).unwrap();
    assert_eq!(at(&rev, Direction::Out, &f("10.1.0.5", "10.2.0.9")), Some(0));
    assert_eq!(at(&rev, Direction::Out, &f("10.1.0.6", "10.2.0.9")), None);
}

#[test]
fn ipv6_and_families_kept_apart() {
    let mut spd = Spd::new();
    spd.push(pol(Direction::In, pfx("0.0.0.0/0"), pfx("0.0.0.0/0"), Action::Discard));
    spd.push(pol(
        Direction::In,
        pfx("2001:db8:1::/48"),
        pfx("2001:db8:2::/48"),
        Action::Bypass,
    ));
    spd.push(pol(Direction::In, pfx("::/0"), None, Action::Discard));
    let f = |s, d| flow(v6(s), v6(d), 6, Some(1), Some(2));
    assert_eq!(at(&spd, Direction::In, &f("2001:db8:1::1", "2001:db8:2::1")), Some(1));
    assert_eq!(at(&spd, Direction::In, &f("2001:db8:1::1", "2001:db8:3::1")), Some(2));
    assert_eq!(
        at(&spd, Direction::In, &flow(v4("1.2.3.4"), v4("5.6.7.8"), 6, None, None)),
        Some(0)
    );
    // Mixed families (a hand-made flow): only "any" or matching families match.
    assert_eq!(
        at(
            &spd,
            Direction::In,
            &flow(v6("2001:db8:1::1"), v4("5.6.7.8"), 6, None, None)
        ),
        Some(2)
    );
    assert_eq!(
        at(
            &spd,
            Direction::In,
            &flow(v4("1.2.3.4"), v6("2001:db8:2::1"), 6, None, None)
        ),
        None
    );
}

#[test]
fn protocol_and_ports_pick_among_policies_of_one_key() {
    let sel = |proto, dst_ports| Selector {
        src: pfx("192.0.2.1"),
        dst: pfx("192.0.2.2"),
        proto,
        src_ports: PortRange::ANY,
        dst_ports,
    };
    let mut spd = Spd::new();
    for (proto, ports, action) in [
        (Some(17), PortRange::single(500), Action::Bypass),
        (Some(6), PortRange { lo: 1000, hi: 2000 }, Action::Discard),
        (None, PortRange::ANY, Action::Protect(vec![SaId(3)])),
    ] {
        spd.push(Policy {
            dir: Direction::Out,
            selector: sel(proto, ports),
            action,
        });
    }
    assert_eq!(spd.shapes(Direction::Out), 1);
    let f = |proto, dp| flow(v4("192.0.2.1"), v4("192.0.2.2"), proto, Some(9), dp);
    assert_eq!(at(&spd, Direction::Out, &f(17, Some(500))), Some(0));
    assert_eq!(at(&spd, Direction::Out, &f(17, Some(501))), Some(2));
    assert_eq!(at(&spd, Direction::Out, &f(6, Some(1500))), Some(1));
    // A packet without ports (a later fragment) matches only ANY ports (RFC 4301 4.4.1.1).
    assert_eq!(at(&spd, Direction::Out, &f(6, None)), Some(2));
    // Out of the middle of the key's list, then back at the end: now after the catch-all.
    let p = spd.remove(1).unwrap();
    assert_eq!(at(&spd, Direction::Out, &f(6, Some(1500))), Some(1));
    spd.push(p);
    assert_eq!(at(&spd, Direction::Out, &f(6, Some(1500))), Some(1));
    spd.remove(1).unwrap();
    assert_eq!(at(&spd, Direction::Out, &f(6, Some(1500))), Some(1));
    assert_eq!(spd.policies()[1].action, Action::Discard);
}

#[test]
fn many_policies_one_shape_each_found_at_its_place() {
    let mut spd = Spd::new();
    for i in 0..5000u32 {
        let a = Ipv4Addr::from(0x0a00_0000 + (i << 8));
        let b = Ipv4Addr::from(0xac10_0000 + (i << 8));
        let dir = if i % 2 == 0 { Direction::Out } else { Direction::In };
        spd.push(pol(
            dir,
            Prefix::new(a.into(), 24),
            Prefix::new(b.into(), 24),
            Action::Bypass,
        ));
    }
    assert_eq!(spd.shapes(Direction::Out), 1);
    for i in (0..5000u32).step_by(97) {
        let a = Ipv4Addr::from(0x0a00_0000 + (i << 8) + 7);
        let b = Ipv4Addr::from(0xac10_0000 + (i << 8) + 9);
        let dir = if i % 2 == 0 { Direction::Out } else { Direction::In };
        let f = flow(a.into(), b.into(), 6, Some(1), Some(2));
        assert_eq!(at(&spd, dir, &f), Some(i as usize));
    }
    let (list, index) = spd.heap_bytes();
    assert!(list > 0 && index > 0);
}
