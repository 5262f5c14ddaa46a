//! Segmentation and coalescing against packets built and checked by etherparse (an
//! independent implementation of the headers and checksums).

use super::*;
use etherparse::{Ipv4Header, Ipv6Header, PacketBuilder, TcpHeader};

const GSO: u16 = 1400;

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A TCP super-packet as the kernel hands it over with TSO: whole-length IP header, the
/// TCP checksum field holding the pseudo-header sum, and its virtio-net header.
fn super_v4(n: usize, cwr: bool, psh: bool) -> (Vec<u8>, VnetHdr) {
    let mut b = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 5201, 0xffff_f000, 501)
        .ack(12345)
        .options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
        .unwrap();
    if cwr {
        b = b.cwr();
    }
    if psh {
        b = b.psh();
    }
    let body = payload(n);
    let mut p = Vec::new();
    b.write(&mut p, &body).unwrap();
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    let ip = Ipv4Header::from_slice(&p).unwrap().0;
    p[10..12].copy_from_slice(&ip.calc_header_checksum().to_be_bytes());
    to_partial(&mut p, 20);
    let hl = (20 + usize::from(p[32] >> 4) * 4) as u16;
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: hl,
        gso_size: GSO,
        csum_start: 20,
        csum_offset: 16,
    };
    (p, hdr)
}

fn super_v6(n: usize) -> (Vec<u8>, VnetHdr) {
    let b = PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64)
        .tcp(40000, 5201, 7, 501)
        .ack(99)
        .psh();
    let mut p = Vec::new();
    b.write(&mut p, &payload(n)).unwrap();
    to_partial(&mut p, 40);
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV6,
        hdr_len: 60,
        gso_size: GSO,
        csum_start: 40,
        csum_offset: 16,
    };
    (p, hdr)
}

/// Replaces the TCP checksum with the pseudo-header sum, as NEEDS_CSUM packets carry it.
fn to_partial(p: &mut [u8], ip: usize) {
    let tcp_len = p.len() - ip;
    let mut s: u32 = 6 + tcp_len as u32;
    let addrs = if ip == 20 { &p[12..20] } else { &p[8..40] };
    for c in addrs.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    p[ip + 16..ip + 18].copy_from_slice(&(s as u16).to_be_bytes());
}

/// The first byte where `a` and `b` differ (or the length difference), for short failures.
fn diff(a: &[u8], b: &[u8]) -> Option<(usize, u8, u8)> {
    if a.len() != b.len() {
        return Some((usize::MAX, a.len() as u8, b.len() as u8));
    }
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i, *x, *y))
}

fn segment_all(p: &[u8], hdr: &VnetHdr) -> Vec<Vec<u8>> {
    let s = Segmenter::new(p, hdr).unwrap();
    (0..s.count())
        .map(|i| {
            let mut out = vec![0u8; 2000];
            let n = s.write(p, i, &mut out).unwrap();
            out.truncate(n);
            out
        })
        .collect()
}

/// A finished super-packet's bytes as the device gets them: the slices `gather` gives, one
/// after the other (checked against `to_vec`, the other way to join them).
fn gathered(b: &Super, packets: &[&[u8]]) -> Vec<u8> {
    let mut out = [&[][..]; 1 + MAX_PARTS];
    let n = b.gather(packets, &mut out).expect("every part is there");
    let joined = out[..n].concat();
    assert_eq!(joined, b.to_vec(packets));
    assert_eq!(joined.len(), b.len);
    joined
}

fn coalesce_all(segs: &[Vec<u8>]) -> Vec<(VnetHdr, Vec<u8>)> {
    let mut c = Coalescer::new();
    let packets: Vec<&[u8]> = segs.iter().map(|s| &s[..]).collect();
    let mut out = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if c.append(s, i) {
            continue;
        }
        if let Some((h, b)) = c.finish() {
            out.push((h, gathered(&b, &packets)));
        }
        if !c.start(s, i) {
            out.push((VnetHdr::default(), s.clone()));
        }
    }
    if let Some((h, b)) = c.finish() {
        out.push((h, gathered(&b, &packets)));
    }
    out
}

