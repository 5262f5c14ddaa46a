//! An IPv6 underlay, and several peers behind one tunnel (on in-memory devices).

use super::*;

const A6: &str = "fd00:99::1";
const B6: &str = "fd00:99::2";

#[test]
fn an_ipv6_underlay_carries_both_inner_families() {
    for bundle in [bundle_esp as BundleFn, bundle_esp_ah, bundle_comp_esp] {
        let a = Tunnel::new(engine6(A6, B6, bundle), vec![ip(B6)]);
        let b = Tunnel::new(engine6(B6, A6, bundle), vec![ip(A6)]);
        for inner in [ping4(1, 56), ping6(2, 1200)] {
            let w = FakeWire::default();
            let mut pkt = PacketBuffer::new();
            let n = pkt.load(&inner);
            assert_eq!(a.outbound(&mut pkt, n, &w), Outcome::Forwarded);
            let (wire, dst) = w.take().pop().unwrap();
            assert_eq!(dst, ip(B6));
            assert_eq!(wire[0] >> 4, 6, "IPv6 outer header");
            assert_eq!(&wire[8..40], &[ip6(A6), ip6(B6)].concat()[..]);
            assert_eq!(open(&b, &wire), (Outcome::Forwarded, Some(inner.clone())));
            let back = seal(&b, &inner);
            assert_eq!(open(&a, &back), (Outcome::Forwarded, Some(inner)));
        }
    }
    // The TUN MTU counts the 40-byte outer header: 20 bytes less than over IPv4.
    let m4 = tun_mtu_for(&engine(A, B, bundle_esp), 1500).unwrap();
    let m6 = tun_mtu_for(&engine6(A6, B6, bundle_esp), 1500).unwrap();
    assert_eq!(m4 - m6, 20);
    let a = Tunnel::new(engine6(A6, B6, bundle_esp), vec![ip(B6)]);
    let hdr = 40 + 8; // IPv6 + ICMPv6
    assert_eq!(
        seal(&a, &ping6(1, m6 - hdr)).len(),
        1500,
        "the largest inner packet fills 1500 bytes"
    );
}

fn ip6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// As [`engine`], with `local` and `peer` IPv6 addresses (SPIs 0x1001 from A6 to B6).
fn engine6(local: &str, peer: &str, bundle: BundleFn) -> Engine {
    let (out_spi, in_spi) = if local == A6 {
        (0x1001, 0x1002)
    } else {
        (0x1002, 0x1001)
    };
    let mut e = Engine::new();
    install(&mut e, bundle(local, peer, out_spi), Direction::Out, "out");
    install(&mut e, bundle(peer, local, in_spi), Direction::In, "in");
    e
}

/// Host A (10.99.0.1 and fd00:99::1) with three remote hosts: B (10.99.0.2, inner
/// 10.100.2.0/24), C (fd00:99::3, inner 10.100.3.0/24) and D (10.99.0.4, inner
/// 10.100.4.0/24, not a peer). SPI 0x2000 + n from A to host n, 0x3000 + n back.
fn hub() -> Engine {
    let mut e = Engine::new();
    for (n, (remote, local)) in [(2, (B, A)), (3, ("fd00:99::3", A6)), (4, ("10.99.0.4", A))] {
        let out = e
            .add_sa(esp_gcm(&format!("to-{n}"), 0x2000 + n, local, remote), Duration::ZERO)
            .unwrap();
        let inb = e
            .add_sa(esp_gcm(&format!("from-{n}"), 0x3000 + n, remote, local), Duration::ZERO)
            .unwrap();
        to_inner(&mut e, Direction::Out, &format!("10.100.{n}.0/24"), vec![out]);
        to_inner(&mut e, Direction::In, &format!("10.100.{n}.0/24"), vec![inb]);
    }
    e
}

