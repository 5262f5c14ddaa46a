//! SPD lookup against the number of policies (issue #30): the tuple-space index
//! (`Spd::lookup`) and, in the same run, the plain first-match scan it replaced
//! (`Spd::lookup_linear`), for 1, 100, 10,000 and 100,000 policies per direction.
//!
//! - `lookup/{index,linear}/{out,in}-{first,last,none}/N`: N policies in each direction
//!   (`10.x.y.0/24 -> 172.x.y.0/24` subnet pairs, the directions interleaved in the list) and
//!   the policy the packet is for (`192.168.1.0/24 -> 192.168.2.0/24`) first or last of its
//!   direction, or a packet that matches nothing. Every policy has the same shape (/24, /24),
//!   so the index probes one hash map per lookup; `shapes/` shows the cost per shape.
//! - `shapes/index/K`: 100,000 policies per direction spread over K prefix-length pairs,
//!   the packet matching none (the index's worst case: one probe per shape).
//! - `control/`: the control side at 100,000 policies per direction: `Spd::push` then
//!   `Spd::remove` of the last policy (the index's own upkeep), and `Engine::add_policy` then
//!   `Engine::remove_policy` (each also publishes a new data plane), `Engine::add_policy`
//!   alone, and `spd_copy`: a copy of the whole SPD, what every change cost before the
//!   engine kept a spare copy up to date (`Engine::change_spd`).
//!
//! The heap bytes per policy (policy list and index) are printed on standard error.
//!
//! - `ike_child/{delete,rekey}/{rebuild,in_place}/N`: an IKE child's policies taken out or put
//!   in (before the pair it replaces) in a server of N clients, the SPD rebuilt from a copy
//!   as tunneld did before, and changed in place as it does now (`Engine::remove_policies_using`,
//!   `Engine::insert_policies`).
//!
//! Run: `cargo bench --bench spd -- --warm-up-time 1 --measurement-time 2` (about 4 minutes;
//! `-- ike_child` for the last group alone).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Ends};
use ipsec_core::AeadAlg;
use ipsec_engine::{Action, Direction, Engine, Flow, Policy, Prefix, SaConfig, SaId, Selector, Spd};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const SIZES: [u32; 4] = [1, 100, 10_000, 100_000];

fn v4(a: u32, len: u8) -> Option<Prefix> {
    Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), len)
}

fn policy(dir: Direction, src: Option<Prefix>, dst: Option<Prefix>) -> Policy {
    Policy {
        dir,
        selector: Selector {
            src,
            dst,
            ..Selector::default()
        },
        action: Action::Bypass,
    }
}

/// Filler policy `i`: a /24 pair (with `len` bits for the shapes bench) that the packets
/// never match.
fn filler(dir: Direction, i: u32, src_len: u8, dst_len: u8) -> Policy {
    policy(
        dir,
        v4(0x0a00_0000u32.wrapping_add(i << 8), src_len),
        v4(0xac00_0000u32.wrapping_add(i << 8), dst_len),
    )
}

fn target(dir: Direction) -> Policy {
    policy(dir, v4(0xc0a8_0100, 24), v4(0xc0a8_0200, 24))
}

/// `n` policies per direction, the target of each direction first or last of it.
fn spd(n: u32, target_first: bool) -> Spd {
    let dirs = [Direction::Out, Direction::In];
    let mut spd = Spd::new();
    if target_first {
        dirs.iter().for_each(|&d| spd.push(target(d)));
    }
    for i in 0..n - 1 {
        dirs.iter().for_each(|&d| spd.push(filler(d, i, 24, 24)));
    }
    if !target_first {
        dirs.iter().for_each(|&d| spd.push(target(d)));
    }
    spd
}

