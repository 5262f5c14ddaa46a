//! The SA engine end to end: policy matching, bundles through two engines (a sender and a
//! receiver), lifetimes in each unit, sequence exhaustion, and exact counters.

use ipsec_core::ip::proto;
use ipsec_core::sa::{Keyed, Mode, Tunnel};
use ipsec_core::EncAlg;
use ipsec_engine::*;
use ipsec_ipcomp::Algorithm;

mod common;
use common::*;

// ---------------------------------------------------------------- policy matching

#[test]
fn first_matching_policy_wins_in_order() {
    let mut spd = Spd::new();
    let web = Selector {
        proto: Some(proto::TCP),
        dst_ports: PortRange::single(80),
        ..sel("10.1.0.0/16", "10.2.0.0/16")
    };
    spd.push(Policy {
        dir: Direction::Out,
        selector: web,
        action: Action::Bypass,
    });
    spd.push(Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/8", "10.0.0.0/8"),
        action: Action::Discard,
    });
    spd.push(Policy {
        dir: Direction::In,
        selector: sel("10.1.0.0/16", "10.2.0.0/16"),
        action: Action::Bypass,
    });
    let look = |p: &[u8], dir| spd.lookup(dir, &Flow::from_packet(p).unwrap()).map(|(i, _)| i);

    let http = packet("10.1.2.3", "10.2.3.4", proto::TCP, 40000, 80, 10);
    let https = packet("10.1.2.3", "10.2.3.4", proto::TCP, 40000, 443, 10);
    let dns = packet("10.1.2.3", "10.2.3.4", proto::UDP, 40000, 80, 10);
    let other = packet("10.9.2.3", "10.2.3.4", proto::TCP, 40000, 80, 10);
    let outside = packet("192.0.2.1", "10.2.3.4", proto::TCP, 40000, 80, 10);
    assert_eq!(look(&http, Direction::Out), Some(0));
    assert_eq!(
        look(&https, Direction::Out),
        Some(1),
        "port 443 falls to the /8 discard"
    );
    assert_eq!(look(&dns, Direction::Out), Some(1), "UDP does not match a TCP selector");
    assert_eq!(look(&other, Direction::Out), Some(1));
    assert_eq!(look(&outside, Direction::Out), None);
    assert_eq!(look(&http, Direction::In), Some(2), "direction separates the lists");

    // The same selectors in the other order: the broad one shadows the narrow one.
    let mut rev = Spd::new();
    rev.push(spd.policies()[1].clone());
    rev.push(spd.policies()[0].clone());
    let (i, p) = rev.lookup(Direction::Out, &Flow::from_packet(&http).unwrap()).unwrap();
    assert_eq!((i, &p.action), (0, &Action::Discard));
}

#[test]
fn ipv6_selectors_and_families() {
    let mut spd = Spd::new();
    spd.push(Policy {
        dir: Direction::Out,
        selector: Selector {
            src_ports: PortRange { lo: 1000, hi: 1999 },
            ..sel("2001:db8:1::/48", "2001:db8:2::/48")
        },
        action: Action::Bypass,
    });
    spd.push(Policy {
        dir: Direction::Out,
        selector: sel("::/0", "::/0"),
        action: Action::Discard,
    });
    let f = |s, d, sport| Flow::from_packet(&packet(s, d, proto::UDP, sport, 53, 4)).unwrap();
    assert_eq!(
        spd.lookup(Direction::Out, &f("2001:db8:1::5", "2001:db8:2::9", 1500))
            .unwrap()
            .0,
        0
    );
    assert_eq!(
        spd.lookup(Direction::Out, &f("2001:db8:1::5", "2001:db8:2::9", 2000))
            .unwrap()
            .0,
        1
    );
    assert_eq!(
        spd.lookup(Direction::Out, &f("2001:db8:3::5", "2001:db8:2::9", 1500))
            .unwrap()
            .0,
        1
    );
    // ::/0 never matches IPv4, and no selector of the other family does.
    assert!(spd.lookup(Direction::Out, &f("10.0.0.1", "10.0.0.2", 1500)).is_none());
    let p: Prefix = "2001:db8:1:ffff::1/48".parse().unwrap();
    assert_eq!(p.to_string(), "2001:db8:1::/48", "host bits are cleared");
    assert!("10.0.0.0/33".parse::<Prefix>().is_err());
    assert!("10.0.0.0/x".parse::<Prefix>().is_err());
}

#[test]
fn flow_reads_ports_icmp_and_not_from_later_fragments() {
    let f = Flow::from_packet(&packet("10.0.0.1", "10.0.0.2", proto::TCP, 1234, 80, 10)).unwrap();
    assert_eq!((f.proto, f.src_port, f.dst_port), (proto::TCP, Some(1234), Some(80)));

    let mut icmp = Vec::new();
    etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .icmpv4_echo_request(7, 1)
        .write(&mut icmp, b"ping")
        .unwrap();
    let f = Flow::from_packet(&icmp).unwrap();
    assert_eq!(
        (f.proto, f.src_port, f.dst_port),
        (1, Some(8), Some(0)),
        "ICMP type and code"
    );

    // A non-first IPv4 fragment carries no ports: it only matches port-less selectors.
    let mut frag = packet("10.0.0.1", "10.0.0.2", proto::UDP, 1000, 2000, 40);
    frag[6] = 0x00;
    frag[7] = 0x03; // offset 24 bytes
    let f = Flow::from_packet(&frag).unwrap();
    assert_eq!((f.src_port, f.dst_port), (None, None));
    let ported = Selector {
        dst_ports: PortRange::single(2000),
        ..Selector::default()
    };
    assert!(!ported.matches(&f));
    assert!(Selector::default().matches(&f));

    assert!(Flow::from_packet(&[0x45, 0, 0]).is_err());
    assert!(Flow::from_packet(&[]).is_err());
}

