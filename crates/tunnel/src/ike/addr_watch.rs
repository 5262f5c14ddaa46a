//! Our own addresses change (RFC 4555 3.5, the initiator's side; a laptop moving from Wi-Fi to
//! LTE): an rtnetlink socket subscribed to the kernel's address notifications (RTM_NEWADDR,
//! RTM_DELADDR; rtnetlink(7)) wakes the IKE thread; when the address its sockets are bound to
//! is gone, the source of the route to the peer (RTA_PREFSRC of RTM_GETROUTE) is where the
//! sockets and the MOBIKE IKE SAs move (`ike::update_local`, as `ipsec ike update` does).
//!
//! Only a vanished address moves anything: a gateway whose own address stays is never moved
//! by a route that prefers another source toward one client.
use crate::dev::packet_tx::{addr_of, attrs, nl_body, route_request, NlError};
use socket2::Socket;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR (linux/rtnetlink.h).
const GROUPS: u32 = 0x10 | 0x100;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
/// RTA_PREFSRC: the source address the kernel would choose on that route.
const RTA_PREFSRC: u16 = 7;

/// The kernel's address notifications, read without blocking.
pub struct AddrWatch {
    sock: Socket,
}

impl AddrWatch {
    /// A netlink socket subscribed to IPv4 and IPv6 address changes.
    pub fn open() -> io::Result<AddrWatch> {
        let sock = crate::dev::rtnetlink::socket(Duration::from_millis(10))?;
        crate::dev::sys::netlink_bind_groups(&sock, GROUPS)?;
        sock.set_nonblocking(true)?;
        Ok(AddrWatch { sock })
    }

    /// Its descriptor, to wait on.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Reads what is queued: whether an address came or went (at most 64 reads a call).
    pub fn changed(&self) -> bool {
        let mut buf = vec![0u8; 16384];
        let mut any = false;
        for _ in 0..64 {
            let Ok(n) = (&self.sock).read(&mut buf) else {
                break;
            };
            any |= address_messages(&buf[..n]);
        }
        any
    }
}

/// Whether the datagram holds an RTM_NEWADDR or RTM_DELADDR (its messages walked by their
/// lengths; a malformed one ends the walk).
pub(crate) fn address_messages(d: &[u8]) -> bool {
    let mut at = 0;
    while let Some(h) = d.get(at..at + 16) {
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let kind = u16::from_ne_bytes([h[4], h[5]]);
        if matches!(kind, RTM_NEWADDR | RTM_DELADDR) {
            return true;
        }
        if len < 16 {
            return false;
        }
        at += len.next_multiple_of(4);
    }
    false
}

/// The preferred source address of a route reply (RTA_PREFSRC); None when it names none.
pub(crate) fn parse_prefsrc(reply: &[u8]) -> Result<Option<IpAddr>, NlError> {
    let body = nl_body(reply, RTM_NEWROUTE)?;
    if body.len() < 12 {
        return Err(NlError::Malformed);
    }
    Ok(attrs(body, 12)?
        .into_iter()
        .find(|(k, _)| *k == RTA_PREFSRC)
        .and_then(|(_, v)| addr_of(v)))
}

/// The source the kernel would send to `dst` from (None: no route, or it names no source).
pub fn source_toward(dst: IpAddr) -> io::Result<Option<IpAddr>> {
    let nl = crate::dev::rtnetlink::socket(Duration::from_millis(500))?;
    nl.send(&route_request(dst, 1))?;
    let mut buf = vec![0u8; 8192];
    let n = (&nl).read(&mut buf)?;
    Ok(parse_prefsrc(&buf[..n]).ok().flatten())
}

/// Whether `a` is still an address of this host (a socket can be bound to it).
pub fn is_ours(a: IpAddr) -> bool {
    !matches!(
        UdpSocket::bind(SocketAddr::new(a, 0)),
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route reply (`nlmsghdr`, `rtmsg`, RTA_OIF and RTA_PREFSRC) gives its source; without
    /// one, None; an error reply or a truncated one, an error.
    #[test]
    fn the_route_replys_preferred_source() {
        let msg = |attrs: &[(u16, &[u8])]| {
            let a: Vec<u8> = attrs
                .iter()
                .flat_map(|(k, v)| crate::dev::rtnetlink::nla(*k, v))
                .collect();
            crate::dev::rtnetlink::message(RTM_NEWROUTE, 0, 1, &[2, 32, 0, 0, 254, 4, 0, 1, 0, 0, 0, 0], &a)
        };
        let r = msg(&[(4, &7u32.to_ne_bytes()), (RTA_PREFSRC, &[10, 96, 1, 3])]);
        assert_eq!(parse_prefsrc(&r), Ok(Some("10.96.1.3".parse().unwrap())));
        assert_eq!(parse_prefsrc(&msg(&[(4, &7u32.to_ne_bytes())])), Ok(None));
        assert!(parse_prefsrc(&r[..20]).is_err());
        let err = crate::dev::rtnetlink::message(2, 0, 1, &(-101i32).to_ne_bytes(), &[]);
        assert_eq!(parse_prefsrc(&err), Err(NlError::Kernel(101)));
    }

    /// Address notifications are told from the rest (a link message, garbage).
    #[test]
    fn address_notifications_are_recognised() {
        let m = |k| crate::dev::rtnetlink::message(k, 0, 0, &[0u8; 8], &[]);
        assert!(address_messages(&m(RTM_DELADDR)));
        assert!(address_messages(&[m(16), m(RTM_NEWADDR)].concat()));
        assert!(!address_messages(&m(16)));
        assert!(!address_messages(&[0xff; 7]));
        assert!(!address_messages(&[0u8; 40]), "a zero length ends the walk");
    }

    /// The loopback address is ours; a documentation address is not; the kernel's route to
    /// 127.0.0.1 names a source.
    #[test]
    fn our_addresses_and_the_route_source() {
        assert!(is_ours("127.0.0.1".parse().unwrap()));
        assert!(!is_ours("192.0.2.77".parse().unwrap()));
        if let Ok(src) = source_toward("127.0.0.1".parse().unwrap()) {
            assert_eq!(src, Some("127.0.0.1".parse().unwrap()));
        }
    }
}