fn flow(matching: bool) -> Flow {
    Flow {
        src: IpAddr::V4(Ipv4Addr::new(192, 168, if matching { 1 } else { 3 }, 5)),
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 2, 7)),
        proto: 17,
        src_port: Some(40000),
        dst_port: Some(4500),
    }
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup");
    for n in SIZES {
        let first = spd(n, true);
        let last = spd(n, false);
        let (list, index) = last.heap_bytes();
        let total = last.policies().len();
        eprintln!(
            "spd: {total} policies: list {} B/policy, index {} B/policy",
            list / total,
            index / total
        );
        for dir in [Direction::Out, Direction::In] {
            for (case, s, f) in [
                ("first", &first, flow(true)),
                ("last", &last, flow(true)),
                ("none", &last, flow(false)),
            ] {
                let want = s.lookup_linear(dir, &f).map(|(i, _)| i);
                assert_eq!(s.lookup(dir, &f).map(|(i, _)| i), want);
                assert_eq!(want.is_some(), case != "none");
                let id = BenchmarkId::new(format!("{dir}-{case}"), n);
                g.bench_with_input(id.clone(), &f, |b, f| {
                    b.iter(|| black_box(s.lookup(dir, black_box(f)).map(|(i, _)| i)))
                });
                let id = BenchmarkId::new(format!("linear/{dir}-{case}"), n);
                g.bench_with_input(id, &f, |b, f| {
                    b.iter(|| black_box(s.lookup_linear(dir, black_box(f)).map(|(i, _)| i)))
                });
            }
        }
    }
    g.finish();
}

fn shapes(c: &mut Criterion) {
    let mut g = c.benchmark_group("shapes");
    let n = 100_000u32;
    for k in [1u32, 4, 16] {
        let mut s = Spd::new();
        for i in 0..n {
            let shape = i % k;
            let (sl, dl) = (32 - (shape / 4) as u8, 32 - (shape % 4) as u8);
            for d in [Direction::Out, Direction::In] {
                s.push(filler(d, i, sl, dl));
            }
        }
        assert_eq!(s.shapes(Direction::Out), k as usize);
        let f = flow(false);
        g.bench_with_input(BenchmarkId::new("index", k), &f, |b, f| {
            b.iter(|| black_box(s.lookup(Direction::Out, black_box(f)).map(|(i, _)| i)))
        });
    }
    g.finish();
}

fn control(c: &mut Criterion) {
    let mut g = c.benchmark_group("control");
    g.sample_size(10);
    let n = 100_000u32;
    let mut s = spd(n, false);
    g.bench_function("spd_push_remove/100000", |b| {
        b.iter(|| {
            s.push(filler(Direction::Out, n + 7, 24, 24));
            black_box(s.remove(s.policies().len() - 1))
        })
    });
    // What each policy change cost before the engine kept a spare SPD: publishing copied
    // the whole SPD (list and index).
    g.bench_function("spd_copy/100000", |b| b.iter(|| black_box(s.clone())));
    let mut e = Engine::new();
    e.set_policies(s.policies().to_vec()).expect("bypass policies");
    e.add_policy(filler(Direction::Out, n + 9, 24, 24)).expect("bypass");
    e.remove_policy(e.spd().policies().len() - 1).expect("just added");
    // Adding alone (the list grows by the iterations of a sample; the policies added are
    // taken out again, untimed, after each sample by one `set_policies`).
    g.bench_function("engine_add_policy/100000", |b| {
        b.iter_custom(|iters| {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                e.add_policy(black_box(filler(Direction::Out, n + 9, 24, 24)))
                    .expect("bypass");
            }
            let took = t.elapsed();
            e.set_policies(s.policies().to_vec()).expect("bypass policies");
            // `set_policies` drops the spare SPD: one change (untimed) makes it again.
            e.add_policy(filler(Direction::Out, n + 9, 24, 24)).expect("bypass");
            e.remove_policy(e.spd().policies().len() - 1).expect("just added");
            took
        })
    });
    g.bench_function("engine_add_remove_policy/100000", |b| {
        b.iter(|| {
            e.add_policy(filler(Direction::Out, n + 7, 24, 24)).expect("bypass");
            black_box(e.remove_policy(e.spd().policies().len() - 1).expect("just added"))
        })
    });
    g.finish();
}

