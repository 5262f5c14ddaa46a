//! Round trips for every integrity algorithm, mode and IP version; replay, ESN, header
//! padding, tunnel outer headers and the error paths of seal and open.

mod common;

use common::*;
use ipsec_ah::wire::header_len;
use ipsec_ah::{AhPacket, AhSa};
use ipsec_core::ip::{proto, Ipv4Packet, Ipv6Packet};
use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{Error, IntegAlg, PacketBuf, SaParams};

const T4: (&str, &str) = ("203.0.113.1", "203.0.113.2");
const T6: (&str, &str) = ("2001:db8:1::1", "2001:db8:2::2");

fn hbh_rt() -> Vec<(u8, Vec<u8>)> {
    let hbh = vec![0, 1, 5, 2, 0, 0, 0x3e, 2, 0xaa, 0xbb, 1, 4, 0, 0, 0, 0];
    let mut rt = vec![0, 4, 0, 2, 0, 0, 0, 0];
    rt.extend_from_slice(&[0x11; 16]);
    rt.extend_from_slice(&[0x22; 16]);
    vec![(proto::HOPOPTS, hbh), (proto::ROUTING, rt)]
}

fn packets() -> Vec<Vec<u8>> {
    vec![
        udp4(&[], b"hello"),
        udp4(&[0x94, 4, 0, 0, 0x07, 7, 4, 0, 0, 0, 0, 0], &[0x5a; 300]),
        udp6(&[], b"hello"),
        udp6(&hbh_rt(), &[0xa5; 77]),
    ]
}

#[test]
fn transport_round_trips_every_algorithm_and_version() {
    for alg in ALGS {
        let mut tx = sa(alg, None);
        let mut rx = sa(alg, None);
        for (i, p) in packets().iter().enumerate() {
            let s = seal(&mut tx, p).unwrap();
            let v6 = p[0] >> 4 == 6;
            assert_eq!(s.len(), p.len() + header_len(alg.default_icv_len(), v6), "{alg:?}");
            let (o, out) = open(&mut rx, &s).unwrap();
            assert_eq!(o.seq, i as u64 + 1);
            assert_eq!(o.next_header, if v6 && i == 3 { proto::UDP } else { 17 });
            assert_eq!(out, *p, "{alg:?} packet {i}");
            assert_eq!(open(&mut rx, &s).err(), Some(Error::Replay));
        }
    }
}

#[test]
fn tunnel_round_trips_all_four_combinations() {
    for alg in ALGS {
        for t in [T4, T6] {
            let mut tx = sa(alg, Some(t));
            let mut rx = sa(alg, Some(t));
            for p in packets() {
                let s = seal(&mut tx, &p).unwrap();
                let outer_v6 = t.0.contains(':');
                let outer = if outer_v6 { 40 } else { 20 };
                assert_eq!(s.len(), p.len() + outer + header_len(alg.default_icv_len(), outer_v6));
                assert_eq!(s[0] >> 4, if outer_v6 { 6 } else { 4 });
                let (o, out) = open(&mut rx, &s).unwrap();
                assert_eq!(o.next_header, if p[0] >> 4 == 4 { 4 } else { 41 });
                assert_eq!(out, p);
            }
        }
    }
}

#[test]
fn header_padding_depends_on_the_ip_version() {
    // (alg, AH length in IPv4, in IPv6)
    for (alg, l4, l6) in [
        (IntegAlg::HmacMd5, 24, 24),
        (IntegAlg::HmacSha1, 24, 24),
        (IntegAlg::HmacSha256, 28, 32),
        (IntegAlg::HmacSha384, 36, 40),
        (IntegAlg::HmacSha512, 44, 48),
    ] {
        let mut tx = sa(alg, None);
        let s4 = seal(&mut tx, &udp4(&[], b"x")).unwrap();
        let ah4 = AhPacket::new_checked(&s4[20..]).unwrap();
        assert_eq!(ah4.header_len(), l4, "{alg:?}");
        assert_eq!(ah4.payload_len() as usize, l4 / 4 - 2);
        let s6 = seal(&mut tx, &udp6(&[], b"x")).unwrap();
        let ah6 = AhPacket::new_checked(&s6[40..]).unwrap();
        assert_eq!(ah6.header_len(), l6, "{alg:?}");
        let icv = alg.default_icv_len();
        assert!(ah6.icv_field()[icv..].iter().all(|&b| b == 0), "padding is zero");
        assert_eq!(tx.header_len(true), l6);
        assert_eq!(tx.headroom(), l6);
        assert_eq!(sa(alg, Some(T4)).headroom(), 20 + l4);
        assert_eq!(sa(alg, Some(T6)).headroom(), 40 + l6);
        // An IPv4-padded header in an IPv6 packet (or the reverse) is refused.
        if l4 != l6 {
            let mut rx = sa(alg, None);
            let mut wrong = s6.clone();
            wrong[41] = (l4 / 4 - 2) as u8;
            assert!(open(&mut rx, &wrong).is_err());
        }
    }
}

