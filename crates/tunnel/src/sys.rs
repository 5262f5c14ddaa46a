//! The real devices: the multi-queue TUN device (TUNSETIFF, TUNSETOFFLOAD written here),
//! IPv4 raw sockets and UDP sockets (`socket2`), and the two interface settings tunneld
//! makes (MTU, up).
//!
//! This is the only module with `unsafe` code, in four small places, each with its reason:
//! `poll(2)` on the TUN descriptor (so the reader can wake up to check for shutdown), a zeroed
//! `struct ifreq`, the `SIOC[GS]IF{MTU,FLAGS}` ioctls with the reads of the union field
//! the kernel filled in, and `getsockopt(SO_PEERCRED)` for the control socket's peer. `libc` has no safe wrapper for either call.
#![allow(unsafe_code)]

use crate::encap::{self, GroBuffers, GRO_MSGS, UDP_IPV4_HEADER};
use crate::tunnel::{Batch, RxKind, TunIo, UnderlayRx, UnderlayTx, BATCH};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The sending side of the underlay: one raw IPv4 socket with IP_HDRINCL, so each packet
/// goes on the wire exactly as the engine built it (the kernel fills in only the header
/// checksum). It is an `IPPROTO_RAW` socket, which sends any protocol and receives nothing.
pub struct RawTx {
    sock: Socket,
}

impl RawTx {
    /// Opens the socket. Needs CAP_NET_RAW.
    pub fn open() -> io::Result<RawTx> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
        sock.set_header_included_v4(true)?;
        Ok(RawTx { sock })
    }
}

impl UnderlayTx for RawTx {
    fn send_to(&self, packet: &[u8], dst: Ipv4Addr) -> io::Result<()> {
        let n = self.sock.send_to(packet, &SockAddr::from(SocketAddrV4::new(dst, 0)))?;
        if n == packet.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short send: {n} of {} bytes", packet.len()),
            ))
        }
    }

    fn send_batch(&self, packets: &[&[u8]], dsts: &[Ipv4Addr]) -> io::Result<usize> {
        let mut to = [sockaddr_in(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); BATCH];
        for (t, d) in to.iter_mut().zip(dsts) {
            *t = sockaddr_in(SocketAddrV4::new(*d, 0));
        }
        send_mmsg(self.sock.as_raw_fd(), packets, &to)
    }
}

/// One receiving socket of the underlay: a raw IPv4 socket for one IP protocol (50 ESP,
/// 51 AH, 108 IPComp), bound to the local underlay address when one is given. The kernel
/// hands it whole IPv4 packets (header included), reassembled if they came in fragments.
pub struct RawRx {
    sock: Socket,
    proto: u8,
}

impl RawRx {
    /// Opens the socket for `proto`; reads wait at most `wait`. Needs CAP_NET_RAW.
    pub fn open(proto: u8, local: Option<Ipv4Addr>, wait: Duration) -> io::Result<RawRx> {
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(i32::from(proto))))?;
        if let Some(a) = local {
            sock.bind(&SockAddr::from(SocketAddrV4::new(a, 0)))?;
        }
        sock.set_read_timeout(Some(wait))?;
        // Best effort: a bigger queue rides out bursts; the kernel caps it.
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
        Ok(RawRx { sock, proto })
    }

    /// The IP protocol it receives.
    pub fn proto(&self) -> u8 {
        self.proto
    }
}

impl UnderlayRx for RawRx {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match (&self.sock).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        let mut lens = [0usize; BATCH];
        let n = recv_mmsg(self.sock.as_raw_fd(), batch, 0, &mut lens, None)?;
        for (i, &len) in lens[..n].iter().enumerate() {
            batch.set(i, len, RxKind::Packet, None);
        }
        Ok(n)
    }
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

/// A `sockaddr_in` for `a`.
fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

