//! The data plane: one SA used by several threads at once, batches, lifetime accounting that
//! only charges accepted packets, nested IPComp, and the next lifetime deadline.

mod common;
use common::*;
use core::time::Duration;
use ipsec_core::ip::{self, proto};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Proto, SaParams};
use ipsec_core::{AeadAlg, PacketBuf};
use ipsec_engine::*;
use ipsec_ipcomp::{Algorithm, Compressor, IpcompConfig, IpcompSa};
use std::collections::HashSet;
use std::sync::Arc;

fn framed(pkt: &[u8]) -> Vec<u8> {
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
    raw
}

fn gcm(spi: u32, window: u32) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, spi);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    p.replay_window = window;
    p
}

fn worker(seed: u8) -> Worker {
    Worker::with_rng(IvRng::from_seed([seed; 32]))
}

/// A UDP packet whose payload starts with `tag`, so packets can be told apart.
fn tagged(tag: u32, len: usize) -> Vec<u8> {
    let mut p = udp("10.0.0.1", "10.0.0.2", len.max(4));
    p[28..32].copy_from_slice(&tag.to_be_bytes());
    let l = p.len();
    p[26..28].copy_from_slice(&[0, 0]); // UDP checksum 0: not checked here
    ip::fix_length(&mut p[..l]).unwrap();
    p
}

