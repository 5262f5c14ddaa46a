//! The core on in-memory devices: packets in, packets out, drops counted.

use super::*;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Endpoints};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::{Action, Direction, DropReason, Lifetime, Limits, Policy, SaConfig, SaId, Selector};
use ipsec_ipcomp::Algorithm;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

const A: &str = "10.99.0.1";
const B: &str = "10.99.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

// ---- fakes ------------------------------------------------------------------------------

/// A TUN device: packets queued to be read, packets written, and failures on demand.
#[derive(Default)]
struct FakeTun {
    to_read: Mutex<VecDeque<io::Result<Vec<u8>>>>,
    written: Mutex<Vec<Vec<u8>>>,
    fail_writes: AtomicBool,
    /// Reads and writes carry a virtio-net header (what is written is header + packet).
    offload: bool,
}

impl FakeTun {
    fn queue(&self, p: Vec<u8>) {
        self.to_read.lock().unwrap().push_back(Ok(p));
    }
    fn queue_error(&self, kind: io::ErrorKind) {
        self.to_read.lock().unwrap().push_back(Err(kind.into()));
    }
    fn written(&self) -> Vec<Vec<u8>> {
        self.written.lock().unwrap().clone()
    }
}

impl TunIo for FakeTun {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.to_read.lock().unwrap().pop_front() {
            Some(Ok(p)) => {
                buf[..p.len()].copy_from_slice(&p);
                Ok(Some(p.len()))
            }
            Some(Err(e)) => Err(e),
            None => {
                std::thread::sleep(Duration::from_millis(1));
                Ok(None)
            }
        }
    }
    fn send(&self, packet: &[u8]) -> io::Result<()> {
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        self.written.lock().unwrap().push(packet.to_vec());
        Ok(())
    }
    fn offload(&self) -> bool {
        self.offload
    }
    fn send_vnet(&self, hdr: &[u8; crate::dev::tun::offload::VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
        assert!(self.offload, "a header written to a device without offloads");
        self.send(&[&hdr[..], packet].concat())
    }
}

/// The wire between two hosts: what one sends, the other reads.
#[derive(Default)]
struct FakeWire {
    packets: Mutex<VecDeque<(Vec<u8>, IpAddr)>>,
    fail_sends: AtomicBool,
}

impl FakeWire {
    fn take(&self) -> Vec<(Vec<u8>, IpAddr)> {
        self.packets.lock().unwrap().drain(..).collect()
    }
}

impl UnderlayTx for FakeWire {
    fn send_to(&self, packet: &[u8], route: &ipsec_engine::Route) -> io::Result<()> {
        if self.fail_sends.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        self.packets.lock().unwrap().push_back((packet.to_vec(), route.to));
        Ok(())
    }
}

impl UnderlayRx for FakeWire {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.packets.lock().unwrap().pop_front() {
            Some((p, _)) => {
                buf[..p.len()].copy_from_slice(&p);
                Ok(Some(p.len()))
            }
            None => {
                std::thread::sleep(Duration::from_millis(1));
                Ok(None)
            }
        }
    }
}

// ---- SAs, engines, packets --------------------------------------------------------------

fn endpoints(src: &str, dst: &str) -> Option<Endpoints> {
    Some(Endpoints {
        src: ip(src),
        dst: ip(dst),
    })
}

fn esp_gcm(name: &str, spi: u32, src: &str, dst: &str) -> SaConfig {
    let mut p = SaParams::new(Proto::Esp, spi);
    p.mode = Mode::Tunnel;
    p.tunnel = endpoints(src, dst);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[spi as u8; 20], 16));
    SaConfig::new(name, p, None)
}

fn esp_cbc(name: &str, spi: u32, src: &str, dst: &str) -> SaConfig {
    let mut p = SaParams::new(Proto::Esp, spi);
    p.mode = Mode::Tunnel;
    p.tunnel = endpoints(src, dst);
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[spi as u8; 16], 0));
    p.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[!spi as u8; 32], 16));
    SaConfig::new(name, p, None)
}

fn ah_transport(name: &str, spi: u32, src: &str, dst: &str) -> SaConfig {
    let mut p = SaParams::new(Proto::Ah, spi);
    p.tunnel = endpoints(src, dst);
    p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[spi as u8; 20], 12));
    SaConfig::new(name, p, None)
}

fn comp(name: &str, cpi: u32) -> SaConfig {
    SaConfig::new(name, SaParams::new(Proto::Comp, cpi), Some(Algorithm::Deflate))
}

