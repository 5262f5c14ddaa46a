//! The batched receive path of raw ESP, AH and IPComp: per IP version, one `AF_PACKET` socket
//! per worker with a `TPACKET_V2` receive ring (packet(7), Documentation/networking/
//! packet_mmap.rst) the kernel copies packets into without a system call per packet, the
//! workers' sockets joined in one fanout group whose classic BPF program
//! ([`fanout_program`]) picks the ring from the source address and the SPI (one SA's
//! packets stay on one worker and in order; `PACKET_FANOUT_FLAG_DEFRAG` reassembles IPv4
//! fragments before they are handed out; `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`: none of what
//! is sent). Each socket is bound to the interface that has the local address
//! ([`interface_of`]) as a tap of every EtherType (taps run before tc ingress), with a
//! classic BPF filter ([`ring_program`]) that passes only packets addressed to this host
//! (`PACKET_HOST`), to the local address, of one of the wanted IP protocols, unfragmented and
//! at most [`PacketRing::max_len`] bytes long. A tc ingress filter ([`IngressDrop`],
//! [`ingress_program`]: the same checks) then ends those packets before the IP stack, which
//! would otherwise route each and hand a clone to the raw socket only to be filtered out.
//! `TUNNELD_RING_INGRESS=off` (environment) binds to the version's EtherType and installs no
//! tc filter; `TUNNELD_RING_FANOUT=hash` uses `PACKET_FANOUT_HASH` (both for measurements).
//!
//! The raw IP sockets stay open beside the rings ([`crate::dev::raw::RawRx`]): without a socket
//! for protocol 50 the kernel, which has no XFRM here, would answer every ESP packet with an
//! ICMP protocol-unreachable. In ring mode each gets a filter ([`raw_filter`]) that keeps only
//! what the ring does not take: packets from other interfaces, and those longer than the
//! ring's frames (IPv6 fragments reassembled into one, jumbo frames), so every packet is
//! received exactly once and the raw sockets' queues stay empty. IPv4 fragments are
//! reassembled before the ring sees them and arrive on the ring when they fit; IPv6 fragments
//! reassembled to at most [`PacketRing::max_len`] bytes are not received in ring mode (the raw
//! sockets filter them out like the unfragmented packets the ring takes): `--no-af-packet` for
//! such an underlay. Ring overflows are read from the kernel (`PACKET_STATISTICS`) and
//! reported through [`UnderlayRx::take_drops`].
//!
//! The send side is [`crate::dev::packet_tx`].
//!
//! `unsafe` here: the `setsockopt`s with struct arguments, `bind` with a `sockaddr_ll`, `mmap`
//! and `munmap` of the ring, and the reads of the ring's frames, which the kernel and this
//! process share (each with its `// SAFETY:` comment). The ring protocol: a frame whose
//! status has `TP_STATUS_USER` belongs to this process until it stores `TP_STATUS_KERNEL`
//! back (acquire on the load, release on the store).
#![allow(unsafe_code)]

