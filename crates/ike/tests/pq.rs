//! Post-quantum IKEv2 between two in-memory endpoints: ML-KEM (draft-ietf-ipsecme-ikev2-mlkem)
//! as the IKE_SA_INIT key exchange and as additional key exchanges (RFC 9370) run in
//! IKE_INTERMEDIATE (RFC 9242), fragmented (RFC 7383) where an ML-KEM key does not fit;
//! the fallback to a proposal without them, and the refusal when the config forbids it.
mod common;
use common::*;
use ipsec_ike::alg::DhGroup;
use ipsec_ike::header::{ExchangeType, HeaderRepr, IkePacket};
use ipsec_ike::payload::kind as pkind;
use ipsec_ike::*;

const ESP: &str = "aes256gcm16";

fn header(t: &Transmit) -> HeaderRepr {
    HeaderRepr::parse(&IkePacket::new_checked(&t.payload[..]).unwrap()).unwrap()
}

/// Datagrams of exchange `x` from A (requests) and from B.
fn of(net: &Net, x: ExchangeType) -> (Vec<&Transmit>, Vec<&Transmit>) {
    let pick = |from_a: bool| {
        net.sent
            .iter()
            .filter(|s| s.from_a == from_a && header(&s.t).exchange == x)
            .map(|s| &s.t)
            .collect::<Vec<_>>()
    };
    (pick(true), pick(false))
}

/// Brings A -> B up with these proposals; both sides' IKE SA and child must be up with the
/// same keys. Returns the net.
fn up(ike_a: &str, ike_b: &str) -> Net {
    let (mut a, mut b) = pair(ike_a, ike_b, ESP, ESP);
    a.export_ike_keys = true;
    b.export_ike_keys = true;
    let mut net = Net::new(a, b);
    net.up();
    let (ia, ib) = (ike_up(&net.events_a), ike_up(&net.events_b));
    assert_eq!(
        (ia.len(), ib.len()),
        (1, 1),
        "{ike_a} / {ike_b}: A {:?} B {:?} drops {:?}",
        net.events_a,
        net.events_b,
        net.drops
    );
    assert_eq!(ia[0].suite, ib[0].suite);
    let (ca, cb) = (child_up(&net.events_a), child_up(&net.events_b));
    assert_eq!((ca.len(), cb.len()), (1, 1));
    assert_eq!(*ca[0].encr_out, *cb[0].encr_in);
    assert_eq!(*ca[0].encr_in, *cb[0].encr_out);
    assert!(net.drops.is_empty(), "{:?}", net.drops);
    net
}

