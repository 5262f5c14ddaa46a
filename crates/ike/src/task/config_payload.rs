//! What IKE_AUTH does with Configuration payloads (RFC 7296 2.19, 3.15.4) and with a second
//! IKE SA of one identity (swanctl's `unique`).
//!
//! Responder: a CFG_REQUEST asking for INTERNAL_IP4_ADDRESS / INTERNAL_IP6_ADDRESS is
//! answered from the connection's pools ([`crate::pool::Leases`]) with a CFG_REPLY carrying
//! the address, the pool's DNS servers, subnets (INTERNAL_IP4/6_SUBNET) and, when asked for,
//! split-DNS domains (RFC 8598 INTERNAL_DNS_DOMAIN); the first child's `dynamic` remote
//! selectors become the lease ([`crate::child`]). No address to give: INTERNAL_ADDRESS_FAILURE
//! and no child (3.10.1), and [`Event::PoolExhausted`]. A connection without pools ignores
//! CP payloads, as does a malformed one (the client then gets no address and gives up).
//!
//! Initiator: a connection with `vips` sends a CFG_REQUEST, offers the whole address family
//! as its first child's `dynamic` TSi (the address is not known yet) and takes the
//! CFG_REPLY's addresses as its own ([`Event::VirtualIp`]); none given: the IKE SA is deleted,
//! as strongSwan does.
use crate::authenticator::Refusal as AuthRefusal;
use crate::config::Connection;
use crate::cp::{attr, cfg_type, Attribute, CpRepr};
use crate::event::Event;
use crate::id::Identity;
use crate::ike_sa::{Cx, IkeSa};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::pool::{LeaseError, Unique};
use crate::ts::TrafficSelector;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The uniqueness policy at IKE_AUTH (swanctl `unique`), before the cap of IKE SAs per
/// identity: `Ok(true)` when the identity's other IKE SAs of this connection are to be
/// replaced (their leases move to the new one). `peers`: the identity's other live IKE SAs.
///
/// The cap ([`crate::limits::MAX_IKE_SAS_PER_IDENTITY`], 8) applies unless the old SAs are
/// being replaced: with `never` it is the number of devices one user may have up at once;
/// with `keep` a second is refused before it; with `replace` (and `no` with INITIAL_CONTACT)
/// the old ones go, so the count stays at one.
pub(crate) fn unique(conn: &Connection, ps: &[Payload], peers: usize) -> Result<bool, AuthRefusal> {
    let initial_contact = ps.notify(kind::INITIAL_CONTACT).is_some();
    let replacing = match conn.unique {
        Unique::No => initial_contact,
        Unique::Never => false,
        Unique::Keep if peers > 0 => return Err(AuthRefusal::UniqueKeep),
        Unique::Keep => false,
        Unique::Replace => true,
    };
    if !replacing && peers >= crate::limits::MAX_IKE_SAS_PER_IDENTITY {
        return Err(AuthRefusal::TooManySas);
    }
    Ok(replacing)
}

/// Whether the identity's old IKE SAs, replaced at IKE_AUTH, are each sent a Delete
/// (RFC 7296 1.4.1) before they are forgotten: with `unique = replace`, as strongSwan's
/// "deleting duplicate IKE_SA due to uniqueness policy" does; the old SA may be another
/// device of the user, still running, which is then told at once instead of finding out by
/// its liveness checks. `unique = no` with INITIAL_CONTACT (2.4) replaces silently: the peer
/// asserted it has no other SA with us.
pub(crate) fn replace_tells_the_old(conn: &Connection) -> bool {
    conn.unique == Unique::Replace
}

/// The netmask of a prefix length.
fn v4_mask(len: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0))
}

