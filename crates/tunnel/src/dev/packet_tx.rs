//! The sending side of raw ESP, AH and IPComp through an `AF_PACKET` socket: whole IP packets
//! as the engine built them (header checksum and identification included) handed to the
//! interface the route to the peer goes out of, with the next hop's link-layer address: no
//! route lookup, no netfilter hooks, no neighbour output per packet, one `sendmmsg` per
//! batch. The interface's qdisc and the packet taps (tcpdump) still see every packet;
//! `PACKET_QDISC_BYPASS` (`--qdisc-bypass`) skips them too, for about 10% more on the veth
//! benchmark (docs/performance.md, "Raw ESP", has the numbers).
//!
//! The next hop comes from the kernel, per peer, at most once a second ([`REFRESH`]): the route
//! (`RTM_GETROUTE` for the peer's address: the output interface and the gateway, policy
//! routing included) and the neighbour entry of the next hop on that interface
//! (`RTM_GETNEIGH`, Linux 5.0 and later). While there is no usable entry (none yet, incomplete,
//! failed; a route that is not plain unicast; an interface without 6-byte link-layer
//! addresses, such as the loopback or a TUN device) the packets go through the raw socket
//! ([`RawTx`]), whose kernel path resolves the neighbour; so does the first batch after each
//! refresh that found the entry no longer confirmed (stale, delay, probe), so the kernel
//! re-confirms it (this sender's packets bypass the neighbour code and never would) and a
//! changed link-layer address is picked up within seconds.
//!
//! What bypassing the stack means for the operator: the outer packets skip the netfilter
//! OUTPUT and POSTROUTING hooks (no SNAT or filtering of tunneld's ESP there; `--no-af-packet`
//! sends through the raw socket again); with `--qdisc-bypass` also the interface's qdisc and
//! every packet socket on the host (a capture there does not see tunneld's outgoing packets).
//!
//! `unsafe` here: the zeroed C structs and the `sendmmsg` call, with `// SAFETY:` comments.
//! The netlink messages are built and parsed in safe code; a reply that does not parse is
//! treated as no next hop (the raw socket sends).
#![allow(unsafe_code)]

use crate::dataplane::packet::BATCH;
use crate::dev::raw::RawTx;
use crate::dev::rtnetlink::{self, NLMSG_ERROR, NLM_F_REQUEST};
use crate::dev::sys::set_int_option;
use crate::dev::underlay::UnderlayTx;
use ipsec_engine::Route;
use socket2::{Domain, Socket, Type};
use std::io::{self, Read};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a next hop is used before the kernel is asked again.
pub const REFRESH: Duration = Duration::from_secs(1);

// rtnetlink (linux/netlink.h, linux/rtnetlink.h, linux/neighbour.h).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTN_UNICAST: u8 = 1;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_DELAY: u16 = 0x08;
const NUD_PROBE: u16 = 0x10;
const NUD_PERMANENT: u16 = 0x80;

/// The next hop of one destination, as the kernel's tables had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// The output interface.
    pub ifindex: u32,
    /// The next hop's link-layer (Ethernet) address.
    pub mac: [u8; 6],
    /// Whether the neighbour entry is confirmed (reachable or permanent); if not, it is still
    /// usable but the kernel should be made to confirm it.
    pub confirmed: bool,
}

fn nl_message(kind: u16, seq: u32, body: &[u8], attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let attrs: Vec<u8> = attrs.iter().flat_map(|(t, v)| rtnetlink::nla(*t, v)).collect();
    rtnetlink::message(kind, NLM_F_REQUEST, seq, body, &attrs)
}

/// A route request for `dst`: `rtmsg` with the family and a full-length destination.
pub fn route_request(dst: IpAddr, seq: u32) -> Vec<u8> {
    let (family, bits, octets) = family_of(dst);
    let mut body = [0u8; 12];
    body[0] = family;
    body[1] = bits;
    nl_message(RTM_GETROUTE, seq, &body, &[(RTA_DST, &octets)])
}

/// A neighbour request for `addr` on `ifindex`: `ndmsg` and the address.
pub fn neigh_request(addr: IpAddr, ifindex: u32, seq: u32) -> Vec<u8> {
    let (family, _, octets) = family_of(addr);
    let mut body = [0u8; 12];
    body[0] = family;
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    nl_message(RTM_GETNEIGH, seq, &body, &[(NDA_DST, &octets)])
}

