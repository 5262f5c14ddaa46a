use super::*;
use crate::dev::sys::tests::not_run;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// A route to `to` for packets of SA `spi` (SA handle 0: the socket looks at neither).
fn via(to: IpAddr, spi: u32) -> Route {
    Route {
        sa: ipsec_engine::SaId(0),
        spi,
        to,
    }
}

/// Received datagrams stay where they were read, nothing written in front of them: ESP for
/// the engine (its addresses go in the slot's context), IKE for its consumer; keepalives and
/// runts are sorted out. Lengths beyond the area are cut, not a panic.
#[test]
fn datagrams_are_sorted_where_they_lie() {
    let esp: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7) | 1).collect();
    let mut area = vec![0xaa; 2000];
    area[..esp.len()].copy_from_slice(&esp);
    let before = area.clone();
    assert_eq!(sort_datagram(&area, esp.len()), (RxKind::Packet, 100));
    let ike = [&udp_encap::NON_ESP_MARKER[..], &[0x21; 40]].concat();
    area[..ike.len()].copy_from_slice(&ike);
    assert_eq!(sort_datagram(&area, ike.len()), (RxKind::NonEsp, ike.len()));
    area[0] = udp_encap::KEEPALIVE;
    assert_eq!(sort_datagram(&area, 1), (RxKind::Keepalive, 0));
    assert_eq!(sort_datagram(&area, 5), (RxKind::Runt, 0));
    assert_eq!(sort_datagram(&before, usize::MAX), (RxKind::Packet, 2000));
    assert_eq!(sort_datagram(&[], 8), (RxKind::Runt, 0));
}

#[test]
fn gro_buffers_give_back_each_datagram_of_each_run() {
    let mut g = GroBuffers::new();
    assert!(g.next_datagram().is_none());
    g.allocate();
    // Message 0: three datagrams of 100, 100 and 37 bytes; message 1: one of 5;
    // message 2: a run whose size is larger than the message (one datagram).
    let runs: [&[usize]; 4] = [&[100, 100, 37], &[5], &[], &[60]];
    let mut want = Vec::new();
    let mut lens = [0; 4];
    for (m, (run, area)) in runs.iter().zip(g.areas()).enumerate() {
        let mut off = 0;
        for (k, &n) in run.iter().enumerate() {
            let d: Vec<u8> = (0..n).map(|j| (m * 50 + k * 7 + j) as u8).collect();
            area[off..off + n].copy_from_slice(&d);
            off += n;
            want.push(d);
        }
        if run.is_empty() {
            want.push(Vec::new()); // an empty datagram
        }
        lens[m] = off;
    }
    let src = Some(std::net::SocketAddr::from(([192, 0, 2, 7], 4500)));
    g.filled(4, &lens, &[100, 0, 0, 1000], &[src; 4]);
    let mut got = Vec::new();
    while let Some((d, s)) = g.next_datagram() {
        assert_eq!(s, src);
        got.push(d.to_vec());
    }
    assert_eq!(got, want);
    assert!(g.next_datagram().is_none());
    // Lengths past the buffers and counts past the arrays are cut, not a panic.
    g.filled(99, &[usize::MAX; 9], &[1000; 9], &[None; 9]);
    let mut n = 0;
    while g.next_datagram().is_some() {
        n += 1;
    }
    assert_eq!(n, GRO_MSGS * GRO_MSG_LEN.div_ceil(1000));
}

/// Runs of equal-sized datagrams go as UDP GSO sends and arrive as the datagrams they
/// were, in order, with the odd sizes in between; a run ends where the destination
/// changes (two receivers, interleaved).
#[test]
fn udp_gso_sends_arrive_as_the_datagrams_they_were() {
    let rx: Vec<std::net::UdpSocket> = (0..2)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for r in &rx {
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sizes = [1000, 1000, 1000, 700, 1000, 1000, 3, 1200, 1200, 1200, 1200, 1200];
    let dst = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0];
    let data: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut to = Names::new();
    for (i, &d) in dst.iter().enumerate() {
        to.set(i, rx[d].local_addr().unwrap());
    }
    let sent = send_gso(tx.as_raw_fd(), &refs, &mut to).unwrap();
    assert_eq!(sent.datagrams, sizes.len());
    // Runs: [1000 x3, 700], [1000, 1000, 3], [1200, 1200] to 0, [1200, 1200] to 1, [1200].
    assert_eq!((sent.runs, sent.in_runs), (4, 11));
    let mut buf = [0u8; 70000];
    for (d, &r) in data.iter().zip(&dst) {
        let n = rx[r].recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &d[..]);
    }
}

