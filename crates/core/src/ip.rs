//! IPv4 and IPv6 header views in the smoltcp style: [`Ipv4Packet::new_checked`] and
//! [`Ipv6Packet::new_checked`] validate lengths once, after which no accessor can panic.
//! [`Ipv4Repr`] and [`Ipv6Repr`] emit the headers a tunnel-mode SA prepends.

use crate::error::Error;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol numbers (IANA) used by the transforms.
pub mod proto {
    /// IPv6 Hop-by-Hop Options.
    pub const HOPOPTS: u8 = 0;
    /// IPv4 in IP (tunnel-mode next header for an IPv4 inner packet).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP (tunnel-mode next header for an IPv6 inner packet).
    pub const IPV6: u8 = 41;
    /// IPv6 Routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// Authentication Header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header.
    pub const NONE: u8 = 59;
    /// IPv6 Destination Options.
    pub const DSTOPTS: u8 = 60;
    /// IP Payload Compression.
    pub const COMP: u8 = 108;
}

/// The largest IP packet (IPv4 total length and IPv6 payload length are 16-bit).
pub const MAX_PACKET: usize = 65535;

/// RFC 1071 Internet checksum over `data`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(ones_sum(0, data))
}

/// The RFC 1071 one's-complement sum of `data` (big-endian 16-bit words) added to `acc`, the
/// carries not yet folded, so a checksum can be summed in pieces (a pseudo-header, then the
/// segment). Eight bytes at a time: two 32-bit halves, which fold to the same 16-bit sum (RFC
/// 1071 2(B)). An odd last byte is padded with zero, so only the last piece may be odd.
#[inline]
pub fn ones_sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc = acc.wrapping_add(w >> 32).wrapping_add(w & 0xffff_ffff);
    }
    let mut rest = chunks.remainder().chunks_exact(2);
    for c in &mut rest {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = rest.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum from [`ones_sum`] to 16 bits (not complemented).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The IP version of a packet from its first nibble.
#[inline]
pub fn version(packet: &[u8]) -> Result<u8, Error> {
    match packet.first().map(|b| b >> 4) {
        Some(v @ (4 | 6)) => Ok(v),
        _ => Err(Error::MalformedIp),
    }
}

/// IPv4 header field offsets (RFC 791 section 3.1).
pub mod ipv4_field {
    use core::ops::Range;
    /// Version and IHL.
    pub const VER_IHL: usize = 0;
    /// Type of service (DSCP and ECN).
    pub const TOS: usize = 1;
    /// Total length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags and fragment offset.
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;
}

/// A view of an IPv4 packet.
#[derive(Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }
    /// Wraps a buffer and checks it with [`Ipv4Packet::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the version is 4, the header length is at least 20 and fits, and the
    /// total length covers the header and fits in the buffer (trailing bytes are allowed).
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < ipv4_field::HEADER_LEN || b[0] >> 4 != 4 {
            return Err(Error::MalformedIp);
        }
        let hl = ((b[0] & 0x0f) as usize) * 4;
        let tl = u16::from_be_bytes([b[2], b[3]]) as usize;
        if hl < ipv4_field::HEADER_LEN || hl > b.len() || tl < hl || tl > b.len() {
            return Err(Error::MalformedIp);
        }
        Ok(())
    }
    /// Consumes the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[ipv4_field::VER_IHL] & 0x0f) as usize) * 4
    }
    /// Total length.
    #[inline]
    pub fn total_len(&self) -> usize {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]]) as usize
    }
    /// Type of service.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[ipv4_field::TOS]
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }
    /// The Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }
    /// Whether this is a fragment (More Fragments set or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]]) & 0x3fff != 0
    }
    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[ipv4_field::TTL]
    }
    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[ipv4_field::PROTOCOL]
    }
    /// Header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[10], b[11]])
    }
    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        self.buffer.as_mut()[ipv4_field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }
    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[ipv4_field::PROTOCOL] = p;
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[ipv4_field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum(&b[..hl]);
        b[ipv4_field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// IPv6 header field offsets (RFC 8200 section 3).
pub mod ipv6_field {
    use core::ops::Range;
    /// Version, traffic class and flow label.
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;
}

/// A view of an IPv6 packet.
#[derive(Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checks.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }
    /// Wraps a buffer and checks it with [`Ipv6Packet::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the version and that the payload length fits in the buffer. A payload length of
    /// 0 (a jumbogram) is refused.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < ipv6_field::HEADER_LEN || b[0] >> 4 != 6 {
            return Err(Error::MalformedIp);
        }
        let pl = u16::from_be_bytes([b[4], b[5]]) as usize;
        if ipv6_field::HEADER_LEN + pl > b.len() {
            return Err(Error::MalformedIp);
        }
        Ok(())
    }
    /// Consumes the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }
    /// Payload length.
    #[inline]
    pub fn payload_len(&self) -> usize {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]]) as usize
    }
    /// Total length (header plus payload).
    #[inline]
    pub fn total_len(&self) -> usize {
        ipv6_field::HEADER_LEN + self.payload_len()
    }
    /// Next header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[ipv6_field::NEXT_HEADER]
    }
    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[ipv6_field::HOP_LIMIT]
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[ipv6_field::SRC]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[ipv6_field::DST]);
        Ipv6Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[ipv6_field::PAYLOAD_LEN].copy_from_slice(&len.to_be_bytes());
    }
}

