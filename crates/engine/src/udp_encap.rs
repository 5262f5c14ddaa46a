//! ESP in UDP (RFC 3948) as an SA property and its framing, sans-IO: the UDP header put
//! between a sealed packet's IP header and its ESP header (RFC 3948 2.1, 3.1.1, 3.2.1), taken
//! off a received one with NAT-keepalives (2.3) and non-ESP datagrams (2.2) told apart
//! (3.1.2, 3.2.2), and the transport-mode checksum fix-up with the original address (3.1.2).
//!
//! This is the one RFC 3948 module: the `ipsec seal|open` tool frames whole packets with
//! [`encapsulate`] and [`decapsulate`]; tunneld, whose kernel UDP socket adds and takes off the
//! IP and UDP headers, sends [`socket_payload`] and sorts what it receives with [`classify`];
//! the data plane checks that a packet of an SA with `encap` arrived in UDP
//! ([`crate::Arrival::encap`], RFC 3948 5.2; Linux counts a miss as XFRMINSTATEMISMATCH).
//!
//! The transforms do not change: an ESP SA still seals and opens plain ESP; the caller frames
//! it. IPv4 datagrams go with a zero UDP checksum (RFC 3948 2.1: it SHOULD be zero; the ESP
//! ICV protects the payload); IPv6 ones with a computed checksum (RFC 8200 8.1: a zero UDP
//! checksum is not allowed over IPv6; RFC 6935/6936 relax that only for tunnels configured
//! for it, which ESP in UDP is not). A received non-zero checksum is checked in both families.

use core::fmt;
use core::net::IpAddr;
use ipsec_core::ip::{self, fold, ipv6_field, ones_sum as sum, proto, Split};
use ipsec_core::{Error, PacketBuf};

/// The length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// The port of ESP in UDP and IKE after a NAT is found (RFC 3948 2.1, RFC 3947 4).
pub const NAT_T_PORT: u16 = 4500;
/// The NAT-keepalive payload (RFC 3948 2.3): one byte, 0xFF.
pub const KEEPALIVE: u8 = 0xFF;
/// How often a NAT-keepalive is sent (RFC 3948 4: 20 seconds by default).
pub const KEEPALIVE_INTERVAL_SECS: u64 = 20;
pub use ipsec_core::nat_t::NON_ESP_MARKER;
/// The shortest ESP payload: its SPI and sequence number.
pub const MIN_ESP: usize = 8;

/// What the payload of a UDP datagram on an ESP-in-UDP port is (RFC 3948 2.2, 2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// An ESP packet (at least its SPI and sequence number).
    Esp,
    /// A NAT-keepalive: one 0xFF byte.
    Keepalive,
    /// The non-ESP marker and what follows it (an IKE message).
    NonEsp,
    /// Too short to be any of them.
    Runt,
}

/// Sorts a UDP payload: a 0xFF byte alone is a keepalive; the non-ESP marker first is IKE;
/// ESP needs at least [`MIN_ESP`] bytes; anything shorter is a runt.
pub fn classify(payload: &[u8]) -> Payload {
    match payload {
        [KEEPALIVE] => Payload::Keepalive,
        p if p.starts_with(&NON_ESP_MARKER) => Payload::NonEsp,
        p if p.len() < MIN_ESP => Payload::Runt,
        _ => Payload::Esp,
    }
}

/// `encap espinudp SPORT DPORT OADDR` of an ESP SA: its packets travel in UDP datagrams from
/// port `sport` to port `dport` (as `ip xfrm state` means them: the ports of the datagrams
/// that carry this SA's packets, whichever host sends them), and `oa` is the peer's original
/// address (NAT-OA, RFC 3947 5.2) when known, for the transport-mode checksum fix-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct UdpEncap {
    /// The UDP source port of this SA's datagrams (1-65535).
    pub sport: u16,
    /// The UDP destination port (1-65535).
    pub dport: u16,
    /// The original address (`0.0.0.0` or `::` in `ip xfrm` words: none).
    pub oa: Option<IpAddr>,
}

