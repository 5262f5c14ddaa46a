//! Many SAs and many peers in one process (issue #30): memory per SA and per peer, the
//! control side's install rate, and whether the data plane's lookups stay flat.
//! `cargo bench --bench scale` (about 20 s; `-- --sas N --peers M` to change the counts).
//!
//! - **SAs**: `Engine::add_sa` of N tunnel-mode ESP SAs (AES-128-GCM, each its own SPI and
//!   destination), timed (installs per second, and the last 1,000 installs on their own, to
//!   show whether an install costs more as the SAD grows), and the growth of the process's
//!   resident memory (`/proc/self/statm`) over the N, per SA. Then `Sad::lookup` by (SPI,
//!   destination) of the SAs in a shuffled order, against the same in a SAD of one SA.
//! - **Policies**: one outbound protect policy per SA pair added with `Engine::add_policy`
//!   (one at a time, as the control socket and IKE install them), timed as a whole.
//! - **Peers**: an ESP-in-UDP socket (`EncapSocket::open`, bound to 127.0.0.1 on a free
//!   port) configured with M peers, resident memory per peer, and `EncapSocket::endpoint` of
//!   each peer against the same with one peer.
//! - **Peers IKE adds** (a remote-access server's clients, `--added K`, default 10,000):
//!   `EncapSocket::add_peer` of K clients, each at its own address with its own child SA,
//!   timed (per add, and the last 1,000 on their own), resident memory per added peer, and
//!   `EncapSocket::child_endpoint` (the lookup every sealed packet of such an SA makes) of each
//!   against the same with one. Then `EncapSocket::source_of` (every received datagram's
//!   lookup) of peers that moved behind a NAT, beside a linear scan of the endpoints, the
//!   lookup it replaced, in the same run.
//!
//! Resident memory includes the allocator's slack; the figures are what a process grows by,
//! not the structures' exact sizes.

use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{AeadAlg, Mode, SaParams, Tunnel};
use ipsec_engine::{Action, Direction, Engine, Policy, Prefix, SaConfig, Selector};
use ipsec_tunnel::dev::udp::EncapSocket;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn peer_addr(i: u32) -> Ipv4Addr {
    // 10.93.0.0/16 and up: documentation-free private space, never sent to.
    Ipv4Addr::from(0x0a5d_0000u32 + i)
}

fn sa_config(i: u32) -> SaConfig {
    let mut p = SaParams::new(Proto::Esp, 0x1000_0000 + i);
    p.mode = Mode::Tunnel;
    p.tunnel = Some(Tunnel {
        src: IpAddr::V4(Ipv4Addr::new(10, 92, 0, 1)),
        dst: IpAddr::V4(peer_addr(i)),
    });
    let key: Vec<u8> = (0..20u32).map(|k| (k * 7 + i) as u8).collect();
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &key, 16));
    SaConfig::new(format!("sa{i}"), p, None)
}

fn shuffled(n: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut x = 0x9e37_79b9u32;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.swap(i, x as usize % (i + 1));
    }
    v
}

/// Nanoseconds per call of `f` on each of `items`, all of them `reps` times over.
fn ns_each<T: Copy, R>(items: &[T], reps: usize, f: impl Fn(T) -> R) -> f64 {
    let t = Instant::now();
    for _ in 0..reps {
        for &x in items {
            black_box(f(x));
        }
    }
    t.elapsed().as_nanos() as f64 / (items.len() * reps) as f64
}