/// One IPv6 extension header found while walking the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader {
    /// Its protocol number.
    pub kind: u8,
    /// Offset from the start of the packet.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Length of the IPv6 extension header of `kind` at `data[off..]`, checked against `end`.
fn ext_len(data: &[u8], kind: u8, off: usize, end: usize) -> Result<usize, Error> {
    if off + 8 > end {
        return Err(Error::MalformedIp);
    }
    let len = match kind {
        proto::FRAGMENT => 8,
        proto::AH => (data[off + 1] as usize + 2) * 4,
        _ => (data[off + 1] as usize + 1) * 8,
    };
    if off + len > end {
        return Err(Error::MalformedIp);
    }
    Ok(len)
}

/// Whether `kind` is an IPv6 extension header this crate walks over.
pub fn is_ipv6_ext(kind: u8) -> bool {
    matches!(kind, proto::HOPOPTS | proto::ROUTING | proto::DSTOPTS | proto::FRAGMENT)
}

/// Where a header goes into, or is found in, an IP packet: the offset of the Next Header (or
/// Protocol) byte that names it and the offset at which it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Offset of the byte that holds the protocol number of what follows.
    pub nh_offset: usize,
    /// Offset of the header that follows (the ESP/AH/IPComp header, or the upper layer).
    pub offset: usize,
    /// The protocol number stored at `nh_offset`.
    pub next: u8,
}

/// The IPv4 header (with options) and the protocol after it (RFC 791 section 3.1).
pub fn ipv4_split(packet: &[u8]) -> Result<Split, Error> {
    let p = Ipv4Packet::new_checked(packet)?;
    Ok(Split {
        nh_offset: ipv4_field::PROTOCOL,
        offset: p.header_len(),
        next: p.protocol(),
    })
}

/// Where the upper layer (or the first non-extension header, e.g. ESP) of a packet starts:
/// after the IPv4 header, or after the whole IPv6 extension header chain.
pub fn upper_split(packet: &[u8]) -> Result<Split, Error> {
    match version(packet)? {
        4 => ipv4_split(packet),
        _ => walk_ipv6_ext(packet, |_| {}),
    }
}

/// The place to insert a transport-mode ESP or AH header (RFC 4303 3.1.1, RFC 4302 3.1.1):
/// after the IPv4 header with its options; for IPv6 after the Hop-by-Hop and Routing headers
/// and any Destination Options not preceded by a Routing header (the rule
/// of Linux's `ip6_find_1stfragopt` and scapy; Destination Options after a Routing header go
/// inside).
pub fn transport_split(packet: &[u8]) -> Result<Split, Error> {
    match version(packet)? {
        4 => ipv4_split(packet),
        _ => {
            let p = Ipv6Packet::new_checked(packet)?;
            let end = p.total_len();
            let mut split = Split {
                nh_offset: ipv6_field::NEXT_HEADER,
                offset: ipv6_field::HEADER_LEN,
                next: p.next_header(),
            };
            let mut seen_routing = false;
            loop {
                match split.next {
                    proto::HOPOPTS => {}
                    proto::ROUTING => seen_routing = true,
                    // Destination options after a Routing header are for the final
                    // destination only: they go inside.
                    proto::DSTOPTS if !seen_routing => {}
                    _ => return Ok(split),
                }
                let len = ext_len(packet, split.next, split.offset, end)?;
                split = Split {
                    nh_offset: split.offset,
                    offset: split.offset + len,
                    next: packet[split.offset],
                };
            }
        }
    }
}