/// Checks a v4 segment with etherparse: header checksum, TCP checksum, lengths.
fn check_v4(seg: &[u8]) -> (Ipv4Header, TcpHeader, usize) {
    let (ip, rest) = Ipv4Header::from_slice(seg).unwrap();
    assert_eq!(usize::from(ip.total_len), seg.len());
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    let (tcp, body) = TcpHeader::from_slice(rest).unwrap();
    assert_eq!(tcp.checksum, tcp.calc_checksum_ipv4(&ip, body).unwrap());
    (ip, tcp, body.len())
}

#[test]
fn v4_segments_are_valid_and_coalesce_back_to_the_original() {
    for (n, cwr) in [
        (5000usize, false),
        (GSO as usize * 3, true),
        (100, false),
        (65535 - 52, false),
    ] {
        let (p, hdr) = super_v4(n, cwr, true);
        let segs = segment_all(&p, &hdr);
        assert_eq!(segs.len(), n.div_ceil(GSO as usize));
        let mut seq = 0xffff_f000u32;
        for (i, s) in segs.iter().enumerate() {
            let (ip, tcp, len) = check_v4(s);
            assert_eq!(ip.identification, 0x4242u16.wrapping_add(i as u16));
            assert_eq!(tcp.sequence_number, seq, "segment {i}");
            assert_eq!(tcp.psh, i + 1 == segs.len());
            assert_eq!(tcp.cwr, cwr && i == 0);
            assert_eq!(tcp.acknowledgment_number, 12345);
            if i + 1 < segs.len() {
                assert_eq!(len, GSO as usize);
            }
            seq = seq.wrapping_add(len as u32);
        }
        let back = coalesce_all(&segs);
        assert_eq!(back.len(), 1);
        if segs.len() == 1 {
            // One segment: written as it is, with a complete checksum.
            assert_eq!(back[0].0, VnetHdr::default());
            assert_eq!(diff(&back[0].1, &segs[0]), None);
        } else {
            assert_eq!(back[0].0, hdr);
            assert_eq!(diff(&back[0].1, &p), None, "n = {n}");
        }
    }
}

#[test]
fn v6_segments_are_valid_and_coalesce_back_to_the_original() {
    let (p, hdr) = super_v6(9000);
    let segs = segment_all(&p, &hdr);
    assert_eq!(segs.len(), 7);
    for s in &segs {
        let (ip, rest) = Ipv6Header::from_slice(s).unwrap();
        assert_eq!(usize::from(ip.payload_length), s.len() - 40);
        let (tcp, body) = TcpHeader::from_slice(rest).unwrap();
        assert_eq!(tcp.checksum, tcp.calc_checksum_ipv6(&ip, body).unwrap());
    }
    let back = coalesce_all(&segs);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].0, hdr);
    assert_eq!(diff(&back[0].1, &p), None);
}

/// `super_v6(n)` with an IPv6 extension header of `kind` (8 bytes: a PadN option, or for a
/// Routing header type 0 with `segments_left`) between the fixed header and TCP.
fn super_v6_ext(n: usize, kind: u8, segments_left: u8) -> (Vec<u8>, VnetHdr) {
    let (p, hdr) = super_v6(n);
    let ext: [u8; 8] = match kind {
        proto_ext::ROUTING => [6, 0, 0, segments_left, 0, 0, 0, 0],
        proto_ext::FRAGMENT => [6, 0, 0, 0, 0, 0, 0, 1],
        _ => [6, 0, 1, 4, 0, 0, 0, 0],
    };
    let mut q = p[..40].to_vec();
    q[6] = kind;
    let plen = u16::from_be_bytes([q[4], q[5]]) + 8;
    q[4..6].copy_from_slice(&plen.to_be_bytes());
    q.extend_from_slice(&ext);
    q.extend_from_slice(&p[40..]);
    to_partial(&mut q, 48);
    let hdr = VnetHdr {
        hdr_len: hdr.hdr_len + 8,
        csum_start: 48,
        ..hdr
    };
    (q, hdr)
}

use ipsec_core::ip::proto as proto_ext;

