//! The daemon's core, with no I/O of its own: packets read from the TUN device go through
//! the engine's data plane ([`DataPlane::outbound`]) and out to the underlay; packets read
//! from the underlay go through [`DataPlane::inbound`] and into the TUN device. Each thread
//! loads the current data plane per packet (a lock-free pointer load) and brings its own
//! [`Worker`] in its [`PacketBuffer`]; only the ticker takes the control side's lock, so the
//! packet threads never wait for each other or for it. The devices are traits ([`TunIo`],
//! [`UnderlayTx`], [`UnderlayRx`]), so the whole loop runs in tests on in-memory fakes; the
//! real ones are in [`crate::sys`].
//!
//! Every packet that does not make it is counted: by the engine (per SA and reason) when the
//! engine dropped it, else in [`DaemonCounters`]. Nothing a peer or the TUN device sends can
//! stop the loops: errors are counted and logged (the first, then at each power of two).

use crate::counters::{add, inc, DaemonCounters, DaemonSnapshot};
use crate::encap::GroBuffers;
use crate::offload::{self, Coalescer, Segmenter, VnetHdr, GSO_NONE, VNET_HDR_LEN};
use ipsec_core::PacketBuf;
use ipsec_engine::overhead::{Calculator, Inner};
use ipsec_engine::{
    Action, DataPlane, Direction, Dropped, Engine, Event, PlaneHandle, SaConfig, Snapshot, Verdict, Worker,
};
use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Bytes kept free in front of every packet for the headers a bundle adds. The worst bundle
/// the engine accepts is three tunnel-mode SAs with IPv6 outer headers (3 × 40) plus the AH
/// header with the largest ICV and its padding (12 + 32 + 4), the ESP header and the largest
/// IV (8 + 16) and the IPComp header (4): 212 bytes. The test
/// `headroom_and_tailroom_fit_the_worst_bundle` seals a 60 KB packet through IPComp, ESP and
/// AH with IPv6 tunnels and the largest ICVs and checks the headers it took.
pub const HEADROOM: usize = 512;
/// The largest IP packet read from a device (the IPv4 and IPv6 length fields' limit without
/// jumbograms); inbound IPComp decompresses into the room up to this size.
pub const MAX_PACKET: usize = 65535;
/// Bytes kept free after the packet for the ESP trailer (padding, pad length, next header)
/// and ICV: at most 32 + 2 + a block and alignment; generously rounded.
pub const TAILROOM: usize = 1024;
/// The size of one [`PacketBuffer`].
pub const BUF_LEN: usize = HEADROOM + MAX_PACKET + TAILROOM;

/// One thread's packet buffer with head- and tailroom, allocated once and reused for every
/// packet (the loops allocate nothing per packet), and the thread's [`Worker`] (its IV
/// generator).
pub struct PacketBuffer {
    data: Box<[u8]>,
    worker: Worker,
}

impl Default for PacketBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBuffer {
    /// A zeroed buffer of [`BUF_LEN`] bytes and a worker whose IV generator is seeded by the
    /// operating system.
    ///
    /// # Panics
    ///
    /// If the operating system has no entropy to give (`getrandom` fails).
    pub fn new() -> Self {
        PacketBuffer {
            data: vec![0; BUF_LEN].into_boxed_slice(),
            worker: Worker::new()
                .expect("the OS entropy source works")
                .with_clock(monotonic_ns),
        }
    }

    /// Where a device reads the next packet into: [`MAX_PACKET`] bytes after the headroom.
    pub fn recv_area(&mut self) -> &mut [u8] {
        &mut self.data[HEADROOM..HEADROOM + MAX_PACKET]
    }

    /// Copies `packet` into the receive area (for tests and fakes); returns its length.
    ///
    /// # Panics
    ///
    /// If the packet is longer than [`MAX_PACKET`].
    pub fn load(&mut self, packet: &[u8]) -> usize {
        self.recv_area()[..packet.len()].copy_from_slice(packet);
        packet.len()
    }

    /// The `len` bytes at the start of the receive area as an engine packet buffer, and the
    /// worker.
    fn parts(&mut self, len: usize) -> (PacketBuf<'_>, &mut Worker) {
        let len = len.min(MAX_PACKET);
        let buf = PacketBuf::new(&mut self.data, HEADROOM, len).expect("HEADROOM + MAX_PACKET <= BUF_LEN");
        (buf, &mut self.worker)
    }
}

