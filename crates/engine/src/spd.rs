//! Security Policy Database (RFC 4301 section 4.4.1): an ordered list of policies per
//! direction; the first whose selectors match a packet decides (protect, bypass or discard).

use crate::sad::SaId;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;
use ipsec_core::ip::{self, proto, Ipv4Packet};
use ipsec_core::Error;

/// An address prefix, e.g. `10.0.0.0/8` or `2001:db8::/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// A prefix of `len` bits; `None` if `len` is longer than the address. Bits after the
    /// prefix are cleared.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return None;
        }
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask32(len)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask128(len)).into()),
        };
        Some(Prefix { addr, len })
    }

    /// A single host (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Self {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Prefix { addr, len }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether this is `/0` (every address of its family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `a` is inside the prefix (never for an address of the other family).
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(a) & mask32(self.len) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => u128::from(a) & mask128(self.len) == u128::from(n),
            _ => false,
        }
    }
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A prefix that could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixError;

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected an address or address/length, e.g. 10.0.0.0/8 or 2001:db8::/32")
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `addr` (a host) or `addr/len`.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| PrefixError)?;
        match l {
            None => Ok(Prefix::host(addr)),
            Some(l) => {
                let len: u8 = l.trim().parse().map_err(|_| PrefixError)?;
                Prefix::new(addr, len).ok_or(PrefixError)
            }
        }
    }
}

/// An inclusive range of ports (or, for ICMP, of types or codes; RFC 4301 4.4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Every port, including packets that carry none (non-first fragments, other protocols).
    pub const ANY: PortRange = PortRange { lo: 0, hi: u16::MAX };

    /// One port.
    pub fn single(p: u16) -> Self {
        PortRange { lo: p, hi: p }
    }

    /// Whether this is [`PortRange::ANY`].
    pub fn is_any(&self) -> bool {
        *self == PortRange::ANY
    }

    /// Whether a packet with this port (or none) matches. A packet with no port only matches
    /// `ANY` (RFC 4301 4.4.1.1 "OPAQUE").
    pub fn matches(&self, port: Option<u16>) -> bool {
        match port {
            Some(p) => self.lo <= p && p <= self.hi,
            None => self.is_any(),
        }
    }
}

impl Default for PortRange {
    fn default() -> Self {
        PortRange::ANY
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_any() {
            f.write_str("any")
        } else if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// Which way a packet goes through the IPsec boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "lowercase"))]
pub enum Direction {
    /// Arriving from the unprotected side's peer (decapsulated, then checked).
    In,
    /// Leaving towards the peer (matched, then encapsulated).
    Out,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::In => "in",
            Direction::Out => "out",
        })
    }
}

/// The selectors of a policy (RFC 4301 section 4.4.1.1). `None` means any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Selector {
    /// Source prefix.
    pub src: Option<Prefix>,
    /// Destination prefix.
    pub dst: Option<Prefix>,
    /// Next-layer protocol (after the IPv6 extension headers).
    pub proto: Option<u8>,
    /// Source ports (ICMP: the type).
    pub src_ports: PortRange,
    /// Destination ports (ICMP: the code).
    pub dst_ports: PortRange,
}

impl Selector {
    /// Whether the flow matches every selector.
    pub fn matches(&self, f: &Flow) -> bool {
        self.src.is_none_or(|p| p.contains(f.src))
            && self.dst.is_none_or(|p| p.contains(f.dst))
            && self.proto.is_none_or(|p| p == f.proto)
            && self.src_ports.matches(f.src_port)
            && self.dst_ports.matches(f.dst_port)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let any = |p: &Option<Prefix>| p.map_or("any".into(), |p| alloc::format!("{p}"));
        write!(
            f,
            "src {}[{}] dst {}[{}] proto ",
            any(&self.src),
            self.src_ports,
            any(&self.dst),
            self.dst_ports
        )?;
        match self.proto {
            Some(p) => write!(f, "{p}"),
            None => f.write_str("any"),
        }
    }
}