// ---------------------------------------------------------------- bundles

fn round_trip(configs: Vec<SaConfig>, src: &str, dst: &str, len: usize, expect_layers: usize) {
    let (mut a, mut b, _) = pair(&configs, Selector::default());
    for i in 0..3 {
        let pkt = udp(src, dst, len + i);
        let (r, sealed) = process(&pkt, |buf| a.outbound(buf, secs(1)));
        assert_eq!(r, Ok(Verdict::Protected(expect_layers)), "{configs:?}");
        assert_ne!(sealed, pkt);
        let (r, opened) = process(&sealed, |buf| b.inbound(buf, secs(1)));
        assert_eq!(r, Ok(Verdict::Protected(expect_layers)));
        assert_eq!(opened, pkt);
    }
}

#[test]
fn bundles_round_trip_through_two_engines() {
    let esp_t = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    let ah_t = SaConfig::new("ah", ah_params(0x200, Mode::Transport, None), None);
    let comp = SaConfig::new("comp", comp_params(2), Some(Algorithm::Deflate));
    let esp_tun = SaConfig::new(
        "esp-tun",
        esp_params(0x300, Mode::Tunnel, Some(("192.0.2.1", "192.0.2.2"))),
        None,
    );
    let esp_tun6 = SaConfig::new(
        "esp-tun6",
        esp_params(0x301, Mode::Tunnel, Some(("2001:db8::1", "2001:db8::2"))),
        None,
    );
    let ah_tun = SaConfig::new(
        "ah-tun",
        ah_params(0x400, Mode::Tunnel, Some(("192.0.2.1", "192.0.2.2"))),
        None,
    );
    round_trip(vec![esp_t.clone()], "10.0.0.1", "10.0.0.2", 100, 1);
    round_trip(vec![ah_t.clone()], "2001:db8:1::1", "2001:db8:2::2", 100, 1);
    round_trip(vec![esp_t.clone(), ah_t.clone()], "10.0.0.1", "10.0.0.2", 100, 2);
    round_trip(
        vec![comp.clone(), esp_t.clone(), ah_t.clone()],
        "10.0.0.1",
        "10.0.0.2",
        1000,
        3,
    );
    round_trip(vec![comp.clone(), esp_tun.clone()], "10.0.0.1", "10.0.0.2", 1000, 2);
    round_trip(vec![esp_tun6.clone()], "10.0.0.1", "10.0.0.2", 300, 1);
    round_trip(
        vec![esp_tun.clone(), ah_t.clone()],
        "2001:db8:1::1",
        "2001:db8:2::2",
        300,
        2,
    );
    round_trip(vec![esp_tun, ah_tun], "10.0.0.1", "10.0.0.2", 300, 2);
    round_trip(
        vec![SaConfig::new("gcm", gcm_params(0x500), None)],
        "10.0.0.1",
        "10.0.0.2",
        64,
        1,
    );
}

#[test]
fn bundle_order_is_checked_when_the_policy_is_added() {
    let mut e = Engine::new();
    let esp = e
        .add_sa(
            SaConfig::new("esp", esp_params(1, Mode::Transport, None), None),
            secs(0),
        )
        .unwrap();
    let ah = e
        .add_sa(SaConfig::new("ah", ah_params(2, Mode::Transport, None), None), secs(0))
        .unwrap();
    let comp = e
        .add_sa(SaConfig::new("comp", comp_params(3), Some(Algorithm::Lzs)), secs(0))
        .unwrap();
    let protect = |ids: Vec<SaId>| Policy {
        dir: Direction::Out,
        selector: Selector::default(),
        action: Action::Protect(ids),
    };
    assert_eq!(e.add_policy(protect(vec![ah, esp])), Err(InstallError::BundleOrder));
    assert_eq!(e.add_policy(protect(vec![esp, comp])), Err(InstallError::BundleOrder));
    assert_eq!(e.add_policy(protect(vec![esp, esp])), Err(InstallError::BundleOrder));
    assert_eq!(e.add_policy(protect(vec![])), Err(InstallError::BundleOrder));
    assert_eq!(
        e.add_policy(protect(vec![SaId(9)])),
        Err(InstallError::UnknownSa(SaId(9)))
    );
    e.add_policy(protect(vec![comp, ah])).unwrap();
    // Same protocol, SPI and destination twice is refused.
    let dup = e.add_sa(
        SaConfig::new("esp2", esp_params(1, Mode::Transport, None), None),
        secs(0),
    );
    assert!(matches!(dup, Err(InstallError::Duplicate { existing }) if existing == "esp"));
}

