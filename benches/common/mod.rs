//! Packet and key setup shared by the benches: `mod common;` in `benches/<name>.rs`,
//! `#[path = "../common/mod.rs"] mod common;` in `benches/<name>/main.rs`.
#![allow(dead_code)]

use ipsec_core::ip::{proto, Ipv4Repr};
use std::net::Ipv4Addr;

/// Headroom and tailroom around packets (more than any SA in the benches needs).
pub const ROOM: usize = 128;
/// IPv4 header without options.
pub const IP_HDR: usize = 20;

/// `n` fixed key bytes; `salt` tells keys of one bench apart.
pub fn key(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

/// An IPv4/UDP packet 192.0.2.1 -> 192.0.2.2 of `size` bytes with `payload` (cycled) after
/// the header.
pub fn ipv4_packet(size: usize, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; size];
    Ipv4Repr {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(192, 0, 2, 2),
        protocol: proto::UDP,
        payload_len: size - IP_HDR,
        tos: 0,
        ident: 1,
        dont_frag: true,
        ttl: 64,
    }
    .emit(&mut p)
    .expect("IPv4 header");
    for (d, s) in p[IP_HDR..].iter_mut().zip(payload.iter().cycle()) {
        *d = *s;
    }
    p
}

/// [`ipv4_packet`] with a patterned payload (byte `i` is `7i + 3`).
pub fn patterned_packet(size: usize) -> Vec<u8> {
    let pattern: Vec<u8> = (0..=255u8).map(|i| i.wrapping_mul(7).wrapping_add(3)).collect();
    ipv4_packet(size, &pattern)
}

/// `packet` with [`ROOM`] bytes before it and `tail` after it.
pub fn framed(packet: &[u8], tail: usize) -> Vec<u8> {
    let mut v = vec![0u8; ROOM + packet.len() + tail];
    v[ROOM..ROOM + packet.len()].copy_from_slice(packet);
    v
}
