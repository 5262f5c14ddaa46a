//! The TUN device, as the loops see it: plain IPv4 and IPv6 packets, read and written in
//! batches ([`TunPort`]), as wireguard-go's `tun.Device` hands them over. Behind that, the
//! device itself ([`TunIo`]: one frame per read or write; [`Tun`] is the real multi-queue
//! device) and, when the device has offloads (IFF_VNET_HDR), the virtio-net header on every
//! frame: TCP/UDP super-packets the kernel hands over are cut into segments on the way out
//! and opened packets of one flow coalesced on the way in ([`offload`], sans-IO). The core
//! ([`crate::dataplane`]) never sees a virtio-net header.
//!
//! Reads are one `read(2)` per frame after a `poll(2)`; with `TUNNELD_TUN_URING=on` in the
//! environment they go through io_uring where the kernel allows it ([`uring`]: one multishot
//! read per queue, one system call per wakeup however many frames it brings), the plain way
//! where it refuses.
//!
//! After each batch it read that carried packets other than TCP, a port gives up the CPU
//! once before reading more (`sched_yield(2)`, see [`yield_allowed`]): the stages after it
//! (the peer's reader behind the underlay, the application behind the peer) run before it
//! takes in more, so under overload a CPU shared by the pipeline's stages drains it in turn
//! and excess datagrams are dropped at the first queue (the TUN device's) rather than after
//! every stage has paid for them.
//!
//! `unsafe` here: the TUNSETIFF and TUNSETOFFLOAD ioctls, `read(2)`, `write(2)`, `writev(2)`
//! on the queue's descriptor and `sched_yield(2)`; each with its `// SAFETY:` comment.
#![allow(unsafe_code)]

pub mod offload;
mod sched;
pub mod uring;

#[cfg(test)]
use sched::yield_setting;
pub use sched::{uring_allowed, yield_allowed, yields_for};

use crate::dataplane::packet::{Batch, RxKind, BATCH, MAX_PACKET};
use crate::dev::sys::{ifreq, is_wait, poll_readable, set_nonblocking};
use crate::obs::counters::{add, count_error, inc, DaemonCounters};
use offload::{Coalescer, Segmenter, VnetHdr, GSO_NONE, VNET_HDR_LEN};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;
use tracing::debug;
use uring::UringReader;

