//! The real devices: the multi-queue TUN device (TUNSETIFF, TUNSETOFFLOAD written here),
//! IPv4 and IPv6 raw sockets and UDP sockets (`socket2`), and the two interface settings
//! tunneld makes (MTU, up).
//!
//! This is the only module with `unsafe` code, in four small places, each with its reason:
//! `poll(2)` on the TUN descriptor (so the reader can wake up to check for shutdown), a zeroed
//! `struct ifreq`, the `SIOC[GS]IF{MTU,FLAGS}` ioctls with the reads of the union field
//! the kernel filled in, and `getsockopt(SO_PEERCRED)` for the control socket's peer; and the
//! socket calls that move several datagrams, or one with its source, at once
//! (`sendmmsg`/`recvmmsg`/`recvfrom` with zeroed C structs), including the UDP GSO and GRO
//! control messages (`UDP_SEGMENT` written, `UDP_GRO` read, both as bytes of an 8-aligned
//! buffer, not through pointer casts) and the `setsockopt(UDP_GRO)` that turns GRO on.
//! `libc` has no safe wrapper for any of these calls; each has a `// SAFETY:` comment and a
//! test (GSO → GRO over loopback checks every datagram).
#![allow(unsafe_code)]

use crate::encap::{self, GroBuffers, GRO_MSGS};
use crate::tunnel::{Batch, RxKind, TunIo, UnderlayRx, UnderlayTx, BATCH};
use arc_swap::ArcSwapOption;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The receive buffer asked for on each raw socket (the kernel caps it at
/// `net.core.rmem_max`).
pub const RECV_BUFFER: usize = 4 << 20;

/// Waits up to `timeout` for `fd` to become readable (or to report an error or hang-up, which
/// the following read returns). `Ok(false)` on timeout or when a signal interrupted the wait.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is one initialized `pollfd` that lives across the call, and nfds = 1 says
    // so; poll(2) writes only its `revents`. An fd that is not open is not undefined behaviour
    // (poll reports POLLNVAL for it).
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0 && pfd.revents != 0)
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
/// ([`crate::offload::VnetHdr`]) when the device has offloads ([`Tun::offload`]).
///
/// The device is multi-queue (IFF_MULTI_QUEUE): [`Tun::open_queues`] opens one descriptor
/// per worker; the kernel spreads the packets it routes into the device over the queues by
/// flow hash, and any queue may be written.
pub struct Tun {
    fd: std::os::fd::OwnedFd,
    name: String,
    wait: Duration,
    vnet: bool,
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
            return self.send_vnet(&[0; crate::offload::VNET_HDR_LEN], packet);
        }
        // SAFETY: `packet` is a valid borrowed buffer of `packet.len()` bytes that write(2)
        // only reads.
        let r = unsafe { libc::write(self.fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        check_write(r, packet.len())
    }

    fn offload(&self) -> bool {
        self.vnet
    }

    fn send_vnet(&self, hdr: &[u8; crate::offload::VNET_HDR_LEN], packet: &[u8]) -> io::Result<()> {
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

/// The sending side of the underlay: one raw socket of one IP version that sends whole
/// packets, so each goes on the wire exactly as the engine built it. IPv4: an
/// `IPPROTO_RAW` socket with IP_HDRINCL (the kernel fills in only the header checksum).
/// IPv6: an `IPPROTO_RAW` socket with IPV6_HDRINCL (Linux 4.5 and later; IPv6 has no header
/// checksum, the kernel sends the bytes as given). Either sends any protocol and receives
/// nothing.
pub struct RawTx {
    sock: Socket,
    v6: bool,
}

impl RawTx {
    /// Opens the IPv4 socket. Needs CAP_NET_RAW.
    pub fn open() -> io::Result<RawTx> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
        sock.set_header_included_v4(true)?;
        Ok(RawTx { sock, v6: false })
    }

    /// Opens the IPv6 socket. Needs CAP_NET_RAW and Linux 4.5 or later (IPV6_HDRINCL).
    pub fn open_v6() -> io::Result<RawTx> {
        let sock = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
        sock.set_header_included_v6(true)?;
        Ok(RawTx { sock, v6: true })
    }
}

/// The error for a destination of the other IP version than the socket's.
fn wrong_family(dst: IpAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{dst}: not of this socket's IP version"),
    )
}