/// Remote host `n` of [`hub`] (the mirror image of its SAs with A).
fn spoke(n: u32) -> Engine {
    let (remote, local) = match n {
        2 => (B, A),
        3 => ("fd00:99::3", A6),
        _ => ("10.99.0.4", A),
    };
    let mut e = Engine::new();
    let out = e
        .add_sa(esp_gcm("to-a", 0x3000 + n, remote, local), Duration::ZERO)
        .unwrap();
    let inb = e
        .add_sa(esp_gcm("from-a", 0x2000 + n, local, remote), Duration::ZERO)
        .unwrap();
    to_inner(&mut e, Direction::Out, "10.100.0.0/24", vec![out]);
    to_inner(&mut e, Direction::In, "10.100.0.0/24", vec![inb]);
    e
}

#[test]
fn sealed_packets_go_to_the_peer_their_outermost_sa_tunnels_to() {
    let a = Tunnel::new(hub(), vec![ip(B), ip("fd00:99::3")]);
    let inner = [
        udp4([10, 100, 0, 1], [10, 100, 2, 7], 1),
        udp4([10, 100, 0, 1], [10, 100, 3, 7], 2),
        udp4([10, 100, 0, 1], [10, 100, 4, 7], 3), // D: not a peer
        udp4([10, 100, 0, 1], [10, 100, 2, 8], 4),
    ];
    let mut batch = Batch::new();
    load(&mut batch, inner.iter().map(Vec::as_slice));
    let wire = FakeWire::default();
    a.outbound_batch(&mut batch, inner.len(), &wire);
    let sent = wire.take();
    let dsts: Vec<IpAddr> = sent.iter().map(|(_, d)| *d).collect();
    assert_eq!(dsts, vec![ip(B), ip("fd00:99::3"), ip(B)]);
    assert_eq!(sent[1].0[0] >> 4, 6, "C is reached over IPv6");
    let c = a.counters().snapshot();
    assert_eq!((c.not_to_peer, c.underlay_tx_packets), (1, 3));
    // Each peer opens its own, and only its own.
    for ((p, _), n) in sent.iter().zip([2, 3, 2]) {
        let host = Tunnel::new(spoke(n), vec![]);
        assert_eq!(open(&host, p).0, Outcome::Forwarded);
        let other = Tunnel::new(spoke(if n == 2 { 3 } else { 2 }), vec![]);
        assert!(matches!(open(&other, p).0, Outcome::Engine(_)));
    }
    // With no peers configured, D is reached too.
    let any = Tunnel::new(hub(), vec![]);
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(&inner[2]);
    assert_eq!(any.outbound(&mut pkt, n, &wire), Outcome::Forwarded);
    assert_eq!(wire.take()[0].1, ip("10.99.0.4"));
}

/// A, with peers B and C over ESP in UDP, learns each peer's endpoint only from packets
/// that peer's SAs authenticated: B's packet from C's endpoint moves B's (it is B, behind a
/// new address), never C's; a forgery with B's SPI or a packet of D (an SA here, but not a
/// peer) moves nothing it should not.
#[test]
fn each_peer_is_learned_only_from_packets_its_own_sas_authenticated() {
    let a = Tunnel::new(hub(), vec![ip(B), ip("fd00:99::3")]);
    let (b, c, d) = (
        Tunnel::new(spoke(2), vec![ip(A)]),
        Tunnel::new(spoke(3), vec![ip(A6)]),
        Tunnel::new(spoke(4), vec![ip(A)]),
    );
    let from_b = seal(&b, &udp4([10, 100, 2, 7], [10, 100, 0, 1], 1));
    let from_b2 = seal(&b, &udp4([10, 100, 2, 7], [10, 100, 0, 1], 2));
    let from_c = seal(&c, &udp4([10, 100, 3, 7], [10, 100, 0, 1], 3));
    let from_d = seal(&d, &udp4([10, 100, 4, 7], [10, 100, 0, 1], 4));
    let mut forged = seal(&b, &udp4([10, 100, 2, 7], [10, 100, 0, 1], 5));
    *forged.last_mut().unwrap() ^= 1;
    let c_ep = SocketAddr::new(ip("fd00:99::3"), 4500);
    let b_new = SocketAddr::new(ip("198.51.100.7"), 31000);
    let rx = FakeBatchRx::default();
    *rx.datagrams.lock().unwrap() = vec![
        (from_c, RxKind::Packet),
        (forged, RxKind::Packet),
        (from_b, RxKind::Packet),
        (from_d, RxKind::Packet),
        (from_b2, RxKind::Packet),
    ];
    *rx.sources.lock().unwrap() = vec![
        c_ep,
        SocketAddr::new(ip("203.0.113.66"), 666), // the forgery's: never learned
        c_ep,                                     // B's packet from C's endpoint
        SocketAddr::new(ip("10.99.0.4"), 4500),
        b_new,
    ];
    let mut batch = Batch::new();
    let n = rx.recv_batch(&mut batch).unwrap();
    let tun = FakeTun::default();
    a.inbound_batch(&mut batch, n, &rx, &mut TunPort::new(&tun));
    assert_eq!(tun.written().len(), 4, "all but the forgery open");
    let learned = rx.learned.lock().unwrap().clone();
    // Per peer, the last source of a packet its SAs authenticated, in order of appearance;
    // D is reported as itself, which no socket of A knows as a peer.
    assert_eq!(
        learned,
        vec![
            (ip("fd00:99::3"), c_ep),
            (ip(B), b_new),
            (ip("10.99.0.4"), SocketAddr::new(ip("10.99.0.4"), 4500))
        ]
    );
    assert!(!learned.iter().any(|(p, s)| *p == ip("fd00:99::3") && *s != c_ep));
}

