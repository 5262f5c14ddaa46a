//! Adaptive IPComp: the model's inputs reach it on the daemon's paths (issue #23).

use super::*;

/// A comp (mode `model`, link unknown) + ESP bundle each way.
fn bundle_model(src: &str, dst: &str, spi: u32) -> Vec<SaConfig> {
    let mut c = comp("comp", spi + 0x100);
    c.adaptive = ipsec_ipcomp::Adaptive {
        mode: ipsec_ipcomp::AdaptiveMode::Model,
        link_bps: 0,
        ..Default::default()
    };
    vec![c, esp_gcm("esp", spi, src, dst)]
}

/// An IPv4 UDP packet of `len` payload bytes from a seeded generator: incompressible.
fn random_udp(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([10, 100, 0, 1], [10, 100, 0, 2], 64)
        .udp(5000, 5001)
        .write(&mut out, &data)
        .unwrap();
    out
}

/// The outbound model SA's model snapshot of a tunnel.
fn model_of(t: &Tunnel) -> ipsec_engine::ModelSnapshot {
    let snap = t.engine().snapshot(t.now());
    let s = snap.sas.iter().find(|s| s.name == "comp-out").expect("comp-out");
    s.comp.as_ref().and_then(|c| c.model.clone()).expect("a model")
}

/// tunneld's loops seal through `outbound_batch` with the batch's own worker: the model must
/// get its compression and crypto timings there too. Before the fix the batch's worker had
/// no clock, the model saw nothing and kept compressing random data forever (issue #23).
#[test]
fn the_model_is_fed_on_the_batch_path_and_skips_random_data() {
    let (a, _b) = pair(bundle_model);
    let wire = FakeWire::default();
    let mut batch = Batch::new();
    for round in 0..8u64 {
        for i in 0..BATCH {
            let p = random_udp(round * 100 + i as u64, 1300);
            batch.recv_area(i)[..p.len()].copy_from_slice(&p);
            batch.set(i, p.len(), RxKind::Packet, None);
        }
        a.outbound_batch(&mut batch, BATCH, &wire);
    }
    assert_eq!(wire.take().len(), 8 * BATCH);
    let m = model_of(&a);
    assert!(m.comp_mbps.is_some(), "no compression timing reached the model: {m:?}");
    assert!(m.enc_mbps.is_some(), "no encryption timing reached the model: {m:?}");
    assert_eq!(m.decision, "skip", "random data does not compress: {m:?}");
    assert!(m.samples >= 1 && m.untimed == 0, "{m:?}");
}

/// The same through the one-packet path.
#[test]
fn the_model_is_fed_on_the_single_packet_path_and_skips_random_data() {
    let (a, _b) = pair(bundle_model);
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    for i in 0..64u64 {
        let n = pkt.load(&random_udp(i, 1300));
        assert_eq!(a.outbound(&mut pkt, n, &wire), Outcome::Forwarded);
    }
    let m = model_of(&a);
    assert!(m.comp_mbps.is_some(), "{m:?}");
    assert_eq!(m.decision, "skip", "{m:?}");
}

/// An SA with `encap espinudp` opens what a real ESP-in-UDP socket received on its port: the
/// socket records the datagram's ports in the packet's context and the engine checks them
/// against the SA (RFC 3948 5.2). An SA whose `encap` names another port refuses the same
/// packet as `encap_mismatch`, counted at the SA.
#[test]
fn an_sa_with_encap_opens_what_arrived_on_its_port() {
    use crate::dev::udp::EncapSocket;
    use ipsec_engine::UdpEncap as Encap;
    use std::net::UdpSocket;
    let (a, b) = ("127.0.0.1", "127.0.0.2");
    let g = EncapSocket::open_group(ip(a), 0, &[ip(b)], 4500, 1, Duration::from_millis(50)).unwrap();
    let port = g[0].local_port().unwrap();
    let sender = {
        let mut e = Engine::new();
        let o = e.add_sa(esp_gcm("o", 0x6001, b, a), Duration::ZERO).unwrap();
        to_inner(&mut e, Direction::Out, "10.100.0.0/24", vec![o]);
        Tunnel::new(e, vec![ip(a)])
    };
    let from = UdpSocket::bind((ip(b), 0)).unwrap();
    for (dport, opens) in [(port, true), (port.wrapping_add(1), false)] {
        let mut e = Engine::new();
        let mut c = esp_gcm("i", 0x6001, b, a);
        c.encap = Some(Encap {
            sport: 4500,
            dport,
            oa: None,
        });
        let i = e.add_sa(c, Duration::ZERO).unwrap();
        to_inner(&mut e, Direction::In, "10.100.0.0/24", vec![i]);
        let host = Tunnel::new(e, vec![ip(b)]);
        let wire = seal(&sender, &udp4([10, 100, 0, 2], [10, 100, 0, 1], 1));
        from.send_to(ipsec_engine::udp_encap::socket_payload(&wire).unwrap(), (ip(a), port))
            .unwrap();
        let mut batch = Batch::new();
        let t0 = Instant::now();
        let n = loop {
            let n = g[0].recv_batch(&mut batch).unwrap();
            if n > 0 {
                break n;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "nothing arrived");
        };
        let ports = batch.context(0).arrival.encap.unwrap();
        assert_eq!((ports.sport, ports.dport), (from.local_addr().unwrap().port(), port));
        let tun = FakeTun::default();
        host.inbound_batch(&mut batch, n, &g[0], &mut TunPort::new(&tun));
        assert_eq!(tun.written().len(), usize::from(opens), "SA encap dport {dport}");
        let (r, _) = host.tick();
        assert_eq!(sa(&r, "i").inbound.drops.encap_mismatch, u64::from(!opens));
    }
}
