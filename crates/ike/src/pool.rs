//! Address pools and their leases (swanctl's `pools`; RFC 7296 3.15.4 leaves how the
//! responder picks an address to it): a pool is a prefix or a range of IPv4 or IPv6
//! addresses with the attributes sent with a lease (DNS servers, the subnets behind the
//! gateway, split-DNS domains). [`Leases`] is the sans-IO allocator: the same identity
//! reconnecting gets the address it had (its lease is kept "offline" after its IKE SA goes,
//! as strongSwan's mem pool does), a specific address asked for is honoured only if it is in
//! the pool and free, and a full pool takes back the offline lease released longest ago
//! before it refuses. The network and broadcast addresses of an IPv4 prefix are never leased.
use crate::error::Error;
use crate::id::Identity;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Leases one pool keeps, online and offline: past it an offline one is taken back (or the
/// pool refuses), so a /64 pool cannot grow without bound.
pub const MAX_LEASES_PER_POOL: usize = 65_536;

/// What a new IKE SA of an identity that has one already does (swanctl's `unique`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unique {
    /// The old ones are replaced only when the new IKE_AUTH carries INITIAL_CONTACT (2.4);
    /// swanctl's `no`, its default.
    #[default]
    No,
    /// Never replaced, INITIAL_CONTACT ignored: several devices of one user, each its own
    /// IKE SA and lease (up to [`crate::limits::MAX_IKE_SAS_PER_IDENTITY`]).
    Never,
    /// The new one is refused (AUTHENTICATION_FAILED, as strongSwan answers).
    Keep,
    /// The old ones are deleted, the new one takes over their lease.
    Replace,
}

/// A pool (a swanctl `pools` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Name, as connections name it in `pools`.
    pub name: String,
    /// The addresses leased, first and last included.
    pub first: IpAddr,
    /// The last address leased.
    pub last: IpAddr,
    /// DNS servers (INTERNAL_IP4_DNS / INTERNAL_IP6_DNS).
    pub dns: Vec<IpAddr>,
    /// Networks behind the gateway (INTERNAL_IP4_SUBNET / INTERNAL_IP6_SUBNET): prefix and
    /// length. macOS and iOS install routes from them.
    pub subnets: Vec<(IpAddr, u8)>,
    /// Split-DNS domains (INTERNAL_DNS_DOMAIN, RFC 8598).
    pub dns_domains: Vec<String>,
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
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

/// Parses `a/len` into (address, length), the address masked to the prefix.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), Error> {
    let (a, l) = s
        .trim()
        .split_once('/')
        .ok_or(Error::BadSyntax("a prefix is ADDRESS/LENGTH"))?;
    let a: IpAddr = a.trim().parse().map_err(|_| Error::BadSyntax("not an IP address"))?;
    let l: u8 = l.trim().parse().map_err(|_| Error::BadSyntax("not a prefix length"))?;
    let bits = if a.is_ipv4() { 32 } else { 128 };
    if l > bits {
        return Err(Error::BadSyntax("prefix length too long"));
    }
    let mask = if l == 0 {
        0
    } else {
        u128::MAX << (128 - l) >> (128 - bits)
    };
    Ok((from_u128(to_u128(a) & mask, a.is_ipv6()), l))
}