fn bundle_esp_no_window(src: &str, dst: &str, spi: u32) -> Vec<SaConfig> {
    let mut c = esp_gcm("esp", spi, src, dst);
    c.params.replay_window = 0;
    vec![c]
}

/// Gives A the datagrams, each from its source, as one batch; what A learned.
fn learn_from(a: &Tunnel, datagrams: Vec<(Vec<u8>, SocketAddr)>) -> (usize, Vec<(IpAddr, SocketAddr)>) {
    let rx = FakeBatchRx::default();
    *rx.sources.lock().unwrap() = datagrams.iter().map(|(_, s)| *s).collect();
    *rx.datagrams.lock().unwrap() = datagrams.into_iter().map(|(d, _)| (d, RxKind::Packet)).collect();
    let mut batch = Batch::new();
    let n = rx.recv_batch(&mut batch).unwrap();
    let tun = FakeTun::default();
    a.inbound_batch(&mut batch, n, &rx, &mut TunPort::new(&tun));
    let learned = rx.learned.lock().unwrap().clone();
    (tun.written().len(), learned)
}

/// RFC 7296 2.23: only a packet newer than any seen, on an SA with replay protection, moves
/// a peer's endpoint. A packet captured on the way (sequence number inside the window, below
/// the highest seen, never received) and sent from elsewhere opens (it is authentic) but
/// moves nothing; a replay is dropped; B's next new packet from the new address moves it.
/// Without a replay window nothing moves the endpoint at all.
#[test]
fn only_new_packets_move_a_peers_endpoint() {
    let (a, b) = pair(bundle_esp);
    let p: Vec<_> = (1..=4)
        .map(|i| seal(&b, &udp4([10, 0, 0, 2], [10, 0, 0, 1], i)))
        .collect();
    let (nat, thief) = (
        SocketAddr::new(ip("198.51.100.7"), 31000),
        SocketAddr::new(ip("203.0.113.66"), 666),
    );
    // Packets 1 and 3 arrive from the NAT; 2 was captured on the way and never arrived.
    let (written, learned) = learn_from(&a, vec![(p[0].clone(), nat), (p[2].clone(), nat)]);
    assert_eq!((written, learned.clone()), (2, vec![(ip(B), nat)]));
    // The captured packet 2 and a replay of 3, both from the thief's address.
    let (written, learned) = learn_from(&a, vec![(p[1].clone(), thief), (p[2].clone(), thief)]);
    assert_eq!(written, 1, "the late packet opens, the replay does not");
    assert_eq!(learned, vec![], "neither moves the endpoint");
    // B's next packet from a new address (its NAT rebinding): learned.
    let rebound = SocketAddr::new(ip("198.51.100.7"), 31001);
    let (written, learned) = learn_from(&a, vec![(p[3].clone(), rebound)]);
    assert_eq!((written, learned), (1, vec![(ip(B), rebound)]));

    // replay_window = 0: every packet opens, none is new, nothing is learned.
    let (a, b) = pair(bundle_esp_no_window);
    let p: Vec<_> = (1..=2)
        .map(|i| seal(&b, &udp4([10, 0, 0, 2], [10, 0, 0, 1], i)))
        .collect();
    let (written, learned) = learn_from(
        &a,
        vec![(p[0].clone(), nat), (p[1].clone(), thief), (p[1].clone(), thief)],
    );
    assert_eq!((written, learned), (3, vec![]));
}