/// The SAs of one direction, in seal order, from `src` to `dst`.
type BundleFn = fn(&str, &str, u32) -> Vec<SaConfig>;

fn bundle_esp(src: &str, dst: &str, spi: u32) -> Vec<SaConfig> {
    vec![esp_gcm("esp", spi, src, dst)]
}

fn bundle_comp_esp(src: &str, dst: &str, spi: u32) -> Vec<SaConfig> {
    vec![comp("comp", spi + 0x100), esp_cbc("esp", spi, src, dst)]
}

fn bundle_esp_ah(src: &str, dst: &str, spi: u32) -> Vec<SaConfig> {
    vec![esp_cbc("esp", spi, src, dst), ah_transport("ah", spi + 0x200, src, dst)]
}

fn install(e: &mut Engine, sas: Vec<SaConfig>, dir: Direction, suffix: &str) -> Vec<SaId> {
    let ids: Vec<SaId> = sas
        .into_iter()
        .map(|mut c| {
            c.name = format!("{}-{suffix}", c.name);
            e.add_sa(c, Duration::ZERO).unwrap()
        })
        .collect();
    e.add_policy(Policy {
        dir,
        selector: Selector::default(),
        action: Action::Protect(ids.clone()),
    })
    .unwrap();
    ids
}

/// An engine for `local` talking to `peer` with `bundle` each way (SPIs 0x1001 from A to B,
/// 0x1002 back).
fn engine(local: &str, peer: &str, bundle: BundleFn) -> Engine {
    let (out_spi, in_spi) = if local == A { (0x1001, 0x1002) } else { (0x1002, 0x1001) };
    let mut e = Engine::new();
    install(&mut e, bundle(local, peer, out_spi), Direction::Out, "out");
    install(&mut e, bundle(peer, local, in_spi), Direction::In, "in");
    e
}

fn pair(bundle: BundleFn) -> (Tunnel, Tunnel) {
    (
        Tunnel::new(engine(A, B, bundle), vec![ip(B)]),
        Tunnel::new(engine(B, A, bundle), vec![ip(A)]),
    )
}

fn payload(len: usize) -> Vec<u8> {
    b"abcdefghijklmnopqrstuvwxyz0123456789"
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect()
}

fn ping4(seq: u16, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([10, 100, 0, 1], [10, 100, 0, 2], 64)
        .icmpv4_echo_request(7, seq)
        .write(&mut out, &payload(len))
        .unwrap();
    out
}

fn ping6(seq: u16, len: usize) -> Vec<u8> {
    let a: Ipv6 = "fd00:100::1".parse().unwrap();
    let b: Ipv6 = "fd00:100::2".parse().unwrap();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv6(a.octets(), b.octets(), 64)
        .icmpv6_echo_request(7, seq)
        .write(&mut out, &payload(len))
        .unwrap();
    out
}

type Ipv6 = std::net::Ipv6Addr;

/// Sends `inner` from `from` (its TUN) to the wire; returns the wire packet.
fn seal(from: &Tunnel, inner: &[u8]) -> Vec<u8> {
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(inner);
    assert_eq!(from.outbound(&mut pkt, n, &wire), Outcome::Forwarded);
    let mut sent = wire.take();
    assert_eq!(sent.len(), 1);
    sent.pop().unwrap().0
}

/// Gives `wire` to `to` (from its underlay); returns the outcome and what reached its TUN.
fn open(to: &Tunnel, wire: &[u8]) -> (Outcome, Option<Vec<u8>>) {
    let tun = FakeTun::default();
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(wire);
    let o = to.inbound(&mut pkt, n, &tun);
    let mut w = tun.written();
    assert!(w.len() <= 1);
    (o, w.pop())
}

fn sa<'a>(r: &'a Report, name: &str) -> &'a ipsec_engine::SaSnapshot {
    r.engine.sas.iter().find(|s| s.name == name).unwrap()
}

/// A TCP super-packet read from a device with offloads and `payload` bytes cut into
/// `gso_size`-byte segments, as the kernel hands it over (checksum field: the pseudo-header
/// sum), and its virtio-net header.
fn super_packet(payload_len: usize, gso_size: u16, psh: bool) -> (crate::dev::tun::offload::VnetHdr, Vec<u8>) {
    use crate::dev::tun::offload::{VnetHdr, F_NEEDS_CSUM, GSO_TCPV4};
    let mut sp = Vec::new();
    let tcp = etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 5201, 1000, 500)
        .ack(77);
    let tcp = if psh { tcp.psh() } else { tcp };
    tcp.write(&mut sp, &payload(payload_len)).unwrap();
    let mut sum: u32 = 6 + (sp.len() as u32 - 20);
    for c in sp[12..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sp[36..38].copy_from_slice(&(sum as u16).to_be_bytes());
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 40,
        gso_size,
        csum_start: 20,
        csum_offset: 16,
    };
    (hdr, sp)
}