/// A TUN device queue, one frame per call: inner IPv4 and IPv6 packets without any
/// packet-information header, each behind a `virtio_net_hdr` when [`offload`](Self::offload)
/// is on. The loops use it through a [`TunPort`].
pub trait TunIo: Sync {
    /// Reads one frame into `buf`; `Ok(None)` when none came within the device's wait
    /// interval (so the caller can check whether to stop).
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Writes one packet (behind an empty virtio-net header when offloads are on).
    fn send(&self, packet: &[u8]) -> io::Result<()>;
    /// Reads one more frame into `buf` if one is ready now, without waiting: how a batch is
    /// filled after [`recv`](Self::recv) woke the reader. The default: none.
    fn recv_more(&self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    /// Whether every read and write carries a `virtio_net_hdr` in front of the packet
    /// (IFF_VNET_HDR with TSO/USO offloads: reads may be super-packets, see [`offload`]).
    /// The default: no.
    fn offload(&self) -> bool {
        false
    }
    /// Whether the device takes UDP super-packets (GSO_UDP_L4: TUNSETOFFLOAD accepted
    /// USO4/USO6, Linux >= 6.2), so opened datagrams of one flow may be written as one. Only
    /// with [`offload`](Self::offload). The default: no.
    fn uso(&self) -> bool {
        false
    }
    /// Writes `packet` behind the virtio-net header `hdr` (only when [`offload`](Self::offload)
    /// is on; the default writes the packet alone).
    fn send_vnet(&self, _hdr: &[u8; VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
        self.send(packet)
    }
    /// Writes the packet made of `parts` (one after the other) behind the virtio-net header
    /// `hdr`, as [`send_vnet`](Self::send_vnet) does: a coalesced super-packet, gathered from
    /// the opened packets where they lie. The default joins the parts into one buffer (an
    /// allocation: for fakes; a real device writes them gathered, `writev(2)`).
    fn send_vnet_parts(&self, hdr: &[u8; VNET_HDR_LEN], parts: &[&[u8]]) -> io::Result<()> {
        self.send_vnet(hdr, &parts.concat())
    }
    /// The queue's descriptor (non-blocking) and wait interval, for reading it through
    /// io_uring ([`uring`]); `None` (the default): read with [`recv`](Self::recv).
    fn queue_fd(&self) -> Option<(RawFd, Duration)> {
        None
    }
}

/// Gives up the CPU to any other runnable task on it (see [`yield_allowed`]).
fn yield_cpu() {
    // SAFETY: sched_yield(2) takes no arguments and touches no memory of ours.
    unsafe { libc::sched_yield() };
}

/// Where a frame read from the device is: [`TunPort`]'s own buffer, or a buffer of the
/// io_uring reader (given back once the frame is used).
#[derive(Debug, Clone, Copy)]
enum Frame {
    Raw(usize),
    Ring(u16, usize),
}

/// Whether [`TunPort`] reads through io_uring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uring {
    /// Not tried yet (the reader is set up on the reading thread's first read).
    Untried,
    /// Reading through it.
    On,
    /// Refused, failed, or not allowed: plain reads.
    Off,
}

/// A super-packet read from the device whose segments did not all fit in one batch: the
/// segmenter and the next segment (the frame stays in [`TunPort`]'s read buffer).
struct Pending {
    seg: Segmenter,
    frame: Frame,
    next: usize,
}

/// One thread's port on a TUN queue: [`read_batch`](Self::read_batch) and
/// [`write_batch`](Self::write_batch) move plain IP packets, and with offloads this is where
/// the virtio-net header is read and written, super-packets are cut into segments (TSO/USO,
/// [`Segmenter`]) and opened packets coalesced (GRO, [`Coalescer`]). It holds the thread's
/// offload buffers (allocated once, only when the device has offloads), so every thread that
/// reads or writes a queue has its own port on it.
pub struct TunPort<'a> {
    dev: &'a dyn TunIo,
    /// Offloads: the frame last read (header and packet).
    raw: Box<[u8]>,
    pending: Option<Pending>,
    gro: Option<Coalescer>,
    uring: Option<UringReader>,
    uring_state: Uring,
    /// Whether to give up the CPU after each batch read ([`yield_allowed`]).
    yields: bool,
    /// Whether the last [`read_batch`](Self::read_batch) brought packets other than TCP (so
    /// the next one first lets their consumers run).
    moved: bool,
    /// Tests: read through io_uring whatever the environment says.
    #[cfg(test)]
    force_uring: bool,
}

impl<'a> TunPort<'a> {
    /// A port on `dev`.
    pub fn new(dev: &'a dyn TunIo) -> Self {
        let vnet = dev.offload();
        TunPort {
            dev,
            raw: if vnet {
                vec![0u8; VNET_HDR_LEN + MAX_PACKET].into_boxed_slice()
            } else {
                Box::default()
            },
            pending: None,
            gro: vnet.then(|| {
                if dev.uso() {
                    Coalescer::with_uso()
                } else {
                    Coalescer::new()
                }
            }),
            uring: None,
            uring_state: Uring::Untried,
            yields: yield_allowed(),
            moved: false,
            #[cfg(test)]
            force_uring: false,
        }
    }

    /// Whether this port may read through io_uring ([`uring_allowed`]).
    fn uring_wanted(&self) -> bool {
        #[cfg(test)]
        if self.force_uring {
            return true;
        }
        uring_allowed()
    }

    /// Whether reads go through io_uring (known after the first [`read_batch`](Self::read_batch)).
    pub fn reads_through_uring(&self) -> bool {
        self.uring.is_some()
    }

    /// Sets the io_uring reader up on the first read (on the reading thread: the ring is
    /// single-issuer); after a failure, drops it once no frame of it is pending.
    fn uring_setup(&mut self) {
        match self.uring_state {
            Uring::Untried => {
                self.uring_state = Uring::Off;
                let Some((fd, wait)) = self.dev.queue_fd().filter(|_| self.uring_wanted()) else {
                    return;
                };
                let frame_len = if self.gro.is_some() {
                    VNET_HDR_LEN + MAX_PACKET
                } else {
                    MAX_PACKET
                };
                match UringReader::open(fd, frame_len, wait) {
                    Ok(r) => {
                        debug!("TUN queue read through io_uring");
                        self.uring = Some(r);
                        self.uring_state = Uring::On;
                    }
                    Err(e) => tracing::info!("io_uring refused ({e}): TUN reads one by one"),
                }
            }
            Uring::Off if self.uring.is_some() && self.pending.is_none() => self.uring = None,
            _ => {}
        }
    }

