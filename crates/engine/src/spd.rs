//! Security Policy Database (RFC 4301 section 4.4.1): an ordered list of policies per
//! direction; the first whose selectors match a packet decides (protect, bypass or discard).
//!
//! # Lookup: tuple-space search over the ordered list
//!
//! RFC 4301 4.4.1 makes the SPD an *ordered* list: the first policy (of the packet's
//! direction) whose selectors match decides, and 4.4.1.2 leaves the data structure to the
//! implementation as long as that first-match answer is kept. [`Spd::lookup`] gives exactly
//! the answer of the plain scan ([`Spd::lookup_linear`], kept as the reference) without
//! testing every policy:
//!
//! - Each direction has its own index. Its policies are grouped by the *shape* of their
//!   address selectors: (source: any / IPv4 prefix length / IPv6 prefix length, destination:
//!   the same). A policy with no address selector is "any" (it matches both families, so it
//!   is not the same as `0.0.0.0/0`).
//! - In a group, a hash map (hashbrown, so the crate stays `no_std` + `alloc`) goes from the
//!   masked (source, destination) network addresses to the positions of the policies with
//!   those prefixes, ascending (nearly always one).
//! - A packet's lookup masks its addresses to each group's lengths and probes that group's
//!   map once; the candidates found are checked for protocol and ports, and the lowest
//!   position that matches wins. The position (the policy's place in [`Spd::policies`]) is
//!   the order key: a later-pushed policy always has a higher one.
//! - Groups are kept sorted by their earliest policy, so the search stops at the first group
//!   that starts after the best match so far (a broad bypass or discard early in the list
//!   ends most lookups after one probe).
//!
//! The cost of a lookup is one hash probe per *shape* in use (a handful in practice: host
//! pairs, subnet pairs, "any"), whatever the number of policies; the worst case of tuple-space
//! search is many distinct prefix-length pairs in one direction ([`Spd::shapes`] counts them).
//! [`Spd::push`] is one hash insert. [`Spd::remove`] keeps the interface's positional
//! meaning (later policies move up one place), so it is linear: the list closes up and the
//! positions in the index are renumbered, with no rehashing.

