//! ESP in UDP (RFC 3948), the part without I/O: what a received UDP payload is (ESP, a
//! NAT-keepalive, a non-ESP/IKE datagram, or too short), the IP header put back in front of
//! a received ESP payload so the engine opens it as it would raw ESP, and the ESP payload of
//! a sealed packet to send in UDP. The socket itself is [`crate::sys::UdpEncap`].
//!
//! The same header rebuilding serves IPv6 raw sockets, which deliver a packet without its
//! IPv6 header (RFC 3542 3): [`rebuild_header`].

use crate::tunnel::RxKind;
use ipsec_core::ip::checksum;
use std::fmt;
use std::net::IpAddr;

/// The IPv4 header put in front of a received ESP-in-UDP payload.
pub const UDP_IPV4_HEADER: usize = 20;
/// The IPv6 header put in front of a payload received on an IPv6 socket (RFC 8200 3).
pub const IPV6_HEADER: usize = 40;
/// The NAT-keepalive payload (RFC 3948 2.3): one byte, 0xFF.
pub const KEEPALIVE: u8 = 0xFF;
/// The default UDP port for ESP in UDP (RFC 3948).
pub const PORT: u16 = 4500;
/// How often a NAT-keepalive is sent (RFC 3948 4: 20 seconds by default).
pub const KEEPALIVE_INTERVAL_SECS: u64 = 20;
/// The hop limit (TTL) written into a rebuilt header: the real one is gone, and it is a
/// mutable field that neither ESP nor AH protects (RFC 4302 3.3.3.1).
const HOPS: u8 = 64;

/// The length of the header [`rebuild_header`] writes for addresses of `a`'s family.
pub fn header_len(a: IpAddr) -> usize {
    match a {
        IpAddr::V4(_) => UDP_IPV4_HEADER,
        IpAddr::V6(_) => IPV6_HEADER,
    }
}

/// Why an IP header could not be put in front of a received payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildError {
    /// The source and destination are of different families.
    MixedFamilies,
    /// The area holds fewer than the header and the payload.
    NoRoom {
        /// The payload's length.
        len: usize,
        /// The area's length.
        room: usize,
    },
    /// The payload is longer than the header's length field can say (IPv4: 65535 bytes in
    /// all; IPv6: a 65535-byte payload, no jumbograms).
    TooLong {
        /// The payload's length.
        len: usize,
        /// The longest payload the header can carry.
        max: usize,
    },
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildError::MixedFamilies => f.write_str("source and destination of different IP versions"),
            RebuildError::NoRoom { len, room } => {
                write!(f, "no room for the header and a {len}-byte payload in {room} bytes")
            }
            RebuildError::TooLong { len, max } => {
                write!(f, "a {len}-byte payload is over the {max} bytes an IP header can carry")
            }
        }
    }
}

impl std::error::Error for RebuildError {}

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

/// `area[h..h + len]` is a payload of IP protocol `proto` received from `src` for `dst`,
/// `h` = [`header_len`]`(dst)`. Writes the IP header it came with into `area[..h]` and
/// returns the whole packet's length: IPv4 with its checksum (RFC 791; DF set, TTL 64);
/// IPv6 (RFC 8200 3) with the fields AH's ICV covers as they were sent (RFC 4302 3.3.3.1:
/// version, payload length, next header, source, destination) and the mutable ones, which
/// AH zeroes for its ICV anyway, as zero (traffic class, flow label) or 64 (hop limit).
/// The payload must follow the fixed header directly: extension headers the kernel
/// processed before it are not put back (AH over them would not verify).
pub fn rebuild_header(area: &mut [u8], len: usize, proto: u8, src: IpAddr, dst: IpAddr) -> Result<usize, RebuildError> {
    let h = header_len(dst);
    let room = area.len();
    if room < h || len > room - h {
        return Err(RebuildError::NoRoom { len, room });
    }
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let max = usize::from(u16::MAX) - h;
            if len > max {
                return Err(RebuildError::TooLong { len, max });
            }
            let total = h + len;
            let hdr = &mut area[..h];
            hdr.copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, HOPS, proto, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            hdr[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            hdr[12..16].copy_from_slice(&s.octets());
            hdr[16..20].copy_from_slice(&d.octets());
            let sum = checksum(hdr);
            hdr[10..12].copy_from_slice(&sum.to_be_bytes());
            Ok(total)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let max = usize::from(u16::MAX);
            if len > max {
                return Err(RebuildError::TooLong { len, max });
            }
            let hdr = &mut area[..h];
            hdr[..4].copy_from_slice(&[0x60, 0, 0, 0]);
            hdr[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            hdr[6] = proto;
            hdr[7] = HOPS;
            hdr[8..24].copy_from_slice(&s.octets());
            hdr[24..40].copy_from_slice(&d.octets());
            Ok(h + len)
        }
        _ => Err(RebuildError::MixedFamilies),
    }
}