impl UnderlayTx for RawTx {
    fn send_to(&self, packet: &[u8], dst: IpAddr) -> io::Result<()> {
        if dst.is_ipv6() != self.v6 {
            return Err(wrong_family(dst));
        }
        let n = self.sock.send_to(packet, &SockAddr::from(SocketAddr::new(dst, 0)))?;
        if n == packet.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short send: {n} of {} bytes", packet.len()),
            ))
        }
    }

    fn send_batch(&self, packets: &[&[u8]], dsts: &[IpAddr]) -> io::Result<usize> {
        let n = packets.len().min(dsts.len()).min(BATCH);
        let mut to = Names::new();
        for (i, d) in dsts[..n].iter().enumerate() {
            if d.is_ipv6() != self.v6 {
                if i == 0 {
                    return Err(wrong_family(*d));
                }
                return send_mmsg(self.sock.as_raw_fd(), &packets[..i], &mut to);
            }
            to.set(i, SocketAddr::new(*d, 0));
        }
        send_mmsg(self.sock.as_raw_fd(), &packets[..n], &mut to)
    }
}

/// One receiving socket of the underlay: a raw socket for one IP protocol (50 ESP, 51 AH,
/// 108 IPComp) and one IP version, bound to the local underlay address when one is given.
/// IPv4: the kernel hands it whole packets (header included), reassembled if they came in
/// fragments. IPv6: the kernel hands it the payload after the IPv6 header and the
/// extension headers it processed (RFC 3542 3), reassembled; the socket puts an IPv6 header
/// back in front ([`encap::rebuild_header`]: the fields AH's ICV covers as they were sent),
/// which needs the local address the socket is bound to as its destination.
pub struct RawRx {
    sock: Socket,
    proto: u8,
    /// IPv6: the address the socket is bound to (the rebuilt header's destination).
    local6: Option<Ipv6Addr>,
}

impl RawRx {
    /// Opens the IPv4 socket for `proto`; reads wait at most `wait`. Needs CAP_NET_RAW.
    pub fn open(proto: u8, local: Option<Ipv4Addr>, wait: Duration) -> io::Result<RawRx> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(i32::from(proto))))?;
        if let Some(a) = local {
            sock.bind(&SockAddr::from(SocketAddrV4::new(a, 0)))?;
        }
        Self::tune(sock, proto, None, wait)
    }

    /// Opens the IPv6 socket for `proto`, bound to `local` (it receives only what is sent
    /// to it); reads wait at most `wait`. Needs CAP_NET_RAW.
    pub fn open_v6(proto: u8, local: Ipv6Addr, wait: Duration) -> io::Result<RawRx> {
        let sock = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::from(i32::from(proto))))?;
        sock.bind(&SockAddr::from(SocketAddrV6::new(local, 0, 0, 0)))?;
        Self::tune(sock, proto, Some(local), wait)
    }

    fn tune(sock: Socket, proto: u8, local6: Option<Ipv6Addr>, wait: Duration) -> io::Result<RawRx> {
        sock.set_read_timeout(Some(wait))?;
        // Best effort: a bigger queue rides out bursts; the kernel caps it.
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
        Ok(RawRx { sock, proto, local6 })
    }

    /// The IP protocol it receives.
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// Whether it receives IPv6.
    pub fn is_v6(&self) -> bool {
        self.local6.is_some()
    }

    /// Slot `i` of `batch` holds `len` payload bytes after [`encap::IPV6_HEADER`] bytes from
    /// `src`: the header rebuilt, or the slot marked a runt if it cannot be.
    fn rebuild(&self, batch: &mut Batch, i: usize, len: usize, src: IpAddr, local: Ipv6Addr) {
        match encap::rebuild_header(batch.recv_area(i), len, self.proto, src, IpAddr::V6(local)) {
            Ok(total) => batch.set(i, total, RxKind::Packet, None),
            Err(e) => {
                tracing::debug!("IPv6 packet from {src} dropped: {e}");
                batch.set(i, 0, RxKind::Runt, None);
            }
        }
    }
}

