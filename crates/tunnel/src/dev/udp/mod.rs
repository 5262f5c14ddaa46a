//! The ESP-in-UDP socket (RFC 3948, the framing itself in [`ipsec_engine::udp_encap`]): one
//! UDP socket per worker, all bound to one port with SO_REUSEPORT, sharing the peers'
//! endpoints (learned from authenticated packets, RFC 3948 NAT traversal). The route travels
//! with the packet: sending takes the ESP part the engine sealed for a socket
//! ([`Framing::Udp`]: no outer IP header built, the kernel adds the IP and UDP headers) and
//! the [`Route`] it named (outbound SA and next hop), which picks the endpoint without a look
//! at the packet; runs of equal-sized datagrams go as one UDP GSO message. Receiving takes
//! coalesced runs (UDP GRO) apart into the batch's slots as they came, sorts each datagram
//! ([`udp_encap::classify`]) and records, for ESP, the datagram's addresses and ports in the
//! slot's [`Context`] ([`Arrival::datagram`]): the engine opens the payload where it lies
//! with them, and checks the ports against the SA's `encap`; no IP header is written in
//! front. A non-ESP datagram (IKE) stays in its slot for a consumer ([`RxKind::NonEsp`]).
//!
//! The parts: the peers and their endpoints (`peers.rs`: one hash probe per lookup, read
//! without a lock), UDP GSO sends (`gso.rs`) and UDP GRO reads (`gro.rs`). `unsafe` only in
//! those two: the `sendmmsg` with UDP_SEGMENT control messages, the `recvmmsg` reading
//! UDP_GRO control messages (both as bytes of an 8-aligned buffer, not through pointer
//! casts); each with its `// SAFETY:` comment; tested GSO → GRO over the loopback.

mod gro;
mod gso;
mod peers;
#[cfg(test)]
mod tests;

pub use gro::{GroBuffers, GRO_MSGS, GRO_MSG_LEN};
pub use peers::MAX_DYNAMIC_PEERS;

use crate::dataplane::packet::{Batch, Context, RxKind, BATCH};
use crate::dev::outer::{self, header_len};
use crate::dev::sys::{recv_from, recv_mmsg, send_mmsg, set_int_option, Names, RECV_BUFFER};
use crate::dev::underlay::{UnderlayRx, UnderlayTx};
use gso::send_gso;
use ipsec_engine::udp_encap::{self, Payload, Ports};
use ipsec_engine::{Arrival, Framing, Route};
use peers::Peers;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The default UDP port for ESP in UDP (RFC 3948).
pub const PORT: u16 = udp_encap::NAT_T_PORT;

/// `area[..len]` is a received UDP payload, sorted by [`udp_encap::classify`]: what it is,
/// and its length for an ESP packet (for the engine, which opens it where it lies with the
/// datagram's addresses, [`Arrival::datagram`]) or a non-ESP (IKE) datagram (for the IKE
/// consumer); 0 for a keepalive or runt. Never panics: a `len` beyond the area is cut to it.
pub fn sort_datagram(area: &[u8], len: usize) -> (RxKind, usize) {
    let len = len.min(area.len());
    match udp_encap::classify(&area[..len]) {
        Payload::Esp => (RxKind::Packet, len),
        Payload::NonEsp => (RxKind::NonEsp, len),
        Payload::Keepalive => (RxKind::Keepalive, 0),
        Payload::Runt => (RxKind::Runt, 0),
    }
}

/// An ESP-in-UDP socket (RFC 3948) on the underlay, over IPv4 or IPv6: sends the ESP part
/// of each sealed packet (the engine builds no outer header for it, [`Framing::Udp`]) in a
/// UDP datagram to the endpoint of the packet's route; receives datagrams into the batch's
/// slots as they came, each ESP payload with its addresses and ports in the slot's
/// [`Context`] (as the source, the peer whose endpoint, or NAT address, sent the datagram,
/// else the datagram's source). Keepalives and non-ESP (IKE) datagrams are sorted out before
/// the engine.
pub struct EncapSocket {
    sock: Socket,
    local: IpAddr,
    /// The port it is bound to: the destination port of what it receives.
    port: u16,
    /// Coalesced datagrams read with UDP GRO, not yet taken apart (one receiving thread per
    /// socket, so the lock is never contended).
    gro_rx: Mutex<GroBuffers>,
    /// The peers, shared by the sockets of one [`EncapSocket::open_group`].
    peers: Arc<Peers>,
    /// Whether runs of equal-sized datagrams go as one UDP GSO send (until the kernel
    /// refuses it once).
    gso: AtomicBool,
    /// Whether the kernel hands this socket coalesced runs of datagrams (UDP_GRO accepted).
    gro: bool,
    /// How often GSO and GRO carried runs, shared by the sockets of one group.
    runs: Arc<RunCounts>,
}