    /// The next frame: waiting (as long as the device waits) for it when `first`, else only
    /// if one is ready now.
    fn next_frame(&mut self, first: bool) -> io::Result<Option<Frame>> {
        if self.uring_state == Uring::On {
            if let Some(u) = &mut self.uring {
                match u.wait(first) {
                    Ok(true) => return Ok(u.next_frame().map(|(bid, len)| Frame::Ring(bid, len))),
                    Ok(false) => return Ok(None),
                    Err(e) => {
                        tracing::warn!("io_uring read on the TUN device failed ({e}): reads one by one from now on");
                        self.uring_state = Uring::Off;
                    }
                }
            }
        }
        let r = if first {
            self.dev.recv(&mut self.raw)
        } else {
            self.dev.recv_more(&mut self.raw)
        };
        Ok(r?.map(|len| Frame::Raw(len.min(self.raw.len()))))
    }

    /// The bytes of frame `f`.
    fn frame(&mut self, f: Frame) -> &mut [u8] {
        match f {
            Frame::Raw(len) => &mut self.raw[..len],
            Frame::Ring(bid, len) => match &mut self.uring {
                Some(u) => u.frame(bid, len),
                None => &mut [],
            },
        }
    }

    /// Frame `f` is used: its buffer goes back to the kernel.
    fn release(&mut self, f: Frame) {
        if let (Frame::Ring(bid, _), Some(u)) = (f, &mut self.uring) {
            u.recycle(bid);
        }
    }