/// The same through real ESP-in-UDP sockets on the loopback (A 127.0.0.1 with peers B
/// 127.0.0.2 and C 127.0.0.3): B's packet from C's address moves B's endpoint only; a
/// forgery with C's SPI moves nothing; C's own packet moves C's.
#[test]
fn udp_sockets_learn_each_peer_only_from_its_own_sas() {
    use crate::dev::udp::EncapSocket;
    use std::net::UdpSocket;
    let (a, b, c) = ("127.0.0.1", "127.0.0.2", "127.0.0.3");
    let mirror = |local: &str, remote: &str, out: u32, inb: u32, e: &mut Engine, inner: &str| {
        let o = e
            .add_sa(esp_gcm(&format!("o{out:x}"), out, local, remote), Duration::ZERO)
            .unwrap();
        let i = e
            .add_sa(esp_gcm(&format!("i{inb:x}"), inb, remote, local), Duration::ZERO)
            .unwrap();
        to_inner(e, Direction::Out, inner, vec![o]);
        to_inner(e, Direction::In, inner, vec![i]);
    };
    let mut ea = Engine::new();
    mirror(a, b, 0x4002, 0x5002, &mut ea, "10.100.2.0/24");
    mirror(a, c, 0x4003, 0x5003, &mut ea, "10.100.3.0/24");
    let host_a = Tunnel::new(ea, vec![ip(b), ip(c)]);
    let spoke = |me: &str, n: u32| {
        let mut e = Engine::new();
        mirror(me, a, 0x5000 + n, 0x4000 + n, &mut e, "10.100.0.0/24");
        Tunnel::new(e, vec![ip(a)])
    };
    let (host_b, host_c) = (spoke(b, 2), spoke(c, 3));
    let g = EncapSocket::open_group(ip(a), 0, &[ip(b), ip(c)], 4500, 1, Duration::from_millis(50)).unwrap();
    let port = g[0].local_port().unwrap();
    let configured = |p: &str| Some(SocketAddr::new(ip(p), 4500));
    let deliver = |wire: &[u8], from: &UdpSocket| {
        let esp = ipsec_engine::udp_encap::socket_payload(wire).unwrap();
        from.send_to(esp, (ip(a), port)).unwrap();
        let t0 = Instant::now();
        let mut batch = Batch::new();
        let n = loop {
            let n = g[0].recv_batch(&mut batch).unwrap();
            if n > 0 {
                break n;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "nothing arrived");
        };
        let tun = FakeTun::default();
        host_a.inbound_batch(&mut batch, n, &g[0], &mut TunPort::new(&tun));
        tun.written().len()
    };
    let at_c = UdpSocket::bind((ip(c), 0)).unwrap();
    // B's packet, sent from C's address: authenticated by B's SA, so B moved there.
    let from_b = seal(&host_b, &udp4([10, 100, 2, 7], [10, 100, 0, 1], 1));
    assert_eq!(deliver(&from_b, &at_c), 1);
    assert_eq!(g[0].endpoint(ip(b)), Some(at_c.local_addr().unwrap()));
    assert_eq!(
        g[0].endpoint(ip(c)),
        configured(c),
        "C's endpoint never moves for B's packet"
    );
    // A forgery with C's SPI from elsewhere: dropped, nothing learned.
    let mut forged = seal(&host_c, &udp4([10, 100, 3, 7], [10, 100, 0, 1], 2));
    *forged.last_mut().unwrap() ^= 1;
    let elsewhere = UdpSocket::bind((ip(c), 0)).unwrap();
    assert_eq!(deliver(&forged, &elsewhere), 0);
    assert_eq!(g[0].endpoint(ip(c)), configured(c));
    // C's own packet moves C's endpoint (and not B's).
    let from_c = seal(&host_c, &udp4([10, 100, 3, 7], [10, 100, 0, 1], 3));
    assert_eq!(deliver(&from_c, &elsewhere), 1);
    assert_eq!(g[0].endpoint(ip(c)), Some(elsewhere.local_addr().unwrap()));
    assert_eq!(g[0].endpoint(ip(b)), Some(at_c.local_addr().unwrap()));
}