/// ESP in UDP with UDP GSO on the way out and UDP GRO on the way in (over loopback,
/// which keeps GSO sends whole): every datagram comes out of `recv_batch` as it was sent,
/// in order, ESP as it came with the datagram's addresses in its context, keepalives and
/// runts (an empty one too) sorted out, across more than one batch.
#[test]
fn gso_sends_come_apart_again_through_gro() {
    let rx = EncapSocket::open(LO, 0, &[LO], 9, Duration::from_millis(200)).unwrap();
    assert!(rx.gro, "this kernel (Linux >= 5.0) takes UDP_GRO");
    let mut to = Names::new();
    for i in 0..BATCH {
        to.set(i, SocketAddr::new(LO, rx.local_port().unwrap()));
    }
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sizes = vec![1000; 40];
    sizes.extend([300, 1, 0, 1200, 1200, 5]);
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| match n {
            1 => vec![udp_encap::KEEPALIVE],
            _ => (0..n).map(|j| (i * 3 + j) as u8 | 1).collect(),
        })
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut sent = 0;
    while sent < refs.len() {
        let k = (refs.len() - sent).min(BATCH);
        sent += send_gso(tx.as_raw_fd(), &refs[sent..sent + k], &mut to)
            .unwrap()
            .datagrams;
    }
    let mut b = Batch::new();
    let mut got: Vec<(RxKind, Vec<u8>)> = Vec::new();
    for _ in 0..20 {
        if got.len() == data.len() {
            break;
        }
        let n = rx.recv_batch(&mut b).unwrap();
        for i in 0..n {
            let p = b.packet(i);
            let kind = b.kind(i);
            got.push((kind, if kind == RxKind::Packet { p.to_vec() } else { Vec::new() }));
            if kind == RxKind::Packet {
                let a = b.context(i).arrival;
                assert_eq!(a.datagram, Some((LO, LO)));
                assert_eq!(a.encap.map(|p| p.dport), Some(rx.local_port().unwrap()));
            }
        }
    }
    let want: Vec<(RxKind, Vec<u8>)> = data
        .iter()
        .map(|d| match udp_encap::classify(d) {
            Payload::Esp => (RxKind::Packet, d.clone()),
            Payload::Keepalive => (RxKind::Keepalive, Vec::new()),
            Payload::NonEsp => (RxKind::NonEsp, Vec::new()),
            Payload::Runt => (RxKind::Runt, Vec::new()),
        })
        .collect();
    let brief = |v: &[(RxKind, Vec<u8>)]| v.iter().map(|(k, d)| (*k, d.len())).collect::<Vec<_>>();
    assert_eq!(brief(&got), brief(&want));
    // Loopback keeps a GSO send whole, so the runs came in coalesced: the 40 equal
    // datagrams (sent as runs of 32 and 8 + 300 + keepalive), and 1200, 1200, 5.
    let r = rx.runs();
    assert!(r.gro_reads >= 3 && r.gro_datagrams >= 40, "{r:?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "datagram {i}");
    }
}

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

const LO6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// Reads from any socket of `g` until a batch comes (5 s at most).
fn recv_any(g: &[EncapSocket]) -> Batch {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        for u in g {
            let mut b = Batch::new();
            if u.recv_batch(&mut b).unwrap() > 0 {
                return b;
            }
        }
    }
    panic!("nothing arrived on any socket of the group");
}

/// ESP-in-UDP sockets of one group share the port and the learned endpoints; a datagram
/// sent to the port arrives on one of them.
#[test]
fn udp_group_shares_port_and_endpoint() {
    let g = EncapSocket::open_group(LO, 0, &[LO], 4500, 2, Duration::from_millis(50)).unwrap();
    let port = g[0].local_port().unwrap();
    assert_eq!(g[1].local_port().unwrap(), port);
    assert_eq!(g[0].endpoint(LO), Some(SocketAddr::new(LO, 4500)));
    let from = SocketAddr::new(LO, 40001);
    g[1].authenticated(LO, from);
    assert_eq!(g[0].endpoint(LO), Some(from));
    assert_eq!(g[0].endpoints(), vec![(LO, from, true)]);
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(&[0xff], (Ipv4Addr::LOCALHOST, port)).unwrap();
    let b = recv_any(&g);
    assert_eq!(b.kind(0), RxKind::Keepalive);
    // Peers of the other IP version are refused.
    assert!(EncapSocket::open(LO, 0, &[LO6], 4500, Duration::ZERO).is_err());
}