    /// The device.
    pub fn device(&self) -> &'a dyn TunIo {
        self.dev
    }

    /// Reads up to [`BATCH`] IP packets into `b`'s slots from 0 (waiting for the first as
    /// long as the device waits) and returns how many: 0 when none came. Segments of a
    /// super-packet that did not fit come first in the next call. What the device gave that
    /// cannot be used is counted in `c` (bad virtio-net headers and super-packets as offload
    /// errors, the super-packets cut as GSO packets); a read error after the first packet is
    /// counted and ends the batch; on the first it is returned (the caller counts it).
    ///
    /// When the previous call brought packets other than TCP (which the caller has sent on
    /// since), it first gives up the CPU once ([`yield_allowed`]).
    pub fn read_batch(&mut self, b: &mut Batch, c: &DaemonCounters) -> io::Result<usize> {
        if std::mem::take(&mut self.moved) {
            yield_cpu();
        }
        let r = self.read_any(b, c);
        if let Ok(n) = r {
            self.moved = self.yields && yields_for((0..n).map(|i| b.packet(i)));
        }
        r
    }

    /// [`read_batch`](Self::read_batch) without the yield.
    fn read_any(&mut self, b: &mut Batch, c: &DaemonCounters) -> io::Result<usize> {
        self.uring_setup();
        if self.gro.is_some() {
            return self.read_vnet(b, c);
        }
        if self.uring.is_some() {
            return self.read_ring(b, c);
        }
        let Some(len) = self.dev.recv(b.recv_area(0))? else {
            return Ok(0);
        };
        b.set(0, len, RxKind::Packet, None);
        let mut n = 1;
        while n < BATCH {
            match self.dev.recv_more(b.recv_area(n)) {
                Ok(Some(len)) => {
                    b.set(n, len, RxKind::Packet, None);
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    if !is_wait(&e) {
                        count_error(&c.tun_read_errors, "reading the TUN device", &e);
                    }
                    break;
                }
            }
        }
        Ok(n)
    }

    /// [`read_batch`](Self::read_batch) without offloads through io_uring: each frame copied
    /// into its slot, its buffer given back.
    fn read_ring(&mut self, b: &mut Batch, c: &DaemonCounters) -> io::Result<usize> {
        let mut n = 0;
        while n < BATCH {
            let f = match self.next_frame(n == 0) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if n == 0 => return Err(e),
                Err(e) => {
                    if !is_wait(&e) {
                        count_error(&c.tun_read_errors, "reading the TUN device", &e);
                    }
                    break;
                }
            };
            let p = self.frame(f);
            let len = p.len();
            b.recv_area(n)[..len].copy_from_slice(p);
            self.release(f);
            b.set(n, len, RxKind::Packet, None);
            n += 1;
        }
        Ok(n)
    }

    /// [`read_batch`](Self::read_batch) from a device with offloads: each frame is a
    /// virtio-net header and a packet, maybe a super-packet, which is cut into segments right
    /// into the batch's slots; partial checksums are completed.
    fn read_vnet(&mut self, b: &mut Batch, c: &DaemonCounters) -> io::Result<usize> {
        let mut n = self.drain(b, 0, c);
        while n < BATCH {
            let f = match self.next_frame(n == 0) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if n == 0 => return Err(e),
                Err(e) => {
                    if !is_wait(&e) {
                        count_error(&c.tun_read_errors, "reading the TUN device", &e);
                    }
                    break;
                }
            };
            let frame = self.frame(f);
            let Ok(hdr) = VnetHdr::parse(frame) else {
                inc(&c.tun_offload_errors);
                self.release(f);
                continue;
            };
            let pkt = &mut frame[VNET_HDR_LEN..];
            if hdr.gso_type == GSO_NONE {
                match offload::complete_checksum(pkt, &hdr) {
                    Ok(()) => {
                        b.recv_area(n)[..pkt.len()].copy_from_slice(pkt);
                        b.set(n, pkt.len(), RxKind::Packet, None);
                        n += 1;
                    }
                    Err(e) => {
                        inc(&c.tun_offload_errors);
                        debug!("packet from the TUN device dropped: {e}");
                    }
                }
                self.release(f);
                continue;
            }
            match Segmenter::new(pkt, &hdr) {
                Ok(seg) => {
                    inc(&c.tun_gso_packets);
                    self.pending = Some(Pending { seg, frame: f, next: 0 });
                    n = self.drain(b, n, c);
                }
                Err(e) => {
                    inc(&c.tun_offload_errors);
                    debug!("super-packet from the TUN device dropped: {e}");
                    self.release(f);
                }
            }
        }
        Ok(n)
    }

    /// Cuts the pending super-packet's next segments into `b`'s slots from `n` on, while
    /// there is room; returns the next free slot. The frame is released once cut whole.
    fn drain(&mut self, b: &mut Batch, mut n: usize, c: &DaemonCounters) -> usize {
        let Some(mut p) = self.pending.take() else { return n };
        let frame = &self.frame(p.frame)[VNET_HDR_LEN..];
        while n < BATCH && p.next < p.seg.count() {
            match p.seg.write(frame, p.next, b.recv_area(n)) {
                Ok(l) => {
                    b.set(n, l, RxKind::Packet, None);
                    n += 1;
                    p.next += 1;
                }
                Err(e) => {
                    inc(&c.tun_offload_errors);
                    debug!("segment of a super-packet dropped: {e}");
                    p.next = p.seg.count();
                }
            }
        }
        if p.next >= p.seg.count() {
            self.release(p.frame);
        } else {
            self.pending = Some(p);
        }
        n
    }

    /// Writes `packets` (whole IP packets) to the device, counting them in `c` as written
    /// packets (each packet of a coalesced write counts) or write errors. With offloads,
    /// packets of one flow (their order kept) are coalesced into super-packets the kernel
    /// takes whole (GRO): TCP always, UDP where the device takes USO ([`TunIo::uso`]). A UDP
    /// super-packet the device refuses (EINVAL) is written again datagram by datagram, and
    /// UDP is not coalesced on this port from then on.
    pub fn write_batch(&mut self, packets: &[&[u8]], c: &DaemonCounters) {
        let Some(gro) = &mut self.gro else {
            for p in packets {
                match self.dev.send(p) {
                    Ok(()) => {
                        inc(&c.tun_tx_packets);
                        add(&c.tun_tx_bytes, p.len() as u64);
                    }
                    Err(e) => count_error(&c.tun_write_errors, "writing the TUN device", &e),
                }
            }
            return;
        };
        let dev = self.dev;
        let counted = |r: io::Result<()>, len: usize, n: usize| match r {
            Ok(()) => {
                add(&c.tun_tx_packets, n as u64);
                add(&c.tun_tx_bytes, len as u64);
                if n > 1 {
                    inc(&c.tun_gro_packets);
                }
            }
            Err(e) => count_error(&c.tun_write_errors, "writing the TUN device", &e),
        };
        let plain = |p: &[u8]| counted(dev.send_vnet(&VnetHdr::default().to_bytes(), p), p.len(), 1);
        // Packets of one flow next to each other, their order kept.
        let m = packets.len().min(BATCH);
        let mut order = [(0u64, 0usize); BATCH];
        for (i, p) in packets[..m].iter().enumerate() {
            order[i] = (offload::flow_key(p), i);
        }
        order[..m].sort_unstable();
        // The pending super-packet holds order[run..k]; written when the next packet does
        // not continue it (or at the end).
        let mut run = 0;
        for k in 0..=m {
            if k < m && gro.append(packets[order[k].1], order[k].1) {
                continue;
            }
            let n = gro.count();
            let udp = gro.pending_udp();
            if let Some((hdr, sp)) = gro.finish() {
                // The payloads go where they lie, gathered by one write: not copied first.
                let mut gathered: [&[u8]; 1 + offload::MAX_PARTS] = [&[]; 1 + offload::MAX_PARTS];
                let r = match sp.gather(packets, &mut gathered) {
                    Some(g) => dev.send_vnet_parts(&hdr.to_bytes(), &gathered[..g]),
                    None => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a super-packet's part is not there",
                    )),
                };
                let sp_len = sp.len;
                match r {
                    Err(e) if n > 1 && udp && e.raw_os_error() == Some(libc::EINVAL) => {
                        tracing::warn!("TUN device refused a UDP super-packet ({e}): datagrams one by one from now on");
                        gro.disable_uso();
                        for &(_, i) in &order[run..k] {
                            plain(packets[i]);
                        }
                    }
                    r => counted(r, sp_len, n),
                }
            }
            if k == m {
                break;
            }
            run = k;
            let packet = packets[order[k].1];
            if !gro.start(packet, order[k].1) {
                plain(packet);
            }
        }
    }
}