use crate::dataplane::packet::{Batch, RxKind, BATCH};
use crate::dev::sys::{poll_readable, set_int_option};
use crate::dev::underlay::UnderlayRx;
use socket2::{Domain, SockFilter, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// `TPACKET_V2` of linux/if_packet.h's `enum tpacket_versions`.
const TPACKET_V2: libc::c_int = 1;
/// The ring of one socket in memory: `frames` frames of `frame_size` bytes each.
const RING_BYTES: usize = 4 << 20;
/// Bytes of each ring block (the kernel allocates the ring in blocks of contiguous pages).
const BLOCK_BYTES: usize = 1 << 16;
/// Where the packet starts in a frame of a `SOCK_DGRAM` packet socket: the `tpacket2_hdr`
/// and the `sockaddr_ll` (52 bytes), the 16 bytes kept for a link-layer header, aligned to
/// `TPACKET_ALIGNMENT` (16): 80 (net/packet/af_packet.c, `tpacket_rcv`).
const NET_OFFSET: usize = 80;

/// The largest packet a ring with frames sized for `underlay_mtu` takes.
pub fn max_len_for(underlay_mtu: u32) -> usize {
    frame_size(underlay_mtu) - NET_OFFSET
}

/// A power of two from 2048 to [`BLOCK_BYTES`] that holds an `underlay_mtu`-byte packet after
/// [`NET_OFFSET`].
fn frame_size(underlay_mtu: u32) -> usize {
    (underlay_mtu as usize + NET_OFFSET)
        .next_power_of_two()
        .clamp(2048, BLOCK_BYTES)
}

/// Which packets a ring takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingFilter {
    /// The IP protocols (50, 51, 108).
    pub protocols: Vec<u8>,
    /// IPv4 packets to this address (`None`: no IPv4 packets).
    pub local4: Option<Ipv4Addr>,
    /// IPv6 packets to this address (`None`: no IPv6 packets).
    pub local6: Option<Ipv6Addr>,
    /// The longest packet taken (IP header included).
    pub max_len: usize,
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_LEN: u16 = 0x80;
const ALU_AND_K: u16 = 0x54;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
const LD_W_IND: u16 = 0x40;
const LDX_B_MSH: u16 = 0xb1;
const LDX_MEM: u16 = 0x61;
const ST: u16 = 0x02;
const TAX: u16 = 0x07;
const ALU_XOR_X: u16 = 0xac;
const ALU_RSH_K: u16 = 0x74;
const ALU_ADD_K: u16 = 0x04;
/// `SKF_NET_OFF`: an absolute load at this base plus `k` reads at the network header plus `k`
/// (where the data does not start at the IP header: tc ingress starts at the link-layer one).
const NET_OFF: u32 = libc::SKF_NET_OFF as u32;
/// `PACKET_FANOUT_CBPF` of linux/if_packet.h (Linux 4.3): a classic BPF program picks the
/// socket of the group (its result modulo the number of sockets).
const PACKET_FANOUT_CBPF: u32 = 6;
/// `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` of linux/if_packet.h: the group's hook is not
/// handed the packets this host sends.
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
/// `PACKET_FANOUT_DATA` of linux/if_packet.h: sets that program.
const PACKET_FANOUT_DATA: libc::c_int = 22;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the packet type (`PACKET_HOST` ...).
const AD_PKTTYPE: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32;
/// `SKF_AD_OFF + SKF_AD_IFINDEX`: loads the index of the interface it came in on.
const AD_IFINDEX: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_IFINDEX) as u32;

/// A jump target in a program being assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Accept,
    Drop,
    V4,
    V6,
}

/// One instruction with symbolic targets.
#[derive(Debug, Clone, Copy)]
struct Op {
    code: u16,
    jt: To,
    jf: To,
    k: u32,
}

fn stmt(code: u16, k: u32) -> Op {
    Op {
        code,
        jt: To::Next,
        jf: To::Next,
        k,
    }
}

fn jump(code: u16, k: u32, jt: To, jf: To) -> Op {
    Op { code, jt, jf, k }
}

/// The program as `(code, jt, jf, k)`, labels resolved: the checks, then the IPv4 part, then
/// the IPv6 part, then `ret accept` and `ret drop`.
fn assemble(head: &[Op], v4: &[Op], v6: &[Op], accept_k: u32, drop_k: u32) -> Vec<(u16, u8, u8, u32)> {
    let (at_v4, at_v6) = (head.len(), head.len() + v4.len());
    let accept = at_v6 + v6.len();
    let drop = accept + 1;
    let ops: Vec<Op> = head.iter().chain(v4).chain(v6).copied().collect();
    let target = |pc: usize, t: To| -> usize {
        match t {
            To::Next => pc + 1,
            To::Accept => accept,
            To::Drop => drop,
            To::V4 => at_v4,
            To::V6 => at_v6,
        }
    };
    let mut out = Vec::with_capacity(ops.len() + 2);
    for (pc, op) in ops.iter().enumerate() {
        let rel = |t: To| -> usize { target(pc, t) - (pc + 1) };
        if op.code == JMP_JA {
            out.push((op.code, 0, 0, rel(op.jt) as u32));
        } else if op.code & 0x07 == 0x05 {
            let (jt, jf) = (rel(op.jt), rel(op.jf));
            assert!(jt <= 255 && jf <= 255, "BPF jump too long");
            out.push((op.code, jt as u8, jf as u8, op.k));
        } else {
            out.push((op.code, 0, 0, op.k));
        }
    }
    out.push((RET_K, 0, 0, accept_k));
    out.push((RET_K, 0, 0, drop_k));
    out
}