/// Two peers on one socket: learning one peer's endpoint leaves the other's alone;
/// each sealed packet goes to its own peer's endpoint, in one batch; keepalives go to
/// both; a packet to an address that is not a peer is refused alone.
#[test]
fn udp_peers_have_their_own_endpoints() {
    let (b, c): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
    let g = EncapSocket::open_group(LO, 0, &[b, c], 4500, 1, Duration::from_millis(50)).unwrap();
    let sb = std::net::UdpSocket::bind((b, 0)).unwrap();
    let sc = std::net::UdpSocket::bind((c, 0)).unwrap();
    for s in [&sb, &sc] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    g[0].authenticated(b, sb.local_addr().unwrap());
    assert_eq!(g[0].endpoint(b), Some(sb.local_addr().unwrap()));
    assert_eq!(g[0].endpoint(c), Some(SocketAddr::new(c, 4500)), "C's is untouched");
    g[0].authenticated("127.0.0.9".parse().unwrap(), sc.local_addr().unwrap());
    assert_eq!(
        g[0].endpoint(c),
        Some(SocketAddr::new(c, 4500)),
        "not a peer: nothing moves"
    );
    g[0].authenticated(c, sc.local_addr().unwrap());
    // The ESP parts the engine sealed for a socket, with the routes it named.
    let (p1, p2, p3) = ([1u8; 16], [2u8; 16], [3u8; 16]);
    let (rb, rc) = (via(b, 0x0101_0101), via(c, 0x0202_0202));
    assert_eq!(g[0].send_batch(&[&p1, &p2, &p3], &[rb, rc, rb]).unwrap(), 3);
    let mut buf = [0u8; 64];
    for (s, tags) in [(&sb, [1u8, 3]), (&sc, [2, 2])] {
        for t in tags.iter().take(if tags[0] == tags[1] { 1 } else { 2 }) {
            let (n, from) = s.recv_from(&mut buf).unwrap();
            assert_eq!(from.port(), g[0].local_port().unwrap());
            assert_eq!(&buf[..n], &[*t; 16], "ESP payload only, to its peer");
        }
    }
    assert_eq!(g[0].send_keepalives().0, 2);
    for s in [&sb, &sc] {
        assert_eq!(s.recv_from(&mut buf).unwrap().0, 1);
        assert_eq!(buf[0], 0xff);
    }
    // A packet to a non-peer first: refused alone; later in a batch: the ones before go.
    let x = via("127.0.0.9".parse().unwrap(), 0x0101_0101);
    assert!(g[0].send_batch(&[&p1], &[x]).is_err());
    assert_eq!(g[0].send_batch(&[&p1, &p2], &[rb, x]).unwrap(), 1);
}

/// IKE adds a peer that is not configured (`remote_addrs = %any`): every socket of the
/// group can send to it at the endpoint IKE saw, the receiving side names it; taking
/// it out again leaves the configured peer; a configured peer is only moved, never
/// removed; the added peers are bounded.
#[test]
fn ike_adds_and_removes_peers_at_run_time() {
    let (b, c): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
    let g = EncapSocket::open_group(LO, 0, &[b], 4500, 2, Duration::from_millis(50)).unwrap();
    let sc = std::net::UdpSocket::bind((c, 0)).unwrap();
    sc.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let at = sc.local_addr().unwrap();
    let esp = [7u8; 16];
    let rc = via(c, 0x0707_0707);
    assert!(g[0].send_batch(&[&esp], &[rc]).is_err(), "not a peer yet");
    assert!(g[1].add_peer(at, 0x0707_0707, 1));
    assert_eq!(g[0].endpoint(c), Some(at));
    assert_eq!(
        g[0].endpoints(),
        vec![(b, SocketAddr::new(b, 4500), false), (c, at, true)]
    );
    assert_eq!(g[0].send_batch(&[&esp], &[rc]).unwrap(), 1);
    let mut buf = [0u8; 64];
    assert_eq!(sc.recv_from(&mut buf).unwrap().0, 16);
    assert_eq!(g[0].source_of(at), c, "datagrams from it are its");
    // Added twice: one entry; a configured peer given to add_peer only moves.
    assert!(g[0].add_peer(at, 0x0707_0707, 1));
    let moved = SocketAddr::new(b, 40000);
    assert!(g[0].add_peer(moved, 0x0808_0808, 2));
    assert_eq!(g[0].endpoints().len(), 2);
    assert_eq!(g[1].endpoint(b), Some(moved));
    g[0].remove_peer(c);
    assert_eq!(g[1].endpoints().len(), 2, "its child SA still uses it");
    g[0].remove_child(1);
    g[0].remove_child(2);
    g[0].remove_peer(b);
    assert_eq!(g[1].endpoints(), vec![(b, moved, true)], "the configured peer stays");
    assert!(g[0].send_batch(&[&esp], &[rc]).is_err(), "gone");
    // Bounded: MAX_DYNAMIC_PEERS added, then no more.
    for i in 0..MAX_DYNAMIC_PEERS as u32 {
        let p = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        assert!(g[0].add_peer(SocketAddr::new(p, 4500), i, 100 + i));
    }
    let one_more: IpAddr = "10.255.0.1".parse().unwrap();
    assert!(!g[0].add_peer(SocketAddr::new(one_more, 4500), 1, 99));
    assert_eq!(g[0].endpoint(one_more), None);
}

