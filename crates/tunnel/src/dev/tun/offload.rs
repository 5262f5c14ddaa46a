//! TUN offloads, sans-IO: the `virtio_net_hdr` a TUN device with IFF_VNET_HDR puts in front
//! of every packet, TCP segmentation of the super-packets the kernel hands over with TSO4/TSO6
//! and UDP segmentation of those it hands over with USO4/USO6 ([`Segmenter`]), and the reverse
//! on the way in: opened packets of one TCP flow, and (where the device takes USO, Linux >= 6.2)
//! equal-sized datagrams of one UDP flow, coalesced into one super-packet (GRO, [`Coalescer`])
//! that the kernel segments or takes as is.
//!
//! Everything here works on byte slices and fixed buffers: no I/O, no allocation per packet
//! (the [`Coalescer`] owns one 64 KB buffer). Every parse of the device's bytes returns an
//! [`OffloadError`]; loops are bounded by the packet's length.
//!
//! The header's integers are in the host's byte order as the kernel's TUN driver reads them
//! (little-endian virtio on the little-endian hosts tunneld runs on; we encode little-endian).

pub use ipsec_core::ip::checksum;
use ipsec_core::ip::{fold, ones_sum as sum};
use std::fmt;

/// The length of `struct virtio_net_hdr` (the TUN default, TUNSETVNETHDRSZ not used).
pub const VNET_HDR_LEN: usize = 10;
/// `flags`: the checksum from `csum_start` on is to be completed, stored at
/// `csum_start + csum_offset`; the field holds the pseudo-header sum.
pub const F_NEEDS_CSUM: u8 = 1;
/// `gso_type`: not a super-packet.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: a TCP over IPv4 super-packet.
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: a TCP over IPv6 super-packet.
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: a UDP super-packet (USO, IPv4 or IPv6 as the packet says; Linux >= 6.2).
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` bit: ECN (CWR is set on the first segment only).
pub const GSO_ECN: u8 = 0x80;
/// The most segments one super-packet may be cut into: one per payload byte of the largest
/// one. The kernel builds super-packets of thousands of segments when a peer advertises a
/// tiny MSS (MSS 48: about 1,360); segments are written one at a time into the batch, so the
/// count costs no memory and the loop is bounded by the packet's length.
pub const MAX_SEGMENTS: usize = MAX_SUPER;
/// The largest super-packet (IPv4's and IPv6's length field).
pub const MAX_SUPER: usize = 65535;
/// The most datagrams one UDP super-packet written to the device carries: the kernel's
/// `UDP_MAX_SEGMENTS` (64 before Linux 6.12, 128 since), which `virtio_net_hdr_to_skb`
/// enforces for GSO_UDP_L4.
pub const MAX_UDP_SEGMENTS: usize = 64;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_URG: u8 = 0x20;
const TCP_CWR: u8 = 0x80;

/// What is wrong with a packet read from the TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    /// Shorter than the virtio-net header, or than the headers it claims.
    Truncated,
    /// A GSO type other than TCPv4, TCPv6 and UDP_L4.
    UnsupportedGso(u8),
    /// A super-packet that is not TCP (or, for UDP_L4, UDP) over IPv4 (not a fragment) or
    /// IPv6 (extension headers other than Hop-by-Hop, Destination Options or a finished
    /// Routing header not allowed), or whose IP version does not match the GSO type.
    NotTcp,
    /// `gso_size` 0, or more than [`MAX_SEGMENTS`] segments.
    BadGsoSize,
    /// `csum_start`/`csum_offset` point outside the packet.
    BadChecksumOffsets,
    /// The output buffer is too small for a segment.
    NoRoom,
}

impl fmt::Display for OffloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffloadError::Truncated => f.write_str("truncated virtio-net header or packet"),
            OffloadError::UnsupportedGso(t) => write!(f, "unsupported GSO type {t:#x}"),
            OffloadError::NotTcp => {
                f.write_str("super-packet is not TCP or UDP over plain IPv4/IPv6 as its GSO type says")
            }
            OffloadError::BadGsoSize => f.write_str("bad GSO segment size"),
            OffloadError::BadChecksumOffsets => f.write_str("checksum offsets outside the packet"),
            OffloadError::NoRoom => f.write_str("segment does not fit the buffer"),
        }
    }
}

impl std::error::Error for OffloadError {}

/// `struct virtio_net_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// [`F_NEEDS_CSUM`] or 0.
    pub flags: u8,
    /// [`GSO_NONE`], [`GSO_TCPV4`], [`GSO_TCPV6`] (maybe with [`GSO_ECN`]).
    pub gso_type: u8,
    /// The length of the IP and TCP headers (a hint).
    pub hdr_len: u16,
    /// The payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts.
    pub csum_start: u16,
    /// Where in it the checksum goes.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header from the first [`VNET_HDR_LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<VnetHdr, OffloadError> {
        let b: &[u8; VNET_HDR_LEN] = b
            .get(..VNET_HDR_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(OffloadError::Truncated)?;
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }
}

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The pseudo-header sum (not complemented) for `ip` (an IPv4 or IPv6 header, version from
/// its first nibble), transport protocol `proto` and a transport length (RFC 793 3.1,
/// RFC 768, RFC 8200 8.1).
fn pseudo_sum(ip: &[u8], proto: u8, l4_len: usize) -> u64 {
    if ip[0] >> 4 == 4 {
        sum(0, &ip[12..20]) + u64::from(proto) + l4_len as u64
    } else {
        sum(0, &ip[8..40]) + u64::from(proto) + l4_len as u64
    }
}

/// A TCP/IP or UDP/IP packet's layout: IP header length, transport header length (`tcp`:
/// TCP's data offset, or 8 for UDP), total length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    v6: bool,
    udp: bool,
    ip: usize,
    tcp: usize,
    total: usize,
}

