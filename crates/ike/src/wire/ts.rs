//! Traffic Selector payloads TSi and TSr (RFC 7296 section 3.13, 3.13.1) and the selector
//! strings of swanctl.conf (`10.1.0.0/16`, `10.1.0.0/16[tcp/443]`, `fd00::/64[udp/1000-2000]`).
use crate::error::Error;
use crate::limits::MAX_TS;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// TS types (3.13.1).
pub mod ts_type {
    /// TS_IPV4_ADDR_RANGE.
    pub const IPV4_ADDR_RANGE: u8 = 7;
    /// TS_IPV6_ADDR_RANGE.
    pub const IPV6_ADDR_RANGE: u8 = 8;
}

/// Offsets within one traffic selector (3.13.1).
pub mod field {
    /// TS Type.
    pub const TYPE: usize = 0;
    /// IP Protocol ID (0: any).
    pub const PROTOCOL: usize = 1;
    /// Selector Length.
    pub const LENGTH: core::ops::Range<usize> = 2..4;
    /// Start Port.
    pub const START_PORT: core::ops::Range<usize> = 4..6;
    /// End Port.
    pub const END_PORT: core::ops::Range<usize> = 6..8;
    /// Starting Address, then Ending Address.
    pub const ADDRESSES: usize = 8;
}

/// One traffic selector: an address range, a protocol (0 = any) and a port range. Both
/// addresses have the same family.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    /// IP protocol (0: any).
    pub protocol: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
    /// First address.
    pub start: IpAddr,
    /// Last address.
    pub end: IpAddr,
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}
fn from_u128(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    }
}