/// The responder's answer to the initiator's CP payload, if any: `Ok(Some(CFG_REPLY))`
/// with the leases recorded in `sa.vips`, `Ok(None)` when there is nothing to answer, `Err`
/// with the INTERNAL_ADDRESS_FAILURE notify when an address was asked for and none is free.
/// Call after the connection is chosen and the peer authenticated.
pub(crate) fn respond(
    sa: &mut IkeSa,
    cx: &mut Cx,
    idi: &Identity,
    ps: &[Payload],
    replacing: bool,
) -> Result<Option<Payload>, Notify> {
    let conn = sa.conn(cx.cfg);
    if conn.pools.is_empty() {
        return Ok(None);
    }
    let Some(Ok(req)) = CpRepr::find(ps) else {
        return Ok(None);
    };
    if req.cfg_type != cfg_type::REQUEST {
        return Ok(None);
    }
    let holder = sa.our_spi();
    let mut out = Vec::new();
    let mut leased: Vec<(String, IpAddr)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for v6 in [false, true] {
        let Some(wanted) = req.wants(v6) else { continue };
        let names: Vec<&String> = conn
            .pools
            .iter()
            .filter(|n| cx.out.leases.pool(n).is_some_and(|p| p.is_v6() == v6))
            .collect();
        let mut got = None;
        for n in &names {
            match cx.out.leases.acquire(n, idi, holder, wanted, replacing) {
                Ok(a) => {
                    got = Some(((*n).clone(), a));
                    break;
                }
                Err(LeaseError::Exhausted | LeaseError::UnknownPool) => {}
            }
        }
        match got {
            Some(g) => leased.push(g),
            None => failed.extend(names.into_iter().cloned()),
        }
    }
    let conn_name = conn.name.clone();
    if leased.is_empty() {
        if req.wants(false).is_some() || req.wants(true).is_some() {
            cx.out.event(Event::PoolExhausted {
                conn: conn_name,
                identity: idi.clone(),
                pools: failed,
            });
            return Err(Notify::ike(kind::INTERNAL_ADDRESS_FAILURE, &[]));
        }
        return Ok(None);
    }
    let wants_domains = req.attributes.iter().any(|a| a.kind() == attr::INTERNAL_DNS_DOMAIN);
    for (pool, a) in &leased {
        out.push(match a {
            IpAddr::V4(x) => Attribute::Ip4Address(Some(*x)),
            IpAddr::V6(x) => Attribute::Ip6Address(Some((*x, 128))),
        });
        let Some(p) = cx.out.leases.pool(pool) else { continue };
        for d in &p.dns {
            out.push(match d {
                IpAddr::V4(x) => Attribute::Ip4Dns(Some(*x)),
                IpAddr::V6(x) => Attribute::Ip6Dns(Some(*x)),
            });
        }
        for (net, len) in &p.subnets {
            out.push(match net {
                IpAddr::V4(x) => Attribute::Ip4Subnet(Some((*x, v4_mask(*len)))),
                IpAddr::V6(x) => Attribute::Ip6Subnet(Some((*x, *len))),
            });
        }
        if wants_domains {
            for d in &p.dns_domains {
                out.push(Attribute::DnsDomain(Some(d.as_bytes().to_vec())));
            }
        }
    }
    out.truncate(crate::cp::MAX_ATTRIBUTES);
    for (pool, a) in &leased {
        cx.out.event(Event::LeaseAssigned {
            conn: conn_name.clone(),
            pool: pool.clone(),
            identity: idi.clone(),
            address: *a,
            spi_i: sa.spi_i(),
        });
    }
    sa.set_vips(leased.into_iter().map(|(_, a)| a).collect());
    Ok(Some(
        CpRepr {
            cfg_type: cfg_type::REPLY,
            attributes: out,
        }
        .to_payload(),
    ))
}

/// The initiator's CFG_REQUEST for the connection's `vips`, if it has any: an address
/// attribute per entry (empty for `0.0.0.0` / `::`) and a DNS attribute per family.
pub(crate) fn request(conn: &Connection) -> Option<Payload> {
    if conn.vips.is_empty() {
        return None;
    }
    let mut a = Vec::new();
    for v in conn.vips.iter().take(8) {
        a.push(match v {
            IpAddr::V4(x) => Attribute::Ip4Address((!x.is_unspecified()).then_some(*x)),
            IpAddr::V6(x) => Attribute::Ip6Address((!x.is_unspecified()).then_some((*x, 128))),
        });
    }
    if conn.vips.iter().any(IpAddr::is_ipv4) {
        a.push(Attribute::Ip4Dns(None));
    }
    if conn.vips.iter().any(IpAddr::is_ipv6) {
        a.push(Attribute::Ip6Dns(None));
    }
    Some(
        CpRepr {
            cfg_type: cfg_type::REQUEST,
            attributes: a,
        }
        .to_payload(),
    )
}

/// The initiator's TSi for a `dynamic` local side with `vips`: every address of each family
/// asked for (strongSwan's 0.0.0.0/0 and ::/0), narrowed by the responder to the lease.
pub(crate) fn initiator_ts(conn: &Connection) -> Option<Vec<TrafficSelector>> {
    if conn.vips.is_empty() {
        return None;
    }
    let mut v = Vec::new();
    for six in [false, true] {
        if conn.vips.iter().any(|a| a.is_ipv6() == six) {
            let (start, end): (IpAddr, IpAddr) = if six {
                (Ipv6Addr::UNSPECIFIED.into(), Ipv6Addr::from(u128::MAX).into())
            } else {
                (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::BROADCAST.into())
            };
            let mut t = TrafficSelector::host(start);
            t.end = end;
            v.push(t);
        }
    }
    Some(v)
}

/// The initiator reads the CFG_REPLY of the IKE_AUTH response: `true` when the IKE SA can
/// keep going (no `vips`, or addresses given), `false` when it asked and got none.
pub(crate) fn process_reply(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> bool {
    let conn = sa.conn(cx.cfg);
    if conn.vips.is_empty() {
        return true;
    }
    let reply = match CpRepr::find(ps) {
        Some(Ok(r)) if r.cfg_type == cfg_type::REPLY => r,
        _ => CpRepr {
            cfg_type: cfg_type::REPLY,
            attributes: Vec::new(),
        },
    };
    let addresses = reply.addresses();
    cx.out.event(Event::VirtualIp {
        conn: conn.name.clone(),
        spi_i: sa.spi_i(),
        addresses: addresses.clone(),
        dns: reply.dns(),
    });
    let ok = !addresses.is_empty();
    sa.set_vips(addresses);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(v4_mask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(v4_mask(16), Ipv4Addr::new(255, 255, 0, 0));
        assert_eq!(v4_mask(32), Ipv4Addr::BROADCAST);
    }
}