impl Layout {
    fn headers(&self) -> usize {
        self.ip + self.tcp
    }
}

/// The layout of `p` if it is TCP over IPv4 (no options restriction, not a fragment) or IPv6
/// (no extension header) with a complete TCP header; the total from the IP length field.
/// What GRO coalesces.
fn tcp_layout(p: &[u8]) -> Option<Layout> {
    l4_layout(p, PROTO_TCP, false)
}

/// The length of an IPv6 packet's fixed header and the extension headers a segment repeats
/// (as the kernel's `ipv6_gso_segment` does): Hop-by-Hop and Destination Options (RFC 8200
/// 4.3, 4.6), and a Routing header whose Segments Left is 0 (so the destination in the fixed
/// header is the final one, which the pseudo-header needs, RFC 8200 8.1). A Fragment header,
/// a Routing header still to be processed, or anything but `proto` after them: `None`. The
/// walk is bounded by the packet ([`ipsec_core::ip::walk_ipv6_ext`]).
fn ipv6_headers(p: &[u8], proto: u8) -> Option<usize> {
    let mut ok = true;
    let split = ipsec_core::ip::walk_ipv6_ext(p, |h| {
        ok &= match h.kind {
            ipsec_core::ip::proto::HOPOPTS | ipsec_core::ip::proto::DSTOPTS => true,
            ipsec_core::ip::proto::ROUTING => p.get(h.offset + 3) == Some(&0),
            _ => false,
        }
    })
    .ok()?;
    (ok && split.next == proto).then_some(split.offset)
}

/// The layout of `p` if it carries transport protocol `proto` (TCP, or UDP whose header is 8
/// bytes); with `ext`, IPv6 extension headers a segmenter repeats are allowed
/// ([`ipv6_headers`]).
fn l4_layout(p: &[u8], proto: u8, ext: bool) -> Option<Layout> {
    let (v6, ip, total) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl || p[9] != proto {
                return None;
            }
            if u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0 {
                return None; // MF or a fragment offset
            }
            (false, ihl, usize::from(u16::from_be_bytes([p[2], p[3]])))
        }
        6 => {
            if p.len() < 40 {
                return None;
            }
            let ip = if p[6] == proto {
                40
            } else if ext {
                ipv6_headers(p, proto)?
            } else {
                return None;
            };
            (true, ip, 40 + usize::from(u16::from_be_bytes([p[4], p[5]])))
        }
        _ => return None,
    };
    let udp = proto == PROTO_UDP;
    if total > p.len() || total < ip + if udp { 8 } else { 20 } {
        return None;
    }
    let tcp = if udp { 8 } else { usize::from(p[ip + 12] >> 4) * 4 };
    if (!udp && tcp < 20) || ip + tcp > total {
        return None;
    }
    Some(Layout {
        v6,
        udp,
        ip,
        tcp,
        total,
    })
}