fn family_of(a: IpAddr) -> (u8, u8, Vec<u8>) {
    match a {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128, a.octets().to_vec()),
    }
}

/// Why a reply gave no next hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlError {
    /// Shorter than its headers say, or a length that does not add up.
    Malformed,
    /// The kernel's answer was an error (its errno).
    Kernel(i32),
    /// Another message type than the one asked for.
    Unexpected(u16),
    /// A route that is not plain unicast (local, blackhole, ...), or without an output
    /// interface.
    NotUnicast,
    /// A neighbour entry without a 6-byte link-layer address.
    NoLinkAddress,
}

/// The one message of a reply, checked: its type and body (after the 16-byte header).
pub(crate) fn nl_body(reply: &[u8], want: u16) -> Result<&[u8], NlError> {
    let head = reply.get(..16).ok_or(NlError::Malformed)?;
    let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let kind = u16::from_ne_bytes([head[4], head[5]]);
    let m = reply
        .get(16..len.max(16))
        .filter(|_| len <= reply.len())
        .ok_or(NlError::Malformed)?;
    if kind == NLMSG_ERROR {
        let e = i32::from_ne_bytes(
            m.get(0..4)
                .ok_or(NlError::Malformed)?
                .try_into()
                .map_err(|_| NlError::Malformed)?,
        );
        return Err(NlError::Kernel(-e));
    }
    if kind != want {
        return Err(NlError::Unexpected(kind));
    }
    Ok(m)
}

/// The attributes after a fixed `skip`-byte header: `(type, value)` pairs.
pub(crate) fn attrs(body: &[u8], skip: usize) -> Result<Vec<(u16, &[u8])>, NlError> {
    let mut out = Vec::new();
    let mut at = skip;
    while at + 4 <= body.len() {
        let len = u16::from_ne_bytes([body[at], body[at + 1]]) as usize;
        let kind = u16::from_ne_bytes([body[at + 2], body[at + 3]]) & 0x3fff;
        if len < 4 {
            return Err(NlError::Malformed);
        }
        let v = body.get(at + 4..at + len).ok_or(NlError::Malformed)?;
        out.push((kind, v));
        at += len.next_multiple_of(4);
    }
    Ok(out)
}

pub(crate) fn addr_of(v: &[u8]) -> Option<IpAddr> {
    match v.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
        _ => None,
    }
}

/// The output interface and the next hop (the gateway, or `dst` itself on a link) of a
/// route reply for `dst`.
pub fn parse_route(reply: &[u8], dst: IpAddr) -> Result<(u32, IpAddr), NlError> {
    let body = nl_body(reply, RTM_NEWROUTE)?;
    if body.len() < 12 {
        return Err(NlError::Malformed);
    }
    if body[7] != RTN_UNICAST {
        return Err(NlError::NotUnicast);
    }
    let (mut oif, mut via) = (None, None);
    for (kind, v) in attrs(body, 12)? {
        match kind {
            RTA_OIF => oif = <[u8; 4]>::try_from(v).ok().map(u32::from_ne_bytes),
            RTA_GATEWAY => via = addr_of(v),
            _ => {}
        }
    }
    let oif = oif.filter(|&i| i != 0).ok_or(NlError::NotUnicast)?;
    Ok((oif, via.unwrap_or(dst)))
}

/// The link-layer address and whether the entry is confirmed, of a neighbour reply; entries
/// in no state that can send (incomplete, failed, none) are [`NlError::NoLinkAddress`].
pub fn parse_neigh(reply: &[u8]) -> Result<([u8; 6], bool), NlError> {
    let body = nl_body(reply, RTM_NEWNEIGH)?;
    if body.len() < 12 {
        return Err(NlError::Malformed);
    }
    let state = u16::from_ne_bytes([body[8], body[9]]);
    let usable = NUD_REACHABLE | NUD_PERMANENT | NUD_STALE | NUD_DELAY | NUD_PROBE;
    if state & usable == 0 {
        return Err(NlError::NoLinkAddress);
    }
    let mac = attrs(body, 12)?
        .into_iter()
        .find(|(k, _)| *k == NDA_LLADDR)
        .and_then(|(_, v)| <[u8; 6]>::try_from(v).ok())
        .ok_or(NlError::NoLinkAddress)?;
    Ok((mac, state & (NUD_REACHABLE | NUD_PERMANENT) != 0))
}