/// Finds the first header of protocol `want` (e.g. ESP) in an IP packet, walking IPv6
/// extension headers. Returns [`Error::WrongProtocol`] with the first non-extension
/// protocol if there is none.
pub fn find_header(packet: &[u8], want: u8) -> Result<Split, Error> {
    match version(packet)? {
        4 => {
            let p = Ipv4Packet::new_checked(packet)?;
            if p.protocol() != want {
                return Err(Error::WrongProtocol(p.protocol()));
            }
            Ok(Split {
                nh_offset: ipv4_field::PROTOCOL,
                offset: p.header_len(),
                next: want,
            })
        }
        _ => {
            let p = Ipv6Packet::new_checked(packet)?;
            let end = p.total_len();
            let mut split = Split {
                nh_offset: ipv6_field::NEXT_HEADER,
                offset: ipv6_field::HEADER_LEN,
                next: p.next_header(),
            };
            loop {
                if split.next == want {
                    return Ok(split);
                }
                if !is_ipv6_ext(split.next) {
                    return Err(Error::WrongProtocol(split.next));
                }
                let len = ext_len(packet, split.next, split.offset, end)?;
                split = Split {
                    nh_offset: split.offset,
                    offset: split.offset + len,
                    next: packet[split.offset],
                };
            }
        }
    }
}

/// Walks the IPv6 extension header chain of `packet` from the fixed header, calling `f` for
/// each extension header until a non-extension protocol; returns that protocol and its offset.
pub fn walk_ipv6_ext(packet: &[u8], mut f: impl FnMut(ExtHeader)) -> Result<Split, Error> {
    let p = Ipv6Packet::new_checked(packet)?;
    let end = p.total_len();
    let mut split = Split {
        nh_offset: ipv6_field::NEXT_HEADER,
        offset: ipv6_field::HEADER_LEN,
        next: p.next_header(),
    };
    while is_ipv6_ext(split.next) {
        let len = ext_len(packet, split.next, split.offset, end)?;
        f(ExtHeader {
            kind: split.next,
            offset: split.offset,
            len,
        });
        split = Split {
            nh_offset: split.offset,
            offset: split.offset + len,
            next: packet[split.offset],
        };
    }
    Ok(split)
}

/// Sets the IP length field(s) of `packet` to its length and, for IPv4, refreshes the header
/// checksum.
#[inline]
pub fn fix_length(packet: &mut [u8]) -> Result<(), Error> {
    let len = packet.len();
    match version(packet)? {
        4 => {
            check_ipv4_rewrite(packet)?;
            let next = packet[ipv4_field::PROTOCOL];
            ipv4_rewrite(packet, len as u16, next);
        }
        _ => {
            if !(ipv6_field::HEADER_LEN..=MAX_PACKET + ipv6_field::HEADER_LEN).contains(&len) {
                return Err(Error::TooBig);
            }
            Ipv6Packet::new_unchecked(packet).set_payload_len((len - ipv6_field::HEADER_LEN) as u16);
        }
    }
    Ok(())
}

/// `packet[nh_offset] = next` followed by [`fix_length`] (the same bytes and errors; an
/// offset outside the packet is [`Error::Truncated`], nothing written): what
/// transport-mode ESP and AH do to the IP header they sealed or opened. For an IPv4 header
/// (`nh_offset` is its protocol field) the header is read once, with the new length and
/// protocol in place of the old, before anything is written: summing the checksum over
/// fields just stored would make the CPU wait for the stores to reach the cache (a load that
/// spans two stores cannot be forwarded from them).
#[inline]
pub fn set_next_and_length(packet: &mut [u8], nh_offset: usize, next: u8) -> Result<(), Error> {
    if nh_offset >= packet.len() {
        return Err(Error::Truncated);
    }
    if nh_offset == ipv4_field::PROTOCOL && version(packet)? == 4 {
        if let Err(e) = check_ipv4_rewrite(packet) {
            packet[nh_offset] = next;
            return Err(e);
        }
        let len = packet.len() as u16;
        ipv4_rewrite(packet, len, next);
        return Ok(());
    }
    packet[nh_offset] = next;
    fix_length(packet)
}