/// Completes a partial checksum as [`F_NEEDS_CSUM`] asks: sums `p[csum_start..]` (the field
/// holds the pseudo-header sum) and stores the complement at `csum_start + csum_offset`.
pub fn complete_checksum(p: &mut [u8], hdr: &VnetHdr) -> Result<(), OffloadError> {
    if hdr.flags & F_NEEDS_CSUM == 0 {
        return Ok(());
    }
    let start = usize::from(hdr.csum_start);
    let at = start + usize::from(hdr.csum_offset);
    if start >= p.len() || at + 2 > p.len() {
        return Err(OffloadError::BadChecksumOffsets);
    }
    let c = checksum(&p[start..]);
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Cuts one TCP super-packet (read behind a virtio-net header with GSO_TCPV4/6) into
/// segments of `gso_size` payload bytes, each a complete packet with correct lengths, IPv4
/// ID and header checksum, TCP sequence number, flags (FIN and PSH on the last only, CWR on
/// the first only) and TCP checksum; or one UDP super-packet (GSO_UDP_L4) into datagrams of
/// `gso_size` payload bytes, each with its own UDP length and checksum (as the kernel's
/// `__udp_gso_segment` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmenter {
    layout: Layout,
    gso: usize,
    count: usize,
}

impl Segmenter {
    /// Checks `p` (the packet after the header) against `hdr`. A header without GSO is an
    /// error here ([`complete_checksum`] handles those).
    pub fn new(p: &[u8], hdr: &VnetHdr) -> Result<Segmenter, OffloadError> {
        let (v6, proto) = match hdr.gso_type & !GSO_ECN {
            GSO_TCPV4 => (Some(false), PROTO_TCP),
            GSO_TCPV6 => (Some(true), PROTO_TCP),
            GSO_UDP_L4 => (None, PROTO_UDP),
            t => return Err(OffloadError::UnsupportedGso(t)),
        };
        let layout = l4_layout(p, proto, true).ok_or(OffloadError::NotTcp)?;
        if v6.is_some_and(|v6| layout.v6 != v6) {
            return Err(OffloadError::NotTcp);
        }
        let gso = usize::from(hdr.gso_size);
        if gso == 0 {
            return Err(OffloadError::BadGsoSize);
        }
        let payload = layout.total - layout.headers();
        let count = payload.div_ceil(gso).max(1);
        if count > MAX_SEGMENTS {
            return Err(OffloadError::BadGsoSize);
        }
        Ok(Segmenter { layout, gso, count })
    }