// The TUN ioctls and flags (linux/if_tun.h); written out because not every libc version
// exports them.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0; // _IOW('T', 208, unsigned int)
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_USO4: libc::c_uint = 0x20;
const TUN_F_USO6: libc::c_uint = 0x40;

/// One queue of the TUN device, in TUN mode without the packet-information header: reads
/// and writes are bare IPv4 and IPv6 packets, each behind a 10-byte `virtio_net_hdr`
/// ([`offload::VnetHdr`]) when the device has offloads ([`Tun::offload`]).
///
/// The device is multi-queue (IFF_MULTI_QUEUE): [`Tun::open_queues`] opens one descriptor
/// per worker; the kernel spreads the packets it routes into the device over the queues by
/// flow hash, and any queue may be written.
pub struct Tun {
    fd: std::os::fd::OwnedFd,
    name: String,
    wait: Duration,
    vnet: bool,
    uso: bool,
}

impl Tun {
    /// Creates (or attaches to) the TUN device `name` with one queue and no offloads; reads
    /// wait at most `wait` so the reader can check for shutdown. Needs CAP_NET_ADMIN.
    pub fn open(name: &str, wait: Duration) -> io::Result<Tun> {
        let mut q = Self::open_queues(name, 1, false, wait)?;
        Ok(q.remove(0))
    }

    /// Creates the TUN device `name` with `queues` queues (at least 1). With `offload`, asks
    /// for IFF_VNET_HDR and TSO4/TSO6 with checksum offload (TUNSETOFFLOAD); when the kernel
    /// refuses either, the device is made again without them ([`Tun::offload`] says which).
    pub fn open_queues(name: &str, queues: usize, offload: bool, wait: Duration) -> io::Result<Vec<Tun>> {
        ifreq(name)?; // the name checks first: a bad name is no reason to retry
        if offload {
            match Self::open_with(name, queues, true, wait) {
                Ok(q) => return Ok(q),
                Err(e) => tracing::warn!("TUN offloads refused ({e}): plain reads and writes"),
            }
        }
        Self::open_with(name, queues, false, wait)
    }