/// [`fix_length`]'s checks of an IPv4 packet: length from 20 to 65535 bytes, a header length
/// field of at least 5 words that fit.
#[inline]
fn check_ipv4_rewrite(packet: &[u8]) -> Result<(), Error> {
    let len = packet.len();
    if !(ipv4_field::HEADER_LEN..=MAX_PACKET).contains(&len) {
        return Err(Error::TooBig);
    }
    if ((packet[0] & 0x0f) as usize) * 4 > len || packet[0] & 0x0f < 5 {
        return Err(Error::MalformedIp);
    }
    Ok(())
}

/// Writes total length `len`, protocol `next` and the header checksum (RFC 791, RFC 1071) of
/// a checked IPv4 header. The sum is taken over the header's 32-bit words as they are read,
/// with the length, protocol and (zero) checksum put in, so no load depends on a store just
/// made; the words fold to the same 16-bit sum as the 16-bit words (RFC 1071 2(B)).
#[inline]
fn ipv4_rewrite(packet: &mut [u8], len: u16, next: u8) {
    let hl = ((packet[0] & 0x0f) as usize) * 4;
    let mut acc = 0u64;
    for (i, w) in packet[..hl].chunks_exact(4).enumerate() {
        let mut w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        match i {
            0 => w = (w & 0xffff_0000) | u32::from(len),
            2 => w = (w & 0xff00_0000) | (u32::from(next) << 16),
            _ => {}
        }
        acc += u64::from(w >> 16) + u64::from(w & 0xffff);
    }
    let sum = !fold(acc);
    packet[ipv4_field::LENGTH].copy_from_slice(&len.to_be_bytes());
    packet[ipv4_field::PROTOCOL] = next;
    packet[ipv4_field::CHECKSUM].copy_from_slice(&sum.to_be_bytes());
}

/// A tunnel-mode outer IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length.
    pub payload_len: usize,
    /// Type of service.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Parses the fixed fields of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self, Error> {
        p.check_len()?;
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
        })
    }
    /// Header length (no options).
    #[inline]
    pub fn buffer_len(&self) -> usize {
        ipv4_field::HEADER_LEN
    }
    /// Writes the header, with its checksum, to `buf[..20]`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let total = self.payload_len + ipv4_field::HEADER_LEN;
        if total > MAX_PACKET {
            return Err(Error::TooBig);
        }
        let b = buf.get_mut(..ipv4_field::HEADER_LEN).ok_or(Error::NoHeadroom)?;
        b[0] = 0x45;
        b[1] = self.tos;
        b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        b[4..6].copy_from_slice(&self.ident.to_be_bytes());
        b[6..8].copy_from_slice(&(if self.dont_frag { 0x4000u16 } else { 0 }).to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[10..12].copy_from_slice(&[0, 0]);
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum(b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }
}

