//! Initiator and responder of this crate against each other in memory, with a fake clock:
//! every exchange and error path of part 1.
mod common;
use common::*;
use ipsec_ike::alg::{DhGroup, Encr};
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::*;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";

fn check_pair(net: &Net) -> (ChildSaInfo, ChildSaInfo) {
    let ca = child_up(&net.events_a);
    let cb = child_up(&net.events_b);
    assert_eq!(
        (ca.len(), cb.len()),
        (1, 1),
        "events A {:?} B {:?}",
        net.events_a,
        net.events_b
    );
    let (a, b) = (ca[0].clone(), cb[0].clone());
    // Each side's outbound SA is the other's inbound one: SPI and keys (2.17 order).
    assert_eq!(a.spi_out, b.spi_in);
    assert_eq!(a.spi_in, b.spi_out);
    assert_eq!(*a.encr_out, *b.encr_in);
    assert_eq!(*a.encr_in, *b.encr_out);
    assert_eq!(*a.integ_out, *b.integ_in);
    assert_ne!(*a.encr_out, *a.encr_in);
    assert_eq!(a.suite, b.suite);
    assert_eq!(a.local_ts, b.remote_ts);
    assert_eq!(a.remote_ts, b.local_ts);
    (a, b)
}

#[test]
fn ike_sa_and_child_come_up_with_matching_keys() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    net.up();
    let (ia, ib) = (ike_up(&net.events_a), ike_up(&net.events_b));
    assert_eq!((ia.len(), ib.len()), (1, 1));
    assert_eq!(ia[0].spi_i, ib[0].spi_i);
    assert_eq!(ia[0].spi_r, ib[0].spi_r);
    assert_eq!(ia[0].role, Role::Initiator);
    assert_eq!(ib[0].role, Role::Responder);
    assert_eq!(ia[0].remote_id, Identity::from_str_config(B_IP).unwrap());
    assert!(!ia[0].nat);
    let (ca, _) = check_pair(&net);
    assert_eq!(ca.suite.encr, Encr::AesGcm16_128);
    assert_eq!(ca.encr_out.len(), 20, "AES-128 key and 4 salt bytes");
    assert!(ca.encap.is_none());
    assert_eq!(ca.local_ts, [TrafficSelector::from_str_config("10.1.0.0/16").unwrap()]);
    // Four datagrams: IKE_SA_INIT and IKE_AUTH, request and response, on port 500.
    assert_eq!(net.sent.len(), 4);
    assert!(net
        .sent
        .iter()
        .all(|s| s.t.local.port() == 500 && s.t.remote.port() == 500));
    assert!(net.drops.is_empty(), "{:?}", net.drops);
}

#[test]
fn every_supported_suite() {
    for (ike, esp) in [
        ("aes256-sha256-ecp384", "aes256-sha256"),
        ("aes128-sha512-modp2048", "chacha20poly1305-esn"),
        ("aes256gcm16-prfsha384-ecp256", "aes256gcm16-esn"),
        ("aes128-sha384-x25519", "aes128-sha256-noesn"),
        // The built-in Windows client's defaults (weak, accepted when named).
        ("3des-sha1-modp1024", "aes256-sha1"),
        ("aes192-sha1-prfsha256-modp1024", "3des-sha1"),
    ] {
        let (a, b) = pair(ike, ike, esp, esp);
        let mut net = Net::new(a, b);
        net.up();
        let (ca, _) = check_pair(&net);
        let ia = ike_up(&net.events_a)[0].clone();
        assert_eq!(ia.suite, ike_up(&net.events_b)[0].suite, "{ike}");
        assert_eq!(ca.suite.esn, esp.contains("-esn"), "{esp}");
    }
}

#[test]
fn wrong_psk_fails_authentication_on_both_sides() {
    let (a, mut b) = pair(IKE, IKE, ESP, ESP);
    b.connections[0].local_auth = ipsec_ike::LocalAuth::Psk(Psk::new(b"battery staple"));
    b.connections[0].remote_auth = ipsec_ike::RemoteAuth::Psk(Psk::new(b"battery staple"));
    let mut net = Net::new(a, b);
    net.up();
    assert!(ike_up(&net.events_a).is_empty() && ike_up(&net.events_b).is_empty());
    assert!(net
        .events_b
        .iter()
        .any(|e| matches!(e, Event::AuthFailed { local: true, .. })));
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::AuthFailed { local: false, .. })));
    assert_eq!(downs(&net.events_a), [DownReason::AuthFailed]);
    assert_eq!(net.a.ike_sa_count() + net.b.ike_sa_count(), 0);
    // The PSK is not in any Debug output.
    let dbg = format!("{:?} {:?}", net.a.config(), net.events_a);
    assert!(!dbg.contains("correct horse") && !dbg.contains("battery"));
}

