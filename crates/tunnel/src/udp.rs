//! The ESP-in-UDP socket (RFC 3948, the framing itself in [`ipsec_engine::udp_encap`]): one
//! UDP socket per worker, all bound to one port with SO_REUSEPORT, sharing the peers'
//! endpoints (learned from authenticated packets, RFC 3948 NAT traversal). Sending takes the
//! ESP part of each sealed packet ([`udp_encap::socket_payload`]: the kernel adds the IP and
//! UDP headers), runs of equal-sized datagrams as one UDP GSO message; receiving takes
//! coalesced runs (UDP GRO) apart, sorts each datagram ([`udp_encap::classify`]), and for
//! ESP puts an IP header back in front ([`outer::rebuild_header`]) and records the datagram's
//! source and ports in the slot's [`Context`], which the engine checks against the SA's
//! `encap`. A non-ESP datagram (IKE) stays in its slot for a consumer
//! ([`RxKind::NonEsp`]).
//!
//! `unsafe` here: the `sendmmsg` with UDP_SEGMENT control messages, the `recvmmsg` reading
//! UDP_GRO control messages (both as bytes of an 8-aligned buffer, not through pointer
//! casts); each with its `// SAFETY:` comment; tested GSO → GRO over the loopback.
#![allow(unsafe_code)]

use crate::outer::{self, header_len};
use crate::packet::{Batch, Context, RxKind, BATCH, MAX_PACKET};
use crate::sys::{recv_from, recv_mmsg, send_mmsg, set_int_option, Names, RECV_BUFFER};
use crate::underlay::{UnderlayRx, UnderlayTx};
use arc_swap::{ArcSwap, ArcSwapOption};
use ipsec_engine::udp_encap::{self, Payload, Ports};
use ipsec_engine::Arrival;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The default UDP port for ESP in UDP (RFC 3948).
pub const PORT: u16 = udp_encap::NAT_T_PORT;

/// `area[h..h + len]` is a received UDP payload (`h` = [`header_len`]`(dst)`), sorted by
/// [`udp_encap::classify`]. ESP: an IP header (`src` → `dst`, protocol 50) written into
/// `area[..h]`, and the whole packet's length. A non-ESP (IKE) datagram: moved to the start
/// of the area, and its length, for the IKE consumer. A keepalive or runt: what it is, and 0.
/// Never panics: a `len` beyond the area is cut to it; a header that cannot be written makes
/// it a runt.
pub fn decapsulate(area: &mut [u8], len: usize, src: IpAddr, dst: IpAddr) -> (RxKind, usize) {
    let h = header_len(dst);
    if area.len() <= h {
        return (RxKind::Runt, 0);
    }
    let max = match dst {
        IpAddr::V4(_) => usize::from(u16::MAX) - h,
        IpAddr::V6(_) => usize::from(u16::MAX),
    };
    let len = len.min(area.len() - h).min(max);
    match udp_encap::classify(&area[h..h + len]) {
        Payload::Esp => match outer::rebuild_header(area, len, ipsec_core::ip::proto::ESP, src, dst) {
            Ok(total) => (RxKind::Packet, total),
            Err(_) => (RxKind::Runt, 0),
        },
        Payload::NonEsp => {
            area.copy_within(h..h + len, 0);
            (RxKind::NonEsp, len)
        }
        Payload::Keepalive => (RxKind::Keepalive, 0),
        Payload::Runt => (RxKind::Runt, 0),
    }
}

/// How many coalesced messages one [`GroBuffers`] receives at a time.
pub const GRO_MSGS: usize = 8;
/// The room for one coalesced message: the most one UDP GRO super-datagram carries.
pub const GRO_MSG_LEN: usize = 65535;

/// Received UDP datagrams as the kernel hands them to a socket with UDP_GRO on: up to
/// [`GRO_MSGS`] messages, each a run of datagrams from one source, all of one size `seg`
/// but the last, which may be shorter; and how far they have been taken apart. The receive
/// loop copies each datagram into its own packet slot ([`next_datagram`](Self::next_datagram)), so a run of
/// 40 datagrams costs one system call instead of 40. Allocated once per socket, on its first
/// read ([`allocate`](Self::allocate)); nothing per packet.
pub struct GroBuffers {
    bufs: Vec<Box<[u8]>>,
    len: [usize; GRO_MSGS],
    seg: [usize; GRO_MSGS],
    src: [Option<std::net::SocketAddr>; GRO_MSGS],
    count: usize,
    /// The message being taken apart and how many of its datagrams were taken.
    msg: usize,
    taken: usize,
}

impl Default for GroBuffers {
    fn default() -> Self {
        Self::new()
    }
}

impl GroBuffers {
    /// Empty, with no memory yet (a thread that never receives coalesced datagrams needs none).
    pub fn new() -> Self {
        GroBuffers {
            bufs: Vec::new(),
            len: [0; GRO_MSGS],
            seg: [0; GRO_MSGS],
            src: [None; GRO_MSGS],
            count: 0,
            msg: 0,
            taken: 0,
        }
    }

    /// Allocates the [`GRO_MSGS`] buffers if that was not done yet.
    pub fn allocate(&mut self) {
        if self.bufs.is_empty() {
            self.bufs = (0..GRO_MSGS).map(|_| vec![0; GRO_MSG_LEN].into_boxed_slice()).collect();
        }
    }

    /// The receive buffers, to read the next messages into (empty before
    /// [`allocate`](Self::allocate)).
    pub fn areas(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.bufs.iter_mut().map(|b| &mut b[..])
    }

    /// Records what the last read gave: `len[i]` bytes in buffer `i`, a run of datagrams of
    /// `seg[i]` bytes (0: one datagram) from `src[i]`. Lengths beyond the buffers are cut.
    pub fn filled(&mut self, count: usize, len: &[usize], seg: &[usize], src: &[Option<std::net::SocketAddr>]) {
        let count = count.min(self.bufs.len()).min(len.len()).min(seg.len()).min(src.len());
        for i in 0..count {
            self.len[i] = len[i].min(GRO_MSG_LEN);
            self.seg[i] = seg[i];
            self.src[i] = src[i];
        }
        self.count = count;
        self.msg = 0;
        self.taken = 0;
    }

    /// The next datagram and its source, or `None` when all are taken. A run's datagrams
    /// are `seg` bytes each (the last the rest); a `seg` of 0 or beyond the message means
    /// the whole message is one datagram, and an empty message is one empty datagram (it is
    /// counted like any other). Each call moves forward, so the loop is bounded by the
    /// messages and bytes received.
    pub fn next_datagram(&mut self) -> Option<(&[u8], Option<std::net::SocketAddr>)> {
        while self.msg < self.count {
            let (i, len, seg) = (self.msg, self.len[self.msg], self.seg[self.msg]);
            let step = if seg == 0 || seg >= len { len.max(1) } else { seg };
            let start = self.taken * step;
            if start < len || (len == 0 && self.taken == 0) {
                self.taken += 1;
                return Some((&self.bufs[i][start..(start + step).min(len)], self.src[i]));
            }
            self.msg += 1;
            self.taken = 0;
        }
        None
    }
}