/// A policy for inner destination `dst` only.
fn to_inner(e: &mut Engine, dir: Direction, inner: &str, ids: Vec<SaId>) {
    let p: ipsec_engine::Prefix = inner.parse().unwrap();
    let selector = match dir {
        Direction::Out => Selector {
            dst: Some(p),
            ..Selector::default()
        },
        Direction::In => Selector {
            src: Some(p),
            ..Selector::default()
        },
    };
    e.add_policy(Policy {
        dir,
        selector,
        action: Action::Protect(ids),
    })
    .unwrap();
}

fn udp4(src: [u8; 4], dst: [u8; 4], tag: u8) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4(src, dst, 64)
        .udp(1000, 2000)
        .write(&mut out, &[tag; 40])
        .unwrap();
    out
}

/// Puts `packets` into `batch`'s first slots as packets read from a device.
fn load<'p>(batch: &mut Batch, packets: impl IntoIterator<Item = &'p [u8]>) {
    for (i, p) in packets.into_iter().enumerate() {
        batch.recv_area(i)[..p.len()].copy_from_slice(p);
        batch.set(i, p.len(), RxKind::Packet, None);
    }
}

// ---- tests ------------------------------------------------------------------------------

#[test]
fn ipv4_and_ipv6_go_through_both_ways() {
    let (a, b) = pair(bundle_esp);
    for inner in [ping4(1, 56), ping6(2, 56), ping4(3, 1400), ping6(4, 1200)] {
        let wire = {
            let w = FakeWire::default();
            let mut pkt = PacketBuffer::new();
            let n = pkt.load(&inner);
            assert_eq!(a.outbound(&mut pkt, n, &w), Outcome::Forwarded);
            let mut sent = w.take();
            let (p, dst) = sent.pop().unwrap();
            assert_eq!(dst, ip(B));
            p
        };
        assert_eq!(wire[0] >> 4, 4, "IPv4 underlay");
        assert_eq!(wire[9], 50, "ESP on the wire");
        assert_eq!(
            &wire[12..20],
            &[10, 99, 0, 1, 10, 99, 0, 2],
            "outer addresses are the hosts'"
        );
        assert_eq!(open(&b, &wire), (Outcome::Forwarded, Some(inner.clone())));
        // And back.
        let back = seal(&b, &inner);
        assert_eq!(open(&a, &back), (Outcome::Forwarded, Some(inner)));
    }
    let (ra, _) = a.tick();
    let (rb, _) = b.tick();
    assert_eq!(ra.daemon.tun_rx_packets, 4);
    assert_eq!(ra.daemon.underlay_tx_packets, 4);
    assert_eq!(ra.daemon.underlay_rx_packets, 4);
    assert_eq!(ra.daemon.tun_tx_packets, 4);
    assert_eq!(rb.daemon.underlay_tx_bytes, ra.daemon.underlay_rx_bytes);
    assert_eq!(sa(&ra, "esp-out").outbound.packets, 4);
    assert_eq!(sa(&rb, "esp-in").inbound.packets, 4);
    assert_eq!(ra.daemon.engine_in_drops + ra.daemon.engine_out_drops, 0);
}