#[test]
fn tunnel_outer_headers_are_built_like_esp() {
    let mut tx = sa(IntegAlg::HmacSha1, Some(T4));
    // Inner TOS 0xbb: ECN CE becomes ECT(0) outside; DF copied; ID = low 16 bits of seq.
    let mut inner = udp4(&[], b"x");
    inner[1] = 0xbb;
    ipsec_core::ip::fix_length(&mut inner).unwrap();
    let s = seal(&mut tx, &inner).unwrap();
    let o = Ipv4Packet::new_checked(&s[..]).unwrap();
    assert_eq!(
        (o.header_len(), o.tos(), o.ident(), o.dont_frag(), o.ttl()),
        (20, 0xba, 1, true, 64)
    );
    assert_eq!((o.protocol(), o.total_len()), (proto::AH, s.len()));
    assert!(o.verify_checksum());
    assert_eq!(AhPacket::new_checked(&s[20..]).unwrap().next_header(), 4);
    // IPv6 inner in IPv4: DF 0, TOS from the traffic class.
    let s = seal(&mut tx, &udp6(&[], b"x")).unwrap();
    let o = Ipv4Packet::new_checked(&s[..]).unwrap();
    assert_eq!((o.tos(), o.ident(), o.dont_frag()), (0xb8, 2, false));
    assert_eq!(AhPacket::new_checked(&s[20..]).unwrap().next_header(), 41);
    // IPv6 outer: traffic class as above, flow label 0, hop limit 64.
    let mut tx6 = sa(IntegAlg::HmacSha1, Some(T6));
    let s = seal(&mut tx6, &inner).unwrap();
    let o = Ipv6Packet::new_checked(&s[..]).unwrap();
    assert_eq!(
        (o.traffic_class(), o.flow_label(), o.hop_limit(), o.next_header()),
        (0xba, 0, 64, proto::AH)
    );
    assert_eq!(o.total_len(), s.len());
}

#[test]
fn replay_window_and_reordering() {
    let mut tx = sa(IntegAlg::HmacSha256, None);
    let mut rx = sa(IntegAlg::HmacSha256, None);
    // The default window, whatever its size: one packet inside it, one just past it.
    let w = rx.replay_window().size() as usize;
    let n = w + 36;
    let sealed: Vec<Vec<u8>> = (0..n).map(|_| seal(&mut tx, &udp4(&[], b"r")).unwrap()).collect();
    open(&mut rx, &sealed[n - 1]).unwrap();
    open(&mut rx, &sealed[n - 50]).unwrap();
    assert_eq!(open(&mut rx, &sealed[n - 50]).err(), Some(Error::Replay));
    assert_eq!(open(&mut rx, &sealed[10]).err(), Some(Error::TooOld));
    assert_eq!(rx.replay_window().top(), n as u64);
}

#[test]
fn a_forged_packet_does_not_move_the_window() {
    let mut tx = sa(IntegAlg::HmacSha1, None);
    let mut rx = sa(IntegAlg::HmacSha1, None);
    let first = seal(&mut tx, &udp4(&[], b"a")).unwrap();
    let mut forged = seal(&mut tx, &udp4(&[], b"b")).unwrap();
    let n = forged.len();
    forged[n - 1] ^= 1;
    assert_eq!(open(&mut rx, &forged).err(), Some(Error::BadIcv));
    assert_eq!(rx.replay_window().top(), 0);
    open(&mut rx, &first).unwrap();
}

fn esn_params(alg: IntegAlg, first: u64, esn: bool) -> SaParams {
    let mut p = params(alg, &key(alg), None);
    p.esn = esn;
    p.initial_seq = first;
    p
}

