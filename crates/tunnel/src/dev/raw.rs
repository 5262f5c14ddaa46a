//! Raw IP sockets on the underlay: one sending socket per IP version that sends whole
//! packets as the engine built them (IP_HDRINCL / IPV6_HDRINCL), and one receiving socket
//! per IP protocol (ESP, AH, IPComp) and version. IPv6 raw sockets hand over the payload
//! without its IPv6 header (RFC 3542 3): the header is put back ([`outer::rebuild_header`]).
//! No `unsafe` of its own: the batched calls are [`crate::dev::sys`]'s.

use crate::dataplane::packet::{Batch, RxKind, BATCH};
use crate::dev::outer;
use crate::dev::sys::{is_wait, recv_from, recv_mmsg, send_mmsg, Names, RECV_BUFFER};
use crate::dev::underlay::{UnderlayRx, UnderlayTx};
use ipsec_engine::Route;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::Duration;

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
    fn send_to(&self, packet: &[u8], route: &Route) -> io::Result<()> {
        let dst = route.to;
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

    fn send_batch(&self, packets: &[&[u8]], routes: &[Route]) -> io::Result<usize> {
        let n = packets.len().min(routes.len()).min(BATCH);
        let mut to = Names::new();
        for (i, r) in routes[..n].iter().enumerate() {
            if r.to.is_ipv6() != self.v6 {
                if i == 0 {
                    return Err(wrong_family(r.to));
                }
                return send_mmsg(self.sock.as_raw_fd(), &packets[..i], &mut to);
            }
            to.set(i, SocketAddr::new(r.to, 0));
        }
        send_mmsg(self.sock.as_raw_fd(), &packets[..n], &mut to)
    }
}

/// One receiving socket of the underlay: a raw socket for one IP protocol (50 ESP, 51 AH,
/// 108 IPComp) and one IP version, bound to the local underlay address when one is given.
/// IPv4: the kernel hands it whole packets (header included), reassembled if they came in
/// fragments. IPv6: the kernel hands it the payload after the IPv6 header and the
/// extension headers it processed (RFC 3542 3), reassembled; the socket puts an IPv6 header
/// back in front ([`outer::rebuild_header`]: the fields AH's ICV covers as they were sent),
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

    /// Of the packets that come in on interface `ifindex`, keeps only those longer than
    /// `max_len` bytes, IP header included (what an `AF_PACKET` ring on that interface taking
    /// packets up to `max_len` bytes leaves to it, [`crate::dev::packet_ring`]); the rest are
    /// dropped by a socket filter before they are queued. Packets from other interfaces are
    /// all kept.
    pub fn keep_longer_than(&self, ifindex: u32, max_len: usize) -> io::Result<()> {
        // An IPv6 raw socket's filter sees the payload after the header (RFC 3542 3).
        let seen = if self.is_v6() {
            max_len.saturating_sub(outer::IPV6_HEADER)
        } else {
            max_len
        };
        crate::dev::packet_ring::raw_filter(&self.sock, ifindex, seen)
    }

    /// Keeps every packet again (takes the filter of [`keep_longer_than`](Self::keep_longer_than) off).
    pub fn keep_all(&self) -> io::Result<()> {
        self.sock.detach_filter()
    }

    /// Slot `i` of `batch` holds `len` payload bytes after [`outer::IPV6_HEADER`] bytes from
    /// `src`: the header rebuilt, or the slot marked a runt if it cannot be.
    fn rebuild(&self, batch: &mut Batch, i: usize, len: usize, src: IpAddr, local: Ipv6Addr) {
        match outer::rebuild_header(batch.recv_area(i), len, self.proto, src, IpAddr::V6(local)) {
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
        if buf.len() <= outer::IPV6_HEADER {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "buffer too small"));
        }
        let Some((n, src)) = recv_from(self.sock.as_raw_fd(), &mut buf[outer::IPV6_HEADER..], true)? else {
            return Ok(None);
        };
        outer::rebuild_header(buf, n, self.proto, src.ip(), IpAddr::V6(local))
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
            outer::IPV6_HEADER,
            &mut lens,
            Some((&mut srcs, true)),
        )?;
        for i in 0..n {
            self.rebuild(batch, i, lens[i], srcs[i].ip(), local);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::sys::tests::{not_run, privileged};
    use crate::dev::sys::{flags, mtu, set_mtu, set_up};
    use crate::dev::tun::{Tun, TunIo};
    use crate::dev::underlay::route_to;
    use std::time::Instant;

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const LO6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

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
        tx.send_to(&p, &route_to(LO6)).unwrap();
        assert!(
            tx.send_to(&p, &route_to(LO)).is_err(),
            "an IPv4 destination on the IPv6 socket"
        );
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
        tx.send_to(&sealed, &route_to(LO6)).unwrap();
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
        tx.send_to(&p, &route_to(LO)).unwrap();
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