/// What a policy does with the packets it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Apply (outbound) or require (inbound) this bundle, in seal order.
    Protect(Vec<SaId>),
    /// Let the packet through unprotected.
    Bypass,
    /// Drop it.
    Discard,
}

/// One policy: a direction, selectors and an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Direction it applies to.
    pub dir: Direction,
    /// What it matches.
    pub selector: Selector,
    /// What it does.
    pub action: Action,
}

/// The traffic selectors of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Next-layer protocol.
    pub proto: u8,
    /// Source port, or ICMP type; `None` when the packet carries none.
    pub src_port: Option<u16>,
    /// Destination port, or ICMP code.
    pub dst_port: Option<u16>,
}

const ICMP: u8 = 1;
const SCTP: u8 = 132;
const UDPLITE: u8 = 136;

impl Flow {
    /// Reads the selectors of an IP packet. Ports are read for TCP, UDP, SCTP and UDP-Lite,
    /// type and code for ICMP and ICMPv6, and nothing from a non-first fragment.
    pub fn from_packet(packet: &[u8]) -> Result<Flow, Error> {
        let (src, dst, split, later_fragment) = match ip::version(packet)? {
            4 => {
                let p = Ipv4Packet::new_checked(packet)?;
                let split = ip::ipv4_split(packet)?;
                let offset = u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff;
                (IpAddr::V4(p.src()), IpAddr::V4(p.dst()), split, offset != 0)
            }
            _ => {
                let p = ip::Ipv6Packet::new_checked(packet)?;
                let mut later = false;
                let split = ip::walk_ipv6_ext(packet, |h| {
                    if h.kind == proto::FRAGMENT {
                        let off = u16::from_be_bytes([packet[h.offset + 2], packet[h.offset + 3]]) >> 3;
                        later |= off != 0;
                    }
                })?;
                (IpAddr::V6(p.src()), IpAddr::V6(p.dst()), split, later)
            }
        };
        let mut flow = Flow {
            src,
            dst,
            proto: split.next,
            src_port: None,
            dst_port: None,
        };
        let end = ip::claimed_len(packet)?.min(packet.len());
        let upper = packet.get(split.offset..end).unwrap_or(&[]);
        if later_fragment {
            return Ok(flow);
        }
        match split.next {
            proto::TCP | proto::UDP | SCTP | UDPLITE if upper.len() >= 4 => {
                flow.src_port = Some(u16::from_be_bytes([upper[0], upper[1]]));
                flow.dst_port = Some(u16::from_be_bytes([upper[2], upper[3]]));
            }
            ICMP | proto::ICMPV6 if upper.len() >= 2 => {
                flow.src_port = Some(upper[0] as u16);
                flow.dst_port = Some(upper[1] as u16);
            }
            _ => {}
        }
        Ok(flow)
    }
}

/// The policies of both directions, each list in match order.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    policies: Vec<Policy>,
}

impl Spd {
    /// An empty SPD (every packet is discarded: RFC 4301 5.1 / 5.2, no match means discard).
    pub fn new() -> Self {
        Spd::default()
    }

    /// Appends a policy: it matches only packets no earlier policy of its direction matched.
    pub fn push(&mut self, p: Policy) {
        self.policies.push(p);
    }

    /// Every policy, in order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// Takes out the policy at `index` (as in [`Spd::policies`]) and returns it; `None` if
    /// there is none there. The policies after it move up one place.
    pub fn remove(&mut self, index: usize) -> Option<Policy> {
        (index < self.policies.len()).then(|| self.policies.remove(index))
    }

    /// Points every protect policy that names `old` at `new` instead.
    pub(crate) fn repoint(&mut self, old: SaId, new: SaId) {
        for p in &mut self.policies {
            if let Action::Protect(ids) = &mut p.action {
                for id in ids.iter_mut().filter(|id| **id == old) {
                    *id = new;
                }
            }
        }
    }

    /// The first policy of direction `dir` that matches `flow`, with its index.
    pub fn lookup(&self, dir: Direction, flow: &Flow) -> Option<(usize, &Policy)> {
        self.policies
            .iter()
            .enumerate()
            .find(|(_, p)| p.dir == dir && p.selector.matches(flow))
    }
}
