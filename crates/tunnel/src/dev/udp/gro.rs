//! Receiving with UDP GRO: coalesced runs of datagrams read with one recvmmsg(2) and taken
//! apart into the batch's slots.
#![allow(unsafe_code)]

use super::{gso::Runs, sort_datagram, EncapSocket};
use crate::dataplane::packet::{Batch, BATCH};
use crate::dev::sys::Names;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;

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
    src: [Option<SocketAddr>; GRO_MSGS],
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
    pub fn filled(&mut self, count: usize, len: &[usize], seg: &[usize], src: &[Option<SocketAddr>]) {
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
    pub fn next_datagram(&mut self) -> Option<(&[u8], Option<SocketAddr>)> {
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

/// Copies the next datagram of `gro` into slot `i`'s receive area of `batch` (cut to the
/// area): its length and source, or `None` when every datagram has been taken.
fn fill_from_gro(gro: &mut GroBuffers, batch: &mut Batch, i: usize) -> Option<(usize, Option<SocketAddr>)> {
    let (d, src) = gro.next_datagram()?;
    let area = batch.recv_area(i);
    let n = d.len().min(area.len());
    area[..n].copy_from_slice(&d[..n]);
    Some((n, src))
}

impl EncapSocket {
    /// [`UnderlayRx::recv_batch`](crate::dev::underlay::UnderlayRx::recv_batch) with UDP GRO: datagrams left from the last read first, then
    /// (waiting only when there were none) up to [`GRO_MSGS`] coalesced messages read with one
    /// recvmmsg(2) and taken apart into the batch's slots; what does not fit waits in the
    /// batch for the next call. At most three rounds, so a busy socket cannot hold the loop.
    pub(super) fn recv_batch_gro(&self, batch: &mut Batch) -> io::Result<usize> {
        let mut gro = self.gro_rx.lock().unwrap_or_else(|p| p.into_inner());
        gro.allocate();
        let peers = self.peers.load();
        let mut n = 0;
        for round in 0..3 {
            while n < BATCH {
                let Some((len, from)) = fill_from_gro(&mut gro, batch, n) else {
                    break;
                };
                let (kind, len) = sort_datagram(batch.recv_area(n), len);
                batch.set_context(n, len, self.context(&peers, kind, from));
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