impl UdpEncap {
    /// Port 4500 both ways, no original address: what IKE uses once it has found a NAT.
    pub const NAT_T: UdpEncap = UdpEncap {
        sport: NAT_T_PORT,
        dport: NAT_T_PORT,
        oa: None,
    };
}

/// Why a packet was not framed or unframed as ESP in UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapError {
    /// A NAT-keepalive (one 0xFF byte, RFC 3948 2.3): nothing to open; dropped.
    Keepalive,
    /// A non-ESP marker (four zero bytes first, RFC 3948 2.2): an IKE message, not for the
    /// data plane; dropped.
    NonEsp,
    /// A UDP payload too short to be ESP (its SPI and sequence number need 8 bytes).
    Runt,
    /// The UDP header is cut short, or its length field disagrees with the IP packet.
    BadLength,
    /// The UDP checksum does not verify.
    BadChecksum,
    /// A zero UDP checksum over IPv6 (RFC 8200 8.1: the receiver discards it).
    ZeroChecksumV6,
    /// A UDP datagram to this port, where no SA takes ESP in UDP.
    NoSaForPort(u16),
    /// An ESP packet in UDP for an SA without `encap espinudp` on that port.
    UnexpectedEncap(u32),
    /// A plain ESP packet for an SA that uses ESP in UDP (RFC 3948: the peers agreed on it).
    NotEncapsulated(u32),
    /// The packet to put in UDP has no ESP header after its IP header: only ESP goes in UDP.
    NotEsp(u8),
    /// An IPv6 packet with a Routing header: the UDP checksum would need the final
    /// destination, which is not worked out here.
    RoutingHeader,
    /// The IP packet around the datagram is malformed, or the buffer has no room to frame it.
    Ip(Error),
}

impl From<Error> for EncapError {
    fn from(e: Error) -> Self {
        EncapError::Ip(e)
    }
}

impl EncapError {
    /// Whether this is traffic that is expected on an ESP-in-UDP port but is not ESP (a
    /// NAT-keepalive or an IKE message): dropped and counted, not an error of the packet.
    pub fn is_not_esp_traffic(self) -> bool {
        matches!(self, EncapError::Keepalive | EncapError::NonEsp)
    }
}

impl fmt::Display for EncapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncapError::Keepalive => f.write_str("NAT-keepalive (RFC 3948 2.3), dropped"),
            EncapError::NonEsp => f.write_str("non-ESP marker (an IKE message, RFC 3948 2.2), dropped"),
            EncapError::Runt => f.write_str("UDP payload too short for ESP (RFC 3948 2.1)"),
            EncapError::BadLength => f.write_str("UDP length does not match the IP packet"),
            EncapError::BadChecksum => f.write_str("bad UDP checksum"),
            EncapError::ZeroChecksumV6 => f.write_str("zero UDP checksum over IPv6 (RFC 8200 8.1)"),
            EncapError::NoSaForPort(p) => write!(f, "UDP to port {p}: no SA with `encap espinudp` on it"),
            EncapError::UnexpectedEncap(spi) => {
                write!(
                    f,
                    "ESP in UDP for SPI 0x{spi:08x}, whose SA has no `encap espinudp` on that port"
                )
            }
            EncapError::NotEncapsulated(spi) => {
                write!(f, "plain ESP for SPI 0x{spi:08x}, whose SA uses ESP in UDP")
            }
            EncapError::NotEsp(p) => write!(
                f,
                "only ESP goes in UDP, but the outer header is followed by protocol {p}"
            ),
            EncapError::RoutingHeader => {
                f.write_str("IPv6 Routing header: the UDP checksum's final destination is not worked out here")
            }
            EncapError::Ip(e) => e.fmt(f),
        }
    }
}

/// The ports of a received UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ports {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

fn addr_sum(acc: u64, a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => sum(acc, &v.octets()),
        IpAddr::V6(v) => sum(acc, &v.octets()),
    }
}