fn ike_keys(ev: &[Event]) -> Vec<u8> {
    ev.iter()
        .find_map(|e| match e {
            Event::IkeUp { keys: Some(k), .. } => Some(k.sk_ei.to_vec()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn x25519_with_mlkem768_in_one_intermediate_exchange() {
    let p = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
    let net = up(p, p);
    let s = ike_up(&net.events_a)[0].suite;
    assert_eq!(s.dh, DhGroup::Curve25519);
    assert_eq!(s.additional().collect::<Vec<_>>(), [(1, DhGroup::MlKem768)]);
    assert_eq!(s.proposal_string(), p);
    let (req, resp) = of(&net, ExchangeType::IkeIntermediate);
    assert!(!req.is_empty() && !resp.is_empty());
    // IKE_AUTH came after it, with message ID 2.
    let (auth, _) = of(&net, ExchangeType::IkeAuth);
    assert_eq!(header(auth[0]).message_id, 2);
    assert_eq!(header(req[0]).message_id, 1);
}

#[test]
fn mlkem1024_alone_in_ike_sa_init() {
    let p = "aes256gcm16-prfsha512-mlkem1024";
    let net = up(p, p);
    let s = ike_up(&net.events_a)[0].suite;
    assert_eq!((s.dh, s.additional().count()), (DhGroup::MlKem1024, 0));
    assert!(of(&net, ExchangeType::IkeIntermediate).0.is_empty());
    // IKE_SA_INIT carries the encapsulation key (1,568 bytes) one way, the ciphertext the other.
    let (i, r) = of(&net, ExchangeType::IkeSaInit);
    assert!(i[0].payload.len() > 1568 && r[0].payload.len() > 1568);
}

#[test]
fn ecp384_with_two_additional_exchanges_fragmented() {
    let p = "aes256gcm16-prfsha384-ecp384-ke1_mlkem768-ke2_mlkem1024";
    let net = up(p, p);
    let s = ike_up(&net.events_a)[0].suite;
    assert_eq!(
        s.additional().collect::<Vec<_>>(),
        [(1, DhGroup::MlKem768), (2, DhGroup::MlKem1024)]
    );
    let (req, resp) = of(&net, ExchangeType::IkeIntermediate);
    let ids: std::collections::BTreeSet<u32> = req.iter().map(|t| header(t).message_id).collect();
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), [1, 2], "one exchange per ADDKE");
    // ML-KEM-1024's 1,568-byte key and ciphertext do not fit 1,280 bytes: fragments (RFC 7383).
    assert!(req.iter().any(|t| header(t).next_payload == pkind::SKF));
    assert!(resp.iter().any(|t| header(t).next_payload == pkind::SKF));
    let (auth, _) = of(&net, ExchangeType::IkeAuth);
    assert_eq!(header(auth[0]).message_id, 3);
}

#[test]
fn every_combination_both_ways() {
    for p in [
        "aes128gcm16-prfsha256-mlkem512",
        "aes256gcm16-prfsha384-mlkem768",
        "aes256-sha384-prfsha384-x25519-ke1_mlkem512",
        "aes128gcm16-prfsha256-ecp256-ke1_mlkem1024",
        "aes256gcm16-prfsha384-mlkem768-ke1_mlkem1024",
        "aes256gcm16-prfsha512-x25519-ke1_mlkem768-ke2_mlkem1024-ke3_mlkem512",
        "aes256gcm16-prfsha384-modp2048-ke1_mlkem768",
        "aes256gcm16-prfsha384-x25519-ke3_mlkem768-ke7_mlkem512",
    ] {
        let net = up(p, p);
        assert_eq!(ike_up(&net.events_b)[0].suite.proposal_string(), p);
    }
}

/// The additional exchange changes the keys: the same run without it gives other SK_e.
#[test]
fn additional_exchange_changes_the_ike_keys() {
    let with = up(
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768",
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768",
    );
    let without = up("aes256gcm16-prfsha384-x25519", "aes256gcm16-prfsha384-x25519");
    assert_eq!(ike_keys(&with.events_a), ike_keys(&with.events_b));
    assert_ne!(ike_keys(&with.events_a), ike_keys(&without.events_a));
}

#[test]
fn none_lets_the_responder_skip_an_additional_exchange() {
    let net = up(
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none",
        "aes256gcm16-prfsha384-x25519",
    );
    assert_eq!(ike_up(&net.events_a)[0].suite.additional().count(), 0);
    assert!(of(&net, ExchangeType::IkeIntermediate).0.is_empty());
}

#[test]
fn fallback_to_a_classic_proposal_when_the_peer_lacks_rfc9370() {
    // B knows no additional key exchange: A's second proposal is chosen.
    let net = up(
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768, aes256gcm16-prfsha384-x25519",
        "aes256gcm16-prfsha384-x25519",
    );
    let s = ike_up(&net.events_a)[0].suite;
    assert_eq!(s.additional().count(), 0);
}

#[test]
fn refused_with_a_clear_reason_when_the_config_forbids_fallback() {
    let (a, b) = pair(
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768",
        "aes256gcm16-prfsha384-x25519",
        ESP,
        ESP,
    );
    let mut net = Net::new(a, b);
    net.up();
    assert!(ike_up(&net.events_a).is_empty());
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::ProposalMismatch { child: None, .. })));
    assert_eq!(downs(&net.events_a), [DownReason::NoProposal]);
    assert_eq!(net.b.ike_sa_count(), 0);
}

/// Child SAs of both sides as (A's inbound SPI, B's inbound SPI), mirrored.
fn pairs(net: &Net) -> Vec<(u32, u32)> {
    let now = net.now;
    let a = net.a.status(now);
    let b = net.b.status(now);
    let mut v: Vec<(u32, u32)> = a
        .iter()
        .flat_map(|s| s.children.iter())
        .filter(|c| c.state == "installed")
        .map(|c| (c.spi_in, c.spi_out))
        .collect();
    v.sort();
    let mut w: Vec<(u32, u32)> = b
        .iter()
        .flat_map(|s| s.children.iter())
        .filter(|c| c.state == "installed")
        .map(|c| (c.spi_out, c.spi_in))
        .collect();
    w.sort();
    assert_eq!(v, w, "A and B install mirrored pairs");
    v
}

/// IKE_FOLLOWUP_KE exchanges: (requests, responses), each message once however many
/// fragments it took.
fn followups(net: &Net) -> (usize, usize) {
    let mut req = std::collections::BTreeSet::new();
    let mut resp = std::collections::BTreeSet::new();
    for s in &net.sent {
        let h = header(&s.t);
        if h.exchange == ExchangeType::IkeFollowupKe {
            if h.response { &mut resp } else { &mut req }.insert((h.spi_i, h.message_id));
        }
    }
    (req.len(), resp.len())
}

