//! The route travels with the packet: sealed for a UDP socket ([`Framing::Udp`]) a packet is
//! the bytes a whole IP packet ([`Framing::Ip`]) carries after its outer IP header, with the
//! route (outermost SA, SPI, next hop) named beside it; received as a datagram's payload
//! ([`Arrival::datagram`]) it opens to what the whole packet opens to. IPv4 and IPv6 outer
//! headers, tunnel and transport mode, AES-GCM and AES-CBC + HMAC.

mod common;
use common::*;
use ipsec_core::ip::proto;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::Mode;
use ipsec_core::PacketBuf;
use ipsec_engine::udp_encap::{EncapError, Ports};
use ipsec_engine::*;

fn worker() -> Worker {
    Worker::with_rng(IvRng::from_seed([7; 32]))
}

/// What [`seal`] gives: the verdicts, the routes, the sealed bytes and the sender.
type Sealed = (Vec<Result<Verdict, Dropped>>, Vec<Option<Route>>, Vec<Vec<u8>>, Engine);

/// Seals `pkts` as one batch through a fresh copy of `configs` (so two calls use the same
/// sequence numbers and, with the same worker seed, the same CBC IVs): the verdicts, the
/// routes and the sealed bytes.
fn seal(configs: &[SaConfig], selector: Selector, pkts: &[Vec<u8>], framing: Framing) -> Sealed {
    let (a, _, _) = pair(configs, selector);
    let plane = a.data_plane();
    let mut raws: Vec<Vec<u8>> = pkts
        .iter()
        .map(|p| {
            let mut r = vec![0u8; HEAD + p.len() + TAIL];
            r[HEAD..HEAD + p.len()].copy_from_slice(p);
            r
        })
        .collect();
    let mut bufs: Vec<PacketBuf> = raws
        .iter_mut()
        .zip(pkts)
        .map(|(r, p)| PacketBuf::new(r, HEAD, p.len()).unwrap())
        .collect();
    let mut out = vec![Ok(Verdict::Bypass); pkts.len()];
    let mut routes = vec![None; pkts.len()];
    plane.outbound_batch_routed(&mut worker(), &mut bufs, &mut out, &mut routes, framing, secs(0));
    let sealed = bufs.iter().map(|b| b.packet().to_vec()).collect();
    (out, routes, sealed, a)
}

/// Opens `pkt` on `rx` as it arrived: a whole packet, or a datagram's payload.
fn open(rx: &Engine, pkt: &[u8], arrival: Arrival) -> (Result<Verdict, Dropped>, Arrival, Vec<u8>) {
    let plane = rx.data_plane();
    let mut a = [arrival];
    let mut v = [Ok(Verdict::Bypass)];
    let (_, bytes) = process(pkt, |buf| {
        plane.inbound_batch_arrivals(&mut worker(), std::slice::from_mut(buf), &mut v, &mut a, secs(0));
        v[0]
    });
    (v[0], a[0], bytes)
}

/// The length of a sealed whole packet's IP header (IPv4 options or IPv6 extensions none).
fn ip_header(p: &[u8]) -> usize {
    if p[0] >> 4 == 4 {
        usize::from(p[0] & 0xf) * 4
    } else {
        40
    }
}

const PORTS: Ports = Ports {
    sport: 4500,
    dport: 4500,
};