/// Two threads seal through one shared data plane on one SA; the receiver, also two
/// threads, accepts every packet once and every counter adds up exactly.
#[test]
fn two_threads_share_one_sa_through_the_data_plane() {
    let (a, b, ids) = pair(
        &[SaConfig::new("gcm", gcm(0x100, 4096), None)],
        sel("10.0.0.0/24", "10.0.0.0/24"),
    );
    let plane = a.data_plane();
    const PER: u32 = 600;
    let sealed: Vec<(Vec<u8>, Vec<u8>)> = (0..2u8)
        .map(|t| {
            let plane = Arc::clone(&plane);
            std::thread::spawn(move || {
                let mut w = worker(t);
                let mut out = Vec::new();
                let mut i = 0;
                while i < PER {
                    // Alternate single packets and batches of 8.
                    let n = if i % 16 == 0 { 8 } else { 1 };
                    let pkts: Vec<Vec<u8>> = (i..i + n).map(|k| tagged(t as u32 * PER + k, 200)).collect();
                    let mut raws: Vec<Vec<u8>> = pkts.iter().map(|p| framed(p)).collect();
                    let mut bufs: Vec<PacketBuf> = raws
                        .iter_mut()
                        .zip(&pkts)
                        .map(|(r, p)| PacketBuf::new(r, HEAD, p.len()).unwrap())
                        .collect();
                    if n == 1 {
                        assert_eq!(plane.outbound(&mut w, &mut bufs[0], secs(0)), Ok(Verdict::Protected(1)));
                    } else {
                        let mut v = vec![Ok(Verdict::Bypass); bufs.len()];
                        plane.outbound_batch(&mut w, &mut bufs, &mut v, secs(0));
                        assert!(v.iter().all(|r| *r == Ok(Verdict::Protected(1))), "{v:?}");
                    }
                    for (b, p) in bufs.iter().zip(pkts) {
                        out.push((p, b.packet().to_vec()));
                    }
                    i += n;
                }
                out
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let seq = |s: &[u8]| u32::from_be_bytes(s[24..28].try_into().unwrap());
    let seqs: HashSet<u32> = sealed.iter().map(|(_, s)| seq(s)).collect();
    assert_eq!(seqs, (1..=2 * PER).collect(), "every number used exactly once");

    // The receiver: two threads, each taking every other packet, batches of 16.
    let rx = b.data_plane();
    let sealed = Arc::new(sealed);
    let accepted: usize = (0..2usize)
        .map(|t| {
            let (rx, sealed) = (Arc::clone(&rx), Arc::clone(&sealed));
            std::thread::spawn(move || {
                let mut w = worker(10 + t as u8);
                let mine: Vec<&(Vec<u8>, Vec<u8>)> = sealed.iter().skip(t).step_by(2).collect();
                let mut ok = 0;
                for chunk in mine.chunks(16) {
                    let mut raws: Vec<Vec<u8>> = chunk.iter().map(|(_, s)| s.clone()).collect();
                    let mut bufs: Vec<PacketBuf> = raws
                        .iter_mut()
                        .map(|r| {
                            let l = r.len();
                            PacketBuf::new(r, 0, l).unwrap()
                        })
                        .collect();
                    let mut v = vec![Ok(Verdict::Bypass); bufs.len()];
                    rx.inbound_batch(&mut w, &mut bufs, &mut v, secs(0));
                    for ((plain, _), (r, b)) in chunk.iter().zip(v.iter().zip(&bufs)) {
                        assert_eq!(*r, Ok(Verdict::Protected(1)));
                        assert_eq!(b.packet(), &plain[..]);
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(accepted, 2 * PER as usize);
    // Replays are refused, from any thread.
    let mut w = worker(99);
    for (_, s) in sealed.iter().step_by(50) {
        let mut raw = s.clone();
        let mut buf = PacketBuf::new(&mut raw, 0, s.len()).unwrap();
        assert_eq!(
            rx.inbound(&mut w, &mut buf, secs(0)).unwrap_err().reason,
            DropReason::Replay
        );
    }
    let out = a.sad().get(ids[0]).unwrap().outbound();
    let inb = b.sad().get(ids[0]).unwrap().inbound();
    assert_eq!(out.packets, 2 * PER as u64);
    assert_eq!(inb.packets, 2 * PER as u64);
    assert_eq!(out.bytes_before, inb.bytes_after);
    assert_eq!(out.bytes_after, inb.bytes_before);
    assert_eq!(inb.drops.replay, sealed.iter().step_by(50).count() as u64);
}

/// A batch stops exactly at a hard packet limit, raises the event once, and charges once.
#[test]
fn batch_stops_at_the_hard_limit_and_raises_one_event() {
    let mut cfg = SaConfig::new("gcm", gcm(0x200, 64), None);
    cfg.lifetime = Lifetime {
        soft: Limits {
            packets: Some(4),
            ..Limits::NONE
        },
        hard: Limits {
            packets: Some(10),
            ..Limits::NONE
        },
    };
    let (mut a, _b, ids) = pair(&[cfg], sel("10.0.0.0/24", "10.0.0.0/24"));
    let plane = a.data_plane();
    let pkts: Vec<Vec<u8>> = (0..16).map(|k| tagged(k, 64)).collect();
    let mut raws: Vec<Vec<u8>> = pkts.iter().map(|p| framed(p)).collect();
    let mut bufs: Vec<PacketBuf> = raws
        .iter_mut()
        .zip(&pkts)
        .map(|(r, p)| PacketBuf::new(r, HEAD, p.len()).unwrap())
        .collect();
    let mut v = vec![Ok(Verdict::Bypass); 16];
    plane.outbound_batch(&mut worker(1), &mut bufs, &mut v, secs(0));
    let passed = v.iter().filter(|r| r.is_ok()).count();
    assert_eq!(passed, 10, "{v:?}");
    assert!(v[10..]
        .iter()
        .all(|r| r.as_ref().unwrap_err().reason == DropReason::Expired));
    for (b, p) in bufs[10..].iter().zip(&pkts[10..]) {
        assert_eq!(b.packet(), &p[..], "a packet past the limit is left as it was");
    }
    let events: Vec<Event> = std::iter::from_fn(|| a.next_event()).collect();
    assert_eq!(
        events,
        vec![
            Event::SoftExpired {
                sa: ids[0],
                limit: Limit::Packets
            },
            Event::HardExpired {
                sa: ids[0],
                limit: Limit::Packets
            }
        ]
    );
    let e = a.sad().get(ids[0]).unwrap();
    assert_eq!(e.usage().packets, 10);
    assert_eq!(e.outbound().packets, 10);
    assert_eq!(e.outbound().drops.expired, 6);
    assert_eq!(e.state(), State::Expired);
}

/// A batch of mixed inbound packets: each gets its own verdict, and drops are counted once.
#[test]
fn inbound_batch_gives_each_packet_its_verdict() {
    let (mut a, b, ids) = pair(
        &[SaConfig::new("gcm", gcm(0x300, 64), None)],
        sel("10.0.0.0/24", "10.0.0.0/24"),
    );
    let good: Vec<Vec<u8>> = (0..4)
        .map(|k| process(&tagged(k, 100), |buf| a.outbound(buf, secs(0))).1)
        .collect();
    let mut forged = good[1].clone();
    let l = forged.len();
    forged[l - 1] ^= 1;
    let mut unknown = good[2].clone();
    unknown[20..24].copy_from_slice(&0xdeadu32.to_be_bytes());
    let batch = [
        good[0].clone(),
        good[0].clone(),
        forged,
        unknown,
        vec![0x45, 0, 0],
        good[3].clone(),
    ];
    let mut raws: Vec<Vec<u8>> = batch.to_vec();
    let mut bufs: Vec<PacketBuf> = raws
        .iter_mut()
        .map(|r| {
            let l = r.len();
            PacketBuf::new(r, 0, l).unwrap()
        })
        .collect();
    let mut v = vec![Ok(Verdict::Bypass); bufs.len()];
    b.data_plane().inbound_batch(&mut worker(2), &mut bufs, &mut v, secs(0));
    let reasons: Vec<Option<DropReason>> = v.iter().map(|r| r.as_ref().err().map(|d| d.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            None,
            Some(DropReason::Replay),
            Some(DropReason::BadIcv),
            Some(DropReason::NoSa),
            Some(DropReason::Malformed),
            None
        ]
    );
    let s = b.snapshot(secs(0));
    let sa = &s.sas[ids[0].0 as usize];
    assert_eq!(sa.inbound.packets, 2);
    assert_eq!((sa.inbound.drops.replay, sa.inbound.drops.bad_icv), (1, 1));
    assert_eq!((s.inbound_drops.no_sa, s.inbound_drops.malformed), (1, 1));
}

/// Issue #13: bare IPComp packets that the policy only accepts inside ESP must not use up the
/// IPComp SA's lifetime (they were charged before the policy check, so a few spoofed packets
/// hard-expired the SA and real traffic then died as `expired`).
#[test]
fn spoofed_bare_ipcomp_does_not_use_up_the_sa() {
    let mut comp = SaConfig::new("comp", comp_params(0x4000), Some(Algorithm::Deflate));
    comp.lifetime.hard = Limits {
        packets: Some(3),
        ..Limits::NONE
    };
    let esp = SaConfig::new("esp", gcm(0x301, 64), None);
    let (mut a, mut b, ids) = pair(&[comp, esp], sel("10.0.0.0/24", "10.0.0.0/24"));
    // The attacker compresses packets with the same CPI and sends them bare.
    let mut attacker = IpcompSa::new(IpcompConfig {
        cpi: 0x4000,
        ..IpcompConfig::new(Algorithm::Deflate)
    })
    .unwrap();
    for k in 0..10 {
        let (_, spoof) = process(&tagged(k, 600), |buf| {
            attacker.seal(buf).unwrap();
            Ok(Verdict::Bypass)
        });
        assert_eq!(spoof[9], proto::COMP);
        let (r, _) = process(&spoof, |buf| b.inbound(buf, secs(0)));
        assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    }
    let c = b.sad().get(ids[0]).unwrap();
    assert_eq!((c.usage().packets, c.state()), (0, State::Mature));
    assert_eq!(c.inbound().packets, 0);
    // Real traffic still flows and is charged.
    let (_, sealed) = process(&tagged(99, 600), |buf| a.outbound(buf, secs(0)));
    let (r, _) = process(&sealed, |buf| b.inbound(buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(2)));
    assert_eq!(b.sad().get(ids[0]).unwrap().usage().packets, 1);
}

/// RFC 3173 section 2: IPComp inside IPComp (a payload that decompresses to another IPComp
/// header, such as a compression "quine") is refused after one pass, and charges nothing.
#[test]
fn ipcomp_inside_ipcomp_is_refused() {
    for alg in [Algorithm::Deflate, Algorithm::Lzf, Algorithm::Lzs] {
        let mut e = Engine::new();
        let id = e
            .add_sa(SaConfig::new("comp", comp_params(alg.cpi() as u32), Some(alg)), secs(0))
            .unwrap();
        e.add_policy(Policy {
            dir: Direction::In,
            selector: sel("10.0.0.0/24", "10.0.0.0/24"),
            action: Action::Protect(vec![id]),
        })
        .unwrap();
        // Inner: a real IPComp packet. Outer: its payload (IPComp header + data) compressed
        // again behind a second IPComp header.
        let mut codec = Compressor::new(alg);
        let inner = {
            let mut sa = IpcompSa::new(IpcompConfig::new(alg)).unwrap();
            process(&tagged(1, 800), |buf| {
                sa.seal(buf).unwrap();
                Ok(Verdict::Bypass)
            })
            .1
        };
        assert_eq!(inner[9], proto::COMP);
        let mut out = vec![0u8; 4096];
        let n = codec.compress(&inner[20..], &mut out).expect("compresses into 4 KiB");
        let mut outer = inner[..20].to_vec();
        outer.extend_from_slice(&[proto::COMP, 0]);
        outer.extend_from_slice(&alg.cpi().to_be_bytes());
        outer.extend_from_slice(&out[..n]);
        ip::fix_length(&mut outer).unwrap();
        let (r, _) = process(&outer, |buf| e.inbound(buf, secs(0)));
        let d = r.unwrap_err();
        assert_eq!(d.reason, DropReason::Malformed, "{alg:?}: {d}");
        assert_eq!(e.sad().get(id).unwrap().usage().packets, 0);
        // The inner packet alone is fine.
        let (r, _) = process(&inner, |buf| e.inbound(buf, secs(0)));
        assert_eq!(r, Ok(Verdict::Protected(1)), "{alg:?}");
    }
}

/// The next lifetime deadline, for a caller that sleeps until then instead of polling.
#[test]
fn poll_timeout_is_the_next_time_limit() {
    let mut e = Engine::new();
    assert_eq!(e.poll_timeout(), None);
    let mut cfg = SaConfig::new("gcm", gcm(0x400, 64), None);
    cfg.lifetime = Lifetime {
        soft: Limits {
            seconds: Some(10),
            ..Limits::NONE
        },
        hard: Limits {
            seconds: Some(20),
            ..Limits::NONE
        },
    };
    let id = e.add_sa(cfg, secs(5)).unwrap();
    e.add_sa(SaConfig::new("plain", gcm(0x401, 64), None), secs(0)).unwrap();
    assert_eq!(e.poll_timeout(), Some(secs(15)));
    e.poll(secs(15));
    assert_eq!(
        e.next_event(),
        Some(Event::SoftExpired {
            sa: id,
            limit: Limit::Seconds
        })
    );
    assert_eq!(e.poll_timeout(), Some(secs(25)));
    e.poll(Duration::from_millis(25_000));
    assert_eq!(
        e.next_event(),
        Some(Event::HardExpired {
            sa: id,
            limit: Limit::Seconds
        })
    );
    assert_eq!(e.poll_timeout(), None);
    assert_eq!(e.next_event(), None);
}

/// Changes on the control side reach workers through the plane handle; a plane a worker
/// still holds keeps working until it loads the new one.
#[test]
fn control_changes_are_published_to_workers() {
    let mut e = Engine::new();
    let handle = e.plane_handle();
    let old = handle.load_full();
    let id = e.add_sa(SaConfig::new("gcm", gcm(0x500, 64), None), secs(0)).unwrap();
    e.add_policy(Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/24", "10.0.0.0/24"),
        action: Action::Protect(vec![id]),
    })
    .unwrap();
    let mut w = worker(3);
    let pkt = tagged(1, 64);
    let (r, _) = process(&pkt, |buf| old.outbound(&mut w, buf, secs(0)));
    assert_eq!(
        r.unwrap_err().reason,
        DropReason::PolicyDiscard,
        "the old plane has no policy"
    );
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    assert_eq!(e.sad().get(id).unwrap().outbound().packets, 1);
}

#[test]
fn remove_policy_is_published_and_later_policies_move_up() {
    let mut e = Engine::new();
    let handle = e.plane_handle();
    let id = e.add_sa(SaConfig::new("gcm", gcm(0x501, 64), None), secs(0)).unwrap();
    let protect = Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/24", "10.0.0.0/24"),
        action: Action::Protect(vec![id]),
    };
    let bypass = Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/24", "10.0.0.0/24"),
        action: Action::Bypass,
    };
    e.add_policy(protect.clone()).unwrap();
    e.add_policy(bypass.clone()).unwrap();
    let mut w = worker(4);
    let pkt = tagged(1, 64);
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    assert_eq!(e.remove_policy(2), Err(InstallError::UnknownPolicy(2)));
    assert_eq!(e.remove_policy(0), Ok(protect));
    assert_eq!(e.spd().policies(), &[bypass]);
    // Workers see the change: the bypass policy now matches first.
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Bypass));
    assert_eq!(e.remove_policy(0).map(|p| p.action), Ok(Action::Bypass));
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
}

#[test]
fn set_policies_replaces_the_list_at_once_or_not_at_all() {
    let mut e = Engine::new();
    let handle = e.plane_handle();
    let id = e.add_sa(SaConfig::new("gcm", gcm(0x502, 64), None), secs(0)).unwrap();
    let protect = Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/24", "10.0.0.0/24"),
        action: Action::Protect(vec![id]),
    };
    let bypass = Policy {
        dir: Direction::Out,
        selector: sel("10.0.0.0/24", "10.0.0.0/24"),
        action: Action::Bypass,
    };
    e.set_policies(vec![protect.clone(), bypass.clone()]).unwrap();
    let mut w = worker(5);
    let pkt = tagged(1, 64);
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    // Reordered: the bypass policy now matches first, in the published plane.
    e.set_policies(vec![bypass.clone(), protect.clone()]).unwrap();
    let (r, _) = process(&pkt, |buf| handle.load().outbound(&mut w, buf, secs(0)));
    assert_eq!(r, Ok(Verdict::Bypass));
    // One bad bundle: nothing changes.
    let bad = Policy {
        action: Action::Protect(vec![SaId(99)]),
        ..bypass.clone()
    };
    assert_eq!(
        e.set_policies(vec![protect, bad]),
        Err(InstallError::UnknownSa(SaId(99)))
    );
    assert_eq!(e.spd().policies()[0], bypass);
    assert_eq!(e.spd().policies().len(), 2);
}

/// `inbound_sa` names the SA inbound then opens the packet with: per destination where two
/// SAs share an SPI, the outermost SA of a bundle, over IPv4 and IPv6 outer headers; and
/// nothing for packets without an SA or that do not parse.
#[test]
fn inbound_sa_names_the_sa_inbound_opens_with() {
    use ipsec_core::sa::Mode;
    let mut e = Engine::new();
    let to_b = e
        .add_sa(
            SaConfig::new(
                "to-b",
                esp_params(0x500, Mode::Tunnel, Some(("10.9.0.1", "10.9.0.2"))),
                None,
            ),
            secs(0),
        )
        .unwrap();
    let to_c = e
        .add_sa(
            SaConfig::new(
                "to-c",
                esp_params(0x500, Mode::Tunnel, Some(("10.9.0.1", "10.9.0.3"))),
                None,
            ),
            secs(0),
        )
        .unwrap();
    let v6 = e
        .add_sa(
            SaConfig::new(
                "v6",
                esp_params(0x600, Mode::Tunnel, Some(("fd00:9::1", "fd00:9::2"))),
                None,
            ),
            secs(0),
        )
        .unwrap();
    let ah = e
        .add_sa(
            SaConfig::new(
                "ah",
                ah_params(0x700, Mode::Transport, Some(("fd00:9::1", "fd00:9::2"))),
                None,
            ),
            secs(0),
        )
        .unwrap();
    for (ids, inner) in [
        (vec![to_b], "10.0.0.2"),
        (vec![to_c], "10.0.0.3"),
        (vec![v6, ah], "10.0.0.4"),
    ] {
        e.add_policy(Policy {
            dir: Direction::Out,
            selector: sel("10.0.0.1/32", &format!("{inner}/32")),
            action: Action::Protect(ids),
        })
        .unwrap();
    }
    let plane = e.data_plane();
    let seal = |dst: &str| {
        let mut w = worker(1);
        process(&udp("10.0.0.1", dst, 64), |b| plane.outbound(&mut w, b, secs(0))).1
    };
    let (b, c, six) = (seal("10.0.0.2"), seal("10.0.0.3"), seal("10.0.0.4"));
    assert_eq!(plane.inbound_sa(&b), Some(to_b));
    assert_eq!(
        plane.inbound_sa(&c),
        Some(to_c),
        "the same SPI, told apart by the destination"
    );
    assert_eq!(plane.inbound_sa(&six), Some(ah), "AH is outermost");
    let mut unknown = b.clone();
    unknown[20..24].copy_from_slice(&0xdead_u32.to_be_bytes());
    assert_eq!(plane.inbound_sa(&unknown), None);
    assert_eq!(plane.inbound_sa(&udp("10.9.0.1", "10.9.0.2", 40)), None, "not IPsec");
    for junk in [&b[..22], &[][..], &[0x60; 10][..], &[0x45; 20][..]] {
        assert_eq!(plane.inbound_sa(junk), None);
    }
    // Nothing was counted.
    let s = e.snapshot(secs(0));
    assert!(s.sas.iter().all(|x| x.inbound.packets == 0));
    assert_eq!(s.inbound_drops, Drops::default());
}

/// The packet context the inbound batch call takes and reports: an SA with `encap espinudp`
/// opens only packets the caller says arrived in UDP to its port (else dropped as
/// `encap_mismatch`, charged to the SA, RFC 3948 5.2 as Linux's XFRMINSTATEMISMATCH); an SA
/// without takes either. Accepted packets report the SA and the outer addresses.
#[test]
fn an_encapsulating_sa_opens_only_what_arrived_in_udp_to_its_port() {
    use ipsec_core::sa::Mode;
    let mut params = esp_params(0x900, Mode::Tunnel, Some(("10.9.0.1", "10.9.0.2")));
    params.replay_window = 0;
    let with = SaConfig {
        encap: Some(UdpEncap::NAT_T),
        ..SaConfig::new("nat", params.clone(), None)
    };
    let without = SaConfig::new("plain", params, None);
    for (config, wants_udp) in [(with, true), (without, false)] {
        let (a, b, ids) = pair(&[config], sel("10.0.0.0/24", "10.0.0.0/24"));
        let mut w = worker(3);
        let sealed = process(&udp("10.0.0.1", "10.0.0.2", 64), |p| {
            a.data_plane().outbound(&mut w, p, secs(0))
        })
        .1;
        let port = |dport| udp_encap::Ports { sport: 4500, dport };
        let arrivals = [
            Arrival::default(),
            Arrival::in_udp(port(4500)),
            Arrival::in_udp(port(4501)),
        ];
        let plane = b.data_plane();
        let mut raws: Vec<Vec<u8>> = arrivals.iter().map(|_| framed(&sealed)).collect();
        let mut bufs: Vec<PacketBuf> = raws
            .iter_mut()
            .map(|r| PacketBuf::new(r, HEAD, sealed.len()).unwrap())
            .collect();
        let mut out = vec![Ok(Verdict::Bypass); bufs.len()];
        let mut got = arrivals;
        plane.inbound_batch_arrivals(&mut w, &mut bufs, &mut out, &mut got, secs(0));
        let ok: Vec<bool> = out.iter().map(|o| o.is_ok()).collect();
        if wants_udp {
            assert_eq!(ok, [false, true, false], "{out:?}");
            for i in [0, 2] {
                let d = out[i].unwrap_err();
                assert_eq!((d.reason, d.sa), (DropReason::EncapMismatch, Some(ids[0])));
            }
            let s = b.snapshot(secs(0));
            assert_eq!(s.sas[0].inbound.drops.encap_mismatch, 2);
            assert_eq!(s.sas[0].inbound.packets, 1);
        } else {
            assert_eq!(ok, [true, true, true], "{out:?}");
        }
        let opened = got[1];
        assert_eq!(opened.encap, Some(port(4500)), "what the caller said is kept");
        assert_eq!(opened.sa, Some(ids[0]));
        assert_eq!(opened.outer, Some((ip("10.9.0.1"), ip("10.9.0.2"))));
    }
}
