//! ESP in UDP (RFC 3948), the part without I/O: what a received UDP payload is (ESP, a
//! NAT-keepalive, a non-ESP/IKE datagram, or too short), the IPv4 header put back in front of
//! a received ESP payload so the engine opens it as it would raw ESP, and the ESP payload of
//! a sealed IPv4 packet to send in UDP. The socket itself is [`crate::sys::UdpEncap`].

use crate::tunnel::RxKind;
use std::net::Ipv4Addr;

/// The IPv4 header put in front of a received ESP-in-UDP payload.
pub const UDP_IPV4_HEADER: usize = 20;
/// The NAT-keepalive payload (RFC 3948 2.3): one byte, 0xFF.
pub const KEEPALIVE: u8 = 0xFF;
/// The default UDP port for ESP in UDP (RFC 3948).
pub const PORT: u16 = 4500;
/// How often a NAT-keepalive is sent (RFC 3948 4: 20 seconds by default).
pub const KEEPALIVE_INTERVAL_SECS: u64 = 20;

/// What a UDP payload of ESP-in-UDP is: a 0xFF byte alone is a keepalive; four zero bytes
/// first are the non-ESP marker (an SPI is never 0); ESP needs at least its SPI and sequence
/// number (8 bytes); anything shorter is a runt.
pub fn classify(payload: &[u8]) -> RxKind {
    match payload {
        [KEEPALIVE] => RxKind::Keepalive,
        [0, 0, 0, 0, ..] => RxKind::NonEsp,
        p if p.len() < 8 => RxKind::Runt,
        _ => RxKind::Packet,
    }
}

/// `area[UDP_IPV4_HEADER..UDP_IPV4_HEADER + len]` is a received UDP payload. If it is ESP,
/// writes an IPv4 header (`src` → `dst`, protocol 50, with its checksum) into
/// `area[..UDP_IPV4_HEADER]` and returns the whole packet's length; else what it is, and 0.
/// Never panics: a `len` beyond the area is cut to it.
pub fn decapsulate(area: &mut [u8], len: usize, src: Ipv4Addr, dst: Ipv4Addr) -> (RxKind, usize) {
    if area.len() <= UDP_IPV4_HEADER {
        return (RxKind::Runt, 0);
    }
    let len = len
        .min(area.len() - UDP_IPV4_HEADER)
        .min(usize::from(u16::MAX) - UDP_IPV4_HEADER);
    let kind = classify(&area[UDP_IPV4_HEADER..UDP_IPV4_HEADER + len]);
    if kind != RxKind::Packet {
        return (kind, 0);
    }
    let total = UDP_IPV4_HEADER + len;
    let h = &mut area[..UDP_IPV4_HEADER];
    h.copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    (RxKind::Packet, total)
}

/// The ESP part of a sealed IPv4 packet whose protocol is ESP (what goes in the UDP
/// datagram); `None` for anything else (AH outermost, IPv6, a bad header length).
pub fn esp_payload(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    if first >> 4 != 4 || packet.len() < 20 || packet[9] != 50 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    if ihl < 20 || total < ihl || total > packet.len() {
        return None;
    }
    Some(&packet[ihl..total])
}

/// The Internet checksum (RFC 1071) of `data` (even length here).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_like_rfc_3948() {
        assert_eq!(classify(&[0xff]), RxKind::Keepalive);
        assert_eq!(classify(&[0, 0, 0, 0, 1, 2, 3, 4, 5]), RxKind::NonEsp);
        assert_eq!(classify(&[0, 0, 0, 0]), RxKind::NonEsp);
        assert_eq!(classify(&[]), RxKind::Runt);
        assert_eq!(classify(&[0xfe]), RxKind::Runt);
        assert_eq!(classify(&[0, 0, 0x10, 1, 0, 0, 0]), RxKind::Runt);
        assert_eq!(classify(&[0, 0, 0x10, 1, 0, 0, 0, 1]), RxKind::Packet);
        assert_eq!(classify(&[0xff, 0xff]), RxKind::Runt);
    }

    #[test]
    fn decapsulation_builds_a_valid_ipv4_header_and_esp_payload_undoes_it() {
        let esp: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7) | 1).collect();
        let mut area = vec![0xaa; 2000];
        area[UDP_IPV4_HEADER..UDP_IPV4_HEADER + esp.len()].copy_from_slice(&esp);
        let (src, dst) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2));
        let (kind, len) = decapsulate(&mut area, esp.len(), src, dst);
        assert_eq!((kind, len), (RxKind::Packet, 120));
        let h = etherparse::Ipv4HeaderSlice::from_slice(&area[..len]).unwrap();
        assert_eq!(h.protocol(), etherparse::IpNumber::ENCAPSULATING_SECURITY_PAYLOAD);
        assert_eq!((h.source_addr(), h.destination_addr()), (src, dst));
        assert_eq!(h.total_len(), 120);
        assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
        assert_eq!(esp_payload(&area[..len]), Some(&esp[..]));
        // Not ESP: nothing written before the payload.
        area[UDP_IPV4_HEADER] = KEEPALIVE;
        let mut before = area.clone();
        assert_eq!(decapsulate(&mut area, 1, src, dst), (RxKind::Keepalive, 0));
        assert_eq!(area, before);
        // Lengths beyond the area and tiny areas are cut, not a panic.
        before[UDP_IPV4_HEADER..UDP_IPV4_HEADER + 8].copy_from_slice(&[1; 8]);
        assert_eq!(decapsulate(&mut before, usize::MAX, src, dst).1, 2000);
        assert_eq!(decapsulate(&mut [0u8; 20], 5, src, dst), (RxKind::Runt, 0));
    }

    #[test]
    fn only_ipv4_esp_goes_in_udp() {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 50, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
        p.extend_from_slice(&[9; 8]);
        p.extend_from_slice(&[0xee; 4]); // after the IP length: not sent
        assert_eq!(esp_payload(&p), Some(&[9u8; 8][..]));
        p[9] = 51;
        assert_eq!(esp_payload(&p), None);
        p[9] = 50;
        p[0] = 0x44;
        assert_eq!(esp_payload(&p), None);
        p[0] = 0x45;
        p[2..4].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(esp_payload(&p), None);
        assert_eq!(esp_payload(&[0x60; 40]), None);
        assert_eq!(esp_payload(&[]), None);
    }
}
