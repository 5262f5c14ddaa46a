//! Seal -> open round trips on the corpus and random data, 1 KB / 4 KB / 63 KB payloads,
//! every algorithm, IPv4 and IPv6, transport and tunnel.
mod common;

use common::*;
use ipsec_core::ip::{self, proto};
use ipsec_core::Mode;
use ipsec_ipcomp::{Algorithm, IpcompPacket, IpcompRepr, IpcompSa, OpenOutcome, SealOutcome, SkipReason};

const SIZES: [usize; 3] = [1024, 4096, 63 * 1024];

fn check_round_trip(sa_out: &mut IpcompSa, sa_in: &mut IpcompSa, packet: &[u8], what: &str) -> SealOutcome {
    let tunnel = sa_out.config().mode == Mode::Tunnel;
    let (outcome, sealed) = seal(sa_out, packet);
    check_ip(&sealed);
    let outer_len = if tunnel {
        if sealed[0] >> 4 == 4 {
            20
        } else {
            40
        }
    } else {
        0
    };
    match outcome {
        SealOutcome::Compressed { original, compressed } => {
            let split = ipsec_ipcomp::transport_placement(&sealed).unwrap();
            assert_eq!(split.next, proto::COMP, "{what}");
            let h = IpcompRepr::parse(&IpcompPacket::new_checked(&sealed[split.offset..]).unwrap()).unwrap();
            assert_eq!(h.cpi, sa_out.config().cpi);
            assert_eq!(
                sealed.len(),
                packet.len() - original + compressed + 4 + outer_len,
                "{what}"
            );
            assert!(compressed + 4 < original);
            if tunnel {
                assert_eq!(
                    h.next_header,
                    if packet[0] >> 4 == 4 { proto::IPIP } else { proto::IPV6 }
                );
            }
        }
        SealOutcome::NotCompressed(why) => {
            assert!(matches!(why, SkipReason::Incompressible { .. }), "{what}: {why:?}");
            if tunnel {
                assert_eq!(
                    &sealed[outer_len..],
                    packet,
                    "{what}: IP-in-IP carries the packet as is"
                );
            } else {
                assert_eq!(sealed, packet, "{what}: uncompressed packet must be byte-identical");
            }
        }
    }
    if tunnel {
        // Outer header as ESP tunnel mode builds it.
        let inner_tos = ip::tos(packet).unwrap();
        let want_tos = if inner_tos & 3 == 3 { inner_tos & !1 } else { inner_tos };
        assert_eq!(ip::tos(&sealed).unwrap(), want_tos, "{what}: CE -> ECT(0)");
        if sealed[0] >> 4 == 4 {
            let o = ip::Ipv4Packet::new_checked(&sealed[..]).unwrap();
            assert_eq!((o.ttl(), o.ident(), o.header_len()), (64, 0, 20));
            let inner_df = packet[0] >> 4 == 4 && ip::Ipv4Packet::new_checked(packet).unwrap().dont_frag();
            assert_eq!(o.dont_frag(), inner_df);
        } else {
            let o = ip::Ipv6Packet::new_checked(&sealed[..]).unwrap();
            assert_eq!((o.hop_limit(), o.flow_label()), (64, 0));
        }
    }
    let (o, opened) = open(sa_in, &sealed).unwrap();
    assert_eq!(opened, packet, "{what}: open must restore the packet byte for byte");
    match outcome {
        SealOutcome::Compressed { original, compressed } => {
            assert_eq!(o, OpenOutcome::Decompressed { compressed, original })
        }
        _ => assert_eq!(o, OpenOutcome::NotCompressed),
    }
    outcome
}