impl UnderlayRx for RawRx {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(local) = self.local6 else {
            return match (&self.sock).read(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if is_wait(&e) => Ok(None),
                Err(e) => Err(e),
            };
        };
        if buf.len() <= encap::IPV6_HEADER {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let Some((n, src)) = recv_from(self.sock.as_raw_fd(), &mut buf[encap::IPV6_HEADER..], true)? else {
            return Ok(None);
        };
        encap::rebuild_header(buf, n, self.proto, src.ip(), IpAddr::V6(local))
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        let mut lens = [0usize; BATCH];
        let Some(local) = self.local6 else {
            let n = recv_mmsg(self.sock.as_raw_fd(), batch, 0, &mut lens, None)?;
            for (i, &len) in lens[..n].iter().enumerate() {
                batch.set(i, len, RxKind::Packet, None);
            }
            return Ok(n);
        };
        let mut srcs = [SocketAddr::from(([0u16; 8], 0)); BATCH];
        let n = recv_mmsg(
            self.sock.as_raw_fd(),
            batch,
            encap::IPV6_HEADER,
            &mut lens,
            Some((&mut srcs, true)),
        )?;
        for i in 0..n {
            self.rebuild(batch, i, lens[i], srcs[i].ip(), local);
        }
        Ok(n)
    }
}

/// Whether a socket error means "nothing yet".
fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sets O_NONBLOCK on `fd`.
fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL take an int argument (or none) and touch only the open file
    // description's flags; an fd that is not open makes them fail with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Up to [`BATCH`] socket addresses of either IP version for one sendmmsg(2) or
/// recvmmsg(2): a `sockaddr_in` and a `sockaddr_in6` per slot, the one in use named by the
/// slot's version.
struct Names {
    v4: [libc::sockaddr_in; BATCH],
    v6: [libc::sockaddr_in6; BATCH],
    is_v6: [bool; BATCH],
}

impl Names {
    fn new() -> Names {
        Names {
            // SAFETY: sockaddr_in and sockaddr_in6 are plain C structs of integers and byte
            // arrays, for which all-zero bytes are a valid value.
            v4: unsafe { std::mem::zeroed() },
            v6: unsafe { std::mem::zeroed() },
            is_v6: [false; BATCH],
        }
    }

    /// Slot `i` names `a`.
    fn set(&mut self, i: usize, a: SocketAddr) {
        match a {
            SocketAddr::V4(a) => {
                self.is_v6[i] = false;
                self.v4[i] = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
            }
            SocketAddr::V6(a) => {
                self.is_v6[i] = true;
                self.v6[i] = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
            }
        }
    }

