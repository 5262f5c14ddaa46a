//! The Configuration payload (RFC 7296 section 3.15) and its attributes (3.15.1; RFC 8598
//! 4 for INTERNAL_DNS_DOMAIN): how a remote-access client asks for a virtual address, DNS
//! servers and the networks behind the gateway (CFG_REQUEST) and how the gateway answers
//! (CFG_REPLY). CFG_SET and CFG_ACK are parsed and emitted but not acted on.
//!
//! Unknown attribute types (Microsoft's private ones from 16384 up, APPLICATION_VERSION,
//! INTERNAL_DNSSEC_TA ...) are kept as [`Attribute::Unknown`] and ignored, never an error
//! (3.15.1: "an attribute that is not understood ... MUST be ignored"). A known attribute
//! whose length its definition does not allow is a typed error ([`CpError`]), as is an
//! attribute running past the payload.
use crate::error::Error;
use crate::message::Payload;
use crate::payload::kind;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Field offsets of the Configuration payload body (3.15), after the generic header.
pub mod field {
    use core::ops::Range;
    /// CFG Type.
    pub const CFG_TYPE: usize = 0;
    /// Reserved.
    pub const RESERVED: Range<usize> = 1..4;
    /// The first attribute.
    pub const ATTRIBUTES: usize = 4;
    /// In an attribute: Reserved bit and Attribute Type.
    pub const ATTR_TYPE: Range<usize> = 0..2;
    /// In an attribute: Length of the value.
    pub const ATTR_LENGTH: Range<usize> = 2..4;
    /// In an attribute: the value.
    pub const ATTR_VALUE: usize = 4;
}

/// Length of the fixed part of the body (CFG Type and Reserved).
pub const HEADER_LEN: usize = 4;
/// Length of an attribute's header (type and length).
pub const ATTR_HEADER_LEN: usize = 4;
/// Attributes taken from one payload; the rest is refused ([`CpError::TooManyAttributes`]).
/// A CFG_REQUEST of strongSwan has under 10, Windows' under 15.
pub const MAX_ATTRIBUTES: usize = 64;

/// CFG Types (3.15).
pub mod cfg_type {
    /// CFG_REQUEST.
    pub const REQUEST: u8 = 1;
    /// CFG_REPLY.
    pub const REPLY: u8 = 2;
    /// CFG_SET.
    pub const SET: u8 = 3;
    /// CFG_ACK.
    pub const ACK: u8 = 4;
}

/// Configuration attribute types (3.15.1, IANA "IKEv2 Configuration Payload Attribute Types").
pub mod attr {
    /// INTERNAL_IP4_ADDRESS: 0 or 4 octets.
    pub const INTERNAL_IP4_ADDRESS: u16 = 1;
    /// INTERNAL_IP4_NETMASK: 0 or 4 octets.
    pub const INTERNAL_IP4_NETMASK: u16 = 2;
    /// INTERNAL_IP4_DNS: 0 or 4 octets.
    pub const INTERNAL_IP4_DNS: u16 = 3;
    /// INTERNAL_IP4_NBNS: 0 or 4 octets (kept as unknown).
    pub const INTERNAL_IP4_NBNS: u16 = 4;
    /// INTERNAL_IP6_ADDRESS: 0 or 17 octets (address and prefix length).
    pub const INTERNAL_IP6_ADDRESS: u16 = 8;
    /// INTERNAL_IP6_DNS: 0 or 16 octets.
    pub const INTERNAL_IP6_DNS: u16 = 10;
    /// INTERNAL_IP4_SUBNET: 0 or 8 octets (address and netmask).
    pub const INTERNAL_IP4_SUBNET: u16 = 13;
    /// SUPPORTED_ATTRIBUTES (kept as unknown).
    pub const SUPPORTED_ATTRIBUTES: u16 = 14;
    /// INTERNAL_IP6_SUBNET: 0 or 17 octets (address and prefix length).
    pub const INTERNAL_IP6_SUBNET: u16 = 15;
    /// INTERNAL_DNS_DOMAIN (RFC 8598 4): 0 octets in a request, a domain name in a reply.
    pub const INTERNAL_DNS_DOMAIN: u16 = 25;
    /// INTERNAL_DNSSEC_TA (RFC 8598 4): kept as unknown.
    pub const INTERNAL_DNSSEC_TA: u16 = 26;
}