/// Runs of datagrams that went out as one UDP GSO message, and came in as one UDP GRO read.
#[derive(Debug, Default)]
struct RunCounts {
    gso_sends: AtomicU64,
    gso_datagrams: AtomicU64,
    gro_reads: AtomicU64,
    gro_datagrams: AtomicU64,
}

/// A group's UDP GSO/GRO tallies ([`EncapSocket::runs`]), for the daemon's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpRuns {
    /// Sends of more than one datagram as one UDP GSO message.
    pub gso_sends: u64,
    /// The datagrams they carried.
    pub gso_datagrams: u64,
    /// Reads that brought more than one datagram coalesced by UDP GRO.
    pub gro_reads: u64,
    /// The datagrams they carried.
    pub gro_datagrams: u64,
}

impl EncapSocket {
    /// Binds `local:sport`; sends to each of `peers` (of `local`'s IP version) at port
    /// `dport` until it learns better. Reads wait at most `wait`.
    pub fn open(local: IpAddr, sport: u16, peers: &[IpAddr], dport: u16, wait: Duration) -> io::Result<EncapSocket> {
        if let Some(p) = peers.iter().find(|p| p.is_ipv4() != local.is_ipv4()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ESP in UDP from {local} to {p}: not of one IP version"),
            ));
        }
        Self::open_with(local, sport, Arc::new(Peers::configured(peers, dport)), wait)
    }

    /// A UDP socket bound to `local:sport` with the options every ESP-in-UDP socket has, and
    /// whether the kernel took UDP_GRO.
    fn bound(local: IpAddr, sport: u16, wait: Duration) -> io::Result<(Socket, bool)> {
        let sock = Socket::new(
            Domain::for_address(SocketAddr::new(local, 0)),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        if local.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.set_reuse_address(true)?;
        sock.set_reuse_port(true)?;
        sock.bind(&SockAddr::from(SocketAddr::new(local, sport)))?;
        sock.set_read_timeout(Some(wait))?;
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
        let _ = sock.set_send_buffer_size(RECV_BUFFER);
        let gro = set_int_option(sock.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        Ok((sock, gro))
    }

    /// Our address changed (RFC 4555 3.5, `ipsec ike update`): the socket is bound to `to`
    /// from now on, on its port, with its options: a new socket takes its descriptor
    /// ([`crate::dev::sys::replace_fd`]), so the worker using it goes on without a lock or a
    /// pause, and the data path is the one it was (no per-packet source choice). What the
    /// socket tells the engine as the destination of what it receives stays [`local`]
    /// (the address the SAs were installed with: their inbound lookup names it, RFC 4301
    /// 4.1). UDP GRO is as the kernel allowed it at the start.
    ///
    /// [`local`]: Self::local
    pub fn rebind(&self, to: IpAddr) -> io::Result<()> {
        if to.is_ipv4() != self.local.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot move the {} ESP-in-UDP socket to {to}", self.local),
            ));
        }
        let wait = self.sock.read_timeout()?.unwrap_or(Duration::from_millis(50));
        let (new, _) = Self::bound(to, self.port, wait)?;
        crate::dev::sys::replace_fd(&new, &self.sock)
    }

    /// The address and port the socket is bound to now (after a [`rebind`](Self::rebind),
    /// not [`local`](Self::local)).
    pub fn bound_to(&self) -> io::Result<SocketAddr> {
        self.sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP socket"))
    }

    fn open_with(local: IpAddr, sport: u16, peers: Arc<Peers>, wait: Duration) -> io::Result<EncapSocket> {
        let (sock, gro) = Self::bound(local, sport, wait)?;
        let port = sock.local_addr()?.as_socket().map_or(sport, |a| a.port());
        Ok(EncapSocket {
            sock,
            local,
            port,
            gro_rx: Mutex::new(GroBuffers::new()),
            peers,
            gso: AtomicBool::new(true),
            gro,
            runs: Arc::default(),
        })
    }

    /// The UDP GSO/GRO tallies of this socket's group so far.
    pub fn runs(&self) -> UdpRuns {
        let r = &self.runs;
        UdpRuns {
            gso_sends: r.gso_sends.load(Ordering::Relaxed),
            gso_datagrams: r.gso_datagrams.load(Ordering::Relaxed),
            gro_reads: r.gro_reads.load(Ordering::Relaxed),
            gro_datagrams: r.gro_datagrams.load(Ordering::Relaxed),
        }
    }

    /// `n` (at least 1) sockets bound to the same `local:sport` with SO_REUSEPORT, one per
    /// worker, sharing the peers' endpoints. The kernel spreads received datagrams over them
    /// by 4-tuple hash: each peer's packets go to one socket, in order. (Spreading one
    /// peer's packets by receiving CPU, a SO_ATTACH_REUSEPORT_CBPF program `cpu % n`, was
    /// tried and measured slower: it reorders a TCP flow's packets between workers, and the
    /// retransmits cost more than the second core gains.)
    pub fn open_group(
        local: IpAddr,
        sport: u16,
        peers: &[IpAddr],
        dport: u16,
        n: usize,
        wait: Duration,
    ) -> io::Result<Vec<EncapSocket>> {
        let first = Self::open(local, sport, peers, dport, wait)?;
        let port = first.local_port()?;
        let mut v = vec![first];
        for _ in 1..n.max(1) {
            let mut u = Self::open_with(local, port, Arc::clone(&v[0].peers), wait)?;
            u.runs = Arc::clone(&v[0].runs);
            v.push(u);
        }
        Ok(v)
    }

    /// Where sealed packets to `peer` go now, when no SA of IKE's says otherwise (`None`:
    /// not a peer of this socket); of several endpoints at that address, the first.
    pub fn endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
        self.peers.load().first(peer).map(|e| e.current())
    }

    /// Where the packets of IKE's outbound SA `spi_out` to `peer` go now (`None`: no such SA
    /// was added with [`add_peer`](Self::add_peer)).
    pub fn child_endpoint(&self, peer: IpAddr, spi_out: u32) -> Option<SocketAddr> {
        self.peers.load().child(peer, spi_out).map(|e| e.current())
    }

    /// Each endpoint (one per configured peer, one per address and port IKE added), where
    /// its packets go now, and whether that was learned (a peer IKE added counts as learned:
    /// its endpoint came from its authenticated messages).
    pub fn endpoints(&self) -> Vec<(IpAddr, SocketAddr, bool)> {
        self.peers
            .load()
            .endpoints()
            .into_iter()
            .map(|e| (e.peer, e.current(), e.dynamic || e.learned()))
            .collect()
    }

    /// IKE installed a child SA (outbound `spi_out`, inbound `spi_in`) with a peer whose
    /// authenticated messages come from `at` (RFC 7296 2.23): that SA's sealed packets go to
    /// `at`. A configured peer's endpoint moves there; for an address not configured (a
    /// connection that takes any remote address) the endpoint whose packets go to `at` now is
    /// shared, else one is added: two clients behind one NAT address, which differ by port,
    /// get one each (RFC 3948). `false`: the table already holds [`MAX_DYNAMIC_PEERS`] added
    /// endpoints, and the SA's packets cannot go.
    pub fn add_peer(&self, at: SocketAddr, spi_out: u32, spi_in: u32) -> bool {
        if at.is_ipv4() != self.local.is_ipv4() {
            return false;
        }
        let added = self.peers.add_child(at, spi_out, spi_in);
        if added == Some(true) {
            tracing::info!("ESP-in-UDP: peer {} added at {at} (IKE)", at.ip());
        }
        added.is_some()
    }

    /// IKE's child SA with inbound SPI `spi_in` is gone: its packets' endpoint is forgotten,
    /// and an endpoint IKE added leaves when no child SA uses it any more (another client's
    /// at the same address stays).
    pub fn remove_child(&self, spi_in: u32) {
        self.peers.remove_child(spi_in);
    }

    /// Takes out the endpoints of `peer` that IKE added ([`EncapSocket::add_peer`]) and no child
    /// SA uses any more; configured peers, and another client's endpoint at the same address
    /// while its child SAs live, stay.
    pub fn remove_peer(&self, peer: IpAddr) {
        self.peers.remove_peer(peer);
    }

    /// An authenticated IKE message came from `new` for an IKE SA whose messages came from
    /// `old` (RFC 7296 2.23): the endpoints whose packets went to `old` go to `new`, and only
    /// those (another client behind the same NAT address keeps its own). None went there (the
    /// data plane had followed the peer's ESP already): the address's only endpoint moves,
    /// if it has exactly one.
    pub fn moved(&self, old: SocketAddr, new: SocketAddr) {
        self.peers.moved(old, new);
    }

    /// The source address put in the IP header rebuilt for a datagram from `from`: the peer
    /// whose endpoint sends from there, else `from`'s address (one hash probe).
    pub fn source_of(&self, from: SocketAddr) -> IpAddr {
        self.peers.load().source_of(from)
    }

    /// The address the socket is bound to.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The port the socket is bound to.
    pub fn local_port(&self) -> io::Result<u16> {
        Ok(self.sock.local_addr()?.as_socket().map_or(0, |a| a.port()))
    }

    /// Sends one NAT-keepalive (a single 0xFF byte) to every peer's endpoint; returns how
    /// many went, and the last error if any did not.
    pub fn send_keepalives(&self) -> (usize, Option<io::Error>) {
        let mut sent = 0;
        let mut err = None;
        for e in self.peers.load().endpoints() {
            match self.sock.send_to(&[udp_encap::KEEPALIVE], &SockAddr::from(e.current())) {
                Ok(_) => sent += 1,
                Err(x) => err = Some(io::Error::new(x.kind(), format!("to {}: {x}", e.current()))),
            }
        }
        (sent, err)
    }

    /// Sends one datagram (an IKE message with its non-ESP marker) from this socket's port to
    /// `to`: IKE shares port 4500 with ESP in UDP (RFC 3948 2.2).
    pub fn send_datagram(&self, payload: &[u8], to: SocketAddr) -> io::Result<()> {
        self.sock.send_to(payload, &SockAddr::from(to)).map(drop)
    }

    /// The context of a datagram from `from` that was found to be `kind`: for ESP, the
    /// datagram's addresses for the engine ([`Arrival::in_datagram`]), its source the peer
    /// whose endpoint sends from `from` (the peer table's `source_of`).
    fn context(&self, peers: &peers::PeerTable, kind: RxKind, from: Option<SocketAddr>) -> Context {
        let ports = Ports {
            sport: from.map_or(0, |f| f.port()),
            dport: self.port,
        };
        let arrival = match (kind, from) {
            (RxKind::Packet, Some(f)) => Arrival::in_datagram(ports, peers.source_of(f), self.local),
            (RxKind::Packet, None) => Arrival::in_datagram(ports, self.local, self.local),
            _ => Arrival::in_udp(ports),
        };
        Context { kind, from, arrival }
    }
}