#[test]
fn inbound_lookup_uses_the_destination() {
    // Two SAs share an SPI but not a destination (RFC 4301 4.1).
    let mut b = Engine::new();
    let to_1 = esp_params(0x77, Mode::Tunnel, Some(("192.0.2.9", "192.0.2.1")));
    let mut to_2 = esp_params(0x77, Mode::Tunnel, Some(("192.0.2.9", "192.0.2.2")));
    to_2.enc = Some(Keyed::new(EncAlg::AesCbc, &[0x99; 16], 0));
    let id1 = b.add_sa(SaConfig::new("to-1", to_1.clone(), None), secs(0)).unwrap();
    let id2 = b.add_sa(SaConfig::new("to-2", to_2.clone(), None), secs(0)).unwrap();
    assert_eq!(b.sad().lookup(proto::ESP, 0x77, ip("192.0.2.1")), Some(id1));
    assert_eq!(b.sad().lookup(proto::ESP, 0x77, ip("192.0.2.2")), Some(id2));
    assert_eq!(b.sad().lookup(proto::ESP, 0x77, ip("192.0.2.3")), None);
    b.add_policy(Policy {
        dir: Direction::In,
        selector: Selector::default(),
        action: Action::Protect(vec![id2]),
    })
    .unwrap();
    let mut a = Engine::new();
    let aid = a.add_sa(SaConfig::new("to-2", to_2, None), secs(0)).unwrap();
    a.add_policy(Policy {
        dir: Direction::Out,
        selector: Selector::default(),
        action: Action::Protect(vec![aid]),
    })
    .unwrap();
    let pkt = udp("10.0.0.1", "10.0.0.2", 50);
    let (_, sealed) = process(&pkt, |buf| a.outbound(buf, secs(0)));
    let (r, opened) = process(&sealed, |buf| b.inbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    assert_eq!(opened, pkt);
    assert_eq!(b.sad().get(id2).unwrap().inbound().packets, 1);
    assert_eq!(b.sad().get(id1).unwrap().inbound().packets, 0);
}

#[test]
fn inbound_protection_must_match_the_policy() {
    let esp = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    let ah = SaConfig::new("ah", ah_params(0x200, Mode::Transport, None), None);
    // Sender applies ESP only; receiver requires ESP then AH.
    let (mut a, _, _) = pair(std::slice::from_ref(&esp), Selector::default());
    let (_, mut b, _) = pair(&[esp, ah], Selector::default());
    let pkt = udp("10.0.0.1", "10.0.0.2", 50);
    let (_, sealed) = process(&pkt, |buf| a.outbound(buf, secs(0)));
    let (r, _) = process(&sealed, |buf| b.inbound(buf, secs(0)));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    // A cleartext packet where protection is required.
    let (r, _) = process(&pkt, |buf| b.inbound(buf, secs(0)));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    assert_eq!(b.snapshot(secs(0)).inbound_drops.policy_discard, 2);

    // A bypass policy lets cleartext in but not protected packets.
    let mut c = Engine::new();
    c.add_sa(
        SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None),
        secs(0),
    )
    .unwrap();
    c.add_policy(Policy {
        dir: Direction::In,
        selector: Selector::default(),
        action: Action::Bypass,
    })
    .unwrap();
    assert_eq!(process(&pkt, |buf| c.inbound(buf, secs(0))).0, Ok(Verdict::Bypass));
    let (r, _) = process(&sealed, |buf| c.inbound(buf, secs(0)));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
}

#[test]
fn uncompressed_ipcomp_packets_satisfy_the_policy() {
    let comp = SaConfig::new("comp", comp_params(3), Some(Algorithm::Lzs));
    let esp = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    let (mut a, mut b, ids) = pair(&[comp, esp], Selector::default());
    // 40 bytes is under IPComp's 90-byte minimum: sent without an IPComp header.
    let small = udp("10.0.0.1", "10.0.0.2", 12);
    let (r, sealed) = process(&small, |buf| a.outbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    let (r, opened) = process(&sealed, |buf| b.inbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    assert_eq!(opened, small);
    let big = udp("10.0.0.1", "10.0.0.2", 600);
    let (r, sealed) = process(&big, |buf| a.outbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(2)));
    assert!(sealed.len() < big.len(), "text compresses");
    assert_eq!(process(&sealed, |buf| b.inbound(buf, secs(0))).1, big);
    let sa = a.sad().get(ids[0]).unwrap();
    assert_eq!((sa.outbound().packets, sa.outbound().not_compressed), (2, 1));
    let sb = b.sad().get(ids[0]).unwrap();
    assert_eq!((sb.inbound().packets, sb.inbound().not_compressed), (1, 1));
    assert!(sa.outbound().overhead_bytes < 0, "compression saved bytes");
}

// ---------------------------------------------------------------- lifetimes

fn one_sa_with(lifetime: Lifetime) -> (Engine, SaId) {
    let mut c = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    c.lifetime = lifetime;
    let (a, _, ids) = pair(&[c], Selector::default());
    (a, ids[0])
}

fn send(e: &mut Engine, len: usize, at: u64) -> Result<Verdict, Dropped> {
    process(&udp("10.0.0.1", "10.0.0.2", len), |buf| e.outbound(buf, secs(at))).0
}

fn events(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.next_event()).collect()
}