/// RFC 9370 2.2.4: a child rekey with PFS and two additional key exchanges runs
/// CREATE_CHILD_SA then two IKE_FOLLOWUP_KE; the new pair's keys match on both sides and
/// differ from the same rekey without the additional exchanges.
#[test]
fn child_rekey_with_additional_key_exchanges_either_side() {
    for from_a in [true, false] {
        let ike = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
        let esp = "aes256gcm16-x25519-ke1_mlkem768-ke2_mlkem512";
        let (a, b) = pair(ike, ike, esp, esp);
        let mut net = Net::new(a, b);
        net.up();
        let before = pairs(&net);
        assert_eq!(before.len(), 1);
        if from_a {
            net.a.rekey_child(net.now, before[0].0, &mut net.rng).unwrap();
        } else {
            net.b.rekey_child(net.now, before[0].1, &mut net.rng).unwrap();
        }
        net.pump();
        let after = pairs(&net);
        assert_eq!(after.len(), 1, "old pair deleted: {:?}", net.events_a);
        assert_ne!(after, before);
        assert_eq!(followups(&net), (2, 2), "one IKE_FOLLOWUP_KE per ADDKE");
        let last = |ev: &[Event]| {
            ev.iter()
                .rev()
                .find_map(|e| match e {
                    Event::ChildUp(c) => Some(c.clone()),
                    _ => None,
                })
                .unwrap()
        };
        let (ca, cb) = (last(&net.events_a), last(&net.events_b));
        assert!(ca.rekeys.is_some() && cb.rekeys.is_some());
        assert_eq!(*ca.encr_out, *cb.encr_in);
        assert_eq!(*ca.encr_in, *cb.encr_out);
        assert!(net.drops.is_empty(), "{:?}", net.drops);
        assert!(downs(&net.events_a).is_empty() && downs(&net.events_b).is_empty());
    }
}

/// An IKE SA rekey with its proposal's additional key exchange: CREATE_CHILD_SA then one
/// IKE_FOLLOWUP_KE; the new SA works (a child rekey over it, then a Delete).
#[test]
fn ike_rekey_with_an_additional_key_exchange_either_side() {
    for from_a in [true, false] {
        let ike = "aes256gcm16-prfsha384-x25519-ke1_mlkem1024";
        let (a, b) = pair(ike, ike, ESP, ESP);
        let mut net = Net::new(a, b);
        net.up();
        let before = pairs(&net);
        if from_a {
            net.a.rekey_ike(net.now, "a2b", &mut net.rng).unwrap();
        } else {
            net.b.rekey_ike(net.now, "b2a", &mut net.rng).unwrap();
        }
        net.pump();
        for ev in [&net.events_a, &net.events_b] {
            let info = ev
                .iter()
                .find_map(|e| match e {
                    Event::IkeRekeyed { info, .. } => Some(info.clone()),
                    _ => None,
                })
                .expect("rekeyed");
            assert_eq!(info.suite.proposal_string(), ike);
            assert_eq!(downs(ev), [DownReason::Rekeyed]);
        }
        assert_eq!(followups(&net), (1, 1));
        assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (1, 1));
        assert_eq!(pairs(&net), before);
        net.a.rekey_child(net.now, before[0].0, &mut net.rng).unwrap();
        net.pump();
        assert_eq!(pairs(&net).len(), 1);
        net.a.terminate(net.now, "a2b", &mut net.rng).unwrap();
        net.pump();
        assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (0, 0));
        assert!(net.drops.is_empty(), "{:?}", net.drops);
    }
}

/// A new child by CREATE_CHILD_SA with an additional key exchange.
#[test]
fn new_child_with_an_additional_key_exchange() {
    let ike = "aes256gcm16-prfsha384-mlkem768";
    let esp = "aes256gcm16-mlkem768-ke1_mlkem1024";
    let (mut a, mut b) = pair(ike, ike, esp, esp);
    a.connections[0]
        .children
        .push(ChildConfig::new("two", "10.5.0.0/16", "10.6.0.0/16", esp).unwrap());
    b.connections[0]
        .children
        .push(ChildConfig::new("two", "10.6.0.0/16", "10.5.0.0/16", esp).unwrap());
    let mut net = Net::new(a, b);
    net.up();
    net.a
        .initiate_child(net.now, net.a.child_id("a2b", "two").unwrap(), &mut net.rng)
        .unwrap();
    net.pump();
    assert_eq!(pairs(&net).len(), 2, "{:?} {:?}", net.events_a, net.drops);
    assert_eq!(followups(&net), (1, 1));
}