impl UnderlayTx for EncapSocket {
    fn framing(&self) -> Framing {
        Framing::Udp
    }

    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()> {
        self.send_batch(&[packet], std::slice::from_ref(route)).map(drop)
    }

    /// Each packet is the ESP part of a sealed packet ([`Framing::Udp`]), sent as it is to
    /// its route's endpoint: its SA's (IKE's SAs, by the outbound SPI the route names), else
    /// its next hop's only one.
    fn send_batch(&self, packets: &[&[u8]], routes: &[Route]) -> io::Result<usize> {
        let n = packets.len().min(routes.len()).min(BATCH);
        let mut to = Names::new();
        let peers = self.peers.load();
        // Up to the first packet that cannot go (which fails alone when it is the first).
        let mut m = 0;
        for (i, r) in routes[..n].iter().enumerate() {
            match peers.route(r.to, r.spi) {
                Some(e) => {
                    to.set(i, e);
                    m += 1;
                }
                None if i == 0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{}: not a peer (or several clients at that address, none with SA 0x{:08x})",
                            r.to, r.spi
                        ),
                    ))
                }
                None => break,
            }
        }
        if self.gso.load(Ordering::Relaxed) {
            match send_gso(self.sock.as_raw_fd(), &packets[..m], &mut to).map(|s| {
                self.runs.gso_sends.fetch_add(s.runs as u64, Ordering::Relaxed);
                self.runs.gso_datagrams.fetch_add(s.in_runs as u64, Ordering::Relaxed);
                s.datagrams
            }) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT)) => {
                    tracing::warn!("ESP-in-UDP: UDP GSO refused ({e}): one datagram per packet from now on");
                    self.gso.store(false, Ordering::Relaxed);
                }
                r => return r,
            }
        }
        send_mmsg(self.sock.as_raw_fd(), &packets[..m], &mut to)
    }
}