#[test]
fn bad_underlay_input_is_counted_and_the_tunnel_keeps_working() {
    let (a, b) = pair(bundle_esp);
    let good = seal(&a, &ping4(1, 100));
    let next = seal(&a, &ping4(2, 100));

    let mut unknown_spi = good.clone();
    unknown_spi[20..24].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
    let mut flipped = next.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let truncated = good[..23].to_vec(); // 3 bytes of ESP header
    let random: Vec<u8> = (0..200u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();

    for bad in [&unknown_spi, &flipped, &truncated, &random, &Vec::new()] {
        let (o, out) = open(&b, bad);
        assert!(matches!(o, Outcome::Engine(_)), "{o:?}");
        assert_eq!(out, None);
    }
    assert_eq!(open(&b, &good).0, Outcome::Forwarded);
    // The same packet again: a replay.
    match open(&b, &good).0 {
        Outcome::Engine(d) => assert_eq!(d.reason, DropReason::Replay),
        o => panic!("{o:?}"),
    }
    // The tunnel still works: the packet whose copy was flipped goes through.
    assert_eq!(open(&b, &next), (Outcome::Forwarded, Some(ping4(2, 100))));

    let (r, _) = b.tick();
    assert_eq!(r.daemon.underlay_rx_packets, 8);
    assert_eq!(r.daemon.engine_in_drops, 6);
    assert_eq!(r.daemon.tun_tx_packets, 2);
    assert_eq!(r.engine.inbound_drops.no_sa, 1);
    assert_eq!(r.engine.inbound_drops.malformed, 3, "truncated, random, empty");
    let esp = sa(&r, "esp-in");
    assert_eq!((esp.inbound.drops.bad_icv, esp.inbound.drops.replay), (1, 1));
    assert_eq!(esp.inbound.packets, 2);
}

#[test]
fn tun_garbage_and_io_errors_are_counted() {
    let (a, b) = pair(bundle_esp);
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    for junk in [&[0x00u8, 1, 2, 3][..], &[0x60][..], &[][..], &[0x45; 10][..]] {
        let n = pkt.load(junk);
        let o = a.outbound(&mut pkt, n, &wire);
        assert!(
            matches!(o, Outcome::Daemon(DaemonDrop::NotIp) | Outcome::Engine(_)),
            "{o:?}"
        );
    }
    wire.fail_sends.store(true, Ordering::Relaxed);
    let n = pkt.load(&ping4(1, 64));
    assert!(matches!(a.outbound(&mut pkt, n, &wire), Outcome::Lost(_)));
    let r = a.counters().snapshot();
    assert_eq!(r.tun_rx_packets, 5);
    assert_eq!(r.not_ip, 2, "version 0 and empty");
    assert_eq!(r.engine_out_drops, 2, "a bare IPv6 byte and a truncated IPv4 header");
    assert_eq!(r.underlay_send_errors, 1);
    assert_eq!(r.underlay_tx_packets, 0);

    let sealed = seal(&a, &ping4(2, 64));
    let tun = FakeTun::default();
    tun.fail_writes.store(true, Ordering::Relaxed);
    let n = pkt.load(&sealed);
    assert_eq!(b.inbound(&mut pkt, n, &tun), Outcome::Lost(io::ErrorKind::OutOfMemory));
    assert_eq!(b.counters().snapshot().tun_write_errors, 1);
}

#[test]
fn sealed_packets_go_only_to_the_peer() {
    let t = Tunnel::new(engine(A, B, bundle_esp), vec![ip("10.99.0.9"), ip("fd00:99::2")]);
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(&ping6(1, 10));
    assert_eq!(t.outbound(&mut pkt, n, &wire), Outcome::Daemon(DaemonDrop::NotToPeer));
    assert!(wire.take().is_empty());
    assert_eq!(t.counters().snapshot().not_to_peer, 1);

    // Transport mode: the sealed packet keeps the inner addresses, which are not the peer.
    let mut e = Engine::new();
    let mut p = SaParams::new(Proto::Esp, 0x2000);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[1; 20], 16));
    install(&mut e, vec![SaConfig::new("t", p, None)], Direction::Out, "out");
    let t = Tunnel::new(e, vec![ip(B)]);
    let n = pkt.load(&ping4(1, 10));
    assert_eq!(t.outbound(&mut pkt, n, &wire), Outcome::Daemon(DaemonDrop::NotToPeer));
}

#[test]
fn bypass_policies_send_nothing_in_the_clear() {
    let mut e = Engine::new();
    for dir in [Direction::Out, Direction::In] {
        e.add_policy(Policy {
            dir,
            selector: Selector::default(),
            action: Action::Bypass,
        })
        .unwrap();
    }
    let t = Tunnel::new(e, Vec::new());
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(&ping4(1, 10));
    assert_eq!(t.outbound(&mut pkt, n, &wire), Outcome::Daemon(DaemonDrop::Bypass));
    assert!(wire.take().is_empty());
    assert_eq!(t.counters().snapshot().bypass_dropped, 1);
}