#[test]
fn wrong_identity_fails_authentication() {
    let (a, mut b) = pair(IKE, IKE, ESP, ESP);
    b.connections[0].remote_id = Some(Identity::from_str_config("someone.else").unwrap());
    let mut net = Net::new(a, b);
    net.up();
    assert!(ike_up(&net.events_b).is_empty());
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::AuthFailed { local: false, .. })));
}

#[test]
fn no_common_ike_proposal() {
    let (a, b) = pair(IKE, "aes256-sha512-ecp384", ESP, ESP);
    let mut net = Net::new(a, b);
    net.up();
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::ProposalMismatch { child: None, .. })));
    assert!(net
        .events_b
        .iter()
        .any(|e| matches!(e, Event::ProposalMismatch { child: None, .. })));
    assert_eq!(downs(&net.events_a), [DownReason::NoProposal]);
    assert_eq!(net.b.ike_sa_count(), 0, "the responder keeps no state");
}

#[test]
fn no_common_esp_proposal_keeps_the_ike_sa() {
    let (a, b) = pair(IKE, IKE, "aes128gcm16", "aes256-sha256");
    let mut net = Net::new(a, b);
    net.up();
    assert_eq!((ike_up(&net.events_a).len(), ike_up(&net.events_b).len()), (1, 1));
    assert!(child_up(&net.events_a).is_empty());
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::ProposalMismatch { child: Some(_), .. })));
}

#[test]
fn invalid_ke_payload_retry_with_the_group_asked_for() {
    let (a, b) = pair(
        "aes128gcm16-prfsha256-x25519-ecp256",
        "aes128gcm16-prfsha256-ecp256",
        ESP,
        ESP,
    );
    let mut net = Net::new(a, b);
    net.up();
    check_pair(&net);
    assert_eq!(ike_up(&net.events_a)[0].suite.dh, DhGroup::Ecp256);
    let inits: Vec<_> = net.sent.iter().filter(|s| kind_of(&s.t).0 == 34).collect();
    assert_eq!(inits.len(), 4, "request, INVALID_KE, request again, response");
    assert!(
        net.drops.iter().all(|(_, d)| *d == Dropped::InvalidKe),
        "{:?}",
        net.drops
    );
}

#[test]
fn traffic_selectors_are_narrowed_to_the_responders_policy() {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].children[0] = ChildConfig::new("net", "10.1.0.0/16", "0.0.0.0/0", ESP).unwrap();
    b.connections[0].children[0] =
        ChildConfig::new("net", "10.2.5.0/24, 10.3.0.0/16[tcp/443]", "10.1.2.0/24", ESP).unwrap();
    let mut net = Net::new(a, b);
    net.up();
    let (ca, _) = check_pair(&net);
    assert_eq!(ca.local_ts, [TrafficSelector::from_str_config("10.1.2.0/24").unwrap()]);
    assert_eq!(
        ca.remote_ts,
        [
            TrafficSelector::from_str_config("10.2.5.0/24").unwrap(),
            TrafficSelector::from_str_config("10.3.0.0/16[tcp/443]").unwrap()
        ]
    );
}

#[test]
fn ts_unacceptable() {
    let (a, mut b) = pair(IKE, IKE, ESP, ESP);
    b.connections[0].children[0] = ChildConfig::new("net", "10.2.0.0/16", "192.168.0.0/16", ESP).unwrap();
    let mut net = Net::new(a, b);
    net.up();
    assert_eq!(ike_up(&net.events_a).len(), 1);
    assert!(child_up(&net.events_a).is_empty() && child_up(&net.events_b).is_empty());
    assert!(net.events_a.iter().any(|e| matches!(e, Event::TsUnacceptable { .. })));
    assert!(net.events_b.iter().any(|e| matches!(e, Event::TsUnacceptable { .. })));
}

#[test]
fn acquire_puts_the_packet_selectors_first() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    let pkt = PacketSelectors {
        src: ip("10.1.0.7"),
        dst: ip("10.2.0.9"),
        protocol: 6,
        src_port: 40000,
        dst_port: 443,
    };
    net.a
        .acquire(net.now, net.a.child_id("a2b", "net").unwrap(), pkt, &mut net.rng)
        .unwrap();
    // A second acquire while the first is under way does nothing.
    net.a
        .acquire(net.now, net.a.child_id("a2b", "net").unwrap(), pkt, &mut net.rng)
        .unwrap();
    net.pump();
    let (ca, _) = check_pair(&net);
    // B narrows to its policy, which covers the packet's selectors.
    assert_eq!(ca.remote_ts, [TrafficSelector::from_str_config("10.2.0.0/16").unwrap()]);
    assert_eq!(net.sent.iter().filter(|s| kind_of(&s.t) == (34, false)).count(), 1);
}

