//! rtnetlink(7) requests, as the route and neighbour lookups of [`crate::dev::packet_tx`] and the
//! tc ingress filter of [`crate::dev::packet_ring`] send them: a `NETLINK_ROUTE` socket, the
//! `nlmsghdr` (linux/netlink.h) in front of a family header, and attributes padded to 4 bytes.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::time::Duration;

/// `NLMSG_ERROR`: the kernel's error (or, with errno 0, acknowledgement) message.
pub(crate) const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`.
pub(crate) const NLM_F_REQUEST: u16 = 0x1;

/// A `NETLINK_ROUTE` socket whose reads give up after `timeout`.
pub(crate) fn socket(timeout: Duration) -> io::Result<Socket> {
    let nl = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::DGRAM,
        Some(Protocol::from(libc::NETLINK_ROUTE)),
    )?;
    nl.set_read_timeout(Some(timeout))?;
    Ok(nl)
}

/// One netlink attribute (`struct nlattr` and its value), padded to 4 bytes.
pub(crate) fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(4 + value.len() + 3);
    a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    a.resize(a.len().next_multiple_of(4), 0);
    a
}

/// A request: the 16-byte `nlmsghdr` (its length filled in, type `kind`, `flags`, sequence
/// `seq`, port 0), then `body` (the family header, a multiple of 4 bytes long) and `attrs`.
pub(crate) fn message(kind: u16, flags: u16, seq: u32, body: &[u8], attrs: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m.extend_from_slice(body);
    m.extend_from_slice(attrs);
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&flags.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
}