/// The checks of [`ring_program`], with the packet's IP header at `at` (0, or [`NET_OFF`]);
/// the length is the packet's (`skb->len`) or, with `ip_len`, the one its IP header gives
/// (where the data starts before the IP header).
fn ring_checks(f: &RingFilter, at: u32, ip_len: bool) -> (Vec<Op>, Vec<Op>, Vec<Op>) {
    let mut head = vec![
        stmt(LD_W_ABS, AD_PKTTYPE),
        jump(JMP_JEQ_K, libc::PACKET_HOST as u32, To::Next, To::Drop),
    ];
    if !ip_len {
        head.push(stmt(LD_W_LEN, 0));
        head.push(jump(JMP_JGT_K, f.max_len as u32, To::Drop, To::Next));
    }
    head.extend([
        stmt(LD_B_ABS, at),
        stmt(ALU_AND_K, 0xf0),
        jump(JMP_JEQ_K, 0x40, To::V4, To::Next),
        jump(JMP_JEQ_K, 0x60, To::V6, To::Drop),
    ]);
    let protos = |off: u32, ops: &mut Vec<Op>| {
        ops.push(stmt(LD_B_ABS, at + off));
        for &p in &f.protocols {
            ops.push(jump(JMP_JEQ_K, u32::from(p), To::Accept, To::Next));
        }
        ops.push(jump(JMP_JA, 0, To::Drop, To::Drop));
    };
    let mut v4 = Vec::new();
    match f.local4 {
        Some(a) => {
            if ip_len {
                v4.push(stmt(LD_H_ABS, at + 2));
                v4.push(jump(JMP_JGT_K, f.max_len as u32, To::Drop, To::Next));
            }
            // More fragments or a fragment offset: a fragment the fanout did not reassemble.
            v4.push(stmt(LD_H_ABS, at + 6));
            v4.push(jump(JMP_JSET_K, 0x3fff, To::Drop, To::Next));
            v4.push(stmt(LD_W_ABS, at + 16));
            v4.push(jump(JMP_JEQ_K, u32::from(a), To::Next, To::Drop));
            protos(9, &mut v4);
        }
        None => v4.push(jump(JMP_JA, 0, To::Drop, To::Drop)),
    }
    let mut v6 = Vec::new();
    match f.local6 {
        Some(a) => {
            if ip_len {
                v6.push(stmt(LD_H_ABS, at + 4));
                v6.push(stmt(ALU_ADD_K, 40));
                v6.push(jump(JMP_JGT_K, f.max_len as u32, To::Drop, To::Next));
            }
            for (i, w) in a.octets().chunks(4).enumerate() {
                v6.push(stmt(LD_W_ABS, at + 24 + 4 * i as u32));
                let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                v6.push(jump(JMP_JEQ_K, w, To::Next, To::Drop));
            }
            // The next header right after the fixed header: no extension header, no fragment.
            protos(6, &mut v6);
        }
        None => v6.push(jump(JMP_JA, 0, To::Drop, To::Drop)),
    }
    (head, v4, v6)
}

/// The ring's filter program for `f` (a `SOCK_DGRAM` packet socket: data starts at the IP
/// header).
pub fn ring_program(f: &RingFilter) -> Vec<(u16, u8, u8, u32)> {
    let (head, v4, v6) = ring_checks(f, 0, false);
    assemble(&head, &v4, &v6, u32::MAX, 0)
}