#[test]
fn delete_child_from_either_side_then_the_ike_sa() {
    for initiator_deletes in [true, false] {
        let (a, b) = pair(IKE, IKE, ESP, ESP);
        let mut net = Net::new(a, b);
        net.up();
        let (ca, cb) = check_pair(&net);
        if initiator_deletes {
            net.a.delete_child(net.now, ca.spi_in, &mut net.rng).unwrap();
        } else {
            net.b.delete_child(net.now, cb.spi_in, &mut net.rng).unwrap();
        }
        net.pump();
        let (la, lb) = (
            if initiator_deletes {
                DownReason::Local
            } else {
                DownReason::Peer
            },
            if initiator_deletes {
                DownReason::Peer
            } else {
                DownReason::Local
            },
        );
        assert_eq!(child_downs(&net.events_a), [(ca.spi_in, la)]);
        assert_eq!(child_downs(&net.events_b), [(cb.spi_in, lb)]);
        // Then the IKE SA.
        if initiator_deletes {
            net.b.terminate(net.now, "b2a", &mut net.rng).unwrap();
        } else {
            net.a.terminate(net.now, "a2b", &mut net.rng).unwrap();
        }
        net.pump();
        assert_eq!(downs(&net.events_a).len(), 1);
        assert_eq!(downs(&net.events_b).len(), 1);
        assert_eq!(net.a.ike_sa_count() + net.b.ike_sa_count(), 0);
        assert!(net.drops.is_empty(), "{:?}", net.drops);
    }
}

#[test]
fn deleting_the_ike_sa_takes_its_children() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    net.up();
    let (ca, cb) = check_pair(&net);
    net.a.terminate(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    assert_eq!(child_downs(&net.events_a), [(ca.spi_in, DownReason::Local)]);
    assert_eq!(child_downs(&net.events_b), [(cb.spi_in, DownReason::Peer)]);
    assert_eq!(downs(&net.events_a), [DownReason::Local]);
    assert_eq!(downs(&net.events_b), [DownReason::Peer]);
}

#[test]
fn liveness_checks_on_dpd_delay() {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].dpd_delay = Some(Duration::from_secs(30));
    let mut net = Net::new(a, b);
    net.up();
    let start = net.now;
    assert_eq!(net.a.poll_timeout(), Some(start + Duration::from_secs(30)));
    assert!(net.advance(start + Duration::from_secs(100)));
    assert!(net.events_a.iter().any(|e| matches!(e, Event::Alive { .. })));
    let infos: Vec<_> = net.sent.iter().filter(|s| kind_of(&s.t).0 == 37).collect();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].at, start + Duration::from_secs(30));
    // Manual check too.
    net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    assert_eq!(
        net.events_a.iter().filter(|e| matches!(e, Event::Alive { .. })).count(),
        2
    );
}

#[test]
fn retransmission_backs_off_then_gives_up() {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].dpd_delay = Some(Duration::from_secs(10));
    let mut net = Net::new(a, b);
    net.up();
    let t0 = net.now;
    // The responder goes silent.
    net.drop = Box::new(|from_a, _| !from_a);
    while net.advance(t0 + Duration::from_secs(1000)) {}
    let sends: Vec<Duration> = net
        .sent
        .iter()
        .filter(|s| s.from_a && kind_of(&s.t).0 == 37)
        .map(|s| s.at - t0)
        .collect();
    let ms: Vec<u128> = sends.iter().map(|d| d.as_millis()).collect();
    // First DPD at 10 s, then retransmissions after 4, 7.2, 12.96, 23.328, 41.99 s.
    assert_eq!(ms, [10_000, 14_000, 21_200, 34_160, 57_488, 99_478]);
    assert_eq!(downs(&net.events_a), [DownReason::Timeout]);
    assert_eq!(child_downs(&net.events_a).len(), 1);
    assert_eq!(net.a.ike_sa_count(), 0);
    // The responder answered every copy from its kept response (same bytes each time).
    let answers: Vec<&Vec<u8>> = net
        .sent
        .iter()
        .filter(|s| !s.from_a && kind_of(&s.t) == (37, true))
        .map(|s| &s.t.payload)
        .collect();
    assert_eq!(answers.len(), 6);
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn lost_ike_sa_init_response_is_retransmitted_and_answered_from_state() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    let mut dropped = false;
    net.drop = Box::new(move |from_a, t| {
        if !from_a && kind_of(t).0 == 34 && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    net.up();
    assert!(child_up(&net.events_a).is_empty());
    net.advance(net.now + Duration::from_secs(10));
    check_pair(&net);
    assert_eq!(net.b.ike_sa_count(), 1, "one responder SA, not two");
    let responses: Vec<_> = net
        .sent
        .iter()
        .filter(|s| !s.from_a && kind_of(&s.t) == (34, true))
        .collect();
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[0].t.payload, responses[1].t.payload);
}