/// Nanoseconds per `Sad::lookup` of each SA of `order` in `e`, repeated `reps` times.
fn sad_lookup_ns(e: &Engine, order: &[u32], reps: usize) -> f64 {
    let t = Instant::now();
    let mut found = 0usize;
    for _ in 0..reps {
        for &i in order {
            found += e.sad().lookup(50, 0x1000_0000 + i, IpAddr::V4(peer_addr(i))).is_some() as usize;
        }
    }
    assert_eq!(found, order.len() * reps, "every SA found");
    t.elapsed().as_nanos() as f64 / (order.len() * reps) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |flag: &str, d: u32| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n_sa = get("--sas", 20_000).max(1_000);
    let n_peer = get("--peers", 10_000).max(1);
    let n_added = get("--added", 10_000).max(1_000);
    let now = Duration::ZERO;

    // Peers (first: memory the SAs free later would be reused without growing the process).
    let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let peers: Vec<IpAddr> = (0..n_peer).map(|i| IpAddr::V4(peer_addr(i))).collect();
    let before = rss_bytes();
    let t = Instant::now();
    let u = EncapSocket::open(local, 0, &peers, 4500, Duration::from_millis(10)).expect("UDP socket");
    let took = t.elapsed();
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "peers: {n_peer} configured in {:.3} s; resident memory +{:.1} MB, {:.0} bytes per peer",
        took.as_secs_f64(),
        grown as f64 / 1e6,
        grown as f64 / f64::from(n_peer)
    );
    let endpoint_ns = |u: &EncapSocket, list: &[IpAddr]| ns_each(list, 20, |p| u.endpoint(p).expect("a peer"));
    let mixed: Vec<IpAddr> = shuffled(n_peer).into_iter().map(|i| peers[i as usize]).collect();
    let many = endpoint_ns(&u, &mixed);
    let u1 = EncapSocket::open(local, 0, &peers[..1], 4500, Duration::from_millis(10)).expect("UDP socket");
    let few = endpoint_ns(&u1, &vec![peers[0]; n_peer as usize]);
    println!("peer endpoint lookup: {many:.1} ns at {n_peer} peers (shuffled), {few:.1} ns at 1 peer");

    // Peers IKE adds: each client at its own address, one child SA each.
    let added_at = |i: u32| std::net::SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i)), 4500);
    let before = rss_bytes();
    let t = Instant::now();
    let mut last = Duration::ZERO;
    let ua = EncapSocket::open(local, 0, &[], 4500, Duration::from_millis(10)).expect("UDP socket");
    for i in 0..n_added {
        let t1 = Instant::now();
        assert!(
            ua.add_peer(added_at(i), 0x1000_0000 + i, 0x2000_0000 + i),
            "room for {i}"
        );
        if i >= n_added - 1000 {
            last += t1.elapsed();
        }
    }
    let took = t.elapsed();
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "added peers: {n_added} by add_peer in {:.3} s ({:.1} µs each); the last 1,000 at {:.1} µs each; resident memory +{:.1} MB, {:.0} bytes per added peer",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / f64::from(n_added),
        last.as_secs_f64() * 1e6 / 1000.0,
        grown as f64 / 1e6,
        grown as f64 / f64::from(n_added)
    );
    let child_ns = |u: &EncapSocket, list: &[u32]| {
        ns_each(list, 20, |i| {
            u.child_endpoint(added_at(i).ip(), 0x1000_0000 + i).expect("an SA")
        })
    };
    let many = child_ns(&ua, &shuffled(n_added));
    let ua1 = EncapSocket::open(local, 0, &[], 4500, Duration::from_millis(10)).expect("UDP socket");
    assert!(ua1.add_peer(added_at(0), 0x1000_0000, 0x2000_0000));
    let few = child_ns(&ua1, &vec![0; n_added as usize]);
    println!("child SA endpoint lookup: {many:.1} ns at {n_added} added peers (shuffled), {few:.1} ns at 1");
    // BEGIN source_of (not in builds before the O(1) peer table)
    // The configured peers move behind NATs (each to its own address): a datagram's source
    // then names its peer only through the moved endpoint.
    let natted = |i: u32| std::net::SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0xc633_0000 + i)), 40000);
    let um = EncapSocket::open(local, 0, &peers, 4500, Duration::from_millis(10)).expect("UDP socket");
    for (i, p) in (0..n_peer).zip(&peers) {
        ipsec_tunnel::dev::underlay::UnderlayRx::authenticated(&um, *p, natted(i));
    }
    let srcs: Vec<std::net::SocketAddr> = shuffled(n_peer).into_iter().map(natted).collect();
    let list = um.endpoints();
    let hashed = ns_each(&srcs, 5, |s| um.source_of(s));
    let scan = ns_each(&srcs, 5, |s| list.iter().find(|e| e.1 == s).map_or(s.ip(), |e| e.0));
    assert!(
        srcs.iter().all(|s| um.source_of(*s) != s.ip()),
        "every moved peer is found"
    );
    println!("datagram source -> peer at {n_peer} moved peers (shuffled): source_of {hashed:.1} ns, linear scan {scan:.1} ns");
    // END source_of

    // SAs.
    let configs: Vec<SaConfig> = (0..n_sa).map(sa_config).collect();
    let before = rss_bytes();
    let mut e = Engine::new();
    let t = Instant::now();
    let mut last = Duration::ZERO;
    for (i, c) in configs.into_iter().enumerate() {
        let t1 = Instant::now();
        e.add_sa(c, now).expect("install");
        if i as u32 >= n_sa - 1000 {
            last += t1.elapsed();
        }
    }
    let took = t.elapsed();
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "sas: {n_sa} installed in {:.2} s ({:.0} SAs/s); the last 1,000 at {:.0} SAs/s; resident memory +{:.1} MB, {:.0} bytes per SA",
        took.as_secs_f64(),
        f64::from(n_sa) / took.as_secs_f64(),
        1000.0 / last.as_secs_f64(),
        grown as f64 / 1e6,
        grown as f64 / f64::from(n_sa),
    );
    let order = shuffled(n_sa);
    let many = sad_lookup_ns(&e, &order, 20);
    let mut one = Engine::new();
    one.add_sa(sa_config(0), now).expect("install");
    let few = sad_lookup_ns(&one, &vec![0; n_sa as usize], 20);
    println!("sad lookup by (SPI, destination): {many:.1} ns at {n_sa} SAs (shuffled), {few:.1} ns at 1 SA");

    // One outbound protect policy per SA, added one at a time.
    let ids: Vec<_> = e.sad().iter().map(|(id, _)| id).collect();
    let t = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let host = |a: Ipv4Addr| Prefix::new(IpAddr::V4(a), 32);
        e.add_policy(Policy {
            dir: Direction::Out,
            selector: Selector {
                src: host(Ipv4Addr::new(10, 91, 0, 1)),
                dst: host(Ipv4Addr::from(0x0a5e_0000u32 + i as u32)),
                ..Selector::default()
            },
            action: Action::Protect(vec![*id]),
        })
        .expect("policy");
    }
    let took = t.elapsed();
    println!(
        "policies: {} added one by one in {:.3} s ({:.1} us each)",
        ids.len(),
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / ids.len() as f64
    );
    drop(e);
}