/// Copies the next datagram of `gro` into slot `i`'s receive area of `batch` from byte
/// `skip` on (cut to the area): its length and source, or `None` when every datagram has
/// been taken.
fn fill_from_gro(
    gro: &mut GroBuffers,
    batch: &mut Batch,
    i: usize,
    skip: usize,
) -> Option<(usize, Option<SocketAddr>)> {
    let (d, src) = gro.next_datagram()?;
    let area = &mut batch.recv_area(i)[skip.min(MAX_PACKET)..];
    let n = d.len().min(area.len());
    area[..n].copy_from_slice(&d[..n]);
    Some((n, src))
}

/// One endpoint of an ESP-in-UDP socket group: a peer's address and where its datagrams go
/// (the configured port until an authenticated packet of its SAs arrives from elsewhere,
/// RFC 3948 NAT traversal). A configured peer has one; peers IKE adds have one per address
/// *and port* they authenticated from, so clients behind one NAT address (which differ by
/// port only, RFC 3948) each keep their own.
struct Endpoint {
    peer: IpAddr,
    configured: SocketAddr,
    /// Set (rarely: only when the peer moves) by the receiving threads, read for every send.
    learned: ArcSwapOption<SocketAddr>,
    /// Added by IKE at run time (a connection that accepts any remote address) rather than
    /// configured: taken out again when the last child SA using it goes.
    dynamic: bool,
}

/// A child SA IKE installed: its outbound SPI (the first four bytes of every ESP packet it
/// seals, which is how a sealed packet finds its own endpoint), its inbound SPI (ours, unique
/// here: how it is taken out again) and the endpoint its packets go to.
#[derive(Clone)]
struct Child {
    peer: IpAddr,
    spi_out: u32,
    spi_in: u32,
    endpoint: Arc<Endpoint>,
}

/// The peers of a socket group: the configured ones, those IKE adds while running (a
/// responder with `remote_addrs = %any`), and which endpoint each of IKE's outbound SAs
/// sends to. Read without a lock for every batch sent (binary searches, no allocation);
/// changed (rarely) by building a new table.
#[derive(Clone, Default)]
struct PeerTable {
    /// The endpoints, configured ones first, then in the order IKE added them.
    list: Vec<Arc<Endpoint>>,
    /// `(peer, index in list)`, sorted: the endpoints of one address are neighbours.
    by_ip: Vec<(IpAddr, usize)>,
    /// IKE's child SAs, sorted by `(peer, spi_out)`.
    children: Vec<Child>,
    /// How many of `list` IKE added.
    dynamic: usize,
}

type Peers = ArcSwap<PeerTable>;

/// At most this many peers added at run time per socket group, so a stream of peers that
/// authenticate cannot grow the table without bound.
pub const MAX_DYNAMIC_PEERS: usize = 4096;

impl Endpoint {
    fn current(&self) -> SocketAddr {
        self.learned.load().as_deref().copied().unwrap_or(self.configured)
    }

    /// Sealed packets go to `src` from now on (logged when that is news).
    fn learn(&self, src: SocketAddr) {
        if self.learned.load().as_deref() != Some(&src) {
            self.learned.store(Some(Arc::new(src)));
            tracing::info!("ESP-in-UDP (peer {}): the peer's endpoint is now {src}", self.peer);
        }
    }
}

impl PeerTable {
    fn new(list: Vec<Arc<Endpoint>>) -> PeerTable {
        let mut t = PeerTable {
            list,
            by_ip: Vec::new(),
            children: Vec::new(),
            dynamic: 0,
        };
        t.index();
        t
    }

    /// Rebuilds `by_ip` after `list` changed.
    fn index(&mut self) {
        self.dynamic = self.list.iter().filter(|e| e.dynamic).count();
        self.by_ip = self.list.iter().enumerate().map(|(i, e)| (e.peer, i)).collect();
        self.by_ip.sort_unstable();
    }

    /// The endpoints of address `peer`.
    fn at(&self, peer: IpAddr) -> impl Iterator<Item = &Arc<Endpoint>> + Clone {
        let from = self.by_ip.partition_point(|(p, _)| *p < peer);
        self.by_ip[from..]
            .iter()
            .take_while(move |(p, _)| *p == peer)
            .map(|&(_, i)| &self.list[i])
    }

    /// The first endpoint of `peer` (in `list` order).
    fn first(&self, peer: IpAddr) -> Option<&Endpoint> {
        self.at(peer).next().map(|e| &**e)
    }

    /// The endpoint of `peer` when it has exactly one (a configured peer always has): the
    /// one a packet to that address without a known SA goes to, and the one ESP from a new
    /// port moves. Clients behind one NAT address share it, so none is theirs alone.
    fn sole(&self, peer: IpAddr) -> Option<&Endpoint> {
        let mut at = self.at(peer);
        match (at.next(), at.next()) {
            (Some(e), None) => Some(&**e),
            _ => None,
        }
    }

    /// The endpoint of IKE's outbound SA `spi_out` to `peer`.
    fn child(&self, peer: IpAddr, spi_out: u32) -> Option<&Endpoint> {
        self.children
            .binary_search_by(|c| (c.peer, c.spi_out).cmp(&(peer, spi_out)))
            .ok()
            .map(|k| &*self.children[k].endpoint)
    }

    /// Where a sealed packet to `dst` whose ESP part is `esp` goes: its SA's endpoint when
    /// IKE installed the SA, else the address's only endpoint.
    fn route(&self, dst: IpAddr, esp: &[u8]) -> Option<SocketAddr> {
        if !self.children.is_empty() {
            if let Some(spi) = esp.get(..4).and_then(|s| <[u8; 4]>::try_from(s).ok()) {
                if let Some(e) = self.child(dst, u32::from_be_bytes(spi)) {
                    return Some(e.current());
                }
            }
        }
        self.sole(dst).map(Endpoint::current)
    }

    /// Drops the added endpoints no child SA uses any more, those of `only` if given.
    fn prune(&mut self, only: Option<IpAddr>) {
        let mut used: Vec<*const Endpoint> = self.children.iter().map(|c| Arc::as_ptr(&c.endpoint)).collect();
        used.sort_unstable();
        self.list
            .retain(|e| !e.dynamic || only.is_some_and(|p| p != e.peer) || used.binary_search(&Arc::as_ptr(e)).is_ok());
        self.index();
    }
}

/// The source address put in the header rebuilt for a datagram from `from`: the peer whose
/// endpoint (or address) it is, the only peer if there is one, else `from`'s address.
fn header_src(peers: &PeerTable, from: SocketAddr) -> IpAddr {
    if let [only] = &peers.list[..] {
        return only.peer;
    }
    // The common case first: a peer sending from its own address.
    if peers.at(from.ip()).any(|e| e.current() == from) {
        return from.ip();
    }
    peers
        .list
        .iter()
        .find(|e| e.current() == from)
        .map(|e| &**e)
        .or_else(|| peers.first(from.ip()))
        .map_or(from.ip(), |e| e.peer)
}