    /// Slot `i` as a `msg_name` and `msg_namelen` (of the version set for it).
    fn raw(&mut self, i: usize) -> (*mut libc::c_void, libc::socklen_t) {
        if self.is_v6[i] {
            (
                (&mut self.v6[i] as *mut libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        } else {
            (
                (&mut self.v4[i] as *mut libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
    }

    /// The address in slot `i` (of the version set for it).
    fn get(&self, i: usize) -> SocketAddr {
        if self.is_v6[i] {
            let a = &self.v6[i];
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            ))
        } else {
            let a = &self.v4[i];
            SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            ))
        }
    }
}

/// Sends `packets[i]` to `to`'s slot `i` with one sendmmsg(2): how many went (at least
/// one), or the first one's error.
fn send_mmsg(fd: RawFd, packets: &[&[u8]], to: &mut Names) -> io::Result<usize> {
    let n = packets.len().min(BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain C structs for which all-zero bytes (null pointers,
    // zero lengths) are valid values.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iov[i].iov_base = packets[i].as_ptr() as *mut libc::c_void;
        iov[i].iov_len = packets[i].len();
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
        (hdrs[i].msg_hdr.msg_name, hdrs[i].msg_hdr.msg_namelen) = to.raw(i);
    }
    // SAFETY: the first `n` headers each point at one iovec describing a live, borrowed
    // packet (the kernel only reads it for a send) and at one socket address of `to` with
    // its true length; `iov`, `hdrs`, `to` and `packets` all outlive the call. The kernel
    // writes only `msg_len` of the headers.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok((r as usize).max(1))
    }
}

/// Receives up to [`BATCH`] datagrams into `batch`'s receive areas (each from byte `skip`
/// on) with one recvmmsg(2): waits for the first as long as the socket's receive timeout
/// allows, then takes what is already queued (MSG_WAITFORONE). `lens[i]` is datagram `i`'s
/// length (truncated to its area), `srcs.0[i]` its source when asked for, of the version
/// `srcs.1` says (IPv6 if true; the socket's). `Ok(0)` on timeout.
fn recv_mmsg(
    fd: RawFd,
    batch: &mut Batch,
    skip: usize,
    lens: &mut [usize; BATCH],
    mut srcs: Option<(&mut [SocketAddr; BATCH], bool)>,
) -> io::Result<usize> {
    // SAFETY: as in send_mmsg, all-zero iovec and mmsghdr are valid values.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let mut names = Names::new();
    let mut room = [0usize; BATCH];
    for (i, area) in batch.recv_areas().enumerate().take(BATCH) {
        let from = skip.min(area.len());
        let area = &mut area[from..];
        room[i] = area.len();
        iov[i].iov_base = area.as_mut_ptr().cast();
        iov[i].iov_len = area.len();
    }
    for i in 0..BATCH {
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
        if let Some((_, v6)) = &srcs {
            names.is_v6[i] = *v6;
            (hdrs[i].msg_hdr.msg_name, hdrs[i].msg_hdr.msg_namelen) = names.raw(i);
        }
    }
    // SAFETY: every header points at one iovec describing a distinct receive area of
    // `batch` (exclusively borrowed for the call) with its true length, and, when sources
    // are asked for, at one socket address of `names` (of the socket's version) with its
    // true length. The kernel writes at most `iov_len` bytes into each area, at most
    // `msg_namelen` into each name, and the headers' `msg_len`/`msg_namelen`/`msg_flags`.
    // All of it outlives the call; a null timeout means the socket's own SO_RCVTIMEO applies.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            BATCH as libc::c_uint,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if is_wait(&e) { Ok(0) } else { Err(e) };
    }
    let n = (r as usize).min(BATCH);
    for i in 0..n {
        lens[i] = (hdrs[i].msg_len as usize).min(room[i]);
        if let Some((s, _)) = srcs.as_mut() {
            s[i] = names.get(i);
        }
    }
    Ok(n)
}

/// Receives one datagram into `buf` with recvfrom(2), with its source (of the socket's IP
/// version: IPv6 if `v6`); `Ok(None)` when none came within the socket's receive timeout.
fn recv_from(fd: RawFd, buf: &mut [u8], v6: bool) -> io::Result<Option<(usize, SocketAddr)>> {
    let mut names = Names::new();
    names.is_v6[0] = v6;
    let (name, mut len) = names.raw(0);
    // SAFETY: `buf` is a valid, exclusively borrowed buffer of `buf.len()` bytes that
    // recvfrom(2) writes at most that many bytes into; `name` points at one socket address
    // in `names` of `len` bytes, which the kernel writes at most `len` bytes into (updating
    // `len`). Both outlive the call.
    let r = unsafe { libc::recvfrom(fd, buf.as_mut_ptr().cast(), buf.len(), 0, name.cast(), &mut len) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if is_wait(&e) { Ok(None) } else { Err(e) };
    }
    Ok(Some(((r as usize).min(buf.len()), names.get(0))))
}

/// One peer of an ESP-in-UDP socket group: its configured address and where its
/// datagrams go (the configured port until an authenticated packet of its SAs arrives from
/// elsewhere, RFC 3948 NAT traversal).
struct Endpoint {
    peer: IpAddr,
    configured: SocketAddr,
    /// Set (rarely: only when the peer moves) by the receiving threads, read for every send.
    learned: ArcSwapOption<SocketAddr>,
}

impl Endpoint {
    fn current(&self) -> SocketAddr {
        self.learned.load().as_deref().copied().unwrap_or(self.configured)
    }
}