/// A initiates; B gets the IKE_SA_INIT request, A the response, B the IKE_AUTH request (its
/// response left unread). The two requests, for sending again.
fn init_and_auth(net: &mut Net) -> (Transmit, Transmit) {
    net.a.initiate(net.now, "a2b", &mut net.rng).unwrap();
    let init = net.a.poll_transmit().unwrap();
    net.b
        .handle_datagram(net.now, init.remote, init.local, &init.payload, &mut net.rng)
        .unwrap();
    let init_resp = net.b.poll_transmit().unwrap();
    net.a
        .handle_datagram(
            net.now,
            init_resp.remote,
            init_resp.local,
            &init_resp.payload,
            &mut net.rng,
        )
        .unwrap();
    let auth = net.a.poll_transmit().unwrap();
    net.b
        .handle_datagram(net.now, auth.remote, auth.local, &auth.payload, &mut net.rng)
        .unwrap();
    (init, auth)
}

/// A retransmitted IKE_SA_INIT that arrives after the IKE_AUTH it preceded (the initiator
/// moved to port 4500; the copy was delayed on the way): no second responder SA, no answer.
#[test]
fn late_ike_sa_init_copy_after_ike_auth_makes_no_second_sa() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    let (init, _) = init_and_auth(&mut net);
    assert!(net.b.poll_transmit().is_some(), "the IKE_AUTH response");
    while net.b.poll_event().is_some() {}
    let late = net
        .b
        .handle_datagram(net.now, init.remote, init.local, &init.payload, &mut net.rng);
    assert_eq!(late, Err(Dropped::OutOfWindow));
    assert!(net.b.poll_transmit().is_none(), "no answer to the late copy");
    assert_eq!(net.b.ike_sa_count(), 1, "one responder SA, not two");
}

#[test]
fn duplicate_request_gets_the_kept_response() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    let (_, auth) = init_and_auth(&mut net);
    let r1 = net.b.poll_transmit().unwrap();
    net.b
        .handle_datagram(net.now, auth.remote, auth.local, &auth.payload, &mut net.rng)
        .unwrap();
    let r2 = net.b.poll_transmit().unwrap();
    assert_eq!(r1.payload, r2.payload);
    let mut ups = 0;
    while let Some(e) = net.b.poll_event() {
        ups += matches!(e, Event::IkeUp { .. }) as usize;
    }
    assert_eq!(ups, 1);
    // A message ID further ahead is out of the window.
    let mut ahead = auth.payload.clone();
    ahead[23] = 5;
    assert_eq!(
        net.b
            .handle_datagram(net.now, auth.remote, auth.local, &ahead, &mut net.rng),
        Err(Dropped::OutOfWindow)
    );
}

#[test]
fn nat_detected_moves_to_4500_and_encapsulates() {
    let (a, mut b) = pair(IKE, IKE, ESP, ESP);
    b.connections[0].remote_addr = None; // the peer shows up from the NAT's address
    let mut net = Net::new(a, b);
    net.nat_port_offset = Some(30000);
    net.up();
    let (ca, cb) = check_pair(&net);
    assert_eq!(
        ca.encap,
        Some(EncapPorts {
            local_port: 4500,
            remote_port: 4500
        })
    );
    assert_eq!(
        cb.encap,
        Some(EncapPorts {
            local_port: 4500,
            remote_port: 34500
        })
    );
    assert_eq!(cb.remote.ip(), ip(NAT_IP));
    assert!(ike_up(&net.events_a)[0].nat && ike_up(&net.events_b)[0].nat);
    // IKE_AUTH and after on 4500 with the non-ESP marker.
    for s in net.sent.iter().filter(|s| kind_of(&s.t).0 == 35) {
        assert_eq!(s.t.local.port(), 4500);
        assert_eq!(&s.t.payload[..4], &[0, 0, 0, 0]);
    }
    // The NAT mapping changes: B sees A from a new port on the next authenticated message.
    net.nat_port_offset = Some(31000);
    net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    assert!(net
        .events_b
        .iter()
        .any(|e| matches!(e, Event::PeerEndpointChanged { new, .. } if new.port() == 35500)));
    assert!(net.events_a.iter().any(|e| matches!(e, Event::Alive { .. })));
}