/// Issue #31 defect 5: two road warriors behind one NAT address (127.0.0.7 here), each
/// with its own port and child SA, added by IKE (`%any`). Each SA's sealed packets go
/// to its own client's port, also in one batch; ESP from one client's port moves nobody;
/// IKE moving one client leaves the other; taking one client's SA out leaves the other's.
/// (Before: the address had one endpoint, which B's handshake moved to B's port, and all
/// of A's packets went there.)
#[test]
fn two_clients_behind_one_nat_address_keep_their_own_endpoints() {
    let nat: IpAddr = "127.0.0.7".parse().unwrap();
    let g = EncapSocket::open_group(LO, 0, &[], 4500, 2, Duration::from_millis(50)).unwrap();
    let client = || {
        let s = std::net::UdpSocket::bind((nat, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    };
    let (a, b) = (client(), client());
    let (at_a, at_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    // A's child SA: out SPI 0xa0a0a0a0, in 0x1a; B's: out 0xb0b0b0b0, in 0x1b.
    assert!(g[0].add_peer(at_a, 0xa0a0_a0a0, 0x1a));
    assert!(g[1].add_peer(at_b, 0xb0b0_b0b0, 0x1b));
    assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a));
    assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(at_b));
    assert_eq!(g[1].endpoints(), vec![(nat, at_a, true), (nat, at_b, true)]);
    // An ESP part sealed for a socket, and the route the engine named with it.
    let esp = |spi: u32, tag: u8| {
        let mut p = spi.to_be_bytes().to_vec();
        p.extend_from_slice(&[tag; 12]);
        (p, via(nat, spi))
    };
    let got = |s: &std::net::UdpSocket| {
        let mut buf = [0u8; 64];
        let n = s.recv(&mut buf).unwrap();
        (u32::from_be_bytes(buf[..4].try_into().unwrap()), buf[4], n)
    };
    let expect_each = |g: &EncapSocket, what: &str| {
        let ((pa, ra), (pb, rb)) = (esp(0xa0a0_a0a0, 1), esp(0xb0b0_b0b0, 2));
        assert_eq!(g.send_batch(&[&pa, &pb, &pa], &[ra, rb, ra]).unwrap(), 3, "{what}");
        assert_eq!(got(&a), (0xa0a0_a0a0, 1, 16), "{what}: A's first packet at A's port");
        assert_eq!(got(&a), (0xa0a0_a0a0, 1, 16), "{what}: A's second packet at A's port");
        assert_eq!(got(&b), (0xb0b0_b0b0, 2, 16), "{what}: B's packet at B's port");
    };
    expect_each(&g[0], "both up");
    // ESP authenticated from A's port, and from a third port: nobody moves (two clients
    // at that address: the data plane cannot tell whose).
    g[0].authenticated(nat, at_a);
    g[0].authenticated(nat, SocketAddr::new(nat, 9));
    expect_each(&g[1], "after ESP from A's port and another");
    // A packet of an SA that is not IKE's to that address: neither client's, refused.
    let (pc, rc) = esp(0xc0c0_c0c0, 3);
    assert!(g[0].send_batch(&[&pc], &[rc]).is_err());
    // IKE: A's NAT mapping moves to a new port; B stays.
    let a2 = client();
    let at_a2 = a2.local_addr().unwrap();
    g[1].moved(at_a, at_a2);
    assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a2));
    assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(at_b), "B's endpoint is B's");
    // The NAT gives A's old port to a third client C: its own endpoint, A's stays moved.
    assert!(g[0].add_peer(at_a, 0xc0c0_c0c0, 0x1c));
    assert_eq!(g[0].child_endpoint(nat, 0xc0c0_c0c0), Some(at_a));
    assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a2));
    assert_eq!(g[0].endpoints().len(), 3);
    g[0].remove_child(0x1c);
    // A's child SA goes: B's endpoint and SA stay, and so does the address's peer
    // (IKE's remove_peer when A's IKE SA is gone takes out only unused endpoints).
    g[0].remove_child(0x1a);
    g[0].remove_peer(nat);
    assert_eq!(g[1].endpoints(), vec![(nat, at_b, true)]);
    assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), None);
    let (pb, rb) = esp(0xb0b0_b0b0, 4);
    assert_eq!(g[0].send_batch(&[&pb], &[rb]).unwrap(), 1);
    assert_eq!(got(&b), (0xb0b0_b0b0, 4, 16), "B's packets still at B's port");
    // B alone at that address now: its ESP from a new port moves it (NAT rebinding).
    let b2 = client();
    g[0].authenticated(nat, b2.local_addr().unwrap());
    assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(b2.local_addr().unwrap()));
    g[0].remove_child(0x1b);
    assert!(g[0].endpoints().is_empty());
}