/// Issue #22 defect 5: TSO6 super-packets with a Hop-by-Hop or Destination Options header
/// (or a Routing header already processed) were dropped as "not plain TCP"; each segment
/// now repeats the extension header, with the payload length and TCP checksum etherparse
/// expects.
#[test]
fn v6_super_packets_with_extension_headers_are_segmented() {
    for kind in [proto_ext::HOPOPTS, proto_ext::DSTOPTS, proto_ext::ROUTING] {
        let (p, hdr) = super_v6_ext(9000, kind, 0);
        let segs = segment_all(&p, &hdr);
        assert_eq!(segs.len(), 7, "ext {kind}");
        let mut body_total = 0;
        for s in &segs {
            let (ip, rest) = Ipv6Header::from_slice(s).unwrap();
            assert_eq!(usize::from(ip.payload_length), s.len() - 40);
            assert_eq!(ip.next_header.0, kind);
            assert_eq!(&rest[..8], &p[40..48], "the extension header is repeated");
            let (tcp, body) = TcpHeader::from_slice(&rest[8..]).unwrap();
            assert_eq!(tcp.checksum, tcp.calc_checksum_ipv6(&ip, body).unwrap(), "ext {kind}");
            assert_eq!(tcp.sequence_number, 7 + body_total as u32);
            body_total += body.len();
        }
        assert_eq!(body_total, 9000);
        // GRO leaves such packets alone (written one by one).
        let back = coalesce_all(&segs);
        assert_eq!(back.len(), segs.len());
    }
    // A Fragment header, or a Routing header with segments left (the pseudo-header's
    // destination would be another): still refused.
    for (kind, left) in [(proto_ext::FRAGMENT, 0), (proto_ext::ROUTING, 1)] {
        let (p, hdr) = super_v6_ext(9000, kind, left);
        assert_eq!(Segmenter::new(&p, &hdr), Err(OffloadError::NotTcp), "ext {kind}");
    }
}

/// Issue #22 defect 6: a peer advertising MSS 48 makes the kernel build super-packets of
/// over a thousand segments; they were dropped whole above 1,024.
#[test]
fn super_packets_of_thousands_of_segments_are_cut() {
    let (p, hdr) = super_v4(65535 - 52, false, true);
    for mss in [48u16, 8, 1] {
        let h = VnetHdr { gso_size: mss, ..hdr };
        let s = Segmenter::new(&p, &h).unwrap();
        assert_eq!(s.count(), (65535 - 52usize).div_ceil(usize::from(mss)));
        let mut out = [0u8; 200];
        let mut total = 0;
        for i in 0..s.count() {
            let n = s.write(&p, i, &mut out).unwrap();
            if mss == 48 || i == 0 || i + 1 == s.count() {
                let (_, tcp, body) = check_v4(&out[..n]);
                assert_eq!(tcp.psh, i + 1 == s.count());
                assert_eq!(body, (n - 52));
            }
            total += n - 52;
        }
        assert_eq!(total, 65535 - 52);
    }
    let (p6, h6) = super_v6(65535 - 72);
    let s = Segmenter::new(&p6, &VnetHdr { gso_size: 48, ..h6 }).unwrap();
    assert_eq!(s.count(), (65535 - 72usize).div_ceil(48));
}

#[test]
fn coalescing_stops_where_the_flow_does_not_continue() {
    let (p, hdr) = super_v4(GSO as usize * 4, false, false);
    let segs = segment_all(&p, &hdr);
    // A gap in the sequence: two super-packets.
    let gap = [segs[0].clone(), segs[1].clone(), segs[3].clone()];
    let back = coalesce_all(&gap);
    assert_eq!(back.len(), 2);
    assert_eq!(back[0].0.gso_type, GSO_TCPV4);
    assert_eq!(diff(&back[1].1, &segs[3]), None);
    // Another flow in between (other port) breaks it; its packet goes alone.
    let mut other = segs[1].clone();
    other[20..22].copy_from_slice(&1234u16.to_be_bytes());
    let back = coalesce_all(&[segs[0].clone(), other.clone(), segs[1].clone()]);
    assert_eq!(back.len(), 3);
    // PSH in the middle: nothing after it is appended.
    let mut pushed = segs[1].clone();
    pushed[33] |= 0x08;
    let back = coalesce_all(&[segs[0].clone(), pushed, segs[2].clone()]);
    assert_eq!(back.len(), 2);
    // A changed ACK or TTL ends it.
    let mut acked = segs[1].clone();
    acked[28] ^= 1;
    assert_eq!(coalesce_all(&[segs[0].clone(), acked]).len(), 2);
    let mut ttl = segs[1].clone();
    ttl[8] = 3;
    assert_eq!(coalesce_all(&[segs[0].clone(), ttl]).len(), 2);
    // A short segment is only ever the last.
    let (q, qh) = super_v4(GSO as usize + 10, false, false);
    let qs = segment_all(&q, &qh);
    let back = coalesce_all(&[qs[0].clone(), qs[1].clone(), segs[0].clone()]);
    assert_eq!(back.len(), 2);
    // SYN and pure ACKs are never started on; non-TCP neither.
    let mut syn = segs[0].clone();
    syn[33] |= 0x02;
    let mut c = Coalescer::new();
    assert!(!c.start(&syn, 0));
    assert!(!c.start(&[0x45, 0, 0, 20], 0));
    assert!(!c.append(&segs[0], 0));
    assert!(c.finish().is_none());
}