impl PoolConfig {
    /// A pool from swanctl's `addrs`: a prefix (`10.3.0.0/24`, `fd00:3::/120`) or a range
    /// (`10.3.0.10-10.3.0.200`). An IPv4 prefix of /30 or shorter leaves out its network and
    /// broadcast addresses.
    pub fn new(name: &str, addrs: &str) -> Result<Self, Error> {
        let (first, last) = if let Some((a, b)) = addrs.split_once('-') {
            let a: IpAddr = a.trim().parse().map_err(|_| Error::BadSyntax("not an IP address"))?;
            let b: IpAddr = b.trim().parse().map_err(|_| Error::BadSyntax("not an IP address"))?;
            if a.is_ipv4() != b.is_ipv4() || to_u128(a) > to_u128(b) {
                return Err(Error::BadSyntax("a range is FIRST-LAST of one family, FIRST <= LAST"));
            }
            (a, b)
        } else {
            let (a, l) = parse_prefix(addrs)?;
            let bits = if a.is_ipv4() { 32 } else { 128 };
            let start = to_u128(a);
            let host_bits = bits - u32::from(l);
            let end = if host_bits == 0 {
                start
            } else {
                start | (u128::MAX >> (128 - host_bits))
            };
            if a.is_ipv4() && host_bits >= 2 {
                (from_u128(start + 1, false), from_u128(end - 1, false))
            } else {
                (a, from_u128(end, a.is_ipv6()))
            }
        };
        Ok(PoolConfig {
            name: name.into(),
            first,
            last,
            dns: Vec::new(),
            subnets: Vec::new(),
            dns_domains: Vec::new(),
        })
    }

    /// IPv6 addresses.
    pub fn is_v6(&self) -> bool {
        self.first.is_ipv6()
    }

    /// How many addresses it leases.
    pub fn size(&self) -> u128 {
        (to_u128(self.last) - to_u128(self.first)).saturating_add(1)
    }

    /// Whether `a` is one of its addresses.
    pub fn contains(&self, a: IpAddr) -> bool {
        a.is_ipv6() == self.is_v6() && (to_u128(self.first)..=to_u128(self.last)).contains(&to_u128(a))
    }
}

/// One lease.
#[derive(Debug, Clone)]
struct Entry {
    /// The identity it belongs to.
    owner: Identity,
    /// Our SPI of the IKE SA holding it; None: offline (kept for the owner).
    holder: Option<u64>,
    /// When it went offline (a counter): the oldest is taken back first.
    since: u64,
}

/// The leases of one pool.
#[derive(Debug, Clone)]
struct PoolLeases {
    cfg: PoolConfig,
    by_addr: BTreeMap<u128, Entry>,
}

/// Why no address was leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// No pool of that name.
    UnknownPool,
    /// Every address is online (INTERNAL_ADDRESS_FAILURE, RFC 7296 3.10.1).
    Exhausted,
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::UnknownPool => f.write_str("no such pool"),
            LeaseError::Exhausted => f.write_str("pool exhausted"),
        }
    }
}

/// A lease given back (its IKE SA went).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// Whose it was (and stays, offline).
    pub identity: Identity,
    /// Pool.
    pub pool: String,
    /// Address.
    pub address: IpAddr,
}

/// One pool's numbers, for metrics and `ipsec ike pools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// Name.
    pub name: String,
    /// Addresses it leases.
    pub size: u128,
    /// Leases held by an IKE SA.
    pub online: usize,
    /// Leases kept for an identity whose IKE SA is gone.
    pub offline: usize,
}

/// The leases of every pool.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    pools: Vec<PoolLeases>,
    clock: u64,
}

