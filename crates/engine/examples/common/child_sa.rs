//! One direction of remote-access client `i`'s IKE child as tunneld installs it
//! (`crates/tunnel/src/ike/selectors.rs`): tunnel mode between the server 10.98.0.1 and the
//! client 10.98.16.1 + i, AES-GCM-128 (ring), ESP in UDP, a name of tunneld's form. Shared by
//! the `sad-memory` example and the `sa_memory` test (included by path).
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::AeadAlg;
use ipsec_engine::{SaConfig, UdpEncap};
use std::net::{IpAddr, Ipv4Addr};

/// The server's address in these SAs.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);

/// Client `i`'s outbound (`out`) or inbound SA.
pub fn sa(i: u32, out: bool) -> SaConfig {
    let server = IpAddr::V4(SERVER);
    let client = IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 98, 16, 1)) + i));
    let spi = 0x1000_0000 + 2 * i + u32::from(out);
    let mut p = SaParams::new(Proto::Esp, spi);
    p.mode = Mode::Tunnel;
    let (src, dst) = if out { (server, client) } else { (client, server) };
    p.tunnel = Some(Tunnel { src, dst });
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[i as u8; 20], 16));
    let dir = if out { "out" } else { "in" };
    let mut c = SaConfig::new(format!("ike:rw/net/{dir}-{spi:08x}"), p, None);
    c.encap = Some(UdpEncap {
        sport: 4500,
        dport: 4500 + (i as u16 % 1000),
        oa: None,
    });
    c
}