#[test]
fn interleaved_flows_sorted_by_flow_key_coalesce_per_flow() {
    let (a, ah) = super_v4(GSO as usize * 3, false, false);
    let (b, bh) = super_v6(GSO as usize * 3);
    let (sa, sb) = (segment_all(&a, &ah), segment_all(&b, &bh));
    let mut mixed: Vec<Vec<u8>> = Vec::new();
    for i in 0..3 {
        mixed.push(sa[i].clone());
        mixed.push(sb[i].clone());
    }
    mixed.sort_by_key(|p| flow_key(p));
    let back = coalesce_all(&mixed);
    assert_eq!(back.len(), 2);
    assert!(back.iter().any(|(h, p)| *h == ah && diff(p, &a).is_none()));
    assert!(back.iter().any(|(h, p)| *h == bh && diff(p, &b).is_none()));
}

#[test]
fn partial_checksums_are_completed() {
    let mut p = Vec::new();
    PacketBuilder::ipv4([1, 2, 3, 4], [5, 6, 7, 8], 9)
        .udp(1, 2)
        .write(&mut p, b"hello, checksum")
        .unwrap();
    let good = p.clone();
    // The UDP checksum field holding the pseudo-header sum.
    let mut s: u32 = 17 + (p.len() as u32 - 20);
    for c in p[12..20].chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    p[26..28].copy_from_slice(&(s as u16).to_be_bytes());
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 20,
        csum_offset: 6,
        ..VnetHdr::default()
    };
    complete_checksum(&mut p, &hdr).unwrap();
    assert_eq!(p, good);
    let bad = VnetHdr { csum_offset: 60, ..hdr };
    assert_eq!(complete_checksum(&mut p, &bad), Err(OffloadError::BadChecksumOffsets));
}

#[test]
fn bad_headers_are_typed_errors() {
    assert_eq!(VnetHdr::parse(&[0; 9]), Err(OffloadError::Truncated));
    let h = VnetHdr {
        flags: 1,
        gso_type: 4,
        hdr_len: 0x1234,
        gso_size: 0xabcd,
        csum_start: 7,
        csum_offset: 0xfffe,
    };
    assert_eq!(VnetHdr::parse(&h.to_bytes()), Ok(h));
    let (p, hdr) = super_v4(5000, false, false);
    let udp = VnetHdr { gso_type: 3, ..hdr };
    assert_eq!(Segmenter::new(&p, &udp), Err(OffloadError::UnsupportedGso(3)));
    let zero = VnetHdr { gso_size: 0, ..hdr };
    assert_eq!(Segmenter::new(&p, &zero), Err(OffloadError::BadGsoSize));
    let v6 = VnetHdr {
        gso_type: GSO_TCPV6,
        ..hdr
    };
    assert_eq!(Segmenter::new(&p, &v6), Err(OffloadError::NotTcp));
    assert_eq!(Segmenter::new(&p[..30], &hdr), Err(OffloadError::NotTcp));
    let s = Segmenter::new(&p, &hdr).unwrap();
    assert_eq!(s.write(&p, 0, &mut [0u8; 100]), Err(OffloadError::NoRoom));
    assert_eq!(s.write(&p, 99, &mut [0u8; 2000]), Err(OffloadError::BadGsoSize));
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut x: u64 = 0x1234_5678;
    let mut out = vec![0u8; 70000];
    let (good, ghdr) = super_v4(3000, false, false);
    for round in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut p = good.clone();
        let n = (x as usize % 12) + 1;
        for k in 0..n {
            let i = (x.rotate_left(k as u32 * 5) as usize) % p.len().min(80);
            p[i] = (x >> (k * 3)) as u8;
        }
        if round % 3 == 0 {
            p.truncate((x as usize >> 20) % p.len());
        }
        let hdr = VnetHdr {
            gso_size: if round % 5 == 0 {
                (x >> 40) as u16
            } else {
                ghdr.gso_size
            },
            ..ghdr
        };
        if let Ok(s) = Segmenter::new(&p, &hdr) {
            for i in 0..s.count() {
                let _ = s.write(&p, i, &mut out);
            }
        }
        let mut c = Coalescer::new();
        if c.start(&p, 0) {
            let _ = c.append(&p, 1);
            let _ = c.append(&good, 2);
        }
        if let Some((_, b)) = c.finish() {
            let _ = b.to_vec(&[&p, &p, &good]);
        }
        let _ = flow_key(&p);
        let _ = complete_checksum(&mut p, &VnetHdr::parse(&(x as u128).to_le_bytes()).unwrap());
    }
}