/// Nanoseconds on a monotonic clock (`Instant`, i.e. `clock_gettime(CLOCK_MONOTONIC)` through
/// the vDSO): the workers' clock for timing adaptive IPComp SAs' compression and crypto.
pub fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The TUN device: inner IPv4 and IPv6 packets, without any packet-info header.
pub trait TunIo: Sync {
    /// Reads one packet into `buf`; `Ok(None)` when none came within the device's wait
    /// interval (so the caller can check whether to stop).
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Writes one packet.
    fn send(&self, packet: &[u8]) -> io::Result<()>;
    /// Reads one more packet into `buf` if one is ready now, without waiting: how the
    /// outbound loop fills a batch after [`recv`](Self::recv) woke it. The default: none.
    fn recv_more(&self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    /// Whether every read and write carries a `virtio_net_hdr` in front of the packet
    /// (IFF_VNET_HDR with TSO offloads: reads may be TCP super-packets, see
    /// [`crate::offload`]). The default: no.
    fn offload(&self) -> bool {
        false
    }
    /// Writes `packet` behind the virtio-net header `hdr` (only when [`offload`](Self::offload)
    /// is on; the default writes the packet alone).
    fn send_vnet(&self, _hdr: &[u8; crate::offload::VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
        self.send(packet)
    }
}

/// The underlay's sending side: whole IPv4 or IPv6 packets, headers included, as the engine
/// built them.
pub trait UnderlayTx: Sync {
    /// Sends `packet` (a complete IP packet) towards `dst`, its outer destination.
    fn send_to(&self, packet: &[u8], dst: IpAddr) -> io::Result<()>;
    /// Sends `packets[i]` towards `dsts[i]` from the first on, in as few system calls as it
    /// can; returns how many were sent (at least 1), or the error of the first one (which
    /// the caller counts and skips). The default sends the first with [`send_to`](Self::send_to).
    fn send_batch(&self, packets: &[&[u8]], dsts: &[IpAddr]) -> io::Result<usize> {
        self.send_to(packets[0], dsts[0]).map(|()| 1)
    }
}

/// An underlay over both IP versions: each packet goes to the sender of its destination's
/// family (a run of one family per call); a packet for a family without one is an error
/// (counted as a send error, never sent elsewhere).
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
    fn send_to(&self, packet: &[u8], dst: IpAddr) -> io::Result<()> {
        self.of(&dst)?.send_to(packet, dst)
    }

    fn send_batch(&self, packets: &[&[u8]], dsts: &[IpAddr]) -> io::Result<usize> {
        let Some(first) = dsts.first() else { return Ok(0) };
        let run = dsts.iter().take_while(|d| d.is_ipv4() == first.is_ipv4()).count();
        self.of(first)?.send_batch(&packets[..run], &dsts[..run])
    }
}

/// One of the underlay's receiving sockets: whole IPv4 or IPv6 packets, headers included
/// (rebuilt by the socket where the kernel does not hand them over).
pub trait UnderlayRx: Sync {
    /// Reads one packet into `buf`; `Ok(None)` when none came within the wait interval.
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Reads up to [`BATCH`] packets into `batch` (waiting for the first as
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
}

/// How many packets the loops move per wakeup at most.
pub const BATCH: usize = 32;

/// What a receiving socket found in one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxKind {
    /// A packet for the engine (a whole IP packet in the slot's receive area).
    Packet,
    /// An RFC 3948 NAT-keepalive (one 0xFF byte): counted, nothing else.
    Keepalive,
    /// A UDP datagram with the non-ESP marker (IKE): tunneld has no IKE, so it is counted
    /// and dropped.
    NonEsp,
    /// A datagram too short to be either: counted and dropped.
    Runt,
}

/// [`BATCH`] packet buffers (each with head- and tailroom, as [`PacketBuffer`]'s), what was
/// received in each, and the thread's [`Worker`]. Allocated once per thread.
pub struct Batch {
    data: Vec<Box<[u8]>>,
    len: [usize; BATCH],
    kind: [RxKind; BATCH],
    src: [Option<SocketAddr>; BATCH],
    worker: Worker,
    gro: Coalescer,
    /// Coalesced datagrams read from a UDP socket with UDP GRO, not yet taken apart.
    pub(crate) gro_rx: GroBuffers,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    /// [`BATCH`] zeroed buffers of [`BUF_LEN`] bytes and a worker seeded by the OS.
    ///
    /// # Panics
    ///
    /// If the operating system has no entropy to give (`getrandom` fails).
    pub fn new() -> Self {
        Batch {
            data: (0..BATCH).map(|_| vec![0; BUF_LEN].into_boxed_slice()).collect(),
            len: [0; BATCH],
            kind: [RxKind::Packet; BATCH],
            src: [None; BATCH],
            worker: Worker::new().expect("the OS entropy source works"),
            gro: Coalescer::new(),
            gro_rx: GroBuffers::new(),
        }
    }