/// The one's-complement sum of the UDP pseudo-header (RFC 768; RFC 8200 8.1 for IPv6) and the
/// segment as it is (checksum field included).
fn udp_sum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let acc = addr_sum(addr_sum(0, src), dst) + u64::from(proto::UDP) + segment.len() as u64;
    fold(sum(acc, segment))
}

/// Where the header after the IP header(s) starts, refusing IPv6 Routing headers (the
/// pseudo-header's destination would be the final one).
fn split(packet: &[u8]) -> Result<Split, EncapError> {
    match ip::version(packet)? {
        4 => Ok(ip::ipv4_split(packet)?),
        _ => {
            let mut routing = false;
            let s = ip::walk_ipv6_ext(packet, |h| routing |= h.kind == proto::ROUTING)?;
            if routing {
                return Err(EncapError::RoutingHeader);
            }
            Ok(s)
        }
    }
}

/// Whether an IP packet is a fragment (IPv4 MF or offset; an IPv6 Fragment header).
fn is_fragment(packet: &[u8]) -> Result<bool, Error> {
    Ok(match ip::version(packet)? {
        4 => ip::Ipv4Packet::new_checked(packet)?.is_fragment(),
        _ => {
            let mut frag = false;
            ip::walk_ipv6_ext(packet, |h| frag |= h.kind == proto::FRAGMENT)?;
            frag
        }
    })
}