/// A UDP super-packet as the kernel hands it over with USO (IPv4 or IPv6): its datagrams
/// come out valid by etherparse (lengths, IPv4 header checksum and ID, UDP checksum), their
/// payloads in order are the original payload, and a GSO type that does not match the
/// transport is refused.
#[test]
fn uso_super_packets_become_valid_datagrams() {
    for v6 in [false, true] {
        for n in [1, 1199, 1200, 1201, 5000, 60000] {
            let b = if v6 {
                PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64).udp(4433, 443)
            } else {
                PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(4433, 443)
            };
            let body = payload(n);
            let mut p = Vec::new();
            b.write(&mut p, &body).unwrap();
            let ip = if v6 { 40 } else { 20 };
            if !v6 {
                p[4..6].copy_from_slice(&0x1000u16.to_be_bytes());
                p[10..12].copy_from_slice(&[0, 0]);
                let c = checksum(&p[..20]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
            let hdr = VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_UDP_L4,
                hdr_len: (ip + 8) as u16,
                gso_size: 1200,
                csum_start: ip as u16,
                csum_offset: 6,
            };
            let segs = segment_all(&p, &hdr);
            assert_eq!(segs.len(), n.div_ceil(1200), "v6 {v6}, {n} bytes");
            let mut joined = Vec::new();
            for (i, s) in segs.iter().enumerate() {
                let (udp, data) = if v6 {
                    let (h, rest) = Ipv6Header::from_slice(s).unwrap();
                    assert_eq!(usize::from(h.payload_length) + 40, s.len());
                    let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
                    assert_eq!(u.checksum, u.calc_checksum_ipv6(&h, data).unwrap(), "segment {i}");
                    (u, data)
                } else {
                    let (h, rest) = Ipv4Header::from_slice(s).unwrap();
                    assert_eq!(usize::from(h.total_len), s.len());
                    assert_eq!(h.header_checksum, h.calc_header_checksum());
                    assert_eq!(h.identification, 0x1000 + i as u16);
                    let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
                    assert_eq!(u.checksum, u.calc_checksum_ipv4(&h, data).unwrap(), "segment {i}");
                    (u, data)
                };
                assert_eq!(usize::from(udp.length), 8 + data.len());
                assert_eq!((udp.source_port, udp.destination_port), (4433, 443));
                assert!(data.len() <= 1200 && (data.len() == 1200 || i + 1 == segs.len()));
                joined.extend_from_slice(data);
            }
            assert_eq!(joined, body);
            // TCP GSO types on a UDP packet, and UDP_L4 on a TCP packet, are refused.
            for t in [GSO_TCPV4, GSO_TCPV6] {
                let h = VnetHdr { gso_type: t, ..hdr };
                assert_eq!(Segmenter::new(&p, &h), Err(OffloadError::NotTcp));
            }
        }
    }
    let (tcp, h) = super_v4(3000, false, false);
    let h = VnetHdr {
        gso_type: GSO_UDP_L4,
        ..h
    };
    assert_eq!(Segmenter::new(&tcp, &h), Err(OffloadError::NotTcp));
}