    /// Copies the next datagram of [`gro_rx`](Self::gro_rx) into slot `i`'s receive area
    /// from byte `skip` on (cut to the area): its length and source, or `None` when every
    /// datagram has been taken.
    pub(crate) fn fill_from_gro(&mut self, i: usize, skip: usize) -> Option<(usize, Option<SocketAddr>)> {
        let (d, src) = self.gro_rx.next_datagram()?;
        let area = &mut self.data[i][HEADROOM + skip.min(MAX_PACKET)..HEADROOM + MAX_PACKET];
        let n = d.len().min(area.len());
        area[..n].copy_from_slice(&d[..n]);
        Some((n, src))
    }

    /// Slot `i`'s receive area: [`MAX_PACKET`] bytes after [`HEADROOM`].
    pub fn recv_area(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i][HEADROOM..HEADROOM + MAX_PACKET]
    }

    /// Every slot's receive area, in order.
    pub fn recv_areas(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.data.iter_mut().map(|d| &mut d[HEADROOM..HEADROOM + MAX_PACKET])
    }

    /// Records what slot `i` received: `len` bytes of `kind` from `src`.
    pub fn set(&mut self, i: usize, len: usize, kind: RxKind, src: Option<SocketAddr>) {
        self.len[i] = len.min(MAX_PACKET);
        self.kind[i] = kind;
        self.src[i] = src;
    }

    /// What slot `i` received.
    pub fn kind(&self, i: usize) -> RxKind {
        self.kind[i]
    }

    /// Where slot `i` came from, if the socket said.
    pub fn src(&self, i: usize) -> Option<SocketAddr> {
        self.src[i]
    }

    /// The `len` bytes in slot `i`'s receive area.
    pub fn packet(&self, i: usize) -> &[u8] {
        &self.data[i][HEADROOM..HEADROOM + self.len[i]]
    }

    /// Moves slot `from` to slot `to` (swapping buffers, not copying bytes).
    fn swap(&mut self, to: usize, from: usize) {
        self.data.swap(to, from);
        self.len.swap(to, from);
        self.kind.swap(to, from);
        self.src.swap(to, from);
    }
}

/// A [`Batch`]'s buffers and lengths as engine packet buffers (packets after the headroom).
fn packet_bufs<'a>(data: &'a mut [Box<[u8]>], len: &[usize; BATCH]) -> [PacketBuf<'a>; BATCH] {
    let mut slots = data.iter_mut().zip(len.iter());
    std::array::from_fn(|_| {
        let (d, &l) = slots.next().expect("a Batch has BATCH buffers");
        PacketBuf::new(d, HEADROOM, l).expect("HEADROOM + MAX_PACKET <= BUF_LEN")
    })
}

/// What the daemon (not the engine) dropped a packet for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonDrop {
    /// From the TUN device, and not IPv4 or IPv6 ([`DaemonCounters::not_ip`]).
    NotIp,
    /// A bypass policy let it through in the clear ([`DaemonCounters::bypass_dropped`]).
    Bypass,
    /// Sealed, but not to one of the peers ([`DaemonCounters::not_to_peer`]).
    NotToPeer,
}

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sealed and sent to the peer, or opened and written to the TUN device.
    Forwarded,
    /// The engine dropped it (and counted it under its reason, at its SA if it had one).
    Engine(Dropped),
    /// The daemon dropped it (and counted it).
    Daemon(DaemonDrop),
    /// Writing it failed; counted as a send or TUN write error.
    Lost(io::ErrorKind),
}

/// Every counter at one moment: the stats file's content.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds since the daemon started.
    pub uptime_seconds: u64,
    /// The daemon's counters.
    pub daemon: DaemonSnapshot,
    /// The engine's counters (per SA and direction, drops by reason).
    pub engine: Snapshot,
    /// The configured peers (none: any address the SAs tunnel to) and, with ESP in UDP,
    /// where each one's datagrams go now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerReport>,
}

/// One peer in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerReport {
    /// Its configured underlay address.
    pub peer: IpAddr,
    /// ESP in UDP: the address and port its datagrams go to (configured, or learned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<SocketAddr>,
    /// ESP in UDP: whether `endpoint` was learned from the peer's authenticated packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<bool>,
}

/// The engine's control side behind a mutex (for the ticker and configuration), the data
/// plane the packet threads load, the daemon's counters and its clock.
pub struct Tunnel {
    engine: Mutex<Engine>,
    plane: PlaneHandle,
    counters: DaemonCounters,
    start: Instant,
    peers: Vec<IpAddr>,
    /// Per SA, the adaptive IPComp decision flips already logged.
    flips: Mutex<Vec<u64>>,
}