/// `TC_ACT_STOLEN` of linux/pkt_cls.h: the filter took the packet (freed as consumed, not
/// counted as a drop).
pub const TC_ACT_STOLEN: u32 = 4;
/// `TC_ACT_UNSPEC`: not this filter's; the next filter, then the stack, gets it.
pub const TC_ACT_UNSPEC: u32 = u32::MAX;

/// The tc ingress program (direct action) that ends, after the packet taps, the packets a
/// ring with filter `f` has taken: [`TC_ACT_STOLEN`] for them, [`TC_ACT_UNSPEC`] for the
/// rest. The same checks as [`ring_program`], at the network header (tc's data starts at the
/// link-layer header) and on the length in the IP header (`skb->len` there includes the
/// link-layer header; the two differ only on padded or malformed packets, which the raw
/// sockets' filter drops too).
pub fn ingress_program(f: &RingFilter) -> Vec<(u16, u8, u8, u32)> {
    let (head, v4, v6) = ring_checks(f, NET_OFF, true);
    assemble(&head, &v4, &v6, TC_ACT_STOLEN, TC_ACT_UNSPEC)
}

/// The fanout group's program (`PACKET_FANOUT_CBPF`): which ring gets a packet, from the
/// packet's source address and the first word after the IP header (ESP's SPI, IPComp's CPI),
/// so one SA's packets stay on one ring and in order. Cheaper per packet than
/// `PACKET_FANOUT_HASH`, which dissects the flow and runs siphash on it; ESP's flow hash has
/// no ports anyway, so that put all of one peer's packets on one ring. IPv4 fragments are
/// reassembled before it runs (`PACKET_FANOUT_FLAG_DEFRAG`); a packet too short for the loads
/// ends the program with 0 (the first ring).
pub fn fanout_program() -> Vec<(u16, u8, u8, u32)> {
    vec![
        (LD_B_ABS, 0, 0, 0),
        (ALU_AND_K, 0, 0, 0xf0),
        (JMP_JEQ_K, 0, 5, 0x40),
        // IPv4: X = the header length; M[0] = the first word after it; A = the source.
        (LDX_B_MSH, 0, 0, 0),
        (LD_W_IND, 0, 0, 0),
        (ST, 0, 0, 0),
        (LD_W_ABS, 0, 0, 12),
        (JMP_JA, 0, 0, 3),
        // Otherwise (IPv6): the first word after the fixed header; the source's last word.
        (LD_W_ABS, 0, 0, 40),
        (ST, 0, 0, 0),
        (LD_W_ABS, 0, 0, 20),
        // Mix: A ^= M[0]; A ^= A >> 16; A ^= A >> 8.
        (LDX_MEM, 0, 0, 0),
        (ALU_XOR_X, 0, 0, 0),
        (TAX, 0, 0, 0),
        (ALU_RSH_K, 0, 0, 16),
        (ALU_XOR_X, 0, 0, 0),
        (TAX, 0, 0, 0),
        (ALU_RSH_K, 0, 0, 8),
        (ALU_XOR_X, 0, 0, 0),
        (RET_A, 0, 0, 0),
    ]
}

/// The filter for a raw receiving socket beside a ring on interface `ifindex`: every packet
/// that came in on another interface, and of those on `ifindex` only the ones whose length
/// as the socket sees it is above `min_len` (IPv4: the whole packet, so the ring's `max_len`;
/// IPv6: the payload after the header, so `max_len - 40`).
pub fn raw_program(ifindex: u32, min_len: usize) -> Vec<(u16, u8, u8, u32)> {
    vec![
        (LD_W_ABS, 0, 0, AD_IFINDEX),
        (JMP_JEQ_K, 0, 2, ifindex),
        (LD_W_LEN, 0, 0, 0),
        (JMP_JGT_K, 0, 1, min_len as u32),
        (RET_K, 0, 0, u32::MAX),
        (RET_K, 0, 0, 0),
    ]
}