/// `count` UDP datagrams of one flow as a sender's socket makes them (etherparse builds and
/// checksums them): IPv4 with DF and consecutive IDs from 0xfff0 (so the ID wraps), or IPv6;
/// each `size` payload bytes but the last, which has `last`.
fn datagrams(v6: bool, count: usize, size: usize, last: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let n = if i + 1 == count { last } else { size };
            let body: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            let mut p = Vec::new();
            if v6 {
                PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64)
                    .udp(5201, 40000)
                    .write(&mut p, &body)
                    .unwrap();
            } else {
                let mut ip =
                    Ipv4Header::new(0, 64, etherparse::IpNumber::UDP, [10, 100, 0, 1], [10, 100, 0, 2]).unwrap();
                ip.dont_fragment = true;
                ip.identification = 0xfff0u16.wrapping_add(i as u16);
                PacketBuilder::ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
                    .udp(5201, 40000)
                    .write(&mut p, &body)
                    .unwrap();
            }
            p
        })
        .collect()
}

fn coalesce_with(mut c: Coalescer, segs: &[Vec<u8>]) -> Vec<(VnetHdr, Vec<u8>)> {
    let packets: Vec<&[u8]> = segs.iter().map(|s| &s[..]).collect();
    let mut out = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if c.append(s, i) {
            continue;
        }
        if let Some((h, b)) = c.finish() {
            out.push((h, gathered(&b, &packets)));
        }
        if !c.start(s, i) {
            out.push((VnetHdr::default(), s.clone()));
        }
    }
    if let Some((h, b)) = c.finish() {
        out.push((h, gathered(&b, &packets)));
    }
    out
}

/// Checks a UDP super-packet with etherparse as the one datagram it claims to be: IP length
/// (and IPv4 header checksum), UDP length over the whole super-datagram, and the partial
/// checksum completed as the kernel would ([`complete_checksum`]) equal to etherparse's.
fn check_udp_super(hdr: &VnetHdr, p: &[u8]) {
    let mut done = p.to_vec();
    complete_checksum(&mut done, hdr).unwrap();
    let (udp, data, calc) = if p[0] >> 4 == 6 {
        let (ip, rest) = Ipv6Header::from_slice(&done).unwrap();
        assert_eq!(usize::from(ip.payload_length) + 40, p.len());
        let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
        (u.clone(), data, u.calc_checksum_ipv6(&ip, data).unwrap())
    } else {
        let (ip, rest) = Ipv4Header::from_slice(&done).unwrap();
        assert_eq!(usize::from(ip.total_len), p.len());
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
        (u.clone(), data, u.calc_checksum_ipv4(&ip, data).unwrap())
    };
    assert_eq!(usize::from(udp.length), 8 + data.len());
    assert_eq!(udp.checksum, calc, "the completed checksum");
}

/// Issue #20: equal-sized datagrams of one UDP flow become one GSO_UDP_L4 super-packet whose
/// header and partial checksum etherparse agrees with, and cutting it as the kernel does
/// ([`Segmenter`]) gives every original datagram back byte for byte (IPv4 IDs, lengths,
/// checksums), for IPv4 and IPv6, 64-byte and 1,200-byte payloads, with a shorter last one.
#[test]
fn udp_datagrams_coalesce_into_a_uso_super_packet_and_segment_back() {
    for v6 in [false, true] {
        for (count, size, last) in [(2, 64, 64), (32, 64, 64), (17, 64, 1), (20, 1200, 1200), (30, 1400, 77)] {
            let dgs = datagrams(v6, count, size, last);
            let back = coalesce_with(Coalescer::with_uso(), &dgs);
            assert_eq!(back.len(), 1, "v6 {v6}, {count} x {size}");
            let (hdr, sp) = &back[0];
            let ip = if v6 { 40 } else { 20 };
            assert_eq!(
                *hdr,
                VnetHdr {
                    flags: F_NEEDS_CSUM,
                    gso_type: GSO_UDP_L4,
                    hdr_len: ip as u16 + 8,
                    gso_size: size as u16,
                    csum_start: ip as u16,
                    csum_offset: 6,
                }
            );
            assert_eq!(sp.len(), ip + 8 + size * (count - 1) + last);
            check_udp_super(hdr, sp);
            let segs = segment_all(sp, hdr);
            assert_eq!(segs.len(), count);
            for (i, (s, d)) in segs.iter().zip(&dgs).enumerate() {
                assert_eq!(diff(s, d), None, "v6 {v6}, {count} x {size}: datagram {i}");
            }
        }
    }
}