/// ESP in UDP (RFC 3948) on one UDP socket of one IP version, bound to the local address
/// and port (4500 by default), for both directions, with any number of peers of that
/// version. Sealed packets lose their outer header (the socket adds its own) and go to their
/// peer's current endpoint: the configured address and port until an authenticated packet
/// of that peer's SAs arrives from elsewhere (the peer is behind a NAT), then that packet's
/// source ([`UnderlayRx::authenticated`]). Received datagrams get back an IP header (peer →
/// local, protocol 50) in the headroom, so the engine sees what raw ESP would have given it;
/// the source in it is the configured address of the peer whose current endpoint (or
/// address) sent the datagram, else the datagram's source. Keepalives and non-ESP (IKE)
/// datagrams are sorted out before the engine.
pub struct UdpEncap {
    sock: Socket,
    local: IpAddr,
    /// The peers, shared by the sockets of one [`UdpEncap::open_group`].
    peers: Arc<[Endpoint]>,
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
            .map(|&peer| Endpoint {
                peer,
                configured: SocketAddr::new(peer, dport),
                learned: ArcSwapOption::empty(),
            })
            .collect();
        Self::open_with(local, sport, peers, wait)
    }

    fn open_with(local: IpAddr, sport: u16, peers: Arc<[Endpoint]>, wait: Duration) -> io::Result<UdpEncap> {
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
        Ok(UdpEncap {
            sock,
            local,
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

    /// Where sealed packets to `peer` go now (`None`: not a peer of this socket).
    pub fn endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
        self.peers.iter().find(|e| e.peer == peer).map(Endpoint::current)
    }

    /// Each peer, where its packets go now, and whether that was learned.
    pub fn endpoints(&self) -> impl Iterator<Item = (IpAddr, SocketAddr, bool)> + '_ {
        self.peers
            .iter()
            .map(|e| (e.peer, e.current(), e.learned.load().is_some()))
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
        for e in self.peers.iter() {
            match self.sock.send_to(&[encap::KEEPALIVE], &SockAddr::from(e.current())) {
                Ok(_) => sent += 1,
                Err(x) => err = Some(io::Error::new(x.kind(), format!("to {}: {x}", e.current()))),
            }
        }
        (sent, err)
    }

    /// The source address put in the header rebuilt for a datagram from `from`.
    fn header_src(&self, from: SocketAddr) -> IpAddr {
        if let [only] = &self.peers[..] {
            return only.peer;
        }
        self.peers
            .iter()
            .find(|e| e.current() == from)
            .or_else(|| self.peers.iter().find(|e| e.peer == from.ip()))
            .map_or(from.ip(), |e| e.peer)
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
        // Up to the first packet that cannot go (which fails alone when it is the first).
        let mut m = 0;
        for i in 0..n {
            let payload = encap::esp_payload(packets[i]).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not an ESP packet right after its IP header: cannot go in UDP",
                )
            });
            let ep = self
                .endpoint(dsts[i])
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: not a peer", dsts[i])));
            match payload.and_then(|p| ep.map(|e| (p, e))) {
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
        batch.gro_rx.allocate();
        let mut n = 0;
        for round in 0..3 {
            while n < BATCH {
                let Some((len, from)) = batch.fill_from_gro(n, encap::header_len(self.local)) else {
                    break;
                };
                let src = from.map_or(self.local, |f| self.header_src(f));
                let (kind, len) = encap::decapsulate(batch.recv_area(n), len, src, self.local);
                batch.set(n, len, kind, from);
                n += 1;
            }
            if n == BATCH || round == 2 {
                break;
            }
            match recv_mmsg_gro(self.sock.as_raw_fd(), &mut batch.gro_rx, n == 0, self.local.is_ipv6()) {
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

/// Sets an integer socket option.
fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: the option value is one live `c_int` and its true size is passed; the kernel
    // only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
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
        let h = encap::header_len(self.local);
        if buf.len() <= h {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let Some((n, from)) = recv_from(self.sock.as_raw_fd(), &mut buf[h..], self.local.is_ipv6())? else {
            return Ok(None);
        };
        let (kind, len) = encap::decapsulate(buf, n, self.header_src(from), self.local);
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
            encap::header_len(self.local),
            &mut lens,
            Some((&mut srcs, self.local.is_ipv6())),
        )?;
        for i in 0..n {
            let src = self.header_src(srcs[i]);
            let area = batch.recv_area(i);
            let (kind, len) = encap::decapsulate(area, lens[i], src, self.local);
            batch.set(i, len, kind, Some(srcs[i]));
        }
        Ok(n)
    }

    fn authenticated(&self, peer: IpAddr, src: SocketAddr) {
        let Some(e) = self.peers.iter().find(|e| e.peer == peer) else {
            return;
        };
        if e.learned.load().as_deref() != Some(&src) {
            e.learned.store(Some(Arc::new(src)));
            tracing::info!("ESP-in-UDP (peer {peer}): the peer's endpoint is now {src}");
        }
    }
}

/// A `struct ifreq` naming interface `name`, the rest zero.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.iter().any(|&c| c == 0 || c == b'/' || c.is_ascii_whitespace()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name `{name}`: 1 to 15 bytes, no '/', spaces or NUL"),
        ));
    }
    // SAFETY: `ifreq` is plain C data (a char array and a union of integers, socket addresses,
    // char arrays and a raw pointer); all-zero bytes are a valid value of every field.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &s) in ifr.ifr_name.iter_mut().zip(b) {
        *d = s as libc::c_char;
    }
    Ok(ifr)
}