#[test]
fn udp_framing_is_the_whole_packet_after_its_outer_header_with_the_route_beside_it() {
    let cases = [
        // (inner src, inner dst, mode, tunnel src, tunnel dst)
        ("10.1.0.1", "10.2.0.1", Mode::Tunnel, Some(("192.0.2.1", "192.0.2.2"))),
        (
            "10.1.0.1",
            "10.2.0.1",
            Mode::Tunnel,
            Some(("2001:db8::1", "2001:db8::2")),
        ),
        ("fd00:1::1", "fd00:2::1", Mode::Tunnel, Some(("192.0.2.1", "192.0.2.2"))),
        ("192.0.2.1", "192.0.2.2", Mode::Transport, None),
        ("2001:db8::1", "2001:db8::2", Mode::Transport, None),
    ];
    for (src, dst, mode, tunnel) in cases {
        for cbc in [false, true] {
            let mut p = if cbc {
                esp_params(0x5101, mode, tunnel)
            } else {
                gcm_params(0x5101)
            };
            p.mode = mode;
            p.tunnel = esp_params(0, mode, tunnel).tunnel;
            let configs = [SaConfig::new("esp", p, None)];
            let selector = Selector::default();
            let pkts: Vec<Vec<u8>> = (0..3).map(|i| udp(src, dst, 100 + 300 * i)).collect();
            let what = format!("{src} -> {dst} {mode:?} {tunnel:?} cbc {cbc}");
            let (v_ip, r_ip, whole, _) = seal(&configs, selector, &pkts, Framing::Ip);
            let (v_udp, r_udp, esp, _) = seal(&configs, selector, &pkts, Framing::Udp);
            assert_eq!(v_ip, vec![Ok(Verdict::Protected(1)); 3], "{what}");
            assert_eq!(v_udp, v_ip, "{what}");
            let next_hop = ip(tunnel.map_or(dst, |t| t.1));
            let route = Route {
                sa: SaId(0),
                spi: 0x5101,
                to: next_hop,
            };
            assert_eq!(r_ip, vec![Some(route); 3], "{what}");
            assert_eq!(r_udp, r_ip, "{what}");
            for (w, e) in whole.iter().zip(&esp) {
                assert_eq!(&w[ip_header(w)..], &e[..], "{what}: the same ESP bytes");
                assert_eq!(w[if w[0] >> 4 == 4 { 9 } else { 6 }], proto::ESP);
            }
            // Received: the whole packet, and the ESP part as a datagram's payload from the
            // whole packet's source to its destination, open to the same packet.
            let (_, rx_whole, _) = pair(&configs, selector);
            let (_, rx_udp, _) = pair(&configs, selector);
            for (i, (w, e)) in whole.iter().zip(&esp).enumerate() {
                let (s, d) = ipsec_core::ip::addrs(w).unwrap();
                let (v1, a1, inner1) = open(&rx_whole, w, Arrival::in_udp(PORTS));
                let (v2, a2, inner2) = open(&rx_udp, e, Arrival::in_datagram(PORTS, s, d));
                assert_eq!(v1, Ok(Verdict::Protected(1)), "{what}");
                assert_eq!(v2, v1, "{what}");
                assert_eq!((a2.sa, a2.newest, a2.outer), (a1.sa, a1.newest, a1.outer), "{what}");
                assert_eq!(a2.datagram, Some((s, d)));
                match mode {
                    Mode::Tunnel => {
                        assert_eq!(inner2, inner1, "{what}");
                        assert_eq!(inner2, pkts[i], "{what}");
                    }
                    Mode::Transport => {
                        // The IP header comes from the datagram's addresses: the same
                        // addresses, protocol and payload as the packet sealed.
                        let h = ip_header(&inner2);
                        assert_eq!(&inner2[h..], &pkts[i][h..], "{what}");
                        assert_eq!(ipsec_core::ip::addrs(&inner2).unwrap(), (s, d));
                        assert_eq!(ipsec_core::ip::claimed_len(&inner2).unwrap(), pkts[i].len());
                    }
                }
            }
            // Counted alike: the payload is charged as if its IP header had come with it.
            let snap = |e: &Engine| e.snapshot(secs(0)).sas[0].inbound;
            assert_eq!(snap(&rx_udp), snap(&rx_whole), "{what}");
        }
    }
}