/// What is wrong with a Configuration payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpError {
    /// Shorter than CFG Type and Reserved, or an attribute runs past the payload.
    Truncated,
    /// A known attribute with a length its definition does not allow (type, length).
    BadAttributeLength(u16, u16),
    /// More than [`MAX_ATTRIBUTES`] attributes.
    TooManyAttributes,
    /// An INTERNAL_DNS_DOMAIN that is not a domain name (RFC 8598 4: not empty in a reply,
    /// at most 255 octets, letters, digits, '-', '.' and '_').
    BadDomain,
}

impl fmt::Display for CpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpError::Truncated => f.write_str("configuration payload truncated"),
            CpError::BadAttributeLength(t, l) => write!(f, "configuration attribute {t} with length {l}"),
            CpError::TooManyAttributes => f.write_str("too many configuration attributes"),
            CpError::BadDomain => f.write_str("INTERNAL_DNS_DOMAIN is not a domain name"),
        }
    }
}

impl From<CpError> for Error {
    fn from(e: CpError) -> Error {
        match e {
            CpError::Truncated => Error::Truncated,
            CpError::BadAttributeLength(..) => Error::BadLength,
            CpError::TooManyAttributes => Error::BadSyntax("too many configuration attributes"),
            CpError::BadDomain => Error::BadSyntax("INTERNAL_DNS_DOMAIN is not a domain name"),
        }
    }
}

/// One configuration attribute. `None` values are the empty attributes of a request
/// ("give me one"); a request may also name the address it would like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// INTERNAL_IP4_ADDRESS.
    Ip4Address(Option<Ipv4Addr>),
    /// INTERNAL_IP4_NETMASK.
    Ip4Netmask(Option<Ipv4Addr>),
    /// INTERNAL_IP4_DNS.
    Ip4Dns(Option<Ipv4Addr>),
    /// INTERNAL_IP4_SUBNET: address and netmask.
    Ip4Subnet(Option<(Ipv4Addr, Ipv4Addr)>),
    /// INTERNAL_IP6_ADDRESS: address and prefix length.
    Ip6Address(Option<(Ipv6Addr, u8)>),
    /// INTERNAL_IP6_DNS.
    Ip6Dns(Option<Ipv6Addr>),
    /// INTERNAL_IP6_SUBNET: address and prefix length.
    Ip6Subnet(Option<(Ipv6Addr, u8)>),
    /// INTERNAL_DNS_DOMAIN (RFC 8598): the domain, ASCII, without a trailing dot.
    DnsDomain(Option<Vec<u8>>),
    /// Any other type: kept as it came, ignored.
    Unknown {
        /// Attribute Type (the reserved bit cleared).
        kind: u16,
        /// Value.
        value: Vec<u8>,
    },
}

fn v4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

fn v6(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a)
}

/// RFC 8598 4: a domain name in presentation format without the root's trailing dot.
fn domain_ok(d: &[u8]) -> bool {
    !d.is_empty()
        && d.len() <= 255
        && d.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.' || *c == b'_')
}

impl Attribute {
    /// The Attribute Type.
    pub fn kind(&self) -> u16 {
        match self {
            Attribute::Ip4Address(_) => attr::INTERNAL_IP4_ADDRESS,
            Attribute::Ip4Netmask(_) => attr::INTERNAL_IP4_NETMASK,
            Attribute::Ip4Dns(_) => attr::INTERNAL_IP4_DNS,
            Attribute::Ip4Subnet(_) => attr::INTERNAL_IP4_SUBNET,
            Attribute::Ip6Address(_) => attr::INTERNAL_IP6_ADDRESS,
            Attribute::Ip6Dns(_) => attr::INTERNAL_IP6_DNS,
            Attribute::Ip6Subnet(_) => attr::INTERNAL_IP6_SUBNET,
            Attribute::DnsDomain(_) => attr::INTERNAL_DNS_DOMAIN,
            Attribute::Unknown { kind, .. } => *kind,
        }
    }