/// Issues one of the `SIOC[GS]IF*` requests that read or write a `struct ifreq`.
fn ifreq_ioctl(request: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    // SAFETY: every request passed here (SIOCGIFMTU, SIOCSIFMTU, SIOCGIFFLAGS, SIOCSIFFLAGS)
    // takes a pointer to one `struct ifreq`, which `ifr` is: valid, exclusively borrowed and
    // alive across the call. The socket's fd is open until `sock` drops after the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, ifr as *mut libc::ifreq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn with_name(name: &str, e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what} of {name}: {e}"))
}

/// The MTU of interface `name`.
pub fn mtu(name: &str) -> io::Result<u32> {
    let mut ifr = ifreq(name)?;
    ifreq_ioctl(libc::SIOCGIFMTU, &mut ifr).map_err(|e| with_name(name, e, "reading the MTU"))?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote `ifru_mtu`; any bit pattern is a
    // valid c_int anyway.
    let m = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(m.max(0) as u32)
}

/// Sets the MTU of interface `name`. Needs CAP_NET_ADMIN.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mut ifr = ifreq(name)?;
    ifr.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("MTU {mtu} too large")))?;
    ifreq_ioctl(libc::SIOCSIFMTU, &mut ifr).map_err(|e| with_name(name, e, "setting the MTU"))
}

/// The interface flags of `name` (`IFF_UP`, ...).
pub fn flags(name: &str) -> io::Result<libc::c_short> {
    let mut ifr = ifreq(name)?;
    ifreq_ioctl(libc::SIOCGIFFLAGS, &mut ifr).map_err(|e| with_name(name, e, "reading the flags"))?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote `ifru_flags`; any bit pattern is a
    // valid c_short anyway.
    Ok(unsafe { ifr.ifr_ifru.ifru_flags })
}

/// Brings interface `name` up. Needs CAP_NET_ADMIN.
pub fn set_up(name: &str) -> io::Result<()> {
    let f = flags(name)?;
    let mut ifr = ifreq(name)?;
    ifr.ifr_ifru.ifru_flags = f | libc::IFF_UP as libc::c_short;
    ifreq_ioctl(libc::SIOCSIFFLAGS, &mut ifr).map_err(|e| with_name(name, e, "bringing up"))
}