/// RFC 3948 2.1, 3.1.1 step 3 and 3.2.1 step 3: puts a UDP header (`sport` → `dport`, its
/// length, checksum 0 over IPv4 and computed over IPv6) between the IP header (IPv6: its
/// extension headers) and the ESP header of a sealed packet, and fixes the IP length,
/// protocol and (IPv4) header checksum. The packet grows by 8 bytes into the headroom.
pub fn encapsulate(buf: &mut PacketBuf, sport: u16, dport: u16) -> Result<(), EncapError> {
    let s = split(buf.packet())?;
    if s.next != proto::ESP {
        return Err(EncapError::NotEsp(s.next));
    }
    let claimed = ip::claimed_len(buf.packet())?;
    if claimed != buf.len() {
        return Err(Error::MalformedIp.into());
    }
    let v6_header = if buf.packet()[0] >> 4 == 6 {
        ipv6_field::HEADER_LEN
    } else {
        0
    };
    if buf.len() + UDP_HEADER_LEN > ip::MAX_PACKET + v6_header {
        return Err(Error::TooBig.into());
    }
    buf.insert_gap(s.offset, UDP_HEADER_LEN)?;
    let p = buf.packet_mut();
    p[s.nh_offset] = proto::UDP;
    let udp_len = (p.len() - s.offset) as u16;
    let h = &mut p[s.offset..s.offset + UDP_HEADER_LEN];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h[6..8].copy_from_slice(&[0, 0]);
    ip::fix_length(p)?;
    if p[0] >> 4 == 6 {
        let (src, dst) = ip::addrs(p)?;
        let c = match !udp_sum(src, dst, &p[s.offset..]) {
            0 => 0xffff,
            c => c,
        };
        p[s.offset + 6..s.offset + 8].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}

/// The ports of a packet's UDP header right after its IP header (IPv6: after its extension
/// headers), or `None` when the packet is not UDP. Only reads.
pub fn udp_ports(packet: &[u8]) -> Result<Option<Ports>, EncapError> {
    let s = ip::upper_split(packet)?;
    if s.next != proto::UDP {
        return Ok(None);
    }
    let h = packet
        .get(s.offset..s.offset + UDP_HEADER_LEN)
        .ok_or(EncapError::BadLength)?;
    Ok(Some(Ports {
        sport: u16::from_be_bytes([h[0], h[1]]),
        dport: u16::from_be_bytes([h[2], h[3]]),
    }))
}

/// RFC 3948 3.1.2 and 3.2.2 steps 1-2: takes the UDP header off a received ESP-in-UDP packet
/// and makes it the plain ESP packet the SA opens (IP protocol 50, length and IPv4 header
/// checksum fixed). `Ok(None)`: the packet is not UDP and is left as it is. A datagram is
/// refused, unchanged, when it is a fragment, its UDP length or checksum is wrong (a zero
/// checksum is taken over IPv4 only), `takes` does not want its ports (checked first: such a
/// datagram is not looked at further), or its payload is a NAT-keepalive, a non-ESP marker or
/// too short for ESP.
pub fn decapsulate(buf: &mut PacketBuf, takes: impl FnOnce(Ports) -> bool) -> Result<Option<Ports>, EncapError> {
    let Some(ports) = udp_ports(buf.packet())? else {
        return Ok(None);
    };
    if !takes(ports) {
        return Err(EncapError::NoSaForPort(ports.dport));
    }
    let s = split(buf.packet())?;
    let packet = buf.packet();
    if is_fragment(packet)? {
        return Err(Error::Fragment.into());
    }
    let end = ip::claimed_len(packet)?;
    if end > packet.len() {
        return Err(Error::Truncated.into());
    }
    let seg = packet
        .get(s.offset..end)
        .filter(|seg| seg.len() >= UDP_HEADER_LEN)
        .ok_or(EncapError::BadLength)?;
    let udp_len = usize::from(u16::from_be_bytes([seg[4], seg[5]]));
    if udp_len != seg.len() {
        return Err(EncapError::BadLength);
    }
    let checksum = u16::from_be_bytes([seg[6], seg[7]]);
    let v6 = packet[0] >> 4 == 6;
    if checksum == 0 && v6 {
        return Err(EncapError::ZeroChecksumV6);
    }
    if checksum != 0 {
        let (src, dst) = ip::addrs(packet)?;
        if udp_sum(src, dst, seg) != 0xffff {
            return Err(EncapError::BadChecksum);
        }
    }
    match classify(&seg[UDP_HEADER_LEN..]) {
        Payload::Keepalive => return Err(EncapError::Keepalive),
        Payload::NonEsp => return Err(EncapError::NonEsp),
        Payload::Runt => return Err(EncapError::Runt),
        Payload::Esp => {}
    }
    // Link-layer padding after the IP packet goes first, so the gap is the only change.
    buf.trim_back(buf.len() - end)?;
    buf.packet_mut()[s.nh_offset] = proto::ESP;
    buf.remove_gap(s.offset, UDP_HEADER_LEN)?;
    ip::fix_length(buf.packet_mut())?;
    Ok(Some(ports))
}

/// The UDP payload of a sealed packet for a kernel UDP socket, which puts its own IP and UDP
/// headers in front (RFC 3948 2.1, 3.1.1 and 3.2.1 with the socket doing step 3): the ESP
/// header and what follows it, up to the IP length. IPv4 with protocol 50 after the header and
/// its options, IPv6 with next header 50 right after the fixed header (extension headers would
/// be lost, and tunneld's SAs add none); `None` for anything else (AH outermost, a bad length).
pub fn socket_payload(packet: &[u8]) -> Option<&[u8]> {
    match *packet.first()? >> 4 {
        4 => {
            let p = ip::Ipv4Packet::new_checked(packet).ok()?;
            if p.protocol() != proto::ESP {
                return None;
            }
            packet.get(p.header_len()..p.total_len())
        }
        6 => {
            let p = ip::Ipv6Packet::new_checked(packet).ok()?;
            if p.next_header() != proto::ESP {
                return None;
            }
            packet.get(ipv6_field::HEADER_LEN..ipv6_field::HEADER_LEN + p.payload_len())
        }
        _ => None,
    }
}

/// The hop limit (TTL) of a header [`push_datagram_header`] writes: the datagram's is not
/// known, and it is a mutable field nothing checks (RFC 4302 3.3.3.1).
const DATAGRAM_HOPS: u8 = 64;

/// RFC 3948 3.1.2 and 3.2.2 steps 1-2 for a socket that took the IP and UDP headers off: a
/// transport-mode packet opened from the ESP payload of a datagram from `src` to `dst` is
/// the datagram's IP packet with protocol `next` (the ESP trailer's Next Header). Writes that
/// IP header in front of `buf`: IPv4 (RFC 791) with its checksum, DF set, TTL 64, ident 0;
/// IPv6 (RFC 8200 3) with traffic class and flow label 0, hop limit 64. The addresses come
/// from the socket as data; nothing else of the datagram's header is known or needed.
pub fn push_datagram_header(buf: &mut PacketBuf, src: IpAddr, dst: IpAddr, next: u8) -> Result<(), EncapError> {
    let payload = buf.len();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = ip::ipv4_field::HEADER_LEN;
            let total = u16::try_from(h + payload).map_err(|_| Error::TooBig)?;
            buf.push_front(h)?;
            let hdr = &mut buf.packet_mut()[..h];
            hdr.copy_from_slice(&[
                0x45,
                0,
                0,
                0,
                0,
                0,
                0x40,
                0,
                DATAGRAM_HOPS,
                next,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ]);
            hdr[2..4].copy_from_slice(&total.to_be_bytes());
            hdr[12..16].copy_from_slice(&s.octets());
            hdr[16..20].copy_from_slice(&d.octets());
            let sum = ip::checksum(hdr);
            hdr[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = ipv6_field::HEADER_LEN;
            let len = u16::try_from(payload).map_err(|_| Error::TooBig)?;
            buf.push_front(h)?;
            let hdr = &mut buf.packet_mut()[..h];
            hdr[..4].copy_from_slice(&[0x60, 0, 0, 0]);
            hdr[4..6].copy_from_slice(&len.to_be_bytes());
            hdr[6] = next;
            hdr[7] = DATAGRAM_HOPS;
            hdr[8..24].copy_from_slice(&s.octets());
            hdr[24..40].copy_from_slice(&d.octets());
        }
        _ => return Err(Error::MalformedIp.into()),
    }
    Ok(())
}