fn sock_filters(prog: &[(u16, u8, u8, u32)]) -> Vec<SockFilter> {
    prog.iter()
        .map(|&(code, jt, jf, k)| SockFilter::new(code, jt, jf, k))
        .collect()
}

/// Attaches [`raw_program`]`(ifindex, min_len)` to a raw socket.
pub fn raw_filter(sock: &Socket, ifindex: u32, min_len: usize) -> io::Result<()> {
    sock.attach_filter(&sock_filters(&raw_program(ifindex, min_len)))
}

/// The index of the interface that has `addr`, if one has.
pub fn interface_of(addr: IpAddr) -> io::Result<Option<u32>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocated into `list` (a valid
    // out-pointer), or fails and writes nothing.
    if unsafe { libc::getifaddrs(&mut list) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not freed until below; its
        // `ifa_addr` is null or points at a sockaddr of the family its `sa_family` says, and
        // `ifa_name` at a NUL-terminated name.
        unsafe {
            let ifa = &*at;
            let a = ifa.ifa_addr;
            let this = if a.is_null() {
                None
            } else {
                match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(a as *const libc::sockaddr_in);
                        Some(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(a as *const libc::sockaddr_in6);
                        Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                    }
                    _ => None,
                }
            };
            if this == Some(addr) {
                let i = libc::if_nametoindex(ifa.ifa_name);
                found = (i != 0).then_some(i);
            }
            at = ifa.ifa_next;
        }
    }
    // SAFETY: `list` is what getifaddrs returned; nothing points into it any more.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

mod ingress;
pub use ingress::{ingress_filter_request, IngressDrop, INGRESS_PRIO};

/// One worker's `AF_PACKET` socket and its mapped receive ring.
pub struct PacketRing {
    sock: Socket,
    /// The mapping's start; `frames * frame_size` bytes, unmapped on drop.
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frames: usize,
    /// The next frame to look at. Only the one thread that runs this ring's loop reads and
    /// writes it; an atomic so that `&self` suffices.
    next: AtomicUsize,
    max_len: usize,
    wait: Duration,
    /// Overflows read from the kernel and not yet taken ([`UnderlayRx::take_drops`]).
    drops: AtomicU64,
    /// The group's tc ingress filter, held by one of its rings ([`PacketRing::hold`]).
    ingress: Option<IngressDrop>,
}

// SAFETY: the mapping is owned by the PacketRing (unmapped only in Drop) and shared with the
// kernel only through the ring protocol: frame statuses are accessed atomically, and a
// frame's bytes are read only while its status says it belongs to this process. Moving the
// ring to another thread or sharing `&PacketRing` does not change that; the cursor is atomic.
unsafe impl Send for PacketRing {}
// SAFETY: as above; see Send.
unsafe impl Sync for PacketRing {}