/// A single datagram is written as it is (the kernel refuses a UDP super-packet of one
/// segment), and without USO no UDP datagram is coalesced at all.
#[test]
fn udp_alone_or_without_uso_goes_as_it_is() {
    let one = datagrams(false, 1, 64, 64);
    let back = coalesce_with(Coalescer::with_uso(), &one);
    assert_eq!(back, vec![(VnetHdr::default(), one[0].clone())]);
    let many = datagrams(false, 5, 64, 64);
    let back = coalesce_with(Coalescer::new(), &many);
    assert_eq!(back.len(), 5);
    assert!(back.iter().all(|(h, _)| *h == VnetHdr::default()));
    let mut c = Coalescer::with_uso();
    assert!(c.uso());
    c.disable_uso();
    assert!(!c.start(&many[0], 0));
}

/// Where the flow does not continue as the kernel would cut it, the run ends: another port,
/// an IPv4 ID out of sequence, another TTL or TOS, DF differing, a longer datagram, one
/// after a shorter one, an empty one; datagrams with a wrong or no checksum go alone (so the
/// receiver drops or takes them as it would have); IPv4 options and more than
/// [`MAX_UDP_SEGMENTS`] datagrams end runs too.
#[test]
fn udp_coalescing_stops_where_the_flow_does_not_continue() {
    let d = datagrams(false, 4, 64, 64);
    let runs = |ps: &[Vec<u8>]| -> Vec<usize> {
        coalesce_with(Coalescer::with_uso(), ps)
            .iter()
            .map(|(h, p)| {
                if h.gso_type == GSO_UDP_L4 {
                    Segmenter::new(p, h).unwrap().count()
                } else {
                    1
                }
            })
            .collect()
    };
    let fix_v4 = |p: &mut Vec<u8>| {
        p[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    };
    let fix_udp = |p: &mut Vec<u8>| {
        p[26..28].copy_from_slice(&[0, 0]);
        let (ip, rest) = Ipv4Header::from_slice(p).unwrap();
        let (u, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
        let c = u.calc_checksum_ipv4(&ip, data).unwrap();
        p[26..28].copy_from_slice(&c.to_be_bytes());
    };
    assert_eq!(runs(&d), vec![4]);
    // Another source port.
    let mut port = d[2].clone();
    port[20..22].copy_from_slice(&5202u16.to_be_bytes());
    fix_udp(&mut port);
    assert_eq!(runs(&[d[0].clone(), d[1].clone(), port, d[3].clone()]), vec![2, 1, 1]);
    // An ID gap (a datagram lost or reordered on the way).
    assert_eq!(runs(&[d[0].clone(), d[1].clone(), d[3].clone()]), vec![2, 1]);
    // TTL, TOS, DF.
    for (at, v) in [(8usize, 9u8), (1, 0x10), (6, 0)] {
        let mut q = d[1].clone();
        q[at] = v;
        fix_v4(&mut q);
        if at == 8 {
            fix_udp(&mut q);
        }
        assert_eq!(runs(&[d[0].clone(), q, d[2].clone()]), vec![1, 1, 1], "byte {at}");
    }
    // A longer datagram, one after a short one, an empty one.
    let long = datagrams(false, 2, 64, 65);
    assert_eq!(runs(&long), vec![1, 1], "a longer last datagram is not a segment");
    let short = datagrams(false, 3, 64, 10);
    assert_eq!(runs(&short), vec![3]);
    let mut after_short = datagrams(false, 4, 64, 64);
    after_short[1] = datagrams(false, 2, 64, 10)[1].clone();
    assert_eq!(runs(&after_short), vec![2, 2]);
    let empty = datagrams(false, 3, 64, 0);
    assert_eq!(runs(&empty), vec![2, 1]);
    let empties = datagrams(false, 3, 0, 0);
    assert_eq!(runs(&empties), vec![1, 1, 1]);
    // A wrong checksum, and none.
    let mut bad = d[1].clone();
    bad[30] ^= 1;
    assert_eq!(runs(&[d[0].clone(), bad.clone(), d[2].clone()]), vec![1, 1, 1]);
    let mut c = Coalescer::with_uso();
    assert!(!c.start(&bad, 0));
    let mut none = d[1].clone();
    none[26..28].copy_from_slice(&[0, 0]);
    assert_eq!(runs(&[d[0].clone(), none, d[2].clone()]), vec![1, 1, 1]);
    // IPv4 options: not coalesced.
    let mut opt = Vec::new();
    let mut ip = Ipv4Header::new(8 + 4, 64, etherparse::IpNumber::UDP, [10, 100, 0, 1], [10, 100, 0, 2]).unwrap();
    ip.options = [1, 1, 1, 0][..].try_into().unwrap();
    PacketBuilder::ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .udp(1, 2)
        .write(&mut opt, &[7; 4])
        .unwrap();
    assert!(!Coalescer::with_uso().start(&opt, 0));
    // More than MAX_UDP_SEGMENTS: a second super-packet.
    let lots = datagrams(false, MAX_UDP_SEGMENTS + 3, 64, 64);
    assert_eq!(runs(&lots), vec![MAX_UDP_SEGMENTS, 3]);
    // IPv6: another flow label or hop limit ends the run.
    let d6 = datagrams(true, 3, 64, 64);
    let mut fl = d6[1].clone();
    fl[3] ^= 1;
    assert_eq!(runs(&[d6[0].clone(), fl, d6[2].clone()]), vec![1, 1, 1]);
    assert_eq!(runs(&d6), vec![3]);
}

/// Interleaved UDP flows (and a TCP flow) sorted by [`flow_key`] coalesce per flow, each
/// back to its own datagrams.
#[test]
fn interleaved_udp_and_tcp_flows_coalesce_per_flow() {
    let a = datagrams(false, 4, 64, 64);
    let b = datagrams(true, 4, 100, 100);
    let (t, th) = super_v4(GSO as usize * 4, false, false);
    let ts = segment_all(&t, &th);
    let mut mixed: Vec<Vec<u8>> = Vec::new();
    for i in 0..4 {
        mixed.extend([a[i].clone(), b[i].clone(), ts[i].clone()]);
    }
    assert_ne!(flow_key(&a[0]), flow_key(&b[0]));
    assert_ne!(flow_key(&a[0]), 0);
    let mut order: Vec<usize> = (0..mixed.len()).collect();
    order.sort_by_key(|&i| (flow_key(&mixed[i]), i));
    let sorted: Vec<Vec<u8>> = order.iter().map(|&i| mixed[i].clone()).collect();
    let back = coalesce_with(Coalescer::with_uso(), &sorted);
    assert_eq!(back.len(), 3);
    for (want, n) in [(&a, 4), (&b, 4)] {
        let (h, p) = back
            .iter()
            .find(|(h, p)| h.gso_type == GSO_UDP_L4 && p[0] >> 4 == want[0][0] >> 4)
            .unwrap();
        let segs = segment_all(p, h);
        assert_eq!(segs.len(), n);
        assert_eq!(&segs, want);
    }
    assert!(back.iter().any(|(h, p)| *h == th && diff(p, &t).is_none()));
}

/// Random bytes through the UDP side of the coalescer: never a panic, and whatever it builds
/// cuts back into the datagrams it was given.
#[test]
fn udp_coalescer_takes_arbitrary_bytes() {
    let good = datagrams(false, 6, 64, 64);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut ps = good.clone();
        let k = (x as usize) % ps.len();
        let i = (x >> 8) as usize % ps[k].len();
        ps[k][i] = (x >> 20) as u8;
        if x.is_multiple_of(7) {
            let n = (x >> 30) as usize % ps[k].len();
            ps[k].truncate(n);
        }
        for (h, p) in coalesce_with(Coalescer::with_uso(), &ps) {
            if h.gso_type == GSO_UDP_L4 {
                let segs = segment_all(&p, &h);
                assert!(segs.iter().all(|s| ps.contains(s)));
            }
        }
    }
}