    /// Reads one attribute's value (3.15.1's lengths).
    pub fn parse(kind: u16, v: &[u8]) -> Result<Self, CpError> {
        let bad = || CpError::BadAttributeLength(kind, v.len() as u16);
        let opt = |n: usize| -> Result<bool, CpError> {
            match v.len() {
                0 => Ok(false),
                l if l == n => Ok(true),
                _ => Err(bad()),
            }
        };
        Ok(match kind {
            attr::INTERNAL_IP4_ADDRESS => Attribute::Ip4Address(opt(4)?.then(|| v4(v))),
            attr::INTERNAL_IP4_NETMASK => Attribute::Ip4Netmask(opt(4)?.then(|| v4(v))),
            attr::INTERNAL_IP4_DNS => Attribute::Ip4Dns(opt(4)?.then(|| v4(v))),
            attr::INTERNAL_IP4_SUBNET => Attribute::Ip4Subnet(opt(8)?.then(|| (v4(v), v4(&v[4..])))),
            attr::INTERNAL_IP6_ADDRESS | attr::INTERNAL_IP6_SUBNET => {
                let a = if opt(17)? {
                    if v[16] > 128 {
                        return Err(bad());
                    }
                    Some((v6(v), v[16]))
                } else {
                    None
                };
                if kind == attr::INTERNAL_IP6_ADDRESS {
                    Attribute::Ip6Address(a)
                } else {
                    Attribute::Ip6Subnet(a)
                }
            }
            attr::INTERNAL_IP6_DNS => Attribute::Ip6Dns(opt(16)?.then(|| v6(v))),
            attr::INTERNAL_DNS_DOMAIN => {
                if v.is_empty() {
                    Attribute::DnsDomain(None)
                } else {
                    // A trailing dot (the root) is allowed and dropped.
                    let d = v.strip_suffix(b".").unwrap_or(v);
                    if !domain_ok(d) {
                        return Err(CpError::BadDomain);
                    }
                    Attribute::DnsDomain(Some(d.to_vec()))
                }
            }
            _ => Attribute::Unknown {
                kind,
                value: v.to_vec(),
            },
        })
    }

    /// The value's bytes.
    pub fn value(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Attribute::Ip4Address(a) | Attribute::Ip4Netmask(a) | Attribute::Ip4Dns(a) => {
                if let Some(a) = a {
                    out.extend_from_slice(&a.octets());
                }
            }
            Attribute::Ip4Subnet(s) => {
                if let Some((a, m)) = s {
                    out.extend_from_slice(&a.octets());
                    out.extend_from_slice(&m.octets());
                }
            }
            Attribute::Ip6Address(a) | Attribute::Ip6Subnet(a) => {
                if let Some((a, p)) = a {
                    out.extend_from_slice(&a.octets());
                    out.push(*p);
                }
            }
            Attribute::Ip6Dns(a) => {
                if let Some(a) = a {
                    out.extend_from_slice(&a.octets());
                }
            }
            Attribute::DnsDomain(d) => {
                if let Some(d) = d {
                    out.extend_from_slice(d);
                }
            }
            Attribute::Unknown { value, .. } => out.extend_from_slice(value),
        }
        out
    }
}

