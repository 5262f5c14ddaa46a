//! Tunnel-mode outer headers (RFC 4301 section 5.1.2): built from the SA's endpoints and a
//! few fields of the inner header, shared by ESP and AH.

use crate::buf::PacketBuf;
use crate::error::Error;
use crate::ip::{self, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use crate::sa::Tunnel;
use core::net::IpAddr;

/// Hop limit / TTL of the outer header.
pub const OUTER_TTL: u8 = 64;

/// What the outer header copies from the inner one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerInfo {
    /// The inner TOS or traffic class byte.
    pub tos: u8,
    /// The inner IPv4 Don't Fragment bit (false for IPv6).
    pub dont_frag: bool,
    /// The protocol number of the inner packet: 4 (IPv4) or 41 (IPv6).
    pub next_header: u8,
}

impl InnerInfo {
    /// Reads the fields of an inner IP packet.
    pub fn of(packet: &[u8]) -> Result<Self, Error> {
        match ip::version(packet)? {
            4 => {
                let p = Ipv4Packet::new_checked(packet)?;
                Ok(InnerInfo {
                    tos: p.tos(),
                    dont_frag: p.dont_frag(),
                    next_header: ip::proto::IPIP,
                })
            }
            _ => Ok(InnerInfo {
                tos: ip::tos(packet)?,
                dont_frag: false,
                next_header: ip::proto::IPV6,
            }),
        }
    }

    /// [`InnerInfo::of`] and the length the header claims (IPv4 total length, IPv6 40 +
    /// payload length), from one parse of the header: what a sender needs to trim link-layer
    /// padding and build the outer header.
    #[inline]
    pub fn with_len(packet: &[u8]) -> Result<(Self, usize), Error> {
        match ip::version(packet)? {
            4 => {
                let p = Ipv4Packet::new_checked(packet)?;
                let info = InnerInfo {
                    tos: p.tos(),
                    dont_frag: p.dont_frag(),
                    next_header: ip::proto::IPIP,
                };
                Ok((info, p.total_len()))
            }
            _ => {
                let p = Ipv6Packet::new_checked(packet)?;
                let info = InnerInfo {
                    tos: p.traffic_class(),
                    dont_frag: false,
                    next_header: ip::proto::IPV6,
                };
                Ok((info, p.total_len()))
            }
        }
    }
}

/// RFC 4301 5.1.2.1 and RFC 6040 section 4.1 (normal mode): DSCP is copied, ECN is copied
/// except that CE becomes ECT(0) on the outer header.
#[inline]
pub fn outer_tos(inner_tos: u8) -> u8 {
    if inner_tos & 0x03 == 0x03 {
        (inner_tos & !0x03) | 0x02
    } else {
        inner_tos
    }
}

/// Length of the outer header for the tunnel's address family.
#[inline]
pub fn outer_len(t: &Tunnel) -> usize {
    match t.src {
        IpAddr::V4(_) => ip::ipv4_field::HEADER_LEN,
        IpAddr::V6(_) => ip::ipv6_field::HEADER_LEN,
    }
}

/// Prepends the outer header (protocol `proto`) to the packet in `buf`. The IPv4
/// identification is `ident`; DF is copied from an IPv4 inner header; TTL/hop limit 64.
pub fn push_outer(buf: &mut PacketBuf, t: &Tunnel, proto: u8, inner: InnerInfo, ident: u16) -> Result<(), Error> {
    let payload_len = buf.len();
    match (t.src, t.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let r = Ipv4Repr {
                src,
                dst,
                protocol: proto,
                payload_len,
                tos: outer_tos(inner.tos),
                ident,
                dont_frag: inner.dont_frag,
                ttl: OUTER_TTL,
            };
            if payload_len + r.buffer_len() > ip::MAX_PACKET {
                return Err(Error::TooBig);
            }
            buf.push_front(r.buffer_len())?;
            r.emit(buf.packet_mut())
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let r = Ipv6Repr {
                src,
                dst,
                next_header: proto,
                payload_len,
                traffic_class: outer_tos(inner.tos),
                flow_label: 0,
                hop_limit: OUTER_TTL,
            };
            if payload_len > ip::MAX_PACKET {
                return Err(Error::TooBig);
            }
            buf.push_front(r.buffer_len())?;
            r.emit(buf.packet_mut())
        }
        _ => Err(Error::InvalidSa("src and dst must be of the same IP version")),
    }
}