/// An engine as a remote-access server's: `clients` IKE children, each an ESP SA pair with
/// one policy each way (`10.200.0.0/24 <-> 10.202.x.y/32`); returns it with each child's
/// (outbound, inbound) SA ids.
fn server(clients: u32) -> (Engine, Vec<(SaId, SaId)>) {
    let mut e = Engine::new();
    let mut pairs = Vec::new();
    let mut ps = Vec::new();
    let sa = |e: &mut Engine, spi: u32| {
        let mut p = SaParams::new(Proto::Esp, spi);
        p.mode = Mode::Tunnel;
        let (a, b) = (
            IpAddr::V4(Ipv4Addr::new(10, 98, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 98, 0, 2)),
        );
        p.tunnel = Some(Ends { src: a, dst: b });
        p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x42; 20], 16));
        e.add_sa(SaConfig::new("c", p, None), Duration::ZERO).expect("SA")
    };
    for i in 0..clients {
        let (out, inb) = (sa(&mut e, 0x1000_0000 + 2 * i), sa(&mut e, 0x1000_0001 + 2 * i));
        let lan = v4(0x0ac8_0000, 24);
        let client = v4(0x0aca_0000 + i, 32);
        ps.push(Policy {
            action: Action::Protect(vec![out]),
            ..policy(Direction::Out, lan, client)
        });
        ps.push(Policy {
            action: Action::Protect(vec![inb]),
            ..policy(Direction::In, client, lan)
        });
        pairs.push((out, inb));
    }
    e.set_policies(ps).expect("policies");
    (e, pairs)
}

/// What an IKE child's policies cost the control side in a server holding N clients (issue
/// #36): `delete/*`: a child deleted (both its policies out), `rekey/*`: a rekeyed child's
/// new pair put before the old pair's (RFC 7296 2.8), each the way tunneld did it before
/// (`rebuild`: the list copied, changed and given to `Engine::set_policies`, which rebuilds
/// the index) and the way it does now (`in_place`: `Engine::remove_policies_using`,
/// `Engine::insert_policies`), in the same run. Untimed after each: the change undone.
fn ike_child(c: &mut Criterion) {
    let mut g = c.benchmark_group("ike_child");
    g.sample_size(10);
    for n in [1_000u32, 10_000] {
        let (mut e, pairs) = server(n);
        let (out, inb) = pairs[n as usize / 2];
        let uses = |p: &Policy| p.protects_with_any(&[out, inb]);
        g.bench_function(BenchmarkId::new("delete/rebuild", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let all = e.spd().policies().to_vec();
                    let t = Instant::now();
                    let keep: Vec<Policy> = e.spd().policies().iter().filter(|p| !uses(p)).cloned().collect();
                    e.set_policies(keep).expect("policies");
                    took += t.elapsed();
                    e.set_policies(all).expect("policies");
                }
                took
            })
        });
        g.bench_function(BenchmarkId::new("delete/in_place", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let gone = e.remove_policies_using(&[out, inb]);
                    took += t.elapsed();
                    let at = gone[0].0;
                    e.insert_policies(at, gone.into_iter().map(|(_, p)| p).collect())
                        .expect("back");
                }
                took
            })
        });
        // the rekey: a copy of the pair's policies (naming the same SAs) before it
        let at = e.spd().policies().iter().position(uses).expect("the pair's");
        let pair: Vec<Policy> = e.spd().policies()[at..at + 2].to_vec();
        g.bench_function(BenchmarkId::new("rekey/rebuild", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let all = e.spd().policies().to_vec();
                    let t = Instant::now();
                    let mut ps = e.spd().policies().to_vec();
                    ps.splice(at..at, pair.clone());
                    e.set_policies(ps).expect("policies");
                    took += t.elapsed();
                    e.set_policies(all).expect("policies");
                }
                took
            })
        });
        g.bench_function(BenchmarkId::new("rekey/in_place", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let all = e.spd().policies().to_vec();
                    let t = Instant::now();
                    e.insert_policies(at, pair.clone()).expect("policies");
                    took += t.elapsed();
                    e.set_policies(all).expect("policies");
                }
                took
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lookup, shapes, control, ike_child);
criterion_main!(benches);