#[test]
fn loops_carry_packets_until_stopped_and_survive_errors() {
    let (a, b) = pair(bundle_esp);
    let (tun_a, tun_b, wire) = (FakeTun::default(), FakeTun::default(), FakeWire::default());
    let mut sent = Vec::new();
    for i in 0..40u16 {
        let p = if i % 2 == 0 {
            ping4(i, 100 + i as usize)
        } else {
            ping6(i, 100)
        };
        if i == 10 {
            tun_a.queue_error(io::ErrorKind::Other);
            tun_a.queue(vec![0xff; 30]); // not IP
            tun_a.queue_error(io::ErrorKind::Interrupted); // not an error
        }
        tun_a.queue(p.clone());
        sent.push(p);
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| run_outbound(&a, &tun_a, &wire, &stop));
        s.spawn(|| run_inbound(&b, &wire, &tun_b, &stop));
        let t0 = Instant::now();
        while tun_b.written().len() < sent.len() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(tun_b.written(), sent, "every packet, in order");
    let ra = a.counters().snapshot();
    assert_eq!((ra.tun_rx_packets, ra.not_ip, ra.tun_read_errors), (41, 1, 1));
    assert_eq!(ra.underlay_tx_packets, 40);
    let rb = b.counters().snapshot();
    assert_eq!((rb.underlay_rx_packets, rb.tun_tx_packets), (40, 40));
}

#[test]
fn bundles_with_ipcomp_and_ah_go_through() {
    let (a, b) = pair(bundle_comp_esp);
    let big = ping4(1, 1200); // text: compresses
    let small = ping6(2, 20); // under IPComp's 90-byte threshold: sent uncompressed
    let w_big = seal(&a, &big);
    let w_small = seal(&a, &small);
    assert!(w_big.len() < big.len(), "compressed: {} < {}", w_big.len(), big.len());
    assert_eq!(open(&b, &w_big), (Outcome::Forwarded, Some(big)));
    assert_eq!(open(&b, &w_small), (Outcome::Forwarded, Some(small)));
    let (ra, _) = a.tick();
    let (rb, _) = b.tick();
    let c = sa(&ra, "comp-out").outbound;
    assert_eq!((c.packets, c.not_compressed), (2, 1));
    assert!(c.overhead_bytes < 0);
    assert_eq!(sa(&rb, "comp-in").inbound.packets, 1);
    assert_eq!(sa(&rb, "comp-in").inbound.not_compressed, 1);
    assert_eq!(sa(&rb, "esp-in").inbound.packets, 2);

    let (a, b) = pair(bundle_esp_ah);
    for inner in [ping4(3, 300), ping6(4, 300)] {
        let w = seal(&a, &inner);
        assert_eq!(w[9], 51, "AH outermost");
        assert_eq!(open(&b, &w), (Outcome::Forwarded, Some(inner)));
    }
    let (rb, _) = b.tick();
    assert_eq!(sa(&rb, "ah-in").inbound.packets, 2);
    assert_eq!(sa(&rb, "esp-in").inbound.packets, 2);
}

#[test]
fn headroom_and_tailroom_fit_the_worst_bundle() {
    // IPComp, then ESP and AH each in tunnel mode with IPv6 outer headers and the largest
    // ICVs. (IPComp in tunnel mode would add a third outer header on a packet it cannot
    // compress, but the engine does not take such a packet apart again on input.)
    let x = "2001:db8::1";
    let y = "2001:db8::2";
    let worst = |spi: u32| -> Vec<SaConfig> {
        let c = SaParams::new(Proto::Comp, spi);
        let mut e = SaParams::new(Proto::Esp, spi);
        e.mode = Mode::Tunnel;
        e.tunnel = endpoints(x, y);
        e.enc = Some(Keyed::new(EncAlg::AesCbc, &[3; 32], 0));
        e.integ = Some(Keyed::new(IntegAlg::HmacSha512, &[4; 64], 32));
        let mut h = SaParams::new(Proto::Ah, spi);
        h.mode = Mode::Tunnel;
        h.tunnel = endpoints(x, y);
        h.integ = Some(Keyed::new(IntegAlg::HmacSha512, &[5; 64], 32));
        vec![
            SaConfig::new("c", c, Some(Algorithm::Deflate)),
            SaConfig::new("e", e, None),
            SaConfig::new("h", h, None),
        ]
    };
    let mut tx = Engine::new();
    install(&mut tx, worst(0x3000), Direction::Out, "out");
    let mut rx = Engine::new();
    install(&mut rx, worst(0x3000), Direction::In, "in");
    // Incompressible: IPComp sends it as it was, in its own tunnel.
    let mut inner = ping6(1, 0);
    let mut x: u32 = 12345;
    inner.extend((0..60_000).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    }));
    let plen = (inner.len() - 40) as u16;
    inner[4..6].copy_from_slice(&plen.to_be_bytes());
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(&inner);
    let (mut buf, _) = pkt.parts(n);
    assert!(matches!(
        tx.outbound(&mut buf, Duration::ZERO),
        Ok(Verdict::Protected(_))
    ));
    let added = buf.len() - inner.len();
    assert!(
        HEADROOM - buf.headroom() <= 212,
        "headers: {}",
        HEADROOM - buf.headroom()
    );
    assert!(added <= 212 + 64, "{added}");
    assert!(rx.inbound(&mut buf, Duration::ZERO).is_ok());
    assert_eq!(buf.packet(), &inner[..]);
}

