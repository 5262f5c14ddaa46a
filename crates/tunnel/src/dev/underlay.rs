//! The underlay as the loops see it: a sender of sealed packets along the routes the engine
//! names ([`UnderlayTx`], one per IP version, [`ByFamily`] over both) and receiving sockets
//! that fill a [`Batch`] ([`UnderlayRx`]). The real ones are raw IP sockets ([`crate::dev::raw`]) and the ESP-in-UDP
//! socket ([`crate::dev::udp`]); tests use in-memory fakes.

use crate::dataplane::packet::{Batch, RxKind};
use ipsec_engine::{Framing, Route};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// The underlay's sending side: sealed packets framed as it says ([`framing`](Self::framing):
/// whole IPv4 or IPv6 packets for a raw socket, the ESP part for a UDP socket, whose kernel
/// writes the headers), each with the [`Route`] the engine named for it.
pub trait UnderlayTx: Sync {
    /// How the packets handed to it must be framed (the engine seals them so).
    fn framing(&self) -> Framing {
        Framing::Ip
    }
    /// Sends `packet` along `route` (to its next hop, `route.to`).
    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()>;
    /// Sends `packets[i]` along `routes[i]` from the first on, in as few system calls as it
    /// can; returns how many were sent (at least 1), or the error of the first one (which
    /// the caller counts and skips). The default sends the first with [`send_to`](Self::send_to).
    fn send_batch(&self, packets: &[&[u8]], routes: &[Route]) -> io::Result<usize> {
        self.send_to(packets[0], &routes[0]).map(|()| 1)
    }
}

/// An underlay over both IP versions: each packet goes to the sender of its next hop's
/// family (a run of one family per call); a packet for a family without one is an error
/// (counted as a send error, never sent elsewhere). Both senders frame packets alike (the
/// IPv4 one's framing is taken when there are two).
pub struct ByFamily<'a> {
    /// The IPv4 sender.
    pub v4: Option<&'a dyn UnderlayTx>,
    /// The IPv6 sender.
    pub v6: Option<&'a dyn UnderlayTx>,
}

impl ByFamily<'_> {
    fn of(&self, dst: &IpAddr) -> io::Result<&dyn UnderlayTx> {
        match dst {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        }
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no IPv{} underlay to send to {dst}", if dst.is_ipv4() { 4 } else { 6 }),
            )
        })
    }
}

impl UnderlayTx for ByFamily<'_> {
    fn framing(&self) -> Framing {
        self.v4.or(self.v6).map_or(Framing::Ip, |t| t.framing())
    }

    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()> {
        self.of(&route.to)?.send_to(packet, route)
    }

    fn send_batch(&self, packets: &[&[u8]], routes: &[Route]) -> io::Result<usize> {
        let Some(first) = routes.first() else { return Ok(0) };
        let run = routes
            .iter()
            .take_while(|r| r.to.is_ipv4() == first.to.is_ipv4())
            .count();
        self.of(&first.to)?.send_batch(&packets[..run], &routes[..run])
    }
}

/// One of the underlay's receiving sockets. [`recv_batch`](Self::recv_batch) fills a batch
/// with what the engine opens: whole IPv4 or IPv6 packets, or (ESP in UDP) the datagrams'
/// payloads, their addresses in each slot's [`Context`](crate::dataplane::packet::Context).
pub trait UnderlayRx: Sync {
    /// Reads one whole IP packet into `buf` (headers included, rebuilt by the socket where
    /// the kernel does not hand them over); `Ok(None)` when none came within the wait
    /// interval.
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Reads up to [`BATCH`](crate::dataplane::packet::BATCH) packets into `batch` (waiting for the first as
    /// [`recv`](Self::recv) does) and returns how many; the default reads one with `recv`.
    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        Ok(self.recv(batch.recv_area(0))?.map_or(0, |n| {
            batch.set(0, n, RxKind::Packet, None);
            1
        }))
    }
    /// The engine accepted a packet that came from `src`, authenticated by an SA of `peer`
    /// (the configured address its tunnel starts at): an encapsulating socket learns that
    /// peer's current address and port from it, and no other peer's (RFC 3948 NAT
    /// traversal). The default does nothing.
    fn authenticated(&self, _peer: IpAddr, _src: SocketAddr) {}
    /// Packets the kernel dropped for this receiver since the last call (an `AF_PACKET`
    /// ring's overflows, [`crate::dev::packet_ring`]); the default: none known.
    fn take_drops(&self) -> u64 {
        0
    }
}

/// A route to `to` for tests of the senders, which look at the next hop only (SA 0, SPI 0).
#[cfg(test)]
pub(crate) fn route_to(to: IpAddr) -> Route {
    Route {
        sa: ipsec_engine::SaId(0),
        spi: 0,
        to,
    }
}