/// A view of a Configuration payload body (after the generic header).
#[derive(Debug, Clone)]
pub struct CpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CpPacket<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        CpPacket { buffer }
    }
    /// Wraps a buffer and checks that CFG Type and Reserved are there and that every
    /// attribute header and value fits, with at most [`MAX_ATTRIBUTES`] of them.
    pub fn new_checked(buffer: T) -> Result<Self, CpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// The checks of [`CpPacket::new_checked`].
    pub fn check_len(&self) -> Result<(), CpError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(CpError::Truncated);
        }
        let mut n = 0;
        for a in self.raw_attributes() {
            a?;
            n += 1;
            if n > MAX_ATTRIBUTES {
                return Err(CpError::TooManyAttributes);
            }
        }
        Ok(())
    }
    /// CFG Type.
    pub fn cfg_type(&self) -> u8 {
        self.buffer.as_ref()[field::CFG_TYPE]
    }
    /// The attributes as (type, value), in order; bounded by the buffer (each step takes
    /// at least [`ATTR_HEADER_LEN`] octets).
    pub fn raw_attributes(&self) -> RawAttributes<'_> {
        RawAttributes {
            rest: self.buffer.as_ref().get(field::ATTRIBUTES..).unwrap_or(&[]),
        }
    }
}

/// The attributes of a [`CpPacket`], borrowed.
#[derive(Debug, Clone)]
pub struct RawAttributes<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for RawAttributes<'a> {
    type Item = Result<(u16, &'a [u8]), CpError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < ATTR_HEADER_LEN {
            self.rest = &[];
            return Some(Err(CpError::Truncated));
        }
        let t = u16::from_be_bytes([self.rest[0], self.rest[1]]) & 0x7fff;
        let len = usize::from(u16::from_be_bytes([self.rest[2], self.rest[3]]));
        let Some(v) = self.rest.get(field::ATTR_VALUE..field::ATTR_VALUE + len) else {
            self.rest = &[];
            return Some(Err(CpError::Truncated));
        };
        self.rest = &self.rest[field::ATTR_VALUE + len..];
        Some(Ok((t, v)))
    }
}

/// A Configuration payload, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpRepr {
    /// CFG Type ([`cfg_type`]).
    pub cfg_type: u8,
    /// Attributes, in order.
    pub attributes: Vec<Attribute>,
}

