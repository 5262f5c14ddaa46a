//! Helpers shared by the engine's integration tests: packets, SA parameters, selectors and
//! a sender/receiver engine pair.
#![allow(dead_code)]

use core::time::Duration;
use ipsec_core::ip::proto;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf};
use ipsec_engine::*;
use std::net::IpAddr;

pub const HEAD: usize = 128;
pub const TAIL: usize = 128;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A UDP (or other upper protocol) packet from `src` to `dst` with a text-like payload.
pub fn packet(src: &str, dst: &str, upper: u8, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = b"the quick brown fox jumps over the lazy dog. "
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect();
    let mut out = Vec::new();
    let b = match (ip(src), ip(dst)) {
        (IpAddr::V4(s), IpAddr::V4(d)) => etherparse::PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => etherparse::PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    };
    match upper {
        proto::TCP => b.tcp(sport, dport, 1, 1000).write(&mut out, &payload).unwrap(),
        proto::UDP => b.udp(sport, dport).write(&mut out, &payload).unwrap(),
        _ => panic!("unsupported upper protocol in test"),
    }
    out
}

pub fn udp(src: &str, dst: &str, len: usize) -> Vec<u8> {
    packet(src, dst, proto::UDP, 1000, 2000, len)
}

/// Runs `f` on a buffer holding `pkt` with head- and tailroom; returns the result and bytes.
pub fn process(
    pkt: &[u8],
    f: impl FnOnce(&mut PacketBuf) -> Result<Verdict, Dropped>,
) -> (Result<Verdict, Dropped>, Vec<u8>) {
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL + 64 * 1024];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    let r = f(&mut buf);
    let out = buf.packet().to_vec();
    (r, out)
}

pub fn esp_params(spi: u32, mode: Mode, tunnel: Option<(&str, &str)>) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, spi);
    p.mode = mode;
    p.tunnel = tunnel.map(|(s, d)| Tunnel { src: ip(s), dst: ip(d) });
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[0x11; 16], 0));
    p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[0x22; 20], 12));
    p
}

pub fn gcm_params(spi: u32) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, spi);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    p
}

pub fn ah_params(spi: u32, mode: Mode, tunnel: Option<(&str, &str)>) -> SaParams {
    let mut p = SaParams::new(Proto::Ah, spi);
    p.mode = mode;
    p.tunnel = tunnel.map(|(s, d)| Tunnel { src: ip(s), dst: ip(d) });
    p.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[0x44; 32], 16));
    p
}

pub fn comp_params(cpi: u32) -> SaParams {
    SaParams::new(Proto::Comp, cpi)
}

pub fn sel(src: &str, dst: &str) -> Selector {
    Selector {
        src: Some(src.parse().unwrap()),
        dst: Some(dst.parse().unwrap()),
        ..Selector::default()
    }
}

/// Two engines with the same SAs: `a` sends with `bundle`, `b` requires it on input.
pub fn pair(configs: &[SaConfig], out_sel: Selector) -> (Engine, Engine, Vec<SaId>) {
    let mut a = Engine::new();
    let mut b = Engine::new();
    let mut ids = Vec::new();
    for c in configs {
        ids.push(a.add_sa(c.clone(), secs(0)).unwrap());
        assert_eq!(b.add_sa(c.clone(), secs(0)).unwrap(), *ids.last().unwrap());
    }
    a.add_policy(Policy {
        dir: Direction::Out,
        selector: out_sel,
        action: Action::Protect(ids.clone()),
    })
    .unwrap();
    b.add_policy(Policy {
        dir: Direction::In,
        selector: out_sel,
        action: Action::Protect(ids.clone()),
    })
    .unwrap();
    (a, b, ids)
}