/// Sends `packets[i]` to `to[i]` with one sendmmsg(2): how many went (at least one), or the
/// first one's error.
fn send_mmsg(fd: RawFd, packets: &[&[u8]], to: &[libc::sockaddr_in; BATCH]) -> io::Result<usize> {
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
        hdrs[i].msg_hdr.msg_name = &to[i] as *const libc::sockaddr_in as *mut libc::c_void;
        hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    }
    // SAFETY: the first `n` headers each point at one iovec describing a live, borrowed
    // packet (the kernel only reads it for a send) and at one `sockaddr_in` in `to` with its
    // true length; `iov`, `hdrs`, `to` and `packets` all outlive the call. The kernel writes
    // only `msg_len` of the headers.
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
/// length (truncated to its area), `srcs[i]` its source when asked for. `Ok(0)` on timeout.
fn recv_mmsg(
    fd: RawFd,
    batch: &mut Batch,
    skip: usize,
    lens: &mut [usize; BATCH],
    mut srcs: Option<&mut [SocketAddrV4; BATCH]>,
) -> io::Result<usize> {
    // SAFETY: as in send_mmsg, all-zero iovec, mmsghdr and sockaddr_in are valid values.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let mut names: [libc::sockaddr_in; BATCH] = unsafe { std::mem::zeroed() };
    let mut room = [0usize; BATCH];
    for (i, area) in batch.recv_areas().enumerate().take(BATCH) {
        let area = &mut area[skip..];
        room[i] = area.len();
        iov[i].iov_base = area.as_mut_ptr().cast();
        iov[i].iov_len = area.len();
    }
    for i in 0..BATCH {
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
        if srcs.is_some() {
            hdrs[i].msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_in).cast();
            hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
    }
    // SAFETY: every header points at one iovec describing a distinct receive area of
    // `batch` (exclusively borrowed for the call) with its true length, and, when sources
    // are asked for, at one `sockaddr_in` of `names` with its true length. The kernel writes
    // at most `iov_len` bytes into each area, at most `msg_namelen` into each name, and the
    // headers' `msg_len`/`msg_namelen`/`msg_flags`. All of it outlives the call; a null
    // timeout means the socket's own SO_RCVTIMEO applies.
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
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let n = (r as usize).min(BATCH);
    for i in 0..n {
        lens[i] = (hdrs[i].msg_len as usize).min(room[i]);
        if let Some(s) = srcs.as_deref_mut() {
            let a = &names[i];
            s[i] = SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            );
        }
    }
    Ok(n)
}

/// ESP in UDP (RFC 3948) on one UDP socket bound to the local address and port (4500 by
/// default), for both directions. Sealed packets lose their outer IPv4 header (the socket
/// adds its own) and go to the peer's current endpoint: the configured address and port
/// until an authenticated packet arrives from elsewhere (the peer is behind a NAT), then
/// that packet's source. Received datagrams get back an IPv4 header (peer → local, protocol
/// 50) in the headroom, so the engine sees what raw ESP would have given it; keepalives and
/// non-ESP (IKE) datagrams are sorted out before the engine.
pub struct UdpEncap {
    sock: Socket,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    configured: SocketAddrV4,
    /// The learned endpoint: address << 16 | port, with bit 48 set once learned; shared by
    /// the sockets of one [`UdpEncap::open_group`].
    learned: std::sync::Arc<AtomicU64>,
    /// Whether runs of equal-sized datagrams go as one UDP GSO send (until the kernel
    /// refuses it once).
    gso: std::sync::atomic::AtomicBool,
    /// Whether the kernel hands this socket coalesced runs of datagrams (UDP_GRO accepted).
    gro: bool,
}

const LEARNED: u64 = 1 << 48;

impl UdpEncap {
    /// Binds `local:sport`; sends to `peer:dport` until it learns better. Reads wait at most
    /// `wait`.
    pub fn open(local: Ipv4Addr, sport: u16, peer: Ipv4Addr, dport: u16, wait: Duration) -> io::Result<UdpEncap> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_address(true)?;
        sock.set_reuse_port(true)?;
        sock.bind(&SockAddr::from(SocketAddrV4::new(local, sport)))?;
        sock.set_read_timeout(Some(wait))?;
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
        let _ = sock.set_send_buffer_size(RECV_BUFFER);
        let gro = set_int_option(sock.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        Ok(UdpEncap {
            sock,
            local,
            peer,
            configured: SocketAddrV4::new(peer, dport),
            learned: std::sync::Arc::new(AtomicU64::new(0)),
            gso: std::sync::atomic::AtomicBool::new(true),
            gro,
        })
    }

