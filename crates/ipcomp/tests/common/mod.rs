//! Packet builders for the integration tests.
#![allow(dead_code)]
pub mod corpus;

use ipsec_core::ip::{self, proto, Ipv4Repr, Ipv6Repr};
use ipsec_core::{Mode, PacketBuf, Tunnel};
use ipsec_ipcomp::{Algorithm, IpcompConfig, IpcompSa, OpenOutcome, SealOutcome};

pub const HEADROOM: usize = 128;

/// An IPv4 TCP packet carrying `payload` (20-byte TCP header).
pub fn v4_tcp(payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    Ipv4Repr {
        src: "192.0.2.1".parse().unwrap(),
        dst: "192.0.2.2".parse().unwrap(),
        protocol: proto::TCP,
        payload_len: 20 + payload.len(),
        tos: 0x03, // CE, to check the tunnel's ECN handling
        ident: 0x1234,
        dont_frag: true,
        ttl: 63,
    }
    .emit(&mut p)
    .unwrap();
    p.extend_from_slice(&tcp_header());
    p.extend_from_slice(payload);
    p
}

fn tcp_header() -> [u8; 20] {
    let mut t = [0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&443u16.to_be_bytes());
    t[12] = 0x50;
    t[13] = 0x18;
    t
}

/// An IPv6 TCP packet carrying `payload`, with the given extension headers (kinds, each 8
/// bytes) before TCP.
pub fn v6_tcp(payload: &[u8], exts: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, _) in exts.iter().enumerate() {
        let next = exts.get(i + 1).copied().unwrap_or(proto::TCP);
        body.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]); // PadN option
    }
    body.extend_from_slice(&tcp_header());
    body.extend_from_slice(payload);
    let mut p = vec![0u8; 40];
    Ipv6Repr {
        src: "2001:db8::1".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
        next_header: exts.first().copied().unwrap_or(proto::TCP),
        payload_len: body.len(),
        traffic_class: 0xb9,
        flow_label: 0x54321,
        hop_limit: 60,
    }
    .emit(&mut p)
    .unwrap();
    p.extend_from_slice(&body);
    p
}

pub fn config(alg: Algorithm, mode: Mode, v6_outer: bool) -> IpcompConfig {
    let mut c = IpcompConfig::new(alg);
    c.mode = mode;
    if mode == Mode::Tunnel {
        c.tunnel = Some(if v6_outer {
            Tunnel {
                src: "2001:db8:ffff::1".parse().unwrap(),
                dst: "2001:db8:ffff::2".parse().unwrap(),
            }
        } else {
            Tunnel {
                src: "198.51.100.1".parse().unwrap(),
                dst: "198.51.100.2".parse().unwrap(),
            }
        });
    }
    c
}

/// Seals `packet` with `sa`; returns the outcome and the sealed bytes.
pub fn seal(sa: &mut IpcompSa, packet: &[u8]) -> (SealOutcome, Vec<u8>) {
    let mut raw = vec![0u8; HEADROOM + packet.len() + 64];
    raw[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
    let mut b = PacketBuf::new(&mut raw, HEADROOM, packet.len()).unwrap();
    let o = sa.seal(&mut b).unwrap();
    (o, b.packet().to_vec())
}

/// Opens `packet` with `sa` in a buffer with room for a 64 KB result.
pub fn open(sa: &mut IpcompSa, packet: &[u8]) -> Result<(OpenOutcome, Vec<u8>), ipsec_ipcomp::Error> {
    let mut raw = vec![0u8; HEADROOM + 70000];
    raw[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
    let mut b = PacketBuf::new(&mut raw, HEADROOM, packet.len()).unwrap();
    let o = sa.open(&mut b)?;
    Ok((o, b.packet().to_vec()))
}

/// Checks the IP header of a sealed packet: lengths match and an IPv4 checksum verifies.
pub fn check_ip(packet: &[u8]) {
    assert_eq!(ip::claimed_len(packet).unwrap(), packet.len());
    if ip::version(packet).unwrap() == 4 {
        assert!(ip::Ipv4Packet::new_checked(packet).unwrap().verify_checksum());
    }
}