/// A tunnel-mode outer IPv6 header (no extension headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parses the fixed header of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self, Error> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
        })
    }
    /// Header length.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        ipv6_field::HEADER_LEN
    }
    /// Writes the header to `buf[..40]`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        if self.payload_len > MAX_PACKET {
            return Err(Error::TooBig);
        }
        let b = buf.get_mut(..ipv6_field::HEADER_LEN).ok_or(Error::NoHeadroom)?;
        let w = (6u32 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0xfffff);
        b[0..4].copy_from_slice(&w.to_be_bytes());
        b[4..6].copy_from_slice(&(self.payload_len as u16).to_be_bytes());
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src.octets());
        b[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// The TOS / traffic class byte of an IP packet.
#[inline]
pub fn tos(packet: &[u8]) -> Result<u8, Error> {
    match version(packet)? {
        4 => Ok(Ipv4Packet::new_checked(packet)?.tos()),
        _ => Ok(Ipv6Packet::new_checked(packet)?.traffic_class()),
    }
}

/// Source and destination addresses of an IP packet.
pub fn addrs(packet: &[u8]) -> Result<(IpAddr, IpAddr), Error> {
    match version(packet)? {
        4 => {
            let p = Ipv4Packet::new_checked(packet)?;
            Ok((p.src().into(), p.dst().into()))
        }
        _ => {
            let p = Ipv6Packet::new_checked(packet)?;
            Ok((p.src().into(), p.dst().into()))
        }
    }
}

/// The length an IP packet claims (IPv4 total length, IPv6 40 + payload length).
#[inline]
pub fn claimed_len(packet: &[u8]) -> Result<usize, Error> {
    match version(packet)? {
        4 => Ok(Ipv4Packet::new_checked(packet)?.total_len()),
        _ => Ok(Ipv6Packet::new_checked(packet)?.total_len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old way: the byte written, then the length set and the checksum summed over the
    /// header as stored (`Ipv4Packet::fill_checksum`).
    fn next_and_length_reference(packet: &mut [u8], nh_offset: usize, next: u8) -> Result<(), Error> {
        *packet.get_mut(nh_offset).ok_or(Error::Truncated)? = next;
        let len = packet.len();
        match version(packet)? {
            4 => {
                if !(ipv4_field::HEADER_LEN..=MAX_PACKET).contains(&len) {
                    return Err(Error::TooBig);
                }
                if ((packet[0] & 0x0f) as usize) * 4 > len || packet[0] & 0x0f < 5 {
                    return Err(Error::MalformedIp);
                }
                let mut p = Ipv4Packet::new_unchecked(packet);
                p.set_total_len(len as u16);
                p.fill_checksum();
            }
            _ => {
                if !(ipv6_field::HEADER_LEN..=MAX_PACKET + ipv6_field::HEADER_LEN).contains(&len) {
                    return Err(Error::TooBig);
                }
                Ipv6Packet::new_unchecked(packet).set_payload_len((len - ipv6_field::HEADER_LEN) as u16);
            }
        }
        Ok(())
    }

    /// `set_next_and_length` and `fix_length` give the bytes and errors of the store-then-sum
    /// reference for IPv4 headers of every header length (with patterned options and a
    /// stale checksum), packet lengths around the limits, broken header lengths, and IPv6
    /// (where the Next Header byte may lie in an extension header).
    #[test]
    fn set_next_and_length_is_store_then_fix_length() {
        let mut cases: std::vec::Vec<(std::vec::Vec<u8>, usize)> = std::vec::Vec::new();
        for ihl in 0..16u8 {
            for len in [0usize, 19, 20, 24, 60, 61, 1400, 65535, 65536] {
                let mut p: std::vec::Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(ihl)).collect();
                if let Some(b) = p.first_mut() {
                    *b = 0x40 | ihl;
                }
                cases.push((p, ipv4_field::PROTOCOL));
            }
        }
        let mut v6 = v6_chain().to_vec();
        v6.extend_from_slice(&[9; 30]);
        cases.push((v6.clone(), ipv6_field::NEXT_HEADER));
        cases.push((v6.clone(), 80)); // the last Destination Options header's Next Header
        cases.push((v6[..39].to_vec(), ipv6_field::NEXT_HEADER));
        for (p, nh) in cases {
            for next in [proto::ESP, proto::UDP, 0xff] {
                let (mut a, mut b) = (p.clone(), p.clone());
                let ra = set_next_and_length(&mut a, nh, next);
                let rb = next_and_length_reference(&mut b, nh, next);
                assert_eq!(ra, rb, "len {} byte0 {:#x}", p.len(), p[0]);
                assert_eq!(a, b, "len {} byte0 {:#x}", p.len(), p[0]);
                if ra.is_ok() && p[0] >> 4 == 4 {
                    assert!(Ipv4Packet::new_unchecked(&a[..]).verify_checksum());
                    let (mut c, mut d) = (p.clone(), p.clone());
                    c[nh] = next;
                    d[nh] = next;
                    assert_eq!(fix_length(&mut c), next_and_length_reference(&mut d, nh, next));
                    assert_eq!(c, d);
                }
            }
        }
        assert_eq!(set_next_and_length(&mut [0x45; 20], 25, 1), Err(Error::Truncated));
    }

    /// RFC 1071's example header (checksum 0xb861), its length and protocol put back by
    /// `set_next_and_length` over a header whose length, protocol and checksum were wrong.
    #[test]
    fn set_next_and_length_rfc1071_example() {
        let want = hex::decode("45000073000040004011b861c0a80001c0a800c7").unwrap();
        let mut p = want.clone();
        p.resize(0x73, 0);
        p[2..4].copy_from_slice(&[0x12, 0x34]);
        p[9] = 50;
        p[10..12].copy_from_slice(&[0xde, 0xad]);
        set_next_and_length(&mut p, ipv4_field::PROTOCOL, proto::UDP).unwrap();
        assert_eq!(p[..20], want[..]);
    }

    /// An IPv6 packet: HBH(8) -> DSTOPT(8) -> ROUTING(24) -> DSTOPT(8) -> UDP(8).
    fn v6_chain() -> [u8; 96] {
        let mut p = [0u8; 96];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&56u16.to_be_bytes());
        p[6] = proto::HOPOPTS;
        p[40] = proto::DSTOPTS; // HBH
        p[48] = proto::ROUTING; // DST
        p[56] = proto::DSTOPTS; // RH, hdr ext len 2 -> 24 bytes
        p[57] = 2;
        p[80] = proto::UDP; // DST
        p
    }

    #[test]
    fn checksum_rfc1071_example() {
        // The example header from RFC 1071 / Wikipedia: checksum b861.
        let h = hex::decode("450000730000400040110000c0a80001c0a800c7").unwrap();
        assert_eq!(checksum(&h), 0xb861);
    }

    /// The 8-bytes-at-a-time sum equals a plain 16-bit-word sum at every length and
    /// alignment of the remainder, also summed in even-length pieces.
    #[test]
    fn ones_sum_matches_word_by_word() {
        let data: std::vec::Vec<u8> = (0..300u32).map(|i| (i * 151 + 7) as u8 | (i as u8 & 0x80)).collect();
        for n in 0..data.len() {
            let d = &data[..n];
            let mut plain: u64 = d
                .chunks(2)
                .map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
                .sum();
            while plain > 0xffff {
                plain = (plain & 0xffff) + (plain >> 16);
            }
            assert_eq!(checksum(d), !(plain as u16), "length {n}");
            let cut = (n / 3) & !1;
            assert_eq!(
                fold(ones_sum(ones_sum(0, &d[..cut]), &d[cut..])),
                plain as u16,
                "length {n} cut {cut}"
            );
        }
    }

    #[test]
    fn ipv4_checks() {
        let mut h = hex::decode("450000730000400040110000c0a80001c0a800c7").unwrap();
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(Error::MalformedIp),
            "total length beyond buffer"
        );
        h[2..4].copy_from_slice(&20u16.to_be_bytes());
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.protocol(), proto::UDP);
        h[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&h[..]).is_err());
        assert!(Ipv4Packet::new_checked(&h[..10]).is_err());
    }

    #[test]
    fn v6_transport_split_follows_the_linux_rule() {
        let p = v6_chain();
        let s = transport_split(&p).unwrap();
        // After HBH, DST-before-routing and RH: before the final DST options.
        assert_eq!(
            s,
            Split {
                nh_offset: 56,
                offset: 80,
                next: proto::DSTOPTS
            }
        );
        // Without a routing header, a destination options header stays outside.
        let mut q = [0u8; 56];
        q[0] = 0x60;
        q[4..6].copy_from_slice(&16u16.to_be_bytes());
        q[6] = proto::DSTOPTS;
        q[40] = proto::UDP;
        assert_eq!(
            transport_split(&q).unwrap(),
            Split {
                nh_offset: 40,
                offset: 48,
                next: proto::UDP
            }
        );
    }

    #[test]
    fn fix_length_refuses_a_header_longer_than_the_packet() {
        let mut p = [0u8; 24];
        p[0] = 0x4f; // IHL 15: 60 bytes
        assert_eq!(fix_length(&mut p), Err(Error::MalformedIp));
        p[0] = 0x44;
        assert_eq!(fix_length(&mut p), Err(Error::MalformedIp));
    }

    #[test]
    fn find_and_walk() {
        let p = v6_chain();
        assert_eq!(find_header(&p, proto::UDP).unwrap().offset, 88);
        assert_eq!(find_header(&p, proto::ESP), Err(Error::WrongProtocol(proto::UDP)));
        let mut n = 0;
        let end = walk_ipv6_ext(&p, |_| n += 1).unwrap();
        assert_eq!((n, end.offset), (4, 88));
        // A chain that runs past the payload length is malformed, not a panic.
        let mut bad = p;
        bad[57] = 200;
        assert_eq!(find_header(&bad, proto::ESP), Err(Error::MalformedIp));
    }

    #[test]
    fn reprs_emit_and_parse() {
        let r = Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 2),
            protocol: proto::ESP,
            payload_len: 100,
            tos: 0x10,
            ident: 7,
            dont_frag: true,
            ttl: 64,
        };
        let mut b = [0u8; 120];
        r.emit(&mut b).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
        let r6 = Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: proto::ESP,
            payload_len: 60,
            traffic_class: 0xb8,
            flow_label: 0x12345,
            hop_limit: 64,
        };
        r6.emit(&mut b).unwrap();
        assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap(), r6);
    }
}