/// ESP in UDP (RFC 3948) on one UDP socket of one IP version, bound to the local address
/// and port (4500 by default), for both directions, with any number of peers of that
/// version. Sealed packets lose their outer header (the socket adds its own) and go to their
/// peer's current endpoint: the configured address and port until an authenticated packet
/// of that peer's SAs arrives from elsewhere (the peer is behind a NAT), then that packet's
/// source ([`UnderlayRx::authenticated`]). The packets of a child SA IKE added go to that
/// SA's own endpoint (found by outbound SPI): clients behind one NAT address, which differ
/// by port only, each get theirs ([`UdpEncap::add_peer`]). Received datagrams get back an IP header (peer →
/// local, protocol 50) in the headroom, so the engine sees what raw ESP would have given it;
/// the source in it is the configured address of the peer whose current endpoint (or
/// address) sent the datagram, else the datagram's source. Keepalives and non-ESP (IKE)
/// datagrams are sorted out before the engine.
pub struct UdpEncap {
    sock: Socket,
    local: IpAddr,
    /// The port it is bound to: the destination port of what it receives.
    port: u16,
    /// Coalesced datagrams read with UDP GRO, not yet taken apart (one receiving thread per
    /// socket, so the lock is never contended).
    gro_rx: Mutex<GroBuffers>,
    /// The peers, shared by the sockets of one [`UdpEncap::open_group`].
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

/// A group's UDP GSO/GRO tallies ([`UdpEncap::runs`]), for the daemon's counters.
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

impl UdpEncap {
    /// Binds `local:sport`; sends to each of `peers` (of `local`'s IP version) at port
    /// `dport` until it learns better. Reads wait at most `wait`.
    pub fn open(local: IpAddr, sport: u16, peers: &[IpAddr], dport: u16, wait: Duration) -> io::Result<UdpEncap> {
        if let Some(p) = peers.iter().find(|p| p.is_ipv4() != local.is_ipv4()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ESP in UDP from {local} to {p}: not of one IP version"),
            ));
        }
        let peers = peers
            .iter()
            .map(|&peer| {
                Arc::new(Endpoint {
                    peer,
                    configured: SocketAddr::new(peer, dport),
                    learned: ArcSwapOption::empty(),
                    dynamic: false,
                })
            })
            .collect();
        Self::open_with(
            local,
            sport,
            Arc::new(ArcSwap::from_pointee(PeerTable::new(peers))),
            wait,
        )
    }

    fn open_with(local: IpAddr, sport: u16, peers: Arc<Peers>, wait: Duration) -> io::Result<UdpEncap> {
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
        let port = sock.local_addr()?.as_socket().map_or(sport, |a| a.port());
        Ok(UdpEncap {
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
    ) -> io::Result<Vec<UdpEncap>> {
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
            .list
            .iter()
            .map(|e| (e.peer, e.current(), e.dynamic || e.learned.load().is_some()))
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
        let peer = at.ip();
        if peer.is_ipv4() != self.local.is_ipv4() {
            return false;
        }
        let mut added = false;
        let mut ok = false;
        self.peers.rcu(|t| {
            (added, ok) = (false, false);
            let mut t = PeerTable::clone(t);
            // The same SA added again (moved to another endpoint): the old entry goes.
            let before = t.children.len();
            t.children.retain(|c| c.spi_in != spi_in);
            let mut orphans = t.children.len() != before;
            let existing = t
                .at(peer)
                .find(|e| !e.dynamic)
                .or_else(|| t.at(peer).find(|e| e.current() == at))
                .cloned();
            let endpoint = match existing {
                Some(e) => Some(e),
                None if t.dynamic < MAX_DYNAMIC_PEERS => {
                    let e = Arc::new(Endpoint {
                        peer,
                        configured: at,
                        learned: ArcSwapOption::empty(),
                        dynamic: true,
                    });
                    let k = t.by_ip.partition_point(|x| *x < (peer, t.list.len()));
                    t.by_ip.insert(k, (peer, t.list.len()));
                    t.list.push(Arc::clone(&e));
                    t.dynamic += 1;
                    added = true;
                    Some(e)
                }
                None => None,
            };
            if let Some(endpoint) = endpoint {
                let child = Child {
                    peer,
                    spi_out,
                    spi_in,
                    endpoint,
                };
                // An outbound SPI that another SA to this address has (the peers chose the
                // same, 2^-32 per pair): the newer SA's.
                match t
                    .children
                    .binary_search_by(|c| (c.peer, c.spi_out).cmp(&(peer, spi_out)))
                {
                    Ok(k) => {
                        t.children[k] = child;
                        orphans = true;
                    }
                    Err(k) => t.children.insert(k, child),
                }
                if orphans {
                    t.prune(None);
                }
                ok = true;
            }
            t
        });
        if added {
            tracing::info!("ESP-in-UDP: peer {peer} added at {at} (IKE)");
        }
        // A configured peer is moved (outside the copy: the endpoint is shared with it).
        if let Some(e) = self.peers.load().child(peer, spi_out).filter(|e| !e.dynamic) {
            e.learn(at);
        }
        ok
    }

    /// IKE's child SA with inbound SPI `spi_in` is gone: its packets' endpoint is forgotten,
    /// and an endpoint IKE added leaves when no child SA uses it any more (another client's
    /// at the same address stays).
    pub fn remove_child(&self, spi_in: u32) {
        if !self.peers.load().children.iter().any(|c| c.spi_in == spi_in) {
            return;
        }
        self.peers.rcu(|t| {
            let mut t = PeerTable::clone(t);
            let before = t.children.len();
            t.children.retain(|c| c.spi_in != spi_in);
            if t.children.len() != before {
                t.prune(None);
            }
            t
        });
    }

    /// Takes out the endpoints of `peer` that IKE added ([`UdpEncap::add_peer`]) and no child
    /// SA uses any more; configured peers, and another client's endpoint at the same address
    /// while its child SAs live, stay.
    pub fn remove_peer(&self, peer: IpAddr) {
        self.peers.rcu(|t| {
            let mut t = PeerTable::clone(t);
            t.prune(Some(peer));
            t
        });
    }

    /// An authenticated IKE message came from `new` for an IKE SA whose messages came from
    /// `old` (RFC 7296 2.23): the endpoints whose packets went to `old` go to `new`, and only
    /// those (another client behind the same NAT address keeps its own). None went there (the
    /// data plane had followed the peer's ESP already): the address's only endpoint moves,
    /// if it has exactly one.
    pub fn moved(&self, old: SocketAddr, new: SocketAddr) {
        let t = self.peers.load();
        let mut any = false;
        for e in t.at(old.ip()).filter(|e| e.current() == old) {
            e.learn(new);
            any = true;
        }
        if !any {
            if let Some(e) = t.sole(old.ip()) {
                e.learn(new);
            }
        }
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
        for e in self.peers.load().list.iter() {
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

    /// The context of a datagram from `from` that was found to be `kind`.
    fn context(&self, kind: RxKind, from: Option<SocketAddr>) -> Context {
        Context {
            kind,
            from,
            arrival: Arrival::in_udp(Ports {
                sport: from.map_or(0, |f| f.port()),
                dport: self.port,
            }),
        }
    }
}

impl UnderlayTx for UdpEncap {
    fn send_to(&self, packet: &[u8], dst: IpAddr) -> io::Result<()> {
        self.send_batch(&[packet], &[dst]).map(drop)
    }

    fn send_batch(&self, packets: &[&[u8]], dsts: &[IpAddr]) -> io::Result<usize> {
        let n = packets.len().min(dsts.len()).min(BATCH);
        let mut esp: [&[u8]; BATCH] = [&[]; BATCH];
        let mut to = Names::new();
        let peers = self.peers.load();
        // Up to the first packet that cannot go (which fails alone when it is the first).
        let mut m = 0;
        for i in 0..n {
            let payload = udp_encap::socket_payload(packets[i]).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not an ESP packet right after its IP header: cannot go in UDP",
                )
            });
            // Its own SA's endpoint (IKE's SAs, by outbound SPI), else its address's only one.
            let to_peer = |p: &'_ [u8]| {
                peers.route(dsts[i], p).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{}: not a peer (or several clients at that address, none with this SA)",
                            dsts[i]
                        ),
                    )
                })
            };
            match payload.and_then(|p| to_peer(p).map(|e| (p, e))) {
                Ok((p, e)) => {
                    esp[i] = p;
                    to.set(i, e);
                    m += 1;
                }
                Err(e) if i == 0 => return Err(e),
                Err(_) => break,
            }
        }
        if self.gso.load(Ordering::Relaxed) {
            match send_gso(self.sock.as_raw_fd(), &esp[..m], &mut to).map(|s| {
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
        send_mmsg(self.sock.as_raw_fd(), &esp[..m], &mut to)
    }
}

// send_gso writes the control message by hand: a 16-byte cmsghdr (64-bit Linux).
const _: () = assert!(std::mem::size_of::<libc::cmsghdr>() == 16);

/// The most datagrams one UDP GSO send carries (the kernel's UDP_MAX_SEGMENTS).
const UDP_MAX_SEGMENTS: usize = 64;

/// Sends `payloads[i]` to `to`'s slot `i` with one sendmmsg(2), runs of equal-sized
/// datagrams to one destination (the last of a run may be shorter) each as one message with
/// UDP_SEGMENT (UDP GSO): the kernel cuts it into datagrams of the run's size. Returns how
/// many datagrams went (at least one) and how many of the messages were runs of more than
/// one, with how many datagrams.
fn send_gso(fd: RawFd, payloads: &[&[u8]], to: &mut Names) -> io::Result<Runs> {
    #[repr(C, align(8))]
    #[derive(Clone, Copy)]
    struct Cmsg([u8; 32]);
    let n = payloads.len().min(BATCH);
    if n == 0 {
        return Ok(Runs::default());
    }
    // SAFETY: iovec and mmsghdr are plain C structs for which all-zero bytes are valid.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let mut ctl = [Cmsg([0; 32]); BATCH];
    let mut runs = [0usize; BATCH]; // datagrams in message m
    for (v, p) in iov.iter_mut().zip(payloads) {
        v.iov_base = p.as_ptr() as *mut libc::c_void;
        v.iov_len = p.len();
    }
    let (mut m, mut i) = (0, 0);
    while i < n {
        let seg = payloads[i].len();
        let (mut j, mut total) = (i + 1, seg);
        let dst = to.get(i);
        // An empty datagram never joins a run: a run's last segment cannot be empty.
        while j < n
            && j - i < UDP_MAX_SEGMENTS
            && to.get(j) == dst
            && !payloads[j].is_empty()
            && payloads[j].len() <= seg
            && total + payloads[j].len() <= 65000
        {
            total += payloads[j].len();
            j += 1;
            if payloads[j - 1].len() < seg {
                break; // a shorter datagram ends the run
            }
        }
        let h = &mut hdrs[m].msg_hdr;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = j - i;
        (h.msg_name, h.msg_namelen) = to.raw(i);
        if j - i > 1 {
            let c = &mut ctl[m].0;
            // struct cmsghdr { size_t cmsg_len; int cmsg_level; int cmsg_type; } then the u16.
            let len = std::mem::size_of::<libc::cmsghdr>() + 2;
            c[..8].copy_from_slice(&(len as u64).to_ne_bytes());
            c[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
            c[12..16].copy_from_slice(&libc::UDP_SEGMENT.to_ne_bytes());
            c[16..18].copy_from_slice(&(seg as u16).to_ne_bytes());
            h.msg_control = c.as_mut_ptr().cast();
            h.msg_controllen = 24; // CMSG_SPACE(2) on 64-bit Linux
        }
        runs[m] = j - i;
        m += 1;
        i = j;
    }
    // SAFETY: the first `m` headers each point at a run of iovecs in `iov` (each describing
    // a live borrowed payload the kernel only reads), at one socket address of `to` with its
    // true length, and, for
    // runs of more than one, at a control buffer holding one well-formed 8-byte-aligned
    // cmsghdr (UDP_SEGMENT, a u16) within `msg_controllen`. Everything outlives the call; the
    // kernel writes only the headers' `msg_len`.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), m as libc::c_uint, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let sent = &runs[..(r as usize).min(m)];
    let coalesced = sent.iter().filter(|&&k| k > 1);
    Ok(Runs {
        datagrams: sent.iter().sum::<usize>().max(1),
        runs: coalesced.clone().count(),
        in_runs: coalesced.sum(),
    })
}

/// What one GSO send or GRO read moved: datagrams in all, and the messages that were runs of
/// more than one datagram, with the datagrams in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Runs {
    datagrams: usize,
    runs: usize,
    in_runs: usize,
}

impl UdpEncap {
    /// [`UnderlayRx::recv_batch`] with UDP GRO: datagrams left from the last read first, then
    /// (waiting only when there were none) up to [`GRO_MSGS`] coalesced messages read with one
    /// recvmmsg(2) and taken apart into the batch's slots; what does not fit waits in the
    /// batch for the next call. At most three rounds, so a busy socket cannot hold the loop.
    fn recv_batch_gro(&self, batch: &mut Batch) -> io::Result<usize> {
        let mut gro = self.gro_rx.lock().unwrap_or_else(|p| p.into_inner());
        gro.allocate();
        let peers = self.peers.load();
        let mut n = 0;
        for round in 0..3 {
            while n < BATCH {
                let Some((len, from)) = fill_from_gro(&mut gro, batch, n, header_len(self.local)) else {
                    break;
                };
                let src = from.map_or(self.local, |f| header_src(&peers, f));
                let (kind, len) = decapsulate(batch.recv_area(n), len, src, self.local);
                batch.set_context(n, len, self.context(kind, from));
                n += 1;
            }
            if n == BATCH || round == 2 {
                break;
            }
            match recv_mmsg_gro(self.sock.as_raw_fd(), &mut gro, n == 0, self.local.is_ipv6()) {
                Ok(r) if r.datagrams == 0 => break,
                Ok(r) => {
                    self.runs.gro_reads.fetch_add(r.runs as u64, Ordering::Relaxed);
                    self.runs.gro_datagrams.fetch_add(r.in_runs as u64, Ordering::Relaxed);
                }
                Err(e) if n > 0 => {
                    tracing::debug!("reading the ESP-in-UDP socket: {e}");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

/// Reads up to [`GRO_MSGS`] messages into `gro`'s buffers with one recvmmsg(2) on a socket
/// with UDP_GRO on: each message is a run of datagrams whose size the UDP_GRO control
/// message gives (none: one datagram). Waits for the first as long as the socket's receive
/// timeout allows when `wait`, else returns at once. `datagrams` 0: nothing came (an empty
/// datagram still counts one). Sources are IPv6 when `v6` (the socket's version).
fn recv_mmsg_gro(fd: RawFd, gro: &mut GroBuffers, wait: bool, v6: bool) -> io::Result<Runs> {
    #[repr(C, align(8))]
    #[derive(Clone, Copy)]
    struct Cmsg([u8; 64]);
    // SAFETY: as in send_mmsg, all-zero iovec and mmsghdr are valid values.
    let mut iov: [libc::iovec; GRO_MSGS] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; GRO_MSGS] = unsafe { std::mem::zeroed() };
    let mut names = Names::new();
    let mut ctl = [Cmsg([0; 64]); GRO_MSGS];
    let mut room = [0usize; GRO_MSGS];
    let mut m = 0;
    for (i, area) in gro.areas().enumerate().take(GRO_MSGS) {
        room[i] = area.len();
        iov[i].iov_base = area.as_mut_ptr().cast();
        iov[i].iov_len = area.len();
        m = i + 1;
    }
    if m == 0 {
        return Ok(Runs::default());
    }
    for i in 0..m {
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
        names.is_v6[i] = v6;
        (h.msg_name, h.msg_namelen) = names.raw(i);
        h.msg_control = ctl[i].0.as_mut_ptr().cast();
        h.msg_controllen = ctl[i].0.len();
    }
    let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    // SAFETY: each of the first `m` headers points at one iovec describing a distinct buffer
    // of `gro` (exclusively borrowed for the call) with its true length, at one socket
    // address of `names` (of the socket's version) and at one 8-byte-aligned control buffer of `ctl`, each with its true
    // length. The kernel writes at most those lengths into them, and the headers' lengths
    // and flags. All of it outlives the call; a null timeout means the socket's SO_RCVTIMEO.
    let r = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), m as libc::c_uint, flags, std::ptr::null_mut()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(Runs::default()),
            _ => Err(e),
        };
    }
    let n = (r as usize).min(m);
    let mut got = Runs::default();
    let mut lens = [0usize; GRO_MSGS];
    let mut segs = [0usize; GRO_MSGS];
    let mut srcs = [None; GRO_MSGS];
    for i in 0..n {
        let h = &hdrs[i].msg_hdr;
        lens[i] = (hdrs[i].msg_len as usize).min(room[i]);
        let ctl_len = (h.msg_controllen as usize).min(ctl[i].0.len());
        segs[i] = udp_gro_size(&ctl[i].0[..ctl_len]);
        srcs[i] = Some(names.get(i));
        let k = if segs[i] == 0 || lens[i] == 0 {
            1
        } else {
            lens[i].div_ceil(segs[i])
        };
        got.datagrams += k;
        if k > 1 {
            got.runs += 1;
            got.in_runs += k;
        }
    }
    gro.filled(n, &lens, &segs, &srcs);
    Ok(got)
}

/// The datagram size in a UDP_GRO control message among the control messages `ctl` (as
/// recvmsg(2) filled them: 64-bit Linux `cmsghdr`s, each padded to 8 bytes); 0 when there
/// is none. Bounded by the buffer: each step moves forward by at least one header.
fn udp_gro_size(ctl: &[u8]) -> usize {
    const HDR: usize = 16; // size_t cmsg_len; int cmsg_level; int cmsg_type
    let mut off = 0;
    while off + HDR <= ctl.len() {
        let c = &ctl[off..];
        let len = u64::from_ne_bytes(c[..8].try_into().expect("8 bytes")) as usize;
        let level = i32::from_ne_bytes(c[8..12].try_into().expect("4 bytes"));
        let kind = i32::from_ne_bytes(c[12..16].try_into().expect("4 bytes"));
        if len < HDR || len > c.len() {
            return 0;
        }
        if level == libc::SOL_UDP && kind == libc::UDP_GRO && len >= HDR + 4 {
            return i32::from_ne_bytes(c[HDR..HDR + 4].try_into().expect("4 bytes")).max(0) as usize;
        }
        off += len.div_ceil(8) * 8;
    }
    0
}

impl UnderlayRx for UdpEncap {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // Single reads (the daemon uses recv_batch): the datagram after room for the IP
        // header, which decapsulation writes; anything but ESP reads as nothing.
        let h = header_len(self.local);
        if buf.len() <= h {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let Some((n, from)) = recv_from(self.sock.as_raw_fd(), &mut buf[h..], self.local.is_ipv6())? else {
            return Ok(None);
        };
        let (kind, len) = decapsulate(buf, n, header_src(&self.peers.load(), from), self.local);
        Ok((kind == RxKind::Packet).then_some(len))
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
            header_len(self.local),
            &mut lens,
            Some((&mut srcs, self.local.is_ipv6())),
        )?;
        let peers = self.peers.load();
        for i in 0..n {
            let src = header_src(&peers, srcs[i]);
            let area = batch.recv_area(i);
            let (kind, len) = decapsulate(area, lens[i], src, self.local);
            batch.set_context(i, len, self.context(kind, Some(srcs[i])));
        }
        Ok(n)
    }

    fn authenticated(&self, peer: IpAddr, src: SocketAddr) {
        // Only an address's sole endpoint follows its ESP (a configured peer, or one client
        // IKE added there): of clients behind one NAT address the SA that authenticated the
        // packet does not say which, and another's endpoint must not move to this port.
        // IKE's authenticated messages move each of those ([`UdpEncap::moved`]).
        let peers = self.peers.load();
        match peers.sole(peer) {
            Some(e) => e.learn(src),
            None if peers.at(peer).nth(1).is_some() && !peers.at(peer).any(|e| e.current() == src) => {
                tracing::debug!("ESP-in-UDP: ESP of {peer} from {src}: several clients at that address, none moved");
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::tests::not_run;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Instant;

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::from(a)
    }

    fn v6(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn decapsulation_builds_a_valid_ipv4_header_and_esp_payload_undoes_it() {
        let esp: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7) | 1).collect();
        let mut area = vec![0xaa; 2000];
        area[outer::UDP_IPV4_HEADER..outer::UDP_IPV4_HEADER + esp.len()].copy_from_slice(&esp);
        let (src, dst) = (v4([192, 0, 2, 1]), v4([198, 51, 100, 2]));
        let (kind, len) = decapsulate(&mut area, esp.len(), src, dst);
        assert_eq!((kind, len), (RxKind::Packet, 120));
        let h = etherparse::Ipv4HeaderSlice::from_slice(&area[..len]).unwrap();
        assert_eq!(h.protocol(), etherparse::IpNumber::ENCAPSULATING_SECURITY_PAYLOAD);
        assert_eq!(
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr())),
            (src, dst)
        );
        assert_eq!(h.total_len(), 120);
        assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
        assert_eq!(udp_encap::socket_payload(&area[..len]), Some(&esp[..]));
        // Not ESP: nothing written before the payload.
        area[outer::UDP_IPV4_HEADER] = udp_encap::KEEPALIVE;
        let mut before = area.clone();
        assert_eq!(decapsulate(&mut area, 1, src, dst), (RxKind::Keepalive, 0));
        assert_eq!(area, before);
        // Lengths beyond the area and tiny areas are cut, not a panic.
        before[outer::UDP_IPV4_HEADER..outer::UDP_IPV4_HEADER + 8].copy_from_slice(&[1; 8]);
        assert_eq!(decapsulate(&mut before, usize::MAX, src, dst).1, 2000);
        assert_eq!(decapsulate(&mut [0u8; 20], 5, src, dst), (RxKind::Runt, 0));
        // Addresses of two versions: no header, a runt.
        assert_eq!(decapsulate(&mut before, 100, v6("fd00::1"), dst), (RxKind::Runt, 0));
    }

    /// A non-ESP (IKE) datagram is kept, moved to the start of the area for its consumer.
    #[test]
    fn a_non_esp_datagram_is_kept_for_its_consumer() {
        let ike = [&udp_encap::NON_ESP_MARKER[..], &[0x21; 40]].concat();
        let mut area = vec![0xaa; 200];
        area[outer::UDP_IPV4_HEADER..outer::UDP_IPV4_HEADER + ike.len()].copy_from_slice(&ike);
        let (src, dst) = (v4([192, 0, 2, 1]), v4([198, 51, 100, 2]));
        assert_eq!(decapsulate(&mut area, ike.len(), src, dst), (RxKind::NonEsp, ike.len()));
        assert_eq!(&area[..ike.len()], &ike[..]);
    }

    #[test]
    fn decapsulation_over_ipv6_builds_an_ipv6_header() {
        let esp: Vec<u8> = (0..77u8).map(|i| i | 0x10).collect();
        let mut area = vec![0xaa; 1000];
        area[outer::IPV6_HEADER..outer::IPV6_HEADER + esp.len()].copy_from_slice(&esp);
        let (src, dst) = (v6("fd00:99::2"), v6("fd00:99::1"));
        assert_eq!(header_len(dst), 40);
        let (kind, len) = decapsulate(&mut area, esp.len(), src, dst);
        assert_eq!((kind, len), (RxKind::Packet, 40 + 77));
        let h = etherparse::Ipv6HeaderSlice::from_slice(&area[..len]).unwrap();
        assert_eq!(h.next_header(), etherparse::IpNumber::ENCAPSULATING_SECURITY_PAYLOAD);
        assert_eq!(usize::from(h.payload_length()), esp.len());
        assert_eq!(
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr())),
            (src, dst)
        );
        assert_eq!((h.traffic_class(), h.flow_label().value()), (0, 0));
        assert_eq!(udp_encap::socket_payload(&area[..len]), Some(&esp[..]));
        // An area shorter than the IPv6 header, a length beyond the area: no panic.
        assert_eq!(decapsulate(&mut [0u8; 40], 8, src, dst), (RxKind::Runt, 0));
        assert_eq!(decapsulate(&mut area, usize::MAX, src, dst), (RxKind::Packet, 1000));
    }

    #[test]
    fn gro_buffers_give_back_each_datagram_of_each_run() {
        let mut g = GroBuffers::new();
        assert!(g.next_datagram().is_none());
        g.allocate();
        // Message 0: three datagrams of 100, 100 and 37 bytes; message 1: one of 5;
        // message 2: a run whose size is larger than the message (one datagram).
        let runs: [&[usize]; 4] = [&[100, 100, 37], &[5], &[], &[60]];
        let mut want = Vec::new();
        let mut lens = [0; 4];
        for (m, (run, area)) in runs.iter().zip(g.areas()).enumerate() {
            let mut off = 0;
            for (k, &n) in run.iter().enumerate() {
                let d: Vec<u8> = (0..n).map(|j| (m * 50 + k * 7 + j) as u8).collect();
                area[off..off + n].copy_from_slice(&d);
                off += n;
                want.push(d);
            }
            if run.is_empty() {
                want.push(Vec::new()); // an empty datagram
            }
            lens[m] = off;
        }
        let src = Some(std::net::SocketAddr::from(([192, 0, 2, 7], 4500)));
        g.filled(4, &lens, &[100, 0, 0, 1000], &[src; 4]);
        let mut got = Vec::new();
        while let Some((d, s)) = g.next_datagram() {
            assert_eq!(s, src);
            got.push(d.to_vec());
        }
        assert_eq!(got, want);
        assert!(g.next_datagram().is_none());
        // Lengths past the buffers and counts past the arrays are cut, not a panic.
        g.filled(99, &[usize::MAX; 9], &[1000; 9], &[None; 9]);
        let mut n = 0;
        while g.next_datagram().is_some() {
            n += 1;
        }
        assert_eq!(n, GRO_MSGS * GRO_MSG_LEN.div_ceil(1000));
    }

    /// Runs of equal-sized datagrams go as UDP GSO sends and arrive as the datagrams they
    /// were, in order, with the odd sizes in between; a run ends where the destination
    /// changes (two receivers, interleaved).
    #[test]
    fn udp_gso_sends_arrive_as_the_datagrams_they_were() {
        let rx: Vec<std::net::UdpSocket> = (0..2)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for r in &rx {
            r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sizes = [1000, 1000, 1000, 700, 1000, 1000, 3, 1200, 1200, 1200, 1200, 1200];
        let dst = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0];
        let data: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut to = Names::new();
        for (i, &d) in dst.iter().enumerate() {
            to.set(i, rx[d].local_addr().unwrap());
        }
        let sent = send_gso(tx.as_raw_fd(), &refs, &mut to).unwrap();
        assert_eq!(sent.datagrams, sizes.len());
        // Runs: [1000 x3, 700], [1000, 1000, 3], [1200, 1200] to 0, [1200, 1200] to 1, [1200].
        assert_eq!((sent.runs, sent.in_runs), (4, 11));
        let mut buf = [0u8; 70000];
        for (d, &r) in data.iter().zip(&dst) {
            let n = rx[r].recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &d[..]);
        }
    }

    /// ESP in UDP with UDP GSO on the way out and UDP GRO on the way in (over loopback,
    /// which keeps GSO sends whole): every datagram comes out of `recv_batch` as it was sent,
    /// in order, ESP with its IPv4 header rebuilt, keepalives and runts (an empty one too)
    /// sorted out, across more than one batch.
    #[test]
    fn gso_sends_come_apart_again_through_gro() {
        let rx = UdpEncap::open(LO, 0, &[LO], 9, Duration::from_millis(200)).unwrap();
        assert!(rx.gro, "this kernel (Linux >= 5.0) takes UDP_GRO");
        let mut to = Names::new();
        for i in 0..BATCH {
            to.set(i, SocketAddr::new(LO, rx.local_port().unwrap()));
        }
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sizes = vec![1000; 40];
        sizes.extend([300, 1, 0, 1200, 1200, 5]);
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| match n {
                1 => vec![udp_encap::KEEPALIVE],
                _ => (0..n).map(|j| (i * 3 + j) as u8 | 1).collect(),
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut sent = 0;
        while sent < refs.len() {
            let k = (refs.len() - sent).min(BATCH);
            sent += send_gso(tx.as_raw_fd(), &refs[sent..sent + k], &mut to)
                .unwrap()
                .datagrams;
        }
        let mut b = Batch::new();
        let mut got: Vec<(RxKind, Vec<u8>)> = Vec::new();
        for _ in 0..20 {
            if got.len() == data.len() {
                break;
            }
            let n = rx.recv_batch(&mut b).unwrap();
            for i in 0..n {
                let p = b.packet(i);
                let kind = b.kind(i);
                got.push((
                    kind,
                    if kind == RxKind::Packet {
                        p[outer::UDP_IPV4_HEADER..].to_vec()
                    } else {
                        Vec::new()
                    },
                ));
                if kind == RxKind::Packet {
                    assert_eq!(&p[12..20], &[127, 0, 0, 1, 127, 0, 0, 1]);
                }
            }
        }
        let want: Vec<(RxKind, Vec<u8>)> = data
            .iter()
            .map(|d| match udp_encap::classify(d) {
                Payload::Esp => (RxKind::Packet, d.clone()),
                Payload::Keepalive => (RxKind::Keepalive, Vec::new()),
                Payload::NonEsp => (RxKind::NonEsp, Vec::new()),
                Payload::Runt => (RxKind::Runt, Vec::new()),
            })
            .collect();
        let brief = |v: &[(RxKind, Vec<u8>)]| v.iter().map(|(k, d)| (*k, d.len())).collect::<Vec<_>>();
        assert_eq!(brief(&got), brief(&want));
        // Loopback keeps a GSO send whole, so the runs came in coalesced: the 40 equal
        // datagrams (sent as runs of 32 and 8 + 300 + keepalive), and 1200, 1200, 5.
        let r = rx.runs();
        assert!(r.gro_reads >= 3 && r.gro_datagrams >= 40, "{r:?}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "datagram {i}");
        }
    }

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    const LO6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

    /// Reads from any socket of `g` until a batch comes (5 s at most).
    fn recv_any(g: &[UdpEncap]) -> Batch {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            for u in g {
                let mut b = Batch::new();
                if u.recv_batch(&mut b).unwrap() > 0 {
                    return b;
                }
            }
        }
        panic!("nothing arrived on any socket of the group");
    }

    /// ESP-in-UDP sockets of one group share the port and the learned endpoints; a datagram
    /// sent to the port arrives on one of them.
    #[test]
    fn udp_group_shares_port_and_endpoint() {
        let g = UdpEncap::open_group(LO, 0, &[LO], 4500, 2, Duration::from_millis(50)).unwrap();
        let port = g[0].local_port().unwrap();
        assert_eq!(g[1].local_port().unwrap(), port);
        assert_eq!(g[0].endpoint(LO), Some(SocketAddr::new(LO, 4500)));
        let from = SocketAddr::new(LO, 40001);
        g[1].authenticated(LO, from);
        assert_eq!(g[0].endpoint(LO), Some(from));
        assert_eq!(g[0].endpoints(), vec![(LO, from, true)]);
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(&[0xff], (Ipv4Addr::LOCALHOST, port)).unwrap();
        let b = recv_any(&g);
        assert_eq!(b.kind(0), RxKind::Keepalive);
        // Peers of the other IP version are refused.
        assert!(UdpEncap::open(LO, 0, &[LO6], 4500, Duration::ZERO).is_err());
    }

    /// Two peers on one socket: learning one peer's endpoint leaves the other's alone;
    /// each sealed packet goes to its own peer's endpoint, in one batch; keepalives go to
    /// both; a packet to an address that is not a peer (or not ESP) is refused alone.
    #[test]
    fn udp_peers_have_their_own_endpoints() {
        let (b, c): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let g = UdpEncap::open_group(LO, 0, &[b, c], 4500, 1, Duration::from_millis(50)).unwrap();
        let sb = std::net::UdpSocket::bind((b, 0)).unwrap();
        let sc = std::net::UdpSocket::bind((c, 0)).unwrap();
        for s in [&sb, &sc] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        g[0].authenticated(b, sb.local_addr().unwrap());
        assert_eq!(g[0].endpoint(b), Some(sb.local_addr().unwrap()));
        assert_eq!(g[0].endpoint(c), Some(SocketAddr::new(c, 4500)), "C's is untouched");
        g[0].authenticated("127.0.0.9".parse().unwrap(), sc.local_addr().unwrap());
        assert_eq!(
            g[0].endpoint(c),
            Some(SocketAddr::new(c, 4500)),
            "not a peer: nothing moves"
        );
        g[0].authenticated(c, sc.local_addr().unwrap());
        let esp = |dst: IpAddr, tag: u8| {
            let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0, 127, 0, 0, 1];
            if let IpAddr::V4(d) = dst {
                p.extend_from_slice(&d.octets());
            }
            p.extend_from_slice(&[tag; 16]);
            let l = p.len() as u16;
            p[2..4].copy_from_slice(&l.to_be_bytes());
            p
        };
        let (p1, p2, p3) = (esp(b, 1), esp(c, 2), esp(b, 3));
        assert_eq!(g[0].send_batch(&[&p1, &p2, &p3], &[b, c, b]).unwrap(), 3);
        let mut buf = [0u8; 64];
        for (s, tags) in [(&sb, [1u8, 3]), (&sc, [2, 2])] {
            for t in tags.iter().take(if tags[0] == tags[1] { 1 } else { 2 }) {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                assert_eq!(from.port(), g[0].local_port().unwrap());
                assert_eq!(&buf[..n], &[*t; 16], "ESP payload only, to its peer");
            }
        }
        assert_eq!(g[0].send_keepalives().0, 2);
        for s in [&sb, &sc] {
            assert_eq!(s.recv_from(&mut buf).unwrap().0, 1);
            assert_eq!(buf[0], 0xff);
        }
        // A packet to a non-peer first: refused alone; later in a batch: the ones before go.
        let x: IpAddr = "127.0.0.9".parse().unwrap();
        assert!(g[0].send_batch(&[&p1], &[x]).is_err());
        assert_eq!(g[0].send_batch(&[&p1, &p2], &[b, x]).unwrap(), 1);
        assert!(g[0].send_batch(&[&[0x45u8; 20][..]], &[b]).is_err(), "not ESP");
    }

    /// IKE adds a peer that is not configured (`remote_addrs = %any`): every socket of the
    /// group can send to it at the endpoint IKE saw, the receiving side names it; taking
    /// it out again leaves the configured peer; a configured peer is only moved, never
    /// removed; the added peers are bounded.
    #[test]
    fn ike_adds_and_removes_peers_at_run_time() {
        let (b, c): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let g = UdpEncap::open_group(LO, 0, &[b], 4500, 2, Duration::from_millis(50)).unwrap();
        let sc = std::net::UdpSocket::bind((c, 0)).unwrap();
        sc.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let at = sc.local_addr().unwrap();
        let mut esp = vec![0x45, 0, 0, 36, 0, 0, 0, 0, 64, 50, 0, 0, 127, 0, 0, 1, 127, 0, 0, 3];
        esp.extend_from_slice(&[7; 16]);
        assert!(g[0].send_batch(&[&esp], &[c]).is_err(), "not a peer yet");
        assert!(g[1].add_peer(at, 0x0707_0707, 1));
        assert_eq!(g[0].endpoint(c), Some(at));
        assert_eq!(
            g[0].endpoints(),
            vec![(b, SocketAddr::new(b, 4500), false), (c, at, true)]
        );
        assert_eq!(g[0].send_batch(&[&esp], &[c]).unwrap(), 1);
        let mut buf = [0u8; 64];
        assert_eq!(sc.recv_from(&mut buf).unwrap().0, 16);
        assert_eq!(header_src(&g[0].peers.load(), at), c, "datagrams from it are its");
        // Added twice: one entry; a configured peer given to add_peer only moves.
        assert!(g[0].add_peer(at, 0x0707_0707, 1));
        let moved = SocketAddr::new(b, 40000);
        assert!(g[0].add_peer(moved, 0x0808_0808, 2));
        assert_eq!(g[0].endpoints().len(), 2);
        assert_eq!(g[1].endpoint(b), Some(moved));
        g[0].remove_peer(c);
        assert_eq!(g[1].endpoints().len(), 2, "its child SA still uses it");
        g[0].remove_child(1);
        g[0].remove_child(2);
        g[0].remove_peer(b);
        assert_eq!(g[1].endpoints(), vec![(b, moved, true)], "the configured peer stays");
        assert!(g[0].send_batch(&[&esp], &[c]).is_err(), "gone");
        // Bounded: MAX_DYNAMIC_PEERS added, then no more.
        for i in 0..MAX_DYNAMIC_PEERS as u32 {
            let p = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(g[0].add_peer(SocketAddr::new(p, 4500), i, 100 + i));
        }
        let one_more: IpAddr = "10.255.0.1".parse().unwrap();
        assert!(!g[0].add_peer(SocketAddr::new(one_more, 4500), 1, 99));
        assert_eq!(g[0].endpoint(one_more), None);
    }

    /// Issue #31 defect 5: two road warriors behind one NAT address (127.0.0.7 here), each
    /// with its own port and child SA, added by IKE (`%any`). Each SA's sealed packets go
    /// to its own client's port, also in one batch; ESP from one client's port moves nobody;
    /// IKE moving one client leaves the other; taking one client's SA out leaves the other's.
    /// (Before: the address had one endpoint, which B's handshake moved to B's port, and all
    /// of A's packets went there.)
    #[test]
    fn two_clients_behind_one_nat_address_keep_their_own_endpoints() {
        let nat: IpAddr = "127.0.0.7".parse().unwrap();
        let g = UdpEncap::open_group(LO, 0, &[], 4500, 2, Duration::from_millis(50)).unwrap();
        let client = || {
            let s = std::net::UdpSocket::bind((nat, 0)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let (a, b) = (client(), client());
        let (at_a, at_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        // A's child SA: out SPI 0xa0a0a0a0, in 0x1a; B's: out 0xb0b0b0b0, in 0x1b.
        assert!(g[0].add_peer(at_a, 0xa0a0_a0a0, 0x1a));
        assert!(g[1].add_peer(at_b, 0xb0b0_b0b0, 0x1b));
        assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a));
        assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(at_b));
        assert_eq!(g[1].endpoints(), vec![(nat, at_a, true), (nat, at_b, true)]);
        let esp = |spi: u32, tag: u8| {
            let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0, 127, 0, 0, 1, 127, 0, 0, 7];
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&[tag; 12]);
            let l = p.len() as u16;
            p[2..4].copy_from_slice(&l.to_be_bytes());
            p
        };
        let got = |s: &std::net::UdpSocket| {
            let mut buf = [0u8; 64];
            let n = s.recv(&mut buf).unwrap();
            (u32::from_be_bytes(buf[..4].try_into().unwrap()), buf[4], n)
        };
        let expect_each = |g: &UdpEncap, what: &str| {
            let (pa, pb) = (esp(0xa0a0_a0a0, 1), esp(0xb0b0_b0b0, 2));
            assert_eq!(g.send_batch(&[&pa, &pb, &pa], &[nat; 3]).unwrap(), 3, "{what}");
            assert_eq!(got(&a), (0xa0a0_a0a0, 1, 16), "{what}: A's first packet at A's port");
            assert_eq!(got(&a), (0xa0a0_a0a0, 1, 16), "{what}: A's second packet at A's port");
            assert_eq!(got(&b), (0xb0b0_b0b0, 2, 16), "{what}: B's packet at B's port");
        };
        expect_each(&g[0], "both up");
        // ESP authenticated from A's port, and from a third port: nobody moves (two clients
        // at that address: the data plane cannot tell whose).
        g[0].authenticated(nat, at_a);
        g[0].authenticated(nat, SocketAddr::new(nat, 9));
        expect_each(&g[1], "after ESP from A's port and another");
        // A packet of an SA that is not IKE's to that address: neither client's, refused.
        assert!(g[0].send_batch(&[&esp(0xc0c0_c0c0, 3)], &[nat]).is_err());
        // IKE: A's NAT mapping moves to a new port; B stays.
        let a2 = client();
        let at_a2 = a2.local_addr().unwrap();
        g[1].moved(at_a, at_a2);
        assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a2));
        assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(at_b), "B's endpoint is B's");
        // The NAT gives A's old port to a third client C: its own endpoint, A's stays moved.
        assert!(g[0].add_peer(at_a, 0xc0c0_c0c0, 0x1c));
        assert_eq!(g[0].child_endpoint(nat, 0xc0c0_c0c0), Some(at_a));
        assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), Some(at_a2));
        assert_eq!(g[0].endpoints().len(), 3);
        g[0].remove_child(0x1c);
        // A's child SA goes: B's endpoint and SA stay, and so does the address's peer
        // (IKE's remove_peer when A's IKE SA is gone takes out only unused endpoints).
        g[0].remove_child(0x1a);
        g[0].remove_peer(nat);
        assert_eq!(g[1].endpoints(), vec![(nat, at_b, true)]);
        assert_eq!(g[0].child_endpoint(nat, 0xa0a0_a0a0), None);
        assert_eq!(g[0].send_batch(&[&esp(0xb0b0_b0b0, 4)], &[nat]).unwrap(), 1);
        assert_eq!(got(&b), (0xb0b0_b0b0, 4, 16), "B's packets still at B's port");
        // B alone at that address now: its ESP from a new port moves it (NAT rebinding).
        let b2 = client();
        g[0].authenticated(nat, b2.local_addr().unwrap());
        assert_eq!(g[0].child_endpoint(nat, 0xb0b0_b0b0), Some(b2.local_addr().unwrap()));
        g[0].remove_child(0x1b);
        assert!(g[0].endpoints().is_empty());
    }

    /// ESP in UDP over IPv6: the datagram comes back with an IPv6 header (the peer's
    /// configured address to the local one) in front of the ESP payload.
    #[test]
    fn udp_over_ipv6_rebuilds_an_ipv6_header() {
        let g = match UdpEncap::open_group(LO6, 0, &[LO6], 4500, 1, Duration::from_millis(50)) {
            Ok(g) => g,
            Err(e) => {
                not_run(&format!("no IPv6 loopback here: {e}"));
                return;
            }
        };
        let client = std::net::UdpSocket::bind("[::1]:0").unwrap();
        let esp = [0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 0xab, 0xcd];
        client
            .send_to(&esp, (Ipv6Addr::LOCALHOST, g[0].local_port().unwrap()))
            .unwrap();
        let b = recv_any(&g);
        assert_eq!(b.kind(0), RxKind::Packet);
        let p = b.packet(0);
        assert_eq!(p.len(), 40 + esp.len());
        assert_eq!(
            (p[0] >> 4, p[6], usize::from(u16::from_be_bytes([p[4], p[5]]))),
            (6, 50, esp.len())
        );
        assert_eq!(&p[8..24], &Ipv6Addr::LOCALHOST.octets());
        assert_eq!(&p[24..40], &Ipv6Addr::LOCALHOST.octets());
        assert_eq!(&p[40..], &esp);
        assert_eq!(b.src(0), Some(client.local_addr().unwrap()));
        // And the single read path.
        client
            .send_to(&esp, (Ipv6Addr::LOCALHOST, g[0].local_port().unwrap()))
            .unwrap();
        let mut buf = vec![0u8; 2048];
        let t0 = Instant::now();
        let n = loop {
            if let Some(n) = g[0].recv(&mut buf).unwrap() {
                break n;
            }
            assert!(t0.elapsed() < Duration::from_secs(5));
        };
        assert_eq!(&buf[..n], p);
    }
}