use crate::sad::SaId;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;
use hashbrown::HashMap;
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
            && self.matches_beyond_addresses(f)
    }

    /// Whether the protocol and ports match (the index has matched the addresses).
    #[inline]
    fn matches_beyond_addresses(&self, f: &Flow) -> bool {
        self.proto.is_none_or(|p| p == f.proto)
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

impl Policy {
    /// Whether this is a protect policy whose bundle names one of `sas`.
    pub fn protects_with_any(&self, sas: &[SaId]) -> bool {
        matches!(&self.action, Action::Protect(v) if v.iter().any(|id| sas.contains(id)))
    }
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

/// The policies of both directions in one list (directions interleaved, each in its match
/// order), with a tuple-space index per direction for [`Spd::lookup`]: see the module
/// documentation.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    policies: Vec<Policy>,
    /// `[in, out]`.
    index: [Index; 2],
}

fn slot(dir: Direction) -> usize {
    match dir {
        Direction::In => 0,
        Direction::Out => 1,
    }
}

impl Spd {
    /// An empty SPD (every packet is discarded: RFC 4301 5.1 / 5.2, no match means discard).
    pub fn new() -> Self {
        Spd::default()
    }

    /// Appends a policy: it matches only packets no earlier policy of its direction matched.
    /// Amortized O(1): one hash insert into the index of its direction.
    pub fn push(&mut self, p: Policy) {
        let pos = self.policies.len();
        self.index[slot(p.dir)].insert(pos, &p.selector);
        self.policies.push(p);
    }

    /// Every policy, in order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// Takes out the policy at `index` (as in [`Spd::policies`]) and returns it; `None` if
    /// there is none there. The policies after it move up one place. O(n): the list closes
    /// up and the positions the index holds are renumbered (no rehashing).
    pub fn remove(&mut self, index: usize) -> Option<Policy> {
        if index >= self.policies.len() {
            return None;
        }
        let p = self.policies.remove(index);
        self.index[slot(p.dir)].remove(index, &p.selector);
        for ix in &mut self.index {
            ix.close_up(index);
        }
        Some(p)
    }

    /// Puts `new` in at position `at` (as in [`Spd::policies`]; past the end: at the end), in
    /// their order: they match before the policy that was at `at` and after those before it.
    /// O(n + k): the positions the index holds from `at` on move down k (no rehashing), then
    /// k hash inserts. A rekey's new pair goes before the old pair's this way (RFC 7296 2.8).
    pub fn insert(&mut self, at: usize, new: Vec<Policy>) {
        let at = at.min(self.policies.len());
        let k = new.len();
        if k == 0 {
            return;
        }
        if at < self.policies.len() {
            for ix in &mut self.index {
                ix.renumber(|p| if p >= at { p + k } else { p });
            }
        }
        for (i, p) in new.iter().enumerate() {
            self.index[slot(p.dir)].insert(at + i, &p.selector);
        }
        self.policies.splice(at..at, new);
    }

    /// Takes out every policy `gone` picks and returns them with the positions they had, in
    /// order. One pass over the list and one over the index (a position moves up by the number
    /// taken out before it), whatever the number taken: a child's policies leave a table of
    /// thousands without the table being rebuilt.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&Policy) -> bool) -> Vec<(usize, Policy)> {
        let at: Vec<usize> = (0..self.policies.len()).filter(|&i| gone(&self.policies[i])).collect();
        self.remove_at(&at)
    }

    /// Takes out the policies at the positions `at` (ascending, each in the list), as
    /// [`Spd::remove_where`] does once it has found them: the engine finds them once and makes
    /// the same change on both left-right copies without searching again.
    pub(crate) fn remove_at(&mut self, at: &[usize]) -> Vec<(usize, Policy)> {
        if at.is_empty() {
            return Vec::new();
        }
        for &i in at {
            let p = &self.policies[i];
            self.index[slot(p.dir)].remove(i, &p.selector);
        }
        for ix in &mut self.index {
            ix.renumber(|p| p - at.partition_point(|&g| g < p));
        }
        // the few taken out copied, the list closed up in place
        let out: Vec<(usize, Policy)> = at.iter().map(|&i| (i, self.policies[i].clone())).collect();
        let (mut i, mut next) = (0, 0);
        self.policies.retain(|_| {
            let keep = at.get(next) != Some(&i);
            next += usize::from(!keep);
            i += 1;
            keep
        });
        out
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

    /// The first policy of direction `dir` that matches `flow`, with its index (RFC 4301
    /// 4.4.1: ordered, first match). One hash probe per selector shape of the direction, not
    /// one test per policy.
    pub fn lookup(&self, dir: Direction, flow: &Flow) -> Option<(usize, &Policy)> {
        let mut best = usize::MAX;
        for g in &self.index[slot(dir)].groups {
            // Groups go by their earliest policy: none of this one or later can beat `best`.
            if g.first >= best {
                break;
            }
            let (Some(s), Some(d)) = (g.src.key(flow.src), g.dst.key(flow.dst)) else {
                continue;
            };
            let Some(slots) = g.map.get(&(s, d)) else {
                continue;
            };
            for pos in slots.iter() {
                if pos >= best {
                    break;
                }
                // The key's equality is the address selectors' match; the rest is checked here.
                if self
                    .policies
                    .get(pos)
                    .is_some_and(|p| p.selector.matches_beyond_addresses(flow))
                {
                    best = pos;
                    break;
                }
            }
        }
        self.policies.get(best).map(|p| (best, p))
    }

    /// The plain first-match scan [`Spd::lookup`] replaced: every policy in order. Kept as the
    /// reference the tests and the `spd` bench compare the index with.
    #[doc(hidden)]
    pub fn lookup_linear(&self, dir: Direction, flow: &Flow) -> Option<(usize, &Policy)> {
        self.policies
            .iter()
            .enumerate()
            .find(|(_, p)| p.dir == dir && p.selector.matches(flow))
    }

    /// The number of selector shapes (index groups, one hash probe each at most per lookup)
    /// of direction `dir`.
    pub fn shapes(&self, dir: Direction) -> usize {
        self.index[slot(dir)].groups.len()
    }

    /// Heap bytes held: `(policy list, index)`, from the capacities (the allocator's own
    /// overhead not counted). The policy list counts each protect bundle's SA ids.
    #[doc(hidden)]
    pub fn heap_bytes(&self) -> (usize, usize) {
        let list = self.policies.capacity() * core::mem::size_of::<Policy>()
            + self
                .policies
                .iter()
                .map(|p| match &p.action {
                    Action::Protect(ids) => ids.capacity() * core::mem::size_of::<SaId>(),
                    _ => 0,
                })
                .sum::<usize>();
        let index = self.index.iter().map(Index::heap_bytes).sum();
        (list, index)
    }
}

/// The shape of one address selector: any address (no selector), or a prefix length of one
/// family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Any,
    V4(u8),
    V6(u8),
}

impl Shape {
    /// The shape of a selector and its key (the prefix's network address; 0 for any).
    fn of(p: Option<Prefix>) -> (Shape, u128) {
        match p {
            None => (Shape::Any, 0),
            Some(p) => {
                let shape = match p.addr {
                    IpAddr::V4(_) => Shape::V4(p.len),
                    IpAddr::V6(_) => Shape::V6(p.len),
                };
                (shape, shape.key(p.addr).unwrap_or(0))
            }
        }
    }