#[test]
fn packet_limits_soft_then_hard() {
    let limits = |n| Limits {
        packets: Some(n),
        ..Limits::NONE
    };
    let (mut e, id) = one_sa_with(Lifetime {
        soft: limits(2),
        hard: limits(3),
    });
    assert!(send(&mut e, 10, 0).is_ok());
    assert_eq!(events(&mut e), vec![]);
    assert!(send(&mut e, 10, 0).is_ok());
    let soft = Event::SoftExpired {
        sa: id,
        limit: Limit::Packets,
    };
    assert_eq!(events(&mut e), vec![soft]);
    assert_eq!(e.sad().get(id).unwrap().state(), State::Dying);
    assert!(send(&mut e, 10, 0).is_ok(), "the third packet is within the hard limit");
    let hard = Event::HardExpired {
        sa: id,
        limit: Limit::Packets,
    };
    assert_eq!(events(&mut e), vec![hard]);
    let d = send(&mut e, 10, 0).unwrap_err();
    assert_eq!((d.reason, d.sa), (DropReason::Expired, Some(id)));
    assert!(send(&mut e, 10, 0).is_err());
    assert_eq!(events(&mut e), vec![], "events are raised once");
    let sa = e.sad().get(id).unwrap();
    assert_eq!((sa.outbound().packets, sa.outbound().drops.expired), (3, 2));
    assert_eq!(sa.expired_by(), Some(Limit::Packets));
}

#[test]
fn byte_limits_count_the_packet_before_the_transform() {
    let pkt_len = udp("10.0.0.1", "10.0.0.2", 72).len(); // 100 bytes
    assert_eq!(pkt_len, 100);
    let (mut e, id) = one_sa_with(Lifetime {
        soft: Limits {
            bytes: Some(150),
            ..Limits::NONE
        },
        hard: Limits {
            bytes: Some(250),
            ..Limits::NONE
        },
    });
    assert!(send(&mut e, 72, 0).is_ok()); // 100
    assert_eq!(events(&mut e), vec![]);
    assert!(send(&mut e, 72, 0).is_ok()); // 200: soft
    assert_eq!(
        events(&mut e),
        vec![Event::SoftExpired {
            sa: id,
            limit: Limit::Bytes
        }]
    );
    assert!(
        send(&mut e, 72, 0).is_ok(),
        "300: the packet that crosses the hard limit passes"
    );
    assert_eq!(
        events(&mut e),
        vec![Event::HardExpired {
            sa: id,
            limit: Limit::Bytes
        }]
    );
    assert_eq!(send(&mut e, 72, 0).unwrap_err().reason, DropReason::Expired);
    assert_eq!(e.sad().get(id).unwrap().usage().bytes, 300);
}

#[test]
fn time_limits_fire_on_traffic_and_on_poll() {
    let limits = |s| Limits {
        seconds: Some(s),
        ..Limits::NONE
    };
    let (mut e, id) = one_sa_with(Lifetime {
        soft: limits(10),
        hard: limits(20),
    });
    assert!(send(&mut e, 10, 9).is_ok());
    assert_eq!(events(&mut e), vec![]);
    assert!(send(&mut e, 10, 10).is_ok(), "soft expiry does not stop the SA");
    assert_eq!(
        events(&mut e),
        vec![Event::SoftExpired {
            sa: id,
            limit: Limit::Seconds
        }]
    );
    e.poll(secs(19));
    assert_eq!(events(&mut e), vec![]);
    e.poll(secs(20));
    assert_eq!(
        events(&mut e),
        vec![Event::HardExpired {
            sa: id,
            limit: Limit::Seconds
        }]
    );
    assert_eq!(send(&mut e, 10, 20).unwrap_err().reason, DropReason::Expired);

    // Without poll, the first packet after the hard limit is dropped and raises both.
    let (mut e, id) = one_sa_with(Lifetime {
        soft: limits(10),
        hard: limits(20),
    });
    assert_eq!(send(&mut e, 10, 25).unwrap_err().reason, DropReason::Expired);
    assert_eq!(
        events(&mut e),
        vec![Event::HardExpired {
            sa: id,
            limit: Limit::Seconds
        }]
    );
    assert!(Lifetime {
        soft: limits(30),
        hard: limits(20)
    }
    .validate()
    .is_err());
}

#[test]
fn sequence_exhaustion_is_a_hard_expiry() {
    let mut p = esp_params(0x100, Mode::Transport, None);
    p.initial_seq = u32::MAX as u64;
    let (mut a, mut b, ids) = pair(&[SaConfig::new("esp", p, None)], Selector::default());
    let pkt = udp("10.0.0.1", "10.0.0.2", 20);
    let (r, sealed) = process(&pkt, |buf| a.outbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)), "2^32-1 is the last number");
    assert_eq!(process(&sealed, |buf| b.inbound(buf, secs(0))).1, pkt);
    let d = send(&mut a, 20, 0).unwrap_err();
    assert_eq!(d.reason, DropReason::Expired);
    assert_eq!(
        events(&mut a),
        vec![Event::HardExpired {
            sa: ids[0],
            limit: Limit::Sequence
        }]
    );
    assert_eq!(send(&mut a, 20, 0).unwrap_err().reason, DropReason::Expired);
    let s = a.snapshot(secs(0));
    assert_eq!(s.sas[0].state, State::Expired);
    assert_eq!(s.sas[0].outbound.drops.expired, 2);

    // With ESN the same number is just another packet.
    let mut p = esp_params(0x100, Mode::Transport, None);
    p.initial_seq = u32::MAX as u64;
    p.esn = true;
    let (mut a, _, _) = pair(&[SaConfig::new("esp", p, None)], Selector::default());
    assert!(send(&mut a, 20, 0).is_ok());
    assert!(send(&mut a, 20, 0).is_ok());
}