fn is_ip(p: &[u8]) -> bool {
    p.first().is_some_and(|b| matches!(b >> 4, 4 | 6))
}

/// The destination of an IPv4 or IPv6 packet (`None` for anything else).
fn outer_dst(p: &[u8]) -> Option<IpAddr> {
    match p.first()? >> 4 {
        4 => <[u8; 4]>::try_from(p.get(16..20)?).ok().map(IpAddr::from),
        6 => <[u8; 16]>::try_from(p.get(24..40)?).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Counts one error and logs it: the first one, then at every power of two, so a peer that
/// floods errors cannot flood the log.
fn count_error(c: &AtomicU64, what: &str, e: &io::Error) {
    let n = c.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        warn!("{what}: {e} ({n} so far)");
    } else {
        debug!("{what}: {e}");
    }
}

/// Whether a device error means "nothing yet" rather than a failure.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

impl Tunnel {
    /// A tunnel around `engine`; sealed packets go only to `peers` when any are given.
    pub fn new(engine: Engine, peers: Vec<IpAddr>) -> Self {
        Tunnel {
            plane: engine.plane_handle(),
            engine: Mutex::new(engine),
            counters: DaemonCounters::default(),
            start: Instant::now(),
            peers,
            flips: Mutex::new(Vec::new()),
        }
    }

    /// The engine's control side (the packet path never takes this lock). A thread that
    /// panicked while holding it cannot have left it half-updated in a way that matters more
    /// than stopping would, so a poisoned lock is taken anyway.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured peers (empty: any address the SAs tunnel to).
    pub fn peers(&self) -> &[IpAddr] {
        &self.peers
    }

    /// The outer destination of sealed `packet` if it may be sent: one of the peers, or
    /// any when none are configured.
    fn peer_dst(&self, packet: &[u8]) -> Option<IpAddr> {
        outer_dst(packet).filter(|d| self.peers.is_empty() || self.peers.contains(d))
    }

    /// The peer an inbound packet comes from as far as `plane` can tell before opening it:
    /// the configured tunnel source of the SA it would be opened with
    /// ([`DataPlane::inbound_sa`]), or the only peer if that SA names none. Once the same
    /// plane accepts the packet, that SA authenticated it, so the peer is known: neither the
    /// packet's (unauthenticated) outer source nor another peer's SA can stand in for it.
    fn peer_of(&self, plane: &DataPlane, packet: &[u8]) -> Option<IpAddr> {
        let configured = plane
            .inbound_sa(packet)
            .and_then(|id| plane.sad().get(id))
            .and_then(|e| e.config.params.tunnel)
            .map(|t| t.src);
        match (configured, &self.peers[..]) {
            (Some(src), _) => Some(src),
            (None, [only]) => Some(*only),
            (None, _) => None,
        }
    }

    /// The daemon's counters.
    pub fn counters(&self) -> &DaemonCounters {
        &self.counters
    }

    /// The current data plane (a lock-free load).
    fn plane(&self) -> arc_swap::Guard<std::sync::Arc<DataPlane>> {
        self.plane.load()
    }

    /// Time since the tunnel started: the engine's clock.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// One packet read from the TUN device (`len` bytes in `pkt`'s receive area): sealed by
    /// the engine and sent to the peer.
    pub fn outbound(&self, pkt: &mut PacketBuffer, len: usize, tx: &dyn UnderlayTx) -> Outcome {
        let c = &self.counters;
        inc(&c.tun_rx_packets);
        add(&c.tun_rx_bytes, len as u64);
        let (mut buf, worker) = pkt.parts(len);
        if !is_ip(buf.packet()) {
            inc(&c.not_ip);
            debug!(len, "packet from the TUN device is not IPv4 or IPv6: dropped");
            return Outcome::Daemon(DaemonDrop::NotIp);
        }
        let verdict = self.plane().outbound(worker, &mut buf, self.now());
        match verdict {
            Ok(Verdict::Protected(_)) => {}
            Ok(Verdict::Bypass) => {
                inc(&c.bypass_dropped);
                debug!("outbound packet matches a bypass policy: tunneld sends nothing in the clear");
                return Outcome::Daemon(DaemonDrop::Bypass);
            }
            Err(d) => {
                inc(&c.engine_out_drops);
                debug!("outbound packet dropped: {d}");
                return Outcome::Engine(d);
            }
        }
        let packet = buf.packet();
        let Some(dst) = self.peer_dst(packet) else {
            inc(&c.not_to_peer);
            debug!("sealed packet is not to a peer: dropped (is the outermost SA a tunnel to a peer?)");
            return Outcome::Daemon(DaemonDrop::NotToPeer);
        };
        match tx.send_to(packet, dst) {
            Ok(()) => {
                inc(&c.underlay_tx_packets);
                add(&c.underlay_tx_bytes, packet.len() as u64);
                Outcome::Forwarded
            }
            Err(e) => {
                count_error(&c.underlay_send_errors, "sending on the underlay", &e);
                Outcome::Lost(e.kind())
            }
        }
    }

    /// One packet read from the underlay (`len` bytes in `pkt`'s receive area): opened by the
    /// engine and written to the TUN device.
    pub fn inbound(&self, pkt: &mut PacketBuffer, len: usize, tun: &dyn TunIo) -> Outcome {
        let c = &self.counters;
        inc(&c.underlay_rx_packets);
        add(&c.underlay_rx_bytes, len as u64);
        let (mut buf, worker) = pkt.parts(len);
        let verdict = self.plane().inbound(worker, &mut buf, self.now());
        match verdict {
            Ok(Verdict::Protected(_)) => {}
            Ok(Verdict::Bypass) => {
                inc(&c.bypass_dropped);
                debug!("inbound packet matches a bypass policy: not written to the TUN device");
                return Outcome::Daemon(DaemonDrop::Bypass);
            }
            Err(d) => {
                inc(&c.engine_in_drops);
                debug!("inbound packet dropped: {d}");
                return Outcome::Engine(d);
            }
        }
        let packet = buf.packet();
        match tun.send(packet) {
            Ok(()) => {
                inc(&c.tun_tx_packets);
                add(&c.tun_tx_bytes, packet.len() as u64);
                Outcome::Forwarded
            }
            Err(e) => {
                count_error(&c.tun_write_errors, "writing the TUN device", &e);
                Outcome::Lost(e.kind())
            }
        }
    }

    /// The first `n` packets of `b` (read from the TUN device): sealed by the engine as one
    /// batch and sent to the peer with as few system calls as the underlay allows. Counted
    /// as [`outbound`](Self::outbound) counts them.
    pub fn outbound_batch(&self, b: &mut Batch, n: usize, tx: &dyn UnderlayTx) {
        let c = &self.counters;
        let n = n.min(BATCH);
        let mut k = 0;
        for i in 0..n {
            inc(&c.tun_rx_packets);
            add(&c.tun_rx_bytes, b.len[i] as u64);
            if !is_ip(b.packet(i)) {
                inc(&c.not_ip);
                debug!(
                    len = b.len[i],
                    "packet from the TUN device is not IPv4 or IPv6: dropped"
                );
                continue;
            }
            b.swap(k, i);
            k += 1;
        }
        if k == 0 {
            return;
        }
        let now = self.now();
        let plane = self.plane();
        let Batch { data, len, worker, .. } = b;
        let mut bufs = packet_bufs(data, len);
        let mut out = [Ok(Verdict::Bypass); BATCH];
        plane.outbound_batch(worker, &mut bufs[..k], &mut out[..k], now);
        let mut pkts: [&[u8]; BATCH] = [&[]; BATCH];
        let mut dsts = [IpAddr::from([0u8; 4]); BATCH];
        let mut m = 0;
        for (buf, verdict) in bufs[..k].iter().zip(&out[..k]) {
            match verdict {
                Ok(Verdict::Protected(_)) => {}
                Ok(Verdict::Bypass) => {
                    inc(&c.bypass_dropped);
                    debug!("outbound packet matches a bypass policy: tunneld sends nothing in the clear");
                    continue;
                }
                Err(d) => {
                    inc(&c.engine_out_drops);
                    debug!("outbound packet dropped: {d}");
                    continue;
                }
            }
            let packet = buf.packet();
            let Some(dst) = self.peer_dst(packet) else {
                inc(&c.not_to_peer);
                debug!("sealed packet is not to a peer: dropped (is the outermost SA a tunnel to a peer?)");
                continue;
            };
            pkts[m] = packet;
            dsts[m] = dst;
            m += 1;
        }
        let (pkts, dsts) = (&pkts[..m], &dsts[..m]);
        let mut i = 0;
        while i < m {
            match tx.send_batch(&pkts[i..], &dsts[i..]) {
                Ok(sent) => {
                    let sent = sent.clamp(1, m - i);
                    for p in &pkts[i..i + sent] {
                        inc(&c.underlay_tx_packets);
                        add(&c.underlay_tx_bytes, p.len() as u64);
                    }
                    i += sent;
                }
                Err(e) => {
                    count_error(&c.underlay_send_errors, "sending on the underlay", &e);
                    i += 1;
                }
            }
        }
    }

    /// The first `n` slots of `b` (read from `rx`): keepalives and non-ESP datagrams
    /// counted, the packets opened by the engine as one batch and written to the TUN device.
    /// For packets with a source (ESP in UDP), the last one each peer's SAs authenticated is
    /// reported to `rx` with its peer ([`UnderlayRx::authenticated`], see [`Self::peer_of`]).
    pub fn inbound_batch(&self, b: &mut Batch, n: usize, rx: &dyn UnderlayRx, tun: &dyn TunIo) {
        let c = &self.counters;
        let n = n.min(BATCH);
        let mut k = 0;
        for i in 0..n {
            match b.kind[i] {
                RxKind::Packet => {
                    inc(&c.underlay_rx_packets);
                    add(&c.underlay_rx_bytes, b.len[i] as u64);
                    b.swap(k, i);
                    k += 1;
                }
                RxKind::Keepalive => inc(&c.udp_keepalives_rx),
                RxKind::NonEsp => inc(&c.udp_non_esp),
                RxKind::Runt => inc(&c.udp_runts),
            }
        }
        if k == 0 {
            return;
        }
        let now = self.now();
        let plane = self.plane();
        let Batch {
            data,
            len,
            src,
            worker,
            gro,
            ..
        } = b;
        let mut bufs = packet_bufs(data, len);
        // Whose SA each packet with a source would be opened with: looked up before opening
        // (which removes the outer header), in the plane that then opens it.
        let mut peer = [None; BATCH];
        for ((p, b), from) in peer.iter_mut().zip(&bufs[..k]).zip(&src[..k]) {
            if from.is_some() {
                *p = self.peer_of(&plane, b.packet());
            }
        }
        let mut out = [Ok(Verdict::Bypass); BATCH];
        plane.inbound_batch(worker, &mut bufs[..k], &mut out[..k], now);
        // The last source per peer, in order of first appearance.
        let mut learned: [Option<(IpAddr, SocketAddr)>; BATCH] = [None; BATCH];
        let mut opened = [0usize; BATCH];
        let mut m = 0;
        for (i, (verdict, from)) in out[..k].iter().zip(&src[..k]).enumerate() {
            match verdict {
                Ok(Verdict::Protected(_)) => {
                    if let (Some(from), Some(p)) = (*from, peer[i]) {
                        let slot = learned.iter().position(|l| l.is_none_or(|(q, _)| q == p));
                        if let Some(j) = slot {
                            learned[j] = Some((p, from));
                        }
                    }
                }
                Ok(Verdict::Bypass) => {
                    inc(&c.bypass_dropped);
                    debug!("inbound packet matches a bypass policy: not written to the TUN device");
                    continue;
                }
                Err(d) => {
                    inc(&c.engine_in_drops);
                    debug!("inbound packet dropped: {d}");
                    continue;
                }
            }
            opened[m] = i;
            m += 1;
        }
        // Learn before writing to the TUN device: the kernel may answer a packet at once, and
        // the answer must go to the endpoint this packet came from (behind a NAT, the
        // configured one is unreachable; the netns udp-nat stage lost a first ping to it).
        for (p, from) in learned.into_iter().map_while(|l| l) {
            rx.authenticated(p, from);
        }
        let opened = &mut opened[..m];
        if tun.offload() {
            // GRO: packets of one flow next to each other (their order kept), then coalesced.
            opened.sort_unstable_by_key(|&i| (offload::flow_key(bufs[i].packet()), i));
            let write = |hdr: &VnetHdr, packet: &[u8], n: usize| match tun.send_vnet(&hdr.to_bytes(), packet) {
                Ok(()) => {
                    add(&c.tun_tx_packets, n as u64);
                    add(&c.tun_tx_bytes, packet.len() as u64);
                    if n > 1 {
                        inc(&c.tun_gro_packets);
                    }
                }
                Err(e) => count_error(&c.tun_write_errors, "writing the TUN device", &e),
            };
            for &i in opened.iter() {
                let packet = bufs[i].packet();
                if gro.append(packet) {
                    continue;
                }
                let n = gro.count();
                if let Some((hdr, sp)) = gro.finish() {
                    write(&hdr, sp, n);
                }
                if !gro.start(packet) {
                    write(&VnetHdr::default(), packet, 1);
                }
            }
            let n = gro.count();
            if let Some((hdr, sp)) = gro.finish() {
                write(&hdr, sp, n);
            }
        } else {
            for &i in opened.iter() {
                let packet = bufs[i].packet();
                match tun.send(packet) {
                    Ok(()) => {
                        inc(&c.tun_tx_packets);
                        add(&c.tun_tx_bytes, packet.len() as u64);
                    }
                    Err(e) => count_error(&c.tun_write_errors, "writing the TUN device", &e),
                }
            }
        }
    }

    /// Expires SAs whose time is up, logs the engine's events and returns every counter.
    pub fn tick(&self) -> (Report, Vec<Event>) {
        let mut e = self.engine();
        let now = self.now();
        e.poll(now);
        let mut events = Vec::new();
        while let Some(ev) = e.next_event() {
            let (sa, limit, hard) = match ev {
                Event::SoftExpired { sa, limit } => (sa, limit, false),
                Event::HardExpired { sa, limit } => (sa, limit, true),
            };
            let name = e.sad().get(sa).map_or("?", |s| s.config.name.as_str());
            if hard {
                warn!("SA `{name}` reached its hard {limit:?} limit: its packets are dropped from now on");
            } else {
                info!("SA `{name}` reached its soft {limit:?} limit: it still works; replace it");
            }
            events.push(ev);
        }
        let report = Report {
            uptime_seconds: now.as_secs(),
            daemon: self.counters.snapshot(),
            engine: e.snapshot(now),
            peers: self
                .peers
                .iter()
                .map(|&peer| PeerReport {
                    peer,
                    endpoint: None,
                    learned: None,
                })
                .collect(),
        };
        self.log_flips(&report.engine);
        (report, events)
    }

    /// Logs each adaptive IPComp SA whose decision changed since the last tick, with the
    /// numbers the model decided on.
    fn log_flips(&self, snap: &Snapshot) {
        let mut seen = self.flips.lock().unwrap_or_else(|p| p.into_inner());
        seen.resize(snap.sas.len(), 0);
        for (s, last) in snap.sas.iter().zip(seen.iter_mut()) {
            let Some(m) = s.comp.as_ref().and_then(|c| c.model.as_ref()) else {
                continue;
            };
            if m.flips == *last {
                continue;
            }
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            info!(
                "SA `{}`: IPComp model now says {} ({} flips): ratio {}, compress {} Mbit/s, decompress ({}) {} Mbit/s, \
                 encrypt {} Mbit/s, ICV {} Mbit/s, link ({}) {} Mbit/s; slowest stage with compression {} vs without {} ns/byte \
                 (the paper's form: gain {} vs cost {})",
                s.name,
                m.decision,
                m.flips,
                f(m.ratio),
                f(m.comp_mbps),
                if m.decomp_measured { "measured" } else { "assumed" },
                f(m.decomp_mbps),
                f(m.enc_mbps),
                f(m.icv_mbps),
                m.link_source,
                f(m.link_mbps),
                f(m.on_ns_per_byte),
                f(m.off_ns_per_byte),
                f(m.gain_ns_per_byte),
                f(m.cost_ns_per_byte),
            );
            *last = m.flips;
        }
    }

    /// Counts and logs a device read error.
    fn read_error(&self, c: &AtomicU64, what: &str, e: &io::Error) {
        count_error(c, what, e);
        // A device that fails every read would otherwise spin.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The outbound loop: TUN device → engine → underlay, until `stop` is set. Each wakeup
/// reads what the device has ready (up to [`BATCH`] packets) and seals it as one batch.
pub fn run_outbound(t: &Tunnel, tun: &dyn TunIo, tx: &dyn UnderlayTx, stop: &AtomicBool) {
    if tun.offload() {
        return run_outbound_offload(t, tun, tx, stop);
    }
    let mut b = Batch::new();
    while !stop.load(Ordering::Relaxed) {
        match tun.recv(b.recv_area(0)) {
            Ok(Some(len)) => {
                b.set(0, len, RxKind::Packet, None);
                let mut n = 1;
                while n < BATCH {
                    match tun.recv_more(b.recv_area(n)) {
                        Ok(Some(len)) => {
                            b.set(n, len, RxKind::Packet, None);
                            n += 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            if !is_transient(&e) {
                                count_error(&t.counters.tun_read_errors, "reading the TUN device", &e);
                            }
                            break;
                        }
                    }
                }
                t.outbound_batch(&mut b, n, tx);
            }
            Ok(None) => {}
            Err(e) if is_transient(&e) => {}
            Err(e) => t.read_error(&t.counters.tun_read_errors, "reading the TUN device", &e),
        }
    }
}

/// The outbound loop when the TUN device has offloads: each read is a virtio-net header and
/// a packet, maybe a TCP super-packet, which is cut into segments ([`Segmenter`]) right into
/// the batch's slots; partial checksums are completed. The batch is sealed and sent when it
/// is full or the device has nothing more to read.
fn run_outbound_offload(t: &Tunnel, tun: &dyn TunIo, tx: &dyn UnderlayTx, stop: &AtomicBool) {
    let c = &t.counters;
    let mut b = Batch::new();
    let mut raw = vec![0u8; VNET_HDR_LEN + MAX_PACKET].into_boxed_slice();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let r = if n == 0 {
            tun.recv(&mut raw)
        } else {
            tun.recv_more(&mut raw)
        };
        let len = match r {
            Ok(Some(len)) => len,
            Ok(None) => {
                if n > 0 {
                    t.outbound_batch(&mut b, n, tx);
                    n = 0;
                }
                continue;
            }
            Err(e) => {
                if n > 0 {
                    t.outbound_batch(&mut b, n, tx);
                    n = 0;
                }
                if !is_transient(&e) {
                    t.read_error(&c.tun_read_errors, "reading the TUN device", &e);
                }
                continue;
            }
        };
        let Ok(hdr) = VnetHdr::parse(&raw[..len]) else {
            inc(&c.tun_offload_errors);
            continue;
        };
        let pkt = &mut raw[VNET_HDR_LEN..len];
        if hdr.gso_type == GSO_NONE {
            if let Err(e) = offload::complete_checksum(pkt, &hdr) {
                inc(&c.tun_offload_errors);
                debug!("packet from the TUN device dropped: {e}");
                continue;
            }
            if n == BATCH {
                t.outbound_batch(&mut b, n, tx);
                n = 0;
            }
            b.recv_area(n)[..pkt.len()].copy_from_slice(pkt);
            b.set(n, pkt.len(), RxKind::Packet, None);
            n += 1;
            continue;
        }
        let seg = match Segmenter::new(pkt, &hdr) {
            Ok(s) => s,
            Err(e) => {
                inc(&c.tun_offload_errors);
                debug!("super-packet from the TUN device dropped: {e}");
                continue;
            }
        };
        inc(&c.tun_gso_packets);
        for i in 0..seg.count() {
            if n == BATCH {
                t.outbound_batch(&mut b, n, tx);
                n = 0;
            }
            match seg.write(pkt, i, b.recv_area(n)) {
                Ok(l) => {
                    b.set(n, l, RxKind::Packet, None);
                    n += 1;
                }
                Err(e) => {
                    inc(&c.tun_offload_errors);
                    debug!("segment of a super-packet dropped: {e}");
                    break;
                }
            }
        }
    }
}

/// One inbound loop: underlay socket → engine → TUN device, until `stop` is set. Each
/// wakeup takes what the socket has queued (up to [`BATCH`] packets) and opens it as one batch.
pub fn run_inbound(t: &Tunnel, rx: &dyn UnderlayRx, tun: &dyn TunIo, stop: &AtomicBool) {
    let mut b = Batch::new();
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_batch(&mut b) {
            Ok(0) => {}
            Ok(n) => t.inbound_batch(&mut b, n, rx, tun),
            Err(e) if is_transient(&e) => {}
            Err(e) => t.read_error(&t.counters.underlay_recv_errors, "reading the underlay", &e),
        }
    }
}

fn protect_bundles(engine: &Engine, dir: Direction) -> impl Iterator<Item = Vec<SaConfig>> + '_ {
    engine
        .spd()
        .policies()
        .iter()
        .filter(move |p| p.dir == dir)
        .filter_map(|p| match &p.action {
            Action::Protect(ids) => Some(
                ids.iter()
                    .filter_map(|&id| engine.sad().get(id).map(|e| e.config.clone()))
                    .collect(),
            ),
            _ => None,
        })
}

/// The IP protocols (50 ESP, 51 AH, 108 IPComp) of the SAs the inbound policies require:
/// the raw sockets to open. Sorted, without repeats.
pub fn inbound_protocols(engine: &Engine) -> Vec<u8> {
    let mut v: Vec<u8> = protect_bundles(engine, Direction::In)
        .flatten()
        .map(|c| c.params.proto.number())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The largest inner packet, IPv4 or IPv6, that every outbound bundle can seal into an
/// `underlay_mtu`-byte packet (IPComp counted as not compressing): the TUN MTU to use.
/// `None` when there is no outbound bundle.
pub fn tun_mtu_for(engine: &Engine, underlay_mtu: usize) -> Option<usize> {
    let mut best: Option<usize> = None;
    for bundle in protect_bundles(engine, Direction::Out) {
        let Ok(calc) = Calculator::from_configs(&bundle) else {
            continue;
        };
        for inner in [Inner::ipv4(), Inner::ipv6()] {
            if let Ok(m) = calc.max_inner_mtu(inner, underlay_mtu) {
                best = Some(best.map_or(m, |b| b.min(m)));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests;