/// RFC 3948 3.1.2 step 3: the TCP or UDP checksum of a packet opened from a transport-mode SA
/// was computed by the peer over its original source address `oa` (NAT-OA), which a NAT may
/// have rewritten; the checksum is moved from `oa` to the packet's source address
/// incrementally (RFC 1624 eqn. 3), so the receiving stack's check holds. Returns whether it
/// changed the packet: not for other protocols, an IPv4 UDP checksum of 0 (none), a
/// non-first fragment, a header cut short, an `oa` of the other family or equal to the source.
pub fn fix_transport_checksum(packet: &mut [u8], oa: IpAddr) -> bool {
    let Ok(s) = ip::upper_split(packet) else {
        return false;
    };
    let Ok((src, _)) = ip::addrs(packet) else {
        return false;
    };
    if src == oa || src.is_ipv4() != oa.is_ipv4() || later_fragment(packet) {
        return false;
    }
    let at = match s.next {
        proto::TCP => s.offset + 16,
        proto::UDP => s.offset + 6,
        _ => return false,
    };
    let Some(field) = packet.get(at..at + 2) else {
        return false;
    };
    let old = u16::from_be_bytes([field[0], field[1]]);
    if s.next == proto::UDP && old == 0 && src.is_ipv4() {
        return false;
    }
    // HC' = ~(~HC + ~m + m'): m the words of `oa`, m' those of the source. The sum of the
    // complements of m's words is the complement of their folded sum.
    let m = fold(addr_sum(0, oa));
    let m2 = fold(addr_sum(0, src));
    let mut new = !fold(u64::from(!old) + u64::from(!m) + u64::from(m2));
    if s.next == proto::UDP && new == 0 {
        new = 0xffff;
    }
    packet[at..at + 2].copy_from_slice(&new.to_be_bytes());
    true
}