// ---------------------------------------------------------------- counters

#[test]
fn counters_are_exact_after_a_scripted_sequence() {
    let esp = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    let only = Selector {
        proto: Some(proto::UDP),
        ..sel("10.0.0.0/24", "10.0.0.0/24")
    };
    let (mut a, mut b, ids) = pair(&[esp], only);
    let id = ids[0];
    let pkts: Vec<Vec<u8>> = (0..4).map(|i| udp("10.0.0.1", "10.0.0.2", 30 + i)).collect();
    let sealed: Vec<Vec<u8>> = pkts
        .iter()
        .map(|p| {
            let (r, s) = process(p, |buf| a.outbound(buf, secs(0)));
            r.unwrap();
            s
        })
        .collect();
    // Outbound: 4 sealed, then one packet no policy matches (discarded).
    let d = process(&udp("10.0.1.1", "10.0.0.2", 5), |buf| a.outbound(buf, secs(0)))
        .0
        .unwrap_err();
    assert_eq!((d.reason, d.sa), (DropReason::PolicyDiscard, None));

    // Inbound script: good, good, replay, bad ICV, unknown SPI, truncated, good, cleartext.
    let ok = |r: (Result<Verdict, Dropped>, Vec<u8>)| assert_eq!(r.0, Ok(Verdict::Protected(1)));
    let reason = |r: (Result<Verdict, Dropped>, Vec<u8>)| r.0.unwrap_err().reason;
    ok(process(&sealed[0], |buf| b.inbound(buf, secs(0))));
    ok(process(&sealed[1], |buf| b.inbound(buf, secs(0))));
    assert_eq!(
        reason(process(&sealed[1], |buf| b.inbound(buf, secs(0)))),
        DropReason::Replay
    );
    let mut bad = sealed[2].clone();
    let n = bad.len();
    bad[n - 20] ^= 1;
    assert_eq!(reason(process(&bad, |buf| b.inbound(buf, secs(0)))), DropReason::BadIcv);
    let mut spi = sealed[2].clone();
    spi[20..24].copy_from_slice(&0xdeadu32.to_be_bytes());
    assert_eq!(reason(process(&spi, |buf| b.inbound(buf, secs(0)))), DropReason::NoSa);
    let mut short = sealed[2][..30].to_vec();
    short[2..4].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(
        reason(process(&short, |buf| b.inbound(buf, secs(0)))),
        DropReason::Malformed
    );
    ok(process(&sealed[2], |buf| b.inbound(buf, secs(0))));
    assert_eq!(
        reason(process(&pkts[3], |buf| b.inbound(buf, secs(0)))),
        DropReason::PolicyDiscard
    );

    let out = a.sad().get(id).unwrap().outbound();
    let plain: u64 = pkts.iter().map(|p| p.len() as u64).sum();
    let wire: u64 = sealed.iter().map(|p| p.len() as u64).sum();
    assert_eq!((out.packets, out.bytes_before, out.bytes_after), (4, plain, wire));
    assert_eq!(out.overhead_bytes, (wire - plain) as i64);
    assert_eq!(a.snapshot(secs(0)).outbound_drops.policy_discard, 1);

    let s = b.snapshot(secs(3));
    let inb = &s.sas[0].inbound;
    let plain3: u64 = pkts[..3].iter().map(|p| p.len() as u64).sum();
    let wire3: u64 = sealed[..3].iter().map(|p| p.len() as u64).sum();
    assert_eq!((inb.packets, inb.bytes_before, inb.bytes_after), (3, wire3, plain3));
    assert_eq!(inb.overhead_bytes, (wire3 - plain3) as i64);
    // The truncated packet still named the SA: its drop is the SA's.
    assert_eq!(
        (
            inb.drops.replay,
            inb.drops.bad_icv,
            inb.drops.malformed,
            inb.drops.total()
        ),
        (1, 1, 1, 3),
        "{inb:?}"
    );
    assert_eq!(
        (
            s.inbound_drops.no_sa,
            s.inbound_drops.policy_discard,
            s.inbound_drops.total()
        ),
        (1, 1, 2)
    );
    assert_eq!(s.sas[0].usage.packets, 3);
    assert_eq!(s.sas[0].age_seconds, 3);

    // The snapshot serializes to JSON with the same figures.
    let json: serde_json::Value = serde_json::to_value(&s).unwrap();
    assert_eq!(json["sas"][0]["name"], "esp");
    assert_eq!(json["sas"][0]["proto"], "esp");
    assert_eq!(json["sas"][0]["state"], "mature");
    assert_eq!(json["sas"][0]["inbound"]["packets"], 3);
    assert_eq!(json["sas"][0]["inbound"]["drops"]["bad_icv"], 1);
    assert_eq!(json["sas"][0]["inbound"]["bytes_after"], plain3);
    assert_eq!(json["inbound_drops"]["no_sa"], 1);
}