#[test]
fn esn_high_bits_are_in_the_icv_and_cross_2_pow_32() {
    let alg = IntegAlg::HmacSha1;
    let first = (1u64 << 32) - 2;
    let mut tx = AhSa::new(&esn_params(alg, first, true)).unwrap();
    let mut rx = AhSa::new(&esn_params(alg, first, true)).unwrap();
    for i in 0..4u64 {
        let s = seal(&mut tx, &udp4(&[], b"esn")).unwrap();
        let ah = AhPacket::new_checked(&s[20..]).unwrap();
        assert_eq!(ah.seq(), (first + i) as u32);
        let (o, _) = open(&mut rx, &s).unwrap();
        assert_eq!(o.seq, first + i);
    }
    // Same packet and low bits, with and without ESN: the ICVs differ (ESN appends the high
    // bits, 0 here), and each receiver refuses the other's packet.
    let mut a = AhSa::new(&esn_params(alg, 5, true)).unwrap();
    let mut b = AhSa::new(&esn_params(alg, 5, false)).unwrap();
    let sa_ = seal(&mut a, &udp4(&[], b"x")).unwrap();
    let sb = seal(&mut b, &udp4(&[], b"x")).unwrap();
    assert_ne!(sa_, sb);
    assert_eq!(sa_[..32], sb[..32]);
    assert_eq!(
        open(&mut AhSa::new(&esn_params(alg, 5, false)).unwrap(), &sa_).err(),
        Some(Error::BadIcv)
    );
    assert_eq!(
        open(&mut AhSa::new(&esn_params(alg, 5, true)).unwrap(), &sb).err(),
        Some(Error::BadIcv)
    );
    // Without ESN the counter stops at 2^32 - 1.
    let mut c = AhSa::new(&esn_params(alg, u32::MAX as u64, false)).unwrap();
    seal(&mut c, &udp4(&[], b"x")).unwrap();
    assert_eq!(seal(&mut c, &udp4(&[], b"x")).err(), Some(Error::SequenceExhausted));
}

#[test]
fn sa_setup_checks() {
    let alg = IntegAlg::HmacSha1;
    let mut p = params(alg, &key(alg), None);
    p.proto = Proto::Esp;
    assert!(AhSa::new(&p).is_err());
    let mut p = params(alg, &key(alg), None);
    p.integ = Some(Keyed::new(IntegAlg::Null, &[], 0));
    assert!(matches!(AhSa::new(&p), Err(Error::InvalidSa(_))));
    let p = params(alg, &[0; 19], None);
    assert!(matches!(AhSa::new(&p), Err(Error::KeyLength { .. })));
    let mut p = params(IntegAlg::HmacSha256, &key(IntegAlg::HmacSha256), None);
    p.integ.as_mut().unwrap().icv_len = 32; // untruncated SHA-256 is allowed too
    let mut s = AhSa::new(&p).unwrap();
    let out = seal(&mut s, &udp6(&[], b"x")).unwrap();
    assert_eq!(out.len(), udp6(&[], b"x").len() + 48);
}

#[test]
fn seal_errors_leave_the_packet_and_the_counter_alone() {
    let mut tx = sa(IntegAlg::HmacSha1, None);
    let p = udp4(&[], b"x");
    // Not enough headroom.
    let mut raw = vec![0u8; p.len() + 10];
    raw[10..].copy_from_slice(&p);
    let before = raw.clone();
    let mut b = PacketBuf::new(&mut raw, 10, p.len()).unwrap();
    assert_eq!(tx.seal(&mut b), Err(Error::NoHeadroom));
    assert_eq!((b.head(), b.len()), (10, p.len()));
    assert_eq!(raw, before);
    // IPv4 fragments (MF or an offset) are refused: AH comes before fragmentation.
    let mut f = p.clone();
    f[6] = 0x20;
    assert_eq!(seal(&mut tx, &f).err(), Some(Error::MalformedIp));
    f[6] = 0;
    f[7] = 1;
    assert_eq!(seal(&mut tx, &f).err(), Some(Error::MalformedIp));
    // Not IP, or a length beyond the buffer.
    assert_eq!(seal(&mut tx, &[0x50; 40]).err(), Some(Error::MalformedIp));
    assert_eq!(seal(&mut tx, &p[..p.len() - 1]).err(), Some(Error::MalformedIp));
    // An IPv6 fragment header where AH would go.
    let mut fr = udp6(&[(proto::FRAGMENT, vec![0, 0, 0, 1, 0, 0, 0, 1])], b"x");
    fr[6] = proto::FRAGMENT;
    assert_eq!(seal(&mut tx, &fr).err(), Some(Error::MalformedIp));
    // Too big once AH is added.
    let big = udp4(&[], &vec![0u8; 65535 - 28]);
    assert_eq!(seal(&mut tx, &big).err(), Some(Error::TooBig));
    // None of this used a sequence number.
    let s = seal(&mut tx, &p).unwrap();
    assert_eq!(AhPacket::new_checked(&s[20..]).unwrap().seq(), 1);
}