    /// `n` (at least 1) sockets bound to the same `local:sport` with SO_REUSEPORT, one per
    /// worker, sharing the learned endpoint. The kernel spreads received datagrams over them
    /// by 4-tuple hash: each peer's packets go to one socket, in order. (Spreading one
    /// peer's packets by receiving CPU, a SO_ATTACH_REUSEPORT_CBPF program `cpu % n`, was
    /// tried and measured slower: it reorders a TCP flow's packets between workers, and the
    /// retransmits cost more than the second core gains.)
    pub fn open_group(
        local: Ipv4Addr,
        sport: u16,
        peer: Ipv4Addr,
        dport: u16,
        n: usize,
        wait: Duration,
    ) -> io::Result<Vec<UdpEncap>> {
        let first = Self::open(local, sport, peer, dport, wait)?;
        let port = first.local_port()?;
        let mut v = vec![first];
        for _ in 1..n.max(1) {
            let mut u = Self::open(local, port, peer, dport, wait)?;
            u.learned = std::sync::Arc::clone(&v[0].learned);
            v.push(u);
        }
        Ok(v)
    }

    /// Where sealed packets go now.
    pub fn endpoint(&self) -> SocketAddrV4 {
        let v = self.learned.load(Ordering::Relaxed);
        if v & LEARNED == 0 {
            return self.configured;
        }
        SocketAddrV4::new(Ipv4Addr::from((v >> 16) as u32), v as u16)
    }

    /// The port the socket is bound to.
    pub fn local_port(&self) -> io::Result<u16> {
        Ok(self.sock.local_addr()?.as_socket().map_or(0, |a| a.port()))
    }

    /// Sends one NAT-keepalive (a single 0xFF byte) to the peer's endpoint.
    pub fn send_keepalive(&self) -> io::Result<()> {
        self.sock
            .send_to(&[encap::KEEPALIVE], &SockAddr::from(self.endpoint()))
            .map(drop)
    }
}

impl UnderlayTx for UdpEncap {
    fn send_to(&self, packet: &[u8], dst: Ipv4Addr) -> io::Result<()> {
        self.send_batch(&[packet], &[dst]).map(drop)
    }

    fn send_batch(&self, packets: &[&[u8]], dsts: &[Ipv4Addr]) -> io::Result<usize> {
        let n = packets.len().min(BATCH);
        let mut esp: [&[u8]; BATCH] = [&[]; BATCH];
        let to = [sockaddr_in(self.endpoint()); BATCH];
        for i in 0..n {
            esp[i] = encap::esp_payload(packets[i]).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "not an IPv4 ESP packet: cannot go in UDP")
            })?;
            if dsts[i] != self.peer {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "not to the peer"));
            }
        }
        if self.gso.load(Ordering::Relaxed) {
            match send_gso(self.sock.as_raw_fd(), &esp[..n], &to[0]) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT)) => {
                    tracing::warn!("ESP-in-UDP: UDP GSO refused ({e}): one datagram per packet from now on");
                    self.gso.store(false, Ordering::Relaxed);
                }
                r => return r,
            }
        }
        send_mmsg(self.sock.as_raw_fd(), &esp[..n], &to)
    }
}

// send_gso writes the control message by hand: a 16-byte cmsghdr (64-bit Linux).
const _: () = assert!(std::mem::size_of::<libc::cmsghdr>() == 16);

/// The most datagrams one UDP GSO send carries (the kernel's UDP_MAX_SEGMENTS).
const UDP_MAX_SEGMENTS: usize = 64;