// ---------------------------------------------------------------- hostile input

/// xorshift64*: a small deterministic generator for the mutation test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn mutated_packets_never_panic_and_every_drop_is_counted_once() {
    let comp = SaConfig::new("comp", comp_params(2), Some(Algorithm::Deflate));
    let esp = SaConfig::new(
        "esp",
        esp_params(0x300, Mode::Tunnel, Some(("192.0.2.1", "192.0.2.2"))),
        None,
    );
    let ah = SaConfig::new("ah", ah_params(0x200, Mode::Transport, None), None);
    let (mut a, mut b, _) = pair(&[comp, esp, ah], Selector::default());
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut sealed = Vec::new();
    for i in 0..40 {
        let pkt = if i % 2 == 0 {
            udp("10.0.0.1", "10.0.0.2", 20 + i * 37)
        } else {
            udp("2001:db8::1", "2001:db8::2", 20 + i * 37)
        };
        sealed.push(process(&pkt, |buf| a.outbound(buf, secs(0))).1);
    }
    let (mut accepted, mut dropped) = (0u64, 0u64);
    for round in 0..6000 {
        let mut p = sealed[rng.below(sealed.len())].clone();
        match round % 5 {
            0 => {
                let i = rng.below(p.len());
                p[i] ^= 1 << rng.below(8);
            }
            1 => p.truncate(rng.below(p.len() + 1)),
            2 => {
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(p.len());
                    p[i] = rng.next() as u8;
                }
            }
            3 => {
                let i = rng.below(p.len().min(64));
                p[i] = rng.next() as u8;
            }
            _ => p = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        }
        match process(&p, |buf| b.inbound(buf, secs(0))).0 {
            Ok(_) => accepted += 1,
            Err(_) => dropped += 1,
        }
    }
    let s = b.snapshot(secs(0));
    let counted: u64 = s.inbound_drops.total() + s.sas.iter().map(|sa| sa.inbound.drops.total()).sum::<u64>();
    assert_eq!(counted, dropped);
    assert!(
        dropped > 5000,
        "almost every mutation is rejected ({accepted} accepted)"
    );
    // Untouched packets still open afterwards (nothing accepted earlier was lost), except
    // those the mutations already consumed from the replay window.
    let (mut a2, mut b2, _) = pair(
        &[SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None)],
        Selector::default(),
    );
    let fresh = process(&udp("10.0.0.1", "10.0.0.2", 64), |buf| a2.outbound(buf, secs(0))).1;
    for _ in 0..200 {
        let mut p = fresh.clone();
        let i = 20 + rng.below(p.len() - 20);
        p[i] ^= 0x80;
        assert!(process(&p, |buf| b2.inbound(buf, secs(0))).0.is_err());
    }
    assert_eq!(
        process(&fresh, |buf| b2.inbound(buf, secs(0))).0,
        Ok(Verdict::Protected(1))
    );
}

#[test]
fn rekey_replaces_the_sa_and_keeps_packets_in_flight() {
    let old = SaConfig::new("esp-1", esp_params(0x100, Mode::Transport, None), None);
    let (mut a, mut b, ids) = pair(std::slice::from_ref(&old), Selector::default());
    let old_id = ids[0];
    let pkt = udp("10.0.0.1", "10.0.0.2", 40);
    let in_flight = process(&pkt, |buf| a.outbound(buf, secs(0))).1;

    let mut p = esp_params(0x101, Mode::Transport, None);
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[0x55; 16], 0));
    let new = SaConfig::new("esp-2", p, None);
    let new_a = a.replace_sa(old_id, new.clone(), secs(5)).unwrap();
    let new_b = b.replace_sa(old_id, new, secs(5)).unwrap();
    assert_eq!(new_a, new_b);
    let fresh = process(&pkt, |buf| a.outbound(buf, secs(5))).1;
    assert_eq!(&fresh[20..24], &0x101u32.to_be_bytes(), "outbound uses the new SPI");
    assert_eq!(
        process(&fresh, |buf| b.inbound(buf, secs(5))).0,
        Ok(Verdict::Protected(1))
    );
    assert_eq!(
        process(&in_flight, |buf| b.inbound(buf, secs(5))).0,
        Ok(Verdict::Protected(1)),
        "a packet sealed before the rekey still opens"
    );
    b.remove_sa(old_id).unwrap();
    let late = process(&pkt, |buf| a.outbound(buf, secs(5))).1;
    assert_eq!(
        process(&late, |buf| b.inbound(buf, secs(6))).0,
        Ok(Verdict::Protected(1))
    );
    assert_eq!(
        process(&in_flight, |buf| b.inbound(buf, secs(6))).0.unwrap_err().reason,
        DropReason::NoSa
    );
    // The removed SA is gone from the SAD and the snapshot; its counters are in `retired`.
    let s = b.snapshot(secs(6));
    assert!(b.sad().get(old_id).is_none());
    assert_eq!(s.sas.iter().map(|x| x.id).collect::<Vec<_>>(), [new_b]);
    assert_eq!(s.retired.sas, 1);
    assert_eq!(s.retired.inbound.packets, 1, "counters survive removal");
    assert_eq!(s.retired.inbound.drops.no_sa, 0);
    assert_eq!(serde_json::to_value(&s).unwrap()["retired"]["inbound"]["packets"], 1);
    let ah = SaConfig::new("ah", ah_params(0x200, Mode::Transport, None), None);
    assert_eq!(a.replace_sa(new_a, ah, secs(7)), Err(InstallError::ReplaceProtocol));
    assert_eq!(a.remove_sa(SaId(42)), Err(InstallError::UnknownSa(SaId(42))));
}

