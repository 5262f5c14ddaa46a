use super::*;
use crate::dev::underlay::route_to;

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

pub(super) fn filter() -> RingFilter {
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
/// [`RawRx::keep_longer_than`](crate::dev::raw::RawRx::keep_longer_than) gets instead; the
/// short one never reaches that raw socket.
#[test]
fn privileged_ring_and_filtered_raw_socket_split_the_packets() {
    use crate::dev::raw::{RawRx, RawTx};
    use crate::dev::sys::tests::{not_run, privileged};
    use crate::dev::underlay::UnderlayTx;
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
    tx.send_to(&short, &route_to(IpAddr::V4(Ipv4Addr::LOCALHOST))).unwrap();
    tx.send_to(&long, &route_to(IpAddr::V4(Ipv4Addr::LOCALHOST))).unwrap();
    RawTx::open_v6()
        .unwrap()
        .send_to(&six, &route_to(IpAddr::V6(Ipv6Addr::LOCALHOST)))
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
    tx.send_to(&short, &route_to(IpAddr::V4(Ipv4Addr::LOCALHOST))).unwrap();
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
