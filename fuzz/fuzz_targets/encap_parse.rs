//! The ESP-in-UDP and header-rebuilding parsers on arbitrary bytes: the engine's RFC 3948
//! framing (`udp_ports`, `decapsulate`, then `encapsulate` again, `fix_transport_checksum`)
//! and tunneld's handling of what its sockets read (`udp::sort_datagram`,
//! `outer::rebuild_header`, `udp::GroBuffers` taking coalesced runs apart). Typed errors,
//! never a panic; what `decapsulate` took out of UDP goes back in with the same ports, and a
//! rebuilt header carries the payload it was given.
#![no_main]
use ipsec_core::PacketBuf;
use ipsec_engine::udp_encap;
use ipsec_tunnel::dev::{outer, udp};
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

const HEAD: usize = 256;

fn addr(v6: bool, b: u8) -> IpAddr {
    if v6 {
        IpAddr::from([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b])
    } else {
        IpAddr::from([192, 0, 2, b])
    }
}

fuzz_target!(|data: &[u8]| {
    let &[c0, c1, ref body @ ..] = data else { return };
    // The engine's framing, on a buffer with head- and tailroom.
    let mut store = vec![0u8; HEAD + body.len() + 64];
    store[HEAD..HEAD + body.len()].copy_from_slice(body);
    if let Ok(mut buf) = PacketBuf::new(&mut store, HEAD, body.len()) {
        let _ = udp_encap::udp_ports(buf.packet());
        if let Ok(Some(ports)) = udp_encap::decapsulate(&mut buf, |_| true) {
            if udp_encap::encapsulate(&mut buf, ports.sport, ports.dport).is_ok() {
                let back = udp_encap::udp_ports(buf.packet()).expect("what encapsulate wrote parses");
                assert_eq!(back.map(|p| (p.sport, p.dport)), Some((ports.sport, ports.dport)));
            }
        }
    }
    let mut copy = body.to_vec();
    let _ = udp_encap::fix_transport_checksum(&mut copy, addr(c0 & 1 == 1, 9));

    // tunneld: a datagram or raw payload read behind room for the header it lost.
    let (src, dst) = (addr(c0 & 2 == 2, 1), addr(c0 & 4 == 4, 2));
    let h = outer::header_len(dst);
    let mut area = vec![0u8; h + body.len()];
    area[h..].copy_from_slice(body);
    let claimed = if c0 & 8 == 8 { usize::from(c1) * 300 } else { body.len() };
    let (_, kept) = udp::sort_datagram(&area[h..], claimed);
    assert!(kept <= body.len().min(claimed));
    if let Ok(total) = outer::rebuild_header(&mut area, claimed, c1, src, dst) {
        assert_eq!(total, h + claimed);
        assert_eq!(&area[h..total], &body[..claimed]);
    }

    // UDP GRO: the body as one coalesced message of runs of `c1`-byte datagrams.
    let mut gro = udp::GroBuffers::new();
    gro.allocate();
    let n = body.len().min(udp::GRO_MSG_LEN);
    if let Some(area) = gro.areas().next() {
        area[..n].copy_from_slice(&body[..n]);
    }
    gro.filled(1, &[n], &[usize::from(c1)], &[None]);
    let mut got = Vec::new();
    while let Some((d, _)) = gro.next_datagram() {
        assert!(c1 == 0 || d.len() <= usize::from(c1).max(n));
        got.extend_from_slice(d);
    }
    assert_eq!(got, &body[..n]);
});
