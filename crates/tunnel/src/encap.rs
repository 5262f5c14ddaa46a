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

/// How many coalesced messages one [`GroBuffers`] receives at a time.
pub const GRO_MSGS: usize = 8;
/// The room for one coalesced message: the most one UDP GRO super-datagram carries.
pub const GRO_MSG_LEN: usize = 65535;

/// Received UDP datagrams as the kernel hands them to a socket with UDP_GRO on: up to
/// [`GRO_MSGS`] messages, each a run of datagrams from one source, all of one size `seg`
/// but the last, which may be shorter; and how far they have been taken apart. The receive
/// loop copies each datagram into its own packet slot ([`next_datagram`](Self::next_datagram)), so a run of
/// 40 datagrams costs one system call instead of 40. Allocated once per receiving thread
/// ([`allocate`](Self::allocate)); nothing per packet.
pub struct GroBuffers {
    bufs: Vec<Box<[u8]>>,
    len: [usize; GRO_MSGS],
    seg: [usize; GRO_MSGS],
    src: [Option<std::net::SocketAddrV4>; GRO_MSGS],
    count: usize,
    /// The message being taken apart and how many of its datagrams were taken.
    msg: usize,
    taken: usize,
}

impl Default for GroBuffers {
    fn default() -> Self {
        Self::new()
    }
}

impl GroBuffers {
    /// Empty, with no memory yet (a thread that never receives coalesced datagrams needs none).
    pub fn new() -> Self {
        GroBuffers {
            bufs: Vec::new(),
            len: [0; GRO_MSGS],
            seg: [0; GRO_MSGS],
            src: [None; GRO_MSGS],
            count: 0,
            msg: 0,
            taken: 0,
        }
    }

    /// Allocates the [`GRO_MSGS`] buffers if that was not done yet.
    pub fn allocate(&mut self) {
        if self.bufs.is_empty() {
            self.bufs = (0..GRO_MSGS).map(|_| vec![0; GRO_MSG_LEN].into_boxed_slice()).collect();
        }
    }

    /// The receive buffers, to read the next messages into (empty before
    /// [`allocate`](Self::allocate)).
    pub fn areas(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.bufs.iter_mut().map(|b| &mut b[..])
    }

    /// Records what the last read gave: `len[i]` bytes in buffer `i`, a run of datagrams of
    /// `seg[i]` bytes (0: one datagram) from `src[i]`. Lengths beyond the buffers are cut.
    pub fn filled(&mut self, count: usize, len: &[usize], seg: &[usize], src: &[Option<std::net::SocketAddrV4>]) {
        let count = count.min(self.bufs.len()).min(len.len()).min(seg.len()).min(src.len());
        for i in 0..count {
            self.len[i] = len[i].min(GRO_MSG_LEN);
            self.seg[i] = seg[i];
            self.src[i] = src[i];
        }
        self.count = count;
        self.msg = 0;
        self.taken = 0;
    }

    /// The next datagram and its source, or `None` when all are taken. A run's datagrams
    /// are `seg` bytes each (the last the rest); a `seg` of 0 or beyond the message means
    /// the whole message is one datagram, and an empty message is one empty datagram (it is
    /// counted like any other). Each call moves forward, so the loop is bounded by the
    /// messages and bytes received.
    pub fn next_datagram(&mut self) -> Option<(&[u8], Option<std::net::SocketAddrV4>)> {
        while self.msg < self.count {
            let (i, len, seg) = (self.msg, self.len[self.msg], self.seg[self.msg]);
            let step = if seg == 0 || seg >= len { len.max(1) } else { seg };
            let start = self.taken * step;
            if start < len || (len == 0 && self.taken == 0) {
                self.taken += 1;
                return Some((&self.bufs[i][start..(start + step).min(len)], self.src[i]));
            }
            self.msg += 1;
            self.taken = 0;
        }
        None
    }
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
        let src = Some(std::net::SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 4500));
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
}