#[test]
fn tunnel_mode_ipcomp_sends_uncompressed_packets_as_ip_in_ip() {
    let mut comp = comp_params(2);
    comp.mode = Mode::Tunnel;
    comp.tunnel = Some(Tunnel {
        src: ip("192.0.2.1"),
        dst: ip("192.0.2.2"),
    });
    let comp = SaConfig::new("comp-tun", comp, Some(Algorithm::Deflate));
    let esp = SaConfig::new("esp", esp_params(0x100, Mode::Transport, None), None);
    for bundle in [vec![comp.clone()], vec![comp.clone(), esp.clone()]] {
        let (mut a, mut b, ids) = pair(&bundle, Selector::default());
        let small = udp("10.0.0.1", "10.0.0.2", 20);
        let big = udp("2001:db8::1", "2001:db8::2", 800);
        for (pkt, compressed) in [(&small, false), (&big, true), (&small, false)] {
            let (r, sealed) = process(pkt, |buf| a.outbound(buf, secs(0)));
            let layers = bundle.len() - usize::from(!compressed);
            assert_eq!(r, Ok(Verdict::Protected(layers)), "{bundle:?}");
            if !compressed && bundle.len() == 1 {
                assert_eq!(sealed[9], 4, "IP-in-IP");
            }
            let (r, opened) = process(&sealed, |buf| b.inbound(buf, secs(0)));
            assert_eq!(
                r,
                Ok(Verdict::Protected(bundle.len())),
                "{bundle:?} compressed {compressed}"
            );
            assert_eq!(&opened, pkt);
        }
        let c = b.sad().get(ids[0]).unwrap().inbound();
        assert_eq!((c.packets, c.not_compressed), (3, 2));
        // IP-in-IP between other endpoints is not the SA's: the policy refuses it.
        let mut stray = udp("192.0.2.7", "192.0.2.2", 0)[..20].to_vec();
        stray[9] = 4;
        stray.extend_from_slice(&small);
        let len = stray.len() as u16;
        stray[2..4].copy_from_slice(&len.to_be_bytes());
        stray[10..12].fill(0);
        let sum = ipsec_core::ip::checksum(&stray[..20]);
        stray[10..12].copy_from_slice(&sum.to_be_bytes());
        let (r, _) = process(&stray, |buf| b.inbound(buf, secs(0)));
        assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    }
}

/// (Moved from `udp_encap`'s unit tests, which no longer import the SAD.)
#[test]
fn the_sad_takes_encap_on_esp_sas_with_ports_only() {
    use ipsec_core::sa::{Keyed, Proto, SaParams};
    use ipsec_core::{AeadAlg, Error, IntegAlg};
    use std::time::Duration;
    let mut esp = SaParams::new(Proto::Esp, 0x10);
    esp.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7u8; 20], 16));
    let mut ah = SaParams::new(Proto::Ah, 0x11);
    ah.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[7u8; 20], 12));
    let with = |p: &SaParams, e: UdpEncap| SaConfig {
        encap: Some(e),
        ..SaConfig::new("x", p.clone(), None)
    };
    let mut sad = Sad::new();
    let id = sad.install(with(&esp, UdpEncap::NAT_T), Duration::ZERO).unwrap();
    assert_eq!(sad.get(id).unwrap().config.encap, Some(UdpEncap::NAT_T));
    let refused =
        |r: Result<_, InstallError>| matches!(r, Err(InstallError::Sa(PacketError::Ipsec(Error::InvalidSa(_)))));
    assert!(refused(sad.install(with(&ah, UdpEncap::NAT_T), Duration::ZERO)));
    esp.spi = 0x12;
    let zero = UdpEncap {
        sport: 0,
        ..UdpEncap::NAT_T
    };
    assert!(refused(sad.install(with(&esp, zero), Duration::ZERO)));
    assert_eq!(sad.len(), 1);
}

// ---------------------------------------------------------------- control side