/// A tunnel's outer header laid out once per SA: the fields every packet shares (version,
/// TTL or hop limit, protocol, addresses) are written at SA setup and, for IPv4, summed for
/// the header checksum then; per packet only the length, TOS / traffic class, DF and
/// identification are filled in and the sum finished (the one's-complement sum is a sum of
/// words, so the fixed words' part can be added up in advance, RFC 1071 section 2(C)). The
/// bytes are those [`push_outer`] writes.
#[derive(Debug, Clone)]
pub struct OuterHeader {
    /// The header with the per-packet fields (and the IPv4 checksum) zero.
    bytes: [u8; ip::ipv6_field::HEADER_LEN],
    v6: bool,
    /// IPv4: the one's-complement sum of the fixed words, not folded.
    fixed_sum: u64,
}

impl OuterHeader {
    /// The outer header of protocol `proto` for the tunnel `t`; `None` if the endpoints are
    /// of different IP versions (which [`push_outer`] refuses, per packet).
    pub fn new(t: &Tunnel, proto: u8) -> Option<Self> {
        let mut bytes = [0u8; ip::ipv6_field::HEADER_LEN];
        match (t.src, t.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let r = Ipv4Repr {
                    src,
                    dst,
                    protocol: proto,
                    payload_len: 0,
                    tos: 0,
                    ident: 0,
                    dont_frag: false,
                    ttl: OUTER_TTL,
                };
                r.emit(&mut bytes).ok()?;
                // Zero the fields filled per packet: length and checksum.
                bytes[ip::ipv4_field::LENGTH].fill(0);
                bytes[ip::ipv4_field::CHECKSUM].fill(0);
                let fixed_sum = ip::ones_sum(0, &bytes[..ip::ipv4_field::HEADER_LEN]);
                Some(OuterHeader {
                    bytes,
                    v6: false,
                    fixed_sum,
                })
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let r = Ipv6Repr {
                    src,
                    dst,
                    next_header: proto,
                    payload_len: 0,
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: OUTER_TTL,
                };
                r.emit(&mut bytes).ok()?;
                Some(OuterHeader {
                    bytes,
                    v6: true,
                    fixed_sum: 0,
                })
            }
            _ => None,
        }
    }

    /// The header's length.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        if self.v6 {
            ip::ipv6_field::HEADER_LEN
        } else {
            ip::ipv4_field::HEADER_LEN
        }
    }

    /// Prepends the header to the packet in `buf`, as [`push_outer`] does (same bytes, same
    /// errors): TOS from `inner` ([`outer_tos`]), DF copied from an IPv4 inner header,
    /// IPv4 identification `ident`.
    #[inline]
    pub fn push(&self, buf: &mut PacketBuf, inner: InnerInfo, ident: u16) -> Result<(), Error> {
        let payload_len = buf.len();
        let tos = outer_tos(inner.tos);
        if self.v6 {
            if payload_len > ip::MAX_PACKET {
                return Err(Error::TooBig);
            }
            buf.push_front(ip::ipv6_field::HEADER_LEN)?;
            let b = &mut buf.packet_mut()[..ip::ipv6_field::HEADER_LEN];
            b.copy_from_slice(&self.bytes);
            b[0] = 0x60 | (tos >> 4);
            b[1] = tos << 4;
            b[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
        } else {
            let total = payload_len + ip::ipv4_field::HEADER_LEN;
            if total > ip::MAX_PACKET {
                return Err(Error::TooBig);
            }
            let flags: u16 = if inner.dont_frag { 0x4000 } else { 0 };
            // The per-packet words: TOS (low byte of word 0), total length, ident, flags.
            let sum = self.fixed_sum + u64::from(tos) + total as u64 + u64::from(ident) + u64::from(flags);
            let check = !ip::fold(sum);
            buf.push_front(ip::ipv4_field::HEADER_LEN)?;
            let b = &mut buf.packet_mut()[..ip::ipv4_field::HEADER_LEN];
            b.copy_from_slice(&self.bytes[..ip::ipv4_field::HEADER_LEN]);
            b[ip::ipv4_field::TOS] = tos;
            b[ip::ipv4_field::LENGTH].copy_from_slice(&(total as u16).to_be_bytes());
            b[ip::ipv4_field::IDENT].copy_from_slice(&ident.to_be_bytes());
            b[ip::ipv4_field::FLG_OFF].copy_from_slice(&flags.to_be_bytes());
            b[ip::ipv4_field::CHECKSUM].copy_from_slice(&check.to_be_bytes());
        }
        Ok(())
    }
}