impl fmt::Debug for TrafficSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for TrafficSelector {
    /// strongSwan-like: `10.1.0.0/16`, `10.0.0.1..10.0.0.9`, then `[proto/ports]` if narrower
    /// than any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, e) = (to_u128(self.start), to_u128(self.end));
        let bits = if self.start.is_ipv6() { 128 } else { 32 };
        let span = e.wrapping_sub(s).wrapping_add(1);
        let prefix = if span == 0 {
            Some(0) // the whole v6 space
        } else if span.is_power_of_two() && s & (span - 1) == 0 {
            Some(bits - span.trailing_zeros())
        } else {
            None
        };
        match prefix {
            Some(p) => write!(f, "{}/{}", self.start, p)?,
            None => write!(f, "{}..{}", self.start, self.end)?,
        }
        if self.protocol != 0 || self.start_port != 0 || self.end_port != 0xffff {
            write!(f, "[{}", self.protocol)?;
            if self.start_port == self.end_port {
                write!(f, "/{}", self.start_port)?;
            } else if !(self.start_port == 0 && self.end_port == 0xffff) {
                write!(f, "/{}-{}", self.start_port, self.end_port)?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

impl TrafficSelector {
    /// Everything of one family.
    pub fn any(v6: bool) -> Self {
        TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 0xffff,
            start: from_u128(0, v6),
            end: from_u128(if v6 { u128::MAX } else { u32::MAX as u128 }, v6),
        }
    }
    /// One host, any protocol and port.
    pub fn host(a: IpAddr) -> Self {
        TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 0xffff,
            start: a,
            end: a,
        }
    }
    /// A subnet `addr/len`.
    pub fn subnet(a: IpAddr, len: u8) -> Result<Self, Error> {
        let bits: u32 = if a.is_ipv6() { 128 } else { 32 };
        if len as u32 > bits {
            return Err(Error::BadSyntax("prefix length"));
        }
        let host_bits = bits - len as u32;
        let mask: u128 = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let v = to_u128(a) & !mask;
        let v_end = v | mask;
        let v_end = if a.is_ipv6() { v_end } else { v_end & u32::MAX as u128 };
        Ok(TrafficSelector {
            protocol: 0,
            start_port: 0,
            end_port: 0xffff,
            start: from_u128(v, a.is_ipv6()),
            end: from_u128(v_end, a.is_ipv6()),
        })
    }
    /// Whether IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.start.is_ipv6()
    }
    /// The TS Type.
    pub fn ts_type(&self) -> u8 {
        if self.is_ipv6() {
            ts_type::IPV6_ADDR_RANGE
        } else {
            ts_type::IPV4_ADDR_RANGE
        }
    }
    /// Wire length of this selector.
    pub fn buffer_len(&self) -> usize {
        if self.is_ipv6() {
            40
        } else {
            16
        }
    }
    /// Whether the selector is well formed: one family, start <= end for both ranges.
    pub fn is_valid(&self) -> bool {
        self.start.is_ipv6() == self.end.is_ipv6()
            && to_u128(self.start) <= to_u128(self.end)
            && self.start_port <= self.end_port
    }
    /// The intersection of two selectors (2.9 narrowing), if not empty.
    pub fn intersect(&self, o: &TrafficSelector) -> Option<TrafficSelector> {
        if self.is_ipv6() != o.is_ipv6() {
            return None;
        }
        let protocol = match (self.protocol, o.protocol) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let sp = self.start_port.max(o.start_port);
        let ep = self.end_port.min(o.end_port);
        let s = to_u128(self.start).max(to_u128(o.start));
        let e = to_u128(self.end).min(to_u128(o.end));
        if sp > ep || s > e {
            return None;
        }
        Some(TrafficSelector {
            protocol,
            start_port: sp,
            end_port: ep,
            start: from_u128(s, self.is_ipv6()),
            end: from_u128(e, self.is_ipv6()),
        })
    }
    /// How many address prefixes cover the address range exactly (what a data plane whose
    /// policies take prefixes needs for it: 1 for a subnet, up to 62 for an IPv4 range and
    /// 254 for an IPv6 one); 0 for an invalid selector.
    pub fn prefix_count(&self) -> usize {
        if !self.is_valid() {
            return 0;
        }
        let bits = if self.is_ipv6() { 128u32 } else { 32 };
        let (lo, hi) = (to_u128(self.start), to_u128(self.end));
        let mut n = 0;
        let mut cur = lo;
        loop {
            // The largest block aligned at `cur` that stays within `hi`.
            let mut size = if cur == 0 { bits } else { cur.trailing_zeros().min(bits) };
            while size > 0 && size < 128 && cur + ((1u128 << size) - 1) > hi {
                size -= 1;
            }
            if size >= 128 && hi != u128::MAX {
                // Only `::/0` is a block of 2^128; anything less starts with a 2^127 one.
                size = 127;
                while cur + ((1u128 << size) - 1) > hi {
                    size -= 1;
                }
            }
            n += 1;
            let last = if size >= 128 {
                u128::MAX
            } else {
                cur + ((1u128 << size) - 1)
            };
            if last >= hi {
                return n;
            }
            cur = last + 1;
        }
    }
    /// Whether `self` lies within `o`.
    pub fn is_subset_of(&self, o: &TrafficSelector) -> bool {
        self.intersect(o).as_ref() == Some(self)
    }
    /// Whether the selector covers one packet's addresses, protocol and port.
    pub fn matches(&self, addr: IpAddr, protocol: u8, port: u16) -> bool {
        self.start.is_ipv6() == addr.is_ipv6()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(addr))
            && (self.protocol == 0 || self.protocol == protocol)
            && (self.start_port..=self.end_port).contains(&port)
    }

    /// Parses a swanctl.conf selector: `ADDR[/LEN][\[PROTO[/PORT[-PORT]]\]]`, where PROTO is a
    /// number or `tcp`, `udp`, `icmp`, `ipv6-icmp`, `sctp`, `any`; PORT a number or `%any`.
    pub fn from_str_config(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        let (net, extra) = match s.find('[') {
            Some(i) => {
                let rest = s[i + 1..]
                    .strip_suffix(']')
                    .ok_or(Error::BadSyntax("traffic selector: missing ]"))?;
                (&s[..i], Some(rest))
            }
            None => (s, None),
        };
        let mut ts = match net.split_once('/') {
            Some((a, l)) => {
                let a: IpAddr = a.parse().map_err(|_| Error::BadSyntax("traffic selector address"))?;
                let l: u8 = l
                    .parse()
                    .map_err(|_| Error::BadSyntax("traffic selector prefix length"))?;
                Self::subnet(a, l)?
            }
            None => Self::host(net.parse().map_err(|_| Error::BadSyntax("traffic selector address"))?),
        };
        if let Some(extra) = extra {
            let (proto, ports) = match extra.split_once('/') {
                Some((p, ports)) => (p, Some(ports)),
                None => (extra, None),
            };
            ts.protocol = match proto {
                "" | "any" | "%any" => 0,
                "tcp" => 6,
                "udp" => 17,
                "icmp" => 1,
                "ipv6-icmp" | "icmp6" => 58,
                "sctp" => 132,
                n => n.parse().map_err(|_| Error::BadSyntax("traffic selector protocol"))?,
            };
            if let Some(ports) = ports {
                if ports != "%any" && ports != "any" {
                    let (a, b) = ports.split_once('-').unwrap_or((ports, ports));
                    ts.start_port = a.parse().map_err(|_| Error::BadSyntax("traffic selector port"))?;
                    ts.end_port = b.parse().map_err(|_| Error::BadSyntax("traffic selector port"))?;
                    if ts.start_port > ts.end_port {
                        return Err(Error::BadSyntax("traffic selector port range"));
                    }
                }
            }
        }
        Ok(ts)
    }
}