/// The user id of the process at the other end of a Unix stream socket (`SO_PEERCRED`, as
/// the peer was when it connected): the control socket serves root only.
pub fn peer_uid(s: &std::os::unix::net::UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a valid, writable ucred and `len` its size, as SO_PEERCRED requires;
    // the kernel writes at most `len` bytes and the fd is open for the call's duration.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;
    use std::time::Instant;

    fn privileged() -> bool {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        (unsafe { libc::geteuid() }) == 0 && std::path::Path::new("/dev/net/tun").exists()
    }

    /// A privileged test that cannot run here: a failure where the caller said it must run
    /// (`IPSEC_REQUIRE_PRIVILEGED`, which `scripts/test.sh` sets when it can create a TUN
    /// device), else a loud note that nothing was checked.
    fn not_run(why: &str) {
        if std::env::var_os("IPSEC_REQUIRE_PRIVILEGED").is_some() {
            panic!("{why}, but IPSEC_REQUIRE_PRIVILEGED is set: this test must run here");
        }
        eprintln!("NOT RUN, nothing checked: {why} (set IPSEC_REQUIRE_PRIVILEGED to make this a failure)");
    }

    #[test]
    fn poll_waits_then_sees_data() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let t0 = Instant::now();
        assert!(!poll_readable(a.as_raw_fd(), Duration::from_millis(50)).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(40));
        b.send(b"x").unwrap();
        assert!(poll_readable(a.as_raw_fd(), Duration::from_secs(5)).unwrap());
        let mut buf = [0u8; 4];
        assert_eq!(a.recv(&mut buf).unwrap(), 1);
        assert!(!poll_readable(a.as_raw_fd(), Duration::ZERO).unwrap());
        // A bad fd is an answer too, not undefined behaviour.
        assert!(poll_readable(-1, Duration::from_millis(1)).is_ok());
    }

    #[test]
    fn interface_names_are_checked() {
        for bad in ["", "0123456789abcdef", "a/b", "a b", "a\0"] {
            assert_eq!(ifreq(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let r = ifreq("ipsec0").unwrap();
        assert_eq!(
            r.ifr_name[..7].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"ipsec0\0"
        );
    }

    #[test]
    fn ioctls_read_loopback_and_fail_cleanly() {
        // Reading needs no privilege.
        assert!(mtu("lo").unwrap() >= 1280);
        assert_ne!(flags("lo").unwrap() & libc::IFF_UP as libc::c_short, 0);
        let missing = "tnl-missing-x";
        assert!(mtu(missing).unwrap_err().to_string().contains(missing));
        assert!(set_mtu(missing, 1400).is_err());
        assert!(set_up(missing).is_err());
        assert_eq!(set_mtu("lo", u32::MAX).unwrap_err().kind(), io::ErrorKind::InvalidInput);
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
        let c = crate::offload::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        qs[1].send(&p).unwrap();
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
                1 => vec![encap::KEEPALIVE],
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
                        p[encap::UDP_IPV4_HEADER..].to_vec()
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
            .map(|d| match encap::classify(d) {
                RxKind::Packet => (RxKind::Packet, d.clone()),
                k => (k, Vec::new()),
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
        assert_eq!(g[0].endpoints().collect::<Vec<_>>(), vec![(LO, from, true)]);
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

    /// As root: IPv6 raw sockets. An ESP packet sent whole (IPV6_HDRINCL) comes back on the
    /// protocol's socket as payload only, and the rebuilt header makes it the packet sent;
    /// an AH-protected packet sealed by the engine, sent over the loopback and rebuilt, opens.
    #[test]
    fn privileged_ipv6_raw_sockets_and_ah() {
        use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Ends};
        use ipsec_core::{AeadAlg, IntegAlg, PacketBuf};
        use ipsec_engine::{Action, Direction, Engine, Policy, SaConfig, Selector, Verdict};
        if !privileged() {
            not_run("needs root");
            return;
        }
        let tx = RawTx::open_v6().unwrap();
        let rx = RawRx::open_v6(50, Ipv6Addr::LOCALHOST, Duration::from_millis(50)).unwrap();
        assert!(rx.is_v6());
        let spi = 0x7e58_0000u32 | (std::process::id() & 0xffff);
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 50, 64];
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&spi.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1]);
        p.extend_from_slice(&[0xab; 40]);
        let plen = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&plen.to_be_bytes());
        tx.send_to(&p, LO6).unwrap();
        assert!(tx.send_to(&p, LO).is_err(), "an IPv4 destination on the IPv6 socket");
        let mut b = Batch::new();
        let t0 = Instant::now();
        loop {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the ESP packet did not come back"
            );
            let n = rx.recv_batch(&mut b).unwrap();
            if let Some(i) = (0..n).find(|&i| b.packet(i).get(40..44) == Some(&spi.to_be_bytes()[..])) {
                assert_eq!(b.kind(i), RxKind::Packet);
                assert_eq!(b.packet(i), &p[..], "the rebuilt packet is the one sent");
                break;
            }
        }

        // AH (transport, on the outer header) around an ESP tunnel, ::1 to ::1.
        let spi = 0x5000 + (std::process::id() & 0xfff);
        let sas = || {
            let ends = Some(Ends { src: LO6, dst: LO6 });
            let mut esp = SaParams::new(Proto::Esp, spi);
            esp.mode = Mode::Tunnel;
            esp.tunnel = ends;
            esp.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
            let mut ah = SaParams::new(Proto::Ah, spi);
            ah.tunnel = ends;
            ah.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[9; 32], 16));
            [SaConfig::new("esp", esp, None), SaConfig::new("ah", ah, None)]
        };
        let engine = |dir| {
            let mut e = Engine::new();
            let ids = sas().map(|c| e.add_sa(c, Duration::ZERO).unwrap()).to_vec();
            let action = Action::Protect(ids);
            e.add_policy(Policy {
                dir,
                selector: Selector::default(),
                action,
            })
            .unwrap();
            e
        };
        let (mut out, mut inb) = (engine(Direction::Out), engine(Direction::In));
        let inner = [
            0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 1, 1, 1, 10, 1, 1, 2, 0, 1, 0, 2, 0, 8, 0, 0,
        ];
        let mut raw = vec![0u8; 2048];
        let mut buf = PacketBuf::new(&mut raw, 512, inner.len()).unwrap();
        buf.packet_mut().copy_from_slice(&inner);
        assert_eq!(out.outbound(&mut buf, Duration::ZERO), Ok(Verdict::Protected(2)));
        let sealed = buf.packet().to_vec();
        assert_eq!(sealed[6], 51);
        let rx = RawRx::open_v6(51, Ipv6Addr::LOCALHOST, Duration::from_millis(50)).unwrap();
        tx.send_to(&sealed, LO6).unwrap();
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < Duration::from_secs(5), "the AH packet did not come back");
            let mut b = Batch::new();
            let n = rx.recv_batch(&mut b).unwrap();
            let Some(i) = (0..n).find(|&i| b.packet(i).get(44..48) == Some(&spi.to_be_bytes()[..])) else {
                continue;
            };
            let got = b.packet(i);
            let mut area = vec![0u8; 512 + got.len() + 512];
            area[512..512 + got.len()].copy_from_slice(got);
            let mut pb = PacketBuf::new(&mut area, 512, got.len()).unwrap();
            assert_eq!(inb.inbound(&mut pb, Duration::ZERO), Ok(Verdict::Protected(2)));
            assert_eq!(pb.packet(), &inner[..]);
            break;
        }
    }

    /// As root: a TUN device gets its MTU and comes up; raw sockets carry an ESP packet over
    /// loopback exactly as sent. Skipped (passes) without privileges.
    #[test]
    fn privileged_tun_and_raw_sockets() {
        if !privileged() {
            not_run("needs root and /dev/net/tun");
            return;
        }
        let tun = match Tun::open("tnltest%d", Duration::from_millis(20)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                not_run(&format!("root without CAP_NET_ADMIN here: {e}"));
                return;
            }
            Err(e) => panic!("creating a TUN device: {e}"),
        };
        let name = tun.name().to_string();
        set_mtu(&name, 1300).unwrap();
        assert_eq!(mtu(&name).unwrap(), 1300);
        set_up(&name).unwrap();
        assert_ne!(flags(&name).unwrap() & libc::IFF_UP as libc::c_short, 0);
        let mut buf = [0u8; 2048];
        // Nothing is routed to it: reads time out instead of blocking.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(100) {
            if let Some(n) = tun.recv(&mut buf).unwrap() {
                assert!(n > 0); // the kernel's own IPv6 chatter, if any
            }
        }
        // A truncated packet written to it is the kernel's to drop, not an error here.
        tun.send(&[0x45, 0, 0, 20]).ok();

        let rx = RawRx::open(50, Some(Ipv4Addr::LOCALHOST), Duration::from_millis(50)).unwrap();
        assert_eq!(rx.proto(), 50);
        let tx = RawTx::open().unwrap();
        let mut p = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 50, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        let spi = 0x7e57_0000u32 | (std::process::id() & 0xffff);
        p.extend_from_slice(&spi.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1]);
        p.extend_from_slice(&[0xab; 40]);
        let total = p.len() as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        tx.send_to(&p, LO).unwrap();
        let t0 = Instant::now();
        loop {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the ESP packet did not come back"
            );
            let Some(n) = rx.recv(&mut buf).unwrap() else { continue };
            if buf[20..24] != spi.to_be_bytes() {
                continue; // someone else's
            }
            assert_eq!(n, p.len());
            // The kernel filled in the checksum; everything else is as sent.
            assert_eq!(&buf[..10], &p[..10]);
            assert_eq!(&buf[12..n], &p[12..]);
            break;
        }
    }
}