    fn open_with(name: &str, queues: usize, vnet: bool, wait: Duration) -> io::Result<Vec<Tun>> {
        let mut out: Vec<Tun> = Vec::with_capacity(queues.max(1));
        let mut name = name.to_string();
        let mut uso = false;
        for _ in 0..queues.max(1) {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/net/tun")?;
            let fd = std::os::fd::OwnedFd::from(file);
            let mut ifr = ifreq(&name)?;
            let mut flags = IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE;
            if vnet {
                flags |= IFF_VNET_HDR;
            }
            ifr.ifr_ifru.ifru_flags = flags;
            // SAFETY: TUNSETIFF takes a pointer to one `struct ifreq`, which `ifr` is (valid,
            // exclusively borrowed, alive across the call); the kernel writes the device's
            // name into `ifr_name` (NUL-terminated, within IFNAMSIZ).
            let r = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut ifr as *mut libc::ifreq) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            name = ifr
                .ifr_name
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8 as char)
                .collect();
            set_nonblocking(fd.as_raw_fd())?;
            if vnet && out.is_empty() {
                // USO (UDP super-packets, Linux >= 6.2) where the kernel knows it, else TSO only.
                let tso = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
                let mut r = -1;
                for off in [tso | TUN_F_USO4 | TUN_F_USO6, tso] {
                    // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned int of
                    // flags); no memory is passed.
                    r = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD as _, off as libc::c_ulong) };
                    if r == 0 {
                        uso = off & TUN_F_USO4 != 0;
                        break;
                    }
                }
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            out.push(Tun {
                fd,
                name: name.clone(),
                wait,
                vnet,
                uso: vnet && uso,
            });
        }
        Ok(out)
    }

    /// The device's name as the kernel gave it.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl TunIo for Tun {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if !poll_readable(self.fd.as_raw_fd(), self.wait)? {
            return Ok(None);
        }
        self.recv_more(buf)
    }

    fn recv_more(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is a valid, exclusively borrowed buffer of `buf.len()` bytes; read(2)
        // writes at most that many. The fd is open while `self` lives.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        Ok(Some(r as usize))
    }

    fn send(&self, packet: &[u8]) -> io::Result<()> {
        if self.vnet {
            return self.send_vnet(&[0; VNET_HDR_LEN], packet);
        }
        // SAFETY: `packet` is a valid borrowed buffer of `packet.len()` bytes that write(2)
        // only reads.
        let r = unsafe { libc::write(self.fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        check_write(r, packet.len())
    }

    fn offload(&self) -> bool {
        self.vnet
    }

    fn uso(&self) -> bool {
        self.uso
    }

    fn queue_fd(&self) -> Option<(RawFd, Duration)> {
        Some((self.fd.as_raw_fd(), self.wait))
    }

    fn send_vnet(&self, hdr: &[u8; VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
        if !self.vnet {
            return self.send(packet);
        }
        let iov = [
            libc::iovec {
                iov_base: hdr.as_ptr() as *mut libc::c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: packet.as_ptr() as *mut libc::c_void,
                iov_len: packet.len(),
            },
        ];
        // SAFETY: two iovecs describing live borrowed buffers with their true lengths, which
        // writev(2) only reads; `iov` outlives the call.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        check_write(r, hdr.len() + packet.len())
    }

    fn send_vnet_parts(&self, hdr: &[u8; VNET_HDR_LEN], parts: &[&[u8]]) -> io::Result<()> {
        const MAX_IOV: usize = 1 + 1 + offload::MAX_PARTS;
        if !self.vnet || parts.len() + 1 > MAX_IOV {
            return self.send_vnet(hdr, &parts.concat());
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV];
        let mut want = hdr.len();
        iov[0] = libc::iovec {
            iov_base: hdr.as_ptr() as *mut libc::c_void,
            iov_len: hdr.len(),
        };
        for (v, p) in iov[1..].iter_mut().zip(parts) {
            *v = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
            want += p.len();
        }
        // SAFETY: the first `1 + parts.len()` iovecs describe live borrowed buffers (the
        // header and each part) with their true lengths, which writev(2) only reads; `iov`
        // outlives the call, and its count is at most MAX_IOV (<= IOV_MAX).
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), (1 + parts.len()) as libc::c_int) };
        check_write(r, want)
    }
}

