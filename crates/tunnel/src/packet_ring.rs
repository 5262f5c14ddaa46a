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
//! The raw IP sockets stay open beside the rings ([`crate::raw::RawRx`]): without a socket
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
//! The send side is [`crate::packet_tx`].
//!
//! `unsafe` here: the `setsockopt`s with struct arguments, `bind` with a `sockaddr_ll`, `mmap`
//! and `munmap` of the ring, and the reads of the ring's frames, which the kernel and this
//! process share (each with its `// SAFETY:` comment). The ring protocol: a frame whose
//! status has `TP_STATUS_USER` belongs to this process until it stores `TP_STATUS_KERNEL`
//! back (acquire on the load, release on the store).
#![allow(unsafe_code)]

use crate::packet::{Batch, RxKind, BATCH};
use crate::sys::{poll_readable, set_int_option};
use crate::underlay::UnderlayRx;
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

/// The fanout group's program ([`PACKET_FANOUT_CBPF`]): which ring gets a packet, from the
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

// tc over rtnetlink (linux/rtnetlink.h, linux/pkt_sched.h, linux/pkt_cls.h).
const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_OPS_LEN: u16 = 4;
const TCA_BPF_OPS: u16 = 5;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;
/// `TC_H_CLSACT`: the clsact qdisc's parent; its handle is `TC_H_MAKE(TC_H_CLSACT, 0)`.
const TC_H_CLSACT: u32 = 0xffff_fff1;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)`: where ingress filters hang.
const TC_INGRESS_PARENT: u32 = 0xffff_fff2;
/// The priority of tunneld's ingress filter: late, so that filters of others run first.
pub const INGRESS_PRIO: u16 = 0xfe50;

/// A `struct tcmsg` request with `attrs`, flags `flags`.
fn tc_message(kind: u16, flags: u16, ifindex: u32, handle: u32, parent: u32, info: u32, attrs: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m.extend_from_slice(&[0u8; 4]); // family AF_UNSPEC, padding
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&handle.to_ne_bytes());
    m.extend_from_slice(&parent.to_ne_bytes());
    m.extend_from_slice(&info.to_ne_bytes());
    m.extend_from_slice(attrs);
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    m
}

/// One netlink attribute, padded to 4 bytes.
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(4 + value.len() + 3);
    a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    a.resize(a.len().next_multiple_of(4), 0);
    a
}

/// The request that installs (or replaces) the ingress filter: cls_bpf, direct action, with
/// the classic BPF `prog`, on `ifindex`, for EtherType `proto`, with handle `handle`.
pub fn ingress_filter_request(ifindex: u32, proto: u16, handle: u32, prog: &[(u16, u8, u8, u32)]) -> Vec<u8> {
    let mut ops = Vec::with_capacity(prog.len() * 8);
    for &(code, jt, jf, k) in prog {
        ops.extend_from_slice(&code.to_ne_bytes());
        ops.extend_from_slice(&[jt, jf]);
        ops.extend_from_slice(&k.to_ne_bytes());
    }
    let mut options = nla(TCA_BPF_OPS_LEN, &(prog.len() as u16).to_ne_bytes());
    options.extend(nla(TCA_BPF_OPS, &ops));
    options.extend(nla(TCA_BPF_NAME, b"tunneld\0"));
    options.extend(nla(TCA_BPF_FLAGS, &TCA_BPF_FLAG_ACT_DIRECT.to_ne_bytes()));
    let mut attrs = nla(TCA_KIND, b"bpf\0");
    attrs.extend(nla(TCA_OPTIONS | NLA_F_NESTED, &options));
    let info = u32::from(INGRESS_PRIO) << 16 | u32::from(proto.to_be());
    tc_message(
        RTM_NEWTFILTER,
        NLM_F_CREATE | NLM_F_REPLACE,
        ifindex,
        handle,
        TC_INGRESS_PARENT,
        info,
        &attrs,
    )
}

/// Sends `req` and reads the kernel's acknowledgement: `Ok` or the error it reports.
fn tc_request(nl: &Socket, req: &[u8]) -> io::Result<()> {
    use std::io::Read;
    nl.send(req)?;
    let mut buf = [0u8; 4096];
    let n = (&*nl).read(&mut buf)?;
    let r = &buf[..n];
    if r.len() < 20 || u16::from_ne_bytes([r[4], r[5]]) != NLMSG_ERROR {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no netlink acknowledgement"));
    }
    match i32::from_ne_bytes([r[16], r[17], r[18], r[19]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// tunneld's tc ingress filter on one interface ([`ingress_program`]): the packets the rings
/// took end there, after the packet taps and before the IP stack, which would otherwise route
/// each one, deliver it to the raw socket of its protocol (a clone, dropped by that socket's
/// filter) and free it. Removed on drop; a filter left behind by a daemon that was killed is
/// replaced by the next one for the same address (same handle), or removed with
/// `tc filter del dev IF ingress pref 65104` (`INGRESS_PRIO`).
pub struct IngressDrop {
    nl: Socket,
    ifindex: u32,
    handle: u32,
    proto: u16,
}

impl IngressDrop {
    /// Installs the filter for rings with filter `f` on `ifindex` (adding the clsact qdisc
    /// if the interface has none). Needs CAP_NET_ADMIN, `sch_clsact` and `cls_bpf`.
    pub fn install(ifindex: u32, f: &RingFilter) -> io::Result<IngressDrop> {
        let (proto, handle) = match (f.local4, f.local6) {
            (Some(a), None) => (libc::ETH_P_IP as u16, u32::from(a)),
            (None, Some(a)) => (
                libc::ETH_P_IPV6 as u16,
                u32::from_be_bytes(a.octets()[12..].try_into().unwrap_or([0; 4])),
            ),
            _ => (libc::ETH_P_ALL as u16, 1),
        };
        let handle = handle.max(1);
        let nl = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::DGRAM,
            Some(socket2::Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        nl.set_read_timeout(Some(Duration::from_millis(500)))?;
        let clsact = tc_message(
            RTM_NEWQDISC,
            NLM_F_CREATE | NLM_F_EXCL,
            ifindex,
            TC_H_CLSACT & 0xffff_0000,
            TC_H_CLSACT,
            0,
            &nla(TCA_KIND, b"clsact\0"),
        );
        match tc_request(&nl, &clsact) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
            _ => {}
        }
        tc_request(
            &nl,
            &ingress_filter_request(ifindex, proto, handle, &ingress_program(f)),
        )?;
        Ok(IngressDrop {
            nl,
            ifindex,
            handle,
            proto,
        })
    }

    /// Removes the filter a killed daemon may have left for `local` (on the interface that
    /// has it), so that a daemon receiving on the raw sockets alone gets those packets.
    /// `Ok(true)`: there was one.
    pub fn remove_stale(local: Ipv4Addr) -> io::Result<bool> {
        let Some(ifindex) = interface_of(IpAddr::V4(local))? else {
            return Ok(false);
        };
        let nl = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::DGRAM,
            Some(socket2::Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        nl.set_read_timeout(Some(Duration::from_millis(500)))?;
        let handle = u32::from(local).max(1);
        match tc_request(&nl, &delete_request(ifindex, libc::ETH_P_IP as u16, handle)) {
            Ok(()) => Ok(true),
            // No clsact qdisc (EINVAL), or no filter of ours on it (ENOENT).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The request that removes tunneld's ingress filter with `handle` for `proto` on `ifindex`.
fn delete_request(ifindex: u32, proto: u16, handle: u32) -> Vec<u8> {
    let info = u32::from(INGRESS_PRIO) << 16 | u32::from(proto.to_be());
    tc_message(
        RTM_DELTFILTER,
        0,
        ifindex,
        handle,
        TC_INGRESS_PARENT,
        info,
        &nla(TCA_KIND, b"bpf\0"),
    )
}

impl Drop for IngressDrop {
    fn drop(&mut self) {
        if let Err(e) = tc_request(&self.nl, &delete_request(self.ifindex, self.proto, self.handle)) {
            tracing::warn!("removing the tc ingress filter on interface {}: {e}", self.ifindex);
        }
    }
}

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
mod tests {
    use super::*;

    /// A classic BPF interpreter for what the programs here use (loads of the packet, its
    /// length and type, AND, the conditional jumps, ja, ret): the programs run on made-up
    /// packets without a kernel. Returns the program's verdict (0: drop).
    fn run(prog: &[(u16, u8, u8, u32)], pkt: &[u8], pkttype: u32, ifindex: u32) -> u32 {
        run_at(prog, pkt, pkttype, ifindex, 0)
    }

    /// [`run`] on a packet whose network header is at `net` (what `SKF_NET_OFF` loads are
    /// relative to); also the loads, stores and ALU operations of [`fanout_program`].
    fn run_at(prog: &[(u16, u8, u8, u32)], pkt: &[u8], pkttype: u32, ifindex: u32, net: usize) -> u32 {
        let (mut a, mut x, mut m, mut pc) = (0u32, 0u32, [0u32; 16], 0usize);
        loop {
            let (code, jt, jf, k) = prog[pc];
            pc += 1;
            let load = |at: usize, n: usize| -> Option<u32> {
                pkt.get(at..at + n)
                    .map(|b| b.iter().fold(0u32, |x, &y| x << 8 | u32::from(y)))
            };
            let abs = |k: u32| -> usize {
                if k >= NET_OFF && k < AD_PKTTYPE.min(AD_IFINDEX) {
                    net + (k - NET_OFF) as usize
                } else {
                    k as usize
                }
            };
            match code {
                LD_W_ABS if k != AD_PKTTYPE && k != AD_IFINDEX => match load(abs(k), 4) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LD_H_ABS => match load(abs(k), 2) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LD_B_ABS => match load(abs(k), 1) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LD_W_IND => match load(x as usize + k as usize, 4) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LDX_B_MSH => match load(k as usize, 1) {
                    Some(v) => x = (v & 0xf) * 4,
                    None => return 0,
                },
                ST => m[k as usize] = a,
                LDX_MEM => x = m[k as usize],
                TAX => x = a,
                ALU_XOR_X => a ^= x,
                ALU_RSH_K => a >>= k,
                ALU_ADD_K => a = a.wrapping_add(k),
                RET_A => return a,
                LD_W_ABS if k == AD_PKTTYPE => a = pkttype,
                LD_W_ABS if k == AD_IFINDEX => a = ifindex,
                LD_W_LEN => a = pkt.len() as u32,
                ALU_AND_K => a &= k,
                JMP_JA => pc += k as usize,
                JMP_JEQ_K | JMP_JGT_K | JMP_JSET_K => {
                    let c = match code {
                        JMP_JEQ_K => a == k,
                        JMP_JGT_K => a > k,
                        _ => a & k != 0,
                    };
                    pc += usize::from(if c { jt } else { jf });
                }
                RET_K => return k,
                _ => panic!("opcode {code:#x} not handled"),
            }
        }
    }

    const L4: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);
    const L6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x98, 0, 0, 0, 0, 0, 2);

    fn v4(proto: u8, dst: Ipv4Addr, frag: u16, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 98, 0, 1]);
        p[16..20].copy_from_slice(&dst.octets());
        p
    }

    fn v6(next: u8, dst: Ipv6Addr, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[24..40].copy_from_slice(&dst.octets());
        p
    }

    fn filter() -> RingFilter {
        RingFilter {
            protocols: vec![50, 51, 108],
            local4: Some(L4),
            local6: Some(L6),
            max_len: 1968,
        }
    }

    #[test]
    fn ring_program_takes_exactly_the_wanted_packets() {
        let prog = ring_program(&filter());
        let host = libc::PACKET_HOST as u32;
        let ok = |p: &[u8]| run(&prog, p, host, 1) != 0;
        for proto in [50, 51, 108] {
            assert!(ok(&v4(proto, L4, 0, 100)), "IPv4 proto {proto}");
            assert!(ok(&v4(proto, L4, 0x4000, 1500)), "IPv4 proto {proto} with DF");
            assert!(ok(&v6(proto, L6, 1500)), "IPv6 proto {proto}");
        }
        assert!(ok(&v4(50, L4, 0, 1968)), "the longest");
        assert!(!ok(&v4(50, L4, 0, 1969)), "too long for a frame: the raw socket's");
        assert!(!ok(&v6(50, L6, 1969)));
        assert!(!ok(&v4(17, L4, 0, 100)), "UDP");
        assert!(!ok(&v4(6, L4, 0, 100)), "TCP");
        assert!(!ok(&v4(50, Ipv4Addr::new(10, 98, 0, 3), 0, 100)), "to another address");
        assert!(!ok(&v6(50, Ipv6Addr::LOCALHOST, 100)), "to another address");
        assert!(!ok(&v4(50, L4, 0x2000, 100)), "a first fragment");
        assert!(!ok(&v4(50, L4, 0x0010, 100)), "a later fragment");
        assert!(!ok(&v6(44, L6, 100)), "an IPv6 fragment");
        assert!(!ok(&v6(0, L6, 100)), "hop-by-hop options first");
        assert!(!ok(&[0x50; 60]), "not IP");
        assert!(!ok(&[0x45]), "a runt");
        assert!(!ok(&[]), "empty");
        assert_eq!(
            run(&prog, &v4(50, L4, 0, 100), libc::PACKET_OTHERHOST as u32, 1),
            0,
            "not to this host"
        );
        assert_eq!(run(&prog, &v4(50, L4, 0, 100), libc::PACKET_BROADCAST as u32, 1), 0);

        // Without an IPv6 local address, no IPv6; only the protocols asked for.
        let f = RingFilter {
            protocols: vec![50],
            local6: None,
            ..filter()
        };
        let prog = ring_program(&f);
        assert_ne!(run(&prog, &v4(50, L4, 0, 100), host, 1), 0);
        assert_eq!(run(&prog, &v4(51, L4, 0, 100), host, 1), 0);
        assert_eq!(run(&prog, &v6(50, L6, 100), host, 1), 0);
        let f = RingFilter {
            local4: None,
            ..filter()
        };
        let prog = ring_program(&f);
        assert_eq!(run(&prog, &v4(50, L4, 0, 100), host, 1), 0);
        assert_ne!(run(&prog, &v6(50, L6, 100), host, 1), 0);
    }

    /// The tc ingress program, run where tc runs it (an Ethernet header before the IP one),
    /// ends exactly the packets the ring program takes, and lets the rest on.
    #[test]
    fn ingress_program_ends_what_the_ring_takes() {
        let f = filter();
        let (ring, tc) = (ring_program(&f), ingress_program(&f));
        let host = libc::PACKET_HOST as u32;
        let mut packets = vec![
            v4(50, L4, 0, 100),
            v4(51, L4, 0x4000, 1500),
            v4(108, L4, 0, 1968),
            v4(50, L4, 0, 1969),
            v4(50, L4, 0, 9000),
            v4(17, L4, 0, 100),
            v4(50, Ipv4Addr::new(10, 98, 0, 3), 0, 100),
            v4(50, L4, 0x2000, 100),
            v4(50, L4, 0x0010, 100),
            v6(50, L6, 100),
            v6(50, L6, 1968),
            v6(50, L6, 1969),
            v6(44, L6, 100),
            v6(6, L6, 100),
            vec![0x45],
            vec![0x50; 60],
        ];
        packets.push(Vec::new());
        for p in &packets {
            let mut framed = vec![0u8; 14];
            framed.extend_from_slice(p);
            for pkttype in [host, libc::PACKET_OTHERHOST as u32, libc::PACKET_BROADCAST as u32] {
                let taken = run(&ring, p, pkttype, 1) != 0;
                let verdict = run_at(&tc, &framed, pkttype, 1, 14);
                let want = if taken { TC_ACT_STOLEN } else { TC_ACT_UNSPEC };
                // A load past the end aborts a program with 0 (TC_ACT_OK): only for runts,
                // which the ring does not take either.
                assert!(
                    verdict == want || (!taken && verdict == 0 && p.len() < 20),
                    "packet {:02x?}... ({} bytes), type {pkttype}: ring {taken}, tc {verdict:#x}",
                    &p[..p.len().min(10)],
                    p.len()
                );
            }
        }
    }

    /// The fanout program: one SA's packets always to one ring; other SAs spread over the
    /// rings; whatever it is given, it ends (runts with 0).
    #[test]
    fn fanout_program_keeps_an_sa_on_one_ring() {
        let prog = fanout_program();
        let esp = |spi: u32, src: [u8; 4], len: usize| {
            let mut p = v4(50, L4, 0, len);
            p[12..16].copy_from_slice(&src);
            p[20..24].copy_from_slice(&spi.to_be_bytes());
            p
        };
        let pick = |p: &[u8]| run(&prog, p, 0, 1);
        let a = pick(&esp(0x2001, [10, 98, 0, 1], 100));
        for len in [60, 1400, 1968] {
            assert_eq!(pick(&esp(0x2001, [10, 98, 0, 1], len)), a, "same SA, other length");
        }
        // With options, the SPI is found after them.
        let mut opts = esp(0x2001, [10, 98, 0, 1], 104);
        opts[0] = 0x46;
        opts.copy_within(20..100, 24);
        assert_eq!(pick(&opts), a);
        let mut rings = [0usize; 4];
        for spi in 0x1000..0x1400u32 {
            rings[(pick(&esp(spi, [10, 98, 0, 1], 100)) % 4) as usize] += 1;
        }
        assert!(rings.iter().all(|&n| n > 150), "SPIs spread over 4 rings: {rings:?}");
        let mut six = v6(50, L6, 100);
        six[40..44].copy_from_slice(&0x2001u32.to_be_bytes());
        assert_eq!(pick(&six), pick(&six.clone()));
        assert_eq!(pick(&[0x45; 10]), 0, "a runt");
        assert_eq!(pick(&[]), 0);
    }

    #[test]
    fn tc_requests_have_the_rtnetlink_layout() {
        let prog = ingress_program(&filter());
        let r = ingress_filter_request(7, libc::ETH_P_IP as u16, 0x0a62_0002, &prog);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize, r.len());
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_NEWTFILTER);
        let flags = u16::from_ne_bytes([r[6], r[7]]);
        assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
        assert_eq!(i32::from_ne_bytes(r[20..24].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(r[24..28].try_into().unwrap()), 0x0a62_0002);
        assert_eq!(u32::from_ne_bytes(r[28..32].try_into().unwrap()), TC_INGRESS_PARENT);
        let info = u32::from_ne_bytes(r[32..36].try_into().unwrap());
        assert_eq!(info >> 16, u32::from(INGRESS_PRIO));
        assert_eq!(u16::from_be((info & 0xffff) as u16), libc::ETH_P_IP as u16);
        // TCA_KIND "bpf", then the nested options with the program's instructions.
        assert_eq!(&r[36..44], &[8, 0, 1, 0, b'b', b'p', b'f', 0][..]);
        let opt_len = u16::from_ne_bytes([r[44], r[45]]) as usize;
        assert_eq!(u16::from_ne_bytes([r[46], r[47]]), TCA_OPTIONS | NLA_F_NESTED);
        assert_eq!(44 + opt_len, r.len());
        assert_eq!(u16::from_ne_bytes([r[52], r[53]]) as usize, prog.len());
        assert_eq!(u16::from_ne_bytes([r[56], r[57]]) as usize, 4 + 8 * prog.len());
        let d = delete_request(7, libc::ETH_P_IP as u16, 5);
        assert_eq!(u16::from_ne_bytes([d[4], d[5]]), RTM_DELTFILTER);
        assert_eq!(&d[32..36], &r[32..36]);
    }

    #[test]
    fn raw_program_keeps_only_what_the_ring_cannot_take() {
        let prog = raw_program(7, 1968);
        assert_eq!(run(&prog, &v4(50, L4, 0, 1968), 0, 7), 0);
        assert_ne!(run(&prog, &v4(50, L4, 0, 1969), 0, 7), 0);
        assert_ne!(run(&prog, &v4(50, L4, 0, 9000), 0, 7), 0);
        assert_ne!(run(&prog, &v4(50, L4, 0, 100), 0, 8), 0, "from another interface");
    }

    /// As root: a ring on the loopback takes an ESP packet sent to 127.0.0.1 (as sent, the
    /// kernel's header checksum aside) and an IPv6 one to ::1 (header and all, nothing to
    /// rebuild), but not a packet longer than its frames, which the raw socket filtered with
    /// [`RawRx::keep_longer_than`](crate::raw::RawRx::keep_longer_than) gets instead; the
    /// short one never reaches that raw socket.
    #[test]
    fn privileged_ring_and_filtered_raw_socket_split_the_packets() {
        use crate::raw::{RawRx, RawTx};
        use crate::sys::tests::{not_run, privileged};
        use crate::underlay::UnderlayTx;
        use std::net::IpAddr;
        use std::time::Instant;
        if !privileged() {
            not_run("needs root");
            return;
        }
        let f = RingFilter {
            protocols: vec![50],
            local4: Some(Ipv4Addr::LOCALHOST),
            local6: Some(Ipv6Addr::LOCALHOST),
            max_len: max_len_for(1500),
        };
        let group = (std::process::id() as u16) ^ 0x5a5a;
        let lo = interface_of(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .unwrap()
            .expect("lo has 127.0.0.1");
        assert_eq!(interface_of(IpAddr::V6(Ipv6Addr::LOCALHOST)).unwrap(), Some(lo));
        assert_eq!(interface_of(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77))).unwrap(), None);
        let ring = match PacketRing::open(&f, lo, 1500, group, Duration::from_millis(50)) {
            Ok(r) => r,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                not_run(&format!("packet sockets refused: {e}"));
                return;
            }
            Err(e) => panic!("opening the ring: {e}"),
        };
        assert_eq!(ring.max_len(), 1968);
        let raw = RawRx::open(50, Some(Ipv4Addr::LOCALHOST), Duration::from_millis(50)).unwrap();
        raw.keep_longer_than(lo, ring.max_len()).unwrap();
        let spi = 0x7e59_0000u32 | (std::process::id() & 0xffff);
        let short = {
            let mut p = v4(50, Ipv4Addr::LOCALHOST, 0x4000, 100);
            p[12..16].copy_from_slice(&[127, 0, 0, 1]);
            p[20..24].copy_from_slice(&spi.to_be_bytes());
            p
        };
        let long = {
            let mut p = v4(50, Ipv4Addr::LOCALHOST, 0x4000, 3000);
            p[12..16].copy_from_slice(&[127, 0, 0, 1]);
            p[20..24].copy_from_slice(&spi.to_be_bytes());
            p
        };
        let six = {
            let mut p = v6(50, Ipv6Addr::LOCALHOST, 140);
            p[8..24].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
            p[40..44].copy_from_slice(&spi.to_be_bytes());
            p
        };
        let tx = RawTx::open().unwrap();
        tx.send_to(&short, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        tx.send_to(&long, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        RawTx::open_v6()
            .unwrap()
            .send_to(&six, IpAddr::V6(Ipv6Addr::LOCALHOST))
            .unwrap();
        let ours = |p: &[u8], at: usize| p.get(at..at + 4) == Some(&spi.to_be_bytes()[..]);
        let (mut on_ring, mut b) = (Vec::new(), Batch::new());
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(500) && on_ring.len() < 2 {
            let n = ring.recv_batch(&mut b).unwrap();
            for i in 0..n {
                assert_eq!(b.kind(i), RxKind::Packet);
                let p = b.packet(i);
                if (p[0] >> 4 == 4 && ours(p, 20)) || (p[0] >> 4 == 6 && ours(p, 40)) {
                    on_ring.push(p.to_vec());
                }
            }
        }
        assert_eq!(
            on_ring.len(),
            2,
            "the short IPv4 and the IPv6 packet on the ring, once each"
        );
        let got4 = on_ring.iter().find(|p| p[0] >> 4 == 4).expect("the IPv4 packet");
        assert_eq!(&got4[..10], &short[..10]);
        assert_eq!(&got4[12..], &short[12..]);
        assert_eq!(
            on_ring.iter().find(|p| p[0] >> 4 == 6),
            Some(&six),
            "the IPv6 packet as sent"
        );
        let mut buf = vec![0u8; 65536];
        let mut on_raw = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(300) {
            if let Some(n) = raw.recv(&mut buf).unwrap() {
                if ours(&buf[..n], 20) {
                    on_raw.push(n);
                }
            }
        }
        assert_eq!(on_raw, vec![3000], "only the long packet on the filtered raw socket");
        raw.keep_all().unwrap();
        tx.send_to(&short, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let t0 = Instant::now();
        loop {
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "unfiltered, the raw socket gets it"
            );
            if let Some(n) = raw.recv(&mut buf).unwrap() {
                if ours(&buf[..n], 20) {
                    assert_eq!(n, short.len());
                    break;
                }
            }
        }
    }

    #[test]
    fn frames_hold_the_underlay_mtu() {
        assert_eq!(frame_size(1500), 2048);
        assert_eq!(max_len_for(1500), 1968);
        assert!(max_len_for(1500) >= 1500);
        assert_eq!(frame_size(9000), 16384);
        assert!(max_len_for(9000) >= 9000);
        assert_eq!(frame_size(65535), BLOCK_BYTES);
        assert_eq!(frame_size(0), 2048);
    }
}