/// Only ESP goes in UDP (RFC 3948 2.1): a bundle whose outermost SA is AH is refused for a
/// UDP socket before any SA spends a sequence number, and counted at that SA.
#[test]
fn only_esp_goes_in_udp() {
    let tunnel = Some(("192.0.2.1", "192.0.2.2"));
    let configs = [
        SaConfig::new("esp", esp_params(0x601, Mode::Tunnel, tunnel), None),
        SaConfig::new("ah", ah_params(0x602, Mode::Transport, None), None),
    ];
    let pkts = vec![udp("10.1.0.1", "10.2.0.1", 64)];
    let (v, r, sealed, a) = seal(&configs, Selector::default(), &pkts, Framing::Udp);
    let d = v[0].unwrap_err();
    assert_eq!(d.reason, DropReason::EncapMismatch);
    assert_eq!(d.sa, Some(SaId(1)));
    assert_eq!(d.error, Some(PacketError::Encap(EncapError::NotEsp(proto::AH))));
    assert_eq!((r[0], &sealed[0]), (None, &pkts[0]), "left as it was");
    let snap = a.snapshot(secs(0));
    assert_eq!(snap.sas[0].outbound.packets, 0, "ESP sealed nothing");
    assert_eq!(snap.sas[1].outbound.drops.encap_mismatch, 1);
    // Whole IP packets of the same bundle go, to the tunnel's end.
    let (v, r, _, _) = seal(&configs, Selector::default(), &pkts, Framing::Ip);
    assert_eq!(v[0], Ok(Verdict::Protected(2)));
    assert_eq!(
        r[0].map(|r| (r.sa, r.spi, r.to)),
        Some((SaId(1), 0x602, ip("192.0.2.2")))
    );
}

/// A datagram's payload that is not an SA's ESP packet is dropped with a typed reason, never
/// a panic: no SA for its SPI or destination, too short, bad ICV, of an SA that wants ESP in
/// UDP on another port.
#[test]
fn bad_datagrams_are_dropped_with_their_reason() {
    let tunnel = Some(("192.0.2.1", "192.0.2.2"));
    let configs = [SaConfig::new("esp", esp_params(0x701, Mode::Tunnel, tunnel), None)];
    let pkts = vec![udp("10.1.0.1", "10.2.0.1", 64)];
    let (_, _, esp, _) = seal(&configs, Selector::default(), &pkts, Framing::Udp);
    let esp = &esp[0];
    let (_, rx, _) = pair(&configs, Selector::default());
    let (s, d) = (ip("192.0.2.1"), ip("192.0.2.2"));
    let reason = |pkt: &[u8], to: &str| {
        open(&rx, pkt, Arrival::in_datagram(PORTS, s, ip(to)))
            .0
            .unwrap_err()
            .reason
    };
    assert_eq!(reason(esp, "192.0.2.9"), DropReason::NoSa, "another destination");
    for cut in 0..4 {
        assert_eq!(reason(&esp[..cut], "192.0.2.2"), DropReason::Malformed, "{cut} bytes");
    }
    assert_eq!(reason(&esp[..20], "192.0.2.2"), DropReason::Malformed);
    let mut bad = esp.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(reason(&bad, "192.0.2.2"), DropReason::BadIcv);
    let mut other = esp.clone();
    other[..4].copy_from_slice(&0x702u32.to_be_bytes());
    assert_eq!(reason(&other, "192.0.2.2"), DropReason::NoSa, "unknown SPI");
    // The good one still opens (the failures moved no replay window).
    assert_eq!(
        open(&rx, esp, Arrival::in_datagram(PORTS, s, d)).0,
        Ok(Verdict::Protected(1))
    );
    // An SA that wants ESP in UDP to port 4501 refuses a payload that came to 4500.
    let mut c = configs[0].clone();
    c.encap = Some(UdpEncap {
        sport: 4500,
        dport: 4501,
        oa: None,
    });
    let (_, rx, _) = pair(&[c], Selector::default());
    let (v, _, _) = open(&rx, esp, Arrival::in_datagram(PORTS, s, d));
    assert_eq!(v.unwrap_err().reason, DropReason::EncapMismatch);
}
