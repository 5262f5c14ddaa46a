//! Tunnel-mode outer headers (RFC 4301 section 5.1.2): built from the SA's endpoints and a
//! few fields of the inner header, shared by ESP and AH.

use crate::buf::PacketBuf;
use crate::error::Error;
use crate::ip::{self, Ipv4Packet, Ipv4Repr, Ipv6Repr};
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
}

/// RFC 4301 5.1.2.1 and RFC 6040 section 4.1 (normal mode): DSCP is copied, ECN is copied
/// except that CE becomes ECT(0) on the outer header.
pub fn outer_tos(inner_tos: u8) -> u8 {
    if inner_tos & 0x03 == 0x03 {
        (inner_tos & !0x03) | 0x02
    } else {
        inner_tos
    }
}

/// Length of the outer header for the tunnel's address family.
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

/// Checks that a decapsulated inner packet is the IP version its Next Header announced and
/// returns the length its header claims (anything after it is TFC padding, RFC 4303 2.7).
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