    /// The key of address `a` in a group of this shape: `a` masked to the prefix length;
    /// `None` if `a` is of the other family (no policy of the group can match it).
    #[inline]
    fn key(self, a: IpAddr) -> Option<u128> {
        match (self, a) {
            (Shape::Any, _) => Some(0),
            (Shape::V4(l), IpAddr::V4(a)) => Some((u32::from(a) & mask32(l)) as u128),
            (Shape::V6(l), IpAddr::V6(a)) => Some(u128::from(a) & mask128(l)),
            _ => None,
        }
    }
}

/// The positions (in [`Spd::policies`]) of the policies of one key, ascending. Nearly always
/// one, so the first is inline.
#[derive(Debug, Clone)]
struct Slots {
    head: usize,
    rest: Vec<usize>,
}

impl Slots {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        core::iter::once(self.head).chain(self.rest.iter().copied())
    }

    /// Takes `pos` out; `true` if none is left.
    fn remove(&mut self, pos: usize) -> bool {
        if self.head == pos {
            if self.rest.is_empty() {
                return true;
            }
            self.head = self.rest.remove(0);
        } else {
            self.rest.retain(|&p| p != pos);
        }
        false
    }
}

/// The policies of one direction with one (source shape, destination shape), by their
/// masked (source, destination) addresses.
#[derive(Debug, Clone)]
struct Group {
    src: Shape,
    dst: Shape,
    /// The lowest position in the group.
    first: usize,
    map: HashMap<(u128, u128), Slots>,
}

impl Group {
    fn lowest(&self) -> usize {
        self.map.values().map(|s| s.head).min().unwrap_or(usize::MAX)
    }
}

/// The index of one direction: its groups, ordered by their earliest policy.
#[derive(Debug, Clone, Default)]
struct Index {
    groups: Vec<Group>,
}

impl Index {
    /// Adds the policy at `pos`, anywhere in the order (the positions from `pos` on already
    /// moved down: see [`Index::renumber`]; at the end, the usual case, nothing moves): the
    /// slots stay ascending and the groups ordered by their earliest policy.
    fn insert(&mut self, pos: usize, sel: &Selector) {
        let (src, s) = Shape::of(sel.src);
        let (dst, d) = Shape::of(sel.dst);
        let (i, fresh) = match self.groups.iter().position(|g| g.src == src && g.dst == dst) {
            Some(i) => (i, false),
            None => {
                self.groups.push(Group {
                    src,
                    dst,
                    first: pos,
                    map: HashMap::new(),
                });
                (self.groups.len() - 1, true)
            }
        };
        let g = &mut self.groups[i];
        match g.map.entry((s, d)) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                let slots = e.get_mut();
                if pos < slots.head {
                    slots.rest.insert(0, slots.head);
                    slots.head = pos;
                } else {
                    let k = slots.rest.partition_point(|&p| p < pos);
                    slots.rest.insert(k, pos);
                }
            }
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(Slots {
                    head: pos,
                    rest: Vec::new(),
                });
            }
        }
        if fresh || pos < g.first {
            g.first = pos;
            self.groups.sort_by_key(|g| g.first);
        }
    }

    /// Takes out the policy at `pos` (positions not renumbered yet: see [`Index::close_up`]).
    fn remove(&mut self, pos: usize, sel: &Selector) {
        let (src, s) = Shape::of(sel.src);
        let (dst, d) = Shape::of(sel.dst);
        let Some(i) = self.groups.iter().position(|g| g.src == src && g.dst == dst) else {
            return;
        };
        let g = &mut self.groups[i];
        if g.map.get_mut(&(s, d)).is_some_and(|slots| slots.remove(pos)) {
            g.map.remove(&(s, d));
        }
        if g.map.is_empty() {
            self.groups.remove(i);
        } else if g.first == pos {
            g.first = g.lowest();
        }
    }

    /// Renumbers after the policy at `pos` left the list: every later position moves up one.
    /// The order of positions is kept, so the slots stay ascending; only the groups' order
    /// may change (a group's earliest policy left).
    fn close_up(&mut self, pos: usize) {
        self.renumber(|p| if p > pos { p - 1 } else { p });
    }

    /// Moves every position through `f`, which must keep their order (positions leaving or
    /// joining the list before them); the groups are put back in the order of their earliest.
    fn renumber(&mut self, f: impl Fn(usize) -> usize) {
        for g in &mut self.groups {
            g.first = f(g.first);
            for slots in g.map.values_mut() {
                slots.head = f(slots.head);
                slots.rest.iter_mut().for_each(|p| *p = f(*p));
            }
        }
        self.groups.sort_by_key(|g| g.first);
    }

    fn heap_bytes(&self) -> usize {
        let entry = core::mem::size_of::<((u128, u128), Slots)>() + 1;
        self.groups.capacity() * core::mem::size_of::<Group>()
            + self
                .groups
                .iter()
                .map(|g| {
                    g.map.capacity() * entry
                        + g.map
                            .values()
                            .map(|s| s.rest.capacity() * core::mem::size_of::<usize>())
                            .sum::<usize>()
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests;