/// Parses the body of a TSi or TSr payload.
pub fn parse(body: &[u8]) -> Result<Vec<TrafficSelector>, Error> {
    if body.len() < 4 {
        return Err(Error::Truncated);
    }
    let n = body[0] as usize;
    if n == 0 {
        return Err(Error::BadTs);
    }
    if n > MAX_TS {
        return Err(Error::TooManyTs);
    }
    let mut rest = &body[4..];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        if rest.len() < 8 {
            return Err(Error::Truncated);
        }
        let len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
        let ts = &rest.get(..len).ok_or(Error::Truncated)?;
        let (alen, v6) = match rest[field::TYPE] {
            ts_type::IPV4_ADDR_RANGE => (4, false),
            ts_type::IPV6_ADDR_RANGE => (16, true),
            _ => return Err(Error::BadTs),
        };
        if len != 8 + 2 * alen {
            return Err(Error::BadTs);
        }
        let a = &ts[8..8 + alen];
        let b = &ts[8 + alen..8 + 2 * alen];
        let (start, end) = if v6 {
            let a: [u8; 16] = a.try_into().map_err(|_| Error::BadTs)?;
            let b: [u8; 16] = b.try_into().map_err(|_| Error::BadTs)?;
            (IpAddr::V6(a.into()), IpAddr::V6(b.into()))
        } else {
            let a: [u8; 4] = a.try_into().map_err(|_| Error::BadTs)?;
            let b: [u8; 4] = b.try_into().map_err(|_| Error::BadTs)?;
            (IpAddr::V4(a.into()), IpAddr::V4(b.into()))
        };
        let t = TrafficSelector {
            protocol: ts[field::PROTOCOL],
            start_port: u16::from_be_bytes([ts[4], ts[5]]),
            end_port: u16::from_be_bytes([ts[6], ts[7]]),
            start,
            end,
        };
        // 3.13.1 allows an "empty" selector (start > end) in some cases (OPAQUE ports);
        // such a selector matches nothing and is simply kept out of narrowing.
        v.push(t);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err(Error::BadLength);
    }
    Ok(v)
}

/// Body length of a TS payload.
pub fn buffer_len(ts: &[TrafficSelector]) -> usize {
    4 + ts.iter().map(TrafficSelector::buffer_len).sum::<usize>()
}

/// Writes the body of a TS payload.
pub fn emit(ts: &[TrafficSelector], buf: &mut [u8]) -> Result<(), Error> {
    if ts.is_empty() || ts.len() > MAX_TS {
        return Err(Error::TooManyTs);
    }
    let b = buf.get_mut(..buffer_len(ts)).ok_or(Error::BufferTooSmall)?;
    b[..4].copy_from_slice(&[ts.len() as u8, 0, 0, 0]);
    let mut off = 4;
    for t in ts {
        let l = t.buffer_len();
        let s = &mut b[off..off + l];
        s[0] = t.ts_type();
        s[1] = t.protocol;
        s[2..4].copy_from_slice(&(l as u16).to_be_bytes());
        s[4..6].copy_from_slice(&t.start_port.to_be_bytes());
        s[6..8].copy_from_slice(&t.end_port.to_be_bytes());
        match (t.start, t.end) {
            (IpAddr::V4(a), IpAddr::V4(z)) => {
                s[8..12].copy_from_slice(&a.octets());
                s[12..16].copy_from_slice(&z.octets());
            }
            (IpAddr::V6(a), IpAddr::V6(z)) => {
                s[8..24].copy_from_slice(&a.octets());
                s[24..40].copy_from_slice(&z.octets());
            }
            _ => return Err(Error::BadTs),
        }
        off += l;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn strings_wire_and_intersection() {
        let a = TrafficSelector::from_str_config("10.1.0.0/16").unwrap();
        assert_eq!(a.to_string(), "10.1.0.0/16");
        let b = TrafficSelector::from_str_config("10.1.2.0/24[tcp/443]").unwrap();
        assert_eq!(b.to_string(), "10.1.2.0/24[6/443]");
        let c = TrafficSelector::from_str_config("fd00::/64[udp/1000-2000]").unwrap();
        let v = alloc::vec![a, b, c];
        let mut buf = alloc::vec![0; buffer_len(&v)];
        emit(&v, &mut buf).unwrap();
        assert_eq!(parse(&buf).unwrap(), v);
        assert_eq!(buf[4..8], [7, 0, 0, 16]);
        assert_eq!(a.intersect(&b), Some(b));
        assert!(b.is_subset_of(&a));
        assert!(!a.is_subset_of(&b));
        assert_eq!(a.intersect(&c), None);
        let any4 = TrafficSelector::any(false);
        assert_eq!(any4.to_string(), "0.0.0.0/0");
        assert_eq!(TrafficSelector::any(true).to_string(), "::/0");
        for n in 0..buf.len() {
            assert!(parse(&buf[..n]).is_err());
        }
    }
}