#[test]
fn link_layer_padding_is_dropped() {
    let mut tx = sa(IntegAlg::HmacSha1, None);
    let mut rx = sa(IntegAlg::HmacSha1, None);
    let p = udp4(&[], b"x");
    let mut padded = p.clone();
    padded.extend_from_slice(&[0xee; 6]);
    let mut s = seal(&mut tx, &padded).unwrap();
    assert_eq!(s.len(), p.len() + 24);
    s.extend_from_slice(&[0xdd; 5]);
    assert_eq!(open(&mut rx, &s).unwrap().1, p);
}

#[test]
fn open_errors() {
    let alg = IntegAlg::HmacSha1;
    let mut tx = sa(alg, None);
    let s = seal(&mut tx, &udp4(&[], b"x")).unwrap();
    // Wrong SPI.
    let mut p = params(alg, &key(alg), None);
    p.spi = 0x2000;
    assert_eq!(
        open(&mut AhSa::new(&p).unwrap(), &s).err(),
        Some(Error::UnknownSpi(0x1000))
    );
    // No AH.
    assert_eq!(
        open(&mut sa(alg, None), &udp4(&[], b"x")).err(),
        Some(Error::WrongProtocol(17))
    );
    assert_eq!(
        open(&mut sa(alg, None), &udp6(&hbh_rt(), b"x")).err(),
        Some(Error::WrongProtocol(17))
    );
    // A different ICV length than the SA's.
    let mut p = params(IntegAlg::HmacSha256, &key(IntegAlg::HmacSha256), None);
    p.integ.as_mut().unwrap().icv_len = 12;
    let mut t96 = AhSa::new(&p).unwrap();
    let s96 = seal(&mut t96, &udp4(&[], b"x")).unwrap();
    assert_eq!(
        open(&mut sa(IntegAlg::HmacSha256, None), &s96).err(),
        Some(Error::MalformedIp)
    );
    // A transport-mode packet offered to a tunnel SA: authentic, but not IPv4/IPv6 inside;
    // the window must not move.
    let mut rx = sa(alg, Some(T4));
    assert_eq!(open(&mut rx, &s).err(), Some(Error::BadInnerProtocol(17)));
    assert_eq!(rx.replay_window().top(), 0);
    // A received IPv4 fragment is discarded (RFC 4302 3.4.1).
    let mut frag = s.clone();
    frag[6] |= 0x20;
    assert_eq!(open(&mut sa(alg, None), &frag).err(), Some(Error::Fragment));
    // An IPv6 packet with a Fragment header in front of AH.
    let mut tx6 = sa(alg, None);
    let s6 = seal(&mut tx6, &udp6(&[], b"x")).unwrap();
    let mut f6 = s6[..40].to_vec();
    f6[6] = proto::FRAGMENT;
    f6.extend_from_slice(&[proto::AH, 0, 0, 0, 0, 0, 0, 7]);
    f6.extend_from_slice(&s6[40..]);
    ipsec_core::ip::fix_length(&mut f6).unwrap();
    assert_eq!(open(&mut sa(alg, None), &f6).err(), Some(Error::Fragment));
}

#[test]
fn ah_over_esp_is_transport_mode_with_next_header_50() {
    // An IPv4 packet carrying (opaque) ESP, as after an ESP tunnel-mode SA.
    let mut esp = udp4(&[], &[0x77; 64]);
    esp[9] = proto::ESP;
    ipsec_core::ip::fix_length(&mut esp).unwrap();
    let mut tx = sa(IntegAlg::HmacSha256, None);
    let mut rx = sa(IntegAlg::HmacSha256, None);
    let s = seal(&mut tx, &esp).unwrap();
    assert_eq!(s[9], proto::AH);
    assert_eq!(AhPacket::new_checked(&s[20..]).unwrap().next_header(), proto::ESP);
    let (o, out) = open(&mut rx, &s).unwrap();
    assert_eq!((o.next_header, out), (proto::ESP, esp));
}

#[test]
fn headers_longer_than_the_scratch_buffer_are_refused() {
    // IPv6 with a 520-byte Hop-by-Hop header (PadN options) in front of AH.
    let mut hbh = vec![0u8, 64];
    while hbh.len() < 520 {
        let n = (520 - hbh.len()).min(257);
        let l = n - 2;
        hbh.push(1);
        hbh.push(l as u8);
        hbh.resize(hbh.len() + l, 0);
    }
    let p = udp6(&[(proto::HOPOPTS, hbh)], b"x");
    let mut tx = sa(IntegAlg::HmacSha1, None);
    assert_eq!(seal(&mut tx, &p).err(), Some(Error::TooBig));
}