#[test]
fn round_trips_on_corpus_and_random_data() {
    let sets = corpus::load();
    let mut compressed = 0;
    let mut total = 0;
    for alg in Algorithm::ALL {
        for mode in [Mode::Transport, Mode::Tunnel] {
            for v6 in [false, true] {
                let mut cfg = config(alg, mode, v6);
                cfg.backoff.after_misses = 0; // every packet tried: random sets would trigger it
                let mut sa_out = IpcompSa::new(cfg).unwrap();
                let mut sa_in = IpcompSa::new(config(alg, mode, v6)).unwrap();
                for set in &sets {
                    for size in SIZES {
                        // First block, and one from the middle of the file.
                        for start in [0, set.data.len() / 2] {
                            let block = &set.data[start..(start + size).min(set.data.len())];
                            let packet = if v6 { v6_tcp(block, &[]) } else { v4_tcp(block) };
                            let what = format!("{alg} {mode:?} v6={v6} {} {size}@{start}", set.name);
                            let o = check_round_trip(&mut sa_out, &mut sa_in, &packet, &what);
                            total += 1;
                            if matches!(o, SealOutcome::Compressed { .. }) {
                                compressed += 1;
                            }
                            if set.name == "random" {
                                assert!(
                                    !matches!(o, SealOutcome::Compressed { .. }),
                                    "{what}: random compressed?"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(compressed > total / 2, "{compressed} of {total} compressed");
}

#[test]
fn ipv6_placement_before_destination_options() {
    let text: Vec<u8> = b"abcdefgh".iter().cycle().take(2000).copied().collect();
    // HBH, DSTOPTS -> IPComp goes after HBH and before DSTOPTS (RFC 3173 3.2), unlike ESP.
    let packet = v6_tcp(&text, &[proto::HOPOPTS, proto::DSTOPTS]);
    let split = ipsec_ipcomp::transport_placement(&packet).unwrap();
    assert_eq!((split.nh_offset, split.offset, split.next), (40, 48, proto::DSTOPTS));
    // HBH, DST, RT, DST: after the routing header, before the final destination options.
    let packet2 = v6_tcp(&text, &[proto::HOPOPTS, proto::DSTOPTS, proto::ROUTING, proto::DSTOPTS]);
    let split2 = ipsec_ipcomp::transport_placement(&packet2).unwrap();
    assert_eq!((split2.nh_offset, split2.offset, split2.next), (56, 64, proto::DSTOPTS));
    // Only DST: right after the fixed header.
    let packet3 = v6_tcp(&text, &[proto::DSTOPTS]);
    assert_eq!(ipsec_ipcomp::transport_placement(&packet3).unwrap().offset, 40);
    for alg in Algorithm::ALL {
        for p in [&packet, &packet2, &packet3] {
            let mut a = IpcompSa::new(config(alg, Mode::Transport, true)).unwrap();
            let mut b = IpcompSa::new(config(alg, Mode::Transport, true)).unwrap();
            let o = check_round_trip(&mut a, &mut b, p, "v6 ext");
            assert!(matches!(o, SealOutcome::Compressed { .. }));
        }
    }
    let mut a = IpcompSa::new(config(Algorithm::Deflate, Mode::Transport, true)).unwrap();
    let (_, sealed) = seal(&mut a, &packet);
    assert_eq!(sealed[40], proto::COMP, "HBH's next header is IPComp");
    assert_eq!(
        sealed[48],
        proto::DSTOPTS,
        "IPComp's next header is the destination options"
    );
}

#[test]
fn incompressible_and_small_packets_are_left_alone() {
    let random = corpus::seeded_random(1400, 5);
    for alg in Algorithm::ALL {
        let mut sa = IpcompSa::new(config(alg, Mode::Transport, false)).unwrap();
        let p = v4_tcp(&random);
        let (o, sealed) = seal(&mut sa, &p);
        assert_eq!(
            o,
            SealOutcome::NotCompressed(SkipReason::Incompressible { original: 1420 })
        );
        assert_eq!(sealed, p);
        // 89-byte payload (20 TCP + 69): below the 90-byte minimum.
        let small = v4_tcp(&[b'a'; 69]);
        assert_eq!(
            seal(&mut sa, &small),
            (SealOutcome::NotCompressed(SkipReason::TooSmall), small.clone())
        );
        let ok = v4_tcp(&[b'a'; 70]);
        assert!(matches!(seal(&mut sa, &ok).0, SealOutcome::Compressed { .. }));
        let c = sa.counters();
        assert_eq!((c.compressed, c.skipped_incompressible, c.skipped_too_small), (1, 1, 1));
        assert_eq!(c.bytes_in, 90);
        assert!(c.bytes_saved > 50);
        // Open of a packet with no IPComp header leaves it as it is.
        assert_eq!(open(&mut sa, &p).unwrap(), (OpenOutcome::NotCompressed, p.clone()));
    }
}

#[test]
fn wrong_cpi_and_corrupt_payloads_are_typed_errors() {
    let text: Vec<u8> = b"hello world, ".iter().cycle().take(3000).copied().collect();
    for alg in Algorithm::ALL {
        let mut sa = IpcompSa::new(config(alg, Mode::Transport, false)).unwrap();
        let (_, mut sealed) = seal(&mut sa, &v4_tcp(&text));
        sealed[22..24].copy_from_slice(&999u16.to_be_bytes());
        assert_eq!(
            open(&mut sa, &sealed).unwrap_err(),
            ipsec_ipcomp::Error::UnknownCpi(999)
        );
        sealed[22..24].copy_from_slice(&alg.cpi().to_be_bytes());
        // Cut the compressed data short (fix the IP length so the IP layer is consistent).
        sealed.truncate(sealed.len() - 5);
        ip::fix_length(&mut sealed).unwrap();
        let e = open(&mut sa, &sealed).unwrap_err();
        assert!(matches!(e, ipsec_ipcomp::Error::Decompress(_)), "{alg}: {e:?}");
        // A header-only packet.
        sealed.truncate(22);
        ip::fix_length(&mut sealed).unwrap();
        assert!(matches!(
            open(&mut sa, &sealed).unwrap_err(),
            ipsec_ipcomp::Error::Malformed(_)
        ));
    }
}