impl Leases {
    /// No leases yet, for these pools.
    pub fn new(pools: &[PoolConfig]) -> Self {
        Leases {
            pools: pools
                .iter()
                .map(|p| PoolLeases {
                    cfg: p.clone(),
                    by_addr: BTreeMap::new(),
                })
                .collect(),
            clock: 0,
        }
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.cfg.name == name).map(|p| &p.cfg)
    }

    /// An address of pool `pool` for `owner`, held by the IKE SA `holder` (our SPI).
    /// `requested`: the address the client asked for (honoured if in the pool and free, or
    /// offline and its own). `take_over`: the owner's older IKE SAs are being replaced
    /// (INITIAL_CONTACT, `unique = replace`): an online lease of the owner moves to `holder`.
    pub fn acquire(
        &mut self,
        pool: &str,
        owner: &Identity,
        holder: u64,
        requested: Option<IpAddr>,
        take_over: bool,
    ) -> Result<IpAddr, LeaseError> {
        let p = self
            .pools
            .iter_mut()
            .find(|p| p.cfg.name == pool)
            .ok_or(LeaseError::UnknownPool)?;
        let v6 = p.cfg.is_v6();
        let req = requested.filter(|a| p.cfg.contains(*a)).map(to_u128);
        // Already held by this SA (a second request on it): the same address.
        if let Some((a, _)) = p.by_addr.iter().find(|(_, e)| e.holder == Some(holder)) {
            return Ok(from_u128(*a, v6));
        }
        // The owner's own lease: online ones only when its old SAs are being replaced.
        let mine = |e: &Entry| e.owner == *owner && (e.holder.is_none() || take_over);
        let own = req
            .filter(|r| p.by_addr.get(r).is_some_and(mine))
            .or_else(|| p.by_addr.iter().find(|(_, e)| mine(e)).map(|(a, _)| *a));
        if let Some(a) = own {
            if let Some(e) = p.by_addr.get_mut(&a) {
                e.holder = Some(holder);
            }
            return Ok(from_u128(a, v6));
        }
        let fresh = |_: u128| Entry {
            owner: owner.clone(),
            holder: Some(holder),
            since: 0,
        };
        let room = p.by_addr.len() < MAX_LEASES_PER_POOL;
        if let Some(r) = req.filter(|r| room && !p.by_addr.contains_key(r)) {
            p.by_addr.insert(r, fresh(r));
            return Ok(from_u128(r, v6));
        }
        // The first address no lease has: the first gap in the ordered keys.
        let (first, last) = (to_u128(p.cfg.first), to_u128(p.cfg.last));
        let mut cand = first;
        for k in p.by_addr.keys() {
            if *k != cand {
                break;
            }
            cand = cand.wrapping_add(1);
        }
        if room && cand <= last && cand >= first {
            p.by_addr.insert(cand, fresh(cand));
            return Ok(from_u128(cand, v6));
        }
        // Full: the offline lease released longest ago changes owner.
        let oldest = p
            .by_addr
            .iter()
            .filter(|(_, e)| e.holder.is_none())
            .min_by_key(|(_, e)| e.since)
            .map(|(a, _)| *a);
        match oldest {
            Some(a) => {
                p.by_addr.insert(a, fresh(a));
                Ok(from_u128(a, v6))
            }
            None => Err(LeaseError::Exhausted),
        }
    }

    /// The IKE SA `holder` is gone: its leases go offline (kept for their owner).
    pub fn release(&mut self, holder: u64) -> Vec<Released> {
        let mut out = Vec::new();
        for p in &mut self.pools {
            for (a, e) in p.by_addr.iter_mut().filter(|(_, e)| e.holder == Some(holder)) {
                self.clock += 1;
                e.holder = None;
                e.since = self.clock;
                out.push(Released {
                    identity: e.owner.clone(),
                    pool: p.cfg.name.clone(),
                    address: from_u128(*a, p.cfg.is_v6()),
                });
            }
        }
        out
    }

    /// The IKE SA `old` was rekeyed into `new` (RFC 7296 2.18): its leases move with it.
    pub fn rekeyed(&mut self, old: u64, new: u64) {
        for p in &mut self.pools {
            for e in p.by_addr.values_mut().filter(|e| e.holder == Some(old)) {
                e.holder = Some(new);
            }
        }
    }

    /// Every pool's numbers.
    pub fn stats(&self) -> Vec<PoolStats> {
        self.pools
            .iter()
            .map(|p| {
                let online = p.by_addr.values().filter(|e| e.holder.is_some()).count();
                PoolStats {
                    name: p.cfg.name.clone(),
                    size: p.cfg.size(),
                    online,
                    offline: p.by_addr.len() - online,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Identity {
        Identity::from_str_config(s).unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_and_ranges() {
        let p = PoolConfig::new("a", "10.3.0.0/24").unwrap();
        assert_eq!((p.first, p.last, p.size()), (ip("10.3.0.1"), ip("10.3.0.254"), 254));
        // The host part of the prefix is masked off.
        let p = PoolConfig::new("a", "10.3.0.77/30").unwrap();
        assert_eq!((p.first, p.last), (ip("10.3.0.77"), ip("10.3.0.78")));
        let p = PoolConfig::new("a", "10.3.0.7/31").unwrap();
        assert_eq!((p.first, p.last), (ip("10.3.0.6"), ip("10.3.0.7")));
        let p = PoolConfig::new("a", "10.3.0.7/32").unwrap();
        assert_eq!((p.first, p.last, p.size()), (ip("10.3.0.7"), ip("10.3.0.7"), 1));
        let p = PoolConfig::new("a", "10.3.0.10 - 10.3.0.200").unwrap();
        assert_eq!((p.first, p.last, p.size()), (ip("10.3.0.10"), ip("10.3.0.200"), 191));
        assert!(p.contains(ip("10.3.0.10")) && p.contains(ip("10.3.0.200")));
        assert!(!p.contains(ip("10.3.0.9")) && !p.contains(ip("10.3.0.201")) && !p.contains(ip("::1")));
        // IPv6: no address left out.
        let p = PoolConfig::new("a", "fd00:3::/120").unwrap();
        assert_eq!((p.first, p.last, p.size()), (ip("fd00:3::"), ip("fd00:3::ff"), 256));
        let p = PoolConfig::new("a", "fd00::/64").unwrap();
        assert_eq!(p.size(), 1 << 64);
        let p = PoolConfig::new("a", "0.0.0.0/0").unwrap();
        assert_eq!((p.first, p.last), (ip("0.0.0.1"), ip("255.255.255.254")));
        for bad in [
            "10.3.0.0",
            "10.3.0.0/33",
            "10.3.0.9-10.3.0.1",
            "10.0.0.1-::2",
            "x/24",
            "::/129",
        ] {
            assert!(PoolConfig::new("a", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_same_identity_gets_the_same_address_back() {
        let mut l = Leases::new(&[PoolConfig::new("p", "10.3.0.0/29").unwrap()]);
        let (alice, bob) = (id("alice@example.org"), id("bob@example.org"));
        assert_eq!(l.acquire("p", &alice, 1, None, false), Ok(ip("10.3.0.1")));
        assert_eq!(l.acquire("p", &bob, 2, None, false), Ok(ip("10.3.0.2")));
        // Asked again on the same SA: the same one.
        assert_eq!(l.acquire("p", &alice, 1, None, false), Ok(ip("10.3.0.1")));
        // A second device of alice while the first is up (unique = never): its own.
        assert_eq!(l.acquire("p", &alice, 3, None, false), Ok(ip("10.3.0.3")));
        assert_eq!(
            l.release(1),
            alloc::vec![Released {
                identity: alice.clone(),
                pool: "p".into(),
                address: ip("10.3.0.1")
            }]
        );
        assert_eq!(l.release(1), alloc::vec![]);
        // A newcomer does not get alice's offline lease while others are free.
        assert_eq!(
            l.acquire("p", &id("carol@example.org"), 4, None, false),
            Ok(ip("10.3.0.4"))
        );
        // Alice reconnects: her address.
        assert_eq!(l.acquire("p", &alice, 5, None, false), Ok(ip("10.3.0.1")));
        // Replacing (INITIAL_CONTACT): alice's online lease moves to the new SA.
        assert_eq!(l.acquire("p", &bob, 6, None, true), Ok(ip("10.3.0.2")));
        assert_eq!(l.release(2), alloc::vec![]);
        // A rekey moves the lease; releasing the old SPI then frees nothing.
        l.rekeyed(6, 7);
        assert!(l.release(6).is_empty());
        assert_eq!(l.release(7).len(), 1);
        let s = &l.stats()[0];
        assert_eq!((s.size, s.online, s.offline), (6, 3, 1));
    }

    #[test]
    fn a_requested_address_only_if_in_the_pool_and_free() {
        let mut l = Leases::new(&[PoolConfig::new("p", "10.3.0.10-10.3.0.20").unwrap()]);
        let (a, b) = (id("a@x"), id("b@x"));
        assert_eq!(l.acquire("p", &a, 1, Some(ip("10.3.0.15")), false), Ok(ip("10.3.0.15")));
        // Taken: b gets the first free one instead.
        assert_eq!(l.acquire("p", &b, 2, Some(ip("10.3.0.15")), false), Ok(ip("10.3.0.10")));
        // Outside the pool, or of the other family: ignored.
        assert_eq!(l.acquire("p", &b, 3, Some(ip("10.3.0.99")), false), Ok(ip("10.3.0.11")));
        assert_eq!(l.acquire("p", &b, 4, Some(ip("fd00::1")), false), Ok(ip("10.3.0.12")));
        // Offline and someone else's: not given by asking while free ones remain.
        l.release(1);
        assert_eq!(l.acquire("p", &b, 5, Some(ip("10.3.0.15")), false), Ok(ip("10.3.0.13")));
        assert_eq!(l.acquire("p", &a, 6, Some(ip("10.3.0.15")), false), Ok(ip("10.3.0.15")));
        assert_eq!(l.acquire("nope", &a, 7, None, false), Err(LeaseError::UnknownPool));
    }

    #[test]
    fn a_full_pool_takes_back_the_oldest_offline_lease_then_refuses() {
        let mut l = Leases::new(&[PoolConfig::new("p", "10.3.0.0/30").unwrap()]);
        let ids: Vec<Identity> = (0..4).map(|i| id(&alloc::format!("u{i}@x"))).collect();
        assert_eq!(l.acquire("p", &ids[0], 1, None, false), Ok(ip("10.3.0.1")));
        assert_eq!(l.acquire("p", &ids[1], 2, None, false), Ok(ip("10.3.0.2")));
        // .0 and .3 (network, broadcast) never.
        assert_eq!(l.acquire("p", &ids[2], 3, None, false), Err(LeaseError::Exhausted));
        l.release(2);
        l.release(1);
        // u1's went offline first: it is the one taken back.
        assert_eq!(l.acquire("p", &ids[2], 3, None, false), Ok(ip("10.3.0.2")));
        assert_eq!(l.acquire("p", &ids[3], 4, None, false), Ok(ip("10.3.0.1")));
        assert_eq!(l.acquire("p", &ids[0], 5, None, false), Err(LeaseError::Exhausted));
        let s = &l.stats()[0];
        assert_eq!((s.size, s.online, s.offline), (2, 2, 0));
    }

    #[test]
    fn ipv6_pools_and_the_top_of_the_address_space() {
        let mut l = Leases::new(&[
            PoolConfig::new("v6", "fd00:3::/126").unwrap(),
            PoolConfig::new("top", "255.255.255.254-255.255.255.255").unwrap(),
        ]);
        let a = id("a@x");
        let got: Vec<_> = (0..4)
            .map(|i| l.acquire("v6", &id(&alloc::format!("{i}@x")), i, None, false))
            .collect();
        assert_eq!(
            got,
            alloc::vec![
                Ok(ip("fd00:3::")),
                Ok(ip("fd00:3::1")),
                Ok(ip("fd00:3::2")),
                Ok(ip("fd00:3::3"))
            ]
        );
        assert_eq!(l.acquire("v6", &a, 9, None, false), Err(LeaseError::Exhausted));
        assert_eq!(l.acquire("top", &a, 9, None, false), Ok(ip("255.255.255.254")));
        assert_eq!(l.acquire("top", &id("b@x"), 10, None, false), Ok(ip("255.255.255.255")));
        assert_eq!(
            l.acquire("top", &id("c@x"), 11, None, false),
            Err(LeaseError::Exhausted)
        );
    }
}