#[test]
fn tick_reports_counters_and_lifetime_events() {
    let mut e = Engine::new();
    let mut c = esp_gcm("esp", 0x1001, A, B);
    c.lifetime = Lifetime {
        soft: Limits {
            packets: Some(1),
            ..Limits::default()
        },
        hard: Limits {
            packets: Some(2),
            ..Limits::default()
        },
    };
    install(&mut e, vec![c], Direction::Out, "out");
    let t = Tunnel::new(e, vec![ip(B)]);
    let wire = FakeWire::default();
    let mut pkt = PacketBuffer::new();
    for _ in 0..3 {
        let n = pkt.load(&ping4(1, 10));
        t.outbound(&mut pkt, n, &wire);
    }
    let (r, events) = t.tick();
    assert!(
        matches!(events[..], [Event::SoftExpired { .. }, Event::HardExpired { .. }]),
        "{events:?}"
    );
    assert_eq!(wire.take().len(), 2);
    assert_eq!(sa(&r, "esp-out").outbound.drops.expired, 1);
    assert_eq!(r.daemon.engine_out_drops, 1);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["daemon"]["underlay_tx_packets"], 2);
    assert_eq!(json["engine"]["sas"][0]["name"], "esp-out");
    assert_eq!(json["engine"]["sas"][0]["state"], "expired");
    assert!(json["uptime_seconds"].is_u64());
    assert!(t.tick().1.is_empty(), "events are reported once");
}

#[test]
fn raw_sockets_to_open_and_the_tun_mtu() {
    assert_eq!(inbound_protocols(&engine(A, B, bundle_esp)), vec![50]);
    assert_eq!(inbound_protocols(&engine(A, B, bundle_comp_esp)), vec![50, 108]);
    assert_eq!(inbound_protocols(&engine(A, B, bundle_esp_ah)), vec![50, 51]);
    assert_eq!(inbound_protocols(&Engine::new()), Vec::<u8>::new());

    // ESP GCM tunnel, IPv4 outer: 20 + 8 + 8 + 16 bytes and a 2-byte trailer aligned to 4.
    let esp = tun_mtu_for(&engine(A, B, bundle_esp), 1500).unwrap();
    assert_eq!(esp, 1500 - 20 - 8 - 8 - 16 - 2);
    let ah = tun_mtu_for(&engine(A, B, bundle_esp_ah), 1500).unwrap();
    assert!(ah < esp, "{ah} < {esp}");
    assert_eq!(tun_mtu_for(&Engine::new(), 1500), None);
    // And it is what the engine really seals into 1500 bytes.
    let (a, _) = pair(bundle_esp_ah);
    let hdr = 20 + 8; // IPv4 + ICMP
    assert!(seal(&a, &ping4(1, ah - hdr)).len() <= 1500);
    assert!(seal(&a, &ping4(2, ah + 16 - hdr)).len() > 1500);
}

/// An ESP-in-UDP-like receiver: hands out the batch given to it, with sources (the given
/// one, else 203.0.113.9 port 40000 + slot); remembers what it was told was authenticated.
#[derive(Default)]
struct FakeBatchRx {
    datagrams: Mutex<Vec<(Vec<u8>, RxKind)>>,
    sources: Mutex<Vec<SocketAddr>>,
    learned: Mutex<Vec<(IpAddr, SocketAddr)>>,
}

impl UnderlayRx for FakeBatchRx {
    fn recv(&self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        let d: Vec<_> = self.datagrams.lock().unwrap().drain(..).collect();
        for (i, (p, kind)) in d.iter().enumerate() {
            batch.recv_area(i)[..p.len()].copy_from_slice(p);
            let src = self.sources.lock().unwrap().get(i).copied();
            let src = src.unwrap_or_else(|| SocketAddr::new(ip("203.0.113.9"), 40000 + i as u16));
            batch.set(i, p.len(), *kind, Some(src));
        }
        Ok(d.len())
    }
    fn authenticated(&self, peer: IpAddr, src: SocketAddr) {
        self.learned.lock().unwrap().push((peer, src));
    }
}

