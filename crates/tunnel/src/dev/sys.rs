//! The system calls the devices share, and the interface settings: `poll(2)` on a
//! descriptor, the socket-address arrays and `sendmmsg`/`recvmmsg`/`recvfrom` that move several
//! datagrams (or one with its source) per call, integer socket options, the `SIOC[GS]IF*`
//! ioctls on a `struct ifreq` (MTU, up) and `SO_PEERCRED` for the control socket's peer.
//!
//! The devices are one file each: the TUN device ([`crate::dev::tun`]), raw IP sockets
//! ([`crate::dev::raw`]) and the ESP-in-UDP socket with UDP GSO/GRO ([`crate::dev::udp`]). `unsafe` is
//! allowed in these four files only, each use with its `// SAFETY:` comment and a test:
//! `libc` has no safe wrapper for any of these calls. Here: `poll(2)`, zeroed C structs
//! (`sockaddr_in`/`in6`, `iovec`, `mmsghdr`, `ifreq`) and the calls that fill them, the
//! reads of the `ifreq` union field the kernel filled in, `setsockopt` and `getsockopt`.
#![allow(unsafe_code)]

use crate::dataplane::packet::{Batch, BATCH};
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
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

/// Puts the socket `new` in the place of `old` (dup3(2) with O_CLOEXEC): `old`'s descriptor
/// refers to `new`'s socket from now on, and the socket it referred to is closed once no call
/// still uses it (a thread blocked in a read on it returns at its timeout, then reads the new
/// one). A socket moved to another local address (RFC 4555 3.5, `ipsec ike update`) without
/// the threads that use its descriptor stopping or taking a lock. `new` stays open too (the
/// caller drops it).
pub fn replace_fd(new: &impl std::os::fd::AsRawFd, old: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    // SAFETY: dup3 takes two descriptors by number and touches no memory of ours; both are
    // open (owned by `new` and `old`, borrowed for the call), and `old` keeps owning its number,
    // which refers to an open socket before and after the call.
    let r = unsafe { libc::dup3(new.as_raw_fd(), old.as_raw_fd(), libc::O_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Binds the netlink socket `sock` with the multicast `groups` (a `RTMGRP_*` mask): the
/// kernel sends it those notifications (rtnetlink(7)).
pub fn netlink_bind_groups(sock: &impl std::os::fd::AsRawFd, groups: u32) -> io::Result<()> {
    // SAFETY: sockaddr_nl is plain old data, all zeroes is a valid value of it.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    // SAFETY: `sa` is an initialized sockaddr_nl that lives across the call, and the length
    // passed is its size; bind(2) only reads it.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits up to `timeout` for any of `fds` (at most 16) to become readable, as
/// [`poll_readable`] does for one: the IKE thread sleeps on its port-500 sockets and its
/// queue's wake-up socket at once. `Ok(false)` on timeout or a signal.
pub fn poll_readable_any(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 16];
    let n = fds.len().min(pfds.len());
    for (p, fd) in pfds.iter_mut().zip(fds) {
        p.fd = *fd;
    }
    let ms = timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is an initialized array of 16 `pollfd`s that lives across the call and
    // nfds = n <= 16 of them are read; poll(2) writes only their `revents`. Closed fds are
    // reported as POLLNVAL, not undefined behaviour.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

/// Whether a socket error means "nothing yet".
pub(crate) fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sets O_NONBLOCK on `fd`.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
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
pub(crate) struct Names {
    v4: [libc::sockaddr_in; BATCH],
    v6: [libc::sockaddr_in6; BATCH],
    pub(crate) is_v6: [bool; BATCH],
}

impl Names {
    pub(crate) fn new() -> Names {
        Names {
            // SAFETY: sockaddr_in and sockaddr_in6 are plain C structs of integers and byte
            // arrays, for which all-zero bytes are a valid value.
            v4: unsafe { std::mem::zeroed() },
            v6: unsafe { std::mem::zeroed() },
            is_v6: [false; BATCH],
        }
    }

    /// Slot `i` names `a`.
    pub(crate) fn set(&mut self, i: usize, a: SocketAddr) {
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
    pub(crate) fn raw(&mut self, i: usize) -> (*mut libc::c_void, libc::socklen_t) {
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
    pub(crate) fn get(&self, i: usize) -> SocketAddr {
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
pub(crate) fn send_mmsg(fd: RawFd, packets: &[&[u8]], to: &mut Names) -> io::Result<usize> {
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
pub(crate) fn recv_mmsg(
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
pub(crate) fn recv_from(fd: RawFd, buf: &mut [u8], v6: bool) -> io::Result<Option<(usize, SocketAddr)>> {
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

/// Sets an integer socket option.
pub(crate) fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
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

/// A `struct ifreq` naming interface `name`, the rest zero.
pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
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

/// Gives the memory the allocator holds but no longer uses back to the system
/// (glibc's `malloc_trim(0)`): after a large config is parsed (a 10,000-peer TOML file takes
/// about 20 KB per peer while it is parsed, 20 times what the daemon then keeps), so the
/// daemon's resident memory is what it holds, not the parse's high-water mark. Whether any
/// was given back.
pub fn release_freed_memory() -> bool {
    // SAFETY: malloc_trim only walks glibc's own heap, under its own locks, and touches no
    // memory of ours; any pad is allowed.
    unsafe { libc::malloc_trim(0) == 1 }
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
    // A persistent device the administrator set up already (`ip tuntap add ... user U`, `ip
    // link set ... mtu`) needs no change, and so no privilege.
    if self::mtu(name).is_ok_and(|m| m == mtu) {
        return Ok(());
    }
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
    if f & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    let mut ifr = ifreq(name)?;
    ifr.ifr_ifru.ifru_flags = f | libc::IFF_UP as libc::c_short;
    ifreq_ioctl(libc::SIOCSIFFLAGS, &mut ifr).map_err(|e| with_name(name, e, "bringing up"))
}

/// The user id of the process at the other end of a Unix stream socket (`SO_PEERCRED`, as
/// the peer was when it connected): the control socket serves root only.
pub fn peer_uid(s: &std::os::unix::net::UnixStream) -> io::Result<u32> {
    peer_cred(s).map(|(uid, _, _)| uid)
}

/// The user id, primary group id and process id of the peer of a Unix stream socket
/// (`SO_PEERCRED`, as the peer was when it connected).
pub fn peer_cred(s: &std::os::unix::net::UnixStream) -> io::Result<(u32, u32, i32)> {
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
    Ok((cred.uid, cred.gid, cred.pid))
}

/// `user`'s uid and primary gid from `/etc/passwd` (a name, or a number taken as the uid
/// with the same gid).
pub fn lookup_user(user: &str) -> io::Result<(u32, u32)> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok((uid, uid));
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[0] == user).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        })
        .flatten()
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no user `{user}` in /etc/passwd")))
}

/// `group`'s gid from `/etc/group` (a name, or a number).
pub fn lookup_group(group: &str) -> io::Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    std::fs::read_to_string("/etc/group")?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[0] == group).then(|| f[2].parse().ok()).flatten()
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no group `{group}` in /etc/group")))
}

/// Gives up root for good, once everything the daemon needs is open: no new privileges
/// (`PR_SET_NO_NEW_PRIVS`, so no exec can regain any), the supplementary groups replaced by
/// `gid`, then `setgid(gid)` and `setuid(uid)` — which, without `PR_SET_KEEPCAPS`, clears the
/// permitted and effective capabilities of every thread (glibc applies set*id to all of
/// them). Checked afterwards: the uid must be `uid` and no capability may remain.
pub fn drop_privileges(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let groups = [gid as libc::gid_t];
    // SAFETY: `groups` is a valid array of one gid_t that outlives the call; setgid and
    // setuid take plain integers.
    unsafe {
        if libc::setgroups(1, groups.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setgid(gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setuid(uid) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or("")
    };
    let uids: Vec<&str> = field("Uid:").split_whitespace().collect();
    if uids.iter().any(|u| u.parse::<u32>().ok() != Some(uid)) || uids.is_empty() {
        return Err(io::Error::other(format!("still running with uids {uids:?}")));
    }
    if uid != 0 && (field("CapEff:") != "0000000000000000" || field("CapPrm:") != "0000000000000000") {
        return Err(io::Error::other("capabilities remain after setuid"));
    }
    Ok(())
}

/// This process's effective uid (geteuid(2)).
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;
    use std::time::Instant;

    /// What a parse leaves behind (many small blocks, freed) goes back to the system: the
    /// resident memory falls by most of it (it would not without the trim: glibc keeps freed
    /// small blocks in its heap).
    #[test]
    fn freed_memory_goes_back_to_the_system() {
        let rss = || -> u64 {
            let s = std::fs::read_to_string("/proc/self/statm").unwrap();
            s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
        };
        // 64 MB in 1 KB blocks, each written (so resident), then all freed but the last,
        // which keeps the heap's top from shrinking on its own.
        let mut blocks: Vec<Box<[u8; 1024]>> = (0..65_536).map(|i| Box::new([i as u8; 1024])).collect();
        let keep = blocks.pop();
        let full = rss();
        drop(blocks);
        release_freed_memory();
        let after = rss();
        assert!(
            after + 32_000_000 < full,
            "resident {full} B with the blocks, {after} B after freeing and trimming"
        );
        drop(keep);
    }

    pub(crate) fn privileged() -> bool {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        (unsafe { libc::geteuid() }) == 0 && std::path::Path::new("/dev/net/tun").exists()
    }

    /// A privileged test that cannot run here: a failure where the caller said it must run
    /// (`IPSEC_REQUIRE_PRIVILEGED`, which `scripts/test.sh` sets when it can create a TUN
    /// device), else a loud note that nothing was checked.
    pub(crate) fn not_run(why: &str) {
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
    fn poll_any_wakes_on_either() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let (c, d) = UnixDatagram::pair().unwrap();
        let fds = [a.as_raw_fd(), c.as_raw_fd()];
        let t0 = Instant::now();
        assert!(!poll_readable_any(&fds, Duration::from_millis(50)).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(40));
        d.send(b"x").unwrap();
        assert!(poll_readable_any(&fds, Duration::from_secs(5)).unwrap());
        assert!(!poll_readable_any(&fds[..1], Duration::ZERO).unwrap());
        let mut buf = [0u8; 4];
        assert_eq!(c.recv(&mut buf).unwrap(), 1);
        b.send(b"y").unwrap();
        assert!(poll_readable_any(&fds, Duration::from_secs(5)).unwrap());
        assert!(poll_readable_any(&[], Duration::from_millis(1)).is_ok());
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
}