/// `add_policy`, `remove_policy` and `replace_sa` change a spare copy of the SPD (the
/// previous version, brought up to date) instead of copying the list: after every change the
/// engine's SPD is the list a plain `Vec` model says, a data plane published earlier keeps the
/// policies it had (workers holding it see no change under them), and both ways of getting
/// the next copy are taken: the spare free (no old plane held) and the spare still held by
/// a plane (so the current SPD is copied).
#[test]
fn policy_changes_keep_every_published_plane_as_it_was() {
    let mut e = Engine::new();
    let a = e
        .add_sa(
            SaConfig::new("a", esp_params(0x10, Mode::Transport, None), None),
            secs(0),
        )
        .unwrap();
    let mut model: Vec<Policy> = Vec::new();
    let mut held: Vec<(std::sync::Arc<DataPlane>, Vec<Policy>)> = Vec::new();
    let mut x = 0x1234_5678u32;
    let mut rand = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % n
    };
    let mut sa = a;
    for step in 0..600 {
        match rand(8) {
            0..=3 => {
                let i = rand(64);
                let p = Policy {
                    dir: if rand(2) == 0 { Direction::Out } else { Direction::In },
                    selector: sel(&format!("10.{}.0.0/16", i), &format!("172.16.{}.0/24", rand(4))),
                    action: if rand(3) == 0 {
                        Action::Protect(vec![sa])
                    } else {
                        Action::Bypass
                    },
                };
                e.add_policy(p.clone()).unwrap();
                model.push(p);
            }
            4 | 5 if !model.is_empty() => {
                let i = rand(model.len() as u32) as usize;
                assert_eq!(e.remove_policy(i).unwrap(), model.remove(i), "step {step}");
            }
            6 => {
                let cfg = SaConfig::new("a", esp_params(0x100 + step, Mode::Transport, None), None);
                let new = e.replace_sa(sa, cfg, secs(0)).unwrap();
                for p in &mut model {
                    if let Action::Protect(ids) = &mut p.action {
                        ids.iter_mut().filter(|id| **id == sa).for_each(|id| *id = new);
                    }
                }
                sa = new;
            }
            _ => assert_eq!(
                e.remove_policy(model.len()),
                Err(InstallError::UnknownPolicy(model.len()))
            ),
        }
        assert_eq!(e.spd().policies(), &model[..], "step {step}");
        // Hold some planes for a while (the spare is then busy), drop others at once.
        if rand(4) == 0 {
            held.push((e.data_plane(), model.clone()));
        }
        if rand(3) == 0 && !held.is_empty() {
            let k = rand(held.len() as u32) as usize;
            held.swap_remove(k);
        }
        for (plane, had) in &held {
            assert_eq!(plane.spd().policies(), &had[..], "step {step}: an old plane changed");
        }
        let flow = Flow::from_packet(&packet("10.7.1.1", "172.16.2.9", proto::UDP, 1, 2, 8)).unwrap();
        for dir in [Direction::Out, Direction::In] {
            assert_eq!(
                e.spd().lookup(dir, &flow),
                e.spd().lookup_linear(dir, &flow),
                "step {step}"
            );
        }
    }
    assert!(
        model.len() > 20,
        "the walk should leave policies behind: {}",
        model.len()
    );
}

/// SAs added, replaced and removed through the spare copy of the SAD: after every change the
/// engine's SAD holds the SAs a model says, in install order, each found by its SPI; a plane
/// published earlier keeps the SAs it had; an SA taken out is freed (not `held`) as soon as
/// no plane holds it, the spare copy included.
#[test]
fn sa_changes_keep_every_published_plane_as_it_was_and_free_what_went() {
    let mut e = Engine::new();
    let mut model: Vec<(SaId, u32)> = Vec::new();
    let mut held: Vec<(std::sync::Arc<DataPlane>, Vec<SaId>)> = Vec::new();
    let mut x = 0x2545_f491u32;
    let mut rand = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % n
    };
    let mut spi = 0x100u32;
    let mut removed = 0u64;
    for step in 0..400 {
        match rand(6) {
            0..=2 => {
                spi += 1;
                let id = e
                    .add_sa(
                        SaConfig::new("s", esp_params(spi, Mode::Transport, None), None),
                        secs(0),
                    )
                    .unwrap();
                model.push((id, spi));
            }
            3 | 4 if !model.is_empty() => {
                let k = rand(model.len() as u32) as usize;
                let (id, _) = model.remove(k);
                e.remove_sa(id).unwrap();
                removed += 1;
            }
            _ if !model.is_empty() => {
                let k = rand(model.len() as u32) as usize;
                spi += 1;
                let cfg = SaConfig::new("s", esp_params(spi, Mode::Transport, None), None);
                let new = e.replace_sa(model[k].0, cfg, secs(0)).unwrap();
                model.push((new, spi)); // the old SA stays installed
            }
            _ => {}
        }
        let ids: Vec<SaId> = e.sad().iter().map(|(id, _)| id).collect();
        let mut want: Vec<SaId> = model.iter().map(|m| m.0).collect();
        want.sort();
        assert_eq!(ids, want, "step {step}");
        for &(id, s) in &model {
            let dst = "192.0.2.2".parse().unwrap();
            assert_eq!(e.sad().lookup(proto::ESP, s, dst), Some(id), "step {step}");
        }
        if rand(4) == 0 {
            held.push((e.data_plane(), ids.clone()));
        }
        if rand(3) == 0 && !held.is_empty() {
            let k = rand(held.len() as u32) as usize;
            held.swap_remove(k);
        }
        for (plane, had) in &held {
            let now: Vec<SaId> = plane.sad().iter().map(|(id, _)| id).collect();
            assert_eq!(&now, had, "step {step}: an old plane changed");
        }
    }
    assert!(
        removed > 20 && model.len() > 20,
        "removed {removed}, left {}",
        model.len()
    );
    held.clear();
    e.reclaim();
    let r = e.snapshot(secs(0)).retired;
    assert_eq!(
        (r.sas, r.held),
        (removed, 0),
        "every SA taken out is freed once no plane holds it"
    );
}