/// Asks the kernel, over a NETLINK_ROUTE socket, for `dst`'s next hop.
fn resolve(nl: &Socket, dst: IpAddr, seq: u32) -> io::Result<Result<NextHop, NlError>> {
    let mut buf = vec![0u8; 8192];
    nl.send(&route_request(dst, seq))?;
    let n = (&*nl).read(&mut buf)?;
    let (ifindex, hop) = match parse_route(&buf[..n], dst) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    nl.send(&neigh_request(hop, ifindex, seq.wrapping_add(1)))?;
    let n = (&*nl).read(&mut buf)?;
    Ok(parse_neigh(&buf[..n]).map(|(mac, confirmed)| NextHop {
        ifindex,
        mac,
        confirmed,
    }))
}

/// One destination's next hop, and when it was looked up.
struct Hop {
    dst: IpAddr,
    via: Option<NextHop>,
    checked: Instant,
}

/// An `AF_PACKET` sender of one IP version ([`crate::dev::packet_tx`]), with the raw socket of
/// that version for what it cannot send itself. One per worker (nothing shared between
/// the sending threads but the kernel's tables).
pub struct PacketTx {
    sock: Socket,
    nl: Socket,
    v6: bool,
    fallback: RawTx,
    hops: Mutex<(Vec<Hop>, u32)>,
}

impl PacketTx {
    /// Opens the IPv4 (`v6` false) or IPv6 sender; with `bypass`, `PACKET_QDISC_BYPASS`.
    /// Needs CAP_NET_RAW.
    pub fn open(v6: bool, bypass: bool) -> io::Result<PacketTx> {
        // Protocol 0: it receives nothing.
        let sock = Socket::new(Domain::PACKET, Type::DGRAM, Some(0.into()))?;
        if bypass {
            set_int_option(sock.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
        }
        let nl = rtnetlink::socket(Duration::from_millis(200))?;
        let fallback = if v6 { RawTx::open_v6()? } else { RawTx::open()? };
        Ok(PacketTx {
            sock,
            nl,
            v6,
            fallback,
            hops: Mutex::new((Vec::new(), 1)),
        })
    }

    /// `dst`'s next hop (looked up again when older than [`REFRESH`]), and whether this batch
    /// should go through the raw socket to make the kernel confirm an unconfirmed entry.
    fn next_hop(&self, dst: IpAddr) -> (Option<NextHop>, bool) {
        let mut g = self.hops.lock().unwrap_or_else(|p| p.into_inner());
        let (hops, seq) = &mut *g;
        let now = Instant::now();
        if let Some(h) = hops.iter().find(|h| h.dst == dst) {
            if now.duration_since(h.checked) < REFRESH {
                return (h.via, false);
            }
        }
        *seq = seq.wrapping_add(2);
        let via = match resolve(&self.nl, dst, *seq) {
            Ok(Ok(h)) => Some(h),
            Ok(Err(e)) => {
                tracing::debug!("next hop of {dst}: {e:?}: sending through the raw socket");
                None
            }
            Err(e) => {
                tracing::debug!("next hop of {dst}: netlink: {e}: sending through the raw socket");
                None
            }
        };
        if let Some(h) = hops.iter_mut().find(|h| h.dst == dst) {
            h.via = via;
            h.checked = now;
        } else if hops.len() < 1024 {
            // Bounded: one entry per destination the sealed packets go to, which are the
            // configured peers (or the SAs' tunnel ends when none are configured).
            hops.push(Hop { dst, via, checked: now });
        }
        (via, via.is_some_and(|h| !h.confirmed))
    }

    /// Sends `packets` (all to one destination) to `hop` with one sendmmsg(2).
    fn send_via(&self, packets: &[&[u8]], hop: NextHop) -> io::Result<usize> {
        let n = packets.len().min(BATCH);
        // SAFETY: sockaddr_ll, iovec and mmsghdr are plain C structs for which all-zero bytes
        // (null pointers, zero lengths) are valid values.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        let ethertype = if self.v6 { libc::ETH_P_IPV6 } else { libc::ETH_P_IP };
        sll.sll_protocol = (ethertype as u16).to_be();
        sll.sll_ifindex = hop.ifindex as libc::c_int;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&hop.mac);
        // SAFETY: as above.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            iov[i].iov_base = packets[i].as_ptr() as *mut libc::c_void;
            iov[i].iov_len = packets[i].len();
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
            hdrs[i].msg_hdr.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
            hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        }
        // SAFETY: the first `n` headers each point at one iovec over a live, borrowed packet
        // (only read by a send) and at `sll` with its true length; `iov`, `hdrs`, `sll` and
        // `packets` outlive the call, which writes only the headers' `msg_len`.
        let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), n as libc::c_uint, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok((r as usize).max(1))
        }
    }
}