/// Sends `payloads` to `to` with one sendmmsg(2), runs of equal-sized datagrams (the last of
/// a run may be shorter) each as one message with UDP_SEGMENT (UDP GSO): the kernel cuts it
/// into datagrams of the run's size. Returns how many datagrams went (at least one).
fn send_gso(fd: RawFd, payloads: &[&[u8]], to: &libc::sockaddr_in) -> io::Result<usize> {
    #[repr(C, align(8))]
    #[derive(Clone, Copy)]
    struct Cmsg([u8; 32]);
    let n = payloads.len().min(BATCH);
    if n == 0 {
        return Ok(0);
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
        // An empty datagram never joins a run: a run's last segment cannot be empty.
        while j < n
            && j - i < UDP_MAX_SEGMENTS
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
        h.msg_name = to as *const libc::sockaddr_in as *mut libc::c_void;
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
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
    // a live borrowed payload the kernel only reads), at `to` with its true length, and, for
    // runs of more than one, at a control buffer holding one well-formed 8-byte-aligned
    // cmsghdr (UDP_SEGMENT, a u16) within `msg_controllen`. Everything outlives the call; the
    // kernel writes only the headers' `msg_len`.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), m as libc::c_uint, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(runs[..(r as usize).min(m)].iter().sum::<usize>().max(1))
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
                let Some((len, src)) = batch.fill_from_gro(n, UDP_IPV4_HEADER) else {
                    break;
                };
                let (kind, len) = encap::decapsulate(batch.recv_area(n), len, self.peer, self.local);
                batch.set(n, len, kind, src);
                n += 1;
            }
            if n == BATCH || round == 2 {
                break;
            }
            match recv_mmsg_gro(self.sock.as_raw_fd(), &mut batch.gro_rx, n == 0) {
                Ok(0) => break,
                Ok(_) => {}
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
/// timeout allows when `wait`, else returns at once. `Ok(0)`: nothing came.
fn recv_mmsg_gro(fd: RawFd, gro: &mut GroBuffers, wait: bool) -> io::Result<usize> {
    #[repr(C, align(8))]
    #[derive(Clone, Copy)]
    struct Cmsg([u8; 64]);
    // SAFETY: as in send_mmsg, all-zero iovec, mmsghdr and sockaddr_in are valid values.
    let mut iov: [libc::iovec; GRO_MSGS] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; GRO_MSGS] = unsafe { std::mem::zeroed() };
    let mut names: [libc::sockaddr_in; GRO_MSGS] = unsafe { std::mem::zeroed() };
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
        return Ok(0);
    }
    for i in 0..m {
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
        h.msg_name = (&mut names[i] as *mut libc::sockaddr_in).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_control = ctl[i].0.as_mut_ptr().cast();
        h.msg_controllen = ctl[i].0.len();
    }
    let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    // SAFETY: each of the first `m` headers points at one iovec describing a distinct buffer
    // of `gro` (exclusively borrowed for the call) with its true length, at one `sockaddr_in`
    // of `names` and at one 8-byte-aligned control buffer of `ctl`, each with its true
    // length. The kernel writes at most those lengths into them, and the headers' lengths
    // and flags. All of it outlives the call; a null timeout means the socket's SO_RCVTIMEO.
    let r = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), m as libc::c_uint, flags, std::ptr::null_mut()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let n = (r as usize).min(m);
    let mut lens = [0usize; GRO_MSGS];
    let mut segs = [0usize; GRO_MSGS];
    let mut srcs = [None; GRO_MSGS];
    for i in 0..n {
        let h = &hdrs[i].msg_hdr;
        lens[i] = (hdrs[i].msg_len as usize).min(room[i]);
        let ctl_len = (h.msg_controllen as usize).min(ctl[i].0.len());
        segs[i] = udp_gro_size(&ctl[i].0[..ctl_len]);
        let a = &names[i];
        srcs[i] = Some(SocketAddrV4::new(
            Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
            u16::from_be(a.sin_port),
        ));
    }
    gro.filled(n, &lens, &segs, &srcs);
    Ok(n)
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
        // Single reads (the daemon uses recv_batch): the datagram after room for the IPv4
        // header, which decapsulation writes; anything but ESP reads as nothing.
        if buf.len() <= UDP_IPV4_HEADER {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let n = match (&self.sock).read(&mut buf[UDP_IPV4_HEADER..]) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let (kind, len) = encap::decapsulate(buf, n, self.peer, self.local);
        Ok((kind == RxKind::Packet).then_some(len))
    }

    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        if self.gro {
            return self.recv_batch_gro(batch);
        }
        let mut lens = [0usize; BATCH];
        let mut srcs = [SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); BATCH];
        let n = recv_mmsg(
            self.sock.as_raw_fd(),
            batch,
            UDP_IPV4_HEADER,
            &mut lens,
            Some(&mut srcs),
        )?;
        for i in 0..n {
            let area = batch.recv_area(i);
            let (kind, len) = encap::decapsulate(area, lens[i], self.peer, self.local);
            batch.set(i, len, kind, Some(srcs[i]));
        }
        Ok(n)
    }

    fn authenticated(&self, src: SocketAddrV4) {
        let v = LEARNED | (u64::from(u32::from(*src.ip())) << 16) | u64::from(src.port());
        if self.learned.swap(v, Ordering::Relaxed) != v {
            tracing::info!("ESP-in-UDP: the peer's endpoint is now {src}");
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
    /// were, in order, with the odd sizes in between.
    #[test]
    fn udp_gso_sends_arrive_as_the_datagrams_they_were() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sizes = [1000, 1000, 1000, 700, 1000, 1000, 3, 1200, 1200];
        let data: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let sent = send_gso(tx.as_raw_fd(), &refs, &sockaddr_in(to)).unwrap();
        assert_eq!(sent, sizes.len());
        let mut buf = [0u8; 70000];
        for d in &data {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &d[..]);
        }
    }

    /// ESP in UDP with UDP GSO on the way out and UDP GRO on the way in (over loopback,
    /// which keeps GSO sends whole): every datagram comes out of `recv_batch` as it was sent,
    /// in order, ESP with its IPv4 header rebuilt, keepalives and runts (an empty one too)
    /// sorted out, across more than one batch.
    #[test]
    fn gso_sends_come_apart_again_through_gro() {
        let rx = UdpEncap::open(
            Ipv4Addr::LOCALHOST,
            0,
            Ipv4Addr::LOCALHOST,
            9,
            Duration::from_millis(200),
        )
        .unwrap();
        assert!(rx.gro, "this kernel (Linux >= 5.0) takes UDP_GRO");
        let to = sockaddr_in(SocketAddrV4::new(Ipv4Addr::LOCALHOST, rx.local_port().unwrap()));
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
            sent += send_gso(tx.as_raw_fd(), &refs[sent..sent + k], &to).unwrap();
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
                        p[UDP_IPV4_HEADER..].to_vec()
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
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "datagram {i}");
        }
    }

    /// ESP-in-UDP sockets of one group share the port and the learned endpoint; a datagram
    /// sent to the port arrives on one of them.
    #[test]
    fn udp_group_shares_port_and_endpoint() {
        let g = UdpEncap::open_group(
            Ipv4Addr::LOCALHOST,
            0,
            Ipv4Addr::LOCALHOST,
            4500,
            2,
            Duration::from_millis(50),
        )
        .unwrap();
        let port = g[0].local_port().unwrap();
        assert_eq!(g[1].local_port().unwrap(), port);
        let from = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001);
        g[1].authenticated(from);
        assert_eq!(g[0].endpoint(), from);
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(&[0xff], (Ipv4Addr::LOCALHOST, port)).unwrap();
        let t0 = Instant::now();
        let mut got = false;
        while !got && t0.elapsed() < Duration::from_secs(5) {
            for u in &g {
                let mut b = Batch::new();
                if u.recv_batch(&mut b).unwrap() > 0 {
                    got = true;
                    break;
                }
            }
        }
        assert!(got, "the keepalive did not arrive on either socket");
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
        tx.send_to(&p, Ipv4Addr::LOCALHOST).unwrap();
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