    /// How many segments.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Writes segment `i` (< [`count`](Self::count)) of `p` into `out`; returns its length.
    pub fn write(&self, p: &[u8], i: usize, out: &mut [u8]) -> Result<usize, OffloadError> {
        let l = self.layout;
        let h = l.headers();
        let from = h + i * self.gso;
        let to = (from + self.gso).min(l.total);
        if i >= self.count || from > to {
            return Err(OffloadError::BadGsoSize);
        }
        let len = h + (to - from);
        if out.len() < len {
            return Err(OffloadError::NoRoom);
        }
        out[..h].copy_from_slice(&p[..h]);
        out[h..len].copy_from_slice(&p[from..to]);
        let (ip, tcp) = out[..len].split_at_mut(l.ip);
        if l.v6 {
            // The payload length covers the extension headers, which each segment repeats.
            ip[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        } else {
            ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(i as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        if l.udp {
            let udp = tcp;
            let udp_len = udp.len() as u16;
            udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            udp[6..8].copy_from_slice(&[0, 0]);
            // RFC 768: a computed zero is sent as all ones.
            let c = match !fold(sum(pseudo_sum(ip, PROTO_UDP, udp.len()), udp)) {
                0 => 0xffff,
                c => c,
            };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            return Ok(len);
        }
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]).wrapping_add((i * self.gso) as u32);
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < self.count {
            tcp[13] &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            tcp[13] &= !TCP_CWR;
        }
        tcp[16..18].copy_from_slice(&[0, 0]);
        let c = !fold(sum(pseudo_sum(ip, PROTO_TCP, tcp.len()), tcp));
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}

/// Builds a TCP super-packet from consecutive packets of one flow (GRO): same addresses and
/// ports, IP TOS/TTL (IPv6: first word and hop limit) and DF, TCP ACK, window, header length
/// and options; each next packet's sequence number right after the previous one's payload;
/// flags equal except CWR (first only) and PSH (last only: nothing is appended after it);
/// every segment but the last exactly as long as the first, the last no longer; never SYN,
/// FIN, RST, URG, nor an empty payload; at most [`MAX_SUPER`] bytes.
///
/// Made [`with_uso`](Self::with_uso), it also builds UDP super-packets (GSO_UDP_L4, which
/// the kernel cuts as its `__udp_gso_segment` does, so [`Segmenter`] gives the datagrams
/// back byte for byte): datagrams of one flow (same addresses, ports, IP TOS/TTL and DF;
/// IPv6: first word and hop limit; no IPv4 options or IPv6 extension headers) whose IPv4 IDs
/// follow each other (the kernel numbers the segments that way), each with a non-zero UDP
/// checksum, UDP length and IPv4 header checksum that are right (the kernel recomputes each
/// segment's, so a wrong one must not be made right by coalescing: such a datagram goes
/// alone, for the receiver to drop as it would), a non-empty payload, every payload but the last exactly as long as the first, at
/// most [`MAX_UDP_SEGMENTS`] datagrams and [`MAX_SUPER`] bytes.
///
/// [`finish`](Self::finish) gives the packet to write and its header: one packet alone comes
/// back unchanged with an empty header; several come with GSO_TCPV4/6 (or GSO_UDP_L4),
/// [`F_NEEDS_CSUM`] and the pseudo-header sum in the checksum field (the TCP packets' own
/// checksums are not checked again: ESP authenticated every byte).
///
/// Only the first packet's headers are copied (to be rewritten for the super-packet); the
/// payloads stay where they are, named by the number the caller gave each packet
/// ([`Super::parts`]), and go to the device with one gathered write (`writev(2)`), not
/// copied into a super-packet first.
pub struct Coalescer {
    /// The first packet's headers, rewritten by [`finish`](Self::finish).
    buf: Box<[u8]>,
    /// The super-packet's length so far (headers and every payload).
    len: usize,
    /// Each packet's payload: the caller's number for the packet, and where in it.
    parts: [(usize, usize, usize); MAX_PARTS],
    nparts: usize,
    layout: Option<Layout>,
    gso: usize,
    last_payload: usize,
    count: usize,
    /// TCP: the next sequence number; UDP over IPv4: the next IP ID.
    next_seq: u32,
    /// Whether UDP datagrams are coalesced too (the device takes GSO_UDP_L4).
    uso: bool,
}

impl Default for Coalescer {
    fn default() -> Self {
        Self::new()
    }
}

impl Coalescer {
    /// An empty coalescer with room for one packet's headers.
    pub fn new() -> Self {
        Coalescer {
            buf: vec![0; MAX_HEADERS].into_boxed_slice(),
            len: 0,
            parts: [(0, 0, 0); MAX_PARTS],
            nparts: 0,
            layout: None,
            gso: 0,
            last_payload: 0,
            count: 0,
            next_seq: 0,
            uso: false,
        }
    }

    /// An empty coalescer that also builds UDP super-packets (GSO_UDP_L4): for a device
    /// that accepted USO4/USO6.
    pub fn with_uso() -> Self {
        Coalescer {
            uso: true,
            ..Self::new()
        }
    }

    /// Whether UDP datagrams are coalesced too.
    pub fn uso(&self) -> bool {
        self.uso
    }

    /// Stops coalescing UDP datagrams (the device refused a UDP super-packet).
    pub fn disable_uso(&mut self) {
        self.uso = false;
    }

    /// Whether the pending super-packet is UDP.
    pub fn pending_udp(&self) -> bool {
        self.layout.is_some_and(|l| l.udp)
    }

    /// Whether a super-packet is being built.
    pub fn pending(&self) -> bool {
        self.layout.is_some()
    }

    /// Starts a super-packet with `p` (the caller's packet number `at`) when `p` could be
    /// coalesced with what follows; `false` (and nothing pending) otherwise: write `p` as it
    /// is. Call after [`finish`](Self::finish).
    pub fn start(&mut self, p: &[u8], at: usize) -> bool {
        self.layout = None;
        if self.uso {
            if let Some(l) = udp_layout(p) {
                return self.start_udp(p, l, at);
            }
        }
        let Some(l) = tcp_layout(p) else { return false };
        let flags = p[l.ip + 13];
        let payload = l.total - l.headers();
        if flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_URG) != 0 || payload == 0 || l.headers() > MAX_HEADERS {
            return false;
        }
        self.keep_first(p, l, at);
        self.layout = Some(l);
        self.gso = payload;
        self.last_payload = payload;
        self.count = 1;
        self.next_seq = seq(&p[l.ip..]).wrapping_add(payload as u32);
        true
    }

    /// The first packet's headers copied, its payload named.
    fn keep_first(&mut self, p: &[u8], l: Layout, at: usize) {
        let h = l.headers();
        self.buf[..h].copy_from_slice(&p[..h]);
        self.len = l.total;
        self.parts[0] = (at, h, l.total);
        self.nparts = 1;
    }

    /// Names the payload `p[from..to]` of packet `at` as the next part.
    fn keep(&mut self, at: usize, from: usize, to: usize) {
        self.parts[self.nparts] = (at, from, to);
        self.nparts += 1;
        self.len += to - from;
    }

    /// Appends `p` (the caller's packet number `at`) to the pending super-packet if it
    /// continues it; `false` otherwise (then [`finish`](Self::finish) and
    /// [`start`](Self::start) anew).
    pub fn append(&mut self, p: &[u8], at: usize) -> bool {
        let Some(a) = self.layout else { return false };
        if self.nparts >= MAX_PARTS {
            return false;
        }
        if a.udp {
            return self.append_udp(p, a, at);
        }
        let Some(b) = tcp_layout(p) else { return false };
        let first = &self.buf[..a.headers()];
        if (Layout { total: a.total, ..b }) != a {
            return false;
        }
        let payload = b.total - b.headers();
        if payload == 0 || payload > self.gso || self.last_payload != self.gso || self.len + payload > MAX_SUPER {
            return false;
        }
        let same_ip = if a.v6 {
            first[..4] == p[..4] && first[7..40] == p[7..40]
        } else {
            first[1] == p[1]
                && first[6] & 0x40 == p[6] & 0x40
                && first[8..10] == p[8..10]
                && first[12..a.ip] == p[12..a.ip]
        };
        let (ft, pt) = (&first[a.ip..], &p[a.ip..b.headers()]);
        // ports; ack; data offset; window; options (the checksum and urgent pointer aside)
        let same_tcp =
            ft[..4] == pt[..4] && ft[8..13] == pt[8..13] && ft[14..16] == pt[14..16] && ft[20..a.tcp] == pt[20..];
        let (ff, pf) = (ft[13], pt[13]);
        let flags_ok = ff & TCP_PSH == 0 && (pf & !TCP_PSH) == (ff & !TCP_CWR) && pf & TCP_CWR == 0;
        if !(same_ip && same_tcp && flags_ok) || seq(pt) != self.next_seq {
            return false;
        }
        self.keep(at, b.headers(), b.total);
        self.buf[a.ip + 13] |= pf & TCP_PSH;
        self.next_seq = self.next_seq.wrapping_add(payload as u32);
        self.last_payload = payload;
        self.count += 1;
        true
    }

    fn start_udp(&mut self, p: &[u8], l: Layout, at: usize) -> bool {
        let payload = l.total - l.headers();
        if payload == 0 || !udp_checksum_ok(&p[..l.total], l) {
            return false;
        }
        self.keep_first(p, l, at);
        self.layout = Some(l);
        self.gso = payload;
        self.last_payload = payload;
        self.count = 1;
        self.next_seq = u32::from(ipv4_id(p, l).wrapping_add(1));
        true
    }

    fn append_udp(&mut self, p: &[u8], a: Layout, at: usize) -> bool {
        let Some(b) = udp_layout(p) else { return false };
        if (Layout { total: a.total, ..b }) != a {
            return false;
        }
        let payload = b.total - b.headers();
        if payload == 0
            || payload > self.gso
            || self.last_payload != self.gso
            || self.count >= MAX_UDP_SEGMENTS
            || self.len + payload > MAX_SUPER
        {
            return false;
        }
        let first = &self.buf[..a.headers()];
        let same_ip = if a.v6 {
            first[..4] == p[..4] && first[6..40] == p[6..40]
        } else {
            first[1] == p[1]
                && first[6..10] == p[6..10]
                && first[12..20] == p[12..20]
                && u32::from(ipv4_id(p, b)) == self.next_seq
        };
        let same_ports = first[a.ip..a.ip + 4] == p[b.ip..b.ip + 4];
        if !(same_ip && same_ports && udp_checksum_ok(&p[..b.total], b)) {
            return false;
        }
        self.keep(at, b.headers(), b.total);
        self.next_seq = u32::from((self.next_seq as u16).wrapping_add(1));
        self.last_payload = payload;
        self.count += 1;
        true
    }

    /// How many packets the pending (or last finished) super-packet holds.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Ends the pending super-packet: the header to write it with and its parts (`None` when
    /// nothing is pending).
    pub fn finish(&mut self) -> Option<(VnetHdr, Super<'_>)> {
        let l = self.layout.take()?;
        let len = self.len;
        let h = l.headers();
        let parts = &self.parts[..self.nparts];
        if self.count == 1 {
            let s = Super {
                head: &self.buf[..h],
                parts,
                len,
            };
            return Some((VnetHdr::default(), s));
        }
        let (ip, l4) = self.buf[..h].split_at_mut(l.ip);
        if l.v6 {
            ip[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        } else {
            ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let l4_len = len - l.ip;
        let hdr = if l.udp {
            // The UDP length and the pseudo-header sum over the whole super-datagram: the
            // kernel adjusts both per segment (`__udp_gso_segment`).
            l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            let partial = fold(pseudo_sum(ip, PROTO_UDP, l4_len));
            l4[6..8].copy_from_slice(&partial.to_be_bytes());
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_UDP_L4,
                hdr_len: h as u16,
                gso_size: self.gso as u16,
                csum_start: l.ip as u16,
                csum_offset: 6,
            }
        } else {
            let partial = fold(pseudo_sum(ip, PROTO_TCP, l4_len));
            l4[16..18].copy_from_slice(&partial.to_be_bytes());
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: if l.v6 { GSO_TCPV6 } else { GSO_TCPV4 },
                hdr_len: h as u16,
                gso_size: self.gso as u16,
                csum_start: l.ip as u16,
                csum_offset: 16,
            }
        };
        let s = Super {
            head: &self.buf[..h],
            parts,
            len,
        };
        Some((hdr, s))
    }
}

/// The most packets one super-packet gathers ([`MAX_UDP_SEGMENTS`], for TCP too: a batch
/// the loops write holds fewer, so only a caller with longer runs of tiny segments sees a
/// super-packet end there).
pub const MAX_PARTS: usize = MAX_UDP_SEGMENTS;

/// The longest headers a coalesced packet may have (IPv6 40 + TCP with options 60).
const MAX_HEADERS: usize = 100;

/// A super-packet [`Coalescer::finish`] ended: its headers (rewritten) and, in order, each
/// packet's payload, by the caller's number for the packet and where in it.
#[derive(Debug, Clone, Copy)]
pub struct Super<'a> {
    /// The headers to write first.
    pub head: &'a [u8],
    /// `(packet, from, to)`: `packets[packet][from..to]` is the next payload.
    pub parts: &'a [(usize, usize, usize)],
    /// The whole super-packet's length.
    pub len: usize,
}