/// The TUN port hands the loops plain packets in batches of at most BATCH: a super-packet of
/// 60 segments fills one batch and its other 28 segments come first in the next, followed
/// there by the plain packet read after it; nothing is lost or reordered, and the segments
/// are the super-packet's bytes.
#[test]
fn a_super_packet_larger_than_a_batch_continues_in_the_next() {
    use crate::dev::tun::offload::VNET_HDR_LEN;
    let tun = FakeTun {
        offload: true,
        ..FakeTun::default()
    };
    let (hdr, sp) = super_packet(60 * 1000, 1000, false);
    tun.queue([&hdr.to_bytes()[..], &sp].concat());
    let ping = ping4(9, 100);
    tun.queue([&[0u8; VNET_HDR_LEN][..], &ping].concat());
    let c = DaemonCounters::default();
    let mut port = TunPort::new(&tun);
    let mut b = Batch::new();
    let mut segments = Vec::new();
    assert_eq!(port.read_batch(&mut b, &c).unwrap(), BATCH);
    segments.extend((0..BATCH).map(|i| b.packet(i).to_vec()));
    // FakeTun's recv_more has nothing: the second batch is the rest of the super-packet, then
    // (the next call waits with recv) the ping.
    let n = port.read_batch(&mut b, &c).unwrap();
    assert_eq!(n, 60 - BATCH);
    segments.extend((0..n).map(|i| b.packet(i).to_vec()));
    assert_eq!(port.read_batch(&mut b, &c).unwrap(), 1);
    assert_eq!(b.packet(0), &ping[..]);
    assert_eq!(c.snapshot().tun_gso_packets, 1);
    // Every segment: 40 bytes of headers and its 1000 bytes of the payload, in order.
    let body: Vec<u8> = segments.iter().flat_map(|s| s[40..].to_vec()).collect();
    assert_eq!(body, sp[40..]);
    assert!(segments.iter().all(|s| s.len() == 1040));
}

/// Non-ESP datagrams (IKE behind the marker, RFC 3948 2.2) go to the consumer set on the
/// tunnel, with their bytes and source, and are counted either way; without a consumer they
/// are only counted.
#[test]
fn non_esp_datagrams_go_to_the_consumer() {
    let (_, mut b) = pair(bundle_esp);
    let got = std::sync::Arc::new(Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&got);
    b.set_non_esp(Box::new(move |d: &[u8], from: SocketAddr| {
        sink.lock().unwrap().push((d.to_vec(), from))
    }));
    let ike = [&[0u8, 0, 0, 0][..], &[0x21; 28]].concat();
    let rx = FakeBatchRx::default();
    *rx.datagrams.lock().unwrap() = vec![(ike.clone(), RxKind::NonEsp), (vec![0xff], RxKind::Keepalive)];
    let mut batch = Batch::new();
    let n = rx.recv_batch(&mut batch).unwrap();
    let tun = FakeTun::default();
    b.inbound_batch(&mut batch, n, &rx, &mut TunPort::new(&tun));
    let from = SocketAddr::new(ip("203.0.113.9"), 40000);
    assert_eq!(*got.lock().unwrap(), vec![(ike, from)]);
    let c = b.counters().snapshot();
    assert_eq!((c.udp_non_esp, c.udp_keepalives_rx, c.tun_tx_packets), (1, 1, 0));
}