impl CpRepr {
    /// Decodes a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &CpPacket<T>) -> Result<Self, CpError> {
        let mut attributes = Vec::new();
        for a in p.raw_attributes() {
            let (t, v) = a?;
            if attributes.len() >= MAX_ATTRIBUTES {
                return Err(CpError::TooManyAttributes);
            }
            attributes.push(Attribute::parse(t, v)?);
        }
        Ok(CpRepr {
            cfg_type: p.cfg_type(),
            attributes,
        })
    }

    /// Decodes a payload body.
    pub fn parse_body(body: &[u8]) -> Result<Self, CpError> {
        Self::parse(&CpPacket::new_checked(body)?)
    }

    /// Length of the body [`CpRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + self
                .attributes
                .iter()
                .map(|a| ATTR_HEADER_LEN + a.value().len())
                .sum::<usize>()
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        if buf.len() < self.buffer_len() {
            return Err(Error::BufferTooSmall);
        }
        buf[field::CFG_TYPE] = self.cfg_type;
        buf[field::RESERVED].fill(0);
        let mut at = HEADER_LEN;
        for a in &self.attributes {
            let v = a.value();
            let len = u16::try_from(v.len()).map_err(|_| Error::BadLength)?;
            buf[at..at + 2].copy_from_slice(&(a.kind() & 0x7fff).to_be_bytes());
            buf[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
            buf[at + 4..at + 4 + v.len()].copy_from_slice(&v);
            at += ATTR_HEADER_LEN + v.len();
        }
        Ok(())
    }

    /// The body as bytes.
    pub fn to_body(&self) -> Vec<u8> {
        let mut v = alloc::vec![0; self.buffer_len()];
        // The buffer is the right size: emit cannot fail but on an attribute over 64 KiB,
        // which no constructor here makes.
        let _ = self.emit(&mut v);
        v
    }

    /// As a payload of a message (the message module carries CP as an opaque payload).
    pub fn to_payload(&self) -> Payload {
        Payload::Other(kind::CP, false, self.to_body())
    }

    /// The first CP payload among `ps`, decoded: None if there is none.
    pub fn find(ps: &[Payload]) -> Option<Result<Self, CpError>> {
        ps.iter().find_map(|p| match p {
            Payload::Other(k, _, body) if *k == kind::CP => Some(Self::parse_body(body)),
            _ => None,
        })
    }

    /// The addresses in it (INTERNAL_IP4_ADDRESS, INTERNAL_IP6_ADDRESS with a value).
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.attributes
            .iter()
            .filter_map(|a| match a {
                Attribute::Ip4Address(Some(x)) => Some(IpAddr::V4(*x)),
                Attribute::Ip6Address(Some((x, _))) => Some(IpAddr::V6(*x)),
                _ => None,
            })
            .collect()
    }

    /// The DNS servers in it.
    pub fn dns(&self) -> Vec<IpAddr> {
        self.attributes
            .iter()
            .filter_map(|a| match a {
                Attribute::Ip4Dns(Some(x)) => Some(IpAddr::V4(*x)),
                Attribute::Ip6Dns(Some(x)) => Some(IpAddr::V6(*x)),
                _ => None,
            })
            .collect()
    }

    /// Whether it asks for an address of this family (an INTERNAL_IP4/6_ADDRESS, empty or
    /// naming the one wanted), and which one if named (not the unspecified address).
    pub fn wants(&self, v6: bool) -> Option<Option<IpAddr>> {
        self.attributes.iter().find_map(|a| match (a, v6) {
            (Attribute::Ip4Address(x), false) => Some(x.filter(|a| !a.is_unspecified()).map(IpAddr::V4)),
            (Attribute::Ip6Address(x), true) => {
                Some(x.filter(|(a, _)| !a.is_unspecified()).map(|(a, _)| IpAddr::V6(a)))
            }
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CFG_REQUEST as strongSwan 5.9's charon sends it with `vips = 0.0.0.0, ::` (its
    /// ike_config task: an empty INTERNAL_IP4_ADDRESS and INTERNAL_IP6_ADDRESS, then empty
    /// DNS attributes from its attribute handlers), plus one of Microsoft's private
    /// attributes (INTERNAL_IP4_SERVER, 23456) a Windows client adds, which must be ignored.
    #[test]
    fn parses_a_request_and_ignores_unknown_attributes() {
        let body = [
            1, 0, 0, 0, // CFG_REQUEST
            0, 1, 0, 0, // INTERNAL_IP4_ADDRESS, empty
            0, 8, 0, 0, // INTERNAL_IP6_ADDRESS, empty
            0, 3, 0, 0, // INTERNAL_IP4_DNS
            0, 10, 0, 0, // INTERNAL_IP6_DNS
            0x5b, 0xa0, 0, 2, 0xab, 0xcd, // 23456 with 2 octets
            0, 25, 0, 0, // INTERNAL_DNS_DOMAIN, empty
        ];
        let r = CpRepr::parse_body(&body).unwrap();
        assert_eq!(r.cfg_type, cfg_type::REQUEST);
        assert_eq!(
            r.attributes,
            alloc::vec![
                Attribute::Ip4Address(None),
                Attribute::Ip6Address(None),
                Attribute::Ip4Dns(None),
                Attribute::Ip6Dns(None),
                Attribute::Unknown {
                    kind: 23456,
                    value: alloc::vec![0xab, 0xcd]
                },
                Attribute::DnsDomain(None),
            ]
        );
        assert_eq!(r.wants(false), Some(None));
        assert_eq!(r.wants(true), Some(None));
        // Emitted back to the same bytes.
        assert_eq!(r.to_body(), body);
    }

    #[test]
    fn a_reply_round_trips() {
        let r = CpRepr {
            cfg_type: cfg_type::REPLY,
            attributes: alloc::vec![
                Attribute::Ip4Address(Some(Ipv4Addr::new(10, 3, 0, 1))),
                Attribute::Ip4Netmask(Some(Ipv4Addr::new(255, 255, 255, 255))),
                Attribute::Ip4Dns(Some(Ipv4Addr::new(10, 0, 0, 53))),
                Attribute::Ip4Subnet(Some((Ipv4Addr::new(10, 1, 0, 0), Ipv4Addr::new(255, 255, 0, 0)))),
                Attribute::Ip6Address(Some(("fd00::5".parse().unwrap(), 128))),
                Attribute::Ip6Dns(Some("fd00::53".parse().unwrap())),
                Attribute::Ip6Subnet(Some(("fd01::".parse().unwrap(), 64))),
                Attribute::DnsDomain(Some(b"corp.example".to_vec())),
            ],
        };
        let b = r.to_body();
        assert_eq!(b.len(), r.buffer_len());
        // The first attribute by hand: type 1, length 4, 10.3.0.1.
        assert_eq!(&b[..12], &[2, 0, 0, 0, 0, 1, 0, 4, 10, 3, 0, 1]);
        let back = CpRepr::parse_body(&b).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            back.addresses(),
            alloc::vec![IpAddr::from([10, 3, 0, 1]), "fd00::5".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(back.dns().len(), 2);
        assert_eq!(back.wants(false), Some(Some(IpAddr::from([10, 3, 0, 1]))));
        // The payload form and the lookup in a chain.
        let ps = [Payload::Nonce(alloc::vec![1; 16]), r.to_payload()];
        assert_eq!(CpRepr::find(&ps), Some(Ok(r)));
        assert_eq!(CpRepr::find(&ps[..1]), None);
    }

    #[test]
    fn malformed_lengths_are_typed_errors() {
        // Shorter than CFG Type + Reserved.
        assert_eq!(CpRepr::parse_body(&[1, 0, 0]), Err(CpError::Truncated));
        // An attribute header cut short.
        assert_eq!(CpRepr::parse_body(&[1, 0, 0, 0, 0, 1, 0]), Err(CpError::Truncated));
        // A length past the end.
        assert_eq!(
            CpRepr::parse_body(&[1, 0, 0, 0, 0, 1, 0, 4, 10, 3]),
            Err(CpError::Truncated)
        );
        // INTERNAL_IP4_ADDRESS of 3 octets, IP6 of 16, IP4_SUBNET of 4.
        assert_eq!(
            CpRepr::parse_body(&[1, 0, 0, 0, 0, 1, 0, 3, 1, 2, 3]),
            Err(CpError::BadAttributeLength(1, 3))
        );
        let mut b = alloc::vec![2, 0, 0, 0, 0, 8, 0, 16];
        b.extend_from_slice(&[0; 16]);
        assert_eq!(CpRepr::parse_body(&b), Err(CpError::BadAttributeLength(8, 16)));
        // A prefix length over 128.
        let mut b = alloc::vec![2, 0, 0, 0, 0, 8, 0, 17];
        b.extend_from_slice(&[0; 16]);
        b.push(129);
        assert_eq!(CpRepr::parse_body(&b), Err(CpError::BadAttributeLength(8, 17)));
        assert_eq!(
            CpRepr::parse_body(&[2, 0, 0, 0, 0, 13, 0, 4, 1, 2, 3, 4]),
            Err(CpError::BadAttributeLength(13, 4))
        );
        // A domain with a space in it.
        assert_eq!(
            CpRepr::parse_body(&[2, 0, 0, 0, 0, 25, 0, 3, b'a', b' ', b'b']),
            Err(CpError::BadDomain)
        );
        // Too many (empty, unknown) attributes.
        let mut b = alloc::vec![1, 0, 0, 0];
        for _ in 0..=MAX_ATTRIBUTES {
            b.extend_from_slice(&[0x40, 0, 0, 0]);
        }
        assert_eq!(CpRepr::parse_body(&b), Err(CpError::TooManyAttributes));
        // The reserved bit of an attribute type is ignored (3.15.1).
        let r = CpRepr::parse_body(&[1, 0, 0, 0, 0x80, 1, 0, 0]).unwrap();
        assert_eq!(r.attributes, alloc::vec![Attribute::Ip4Address(None)]);
    }
}
