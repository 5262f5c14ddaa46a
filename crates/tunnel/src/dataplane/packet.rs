//! What the loops carry: packet buffers with room for the headers a bundle adds, a batch of
//! them per thread, and the context of each packet from the device that read it to the one
//! that writes it ([`Context`]): what the device found (a packet, a NAT-keepalive, IKE), where
//! it came from, how it arrived and, once the engine opened it, the SA that did and the outer
//! addresses ([`Arrival`]), so nothing is looked up or parsed twice. No I/O, no device: the
//! devices fill a [`Batch`] ([`crate::dev::tun`], [`crate::dev::raw`], [`crate::dev::udp`]), the core
//! ([`crate::dataplane`]) reads it.

use ipsec_core::PacketBuf;
use ipsec_engine::{Arrival, Framing, Route, SaId, Worker};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

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
    pub(crate) fn parts(&mut self, len: usize) -> (PacketBuf<'_>, &mut Worker) {
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

/// How many packets the loops move per wakeup at most.
pub const BATCH: usize = 32;

/// What a device found in one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxKind {
    /// A packet for the engine (a whole IP packet in the slot's receive area).
    #[default]
    Packet,
    /// An RFC 3948 NAT-keepalive (one 0xFF byte): counted, nothing else.
    Keepalive,
    /// A UDP datagram with the non-ESP marker (IKE, RFC 3948 2.2), the datagram in the slot's
    /// receive area: handed to the IKE consumer if there is one
    /// ([`Tunnel::set_non_esp`](crate::dataplane::Tunnel::set_non_esp)), else counted and dropped.
    NonEsp,
    /// A datagram too short to be either: counted and dropped.
    Runt,
}

/// What is known about one packet of a [`Batch`], carried from the device that read it to
/// the one that writes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    /// What the device found.
    pub kind: RxKind,
    /// Where it came from, if the device says: an ESP-in-UDP datagram's source address and
    /// port (a NAT'd peer's endpoint is learned from it).
    pub from: Option<SocketAddr>,
    /// In: how it arrived ([`Arrival::encap`], the UDP ports) for the engine to check against
    /// the SA; out: the SA that opened it, whether it was new, and the outer addresses.
    pub arrival: Arrival,
}

/// [`BATCH`] packet buffers (each with head- and tailroom, as [`PacketBuffer`]'s), each
/// packet's [`Context`], and the thread's [`Worker`]. Allocated once per thread.
pub struct Batch {
    pub(crate) data: Vec<Box<[u8]>>,
    pub(crate) len: [usize; BATCH],
    pub(crate) ctx: [Context; BATCH],
    pub(crate) worker: Worker,
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
            ctx: [Context::default(); BATCH],
            worker: Worker::new().expect("the OS entropy source works"),
        }
    }

    /// Slot `i`'s receive area: [`MAX_PACKET`] bytes after [`HEADROOM`].
    pub fn recv_area(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i][HEADROOM..HEADROOM + MAX_PACKET]
    }

    /// Every slot's receive area, in order.
    pub fn recv_areas(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.data.iter_mut().map(|d| &mut d[HEADROOM..HEADROOM + MAX_PACKET])
    }

    /// Records what slot `i` received: `len` bytes of `kind` from `src`, arrived as a bare IP
    /// packet (or as the device does not say).
    pub fn set(&mut self, i: usize, len: usize, kind: RxKind, src: Option<SocketAddr>) {
        self.set_context(
            i,
            len,
            Context {
                kind,
                from: src,
                arrival: Arrival::default(),
            },
        );
    }

    /// Records what slot `i` received: `len` bytes and their context.
    pub fn set_context(&mut self, i: usize, len: usize, ctx: Context) {
        self.len[i] = len.min(MAX_PACKET);
        self.ctx[i] = ctx;
    }

    /// What slot `i` received.
    pub fn kind(&self, i: usize) -> RxKind {
        self.ctx[i].kind
    }

    /// Where slot `i` came from, if the device said.
    pub fn src(&self, i: usize) -> Option<SocketAddr> {
        self.ctx[i].from
    }

    /// Slot `i`'s context.
    pub fn context(&self, i: usize) -> &Context {
        &self.ctx[i]
    }

    /// The `len` bytes in slot `i`'s receive area.
    pub fn packet(&self, i: usize) -> &[u8] {
        &self.data[i][HEADROOM..HEADROOM + self.len[i]]
    }

    /// The `len` bytes in slot `i`'s receive area, to change in place.
    pub(crate) fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i][HEADROOM..HEADROOM + self.len[i]]
    }

    /// Moves slot `from` to slot `to` (swapping buffers, not copying bytes).
    pub(crate) fn swap(&mut self, to: usize, from: usize) {
        self.data.swap(to, from);
        self.len.swap(to, from);
        self.ctx.swap(to, from);
    }
}

/// A [`Batch`]'s buffers and lengths as engine packet buffers (packets after the headroom).
pub(crate) fn packet_bufs<'a>(data: &'a mut [Box<[u8]>], len: &[usize; BATCH]) -> [PacketBuf<'a>; BATCH] {
    let mut slots = data.iter_mut().zip(len.iter());
    std::array::from_fn(|_| {
        let (d, &l) = slots.next().expect("a Batch has BATCH buffers");
        PacketBuf::new(d, HEADROOM, l).expect("HEADROOM + MAX_PACKET <= BUF_LEN")
    })
}

/// A placeholder in an array of routes, never sent along.
pub(crate) const NO_ROUTE: Route = Route {
    sa: SaId(0),
    spi: 0,
    to: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
};

/// The length of an IP header without options or extensions to `to` (RFC 791, RFC 8200).
pub(crate) fn ip_header_len(to: IpAddr) -> usize {
    match to {
        IpAddr::V4(_) => 20,
        IpAddr::V6(_) => 40,
    }
}

/// The bytes a sealed packet of `len` bytes framed as `framing` counts as on the underlay: the
/// whole IP packet (for a UDP socket, the ESP part and the IP header the kernel puts in
/// front, as the counter's whole packets always counted).
pub(crate) fn wire_len(len: usize, route: &Route, framing: Framing) -> u64 {
    let header = match framing {
        Framing::Ip => 0,
        Framing::Udp => ip_header_len(route.to),
    };
    (len + header) as u64
}