/// A write(2)'s result as `io::Result`: an error, a short write, or all `want` bytes.
fn check_write(r: isize, want: usize) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r as usize == want {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short TUN write: {r} of {want} bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::sys::set_up;
    use crate::dev::sys::tests::{not_run, privileged};
    use offload::{Segmenter, GSO_UDP_L4};
    use std::sync::Mutex;

    /// A device with offloads that records what is written (header, packet) and, with
    /// `refuse_uso`, refuses UDP super-packets as a kernel without USO does (EINVAL).
    struct Written {
        uso: bool,
        refuse_uso: bool,
        frames: Mutex<Vec<(VnetHdr, Vec<u8>)>>,
    }

    impl TunIo for Written {
        fn recv(&self, _: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn send(&self, _: &[u8]) -> io::Result<()> {
            unreachable!("a device with offloads is written with a header")
        }
        fn offload(&self) -> bool {
            true
        }
        fn uso(&self) -> bool {
            self.uso
        }
        fn send_vnet(&self, hdr: &[u8; VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
            let h = VnetHdr::parse(hdr).unwrap();
            if self.refuse_uso && h.gso_type == GSO_UDP_L4 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            self.frames.lock().unwrap().push((h, packet.to_vec()));
            Ok(())
        }
    }

    /// Datagram `i` of a UDP flow from `sport` (IPv4, DF, consecutive IDs), 64 payload bytes.
    fn datagram(sport: u16, i: u16) -> Vec<u8> {
        let mut ip =
            etherparse::Ipv4Header::new(0, 64, etherparse::IpNumber::UDP, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
        ip.dont_fragment = true;
        ip.identification = 100 + i;
        let mut p = Vec::new();
        etherparse::PacketBuilder::ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
            .udp(sport, 5201)
            .write(&mut p, &[i as u8; 64])
            .unwrap();
        p
    }

    /// The datagrams a device was given, super-packets cut as the kernel cuts them.
    fn cut(frames: &[(VnetHdr, Vec<u8>)]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (h, p) in frames {
            if h.gso_type == GSO_UDP_L4 {
                let s = Segmenter::new(p, h).unwrap();
                for i in 0..s.count() {
                    let mut b = vec![0; 2000];
                    let n = s.write(p, i, &mut b).unwrap();
                    b.truncate(n);
                    out.push(b);
                }
            } else {
                out.push(p.clone());
            }
        }
        out
    }

    /// Issue #20: a batch of opened datagrams of two interleaved UDP flows is written as one
    /// GSO_UDP_L4 super-packet per flow where the device takes USO, every datagram counted;
    /// without USO each goes alone; a device that refuses the super-packet (EINVAL) gets the
    /// datagrams one by one, nothing lost, and no UDP super-packet again.
    #[test]
    fn udp_batches_are_written_as_uso_super_packets() {
        let mut batch = Vec::new();
        for i in 0..12 {
            batch.push(datagram(4000, i));
            batch.push(datagram(4001, i));
        }
        let refs: Vec<&[u8]> = batch.iter().map(|p| &p[..]).collect();
        let flow = |sport: u16| -> Vec<Vec<u8>> { (0..12).map(|i| datagram(sport, i)).collect() };
        for (uso, refuse, writes) in [(true, false, 2), (false, false, 24), (true, true, 24)] {
            let dev = Written {
                uso,
                refuse_uso: refuse,
                frames: Mutex::new(Vec::new()),
            };
            let c = DaemonCounters::default();
            let mut port = TunPort::new(&dev);
            port.write_batch(&refs, &c);
            let frames = dev.frames.lock().unwrap().clone();
            assert_eq!(frames.len(), writes, "uso {uso}, refused {refuse}");
            let got = cut(&frames);
            let (a, b): (Vec<_>, Vec<_>) = got.into_iter().partition(|p| p[21] == 0xa0);
            assert_eq!((a, b), (flow(4000), flow(4001)), "each flow's datagrams, in order");
            let s = c.snapshot();
            assert_eq!(s.tun_tx_packets, 24);
            assert_eq!(s.tun_gro_packets, if writes == 2 { 2 } else { 0 });
            assert_eq!(s.tun_write_errors, 0);
            if refuse {
                port.write_batch(&refs[..4], &c);
                assert_eq!(dev.frames.lock().unwrap().len(), 28, "no UDP super-packet tried again");
            }
        }
    }

    /// Issue #20: the yield after a batch read is for anything but TCP alone, and
    /// `TUNNELD_TUN_YIELD=off` turns it off.
    #[test]
    fn yields_after_batches_with_datagrams_only() {
        let udp = datagram(4000, 1);
        let mut tcp = udp.clone();
        tcp[9] = 6;
        let mut tcp6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        tcp6.resize(60, 0);
        let mut udp6 = tcp6.clone();
        udp6[6] = 17;
        let yields = |ps: &[&[u8]]| yields_for(ps.iter().copied());
        assert!(!yields(&[&tcp, &tcp6, &tcp]), "TCP alone");
        assert!(!yields(&[]), "nothing read");
        assert!(yields(&[&tcp, &udp]), "a UDP datagram among TCP");
        assert!(yields(&[&udp6]), "IPv6 UDP");
        assert!(yields(&[&[0x45, 0, 0]]), "a runt counts as not TCP");
        assert!(yield_setting(None) && yield_setting(Some("on")));
        assert!(!yield_setting(Some("off")) && !yield_setting(Some("0")) && !yield_setting(Some("no")));
    }

    /// Runs `f` on a thread of its own in a network namespace of its own, so the addresses
    /// and routes it makes stay there and vanish with it.
    fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: unshare(2) takes flags by value; CLONE_NEWNET moves only this thread
                // into a new network namespace.
                assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare(CLONE_NEWNET)");
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Issue #20, as root, in a namespace of its own: UDP datagrams the kernel routes into the
    /// TUN device are read back whole and in order, through io_uring and the plain way, with
    /// and without offloads; with offloads, 40 datagrams sent as one UDP GSO send reach the
    /// device as one USO super-packet that is cut over two batches (the io_uring buffer kept
    /// until the second).
    #[test]
    fn privileged_reads_through_io_uring_and_plain() {
        if !privileged() {
            not_run("needs root and /dev/net/tun");
            return;
        }
        for offload in [false, true] {
            for uring in [true, false] {
                let (got, through) = in_netns(|| {
                    let q = Tun::open_queues("tnlur%d", 1, offload, Duration::from_millis(50)).unwrap();
                    set_up(q[0].name()).unwrap();
                    let ok = std::process::Command::new("ip")
                        .args(["addr", "add", "10.77.0.1/24", "dev", q[0].name()])
                        .status()
                        .unwrap();
                    assert!(ok.success());
                    let sock = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
                    sock.connect("10.77.0.2:9999").unwrap();
                    let mut port = TunPort::new(&q[0]);
                    if !uring {
                        port.uring_state = Uring::Off;
                    }
                    port.force_uring = uring;
                    let c = DaemonCounters::default();
                    let mut b = Batch::new();
                    let mut got: Vec<Vec<u8>> = Vec::new();
                    let mut take = |port: &mut TunPort, want: usize| {
                        let t0 = std::time::Instant::now();
                        while got.len() < want && t0.elapsed() < Duration::from_secs(3) {
                            let n = port.read_batch(&mut b, &c).unwrap();
                            for i in 0..n {
                                let p = b.packet(i);
                                if p.len() > 28 && p[9] == 17 && p[22..24] == 9999u16.to_be_bytes() {
                                    got.push(p[28..].to_vec());
                                }
                            }
                        }
                    };
                    for i in 0..40u8 {
                        sock.send(&[i; 64]).unwrap();
                    }
                    take(&mut port, 40);
                    if offload && q[0].uso() {
                        let gso: Vec<u8> = (40..80u8).flat_map(|i| [i; 64]).collect();
                        crate::dev::sys::set_int_option(sock.as_raw_fd(), libc::SOL_UDP, libc::UDP_SEGMENT, 64)
                            .unwrap();
                        sock.send(&gso).unwrap();
                        take(&mut port, 80);
                    }
                    (got, port.reads_through_uring())
                });
                assert_eq!(through, uring, "offload {offload}: io_uring used as asked");
                let want = if offload { 80 } else { 40 };
                assert_eq!(got.len(), want, "offload {offload}, io_uring {uring}");
                for (i, p) in got.iter().enumerate() {
                    assert_eq!(p, &vec![i as u8; 64], "datagram {i}");
                }
            }
        }
    }

    /// As root: a multi-queue TUN device with offloads; a TCP super-packet written to one
    /// queue with a GSO header is accepted by the kernel, and the queues share one name.
    #[test]
    fn privileged_multi_queue_tun_with_offloads() {
        if !privileged() {
            not_run("needs root and /dev/net/tun");
            return;
        }
        let qs = Tun::open_queues("tnlmq%d", 3, true, Duration::from_millis(20)).unwrap();
        assert_eq!(qs.len(), 3);
        assert!(qs.iter().all(|q| q.name() == qs[0].name() && q.offload()));
        set_up(qs[0].name()).unwrap();
        let plain = Tun::open_queues("tnlpl%d", 2, false, Duration::from_millis(20)).unwrap();
        assert!(!plain[1].offload());
        // A zero header and a plain packet: accepted (a short one is the kernel's to drop).
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 1, 1, 10, 1, 1, 2];
        let c = offload::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        qs[1].send(&p).unwrap();
    }
}