/// ESP in UDP over IPv6: the batch read leaves the ESP payload as it came, the datagram's
/// addresses (the peer's configured address, the local one) in its context; the single read
/// gives the whole IPv6 packet, its header put back in front.
#[test]
fn udp_over_ipv6_tells_the_addresses() {
    let g = match EncapSocket::open_group(LO6, 0, &[LO6], 4500, 1, Duration::from_millis(50)) {
        Ok(g) => g,
        Err(e) => {
            not_run(&format!("no IPv6 loopback here: {e}"));
            return;
        }
    };
    let client = std::net::UdpSocket::bind("[::1]:0").unwrap();
    let esp = [0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 0xab, 0xcd];
    client
        .send_to(&esp, (Ipv6Addr::LOCALHOST, g[0].local_port().unwrap()))
        .unwrap();
    let b = recv_any(&g);
    assert_eq!(b.kind(0), RxKind::Packet);
    assert_eq!(b.packet(0), &esp);
    assert_eq!(b.context(0).arrival.datagram, Some((LO6, LO6)));
    assert_eq!(b.src(0), Some(client.local_addr().unwrap()));
    // And the single read path.
    client
        .send_to(&esp, (Ipv6Addr::LOCALHOST, g[0].local_port().unwrap()))
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let t0 = Instant::now();
    let n = loop {
        if let Some(n) = g[0].recv(&mut buf).unwrap() {
            break n;
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
    };
    let p = &buf[..n];
    assert_eq!(p.len(), 40 + esp.len());
    assert_eq!(
        (p[0] >> 4, p[6], usize::from(u16::from_be_bytes([p[4], p[5]]))),
        (6, 50, esp.len())
    );
    assert_eq!(&p[8..24], &Ipv6Addr::LOCALHOST.octets());
    assert_eq!(&p[24..40], &Ipv6Addr::LOCALHOST.octets());
    assert_eq!(&p[40..], &esp);
}

/// Our address changed (`ipsec ike update`, RFC 4555 3.5): every socket of the group is
/// bound to the new address on its port, in the place of the old one (the same socket
/// object, as the workers hold it); sealed packets leave from the new address, and
/// datagrams to it arrive; what the engine is told as our address stays the one the SAs
/// were installed with.
#[test]
fn udp_group_moves_to_a_new_local_address() {
    let (b, moved): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.5".parse().unwrap());
    let g = EncapSocket::open_group(LO, 0, &[b], 4500, 2, Duration::from_millis(50)).unwrap();
    let port = g[0].local_port().unwrap();
    let sb = std::net::UdpSocket::bind((b, 0)).unwrap();
    sb.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    g[0].authenticated(b, sb.local_addr().unwrap());
    for u in &g {
        u.rebind(moved).unwrap();
        assert_eq!(u.bound_to().unwrap(), SocketAddr::new(moved, port));
        assert_eq!(u.local(), LO, "the SAs' name for our address");
    }
    assert!(g[0].rebind(LO6).is_err(), "not to another IP version");
    assert_eq!(g[1].send_batch(&[&[7u8; 16]], &[via(b, 0x0101_0101)]).unwrap(), 1);
    let mut buf = [0u8; 64];
    let (n, from) = sb.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&[7u8; 16][..], SocketAddr::new(moved, port)));
    sb.send_to(&[0xff], (moved, port)).unwrap();
    assert_eq!(recv_any(&g).kind(0), RxKind::Keepalive);
}