impl UnderlayRx for EncapSocket {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // Single reads, for tools and tests (the loops use recv_batch, which opens each ESP
        // payload where it lies): the whole IP packet the trait promises, its header put
        // back in front of the datagram; anything but ESP reads as nothing.
        let h = header_len(self.local);
        if buf.len() <= h {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let Some((n, from)) = recv_from(self.sock.as_raw_fd(), &mut buf[h..], self.local.is_ipv6())? else {
            return Ok(None);
        };
        if sort_datagram(&buf[h..], n).0 != RxKind::Packet {
            return Ok(None);
        }
        let src = self.peers.load().source_of(from);
        Ok(outer::rebuild_header(buf, n, ipsec_core::ip::proto::ESP, src, self.local).ok())
    }

    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        if self.gro {
            return self.recv_batch_gro(batch);
        }
        let mut lens = [0usize; BATCH];
        let mut srcs = [SocketAddr::from(([0u8; 4], 0)); BATCH];
        let n = recv_mmsg(
            self.sock.as_raw_fd(),
            batch,
            0,
            &mut lens,
            Some((&mut srcs, self.local.is_ipv6())),
        )?;
        let peers = self.peers.load();
        for i in 0..n {
            let (kind, len) = sort_datagram(batch.recv_area(i), lens[i]);
            batch.set_context(i, len, self.context(&peers, kind, Some(srcs[i])));
        }
        Ok(n)
    }

    fn authenticated(&self, peer: IpAddr, src: SocketAddr) {
        self.peers.authenticated(peer, src);
    }
}