impl<'a> Super<'a> {
    /// The slices to write, in order, into `out` (its first `1 + parts.len()`): the headers,
    /// then each payload of `packets`; returns how many. `None` when a part names a packet
    /// or bytes `packets` does not have.
    pub fn gather<'p>(&self, packets: &[&'p [u8]], out: &mut [&'p [u8]]) -> Option<usize>
    where
        'a: 'p,
    {
        let n = 1 + self.parts.len();
        if out.len() < n {
            return None;
        }
        out[0] = self.head;
        for (o, &(i, from, to)) in out[1..n].iter_mut().zip(self.parts) {
            *o = packets.get(i)?.get(from..to)?;
        }
        Some(n)
    }

    /// The whole super-packet as one buffer (for tests and a device without gathered
    /// writes).
    pub fn to_vec(&self, packets: &[&[u8]]) -> Vec<u8> {
        let mut v = self.head.to_vec();
        for &(i, from, to) in self.parts {
            v.extend_from_slice(&packets[i][from..to]);
        }
        v
    }
}

fn seq(tcp: &[u8]) -> u32 {
    u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])
}

/// The layout of `p` if it is a UDP datagram the [`Coalescer`] may take: IPv4 without
/// options (not a fragment) or IPv6 without extension headers.
fn udp_layout(p: &[u8]) -> Option<Layout> {
    l4_layout(p, PROTO_UDP, false).filter(|l| l.ip == if l.v6 { 40 } else { 20 })
}