/// `area[h..h + len]` is a received UDP payload (`h` = [`header_len`]`(dst)`). If it is
/// ESP, writes an IP header (`src` → `dst`, protocol 50) into `area[..h]` and returns the
/// whole packet's length; else what it is, and 0. Never panics: a `len` beyond the area is
/// cut to it; a header that cannot be written makes it a runt.
pub fn decapsulate(area: &mut [u8], len: usize, src: IpAddr, dst: IpAddr) -> (RxKind, usize) {
    let h = header_len(dst);
    if area.len() <= h {
        return (RxKind::Runt, 0);
    }
    let max = match dst {
        IpAddr::V4(_) => usize::from(u16::MAX) - h,
        IpAddr::V6(_) => usize::from(u16::MAX),
    };
    let len = len.min(area.len() - h).min(max);
    let kind = classify(&area[h..h + len]);
    if kind != RxKind::Packet {
        return (kind, 0);
    }
    match rebuild_header(area, len, 50, src, dst) {
        Ok(total) => (RxKind::Packet, total),
        Err(_) => (RxKind::Runt, 0),
    }
}

/// The ESP part of a sealed packet whose outer header is followed directly by ESP (what
/// goes in the UDP datagram): IPv4 (protocol 50) or IPv6 (next header 50, no extension
/// headers, which tunneld's SAs do not add); `None` for anything else (AH outermost, a bad
/// length).
pub fn esp_payload(packet: &[u8]) -> Option<&[u8]> {
    match *packet.first()? >> 4 {
        4 => {
            if packet.len() < 20 || packet[9] != 50 {
                return None;
            }
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
            if ihl < 20 || total < ihl || total > packet.len() {
                return None;
            }
            Some(&packet[ihl..total])
        }
        6 => {
            if packet.len() < IPV6_HEADER || packet[6] != 50 {
                return None;
            }
            let end = IPV6_HEADER + usize::from(u16::from_be_bytes([packet[4], packet[5]]));
            packet.get(IPV6_HEADER..end)
        }
        _ => None,
    }
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
    src: [Option<std::net::SocketAddr>; GRO_MSGS],
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
    pub fn filled(&mut self, count: usize, len: &[usize], seg: &[usize], src: &[Option<std::net::SocketAddr>]) {
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
    pub fn next_datagram(&mut self) -> Option<(&[u8], Option<std::net::SocketAddr>)> {
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

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::from(a)
    }

    fn v6(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn decapsulation_builds_a_valid_ipv4_header_and_esp_payload_undoes_it() {
        let esp: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7) | 1).collect();
        let mut area = vec![0xaa; 2000];
        area[UDP_IPV4_HEADER..UDP_IPV4_HEADER + esp.len()].copy_from_slice(&esp);
        let (src, dst) = (v4([192, 0, 2, 1]), v4([198, 51, 100, 2]));
        let (kind, len) = decapsulate(&mut area, esp.len(), src, dst);
        assert_eq!((kind, len), (RxKind::Packet, 120));
        let h = etherparse::Ipv4HeaderSlice::from_slice(&area[..len]).unwrap();
        assert_eq!(h.protocol(), etherparse::IpNumber::ENCAPSULATING_SECURITY_PAYLOAD);
        assert_eq!(
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr())),
            (src, dst)
        );
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
        // Addresses of two versions: no header, a runt.
        assert_eq!(decapsulate(&mut before, 100, v6("fd00::1"), dst), (RxKind::Runt, 0));
    }

    #[test]
    fn decapsulation_over_ipv6_builds_an_ipv6_header() {
        let esp: Vec<u8> = (0..77u8).map(|i| i | 0x10).collect();
        let mut area = vec![0xaa; 1000];
        area[IPV6_HEADER..IPV6_HEADER + esp.len()].copy_from_slice(&esp);
        let (src, dst) = (v6("fd00:99::2"), v6("fd00:99::1"));
        assert_eq!(header_len(dst), 40);
        let (kind, len) = decapsulate(&mut area, esp.len(), src, dst);
        assert_eq!((kind, len), (RxKind::Packet, 40 + 77));
        let h = etherparse::Ipv6HeaderSlice::from_slice(&area[..len]).unwrap();
        assert_eq!(h.next_header(), etherparse::IpNumber::ENCAPSULATING_SECURITY_PAYLOAD);
        assert_eq!(usize::from(h.payload_length()), esp.len());
        assert_eq!(
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr())),
            (src, dst)
        );
        assert_eq!((h.traffic_class(), h.flow_label().value()), (0, 0));
        assert_eq!(esp_payload(&area[..len]), Some(&esp[..]));
        // An area shorter than the IPv6 header, a length beyond the area: no panic.
        assert_eq!(decapsulate(&mut [0u8; 40], 8, src, dst), (RxKind::Runt, 0));
        assert_eq!(decapsulate(&mut area, usize::MAX, src, dst), (RxKind::Packet, 1000));
    }

    #[test]
    fn rebuilding_refuses_bad_lengths_with_typed_errors() {
        let (a, b) = (v6("fd00::1"), v6("fd00::2"));
        let mut area = vec![0u8; 100];
        assert_eq!(rebuild_header(&mut area, 60, 51, a, b), Ok(100));
        assert_eq!(
            rebuild_header(&mut area, 61, 51, a, b),
            Err(RebuildError::NoRoom { len: 61, room: 100 })
        );
        assert_eq!(
            rebuild_header(&mut area, usize::MAX, 51, a, b),
            Err(RebuildError::NoRoom {
                len: usize::MAX,
                room: 100
            })
        );
        assert_eq!(
            rebuild_header(&mut area[..39], 0, 50, a, b),
            Err(RebuildError::NoRoom { len: 0, room: 39 })
        );
        assert_eq!(
            rebuild_header(&mut area, 10, 50, v4([1, 1, 1, 1]), b),
            Err(RebuildError::MixedFamilies)
        );
        let mut big = vec![0u8; 70_000];
        assert_eq!(
            rebuild_header(&mut big, 65_536, 50, a, b),
            Err(RebuildError::TooLong {
                len: 65_536,
                max: 65_535
            })
        );
        assert_eq!(rebuild_header(&mut big, 65_535, 50, a, b), Ok(65_575));
        let (c, d) = (v4([10, 0, 0, 1]), v4([10, 0, 0, 2]));
        assert_eq!(
            rebuild_header(&mut big, 65_516, 50, c, d),
            Err(RebuildError::TooLong {
                len: 65_516,
                max: 65_515
            })
        );
        assert_eq!(rebuild_header(&mut big, 65_515, 50, c, d), Ok(65_535));
        assert!(RebuildError::NoRoom { len: 1, room: 0 }.to_string().contains("no room"));
    }

    /// What an IPv6 raw socket does to an AH packet (the kernel strips the IPv6 header;
    /// on the way the network changed the mutable fields) and the rebuilt header undoes:
    /// AH's ICV still verifies and the packet opens (RFC 4302 3.3.3.1). A wrong address in
    /// the rebuilt header fails the ICV, so the check can fail.
    #[test]
    fn an_ah_protected_ipv6_packet_stripped_and_rebuilt_still_opens() {
        use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
        use ipsec_core::{AeadAlg, IntegAlg, PacketBuf};
        use ipsec_engine::{Action, Direction, Engine, Policy, SaConfig, Selector, Verdict};
        use std::time::Duration;
        let (a, b) = (v6("fd00:99::1"), v6("fd00:99::2"));
        let sas = || {
            let mut esp = SaParams::new(Proto::Esp, 0x601);
            esp.mode = Mode::Tunnel;
            esp.tunnel = Some(Tunnel { src: a, dst: b });
            esp.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
            let mut ah = SaParams::new(Proto::Ah, 0x602);
            ah.tunnel = Some(Tunnel { src: a, dst: b });
            ah.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[9; 32], 16));
            [SaConfig::new("esp", esp, None), SaConfig::new("ah", ah, None)]
        };
        let engine = |dir| {
            let mut e = Engine::new();
            let ids = sas().map(|c| e.add_sa(c, Duration::ZERO).unwrap()).to_vec();
            e.add_policy(Policy {
                dir,
                selector: Selector::default(),
                action: Action::Protect(ids),
            })
            .unwrap();
            e
        };
        let (mut tx, mut rx) = (engine(Direction::Out), engine(Direction::In));
        let mut inner = Vec::new();
        etherparse::PacketBuilder::ipv4([10, 100, 0, 1], [10, 100, 0, 2], 64)
            .udp(1000, 2000)
            .write(&mut inner, &[0x5a; 300])
            .unwrap();
        let mut raw = vec![0u8; 4096];
        let mut buf = PacketBuf::new(&mut raw, 512, inner.len()).unwrap();
        buf.packet_mut().copy_from_slice(&inner);
        assert_eq!(tx.outbound(&mut buf, Duration::ZERO), Ok(Verdict::Protected(2)));
        let mut wire = buf.packet().to_vec();
        assert_eq!((wire[0] >> 4, wire[6]), (6, 51), "IPv6 with AH outermost");
        // On the way: traffic class, flow label and hop limit change (mutable fields).
        wire[0] = 0x6f;
        wire[1..4].copy_from_slice(&[0xab, 0xcd, 0xef]);
        wire[7] = 3;
        let open = |src: IpAddr, rx: &mut Engine| {
            // The raw socket's view: the payload after the IPv6 header, in the receive area.
            let mut area = vec![0u8; 512 + 4096];
            let payload = &wire[IPV6_HEADER..];
            area[512 + IPV6_HEADER..512 + IPV6_HEADER + payload.len()].copy_from_slice(payload);
            let total = rebuild_header(&mut area[512..], payload.len(), 51, src, b).unwrap();
            assert_eq!(total, wire.len());
            let mut buf = PacketBuf::new(&mut area, 512, total).unwrap();
            let v = rx.inbound(&mut buf, Duration::ZERO);
            (v, buf.packet().to_vec())
        };
        // A wrong source first (a failed ICV does not move the replay window), then right.
        let (v, _) = open(v6("fd00:99::7"), &mut rx);
        let e = v.unwrap_err();
        assert_eq!(e.reason, ipsec_engine::DropReason::BadIcv, "{e}");
        assert_eq!(open(a, &mut rx), (Ok(Verdict::Protected(2)), inner.clone()));
    }

    #[test]
    fn esp_payload_of_ipv4_and_ipv6() {
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
        assert_eq!(esp_payload(&[]), None);
        // IPv6: next header ESP, payload length within the packet.
        let mut q = vec![0x60, 0, 0, 0, 0, 8, 50, 64];
        q.extend_from_slice(&[1; 32]);
        q.extend_from_slice(&[9; 8]);
        q.extend_from_slice(&[0xee; 4]);
        assert_eq!(esp_payload(&q), Some(&[9u8; 8][..]));
        q[6] = 51;
        assert_eq!(esp_payload(&q), None, "AH outermost");
        q[6] = 50;
        q[4..6].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(esp_payload(&q), None, "payload length beyond the packet");
        assert_eq!(esp_payload(&q[..39]), None);
        assert_eq!(esp_payload(&[0x70; 60]), None);
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
        let src = Some(std::net::SocketAddr::from(([192, 0, 2, 7], 4500)));
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