impl PacketRing {
    /// Opens one ring taking what `filter` passes, with frames sized for `underlay_mtu`, in
    /// fanout group `group` (the same for every worker's ring of one daemon). Reads wait at
    /// most `wait`. Needs CAP_NET_RAW; fails on kernels before 4.20 (`PACKET_IGNORE_OUTGOING`).
    pub fn open(
        filter: &RingFilter,
        ifindex: u32,
        underlay_mtu: u32,
        group: u16,
        wait: Duration,
    ) -> io::Result<PacketRing> {
        let frame_size = frame_size(underlay_mtu);
        // One IP version: bound to its EtherType, the socket is a protocol handler of that
        // type only (no copies of other traffic, none of what is sent); both: every packet.
        let ethertype = match (filter.local4, filter.local6) {
            _ if std::env::var("TUNNELD_RING_INGRESS").as_deref() != Ok("off") => libc::ETH_P_ALL,
            (Some(_), None) => libc::ETH_P_IP,
            (None, Some(_)) => libc::ETH_P_IPV6,
            _ => libc::ETH_P_ALL,
        };
        // Protocol 0: nothing is received until bind, after the filter and ring are set.
        let sock = Socket::new(Domain::PACKET, Type::DGRAM, Some(0.into()))?;
        let fd = sock.as_raw_fd();
        sock.attach_filter(&sock_filters(&ring_program(filter)))?;
        set_int_option(fd, libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V2)?;
        if ethertype == libc::ETH_P_ALL {
            set_int_option(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)?;
        }
        let block = BLOCK_BYTES.max(frame_size);
        let blocks = (RING_BYTES / block).max(1);
        let req = libc::tpacket_req {
            tp_block_size: block as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (blocks * (block / frame_size)) as u32,
        };
        // SAFETY: PACKET_RX_RING takes a `struct tpacket_req`; `req` is one, initialized, and
        // lives across the call, and its size is passed.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                (&req as *const libc::tpacket_req).cast(),
                std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let map_len = block * blocks;
        // SAFETY: maps the ring the kernel just allocated for `fd` (offset 0, its whole size,
        // shared, read-write as packet_mmap.rst prescribes); no Rust object aliases the new
        // mapping, which is unmapped in Drop only.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = PacketRing {
            sock,
            map: map.cast(),
            map_len,
            frame_size,
            frames: map_len / frame_size,
            next: AtomicUsize::new(0),
            max_len: filter.max_len,
            wait,
            drops: AtomicU64::new(0),
            ingress: None,
        };
        // SAFETY: sockaddr_ll is a plain C struct; all-zero bytes are a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (ethertype as u16).to_be();
        // 0: every interface.
        sll.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `sll` is an initialized sockaddr_ll that lives across the call, with its size.
        let r = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let cbpf = std::env::var("TUNNELD_RING_FANOUT").as_deref() != Ok("hash");
        let mode = if cbpf {
            PACKET_FANOUT_CBPF
        } else {
            libc::PACKET_FANOUT_HASH
        };
        let fanout = |flags: u32| (mode | libc::PACKET_FANOUT_FLAG_DEFRAG | flags) << 16 | u32::from(group);
        // The group's own hook is the one the kernel calls, so PACKET_IGNORE_OUTGOING above
        // does not reach it: without the group's flag, every packet sent on the interface is
        // cloned and handed to a ring's filter (which drops it: not PACKET_HOST).
        if ethertype != libc::ETH_P_ALL
            || set_int_option(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                fanout(PACKET_FANOUT_FLAG_IGNORE_OUTGOING) as libc::c_int,
            )
            .is_err()
        {
            // Before Linux 6.2 (no such flag): the outgoing packets cost a clone each.
            set_int_option(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, fanout(0) as libc::c_int)?;
        }
        if cbpf {
            let mut prog: Vec<libc::sock_filter> = fanout_program()
                .into_iter()
                .map(|(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
                .collect();
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_mut_ptr(),
            };
            // SAFETY: PACKET_FANOUT_DATA of a PACKET_FANOUT_CBPF group takes a `struct
            // sock_fprog`; `fprog` is one pointing at `prog`'s `len` instructions, and both
            // live across the call, which copies them.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_PACKET,
                    PACKET_FANOUT_DATA,
                    (&fprog as *const libc::sock_fprog).cast(),
                    std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(ring)
    }

    /// Keeps `d` (the group's tc ingress filter) until this ring is dropped.
    pub fn hold(&mut self, d: IngressDrop) {
        self.ingress = Some(d);
    }

    /// The longest packet it takes.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Frame `i`'s status word.
    fn status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.frames);
        // SAFETY: frame `i` lies inside the mapping (i < frames, frames * frame_size <=
        // map_len) and starts on a frame boundary, so 4-aligned (frame sizes are powers of two
        // >= 2048, the mapping page-aligned); its first 4 bytes are the tpacket2_hdr's
        // tp_status, which the kernel writes concurrently, so it is only ever accessed
        // atomically. The mapping outlives `&self`.
        unsafe { AtomicU32::from_ptr(self.map.add(i * self.frame_size).cast()) }
    }

    /// Copies frame `i` (owned by this process: its status has TP_STATUS_USER) into slot
    /// `slot` of `batch` and hands the frame back to the kernel.
    fn take(&self, i: usize, batch: &mut Batch, slot: usize) {
        // SAFETY: frame `i` is inside the mapping and belongs to this process until the
        // status store below (the acquire load that saw TP_STATUS_USER orders the kernel's
        // writes of the header and the packet before these reads); the header is read
        // unaligned-safe, and the packet bytes are bounds-checked against the frame below.
        let hdr: libc::tpacket2_hdr =
            unsafe { std::ptr::read_unaligned(self.map.add(i * self.frame_size).cast::<libc::tpacket2_hdr>()) };
        let (net, snap, len) = (hdr.tp_net as usize, hdr.tp_snaplen as usize, hdr.tp_len as usize);
        let area = batch.recv_area(slot);
        if net >= self.frame_size || snap > self.frame_size - net || snap < len || snap > area.len() {
            // Truncated (longer than a frame) or a header that does not add up: the filter
            // lets neither through.
            batch.set(slot, 0, RxKind::Runt, None);
        } else {
            // SAFETY: [net, net + snap) lies inside frame `i` (checked just above), which this
            // process owns until the store below; `area` is a distinct Rust buffer.
            let bytes = unsafe { std::slice::from_raw_parts(self.map.add(i * self.frame_size + net), snap) };
            area[..snap].copy_from_slice(bytes);
            batch.set(slot, snap, RxKind::Packet, None);
        }
        self.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }

    /// Takes the ready frames from the cursor on, at most [`BATCH`]; reads the kernel's drop
    /// count when a frame says there were drops (`TP_STATUS_LOSING`).
    fn drain(&self, batch: &mut Batch) -> usize {
        let mut i = self.next.load(Ordering::Relaxed);
        let mut n = 0;
        let mut losing = false;
        loop {
            let status = self.status(i).load(Ordering::Acquire);
            if n == BATCH || status & libc::TP_STATUS_USER == 0 {
                break;
            }
            losing |= status & libc::TP_STATUS_LOSING != 0;
            self.take(i, batch, n);
            n += 1;
            i = (i + 1) % self.frames;
        }
        self.next.store(i, Ordering::Relaxed);
        if losing {
            self.read_drops();
        }
        n
    }

    /// Adds the packets the kernel dropped since the last read (`PACKET_STATISTICS`, which
    /// resets the kernel's counts) to [`drops`](Self::drops).
    fn read_drops(&self) {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: PACKET_STATISTICS on a TPACKET_V2 socket fills a `struct tpacket_stats`;
        // `st` is one, `len` says its size, and both live across the call.
        let r = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.drops.fetch_add(u64::from(st.tp_drops), Ordering::Relaxed);
        }
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: `map` and `map_len` are exactly what mmap returned and were given; nothing
        // refers to the mapping after this (the ring is being dropped).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

impl UnderlayRx for PacketRing {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // The loops use recv_batch; this one-packet form copies out of a batch.
        let mut b = Batch::new();
        match self.recv_batch(&mut b)? {
            0 => Ok(None),
            _ => {
                let p = b.packet(0);
                let n = p.len().min(buf.len());
                buf[..n].copy_from_slice(&p[..n]);
                Ok(Some(n))
            }
        }
    }

    fn recv_batch(&self, batch: &mut Batch) -> io::Result<usize> {
        let n = self.drain(batch);
        if n > 0 {
            return Ok(n);
        }
        if !poll_readable(self.sock.as_raw_fd(), self.wait)? {
            // Idle: drops at the end of a burst have no later frame to flag them.
            self.read_drops();
            return Ok(0);
        }
        Ok(self.drain(batch))
    }

    fn take_drops(&self) -> u64 {
        self.drops.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