/// An IPv4 packet's identification (0 for IPv6, which has none in its fixed header).
fn ipv4_id(p: &[u8], l: Layout) -> u16 {
    if l.v6 {
        0
    } else {
        u16::from_be_bytes([p[4], p[5]])
    }
}

/// Whether the UDP datagram `p` (exactly its IP total length) carries a checksum and it is
/// right (RFC 768; RFC 8200 8.1), its UDP length is its IP length's, and (IPv4) its header
/// checksum is right (RFC 791): segmentation rewrites all three, which must not make a bad
/// datagram good. A zero UDP checksum (none, IPv4 only) does not count: the kernel's UDP GRO
/// does not coalesce those either, as segmentation would add one.
fn udp_checksum_ok(p: &[u8], l: Layout) -> bool {
    let udp = &p[l.ip..];
    if udp[6..8] == [0, 0] || usize::from(u16::from_be_bytes([udp[4], udp[5]])) != udp.len() {
        return false;
    }
    if !l.v6 && checksum(&p[..l.ip]) != 0 {
        return false;
    }
    fold(sum(pseudo_sum(p, PROTO_UDP, udp.len()), udp)) == 0xffff
}

/// A key that sorts packets of one TCP or UDP flow next to each other (stable sort keeps
/// their order), so [`Coalescer`] sees them consecutively: the protocol, addresses and ports
/// hashed, 0 for anything else.
pub fn flow_key(p: &[u8]) -> u64 {
    let (l, proto) = match tcp_layout(p) {
        Some(l) => (l, PROTO_TCP),
        None => match udp_layout(p) {
            Some(l) => (l, PROTO_UDP),
            None => return 0,
        },
    };
    let addrs = if l.v6 { &p[8..40] } else { &p[12..20] };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(proto);
    for &b in addrs.iter().chain(&p[l.ip..l.ip + 4]) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h | 1
}

#[cfg(test)]
mod tests;