#[test]
fn batches_go_through_and_everything_in_them_is_counted() {
    let (a, b) = pair(bundle_esp);
    // Outbound: a batch of IPv4, IPv6 and garbage, sealed in one call.
    let inner = [ping4(1, 56), vec![0x00; 30], ping6(2, 1200), ping4(3, 1400)];
    let mut batch = Batch::new();
    load(&mut batch, inner.iter().map(Vec::as_slice));
    let wire = FakeWire::default();
    a.outbound_batch(&mut batch, inner.len(), &wire);
    let sent = wire.take();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|(_, d)| *d == ip(B)));
    let ca = a.counters().snapshot();
    assert_eq!((ca.tun_rx_packets, ca.not_ip, ca.underlay_tx_packets), (4, 1, 3));

    // Inbound: the three sealed packets, a keepalive, a non-ESP datagram, a runt, a replay
    // of the first and a forgery, opened in one call; only the good three reach the TUN.
    let mut forged = sent[2].0.clone();
    *forged.last_mut().unwrap() ^= 1;
    let rx = FakeBatchRx::default();
    {
        let mut d = rx.datagrams.lock().unwrap();
        d.push((sent[0].0.clone(), RxKind::Packet));
        d.push((vec![0xff], RxKind::Keepalive));
        d.push((sent[1].0.clone(), RxKind::Packet));
        d.push((vec![0; 12], RxKind::NonEsp));
        d.push((sent[0].0.clone(), RxKind::Packet));
        d.push((vec![1, 2], RxKind::Runt));
        d.push((forged, RxKind::Packet));
        d.push((sent[2].0.clone(), RxKind::Packet));
    }
    let tun = FakeTun::default();
    let n = rx.recv_batch(&mut batch).unwrap();
    assert_eq!(n, 8);
    b.inbound_batch(&mut batch, n, &rx, &mut TunPort::new(&tun));
    let kept: Vec<_> = inner.iter().filter(|p| is_ip(p)).cloned().collect();
    assert_eq!(tun.written(), kept);
    let cb = b.counters().snapshot();
    assert_eq!(
        (
            cb.underlay_rx_packets,
            cb.udp_keepalives_rx,
            cb.udp_non_esp,
            cb.udp_runts
        ),
        (5, 1, 1, 1)
    );
    assert_eq!((cb.engine_in_drops, cb.tun_tx_packets), (2, 3));
    let (report, _) = b.tick();
    let drops = &sa(&report, "esp-in").inbound.drops;
    assert_eq!((drops.replay, drops.bad_icv), (1, 1));
    // The source of the last authenticated packet is learned for the peer its SA names,
    // once per batch.
    assert_eq!(
        *rx.learned.lock().unwrap(),
        vec![(ip(A), SocketAddr::new(ip("203.0.113.9"), 40007))]
    );
}

/// Offloads on both ends: a TCP super-packet read from A's TUN device is cut into segments,
/// sealed and sent one by one; B opens them as one batch and writes one super-packet with a
/// GSO header that equals A's (and the same bytes); a plain packet goes through alone with an
/// empty header; a bad header is counted.
#[test]
fn offloads_segment_on_the_way_out_and_coalesce_on_the_way_in() {
    use crate::dev::tun::offload::{VnetHdr, VNET_HDR_LEN};
    let (a, b) = pair(bundle_esp);
    let tun_a = FakeTun {
        offload: true,
        ..FakeTun::default()
    };
    let tun_b = FakeTun {
        offload: true,
        ..FakeTun::default()
    };
    let wire = FakeWire::default();
    // The super-packet: 20,000 bytes of TCP payload (PSH set), 1,200-byte segments.
    let (hdr, sp) = super_packet(20_000, 1200, true);
    tun_a.queue([&hdr.to_bytes()[..], &sp].concat());
    tun_a.queue(vec![1, 2, 3]); // shorter than the header
    let ping = ping4(1, 300);
    tun_a.queue([&[0u8; VNET_HDR_LEN][..], &ping].concat());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| run_outbound(&a, &tun_a, &wire, &stop));
        let t0 = Instant::now();
        while wire.packets.lock().unwrap().len() < 18 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let ra = a.counters().snapshot();
    assert_eq!((ra.tun_gso_packets, ra.tun_offload_errors), (1, 1));
    assert_eq!((ra.tun_rx_packets, ra.underlay_tx_packets), (18, 18));
    let sealed = wire.take();
    assert_eq!(sealed.len(), 18);
    assert!(sealed.iter().all(|(p, _)| p.len() <= 1200 + 40 + 20 + 40));
    let mut batch = Batch::new();
    load(&mut batch, sealed.iter().map(|(p, _)| p.as_slice()));
    b.inbound_batch(&mut batch, sealed.len(), &wire, &mut TunPort::new(&tun_b));
    let w = tun_b.written();
    assert_eq!(w.len(), 2, "the ping alone, the 17 segments as one");
    assert_eq!(w[0], [&[0u8; VNET_HDR_LEN][..], &ping].concat());
    assert_eq!(VnetHdr::parse(&w[1]).unwrap(), hdr);
    assert!(
        w[1][VNET_HDR_LEN..] == sp[..],
        "the super-packet comes back byte for byte"
    );
    let rb = b.counters().snapshot();
    assert_eq!((rb.tun_tx_packets, rb.tun_gro_packets), (18, 1));
}