/// Checks that a decapsulated inner packet is the IP version its Next Header announced and
/// returns the length its header claims (anything after it is TFC padding, RFC 4303 2.7).
#[inline]
pub fn check_inner(next_header: u8, inner: &[u8]) -> Result<usize, Error> {
    let want = match next_header {
        ip::proto::IPIP => 4,
        ip::proto::IPV6 => 6,
        other => return Err(Error::BadInnerProtocol(other)),
    };
    if ip::version(inner)? != want {
        return Err(Error::MalformedIp);
    }
    ip::claimed_len(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_ce_is_not_copied() {
        assert_eq!(outer_tos(0xb8), 0xb8);
        assert_eq!(outer_tos(0xb9), 0xb9);
        assert_eq!(outer_tos(0xbb), 0xba);
    }

    /// The per-SA template writes the bytes `push_outer` writes, for both families, any TOS
    /// (ECN CE included), DF on and off, and lengths up to the limit; and refuses the same.
    #[test]
    fn outer_header_template_matches_push_outer() {
        let tunnels = [
            ("192.0.2.1", "198.51.100.254"),
            ("255.255.255.255", "255.255.255.254"),
            ("2001:db8::1", "2001:db8:ffff::2"),
        ];
        for (src, dst) in tunnels {
            let t = Tunnel {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
            };
            let o = OuterHeader::new(&t, ip::proto::ESP).unwrap();
            assert_eq!(o.len(), outer_len(&t));
            for tos in [0u8, 1, 0x03, 0xb8, 0xbb, 0xff] {
                for dont_frag in [false, true] {
                    for (len, ident) in [(0usize, 0u16), (1, 0xffff), (1400, 0x1234), (65515, 7), (65516, 7)] {
                        let info = InnerInfo {
                            tos,
                            dont_frag,
                            next_header: 4,
                        };
                        let mut a = alloc::vec![0u8; 40 + len];
                        let mut b = a.clone();
                        let mut ba = PacketBuf::new(&mut a, 40, len).unwrap();
                        let mut bb = PacketBuf::new(&mut b, 40, len).unwrap();
                        let ra = push_outer(&mut ba, &t, ip::proto::ESP, info, ident);
                        let rb = o.push(&mut bb, info, ident);
                        assert_eq!(ra, rb, "{src} {tos} {dont_frag} {len}");
                        assert_eq!(ba.packet(), bb.packet(), "{src} {tos} {dont_frag} {len}");
                        if ra.is_ok() && !t.src.is_ipv6() {
                            assert!(Ipv4Packet::new_checked(bb.packet()).unwrap().verify_checksum());
                        }
                    }
                }
            }
        }
        let mixed = Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "2001:db8::1".parse().unwrap(),
        };
        assert!(OuterHeader::new(&mixed, ip::proto::ESP).is_none());
    }

    #[test]
    fn inner_info_with_len_is_of_and_claimed_len() {
        let mut v4 = [0u8; 60];
        Ipv4Repr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            protocol: 17,
            payload_len: 30,
            tos: 0x2b,
            ident: 9,
            dont_frag: true,
            ttl: 3,
        }
        .emit(&mut v4)
        .unwrap();
        let mut v6 = [0u8; 64];
        Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: 17,
            payload_len: 8,
            traffic_class: 0xe1,
            flow_label: 5,
            hop_limit: 1,
        }
        .emit(&mut v6)
        .unwrap();
        for p in [&v4[..], &v6[..], &v4[..30], &v6[..44], &[0x50u8; 40][..], &[][..]] {
            let want = InnerInfo::of(p).and_then(|i| ip::claimed_len(p).map(|l| (i, l)));
            assert_eq!(InnerInfo::with_len(p), want);
        }
        assert_eq!(InnerInfo::with_len(&v4).unwrap().1, 50);
        assert_eq!(InnerInfo::with_len(&v6).unwrap().1, 48);
    }

    #[test]
    fn outer_v4_header() {
        let t = Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        };
        let mut raw = [0u8; 64];
        let mut b = PacketBuf::new(&mut raw, 40, 10).unwrap();
        let info = InnerInfo {
            tos: 0x13,
            dont_frag: true,
            next_header: 4,
        };
        push_outer(&mut b, &t, ip::proto::ESP, info, 0x1234).unwrap();
        let p = Ipv4Packet::new_checked(b.packet()).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(
            (p.total_len(), p.tos(), p.ident(), p.dont_frag(), p.ttl()),
            (30, 0x12, 0x1234, true, 64)
        );
        assert_eq!(check_inner(41, &raw[..]), Err(Error::MalformedIp));
        assert_eq!(check_inner(6, &raw[..]), Err(Error::BadInnerProtocol(6)));
    }
}