/// Whether the packet is an IP fragment other than the first (no upper-layer header in it).
fn later_fragment(packet: &[u8]) -> bool {
    match packet.first().map(|b| b >> 4) {
        Some(4) => packet
            .get(6..8)
            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0x1fff != 0),
        Some(6) => {
            let mut later = false;
            let _ = ip::walk_ipv6_ext(packet, |h| {
                if h.kind == proto::FRAGMENT {
                    later |= packet
                        .get(h.offset + 2..h.offset + 4)
                        .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0xfff8 != 0);
                }
            });
            later
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// An IPv4 packet (`src` → `dst`) carrying `payload` as protocol `p`.
    fn v4(p: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, p, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2,
        ];
        v.extend_from_slice(payload);
        ip::fix_length(&mut v).unwrap();
        v
    }

    fn v6(p: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0, 0, 0, p, 64];
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(payload);
        ip::fix_length(&mut v).unwrap();
        v
    }

    fn esp_body() -> Vec<u8> {
        (0..60u8).map(|i| i.wrapping_mul(13) | 1).collect()
    }

    /// Runs `f` on a PacketBuf holding `packet` with 64 bytes of headroom; returns the result
    /// and the packet after.
    fn with_buf<T>(packet: &[u8], f: impl FnOnce(&mut PacketBuf) -> T) -> (T, Vec<u8>) {
        let mut raw = vec![0u8; 64 + packet.len() + 16];
        raw[64..64 + packet.len()].copy_from_slice(packet);
        let mut b = PacketBuf::new(&mut raw, 64, packet.len()).unwrap();
        let r = f(&mut b);
        let out = b.packet().to_vec();
        (r, out)
    }

    #[test]
    fn classifies_like_rfc_3948() {
        assert_eq!(classify(&[0xff]), Payload::Keepalive);
        assert_eq!(classify(&[0, 0, 0, 0, 1, 2, 3, 4, 5]), Payload::NonEsp);
        assert_eq!(classify(&[0, 0, 0, 0]), Payload::NonEsp);
        assert_eq!(classify(&[]), Payload::Runt);
        assert_eq!(classify(&[0xfe]), Payload::Runt);
        assert_eq!(classify(&[0, 0, 0x10, 1, 0, 0, 0]), Payload::Runt);
        assert_eq!(classify(&[0, 0, 0x10, 1, 0, 0, 0, 1]), Payload::Esp);
        assert_eq!(classify(&[0xff, 0xff]), Payload::Runt);
    }

    #[test]
    fn socket_payload_of_ipv4_and_ipv6() {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 50, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
        p.extend_from_slice(&[9; 8]);
        p.extend_from_slice(&[0xee; 4]); // after the IP length: not sent
        assert_eq!(socket_payload(&p), Some(&[9u8; 8][..]));
        p[9] = 51;
        assert_eq!(socket_payload(&p), None);
        p[9] = 50;
        p[0] = 0x44;
        assert_eq!(socket_payload(&p), None);
        p[0] = 0x45;
        p[2..4].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(socket_payload(&p), None);
        assert_eq!(socket_payload(&[]), None);
        // IPv6: next header ESP, payload length within the packet.
        let mut q = vec![0x60, 0, 0, 0, 0, 8, 50, 64];
        q.extend_from_slice(&[1; 32]);
        q.extend_from_slice(&[9; 8]);
        q.extend_from_slice(&[0xee; 4]);
        assert_eq!(socket_payload(&q), Some(&[9u8; 8][..]));
        q[6] = 51;
        assert_eq!(socket_payload(&q), None, "AH outermost");
        q[6] = 50;
        q[4..6].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(socket_payload(&q), None, "payload length beyond the packet");
        assert_eq!(socket_payload(&q[..39]), None);
        assert_eq!(socket_payload(&[0x70; 60]), None);
    }

    #[test]
    fn ipv4_gets_a_udp_header_with_a_zero_checksum_and_loses_it_again() {
        let plain = v4(proto::ESP, &esp_body());
        let (r, wire) = with_buf(&plain, |b| encapsulate(b, 4500, 4501));
        r.unwrap();
        let h = etherparse::Ipv4HeaderSlice::from_slice(&wire).unwrap();
        assert_eq!(h.protocol(), etherparse::IpNumber::UDP);
        assert_eq!(usize::from(h.total_len()), plain.len() + 8);
        assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
        let u = etherparse::UdpHeaderSlice::from_slice(&wire[20..]).unwrap();
        assert_eq!(
            (u.source_port(), u.destination_port(), u.length(), u.checksum()),
            (4500, 4501, 68, 0)
        );
        assert_eq!(&wire[28..], &esp_body()[..]);
        let (r, back) = with_buf(&wire, |b| decapsulate(b, |p| p.dport == 4501));
        assert_eq!(
            r,
            Ok(Some(Ports {
                sport: 4500,
                dport: 4501
            }))
        );
        assert_eq!(back, plain);
    }

    #[test]
    fn ipv6_gets_a_real_checksum_that_etherparse_agrees_with() {
        let plain = v6(proto::ESP, &esp_body());
        let (r, wire) = with_buf(&plain, |b| encapsulate(b, 4500, 4500));
        r.unwrap();
        let (ip6, rest) = etherparse::Ipv6Header::from_slice(&wire).unwrap();
        assert_eq!(ip6.next_header, etherparse::IpNumber::UDP);
        assert_eq!(usize::from(ip6.payload_length), rest.len());
        let (u, body) = etherparse::UdpHeader::from_slice(rest).unwrap();
        assert_ne!(u.checksum, 0);
        assert_eq!(u.checksum, u.calc_checksum_ipv6(&ip6, body).unwrap());
        let (r, back) = with_buf(&wire, |b| decapsulate(b, |_| true));
        assert!(r.unwrap().is_some());
        assert_eq!(back, plain);
        // A flipped payload bit is caught by the checksum; a zero checksum is refused.
        let mut bad = wire.clone();
        bad[60] ^= 1;
        assert_eq!(
            with_buf(&bad, |b| decapsulate(b, |_| true)).0,
            Err(EncapError::BadChecksum)
        );
        let mut zero = wire.clone();
        zero[46..48].copy_from_slice(&[0, 0]);
        assert_eq!(
            with_buf(&zero, |b| decapsulate(b, |_| true)).0,
            Err(EncapError::ZeroChecksumV6)
        );
    }

    #[test]
    fn ipv4_checksums_are_checked_when_present() {
        let plain = v4(proto::ESP, &esp_body());
        let (_, mut wire) = with_buf(&plain, |b| encapsulate(b, 4500, 4500));
        // A correct non-zero checksum is taken, a wrong one refused.
        let (src, dst) = ip::addrs(&wire).unwrap();
        let c = !udp_sum(src, dst, &wire[20..]);
        wire[26..28].copy_from_slice(&c.to_be_bytes());
        assert!(with_buf(&wire, |b| decapsulate(b, |_| true)).0.unwrap().is_some());
        wire[27] ^= 0x40;
        let (r, after) = with_buf(&wire, |b| decapsulate(b, |_| true));
        assert_eq!(r, Err(EncapError::BadChecksum));
        assert_eq!(after, wire, "a refused datagram is left as it was");
    }

    #[test]
    fn keepalives_markers_runts_and_other_ports_are_told_apart() {
        let udp = |payload: &[u8], dport: u16| {
            let mut u = vec![0x11, 0x94];
            u.extend_from_slice(&dport.to_be_bytes());
            u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u.extend_from_slice(payload);
            v4(proto::UDP, &u)
        };
        let dec = |p: &[u8]| with_buf(p, |b| decapsulate(b, |p| p.dport == 4500)).0;
        assert_eq!(dec(&udp(&[0xff], 4500)), Err(EncapError::Keepalive));
        assert_eq!(
            dec(&udp(&[0, 0, 0, 0, 1, 2, 3, 4, 5, 6], 4500)),
            Err(EncapError::NonEsp)
        );
        assert_eq!(dec(&udp(&[1, 2, 3], 4500)), Err(EncapError::Runt));
        assert_eq!(dec(&udp(&[0xff], 53)), Err(EncapError::NoSaForPort(53)));
        assert!(dec(&udp(&[0, 0, 0x10, 1, 0, 0, 0, 1], 4500)).unwrap().is_some());
        // A UDP length that disagrees with the IP length, a fragment, a cut header.
        let mut p = udp(&[0, 0, 0x10, 1, 0, 0, 0, 1], 4500);
        p[25] = 99;
        assert_eq!(dec(&p), Err(EncapError::BadLength));
        let mut p = udp(&[0, 0, 0x10, 1, 0, 0, 0, 1], 4500);
        p[6] = 0x20; // MF
        ip::fix_length(&mut p).unwrap();
        assert_eq!(dec(&p), Err(Error::Fragment.into()));
        let p = v4(proto::UDP, &[0x11, 0x94, 0x11]);
        assert_eq!(dec(&p), Err(EncapError::BadLength));
        // Not UDP: left alone.
        let p = v4(proto::ESP, &esp_body());
        assert_eq!(with_buf(&p, |b| decapsulate(b, |_| true)), (Ok(None), p.clone()));
        assert!(EncapError::Keepalive.is_not_esp_traffic() && !EncapError::Runt.is_not_esp_traffic());
    }

    #[test]
    fn only_esp_goes_in_udp() {
        let p = v4(proto::AH, &esp_body());
        assert_eq!(with_buf(&p, |b| encapsulate(b, 1, 2)).0, Err(EncapError::NotEsp(51)));
        // No headroom: refused, not a panic.
        let p = v4(proto::ESP, &esp_body());
        let mut raw = p.clone();
        let mut b = PacketBuf::new(&mut raw, 0, p.len()).unwrap();
        assert_eq!(encapsulate(&mut b, 1, 2), Err(Error::NoHeadroom.into()));
        // IPv6 with a Routing header is refused.
        let mut rh = vec![proto::ESP, 0, 0, 0, 0, 0, 0, 0];
        rh.extend_from_slice(&esp_body());
        let p = v6(proto::ROUTING, &rh);
        assert_eq!(with_buf(&p, |b| encapsulate(b, 1, 2)).0, Err(EncapError::RoutingHeader));
    }

    /// A TCP or UDP checksum made over `oa` as source becomes the one over the packet's source.
    #[test]
    fn transport_checksums_move_from_the_original_address_to_the_packets_source() {
        for udp in [true, false] {
            let body: Vec<u8> = (0..37u8).collect();
            let oa: IpAddr = "10.0.0.7".parse().unwrap();
            let mut l4 = if udp {
                let mut u = vec![0x9c, 0x40, 0x9c, 0x41, 0, 45, 0, 0];
                u.extend_from_slice(&body);
                u
            } else {
                let mut t = vec![
                    0x9c, 0x42, 0x9c, 0x43, 1, 2, 3, 4, 0, 0, 0, 0, 0x50, 0x18, 0x10, 0, 0, 0, 0, 0,
                ];
                t.extend_from_slice(&body);
                t
            };
            let at = if udp { 6 } else { 16 };
            let p = if udp { proto::UDP } else { proto::TCP };
            let pseudo = |src: IpAddr, seg: &[u8]| {
                let dst: IpAddr = "198.51.100.2".parse().unwrap();
                let acc = addr_sum(addr_sum(0, src), dst) + u64::from(p) + seg.len() as u64;
                fold(sum(acc, seg))
            };
            let c = !pseudo(oa, &l4);
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
            let mut pkt = v4(p, &l4);
            let src: IpAddr = "192.0.2.1".parse().unwrap();
            assert_ne!(pseudo(src, &pkt[20..]), 0xffff, "wrong before the fix-up");
            assert!(fix_transport_checksum(&mut pkt, oa));
            assert_eq!(pseudo(src, &pkt[20..]), 0xffff, "right after it (udp: {udp})");
            // The same address, another family, IPv4 UDP without checksum: untouched.
            assert!(!fix_transport_checksum(&mut pkt, src));
            assert!(!fix_transport_checksum(&mut pkt, "2001:db8::1".parse().unwrap()));
        }
        let mut no_sum = v4(proto::UDP, &[0, 1, 0, 2, 0, 9, 0, 0, 7]);
        let before = no_sum.clone();
        assert!(!fix_transport_checksum(&mut no_sum, "10.0.0.7".parse().unwrap()));
        assert_eq!(no_sum, before);
        assert!(!fix_transport_checksum(&mut [0x45, 0], "10.0.0.7".parse().unwrap()));
    }
}