mod adaptive;
mod mss;
mod peers;

/// A UDP socket's sending side as the loops see it: takes ESP parts ([`Framing::Udp`]) and
/// the routes the engine named with them.
#[derive(Default)]
struct FakeUdp(Mutex<Vec<(Vec<u8>, Route)>>);

impl UnderlayTx for FakeUdp {
    fn framing(&self) -> ipsec_engine::Framing {
        ipsec_engine::Framing::Udp
    }
    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()> {
        self.0.lock().unwrap().push((packet.to_vec(), *route));
        Ok(())
    }
}

/// The route travels with the packet through the loops, over IPv4 and IPv6 underlays: A's
/// batch is sealed for a UDP socket (the ESP parts alone, each with its route: the SA, its
/// SPI, B), B's batch takes them as datagram payloads with their addresses and writes the
/// packets A read. The underlay byte counters count whole IP packets, as before.
#[test]
fn udp_framed_batches_carry_their_routes_and_count_whole_packets() {
    for (a, b) in [(A, B), ("fd00:99::1", "fd00:99::2")] {
        let mk = |local: &str, peer: &str, out: u32, inb: u32| {
            let mut e = Engine::new();
            install(&mut e, vec![esp_gcm("esp", out, local, peer)], Direction::Out, "out");
            install(&mut e, vec![esp_gcm("esp", inb, peer, local)], Direction::In, "in");
            Tunnel::new(e, vec![ip(peer)])
        };
        let (host_a, host_b) = (mk(a, b, 0x1001, 0x1002), mk(b, a, 0x1002, 0x1001));
        let inner: Vec<Vec<u8>> = (0..5).map(|i| ping4(i, 100 + 200 * usize::from(i))).collect();
        let mut batch = Batch::new();
        load(&mut batch, inner.iter().map(|p| &p[..]));
        let wire = FakeUdp::default();
        host_a.outbound_batch(&mut batch, inner.len(), &wire);
        let sent = wire.0.lock().unwrap().clone();
        assert_eq!(sent.len(), inner.len());
        let hdr = if ip(a).is_ipv4() { 20 } else { 40 };
        for (p, r) in &sent {
            assert_eq!((r.spi, r.to), (0x1001, ip(b)));
            assert_eq!(p[..4], 0x1001u32.to_be_bytes(), "the ESP header first, no IP header");
        }
        let on_wire: usize = sent.iter().map(|(p, _)| p.len() + hdr).sum();
        let ca = host_a.counters().snapshot();
        assert_eq!((ca.underlay_tx_packets, ca.underlay_tx_bytes), (5, on_wire as u64));
        // B: the payloads as its socket hands them over, with the datagrams' addresses.
        let mut rx = Batch::new();
        for (i, (p, _)) in sent.iter().enumerate() {
            rx.recv_area(i)[..p.len()].copy_from_slice(p);
            let ports = ipsec_engine::udp_encap::Ports {
                sport: 4500,
                dport: 4500,
            };
            let ctx = Context {
                kind: RxKind::Packet,
                from: Some(SocketAddr::new(ip(a), 4500)),
                arrival: ipsec_engine::Arrival::in_datagram(ports, ip(a), ip(b)),
            };
            rx.set_context(i, p.len(), ctx);
        }
        let tun = FakeTun::default();
        host_b.inbound_batch(&mut rx, sent.len(), &FakeWire::default(), &mut TunPort::new(&tun));
        assert_eq!(tun.written(), inner);
        let cb = host_b.counters().snapshot();
        assert_eq!((cb.underlay_rx_packets, cb.underlay_rx_bytes), (5, on_wire as u64));
        assert_eq!(cb.tun_tx_packets, 5);
    }
}