impl UnderlayTx for PacketTx {
    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()> {
        self.send_batch(&[packet], std::slice::from_ref(route)).map(drop)
    }

    fn send_batch(&self, packets: &[&[u8]], routes: &[Route]) -> io::Result<usize> {
        let Some(first) = routes.first().map(|r| r.to) else {
            return Ok(0);
        };
        if first.is_ipv6() != self.v6 {
            // The raw socket says why (a destination of the other version).
            return self.fallback.send_batch(packets, routes);
        }
        let run = packets.len().min(routes.len()).min(BATCH);
        let run = routes[..run].iter().take_while(|r| r.to == first).count();
        match self.next_hop(first) {
            (Some(hop), false) => self.send_via(&packets[..run], hop),
            _ => self.fallback.send_batch(&packets[..run], &routes[..run]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A reply as the kernel sends it: header, fixed body, attributes.
    fn reply(kind: u16, body: &[u8], attrs: &[(u16, &[u8])]) -> Vec<u8> {
        nl_message(kind, 7, body, attrs)
    }

    #[test]
    fn requests_have_the_rtnetlink_layout() {
        let r = route_request(IpAddr::V4(Ipv4Addr::new(10, 98, 0, 2)), 9);
        assert_eq!(r.len(), 16 + 12 + 8);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETROUTE);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), NLM_F_REQUEST);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().unwrap()), 9);
        assert_eq!((r[16], r[17]), (libc::AF_INET as u8, 32));
        assert_eq!(&r[28..36], &[8, 0, 1, 0, 10, 98, 0, 2][..]);
        let n = neigh_request(IpAddr::V6(Ipv6Addr::LOCALHOST), 3, 1);
        assert_eq!(n.len(), 16 + 12 + 20);
        assert_eq!(u16::from_ne_bytes([n[4], n[5]]), RTM_GETNEIGH);
        assert_eq!(n[16], libc::AF_INET6 as u8);
        assert_eq!(u32::from_ne_bytes(n[20..24].try_into().unwrap()), 3);
        assert_eq!(u16::from_ne_bytes([n[28], n[29]]), 20);
    }

    #[test]
    fn route_replies_give_the_interface_and_next_hop() {
        let dst = IpAddr::V4(Ipv4Addr::new(10, 98, 0, 2));
        let mut rt = [0u8; 12];
        rt[0] = libc::AF_INET as u8;
        rt[7] = RTN_UNICAST;
        let on_link = reply(
            RTM_NEWROUTE,
            &rt,
            &[(RTA_DST, &[10, 98, 0, 2]), (RTA_OIF, &5u32.to_ne_bytes())],
        );
        assert_eq!(parse_route(&on_link, dst), Ok((5, dst)));
        let gw = reply(
            RTM_NEWROUTE,
            &rt,
            &[(RTA_OIF, &2u32.to_ne_bytes()), (RTA_GATEWAY, &[10, 0, 0, 1])],
        );
        assert_eq!(parse_route(&gw, dst), Ok((2, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))));
        let mut local = rt;
        local[7] = 2; // RTN_LOCAL
        assert_eq!(
            parse_route(&reply(RTM_NEWROUTE, &local, &[(RTA_OIF, &1u32.to_ne_bytes())]), dst),
            Err(NlError::NotUnicast)
        );
        assert_eq!(
            parse_route(&reply(RTM_NEWROUTE, &rt, &[]), dst),
            Err(NlError::NotUnicast)
        );
        let err = reply(NLMSG_ERROR, &(-libc::ENETUNREACH).to_ne_bytes(), &[]);
        assert_eq!(parse_route(&err, dst), Err(NlError::Kernel(libc::ENETUNREACH)));
        assert_eq!(
            parse_route(&reply(RTM_NEWNEIGH, &rt, &[]), dst),
            Err(NlError::Unexpected(RTM_NEWNEIGH))
        );
        // Truncated anywhere: an error, never a panic.
        for cut in 0..on_link.len() {
            assert!(parse_route(&on_link[..cut], dst).is_err(), "cut at {cut}");
        }
        let mut bad = on_link.clone();
        bad[28] = 2; // an attribute shorter than its own header
        assert_eq!(parse_route(&bad, dst), Err(NlError::Malformed));
    }

    #[test]
    fn neighbour_replies_give_the_address_and_whether_it_is_confirmed() {
        let nd = |state: u16| {
            let mut b = [0u8; 12];
            b[0] = libc::AF_INET as u8;
            b[8..10].copy_from_slice(&state.to_ne_bytes());
            b
        };
        let mac = [2, 0, 0, 0, 0, 0x42];
        let r = |state| {
            reply(
                RTM_NEWNEIGH,
                &nd(state),
                &[(NDA_DST, &[10, 98, 0, 2]), (NDA_LLADDR, &mac)],
            )
        };
        assert_eq!(parse_neigh(&r(NUD_REACHABLE)), Ok((mac, true)));
        assert_eq!(parse_neigh(&r(NUD_PERMANENT)), Ok((mac, true)));
        assert_eq!(parse_neigh(&r(NUD_STALE)), Ok((mac, false)));
        assert_eq!(parse_neigh(&r(NUD_DELAY)), Ok((mac, false)));
        assert_eq!(parse_neigh(&r(0x01)), Err(NlError::NoLinkAddress), "incomplete");
        assert_eq!(parse_neigh(&r(0x20)), Err(NlError::NoLinkAddress), "failed");
        let no_ll = reply(RTM_NEWNEIGH, &nd(NUD_REACHABLE), &[(NDA_DST, &[10, 98, 0, 2])]);
        assert_eq!(parse_neigh(&no_ll), Err(NlError::NoLinkAddress));
        let short_ll = reply(RTM_NEWNEIGH, &nd(NUD_REACHABLE), &[(NDA_LLADDR, &mac[..4])]);
        assert_eq!(parse_neigh(&short_ll), Err(NlError::NoLinkAddress));
        let full = r(NUD_REACHABLE);
        for cut in 0..full.len() {
            assert!(parse_neigh(&full[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// As root: the loopback has no link-layer addresses, so a packet to 127.0.0.1 goes
    /// through the raw socket, and arrives.
    #[test]
    fn privileged_loopback_falls_back_to_the_raw_socket() {
        use crate::dev::raw::RawRx;
        use crate::dev::sys::tests::{not_run, privileged};
        use crate::dev::underlay::{route_to, UnderlayRx};
        if !privileged() {
            not_run("needs root");
            return;
        }
        let tx = PacketTx::open(false, false).unwrap();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (hop, _) = tx.next_hop(lo);
        assert_eq!(hop, None, "the loopback route is local, not unicast");
        let rx = RawRx::open(50, Some(Ipv4Addr::LOCALHOST), Duration::from_millis(50)).unwrap();
        let spi = 0x7e5a_0000u32 | (std::process::id() & 0xffff);
        let mut p = vec![0x45, 0, 0, 48, 0, 1, 0x40, 0, 64, 50, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1];
        p.extend_from_slice(&spi.to_be_bytes());
        p.extend_from_slice(&[0; 24]);
        assert_eq!(tx.send_batch(&[&p], &[route_to(lo)]).unwrap(), 1);
        let mut buf = [0u8; 2048];
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < Duration::from_secs(5), "the packet did not arrive");
            if let Some(n) = rx.recv(&mut buf).unwrap() {
                if buf[20..24] == spi.to_be_bytes() {
                    assert_eq!(n, p.len());
                    break;
                }
            }
        }
    }
}