#[test]
fn forced_encapsulation_without_nat() {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].encap = true;
    let mut net = Net::new(a, b);
    net.up();
    let (ca, cb) = check_pair(&net);
    assert_eq!(
        ca.encap,
        Some(EncapPorts {
            local_port: 4500,
            remote_port: 4500
        })
    );
    assert_eq!(
        cb.encap,
        Some(EncapPorts {
            local_port: 4500,
            remote_port: 4500
        })
    );
}

#[test]
fn unauthenticated_datagrams_do_not_move_the_peer() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    net.up();
    let ia = ike_up(&net.events_a)[0].clone();
    // A forged INFORMATIONAL from elsewhere: right SPIs, garbage SK payload.
    let mut forged = vec![0u8; 28 + 4 + 8 + 16 + 16];
    forged[..8].copy_from_slice(&ia.spi_i.to_be_bytes());
    forged[8..16].copy_from_slice(&ia.spi_r.to_be_bytes());
    forged[16] = 46;
    forged[17] = 0x20;
    forged[18] = 37;
    forged[19] = 0x08;
    forged[20..24].copy_from_slice(&2u32.to_be_bytes());
    let n = forged.len() as u32;
    forged[24..28].copy_from_slice(&n.to_be_bytes());
    forged[30..32].copy_from_slice(&((n - 28) as u16).to_be_bytes());
    let evil = "203.0.113.9:500".parse().unwrap();
    let r = net
        .b
        .handle_datagram(net.now, "10.0.0.2:500".parse().unwrap(), evil, &forged, &mut net.rng);
    assert!(matches!(r, Err(Dropped::Malformed(_))), "{r:?}");
    assert!(net.b.poll_transmit().is_none());
    assert!(net.b.poll_event().is_none());
}

#[test]
fn initial_contact_replaces_the_old_sa() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a.clone(), b);
    net.up();
    // A restarts (new endpoint, same config) and connects again.
    net.a = Endpoint::new(a);
    net.events_b.clear();
    net.up();
    assert_eq!(downs(&net.events_b), [DownReason::Replaced]);
    assert_eq!(net.b.ike_sa_count(), 1);
}

#[test]
fn ike_keys_exported_only_when_asked_and_keylog_lines() {
    let (mut a, b) = pair(
        "aes256-sha256-ecp384",
        "aes256-sha256-ecp384",
        "aes256-sha256",
        "aes256-sha256",
    );
    a.export_ike_keys = true;
    let mut net = Net::new(a, b);
    net.up();
    let k = net
        .events_a
        .iter()
        .find_map(|e| {
            if let Event::IkeUp { keys, .. } = e {
                keys.as_ref()
            } else {
                None
            }
        })
        .unwrap();
    assert!(net
        .events_b
        .iter()
        .all(|e| !matches!(e, Event::IkeUp { keys: Some(_), .. })));
    let line = keylog::ikev2_line(k);
    let f: Vec<&str> = line.split(',').collect();
    assert_eq!(f.len(), 8);
    assert_eq!(f[0], format!("{:016x}", k.spi_i));
    assert_eq!(f[2].len(), 64);
    assert_eq!(f[4], "\"AES-CBC-256 [RFC3602]\"");
    assert_eq!(f[7], "\"HMAC_SHA2_256_128 [RFC4868]\"");
    assert!(!format!("{k:?}").contains(f[2]));
    let (ca, _) = check_pair(&net);
    let [out, inb] = keylog::esp_sa_lines(&ca);
    assert!(
        out.starts_with(&format!(
            "\"IPv4\",\"10.0.0.1\",\"10.0.0.2\",\"0x{:08x}\",\"AES-CBC [RFC3602]\",\"0x",
            ca.spi_out
        )),
        "{out}"
    );
    assert!(inb.contains("\"HMAC-SHA-256-128 [RFC4868]\""));
    assert!(!format!("{ca:?}").contains(&format!(
        "{:02x}{:02x}{:02x}",
        ca.encr_out[0], ca.encr_out[1], ca.encr_out[2]
    )));
}
